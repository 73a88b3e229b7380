"""check_boxes.py - the crop boxes and flips of "shardload keys --boxes".

  check_boxes.py random-resized SCALE RATIO FLIP MINN FALLBACKS FILE...
  check_boxes.py center SIZE RESIZE FILE...
  check_boxes.py none FILE...

Each line: epoch batch index key label src_w src_h x y w h flip.

random-resized, as torchvision's RandomResizedCrop.get_params: every box
has whole-pixel corners and lies inside the image; either it is a drawn
box, whose area fraction and aspect w/h lie in SCALE ("A,B") and RATIO
("A,B") allowing for the rounding of w and h to whole pixels (w and h are
round(sqrt(area * aspect)) and round(sqrt(area / aspect))), or it is the
fallback: the whole image cropped to the nearest aspect in RATIO, centred.
FLIP "half": between 40% and 60% of the boxes are flipped; "off": none.
There must be at least MINN lines and the boxes of one key must differ
between epochs. FALLBACKS "few": at most 5% of the boxes are fallbacks,
and the areas and aspects drawn spread over most of their ranges; "some":
at least 10% are fallbacks and at least one box is drawn (a SCALE that
many images' shapes cannot meet within RATIO). Prints the counts.

center: the box is torchvision's Resize(RESIZE) + CenterCrop(SIZE) mapped
back to the source (the short side scaled to RESIZE, the long side to
int(RESIZE * long / short), top = int(round((h - SIZE) / 2.0))), and no
flips. none: the box is the whole image, no flips.
"""

import math
import sys

from sktest import check, fail, say

EPS = 1e-9


def read(files):
    rows = []
    for path in files:
        with open(path) as f:
            for line in f:
                p = line.rstrip("\n").split("\t")
                check(len(p) == 12, "%s: %r does not have 12 fields" % (path, line))
                rows.append((int(p[0]), p[3], int(p[5]), int(p[6]),
                             float(p[7]), float(p[8]), float(p[9]), float(p[10]), int(p[11]), path))
    return rows


def pair(s):
    a, b = (float(v) for v in s.split(","))
    return a, b


def fallback(W, H, ratio):
    """torchvision's central crop when 10 draws fail."""
    in_ratio = W / H
    if in_ratio < min(ratio):
        w = W
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = H
        w = int(round(h * max(ratio)))
    else:
        w, h = W, H
    return (W - w) // 2, (H - h) // 2, w, h


def check_rrc(rows, scale, ratio, flip, minn, fallbacks):
    check(len(rows) >= minn, "%d boxes, want at least %d" % (len(rows), minn))
    nfall = nflip = 0
    areas, aspects = [], []
    by_key = {}
    for e, key, W, H, x, y, w, h, fl, path in rows:
        where = "%s: epoch %d %s (%dx%d) box %g,%g %gx%g" % (path, e, key, W, H, x, y, w, h)
        check(all(v == int(v) for v in (x, y, w, h)), where + ": corners are not whole pixels")
        x, y, w, h = int(x), int(y), int(w), int(h)
        check(W > 0 and H > 0, where + ": no source size")
        check(w >= 1 and h >= 1 and x >= 0 and y >= 0 and x + w <= W and y + h <= H,
              where + ": not inside the image")
        check(fl in (0, 1), where + ": flip is %d" % fl)
        nflip += fl
        if (x, y, w, h) == fallback(W, H, ratio):
            nfall += 1
            continue
        by_key.setdefault(key, {})[e] = (x, y, w, h, fl)
        # w = round(sqrt(t*r)), h = round(sqrt(t/r)): w*h and w/h give t and r
        # up to the rounding of w and h by half a pixel each.
        a_lo, a_hi = (w - 0.5) * (h - 0.5), (w + 0.5) * (h + 0.5)
        r_lo, r_hi = (w - 0.5) / (h + 0.5), (w + 0.5) / (h - 0.5) if h > 0.5 else math.inf
        area = W * H
        check(a_hi >= scale[0] * area - EPS and a_lo <= scale[1] * area + EPS,
              where + ": area fraction %.4f is outside %s even allowing for rounding" % (w * h / area, scale))
        check(r_hi >= ratio[0] - EPS and r_lo <= ratio[1] + EPS,
              where + ": aspect %.4f is outside %s even allowing for rounding" % (w / h, ratio))
        areas.append(w * h / area)
        aspects.append(w / h)
    n = len(rows)
    if flip == "half":
        check(0.4 * n <= nflip <= 0.6 * n, "%d of %d boxes flipped, want about half" % (nflip, n))
    else:
        check(nflip == 0, "%d boxes flipped with --no-flip" % nflip)
    if fallbacks == "some":
        check(nfall >= 0.1 * n and areas, "%d of %d boxes are fallbacks, want at least 10%% and not all"
              % (nfall, n))
    else:
        check(nfall <= 0.05 * n, "%d of %d boxes are fallbacks, want at most 5%%" % (nfall, n))
    say("%d boxes (scale %s, ratio %s): %d drawn, area %.3f..%.3f, aspect %.3f..%.3f; %d fallbacks; %d flipped"
        % (n, scale, ratio, len(areas), min(areas), max(areas), min(aspects), max(aspects), nfall, nflip))
    same = sum(1 for eps in by_key.values() for e in eps if e > 0 and 0 in eps and eps[e] == eps[0])
    pairs = sum(1 for eps in by_key.values() for e in eps if e > 0 and 0 in eps)
    check(pairs == 0 or same <= pairs // 10, "%d of %d keys have the same drawn box in a later epoch" % (same, pairs))
    if fallbacks == "some":
        return
    # The draws cover their ranges (uniform area, log-uniform aspect).
    span = scale[1] - scale[0]
    check(min(areas) <= scale[0] + 0.25 * span + 0.01 and max(areas) >= scale[1] - 0.25 * span - 0.01,
          "area fractions %.3f..%.3f do not spread over %s" % (min(areas), max(areas), scale))
    lspan = math.log(ratio[1]) - math.log(ratio[0])
    if lspan > 0.1:
        check(math.log(min(aspects)) <= math.log(ratio[0]) + 0.3 * lspan and
              math.log(max(aspects)) >= math.log(ratio[1]) - 0.3 * lspan,
              "aspects %.3f..%.3f do not spread over %s" % (min(aspects), max(aspects), ratio))


def check_center(rows, size, resize):
    check(rows, "no boxes")
    for e, key, W, H, x, y, w, h, fl, path in rows:
        if W <= H:
            ow, oh = resize, int(resize * H / W)
        else:
            oh, ow = resize, int(resize * W / H)
        top = int(round((oh - size) / 2.0))
        left = int(round((ow - size) / 2.0))
        want = (left * W / ow, top * H / oh, size * W / ow, size * H / oh)
        got = (x, y, w, h)
        check(all(abs(a - b) <= 0.0015 for a, b in zip(got, want)),
              "%s: %s (%dx%d): center box %s, want %s" % (path, key, W, H, got,
                                                          tuple(round(v, 3) for v in want)))
        check(fl == 0, "%s: %s flipped with --crop center --no-flip" % (path, key))
    say("%d center boxes as Resize(%d) + CenterCrop(%d)" % (len(rows), resize, size))


def check_none(rows):
    check(rows, "no boxes")
    for e, key, W, H, x, y, w, h, fl, path in rows:
        check((x, y, w, h) == (0, 0, W, H), "%s: %s: box %s, want the whole %dx%d image"
              % (path, key, (x, y, w, h), W, H))
        check(fl == 0, "%s: %s flipped with --no-flip" % (path, key))
    say("%d boxes, each the whole image" % len(rows))


def main():
    if len(sys.argv) < 3:
        fail("usage: see check_boxes.py's docstring")
    mode = sys.argv[1]
    if mode == "random-resized":
        check_rrc(read(sys.argv[7:]), pair(sys.argv[2]), pair(sys.argv[3]), sys.argv[4], int(sys.argv[5]),
                  sys.argv[6])
    elif mode == "center":
        check_center(read(sys.argv[4:]), int(sys.argv[2]), int(sys.argv[3]))
    elif mode == "none":
        check_none(read(sys.argv[2:]))
    else:
        fail("check_boxes.py: unknown mode %s" % mode)


main()
