#!/usr/bin/env bash
# folder.sh - "pack folder" on a small SRC/CLASS/IMAGE tree: labels follow
# the bytewise sorted class names, keys are CLASS/STEM, images pass through
# (a grayscale JPEG is converted and counted), hidden files are left out and
# a file that is no image is skipped and counted.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_python PIL

py make_folder.py "$T/src"

say "pack folder"
mkdir "$T/out"
st pack pack folder "$T/src" --max-count 3 -o "$T/out/flowers-%06d.tar"
no_partial "$T/out"
[ -f "$T/out/flowers.json" ] || fail "no manifest flowers.json: $(ls "$T/out")"
py imagenet_check.py folder "$T/src" "$T/out/flowers.json" "$T/pack.out"

say "labels follow sorted class names: Mango=0 apple=1 zebra=2"
st ls ls "$T/out/flowers.json"
for k in Mango/m1 Mango/m2 apple/IMG_0001 apple/a_b_c apple/gray zebra/z0 zebra/z1; do
	grep -q "^$k	" "$T/ls.out" || { show ls; fail "no key $k in the listing"; }
done
"$SHARDTOOL" cat "$T/out/flowers.json" Mango/m1.cls >"$T/l0" || fail "cat Mango/m1.cls"
"$SHARDTOOL" cat "$T/out/flowers.json" zebra/z1.cls >"$T/l2" || fail "cat zebra/z1.cls"
[ "$(cat "$T/l0")" = 0 ] || fail "Mango/m1 has label '$(cat "$T/l0")', want 0"
[ "$(cat "$T/l2")" = 2 ] || fail "zebra/z1 has label '$(cat "$T/l2")', want 2"
"$SHARDTOOL" cat "$T/out/flowers.json" zebra/z0.png >"$T/z0" || fail "cat zebra/z0.png"
cmp "$T/z0" "$T/src/zebra/z0.png" || fail "zebra/z0.png is not the source bytes"

say "a file that is no image is skipped and counted"
cp -r "$T/src" "$T/src2"
echo "not an image" >"$T/src2/apple/notes.txt"
mkdir "$T/out2"
st pack2 pack folder "$T/src2" -o "$T/out2/f-%06d.tar"
grep -q "^ *skipped: 1\b" "$T/pack2.out" || { show pack2; fail "want 'skipped: 1' in the summary"; }
has pack2.err "notes.txt"
python3 - "$T/out2/f.json" <<'EOF' || fail "manifest of the pack with a skipped file"
import json, sys
m = json.load(open(sys.argv[1]))
n = sum(s["nsamples"] for s in m["shardlist"])
assert n == 7, "manifest counts %d samples, want 7" % n
assert m["info"].get("skipped") == 1, "info.skipped is %r, want 1" % m["info"].get("skipped")
EOF

say "pack folder: --split is a usage error, an empty tree a clear one"
st_rc 2 split pack folder "$T/src" --split train -o "$T/out/x-%06d.tar"
is_usage_error split
mkdir "$T/empty"
st_rc 1 empty pack folder "$T/empty" -o "$T/out/e-%06d.tar"
has empty.err "$T/empty"
say "a non-ASCII file name packs under any locale; a manifest elsewhere resolves"
cp -r "$T/src" "$T/src3"
cafe=$(printf 'caf\303\251')
cp "$T/src/zebra/z0.png" "$T/src3/zebra/$cafe.png"
mkdir -p "$T/out3" "$T/elsewhere"
LC_ALL=C st pack3 pack folder "$T/src3" -o "$T/out3/f-%06d.tar" \
    --manifest "$T/elsewhere/m.json"
"$SHARDTOOL" cat "$T/elsewhere/m.json" "zebra/$cafe.png" >"$T/cafe" ||
    fail "cat of the non-ASCII member through a manifest in another folder"
cmp "$T/cafe" "$T/src/zebra/z0.png" || fail "non-ASCII member is not the source bytes"
st verify3 verify "$T/elsewhere/m.json"
say "a fifo in a class folder is left out with a warning, not read forever"
mkdir -p "$T/src4" "$T/out4"
cp -r "$T/src/zebra" "$T/src4/"
mkfifo "$T/src4/zebra/pipe.png"
st pack4 pack folder "$T/src4" -o "$T/out4/f-%06d.tar"
has pack4.err "pipe.png: not a regular file"
echo "PASS: folder"
