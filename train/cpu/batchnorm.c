/*
 * batchnorm.c - BatchNorm2d on the CPU with PyTorch's semantics: training
 * normalises with the biased batch variance and moves the running variance
 * toward the unbiased one. Statistics are sums in double over a fixed
 * order, so they do not depend on the thread count.
 */
#include "config.h"

#include <math.h>
#include <stddef.h>

#include "cpu.h"

/*
 * Channels are handled in blocks of CBLK, samples outermost: on ResNet's
 * small late maps (HW down to 1) a channel alone is a strided trickle,
 * while a block reads whole rows. Each channel keeps LANES partial sums
 * over its plane; the fixed lane pattern keeps the FPU busy and the
 * result the same on every run.
 */
#define CBLK		8
#define LANES		8

struct sums {
	double a[LANES], b[LANES];
};

/* Lanes of x - shift and of (x - shift)^2. */
static void
sums_moments(struct sums *s, const float *x, int HW, double shift)
{
	int i = 0, l;

	for (; i + LANES <= HW; i += LANES)
		for (l = 0; l < LANES; l++) {
			double v = (double)x[i + l] - shift;

			s->a[l] += v;
			s->b[l] += v * v;
		}
	for (l = 0; i < HW; i++, l++) {
		double v = (double)x[i] - shift;

		s->a[l] += v;
		s->b[l] += v * v;
	}
}

/* Lanes of d and of d (x - mean). */
static void
sums_dots(struct sums *s, const float *x, const float *d, int HW,
    double mean)
{
	int i = 0, l;

	for (; i + LANES <= HW; i += LANES)
		for (l = 0; l < LANES; l++) {
			s->a[l] += d[i + l];
			s->b[l] += (double)d[i + l] * ((double)x[i + l] - mean);
		}
	for (l = 0; i < HW; i++, l++) {
		s->a[l] += d[i];
		s->b[l] += (double)d[i] * ((double)x[i] - mean);
	}
}

static void
sums_total(const struct sums *s, double *a, double *b)
{
	*a = *b = 0;
	for (int l = 0; l < LANES; l++) {
		*a += s->a[l];
		*b += s->b[l];
	}
}

/* ------------------------------------------------------------------------ */
/* forward                                                                  */

/* inp (B,C,HW) -> out (B,C,HW); mean, rstd (C) */
void
cpu_batchnorm_forward(int B, int C, int HW, float *out, const float *inp,
    const float *gamma, const float *beta, float *mean, float *rstd,
    float *run_mean, float *run_var, float momentum, float eps, int training,
    int update)
{
	double n = (double)B * HW;

#pragma omp parallel for schedule(static) \
    if ((size_t)B * C * HW > CPU_PAR_MIN)
	for (int c0 = 0; c0 < C; c0 += CBLK) {
		int c1 = c0 + CBLK < C ? c0 + CBLK : C;
		struct sums sm[CBLK] = { { { 0 }, { 0 } } };
		double shift[CBLK];
		float m[CBLK], a[CBLK], bt[CBLK];

		/* Shifting by a value of the channel keeps the one-pass
		 * variance from cancelling when the mean is large against
		 * the spread. */
		for (int c = c0; c < c1; c++)
			shift[c - c0] = training && n > 0 ?
			    inp[(size_t)c * HW] : 0;
		for (int b = 0; training && b < B; b++)
			for (int c = c0; c < c1; c++)
				sums_moments(&sm[c - c0], inp + ((size_t)b * C +
				    c) * HW, HW, shift[c - c0]);
		for (int c = c0; c < c1; c++) {
			float g = gamma != NULL ? gamma[c] : 1.0f;
			double s1, s2, mu, var, uvar;

			bt[c - c0] = beta != NULL ? beta[c] : 0.0f;
			if (!training) {
				m[c - c0] = run_mean[c];
				a[c - c0] = (float)(1.0 /
				    sqrt((double)run_var[c] + eps)) * g;
				continue;
			}
			sums_total(&sm[c - c0], &s1, &s2);
			mu = s1 / n;
			var = s2 / n - mu * mu;
			if (var < 0)
				var = 0;
			mu += shift[c - c0];
			mean[c] = m[c - c0] = (float)mu;
			rstd[c] = (float)(1.0 / sqrt(var + eps));
			a[c - c0] = rstd[c] * g;
			if (!update)
				continue;
			/* PyTorch: the running variance is the unbiased
			 * one; with one value per channel it refuses to
			 * train at all. */
			uvar = n > 1 ? var * n / (n - 1) : var;
			run_mean[c] = (float)((1.0 - momentum) * run_mean[c] +
			    momentum * mu);
			run_var[c] = (float)((1.0 - momentum) * run_var[c] +
			    momentum * uvar);
		}
		for (int b = 0; b < B; b++)
			for (int c = c0; c < c1; c++) {
				const float *x = inp + ((size_t)b * C + c) * HW;
				float *o = out + ((size_t)b * C + c) * HW;
				float mc = m[c - c0], ac = a[c - c0];
				float bc = bt[c - c0];

				for (int i = 0; i < HW; i++)
					o[i] = (x[i] - mc) * ac + bc;
			}
	}
}

/* ------------------------------------------------------------------------ */
/* backward                                                                 */

/*
 * xhat = (x - mean) rstd; dbeta += sum dout; dgamma += sum dout xhat;
 * dinp += gamma rstd (dout - mean(dout) - xhat mean(dout xhat)).
 */
void
cpu_batchnorm_backward(int B, int C, int HW, float *dinp, float *dgamma,
    float *dbeta, const float *dout, const float *inp, const float *gamma,
    const float *mean, const float *rstd)
{
	double n = (double)B * HW;

#pragma omp parallel for schedule(static) \
    if ((size_t)B * C * HW > CPU_PAR_MIN)
	for (int c0 = 0; c0 < C; c0 += CBLK) {
		int c1 = c0 + CBLK < C ? c0 + CBLK : C;
		struct sums sm[CBLK] = { { { 0 }, { 0 } } };
		float k[CBLK], md[CBLK], mdx[CBLK];

		for (int b = 0; b < B; b++)
			for (int c = c0; c < c1; c++) {
				size_t at = ((size_t)b * C + c) * HW;

				sums_dots(&sm[c - c0], inp + at, dout + at, HW,
				    mean[c]);
			}
		for (int c = c0; c < c1; c++) {
			double sd, sdx;
			float g = gamma != NULL ? gamma[c] : 1.0f;

			sums_total(&sm[c - c0], &sd, &sdx);
			sdx *= rstd[c];
			if (dbeta != NULL)
				dbeta[c] += (float)sd;
			if (dgamma != NULL)
				dgamma[c] += (float)sdx;
			k[c - c0] = g * rstd[c];
			md[c - c0] = (float)(sd / n);
			mdx[c - c0] = (float)(sdx / n);
		}
		if (dinp == NULL)
			continue;
		for (int b = 0; b < B; b++)
			for (int c = c0; c < c1; c++) {
				size_t at = ((size_t)b * C + c) * HW;
				const float *x = inp + at, *d = dout + at;
				float *dx = dinp + at;
				float mc = mean[c], r = rstd[c], kc = k[c - c0];
				float mdc = md[c - c0], mdxc = mdx[c - c0];

				for (int i = 0; i < HW; i++)
					dx[i] += kc * (d[i] - mdc -
					    (x[i] - mc) * r * mdxc);
			}
	}
}
