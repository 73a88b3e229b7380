/*
 * comm_mpi.c - the collectives over MPI when the process was started by a
 * launcher (mpirun, srun), and over a single rank otherwise, where every
 * collective is a local copy. Only the main thread calls MPI
 * (MPI_THREAD_FUNNELED); the kernels' OpenMP threads never do.
 *
 * MPI counts are ints: a call over more than INT_MAX elements is split
 * into chunks, per root where the layout is per rank (allgather becomes
 * one broadcast per rank, reduce-scatter one reduce per rank).
 * SHARDTRAIN_COMM_MAX_COUNT lowers the chunk size so the tests can reach
 * those paths with small buffers.
 */
#include "config.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_MPI
#include <mpi.h>
#endif

#include "comm.h"
#ifdef HAVE_CUDA
#include "comm_dev.h"
#endif

struct comm {
	int rank, world;
	int mpi;			/* the collectives go through MPI */
	int inited;			/* we called MPI_Init: finalize at close */
	size_t max_count;		/* elements per MPI call */
#ifdef HAVE_MPI
	MPI_Comm w;			/* a duplicate of MPI_COMM_WORLD */
#endif
#ifdef HAVE_CUDA
	struct comm_dev *dev;		/* float collectives on the GPU */
#endif
};

/* An operation in flight: its MPI requests, and the buffer to scale by
 * 1/world once they complete (the mean of a sum). */
struct comm_req {
#ifdef HAVE_MPI
	MPI_Request *rq;
#endif
	int nrq;
	float *scale;
	size_t nscale;
	void *ev;			/* a GPU collective's event */
};

/* FNV-1a 64 over the bytes: enough to tell copies apart, not an adversary. */
static uint64_t
fnv1a64(const void *buf, size_t n)
{
	const unsigned char *p = buf;
	uint64_t h = 0xcbf29ce484222325ULL;
	size_t i;

	for (i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static void
scale_floats(float *x, size_t n, float s)
{
	size_t i;

	for (i = 0; i < n; i++)
		x[i] *= s;
}

/* ------------------------------------------------------------------------ */
/* MPI                                                                      */

#ifdef HAVE_MPI

/* Every MPI call goes through this: the communicator returns errors
 * (MPI_ERRORS_RETURN), and any error stops every rank. */
#define MPI_CHECK(call) mpi_check((call), #call, __FILE__, __LINE__)

static void
mpi_check(int rc, const char *call, const char *file, int line)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0, n;

	if (rc == MPI_SUCCESS)
		return;
	if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
		len = snprintf(msg, sizeof(msg), "error %d", rc);
	msg[len < 0 ? 0 : len] = '\0';
	n = (int)strcspn(call, "(");
	fprintf(stderr, "shardtrain: %.*s failed at %s:%d: %s\n", n, call,
	    file, line, msg);
	fflush(stderr);
	MPI_Abort(MPI_COMM_WORLD, 1);
	exit(1);
}

static void
die_oom(const char *what)
{
	fprintf(stderr, "shardtrain: out of memory for %s\n", what);
	fflush(stderr);
	MPI_Abort(MPI_COMM_WORLD, 1);
	exit(1);
}

static struct comm_req *
req_new(int nrq, float *scale, size_t nscale)
{
	struct comm_req *r;

	if ((r = calloc(1, sizeof(*r))) == NULL ||
	    (r->rq = malloc((size_t)nrq * sizeof(*r->rq))) == NULL)
		die_oom("a communication request");
	r->nrq = nrq;
	r->scale = scale;
	r->nscale = nscale;
	return r;
}

static size_t
nchunks(const struct comm *c, size_t n)
{
	return n == 0 ? 0 : (n + c->max_count - 1) / c->max_count;
}

static int
chunk_count(const struct comm *c, size_t n, size_t k)
{
	size_t left = n - k * c->max_count;

	return (int)(left < c->max_count ? left : c->max_count);
}

static struct comm_req *
mpi_allreduce_mean(struct comm *c, float *buf, size_t n)
{
	size_t k, nk = nchunks(c, n);
	struct comm_req *r = req_new((int)nk, buf, n);

	for (k = 0; k < nk; k++)
		MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf + k * c->max_count,
		    chunk_count(c, n, k), MPI_FLOAT, MPI_SUM, c->w,
		    &r->rq[k]));
	return r;
}

static struct comm_req *
mpi_allgather(struct comm *c, float *full, const float *shard, size_t n)
{
	struct comm_req *r;
	size_t k, nk = nchunks(c, n);
	const void *send;
	int root, i = 0;

	if (nk == 1) {
		r = req_new(1, NULL, 0);
		send = shard == full + (size_t)c->rank * n ? MPI_IN_PLACE :
		    (const void *)shard;
		MPI_CHECK(MPI_Iallgather(send, (int)n, MPI_FLOAT, full, (int)n,
		    MPI_FLOAT, c->w, &r->rq[0]));
		return r;
	}
	/* Too large for one count: each rank broadcasts its shard, chunk by
	 * chunk, into its place in full. */
	r = req_new((int)(nk * (size_t)c->world), NULL, 0);
	memmove(full + (size_t)c->rank * n, shard, n * sizeof(float));
	for (root = 0; root < c->world; root++)
		for (k = 0; k < nk; k++)
			MPI_CHECK(MPI_Ibcast(full + (size_t)root * n +
			    k * c->max_count, chunk_count(c, n, k), MPI_FLOAT,
			    root, c->w, &r->rq[i++]));
	return r;
}

static struct comm_req *
mpi_reduce_scatter_mean(struct comm *c, float *shard, const float *full,
    size_t n)
{
	struct comm_req *r;
	size_t k, nk = nchunks(c, n);
	int root, i = 0;

	if (nk == 1) {
		r = req_new(1, shard, n);
		MPI_CHECK(MPI_Ireduce_scatter_block(full, shard, (int)n,
		    MPI_FLOAT, MPI_SUM, c->w, &r->rq[0]));
		return r;
	}
	/* Too large for one count: one reduce per rank's part, chunked. */
	r = req_new((int)(nk * (size_t)c->world), shard, n);
	for (root = 0; root < c->world; root++)
		for (k = 0; k < nk; k++)
			MPI_CHECK(MPI_Ireduce(full + (size_t)root * n +
			    k * c->max_count, root == c->rank ?
			    shard + k * c->max_count : NULL,
			    chunk_count(c, n, k), MPI_FLOAT, MPI_SUM, root,
			    c->w, &r->rq[i++]));
	return r;
}

/* The launchers we know leave these in every process they start. */
static int
launched(void)
{
	static const char *vars[] = {
		"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
		"SLURM_NTASKS", "SLURM_PROCID",
	};
	size_t i;

	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		if (getenv(vars[i]) != NULL)
			return 1;
	return 0;
}

static int
mpi_open(struct comm *c, int *argc, char ***argv, char *err, size_t errlen)
{
	int on = 0, provided;

	MPI_Initialized(&on);
	if (!on) {
		if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED,
		    &provided) != MPI_SUCCESS) {
			snprintf(err, errlen, "MPI_Init_thread failed");
			return -1;
		}
		c->inited = 1;
	}
	MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
	/* Our own communicator, so no other user of MPI_COMM_WORLD can
	 * match our collectives. The error handler is inherited. */
	MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->w));
	MPI_CHECK(MPI_Comm_rank(c->w, &c->rank));
	MPI_CHECK(MPI_Comm_size(c->w, &c->world));
	c->mpi = 1;
	return 0;
}

#endif /* HAVE_MPI */

/* ------------------------------------------------------------------------ */
/* open and close                                                           */

#ifndef HAVE_MPI
/* The world size a launcher announced, or 1. */
static int
launcher_world(void)
{
	static const char *vars[] = {
		"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS",
	};
	const char *v;
	size_t i;

	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		if ((v = getenv(vars[i])) != NULL && atoi(v) > 1)
			return atoi(v);
	return 1;
}
#endif

struct comm *
comm_open(int *argc, char ***argv, char *err, size_t errlen)
{
	struct comm *c;
	const char *v;

	if ((c = calloc(1, sizeof(*c))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	c->world = 1;
	c->max_count = INT_MAX;
	if ((v = getenv("SHARDTRAIN_COMM_MAX_COUNT")) != NULL &&
	    strtoul(v, NULL, 10) > 0 && strtoul(v, NULL, 10) < INT_MAX)
		c->max_count = strtoul(v, NULL, 10);
#ifdef HAVE_MPI
	if (launched() && mpi_open(c, argc, argv, err, errlen) != 0) {
		free(c);
		return NULL;
	}
#else
	if (launcher_world() > 1) {
		snprintf(err, errlen, "started as one of %d ranks, but built "
		    "without MPI: every rank would train alone (install an MPI "
		    "and configure again)", launcher_world());
		free(c);
		return NULL;
	}
#endif
	return c;
}

void
comm_close(struct comm *c)
{
	if (c == NULL)
		return;
#ifdef HAVE_CUDA
	comm_dev_close(c->dev);
#endif
#ifdef HAVE_MPI
	if (c->mpi) {
		MPI_CHECK(MPI_Comm_free(&c->w));
		if (c->inited)
			MPI_Finalize();
	}
#endif
	free(c);
}

int
comm_rank(const struct comm *c)
{
	return c->rank;
}

int
comm_world(const struct comm *c)
{
	return c->world;
}

const char *
comm_name(const struct comm *c)
{
	return c->mpi ? "mpi" : "self";
}

/* ------------------------------------------------------------------------ */
/* asynchronous collectives                                                 */

/* A world of one needs no MPI: each collective is at most a copy, done
 * now, and the request is NULL. */

#ifdef HAVE_CUDA
/* A GPU collective's request: its event alone. */
static struct comm_req *
dev_req(void *ev)
{
	struct comm_req *r;

	if (ev == NULL)
		return NULL;
	if ((r = calloc(1, sizeof(*r))) == NULL) {
		fprintf(stderr, "shardtrain: out of memory for a communication "
		    "request\n");
		exit(1);
	}
	r->ev = ev;
	return r;
}

int
comm_use_device(struct comm *c, void *stream, char *err, size_t errlen)
{
	if (c->dev != NULL)
		return 0;
	c->dev = comm_dev_open(c, stream, err, errlen);
	return c->dev != NULL ? 0 : -1;
}
#else
int
comm_use_device(struct comm *c, void *stream, char *err, size_t errlen)
{
	(void)c;
	(void)stream;
	snprintf(err, errlen, "GPU collectives: built without CUDA");
	return -1;
}
#endif

struct comm_req *
comm_allreduce_mean(struct comm *c, float *buf, size_t n)
{
	if (c->world == 1 || n == 0)
		return NULL;
#ifdef HAVE_CUDA
	if (c->dev != NULL)
		return dev_req(comm_dev_allreduce_mean(c->dev, buf, n));
#endif
#ifdef HAVE_MPI
	return mpi_allreduce_mean(c, buf, n);
#else
	return NULL;
#endif
}

struct comm_req *
comm_allgather(struct comm *c, float *full, const float *shard, size_t n)
{
	if (n == 0)
		return NULL;
#ifdef HAVE_CUDA
	if (c->dev != NULL)
		return dev_req(comm_dev_allgather(c->dev, full, shard, n));
#endif
	if (c->world == 1) {
		if (full != shard)
			memmove(full, shard, n * sizeof(float));
		return NULL;
	}
#ifdef HAVE_MPI
	return mpi_allgather(c, full, shard, n);
#else
	return NULL;
#endif
}

struct comm_req *
comm_reduce_scatter_mean(struct comm *c, float *shard, const float *full,
    size_t n)
{
	if (n == 0)
		return NULL;
#ifdef HAVE_CUDA
	if (c->dev != NULL)
		return dev_req(comm_dev_reduce_scatter_mean(c->dev, shard,
		    full, n));
#endif
	if (c->world == 1) {
		if (full != shard)
			memmove(shard, full, n * sizeof(float));
		return NULL;
	}
#ifdef HAVE_MPI
	return mpi_reduce_scatter_mean(c, shard, full, n);
#else
	return NULL;
#endif
}

void
comm_wait(struct comm *c, struct comm_req *r)
{
	if (r == NULL)
		return;
#ifdef HAVE_CUDA
	if (r->ev != NULL) {
		comm_dev_wait(c->dev, r->ev);
		free(r);
		return;
	}
#endif
#ifdef HAVE_MPI
	MPI_CHECK(MPI_Waitall(r->nrq, r->rq, MPI_STATUSES_IGNORE));
	free(r->rq);
#endif
	if (r->scale != NULL)
		scale_floats(r->scale, r->nscale, 1.0f / (float)c->world);
	free(r);
}

double
comm_stall_seconds(struct comm *c)
{
#ifdef HAVE_CUDA
	if (c->dev != NULL)
		return comm_dev_stall_seconds(c->dev);
#endif
	(void)c;
	return 0;
}

int
comm_test(struct comm *c, struct comm_req *r)
{
	int done = 1;

	if (r == NULL)
		return 1;
#ifdef HAVE_CUDA
	if (r->ev != NULL)
		return comm_dev_test(c->dev, r->ev);
#endif
#ifdef HAVE_MPI
	MPI_CHECK(MPI_Testall(r->nrq, r->rq, &done, MPI_STATUSES_IGNORE));
#endif
	return done;
}

void
comm_die(void)
{
	fflush(stderr);
#ifdef HAVE_MPI
	{
		int up = 0, down = 0;

		if (MPI_Initialized(&up) == MPI_SUCCESS && up &&
		    MPI_Finalized(&down) == MPI_SUCCESS && !down)
			MPI_Abort(MPI_COMM_WORLD, 1);
	}
#endif
	exit(1);
}

/* ------------------------------------------------------------------------ */
/* blocking helpers                                                         */

void
comm_sum_double(struct comm *c, double *v, int n)
{
#ifdef HAVE_MPI
	if (c->mpi && c->world > 1 && n > 0)
		MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM,
		    c->w));
#endif
}

void
comm_max_double(struct comm *c, double *v, int n)
{
#ifdef HAVE_MPI
	if (c->mpi && c->world > 1 && n > 0)
		MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX,
		    c->w));
#endif
}

void
comm_bcast(struct comm *c, void *buf, size_t bytes, int root)
{
#ifdef HAVE_MPI
	size_t k, nk;

	if (!c->mpi || c->world == 1)
		return;
	for (k = 0, nk = nchunks(c, bytes); k < nk; k++)
		MPI_CHECK(MPI_Bcast((char *)buf + k * c->max_count,
		    chunk_count(c, bytes, k), MPI_BYTE, root, c->w));
#endif
}

void
comm_barrier(struct comm *c)
{
#ifdef HAVE_MPI
	if (c->mpi && c->world > 1)
		MPI_CHECK(MPI_Barrier(c->w));
#endif
}

int
comm_first_mismatch(struct comm *c, const void *buf, size_t bytes)
{
	uint64_t mine[2] = { fnv1a64(buf, bytes), bytes };
	int bad = -1;

	if (c->world == 1)
		return -1;
#ifdef HAVE_MPI
	uint64_t *all;
	int r;

	if ((all = malloc(2 * sizeof(uint64_t) * (size_t)c->world)) == NULL)
		die_oom("comparing ranks");
	MPI_CHECK(MPI_Allgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T,
	    c->w));
	for (r = 1; r < c->world && bad < 0; r++)
		if (all[2 * r] != all[0] || all[2 * r + 1] != all[1])
			bad = r;
	free(all);
#else
	(void)mine;
#endif
	return bad;
}
