"""tarinfo.py - facts about shards read with Python tarfile, one per line,
for the shell tests to compare.

  tarinfo.py keys SHARD...      sample keys in order
  tarinfo.py names SHARD...     member names in order
  tarinfo.py mtimes SHARD...    the distinct member mtimes
  tarinfo.py counts SHARD...    "SIZE NSAMPLES PATH" per shard
"""

import os
import sys
import tarfile

from sktest import fail, tar_samples


def main():
    what, shards = sys.argv[1], sys.argv[2:]
    if what == "keys":
        for s in shards:
            for key, _ in tar_samples(s):
                print(key)
    elif what == "names":
        for s in shards:
            with tarfile.open(s, "r:") as tf:
                for ti in tf:
                    print(ti.name)
    elif what == "mtimes":
        seen = set()
        for s in shards:
            with tarfile.open(s, "r:") as tf:
                seen.update(int(ti.mtime) for ti in tf)
        for t in sorted(seen):
            print(t)
    elif what == "counts":
        for s in shards:
            print(os.path.getsize(s), len(tar_samples(s)), s)
    else:
        fail("tarinfo.py: unknown request %s" % what)


main()
