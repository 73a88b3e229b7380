"""cifar_roundtrip.py - read packed CIFAR-10 shards back and compare them
with the source records.

  cifar_roundtrip.py SRC SPLIT MANIFEST LISTING SHARD...

Reads the shards with the webdataset library (keys, labels, PNG pixels),
then with tarfile (ustar headers, fixed fields, members of a sample
adjacent), checks the manifest against the files, and writes the member
names in tar order to LISTING for comparison with GNU tar and bsdtar.
"""

import io
import os
import sys

import numpy as np
from PIL import Image

import webdataset as wds

from sktest import (check, check_manifest, planar_to_hwc, read_cifar, say,
                    split_name, tar_members)


def main():
    src, split, manifest, listing = sys.argv[1:5]
    shards = sys.argv[5:]
    recs = read_cifar(src, split)
    want_keys = ["%s_%05d" % (split, i) for i in range(len(recs))]
    by_key = dict(zip(want_keys, recs))

    # webdataset: every record once, with its label and its exact pixels.
    got = []
    ds = wds.WebDataset(shards, shardshuffle=False, empty_check=False)
    for sample in ds:
        key = sample["__key__"]
        check(key in by_key, "webdataset yields key %r, not a source record" % key)
        label, planar = by_key[key]
        check(set(k for k in sample if not k.startswith("__")) == {"png", "cls"},
              "%s: members %s, want png and cls" % (key, sorted(sample)))
        check(int(sample["cls"]) == label,
              "%s: label %r, the record says %d" % (key, sample["cls"], label))
        im = Image.open(io.BytesIO(sample["png"]))
        check(im.format == "PNG", "%s: .png holds %s" % (key, im.format))
        check(im.mode == "RGB" and im.size == (32, 32),
              "%s: %s %s, want RGB 32x32" % (key, im.mode, im.size))
        pix = np.asarray(im)
        want = planar_to_hwc(planar)
        if not np.array_equal(pix, want):
            bad = np.argwhere(pix != want)[0]
            check(False, "%s: pixel (y=%d, x=%d, c=%d) is %d, the record has %d" %
                  (key, bad[0], bad[1], bad[2], pix[tuple(bad)], want[tuple(bad)]))
        got.append(key)
    check(len(got) == len(set(got)), "webdataset yields %d keys, %d distinct" % (len(got), len(set(got))))
    missing = sorted(set(want_keys) - set(got))
    check(not missing, "%d records missing from the shards, e.g. %s" % (len(missing), missing[:3]))
    check(got == want_keys, "unshuffled pack is not in record order: %s..." % got[:5])
    say("webdataset: %d samples, keys, labels and pixels match the records" % len(got))

    # tarfile: ustar headers with the fixed fields, and the listing.
    names = []
    for shard in shards:
        with open(shard, "rb") as f:
            raw = f.read()
        check(len(raw) % 512 == 0, "%s: %d bytes, not whole blocks" % (shard, len(raw)))
        check(raw[-1024:] == b"\0" * 1024, "%s: does not end with two zero blocks" % shard)
        for ti, data in tar_members(shard):
            names.append(ti.name)
            head = raw[ti.offset:ti.offset + 512]
            check(head[257:265] == b"ustar\x0000",
                  "%s: %s: header magic %r, want ustar" % (shard, ti.name, head[257:265]))
            check(not ti.pax_headers, "%s: %s has a PAX header %s it does not need" %
                  (shard, ti.name, ti.pax_headers))
            check(ti.mode == 0o444, "%s: %s mode %o, want 444" % (shard, ti.name, ti.mode))
            check(ti.mtime == 0, "%s: %s mtime %d, want 0 without SOURCE_DATE_EPOCH" %
                  (shard, ti.name, ti.mtime))
            key, ext = split_name(ti.name)
            check(ext in ("png", "cls"), "%s: member %s" % (shard, ti.name))
    want_names = set("%s.%s" % (k, e) for k in want_keys for e in ("png", "cls"))
    check(set(names) == want_names and len(names) == len(want_names),
          "tarfile lists %d members, want %d" % (len(names), len(want_names)))
    with open(listing, "w") as f:
        f.write("".join(n + "\n" for n in names))
    say("tarfile: %d members, ustar, mode 0444, mtime 0, no PAX headers" % len(names))

    man = check_manifest(manifest, shards)
    total = sum(s["nsamples"] for s in man["shardlist"])
    check(total == len(recs), "manifest counts %d samples, want %d" % (total, len(recs)))
    info = man.get("info", {})
    with open(os.path.join(src, "batches.meta.txt")) as f:
        names = [line.strip() for line in f if line.strip()]
    check(info.get("classes") == names, "manifest info.classes %r, want %r" % (info.get("classes"), names))
    counts = [0] * 10
    for label, _ in recs:
        counts[label] += 1
    check(info.get("class_counts") == counts,
          "manifest info.class_counts %r, want %r" % (info.get("class_counts"), counts))
    say("manifest: wids-shard-index-v1; nsamples, filesize, md5sum and class counts match")


main()
