"""wds_write.py - write shards with the Python webdataset ShardWriter and
record what was written, for "shardtool ls" and "verify" to be held to.

  wds_write.py OUTDIR

Writes OUTDIR/wds-%06d.tar (5 samples per shard) and OUTDIR/gnu.tar (GNU
format with a long name, made by tarfile), then for each tar
OUTDIR/NAME.ls (what "shardtool ls" should print) and OUTDIR/NAME.lsl (what
"shardtool ls -l" should print: data offset, size, name).
"""

import glob
import io
import json
import os
import sys
import tarfile

from PIL import Image

import webdataset as wds

from sktest import check, say, split_name


def png(seed):
    im = Image.new("RGB", (8, 6))
    im.putdata([((seed * 13 + i) % 256, (seed * 7) % 256, (i * 29) % 256) for i in range(48)])
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def expected(path):
    """The ls and ls -l text for a tar, from tarfile's view of it."""
    ls, lsl = [], []
    with tarfile.open(path, "r:") as tf:
        members = [ti for ti in tf if ti.isfile()]
    for ti in members:
        lsl.append("%d %d %s\n" % (ti.offset_data, ti.size, ti.name))
        key, ext = split_name(ti.name)
        if ls and ls[-1][0] == key:
            ls[-1][1].append(ext)
        else:
            ls.append((key, [ext]))
    base = os.path.splitext(path)[0]
    with open(base + ".ls", "w") as f:
        f.write("".join("%s\t%s\n" % (k, " ".join(e)) for k, e in ls))
    with open(base + ".lsl", "w") as f:
        f.write("".join(lsl))
    return members


def main():
    out = sys.argv[1]
    keys = ["sample%03d" % i for i in range(12)]
    # A key whose member names need more than ustar's 100 bytes.
    keys.append("long/" + "k" * 120)
    with wds.ShardWriter(os.path.join(out, "wds-%06d.tar"), maxcount=5, verbose=0) as sink:
        for i, key in enumerate(keys):
            sink.write({
                "__key__": key,
                "png": png(i),
                "cls": str(i % 3).encode(),
                "json": json.dumps({"i": i}).encode(),
                "txt": "sample %d" % i,
            })
    shards = sorted(glob.glob(os.path.join(out, "wds-*.tar")))
    check(len(shards) == 3, "ShardWriter wrote %d shards, want 3" % len(shards))
    npax = nmem = 0
    for s in shards:
        for ti in expected(s):
            nmem += 1
            npax += bool(ti.pax_headers)
    check(npax == nmem, "only %d of %d members have a PAX header; the test wants webdataset's"
          " PAX-on-every-member output" % (npax, nmem))
    say("webdataset ShardWriter wrote %d shards, %d members, each with a PAX header" % (len(shards), nmem))

    # GNU format: long names as ././@LongLink entries.
    gnu = os.path.join(out, "gnu.tar")
    with tarfile.open(gnu, "w", format=tarfile.GNU_FORMAT) as tf:
        for i, key in enumerate(["g0", "dir/" + "x" * 150, "g2"]):
            for ext, data in (("cls", b"%d" % i), ("png", png(100 + i))):
                ti = tarfile.TarInfo("%s.%s" % (key, ext))
                ti.size = len(data)
                ti.mtime = 1600000000
                tf.addfile(ti, io.BytesIO(data))
    expected(gnu)
    say("tarfile wrote a GNU-format tar with a 150-byte name")


main()
