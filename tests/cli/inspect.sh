#!/usr/bin/env bash
# inspect.sh - "shardtool ls", "ls -l" and "cat" on packed shards, through
# plain paths, file:// URLs, brace patterns, "::" lists and manifests.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_python PIL

synth_cifar "$T/c" --train 100 --test 30 --seed 61
synth_imagenet "$T/i" --classes 2 --per-class 4 --val 4 --seed 62
mkdir "$T/s" "$T/is"
st pack pack cifar10 "$T/c" --split test --max-count 10 -o "$T/s/x-%06d.tar"
st pack-i pack imagenet "$T/i" --max-count 3 -o "$T/is/in-%06d.tar"
[ "$(shards_of "$T/s" | wc -l)" -eq 3 ] || fail "want 3 shards"

say "ls SHARD: one line per sample, KEY<TAB>EXTS, in tar order"
st ls0 ls "$T/s/x-000000.tar"
for i in 0 1 2 3 4 5 6 7 8 9; do echo "test_0000$i	png cls"; done >"$T/want0"
diff -u "$T/want0" "$T/ls0.out" >&2 || fail "ls of the first shard"

say "ls -l SHARD: data offset, size and name as tarfile sees them"
st lsl ls -l "$T/s/x-000001.tar"
python3 - "$T/s/x-000001.tar" >"$T/wantl" <<'EOF' || fail "tarfile listing"
import sys, tarfile
for ti in tarfile.open(sys.argv[1]):
    print(ti.offset_data, ti.size, ti.name)
EOF
diff -u "$T/wantl" "$T/lsl.out" >&2 || fail "ls -l differs from tarfile"

say "brace pattern, '::' list, file:// URL and manifest give the same listing"
st ls-brace ls "$T/s/x-{000000..000002}.tar"
st ls-man ls "$T/s/x.json"
st ls-list ls "$T/s/x-000000.tar::$T/s/x-{000001,000002}.tar"
st ls-file ls "file://$T/s/x-{000000..000002}.tar"
{
	for s in 0 1 2; do
		[ $s -eq 0 ] || echo
		echo "$T/s/x-00000$s.tar:"
		"$SHARDTOOL" ls "$T/s/x-00000$s.tar"
	done
} >"$T/want-all"
diff -u "$T/want-all" "$T/ls-brace.out" >&2 || fail "ls of a brace pattern"
diff -u "$T/want-all" "$T/ls-man.out" >&2 || fail "ls of the manifest"
diff -u "$T/want-all" "$T/ls-list.out" >&2 || fail "ls of a '::' list"
[ "$(grep -c '	png cls$' "$T/ls-file.out")" -eq 30 ] ||
    { show ls-file; fail "ls of file:// URLs: want 30 samples"; }
grep -c '^test_000[0-2][0-9]	png cls$' "$T/ls-brace.out" | grep -qx 30 ||
    fail "ls of the brace pattern: want the 30 test keys"

say "cat URL KEY.EXT: the member's bytes"
python3 - "$T/c" "$T/want.cls" <<'EOF' || fail "reading the expected label"
import sys
sys.path.insert(0, __import__("os").environ["PY"])
from sktest import read_cifar
label, _ = read_cifar(sys.argv[1], "test")[25]
open(sys.argv[2], "w").write(str(label))
EOF
"$SHARDTOOL" cat "$T/s/x-000002.tar" test_00025.cls >"$T/got.cls" || fail "cat test_00025.cls"
cmp "$T/want.cls" "$T/got.cls" || fail "cat test_00025.cls: '$(cat "$T/got.cls")', want '$(cat "$T/want.cls")'"
for url in "$T/s/x-{000000..000002}.tar" "$T/s/x.json" "$T/s/x-000002.tar"; do
	"$SHARDTOOL" cat "$url" test_00025.png >"$T/got.png" || fail "cat $url test_00025.png"
	python3 - "$T/s/x-000002.tar" "$T/got.png" <<'EOF' || fail "cat $url: bytes differ from the member"
import sys, tarfile
tf = tarfile.open(sys.argv[1])
assert tf.extractfile("test_00025.png").read() == open(sys.argv[2], "rb").read()
EOF
done

say "cat of a passthrough JPEG equals the source file"
first=$(ls "$T/i/train" | head -1)
img=$(ls "$T/i/train/$first" | head -1)
key=${img%.JPEG}
"$SHARDTOOL" cat "$T/is/in.json" "$key.json" >"$T/meta.json" || fail "cat $key.json"
grep -qF "\"train/$first/$img\"" "$T/meta.json" || fail "$key.json does not name train/$first/$img"
"$SHARDTOOL" cat "$T/is/in.json" "$key.jpg" >"$T/got.jpg" || fail "cat $key.jpg"
if python3 -c '
import sys
from PIL import Image
im = Image.open(sys.argv[1])
sys.exit(0 if im.format == "JPEG" and im.mode == "RGB" else 1)' "$T/i/train/$first/$img"; then
	cmp "$T/got.jpg" "$T/i/train/$first/$img" || fail "cat $key.jpg is not the source bytes"
fi

say "cat of a missing member fails and names it"
st_rc 1 cat-missing cat "$T/s/x.json" test_99999.png
has cat-missing.err "test_99999.png"
st_rc 2 cat-args cat "$T/s/x.json"
is_usage_error cat-args

say "a bad brace pattern is a usage error"
st_rc 2 brace-bad ls "$T/s/x-{000000..000002.tar"
is_usage_error brace-bad
echo "PASS: inspect"
