#!/usr/bin/env bash
# shardfs-cli.sh - the stats file, the metadata cache and the command line.
# .shardfs/stats is JSON whose counters move as reads do (requests, a
# sequential reader's read-ahead hits and each byte fetched once through a
# cache smaller than the file, listings that do not grow with
# metadata_ttl=-1). An object created after the mount shows after
# metadata_ttl (2 s) and not before, and never with -1, for nginx, GCS
# and S3. A source that cannot be listed fails with exit 1 and a message,
# mounting nothing; bad options are usage errors (2). In the background
# shardfs returns 0 once mounted and its process ends with fusermount3
# -u; in the foreground SIGTERM unmounts it cleanly. A password in SOURCE
# is not left in its command line.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/bucket-lib.sh"
. "$top_srcdir/tests/cli/fuse-lib.sh"
need_python boto3

D="$T/www/s"
mkdir -p "$D/sub"
head -c $((40 * 1048576 + 999)) /dev/urandom >"$D/big.tar"
head -c 5000 /dev/urandom >"$D/small.bin"
head -c 7000 /dev/urandom >"$D/sub/x.bin"
http_start "$T/www"
gcs_start
gcs_bucket data
s3_start
s3_bucket data
for f in small.bin sub/x.bin; do
	py fs_tool.py put-gs data "s/$f" "$D/$f"
	py fs_tool.py put-s3 data "s/$f" "$D/$f"
done

say "the stats file: JSON, and its counters move with the reads"
fs_mount st "$HTTP_URL/s/" "$T/m" -o cache_mb=32
python3 -m json.tool "$T/m/.shardfs/stats" >/dev/null ||
    fail ".shardfs/stats is not JSON"
[ "$(fs_stat "$T/m" tool)" = shardfs ] || fail "stats: tool is not shardfs"
[ "$(fs_stat "$T/m" remote.requests)" -eq 1 ] ||
    fail "stats: $(fs_stat "$T/m" remote.requests) requests before any read, want 1 (the listing)"
[ "$(fs_stat "$T/m" cache.readahead_hits)" -eq 0 ] || fail "read-ahead hits before any read"
cmp "$D/small.bin" "$T/m/small.bin" || fail "small.bin differs"
[ "$(fs_stat "$T/m" remote.requests)" -ge 2 ] || fail "stats: no request for a read"
[ "$(fs_stat "$T/m" opens)" -eq 1 ] || fail "stats: opens is not 1"
# A sequential cat of a file larger than the cache: read ahead, and
# every byte fetched once.
cat "$T/m/big.tar" >"$T/big.got"
cmp "$D/big.tar" "$T/big.got" || fail "big.tar differs"
python3 - "$T/m/.shardfs/stats" "$(file_size "$D/big.tar")" <<'EOF' ||
import json, sys
s = json.load(open(sys.argv[1]))
size = int(sys.argv[2])
c, r = s["cache"], s["remote"]
print("cat of %d bytes: cache %s, remote bytes %d" % (size, c, r["bytes"]))
assert c["readahead_hits"] > 0, "no read-ahead hit for a sequential cat"
assert c["readahead_bytes"] > 0
assert r["bytes"] <= size * 1.05 + 100000, \
    "%d bytes fetched for a file of %d: read-ahead thrown away" % (
        r["bytes"], size)
assert c["memory_peak_bytes"] <= c["memory_limit_bytes"], c
assert s["read_bytes"] >= size, s["read_bytes"]
assert s["reader_wait_seconds"] > 0
EOF
    fail "the counters of a sequential cat"
fs_umount "$T/m"

say "metadata_ttl=-1: repeated ls lists each folder once"
fs_mount ttl "$HTTP_URL/s/" "$T/m" -o metadata_ttl=-1
ls -lR "$T/m" >/dev/null
n=$(fs_stat "$T/m" metadata.listings)
[ "$n" -eq 2 ] || fail "$n listings for two folders"
for _ in 1 2 3 4 5; do
	ls -lR "$T/m" >/dev/null
	ls "$T/m/sub" >/dev/null
	stat "$T/m/no-such-name" >/dev/null 2>&1 && fail "a missing name exists"
done
[ "$(fs_stat "$T/m" metadata.listings)" -eq 2 ] ||
    fail "listings grew to $(fs_stat "$T/m" metadata.listings) with metadata_ttl=-1"
fs_umount "$T/m"

# new_object NAME: a new object "s/sub/new-NAME.bin" on NAME's server.
new_object() {
	head -c 4321 /dev/urandom >"$T/new-$1.bin"
	case $1 in
	http) cp "$T/new-$1.bin" "$D/sub/new-$1.bin" ;;
	gs) py fs_tool.py put-gs data "s/sub/new-$1.bin" "$T/new-$1.bin" ;;
	s3) py fs_tool.py put-s3 data "s/sub/new-$1.bin" "$T/new-$1.bin" ;;
	esac
}

# listed MNT NAME: whether ls of MNT/sub shows NAME.
listed() {
	# (Not a lookup: a name found missing stays so for negative_ttl.)
	# shellcheck disable=SC2010
	ls "$1/sub" | grep -qxF "$2"
}

say "an object made after the mount: shown after metadata_ttl, never with -1"
for name in http gs s3; do
	case $name in
	http) src="$HTTP_URL/s/" ;;
	*) src="$name://data/s" ;;
	esac
	fs_mount "$name.2" "$src" "$T/m2" -o metadata_ttl=2
	fs_mount "$name.f" "$src" "$T/mf" -o metadata_ttl=-1
	listed "$T/m2" x.bin && listed "$T/mf" x.bin ||
	    fail "$name: sub/x.bin is not listed"
	t0=$(date +%s.%N)
	new_object "$name"
	listed "$T/m2" "new-$name.bin" &&
	    fail "$name: the new object shows before metadata_ttl"
	sleep 2.2
	listed "$T/m2" "new-$name.bin" ||
	    fail "$name: the new object does not show after metadata_ttl"
	cmp "$T/new-$name.bin" "$T/m2/sub/new-$name.bin" ||
	    fail "$name: the new object reads other bytes"
	listed "$T/mf" "new-$name.bin" &&
	    fail "$name: the new object shows with metadata_ttl=-1"
	echo "$name: shown after $(echo "$(date +%s.%N) - $t0" | bc) s with metadata_ttl=2"
	fs_umount "$T/mf"
	fs_umount "$T/m2"
done

say "a source that cannot be listed: exit 1, a message, nothing mounted"
mkdir -p "$T/mx"
# nosrc SOURCE TEXT ARGS...: shardfs SOURCE fails (1) naming TEXT.
nosrc() {
	local src=$1 text=$2 tag
	shift 2
	tag=nosrc$((++nosrc_n))
	run_rc 1 "$tag" timeout 60 "$SHARDFS" "$src" "$T/mx" "$@"
	cat "$T/$tag.err"
	has "$tag.err" "$text"
	has "$tag.err" "cannot be listed"
	fs_mounted "$T/mx" && fail "$src: mounted all the same"
	[ -z "$(ls -A "$T/mx")" ] || fail "$src: the mount point is not empty"
	return 0
}
nosrc_n=0
nosrc gs://no-such-bucket gs://no-such-bucket -f
nosrc s3://no-such-bucket/x NoSuchBucket -f
nosrc "$HTTP_URL/nope/" "$HTTP_URL/nope/" -f
# A server that never answered is not retried, whatever --retry-time.
t0=$(date +%s)
nosrc "http://127.0.0.1:$(free_port)/d/" "not retried" -f
[ $(( $(date +%s) - t0 )) -le 3 ] || fail "a dead endpoint took long to refuse"
# In the background too: the command that started it says why.
nosrc gs://no-such-bucket gs://no-such-bucket

say "bad options are usage errors (2), and nothing is mounted"
# usage TEXT ARGS...: shardfs ARGS exits 2 naming TEXT.
usage() {
	local text=$1 tag
	shift
	tag=usage$((++usage_n))
	run_rc 2 "$tag" timeout 30 "$SHARDFS" "$@"
	head -n 1 "$T/$tag.err"
	has "$tag.err" "$text"
	has "$tag.err" "usage: shardfs"
	fs_mounted "$T/mx" && fail "mounted with bad options"
	return 0
}
usage_n=0
usage "nosuchopt" "$HTTP_URL/s/" "$T/mx" -f -o nosuchopt
usage "cache_mb=0" "$HTTP_URL/s/" "$T/mx" -f -o cache_mb=0
usage "--cache-mb" "$HTTP_URL/s/" "$T/mx" -f --cache-mb 0
usage "--part-size" "$HTTP_URL/s/" "$T/mx" -f --part-size 100K
usage "rw" "$HTTP_URL/s/" "$T/mx" -f -o rw
usage "metadata_ttl" "$HTTP_URL/s/" "$T/mx" -f -o metadata_ttl=soon
usage "allow_other" "$HTTP_URL/s/" "$T/mx" -f -o allow_other=1
usage "ending in '/'" "$HTTP_URL/s" "$T/mx" -f
usage "ftp" ftp://example/x/ "$T/mx" -f
usage "shardfs" "$HTTP_URL/s/"

say "in the background: exit 0 once mounted; fusermount3 -u ends it"
mkdir -p "$T/mb"
run_rc 0 bg "$SHARDFS" "$HTTP_URL/s/" "$T/mb" -o metadata_ttl=-1
FS_MOUNTS+=("$T/mb")
fs_mounted "$T/mb" || fail "shardfs returned before its mount was up"
cmp "$D/small.bin" "$T/mb/small.bin" || fail "the background mount reads other bytes"
# Its process: the one whose command line names the mount point.
bgpid=$(python3 - "$T/mb" <<'EOF'
import os, sys
for p in os.listdir("/proc"):
    if not p.isdigit():
        continue
    try:
        argv = open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")
    except OSError:
        continue
    if sys.argv[1].encode() in argv and any(a.endswith(b"shardfs") for a in argv):
        print(p)
EOF
)
[ -n "$bgpid" ] && [ "$(echo "$bgpid" | wc -l)" -eq 1 ] ||
    fail "cannot find the background shardfs: '$bgpid'"
[ "$(awk '{ print $7 }' "/proc/$bgpid/stat")" = 0 ] ||
    fail "the background shardfs kept a terminal"
fusermount3 -u "$T/mb" || fail "fusermount3 -u failed"
for _ in $(seq 100); do
	kill -0 "$bgpid" 2>/dev/null || break
	sleep 0.1
done
kill -0 "$bgpid" 2>/dev/null && fail "the background shardfs outlived its mount"
fs_mounted "$T/mb" && fail "still mounted"

say "in the foreground, SIGTERM unmounts cleanly: exit 0"
# a password in SOURCE: gone from the command line others can read
pw_url="http://reader:pw-not-in-ps@${HTTP_URL#http://}/s/"
fs_mount term "$pw_url" "$T/mt"
cmp "$D/small.bin" "$T/mt/small.bin" || fail "small.bin differs"
tr '\0' ' ' <"/proc/$FS_PID/cmdline" >"$T/term.cmdline"
hasnt term.cmdline "pw-not-in-ps"
has term.cmdline "reader:************@"
awk -v m="$T/mt" '$2 == m' /proc/mounts >"$T/term.mounts"
hasnt term.mounts "pw-not-in-ps"
kill -TERM "$FS_PID"
rc=0
wait "$FS_PID" || rc=$?
[ "$rc" -eq 0 ] || fail "shardfs exited $rc on SIGTERM"
fs_mounted "$T/mt" && fail "SIGTERM left the mount behind"
[ -z "$(ls -A "$T/mt")" ] || fail "the mount point is not empty after SIGTERM"
no_sanitizer_report term
echo ok
