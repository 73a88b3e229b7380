#!/bin/sh
# python_gpu.sh - the Python package's device mode on a real GPU:
# shardkit.Loader(device="cuda:0") gives CUDA tensors through DLPack whose
# pixels are the host path's (the conversion runs on the GPU), the
# consumer's stream waits for the copy, and batches held past the ring
# keep their device memory.
#
# The wheel comes from $SHARDKIT_WHEEL, or beside this script (bundle.sh
# packs one), or is built from $top_srcdir/python against $top_builddir.
# Needs a python3 with a CUDA torch and SHARDTOOL; exits 77 without them.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON_TORCH:-python3}
skip() { echo "SKIP: python_gpu.sh: $*"; exit 77; }
fail() { echo "FAIL: python_gpu.sh: $*" >&2; exit 1; }

"$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' \
    2>/dev/null || skip "$py has no torch that sees a GPU"
st=${SHARDTOOL:-${top_builddir:-.}/shardtool/shardtool}
[ -x "$st" ] || skip "no shardtool ($st)"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

whl=${SHARDKIT_WHEEL:-}
[ -n "$whl" ] || whl=$(ls "$here"/shardkit-*.whl 2>/dev/null | head -n 1 || true)
"$py" -m venv --system-site-packages "$T/venv" || skip "$py -m venv failed"
if [ -n "$whl" ]; then
	"$T/venv/bin/python" -m pip install -q --no-deps --no-index "$whl" ||
	    fail "cannot install $whl"
elif [ -n "${top_srcdir:-}" ] && [ -d "$top_srcdir/python" ]; then
	cp -r "$top_srcdir/python" "$T/pkg"
	SHARDKIT_SRC=$top_srcdir SHARDKIT_BUILD=$(cd "${top_builddir:-.}" && pwd) \
	    "$T/venv/bin/python" -m pip install -q --no-deps \
	    --no-build-isolation "$T/pkg" || fail "cannot build the package"
else
	skip "no wheel (SHARDKIT_WHEEL) and no source tree (top_srcdir)"
fi

"$st" synth imagenet "$T/i" --classes 4 --per-class 16 --val 4 --seed 7 \
    >/dev/null || fail "shardtool synth failed"
"$st" pack imagenet "$T/i" -o "$T/s/in-%06d.tar" --max-count 16 \
    >/dev/null || fail "shardtool pack failed"

"$T/venv/bin/python" - "$T/s/in.json" <<'EOF' || fail "the device checks"
import sys, torch, shardkit
src = sys.argv[1]
opts = dict(batch_size=8, image_size=64, shuffle=16, seed=3, epochs=2,
            dtype="float32", layout="NCHW", workers=2)
host = []
with shardkit.Loader(src, **opts) as lo:
    for _ in range(2):
        for b in lo:
            host.append(torch.from_dlpack(b.images).clone())
held, n = [], 0
with shardkit.Loader(src, device="cuda:0", ring=3, **opts) as lo:
    s = torch.cuda.Stream()
    for _ in range(2):
        for b in lo:
            assert b.images.device == "cuda:0", b.images.device
            with torch.cuda.stream(s):          # hand-over to stream s
                x = torch.from_dlpack(b.images)
                assert x.is_cuda and x.data_ptr() == b.images.data_ptr
                held.append(x)                  # kept past the ring
            n += 1
    kept = lo.stats()["kept"]
torch.cuda.synchronize()
assert n == len(host) == 16, (n, len(host))
assert kept >= n - 3, kept
for i, (x, h) in enumerate(zip(held, host)):
    d = (x.cpu() - h).abs().max().item()
    assert d < 1e-4, "batch %d: device and host pixels differ by %g" % (i, d)
print("python device mode: %d batches equal to the host's, %d kept" % (n, kept))
EOF
echo "PASS: python_gpu.sh"
