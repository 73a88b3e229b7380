/*
 * loss.c - softmax cross-entropy with label smoothing on the CPU, as
 * PyTorch's F.cross_entropy(label_smoothing=eps) defines it per sample:
 * (1-eps)(-log p_y) + eps mean_k(-log p_k).
 *
 * A label outside [0,K) is treated like PyTorch's ignore_index: loss 0 and
 * no gradient. The caller validates labels; this only keeps a bad one from
 * reading or writing out of bounds.
 */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu.h"

// logits (B,K), labels (B) -> losses (B), probs (B,K)
void
cpu_xent_forward(float *losses, float *probs, const float *logits,
    const int32_t *labels, int B, int K, float smoothing)
{
	int i;

	if (K <= 0)
		return;
#pragma omp parallel for schedule(static) if ((size_t)B * K > CPU_PAR_MIN)
	for (i = 0; i < B; i++) {
		const float *x = logits + (size_t)i * K;
		float *p = probs + (size_t)i * K;
		double max = x[0], sum = 0.0, sumx = 0.0, lse, nll, smooth;
		int32_t y = labels[i];
		int k;

		for (k = 1; k < K; k++)
			if (x[k] > max)
				max = x[k];
		for (k = 0; k < K; k++) {
			sum += exp(x[k] - max);
			sumx += x[k];
		}
		/* log sum exp, so -log p_k = lse - x_k */
		lse = max + log(sum);
		for (k = 0; k < K; k++)
			p[k] = (float)exp(x[k] - lse);
		if (y < 0 || y >= K) {
			losses[i] = 0.0f;
			continue;
		}
		nll = lse - x[y];
		smooth = lse - sumx / K;
		losses[i] = (float)((1.0 - smoothing) * nll +
		    smoothing * smooth);
	}
}

// probs (B,K), labels (B) -> dlogits (B,K) +=
void
cpu_xent_backward(float *dlogits, const float *probs, const int32_t *labels,
    int B, int K, float smoothing, float scale)
{
	int i;

	if (K <= 0)
		return;
#pragma omp parallel for schedule(static) if ((size_t)B * K > CPU_PAR_MIN)
	for (i = 0; i < B; i++) {
		const float *p = probs + (size_t)i * K;
		float *d = dlogits + (size_t)i * K;
		float off = smoothing / K, on = 1.0f - smoothing + off;
		int32_t y = labels[i];
		int k;

		if (y < 0 || y >= K)
			continue;
		/* target = (1-eps) onehot + eps/K */
		for (k = 0; k < K; k++)
			d[k] += scale * (p[k] - (k == y ? on : off));
	}
}
