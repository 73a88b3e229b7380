/*
 * comm_nccl.c - collectives on GPU buffers: NCCL between ranks, a copy on
 * the compute stream for a world of one (comm_dev.h). Each rank drives
 * the GPU of its node-local rank (run.c picks it), and NCCL's
 * communicator is bootstrapped by broadcasting rank 0's ncclUniqueId over
 * the MPI communicator.
 *
 * Built only with CUDA. Means are NCCL's ncclAvg. A failure is fatal, like comm_mpi.c's: the
 * message names the call, and the process exits.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_dev.h"
#include "cuda/cuda.h"

#include <cuda_runtime.h>
#ifdef HAVE_NCCL
#include <nccl.h>
#endif

/* The compute stream's events around one wait. */
struct stall {
	cudaEvent_t before, after;
};

struct comm_dev {
	int world;
	cudaStream_t compute, stream;	/* the backend's; NCCL's */
	struct stall *stalls;		/* [0, nstall) recorded, unread;
					 * [nstall, cap) created, free */
	int nstall, cap;
#ifdef HAVE_NCCL
	ncclComm_t nc;
#endif
};

static void
die(const char *call, const char *file, int line, const char *msg)
{
	fprintf(stderr, "shardtrain: %s failed at %s:%d: %s\n", call, file,
	    line, msg);
	comm_die();
}

#define CU(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) \
	die(#x, __FILE__, __LINE__, cudaGetErrorString(e_)); } while (0)
#ifdef HAVE_NCCL
#define NC(x) do { ncclResult_t e_ = (x); if (e_ != ncclSuccess) \
	die(#x, __FILE__, __LINE__, ncclGetErrorString(e_)); } while (0)
#endif

struct comm_dev *
comm_dev_open(struct comm *c, void *stream, char *err, size_t errlen)
{
	struct comm_dev *d;

	if (stream == NULL) {
		snprintf(err, errlen, "GPU collectives: the CUDA backend is "
		    "not open");
		return NULL;
	}
	if ((d = calloc(1, sizeof(*d))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	d->world = comm_world(c);
	d->compute = (cudaStream_t)stream;
	if (d->world == 1)
		return d;
#ifdef HAVE_NCCL
	{
		ncclUniqueId id;
		ncclResult_t nr;

		memset(&id, 0, sizeof(id));
		if (comm_rank(c) == 0 && (nr = ncclGetUniqueId(&id)) !=
		    ncclSuccess) {
			/* every rank must reach the broadcast: send zeros,
			 * and the init below fails on all of them */
			fprintf(stderr, "shardtrain: ncclGetUniqueId: %s\n",
			    ncclGetErrorString(nr));
		}
		comm_bcast(c, &id, sizeof(id), 0);
		if ((nr = ncclCommInitRank(&d->nc, d->world, id,
		    comm_rank(c))) != ncclSuccess) {
			snprintf(err, errlen, "NCCL: rank %d of %d: %s",
			    comm_rank(c), d->world, ncclGetErrorString(nr));
			free(d);
			return NULL;
		}
	}
	CU(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking));
	/* a block NCCL still reads is not handed out again */
	cuda_set_comm_stream(d->stream);
	return d;
#else
	snprintf(err, errlen, "--backend cuda over %d ranks needs NCCL, and "
	    "this shardtrain was built without it (see ./configure's "
	    "summary)", d->world);
	free(d);
	return NULL;
#endif
}

void
comm_dev_close(struct comm_dev *d)
{
	int i;

	if (d == NULL)
		return;
	for (i = 0; i < d->cap; i++) {
		CU(cudaEventDestroy(d->stalls[i].before));
		CU(cudaEventDestroy(d->stalls[i].after));
	}
	free(d->stalls);
#ifdef HAVE_NCCL
	if (d->world > 1) {
		CU(cudaStreamSynchronize(d->stream));
		cuda_set_comm_stream(NULL);
		NC(ncclCommDestroy(d->nc));
		CU(cudaStreamDestroy(d->stream));
	}
#endif
	free(d);
}

#ifdef HAVE_NCCL
/* NCCL's stream waits for what the compute stream has queued so far. */
static void
after_compute(struct comm_dev *d)
{
	cudaEvent_t ev;

	CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
	CU(cudaEventRecord(ev, d->compute));
	CU(cudaStreamWaitEvent(d->stream, ev, 0));
	CU(cudaEventDestroy(ev));
}

static void *
done_event(struct comm_dev *d)
{
	cudaEvent_t ev;

	CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
	CU(cudaEventRecord(ev, d->stream));
	return ev;
}
#endif

void *
comm_dev_allreduce_mean(struct comm_dev *d, float *buf, size_t n)
{
	if (d->world == 1 || n == 0)
		return NULL;
#ifdef HAVE_NCCL
	after_compute(d);
	NC(ncclAllReduce(buf, buf, n, ncclFloat, ncclAvg, d->nc, d->stream));
	return done_event(d);
#else
	(void)buf;
	return NULL;
#endif
}

void *
comm_dev_allgather(struct comm_dev *d, float *full, const float *shard,
    size_t n)
{
	if (n == 0)
		return NULL;
	if (d->world == 1) {
		comm_dev_copy(d, full, shard, n);
		return NULL;
	}
#ifdef HAVE_NCCL
	after_compute(d);
	NC(ncclAllGather(shard, full, n, ncclFloat, d->nc, d->stream));
	return done_event(d);
#else
	return NULL;
#endif
}

void *
comm_dev_reduce_scatter_mean(struct comm_dev *d, float *shard,
    const float *full, size_t n)
{
	if (n == 0)
		return NULL;
	if (d->world == 1) {
		comm_dev_copy(d, shard, full, n);
		return NULL;
	}
#ifdef HAVE_NCCL
	after_compute(d);
	NC(ncclReduceScatter(full, shard, n, ncclFloat, ncclAvg, d->nc,
	    d->stream));
	return done_event(d);
#else
	return NULL;
#endif
}

void
comm_dev_copy(struct comm_dev *d, float *dst, const float *src, size_t n)
{
	if (n > 0 && dst != src)
		CU(cudaMemcpyAsync(dst, src, n * sizeof(float),
		    cudaMemcpyDeviceToDevice, d->compute));
}

void
comm_dev_wait(struct comm_dev *d, void *ev)
{
	struct stall *st;

	if (ev == NULL)
		return;
	if (d->nstall == d->cap) {
		int cap = d->cap ? 2 * d->cap : 64, i;
		struct stall *p = realloc(d->stalls, (size_t)cap * sizeof(*p));

		if (p == NULL)
			die("comm_dev_wait", __FILE__, __LINE__,
			    "out of memory for timing events");
		for (i = d->cap; i < cap; i++) {
			CU(cudaEventCreate(&p[i].before));
			CU(cudaEventCreate(&p[i].after));
		}
		d->stalls = p;
		d->cap = cap;
	}
	st = &d->stalls[d->nstall++];
	CU(cudaEventRecord(st->before, d->compute));
	CU(cudaStreamWaitEvent(d->compute, (cudaEvent_t)ev, 0));
	CU(cudaEventRecord(st->after, d->compute));
	/* released once it fires */
	CU(cudaEventDestroy((cudaEvent_t)ev));
}

double
comm_dev_stall_seconds(struct comm_dev *d)
{
	double s = 0;
	float ms;
	int i;

	for (i = 0; i < d->nstall; i++) {
		CU(cudaEventSynchronize(d->stalls[i].after));
		CU(cudaEventElapsedTime(&ms, d->stalls[i].before,
		    d->stalls[i].after));
		s += ms / 1e3;
	}
	d->nstall = 0;
	return s;
}

int
comm_dev_test(struct comm_dev *d, void *ev)
{
	cudaError_t e;

	(void)d;
	if (ev == NULL)
		return 1;
	e = cudaEventQuery((cudaEvent_t)ev);
	if (e == cudaErrorNotReady)
		return 0;
	CU(e);
	return 1;
}
