"""fs_tool.py - the Python halves of the shardfs tests: what a source holds
(worked out from the local files nginx serves, or from the GCS JSON API and
boto3, never through shardfs), what a mount shows (parsed from ls -lR),
downloads, tar member digests, and reads through a mount checked byte for
byte against a reference copy.

  fs_tool.py tree-local ROOT           "KIND SIZE MTIME PATH" per entry
  fs_tool.py tree-gs BUCKET PREFIX     the same from objects.list
  fs_tool.py tree-s3 BUCKET PREFIX     the same from ListObjectsV2
  fs_tool.py tree-ls FILE              the same from "ls -lR --time-style=+%s"
  fs_tool.py get-gs BUCKET PREFIX DIR  every object under PREFIX into DIR
  fs_tool.py get-s3 BUCKET PREFIX DIR
  fs_tool.py put-gs BUCKET NAME FILE   upload FILE as NAME
  fs_tool.py put-s3 BUCKET NAME FILE
  fs_tool.py tarsum SHARD...           "NAME TYPE SIZE SHA256" per member
  fs_tool.py preads FILE REF N         N threads pread one fd at once
  fs_tool.py random FILE REF N SEED    N random (offset, length) reads
  fs_tool.py readers REF FILE...       one thread per file, each read whole

KIND is d or f; a folder's SIZE and MTIME are "-" (a prefix has neither).
"""

import hashlib
import json
import os
import random
import re
import sys
import tarfile
import threading
import time
import urllib.parse
import urllib.request

from sktest import check, fail

MIB = 1 << 20


def emit(entries):
    for path in sorted(entries):
        kind, size, mtime = entries[path]
        print(kind, size, mtime, path)


def add_object(entries, rel, size, mtime):
    """An object's path and every folder above it, as a mount shows them
    (folders from names, whether or not an object marks them)."""
    parts = rel.split("/")
    for i in range(1, len(parts)):
        entries.setdefault("/".join(parts[:i]), ("d", "-", "-"))
    if parts[-1] == "":
        return  # a folder marker "a/b/": the folder only
    entries["/".join(parts)] = ("f", size, mtime)


def tree_local(root):
    entries = {}
    for d, dirs, files in os.walk(root):
        for name in dirs:
            rel = os.path.relpath(os.path.join(d, name), root)
            entries[rel] = ("d", "-", "-")
        for name in files:
            p = os.path.join(d, name)
            st = os.stat(p)
            entries[os.path.relpath(p, root)] = ("f", st.st_size,
                                                 int(st.st_mtime))
    return entries


def rfc3339_seconds(s):
    """Whole seconds since the epoch of "2026-01-02T03:04:05.678Z"."""
    import calendar
    m = re.match(r"(\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+)", s)
    check(m is not None, "not an RFC 3339 time: %r" % s)
    return calendar.timegm(tuple(int(x) for x in m.groups()))


def gcs(path, data=None, method=None):
    req = urllib.request.Request(os.environ["STORAGE_EMULATOR_HOST"] + path,
                                 data=data, method=method)
    with urllib.request.urlopen(req) as r:
        return r.read()


def gs_objects(bucket, prefix):
    out, token = [], None
    while True:
        q = "/storage/v1/b/%s/o?prefix=%s" % (bucket, urllib.parse.quote(
            prefix, safe=""))
        if token:
            q += "&pageToken=" + urllib.parse.quote(token, safe="")
        page = json.loads(gcs(q))
        out += page.get("items") or []
        token = page.get("nextPageToken")
        if not token:
            return out


def tree_gs(bucket, prefix):
    entries = {}
    for o in gs_objects(bucket, prefix):
        add_object(entries, o["name"][len(prefix):], int(o["size"]),
                   rfc3339_seconds(o["updated"]))
    return entries


def s3():
    import boto3
    return boto3.client("s3")


def s3_objects(bucket, prefix):
    out = []
    for page in s3().get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix):
        out += page.get("Contents") or []
    return out


def tree_s3(bucket, prefix):
    import calendar
    entries = {}
    for o in s3_objects(bucket, prefix):
        add_object(entries, o["Key"][len(prefix):], o["Size"],
                   calendar.timegm(o["LastModified"].utctimetuple()))
    return entries


def tree_ls(path):
    """ls -lR --time-style=+%s: "DIR:" headers, "total N", then
    "MODE LINKS USER GROUP SIZE MTIME NAME" lines."""
    entries, top, here = {}, None, None
    for line in open(path, encoding="utf-8", errors="surrogateescape"):
        line = line.rstrip("\n")
        if line == "" or line.startswith("total "):
            continue
        if line.endswith(":") and not line[0] in "-dlbcps":
            d = line[:-1]
            if top is None:
                top = d
            here = os.path.relpath(d, top)
            continue
        f = line.split(None, 6)
        check(len(f) == 7, "ls line: %r" % line)
        mode, _, user, group, size, mtime, name = f
        rel = name if here == "." else here + "/" + name
        if mode[0] == "d":
            check(mode == "dr-xr-xr-x", "%s: mode %s, want dr-xr-xr-x" %
                  (rel, mode))
            entries[rel] = ("d", "-", "-")
        else:
            check(mode == "-r--r--r--", "%s: mode %s, want -r--r--r--" %
                  (rel, mode))
            entries[rel] = ("f", int(size), int(mtime))
        check(user == str(os.getuid()) or user == _user(),
              "%s: owned by %s, not the mounting user" % (rel, user))
    return entries


def _user():
    import pwd
    return pwd.getpwuid(os.getuid()).pw_name


def get_gs(bucket, prefix, dest):
    for o in gs_objects(bucket, prefix):
        rel = o["name"][len(prefix):]
        if rel == "" or rel.endswith("/"):
            continue
        p = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(gcs("/storage/v1/b/%s/o/%s?alt=media" % (
                bucket, urllib.parse.quote(o["name"], safe=""))))


def get_s3(bucket, prefix, dest):
    c = s3()
    for o in s3_objects(bucket, prefix):
        rel = o["Key"][len(prefix):]
        if rel == "" or rel.endswith("/"):
            continue
        p = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(c.get_object(Bucket=bucket, Key=o["Key"])["Body"].read())


def put_gs(bucket, name, path):
    # A multipart upload: the emulator's media upload fails on an empty
    # body.
    meta = json.dumps({"name": name}).encode()
    body = (b"--B\r\nContent-Type: application/json\r\n\r\n" + meta +
            b"\r\n--B\r\nContent-Type: application/octet-stream\r\n\r\n" +
            open(path, "rb").read() + b"\r\n--B--\r\n")
    req = urllib.request.Request(
        os.environ["STORAGE_EMULATOR_HOST"] +
        "/upload/storage/v1/b/%s/o?uploadType=multipart" % bucket,
        data=body, method="POST",
        headers={"Content-Type": "multipart/related; boundary=B"})
    urllib.request.urlopen(req).read()


def put_s3(bucket, name, path):
    s3().put_object(Bucket=bucket, Key=name, Body=open(path, "rb").read())


def tarsum(shards):
    for s in shards:
        with tarfile.open(s, "r:") as tf:
            for ti in tf:
                h = hashlib.sha256()
                if ti.isfile():
                    h.update(tf.extractfile(ti).read())
                print(ti.name, ti.type.decode(), ti.size, ti.mtime,
                      h.hexdigest())


def check_bytes(what, got, ref, off):
    if got == ref:
        return
    n = min(len(got), len(ref))
    first = next((i for i in range(n) if got[i] != ref[i]), n)
    fail("%s: %d bytes at %d, want %d; first difference at byte %d" %
         (what, len(got), off, len(ref), off + first))


def preads(path, refpath, nthreads):
    """nthreads threads pread one file descriptor at once, each over the
    whole file in 256 KiB to 1 MiB pieces from its own starting point, so
    they cross each other; os.pread lets go of the GIL while it waits."""
    ref = open(refpath, "rb").read()
    fd = os.open(path, os.O_RDONLY)
    errors = []

    def run(k):
        try:
            rng = random.Random(k)
            off = (len(ref) * k // nthreads) // 4096 * 4096
            done = 0
            while done < len(ref):
                n = rng.randrange(256 << 10, (1 << 20) + 1)
                o = (off + done) % len(ref)
                got = os.pread(fd, n, o)
                check_bytes("thread %d" % k, got, ref[o:o + n], o)
                done += max(len(got), 1)
        except BaseException as e:  # noqa: B036 - reported below
            errors.append(e)

    ts = [threading.Thread(target=run, args=(k,)) for k in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    os.close(fd)
    if errors:
        raise errors[0]
    print("%d threads read %d bytes each through one fd" % (nthreads,
                                                           len(ref)))


def random_reads(path, refpath, n, seed):
    """n reads at random offsets of random lengths (1 B to 2 MiB, log
    uniform), a third of them starting just before a 1 MiB boundary or the
    end of the file, through one fd opened O_DIRECT so that each goes to
    the filesystem, not the page cache."""
    ref = open(refpath, "rb").read()
    size = len(ref)
    rng = random.Random(seed)
    flags = os.O_RDONLY | getattr(os, "O_DIRECT", 0)
    fd = os.open(path, flags)
    crossing = 0
    for i in range(n):
        length = int(2 ** rng.uniform(0, 21))
        kind = rng.random()
        if kind < 0.2:
            edge = rng.randrange(1, size // MIB + 1) * MIB
            off = max(0, edge - rng.randrange(1, length + 1))
        elif kind < 0.3:
            off = max(0, size - rng.randrange(1, length + 1))
        else:
            off = rng.randrange(0, size)
        if off // MIB != min(off + length, size) // MIB:
            crossing += 1
        got = os.pread(fd, length, off)
        check_bytes("read %d" % i, got, ref[off:off + length], off)
    # Past the end: nothing.
    check(os.pread(fd, 10, size) == b"", "a read at the end gave bytes")
    check(os.pread(fd, 10, size + 12345) == b"", "a read past the end gave "
          "bytes")
    os.close(fd)
    check(crossing > n // 5, "only %d reads crossed a block" % crossing)
    print("%d random reads of %d bytes, %d crossing a 1 MiB block: equal" %
          (n, size, crossing))


def readers(refdir, files):
    """One thread per file, all at once, each reading its file whole in
    128 KiB reads and comparing it with REF/NAME."""
    errors = []

    def run(p):
        try:
            ref = open(os.path.join(refdir, os.path.basename(p)), "rb").read()
            got = bytearray()
            with open(p, "rb", buffering=0) as f:
                while True:
                    b = f.read(128 << 10)
                    if not b:
                        break
                    got += b
            check_bytes(p, bytes(got), ref, 0)
        except BaseException as e:  # noqa: B036 - reported below
            errors.append(e)

    t0 = time.time()
    ts = [threading.Thread(target=run, args=(p,)) for p in files]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    print("%d readers at once: equal (%.1f s)" % (len(files),
                                                 time.time() - t0))


def main():
    a = sys.argv[1:]
    if not a:
        fail("usage: fs_tool.py COMMAND ARGS (see the file)")
    cmd, a = a[0], a[1:]
    if cmd == "tree-local":
        emit(tree_local(a[0]))
    elif cmd == "tree-gs":
        emit(tree_gs(a[0], a[1]))
    elif cmd == "tree-s3":
        emit(tree_s3(a[0], a[1]))
    elif cmd == "tree-ls":
        emit(tree_ls(a[0]))
    elif cmd == "get-gs":
        get_gs(a[0], a[1], a[2])
    elif cmd == "get-s3":
        get_s3(a[0], a[1], a[2])
    elif cmd == "put-gs":
        put_gs(a[0], a[1], a[2])
    elif cmd == "put-s3":
        put_s3(a[0], a[1], a[2])
    elif cmd == "tarsum":
        tarsum(a)
    elif cmd == "preads":
        preads(a[0], a[1], int(a[2]))
    elif cmd == "random":
        random_reads(a[0], a[1], int(a[2]), int(a[3]))
    elif cmd == "readers":
        readers(a[0], a[1:])
    else:
        fail("fs_tool.py: unknown command %s" % cmd)


if __name__ == "__main__":
    main()
