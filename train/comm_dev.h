/*
 * comm_dev.h - the collectives on GPU buffers (comm_nccl.c), behind
 * comm.h's calls once comm_use_device() has switched a communicator to
 * them. Internal to comm_mpi.c and comm_nccl.c.
 *
 * NCCL runs on its own stream. A collective first waits (on the GPU) for
 * the work queued on the compute stream so far, so it reads finished
 * gradients, and returns an event; comm_dev_wait() makes the compute
 * stream wait for that event, without blocking the host, which goes on
 * queueing work. The time the compute stream stands still at such a wait
 * is the communication compute did not hide: two timing events around
 * each wait measure it, and comm_dev_stall_seconds() adds them up.
 */
#ifndef SK_TRAIN_COMM_DEV_H
#define SK_TRAIN_COMM_DEV_H

#include <stddef.h>

#include "comm.h"

struct comm_dev;

/* Bootstrap NCCL over c (rank 0's unique id broadcast with comm_bcast)
 * for world > 1; for a world of one only the copies are set up. stream is
 * the backend's compute stream. NULL with a message in err. */
struct comm_dev *comm_dev_open(struct comm *c, void *stream, char *err,
    size_t errlen);
void comm_dev_close(struct comm_dev *d);

/* Each returns an event to pass to comm_dev_wait or comm_dev_test, or
 * NULL when the work was queued on the compute stream itself. */
void *comm_dev_allreduce_mean(struct comm_dev *d, float *buf, size_t n);
void *comm_dev_allgather(struct comm_dev *d, float *full, const float *shard,
    size_t n);
void *comm_dev_reduce_scatter_mean(struct comm_dev *d, float *shard,
    const float *full, size_t n);
/* dst = src (n floats) on the compute stream: a world of one. */
void comm_dev_copy(struct comm_dev *d, float *dst, const float *src,
    size_t n);
void comm_dev_wait(struct comm_dev *d, void *ev);	/* frees ev */
int comm_dev_test(struct comm_dev *d, void *ev);
/* Seconds the compute stream stood at comm_dev_wait()s since the last
 * call; waits on the host until the compute stream has passed them. */
double comm_dev_stall_seconds(struct comm_dev *d);

#endif /* SK_TRAIN_COMM_DEV_H */
