#!/usr/bin/env bash
# imagenet-roundtrip.sh - pack a synthetic ImageNet train and val: JPEGs pass
# through byte for byte, val labels come from LOC_val_solution.csv, the
# grayscale, CMYK and PNG oddities become RGB JPEGs and are counted, nothing
# is lost; --resize-short re-encodes to the given shorter side.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_python PIL

synth_imagenet "$T/src" --classes 4 --per-class 6 --val 12 --seed 5
# synth puts its oddities in train; give val its own, so that the val path
# converts too: a CMYK JPEG and a PNG under .JPEG names.
python3 - "$T/src/val" <<'EOF' || fail "making val oddities"
import os, sys
from PIL import Image
d = sys.argv[1]
for n, mode, fmt in ((2, "CMYK", "JPEG"), (5, "RGB", "PNG")):
    path = os.path.join(d, "ILSVRC2012_val_%08d.JPEG" % n)
    im = Image.open(path).convert(mode)
    im.save(path, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
EOF

# How many oddities the source holds, train and val together.
nodd=$(python3 - "$T/src" <<'EOF'
import os, sys
from PIL import Image
n = 0
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        if f.endswith(".JPEG"):
            with Image.open(os.path.join(root, f)) as im:
                n += im.format == "PNG" or im.mode in ("L", "CMYK")
print(n)
EOF
) || fail "counting the oddities"
[ "$nodd" -ge 3 ] || fail "synth imagenet made $nodd oddities, want at least 3"

conv=0
for split in train val; do
	out="$T/$split"
	mkdir "$out"
	say "pack imagenet --split $split --max-count 5"
	st pack-$split pack imagenet "$T/src" --split "$split" --max-count 5 \
	    -j 2 -o "$out/imagenet-$split-%06d.tar"
	no_partial "$out"
	[ "$(shards_of "$out" | wc -l)" -ge 2 ] || fail "$split: want several shards"
	py imagenet_check.py imagenet "$T/src" "$split" \
	    "$out/imagenet-$split.json" "$T/pack-$split.out"
	c=$(sed -n 's/^ *converted: \([0-9]*\).*/\1/p' "$T/pack-$split.out")
	conv=$((conv + c))
	st verify-$split verify --decode "$out/imagenet-$split.json"
	has verify-$split.out " 0 problems"
done
[ "$conv" -eq "$nodd" ] ||
    fail "the summaries count $conv converted, the source has $nodd oddities"
say "train and val: $conv oddities converted and counted"

say "pack imagenet --resize-short 64"
mkdir "$T/small"
st pack-small pack imagenet "$T/src" --split train --resize-short 64 \
    --quality 90 -o "$T/small/in-%06d.tar"
py imagenet_check.py imagenet "$T/src" train "$T/small/in.json" \
    "$T/pack-small.out" 64
echo "PASS: imagenet-roundtrip"
