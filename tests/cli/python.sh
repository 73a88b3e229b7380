#!/usr/bin/env bash
# python.sh - the shardkit Python package: "pip install ./python" into a
# fresh venv and "python -m build --wheel" (one abi3 wheel that carries
# libshardkit) work from this build tree without the network; the wheel
# installs and streams batches in a venv that has nothing else; then
# python/tests (pytest) checks the loader through PyTorch and NumPy
# against shardload keys --checksum over a manifest, a pattern, nginx and
# gcp-storage-emulator, zero copy, back-pressure, resume, every error
# class, Ctrl-C, fork and the memory bound.
#
# The Python is Debian's (python3-torch is built for it), or $PYTHON_TORCH.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/bucket-lib.sh"

pyt=${PYTHON_TORCH:-/usr/bin/python3}
[ -x "$pyt" ] || skip "no $pyt (set PYTHON_TORCH)"
for m in venv pytest numpy torch build setuptools wheel; do
	"$pyt" -c "import $m" 2>/dev/null ||
	    skip "$pyt lacks the module $m (./quickstart installs it)"
done
# Under a sanitizer the extension would need the sanitizer's runtime
# preloaded into Python; the C parts it calls are tested there already.
if sed -n 's/^\(SK_CFLAGS\|CFLAGS\|LDFLAGS\) = //p' "$top_builddir/Makefile" |
    grep -q -- '-fsanitize='; then
	skip "a sanitizer build: the Python package is tested in the plain one"
fi
[ -e "$top_builddir/lib/.libs/libshardkit.so.0" ] ||
    fail "no $top_builddir/lib/.libs/libshardkit.so.0"
export SHARDKIT_SRC="$top_srcdir" SHARDKIT_BUILD="$top_builddir"

# setup.py runs in a copy: nothing is written into the source tree.
copy_pkg() {
	rm -rf "$1"
	cp -r "$top_srcdir/python" "$1"
	rm -rf "$1/build" "$1"/src/*.egg-info
}

say "pip install ./python into a venv (no build isolation: no network)"
copy_pkg "$T/pkg"
"$pyt" -m venv --system-site-packages "$T/venv" ||
    fail "python3 -m venv failed"
run_rc 0 pip "$T/venv/bin/python" -m pip install --no-build-isolation \
    --no-deps --no-cache-dir -q "$T/pkg"
run_rc 0 ver "$T/venv/bin/python" -c 'import shardkit
print(shardkit.__version__, shardkit.LIBRARY_VERSION)'
want=$(sed -n 's/^AC_INIT(\[shardkit\], *\[\([^]]*\)\].*/\1/p' "$top_srcdir/configure.ac")
[ "$(cat "$T/ver.out")" = "$want $want" ] ||
    fail "version $(cat "$T/ver.out"), want $want (configure.ac) twice"
run_rc 0 help "$T/venv/bin/python" -c 'import shardkit; help(shardkit.Loader)'
has help.out "batch_size"
has help.out "state_dict"

say "python -m build --wheel: one abi3 wheel, libshardkit inside"
copy_pkg "$T/pkg2"
run_rc 0 wheel "$pyt" -m build --wheel --no-isolation --outdir "$T/dist" \
    "$T/pkg2"
whl=$(ls "$T/dist"/*.whl)
case "$(basename "$whl")" in
shardkit-"$want"-cp39-abi3-linux_*.whl) ;;
*) fail "the wheel is $(basename "$whl"), not shardkit-$want-cp39-abi3-linux_*.whl" ;;
esac
"$pyt" - "$whl" <<'EOF' || fail "the wheel's contents"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for want in ("shardkit/_shardkit.abi3.so", "shardkit/libshardkit.so.0",
             "shardkit/__init__.py", "shardkit/__init__.pyi",
             "shardkit/py.typed"):
    assert want in names, (want, names)
assert not any(n.endswith(".c") for n in names), names
EOF

say "the wheel alone, in a venv without site packages, streams a batch"
synth_imagenet "$T/i" --classes 4 --per-class 12 --val 4 --seed 41
mkdir -p "$T/www/s" "$T/www/private"
st pack pack imagenet "$T/i" -o "$T/www/s/in-%06d.tar" --max-count 10
cp "$T/www/s/in-000000.tar" "$T/www/s/in-000001.tar" "$T/www/private/"
"$pyt" -m venv "$T/bare" || fail "python3 -m venv failed"
run_rc 0 bare-pip "$T/bare/bin/python" -m pip install --no-deps \
    --no-index -q "$whl"
run_rc 0 bare "$T/bare/bin/python" -c 'import sys, shardkit
with shardkit.Loader(sys.argv[1], batch_size=6, image_size=32) as lo:
    b = next(iter(lo))
    print(len(lo), b.images.shape, b.images.dtype, len(b.keys))' \
    "$T/www/s/in.json"
has bare.out "8 (6, 3, 32, 32) float32 6"

say "the servers: nginx, gcp-storage-emulator"
http_start "$T/www"
gcs_start
gcs_bucket data
st packg pack imagenet "$T/i" -o "gs://data/in/in-%06d.tar" --max-count 10

say "python/examples/train.py trains on the shards and gives its verdict"
run_rc 0 example "$T/venv/bin/python" "$top_srcdir/python/examples/train.py" \
    "$T/www/s/in.json" --batch 8 --image-size 48 --epochs 2 --classes 4 \
    --ceiling-batches 3
has example.out "epoch 1: 6 steps"
grep -Eq "^verdict: (INPUT-BOUND|COMPUTE-BOUND|BALANCED)" "$T/example.out" ||
    fail "train.py printed no verdict"
has example.out "data wait"

say "pytest python/tests"
export SK_DATA="$T/www/s" SHARDLOAD="$SHARDLOAD" SK_HTTP_URL="$HTTP_URL" \
    SK_HTTPS_URL="$HTTPS_URL" SK_CA_FILE="$T/ca.pem" \
    SK_GS_MANIFEST="gs://data/in/in.json"
set +e
(cd "$T" && "$T/venv/bin/python" -m pytest -q -p no:cacheprovider \
    -o addopts= "$top_srcdir/python/tests") >"$T/pytest.log" 2>&1
rc=$?
set -e
tail -n 40 "$T/pytest.log"
[ "$rc" -eq 0 ] || fail "pytest exited $rc"
grep -q " passed" "$T/pytest.log" || fail "pytest ran no test"
! grep -q " skipped" "$T/pytest.log" || fail "pytest skipped tests"
