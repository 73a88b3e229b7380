/*
 * comm.h - collectives between ranks, as the strategies need them. Buffers
 * are the backend's device pointers: comm_mpi.c serves the CPU backend (and
 * a single process without MPI); after comm_use_device(), comm_nccl.c
 * serves the CUDA backend through the same calls, bootstrapped by
 * broadcasting its unique id with comm_bcast.
 *
 * Asynchronous calls return a request; comm_wait() completes it and
 * comm_test() lets the library progress it (call it between layers so
 * communication overlaps compute). A request is freed by comm_wait.
 * Failures are fatal: the message names the call, file and line, and all
 * ranks stop (MPI_Abort).
 */
#ifndef SK_TRAIN_COMM_H
#define SK_TRAIN_COMM_H

#include <stddef.h>

struct comm;
struct comm_req;

/* Start: MPI when launched by mpirun/srun, otherwise a single rank.
 * Returns NULL with a message in err on failure. */
struct comm *comm_open(int *argc, char ***argv, char *err, size_t errlen);
void comm_close(struct comm *c);
int comm_rank(const struct comm *c);
int comm_world(const struct comm *c);
const char *comm_name(const struct comm *c);	/* "mpi", "self" */

/*
 * From now on the float collectives take GPU buffers: NCCL between ranks
 * (bootstrapped here; every rank calls it), a copy on stream for a world
 * of one. stream is the CUDA backend's compute stream (cuda_stream()).
 * 0, or -1 with a message in err.
 */
int comm_use_device(struct comm *c, void *stream, char *err, size_t errlen);

/* In place: buf (n) = mean over ranks. */
struct comm_req *comm_allreduce_mean(struct comm *c, float *buf, size_t n);
/* full (world*n) = concatenation of every rank's shard (n). */
struct comm_req *comm_allgather(struct comm *c, float *full,
    const float *shard, size_t n);
/* shard (n) = mean over ranks of full[rank*n .. rank*n+n). */
struct comm_req *comm_reduce_scatter_mean(struct comm *c, float *shard,
    const float *full, size_t n);
/* NULL is a no-op. On GPU buffers it orders the compute stream after the
 * collective and returns at once: see comm_stall_seconds. */
void comm_wait(struct comm *c, struct comm_req *r);
/* Nonzero when r has completed (comm_wait must still free it). */
int comm_test(struct comm *c, struct comm_req *r);
/* On GPU buffers: the seconds the compute stream stood waiting for
 * collectives at comm_wait()s since the last call (waiting on the host
 * until it has passed them). 0 otherwise: a host wait is the caller's to
 * time. */
double comm_stall_seconds(struct comm *c);

/* After a fatal error, the message printed: stop every rank (MPI_Abort
 * when MPI runs, else exit(1)). Does not return. */
void comm_die(void) __attribute__((noreturn));

/* Blocking helpers. */
void comm_sum_double(struct comm *c, double *v, int n);	/* in place */
void comm_max_double(struct comm *c, double *v, int n);
void comm_bcast(struct comm *c, void *buf, size_t bytes, int root);
void comm_barrier(struct comm *c);
/* Rank of the first rank whose bytes differ from rank 0's, or -1. */
int comm_first_mismatch(struct comm *c, const void *buf, size_t bytes);

#endif /* SK_TRAIN_COMM_H */
