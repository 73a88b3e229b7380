#!/usr/bin/env bash
# folder-manifest.sh - a folder read as its .tar files (a local folder, an
# http folder, a bucket prefix) that also holds a manifest says so in one
# line on stderr, naming the manifest the loader left unread, in shardload
# and in shardtool; a folder without one, or the manifest itself, says
# nothing; a folder with a manifest but no shard is an error naming it.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/bucket-lib.sh"

synth_imagenet "$T/i" --classes 2 --per-class 6 --val 0 --seed 5
st pack pack imagenet "$T/i" -o "$T/www/in/in-%06d.tar" --max-count 4
opts=(--batch 4 --image-size 16 --workers 1)
note="read the 3 .tar files of the folder; it also holds in.json (give it to read by the manifest)"

say "a local folder: shardload and shardtool name the manifest they left"
sl l1 keys "$T/www/in/" "${opts[@]}"
has l1.err "shardload keys: $T/www/in/: $note"
[ "$(wc -l <"$T/l1.err")" -eq 1 ] || fail "want one line on stderr"
sl l2 keys "$T/www/in" "${opts[@]}"
has l2.err "$note"
st l3 verify "$T/www/in/"
has l3.err "shardtool verify: $T/www/in/: $note"
sl l4 keys "$T/www/in/in.json" "${opts[@]}"
[ ! -s "$T/l4.err" ] || fail "the manifest itself needs no note"
mkdir "$T/plain"
cp "$T"/www/in/*.tar "$T/plain/"
sl l5 keys "$T/plain/" "${opts[@]}"
[ ! -s "$T/l5.err" ] || fail "a folder without a manifest needs no note"
mkdir "$T/only"
cp "$T/www/in/in.json" "$T/only/"
sl_rc 1 l6 keys "$T/only/" "${opts[@]}"
has l6.err "no .tar files in this folder; it holds in.json: give it to read by the manifest"
sl l7 keys "$T/www/in/" "${opts[@]}" -q
[ ! -s "$T/l7.err" ] || fail "-q keeps the note quiet"

say "an http folder and an s3 prefix say the same"
http_start "$T/www"
sl h1 keys "$HTTP_URL/in/" "${opts[@]}"
has h1.err "$HTTP_URL/in/: $note"
s3_start
s3_bucket data
st up cp "$T/www/in/in.json" s3://data/in/
sl s1 keys "s3://data/in/" "${opts[@]}"
has s1.err "shardload keys: s3://data/in/: $note"
echo "PASS: folder-manifest"
