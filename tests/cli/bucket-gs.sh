#!/usr/bin/env bash
# bucket-gs.sh - gs:// against gcp-storage-emulator: pack uploads straight
# into a bucket (resumable uploads for shards larger than a chunk) and the
# manifest last; the bytes are the local pack's; the loader reads the bucket
# as it reads local disk (the same keys and pixel hashes) from a manifest, a
# pattern and a folder listed over several pages; shardtool ls, verify, cat
# and index read it; an object replaced while it is read (same size, other
# bytes) is caught by its generation; missing objects and buckets fail
# clearly; shardtrain trains on the bucket as on disk.
# tests/py/gcs_server.py gives the emulator listing pages and
# generation checks.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/bucket-lib.sh"

synth_imagenet "$T/i" --classes 4 --per-class 12 --val 4 --seed 43
st pack pack imagenet "$T/i" -o "$T/l/in-%06d.tar" --max-count 10
gcs_start
gcs_bucket data

say "pack straight into the bucket: resumable uploads, the manifest last"
st packg pack imagenet "$T/i" -o "gs://data/in/in-%06d.tar" --max-count 10 \
    --part-size 256K
python3 - "$T/l" <<'EOF'
import json, os, sys, urllib.parse, urllib.request
d = sys.argv[1]
ep = os.environ["STORAGE_EMULATOR_HOST"]
def get(path):
    with urllib.request.urlopen(ep + path) as r:
        return r.read()
names = sorted(o["name"] for o in json.loads(get(
    "/storage/v1/b/data/o?prefix=in/"))["items"])
want = ["in/in-%06d.tar" % i for i in range(5)] + ["in/in.json"]
assert names == want, names
for i in range(5):
    n = urllib.parse.quote("in/in-%06d.tar" % i, safe="")
    body = get("/storage/v1/b/data/o/%s?alt=media" % n)
    local = open(os.path.join(d, "in-%06d.tar" % i), "rb").read()
    assert len(local) > 256 << 10, "shard %d is not over a chunk" % i
    assert body == local, "shard %d differs from the local pack" % i
EOF

say "pack again: what the bucket holds (size, md5Hash) is not sent again"
st packg2 pack imagenet "$T/i" -o "gs://data/in/in-%06d.tar" --max-count 10 \
    --part-size 256K
has packg2.out "uploaded: 0 shards; 5 already in the bucket"
st packg3 pack imagenet "$T/i" -o "gs://data/re/in-%06d.tar" --max-count 10
st packg4 pack imagenet "$T/i" -o "gs://data/re/in-%06d.tar" --max-count 20
has packg4.out "uploaded: 3 shards; 0 already"
has packg4.err "gs://data/re/in-000003.tar is left from an earlier run"

opts=(--checksum --batch 6 --image-size 32 --shuffle 16 --seed 5 --epochs 2
    --part-size 16K)
say "the loader reads the bucket as local disk: manifest, pattern, folder"
sl ref keys "$T/l/in.json" "${opts[@]}" --workers 1 --io-streams 1
[ "$(wc -l <"$T/ref.out")" -eq 96 ] || fail "want 96 lines (2 epochs of 48)"
sl gm keys "gs://data/in/in.json" "${opts[@]}" --workers 3 --io-streams 2
cmp -s "$T/ref.out" "$T/gm.out" || fail "gs manifest differs from disk"
sl gp keys "gs://data/in/in-{000000..000004}.tar" "${opts[@]}" --workers 2
cmp -s "$T/ref.out" "$T/gp.out" || fail "gs pattern differs from disk"
# Two names a page: four pages, one of them a subfolder's prefix whose
# objects are not the folder's.
python3 - <<'EOF'
import os, urllib.request
urllib.request.urlopen(urllib.request.Request(
    os.environ["STORAGE_EMULATOR_HOST"] + "/upload/storage/v1/b/data/o"
    "?uploadType=media&name=in/sub/in-000009.tar",
    data=b"not a shard", method="POST")).read()
EOF
SK_LIST_PAGE=2 sl gd keys "gs://data/in/" "${opts[@]}" --workers 2
cmp -s "$T/ref.out" "$T/gd.out" || fail "gs folder differs from disk"
pages0=$(grep -c 'GET /storage/v1/b/data/o?.*pageToken=' "$T/gcs.log" || true)
SK_LIST_PAGE=2 st lsd ls "gs://data/in/"
for i in 0 1 2 3 4; do has lsd.out "gs://data/in/in-00000$i.tar:"; done
hasnt lsd.out "sub/"
pages=$(grep -c 'GET /storage/v1/b/data/o?.*pageToken=' "$T/gcs.log" || true)
[ $((pages - pages0)) -ge 3 ] ||
    fail "ls read $((pages - pages0)) listing pages after the first, want 3"

train_like_disk tr "$T/l/in.json" "gs://data/in/in.json"

say "shardtool ls, verify, cat and index give what they give on disk"
st lsl ls "$T/l/in-000001.tar"
st lsg ls "gs://data/in/in-000001.tar"
cmp -s "$T/lsl.out" "$T/lsg.out" || fail "ls over gs differs"
st vg verify --decode "gs://data/in/in.json"
has vg.out "0 problems"
key=$(head -n 1 "$T/lsl.out" | cut -f1)
st catl cat "$T/l/in-000001.tar" "$key.cls"
st catg cat "gs://data/in/in-000001.tar" "$key.cls"
cmp -s "$T/catl.out" "$T/catg.out" || fail "cat over gs differs"
mkdir "$T/idxl" "$T/idxg"
st idxl index --dali -o "$T/idxl" "$T/l/in-000002.tar"
st idxg index --dali -o "$T/idxg" "gs://data/in/in-000002.tar"
cmp -s "$T/idxl/in-000002.idx" "$T/idxg/in-000002.idx" ||
    fail "index --dali over gs differs"

say "an object replaced while it is read is caught by its generation"
# The same size, other bytes: only the generation can tell.
proxy_start "$GCS_PORT" --ttfb 20 --total-rate 40K
STORAGE_EMULATOR_HOST=$PROXY_URL st_rc 1 replaced verify \
    --part-size 16K --parts 1 "gs://data/in/in-000003.tar" &
reader=$!
sleep 1
python3 - "$T/l/in-000003.tar" <<'EOF'
import os, sys, urllib.request
ep = os.environ["STORAGE_EMULATOR_HOST"]
body = bytes(b ^ 0x55 for b in open(sys.argv[1], "rb").read())
urllib.request.urlopen(urllib.request.Request(
    ep + "/upload/storage/v1/b/data/o?uploadType=media&name=in/in-000003.tar",
    data=body, method="POST")).read()
EOF
wait "$reader"
has replaced.err "gs://data/in/in-000003.tar"
has replaced.err "changed while it was read"
hasnt replaced.err "missing label"

say "missing objects and buckets"
st_rc 1 noobj ls "gs://data/in/nope.tar"
has noobj.err "gs://data/in/nope.tar"
has noobj.err "no such"
st_rc 1 nobucket ls "gs://no-such-bucket/x/in-000000.tar"
has nobucket.err "gs://no-such-bucket/x/in-000000.tar"
has nobucket.err "no such bucket no-such-bucket"
st_rc 1 nolist ls "gs://no-such-bucket/x/"
has nolist.err "no such bucket no-such-bucket"
echo ok
