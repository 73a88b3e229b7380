#!/usr/bin/env bash
# load-bad-input.sh - corrupt and unusual input: a JPEG with damaged
# entropy data, samples without a label or an image, a shard cut in the
# middle of a member, webdataset's PAX-headed shards, an image over
# --max-pixels, a file that is no tar, missing shards; every bad sample is
# skipped and counted under its reason (shardload(1), BAD SAMPLES AND
# ERRORS), the rest delivered, exit 0; --strict makes each an error (exit
# 1) that names the shard; bad options are usage errors (exit 2 and the
# usage line). Every run must exit exactly 0, 1 or 2 as stated: a crash or
# a sanitizer report fails the test.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_python numpy PIL webdataset

B="$T/b"
py load_shards.py bad "$B"
# The counts the shards were written with (tests/py/load_shards.py):
# 6 shards of 8 planned samples; decode 1, too_big 1 (with --max-pixels
# 10000), no_image 1, no_label 2, damaged 3; 40 delivered.
sm=(--batch 8 --image-size 16 --max-pixels 10000)

# bench_is TAG SAMPLES BATCHES DECODE TOO_BIG NO_IMAGE NO_LABEL DAMAGED:
# the bench --json result $T/TAG.json holds those counts.
bench_is() {
	python3 - "$T/$1.json" "${@:2}" <<'EOF' || fail "$1: the counts of the JSON above are wrong"
import json, sys
r = json.load(open(sys.argv[1]))["result"]
want = [int(v) for v in sys.argv[2:]]
sk = r["skipped_by_reason"]
got = [r["samples"], r["batches"], sk["decode"], sk["too_big"], sk["no_image"],
       sk["no_label"], sk["damaged"]]
if got != want or r["skipped"] != sum(got[2:]):
    print(json.dumps(r, indent=1), file=sys.stderr)
    print("samples batches decode too_big no_image no_label damaged: got %s, want %s; skipped %d"
          % (got, want, r["skipped"]), file=sys.stderr)
    sys.exit(1)
EOF
}

say "all six shards through a manifest: every skip counted, exit 0"
sl all bench "$B/all.json" "${sm[@]}" --quiet --json "$T/all.json"
bench_is all 40 6 1 1 1 2 3
for w in corrupt_3 labels_2 labels_5 labels_6 big_4 trunc.tar; do
	has all.err "$w"
done
say "keys: exactly the good samples, the same with 1 and 4 workers"
sl allk1 keys "$B/all.json" "${sm[@]}" --shuffle 8 --workers 1 --checksum
sl allk4 keys "$B/all.json" "${sm[@]}" --shuffle 8 --workers 4 \
    --io-streams 3 --checksum
cmp -s "$T/allk1.out" "$T/allk4.out" ||
    fail "with skips, 1 and 4 workers delivered different batches"
cut -f4 "$T/allk1.out" | sort >"$T/got.keys"
python3 -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1]))["keys"]))' \
    "$B/expect.json" | sort >"$T/want.keys"
cmp -s "$T/got.keys" "$T/want.keys" || {
	diff "$T/want.keys" "$T/got.keys" >&2
	fail "keys delivered are not the good samples"
}
# A skipped sample leaves its batch short and the others where they were:
# --no-decode finds no decode or size problems, so its batches are these
# plus corrupt_3 and big_4, in the same places otherwise.
sl allnd keys "$B/all.json" "${sm[@]}" --shuffle 8 --no-decode
awk -F'\t' '$4 != "corrupt_3" && $4 != "big_4" { print $1, $2, $4, $5 }' \
    "$T/allnd.out" >"$T/allnd.kept"
awk -F'\t' '{ print $1, $2, $4, $5 }' "$T/allk1.out" >"$T/allk1.kept"
cmp -s "$T/allnd.kept" "$T/allk1.kept" ||
    fail "skipping corrupt_3 and big_4 moved other samples between batches"
[ "$(wc -l <"$T/allnd.out")" -eq 42 ] || fail "keys --no-decode: not 42 samples"
awk -F'\t' '$2 != b { b = $2; i = 0 } $3 != i++ { exit 1 }' "$T/allk1.out" ||
    fail "a batch with skips is not indexed 0..n-1"
[ "$(cut -f2 "$T/allk1.out" | sort -u | wc -l)" -eq 6 ] ||
    fail "the 40 samples are not in 6 batches"

say "--no-decode: no decode or size checks, the tar and label checks stay"
sl nodec bench "$B/all.json" "${sm[@]}" --no-decode --json "$T/nodec.json"
bench_is nodec 42 6 0 0 1 2 3

say "each bad shard alone: skipped without --strict, an error with it"
# shard: samples batches(--batch 2) decode too_big no_image no_label damaged
while read -r n counts; do
	sl "one.$n" bench "$B/$n.json" "${sm[@]}" --batch 2 --json "$T/one.$n.json"
	# shellcheck disable=SC2086
	bench_is "one.$n" $counts
	if [ "$n" = good ] || [ "$n" = pax ]; then
		sl "strict.$n" bench "$B/$n.json" "${sm[@]}" --strict
		hasnt "strict.$n.err" "warn"
		continue
	fi
	sl_rc 1 "strict.$n" bench "$B/$n.json" "${sm[@]}" --strict
	has "strict.$n.err" "shardload bench: "
	has "strict.$n.err" "$n.tar"
	[ ! -s "$T/strict.$n.out" ] || fail "--strict $n: a summary despite the error"
	sl_rc 1 "strictk.$n" keys "$B/$n.json" "${sm[@]}" --strict
	has "strictk.$n.err" "shardload keys: "
	has "strictk.$n.err" "$n.tar"
done <<'EOF'
good 8 4 0 0 0 0 0
corrupt 7 4 1 0 0 0 0
labels 5 4 0 0 1 2 0
trunc 5 4 0 0 0 0 3
pax 8 4 0 0 0 0 0
big 7 4 0 1 0 0 0
EOF
has strict.corrupt.err "corrupt_3"
has strict.labels.err "labels_2"
has strict.big.err "big_4"
has strict.trunc.err "offset"
has one.trunc.err "offset"

say "odd members: empty, a 60000x60000 header, cut, not an image, 1x1"
for c in random-resized center none; do
	sl weird.$c bench "$B/weird.json" --batch 4 --image-size 16 --crop "$c" \
	    --json "$T/weird.$c.json"
	bench_is weird.$c 3 2 3 1 0 1 0
done
has weird.center.err "weird_1"
sl weirdk keys "$B/weird.json" --batch 4 --image-size 16
printf 'weird_%d\t%d\n' 4 4 5 5 6 6 >"$T/weird.want"
cut -f4,5 "$T/weirdk.out" >"$T/weird.got"
cmp -s "$T/weird.want" "$T/weird.got" || fail "weird.tar: not weird_4, _5 and _6 with their labels"
sl_rc 1 weirds bench "$B/weird.json" --batch 4 --image-size 16 --strict
has weirds.err "weird.tar"

say "the PAX-headed webdataset shard through a pattern: keys and labels"
sl paxk keys "$B/pax.tar" --batch 4 --image-size 16 --strict
printf 'pax_%d\t%d\n' 0 0 1 1 2 2 3 3 4 0 5 1 6 2 7 3 >"$T/pax.want"
cut -f4,5 "$T/paxk.out" >"$T/pax.got"
cmp -s "$T/pax.want" "$T/pax.got" || fail "pax.tar: keys and labels differ from what webdataset wrote"

say "a file that is no tar"
# Through a manifest: its 5 planned samples are damaged, exit 0.
sl garb bench "$B/garbage.json" --batch 1 --image-size 16 --quiet \
    --json "$T/garb.json"
bench_is garb 0 5 0 0 0 0 5
has garb.err "garbage.tar"
sl_rc 1 garbs bench "$B/garbage.json" --batch 1 --image-size 16 --strict
has garbs.err "garbage.tar"
# Through a pattern the headers are read at open: --strict fails there.
sl_rc 1 garbp bench "$B/{good,garbage}.tar" --batch 1 --image-size 16 --strict
has garbp.err "garbage.tar"
sl_rc 1 truncp keys "$B/{good,trunc}.tar" --batch 1 --image-size 16 --strict
has truncp.err "trunc.tar"
[ ! -s "$T/truncp.out" ] || fail "--strict: a damaged shard in a pattern did not fail at open"
# Without --strict the samples before the damage count (shardkit's
# loader/io.c, count_samples; a sample cut by it is a damaged skip) and
# stream.
sl garbpn bench "$B/{good,garbage}.tar" --batch 1 --image-size 16 --quiet \
    --json "$T/garbpn.json"
bench_is garbpn 8 8 0 0 0 0 0
has garbpn.err "garbage.tar"
sl truncpn bench "$B/{good,trunc}.tar" --batch 1 --image-size 16 --quiet \
    --json "$T/truncpn.json"
bench_is truncpn 13 14 0 0 0 0 1
has truncpn.err "trunc.tar"

say "missing shards are errors that name them"
python3 - "$B" <<'EOF' || fail "cannot write the manifest"
import json, os, sys
d = sys.argv[1]
man = json.load(open(os.path.join(d, "good.json")))
man["shardlist"].append(dict(man["shardlist"][0], url="gone.tar"))
json.dump(man, open(os.path.join(d, "gone.json"), "w"))
EOF
sl_rc 1 gone bench "$B/gone.json" --batch 2 --image-size 16 --quiet
has gone.err "shardload bench: "
has gone.err "gone.tar"
sl_rc 1 goneall bench "$B/gone.json" --batch 2 --image-size 16 --remainder keep
has goneall.err "gone.tar"
# A pattern fails at open, before any batch.
sl_rc 1 gonep keys "$B/{good,gone}.tar" --batch 2 --image-size 16
has gonep.err "shardload keys: "
has gonep.err "gone.tar"
[ ! -s "$T/gonep.out" ] || fail "a pattern with a missing shard delivered batches"
sl_rc 1 nosrc keys "$B/nothing.json" --batch 2
has nosrc.err "nothing.json"
echo '{ not json' >"$T/broken.json"
sl_rc 1 broken keys "$T/broken.json"
has broken.err "broken.json"
echo '{"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": []}' \
    >"$T/empty.json"
sl_rc 1 emptyman keys "$T/empty.json"
has emptyman.err "empty.json"
: >"$T/empty.tar"
sl_rc 1 emptytar keys "$T/empty.tar" --batch 1
has emptytar.err "batch"
# A negative nsamples is refused by the manifest reader, naming it.
python3 - "$B" <<'EOF' || fail "cannot write the manifest"
import json, os, sys
d = sys.argv[1]
man = json.load(open(os.path.join(d, "good.json")))
man["shardlist"].append(dict(man["shardlist"][0], url="pax.tar", nsamples=-3))
json.dump(man, open(os.path.join(d, "negative.json"), "w"))
EOF
sl_rc 1 negative bench "$B/negative.json" --batch 1 --image-size 16 --quiet
has negative.err "negative.json"
has negative.err "negative"
mkdir "$T/dir.tar"
sl_rc 1 dirtar keys "$T/dir.tar" --batch 1
has dirtar.err "dir.tar"
sl_rc 1 toofew keys "$B/good.json" --batch 9
has toofew.err "keep"
sl_rc 1 unwritable bench "$B/good.json" --batch 2 --image-size 16 \
    --json "$T/no/such/dir/r.json"
has unwritable.err "r.json"
sl_rc 1 unwritable2 dump "$B/good.json" --batch 2 --image-size 16 \
    --out "$T/no/such/dir/x.npy"
has unwritable2.err "x.npy"

say "bad options: exit 2, a message and the usage line"
n=0
while read -r args; do
	n=$((n + 1))
	# shellcheck disable=SC2086
	eval "set -- $args"
	sl_rc 2 usage$n "$@"
	is_sl_usage_error usage$n
	[ ! -s "$T/usage$n.out" ] || fail "usage error '$args' printed to stdout"
done <<EOF
keys "$B/good.json" --bogus
keys "$B/good.json" -x
keys "$B/good.json" --batch 0
keys "$B/good.json" --batch -1
keys "$B/good.json" --batch 1x
keys "$B/good.json" --batch
keys "$B/good.json" --batch 99999999999999999999
keys "$B/good.json" --crop bogus
keys "$B/good.json" --dtype u16
keys "$B/good.json" --layout chw
keys "$B/good.json" --remainder some
keys "$B/good.json" --world 0
keys "$B/good.json" --rank 3 --world 2
keys "$B/good.json" --rank 2 --world 2
keys "$B/good.json" --scale 0.5,0.2
keys "$B/good.json" --scale 0,1
keys "$B/good.json" --ratio 1
keys "$B/good.json" --mean 1,2
keys "$B/good.json" --std 0,1,1
keys "$B/good.json" --prefetch 0
keys "$B/good.json" --prefetch 12Q
keys "$B/good.json" --ring 2
keys "$B/good.json" --crop center --image-size 64 --resize 32
keys
keys "$B/good.json" "$B/pax.json"
dump "$B/good.json"
dump "$B/good.json" --out "$T/x.jpg"
bench "$B/good.json" --limit-batches x
bench "$B/good.json" --limit-batches 0
bench "$B/good.json" --out "$T/x.npy"
bench "$B/good.json" --checksum
keys "$B/good.json" --json -
keys "$B/good.json" --columns 3
keys "$B/good.json" --no-decode --checksum
dump "$B/good.json" --out "$T/x.npy" --limit-batches 1
dump "$B/good.json" --out "$T/x.npy" --columns 0
keys "$B/good.json" --max-sample-size 1.5Q
keys "$B/good.json" --seed -1
keys "$B/good.json" --epochs 1000001
keys "$B/good.json" --shuffle 16777217
dump "$B/good.json" --out "$T/x.npy" --no-decode
bogus "$B/good.json"
--bogus
EOF
[ ! -e "$T/x.npy" ] || fail "a usage error left $T/x.npy"
sl_rc 2 nocmd
is_sl_usage_error nocmd

say "bad rank variables from a launcher are usage errors too"
for v in x -1 ""; do
	run_rc 2 envbad env OMPI_COMM_WORLD_RANK="$v" OMPI_COMM_WORLD_SIZE=2 \
	    "$SHARDLOAD" keys "$B/good.json" --batch 2
	no_sanitizer_report envbad
	is_sl_usage_error envbad
	has envbad.err "OMPI_COMM_WORLD_RANK"
done
echo "PASS: load-bad-input"
