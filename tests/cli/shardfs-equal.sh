#!/usr/bin/env bash
# shardfs-equal.sh - a mount shows what its source holds: for an nginx
# folder, a GCS bucket (gcp-storage-emulator) and an S3 bucket (moto), ls
# -lR of the mount gives the names, kinds, sizes, modes and times that the
# source lists, worked out without shardfs (from the files nginx serves, the
# JSON API, boto3), nested folders that exist only as prefixes included;
# every file is byte for byte a direct download; GNU tar, Python tarfile
# and shardload read the shards through the mount as they read them
# directly. An http manifest mounts as its shards side by side, and the
# loader given the mounted manifest reads what it reads from the URL.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/bucket-lib.sh"
. "$top_srcdir/tests/cli/fuse-lib.sh"
need_python boto3
need_cmd tar

# The source: five shards and their manifest, a file of several 1 MiB
# blocks and a bit, an empty file, names that need escaping in a URL, and
# folders three deep, one of them empty.
synth_imagenet "$T/i" --classes 4 --per-class 12 --val 4 --seed 43
D="$T/www/d"
st pack pack imagenet "$T/i" -o "$D/in-%06d.tar" --max-count 10
mkdir -p "$D/deep/x/y" "$D/marker"
head -c $((5 * 1048576 + 12345)) /dev/urandom >"$D/big.bin"
head -c 3000 /dev/urandom >"$D/deep/x/y/z.bin"
printf 'a name with a space, a plus and a percent\n' >"$D/deep/a b+c%41.txt"
: >"$D/empty.bin"
shards=(in-000000.tar in-000001.tar in-000002.tar in-000003.tar
    in-000004.tar)
pat='in-{000000..000004}.tar'
kopts=(--checksum --batch 6 --image-size 32 --shuffle 16 --seed 5
    --epochs 1 --workers 2)

http_start "$T/www"
gcs_start
gcs_bucket data
s3_start
s3_bucket data

# upload SCHEME: every file of $D into SCHEME://data/d/, and the empty
# folder as the marker object "d/marker/" that consoles make.
upload() {
	local f
	(cd "$D" && find . -type f | sed 's|^\./||') | while read -r f; do
		py fs_tool.py "put-$1" data "d/$f" "$D/$f"
	done
	py fs_tool.py "put-$1" data d/marker/ "$D/empty.bin"
}
upload gs
upload s3

# same_listing NAME MNT EXPECTED: ls -lR of MNT gives EXPECTED's lines.
same_listing() {
	ls -lR --time-style=+%s "$2" >"$T/$1.ls" || fail "ls -lR $2"
	py fs_tool.py tree-ls "$T/$1.ls" >"$T/$1.tree"
	if ! cmp -s "$3" "$T/$1.tree"; then
		diff "$3" "$T/$1.tree" >&2 || true
		fail "$1: ls -lR of the mount differs from the source's listing"
	fi
}

# check_mount NAME MNT EXPECTED REF URL: MNT lists as EXPECTED; each file
# under it is its copy under REF (a direct download, or what nginx
# serves); GNU tar, tarfile and shardload read its shards as they read REF
# and the URL.
check_mount() {
	local name=$1 mnt=$2 want=$3 ref=$4 url=$5 f n
	say "$name: ls -lR of the mount is the source's listing"
	same_listing "$name" "$mnt" "$want"
	[ "$(wc -l <"$want")" -eq 14 ] || fail "$want: want 14 entries"
	# Twice: the listing is kept, and a second look sees the same.
	same_listing "$name.2" "$mnt" "$want"

	say "$name: every file is byte for byte a direct download"
	n=0
	while read -r f; do
		cmp "$ref/$f" "$mnt/$f" || fail "$name: $f differs"
		n=$((n + 1))
	done < <(cd "$ref" && find . -type f | sed 's|^\./||')
	[ "$n" -eq 10 ] || fail "$name: compared $n files, want 10"
	[ ! -s "$mnt/empty.bin" ] && [ -f "$mnt/empty.bin" ] ||
	    fail "$name: empty.bin is not an empty file"

	say "$name: GNU tar lists and extracts the shards as from the copy"
	for f in "${shards[@]}"; do
		(cd "$ref" && tar -tvf "$f") >"$T/$name.tv.want"
		(cd "$mnt" && tar -tvf "$f") >"$T/$name.tv.got" ||
		    fail "$name: tar -tvf $f through the mount"
		cmp -s "$T/$name.tv.want" "$T/$name.tv.got" ||
		    fail "$name: tar -tvf $f differs"
		mkdir -p "$T/$name.x.want/$f" "$T/$name.x.got/$f"
		tar -xf "$ref/$f" -C "$T/$name.x.want/$f"
		tar -xf "$mnt/$f" -C "$T/$name.x.got/$f" ||
		    fail "$name: tar -xf $f through the mount"
	done
	same_tree "$T/$name.x.want" "$T/$name.x.got" ||
	    fail "$name: tar -xf through the mount gave other files"
	[ "$(find "$T/$name.x.got" -type f | wc -l)" -eq 144 ] ||
	    fail "$name: tar -xf gave $(find "$T/$name.x.got" -type f | wc -l) files, want 144"
	rm -rf "$T/$name.x.want" "$T/$name.x.got"

	say "$name: Python tarfile reads the same members and bytes"
	(cd "$ref" && python3 "$PY/fs_tool.py" tarsum "${shards[@]}") \
	    >"$T/$name.ts.want" || fail "tarsum of $ref"
	(cd "$mnt" && python3 "$PY/fs_tool.py" tarsum "${shards[@]}") \
	    >"$T/$name.ts.got" || fail "$name: tarsum through the mount"
	[ "$(wc -l <"$T/$name.ts.want")" -eq 144 ] ||
	    fail "$name: tarfile read $(wc -l <"$T/$name.ts.want") members"
	cmp -s "$T/$name.ts.want" "$T/$name.ts.got" ||
	    fail "$name: tarfile read other members through the mount"

	say "$name: shardload keys through the mount is shardload keys of $url"
	sl "$name.direct" keys "$url/$pat" "${kopts[@]}"
	sl "$name.mount" keys "$mnt/$pat" "${kopts[@]}"
	[ "$(wc -l <"$T/$name.direct.out")" -eq 48 ] ||
	    fail "$name: shardload read $(wc -l <"$T/$name.direct.out") samples, want 48"
	cmp -s "$T/$name.direct.out" "$T/$name.mount.out" || {
		diff "$T/$name.direct.out" "$T/$name.mount.out" | head -5 >&2
		fail "$name: shardload keys through the mount differs"
	}
}

say "the three sources list the same tree, worked out without shardfs"
py fs_tool.py tree-local "$D" >"$T/want.http"
py fs_tool.py tree-gs data d/ >"$T/want.gs"
py fs_tool.py tree-s3 data d/ >"$T/want.s3"
cat "$T/want.http"
# Names, kinds and sizes agree; the times are each server's own.
for s in gs s3; do
	cut -d' ' -f1,2,4- "$T/want.http" >"$T/want.http.nt"
	cut -d' ' -f1,2,4- "$T/want.$s" >"$T/want.$s.nt"
	cmp -s "$T/want.http.nt" "$T/want.$s.nt" || {
		diff "$T/want.http.nt" "$T/want.$s.nt" >&2
		fail "the $s bucket does not hold what the nginx folder holds"
	}
done

fs_mount http "$HTTP_URL/d/" "$T/m.http"
check_mount http "$T/m.http" "$T/want.http" "$D" "$HTTP_URL/d"
if [ -n "${SHARDTRAIN:-}" ]; then
	say "shardtrain through the mount: report names the mount, not disk"
	topts=(--model vit-ti4 --dim 16 --depth 1 --heads 1 --mlp 16
	    --image-size 16 --batch 8 --steps 1 --threads 1 --ceiling-steps 0)
	run_rc 0 trm "$SHARDTRAIN" "${topts[@]}" --data "$T/m.http/in.json" \
	    --json "$T/trm.json"
	run_rc 0 trd "$SHARDTRAIN" "${topts[@]}" --data "$D/in.json" \
	    --json "$T/trd.json"
	[ "$(jget "$T/trm.json" config.source_mount)" = shardfs ] ||
	    fail "config.source_mount is not shardfs through the mount"
	[ "$(jget "$T/trd.json" config.source_mount)" = null ] ||
	    fail "config.source_mount is set on local disk"
	run_rc 0 rep "$SHARDTRAIN" report "$T/trm.json" "$T/trd.json"
	has rep.out "shardfs:in.json"
	has rep.out "file:in.json"
fi
fs_umount "$T/m.http"

mkdir "$T/dl.gs" "$T/dl.s3"
py fs_tool.py get-gs data d/ "$T/dl.gs"
py fs_tool.py get-s3 data d/ "$T/dl.s3"
fs_mount gs gs://data/d "$T/m.gs"
check_mount gs "$T/m.gs" "$T/want.gs" "$T/dl.gs" gs://data/d
fs_umount "$T/m.gs"
fs_mount s3 s3://data/d/ "$T/m.s3"
check_mount s3 "$T/m.s3" "$T/want.s3" "$T/dl.s3" s3://data/d
fs_umount "$T/m.s3"

say "a bucket's root mounts too: d is a folder there"
fs_mount gsroot gs://data "$T/m.gsroot"
[ -d "$T/m.gsroot/d/deep/x/y" ] || fail "gs://data: no d/deep/x/y"
cmp "$T/dl.gs/deep/x/y/z.bin" "$T/m.gsroot/d/deep/x/y/z.bin" ||
    fail "gs://data: d/deep/x/y/z.bin differs"
fs_umount "$T/m.gsroot"

say "an http manifest: its shards side by side, and the manifest beside them"
fs_mount man "$HTTP_URL/d/in.json" "$T/m.man"
ls -l --time-style=+%s "$T/m.man" >"$T/man.ls"
# shellcheck disable=SC2012
(cd "$T/m.man" && ls) >"$T/man.names"
printf '%s\n' "${shards[@]}" in.json >"$T/man.want"
cmp -s "$T/man.want" "$T/man.names" || {
	cat "$T/man.names" >&2
	fail "the manifest mount shows other names"
}
for f in "${shards[@]}" in.json; do
	[ "$(file_size "$T/m.man/$f")" -eq "$(file_size "$D/$f")" ] ||
	    fail "manifest mount: $f has the wrong size"
	cmp "$D/$f" "$T/m.man/$f" || fail "manifest mount: $f differs"
done
sl man.direct keys "$HTTP_URL/d/in.json" "${kopts[@]}"
sl man.mount keys "$T/m.man/in.json" "${kopts[@]}"
[ "$(wc -l <"$T/man.direct.out")" -eq 48 ] || fail "want 48 samples"
cmp -s "$T/man.direct.out" "$T/man.mount.out" ||
    fail "shardload keys of the mounted manifest differs from its URL"
fs_umount "$T/m.man"
echo ok
