#!/usr/bin/env bash
# train-ranks.sh - shardtrain under mpirun: DDP on 2 ranks ends with the
# parameters of 1 rank on the same global batch, FSDP with those of DDP,
# FSDP's parameter + optimizer memory per rank falls about as 1/N, and
# mismatched ranks or a batch that does not divide are refused.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/train-lib.sh"

mpi_launcher || skip "$MPI_WHY"

# max_diff A B: the largest |a - b| / (1e-3 + |b|) over two raw fp32 files
max_diff() {
	python3 - "$1" "$2" <<'PY'
import array, sys
a, b = array.array("f"), array.array("f")
a.frombytes(open(sys.argv[1], "rb").read())
b.frombytes(open(sys.argv[2], "rb").read())
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
print(max(abs(x - y) / (1e-3 + abs(y)) for x, y in zip(a, b)))
PY
}

common=("${TINY_VIT[@]}" --global-batch 16 --steps 5 --ceiling-steps 0 --threads 1 -q)
say "DDP on 2 ranks against 1 rank, 5 AdamW steps on the same global batch"
run_rc 0 np1 "${MPI[@]}" -np 1 "$SHARDTRAIN" "${common[@]}" \
    --dump-params "$T/p1.bin" --losses "$T/l1"
run_rc 0 ddp2 "${MPI[@]}" -np 2 "$SHARDTRAIN" "${common[@]}" \
    --strategy ddp --dump-params "$T/ddp2.bin" --losses "$T/l2" \
    --json "$T/ddp2.json"
no_sanitizer_report ddp2
[ "$(jget "$T/ddp2.json" config.world)" = 2 ] || fail "DDP did not run on 2 ranks"
d=$(max_diff "$T/ddp2.bin" "$T/p1.bin")
say "DDP vs 1 rank: max relative difference $d"
python3 -c "import sys; sys.exit(0 if $d <= 2e-4 else 1)" ||
    fail "DDP parameters differ from one rank's by $d"

say "FSDP on 2 ranks against DDP"
run_rc 0 fsdp2 "${MPI[@]}" -np 2 "$SHARDTRAIN" "${common[@]}" \
    --strategy fsdp --dump-params "$T/fsdp2.bin"
no_sanitizer_report fsdp2
d=$(max_diff "$T/fsdp2.bin" "$T/ddp2.bin")
say "FSDP vs DDP: max relative difference $d"
python3 -c "import sys; sys.exit(0 if $d <= 1e-6 else 1)" ||
    fail "FSDP parameters differ from DDP's by $d"
say "FSDP with activation checkpointing: the same parameters as FSDP"
run_rc 0 fsdp2ck "${MPI[@]}" -np 2 "$SHARDTRAIN" "${common[@]}" \
    --strategy fsdp --checkpoint-activations --dump-params "$T/fsdp2ck.bin"
cmp -s "$T/fsdp2ck.bin" "$T/fsdp2.bin" ||
    fail "activation checkpointing changed FSDP's parameters"

say "FSDP memory per rank: parameters + gradients + optimizer fall as 1/N"
deep=(--model vit-ti4 --dim 64 --depth 16 --heads 2 --mlp 128 --image-size 16
    --global-batch 8 --steps 2 --ceiling-steps 0 --threads 1 -q)
for n in 1 2 4; do
	run_rc 0 mem$n "${MPI[@]}" -np $n "$SHARDTRAIN" "${deep[@]}" \
	    --strategy fsdp --json "$T/mem$n.json"
done
python3 - "$T/mem1.json" "$T/mem2.json" "$T/mem4.json" <<'PY' ||
import json, sys
m = [json.load(open(f))["result"]["peak_param_bytes"] / 1048576 for f in sys.argv[1:]]
r2, r4 = m[1] / m[0], m[2] / m[0]
print("peak param+grad+optimizer MiB per rank, N=1,2,4:", m, "ratios", r2, r4)
assert r2 <= 0.62 and r4 <= 0.36, (r2, r4)
PY
    fail "FSDP memory does not fall as 1/N"

say "ranks started with different options are refused"
# shellcheck disable=SC2016
run_rc 2 mismatch "${MPI[@]}" -np 2 sh -c '
	exec "$0" "$@" --seed ${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}' \
    "$SHARDTRAIN" "${common[@]}" --strategy ddp
has mismatch.err "rank 1 was started with a different --seed"

say "a batch that does not divide across ranks"
run_rc 2 divide "${MPI[@]}" -np 2 "$SHARDTRAIN" "${TINY_VIT[@]}" --global-batch 15 \
    --steps 1 --strategy ddp
has divide.err "--global-batch 15 does not divide among 2 ranks"
has divide.err "multiple of 2"
run_rc 2 single2 "${MPI[@]}" -np 2 "$SHARDTRAIN" "${TINY_VIT[@]}" --batch 16 \
    --steps 1 --strategy single
has single2.err "use ddp or fsdp"

say "--batch is per rank: 2 ranks of 4 are a global batch of 8"
run_rc 0 perrank timeout -k 10 120 "${MPI[@]}" -np 2 "$SHARDTRAIN" \
    "${TINY_VIT[@]}" --batch 4 --steps 2 --ceiling-steps 0 --threads 1 -q \
    --json -
python3 - "$T/perrank.out" <<'PY' || fail "--batch 4 on 2 ranks: the JSON"
import json, sys
c = json.load(open(sys.argv[1]))["config"]
assert (c["batch_per_rank"], c["global_batch"], c["world"]) == (4, 8, 2), c
PY
say "a usage error under mpirun: said once, every rank exits"
run_rc 2 both timeout -k 10 120 "${MPI[@]}" -np 2 "$SHARDTRAIN" \
    "${TINY_VIT[@]}" --batch 4 --global-batch 8 --steps 1
[ "$(grep -c 'give one' "$T/both.err")" = 1 ] ||
    { show both; fail "the usage error was not printed exactly once"; }
run_rc 2 bogus2 timeout -k 10 120 "${MPI[@]}" -np 2 "$SHARDTRAIN" --bogus
[ "$(grep -c 'unknown option' "$T/bogus2.err")" = 1 ] ||
    { show bogus2; fail "the usage error was not printed exactly once"; }
run_rc 2 bogus3 timeout -k 10 120 "${MPI[@]}" -np 2 "$SHARDTRAIN" bogus
[ "$(grep -c 'not a command' "$T/bogus3.err")" = 1 ] ||
    { show bogus3; fail "the unknown command was not named exactly once"; }
run_rc 0 help2 timeout -k 10 120 "${MPI[@]}" -np 2 "$SHARDTRAIN" --help
[ "$(grep -c '^usage: shardtrain' "$T/help2.out")" = 1 ] ||
    { show help2; fail "--help was not printed exactly once"; }
echo "PASS: train-ranks"
