/*
 * vit.cu - the ViT's embedding glue: the image's patches as rows, the
 * class token and the position embedding, and token 0 for the head (the
 * gradients of cls and pos are norm.cu's column sums). Launchers at the
 * end, declared in kernels.h.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels.h"
#include "common.cuh"

/* ------------------------------------------------------------------------ */
/* ViT embedding                                                            */

/*
 * Output element o of (B,T,C p p) and its pixel in (B,C,H,W): row t is
 * patch (t / gw, t % gw), its columns in (c, kh, kw) order (embed.c).
 */
static __device__ __forceinline__ size_t
patch_pixel(size_t o, int C, int H, int W, int p, int T)
{
	size_t cols = (size_t)C * p * p, col, t, r, kw;
	size_t bt = divmod(o, cols, &col);
	size_t b = divmod(bt, (size_t)T, &t);
	size_t c = divmod(col, (size_t)p * p, &r);
	size_t kh = divmod(r, (size_t)p, &kw), gx;
	size_t gy = divmod(t, (size_t)(W / p), &gx);

	return ((b * C + c) * H + gy * p + kh) * W + gx * p + kw;
}

template <typename A>
static __global__ void
patchify_fwd_kernel(A *out, const A *img, size_t n, int C, int H,
    int W, int p, int T)
{
	GRID_LOOP(o, n)
		out[o] = img[patch_pixel(o, C, H, W, p, T)];
}

/* Every pixel belongs to at most one patch: no two threads meet. */
template <typename A>
static __global__ void
patchify_bwd_kernel(A *dimg, const A *dout, size_t n, int C, int H,
    int W, int p, int T)
{
	GRID_LOOP(o, n) {
		size_t at = patch_pixel(o, C, H, W, p, T);

		st(&dimg[at], __fadd_rn(ld(dimg[at]), ld(dout[o])));
	}
}

/* out (B,T+1,C): row 0 cls, rows 1.. x, plus pos (T+1,C) */
template <typename A>
static __global__ void
tokens_fwd_kernel(A *out, const A *x, const float *cls,
    const float *pos, size_t n, int T, int C)
{
	GRID_LOOP(i, n) {
		size_t c, bt = divmod(i, (size_t)C, &c), t;
		size_t b = divmod(bt, (size_t)T + 1, &t);
		float v = t == 0 ? cls[c] : ld(x[(b * T + t - 1) * C + c]);

		st(&out[i], __fadd_rn(v, pos[t * C + c]));
	}
}

/* dx (B,T,C) += rows 1.. of dout (B,T+1,C): sample b is b + 1 rows on */
template <typename A>
static __global__ void
tokens_dx_kernel(A *dx, const A *dout, size_t n, int T, int C)
{
	GRID_LOOP(i, n) {
		size_t r, b = divmod(i, (size_t)T * C, &r);

		st(&dx[i], __fadd_rn(ld(dx[i]), ld(dout[i + (b + 1) * C])));
	}
}

template <typename A>
static __global__ void
token0_fwd_kernel(A *out, const A *inp, size_t n, int T, int C)
{
	GRID_LOOP(i, n) {
		size_t c, b = divmod(i, (size_t)C, &c);

		out[i] = inp[b * T * C + c];
	}
}

template <typename A>
static __global__ void
token0_bwd_kernel(A *dinp, const A *dout, size_t n, int T, int C)
{
	GRID_LOOP(i, n) {
		size_t c, b = divmod(i, (size_t)C, &c);
		size_t at = b * T * C + c;

		st(&dinp[at], __fadd_rn(ld(dinp[at]), ld(dout[i])));
	}
}

/* ------------------------------------------------------------------------ */
/* launchers                                                                */

extern "C" void
cuk_patchify_forward(float *out, const float *img, int B, int C, int H,
    int W, int p, void *stream)
{
	int T = p > 0 ? (H / p) * (W / p) : 0;
	size_t n = (size_t)B * T * C * p * p;

	if (B <= 0 || C <= 0 || T <= 0)
		return;
	DISPATCH(patchify_fwd_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>((A *)out, (const A *)img, n, C, H, W, p,
	    T));
}

extern "C" void
cuk_patchify_backward(float *dimg, const float *dout, int B, int C, int H,
    int W, int p, void *stream)
{
	int T = p > 0 ? (H / p) * (W / p) : 0;
	size_t n = (size_t)B * T * C * p * p;

	if (B <= 0 || C <= 0 || T <= 0 || dimg == NULL)
		return;
	DISPATCH(patchify_bwd_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>((A *)dimg, (const A *)dout, n, C, H, W, p,
	    T));
}

extern "C" void
cuk_tokens_forward(float *out, const float *x, const float *cls,
    const float *pos, int B, int T, int C, void *stream)
{
	size_t n = (size_t)B * (T + 1) * C;

	if (B <= 0 || C <= 0 || T < 0)
		return;
	DISPATCH(tokens_fwd_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>((A *)out, (const A *)x, cls, pos, n, T,
	    C));
}

/*
 * dcls and dpos are column sums of dout seen as (B, (T+1) C); dcls is the
 * first C of them. Without dpos only those C columns are summed.
 */
extern "C" void
cuk_tokens_backward(float *dx, float *dcls, float *dpos, const float *dout,
    int B, int T, int C, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	long ld = (long)(T + 1) * C;
	size_t n = (size_t)B * T * C;

	if (B <= 0 || C <= 0 || T < 0)
		return;
	if (dx != NULL && n > 0)
		DISPATCH(tokens_dx_kernel<A><<<blocks_for(n), NT, 0, st>>>(
		    (A *)dx, (const A *)dout, n, T, C));
	cuk_colsum(dpos, dcls, C, dout, B, dpos != NULL ? ld : C, ld, st);
}

extern "C" void
cuk_token0_forward(float *out, const float *inp, int B, int T, int C,
    void *stream)
{
	size_t n = (size_t)B * C;

	if (B <= 0 || C <= 0 || T <= 0)
		return;
	DISPATCH(token0_fwd_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>((A *)out, (const A *)inp, n, T, C));
}

extern "C" void
cuk_token0_backward(float *dinp, const float *dout, int B, int T, int C,
    void *stream)
{
	size_t n = (size_t)B * C;

	if (B <= 0 || C <= 0 || T <= 0 || dinp == NULL)
		return;
	DISPATCH(token0_bwd_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>((A *)dinp, (const A *)dout, n, T, C));
}
