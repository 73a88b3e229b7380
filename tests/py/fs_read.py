"""fs_read.py - one read through a shardfs mount, timed, with what it got
and how it ended, for the fault tests.

  fs_read.py whole FILE OUT [BS]     read FILE from the start in BS-byte
                                     reads (64 KiB) into OUT until the end
                                     or an error
  fs_read.py at FILE OFF LEN         one O_DIRECT pread

Prints one line: "ok BYTES SECONDS" or "ERRNO_NAME BYTES SECONDS" (the
bytes read before the error), and exits 0 either way; the test judges.
"""

import errno
import os
import sys
import time


def main():
    what, path = sys.argv[1], sys.argv[2]
    t0 = time.monotonic()
    got, err = 0, None
    if what == "whole":
        out = open(sys.argv[3], "wb")
        bs = int(sys.argv[4]) if len(sys.argv) > 4 else 64 << 10
        fd = os.open(path, os.O_RDONLY)
        try:
            while True:
                b = os.read(fd, bs)
                if not b:
                    break
                out.write(b)
                got += len(b)
        except OSError as e:
            err = e.errno
        os.close(fd)
        out.close()
    elif what == "at":
        off, n = int(sys.argv[3]), int(sys.argv[4])
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
        try:
            got = len(os.pread(fd, n, off))
        except OSError as e:
            err = e.errno
        os.close(fd)
    else:
        sys.exit("fs_read.py: whole or at")
    print("%s %d %.2f" % ("ok" if err is None else errno.errorcode[err], got,
                          time.monotonic() - t0))


if __name__ == "__main__":
    main()
