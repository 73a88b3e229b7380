#!/usr/bin/env bash
# cp.sh - shardtool cp moves a dataset local -> s3 -> gs -> local and from
# an http server: the same bytes everywhere, the manifest's shard URLs
# relative as they were; run again it sends only what is missing or
# different (a shard the destination holds with the same size and MD5 is
# not sent, nor read when the manifest gives its MD5); a shard that is not
# what its manifest says stops the copy and leaves no manifest at the
# destination (one from before is removed first), so the manifest is only
# ever written last; a missing destination bucket is an error naming it;
# --dry-run writes nothing; the progress line on a terminal; --json.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/bucket-lib.sh"

synth_imagenet "$T/i" --classes 3 --per-class 10 --val 0 --seed 27
st pack pack imagenet "$T/i" -o "$T/a/in-%06d.tar" --max-count 6
s3_start
s3_bucket src
gcs_start
gcs_bucket dst

# gs_put NAME FILE: store FILE as gs://dst/NAME behind shardtool's back.
gs_put() {
	python3 - "$1" "$2" <<'EOF'
import os, sys, urllib.parse, urllib.request
url = (os.environ["STORAGE_EMULATOR_HOST"] +
       "/upload/storage/v1/b/dst/o?uploadType=media&name=" +
       urllib.parse.quote(sys.argv[1], safe=""))
urllib.request.urlopen(urllib.request.Request(
    url, data=open(sys.argv[2], "rb").read(), method="POST",
    headers={"Content-Type": "application/octet-stream"})).read()
EOF
}

# same_dataset DIR: DIR holds the pack's shards and manifest, byte for byte.
same_dataset() {
	local f
	for f in "$T"/a/*; do
		cmp -s "$f" "$1/$(basename "$f")" ||
		    fail "$1/$(basename "$f") differs from the pack's"
	done
}

say "local -> s3: every shard, then the manifest, as they are"
st c1 cp "$T/a/in.json" s3://src/ds/ --json "$T/c1.json"
has c1.out "5 sent"
[ "$(jget "$T/c1.json" result.copied_shards)" -eq 5 ] || fail "want 5 copied"
[ "$(jget "$T/c1.json" result.verified_shards)" -eq 5 ] ||
    fail "want 5 shards checked against the manifest"
python3 - "$T/a" <<'EOF'
import boto3, os, sys
d = sys.argv[1]
s3 = boto3.client("s3")
keys = sorted(o["Key"] for o in
              s3.list_objects_v2(Bucket="src", Prefix="ds/")["Contents"])
assert keys == ["ds/" + n for n in sorted(os.listdir(d))], keys
for n in os.listdir(d):
    body = s3.get_object(Bucket="src", Key="ds/" + n)["Body"].read()
    assert body == open(os.path.join(d, n), "rb").read(), n
EOF
hasnt c1.err "$AWS_SECRET_ACCESS_KEY"

say "s3 -> gs, then again: nothing is sent twice"
st c2 cp s3://src/ds/in.json gs://dst/ds/
has c2.out "5 sent"
st c3 cp s3://src/ds/in.json gs://dst/ds --json "$T/c3.json"
has c3.out "0 sent (0.0 MB"
has c3.out "5 already there with the same size and MD5"
[ "$(jget "$T/c3.json" result.unchanged_shards)" -eq 5 ] ||
    fail "want 5 unchanged shards"
st vg verify gs://dst/ds/in.json
has vg.out "0 problems"

say "gs -> local: a shard unlike its manifest stops the copy, no manifest"
cp "$T/a/in-000000.tar" "$T/wrong.tar"
gs_put ds/in-000003.tar "$T/wrong.tar"
st_rc 1 c4 cp gs://dst/ds/in.json "$T/b"
has c4.err "gs://dst/ds/in-000003.tar: "
has c4.err "the manifest says"
has c4.err "no manifest was written"
[ ! -e "$T/b/in.json" ] || fail "a failed copy left a manifest"
[ ! -e "$T/b/in-000003.tar" ] || fail "the wrong shard was kept"
for n in 0 1 2; do
	cmp -s "$T/a/in-00000$n.tar" "$T/b/in-00000$n.tar" ||
	    fail "shard $n was not copied before the bad one"
done
ls -A "$T/b" | grep -q '\.part$' && fail "a partial file was left in $T/b"

say "s3 -> gs again mends the shard; gs -> local resumes where it stopped"
st c5 cp s3://src/ds/in.json gs://dst/ds/
has c5.out "1 sent"
has c5.out "4 already there"
st c6 cp gs://dst/ds/in.json "$T/b" --json "$T/c6.json"
has c6.out "2 sent"
has c6.out "3 already there"
[ "$(jget "$T/c6.json" result.unchanged_shards)" -eq 3 ] ||
    fail "want the 3 shards of the stopped copy unchanged"
same_dataset "$T/b"
# Written last: no shard is newer than the manifest.
for f in "$T"/b/*.tar; do
	[ "$f" -nt "$T/b/in.json" ] && fail "$f is newer than the manifest"
done

say "a manifest at the destination from before is removed first"
python3 -c 'import boto3
boto3.client("s3").put_object(Bucket="src", Key="bad/in.json", Body=b"{}")'
mkdir "$T/bad"
cp "$T/a/in.json" "$T/bad/in.json"
cp "$T"/a/in-00000[0-3].tar "$T/bad/"
cp "$T/wrong.tar" "$T/bad/in-000004.tar"
st_rc 1 c7 cp "$T/bad/in.json" s3://src/bad/
has c7.err "$T/bad/in-000004.tar: "
python3 - <<'EOF'
import boto3
keys = [o["Key"] for o in boto3.client("s3").list_objects_v2(
    Bucket="src", Prefix="bad/").get("Contents", [])]
assert "bad/in.json" not in keys, keys
assert "bad/in-000004.tar" not in keys, keys
EOF

say "a missing destination bucket is named, and nothing is copied"
st_rc 1 nob3 cp "$T/a/in.json" s3://nobucket/x/
has nob3.err "there is no bucket nobucket"
has nob3.err "cp does not make buckets"
st_rc 1 nobg cp "$T/a/in.json" gs://nobucket/x/
has nobg.err "there is no bucket nobucket"
st_rc 2 nohttp cp "$T/a/in.json" http://127.0.0.1:9/x/
has nohttp.err "cannot write to an http(s) URL"

say "from an http server; a folder of shards; --dry-run writes nothing"
mkdir -p "$T/www"
cp -r "$T/a" "$T/www/ds"
http_start "$T/www"
st c8 cp "$HTTP_URL/ds/in.json" "$T/h"
same_dataset "$T/h"
st c9 cp "$T/a/" "$T/f"
has c9.err "copying the 5 .tar files of the folder; it also holds in.json"
[ ! -e "$T/f/in.json" ] || fail "a folder copy wrote a manifest"
st c10 cp -n "$T/a/in.json" "$T/dry"
has c10.out "copy $T/a/in-000000.tar -> $T/dry/in-000000.tar"
[ ! -e "$T/dry" ] || fail "--dry-run made $T/dry"
st c11 cp --dry-run "$T/a/in.json" gs://dst/ds/
has c11.out "unchanged gs://dst/ds/in-000004.tar"
has c11.out "0 to copy"
st_rc 2 c12 cp "$T/a/in.json" "$T/a"
has c12.err "are the same folder"

say "--json -: standard output is the JSON alone"
st c13 cp "$T/a/in.json" "$T/j" --json -
python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
assert d["tool"] == "shardtool cp" and d["result"]["shards"] == 5, d' \
    "$T/c13.out" || fail "cp --json - is not the JSON alone"

say "on a terminal, a progress line: shards, bytes, rate, shards left"
if command -v script >/dev/null; then
	script -qec "'$SHARDTOOL' cp '$T/a/in.json' '$T/tty'" /dev/null |
	    tr '\r' '\n' >"$T/tty.out"
	grep -qE '5/5 shards, [0-9.]+/[0-9.]+ MB, [0-9.]+ MB/s, 0 left' \
	    "$T/tty.out" || { cat "$T/tty.out" >&2; fail "no progress line"; }
	"$SHARDTOOL" cp "$T/a/in.json" "$T/tty2" 2>"$T/notty.err" >/dev/null
	[ ! -s "$T/notty.err" ] || fail "progress when stderr is not a terminal"
fi
echo "PASS: cp"
