/*
 * softmax.cu - the softmax over rows of attention's scores and its
 * backward, fp32 and bf16 (cuda.c's attention between its GEMMs).
 * Launchers at the end, declared in kernels.h.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels.h"
#include "common.cuh"

/* ------------------------------------------------------------------------ */
/* softmax over rows (attention)                                            */

/*
 * One warp per row, attention.c's softmax_row on scale x: the max (x[0]
 * first), e = expf(x - max) stored, the sum of the stored floats in
 * double, then each times (float)(1 / sum).
 */
static __global__ void
softmax_kernel(float *x, size_t rows, int n, float scale)
{
	int lane = threadIdx.x & 31;

	for (size_t row = WARP_ID(); row < rows; row += WARP_COUNT()) {
		float *r = x + row * n;
		float mx = __fmul_rn(scale, r[0]), inv;
		double sum = 0.0;

		for (int j = lane; j < n; j += 32) {
			float v = __fmul_rn(scale, r[j]);

			if (v > mx)
				mx = v;
		}
		mx = warp_max(mx);
		for (int j = lane; j < n; j += 32) {
			float e = expf(__fsub_rn(__fmul_rn(scale, r[j]), mx));

			r[j] = e;
			sum += e;
		}
		inv = (float)(1.0 / warp_sum(sum));
		for (int j = lane; j < n; j += 32)
			r[j] = __fmul_rn(r[j], inv);
	}
}

/* One warp per row: d = scale (p (d - dot)), dot = sum p d in double and
 * rounded to float, as attention.c's ds before its GEMMs' scale. */
static __global__ void
softmax_bwd_kernel(float *d, const float *p, size_t rows, int n,
    float scale)
{
	int lane = threadIdx.x & 31;

	for (size_t row = WARP_ID(); row < rows; row += WARP_COUNT()) {
		float *dr = d + row * n;
		const float *pr = p + row * n;
		double s = 0.0;
		float dot;

		for (int j = lane; j < n; j += 32)
			s += (double)pr[j] * dr[j];
		dot = (float)warp_sum(s);
		for (int j = lane; j < n; j += 32)
			dr[j] = __fmul_rn(scale, __fmul_rn(pr[j],
			    __fsub_rn(dr[j], dot)));
	}
}

/*
 * The bf16 path's attention softmax, in place: one warp per row of the
 * bf16 scores, probs = softmax(scores) in fp32 math, stored in bf16 (the
 * math path of PyTorch's bf16 attention). The fp32 kernel keeps exp(x -
 * max) in its row; here the row is bf16, so exp is computed again for the
 * final store rather than rounded twice. Each lane writes only the
 * elements it read, after the row's last read.
 */
static __global__ void
softmax_bf16_kernel(bf16 *x, size_t rows, int n)
{
	int lane = threadIdx.x & 31;

	for (size_t row = WARP_ID(); row < rows; row += WARP_COUNT()) {
		bf16 *r = x + row * n;
		float mx = ld(r[0]), inv;
		double sum = 0.0;

		for (int j = lane; j < n; j += 32)
			if (ld(r[j]) > mx)
				mx = ld(r[j]);
		mx = warp_max(mx);
		for (int j = lane; j < n; j += 32)
			sum += expf(__fsub_rn(ld(r[j]), mx));
		inv = (float)(1.0 / warp_sum(sum));
		for (int j = lane; j < n; j += 32)
			r[j] = __float2bfloat16_rn(__fmul_rn(expf(__fsub_rn(
			    ld(r[j]), mx)), inv));
	}
}

/* ds (bf16) = p (d - sum p d), p bf16 and d fp32, one warp per row */
static __global__ void
softmax_bwd_bf16_kernel(bf16 *ds, const float *d, const bf16 *p,
    size_t rows, int n)
{
	int lane = threadIdx.x & 31;

	for (size_t row = WARP_ID(); row < rows; row += WARP_COUNT()) {
		const float *dr = d + row * n;
		const bf16 *pr = p + row * n;
		bf16 *o = ds + row * n;
		double s = 0.0;
		float dot;

		for (int j = lane; j < n; j += 32)
			s += (double)__bfloat162float(pr[j]) * dr[j];
		dot = (float)warp_sum(s);
		for (int j = lane; j < n; j += 32)
			o[j] = __float2bfloat16_rn(__fmul_rn(
			    __bfloat162float(pr[j]), __fsub_rn(dr[j], dot)));
	}
}

/* ------------------------------------------------------------------------ */
/* launchers                                                                */

extern "C" void
cuk_softmax_rows(float *x, long rows, int n, float scale, void *stream)
{
	if (rows <= 0 || n <= 0)
		return;
	softmax_kernel<<<warp_blocks_for((size_t)rows), NT, 0,
	    (cudaStream_t)stream>>>(x, (size_t)rows, n, scale);
}

extern "C" void
cuk_softmax_rows_backward(float *d, const float *p, long rows, int n,
    float scale, void *stream)
{
	if (rows <= 0 || n <= 0)
		return;
	softmax_bwd_kernel<<<warp_blocks_for((size_t)rows), NT, 0,
	    (cudaStream_t)stream>>>(d, p, (size_t)rows, n, scale);
}

extern "C" void
cuk_softmax_rows_bf16(void *x, long rows, int n, void *stream)
{
	if (rows <= 0 || n <= 0)
		return;
	softmax_bf16_kernel<<<warp_blocks_for((size_t)rows), NT, 0,
	    (cudaStream_t)stream>>>((bf16 *)x, (size_t)rows, n);
}

extern "C" void
cuk_softmax_rows_backward_bf16(void *ds, const float *d, const void *p,
    long rows, int n, void *stream)
{
	if (rows <= 0 || n <= 0)
		return;
	softmax_bwd_bf16_kernel<<<warp_blocks_for((size_t)rows), NT, 0,
	    (cudaStream_t)stream>>>((bf16 *)ds, d, (const bf16 *)p,
	    (size_t)rows, n);
}
