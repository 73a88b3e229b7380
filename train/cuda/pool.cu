/*
 * pool.cu - max and average pooling of (B,C,H,W) activations, pool.c's
 * order and tie rules. Launchers at the end, declared in kernels.h.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels.h"
#include "common.cuh"

/* ------------------------------------------------------------------------ */
/* pooling                                                                  */

/*
 * One thread per output. PyTorch's CPU kernel as pool.c has it: the window
 * clipped to the image (the -inf padding never wins), scanned row-major;
 * the first maximum wins and the last NaN; idx starts at the first
 * in-bounds offset in case nothing beats -inf.
 */
template <typename A>
static __global__ void
maxpool_fwd_kernel(struct pool_shape s, A *out, int32_t *idx,
    const A *inp)
{
	size_t PQ = (size_t)s.P * s.Q, HW = (size_t)s.H * s.W;
	size_t n = (size_t)s.B * s.C * PQ;

	GRID_LOOP(o, n) {
		size_t pq, bc = divmod(o, PQ, &pq), qq;
		int p = (int)divmod(pq, (size_t)s.Q, &qq), q = (int)qq;
		const A *x = inp + bc * HW;
		int h0 = p * s.stride - s.pad, h1 = h0 + s.k;
		int w0 = q * s.stride - s.pad, w1 = w0 + s.k;
		float m = -INFINITY;
		int32_t at;

		if (h0 < 0)
			h0 = 0;
		if (h1 > s.H)
			h1 = s.H;
		if (w0 < 0)
			w0 = 0;
		if (w1 > s.W)
			w1 = s.W;
		at = h0 * s.W + w0;
		for (int h = h0; h < h1; h++)
			for (int w = w0; w < w1; w++) {
				float v = ld(x[h * s.W + w]);

				if (v > m || isnan(v)) {
					m = v;
					at = h * s.W + w;
				}
			}
		st(&out[o], m);
		idx[o] = at;
	}
}

/*
 * One thread per input: windows overlap, and float atomics would add in
 * a different order each run. The thread gathers the outputs whose window
 * holds its pixel and whose argmax it is, in the CPU's order (row-major
 * over the outputs), adding each into the running value as the CPU's
 * dx[idx] += d does. A pixel no output chose is left alone.
 */
template <typename A>
static __global__ void
maxpool_bwd_kernel(struct pool_shape s, A *dinp, const A *dout,
    const int32_t *idx)
{
	size_t PQ = (size_t)s.P * s.Q, HW = (size_t)s.H * s.W;
	size_t n = (size_t)s.B * s.C * HW;

	GRID_LOOP(e, n) {
		size_t off, bc = divmod(e, HW, &off), ww;
		int h = (int)divmod(off, (size_t)s.W, &ww), w = (int)ww;
		const A *d = dout + bc * PQ;
		const int32_t *ix = idx + bc * PQ;
		/* outputs p with p stride - pad <= h < p stride - pad + k */
		int ph = h + s.pad - s.k + 1, qh = w + s.pad - s.k + 1;
		int p0 = ph > 0 ? (ph + s.stride - 1) / s.stride : 0;
		int q0 = qh > 0 ? (qh + s.stride - 1) / s.stride : 0;
		int p1 = (h + s.pad) / s.stride, q1 = (w + s.pad) / s.stride;
		float g = 0.0f;
		int hit = 0;

		if (p1 > s.P - 1)
			p1 = s.P - 1;
		if (q1 > s.Q - 1)
			q1 = s.Q - 1;
		for (int p = p0; p <= p1; p++)
			for (int q = q0; q <= q1; q++) {
				size_t o = (size_t)p * s.Q + q;

				if (ix[o] != (int32_t)off)
					continue;
				if (!hit)
					g = ld(dinp[e]);
				hit = 1;
				g = __fadd_rn(g, ld(d[o]));
			}
		if (hit)
			st(&dinp[e], g);
	}
}

/* One warp per (b,c) plane: out = sum / HW, the sum in double. */
template <typename A>
static __global__ void
avgpool_fwd_kernel(size_t planes, int HW, A *out, const A *inp)
{
	int lane = threadIdx.x & 31;

	for (size_t w = WARP_ID(); w < planes; w += WARP_COUNT()) {
		const A *x = inp + w * HW;
		double s = 0.0;

		for (int i = lane; i < HW; i += 32)
			s += ld(x[i]);
		s = warp_sum(s);
		if (lane == 0)
			st(&out[w], (float)(s / HW));
	}
}

/* dinp (B,C,HW) += dout (B,C) / HW */
template <typename A>
static __global__ void
avgpool_bwd_kernel(size_t n, int HW, A *dinp, const A *dout)
{
	GRID_LOOP(i, n) {
		size_t r, bc = divmod(i, (size_t)HW, &r);

		st(&dinp[i], __fadd_rn(ld(dinp[i]), __fdiv_rn(ld(dout[bc]),
		    (float)HW)));
	}
}

/* ------------------------------------------------------------------------ */
/* launchers                                                                */

extern "C" void
cuk_maxpool_forward(const struct pool_shape *s, float *out, int32_t *idx,
    const float *inp, void *stream)
{
	size_t n = (size_t)s->B * s->C * s->P * s->Q;

	if (s->B <= 0 || s->C <= 0 || s->P <= 0 || s->Q <= 0 || n == 0)
		return;
	DISPATCH(maxpool_fwd_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>(*s, (A *)out, idx, (const A *)inp));
}

extern "C" void
cuk_maxpool_backward(const struct pool_shape *s, float *dinp,
    const float *dout, const int32_t *idx, void *stream)
{
	size_t n = (size_t)s->B * s->C * s->H * s->W;

	if (s->B <= 0 || s->C <= 0 || s->H <= 0 || s->W <= 0 || s->P <= 0 ||
	    s->Q <= 0 || n == 0 || dinp == NULL)
		return;
	DISPATCH(maxpool_bwd_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>(*s, (A *)dinp, (const A *)dout, idx));
}

extern "C" void
cuk_avgpool_forward(int B, int C, int HW, float *out, const float *inp,
    void *stream)
{
	size_t planes = (size_t)B * C;

	if (B <= 0 || C <= 0 || HW <= 0)
		return;
	DISPATCH(avgpool_fwd_kernel<A><<<warp_blocks_for(planes), NT, 0,
	    (cudaStream_t)stream>>>(planes, HW, (A *)out, (const A *)inp));
}

extern "C" void
cuk_avgpool_backward(int B, int C, int HW, float *dinp, const float *dout,
    void *stream)
{
	size_t n = (size_t)B * C * HW;

	if (B <= 0 || C <= 0 || HW <= 0 || dinp == NULL)
		return;
	DISPATCH(avgpool_bwd_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>(n, HW, (A *)dinp, (const A *)dout));
}
