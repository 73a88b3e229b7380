/*
 * strategy.c - single, DDP and FSDP (ZeRO-3): where the flat parameter
 * vector and its gradients live on each rank, and the hooks that gather,
 * free and reduce them around each block while the model runs.
 *
 * The hooks' contract (model.h): forward calls pre_forward(b) and
 * post_forward(b) for b = 0..nblocks-1; backward calls pre_backward(b)
 * and post_backward(b) for b = nblocks-1..0, and with activation
 * checkpointing recomputes block b's forward between the two, so block b's
 * parameters stay resident from pre_backward(b) to post_backward(b). One
 * backward per step: DDP averages the gradient buffer in place and FSDP
 * overwrites the gradient shards, so a second backward before
 * strategy_begin_step would not accumulate.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strategy.h"

#define DEFAULT_BUCKET_BYTES	((size_t)25 << 20)	/* PyTorch DDP's */
#define MAX_RS_INFLIGHT		2	/* FSDP gradient buffers being reduced */

/* DDP: a run of blocks, a contiguous range of the flat vector. Backward
 * finishes its highest block first, so the bucket is ready at
 * post_backward(lo). */
struct bucket {
	int lo;
	size_t off, n;			/* floats */
	int issued;
	struct comm_req *req;
};

/* FSDP: one block's shard. The rank holds s floats of the block's params
 * and grads: floats rank*s .. rank*s+s of the block's region, of which
 * nreal are real and the rest zero padding up to world*s. */
struct shard {
	size_t s, nreal;
	float *p, *g;			/* (s) */
	float *full;			/* gathered params (world*s), or NULL */
	struct comm_req *gather;	/* in flight into full, or NULL */
	float *gfull;			/* full grads (world*s) during backward */
	struct comm_req *rs;		/* reduce-scatter of gfull into g */
};

struct strategy {
	enum strategy_kind kind;
	struct model *m;
	struct comm *c;
	const struct backend *be;
	int rank, world;
	struct step_hooks hooks;
	struct strategy_view view;

	/* single, DDP: the whole vector */
	float *params, *grads;		/* (nflat) */
	struct bucket *buckets;		/* in the order backward fills them */
	int nbuckets;
	int *bucket_of;			/* (nblocks) */

	/* FSDP */
	struct shard *sh;		/* (nblocks) */
	int *rsq;			/* blocks reducing, oldest first */
	int nrsq;
	size_t max_s;

	double comm_s;			/* waited this step */
	size_t bytes, peak;		/* params + grads held */
};

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Every wait is exposed communication: compute could not go on. On GPU
 * buffers the host does not wait; comm_stall_seconds() then measures how
 * long the GPU did (strategy_comm_so_far, strategy_end_backward). */
static void
wait_timed(struct strategy *s, struct comm_req *r)
{
	double t0;

	if (r == NULL)
		return;
	t0 = now();
	comm_wait(s->c, r);
	s->comm_s += now() - t0;
}

/* ------------------------------------------------------------------------ */
/* accounted memory                                                         */

static float *
falloc(struct strategy *s, size_t n)
{
	float *p;

	if ((p = s->be->alloc(n * sizeof(float))) == NULL)
		return NULL;
	s->bytes += n * sizeof(float);
	if (s->bytes > s->peak)
		s->peak = s->bytes;
	return p;
}

static void
ffree(struct strategy *s, float *p, size_t n)
{
	if (p == NULL)
		return;
	s->be->free(p);
	s->bytes -= n * sizeof(float);
}

/* In a hook there is no way to return an error: stop, and say what to try. */
static float *
falloc_or_die(struct strategy *s, size_t n, const char *what, int b)
{
	float *p;

	if ((p = falloc(s, n)) == NULL) {
		fprintf(stderr, "shardtrain: out of memory for the %s of block "
		    "%s (%.1f MiB): try --checkpoint-activations or a smaller "
		    "--batch\n", what, s->m->blocks[b].name,
		    (double)n * sizeof(float) / (1 << 20));
		exit(1);
	}
	return p;
}

/* ------------------------------------------------------------------------ */
/* DDP                                                                      */

static void
ddp_issue(struct strategy *s, int k)
{
	struct bucket *bk = &s->buckets[k];

	if (bk->issued)
		return;
	bk->issued = 1;
	bk->req = comm_allreduce_mean(s->c, s->grads + bk->off, bk->n);
}

/* MPI progresses nonblocking collectives only inside MPI calls. */
static void
ddp_progress(struct strategy *s)
{
	int k;

	for (k = 0; k < s->nbuckets; k++)
		if (s->buckets[k].req != NULL)
			comm_test(s->c, s->buckets[k].req);
}

/* Complete the step's reductions; with issue, start those the hooks did
 * not, in bucket order, the same on every rank. Closing only waits: a
 * rank that closes must not start a collective the others never join. */
static void
ddp_finish(struct strategy *s, int issue)
{
	int k;

	for (k = 0; k < s->nbuckets && issue; k++)
		ddp_issue(s, k);
	for (k = 0; k < s->nbuckets; k++) {
		wait_timed(s, s->buckets[k].req);
		s->buckets[k].req = NULL;
		s->buckets[k].issued = 0;
	}
}

static int
ddp_buckets(struct strategy *s, size_t bucket_bytes)
{
	const struct model *m = s->m;
	struct bucket *bk = NULL;
	int b;

	if (bucket_bytes == 0)
		bucket_bytes = DEFAULT_BUCKET_BYTES;
	s->buckets = calloc((size_t)m->nblocks, sizeof(*s->buckets));
	s->bucket_of = calloc((size_t)m->nblocks, sizeof(*s->bucket_of));
	if (s->buckets == NULL || s->bucket_of == NULL)
		return -1;
	for (b = m->nblocks - 1; b >= 0; b--) {
		if (bk == NULL)
			bk = &s->buckets[s->nbuckets];
		bk->lo = b;
		bk->n += m->blocks[b].numel;
		s->bucket_of[b] = s->nbuckets;
		if (bk->n * sizeof(float) >= bucket_bytes || b == 0) {
			bk->off = m->blocks[b].off;
			s->nbuckets++;
			bk = NULL;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* FSDP                                                                     */

/* Start gathering block b's parameters, unless they are there or coming. */
static void
fsdp_gather(struct strategy *s, int b)
{
	struct shard *h;

	if (b < 0 || b >= s->m->nblocks)
		return;
	h = &s->sh[b];
	if (h->full != NULL || h->s == 0)
		return;
	h->full = falloc_or_die(s, (size_t)s->world * h->s, "parameters", b);
	h->gather = comm_allgather(s->c, h->full, h->p, h->s);
}

/* Block b's parameters gathered and in place for the model. */
static void
fsdp_ready(struct strategy *s, int b)
{
	struct shard *h = &s->sh[b];

	fsdp_gather(s, b);
	wait_timed(s, h->gather);
	h->gather = NULL;
	s->m->bparams[b] = h->full;
}

static void
fsdp_release(struct strategy *s, int b)
{
	struct shard *h = &s->sh[b];

	if (h->full == NULL)
		return;
	/* A gather still writing into the buffer must land first. */
	wait_timed(s, h->gather);
	h->gather = NULL;
	ffree(s, h->full, (size_t)s->world * h->s);
	h->full = NULL;
	s->m->bparams[b] = NULL;
}

/* The reduce-scatter of the i-th block in the queue is done: free its
 * full gradients. */
static void
fsdp_retire(struct strategy *s, int i)
{
	struct shard *h = &s->sh[s->rsq[i]];

	wait_timed(s, h->rs);
	h->rs = NULL;
	ffree(s, h->gfull, (size_t)s->world * h->s);
	h->gfull = NULL;
	s->nrsq--;
	memmove(&s->rsq[i], &s->rsq[i + 1], (size_t)(s->nrsq - i) *
	    sizeof(*s->rsq));
}

static void
fsdp_progress(struct strategy *s, int b)
{
	int i;

	for (i = 0; i < s->nrsq; )
		if (comm_test(s->c, s->sh[s->rsq[i]].rs))
			fsdp_retire(s, i);
		else
			i++;
	if (b > 0 && s->sh[b - 1].gather != NULL)
		comm_test(s->c, s->sh[b - 1].gather);
	if (b + 1 < s->m->nblocks && s->sh[b + 1].gather != NULL)
		comm_test(s->c, s->sh[b + 1].gather);
}

static void
fsdp_finish(struct strategy *s)
{
	int b;

	while (s->nrsq > 0)
		fsdp_retire(s, 0);
	for (b = 0; b < s->m->nblocks; b++)
		fsdp_release(s, b);
}

/* ------------------------------------------------------------------------ */
/* hooks                                                                    */

static void
hook_pre_forward(void *ctx, int b)
{
	struct strategy *s = ctx;
	int i;

	if (s->kind != STRATEGY_FSDP)
		return;
	/* A forward without a backward (evaluation) leaves its last block
	 * gathered: drop whatever an earlier pass left. */
	if (b == 0)
		for (i = 0; i < s->m->nblocks; i++)
			fsdp_release(s, i);
	fsdp_ready(s, b);
	fsdp_gather(s, b + 1);
	fsdp_progress(s, b);
}

static void
hook_post_forward(void *ctx, int b)
{
	struct strategy *s = ctx;

	if (s->kind != STRATEGY_FSDP)
		return;
	/* Backward starts with the last block: keep it. */
	if (b < s->m->nblocks - 1)
		fsdp_release(s, b);
	fsdp_progress(s, b);
}

static void
hook_pre_backward(void *ctx, int b)
{
	struct strategy *s = ctx;
	struct shard *h;

	if (s->kind == STRATEGY_DDP)
		ddp_progress(s);
	if (s->kind != STRATEGY_FSDP)
		return;
	h = &s->sh[b];
	fsdp_ready(s, b);
	fsdp_gather(s, b - 1);
	if (h->gfull == NULL && h->s > 0)
		h->gfull = falloc_or_die(s, (size_t)s->world * h->s,
		    "gradients", b);	/* zero-filled */
	s->m->bgrads[b] = h->gfull;
	fsdp_progress(s, b);
}

static void
hook_post_backward(void *ctx, int b)
{
	struct strategy *s = ctx;
	struct shard *h;

	if (s->kind == STRATEGY_DDP) {
		if (b == s->buckets[s->bucket_of[b]].lo)
			ddp_issue(s, s->bucket_of[b]);
		ddp_progress(s);
	}
	if (s->kind != STRATEGY_FSDP)
		return;
	h = &s->sh[b];
	if (h->gfull != NULL && h->rs == NULL) {
		if (s->nrsq == MAX_RS_INFLIGHT)
			fsdp_retire(s, 0);
		h->rs = comm_reduce_scatter_mean(s->c, h->g, h->gfull, h->s);
		s->rsq[s->nrsq++] = b;
	}
	s->m->bgrads[b] = NULL;
	fsdp_release(s, b);
	fsdp_progress(s, b);
}

/* ------------------------------------------------------------------------ */
/* open and close                                                           */

static int
open_flat(struct strategy *s, uint64_t seed, float *tmp, char *err,
    size_t errlen)
{
	struct model *m = s->m;
	int b;

	if ((s->params = falloc(s, m->nflat)) == NULL ||
	    (s->grads = falloc(s, m->nflat)) == NULL) {
		snprintf(err, errlen, "out of memory for %.1f MiB of parameters "
		    "and gradients: try --strategy fsdp",
		    2.0 * m->nflat * sizeof(float) / (1 << 20));
		return -1;
	}
	for (b = 0; b < m->nblocks; b++) {
		model_init_block(m, b, seed, tmp);
		s->be->to_device(s->params + m->blocks[b].off, tmp,
		    m->blocks[b].numel * sizeof(float));
		m->bparams[b] = s->params + m->blocks[b].off;
		m->bgrads[b] = s->grads + m->blocks[b].off;
	}
	if ((s->view.segs = calloc(1, sizeof(*s->view.segs))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	s->view.segs[0] = (struct view_seg){ 0, m->nflat, s->params,
	    s->grads };
	s->view.nsegs = 1;
	s->view.nlocal = m->nflat;
	return 0;
}

/* Copy this rank's slice of block b (host, numel floats) into its shard,
 * zero past the block's end. */
static void
shard_set(struct strategy *s, int b, float *dev, const float *block)
{
	struct shard *h = &s->sh[b];

	if (h->s == 0)
		return;
	s->be->zero(dev, h->s * sizeof(float));
	s->be->to_device(dev, block + (size_t)s->rank * h->s,
	    h->nreal * sizeof(float));
}

static int
open_fsdp(struct strategy *s, uint64_t seed, float *tmp, char *err,
    size_t errlen)
{
	struct model *m = s->m;
	struct shard *h;
	size_t lo;
	int b, k;

	s->sh = calloc((size_t)m->nblocks, sizeof(*s->sh));
	s->rsq = calloc(MAX_RS_INFLIGHT, sizeof(*s->rsq));
	s->view.segs = calloc((size_t)m->nblocks, sizeof(*s->view.segs));
	if (s->sh == NULL || s->rsq == NULL || s->view.segs == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (b = 0; b < m->nblocks; b++) {
		h = &s->sh[b];
		h->s = (m->blocks[b].numel + (size_t)s->world - 1) /
		    (size_t)s->world;
		lo = (size_t)s->rank * h->s;
		h->nreal = lo < m->blocks[b].numel ?
		    m->blocks[b].numel - lo : 0;
		if (h->nreal > h->s)
			h->nreal = h->s;
		if (h->s > s->max_s)
			s->max_s = h->s;
		m->bparams[b] = m->bgrads[b] = NULL;
		if (h->s == 0)
			continue;
		if ((h->p = falloc(s, h->s)) == NULL ||
		    (h->g = falloc(s, h->s)) == NULL) {
			snprintf(err, errlen, "out of memory for the shards "
			    "of block %s", m->blocks[b].name);
			return -1;
		}
		model_init_block(m, b, seed, tmp);
		shard_set(s, b, h->p, tmp);
		k = s->view.nsegs++;
		s->view.segs[k] = (struct view_seg){ m->blocks[b].off + lo,
		    h->s, h->p, h->g };
		s->view.nlocal += h->s;
	}
	s->view.sharded = s->world > 1;
	return 0;
}

struct strategy *
strategy_open(enum strategy_kind kind, struct model *m, struct comm *c,
    uint64_t seed, size_t bucket_bytes, char *err, size_t errlen)
{
	struct strategy *s;
	float *tmp = NULL;
	size_t maxn = 1, at = 0;
	int b, rc;

	if (m->bparams == NULL || m->bgrads == NULL || m->be == NULL) {
		snprintf(err, errlen, "the model is not allocated");
		return NULL;
	}
	for (b = 0; b < m->nblocks; b++) {
		/* DDP's buckets are contiguous ranges of blocks. */
		if (m->blocks[b].off != at) {
			snprintf(err, errlen, "block %s starts at %zu, not "
			    "where block %d ends (%zu)", m->blocks[b].name,
			    m->blocks[b].off, b - 1, at);
			return NULL;
		}
		at += m->blocks[b].numel;
		if (m->blocks[b].numel > maxn)
			maxn = m->blocks[b].numel;
	}
	if (at != m->nflat) {
		snprintf(err, errlen, "the blocks hold %zu floats, the model "
		    "%zu", at, m->nflat);
		return NULL;
	}
	if (kind == STRATEGY_SINGLE && comm_world(c) > 1) {
		snprintf(err, errlen, "--strategy single runs on one rank, "
		    "not %d: use ddp or fsdp", comm_world(c));
		return NULL;
	}
	if ((s = calloc(1, sizeof(*s))) == NULL ||
	    (tmp = malloc(maxn * sizeof(float))) == NULL) {
		free(s);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->kind = kind;
	s->m = m;
	s->c = c;
	s->be = m->be;
	s->rank = comm_rank(c);
	s->world = comm_world(c);
	s->hooks = (struct step_hooks){ s, hook_pre_forward,
	    hook_post_forward, hook_pre_backward, hook_post_backward };

	switch (kind) {
	case STRATEGY_SINGLE:
		rc = open_flat(s, seed, tmp, err, errlen);
		break;
	case STRATEGY_DDP:
		rc = open_flat(s, seed, tmp, err, errlen);
		if (rc == 0 && ddp_buckets(s, bucket_bytes) != 0) {
			snprintf(err, errlen, "out of memory");
			rc = -1;
		}
		break;
	case STRATEGY_FSDP:
		rc = open_fsdp(s, seed, tmp, err, errlen);
		break;
	default:
		snprintf(err, errlen, "unknown strategy %d", (int)kind);
		rc = -1;
	}
	free(tmp);
	if (rc != 0) {
		strategy_close(s);
		return NULL;
	}
	return s;
}

void
strategy_close(struct strategy *s)
{
	int b;

	if (s == NULL)
		return;
	if (s->kind == STRATEGY_DDP && s->buckets != NULL)
		ddp_finish(s, 0);
	if (s->kind == STRATEGY_FSDP && s->sh != NULL) {
		fsdp_finish(s);
		for (b = 0; b < s->m->nblocks; b++) {
			ffree(s, s->sh[b].p, s->sh[b].s);
			ffree(s, s->sh[b].g, s->sh[b].s);
		}
	}
	ffree(s, s->params, s->m->nflat);
	ffree(s, s->grads, s->m->nflat);
	/* Leave no pointer into freed memory in the model. */
	for (b = 0; b < s->m->nblocks; b++)
		s->m->bparams[b] = s->m->bgrads[b] = NULL;
	free(s->buckets);
	free(s->bucket_of);
	free(s->sh);
	free(s->rsq);
	free(s->view.segs);
	free(s);
}

/* ------------------------------------------------------------------------ */
/* steps                                                                    */

const struct step_hooks *
strategy_hooks(struct strategy *s)
{
	return &s->hooks;
}

void
strategy_begin_step(struct strategy *s)
{
	int b;

	/* GPU stalls from outside a step (a checkpoint's gathers) are not
	 * this step's */
	(void)comm_stall_seconds(s->c);
	s->comm_s = 0;
	if (s->kind != STRATEGY_FSDP) {
		s->be->zero(s->grads, s->m->nflat * sizeof(float));
		return;
	}
	for (b = 0; b < s->m->nblocks; b++)
		if (s->sh[b].s > 0)
			s->be->zero(s->sh[b].g, s->sh[b].s * sizeof(float));
}

double
strategy_end_backward(struct strategy *s)
{
	double t;

	if (s->kind == STRATEGY_DDP)
		ddp_finish(s, 1);
	else if (s->kind == STRATEGY_FSDP)
		fsdp_finish(s);
	t = s->comm_s + comm_stall_seconds(s->c);
	s->comm_s = 0;
	return t;
}

double
strategy_comm_so_far(struct strategy *s)
{
	s->comm_s += comm_stall_seconds(s->c);
	return s->comm_s;
}

const struct strategy_view *
strategy_view(struct strategy *s)
{
	return &s->view;
}

size_t
strategy_peak_param_bytes(const struct strategy *s)
{
	return s->peak;
}

const char *
strategy_name(enum strategy_kind k)
{
	switch (k) {
	case STRATEGY_SINGLE:
		return "single";
	case STRATEGY_DDP:
		return "ddp";
	case STRATEGY_FSDP:
		return "fsdp";
	}
	return "?";
}

/* ------------------------------------------------------------------------ */
/* whole vectors, for checkpoints                                           */

/*
 * FSDP moves whole vectors block by block through one gather buffer of the
 * largest block: collective, every rank calls it. The buffer passes, so
 * it stays outside the step's accounting.
 */
static float *
gather_buf(struct strategy *s)
{
	size_t n = (size_t)s->world * s->max_s;
	float *tmp;

	if ((tmp = s->be->alloc(n * sizeof(float))) == NULL) {
		fprintf(stderr, "shardtrain: out of memory gathering the "
		    "parameters (%.1f MiB)\n",
		    (double)n * sizeof(float) / (1 << 20));
		exit(1);
	}
	return tmp;
}

/* shard (s floats of block b) of every rank -> full_host + block's off */
static void
gather_block(struct strategy *s, float *tmp, const float *shard, int b,
    float *full_host)
{
	comm_wait(s->c, comm_allgather(s->c, tmp, shard, s->sh[b].s));
	s->be->to_host(full_host + s->m->blocks[b].off, tmp,
	    s->m->blocks[b].numel * sizeof(float));
}

void
strategy_get_params(struct strategy *s, float *host)
{
	float *tmp;
	int b;

	if (s->kind != STRATEGY_FSDP) {
		s->be->to_host(host, s->params, s->m->nflat * sizeof(float));
		return;
	}
	tmp = gather_buf(s);
	for (b = 0; b < s->m->nblocks; b++)
		if (s->sh[b].s > 0)
			gather_block(s, tmp, s->sh[b].p, b, host);
	s->be->free(tmp);
}

void
strategy_set_params(struct strategy *s, const float *host)
{
	int b;

	if (s->kind != STRATEGY_FSDP) {
		s->be->to_device(s->params, host, s->m->nflat * sizeof(float));
		return;
	}
	for (b = 0; b < s->m->nblocks; b++)
		shard_set(s, b, s->sh[b].p, host + s->m->blocks[b].off);
}

void
strategy_gather_local(struct strategy *s, const float *local_dev,
    float *full_host)
{
	size_t at = 0;
	float *tmp;
	int b;

	if (s->kind != STRATEGY_FSDP) {
		s->be->to_host(full_host, local_dev,
		    s->m->nflat * sizeof(float));
		return;
	}
	tmp = gather_buf(s);
	for (b = 0; b < s->m->nblocks; b++) {
		if (s->sh[b].s == 0)
			continue;
		gather_block(s, tmp, local_dev + at, b, full_host);
		at += s->sh[b].s;
	}
	s->be->free(tmp);
}

void
strategy_scatter_local(struct strategy *s, const float *full_host,
    float *local_dev)
{
	size_t at = 0;
	int b;

	if (s->kind != STRATEGY_FSDP) {
		s->be->to_device(local_dev, full_host,
		    s->m->nflat * sizeof(float));
		return;
	}
	for (b = 0; b < s->m->nblocks; b++) {
		shard_set(s, b, local_dev + at, full_host + s->m->blocks[b].off);
		at += s->sh[b].s;
	}
}
