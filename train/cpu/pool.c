/*
 * pool.c - max pooling (PyTorch's MaxPool2d: -inf padding, first maximum
 * wins, NaN propagates) and global average pooling on the CPU. One thread
 * owns each (b,c) plane.
 */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu.h"

/* ------------------------------------------------------------------------ */
/* max pooling                                                              */

/* inp (B,C,H,W) -> out (B,C,P,Q), idx (B,C,P,Q) = argmax offset in (H,W) */
void
cpu_maxpool_forward(const struct pool_shape *s, float *out, int32_t *idx,
    const float *inp)
{
	long planes = (long)s->B * s->C;
	size_t HW = (size_t)s->H * s->W, PQ = (size_t)s->P * s->Q;

#pragma omp parallel for schedule(static) if (planes * HW > CPU_PAR_MIN)
	for (long bc = 0; bc < planes; bc++) {
		const float *x = inp + (size_t)bc * HW;
		float *o = out + (size_t)bc * PQ;
		int32_t *ix = idx + (size_t)bc * PQ;

		for (int p = 0; p < s->P; p++) {
			int h0 = p * s->stride - s->pad, h1 = h0 + s->k;

			if (h0 < 0)
				h0 = 0;
			if (h1 > s->H)
				h1 = s->H;
			for (int q = 0; q < s->Q; q++) {
				int w0 = q * s->stride - s->pad, w1 = w0 + s->k;
				float m = -INFINITY;
				int32_t mi;

				if (w0 < 0)
					w0 = 0;
				if (w1 > s->W)
					w1 = s->W;
				/* PyTorch's CPU kernel: the first in-bounds
				 * offset unless something beats -inf. */
				mi = h0 * s->W + w0;
				for (int h = h0; h < h1; h++)
					for (int w = w0; w < w1; w++) {
						float v = x[h * s->W + w];

						if (v > m || isnan(v)) {
							m = v;
							mi = h * s->W + w;
						}
					}
				o[p * s->Q + q] = m;
				ix[p * s->Q + q] = mi;
			}
		}
	}
}

/* dinp (B,C,H,W) += dout (B,C,P,Q) routed to its argmax */
void
cpu_maxpool_backward(const struct pool_shape *s, float *dinp,
    const float *dout, const int32_t *idx)
{
	long planes = (long)s->B * s->C;
	size_t HW = (size_t)s->H * s->W, PQ = (size_t)s->P * s->Q;

#pragma omp parallel for schedule(static) if (planes * HW > CPU_PAR_MIN)
	for (long bc = 0; bc < planes; bc++) {
		float *dx = dinp + (size_t)bc * HW;
		const float *d = dout + (size_t)bc * PQ;
		const int32_t *ix = idx + (size_t)bc * PQ;

		for (size_t i = 0; i < PQ; i++)
			dx[ix[i]] += d[i];
	}
}

/* ------------------------------------------------------------------------ */
/* global average pooling                                                   */

/* inp (B,C,HW) -> out (B,C) */
void
cpu_avgpool_forward(int B, int C, int HW, float *out, const float *inp)
{
	long planes = (long)B * C;

#pragma omp parallel for schedule(static) if (planes * HW > CPU_PAR_MIN)
	for (long bc = 0; bc < planes; bc++) {
		const float *x = inp + (size_t)bc * HW;
		double sum = 0;

		for (int i = 0; i < HW; i++)
			sum += x[i];
		out[bc] = (float)(sum / HW);
	}
}

/* dinp (B,C,HW) += dout (B,C) / HW */
void
cpu_avgpool_backward(int B, int C, int HW, float *dinp, const float *dout)
{
	long planes = (long)B * C;

#pragma omp parallel for schedule(static) if (planes * HW > CPU_PAR_MIN)
	for (long bc = 0; bc < planes; bc++) {
		float *dx = dinp + (size_t)bc * HW;
		float g = dout[bc] / (float)HW;

		for (int i = 0; i < HW; i++)
			dx[i] += g;
	}
}
