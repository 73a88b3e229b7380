#!/usr/bin/env bash
# train_gpu.sh - shardtrain --backend cuda end to end, on synthetic data,
# for a tiny ResNet (SGD, batch norm) and a tiny ViT (AdamW, clipping), in
# fp32 and in bf16 (AMP-O2, the default), each with --deterministic:
#  - the losses of 6 steps follow the cpu backend's within 1e-3 relative
#    in fp32 (the kernels' sums run in another order), and those of 20
#    steps follow the cpu backend's bf16 emulation within 2e-2 in bf16;
#  - the same run twice gives the same bits (deterministic algorithms);
#  - DDP and FSDP on one rank give single's bits;
#  - a run resumed from a checkpoint at step 3 gives the uninterrupted
#    run's losses for steps 4 to 6, bit for bit;
#  - without --deterministic (cuDNN's fastest algorithms, timed), bf16
#    still follows the cpu emulation within 2e-2, and so does the ViT
#    with its unfused attention (SHARDKIT_CUDA_SDPA=0) beside the fused;
#  - --precision tf32 trains (its losses within 5e-2 of fp32's);
#  - --batch auto finds a batch and trains at it;
#  - the compute-alone ceiling is at least the run's busy rate (5%);
#  - on packed CIFAR-10 shards, where the loader's device mode copies u8
#    batches and normalises them on the GPU, the losses follow the cpu
#    backend's (fed on the host) within 1e-3;
#  - and with more than one GPU, DDP over 2 ranks under mpirun gives the
#    losses of one rank within 1e-4.
# Run by tests/gpu/run.sh. SHARDTRAIN and SHARDTOOL name the programs
# (default: the build tree's). Exit 77 when no GPU is usable, 0 passed, 1
# failed.
set -u

st=${SHARDTRAIN:-${top_builddir:-.}/train/shardtrain}
tool=${SHARDTOOL:-${top_builddir:-.}/shardtool/shardtool}
T=$(mktemp -d "${TMPDIR:-/tmp}/shardkit-gpu.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
fails=0

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# run TAG ARGS...: shardtrain ARGS, its output kept in $T/TAG.{out,err}
run() {
	local tag=$1
	shift
	"$st" --ceiling-steps 0 -q "$@" >"$T/$tag.out" 2>"$T/$tag.err"
}

if ! run probe --model resnet18 --width 0.125 --image-size 32 \
    --backend cuda --steps 1 --batch 4; then
	if grep -qE "no CUDA device|built without CUDA" "$T/probe.err"; then
		echo "SKIP: $(head -n 1 "$T/probe.err")"
		exit 77
	fi
	echo "FAIL: shardtrain --backend cuda: $(cat "$T/probe.err")"
	exit 1
fi

# close A B TOL: every loss of file B is within TOL (relative) of A's
close() {
	python3 - "$1" "$2" "$3" <<'EOF'
import sys
a = [float(l.split()[-1]) for l in open(sys.argv[1]) if l.strip()]
b = [float(l.split()[-1]) for l in open(sys.argv[2]) if l.strip()]
tol = float(sys.argv[3])
if len(a) != len(b) or not a:
    sys.exit("%d losses against %d" % (len(a), len(b)))
for i, (x, y) in enumerate(zip(a, b)):
    if abs(x - y) > tol * abs(x):
        sys.exit("step %d: %.9g against %.9g" % (i + 1, x, y))
print("max relative difference %.3g" % max(abs(x - y) / abs(x)
      for x, y in zip(a, b)))
EOF
}

# follows WHAT A B TOL: pass WHAT when the losses in B follow A's within
# TOL, else fail it
follows() {
	local r
	if r=$(close "$2" "$3" "$4" 2>&1); then
		ok "$1 ($r)"
	else
		fail "$1: $r"
	fi
}

# shellcheck disable=SC2034 # read through the nameref below
resnet=(--model resnet18 --width 0.125 --image-size 32 --lr 0.01)
# shellcheck disable=SC2034
vit=(--model vit-ti4 --dim 64 --depth 2 --heads 4 --mlp 128 --image-size 32)
for mp in resnet:fp32 vit:fp32 resnet:bf16 vit:bf16; do
	m=${mp%%:*} p=${mp#*:}
	declare -n args=$m
	common=("${args[@]}" --batch 16 --steps 6 --seed 7 --precision "$p"
	    --deterministic)
	if [ "$p" = bf16 ]; then
		# a small lr for the ResNet: its tiny layers' gradients swing
		# with any rounding at initialisation (fp32 too), and a large
		# step turns that into diverging losses
		long=("${args[@]}" --batch 16 --steps 20 --seed 7 --precision bf16)
		[ "$m" = resnet ] && long+=(--lr 0.0001)
		if run "$m-long-cpu" "${long[@]}" --backend cpu \
		    --losses "$T/$m-long-cpu.loss" &&
		    run "$m-long-gpu" "${long[@]}" --backend cuda \
		    --deterministic --losses "$T/$m-long-gpu.loss" &&
		    run "$m-long-fast" "${long[@]}" --backend cuda \
		    --losses "$T/$m-long-fast.loss"; then
			follows "$m: cuda bf16 follows the cpu emulation, 20 steps" \
			    "$T/$m-long-cpu.loss" "$T/$m-long-gpu.loss" 2e-2
			follows "$m: cuda bf16, fastest algorithms, follows too" \
			    "$T/$m-long-cpu.loss" "$T/$m-long-fast.loss" 2e-2
			# the ViT's attention is cuDNN's fused one where built
			# in; the unfused one must follow as well
			if [ "$m" = vit ]; then
				if SHARDKIT_CUDA_SDPA=0 run "$m-long-unfused" \
				    "${long[@]}" --backend cuda --deterministic \
				    --losses "$T/$m-long-unfused.loss"; then
					follows "$m: cuda bf16, unfused attention, follows too" \
					    "$T/$m-long-cpu.loss" \
					    "$T/$m-long-unfused.loss" 2e-2
				else
					fail "$m: SHARDKIT_CUDA_SDPA=0: $(cat \
					    "$T/$m-long-unfused.err")"
				fi
				if grep -q "fused attention" "$T/$m-long-gpu.err"; then
					echo "note: $(grep "fused attention" \
					    "$T/$m-long-gpu.err" | head -n 1)"
				fi
			fi
		else
			fail "$m: a bf16 run failed: $(cat "$T/$m-long-cpu.err" \
			    "$T/$m-long-gpu.err" "$T/$m-long-fast.err")"
		fi
		m=$m-bf16
	fi

	if run "$m-cpu" "${common[@]}" --backend cpu --losses "$T/$m-cpu.loss" &&
	    run "$m-gpu" "${common[@]}" --backend cuda \
	    --losses "$T/$m-gpu.loss"; then
		if [ "$p" = fp32 ]; then
			follows "$m: cuda follows cpu" "$T/$m-cpu.loss" \
			    "$T/$m-gpu.loss" 1e-3
		fi
	else
		fail "$m: a run failed: $(cat "$T/$m-cpu.err" "$T/$m-gpu.err")"
		unset -n args
		continue
	fi

	if run "$m-gpu2" "${common[@]}" --backend cuda \
	    --losses "$T/$m-gpu2.loss" &&
	    cmp -s "$T/$m-gpu.loss" "$T/$m-gpu2.loss"; then
		ok "$m: the same bits twice"
	else
		fail "$m: two runs differ: $(diff "$T/$m-gpu.loss" \
		    "$T/$m-gpu2.loss" | head -n 4)"
	fi

	for s in ddp fsdp; do
		if run "$m-$s" "${common[@]}" --backend cuda --strategy "$s" \
		    --losses "$T/$m-$s.loss" &&
		    cmp -s "$T/$m-gpu.loss" "$T/$m-$s.loss"; then
			ok "$m: $s on one rank gives single's bits"
		else
			fail "$m: $s on one rank: $(cat "$T/$m-$s.err"; diff \
			    "$T/$m-gpu.loss" "$T/$m-$s.loss" | head -n 4)"
		fi
	done

	if run "$m-ck" "${common[@]}" --backend cuda --checkpoint-dir "$T/$m-ck" \
	    --checkpoint-every 3 && rm -f "$T/$m-ck/step-00000006.ckpt" &&
	    run "$m-resumed" "${common[@]}" --backend cuda \
	    --checkpoint-dir "$T/$m-ck" --resume --losses "$T/$m-resumed.loss"
	then
		sed -n '4,6p' "$T/$m-gpu.loss" >"$T/$m-tail.loss"
		if cmp -s "$T/$m-tail.loss" "$T/$m-resumed.loss"; then
			ok "$m: resumed at step 3, the same bits"
		else
			fail "$m: resumed losses differ: $(diff \
			    "$T/$m-tail.loss" "$T/$m-resumed.loss" | head -n 4)"
		fi
	else
		fail "$m: checkpoint or resume failed: $(cat "$T/$m-ck.err" "$T/$m-resumed.err" 2>/dev/null)"
	fi

	if [ "$p" = fp32 ]; then
		if run "$m-tf32" "${common[@]}" --backend cuda --precision tf32 \
		    --losses "$T/$m-tf32.loss"; then
			follows "$m: tf32 trains near fp32" "$T/$m-gpu.loss" \
			    "$T/$m-tf32.loss" 5e-2
		else
			fail "$m: --precision tf32: $(cat "$T/$m-tf32.err")"
		fi
	fi

	r=
	ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
	if [ "${ngpu:-0}" -ge 2 ] && command -v mpirun >/dev/null 2>&1; then
		if mpirun --allow-run-as-root --oversubscribe -np 2 "$st" \
		    "${common[@]}" --backend cuda --strategy ddp \
		    --ceiling-steps 0 -q --losses "$T/$m-ddp2.loss" \
		    >"$T/$m-ddp2.out" 2>&1 &&
		    r=$(close "$T/$m-gpu.loss" "$T/$m-ddp2.loss" 1e-4 2>&1); then
			ok "$m: DDP over 2 GPUs follows one ($r)"
		else
			fail "$m: DDP over 2 GPUs: $r $(tail -n 5 "$T/$m-ddp2.out")"
		fi
	fi
	unset -n args
done

# --batch auto: the tiny model fits at the largest batch tried
if "$st" "${resnet[@]}" --backend cuda --batch auto --steps 2 \
    --ceiling-steps 0 --json "$T/auto.json" >"$T/auto.out" 2>"$T/auto.err" &&
    grep -q "batch auto: 4096 per rank fits" "$T/auto.err"; then
	ok "--batch auto: $(grep 'batch auto' "$T/auto.err")"
else
	fail "--batch auto: $(cat "$T/auto.err")"
fi

# the compute-alone ceiling measures the GPU: on synthetic data behind a
# throttle that never binds (so the ceiling runs), it is at least the
# run's own busy rate (images over step time less data wait), within 5%
if "$st" "${resnet[@]}" --backend cuda --batch 64 --steps 30 \
    --throttle 1000000 --ceiling-steps 20 -q --json "$T/ceil.json" \
    >"$T/ceil.out" 2>"$T/ceil.err" && r=$(python3 - "$T/ceil.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["result"]
s = r["stage_seconds"]
busy = r["images"] / (s["step"] - s["data_wait"])
c = r["compute_images_per_second"]
print("compute alone %.0f images/s, the run's busy rate %.0f" % (c, busy))
sys.exit(0 if c >= 0.95 * busy else 1)
EOF
); then
	ok "the compute-alone ceiling: $r"
else
	fail "the compute-alone ceiling: $r $(cat "$T/ceil.err")"
fi

# real data through the loader's device mode, against the host path
if "$tool" synth cifar10 "$T/src" --train 256 --test 10 --seed 3 \
    >"$T/synth.out" 2>&1 && mkdir -p "$T/shards" &&
    "$tool" pack cifar10 "$T/src" -o "$T/shards/c-%06d.tar" \
    --max-count 100 >"$T/pack.out" 2>&1; then
	data=("${resnet[@]}" --data "$T/shards/c.json" --batch 32 --steps 6
	    --workers 2 --seed 5 --precision fp32)
	if run data-cpu "${data[@]}" --backend cpu --losses "$T/data-cpu.loss" &&
	    run data-gpu "${data[@]}" --backend cuda --deterministic \
	    --losses "$T/data-gpu.loss"; then
		if grep -q "device mode failed" "$T/data-gpu.err"; then
			fail "the loader's device mode: $(cat "$T/data-gpu.err")"
		else
			follows "shards through the loader's device mode follow cpu" \
			    "$T/data-cpu.loss" "$T/data-gpu.loss" 1e-3
		fi
	else
		fail "training on shards: $(cat "$T/data-cpu.err" \
		    "$T/data-gpu.err")"
	fi
else
	fail "packing CIFAR-10: $(cat "$T/synth.out" "$T/pack.out" 2>/dev/null)"
fi

[ "$fails" -eq 0 ] || { echo "train_gpu: $fails failed"; exit 1; }
echo "train_gpu: passed"
exit 0
