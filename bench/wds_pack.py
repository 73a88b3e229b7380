#!/usr/bin/env python3
"""wds_pack.py - the Python peer for bench/pack.sh.

Packs the same data as `shardtool pack` with the webdataset ShardWriter, the
way a webdataset user would:

  cifar10   decode the CIFAR-10 binary records with numpy, encode each image
            to PNG with PIL (Image.fromarray(arr).save(buf, format="PNG"),
            which is what webdataset's own "png" encoder does), and write
            {"__key__", "png", "cls"} samples.
            --procs N spreads the decoding and PIL encoding over a
            multiprocessing Pool of N processes that feeds one ShardWriter
            in order (Pool.imap with a chunksize). --procs 1 does it all in
            this process.
  imagenet  read train/<wnid>/*.JPEG as raw bytes and write
            {"__key__", "jpg", "cls", "json"} samples (no decoding:
            passthrough; the .json is the same as shardtool's: source path,
            class name, WNID).

The keys, labels and shard limits follow shardtool's defaults so that the two
outputs hold the same samples. The last line on stdout is

  wds_pack DATASET: N samples into M shards, X MB, in T s

which bench/pack.sh parses to check that no tool did less work.
"""

import argparse
import io
import json
import multiprocessing
import os
import sys
import time

import numpy as np
import webdataset as wds
from PIL import Image

SIDE = 32
RECORD = 1 + 3 * SIDE * SIDE
CIFAR_FILES = {
    "train": ["data_batch_%d.bin" % i for i in range(1, 6)],
    "test": ["test_batch.bin"],
}

# The records of the split being packed. Set before the Pool starts so that
# forked workers inherit it instead of receiving it pickled.
RECS = None


def cifar_records(src, split):
    d = src
    if not os.path.exists(os.path.join(d, CIFAR_FILES[split][0])):
        d = os.path.join(src, "cifar-10-batches-bin")
    parts = [np.fromfile(os.path.join(d, f), dtype=np.uint8)
             for f in CIFAR_FILES[split]]
    data = np.concatenate(parts)
    if data.size % RECORD:
        sys.exit("wds_pack: %s: size is not a multiple of %d" % (d, RECORD))
    return data.reshape(-1, RECORD)


def encode_png(i):
    rec = RECS[i]
    # planar R, G, B -> 32x32x3 interleaved
    arr = np.ascontiguousarray(rec[1:].reshape(3, SIDE, SIDE).transpose(1, 2, 0))
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue(), int(rec[0])


def pack_cifar10(args, split, pattern):
    global RECS
    RECS = cifar_records(args.src, split)
    n = len(RECS)
    sink = wds.ShardWriter(pattern, maxcount=args.maxcount,
                           maxsize=args.maxsize, verbose=0)
    if args.procs > 1:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(args.procs) as pool:
            it = pool.imap(encode_png, range(n), chunksize=args.chunksize)
            for i, (png, cls) in enumerate(it):
                sink.write({"__key__": "%s_%05d" % (split, i), "png": png,
                            "cls": cls})
    else:
        for i in range(n):
            png, cls = encode_png(i)
            sink.write({"__key__": "%s_%05d" % (split, i), "png": png,
                        "cls": cls})
    nshards = sink.shard
    sink.close()
    return sink.total, nshards


def pack_imagenet(args, split, pattern):
    if split != "train":
        sys.exit("wds_pack: imagenet: only --split train is implemented")
    top = os.path.join(args.src, "train")
    wnids, names = [], {}
    mapping = os.path.join(args.src, "LOC_synset_mapping.txt")
    if os.path.exists(mapping):
        with open(mapping) as f:
            for line in f:
                wnid, _, name = line.rstrip("\r\n").partition(" ")
                if wnid:
                    wnids.append(wnid)
                    names[wnid] = name or wnid
    else:
        wnids = sorted(os.listdir(top))
        names = {w: w for w in wnids}
    label = {w: i for i, w in enumerate(wnids)}
    sink = wds.ShardWriter(pattern, maxcount=args.maxcount,
                           maxsize=args.maxsize, verbose=0)
    for wnid in sorted(os.listdir(top)):
        d = os.path.join(top, wnid)
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name), "rb") as f:
                data = f.read()
            # the same .json member as shardtool's
            meta = json.dumps({"source": "train/%s/%s" % (wnid, name),
                               "class": names[wnid], "wnid": wnid})
            sink.write({"__key__": os.path.splitext(name)[0], "jpg": data,
                        "cls": label[wnid], "json": meta})
    nshards = sink.shard
    sink.close()
    return sink.total, nshards


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", choices=["cifar10", "imagenet"])
    p.add_argument("src")
    p.add_argument("-o", "--output", required=True,
                   help="shard pattern with one %%d; with several splits, "
                   "{split} in it is replaced by the split name")
    p.add_argument("--split", default="train",
                   help="split, or a comma-separated list (cifar10: "
                   "train,test)")
    p.add_argument("--procs", type=int, default=1,
                   help="PNG encoding processes (cifar10; default 1)")
    p.add_argument("--chunksize", type=int, default=256,
                   help="Pool.imap chunksize (default 256)")
    p.add_argument("--maxcount", type=int, default=10000)
    p.add_argument("--maxsize", type=float, default=float(1 << 30))
    args = p.parse_args()
    if args.procs < 1:
        args.procs = os.cpu_count() or 1

    t0 = time.time()
    samples = shards = size = 0
    for split in args.split.split(","):
        pattern = args.output.replace("{split}", split)
        if args.dataset == "cifar10":
            n, m = pack_cifar10(args, split, pattern)
        else:
            n, m = pack_imagenet(args, split, pattern)
        samples += n
        shards += m
        for k in range(m):
            size += os.path.getsize(pattern % k)
    dt = time.time() - t0
    print("wds_pack %s: %d samples into %d shards, %.1f MB, in %.2f s "
          "(procs %d)" % (args.dataset, samples, shards, size / 1e6, dt,
                          args.procs))


if __name__ == "__main__":
    main()
