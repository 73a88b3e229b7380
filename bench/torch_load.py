#!/usr/bin/env python3
"""bench/torch_load.py - the PyTorch peer of the loader benchmark (issue 3).

    torch_load.py SHARD... [--batch 256] [--workers N] [--shuffle 1000]
                  [--shardshuffle 100] [--seed 0] [--image-size 224]
                  [--variant pil|tvio] [--prefetch-factor 2] [--epochs 1]
                  [--touch] [--json FILE] [--expect N]

Streams the shards once per epoch through the canonical PyTorch input
pipeline and throws the batches away:

    ds = (wds.WebDataset(shards, shardshuffle=..., seed=...)   # splits the
          .shuffle(buffer)                                     # shards over
          .decode("pil")                                       # the workers
          .to_tuple("jpg;png", "cls")
          .map_tuple(Compose([RandomResizedCrop(S), RandomHorizontalFlip(),
                              ToTensor(), Normalize(mean, std)]), int))
    DataLoader(ds, batch_size=256, num_workers=N, persistent_workers=True)

--variant tvio swaps webdataset's PIL decoder for torchvision.io's
libjpeg-turbo / libpng one (decode_image to a uint8 CHW tensor, a custom
webdataset decode handler: webdataset's own image decoders all go through
PIL) and the same transforms on tensors (RandomResizedCrop with
antialias=True, ConvertImageDtype(float32) instead of ToTensor). Both give
float32 NCHW batches normalised with ImageNet's mean and std.

--touch reads every batch in the consumer, as a training step would and as
python_loop.py does with shardkit.Loader's batches (bench/python.sh, issue
25): pixel_sum += float(x.sum()). Without it the batches are counted and
dropped.

--stats records the first batch's dtype, shape and per-channel minimum and
maximum (first_batch_stats), for comparing with shardload's output.

The timing window, the same as shardload's --json images_per_sec: from the
moment the first batch reaches the consumer to the moment the last one does;
images/s counts the images of every batch but the first. Process start-up,
imports, the workers' start and the time to the first batch are reported
separately (first_batch_s, and the script's own wall time).

With --json, writes an object: images, batches, images_per_sec, wall_s (the
timing window), first_batch_s, total_s (iterator creation to the end),
label_sum, config and versions. --expect N fails (exit 3) unless every epoch
delivered exactly N images. Needs torch, torchvision, webdataset and PIL:
bench/load.sh runs it with /usr/bin/python3 (or $PYTHON_TORCH).
"""

import argparse
import json
import os
import platform
import sys
import time
import warnings

T_START = time.perf_counter()

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="PyTorch DataLoader + webdataset + torchvision peer")
    ap.add_argument("shards", nargs="+",
                    help="shard paths, or one brace pattern")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--shuffle", type=int, default=1000,
                    help="sample shuffle buffer per worker (0: none)")
    ap.add_argument("--shardshuffle", type=int, default=100,
                    help="shard shuffle buffer (0: shard order)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--variant", choices=("pil", "tvio"), default="pil")
    ap.add_argument("--prefetch-factor", type=int, default=None,
                    help="DataLoader prefetch_factor (default: its own, 2)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--expect", type=int, default=None,
                    help="images every epoch must deliver")
    ap.add_argument("--touch", action="store_true",
                    help="sum every batch's pixels in the consumer")
    ap.add_argument("--stats", action="store_true",
                    help="record the first batch's dtype, shape and "
                         "per-channel range (first_batch_stats)")
    return ap.parse_args(argv)


def tvio_decoder(key, data):
    """A webdataset decode handler: torchvision.io to a uint8 CHW tensor."""
    import torch
    import torchvision.io as tio

    ext = key.rsplit(".", 1)[-1].lower()
    if ext not in ("jpg", "jpeg", "png"):
        return None
    buf = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return tio.decode_image(buf, mode=tio.ImageReadMode.RGB)


def build(args):
    import torch
    import webdataset as wds
    from torchvision import transforms as T

    urls = args.shards[0] if len(args.shards) == 1 else list(args.shards)
    ds = wds.WebDataset(urls, shardshuffle=args.shardshuffle or False,
                        seed=args.seed)
    if args.shuffle > 0:
        ds = ds.shuffle(args.shuffle)
    if args.variant == "pil":
        ds = ds.decode("pil")
        tf = T.Compose([
            T.RandomResizedCrop(args.image_size),
            T.RandomHorizontalFlip(),
            T.ToTensor(),
            T.Normalize(MEAN, STD),
        ])
    else:
        ds = ds.decode(tvio_decoder)
        tf = T.Compose([
            T.RandomResizedCrop(args.image_size, antialias=True),
            T.RandomHorizontalFlip(),
            T.ConvertImageDtype(torch.float32),
            T.Normalize(MEAN, STD),
        ])
    ds = ds.to_tuple("jpg;png", "cls").map_tuple(tf, int)

    kw = dict(batch_size=args.batch, num_workers=args.workers)
    if args.workers > 0:
        kw["persistent_workers"] = True
        if args.prefetch_factor:
            kw["prefetch_factor"] = args.prefetch_factor
    return torch.utils.data.DataLoader(ds, **kw)


def main(argv):
    args = parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning)
    import numpy
    import PIL
    import torch
    import torchvision
    import webdataset

    torch.manual_seed(args.seed)
    t_import = time.perf_counter()
    loader = build(args)
    epochs = []
    stats = None
    for ep in range(args.epochs):
        images = batches = label_sum = 0
        pixel_sum = 0.0
        first_n = 0
        t0 = time.perf_counter()
        t_first = t_last = None
        for x, y in loader:
            t_last = time.perf_counter()
            n = int(y.shape[0])
            if t_first is None:
                t_first, first_n = t_last, n
                # the batch the pipeline promises: float32 (n, 3, S, S)
                assert x.dtype == torch.float32, x.dtype
                assert tuple(x.shape[1:]) == (3, args.image_size,
                                              args.image_size), x.shape
                if args.stats:
                    stats = dict(dtype=str(x.dtype).replace("torch.", ""),
                                 shape=list(x.shape),
                                 min=x.amin(dim=(0, 2, 3)).tolist(),
                                 max=x.amax(dim=(0, 2, 3)).tolist())
            if args.touch:
                pixel_sum += float(x.sum())
            images += n
            batches += 1
            label_sum += int(y.sum())
        if t_first is None:
            raise SystemExit("torch_load: no batches")
        window = t_last - t_first
        e = dict(epoch=ep, images=images, batches=batches,
                 first_batch_images=first_n, label_sum=label_sum,
                 pixel_sum=pixel_sum if args.touch else None,
                 first_batch_s=round(t_first - t0, 4),
                 wall_s=round(window, 4),
                 total_s=round(t_last - t0, 4),
                 images_per_sec=round((images - first_n) / window, 2)
                 if window > 0 else None)
        epochs.append(e)
        print("torch_load: epoch %d: %d images in %d batches; first batch "
              "after %.2f s, then %.1f images/s over %.2f s"
              % (ep, images, batches, e["first_batch_s"],
                 e["images_per_sec"] or 0, window), file=sys.stderr)

    t_end = time.perf_counter()
    out = dict(epochs[-1] if len(epochs) == 1 else {})
    out.update(
        tool="torch_load",
        images=sum(e["images"] for e in epochs),
        images_per_sec=round(sum(e["images"] - e["first_batch_images"]
                                 for e in epochs)
                             / sum(e["wall_s"] for e in epochs), 2)
        if len(epochs) > 1 else epochs[0]["images_per_sec"],
        epochs=epochs,
        first_batch_stats=stats,
        import_s=round(t_import - T_START, 4),
        process_s=round(t_end - T_START, 4),
        config=dict(variant=args.variant, batch=args.batch,
                    workers=args.workers, shuffle=args.shuffle,
                    shardshuffle=args.shardshuffle, seed=args.seed,
                    image_size=args.image_size,
                    prefetch_factor=args.prefetch_factor or 2,
                    persistent_workers=args.workers > 0,
                    pin_memory=False, epochs=args.epochs,
                    touch=args.touch,
                    nshards=len(args.shards),
                    torch_threads_main=torch.get_num_threads()),
        versions=dict(python=platform.python_version(),
                      torch=torch.__version__,
                      torchvision=torchvision.__version__,
                      webdataset=webdataset.__version__,
                      pillow=PIL.__version__, numpy=numpy.__version__),
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    if args.expect is not None:
        bad = [e for e in epochs if e["images"] != args.expect]
        if bad:
            print("torch_load: epoch %d delivered %d images, want %d"
                  % (bad[0]["epoch"], bad[0]["images"], args.expect),
                  file=sys.stderr)
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
