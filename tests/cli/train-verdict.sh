#!/usr/bin/env bash
# train-verdict.sh - the verdict is right: a loader throttled to a known
# rate makes training input-bound at that rate (within 5%), and the same
# model on synthetic data is compute-bound.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/train-lib.sh"

packed_cifar "$T/c" 1000
rate=100
say "a loader throttled to $rate images/s"
# One compute thread: the tiny ViT then runs at over 15 times the rate on
# one core, and a busy machine cannot stall it at a team barrier (on all
# cores, other processes beside it took the run below the rate). 20
# ceiling steps give the loader alone 3 s to be measured over.
trn slow "${TINY_VIT[@]}" --data "$T/c/shards/cifar10-train.json" \
    --batch 16 --steps 40 --throttle $rate --workers 2 --ceiling-steps 20 \
    --threads 1 --json "$T/slow.json" -q
has slow.out "INPUT-BOUND"
python3 - "$T/slow.json" $rate <<'PY' || fail "the throttled run"
import json, sys
r = json.load(open(sys.argv[1]))["result"]
rate = float(sys.argv[2])
print("images/s", r["images_per_second"], "wait", r["wait_share"],
      "loader alone", r["loader_images_per_second"], "compute alone",
      r["compute_images_per_second"])
assert r["verdict"] == "input-bound", r["verdict"]
assert abs(r["images_per_second"] - rate) <= 0.05 * rate, r["images_per_second"]
assert abs(r["loader_images_per_second"] - rate) <= 0.05 * rate, r["loader_images_per_second"]
assert r["compute_images_per_second"] > 2 * rate, r["compute_images_per_second"]
assert "throttle" in r["hint"], r["hint"]
PY

say "the same model on synthetic data"
trn fast "${TINY_VIT[@]}" --batch 16 --steps 40 --json "$T/fast.json" -q
has fast.out "COMPUTE-BOUND"
[ "$(jget "$T/fast.json" result.verdict)" = compute-bound ] ||
    fail "synthetic data was not compute-bound"
echo "PASS: train-verdict"
