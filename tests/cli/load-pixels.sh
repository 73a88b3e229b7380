#!/usr/bin/env bash
# load-pixels.sh - shardload delivers the pixels torchvision would:
# Resize + CenterCrop and RandomResizedCrop against PIL done by hand
# (tests/py/check_center.py, which states the references), with and
# without the JPEG DCT scaling; grayscale, CMYK and PNG-in-.jpg inputs;
# RandomResizedCrop's boxes and flips over hundreds of samples, and what
# --scale and --ratio do to them; the float dtypes and layouts; the .png
# grid; CIFAR-10's 32x32 images upscaled to 224.
#
# Tolerances (absolute differences of 8-bit values, per image), measured
# on these synthetic images when the test was written:
#   no DCT scaling (S=224 R=256 centre crops of 500x281..500x500 JPEGs,
#   S=224 random crops, CIFAR-10 upscaled): mean 0.000..0.25, max 0..1
#   (0 and 0 for centre crops); bound mean 0.5, max 2.
#   DCT scaling (S=64 R=73 centre crops decoded at 1/2 or 1/4; S=64
#   random crops): against torchvision on the full image mean 1.6..6.0,
#   max 14..51 (libjpeg's scaled inverse DCT is another low-pass filter
#   than Pillow's triangle); bound mean 8, max 80. Against the same image decoded at that scale by
#   PIL's draft() and resized: mean 0.000..0.26, max 1; bound mean 0.5,
#   max 2.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_python numpy PIL

synth_imagenet "$T/i" --classes 4 --per-class 12 --val 4 --seed 51
mkdir "$T/s"
st pack pack imagenet "$T/i" -o "$T/s/in-%06d.tar" --max-count 10
M="$T/s/in.json"
SHARDS=$(shards_of "$T/s")
# pyout TAG SCRIPT ARGS...: py, with the output kept in $T/TAG.py too.
pyout() {
	local tag=$1
	shift
	python3 "$PY/$1" "${@:2}" >"$T/$tag.py" 2>&1 || {
		cat "$T/$tag.py"
		fail "python3 $*"
	}
	cat "$T/$tag.py"
}

# The odd originals, unconverted: gray JPEG, CMYK JPEG, PNG named .jpg.
py load_shards.py odd "$T/i" "$T/odd.tar"

say "centre crop, no DCT scaling: S=224 R=256 against torchvision"
sl c224 dump "$M" --crop center --image-size 224 --resize 256 --no-flip \
    --batch 8 --seed 3 --out "$T/c224.npy"
# shellcheck disable=SC2086
py check_center.py center "$T/c224.npy" "$T/c224.out" 224 256 0.5,2,0.5,2 $SHARDS

say "centre crop with DCT scaling: S=64 R=73"
sl c64 dump "$M" --crop center --image-size 64 --resize 73 --no-flip \
    --batch 24 --seed 3 --out "$T/c64.npy"
# shellcheck disable=SC2086
pyout c64 check_center.py center "$T/c64.npy" "$T/c64.out" 64 73 8,80,0.5,2 $SHARDS
has c64.py "1/4: "

say "grayscale, CMYK and PNG images: as PIL's convert('RGB') sees them"
sl odd224 dump "$T/odd.tar" --crop center --image-size 224 --resize 256 \
    --no-flip --batch 3 --out "$T/odd224.npy"
py check_center.py center "$T/odd224.npy" "$T/odd224.out" 224 256 0.5,2,0.5,2 \
    "$T/odd.tar"
sl odd64 dump "$T/odd.tar" --crop center --image-size 64 --resize 73 \
    --no-flip --batch 3 --out "$T/odd64.npy"
py check_center.py center "$T/odd64.npy" "$T/odd64.out" 64 73 8,80,0.5,2 \
    "$T/odd.tar"

say "RandomResizedCrop with flips: the pixels of the boxes keys reports"
for S in 224 64; do
	sl rrc$S dump "$M" --image-size "$S" --batch 12 --seed 4 --shuffle 8 \
	    --out "$T/rrc$S.npy"
	sl rrcb$S keys "$M" --image-size "$S" --batch 12 --seed 4 --shuffle 8 \
	    --boxes --limit-batches 1
	cut -f2-3 "$T/rrc$S.out" >"$T/a"
	cut -f4-5 "$T/rrcb$S.out" >"$T/b"
	cmp -s "$T/a" "$T/b" || fail "dump and keys disagree on batch 0's keys"
done
# shellcheck disable=SC2086
py check_center.py rrc "$T/rrc224.npy" "$T/rrcb224.out" 224 0.5,2,0.5,2 $SHARDS
# shellcheck disable=SC2086
pyout rrc64 check_center.py rrc "$T/rrc64.npy" "$T/rrcb64.out" 64 8,80,0.5,2 $SHARDS
has rrc64.py "1/2: "

say "RandomResizedCrop boxes: 384 samples over 2 seeds and 4 epochs"
for seed in 1 2; do
	sl box$seed keys "$M" --batch 8 --image-size 32 --boxes --epochs 4 \
	    --seed "$seed"
done
py check_boxes.py random-resized 0.08,1 0.75,1.3333333333333333 half 384 few \
    "$T/box1.out" "$T/box2.out"
say "--scale 0.25,0.5 --ratio 0.5,2 --no-flip"
sl boxsr keys "$M" --batch 8 --image-size 32 --boxes --epochs 4 \
    --scale 0.25,0.5 --ratio 0.5,2 --no-flip
py check_boxes.py random-resized 0.25,0.5 0.5,2 off 192 few "$T/boxsr.out"
# The default ranges would not hold these boxes.
if python3 "$PY/check_boxes.py" random-resized 0.08,1 0.75,1.3333333333333333 \
    off 192 few "$T/boxsr.out" >/dev/null 2>&1; then
	fail "--ratio 0.5,2 drew no box outside the default aspects"
fi
say "--ratio 1,1: square boxes"
sl boxsq keys "$M" --batch 8 --image-size 32 --boxes --epochs 2 --ratio 1,1
py check_boxes.py random-resized 0.08,1 1,1 half 96 few "$T/boxsq.out"
awk -F'\t' '$10 != $11 { exit 1 }' "$T/boxsq.out" ||
    fail "--ratio 1,1 gave a box that is not square"
say "--scale 0.9,1: boxes too big for wide images fall back to the centre"
sl boxfb keys "$M" --batch 8 --image-size 32 --boxes --epochs 4 --scale 0.9,1
py check_boxes.py random-resized 0.9,1 0.75,1.3333333333333333 half 192 some \
    "$T/boxfb.out"
say "--crop center and --crop none boxes"
sl boxc keys "$M" --batch 8 --image-size 64 --resize 73 --crop center \
    --no-flip --boxes
py check_boxes.py center 64 73 "$T/boxc.out"
sl boxn keys "$M" --batch 8 --image-size 48 --crop none --no-flip --boxes
py check_boxes.py none "$T/boxn.out"
sl nonepix dump "$M" --batch 4 --image-size 48 --crop none --no-flip \
    --out "$T/none.npy"
python3 -c 'import numpy, sys; a = numpy.load(sys.argv[1]); sys.exit(a.shape != (4, 48, 48, 3))' \
    "$T/none.npy" || fail "--crop none: the array is not (4, 48, 48, 3)"

say "dtypes and layouts: (v/255 - mean) / std of the u8 pixels"
o=("$M" --batch 4 --image-size 32 --seed 2)
sl du8 dump "${o[@]}" --out "$T/d.u8.npy"
inm=0.485,0.456,0.406
ins=0.229,0.224,0.225
for dl in "f32 nchw" "f16 nhwc" "bf16 nchw" "bf16 nhwc"; do
	# shellcheck disable=SC2086
	set -- $dl
	sl "d$1$2" dump "${o[@]}" --dtype "$1" --layout "$2" --out "$T/d.$1.$2.npy"
	cmp -s "$T/du8.out" "$T/d$1$2.out" || fail "--dtype $1 changed the keys"
	py check_dtype.py "$T/d.u8.npy" "$T/d.$1.$2.npy" "$1" "$2" "$inm" "$ins"
done
sl dms dump "${o[@]}" --dtype f32 --mean 0.5,0.25,0 --std 0.5,2,1 \
    --out "$T/d.ms.npy"
py check_dtype.py "$T/d.u8.npy" "$T/d.ms.npy" f32 nhwc 0.5,0.25,0 0.5,2,1

say "the .png grid: a PNG of the documented size holding the batch"
sl g7 dump "${o[@]}" --batch 7 --out "$T/g7.png"
sl g7n dump "${o[@]}" --batch 7 --out "$T/g7.npy"
cmp -s "$T/g7.out" "$T/g7n.out" || fail "the .png and .npy dumps list other keys"
py check_grid.py "$T/g7.png" "$T/g7.npy" 0
sl g7c dump "${o[@]}" --batch 7 --columns 2 --out "$T/g7c.png"
py check_grid.py "$T/g7c.png" "$T/g7.npy" 2
# A float dtype does not change the grid, which shows u8 pixels.
sl g7f dump "${o[@]}" --batch 7 --dtype f32 --layout nchw --out "$T/g7f.png"
cmp -s "$T/g7.png" "$T/g7f.png" || fail "--dtype f32 --layout nchw changed the .png grid"

say "CIFAR-10: 32x32 PNGs upscaled to 224"
synth_cifar "$T/c" --train 40 --test 4 --seed 52
mkdir "$T/cs"
st packc pack cifar10 "$T/c" -o "$T/cs/c-%06d.tar" --max-count 20
sl cup dump "$T/cs/c.json" --image-size 224 --crop center --no-flip --batch 6 \
    --out "$T/cup.npy"
# shellcheck disable=SC2046
py check_center.py center "$T/cup.npy" "$T/cup.out" 224 256 0.5,2 $(shards_of "$T/cs")
sl cupr dump "$T/cs/c.json" --image-size 224 --batch 6 --seed 9 --out "$T/cupr.npy"
sl cuprb keys "$T/cs/c.json" --image-size 224 --batch 6 --seed 9 --boxes \
    --limit-batches 1
# shellcheck disable=SC2046
py check_center.py rrc "$T/cupr.npy" "$T/cuprb.out" 224 0.5,2 $(shards_of "$T/cs")
sl cupg dump "$T/cs/c.json" --image-size 224 --batch 4 --out "$T/cup.png"
python3 -c 'from PIL import Image; import sys; im = Image.open(sys.argv[1]); im.load(); sys.exit(not (im.size[0] >= 2 * 224 and im.size[1] >= 2 * 224))' \
    "$T/cup.png" || fail "the CIFAR-10 grid at 224 is not 2x2 images of 224"
echo "PASS: load-pixels"
