#!/usr/bin/env bash
# train-determinism.sh - the CPU backend's promise (shardtrain(1),
# DETERMINISM): on one CPU, any thread count gives the same bits. Checked
# with the kernels OpenBLAS picks for this CPU, then again with every other
# kernel set the CPU can run, forced with OPENBLAS_CORETYPE: which kernel
# computes a GEMM is what made the bits depend on the thread count on some
# CPUs and not on others, so each set must be tried on every machine.
# Each set runs the kernel tests (tests/train/train) and shardtrain end to
# end at 1, 2 and 3 threads: the losses and the final parameters must be
# byte for byte the same.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/train-lib.sh"

unit="$top_builddir/tests/train/train"
[ -x "$unit" ] || fail "$unit is not built"

# OpenBLAS's kernel sets for x86-64 that this CPU can run, by the flags
# each needs; an AVX-512 set only where the CPU has AVX-512.
cores=()
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
cpu_has() {
	local f
	for f in "$@"; do
		case $flags in *" $f "*) ;; *) return 1 ;; esac
	done
}
if [ "$(uname -m)" = x86_64 ]; then
	cpu_has pni && cores+=(Prescott)	# pni: SSE3
	cpu_has sse4_2 && cores+=(Nehalem)
	cpu_has avx && cores+=(Sandybridge)
	cpu_has avx2 fma && cores+=(Haswell Zen)
	cpu_has avx512f avx512cd avx512bw avx512dq avx512vl && cores+=(SkylakeX)
	cpu_has avx512f avx512bw avx512vl avx512_bf16 && cores+=(Cooperlake)
fi

packed_cifar "$T/c" 200

# kernel_tests TAG CORE: the determinism tests of tests/train/train with
# OPENBLAS_CORETYPE=CORE ("" = OpenBLAS's own choice); sets GOT to the core
# OpenBLAS used.
kernel_tests() {
	local tag=$1 core=$2
	run_rc 0 "$tag" env ${core:+OPENBLAS_CORETYPE=$core} "$unit" determin
	has "$tag.out" "ok 1 cnn_deterministic"
	run_rc 0 "$tag-vit" env ${core:+OPENBLAS_CORETYPE=$core} "$unit" \
	    bit_identical_across_runs_and_threads
	has "$tag-vit.out" "ok 1 bit_identical_across_runs_and_threads"
	GOT=$(sed -n 's/^# OpenBLAS core: \([^ ]*\).*/\1/p' "$T/$tag.out" | head -n 1)
	[ -n "$GOT" ] || { show "$tag"; fail "$tag: the test did not name OpenBLAS's core"; }
}

# end_to_end TAG CORE: a tiny ViT (AdamW, clipping) and a tiny ResNet (SGD,
# batch norm) on packed CIFAR-10 at 1, 2 and 3 threads.
end_to_end() {
	local tag=$1 core=$2 m t
	for m in vit resnet; do
		local -n model=TINY_${m^^}
		for t in 1 2 3; do
			run_rc 0 "$tag-$m-$t" env ${core:+OPENBLAS_CORETYPE=$core} \
			    "$SHARDTRAIN" "${model[@]}" \
			    --data "$T/c/shards/cifar10-train.json" --batch 32 \
			    --steps 4 --workers 2 --shuffle 50 --ceiling-steps 0 \
			    --threads "$t" -q --losses "$T/$tag-$m-$t.loss" \
			    --dump-params "$T/$tag-$m-$t.params"
			no_sanitizer_report "$tag-$m-$t"
		done
		[ "$(wc -l <"$T/$tag-$m-1.loss")" -eq 4 ] ||
		    fail "$tag: --losses wrote no 4 lines"
		for t in 2 3; do
			cmp -s "$T/$tag-$m-1.loss" "$T/$tag-$m-$t.loss" || {
				diff "$T/$tag-$m-1.loss" "$T/$tag-$m-$t.loss" | head >&2
				fail "$tag: $m losses differ between 1 and $t threads"
			}
			cmp "$T/$tag-$m-1.params" "$T/$tag-$m-$t.params" ||
			    fail "$tag: $m parameters differ between 1 and $t threads"
		done
	done
}

say "OpenBLAS's own choice of kernels"
kernel_tests native ""
native=$GOT
end_to_end native ""
echo "OpenBLAS picked $native; $(grep -m1 '^# OpenBLAS core' "$T/native.out")"

# A set this OpenBLAS was built without (an AVX-512 one in a NO_AVX512
# build, Cooperlake before 0.3.11) falls back to another, quietly: that
# set is passed over, saying so. Only a DYNAMIC_ARCH build (Debian's) can
# switch at all; one of those that switched to none proves nothing.
forced=()
for core in "${cores[@]}"; do
	say "OPENBLAS_CORETYPE=$core"
	kernel_tests "$core" "$core"
	if [ "${GOT,,}" != "${core,,}" ]; then
		echo "OPENBLAS_CORETYPE=$core ran OpenBLAS's $GOT kernels: this OpenBLAS has no $core set"
		continue
	fi
	end_to_end "$core" "$core"
	forced+=("$core")
done
if [ ${#forced[@]} -eq 0 ] && [ ${#cores[@]} -gt 0 ] &&
    grep -q DYNAMIC_ARCH "$T/native.out"; then
	fail "a DYNAMIC_ARCH OpenBLAS took none of ${cores[*]} from OPENBLAS_CORETYPE"
fi
echo "bit-identical at 1, 2 and 3 threads with $native and the forced sets: ${forced[*]:-none}"
