#!/usr/bin/env bash
# read-ahead.sh - how many remote shards each I/O stream opens ahead: with
# the defaults it starts at 4 and grows while the readers wait on a slow
# link (and the keys stay those of local disk); --ahead, --io-streams,
# --parts and --part-size fix it; --max-inflight bounds it; it runs on
# across an epoch's end; local shards open one ahead; bad values are
# usage errors.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"

synth_imagenet "$T/i" --classes 4 --per-class 40 --val 0 --seed 7
mkdir -p "$T/www/s"
st pack pack imagenet "$T/i" -o "$T/www/s/in-%06d.tar" --max-count 4
M="$T/www/s/in.json"
http_start "$T/www"
# Each response waits 60 ms for its head and comes at 2 MB/s a
# connection: one shard open ahead leaves the readers waiting.
proxy_start "$HTTP_PORT" --ttfb 60 --conn-rate 2M --total-rate 0
U="$PROXY_URL/s/in.json"
opts=(--batch 8 --remainder keep --no-decode --epochs 2)

say "defaults over a slow link: the read-ahead grows, within its bound"
sl def bench "$U" "${opts[@]}" --json "$T/def.json"
peak=$(jget "$T/def.json" result.remote.ahead_peak)
cap=$(jget "$T/def.json" result.remote.ahead_cap)
[ "$peak" -gt 4 ] && [ "$peak" -le "$cap" ] &&
    [ "$cap" -le 16 ] || { show def; fail "ahead_peak $peak, cap $cap"; }
[ "$(jget "$T/def.json" result.samples)" -eq 320 ] ||
    fail "want 320 samples"
has def.out "read-ahead: "

say "the keys are those of local disk, whatever the read-ahead"
sl ref keys "$M" --batch 8 --shuffle 20 --seed 3 --epochs 2 --io-streams 1
sl ka keys "$U" --batch 8 --shuffle 20 --seed 3 --epochs 2
cmp -s "$T/ref.out" "$T/ka.out" || fail "keys differ from local disk"

say "--ahead N fixes it"
sl fix bench "$U" "${opts[@]}" --ahead 3 --json "$T/fix.json"
[ "$(jget "$T/fix.json" result.remote.ahead_peak)" -eq 3 ] &&
    [ "$(jget "$T/fix.json" result.remote.ahead_cap)" -eq 3 ] ||
    { show fix; fail "--ahead 3 did not hold"; }

for v in "--io-streams 2" "--parts 2" "--part-size 1M"; do
	say "$v fixes one ahead, as before"
	# shellcheck disable=SC2086
	sl one bench "$U" "${opts[@]}" $v --json "$T/one.json"
	[ "$(jget "$T/one.json" result.remote.ahead_peak)" -eq 1 ] ||
	    { show one; fail "$v: the read-ahead moved"; }
done

say "--max-inflight below two streams' parts leaves one ahead"
sl small bench "$U" "${opts[@]}" --max-inflight 1M --json "$T/small.json"
[ "$(jget "$T/small.json" result.remote.ahead_cap)" -eq 1 ] ||
    { show small; fail "--max-inflight 1M did not bound it"; }

say "local shards: one ahead"
sl loc bench "$M" "${opts[@]}" --json "$T/loc.json"
[ "$(jget "$T/loc.json" result.remote.ahead_peak)" -eq 1 ] ||
    { show loc; fail "local: the read-ahead moved"; }

say "the read-ahead runs on into the next epoch"
# One shard an epoch, each response 400 ms to its first byte: opened
# only when its epoch began, 8 epochs took 8 round trips (3.2 s); opened
# 8 ahead across the epochs' ends, about 2.
python3 - "$M" "$T/www/s/one.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["shardlist"] = m["shardlist"][:1]
json.dump(m, open(sys.argv[2], "w"))
PY
proxy_start "$HTTP_PORT" --ttfb 400 --conn-rate 0 --total-rate 0
sl ep bench "$PROXY_URL/s/one.json" --batch 4 --no-decode --epochs 8 \
    --io-streams 1 --ahead 8 --json "$T/ep.json"
[ "$(jget "$T/ep.json" result.samples)" -eq 32 ] || fail "want 32 samples"
python3 - "$T/ep.json" <<'PY' || { show ep; fail "epochs waited in turn"; }
import json, sys
w = json.load(open(sys.argv[1]))["result"]["wall_seconds"]
print("8 epochs of one shard over a 400 ms link: %.2f s" % w)
sys.exit(0 if w < 2.4 else 1)
PY

say "bad values are usage errors"
for v in "--ahead 17" "--ahead -1" "--max-inflight 4K" "--ahead x"; do
	# shellcheck disable=SC2086
	sl_rc 2 bad bench "$U" $v
	is_sl_usage_error bad
done
