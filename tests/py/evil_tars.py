"""evil_tars.py - tars that try to write outside the folder they are
extracted into, each with safe members around the attack.

  evil_tars.py DIR OUTSIDE

OUTSIDE is an absolute path of a folder beside the parent of the
extraction folder (DEST=P/a/dest, OUTSIDE=P/outside, "../.." from DEST is
P); the attacks aim at it and at P. Writes DIR/NAME.tar for each attack and
prints "NAME MEMBER" for the member that must be refused.
"""

import io
import os
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


def main():
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
