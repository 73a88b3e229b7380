#!/usr/bin/env python3
"""A PyTorch training loop fed by shardkit.Loader, and its verdict.

    python train.py SOURCE [--epochs 1] [--batch 64] [--image-size 112]
                    [--model small|resnet50] [--device cpu|cuda[:N]]
                    [--workers N] [--shuffle 1000] [--lr 0.1]

SOURCE is what shardload takes: a manifest (shardtool pack's NAME.json),
a shard pattern, or a folder, on disk, http(s)://, gs:// or s3://.

It trains a small ResNet (or torchvision's ResNet-50, when torchvision is
installed) with SGD, timing each step's wait for data with shardkit.Meter;
then it measures the loader alone and the step alone on one batch, and
prints shardtrain's verdict: input-bound, compute-bound or balanced, with
the evidence and what to change.

With --device cuda the loader copies each batch to the GPU itself (its
device mode: uint8 crosses the bus, normalization runs there) and
torch.from_dlpack hands the batch to the current stream without a copy.
"""

import argparse
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import shardkit


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = None
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride,
                                                bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.skip is None else self.skip(x)))


class SmallResNet(nn.Module):
    """A ResNet-18-shaped network at a quarter of the width."""

    def __init__(self, classes, width=16):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 7, 2, 3, bias=False),
                                  nn.BatchNorm2d(w), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], w
        for i, cout in enumerate((w, 2 * w, 4 * w, 8 * w)):
            layers += [Block(cin, cout, 1 if i == 0 else 2),
                       Block(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def make_model(name, classes):
    if name == "resnet50":
        try:
            import torchvision
        except ImportError:
            sys.exit("train.py: --model resnet50 needs torchvision")
        return torchvision.models.resnet50(num_classes=classes)
    return SmallResNet(classes)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--image-size", type=int, default=112)
    ap.add_argument("--model", choices=("small", "resnet50"),
                    default="small")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--shuffle", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ceiling-batches", type=int, default=10,
                    help="batches for the loader-alone measure (0: skip)")
    args = ap.parse_args()

    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        sys.exit("train.py: --device %s, but torch sees no GPU"
                 % args.device)
    dev = torch.device(args.device)
    opts = dict(batch_size=args.batch, image_size=args.image_size,
                shuffle=args.shuffle, seed=args.seed, workers=args.workers,
                dtype="float32", layout="NCHW")
    loader = shardkit.Loader(args.source, epochs=args.epochs,
                             device=args.device if cuda else None, **opts)
    torch.manual_seed(args.seed)
    model = make_model(args.model, args.classes).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9,
                          weight_decay=1e-4)

    def step(batch):
        images, labels = batch[0], batch[1]
        x = torch.from_dlpack(images)
        y = torch.from_dlpack(labels).to(dev, non_blocking=True).long()
        loss = F.cross_entropy(model(x if cuda else x.to(dev)), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()      # waits for the GPU: the step is done

    meter = shardkit.Meter(warmup=2)
    keep = None
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        n, loss = 0, 0.0
        for batch in meter.iterate(loader):
            loss += step(batch)
            n += 1
            keep = (torch.from_dlpack(batch.images).clone(),
                    torch.from_dlpack(batch.labels).clone(), batch.keys)
        print("epoch %d: %d steps, mean loss %.3f, %.1f s" % (
            epoch, n, loss / max(n, 1), time.perf_counter() - t0))
    st = loader.stats()
    loader.close()
    print("loader: %d images, %d skipped, bound by %s (%.0f%% busy)" % (
        st["samples"], st["skipped"], st["bound"], st["bound_share"] * 100))

    if meter.steps == 0:
        sys.exit("train.py: too few batches for a verdict (the first 2 "
                 "steps are warm-up)")
    loader_ips = compute_ips = None
    if args.ceiling_batches > 0:
        try:
            loader_ips = shardkit.measure_loader(
                args.source, batches=args.ceiling_batches,
                device=args.device if cuda else None, **opts)
        except ValueError as e:
            print("loader alone: not measured (%s)" % e)
    if keep is not None:
        compute_ips = shardkit.measure_compute(step, keep, steps=5)
    v = meter.verdict(loader_ips=loader_ips, compute_ips=compute_ips)
    print("verdict:", v)


if __name__ == "__main__":
    main()
