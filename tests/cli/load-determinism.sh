#!/usr/bin/env bash
# load-determinism.sh - "shardload keys --checksum" (keys and a hash of
# every image's pixels) is the same whatever the thread counts, read-ahead
# and ring size, with a shuffle buffer, RandomResizedCrop and flips, over
# two epochs; a sample's pixels depend on the seed, the epoch and its key,
# not on where it lands; another seed gives another order; --resume-batch K
# and --epoch E give exactly the rest of the uninterrupted run.
set -eu
. "$top_srcdir/tests/cli/lib.sh"

synth_imagenet "$T/i" --classes 4 --per-class 12 --val 4 --seed 41
mkdir "$T/s"
st pack pack imagenet "$T/i" -o "$T/s/in-%06d.tar" --max-count 10
M="$T/s/in.json"

# 48 samples, batches of 6: 8 batches per epoch, none dropped.
opts=(--checksum --batch 6 --image-size 32 --shuffle 16 --seed 11
    --epochs 2 --crop random-resized --flip)

say "the reference run: one worker, one I/O stream"
sl ref keys "$M" "${opts[@]}" --workers 1 --io-streams 1
[ "$(wc -l <"$T/ref.out")" -eq 96 ] || fail "want 96 lines (2 epochs of 48)"
awk -F'\t' 'NF != 6 || $6 !~ /^[0-9a-f]+$/ || length($6) != 16 { exit 1 }' "$T/ref.out" ||
    fail "keys --checksum lines are not epoch batch index key label hash"
# Flips and crops at work: the same key's pixels differ between epochs.
awk -F'\t' '$1 == 0 { a[$4] = $6 } $1 == 1 { b[$4] = $6 }
    END { for (k in a) if ((k in b) && a[k] != b[k]) d++; exit !(d >= 40) }' \
    "$T/ref.out" ||
    fail "fewer than 40 of 48 images differ between epoch 0 and 1"

n=0
for v in "--workers 4 --io-streams 1" "--workers 1 --io-streams 4" \
    "--workers 4 --io-streams 4" \
    "--workers 3 --io-streams 2 --prefetch 1K --ring 3"; do
	n=$((n + 1))
	say "$v: the same lines"
	# shellcheck disable=SC2086
	sl run$n keys "$M" "${opts[@]}" $v
	cmp -s "$T/ref.out" "$T/run$n.out" || {
		diff "$T/ref.out" "$T/run$n.out" | head -10 >&2
		fail "$v changed the keys or pixels"
	}
done

say "a pattern (counts from the headers) gives what the manifest gives"
sl pat keys "$T/s/in-{000000..000004}.tar" "${opts[@]}" --workers 4
cmp -s "$T/ref.out" "$T/pat.out" || fail "the pattern differs from the manifest"

say "f32 NCHW: the same with 1 and 4 workers"
sl f1 keys "$M" "${opts[@]}" --dtype f32 --layout nchw --workers 1
sl f4 keys "$M" "${opts[@]}" --dtype f32 --layout nchw --workers 4 \
    --io-streams 3
cmp -s "$T/f1.out" "$T/f4.out" || fail "f32 NCHW differs between 1 and 4 workers"
cut -f1-5 "$T/f1.out" >"$T/f1.keys"
cut -f1-5 "$T/ref.out" >"$T/ref.keys"
cmp -s "$T/f1.keys" "$T/ref.keys" || fail "--dtype f32 changed the order of the keys"

say "a sample's pixels follow its key: no shuffle, another rank, same hash"
sl noshuf keys "$M" "${opts[@]}" --shuffle 0
sl rank1 keys "$M" "${opts[@]}" --world 2 --rank 1
# epoch TAB key -> hash of the reference; every line of the others agrees.
for f in noshuf rank1; do
	awk -F'\t' 'NR == FNR { h[$1 FS $4] = $6; next }
	    h[$1 FS $4] != $6 { bad++ } END { exit (bad > 0) }' \
	    "$T/ref.out" "$T/$f.out" ||
	    fail "$f: a key's pixels differ from the reference run's"
done
cmp -s "$T/noshuf.out" "$T/ref.out" && fail "--shuffle 16 and 0 gave the same order"

say "--seed 12: another order and other crops, the same keys"
sl seed12 keys "$M" "${opts[@]}" --seed 12
cut -f4 "$T/ref.out" >"$T/ref.order"
cut -f4 "$T/seed12.out" >"$T/seed12.order"
cmp -s "$T/ref.order" "$T/seed12.order" && fail "--seed 12 gave seed 11's order"
sort "$T/ref.order" >"$T/a.sorted"
sort "$T/seed12.order" >"$T/b.sorted"
cmp -s "$T/a.sorted" "$T/b.sorted" || fail "--seed 12 delivered other keys"
awk -F'\t' 'NR == FNR { h[$1 FS $4] = $6; next }
    h[$1 FS $4] == $6 { same++ } END { exit (same > 5) }' \
    "$T/ref.out" "$T/seed12.out" || fail "--seed 12 left most crops as they were"
# And the two epochs of one run differ in order.
awk -F'\t' '$1 == 0 { print $4 }' "$T/ref.out" >"$T/e0"
awk -F'\t' '$1 == 1 { print $4 }' "$T/ref.out" >"$T/e1"
cmp -s "$T/e0" "$T/e1" && fail "epochs 0 and 1 came in the same order"

say "--resume-batch 3: the rest of the uninterrupted run"
sl res3 keys "$M" "${opts[@]}" --resume-batch 3 --workers 3
awk -F'\t' '!($1 == 0 && $2 < 3)' "$T/ref.out" >"$T/ref.tail3"
[ "$(wc -l <"$T/ref.tail3")" -eq 78 ] || fail "the tail from batch 3 should be 78 lines"
cmp -s "$T/ref.tail3" "$T/res3.out" || {
	diff "$T/ref.tail3" "$T/res3.out" | head -10 >&2
	fail "--resume-batch 3 is not the run from batch 3 of epoch 0 on"
}
say "--resume-batch 7 (the last batch) and --epochs 2"
sl res7 keys "$M" "${opts[@]}" --resume-batch 7
awk -F'\t' '!($1 == 0 && $2 < 7)' "$T/ref.out" >"$T/ref.tail7"
cmp -s "$T/ref.tail7" "$T/res7.out" || fail "--resume-batch 7 is not the run from batch 7 on"
say "--epoch 1 --epochs 1 (--resume-batch 5): epoch 1 of the run"
sl ep1 keys "$M" "${opts[@]}" --epoch 1 --epochs 1
awk -F'\t' '$1 == 1' "$T/ref.out" >"$T/ref.e1"
cmp -s "$T/ref.e1" "$T/ep1.out" || fail "--epoch 1 is not epoch 1 of the run"
sl ep1r5 keys "$M" "${opts[@]}" --epoch 1 --epochs 1 --resume-batch 5
awk -F'\t' '$1 == 1 && $2 >= 5' "$T/ref.out" >"$T/ref.e1r5"
cmp -s "$T/ref.e1r5" "$T/ep1r5.out" ||
    fail "--epoch 1 --resume-batch 5 is not the end of epoch 1"
sl_rc 1 res8 keys "$M" "${opts[@]}" --resume-batch 8
has res8.err "resume batch 8"
echo "PASS: load-determinism"
