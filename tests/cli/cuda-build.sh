#!/usr/bin/env bash
# cuda-build.sh - the CUDA parts of a CUDA build, checked without a GPU:
# shardtrain and libshardkit carry cubins for sm_80 and sm_90 and sm_90
# PTX (what configure's NVCC_ARCH_FLAGS asks by default), shardtrain links
# cuBLASLt, cuDNN, the CUDA runtime and, where configure found it, NCCL,
# and the GPU test programs are built and skip (exit 77) when no GPU is
# visible. Skips when configure found no CUDA.
set -eu
. "$top_srcdir/tests/cli/lib.sh"

cfg="$top_builddir/config.h"
grep -q '^#define HAVE_CUDA 1' "$cfg" || skip "configured without CUDA"
if ! grep -q '^#define HAVE_CUDNN 1' "$cfg" ||
    ! grep -q '^#define HAVE_CUBLASLT 1' "$cfg"; then
	skip "configured without cuDNN or cuBLASLt: no CUDA backend"
fi
# a NVCC_ARCH_FLAGS of the user's own asks for other code
grep -q '^NVCC_ARCH_FLAGS = -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90$' \
    "$top_builddir/Makefile" || skip "NVCC_ARCH_FLAGS is not the default"

# the linked program, not libtool's wrapper script
bin() {
	if [ -x "$top_builddir/$(dirname "$1")/.libs/$(basename "$1")" ]; then
		echo "$top_builddir/$(dirname "$1")/.libs/$(basename "$1")"
	else
		echo "$top_builddir/$1"
	fi
}
st=$(bin train/shardtrain)
lib=
for f in "$top_builddir"/lib/.libs/libshardkit.so.* \
    "$top_builddir"/lib/.libs/libshardkit.a; do
	[ -f "$f" ] && { lib=$f; break; }
done
[ -n "$lib" ] || fail "no libshardkit under $top_builddir/lib/.libs"

say "cubins for sm_80 and sm_90, and sm_90 PTX"
for f in "$st" "$lib"; do
	python3 "$PY/fatbin_archs.py" "$f" >"$T/archs" ||
	    fail "$f: no readable fatbinary"
	for want in sm_80 sm_90 compute_90; do
		grep -qw "$want" "$T/archs" ||
		    fail "$f: no $want code: $(cat "$T/archs")"
	done
done

say "shardtrain links the libraries of its CUDA backend"
# libshardkit from the build tree, as libtool's wrapper would find it
LD_LIBRARY_PATH="$top_builddir/lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    ldd "$st" >"$T/ldd" || fail "ldd $st"
libs="libcublasLt libcudnn libcudart"
grep -q '^#define HAVE_NCCL 1' "$cfg" && libs="$libs libnccl"
for l in $libs; do
	grep -q "$l\.so" "$T/ldd" || fail "$st does not link $l: $(cat "$T/ldd")"
done
grep -q 'not found' "$T/ldd" && fail "$st: a library is missing: $(cat "$T/ldd")"

say "the GPU tests are built, and skip without a GPU"
for t in tests/gpu/loader_gpu tests/gpu/backend_gpu; do
	[ -x "$top_builddir/$t" ] || fail "$t was not built by make check"
done
if [ -e /dev/nvidia0 ]; then
	echo "SKIP: a GPU is here; tests/gpu/run.sh runs them"
else
	rc=0
	top_builddir=$top_builddir sh "$top_srcdir/tests/gpu/run.sh" \
	    >"$T/gpu.out" 2>&1 || rc=$?
	[ "$rc" -eq 77 ] || fail "tests/gpu/run.sh without a GPU: exit $rc," \
	    "want 77: $(cat "$T/gpu.out")"
	grep -q "0 passed, 0 failed, 4 skipped" "$T/gpu.out" ||
	    fail "tests/gpu/run.sh: $(cat "$T/gpu.out")"
fi
echo "PASS: cuda-build"
