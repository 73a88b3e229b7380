#!/usr/bin/env bash
# shardfs-replace.sh - an object replaced while a mount reads it never
# gives bytes of two versions. For an nginx folder, a GCS bucket and an S3
# bucket, a slow reader (the link proxy at 1 MB/s) reads a 3 MiB object
# whose same-size replacement, other bytes, is put on the server midway:
# the read either gives all of the old version, or fails (ESTALE or EIO)
# after a prefix of the old version, counted as estale; once metadata_ttl
# has passed, opening it again reads the new version whole. With the
# proxy's "replace" fault (nginx: from its second range on the object
# answers with a new ETag and date, and other bytes, while the folder's
# listing stays the same) the read fails the same way, and the next open
# reads the new version whole, none of the old one's pages.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/bucket-lib.sh"
. "$top_srcdir/tests/cli/fuse-lib.sh"
need_python boto3

size=$((3 * 1048576 + 1234))
mkdir -p "$T/www/p"
http_start "$T/www"
gcs_start
gcs_bucket data
s3_start
s3_bucket data

# One block read ahead at a time (readahead=1M), so the end of the object
# is asked for after the replacement.
# shellcheck disable=SC2054
mopts=(--part-size 1M -o readahead=1M,metadata_ttl=2,cache_mb=32)

# replace_on NAME FILE: put FILE on NAME's server as p/r.bin.
replace_on() {
	case $1 in
	http)
		# A new file renamed over the old: nginx serves the new
		# inode, with another time (so another ETag).
		cp "$2" "$T/www/p/.r.new"
		[ ! -e "$T/www/p/r.bin" ] ||
		    touch -d "@$(($(stat -c %Y "$T/www/p/r.bin") + 100))" \
		    "$T/www/p/.r.new"
		mv "$T/www/p/.r.new" "$T/www/p/r.bin"
		;;
	gs) py fs_tool.py put-gs data p/r.bin "$2" ;;
	s3) py fs_tool.py put-s3 data p/r.bin "$2" ;;
	esac
}

# is_prefix_of PART WHOLE: PART's bytes begin WHOLE.
is_prefix_of() {
	cmp -s "$1" <(head -c "$(file_size "$1")" "$2")
}

# replaced NAME PORT: the case for NAME, whose server listens on PORT.
replaced() {
	local name=$1 mnt="$T/m.$1" src out n t r
	head -c "$size" /dev/urandom >"$T/$name.old"
	head -c "$size" /dev/urandom >"$T/$name.new"
	replace_on "$name" "$T/$name.old"
	say "$name: the object is replaced while a slow reader reads it"
	proxy_start "$2" --ttfb 5 --conn-rate 0 --total-rate 1M
	src=$PROXY_URL/p/
	[ "$name" = http ] || src=$name://data/p
	case $name in
	gs) STORAGE_EMULATOR_HOST=$PROXY_URL fs_mount "$name" "$src" "$mnt" "${mopts[@]}" ;;
	s3) AWS_ENDPOINT_URL_S3=$PROXY_URL fs_mount "$name" "$src" "$mnt" "${mopts[@]}" ;;
	*) fs_mount "$name" "$src" "$mnt" "${mopts[@]}" ;;
	esac
	python3 "$PY/fs_read.py" whole "$mnt/r.bin" "$T/$name.got" \
	    >"$T/$name.res" &
	r=$!
	sleep 0.5
	replace_on "$name" "$T/$name.new"
	wait "$r" || fail "$name: the reader failed"
	read -r out n t <"$T/$name.res"
	echo "$name: the read ended $out after $n bytes and $t s"
	if [ "$out" = ok ]; then
		cmp "$T/$name.old" "$T/$name.got" ||
		    fail "$name: a read that ended well is not the old version"
	else
		case $out in
		ESTALE | EIO) ;;
		*) fail "$name: the read failed with $out, want ESTALE or EIO" ;;
		esac
		[ "$n" -lt "$size" ] || fail "$name: the whole size, then $out"
		is_prefix_of "$T/$name.got" "$T/$name.old" ||
		    fail "$name: the $n bytes before $out are not the old version's"
		[ "$(fs_stat "$mnt" read_errors.estale)" -ge 1 ] ||
		    fail "$name: the read failed, but no estale was counted"
	fi
	# Midway by design: the read must have seen the change.
	[ "$out" != ok ] || fail "$name: the replacement came too late to test"
	no_d_state

	say "$name: after metadata_ttl, a fresh open reads the new version"
	sleep 2.5
	py fs_read.py whole "$mnt/r.bin" "$T/$name.got2" >"$T/$name.res2"
	grep -q "^ok $size " "$T/$name.res2" ||
	    fail "$name: reading it again: $(cat "$T/$name.res2")"
	cmp "$T/$name.new" "$T/$name.got2" ||
	    fail "$name: after metadata_ttl the mount reads other bytes than the new version"
	fs_umount "$mnt"
}

replaced http "$HTTP_PORT"
replaced gs "$GCS_PORT"
replaced s3 "$S3_PORT"

say "http: the proxy's replace fault from the second range on"
head -c "$size" /dev/urandom >"$T/www/p/q.bin"
proxy_start "$HTTP_PORT" --ttfb 0 --conn-rate 0 --total-rate 0 \
    --faults replace --fault-rate 1 --fault-min-offset 1 --max-faults 1 \
    --fault-match q.bin
fs_mount rf "$PROXY_URL/p/" "$T/m.rf" "${mopts[@]}"
py fs_read.py whole "$T/m.rf/q.bin" "$T/rf.got" >"$T/rf.res"
read -r out n t <"$T/rf.res"
echo "replace fault: the read ended $out after $n bytes"
case $out in
ESTALE | EIO) ;;
*) fail "the replace fault: the read ended $out, want ESTALE or EIO" ;;
esac
[ "$(jget "$PROXY_STATS" faults.replace)" -eq 1 ] || fail "no object replaced"
is_prefix_of "$T/rf.got" "$T/www/p/q.bin" || fail "the bytes before $out differ"
[ "$n" -le 1048576 ] || fail "$n bytes read past the first range"
[ "$(fs_stat "$T/m.rf" read_errors.estale)" -ge 1 ] || fail "no estale counted"
sleep 2.5
py fs_read.py whole "$T/m.rf/q.bin" "$T/rf.got2" >"$T/rf.res2"
grep -q "^ok $size " "$T/rf.res2" || fail "q.bin again: $(cat "$T/rf.res2")"
# The proxy's new version is the old one's bytes XOR 0x5a.
python3 -c 'import sys
sys.stdout.buffer.write(bytes(b ^ 0x5a for b in open(sys.argv[1], "rb").read()))' \
    "$T/www/p/q.bin" >"$T/rf.new"
cmp "$T/rf.new" "$T/rf.got2" ||
    fail "q.bin again: not the new version whole (the kernel kept old pages?)"
fs_umount "$T/m.rf"
echo ok
