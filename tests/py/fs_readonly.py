"""fs_readonly.py - every call that would change a shardfs mount fails with
EROFS, and nothing changed after them.

  fs_readonly.py MNT FILE DIR

FILE is a file of the mount and DIR a folder of it (paths under MNT); the
mount's root, FILE and DIR are looked at before and after.
"""

import errno
import hashlib
import os
import sys

from sktest import check, fail

mnt, rel_file, rel_dir = sys.argv[1:4]
F = os.path.join(mnt, rel_file)
D = os.path.join(mnt, rel_dir)
NEW = os.path.join(mnt, "new-name")


def snapshot():
    out = []
    for d, dirs, files in os.walk(mnt):
        for n in sorted(dirs) + sorted(files):
            p = os.path.join(d, n)
            st = os.lstat(p)
            h = ""
            if os.path.isfile(p) and not p.endswith("/.shardfs/stats"):
                with open(p, "rb") as f:
                    h = hashlib.sha256(f.read()).hexdigest()
            out.append((os.path.relpath(p, mnt), st.st_mode, st.st_size,
                        st.st_mtime_ns, st.st_uid, st.st_gid, h))
    return sorted(out)


def erofs(what, fn, *args):
    try:
        r = fn(*args)
    except OSError as e:
        check(e.errno == errno.EROFS, "%s: %s, want EROFS" % (what, e))
        return
    if isinstance(r, int) and fn is os.open:
        os.close(r)
    fail("%s succeeded on a read-only mount" % what)


before = snapshot()
check(len(before) > 3, "the mount shows almost nothing: %r" % before)
# (O_RDONLY|O_CREAT of an existing file changes nothing: Linux lets it
# open, as POSIX allows.)
for flags, name in ((os.O_WRONLY, "O_WRONLY"), (os.O_RDWR, "O_RDWR"),
                    (os.O_RDONLY | os.O_TRUNC, "O_RDONLY|O_TRUNC"),
                    (os.O_WRONLY | os.O_TRUNC, "O_WRONLY|O_TRUNC"),
                    (os.O_WRONLY | os.O_APPEND, "O_APPEND"),
                    (os.O_WRONLY | os.O_CREAT, "O_WRONLY|O_CREAT")):
    erofs("open(FILE, %s)" % name, os.open, F, flags)
erofs("open(NEW, O_CREAT)", os.open, NEW, os.O_WRONLY | os.O_CREAT, 0o644)
erofs("open(NEW, O_CREAT|O_EXCL)", os.open, NEW,
      os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
erofs("open(DIR/new, O_CREAT)", os.open, os.path.join(D, "x"),
      os.O_WRONLY | os.O_CREAT, 0o644)
erofs("creat(NEW)", os.open, NEW, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
      0o644)
erofs("open(stats, O_WRONLY)", os.open,
      os.path.join(mnt, ".shardfs", "stats"), os.O_WRONLY)
erofs("mkdir", os.mkdir, os.path.join(mnt, "newdir"))
erofs("mkdir in DIR", os.mkdir, os.path.join(D, "newdir"))
erofs("rmdir", os.rmdir, D)
erofs("unlink", os.unlink, F)
erofs("rename a file", os.rename, F, NEW)
erofs("rename a file onto a file", os.rename, F, os.path.join(D, "x"))
erofs("rename a folder", os.rename, D, os.path.join(mnt, "newdir"))
erofs("link", os.link, F, NEW)
erofs("symlink", os.symlink, "target", NEW)
erofs("truncate", os.truncate, F, 0)
erofs("truncate longer", os.truncate, F, 1 << 20)
erofs("chmod", os.chmod, F, 0o666)
erofs("chmod a folder", os.chmod, D, 0o777)
erofs("chown", os.chown, F, 1, 1)
erofs("utime now", os.utime, F)
erofs("utime a time", os.utime, F, (1, 1))
erofs("setxattr", os.setxattr, F, "user.x", b"1")
erofs("removexattr", os.removexattr, F, "user.x")
erofs("mknod a fifo", os.mkfifo, NEW)
erofs("mknod a file", os.mknod, NEW, 0o644)
fd = os.open(F, os.O_RDONLY)
try:
    os.ftruncate(fd, 0)
    fail("ftruncate of a read-only fd succeeded")
except OSError as e:
    check(e.errno in (errno.EROFS, errno.EINVAL, errno.EBADF),
          "ftruncate: %s" % e)
try:
    os.write(fd, b"x")
    fail("write to a read-only fd succeeded")
except OSError as e:
    check(e.errno == errno.EBADF, "write: %s" % e)
os.close(fd)
check(not os.path.lexists(NEW), "NEW exists after the calls")
after = snapshot()
check(before == after, "the mount changed: %r" % (
    set(before) ^ set(after)))
print("every mutating call failed with EROFS; nothing changed")
