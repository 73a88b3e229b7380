# shellcheck shell=bash
# tests/cli/fuse-lib.sh - real shardfs mounts for the FUSE tests: each is
# started in the foreground, waited for, and unmounted on exit (lazily if
# a reader still holds it) before the servers stop, whatever the test's
# outcome. Skips (77) where there is no /dev/fuse or fusermount3, or
# shardfs was not built.
#
# Sourced after lib.sh and http-lib.sh (and bucket-lib.sh for buckets).
# make check sets SHARDFS.

[ -n "${SHARDFS:-}" ] && [ -x "$SHARDFS" ] ||
    skip "shardfs is not built (configure found no libfuse3)"
[ -c /dev/fuse ] || skip "no /dev/fuse"
command -v fusermount3 >/dev/null || skip "no fusermount3 (apt-get install fuse3)"

FS_MOUNTS=()
FS_PIDS=()
declare -A FS_ERR_OF	# mount point -> its shardfs's stderr

fs_stop_all() {
	local m p err
	for m in "${FS_MOUNTS[@]}"; do
		# A shardfs that died says why here, if anywhere.
		err=${FS_ERR_OF[$m]:-}
		if [ -n "$err" ] && grep -qE 'Sanitizer|runtime error: ' "$err" 2>/dev/null; then
			echo "--- stderr of shardfs $m:" >&2
			head -c 20000 "$err" >&2
		fi
		fusermount3 -u "$m" 2>/dev/null || fusermount3 -u -z "$m" \
		    2>/dev/null || true
	done
	for p in "${FS_PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	FS_MOUNTS=()
	FS_PIDS=()
}
trap 'fs_stop_all; http_stop; sk_cleanup' EXIT

# fs_mounted DIR: whether DIR is a shardfs mount now.
fs_mounted() {
	awk -v m="$1" '$2 == m && $3 ~ /^fuse/ { found = 1 } END { exit !found }' \
	    /proc/mounts
}

# fs_mount NAME SOURCE MNT [ARGS...]: shardfs SOURCE MNT -f ARGS in the
# background, its output in $T/NAME.out and .err; waits (30 s) for the
# mount. FS_PID is its process.
fs_mount() {
	local name=$1 src=$2 mnt=$3 i
	shift 3
	mkdir -p "$mnt"
	"$SHARDFS" "$src" "$mnt" -f "$@" >"$T/$name.out" 2>"$T/$name.err" &
	FS_PID=$!
	FS_ERR_OF[$mnt]="$T/$name.err"
	FS_PIDS+=("$FS_PID")
	FS_MOUNTS+=("$mnt")
	for i in $(seq 300); do
		fs_mounted "$mnt" && return 0
		kill -0 "$FS_PID" 2>/dev/null || break
		sleep 0.1
	done
	cat "$T/$name.err" >&2
	fail "shardfs $src did not mount on $mnt"
}

# fs_umount MNT: unmount, and wait for its shardfs to exit 0 with no
# sanitizer's report on its stderr.
fs_umount() {
	local mnt=$1 err=${FS_ERR_OF[$1]:-} rc=0
	fusermount3 -u "$mnt" || fail "fusermount3 -u $mnt failed"
	for _ in $(seq 100); do
		fs_mounted "$mnt" || break
		sleep 0.1
	done
	fs_mounted "$mnt" && fail "$mnt is still mounted"
	if [ -n "${FS_PID:-}" ]; then
		wait "$FS_PID" || rc=$?
		if [ "$rc" -ne 0 ]; then
			[ -z "$err" ] || tail -n 40 "$err" >&2
			fail "shardfs exited $rc after the unmount"
		fi
	fi
	if [ -n "$err" ] && grep -qE '(ERROR|WARNING): (Address|Leak|Thread|Memory|UndefinedBehavior)Sanitizer|runtime error: ' "$err"; then
		cat "$err" >&2
		fail "a sanitizer reported on shardfs $mnt"
	fi
	return 0
}

# fs_stat MNT KEY: a value of MNT/.shardfs/stats (dotted keys).
fs_stat() {
	python3 -c 'import json, sys
v = json.load(open(sys.argv[1] + "/.shardfs/stats"))
for k in sys.argv[2].split("."):
    v = v[k]
print(v)' "$1" "$2"
}

# no_d_state: no task of this test (the script's descendants: its readers,
# its shardfs) is stuck in uninterruptible sleep on a FUSE request (the D
# state, for more than a moment). Other work on the machine, with mounts
# of its own, is not this test's to judge.
no_d_state() {
	python3 - "$$" <<'EOF' || fail "a task is in D state"
import os, sys, time
top = sys.argv[1]
def ours(pid):
    seen = 0
    while pid not in ("0", "1") and seen < 64:
        if pid == top:
            return True
        try:
            st = open("/proc/%s/stat" % pid).read()
        except OSError:
            return False
        pid = st[st.rindex(")") + 2:].split()[1]
        seen += 1
    return False
def stuck():
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            st = open("/proc/%s/stat" % pid).read()
            wchan = open("/proc/%s/wchan" % pid).read()
        except OSError:
            continue
        state = st[st.rindex(")") + 2]
        if state == "D" and "fuse" in wchan and ours(pid):
            out.append((pid, st[:st.rindex(")") + 1], wchan))
    return out
first = stuck()
time.sleep(1)
again = [p for p in stuck() if p[0] in {q[0] for q in first}]
for p in again:
    print("D state:", *p, file=sys.stderr)
sys.exit(1 if again else 0)
EOF
}

# fs_servers PREFIX: nginx serving $T/www, the GCS emulator and moto, each
# with a bucket "data" that holds the files of $T/www/PREFIX under PREFIX/
# (sourced after bucket-lib.sh).
fs_servers() {
	local f
	http_start "$T/www"
	gcs_start
	gcs_bucket data
	s3_start
	s3_bucket data
	for f in "$T/www/$1"/*; do
		[ -f "$f" ] || continue
		py fs_tool.py put-gs data "$1/${f##*/}" "$f"
		py fs_tool.py put-s3 data "$1/${f##*/}" "$f"
	done
}
