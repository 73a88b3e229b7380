/*
 * attention.c - non-causal multi-head self-attention on the CPU, as timm's
 * Attention computes it after the qkv Linear: qkv (B,T,3C) read as
 * (B,T,3,NH,hd), att = softmax(q k^T hd^-0.5) over the keys, out = att v
 * with the heads side by side again in (B,T,C).
 *
 * Each (b,h) pair is a few small GEMMs on strided views of qkv. OpenMP
 * hands out the pairs and each runs single-threaded GEMMs (cpu_sgemm), so
 * every pair is computed the same way whatever the thread count.
 */
#include "config.h"

#include <math.h>
#include <stddef.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <cblas.h>

#include "cpu.h"

/* Per-thread (T,T) scratch buffers backward uses; more threads than this
 * do not take part in attention backward. */
#define ATT_SLOTS 64

/* Threads for a loop over pairs: no more than there are pairs, or cap. */
int
cpu_attention_team(int pairs, int cap)
{
	int n = cpu_threads();

	if (n > pairs)
		n = pairs;
	if (n > cap)
		n = cap;
	return n < 1 ? 1 : n;
}

/* One row of scores -> probabilities, max subtracted first. */
void
cpu_softmax_row(float *x, int n)
{
	float max = x[0];
	double sum = 0.0;
	float inv;
	int j;

	for (j = 1; j < n; j++)
		if (x[j] > max)
			max = x[j];
	for (j = 0; j < n; j++) {
		x[j] = expf(x[j] - max);
		sum += x[j];
	}
	inv = (float)(1.0 / sum);
	for (j = 0; j < n; j++)
		x[j] *= inv;
}

/* ------------------------------------------------------------------------ */
/* forward                                                                  */

// qkv (B,T,3C) -> att (B,NH,T,T), out (B,T,C)
void
cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T,
    int C, int NH)
{
	int hd = C / NH, C3 = 3 * C, pairs = B * NH, nthr, bh;
	float scale = 1.0f / sqrtf((float)hd);

	if (B <= 0 || T <= 0 || NH <= 0 || hd <= 0)
		return;
	nthr = cpu_attention_team(pairs, pairs);
	#pragma omp parallel for num_threads(nthr) schedule(static)
	for (bh = 0; bh < pairs; bh++) {
		int b = bh / NH, h = bh % NH, i;
		const float *q = qkv + (size_t)b * T * C3 + h * hd;
		const float *k = q + C, *v = q + 2 * C;
		float *a = att + (size_t)bh * T * T;
		float *o = out + (size_t)b * T * C + h * hd;

		/* a (T,T) = scale q (T,hd) . k^T (hd,T) */
		cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd,
		    scale, q, C3, k, C3, 0.0f, a, T);
		for (i = 0; i < T; i++)
			cpu_softmax_row(a + (size_t)i * T, T);
		/* o (T,hd) = a (T,T) . v (T,hd) */
		cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T,
		    1.0f, a, T, v, C3, 0.0f, o, C);
	}
}

/* ------------------------------------------------------------------------ */
/* backward                                                                 */

size_t
cpu_attention_scratch(int B, int T, int C, int NH)
{
	size_t slots = (size_t)B * NH;

	if (slots > ATT_SLOTS)
		slots = ATT_SLOTS;
	return slots * T * T;
}

/*
 * scratch holds cpu_attention_scratch() floats: one (T,T) buffer per
 * thread for d(att), then d(scores) in place.
 */
// dout (B,T,C), qkv (B,T,3C), att (B,NH,T,T) -> dqkv (B,T,3C) +=
void
cpu_attention_backward(float *dqkv, float *scratch, const float *dout,
    const float *qkv, const float *att, int B, int T, int C, int NH)
{
	int hd = C / NH, C3 = 3 * C, pairs = B * NH, nthr, bh;
	float scale = 1.0f / sqrtf((float)hd);

	if (B <= 0 || T <= 0 || NH <= 0 || hd <= 0)
		return;
	nthr = cpu_attention_team(pairs, ATT_SLOTS);
	#pragma omp parallel num_threads(nthr)
	{
#ifdef _OPENMP
		int tid = omp_get_thread_num();
#else
		int tid = 0;
#endif
		float *da = scratch + (size_t)tid * T * T;

		#pragma omp for schedule(static)
		for (bh = 0; bh < pairs; bh++) {
			int b = bh / NH, h = bh % NH, i, j;
			size_t qo = (size_t)b * T * C3 + h * hd;
			const float *q = qkv + qo, *k = q + C, *v = q + 2 * C;
			float *dq = dqkv + qo, *dk = dq + C, *dv = dq + 2 * C;
			const float *a = att + (size_t)bh * T * T;
			const float *dO = dout + (size_t)b * T * C + h * hd;

			/* da (T,T) = dO (T,hd) . v^T (hd,T) */
			cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
			    T, T, hd, 1.0f, dO, C, v, C3, 0.0f, da, T);
			/* dv (T,hd) += a^T (T,T) . dO (T,hd) */
			cpu_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans,
			    T, hd, T, 1.0f, a, T, dO, C, 1.0f, dv, C3);
			/* softmax backward, row by row:
			 * ds = a (da - sum_j a da) */
			for (i = 0; i < T; i++) {
				const float *ar = a + (size_t)i * T;
				float *dr = da + (size_t)i * T, dot;
				double s = 0.0;

				for (j = 0; j < T; j++)
					s += (double)ar[j] * dr[j];
				dot = (float)s;
				for (j = 0; j < T; j++)
					dr[j] = ar[j] * (dr[j] - dot);
			}
			/* dq (T,hd) += scale ds (T,T) . k (T,hd) */
			cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
			    T, hd, T, scale, da, T, k, C3, 1.0f, dq, C3);
			/* dk (T,hd) += scale ds^T (T,T) . q (T,hd) */
			cpu_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans,
			    T, hd, T, scale, da, T, q, C3, 1.0f, dk, C3);
		}
	}
}
