# shellcheck shell=bash
# tests/cli/train-lib.sh - what the shardtrain tests share, on top of
# lib.sh: running shardtrain with its output kept, tiny models, and packed
# synthetic CIFAR-10.
: "${SHARDTRAIN:?SHARDTRAIN is not set; run the test through make check}"

# A ViT small enough to train in a test: ViT-Ti's layout at width 32.
TINY_VIT=(--model vit-ti4 --dim 32 --depth 2 --heads 2 --mlp 64 --image-size 16)
# ResNet-18 at an eighth of its width on 32x32 inputs.
TINY_RESNET=(--model resnet18 --width 0.125 --image-size 32)

# trn TAG ARGS...: shardtrain ARGS must succeed; trn_rc WANT TAG ARGS...:
# it must exit WANT. A sanitizer report fails either.
trn() {
	local tag=$1
	shift
	trn_rc 0 "$tag" "$@"
}

trn_rc() {
	local want=$1 tag=$2
	shift 2
	run_rc "$want" "$tag" "$SHARDTRAIN" "$@"
	no_sanitizer_report "$tag"
}

# is_st_usage_error TAG: the message names shardtrain, then the usage.
is_st_usage_error() {
	has "$1.err" "shardtrain: "
	has "$1.err" "usage: shardtrain"
}

# packed_cifar DIR N: N synthetic CIFAR-10 training images packed into
# DIR/shards (cifar10-train.json), in shards of 100.
packed_cifar() {
	synth_cifar "$1/src" --train "$2" --test 10 --seed 3
	mkdir -p "$1/shards"
	st pack-cifar pack cifar10 "$1/src" -o "$1/shards/cifar10-train-%06d.tar" \
	    --max-count 100
	[ -f "$1/shards/cifar10-train.json" ] || fail "pack wrote no manifest"
}

# close_to A B TOL: |A - B| <= TOL * |B|
close_to() {
	python3 -c 'import sys; a, b, t = map(float, sys.argv[1:]); sys.exit(0 if abs(a - b) <= t * abs(b) else 1)' "$1" "$2" "$3"
}
