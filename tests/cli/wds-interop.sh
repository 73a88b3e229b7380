#!/usr/bin/env bash
# wds-interop.sh - shards written by the Python webdataset ShardWriter (a PAX
# header on every member) and a GNU-format tar pass "shardtool ls" and
# "verify", and ls reports the keys, extensions and offsets Python wrote.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_python webdataset PIL

mkdir "$T/w"
py wds_write.py "$T/w"

for s in "$T"/w/wds-000000.tar "$T"/w/wds-000001.tar "$T"/w/wds-000002.tar \
    "$T/w/gnu.tar"; do
	b=${s%.tar}
	name=$(basename "$s")
	say "ls $name: keys and extensions as written"
	st ls ls "$s"
	diff -u "$b.ls" "$T/ls.out" >&2 || fail "shardtool ls $name differs from what Python wrote"
	say "ls -l $name: data offsets and sizes as tarfile sees them"
	st lsl ls -l "$s"
	diff -u "$b.lsl" "$T/lsl.out" >&2 || fail "shardtool ls -l $name differs from tarfile"
	say "verify --decode $name"
	st verify verify --decode "$s"
	has verify.out " 0 problems"
done

say "ls and verify over all three webdataset shards as a brace pattern"
st lsall ls "$T/w/wds-{000000..000002}.tar"
for s in "$T"/w/wds-00000[0-2].tar; do
	has lsall.out "$s:"
done
st verify-all verify "$T/w/wds-{000000..000002}.tar"
has verify-all.out "verified 3 shards, 13 samples"

say "shardtool index of the webdataset shards gives a manifest that verifies"
st index index -o "$T/w/wds.json" "$T/w/wds-{000000..000002}.tar"
python3 - "$T/w/wds.json" <<'EOF' || fail "manifest of webdataset shards"
import sys
sys.path.insert(0, __import__("os").environ["PY"])
from sktest import check_manifest, check
m = check_manifest(sys.argv[1])
check([s["nsamples"] for s in m["shardlist"]] == [5, 5, 3], "nsamples %r" % m["shardlist"])
EOF
st verify-man verify "$T/w/wds.json"
has verify-man.out " 0 problems"

say "cat a member of a PAX-headed shard, including the long name"
"$SHARDTOOL" cat "$T/w/wds-000002.tar" "long/$(printf 'k%.0s' $(seq 120)).txt" \
    >"$T/long.txt" || fail "cat of the long-named member"
[ "$(cat "$T/long.txt")" = "sample 12" ] || fail "long member holds '$(cat "$T/long.txt")'"
echo "PASS: wds-interop"
