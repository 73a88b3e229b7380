/*
 * eltwise.c - elementwise kernels on the CPU: ReLU, residual add, exact
 * (erf) GELU, and the sum of squares and scaling used for gradient
 * clipping.
 */
#include "config.h"

#include <math.h>
#include <stddef.h>

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
	for (size_t i = 0; i < n; i++)
		dinp[i] += out[i] > 0.0f ? dout[i] : 0.0f;
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

/* out = x/2 (1 + erf(x/sqrt 2)), PyTorch's nn.GELU() default */
void
cpu_gelu_forward(float *out, const float *inp, size_t n)
{
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN / 8)
	for (size_t i = 0; i < n; i++) {
		float x = inp[i];

		out[i] = 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2));
	}
}

/* dinp += dout (Phi(x) + x phi(x)) */
void
cpu_gelu_backward(float *dinp, const float *dout, const float *inp,
    size_t n)
{
	const float rsqrt2pi = (float)(0.5 * M_2_SQRTPI * M_SQRT1_2);

#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN / 8)
	for (size_t i = 0; i < n; i++) {
		float x = inp[i];
		float cdf = 0.5f * (1.0f + erff(x * (float)M_SQRT1_2));
		float pdf = expf(-0.5f * x * x) * rsqrt2pi;

		dinp[i] += dout[i] * (cdf + x * pdf);
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
