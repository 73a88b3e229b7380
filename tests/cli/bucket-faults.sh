#!/usr/bin/env bash
# bucket-faults.sh - the link proxy with its fault schedule in front of both
# object stores. Uploads: chunks and parts cut off on their way up, 503s
# and resets; pack still puts the local pack's bytes in the bucket, a GCS
# resumable upload goes on in its session (never restarted) and an S3
# multipart upload retries the part alone (no second upload, none left
# open). Reads: a full epoch from each store through 503, 429, resets,
# short bodies and stalls gives exactly local disk's keys and pixels:
# nothing lost, repeated or corrupted.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/bucket-lib.sh"

synth_imagenet "$T/i" --classes 4 --per-class 12 --val 4 --seed 53
st pack pack imagenet "$T/i" -o "$T/l/in-%06d.tar" --max-count 10
gcs_start
gcs_bucket data
s3_start
s3_bucket data
retry=(--retry-time 60 --stall-timeout 2)

# faults_seen NAME...: the proxy's count of those faults, summed.
faults_seen() {
	python3 - "$PROXY_STATS" "$@" <<'EOF'
import json, sys
f = json.load(open(sys.argv[1]))["faults"]
print(sum(f[k] for k in sys.argv[2:]))
EOF
}

say "gs://: chunks cut on their way up; each upload goes on in its session"
proxy_start "$GCS_PORT" --ttfb 0 --conn-rate 0 --total-rate 0 --seed 3 \
    --fault-rate 0.35 --faults upcut,503,reset --fault-match upload_id= \
    --log "$T/gup.log"
STORAGE_EMULATOR_HOST=$PROXY_URL st gup pack imagenet "$T/i" \
    -o "gs://data/in/in-%06d.tar" --max-count 10 --part-size 256K "${retry[@]}"
cut=$(faults_seen upcut)
[ "$cut" -ge 1 ] || fail "the proxy cut no chunk"
echo "gs upload faults met: $cut cut, $(faults_seen 503 reset) 503 or reset"
sessions=$(grep -c '^[0-9]* POST /upload/storage/v1/b/data/o?.*uploadType=resumable' \
    "$T/gup.log" || true)
[ "$sessions" -eq 5 ] ||
    fail "$sessions resumable sessions for 5 shards: an upload restarted"
python3 - "$T/l" <<'EOF'
import os, sys, urllib.parse, urllib.request
ep = os.environ["STORAGE_EMULATOR_HOST"]
for i in range(5):
    n = urllib.parse.quote("in/in-%06d.tar" % i, safe="")
    with urllib.request.urlopen(ep + "/storage/v1/b/data/o/%s?alt=media"
                                % n) as r:
        body = r.read()
    local = open(os.path.join(sys.argv[1], "in-%06d.tar" % i), "rb").read()
    assert len(local) > 256 << 10, "shard %d fits one chunk" % i
    assert body == local, "shard %d differs from the local pack" % i
EOF

say "s3://: parts cut on their way up are retried alone"
synth_imagenet "$T/big" --classes 2 --per-class 80 --val 2 --seed 7 \
    --quality 95
st packb pack imagenet "$T/big" -o "$T/lb/b-%03d.tar" --max-count 1000
# Parts go up 8 at a time, so which request is cut is not fixed: the
# first three parts sent are.
proxy_start "$S3_PORT" --ttfb 0 --conn-rate 0 --total-rate 0 \
    --fault-rate 1 --max-faults 3 --faults upcut --fault-match partNumber= \
    --log "$T/sup.log"
AWS_ENDPOINT_URL_S3=$PROXY_URL st sup pack imagenet "$T/big" \
    -o "s3://data/big/b-%03d.tar" --max-count 1000 --part-size 5M \
    "${retry[@]}"
cut=$(faults_seen upcut)
[ "$cut" -eq 3 ] || fail "the proxy cut $cut parts, want 3"
creates=$(grep -c '^[0-9]* POST /data/big/b-000.tar?uploads' "$T/sup.log" ||
    true)
[ "$creates" -eq 1 ] || fail "$creates multipart uploads for one shard"
python3 - "$T/lb/b-000.tar" <<'EOF'
import boto3, sys
s3 = boto3.client("s3")
body = s3.get_object(Bucket="data", Key="big/b-000.tar")["Body"].read()
assert body == open(sys.argv[1], "rb").read(), "the shard differs"
assert len(body) > 10 << 20, len(body)
assert s3.list_multipart_uploads(Bucket="data").get("Uploads", []) == []
EOF

# Parts of 32K: each shard takes several GETs, so faults fall mid-shard.
opts=(--checksum --batch 6 --image-size 32 --shuffle 16 --seed 9 --epochs 1
    --part-size 32K "${retry[@]}")
faults=(--ttfb 2 --conn-rate 0 --total-rate 0 --seed 7 --fault-rate 0.2
    --faults 503,429,reset,short,stall --fault-match .tar --stall 4
    --retry-after 1)
sl ref keys "$T/l/in.json" "${opts[@]}" --workers 2
st s3in pack imagenet "$T/i" -o "s3://data/in/in-%06d.tar" --max-count 10

# faulty_epoch SCHEME PORT VAR: a full epoch of SCHEME://data/in/in.json
# with the endpoint variable VAR on the faulty proxy in front of PORT.
faulty_epoch() {
	local scheme=$1 n
	say "a full epoch from $scheme:// through the faults: local disk's keys and pixels"
	proxy_start "$2" "${faults[@]}"
	(
		export "$3=$PROXY_URL"
		sl "$scheme" keys "$scheme://data/in/in.json" "${opts[@]}" \
		    --workers 2 --io-streams 2
	)
	cmp -s "$T/ref.out" "$T/$scheme.out" || {
		diff "$T/ref.out" "$T/$scheme.out" | head -5 >&2
		fail "a faulty link changed what the loader read from $scheme://"
	}
	n=$(faults_seen 503 429 reset short stall)
	[ "$n" -ge 5 ] || fail "the proxy injected only $n faults ($scheme)"
	echo "$scheme read faults met: $n"
}
faulty_epoch gs "$GCS_PORT" STORAGE_EMULATOR_HOST
faulty_epoch s3 "$S3_PORT" AWS_ENDPOINT_URL_S3

say "no secret in any output"
for f in "$T"/*.out "$T"/*.err "$T"/*.log; do
	[ -f "$f" ] || continue
	if grep -qF -- "$AWS_SECRET_ACCESS_KEY" "$f"; then
		fail "$f holds the secret key"
	fi
done
echo ok
