#!/usr/bin/env python3
"""torch_train.py - the PyTorch peer of shardtrain's CPU benchmark.

Trains the same shapes shardtrain does (torchvision's ResNet-18, or a ViT
with timm's layout built from torchvision's VisionTransformer) on a fixed
synthetic batch, with the same loss (cross-entropy, label smoothing 0.1)
and optimizer (SGD momentum 0.9 nesterov, or AdamW), and prints one JSON
line: images/s over the timed steps and the thread count.

Run it with Debian's python3-torch (/usr/bin/python3). Debian's torch calls
libblas.so.3 for its Linear layers; bench/train.sh checks that this is
OpenBLAS and not the reference BLAS.
"""
import argparse
import json
import time

import torch
import torchvision


def build(args):
    if args.model == "resnet18":
        return torchvision.models.resnet18(num_classes=args.classes)
    if args.model == "vit-ti4":
        return torchvision.models.vision_transformer.VisionTransformer(
            image_size=args.image_size, patch_size=4, num_layers=args.depth,
            num_heads=args.heads, hidden_dim=args.dim, mlp_dim=args.mlp,
            num_classes=args.classes)
    raise SystemExit("unknown model " + args.model)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--dim", type=int, default=192)
    ap.add_argument("--depth", type=int, default=12)
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--mlp", type=int, default=768)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build(args)
    model.train()
    nparams = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
    if args.model.startswith("vit"):
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                                 {"params": no_decay, "weight_decay": 0}],
                                lr=1e-3)
    else:
        opt = torch.optim.SGD([{"params": decay, "weight_decay": 1e-4},
                               {"params": no_decay, "weight_decay": 0}],
                              lr=0.1, momentum=0.9, nesterov=True)
    lossf = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    x = torch.rand(args.batch, 3, args.image_size, args.image_size) * 4 - 2
    y = torch.randint(0, args.classes, (args.batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    dt = time.perf_counter() - t0
    print(json.dumps({"peer": "pytorch " + torch.__version__,
                      "model": args.model, "threads": args.threads,
                      "params": nparams, "batch": args.batch,
                      "images_per_s": args.steps * args.batch / dt}))


if __name__ == "__main__":
    main()
