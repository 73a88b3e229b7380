#!/usr/bin/env bash
# cifar10-roundtrip.sh - pack a synthetic CIFAR-10 to PNG shards and read it
# back with the Python webdataset library (keys, labels, pixels), Python
# tarfile, GNU tar and bsdtar; the manifest matches the files.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_python webdataset PIL numpy
need_cmd bsdtar

synth_cifar "$T/src" --train 500 --test 100 --seed 11

for split in train test; do
	out="$T/out-$split"
	mkdir "$out"
	say "pack cifar10 --split $split --max-count 90 (several shards)"
	st pack-$split pack cifar10 "$T/src" --split "$split" --max-count 90 \
	    -o "$out/cifar10-$split-%06d.tar"
	has pack-$split.out "packed cifar10 $split"
	no_partial "$out"
	shards=$(shards_of "$out")
	n=$(echo "$shards" | wc -l)
	case $split in
	train) want=6 ;;	# 500 = 5 * 90 + 50
	test) want=2 ;;		# 100 = 90 + 10
	esac
	[ "$n" -eq "$want" ] || fail "$split: $n shards, want $want"
	[ -f "$out/cifar10-$split.json" ] ||
	    fail "no manifest $out/cifar10-$split.json: $(ls "$out")"

	# shellcheck disable=SC2086
	py cifar_roundtrip.py "$T/src" "$split" "$out/cifar10-$split.json" \
	    "$T/py-$split.list" $shards

	say "$split: manifest filesize and md5sum agree with stat and md5sum"
	python3 -c '
import json, sys
for s in json.load(open(sys.argv[1]))["shardlist"]:
    print(s["url"], s["filesize"], s["md5sum"])' "$out/cifar10-$split.json" >"$T/entries" ||
	    fail "reading $out/cifar10-$split.json"
	[ "$(wc -l <"$T/entries")" -eq "$n" ] || fail "the manifest lists $(wc -l <"$T/entries") shards, $n were written"
	while read -r url size md5; do
		[ "$(file_size "$out/$url")" = "$size" ] ||
		    fail "$url: manifest filesize $size, stat says $(file_size "$out/$url")"
		[ "$(file_md5 "$out/$url")" = "$md5" ] ||
		    fail "$url: manifest md5sum $md5, md5sum says $(file_md5 "$out/$url")"
	done <"$T/entries"

	say "$split: GNU tar and bsdtar list the same members as tarfile"
	: >"$T/gnu-$split.list"
	: >"$T/bsd-$split.list"
	for s in $shards; do
		run_rc 0 gnutar tar -tf "$s"
		[ ! -s "$T/gnutar.err" ] || { show gnutar; fail "GNU tar warns on $s"; }
		cat "$T/gnutar.out" >>"$T/gnu-$split.list"
		run_rc 0 gnutar-v tar -tvf "$s"
		[ ! -s "$T/gnutar-v.err" ] || { show gnutar-v; fail "GNU tar -v warns on $s"; }
		grep -v '^-r--r--r-- ' "$T/gnutar-v.out" >"$T/odd" || true
		[ ! -s "$T/odd" ] || fail "GNU tar -tvf $s: not all regular files with mode 0444: $(head -3 "$T/odd")"
		run_rc 0 bsdtar bsdtar -tf "$s"
		[ ! -s "$T/bsdtar.err" ] || { show bsdtar; fail "bsdtar warns on $s"; }
		cat "$T/bsdtar.out" >>"$T/bsd-$split.list"
		run_rc 0 bsdtar-v bsdtar -tvf "$s"
	done
	diff -u "$T/py-$split.list" "$T/gnu-$split.list" >&2 ||
	    fail "$split: GNU tar lists other members than Python tarfile"
	diff -u "$T/py-$split.list" "$T/bsd-$split.list" >&2 ||
	    fail "$split: bsdtar lists other members than Python tarfile"

	say "$split: GNU tar extracts bytes that match shardtool cat"
	first=$(echo "$shards" | head -1)
	mkdir "$T/x-$split"
	tar -xf "$first" -C "$T/x-$split"
	"$SHARDTOOL" cat "$first" "${split}_00003.png" >"$T/cat.png" ||
	    fail "shardtool cat ${split}_00003.png failed"
	cmp "$T/cat.png" "$T/x-$split/${split}_00003.png" ||
	    fail "shardtool cat and GNU tar disagree on ${split}_00003.png"
done

say "pack cifar10 --format jpg: JPEG members, labels kept"
mkdir "$T/out-jpg"
st pack-jpg pack cifar10 "$T/src" --split test --format jpg --quality 90 \
    -o "$T/out-jpg/c-%06d.tar"
python3 - "$T/src" "$T/out-jpg/c.json" <<'EOF' || fail "--format jpg round trip"
import io, sys
import numpy as np
from PIL import Image
sys.path.insert(0, __import__("os").environ["PY"])
from sktest import check, check_manifest, manifest_shards, planar_to_hwc, read_cifar, tar_samples
recs = read_cifar(sys.argv[1], "test")
check_manifest(sys.argv[2])
n = 0
for shard in manifest_shards(sys.argv[2]):
    for key, m in tar_samples(shard):
        label, planar = recs[int(key.split("_")[1])]
        check(sorted(m) == ["cls", "jpg"], "%s: members %s" % (key, sorted(m)))
        check(int(m["cls"]) == label, "%s: label" % key)
        im = Image.open(io.BytesIO(m["jpg"]))
        check(im.format == "JPEG" and im.size == (32, 32), "%s: %s %s" % (key, im.format, im.size))
        src = planar_to_hwc(planar)
        err = np.abs(np.asarray(im.convert("RGB"), dtype=int) - src).mean()
        # As close as PIL's own JPEG at that quality, give or take.
        buf = io.BytesIO()
        Image.fromarray(src).save(buf, "JPEG", quality=90)
        ref = np.abs(np.asarray(Image.open(buf).convert("RGB"), dtype=int) - src).mean()
        check(err <= 1.5 * ref + 2, "%s: mean error %.1f at quality 90, PIL's is %.1f" % (key, err, ref))
        n += 1
check(n == len(recs), "%d samples, want %d" % (n, len(recs)))
print("-- jpg: %d samples decode close to the records" % n)
EOF
echo "PASS: cifar10-roundtrip"
