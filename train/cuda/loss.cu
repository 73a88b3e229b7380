/*
 * loss.cu - the softmax cross-entropy with label smoothing, forward and
 * backward, as loss.c. Launchers at the end, declared in kernels.h.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels.h"
#include "common.cuh"

/* ------------------------------------------------------------------------ */
/* loss                                                                     */

/*
 * One block per sample, as loss.c: the max (x[0] first, so NaN there
 * spreads, elsewhere it is skipped, then poisons the sum), the sum of exp
 * and of the logits in double, lse = max + log sum; probs = exp(x - lse);
 * loss = (1-eps)(lse - x_y) + eps (lse - mean x).
 */
template <typename A>
static __global__ void __launch_bounds__(NT)
xent_fwd_kernel(float *losses, float *probs, const A *logits,
    const int32_t *labels, int K, float smoothing)
{
	__shared__ double sh[32];
	__shared__ float shf[32];
	size_t row = blockIdx.x;
	const A *x = logits + row * K;
	float *p = probs + row * K;
	float mx = ld(x[0]);
	double sum = 0.0, sumx = 0.0, lse;

	for (int k = threadIdx.x; k < K; k += blockDim.x)
		if (ld(x[k]) > mx)
			mx = ld(x[k]);
	mx = block_max(mx, shf);
	for (int k = threadIdx.x; k < K; k += blockDim.x) {
		sum += exp((double)ld(x[k]) - mx);
		sumx += ld(x[k]);
	}
	sum = block_sum(sum, sh);
	sumx = block_sum(sumx, sh);
	lse = mx + log(sum);
	for (int k = threadIdx.x; k < K; k += blockDim.x)
		p[k] = (float)exp(ld(x[k]) - lse);
	if (threadIdx.x == 0) {
		int32_t y = labels[row];
		double nll, smooth;

		if (y < 0 || y >= K) {
			losses[row] = 0.0f;
			return;
		}
		nll = lse - ld(x[y]);
		smooth = lse - sumx / K;
		losses[row] = (float)__dadd_rn(__dmul_rn(1.0 - smoothing, nll),
		    __dmul_rn(smoothing, smooth));
	}
}

/* dlogits += scale (probs - target), target = (1-eps) onehot + eps/K */
template <typename A>
static __global__ void
xent_bwd_kernel(A *dlogits, const float *probs, const int32_t *labels,
    size_t n, int K, float smoothing, float scale)
{
	float off = __fdiv_rn(smoothing, (float)K);
	float on = __fadd_rn(__fsub_rn(1.0f, smoothing), off);

	GRID_LOOP(i, n) {
		size_t k, row = divmod(i, (size_t)K, &k);
		int32_t y = labels[row];

		if (y < 0 || y >= K)
			continue;
		st(&dlogits[i], __fadd_rn(ld(dlogits[i]), __fmul_rn(scale,
		    __fsub_rn(probs[i], k == (size_t)y ? on : off))));
	}
}

/* ------------------------------------------------------------------------ */
/* launchers                                                                */

extern "C" void
cuk_xent_forward(float *losses, float *probs, const float *logits,
    const int32_t *labels, int B, int K, float smoothing, void *stream)
{
	if (B <= 0 || K <= 0)
		return;
	DISPATCH(xent_fwd_kernel<A><<<B, NT, 0, (cudaStream_t)stream>>>(
	    losses, probs, (const A *)logits, labels, K, smoothing));
}

extern "C" void
cuk_xent_backward(float *dlogits, const float *probs, const int32_t *labels,
    int B, int K, float smoothing, float scale, void *stream)
{
	size_t n = (size_t)B * K;

	if (B <= 0 || K <= 0)
		return;
	DISPATCH(xent_bwd_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>((A *)dlogits, probs, labels, n, K,
	    smoothing, scale));
}
