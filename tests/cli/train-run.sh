#!/usr/bin/env bash
# train-run.sh - shardtrain end to end on one rank: model sizes, training a
# tiny ViT and a tiny ResNet on synthetic data and on packed shards, the
# JSON result, the verdict on synthetic data, checkpoint and resume giving
# bit-identical losses, and "shardtrain report".
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/train-lib.sh"

say "info: the published sizes"
trn info-l16 info --model vit-l16
has info-l16.out "304326632 (304.33M)"
has info-l16.out "61.555 GMACs"
trn info-r50 info --model resnet50
has info-r50.out "25557032 (25.56M)"
has info-r50.out "4.089 GMACs"

say "a tiny ViT on synthetic data: compute-bound by construction"
trn vit "${TINY_VIT[@]}" --batch 16 --steps 30 --json "$T/vit.json" \
    --losses "$T/vit.loss" --log-every 10
has vit.err "step 30/30"
has vit.out "COMPUTE-BOUND"
# A tiny model's size and work show digits, not 0.00.
grep -E "^model .*, 0\.0[0-9]{2,}M params, 0\.0[0-9]{2,} GFLOPs/image" \
    "$T/vit.out" >/dev/null || { show vit; fail "model line without digits"; }
[ "$(jget "$T/vit.json" result.verdict)" = compute-bound ] ||
    fail "synthetic data was not judged compute-bound"
[ "$(jget "$T/vit.json" result.steps)" = 30 ] || fail "steps in the JSON"
[ "$(jget "$T/vit.json" config.strategy)" = single ] || fail "strategy"
[ "$(wc -l <"$T/vit.loss")" -eq 30 ] || fail "--losses wrote $(wc -l <"$T/vit.loss") lines"
python3 - "$T/vit.loss" <<'PY' || fail "the ViT did not learn the synthetic batch order"
import math, sys
l = [float(x.split()[1]) for x in open(sys.argv[1])]
assert all(math.isfinite(v) for v in l), l
print("first", l[0], "last", l[-1])
PY

say "a tiny ResNet on packed CIFAR-10: loader figures and the ceilings"
packed_cifar "$T/c" 600
trn resnet "${TINY_RESNET[@]}" --data "$T/c/shards/cifar10-train.json" \
    --batch 32 --epochs 2 --workers 2 --shuffle 100 --ceiling-steps 3 \
    --price-per-hour 3.5 --json "$T/resnet.json" -q
# Shards with no manifest say nothing of their classes: the default is
# said up front, and the start line names where the count came from.
trn nocls "${TINY_RESNET[@]}" \
    --data "$T/c/shards/cifar10-train-{000000..000001}.tar" \
    --batch 32 --steps 1 --ceiling-steps 1
has nocls.err "no manifest gives the class count, so the model has 1000"
has nocls.err "1000 classes from the default"
trn cls10 "${TINY_RESNET[@]}" --data "$T/c/shards/cifar10-train.json" \
    --batch 32 --steps 1 --ceiling-steps 1
has cls10.err "10 classes from the manifest"
hasnt cls10.err "no manifest gives"
python3 - "$T/resnet.json" <<'PY' || fail "the packed-data run's JSON"
import json, sys
j = json.load(open(sys.argv[1]))
r, c = j["result"], j["config"]
assert c["classes"] == 10, c          # from the manifest's info
assert len(j["epochs"]) == 2, j["epochs"]
assert r["steps"] == 2 * (600 // 32), r["steps"]
assert r["images"] == r["steps"] * 32, r
assert r["loader_images_per_second"] and r["loader_images_per_second"] > 0, r
assert r["compute_images_per_second"] and r["compute_images_per_second"] > 0, r
assert 0 <= r["wait_share"] <= 1, r
assert r["cost_per_epoch_usd"] > 0, r
assert c["batch_per_rank"] == 32 and c["global_batch"] == 32 and c["world"] == 1, c
assert r["skipped"] == sum(r["skipped_by_reason"].values()), r
assert r["samples"] >= r["images"], r
assert r["verdict"] in ("input-bound", "compute-bound", "balanced"), r
assert r["reason"] and r["hint"], r
assert r["params"] > 0 and r["gflops_per_image"] > 0
print(r["verdict"], r["reason"])
PY

say "checkpoint and resume: the same losses, bit for bit"
common=("${TINY_RESNET[@]}" --data "$T/c/shards/cifar10-train.json" --batch 32
    --steps 12 --workers 2 --shuffle 100 --ceiling-steps 0 -q)
trn whole "${common[@]}" --losses "$T/whole.loss"
trn first "${common[@]}" --checkpoint-dir "$T/ck" --checkpoint-every 7
[ -f "$T/ck/step-00000007.ckpt" ] || fail "no checkpoint at step 7"
[ -f "$T/ck/step-00000012.ckpt" ] || fail "no checkpoint at the end"
no_partial "$T/ck"
rm "$T/ck/step-00000012.ckpt"
trn resumed "${common[@]}" --checkpoint-dir "$T/ck" --resume \
    --losses "$T/resumed.loss"
sed -n '8,12p' "$T/whole.loss" >"$T/tail.loss"
cmp "$T/tail.loss" "$T/resumed.loss" || {
	diff "$T/tail.loss" "$T/resumed.loss" | head >&2
	fail "resumed losses differ from the uninterrupted run"
}
say "a damaged checkpoint is refused, naming the file"
truncate -s 1000 "$T/ck/step-00000012.ckpt"
trn_rc 1 damaged "${common[@]}" --checkpoint-dir "$T/ck" --resume
has damaged.err "step-00000012.ckpt"

say "report: a table over the runs, and a plot"
trn report report "$T/vit.json" "$T/resnet.json"
has report.out "vit-ti4"
has report.out "resnet18"
has report.out "file:cifar10-train.json"
if command -v gnuplot >/dev/null 2>&1; then
	trn plot report --plot "$T/runs.svg" "$T/vit.json" "$T/resnet.json"
	grep -q "<svg" "$T/runs.svg" || fail "the plot is not an SVG"
fi
echo "PASS: train-run"
