#!/usr/bin/env bash
# train-comm.sh - shardtrain's collectives and strategies across ranks:
# tests/train/comm_check alone (the single-rank communicator), then under
# mpirun with 1, 2 and 3 ranks, with 3 ranks splitting every MPI call into
# chunks of 64 floats as a call past INT_MAX elements is split, and a
# failing MPI call, which must stop every rank and name itself.
set -eu
. "$top_srcdir/tests/cli/lib.sh"

CHECK="$top_builddir/tests/train/comm_check"
[ -x "$CHECK" ] || fail "$CHECK is not built (make check builds it)"

# cc_run WANT TAG CMD...: run_rc, and no sanitizer report on stderr.
cc_run() {
	run_rc "$1" "$2" "${@:3}"
	no_sanitizer_report "$2"
}

say "alone: a world of one, no MPI"
cc_run 0 self "$CHECK"
has self.out "comm_check: ok (self, 1 ranks)"

if ! grep -q '^#define HAVE_MPI 1' "$top_builddir/config.h"; then
	say "built without MPI: a launcher's world of 2 is refused"
	cc_run 1 nompi env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 \
	    "$CHECK"
	has nompi.out "built without MPI"
	echo "PASS: train-comm (built without MPI)"
	exit 0
fi
if ! mpi_launcher; then
	say "$MPI_WHY: the mpirun part is skipped"
	echo "PASS: train-comm ($MPI_WHY: without the mpirun part)"
	exit 0
fi

for n in 1 2 3; do
	say "mpirun -np $n"
	cc_run 0 "np$n" timeout 120 "${MPI[@]}" -np "$n" "$CHECK"
	has "np$n.out" "comm_check: ok (mpi, $n ranks)"
done

say "mpirun -np 3, every call split into chunks of 64 floats"
cc_run 0 chunks timeout 120 "${MPI[@]}" -np 3 "$CHECK" --max-count 64
has chunks.out "comm_check: ok (mpi, 3 ranks)"

say "mpirun -np 2, a broadcast from rank 2: every rank stops, named"
cc_run nz badroot timeout 120 "${MPI[@]}" -np 2 "$CHECK" --bad-root
has badroot.err "shardtrain: MPI_Bcast failed at "
has badroot.err "comm_mpi.c:"
hasnt badroot.out "returned"
echo "PASS: train-comm"
