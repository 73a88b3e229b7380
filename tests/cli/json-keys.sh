#!/usr/bin/env bash
# json-keys.sh - every tool's --json against the key list of its man page,
# both ways (tests/py/check_json_keys.py), in the one layout and key style
# of shardkit-cli(7): shardtool pack, verify and cp, shardload bench,
# shardtrain on synthetic data and on shards. "--json -" leaves nothing but
# the JSON on standard output, and the same quantity has the same key in
# every tool.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/train-lib.sh"
need_python json

man="$top_srcdir/man"

say "shardtool pack and verify"
st synth synth cifar10 "$T/c" --train 60 --test 4 --seed 5
mkdir "$T/s"
st pack pack cifar10 "$T/c" -o "$T/s/c-%06d.tar" --max-count 25 --seed 1 \
    --json "$T/pack.json"
st verify verify "$T/s/c.json" --json "$T/verify.json"
st cp cp "$T/s/c.json" "$T/cp" --json "$T/cp.json"
py check_json_keys.py "$man/shardtool.1" "$T/pack.json" "$T/verify.json" \
    "$T/cp.json"

say "shardload bench"
sl bench bench "$T/s/c.json" --batch 8 --image-size 16 --workers 2 \
    --json "$T/bench.json"
py check_json_keys.py "$man/shardload.1" "$T/bench.json"

say "shardtrain, on synthetic data and on the shards"
trn syn "${TINY_RESNET[@]}" --batch 8 --steps 2 --ceiling-steps 1 -q \
    --json "$T/train-syn.json"
trn data "${TINY_RESNET[@]}" --data "$T/s/c.json" --batch 8 --steps 2 \
    --ceiling-steps 1 --workers 2 --price-per-hour 1 -q --json "$T/train.json"
py check_json_keys.py "$man/shardtrain.1" "$T/train-syn.json" "$T/train.json"

say "--json -: standard output is the JSON alone"
mkdir "$T/s2"
st packj pack cifar10 "$T/c" -o "$T/s2/c-%06d.tar" --max-count 25 --json -
sl benchj bench "$T/s/c.json" --batch 8 --image-size 16 --json -
trn trainj "${TINY_RESNET[@]}" --batch 8 --steps 1 --ceiling-steps 0 \
    --json -
for t in packj benchj trainj; do
	python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$T/$t.out" ||
	    fail "$t: standard output is not one JSON document: $(head -c 300 "$T/$t.out")"
done

say "the same quantity under the same key in every tool"
python3 - "$T/pack.json" "$T/bench.json" "$T/train.json" <<'PY' ||
import json, sys
docs = {p: json.load(open(p)) for p in sys.argv[1:]}
for p, d in docs.items():
    r, c = d["result"], d["config"]
    for k in ("samples", "skipped", "skipped_by_reason", "wall_seconds",
              "images_per_second"):
        assert k in r, "%s: no result.%s" % (p, k)
    for k in ("source", "seed", "workers"):
        assert k in c, "%s: no config.%s" % (p, k)
for p in sys.argv[2:]:
    c = docs[p]["config"]
    for k in ("batch_per_rank", "global_batch", "world"):
        assert k in c, "%s: no config.%s" % (p, k)
    assert c["global_batch"] == c["batch_per_rank"] * c["world"], (p, c)
# the loader's skip reasons are the same set in shardload and shardtrain
a = docs[sys.argv[2]]["result"]["skipped_by_reason"]
b = docs[sys.argv[3]]["result"]["skipped_by_reason"]
assert sorted(a) == sorted(b), (a, b)
PY
    fail "a shared quantity is missing or named differently"
echo "PASS: json-keys"
