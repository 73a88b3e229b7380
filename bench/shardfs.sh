#!/usr/bin/env bash
# bench/shardfs.sh - the shardfs benchmark: a FUSE mount of an http tree or
# a bucket against curl and the mount peers, on the same objects, the same
# emulated link and loopback, in one run.
#
#   bench/shardfs.sh [--runs K] [--quick] [--big-mb N] [--small N]
#                    [--dir N] [--train-images N] [--cases 'GLOB ...']
#                    [--work DIR] [--build DIR] [--idle-wait S] [--limit S]
#
# --cases picks cases by shell pattern ('seq-ln-*' 'dir-*-s3-*'); --limit
# ends a run that takes longer (default 1800 s) and counts it failed;
# --idle-wait: how long to wait for an idle machine before each run.
#
# Servers, on 127.0.0.1, started and stopped (on any exit) by this script:
#   http  Debian's nginx as bench/http.sh configures it (sendfile, keepalive
#         100000 requests, one worker per CPU, no access log), the JSON
#         autoindex that shardfs lists at /, and the same files under /h/
#         with nginx's HTML autoindex, the listing rclone's http backend
#         parses.
#   s3    moto's S3 server, SigV4 checked as tests/py/moto_server.py
#         checks it, through bench/s3_server.py: the same files loaded
#         into the bucket before it listens (10^5 signed PUTs would take
#         minutes), every object kept in memory, a ranged GET served from
#         its range alone (moto copies the whole object for every GET: 1
#         GiB per 8 MiB part), and the query string canonicalized as S3
#         does before the signature is checked (s3fs sends '/' raw in
#         ?prefix=). Keys made through its IAM, as bench/s3.sh does.
#   link  tests/proxy/linkproxy with its defaults (30 ms to the first byte
#         of every response, 60 MB/s a connection, 1 GB/s in all) in front
#         of each server: "ln" below; "lo" is the server straight.
#
# Backends. shardfs is measured on the backend of every peer it is put
# against: against curl and rclone's http backend on nginx (http), and
# against curl (SigV4), rclone's s3 backend and s3fs on moto (s3; s3fs
# speaks S3 only). curl straight to a server, with as many ranged GETs as
# shardfs keeps in flight, is that server's measured ceiling; moto, a
# Python server, is far below nginx on loopback, so the http rows are the
# ones that say what shardfs does there.
#
# Clients. Every mount is of the server's root (URL/, URL/h/ for rclone's
# http backend, the bucket), fresh for every run: the kernel's page cache
# of a FUSE file dies with its mount, and so does shardfs's memory cache;
# the folder a case reads is listed in the run, not at mount time.
#   shardfs     its defaults (cache_mb 512, readahead 64M, --part-size 8M:
#               8 ranged GETs in flight, threads 64): shardfs URL/ MNT -f,
#               or s3://bench with AWS_ENDPOINT_URL_S3
#   shardfsdio  the same with -o direct_io (seq cases only): the kernel's
#               page cache bypassed, each 1 MiB read copied from shardfs's
#               cache into the reader's buffer
#   curl        seq: curl --parallel --parallel-immediate --parallel-max 8,
#               one ranged GET of 8 MiB per part of the shard into
#               /dev/null (8 = shardfs's readahead / --part-size); small:
#               --parallel-max 32, one plain GET per file; s3: --aws-sigv4
#               with the same keys. Each transfer's status and size checked.
#   rclone      rclone mount, --vfs-cache-mode off: --buffer-size 64M (a
#               file's read-ahead in memory, as shardfs's window),
#               --vfs-read-chunk-size 128M --vfs-read-chunk-size-limit off
#               (one GET per 128M, doubling: fewest requests), --read-only
#               --no-modtime --no-checksum --dir-cache-time 1h
#               --attr-timeout 1h --checkers 32 (parallel HEADs of the http
#               backend's listing); http: an on-the-fly :http: remote with
#               --http-url URL/h/; s3: :s3: with --s3-provider Other
#               --s3-endpoint URL --s3-force-path-style --s3-region
#               us-east-1 --s3-no-head-object. rclone's docs name no other
#               read knob for a mount: --transfers and
#               --multi-thread-streams act on uploads and on copies to
#               local disk, not on reads through a mount.
#   rclonefull  the same with --vfs-cache-mode full --vfs-read-ahead 64M
#               --buffer-size 16M (its docs: a small buffer, a large
#               read-ahead) and an empty --cache-dir for every run
#   ceiling     no server: bench/fuse_ceiling.c, a FUSE mount of the case's
#               folder read into memory (huge pages) before it mounts,
#               served with shardfs's mount settings and no copy: what the
#               kernel and libfuse alone cost a file or a MiB here, the
#               most any FUSE filesystem reaches on this machine (cases
#               seq-lo-local-ceiling and small-lo-local-ceiling)
#   s3fs        s3fs bench MNT -f -o ro,use_path_request_style,url=URL,
#               endpoint=us-east-1,parallel_count=8,multipart_size=8
#               (8 ranged GETs of 8 MB at once, as shardfs),
#               max_stat_cache_size=200000,stat_cache_expire=3600,
#               enable_noobj_cache,multireq_max=32 (parallel HEADs of a
#               listing), keys in a 0600 passwd_file (not
#               notsup_compat_dir: the folders here are prefixes with no
#               object of their own, which that option does not show)
#
# Cases (names: FAMILY-LINK-BACKEND-CLIENT):
#   seq-*       one reader, 1 MiB reads to the end of big/big.tar, a tar
#               shard of --big-mb MiB (1024): bench/fsread.py seq (dd
#               bs=1M with a timestamp at every MiB): MB/s over the whole
#               file, the MiB at which the rate over the last 8 MiB first
#               reaches 90% of that, the time to the first 32 MiB
#   small-*     --small files (10^4) of about 110 KB in one folder: list
#               it, then 32 threads open, read to the end and close their
#               share (bench/fsread.py many): files/s and MB/s of the
#               reads; the listing's time apart
#   dir-*       a folder of --dir empty objects (10^5), cold (a fresh
#               mount): os.scandir (names, as ls -f), then os.stat of each;
#               dir-*-list: the server's own listing straight, its ceiling
#               (one GET of nginx's JSON index; boto3's ListObjectsV2 pages)
#   train-*     shardload bench, decode on (--workers NCPU --batch 64
#               --io-streams 2 --shuffle 1000 --image-size 224 --dtype f32
#               --layout nchw, one epoch), the same options for the three:
#               train-disk (the manifest on local disk, page cache
#               dropped), train-LINK-direct (URL/train/in.json, streamed by
#               shardload itself), train-LINK-mount (MNT/train/in.json of
#               a shardfs mount of URL/): images/s
#   cache-*     the disk cache, through the link: cache-fill mounts with
#               --cache-dir DIR --cache-max-mb (twice the shards) on an
#               empty DIR and reads an epoch (decode on); then, each on a
#               new mount of the same DIR after the page cache is dropped:
#               cache-dec (decode on) and cache-io (--no-decode), against
#               train-disk and disk-io (--no-decode from local disk,
#               dropped)
# Before every run the page cache is dropped (echo 3 >
# /proc/sys/vm/drop_caches) and the files nginx will serve are read back
# into it (the server's side warm, the client's cold). The cache-* cases
# run in that order at the end of each round; the others rotate.
#
# Data, made once in the work directory: big.tar (--big-mb members of 1
# MiB of random bytes), --small files of 100-120 KB of random bytes,
# --dir empty files, and `shardtool synth imagenet` packed into shards of
# 100 JPEGs (--train-images, 2400: about 300 MB).
#
# Each of K rounds (3) runs every case once. Checks: every byte count;
# sampled bytes of each mount compared (cmp) with the local files; curl's
# transfers all 200/206 at their sizes; shardload's samples all there; the
# disk cache's blocks read back, its remote bytes only the listing. The
# report (stdout and shardfs-table.md in the work directory) is one
# Markdown table of medians (min-max), each peer's row with shardfs's
# ratio to it and the goal, and the CPU seconds of client, mount, servers
# and everything else during the run.
# --quick: a 64 MiB shard, 2000 small files, 10^4 entries, 400 images,
# one round: a smoke test of this script, not a result.
#
# Needs: nginx, curl, rclone, s3fs, fuse3, /usr/bin/time, python3 with
# boto3 and moto[server]; root for drop_caches (else fresh mounts only).
# Environment: SHARDKIT_BUILD (build tree, default build/, or --build);
# SHARDKIT_BENCH_DIR (work directory, default /tmp/shardkit-bench-shardfs).

set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
runs= quick=0 big_mb= nsmall= ndir= nimg= only= idle_wait= limit=1800
work=${SHARDKIT_BENCH_DIR:-/tmp/shardkit-bench-shardfs}
build=${SHARDKIT_BUILD:-$root/build}
cmdline="bench/shardfs.sh${*:+ $*}"

usage() {
	sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0"
	exit "${1:-0}"
}

while [ $# -gt 0 ]; do
	case $1 in
	--runs) runs=${2:?--runs wants a number}; shift 2 ;;
	--quick) quick=1; shift ;;
	--big-mb) big_mb=${2:?--big-mb wants MiB}; shift 2 ;;
	--small) nsmall=${2:?--small wants a count}; shift 2 ;;
	--dir) ndir=${2:?--dir wants a count}; shift 2 ;;
	--train-images) nimg=${2:?--train-images wants a count}; shift 2 ;;
	--cases) only=${2:?--cases wants patterns}; shift 2 ;;
	--work) work=${2:?--work wants a directory}; shift 2 ;;
	--build) build=${2:?--build wants a directory}; shift 2 ;;
	--idle-wait) idle_wait=${2:?--idle-wait wants seconds}; shift 2 ;;
	--limit) limit=${2:?--limit wants seconds}; shift 2 ;;
	-h|--help) usage 0 ;;
	*) echo "shardfs.sh: unknown argument '$1'" >&2; usage 2 >&2 ;;
	esac
done

die() { echo "shardfs.sh: $*" >&2; exit 1; }
log() { echo "shardfs.sh: $*" >&2; }

ncpu=$(nproc)
if [ $quick = 1 ]; then
	: "${runs:=1}" "${big_mb:=64}" "${nsmall:=2000}" "${ndir:=10000}"
	: "${nimg:=400}" "${idle_wait:=2}"
else
	: "${runs:=3}" "${big_mb:=1024}" "${nsmall:=10000}" "${ndir:=100000}"
	: "${nimg:=2400}" "${idle_wait:=15}"
fi
for v in runs big_mb nsmall ndir nimg idle_wait limit; do
	case ${!v} in ''|*[!0-9]*|0) die "--${v//_/-}: a positive number, not '${!v}'" ;; esac
done
[ "$big_mb" -ge 40 ] || die "--big-mb: at least 40 (the ramp wants 32 MiB and more)"
[ $(( nimg % 100 )) = 0 ] || die "--train-images: a multiple of 100"
classes=$(( nimg / 100 < 10 ? 10 : nimg / 100 < 20 ? nimg / 100 : 20 ))
per_class=$(( nimg / classes ))
nimg=$(( classes * per_class ))
part_mb=8 seq_conns=8 small_threads=32
dec_batch=64

# ---------------------------------------------------------------------------
# the tools

for c in nginx curl rclone s3fs fusermount3 python3; do
	command -v $c >/dev/null || die "$c is missing (apt-get install" \
	    "${c/fusermount3/fuse3})"
done
[ -x /usr/bin/time ] || die "/usr/bin/time is missing (apt-get install time)"
[ -c /dev/fuse ] || die "no /dev/fuse"
python3 -c 'import boto3, moto.server' 2>/dev/null ||
    die "python3 cannot import boto3 and moto.server (pip install 'moto[server]')"
for f in shardtool/shardtool fuse/shardfs loader/.libs/shardload \
    tests/proxy/linkproxy lib/.libs/libshardkit.so.0; do
	[ -e "$build/$f" ] || die "$build/$f is missing (cd $build && make &&" \
	    "make tests/proxy/linkproxy), or set --build"
done

mkdir -p "$work"
work=$(cd "$work" && pwd)
bin=$work/bin logs=$work/logs mnts=$work/mnt
mkdir -p "$bin" "$logs" "$mnts"

# Private copies, so that a rebuild during the run changes nothing.
rm -f "$bin"/shardfs "$bin"/shardload "$bin"/shardtool "$bin"/linkproxy \
    "$bin"/libshardkit.so.*
cp "$build/loader/.libs/shardload" "$build/tests/proxy/linkproxy" "$bin/"
cp "$build/fuse/shardfs" "$build/shardtool/shardtool" "$bin/" 2>/dev/null
for f in fuse/.libs/shardfs shardtool/.libs/shardtool; do
	[ ! -e "$build/$f" ] || cp "$build/$f" "$bin/"
done
cp -L "$build/lib/.libs/libshardkit.so.0" "$bin/"
rm -f "$bin/fuse_ceiling"
${CC:-cc} -O2 -o "$bin/fuse_ceiling" "$here/fuse_ceiling.c" \
    $(pkg-config --cflags --libs fuse3 2>/dev/null || echo -lfuse3) 2>"$logs/fuse_ceiling.log" ||
    log "cannot build bench/fuse_ceiling.c (libfuse3's headers?): the" \
	"*-ceiling cases will fail; $logs/fuse_ceiling.log says why"
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
sfs=$bin/shardfs sl=$bin/shardload st=$bin/shardtool lp=$bin/linkproxy
for b in "$sfs" "$sl"; do
	x=$(ldd "$b" | grep 'libshardkit.* => ' || true)
	[ -z "$x" ] || case $x in *" => $bin/"*) ;; *) die "cannot run a copy of $b" ;; esac
done
"$sfs" --help 2>&1 | grep -q -- '--cache-dir' || die "$sfs is not shardfs"

unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy \
    CURL_CA_BUNDLE AWS_CA_BUNDLE AWS_PROFILE AWS_SESSION_TOKEN
export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost

can_drop=1
if ! { sync && echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
	can_drop=0
	log "WARNING: cannot write /proc/sys/vm/drop_caches (not root?):" \
	    "fresh mounts only; the disk cases read from the page cache"
fi

# ---------------------------------------------------------------------------
# the data, made once

data=$work/data
mkdir -p "$data"
big_dir=$data/big-$big_mb small_dir=$data/small-$nsmall
dir_dir=$data/dir-$ndir train_dir=$data/train-${classes}x$per_class

if [ ! -e "$big_dir/.done" ]; then
	log "making $big_dir/big.tar ($big_mb MiB)"
	rm -rf "$big_dir"
	mkdir -p "$big_dir"
	python3 - "$big_dir/big.tar" "$big_mb" <<'EOF'
import io, os, sys, tarfile
# WebDataset-like: one key per MiB (512 header + 1 MiB - 512 bytes)
with tarfile.open(sys.argv[1], "w", format=tarfile.USTAR_FORMAT) as t:
    for i in range(int(sys.argv[2])):
        b = os.urandom((1 << 20) - 512)
        ti = tarfile.TarInfo("%06d.bin" % i)
        ti.size, ti.mtime = len(b), 0
        t.addfile(ti, io.BytesIO(b))
EOF
	touch "$big_dir/.done"
fi
if [ ! -e "$small_dir/.done" ]; then
	log "making $nsmall small files in $small_dir"
	rm -rf "$small_dir"
	mkdir -p "$small_dir"
	python3 - "$small_dir" "$nsmall" <<'EOF'
import os, random, sys
d, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(0)
pool = os.urandom(16 << 20)
for i in range(n):
    size = rng.randint(100000, 120000)
    off = rng.randrange(0, len(pool) - size)
    with open(os.path.join(d, "%06d.jpg" % i), "wb") as f:
        f.write(pool[off:off + size])
EOF
	touch "$small_dir/.done"
fi
if [ ! -e "$dir_dir/.done" ]; then
	log "making $ndir empty files in $dir_dir"
	rm -rf "$dir_dir"
	mkdir -p "$dir_dir"
	python3 - "$dir_dir" "$ndir" <<'EOF'
import os, sys
for i in range(int(sys.argv[2])):
    os.close(os.open(os.path.join(sys.argv[1], "e%06d" % i),
                     os.O_WRONLY | os.O_CREAT, 0o644))
EOF
	touch "$dir_dir/.done"
fi
if [ ! -e "$train_dir/.done" ]; then
	log "making $nimg JPEGs in shards of 100 in $train_dir"
	rm -rf "$train_dir" "$train_dir.src"
	"$st" synth imagenet "$train_dir.src" --classes "$classes" \
	    --per-class "$per_class" --val 0 -j "$ncpu" >/dev/null
	"$st" pack imagenet "$train_dir.src" -o "$train_dir/in-%06d.tar" \
	    --max-count 100 >"$data/pack.log"
	rm -rf "$train_dir.src"
	touch "$train_dir/.done"
fi
# What the servers serve: www/{big,small,dir,train}.
www=$work/www
rm -rf "$www"
mkdir -p "$www"
ln -s "$big_dir" "$www/big"
ln -s "$small_dir" "$www/small"
ln -s "$dir_dir" "$www/dir"
ln -s "$train_dir" "$www/train"
big_bytes=$(stat -c %s "$big_dir/big.tar")
small_bytes=$(find "$small_dir" -name '*.jpg' -printf '%s\n' |
    awk '{ s += $1 } END { printf "%.0f", s }')
train_tars=("$train_dir"/*.tar)
train_bytes=$(cat "${train_tars[@]}" | wc -c)
nshards=${#train_tars[@]}
log "big.tar $big_bytes bytes; $nsmall small files, $small_bytes bytes;" \
    "$ndir entries; $nimg images in $nshards shards, $train_bytes bytes"

# ---------------------------------------------------------------------------
# servers and mounts, stopped on any exit

srv=$work/srv
rm -rf "$srv"
mkdir -p "$srv/tmp"
PIDS=()
declare -A MOUNTED=()	# mount point -> the process that serves it

mounted() {
	awk -v m="$1" '$2 == m && $3 ~ /^fuse/ { f = 1 } END { exit !f }' \
	    /proc/mounts
}

cleanup() {
	local m p
	for m in "${!MOUNTED[@]}"; do
		fusermount3 -u "$m" 2>/dev/null || fusermount3 -u -z "$m" \
		    2>/dev/null || umount -l "$m" 2>/dev/null || true
	done
	for m in "${!MOUNTED[@]}"; do
		p=${MOUNTED[$m]}
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	MOUNTED=()
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	PIDS=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
	python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_port() {
	local i
	for (( i = 0; i < 600; i++ )); do
		python3 -c 'import socket, sys
socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' \
		    "$1" 2>/dev/null && return 0
		kill -0 "$2" 2>/dev/null || break
		sleep 0.2
	done
	die "nothing listens on 127.0.0.1:$1 (see $srv)"
}

# nginx: JSON autoindex at /, HTML autoindex of the same files at /h/.
nport=$(free_port)
user=
[ "$(id -u)" -ne 0 ] || user="user root;"
cat >"$srv/nginx.conf" <<EOF
daemon off;
$user
worker_processes $ncpu;
pid $srv/nginx.pid;
error_log $srv/error.log;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path $srv/tmp;
	proxy_temp_path $srv/tmp;
	fastcgi_temp_path $srv/tmp;
	uwsgi_temp_path $srv/tmp;
	scgi_temp_path $srv/tmp;
	sendfile on;
	keepalive_requests 100000;
	types { application/json json; application/x-tar tar; image/jpeg jpg; }
	default_type application/octet-stream;
	server {
		listen 127.0.0.1:$nport;
		root $www;
		autoindex on;
		autoindex_format json;
		location /h/ {
			alias $www/;
			autoindex on;
			autoindex_format html;
		}
	}
}
EOF
nginx -p "$srv" -c "$srv/nginx.conf" -e "$srv/error.log" 2>"$srv/nginx.err" &
nginx_pid=$!
PIDS+=($nginx_pid)
wait_port "$nport" "$nginx_pid"

# moto, the objects loaded before it listens
mport=$(free_port)
log "loading the bucket into moto"
INITIAL_NO_AUTH_ACTION_COUNT=3 python3 "$here/s3_server.py" -H 127.0.0.1 \
    -p "$mport" --preload "bench/big=$big_dir" \
    --preload "bench/small=$small_dir" --preload "bench/dir=$dir_dir" \
    >"$srv/moto.log" 2>&1 &
moto_pid=$!
PIDS+=($moto_pid)
wait_port "$mport" "$moto_pid"
export AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
export AWS_CONFIG_FILE=$srv/none AWS_SHARED_CREDENTIALS_FILE=$srv/none
read -r AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY < <(python3 - \
    "http://127.0.0.1:$mport" <<'EOF'
import json, sys, boto3
iam = boto3.client("iam", endpoint_url=sys.argv[1], region_name="us-east-1",
                   aws_access_key_id="x", aws_secret_access_key="y")
iam.create_user(UserName="bench")
iam.put_user_policy(UserName="bench", PolicyName="all", PolicyDocument=json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*",
                                             "Resource": "*"}]}))
k = iam.create_access_key(UserName="bench")["AccessKey"]
print(k["AccessKeyId"], k["SecretAccessKey"])
EOF
)
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
[ -n "$AWS_SECRET_ACCESS_KEY" ] || die "no keys from moto's IAM (see $srv/moto.log)"
( umask 077; echo "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" >"$srv/s3fs.passwd" )
: >"$srv/rclone.conf"

# a link proxy in front of each. Without --stats: the proxy rewrites that
# file (create, write, rename) at every response, which the benchmark
# does not read and a cloud link does not do: 0.8-1.1 CPU s more for the
# servers per 10^4 small files, on a machine the clients share.
start_proxy() {	# UPSTREAM-PORT NAME: the proxy's port in pport, pid in ppid
	local line i
	"$lp" --upstream "127.0.0.1:$1" \
	    >"$srv/$2.port" 2>"$srv/$2.err" &
	ppid=$!
	PIDS+=("$ppid")
	for (( i = 0; i < 100; i++ )); do
		line=$(head -n 1 "$srv/$2.port" 2>/dev/null || true)
		case $line in "port "*) break ;; esac
		sleep 0.1
	done
	case $line in
	"port "*) pport=${line#port } ;;
	*) cat "$srv/$2.err" >&2; die "the link proxy $2 did not start" ;;
	esac
}
start_proxy "$nport" nproxy
nlink=$pport nproxy_pid=$ppid
start_proxy "$mport" mproxy
mlink=$pport mproxy_pid=$ppid

# base_of BACKEND LINK: the server's URL, straight (lo) or through the link
base_of() {
	case $1-$2 in
	http-lo) echo "http://127.0.0.1:$nport" ;;
	http-ln) echo "http://127.0.0.1:$nlink" ;;
	s3-lo) echo "http://127.0.0.1:$mport" ;;
	s3-ln) echo "http://127.0.0.1:$mlink" ;;
	esac
}
EMPTY_SHA=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
# the per-transfer lines of a curl config (-K) for URL [RANGE]
curl_op() {
	printf 'url = "%s"\noutput = "/dev/null"\n' "$2"
	printf 'write-out = "%%{http_code} %%{size_download}\\n"\n'
	[ -z "${3:-}" ] || printf 'range = "%s"\n' "$3"
	if [ "$1" = s3 ]; then
		printf 'aws-sigv4 = "aws:amz:us-east-1:s3"\nuser = "%s:%s"\n' \
		    "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY"
		printf 'header = "x-amz-content-sha256: %s"\n' "$EMPTY_SHA"
	fi
}
# url_of BACKEND LINK PATH: an object's URL (s3: path-style)
url_of() {
	case $1 in
	http) echo "$(base_of "$1" "$2")/$3" ;;
	s3) echo "$(base_of "$1" "$2")/bench/$3" ;;
	esac
}
cfgs=$srv/curl
mkdir -p "$cfgs"
part=$(( part_mb << 20 ))
for be in http s3; do
	for ln in lo ln; do
		u=$(url_of $be $ln big/big.tar)
		f=$cfgs/seq-$ln-$be.cfg
		: >"$f"
		for (( o = 0; o < big_bytes; o += part )); do
			e=$(( o + part - 1 < big_bytes - 1 ? o + part - 1 : big_bytes - 1 ))
			[ $o = 0 ] || echo next >>"$f"
			curl_op $be "$u" "$o-$e" >>"$f"
		done
		f=$cfgs/small-$ln-$be.cfg
		: >"$f"
		first=1
		for p in "$small_dir"/*.jpg; do
			[ $first = 1 ] || echo next >>"$f"
			first=0
			curl_op $be "$(url_of $be $ln "small/${p##*/}")" >>"$f"
		done
	done
done
for be in http s3; do
	for ln in lo ln; do
		curl -sS --fail -o /dev/null -K <(curl_op $be \
		    "$(url_of $be $ln big/big.tar)" 0-0) >/dev/null ||
		    die "$be $ln: cannot read big/big.tar with curl"
	done
done
curl -sS --fail -o /dev/null "http://127.0.0.1:$nport/h/small/" ||
    die "nginx does not serve its HTML index"
log "nginx :$nport (link :$nlink), moto :$mport (link :$mlink)"

# CPU seconds (user + system) of a process and its waited-for children
cpu_of() {
	local p
	for p in "$@"; do
		awk '{ sub(/^.*\) /, ""); print $12 + $13 + $14 + $15 }' \
		    "/proc/$p/stat" 2>/dev/null || true
	done | awk -v hz="$(getconf CLK_TCK)" '{ s += $1 } END { printf "%.2f", s / hz }'
}
server_cpu() {
	cpu_of "$nginx_pid" $(pgrep -P "$nginx_pid" | tr '\n' ' ') \
	    "$moto_pid" "$nproxy_pid" "$mproxy_pid"
}
machine_busy() {
	awk '$1 == "cpu" { printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / 100 }' \
	    /proc/stat
}
# Wait (at most idle_wait s) for half a second in which the machine is idle.
wait_quiet() {
	local i b0 b1
	for (( i = 0; i < idle_wait * 2; i++ )); do
		b0=$(machine_busy)
		sleep 0.5
		b1=$(machine_busy)
		awk -v a="$b0" -v b="$b1" 'BEGIN { exit !(b - a <= 0.05) }' &&
		    return 0
	done
	busy_waits=$(( busy_waits + 1 ))
	return 0
}
busy_waits=0
getjson() {
	python3 - "$@" <<'EOF'
import json, sys
# a JSON file, or output whose last line is one
try:
    with open(sys.argv[1]) as f:
        text = f.read()
    try:
        d = json.loads(text)
    except ValueError:
        d = json.loads(text.strip().splitlines()[-1])
except (OSError, ValueError, IndexError):
    d = {}
out = []
for k in sys.argv[2:]:
    v = d
    for p in k.split("."):
        v = v.get(p) if isinstance(v, dict) else None
    out.append("NA" if v is None else str(v))
print(" ".join(out))
EOF
}

# the page cache: dropped, then the server's files of this case read back
cold_client() {	# FOLDER... (of www, nginx's files to warm)
	local f
	[ $can_drop = 1 ] || return 0
	sync
	echo 3 >/proc/sys/vm/drop_caches
	for f in "$@"; do
		find -L "$www/$f" -type f -printf '%s\n' >/dev/null
		find -L "$www/$f" -type f -size +0 -exec cat {} + >/dev/null
	done
}

# mount_peer CLIENT BACKEND LINK MNT LOG [SHARDFS OPTION...]: the server's
# root (nginx's /, rclone's /h/, the bucket) at MNT, in the background
rc_common=(--config "$srv/rclone.conf" --read-only --no-modtime --no-checksum
    --dir-cache-time 1h --attr-timeout 1h --checkers 32 --log-level NOTICE)
rc_off=(--vfs-cache-mode off --buffer-size 64M --vfs-read-chunk-size 128M
    --vfs-read-chunk-size-limit off)
rc_full=(--vfs-cache-mode full --vfs-read-ahead 64M --buffer-size 16M
    --vfs-read-chunk-size 128M --vfs-read-chunk-size-limit off
    --cache-dir "$work/rclone-cache")
rc_s3=(--s3-provider Other --s3-region us-east-1 --s3-force-path-style
    --s3-no-head-object)
s3fs_opts="ro,passwd_file=$srv/s3fs.passwd,use_path_request_style"
s3fs_opts="$s3fs_opts,endpoint=us-east-1,parallel_count=$seq_conns"
s3fs_opts="$s3fs_opts,multipart_size=$part_mb,max_stat_cache_size=200000"
s3fs_opts="$s3fs_opts,stat_cache_expire=3600,enable_noobj_cache"
s3fs_opts="$s3fs_opts,multireq_max=32,tmpdir=$work/s3fs-tmp"
s3fs_opts="$s3fs_opts,dbglevel=warn"
mpid=
mount_peer() {
	local client=$1 be=$2 ln=$3 mnt=$4 lg=$5 base i
	shift 5
	base=$(base_of "$be" "$ln")
	mkdir -p "$mnt"
	! mounted "$mnt" || die "$mnt is still mounted"
	case $client-$be in
	ceiling-local)	# the caller's folder (big, small), from memory
		case $folder in
		big) "$bin/fuse_ceiling" "$big_dir" big "$mnt" >"$lg" 2>&1 & ;;
		small) "$bin/fuse_ceiling" "$small_dir" small "$mnt" >"$lg" 2>&1 & ;;
		*) die "no ceiling for $folder" ;;
		esac ;;
	shardfs-http)
		"$sfs" "$base/" "$mnt" -f "$@" >"$lg" 2>&1 & ;;
	shardfs-s3)
		AWS_ENDPOINT_URL_S3=$base "$sfs" s3://bench "$mnt" -f "$@" \
		    >"$lg" 2>&1 & ;;
	rclone-http)
		rclone mount :http: "$mnt" --http-url "$base/h/" \
		    "${rc_common[@]}" "${rc_off[@]}" >"$lg" 2>&1 & ;;
	rclone-s3)
		RCLONE_S3_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID \
		RCLONE_S3_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY \
		    rclone mount :s3:bench "$mnt" "${rc_s3[@]}" \
		    --s3-endpoint "$base" "${rc_common[@]}" "${rc_off[@]}" \
		    >"$lg" 2>&1 & ;;
	rclonefull-http)
		rm -rf "$work/rclone-cache"
		rclone mount :http: "$mnt" --http-url "$base/h/" \
		    "${rc_common[@]}" "${rc_full[@]}" >"$lg" 2>&1 & ;;
	rclonefull-s3)
		rm -rf "$work/rclone-cache"
		RCLONE_S3_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID \
		RCLONE_S3_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY \
		    rclone mount :s3:bench "$mnt" "${rc_s3[@]}" \
		    --s3-endpoint "$base" "${rc_common[@]}" "${rc_full[@]}" \
		    >"$lg" 2>&1 & ;;
	s3fs-s3)
		rm -rf "$work/s3fs-tmp"
		mkdir -p "$work/s3fs-tmp"
		s3fs bench "$mnt" -f -o "$s3fs_opts,url=$base" \
		    >"$lg" 2>&1 & ;;
	*) die "no client $client on $be" ;;
	esac
	mpid=$!
	MOUNTED[$mnt]=$mpid
	for (( i = 0; i < 600; i++ )); do
		mounted "$mnt" && return 0
		kill -0 "$mpid" 2>/dev/null || break
		sleep 0.1
	done
	tail -5 "$lg" >&2
	return 1
}
# umount_peer MNT: unmount; mexit is the exit status of its process
umount_peer() {
	local mnt=$1 p=${MOUNTED[$1]:-} i
	mexit=NA
	fusermount3 -u "$mnt" 2>/dev/null || fusermount -u "$mnt" 2>/dev/null ||
	    fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null ||
	    true
	if [ -n "$p" ]; then
		for (( i = 0; i < 150; i++ )); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.1
		done
		kill "$p" 2>/dev/null || true
		mexit=0
		wait "$p" 2>/dev/null || mexit=$?
	fi
	unset "MOUNTED[$mnt]"
	! mounted "$mnt" || { log "$mnt is still mounted"; return 1; }
}

# cmp_sample LOCAL MOUNTED: a few MiB of each (start, middle, end) equal
cmp_sample() {
	local a=$1 b=$2 n k
	n=$(( $(stat -c %s "$a") >> 20 ))
	[ "$(stat -c %s "$b")" = "$(stat -c %s "$a")" ] || return 1
	for k in 0 $(( n / 2 )) $(( n > 4 ? n - 4 : 0 )); do
		cmp -s <(dd if="$a" bs=1M skip=$k count=4 status=none) \
		    <(dd if="$b" bs=1M skip=$k count=4 status=none) || return 1
	done
}

# ---------------------------------------------------------------------------
# the cases

cases=
for f in seq small; do
	for ln in lo ln; do
		cases="$cases $f-$ln-http-shardfs $f-$ln-http-curl $f-$ln-http-rclone"
		[ $f != seq ] || cases="$cases $f-$ln-http-shardfsdio"
		cases="$cases $f-$ln-http-rclonefull $f-$ln-s3-shardfs $f-$ln-s3-curl"
		cases="$cases $f-$ln-s3-rclone $f-$ln-s3-rclonefull $f-$ln-s3-s3fs"
	done
done
for ln in lo ln; do
	cases="$cases dir-$ln-http-list dir-$ln-s3-list"
	cases="$cases dir-$ln-http-shardfs dir-$ln-http-rclone dir-$ln-s3-shardfs"
	cases="$cases dir-$ln-s3-rclone dir-$ln-s3-s3fs"
done
cases="$cases seq-lo-local-ceiling small-lo-local-ceiling"
cases="$cases train-disk train-lo-direct train-lo-mount train-ln-direct"
cases="$cases train-ln-mount disk-io"
last="cache-fill cache-dec cache-io"
pick() {	# the words of $1 that match a pattern of $only (all if none)
	local c p out=
	for c in $1; do
		if [ -z "$only" ]; then out="$out $c"; continue; fi
		for p in $only; do
			# shellcheck disable=SC2254
			case $c in $p) out="$out $c"; break ;; esac
		done
	done
	echo $out
}
cases=$(pick "$cases")
last=$(pick "$last")
[ -n "$cases$last" ] || die "--cases '$only' matches no case"
case " $last " in
*" cache-dec "*|*" cache-io "*)
	case " $last " in *" cache-fill "*) ;; *) last="cache-fill $last" ;; esac ;;
esac

rotate() {
	local -a w=($1)
	local n=${#w[@]} k i
	[ "$n" -gt 0 ] || return 0
	k=$(( $2 % n ))
	for (( i = 0; i < n; i++ )); do
		printf '%s ' "${w[$(( (i + k) % n ))]}"
	done
}

results=$work/shardfs-$(date +%Y%m%d-%H%M%S).tsv
printf 'round\tcase\tstatus\tproc_s\twall_s\tbytes\tmb_s\tfiles_s\tramp_mib\tt32_s\tlist_s\tstat_s\tips\tcpu_client\tcpu_mount\tcpu_server\tcpu_other\tmount_exit\twhy\n' \
    >"$results"
failures=0
dcache=$work/disk-cache
sl_dec=(--workers "$ncpu" --batch "$dec_batch" --io-streams 2 --shuffle 1000
    --seed 0 --image-size 224 --dtype f32 --layout nchw --remainder keep
    --epochs 1 -q)
sl_io=(--no-decode --io-streams 2 --remainder keep --epochs 1 -q)

# run_case ROUND CASE: one timed run, one line of $results
run_case() {
	local r=$1 c=$2 fam ln be client mnt=$mnts/m lg=$logs/$2.r$1
	local out=$logs/$2.r$1.out tf=$logs/$2.r$1.time status=ok why=
	local t0 t1 b0 b1 s0 s1 m0 m1 rc=0 wall proc cpu mexit srv mcpu=0.00 other ucpu scpu
	local bytes=NA mbs=NA fps=NA ramp=NA t32=NA lst=NA stt=NA ips=NA
	local folder= n bad x samples
	local -a cmd mopts=()
	IFS=- read -r fam ln be client <<<"$c"
	case $fam in
	train|disk|cache) folder=train ;;
	seq) folder=big ;;
	*) folder=$fam ;;
	esac
	case $c in
	train-disk|disk-io|cache-dec|cache-io) cold_client ;;
	dir-*) cold_client dir ;;
	*) cold_client "$folder" ;;
	esac
	case $c in
	cache-*) ln=ln be=http client=shardfs
		mopts=(--cache-dir "$dcache" --cache-max-mb
		    $(( (train_bytes * 2 >> 20) + 1 )))
		[ "$c" != cache-fill ] || { rm -rf "$dcache"; mkdir -p "$dcache"; } ;;
	train-*-mount) be=http client=shardfs ;;
	*-shardfsdio) client=shardfs mopts=(-o direct_io) ;;
	esac
	mpid=
	case $client in
	shardfs|rclone|rclonefull|s3fs|ceiling)
		if ! mount_peer "$client" "$be" "$ln" "$mnt" "$lg.mount.log" \
		    "${mopts[@]}"; then
			status=fail why="did not mount (log: $lg.mount.log)"
		fi ;;
	esac
	case $c in
	seq-*-curl) cmd=(curl -sS --no-progress-meter --parallel
		--parallel-immediate --parallel-max "$seq_conns" -K
		"$cfgs/seq-$ln-$be.cfg") ;;
	small-*-curl) cmd=(curl -sS --no-progress-meter --parallel
		--parallel-immediate --parallel-max "$small_threads" -K
		"$cfgs/small-$ln-$be.cfg") ;;
	seq-*) cmd=(python3 "$here/fsread.py" seq "$mnt/big/big.tar") ;;
	small-*) cmd=(python3 "$here/fsread.py" many "$mnt/small" -j "$small_threads") ;;
	dir-*-http-list) cmd=(python3 "$here/fsread.py" list
		"$(base_of http "$ln")/dir/") ;;
	dir-*-s3-list) cmd=(python3 "$here/fsread.py" list
		"s3://bench/dir/" "$(base_of s3 "$ln")") ;;
	dir-*) cmd=(python3 "$here/fsread.py" dir "$mnt/dir") ;;
	train-disk) cmd=("$sl" bench "$train_dir/in.json" "${sl_dec[@]}" --json "$out") ;;
	disk-io) cmd=("$sl" bench "$train_dir/in.json" "${sl_io[@]}" --json "$out") ;;
	train-*-direct) cmd=("$sl" bench "$(base_of http "$ln")/train/in.json"
		"${sl_dec[@]}" --json "$out") ;;
	train-*-mount|cache-fill|cache-dec) cmd=("$sl" bench "$mnt/train/in.json"
		"${sl_dec[@]}" --json "$out") ;;
	cache-io) cmd=("$sl" bench "$mnt/train/in.json" "${sl_io[@]}" --json "$out") ;;
	*) die "unknown case $c" ;;
	esac
	rm -f "$out" "$tf"
	if [ $status = ok ]; then
		wait_quiet
		s0=$(server_cpu)
		[ -z "$mpid" ] || m0=$(cpu_of "$mpid")
		b0=$(machine_busy)
		t0=$EPOCHREALTIME
		if [ "${cmd[0]}" = "$sl" ]; then
			/usr/bin/time -f '%U %S' -o "$tf" timeout "$limit" \
			    "${cmd[@]}" >"$lg.log" 2>&1 || rc=$?
		else
			/usr/bin/time -f '%U %S' -o "$tf" timeout "$limit" \
			    "${cmd[@]}" >"$out" 2>"$lg.log" || rc=$?
		fi
		t1=$EPOCHREALTIME
		b1=$(machine_busy)
		[ -z "$mpid" ] || { m1=$(cpu_of "$mpid"); mcpu=$(awk -v a="$m0" \
		    -v b="$m1" 'BEGIN { printf "%.2f", b - a }'); }
		s1=$(server_cpu)
		wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
		proc=$wall
		read -r ucpu scpu < <(tail -1 "$tf" 2>/dev/null || echo "0 0") || true
		case $ucpu in ''|*[!0-9.]*) ucpu=0 scpu=0 ;; esac
		cpu=$(awk -v u="$ucpu" -v s="$scpu" 'BEGIN { printf "%.2f", u + s }')
		srv=$(awk -v a="$s0" -v b="$s1" 'BEGIN { printf "%.2f", b - a }')
		other=$(awk -v a="$b0" -v b="$b1" -v c="$cpu" -v s="$srv" -v m="$mcpu" \
		    'BEGIN { o = b - a - c - s - m; printf "%.2f", (o > 0 ? o : 0) }')
		case $rc in
		0) ;;
		124) status=fail why="not done in --limit $limit s" ;;
		*) status=fail why="exit status $rc" ;;
		esac
	else
		wall=NA proc=NA cpu=NA srv=NA other=NA mcpu=NA
	fi

	# results and checks
	if [ $status = ok ]; then
		case $c in
		seq-*-curl|small-*-curl)
			n=$(wc -l <"$out")
			bad=$(awk '$1 != 200 && $1 != 206' "$out" | wc -l)
			bytes=$(awk '{ s += $2 } END { printf "%.0f", s }' "$out")
			case $fam in
			seq) x=$big_bytes ;;
			small) x=$small_bytes
			    fps=$(awk -v n="$n" -v w="$wall" 'BEGIN { printf "%.1f", n / w }') ;;
			esac
			[ "$bad" = 0 ] && [ "$bytes" = "$x" ] ||
			    { status=fail why="$n transfers ($bad not 200/206), $bytes bytes, want $x"; }
			;;
		seq-*)
			read -r bytes wall ramp t32 < <(getjson "$out" bytes seconds \
			    ramp_mib t32_s)
			[ "$bytes" = "$big_bytes" ] ||
			    { status=fail why="read $bytes bytes, want $big_bytes"; }
			[ $status != ok ] || cmp_sample "$big_dir/big.tar" "$mnt/big/big.tar" ||
			    { status=fail why="bytes differ from big.tar"; }
			;;
		small-*)
			read -r n bytes wall lst fps < <(getjson "$out" files bytes \
			    seconds list_seconds files_s)
			[ "$n" = "$nsmall" ] && [ "$bytes" = "$small_bytes" ] ||
			    { status=fail why="read $n files, $bytes bytes; want $nsmall, $small_bytes"; }
			if [ $status = ok ]; then
				for x in 000000 $(printf '%06d' $(( nsmall / 3 ))) \
				    $(printf '%06d' $(( nsmall - 1 ))); do
					cmp -s "$small_dir/$x.jpg" "$mnt/small/$x.jpg" ||
					    { status=fail why="$x.jpg differs"; break; }
				done
			fi
			;;
		dir-*)
			read -r n wall stt < <(getjson "$out" entries seconds stat_seconds)
			[ "$client" != list ] || stt=NA
			bytes=0
			[ "$n" = "$ndir" ] ||
			    { status=fail why="listed $n entries, want $ndir"; }
			;;
		train-*|cache-fill|cache-dec)
			read -r samples x ips < <(getjson "$out" result.samples \
			    result.skipped result.steady_images_per_second)
			[ "$samples" = "$nimg" ] && [ "$x" = 0 ] ||
			    { status=fail why="samples $samples skipped $x, want $nimg 0"; }
			bytes=$train_bytes
			;;
		disk-io|cache-io)
			read -r samples x < <(getjson "$out" result.samples result.skipped)
			[ "$samples" = "$nimg" ] && [ "$x" = 0 ] ||
			    { status=fail why="samples $samples skipped $x, want $nimg 0"; }
			bytes=$train_bytes
			;;
		esac
		case $bytes in ''|NA|*[!0-9]*) ;; *)
			mbs=$(awk -v b="$bytes" -v w="$wall" 'BEGIN { if (w > 0) printf "%.1f", b / w / 1e6; else print "NA" }') ;;
		esac
	fi
	if [ "$client" = shardfs ] && [ -n "$mpid" ] && mounted "$mnt"; then
		cp "$mnt/.shardfs/stats" "$lg.stats.json" 2>/dev/null || true
		case $c in
		cache-fill)
			read -r x < <(getjson "$lg.stats.json" disk_cache.written_blocks)
			[ "$x" != NA ] && [ "$x" -gt 0 ] ||
			    { status=fail why="${why:+$why; }no block written to the disk cache"; } ;;
		cache-dec|cache-io)
			read -r x n < <(getjson "$lg.stats.json" disk_cache.hit_blocks \
			    remote.bytes)
			[ "$x" != NA ] && [ "$x" -gt 0 ] && [ "$n" -lt $(( train_bytes / 20 )) ] ||
			    { status=fail why="${why:+$why; }disk cache: $x blocks read back, $n bytes fetched"; } ;;
		esac
	fi
	mexit=
	if [ -n "$mpid" ]; then
		umount_peer "$mnt" ||
		    { status=fail why="${why:+$why; }did not unmount"; }
		# An exit after the unmount is not the measurement's: noted.
		[ "$mexit" = 0 ] || [ "$mexit" = NA ] ||
		    log "NOTE: $c round $r: $client exited $mexit after the unmount"
	fi
	if [ $status != ok ]; then
		failures=$(( failures + 1 ))
		log "FAILED: $c in round $r: $why (logs: $lg.*)"
		tail -3 "$lg.log" >&2 2>/dev/null || true
	fi
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
	    "$r" "$c" "$status" "$proc" "$wall" "$bytes" "$mbs" "$fps" "$ramp" "$t32" \
	    "$lst" "$stt" "$ips" "$cpu" "$mcpu" "$srv" "$other" "${mexit:-}" \
	    "$why" >>"$results"
	log "round $r: $c $status ${wall}s $mbs MB/s${fps:+ $fps files/s}" \
	    "ramp $ramp MiB, images/s $ips; CPU client $cpu, mount $mcpu," \
	    "servers $srv, others $other"
}

# ---------------------------------------------------------------------------
# the rounds

t_start=$EPOCHREALTIME
for (( r = 1; r <= runs; r++ )); do
	for c in $(rotate "$cases" $(( r - 1 ))) $last; do
		run_case "$r" "$c"
	done
done
t_end=$EPOCHREALTIME
cleanup

# ---------------------------------------------------------------------------
# the report

cpu_model=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
mem=$(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
v_sk=$(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo "no commit")
[ -z "$(cd "$root" && git status --porcelain --untracked-files=no 2>/dev/null)" ] ||
    v_sk="$v_sk + uncommitted changes"
v_sk="$v_sk, binaries sha256 $(cat "$sfs" "$sl" "$bin"/libshardkit.so.0 |
    sha256sum | cut -c1-12)"
v_peers="$(curl --version | head -1 | cut -d' ' -f1-2); $(rclone version |
    head -1); s3fs $(s3fs --version 2>&1 | head -1 | sed 's/.*V\([0-9.]*\).*/\1/');
    $(fusermount3 -V); nginx $(nginx -v 2>&1 | sed 's/.*version: nginx.//');
    moto $(python3 -c 'import moto; print(moto.__version__)')"

runs=$runs quick=$quick ncpu=$ncpu cpu_model="$cpu_model" mem="$mem" \
    kernel="$(uname -r)" date="$(date -u '+%Y-%m-%d %H:%M UTC')" \
    v_sk="$v_sk" v_peers="$v_peers" cmdline="$cmdline" big=$big_bytes \
    nsmall=$nsmall small_bytes=$small_bytes ndir=$ndir nimg=$nimg \
    nshards=$nshards train_bytes=$train_bytes t_start=$t_start \
    t_end=$t_end can_drop=$can_drop seq_conns=$seq_conns \
    busy_waits=$busy_waits idle_wait=$idle_wait \
    python3 - "$results" <<'EOF' | tee "$work/shardfs-table.md"
import csv, os, statistics as st, sys

rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
E = os.environ
runs, quick, ncpu = int(E["runs"]), int(E["quick"]), int(E["ncpu"])
by = {}
for r in rows:
    by.setdefault(r["case"], []).append(r)

def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None

def vals(c, k):
    return [num(r[k]) for r in by.get(c, []) if r["status"] == "ok"
            and num(r[k]) is not None]

def med(c, k):
    v = vals(c, k)
    return st.median(v) if v else None

def fmt(x, f):
    return "—" if x is None else f % x

def rng(c, k, f):
    v = vals(c, k)
    return (f + "–" + f) % (min(v), max(v)) if len(v) > 1 else ""

nfail = sum(r["status"] != "ok" for r in rows)
other = [num(r["cpu_other"]) for r in rows if num(r["cpu_other"]) is not None]
print("- Machine: %d CPUs (%s), %s RAM, Linux %s." % (ncpu, E["cpu_model"], E["mem"], E["kernel"]))
print("- Date: %s." % E["date"])
print("- Versions: shardkit %s; %s." % (E["v_sk"], " ".join(E["v_peers"].split())))
print("- Command: `%s`: %d rounds; medians over the rounds (min–max)." % (E["cmdline"], runs))
print("- Data: big.tar %.1f MiB; %s small files, %.1f MB; %s entries in the readdir folder; %s JPEGs in %s shards, %.1f MB." % (
    int(E["big"]) / 2**20, E["nsmall"], int(E["small_bytes"]) / 1e6, E["ndir"], E["nimg"], E["nshards"], int(E["train_bytes"]) / 1e6))
print("- Page cache: %s; every mount fresh for every run." % (
    "dropped before every run, the server's files read back" if E["can_drop"] == "1"
    else "NOT dropped (no root)"))
if other:
    print("- Other processes used %.2f CPU s per run (median; max %.2f); the script took %.0f s." % (
        st.median(other), max(other), float(E["t_end"]) - float(E["t_start"])))
if nfail:
    print("- **%d runs failed** (see the logs); they are left out of the medians." % nfail)
bad = {}
for r in rows:
    if r["mount_exit"] not in ("", "0", "NA"):
        k = r["case"].rsplit("-", 1)[-1] if r["case"].count("-") == 3 else "shardfs"
        bad.setdefault((k, r["mount_exit"]), []).append(r["case"])
for (k, st_), cs in sorted(bad.items()):
    print("- **%s exited %s after the unmount** in %d runs (%s%s): after the measurement, not counted in it." % (
        k, st_, len(cs), ", ".join(sorted(set(cs))[:4]), ", ..." if len(set(cs)) > 4 else ""))
if int(E["busy_waits"]):
    print("- The machine was not idle (within %s s) before %s of the runs." % (E["idle_wait"], E["busy_waits"]))
if quick:
    print("- **QUICK MODE: a smoke test of the script, not a result.**")
print()

LN = {"lo": "loopback", "ln": "link"}
NAME = {"shardfs": "shardfs", "curl": "curl", "rclone": "rclone mount (cache off)",
        "rclonefull": "rclone mount (cache full)", "s3fs": "s3fs",
        "list": "the server's listing, straight (its ceiling)",
        "ceiling": "FUSE alone: fuse_ceiling, from memory"}
MOUNTS = ("rclone", "rclonefull", "s3fs")
print("| case | link | backend | client | result | min–max | ratio | goal | met? | CPU s client / mount / servers / other | busy |")
print("|---|---|---|---|---:|---:|---:|---|---|---|---:|")

def cpu(c):
    parts = [med(c, k) for k in ("cpu_client", "cpu_mount", "cpu_server", "cpu_other")]
    return " / ".join(fmt(x, "%.2f") for x in parts)

def busy(c):
    # the share of all CPUs busy during the run: near 1, CPU-bound
    w = med(c, "proc_s")
    s = [med(c, k) for k in ("cpu_client", "cpu_mount", "cpu_server", "cpu_other")]
    if not w or any(x is None for x in s):
        return "—"
    return "%.2f" % (sum(s) / (w * ncpu))

def row(what, c, ln, be, client, key, f, unit, ratio=None, rof="", goal="", met=None):
    if c not in by:
        return
    m = med(c, key)
    ok = "" if met is None or ratio is None else ("yes" if met(ratio) else "**no**")
    print("| %s | %s | %s | %s | %s %s | %s | %s | %s | %s | %s | %s |" % (
        what, LN.get(ln, ln), be, client, fmt(m, f), unit, rng(c, key, f),
        rfmt(ratio, rof), goal, ok, cpu(c), busy(c)))

class Ratio(float):
    """The ratio of the medians, carrying the median of the per-round
    ratios for the table."""
    rounds = None

def ratio(a, ka, b, kb):
    x, y = med(a, ka), med(b, kb)
    if x is None or not y:
        return None
    out = Ratio(x / y)
    per = []
    for i in range(1, runs + 1):
        ra = [num(r[ka]) for r in by.get(a, []) if r["round"] == str(i) and r["status"] == "ok"]
        rb = [num(r[kb]) for r in by.get(b, []) if r["round"] == str(i) and r["status"] == "ok"]
        if ra and rb and ra[0] is not None and rb[0]:
            per.append(ra[0] / rb[0])
    out.rounds = st.median(per) if per else None
    return out

def rfmt(x, unit):
    if x is None:
        return ""
    if getattr(x, "rounds", None) is not None and runs > 1:
        return "%.2f (%.2f) %s" % (x, x.rounds, unit)
    return "%.2f %s" % (x, unit)

def ceiling_rows(what, fam, s, curl, key, f, unit):
    # FUSE alone, from memory: shardfs's share of it, and its own share
    # of curl (the most a mount reaches here)
    c = "%s-lo-local-ceiling" % fam
    if c not in by:
        return
    row(what, c, "lo", "—", NAME["ceiling"], key, f, unit,
        ratio(s, key, c, key), "shardfs ÷ this")
    x = ratio(c, key, curl, key)
    if x is not None:
        print("| %s | loopback | — | FUSE alone ÷ curl: the most a mount reaches here | | | %s | | | | |" % (
            what, rfmt(x, "")))

size = "%.0f MiB" % (int(E["big"]) / 2**20)
for ln in ("lo", "ln"):
    for be in ("http", "s3"):
        s = "seq-%s-%s-shardfs" % (ln, be)
        peers = [p for p in MOUNTS if "seq-%s-%s-%s" % (ln, be, p) in by]
        best = max(peers, key=lambda p: med("seq-%s-%s-%s" % (ln, be, p), "mb_s") or 0, default=None)
        what = "sequential, %s" % size
        row(what, s, ln, be, "shardfs", "mb_s", "%.0f", "MB/s")
        if s in by:
            m = med(s, "ramp_mib")
            print("| %s | %s | %s | shardfs | %s MiB to 90%% of steady (%s s to 32 MiB) | %s | | ≤ 32 MiB | %s | | |" % (
                what, LN[ln], be, fmt(m, "%.0f"), fmt(med(s, "t32_s"), "%.2f"),
                rng(s, "ramp_mib", "%.0f"), "" if m is None else ("yes" if m <= 32 else "**no**")))
        # issue 26: 0.8 on loopback, 0.9 through the link
        g = 0.8 if ln == "lo" else 0.9
        row(what, "seq-%s-%s-curl" % (ln, be), ln, be, "curl, %s ranged GETs" % E["seq_conns"], "mb_s", "%.0f", "MB/s",
            ratio(s, "mb_s", "seq-%s-%s-curl" % (ln, be), "mb_s"), "shardfs ÷ this", "≥ %.1f" % g, lambda x, g=g: x >= g)
        d = "seq-%s-%s-shardfsdio" % (ln, be)
        row(what, d, ln, be, "shardfs -o direct_io", "mb_s", "%.0f", "MB/s",
            ratio(d, "mb_s", "seq-%s-%s-curl" % (ln, be), "mb_s"), "this ÷ curl")
        if ln == "lo" and be == "http":
            ceiling_rows(what, "seq", s, "seq-lo-http-curl", "mb_s", "%.0f", "MB/s")
        for p in peers:
            c = "seq-%s-%s-%s" % (ln, be, p)
            row(what, c, ln, be, NAME[p] + (" (best)" if p == best and len(peers) > 1 else ""),
                "mb_s", "%.0f", "MB/s", ratio(s, "mb_s", c, "mb_s"), "shardfs ÷ this",
                "≥ 1.5 (best peer)", lambda x: x >= 1.5)
for ln in ("lo", "ln"):
    for be in ("http", "s3"):
        s = "small-%s-%s-shardfs" % (ln, be)
        what = "%s files of ~110 KB, 32 threads" % E["nsmall"]
        row(what, s, ln, be, "shardfs", "files_s", "%.0f", "files/s")
        if s in by:
            print("| %s | %s | %s | shardfs | %s s to list the folder | | | | | | |" % (
                what, LN[ln], be, fmt(med(s, "list_s"), "%.2f")))
        c = "small-%s-%s-curl" % (ln, be)
        g = 0.8 if ln == "lo" else 0.9
        row(what, c, ln, be, "curl, 32 GETs at once", "files_s", "%.0f", "files/s",
            ratio(s, "files_s", c, "files_s"), "shardfs ÷ this", "≥ %.1f" % g, lambda x, g=g: x >= g)
        if ln == "lo" and be == "http":
            ceiling_rows(what, "small", s, c, "files_s", "%.0f", "files/s")
        for p in MOUNTS:
            c = "small-%s-%s-%s" % (ln, be, p)
            row(what, c, ln, be, NAME[p], "files_s", "%.0f", "files/s",
                ratio(s, "files_s", c, "files_s"), "shardfs ÷ this", "> 1", lambda x: x > 1)
            if c in by:
                print("| %s | %s | %s | %s | %s s to list the folder | | | | | | |" % (
                    what, LN[ln], be, NAME[p], fmt(med(c, "list_s"), "%.2f")))
for ln in ("lo", "ln"):
    for be in ("http", "s3"):
        what = "readdir of %s entries, cold" % E["ndir"]
        for p in ("list", "shardfs") + MOUNTS:
            c = "dir-%s-%s-%s" % (ln, be, p)
            if c not in by:
                continue
            goal, met, rt = "", None, None
            if p == "shardfs" and ln == "lo":
                goal, rt = "≤ 2 s (at 10⁵)", med(c, "wall_s")
                met = lambda x: x <= 2
            row(what, c, ln, be, NAME[p], "wall_s", "%.2f",
                "s" if p == "list" else
                "s (stat of all: %s s)" % fmt(med(c, "stat_s"), "%.2f"),
                rt, "s" if rt is not None else "", goal, met)
what = "shardload bench epoch, decode on"
row(what, "train-disk", "local disk", "—", "shardload, page cache dropped", "ips", "%.0f", "images/s")
for ln in ("lo", "ln"):
    row(what, "train-%s-direct" % ln, ln, "http", "shardload streaming the URLs", "ips", "%.0f", "images/s")
    m = "train-%s-mount" % ln
    row(what, m, ln, "http", "shardload on a shardfs mount", "ips", "%.0f", "images/s",
        ratio(m, "ips", "train-%s-direct" % ln, "ips"), "÷ streaming")
    if m in by and "train-disk" in by:
        print("| %s | %s | http | shardload on a shardfs mount | | | %s | | | | |" % (
            what, LN[ln], rfmt(ratio(m, "ips", "train-disk", "ips"), "÷ local disk")))
what = "disk cache (link)"
row(what, "cache-fill", "ln", "http", "1st epoch, filling it", "ips", "%.0f", "images/s",
    ratio("cache-fill", "ips", "train-ln-mount", "ips"), "÷ no disk cache")
row(what, "cache-dec", "ln", "http", "2nd epoch, new mount", "ips", "%.0f", "images/s",
    ratio("cache-dec", "ips", "train-disk", "ips"), "÷ local disk", "≥ 0.9", lambda x: x >= 0.9)
row(what, "disk-io", "local disk", "—", "shardload --no-decode, dropped", "mb_s", "%.0f", "MB/s")
row(what, "cache-io", "ln", "http", "2nd epoch --no-decode, new mount", "mb_s", "%.0f", "MB/s",
    ratio("cache-io", "mb_s", "disk-io", "mb_s"), "÷ local disk", "≥ 0.9", lambda x: x >= 0.9)
print()
print("ratio: of the medians, and in brackets the median of the per-round ratios (with more than one round).")
print("result: medians; seq MB/s over the whole file (the reader's time from open to the last byte; curl's whole process); small files/s of the reads after the listing; readdir seconds of os.scandir; images/s after the first batch. busy: the CPU seconds of everything during the run over (wall × %d CPUs): near 1, CPU-bound." % ncpu)
EOF

log "raw timings: $results; table: $work/shardfs-table.md; logs: $logs"
[ "$failures" = 0 ] || die "$failures runs failed"
