#!/usr/bin/env bash
# verify-progress.sh - shardtool verify --decode, which decodes every
# image and takes long, shows a progress line on a terminal (shards done,
# samples, bytes, rate, problems) that ends where the summary does; not
# when stderr is not a terminal, nor under -q; a problem's line is not
# glued to it.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_cmd script

synth_imagenet "$T/i" --classes 2 --per-class 8 --val 0 --seed 11
st pack pack imagenet "$T/i" -o "$T/s/in-%06d.tar" --max-count 5

# tty TAG ARGS...: shardtool ARGS on a terminal, its output in TAG.tty.
tty() {
	local tag=$1 a q=
	shift
	for a in "$@"; do q="$q '$a'"; done
	script -qec "'$SHARDTOOL'$q" /dev/null | tr '\r' '\n' >"$T/$tag.tty" ||
	    true
}

say "on a terminal: a progress line that ends at the summary's counts"
tty v1 verify --decode "$T/s/in.json"
grep -qE '^shardtool verify: 4/4 shards, 16 samples, [0-9.]+ MB, [0-9]+ samples/s, 0 problems' \
    "$T/v1.tty" || { cat "$T/v1.tty" >&2; fail "no progress line"; }
grep -q '^verified 4 shards, 16 samples' "$T/v1.tty" ||
    { cat "$T/v1.tty" >&2; fail "no summary"; }

say "not under -q, nor when stderr is not a terminal"
tty v2 verify --decode -q "$T/s/in.json"
if grep -q 'shards, ' "$T/v2.tty"; then
	cat "$T/v2.tty" >&2
	fail "a progress line under -q"
fi
st v3 verify --decode "$T/s/in.json"
[ ! -s "$T/v3.err" ] || fail "progress on a stderr that is no terminal"

say "a problem's line starts a line of its own"
head -c 3000 "$T/s/in-000001.tar" >"$T/cut.tar"
tty v4 verify --decode "$T/s/in-000000.tar" "$T/cut.tar"
grep -q "^shardtool verify: $T/cut.tar" "$T/v4.tty" ||
    { cat "$T/v4.tty" >&2; fail "the problem is not on a line of its own"; }
grep -qE '^shardtool verify: 2/2 shards, .* [1-9][0-9]* problems' "$T/v4.tty" ||
    { cat "$T/v4.tty" >&2; fail "the progress line does not count the problem"; }
echo "PASS: verify-progress"
