#!/usr/bin/env bash
# extract.sh - "shardtool extract" reproduces member bytes, and refuses
# absolute names, "..", links that leave the folder and writes through
# links: exit 1 naming the member, nothing created outside the folder, the
# safe members still extracted.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_python PIL

say "extract a packed shard: every member's bytes as tarfile reads them"
synth_cifar "$T/c" --train 20 --test 10 --seed 51
mkdir "$T/s" "$T/x1" "$T/x2"
st pack pack cifar10 "$T/c" --split test -o "$T/s/c-%06d.tar"
st extract extract -C "$T/x1" "$T/s/c-000000.tar"
python3 - "$T/s/c-000000.tar" "$T/x1" <<'EOF' || fail "extracted files differ from the members"
import os, sys
sys.path.insert(0, os.environ["PY"])
from sktest import check, tar_members
members = tar_members(sys.argv[1])
for ti, data in members:
    path = os.path.join(sys.argv[2], ti.name)
    check(os.path.isfile(path), "%s was not extracted" % ti.name)
    check(open(path, "rb").read() == data, "%s: extracted bytes differ" % ti.name)
files = sum(len(f) for _, _, f in os.walk(sys.argv[2]))
check(files == len(members), "%d files extracted, the shard has %d members" % (files, len(members)))
print("-- extract: %d members, bytes equal" % len(members))
EOF
tar -xf "$T/s/c-000000.tar" -C "$T/x2"
diff -r "$T/x1" "$T/x2" >&2 || fail "shardtool extract and GNU tar extract differ"

say "extract -v names each member; a missing -C folder is an error"
st extract-v extract -v -C "$T/x1" "$T/s/c.json"
[ "$(wc -l <"$T/extract-v.out")" -eq 20 ] || { show extract-v; fail "extract -v: want 20 names"; }
st_rc 2 extract-noC extract "$T/s/c-000000.tar"
is_usage_error extract-noC
st_rc 1 extract-nodir extract -C "$T/nodir" "$T/s/c-000000.tar"
has extract-nodir.err "$T/nodir"

# ---------------------------------------------------------------------------
# P/a/dest is where we extract; P/outside holds a victim file; P itself is
# what "../.." reaches. After each attack, P outside a/dest must be as it was.
P="$T/p"
mkdir -p "$P/a" "$P/outside" "$T/evil"
echo "victim" >"$P/outside/victim.txt"
python3 "$PY/evil_tars.py" "$T/evil" "$P/outside" >"$T/attacks" || fail "evil_tars.py"
(cd "$P" && find . -path ./a/dest -prune -o -print | LC_ALL=C sort) >"$T/before"

snapshot_ok() {
	(cd "$P" && find . -path ./a/dest -prune -o -print | LC_ALL=C sort) >"$T/after"
	diff -u "$T/before" "$T/after" >&2 || fail "$1: something was created outside the folder (above)"
	[ "$(cat "$P/outside/victim.txt")" = victim ] || fail "$1: the file outside was changed"
}

while read -r name member; do
	say "extract $name.tar: $member is refused"
	rm -rf "$P/a/dest"
	mkdir "$P/a/dest"
	st_rc 1 evil-$name extract -C "$P/a/dest" "$T/evil/$name.tar"
	has evil-$name.err "$member"
	has evil-$name.err "$T/evil/$name.tar"
	snapshot_ok "$name"
	[ "$(cat "$P/a/dest/ok-$name.txt" 2>/dev/null)" = "safe before" ] ||
	    fail "$name: the safe member before the attack was not extracted"
	[ "$(cat "$P/a/dest/sub/ok2-$name.txt" 2>/dev/null)" = "safe after" ] ||
	    fail "$name: the safe member after the attack was not extracted"
	# Whatever was made in dest stays in dest: no link in it leads out.
	find "$P/a/dest" -type l >"$T/links"
	while read -r l; do
		r=$(readlink -f "$l" || true)
		case $r in
		"$P/a/dest" | "$P/a/dest/"*) ;;
		*) fail "$name: extracted link $l resolves to $r, outside the folder" ;;
		esac
	done <"$T/links"
done <"$T/attacks"
[ "$(wc -l <"$T/attacks")" -ge 7 ] || fail "evil_tars.py made too few attacks"

say "a link already in the folder is not written through"
rm -rf "$P/a/dest"
mkdir "$P/a/dest"
ln -s "$P/outside" "$P/a/dest/pre"
python3 - "$T/evil/pre.tar" <<'EOF' || fail "making pre.tar"
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w") as tf:
    for name, data in (("pre/victim.txt", b"pwned"), ("fine.txt", b"fine")):
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
EOF
st_rc 1 evil-pre extract -C "$P/a/dest" "$T/evil/pre.tar"
has evil-pre.err "pre/victim.txt"
snapshot_ok pre
[ "$(cat "$P/a/dest/fine.txt")" = fine ] || fail "pre: the safe member was not extracted"
echo "PASS: extract"
