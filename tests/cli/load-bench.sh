#!/usr/bin/env bash
# load-bench.sh - "shardload bench": the --json result has every field of
# shardload(1) with sane values (tests/py/check_bench.py), the counts
# follow --batch, --world, --epochs, --limit-batches and --resume-batch,
# --no-decode is the I/O-only mode, --json - writes only JSON to stdout,
# the text summary names the bound stage; --help and --version exit 0 and
# no command is a usage error; under a launcher the workers default to the
# rank's share of the CPUs.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_python json

say "shardload --help, --version, no command"
sl help --help
has help.out "usage: shardload [-h|-V] COMMAND"
for c in bench dump keys; do
	has help.out "  $c "
done
sl helpcmd bench --help
has helpcmd.out "usage: shardload bench SOURCE"
sl helpcmd2 help bench
cmp -s "$T/helpcmd.out" "$T/helpcmd2.out" || fail "help bench differs from bench --help"
sl version --version
grep -qE '^shardload \(shardkit\) [0-9]+\.[0-9]+' "$T/version.out" ||
    fail "--version printed: $(cat "$T/version.out")"
sl_rc 2 nocmd
is_sl_usage_error nocmd

synth_imagenet "$T/i" --classes 4 --per-class 12 --val 4 --seed 61
mkdir "$T/s"
st pack pack imagenet "$T/i" -o "$T/s/in-%06d.tar" --max-count 10
M="$T/s/in.json"
# The shard bytes one epoch of one rank reads, by shardload(1)'s
# definition: from each shard's first header to the end of its last
# member's data (no padding, no end-of-archive blocks); and the samples'
# bytes, all their members' data. Read with tarfile.
# shellcheck disable=SC2046
python3 -c '
import sys, tarfile
n = d = 0
for s in sys.argv[1:]:
    with tarfile.open(s) as tf:
        ms = [m for m in tf if m.isfile()]
    n += ms[-1].offset_data + ms[-1].size
    d += sum(m.size for m in ms)
print(n, d)' $(shards_of "$T/s") >"$T/sizes" || fail "tarfile cannot read the shards"
read -r bytes sb <"$T/sizes"
o=(--image-size 32 --workers 2 --io-streams 2)

say "one epoch of 48 in batches of 8"
sl b bench "$M" "${o[@]}" --batch 8 --json "$T/b.json"
py check_bench.py "$T/b.json" samples=48 batches=6 full=8 batches_per_epoch=6 \
    dropped=0 skipped=0 min_ips=0 decode_busy=+ config.batch_per_rank=8 config.global_batch=8 \
    config.image_size=32 config.workers=2 config.io_streams=2 \
    config.decode=true config.limit_batches=null config.epochs=1 \
    config.remainder=drop config.crop=random-resized "config.source=$M" \
    "bytes=$bytes" "sample_bytes=$sb"
say "the text summary: counts, the stage table and the bound"
has b.out "48 samples in 6 batches"
has b.out "skipped 0, dropped 0 (remainder)"
for w in "stage        threads   busy s   wait s" "io  " "decode  " \
    "consumer  " "memory: peak RSS"; do
	has b.out "$w"
done
grep -qE '^bound: (io|decode|consumer) \(busy [0-9]+% of its capacity\)$' \
    "$T/b.out" || { show b; fail "no 'bound: STAGE (busy N% ...)' line"; }

say "the thread counts reported are those used: workers default to the CPUs"
sl bd bench "$M" --image-size 32 --batch 8 --json "$T/bd.json"
py check_bench.py "$T/bd.json" "config.workers=$(getconf _NPROCESSORS_ONLN)" \
    config.io_streams=2 config.prefetch_bytes=67108864 config.shuffle=0

say "under a launcher, workers default to this rank's share of the CPUs"
ncpu=$(nproc)
share=$((ncpu / 2))
[ "$share" -ge 1 ] || share=1
# nproc counts the CPUs this process may use; unbound, two ranks split them.
if [ "$ncpu" -eq "$(getconf _NPROCESSORS_ONLN)" ]; then
	run_rc 0 bl env OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 \
	    OMPI_COMM_WORLD_LOCAL_SIZE=2 "$SHARDLOAD" bench "$M" \
	    --image-size 32 --batch 4 --json "$T/bl.json"
	py check_bench.py "$T/bl.json" "config.workers=$share" config.rank=1 \
	    config.world=2 config.global_batch=8
fi
# Bound to one CPU (as mpirun --bind-to core does), a rank takes that one.
if command -v taskset >/dev/null && [ "$ncpu" -gt 1 ]; then
	run_rc 0 bt env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 \
	    OMPI_COMM_WORLD_LOCAL_SIZE=2 taskset -c 0 "$SHARDLOAD" bench "$M" --image-size 32 --batch 4 --json "$T/bt.json"
	py check_bench.py "$T/bt.json" config.workers=1
fi

say "--json -: only JSON on stdout"
sl j bench "$M" "${o[@]}" --batch 8 --json - --quiet
py check_bench.py "$T/j.out" samples=48 batches=6
hasnt j.out "samples in"

say "2 ranks, batches of 5: 4 batches of each rank's 24, 4 dropped"
sl w2 bench "$M" "${o[@]}" --batch 5 --world 2 --rank 1 --json "$T/w2.json"
py check_bench.py "$T/w2.json" samples=20 batches=4 full=5 batches_per_epoch=4 \
    dropped=4 config.rank=1 config.world=2 config.batch_per_rank=5 \
    config.global_batch=10
has w2.out "dropped 4 (remainder)"
say "--epochs 2 doubles the batches and the drops"
sl e2 bench "$M" "${o[@]}" --batch 5 --world 2 --rank 1 --epochs 2 \
    --json "$T/e2.json"
py check_bench.py "$T/e2.json" samples=40 batches=8 full=5 batches_per_epoch=4 \
    dropped=8 config.epochs=2
sl e2k bench "$M" "${o[@]}" --batch 5 --world 2 --rank 1 --epochs 2 \
    --remainder keep --json "$T/e2k.json"
py check_bench.py "$T/e2k.json" samples=48 batches=10 batches_per_epoch=5 \
    dropped=0 config.remainder=keep

say "--limit-batches 3 stops early; --resume-batch 2 starts late"
sl lim bench "$M" "${o[@]}" --batch 4 --epochs 3 --limit-batches 3 \
    --json "$T/lim.json"
py check_bench.py "$T/lim.json" samples=12 batches=3 full=4 batches_per_epoch=12 \
    config.limit_batches=3
sl res bench "$M" "${o[@]}" --batch 4 --resume-batch 2 --json "$T/res.json"
py check_bench.py "$T/res.json" samples=40 batches=10 full=4 \
    config.resume_batch=2
sl klim keys "$M" "${o[@]}" --batch 4 --epochs 3 --limit-batches 2
[ "$(wc -l <"$T/klim.out")" -eq 8 ] || fail "keys --limit-batches 2: not 8 lines"

say "--no-decode: I/O alone, the same samples and bytes, no workers"
sl nd bench "$M" "${o[@]}" --batch 8 --no-decode --json "$T/nd.json"
py check_bench.py "$T/nd.json" samples=48 batches=6 full=8 decode_busy=0 \
    config.decode=false config.workers=0 "bytes=$bytes" "sample_bytes=$sb" \
    min_ips=0
[ "$(jget "$T/nd.json" result.bound)" != decode ] ||
    fail "--no-decode: the bound is decode, with no decoding"
sl ndt bench "$M" "${o[@]}" --batch 8 --no-decode --quiet
grep -qE '^bound: (io|consumer) ' "$T/ndt.out" || { show ndt; fail "--no-decode: bound is not io or consumer"; }
grep -qE '^decode +0 ' "$T/ndt.out" || { show ndt; fail "--no-decode: the decode stage has threads"; }
sl ndk keys "$M" "${o[@]}" --batch 8 --no-decode
sl dk keys "$M" "${o[@]}" --batch 8
cmp -s "$T/ndk.out" "$T/dk.out" || fail "--no-decode delivered other keys or labels"

say "float output and a shuffle buffer: the same counts"
sl f bench "$M" "${o[@]}" --batch 8 --dtype f32 --layout nchw --shuffle 16 \
    --crop center --json "$T/f.json"
py check_bench.py "$T/f.json" samples=48 batches=6 config.dtype=f32 \
    config.layout=nchw config.shuffle=16 config.crop=center
mem32=$(jget "$T/b.json" result.memory_bound_bytes)
memf=$(jget "$T/f.json" result.memory_bound_bytes)
[ "$memf" -gt "$mem32" ] ||
    fail "memory_bound_bytes does not grow with f32 batches ($memf <= $mem32)"
echo "PASS: load-bench"
