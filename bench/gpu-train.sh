#!/usr/bin/env bash
# bench/gpu-train.sh - GPU training speed: shardtrain --backend cuda against
# PyTorch on one GPU, on the same models, batch, loss and optimizer, on
# synthetic data, interleaved in one run.
#
#   bench/gpu-train.sh [--runs R] [--steps S] [--warmup W] [--cases LIST]
#                      [--out DIR] [--quick | --budget] [--shardtrain PATH]
#                      [--python PATH]
#   bench/gpu-train.sh --report DIR
#
# Cases (--cases, MODEL:BATCH words; default "resnet50:256 vit-l16:64"):
# torchvision's ResNet-50 and timm's ViT-L/16 (vit-h14 also works), at
# 224x224 with 1000 classes, one GPU. Each case runs
#   shardtrain  shardtrain --backend cuda --data synthetic --model MODEL
#               --classes 1000 --global-batch BATCH --steps N
#               --ceiling-steps 0 -q --json FILE --precision P, once
#               for each precision P in ST_PRECISIONS (default "fp32";
#               "bf16 fp32" for both)
#   PyTorch     bench/torch_gpu_train.py --model MODEL --batch BATCH
#               --precision P for each P in PT_PRECISIONS (default
#               "fp32 bf16": fp32 with TF32 off, and bf16 autocast) and
#               each variant in PT_VARIANTS (default "compile":
#               torch.compile, channels-last for ResNet; also "eager",
#               "compile-nchw", "eager-nchw")
# with shardtrain's defaults on both sides: label smoothing 0.1; SGD
# (Nesterov 0.9, lr 0.1 x batch/256, wd 1e-4) for ResNet, AdamW (lr 1e-3 x
# batch/256, wd 0.05, clip 1) for ViT; no weight decay on norms, biases
# and the ViT's tokens.
#
# Each of the R rounds (default 3) runs every case once, shardtrain and
# PyTorch alternating, in an order that rotates from round to round. The
# table gives medians over the rounds [min-max], the ratio shardkit/pytorch
# (ratio of the medians, and the median of the per-round ratios against
# the PyTorch variant with the best median), and MFU = images/s x training
# GFLOP per image / the GPU's measured GEMM peak. Training GFLOP is 3 x
# the forward's (shardtrain info: 2 x MACs; ViT-L/16 about 370, ResNet-50
# about 24.5); the peak is bench/gemm_peak.py's torch.matmul rate, best of
# 4096/8192/16384 cubed, for the run's precision (fp32 with TF32 off, tf32
# or bf16), measured once per results folder before the first round.
#
# Timing. PyTorch: W untimed warm-up steps (compilation, cudnn.benchmark),
# then S steps between two torch.cuda.synchronize(). shardtrain times every
# step from the first and syncs each step (it reads the loss); its
# synthetic batches are made on the CPU and booked as data wait. So it runs
# twice, W steps and W + S steps, and its rate is S x BATCH over the
# difference of the two runs' busy time (result.stage_seconds.step -
# data_wait): the first W steps' cost cancels out. Its H2D copy of each
# batch is inside its busy time and is shown; its whole-run rate
# (result.compute_images_per_second) is shown too. S defaults to 20 and W
# to 5; process start and model set-up are outside every figure.
#
# Checks: every run trained BATCH x steps images on backend "cuda" with a
# finite loss; a failed run (exit status, timeout RUN_TIMEOUT, out of
# memory) is reported with its log and the others go on, and the script
# then exits 1. Before each run the number of other processes on the GPU
# is recorded (nvidia-smi); the report warns when there were any.
#
# Output: the device, date, versions and the exact command of every case,
# then the tables (Markdown), on stdout and in DIR/report.md. DIR (--out;
# default a new /tmp/shardkit-gpu-train.XXXXXX) keeps every run's JSON and
# log, records.jsonl (one line per run) and gemm.json. An existing DIR is
# added to: its rounds are numbered on from the last, and the report covers
# them all (so rounds can be spread over several invocations); --report DIR
# prints the report of DIR again, with no GPU. --quick is a smoke test of
# the script: 1 round, S 3, W 2, batches resnet50:16 vit-l16:4, PyTorch
# eager; its numbers mean nothing. --budget fits one round of the
# default cases into a few minutes of a lent GPU: 1 round, S 12, W 4 (more
# rounds by running it again on the same --out).
#
# Fails with a message and exit 1 when there is no GPU (no nvidia-smi, or
# it lists none), when PYTHON lacks torch, torchvision or timm or sees no
# GPU, or when shardtrain rejects --backend cuda (built without CUDA:
# rebuild with ../configure --with-cuda in build/).
#
# Environment: SHARDTRAIN (default build/train/shardtrain), PYTHON (a Python
# with torch, torchvision and timm; default python3), ST_PRECISIONS,
# PT_PRECISIONS, PT_VARIANTS, RUN_TIMEOUT (seconds per run, default 1200).

set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
st=${SHARDTRAIN:-$root/build/train/shardtrain}
py=${PYTHON:-python3}
st_precisions=${ST_PRECISIONS-fp32}
pt_precisions=${PT_PRECISIONS-fp32 bf16}
pt_variants=${PT_VARIANTS-}
run_timeout=${RUN_TIMEOUT:-1200}
runs='' steps='' warmup='' cases='' out='' report='' quick=0
cmdline="bench/gpu-train.sh${*:+ $*}"

usage() {
	sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0"
	exit "${1:-0}"
}

while [ $# -gt 0 ]; do
	case $1 in
	--runs) runs=${2:?--runs wants a number}; shift 2 ;;
	--runs=*) runs=${1#*=}; shift ;;
	--steps) steps=${2:?--steps wants a number}; shift 2 ;;
	--steps=*) steps=${1#*=}; shift ;;
	--warmup) warmup=${2:?--warmup wants a number}; shift 2 ;;
	--warmup=*) warmup=${1#*=}; shift ;;
	--cases) cases=${2:?--cases wants MODEL:BATCH words}; shift 2 ;;
	--cases=*) cases=${1#*=}; shift ;;
	--out) out=${2:?--out wants a directory}; shift 2 ;;
	--out=*) out=${1#*=}; shift ;;
	--report) report=${2:?--report wants a directory}; shift 2 ;;
	--report=*) report=${1#*=}; shift ;;
	--quick) quick=1; shift ;;
	--budget) quick=2; shift ;;
	--shardtrain) st=${2:?--shardtrain wants a path}; shift 2 ;;
	--shardtrain=*) st=${1#*=}; shift ;;
	--python) py=${2:?--python wants a path}; shift 2 ;;
	--python=*) py=${1#*=}; shift ;;
	-h|--help) usage 0 ;;
	*) echo "gpu-train.sh: unknown argument '$1'" >&2; usage 2 >&2 ;;
	esac
done

die() { echo "gpu-train.sh: $*" >&2; exit 1; }
log() { echo "gpu-train.sh: $*" >&2; }

if [ $quick = 1 ]; then
	: "${runs:=1}" "${steps:=3}" "${warmup:=2}"
	: "${cases:=resnet50:16 vit-l16:4}" "${pt_variants:=eager}"
elif [ $quick = 2 ]; then
	: "${runs:=1}" "${steps:=12}" "${warmup:=4}"
	: "${cases:=resnet50:256 vit-l16:64}" "${pt_variants:=compile}"
else
	: "${runs:=3}" "${steps:=20}" "${warmup:=5}"
	: "${cases:=resnet50:256 vit-l16:64}" "${pt_variants:=compile}"
fi
case $runs in ''|*[!0-9]*|0) die "--runs wants a positive number" ;; esac
case $steps in ''|*[!0-9]*|0) die "--steps wants a positive number" ;; esac
case $warmup in ''|*[!0-9]*) die "--warmup wants a number" ;; esac
case $run_timeout in ''|*[!0-9]*|0) die "RUN_TIMEOUT wants seconds" ;; esac
for c in $cases; do
	case $c in
	resnet50:[1-9]*|vit-l16:[1-9]*|vit-h14:[1-9]*)
		case ${c#*:} in *[!0-9]*) die "--cases: bad batch in '$c'" ;; esac ;;
	*) die "--cases: '$c' is not resnet50|vit-l16|vit-h14:BATCH" ;;
	esac
done
for p in $st_precisions $pt_precisions; do
	case $p in fp32|tf32|bf16) ;; *) die "unknown precision '$p' (fp32, tf32, bf16)" ;; esac
done
for v in $pt_variants; do
	case $v in compile|eager|compile-nchw|eager-nchw) ;;
	*) die "PT_VARIANTS: unknown '$v' (compile, eager, compile-nchw, eager-nchw)" ;;
	esac
done
[ -n "$cases" ] || die "--cases is empty"
[ -n "$st_precisions$pt_precisions" ] || die "ST_PRECISIONS and PT_PRECISIONS are both empty"

# ---------------------------------------------------------------------------
# the report: records.jsonl + gemm.json + flops.json + commands.tsv + header

summarize() {
	"$py" - "$1" <<'EOF'
import json, math, os, statistics, sys

d = sys.argv[1]
recs = [json.loads(l) for l in open(os.path.join(d, "records.jsonl"))
        if l.strip()]
gemm = json.load(open(os.path.join(d, "gemm.json")))
flops = json.load(open(os.path.join(d, "flops.json")))
peak = gemm["peak_tflops"]
out = []
p = out.append


def med(v):
    return statistics.median(v) if v else None


def rng(v):
    return "%.1f-%.1f" % (min(v), max(v)) if v else "-"


def f1(x, fmt="%.1f"):
    return fmt % x if x is not None else "-"


def train_gflop(model):
    return 3 * flops[model]


def mfu(model, prec, ips):
    if ips is None or not peak.get(prec):
        return None
    return ips * train_gflop(model) / (peak[prec] * 1e3)


def pct(x):
    return "%.1f%%" % (100 * x) if x is not None else "-"


def gib(b):
    return "%.1f GiB" % (b / 2**30) if b else "-"


p(open(os.path.join(d, "header.md")).read().rstrip())
p("")
p("GEMM peak, torch.matmul, N x N x N, median of %d runs, best N "
  "(bench/gemm_peak.py, gemm.json):" % gemm["runs"])
for k, name in (("fp32", "fp32, TF32 off"), ("tf32", "tf32"),
                ("bf16", "bf16")):
    if k in peak:
        p("- %s: %.1f TFLOP/s (N = %d; %s)" % (
            name, peak[k], gemm["best_size"][k],
            ", ".join("%s: %s" % (n, f1(v)) for n, v in
                      gemm["tflops"][k].items())))
p("")
p("Training GFLOP per image (3 x forward, shardtrain info): " + ", ".join(
    "%s %.2f" % (m, train_gflop(m)) for m in sorted(flops)) + ".")
if "vit-l16" in flops:
    x = train_gflop("vit-l16")
    p("Cross-check: ViT-L/16 training is about 370 GFLOP per image; "
      "shardtrain info says %.1f (%s)." % (
          x, "agrees" if abs(x / 370 - 1) < 0.02 else "DISAGREES"))
for r in recs:
    g = r.get("gflops_per_image")
    if r["tool"] == "shardtrain" and r["ok"] and g and \
            abs(g / flops[r["model"]] - 1) > 1e-3:
        p("WARNING: shardtrain's JSON gives %s %.3f forward GFLOP per "
          "image, info %.3f" % (r["model"], g, flops[r["model"]]))
        break
devices = sorted({r["device"] for r in recs if r.get("device")})
if len(devices) > 1:
    p("WARNING: the runs saw different devices: " + "; ".join(devices))
sw = sorted({(r.get("steps"), r.get("warmup")) for r in recs if r["ok"]},
            key=str)
if len(sw) > 1:
    p("WARNING: the runs differ in timed steps S and warm-up W: " +
      ", ".join("S %s W %s" % x for x in sw))
busy = [r for r in recs if r.get("other_gpu_procs")]
if busy:
    p("WARNING: %d of %d runs started with other processes on the GPU."
      % (len(busy), len(recs)))
rounds = sorted({r["round"] for r in recs})
if not rounds:
    sys.exit("gpu-train.sh: %s/records.jsonl has no runs" % d)
p("")
p("Rounds: %d (%s)." % (len(rounds), ", ".join(map(str, rounds))))

# group: (model, batch, precision, tool, variant) -> {round: record}
groups = {}
for r in recs:
    k = (r["model"], r["batch"], r["precision"], r["tool"], r["variant"])
    groups.setdefault(k, {})[r["round"]] = r
cases = []
for r in recs:
    c = (r["model"], r["batch"])
    if c not in cases:
        cases.append(c)
precs = ["fp32", "tf32", "bf16"]


def ips_list(g):
    return [x["images_per_s"] for x in g.values() if x["ok"]]


p("")
p("All runs (images/s, median [min-max] over the rounds):")
p("")
p("| model | batch | precision | tool | images/s | step ms (median) | "
  "peak GPU memory | MFU | notes |")
p("|---|---:|---|---|---:|---:|---:|---:|---|")
for (m, b) in cases:
    for pr in precs:
        for k in sorted(k for k in groups if k[:3] == (m, b, pr)):
            g = groups[k]
            v = ips_list(g)
            oks = [x for x in g.values() if x["ok"]]
            tool = k[3] + (" (%s)" % k[4] if k[4] else "")
            step = med([x["step_ms"] for x in oks])
            mem = med([x["peak_mem_bytes"] for x in oks
                       if x.get("peak_mem_bytes")])
            notes = []
            if k[3] == "shardtrain":
                w = med([x["whole_run_images_per_s"] for x in oks])
                h = med([x["h2d_ms"] for x in oks
                         if x.get("h2d_ms") is not None])
                notes.append("whole run %s img/s" % f1(w))
                nh = med([x["no_h2d_images_per_s"] for x in oks
                          if x.get("no_h2d_images_per_s")])
                if h is not None:
                    notes.append("H2D %.1f ms/step" % h)
                if nh is not None:
                    notes.append("%.1f img/s without H2D" % nh)
            else:
                w = med([x["warmup_s"] for x in oks])
                if w is not None:
                    notes.append("warm-up %.0f s" % w)
            nf = len(g) - len(oks)
            if nf:
                notes.append("%d FAILED" % nf)
            p("| %s | %d | %s | %s | %s [%s] | %s | %s | %s | %s |" % (
                m, b, pr, tool, f1(med(v)), rng(v), f1(step), gib(mem),
                pct(mfu(m, pr, med(v))), "; ".join(notes)))

p("")
p("shardkit against PyTorch (the PyTorch variant with the best median; "
  "MFU against the measured peak of the precision):")
p("")
p("| model | batch | precision | shardtrain images/s | PyTorch images/s "
  "(variant) | shardkit/pytorch, ratio of medians | median of per-round "
  "ratios [min-max] | MFU shardtrain | MFU PyTorch |")
p("|---|---:|---|---:|---:|---:|---:|---:|---:|")
refs = []
for (m, b) in cases:
    stk = {pr: groups.get((m, b, pr, "shardtrain", "")) for pr in precs}
    for pr in precs:
        best, bv = None, None
        for k in groups:
            if k[:4] == (m, b, pr, "pytorch"):
                v = med(ips_list(groups[k]))
                if v is not None and (bv is None or v > bv):
                    best, bv = k, v
        sg = stk[pr]
        if sg is None and best is None:
            continue
        sv = med(ips_list(sg)) if sg else None
        ratio = sv / bv if sv and bv else None
        per = []
        if sg and best:
            pg = groups[best]
            for rd, x in sg.items():
                y = pg.get(rd)
                if x["ok"] and y and y["ok"]:
                    per.append(x["images_per_s"] / y["images_per_s"])
        pts = "%s (%s)" % (f1(bv), best[4]) if best else "-"
        sts = f1(sv) if sg else "- (not run: ST_PRECISIONS)"
        p("| %s | %d | %s | %s | %s | %s | %s | %s | %s |" % (
            m, b, pr, sts, pts, f1(ratio, "%.2fx"),
            "%.2fx [%.2f-%.2f]" % (med(per), min(per), max(per))
            if per else "-", pct(mfu(m, pr, sv)), pct(mfu(m, pr, bv))))
        if sg is None and bv and stk.get("fp32"):
            s32 = med(ips_list(stk["fp32"]))
            if s32:
                refs.append("%s batch %d: shardtrain fp32 %.1f against "
                            "PyTorch %s %.1f images/s = %.2fx" % (
                                m, b, s32, pr, bv, s32 / bv))
if refs:
    p("")
    p("For reference, until shardtrain has the same precision:")
    for s in refs:
        p("- " + s)

fails = [r for r in recs if not r["ok"]]
if fails:
    p("")
    p("Failed runs:")
    for r in fails:
        p("- round %d, %s %s batch %d %s%s: %s (log: %s)" % (
            r["round"], r["tool"], r["model"], r["batch"], r["precision"],
            " " + r["variant"] if r["variant"] else "", r.get("error", "?"),
            r.get("log", "?")))

p("")
p("Commands (each case's first; shardtrain's first run has --steps W, its "
  "second W + S):")
p("")
p("```")
seen = set()
for l in open(os.path.join(d, "commands.tsv")):
    lab, cmd = l.rstrip("\n").split("\t", 1)
    if lab not in seen:
        seen.add(lab)
        p(cmd)
p("```")
text = "\n".join(out) + "\n"
open(os.path.join(d, "report.md"), "w").write(text)
sys.stdout.write(text)
EOF
}

if [ -n "$report" ]; then
	for f in records.jsonl gemm.json flops.json header.md commands.tsv; do
		[ -f "$report/$f" ] || die "$report has no $f: not a gpu-train.sh results folder"
	done
	command -v "$py" >/dev/null || die "no $py (set PYTHON)"
	summarize "$report"
	exit 0
fi

# ---------------------------------------------------------------------------
# what is needed: a GPU, torch + torchvision + timm, a CUDA shardtrain

[ -x "$st" ] || die "$st is not built (cd build && ../configure --with-cuda && make), or set SHARDTRAIN"
command -v nvidia-smi >/dev/null ||
    die "no nvidia-smi: this benchmark needs an NVIDIA GPU and its driver"
gpus=$(nvidia-smi -L 2>&1) || die "nvidia-smi -L fails: $gpus"
grep -q '^GPU [0-9]' <<<"$gpus" || die "nvidia-smi lists no GPU: $gpus"
command -v "$py" >/dev/null || die "no $py: set PYTHON to a Python with torch, torchvision and timm"
for m in torch torchvision timm; do
	"$py" -c "import $m" 2>/dev/null ||
	    die "$py cannot import $m: $py -m pip install torch torchvision timm (or set PYTHON)"
done
"$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
    die "$py's torch sees no GPU (torch $("$py" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null)): a CPU-only torch, or CUDA_VISIBLE_DEVICES"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
probe=("$st" --backend cuda --data synthetic --model resnet18 --image-size 32
    --classes 10 --global-batch 2 --steps 1 --ceiling-steps 0 -q
    --json "$tmp/probe.json")
rc=0
"${probe[@]}" >"$tmp/probe.log" 2>&1 || rc=$?
if [ $rc != 0 ]; then
	if [ $rc = 2 ] || grep -qE 'built without CUDA|not in this build' "$tmp/probe.log"; then
		die "$st was built without CUDA (--backend cuda: exit $rc):" \
		    "$(grep -m1 'shardtrain:' "$tmp/probe.log")" \
		    "-- rebuild it with CUDA: cd build && ../configure --with-cuda && make"
	fi
	die "$st --backend cuda fails (exit $rc) on a 1-step ResNet-18 at 32x32:" \
	    "$(tail -n 5 "$tmp/probe.log")"
fi
probe_backend=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["config"]["backend"])' "$tmp/probe.json")
[ "$probe_backend" = cuda ] ||
    die "$st accepted --backend cuda but its JSON says config.backend = '$probe_backend'"
for p in $st_precisions; do
	[ "$p" = fp32 ] && continue
	"$st" --help 2>&1 | grep -q -- '--precision' ||
	    die "ST_PRECISIONS has $p but $st --help has no --precision option (it is fp32 only)"
done

# ---------------------------------------------------------------------------
# the results folder, the header, the peak and the FLOPs

if [ -z "$out" ]; then
	out=$(mktemp -d /tmp/shardkit-gpu-train.XXXXXX)
else
	mkdir -p "$out"
fi
out=$(cd "$out" && pwd)
touch "$out/records.jsonl" "$out/commands.tsv"
last_round=$("$py" -c '
import json, sys
print(max([json.loads(l)["round"] for l in open(sys.argv[1]) if l.strip()] or [0]))' "$out/records.jsonl")

gpu_info=$(nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv,noheader 2>/dev/null | head -n 1)
versions=$("$py" -c '
import platform, torch, torchvision, timm
print("Python %s, torch %s (CUDA %s, cuDNN %s), torchvision %s, timm %s" % (
    platform.python_version(), torch.__version__, torch.version.cuda,
    torch.backends.cudnn.version(), torchvision.__version__, timm.__version__))')
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	commit="$commit + uncommitted changes"
fi
{
	echo "## GPU training: shardtrain --backend cuda against PyTorch"
	echo
	if [ "$runs" = 1 ]; then
		echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC') (round $((last_round + 1)))"
	else
		echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC') (rounds $((last_round + 1))-$((last_round + runs)))"
	fi
	echo "- Device: $gpu_info (name, driver, memory, power limit, max SM clock)"
	echo "- Host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
	echo "- shardtrain: $("$st" --version 2>&1 | head -n 1), commit $commit"
	echo "- Peer: $versions"
	echo "- Command: $cmdline (ST_PRECISIONS='$st_precisions' PT_PRECISIONS='$pt_precisions' PT_VARIANTS='$pt_variants'; S $steps, W $warmup)"
} >"$tmp/header.md"
if [ -f "$out/header.md" ]; then
	{ echo; sed -n '3,$p' "$tmp/header.md"; } >>"$out/header.md"
else
	cp "$tmp/header.md" "$out/header.md"
fi
cat "$tmp/header.md" >&2

if [ ! -s "$out/gemm.json" ]; then
	log "measuring the GEMM peak: $py bench/gemm_peak.py"
	"$py" "$here/gemm_peak.py" >"$tmp/gemm.json" 2>"$out/gemm.log" ||
	    die "bench/gemm_peak.py failed: $(tail -n 5 "$out/gemm.log")"
	mv "$tmp/gemm.json" "$out/gemm.json"
fi

for c in $cases; do
	m=${c%%:*}
	"$st" info --model "$m" --classes 1000 >"$tmp/info.$m" ||
	    die "$st info --model $m failed"
done
# shellcheck disable=SC2086 # one argument per case
"$py" - "$tmp" "$out/flops.json" $cases <<'EOF'
import json, os, re, sys
tmp, path, cases = sys.argv[1], sys.argv[2], sys.argv[3:]
fl = json.load(open(path)) if os.path.exists(path) else {}
for c in cases:
    m = c.split(":")[0]
    t = open(os.path.join(tmp, "info." + m)).read()
    g = re.search(r"= ([0-9.]+) GFLOPs per image", t)
    if not g:
        sys.exit("gpu-train.sh: no 'GFLOPs per image' in shardtrain info "
                 "--model " + m)
    fl[m] = float(g.group(1))
json.dump(fl, open(path, "w"))
EOF

# ---------------------------------------------------------------------------
# one run

# other_procs: processes on the GPU now (none of ours is running)
other_procs() {
	nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null |
	    grep -c '[0-9]' || true
}

# record ROUND JSON-FIELDS...: append a failed or finished run's line
record() {
	"$py" - "$out/records.jsonl" "$@" <<'EOF'
import json, sys
path, kv = sys.argv[1], sys.argv[2:]
r = {}
for a in kv:
    k, v = a.split("=", 1)
    r[k] = json.loads(v)
with open(path, "a") as f:
    f.write(json.dumps(r) + "\n")
EOF
}

# why RC LOG: a failed run's exit status and the end of its log
why() {
	local t=
	[ "$1" != 124 ] || t=" (timed out after ${run_timeout}s)"
	printf 'exit %s%s: %s' "$1" "$t" "$(tail -n 2 "$2" | tr '\n' ' ' | sed 's/ *$//')"
}

# jstr S: S as a JSON string
jstr() { "$py" -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }

# run_st ROUND MODEL BATCH PRECISION
run_st() {
	local rd=$1 m=$2 b=$3 pr=$4 tag n rc=0 procs err
	tag="r$rd.st.$m.$b.$pr"
	local cmd=("$st" --backend cuda --data synthetic --model "$m"
	    --classes 1000 --global-batch "$b" --ceiling-steps 0 -q)
	cmd+=(--precision "$pr")	# cuda's default is bf16
	procs=$(other_procs)
	for n in "$warmup" "$((warmup + steps))"; do
		[ "$n" = 0 ] && continue
		printf 'shardtrain %s %s %s %s\t%s\n' "$m" "$b" "$pr" "$n" \
		    "$(printf '%q ' "${cmd[@]}" --steps "$n" --json "$out/$tag.$n.json" | sed 's/ $//')" \
		    >>"$out/commands.tsv"
		timeout -k 30 "$run_timeout" "${cmd[@]}" --steps "$n" \
		    --json "$out/$tag.$n.json" >"$out/$tag.$n.log" 2>&1 || rc=$?
		[ $rc = 0 ] || break
	done
	if [ $rc != 0 ]; then
		err=$(why "$rc" "$out/$tag.$n.log")
		log "FAILED: shardtrain $m batch $b $pr (round $rd): $err"
		record tool='"shardtrain"' model="\"$m\"" batch="$b" \
		    precision="\"$pr\"" variant='""' round="$rd" ok=false \
		    error="$(jstr "$err")" log="$(jstr "$out/$tag.$n.log")" \
		    other_gpu_procs="$procs"
		return 1
	fi
	if ! "$py" - "$out" "$tag" "$m" "$b" "$pr" "$rd" "$warmup" "$steps" \
	    "$procs" >>"$out/records.jsonl" 2>"$tmp/err" <<'EOF'; then
import json, math, os, sys
out, tag, m, b, pr, rd, w, s, procs = sys.argv[1:]
b, rd, w, s = int(b), int(rd), int(w), int(s)


def load(n):
    j = json.load(open(os.path.join(out, "%s.%d.json" % (tag, n))))
    c, r = j["config"], j["result"]
    bad = []
    if c["backend"] != "cuda":
        bad.append("config.backend %r" % c["backend"])
    if c["global_batch"] != b or c["classes"] != 1000:
        bad.append("global_batch %r classes %r" % (c["global_batch"],
                                                    c["classes"]))
    if r["steps"] != n or r["images"] != n * b:
        bad.append("%r steps, %r images, not %d and %d" % (
            r["steps"], r["images"], n, n * b))
    if r["last_loss"] is None or not math.isfinite(r["last_loss"]):
        bad.append("last loss %r" % r["last_loss"])
    if bad:
        sys.exit("%s.%d.json: %s" % (tag, n, "; ".join(bad)))
    ss = r["stage_seconds"]
    return j, ss["step"] - ss["data_wait"], ss.get("h2d") or 0.0


jl, busy_l, h2d_l = load(w + s)
if w > 0:
    _, busy_s, h2d_s = load(w)
else:
    busy_s = h2d_s = 0.0
dt = busy_l - busy_s
if dt <= 0:
    sys.exit("%s: the %d-step run was not slower than the %d-step one" %
             (tag, w + s, w))
r = jl["result"]
mem = r.get("peak_gpu_bytes")
if mem is None:             # another name for the device's peak?
    for k, v in r.items():
        if k.endswith("bytes") and any(t in k for t in ("device", "gpu",
                                                        "cuda", "vram")):
            mem = v
            break
dh = h2d_l - h2d_s
print(json.dumps({
    "tool": "shardtrain", "model": m, "batch": b, "precision": pr,
    "variant": "", "round": rd, "ok": True,
    "images_per_s": s * b / dt, "step_ms": 1e3 * dt / s,
    "whole_run_images_per_s": r["compute_images_per_second"],
    "h2d_ms": 1e3 * dh / s,
    "no_h2d_images_per_s": s * b / (dt - dh) if dt > dh else None,
    "peak_mem_bytes": mem, "gflops_per_image": r["gflops_per_image"],
    "device": r.get("gpu") or jl["config"].get("device"),
    "other_gpu_procs": int(procs),
    "version": jl.get("version"), "steps": s, "warmup": w,
    "log": os.path.join(out, tag)}))
EOF
		err=$(tail -n 1 "$tmp/err")
		log "FAILED: shardtrain $m batch $b $pr (round $rd): $err"
		record tool='"shardtrain"' model="\"$m\"" batch="$b" \
		    precision="\"$pr\"" variant='""' round="$rd" ok=false \
		    error="$(jstr "$err")" log="$(jstr "$out/$tag")" \
		    other_gpu_procs="$procs"
		return 1
	fi
}

# run_pt ROUND MODEL BATCH PRECISION VARIANT
run_pt() {
	local rd=$1 m=$2 b=$3 pr=$4 v=$5 tag rc=0 procs err
	tag="r$rd.pt.$m.$b.$pr.$v"
	local cmd=("$py" "$here/torch_gpu_train.py" --model "$m" --batch "$b"
	    --precision "$pr" --steps "$steps" --warmup "$warmup")
	case $v in eager*) cmd+=(--no-compile) ;; esac
	case $v in *-nchw) cmd+=(--no-channels-last) ;; esac
	printf 'pytorch %s %s %s %s\t%s\n' "$m" "$b" "$pr" "$v" \
	    "$(printf '%q ' "${cmd[@]}" | sed 's/ $//')" >>"$out/commands.tsv"
	procs=$(other_procs)
	timeout -k 30 "$run_timeout" "${cmd[@]}" >"$out/$tag.json" \
	    2>"$out/$tag.log" || rc=$?
	if [ $rc = 0 ] && "$py" - "$out/$tag.json" "$m" "$b" "$pr" "$v" "$rd" \
	    "$procs" >>"$out/records.jsonl" 2>"$tmp/err" <<'EOF'; then
import json, sys
path, m, b, pr, v, rd, procs = sys.argv[1:]
lines = [l for l in open(path) if l.strip()]
if not lines:
    sys.exit("no JSON line on stdout")
j = json.loads(lines[-1])
if j["model"] != m or j["batch"] != int(b) or j["precision"] != pr:
    sys.exit("ran %s batch %s %s" % (j["model"], j["batch"],
                                     j["precision"]))
print(json.dumps({
    "tool": "pytorch", "model": m, "batch": int(b), "precision": pr,
    "variant": v, "round": int(rd), "ok": True,
    "images_per_s": j["images_per_s"], "step_ms": j["step_ms_median"],
    "peak_mem_bytes": j["peak_mem_bytes"], "warmup_s": j["warmup_s"],
    "device": j["device"], "torch": j["torch"],
    "other_gpu_procs": int(procs), "steps": j.get("steps"),
    "warmup": j.get("warmup"), "log": path}))
EOF
		return 0
	fi
	if [ $rc != 0 ]; then
		err=$(why "$rc" "$out/$tag.log")
	else
		err=$(tail -n 1 "$tmp/err")
	fi
	log "FAILED: pytorch $m batch $b $pr $v (round $rd): $err"
	record tool='"pytorch"' model="\"$m\"" batch="$b" precision="\"$pr\"" \
	    variant="\"$v\"" round="$rd" ok=false error="$(jstr "$err")" \
	    log="$(jstr "$out/$tag.log")" other_gpu_procs="$procs"
	return 1
}

# ---------------------------------------------------------------------------
# the rounds: every case once, shardtrain and PyTorch alternating, the order
# rotating from round to round

jobs=()
for c in $cases; do
	m=${c%%:*} b=${c#*:}
	stj=() ptj=()
	for p in $st_precisions; do stj+=("st $m $b $p"); done
	for p in $pt_precisions; do
		for v in $pt_variants; do
			# channels-last means nothing to a ViT
			case $m:$v in vit*:*-nchw) continue ;; esac
			ptj+=("pt $m $b $p $v")
		done
	done
	i=0
	while [ $i -lt ${#stj[@]} ] || [ $i -lt ${#ptj[@]} ]; do
		[ $i -lt ${#stj[@]} ] && jobs+=("${stj[$i]}")
		[ $i -lt ${#ptj[@]} ] && jobs+=("${ptj[$i]}")
		i=$((i + 1))
	done
done
njobs=${#jobs[@]}
failed=0
for r in $(seq "$((last_round + 1))" "$((last_round + runs))"); do
	for k in $(seq 0 $((njobs - 1))); do
		read -r kind m b p v <<<"${jobs[$(((k + r - 1) % njobs))]}"
		n=$(other_procs)
		[ "$n" = 0 ] || log "WARNING: $n other process(es) on the GPU before $kind $m $p"
		log "round $r: $kind $m batch $b $p${v:+ $v}"
		if [ "$kind" = st ]; then
			run_st "$r" "$m" "$b" "$p" || failed=1
		else
			run_pt "$r" "$m" "$b" "$p" "$v" || failed=1
		fi
	done
	log "round $r done ($((r - last_round)) of $runs)"
done

summarize "$out"
echo
echo "results: $out (report.md, records.jsonl, every run's JSON and log)"
[ $failed = 0 ] || die "some runs failed (above)"
