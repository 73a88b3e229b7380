#!/usr/bin/env bash
# bench/study.sh - the seed study of issue 24 on this machine: the full
# matrix of shardtrain study (files and shards; local disk, nginx over
# http, moto's S3, the GCS emulator and a shardfs mount, every remote
# source behind the emulated link; 1 rank, DDP and FSDP on 2 ranks), each
# cell the median of --repeats runs, interleaved so that a slow spell of
# the machine slows every cell alike.
#
#   bench/study.sh [--repeats K] [--out DIR] [--build DIR] [-- STUDY OPTIONS]
#
# Default: --quick (see shardtrain(1), "The quick study"), 3 repeats,
# DIR=bench-study. Prints the study's table and findings, and the
# loopback rate of every server (the same loader alone, with no link), so
# that a source slower than the link is told apart from the link itself.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build
out=bench-study
repeats=3
while [ $# -gt 0 ]; do
	case $1 in
	--repeats) repeats=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--build) build=$2; shift 2 ;;
	--) shift; break ;;
	*) echo "usage: bench/study.sh [--repeats K] [--out DIR] [--build DIR] [-- OPTIONS]" >&2; exit 2 ;;
	esac
done
tr=$build/train/shardtrain
[ -x "$tr" ] || { echo "bench/study.sh: build first: $tr is missing" >&2; exit 1; }
date -u +"%Y-%m-%d %H:%M UTC"
lscpu | sed -n 's/^Model name: *//p'
echo "cores: $(nproc)"
echo "== the study: shardtrain study --quick --repeats $repeats $*"
"$tr" study --quick --repeats "$repeats" --out "$out/study" "$@"
echo "== each server at loopback speed: the files and shards cells of one rank, no link"
"$tr" study --quick --strategies single --no-link --out "$out/nolink" -q "$@" |
    sed -n '/^seconds per epoch/,/^$/p'
for f in "$out"/nolink/cells/*-single1.json; do
	python3 - "$f" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1]))
r = d["result"]
print("%-28s loader alone %7.0f images/s  compute alone %5.0f images/s"
      % (os.path.basename(sys.argv[1])[:-5], r["loader_images_per_second"] or -1,
         r["compute_images_per_second"] or -1))
PY
done
