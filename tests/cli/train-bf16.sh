#!/usr/bin/env bash
# train-bf16.sh - shardtrain --backend cpu --precision bf16, the emulation
# of the GPU's bf16 AMP-O2: a tiny ResNet and a tiny ViT train with losses
# within 2% of the fp32 run's at every step, the same bits on a rerun (at
# another thread count), "bf16" in the JSON; tf32 stays a GPU precision,
# and the cpu backend's default is fp32.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/train-lib.sh"

# losses_close A B TOL: both files have the same steps, each loss within
# TOL of A's, relative
losses_close() {
	python3 - "$1" "$2" "$3" <<'PY'
import math, sys
def read(p):
    return [(int(s), float(v)) for s, v in (l.split() for l in open(p))]
a, b, tol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
assert len(a) == len(b) == 20, (len(a), len(b))
worst = 0
for (sa, la), (sb, lb) in zip(a, b):
    assert sa == sb, (sa, sb)
    assert math.isfinite(la) and math.isfinite(lb), (sa, la, lb)
    d = abs(lb - la) / abs(la)
    assert d <= tol, "step %d: fp32 %.7f, bf16 %.7f (%.3g)" % (sa, la, lb, d)
    worst = max(worst, d)
print("worst step %.3g relative" % worst)
PY
}

# The ResNet at a tenth of its default learning rate: a convolution
# followed by batch norm has a weight gradient that is a small sum of large
# terms, which bf16's 2^-9 moves by tens of percent (test_bf16.c), so at
# the default rate the two runs' weights part and their losses differ by
# 10% within 20 steps. The emulation is what is under test, not SGD.
for m in resnet vit; do
	if [ "$m" = resnet ]; then
		args=("${TINY_RESNET[@]}" --lr 0.0001)
	else
		args=("${TINY_VIT[@]}")
	fi
	args+=(--batch 16 --steps 20 --ceiling-steps 0 -q)

	say "$m: fp32 and bf16, 20 steps each"
	trn "$m-fp32" --backend cpu "${args[@]}" --json "$T/$m-fp32.json" \
	    --losses "$T/$m-fp32.loss"
	[ "$(jget "$T/$m-fp32.json" config.precision)" = fp32 ] ||
	    fail "$m: --backend cpu without --precision is not fp32"
	trn "$m-bf16" --backend cpu --precision bf16 "${args[@]}" \
	    --json "$T/$m-bf16.json" --losses "$T/$m-bf16.loss"
	[ "$(jget "$T/$m-bf16.json" config.precision)" = bf16 ] ||
	    fail "$m: the JSON does not say bf16"
	losses_close "$T/$m-fp32.loss" "$T/$m-bf16.loss" 0.02 ||
	    fail "$m: bf16 losses stray from fp32's"
	cmp -s "$T/$m-fp32.loss" "$T/$m-bf16.loss" &&
	    fail "$m: bf16 losses are fp32's bit for bit: nothing was rounded"

	say "$m: a rerun on one thread, --deterministic, is the same bits"
	trn "$m-again" --backend cpu --precision bf16 "${args[@]}" \
	    --threads 1 --deterministic --losses "$T/$m-again.loss"
	cmp "$T/$m-bf16.loss" "$T/$m-again.loss" || {
		diff "$T/$m-bf16.loss" "$T/$m-again.loss" | head >&2
		fail "$m: a bf16 rerun gave other losses"
	}
done

say "a bf16 checkpoint resumes in bf16 only"
ck=("${TINY_VIT[@]}" --backend cpu --batch 16 --steps 4 --ceiling-steps 0 -q
    --checkpoint-dir "$T/ck" --checkpoint-every 2)
trn ck --precision bf16 "${ck[@]}"
trn_rc 1 ckfp32 "${ck[@]}" --steps 6 --resume
has ckfp32.err "written with --precision bf16, which this run does not have"
trn ckbf16 --precision bf16 "${ck[@]}" --steps 6 --resume

say "tf32 is a GPU precision"
trn_rc 2 tf32 --backend cpu --precision tf32 "${TINY_VIT[@]}" --steps 1
is_st_usage_error tf32
has tf32.err "--precision tf32 is a GPU precision"
