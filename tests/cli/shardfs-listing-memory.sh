#!/usr/bin/env bash
# shardfs-listing-memory.sh - the listings' memory is what shardfs(1)
# says (section Memory) over a mount's life: an nginx folder of NAMES
# names (default 100000) listed again every second (metadata_ttl=1) LISTS
# times (default 20); its RSS after the first listing and after the last
# within 40 MiB + 512 bytes a name, and not growing from one to the other
# (it went from 218 to 400 MiB before, one arena's worth per listing
# thread; then held 153 MiB, the heap's holes left by the JSON tree).
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/fuse-lib.sh"

names=${NAMES:-100000}
lists=${LISTS:-20}
sanitized=0
if sed -n 's/^\(SK_CFLAGS\|CFLAGS\) = //p' "$top_builddir/Makefile" 2>/dev/null |
    grep -q -- '-fsanitize='; then
	sanitized=1
fi
mkdir -p "$T/www/d"
python3 - "$T/www/d" "$names" <<'PY'
import os, sys
for i in range(int(sys.argv[2])):
    open(os.path.join(sys.argv[1], "f-%07d.bin" % i), "w").close()
PY
http_start "$T/www"
fs_mount lm "$HTTP_URL/d/" "$T/m" -o metadata_ttl=1,threads=16

rss() { awk '$1 == "VmRSS:" { print $2 }' "/proc/$FS_PID/status"; }
n=$(ls -f "$T/m" | grep -c '^f-')
[ "$n" -eq "$names" ] || fail "the mount lists $n names, want $names"
# the second listing's parse comes while the first's names are held: the
# allocator's size from then on
sleep 1.1
ls -f "$T/m" >/dev/null
first=$(rss)
for i in $(seq 3 "$lists"); do
	sleep 1.1
	ls -f "$T/m" >/dev/null
done
last=$(rss)
hwm=$(awk '$1 == "VmHWM:" { print $2 }' "/proc/$FS_PID/status")
echo "RSS after 2 listings $((first / 1024)) MiB, after $lists $((last / 1024)) MiB (peak $((hwm / 1024)) MiB), $names names"
fs_umount "$T/m"
if [ "$sanitized" -eq 1 ]; then
	echo "sanitizer build: the bound is not checked"
	exit 0
fi
bound=$((40 * 1024 + names / 2))
[ "$first" -le "$bound" ] ||
    fail "RSS $first KiB after two listings, over $bound KiB"
[ "$last" -le "$bound" ] ||
    fail "RSS $last KiB after $lists listings, over $bound KiB"
[ "$last" -le $((first + 8 * 1024)) ] ||
    fail "RSS grew from $first to $last KiB over $lists listings"
echo ok
