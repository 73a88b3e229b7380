/*
 * batchnorm.c - BatchNorm2d on the CPU with PyTorch's semantics: training
 * normalises with the biased batch variance and moves the running variance
 * toward the unbiased one. Statistics are sums in double over a fixed
 * order, so they do not depend on the thread count. ResNet's residual add
 * and ReLU after a norm ride along in the same passes.
 */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* A norm costs several passes and a dozen flops an element: it pays to
 * wake the team sooner than for a plain elementwise loop. */
#define BN_PAR_MIN	(CPU_PAR_MIN / 4)

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

/* d where the ReLU's output o is > 0, else +0: a bit mask, because a
 * branch on random signs mispredicts half the time. */
static inline float
relu_mask(float d, float o)
{
	uint32_t u;

	memcpy(&u, &d, sizeof(u));
	u &= -(uint32_t)(o > 0.0f);
	memcpy(&d, &u, sizeof(d));
	return d;
}

/* The same with d masked where the ReLU's output o is not > 0. */
static void
sums_dots_relu(struct sums *s, const float *x, const float *d,
    const float *o, int HW, double mean)
{
	int i = 0, l;

	for (; i + LANES <= HW; i += LANES)
		for (l = 0; l < LANES; l++) {
			float dv = relu_mask(d[i + l], o[i + l]);

			s->a[l] += dv;
			s->b[l] += (double)dv * ((double)x[i + l] - mean);
		}
	for (l = 0; i < HW; i++, l++) {
		float dv = relu_mask(d[i], o[i]);

		s->a[l] += dv;
		s->b[l] += (double)dv * ((double)x[i] - mean);
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

/* o = (x - m) a + b, then + res, then ReLU: the separate passes' bits */
static void
bn_apply(float *o, const float *x, const float *res, int relu, int HW,
    float m, float a, float b)
{
	int i;

	if (res == NULL && !relu) {
		for (i = 0; i < HW; i++)
			o[i] = (x[i] - m) * a + b;
	} else if (res == NULL) {
		for (i = 0; i < HW; i++) {
			float v = (x[i] - m) * a + b;

			o[i] = v < 0.0f ? 0.0f : v;	/* NaN passes */
		}
	} else if (!relu) {
		for (i = 0; i < HW; i++)
			o[i] = (x[i] - m) * a + b + res[i];
	} else {
		for (i = 0; i < HW; i++) {
			float v = (x[i] - m) * a + b + res[i];

			o[i] = v < 0.0f ? 0.0f : v;
		}
	}
}

/*
 * The same over a run of whole planes of a channel block, each element's
 * constants at its own index: on ResNet's late maps (HW 16 down to 1) a
 * plane is too short for a loop of its own, while a block's planes of one
 * sample sit side by side.
 */
static void
bn_apply_span(float *o, const float *x, const float *res, int relu, int n,
    const float *m, const float *a, const float *b)
{
	int i;

	if (res == NULL && !relu) {
		for (i = 0; i < n; i++)
			o[i] = (x[i] - m[i]) * a[i] + b[i];
	} else if (res == NULL) {
		for (i = 0; i < n; i++) {
			float v = (x[i] - m[i]) * a[i] + b[i];

			o[i] = v < 0.0f ? 0.0f : v;
		}
	} else if (!relu) {
		for (i = 0; i < n; i++)
			o[i] = (x[i] - m[i]) * a[i] + b[i] + res[i];
	} else {
		for (i = 0; i < n; i++) {
			float v = (x[i] - m[i]) * a[i] + b[i] + res[i];

			o[i] = v < 0.0f ? 0.0f : v;
		}
	}
}

/* Planes at most this long go a channel block at a time. */
#define SPAN_HW		16

/* inp (B,C,HW), res (B,C,HW) or NULL -> out (B,C,HW); mean, rstd (C) */
void
cpu_batchnorm_forward(int B, int C, int HW, float *out, const float *inp,
    const float *gamma, const float *beta, float *mean, float *rstd,
    float *run_mean, float *run_var, float momentum, float eps, int training,
    int update, const float *res, int relu)
{
	double n = (double)B * HW;

#pragma omp parallel for schedule(static) \
    if ((size_t)B * C * HW >= BN_PAR_MIN && C > CBLK)
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
		if (HW <= SPAN_HW) {
			float em[CBLK * SPAN_HW], ea[CBLK * SPAN_HW];
			float eb[CBLK * SPAN_HW];
			int n = (c1 - c0) * HW;

			for (int i = 0; i < n; i++) {
				em[i] = m[i / HW];
				ea[i] = a[i / HW];
				eb[i] = bt[i / HW];
			}
			for (int b = 0; b < B; b++) {
				size_t at = ((size_t)b * C + c0) * HW;

				bn_apply_span(out + at, inp + at, res != NULL ?
				    res + at : NULL, relu, n, em, ea, eb);
			}
			continue;
		}
		for (int b = 0; b < B; b++)
			for (int c = c0; c < c1; c++) {
				size_t at = ((size_t)b * C + c) * HW;

				bn_apply(out + at, inp + at, res != NULL ?
				    res + at : NULL, relu, HW, m[c - c0],
				    a[c - c0], bt[c - c0]);
			}
	}
}

/* ------------------------------------------------------------------------ */
/* backward                                                                 */

/*
 * One plane: dv = d, masked where o > 0 unless o is NULL; dr += dv;
 * dx += k (dv - md - (x - m) r mdx). dx or dr may be NULL.
 */
static void
bn_dinp(float *dx, float *dr, const float *d, const float *x,
    const float *o, int HW, float m, float r, float k, float md, float mdx)
{
	int i;

	if (o == NULL && dr == NULL) {
		for (i = 0; i < HW; i++)
			dx[i] += k * (d[i] - md - (x[i] - m) * r * mdx);
	} else if (o == NULL) {
		for (i = 0; i < HW; i++)
			dr[i] += d[i];
		if (dx != NULL)
			for (i = 0; i < HW; i++)
				dx[i] += k * (d[i] - md - (x[i] - m) * r *
				    mdx);
	} else if (dr == NULL) {
		for (i = 0; i < HW; i++)
			dx[i] += k * (relu_mask(d[i], o[i]) - md -
			    (x[i] - m) * r * mdx);
	} else if (dx == NULL) {
		for (i = 0; i < HW; i++)
			dr[i] += relu_mask(d[i], o[i]);
	} else {
		for (i = 0; i < HW; i++) {
			float dv = relu_mask(d[i], o[i]);

			dr[i] += dv;
			dx[i] += k * (dv - md - (x[i] - m) * r * mdx);
		}
	}
}

/* bn_dinp over a run of planes, each element's constants at its index */
static void
bn_dinp_span(float *dx, float *dr, const float *d, const float *x,
    const float *o, int n, const float *m, const float *r, const float *k,
    const float *md, const float *mdx)
{
	int i;

	if (o == NULL && dr == NULL) {
		for (i = 0; i < n; i++)
			dx[i] += k[i] * (d[i] - md[i] - (x[i] - m[i]) * r[i] *
			    mdx[i]);
	} else if (o == NULL) {
		for (i = 0; i < n; i++)
			dr[i] += d[i];
		if (dx != NULL)
			for (i = 0; i < n; i++)
				dx[i] += k[i] * (d[i] - md[i] - (x[i] - m[i]) *
				    r[i] * mdx[i]);
	} else if (dr == NULL) {
		for (i = 0; i < n; i++)
			dx[i] += k[i] * (relu_mask(d[i], o[i]) - md[i] -
			    (x[i] - m[i]) * r[i] * mdx[i]);
	} else if (dx == NULL) {
		for (i = 0; i < n; i++)
			dr[i] += relu_mask(d[i], o[i]);
	} else {
		for (i = 0; i < n; i++) {
			float dv = relu_mask(d[i], o[i]);

			dr[i] += dv;
			dx[i] += k[i] * (dv - md[i] - (x[i] - m[i]) * r[i] *
			    mdx[i]);
		}
	}
}

/*
 * dout is first masked by the fused ReLU (out > 0) when relu is set; then
 * dres += dout; xhat = (x - mean) rstd; dbeta += sum dout; dgamma += sum
 * dout xhat; dinp += gamma rstd (dout - mean(dout) - xhat mean(dout xhat)).
 */
void
cpu_batchnorm_backward(int B, int C, int HW, float *dinp, float *dgamma,
    float *dbeta, const float *dout, const float *inp, const float *gamma,
    const float *mean, const float *rstd, float *dres, const float *out,
    int relu)
{
	double n = (double)B * HW;

#pragma omp parallel for schedule(static) \
    if ((size_t)B * C * HW >= BN_PAR_MIN && C > CBLK)
	for (int c0 = 0; c0 < C; c0 += CBLK) {
		int c1 = c0 + CBLK < C ? c0 + CBLK : C;
		struct sums sm[CBLK] = { { { 0 }, { 0 } } };
		float k[CBLK], md[CBLK], mdx[CBLK];

		for (int b = 0; b < B; b++)
			for (int c = c0; c < c1; c++) {
				size_t at = ((size_t)b * C + c) * HW;

				if (relu)
					sums_dots_relu(&sm[c - c0], inp + at,
					    dout + at, out + at, HW, mean[c]);
				else
					sums_dots(&sm[c - c0], inp + at,
					    dout + at, HW, mean[c]);
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
		if (dinp == NULL && dres == NULL)
			continue;
		if (HW <= SPAN_HW) {
			float em[CBLK * SPAN_HW], er[CBLK * SPAN_HW];
			float ek[CBLK * SPAN_HW], emd[CBLK * SPAN_HW];
			float emdx[CBLK * SPAN_HW];
			int n = (c1 - c0) * HW;

			for (int i = 0; i < n; i++) {
				int c = c0 + i / HW;

				em[i] = mean[c];
				er[i] = rstd[c];
				ek[i] = k[c - c0];
				emd[i] = md[c - c0];
				emdx[i] = mdx[c - c0];
			}
			for (int b = 0; b < B; b++) {
				size_t at = ((size_t)b * C + c0) * HW;

				bn_dinp_span(dinp != NULL ? dinp + at : NULL,
				    dres != NULL ? dres + at : NULL, dout + at,
				    inp + at, relu ? out + at : NULL, n, em, er,
				    ek, emd, emdx);
			}
			continue;
		}
		for (int b = 0; b < B; b++)
			for (int c = c0; c < c1; c++) {
				size_t at = ((size_t)b * C + c) * HW;

				bn_dinp(dinp != NULL ? dinp + at : NULL,
				    dres != NULL ? dres + at : NULL, dout + at,
				    inp + at, relu ? out + at : NULL, HW, mean[c],
				    rstd[c], k[c - c0], md[c - c0], mdx[c - c0]);
			}
	}
}
