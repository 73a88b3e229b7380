"""check_grid.py - a "shardload dump --out F.png" grid against the same
batch dumped as u8 NHWC .npy.

  check_grid.py PNG NPY COLUMNS

PIL must open the PNG as an 8-bit RGB image. As shardload(1) describes the
grid: COLUMNS columns (0: the square root of the batch size rounded up),
as many rows as needed, each image under a 14-pixel strip that holds its
label in white, images 2 pixels apart on black. So the grid is
cols*S + 2*(cols-1) wide, plus up to 2 pixels of margin on each side, and
rows*(S+14) + 2*(rows-1) high, plus the same. Every image of the .npy must
appear in the PNG exactly, in row-major order, at its cell; each label
strip has white pixels and nothing outside the images and strips is lit
but the digits.
"""

import math
import sys

import numpy as np
from PIL import Image

from sktest import check, fail, say

LABEL_H, GAP = 14, 2


def main():
    if len(sys.argv) != 4:
        fail("usage: check_grid.py PNG NPY COLUMNS")
    png, npy, cols = sys.argv[1], sys.argv[2], int(sys.argv[3])
    im = Image.open(png)
    im.load()
    check(im.format == "PNG", "%s: PIL reads it as %s, not PNG" % (png, im.format))
    check(im.mode == "RGB", "%s: mode %s, want RGB" % (png, im.mode))
    g = np.asarray(im)
    a = np.load(npy)
    check(a.dtype == np.uint8 and a.ndim == 4 and a.shape[1] == a.shape[2] and a.shape[3] == 3,
          "%s: %s %s is not u8 NHWC" % (npy, a.dtype, a.shape))
    n, S = a.shape[0], a.shape[1]
    if cols == 0:
        cols = int(math.ceil(math.sqrt(n)))
    cols = min(cols, n)
    rows = -(-n // cols)
    W, H = im.size
    w0 = cols * S + GAP * (cols - 1)
    h0 = rows * (S + LABEL_H) + GAP * (rows - 1)
    check(w0 <= W <= w0 + 2 * GAP and h0 <= H <= h0 + 2 * GAP,
          "%s: %dx%d, want %dx%d plus at most %d pixels of margin on each side (%d images of %d, %d columns)"
          % (png, W, H, w0, h0, GAP, n, S, cols))
    mx, my = (W - w0) // 2, (H - h0) // 2
    lit = np.zeros(g.shape[:2], bool)
    for i in range(n):
        x0 = mx + (i % cols) * (S + GAP)
        y0 = my + (i // cols) * (S + LABEL_H + GAP)
        cell = g[y0 + LABEL_H:y0 + LABEL_H + S, x0:x0 + S]
        check(np.array_equal(cell, a[i]), "%s: image %d is not at row %d, column %d as in %s"
              % (png, i, i // cols, i % cols, npy))
        strip = g[y0:y0 + LABEL_H, x0:x0 + S]
        check((strip == 255).all(axis=2).any(), "%s: image %d has no white label digits above it" % (png, i))
        check(((strip == 0) | (strip == 255)).all(), "%s: image %d's label strip is not white on black" % (png, i))
        lit[y0:y0 + LABEL_H + S, x0:x0 + S] = True
    check((g[~lit] == 0).all(), "%s: pixels outside the cells are not black" % png)
    say("%s: %dx%d, %d images of %dx%d in %d columns and %d rows, each as in %s"
        % (png, W, H, n, S, S, cols, rows, npy))


main()
