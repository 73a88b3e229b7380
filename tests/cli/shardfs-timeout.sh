#!/usr/bin/env bash
# shardfs-timeout.sh - io_timeout is the longest a program waits on a read,
# buffered reads too: with the server gone, dd bs=1M of a file never read
# fails with EIO within io_timeout and a little, not once for the kernel's
# read-ahead and again for its retry of the same pages (io_timeout 20 took
# 35 s before); and when the server is back the file reads whole on the
# same mount.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/fuse-lib.sh"

tmo=10
mkdir -p "$T/www/d"
head -c $((24 * 1048576)) /dev/urandom >"$T/www/d/big.bin"
http_start "$T/www"
port=$HTTP_PORT
fs_mount to "$HTTP_URL/d/" "$T/m" --connect-timeout 1 \
    -o "io_timeout=$tmo,metadata_ttl=-1"
[ "$(stat -c %s "$T/m/big.bin")" -eq $((24 * 1048576)) ] ||
    fail "big.bin has the wrong size in the mount"

say "the server is gone: dd bs=1M fails within io_timeout ($tmo s) and a little"
# each read retries the refused connection until its deadline; before,
# the kernel's retry of the read-ahead's pages waited a second time
kill "${HTTP_PIDS[0]}"
wait "${HTTP_PIDS[0]}" 2>/dev/null || true
t0=$(date +%s.%N)
rc=0
dd if="$T/m/big.bin" of=/dev/null bs=1M 2>"$T/dd.err" || rc=$?
t=$(python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" \
    "$t0" "$(date +%s.%N)")
echo "dd: exit $rc after $t s: $(tail -n 1 "$T/dd.err")"
[ "$rc" -ne 0 ] || fail "dd read a file whose server is gone"
grep -q "Input/output error" "$T/dd.err" || fail "dd failed otherwise: $(cat "$T/dd.err")"
python3 -c 'import sys; sys.exit(not float(sys.argv[1]) <= float(sys.argv[2]) + 1.5)' \
    "$t" "$tmo" || fail "dd waited $t s, more than io_timeout ($tmo s) + 1.5 s"

say "the server is back on its port: the same mount reads the file whole"
sleep 1.5
nginx -p "$T/nginx" -c "$T/nginx/nginx.conf" -e "$T/nginx/error.log" &
HTTP_PIDS+=($!)
wait_port "$port"
cmp "$T/www/d/big.bin" "$T/m/big.bin" || fail "big.bin after the server came back"
fs_umount "$T/m"
echo ok
