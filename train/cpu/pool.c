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

/*
 * inp (B,C,H,W) -> out (B,C,P,Q), idx (B,C,P,Q) = argmax offset in (H,W).
 * A window's scan is a chain of dependent compares, so a row of outputs
 * is scanned together: window position outside, output column inside, each
 * output still seeing its window in row-major order.
 */
void
cpu_maxpool_forward(const struct pool_shape *s, float *out, int32_t *idx,
    const float *inp)
{
	long planes = (long)s->B * s->C;
	/* locals: the stores through out and idx could alias *s */
	const int H = s->H, W = s->W, P = s->P, Q = s->Q, k = s->k;
	const int stride = s->stride, pad = s->pad;
	size_t HW = (size_t)H * W, PQ = (size_t)P * Q;

#pragma omp parallel for schedule(static) if (planes * HW > CPU_PAR_MIN)
	for (long bc = 0; bc < planes; bc++) {
		const float *x = inp + (size_t)bc * HW;

		for (int p = 0; p < P; p++) {
			float *o = out + (size_t)bc * PQ + (size_t)p * Q;
			int32_t *ix = idx + (size_t)bc * PQ + (size_t)p * Q;
			int h0 = p * stride - pad, h1 = h0 + k;

			if (h0 < 0)
				h0 = 0;
			if (h1 > H)
				h1 = H;
			/* PyTorch's CPU kernel: the first in-bounds offset
			 * unless something beats -inf; the first maximum
			 * wins, and the last NaN. */
			for (int q = 0; q < Q; q++) {
				int w0 = q * stride - pad;

				o[q] = -INFINITY;
				ix[q] = h0 * W + (w0 < 0 ? 0 : w0);
			}
			for (int h = h0; h < h1; h++)
				for (int j = 0; j < k; j++) {
					/* the columns q whose window holds
					 * w = q stride - pad + j */
					int qa = pad - j > 0 ? (pad - j +
					    stride - 1) / stride : 0;
					int last = W - 1 + pad - j;
					int qb = last < 0 ? 0 : last / stride + 1;

					if (qb > Q)
						qb = Q;
					for (int q = qa; q < qb; q++) {
						int at = h * W + q * stride -
						    pad + j;
						float v = x[at], m = o[q];
						/* selects, not a branch that
						 * goes either way at random */
						int t = (v > m) | (v != v);

						o[q] = t ? v : m;
						ix[q] = t ? at : ix[q];
					}
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
