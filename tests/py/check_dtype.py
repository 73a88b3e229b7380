"""check_dtype.py - a float dump against the u8 dump of the same batch.

  check_dtype.py U8.npy OTHER.npy DTYPE LAYOUT MEAN STD

U8.npy is "dump --dtype u8 --layout nhwc", OTHER.npy the same batch with
--dtype DTYPE (f32, f16 or bf16) and --layout LAYOUT (nhwc or nchw), and
--mean MEAN --std STD ("A,B,C"). Per shardload(1): shape (n, S, S, 3) for
nhwc and (n, 3, S, S) for nchw, dtype <f4, <f2 or <u2 (bf16's raw 16 bits,
which shifted left by 16 are float32), each value (v / 255 - mean) / std
of channel c, to the precision of the dtype (rounded to nearest).
"""

import sys

import numpy as np

from sktest import check, fail, say


def main():
    if len(sys.argv) != 7:
        fail("usage: check_dtype.py U8.npy OTHER.npy DTYPE LAYOUT MEAN STD")
    u8 = np.load(sys.argv[1])
    o = np.load(sys.argv[2])
    dtype, layout = sys.argv[3], sys.argv[4]
    mean = np.array([float(v) for v in sys.argv[5].split(",")], np.float64)
    std = np.array([float(v) for v in sys.argv[6].split(",")], np.float64)
    want_dt = {"f32": "<f4", "f16": "<f2", "bf16": "<u2"}[dtype]
    check(o.dtype == np.dtype(want_dt), "%s: dtype %s, want %s" % (sys.argv[2], o.dtype.str, want_dt))
    n, S = u8.shape[0], u8.shape[1]
    shape = (n, 3, S, S) if layout == "nchw" else (n, S, S, 3)
    check(o.shape == shape, "%s: shape %s, want %s" % (sys.argv[2], o.shape, shape))
    if dtype == "bf16":
        f = (o.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        rel = 2.0 ** -8
    elif dtype == "f16":
        f = o.astype(np.float64)
        rel = 2.0 ** -11
    else:
        f = o.astype(np.float64)
        rel = 2.0 ** -23
    if layout == "nchw":
        f = f.transpose(0, 2, 3, 1)
    want = (u8.astype(np.float64) / 255.0 - mean) / std
    err = np.abs(f - want)
    # Half a unit in the last place is at most |x| * rel; a little more for
    # the float32 step before the rounding.
    lim = np.abs(want) * rel * 1.01 + 1e-6
    bad = err > lim
    check(not bad.any(), "%s: %d values off, e.g. %r where (v/255 - mean)/std is %r"
          % (sys.argv[2], bad.sum(), f[bad][:3], want[bad][:3]))
    say("%s %s %s: every value is (u8/255 - mean)/std to within %.3g relative (largest error %.3g)"
        % (sys.argv[2], dtype, layout, rel, err.max()))


main()
