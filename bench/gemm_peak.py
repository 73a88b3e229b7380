#!/usr/bin/env python3
"""bench/gemm_peak.py - the dense GEMM peak of this GPU, for MFU.

    gemm_peak.py [--dtypes bf16,fp32,tf32] [--sizes 4096,8192,16384]
                 [--runs 7] [--min-ms 100]

Times torch.matmul(a, b, out=c) on square N x N x N operands (random
normal, made once on the GPU) for each dtype and size:

  bf16  bfloat16 operands and output (tensor cores, fp32 accumulation);
  fp32  float32 with TF32 off (torch.backends.cuda.matmul.allow_tf32 =
        False): the CUDA cores' fp32 peak, the ceiling of shardtrain's fp32
        CUDA backend and of PyTorch at --precision fp32;
  tf32  float32 with TF32 on (tensor cores), for reference.

Each (dtype, size) is warmed up, then timed --runs times; a run is enough
back-to-back matmuls to last at least --min-ms, timed with CUDA events.
TFLOP/s = 2 N^3 x matmuls / time. The figure for a size is the median of
its runs, and the peak of a dtype is the best size's median.

Prints one JSON line:

    {"device", "torch", "cuda", "sizes", "runs",
     "tflops": {"bf16": {"4096": x, "8192": x, ...}, ...},
     "peak_tflops": {"bf16": x, "fp32": x, "tf32": x},
     "best_size": {"bf16": n, ...}}

Exit status 1 with a message when torch or the GPU is missing.
"""

import argparse
import json
import math
import statistics
import sys


def die(msg):
    print("gemm_peak.py: " + msg, file=sys.stderr)
    sys.exit(1)


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="gemm_peak.py",
        description="Measure the dense GEMM peak (TFLOP/s) of the GPU "
        "with torch.matmul, for MFU; prints one JSON line.")
    ap.add_argument("--dtypes", default="bf16,fp32,tf32",
                    help="comma-separated, of bf16, fp32 (TF32 off), tf32 "
                    "(bf16,fp32,tf32)")
    ap.add_argument("--sizes", default="4096,8192,16384",
                    help="square sizes N (M = N = K), comma-separated; the "
                    "best is the peak (4096,8192,16384)")
    ap.add_argument("--runs", type=int, default=7,
                    help="timed runs per size; the median counts (7)")
    ap.add_argument("--min-ms", type=float, default=100.0,
                    help="each run lasts at least this long (100)")
    args = ap.parse_args(argv)
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    for d in args.dtypes:
        if d not in ("bf16", "fp32", "tf32"):
            ap.error("--dtypes: unknown %r (bf16, fp32, tf32)" % d)
    try:
        args.sizes = [int(s) for s in args.sizes.split(",") if s]
    except ValueError:
        ap.error("--sizes wants comma-separated integers")
    if not args.sizes or min(args.sizes) < 1 or args.runs < 1:
        ap.error("--sizes and --runs must be positive")
    return args


def time_gemm(torch, n, dtype, runs, min_ms):
    a = torch.randn(n, n, device="cuda", dtype=torch.float32).to(dtype)
    b = torch.randn(n, n, device="cuda", dtype=torch.float32).to(dtype)
    c = torch.empty(n, n, device="cuda", dtype=dtype)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)

    def timed(k):
        start.record()
        for _ in range(k):
            torch.matmul(a, b, out=c)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    # warm up (cuBLAS heuristics), size a run to min_ms, then one untimed
    # run of that size (clocks)
    timed(3)
    k = 1
    ms = timed(k)
    while ms < 20 and k < 1 << 20:
        k *= 2
        ms = timed(k)
    iters = max(1, math.ceil(min_ms / max(ms / k, 1e-6)))
    timed(iters)
    rates = []
    for _ in range(runs):
        t = timed(iters)
        rates.append(2.0 * n ** 3 * iters / (t * 1e-3) / 1e12)
    del a, b, c
    torch.cuda.empty_cache()
    return statistics.median(rates)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import torch
    except ImportError as e:
        die("cannot import torch (%s): pip install torch" % e)
    if not torch.cuda.is_available():
        die("torch.cuda.is_available() is False (torch %s, CUDA %s): no "
            "GPU, or a CPU-only torch" % (torch.__version__,
                                          torch.version.cuda))
    saved = (torch.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.allow_tf32)
    tflops, peak, best = {}, {}, {}
    for d in args.dtypes:
        dtype = torch.bfloat16 if d == "bf16" else torch.float32
        torch.backends.cuda.matmul.allow_tf32 = d == "tf32"
        tflops[d] = {}
        for n in args.sizes:
            try:
                tflops[d][str(n)] = time_gemm(torch, n, dtype, args.runs,
                                              args.min_ms)
            except torch.cuda.OutOfMemoryError:
                tflops[d][str(n)] = None
                torch.cuda.empty_cache()
        ok = {n: v for n, v in tflops[d].items() if v is not None}
        if not ok:
            die("%s: every size ran out of memory" % d)
        best[d] = int(max(ok, key=ok.get))
        peak[d] = ok[str(best[d])]
    torch.backends.cuda.matmul.allow_tf32, \
        torch.backends.cudnn.allow_tf32 = saved
    print(json.dumps({
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "sizes": args.sizes,
        "runs": args.runs,
        "min_ms": args.min_ms,
        "tflops": tflops,
        "peak_tflops": peak,
        "best_size": best,
    }), flush=True)


if __name__ == "__main__":
    main()
