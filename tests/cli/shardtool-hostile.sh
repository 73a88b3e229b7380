#!/usr/bin/env bash
# shardtool-hostile.sh - shardtool on hostile input and a hostile output
# folder (issue 10): index --dali refuses compressed shards and .idx names
# that collide; verify reports every member and sample that extract refuses
# or the loader cannot use, with the URL and offset; a symbolic link planted
# at a temporary name is never written through (index, synth); a sample over
# the sample size cap is reported by verify and skipped by cat and extract.
#
# HOSTILE_ONLY=CASE runs one case (dali-gz, dali-clash, verify, part-index,
# part-synth, too-big), to see each fail on its own against an old binary.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_python

case_on() { [ -z "${HOSTILE_ONLY:-}" ] || [ "$HOSTILE_ONLY" = "$1" ]; }

synth_cifar "$T/c" --train 20 --test 20 --seed 101
mkdir "$T/s"
st pack pack cifar10 "$T/c" --split test --max-count 10 -o "$T/s/g-%06d.tar"
good="$T/s/g-000000.tar"
good2="$T/s/g-000001.tar"

# line_has TAG.err TEXT...: one line of the file holds every TEXT.
line_has() {
	local f=$1 l
	shift
	while IFS= read -r l; do
		local t ok=1
		for t in "$@"; do
			case $l in *"$t"*) ;; *) ok=0; break ;; esac
		done
		[ $ok = 0 ] || return 0
	done <"$T/$f"
	show "${f%.*}"
	fail "$f: no line with all of: $*"
}

# ---------------------------------------------------------------------------
if case_on dali-gz; then
say "index --dali refuses a gzip shard: its offsets would be into the decompressed stream"
mkdir "$T/gz" "$T/gz-idx"
gzip -c "$good" >"$T/gz/z.tar.gz"
# gzip bytes under a .tar name: the content decides, not the name.
gzip -c "$good" >"$T/gz/y.tar"
for z in z.tar.gz y.tar; do
	st_rc 1 "dali-$z" index --dali "$T/gz/$z"
	has "dali-$z.err" "$T/gz/$z"
	has "dali-$z.err" "compressed"
	st_rc 1 "dali-o-$z" index --dali -o "$T/gz-idx" "$T/gz/$z"
	has "dali-o-$z.err" "$T/gz/$z"
done
[ -z "$(find "$T/gz" "$T/gz-idx" -name '*.idx*')" ] ||
    fail "index --dali of a compressed shard wrote: $(find "$T/gz" "$T/gz-idx" -name '*.idx*')"
# The manifest index still reads it: a sample count needs no offsets.
st index-gz index "$T/gz/z.tar.gz"
has index-gz.out '"nsamples": 10'
fi

# ---------------------------------------------------------------------------
if case_on dali-clash; then
say "index --dali -o DIR: two shards with one base name are refused before any write"
mkdir -p "$T/a" "$T/b" "$T/clash"
cp "$good" "$T/a/s.tar"
cp "$good2" "$T/b/s.tar"
printf 'sentinel\n' >"$T/clash/s.idx"
st_rc 2 clash index --dali -o "$T/clash" "$T/a/s.tar" "$T/b/s.tar"
is_usage_error clash
line_has clash.err "$T/a/s.tar" "$T/b/s.tar" "s.idx"
[ "$(cat "$T/clash/s.idx")" = sentinel ] || fail "$T/clash/s.idx was overwritten"
[ "$(ls -A "$T/clash")" = s.idx ] || fail "clash left: $(ls -A "$T/clash")"
# A good shard first: still nothing written.
mkdir "$T/clash2"
st_rc 2 clash2 index --dali -o "$T/clash2" "$good" "$T/a/s.tar" "$T/b/s.tar"
[ -z "$(ls -A "$T/clash2")" ] || fail "clash2 left: $(ls -A "$T/clash2")"
say "index --dali without -o: S.tar and S name the same S.idx"
cp "$good2" "$T/a/s"
st_rc 2 clash3 index --dali "$T/a/s.tar" "$T/a/s"
line_has clash3.err "$T/a/s.tar" "$T/a/s.idx"
[ ! -e "$T/a/s.idx" ] || fail "clash3 wrote $T/a/s.idx"
fi

# ---------------------------------------------------------------------------
if case_on verify; then
say "verify reports unsafe members and unusable samples with URL and offset"
mkdir "$T/v"
python3 - "$good" "$T/v/evil.tar" >"$T/v/offsets" <<'EOF' || fail "making evil.tar"
import io, sys, tarfile
src = tarfile.open(sys.argv[1])
png = [src.extractfile(m).read() for m in src.getmembers() if m.name.endswith(".png")]

def add(tf, name, data=None, kind=tarfile.REGTYPE, target=""):
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.mode = 0o644
    if kind == tarfile.REGTYPE:
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    else:
        ti.linkname = target
        tf.addfile(ti)

with tarfile.open(sys.argv[2], "w", format=tarfile.GNU_FORMAT) as tf:
    add(tf, "good0.png", png[0]); add(tf, "good0.cls", b"3")
    add(tf, "../evil.png", png[1]); add(tf, "../evil.cls", b"1")
    add(tf, "/abs/evil.png", png[2]); add(tf, "/abs/evil.cls", b"2")
    add(tf, "passwd.png", kind=tarfile.SYMTYPE, target="/etc/passwd")
    add(tf, "hard.png", kind=tarfile.LNKTYPE, target="good0.png")
    add(tf, "fifo.png", kind=tarfile.FIFOTYPE)
    add(tf, "noimg.cls", b"4")
    add(tf, "nolabel.png", png[3])
    add(tf, "badlabel.png", png[4]); add(tf, "badlabel.cls", b"-1")
    add(tf, "good1.png", png[5]); add(tf, "good1.cls", b"5")
for m in tarfile.open(sys.argv[2]).getmembers():
    print(m.name, m.offset)
EOF
off() { awk -v n="$1" '$1 == n { print $2 }' "$T/v/offsets"; }
evil="$T/v/evil.tar"
st_rc 1 verify-evil verify --decode "$evil"
for name in ../evil.cls /abs/evil.cls passwd.png hard.png fifo.png; do
	line_has verify-evil.err "$evil:" "offset $(off "$name"):" "$name"
done
line_has verify-evil.err "$evil:" "offset $(off passwd.png):" "/etc/passwd"
line_has verify-evil.err "$evil: key noimg at offset $(off noimg.cls):" "image"
line_has verify-evil.err "$evil: key nolabel at offset $(off nolabel.png):" "label"
line_has verify-evil.err "$evil: key badlabel at offset $(off badlabel.cls):" "badlabel.cls"
for key in good0 good1; do
	hasnt verify-evil.err "key $key "
done
# The loader's samples are the runs of regular files: good0, ../evil,
# /abs/evil, noimg, nolabel, badlabel, good1; the links are no samples.
has verify-evil.out "verified 1 shards, 7 samples"
# Without --decode the same problems.
st_rc 1 verify-evil2 verify "$evil"
line_has verify-evil2.err "$evil:" "offset $(off ../evil.cls):" "../evil.cls"
line_has verify-evil2.err "$evil:" "offset $(off passwd.png):" "passwd.png"
line_has verify-evil2.err "$evil: key noimg at offset $(off noimg.cls):" "image"
# extract refuses what verify reported as unsafe, and agrees on the rest.
mkdir -p "$T/v/x/dest"
st_rc 1 extract-evil extract -C "$T/v/x/dest" "$evil"
for name in ../evil.cls /abs/evil.cls passwd.png fifo.png; do
	line_has extract-evil.err "$evil:" "$name at offset $(off "$name"):"
done
[ -f "$T/v/x/dest/good1.png" ] || fail "extract skipped good1.png"

say "verify: shards without images or labels (text only) stay fine"
python3 - "$T/v/text.tar" <<'EOF' || fail "making text.tar"
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w") as tf:
    for i in range(3):
        for ext, data in (("txt", b"hello %d" % i), ("json", b"{}")):
            ti = tarfile.TarInfo("t%d.%s" % (i, ext))
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
EOF
st verify-text verify --decode "$T/v/text.tar"
has verify-text.out "verified 1 shards, 3 samples, 6 members: 0 problems"
say "verify: a good packed shard still has no problems"
st verify-good verify --decode "$T/s/g.json"
has verify-good.out "0 problems"
fi

# ---------------------------------------------------------------------------
# plant NAME...: a symbolic link NAME.part -> $victim for each NAME.
victim="$T/victim"
plant() {
	local n
	for n in "$@"; do
		mkdir -p "$(dirname "$n")"
		ln -s "$victim" "$n.part"
	done
}
victim_intact() {
	[ "$(cat "$victim")" = "do not touch" ] ||
	    fail "$1 wrote through a link at a temporary name: victim holds '$(head -c 60 "$victim")'"
}
# not_links DIR: the outputs under DIR are files, not the planted links.
not_links() {
	local l
	l=$(find "$1" -type l ! -name '*.part' | head -3)
	[ -z "$l" ] || fail "outputs are links: $l"
}

if case_on part-index; then
say "index --dali: a link planted at SHARD.idx.part is not written through"
printf 'do not touch' >"$victim"
mkdir "$T/pi" "$T/pi-ref"
cp "$good" "$T/pi/g.tar"
cp "$good" "$T/pi-ref/g.tar"
st ref-dali index --dali "$T/pi-ref/g.tar"
plant "$T/pi/g.idx"
st part-dali index --dali "$T/pi/g.tar"
victim_intact "index --dali"
cmp "$T/pi/g.idx" "$T/pi-ref/g.idx" || fail "index --dali wrote a wrong g.idx"
not_links "$T/pi"
[ -L "$T/pi/g.idx.part" ] || fail "the planted link was removed or replaced"
mkdir "$T/pi-o"
plant "$T/pi-o/g.idx"
st part-dali-o index --dali -o "$T/pi-o" "$T/pi/g.tar"
victim_intact "index --dali -o"
cmp "$T/pi-o/g.idx" "$T/pi-ref/g.idx" || fail "index --dali -o wrote a wrong g.idx"
say "index -o M.json: a link at M.json.part is not written through"
plant "$T/pi/m.json"
st part-man index -o "$T/pi/m.json" "$T/pi/g.tar"
victim_intact "index -o"
python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); assert m["shardlist"][0]["nsamples"] == 10' \
    "$T/pi/m.json" || fail "index -o wrote a wrong manifest"
fi

if case_on part-synth; then
say "synth: links planted at every FILE.part are not written through"
printf 'do not touch' >"$victim"
for kind in cifar10 imagenet; do
	if [ $kind = cifar10 ]; then
		args=(--train 20 --test 10 --seed 7)
	else
		args=(--classes 2 --per-class 2 --val 2 --seed 7)
	fi
	st "ref-$kind" synth $kind "$T/ps-ref-$kind" "${args[@]}"
	files=()
	while IFS= read -r f; do
		files+=("$T/ps-$kind/$f")
	done < <(cd "$T/ps-ref-$kind" && find . -type f | sed 's|^\./||')
	[ ${#files[@]} -gt 3 ] || fail "synth $kind wrote only ${#files[@]} files"
	plant "${files[@]}"
	st "part-$kind" synth $kind "$T/ps-$kind" "${args[@]}"
	victim_intact "synth $kind"
	not_links "$T/ps-$kind"
	same_tree "$T/ps-ref-$kind" "$T/ps-$kind" ||
	    fail "synth $kind with planted links wrote other files"
done
fi

# ---------------------------------------------------------------------------
if case_on too-big; then
say "a sample over the sample size cap: verify reports it, cat and extract skip it"
mkdir -p "$T/tb/x"
# big.txt claims 257 MiB, there in the file but sparse; its sample is over
# SK_SAMPLE_MAX_BYTES (256 MiB). small samples sit on both sides.
python3 - "$good" "$T/tb/big.tar" >"$T/tb/offsets" <<'EOF' || fail "making big.tar"
import io, sys, tarfile
src = tarfile.open(sys.argv[1])
png = [src.extractfile(m).read() for m in src.getmembers() if m.name.endswith(".png")]
BIG = 257 << 20
out = open(sys.argv[2], "wb")
def member(name, data=None, size=None):
    ti = tarfile.TarInfo(name)
    ti.mode = 0o644
    ti.size = len(data) if data is not None else size
    off = out.tell()
    out.write(ti.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict"))
    if data is not None:
        out.write(data + b"\0" * (-len(data) % 512))
    else:
        out.seek(size + (-size % 512), 1)
    print(name, off)
member("a.png", png[0]); member("a.cls", b"0")
member("big.png", png[1]); member("big.cls", b"1"); member("big.txt", size=BIG)
member("z.png", png[2]); member("z.cls", b"2")
out.write(b"\0" * 1024)
out.close()
EOF
off() { awk -v n="$1" '$1 == n { print $2 }' "$T/tb/offsets"; }
big="$T/tb/big.tar"
st_rc 1 verify-big verify --decode "$big"
line_has verify-big.err "$big: key big at offset $(off big.png):" "bytes"
has verify-big.out "verified 1 shards, 3 samples"
st_rc 1 cat-big cat "$big" big.cls
line_has cat-big.err "$big" "big" "offset $(off big.png)"
[ ! -s "$T/cat-big.out" ] || fail "cat wrote a member of an over-size sample"
"$SHARDTOOL" cat "$big" z.cls >"$T/z.cls" || fail "cat z.cls after the big sample"
[ "$(cat "$T/z.cls")" = 2 ] || fail "cat z.cls gave '$(cat "$T/z.cls")'"
st_rc 1 extract-big extract -C "$T/tb/x" "$big"
line_has extract-big.err "$big" "big" "offset $(off big.png)"
[ -f "$T/tb/x/a.png" ] && [ -f "$T/tb/x/z.cls" ] || fail "extract lost the small samples"
[ ! -e "$T/tb/x/big.cls" ] && [ ! -e "$T/tb/x/big.txt" ] ||
    fail "extract wrote members of an over-size sample"
fi

echo "PASS: shardtool-hostile"
