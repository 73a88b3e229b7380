#!/usr/bin/env bash
# bench/python.sh - the Python package's benchmark of issue 25.
#
#   bench/python.sh [--runs K] [--quick] [--work DIR] [--torch-workers LIST]
#
# Streams the same shards, on the same machine and in the same run, with
# the same options (random-resized crop to 224, random flip, float32 NCHW
# normalised with ImageNet's mean and std, batches of 256, a shuffle buffer
# of 1000, seed 0, one epoch, every sample delivered: the last batch is
# kept short), through:
#
#   shardkit.Loader  bench/python_loop.py: the Python package in a PyTorch
#                    loop that reads every batch, x = torch.from_dlpack(
#                    images); y = torch.from_dlpack(labels); x.sum(),
#                    y.sum(); the Loader's own workers (this process's
#                    CPUs), io_streams=2.
#   DataLoader       bench/torch_load.py --touch: DataLoader(batch_size=256,
#                    num_workers=N, persistent_workers) over webdataset
#                    with PIL and torchvision's transforms (see its header),
#                    reading every batch the same way; N from --torch-workers
#                    (default: half the CPUs, the CPUs less one, the CPUs,
#                    and one more), the best median counts.
#   shardload        `shardload bench MANIFEST --dtype f32 --layout nchw
#                    --workers <CPUs> --io-streams 2`: the C loop, the
#                    Loader's upper bound.
#
# Data: `shardtool synth imagenet --classes 100 --per-class 100` (10000
# JPEGs of about 500x375), packed with `shardtool pack imagenet` into at
# least 10 shards and at least 2 per CPU (webdataset splits shards, not
# samples, over the DataLoader's workers), made once in the work directory.
# The page cache is warmed before each round.
#
# Each of the K rounds (default 5) runs every case once, in an order that
# rotates from round to round; before each run the script waits (at most a
# minute) for the shared machine to be idle for half a second and records
# the CPU time other processes took meanwhile. images/s is the rate after
# the first batch: the images of every batch but the first over the time
# from the first batch's arrival to the last one's (shardload's
# result.steady_images_per_second; the two Python scripts measure the same
# way). A run fails unless it delivered every sample; failed runs are
# reported, left out of the medians, and make the script exit 1.
#
# The Python side runs in a venv (the work directory's venv/, made with
# --system-site-packages from $PYTHON_TORCH) into which the script pip
# installs webdataset (once, from PyPI) and, every time, shardkit from a
# copy of python/ built against $SHARDKIT_BUILD (the wheel carries that
# build's libshardkit). shardload is timed from a private copy of the build
# tree's binary and library, checked to be the library the venv got.
#
# The report (stdout, and python-table.md in the work directory) is
# Markdown: medians and ranges over the rounds and the ratios against the
# goals of issue 25 (Loader / DataLoader >= 3x, Loader / shardload >=
# 0.95x). --quick uses 200 images, batches of 32, a shuffle buffer of 100
# and 2 rounds, to smoke-test this script; its numbers mean nothing.
#
# Environment: PYTHON_TORCH (a Python with torch, torchvision, PIL and
# numpy; default /usr/bin/python3: apt-get install python3-torch
# python3-torchvision python3-pil), SHARDKIT_BUILD (the built tree; default
# build/), SHARDLOAD and SHARDTOOL (the binaries; default the build tree's),
# SHARDKIT_BENCH_PY_DIR (the work directory; default /tmp/shardkit-bench-py).

set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
runs=
quick=0
torch_workers=
work=${SHARDKIT_BENCH_PY_DIR:-/tmp/shardkit-bench-py}
build=${SHARDKIT_BUILD:-$root/build}
st=${SHARDTOOL:-$build/shardtool/shardtool}
sl=${SHARDLOAD:-$build/loader/shardload}
pyt=${PYTHON_TORCH:-/usr/bin/python3}
cmdline="bench/python.sh${*:+ $*}"

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
	--torch-workers) torch_workers=${2:?--torch-workers wants a list}
		shift 2 ;;
	--torch-workers=*) torch_workers=${1#*=}; shift ;;
	-h|--help) usage 0 ;;
	*) echo "python.sh: unknown argument '$1'" >&2; usage 2 >&2 ;;
	esac
done

die() { echo "python.sh: $*" >&2; exit 1; }
log() { echo "python.sh: $*" >&2; }

ncpu=$(nproc)
if [ $quick = 1 ]; then
	: "${runs:=2}"
	in_classes=10 in_per_class=20
	batch=32 shuffle=100 quiet_tries=4
else
	: "${runs:=5}"
	in_classes=100 in_per_class=100
	batch=256 shuffle=1000 quiet_tries=120
fi
case $runs in ''|*[!0-9]*|0) die "--runs wants a positive number" ;; esac
size=224
io_streams=2

# the DataLoader's worker counts: half the CPUs, the CPUs less one, the
# CPUs and one more (bench/load.sh runs the CPUs only)
if [ -z "$torch_workers" ]; then
	torch_workers="$(( ncpu / 2 )) $(( ncpu - 1 )) $ncpu $(( ncpu + 1 ))"
fi
torch_workers=$(echo "$torch_workers" | tr ',' '\n' | tr ' ' '\n' |
    awk 'NF && $1 > 0 && !seen[$1]++' | sort -n | tr '\n' ' ')
for w in $torch_workers; do
	case $w in *[!0-9]*) die "--torch-workers wants numbers: '$w'" ;; esac
done
[ -n "$torch_workers" ] || die "--torch-workers: no worker count above 0"

# ---------------------------------------------------------------------------
# the tools

[ -x "$st" ] || die "$st is not built (cd build && make), or set SHARDTOOL"
"$st" synth --help >/dev/null 2>&1 || die "$st has no 'synth' command"
[ -x "$sl" ] || die "$sl is not built (cd build && make), or set SHARDLOAD"
"$sl" bench --help 2>/dev/null | grep -- '--json' >/dev/null ||
    die "'$sl bench --help' does not work: set SHARDLOAD"
[ -e "$build/lib/.libs/libshardkit.so.0" ] ||
    die "no $build/lib/.libs/libshardkit.so.0: build shardkit there," \
    "or set SHARDKIT_BUILD to a built tree"
[ -x /usr/bin/time ] || die "/usr/bin/time is missing (apt-get install time)"
[ -x "$pyt" ] || die "no $pyt: set PYTHON_TORCH to a Python with torch"
"$pyt" -c 'import torch, torchvision, PIL, numpy, venv' 2>/dev/null ||
    die "$pyt cannot import torch, torchvision, PIL, numpy and venv" \
    "(apt-get install python3-torch python3-torchvision python3-pil" \
    "python3-venv), or set PYTHON_TORCH"

mkdir -p "$work"
work=$(cd "$work" && pwd)
data=$work/data
bin=$work/bin
logs=$work/logs
mkdir -p "$data" "$bin" "$logs"

# The venv: the torch Python's packages, plus webdataset (from PyPI, once)
# and this tree's shardkit (every time, so that it is the build timed).
venv=$work/venv
vpy=$venv/bin/python
if [ ! -x "$vpy" ]; then
	log "making $venv (from $pyt, with its site packages)"
	"$pyt" -m venv --system-site-packages "$venv" ||
	    die "$pyt -m venv failed"
fi
[ "$("$vpy" -c 'import sys; print(sys.base_prefix)')" = \
    "$("$pyt" -c 'import sys; print(sys.prefix)')" ] ||
    die "$venv was made from another Python than $pyt: remove it"
"$vpy" -c 'import torch, torchvision, PIL, numpy' 2>/dev/null ||
    die "$vpy cannot import torch, torchvision, PIL and numpy: remove" \
    "$venv to make it again from $pyt"
if ! "$vpy" -c 'import webdataset' 2>/dev/null; then
	log "pip install webdataset into $venv"
	"$vpy" -m pip install -q webdataset >"$logs/pip-webdataset.log" 2>&1 ||
	    die "cannot pip install webdataset into $venv (log:" \
	    "$logs/pip-webdataset.log; without the network, install it" \
	    "there by hand)"
fi

# setup.py runs in a copy: nothing is written into the source tree.
log "installing shardkit from $root/python against $build"
rm -rf "$work/pkg"
cp -r "$root/python" "$work/pkg"
rm -rf "$work/pkg/build" "$work/pkg"/src/*.egg-info
rm -f "$work/pkg"/src/shardkit/*.so*
SHARDKIT_SRC=$root SHARDKIT_BUILD=$build "$vpy" -m pip install \
    --no-build-isolation --no-deps --no-cache-dir --force-reinstall -q \
    "$work/pkg" >"$logs/pip-shardkit.log" 2>&1 ||
    die "pip install of shardkit failed (log: $logs/pip-shardkit.log)"
pkgdir=$(cd "$work" && "$vpy" -c 'import os, shardkit
print(os.path.dirname(shardkit.__file__))') ||
    die "the venv cannot import shardkit"

# In a build tree, $sl is a libtool wrapper around .libs/shardload and the
# uninstalled libshardkit: time a private copy of both, so that a rebuild
# during the benchmark cannot change the binary being timed. (The venv's
# shardkit has its own copy of the library, inside the package.)
sldir=$(cd "$(dirname "$sl")" && pwd)
sl_env=()
if [ -x "$sldir/.libs/shardload" ] && [ -d "$sldir/../lib/.libs" ]; then
	rm -f "$bin"/shardload "$bin"/libshardkit.so.*
	cp "$sldir/.libs/shardload" "$bin/"
	cp -L "$sldir"/../lib/.libs/libshardkit.so.[0-9] "$bin/"
	sl=$bin/shardload
	# only shardload's runs see this: the Python extension's $ORIGIN run
	# path comes after LD_LIBRARY_PATH
	sl_env=(env "LD_LIBRARY_PATH=$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
	"${sl_env[@]}" ldd "$sl" | grep "libshardkit.* => $bin/" >/dev/null ||
	    die "cannot run a copy of $sldir/.libs/shardload"
	cmp -s "$bin/libshardkit.so.0" "$pkgdir/libshardkit.so.0" ||
	    die "the venv's $pkgdir/libshardkit.so.0 is not the library of" \
	    "$sldir/.libs/shardload: point SHARDKIT_BUILD and SHARDLOAD at" \
	    "the same build"
fi
"${sl_env[@]}" "$sl" bench --help >/dev/null 2>&1 || die "$sl does not run"

# ---------------------------------------------------------------------------
# the data, generated and packed once

imnet=$data/imagenet-${in_classes}x$in_per_class
if [ ! -e "$imnet/.done" ]; then
	log "generating $imnet"
	rm -rf "$imnet"
	"$st" synth imagenet "$imnet" --classes "$in_classes" \
	    --per-class "$in_per_class" -j "$ncpu" >/dev/null ||
	    die "shardtool synth imagenet failed"
	touch "$imnet/.done"
fi

n_in=$(( in_classes * in_per_class ))
# at least 10 shards, and at least 2 per CPU
nsh=$(( 2 * ncpu > 10 ? 2 * ncpu : 10 ))
mc=$(( (n_in + nsh - 1) / nsh ))
sh=$work/shards/imagenet-${in_classes}x$in_per_class-mc$mc
if [ ! -e "$sh/.done" ] || [ "$imnet/.done" -nt "$sh/.done" ]; then
	log "packing $sh"
	rm -rf "$sh"
	mkdir -p "$sh"
	"$st" pack imagenet "$imnet" -o "$sh/imagenet-%06d.tar" \
	    --max-count "$mc" >"$sh/pack.log" || die "shardtool pack failed"
	touch "$sh/.done"
fi
man=$sh/imagenet.json
[ -e "$man" ] || man=$(ls "$sh"/*.json 2>/dev/null | head -1 || true)
[ -e "$man" ] || die "no manifest in $sh"
tars=("$sh"/*.tar)
mb=$(cat "${tars[@]}" | wc -c)
mb=$(awk -v b="$mb" 'BEGIN { printf "%.1f", b / 1e6 }')
log "ImageNet-like: $n_in samples in ${#tars[@]} shards ($mb MB); $runs" \
    "rounds; DataLoader workers: $torch_workers"

# getjson.py FILE KEY...: the values (a.b for nested keys; NA if missing)
cat >"$work/.getjson.py" <<'EOF'
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
getjson() { "$vpy" "$work/.getjson.py" "$@"; }

# ---------------------------------------------------------------------------
# the cases: py (shardkit.Loader), sl (shardload bench), twN (DataLoader
# with N workers)

cases="py sl"
for w in $torch_workers; do cases="$cases tw$w"; done

# case_cmd CASE JSON: the command of CASE in the array cmd
case_cmd() {
	local c=$1 j=$2
	case $c in
	py)
		cmd=("$vpy" "$here/python_loop.py" "$man" --batch "$batch"
		    --image-size "$size" --shuffle "$shuffle" --seed 0
		    --io-streams "$io_streams" --remainder keep --json "$j"
		    --expect "$n_in") ;;
	sl)
		cmd=("${sl_env[@]}" "$sl" bench "$man" --batch "$batch"
		    --image-size "$size" --crop random-resized --flip
		    --dtype f32 --layout nchw --shuffle "$shuffle" --seed 0
		    --epoch 0 --epochs 1 --workers "$ncpu"
		    --io-streams "$io_streams" --remainder keep --quiet
		    --json "$j") ;;
	tw*)
		cmd=("$vpy" "$here/torch_load.py" "${tars[@]}" --batch "$batch"
		    --image-size "$size" --shuffle "$shuffle"
		    --shardshuffle 100 --seed 0 --epochs 1 --variant pil
		    --workers "${c#tw}" --touch --json "$j"
		    --expect "$n_in") ;;
	*) die "unknown case $c" ;;
	esac
}

results=$work/python-$(date +%Y%m%d-%H%M%S).tsv
printf 'round\tcase\tstatus\twall_s\tips\tfirst_batch_s\timages\tworkers\tcpu_s\tother_cpu_s\n' \
    >"$results"

warm() { cat "${tars[@]}" >/dev/null; }

# rotate LIST N: the words of LIST, starting at word N mod their count
rotate() {
	local -a w=($1)
	local n=${#w[@]} k=$(( $2 % ${#w[@]} )) i
	for (( i = 0; i < n; i++ )); do
		printf '%s ' "${w[$(( (i + k) % n ))]}"
	done
}

# The busy CPU seconds of the whole machine so far, from /proc/stat.
machine_busy() {
	awk '$1 == "cpu" { printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / 100 }' \
	    /proc/stat
}

# Other people's jobs share the machine. Before a timed run, wait (at most
# a minute; 2 s with --quick) for a half second in which the machine is
# nearly idle; whatever still runs alongside is recorded per run as "other
# CPU seconds".
wait_quiet() {
	local i b0 b1
	for (( i = 0; i < quiet_tries; i++ )); do
		b0=$(machine_busy)
		sleep 0.5
		b1=$(machine_busy)
		awk -v a="$b0" -v b="$b1" 'BEGIN { exit !(b - a <= 0.05) }' &&
		    return 0
	done
	log "the machine stayed busy; timing anyway"
}

failures=0

# run_case ROUND CASE: one timed run, one line of $results
run_case() {
	local r=$1 c=$2 j=$logs/$2.r$1.json lg=$logs/$2.r$1.log
	local tf=$logs/$2.r$1.time t0 t1 b0 b1 rc=0 wall ips fb images
	local workers skipped dropped maxrss ucpu scpu cpu other status=ok why=
	rm -f "$j" "$tf"
	case_cmd "$c" "$j"
	wait_quiet
	b0=$(machine_busy)
	t0=$EPOCHREALTIME
	/usr/bin/time -f '%M %U %S' -o "$tf" "${cmd[@]}" >"$lg" 2>&1 || rc=$?
	t1=$EPOCHREALTIME
	b1=$(machine_busy)
	wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
	read -r maxrss ucpu scpu < <(tail -1 "$tf" 2>/dev/null ||
	    echo "NA 0 0") || true
	case $maxrss in ''|*[!0-9]*) ucpu=0 scpu=0 ;; esac
	cpu=$(awk -v u="$ucpu" -v s="$scpu" 'BEGIN { printf "%.2f", u + s }')
	other=$(awk -v a="$b0" -v b="$b1" -v c="$cpu" \
	    'BEGIN { o = b - a - c; printf "%.2f", (o > 0 ? o : 0) }')
	case $c in
	sl)
		read -r ips images skipped dropped workers fb < <(getjson "$j" \
		    result.steady_images_per_second result.samples \
		    result.skipped result.dropped config.workers \
		    result.wall_seconds)
		# the first batch's arrival: the whole wall less the steady
		# window (its samples over its rate; the first batch is full)
		fb=$(awk -v w="$fb" -v ips="$ips" -v n="$images" -v b="$batch" \
		    'BEGIN { if (w == "NA" || ips == "NA" || ips <= 0 || n == "NA")
		        print "NA"
		    else printf "%.3f", w - (n - (n < b ? n : b)) / ips }')
		[ "$images" = "$n_in" ] || {
			status=fail
			why="delivered $images samples (skipped $skipped, dropped $dropped), want $n_in"; }
		;;
	*)
		read -r ips fb images workers < <(getjson "$j" images_per_sec \
		    first_batch_s images config.workers)
		[ "$images" = "$n_in" ] || {
			status=fail why="delivered $images images, want $n_in"; }
		;;
	esac
	if [ "$rc" != 0 ]; then
		status=fail why="exit status $rc${why:+; $why}"
	fi
	[ "$ips" = NA ] && [ $status = ok ] && {
		status=fail why="no images/s in its output"; }
	if [ $status != ok ]; then
		failures=$(( failures + 1 ))
		log "FAILED: $c in round $r: $why (log: $lg)"
		tail -5 "$lg" >&2 || true
	fi
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$c" "$status" \
	    "$wall" "$ips" "$fb" "$images" "$workers" "$cpu" "$other" \
	    >>"$results"
	log "round $r: $c $status ${wall}s wall, $(awk -v x="$ips" \
	    'BEGIN { printf(x == "NA" ? "NA" : "%.0f", x) }') images/s after" \
	    "the first batch, ${cpu}s CPU (others: ${other}s CPU)"
}

# ---------------------------------------------------------------------------
# the rounds

t_start=$EPOCHREALTIME
log "warming the page cache"
warm
for (( r = 1; r <= runs; r++ )); do
	warm
	for c in $(rotate "$cases" $(( r - 1 ))); do
		run_case "$r" "$c"
	done
done
t_rounds=$(awk -v a="$t_start" -v b="$EPOCHREALTIME" \
    'BEGIN { printf "%.0f", b - a }')

# ---------------------------------------------------------------------------
# the report

cpu=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/.*: //')
mem=$(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
versions=$(cd "$work" && "$vpy" -c '
import platform, torch, torchvision, webdataset, PIL, numpy, shardkit
from PIL import features
print("Python %s, torch %s, torchvision %s, webdataset %s, Pillow %s (%s), "
      "numpy %s, shardkit %s" % (platform.python_version(), torch.__version__,
      torchvision.__version__, webdataset.__version__, PIL.__version__,
      "libjpeg-turbo" if features.check_feature("libjpeg_turbo") else
      "libjpeg", numpy.__version__, shardkit.__version__))')
rev=$(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo "no commit")
if [ -n "$(cd "$root" && git status --porcelain 2>/dev/null)" ]; then
	rev="$rev + uncommitted changes"
fi
lib_sha=$(sha256sum "$pkgdir/libshardkit.so.0" | cut -c1-12)

awk -F'\t' -v runs="$runs" -v ncpu="$ncpu" -v quick="$quick" \
    -v n_in="$n_in" -v mb="$mb" -v nsh="${#tars[@]}" -v batch="$batch" \
    -v shuffle="$shuffle" -v size="$size" -v io_streams="$io_streams" \
    -v cpu="$cpu" -v mem="$mem" -v kernel="$(uname -r)" \
    -v date="$(date -u '+%Y-%m-%d %H:%M UTC')" -v cmd="$cmdline" \
    -v versions="$versions" -v rev="$rev" -v lib_sha="$lib_sha" \
    -v t_rounds="$t_rounds" '
function sortv(a, n,    i, j, t) {
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
			t = a[j]; a[j] = a[j - 1]; a[j - 1] = t
		}
}
function med(a, n) {
	if (n == 0) return "NA"
	sortv(a, n)
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function nok(c,    i, n) {
	n = 0
	for (i = 1; i <= runs; i++) if ((c, i) in ok) n++
	return n
}
# the median, min or max over the good rounds of column k of case c
function col(c, k, what,    i, a, n, m) {
	n = 0
	for (i = 1; i <= runs; i++)
		if ((c, i) in ok && val[c, i, k] != "NA") a[++n] = val[c, i, k] + 0
	if (n == 0) return "NA"
	if (what == "min") { m = a[1]; for (i = 2; i <= n; i++) if (a[i] < m) m = a[i]; return m }
	if (what == "max") { m = a[1]; for (i = 2; i <= n; i++) if (a[i] > m) m = a[i]; return m }
	return med(a, n)
}
function cpuper(c,    i, a, n) {
	n = 0
	for (i = 1; i <= runs; i++)
		if ((c, i) in ok) a[++n] = 1000 * val[c, i, CPU] / val[c, i, IMG]
	return med(a, n)
}
# the median over the rounds of the per-round ratio ips[a] / ips[b]
function rratio(a, b,    i, x, n) {
	n = 0
	for (i = 1; i <= runs; i++)
		if ((a, i) in ok && (b, i) in ok && val[b, i, IPS] > 0)
			x[++n] = val[a, i, IPS] / val[b, i, IPS]
	return med(x, n)
}
function fmt(v, f) { return v == "NA" ? "—" : sprintf(f, v) }
function row(c, what,    n) {
	n = nok(c)
	if (n == 0) {
		printf "| %s | **failed in every round** | | | | |\n", what
		return
	}
	printf "| %s | %.0f | %.0f–%.0f | %s | %.2f | %.2f |%s\n", what,
	    col(c, IPS), col(c, IPS, "min"), col(c, IPS, "max"),
	    fmt(col(c, FB), "%.2f"), col(c, CPU), cpuper(c),
	    (n < cnt[c] ? " " (cnt[c] - n) " of " cnt[c] " runs failed" : "")
}
function ratio_row(what, a, b, goal, gv,    x) {
	if (nok(a) == 0 || nok(b) == 0) {
		printf "| %s | — | — | %s | not measured |\n", what, goal
		return
	}
	x = col(a, IPS) / col(b, IPS)
	printf "| %s | %.2f | %.2f | %s | %s |\n", what, x, rratio(a, b),
	    goal, (x >= gv ? "yes" : "**no**")
}
BEGIN { WALL = 4; IPS = 5; FB = 6; IMG = 7; WORKERS = 8; CPU = 9; OTHER = 10 }
NR > 1 {
	if (!($2 in cnt)) order[++ncase] = $2
	cnt[$2]++
	for (k = 4; k <= 10; k++) val[$2, $1, k] = $k
	if ($3 == "ok") ok[$2, $1] = 1
	else failed++
	if ($WORKERS != "NA") workers[$2] = $WORKERS
	others[++nother] = $OTHER
	if ($OTHER > omax) omax = $OTHER
	wall += $WALL
}
END {
	# the DataLoader at its best worker count
	best = ""
	for (i = 1; i <= ncase; i++) {
		c = order[i]
		if (c !~ /^tw/ || nok(c) == 0) continue
		if (best == "" || col(c, IPS) > col(best, IPS)) best = c
	}

	printf "### shardkit.Loader in PyTorch, DataLoader + webdataset, shardload bench (issue 25)\n\n"
	if (quick) printf "- **QUICK MODE: a smoke test of the script, not a result.**\n"
	printf "- Machine: %d CPUs (%s), %s RAM, Linux %s.\n", ncpu, cpu, mem, kernel
	printf "- Date: %s.\n", date
	printf "- Command: `%s`: %d rounds, the cases in rotating order in each round; medians over the rounds (%s s in all).\n", cmd, runs, t_rounds
	printf "- Versions: shardkit %s, libshardkit sha256 %s (the venv'"'"'s and shardload'"'"'s); %s.\n", rev, lib_sha, versions
	printf "- Other processes on the machine used %.2f CPU s per run (median; max %.2f) while the cases ran for %.0f s in all.\n", med(others, nother), omax, wall
	if (failed) printf "- **%d runs failed** (see the logs); their rounds are left out of the medians.\n", failed
	printf "- Data: %d ImageNet-like JPEGs (about 500×375) in %d shards, %s MB, page cache warm; one epoch, RandomResizedCrop(%d) + flip, float32 NCHW normalised, batches of %d (the last one short), shuffle buffer %d, seed 0.\n\n", n_in, nsh, mb, size, batch, shuffle

	printf "| loader | images/s | min–max | first batch s | CPU s | CPU ms/image |\n"
	printf "|---|---:|---:|---:|---:|---:|\n"
	row("py", "shardkit.Loader in a PyTorch loop (" workers["py"] " workers, io_streams " io_streams ")")
	row("sl", "shardload bench (" workers["sl"] " workers, io_streams " io_streams ")")
	for (i = 1; i <= ncase; i++) {
		c = order[i]
		if (c !~ /^tw/) continue
		row(c, "DataLoader + webdataset (PIL), num_workers=" substr(c, 3) (c == best ? " **(best)**" : ""))
	}
	printf "\nimages/s: after the first batch (its images and the time to it left out). First batch: from the loader'"'"'s start (Loader(), the DataLoader'"'"'s iterator, shardload'"'"'s start) to its arrival. CPU s: the process tree'"'"'s user + system time, start-up included. Both Python loops read every batch: x.sum() of the float32 images and y.sum() of the labels.\n\n"

	printf "| images/s ratio | of the medians | median of per-round ratios | goal | met? |\n|---|---:|---:|---:|---|\n"
	if (best == "")
		printf "| shardkit.Loader / DataLoader + webdataset | — | — | ≥ 3× | not measured |\n"
	else
		ratio_row("shardkit.Loader / DataLoader + webdataset (num_workers=" substr(best, 3) ")", "py", best, "≥ 3×", 3)
	ratio_row("shardkit.Loader / shardload bench", "py", "sl", "≥ 0.95×", 0.95)
}' "$results" | tee "$work/python-table.md"

log "raw timings: $results; table: $work/python-table.md; logs: $logs"
[ "$failures" = 0 ] || die "$failures runs failed"
