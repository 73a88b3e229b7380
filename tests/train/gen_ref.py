"""gen_ref.py - reference states from PyTorch (CPU) for shardtrain's CPU
backend: a tiny timm-style ViT or a tiny torchvision-style ResNet, its
logits, loss and gradients on one batch, then five optimizer steps.

  gen_ref.py --model vit|resnet|resnet-bottleneck --out FILE [--seed N]
             [--dtype float64|float32]

The models are written out here with exactly timm's / torchvision's module
structure and parameter names (neither library is needed):
  vit                timm VisionTransformer: image 16, patch 4 (T = 16 + the
                     class token), dim 32, 2 blocks, 2 heads, MLP 64 (exact
                     GELU), qkv bias, LayerNorm eps 1e-6, pre-norm blocks,
                     final norm, head on token 0, 10 classes.
  resnet             torchvision resnet18 (BasicBlock, [2,2,2,2]) at width
                     1/8 (8,16,32,64 channels), image 32, 10 classes.
  resnet-bottleneck  torchvision resnet50: Bottleneck v1.5 (stride on
                     conv2, expansion 4), [3,4,6,3], at width 1/8, image
                     64, 10 classes. (At 32 its last stage is 1x1, so the
                     batch norms there normalise 4 values each, which
                     amplifies fp32 rounding some 30x over that stage;
                     ResNet-18 at 32 keeps the 1x1 case.)
Batch 4, label smoothing 0.1. The parameters, input and labels are drawn
as fp32 from --seed; the passes run in --dtype (float64 by default, so the
reference carries no rounding error of its own at fp32 precision) and are
stored as fp32.

Training: a fresh copy of the initial state, 5 steps on the same batch, the
learning rate at step t (0-based) lr (t+1)/2 for t < 2, else
0.5 lr (1 + cos(pi (t-2)/3)). The whole state (parameters, buffers,
optimizer moments) is recorded after every step, so a test can start each
step from the reference state and check that step alone.
  resnet: SGD lr 0.1, momentum 0.9, nesterov, weight decay 1e-4 on conv and
          fc weights only.
  vit:    AdamW lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.05
          on weights with ndim >= 2 except pos_embed and cls_token; gradient
          norm clipped to 1.0 (clip_grad_norm_).

File format (ref.h reads it), all integers u32 little-endian:
  "SKREF1\\n"                      7 bytes of magic
  u32 len, len bytes              the config: "key=value\\n" lines
  records until the end of file:
  u32 namelen, name bytes         no NUL
  u32 ndim (0..8), u32 dims[ndim]
  f32 data[prod(dims)]            little-endian, row-major (1 value if ndim 0)

Records:
  param:NAME    every parameter and buffer as state_dict names it
                (num_batches_tracked left out), before anything ran
  x             input (B,3,S,S)          labels   (B), integers as floats
  logits        (B,classes), train mode  loss     () mean, smoothing 0.1
  act:MODULE    the output of every module (ReLU, Identity and dropout
                left out; a module called twice keeps its last output)
  buf1:NAME     the buffers after that one forward
  grad:NAME     d loss / d parameter
  stepN:NAME    every parameter and buffer after N = 1..5 steps (step5 is
                the final state)
  stepN.KEY:NAME  the optimizer's state after N steps, KEY as PyTorch names
                it: momentum_buffer (SGD), exp_avg and exp_avg_sq (AdamW)
  train:loss    (5) the loss before each step
  train:lr      (5) the learning rate of each step
  train:gnorm   (5) the global gradient norm before clipping
  kinksN        (n,4), ResNets only: for the forward of step N = 0..4
                (step 0's is also the one pass above), the elements where
                rounding may choose the branch, rows (kind, call, index,
                value). kind 0: the input of the call-th ReLU (in call
                order) at flat index is within KINK of 0, relative to that
                input's max |z|; value z. kind 1: the call-th max pool's
                output at flat index has its top two inputs within KINK;
                value the argmax, an offset in the (H,W) plane. Where fp32
                takes the other branch, the float64 gradient belongs to the
                other branch and is no reference for that step.
"""

import argparse
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

MAGIC = b"SKREF1\n"
BATCH = 4
CLASSES = 10
SMOOTHING = 0.1
STEPS = 5
WARMUP = 2
KINK = 1e-4


# ---------------------------------------------------------------------------
# timm VisionTransformer (timm/models/vision_transformer.py)


class PatchEmbed(nn.Module):
    def __init__(self, patch, dim):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, patch, stride=patch)

    def forward(self, x):
        # (B,3,H,W) -> (B,D,H/p,W/p) -> (B,T,D), patches in row-major order
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.num_heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()  # exact erf form
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, hidden)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, image, patch, dim, depth, heads, hidden, classes):
        super().__init__()
        T = (image // patch) ** 2
        self.patch_embed = PatchEmbed(patch, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, T + 1, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads, hidden)
                                      for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + self.pos_embed
        x = self.blocks(x)
        x = self.norm(x)
        return self.head(x[:, 0])  # global_pool "token"


# ---------------------------------------------------------------------------
# torchvision ResNet (torchvision/models/resnet.py)


def conv3x3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def conv1x1(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride, downsample):
        super().__init__()
        self.conv1 = conv3x3(cin, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride, downsample):
        super().__init__()
        self.conv1 = conv1x1(cin, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes, stride)  # v1.5
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = conv1x1(planes, planes * 4)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU()
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, block, layers, width, classes):
        super().__init__()
        w = [int(64 * width * 2 ** i) for i in range(4)]
        self.inplanes = w[0]
        self.conv1 = nn.Conv2d(3, w[0], 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(w[0])
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, w[0], layers[0], 1)
        self.layer2 = self._make_layer(block, w[1], layers[1], 2)
        self.layer3 = self._make_layer(block, w[2], layers[2], 2)
        self.layer4 = self._make_layer(block, w[3], layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(w[3] * block.expansion, classes)

    def _make_layer(self, block, planes, n, stride):
        down = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            down = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                nn.BatchNorm2d(planes * block.expansion))
        blocks = [block(self.inplanes, planes, stride, down)]
        self.inplanes = planes * block.expansion
        for _ in range(1, n):
            blocks.append(block(self.inplanes, planes, 1, None))
        return nn.Sequential(*blocks)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ---------------------------------------------------------------------------
# configs, initial state, optimizers


def make_model(kind):
    """The model and its config (the keys the C test reads)."""
    if kind == "vit":
        cfg = dict(model="vit", image_size=16, patch=4, dim=32, layers=2,
                   heads=2, mlp=64)
        m = VisionTransformer(16, 4, 32, 2, 2, 64, CLASSES)
    elif kind == "resnet":
        cfg = dict(model="resnet", image_size=32, depth=18, block="basic",
                   stages="2,2,2,2", width=0.125)
        m = ResNet(BasicBlock, [2, 2, 2, 2], 0.125, CLASSES)
    elif kind == "resnet-bottleneck":
        cfg = dict(model="resnet-bottleneck", image_size=64, depth=50,
                   block="bottleneck", stages="3,4,6,3", width=0.125)
        m = ResNet(Bottleneck, [3, 4, 6, 3], 0.125, CLASSES)
    else:
        raise ValueError(kind)
    cfg.update(classes=CLASSES, batch=BATCH, smoothing=SMOOTHING,
               steps=STEPS, warmup=WARMUP)
    if kind == "vit":
        cfg.update(optim="adamw", lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                   weight_decay=0.05, clip=1.0)
    else:
        cfg.update(optim="sgd", lr=0.1, momentum=0.9, nesterov=1,
                   weight_decay=1e-4, clip=0.0)
    return m, cfg


def init_state(model, gen):
    """Random fp32 values for every parameter and buffer. Not the libraries'
    inits: larger and with non-zero biases, norm scales and running
    statistics, so that every term of every pass shows in the result. The
    last batch norm of each residual branch scales by about 0.2 (where
    torchvision's zero_init_residual puts 0), so the residual stream stays
    O(1) through the depth instead of growing block by block."""
    sd = {}
    names = model.state_dict().keys()
    last = "bn3" if any(".bn3." in n for n in names) else "bn2"
    for name, t in model.state_dict().items():
        if name.endswith("num_batches_tracked"):
            continue
        shape = t.shape
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "running_mean":
            v = 0.1 * torch.randn(shape, generator=gen)
        elif leaf == "running_var":
            v = 0.5 + torch.rand(shape, generator=gen)
        elif name in ("cls_token", "pos_embed"):
            v = 0.5 * torch.randn(shape, generator=gen)
        elif leaf == "bias":
            v = 0.1 * torch.randn(shape, generator=gen)
        elif t.dim() == 1:  # norm scales
            v = 1.0 + 0.1 * torch.randn(shape, generator=gen)
            if name.startswith("layer") and name.endswith(last + ".weight"):
                v *= 0.2
        else:  # conv and linear weights, He-style
            fan_in = t[0].numel()
            v = torch.randn(shape, generator=gen) * math.sqrt(2.0 / fan_in)
        sd[name] = v.float()
    return sd


def load_state(model, sd, dtype):
    full = model.state_dict()
    for name, v in sd.items():
        full[name] = v.to(dtype)
    model.load_state_dict(full)
    model.to(dtype)


def decays(name, p, kind):
    if kind == "vit":
        return p.dim() >= 2 and name not in ("pos_embed", "cls_token")
    return name.endswith(".weight") and p.dim() > 1  # conv and fc weights


def make_optimizer(model, cfg, kind):
    dec = [p for n, p in model.named_parameters() if decays(n, p, kind)]
    nodec = [p for n, p in model.named_parameters()
             if not decays(n, p, kind)]
    groups = [dict(params=dec, weight_decay=cfg["weight_decay"]),
              dict(params=nodec, weight_decay=0.0)]
    if cfg["optim"] == "sgd":
        return torch.optim.SGD(groups, lr=cfg["lr"], momentum=cfg["momentum"],
                               nesterov=True)
    return torch.optim.AdamW(groups, lr=cfg["lr"],
                             betas=(cfg["beta1"], cfg["beta2"]),
                             eps=cfg["eps"])


def lr_at(cfg, t):
    lr = cfg["lr"]
    if t < WARMUP:
        return lr * (t + 1) / WARMUP
    x = (t - WARMUP) / (STEPS - WARMUP)
    return 0.5 * lr * (1.0 + math.cos(math.pi * x))


def grad_norm(model):
    return math.sqrt(sum(float((p.grad.double() ** 2).sum())
                         for p in model.parameters()))


# ---------------------------------------------------------------------------
# kinks


class Kinks:
    """Hooks every ReLU and max pool of a model and lists, per forward, the
    elements within KINK of a branch point (see kinksN above)."""

    def __init__(self, model):
        self.rows, self.relu, self.pool = [], 0, 0
        for mod in model.modules():
            if isinstance(mod, nn.ReLU):
                mod.register_forward_hook(self.on_relu)
            elif isinstance(mod, nn.MaxPool2d):
                mod.register_forward_hook(self.on_pool)

    def start(self):
        self.rows, self.relu, self.pool = [], 0, 0

    def on_relu(self, mod, inp, out):
        z = inp[0].detach().flatten()
        near = (z.abs() <= KINK * z.abs().max()).nonzero().flatten()
        for i in near.tolist():
            self.rows.append((0, self.relu, i, float(z[i])))
        self.relu += 1

    def on_pool(self, mod, inp, out):
        z = inp[0].detach()
        B, C, H, W = z.shape
        k, st, pad = mod.kernel_size, mod.stride, mod.padding
        _, idx = F.max_pool2d(z, k, st, pad, return_indices=True)
        # the top two of every window, padding at -inf as MaxPool2d
        cols = F.unfold(F.pad(z.reshape(B * C, 1, H, W), (pad,) * 4,
                              value=float("-inf")), k, stride=st)
        top = cols.topk(2, dim=1).values  # (B*C, 2, P*Q)
        gap = (top[:, 0] - top[:, 1]).flatten()
        near = ((gap <= KINK * z.abs().max()) &
                (top[:, 0].flatten() > 0)).nonzero().flatten()
        for i in near.tolist():
            self.rows.append((1, self.pool, i, float(idx.flatten()[i])))
        self.pool += 1

    def tensor(self):
        return torch.tensor(self.rows, dtype=torch.float64).reshape(-1, 4)


# ---------------------------------------------------------------------------
# the file


class Writer:
    def __init__(self, path, cfg):
        self.f = open(path, "wb")
        text = "".join("%s=%s\n" % (k, v) for k, v in cfg.items())
        self.f.write(MAGIC)
        self.f.write(struct.pack("<I", len(text)) + text.encode("ascii"))

    def put(self, name, t):
        t = torch.as_tensor(t).detach().to(torch.float32).contiguous()
        if t.dim() > 8:
            raise ValueError("%s: %d dimensions" % (name, t.dim()))
        b = name.encode("ascii")
        self.f.write(struct.pack("<I", len(b)) + b)
        self.f.write(struct.pack("<I", t.dim()))
        self.f.write(struct.pack("<%dI" % t.dim(), *t.shape))
        self.f.write(t.numpy().astype("<f4").tobytes())

    def close(self):
        self.f.close()


def buffers(model):
    return [(n, b) for n, b in model.named_buffers()
            if not n.endswith("num_batches_tracked")]


def skipped(mod):
    return isinstance(mod, (nn.ReLU, nn.Identity, nn.Dropout))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True,
                    choices=["vit", "resnet", "resnet-bottleneck"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dtype", choices=["float64", "float32"],
                    default="float64")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator().manual_seed(args.seed)

    model, cfg = make_model(args.model)
    cfg.update(seed=args.seed, dtype=args.dtype)
    sd = init_state(model, gen)
    S = cfg["image_size"]
    x = torch.randn(BATCH, 3, S, S, generator=gen)
    labels = torch.randint(0, CLASSES, (BATCH,), generator=gen)

    out = Writer(args.out, cfg)
    for name, v in sd.items():
        out.put("param:" + name, v)
    out.put("x", x)
    out.put("labels", labels)

    # One forward and backward in train mode, recording every module.
    load_state(model, sd, dtype)
    model.train()
    acts = {}

    def keep(name):
        return lambda mod, inp, out: acts.__setitem__(name,
                                                      out.detach().clone())

    for name, mod in model.named_modules():
        if name and not skipped(mod):
            mod.register_forward_hook(keep(name))
    logits = model(x.to(dtype))
    loss = F.cross_entropy(logits, labels, label_smoothing=SMOOTHING)
    loss.backward()
    out.put("logits", logits)
    out.put("loss", loss)
    for name, a in acts.items():
        out.put("act:" + name, a)
    for name, b in buffers(model):
        out.put("buf1:" + name, b)
    for name, p in model.named_parameters():
        out.put("grad:" + name, p.grad)

    # Five steps from a fresh copy of the initial state, recording the whole
    # state after each so that a test can check one step at a time: SGD at
    # lr 0.1 with batch norm over 4 images is chaotic, and fp32 rounding
    # grows to percent-level differences within 5 free steps.
    model, _ = make_model(args.model)
    load_state(model, sd, dtype)
    model.train()
    opt = make_optimizer(model, cfg, args.model)
    kinks = Kinks(model) if args.model != "vit" else None
    names = {p: n for n, p in model.named_parameters()}
    losses, lrs, norms = [], [], []
    for t in range(STEPS):
        lr = lr_at(cfg, t)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad()
        if kinks:
            kinks.start()
        loss = F.cross_entropy(model(x.to(dtype)), labels,
                               label_smoothing=SMOOTHING)
        loss.backward()
        if kinks:
            out.put("kinks%d" % t, kinks.tensor())
        norms.append(grad_norm(model))
        if cfg["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["clip"])
        opt.step()
        losses.append(float(loss))
        lrs.append(lr)
        pre = "step%d" % (t + 1)
        for name, p in model.named_parameters():
            out.put(pre + ":" + name, p)
        for name, b in buffers(model):
            out.put(pre + ":" + name, b)
        for p, st in opt.state.items():
            for key in ("momentum_buffer", "exp_avg", "exp_avg_sq"):
                if key in st:
                    out.put("%s.%s:%s" % (pre, key, names[p]), st[key])
    out.put("train:loss", torch.tensor(losses))
    out.put("train:lr", torch.tensor(lrs))
    out.put("train:gnorm", torch.tensor(norms))
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
