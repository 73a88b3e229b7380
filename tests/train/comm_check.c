/*
 * comm_check.c - run alone or under "mpirun -np N": the collectives of
 * comm.h, then the three strategies on a fake model whose blocks read
 * their parameters through m->bparams and write gradients that depend on
 * the rank and on those parameters, so a missing or wrong gather shows.
 * Every check is summed over the ranks, so all ranks stop together; a
 * failure prints "comm_check: <what>: <numbers>" and exits 1.
 *
 * --max-count N sets SHARDTRAIN_COMM_MAX_COUNT before MPI starts, so the
 * calls split into chunks as they would past INT_MAX elements. --bad-root
 * broadcasts from a rank that does not exist, to see a failed MPI call
 * stop every rank with its name, file and line.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm.h"
#include "model.h"
#include "strategy.h"

static struct comm *c;
static int rank, world;
static int nfail;
static double worst;			/* largest error this section */

#define TOL	1e-6			/* |got - want| <= TOL + |want| TOL */

static void
failf(const char *what, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
failf(const char *what, const char *fmt, ...)
{
	va_list ap;

	printf("comm_check: rank %d of %d: %s: ", rank, world, what);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	nfail++;
}

/* All ranks agree on whether a section passed, and stop together if not. */
static void
section(const char *name)
{
	double v = nfail;

	comm_sum_double(c, &v, 1);
	comm_max_double(c, &worst, 1);
	if (v > 0) {
		if (rank == 0)
			printf("comm_check: %s: %g failure(s) over %d ranks\n",
			    name, v, world);
		comm_close(c);
		exit(1);
	}
	if (rank == 0)
		printf("-- %s: ok (max err %.3g)\n", name, worst);
	worst = 0;
}

/* Largest error of got against want, or -1 when one is past tolerance;
 * *bad is the first index past it. */
static double
maxerr(const float *got, const float *want, size_t n, size_t *bad)
{
	double e, m = 0;
	size_t i;

	*bad = n;
	for (i = 0; i < n; i++) {
		e = fabs((double)got[i] - want[i]);
		if (!(e <= TOL + fabs((double)want[i]) * TOL) && *bad == n)
			*bad = i;
		if (e > m || e != e)
			m = e;
	}
	return m;
}

static void
expect(const char *what, const float *got, const float *want, size_t n)
{
	size_t bad;
	double m = maxerr(got, want, n, &bad);

	if (m > worst)
		worst = m;
	if (bad < n)
		failf(what, "element %zu of %zu is %.9g, want %.9g (max err "
		    "%.3g)", bad, n, got[bad], want[bad], m);
}

/* Exact, small dyadic values: sums over ranks are exact in any order. */
static float
val(int r, size_t i)
{
	return (float)(r + 1) * (float)((int)((i * 37 + 11) % 29) - 14) /
	    16.0f + (float)(i % 5) / 4.0f;
}

static float
mean_val(size_t i)
{
	float sum = 0;
	int r;

	for (r = 0; r < world; r++)
		sum += val(r, i);
	return sum * (1.0f / (float)world);
}

static float *
xalloc(size_t n)
{
	float *p = calloc(n ? n : 1, sizeof(float));

	if (p == NULL) {
		fprintf(stderr, "comm_check: out of memory\n");
		exit(1);
	}
	return p;
}

/* ------------------------------------------------------------------------ */
/* collectives                                                              */

static void
check_allreduce(size_t n)
{
	float *buf = xalloc(n), *want = xalloc(n);
	char what[64];
	size_t i;

	for (i = 0; i < n; i++) {
		buf[i] = val(rank, i);
		want[i] = mean_val(i);
	}
	comm_wait(c, comm_allreduce_mean(c, buf, n));
	snprintf(what, sizeof(what), "allreduce mean of %zu", n);
	expect(what, buf, want, n);
	free(buf);
	free(want);
}

static void
check_allgather(size_t n, int inplace)
{
	float *full = xalloc(world * n), *shard = xalloc(n);
	float *want = xalloc(world * n), *src = shard;
	char what[64];
	size_t i;
	int r;

	for (r = 0; r < world; r++)
		for (i = 0; i < n; i++)
			want[r * n + i] = (float)(r * 100000 + (int)i);
	for (i = 0; i < n; i++)
		shard[i] = want[rank * n + i];
	if (inplace) {
		memcpy(full + rank * n, shard, n * sizeof(float));
		src = full + rank * n;
	}
	comm_wait(c, comm_allgather(c, full, src, n));
	snprintf(what, sizeof(what), "allgather of %zu%s", n,
	    inplace ? " in place" : "");
	expect(what, full, want, world * n);
	free(full);
	free(shard);
	free(want);
}

static void
check_reduce_scatter(size_t n)
{
	float *full = xalloc(world * n), *shard = xalloc(n), *want = xalloc(n);
	char what[64];
	size_t i;

	for (i = 0; i < world * n; i++)
		full[i] = val(rank, i);
	for (i = 0; i < n; i++) {
		want[i] = mean_val(rank * n + i);
		shard[i] = -12345.0f;
	}
	comm_wait(c, comm_reduce_scatter_mean(c, shard, full, n));
	snprintf(what, sizeof(what), "reduce-scatter mean of %zu", n);
	expect(what, shard, want, n);
	free(full);
	free(shard);
	free(want);
}

/* Three calls in flight at once, tested until done, waited out of order. */
static void
check_async(void)
{
	size_t n = 2049, i;
	float *a = xalloc(n), *wa = xalloc(n);
	float *full = xalloc(world * n), *shard = xalloc(n), *wg = xalloc(world * n);
	float *rfull = xalloc(world * n), *rs = xalloc(n), *wr = xalloc(n);
	struct comm_req *q[3];
	long spins = 0;
	int done, k;

	for (i = 0; i < n; i++) {
		a[i] = val(rank, i + 7);
		wa[i] = mean_val(i + 7);
		shard[i] = (float)(rank * 100000 + (int)i);
		wr[i] = mean_val(rank * n + i + 3);
	}
	for (k = 0; k < world; k++)
		for (i = 0; i < n; i++)
			wg[k * n + i] = (float)(k * 100000 + (int)i);
	for (i = 0; i < world * n; i++)
		rfull[i] = val(rank, i + 3);
	q[0] = comm_allreduce_mean(c, a, n);
	q[1] = comm_allgather(c, full, shard, n);
	q[2] = comm_reduce_scatter_mean(c, rs, rfull, n);
	do {
		done = 1;
		for (k = 0; k < 3; k++)
			done &= comm_test(c, q[k]) != 0;
	} while (!done && ++spins < 100000000L);
	if (!done)
		failf("async", "comm_test never reported completion");
	for (k = 2; k >= 0; k--)
		comm_wait(c, q[k]);
	expect("async allreduce mean", a, wa, n);
	expect("async allgather", full, wg, world * n);
	expect("async reduce-scatter mean", rs, wr, n);
	comm_wait(c, NULL);
	if (!comm_test(c, NULL))
		failf("async", "comm_test(NULL) is not complete");
	free(a); free(wa); free(full); free(shard); free(wg);
	free(rfull); free(rs); free(wr);
}

static void
check_helpers(void)
{
	double v[2] = { rank + 1, -rank };
	char buf[300];
	int got, want;

	comm_sum_double(c, v, 2);
	if (v[0] != world * (world + 1) / 2.0 || v[1] != -(world * (world - 1) / 2.0))
		failf("sum_double", "got %g %g, want %g %g", v[0], v[1],
		    world * (world + 1) / 2.0, -(world * (world - 1) / 2.0));
	v[0] = rank == world - 1 ? 7.5 : rank;
	v[1] = -rank;
	comm_max_double(c, v, 2);
	if (v[0] != (world > 7 ? world - 1 : 7.5) || v[1] != 0)
		failf("max_double", "got %g %g", v[0], v[1]);

	memset(buf, rank == 0 ? 'x' : 'y', sizeof(buf));
	comm_bcast(c, buf, sizeof(buf), 0);
	if (memchr(buf, 'y', sizeof(buf)) != NULL)
		failf("bcast", "rank 0's bytes did not arrive");
	comm_barrier(c);

	/* first_mismatch: equal, one rank's byte differs, one rank's length */
	if ((got = comm_first_mismatch(c, buf, sizeof(buf))) != -1)
		failf("first_mismatch", "equal buffers: got %d, want -1", got);
	if (rank == world - 1 && world > 1)
		buf[123] ^= 1;
	want = world > 1 ? world - 1 : -1;
	if ((got = comm_first_mismatch(c, buf, sizeof(buf))) != want)
		failf("first_mismatch", "rank %d's byte differs: got %d",
		    world - 1, got);
	buf[123] = 'x';
	want = world > 1 ? 1 : -1;
	got = comm_first_mismatch(c, buf, sizeof(buf) - (rank == 1));
	if (got != want)
		failf("first_mismatch", "rank 1 one byte shorter: got %d, "
		    "want %d", got, want);
}

/* ------------------------------------------------------------------------ */
/* a fake model                                                             */

static void
fake_model(struct model *m, const size_t *sizes, int nb)
{
	size_t at = 0;
	int b;

	memset(m, 0, sizeof(*m));
	snprintf(m->cfg.name, sizeof(m->cfg.name), "fake");
	m->be = backend_cpu();
	m->blocks = calloc(nb, sizeof(*m->blocks));
	m->bparams = calloc(nb, sizeof(*m->bparams));
	m->bgrads = calloc(nb, sizeof(*m->bgrads));
	if (m->blocks == NULL || m->bparams == NULL || m->bgrads == NULL) {
		fprintf(stderr, "comm_check: out of memory\n");
		exit(1);
	}
	for (b = 0; b < nb; b++) {
		snprintf(m->blocks[b].name, sizeof(m->blocks[b].name),
		    "fake.%d", b);
		m->blocks[b].off = at;
		m->blocks[b].numel = sizes[b];
		at += sizes[b];
	}
	m->nblocks = nb;
	m->nflat = at;
}

static void
fake_free(struct model *m)
{
	free(m->blocks);
	free(m->bparams);
	free(m->bgrads);
}

/* The parameters every strategy starts from. */
static float
param0(size_t i)
{
	return (float)((int)((i * 13 + 5) % 23) - 11) / 16.0f;
}

/*
 * A block's "forward" is a weighted sum of its parameters; its "backward"
 * writes g[i] += (rank+1) p[i] + (i%3)(rank%2)/4 + (sum of all the
 * forwards)/64, reading the parameters again as a recompute would.
 * Dyadic values throughout, so sums over ranks are exact.
 */
static float
fake_act(const float *p, size_t n)
{
	float a = 0;
	size_t i;

	for (i = 0; i < n; i++)
		a += p[i] * (float)(int)(i % 4);
	return a;
}

static float
fake_grad(int r, size_t i, float p, float act)
{
	return (float)(r + 1) * p + (float)((i % 3) * (size_t)(r % 2)) / 4.0f +
	    act / 64.0f;
}

static void
fake_step(struct model *m, const struct step_hooks *h, int backward)
{
	float act = 0, *p, *g;
	size_t i, n;
	int b;

	for (b = 0; b < m->nblocks; b++) {
		h->pre_forward(h->ctx, b);
		n = m->blocks[b].numel;
		if ((p = m->bparams[b]) == NULL && n > 0) {
			failf("forward", "block %d's parameters not resident", b);
			continue;
		}
		act += fake_act(p, n);
		h->post_forward(h->ctx, b);
	}
	if (!backward)
		return;
	for (b = m->nblocks - 1; b >= 0; b--) {
		h->pre_backward(h->ctx, b);
		n = m->blocks[b].numel;
		p = m->bparams[b];
		g = m->bgrads[b];
		if ((p == NULL || g == NULL) && n > 0) {
			failf("backward", "block %d's %s not resident", b,
			    p == NULL ? "parameters" : "gradients");
			continue;
		}
		for (i = 0; i < n; i++)
			g[i] += fake_grad(rank, m->blocks[b].off + i, p[i], act);
		h->post_backward(h->ctx, b);
	}
}

/* What DDP's gradients must be: the mean over ranks, for params P. */
static void
want_grads(const struct model *m, const float *P, float *G)
{
	float act = 0, sum;
	size_t i;
	int b, r;

	for (b = 0; b < m->nblocks; b++)
		act += fake_act(P + m->blocks[b].off, m->blocks[b].numel);
	for (i = 0; i < m->nflat; i++) {
		sum = 0;
		for (r = 0; r < world; r++)
			sum += fake_grad(r, i, P[i], act);
		G[i] = sum * (1.0f / (float)world);
	}
}

/* ------------------------------------------------------------------------ */
/* strategies                                                               */

struct result {
	float *params;			/* after one update, gathered (nflat) */
	double comm_s;
};

/*
 * The view's segments: the whole vector for single and DDP; for FSDP one
 * per block that has parameters, in block order, this rank's slice of it
 * with zero padding past the block's end. Check each segment's gradients
 * against G and, with update, apply p -= g/2 as an optimizer would.
 */
static void
check_view(const char *what, struct strategy *s, const struct model *m,
    enum strategy_kind k, const float *G, int update)
{
	const struct strategy_view *v = strategy_view(s);
	size_t nlocal = 0, j, real, end, want_off;
	char w[256];
	int i, b = -1;

	for (i = 0; i < v->nsegs; i++) {
		const struct view_seg *sg = &v->segs[i];

		nlocal += sg->n;
		if (k != STRATEGY_FSDP) {
			if (sg->flat_off != 0 || sg->n != m->nflat)
				failf(what, "segment %d is %zu+%zu, want the "
				    "whole %zu", i, sg->flat_off, sg->n,
				    m->nflat);
			end = m->nflat;
		} else {
			while (++b < m->nblocks && m->blocks[b].numel == 0)
				;
			if (b == m->nblocks) {
				failf(what, "segment %d past the last block", i);
				break;
			}
			want_off = m->blocks[b].off + (size_t)rank *
			    ((m->blocks[b].numel + world - 1) / world);
			if (sg->flat_off != want_off || sg->n !=
			    (m->blocks[b].numel + world - 1) / world)
				failf(what, "segment %d is %zu+%zu, want "
				    "%zu+%zu", i, sg->flat_off, sg->n,
				    want_off, (m->blocks[b].numel + world - 1) /
				    world);
			end = m->blocks[b].off + m->blocks[b].numel;
		}
		real = sg->flat_off >= end ? 0 : end - sg->flat_off < sg->n ?
		    end - sg->flat_off : sg->n;
		snprintf(w, sizeof(w), "%s: gradients of segment %d (flat "
		    "%zu+%zu)", what, i, sg->flat_off, real);
		expect(w, sg->g, G + sg->flat_off, real);
		for (j = real; j < sg->n; j++)
			if (sg->g[j] != 0 || sg->p[j] != 0) {
				failf(what, "segment %d: padding %zu holds "
				    "p %g g %g", i, j, sg->p[j], sg->g[j]);
				break;
			}
		if (update)
			for (j = 0; j < sg->n; j++)
				sg->p[j] -= 0.5f * sg->g[j];
	}
	if (nlocal != v->nlocal)
		failf(what, "nlocal %zu, the segments hold %zu", v->nlocal,
		    nlocal);
	if (v->sharded != (k == STRATEGY_FSDP && world > 1))
		failf(what, "sharded is %d", v->sharded);
}

/* Round trips through set/get_params and scatter/gather_local. */
static void
check_roundtrip(const char *what, struct strategy *s, const struct model *m)
{
	const struct strategy_view *v = strategy_view(s);
	float *F = xalloc(m->nflat), *back = xalloc(m->nflat);
	float *local = m->be->alloc((v->nlocal ? v->nlocal : 1) * sizeof(float));
	char w[96];
	size_t i;

	for (i = 0; i < m->nflat; i++)
		F[i] = (float)i + 0.25f;
	strategy_set_params(s, F);
	strategy_get_params(s, back);
	snprintf(w, sizeof(w), "%s: set_params then get_params", what);
	expect(w, back, F, m->nflat);

	for (i = 0; i < m->nflat; i++)
		F[i] = -(float)i - 0.5f;
	strategy_scatter_local(s, F, local);
	memset(back, 0, m->nflat * sizeof(float));
	strategy_gather_local(s, local, back);
	snprintf(w, sizeof(w), "%s: scatter_local then gather_local", what);
	expect(w, back, F, m->nflat);
	m->be->free(local);
	free(F);
	free(back);
}

static void
run_strategy(const char *what, enum strategy_kind k, struct model *m,
    size_t bucket_bytes, struct result *res)
{
	float *P = xalloc(m->nflat), *G = xalloc(m->nflat);
	struct strategy *s;
	char err[256], w[96];
	size_t i;
	int step;

	if ((s = strategy_open(k, m, c, 42, bucket_bytes, err,
	    sizeof(err))) == NULL) {
		failf(what, "strategy_open: %s", err);
		goto out;
	}
	check_roundtrip(what, s, m);
	for (i = 0; i < m->nflat; i++)
		P[i] = param0(i);
	strategy_set_params(s, P);
	want_grads(m, P, G);
	/* An evaluation forward first, then two steps that must agree:
	 * begin_step zeroes what the first accumulated. */
	fake_step(m, strategy_hooks(s), 0);
	for (step = 0; step < 2; step++) {
		strategy_begin_step(s);
		fake_step(m, strategy_hooks(s), 1);
		res->comm_s = strategy_end_backward(s);
		if (!(res->comm_s >= 0 && res->comm_s < 60))
			failf(what, "exposed communication %g s", res->comm_s);
		snprintf(w, sizeof(w), "%s step %d", what, step);
		check_view(w, s, m, k, G, step == 1);
	}
	strategy_get_params(s, res->params);
	for (i = 0; i < m->nflat; i++)
		P[i] -= 0.5f * G[i];
	snprintf(w, sizeof(w), "%s: parameters after p -= g/2", what);
	expect(w, res->params, P, m->nflat);
	/* The model holds no pointer into the strategy's memory any more. */
	strategy_close(s);
	for (i = 0; i < (size_t)m->nblocks; i++)
		if (m->bparams[i] != NULL || m->bgrads[i] != NULL)
			failf(what, "block %zu's pointers left after close", i);
out:
	free(P);
	free(G);
}

static size_t
peak_of(enum strategy_kind k, struct model *m)
{
	struct strategy *s;
	char err[256];
	size_t peak;

	if ((s = strategy_open(k, m, c, 1, 0, err, sizeof(err))) == NULL) {
		failf("peak", "strategy_open: %s", err);
		return 0;
	}
	strategy_begin_step(s);
	fake_step(m, strategy_hooks(s), 1);
	strategy_end_backward(s);
	peak = strategy_peak_param_bytes(s);
	strategy_close(s);
	return peak;
}

static void
check_memory(void)
{
	enum { NB = 48, N = 3000 };
	size_t sizes[NB], peak_ddp, peak_fsdp, shard, full, lo, hi;
	struct model m;
	int b;

	for (b = 0; b < NB; b++)
		sizes[b] = N;
	fake_model(&m, sizes, NB);
	peak_ddp = peak_of(STRATEGY_DDP, &m);
	peak_fsdp = peak_of(STRATEGY_FSDP, &m);
	/* shards of params and grads, always; then at least one block's
	 * gathered params and full grads at once, at most two of params
	 * (one prefetched) and 1 + MAX_RS_INFLIGHT of grads. */
	shard = 2 * NB * ((N + world - 1) / world) * sizeof(float);
	full = world * ((N + world - 1) / world) * sizeof(float);
	lo = shard + 2 * full;
	hi = shard + 5 * full;
	if (rank == 0)
		printf("-- peak param+grad bytes, %d blocks of %d floats: ddp "
		    "%zu, fsdp %zu (%.3f of ddp; 1/%d = %.3f)\n", NB, N,
		    peak_ddp, peak_fsdp, (double)peak_fsdp / peak_ddp, world,
		    1.0 / world);
	if (peak_ddp != 2 * m.nflat * sizeof(float))
		failf("peak ddp", "%zu bytes, want %zu", peak_ddp,
		    2 * m.nflat * sizeof(float));
	if (peak_fsdp < lo || peak_fsdp > hi)
		failf("peak fsdp", "%zu bytes, want %zu..%zu", peak_fsdp, lo,
		    hi);
	if (world > 1 && peak_fsdp >= peak_ddp)
		failf("peak fsdp", "%zu bytes, not below ddp's %zu", peak_fsdp,
		    peak_ddp);
	fake_free(&m);
}

/* ------------------------------------------------------------------------ */

int
main(int argc, char **argv)
{
	static const size_t odd[] = { 1, 7, 1000, 3, 129 };
	size_t sizes[] = { 1, 2, 7, 13, 1000, 1001 };
	struct result ddp = { 0 }, res = { 0 };
	struct model m;
	char err[256];
	size_t i, j;
	int k, bad_root = 0;

	if (argc == 3 && strcmp(argv[1], "--max-count") == 0)
		setenv("SHARDTRAIN_COMM_MAX_COUNT", argv[2], 1);
	else if (argc == 2 && strcmp(argv[1], "--bad-root") == 0)
		bad_root = 1;
	else if (argc != 1) {
		fprintf(stderr, "usage: comm_check [--max-count N | "
		    "--bad-root]\n");
		return 2;
	}
	if ((c = comm_open(&argc, &argv, err, sizeof(err))) == NULL) {
		printf("comm_check: comm_open: %s\n", err);
		return 1;
	}
	rank = comm_rank(c);
	world = comm_world(c);
	if (bad_root) {
		comm_bcast(c, err, 1, world);
		printf("comm_check: a broadcast from rank %d of %d returned\n",
		    world, world);
		comm_close(c);
		return world > 1 ? 1 : 0;
	}
	if (rank == 0)
		printf("-- %s, %d rank(s)%s%s\n", comm_name(c), world,
		    argc == 3 ? ", max count " : "", argc == 3 ? argv[2] : "");

	check_helpers();
	section("bcast, sums, first_mismatch");
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		check_allreduce(sizes[i]);
		check_allgather(sizes[i], 0);
		check_allgather(sizes[i], 1);
		check_reduce_scatter(sizes[i]);
	}
	section("allreduce, allgather, reduce-scatter (1 to 1001 floats)");
	check_async();
	section("three calls in flight, tested then waited out of order");

	fake_model(&m, odd, 5);
	ddp.params = xalloc(m.nflat);
	res.params = xalloc(m.nflat);
	if (world == 1) {
		run_strategy("single", STRATEGY_SINGLE, &m, 0, &res);
		section("single");
	}
	run_strategy("ddp", STRATEGY_DDP, &m, 0, &ddp);
	/* a bucket per block, and buckets of two or three blocks */
	for (k = 0; k < 2; k++) {
		run_strategy(k ? "ddp 600-byte buckets" : "ddp 1-byte buckets",
		    STRATEGY_DDP, &m, k ? 600 : 1, &res);
		for (j = 0; j < m.nflat; j++)
			if (res.params[j] != ddp.params[j]) {
				failf("ddp buckets", "parameter %zu is %g, "
				    "with one bucket %g", j, res.params[j],
				    ddp.params[j]);
				break;
			}
	}
	section("ddp: mean gradients, buckets, the update, round trips");
	run_strategy("fsdp", STRATEGY_FSDP, &m, 0, &res);
	expect("fsdp parameters against ddp's", res.params, ddp.params,
	    m.nflat);
	section("fsdp: gradient shards, the update, round trips");
	free(ddp.params);
	free(res.params);
	fake_free(&m);

	/* Chunks of a few floats make thousands of calls of that model. */
	if (getenv("SHARDTRAIN_COMM_MAX_COUNT") == NULL) {
		check_memory();
		section("peak memory");
	}
	if (rank == 0)
		printf("comm_check: ok (%s, %d ranks)\n", comm_name(c), world);
	comm_close(c);
	return 0;
}
