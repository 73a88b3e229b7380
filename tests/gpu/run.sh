#!/bin/sh
# run.sh - run every GPU test: the programs that need a CUDA device, which
# plain "make check" builds but does not run. Each exits 77 (skip) when
# there is no device. "make check-gpu" builds them and runs this.
#
# usage: tests/gpu/run.sh [ARG...]   (from the build directory, or with
#        top_builddir set; ARGs go to every test, e.g. --bench)
#
# GPU_TEST_WRAPPER runs each test program under a tool, e.g.
#   GPU_TEST_WRAPPER="compute-sanitizer --error-exitcode 1 --tool memcheck"
# (the scripts' shardtrain runs are not wrapped).
#
# Exit: 0 when all ran and passed, 1 when one failed, 77 when all skipped.

# The GPU tests: programs relative to the build directory, scripts (*.sh)
# beside this one.
tests="tests/gpu/loader_gpu tests/gpu/backend_gpu tests/gpu/train_gpu.sh
    tests/gpu/python_gpu.sh"
here=$(dirname "$0")

top_builddir=${top_builddir:-.}
pass=0 fail=0 skip=0
for t in $tests; do
	case $t in
	*.sh)	prog=$here/${t##*/} ;;
	*)	prog=$top_builddir/$t ;;
	esac
	if [ ! -x "$prog" ]; then
		echo "SKIP: $t (not built: configured without CUDA, or run" \
		    "'make check-gpu')"
		skip=$((skip + 1))
		continue
	fi
	wrap=
	case $t in *.sh) ;; *) wrap=${GPU_TEST_WRAPPER:-} ;; esac
	# a hung stream or event must not hang the run (GPU_TEST_TIMEOUT s)
	if command -v timeout >/dev/null 2>&1; then
		# shellcheck disable=SC2086 # the wrapper is a command line
		timeout "${GPU_TEST_TIMEOUT:-600}" $wrap "$prog" "$@"
	else
		# shellcheck disable=SC2086
		$wrap "$prog" "$@"
	fi
	rc=$?
	case $rc in
	0)	echo "PASS: $t"; pass=$((pass + 1)) ;;
	77)	echo "SKIP: $t"; skip=$((skip + 1)) ;;
	124)	echo "FAIL: $t (timed out)"; fail=$((fail + 1)) ;;
	*)	echo "FAIL: $t (exit $rc)"; fail=$((fail + 1)) ;;
	esac
done
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -gt 0 ] && exit 1
[ "$pass" -eq 0 ] && exit 77
exit 0
