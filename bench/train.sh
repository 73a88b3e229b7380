#!/usr/bin/env bash
# bench/train.sh - CPU training speed: shardtrain against PyTorch on the
# same shapes, batch, loss and optimizer, synthetic data, in one run.
#
#   bench/train.sh [--runs N] [--steps N] [--batch N]
#
# Models: ViT-Ti/4 at 32x32 (timm's ViT-Ti layout, patch 4, 10 classes;
# AdamW) and ResNet-18 at 32x32 (10 classes; SGD, Nesterov momentum).
# Every round runs every configuration once, interleaved:
#   shardtrain  --threads 1 and --threads NCPU
#   PyTorch     torch.set_num_threads 1 and NCPU (OMP_NUM_THREADS too),
#               each with the libblas.so.3 Debian selects (OpenBLAS's
#               pthread build) and with OpenBLAS's OpenMP build
#               (LD_LIBRARY_PATH), which shares PyTorch's OpenMP threads
# and each tool is judged by its fastest configuration (median over the
# rounds). shardtrain's figure is its compute-alone rate (making the
# synthetic batches is timed as data wait and left out); PyTorch trains on
# one fixed batch. Both skip warm-up steps. Also printed: the share of
# shardtrain's step time inside BLAS (GEMM thread-time / threads).
# Needs a build in build/ (or SHARDTRAIN=...) and Debian's python3-torch
# and python3-torchvision.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=5 steps=10 batch=64
while [ $# -gt 0 ]; do
	case $1 in
	--runs) runs=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--batch) batch=$2; shift 2 ;;
	*) echo "usage: bench/train.sh [--runs N] [--steps N] [--batch N]" >&2; exit 2 ;;
	esac
done
st=${SHARDTRAIN:-build/train/shardtrain}
py=/usr/bin/python3
[ -x "$st" ] || { echo "bench/train.sh: no $st: build first" >&2; exit 1; }
$py -c 'import torch, torchvision' 2>/dev/null ||
	{ echo "bench/train.sh: $py lacks torch: apt-get install python3-torch python3-torchvision" >&2; exit 1; }
# Debian's torch runs its Linear layers on libblas.so.3: the peer is only
# honest with OpenBLAS behind it, not the reference BLAS.
ma=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
blas=$(readlink -f "/usr/lib/$ma/libblas.so.3" 2>/dev/null || true)
case $blas in
*openblas*) ;;
*) echo "bench/train.sh: libblas.so.3 is $blas, not OpenBLAS: apt-get install libopenblas0-pthread" >&2; exit 1 ;;
esac
omp_blas=/usr/lib/$ma/openblas-openmp
[ -f "$omp_blas/libblas.so.3" ] || omp_blas=
ncpu=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

shape() {
	case $1 in
	vit-ti4) echo "--model vit-ti4 --image-size 32" ;;
	resnet18) echo "--model resnet18 --image-size 32" ;;
	esac
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# one_st MODEL THREADS: shardtrain's compute-alone images/s and GEMM share
one_st() {
	# shellcheck disable=SC2046
	"$st" $(shape "$1") --batch "$batch" --steps $((steps + 2)) \
	    --threads "$2" --ceiling-steps 0 -q --json "$tmp/st.json" >/dev/null
	$py -c '
import json, sys
r = json.load(open(sys.argv[1]))["result"]
print(r["compute_images_per_second"], r["gemm_share"])' "$tmp/st.json"
}

# one_pt MODEL THREADS BLAS: PyTorch's images/s (BLAS: pthread|openmp)
one_pt() {
	local env=(OMP_NUM_THREADS="$2")
	[ "$3" = openmp ] && env+=(LD_LIBRARY_PATH="$omp_blas")
	env "${env[@]}" $py bench/torch_train.py --model "$1" --image-size 32 \
	    --batch "$batch" --steps "$steps" --threads "$2" |
	    $py -c 'import json, sys; print(json.load(sys.stdin)["images_per_s"])'
}

configs_pt="pthread${omp_blas:+ openmp}"
for r in $(seq "$runs"); do
	for m in vit-ti4 resnet18; do
		for th in 1 "$ncpu"; do
			one_st "$m" "$th" >>"$tmp/st.$m.$th"
			for b in $configs_pt; do
				one_pt "$m" "$th" "$b" >>"$tmp/pt.$m.$th.$b"
			done
		done
	done
	echo "round $r of $runs done" >&2
done

echo "machine: $ncpu cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "peer: PyTorch $($py -c 'import torch; print(torch.__version__)'), libblas.so.3 = $blas${omp_blas:+, or $omp_blas}"
echo "shardtrain: $("$st" --version); batch $batch, $steps timed steps, median of $runs rounds"
echo
echo "all configurations (images/s, median [min-max]):"
for m in vit-ti4 resnet18; do
	for th in 1 "$ncpu"; do
		f=$tmp/st.$m.$th
		echo "  $m shardtrain threads $th: $(cut -d' ' -f1 "$f" | median) [$(cut -d' ' -f1 "$f" | sort -g | head -1)-$(cut -d' ' -f1 "$f" | sort -g | tail -1)]"
		for b in $configs_pt; do
			f=$tmp/pt.$m.$th.$b
			echo "  $m pytorch threads $th blas $b: $(median <"$f") [$(sort -g "$f" | head -1)-$(sort -g "$f" | tail -1)]"
		done
	done
done
echo
printf '| model | shardtrain img/s (config) | PyTorch img/s (config) | ratio of medians | median of per-round ratios [min-max] | BLAS share of shardtrain step |\n'
printf '|---|---|---|---|---|---|\n'
for m in vit-ti4 resnet18; do
	best_st=0 st_cfg= best_pt=0 pt_cfg=
	for th in 1 "$ncpu"; do
		v=$(cut -d' ' -f1 "$tmp/st.$m.$th" | median)
		if awk -v a="$v" -v b="$best_st" 'BEGIN { exit !(a > b) }'; then
			best_st=$v st_cfg=$th
		fi
		for b in $configs_pt; do
			v=$(median <"$tmp/pt.$m.$th.$b")
			if awk -v a="$v" -v b="$best_pt" 'BEGIN { exit !(a > b) }'; then
				best_pt=$v pt_cfg="$th.$b"
			fi
		done
	done
	g=$(cut -d' ' -f2 "$tmp/st.$m.$st_cfg" | median)
	paste -d' ' <(cut -d' ' -f1 "$tmp/st.$m.$st_cfg") "$tmp/pt.$m.$pt_cfg" |
	    awk '{ print $1 / $2 }' >"$tmp/ratio.$m"
	printf '| %s 32x32 | %.1f (%s threads) | %.1f (%s threads, %s BLAS) | %.2fx | %.2fx [%.2f-%.2f] | %.0f%% |\n' \
	    "$m" "$best_st" "$st_cfg" "$best_pt" "${pt_cfg%%.*}" "${pt_cfg#*.}" \
	    "$(awk -v a="$best_st" -v b="$best_pt" 'BEGIN { print a / b }')" \
	    "$(median <"$tmp/ratio.$m")" "$(sort -g "$tmp/ratio.$m" | head -1)" \
	    "$(sort -g "$tmp/ratio.$m" | tail -1)" \
	    "$(awk -v g="$g" 'BEGIN { print g * 100 }')"
done
