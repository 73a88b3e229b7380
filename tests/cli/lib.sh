# shellcheck shell=bash
# tests/cli/lib.sh - what the CLI tests share: a scratch folder removed on
# exit, running shardtool with its exit status and output kept, assertions
# that say what failed, and a way to drop root for permission cases.
#
# Sourced by each tests/cli/*.sh under "set -eu". make check sets SHARDTOOL,
# top_srcdir and top_builddir; the working directory is the build tree.

: "${SHARDTOOL:?SHARDTOOL is not set; run the test through make check}"
: "${top_srcdir:?top_srcdir is not set; run the test through make check}"
: "${top_builddir:=$(pwd)}"

PY="$top_srcdir/tests/py"
export PY
export PYTHONDONTWRITEBYTECODE=1
export LC_ALL=C
# Tests set these when they mean to; a value from the caller would change
# every shard's mtime or the logging.
unset SOURCE_DATE_EPOCH SHARDKIT_LOG
# shardload takes its rank and world size from these when it runs under a
# launcher; a test sets them when it means to.
unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE \
    PMIX_RANK PMIX_SIZE SLURM_PROCID SLURM_NTASKS

# Open MPI leaks at MPI_Finalize: under ASan, LeakSanitizer must not blame
# the programs that run under mpirun for it (mpi_launcher adds the rest).
LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$top_srcdir/tests/train/lsan-mpi.supp"
export LSAN_OPTIONS

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
say() { echo "-- $*"; }

T=$(mktemp -d "${TMPDIR:-/tmp}/shardkit-cli.XXXXXX") || fail "mktemp -d"
sk_cleanup() {
	# A permission case may have left folders without x or w bits.
	chmod -R u+rwX "$T" 2>/dev/null || true
	rm -rf "$T"
}
trap sk_cleanup EXIT
trap 'exit 1' HUP INT TERM

# Show what a run captured with run_rc: TAG.out and TAG.err under $T.
show() {
	echo "--- stdout of $1:" >&2
	head -c 4000 "$T/$1.out" >&2 || true
	echo "--- stderr of $1:" >&2
	head -c 4000 "$T/$1.err" >&2 || true
	echo "---" >&2
}

# run_rc WANT TAG CMD...: run CMD with stdout in $T/TAG.out and stderr in
# $T/TAG.err; fail unless it exits WANT ("nz" accepts any non-zero).
run_rc() {
	local want=$1 tag=$2 rc
	shift 2
	set +e
	"$@" >"$T/$tag.out" 2>"$T/$tag.err"
	rc=$?
	set -e
	if [ "$want" = nz ] && [ "$rc" -ne 0 ]; then
		return 0
	fi
	if [ "$rc" != "$want" ]; then
		show "$tag"
		fail "$tag: '$*' exited $rc, want $want"
	fi
}

# st TAG ARGS...: shardtool ARGS must succeed.
st() {
	local tag=$1
	shift
	run_rc 0 "$tag" "$SHARDTOOL" "$@"
}

# st_rc WANT TAG ARGS...: shardtool ARGS must exit WANT.
st_rc() {
	local want=$1 tag=$2
	shift 2
	run_rc "$want" "$tag" "$SHARDTOOL" "$@"
}

# has TAG.out|TAG.err TEXT: the captured output holds TEXT (fixed string).
has() {
	grep -qF -- "$2" "$T/$1" || {
		show "${1%.*}"
		fail "$1: no '$2' in it"
	}
}

# hasnt TAG.out|TAG.err TEXT
hasnt() {
	if grep -qF -- "$2" "$T/$1"; then
		show "${1%.*}"
		fail "$1: '$2' should not be in it"
	fi
}

# sl TAG ARGS...: shardload ARGS must succeed; sl_rc WANT TAG ARGS...: it
# must exit WANT. Either way a sanitizer's report on stderr fails the test,
# since ASan and UBSan exit 1, which an error case expects.
sl() {
	local tag=$1
	shift
	sl_rc 0 "$tag" "$@"
}

sl_rc() {
	local want=$1 tag=$2
	shift 2
	: "${SHARDLOAD:?SHARDLOAD is not set; run the test through make check}"
	run_rc "$want" "$tag" "$SHARDLOAD" "$@"
	no_sanitizer_report "$tag"
}

# no_sanitizer_report TAG: TAG.err holds no ASan, LSan or UBSan report.
no_sanitizer_report() {
	if grep -qE 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error: ' \
	    "$T/$1.err"; then
		show "$1"
		fail "$1: a sanitizer reported an error"
	fi
}

# Usage errors exit 2 and print the usage line.
is_usage_error() {
	has "$1.err" "usage: shardtool"
}

# shardload's usage errors: a message naming shardload, then the usage.
is_sl_usage_error() {
	has "$1.err" "shardload"
	has "$1.err" "usage: shardload"
}

# jget FILE KEY[.KEY...]: a value of a JSON file (a bench --json result),
# printed as JSON unless it is a string.
jget() {
	python3 -c '
import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v[k]
print(v if isinstance(v, str) else json.dumps(v))' "$1" "$2" ||
	    fail "jget $1 $2"
}

# no_partial DIR: no *.part file anywhere under DIR.
no_partial() {
	local left
	left=$(find "$1" -name '*.part' | head -5)
	[ -z "$left" ] || fail "partial files left: $left"
}

# no_shards DIR: no *.tar and no manifest under DIR.
no_shards() {
	local left
	left=$(find "$1" \( -name '*.tar' -o -name '*.json' -o \
	    -name '*.part' \) | head -5)
	[ -z "$left" ] || fail "files left by a failed run: $left"
}

py() {
	python3 "$PY/$1" "${@:2}" || fail "python3 $1 ${*:2}"
}

# need_python MODULE...: skip the test when python3 or a module is missing.
need_python() {
	command -v python3 >/dev/null 2>&1 || skip "no python3"
	local m
	for m in "$@"; do
		python3 -c "import $m" 2>/dev/null ||
		    skip "python3 module $m is not installed (pip install $m)"
	done
}

need_cmd() {
	command -v "$1" >/dev/null 2>&1 || skip "$1 is not installed"
}

# The shards of a pack, in order: OUTDIR/NAME-*.tar.
shards_of() {
	ls "$1"/*.tar 2>/dev/null | LC_ALL=C sort
}

file_size() { stat -c %s "$1"; }
file_md5() { md5sum "$1" | cut -d' ' -f1; }

# same_tree A B: the same file names and byte-identical files.
same_tree() {
	local f
	(cd "$1" && find . -type f | LC_ALL=C sort) >"$T/tree.a"
	(cd "$2" && find . -type f | LC_ALL=C sort) >"$T/tree.b"
	if ! cmp -s "$T/tree.a" "$T/tree.b"; then
		echo "$1 and $2 hold different file names" >&2
		return 1
	fi
	while read -r f; do
		cmp -s "$1/$f" "$2/$f" || { echo "$1/$f and $2/$f differ" >&2; return 1; }
	done <"$T/tree.a"
}

# as_user CMD...: run CMD as a user whom file modes bind: as is when not
# root, else as nobody through setpriv. AS_USER_OK=0 when root has no way
# to drop its privileges here.
AS_USER_OK=1
AS_USER_SETPRIV=0
if [ "$(id -u)" -eq 0 ]; then
	if command -v setpriv >/dev/null 2>&1 &&
	    setpriv --reuid=65534 --regid=65534 --clear-groups true \
	    2>/dev/null; then
		AS_USER_SETPRIV=1
	else
		AS_USER_OK=0
	fi
fi
as_user() {
	if [ "$AS_USER_SETPRIV" = 1 ]; then
		setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"
	else
		"$@"
	fi
}

# Synthetic data, made once per call.
synth_cifar() {
	local dir=$1
	shift
	st synth-cifar synth cifar10 "$dir" "$@"
}

synth_imagenet() {
	local dir=$1
	shift
	st synth-imagenet synth imagenet "$dir" "$@"
}

# mpi_launcher: set the array MPI to the mpirun command line that starts
# processes here (Open MPI: --oversubscribe, and --allow-run-as-root as
# root), after checking that it starts two. Returns 1 with the reason in
# MPI_WHY when there is no mpirun or it cannot. Open MPI's leaks come from
# components it has dlclose'd by exit, two frames deep with the fast
# unwinder: the slow one reaches the libraries the suppressions name.
MPI=()
# fake_decompressors: $T/fakebin holds a script under the name of every
# decompressor libarchive knows; each records its call in $T/exec-mark.
# Put $T/fakebin first in PATH to catch a tool that runs one.
fake_decompressors() {
	local p
	mkdir -p "$T/fakebin"
	for p in lrzip lzop grzip lzip lz4 xz bzip2 gzip zstd compress \
	    uncompress; do
		printf '#!/bin/sh\necho "$0 $*" >>"%s"\nexit 1\n' \
		    "$T/exec-mark" >"$T/fakebin/$p"
		chmod 755 "$T/fakebin/$p"
	done
}

# no_decompressor_ran WHAT: fail if a fake decompressor left its mark.
no_decompressor_ran() {
	if [ -e "$T/exec-mark" ]; then
		cat "$T/exec-mark" >&2
		fail "$1: a decompressor was run"
	fi
}

MPI_WHY=
mpi_launcher() {
	MPI=()
	if ! command -v mpirun >/dev/null 2>&1; then
		MPI_WHY="no mpirun"
		return 1
	fi
	MPI=(mpirun)
	if mpirun --version 2>&1 | grep -q "Open MPI"; then
		MPI+=(--oversubscribe)
		[ "$(id -u)" -ne 0 ] || MPI+=(--allow-run-as-root)
	fi
	if ! timeout 60 "${MPI[@]}" -np 2 true >"$T/mpi-true.out" 2>&1; then
		cat "$T/mpi-true.out"
		MPI_WHY="mpirun cannot start two processes here"
		MPI=()
		return 1
	fi
	LSAN_OPTIONS="$LSAN_OPTIONS:fast_unwind_on_malloc=0"
}
