#!/usr/bin/env bash
# no-exec.sh - no tool runs another program on a shard's bytes (issue 10,
# case 2: libarchive's lrzip, lzop and grzip filters fork a decompressor
# from $PATH). Every tool that reads shards (shardtool ls, verify --decode,
# index, index --dali, cat, extract; shardload keys; shardtrain) reads a
# corpus of crafted shards under "strace -f -e trace=execve": compressed
# magic of every kind, a PAX size lie, "../" and absolute names, symlink
# and hardlink members, a FIFO, a truncated tar and a gzip tar. The only
# execve in each log must be the tool's own. In a build tree the tools are
# libtool wrapper scripts, which run sed and ls and then exec the real
# binary: nothing may exec after that. Skipped without strace or ptrace.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
: "${SHARDLOAD:?SHARDLOAD is not set; run the test through make check}"
: "${SHARDTRAIN:?SHARDTRAIN is not set; run the test through make check}"
need_python
need_cmd strace
strace -f -qq -e trace=execve -o /dev/null true >/dev/null 2>&1 ||
    skip "strace cannot trace here (ptrace is not permitted)"

synth_cifar "$T/c" --train 10 --test 4 --seed 6
mkdir "$T/s" "$T/corpus" "$T/outside"
st pack pack cifar10 "$T/c" --split test -o "$T/s/good-%06d.tar"
good="$T/s/good-000000.tar"
python3 "$PY/evil_tars.py" --hostile "$T/corpus" "$good" >/dev/null ||
    fail "evil_tars.py --hostile"
python3 "$PY/evil_tars.py" "$T/corpus" "$T/outside" >/dev/null ||
    fail "evil_tars.py"
cp "$good" "$T/corpus/good.tar"
mkfifo "$T/corpus/fifo.tar"
if command -v zstd >/dev/null 2>&1; then
	zstd -q -c "$good" >"$T/corpus/zstd.tar"
fi
# Decompressors that leave a mark, first in PATH: a second witness that
# strace cannot miss (an execvp that finds them is an execve too).
fake_decompressors
n=$(ls "$T/corpus" | wc -l)
[ "$n" -ge 20 ] || fail "the corpus has only $n files"

# only_own_exec LOG PROG: the log's execves are the tool's own (and, for a
# libtool wrapper, those before it execs the real binary, by the first
# process and its helpers). The tool's exec is the last execve of the
# first process; no execve may follow it, and its file is named PROG or
# lt-PROG.
only_own_exec() {
	python3 - "$1" "$2" <<'EOF'
import os, re, sys
log, prog = sys.argv[1], sys.argv[2]
calls = []
first = None
for line in open(log):
    m = re.match(r'(\d+)\s+execve\("([^"]*)"', line)
    if m:
        calls.append((int(m.group(1)), m.group(2), line.strip()))
        if first is None:
            first = int(m.group(1))
if not calls:
    sys.exit("%s: no execve at all (was the tool traced?)" % log)
own = max(i for i, c in enumerate(calls) if c[0] == first)
name = os.path.basename(calls[own][1])
if name not in (prog, "lt-" + prog):
    sys.exit("%s: the tool's last exec is %s, not %s" % (log, calls[own][2], prog))
after = calls[own + 1:]
if after:
    sys.exit("%s: %d execve after the tool's own:\n  %s" % (log, len(after),
             "\n  ".join(c[2] for c in after)))
EOF
}

# traced TAG PROG CMD...: run CMD under strace with the fake decompressors
# first in PATH; any exit status up to 2 is fine (these inputs are bad),
# a crash or a hang is not; then check the log.
traced() {
	local tag=$1 prog=$2 rc
	shift 2
	set +e
	# LeakSanitizer stops the world with ptrace, which strace holds.
	PATH="$T/fakebin:$PATH" \
	    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
	    timeout 60 strace -f -qq -s 256 \
	    -e trace=execve -o "$T/$tag.strace" "$@" \
	    >"$T/$tag.out" 2>"$T/$tag.err"
	rc=$?
	set -e
	if [ "$rc" -gt 2 ]; then
		show "$tag"
		fail "$tag: '$*' exited $rc"
	fi
	no_sanitizer_report "$tag"
	only_own_exec "$T/$tag.strace" "$prog" || {
		show "$tag"
		fail "$tag: a program was run"
	}
	no_decompressor_ran "$tag"
}

say "shardtool, shardload and shardtrain over $n crafted shards: no exec"
for f in "$T"/corpus/*; do
	b=$(basename "$f")
	b=${b%.tar}
	traced "ls.$b" shardtool "$SHARDTOOL" ls -l "$f"
	traced "verify.$b" shardtool "$SHARDTOOL" verify --decode "$f"
	traced "index.$b" shardtool "$SHARDTOOL" index "$f"
	mkdir -p "$T/idx.$b"
	traced "dali.$b" shardtool "$SHARDTOOL" index --dali -o "$T/idx.$b" "$f"
	traced "cat.$b" shardtool "$SHARDTOOL" cat "$f" test_00000.png
	mkdir -p "$T/x.$b/a/dest"
	traced "extract.$b" shardtool "$SHARDTOOL" extract -C "$T/x.$b/a/dest" "$f"
	traced "keys.$b" shardload "$SHARDLOAD" keys "$f" --batch 1 \
	    --image-size 16 --workers 1
done
# The tools did read the good and the gzip shard (the traced runs are
# real ones).
has ls.good.out test_00003
has ls.gzip.out test_00003
has keys.gzip.out test_00003
has ls.lrzip.err "not a tar archive (lrzip-compressed"
has ls.lie.err "claims 10000000000000 bytes"

say "shardtrain: a tiny run over a good shard, then over hostile ones"
tr=(--model resnet18 --width 0.125 --image-size 32 --batch 2 --steps 2
    --workers 1 --ceiling-steps 0 -q)
traced train.good shardtrain "$SHARDTRAIN" "${tr[@]}" --data "$good"
has train.good.out "2 steps"
for b in lrzip lzop grzip lie gzip xz fifo trunc; do
	traced "train.$b" shardtrain "$SHARDTRAIN" "${tr[@]}" \
	    --data "$T/corpus/$b.tar"
done
echo "PASS: no-exec"
