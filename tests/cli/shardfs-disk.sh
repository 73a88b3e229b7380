#!/usr/bin/env bash
# shardfs-disk.sh - the disk cache (-o cache_dir, cache_max_mb). For an
# nginx folder, a GCS bucket and an S3 bucket: a mount keeps the blocks it
# reads on disk, and a second mount with the same folder reads them from
# there (no request for them); a block file with a byte flipped, and one
# cut short, are caught by their checks, fetched again, and the bytes read
# are right. The folder never holds more than cache_max_mb, sampled while
# more than that is read and after. A symlink planted in the cache is
# removed, never followed; a cache folder that is itself a symlink is
# refused.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/bucket-lib.sh"
. "$top_srcdir/tests/cli/fuse-lib.sh"
need_python boto3

D="$T/www/k"
mkdir -p "$D"
# 13 blocks: 12 whole and a bit.
head -c $((12 * 1048576 + 5000)) /dev/urandom >"$D/a.bin"
for k in 0 1 2 3; do
	head -c $((12 * 1048576 + k * 777)) /dev/urandom >"$D/l-$k.bin"
done
http_start "$T/www"
gcs_start
gcs_bucket data
s3_start
s3_bucket data
py fs_tool.py put-gs data k/a.bin "$D/a.bin"
py fs_tool.py put-s3 data k/a.bin "$D/a.bin"

# stats_check MNT PYTHON-EXPR...: each expression holds over the stats
# (s: the whole, d: disk_cache, r: remote).
stats_check() {
	local mnt=$1
	shift
	python3 - "$mnt/.shardfs/stats" "$@" <<'EOF' || fail "stats of $mnt"
import json, sys
s = json.load(open(sys.argv[1]))
d, r = s["disk_cache"], s["remote"]
for e in sys.argv[2:]:
    if not eval(e):
        print("not so: %s\ndisk_cache %s\nremote %s" % (e, d, r))
        sys.exit(1)
EOF
}

# block_files DIR: the cache's block files under DIR.
block_files() {
	find "$1/shardfs-cache-v1" -type f -name '*-*' ! -name '.*' | LC_ALL=C sort
}

kept() {
	local name=$1 src=$2 C="$T/cache.$1"
	mkdir "$C"
	say "$name: the blocks a mount reads are kept on disk"
	fs_mount "$name.1" "$src" "$T/m" -o "cache_dir=$C,cache_max_mb=64"
	cmp "$D/a.bin" "$T/m/a.bin" || fail "$name: a.bin differs"
	stats_check "$T/m" 'd["enabled"]' 'd["written_blocks"] == 13' \
	    'd["files"] == 13' 'd["hit_blocks"] == 0' \
	    'd["limit_bytes"] == 64 << 20'
	fs_umount "$T/m"
	[ "$(block_files "$C" | wc -l)" -eq 13 ] ||
	    fail "$name: $(block_files "$C" | wc -l) block files, want 13"
	[ "$(stat -c %a "$C/shardfs-cache-v1")" = 700 ] ||
	    fail "$name: the cache folder is not mode 0700"

	say "$name: a second mount reads them from disk"
	fs_mount "$name.2" "$src" "$T/m" -o "cache_dir=$C,cache_max_mb=64"
	cmp "$D/a.bin" "$T/m/a.bin" || fail "$name: a.bin from disk differs"
	# The listing was the one request; no byte of a.bin was fetched.
	stats_check "$T/m" 'd["hit_blocks"] == 13' 'd["written_blocks"] == 0' \
	    'r["requests"] <= 2' 'r["bytes"] < 1 << 20' \
	    'd["corrupt_blocks"] == 0'
	fs_umount "$T/m"

	say "$name: a flipped byte and a torn block are caught and fetched again"
	block_files "$C" >"$T/$name.blocks"
	python3 - "$(sed -n 3p "$T/$name.blocks")" \
	    "$(sed -n 7p "$T/$name.blocks")" <<'EOF' || fail "cannot damage the cache"
import os, sys
flip, torn = sys.argv[1], sys.argv[2]
with open(flip, "r+b") as f:
    f.seek(os.path.getsize(flip) - 4000)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0x01]))
os.truncate(torn, os.path.getsize(torn) - 1)
EOF
	fs_mount "$name.3" "$src" "$T/m" -o "cache_dir=$C,cache_max_mb=64"
	cmp "$D/a.bin" "$T/m/a.bin" || fail "$name: a.bin over a damaged cache"
	stats_check "$T/m" 'd["corrupt_blocks"] == 2' 'd["hit_blocks"] == 11' \
	    'r["requests"] >= 2' 'r["bytes"] >= 2 << 20'
	fs_umount "$T/m"
	grep -q 'failed its check' "$T/$name.3.err" ||
	    fail "$name: no warning about the damaged blocks"
}

kept http "$HTTP_URL/k/"
kept gs gs://data/k
kept s3 s3://data/k

say "http: the cache never holds more than cache_max_mb, while and after"
C="$T/cache.lim"
mkdir "$C"
# Through the link proxy at 20 MB/s, so that the reads last long enough
# for a few dozen samples.
proxy_start "$HTTP_PORT" --ttfb 1 --conn-rate 0 --total-rate 20M
fs_mount lim "$PROXY_URL/k/" "$T/m" -o "cache_dir=$C,cache_max_mb=24"
# du -sb counts the 257 folders too: the limit is on the blocks.
dirs=$(find "$C/shardfs-cache-v1" -type d | wc -l)
dir_bytes=$(find "$C/shardfs-cache-v1" -type d -printf '%s\n' |
    awk '{ s += $1 } END { print s }')
# Each sample is taken with shardfs stopped (SIGSTOP, and every thread
# seen stopped), so that no block comes or goes during the walk: the
# bytes of the block files then, and du -sb's figure (the folders too). The mount's own count is read from
# its stats file between samples.
python3 - "$C/shardfs-cache-v1" "$T/du.max" "$T/m/.shardfs/stats" \
    "$FS_PID" <<'EOF' &
import json, os, signal, sys, time
top, out, stats, pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
most_files = most_du = most_counted = samples = 0

def stopped(pid):
    # kill() only queues SIGSTOP: a thread can still unlink one block and
    # write another while the walk runs, and the walk would count both.
    # Every thread's state must read T first.
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            st = open("/proc/%d/task/%s/stat" % (pid, tid)).read()
        except FileNotFoundError:
            continue
        if st[st.rindex(")") + 2] not in "Tt":
            return False
    return True

end = time.time() + 60
while time.time() < end and not os.path.exists(out + ".stop"):
    files = du = 0
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.time() + 5
        while not stopped(pid):
            if time.time() > deadline:
                sys.exit("shardfs did not stop within 5 s of SIGSTOP")
            time.sleep(0.001)
        for d, dirs, names in os.walk(top):
            du += os.lstat(d).st_size
            for n in names:
                st = os.lstat(os.path.join(d, n))
                files += st.st_size
                du += st.st_size
    finally:
        os.kill(pid, signal.SIGCONT)
    samples += 1
    most_files, most_du = max(most_files, files), max(most_du, du)
    most_counted = max(most_counted,
                       json.load(open(stats))["disk_cache"]["bytes"])
    time.sleep(0.02)
open(out, "w").write("%d %d %d %d\n" % (most_files, most_du, most_counted,
                                        samples))
EOF
sampler=$!
for k in 0 1 2 3; do
	cmp "$D/l-$k.bin" "$T/m/l-$k.bin" || fail "l-$k.bin differs"
done
touch "$T/du.max.stop"
wait "$sampler"
kill -CONT "$FS_PID"
read -r most_files most_du most_counted samples <"$T/du.max"
du_after=$(du -sb "$C/shardfs-cache-v1" | cut -f1)
files_after=$(find "$C/shardfs-cache-v1" -type f -printf '%s\n' |
    awk '{ s += $1 } END { print s }')
limit=$((24 * 1048576))
echo "cache of 24 MiB, 48 MiB read, $samples samples:" \
    "at most $most_counted bytes counted," \
    "$most_files in files, $most_du with $dirs folders ($dir_bytes bytes);" \
    "after: $files_after in files, du -sb $du_after"
[ "$most_counted" -gt $((limit / 2)) ] || fail "the cache hardly filled: $most_counted"
[ "$most_counted" -le "$limit" ] ||
    fail "the mount counted $most_counted bytes on disk, over the limit $limit"
[ "$samples" -ge 20 ] || fail "only $samples samples"
[ "$most_files" -le "$limit" ] ||
    fail "the block files held $most_files bytes, over the limit $limit"
[ "$most_du" -le $((limit + dir_bytes)) ] ||
    fail "the cache took $most_du bytes, over the limit and its folders"
[ "$files_after" -le "$limit" ] ||
    fail "the block files hold $files_after bytes after the reads, over the limit"
[ "$du_after" -le $((limit + dir_bytes)) ] ||
    fail "du -sb gives $du_after after the reads, over the limit"
stats_check "$T/m" 'd["evicted_blocks"] > 0' 'd["bytes"] <= 24 << 20' \
    'd["written_blocks"] == 51'
fs_umount "$T/m"

say "a symlink planted in the cache is removed, never followed"
printf 'not the cache'"'"'s\n' >"$T/victim"
cp "$T/victim" "$T/victim.orig"
sub="$C/shardfs-cache-v1/ab"
ln -s "$T/victim" "$sub/ab$(printf '%062d' 0)-0000000000000000"
ln -s "$T/victim" "$sub/planted"
mkdir "$T/outside"
mv "$C/shardfs-cache-v1/cd" "$T/cd.orig"
ln -s "$T/outside" "$C/shardfs-cache-v1/cd"
# A subfolder that is a symlink: refused (the mount fails), not followed.
run_rc 1 symsub "$SHARDFS" "$HTTP_URL/k/" "$T/m" -f -o "cache_dir=$C"
has symsub.err "$C/shardfs-cache-v1"
has symsub.err "a symlink; the cache follows none"
fs_mounted "$T/m" && fail "mounted over a cache whose folder is a symlink"
rm "$C/shardfs-cache-v1/cd"
mv "$T/cd.orig" "$C/shardfs-cache-v1/cd"
# A small memory cache: blocks read back from disk are evicted from
# memory like fetched ones.
fs_mount sym "$PROXY_URL/k/" "$T/m" --part-size 1M \
    -o "cache_dir=$C,cache_max_mb=24,cache_mb=16"
for k in 3 2 1 0; do
	cmp "$D/l-$k.bin" "$T/m/l-$k.bin" || fail "l-$k.bin differs"
done
stats_check "$T/m" 'd["hit_blocks"] >= 12' \
    's["cache"]["memory_peak_bytes"] <= s["cache"]["memory_limit_bytes"]'
fs_umount "$T/m"
[ ! -L "$sub/planted" ] && [ ! -e "$sub/planted" ] ||
    fail "the planted symlink is still there"
[ ! -L "$sub/ab$(printf '%062d' 0)-0000000000000000" ] ||
    fail "the symlink named as a block is still there"
cmp "$T/victim" "$T/victim.orig" || fail "the symlink's target changed"
[ -z "$(ls -A "$T/outside")" ] || fail "something was written through a symlink"
[ ! -L "$C/shardfs-cache-v1" ] || fail "the cache folder became a symlink"

say "a cache folder that is a symlink is refused"
mkdir "$T/c2" "$T/elsewhere"
ln -s "$T/elsewhere" "$T/c2/shardfs-cache-v1"
run_rc 1 symtop "$SHARDFS" "$HTTP_URL/k/" "$T/m" -f -o "cache_dir=$T/c2"
has symtop.err "$T/c2/shardfs-cache-v1"
cat "$T/symsub.err" "$T/symtop.err"
[ -z "$(ls -A "$T/elsewhere")" ] || fail "the cache wrote through a symlink"
fs_mounted "$T/m" && fail "mounted over a symlinked cache folder"
echo ok
