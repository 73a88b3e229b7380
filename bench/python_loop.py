#!/usr/bin/env python3
"""bench/python_loop.py - shardkit.Loader in a PyTorch loop (issue 25).

    python_loop.py SOURCE [--batch 256] [--image-size 224] [--shuffle 1000]
                   [--seed 0] [--workers N] [--io-streams 2]
                   [--remainder drop|keep] [--json FILE] [--expect N]

Streams one epoch of SOURCE (a manifest or a shard pattern) through
shardkit.Loader and touches every batch the way a training step would
read it:

    for images, labels, keys in shardkit.Loader(SOURCE, batch_size=256,
            image_size=224, crop="random-resized", flip=True,
            dtype="float32", layout="NCHW", shuffle=1000, seed=0,
            io_streams=2):
        x = torch.from_dlpack(images)       # (B, 3, S, S) float32, no copy
        y = torch.from_dlpack(labels)       # (B,) int32
        pixel_sum += float(x.sum())
        label_sum += int(y.sum())

x and y stay alive until the next iteration rebinds them, as in a real
loop: the loader hands out the next batch while the previous one is held.

The timing window is torch_load.py's and shardload bench's
steady_images_per_second: from the moment the first batch reaches the loop
to the moment the last one does; images/s counts the images of every
batch but the first. --workers defaults to the Loader's own (this
process's CPUs). --remainder keep (drop_last=False) delivers every sample,
as the DataLoader does; drop is the Loader's default.

With --json, writes an object: images, batches, images_per_sec, wall_s
(the window), first_batch_s (from Loader() to the first batch), total_s,
label_sum, pixel_sum, loader_stats (Loader.stats() after the epoch),
config and versions. --expect N fails (exit 3) unless the epoch delivered
exactly N images. bench/python.sh runs it in a venv with shardkit
installed.
"""

import argparse
import json
import platform
import sys
import time

T_START = time.perf_counter()


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="shardkit.Loader in a PyTorch loop")
    ap.add_argument("source", help="a manifest (.json) or shard pattern")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--shuffle", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None,
                    help="decode threads (default: the Loader's)")
    ap.add_argument("--io-streams", type=int, default=2)
    ap.add_argument("--remainder", choices=("drop", "keep"), default="keep")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--expect", type=int, default=None,
                    help="images the epoch must deliver")
    return ap.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    import numpy
    import torch
    import shardkit

    t_import = time.perf_counter()
    loader = shardkit.Loader(
        args.source, batch_size=args.batch, image_size=args.image_size,
        crop="random-resized", flip=True, dtype="float32", layout="NCHW",
        shuffle=args.shuffle, seed=args.seed, workers=args.workers,
        io_streams=args.io_streams, drop_last=args.remainder == "drop")
    images_n = batches = label_sum = first_n = 0
    pixel_sum = 0.0
    t_first = t_last = None
    for images, labels, keys in loader:
        t_last = time.perf_counter()
        x = torch.from_dlpack(images)
        y = torch.from_dlpack(labels)
        n = int(y.shape[0])
        if t_first is None:
            t_first, first_n = t_last, n
            # the batch a PyTorch model takes: float32 (n, 3, S, S)
            assert x.dtype == torch.float32, x.dtype
            assert tuple(x.shape) == (n, 3, args.image_size,
                                      args.image_size), x.shape
        pixel_sum += float(x.sum())
        label_sum += int(y.sum())
        images_n += n
        batches += 1
    if t_first is None:
        raise SystemExit("python_loop: no batches")
    stats = loader.stats()
    workers, ring = loader.workers, loader.ring
    loader.close()
    t_end = time.perf_counter()

    window = t_last - t_first
    ips = (images_n - first_n) / window if window > 0 else None
    print("python_loop: %d images in %d batches; first batch after %.2f s, "
          "then %.1f images/s over %.2f s"
          % (images_n, batches, t_first - t_import, ips or 0, window),
          file=sys.stderr)
    out = dict(
        tool="python_loop",
        images=images_n, batches=batches, first_batch_images=first_n,
        images_per_sec=round(ips, 2) if ips is not None else None,
        wall_s=round(window, 4),
        first_batch_s=round(t_first - t_import, 4),
        total_s=round(t_last - t_import, 4),
        label_sum=label_sum, pixel_sum=pixel_sum,
        loader_stats=stats,
        import_s=round(t_import - T_START, 4),
        process_s=round(t_end - T_START, 4),
        config=dict(source=args.source, batch=args.batch,
                    image_size=args.image_size, crop="random-resized",
                    flip=True, dtype="float32", layout="NCHW",
                    shuffle=args.shuffle, seed=args.seed, workers=workers,
                    io_streams=args.io_streams, ring=ring,
                    remainder=args.remainder,
                    torch_threads_main=torch.get_num_threads()),
        versions=dict(python=platform.python_version(),
                      torch=torch.__version__,
                      shardkit=shardkit.__version__,
                      libshardkit=shardkit.LIBRARY_VERSION,
                      numpy=numpy.__version__),
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    if args.expect is not None and images_n != args.expect:
        print("python_loop: the epoch delivered %d images, want %d"
              % (images_n, args.expect), file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
