"""make_folder.py - write a small SRC/CLASS/IMAGE tree for "pack folder".

  make_folder.py DIR

Classes whose bytewise order differs from a case-blind one ("Mango" sorts
before "apple"), JPEG and PNG files, a stem with dots, an uppercase
extension, a grayscale JPEG, and a hidden file that must be left out.
"""

import os
import sys

from PIL import Image


def image(w, h, seed, mode="RGB"):
    im = Image.new("RGB", (w, h))
    px = im.load()
    for y in range(h):
        for x in range(w):
            px[x, y] = ((x * 7 + seed * 31) % 256, (y * 5 + seed * 17) % 256, ((x ^ y) + seed) % 256)
    return im.convert(mode)


def main():
    d = sys.argv[1]
    files = {
        "zebra/z1.jpg": ("JPEG", "RGB"),
        "zebra/z0.png": ("PNG", "RGB"),
        "apple/a.b.c.jpg": ("JPEG", "RGB"),
        "apple/IMG_0001.JPG": ("JPEG", "RGB"),
        "apple/gray.jpeg": ("JPEG", "L"),
        "Mango/m1.png": ("PNG", "RGB"),
        "Mango/m2.jpg": ("JPEG", "RGB"),
    }
    for i, (rel, (fmt, mode)) in enumerate(sorted(files.items())):
        path = os.path.join(d, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        image(40 + 3 * i, 30 + 2 * i, i, mode).save(path, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    with open(os.path.join(d, "apple", ".DS_Store"), "wb") as f:
        f.write(b"\0\0\0\1Bud1 not an image")


main()
