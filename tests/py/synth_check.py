"""synth_check.py - check what "shardtool synth" wrote.

  synth_check.py cifar10 DIR NTRAIN NTEST
  synth_check.py imagenet DIR CLASSES PER_CLASS NVAL
"""

import csv
import os
import re
import sys

from sktest import CIFAR_RECORD, check, fail, read_cifar, say


def check_cifar(d, ntrain, ntest):
    total = 0
    for i in range(1, 6):
        path = os.path.join(d, "data_batch_%d.bin" % i)
        check(os.path.isfile(path), "%s is missing" % path)
        size = os.path.getsize(path)
        check(size > 0 and size % CIFAR_RECORD == 0,
              "%s: %d bytes, want a non-zero multiple of %d" % (path, size, CIFAR_RECORD))
        total += size
    check(total == ntrain * CIFAR_RECORD,
          "data_batch_1..5.bin hold %d bytes, want %d (%d records)" % (total, ntrain * CIFAR_RECORD, ntrain))
    path = os.path.join(d, "test_batch.bin")
    check(os.path.getsize(path) == ntest * CIFAR_RECORD,
          "%s: %d bytes, want %d" % (path, os.path.getsize(path), ntest * CIFAR_RECORD))
    say("cifar10: file sizes are whole records, %d train and %d test" % (ntrain, ntest))

    for split, n in (("train", ntrain), ("test", ntest)):
        recs = read_cifar(d, split)
        labels = [lab for lab, _ in recs]
        bad = [lab for lab in labels if lab > 9]
        check(not bad, "%s: labels out of 0-9: %s" % (split, sorted(set(bad))))
        if n >= 100:
            check(set(labels) == set(range(10)),
                  "%s: only labels %s appear in %d records" % (split, sorted(set(labels)), n))
        # Each record is its own image, not a copy of another.
        pixels = set(p for _, p in recs)
        check(len(pixels) == len(recs), "%s: %d of %d records are duplicates" %
              (split, len(recs) - len(pixels), len(recs)))
    say("cifar10: labels are 0-9, every class present, no duplicate images")

    path = os.path.join(d, "batches.meta.txt")
    with open(path) as f:
        names = [line.strip() for line in f if line.strip()]
    check(len(names) == 10, "%s: %d class names, want 10: %s" % (path, len(names), names))
    check(len(set(names)) == 10, "%s: class names repeat: %s" % (path, names))
    say("cifar10: batches.meta.txt names 10 classes")


def check_imagenet(d, nclasses, per_class, nval):
    from PIL import Image

    path = os.path.join(d, "LOC_synset_mapping.txt")
    with open(path) as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    check(len(lines) == nclasses, "%s: %d lines, want %d" % (path, len(lines), nclasses))
    wnids = []
    for line in lines:
        m = re.match(r"^(n\d{8}) (\S.*)$", line)
        check(m is not None, "%s: line %r is not 'nXXXXXXXX name'" % (path, line))
        wnids.append(m.group(1))
    check(len(set(wnids)) == nclasses, "%s: WNIDs repeat" % path)
    say("imagenet: LOC_synset_mapping.txt has %d classes" % nclasses)

    files = []
    train = os.path.join(d, "train")
    check(sorted(os.listdir(train)) == sorted(wnids),
          "train/ holds %s, want the WNIDs %s" % (sorted(os.listdir(train)), sorted(wnids)))
    for w in wnids:
        names = sorted(os.listdir(os.path.join(train, w)))
        check(len(names) == per_class, "train/%s: %d files, want %d" % (w, len(names), per_class))
        for n in names:
            check(re.match(r"^%s_\d+\.JPEG$" % w, n) is not None,
                  "train/%s/%s is not named WNID_N.JPEG" % (w, n))
            files.append(os.path.join(train, w, n))
    say("imagenet: train/WNID/WNID_N.JPEG, %d per class" % per_class)

    val = os.path.join(d, "val")
    names = sorted(os.listdir(val))
    want = ["ILSVRC2012_val_%08d.JPEG" % i for i in range(1, nval + 1)]
    check(names == want, "val/ holds %s..., want %s..." % (names[:3], want[:3]))
    files += [os.path.join(val, n) for n in names]

    path = os.path.join(d, "LOC_val_solution.csv")
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    check(rows and rows[0] == ["ImageId", "PredictionString"],
          "%s: header %r, want ImageId,PredictionString" % (path, rows[:1]))
    ids = {}
    for row in rows[1:]:
        check(len(row) == 2, "%s: row %r" % (path, row))
        tokens = row[1].split()
        check(tokens and tokens[0] in wnids,
              "%s: %s: first token %r is not a WNID" % (path, row[0], tokens[:1]))
        ids[row[0]] = tokens[0]
    check(sorted(ids) == [n[:-5] for n in want],
          "%s: ImageIds %s..., want one per val image" % (path, sorted(ids)[:3]))
    say("imagenet: val/ILSVRC2012_val_%%08d.JPEG with %d labels in LOC_val_solution.csv" % nval)

    kinds = {"gray": [], "cmyk": [], "png": [], "rgb": []}
    bpp = []
    for path in files:
        with Image.open(path) as im:
            fmt, mode, (w, h) = im.format, im.mode, im.size
            im.load()
        if fmt == "PNG":
            kinds["png"].append(path)
        elif fmt == "JPEG" and mode == "L":
            kinds["gray"].append(path)
        elif fmt == "JPEG" and mode == "CMYK":
            kinds["cmyk"].append(path)
        elif fmt == "JPEG" and mode == "RGB":
            kinds["rgb"].append(path)
            bpp.append(os.path.getsize(path) / float(w * h))
        else:
            fail("%s: %s %s, not an expected kind" % (path, fmt, mode))
    for k in ("gray", "cmyk", "png"):
        check(kinds[k], "no %s image among the %d files" % (k, len(files)))
    say("imagenet: oddities present: %d grayscale JPEG, %d CMYK JPEG, %d PNG named .JPEG" %
        (len(kinds["gray"]), len(kinds["cmyk"]), len(kinds["png"])))
    # Photograph-like: about 0.5-1 byte per pixel (loose bounds).
    mean = sum(bpp) / len(bpp)
    check(0.25 <= mean <= 2.0, "RGB JPEGs average %.2f bytes per pixel, want about 0.5-1" % mean)
    say("imagenet: RGB JPEGs average %.2f bytes per pixel" % mean)


def main():
    if sys.argv[1] == "cifar10":
        check_cifar(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "imagenet":
        check_imagenet(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        fail("usage: synth_check.py cifar10|imagenet DIR ...")


main()
