#!/usr/bin/env bash
# determinism.sh - the same input and options give byte-identical shards and
# manifest, for any -j; --seed SEED is reproducible, reorders and keeps
# the key set; SOURCE_DATE_EPOCH sets the mtime; --max-count and --max-size
# bound every shard.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_python PIL

synth_cifar "$T/c" --train 300 --test 50 --seed 21
synth_imagenet "$T/i" --classes 3 --per-class 5 --val 6 --seed 22

# pack_to DIR ARGS...: pack into a fresh DIR as DIR/s-%06d.tar.
pack_to() {
	local dir=$1
	shift
	mkdir "$dir"
	st pack "$@" -o "$dir/s-%06d.tar"
	no_partial "$dir"
}

say "cifar10: two runs give identical shards and manifest"
pack_to "$T/c1" pack cifar10 "$T/c" --max-count 64 -j 1
pack_to "$T/c2" pack cifar10 "$T/c" --max-count 64 -j 1
[ "$(shards_of "$T/c1" | wc -l)" -eq 5 ] || fail "want 5 shards of at most 64"
same_tree "$T/c1" "$T/c2" || fail "two identical packs differ"

for j in 2 4; do
	say "cifar10: -j $j gives the same bytes as -j 1"
	pack_to "$T/cj$j" pack cifar10 "$T/c" --max-count 64 -j "$j"
	same_tree "$T/c1" "$T/cj$j" || fail "-j $j differs from -j 1"
done

say "imagenet (passthrough and conversions): -j 1, 2 and 4 agree"
pack_to "$T/i1" pack imagenet "$T/i" --max-count 4 -j 1
for j in 2 4; do
	pack_to "$T/ij$j" pack imagenet "$T/i" --max-count 4 -j "$j"
	same_tree "$T/i1" "$T/ij$j" || fail "imagenet -j $j differs from -j 1"
done

say "--seed 7: reproducible, reordered, the same keys"
pack_to "$T/s1" pack cifar10 "$T/c" --max-count 64 --seed 7 -j 2
pack_to "$T/s2" pack cifar10 "$T/c" --max-count 64 --seed 7 -j 1
same_tree "$T/s1" "$T/s2" || fail "--seed 7 twice (-j 2, -j 1) differs"
# shellcheck disable=SC2046
py tarinfo.py keys $(shards_of "$T/c1") >"$T/keys.plain"
# shellcheck disable=SC2046
py tarinfo.py keys $(shards_of "$T/s1") >"$T/keys.shuf"
if cmp -s "$T/keys.plain" "$T/keys.shuf"; then
	fail "--seed 7 left the sample order as it was"
fi
sort "$T/keys.plain" >"$T/keys.plain.sorted"
sort "$T/keys.shuf" >"$T/keys.shuf.sorted"
cmp -s "$T/keys.plain.sorted" "$T/keys.shuf.sorted" ||
    fail "--seed 7 changed the set of keys"
[ "$(sort -u "$T/keys.shuf" | wc -l)" -eq 300 ] || fail "want 300 distinct keys"
pack_to "$T/s3" pack cifar10 "$T/c" --max-count 64 --seed 8
# shellcheck disable=SC2046
py tarinfo.py keys $(shards_of "$T/s3") >"$T/keys.shuf8"
if cmp -s "$T/keys.shuf" "$T/keys.shuf8"; then
	fail "--seed 7 and --seed 8 give the same order"
fi

say "SOURCE_DATE_EPOCH sets every mtime; unset, mtime is 0"
# shellcheck disable=SC2046
[ "$(py tarinfo.py mtimes $(shards_of "$T/c1"))" = 0 ] ||
    fail "mtime is not 0 without SOURCE_DATE_EPOCH"
mkdir "$T/e"
SOURCE_DATE_EPOCH=1700000000 "$SHARDTOOL" pack cifar10 "$T/c" --max-count 64 \
    -o "$T/e/s-%06d.tar" >/dev/null || fail "pack with SOURCE_DATE_EPOCH"
# shellcheck disable=SC2046
m=$(py tarinfo.py mtimes $(shards_of "$T/e"))
[ "$m" = 1700000000 ] || fail "SOURCE_DATE_EPOCH=1700000000 gave mtimes: $m"
if cmp -s "$T/c1/s-000000.tar" "$T/e/s-000000.tar"; then
	fail "SOURCE_DATE_EPOCH did not change the shard"
fi

say "--max-count 7: every shard holds 7 samples but the last"
pack_to "$T/mc" pack cifar10 "$T/c" --split test --max-count 7
# shellcheck disable=SC2046
py tarinfo.py counts $(shards_of "$T/mc") >"$T/counts"
awk '{print $2}' "$T/counts" | tr '\n' ' ' >"$T/counts.n"
[ "$(cat "$T/counts.n")" = "7 7 7 7 7 7 7 1 " ] ||
    fail "--max-count 7 on 50 samples gave shards of $(cat "$T/counts.n")"

say "--max-size 20K: no shard over 20480 bytes, and shards are filled"
pack_to "$T/ms" pack cifar10 "$T/c" --max-size 20K
# shellcheck disable=SC2046
py tarinfo.py counts $(shards_of "$T/ms") >"$T/counts"
n=$(wc -l <"$T/counts")
[ "$n" -ge 10 ] || fail "--max-size 20K on 300 samples gave only $n shards"
awk '$1 > 20480 { print; bad = 1 } END { exit bad }' "$T/counts" ||
    fail "shards over --max-size 20K (above)"
# Filled: a shard plus the first sample of the next would not fit, so two
# neighbours together are always over the limit.
awk 'NR > 1 && prev + $1 - 1024 <= 20480 { print; bad = 1 } { prev = $1 }
    END { exit bad }' "$T/counts" ||
    fail "--max-size 20K: two neighbouring shards would have fit in one"
# shellcheck disable=SC2046
py cifar_roundtrip.py "$T/c" train "$T/ms/s.json" "$T/ms.list" \
    $(shards_of "$T/ms") >/dev/null

say "--max-size smaller than one sample: one sample per shard, none lost"
pack_to "$T/big" pack imagenet "$T/i" --max-size 4K
# shellcheck disable=SC2046
py tarinfo.py counts $(shards_of "$T/big") >"$T/counts"
awk '$1 > 4096 && $2 != 1 { print; bad = 1 } END { exit bad }' "$T/counts" ||
    fail "a shard over --max-size 4K holds more than one sample"
[ "$(wc -l <"$T/counts")" -eq 15 ] ||
    fail "want 15 shards of one sample each, got $(wc -l <"$T/counts")"
echo "PASS: determinism"

say "on a terminal, the progress ends at the summary's count of bytes"
if command -v script >/dev/null; then
	mkdir "$T/tty"
	script -qec "'$SHARDTOOL' pack cifar10 '$T/c' --max-count 64 \
	    -o '$T/tty/s-%06d.tar'" /dev/null | tr '\r' '\n' >"$T/tty.out"
	last=$(grep -E '[0-9]+/[0-9]+ samples' "$T/tty.out" | tail -n 1 |
	    sed -E 's/.* ([0-9.]+) MB.*/\1/')
	sum=$(grep '^packed ' "$T/tty.out" | sed -E 's/.* ([0-9.]+) MB.*/\1/')
	[ -n "$last" ] && [ "$last" = "$sum" ] ||
	    { cat "$T/tty.out" >&2; fail "progress $last MB, summary $sum MB"; }
fi
