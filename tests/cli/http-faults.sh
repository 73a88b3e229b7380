#!/usr/bin/env bash
# http-faults.sh - through the link proxy with its fault schedule on (503,
# 429 with Retry-After, connections reset mid-body, bodies cut short,
# stalls past the stall timeout), a full run gives exactly the clean run's
# keys and pixels: nothing lost, repeated or corrupted; every fault was met
# and retried, and resumed transfers fetched no byte twice. An object
# replaced in the middle of a read is an error naming its URL, and no
# sample mixes the two versions.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"

synth_imagenet "$T/i" --classes 4 --per-class 12 --val 4 --seed 47
mkdir -p "$T/www/s"
st pack pack imagenet "$T/i" -o "$T/www/s/in-%06d.tar" --max-count 10
M="$T/www/s/in.json"
http_start "$T/www"

# Parts of 32K: each shard takes several GETs, so faults fall mid-shard.
opts=(--checksum --batch 6 --image-size 32 --shuffle 16 --seed 9 --epochs 1
    --part-size 32K --stall-timeout 1 --retry-time 60)
faults=(--ttfb 2 --conn-rate 0 --total-rate 0 --seed 7 --fault-rate 0.2
    --faults 503,429,reset,short,stall --fault-match .tar --stall 3
    --retry-after 1)

say "the reference: local disk"
sl ref keys "$M" "${opts[@]}" --workers 2

say "through the proxy, faults on: the same keys and pixels"
proxy_start "$HTTP_PORT" "${faults[@]}"
sl f1 keys "$PROXY_URL/s/in.json" "${opts[@]}" --workers 2 --io-streams 2
cmp -s "$T/ref.out" "$T/f1.out" || {
	diff "$T/ref.out" "$T/f1.out" | head -5 >&2
	fail "a faulty link changed what the loader delivered"
}
injected=$(jget "$PROXY_STATS" faults | python3 -c 'import json, sys
print(sum(json.load(sys.stdin).values()))')
[ "$injected" -ge 5 ] || fail "the proxy injected only $injected faults"

say "bench over a fresh proxy: the counters meet every fault"
proxy_start "$HTTP_PORT" "${faults[@]}"
bopts=("${opts[@]}")
unset 'bopts[0]'	# --checksum is keys's
sl b bench "$PROXY_URL/s/in.json" "${bopts[@]}" --json "$T/b.json"
python3 - "$T/b.json" "$PROXY_STATS" "$T/www/s" <<'EOF' || fail "counters"
import json, os, sys
r = json.load(open(sys.argv[1]))["result"]["remote"]
p = json.load(open(sys.argv[2]))
d = sys.argv[3]
faults = p["faults"]
want = {"connection": faults.get("reset", 0), "stall": faults.get("stall", 0),
        "short_body": faults.get("short", 0),
        "status_429": faults.get("429", 0), "status_5xx": faults.get("503", 0)}
print("proxy faults:", faults)
print("loader retries:", r["retries"], r["retries_by_cause"],
      "resumes", r["resumes"], "refetched", r["refetched_bytes"])
for k, n in want.items():
    assert n > 0, "the proxy injected no %s fault" % k
    assert r["retries_by_cause"][k] == n, \
        "%s: %d retried, %d injected" % (k, r["retries_by_cause"][k], n)
assert r["retries"] == sum(want.values())
assert r["resumes"] > 0, "no transfer resumed at an offset"
assert r["failures"] == 0
# Resumed at the exact byte: every shard byte came once.
shards = sum(os.path.getsize(os.path.join(d, f))
             for f in os.listdir(d) if f.endswith(".tar"))
manifest = os.path.getsize(os.path.join(d, "in.json"))
assert r["refetched_bytes"] == 0, r["refetched_bytes"]
assert r["bytes"] == shards + manifest, (r["bytes"], shards + manifest)
assert r["mean_ttfb_seconds"] > 0
EOF

say "an object replaced in the middle of a read: an error naming it"
# The first request for a part after a shard's first (Range from byte 1
# on) finds the object replaced: the stream already has its first part,
# of the old version. One part at a time, so that part is the first one.
proxy_start "$HTTP_PORT" --ttfb 0 --conn-rate 0 --total-rate 0 \
    --faults replace --fault-rate 1 --fault-min-offset 1 --max-faults 1 \
    --fault-match .tar
sl_rc 1 rep keys "$PROXY_URL/s/in.json" "${opts[@]}" --workers 1 \
    --io-streams 1 --parts 1
has rep.err "$PROXY_URL/s/in-"
has rep.err "changed"
[ "$(jget "$PROXY_STATS" faults.replace)" -eq 1 ] ||
    fail "the proxy replaced no object"
# What came before the error is the reference's beginning, byte for byte.
if [ -s "$T/rep.out" ]; then
	head -c "$(file_size "$T/rep.out")" "$T/ref.out" >"$T/ref.head"
	cmp -s "$T/ref.head" "$T/rep.out" ||
	    fail "a batch before the error differs from the reference"
fi
