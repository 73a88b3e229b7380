#!/usr/bin/env bash
# bucket-s3.sh - s3:// against moto's S3 server with SigV4 checked: pack
# uploads straight into a bucket (a multipart upload for a large shard) and
# the manifest last; the bytes are the local pack's; the loader reads the
# bucket as it reads local disk (the same keys and pixel hashes) from a
# manifest, a pattern and a folder listed over several pages; shardtool
# ls, verify, cat and index read it; a wrong secret, a missing key, bucket
# or object fail clearly; shardtrain trains on the bucket as on disk; no
# secret reaches any output.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/bucket-lib.sh"

synth_imagenet "$T/i" --classes 4 --per-class 12 --val 4 --seed 43
say "a local -o whose folder does not exist is made"
st pack pack imagenet "$T/i" -o "$T/new/dir/in-%06d.tar" --max-count 10
[ -f "$T/new/dir/in.json" ] || fail "no manifest in the new folder"
s3_start
s3_bucket data

say "pack straight into the bucket: the same shards, the manifest last"
st packs pack imagenet "$T/i" -o "s3://data/in/in-%06d.tar" --max-count 10
hasnt packs.err "$AWS_SECRET_ACCESS_KEY"
python3 - "$T/new/dir" <<'EOF'
import boto3, hashlib, json, os, sys
d = sys.argv[1]
s3 = boto3.client("s3")
names = sorted(o["Key"] for o in
               s3.list_objects_v2(Bucket="data", Prefix="in/")["Contents"])
want = ["in/in-%06d.tar" % i for i in range(5)] + ["in/in.json"]
assert names == want, names
for i in range(5):
    body = s3.get_object(Bucket="data", Key="in/in-%06d.tar" % i)["Body"].read()
    local = open(os.path.join(d, "in-%06d.tar" % i), "rb").read()
    assert body == local, "shard %d differs from the local pack" % i
m = json.loads(s3.get_object(Bucket="data", Key="in/in.json")["Body"].read())
assert [s["url"] for s in m["shardlist"]] == ["in-%06d.tar" % i
                                             for i in range(5)], m
EOF

say "pack again: what the bucket holds is not sent again (aws s3 sync)"
st packs2 pack imagenet "$T/i" -o "s3://data/in/in-%06d.tar" --max-count 10 \
    --json "$T/packs2.json"
has packs2.out "uploaded: 0 shards; 5 already in the bucket"
[ "$(jget "$T/packs2.json" result.unchanged_shards)" -eq 5 ] ||
    fail "want 5 unchanged shards"
# Into fewer shards: all are new, and the one left over is named.
st packs3 pack imagenet "$T/i" -o "s3://data/re/in-%06d.tar" --max-count 10
st packs4 pack imagenet "$T/i" -o "s3://data/re/in-%06d.tar" --max-count 20
has packs4.out "uploaded: 3 shards; 0 already"
has packs4.err "s3://data/re/in-000003.tar is left from an earlier run"
# A multipart upload's ETag (more than 5 MiB, in parts of 5 MiB) is
# computed here: the shard is recognised, not sent again.
synth_imagenet "$T/big" --classes 1 --per-class 70 --val 0 --seed 9
st packb pack imagenet "$T/big" -o "s3://data/big/b-%06d.tar" --part-size 5M
st packb2 pack imagenet "$T/big" -o "s3://data/big/b-%06d.tar" --part-size 5M
has packb2.out "uploaded: 0 shards; 1 already in the bucket"
python3 - <<'EOF'
import boto3
h = boto3.client("s3").head_object(Bucket="data", Key="big/b-000000.tar")
assert h["ContentLength"] > 5 << 20 and "-" in h["ETag"], h
EOF

# Small parts, so a shard takes several ranged GETs and skips cross them.
opts=(--checksum --batch 6 --image-size 32 --shuffle 16 --seed 5 --epochs 2
    --part-size 16K)
say "the loader reads the bucket as local disk: manifest, pattern, folder"
sl ref keys "$T/new/dir/in.json" "${opts[@]}" --workers 1 --io-streams 1
[ "$(wc -l <"$T/ref.out")" -eq 96 ] || fail "want 96 lines (2 epochs of 48)"
sl sm keys "s3://data/in/in.json" "${opts[@]}" --workers 3 --io-streams 2
cmp -s "$T/ref.out" "$T/sm.out" || fail "s3 manifest differs from disk"
sl sp keys "s3://data/in/in-{000000..000004}.tar" "${opts[@]}" --workers 2
cmp -s "$T/ref.out" "$T/sp.out" || fail "s3 pattern differs from disk"
# A folder two names a page (three pages and more), with a subfolder whose
# objects are not the folder's.
python3 -c 'import boto3
boto3.client("s3").put_object(Bucket="data", Key="in/sub/in-000009.tar",
                              Body=b"not a shard")'
SK_LIST_PAGE=2 sl sd keys "s3://data/in/" "${opts[@]}" --workers 2
cmp -s "$T/ref.out" "$T/sd.out" || fail "s3 folder differs from disk"
SK_LIST_PAGE=2 st lsd ls "s3://data/in/"
for i in 0 1 2 3 4; do has lsd.out "s3://data/in/in-00000$i.tar:"; done
hasnt lsd.out "sub/"

train_like_disk tr "$T/new/dir/in.json" "s3://data/in/in.json"

say "shardtool ls, verify, cat and index give what they give on disk"
st lsl ls "$T/new/dir/in-000001.tar"
st lss ls "s3://data/in/in-000001.tar"
cmp -s "$T/lsl.out" "$T/lss.out" || fail "ls over s3 differs"
st vs verify --decode "s3://data/in/in.json"
has vs.out "0 problems"
key=$(head -n 1 "$T/lsl.out" | cut -f1)
st catl cat "$T/new/dir/in-000001.tar" "$key.cls"
st cats cat "s3://data/in/in-000001.tar" "$key.cls"
cmp -s "$T/catl.out" "$T/cats.out" || fail "cat over s3 differs"
mkdir "$T/idxl" "$T/idxs"
st idxl index --dali -o "$T/idxl" "$T/new/dir/in-000002.tar"
st idxs index --dali -o "$T/idxs" "s3://data/in/in-000002.tar"
cmp -s "$T/idxl/in-000002.idx" "$T/idxs/in-000002.idx" ||
    fail "index --dali over s3 differs"

say "a shard larger than a part goes up as a multipart upload"
synth_imagenet "$T/big" --classes 2 --per-class 80 --val 2 --seed 7 \
    --quality 95
st packb pack imagenet "$T/big" -o "s3://data/big/b-%03d.tar" \
    --max-count 1000 --part-size 5M --json "$T/packb.json"
python3 - <<'EOF'
import boto3
s3 = boto3.client("s3")
h = s3.head_object(Bucket="data", Key="big/b-000.tar")
assert h["ContentLength"] > 10 << 20, h["ContentLength"]
# A multipart object's ETag is "md5-of-md5s-N".
assert "-" in h["ETag"], h["ETag"]
assert s3.list_multipart_uploads(Bucket="data").get("Uploads", []) == []
EOF
st vb verify "s3://data/big/b.json"
has vb.out "0 problems"

say "a wrong secret is a 403 that names where the keys came from"
AWS_SECRET_ACCESS_KEY=wrong-secret-not-this-one st_rc 1 badkey ls \
    "s3://data/in/in-000000.tar"
has badkey.err "s3://data/in/in-000000.tar"
has badkey.err "SignatureDoesNotMatch"
has badkey.err "AWS_ACCESS_KEY_ID in the environment"
hasnt badkey.err "wrong-secret-not-this-one"
AWS_SECRET_ACCESS_KEY=wrong-secret-not-this-one st_rc 1 badpack pack \
    imagenet "$T/i" -o "s3://data/x/in-%06d.tar"
has badpack.err "SignatureDoesNotMatch"

say "missing objects, buckets and keys, and an unreachable endpoint"
st_rc 1 nokey ls "s3://data/in/nope.tar"
hasnt nokey.err "did you mean"
say "a folder with no shards lists as aws s3 ls lists it"
st lsroot ls "s3://data/"
has lsroot.out "PRE in/"
st lsrootl ls -l "s3://data/"
has lsrootl.out "                           PRE in/"
st_rc 1 lsnone ls "s3://data/nothing-here/"
has lsnone.err "nothing in this folder"
say "a folder without its '/', and a glob: hints, not only NoSuchKey"
st_rc 1 noslash ls "s3://data/in"
has noslash.err "a folder: did you mean s3://data/in/?"
st_rc 1 glob ls "s3://data/in/*.tar"
has glob.err "a URL is not a glob: name shards with braces"
has nokey.err "s3://data/in/nope.tar"
has nokey.err "no such object"
st_rc 1 nobucket ls "s3://no-such-bucket/in/in-000000.tar"
has nobucket.err "NoSuchBucket"
(
	unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
	st_rc 1 nocreds ls "s3://data/in/in-000000.tar"
	st_rc 1 unsigned ls --no-sign-request "s3://data/in/in-000000.tar"
)
has nocreds.err "no-sign-request"
has unsigned.err "unsigned requests reach only public buckets"
AWS_ENDPOINT_URL_S3="http://127.0.0.1:$(free_port)" st_rc 1 noserver ls \
    --retry-time 1s --connect-timeout 1s "s3://data/in/in-000000.tar"
has noserver.err "s3://data/in/in-000000.tar"
AWS_ENDPOINT_URL_S3="ftp://example" st_rc 1 badep ls "s3://data/in/x.tar"
has badep.err "AWS_ENDPOINT_URL_S3"

say "no secret in any output"
for f in "$T"/*.out "$T"/*.err "$T"/*.json; do
	[ -f "$f" ] || continue
	if grep -qF -- "$AWS_SECRET_ACCESS_KEY" "$f"; then
		fail "$f holds the secret key"
	fi
	if grep -qE 'Signature=[0-9a-f]{64}' "$f"; then
		fail "$f holds a signature"
	fi
done
echo ok
