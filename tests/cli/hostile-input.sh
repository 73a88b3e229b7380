#!/usr/bin/env bash
# hostile-input.sh - shards and manifests made to hurt the reader (issue
# 10): a member whose PAX header claims 10^13 bytes after a good sample
# (the good sample is still listed and delivered, the error names the
# offset), lrzip and lzop magic (a clear message, and no decompressor is
# run: fake ones first in PATH leave a mark if anything runs them), a FIFO
# named as a shard (refused at once, not waited on), and a manifest whose
# nsamples no shard of its filesize can hold (refused, naming the
# manifest and the entry).
set -eu
. "$top_srcdir/tests/cli/lib.sh"
: "${SHARDLOAD:?SHARDLOAD is not set; run the test through make check}"
need_python

synth_cifar "$T/c" --train 10 --test 4 --seed 5
mkdir "$T/s" "$T/h"
st pack pack cifar10 "$T/c" --split test -o "$T/s/good-%06d.tar"
good="$T/s/good-000000.tar"
python3 "$PY/evil_tars.py" --hostile "$T/h" "$good" >"$T/made" ||
    fail "evil_tars.py --hostile"
# "lie.tar offset O first KEY left N"
read -r _ _ lie_off _ lie_key _ lie_left < <(grep '^lie.tar ' "$T/made")
ld=(--batch 1 --image-size 16)

# ---------------------------------------------------------------------------
say "a PAX header claiming 10^13 bytes: the sample before it still comes out"
lie="$T/h/lie.tar"
msg="$lie: offset $lie_off: member liar.png claims 10000000000000 bytes, but the file has $lie_left bytes left"
st_rc 1 ls-lie ls "$lie"
has ls-lie.out "$lie_key"
has ls-lie.err "$msg"
hasnt ls-lie.out liar
st_rc 1 verify-lie verify "$lie"
has verify-lie.err "offset $lie_off"
# The loader skips and counts the rest of a damaged shard: exit 0, the
# good sample delivered, the damage named. --strict makes it fatal.
sl keys-lie keys "$lie" "${ld[@]}"
[ "$(cut -f4 "$T/keys-lie.out")" = "$lie_key" ] || {
	show keys-lie
	fail "keys: the good sample before the lying member was not delivered"
}
has keys-lie.err "$msg"
hasnt keys-lie.err "out of memory"
sl_rc 1 keys-lie-strict keys "$lie" "${ld[@]}" --strict
has keys-lie-strict.err "offset $lie_off"
hasnt keys-lie-strict.err "out of memory"

# ---------------------------------------------------------------------------
say "lrzip and lzop magic: not a tar, and no decompressor is run"
# libarchive's filters for these run lrzip -d or lzop -d from $PATH.
fake_decompressors
for kind in lrzip lzop; do
	PATH="$T/fakebin:$PATH" st_rc 1 ls-$kind ls "$T/h/$kind.tar"
	has ls-$kind.err "$T/h/$kind.tar: offset 0: not a tar archive ($kind-compressed data is not supported; shards may be plain, gzip or zstd)"
	PATH="$T/fakebin:$PATH" sl_rc 1 keys-$kind keys "$T/h/$kind.tar" \
	    "${ld[@]}"
	has keys-$kind.err "not a tar archive ($kind-compressed"
	no_decompressor_ran "$kind.tar"
done

# ---------------------------------------------------------------------------
say "a FIFO named as a shard: refused at once"
mkfifo "$T/fifo.tar"
run_rc 1 ls-fifo timeout 10 "$SHARDTOOL" ls "$T/fifo.tar"
has ls-fifo.err "$T/fifo.tar: not a regular file (a fifo)"
run_rc 1 keys-fifo timeout 10 "$SHARDLOAD" keys "$T/fifo.tar" "${ld[@]}"
has keys-fifo.err "$T/fifo.tar: not a regular file (a fifo)"
# A folder likewise; a symlink the user names is followed.
st_rc 1 ls-dir ls "$T/s"
has ls-dir.err "$T/s: not a regular file (a directory)"
ln -s "$good" "$T/link.tar"
st ls-link ls "$T/link.tar"
has ls-link.out "$lie_key"

# ---------------------------------------------------------------------------
say "a manifest whose nsamples no shard of its size can hold: refused"
cp "$good" "$T/s/stale-000000.tar"
size=$(file_size "$good")
python3 - "$T/s/good.json" "$T/s/stale.json" "$size" <<'EOF' ||
import json, sys
m = json.load(open(sys.argv[1]))
m["shardlist"][0].update(url="stale-000000.tar", nsamples=2000000)
json.dump(m, open(sys.argv[2], "w"))
EOF
    fail "making stale.json"
want="$T/s/stale.json: shardlist[0] (stale-000000.tar): \"nsamples\": 2000000, but a $size-byte tar holds at most $(( (size - 1024) / 512 )) samples"
sl_rc 1 keys-stale keys "$T/s/stale.json" "${ld[@]}"
has keys-stale.err "$want"
[ ! -s "$T/keys-stale.out" ] || fail "keys delivered samples from a refused manifest"
st_rc 1 verify-stale verify "$T/s/stale.json"
has verify-stale.err "$want"
# The manifest pack wrote is still read.
sl keys-good keys "$T/s/good.json" "${ld[@]}"
[ "$(wc -l <"$T/keys-good.out")" -eq 4 ] || fail "good.json: not 4 samples"
echo "PASS: hostile-input"
