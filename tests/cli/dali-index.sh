#!/usr/bin/env bash
# dali-index.sh - "shardtool index --dali" writes .idx files whose offsets
# point at member data (checked byte for byte against Python tarfile), and
# "shardtool index" writes a manifest that matches the files.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_python PIL

synth_cifar "$T/c" --train 200 --test 10 --seed 31
synth_imagenet "$T/i" --classes 3 --per-class 4 --val 6 --seed 32
mkdir "$T/cs" "$T/is"
st pack-c pack cifar10 "$T/c" --max-count 70 -o "$T/cs/c-%06d.tar"
st pack-i pack imagenet "$T/i" --max-count 5 -o "$T/is/i-%06d.tar"

say "index --dali next to each shard"
st dali index --dali "$T/cs/c-{000000..000002}.tar" "$T/is/i.json"
args=()
for s in $(shards_of "$T/cs") $(shards_of "$T/is"); do
	[ -f "${s%.tar}.idx" ] || fail "no ${s%.tar}.idx"
	args+=("${s%.tar}.idx" "$s")
done
py dali_check.py "${args[@]}"
no_partial "$T/cs"

say "index --dali -o DIR puts the .idx files in DIR"
mkdir "$T/idx"
st dali-o index --dali -o "$T/idx" "$T/is/i.json"
args=()
for s in $(shards_of "$T/is"); do
	b=$(basename "${s%.tar}")
	cmp "$T/idx/$b.idx" "${s%.tar}.idx" ||
	    fail "$T/idx/$b.idx differs from the one next to the shard"
	args+=("$T/idx/$b.idx" "$s")
done
py dali_check.py "${args[@]}"

say "index (manifest) matches the pack's manifest and the files"
st index index -o "$T/cs/again.json" "$T/cs/c-{000000..000002}.tar"
python3 - "$T/cs/c.json" "$T/cs/again.json" <<'EOF' || fail "index manifest"
import json, sys
sys.path.insert(0, __import__("os").environ["PY"])
from sktest import check, check_manifest
packed = check_manifest(sys.argv[1])
indexed = check_manifest(sys.argv[2])
strip = lambda m: [(s["url"], s["nsamples"], s["filesize"], s["md5sum"]) for s in m["shardlist"]]
check(strip(packed) == strip(indexed), "index gives %r, pack gave %r" % (strip(indexed), strip(packed)))
EOF
st index-stdout index "$T/cs/c-{000000..000002}.tar"
python3 - "$T/index-stdout.out" "$T/cs/c.json" <<'EOF' || fail "index to stdout"
import json, sys
out = json.load(open(sys.argv[1]))
packed = json.load(open(sys.argv[2]))
assert out["__kind__"] == "wids-shard-index-v1", out.get("__kind__")
a = [(s["nsamples"], s["filesize"], s["md5sum"]) for s in out["shardlist"]]
b = [(s["nsamples"], s["filesize"], s["md5sum"]) for s in packed["shardlist"]]
assert a == b, "stdout manifest %r, pack's %r" % (a, b)
EOF

say "index of a damaged shard fails and names it"
head -c 5000 "$T/cs/c-000000.tar" >"$T/cs/bad.tar"
st_rc 1 index-bad index --dali "$T/cs/bad.tar"
has index-bad.err "$T/cs/bad.tar"
[ ! -e "$T/cs/bad.idx" ] || fail "a .idx was written for a damaged shard"
no_partial "$T/cs"
echo "PASS: dali-index"
