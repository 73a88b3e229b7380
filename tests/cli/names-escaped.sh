#!/usr/bin/env bash
# names-escaped.sh - a name that holds control characters (a terminal
# title, a clear-screen, a bell, a newline) or bytes of no valid UTF-8
# never reaches a terminal as it is: shardtool ls shows the names of a
# folder's shards and its errors escaped (\x1b, \x07, \n), and a mount
# of an http folder whose listing holds such names does not show them
# and says how many it left out, once.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/fuse-lib.sh"

esc=$(printf '\033') bel=$(printf '\007')
title="e${esc}]0;pwned${bel}x.tar" clear="bad${esc}[2J.tar"
nl="n
l.tar" latin=$(printf 'caf\351.tar')

# raw FILE: the file holds ESC, BEL or a byte that starts no UTF-8
raw() {
	LC_ALL=C grep -q "[$esc$bel]" "$1" && return 0
	python3 - "$1" <<'PY'
import sys
try:
    open(sys.argv[1], "rb").read().decode("utf-8")
except UnicodeDecodeError:
    sys.exit(0)
sys.exit(1)
PY
}

synth_imagenet "$T/src" --classes 1 --per-class 2 --val 0 --seed 5
st pack pack imagenet "$T/src" -o "$T/www/f/a-%06d.tar" --max-count 1
for n in "$title" "$nl" "$latin"; do
	cp "$T/www/f/a-000000.tar" "$T/www/f/$n"
done
printf 'not a tar' >"$T/www/f/$clear"

say "shardtool ls: the folder's names, and its error, escaped"
st_rc 1 ls ls "$T/www/f/"
! raw "$T/ls.out" || { show ls; fail "ls printed a raw control byte"; }
! raw "$T/ls.err" || { show ls; fail "ls's error holds a raw control byte"; }
has ls.out 'e\x1b]0;pwned\x07x.tar:'
has ls.out 'n\nl.tar:'
has ls.out 'caf\xe9.tar:'
has ls.err 'bad\x1b[2J.tar'

say "a mount of an http folder leaves such names out, and says so"
# nginx's JSON listing escapes the control characters; a name of no
# valid UTF-8 is no JSON string at all, so it stays out of this folder
mkdir -p "$T/www/m"
for n in a-000000.tar a-000001.tar "$title" "$nl" "$clear"; do
	cp "$T/www/f/a-000000.tar" "$T/www/m/$n"
done
http_start "$T/www"
fs_mount names "$HTTP_URL/m/" "$T/m" -o metadata_ttl=1
ls -1 "$T/m" >"$T/mount.ls"
# listed again: the same names left out are not said again
sleep 2
ls -1 "$T/m" >/dev/null
printf 'a-000000.tar\na-000001.tar\n' | cmp -s - "$T/mount.ls" || {
	cat "$T/mount.ls"
	fail "the mount shows other names than a-000000.tar and a-000001.tar"
}
cmp -s "$T/m/a-000001.tar" "$T/www/m/a-000001.tar" ||
    fail "a plain name reads other bytes"
fs_umount "$T/m"
has names.err "3 names with control characters or bytes of no valid UTF-8 are not shown"
[ "$(grep -c "not shown" "$T/names.err")" -eq 1 ] || {
	cat "$T/names.err"
	fail "a re-listing said the same again"
}
! raw "$T/names.err" || fail "shardfs's messages hold a raw control byte"
echo ok
