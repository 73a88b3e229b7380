/*
 * test_cnn_ops.c - the CPU backend's CNN kernels (convolution, batch norm,
 * pooling, elementwise) against naive double-precision references and
 * central differences, and against themselves across runs and thread
 * counts.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "cpu/cpu.h"

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */

static uint64_t rng = 0x5eed;

static double
urand(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

static void *
xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	if (p == NULL)
		t_fail(__FILE__, __LINE__, "out of memory");
	return p;
}

/* n floats uniform in [lo, hi) */
static float *
frand(size_t n, double lo, double hi)
{
	float *p = xcalloc(n, sizeof(float));

	for (size_t i = 0; i < n; i++)
		p[i] = (float)(lo + (hi - lo) * urand());
	return p;
}

static float *
fdup(const float *x, size_t n)
{
	float *p = xcalloc(n, sizeof(float));

	memcpy(p, x, n * sizeof(float));
	return p;
}

static void
ffill(float *x, size_t n, float v)
{
	for (size_t i = 0; i < n; i++)
		x[i] = v;
}

/* Fail unless |got - ref| <= tol + |ref| eps everywhere; report the worst. */
#define check_close(what, got, ref, n, tol, eps) \
	check_close_at(__FILE__, __LINE__, what, got, ref, n, tol, eps)

static void
check_close_at(const char *file, int line, const char *what, const float *got,
    const double *ref, size_t n, double tol, double eps)
{
	double maxerr = 0, maxref = 0, worst = 0;
	size_t wi = 0;

	for (size_t i = 0; i < n; i++) {
		double e = fabs((double)got[i] - ref[i]);
		double r = e == 0 ? 0 : e / (tol + fabs(ref[i]) * eps);

		if (!(e <= maxerr))
			maxerr = e;
		if (fabs(ref[i]) > maxref)
			maxref = fabs(ref[i]);
		if (!(r <= worst)) {
			worst = r;
			wi = i;
		}
	}
	t_diag("%s: max abs err %.3g, max |ref| %.3g (n %zu)", what, maxerr,
	    maxref, n);
	if (!(worst <= 1.0))
		t_fail(file, line, "%s: [%zu] = %.9g, want %.9g (tol %g + "
		    "|ref| %g)", what, wi, got[wi], ref[wi], tol, eps);
}

/* ref = base + k g, the expected value of an accumulated gradient */
static double *
acc_ref(const float *base, const double *g, double k, size_t n)
{
	double *r = xcalloc(n, sizeof(double));

	for (size_t i = 0; i < n; i++)
		r[i] = (base != NULL ? base[i] : 0.0) + k * g[i];
	return r;
}

/* L = sum out R in double: the scalar loss the gradients are checked on */
static double
dot(const float *out, const float *r, size_t n)
{
	double s = 0;

	for (size_t i = 0; i < n; i++)
		s += (double)out[i] * r[i];
	return s;
}

/*
 * Central differences of loss() with respect to a few entries of x,
 * compared with the analytic gradient g. The perturbed entry is restored
 * exactly afterwards.
 */
#define check_fd(what, x, n, g, loss, ctx, h, tol, eps) \
	check_fd_at(__FILE__, __LINE__, what, x, n, g, loss, ctx, h, tol, eps)

static void
check_fd_at(const char *file, int line, const char *what, float *x,
    size_t n, const float *g, double (*loss)(void *), void *ctx, float h,
    double tol, double eps)
{
	enum { NPROBE = 12 };
	float got[NPROBE];
	double num[NPROBE];
	size_t idx[NPROBE];
	int k = n < NPROBE ? (int)n : NPROBE;

	for (int i = 0; i < k; i++) {
		float save;
		double lp, lm;

		idx[i] = n <= NPROBE ? (size_t)i : (size_t)(urand() * n);
		save = x[idx[i]];
		x[idx[i]] = save + h;
		lp = loss(ctx);
		x[idx[i]] = save - h;
		lm = loss(ctx);
		x[idx[i]] = save;
		/* the perturbation actually applied, after rounding */
		num[i] = (lp - lm) / ((double)(save + h) - (double)(save - h));
		got[i] = g[idx[i]];
	}
	check_close_at(file, line, what, got, num, (size_t)k, tol, eps);
}

/* ------------------------------------------------------------------------ */
/* convolution                                                              */

static void
ref_conv_forward(const struct conv_shape *s, double *out, const float *inp,
    const float *w, const float *bias)
{
	for (int b = 0; b < s->B; b++)
	for (int k = 0; k < s->K; k++)
	for (int p = 0; p < s->P; p++)
	for (int q = 0; q < s->Q; q++) {
		double acc = bias != NULL ? bias[k] : 0.0;

		for (int c = 0; c < s->C; c++)
		for (int r = 0; r < s->R; r++)
		for (int x = 0; x < s->S; x++) {
			int h = p * s->stride - s->pad + r;
			int v = q * s->stride - s->pad + x;

			if (h < 0 || h >= s->H || v < 0 || v >= s->W)
				continue;
			acc += (double)inp[((b * s->C + c) * s->H + h) *
			    s->W + v] * w[((k * s->C + c) * s->R + r) * s->S +
			    x];
		}
		out[((b * s->K + k) * s->P + p) * s->Q + q] = acc;
	}
}

static void
ref_conv_backward(const struct conv_shape *s, double *dinp, double *dw,
    double *dbias, const float *dout, const float *inp, const float *w)
{
	for (int b = 0; b < s->B; b++)
	for (int k = 0; k < s->K; k++)
	for (int p = 0; p < s->P; p++)
	for (int q = 0; q < s->Q; q++) {
		double d = dout[((b * s->K + k) * s->P + p) * s->Q + q];

		dbias[k] += d;
		for (int c = 0; c < s->C; c++)
		for (int r = 0; r < s->R; r++)
		for (int x = 0; x < s->S; x++) {
			int h = p * s->stride - s->pad + r;
			int v = q * s->stride - s->pad + x;
			size_t ii = ((size_t)(b * s->C + c) * s->H + h) * s->W
			    + v;
			size_t wi = ((size_t)(k * s->C + c) * s->R + r) * s->S
			    + x;

			if (h < 0 || h >= s->H || v < 0 || v >= s->W)
				continue;
			dinp[ii] += d * w[wi];
			dw[wi] += d * inp[ii];
		}
	}
}

static struct conv_shape
conv_make(int B, int C, int H, int W, int K, int R, int S, int stride,
    int pad)
{
	struct conv_shape s = { B, C, H, W, K, R, S, stride, pad, 0, 0 };

	s.P = (H + 2 * pad - R) / stride + 1;
	s.Q = (W + 2 * pad - S) / stride + 1;
	return s;
}

#define GUARD		64
#define GUARD_VAL	1234.5f

struct conv_ctx {
	const struct conv_shape *s;
	float *out, *inp, *w, *bias, *r, *scratch;
	size_t nout;
};

static double
conv_loss(void *p)
{
	struct conv_ctx *x = p;

	cpu_conv2d_forward(x->s, x->out, x->inp, x->w, x->bias, x->scratch);
	return dot(x->out, x->r, x->nout);
}

/*
 * One shape, end to end: forward against the double reference (output
 * pre-filled with NaN, so every element must be written), backward twice
 * onto random initial gradients (it must accumulate), backward without
 * dinp/dbias, central differences of L = sum(out R), and a guard after the
 * scratch the kernel asked for.
 */
static void
conv_case(int B, int C, int H, int W, int K, int R, int S, int stride,
    int pad, int with_bias)
{
	struct conv_shape s = conv_make(B, C, H, W, K, R, S, stride, pad);
	size_t ni = (size_t)B * C * H * W, nw = (size_t)K * C * R * S;
	size_t no = (size_t)B * K * s.P * s.Q, ns = cpu_conv2d_scratch(&s);
	int crs = C * R * S;
	float *inp = frand(ni, -1, 1), *w = frand(nw, -1, 1);
	float *bias = with_bias ? frand(K, -1, 1) : NULL;
	float *r = frand(no, -1, 1), *out = frand(no, 0, 1);
	float *scratch = frand(ns + GUARD, 0, 1);
	float *gi0 = frand(ni, -1, 1), *gw0 = frand(nw, -1, 1);
	float *gb0 = frand(K, -1, 1);
	float *gi = fdup(gi0, ni), *gw = fdup(gw0, nw), *gb = fdup(gb0, K);
	double *rout = xcalloc(no, sizeof(double));
	double *rgi = xcalloc(ni, sizeof(double));
	double *rgw = xcalloc(nw, sizeof(double));
	double *rgb = xcalloc(K, sizeof(double));
	double *want;
	/* fp32 GEMM rounding grows with the reduction length */
	double ftol = 2e-7 * crs, btol = 2e-7 * (K * R * S + crs);
	struct conv_ctx ctx = { &s, out, inp, w, bias, r, scratch, no };
	char what[160];

	t_diag("conv B=%d C=%d %dx%d K=%d %dx%d s%d p%d -> %dx%d, bias %d, "
	    "scratch %zu floats", B, C, H, W, K, R, S, stride, pad, s.P, s.Q,
	    with_bias, ns);
	ffill(scratch + ns, GUARD, GUARD_VAL);
	ffill(out, no, NAN);

	ref_conv_forward(&s, rout, inp, w, bias);
	cpu_conv2d_forward(&s, out, inp, w, bias, scratch);
	check_close("forward out", out, rout, no, ftol, 1e-6);

	ref_conv_backward(&s, rgi, rgw, rgb, r, inp, w);
	for (int k = 1; k <= 2; k++) {
		cpu_conv2d_backward(&s, gi, gw, with_bias ? gb : NULL, r, inp,
		    w, scratch);
		snprintf(what, sizeof what, "backward x%d dinp", k);
		want = acc_ref(gi0, rgi, k, ni);
		check_close(what, gi, want, ni, 2 * k * btol, 1e-6);
		free(want);
		snprintf(what, sizeof what, "backward x%d dw", k);
		want = acc_ref(gw0, rgw, k, nw);
		/* dw sums over B*P*Q */
		check_close(what, gw, want, nw, 2e-7 * k * no / K + 1e-6, 1e-6);
		free(want);
		if (with_bias) {
			snprintf(what, sizeof what, "backward x%d dbias", k);
			want = acc_ref(gb0, rgb, k, K);
			check_close(what, gb, want, K, 1e-5, 1e-6);
			free(want);
		}
	}

	/* the optional gradients left out; zeroed gradients for the FD */
	memset(gw, 0, nw * sizeof(float));
	cpu_conv2d_backward(&s, NULL, gw, NULL, r, inp, w, scratch);
	check_close("backward dw (dinp, dbias NULL)", gw, rgw, nw,
	    2e-7 * no / K + 1e-6, 1e-6);
	memset(gi, 0, ni * sizeof(float));
	memset(gw, 0, nw * sizeof(float));
	memset(gb, 0, K * sizeof(float));
	cpu_conv2d_backward(&s, gi, gw, gb, r, inp, w, scratch);

	/* L is linear in each input: a large step has no truncation error
	 * and keeps the fp32 rounding of L small against it. */
	check_fd("fd dinp", inp, ni, gi, conv_loss, &ctx, 0.5f, 1e-4, 1e-4);
	check_fd("fd dw", w, nw, gw, conv_loss, &ctx, 0.5f, 1e-4, 1e-4);
	if (with_bias)
		check_fd("fd dbias", bias, K, gb, conv_loss, &ctx, 0.5f, 1e-4,
		    1e-4);

	for (int i = 0; i < GUARD; i++)
		if (scratch[ns + i] != GUARD_VAL)
			t_fail(__FILE__, __LINE__, "scratch overrun at %d past "
			    "the %zu floats asked for", i, ns);

	free(inp), free(w), free(bias), free(r), free(out), free(scratch);
	free(gi0), free(gw0), free(gb0), free(gi), free(gw), free(gb);
	free(rout), free(rgi), free(rgw), free(rgb);
}

TEST(conv_3x3)
{
	conv_case(3, 5, 7, 6, 4, 3, 3, 1, 1, 1);	/* s1 p1, odd sizes */
	conv_case(2, 3, 9, 8, 6, 3, 3, 2, 1, 1);	/* s2 p1 */
	conv_case(2, 4, 6, 5, 3, 3, 3, 1, 0, 0);	/* valid, no bias */
	conv_case(5, 7, 1, 1, 3, 3, 3, 1, 1, 1);	/* 1x1 map, pad only */
	conv_case(4, 6, 2, 2, 5, 3, 3, 2, 1, 0);	/* 2x2 -> 1x1 */
}

TEST(conv_7x7_stem)
{
	conv_case(2, 3, 15, 13, 5, 7, 7, 2, 3, 0);
	conv_case(1, 3, 9, 10, 4, 7, 7, 2, 3, 1);	/* B = 1 */
}

TEST(conv_1x1)
{
	conv_case(2, 3, 46, 46, 5, 1, 1, 1, 0, 1);	/* no im2col */
	conv_case(7, 6, 5, 5, 9, 1, 1, 1, 0, 1);	/* samples gathered */
	conv_case(5, 4, 25, 25, 3, 1, 1, 1, 0, 1);	/* chunk 4, then 1 */
	conv_case(3, 5, 9, 7, 4, 1, 1, 2, 0, 0);	/* s2 downsample */
	conv_case(2, 3, 8, 8, 4, 1, 1, 2, 1, 1);	/* padded 1x1 */
}

TEST(conv_odd_kernels)
{
	conv_case(3, 2, 7, 9, 3, 2, 3, 2, 1, 1);	/* R != S */
	conv_case(2, 3, 6, 7, 2, 5, 5, 3, 2, 1);	/* 5x5 s3 p2 */
	conv_case(2, 2, 4, 4, 3, 3, 3, 1, 2, 1);	/* pad > R/2 */
	conv_case(3, 4, 2, 3, 5, 5, 5, 1, 2, 1);	/* map smaller than R */
	conv_case(2, 3, 5, 5, 4, 3, 3, 4, 1, 1);	/* stride > R: gaps */
}

/*
 * Small maps with channels enough to group positions by the taps their
 * windows keep (the kernel's work on ResNet's late stages).
 */
TEST(conv_grouped)
{
	conv_case(5, 17, 4, 4, 6, 3, 3, 1, 1, 1);	/* 4x4 */
	conv_case(4, 18, 2, 2, 5, 3, 3, 1, 1, 1);	/* 2x2 */
	conv_case(6, 16, 1, 1, 7, 3, 3, 1, 1, 0);	/* 1x1: center tap */
	conv_case(3, 20, 4, 4, 5, 3, 3, 2, 1, 0);	/* 4x4 -> 2x2 */
	conv_case(2, 16, 2, 2, 3, 3, 3, 2, 1, 1);	/* 2x2 -> 1x1 */
	conv_case(2, 16, 13, 11, 4, 7, 7, 2, 3, 1);	/* stem-like */
	conv_case(3, 16, 6, 7, 3, 5, 4, 1, 2, 1);	/* 5x4, pad 2 */
	conv_case(2, 16, 4, 4, 3, 3, 3, 1, 2, 1);	/* pad > R/2 */
	conv_case(2, 16, 5, 5, 4, 3, 3, 4, 1, 1);	/* stride > R */
	conv_case(3, 16, 5, 5, 4, 1, 1, 2, 1, 1);	/* padded 1x1 */
	conv_case(4, 16, 8, 8, 6, 1, 1, 2, 0, 0);	/* 1x1 s2 downsample */
	conv_case(3, 16, 6, 6, 4, 3, 3, 1, 0, 1);	/* no padding at all */
}

/* A batch larger than one GEMM's chunk: 72 columns per sample, so a chunk
 * holds a few dozen samples and the last one is shorter. */
TEST(conv_batch_chunks)
{
	struct conv_shape s = conv_make(40, 3, 10, 11, 4, 3, 3, 1, 0);
	size_t whole = (size_t)(3 * 9 + 4) * 40 * 8 * 9;

	t_diag("scratch %zu floats, whole batch would need %zu",
	    cpu_conv2d_scratch(&s), whole);
	CHECK(cpu_conv2d_scratch(&s) < whole);
	conv_case(40, 3, 10, 11, 4, 3, 3, 1, 0, 1);
	conv_case(23, 16, 20, 20, 4, 7, 7, 2, 3, 1);	/* grouped, chunked */
}

/* Large maps, where the padding is a small share of the work. */
TEST(conv_large_maps)
{
	conv_case(2, 3, 40, 38, 5, 3, 3, 2, 1, 1);
	conv_case(2, 2, 30, 30, 3, 5, 5, 1, 2, 1);
	conv_case(1, 4, 33, 35, 6, 3, 3, 1, 1, 0);
	conv_case(1, 3, 24, 26, 4, 3, 3, 1, 1, 1);	/* dinp as a conv */
	conv_case(1, 2, 30, 28, 3, 5, 5, 1, 2, 0);
	conv_case(2, 2, 46, 46, 3, 3, 3, 1, 1, 1);
	conv_case(1, 3, 42, 40, 4, 3, 3, 1, 0, 1);	/* dinp larger */
}

/* Random shapes, to reach the corners of the kernel's plans: small and
 * large maps, few and many channels, strides past the kernel, padding up
 * to R-1, single samples, several chunks. SEED=n picks another set. */
TEST(conv_random_shapes)
{
	rng = getenv("SEED") ? strtoull(getenv("SEED"), NULL, 0) : 0xc0ffee;
	for (int i = 0; i < 40; i++) {
		int R = 1 + (int)(urand() * 5), S = urand() < 0.7 ? R :
		    1 + (int)(urand() * 5);
		int mr = R < S ? R : S;
		int pad = (int)(urand() * mr), st = 1 + (int)(urand() * 3);
		int big = urand() < 0.25;
		int B = big ? 1 : 1 + (int)(urand() * 5);
		int C = urand() < 0.5 ? 1 + (int)(urand() * 6) :
		    16 + (int)(urand() * 8);
		int H = (big ? 36 : 1) + (int)(urand() * (big ? 12 : 10));
		int W = (big ? 36 : 1) + (int)(urand() * (big ? 12 : 10));
		int K = 1 + (int)(urand() * 7);

		if (!big && urand() < 0.15) {
			/* chunks of samples, and a shorter last one */
			B = 20 + (int)(urand() * 20);
			H = 12 + (int)(urand() * 8);
			W = 12 + (int)(urand() * 8);
			K = 1 + K % 4;
		}
		if (H + 2 * pad < R)
			H = R;
		if (W + 2 * pad < S)
			W = S;
		if (big)
			st = 1;
		conv_case(B, C, H, W, K, R, S, st, pad, urand() < 0.7);
	}
}

/* Scratch is bounded for big shapes and depends on the shape alone. */
TEST(conv_scratch_bound)
{
	static const int sh[][9] = {
		{ 256, 3, 224, 224, 64, 7, 7, 2, 3 },
		{ 256, 64, 56, 56, 64, 3, 3, 1, 1 },
		{ 256, 256, 56, 56, 64, 1, 1, 1, 0 },
		{ 256, 128, 28, 28, 128, 3, 3, 1, 1 },
		{ 256, 1024, 14, 14, 256, 1, 1, 1, 0 },
		{ 256, 512, 7, 7, 512, 3, 3, 1, 1 },
		{ 256, 2048, 7, 7, 512, 1, 1, 1, 0 },
		{ 256, 512, 1, 1, 512, 3, 3, 1, 1 },
	};

	for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
		const int *v = sh[i];
		struct conv_shape s = conv_make(v[0], v[1], v[2], v[3], v[4],
		    v[5], v[6], v[7], v[8]);
		size_t ns = cpu_conv2d_scratch(&s);
		size_t one = (size_t)(s.C * s.R * s.S + s.K) * s.P * s.Q;
		size_t wts = 2 * (size_t)s.K * s.C * s.R * s.S;
		size_t runs = 4 * (size_t)(s.P + s.Q) + 16;

		/* a chunk's columns, or one sample's; two copies of the
		 * weights; the plan */
		t_diag("C=%d %dx%d K=%d %dx%d: scratch %zu floats", s.C, s.H,
		    s.W, s.K, s.R, s.S, ns);
		CHECK(ns <= (one > ((size_t)4 << 20) ? one : (size_t)4 << 20) +
		    wts + runs);
		CHECK(cpu_conv2d_scratch(&s) == ns);
	}
}

/* ------------------------------------------------------------------------ */
/* batch norm                                                               */

/* mean and biased variance of channel c */
static void
ref_bn_stats(int B, int C, int HW, const float *inp, int c, double *mean,
    double *var)
{
	double n = (double)B * HW, m = 0, v = 0;

	for (int b = 0; b < B; b++)
		for (int i = 0; i < HW; i++)
			m += inp[((size_t)b * C + c) * HW + i];
	m /= n;
	for (int b = 0; b < B; b++)
		for (int i = 0; i < HW; i++) {
			double d = inp[((size_t)b * C + c) * HW + i] - m;

			v += d * d;
		}
	*mean = m;
	*var = v / n;
}

static void
ref_bn_backward(int B, int C, int HW, double *dinp, double *dgamma,
    double *dbeta, const float *dout, const float *inp, const float *gamma,
    float eps)
{
	double n = (double)B * HW;

	for (int c = 0; c < C; c++) {
		double m, v, rs, sd = 0, sdx = 0;

		ref_bn_stats(B, C, HW, inp, c, &m, &v);
		rs = 1 / sqrt(v + eps);
		for (int b = 0; b < B; b++)
			for (int i = 0; i < HW; i++) {
				size_t j = ((size_t)b * C + c) * HW + i;

				sd += dout[j];
				sdx += dout[j] * (inp[j] - m) * rs;
			}
		dbeta[c] = sd;
		dgamma[c] = sdx;
		for (int b = 0; b < B; b++)
			for (int i = 0; i < HW; i++) {
				size_t j = ((size_t)b * C + c) * HW + i;
				double xh = (inp[j] - m) * rs;

				dinp[j] = gamma[c] * rs * (dout[j] - sd / n -
				    xh * sdx / n);
			}
	}
}

struct bn_ctx {
	int B, C, HW;
	float *out, *inp, *gamma, *beta, *mean, *rstd, *r;
};

static double
bn_loss(void *p)
{
	struct bn_ctx *x = p;

	cpu_batchnorm_forward(x->B, x->C, x->HW, x->out, x->inp, x->gamma,
	    x->beta, x->mean, x->rstd, NULL, NULL, 0.1f, 1e-5f, 1, 0, NULL, 0);
	return dot(x->out, x->r, (size_t)x->B * x->C * x->HW);
}

static void
bn_case(int B, int C, int HW, double lo, double hi, double f)
{
	size_t n = (size_t)B * C * HW;
	const float eps = 1e-5f, mom = 0.1f;
	float *inp = frand(n, lo, hi), *out = frand(n, 0, 1);
	float *gamma = frand(C, 0.5, 1.5), *beta = frand(C, -1, 1);
	float *mean = frand(C, 0, 1), *rstd = frand(C, 0, 1);
	float *rm = frand(C, -1, 1), *rv = frand(C, 0.5, 2);
	float *rm0 = fdup(rm, C), *rv0 = fdup(rv, C);
	float *r = frand(n, -1, 1);
	float *gi0 = frand(n, -1, 1), *gg0 = frand(C, -1, 1);
	float *gb0 = frand(C, -1, 1);
	float *gi = fdup(gi0, n), *gg = fdup(gg0, C), *gb = fdup(gb0, C);
	double *rout = xcalloc(n, sizeof(double));
	double *rmean = xcalloc(C, sizeof(double));
	double *rrstd = xcalloc(C, sizeof(double));
	double *rrm = xcalloc(C, sizeof(double));
	double *rrv = xcalloc(C, sizeof(double));
	double *rgi = xcalloc(n, sizeof(double));
	double *rgg = xcalloc(C, sizeof(double));
	double *rgb = xcalloc(C, sizeof(double));
	double *want;
	struct bn_ctx ctx = { B, C, HW, out, inp, gamma, beta, mean, rstd, r };
	double cnt = (double)B * HW;
	char what[64];

	t_diag("batchnorm B=%d C=%d HW=%d, inputs in [%g, %g)", B, C, HW, lo,
	    hi);
	/* training, with the running statistics updated */
	for (int c = 0; c < C; c++) {
		double m, v, rs;

		ref_bn_stats(B, C, HW, inp, c, &m, &v);
		rs = 1 / sqrt(v + eps);
		rmean[c] = m;
		rrstd[c] = rs;
		rrm[c] = (1 - mom) * rm[c] + mom * m;
		rrv[c] = (1 - mom) * rv[c] + mom * v * cnt / (cnt - 1);
		for (int b = 0; b < B; b++)
			for (int i = 0; i < HW; i++) {
				size_t j = ((size_t)b * C + c) * HW + i;

				rout[j] = (inp[j] - m) * rs * gamma[c] +
				    beta[c];
			}
	}
	ffill(out, n, NAN);
	cpu_batchnorm_forward(B, C, HW, out, inp, gamma, beta, mean, rstd, rm,
	    rv, mom, eps, 1, 1, NULL, 0);
	check_close("train out", out, rout, n, 2e-6 * f, 1e-5);
	check_close("saved mean", mean, rmean, C, 1e-6 * f, 1e-6);
	check_close("saved rstd", rstd, rrstd, C, 0, 2e-6);
	check_close("running mean", rm, rrm, C, 1e-6, 1e-6);
	check_close("running var (unbiased)", rv, rrv, C, 0, 2e-6);

	/* training without the update leaves the running statistics alone */
	memcpy(rm0, rm, C * sizeof(float));
	memcpy(rv0, rv, C * sizeof(float));
	cpu_batchnorm_forward(B, C, HW, out, inp, gamma, beta, mean, rstd, rm,
	    rv, mom, eps, 1, 0, NULL, 0);
	CHECK_MEM_EQ(rm, rm0, C * sizeof(float));
	CHECK_MEM_EQ(rv, rv0, C * sizeof(float));

	/* eval: the running statistics, mean and rstd untouched */
	for (int c = 0; c < C; c++)
		for (int b = 0; b < B; b++)
			for (int i = 0; i < HW; i++) {
				size_t j = ((size_t)b * C + c) * HW + i;

				rout[j] = (inp[j] - rm[c]) / sqrt((double)rv[c]
				    + eps) * gamma[c] + beta[c];
			}
	ffill(mean, C, -7.0f);
	ffill(rstd, C, -7.0f);
	cpu_batchnorm_forward(B, C, HW, out, inp, gamma, beta, mean, rstd, rm,
	    rv, mom, eps, 0, 1, NULL, 0);
	check_close("eval out", out, rout, n, 2e-6 * f, 1e-5);
	CHECK_MEM_EQ(rm, rm0, C * sizeof(float));
	CHECK_MEM_EQ(rv, rv0, C * sizeof(float));
	for (int c = 0; c < C; c++)
		CHECK(mean[c] == -7.0f && rstd[c] == -7.0f);

	/* backward accumulates */
	cpu_batchnorm_forward(B, C, HW, out, inp, gamma, beta, mean, rstd, rm,
	    rv, mom, eps, 1, 0, NULL, 0);
	ref_bn_backward(B, C, HW, rgi, rgg, rgb, r, inp, gamma, eps);
	for (int k = 1; k <= 2; k++) {
		cpu_batchnorm_backward(B, C, HW, gi, gg, gb, r, inp, gamma,
		    mean, rstd, NULL, NULL, 0);
		snprintf(what, sizeof what, "backward x%d dinp", k);
		want = acc_ref(gi0, rgi, k, n);
		check_close(what, gi, want, n, 1e-5 * k * f, 1e-5);
		free(want);
		snprintf(what, sizeof what, "backward x%d dgamma", k);
		want = acc_ref(gg0, rgg, k, C);
		check_close(what, gg, want, C, 1e-5 * k * f, 1e-5);
		free(want);
		snprintf(what, sizeof what, "backward x%d dbeta", k);
		want = acc_ref(gb0, rgb, k, C);
		check_close(what, gb, want, C, 1e-5 * k * f, 1e-5);
		free(want);
	}

	/* central differences through the fp32 forward */
	memset(gi, 0, n * sizeof(float));
	memset(gg, 0, C * sizeof(float));
	memset(gb, 0, C * sizeof(float));
	cpu_batchnorm_backward(B, C, HW, gi, gg, gb, r, inp, gamma, mean, rstd,
	    NULL, NULL, 0);
	if (fabs(lo) < 10) {
		check_fd("fd dinp", inp, n, gi, bn_loss, &ctx, 1e-2f, 2e-3,
		    1e-2);
		check_fd("fd dgamma", gamma, C, gg, bn_loss, &ctx, 0.25f, 2e-4,
		    1e-4);
		check_fd("fd dbeta", beta, C, gb, bn_loss, &ctx, 0.25f, 2e-4,
		    1e-4);
	}

	free(inp), free(out), free(gamma), free(beta), free(mean), free(rstd);
	free(rm), free(rv), free(rm0), free(rv0), free(r);
	free(gi0), free(gg0), free(gb0), free(gi), free(gg), free(gb);
	free(rout), free(rmean), free(rrstd), free(rrm), free(rrv);
	free(rgi), free(rgg), free(rgb);
}

TEST(batchnorm)
{
	bn_case(3, 5, 7, -1, 1, 1);	/* HW below the sum's lanes */
	bn_case(2, 3, 37, -2, 3, 1);	/* lanes plus a tail */
	bn_case(17, 6, 1, -1, 1, 1);	/* ResNet's 1x1 maps */
	bn_case(3, 19, 9, -1, 2, 1);	/* channel blocks and a remainder */
}

/* A mean far from zero against the spread must not cancel the variance. */
TEST(batchnorm_large_mean)
{
	bn_case(4, 3, 50, 1000, 1001, 100);
}

/* With NULL gradients for gamma and beta, dinp is still right. */
TEST(batchnorm_null_grads)
{
	int B = 2, C = 3, HW = 10;
	size_t n = (size_t)B * C * HW;
	float *inp = frand(n, -1, 1), *out = frand(n, 0, 1);
	float *gamma = frand(C, 0.5, 1.5), *beta = frand(C, -1, 1);
	float *mean = frand(C, 0, 1), *rstd = frand(C, 0, 1);
	float *r = frand(n, -1, 1), *gi = xcalloc(n, sizeof(float));
	double *rgi = xcalloc(n, sizeof(double));
	double *rgg = xcalloc(C, sizeof(double));
	double *rgb = xcalloc(C, sizeof(double));

	cpu_batchnorm_forward(B, C, HW, out, inp, gamma, beta, mean, rstd,
	    NULL, NULL, 0.1f, 1e-5f, 1, 0, NULL, 0);
	cpu_batchnorm_backward(B, C, HW, gi, NULL, NULL, r, inp, gamma, mean,
	    rstd, NULL, NULL, 0);
	ref_bn_backward(B, C, HW, rgi, rgg, rgb, r, inp, gamma, 1e-5f);
	check_close("dinp", gi, rgi, n, 1e-5, 1e-5);
	free(inp), free(out), free(gamma), free(beta), free(mean), free(rstd);
	free(r), free(gi), free(rgi), free(rgg), free(rgb);
}

/* ------------------------------------------------------------------------ */
/* batch norm with the residual add and ReLU fused                          */

struct bnr_ctx {
	int B, C, HW;
	float *out, *inp, *res, *gamma, *beta, *mean, *rstd, *r;
};

static double
bnr_loss(void *p)
{
	struct bnr_ctx *x = p;

	cpu_batchnorm_forward(x->B, x->C, x->HW, x->out, x->inp, x->gamma,
	    x->beta, x->mean, x->rstd, NULL, NULL, 0.1f, 1e-5f, 1, 0, x->res,
	    1);
	return dot(x->out, x->r, (size_t)x->B * x->C * x->HW);
}

/*
 * relu(bn(x) + res) in one layer against batch norm, add and ReLU run
 * one after the other: the same bits forward, backward and in the running
 * statistics; then central differences through the fused forward.
 */
static void
bn_relu_case(int B, int C, int HW, int with_res)
{
	size_t n = (size_t)B * C * HW;
	float *inp = frand(n, -1, 1), *res = with_res ? frand(n, -1, 1) : NULL;
	float *gamma = frand(C, 0.5, 1.5), *beta = frand(C, -0.5, 0.5);
	float *rm = frand(C, -1, 1), *rv = frand(C, 0.5, 2);
	float *rm2 = fdup(rm, C), *rv2 = fdup(rv, C);
	float *mean = xcalloc(C, sizeof(float)), *rstd = xcalloc(C, sizeof(float));
	float *mean2 = xcalloc(C, sizeof(float));
	float *rstd2 = xcalloc(C, sizeof(float));
	float *out = xcalloc(n, sizeof(float)), *y = xcalloc(n, sizeof(float));
	float *z = xcalloc(n, sizeof(float)), *o2 = xcalloc(n, sizeof(float));
	float *d = frand(n, -1, 1), *gi = frand(n, -1, 1), *gi2 = fdup(gi, n);
	float *gr = frand(n, -1, 1), *gr2 = fdup(gr, n);
	float *gg = frand(C, -1, 1), *gg2 = fdup(gg, C);
	float *gb = frand(C, -1, 1), *gb2 = fdup(gb, C);
	float *dz = xcalloc(n, sizeof(float)), *dy = xcalloc(n, sizeof(float));
	struct bnr_ctx ctx = { B, C, HW, out, inp, res, gamma, beta, mean,
	    rstd, d };
	size_t npos = 0;

	t_diag("bn+%srelu B=%d C=%d HW=%d", with_res ? "add+" : "", B, C, HW);
	cpu_batchnorm_forward(B, C, HW, out, inp, gamma, beta, mean, rstd, rm,
	    rv, 0.1f, 1e-5f, 1, 1, res, 1);
	cpu_batchnorm_forward(B, C, HW, y, inp, gamma, beta, mean2, rstd2,
	    rm2, rv2, 0.1f, 1e-5f, 1, 1, NULL, 0);
	if (with_res)
		cpu_add_forward(z, y, res, n);
	cpu_relu_forward(o2, with_res ? z : y, n);
	CHECK_MEM_EQ(out, o2, n * sizeof(float));
	CHECK_MEM_EQ(mean, mean2, C * sizeof(float));
	CHECK_MEM_EQ(rstd, rstd2, C * sizeof(float));
	CHECK_MEM_EQ(rm, rm2, C * sizeof(float));
	CHECK_MEM_EQ(rv, rv2, C * sizeof(float));
	for (size_t i = 0; i < n; i++)
		npos += out[i] > 0;
	/* both sides of the ReLU are exercised */
	CHECK(npos > n / 5 && npos < n - n / 5);

	/* backward, accumulating into nonzero gradients */
	cpu_batchnorm_backward(B, C, HW, gi, gg, gb, d, inp, gamma, mean, rstd,
	    with_res ? gr : NULL, out, 1);
	cpu_relu_backward(dz, d, o2, n);
	if (with_res)
		cpu_add_backward(dy, gr2, dz, n);
	cpu_batchnorm_backward(B, C, HW, gi2, gg2, gb2, with_res ? dy : dz,
	    inp, gamma, mean2, rstd2, NULL, NULL, 0);
	CHECK_MEM_EQ(gi, gi2, n * sizeof(float));
	CHECK_MEM_EQ(gg, gg2, C * sizeof(float));
	CHECK_MEM_EQ(gb, gb2, C * sizeof(float));
	CHECK_MEM_EQ(gr, gr2, n * sizeof(float));

	/* without dinp the residual's gradient still comes */
	if (with_res) {
		memset(gr, 0, n * sizeof(float));
		cpu_batchnorm_backward(B, C, HW, NULL, NULL, NULL, d, inp, gamma,
		    mean, rstd, gr, out, 1);
		for (size_t i = 0; i < n; i++)
			CHECK(gr[i] == dz[i]);
	}

	/* central differences through the fused forward */
	memset(gi, 0, n * sizeof(float));
	memset(gg, 0, C * sizeof(float));
	memset(gb, 0, C * sizeof(float));
	memset(gr, 0, n * sizeof(float));
	cpu_batchnorm_backward(B, C, HW, gi, gg, gb, d, inp, gamma, mean, rstd,
	    with_res ? gr : NULL, out, 1);
	check_fd("fd dinp", inp, n, gi, bnr_loss, &ctx, 1e-3f, 2e-3, 1e-2);
	check_fd("fd dgamma", gamma, C, gg, bnr_loss, &ctx, 1e-3f, 2e-3, 1e-2);
	check_fd("fd dbeta", beta, C, gb, bnr_loss, &ctx, 1e-3f, 2e-3, 1e-2);
	if (with_res)
		check_fd("fd dres", res, n, gr, bnr_loss, &ctx, 1e-3f, 2e-3,
		    1e-2);

	free(inp), free(res), free(gamma), free(beta), free(rm), free(rv);
	free(rm2), free(rv2), free(mean), free(rstd), free(mean2), free(rstd2);
	free(out), free(y), free(z), free(o2), free(d), free(gi), free(gi2);
	free(gr), free(gr2), free(gg), free(gg2), free(gb), free(gb2);
	free(dz), free(dy);
}

TEST(batchnorm_relu_fused)
{
	bn_relu_case(3, 5, 7, 0);	/* HW below the lanes */
	bn_relu_case(2, 3, 37, 1);	/* lanes plus a tail */
	bn_relu_case(17, 6, 1, 1);	/* ResNet's 1x1 maps */
	bn_relu_case(4, 19, 64, 0);	/* channel blocks and a remainder */
	bn_relu_case(2, 9, 300, 1);	/* long planes */
}

/* ------------------------------------------------------------------------ */
/* pooling                                                                  */

static struct pool_shape
pool_make(int B, int C, int H, int W, int k, int stride, int pad)
{
	struct pool_shape s = { B, C, H, W, k, stride, pad, 0, 0 };

	s.P = (H + 2 * pad - k) / stride + 1;
	s.Q = (W + 2 * pad - k) / stride + 1;
	return s;
}

/* The max in double and the row-major first offset holding it. */
static void
ref_maxpool(const struct pool_shape *s, double *out, int32_t *idx,
    const float *inp)
{
	size_t PQ = (size_t)s->P * s->Q;

	for (int bc = 0; bc < s->B * s->C; bc++)
	for (int p = 0; p < s->P; p++)
	for (int q = 0; q < s->Q; q++) {
		const float *x = inp + (size_t)bc * s->H * s->W;
		double m = -INFINITY;
		int32_t mi = -1;

		for (int i = 0; i < s->k; i++)
		for (int j = 0; j < s->k; j++) {
			int h = p * s->stride - s->pad + i;
			int w = q * s->stride - s->pad + j;

			if (h < 0 || h >= s->H || w < 0 || w >= s->W)
				continue;
			if (mi < 0 || x[h * s->W + w] > m) {
				m = x[h * s->W + w];
				mi = h * s->W + w;
			}
		}
		out[bc * PQ + (size_t)p * s->Q + q] = m;
		idx[bc * PQ + (size_t)p * s->Q + q] = mi;
	}
}

struct pool_ctx {
	const struct pool_shape *s;
	float *out, *inp, *r;
	int32_t *idx;
};

static double
pool_loss(void *p)
{
	struct pool_ctx *x = p;

	cpu_maxpool_forward(x->s, x->out, x->idx, x->inp);
	return dot(x->out, x->r, (size_t)x->s->B * x->s->C * x->s->P *
	    x->s->Q);
}

static void
maxpool_case(int B, int C, int H, int W, int k, int stride, int pad)
{
	struct pool_shape s = pool_make(B, C, H, W, k, stride, pad);
	size_t ni = (size_t)B * C * H * W, no = (size_t)B * C * s.P * s.Q;
	float *inp = xcalloc(ni, sizeof(float)), *out = frand(no, 0, 1);
	float *r = frand(no, -1, 1), *gi0 = frand(ni, -1, 1);
	float *gi = fdup(gi0, ni);
	int32_t *idx = xcalloc(no, sizeof(int32_t));
	int32_t *ridx = xcalloc(no, sizeof(int32_t));
	double *rout = xcalloc(no, sizeof(double));
	double *rgi = xcalloc(ni, sizeof(double)), *want;
	struct pool_ctx ctx = { &s, out, inp, r, idx };

	t_diag("maxpool B=%d C=%d %dx%d k%d s%d p%d -> %dx%d", B, C, H, W, k,
	    stride, pad, s.P, s.Q);
	/* distinct values 1/64 apart, all negative so zero padding would
	 * show, shuffled */
	for (size_t i = 0; i < ni; i++)
		inp[i] = -1.0f - (float)i / 64;
	for (size_t i = ni - 1; i > 0; i--) {
		size_t j = (size_t)(urand() * (i + 1));
		float t = inp[i];

		inp[i] = inp[j];
		inp[j] = t;
	}
	ref_maxpool(&s, rout, ridx, inp);
	ffill(out, no, NAN);
	cpu_maxpool_forward(&s, out, idx, inp);
	check_close("out", out, rout, no, 0, 0);
	CHECK_MEM_EQ(idx, ridx, no * sizeof(int32_t));

	for (size_t i = 0; i < no; i++)
		rgi[(size_t)i / (s.P * s.Q) * H * W + ridx[i]] += r[i];
	for (int k2 = 1; k2 <= 2; k2++) {
		cpu_maxpool_backward(&s, gi, r, idx);
		want = acc_ref(gi0, rgi, k2, ni);
		check_close(k2 == 1 ? "backward x1" : "backward x2", gi, want,
		    ni, 1e-6, 1e-6);
		free(want);
	}
	memset(gi, 0, ni * sizeof(float));
	cpu_maxpool_backward(&s, gi, r, idx);
	check_fd("fd dinp", inp, ni, gi, pool_loss, &ctx, 1.0f / 512, 1e-4,
	    1e-4);

	free(inp), free(out), free(r), free(gi0), free(gi), free(idx);
	free(ridx), free(rout), free(rgi);
}

TEST(maxpool)
{
	maxpool_case(2, 3, 11, 10, 3, 2, 1);	/* ResNet's stem pool */
	maxpool_case(2, 2, 1, 1, 3, 2, 1);	/* taps past both edges */
	maxpool_case(1, 3, 2, 3, 3, 2, 1);
	maxpool_case(3, 2, 8, 8, 3, 2, 1);
	maxpool_case(1, 2, 7, 5, 2, 2, 0);
	maxpool_case(2, 2, 6, 6, 3, 1, 1);	/* heavy overlap */
}

/* Ties: the first maximum in row-major window order wins, as in PyTorch;
 * windows that hang over the edge start at their first in-bounds cell. */
TEST(maxpool_ties)
{
	struct pool_shape s = pool_make(1, 1, 4, 4, 3, 2, 1);
	float inp[16], out[4];
	int32_t idx[4];
	static const int32_t flat[4] = { 0, 1, 4, 5 };
	float dinp[16] = { 0 }, dout[4] = { 1, 2, 3, 4 };

	CHECK_EQ_INT(s.P, 2);
	ffill(inp, 16, 0.5f);
	cpu_maxpool_forward(&s, out, idx, inp);
	for (int i = 0; i < 4; i++) {
		CHECK(out[i] == 0.5f);
		CHECK_EQ_INT(idx[i], flat[i]);
	}
	/* two equal maxima in window (1,1), rows 1..3 x cols 1..3 */
	inp[2 * 4 + 3] = 2.0f;
	inp[3 * 4 + 1] = 2.0f;
	cpu_maxpool_forward(&s, out, idx, inp);
	CHECK(out[3] == 2.0f);
	CHECK_EQ_INT(idx[3], 2 * 4 + 3);
	CHECK_EQ_INT(idx[2], 3 * 4 + 1);	/* rows 1..3 x cols 0..1 */
	CHECK_EQ_INT(idx[1], 1);		/* rows 0..1 x cols 1..3 */
	cpu_maxpool_backward(&s, dinp, dout, idx);
	CHECK(dinp[11] == 4.0f && dinp[13] == 3.0f && dinp[0] == 1.0f);
	/* overlapping windows routing to one cell add up */
	inp[2 * 4 + 1] = 3.0f;
	cpu_maxpool_forward(&s, out, idx, inp);
	CHECK(idx[2] == 9 && idx[3] == 9);
	memset(dinp, 0, sizeof dinp);
	cpu_maxpool_backward(&s, dinp, dout, idx);
	CHECK(dinp[9] == 3.0f + 4.0f);

	/* -inf everywhere: -inf out, the first in-bounds offset */
	ffill(inp, 16, -INFINITY);
	cpu_maxpool_forward(&s, out, idx, inp);
	for (int i = 0; i < 4; i++) {
		CHECK(isinf(out[i]) && out[i] < 0);
		CHECK_EQ_INT(idx[i], flat[i]);
	}
	/* NaN propagates (PyTorch) */
	ffill(inp, 16, 1.0f);
	inp[5] = NAN;
	cpu_maxpool_forward(&s, out, idx, inp);
	CHECK(isnan(out[0]) && idx[0] == 5);
	CHECK(isnan(out[3]) && idx[3] == 5);
}

struct avg_ctx {
	int B, C, HW;
	float *out, *inp, *r;
};

static double
avg_loss(void *p)
{
	struct avg_ctx *x = p;

	cpu_avgpool_forward(x->B, x->C, x->HW, x->out, x->inp);
	return dot(x->out, x->r, (size_t)x->B * x->C);
}

TEST(avgpool)
{
	static const int sh[][3] = { { 3, 5, 49 }, { 4, 7, 1 }, { 2, 3, 16 } };

	for (size_t t = 0; t < sizeof sh / sizeof sh[0]; t++) {
		int B = sh[t][0], C = sh[t][1], HW = sh[t][2];
		size_t ni = (size_t)B * C * HW, no = (size_t)B * C;
		float *inp = frand(ni, -1, 1), *out = frand(no, 0, 1);
		float *r = frand(no, -1, 1), *gi0 = frand(ni, -1, 1);
		float *gi = fdup(gi0, ni);
		double *rout = xcalloc(no, sizeof(double));
		double *rgi = xcalloc(ni, sizeof(double)), *want;
		struct avg_ctx ctx = { B, C, HW, out, inp, r };

		t_diag("avgpool B=%d C=%d HW=%d", B, C, HW);
		for (size_t i = 0; i < ni; i++) {
			rout[i / HW] += inp[i] / (double)HW;
			rgi[i] = r[i / HW] / (double)HW;
		}
		cpu_avgpool_forward(B, C, HW, out, inp);
		check_close("out", out, rout, no, 1e-7, 1e-6);
		for (int k = 1; k <= 2; k++) {
			cpu_avgpool_backward(B, C, HW, gi, r);
			want = acc_ref(gi0, rgi, k, ni);
			check_close(k == 1 ? "backward x1" : "backward x2", gi,
			    want, ni, 1e-6, 1e-6);
			free(want);
		}
		memset(gi, 0, ni * sizeof(float));
		cpu_avgpool_backward(B, C, HW, gi, r);
		check_fd("fd dinp", inp, ni, gi, avg_loss, &ctx, 0.25f, 1e-5,
		    1e-4);
		free(inp), free(out), free(r), free(gi0), free(gi);
		free(rout), free(rgi);
	}
}

/* ------------------------------------------------------------------------ */
/* elementwise                                                              */

TEST(eltwise_relu_add)
{
	size_t n = 100003;	/* past the threading threshold, odd */
	float *a = frand(n, -1, 1), *b = frand(n, -1, 1), *out = frand(n, 0, 1);
	float *d = frand(n, -1, 1), *ga = frand(n, -1, 1);
	float *gb = frand(n, -1, 1);
	float *ga0 = fdup(ga, n), *gb0 = fdup(gb, n);

	a[0] = 0.0f;
	cpu_relu_forward(out, a, n);
	for (size_t i = 0; i < n; i++)
		CHECK(out[i] == (a[i] > 0 ? a[i] : 0.0f));
	cpu_relu_backward(ga, d, out, n);
	cpu_relu_backward(ga, d, out, n);
	for (size_t i = 0; i < n; i++)
		CHECK(ga[i] == (out[i] > 0 ? ga0[i] + d[i] + d[i] : ga0[i]));
	CHECK(ga[0] == ga0[0]);		/* relu'(0) = 0, as in PyTorch */

	cpu_add_forward(out, a, b, n);
	for (size_t i = 0; i < n; i++)
		CHECK(out[i] == a[i] + b[i]);
	memcpy(ga, ga0, n * sizeof(float));
	cpu_add_backward(ga, gb, d, n);
	cpu_add_backward(ga, NULL, d, n);
	cpu_add_backward(NULL, gb, d, n);
	for (size_t i = 0; i < n; i++) {
		CHECK(ga[i] == ga0[i] + d[i] + d[i]);
		CHECK(gb[i] == gb0[i] + d[i] + d[i]);
	}
	free(a), free(b), free(out), free(d), free(ga), free(gb);
	free(ga0), free(gb0);
}

struct gelu_ctx {
	size_t n;
	float *out, *inp, *r;
};

static double
gelu_loss(void *p)
{
	struct gelu_ctx *x = p;

	cpu_gelu_forward(x->out, x->inp, x->n);
	return dot(x->out, x->r, x->n);
}

TEST(eltwise_gelu)
{
	size_t n = 50001;
	float *inp = frand(n, -6, 6), *out = frand(n, 0, 1);
	float *r = frand(n, -1, 1), *g0 = frand(n, -1, 1), *g = fdup(g0, n);
	double *rout = xcalloc(n, sizeof(double));
	double *rg = xcalloc(n, sizeof(double)), *want;
	struct gelu_ctx ctx = { n, out, inp, r };

	inp[0] = 0.0f, inp[1] = -10.0f, inp[2] = 10.0f;
	for (size_t i = 0; i < n; i++) {
		double x = inp[i];

		rout[i] = 0.5 * x * (1 + erf(x / sqrt(2.0)));
		rg[i] = r[i] * (0.5 * (1 + erf(x / sqrt(2.0))) +
		    x * exp(-0.5 * x * x) / sqrt(2 * M_PI));
	}
	cpu_gelu_forward(out, inp, n);
	/* erf is Abramowitz-Stegun 7.1.26, as in PyTorch's CPU GELU: its
	 * absolute error of 1.5e-7 becomes up to 0.5 |x| 1.5e-7 in GELU,
	 * 4.5e-7 over [-6, 6] */
	check_close("forward", out, rout, n, 5e-7, 1e-6);
	for (int k = 1; k <= 2; k++) {
		cpu_gelu_backward(g, r, inp, n);
		want = acc_ref(g0, rg, k, n);
		check_close(k == 1 ? "backward x1" : "backward x2", g, want, n,
		    1e-6, 1e-6);
		free(want);
	}
	memset(g, 0, n * sizeof(float));
	cpu_gelu_backward(g, r, inp, n);
	check_fd("fd dinp", inp, n, g, gelu_loss, &ctx, 1e-2f, 1e-3, 1e-3);
	free(inp), free(out), free(r), free(g0), free(g), free(rout), free(rg);
}

TEST(eltwise_sumsq_scale)
{
	static const size_t sizes[] = { 0, 1, 7, 16384, 16385, 3000017 };

	for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
		size_t n = sizes[t];
		float *x = frand(n, -3, 3);
		double ref = 0, got, e;

		/* a float squared is exact in double; the sum in extended
		 * precision is the reference */
		long double acc = 0;
		for (size_t i = 0; i < n; i++)
			acc += (long double)x[i] * x[i];
		ref = (double)acc;
		got = cpu_sumsq(x, n);
		e = fabs(got - ref);
		t_diag("sumsq n=%zu: %.17g, abs err %.3g", n, got, e);
		CHECK(e <= 1e-12 * ref);
		if (n > 0) {
			float *y = fdup(x, n);

			cpu_scale(y, n, 0.375f);
			for (size_t i = 0; i < n; i++)
				CHECK(y[i] == x[i] * 0.375f);
			free(y);
		}
		free(x);
	}
}

/* ------------------------------------------------------------------------ */
/* determinism                                                              */

/* Every kernel's outputs for one thread count, concatenated. */
static float *
run_all(int threads, size_t *len)
{
	static const int sh[][9] = {
		{ 16, 16, 16, 16, 32, 3, 3, 1, 1 },	/* a sample a GEMM */
		{ 16, 32, 16, 16, 64, 1, 1, 2, 0 },	/* 1x1 downsample */
		{ 64, 64, 4, 4, 64, 3, 3, 1, 1 },	/* grouped */
		{ 8, 64, 7, 7, 64, 1, 1, 1, 0 },	/* gathered 1x1 */
		{ 2, 3, 64, 64, 16, 7, 7, 2, 3 },	/* stem */
		{ 1, 8, 48, 48, 8, 3, 3, 1, 1 },	/* dinp as a conv */
		{ 40, 32, 8, 8, 32, 3, 3, 1, 1 },	/* grouped, 2 chunks */
	};
	size_t cap = 0, at = 0;
	float *res;

	backend_cpu()->set_threads(threads);
	for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
		const int *v = sh[i];
		struct conv_shape s = conv_make(v[0], v[1], v[2], v[3], v[4],
		    v[5], v[6], v[7], v[8]);

		cap += (size_t)s.B * s.K * s.P * s.Q + 2 * (size_t)s.B * s.C *
		    s.H * s.W + (size_t)s.K * s.C * s.R * s.S + s.K;
	}
	cap += 9 * (size_t)64 * 64 * 64 + 6 * 64 + 4 + (1 << 20);
	res = xcalloc(cap, sizeof(float));

	rng = 42;
	for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
		const int *v = sh[i];
		struct conv_shape s = conv_make(v[0], v[1], v[2], v[3], v[4],
		    v[5], v[6], v[7], v[8]);
		size_t ni = (size_t)s.B * s.C * s.H * s.W;
		size_t nw = (size_t)s.K * s.C * s.R * s.S;
		size_t no = (size_t)s.B * s.K * s.P * s.Q;
		float *inp = frand(ni, -1, 1), *w = frand(nw, -1, 1);
		float *bias = frand(s.K, -1, 1), *d = frand(no, -1, 1);
		float *scratch = xcalloc(cpu_conv2d_scratch(&s), sizeof(float));

		cpu_conv2d_forward(&s, res + at, inp, w, bias, scratch);
		at += no;
		memcpy(res + at, inp, ni * sizeof(float));
		cpu_conv2d_backward(&s, res + at, res + at + ni,
		    res + at + ni + nw, d, inp, w, scratch);
		at += ni + nw + s.K;
		free(inp), free(w), free(bias), free(d), free(scratch);
	}
	{
		int B = 64, C = 64, HW = 64;
		size_t n = (size_t)B * C * HW;
		float *x = frand(n, -2, 2), *d = frand(n, -1, 1);
		float *g = frand(C, 0.5, 1.5), *b = frand(C, -1, 1);
		float *rm = xcalloc(C, sizeof(float)), *rv = frand(C, 1, 1);
		float *mean = res + at, *rstd = res + at + C;
		struct pool_shape ps = pool_make(B, C, 8, 8, 3, 2, 1);
		int32_t *idx = xcalloc((size_t)B * C * ps.P * ps.Q,
		    sizeof(int32_t));
		double ss;

		at += 2 * C;
		cpu_batchnorm_forward(B, C, HW, res + at, x, g, b, mean, rstd,
		    rm, rv, 0.1f, 1e-5f, 1, 1, NULL, 0);
		at += n;
		cpu_batchnorm_backward(B, C, HW, res + at, res + at + n,
		    res + at + n + C, d, x, g, mean, rstd, NULL, NULL, 0);
		at += n + 2 * C;
		/* fused with a residual (d) and the ReLU */
		cpu_batchnorm_forward(B, C, HW, res + at, x, g, b, mean, rstd,
		    rm, rv, 0.1f, 1e-5f, 1, 0, d, 1);
		cpu_batchnorm_backward(B, C, HW, res + at + n, res + at + 2 * n,
		    res + at + 2 * n + C, x, x, g, mean, rstd,
		    res + at + 2 * n + 2 * C, res + at, 1);
		at += 3 * n + 2 * C;
		cpu_maxpool_forward(&ps, res + at, idx, x);
		at += (size_t)B * C * ps.P * ps.Q;
		cpu_maxpool_backward(&ps, res + at, d, idx);
		at += n;
		cpu_gelu_forward(res + at, x, n);
		at += n;
		cpu_gelu_backward(res + at, d, x, n);
		at += n;
		cpu_avgpool_forward(B, C, HW, res + at, x);
		at += (size_t)B * C;
		ss = cpu_sumsq(res, at);
		memcpy(res + at, &ss, sizeof ss);
		at += 2;
		free(x), free(d), free(g), free(b), free(rm), free(rv);
		free(idx);
	}
	CHECK(at <= cap);
	*len = at;
	return res;
}

/* Bit for bit at 1, 2 and 3 threads and in a second run at 2; see
 * bit_identical_across_runs_and_threads in test_vit_ops.c. */
TEST(cnn_deterministic)
{
	static const int threads[] = { 1, 2, 3, 2 };
	float *res[4];
	size_t n[4];
	int r;

	t_diag("OpenBLAS core: %s (%s)", cpu_blas_core(), cpu_blas_config());
	for (r = 0; r < 4; r++)
		res[r] = run_all(threads[r], &n[r]);
	t_diag("%zu floats of results compared", n[0]);
	for (r = 1; r < 4; r++) {
		CHECK(n[r] == n[0]);
		for (size_t i = 0; i < n[0]; i++)
			if (memcmp(&res[0][i], &res[r][i], sizeof(float)) != 0) {
				t_fail(__FILE__, __LINE__, "1 and %d threads%s "
				    "first differ at float %zu: %.9g vs %.9g",
				    threads[r], r == 3 ? " (second run)" : "",
				    i, res[0][i], res[r][i]);
			}
	}
	for (r = 0; r < 4; r++)
		free(res[r]);
}
