/*
 * conv.c - 2D convolution on the CPU as SGEMMs over im2col columns, with
 * col2im (or, at stride 1, a convolution of dout) for the input gradient.
 *
 * A window that hangs over the padding multiplies part of the kernel by
 * zeros. On small maps, output positions are grouped by the kernel taps
 * their windows keep (the interior all of them, each edge and corner a
 * smaller rectangle) and each group is one GEMM over its own taps, so
 * padding is never copied nor multiplied: on ResNet's late stages at 32x32
 * input (4x4 down to 1x1 maps) that removes up to 8/9 of the work. A chunk
 * of samples is unrolled side by side so those GEMMs are not tiny. On large
 * maps, where padding is a small share, the plain zero-padded im2col goes
 * a sample at a time, built tile by tile while it is in cache, straight
 * into the output; 1x1 stride-1 unpadded convolutions there skip im2col.
 *
 * All threads are OpenMP's; each runs single-threaded SGEMMs on tiles
 * whose sizes depend on the shape alone, so the bits do not depend on the
 * thread count.
 */
#include "config.h"

#include <stddef.h>
#include <string.h>

#include <cblas.h>

#include "cpu.h"

/*
 * A chunk aims for CONV_COLS columns and its col and output buffers for at
 * most CONV_SCRATCH_MAX floats (16 MiB); one sample may exceed that on its
 * own. Both depend on the shape alone. Flat plans on maps of at least
 * SAMPLE_COLS positions, and more than K, go a sample at a time, straight
 * into the output: the tiles of their GEMMs are columns, which is how
 * the fused im2col cuts them.
 */
#define CONV_COLS		2048
#define CONV_SCRATCH_MAX	((size_t)4 << 20)
#define SAMPLE_COLS		128

/*
 * Grouping pays when windows keep less than this share of the taps, and
 * on maps too small to go a sample at a time, where its transposed col
 * keeps the copy loops long; it needs channels enough for those loops.
 */
#define GROUP_BELOW		0.9
#define GROUP_MIN_C		16

/* Channels per col2im work item in a grouped plan. */
#define CBLK			32

/* Below this many multiply-adds a convolution runs on one thread. */
#define PAR_MIN_MACS		((size_t)1 << 18)

/* ------------------------------------------------------------------------ */
/* plans: runs, groups and the scratch layout                               */

/* Output rows (or columns) p0 <= p < p1 whose windows keep kernel rows (or
 * columns) r0 <= r < r1; r0 == r1 when they lie wholly in the padding. */
struct run {
	int p0, p1, r0, r1;
};

/* One group: a rectangle of output positions and the taps it keeps. */
struct group {
	int p0, p1, q0, q1;
	int r0, r1, s0, s1;
	int size;		/* positions */
	size_t pos0;		/* positions in the groups before it */
	size_t co;		/* its first column in a chunk of n samples */
};

struct conv_plan {
	const struct conv_shape *s;
	const struct run *rp, *rq;	/* runs down P and across Q */
	int nrp, nrq;
	struct group *grp;	/* nrp*nrq groups, runs down major */
	int flat;		/* zero-padded im2col, rows (c,r,s) */
	int hr0, hs0, lr, ls;	/* the hull: taps some window keeps */
	int tapc;		/* col rows per tap: C (flat: all rows) */
	int rows;		/* col rows (lr, ls, tapc), tap-major */
	int nb;			/* samples per chunk */
	int natural;		/* one group: columns in (b,p,q) order */
	int direct;		/* 1x1 s1 p0, one sample a chunk: no col */
	int perm;		/* R*S > 1: w is copied tap-major into wp */
	int tconv;		/* dinp is the flat forward of shape ts */
	size_t pq;
	struct run frun[2];	/* a flat plan's runs and group */
	struct group fgrp;
	struct conv_shape ts;	/* dout (B,K,P,Q) -> dinp (B,C,H,W) */
	float *col;		/* (rows, nb*PQ); grouped: (nb*PQ, rows) */
				/* tconv: also (K*R*S, H*W) */
	float *tmp;		/* (K, nb*PQ): GEMM output or gathered dout */
	float *wp, *dwp;	/* (K, rows) */
	float *wf;		/* (C,K,R,S): w flipped, for tconv */
};

/*
 * Cut the P outputs of one axis into runs; returns their number and the
 * hull [*h0, *h1) of the taps kept. run may be NULL to count only.
 */
static int
axis_runs(int H, int R, int P, int st, int pad, struct run *run, int *h0,
    int *h1, double *kept)
{
	int n = 0, lo = R, hi = 0, pr0 = -1, pr1 = -1;
	double taps = 0;

	for (int p = 0; p < P; p++) {
		int r0 = pad - p * st > 0 ? pad - p * st : 0;
		int r1 = H + pad - p * st < R ? H + pad - p * st : R;

		if (r1 <= r0)
			r0 = r1 = 0;
		else {
			lo = r0 < lo ? r0 : lo;
			hi = r1 > hi ? r1 : hi;
		}
		taps += r1 - r0;
		if (n > 0 && r0 == pr0 && r1 == pr1) {
			if (run != NULL)
				run[n - 1].p1 = p + 1;
			continue;
		}
		if (run != NULL) {
			run[n].p0 = p;
			run[n].p1 = p + 1;
			run[n].r0 = r0;
			run[n].r1 = r1;
		}
		pr0 = r0;
		pr1 = r1;
		n++;
	}
	if (hi <= lo)
		lo = hi = 0;
	*h0 = lo;
	*h1 = hi;
	*kept = P > 0 && R > 0 ? taps / ((double)P * R) : 1;
	return n;
}

/* Floats of scratch holding n objects of the given size. */
static size_t
floats_for(size_t n, size_t size)
{
	return (n * size / sizeof(float) + 16) & ~(size_t)15;
}

/* The share of the taps the windows of s keep. */
static double
conv_kept(const struct conv_shape *s)
{
	double kp, kq;
	int h0, h1;

	axis_runs(s->H, s->R, s->P, s->stride, s->pad, NULL, &h0, &h1, &kp);
	axis_runs(s->W, s->S, s->Q, s->stride, s->pad, NULL, &h0, &h1, &kq);
	return kp * kq;
}

/*
 * Work out the groups, the chunk and the scratch layout of shape s. With
 * scratch NULL only the sizes are filled in; returns the scratch floats.
 * Layout: runs, groups, col, tmp, wp, dwp, wf. A flat plan is one group
 * of one "tap" holding all CRS rows in the weight's own order.
 *
 * With stride 1 the input gradient is itself a convolution: dout, padded
 * by R-1-pad, with the kernel flipped and its channels swapped. When that
 * one is flat too, it runs as a forward (tconv), tile by tile in cache,
 * instead of a GEMM into col and col2im.
 */
static size_t
plan_init(struct conv_plan *pl, const struct conv_shape *s, float *scratch)
{
	size_t pq = (size_t)s->P * s->Q, per, nb, ncol, at, o_col, o_tmp, o_wp;
	size_t o_wf, ncol_t;
	int hr1, hs1, one = s->R == 1 && s->S == 1 && s->stride == 1 &&
	    s->pad == 0;
	double kp, kq;
	struct run *rp = NULL, *rq = NULL;

	memset(pl, 0, sizeof *pl);
	pl->s = s;
	pl->pq = pq;
	if (scratch != NULL) {
		rp = (struct run *)(void *)scratch;
		rq = rp + s->P;
	}
	pl->nrp = axis_runs(s->H, s->R, s->P, s->stride, s->pad, rp,
	    &pl->hr0, &hr1, &kp);
	pl->nrq = axis_runs(s->W, s->S, s->Q, s->stride, s->pad, rq,
	    &pl->hs0, &hs1, &kq);
	pl->rp = rp;
	pl->rq = rq;
	pl->flat = s->C < GROUP_MIN_C || one ||
	    (kp * kq >= GROUP_BELOW && pq >= SAMPLE_COLS);
	if (pl->flat) {
		pl->nrp = pl->nrq = 1;
		pl->frun[0] = (struct run){ 0, s->P, 0, 1 };
		pl->frun[1] = (struct run){ 0, s->Q, 0, 1 };
		pl->rp = &pl->frun[0];
		pl->rq = &pl->frun[1];
		pl->hr0 = pl->hs0 = 0;
		hr1 = hs1 = 1;
	}
	pl->lr = hr1 - pl->hr0;
	pl->ls = hs1 - pl->hs0;
	pl->tapc = pl->flat ? s->C * s->R * s->S : s->C;
	pl->rows = pl->lr * pl->ls * pl->tapc;
	pl->natural = pl->nrp == 1 && pl->nrq == 1;
	pl->perm = !pl->flat && s->R * s->S > 1;

	per = ((size_t)pl->rows + (size_t)s->K) * pq;
	nb = (CONV_COLS + pq - 1) / pq;
	if (nb * per > CONV_SCRATCH_MAX)
		nb = CONV_SCRATCH_MAX / per;
	if (nb > (size_t)s->B)
		nb = (size_t)s->B;
	if (nb < 1 || (pl->flat && pq >= SAMPLE_COLS &&
	    (one || pq > (size_t)s->K)))
		nb = 1;
	pl->nb = (int)nb;
	pl->direct = one && nb == 1;
	ncol = nb * pq;

	pl->ts = (struct conv_shape){ s->B, s->K, s->P, s->Q, s->C, s->R,
	    s->S, 1, s->R - 1 - s->pad, s->H, s->W };
	pl->tconv = pl->flat && !one && nb == 1 && s->stride == 1 &&
	    s->R == s->S && s->pad <= s->R - 1 &&
	    (size_t)s->H * s->W > (size_t)s->C &&
	    conv_kept(&pl->ts) >= GROUP_BELOW;
	/* col also holds the columns of ts: K*R*S rows by H*W */
	ncol_t = pl->tconv ? (size_t)s->K * s->R * s->S * s->H * s->W : 0;

	at = floats_for((size_t)(s->P + s->Q), sizeof(struct run));
	if (!pl->flat) {
		if (scratch != NULL)
			pl->grp = (struct group *)(void *)(scratch + at);
		at += floats_for((size_t)pl->nrp * pl->nrq,
		    sizeof(struct group));
	} else
		pl->grp = &pl->fgrp;
	if (pl->grp != NULL)
		for (int g = 0; g < pl->nrp * pl->nrq; g++) {
			const struct run *a = &pl->rp[g / pl->nrq];
			const struct run *b = &pl->rq[g % pl->nrq];
			struct group *gr = &pl->grp[g];

			gr->p0 = a->p0;
			gr->p1 = a->p1;
			gr->q0 = b->p0;
			gr->q1 = b->p1;
			gr->r0 = a->r0;
			gr->r1 = a->r1;
			gr->s0 = b->r0;
			gr->s1 = b->r1;
			gr->size = (a->p1 - a->p0) * (b->p1 - b->p0);
			gr->pos0 = (size_t)a->p0 * s->Q +
			    (size_t)(a->p1 - a->p0) * b->p0;
			gr->co = 0;
		}
	o_col = at;
	if (!pl->direct)
		at += (size_t)pl->rows * ncol > ncol_t ? (size_t)pl->rows *
		    ncol : ncol_t;
	o_tmp = at;
	if (!(pl->natural && nb == 1))
		at += (size_t)s->K * ncol;
	o_wp = at;
	if (pl->perm)
		at += 2 * (size_t)s->K * pl->rows;
	o_wf = at;
	if (pl->tconv)
		at += (size_t)s->K * s->C * s->R * s->S;
	if (scratch != NULL) {
		pl->col = scratch + o_col;
		pl->tmp = scratch + o_tmp;
		pl->wp = scratch + o_wp;
		pl->dwp = pl->wp + (size_t)s->K * pl->rows;
		pl->wf = scratch + o_wf;
	}
	return at;
}

static int
plan_groups(const struct conv_plan *pl)
{
	return pl->nrp * pl->nrq;
}

/* Group g of a chunk of n samples. Its columns are (b, p, q), groups one
 * after another in (run down, run across) order. */
static void
plan_group(const struct conv_plan *pl, int g, int n, struct group *gr)
{
	*gr = pl->grp[g];
	gr->co = (size_t)n * gr->pos0;
}

static int
group_empty(const struct group *gr)
{
	return gr->r1 == gr->r0 || gr->s1 == gr->s0;
}

/* Its taps span the hull's full width: their rows are contiguous. */
static int
group_wide(const struct conv_plan *pl, const struct group *gr)
{
	return gr->s0 == pl->hs0 && gr->s1 == pl->hs0 + pl->ls;
}

/* The first col row of tap (r, s): rows are (r, s, c) over the hull. */
static size_t
taprow(const struct conv_plan *pl, int r, int s)
{
	return ((size_t)(r - pl->hr0) * pl->ls + (size_t)(s - pl->hs0)) *
	    pl->tapc;
}

size_t
cpu_conv2d_scratch(const struct conv_shape *s)
{
	struct conv_plan pl;

	return plan_init(&pl, s, NULL);
}

/* ------------------------------------------------------------------------ */
/* GEMMs                                                                    */

/* C (M,N) = op(A) (M,K) . op(B) (K,N) + beta C, row-major, on this thread */
static void
gemm(int ta, int tb, int M, int N, int K, const float *A, size_t lda,
    const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
	cpu_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
	    tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, (int)lda, B,
	    (int)ldb, beta, C, (int)ldc);
}

/*
 * Entry (row, column) of col: (rows, N) in a flat plan, transposed
 * (N, rows) in a grouped one.
 */
static const float *
colat(const struct conv_plan *pl, const float *col, size_t row, size_t c,
    size_t N)
{
	return pl->flat ? col + row * N + c : col + c * pl->rows + row;
}

/*
 * out (K, N) = wt (K, rows) . col (rows, N), group by group, each over its
 * own taps; N = n*PQ. Groups whose windows lie in the padding get zeros.
 */
static void
gemm_forward(const struct conv_plan *pl, int n, const float *wt,
    const float *col, float *out)
{
	int K = pl->s->K, C = pl->tapc, G = plan_groups(pl);
	size_t N = (size_t)n * pl->pq, rows = (size_t)pl->rows;
	size_t ldcol = pl->flat ? N : rows;

#pragma omp for schedule(dynamic, 1)
	for (int it = 0; it < G * CPU_TILES; it++) {
		struct group gr;
		int cols, byrows, lo, len, m0, mm, nn;
		size_t c0;
		float *o;

		plan_group(pl, it / CPU_TILES, n, &gr);
		cols = n * gr.size;
		byrows = K >= cols;
		if (!cpu_tile(byrows ? K : cols, it % CPU_TILES, &lo, &len))
			continue;
		m0 = byrows ? lo : 0;
		mm = byrows ? len : K;
		c0 = gr.co + (byrows ? 0 : (size_t)lo);
		nn = byrows ? cols : len;
		o = out + (size_t)m0 * N + c0;
		if (group_empty(&gr)) {
			for (int i = 0; i < mm; i++)
				memset(o + i * N, 0, nn * sizeof(float));
		} else if (group_wide(pl, &gr)) {
			size_t r0 = taprow(pl, gr.r0, pl->hs0);

			gemm(0, !pl->flat, mm, nn, (gr.r1 - gr.r0) * pl->ls * C,
			    wt + m0 * rows + r0, rows, colat(pl, col, r0, c0,
			    N), ldcol, 0.0f, o, N);
		} else {
			for (int r = gr.r0; r < gr.r1; r++) {
				size_t r0 = taprow(pl, r, gr.s0);
				float beta = r > gr.r0 ? 1.0f : 0.0f;

				gemm(0, !pl->flat, mm, nn, (gr.s1 - gr.s0) * C,
				    wt + m0 * rows + r0, rows, colat(pl, col,
				    r0, c0, N), ldcol, beta, o, N);
			}
		}
	}
}

/*
 * dwt (K, rows) += dg (K, N) . col (rows, N)^T. A tile is a range of one
 * tap row's columns; it adds the groups in order, so every element sums
 * the same way at any thread count.
 */
static void
gemm_dweight(const struct conv_plan *pl, int n, const float *dg,
    const float *col, float *dwt)
{
	int K = pl->s->K, C = pl->tapc, G = plan_groups(pl);
	int U = pl->ls * C;
	size_t N = (size_t)n * pl->pq, rows = (size_t)pl->rows;

#pragma omp for schedule(dynamic, 1)
	for (int it = 0; it < pl->lr * CPU_TILES; it++) {
		int r = pl->hr0 + it / CPU_TILES, lo, len;

		if (!cpu_tile(U, it % CPU_TILES, &lo, &len))
			continue;
		for (int g = 0; g < G; g++) {
			struct group gr;
			int a, z;
			size_t row;

			plan_group(pl, g, n, &gr);
			if (group_empty(&gr) || r < gr.r0 || r >= gr.r1)
				continue;
			a = (gr.s0 - pl->hs0) * C;
			z = (gr.s1 - pl->hs0) * C;
			a = a > lo ? a : lo;
			z = z < lo + len ? z : lo + len;
			if (a >= z)
				continue;
			row = (size_t)(r - pl->hr0) * U + a;
			gemm(0, pl->flat, K, z - a, n * gr.size, dg + gr.co, N,
			    colat(pl, col, row, gr.co, N), pl->flat ? N : rows,
			    1.0f, dwt + row, rows);
		}
	}
}

/*
 * dcol (rows, N) = wt (K, rows)^T . dg (K, N) + beta dcol, over each
 * group's own taps and columns; other entries are left alone. Grouped
 * plans keep it transposed, (N, rows), as col.
 */
static void
gemm_dcol(const struct conv_plan *pl, int n, const float *wt,
    const float *dg, float *dcol, size_t ldd, float beta)
{
	int K = pl->s->K, C = pl->tapc, G = plan_groups(pl);
	int nblk = pl->lr > 0 ? pl->lr : 1;
	size_t N = (size_t)n * pl->pq, rows = (size_t)pl->rows;

#pragma omp for schedule(dynamic, 1)
	for (int it = 0; it < G * nblk * CPU_TILES; it++) {
		struct group gr;
		int blk = it / CPU_TILES % nblk, cols, nrow, byrows, lo, len;
		int mm, nn;
		size_t rb, m0, c0;

		plan_group(pl, it / (CPU_TILES * nblk), n, &gr);
		if (group_empty(&gr))
			continue;
		if (group_wide(pl, &gr)) {
			if (blk > 0)
				continue;
			rb = taprow(pl, gr.r0, pl->hs0);
			nrow = (gr.r1 - gr.r0) * pl->ls * C;
		} else {
			if (gr.r0 + blk >= gr.r1)
				continue;
			rb = taprow(pl, gr.r0 + blk, gr.s0);
			nrow = (gr.s1 - gr.s0) * C;
		}
		cols = n * gr.size;
		byrows = nrow >= cols;
		if (!cpu_tile(byrows ? nrow : cols, it % CPU_TILES, &lo, &len))
			continue;
		m0 = rb + (byrows ? (size_t)lo : 0);
		mm = byrows ? len : nrow;
		c0 = gr.co + (byrows ? 0 : (size_t)lo);
		nn = byrows ? cols : len;
		if (pl->flat)
			gemm(1, 0, mm, nn, K, wt + m0, rows, dg + c0, N, beta,
			    dcol + m0 * ldd + c0, ldd);
		else
			gemm(1, 0, nn, mm, K, dg + c0, N, wt + m0, rows, beta,
			    dcol + c0 * rows + m0, rows);
	}
}

/* ------------------------------------------------------------------------ */
/* copies (called by every thread of a team)                                */

/* The output columns q whose input column q*stride - pad + sx lies inside
 * [0, W): q0 <= q < q1. */
static void
conv_qrange(const struct conv_shape *s, int sx, int *q0, int *q1)
{
	int lo = s->pad - sx, hi = s->W - 1 + s->pad - sx;

	*q0 = lo > 0 ? (lo + s->stride - 1) / s->stride : 0;
	*q1 = hi >= 0 ? hi / s->stride + 1 : 0;
	if (*q1 > s->Q)
		*q1 = s->Q;
	if (*q1 < *q0)
		*q1 = *q0;
}

/* A stretch of one output row (b, p) in a column range: q0 <= q < q0+len
 * lands at column j. */
struct seg {
	int b, p, q0, len;
	size_t j;
};

#define SEGS	64

/*
 * Flat im2col, rows row0 <= (c,r,s) < row1 and columns lo <= (b,p,q) < hi
 * of col (CRS, ldc) whose first column is column c0, zeros where the
 * window is in the padding; inp is the chunk's first sample. Called by one
 * thread. The columns are cut into output-row stretches once, up to SEGS
 * at a time, and every row reuses the cut.
 */
static void
im2col_block(const struct conv_shape *s, float *col, size_t ldc, size_t c0,
    const float *inp, long row0, long row1, size_t lo, size_t hi)
{
	int R = s->R, S = s->S, Q = s->Q, st = s->stride, pad = s->pad;
	size_t PQ = (size_t)s->P * Q, HW = (size_t)s->H * s->W;
	struct seg sg[SEGS];

	while (lo < hi) {
		int ns = 0;

		for (; ns < SEGS && lo < hi; ns++) {
			size_t rem = lo % PQ;
			int q = (int)(rem % Q), len = Q - q;

			if ((size_t)len > hi - lo)
				len = (int)(hi - lo);
			sg[ns] = (struct seg){ (int)(lo / PQ), (int)(rem / Q),
			    q, len, lo - c0 };
			lo += len;
		}
		for (long row = row0; row < row1; row++) {
			int c = (int)(row / (R * S)), r = (int)(row / S % R);
			int sx = (int)(row % S), qa, qb;
			float *d = col + (size_t)row * ldc;

			conv_qrange(s, sx, &qa, &qb);
			for (int k = 0; k < ns; k++) {
				const struct seg *g = &sg[k];
				int ih = g->p * st - pad + r, i = 0, e;
				int q = g->q0, len = g->len;
				float *o = d + g->j;
				const float *xr;

				if (ih < 0 || ih >= s->H) {
					memset(o, 0, len * sizeof(float));
					continue;
				}
				xr = inp + ((size_t)g->b * s->C + c) * HW +
				    (size_t)ih * s->W - pad + sx;
				for (; i < len && q + i < qa; i++)
					o[i] = 0;
				e = qb - q < len ? qb - q : len;
				if (st == 1 && e - i >= 16) {
					memcpy(o + i, xr + q + i,
					    (e - i) * sizeof(float));
					i = e;
				} else if (st == 1)
					for (; i < e; i++)
						o[i] = xr[q + i];
				else
					for (; i < e; i++)
						o[i] = xr[(size_t)(q + i) * st];
				for (; i < len; i++)
					o[i] = 0;
			}
		}
	}
}

/*
 * inp (n,C,H,W) -> col: each group's taps at its positions. Grouped plans
 * are small maps, so col is transposed, (n*PQ, rows): a tap's channels are
 * the long inner loop, and a sample's few planes stay in L1.
 */
static void
im2col(const struct conv_plan *pl, float *col, const float *inp, int n)
{
	const struct conv_shape *s = pl->s;
	int G = plan_groups(pl), st = s->stride, pad = s->pad;
	size_t N = (size_t)n * pl->pq, HW = (size_t)s->H * s->W;

	if (pl->flat) {
#pragma omp for collapse(2) schedule(static)
		for (long row = 0; row < pl->rows; row++)
			for (int b = 0; b < n; b++)
				im2col_block(s, col, N, 0, inp, row, row + 1,
				    b * pl->pq, (b + 1) * pl->pq);
		return;
	}
#pragma omp for collapse(2) schedule(static)
	for (int b = 0; b < n; b++)
		for (int g = 0; g < G; g++) {
			const struct group *gr = &pl->grp[g];
			const float *x = inp + (size_t)b * s->C * HW;
			float *d = col + (n * gr->pos0 + (size_t)b * gr->size) *
			    pl->rows;

			for (int p = gr->p0; p < gr->p1; p++)
			for (int q = gr->q0; q < gr->q1; q++, d += pl->rows)
			for (int r = gr->r0; r < gr->r1; r++)
			for (int sx = gr->s0; sx < gr->s1; sx++) {
				const float *xs = x + (size_t)(p * st - pad +
				    r) * s->W + q * st - pad + sx;
				float *dd = d + taprow(pl, r, sx);

				for (int c = 0; c < s->C; c++)
					dd[c] = xs[(size_t)c * HW];
			}
		}
}

/* Flat col2im of one plane: x (H,W) += the R*S rows of dcol at d (ld N). */
static void
col2im_plane(const struct conv_shape *s, float *x, const float *d, size_t N)
{
	int P = s->P, Q = s->Q, st = s->stride, pad = s->pad;

	for (int r = 0; r < s->R; r++)
		for (int sx = 0; sx < s->S; sx++, d += N) {
			const float *dr = d;
			int q0, q1;

			conv_qrange(s, sx, &q0, &q1);
			for (int p = 0; p < P; p++, dr += Q) {
				int ih = p * st - pad + r;
				float *xr;

				if (ih < 0 || ih >= s->H)
					continue;
				xr = x + (size_t)ih * s->W - pad + sx;
				for (int q = q0; q < q1; q++)
					xr[(size_t)q * st] += dr[q];
			}
		}
}

/*
 * dcol -> dinp (n,C,H,W) +=. One thread owns each plane and adds groups,
 * positions and taps in order: no races, one summation order.
 */
static void
col2im(const struct conv_plan *pl, float *dinp, const float *dcol, int n)
{
	const struct conv_shape *s = pl->s;
	int G = plan_groups(pl), st = s->stride, pad = s->pad;
	size_t N = (size_t)n * pl->pq, HW = (size_t)s->H * s->W;

	if (pl->flat) {
#pragma omp for collapse(2) schedule(static)
		for (int b = 0; b < n; b++)
			for (int c = 0; c < s->C; c++)
				col2im_plane(s, dinp + ((size_t)b * s->C + c) *
				    HW, dcol + (size_t)c * s->R * s->S * N +
				    (size_t)b * pl->pq, N);
		return;
	}
#pragma omp for collapse(2) schedule(static)
	for (int b = 0; b < n; b++)
		for (int c0 = 0; c0 < s->C; c0 += CBLK) {
			float *x = dinp + (size_t)b * s->C * HW;
			int c1 = c0 + CBLK < s->C ? c0 + CBLK : s->C;

			for (int g = 0; g < G; g++) {
				const struct group *gr = &pl->grp[g];
				const float *d = dcol + (n * gr->pos0 +
				    (size_t)b * gr->size) * pl->rows;

				for (int p = gr->p0; p < gr->p1; p++)
				for (int q = gr->q0; q < gr->q1; q++,
				    d += pl->rows)
				for (int r = gr->r0; r < gr->r1; r++)
				for (int sx = gr->s0; sx < gr->s1; sx++) {
					float *xs = x + (size_t)(p * st - pad +
					    r) * s->W + q * st - pad + sx;
					const float *dd = d + taprow(pl, r, sx);

					for (int c = c0; c < c1; c++)
						xs[(size_t)c * HW] += dd[c];
				}
			}
		}
}

/* tmp (K, n*PQ) in group order + bias (K) or NULL -> out (n,K,P,Q) */
static void
conv_scatter(const struct conv_plan *pl, float *out, const float *tmp,
    const float *bias, int n)
{
	int K = pl->s->K, Q = pl->s->Q, G = plan_groups(pl);
	size_t N = (size_t)n * pl->pq;

#pragma omp for collapse(2) schedule(static)
	for (int b = 0; b < n; b++)
		for (int k = 0; k < K; k++) {
			float *o = out + ((size_t)b * K + k) * pl->pq;
			float bk = bias != NULL ? bias[k] : 0.0f;

			for (int g = 0; g < G; g++) {
				const struct group *gr = &pl->grp[g];
				const float *t = tmp + (size_t)k * N +
				    n * gr->pos0 + (size_t)b * gr->size;

				for (int p = gr->p0; p < gr->p1; p++)
					for (int q = gr->q0; q < gr->q1; q++)
						o[(size_t)p * Q + q] =
						    *t++ + bk;
			}
		}
}

/* dout (n,K,P,Q) -> tmp (K, n*PQ) in group order */
static void
conv_gather(const struct conv_plan *pl, float *tmp, const float *dout, int n)
{
	int K = pl->s->K, Q = pl->s->Q, G = plan_groups(pl);
	size_t N = (size_t)n * pl->pq;

#pragma omp for collapse(2) schedule(static)
	for (int b = 0; b < n; b++)
		for (int k = 0; k < K; k++) {
			const float *d = dout + ((size_t)b * K + k) * pl->pq;

			for (int g = 0; g < G; g++) {
				const struct group *gr = &pl->grp[g];
				float *t = tmp + (size_t)k * N + n * gr->pos0 +
				    (size_t)b * gr->size;

				for (int p = gr->p0; p < gr->p1; p++)
					for (int q = gr->q0; q < gr->q1; q++)
						*t++ = d[(size_t)p * Q + q];
			}
		}
}

/* out (K,PQ) += bias (K) */
static void
conv_addbias(float *out, const float *bias, int K, size_t PQ)
{
#pragma omp for schedule(static)
	for (int k = 0; k < K; k++) {
		float *o = out + (size_t)k * PQ;

		for (size_t i = 0; i < PQ; i++)
			o[i] += bias[k];
	}
}

/* w (K,C,R,S) -> wp (K, rows): the hull's taps, tap-major */
static void
weight_to_taps(const struct conv_plan *pl, float *wp, const float *w)
{
	const struct conv_shape *s = pl->s;
	size_t RS = (size_t)s->R * s->S;

#pragma omp for schedule(static)
	for (int k = 0; k < s->K; k++)
		for (int c = 0; c < s->C; c++) {
			const float *a = w + ((size_t)k * s->C + c) * RS;
			float *z = wp + (size_t)k * pl->rows + c;

			for (int r = pl->hr0; r < pl->hr0 + pl->lr; r++)
				for (int x = pl->hs0; x < pl->hs0 + pl->ls; x++)
					z[taprow(pl, r, x)] = a[r * s->S + x];
		}
}

/* dw (K,C,R,S) += dwp (K, rows) */
static void
taps_to_weight(const struct conv_plan *pl, float *dw, const float *dwp)
{
	const struct conv_shape *s = pl->s;
	size_t RS = (size_t)s->R * s->S;

#pragma omp for schedule(static)
	for (int k = 0; k < s->K; k++)
		for (int c = 0; c < s->C; c++) {
			float *a = dw + ((size_t)k * s->C + c) * RS;
			const float *z = dwp + (size_t)k * pl->rows + c;

			for (int r = pl->hr0; r < pl->hr0 + pl->lr; r++)
				for (int x = pl->hs0; x < pl->hs0 + pl->ls; x++)
					a[r * s->S + x] += z[taprow(pl, r, x)];
		}
}

/* dbias (K) += sum over (B,PQ) of dout, in double, one thread per k */
static void
conv_dbias(float *dbias, const float *dout, int B, int K, size_t PQ)
{
#pragma omp for schedule(static)
	for (int k = 0; k < K; k++) {
		double sum = 0;

		for (int b = 0; b < B; b++) {
			const float *d = dout + ((size_t)b * K + k) * PQ;

			for (size_t i = 0; i < PQ; i++)
				sum += d[i];
		}
		dbias[k] += (float)sum;
	}
}

/* ------------------------------------------------------------------------ */
/* forward and backward                                                     */

/*
 * Flat forward, out (K, N) = w (K, CRS) . col (CRS, N), column tile by
 * column tile: each tile's columns, stored on their own (CRS, len), are
 * still in cache for its GEMM.
 */
static void
forward_fused(const struct conv_shape *s, float *colbuf, int n,
    const float *w, const float *inp, float *out, float beta)
{
	int K = s->K;
	size_t N = (size_t)n * s->P * s->Q;
	size_t rows = (size_t)s->C * s->R * s->S;

#pragma omp for schedule(dynamic, 1)
	for (int t = 0; t < CPU_TILES; t++) {
		int lo, len;
		float *col;

		if (!cpu_tile((int)N, t, &lo, &len))
			continue;
		col = colbuf + (size_t)lo * rows;

		im2col_block(s, col, len, lo, inp, 0, (long)rows, lo,
		    (size_t)lo + len);
		gemm(0, 0, K, len, (int)rows, w, rows, col, len, beta,
		    out + lo, N);
	}
}

static int
conv_parallel(const struct conv_shape *s)
{
	return (size_t)s->B * s->K * s->P * s->Q * s->C * s->R * s->S >=
	    PAR_MIN_MACS;
}

/*
 * Flat dw (K, CRS) += dg (K, N) . col (CRS, N)^T, row tile by row tile:
 * each tile builds its own rows of col and uses them while in cache.
 */
static void
dweight_fused(const struct conv_plan *pl, int n, const float *dg,
    const float *inp, float *dw)
{
	int K = pl->s->K;
	size_t N = (size_t)n * pl->pq, rows = (size_t)pl->rows;

#pragma omp for schedule(dynamic, 1)
	for (int t = 0; t < CPU_TILES; t++) {
		int lo, len;

		if (!cpu_tile((int)rows, t, &lo, &len))
			continue;
		im2col_block(pl->s, pl->col, N, 0, inp, lo, lo + len, 0, N);
		gemm(0, 1, K, len, (int)N, dg, N, pl->col + (size_t)lo * N, N,
		    1.0f, dw + lo, rows);
	}
}

/* w (K,C,R,S) -> wf (C,K,R,S), each kernel turned by 180 degrees */
static void
weight_flip(const struct conv_shape *s, float *wf, const float *w)
{
	size_t RS = (size_t)s->R * s->S;

#pragma omp for schedule(static)
	for (int c = 0; c < s->C; c++)
		for (int k = 0; k < s->K; k++) {
			const float *a = w + ((size_t)k * s->C + c) * RS;
			float *z = wf + ((size_t)c * s->K + k) * RS;

			for (size_t i = 0; i < RS; i++)
				z[i] = a[RS - 1 - i];
		}
}

/* out (B,K,P,Q) = inp (B,C,H,W) * w (K,C,R,S) + bias (K) or NULL */
void
cpu_conv2d_forward(const struct conv_shape *s, float *out, const float *inp,
    const float *w, const float *bias, float *scratch)
{
	struct conv_plan pl;
	size_t PQ = (size_t)s->P * s->Q, HW = (size_t)s->H * s->W;
	int par = conv_parallel(s);

	plan_init(&pl, s, scratch);
	(void)par;
#pragma omp parallel if (par)
	{
		const float *wt = pl.perm ? pl.wp : w;

		if (pl.perm)
			weight_to_taps(&pl, pl.wp, w);
		for (int b0 = 0; b0 < s->B; b0 += pl.nb) {
			int n = s->B - b0 < pl.nb ? s->B - b0 : pl.nb;
			const float *x = inp + (size_t)b0 * s->C * HW;
			float *o = out + (size_t)b0 * s->K * PQ;
			float *dst = pl.natural && n == 1 ? o : pl.tmp;

			if (pl.flat && !pl.direct &&
			    (size_t)n * PQ > (size_t)s->K)
				forward_fused(s, pl.col, n, w, x, dst, 0.0f);
			else {
				if (!pl.direct)
					im2col(&pl, pl.col, x, n);
				gemm_forward(&pl, n, wt, pl.direct ? x :
				    pl.col, dst);
			}
			if (dst != o)
				conv_scatter(&pl, o, dst, bias, n);
			else if (bias != NULL)
				conv_addbias(o, bias, s->K, PQ);
		}
	}
}

/*
 * dw (K,C,R,S) += dout . col^T, dinp (B,C,H,W) += col2im(w^T . dout) or
 * NULL, dbias (K) += sum dout or NULL; chunk by chunk in sample order. The
 * weight GEMMs finish before the input-gradient ones overwrite col.
 */
void
cpu_conv2d_backward(const struct conv_shape *s, float *dinp, float *dw,
    float *dbias, const float *dout, const float *inp, const float *w,
    float *scratch)
{
	struct conv_plan pl;
	size_t PQ = (size_t)s->P * s->Q, HW = (size_t)s->H * s->W;
	int par = conv_parallel(s);

	plan_init(&pl, s, scratch);
	(void)par;
#pragma omp parallel if (par)
	{
		const float *wt = pl.perm ? pl.wp : w;
		float *dwt = pl.perm ? pl.dwp : dw;

		if (dbias != NULL)
			conv_dbias(dbias, dout, s->B, s->K, PQ);
		if (pl.tconv && dinp != NULL)
			weight_flip(s, pl.wf, w);
		if (pl.perm) {
			if (dinp != NULL)
				weight_to_taps(&pl, pl.wp, w);
#pragma omp for schedule(static)
			for (int k = 0; k < s->K; k++)
				memset(pl.dwp + (size_t)k * pl.rows, 0,
				    (size_t)pl.rows * sizeof(float));
		}
		for (int b0 = 0; b0 < s->B; b0 += pl.nb) {
			int n = s->B - b0 < pl.nb ? s->B - b0 : pl.nb;
			const float *x = inp + (size_t)b0 * s->C * HW;
			const float *d = dout + (size_t)b0 * s->K * PQ;
			const float *dg = pl.natural && n == 1 ? d : pl.tmp;
			float *dx = dinp != NULL ? dinp + (size_t)b0 * s->C *
			    HW : NULL;

			if (dg != d)
				conv_gather(&pl, pl.tmp, d, n);
			if (pl.flat && !pl.direct)
				dweight_fused(&pl, n, dg, x, dw);
			else {
				if (!pl.direct)
					im2col(&pl, pl.col, x, n);
				gemm_dweight(&pl, n, dg, pl.direct ? x :
				    pl.col, dwt);
			}
			if (dx == NULL)
				continue;
			if (pl.tconv) {
				forward_fused(&pl.ts, pl.col, n, pl.wf, d, dx,
				    1.0f);
				continue;
			}
			if (pl.direct) {
				// dinp (C, HW) += w (K, C)^T . dout (K, HW)
				gemm_dcol(&pl, n, wt, dg, dx, PQ, 1.0f);
				continue;
			}
			gemm_dcol(&pl, n, wt, dg, pl.col, (size_t)n * PQ, 0.0f);
			col2im(&pl, dx, pl.col, n);
		}
		if (pl.perm)
			taps_to_weight(&pl, dw, pl.dwp);
	}
}
