"""evil_tars.py - hostile shards.

  evil_tars.py DIR OUTSIDE
  evil_tars.py --hostile DIR GOOD.tar

The first form writes tars that try to write outside the folder they are
extracted into, each with safe members around the attack. OUTSIDE is an
absolute path of a folder beside the parent of the extraction folder
(DEST=P/a/dest, OUTSIDE=P/outside, "../.." from DEST is P); the attacks aim
at it and at P. Writes DIR/NAME.tar for each attack and prints "NAME
MEMBER" for the member that must be refused.

The second form writes shards that attack the reader itself (issue 10),
made from the shard GOOD.tar (a packed one: its first sample is two
members, KEY.png and KEY.cls), and prints "NAME WHAT" for each:
  lie.tar         the first sample of GOOD, then a member whose PAX header
                  claims 10^13 bytes (the "size" line says where)
  trunc.tar       GOOD cut inside the second sample's image
  gzip.tar        GOOD compressed with gzip (read in-process)
  bzip2.tar, xz.tar
                  GOOD compressed with bzip2 and xz (refused: not plain,
                  gzip or zstd)
  lrzip.tar, lzop.tar, grzip.tar, lzip.tar, lz4.tar, compress.tar,
  uu.tar, rpm.tar
                  512 bytes: the format's magic, then noise; libarchive's
                  filters for the first three run a program from $PATH
"""

import bz2
import gzip
import io
import lzma
import os
import random
import sys
import tarfile


def add_file(tf, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mode = 0o644
    tf.addfile(ti, io.BytesIO(data))


def add_link(tf, name, target, kind=tarfile.SYMTYPE):
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.linkname = target
    tf.addfile(ti)


# The first bytes of each format (libarchive's bidders check these).
MAGIC = {
    "lrzip": b"LRZI\x00\x06",
    "lzop": b"\x89LZO\x00\r\n\x1a\n\x10\x30\x20\x80\x09\x40",
    "grzip": b"GRZipII\x00\x02\x04:)",
    "lzip": b"LZIP\x01\x0c",
    "lz4": b"\x04\x22\x4d\x18\x64\x40\xa7",
    "compress": b"\x1f\x9d\x90",
    "uu": b"begin 644 shard.tar\n",
    "rpm": b"\xed\xab\xee\xdb\x03\x00",
}


def hostile(d, good):
    data = open(good, "rb").read()
    members = tarfile.open(good).getmembers()
    # The first sample: its members' headers and data, up to the next one.
    first = members[0].name.split(".")[0]
    end = next(m.offset for m in members if m.name.split(".")[0] != first)

    liar = tarfile.TarInfo("liar.png")
    liar.size = 512
    liar.mode = 0o444
    liar.pax_headers = {"size": "10000000000000"}
    lie = data[:end] + liar.tobuf(tarfile.PAX_FORMAT, "utf-8",
                                  "surrogateescape")
    lie += b"\xff" * 512 + b"\0" * 1024
    open(os.path.join(d, "lie.tar"), "wb").write(lie)
    # The lying header starts where the first sample ends.
    print("lie.tar offset %d first %s left %d" % (end, first,
          len(lie) - end - 1536))

    second = members[2]
    open(os.path.join(d, "trunc.tar"), "wb").write(
        data[:second.offset_data + second.size // 2])
    print("trunc.tar offset %d" % second.offset)

    open(os.path.join(d, "gzip.tar"), "wb").write(gzip.compress(data, mtime=0))
    print("gzip.tar gzip")
    open(os.path.join(d, "bzip2.tar"), "wb").write(bz2.compress(data))
    print("bzip2.tar bzip2")
    open(os.path.join(d, "xz.tar"), "wb").write(lzma.compress(data))
    print("xz.tar xz")
    rnd = random.Random(10)
    for name, magic in sorted(MAGIC.items()):
        noise = bytes(rnd.randrange(256) for _ in range(512 - len(magic)))
        open(os.path.join(d, name + ".tar"), "wb").write(magic + noise)
        print("%s.tar %s" % (name, name))


def main():
    if sys.argv[1] == "--hostile":
        hostile(sys.argv[2], sys.argv[3])
        return
    d, outside = sys.argv[1], sys.argv[2]
    attacks = {
        # an absolute name
        "abs": [("file", outside + "/abs.txt", b"pwned")],
        # a ".." name that climbs out of the folder
        "dotdot": [("file", "../escape.txt", b"pwned"),
                   ("file", "sub/../../escape2.txt", b"pwned")],
        # a symbolic link pointing outside, then a write through it
        "symlink": [("sym", "out", outside),
                    ("file", "out/through.txt", b"pwned")],
        # a relative symbolic link that climbs out, then a write through it
        "symlink-rel": [("sym", "up", "../.."),
                        ("file", "up/through-rel.txt", b"pwned")],
        # a harmless-looking link chain: a -> ., then b -> a/.. (outside)
        "symlink-chain": [("sym", "a", "."),
                          ("sym", "b", "a/../.."),
                          ("file", "b/chain.txt", b"pwned")],
        # a hard link to a file outside, then a write to the link's name
        "hardlink": [("hard", "hl", outside + "/victim.txt"),
                     ("file", "hl", b"pwned")],
        "hardlink-rel": [("hard", "hl2", "../../outside/victim.txt"),
                         ("file", "hl2", b"pwned")],
    }
    for name, entries in sorted(attacks.items()):
        with tarfile.open(os.path.join(d, name + ".tar"), "w", format=tarfile.GNU_FORMAT) as tf:
            add_file(tf, "ok-%s.txt" % name, b"safe before")
            for kind, member, target in entries:
                if kind == "file":
                    add_file(tf, member, target)
                elif kind == "sym":
                    add_link(tf, member, target)
                else:
                    add_link(tf, member, target, tarfile.LNKTYPE)
            add_file(tf, "sub/ok2-%s.txt" % name, b"safe after")
        # The member that must be refused and named.
        print(name, "b" if name == "symlink-chain" else entries[0][1])
        # tarfile keeps names as given; make sure the attack is really there.
        with tarfile.open(os.path.join(d, name + ".tar")) as tf:
            names = tf.getnames()
        assert entries[0][1] in names, (name, names)


main()
