#!/usr/bin/env bash
# load-ranks.sh - no sample lost or repeated across ranks: for world sizes
# 1 to 4, "shardload keys" of every rank together deliver every key of the
# data set once, less exactly the drop-last remainder of shardload(1)
# (BATCHES AND THE REMAINDER), every rank the same number of batches;
# --remainder keep delivers every key. The rank and world size come from
# the launcher's environment when not given, and under mpirun each process
# gets the share its --rank/--world run gets.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
need_python tarfile

# 203 samples in 12 shards of 17 (the last 16): no world size or batch
# divides it, and the ranks' runs start and end inside shards.
synth_cifar "$T/c" --train 203 --test 5 --seed 31
mkdir "$T/s"
st pack pack cifar10 "$T/c" -o "$T/s/c-%06d.tar" --max-count 17
M="$T/s/c.json"
[ "$(shards_of "$T/s" | wc -l)" -eq 12 ] || fail "want 12 shards"

B=8
common=(--batch "$B" --image-size 8 --seed 5 --workers 2)
mkdir "$T/k"
for W in 1 2 3 4; do
	say "world $W: keys of every rank (keep, drop, drop with a shuffle)"
	for R in $(seq 0 $((W - 1))); do
		sl "keep.$W.$R" keys "$M" "${common[@]}" --world "$W" --rank "$R" \
		    --remainder keep
		sl "drop.$W.$R" keys "$M" "${common[@]}" --world "$W" --rank "$R"
		sl "shuf.$W.$R" keys "$M" "${common[@]}" --world "$W" --rank "$R" \
		    --remainder drop --shuffle 16
		for v in keep drop shuf; do
			cp "$T/$v.$W.$R.out" "$T/k/$v.$W.$R"
		done
	done
done
say "the keys against the shards (read with tarfile) and the rules"
py check_ranks.py "$M" "$B" "$T/k" 1 2 3 4

# Every rank the same number of batches, counting empty ones, which keys
# does not print: shardload(1)'s example of 33 samples, 2 ranks, batch 16.
say "33 samples, 2 ranks, batch 16: the batch counts and the remainder"
synth_cifar "$T/c33" --train 33 --test 1 --seed 32
mkdir "$T/s33"
st pack33 pack cifar10 "$T/c33" -o "$T/s33/c-%06d.tar" --max-count 10
for R in 0 1; do
	for rem in drop keep; do
		sl b33.$rem.$R bench "$T/s33/c.json" --batch 16 --world 2 \
		    --rank "$R" --remainder "$rem" --image-size 8 --quiet \
		    --json "$T/b33.$rem.$R.json"
	done
done
# rank: drop (batches samples dropped), keep (batches samples)
for want in "0 1 16 0 2 16" "1 1 16 1 2 17"; do
	# shellcheck disable=SC2086
	set -- $want
	got="$1 $(jget "$T/b33.drop.$1.json" result.batches) \
$(jget "$T/b33.drop.$1.json" result.samples) $(jget "$T/b33.drop.$1.json" result.dropped) \
$(jget "$T/b33.keep.$1.json" result.batches) $(jget "$T/b33.keep.$1.json" result.samples)"
	[ "$got" = "$want" ] ||
	    fail "rank $1 of 2 (drop: batches samples dropped, keep: batches samples): got $got, want $want"
	[ "$(jget "$T/b33.keep.$1.json" result.batches_per_epoch)" = 2 ] ||
	    fail "keep: batches_per_epoch is not ceil(ceil(33/2)/16) = 2"
done

say "the rank and world size from the launcher's environment"
for pair in OMPI_COMM_WORLD_RANK:OMPI_COMM_WORLD_SIZE PMI_RANK:PMI_SIZE \
    PMIX_RANK:PMIX_SIZE SLURM_PROCID:SLURM_NTASKS; do
	rv=${pair%:*}
	wv=${pair#*:}
	run_rc 0 "env.$rv" env "$rv=2" "$wv=3" "$SHARDLOAD" keys "$M" \
	    "${common[@]}" --remainder drop --shuffle 16
	no_sanitizer_report "env.$rv"
	cmp -s "$T/env.$rv.out" "$T/k/shuf.3.2" ||
	    fail "$rv=2 $wv=3 did not give rank 2 of 3"
done
# Open MPI's pair comes before Slurm's; an option beats the environment.
run_rc 0 env.both env OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 \
    SLURM_PROCID=3 SLURM_NTASKS=4 "$SHARDLOAD" keys "$M" "${common[@]}" \
    --shuffle 16
cmp -s "$T/env.both.out" "$T/k/shuf.2.1" ||
    fail "with Open MPI's and Slurm's variables set, not Open MPI's rank 1 of 2"
run_rc 0 env.opt env OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=4 \
    "$SHARDLOAD" keys "$M" "${common[@]}" --shuffle 16 --rank 3
cmp -s "$T/env.opt.out" "$T/k/shuf.4.3" ||
    fail "--rank 3 with OMPI_COMM_WORLD_SIZE=4 did not give rank 3 of 4"
run_rc 2 env.bad env OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=2 \
    "$SHARDLOAD" keys "$M" "${common[@]}"
is_sl_usage_error env.bad

if ! mpi_launcher; then
	say "$MPI_WHY: the mpirun part is skipped"
	echo "PASS: load-ranks ($MPI_WHY: without the mpirun part)"
	exit 0
fi
say "mpirun -np 2: each process gets its --rank/--world share"
export SHARDLOAD M T
# shellcheck disable=SC2016
run_rc 0 mpirun timeout 120 "${MPI[@]}" -np 2 sh -c '
	r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-x}}}
	exec "$SHARDLOAD" keys "$M" --batch 8 --image-size 8 --seed 5 \
	    --workers 2 --shuffle 16 >"$T/mpi.$r" 2>"$T/mpi.$r.err"'
for R in 0 1; do
	[ -f "$T/mpi.$R" ] || fail "mpirun: rank $R wrote nothing"
	no_sanitizer_report mpi.$R
	cmp -s "$T/mpi.$R" "$T/k/shuf.2.$R" ||
	    fail "mpirun rank $R differs from --rank $R --world 2"
done
echo "PASS: load-ranks"
