#!/usr/bin/env bash
# load-files.sh - the loader's "files" form: a class-per-folder tree read
# one image file per sample gives exactly what "shardtool pack folder"
# packs from it (the same keys, labels and pixel hashes), whatever the
# thread counts, and ranks partition it; over nginx and from an S3 bucket
# (moto) it gives what local disk gives; --form and the automatic guess;
# a missing root, a root with no class folder, a class with no image and
# a file that cannot be read are errors that name them; an image that
# does not decode is skipped and counted (and fatal with --strict);
# shardtrain takes a tree and its class count.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_python PIL

# The tree: synthetic ImageNet classes (JPEGs), make_folder.py's classes
# (PNG, a stem with dots, an uppercase extension, hidden files), two files
# that share a stem (z1.jpg, z1.png: keys z1, z1_2) and a file that is no
# image (left out by the loader, skipped by pack). The grayscale JPEG is
# left out: pack converts it, so its pixels would differ by design.
synth_imagenet "$T/i" --classes 3 --per-class 10 --val 1 --seed 61
py make_folder.py "$T/mf"
rm "$T/mf/apple/gray.jpeg"
mkdir "$T/tree"
cp -r "$T/i/train/." "$T/tree/"
cp -r "$T/mf/." "$T/tree/"
# Pack converts grayscale and CMYK JPEGs (synth makes one of each): left
# out, as their pixels would differ by design.
python3 - "$T/tree" <<'EOF' || fail "cannot sort out the converted JPEGs"
import os, sys
from PIL import Image
for d, _, files in os.walk(sys.argv[1]):
    for f in files:
        p = os.path.join(d, f)
        try:
            im = Image.open(p)
        except Exception:
            continue
        if im.format == "JPEG" and im.mode != "RGB":
            os.remove(p)
EOF
cp "$T/tree/zebra/z0.png" "$T/tree/zebra/z1.png"
echo "not an image" >"$T/tree/apple/notes.txt"
n_images=$(find "$T/tree" -type f \( -iname '*.jpg' -o -iname '*.jpeg' \
    -o -iname '*.png' \) ! -name '.*' | wc -l)
[ "$n_images" -ge 35 ] || fail "the tree has only $n_images images"

mkdir "$T/s"
st pack pack folder "$T/tree" -o "$T/s/f-%06d.tar" --max-count 8
M="$T/s/f.json"

# Deterministic pixels: a centre crop, no flip.
px=(--crop center --no-flip --image-size 32 --resize 36 --checksum)
# sorted_samples TAG: key, label and pixel hash of each line, sorted.
sorted_samples() {
	cut -f4- "$T/$1.out" | LC_ALL=C sort >"$T/$1.sorted"
}

say "the tree gives the keys, labels and pixels of its shards"
sl shards keys "$M" "${px[@]}" --batch 1
sl files keys "$T/tree" "${px[@]}" --batch 1
sorted_samples shards
sorted_samples files
[ "$(wc -l <"$T/files.sorted")" -eq "$n_images" ] ||
    fail "the tree gave $(wc -l <"$T/files.sorted") samples, want $n_images"
cmp -s "$T/shards.sorted" "$T/files.sorted" || {
	diff "$T/shards.sorted" "$T/files.sorted" | head -10 >&2
	fail "the tree and its shards differ in keys, labels or pixels"
}
for k in "zebra/z1	" "zebra/z1_2	" "apple/a_b_c	" "apple/IMG_0001	" \
    "Mango/m1	0	"; do
	grep -q "^$k" "$T/files.sorted" || fail "no '$k' among the tree's keys"
done
hasnt files.sorted "apple/notes"
hasnt files.sorted ".DS_Store"

say "--form files, a trailing '/', and a file:// URL give the same"
sl files2 keys "$T/tree/" "${px[@]}" --batch 1 --form files
cmp -s "$T/files.out" "$T/files2.out" || fail "--form files with '/' differs"
sl files3 keys "file://$T/tree/" "${px[@]}" --batch 1
sorted_samples files3
cmp -s "$T/files.sorted" "$T/files3.sorted" || fail "file:// differs"

say "a folder of shards is still shards; --form shards on a tree is refused"
sl shdir keys "$T/s" "${px[@]}" --batch 1
sorted_samples shdir
cmp -s "$T/shards.sorted" "$T/shdir.sorted" || fail "a shard folder differs"
sl_rc 1 noform keys "$T/tree/" --batch 1 --form shards
has noform.err "no .tar files"

say "the order is the same whatever the threads, and depends on the seed"
opts=(--batch 4 --shuffle 8 --seed 5 --epochs 2 --crop random-resized
    --flip --image-size 24 --checksum)
sl ref keys "$T/tree" "${opts[@]}" --workers 1 --io-streams 1
for v in "--workers 4 --io-streams 1" "--workers 1 --io-streams 4" \
    "--workers 3 --io-streams 3 --prefetch 1K --ring 3"; do
	# shellcheck disable=SC2086
	sl run keys "$T/tree" "${opts[@]}" $v
	cmp -s "$T/ref.out" "$T/run.out" || {
		diff "$T/ref.out" "$T/run.out" | head -10 >&2
		fail "$v changed the keys or pixels"
	}
done
sl seed keys "$T/tree" "${opts[@]}" --seed 6
cmp -s "$T/ref.out" "$T/seed.out" && fail "another seed gave the same order"
sl e1 keys "$T/tree" "${opts[@]}" --epoch 1 --epochs 1
awk -F'\t' '$1 == 1' "$T/ref.out" >"$T/ref1"
cmp -s "$T/ref1" "$T/e1.out" || fail "--epoch 1 is not the second epoch"

say "ranks partition the files"
for r in 0 1 2; do
	sl rank$r keys "$T/tree" --batch 2 --no-decode --world 3 --rank $r \
	    --remainder keep --seed 9
	cut -f4 "$T/rank$r.out" >>"$T/ranks"
done
LC_ALL=C sort "$T/ranks" >"$T/ranks.sorted"
cut -f1 "$T/files.sorted" >"$T/all.keys"
cmp -s "$T/ranks.sorted" "$T/all.keys" ||
    fail "the ranks' keys are not each file once"
[ "$(wc -l <"$T/rank0.out")" -ne "$n_images" ] || fail "rank 0 read everything"

say "bytes read (bench --json) are the image files' bytes"
sl bench bench "$T/tree" --batch 1 --no-decode --remainder keep --json "$T/b.json"
want_bytes=$(find "$T/tree" -type f \( -iname '*.jpg' -o -iname '*.jpeg' \
    -o -iname '*.png' \) ! -name '.*' -printf '%s\n' | awk '{ s += $1 } END { print s }')
python3 - "$T/b.json" "$want_bytes" "$n_images" <<'EOF' || fail "bench --json of the tree"
import json, sys
j = json.load(open(sys.argv[1]))
def find(o, k):
    if isinstance(o, dict):
        if k in o:
            return o[k]
        for v in o.values():
            r = find(v, k)
            if r is not None:
                return r
    return None
b = find(j, "bytes_read")
if b is None:
    b = find(j, "bytes")
assert b == int(sys.argv[2]), "bytes read %r, want %s" % (b, sys.argv[2])
EOF

say "over nginx (JSON autoindex): what local disk gives"
if command -v nginx >/dev/null 2>&1 && command -v openssl >/dev/null 2>&1; then
	. "$top_srcdir/tests/cli/http-lib.sh"
	http_start "$T"
	sl http keys "$HTTP_URL/tree/" "${px[@]}" --batch 1 --io-streams 3
	sorted_samples http
	cmp -s "$T/files.sorted" "$T/http.sorted" || {
		diff "$T/files.sorted" "$T/http.sorted" | head -10 >&2
		fail "the tree over http differs from local"
	}
	sl_rc 1 httpmiss keys "$HTTP_URL/nope/" --batch 1
	has httpmiss.err "/nope/"
	NGINX_OK=1
else
	say "(skipped: no nginx)"
	NGINX_OK=0
fi

say "an S3 bucket prefix (moto): what local disk gives"
if [ "$NGINX_OK" = 1 ] && command -v moto_server >/dev/null 2>&1 &&
    python3 -c 'import boto3' 2>/dev/null; then
	. "$top_srcdir/tests/cli/bucket-lib.sh"
	s3_start
	s3_bucket data
	python3 - "$T/tree" <<'EOF' || fail "cannot upload the tree"
import boto3, os, sys
s3 = boto3.client("s3")
root = sys.argv[1]
for d, _, files in os.walk(root):
    for f in files:
        p = os.path.join(d, f)
        s3.upload_file(p, "data", "t/" + os.path.relpath(p, root))
EOF
	sl s3 keys "s3://data/t/" "${px[@]}" --batch 1
	sorted_samples s3
	cmp -s "$T/files.sorted" "$T/s3.sorted" || {
		diff "$T/files.sorted" "$T/s3.sorted" | head -10 >&2
		fail "the tree in a bucket differs from local"
	}
	hasnt s3.err "$AWS_SECRET_ACCESS_KEY"
else
	say "(skipped: no moto_server or boto3)"
fi

say "errors: a missing root, no class folder, a class with no image"
sl_rc 1 miss keys "$T/nope/" --batch 1
has miss.err "$T/nope"
sl_rc 1 miss2 keys "$T/nope" --batch 1 --form files
has miss2.err "$T/nope: No such file or directory"
mkdir "$T/bare"
sl_rc 1 bare keys "$T/bare" --batch 1 --form files
has bare.err "$T/bare: no class folders"
cp -r "$T/tree" "$T/t2"
mkdir "$T/t2/empty"
sl_rc 1 empty keys "$T/t2" --batch 1
has empty.err "$T/t2/empty: no images"
rmdir "$T/t2/empty"
mkdir "$T/t2/txt"
echo x >"$T/t2/txt/readme.txt"
sl_rc 1 txt keys "$T/t2" --batch 1
has txt.err "$T/t2/txt: no images"
rm -r "$T/t2/txt"

say "an image that does not decode is skipped and counted; --strict fails"
echo "not a jpeg" >"$T/t2/zebra/bad.jpg"
sl bad keys "$T/t2" --batch 1 --crop center --no-flip --image-size 32
hasnt bad.out "zebra/bad	"
[ "$(wc -l <"$T/bad.out")" -eq "$n_images" ] || fail "want $n_images samples besides the bad one"
grep -qi "skip" "$T/bad.err" || { show bad; fail "the skip is not reported"; }
sl_rc 1 badstrict keys "$T/t2" --batch 1 --crop center --no-flip \
    --image-size 32 --strict
has badstrict.err "zebra/bad"
rm "$T/t2/zebra/bad.jpg"

say "a file that cannot be read is fatal, named"
# Root reads a mode-000 file: drop to nobody when root can.
if [ "$(id -u)" -ne 0 ] || [ "$AS_USER_SETPRIV" = 1 ]; then
	chmod 755 "$T"
	chmod -R a+rX "$T/t2"
	chmod 000 "$T/t2/apple/a.b.c.jpg"
	run_rc 1 unread as_user "$SHARDLOAD" keys "$T/t2" --batch 1 --no-decode
	no_sanitizer_report unread
	has unread.err "$T/t2/apple/a.b.c.jpg"
	has unread.err "ermission denied"
	chmod 644 "$T/t2/apple/a.b.c.jpg"
else
	say "(skipped: running as root with no way to drop privileges)"
fi

say "shardtrain takes a tree and counts its classes"
if [ -n "${SHARDTRAIN:-}" ] && [ -x "$SHARDTRAIN" ]; then
	n_classes=$(find "$T/tree" -mindepth 1 -maxdepth 1 -type d ! -name '.*' | wc -l)
	run_rc 0 train "$SHARDTRAIN" --model resnet18 --width 0.125 \
	    --image-size 32 --data "$T/tree" --batch 4 --steps 2 --json "$T/train.json"
	no_sanitizer_report train
	python3 - "$T/train.json" "$n_classes" <<'EOF' || fail "shardtrain's classes"
import json, sys
j = json.load(open(sys.argv[1]))
def find(o, k):
    if isinstance(o, dict):
        if k in o:
            return o[k]
        for v in o.values():
            r = find(v, k)
            if r is not None:
                return r
    return None
c = find(j, "classes")
assert c == int(sys.argv[2]), "classes %r, want %s" % (c, sys.argv[2])
EOF
fi
echo "PASS: load-files"
