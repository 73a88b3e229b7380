"""imagenet_check.py - compare packed ImageNet (or folder) shards with the
source tree.

  imagenet_check.py imagenet SRC SPLIT MANIFEST SUMMARY [RESIZE]
  imagenet_check.py folder SRC MANIFEST SUMMARY

Every source image is in the shards exactly once (nothing lost, nothing
extra). RGB JPEGs (and, for folder, PNGs) pass through byte for byte;
grayscale and CMYK JPEGs and, for imagenet, PNGs are converted to RGB JPEG
of the same size and counted as converted in the pack summary SUMMARY.
Labels: train and folder from the sorted class folders (imagenet: the order
of LOC_synset_mapping.txt), val from LOC_val_solution.csv. With RESIZE, an
image whose shorter side is over RESIZE is re-encoded with that side RESIZE.
"""

import csv
import io
import json
import os
import sys

from PIL import Image

from sktest import (check, check_manifest, manifest_shards, say,
                    summary_count, tar_samples)


def source_images(src, kind, split):
    """{relative path: expected label} and the class list."""
    want = {}
    if kind == "folder":
        classes = sorted(n for n in os.listdir(src)
                         if os.path.isdir(os.path.join(src, n)) and not n.startswith("."))
        for label, c in enumerate(classes):
            for n in sorted(os.listdir(os.path.join(src, c))):
                if not n.startswith("."):
                    want[c + "/" + n] = label
        return want, classes
    with open(os.path.join(src, "LOC_synset_mapping.txt")) as f:
        classes = [line.split()[0] for line in f if line.strip()]
    if split == "train":
        for w in sorted(os.listdir(os.path.join(src, "train"))):
            for n in sorted(os.listdir(os.path.join(src, "train", w))):
                want["train/%s/%s" % (w, n)] = classes.index(w)
    else:
        with open(os.path.join(src, "LOC_val_solution.csv"), newline="") as f:
            rows = list(csv.reader(f))[1:]
        labels = {r[0]: classes.index(r[1].split()[0]) for r in rows}
        for n in sorted(os.listdir(os.path.join(src, "val"))):
            want["val/" + n] = labels[os.path.splitext(n)[0]]
    return want, classes


def expected_key(kind, rel):
    stem = os.path.basename(rel)
    stem = stem[:stem.rfind(".")] if "." in stem[1:] else stem
    stem = stem.replace(".", "_")
    if kind == "folder":
        return rel.split("/")[0] + "/" + stem
    return stem


def main():
    kind = sys.argv[1]
    if kind == "imagenet":
        src, split, manifest, summary = sys.argv[2:6]
        resize = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    else:
        src, manifest, summary = sys.argv[2:5]
        split, resize = None, 0
    want, classes = source_images(src, kind, split)
    man = check_manifest(manifest)
    info = man.get("info", {})
    check(info.get("classes") == classes,
          "manifest info.classes %r, want %r" % (info.get("classes"), classes))

    seen = {}
    nconv = npass = 0
    for shard in manifest_shards(manifest, man):
        for key, m in tar_samples(shard):
            check("json" in m and "cls" in m, "%s: %s has members %s, want an image, cls and json" %
                  (shard, key, sorted(m)))
            meta = json.loads(m["json"])
            rel = meta.get("source")
            check(rel in want, "%s: %s: .json source %r is not a source image" % (shard, key, rel))
            check(rel not in seen, "%s: %s: source %s packed twice (also as %s)" % (shard, key, rel, seen.get(rel)))
            seen[rel] = key
            check(key == expected_key(kind, rel), "%s: key %r for %s, want %r" %
                  (shard, key, rel, expected_key(kind, rel)))
            label = int(m["cls"])
            check(label == want[rel], "%s: %s: label %d, want %d (%s)" %
                  (shard, key, label, want[rel], classes[want[rel]]))
            if kind == "imagenet":
                check(meta.get("wnid") == classes[label],
                      "%s: %s: .json wnid %r, label %d is %s" % (shard, key, meta.get("wnid"), label, classes[label]))
            else:
                check(meta.get("class") == classes[label],
                      "%s: %s: .json class %r, want %r" % (shard, key, meta.get("class"), classes[label]))
            imgs = [e for e in m if e in ("jpg", "png")]
            check(len(imgs) == 1, "%s: %s: image members %s" % (shard, key, imgs))
            data = m[imgs[0]]
            path = os.path.join(src, rel)
            with open(path, "rb") as f:
                orig = f.read()
            with Image.open(path) as im:
                sfmt, smode, ssize = im.format, im.mode, im.size
            odd = (sfmt == "PNG" and kind == "imagenet") or smode in ("L", "CMYK")
            big = resize and min(ssize) > resize
            out = Image.open(io.BytesIO(data))
            out.load()
            if not odd and not big:
                check(data == orig, "%s: %s: %s bytes differ from %s (passthrough)" %
                      (shard, key, imgs[0], rel))
                want_ext = "png" if sfmt == "PNG" else "jpg"
                check(imgs[0] == want_ext, "%s: %s: .%s for a %s source" % (shard, key, imgs[0], sfmt))
                npass += 1
                continue
            nconv += 1
            check(imgs[0] == "jpg" or (kind == "folder" and sfmt == "PNG"),
                  "%s: %s: converted %s (%s %s) stored as .%s" % (shard, key, rel, sfmt, smode, imgs[0]))
            check(out.mode == "RGB", "%s: %s: %s (%s %s) became %s %s, want RGB" %
                  (shard, key, rel, sfmt, smode, out.format, out.mode))
            if big:
                w, h = ssize
                ws, hs = out.size
                check(min(ws, hs) == resize, "%s: %s: %dx%d from %dx%d, shorter side want %d" %
                      (shard, key, ws, hs, w, h, resize))
                check(abs(ws / hs - w / h) < 0.02 + 1.0 / resize,
                      "%s: %s: aspect %dx%d from %dx%d" % (shard, key, ws, hs, w, h))
            else:
                check(out.size == ssize, "%s: %s: %s became %s, want the same size" %
                      (shard, key, ssize, out.size))
    missing = sorted(set(want) - set(seen))
    check(not missing, "%d source images are not in the shards: %s" % (len(missing), missing[:5]))
    total = sum(s["nsamples"] for s in man["shardlist"])
    check(total == len(want), "manifest counts %d samples, the source has %d images" % (total, len(want)))
    with open(summary) as f:
        text = f.read()
    check(summary_count(text, "converted") == nconv,
          "summary says %d converted, %d were:\n%s" % (summary_count(text, "converted"), nconv, text))
    check(summary_count(text, "skipped") == 0, "summary says samples were skipped:\n%s" % text)
    say("%s%s: %d images, %d passed through byte for byte, %d converted to RGB JPEG and counted; labels match" %
        (kind, " " + split if split else "", len(want), npass, nconv))


main()
