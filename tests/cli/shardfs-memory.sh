#!/usr/bin/env bash
# shardfs-memory.sh - a mount's memory is bounded as man/shardfs.1 says
# (section Memory): cache_mb + 80 MiB + 3 MiB x threads + 30 MiB, whatever
# the readers. For an nginx folder, a GCS bucket and an S3 bucket, 16
# readers at once read 16 objects of 8 MiB (4 x cache_mb) through a mount
# with -o cache_mb=32,threads=16, each checking its bytes: the shardfs
# process's peak RSS (VmHWM) stays under the bound, the block cache's own
# peak under cache_mb and 2 MiB a thread, and the objects are fetched
# about once, with readahead=2M and with the default 64M (the windows of
# the sequential readers share half the cache, so none evicts what
# another has yet to read). Then 1500 small files read whole by 32
# threads at once and closed: the cache lets go of each at its close, so
# that the next files take the fetch engine's buffers again rather than
# fresh pages (a file whose release came before its read's reply let go
# of its chunk once stayed cached until evicted). Last, one reader of a
# 256 MiB object with readahead=16M: what it has passed leaves the cache,
# which holds its window and little more (it held 101 MiB here once,
# all in fresh pages).
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/bucket-lib.sh"
. "$top_srcdir/tests/cli/fuse-lib.sh"
need_python boto3

# Under a sanitizer (--enable-sanitizers, or CFLAGS as CI's TSan build
# has them) shadow memory and the freed-memory quarantine are most of
# the RSS: the bound is then not checked, the rest is.
sanitized=0
if sed -n 's/^\(SK_CFLAGS\|CFLAGS\) = //p' "$top_builddir/Makefile" 2>/dev/null |
    grep -q -- '-fsanitize='; then
	sanitized=1
fi
cache_mb=32
threads=16
bound=$((cache_mb + 80 + 3 * threads + 30))
S="$T/www/small"
mkdir -p "$S"
python3 - "$S" <<'EOF'
import os, random, sys
r = random.Random(7)
for i in range(1501):
    with open(os.path.join(sys.argv[1], "%05d.jpg" % i), "wb") as f:
        f.write(r.randbytes(r.randrange(20000, 40000)))
EOF
mkdir -p "$T/www/seq"
head -c $((256 << 20)) /dev/urandom >"$T/www/seq/one.bin"
D="$T/www/big"
mkdir -p "$D"
for k in $(seq -w 0 15); do
	head -c $((8 * 1048576 + 10#$k * 4099)) /dev/urandom >"$D/o-$k.bin"
done
fs_servers big

# kib_of PID FIELD: a VmXXX value of /proc/PID/status, KiB.
kib_of() {
	awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"
}

# bounded NAME SOURCE READAHEAD MAX_FETCHED: 16 readers through a mount of
# SOURCE with that readahead; the RSS bound is checked when MAX_FETCHED
# (the most times each byte may be fetched) is not "-".
bounded() {
	local name=$1 src=$2 mnt="$T/m.$1.$3" f pids=() p hwm t0 t1
	say "$name: 16 readers, 128 MiB through cache_mb=$cache_mb, threads=$threads, readahead=$3"
	fs_mount "$name.$3" "$src" "$mnt" \
	    -o "cache_mb=$cache_mb,threads=$threads,readahead=$3"
	echo "$name: after mounting, VmRSS $(kib_of "$FS_PID" VmRSS) KiB"
	t0=$(date +%s.%N)
	for f in "$D"/*.bin; do
		cmp "$f" "$mnt/${f##*/}" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do
		wait "$p" || fail "$name: a reader found other bytes"
	done
	t1=$(date +%s.%N)
	hwm=$(kib_of "$FS_PID" VmHWM)
	echo "$name: 128 MiB in $(echo "$t1 - $t0" | bc) s; peak RSS $((hwm / 1024)) MiB, bound $bound MiB"
	python3 - "$mnt/.shardfs/stats" "$threads" "$4" <<'EOF' || fail "$name: the counters"
import json, sys
s = json.load(open(sys.argv[1]))
c = s["cache"]
print("cache", c)
times = s["remote"]["bytes"] / s["read_bytes"]
print("fetched %.2f times the bytes read" % times)
if sys.argv[3] != "-":
    assert times <= float(sys.argv[3]), "each byte fetched %.2f times" % times
# The block cache: cache_mb, and the 2 MiB a read spans per thread.
assert c["memory_peak_bytes"] <= c["memory_limit_bytes"] + \
    int(sys.argv[2]) * (2 << 20), c
assert c["memory_limit_bytes"] == 32 << 20, c
assert s["read_bytes"] >= 128 << 20, s["read_bytes"]
assert s["read_errors"] == {"eio": 0, "estale": 0}, s
EOF
	if [ "$sanitized" = 1 ]; then
		echo "$name: a sanitizer's build: peak RSS not held to the bound"
	elif [ "$4" = - ]; then
		echo "$name: readahead $3: peak RSS not held to the bound"
	elif [ "$hwm" -gt $((bound * 1024)) ]; then
		fail "$name: peak RSS $((hwm / 1024)) MiB, over the documented $bound MiB"
	fi
	fs_umount "$mnt"
}

bounded http "$HTTP_URL/big/" 2M 1.7
bounded gs gs://data/big 2M 1.7
bounded s3 s3://data/big 2M 1.7
bounded http "$HTTP_URL/big/" 64M 1.7

say "small files: 1500 read whole by 32 threads and closed are let go of"
fs_mount small "$HTTP_URL/small/" "$T/m.small"
python3 - "$S" "$T/m.small" <<'EOF' || fail "small files: the cache kept them"
import concurrent.futures as cf, json, os, sys, time
src, mnt = sys.argv[1:]
*names, last = sorted(os.listdir(src))
def same(n):
    with open(os.path.join(mnt, n), "rb") as f:
        got = f.read()
    with open(os.path.join(src, n), "rb") as f:
        return got == f.read()
with cf.ThreadPoolExecutor(32) as ex:
    bad = [n for n, ok in zip(names, ex.map(same, names)) if not ok]
assert not bad, "other bytes in %s" % bad[:5]
# Those closed while their range was finishing go at a later close:
# one more file's, once they are done.
time.sleep(0.5)
open(os.path.join(mnt, last), "rb").read()
time.sleep(0.2)
s = json.load(open(os.path.join(mnt, ".shardfs/stats")))
c = s["cache"]
print("small files:", c, "opens", s["opens"])
assert s["reads"] >= len(names), s
# At most the last file's chunk, its range perhaps still finishing.
assert c["memory_bytes"] <= 64 << 10, c
assert c["dropped_behind_chunks"] >= len(names), c
EOF
fs_umount "$T/m.small"

say "sequential: one reader of 256 MiB with readahead=16M holds its window"
fs_mount seq "$HTTP_URL/seq/" "$T/m.seq" -o readahead=16M
cmp "$T/www/seq/one.bin" "$T/m.seq/one.bin" || fail "sequential: other bytes"
python3 - "$T/m.seq/.shardfs/stats" <<'EOF' || fail "sequential: the cache kept what the reader passed"
import json, sys
s = json.load(open(sys.argv[1]))
c = s["cache"]
print("sequential:", c)
assert s["read_bytes"] == 256 << 20, s
assert c["memory_peak_bytes"] <= 4 * (16 << 20), c
EOF
fs_umount "$T/m.seq"
echo ok
