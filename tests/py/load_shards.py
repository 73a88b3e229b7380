"""load_shards.py - shards for the shardload tests that shardtool would not
write: raw odd images, and damaged or unusual shards with a manifest that
says what a loader should count.

  load_shards.py odd IMAGENET_DIR OUT.tar
      the three odd training images of "shardtool synth imagenet" (a
      grayscale JPEG, an Adobe CMYK JPEG and a PNG named .JPEG) stored as
      they are, as .jpg members with a .cls, as the real ImageNet has them.

  load_shards.py bad OUTDIR
      OUTDIR/{good,corrupt,labels,trunc,pax,big}.tar, each 8 samples (keys
      NAME_0 .. NAME_7), plus OUTDIR/all.json (a manifest of the six with
      the counts the shards were written with), OUTDIR/NAME.json for each,
      OUTDIR/expect.json (the skip counts and delivered keys to expect with
      --max-pixels 10000) and OUTDIR/garbage.tar (random bytes):
        good     plain ustar, every sample fine
        corrupt  NAME_3's JPEG has its entropy data overwritten
        labels   NAME_2 has no .cls, NAME_5's .cls is "cat", NAME_6 has no
                 image (only .cls and .txt)
        trunc    the file is cut in the middle of NAME_5's image, so NAME_5,
                 _6 and _7 are lost (the manifest still counts 8)
        pax      written by webdataset's ShardWriter: a PAX header before
                 every member
        big      NAME_4 is 200x150 (30000 pixels), the others 64x48
      and OUTDIR/weird.tar and weird.json, not in all.json: weird_0 has an
      empty .jpg, _1 a JPEG whose header says 60000 x 60000, _2 the first
      third of a JPEG, _3 text in a .jpg, _4 a 1x1 JPEG, _5 a 1x1 PNG, _6
      the label " 6\n", _7 the label "-1".
"""

import io
import json
import os
import sys
import tarfile

import numpy as np
from PIL import Image

from sktest import check, fail, md5_of, say, tar_samples

MAX_PIXELS = 10000


def jpeg(seed, w=64, h=48):
    """A small JPEG with structure and noise, different per seed."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([(x * 4 + seed * 17) % 256, (y * 5 + seed * 3) % 256, ((x + y) * 3) % 256], -1)
    a = np.clip(a + rng.integers(-20, 20, a.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def corrupt_entropy(j):
    """Overwrite 80 bytes at the start of the entropy-coded data with
    restart markers, which libjpeg reports as corrupt data."""
    i = j.index(b"\xff\xda")
    start = i + 2 + (j[i + 2] << 8 | j[i + 3])
    check(start + 100 < len(j), "JPEG too small to corrupt")
    return j[:start + 4] + bytes([0xff, 0xd3]) * 40 + j[start + 84:]


def add(tf, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 1600000000
    ti.mode = 0o444
    tf.addfile(ti, io.BytesIO(data))


def write_tar(path, samples):
    """samples: [(key, [(ext, data), ...])], plain ustar."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
        for key, members in samples:
            for ext, data in members:
                add(tf, "%s.%s" % (key, ext), data)


def plain(name, n=8, seed=0):
    return [("%s_%d" % (name, i), [("jpg", jpeg(seed + i)), ("cls", b"%d" % (i % 4))])
            for i in range(n)]


def manifest(path, shards, counts):
    base = os.path.dirname(path)
    man = {"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": []}
    for s, n in zip(shards, counts):
        p = os.path.join(base, s)
        man["shardlist"].append({"url": s, "nsamples": n, "filesize": os.path.getsize(p),
                                 "md5sum": md5_of(p)})
    with open(path, "w") as f:
        json.dump(man, f, indent=2)


def odd(src, out):
    names = ["n01007535_1", "n01007535_2", "n01007535_3"]
    samples = []
    modes = []
    for n in names:
        path = os.path.join(src, "train", "n01007535", n + ".JPEG")
        with open(path, "rb") as f:
            data = f.read()
        im = Image.open(io.BytesIO(data))
        modes.append("%s %s" % (im.format, im.mode))
        samples.append(("odd_" + n, [("jpg", data), ("cls", b"0")]))
    check(modes == ["JPEG L", "JPEG CMYK", "PNG RGB"],
          "the odd synth images are %s, want a gray JPEG, a CMYK JPEG and a PNG" % modes)
    write_tar(out, samples)
    say("%s: %s" % (out, ", ".join(modes)))


def bad(out):
    import webdataset as wds

    os.makedirs(out, exist_ok=True)
    delivered = []
    skipped = {"decode": 0, "too_big": 0, "no_image": 0, "no_label": 0, "damaged": 0}

    s = plain("good", seed=0)
    write_tar(os.path.join(out, "good.tar"), s)
    delivered += [k for k, _ in s]

    s = plain("corrupt", seed=10)
    s[3] = (s[3][0], [("jpg", corrupt_entropy(s[3][1][0][1])), s[3][1][1]])
    write_tar(os.path.join(out, "corrupt.tar"), s)
    delivered += [k for i, (k, _) in enumerate(s) if i != 3]
    skipped["decode"] += 1

    s = plain("labels", seed=20)
    s[2] = (s[2][0], [("jpg", s[2][1][0][1])])
    s[5] = (s[5][0], [("jpg", s[5][1][0][1]), ("cls", b"cat")])
    s[6] = (s[6][0], [("cls", b"1"), ("txt", b"no image here")])
    write_tar(os.path.join(out, "labels.tar"), s)
    delivered += [k for i, (k, _) in enumerate(s) if i not in (2, 5, 6)]
    skipped["no_label"] += 2
    skipped["no_image"] += 1

    s = plain("trunc", seed=30)
    path = os.path.join(out, "trunc.tar")
    write_tar(path, s)
    with tarfile.open(path, "r:") as tf:
        ti = [t for t in tf if t.name == "trunc_5.jpg"][0]
    cut = ti.offset_data + ti.size // 2
    with open(path, "r+b") as f:
        f.truncate(cut)
    delivered += [k for i, (k, _) in enumerate(s) if i < 5]
    skipped["damaged"] += 3

    s = plain("pax", seed=40)
    with wds.ShardWriter(os.path.join(out, "pax-%d.tar"), maxcount=100, verbose=0) as sink:
        for key, members in s:
            d = {"__key__": key}
            d.update(members)
            sink.write(d)
    os.rename(os.path.join(out, "pax-0.tar"), os.path.join(out, "pax.tar"))
    with tarfile.open(os.path.join(out, "pax.tar"), "r:") as tf:
        tis = list(tf)
    check(tis and all(ti.pax_headers for ti in tis),
          "webdataset wrote %d of %d members with a PAX header; the test wants every one"
          % (sum(bool(ti.pax_headers) for ti in tis), len(tis)))
    check([k for k, _ in tar_samples(os.path.join(out, "pax.tar"))] == [k for k, _ in s],
          "pax.tar does not hold the keys written")
    delivered += [k for k, _ in s]

    s = plain("big", seed=50)
    s[4] = (s[4][0], [("jpg", jpeg(54, 200, 150)), s[4][1][1]])
    write_tar(os.path.join(out, "big.tar"), s)
    delivered += [k for i, (k, _) in enumerate(s) if i != 4]
    skipped["too_big"] += 1

    # Odd members (not in all.json): decode 3, too_big 1, no_label 1.
    tiny = io.BytesIO()
    Image.new("RGB", (1, 1), (200, 10, 30)).save(tiny, "JPEG")
    tiny_png = io.BytesIO()
    Image.new("RGB", (1, 1), (20, 100, 30)).save(tiny_png, "PNG")
    j = jpeg(60)
    i = j.index(b"\xff\xc0")           # SOF0: claim 60000 x 60000
    bomb = j[:i + 5] + bytes([0xea, 0x60, 0xea, 0x60]) + j[i + 9:]
    s = [("weird_0", [("jpg", b""), ("cls", b"0")]),
         ("weird_1", [("jpg", bomb), ("cls", b"1")]),
         ("weird_2", [("jpg", j[:len(j) // 3]), ("cls", b"2")]),
         ("weird_3", [("jpg", b"hello, not an image"), ("cls", b"3")]),
         ("weird_4", [("jpg", tiny.getvalue()), ("cls", b"4")]),
         ("weird_5", [("png", tiny_png.getvalue()), ("cls", b"5")]),
         ("weird_6", [("jpg", jpeg(66)), ("cls", b" 6 \n")]),
         ("weird_7", [("jpg", jpeg(67)), ("cls", b"-1")])]
    write_tar(os.path.join(out, "weird.tar"), s)
    manifest(os.path.join(out, "weird.json"), ["weird.tar"], [8])

    names = ["good", "corrupt", "labels", "pax", "big", "trunc"]
    for n in names:
        manifest(os.path.join(out, n + ".json"), [n + ".tar"], [8])
    manifest(os.path.join(out, "all.json"), [n + ".tar" for n in names], [8] * len(names))

    rng = np.random.default_rng(7)
    with open(os.path.join(out, "garbage.tar"), "wb") as f:
        f.write(rng.integers(1, 256, 20000, dtype=np.uint8).tobytes())
    manifest(os.path.join(out, "garbage.json"), ["garbage.tar"], [5])

    expect = {"samples": len(delivered), "planned": 8 * len(names), "skipped": skipped,
              "skipped_total": sum(skipped.values()), "keys": sorted(delivered),
              "max_pixels": MAX_PIXELS}
    with open(os.path.join(out, "expect.json"), "w") as f:
        json.dump(expect, f, indent=2)
    say("%s: %d shards, %d samples planned, %d to deliver, skips %s" %
        (out, len(names), expect["planned"], expect["samples"], skipped))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "odd":
        odd(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "bad":
        bad(sys.argv[2])
    else:
        fail("usage: load_shards.py odd IMAGENET_DIR OUT.tar | bad OUTDIR")


main()
