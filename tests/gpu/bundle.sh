#!/usr/bin/env bash
# bundle.sh - carry a CUDA build's GPU tests and shardtrain to a GPU machine
# that lacks shardkit's build dependencies (a container image with the
# NVIDIA driver and PyTorch's CUDA wheels, say), and run them there.
#
# usage: tests/gpu/bundle.sh pack BUILDDIR OUTDIR
#            (on the build machine) writes OUTDIR/shardkit-gpu.tar.xz: the
#            linked programs shardtrain, shardtool, tests/gpu/backend_gpu
#            and tests/gpu/loader_gpu, the scripts run.sh, train_gpu.sh and
#            python_gpu.sh, the Python package's wheel (when python3 has
#            build, setuptools and wheel), the kernel profiler kprof.so
#            and kprof.py (when CUPTI is installed), libshardkit, and
#            every library they load except glibc's, libstdc++/libgcc and
#            NVIDIA's (the GPU machine brings its own CUDA runtime,
#            cuBLASLt, cuDNN, NVRTC and NCCL)
#        tests/gpu/bundle.sh run BUNDLEDIR [ARG...]
#            (on the GPU machine) unpacks BUNDLEDIR/shardkit-gpu.tar.xz
#            under $TMPDIR, finds NVIDIA's libraries (the CUDA toolkit's
#            lib64, or the nvidia/*/lib folders of python3's wheels), and
#            runs tests/gpu/run.sh on the bundle's programs (ARGs go to
#            every test)
#        tests/gpu/bundle.sh exec BUNDLEDIR COMMAND [ARG...]
#            the same set-up, then COMMAND with SHARDTRAIN and SHARDTOOL
#            naming the bundle's programs, e.g.
#            tests/gpu/bundle.sh exec DIR sh -c \
#              'bench/gpu-train.sh --shardtrain "$SHARDTRAIN" --runs 1'
#
# The build machine's glibc must be no newer than the GPU machine's.
# Exit: run.sh's (0 passed, 1 failed, 77 skipped); 2 for a usage or
# packing error.
set -euo pipefail

die() { echo "bundle.sh: $*" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
progs="train/shardtrain shardtool/shardtool tests/gpu/backend_gpu
    tests/gpu/loader_gpu"

# the linked program behind libtool's wrapper script, if there is one
linked() {
	local b=$1 p=$2
	if [ -x "$b/$(dirname "$p")/.libs/$(basename "$p")" ]; then
		echo "$b/$(dirname "$p")/.libs/$(basename "$p")"
	else
		echo "$b/$p"
	fi
}

pack() {
	local b out p f
	[ $# -eq 2 ] || die "usage: bundle.sh pack BUILDDIR OUTDIR"
	b=$(cd "$1" && pwd) || die "$1: no such build directory"
	out=$2
	mkdir -p "$out" || die "$out: cannot create it"
	stage=$(mktemp -d) || die "mktemp -d"
	trap 'rm -rf "$stage"' EXIT
	mkdir -p "$stage/bin/tests/gpu" "$stage/bin/train" \
	    "$stage/bin/shardtool" "$stage/lib"
	for p in $progs; do
		f=$(linked "$b" "$p")
		[ -x "$f" ] || die "$f: not built (make, then make check-gpu)"
		cp "$f" "$stage/bin/$p"
	done
	# what the programs load, resolved as they would be from the build
	# tree; NVIDIA's and the C/C++ runtime's stay behind
	for p in $progs; do
		LD_LIBRARY_PATH="$b/lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		    ldd "$stage/bin/$p"
	done | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
	    grep -vE '/(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s)\.so|/ld-linux|/libcuda|/libcudart|/libcublas|/libcudnn|/libnccl|/libnvrtc|/libnvJitLink' |
	while read -r f; do
		cp -L "$f" "$stage/lib/" || exit 1
	done || die "copying the libraries failed"
	cp "$here/run.sh" "$here/train_gpu.sh" "$here/python_gpu.sh" \
	    "$here/kprof.py" "$stage/"
	# the kernel profiler (kprof.c), where CUDA's CUPTI is installed
	cupti=$(ls -d /usr/local/cuda/targets/*/include/cupti.h \
	    /usr/local/cuda/include/cupti.h 2>/dev/null | head -n 1)
	if [ -n "$cupti" ]; then
		${CC:-cc} -std=gnu11 -Wall -Wextra -O2 -shared -fPIC \
		    -I"$(dirname "$cupti")" "$here/kprof.c" \
		    -o "$stage/lib/kprof.so" -L/usr/local/cuda/lib64 \
		    -L/usr/local/cuda/lib -lcupti || die "kprof.c: cannot build it"
	fi
	# the Python package as one abi3 wheel (libshardkit inside), for
	# python_gpu.sh; without Python's build tools, that test skips
	if python3 -c 'import build, setuptools, wheel' 2>/dev/null; then
		rm -rf "$stage/pkg"
		cp -r "$here/../../python" "$stage/pkg"
		SHARDKIT_SRC="$here/../.." SHARDKIT_BUILD="$b" python3 -m build \
		    --wheel --no-isolation --outdir "$stage" "$stage/pkg" \
		    >/dev/null || die "python -m build failed"
		rm -rf "$stage/pkg"
	fi
	tar -C "$stage" -cJf "$out/shardkit-gpu.tar.xz" . ||
	    die "$out/shardkit-gpu.tar.xz: cannot write it"
	echo "bundle.sh: $out/shardkit-gpu.tar.xz ($(du -h \
	    "$out/shardkit-gpu.tar.xz" | cut -f1)): $progs"
}

# setup BUNDLEDIR: unpack it into $dir, point LD_LIBRARY_PATH at its
# libraries and NVIDIA's, and SHARDTRAIN at its shardtrain
setup() {
	local src=$1 nv d py
	[ -f "$src/shardkit-gpu.tar.xz" ] ||
	    die "$src/shardkit-gpu.tar.xz: no bundle (bundle.sh pack first)"
	dir=$(mktemp -d) || die "mktemp -d"
	trap 'rm -rf "$dir"' EXIT
	tar -C "$dir" -xJf "$src/shardkit-gpu.tar.xz" ||
	    die "$src/shardkit-gpu.tar.xz: cannot unpack it"
	nv=
	for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
		[ -d "$d" ] && nv="$nv:$d"
	done
	py=$(command -v python3 || true)
	if [ -n "$py" ]; then
		for d in $("$py" -c 'import glob, os, site
for s in site.getsitepackages():
    for d in sorted(glob.glob(os.path.join(s, "nvidia", "*", "lib"))):
        print(d)' 2>/dev/null); do
			nv="$nv:$d"
		done
	fi
	export LD_LIBRARY_PATH="$dir/lib$nv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export SHARDTRAIN="$dir/bin/train/shardtrain"
	export SHARDTOOL="$dir/bin/shardtool/shardtool"
	# CUDA_INJECTION64_PATH=$KPROF profiles a run's kernels (kprof.c)
	export KPROF="$dir/lib/kprof.so" KPROF_PY="$dir/kprof.py"
	echo "bundle.sh: programs in $dir/bin, libraries from $LD_LIBRARY_PATH"
}

run() {
	[ $# -ge 1 ] || die "usage: bundle.sh run BUNDLEDIR [ARG...]"
	setup "$1"
	shift
	top_builddir="$dir/bin" sh "$dir/run.sh" "$@"
}

exec_in() {
	[ $# -ge 2 ] || die "usage: bundle.sh exec BUNDLEDIR COMMAND [ARG...]"
	setup "$1"
	shift
	"$@"
}

case ${1:-} in
pack)	shift; pack "$@" ;;
run)	shift; run "$@" ;;
exec)	shift; exec_in "$@" ;;
*)	die "usage: bundle.sh pack BUILDDIR OUTDIR | run BUNDLEDIR [ARG...] |" \
	    "exec BUNDLEDIR COMMAND [ARG...]" ;;
esac
