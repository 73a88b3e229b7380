#!/usr/bin/env bash
# shardfs-compat.sh - the spellings gcsfuse and mountpoint-s3 users bring
# (shardfs(1), "For gcsfuse and mountpoint-s3 users"), on real mounts of
# gcp-storage-emulator, moto and nginx: --prefix (and -o prefix=) under a
# prefix in SOURCE; --uid, --gid, --file-mode, --dir-mode as stat shows
# them; --read-only and --implicit-dirs accepted; --endpoint-url and
# --region over the environment; the ones that mean nothing for a source
# refused. Also: a --cache-dir that is not there is made 0700 (never
# through a symlink), cache_mb too small says the smallest it takes, a
# prefix with no objects mounts with a warning, and an ambiguous
# abbreviation (--cache) says what it could be.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/bucket-lib.sh"
. "$top_srcdir/tests/cli/fuse-lib.sh"
need_python boto3

D="$T/www/s"
mkdir -p "$D/a/sub" "$D/b"
head -c 5000 /dev/urandom >"$D/a/x.bin"
head -c 7000 /dev/urandom >"$D/a/sub/y.bin"
head -c 3000 /dev/urandom >"$D/b/z.bin"
http_start "$T/www"
gcs_start
gcs_bucket data
s3_start
s3_bucket data
for f in a/x.bin a/sub/y.bin b/z.bin; do
	py fs_tool.py put-gs data "s/$f" "$D/$f"
	py fs_tool.py put-s3 data "s/$f" "$D/$f"
done

# fails_with RC TAG TEXT ARGS...: shardfs ARGS -f exits RC (before
# mounting; a mount that should not have happened ends at the timeout)
# and says TEXT on stderr.
fails_with() {
	local rc=$1 tag=$2 text=$3
	shift 3
	mkdir -p "$T/never"
	run_rc "$rc" "$tag" timeout 30 "$SHARDFS" "$@" -f
	has "$tag.err" "$text"
	fs_mounted "$T/never" && fail "$tag: mounted"
	return 0
}

# shows_a MNT: MNT shows a/ of $D: x.bin and sub/y.bin, byte for byte,
# and nothing of b/.
shows_a() {
	cmp "$D/a/x.bin" "$1/x.bin" || fail "$1/x.bin differs"
	cmp "$D/a/sub/y.bin" "$1/sub/y.bin" || fail "$1/sub/y.bin differs"
	[ "$(ls "$1" | tr '\n' ' ')" = "sub x.bin " ] ||
	    fail "$1 shows $(ls "$1" | tr '\n' ' '), want sub x.bin"
}

say "--prefix: under the prefix in SOURCE, for gs, s3 and http"
fs_mount pgs gs://data/s "$T/pgs" --prefix a/
shows_a "$T/pgs"
fs_umount "$T/pgs"
fs_mount ps3 s3://data/s/ "$T/ps3" -o prefix=a
shows_a "$T/ps3"
fs_umount "$T/ps3"
fs_mount phttp "$HTTP_URL/s/" "$T/phttp" --prefix a
shows_a "$T/phttp"
fs_umount "$T/phttp"
fs_mount pbucket gs://data "$T/pbucket" --prefix s/a/
shows_a "$T/pbucket"
fs_umount "$T/pbucket"
fails_with 2 pdots "--prefix ../b: want a folder inside SOURCE" \
    gs://data/s/a "$T/never" --prefix ../b
fails_with 2 pslash "want a folder inside SOURCE" \
    gs://data/s "$T/never" --prefix /a
fails_with 2 pmanifest "is a manifest; a prefix goes with a folder" \
    "$HTTP_URL/s/x.json" "$T/never" --prefix a

say "--uid, --gid, --file-mode, --dir-mode, as stat shows them"
fs_mount own gs://data/s "$T/own" --uid 4242 --gid 4343 --file-mode 0640 \
    --dir-mode 750
want_stat() {
	local got
	got=$(stat -c '%u %g %a %F' "$1")
	[ "$got" = "$2" ] || fail "stat $1: $got, want $2"
}
want_stat "$T/own/a/x.bin" "4242 4343 640 regular file"
want_stat "$T/own/a/sub" "4242 4343 750 directory"
want_stat "$T/own" "4242 4343 750 directory"
cmp "$D/a/x.bin" "$T/own/a/x.bin" || fail "own: x.bin differs"
fs_umount "$T/own"
# The -o spellings, as gcsfuse's -o uid=,gid= and mountpoint-s3's.
fs_mount owno s3://data/s "$T/owno" -o uid=7,gid=8,file_mode=0600,dir_mode=0700
want_stat "$T/owno/b/z.bin" "7 8 600 regular file"
want_stat "$T/owno/b" "7 8 700 directory"
fs_umount "$T/owno"
# Defaults: the mounting user, 0444 and 0555.
fs_mount owndef gs://data/s "$T/owndef"
want_stat "$T/owndef/a/x.bin" "$(id -u) $(id -g) 444 regular file"
want_stat "$T/owndef/a" "$(id -u) $(id -g) 555 directory"
fs_umount "$T/owndef"
fails_with 2 badmode "--file-mode 0888: want an octal mode" \
    gs://data/s "$T/never" --file-mode 0888
fails_with 2 bigmode "--dir-mode 4755: want an octal mode" \
    gs://data/s "$T/never" --dir-mode 4755
fails_with 2 baduid "--uid" gs://data/s "$T/never" --uid -1

say "--read-only and --implicit-dirs: accepted, and the mount is read-only"
fs_mount ro gs://data/s "$T/ro" --read-only --implicit-dirs
cmp "$D/b/z.bin" "$T/ro/b/z.bin" || fail "ro: z.bin differs"
if (echo x >"$T/ro/new") 2>/dev/null; then
	fail "ro: a file was created"
fi
fs_umount "$T/ro"
fs_mount roo s3://data/s "$T/roo" -o read_only,implicit_dirs
cmp "$D/b/z.bin" "$T/roo/b/z.bin" || fail "roo: z.bin differs"
fs_umount "$T/roo"

say "--endpoint-url and --region beat the environment"
S3_EP=$AWS_ENDPOINT_URL_S3
# The environment's endpoint answers nothing and its region is no region:
# only the options make this mount work.
AWS_ENDPOINT_URL_S3=http://127.0.0.1:1 AWS_REGION=No_Region \
    fs_mount eps3 s3://data/s "$T/eps3" --endpoint-url "$S3_EP" \
    --region us-east-1
cmp "$D/a/x.bin" "$T/eps3/a/x.bin" || fail "eps3: x.bin differs"
fs_umount "$T/eps3"
GS_EP=$STORAGE_EMULATOR_HOST
STORAGE_EMULATOR_HOST=http://127.0.0.1:1 \
    fs_mount epgs gs://data/s "$T/epgs" --endpoint-url "$GS_EP"
cmp "$D/a/x.bin" "$T/epgs/a/x.bin" || fail "epgs: x.bin differs"
fs_umount "$T/epgs"
fails_with 2 regiongs "--region: only for s3:// sources" \
    gs://data/s "$T/never" --region us-east-1
fails_with 2 badregion "--region Us_East: not a region name" \
    s3://data/s "$T/never" --region Us_East
fails_with 2 ephttp "--endpoint-url: only for s3:// and gs://" \
    "$HTTP_URL/s/" "$T/never" --endpoint-url "$S3_EP"
fails_with 2 badep "--endpoint-url ftp://x: want an http:// or https:// URL" \
    s3://data/s "$T/never" --endpoint-url ftp://x

say "a --cache-dir that is not there is made, 0700"
fs_mount cd gs://data/s "$T/cd" --cache-dir "$T/newcache"
cmp "$D/a/x.bin" "$T/cd/a/x.bin" || fail "cd: x.bin differs"
fs_umount "$T/cd"
[ "$(stat -c '%a %F' "$T/newcache")" = "700 directory" ] ||
    fail "--cache-dir made $(stat -c '%a %F' "$T/newcache"), want 700 directory"
# Made 0700 whatever the umask.
old_umask=$(umask)
umask 0277
fs_mount cdu gs://data/s "$T/cdu" -o cache_dir="$T/umaskcache"
umask "$old_umask"
fs_umount "$T/cdu"
[ "$(stat -c '%a' "$T/umaskcache")" = 700 ] ||
    fail "--cache-dir under umask 0277: $(stat -c '%a' "$T/umaskcache"), want 700"
fails_with 1 cdparent "--cache-dir $T/no/such: cannot make it" \
    gs://data/s "$T/never" --cache-dir "$T/no/such"
has cdparent.err "its parent folder must exist"
# A dangling symlink is not followed to make its target.
ln -s "$T/planted-target" "$T/planted"
fails_with 1 cdlink "--cache-dir $T/planted" \
    gs://data/s "$T/never" --cache-dir "$T/planted"
[ ! -e "$T/planted-target" ] || fail "--cache-dir made a symlink's target"

say "cache_mb too small says the smallest it takes"
fails_with 2 small "cache_mb 16: too small; the smallest is 32 (MB)" \
    gs://data/s "$T/never" -o cache_mb=16
fails_with 2 smallp "the smallest is 64 (MB) with --part-size 16M" \
    gs://data/s "$T/never" --cache-mb 40 --part-size 16M

say "a prefix with no objects mounts, with a warning"
fs_mount empty gs://data/nope "$T/empty"
has empty.err "shardfs: gs://data/nope/: no objects under this prefix"
[ -z "$(ls "$T/empty")" ] || fail "empty: shows $(ls "$T/empty")"
fs_umount "$T/empty"
fs_mount emptys3 s3://data/s "$T/emptys3" --prefix nope/
has emptys3.err "shardfs: s3://data/s/nope/: no objects under this prefix"
fs_umount "$T/emptys3"
fs_mount full gs://data/s "$T/full"
hasnt full.err "no objects"
fs_umount "$T/full"

say "an abbreviation: a unique one works, an ambiguous one names the options"
fs_mount abbr gs://data/s "$T/abbr" --file-m 0604 --implicit
want_stat "$T/abbr/a/x.bin" "$(id -u) $(id -g) 604 regular file"
fs_umount "$T/abbr"
fails_with 2 ambig "--cache: an ambiguous option; it could be --cache-mb, --cache-dir, --cache-max-mb" \
    gs://data/s "$T/never" --cache 64
fails_with 2 ambig2 "--cache-m: an ambiguous option; it could be --cache-mb, --cache-max-mb" \
    gs://data/s "$T/never" --cache-m 64
echo ok
