"""check_center.py - the pixels of "shardload dump" against torchvision's
transforms done by hand with PIL.

  check_center.py center NPY KEYS S R BOUNDS SHARD...
  check_center.py rrc NPY BOXES S BOUNDS SHARD...

center: NPY is "dump --crop center --image-size S --resize R --no-flip
--dtype u8" output, KEYS its stdout (index<TAB>key<TAB>label). The
reference is torchvision's Resize(R) + CenterCrop(S) on a PIL image:
img.convert('RGB'); the short side to R, the long side int(R * long /
short), Image.BILINEAR (antialiased, as torchvision's PIL path is); then
top = int(round((h - S) / 2.0)), left likewise.

rrc: NPY is a dump with --crop random-resized, BOXES the "keys --boxes"
lines of the same first batch (epoch batch index key label src_w src_h x y
w h flip). The reference is torchvision's resized_crop: img.crop(box)
.resize((S, S), Image.BILINEAR), mirrored when flip is 1.

BOUNDS is "MEAN,MAX" or "MEAN,MAX,DCTMEAN,DCTMAX": the largest mean and
largest single absolute difference allowed per image against the
reference, and, with four numbers, against a second reference that decodes
the JPEG at the DCT scale shardload(1) documents (1/2, 1/4 or 1/8: the
smallest that keeps the crop at least S pixels on both sides; PIL's
draft(), which is libjpeg's scaling too) and resizes the crop box scaled to
it. The first reference is what a model trained with torchvision sees;
the second shows that what differs from it is the DCT scaling alone.
Each image's label must be its shard's .cls. Prints the worst of each.
"""

import io
import sys

import numpy as np
from PIL import Image

from sktest import check, fail, say, tar_samples

IMAGE_EXTS = ("jpg", "jpeg", "png")


def shard_images(shards):
    """key -> (image bytes, label or None) over the shards."""
    out = {}
    for s in shards:
        for key, members in tar_samples(s):
            img = None
            lower = {e.lower(): d for e, d in members.items() if e is not None}
            for ext in IMAGE_EXTS:
                if ext in lower:
                    img = lower[ext]
                    break
            label = None
            if "cls" in members:
                label = int(members["cls"].decode().strip())
            out[key] = (img, label)
    return out


def load_npy(path, n, size):
    a = np.load(path)
    check(a.dtype == np.uint8, "%s: dtype %s, want uint8" % (path, a.dtype))
    check(a.shape == (n, size, size, 3),
          "%s: shape %s, want (%d, %d, %d, 3)" % (path, a.shape, n, size, size))
    return a


def read_dump_keys(path):
    """[(key, label)] from dump's stdout."""
    rows = []
    with open(path) as f:
        for i, line in enumerate(f):
            parts = line.rstrip("\n").split("\t")
            check(len(parts) == 3, "%s: %r is not index<TAB>key<TAB>label" % (path, line))
            check(int(parts[0]) == i, "%s: line %d has index %s" % (path, i + 1, parts[0]))
            rows.append((parts[1], int(parts[2]), None))
    return rows


def read_boxes(path):
    """[(key, label, (x, y, w, h, flip))] of batch 0 of epoch 0."""
    rows = []
    with open(path) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            check(len(p) == 12, "%s: %r does not have 12 fields" % (path, line))
            if p[0] != "0" or p[1] != "0":
                continue
            check(int(p[2]) == len(rows), "%s: batch 0 index %s out of order" % (path, p[2]))
            box = tuple(float(v) for v in p[7:11])
            check(all(v == int(v) for v in box), "%s: %s: box %s has fractional corners" % (path, p[3], box))
            rows.append((p[3], int(p[4]), tuple(int(v) for v in box) + (int(p[11]),)))
    return rows


def center_box(w, h, size, resize):
    """torchvision Resize(resize) + CenterCrop(size): the resized size and
    the crop in resized pixels."""
    if w <= h:
        ow, oh = resize, int(resize * h / w)
    else:
        oh, ow = resize, int(resize * w / h)
    top = int(round((oh - size) / 2.0))
    left = int(round((ow - size) / 2.0))
    return ow, oh, left, top


def reference(data, size, mode, arg, dct):
    """The expected S x S x 3 image. arg: R for center, the box for rrc.
    dct: decode at the documented DCT scale and resize the box from it."""
    im = Image.open(io.BytesIO(data))
    w, h = im.size
    if mode == "center":
        ow, oh, left, top = center_box(w, h, size, arg)
        # The crop in source pixels, as torchvision's resize maps it.
        box = (left * w / ow, top * h / oh, (left + size) * w / ow, (top + size) * h / oh)
        flip = 0
    else:
        x, y, bw, bh, flip = arg
        box = (x, y, x + bw, y + bh)
    d = 1
    if dct and im.format == "JPEG":
        for dd in (2, 4, 8):
            if (box[2] - box[0]) / dd >= size and (box[3] - box[1]) / dd >= size:
                d = dd
        if d > 1:
            im.draft("RGB", (w // d, h // d))
            check(im.size == ((w + d - 1) // d, (h + d - 1) // d),
                  "PIL's draft gave %s for 1/%d of %dx%d" % (im.size, d, w, h))
    im = im.convert("RGB")
    if d == 1:
        dct = False     # no scaling: the references are one
    if mode == "center" and not dct:
        # Literally torchvision: resize the whole image, then crop.
        if (ow, oh) != (w, h):
            im = im.resize((ow, oh), Image.BILINEAR)
        im = im.crop((left, top, left + size, top + size))
    elif mode == "center":
        im = im.resize((size, size), Image.BILINEAR, box=tuple(v / d for v in box))
    elif not dct:
        im = im.crop(box).resize((size, size), Image.BILINEAR)
    else:
        # torchvision crops before it resizes, so the filter sees no
        # pixel outside the box; at 1/d the box has fractional corners:
        # crop to the whole pixels around it, resize the rest of it.
        sb = [v / d for v in box]
        fx, fy = int(np.floor(sb[0])), int(np.floor(sb[1]))
        im = im.crop((fx, fy, int(np.ceil(sb[2])), int(np.ceil(sb[3]))))
        im = im.resize((size, size), Image.BILINEAR,
                       box=(sb[0] - fx, sb[1] - fy, sb[2] - fx, sb[3] - fy))
    a = np.asarray(im, dtype=np.uint8)
    if flip:
        a = a[:, ::-1]
    return a, (w, h), d


def main():
    if len(sys.argv) < 6:
        fail("usage: see the docstring of check_center.py")
    mode = sys.argv[1]
    if mode == "center":
        npy, keys, size, arg, bounds = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
        shards = sys.argv[7:]
        rows = read_dump_keys(keys)
    elif mode == "rrc":
        npy, keys, size, bounds = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
        arg = None
        shards = sys.argv[6:]
        rows = read_boxes(keys)
    else:
        fail("check_center.py: unknown mode %s" % mode)
    b = [float(v) for v in bounds.split(",")]
    check(len(b) in (2, 4), "bounds %s: want MEAN,MAX or MEAN,MAX,DCTMEAN,DCTMAX" % bounds)
    check(rows, "%s: no images" % keys)
    a = load_npy(npy, len(rows), size)
    imgs = shard_images(shards)
    worst = {False: [0.0, 0], True: [0.0, 0]}
    scales = {}
    for i, (key, label, box) in enumerate(rows):
        check(key in imgs, "key %s of the dump is in none of the shards" % key)
        data, want_label = imgs[key]
        check(data is not None, "%s has no image member" % key)
        check(label == want_label, "%s: label %d, the shard's .cls says %s" % (key, label, want_label))
        for dct in ((False, True) if len(b) == 4 else (False,)):
            ref, (w, h), d = reference(data, size, mode, box if mode == "rrc" else arg, dct)
            diff = np.abs(a[i].astype(np.int32) - ref.astype(np.int32))
            mean, mx = float(diff.mean()), int(diff.max())
            lim_mean, lim_max = (b[2], b[3]) if dct else (b[0], b[1])
            what = "DCT-scale reference (1/%d)" % d if dct else "torchvision reference"
            say("%s %dx%d%s: %s: mean abs diff %.3f, max %d" %
                (key, w, h, " box %s" % (box,) if box else "", what, mean, mx))
            if dct:
                scales[d] = scales.get(d, 0) + 1
            worst[dct][0] = max(worst[dct][0], mean)
            worst[dct][1] = max(worst[dct][1], mx)
            check(mean <= lim_mean, "%s: against the %s, mean abs diff %.3f is over %g" % (key, what, mean, lim_mean))
            check(mx <= lim_max, "%s: against the %s, max abs diff %d is over %g" % (key, what, mx, lim_max))
    say("%s, %d images, S=%d: against torchvision: worst mean abs diff %.3f (bound %g), worst max %d (bound %g)"
        % (mode, len(rows), size, worst[False][0], b[0], worst[False][1], b[1]))
    if len(b) == 4:
        say("  against the DCT-scale reference (scales %s): worst mean %.3f (bound %g), worst max %d (bound %g)"
            % (", ".join("1/%d: %d" % kv for kv in sorted(scales.items())),
               worst[True][0], b[2], worst[True][1], b[3]))


main()
