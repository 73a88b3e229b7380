/*
 * eltwise.c - elementwise kernels on the CPU: ReLU, residual add, exact
 * (erf) GELU, and the sum of squares and scaling used for gradient
 * clipping.
 */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu.h"

/* ------------------------------------------------------------------------ */
/* ReLU and add                                                             */

void
cpu_relu_forward(float *out, const float *inp, size_t n)
{
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++)
		out[i] = inp[i] < 0.0f ? 0.0f : inp[i];	/* NaN passes */
}

/* dinp += dout where out > 0 */
void
cpu_relu_backward(float *dinp, const float *dout, const float *out,
    size_t n)
{
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++) {
		float d = dout[i];	/* loaded either way, so it vectorises */

		dinp[i] += out[i] > 0.0f ? d : 0.0f;
	}
}

void
cpu_add_forward(float *out, const float *a, const float *b, size_t n)
{
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++)
		out[i] = a[i] + b[i];
}

/* da += dout, db += dout; either may be NULL */
void
cpu_add_backward(float *da, float *db, const float *dout, size_t n)
{
	if (da != NULL) {
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
		for (size_t i = 0; i < n; i++)
			da[i] += dout[i];
	}
	if (db != NULL) {
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
		for (size_t i = 0; i < n; i++)
			db[i] += dout[i];
	}
}

/* ------------------------------------------------------------------------ */
/* GELU                                                                     */

/*
 * GELU's erf, written on GCC vector types so it runs on 4 floats (SSE2,
 * every x86-64) or 8 (AVX2 with FMA, chosen at run time): libm's erff
 * does not vectorise and made GELU a fifth of a ViT step.
 *
 * exp: x = n ln2 + r with |r| <= ln2/2, e^r from Cephes expf's degree-6
 * polynomial, 2^n built in the exponent bits; x is clamped to [-87, 88].
 * erf: Abramowitz and Stegun 7.1.26 (absolute error under 1.5e-7), the
 * formula PyTorch's vectorised CPU erf uses for nn.GELU() in fp32.
 */
#define GELU_KERNELS(W, SUFFIX, ATTR)					\
typedef float vf##SUFFIX __attribute__((vector_size(4 * W)));		\
typedef int32_t vi##SUFFIX __attribute__((vector_size(4 * W)));		\
									\
ATTR static inline vf##SUFFIX						\
sel##SUFFIX(vi##SUFFIX m, vf##SUFFIX a, vf##SUFFIX b)			\
{									\
	return (vf##SUFFIX)(((vi##SUFFIX)a & m) | ((vi##SUFFIX)b & ~m));\
}									\
									\
ATTR static inline vf##SUFFIX						\
exp##SUFFIX(vf##SUFFIX x)						\
{									\
	vf##SUFFIX n, r, p, lo = x - x - 87.0f, hi = x - x + 88.0f;	\
	vf##SUFFIX half = x - x + 0.5f;					\
	vi##SUFFIX e;							\
									\
	x = sel##SUFFIX(x < lo, lo, x);					\
	x = sel##SUFFIX(x > hi, hi, x);					\
	n = x * 1.44269504088896341f + sel##SUFFIX(x >= 0.0f, half, -half); \
	e = __builtin_convertvector(n, vi##SUFFIX);			\
	n = __builtin_convertvector(e, vf##SUFFIX);			\
	r = x - n * 0.693359375f;					\
	r = r + n * 2.12194440e-4f;					\
	p = r * 1.9875691500e-4f + 1.3981999507e-3f;			\
	p = p * r + 8.3334519073e-3f;					\
	p = p * r + 4.1665795894e-2f;					\
	p = p * r + 1.6666665459e-1f;					\
	p = p * r + 5.0000001201e-1f;					\
	p = p * r * r + r + 1.0f;					\
	return p * (vf##SUFFIX)((e + 127) << 23);			\
}									\
									\
ATTR static inline vf##SUFFIX						\
erf##SUFFIX(vf##SUFFIX x)						\
{									\
	vi##SUFFIX sign = (vi##SUFFIX)x & (int32_t)0x80000000;		\
	vf##SUFFIX a = (vf##SUFFIX)((vi##SUFFIX)x & 0x7fffffff), t, r;	\
									\
	t = 1.0f / (a * 0.3275911f + 1.0f);				\
	r = t * 1.061405429f - 1.453152027f;				\
	r = r * t + 1.421413741f;					\
	r = r * t - 0.284496736f;					\
	r = r * t + 0.254829592f;					\
	r = 1.0f - r * t * exp##SUFFIX(-a * a);				\
	return (vf##SUFFIX)((vi##SUFFIX)r | sign);			\
}									\
									\
/* out[i0..i1) = x/2 (1 + erf(x/sqrt 2)) */				\
ATTR static void							\
gelu_fwd##SUFFIX(float *out, const float *inp, size_t i0, size_t i1)	\
{									\
	size_t i;							\
									\
	for (i = i0; i + W <= i1; i += W) {				\
		vf##SUFFIX x;						\
									\
		memcpy(&x, inp + i, sizeof(x));				\
		x = 0.5f * x * (1.0f + erf##SUFFIX(x * (float)M_SQRT1_2)); \
		memcpy(out + i, &x, sizeof(x));				\
	}								\
	for (; i < i1; i++)						\
		out[i] = 0.5f * inp[i] * (1.0f + erff(inp[i] *		\
		    (float)M_SQRT1_2));					\
}									\
									\
/* dinp[i0..i1) += dout (Phi(x) + x phi(x)) */				\
ATTR static void							\
gelu_bwd##SUFFIX(float *dinp, const float *dout, const float *inp,	\
    size_t i0, size_t i1)						\
{									\
	const float k = (float)(0.5 * M_2_SQRTPI * M_SQRT1_2);		\
	size_t i;							\
									\
	for (i = i0; i + W <= i1; i += W) {				\
		vf##SUFFIX x, d, g;					\
									\
		memcpy(&x, inp + i, sizeof(x));				\
		memcpy(&d, dout + i, sizeof(d));			\
		memcpy(&g, dinp + i, sizeof(g));			\
		g += d * (0.5f * (1.0f + erf##SUFFIX(x * (float)M_SQRT1_2)) + \
		    x * exp##SUFFIX(-0.5f * x * x) * k);		\
		memcpy(dinp + i, &g, sizeof(g));			\
	}								\
	for (; i < i1; i++)						\
		dinp[i] += dout[i] * (0.5f * (1.0f + erff(inp[i] *	\
		    (float)M_SQRT1_2)) + inp[i] * expf(-0.5f * inp[i] *	\
		    inp[i]) * k);					\
}

GELU_KERNELS(4, 4, )
#if defined(__x86_64__) && defined(__GNUC__)
GELU_KERNELS(8, 8, __attribute__((target("avx2,fma"))))
#define HAVE_GELU8 1
#endif

static int
use_avx2(void)
{
#ifdef HAVE_GELU8
	static int v = -1;

	if (v < 0) {
		__builtin_cpu_init();
		v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
	}
	return v;
#else
	return 0;
#endif
}

/*
 * The calling thread's slice [*i0, *i1) of n: a fixed share, a multiple of
 * 8 floats, so where the vector and the scalar tail meet depends on n and
 * the thread count only.
 */
static void
gelu_slice(size_t n, size_t *i0, size_t *i1)
{
	size_t t = 0, nt = 1;

#ifdef _OPENMP
	t = (size_t)omp_get_thread_num();
	nt = (size_t)omp_get_num_threads();
#endif
	*i0 = n / 8 * t / nt * 8;
	*i1 = t == nt - 1 ? n : n / 8 * (t + 1) / nt * 8;
}

/* out = x/2 (1 + erf(x/sqrt 2)), PyTorch's nn.GELU() default */
void
cpu_gelu_forward(float *out, const float *inp, size_t n)
{
	int wide = use_avx2();

#pragma omp parallel if (n > CPU_PAR_MIN / 8)
	{
		size_t i0, i1;

		gelu_slice(n, &i0, &i1);
#ifdef HAVE_GELU8
		if (wide)
			gelu_fwd8(out, inp, i0, i1);
		else
#endif
			gelu_fwd4(out, inp, i0, i1);
		(void)wide;
	}
}

/* dinp += dout (Phi(x) + x phi(x)) */
void
cpu_gelu_backward(float *dinp, const float *dout, const float *inp,
    size_t n)
{
	int wide = use_avx2();

#pragma omp parallel if (n > CPU_PAR_MIN / 8)
	{
		size_t i0, i1;

		gelu_slice(n, &i0, &i1);
#ifdef HAVE_GELU8
		if (wide)
			gelu_bwd8(dinp, dout, inp, i0, i1);
		else
#endif
			gelu_bwd4(dinp, dout, inp, i0, i1);
		(void)wide;
	}
}

/* ------------------------------------------------------------------------ */
/* gradient clipping helpers                                                */

/* At most this many blocks; a block is never shorter than SUMSQ_MINBLK. */
#define SUMSQ_NBLK	1024
#define SUMSQ_MINBLK	16384
#define LANES		8

/*
 * Sum of squares in double. The blocks and their lanes depend on n alone
 * and the partial sums are added in block order, so the result is the same
 * for any thread count.
 */
double
cpu_sumsq(const float *x, size_t n)
{
	double part[SUMSQ_NBLK], sum = 0;
	size_t blk = (n + SUMSQ_NBLK - 1) / SUMSQ_NBLK;
	long nblk;

	if (blk < SUMSQ_MINBLK)
		blk = SUMSQ_MINBLK;
	nblk = (long)((n + blk - 1) / blk);

#pragma omp parallel for schedule(static) if (nblk > 1)
	for (long j = 0; j < nblk; j++) {
		size_t i = (size_t)j * blk, end = i + blk < n ? i + blk : n;
		double a[LANES] = { 0 }, t = 0;

		for (; i + LANES <= end; i += LANES)
			for (int l = 0; l < LANES; l++)
				a[l] += (double)x[i + l] * x[i + l];
		for (; i < end; i++)
			t += (double)x[i] * x[i];
		for (int l = 0; l < LANES; l++)
			t += a[l];
		part[j] = t;
	}
	for (long j = 0; j < nblk; j++)
		sum += part[j];
	return sum;
}

void
cpu_scale(float *x, size_t n, float s)
{
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++)
		x[i] *= s;
}
