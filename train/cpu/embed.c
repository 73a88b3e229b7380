/*
 * embed.c - the ViT's embedding and head glue on the CPU: cutting images
 * into patch rows (timm's PatchEmbed is a conv with kernel = stride = p,
 * then flatten(2).transpose(1,2); here the conv becomes a matmul over the
 * rows), prepending the class token and adding the position embedding, and
 * taking token 0 for the head.
 */
#include "config.h"

#include <stddef.h>
#include <string.h>

#include "cpu.h"

/* Columns of dpos summed at once over the batch. */
#define POS_COLS 64

/* ------------------------------------------------------------------------ */
/* patches                                                                  */

/*
 * Row t of sample b is patch (t / (W/p), t % (W/p)), its columns in (c, kh,
 * kw) order: the flattening of a conv weight (D,C,p,p). Pixels past the
 * last whole patch are dropped, as the strided conv drops them.
 */
// img (B,C,H,W) -> out (B, (H/p)(W/p), C p p)
void
cpu_patchify_forward(float *out, const float *img, int B, int C, int H,
    int W, int p)
{
	int gw = W / p, T = (H / p) * gw, cols = C * p * p, bt;

	if (B <= 0 || T <= 0)
		return;
#pragma omp parallel for schedule(static) if ((size_t)B * T * C > CPU_PAR_MIN)
	for (bt = 0; bt < B * T; bt++) {
		int b = bt / T, t = bt % T;
		int y0 = (t / gw) * p, x0 = (t % gw) * p;
		float *row = out + (size_t)bt * cols;
		int c, kh;

		for (c = 0; c < C; c++)
			for (kh = 0; kh < p; kh++) {
				const float *s = img + (((size_t)b * C + c) *
				    H + y0 + kh) * W + x0;

				memcpy(row + (c * p + kh) * p, s,
				    (size_t)p * sizeof *row);
			}
	}
}

/* Every pixel belongs to at most one patch, so rows never collide. */
// dout (B,T,C p p) -> dimg (B,C,H,W) +=
void
cpu_patchify_backward(float *dimg, const float *dout, int B, int C, int H,
    int W, int p)
{
	int gw = W / p, T = (H / p) * gw, cols = C * p * p, bt;

	if (B <= 0 || T <= 0)
		return;
#pragma omp parallel for schedule(static) if ((size_t)B * T * C > CPU_PAR_MIN)
	for (bt = 0; bt < B * T; bt++) {
		int b = bt / T, t = bt % T;
		int y0 = (t / gw) * p, x0 = (t % gw) * p;
		const float *row = dout + (size_t)bt * cols;
		int c, kh, kw;

		for (c = 0; c < C; c++)
			for (kh = 0; kh < p; kh++) {
				float *d = dimg + (((size_t)b * C + c) * H +
				    y0 + kh) * W + x0;
				const float *s = row + (c * p + kh) * p;

				for (kw = 0; kw < p; kw++)
					d[kw] += s[kw];
			}
	}
}

/* ------------------------------------------------------------------------ */
/* class token and position embedding                                       */

// x (B,T,C), cls (C), pos (T+1,C) -> out (B,T+1,C)
void
cpu_tokens_forward(float *out, const float *x, const float *cls,
    const float *pos, int B, int T, int C)
{
	int T1 = T + 1, bt;

	if (B <= 0 || C <= 0)
		return;
#pragma omp parallel for schedule(static) if ((size_t)B * T1 * C > CPU_PAR_MIN)
	for (bt = 0; bt < B * T1; bt++) {
		int b = bt / T1, t = bt % T1, c;
		const float *src = t == 0 ? cls :
		    x + ((size_t)b * T + t - 1) * C;
		const float *pe = pos + (size_t)t * C;
		float *o = out + (size_t)bt * C;

		for (c = 0; c < C; c++)
			o[c] = src[c] + pe[c];
	}
}

/*
 * dcls and dpos sum over the batch: each thread owns whole rows of dpos
 * and adds the samples in order, so the bits do not depend on the thread
 * count.
 */
// dout (B,T+1,C) -> dx (B,T,C) or NULL, dcls (C), dpos (T+1,C); all +=
void
cpu_tokens_backward(float *dx, float *dcls, float *dpos, const float *dout,
    int B, int T, int C)
{
	int T1 = T + 1, bt, t;

	if (B <= 0 || C <= 0)
		return;
	if (dx != NULL) {
#pragma omp parallel for schedule(static) if ((size_t)B * T * C > CPU_PAR_MIN)
		for (bt = 0; bt < B * T; bt++) {
			int b = bt / T, tt = bt % T, c;
			const float *d = dout + ((size_t)b * T1 + tt + 1) * C;
			float *o = dx + (size_t)bt * C;

			for (c = 0; c < C; c++)
				o[c] += d[c];
		}
	}
#pragma omp parallel for schedule(static) if ((size_t)B * T1 * C > CPU_PAR_MIN)
	for (t = 0; t < T1; t++) {
		double acc[POS_COLS];
		float *dp = dpos != NULL ? dpos + (size_t)t * C : NULL;
		int b, c0, c, nc;

		for (c0 = 0; c0 < C; c0 += POS_COLS) {
			nc = C - c0 < POS_COLS ? C - c0 : POS_COLS;
			for (c = 0; c < nc; c++)
				acc[c] = 0.0;
			for (b = 0; b < B; b++) {
				const float *d = dout +
				    ((size_t)b * T1 + t) * C + c0;

				for (c = 0; c < nc; c++)
					acc[c] += d[c];
			}
			for (c = 0; c < nc; c++) {
				if (dpos != NULL)
					dp[c0 + c] += (float)acc[c];
				if (t == 0 && dcls != NULL)
					dcls[c0 + c] += (float)acc[c];
			}
		}
	}
}

/* ------------------------------------------------------------------------ */
/* token 0 for the head                                                     */

// inp (B,T,C) -> out (B,C)
void
cpu_token0_forward(float *out, const float *inp, int B, int T, int C)
{
	int b;

	for (b = 0; b < B; b++)
		memcpy(out + (size_t)b * C, inp + (size_t)b * T * C,
		    (size_t)C * sizeof *out);
}

// dout (B,C) -> dinp (B,T,C) += in row 0 of each sample
void
cpu_token0_backward(float *dinp, const float *dout, int B, int T, int C)
{
	int b, c;

	for (b = 0; b < B; b++) {
		float *d = dinp + (size_t)b * T * C;
		const float *s = dout + (size_t)b * C;

		for (c = 0; c < C; c++)
			d[c] += s[c];
	}
}
