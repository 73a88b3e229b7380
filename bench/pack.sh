#!/usr/bin/env bash
# bench/pack.sh - the packing benchmark of issue 2.
#
#   bench/pack.sh [--runs K] [--quick] [--work DIR] [--shardtool PATH]
#
# Times, on the same data and machine and in the same run:
#
#   CIFAR-10 PNG   shardtool pack cifar10 (-j all CPUs, and -j 1) against the
#                  Python webdataset ShardWriter fed the same records with
#                  PIL-encoded PNGs (bench/wds_pack.py), single-process and
#                  with a multiprocessing Pool of all CPUs doing the PIL work.
#                  Both splits, 50000 + 10000 = 60000 images.
#   JPEG passthrough
#                  shardtool pack imagenet (train) against ShardWriter with the
#                  raw JPEG bytes and against GNU tar of the same files (the
#                  ceiling).
#
# The data sets are generated once with `shardtool synth` and kept in the work
# directory (default /tmp/shardkit-bench, or $SHARDKIT_BENCH_DIR); the page
# cache is warmed before each round. Each of the K rounds (default 5) runs
# every case once, in an order that rotates from round to round. Outputs go
# to the work directory (one file system for all tools), are checked and
# deleted after each run; between runs, untimed, `sync` runs and the script
# waits for the shared machine to be idle for half a second. Per run it
# records the wall time, the CPU time of the tool and its children, and the
# CPU time other processes took meanwhile.
#
# Checks: every tool wrote every image (tar listings, and the count each tool
# prints); after round 1, sampled PNGs decode to the same pixels and labels,
# shardtool's -j 1 and -j N shards are byte-identical, and the passthrough
# JPEGs equal the source files. The binary timed is a private copy of the
# build tree's (so a rebuild cannot change it mid-run).
#
# The report (stdout, and pack-table.md in the work directory) is Markdown:
# medians over the rounds, images/s and the ratios against the goals of
# issue 2. --quick uses small data sets and 2 rounds, to smoke-test this
# script; its numbers mean nothing.
#
# Environment: SHARDTOOL (the binary), PYTHON (default python3),
# SHARDKIT_BENCH_DIR (the work directory).

set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
runs=
quick=0
work=${SHARDKIT_BENCH_DIR:-/tmp/shardkit-bench}
st=${SHARDTOOL:-$root/build/shardtool/shardtool}
py=${PYTHON:-python3}
cmdline="bench/pack.sh${*:+ $*}"

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
	--shardtool) st=${2:?--shardtool wants a path}; shift 2 ;;
	--shardtool=*) st=${1#*=}; shift ;;
	-h|--help) usage 0 ;;
	*) echo "pack.sh: unknown argument '$1'" >&2; usage 2 >&2 ;;
	esac
done

die() { echo "pack.sh: $*" >&2; exit 1; }
log() { echo "pack.sh: $*" >&2; }

if [ $quick = 1 ]; then
	: "${runs:=2}"
	cifar_train=2000 cifar_test=500
	in_classes=10 in_per_class=20
else
	: "${runs:=5}"
	cifar_train=50000 cifar_test=10000
	in_classes=100 in_per_class=100
fi
case $runs in ''|*[!0-9]*|0) die "--runs wants a positive number" ;; esac

[ -x "$st" ] || die "$st is not built (cd build && make), or set SHARDTOOL"
"$st" help synth >/dev/null 2>&1 || "$st" synth --help >/dev/null 2>&1 ||
    die "$st has no 'synth' command"
"$py" -c 'import webdataset, PIL, numpy' 2>/dev/null ||
    die "$py cannot import webdataset, PIL and numpy (pip install webdataset)"
command -v tar >/dev/null || die "GNU tar is missing"
tar --version | head -1 | grep -q 'GNU tar' || die "tar is not GNU tar"

ncpu=$(nproc)
mkdir -p "$work"
work=$(cd "$work" && pwd)
data=$work/data
out=$work/out
mkdir -p "$data" "$out"

# In a build tree, $st is a libtool wrapper around .libs/shardtool and the
# uninstalled libshardkit. Run a private copy of both, so that a rebuild
# during the benchmark cannot change or break the binary being timed (and no
# wrapper script runs inside the timings).
stdir=$(cd "$(dirname "$st")" && pwd)
if [ -x "$stdir/.libs/shardtool" ] && [ -d "$stdir/../lib/.libs" ]; then
	rm -rf "$work/bin"
	mkdir -p "$work/bin"
	cp "$stdir/.libs/shardtool" "$work/bin/"
	cp -L "$stdir"/../lib/.libs/libshardkit.so.[0-9] "$work/bin/"
	export LD_LIBRARY_PATH="$work/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	st=$work/bin/shardtool
	ldd "$st" | grep -q "libshardkit.* => $work/bin/" ||
	    die "cannot run a copy of $stdir/.libs/shardtool"
	"$st" pack --help >/dev/null 2>&1 || die "$st does not run"
fi

# ---------------------------------------------------------------------------
# the data, generated once

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

n_cifar=$(( cifar_train + cifar_test ))
n_jpeg=$(find "$imnet/train" -type f | wc -l)
[ "$n_jpeg" -gt 0 ] || die "$imnet/train holds no files"
mb_cifar=$(cat "$cifar"/*.bin | wc -c)
mb_jpeg=$(find "$imnet/train" -type f -print0 | du -cb --files0-from=- |
    tail -1 | cut -f1)
mb_cifar=$(awk -v b="$mb_cifar" 'BEGIN { printf "%.1f", b / 1e6 }')
mb_jpeg=$(awk -v b="$mb_jpeg" 'BEGIN { printf "%.1f", b / 1e6 }')
log "CIFAR-10: $n_cifar images ($mb_cifar MB); JPEG: $n_jpeg files" \
    "($mb_jpeg MB); $runs rounds"

# ---------------------------------------------------------------------------
# the cases: each writes into $1 and is timed as a whole

case_cmd() {
	local c=$1 o=$2
	case $c in
	cifar-st-jN|cifar-st-j1)
		local j=$ncpu
		[ "$c" = cifar-st-j1 ] && j=1
		"$st" pack cifar10 "$cifar" -o "$o/cifar10-train-%06d.tar" \
		    -j "$j" &&
		"$st" pack cifar10 "$cifar" --split test \
		    -o "$o/cifar10-test-%06d.tar" -j "$j" ;;
	cifar-wds-p1)
		"$py" "$here/wds_pack.py" cifar10 "$cifar" \
		    -o "$o/cifar10-{split}-%06d.tar" --split train,test \
		    --procs 1 ;;
	cifar-wds-pool)
		"$py" "$here/wds_pack.py" cifar10 "$cifar" \
		    -o "$o/cifar10-{split}-%06d.tar" --split train,test \
		    --procs "$ncpu" ;;
	jpeg-st-jN|jpeg-st-j1)
		local j=$ncpu
		[ "$c" = jpeg-st-j1 ] && j=1
		"$st" pack imagenet "$imnet" -o "$o/imagenet-train-%06d.tar" \
		    -j "$j" ;;
	jpeg-wds)
		"$py" "$here/wds_pack.py" imagenet "$imnet" \
		    -o "$o/imagenet-train-%06d.tar" ;;
	jpeg-gnutar)
		tar -cf "$o/train.tar" -C "$imnet" train ;;
	*) die "unknown case $c" ;;
	esac
}

# The image members in the tar files under $1.
count_images() {
	local f
	for f in "$1"/*.tar; do
		[ -e "$f" ] || continue
		tar -tf "$f"
	done | grep -cE '\.(png|jpg|JPEG)$' || true
}

# How many samples a tool says it wrote, from its output in $1.
claimed() {
	awk '/^packed .*: [0-9]+ samples into/ { n += $4 }
	    /^wds_pack .*: [0-9]+ samples into/ { n += $3 }
	    END { print n + 0 }' "$1"
}

cifar_cases="cifar-st-jN cifar-st-j1 cifar-wds-p1 cifar-wds-pool"
jpeg_cases="jpeg-st-jN jpeg-st-j1 jpeg-wds jpeg-gnutar"

results=$work/pack-$(date +%Y%m%d-%H%M%S).tsv
printf 'round\tcase\tseconds\timages\tbytes\tcpu_seconds\tother_cpu_seconds\n' \
    >"$results"

warm() {
	cat "$cifar"/*.bin >/dev/null
	find "$imnet/train" -type f -print0 | xargs -0 cat >/dev/null
}

# rotate LIST N: the words of LIST, starting at word N mod their count
rotate() {
	local -a w=($1)
	local n=${#w[@]} k=$(( $2 % ${#w[@]} )) i
	for (( i = 0; i < n; i++ )); do
		printf '%s ' "${w[$(( (i + k) % n ))]}"
	done
}

# The user + system CPU seconds of this shell's finished children so far.
# `times` must run in this shell, not in a $(...) or pipeline subshell, so
# call this as a plain command; it leaves the answer in $children_cpu.
child_cpu() {
	times >"$work/.times"
	children_cpu=$(awk 'END { for (i = 1; i <= 2; i++) {
		split($i, a, /[ms]/); t += a[1] * 60 + a[2] }
	    printf "%.3f", t }' "$work/.times")
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

run_case() {
	local r=$1 c=$2 o=$out/$2 want=$3 t0 t1 c0 c1 b0 b1 secs cpu other
	local got said bytes
	rm -rf "$o"
	mkdir -p "$o"
	sync
	wait_quiet
	child_cpu
	c0=$children_cpu
	b0=$(machine_busy)
	t0=$EPOCHREALTIME
	if ! case_cmd "$c" "$o" >"$work/$c.log" 2>&1; then
		cat "$work/$c.log" >&2
		die "$c failed in round $r"
	fi
	t1=$EPOCHREALTIME
	b1=$(machine_busy)
	child_cpu
	c1=$children_cpu
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
	cpu=$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.3f", b - a }')
	# CPU time that other processes on the machine took during the run
	other=$(awk -v a="$b0" -v b="$b1" -v c="$cpu" \
	    'BEGIN { o = b - a - c; printf "%.2f", (o > 0 ? o : 0) }')
	# The same work: every image is in the output, and the tool says so.
	got=$(count_images "$o")
	[ "$got" = "$want" ] ||
	    die "$c wrote $got images, want $want (log: $work/$c.log)"
	if [ "$c" != jpeg-gnutar ]; then
		said=$(claimed "$work/$c.log")
		[ "$said" = "$want" ] ||
		    die "$c reports $said samples, want $want"
	fi
	bytes=$(cat "$o"/*.tar | wc -c)
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$c" "$secs" "$want" \
	    "$bytes" "$cpu" "$other" >>"$results"
	log "round $r: $c ${secs}s wall, ${cpu}s CPU (others: ${other}s)"
	[ "$r" = 1 ] && [ "$c" != jpeg-gnutar ] && cp -r "$o" "$out/keep-$c"
	rm -rf "$o"
}

rm -rf "$out"/keep-*
log "warming the page cache"
warm
for (( r = 1; r <= runs; r++ )); do
	warm
	for c in $(rotate "$cifar_cases" $(( r - 1 ))); do
		run_case "$r" "$c" "$n_cifar"
	done
	for c in $(rotate "$jpeg_cases" $(( r - 1 ))); do
		run_case "$r" "$c" "$n_jpeg"
	done
done

# ---------------------------------------------------------------------------
# the outputs hold the same samples (checked on round 1's outputs)

log "checking that the outputs hold the same samples"
"$py" - "$out" "$imnet" <<'EOF' >&2 || die "the outputs differ"
import io, os, sys, tarfile
import numpy as np
from PIL import Image

out, imnet = sys.argv[1], sys.argv[2]

def load(d):
    s = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".tar"):
            with tarfile.open(os.path.join(d, f)) as t:
                for m in t:
                    if m.isfile():
                        k, _, e = m.name.partition(".")
                        s.setdefault(k, {})[e] = t.extractfile(m).read()
    return s

def same_files(a, b):
    a, b = os.path.join(out, "keep-" + a), os.path.join(out, "keep-" + b)
    names = sorted(f for f in os.listdir(a) if f.endswith(".tar"))
    assert names == sorted(f for f in os.listdir(b) if f.endswith(".tar"))
    for f in names:
        with open(os.path.join(a, f), "rb") as x, \
                open(os.path.join(b, f), "rb") as y:
            if x.read() != y.read():
                return False
    return True

# shardtool promises the same shards for every -j
assert same_files("cifar-st-jN", "cifar-st-j1"), "cifar: -j N != -j 1"
assert same_files("jpeg-st-jN", "jpeg-st-j1"), "imagenet: -j N != -j 1"

ref = load(os.path.join(out, "keep-cifar-st-jN"))
pil = load(os.path.join(out, "keep-cifar-wds-p1"))
mb = lambda s: sum(len(v["png"]) for v in s.values()) / 1e6
with open(os.path.join(os.path.dirname(out), ".payload"), "w") as f:
    f.write("%.1f %.1f\n" % (mb(ref), mb(pil)))
del pil
for other in ("cifar-st-j1", "cifar-wds-p1", "cifar-wds-pool"):
    o = load(os.path.join(out, "keep-" + other))
    assert o.keys() == ref.keys(), other + ": other keys"
    for k in sorted(ref)[::997]:
        a = np.asarray(Image.open(io.BytesIO(ref[k]["png"])))
        b = np.asarray(Image.open(io.BytesIO(o[k]["png"])))
        assert a.shape == (32, 32, 3) and (a == b).all(), other + ": " + k
        assert int(ref[k]["cls"]) == int(o[k]["cls"]), other + ": " + k
ref = load(os.path.join(out, "keep-jpeg-st-jN"))
for other in ("jpeg-wds",):
    o = load(os.path.join(out, "keep-" + other))
    assert o.keys() == ref.keys(), other + ": other keys"
    for k in sorted(ref)[::97]:
        assert ref[k]["cls"] == o[k]["cls"], other + ": " + k
        # ShardWriter passes the odd files (grayscale, CMYK, PNG) through;
        # shardtool converts them.
        a, b = dict(ref[k]), dict(o[k])
        if a.get("jpg") != b.get("jpg"):
            del a["jpg"], b["jpg"]
        assert a == b, other + ": " + k
same = 0
for root, _, files in os.walk(os.path.join(imnet, "train")):
    for f in files:
        k = os.path.splitext(f)[0]
        with open(os.path.join(root, f), "rb") as fh:
            same += fh.read() == ref[k].get("jpg")
print("pack.sh: outputs agree (shardtool -j 1 and -j N byte-identical); "
      "%d of %d JPEGs passed through byte for byte by shardtool (the rest "
      "converted)" % (same, len(ref)))
EOF
rm -rf "$out"/keep-*

# ---------------------------------------------------------------------------
# the report

conv=$(grep -E '^  converted:' "$work/jpeg-st-jN.log" | sed 's/^  converted: //')
read -r png_st png_pil <"$work/.payload"

cpu=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/.*: //')
mem=$(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
fs=$(df -T "$work" | awk 'NR == 2 { print $2 }')
v_wds=$("$py" -c 'import webdataset; print(webdataset.__version__)')
v_pil=$("$py" -c 'import PIL; print(PIL.__version__)')
v_np=$("$py" -c 'import numpy; print(numpy.__version__)')
v_py=$("$py" -c 'import platform; print(platform.python_version())')
v_tar=$(tar --version | head -1 | sed 's/.* //')
v_st=$(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo "no commit")
if [ -n "$(cd "$root" && git status --porcelain 2>/dev/null)" ]; then
	v_st="$v_st + uncommitted changes"
fi
v_st="$v_st, binary sha256 $(cat "$st" "$(dirname "$st")"/libshardkit.so.* \
    2>/dev/null | sha256sum | cut -c1-12)"
v_z=$(ldd "$st" "$(dirname "$st")"/libshardkit.so.* 2>/dev/null |
    awk '/libz\.so|libpng|libjpeg|libarchive/ { print $3 }' | sort -u |
    xargs -r readlink -f | xargs -r -n1 basename | tr '\n' ' ' | sed 's/ $//')

awk -F'\t' -v runs="$runs" -v ncpu="$ncpu" -v quick="$quick" \
    -v n_cifar="$n_cifar" -v c_train="$cifar_train" -v c_test="$cifar_test" \
    -v n_jpeg="$n_jpeg" -v mb_jpeg="$mb_jpeg" -v mb_cifar="$mb_cifar" \
    -v cpu="$cpu" -v mem="$mem" -v fs="$fs" \
    -v date="$(date -u '+%Y-%m-%d %H:%M UTC')" \
    -v v_wds="$v_wds" -v v_pil="$v_pil" -v v_np="$v_np" -v v_py="$v_py" \
    -v v_tar="$v_tar" -v v_st="$v_st" -v v_z="$v_z" -v kernel="$(uname -r)" \
    -v cmd="$cmdline" -v conv="$conv" -v png_st="$png_st" -v png_pil="$png_pil" '
function sortv(a, n,    i, j, t) {
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
			t = a[j]; a[j] = a[j - 1]; a[j - 1] = t
		}
}
function med(a, n) {
	sortv(a, n)
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function median(c,    i, a) {
	for (i = 1; i <= cnt[c]; i++) a[i] = sec[c, i]
	return med(a, cnt[c])
}
function cpumed(c,    i, a) {
	for (i = 1; i <= cnt[c]; i++) a[i] = cpus[c, i]
	return med(a, cnt[c])
}
function lo(c,    i, m) {
	m = sec[c, 1]
	for (i = 2; i <= cnt[c]; i++) if (sec[c, i] < m) m = sec[c, i]
	return m
}
function hi(c,    i, m) {
	m = sec[c, 1]
	for (i = 2; i <= cnt[c]; i++) if (sec[c, i] > m) m = sec[c, i]
	return m
}
# the median over the rounds of the per-round ratio sec[a] / sec[b]
function rratio(a, b,    i, x, n) {
	for (i = 1; i <= cnt[a] && i <= cnt[b]; i++)
		x[++n] = sec[a, i] / sec[b, i]
	return med(x, n)
}
function row(c, what, n) {
	printf "| %s | %.2f | %.2f–%.2f | %.0f | %.2f | %.1f |\n", what,
	    median(c), lo(c), hi(c), n / median(c), cpumed(c), bytes[c] / 1e6
}
function head() {
	printf "| tool | median wall s | min–max s | images/s | median CPU s | output MB |\n"
	printf "|---|---:|---:|---:|---:|---:|\n"
}
NR > 1 {
	# rounds run the cases in rotating order: index by the round
	cnt[$2]++
	sec[$2, $1] = $3
	bytes[$2] = $5
	cpus[$2, $1] = $6
	others[++nother] = $7
	if ($7 > omax) omax = $7
	wall += $3
}
END {
	P1 = median("cifar-wds-p1"); PP = median("cifar-wds-pool")
	if (PP < P1) { best = "cifar-wds-pool"; bestname = "Pool(" ncpu ")" }
	else { best = "cifar-wds-p1"; bestname = "1 process" }
	SN = median("cifar-st-jN"); S1 = median("cifar-st-j1")
	JN = median("jpeg-st-jN"); J1 = median("jpeg-st-j1")
	JW = median("jpeg-wds"); JT = median("jpeg-gnutar")
	JS = JN < J1 ? JN : J1
	JSc = JN < J1 ? "jpeg-st-jN" : "jpeg-st-j1"
	JSname = JN < J1 ? "-j " ncpu : "-j 1"
	for (i = 1; i <= nother; i++) osum += others[i]

	printf "- Machine: %d CPUs (%s), %s RAM, %s, Linux %s.\n", ncpu, cpu, mem, fs, kernel
	printf "- Date: %s.\n", date
	printf "- Versions: shardtool %s (%s); Python %s, webdataset %s, Pillow %s, numpy %s; GNU tar %s.\n", v_st, v_z, v_py, v_wds, v_pil, v_np, v_tar
	printf "- Command: `%s`: %d rounds, the cases in rotating order in each round; medians over the rounds.\n", cmd, runs
	printf "- Other processes on the machine (incl. kernel writeback) used %.2f CPU s per run (median; max %.2f) while the cases ran for %.0f s in all.\n", med(others, nother), omax, wall
	if (quick)
		printf "- **QUICK MODE: a smoke test of the script, not a result.**\n"
	printf "\n"

	printf "**CIFAR-10 → PNG shards**: %d images (train %d + test %d, %s MB of records), both splits.\n\n", n_cifar, c_train, c_test, mb_cifar
	head()
	row("cifar-st-jN", "`shardtool pack cifar10 -j " ncpu "`", n_cifar)
	row("cifar-st-j1", "`shardtool pack cifar10 -j 1`", n_cifar)
	row("cifar-wds-p1", "ShardWriter, PIL PNG, 1 process", n_cifar)
	row("cifar-wds-pool", "ShardWriter, PIL PNG in `Pool(" ncpu ")`", n_cifar)
	printf "\nPNG payload: shardtool %s MB, PIL %s MB (the rest of the output is tar headers; ShardWriter adds a PAX header to every member).\n\n", png_st, png_pil

	printf "**JPEG passthrough**: %d ImageNet-like JPEGs (%s MB), train split.\n\n", n_jpeg, mb_jpeg
	head()
	row("jpeg-st-jN", "`shardtool pack imagenet -j " ncpu "`", n_jpeg)
	row("jpeg-st-j1", "`shardtool pack imagenet -j 1`", n_jpeg)
	row("jpeg-wds", "ShardWriter, raw bytes", n_jpeg)
	row("jpeg-gnutar", "`tar -cf` (ceiling)", n_jpeg)
	if (conv != "")
		printf "\nshardtool re-encoded %s, as issue 2 asks; ShardWriter and tar copied them as they are.\n", conv
	printf "\n"

	printf "| throughput ratio | of the medians | median of per-round ratios | goal | met? |\n|---|---:|---:|---:|---|\n"
	r = median(best) / SN
	printf "| CIFAR PNG: shardtool `-j %d` / best ShardWriter (%s) | %.2f× | %.2f× | ≥ 10× | %s |\n", ncpu, bestname, r, rratio(best, "cifar-st-jN"), (r >= 10 ? "yes" : "**no**")
	printf "| CIFAR PNG: shardtool `-j 1` / ShardWriter 1 process | %.2f× | %.2f× | — | |\n", P1 / S1, rratio("cifar-wds-p1", "cifar-st-j1")
	r = JT / JN
	printf "| JPEG: shardtool `-j %d` / GNU tar | %.2f | %.2f | ≥ 0.80 | %s |\n", ncpu, r, rratio("jpeg-gnutar", "jpeg-st-jN"), (r >= 0.8 ? "yes" : "**no**")
	r = JT / J1
	printf "| JPEG: shardtool `-j 1` / GNU tar | %.2f | %.2f | ≥ 0.80 | %s |\n", r, rratio("jpeg-gnutar", "jpeg-st-j1"), (r >= 0.8 ? "yes" : "**no**")
	printf "| JPEG: shardtool `%s` / ShardWriter | %.2f× | %.2f× | — | |\n", JSname, JW / JS, rratio("jpeg-wds", JSc)
}' "$results" | tee "$work/pack-table.md"

log "raw timings: $results; table: $work/pack-table.md"
