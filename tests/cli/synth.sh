#!/usr/bin/env bash
# synth.sh - "shardtool synth": CIFAR-10 files of whole records with labels
# 0-9 and 10 class names; the ImageNet layout with its oddities; the same
# seed gives the same bytes and another seed other bytes.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_python PIL

say "synth cifar10 --train 500 --test 100"
synth_cifar "$T/c1" --train 500 --test 100 --seed 1
py synth_check.py cifar10 "$T/c1" 500 100

say "synth cifar10: the same seed gives identical files"
synth_cifar "$T/c2" --train 500 --test 100 --seed 1
same_tree "$T/c1" "$T/c2" || fail "synth cifar10 --seed 1 twice gave different files"

say "synth cifar10: another seed gives other images"
synth_cifar "$T/c3" --train 500 --test 100 --seed 2
for f in data_batch_1.bin test_batch.bin; do
	if cmp -s "$T/c1/$f" "$T/c3/$f"; then
		fail "$f is the same for --seed 1 and --seed 2"
	fi
done

say "synth cifar10 default counts: 10000 records per file"
synth_cifar "$T/cd"
for f in 1 2 3 4 5; do
	[ "$(file_size "$T/cd/data_batch_$f.bin")" -eq $((10000 * 3073)) ] ||
	    fail "data_batch_$f.bin: $(file_size "$T/cd/data_batch_$f.bin") bytes, want $((10000 * 3073))"
done
[ "$(file_size "$T/cd/test_batch.bin")" -eq $((10000 * 3073)) ] ||
    fail "test_batch.bin: want 10000 records by default"
rm -rf "$T/cd"

say "synth imagenet --classes 4 --per-class 6 --val 12"
synth_imagenet "$T/i1" --classes 4 --per-class 6 --val 12 --seed 3
py synth_check.py imagenet "$T/i1" 4 6 12

say "synth imagenet: the same seed gives identical files, also with -j 1"
synth_imagenet "$T/i2" --classes 4 --per-class 6 --val 12 --seed 3 -j 1
same_tree "$T/i1" "$T/i2" || fail "synth imagenet --seed 3 twice (default -j, -j 1) gave different files"

say "synth imagenet: another seed gives other images"
synth_imagenet "$T/i3" --classes 4 --per-class 6 --val 12 --seed 4
if same_tree "$T/i1" "$T/i3" >/dev/null 2>&1; then
	fail "synth imagenet --seed 3 and --seed 4 gave identical files"
fi

say "synth: bad arguments are usage errors"
st_rc 2 synth-bad-kind synth mnist "$T/m"
is_usage_error synth-bad-kind
st_rc 2 synth-bad-count synth cifar10 "$T/b" --train -5
is_usage_error synth-bad-count
echo "PASS: synth"
