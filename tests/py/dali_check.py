"""dali_check.py - check DALI .idx files against their shards.

  dali_check.py IDX SHARD [IDX SHARD ...]

Each index starts "v1.2 N" with N its sample lines; every line is groups
of "ext offset size name"; the bytes at offset..offset+size of the shard are
the member's data as tarfile extracts it; every regular member is indexed
once, in tar order, grouped by key as WebDataset groups them.
"""

import sys

from sktest import check, say, split_name, tar_members, tar_samples


def check_one(idx, shard):
    with open(idx) as f:
        lines = f.read().split("\n")
    check(lines[-1] == "", "%s: does not end with a newline" % idx)
    lines = lines[:-1]
    head = lines[0].split()
    check(len(head) == 2 and head[0] == "v1.2" and head[1].isdigit(),
          "%s: first line %r, want 'v1.2 N'" % (idx, lines[0]))
    n = int(head[1])
    check(n == len(lines) - 1, "%s: says %d samples, has %d lines" % (idx, n, len(lines) - 1))
    samples = tar_samples(shard)
    check(n == len(samples), "%s: %d samples, %s holds %d" % (idx, n, shard, len(samples)))

    with open(shard, "rb") as f:
        raw = f.read()
    members = {ti.name: (ti, data) for ti, data in tar_members(shard)}
    order = [ti.name for ti, _ in tar_members(shard)]
    indexed = []
    for lineno, line in enumerate(lines[1:], 2):
        tok = line.split(" ")
        check(len(tok) % 4 == 0 and tok, "%s:%d: %d fields, want groups of 4: %r" % (idx, lineno, len(tok), line))
        keys = set()
        for i in range(0, len(tok), 4):
            ext, off, size, name = tok[i:i + 4]
            check(off.isdigit() and size.isdigit(), "%s:%d: offset %r size %r" % (idx, lineno, off, size))
            off, size = int(off), int(size)
            check(name in members, "%s:%d: %s is not a member of %s" % (idx, lineno, name, shard))
            ti, data = members[name]
            key, mext = split_name(name)
            keys.add(key)
            check(ext == mext, "%s:%d: ext %r for %s" % (idx, lineno, ext, name))
            check(off == ti.offset_data, "%s:%d: %s at offset %d, tarfile says %d" %
                  (idx, lineno, name, off, ti.offset_data))
            check(size == ti.size, "%s:%d: %s size %d, tarfile says %d" % (idx, lineno, name, size, ti.size))
            check(raw[off:off + size] == data, "%s:%d: bytes at %d..%d are not %s's data" %
                  (idx, lineno, off, off + size, name))
            indexed.append(name)
        check(len(keys) == 1, "%s:%d: one line holds several keys: %s" % (idx, lineno, sorted(keys)))
    check(indexed == order, "%s: indexes %d members, %s holds %d (or another order)" %
          (idx, len(indexed), shard, len(order)))
    return n, len(indexed)


def main():
    args = sys.argv[1:]
    check(args and len(args) % 2 == 0, "usage: dali_check.py IDX SHARD ...")
    ns = nm = 0
    for i in range(0, len(args), 2):
        n, m = check_one(args[i], args[i + 1])
        ns += n
        nm += m
    say("%d DALI indexes: %d samples, %d members, every offset holds the member's data" %
        (len(args) // 2, ns, nm))


main()
