/*
 * test_vit_ops.c - the CPU backend's transformer kernels (matmul, layer
 * norm, attention, patch and token embedding, cross-entropy) against naive
 * double references, their backward passes against central differences of
 * those references, accumulation into gradients, and bit-identical results
 * across runs and thread counts.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "check.h"
#include "cpu/cpu.h"

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static float
frand(void)
{
	return t_frand(&rng_state);
}

static double *
dalloc(size_t n)
{
	double *p = calloc(n ? n : 1, sizeof *p);

	CHECK(p != NULL);
	return p;
}

static float *
frandom(size_t n, float scale, float shift)
{
	float *p = t_falloc(n);
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = shift + scale * frand();
	return p;
}

static double *
todouble(const float *x, size_t n)
{
	double *d = dalloc(n);
	size_t i;

	for (i = 0; i < n; i++)
		d[i] = x[i];
	return d;
}

/* got - base against ref: the part a backward pass accumulated. */
static double
check_added(const char *what, const float *got, const float *base,
    const double *ref, size_t n, double tol, double eps)
{
	double *want = dalloc(n), max;
	size_t i;

	for (i = 0; i < n; i++)
		want[i] = (double)base[i] + ref[i];
	max = t_check_close(what, got, want, n, tol, eps);
	free(want);
	return max;
}

/*
 * Central differences of L = sum(dout . f(x)) with respect to the double
 * array x, which the reference f reads through ctx.
 */
typedef void (*ref_fn)(void *ctx, double *out);

static void
fd_grad(ref_fn f, void *ctx, double *x, size_t n, const double *dout,
    size_t nout, double *grad)
{
	double *o = dalloc(nout), save, h, lp, lm;
	size_t i, j;

	for (i = 0; i < n; i++) {
		save = x[i];
		h = 1e-5 * fmax(1.0, fabs(save));
		x[i] = save + h;
		f(ctx, o);
		for (lp = 0, j = 0; j < nout; j++)
			lp += dout[j] * o[j];
		x[i] = save - h;
		f(ctx, o);
		for (lm = 0, j = 0; j < nout; j++)
			lm += dout[j] * o[j];
		x[i] = save;
		grad[i] = (lp - lm) / (2 * h);
	}
	free(o);
}

/*
 * The directional derivative of L along u, by central differences: a
 * whole-gradient check for shapes too big to difference per element.
 */
static double
fd_dir(ref_fn f, void *ctx, double *x, size_t n, const double *u,
    const double *dout, size_t nout)
{
	double *save = dalloc(n), *o = dalloc(nout), h = 1e-4, lp = 0, lm = 0;
	size_t i;

	memcpy(save, x, n * sizeof *x);
	for (i = 0; i < n; i++)
		x[i] = save[i] + h * u[i];
	f(ctx, o);
	for (i = 0; i < nout; i++)
		lp += dout[i] * o[i];
	for (i = 0; i < n; i++)
		x[i] = save[i] - h * u[i];
	f(ctx, o);
	for (i = 0; i < nout; i++)
		lm += dout[i] * o[i];
	memcpy(x, save, n * sizeof *x);
	free(save);
	free(o);
	return (lp - lm) / (2 * h);
}

static void
check_dir(const char *what, const float *g, const double *u, size_t n,
    double want)
{
	double got = 0, norm = 0, e;
	size_t i;

	for (i = 0; i < n; i++) {
		got += g[i] * u[i];
		norm += (double)g[i] * g[i];
	}
	e = fabs(got - want);
	t_diag("%s: <grad,u> %.9g, differences %.9g, error %.2g", what, got,
	    want, e);
	if (!(e <= 1e-4 * sqrt(norm * n) + 1e-5))
		t_fail(__FILE__, __LINE__, "%s: directional derivative %.9g, "
		    "want %.9g", what, got, want);
}

/* ------------------------------------------------------------------------ */
/* matmul                                                                   */

struct mm {
	int M, K, N;
	double *inp, *w, *bias;		/* bias may be NULL */
};

static void
ref_matmul(void *ctx, double *out)
{
	struct mm *c = ctx;
	int i, j, k;

	for (i = 0; i < c->M; i++)
		for (j = 0; j < c->N; j++) {
			double s = c->bias ? c->bias[j] : 0.0;

			for (k = 0; k < c->K; k++)
				s += c->inp[(size_t)i * c->K + k] *
				    c->w[(size_t)j * c->K + k];
			out[(size_t)i * c->N + j] = s;
		}
}

static void
matmul_case(int M, int K, int N, int bias, int want_dinp, double *maxf,
    double *maxb)
{
	size_t ni = (size_t)M * K, nw = (size_t)N * K, no = (size_t)M * N;
	float *inp = frandom(ni, 1, 0), *w = frandom(nw, 1, 0);
	float *b = bias ? frandom(N, 1, 0) : NULL, *out = t_falloc(no);
	float *dout = frandom(no, 1, 0), *dinp = t_falloc(ni), *dw = t_falloc(nw);
	float *db = bias ? t_falloc(N) : NULL;
	struct mm c = { M, K, N, todouble(inp, ni), todouble(w, nw),
	    bias ? todouble(b, N) : NULL };
	double *rout = dalloc(no), *rdout = todouble(dout, no);
	double *gi = dalloc(ni), *gw = dalloc(nw), *gb = dalloc(N), e;
	double tol = 1e-5 * sqrt((double)K + 1);

	cpu_matmul_forward(out, inp, w, b, M, K, N);
	ref_matmul(&c, rout);
	e = t_check_close("matmul out", out, rout, no, tol, 1e-5);
	if (e > *maxf)
		*maxf = e;

	cpu_matmul_backward(want_dinp ? dinp : NULL, dw, db, dout, inp, w,
	    M, K, N);
	fd_grad(ref_matmul, &c, c.inp, ni, rdout, no, gi);
	fd_grad(ref_matmul, &c, c.w, nw, rdout, no, gw);
	tol = 1e-5 * sqrt((double)(M > N ? M : N) + 1);
	if (want_dinp)
		e = t_check_close("matmul dinp", dinp, gi, ni, tol, 1e-4);
	else
		for (size_t i = 0; i < ni; i++)
			CHECK(dinp[i] == 0.0f);
	if (e > *maxb)
		*maxb = e;
	e = t_check_close("matmul dw", dw, gw, nw, tol, 1e-4);
	if (e > *maxb)
		*maxb = e;
	if (bias) {
		fd_grad(ref_matmul, &c, c.bias, N, rdout, no, gb);
		e = t_check_close("matmul dbias", db, gb, N, tol, 1e-4);
		if (e > *maxb)
			*maxb = e;
	}
	free(inp); free(w); free(b); free(out); free(dout); free(dinp);
	free(dw); free(db); free(c.inp); free(c.w); free(c.bias);
	free(rout); free(rdout); free(gi); free(gw); free(gb);
}

TEST(matmul_against_reference)
{
	static const int shapes[][3] = {
		{ 1, 1, 1 }, { 7, 5, 3 }, { 3, 17, 9 }, { 33, 16, 8 },
		{ 10, 40, 12 },
	};
	double maxf = 0, maxb = 0;
	size_t s;

	for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		matmul_case(shapes[s][0], shapes[s][1], shapes[s][2], 1, 1,
		    &maxf, &maxb);
		matmul_case(shapes[s][0], shapes[s][1], shapes[s][2], 0,
		    s % 2, &maxf, &maxb);
	}
	t_diag("max error: forward %.3g, backward vs differences %.3g", maxf,
	    maxb);
}

/* A shape past OpenBLAS's blocking, checked as a whole gradient. */
TEST(matmul_large_directional)
{
	int M = 130, K = 300, N = 70;
	size_t ni = (size_t)M * K, nw = (size_t)N * K, no = (size_t)M * N;
	float *inp = frandom(ni, 1, 0), *w = frandom(nw, 1, 0);
	float *b = frandom(N, 1, 0), *out = t_falloc(no);
	float *dout = frandom(no, 1, 0);
	float *dinp = t_falloc(ni), *dw = t_falloc(nw), *db = t_falloc(N);
	struct mm c = { M, K, N, todouble(inp, ni), todouble(w, nw),
	    todouble(b, N) };
	double *rout = dalloc(no), *rdout = todouble(dout, no), *u, e;
	size_t i;

	cpu_matmul_forward(out, inp, w, b, M, K, N);
	ref_matmul(&c, rout);
	e = t_check_close("matmul out", out, rout, no, 1e-4, 1e-5);
	t_diag("forward max error %.3g", e);
	cpu_matmul_backward(dinp, dw, db, dout, inp, w, M, K, N);

	u = dalloc(ni);
	for (i = 0; i < ni; i++)
		u[i] = frand();
	check_dir("dinp", dinp, u, ni, fd_dir(ref_matmul, &c, c.inp, ni, u,
	    rdout, no));
	free(u);
	u = dalloc(nw);
	for (i = 0; i < nw; i++)
		u[i] = frand();
	check_dir("dw", dw, u, nw, fd_dir(ref_matmul, &c, c.w, nw, u, rdout,
	    no));
	free(u);
	u = dalloc(N);
	for (i = 0; i < (size_t)N; i++)
		u[i] = frand();
	check_dir("dbias", db, u, N, fd_dir(ref_matmul, &c, c.bias, N, u,
	    rdout, no));
	free(u);
	free(inp); free(w); free(b); free(out); free(dout); free(dinp);
	free(dw); free(db); free(c.inp); free(c.w); free(c.bias);
	free(rout); free(rdout);
}

/* Backward adds to what the gradients hold; twice adds twice. */
TEST(matmul_accumulates)
{
	int M = 9, K = 11, N = 6;
	size_t ni = (size_t)M * K, nw = (size_t)N * K, no = (size_t)M * N, i;
	float *inp = frandom(ni, 1, 0), *w = frandom(nw, 1, 0);
	float *dout = frandom(no, 1, 0);
	float *d1[3] = { t_falloc(ni), t_falloc(nw), t_falloc(N) };
	float *d2[3] = { t_falloc(ni), t_falloc(nw), t_falloc(N) };
	float *pre[3] = { frandom(ni, 1, 0), frandom(nw, 1, 0),
	    frandom(N, 1, 0) };
	size_t n[3] = { ni, nw, N };
	double max = 0, e;
	int k;

	cpu_matmul_backward(d1[0], d1[1], d1[2], dout, inp, w, M, K, N);
	for (k = 0; k < 3; k++)
		memcpy(d2[k], pre[k], n[k] * sizeof(float));
	cpu_matmul_backward(d2[0], d2[1], d2[2], dout, inp, w, M, K, N);
	for (k = 0; k < 3; k++) {
		double *ref = todouble(d1[k], n[k]);

		e = check_added("pre + grad", d2[k], pre[k], ref, n[k], 1e-6,
		    1e-6);
		if (e > max)
			max = e;
		free(ref);
	}
	/* twice from zero = 2 x once */
	for (k = 0; k < 3; k++)
		memset(d2[k], 0, n[k] * sizeof(float));
	cpu_matmul_backward(d2[0], d2[1], d2[2], dout, inp, w, M, K, N);
	cpu_matmul_backward(d2[0], d2[1], d2[2], dout, inp, w, M, K, N);
	for (k = 0; k < 3; k++)
		for (i = 0; i < n[k]; i++) {
			e = fabs(d2[k][i] - 2.0 * d1[k][i]);
			CHECK(e <= 1e-6 * (1 + fabs(d1[k][i])));
			if (e > max)
				max = e;
		}
	t_diag("max accumulation error %.3g", max);
	for (k = 0; k < 3; k++) {
		free(d1[k]);
		free(d2[k]);
		free(pre[k]);
	}
	free(inp); free(w); free(dout);
}

/* ------------------------------------------------------------------------ */
/* layer norm                                                               */

struct ln {
	int M, C;
	double eps;
	double *inp, *gamma, *beta;
};

static void
ref_layernorm(void *ctx, double *out)
{
	struct ln *c = ctx;
	int i, j;

	for (i = 0; i < c->M; i++) {
		const double *x = c->inp + (size_t)i * c->C;
		double m = 0, v = 0;

		for (j = 0; j < c->C; j++)
			m += x[j];
		m /= c->C;
		for (j = 0; j < c->C; j++)
			v += (x[j] - m) * (x[j] - m);
		v /= c->C;
		for (j = 0; j < c->C; j++)
			out[(size_t)i * c->C + j] = (x[j] - m) / sqrt(v +
			    c->eps) * c->gamma[j] + c->beta[j];
	}
}

TEST(layernorm_against_reference)
{
	static const int shapes[][2] = {
		{ 3, 1 }, { 5, 7 }, { 4, 64 }, { 2, 193 }, { 17, 24 },
	};
	double maxf = 0, maxb = 0, maxs = 0, e;
	size_t s;

	for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		int M = shapes[s][0], C = shapes[s][1], i;
		size_t n = (size_t)M * C;
		/* an offset mean checks the variance is taken centred */
		float *inp = frandom(n, 1.5f, 3.0f), *g = frandom(C, 1, 0.5f);
		float *b = frandom(C, 1, 0), *out = t_falloc(n);
		float *mean = t_falloc(M), *rstd = t_falloc(M);
		float *dout = frandom(n, 1, 0), *dinp = t_falloc(n);
		float *dg = t_falloc(C), *db = t_falloc(C);
		struct ln c = { M, C, 1e-6, todouble(inp, n), todouble(g, C),
		    todouble(b, C) };
		double *rout = dalloc(n), *rdout = todouble(dout, n);
		double *gi = dalloc(n), *gg = dalloc(C), *gb = dalloc(C);

		cpu_layernorm_forward(out, mean, rstd, inp, g, b, M, C, 1e-6f);
		ref_layernorm(&c, rout);
		e = t_check_close("layernorm out", out, rout, n, 1e-5, 1e-5);
		maxf = fmax(maxf, e);
		for (i = 0; i < M; i++) {
			double m = 0, v = 0;
			int j;

			for (j = 0; j < C; j++)
				m += c.inp[(size_t)i * C + j];
			m /= C;
			for (j = 0; j < C; j++)
				v += pow(c.inp[(size_t)i * C + j] - m, 2);
			v = 1 / sqrt(v / C + 1e-6);
			e = t_check_close("mean", &mean[i], &m, 1, 1e-6, 1e-6);
			maxs = fmax(maxs, e);
			e = t_check_close("rstd", &rstd[i], &v, 1, 1e-6, 1e-5);
			maxs = fmax(maxs, e / v);
		}

		cpu_layernorm_backward(dinp, dg, db, dout, inp, g, mean, rstd,
		    M, C);
		fd_grad(ref_layernorm, &c, c.inp, n, rdout, n, gi);
		fd_grad(ref_layernorm, &c, c.gamma, C, rdout, n, gg);
		fd_grad(ref_layernorm, &c, c.beta, C, rdout, n, gb);
		e = t_check_close("layernorm dinp", dinp, gi, n, 2e-5, 1e-4);
		maxb = fmax(maxb, e);
		e = t_check_close("layernorm dgamma", dg, gg, C, 2e-5, 1e-4);
		maxb = fmax(maxb, e);
		e = t_check_close("layernorm dbeta", db, gb, C, 2e-5, 1e-4);
		maxb = fmax(maxb, e);

		/* accumulation: a second pass adds the same again */
		cpu_layernorm_backward(dinp, dg, db, dout, inp, g, mean, rstd,
		    M, C);
		for (i = 0; i < C; i++)
			gb[i] *= 2;
		t_check_close("layernorm dbeta twice", db, gb, C, 4e-5, 1e-4);
		for (size_t k = 0; k < n; k++)
			gi[k] *= 2;
		t_check_close("layernorm dinp twice", dinp, gi, n, 4e-5, 1e-4);

		free(inp); free(g); free(b); free(out); free(mean); free(rstd);
		free(dout); free(dinp); free(dg); free(db); free(c.inp);
		free(c.gamma); free(c.beta); free(rout); free(rdout); free(gi);
		free(gg); free(gb);
	}
	t_diag("max error: forward %.3g, mean/rstd (relative) %.3g, backward "
	    "vs differences %.3g", maxf, maxs, maxb);
}

/* ------------------------------------------------------------------------ */
/* attention                                                                */

struct at {
	int B, T, C, NH;
	double *qkv;
	double *att;			/* filled by the reference, or NULL */
};

static void
ref_attention(void *ctx, double *out)
{
	struct at *c = ctx;
	int B = c->B, T = c->T, C = c->C, NH = c->NH, hd = C / NH;
	double *row = dalloc(T), scale = 1 / sqrt((double)hd);
	int b, h, i, j, d;

	for (b = 0; b < B; b++)
		for (h = 0; h < NH; h++)
			for (i = 0; i < T; i++) {
				const double *q = c->qkv + ((size_t)b * T + i) *
				    3 * C + h * hd;
				double max = -INFINITY, sum = 0;

				for (j = 0; j < T; j++) {
					const double *k = c->qkv + ((size_t)b *
					    T + j) * 3 * C + C + h * hd;
					double s = 0;

					for (d = 0; d < hd; d++)
						s += q[d] * k[d];
					row[j] = s * scale;
					max = fmax(max, row[j]);
				}
				for (j = 0; j < T; j++)
					sum += (row[j] = exp(row[j] - max));
				for (j = 0; j < T; j++) {
					row[j] /= sum;
					if (c->att != NULL)
						c->att[(((size_t)b * NH + h) *
						    T + i) * T + j] = row[j];
				}
				for (d = 0; d < hd; d++) {
					const double *v = c->qkv + (size_t)b *
					    T * 3 * C + 2 * C + h * hd + d;
					double s = 0;

					for (j = 0; j < T; j++)
						s += row[j] *
						    v[(size_t)j * 3 * C];
					out[((size_t)b * T + i) * C + h * hd +
					    d] = s;
				}
			}
	free(row);
}

static void
attention_case(int B, int T, int C, int NH, int per_element, double *maxf,
    double *maxb)
{
	size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
	size_t na = (size_t)B * NH * T * T;
	float *qkv = frandom(nq, 1.5f, 0), *out = t_falloc(no), *att = t_falloc(na);
	float *dout = frandom(no, 1, 0), *dqkv = t_falloc(nq);
	float *scratch = t_falloc(cpu_attention_scratch(B, T, C, NH));
	struct at c = { B, T, C, NH, todouble(qkv, nq), dalloc(na) };
	double *rout = dalloc(no), *rdout = todouble(dout, no), *g, e;
	size_t i;

	cpu_attention_forward(out, att, qkv, B, T, C, NH);
	ref_attention(&c, rout);
	e = t_check_close("attention out", out, rout, no, 1e-5, 1e-5);
	*maxf = fmax(*maxf, e);
	e = t_check_close("attention att", att, c.att, na, 1e-6, 1e-5);
	*maxf = fmax(*maxf, e);
	free(c.att);
	c.att = NULL;

	cpu_attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
	if (per_element) {
		g = dalloc(nq);
		fd_grad(ref_attention, &c, c.qkv, nq, rdout, no, g);
		e = t_check_close("attention dqkv", dqkv, g, nq, 2e-5, 1e-4);
		*maxb = fmax(*maxb, e);
		/* a second pass adds the same again */
		cpu_attention_backward(dqkv, scratch, dout, qkv, att, B, T, C,
		    NH);
		for (i = 0; i < nq; i++)
			g[i] *= 2;
		t_check_close("attention dqkv twice", dqkv, g, nq, 4e-5, 1e-4);
	} else {
		g = dalloc(nq);
		for (i = 0; i < nq; i++)
			g[i] = frand();
		check_dir("attention dqkv", dqkv, g, nq, fd_dir(ref_attention,
		    &c, c.qkv, nq, g, rdout, no));
	}
	free(g);
	free(qkv); free(out); free(att); free(dout); free(dqkv);
	free(scratch); free(c.qkv); free(rout); free(rdout);
}

TEST(attention_against_reference)
{
	/* B, T, C, NH: one token, T prime, head size 1, many heads */
	static const int shapes[][4] = {
		{ 1, 1, 4, 1 }, { 2, 5, 12, 3 }, { 1, 7, 16, 2 },
		{ 2, 13, 24, 4 }, { 1, 17, 8, 8 }, { 3, 3, 6, 1 },
	};
	double maxf = 0, maxb = 0;
	size_t s;

	for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
		attention_case(shapes[s][0], shapes[s][1], shapes[s][2],
		    shapes[s][3], 1, &maxf, &maxb);
	t_diag("max error: forward %.3g, backward vs differences %.3g", maxf,
	    maxb);
}

/* A ViT-Ti-like shape (hd 64, T = 65) as a whole gradient, 2 threads. */
TEST(attention_large_directional)
{
	double maxf = 0, maxb = 0;

	backend_cpu()->set_threads(2);
	attention_case(3, 65, 192, 3, 0, &maxf, &maxb);
	t_diag("forward max error %.3g", maxf);
}

/* Huge scores must not overflow: the softmax subtracts the row max. */
TEST(attention_large_scores)
{
	int B = 1, T = 4, C = 2, NH = 1;
	size_t nq = (size_t)B * T * 3 * C, i;
	float *qkv = t_falloc(nq), out[8], att[16];

	for (i = 0; i < nq; i++)
		qkv[i] = (i % 3 == 0 ? 300.0f : -200.0f) + (float)i;
	cpu_attention_forward(out, att, qkv, B, T, C, NH);
	for (i = 0; i < 16; i++)
		CHECK(isfinite(att[i]) && att[i] >= 0 && att[i] <= 1);
	for (i = 0; i < 8; i++)
		CHECK(isfinite(out[i]));
	free(qkv);
}

/* ------------------------------------------------------------------------ */
/* embedding                                                                */

struct pf {
	int B, C, H, W, p;
	double *img;
};

static void
ref_patchify(void *ctx, double *out)
{
	struct pf *c = ctx;
	int gh = c->H / c->p, gw = c->W / c->p, p = c->p, b, t, ch, kh, kw;
	size_t cols = (size_t)c->C * p * p;

	for (b = 0; b < c->B; b++)
		for (t = 0; t < gh * gw; t++)
			for (ch = 0; ch < c->C; ch++)
				for (kh = 0; kh < p; kh++)
					for (kw = 0; kw < p; kw++)
						out[((size_t)b * gh * gw + t) *
						    cols + (ch * p + kh) * p +
						    kw] = c->img[(((size_t)b *
						    c->C + ch) * c->H +
						    (t / gw) * p + kh) * c->W +
						    (t % gw) * p + kw];
}

TEST(patchify_against_reference)
{
	/* B, C, H, W, p: whole patches, remainders dropped, p = 1 */
	static const int shapes[][5] = {
		{ 2, 3, 8, 12, 4 }, { 1, 3, 10, 9, 4 }, { 2, 2, 3, 5, 1 },
		{ 1, 1, 7, 7, 7 },
	};
	size_t s, i;

	for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		int B = shapes[s][0], C = shapes[s][1], H = shapes[s][2];
		int W = shapes[s][3], p = shapes[s][4];
		size_t ni = (size_t)B * C * H * W;
		size_t no = (size_t)B * (H / p) * (W / p) * C * p * p;
		float *img = frandom(ni, 1, 0), *out = t_falloc(no);
		float *dout = frandom(no, 1, 0), *dimg = frandom(ni, 1, 0);
		float *pre = malloc(ni * sizeof *pre);
		struct pf c = { B, C, H, W, p, todouble(img, ni) };
		double *rout = dalloc(no), *rdout = todouble(dout, no);
		double *g = dalloc(ni);

		CHECK(pre != NULL);
		memcpy(pre, dimg, ni * sizeof *pre);
		cpu_patchify_forward(out, img, B, C, H, W, p);
		ref_patchify(&c, rout);
		t_check_close("patchify out", out, rout, no, 0, 0);
		cpu_patchify_backward(dimg, dout, B, C, H, W, p);
		fd_grad(ref_patchify, &c, c.img, ni, rdout, no, g);
		/* dropped pixels get nothing; the rest one value each */
		check_added("patchify dimg", dimg, pre, g, ni, 1e-6, 1e-6);
		for (i = 0; i < ni; i++)
			if (g[i] == 0)
				CHECK(dimg[i] == pre[i]);
		free(img); free(out); free(dout); free(dimg); free(pre);
		free(c.img); free(rout); free(rdout); free(g);
	}
	t_diag("patchify forward exact, backward matches differences");
}

struct tk {
	int B, T, C;
	double *x, *cls, *pos;
};

static void
ref_tokens(void *ctx, double *out)
{
	struct tk *c = ctx;
	int b, t, j;

	for (b = 0; b < c->B; b++)
		for (t = 0; t <= c->T; t++)
			for (j = 0; j < c->C; j++)
				out[((size_t)b * (c->T + 1) + t) * c->C + j] =
				    (t == 0 ? c->cls[j] : c->x[((size_t)b *
				    c->T + t - 1) * c->C + j]) +
				    c->pos[(size_t)t * c->C + j];
}

TEST(tokens_against_reference)
{
	static const int shapes[][3] = { { 2, 5, 7 }, { 3, 1, 70 },
	    { 1, 4, 3 } };
	double maxf = 0, maxb = 0, e;
	size_t s;

	for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2];
		size_t nx = (size_t)B * T * C, np = (size_t)(T + 1) * C;
		size_t no = (size_t)B * (T + 1) * C;
		float *x = frandom(nx, 1, 0), *cls = frandom(C, 1, 0);
		float *pos = frandom(np, 1, 0), *out = t_falloc(no);
		float *dout = frandom(no, 1, 0), *dx = t_falloc(nx);
		float *dcls = t_falloc(C), *dpos = t_falloc(np);
		struct tk c = { B, T, C, todouble(x, nx), todouble(cls, C),
		    todouble(pos, np) };
		double *rout = dalloc(no), *rdout = todouble(dout, no);
		double *gx = dalloc(nx), *gc = dalloc(C), *gp = dalloc(np);

		cpu_tokens_forward(out, x, cls, pos, B, T, C);
		ref_tokens(&c, rout);
		e = t_check_close("tokens out", out, rout, no, 0, 1.2e-7);
		maxf = fmax(maxf, e);
		cpu_tokens_backward(dx, dcls, dpos, dout, B, T, C);
		fd_grad(ref_tokens, &c, c.x, nx, rdout, no, gx);
		fd_grad(ref_tokens, &c, c.cls, C, rdout, no, gc);
		fd_grad(ref_tokens, &c, c.pos, np, rdout, no, gp);
		e = t_check_close("tokens dx", dx, gx, nx, 1e-6, 1e-6);
		maxb = fmax(maxb, e);
		e = t_check_close("tokens dcls", dcls, gc, C, 1e-6, 1e-6);
		maxb = fmax(maxb, e);
		e = t_check_close("tokens dpos", dpos, gp, np, 1e-6, 1e-6);
		maxb = fmax(maxb, e);
		/* dx NULL is allowed; the rest accumulates */
		cpu_tokens_backward(NULL, dcls, dpos, dout, B, T, C);
		for (size_t i = 0; i < np; i++)
			gp[i] *= 2;
		t_check_close("tokens dpos twice", dpos, gp, np, 2e-6, 1e-6);
		free(x); free(cls); free(pos); free(out); free(dout); free(dx);
		free(dcls); free(dpos); free(c.x); free(c.cls); free(c.pos);
		free(rout); free(rdout); free(gx); free(gc); free(gp);
	}
	t_diag("max error: forward %.3g, backward vs differences %.3g", maxf,
	    maxb);
}

TEST(token0)
{
	int B = 3, T = 4, C = 5, b, t, j;
	float *inp = frandom((size_t)B * T * C, 1, 0), out[15], dout[15];
	float *dinp = frandom((size_t)B * T * C, 1, 0);
	float *pre = malloc(sizeof(float) * B * T * C);

	CHECK(pre != NULL);
	memcpy(pre, dinp, sizeof(float) * B * T * C);
	for (j = 0; j < B * C; j++)
		dout[j] = frand();
	cpu_token0_forward(out, inp, B, T, C);
	cpu_token0_backward(dinp, dout, B, T, C);
	for (b = 0; b < B; b++)
		for (t = 0; t < T; t++)
			for (j = 0; j < C; j++) {
				size_t k = ((size_t)b * T + t) * C + j;

				if (t == 0) {
					CHECK(out[b * C + j] == inp[k]);
					CHECK(dinp[k] ==
					    pre[k] + dout[b * C + j]);
				} else
					CHECK(dinp[k] == pre[k]);
			}
	free(inp); free(dinp); free(pre);
}

/* ------------------------------------------------------------------------ */
/* cross-entropy                                                            */

struct xe {
	int B, K;
	double eps;
	double *logits;
	const int32_t *labels;
};

/* per-sample losses, PyTorch's formula, in double */
static void
ref_xent(void *ctx, double *out)
{
	struct xe *c = ctx;
	int i, k;

	for (i = 0; i < c->B; i++) {
		const double *x = c->logits + (size_t)i * c->K;
		double max = -INFINITY, sum = 0, lse, mean = 0;

		for (k = 0; k < c->K; k++)
			max = fmax(max, x[k]);
		for (k = 0; k < c->K; k++)
			sum += exp(x[k] - max);
		lse = max + log(sum);
		for (k = 0; k < c->K; k++)
			mean += (lse - x[k]) / c->K;
		out[i] = (1 - c->eps) * (lse - x[c->labels[i]]) + c->eps * mean;
	}
}

TEST(xent_against_reference)
{
	static const float eps[] = { 0.0f, 0.1f, 0.4f };
	int B = 6, K = 7, i, k;
	int32_t labels[6] = { 0, 6, 3, 3, 1, 5 };
	size_t n = (size_t)B * K, e_i;
	double maxf = 0, maxb = 0, e;

	for (e_i = 0; e_i < sizeof eps / sizeof eps[0]; e_i++) {
		float *logits = frandom(n, 4, 0), *probs = t_falloc(n);
		float losses[6], *d = t_falloc(n), scale = 0.37f;
		struct xe c = { B, K, eps[e_i], todouble(logits, n), labels };
		double rl[6], sd[6], *g = dalloc(n);

		cpu_xent_forward(losses, probs, logits, labels, B, K, eps[e_i]);
		ref_xent(&c, rl);
		e = t_check_close("xent loss", losses, rl, B, 1e-6, 1e-6);
		maxf = fmax(maxf, e);
		for (i = 0; i < B; i++) {
			double s = 0;

			for (k = 0; k < K; k++)
				s += probs[(size_t)i * K + k];
			CHECK(fabs(s - 1) < 1e-5);
			sd[i] = scale;
		}
		cpu_xent_backward(d, probs, labels, B, K, eps[e_i], scale);
		fd_grad(ref_xent, &c, c.logits, n, sd, B, g);
		e = t_check_close("xent dlogits", d, g, n, 1e-6, 1e-5);
		maxb = fmax(maxb, e);
		cpu_xent_backward(d, probs, labels, B, K, eps[e_i], scale);
		for (k = 0; k < (int)n; k++)
			g[k] *= 2;
		t_check_close("xent dlogits twice", d, g, n, 2e-6, 1e-5);
		free(logits); free(probs); free(d); free(c.logits); free(g);
	}
	t_diag("max error: loss %.3g, gradient vs differences %.3g", maxf,
	    maxb);
}

/* Large logits stay finite; bad labels give loss 0 and no gradient. */
TEST(xent_edges)
{
	int B = 4, K = 3, k;
	float logits[12] = { 1e4f, -1e4f, 0, 88, 89, 90, -3e4f, -3e4f, -3e4f,
	    1, 2, 3 };
	int32_t labels[4] = { 1, 2, -1, 3 };
	float losses[4], probs[12], d[12] = { 0 };
	double want;

	cpu_xent_forward(losses, probs, logits, labels, B, K, 0.1f);
	for (k = 0; k < 12; k++)
		CHECK(isfinite(probs[k]));
	/* sample 0: -log p_1 = 2e4; mean over k of -log p_k = 3e4 / 3 ... */
	want = 0.9 * 2e4 + 0.1 * (0 + 2e4 + 1e4) / 3;
	t_diag("loss of a 1e4 margin: %.6g, want %.6g", losses[0], want);
	CHECK(fabs(losses[0] - want) <= 1e-6 * want);
	CHECK(isfinite(losses[1]) && losses[1] > 0);
	CHECK(losses[2] == 0.0f && losses[3] == 0.0f);
	cpu_xent_backward(d, probs, labels, B, K, 0.1f, 1.0f);
	for (k = 6; k < 12; k++)
		CHECK(d[k] == 0.0f);
	for (k = 0; k < 6; k++)
		CHECK(isfinite(d[k]));
}

/* ------------------------------------------------------------------------ */
/* determinism                                                              */

struct pipe_out {
	float *bufs[32];
	size_t n[32];
	int nbufs;
};

static float *
keep(struct pipe_out *o, size_t n)
{
	float *p = t_falloc(n);

	o->bufs[o->nbufs] = p;
	o->n[o->nbufs++] = n;
	return p;
}

/* Every kernel of this file once, forward and backward, at ViT-ish sizes. */
static void
pipeline(struct pipe_out *o, int threads)
{
	int B = 4, T = 65, C = 192, NH = 3, M = B * T, K = 10, b;
	size_t nx = (size_t)M * C, nt = (size_t)B * (T + 1) * C, i;
	float *x, *w, *bias, *wh, *gamma, *beta, *cls, *pos, *noise, *scratch;
	float *ln, *mean, *rstd, *qkv, *att, *out, *tok, *cls0, *logits;
	float *probs, *losses, *dlog, *dcls0, *dtok, *dout, *dpos, *dcls;
	float *dqkv, *dw, *db, *dwh, *dln, *dx, *dg, *dbeta;
	int32_t labels[4] = { 1, 9, 0, 4 };

	rng_state = 42;
	memset(o, 0, sizeof *o);
	backend_cpu()->set_threads(threads);
	x = frandom(nx, 1, 0);
	w = frandom((size_t)3 * C * C, 0.1f, 0);
	bias = frandom((size_t)3 * C, 1, 0);
	wh = frandom((size_t)K * C, 0.1f, 0);
	gamma = frandom(C, 1, 1);
	beta = frandom(C, 1, 0);
	cls = frandom(C, 1, 0);
	pos = frandom((size_t)(T + 1) * C, 1, 0);
	noise = frandom(nt, 0.01f, 0);

	/* x -> layer norm -> qkv -> attention -> tokens -> token 0 -> head */
	ln = keep(o, nx);
	mean = keep(o, M);
	rstd = keep(o, M);
	cpu_layernorm_forward(ln, mean, rstd, x, gamma, beta, M, C, 1e-6f);
	qkv = keep(o, nx * 3);
	cpu_matmul_forward(qkv, ln, w, bias, M, C, 3 * C);
	att = keep(o, (size_t)B * NH * T * T);
	out = keep(o, nx);
	cpu_attention_forward(out, att, qkv, B, T, C, NH);
	tok = keep(o, nt);
	cpu_tokens_forward(tok, out, cls, pos, B, T, C);
	cls0 = keep(o, (size_t)B * C);
	cpu_token0_forward(cls0, tok, B, T + 1, C);
	logits = keep(o, (size_t)B * K);
	cpu_matmul_forward(logits, cls0, wh, NULL, B, C, K);
	probs = keep(o, (size_t)B * K);
	losses = keep(o, B);
	cpu_xent_forward(losses, probs, logits, labels, B, K, 0.1f);

	dlog = keep(o, (size_t)B * K);
	cpu_xent_backward(dlog, probs, labels, B, K, 0.1f, 1.0f / B);
	dcls0 = keep(o, (size_t)B * C);
	dwh = keep(o, (size_t)K * C);
	cpu_matmul_backward(dcls0, dwh, NULL, dlog, cls0, wh, B, C, K);
	/* every token gets some gradient, not only token 0 */
	dtok = keep(o, nt);
	for (i = 0; i < nt; i++)
		dtok[i] = noise[i];
	cpu_token0_backward(dtok, dcls0, B, T + 1, C);
	dout = keep(o, nx);
	dpos = keep(o, (size_t)(T + 1) * C);
	dcls = keep(o, C);
	cpu_tokens_backward(dout, dcls, dpos, dtok, B, T, C);
	dqkv = keep(o, nx * 3);
	scratch = t_falloc(cpu_attention_scratch(B, T, C, NH));
	cpu_attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
	dln = keep(o, nx);
	dw = keep(o, (size_t)3 * C * C);
	db = keep(o, (size_t)3 * C);
	cpu_matmul_backward(dln, dw, db, dqkv, ln, w, M, C, 3 * C);
	dx = keep(o, nx);
	dg = keep(o, C);
	dbeta = keep(o, C);
	cpu_layernorm_backward(dx, dg, dbeta, dln, x, gamma, mean, rstd, M, C);
	for (b = 0; b < B; b++)
		CHECK(losses[b] > 0);
	free(x); free(w); free(bias); free(wh); free(gamma); free(beta);
	free(cls); free(pos); free(noise); free(scratch);
}

/*
 * Every output bit for bit at 1, 2 and 3 threads and in a second run at 2
 * (shardtrain(1), DETERMINISM). tests/cli/train-determinism.sh runs this
 * again with OpenBLAS forced to each kernel set the CPU can run.
 */
TEST(bit_identical_across_runs_and_threads)
{
	static const int threads[] = { 1, 2, 3, 2 };
	struct pipe_out o[4];
	int i, k, r;

	t_diag("OpenBLAS core: %s (%s)", cpu_blas_core(), cpu_blas_config());
	for (r = 0; r < 4; r++)
		pipeline(&o[r], threads[r]);
	for (r = 1; r < 4; r++) {
		CHECK_EQ_INT(o[0].nbufs, o[r].nbufs);
		for (i = 0; i < o[0].nbufs; i++) {
			size_t diff = 0, j;

			for (j = 0; j < o[0].n[i]; j++)
				diff += memcmp(&o[0].bufs[i][j],
				    &o[r].bufs[i][j], sizeof(float)) != 0;
			if (diff != 0)
				t_fail(__FILE__, __LINE__, "output %d: %zu of "
				    "%zu floats differ between 1 and %d threads"
				    "%s", i, diff, o[0].n[i], threads[r],
				    r == 3 ? " (second run)" : "");
		}
	}
	for (i = 0; i < o[0].nbufs; i++)
		for (size_t j = 0; j < o[0].n[i]; j++)
			CHECK(isfinite(o[0].bufs[i][j]));
	t_diag("%d outputs bit-identical across 1, 2 and 3 threads and 2 runs",
	    o[0].nbufs);
	for (r = 0; r < 4; r++)
		for (k = 0; k < o[r].nbufs; k++)
			free(o[r].bufs[k]);
}
