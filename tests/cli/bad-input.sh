#!/usr/bin/env bash
# bad-input.sh - bad input gets a clear error (exit 1 naming the file, URL
# or offset; exit 2 and the usage for bad flags) and leaves no partial
# shard under a final name.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_python PIL

# The permission cases run as an unprivileged user, who must reach $T and
# run the tool: not so as root with a build or TMPDIR under a 0700 home,
# where they are skipped, saying so.
chmod 755 "$T"
if [ "$AS_USER_OK" = 1 ] && ! { as_user "$SHARDTOOL" --version &&
    as_user test -x "$T"; } >/dev/null 2>&1; then
	echo "note: nobody cannot run $SHARDTOOL or reach $T: the permission cases are skipped"
	AS_USER_OK=0
fi
synth_cifar "$T/c" --train 60 --test 10 --seed 41

# ---------------------------------------------------------------------------
say "missing source: cifar10, imagenet and folder name it"
mkdir "$T/out"
for kind in cifar10 imagenet folder; do
	st_rc 1 missing-$kind pack $kind "$T/nope" -o "$T/out/x-%06d.tar"
	has missing-$kind.err "$T/nope"
	hasnt missing-$kind.err "usage:"
done
no_shards "$T/out"

# ---------------------------------------------------------------------------
say "unreadable source"
if [ "$AS_USER_OK" = 1 ]; then
	# A CIFAR file the user may not read, an output folder it may write.
	cp -r "$T/c" "$T/c-noread"
	chmod 755 "$T/c-noread"
	chmod 644 "$T/c-noread"/*
	chmod 000 "$T/c-noread/data_batch_2.bin"
	mkdir "$T/out-rw"
	chmod 777 "$T/out-rw"
	run_rc 1 noread-cifar as_user "$SHARDTOOL" pack cifar10 "$T/c-noread" \
	    -o "$T/out-rw/x-%06d.tar"
	has noread-cifar.err "$T/c-noread/data_batch_2.bin"
	has noread-cifar.err "ermission denied"
	no_shards "$T/out-rw"

	# A folder tree whose class folder the user may not list.
	python3 "$PY/make_folder.py" "$T/f-noread" || fail "make_folder.py"
	chmod -R a+rX "$T/f-noread"
	chmod 000 "$T/f-noread/apple"
	run_rc 1 noread-folder as_user "$SHARDTOOL" pack folder "$T/f-noread" \
	    -o "$T/out-rw/f-%06d.tar"
	has noread-folder.err "$T/f-noread/apple"
	no_shards "$T/out-rw"
	chmod 755 "$T/f-noread/apple"
else
	echo "SKIP (sub-case): running as root without setpriv; cannot test an unreadable source"
fi

# ---------------------------------------------------------------------------
say "truncated CIFAR file: the error names the file and the offset"
cp -r "$T/c" "$T/c-trunc"
size=$(file_size "$T/c-trunc/data_batch_3.bin")
truncate -s $((size - 100)) "$T/c-trunc/data_batch_3.bin"
st_rc 1 trunc pack cifar10 "$T/c-trunc" -o "$T/out/t-%06d.tar"
has trunc.err "$T/c-trunc/data_batch_3.bin"
has trunc.err "offset"
# The record cut short starts at the last whole record.
has trunc.err "$(( (size - 100) / 3073 * 3073 ))"
no_shards "$T/out"

# ---------------------------------------------------------------------------
say "CIFAR python-pickle layout: a message that asks for the binary version"
mkdir "$T/pickle"
printf '\200\002}q\000(U\005batch' >"$T/pickle/data_batch_1"
printf '\200\002}q\000(U\005batch' >"$T/pickle/test_batch"
printf '\200\002}q\000' >"$T/pickle/batches.meta"
st_rc 1 pickle pack cifar10 "$T/pickle" -o "$T/out/p-%06d.tar"
has pickle.err "binary"
has pickle.err "$T/pickle"
no_shards "$T/out"

# ---------------------------------------------------------------------------
say "output folder not writable"
if [ "$AS_USER_OK" = 1 ]; then
	chmod -R a+rX "$T/c"
	mkdir "$T/out-ro"
	chmod 555 "$T/out-ro"
	run_rc 1 ro as_user "$SHARDTOOL" pack cifar10 "$T/c" \
	    -o "$T/out-ro/x-%06d.tar"
	has ro.err "$T/out-ro/x-000000.tar"
	has ro.err "ermission denied"
	no_shards "$T/out-ro"
else
	echo "SKIP (sub-case): running as root without setpriv; cannot test a read-only folder"
fi
# A path under a regular file fails for anyone (ENOTDIR).
: >"$T/plainfile"
st_rc 1 notdir pack cifar10 "$T/c" -o "$T/plainfile/x-%06d.tar"
has notdir.err "$T/plainfile/x-000000.tar"
has notdir.err "Not a directory"
# A missing folder is made, as a user expects (issue 13).
st nodir pack cifar10 "$T/c" -o "$T/no/such/x-%06d.tar"
[ -f "$T/no/such/x.json" ] || fail "no manifest in the folder pack made"

# ---------------------------------------------------------------------------
say "corrupt JPEGs in a folder source: skipped and counted by default"
python3 "$PY/make_folder.py" "$T/f" || fail "make_folder.py"
head -c 2000 /dev/zero | tr '\0' 'x' >"$T/f/apple/0garbage.jpg"
python3 - "$T/f/zebra/z1.jpg" "$T/f/zebra/z2trunc.jpg" <<'EOF' || fail "truncating a JPEG"
import sys
data = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(data[: len(data) // 2])
EOF
mkdir "$T/out-f"
st corrupt pack folder "$T/f" -o "$T/out-f/f-%06d.tar"
grep -q "^ *skipped: 2\b" "$T/corrupt.out" || { show corrupt; fail "want 'skipped: 2' in the summary"; }
has corrupt.err "0garbage.jpg"
has corrupt.err "z2trunc.jpg"
st verify-f verify "$T/out-f/f.json"
has verify-f.out "verified 1 shards, 7 samples"

say "corrupt JPEG with --strict: exit 1, no shard and no manifest"
mkdir "$T/out-s"
# apple/0garbage.jpg sorts before the apple images, in the first shard.
st_rc 1 strict pack folder "$T/f" --strict -o "$T/out-s/f-%06d.tar"
has strict.err "0garbage.jpg"
no_shards "$T/out-s"

say "--strict with the bad image after complete shards: those stay whole"
mkdir "$T/out-s1"
st_rc 1 strict1 pack folder "$T/f" --strict --max-count 1 -j 2 \
    -o "$T/out-s1/f-%06d.tar"
no_partial "$T/out-s1"
[ ! -e "$T/out-s1/f.json" ] || fail "--strict failure left a manifest"
for s in $(shards_of "$T/out-s1"); do
	st verify-s1 verify "$s"
done

say "imagenet with a corrupt JPEG: skipped and counted, fatal with --strict"
synth_imagenet "$T/i" --classes 2 --per-class 3 --val 2 --seed 42
w=$(ls "$T/i/train" | head -1)
printf '\377\330\377\340garbage' >"$T/i/train/$w/${w}_0.JPEG"
mkdir "$T/out-i" "$T/out-is"
st corrupt-i pack imagenet "$T/i" -o "$T/out-i/i-%06d.tar"
grep -q "^ *skipped: 1\b" "$T/corrupt-i.out" || { show corrupt-i; fail "want 'skipped: 1'"; }
has corrupt-i.err "${w}_0.JPEG"
st_rc 1 strict-i pack imagenet "$T/i" --strict -o "$T/out-is/i-%06d.tar"
has strict-i.err "${w}_0.JPEG"
no_shards "$T/out-is"

# ---------------------------------------------------------------------------
say "truncated and garbage shards given to verify and ls"
mkdir "$T/sh"
st pack-sh pack cifar10 "$T/c" --split test -o "$T/sh/good-%06d.tar"
good="$T/sh/good-000000.tar"
size=$(file_size "$good")
head -c $((size / 2 + 100)) "$good" >"$T/sh/trunc.tar"
python3 -c '
import random, sys
random.seed(7)
sys.stdout.buffer.write(bytes(random.randrange(256) for _ in range(8192)))
' >"$T/sh/garbage.tar"
yes "this is not a tar file" | head -c 4096 >"$T/sh/text.tar"
# A valid header with a wrong checksum after the first sample.
python3 - "$good" "$T/sh/badsum.tar" <<'EOF' || fail "making badsum.tar"
import sys
data = bytearray(open(sys.argv[1], "rb").read())
# The second member's header: after the first header and its data.
size = int(data[124:136].rstrip(b"\0 ").decode(), 8)
off = 512 + (size + 511) // 512 * 512
data[off + 148:off + 156] = b"0000000\0"
open(sys.argv[2], "wb").write(data)
EOF
for bad in trunc garbage text badsum; do
	for cmd in verify ls; do
		st_rc 1 $cmd-$bad $cmd "$T/sh/$bad.tar"
		has $cmd-$bad.err "$T/sh/$bad.tar"
		has $cmd-$bad.err "offset"
	done
done
has verify-trunc.out "1 problems"
st_rc 1 cat-trunc cat "$T/sh/trunc.tar" test_00009.png
has cat-trunc.err "$T/sh/trunc.tar"
st_rc 1 missing-shard ls "$T/sh/nope.tar"
has missing-shard.err "$T/sh/nope.tar"
say "a byte changed in a PNG: verify --decode names the key, the manifest's md5 catches it"
mkdir "$T/mod"
cp "$good" "$T/mod/good-000000.tar"
cp "$T/sh/good.json" "$T/mod/good.json"
# Inside the data of the first member, test_00000.png (data at 512).
printf 'X' | dd of="$T/mod/good-000000.tar" bs=1 seek=600 conv=notrunc 2>/dev/null
st_rc 1 decode-mod verify --decode "$T/mod/good-000000.tar"
has decode-mod.err "$T/mod/good-000000.tar"
has decode-mod.err "test_00000"
st_rc 1 md5-mod verify "$T/mod/good.json"
has md5-mod.err "md5"
has md5-mod.err "$T/mod/good-000000.tar"

say "verify keeps going: a good shard after a bad one is still checked"
st_rc 1 verify-mixed verify "$T/sh/garbage.tar" "$good"
has verify-mixed.out "verified 2 shards, 10 samples"

# ---------------------------------------------------------------------------
say "bad flags: exit 2 and the usage"
st_rc 2 flag-unknown pack cifar10 "$T/c" --bogus -o "$T/out/x-%06d.tar"
is_usage_error flag-unknown
st_rc 2 flag-maxcount pack cifar10 "$T/c" --max-count 0 -o "$T/out/x-%06d.tar"
is_usage_error flag-maxcount
has flag-maxcount.err "--max-count"
st_rc 2 flag-quality pack cifar10 "$T/c" --quality 101 -o "$T/out/x-%06d.tar"
is_usage_error flag-quality
has flag-quality.err "--quality"
st_rc 2 flag-pattern pack cifar10 "$T/c" -o "$T/out/x.tar"
is_usage_error flag-pattern
st_rc 2 flag-pattern2 pack cifar10 "$T/c" -o "$T/out/x-%d-%d.tar"
is_usage_error flag-pattern2
st_rc 2 flag-pattern3 pack cifar10 "$T/c" -o "$T/out/%03d/data.tar"
has flag-pattern3.err "goes in the file name, not a folder"
st_rc 2 flag-noout pack cifar10 "$T/c"
is_usage_error flag-noout
st_rc 2 flag-kind pack mnist "$T/c" -o "$T/out/x-%06d.tar"
is_usage_error flag-kind
st_rc 2 flag-maxsize pack cifar10 "$T/c" --max-size 12Q -o "$T/out/x-%06d.tar"
is_usage_error flag-maxsize
st_rc 2 flag-jobs pack cifar10 "$T/c" -j 0 -o "$T/out/x-%06d.tar"
is_usage_error flag-jobs
has flag-jobs.err "shardtool pack: -j 0: not a whole number from 1 to 1024"
st_rc 2 flag-maxsize2 pack cifar10 "$T/c" --max-size 12X -o "$T/out/x-%06d.tar"
is_usage_error flag-maxsize2
has flag-maxsize2.err "shardtool pack: --max-size 12X: not a size such as 64M"
st_rc 2 flag-noval pack cifar10 "$T/c" -o "$T/out/x-%06d.tar" --max-size
has flag-noval.err "--max-size needs a value"
st_rc 2 flag-gone pack cifar10 "$T/c" -o "$T/out/x-%06d.tar" --maxcount 5
has flag-gone.err "--maxcount: unknown option; did you mean --max-count?"
st_rc 2 flag-typo pack cifar10 "$T/c" -o "$T/out/x-%06d.tar" --max-szie=4M
has flag-typo.err "--max-szie=4M: unknown option; did you mean --max-size?"
st_rc 2 flag-far pack cifar10 "$T/c" -o "$T/out/x-%06d.tar" --zzzzzz
has flag-far.err "--zzzzzz: unknown option"
hasnt flag-far.err "did you mean"
st_rc 2 flag-gone2 pack cifar10 "$T/c" -o "$T/out/x-%06d.tar" --shuffle 5
has flag-gone2.err "--shuffle: unknown option"
mkdir "$T/out-sz"
st flag-sizes pack cifar10 "$T/c" -o "$T/out-sz/x-%06d.tar" --max-size 1.5M -q
st flag-sizes2 pack cifar10 "$T/c" -o "$T/out-sz/x-%06d.tar" --max-size 64MiB
st flag-version -V
grep -qE '^shardtool \(shardkit\) [0-9]' "$T/flag-version.out" ||
    fail "-V printed: $(cat "$T/flag-version.out")"
st_rc 2 flag-split pack cifar10 "$T/c" --split val -o "$T/out/x-%06d.tar"
is_usage_error flag-split
st_rc 2 flag-ls ls --bogus "$good"
is_usage_error flag-ls
st_rc 2 flag-verify verify
is_usage_error flag-verify
st_rc 2 flag-cmd frobnicate
st_rc 2 flag-none
no_shards "$T/out"

# ---------------------------------------------------------------------------
say "a shard cut at a sample boundary (no end-of-archive blocks): verify fails"
# Every shard shardtool writes ends with two zero blocks; without them the
# shard was cut short, even when the cut falls between two members.
cut=$(python3 - "$good" <<'EOF'
import sys, tarfile
m = tarfile.open(sys.argv[1]).getmembers()[3]	# end of the second sample
print(m.offset_data + (m.size + 511) // 512 * 512)
EOF
) || fail "finding a sample boundary"
head -c "$cut" "$good" >"$T/sh/cut.tar"
st_rc 1 verify-cut verify "$T/sh/cut.tar"
has verify-cut.err "$T/sh/cut.tar"
has verify-cut.err "offset"
# ---------------------------------------------------------------------------
say "a zeroed header or two tars joined: the members after it are not lost"
# libarchive takes one zero block as the end of the archive; members that
# follow it must not vanish with exit 0.
hdr=$(python3 - "$good" <<'EOF'
import sys, tarfile
print(tarfile.open(sys.argv[1]).getmembers()[2].offset)	# a sample's first header
EOF
) || fail "finding a header"
cp "$good" "$T/sh/zeroed.tar"
dd if=/dev/zero of="$T/sh/zeroed.tar" bs=512 seek=$((hdr / 512)) count=1 conv=notrunc 2>/dev/null
st_rc 1 verify-zeroed verify "$T/sh/zeroed.tar"
has verify-zeroed.err "$T/sh/zeroed.tar"
has verify-zeroed.err "offset"
cat "$good" "$good" >"$T/sh/joined.tar"
st_rc 1 ls-joined ls "$T/sh/joined.tar"
has ls-joined.err "end-of-archive"

# ---------------------------------------------------------------------------
say "a failed re-pack leaves no manifest from the run before"
mkdir "$T/out-r"
st repack1 pack folder "$T/f" --max-count 1 -o "$T/out-r/f-%06d.tar"
[ -e "$T/out-r/f.json" ] || fail "first pack wrote no manifest"
st_rc 1 repack2 pack folder "$T/f" --strict --max-count 1 -o "$T/out-r/f-%06d.tar"
[ ! -e "$T/out-r/f.json" ] || fail "a manifest of the earlier run survived a failed pack"

# ---------------------------------------------------------------------------
say "every image skipped: exit 1, not an empty dataset"
mkdir -p "$T/allbad/cls" "$T/out-a"
printf 'not an image' >"$T/allbad/cls/a.jpg"
st_rc 1 allbad pack folder "$T/allbad" -o "$T/out-a/a-%06d.tar"
has allbad.err "no samples"
[ ! -e "$T/out-a/a.json" ] || fail "an all-skipped pack wrote a manifest"
# ---------------------------------------------------------------------------
say "a bad SOURCE_DATE_EPOCH is an error, not a silent 0"
mkdir "$T/out-e"
SOURCE_DATE_EPOCH=yesterday st_rc 1 epoch pack folder "$T/f" -o "$T/out-e/e-%06d.tar"
has epoch.err "SOURCE_DATE_EPOCH"
no_shards "$T/out-e"

# ---------------------------------------------------------------------------
say "a sample with a thousand members and more is refused, not grown without end"
python3 - "$T/sh/many.tar" <<'EOF' || fail "making many.tar"
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w", format=tarfile.USTAR_FORMAT) as t:
    for i in range(1100):
        ti = tarfile.TarInfo("k.e%d" % i)
        ti.size = 1
        t.addfile(ti, io.BytesIO(b"x"))
EOF
st_rc 1 verify-many verify "$T/sh/many.tar"
has verify-many.err "more than 1024 members"
echo "PASS: bad-input"
