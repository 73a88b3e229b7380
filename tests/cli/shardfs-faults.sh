#!/usr/bin/env bash
# shardfs-faults.sh - a mount through a faulty link, for an nginx folder, a
# GCS bucket and an S3 bucket, each behind the link proxy. With 503s,
# 429s, resets, short bodies and stalls on the shards' requests, reading
# every shard whole gives its bytes, each fault met and retried. With the
# proxy stopped, a read of bytes not yet fetched fails with EIO within
# io_timeout + 5 s, no reader is left in D state while it waits or after,
# and what was fetched before still reads; once the proxy listens again on
# its port, the same mount reads everything, unmounted never.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/bucket-lib.sh"
. "$top_srcdir/tests/cli/fuse-lib.sh"
need_python boto3

# Six "shards" of 2-3 MiB: several 1 MiB ranged GETs each, so faults fall
# in the middle of an object.
D="$T/www/f"
mkdir -p "$D"
for k in 0 1 2 3 4 5; do
	head -c $((2 * 1048576 + k * 100003)) /dev/urandom >"$D/s-00000$k.tar"
done
fs_servers f

# shellcheck disable=SC2054
faults=(--ttfb 2 --conn-rate 0 --total-rate 0 --seed 11 --fault-rate 0.3
    --faults 503,429,reset,short,stall --fault-match .tar --stall 3
    --retry-after 1)

# src_of NAME: the source a mount of NAME reads through $PROXY_URL, with
# the endpoint variable the buckets need set in ENDPOINT.
src_of() {
	case $1 in
	http) echo "$PROXY_URL/f/" ;;
	gs) echo gs://data/f ;;
	s3) echo s3://data/f ;;
	esac
}
up_of() {
	case $1 in
	http) echo "$HTTP_PORT" ;;
	gs) echo "$GCS_PORT" ;;
	s3) echo "$S3_PORT" ;;
	esac
}
# with_endpoint NAME CMD...: CMD with NAME's endpoint on the proxy.
with_endpoint() {
	local name=$1
	shift
	case $name in
	gs) STORAGE_EMULATOR_HOST=$PROXY_URL "$@" ;;
	s3) AWS_ENDPOINT_URL_S3=$PROXY_URL "$@" ;;
	*) "$@" ;;
	esac
}

faulty_link() {
	local name=$1 mnt="$T/m.$1" f n
	say "$name: every shard read whole through 503, 429, resets, short bodies, stalls"
	proxy_start "$(up_of "$name")" "${faults[@]}"
	with_endpoint "$name" fs_mount "$name.f" "$(src_of "$name")" "$mnt" \
	    --part-size 1M --stall-timeout 1 --retry-time 30 -o cache_mb=64
	for f in "$D"/*.tar; do
		cmp "$f" "$mnt/${f##*/}" || fail "$name: ${f##*/} differs"
	done
	python3 - "$mnt/.shardfs/stats" "$PROXY_STATS" "$name" <<'EOF' ||
import json, sys
s = json.load(open(sys.argv[1]))
p = json.load(open(sys.argv[2]))["faults"]
r = s["remote"]
met = sum(p[k] for k in ("503", "429", "reset", "short", "stall"))
print("%s: proxy faults %s; retries %d %s; resumes %d" % (
    sys.argv[3], p, r["retries"], r["retries_by_cause"], r["resumes"]))
assert met >= 4, "the proxy injected only %d faults" % met
kinds = [k for k in ("503", "429", "reset", "short", "stall") if p[k] > 0]
assert len(kinds) >= 3, "only %s met" % kinds
assert r["retries"] >= met, "%d faults, %d retries" % (met, r["retries"])
assert r["failures"] == 0, r
assert s["read_errors"] == {"eio": 0, "estale": 0}, s["read_errors"]
EOF
	    fail "$name: the counters"
	fs_umount "$mnt"
}

# outage NAME: the proxy stops and starts again under one mount.
outage() {
	local name=$1 mnt="$T/m.$1" port pid t out
	say "$name: the link goes down: EIO within io_timeout + 5 s, no D state"
	proxy_start "$(up_of "$name")" --ttfb 0 --conn-rate 0 --total-rate 0
	pid=${HTTP_PIDS[-1]}
	port=${PROXY_URL##*:}
	with_endpoint "$name" fs_mount "$name.o" "$(src_of "$name")" "$mnt" \
	    --part-size 1M --connect-timeout 1 --retry-time 5 \
	    -o io_timeout=5,metadata_ttl=-1
	# s-000000.tar whole, and the first MiB of s-000001.tar, in memory.
	cmp "$D/s-000000.tar" "$mnt/s-000000.tar" || fail "$name: s-000000.tar"
	py fs_read.py at "$mnt/s-000001.tar" 0 65536 >"$T/$name.first"
	grep -q '^ok 65536 ' "$T/$name.first" || fail "$name: $(cat "$T/$name.first")"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	python3 "$PY/fs_read.py" at "$mnt/s-000004.tar" 1048576 131072 \
	    >"$T/$name.down" &
	t=$!
	sleep 1
	no_d_state
	wait "$t"
	read -r out n t <"$T/$name.down"
	echo "$name: a read with the link down: $out after $t s"
	[ "$out" = EIO ] || fail "$name: a read with the link down gave $out, want EIO"
	# Retried a while (the engine may give up before --retry-time when
	# its next backoff would pass it), and never past io_timeout + 5 s.
	python3 -c 'import sys; sys.exit(not 1 <= float(sys.argv[1]) <= 10)' "$t" ||
	    fail "$name: EIO after $t s, want 1 s to io_timeout (5 s) + 5 s"
	no_d_state
	# What was fetched before still reads, and the mount is up.
	py fs_read.py at "$mnt/s-000001.tar" 0 65536 >"$T/$name.cached"
	grep -q '^ok 65536 ' "$T/$name.cached" ||
	    fail "$name: cached bytes with the link down: $(cat "$T/$name.cached")"
	fs_mounted "$mnt" || fail "$name: the mount went away"
	[ "$(fs_stat "$mnt" read_errors.eio)" -ge 1 ] ||
	    fail "$name: stats counted no EIO"

	say "$name: the link comes back on its port: the same mount reads it all"
	proxy_start "$(up_of "$name")" --ttfb 0 --conn-rate 0 --total-rate 0 \
	    --listen "127.0.0.1:$port"
	[ "${PROXY_URL##*:}" = "$port" ] || fail "the proxy came back on another port"
	for f in "$D"/*.tar; do
		cmp "$f" "$mnt/${f##*/}" || fail "$name: ${f##*/} after the outage"
	done
	no_d_state
	fs_umount "$mnt"
}

for name in http gs s3; do
	faulty_link "$name"
	outage "$name"
done
echo ok
