/*
 * layernorm.c - PyTorch's LayerNorm over the last dimension on the CPU:
 * biased variance, statistics in double, mean and rstd saved per row for
 * backward.
 */
#include "config.h"

#include <math.h>
#include <stddef.h>

#include "cpu.h"

/* Columns one thread owns when summing dgamma and dbeta over the rows. */
#define DPARAM_COLS 16

/* ------------------------------------------------------------------------ */
/* forward                                                                  */

// inp (M,C), gamma (C), beta (C) -> out (M,C), mean (M), rstd (M)
void
cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
    const float *gamma, const float *beta, int M, int C, float eps)
{
	int i;

	if (M <= 0 || C <= 0)
		return;
#pragma omp parallel for schedule(static) if ((size_t)M * C > CPU_PAR_MIN)
	for (i = 0; i < M; i++) {
		const float *x = inp + (size_t)i * C;
		float *y = out + (size_t)i * C;
		double s = 0.0, v = 0.0, d;
		float m, r, n;
		int j;

		for (j = 0; j < C; j++)
			s += x[j];
		s /= C;
		/* Two passes: the variance of the centred values does not
		 * lose digits to a large mean. */
		for (j = 0; j < C; j++) {
			d = x[j] - s;
			v += d * d;
		}
		v /= C;
		m = (float)s;
		r = (float)(1.0 / sqrt(v + eps));
		for (j = 0; j < C; j++) {
			n = (x[j] - m) * r;
			y[j] = n * (gamma != NULL ? gamma[j] : 1.0f) +
			    (beta != NULL ? beta[j] : 0.0f);
		}
		mean[i] = m;
		rstd[i] = r;
	}
}

/* ------------------------------------------------------------------------ */
/* backward                                                                 */

/*
 * With n = (x - mean) rstd and dn = dout gamma, the input gradient is
 * rstd (dn - mean(dn) - n mean(dn n)) (the mean and rstd depend on x too).
 * Rows are independent; dgamma and dbeta sum over rows, so each thread
 * owns whole columns and adds rows in order: the bits do not depend on
 * the thread count.
 */
// dout (M,C) -> dinp (M,C) or NULL, dgamma (C) or NULL, dbeta (C) or NULL
void
cpu_layernorm_backward(float *dinp, float *dgamma, float *dbeta,
    const float *dout, const float *inp, const float *gamma,
    const float *mean, const float *rstd, int M, int C)
{
	int i, blk, nblk;

	if (M <= 0 || C <= 0)
		return;
	if (dinp != NULL) {
#pragma omp parallel for schedule(static) if ((size_t)M * C > CPU_PAR_MIN)
		for (i = 0; i < M; i++) {
			const float *x = inp + (size_t)i * C;
			const float *dy = dout + (size_t)i * C;
			float *dx = dinp + (size_t)i * C;
			float m = mean[i], r = rstd[i], n, dn, a, b;
			double sdn = 0.0, sdnn = 0.0;
			int j;

			for (j = 0; j < C; j++) {
				n = (x[j] - m) * r;
				dn = dy[j] * (gamma != NULL ? gamma[j] : 1.0f);
				sdn += dn;
				sdnn += (double)dn * n;
			}
			a = (float)(sdn / C);
			b = (float)(sdnn / C);
			for (j = 0; j < C; j++) {
				n = (x[j] - m) * r;
				dn = dy[j] * (gamma != NULL ? gamma[j] : 1.0f);
				dx[j] += (dn - a - n * b) * r;
			}
		}
	}
	if (dgamma == NULL && dbeta == NULL)
		return;
	nblk = (C + DPARAM_COLS - 1) / DPARAM_COLS;
#pragma omp parallel for schedule(static) if ((size_t)M * C > CPU_PAR_MIN)
	for (blk = 0; blk < nblk; blk++) {
		double sg[DPARAM_COLS], sb[DPARAM_COLS];
		int j0 = blk * DPARAM_COLS, nj = C - j0, j, r;

		if (nj > DPARAM_COLS)
			nj = DPARAM_COLS;
		for (j = 0; j < nj; j++)
			sg[j] = sb[j] = 0.0;
		for (r = 0; r < M; r++) {
			const float *x = inp + (size_t)r * C + j0;
			const float *dy = dout + (size_t)r * C + j0;
			float m = mean[r], rs = rstd[r];

			for (j = 0; j < nj; j++) {
				sg[j] += dy[j] * ((x[j] - m) * rs);
				sb[j] += dy[j];
			}
		}
		for (j = 0; j < nj; j++) {
			if (dgamma != NULL)
				dgamma[j0 + j] += (float)sg[j];
			if (dbeta != NULL)
				dbeta[j0 + j] += (float)sb[j];
		}
	}
}
