"""sktest.py - helpers the Python halves of the CLI tests share: failing
with a message, reading CIFAR-10 records, the WebDataset key rule, reading
shards with tarfile, and checking a manifest against its shards."""

import hashlib
import json
import os
import re
import sys
import tarfile

CIFAR_RECORD = 1 + 3 * 32 * 32


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def say(msg):
    print("-- " + msg)


# ---------------------------------------------------------------------------
# CIFAR-10


def cifar_files(src, split):
    if split == "train":
        return [os.path.join(src, "data_batch_%d.bin" % i) for i in range(1, 6)]
    return [os.path.join(src, "test_batch.bin")]


def read_cifar(src, split):
    """The records of a split in file order: a list of (label, planar)."""
    recs = []
    for path in cifar_files(src, split):
        with open(path, "rb") as f:
            data = f.read()
        check(len(data) % CIFAR_RECORD == 0,
              "%s: %d bytes is not a whole number of records" % (path, len(data)))
        for off in range(0, len(data), CIFAR_RECORD):
            recs.append((data[off], data[off + 1:off + CIFAR_RECORD]))
    return recs


def planar_to_hwc(planar):
    """CIFAR's 1024 R, 1024 G, 1024 B bytes -> a (32, 32, 3) uint8 array."""
    import numpy as np
    return np.frombuffer(planar, dtype=np.uint8).reshape(3, 32, 32).transpose(1, 2, 0)


# ---------------------------------------------------------------------------
# shards

_KEY_RE = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")


def split_name(name):
    """WebDataset: the key is the path up to the first dot of the basename,
    the extension everything after it. (key, ext), ext None without a dot."""
    m = _KEY_RE.match(name)
    if m is None:
        return name, None
    return m.group(1), m.group(2)


def tar_members(path):
    """The regular members of a tar: a list of (TarInfo, data)."""
    out = []
    with tarfile.open(path, "r:") as tf:
        for ti in tf:
            if not ti.isfile():
                continue
            out.append((ti, tf.extractfile(ti).read()))
    return out


def tar_samples(path):
    """The samples of a shard as WebDataset groups them: adjacent members
    with one key. A list of (key, {ext: data}); a repeated extension in one
    sample or a key that comes back after another fails."""
    samples = []
    seen = set()
    for ti, data in tar_members(path):
        key, ext = split_name(ti.name)
        if key.startswith("__") and key.endswith("__"):
            continue
        if not samples or samples[-1][0] != key:
            check(key not in seen, "%s: members of %s are not adjacent" % (path, key))
            seen.add(key)
            samples.append((key, {}))
        check(ext not in samples[-1][1], "%s: %s twice in %s" % (path, ext, key))
        samples[-1][1][ext] = data
    return samples


def load_manifest(path):
    with open(path) as f:
        man = json.load(f)
    check(man.get("__kind__") == "wids-shard-index-v1",
          "%s: __kind__ is %r, want wids-shard-index-v1" % (path, man.get("__kind__")))
    check(man.get("wids_version") == 1, "%s: wids_version is %r, want 1" % (path, man.get("wids_version")))
    check(isinstance(man.get("shardlist"), list) and man["shardlist"],
          "%s: no shardlist" % path)
    return man


def manifest_shards(path, man=None):
    """The shard paths of a manifest, resolved against its folder."""
    man = man or load_manifest(path)
    base = os.path.dirname(os.path.abspath(path))
    return [os.path.join(base, s["url"]) for s in man["shardlist"]]


def md5_of(path):
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_manifest(path, shards=None):
    """Each manifest entry's nsamples, filesize and md5sum match the shard;
    with shards (paths), the manifest lists exactly those, in that order.
    Returns the manifest."""
    man = load_manifest(path)
    paths = manifest_shards(path, man)
    if shards is not None:
        want = [os.path.abspath(s) for s in shards]
        check([os.path.abspath(p) for p in paths] == want,
              "%s lists %s, want %s" % (path, paths, want))
    for entry, shard in zip(man["shardlist"], paths):
        check(os.path.exists(shard), "%s: %s does not exist" % (path, shard))
        for field in ("url", "nsamples", "filesize", "md5sum"):
            check(field in entry, "%s: entry %r has no %s" % (path, entry, field))
        size = os.stat(shard).st_size
        check(entry["filesize"] == size,
              "%s: filesize %s for %s, the file has %d bytes" % (path, entry["filesize"], shard, size))
        md5 = md5_of(shard)
        check(entry["md5sum"].lower() == md5,
              "%s: md5sum %s for %s, the file's is %s" % (path, entry["md5sum"], shard, md5))
        n = len(tar_samples(shard))
        check(entry["nsamples"] == n,
              "%s: nsamples %s for %s, it holds %d" % (path, entry["nsamples"], shard, n))
    return man


def summary_count(text, what):
    """N of "  converted: N (...)" or "  skipped: N" in pack's summary."""
    m = re.search(r"^\s*%s: (\d+)" % what, text, re.M)
    check(m is not None, "no '%s: N' line in the summary:\n%s" % (what, text))
    return int(m.group(1))
