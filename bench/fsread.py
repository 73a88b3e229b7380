"""fsread.py - the readers of bench/shardfs.sh: what a program that only
opens files does to a mount, timed. One JSON object on stdout.

  fsread.py seq FILE        one reader, 1 MiB reads (as dd bs=1M) to the
                            end, the time of every MiB kept
  fsread.py many DIR [-j N] list DIR, then N threads (32) each open, read
                            to the end and close its share of the files
  fsread.py dir DIR         os.scandir of DIR (names only, as ls -f),
                            then os.stat of every entry (as ls -l)
  fsread.py list URL [ENDPOINT]
                            the server's own listing, straight, as the
                            ceiling of dir: http://.../DIR/ one GET of
                            nginx's JSON autoindex; s3://BUCKET/PREFIX/
                            ListObjectsV2 pages (boto3, 1000 keys each)
                            from ENDPOINT

seq: seconds from before open() to the last byte; steady_mb_s is the
whole file's rate; ramp_mib the MiB at which the rate over the last 8 MiB
first reaches 90% of it; t32_s the time to the first 32 MiB. Reads go
into one buffer (readinto: no allocation per read), so the reader's own
CPU is the syscalls'. many: os.open/os.readv/os.close release the GIL, so
the 32 threads wait on the filesystem at once, as 32 processes would.
1 MB = 1e6 bytes.
"""

import json
import os
import sys
import threading
import time

MIB = 1 << 20


def seq(path):
    buf = bytearray(MIB)
    view = memoryview(buf)
    marks = []  # seconds at each whole MiB
    n = 0
    t0 = time.monotonic()
    with open(path, "rb", buffering=0) as f:
        while True:
            got = f.readinto(view)
            if not got:
                break
            n += got
            while len(marks) < n // MIB:
                marks.append(time.monotonic() - t0)
    secs = time.monotonic() - t0
    steady = n / secs if secs > 0 else 0.0
    ramp = None
    for k in range(8, len(marks) + 1):
        dt = marks[k - 1] - (marks[k - 9] if k > 8 else 0.0)
        if dt > 0 and 8 * MIB / dt >= 0.9 * steady:
            ramp = k
            break
    return {"bytes": n, "seconds": round(secs, 6),
            "mb_s": round(n / secs / 1e6, 3) if secs > 0 else None,
            "steady_mb_s": round(steady / 1e6, 3),
            "first_mib_s": round(marks[0], 6) if marks else None,
            "t32_s": round(marks[31], 6) if len(marks) >= 32 else None,
            "ramp_mib": ramp}


def many(folder, threads):
    t0 = time.monotonic()
    names = sorted(os.listdir(folder))
    t_list = time.monotonic() - t0
    listed = len(names)
    # not the mount's own .shardfs or other hidden names
    names = [x for x in names if not x.startswith(".")]
    paths = [os.path.join(folder, x) for x in names]
    counts = [0] * threads
    sizes = [0] * threads
    errors = []

    def work(i):
        buf = bytearray(MIB)
        try:
            for p in paths[i::threads]:
                fd = os.open(p, os.O_RDONLY)
                try:
                    while True:
                        got = os.readv(fd, [buf])
                        if not got:
                            break
                        sizes[i] += got
                finally:
                    os.close(fd)
                counts[i] += 1
        except OSError as e:
            errors.append(str(e))

    t1 = time.monotonic()
    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    secs = time.monotonic() - t1
    files, n = sum(counts), sum(sizes)
    return {"files": files, "bytes": n, "list_seconds": round(t_list, 6),
            "listed": listed, "seconds": round(secs, 6),
            "files_s": round(files / secs, 3) if secs > 0 else None,
            "mb_s": round(n / secs / 1e6, 3) if secs > 0 else None,
            "errors": errors[:5]}


def listdir(folder):
    t0 = time.monotonic()
    with os.scandir(folder) as it:
        names = [e.name for e in it]
    t_names = time.monotonic() - t0
    names = [x for x in names if not x.startswith(".")]
    t1 = time.monotonic()
    total = 0
    for x in names:
        total += os.stat(os.path.join(folder, x)).st_size
    t_stat = time.monotonic() - t1
    return {"entries": len(names), "seconds": round(t_names, 6),
            "stat_seconds": round(t_stat, 6), "bytes": total}


def server_list(url, endpoint=None):
    if url.startswith("s3://"):
        import boto3
        bucket, _, prefix = url[5:].partition("/")
        s3 = boto3.client("s3", endpoint_url=endpoint)
        pages = s3.get_paginator("list_objects_v2")
        t0 = time.monotonic()
        names = [o["Key"] for p in pages.paginate(
            Bucket=bucket, Prefix=prefix, Delimiter="/")
            for o in p.get("Contents", [])]
    else:
        import urllib.request
        t0 = time.monotonic()
        with urllib.request.urlopen(url) as r:
            names = [e["name"] for e in json.load(r)]
    secs = time.monotonic() - t0
    names = [x for x in names if not x.rsplit("/", 1)[-1].startswith(".")]
    return {"entries": len(names), "seconds": round(secs, 6)}


def main(argv):
    if len(argv) >= 2 and argv[0] == "seq":
        out = seq(argv[1])
    elif len(argv) >= 2 and argv[0] == "many":
        j = int(argv[3]) if len(argv) >= 4 and argv[2] == "-j" else 32
        out = many(argv[1], j)
    elif len(argv) >= 2 and argv[0] == "dir":
        out = listdir(argv[1])
    elif len(argv) >= 2 and argv[0] == "list":
        out = server_list(argv[1], argv[2] if len(argv) > 2 else None)
    else:
        sys.exit(__doc__)
    json.dump(out, sys.stdout)
    print()
    return 1 if out.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
