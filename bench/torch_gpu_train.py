#!/usr/bin/env python3
"""bench/torch_gpu_train.py - the PyTorch peer of shardtrain --backend cuda.

    torch_gpu_train.py --model resnet50|vit-l16|vit-h14 [--batch N]
                       [--precision fp32|tf32|bf16] [--compile|--no-compile]
                       [--compile-mode MODE] [--channels-last|--no-channels-last]
                       [--steps N] [--warmup N] [--optimizer sgd|adamw]
                       [--lr X] [--weight-decay X] [--clip X]
                       [--label-smoothing X] [--classes K] [--image-size N]
                       [--no-cudnn-benchmark] [--allow-math-sdpa] [--seed N]

Trains the model shardtrain trains, on one GPU, on one synthetic batch made
once on the GPU (torch.randn images, torch.randint labels), and prints one
JSON line:

    {"peer": "pytorch", "model", "batch", "precision", "images_per_s",
     "step_ms_median", "peak_mem_bytes", "torch", "device", ...}

Models: torchvision's resnet50 (v1.5, as shardtrain's resnet50), timm's
vit_large_patch16_224 and vit_huge_patch14_224 (class token, pre-norm,
LayerNorm eps 1e-6, exact GELU, as shardtrain's vit-l16 and vit-h14), all
with --classes outputs (1000) and random weights.

The work is shardtrain's defaults (train/shardtrain.c finish(),
train/optim.c):
  - cross-entropy with label smoothing 0.1;
  - ResNet: SGD, momentum 0.9, Nesterov, lr 0.1 x batch/256, weight decay
    1e-4, no clipping;
  - ViT: AdamW, betas (0.9, 0.999), eps 1e-8, lr 1e-3 x batch/256, weight
    decay 0.05, gradients clipped to a global norm of 1
    (clip_grad_norm_);
  - weight decay only on weights of 2 and more dimensions, never on norms,
    biases, the class token or the position embedding (timm's
    no_weight_decay(); shardtrain's decay flags);
  - a cosine schedule from lr to 0 over warmup + steps steps (shardtrain:
    no warmup, cosine over --steps); it does not change the speed.

Precision:
  fp32  float32 everywhere, TF32 off (torch.backends.cuda.matmul.allow_tf32
        and torch.backends.cudnn.allow_tf32 False), as shardtrain's
        --precision fp32;
  tf32  float32 tensors, TF32 tensor cores on for matmuls and convolutions
        (for reference);
  bf16  torch.autocast(device_type="cuda", dtype=torch.bfloat16) around the
        forward and the loss; parameters, gradients and optimizer state
        stay float32; TF32 on for what autocast leaves in float32.

The peer's best honest configuration by default: torch.compile of the
model (--no-compile for eager), channels-last tensors for the ResNet,
cudnn.benchmark, the fused optimizer (torch.optim's fused=True, else
foreach), and for the ViT timm's fused attention
(F.scaled_dot_product_attention; the math fallback is turned off so that a
fused kernel must run, unless --allow-math-sdpa).

Timing: --warmup steps (compilation, cudnn.benchmark's search, the
allocator's first blocks) untimed, then torch.cuda.synchronize(), --steps
steps with no host sync inside, torch.cuda.synchronize(). images_per_s is
steps x batch over that wall time; step_ms_median (min, max) comes from
CUDA events recorded between the steps. peak_mem_bytes is
torch.cuda.max_memory_allocated() over the whole run (warm-up included).
Exit status 1 with a message on stderr when the run fails (out of memory,
no GPU, a missing package).
"""

import argparse
import json
import math
import statistics
import sys
import time

MODELS = {
    # name: (family, timm name or None)
    "resnet50": ("resnet", None),
    "vit-l16": ("vit", "vit_large_patch16_224"),
    "vit-h14": ("vit", "vit_huge_patch14_224"),
}


def die(msg):
    print("torch_gpu_train.py: " + msg, file=sys.stderr)
    sys.exit(1)


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="torch_gpu_train.py",
        description="PyTorch peer of shardtrain --backend cuda: trains "
        "ResNet-50 or a ViT on one synthetic GPU batch and prints one "
        "JSON line with images/s.",
        epilog="Defaults follow shardtrain's for each model (see the "
        "docstring at the top of this file).")
    ap.add_argument("--model", required=True, choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, default=256,
                    help="images per step (256)")
    ap.add_argument("--precision", choices=("fp32", "tf32", "bf16"),
                    default="fp32",
                    help="fp32 (TF32 off), tf32, or bf16 autocast (fp32)")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction,
                    default=True, help="torch.compile the model (on)")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile mode: default, reduce-overhead, "
                    "max-autotune, ... (default)")
    ap.add_argument("--channels-last",
                    action=argparse.BooleanOptionalAction, default=None,
                    help="channels-last images and weights (on for "
                    "ResNet; ignored for ViT)")
    ap.add_argument("--steps", type=int, default=30,
                    help="timed steps (30)")
    ap.add_argument("--warmup", type=int, default=10,
                    help="untimed steps first (10)")
    ap.add_argument("--optimizer", choices=("sgd", "adamw"), default=None,
                    help="(sgd for ResNet, adamw for ViT)")
    ap.add_argument("--lr", type=float, default=None,
                    help="peak lr (sgd 0.1, adamw 1e-3, x batch/256)")
    ap.add_argument("--momentum", type=float, default=0.9,
                    help="SGD momentum, Nesterov (0.9)")
    ap.add_argument("--weight-decay", type=float, default=None,
                    help="(sgd 1e-4, adamw 0.05)")
    ap.add_argument("--clip", type=float, default=None,
                    help="max global gradient norm, 0 = off (sgd 0, "
                    "adamw 1)")
    ap.add_argument("--label-smoothing", type=float, default=0.1,
                    help="(0.1)")
    ap.add_argument("--classes", type=int, default=1000, help="(1000)")
    ap.add_argument("--image-size", type=int, default=224, help="(224)")
    ap.add_argument("--fused-optimizer",
                    action=argparse.BooleanOptionalAction, default=True,
                    help="torch.optim fused=True where it exists, else "
                    "foreach (on)")
    ap.add_argument("--cudnn-benchmark",
                    action=argparse.BooleanOptionalAction, default=True,
                    help="torch.backends.cudnn.benchmark (on)")
    ap.add_argument("--allow-math-sdpa", action="store_true",
                    help="ViT: let SDPA fall back to its unfused math "
                    "path (off: a fused kernel must run)")
    ap.add_argument("--seed", type=int, default=0, help="(0)")
    args = ap.parse_args(argv)
    family = MODELS[args.model][0]
    if args.batch < 1 or args.steps < 1 or args.warmup < 0:
        ap.error("--batch and --steps must be >= 1, --warmup >= 0")
    if args.channels_last is None:
        args.channels_last = family == "resnet"
    if family == "vit":
        args.channels_last = False
    if args.optimizer is None:
        args.optimizer = "adamw" if family == "vit" else "sgd"
    sgd = args.optimizer == "sgd"
    if args.lr is None:
        args.lr = (0.1 if sgd else 1e-3) * args.batch / 256.0
    if args.weight_decay is None:
        args.weight_decay = 1e-4 if sgd else 0.05
    if args.clip is None:
        args.clip = 0.0 if sgd else 1.0
    return args


def set_precision_flags(torch, precision):
    tf32 = precision != "fp32"
    # The legacy switches, as the benchmark specifies; set_float32_matmul_
    # precision drives the same matmul switch.
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def build_model(args, torch):
    family, timm_name = MODELS[args.model]
    if family == "resnet":
        import torchvision
        return torchvision.models.resnet50(weights=None,
                                           num_classes=args.classes), 0
    import timm
    model = timm.create_model(timm_name, pretrained=False,
                              num_classes=args.classes,
                              img_size=args.image_size)
    # timm's Attention uses F.scaled_dot_product_attention when its
    # fused_attn is set (use_fused_attn(), on unless TIMM_FUSED_ATTN=0):
    # make sure it is.
    nfused = 0
    for mod in model.modules():
        if hasattr(mod, "fused_attn"):
            mod.fused_attn = True
            nfused += 1
    if nfused == 0:
        die("timm's %s has no module with fused_attn: this timm does not "
            "use scaled_dot_product_attention" % timm_name)
    return model, nfused


def param_groups(model, wd):
    skip = set()
    if hasattr(model, "no_weight_decay"):
        skip = set(model.no_weight_decay())
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim <= 1 or name in skip:
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": wd},
            {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(args, torch, groups):
    if args.optimizer == "sgd":
        cls, kw = torch.optim.SGD, dict(lr=args.lr, momentum=args.momentum,
                                         nesterov=True)
    else:
        cls, kw = torch.optim.AdamW, dict(lr=args.lr, betas=(0.9, 0.999),
                                           eps=1e-8)
    if args.fused_optimizer:
        try:
            return cls(groups, fused=True, **kw), "fused"
        except (TypeError, RuntimeError, ValueError):
            pass
    return cls(groups, foreach=True, **kw), "foreach"


def sdpa_backends(torch):
    b = torch.backends.cuda
    out = {}
    for name in ("flash", "mem_efficient", "math", "cudnn"):
        fn = getattr(b, name + "_sdp_enabled", None)
        if fn is not None:
            out[name] = bool(fn())
    return out


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import torch
    except ImportError as e:
        die("cannot import torch (%s): pip install torch torchvision timm"
            % e)
    if not torch.cuda.is_available():
        die("torch.cuda.is_available() is False (torch %s, built for CUDA "
            "%s): no GPU, or a CPU-only torch" %
            (torch.__version__, torch.version.cuda))
    family = MODELS[args.model][0]
    dev = torch.device("cuda")
    torch.manual_seed(args.seed)
    set_precision_flags(torch, args.precision)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    if family == "vit" and not args.allow_math_sdpa:
        torch.backends.cuda.enable_math_sdp(False)

    try:
        model, nfused = build_model(args, torch)
    except ImportError as e:
        die("cannot import %s: pip install torch torchvision timm" % e.name)
    nparams = sum(p.numel() for p in model.parameters())
    model = model.to(dev)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    opt, opt_impl = make_optimizer(args, torch,
                                   param_groups(model, args.weight_decay))
    params = [p for p in model.parameters() if p.requires_grad]
    lossf = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    fwd = torch.compile(model, mode=args.compile_mode) if args.compile \
        else model

    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    x = torch.randn(args.batch, 3, args.image_size, args.image_size,
                    device=dev, generator=gen)
    if args.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, args.classes, (args.batch,), device=dev,
                      generator=gen)

    bf16 = args.precision == "bf16"
    total = args.warmup + args.steps

    def step(t):
        lr = 0.5 * args.lr * (1.0 + math.cos(math.pi * t / total))
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16,
                            enabled=bf16):
            loss = lossf(fwd(x), y)
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(params, args.clip, foreach=True)
        opt.step()
        return loss

    try:
        t0 = time.perf_counter()
        for t in range(args.warmup):
            step(t)
        torch.cuda.synchronize()
        warmup_s = time.perf_counter() - t0

        ev = [torch.cuda.Event(enable_timing=True)
              for _ in range(args.steps + 1)]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        ev[0].record()
        for i in range(args.steps):
            loss = step(args.warmup + i)
            ev[i + 1].record()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    except torch.cuda.OutOfMemoryError:
        die("out of GPU memory: %s batch %d %s (peak %.1f GiB): lower "
            "--batch" % (args.model, args.batch, args.precision,
                         torch.cuda.max_memory_allocated() / 2**30))
    except RuntimeError as e:
        msg = str(e).lower()
        if family == "vit" and not args.allow_math_sdpa and (
                "no available kernel" in msg or "attention" in msg):
            die("no fused SDPA kernel took the attention (%s); "
                "--allow-math-sdpa lets the math path run" % e)
        raise
    step_ms = [ev[i].elapsed_time(ev[i + 1]) for i in range(args.steps)]
    last_loss = float(loss.item())
    if not math.isfinite(last_loss):
        die("the loss is %r after %d steps" % (last_loss, total))

    import importlib
    versions = {}
    for mod in ("torchvision", "timm"):
        try:
            versions[mod] = importlib.import_module(mod).__version__
        except ImportError:
            versions[mod] = None
    out = {
        "peer": "pytorch",
        "model": args.model,
        "batch": args.batch,
        "precision": args.precision,
        "images_per_s": args.steps * args.batch / wall,
        "step_ms_median": statistics.median(step_ms),
        "step_ms_min": min(step_ms),
        "step_ms_max": max(step_ms),
        "peak_mem_bytes": torch.cuda.max_memory_allocated(),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "torchvision": versions["torchvision"],
        "timm": versions["timm"],
        "steps": args.steps,
        "warmup": args.warmup,
        "warmup_s": warmup_s,
        "wall_s": wall,
        "compile": args.compile,
        "compile_mode": args.compile_mode if args.compile else None,
        "channels_last": args.channels_last,
        "cudnn_benchmark": args.cudnn_benchmark,
        "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "fused_attn_modules": nfused,
        "sdpa_backends": sdpa_backends(torch) if family == "vit" else None,
        "optimizer": args.optimizer,
        "optimizer_impl": opt_impl,
        "lr": args.lr,
        "weight_decay": args.weight_decay,
        "clip": args.clip,
        "label_smoothing": args.label_smoothing,
        "classes": args.classes,
        "image_size": args.image_size,
        "params": nparams,
        "last_loss": last_loss,
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
