/*
 * nhwc.cu - the bf16 path's channels-last kernels (nhwc.h): the image's
 * and the convolution weights' transposes, batch norm, pooling and the
 * ViT's patches with 4-D activations stored (B,H,W,C). Each follows its
 * NCHW twin in kernels.cu formula for formula (the same _rn operations,
 * the same sums in double, the same scan orders and tie rules); only the
 * indices differ.
 *
 * Results are the same bits on every run: no atomics, and every reduction
 * adds in a fixed order that depends on the shape alone.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels.h"
#include "common.cuh"
#include "nhwc.h"

/*
 * A batch norm block's tile: BNT_C consecutive channels, one per lane, so
 * a warp reads one contiguous run of a row of the (B HW, C) matrix; and
 * BNT_R rows at a time, one per warp.
 */
#define BNT_C		32
#define BNT_R		16

/* ------------------------------------------------------------------------ */
/* transposes                                                               */

/* dst (B,HW,C) = x (B,C,HW), one thread per output element */
template <typename A>
static __global__ void
input_kernel(A *dst, const float *x, size_t n, int C, int HW)
{
	GRID_LOOP(o, n) {
		size_t c, i, t = divmod(o, (size_t)C, &c);
		size_t b = divmod(t, (size_t)HW, &i);

		st(&dst[o], x[(b * C + c) * HW + i]);
	}
}

/* dst (K,RS,C) bf16 = w (K,C,RS), one thread per output element */
static __global__ void
weight_kernel(bf16 *dst, const float *w, size_t n, int C, int RS)
{
	GRID_LOOP(o, n) {
		size_t c, rs, t = divmod(o, (size_t)C, &c);
		size_t k = divmod(t, (size_t)RS, &rs);

		dst[o] = __float2bfloat16_rn(w[(k * C + c) * RS + rs]);
	}
}

/* dw (K,C,RS) += g (K,RS,C) bf16, one thread per element of dw */
static __global__ void
weight_grad_kernel(float *dw, const bf16 *g, size_t n, int C, int RS)
{
	GRID_LOOP(e, n) {
		size_t rs, c, t = divmod(e, (size_t)RS, &rs);
		size_t k = divmod(t, (size_t)C, &c);

		dw[e] = __fadd_rn(dw[e], __bfloat162float(g[(k * RS + rs) *
		    C + c]));
	}
}

/* ------------------------------------------------------------------------ */
/* batch norm                                                               */

/*
 * Element (b,c,i) of (B,C,HW) is row j = b HW + i, column c of the
 * (B HW, C) matrix: at j C + c. A channel's statistics are a column sum.
 *
 * The split, as kernels.cu's: the rows are cut into S parts of chunk
 * rows; block (s, tile) sums part s of its BNT_C channels (each thread a
 * strided run of rows, then a halving tree over the block's rows), and
 * part[(c S + s) 2 + {0,1}] gets the two sums. A per-channel kernel adds
 * a channel's S parts in order. With no workspace (part NULL, S 1) the
 * block finishes the channel itself.
 */

/* Adds sh[BNT_R][BNT_C] over its rows into row 0; every thread calls it. */
static __device__ __forceinline__ void
tile_sum(double (*sh)[BNT_C], int tx, int ty)
{
	for (int h = BNT_R / 2; h > 0; h >>= 1) {
		if (ty < h)
			sh[ty][tx] += sh[ty + h][tx];
		__syncthreads();
	}
}

/* bn_stats_kernel's epilogue: s1, s2 the sums of x - shift and its
 * square over dn values of channel c */
static __device__ void
stats_out(int c, double s1, double s2, double dn, double shift,
    float *mean, float *rstd, float *run_mean, float *run_var,
    float momentum, float eps, int update)
{
	double mu = s1 / dn, var, uvar;

	var = __dsub_rn(s2 / dn, __dmul_rn(mu, mu));
	if (var < 0)
		var = 0;
	mu += shift;
	mean[c] = (float)mu;
	rstd[c] = (float)(1.0 / sqrt(var + eps));
	if (update) {
		/* PyTorch: the running variance is the unbiased one */
		uvar = dn > 1 ? var * dn / (dn - 1) : var;
		run_mean[c] = (float)__dadd_rn(__dmul_rn(1.0 - momentum,
		    run_mean[c]), __dmul_rn(momentum, mu));
		run_var[c] = (float)__dadd_rn(__dmul_rn(1.0 - momentum,
		    run_var[c]), __dmul_rn(momentum, uvar));
	}
}

/* grid (S, tiles), block (BNT_C, BNT_R); shift is the channel's first
 * value, element (b 0, i 0, c) at c */
template <typename A>
static __global__ void __launch_bounds__(BNT_C * BNT_R)
bn_part_stats_nhwc_kernel(int B, int C, int HW, const A *inp, double *part,
    int S, size_t chunk, float *mean, float *rstd, float *run_mean,
    float *run_var, float momentum, float eps, int update)
{
	__shared__ double sh1[BNT_R][BNT_C], sh2[BNT_R][BNT_C];
	int tx = threadIdx.x, ty = threadIdx.y, sp = blockIdx.x;
	int c = blockIdx.y * BNT_C + tx;
	size_t n = (size_t)B * HW;
	size_t j0 = (size_t)sp * chunk, j1 = j0 + chunk < n ? j0 + chunk : n;
	double shift = 0.0, s1 = 0.0, s2 = 0.0;

	if (c < C) {
		shift = ld(inp[c]);
		for (size_t j = j0 + ty; j < j1; j += BNT_R) {
			double v = (double)ld(inp[j * C + c]) - shift;

			s1 += v;
			s2 += v * v;
		}
	}
	sh1[ty][tx] = s1;
	sh2[ty][tx] = s2;
	__syncthreads();
	tile_sum(sh1, tx, ty);
	tile_sum(sh2, tx, ty);
	if (ty != 0 || c >= C)
		return;
	if (part != NULL) {
		part[((size_t)c * S + sp) * 2] = sh1[0][tx];
		part[((size_t)c * S + sp) * 2 + 1] = sh2[0][tx];
	} else
		stats_out(c, sh1[0][tx], sh2[0][tx], (double)B * HW, shift,
		    mean, rstd, run_mean, run_var, momentum, eps, update);
}

/* One thread per channel: the S parts in order, then the epilogue. */
template <typename A>
static __global__ void
bn_fin_stats_nhwc_kernel(int B, int C, int HW, const A *inp,
    const double *part, int S, float *mean, float *rstd, float *run_mean,
    float *run_var, float momentum, float eps, int update)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	double s1 = 0.0, s2 = 0.0;

	if (c >= C)
		return;
	for (int sp = 0; sp < S; sp++) {
		s1 += part[((size_t)c * S + sp) * 2];
		s2 += part[((size_t)c * S + sp) * 2 + 1];
	}
	stats_out(c, s1, s2, (double)B * HW, (double)ld(inp[c]), mean, rstd,
	    run_mean, run_var, momentum, eps, update);
}

/* bn_apply_kernel element for element: out = (x - m) a + b [+ res] [ReLU] */
template <typename A>
static __global__ void
bn_apply_nhwc_kernel(size_t n, int C, A *out, const A *inp,
    const float *gamma, const float *beta, const float *mean,
    const float *rstd, const float *run_mean, const float *run_var,
    float eps, int training, const A *res, int relu)
{
	GRID_LOOP(at, n) {
		size_t cc;
		int c;
		float g, bt, m, a, v;

		divmod(at, (size_t)C, &cc);
		c = (int)cc;
		g = gamma != NULL ? gamma[c] : 1.0f;
		bt = beta != NULL ? beta[c] : 0.0f;
		if (training) {
			m = mean[c];
			a = __fmul_rn(rstd[c], g);
		} else {
			m = run_mean[c];
			a = __fmul_rn((float)(1.0 / sqrt((double)run_var[c] +
			    eps)), g);
		}
		v = __fadd_rn(__fmul_rn(__fsub_rn(ld(inp[at]), m), a), bt);
		if (res != NULL)
			v = __fadd_rn(v, ld(res[at]));
		if (relu)
			v = v < 0.0f ? 0.0f : v;	/* NaN passes */
		st(&out[at], v);
	}
}

/* dres += dv, dinp += k (dv - md - xhat mdx) at element at, channel c */
template <typename A>
static __device__ __forceinline__ void
bwd_elt(size_t at, A *dinp, const A *dout, const A *inp, float m, float r,
    A *dres, const A *out, int relu, float k, float md, float mdx)
{
	float d = ld(dout[at]);

	if (relu && !(ld(out[at]) > 0.0f))
		d = 0.0f;
	if (dres != NULL)
		st(&dres[at], __fadd_rn(ld(dres[at]), d));
	if (dinp != NULL)
		st(&dinp[at], __fadd_rn(ld(dinp[at]), __fmul_rn(k,
		    __fsub_rn(__fsub_rn(d, md), __fmul_rn(__fmul_rn(
		    __fsub_rn(ld(inp[at]), m), r), mdx)))));
}

/*
 * bn_fin_bwd_kernel's per-channel step: the parameters' gradients from
 * the sums sd of dv and sdx of dv (x - mean), and the constants of the
 * input gradient in k3[0..2]: gamma rstd, mean(dv), mean(dv xhat).
 */
static __device__ void
bwd_out(int c, double sd, double sdx, double dn, const float *gamma,
    const float *rstd, float *dgamma, float *dbeta, float *k3)
{
	float r = rstd[c], g = gamma != NULL ? gamma[c] : 1.0f;

	sdx *= r;
	if (dbeta != NULL)
		dbeta[c] = __fadd_rn(dbeta[c], (float)sd);
	if (dgamma != NULL)
		dgamma[c] = __fadd_rn(dgamma[c], (float)sdx);
	k3[0] = __fmul_rn(g, r);
	k3[1] = (float)(sd / dn);
	k3[2] = (float)(sdx / dn);
}

/*
 * grid (S, tiles), block (BNT_C, BNT_R): part[(c S + s) 2 + {0,1}] = sums
 * of dv and dv (x - mean) over part s. With part NULL (S 1), the block
 * finishes its channels: the parameters' gradients, then dres and dinp.
 */
template <typename A>
static __global__ void __launch_bounds__(BNT_C * BNT_R)
bn_part_bwd_nhwc_kernel(int B, int C, int HW, const A *dout, const A *inp,
    const A *out, const float *mean, int relu, double *part, int S,
    size_t chunk, A *dinp, float *dgamma, float *dbeta, const float *gamma,
    const float *rstd, A *dres)
{
	__shared__ double sh1[BNT_R][BNT_C], sh2[BNT_R][BNT_C];
	__shared__ float k3[BNT_C][3];
	int tx = threadIdx.x, ty = threadIdx.y, sp = blockIdx.x;
	int c = blockIdx.y * BNT_C + tx;
	size_t n = (size_t)B * HW;
	size_t j0 = (size_t)sp * chunk, j1 = j0 + chunk < n ? j0 + chunk : n;
	float m = c < C ? mean[c] : 0.0f;
	double sd = 0.0, sdx = 0.0;

	if (c < C)
		for (size_t j = j0 + ty; j < j1; j += BNT_R) {
			size_t at = j * C + c;
			float d = ld(dout[at]);

			if (relu && !(ld(out[at]) > 0.0f))
				d = 0.0f;
			sd += d;
			sdx += (double)d * ((double)ld(inp[at]) - m);
		}
	sh1[ty][tx] = sd;
	sh2[ty][tx] = sdx;
	__syncthreads();
	tile_sum(sh1, tx, ty);
	tile_sum(sh2, tx, ty);
	if (part != NULL) {
		if (ty == 0 && c < C) {
			part[((size_t)c * S + sp) * 2] = sh1[0][tx];
			part[((size_t)c * S + sp) * 2 + 1] = sh2[0][tx];
		}
		return;
	}
	if (ty == 0 && c < C)
		bwd_out(c, sh1[0][tx], sh2[0][tx], (double)B * HW, gamma, rstd,
		    dgamma, dbeta, k3[tx]);
	__syncthreads();
	if (c >= C || (dinp == NULL && dres == NULL))
		return;
	for (size_t j = ty; j < n; j += BNT_R)
		bwd_elt(j * C + c, dinp, dout, inp, m, rstd[c], dres, out,
		    relu, k3[tx][0], k3[tx][1], k3[tx][2]);
}

/* One thread per channel: the S parts in order, then bwd_out into k3 (C,3) */
static __global__ void
bn_fin_bwd_nhwc_kernel(int B, int C, int HW, const double *part, int S,
    const float *gamma, const float *rstd, float *dgamma, float *dbeta,
    float *k3)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	double sd = 0.0, sdx = 0.0;

	if (c >= C)
		return;
	for (int sp = 0; sp < S; sp++) {
		sd += part[((size_t)c * S + sp) * 2];
		sdx += part[((size_t)c * S + sp) * 2 + 1];
	}
	bwd_out(c, sd, sdx, (double)B * HW, gamma, rstd, dgamma, dbeta,
	    k3 + 3 * (size_t)c);
}

/* bn_apply_bwd_kernel element for element */
template <typename A>
static __global__ void
bn_apply_bwd_nhwc_kernel(size_t n, int C, A *dinp, const A *dout,
    const A *inp, const float *mean, const float *rstd, A *dres,
    const A *out, int relu, const float *k3)
{
	GRID_LOOP(at, n) {
		size_t c;

		divmod(at, (size_t)C, &c);
		bwd_elt(at, dinp, dout, inp, mean[c], rstd[c], dres, out, relu,
		    k3[3 * c], k3[3 * c + 1], k3[3 * c + 2]);
	}
}

/* ------------------------------------------------------------------------ */
/* pooling                                                                  */

/*
 * maxpool_fwd_kernel with output o of (B,P,Q,C): pixel (h,w) of the
 * channel's plane at x[(h W + w) C]; the same clipped window, row-major
 * scan, first maximum and last NaN; idx the plane offset h W + w.
 */
template <typename A>
static __global__ void
maxpool_fwd_nhwc_kernel(struct pool_shape s, A *out, int32_t *idx,
    const A *inp)
{
	size_t C = (size_t)s.C, HW = (size_t)s.H * s.W;
	size_t n = (size_t)s.B * s.P * s.Q * C;

	GRID_LOOP(o, n) {
		size_t c, qq, pp, t = divmod(o, C, &c);
		size_t b = divmod(divmod(t, (size_t)s.Q, &qq), (size_t)s.P,
		    &pp);
		int p = (int)pp, q = (int)qq;
		const A *x = inp + b * HW * C + c;
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
				float v = ld(x[(size_t)(h * s.W + w) * C]);

				if (v > m || isnan(v)) {
					m = v;
					at = h * s.W + w;
				}
			}
		st(&out[o], m);
		idx[o] = at;
	}
}

/* maxpool_bwd_kernel with input e of (B,H,W,C): the outputs whose window
 * holds the pixel and chose it, in row-major order */
template <typename A>
static __global__ void
maxpool_bwd_nhwc_kernel(struct pool_shape s, A *dinp, const A *dout,
    const int32_t *idx)
{
	size_t C = (size_t)s.C, PQ = (size_t)s.P * s.Q;
	size_t n = (size_t)s.B * s.H * s.W * C;

	GRID_LOOP(e, n) {
		size_t c, ww, hh, t = divmod(e, C, &c);
		size_t b = divmod(divmod(t, (size_t)s.W, &ww), (size_t)s.H,
		    &hh);
		int h = (int)hh, w = (int)ww;
		int32_t off = h * s.W + w;
		const A *d = dout + b * PQ * C + c;
		const int32_t *ix = idx + b * PQ * C + c;
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
				size_t o = ((size_t)p * s.Q + q) * C;

				if (ix[o] != off)
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

/* One thread per (b,c), consecutive threads consecutive channels: out =
 * sum / HW, the sum in double over the plane in order */
template <typename A>
static __global__ void
avgpool_fwd_nhwc_kernel(size_t n, int C, int HW, A *out, const A *inp)
{
	GRID_LOOP(o, n) {
		size_t c, b = divmod(o, (size_t)C, &c);
		const A *x = inp + b * HW * C + c;
		double s = 0.0;

		for (int i = 0; i < HW; i++)
			s += ld(x[(size_t)i * C]);
		st(&out[o], (float)(s / HW));
	}
}

/* dinp (B,HW,C) += dout (B,C) / HW */
template <typename A>
static __global__ void
avgpool_bwd_nhwc_kernel(size_t n, int C, int HW, A *dinp, const A *dout)
{
	GRID_LOOP(e, n) {
		size_t c, i, b = divmod(divmod(e, (size_t)C, &c), (size_t)HW,
		    &i);

		st(&dinp[e], __fadd_rn(ld(dinp[e]), __fdiv_rn(ld(dout[b * C +
		    c]), (float)HW)));
	}
}

/* ------------------------------------------------------------------------ */
/* ViT embedding                                                            */

/*
 * Output element o of (B,T,C p p) and its pixel in (B,H,W,C): row t is
 * patch (t / gw, t % gw), its columns in (c, kh, kw) order, as
 * kernels.cu's patch_pixel.
 */
static __device__ __forceinline__ size_t
patch_pixel_nhwc(size_t o, int C, int H, int W, int p, int T)
{
	size_t cols = (size_t)C * p * p, col, t, r, kw;
	size_t bt = divmod(o, cols, &col);
	size_t b = divmod(bt, (size_t)T, &t);
	size_t c = divmod(col, (size_t)p * p, &r);
	size_t kh = divmod(r, (size_t)p, &kw), gx;
	size_t gy = divmod(t, (size_t)(W / p), &gx);

	return ((b * H + gy * p + kh) * W + gx * p + kw) * C + c;
}

template <typename A>
static __global__ void
patchify_fwd_nhwc_kernel(A *out, const A *img, size_t n, int C, int H,
    int W, int p, int T)
{
	GRID_LOOP(o, n)
		out[o] = img[patch_pixel_nhwc(o, C, H, W, p, T)];
}

/* Every pixel belongs to at most one patch: no two threads meet. */
template <typename A>
static __global__ void
patchify_bwd_nhwc_kernel(A *dimg, const A *dout, size_t n, int C, int H,
    int W, int p, int T)
{
	GRID_LOOP(o, n) {
		size_t at = patch_pixel_nhwc(o, C, H, W, p, T);

		st(&dimg[at], __fadd_rn(ld(dimg[at]), ld(dout[o])));
	}
}

/* ------------------------------------------------------------------------ */
/* launchers                                                                */

extern "C" void
cuk_nhwc_input_from_f32(float *dst, const float *x, int B, int C, int HW,
    void *stream)
{
	size_t n = (size_t)B * C * HW;

	if (n == 0 || B <= 0 || C <= 0 || HW <= 0)
		return;
	DISPATCH(input_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>((A *)dst, x, n, C, HW));
}

extern "C" void
cuk_nhwc_weight_to_bf16(void *dst, const float *w, int K, int C, int RS,
    void *stream)
{
	size_t n = (size_t)K * C * RS;

	if (n == 0 || K <= 0 || C <= 0 || RS <= 0)
		return;
	weight_kernel<<<blocks_for(n), NT, 0, (cudaStream_t)stream>>>(
	    (bf16 *)dst, w, n, C, RS);
}

extern "C" void
cuk_nhwc_acc_weight_grad(float *dw, const void *g, int K, int C, int RS,
    void *stream)
{
	size_t n = (size_t)K * C * RS;

	if (n == 0 || K <= 0 || C <= 0 || RS <= 0)
		return;
	weight_grad_kernel<<<blocks_for(n), NT, 0, (cudaStream_t)stream>>>(dw,
	    (const bf16 *)g, n, C, RS);
}

/*
 * The parts of the rows of a channel tile: enough blocks in all (S
 * tiles) to fill the GPU a few times over, each of a block's row threads
 * at least 8 rows.
 */
static void
bn_split(int B, int C, int HW, int *S, size_t *chunk)
{
	size_t n = (size_t)B * HW, tiles = ((size_t)C + BNT_C - 1) / BNT_C;
	size_t most = (n + BNT_R * 8 - 1) / (BNT_R * 8);
	size_t s = (2048 + tiles - 1) / tiles;

	if (s > most)
		s = most;
	if (s > 65535)
		s = 65535;
	if (s < 1)
		s = 1;
	*chunk = (n + s - 1) / s;
	*S = (int)((n + *chunk - 1) / *chunk);
}

extern "C" void
cuk_nhwc_batchnorm_forward(int B, int C, int HW, float *out,
    const float *inp, const float *gamma, const float *beta, float *mean,
    float *rstd, float *run_mean, float *run_var, float momentum, float eps,
    int training, int update, const float *res, int relu, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	size_t n = (size_t)B * HW * C;
	unsigned tiles = (unsigned)(((size_t)C + BNT_C - 1) / BNT_C);

	/* an empty batch has no statistics: nothing to normalise or move */
	if (B <= 0 || C <= 0 || HW <= 0)
		return;
	if (training) {
		dim3 blk(BNT_C, BNT_R);
		size_t chunk;
		double *part;
		int S;

		bn_split(B, C, HW, &S, &chunk);
		part = (double *)cuk_workspace((size_t)C * S * 2 *
		    sizeof(double), st);
		if (part == NULL) {	/* one part: the blocks finish */
			S = 1;
			chunk = (size_t)B * HW;
		}
		DISPATCH(bn_part_stats_nhwc_kernel<A><<<dim3(S, tiles), blk,
		    0, st>>>(B, C, HW, (const A *)inp, part, S, chunk, mean,
		    rstd, run_mean, run_var, momentum, eps, update));
		if (part != NULL)
			DISPATCH(bn_fin_stats_nhwc_kernel<A><<<(C + NT - 1) /
			    NT, NT, 0, st>>>(B, C, HW, (const A *)inp, part, S,
			    mean, rstd, run_mean, run_var, momentum, eps,
			    update));
	}
	DISPATCH(bn_apply_nhwc_kernel<A><<<blocks_for(n), NT, 0, st>>>(n, C,
	    (A *)out, (const A *)inp, gamma, beta, mean, rstd, run_mean,
	    run_var, eps, training, (const A *)res, relu));
}

extern "C" void
cuk_nhwc_batchnorm_backward(int B, int C, int HW, float *dinp,
    float *dgamma, float *dbeta, const float *dout, const float *inp,
    const float *gamma, const float *mean, const float *rstd, float *dres,
    const float *out, int relu, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	size_t n = (size_t)B * HW * C, chunk;
	unsigned tiles = (unsigned)(((size_t)C + BNT_C - 1) / BNT_C);
	dim3 blk(BNT_C, BNT_R);
	double *part;
	float *k3;
	int S;

	if (B <= 0 || C <= 0 || HW <= 0)
		return;
	bn_split(B, C, HW, &S, &chunk);
	/* the partial sums, then the channels' three constants */
	part = (double *)cuk_workspace((size_t)C * S * 2 * sizeof(double) +
	    (size_t)C * 3 * sizeof(float), st);
	if (part == NULL) {	/* one part: the blocks finish */
		DISPATCH(bn_part_bwd_nhwc_kernel<A><<<dim3(1, tiles), blk, 0,
		    st>>>(B, C, HW, (const A *)dout, (const A *)inp,
		    (const A *)out, mean, relu, NULL, 1, (size_t)B * HW,
		    (A *)dinp, dgamma, dbeta, gamma, rstd, (A *)dres));
		return;
	}
	k3 = (float *)(part + (size_t)C * S * 2);
	DISPATCH(bn_part_bwd_nhwc_kernel<A><<<dim3(S, tiles), blk, 0, st>>>(B,
	    C, HW, (const A *)dout, (const A *)inp, (const A *)out, mean, relu,
	    part, S, chunk, NULL, NULL, NULL, NULL, NULL, NULL));
	bn_fin_bwd_nhwc_kernel<<<(C + NT - 1) / NT, NT, 0, st>>>(B, C, HW,
	    part, S, gamma, rstd, dgamma, dbeta, k3);
	if (dinp == NULL && dres == NULL)
		return;
	DISPATCH(bn_apply_bwd_nhwc_kernel<A><<<blocks_for(n), NT, 0, st>>>(n,
	    C, (A *)dinp, (const A *)dout, (const A *)inp, mean, rstd,
	    (A *)dres, (const A *)out, relu, k3));
}

extern "C" void
cuk_nhwc_maxpool_forward(const struct pool_shape *s, float *out,
    int32_t *idx, const float *inp, void *stream)
{
	size_t n = (size_t)s->B * s->C * s->P * s->Q;

	if (s->B <= 0 || s->C <= 0 || s->P <= 0 || s->Q <= 0 || n == 0)
		return;
	DISPATCH(maxpool_fwd_nhwc_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>(*s, (A *)out, idx, (const A *)inp));
}

extern "C" void
cuk_nhwc_maxpool_backward(const struct pool_shape *s, float *dinp,
    const float *dout, const int32_t *idx, void *stream)
{
	size_t n = (size_t)s->B * s->C * s->H * s->W;

	if (s->B <= 0 || s->C <= 0 || s->H <= 0 || s->W <= 0 || s->P <= 0 ||
	    s->Q <= 0 || n == 0 || dinp == NULL)
		return;
	DISPATCH(maxpool_bwd_nhwc_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>(*s, (A *)dinp, (const A *)dout, idx));
}

extern "C" void
cuk_nhwc_avgpool_forward(int B, int C, int HW, float *out, const float *inp,
    void *stream)
{
	size_t n = (size_t)B * C;

	if (B <= 0 || C <= 0 || HW <= 0)
		return;
	DISPATCH(avgpool_fwd_nhwc_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>(n, C, HW, (A *)out, (const A *)inp));
}

extern "C" void
cuk_nhwc_avgpool_backward(int B, int C, int HW, float *dinp,
    const float *dout, void *stream)
{
	size_t n = (size_t)B * C * HW;

	if (B <= 0 || C <= 0 || HW <= 0 || dinp == NULL)
		return;
	DISPATCH(avgpool_bwd_nhwc_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>(n, C, HW, (A *)dinp, (const A *)dout));
}

extern "C" void
cuk_nhwc_patchify_forward(float *out, const float *img, int B, int C, int H,
    int W, int p, void *stream)
{
	int T = p > 0 ? (H / p) * (W / p) : 0;
	size_t n = (size_t)B * T * C * p * p;

	if (B <= 0 || C <= 0 || T <= 0)
		return;
	DISPATCH(patchify_fwd_nhwc_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>((A *)out, (const A *)img, n, C, H, W, p,
	    T));
}

extern "C" void
cuk_nhwc_patchify_backward(float *dimg, const float *dout, int B, int C,
    int H, int W, int p, void *stream)
{
	int T = p > 0 ? (H / p) * (W / p) : 0;
	size_t n = (size_t)B * T * C * p * p;

	if (B <= 0 || C <= 0 || T <= 0 || dimg == NULL)
		return;
	DISPATCH(patchify_bwd_nhwc_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>((A *)dimg, (const A *)dout, n, C, H, W, p,
	    T));
}
