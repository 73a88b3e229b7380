#!/usr/bin/env bash
# bench/http.sh - the remote-shard benchmark of issue 12: shards over HTTP.
#
#   bench/http.sh [--runs K] [--quick] [--work DIR] [--build DIR]
#
# Serves the same shards, on the same machine and in the same run, from a
# Debian nginx on 127.0.0.1 (sendfile on, keepalive_requests 100000, one
# worker per CPU, no access log), started by this script, and through
# tests/proxy/linkproxy in front of it with its defaults: 30 ms to the
# first byte of every response, 60 MB/s per connection, 1 GB/s in all
# (the "emulated link"). Then, in every round:
#
#   1. Loopback, nginx direct, I/O only (E_LO epochs of the shards):
#      lo-sl       shardload bench URL/s/in.json --no-decode --io-streams 4
#                  --parts 4 --epochs E_LO --remainder keep
#      lo-curl     curl -sS --fail --parallel --parallel-immediate
#                  --parallel-max 16 -o /dev/null URL ... (every shard
#                  E_LO times; 16 = io-streams x parts), its exit status
#                  and %{size_download} of every URL checked
#   2. The emulated link, I/O only (E_LINK epochs):
#      ln-sl, ln-curl   the same pair through the proxy
#      lo-sl-io16, ln-sl-io16   shardload --io-streams 16 --parts 1: one
#                  connection per shard and 16 shards at once, curl's
#                  pattern (loopback and link)
#      ln-sl-def   shardload --no-decode with its defaults (no
#                  --io-streams, --parts, --part-size, --connections:
#                  2 streams x 4 parts of 8M, 64 connections)
#      ln-sl-pN    --io-streams 4 --parts N (N = 1, 2, 8; 4 is ln-sl)
#      ln-sl-psS   --io-streams 4 --parts 4 --part-size S (2M, 32M; 8M is
#                  ln-sl)
#   3. Decoding, through the proxy (one epoch; batches of 64, all CPUs):
#      dec-sl      shardload bench PROXY/s/in.json --workers NCPU --batch 64
#                  --io-streams 2 --shuffle 1000 --dtype f32 --layout nchw
#                  --remainder keep (random-resized crop to 224, flip)
#      dec-sl-disk the same from the manifest on local disk (reference)
#      dec-torch   bench/torch_load.py: DataLoader(batch_size=64,
#                  num_workers=NCPU, persistent_workers) over
#                  wds.WebDataset(["pipe:curl -s " + url for url in urls],
#                  shardshuffle=100).shuffle(1000).decode("pil")
#                  .to_tuple("jpg;png", "cls").map_tuple(Compose([
#                  RandomResizedCrop(224), RandomHorizontalFlip(),
#                  ToTensor(), Normalize(mean, std)]), int)
#   4. Training, compute-bound (shardtrain --model resnet18 --width 0.5
#      --image-size 96 --batch 64 --steps 100 --shuffle 1000, workers and
#      threads at their default, all CPUs; the ceilings at their default):
#      tr-disk     --data the manifest on local disk
#      tr-http     --data PROXY/s/in.json (the loader's defaults)
#
# Data: `shardtool synth imagenet --classes 20 --per-class 100 --val 0`
# (2000 JPEGs of about 500x375) packed with `shardtool pack imagenet
# --max-count 100` into 20 shards (about 250 MB), made once and kept in
# the work directory. The page cache is warmed before each round.
#
# Each of the K rounds (default 3) runs every case once, in an order that
# rotates from round to round; before each run the script waits (at most
# 15 s) for the machine to be idle for half a second, and it records the
# CPU time of the tool (with its children), of nginx and the proxy, and of
# everything else during the run. MB/s is the bytes the tool received
# (shardload's result.remote.bytes, the manifest included; curl's summed
# size_download) over the wall time of the whole process ($EPOCHREALTIME;
# start-up included for both), 1 MB = 1e6 bytes. images/s: shardload's
# result.steady_images_per_second and torch_load.py's images_per_sec (the
# images after the first batch over the time from its arrival to the
# last's). Training: shardtrain's result.wall_seconds (the training steps,
# not the ceilings measured after them) and result.verdict.
#
# Checks: shardload delivered every sample (samples = shards' samples x
# epochs, 0 skipped, 0 dropped) and received at least the shards' bytes x
# epochs; curl exited 0 and every URL gave 200 and the file's size;
# torch_load.py --expect; shardtrain ran every step on batches of 64 with
# nothing skipped. A failed run is reported and the others go on; the
# script then exits 1. The binaries timed are private copies of the build
# tree's shardload, shardtrain, linkproxy and libshardkit.
#
# The report (stdout, and http-table.md in the work directory) is Markdown:
# medians over the rounds with min-max, and the ratios against the goals
# of issue 12 (as medians' ratios and as medians of the per-round ratios).
# --quick: 400 JPEGs in 20 shards, fewer epochs and training steps, one
# round, to smoke-test this script; its numbers mean nothing.
#
# Environment: SHARDKIT_BUILD (the build tree; default build/, or --build),
# PYTHON_TORCH (a Python with torch, torchvision, webdataset and PIL;
# default /usr/bin/python3), SHARDKIT_BENCH_DIR (the work directory;
# default /tmp/shardkit-bench-http). Needs nginx, curl and /usr/bin/time.

set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
runs=
quick=0
work=${SHARDKIT_BENCH_DIR:-/tmp/shardkit-bench-http}
build=${SHARDKIT_BUILD:-$root/build}
pyt=${PYTHON_TORCH:-/usr/bin/python3}
cmdline="bench/http.sh${*:+ $*}"

usage() {
	sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0"
	exit "${1:-0}"
}

while [ $# -gt 0 ]; do
	case $1 in
	--runs) runs=${2:?--runs wants a number}; shift 2 ;;
	--runs=*) runs=${1#*=}; shift ;;
	--quick) quick=1; shift ;;
	--work) work=${2:?--work wants a directory}; shift 2 ;;
	--work=*) work=${1#*=}; shift ;;
	--build) build=${2:?--build wants a directory}; shift 2 ;;
	--build=*) build=${1#*=}; shift ;;
	-h|--help) usage 0 ;;
	*) echo "http.sh: unknown argument '$1'" >&2; usage 2 >&2 ;;
	esac
done

die() { echo "http.sh: $*" >&2; exit 1; }
log() { echo "http.sh: $*" >&2; }

ncpu=$(nproc)
if [ $quick = 1 ]; then
	: "${runs:=1}"
	classes=10 per_class=40 maxcount=20
	e_lo=4 e_link=2
	tr_model=(--model resnet18 --width 0.25 --image-size 64)
	tr_steps=8
else
	: "${runs:=3}"
	classes=20 per_class=100 maxcount=100
	e_lo=8 e_link=4
	tr_model=(--model resnet18 --width 0.5 --image-size 96)
	tr_steps=100
fi
case $runs in ''|*[!0-9]*|0) die "--runs wants a positive number" ;; esac
# the loopback and link pair: io-streams x parts = curl's connections
io_pair=4 parts_pair=4
conns_pair=$(( io_pair * parts_pair ))
dec_batch=64 tr_batch=64

# ---------------------------------------------------------------------------
# the tools

for c in nginx curl; do
	command -v $c >/dev/null || die "$c is missing (apt-get install $c)"
done
[ -x /usr/bin/time ] || die "/usr/bin/time is missing (apt-get install time)"
st=$build/shardtool/shardtool
[ -x "$st" ] || die "$st is not built (cd $build && make), or set --build"
for f in loader/.libs/shardload train/.libs/shardtrain tests/proxy/linkproxy \
    lib/.libs/libshardkit.so.0; do
	[ -e "$build/$f" ] || die "$build/$f is missing (cd $build && make &&" \
	    "make tests/proxy/linkproxy)"
done
have_torch=1
"$pyt" -c 'import torch, torchvision, webdataset, PIL' 2>/dev/null || {
	have_torch=0
	log "WARNING: $pyt cannot import torch, torchvision, webdataset and" \
	    "PIL (apt-get install python3-torch python3-torchvision" \
	    "python3-pil; $pyt -m pip install --break-system-packages" \
	    "webdataset): the PyTorch peer is left out"
}

mkdir -p "$work"
work=$(cd "$work" && pwd)
bin=$work/bin
logs=$work/logs
mkdir -p "$bin" "$logs"

# Time private copies, so that a rebuild during the run changes nothing.
rm -f "$bin"/shardload "$bin"/shardtrain "$bin"/linkproxy "$bin"/libshardkit.so.*
cp "$build/loader/.libs/shardload" "$build/train/.libs/shardtrain" \
    "$build/tests/proxy/linkproxy" "$bin/"
cp -L "$build/lib/.libs/libshardkit.so.0" "$bin/"
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
sl=$bin/shardload
strn=$bin/shardtrain
lp=$bin/linkproxy
for b in "$sl" "$strn"; do
	ldd "$b" | grep "libshardkit.* => $bin/" >/dev/null ||
	    die "cannot run a copy of $b"
done
"$sl" bench --help | grep -- '--part-size' >/dev/null ||
    die "$sl bench has no --part-size: not the remote loader"

# The servers come from this script, not from the caller's proxy settings.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy \
    CURL_CA_BUNDLE
export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost

# ---------------------------------------------------------------------------
# the data, made once

data=$work/data-${classes}x$per_class
www=$data/www
if [ ! -e "$data/.done" ]; then
	log "generating and packing $data"
	rm -rf "$data"
	mkdir -p "$www/s"
	"$st" synth imagenet "$data/src" --classes "$classes" \
	    --per-class "$per_class" --val 0 -j "$ncpu" >/dev/null
	"$st" pack imagenet "$data/src" -o "$www/s/in-%06d.tar" \
	    --max-count "$maxcount" >"$data/pack.log"
	touch "$data/.done"
fi
man=$www/s/in.json
[ -e "$man" ] || die "no manifest $man (rm -rf $data and run again)"
tars=("$www"/s/*.tar)
nsh=${#tars[@]}
nimg=$(( classes * per_class ))
tar_bytes=$(cat "${tars[@]}" | wc -c)
man_bytes=$(wc -c <"$man")
log "$nimg images in $nsh shards, $tar_bytes bytes; $runs rounds"

warm() { cat "${tars[@]}" >/dev/null; }

# ---------------------------------------------------------------------------
# the servers, stopped on any exit

srv=$work/srv
rm -rf "$srv"
mkdir -p "$srv/tmp"
PIDS=()
stop_servers() {
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	PIDS=()
}
trap stop_servers EXIT
trap 'exit 130' INT TERM

free_port() {
	"$pyt" -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_port() {
	local i
	for (( i = 0; i < 100; i++ )); do
		"$pyt" -c 'import socket, sys
socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' \
		    "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	die "nothing listens on 127.0.0.1:$1"
}

port=$(free_port)
user=
[ "$(id -u)" -ne 0 ] || user="user root;"
cat >"$srv/nginx.conf" <<EOF
daemon off;
$user
worker_processes $ncpu;
pid $srv/nginx.pid;
error_log $srv/error.log;
events { worker_connections 1024; }
http {
	access_log off;
	client_body_temp_path $srv/tmp;
	proxy_temp_path $srv/tmp;
	fastcgi_temp_path $srv/tmp;
	uwsgi_temp_path $srv/tmp;
	scgi_temp_path $srv/tmp;
	sendfile on;
	keepalive_requests 100000;
	types { application/json json; application/x-tar tar; }
	default_type application/octet-stream;
	server {
		listen 127.0.0.1:$port;
		root $www;
		autoindex on;
		autoindex_format json;
	}
}
EOF
nginx -p "$srv" -c "$srv/nginx.conf" -e "$srv/error.log" 2>"$srv/nginx.err" &
nginx_pid=$!
PIDS+=($nginx_pid)
wait_port "$port"
lo=http://127.0.0.1:$port

# Without --stats: the proxy would rewrite that file at every response
# (bench/shardfs.sh says what it cost).
"$lp" --upstream "127.0.0.1:$port" \
    >"$srv/proxy.port" 2>"$srv/proxy.err" &
proxy_pid=$!
PIDS+=($proxy_pid)
line=
for (( i = 0; i < 100; i++ )); do
	line=$(head -n 1 "$srv/proxy.port" 2>/dev/null || true)
	case $line in "port "*) break ;; esac
	sleep 0.1
done
case $line in
"port "*) ;;
*) cat "$srv/proxy.err" >&2; die "the link proxy did not start" ;;
esac
link=http://127.0.0.1:${line#port }
curl -sS --fail -o /dev/null "$lo/s/in.json" || die "nginx does not serve $lo/s/in.json"
curl -sS --fail -o /dev/null "$link/s/in.json" || die "the proxy does not serve $link/s/in.json"
log "nginx at $lo, the emulated link at $link"

# CPU seconds (user + system) of nginx (master and workers) and the proxy
server_cpu() {
	local p pids
	pids="$nginx_pid $proxy_pid $(pgrep -P "$nginx_pid" | tr '\n' ' ')"
	for p in $pids; do
		awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" \
		    2>/dev/null || true
	done | awk -v hz="$(getconf CLK_TCK)" '{ s += $1 } END { printf "%.2f", s / hz }'
}

# the busy CPU seconds of the whole machine so far
machine_busy() {
	awk '$1 == "cpu" { printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / 100 }' \
	    /proc/stat
}

# Wait (at most 15 s) for half a second in which the machine is idle.
wait_quiet() {
	local i b0 b1
	for (( i = 0; i < 30; i++ )); do
		b0=$(machine_busy)
		sleep 0.5
		b1=$(machine_busy)
		awk -v a="$b0" -v b="$b1" 'BEGIN { exit !(b - a <= 0.05) }' &&
		    return 0
	done
	log "the machine stayed busy; timing anyway"
}

# getjson FILE KEY...: the values (a.b for nested keys; NA if missing)
getjson() {
	"$pyt" - "$@" <<'EOF'
import json, sys
try:
    with open(sys.argv[1]) as f:
        d = json.load(f)
except (OSError, ValueError):
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

# ---------------------------------------------------------------------------
# the cases

cases="lo-sl lo-curl lo-sl-io16 ln-sl ln-curl ln-sl-io16 ln-sl-def"
cases="$cases ln-sl-p1 ln-sl-p2 ln-sl-p8"
cases="$cases ln-sl-ps2M ln-sl-ps32M dec-sl dec-sl-disk"
[ $have_torch = 0 ] || cases="$cases dec-torch"
cases="$cases tr-disk tr-http"

# curl_args BASE EPOCHS: -o /dev/null URL for every shard, EPOCHS times
curl_args() {
	local e f
	cargs=()
	for (( e = 0; e < $2; e++ )); do
		for f in "${tars[@]}"; do
			cargs+=(-o /dev/null "$1/s/${f##*/}")
		done
	done
}

# case_cmd CASE JSON: the command of CASE in the array cmd, and in epochs
# the epochs it reads
case_cmd() {
	local c=$1 j=$2 f
	local -a nd=(--no-decode --remainder keep -q --json "$j")
	local -a dec=(--workers "$ncpu" --batch "$dec_batch" --io-streams 2
	    --shuffle 1000 --seed 0 --image-size 224 --dtype f32 --layout nchw
	    --remainder keep --epochs 1 -q --json "$j")
	local -a tr=("${tr_model[@]}" --batch "$tr_batch" --steps "$tr_steps"
	    --shuffle 1000 --seed 0 --log-every 0 -q --json "$j")
	local -a pair=(--io-streams "$io_pair" --parts "$parts_pair")
	epochs=1
	case $c in
	lo-sl) epochs=$e_lo
		cmd=("$sl" bench "$lo/s/in.json" "${pair[@]}" --epochs "$e_lo" "${nd[@]}") ;;
	lo-curl) epochs=$e_lo
		curl_args "$lo" "$e_lo"
		cmd=(curl -sS --fail --no-progress-meter --parallel
		    --parallel-immediate --parallel-max "$conns_pair"
		    -w '%{http_code} %{size_download}\n' "${cargs[@]}") ;;
	ln-curl) epochs=$e_link
		curl_args "$link" "$e_link"
		cmd=(curl -sS --fail --no-progress-meter --parallel
		    --parallel-immediate --parallel-max "$conns_pair"
		    -w '%{http_code} %{size_download}\n' "${cargs[@]}") ;;
	lo-sl-io16) epochs=$e_lo
		cmd=("$sl" bench "$lo/s/in.json" --io-streams 16 --parts 1
		    --epochs "$e_lo" "${nd[@]}") ;;
	ln-sl-io16) epochs=$e_link
		cmd=("$sl" bench "$link/s/in.json" --io-streams 16 --parts 1
		    --epochs "$e_link" "${nd[@]}") ;;
	ln-sl) epochs=$e_link
		cmd=("$sl" bench "$link/s/in.json" "${pair[@]}" --epochs "$e_link" "${nd[@]}") ;;
	ln-sl-def) epochs=$e_link
		cmd=("$sl" bench "$link/s/in.json" --epochs "$e_link" "${nd[@]}") ;;
	ln-sl-ps*) epochs=$e_link
		cmd=("$sl" bench "$link/s/in.json" "${pair[@]}"
		    --part-size "${c#ln-sl-ps}" --epochs "$e_link" "${nd[@]}") ;;
	ln-sl-p*) epochs=$e_link
		cmd=("$sl" bench "$link/s/in.json" --io-streams "$io_pair"
		    --parts "${c#ln-sl-p}" --epochs "$e_link" "${nd[@]}") ;;
	dec-sl) cmd=("$sl" bench "$link/s/in.json" "${dec[@]}") ;;
	dec-sl-disk) cmd=("$sl" bench "$man" "${dec[@]}") ;;
	dec-torch)
		local -a urls=()
		for f in "${tars[@]}"; do
			urls+=("pipe:curl -s $link/s/${f##*/}")
		done
		cmd=("$pyt" "$here/torch_load.py" "${urls[@]}" --batch "$dec_batch"
		    --workers "$ncpu" --shuffle 1000 --shardshuffle 100 --seed 0
		    --image-size 224 --epochs 1 --json "$j" --expect "$nimg") ;;
	tr-disk) cmd=("$strn" --data "$man" "${tr[@]}") ;;
	tr-http) cmd=("$strn" --data "$link/s/in.json" "${tr[@]}") ;;
	*) die "unknown case $c" ;;
	esac
}

results=$work/http-$(date +%Y%m%d-%H%M%S).tsv
printf 'round\tcase\tstatus\twall_s\tbytes\tmb_s\tips\te2e_ips\tcpu_s\tserver_cpu_s\tother_cpu_s\trequests\tretries\ttrain_wall_s\tverdict\twait_share\ttrain_ips\n' \
    >"$results"
failures=0

# rotate LIST N: the words of LIST, starting at word N mod their count
rotate() {
	local -a w=($1)
	local n=${#w[@]} k=$(( $2 % ${#w[@]} )) i
	for (( i = 0; i < n; i++ )); do
		printf '%s ' "${w[$(( (i + k) % n ))]}"
	done
}

# run_case ROUND CASE: one timed run, one line of $results
run_case() {
	local r=$1 c=$2 j=$logs/$2.json lg=$logs/$2.log out=$logs/$2.out
	local tf=$logs/$2.time t0 t1 b0 b1 s0 s1 rc=0 status=ok why=
	local wall bytes=NA mbs=NA ips=NA e2e=NA cpu srv other ucpu scpu
	local req=NA retr=NA twall=NA verdict=NA wshare=NA tips=NA
	local samples skipped dropped n bad steps images
	rm -f "$j" "$tf" "$out"
	case_cmd "$c" "$j"
	wait_quiet
	s0=$(server_cpu)
	b0=$(machine_busy)
	t0=$EPOCHREALTIME
	/usr/bin/time -f '%U %S' -o "$tf" "${cmd[@]}" >"$out" 2>"$lg" || rc=$?
	t1=$EPOCHREALTIME
	b1=$(machine_busy)
	s1=$(server_cpu)
	wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
	read -r ucpu scpu < <(tail -1 "$tf" 2>/dev/null || echo "0 0") || true
	case $ucpu in ''|*[!0-9.]*) ucpu=0 scpu=0 ;; esac
	cpu=$(awk -v u="$ucpu" -v s="$scpu" 'BEGIN { printf "%.2f", u + s }')
	srv=$(awk -v a="$s0" -v b="$s1" 'BEGIN { printf "%.2f", b - a }')
	other=$(awk -v a="$b0" -v b="$b1" -v c="$cpu" -v s="$srv" \
	    'BEGIN { o = b - a - c - s; printf "%.2f", (o > 0 ? o : 0) }')
	case $c in
	lo-sl*|ln-sl*)
		read -r samples skipped dropped bytes req retr < <(getjson "$j" \
		    result.samples result.skipped result.dropped \
		    result.remote.bytes result.remote.requests \
		    result.remote.retries)
		if [ "$samples" != $(( nimg * epochs )) ] ||
		    [ "$skipped" != 0 ] || [ "$dropped" != 0 ]; then
			status=fail why="samples $samples skipped $skipped dropped $dropped, want $(( nimg * epochs )) 0 0"
		elif [ "$bytes" = NA ] ||
		    [ "$bytes" -lt $(( tar_bytes * epochs )) ]; then
			status=fail why="received $bytes bytes, want at least $(( tar_bytes * epochs ))"
		fi
		;;
	*-curl)
		n=$(wc -l <"$out")
		bad=$(awk '$1 != 200' "$out" | wc -l)
		bytes=$(awk '{ s += $2 } END { printf "%.0f", s }' "$out")
		req=$n retr=0
		if [ "$n" != $(( nsh * epochs )) ] || [ "$bad" != 0 ] ||
		    [ "$bytes" != $(( tar_bytes * epochs )) ]; then
			status=fail why="$n transfers ($bad not 200), $bytes bytes; want $(( nsh * epochs )) and $(( tar_bytes * epochs ))"
		fi
		;;
	dec-sl*)
		read -r samples skipped dropped ips bytes req retr < <(getjson "$j" \
		    result.samples result.skipped result.dropped \
		    result.steady_images_per_second result.remote.bytes \
		    result.remote.requests result.remote.retries)
		if [ "$samples" != "$nimg" ] || [ "$skipped" != 0 ] ||
		    [ "$dropped" != 0 ]; then
			status=fail why="samples $samples skipped $skipped dropped $dropped, want $nimg 0 0"
		fi
		e2e=$(awk -v n="$samples" -v w="$wall" 'BEGIN { printf "%.1f", n / w }')
		;;
	dec-torch)
		read -r images ips < <(getjson "$j" images images_per_sec)
		[ "$images" = "$nimg" ] ||
		    { status=fail why="delivered $images images, want $nimg"; }
		e2e=$(awk -v n="$images" -v w="$wall" 'BEGIN { printf "%.1f", n / w }')
		;;
	tr-*)
		read -r steps images skipped twall verdict wshare tips bytes req \
		    retr < <(getjson "$j" result.steps result.images \
		    result.skipped result.wall_seconds result.verdict \
		    result.wait_share result.images_per_second \
		    result.remote.bytes result.remote.requests \
		    result.remote.retries)
		if [ "$steps" != "$tr_steps" ] ||
		    [ "$images" != $(( tr_steps * tr_batch )) ] ||
		    [ "$skipped" != 0 ]; then
			status=fail why="steps $steps images $images skipped $skipped"
		fi
		;;
	esac
	if [ "$bytes" != NA ]; then
		mbs=$(awk -v b="$bytes" -v w="$wall" 'BEGIN { printf "%.1f", b / w / 1e6 }')
	fi
	if [ "$rc" != 0 ]; then
		status=fail why="exit status $rc${why:+; $why}"
	fi
	if [ $status != ok ]; then
		failures=$(( failures + 1 ))
		log "FAILED: $c in round $r: $why (log: $lg)"
		tail -5 "$lg" >&2 || true
		cp "$lg" "$logs/$c.round$r.failed.log" 2>/dev/null || true
	fi
	[ "$retr" = NA ] || [ "$retr" = 0 ] ||
	    log "NOTE: $c round $r: $retr retries"
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
	    "$r" "$c" "$status" "$wall" "$bytes" "$mbs" "$ips" "$e2e" "$cpu" \
	    "$srv" "$other" "$req" "$retr" "$twall" "$verdict" "$wshare" \
	    "$tips" >>"$results"
	log "round $r: $c $status ${wall}s, $mbs MB/s, $ips images/s," \
	    "train ${twall}s $verdict; CPU ${cpu}s, servers ${srv}s," \
	    "others ${other}s"
}

# ---------------------------------------------------------------------------
# the rounds

t_start=$EPOCHREALTIME
for (( r = 1; r <= runs; r++ )); do
	warm
	for c in $(rotate "$cases" $(( r - 1 ))); do
		run_case "$r" "$c"
	done
done
t_end=$EPOCHREALTIME
stop_servers

# ---------------------------------------------------------------------------
# the report

cpu_model=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
mem=$(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
v_sk=$(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo "no commit")
[ -z "$(cd "$root" && git status --porcelain --untracked-files=no 2>/dev/null)" ] ||
    v_sk="$v_sk + uncommitted changes"
v_sk="$v_sk, binaries sha256 $(cat "$sl" "$strn" "$bin"/libshardkit.so.0 |
    sha256sum | cut -c1-12)"
v_curl=$(curl --version | head -1 | cut -d' ' -f1-3)
v_nginx=$(nginx -v 2>&1 | sed 's/.*version: //')
v_torch="not run"
[ $have_torch = 0 ] || v_torch=$("$pyt" -c '
import platform, torch, torchvision, webdataset, PIL
print("Python %s, torch %s, torchvision %s, webdataset %s, Pillow %s" % (
    platform.python_version(), torch.__version__, torchvision.__version__,
    webdataset.__version__, PIL.__version__))')

runs=$runs quick=$quick ncpu=$ncpu cpu_model="$cpu_model" mem="$mem" \
    kernel="$(uname -r)" date="$(date -u '+%Y-%m-%d %H:%M UTC')" \
    v_sk="$v_sk" v_curl="$v_curl" v_nginx="$v_nginx" v_torch="$v_torch" \
    cmdline="$cmdline" nimg=$nimg nsh=$nsh tar_bytes=$tar_bytes e_lo=$e_lo \
    e_link=$e_link t_start=$t_start t_end=$t_end dec_batch=$dec_batch \
    tr_model="${tr_model[*]}" tr_batch=$tr_batch tr_steps=$tr_steps \
    "$pyt" - "$results" <<'EOF' | tee "$work/http-table.md"
import csv, os, statistics as st, sys

rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
E = os.environ
runs, quick, ncpu = int(E["runs"]), int(E["quick"]), int(E["ncpu"])
cases = {}
for r in rows:
    cases.setdefault(r["case"], []).append(r)

def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None

def vals(c, k):
    return [num(r[k]) for r in cases.get(c, []) if r["status"] == "ok"
            and num(r[k]) is not None]

def med(c, k):
    v = vals(c, k)
    return st.median(v) if v else None

def rng(c, k, f="%.0f"):
    v = vals(c, k)
    return (f + "–" + f) % (min(v), max(v)) if v else "—"

def fmt(x, f="%.0f"):
    return "—" if x is None else f % x

def per_round(a, ka, b, kb, scale=1.0):
    x = []
    for i in range(1, runs + 1):
        ra = [r for r in cases.get(a, []) if r["round"] == str(i) and r["status"] == "ok"]
        rb = [r for r in cases.get(b, []) if r["round"] == str(i) and r["status"] == "ok"] if b else [None]
        if ra and rb and num(ra[0][ka]) is not None:
            den = scale if b is None else num(rb[0][kb])
            if den:
                x.append(num(ra[0][ka]) / den)
    return st.median(x) if x else None

nfail = sum(r["status"] != "ok" for r in rows)
other = [num(r["other_cpu_s"]) for r in rows]
busy = sum(num(r["wall_s"]) for r in rows)
print("- Machine: %d CPUs (%s), %s RAM, Linux %s." % (ncpu, E["cpu_model"], E["mem"], E["kernel"]))
print("- Date: %s." % E["date"])
print("- Versions: shardkit %s; %s; nginx %s; %s." % (E["v_sk"], E["v_curl"], E["v_nginx"], E["v_torch"]))
print("- Command: `%s`: %d rounds, the cases in rotating order; medians over the rounds (min–max)." % (E["cmdline"], runs))
print("- Data: %d JPEGs (about 500×375) in %d shards, %.1f MB; I/O cases read them %d times (loopback) and %d times (link)." % (int(E["nimg"]), int(E["nsh"]), int(E["tar_bytes"]) / 1e6, int(E["e_lo"]), int(E["e_link"])))
print("- Other processes used %.2f CPU s per run (median; max %.2f); the runs took %.0f s, the whole script %.0f s." % (st.median(other), max(other), busy, float(E["t_end"]) - float(E["t_start"])))
if nfail:
    print("- **%d runs failed** (see the logs); they are left out of the medians." % nfail)
if quick:
    print("- **QUICK MODE: a smoke test of the script, not a result.**")
print()

def io_row(c, what, conns):
    if c not in cases:
        print("| %s | %s | not run | | | | |" % (what, conns)); return
    print("| %s | %s | %s | %s | %s | %s | %s |" % (what, conns,
        fmt(med(c, "mb_s")), rng(c, "mb_s"), fmt(med(c, "cpu_s"), "%.2f"),
        fmt(med(c, "server_cpu_s"), "%.2f"), fmt(med(c, "requests"))))

print("**I/O only** (shardload `--no-decode`: read and split the shards; curl: fetch to /dev/null). MB/s: bytes received over the process's wall time.\n")
print("| case | connections | MB/s | min–max | tool CPU s | nginx + proxy CPU s | requests |")
print("|---|---:|---:|---:|---:|---:|---:|")
io_row("lo-sl", "loopback: shardload, --io-streams 4 --parts 4", "16")
io_row("lo-sl-io16", "loopback: shardload, --io-streams 16 --parts 1", "16")
io_row("lo-curl", "loopback: curl --parallel-max 16", "16")
io_row("ln-curl", "link: curl --parallel-max 16", "16")
io_row("ln-sl", "link: shardload, --io-streams 4 --parts 4 (8M)", "16")
io_row("ln-sl-io16", "link: shardload, --io-streams 16 --parts 1", "16")
io_row("ln-sl-def", "link: shardload, defaults (2 streams × 4 parts of 8M)", "8")
io_row("ln-sl-p1", "link: shardload, --io-streams 4 --parts 1", "4")
io_row("ln-sl-p2", "link: shardload, --io-streams 4 --parts 2", "8")
io_row("ln-sl-p8", "link: shardload, --io-streams 4 --parts 8", "32")
io_row("ln-sl-ps2M", "link: shardload, --io-streams 4 --parts 4 --part-size 2M", "16")
io_row("ln-sl-ps32M", "link: shardload, --io-streams 4 --parts 4 --part-size 32M", "16")
print("\nconnections: the most the options allow (io-streams × parts); a shard smaller than parts × part-size has fewer parts to fetch at once.\n")

print("**Decoding through the link** (one epoch, RandomResizedCrop(224) + flip, float32 NCHW normalised, batches of %s, %d workers):\n" % (E["dec_batch"], ncpu))
print("| loader | images/s | min–max | end-to-end images/s | tool CPU s | nginx + proxy CPU s |")
print("|---|---:|---:|---:|---:|---:|")
for c, what in (("dec-sl", "shardload over the link (--io-streams 2)"),
                ("dec-sl-disk", "shardload from local disk (reference)"),
                ("dec-torch", "PyTorch DataLoader + webdataset, pipe:curl over the link")):
    if c not in cases:
        print("| %s | not run | | | | |" % what); continue
    print("| %s | %s | %s | %s | %s | %s |" % (what, fmt(med(c, "ips")),
        rng(c, "ips"), fmt(med(c, "e2e_ips")), fmt(med(c, "cpu_s"), "%.2f"),
        fmt(med(c, "server_cpu_s"), "%.2f")))
print("\nimages/s: after the first batch; end-to-end: all images over the process's wall time (start-up and imports included).\n")

print("**Training, compute-bound** (shardtrain %s --batch %s --steps %s):\n" % (E["tr_model"], E["tr_batch"], E["tr_steps"]))
print("| data | wall s (training) | min–max | images/s | data wait share | verdict (each round) |")
print("|---|---:|---:|---:|---:|---|")
for c, what in (("tr-disk", "manifest on local disk"), ("tr-http", "over the emulated link")):
    if c not in cases:
        print("| %s | not run | | | | |" % what); continue
    print("| %s | %s | %s | %s | %s | %s |" % (what, fmt(med(c, "train_wall_s"), "%.2f"),
        rng(c, "train_wall_s", "%.2f"), fmt(med(c, "train_ips"), "%.1f"),
        fmt(med(c, "wait_share"), "%.3f"),
        ", ".join(r["verdict"] for r in cases[c])))
print()

def ratio_row(what, a, ka, b, kb, goal, ok, scale=None):
    ma = med(a, ka)
    mb = scale if b is None else med(b, kb)
    if ma is None or not mb:
        print("| %s | — | — | %s | not measured |" % (what, goal)); return
    x = ma / mb
    print("| %s | %.3f | %s | %s | %s |" % (what, x,
        fmt(per_round(a, ka, b, kb, scale or 1.0), "%.3f"), goal,
        "" if ok is None else ("yes" if ok(x) else "**no**")))

print("| ratio | of the medians | median of per-round ratios | goal | met? |")
print("|---|---:|---:|---:|---|")
ratio_row("loopback: shardload / curl, MB/s (16 connections)", "lo-sl", "mb_s", "lo-curl", "mb_s", "≥ 0.95", lambda x: x >= 0.95)
ratio_row("loopback: shardload --io-streams 16 --parts 1 / curl", "lo-sl-io16", "mb_s", "lo-curl", "mb_s", "—", None)
ratio_row("link: shardload / curl, MB/s (16 connections)", "ln-sl", "mb_s", "ln-curl", "mb_s", "—", None)
ratio_row("link: shardload --io-streams 16 --parts 1 / curl", "ln-sl-io16", "mb_s", "ln-curl", "mb_s", "—", None)
ratio_row("link: shardload defaults / the 1 GB/s cap", "ln-sl-def", "mb_s", None, None, "≥ 0.90", lambda x: x >= 0.9, 1000.0)
ratio_row("link: shardload 16 connections / the 1 GB/s cap", "ln-sl", "mb_s", None, None, "—", None, 1000.0)
ratio_row("link: curl 16 connections / the 1 GB/s cap", "ln-curl", "mb_s", None, None, "—", None, 1000.0)
ratio_row("decode over the link: shardload / PyTorch, images/s", "dec-sl", "ips", "dec-torch", "ips", "—", None)
ratio_row("decode: shardload over the link / from disk, images/s", "dec-sl", "ips", "dec-sl-disk", "ips", "—", None)
ratio_row("training: wall s over the link / from disk", "tr-http", "train_wall_s", "tr-disk", "train_wall_s", "≤ 1.02", lambda x: x <= 1.02)
EOF

log "raw timings: $results; table: $work/http-table.md; logs: $logs"
[ "$failures" = 0 ] || die "$failures runs failed"
