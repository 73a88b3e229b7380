#!/usr/bin/env bash
# bench/load.sh - the loader benchmark of issue 3.
#
#   bench/load.sh [--runs K] [--quick] [--work DIR] [--shardload PATH]
#                 [--shardtool PATH]
#
# Streams the same shards, on the same machine and in the same run, through:
#
#   shardload      `shardload bench MANIFEST` (random-resized crop to 224,
#                  random flip, float32 NCHW normalised with ImageNet's
#                  mean and std, batches of 256, --workers = all CPUs,
#                  --shuffle 1000, --remainder keep); also with u8 NHWC
#                  output, with --no-decode (I/O and tar only), and with
#                  1, 2, 4, ... workers (the scaling table).
#   PyTorch        bench/torch_load.py: DataLoader(batch_size=256,
#                  num_workers=all CPUs, persistent_workers) over
#                  wds.WebDataset(shards, shardshuffle=100).shuffle(1000)
#                  .decode("pil").to_tuple("jpg;png", "cls").map_tuple(
#                  Compose([RandomResizedCrop(224), RandomHorizontalFlip(),
#                  ToTensor(), Normalize(mean, std)]), int); and the same
#                  with torchvision.io's decoder instead of PIL (tvio).
#   the ceiling    bench/jpeg_ceiling.c: one thread decoding the same JPEGs
#                  (extracted from the shards) at full size with libjpeg,
#                  in memory, a warm-up pass and then a timed pass; the
#                  ceiling is its images/s times the number of CPUs.
#
# Data: `shardtool synth imagenet --classes 100 --per-class 100` (10000
# JPEGs of about 500x375) packed with `shardtool pack imagenet` into shards
# of 1000 samples (more shards on machines with over 5 CPUs: at least two
# per CPU, so that webdataset's split_by_worker leaves no worker idle), and
# CIFAR-10's test split (10000 32x32 PNGs, upscaled by the crop to 224),
# packed the same way. The data sets are pack.sh's (same directories, made
# once); the shards are packed once and kept, the JPEGs for the ceiling are
# extracted once. The page cache is warmed before each round.
#
# Each of the K rounds (default 5) runs every case once, in an order that
# rotates from round to round; before each run the script waits for the
# shared machine to be idle for half a second and records the CPU time
# other processes took meanwhile. One epoch per run. images/s is the rate
# after the first batch: the images of every batch but the first over the
# time from the first batch's arrival to the last one's (shardload's
# result.steady_images_per_second; torch_load.py measures the same way). Start-up
# and time to the first batch are shown apart, and the end-to-end rate
# (images over the process's whole wall time, imports and start-up
# included) is given too.
#
# Memory: each run's process tree is sampled by a helper every 0.1 s (the
# sum of the processes' RSS) and every 1 s (the sum of their PSS, which
# counts pages shared between the DataLoader's forked workers once);
# /usr/bin/time gives the kernel's exact peak RSS of the largest single
# process. shardload is one process, so its peak RSS is exact; its own
# memory_bound_bytes (the formula of shardkit(3)) is shown beside it.
#
# Checks: every run delivered every sample (torch_load.py's count; for
# shardload, samples + skipped + dropped from --json, with skipped and
# dropped 0 expected); jpeg_ceiling decoded every JPEG. A failed run is
# reported and the others go on; the script then exits 1. The binary timed
# is a private copy of the build tree's shardload and libshardkit.
#
# The report (stdout, and load-table.md in the work directory) is Markdown:
# medians over the rounds and the ratios against the goals of issue 3.
# --quick uses small data sets, batches of 32 and 2 rounds, to smoke-test
# this script; its numbers mean nothing.
#
# Environment: SHARDLOAD, SHARDTOOL (the binaries), PYTHON_TORCH (a Python
# with torch, torchvision, webdataset and PIL; default /usr/bin/python3),
# CC (default cc), SHARDKIT_BENCH_DIR (the work directory).

set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
runs=
quick=0
work=${SHARDKIT_BENCH_DIR:-/tmp/shardkit-bench}
st=${SHARDTOOL:-$root/build/shardtool/shardtool}
sl=${SHARDLOAD:-$root/build/loader/shardload}
pyt=${PYTHON_TORCH:-/usr/bin/python3}
cc=${CC:-cc}
cmdline="bench/load.sh${*:+ $*}"

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
	--shardload) sl=${2:?--shardload wants a path}; shift 2 ;;
	--shardload=*) sl=${1#*=}; shift ;;
	--shardtool) st=${2:?--shardtool wants a path}; shift 2 ;;
	--shardtool=*) st=${1#*=}; shift ;;
	-h|--help) usage 0 ;;
	*) echo "load.sh: unknown argument '$1'" >&2; usage 2 >&2 ;;
	esac
done

die() { echo "load.sh: $*" >&2; exit 1; }
log() { echo "load.sh: $*" >&2; }

ncpu=$(nproc)
if [ $quick = 1 ]; then
	: "${runs:=2}"
	cifar_train=2000 cifar_test=500
	in_classes=10 in_per_class=20
	batch=32 shuffle=100
else
	: "${runs:=5}"
	cifar_train=50000 cifar_test=10000
	in_classes=100 in_per_class=100
	batch=256 shuffle=1000
fi
case $runs in ''|*[!0-9]*|0) die "--runs wants a positive number" ;; esac
size=224

[ -x "$st" ] || die "$st is not built (cd build && make), or set SHARDTOOL"
"$st" synth --help >/dev/null 2>&1 || die "$st has no 'synth' command"
[ -x /usr/bin/time ] || die "/usr/bin/time is missing (apt-get install time)"
"$pyt" -c 'import torch, torchvision, webdataset, PIL, numpy' 2>/dev/null ||
    die "$pyt cannot import torch, torchvision, webdataset, PIL and numpy" \
    "(apt-get install python3-torch python3-torchvision python3-pil;" \
    "$pyt -m pip install --break-system-packages webdataset), or set" \
    "PYTHON_TORCH"
command -v "$cc" >/dev/null || die "no C compiler ($cc)"
tar --version | head -1 | grep -q 'GNU tar' || die "tar is not GNU tar"

mkdir -p "$work"
work=$(cd "$work" && pwd)
data=$work/data
bin=$work/bin-load
mkdir -p "$data" "$bin" "$work/load-logs"
logs=$work/load-logs

# ---------------------------------------------------------------------------
# the tools

"$cc" -O2 -o "$bin/jpeg_ceiling" "$here/jpeg_ceiling.c" -ljpeg ||
    die "cannot build bench/jpeg_ceiling.c (libjpeg-turbo's headers:" \
    "apt-get install libjpeg-dev)"

# shardload is under way: the benchmark runs without it (the torch and
# ceiling cases only) when `shardload bench` does not work yet.
have_sl=0
if [ -x "$sl" ] && "$sl" bench --help 2>/dev/null | grep -- '--json' >/dev/null; then
	have_sl=1
	# In a build tree, $sl is a libtool wrapper around .libs/shardload and
	# the uninstalled libshardkit: time a private copy of both, so that a
	# rebuild during the benchmark cannot change the binary being timed.
	sldir=$(cd "$(dirname "$sl")" && pwd)
	if [ -x "$sldir/.libs/shardload" ] && [ -d "$sldir/../lib/.libs" ]; then
		rm -f "$bin"/shardload "$bin"/libshardkit.so.*
		cp "$sldir/.libs/shardload" "$bin/"
		cp -L "$sldir"/../lib/.libs/libshardkit.so.[0-9] "$bin/"
		export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
		sl=$bin/shardload
		ldd "$sl" | grep "libshardkit.* => $bin/" >/dev/null ||
		    die "cannot run a copy of $sldir/.libs/shardload"
	fi
	"$sl" bench --help >/dev/null 2>&1 || die "$sl does not run"
else
	log "WARNING: '$sl bench --help' does not work: running without" \
	    "shardload (set SHARDLOAD, or build it)"
fi

# ---------------------------------------------------------------------------
# the data (pack.sh's), generated once; shards packed once

cifar=$data/cifar10-$cifar_train-$cifar_test
imnet=$data/imagenet-${in_classes}x$in_per_class

if [ ! -e "$cifar/.done" ]; then
	log "generating $cifar"
	rm -rf "$cifar"
	"$st" synth cifar10 "$cifar" --train "$cifar_train" \
	    --test "$cifar_test" >/dev/null
	touch "$cifar/.done"
fi
if [ ! -e "$imnet/.done" ]; then
	log "generating $imnet"
	rm -rf "$imnet"
	"$st" synth imagenet "$imnet" --classes "$in_classes" \
	    --per-class "$in_per_class" -j "$ncpu" >/dev/null
	touch "$imnet/.done"
fi

n_in=$(( in_classes * in_per_class ))
n_c10=$cifar_test
# at least 10 shards, and at least 2 per CPU
nsh=$(( 2 * ncpu > 10 ? 2 * ncpu : 10 ))
mc_in=$(( (n_in + nsh - 1) / nsh ))
mc_c10=$(( (n_c10 + nsh - 1) / nsh ))

# pack NAME DATASET SRC MAXCOUNT [pack options]: the shards under
# $work/shards/NAME, packed again only when the data is newer.
pack() {
	local name=$1 kind=$2 src=$3 mc=$4
	local d=$work/shards/$name
	shift 4
	if [ ! -e "$d/.done" ] || [ "$src/.done" -nt "$d/.done" ]; then
		log "packing $d"
		rm -rf "$d"
		mkdir -p "$d"
		"$st" pack "$kind" "$src" -o "$d/$kind-%06d.tar" \
		    --maxcount "$mc" "$@" >"$d/pack.log" ||
		    die "shardtool pack $kind failed"
		touch "$d/.done"
	fi
}
pack "imagenet-${in_classes}x$in_per_class-mc$mc_in" imagenet "$imnet" "$mc_in"
pack "cifar10-test-$cifar_test-mc$mc_c10" cifar10 "$cifar" "$mc_c10" \
    --split test
in_sh=$work/shards/imagenet-${in_classes}x$in_per_class-mc$mc_in
c10_sh=$work/shards/cifar10-test-$cifar_test-mc$mc_c10
in_man=$in_sh/imagenet.json
c10_man=$c10_sh/cifar10.json
[ -e "$in_man" ] || in_man=$(ls "$in_sh"/*.json | head -1)
[ -e "$c10_man" ] || c10_man=$(ls "$c10_sh"/*.json | head -1)
in_tars=("$in_sh"/*.tar)
c10_tars=("$c10_sh"/*.tar)

# The ceiling decodes the JPEGs the loaders read: those in the shards.
jpegs=$in_sh/jpeg
if [ ! -e "$jpegs/.done" ] || [ "$in_sh/.done" -nt "$jpegs/.done" ]; then
	log "extracting the JPEGs of $in_sh for the ceiling"
	rm -rf "$jpegs"
	mkdir -p "$jpegs"
	for f in "${in_tars[@]}"; do
		tar -xf "$f" -C "$jpegs" --wildcards '*.jpg'
	done
	touch "$jpegs/.done"
fi
n_jpg=$(find "$jpegs" -name '*.jpg' | wc -l)
[ "$n_jpg" = "$n_in" ] || die "$jpegs holds $n_jpg JPEGs, want $n_in"
mb_in=$(cat "${in_tars[@]}" | wc -c)
mb_in=$(awk -v b="$mb_in" 'BEGIN { printf "%.1f", b / 1e6 }')
mb_c10=$(cat "${c10_tars[@]}" | wc -c)
mb_c10=$(awk -v b="$mb_c10" 'BEGIN { printf "%.1f", b / 1e6 }')
log "ImageNet-like: $n_in samples in ${#in_tars[@]} shards ($mb_in MB);" \
    "CIFAR-10 test: $n_c10 in ${#c10_tars[@]} shards ($mb_c10 MB);" \
    "$runs rounds"

# ---------------------------------------------------------------------------
# helpers run with the torch Python (it is there anyway)

# memtree.py PID OUT: the peak RSS (every 0.1 s) and PSS (every 1 s) of
# PID's process tree, summed over its processes, until PID exits.
cat >"$work/.memtree.py" <<'EOF'
import os, sys, time

root, out = int(sys.argv[1]), sys.argv[2]
page_kb = os.sysconf("SC_PAGE_SIZE") // 1024


def state(pid):
    with open("/proc/%d/stat" % pid, "rb") as f:
        s = f.read()
    r = s.rindex(b")")
    return s[r + 2:r + 3], int(s[r + 2:].split()[1])


def tree():
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                kids.setdefault(state(int(d))[1], []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    t, i = [root], 0
    while i < len(t):
        t.extend(kids.get(t[i], ()))
        i += 1
    return t


def alive():
    try:
        return state(root)[0] not in (b"Z", b"X")
    except OSError:
        return False


peak_rss = peak_pss = procs = n = 0
next_pss = 0.0
while alive():
    pids = tree()
    rss = pss = 0
    do_pss = time.monotonic() >= next_pss
    for pid in pids:
        try:
            with open("/proc/%d/statm" % pid) as f:
                rss += int(f.read().split()[1]) * page_kb
            if do_pss:
                with open("/proc/%d/smaps_rollup" % pid) as f:
                    for line in f:
                        if line.startswith("Pss:"):
                            pss += int(line.split()[1])
                            break
        except (OSError, ValueError, IndexError):
            pass
    if do_pss:
        next_pss = time.monotonic() + 1.0
        peak_pss = max(peak_pss, pss)
    peak_rss = max(peak_rss, rss)
    procs = max(procs, len(pids))
    n += 1
    time.sleep(0.1)
t = os.times()
with open(out, "w") as f:
    f.write("%d %d %d %d %.3f\n" % (peak_rss, peak_pss, procs, n,
                                    t.user + t.system))
EOF

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
getjson() { "$pyt" "$work/.getjson.py" "$@"; }

# ---------------------------------------------------------------------------
# the cases

# the shardload worker counts: 1, 2, 4, ... below the CPUs, and the CPUs
scaling=
for (( w = 1; w < ncpu; w *= 2 )); do scaling="$scaling $w"; done
scaling="$scaling $ncpu"

in_cases="in-torch-pil in-torch-tvio in-ceiling"
c10_cases="c10-torch-pil"
if [ $have_sl = 1 ]; then
	in_cases="in-sl in-sl-u8 in-sl-io $in_cases"
	for w in $scaling; do
		[ "$w" = "$ncpu" ] || in_cases="$in_cases in-sl-w$w"
	done
	c10_cases="c10-sl $c10_cases"
fi

# case_cmd CASE JSON: the command of CASE in the array cmd
case_cmd() {
	local c=$1 j=$2 w=$ncpu
	local -a slopt=(--batch "$batch" --image-size "$size" --shuffle
	    "$shuffle" --seed 0 --epoch 0 --epochs 1 --crop random-resized
	    --flip --remainder keep --quiet --json "$j")
	local -a tlopt=(--batch "$batch" --image-size "$size" --shuffle
	    "$shuffle" --shardshuffle 100 --seed 0 --epochs 1 --json "$j")
	case $c in
	in-sl-w*) w=${c#in-sl-w} ;;
	esac
	case $c in
	in-sl|in-sl-w*)
		cmd=("$sl" bench "$in_man" "${slopt[@]}" --workers "$w"
		    --dtype f32 --layout nchw) ;;
	in-sl-u8)
		cmd=("$sl" bench "$in_man" "${slopt[@]}" --workers "$w"
		    --dtype u8 --layout nhwc) ;;
	in-sl-io)
		cmd=("$sl" bench "$in_man" "${slopt[@]}" --workers "$w"
		    --no-decode) ;;
	c10-sl)
		cmd=("$sl" bench "$c10_man" "${slopt[@]}" --workers "$w"
		    --dtype f32 --layout nchw) ;;
	in-torch-pil|in-torch-tvio)
		cmd=("$pyt" "$here/torch_load.py" "${in_tars[@]}" "${tlopt[@]}"
		    --workers "$w" --variant "${c#in-torch-}" --expect "$n_in") ;;
	c10-torch-pil)
		cmd=("$pyt" "$here/torch_load.py" "${c10_tars[@]}"
		    "${tlopt[@]}" --workers "$w" --variant pil
		    --expect "$n_c10") ;;
	in-ceiling)
		cmd=("$bin/jpeg_ceiling" "$jpegs") ;;
	*) die "unknown case $c" ;;
	esac
}

results=$work/load-$(date +%Y%m%d-%H%M%S).tsv
printf 'round\tcase\tstatus\twall_s\tips\tfirst_batch_s\timages\tskipped\tdropped\tcpu_s\tmaxrss_kb\ttree_rss_kb\ttree_pss_kb\tprocs\tbound_bytes\tmb_s\tother_cpu_s\tsampler_cpu_s\n' \
    >"$results"

warm() {
	cat "${in_tars[@]}" "${c10_tars[@]}" >/dev/null
	find "$jpegs" -name '*.jpg' -print0 | xargs -0 cat >/dev/null
}

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
# a minute) for a half second in which the machine is nearly idle; whatever
# still runs alongside is recorded per run as "other CPU seconds".
wait_quiet() {
	local i b0 b1
	for (( i = 0; i < 120; i++ )); do
		b0=$(machine_busy)
		sleep 0.5
		b1=$(machine_busy)
		awk -v a="$b0" -v b="$b1" 'BEGIN { exit !(b - a <= 0.05) }' &&
		    return 0
	done
	log "the machine stayed busy; timing anyway"
}

failures=0

# run_case ROUND CASE WANT: one timed run, one line of $results
run_case() {
	local r=$1 c=$2 want=$3 j=$logs/$2.json lg=$logs/$2.log
	local tf=$logs/$2.time mf=$logs/$2.mem t0 t1 b0 b1 pid spid rc=0
	local wall ips fb images skipped dropped cpu maxrss trss tpss procs
	local nsamp scpu bound mbs other status=ok why=
	rm -f "$j" "$tf" "$mf"
	case_cmd "$c" "$j"
	wait_quiet
	b0=$(machine_busy)
	t0=$EPOCHREALTIME
	/usr/bin/time -f '%M %U %S' -o "$tf" "${cmd[@]}" >"$lg" 2>&1 &
	pid=$!
	"$pyt" "$work/.memtree.py" "$pid" "$mf" &
	spid=$!
	wait "$pid" || rc=$?
	t1=$EPOCHREALTIME
	wait "$spid" || true
	b1=$(machine_busy)
	wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
	read -r maxrss ucpu scpu_t < <(tail -1 "$tf" 2>/dev/null ||
	    echo "NA NA NA") || true
	case $maxrss in ''|*[!0-9]*) maxrss=NA ucpu=0 scpu_t=0 ;; esac
	cpu=$(awk -v u="$ucpu" -v s="$scpu_t" 'BEGIN { printf "%.2f", u + s }')
	read -r trss tpss procs nsamp scpu < <(cat "$mf" 2>/dev/null ||
	    echo "NA NA NA NA 0") || true
	other=$(awk -v a="$b0" -v b="$b1" -v c="$cpu" -v s="$scpu" \
	    'BEGIN { o = b - a - c - s; printf "%.2f", (o > 0 ? o : 0) }')
	ips=NA fb=NA images=NA skipped=0 dropped=0 bound=NA mbs=NA
	case $c in
	*-sl*)
		read -r ips fb images skipped dropped bound mbs < <(getjson "$j" \
		    result.steady_images_per_second result.first_batch_seconds \
		    result.samples result.skipped result.dropped \
		    result.memory_bound_bytes result.bytes_per_second)
		[ "$mbs" = NA ] ||
		    mbs=$(awk -v b="$mbs" 'BEGIN { printf "%.3f", b / 1e6 }')
		# the arrival of the first batch, if shardload does not say
		if [ "$fb" = NA ]; then
			# (wall_seconds runs from the start of `bench`, the
			# steady window from the first batch, a full one)
			fb=$(getjson "$j" result.wall_seconds \
			    result.steady_images_per_second result.samples \
			    config.batch_per_rank | awk '
			    $1 != "NA" && $2 != "NA" && $2 > 0 && $4 != "NA" {
			    n1 = $3 < $4 ? $3 : $4
			    printf "%.3f", $1 - ($3 - n1) / $2; next }
			    { print "NA" }')
		fi
		if [ "$images" != NA ] && [ "$skipped" != NA ] &&
		    [ "$dropped" != NA ]; then
			if [ $(( images + skipped + dropped )) != "$want" ]; then
				status=fail
				why="samples $images + skipped $skipped + dropped $dropped != $want"
			elif [ "$images" != "$want" ]; then
				log "WARNING: $c round $r: $images samples delivered" \
				    "(skipped $skipped, dropped $dropped) of $want"
			fi
		else
			status=fail why="no samples/skipped/dropped in $j"
		fi
		;;
	*-torch-*)
		read -r ips fb images < <(getjson "$j" images_per_sec \
		    first_batch_s images)
		[ "$images" = "$want" ] || {
			status=fail why="delivered $images images, want $want"; }
		;;
	in-ceiling)
		ips=$(awk '$1 == "images_per_sec" { print $2 }' "$lg")
		images=$(awk '$1 == "images" { print $2 }' "$lg")
		skipped=$(awk '$1 == "failed" { print $2 }' "$lg")
		: "${ips:=NA}" "${images:=NA}" "${skipped:=NA}"
		[ "$images" = "$want" ] && [ "$skipped" = 0 ] || {
			status=fail why="decoded $images of $want JPEGs"; }
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
		# keep the evidence
		cp "$lg" "$logs/$c.round$r.failed.log" 2>/dev/null || true
	fi
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
	    "$r" "$c" "$status" "$wall" "$ips" "$fb" "$images" "$skipped" \
	    "$dropped" "$cpu" "$maxrss" "$trss" "$tpss" "$procs" "$bound" \
	    "$mbs" "$other" "$scpu" >>"$results"
	log "round $r: $c $status ${wall}s wall, $ips images/s after the" \
	    "first batch, ${cpu}s CPU, peak RSS $(( ${maxrss/NA/0} / 1024 ))" \
	    "MiB (tree $(( ${trss/NA/0} / 1024 )) MiB; others: ${other}s CPU)"
}

# ---------------------------------------------------------------------------
# a look at the batches before timing: both loaders give float32 NCHW
# batches of the right size, normalised with the same mean and std (every
# channel within (0 - mean) / std .. (1 - mean) / std). The samples differ
# (each loader draws its own order and crops), so pixels are not compared.

log "checking the first batch of each loader (untimed)"
cat >"$work/.range.py" <<'EOF'
import json, sys

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
lo = [-m / s for m, s in zip(MEAN, STD)]
hi = [(1 - m) / s for m, s in zip(MEAN, STD)]
kind, size, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if kind == "npy":
    import numpy as np
    x = np.load(path)
    dtype, shape = str(x.dtype), list(x.shape)
    cmin, cmax = x.min(axis=(0, 2, 3)).tolist(), x.max(axis=(0, 2, 3)).tolist()
else:
    with open(path) as f:
        st = json.load(f)["first_batch_stats"]
    dtype, shape, cmin, cmax = st["dtype"], st["shape"], st["min"], st["max"]
assert dtype == "float32", "dtype %s" % dtype
assert shape[1:] == [3, size, size], "shape %s" % shape
for c in range(3):
    assert lo[c] - 1e-3 <= cmin[c] <= cmax[c] <= hi[c] + 1e-3, \
        "channel %d spans %.3f..%.3f, outside %.3f..%.3f" % (
            c, cmin[c], cmax[c], lo[c], hi[c])
print("%s %s, per channel %s" % (dtype, tuple(shape), ", ".join(
    "%.2f..%.2f" % (a, b) for a, b in zip(cmin, cmax))))
EOF
"$pyt" "$here/torch_load.py" "${in_tars[0]}" --batch 16 --workers 0 \
    --image-size "$size" --shuffle 0 --shardshuffle 0 --stats \
    --json "$logs/stats-torch.json" >"$logs/stats-torch.log" 2>&1 ||
    die "torch_load.py does not run (log: $logs/stats-torch.log)"
stats_torch=$("$pyt" "$work/.range.py" json "$size" \
    "$logs/stats-torch.json" 2>&1) || die "torch_load.py: $stats_torch"
stats_sl="not run"
if [ $have_sl = 1 ]; then
	"$sl" dump "$in_man" --out "$logs/stats-sl.npy" --batch 16 \
	    --image-size "$size" --dtype f32 --layout nchw --workers 1 \
	    >"$logs/stats-sl.log" 2>&1 ||
	    die "shardload dump failed (log: $logs/stats-sl.log)"
	stats_sl=$("$pyt" "$work/.range.py" npy "$size" "$logs/stats-sl.npy" \
	    2>&1) || die "shardload dump: $stats_sl"
fi
log "first batch: torch $stats_torch; shardload $stats_sl"

# ---------------------------------------------------------------------------
# the rounds

log "warming the page cache"
warm
for (( r = 1; r <= runs; r++ )); do
	warm
	for c in $(rotate "$in_cases" $(( r - 1 ))); do
		if [ "$c" = in-ceiling ]; then
			run_case "$r" "$c" "$n_jpg"
		else
			run_case "$r" "$c" "$n_in"
		fi
	done
	for c in $(rotate "$c10_cases" $(( r - 1 ))); do
		run_case "$r" "$c" "$n_c10"
	done
done

# ---------------------------------------------------------------------------
# the report

cpu=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/.*: //')
mem=$(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
read -r v_py v_torch v_tv v_wds v_pil v_np v_piljpeg < <("$pyt" -c '
import platform, torch, torchvision, webdataset, PIL, numpy
from PIL import features
print(platform.python_version(), torch.__version__, torchvision.__version__,
      webdataset.__version__, PIL.__version__, numpy.__version__,
      "libjpeg-turbo" if features.check_feature("libjpeg_turbo") else
      "libjpeg")')
v_jpeg=$(dpkg-query -W -f '${Version}' libjpeg62-turbo 2>/dev/null |
    sed 's/^1://; s/-[^-]*$//' || true)
v_jpeg="libjpeg-turbo ${v_jpeg:-?}"
if [ $have_sl = 1 ]; then
	v_sl=$(cd "$root" && git rev-parse --short HEAD 2>/dev/null ||
	    echo "no commit")
	if [ -n "$(cd "$root" && git status --porcelain 2>/dev/null)" ]; then
		v_sl="$v_sl + uncommitted changes"
	fi
	# the binary and, beside it (the private copy), the library
	v_sl="$v_sl, binary sha256 $( { cat "$sl"
	    cat "$(dirname "$sl")"/libshardkit.so.* 2>/dev/null || true; } |
	    sha256sum | cut -c1-12)"
else
	v_sl="not run"
fi

awk -F'\t' -v runs="$runs" -v ncpu="$ncpu" -v quick="$quick" \
    -v n_in="$n_in" -v n_c10="$n_c10" -v mb_in="$mb_in" -v mb_c10="$mb_c10" \
    -v nsh_in="${#in_tars[@]}" -v nsh_c10="${#c10_tars[@]}" \
    -v batch="$batch" -v shuffle="$shuffle" -v size="$size" \
    -v scaling="$scaling" -v have_sl="$have_sl" \
    -v cpu="$cpu" -v mem="$mem" -v kernel="$(uname -r)" \
    -v date="$(date -u '+%Y-%m-%d %H:%M UTC')" -v cmd="$cmdline" \
    -v v_py="$v_py" -v v_torch="$v_torch" -v v_tv="$v_tv" -v v_wds="$v_wds" \
    -v v_pil="$v_pil" -v v_np="$v_np" -v v_piljpeg="$v_piljpeg" \
    -v v_jpeg="$v_jpeg" -v v_sl="$v_sl" \
    -v stats_torch="$stats_torch" -v stats_sl="$stats_sl" '
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
# images over the whole wall time of the process, per round
function e2e(c,    i, a, n) {
	n = 0
	for (i = 1; i <= runs; i++)
		if ((c, i) in ok) a[++n] = val[c, i, IMG] / val[c, i, WALL]
	return med(a, n)
}
function cpuper(c,    i, a, n) {
	n = 0
	for (i = 1; i <= runs; i++)
		if ((c, i) in ok) a[++n] = 1000 * val[c, i, CPU] / val[c, i, IMG]
	return med(a, n)
}
# the median over the rounds of the per-round ratio ips[a] / (f * ips[b])
function rratio(a, b, f,    i, x, n) {
	n = 0
	for (i = 1; i <= runs; i++)
		if ((a, i) in ok && (b, i) in ok && val[b, i, IPS] > 0)
			x[++n] = val[a, i, IPS] / (f * val[b, i, IPS])
	return med(x, n)
}
function nok(c,    i, n) {
	n = 0
	for (i = 1; i <= runs; i++) if ((c, i) in ok) n++
	return n
}
function fmt(v, f) { return v == "NA" ? "—" : sprintf(f, v) }
function mib(kb) { return kb == "NA" ? "—" : sprintf("%.0f", kb / 1024) }
function row(c, what, note,    n) {
	n = nok(c)
	if (!(c in seen)) {
		printf "| %s | not run | | | | | |\n", what
		return
	}
	if (n == 0) {
		printf "| %s | **failed in every round** | | | | | |\n", what
		return
	}
	printf "| %s | %.0f | %.0f–%.0f | %s | %s | %.2f | %.2f |%s\n", what,
	    col(c, IPS), col(c, IPS, "min"), col(c, IPS, "max"),
	    fmt(col(c, FB), "%.2f"), fmt(e2e(c), "%.0f"), col(c, CPU),
	    cpuper(c), (n < cnt[c] ? " " (cnt[c] - n) " of " cnt[c] " runs failed" : "")
}
function head() {
	printf "| loader | images/s | min–max | first batch s | end-to-end images/s | CPU s | CPU ms/image |\n"
	printf "|---|---:|---:|---:|---:|---:|---:|\n"
}
function ratio_row(what, a, b, f, goal, gv,    x) {
	if (nok(a) == 0 || nok(b) == 0) {
		printf "| %s | — | — | %s | not measured |\n", what, goal
		return
	}
	x = col(a, IPS) / (f * col(b, IPS))
	printf "| %s | %.2f | %.2f | %s | %s |\n", what, x, rratio(a, b, f),
	    goal, (gv == "" ? "" : (x >= gv ? "yes" : "**no**"))
}
function memrow(c, what) {
	if (nok(c) == 0) { printf "| %s | — | — | — | — |\n", what; return }
	printf "| %s | %s | %s | %s | %s |\n", what, mib(col(c, MAXRSS, "max")),
	    mib(col(c, TRSS, "max")), mib(col(c, TPSS, "max")),
	    (col(c, BOUND, "max") == "NA" ? "—" : sprintf("%.0f", col(c, BOUND, "max") / 1048576))
}
BEGIN {
	WALL = 4; IPS = 5; FB = 6; IMG = 7; SKIP = 8; DROP = 9; CPU = 10
	MAXRSS = 11; TRSS = 12; TPSS = 13; PROCS = 14; BOUND = 15; MBS = 16
	OTHER = 17
}
NR > 1 {
	seen[$2] = 1
	cnt[$2]++
	for (k = 4; k <= 18; k++) val[$2, $1, k] = $k
	if ($3 == "ok") ok[$2, $1] = 1
	else failed++
	others[++nother] = $OTHER
	if ($OTHER > omax) omax = $OTHER
	wall += $WALL
}
END {
	printf "- Machine: %d CPUs (%s), %s RAM, Linux %s.\n", ncpu, cpu, mem, kernel
	printf "- Date: %s.\n", date
	printf "- Versions: shardload %s; %s; Python %s, torch %s, torchvision %s, webdataset %s, Pillow %s (on %s), numpy %s.\n", v_sl, v_jpeg, v_py, v_torch, v_tv, v_wds, v_pil, v_piljpeg, v_np
	printf "- Command: `%s`: %d rounds, the cases in rotating order in each round; medians over the rounds.\n", cmd, runs
	printf "- Other processes on the machine used %.2f CPU s per run (median; max %.2f) while the cases ran for %.0f s in all.\n", med(others, nother), omax, wall
	if (failed) printf "- **%d runs failed** (see the logs); their rounds are left out of the medians.\n", failed
	if (!have_sl) printf "- **shardload was not run** (`shardload bench` did not work).\n"
	if (quick) printf "- **QUICK MODE: a smoke test of the script, not a result.**\n"
	printf "- First batch of each loader (untimed check; values within ImageNet-normalised [0, 1]): torch %s; shardload %s.\n", stats_torch, stats_sl
	printf "\n"

	printf "**ImageNet-like JPEGs**: %d samples (about 500×375) in %d shards, %s MB; one epoch, RandomResizedCrop(%d) + flip, batches of %d, shuffle buffer %d, %d workers.\n\n", n_in, nsh_in, mb_in, size, batch, shuffle, ncpu
	head()
	row("in-sl", "shardload, f32 NCHW normalised")
	row("in-sl-u8", "shardload, u8 NHWC")
	row("in-sl-io", "shardload `--no-decode` (I/O and tar only)")
	row("in-torch-pil", "PyTorch DataLoader + webdataset, PIL (the peer)")
	row("in-torch-tvio", "PyTorch DataLoader + webdataset, torchvision.io decode")
	if (nok("in-ceiling") > 0)
		printf "| ceiling: %d × jpeg_ceiling (1 thread, full-size decode) | %.0f | %.0f–%.0f | | | | |\n", ncpu, ncpu * col("in-ceiling", IPS), ncpu * col("in-ceiling", IPS, "min"), ncpu * col("in-ceiling", IPS, "max")
	printf "\nimages/s: after the first batch (its images and the time to it left out). End-to-end: all images over the process'"'"'s wall time, start-up and imports included. CPU s: the whole process tree'"'"'s user + system time. jpeg_ceiling on one thread: %.0f images/s (median), %.2f ms per image.\n\n", col("in-ceiling", IPS), (col("in-ceiling", IPS) == "NA" ? 0 : 1000 / col("in-ceiling", IPS))

	printf "**CIFAR-10 PNGs**: the test split, %d samples (32×32) in %d shards, %s MB; RandomResizedCrop(%d) upsamples them; otherwise as above.\n\n", n_c10, nsh_c10, mb_c10, size
	head()
	row("c10-sl", "shardload, f32 NCHW normalised")
	row("c10-torch-pil", "PyTorch DataLoader + webdataset, PIL (the peer)")
	printf "\n"

	tv = col("in-torch-tvio", IPS); pl = col("in-torch-pil", IPS)
	best = (tv != "NA" && pl != "NA" && tv > pl) ? "in-torch-tvio" : "in-torch-pil"
	printf "| images/s ratio | of the medians | median of per-round ratios | goal | met? |\n|---|---:|---:|---:|---|\n"
	ratio_row("ImageNet: shardload / PyTorch (PIL)", "in-sl", "in-torch-pil", 1, "≥ 3×", 3)
	if (best != "in-torch-pil")
		ratio_row("ImageNet: shardload / PyTorch (torchvision.io, the faster)", "in-sl", best, 1, "—", "")
	ratio_row("CIFAR-10: shardload / PyTorch (PIL)", "c10-sl", "c10-torch-pil", 1, "≥ 3×", 3)
	ratio_row("ImageNet: shardload / ceiling (" ncpu " × 1-thread decode)", "in-sl", "in-ceiling", ncpu, "≥ 0.90", 0.9)
	ratio_row("ImageNet: shardload u8 / ceiling", "in-sl-u8", "in-ceiling", ncpu, "—", "")
	ratio_row("ImageNet: PyTorch (PIL) / ceiling", "in-torch-pil", "in-ceiling", ncpu, "—", "")
	if (nok("in-sl") > 0 && nok("in-torch-pil") > 0)
		printf "| ImageNet: PyTorch (PIL) CPU per image / shardload'"'"'s | %.2f | — | — | |\n", cpuper("in-torch-pil") / cpuper("in-sl")
	printf "\n"

	printf "**Scaling** (shardload, ImageNet-like, f32 NCHW):\n\n"
	printf "| workers | images/s | min–max | × 1 worker | per worker, of 1 | of the ceiling of as many cores |\n|---:|---:|---:|---:|---:|---:|\n"
	n = split(scaling, ws, " ")
	one = (ws[1] == ncpu) ? "in-sl" : "in-sl-w" ws[1]
	for (i = 1; i <= n; i++) {
		c = (ws[i] == ncpu) ? "in-sl" : "in-sl-w" ws[i]
		if (nok(c) == 0 || nok(one) == 0) { printf "| %d | — | | | | |\n", ws[i]; continue }
		x = col(c, IPS); x1 = col(one, IPS)
		printf "| %d | %.0f | %.0f–%.0f | %.2f | %.2f | %s |\n", ws[i], x,
		    col(c, IPS, "min"), col(c, IPS, "max"), x / x1, x / x1 / ws[i],
		    (nok("in-ceiling") ? sprintf("%.2f", x / (ws[i] * col("in-ceiling", IPS))) : "—")
	}
	printf "\nshardload'"'"'s I/O threads and the consumer run besides the decode workers.\n\n"

	printf "**Peak memory** (MiB; the highest over the rounds):\n\n"
	printf "| run | largest process, peak RSS | process tree, peak RSS sum | process tree, peak PSS sum | shardload memory_bound |\n|---|---:|---:|---:|---:|\n"
	memrow("in-sl", "ImageNet: shardload f32")
	memrow("in-sl-u8", "ImageNet: shardload u8")
	memrow("in-torch-pil", "ImageNet: PyTorch (PIL), " ncpu " workers")
	memrow("in-torch-tvio", "ImageNet: PyTorch (torchvision.io)")
	memrow("c10-sl", "CIFAR-10: shardload f32")
	memrow("c10-torch-pil", "CIFAR-10: PyTorch (PIL)")
	printf "\nLargest process: the kernel'"'"'s peak RSS (/usr/bin/time %%M; exact, and for shardload, one process, the whole). Tree: the RSS and the PSS of every process of the run, summed, sampled every 0.1 s (RSS) and 1 s (PSS); the RSS sum counts pages the forked workers share once per process, the PSS sum divides them.\n"
}' "$results" | tee "$work/load-table.md"

log "raw timings: $results; table: $work/load-table.md; logs: $logs"
[ "$failures" = 0 ] || die "$failures runs failed"
