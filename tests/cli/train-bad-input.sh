#!/usr/bin/env bash
# train-bad-input.sh - shardtrain fails clearly: bad flags and unknown
# models are usage errors with a hint, a diverging loss stops the run
# naming the step, missing or mislabelled data names the file or sample,
# damaged shards are skipped and counted, unwritable outputs are named.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/train-lib.sh"

say "usage errors exit 2 with the usage line"
bad() {
	local tag=$1 want=$2
	shift 2
	trn_rc 2 "$tag" "$@"
	is_st_usage_error "$tag"
	has "$tag.err" "$want"
}
bad model "unknown model 'resnet51'" --model resnet51
bad model2 "vit-l16" --model vit-x16
bad batch0 "--batch 0" --batch 0
bad lr "--lr abc" --lr abc
bad strat "not one of single, ddp or fsdp" --strategy zero3
bad crop "--crop rrc" --crop rrc
bad cuda "not one of cpu or cuda" --backend gpu
bad prec "--precision tf32 is a GPU precision" --precision tf32
bad auto "--batch auto finds the largest batch that fits a GPU" --batch auto
bad auto2 "--batch x: " --batch x
bad prec2 "not one of fp32, tf32 or bf16" --precision fp64
bad width "--width is for ResNets" --model vit-ti16 --width 2
bad dim "shape a ViT" --model resnet18 --dim 64
bad resume "--resume needs --checkpoint-dir" --resume
bad opt "--no-such-option: unknown option" --no-such-option
bad noval "--lr needs a value" --lr
bad extra "stray: not a command (info, report, study)" stray
bad extra2 "stray: unexpected argument" --steps 1 stray
bad both "give one" --batch 4 --global-batch 8
bad prefetch "--prefetch 12X: not a size" --prefetch 12X
bad seed "--seed -1: not a whole number" --seed -1
bad epochs "--epochs 1000001" --epochs 1000001
bad patch "not a multiple" --model vit-ti16 --image-size 100 --steps 1
bad size0 "--image-size 0" --image-size 0
trn help --help
has help.out "usage: shardtrain"

say "--backend cuda without a GPU (or without CUDA) fails naming why"
if [ -e /dev/nvidia0 ]; then
	echo "SKIP: a GPU is here (tests/gpu/run.sh covers --backend cuda)"
else
	trn_rc 1 nogpu "${TINY_VIT[@]}" --backend cuda --steps 1 \
	    --ceiling-steps 0 -q
	has nogpu.err "shardtrain: --backend cuda: "
	grep -qE "no CUDA device|built without CUDA" "$T/nogpu.err" ||
	    fail "--backend cuda: the reason is missing: $(cat "$T/nogpu.err")"
fi

say "a loss that diverges stops the run at that step, with a hint"
trn_rc 1 nan "${TINY_VIT[@]}" --batch 8 --steps 30 --optimizer sgd \
    --lr 1000 --ceiling-steps 0 -q
has nan.err "the loss is"
has nan.err "lower --lr"

say "missing data, and labels outside --classes"
trn_rc 1 missing "${TINY_VIT[@]}" --data "$T/nope.json" --steps 1
has missing.err "$T/nope.json"
packed_cifar "$T/c" 300
trn_rc 1 labels "${TINY_VIT[@]}" --data "$T/c/shards/cifar10-train.json" \
    --classes 3 --batch 16 --steps 5 --workers 2
has labels.err "outside [0, 3)"
has labels.err "--classes"

say "a damaged shard is skipped and counted, not fatal"
cp -r "$T/c/shards" "$T/d"
s1=$(ls "$T/d"/*-000001.tar)
truncate -s $(( $(stat -c %s "$s1") / 2 )) "$s1"
trn damaged "${TINY_VIT[@]}" --data "$T/d/cifar10-train.json" --batch 16 \
    --epochs 1 --workers 2 --ceiling-steps 0 --json "$T/damaged.json" -q
sk=$(jget "$T/damaged.json" result.skipped)
[ "$sk" -gt 0 ] || fail "the damaged shard's samples were not counted ($sk)"
has damaged.out "skipped"

say "unwritable outputs are named"
trn_rc 1 json "${TINY_VIT[@]}" --steps 2 --ceiling-steps 0 -q \
    --json "$T/no/such/dir/run.json"
has json.err "$T/no/such/dir/run.json"
trn_rc 1 losses "${TINY_VIT[@]}" --steps 2 --ceiling-steps 0 -q \
    --losses "$T/no/such/dir/l.txt"
has losses.err "$T/no/such/dir/l.txt"
echo "PASS: train-bad-input"
