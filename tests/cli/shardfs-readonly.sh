#!/usr/bin/env bash
# shardfs-readonly.sh - a mount cannot be changed: every call that would
# write, create, rename, remove or change an attribute fails with EROFS
# (open for writing, O_TRUNC, O_CREAT, creat, mkdir, rmdir, unlink,
# rename, link, symlink, truncate, chmod, chown, utime, setxattr,
# removexattr, mknod), and the mount reads the same afterwards. Twice: as
# mounted (read-only, so the kernel refuses), then remounted read-write by
# root, so that each call reaches shardfs, which must refuse it itself
# (its debug log shows the requests arrive). Read-only is the same for
# every source: nginx stands for them.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/fuse-lib.sh"
need_python os

mkdir -p "$T/www/r/sub/deeper"
head -c 300000 /dev/urandom >"$T/www/r/a.bin"
head -c 3000 /dev/urandom >"$T/www/r/sub/b.bin"
head -c 10 /dev/urandom >"$T/www/r/sub/deeper/c.bin"
cp -a "$T/www/r" "$T/before"
http_start "$T/www"

fs_mount ro "$HTTP_URL/r/" "$T/m" -d
say "mounted read-only: the kernel refuses every change"
awk -v m="$T/m" '$2 == m { print $4 }' /proc/mounts | grep -q '^ro,' ||
    fail "the mount is not read-only in /proc/mounts"
py fs_readonly.py "$T/m" a.bin sub
py fs_readonly.py "$T/m" sub/deeper/c.bin sub/deeper

say "remounted read-write by root: shardfs itself refuses every change"
if mount -i -o remount,rw "$T/m" 2>"$T/remount.err" &&
    awk -v m="$T/m" '$2 == m { print $4 }' /proc/mounts | grep -q '^rw,'; then
	n0=$(wc -l <"$T/ro.err")
	py fs_readonly.py "$T/m" a.bin sub
	# Each kind of request reached shardfs, and each was answered
	# EROFS (-30).
	tail -n +"$n0" "$T/ro.err" >"$T/rw.log"
	for op in SETATTR MKNOD MKDIR UNLINK RMDIR SYMLINK RENAME LINK OPEN \
	    CREATE SETXATTR REMOVEXATTR; do
		grep -q "opcode: $op " "$T/rw.log" ||
		    fail "no $op request reached shardfs on the rw remount"
	done
	errs=$(grep -c 'error: -30 (Read-only file system)' "$T/rw.log" || true)
	[ "$errs" -ge 25 ] ||
	    fail "shardfs answered EROFS $errs times, want 25 or more"
	echo "shardfs answered $errs requests with EROFS"
else
	cat "$T/remount.err"
	echo "cannot remount read-write here: shardfs's own refusals untested"
fi
fs_umount "$T/m"
same_tree "$T/before" "$T/www/r" || fail "the served files changed"
echo ok
