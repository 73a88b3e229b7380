#!/usr/bin/env bash
# shardfs-direct-io.sh - -o direct_io (shardfs(1)): every file of the
# mount reads as its source does (whole, in odd-sized reads, as a tar
# shard, through a private mmap), and the kernel keeps none of it, so a
# second read of a file reaches the daemon again where a mount without the
# option answers it from the page cache; what a reader read whole leaves
# the block cache, so a read again fetches it again. A program's small
# reads grow the read-ahead window by the bytes they read: five reads of
# 8 KiB fetch the first window, not 64 MiB. A shared mmap fails with
# ENODEV when shardfs is built with libfuse before 3.16, and works after,
# as the man page says. The long spelling is accepted and the flag takes
# no value.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/fuse-lib.sh"
need_cmd tar

D="$T/www/d"
mkdir -p "$D"
head -c $((6 * 1048576 + 4321)) /dev/urandom >"$D/big.bin"
head -c $((64 * 1048576)) /dev/urandom >"$D/huge.bin"
head -c 3000 /dev/urandom >"$D/small.bin"
: >"$D/empty.bin"
synth_imagenet "$T/i" --classes 2 --per-class 6 --val 2 --seed 7
st pack pack imagenet "$T/i" -o "$D/in-%06d.tar" --max-count 100
http_start "$T/www"

# reads MNT FILE: the daemon's read count after FILE is read once more.
reads() {
	cat "$1/$2" >/dev/null
	fs_stat "$1" reads
}

say "-o direct_io: every file reads as its source, whole and in odd sizes"
fs_mount dio "$HTTP_URL/d/" "$T/m" -o direct_io
for f in big.bin small.bin empty.bin in-000000.tar; do
	cmp "$D/$f" "$T/m/$f" || fail "direct_io: $f differs"
	dd if="$T/m/$f" bs=4097 status=none | cmp "$D/$f" - ||
	    fail "direct_io: $f read 4097 bytes at a time differs"
done
(cd "$D" && tar -tvf in-000000.tar) >"$T/tv.want"
(cd "$T/m" && tar -tvf in-000000.tar) >"$T/tv.got" ||
    fail "direct_io: tar -tvf through the mount"
cmp -s "$T/tv.want" "$T/tv.got" || fail "direct_io: tar -tvf differs"

say "direct_io: the kernel keeps nothing; a second read reaches the daemon"
a=$(reads "$T/m" big.bin)
b=$(reads "$T/m" big.bin)
[ "$b" -ge $((a + 6)) ] ||
    fail "direct_io: a second read of big.bin made $((b - a)) reads, want >= 6"

say "direct_io: five reads of 8 KiB fetch the first window, not 64 MiB"
a=$(fs_stat "$T/m" remote.bytes)
dd if="$T/m/huge.bin" of=/dev/null bs=8k count=5 status=none
sleep 1
b=$(fs_stat "$T/m" remote.bytes)
[ $((b - a)) -le $((8 << 20)) ] ||
    fail "direct_io: 40 KiB read in 8 KiB reads fetched $((b - a)) bytes"

say "direct_io: a file read whole is fetched again when read again"
cmp "$D/huge.bin" "$T/m/huge.bin" || fail "direct_io: huge.bin differs"
a=$(fs_stat "$T/m" remote.bytes)
cmp "$D/huge.bin" "$T/m/huge.bin" || fail "direct_io: huge.bin differs"
b=$(fs_stat "$T/m" remote.bytes)
[ $((b - a)) -ge $((32 << 20)) ] ||
    fail "direct_io: a second read of huge.bin fetched $((b - a)) bytes"

# libfuse 3.16 and later can ask the kernel to allow a shared mmap.
shared=enodev
if pkg-config --atleast-version=3.16 fuse3 2>/dev/null; then
	shared=works
fi
say "direct_io: a private mmap reads the file; a shared one: $shared"
python3 - "$D/big.bin" "$T/m/big.bin" "$shared" <<'EOF' ||
import errno, mmap, os, sys
want = open(sys.argv[1], "rb").read()
fd = os.open(sys.argv[2], os.O_RDONLY)
m = mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
assert m[:] == want, "a private mmap read other bytes"
m.close()
try:
    m = mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
except OSError as e:
    assert sys.argv[3] == "enodev" and e.errno == errno.ENODEV, \
        "a shared mmap failed with %r" % e
else:
    assert sys.argv[3] == "works", \
        "a shared mmap worked, where shardfs(1) says ENODEV"
    assert m[:] == want, "a shared mmap read other bytes"
EOF
    fail "direct_io: mmap"
fs_umount "$T/m"

say "without it, a second read is the kernel's: no read reaches the daemon"
fs_mount cached "$HTTP_URL/d/" "$T/m"
a=$(reads "$T/m" big.bin)
b=$(reads "$T/m" big.bin)
[ "$b" -eq "$a" ] ||
    fail "default mount: a second read of big.bin made $((b - a)) reads, want 0"
fs_umount "$T/m"

say "--direct-io is the same option; -o direct_io=1 is a usage error"
fs_mount long "$HTTP_URL/d/" "$T/m" --direct-io
a=$(reads "$T/m" small.bin)
b=$(reads "$T/m" small.bin)
[ "$b" -gt "$a" ] || fail "--direct-io: a second read did not reach the daemon"
fs_umount "$T/m"
run_rc 2 bad "$SHARDFS" "$HTTP_URL/d/" "$T/m" -f -o direct_io=1
has bad.err "direct_io=1: takes no value"
echo ok
