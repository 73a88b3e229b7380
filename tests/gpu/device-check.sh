#!/usr/bin/env bash
# device-check.sh - everything a session with a GPU checks and measures,
# in stages that each fit a short lease, every stage under its own timeout
# and its output appended to OUTDIR as it comes (so a stage cut off still
# leaves what it did).
#
# usage: tests/gpu/device-check.sh BUNDLEDIR OUTDIR STAGE...
#   BUNDLEDIR  holds shardkit-gpu.tar.xz (tests/gpu/bundle.sh pack)
#   OUTDIR     where the logs and bench/gpu-train.sh's results go
#   stages, in the order given:
#     info      the GPU, driver, PyTorch and cuDNN versions
#     tests     tests/gpu/run.sh on the bundle (every GPU test)
#     sanitize  shardtrain's tiny ResNet and ViT, bf16 and fp32, under
#               compute-sanitizer memcheck
#     quick     shardtrain bf16 and fp32 (busy images/s, peak memory),
#               a bf16 --profile run, and PyTorch eager bf16, for ResNet-50
#               at 256 and ViT-L/16 at 64: the first look
#     profile   shardtrain --profile, bf16, both cases; and ResNet-50 with
#               SHARDKIT_CUDA_NCHW=1 (the NCHW fallback) for comparison
#     bench     bench/gpu-train.sh --budget: shardtrain bf16 and fp32
#               against PyTorch eager bf16 and fp32 (BENCH_PRECISIONS to
#               choose), ResNet-50 at 256 and ViT-L/16 at 64, one round
#               (add rounds by running it again)
#     compile   PyTorch torch.compile + bf16, one round, into the same
#               results, for COMPILE_CASES (default both models)
#     verdict   ResNet-50 bf16 fed by the loader from local JPEG shards:
#               data wait, loader-alone and compute-alone ceilings and the
#               verdict (shardtrain --json)
#     kprof     where the GPU time of a bf16 step goes, kernel by kernel
#               (kprof.so, tests/gpu/kprof.c): shardtrain and PyTorch
#               eager bf16 for KPROF_CASES (default "resnet50:256
#               vit-l16:64"), each the difference of a short and a long
#               run, into OUTDIR/kprof-*.txt
#     report    bench/gpu-train.sh --report of what was measured
# STAGE_TIMEOUT (seconds, default 420) bounds each stage; BENCH_DIR keeps
# bench/gpu-train.sh's runs (default OUTDIR/bench); QUICK_PRECISIONS the
# quick stage's (default "bf16 fp32").
set -u

[ $# -ge 3 ] || { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0"; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bundle=$1 out=$2
shift 2
mkdir -p "$out" || exit 1
log=$out/device-check.log
tmo=${STAGE_TIMEOUT:-420}
# bench/gpu-train.sh's many files: BENCH_DIR (default OUTDIR/bench)
bench=${BENCH_DIR:-$out/bench}
export PYTHONUNBUFFERED=1

say() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$log"; }

# in_bundle COMMAND...: COMMAND with SHARDTRAIN/SHARDTOOL set to the
# bundle's programs and NVIDIA's libraries on the path
in_bundle() {
	timeout "$tmo" "$root/tests/gpu/bundle.sh" exec "$bundle" "$@"
}

stage_info() {
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
	    --format=csv
	python3 -c 'import torch; print("torch", torch.__version__, "cuda",
torch.version.cuda, "cudnn", torch.backends.cudnn.version(),
torch.cuda.get_device_name(0))'
	nproc
}

stage_tests() {
	timeout "$tmo" "$root/tests/gpu/bundle.sh" run "$bundle"
}

stage_sanitize() {
	in_bundle bash -c '
	rc=0
	for m in "--model resnet18 --width 0.125" \
	    "--model vit-ti4 --dim 64 --depth 2 --heads 4 --mlp 128"; do
		for p in bf16 fp32; do
			# shellcheck disable=SC2086 # m is a list of options
			compute-sanitizer --error-exitcode 1 --tool memcheck \
			    "$SHARDTRAIN" --backend cuda $m --image-size 32 \
			    --batch 16 --steps 2 --precision $p --ceiling-steps 0 \
			    -q || rc=1
		done
	done
	exit $rc'
}

# shardtrain bf16 and fp32 on synthetic data (compute alone: images over
# busy time), a --profile run in bf16, then PyTorch eager bf16, per case
stage_quick() {
	local c
	for c in "resnet50 256 20" "vit-l16 64 12"; do
		# shellcheck disable=SC2086 # the case's three words
		in_bundle bash -c '
		m=$1 b=$2 n=$3 out=$4 root=$5
		for p in ${QUICK_PRECISIONS:-bf16 fp32}; do
			"$SHARDTRAIN" --backend cuda --model $m --classes 1000 \
			    --batch $b --steps $n --precision $p -q \
			    --json "$out/quick-$m-$p.json" ||
			    echo "quick: $m $p failed"
			python3 "$root/tests/gpu/summary.py" \
			    "$out/quick-$m-$p.json"
		done
		"$SHARDTRAIN" --backend cuda --model $m --classes 1000 \
		    --batch $b --steps 6 --profile -q --ceiling-steps 0
		python3 "$root/bench/torch_gpu_train.py" --model $m \
		    --batch $b --precision bf16 --no-compile --steps 10 \
		    --warmup 5
		' _ $c "$out" "$root"
	done
}

# where the bf16 step's time goes (--profile syncs after every layer), and
# ResNet-50 with the NCHW fallback (SHARDKIT_CUDA_NCHW=1) beside NHWC
stage_profile() {
	in_bundle bash -c '
	for c in "resnet50 256" "vit-l16 64"; do
		set -- $c
		"$SHARDTRAIN" --backend cuda --model $1 --classes 1000 \
		    --batch $2 --steps 6 --profile -q --ceiling-steps 0 \
		    2>&1 | grep -v "^ *\(hint\|evidence\)"
	done
	SHARDKIT_CUDA_NCHW=1 "$SHARDTRAIN" --backend cuda --model resnet50 \
	    --classes 1000 --batch 256 --steps 12 -q --json "$1/nchw.json"
	python3 "$2/tests/gpu/summary.py" "$1/nchw.json"' _ "$out" "$root"
}

stage_bench() {
	ST_PRECISIONS=${BENCH_PRECISIONS:-bf16 fp32} \
	    PT_PRECISIONS=${BENCH_PRECISIONS:-bf16 fp32} \
	    PT_VARIANTS=eager in_bundle sh -c \
	    '"$0"/bench/gpu-train.sh --budget --out "$1" --shardtrain \
	    "$SHARDTRAIN"' "$root" "$bench"
}

stage_compile() {
	ST_PRECISIONS="" PT_PRECISIONS=bf16 PT_VARIANTS=compile \
	    in_bundle sh -c '"$0"/bench/gpu-train.sh --budget --out "$1" \
	    --shardtrain "$SHARDTRAIN" --cases "$2"' "$root" "$bench" \
	    "${COMPILE_CASES:-resnet50:256 vit-l16:64}"
}

stage_verdict() {
	in_bundle bash -c '
	set -e
	d=$(mktemp -d)
	"$SHARDTOOL" synth imagenet "$d/src" --classes 20 --per-class 100 \
	    --val 20 >/dev/null
	"$SHARDTOOL" pack imagenet "$d/src" -o "$d/sh/in-%06d.tar" \
	    --max-count 200 >/dev/null
	w=$(( $(nproc) - 2 ))
	"$SHARDTRAIN" --backend cuda --model resnet50 --classes 1000 \
	    --data "$d/sh/in.json" --batch 256 --steps 40 --workers "$w" \
	    --ceiling-steps 10 --json "$1/verdict-local.json"
	"$SHARDTRAIN" --backend cuda --model resnet50 --classes 1000 \
	    --batch 256 --steps 40 --json "$1/verdict-synthetic.json" -q
	rm -rf "$d"' _ "$out"
}

# kprof_case MODEL BATCH OUT: two runs each of shardtrain and PyTorch
# eager under kprof.so, 10 steps apart, and their difference per step
stage_kprof() {
	local c
	for c in ${KPROF_CASES:-resnet50:256 vit-l16:64}; do
		in_bundle bash -c '
		m=${1%%:*} b=${1#*:} out=$2 root=$3
		[ -f "$KPROF" ] || { echo "kprof: no kprof.so in the bundle"; exit 1; }
		for n in 4 14; do
			CUDA_INJECTION64_PATH=$KPROF KPROF_OUT=$out/k-$m-$n.tsv \
			    "$SHARDTRAIN" --backend cuda --model $m --classes 1000 \
			    --batch $b --steps $n -q --ceiling-steps 0 ||
			    echo "kprof: shardtrain $m $n steps failed"
		done
		python3 "$KPROF_PY" "$out/k-$m-4.tsv" "$out/k-$m-14.tsv" 10 40 |
		    tee "$out/kprof-$m.txt"
		for n in 5 15; do
			CUDA_INJECTION64_PATH=$KPROF KPROF_OUT=$out/kt-$m-$n.tsv \
			    python3 "$root/bench/torch_gpu_train.py" --model $m \
			    --batch $b --precision bf16 --no-compile --warmup 3 \
			    --steps $n ||
			    echo "kprof: PyTorch $m $n steps failed"
		done
		python3 "$KPROF_PY" "$out/kt-$m-5.tsv" "$out/kt-$m-15.tsv" 10 \
		    25 | tee "$out/kprof-torch-$m.txt"
		rm -f "$out"/k-$m-*.tsv "$out"/kt-$m-*.tsv
		' _ "$c" "$out" "$root"
	done
}

stage_report() {
	"$root/bench/gpu-train.sh" --report "$bench" | tee "$out/report.md"
	cp "$bench/records.jsonl" "$out/records.jsonl"
}

rc=0
for s in "$@"; do
	case $s in
	info|tests|sanitize|quick|profile|bench|compile|verdict|kprof|report) ;;
	*) echo "device-check.sh: unknown stage '$s'" >&2; exit 2 ;;
	esac
	say "stage $s"
	"stage_$s" >>"$log" 2>&1
	r=$?
	say "stage $s: exit $r"
	[ $r -eq 0 ] || rc=1
done
exit $rc
