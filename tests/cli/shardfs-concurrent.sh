#!/usr/bin/env bash
# shardfs-concurrent.sh - many readers at once get the right bytes, from an
# nginx folder, a GCS bucket and an S3 bucket: 8 threads each reading a
# different object whole, 4 threads pread-ing one open file descriptor
# over each other, and 10^4 reads of random offsets and lengths (1 B to
# 2 MiB, many across 1 MiB blocks and the end of the file) through
# O_DIRECT, so that each one reaches shardfs, all compared byte for byte
# with the bytes the server holds. The block cache is kept smaller than
# the data, so blocks are evicted and fetched again meanwhile: for nginx
# well under the object read at random too (16 MiB); for the buckets,
# whose emulators serve a MiB in milliseconds, just under it (20 MiB:
# the eight objects read whole leave the cache as they are closed).
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/bucket-lib.sh"
. "$top_srcdir/tests/cli/fuse-lib.sh"
need_python boto3

# Eight objects of 2-3 MiB, none a multiple of a block, and one of 20 MiB
# and a bit.
D="$T/www/c"
mkdir -p "$D"
for k in 0 1 2 3 4 5 6 7; do
	head -c $((2 * 1048576 + k * 131101 + 17)) /dev/urandom >"$D/r-$k.bin"
done
head -c $((20 * 1048576 + 4321)) /dev/urandom >"$D/big.bin"
fs_servers c

# readers NAME SOURCE CACHE_MB: the three cases through a mount of SOURCE.
readers() {
	local name=$1 src=$2 mnt="$T/m.$1" t0 t1
	say "$name: 8 readers on 8 objects at once"
	fs_mount "$name" "$src" "$mnt" -o "cache_mb=$3,threads=16" \
	    --part-size 1M
	t0=$(date +%s.%N)
	py fs_tool.py readers "$D" "$mnt"/r-*.bin
	say "$name: 4 threads pread one file descriptor"
	py fs_tool.py preads "$mnt/big.bin" "$D/big.bin" 4
	say "$name: 10^4 random reads through O_DIRECT"
	py fs_tool.py random "$mnt/big.bin" "$D/big.bin" 10000 7
	t1=$(date +%s.%N)
	fs_stat "$mnt" cache >"$T/$name.cache"
	fs_stat "$mnt" remote >"$T/$name.remote"
	echo "$name: $(echo "$t1 - $t0" | bc) s; cache $(cat "$T/$name.cache"); remote $(cat "$T/$name.remote")"
	python3 - "$mnt/.shardfs/stats" "$D" <<'EOF' || fail "$name: the counters"
import json, os, sys
s = json.load(open(sys.argv[1]))
total = sum(os.path.getsize(os.path.join(sys.argv[2], f))
            for f in os.listdir(sys.argv[2]))
c, r = s["cache"], s["remote"]
assert s["read_errors"] == {"eio": 0, "estale": 0}, s["read_errors"]
# O_DIRECT: each of the 10^4 random reads reached shardfs.
assert s["reads"] > 10000, s["reads"]
assert c["memory_peak_bytes"] <= c["memory_limit_bytes"], c
assert c["evicted_chunks"] > 0, "the cache never evicted: the test is " \
    "too small to refetch"
# Every byte came once at least.
assert r["bytes"] >= total, (r["bytes"], total)
assert r["failures"] == 0, r
EOF
	fs_umount "$mnt"
}

readers http "$HTTP_URL/c/" 16
readers gs gs://data/c 20
readers s3 s3://data/c 20
echo ok
