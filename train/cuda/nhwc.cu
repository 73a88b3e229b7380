/*
 * nhwc.cu - the bf16 path's channels-last kernels (nhwc.h): the image's
 * and the convolution weights' transposes, batch norm, pooling and the
 * ViT's patches with 4-D activations stored (B,H,W,C). Each follows its
 * NCHW twin (norm.cu, pool.cu, vit.cu) formula for formula (the same _rn
 * operations, the same sums in double, the same scan orders and tie
 * rules); only the indices differ.
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
 * Every thread owns V consecutive channels of a row, one aligned load of
 * V activations (vec.h's ldv/stv: 16 bytes, 8 bf16 or 4 floats, when C is
 * a multiple of that and the pointers are aligned; else V is 1). A block
 * is TX threads across (TX V channels, a tile) by TY threads down (rows),
 * TX TY = BN_TILE_NT, both powers of two.
 *
 * The split: the rows are cut into S parts of chunk rows; block (s, tile)
 * sums part s of its channels (each thread a strided run of rows, then a
 * halving tree over the block's TY rows), and part[(c S + s) 2 + {0,1}]
 * gets the two sums. Then a warp per channel adds its S parts, lane l
 * the parts l, l + 32, ... in order, then a fixed butterfly. With no
 * workspace (part NULL, S 1) the block finishes its channels itself. Every
 * order depends on the shape alone: the same bits on every run.
 */
#define BN_TILE_NT	256

/* The block's TY rows of sh (TY rows of w = TX V doubles) added into
 * row 0 in a halving tree, each thread its own V columns; every thread
 * calls it. */
template <int V>
static __device__ __forceinline__ void
tile_rows_sum(double *sh, int w, int tx, int ty, int TY)
{
	for (int h = TY / 2; h > 0; h >>= 1) {
		if (ty < h)
			for (int k = 0; k < V; k++)
				sh[ty * w + tx * V + k] +=
				    sh[(ty + h) * w + tx * V + k];
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

/* grid (S, tiles), block (TX, TY); shift is the channel's first value,
 * element (b 0, i 0, c) at c */
template <typename A, int V>
static __global__ void __launch_bounds__(BN_TILE_NT)
bn_part_stats_nhwc_kernel(int C, size_t n, const A *inp, double *part,
    int S, size_t chunk, float *mean, float *rstd, float *run_mean,
    float *run_var, float momentum, float eps, int update)
{
	__shared__ double sh1[BN_TILE_NT * V], sh2[BN_TILE_NT * V];
	int tx = threadIdx.x, ty = threadIdx.y, TX = blockDim.x;
	int TY = blockDim.y, w = TX * V, sp = blockIdx.x;
	int c0 = (blockIdx.y * TX + tx) * V;
	size_t j0 = (size_t)sp * chunk, j1 = j0 + chunk < n ? j0 + chunk : n;
	double shift[V], s1[V], s2[V];
	float x[V];

	for (int k = 0; k < V; k++)
		shift[k] = s1[k] = s2[k] = 0.0;
	if (c0 < C) {
		ldv<A, V>(inp + c0, x);
		for (int k = 0; k < V; k++)
			shift[k] = (double)x[k];
		for (size_t j = j0 + ty; j < j1; j += TY) {
			ldv<A, V>(inp + j * C + c0, x);
			for (int k = 0; k < V; k++) {
				double v = (double)x[k] - shift[k];

				s1[k] += v;
				s2[k] += v * v;
			}
		}
	}
	for (int k = 0; k < V; k++) {
		sh1[ty * w + tx * V + k] = s1[k];
		sh2[ty * w + tx * V + k] = s2[k];
	}
	__syncthreads();
	tile_rows_sum<V>(sh1, w, tx, ty, TY);
	tile_rows_sum<V>(sh2, w, tx, ty, TY);
	if (ty != 0 || c0 >= C)
		return;
	for (int k = 0; k < V; k++) {
		int c = c0 + k;

		if (part != NULL) {
			part[((size_t)c * S + sp) * 2] = sh1[tx * V + k];
			part[((size_t)c * S + sp) * 2 + 1] = sh2[tx * V + k];
		} else
			stats_out(c, sh1[tx * V + k], sh2[tx * V + k],
			    (double)n, shift[k], mean, rstd, run_mean,
			    run_var, momentum, eps, update);
	}
}

/* Channel c's S parts added by its warp: lane l the parts l, l + 32, ...
 * in order, then the butterfly; every lane gets the sums. */
static __device__ __forceinline__ void
parts_sum(const double *part, int c, int S, double *s1, double *s2)
{
	int lane = threadIdx.x & 31;
	double a = 0.0, b = 0.0;

	for (int sp = lane; sp < S; sp += 32) {
		a += part[((size_t)c * S + sp) * 2];
		b += part[((size_t)c * S + sp) * 2 + 1];
	}
	*s1 = warp_sum(a);
	*s2 = warp_sum(b);
}

/* A warp per channel: its S parts, then the epilogue. */
template <typename A>
static __global__ void
bn_fin_stats_nhwc_kernel(int C, size_t n, const A *inp, const double *part,
    int S, float *mean, float *rstd, float *run_mean, float *run_var,
    float momentum, float eps, int update)
{
	size_t c = WARP_ID();
	double s1, s2;

	if (c >= (size_t)C)
		return;
	parts_sum(part, (int)c, S, &s1, &s2);
	if ((threadIdx.x & 31) == 0)
		stats_out((int)c, s1, s2, (double)n, (double)ld(inp[c]), mean,
		    rstd, run_mean, run_var, momentum, eps, update);
}

/* V per-channel floats from p[c]: 16-byte loads when V is a multiple of
 * 4 (the launcher checks the alignment), else one at a time; all dflt
 * when p is NULL */
template <int V>
static __device__ __forceinline__ void
ldf(const float *p, int c, float dflt, float *f)
{
	if (p == NULL) {
		for (int k = 0; k < V; k++)
			f[k] = dflt;
	} else if (V % 4 == 0) {
		for (int k = 0; k < V; k += 4)
			ldv<float, 4>(p + c + k, f + k);
	} else
		for (int k = 0; k < V; k++)
			f[k] = p[c + k];
}

/* bn_apply_kernel element for element: out = (x - m) a + b [+ res] [ReLU],
 * V channels of a row at a time (nv = n / V) */
template <typename A, int V>
static __global__ void
bn_apply_nhwc_kernel(size_t nv, int C, A *__restrict__ out,
    const A *__restrict__ inp, const float *__restrict__ gamma,
    const float *__restrict__ beta, const float *__restrict__ mean,
    const float *__restrict__ rstd, const float *__restrict__ run_mean,
    const float *__restrict__ run_var, float eps, int training,
    const A *__restrict__ res, int relu)
{
	GRID_LOOP(q, nv) {
		size_t at = q * V, cc;
		float x[V], r[V], g[V], bt[V], m[V], a[V];
		int c;

		divmod(at, (size_t)C, &cc);
		c = (int)cc;
		ldv<A, V>(inp + at, x);
		if (res != NULL)
			ldv<A, V>(res + at, r);
		ldf<V>(gamma, c, 1.0f, g);
		ldf<V>(beta, c, 0.0f, bt);
		ldf<V>(training ? mean : run_mean, c, 0.0f, m);
		ldf<V>(training ? rstd : run_var, c, 0.0f, a);
		for (int k = 0; k < V; k++) {
			float v;

			if (!training)
				a[k] = (float)(1.0 / sqrt((double)a[k] + eps));
			a[k] = __fmul_rn(a[k], g[k]);
			v = __fadd_rn(__fmul_rn(__fsub_rn(x[k], m[k]), a[k]),
			    bt[k]);
			if (res != NULL)
				v = __fadd_rn(v, r[k]);
			if (relu)
				v = v < 0.0f ? 0.0f : v;	/* NaN passes */
			x[k] = v;
		}
		stv<A, V>(out + at, x);
	}
}

/*
 * bn_fin_bwd's per-channel step: the parameters' gradients from the sums
 * sd of dv and sdx of dv (x - mean), and the constants of the input
 * gradient in k3[0], k3[kld], k3[2 kld]: gamma rstd, mean(dv),
 * mean(dv xhat).
 */
static __device__ void
bwd_out(int c, double sd, double sdx, double dn, const float *gamma,
    const float *rstd, float *dgamma, float *dbeta, float *k3, int kld)
{
	float r = rstd[c], g = gamma != NULL ? gamma[c] : 1.0f;

	sdx *= r;
	if (dbeta != NULL)
		dbeta[c] = __fadd_rn(dbeta[c], (float)sd);
	if (dgamma != NULL)
		dgamma[c] = __fadd_rn(dgamma[c], (float)sdx);
	k3[0] = __fmul_rn(g, r);
	k3[kld] = (float)(sd / dn);
	k3[2 * kld] = (float)(sdx / dn);
}

/* dv: dout, zero where the forward's ReLU was (out not > 0) */
template <typename A, int V>
static __device__ __forceinline__ void
bwd_dv(size_t at, const A *dout, const A *out, int relu, float *d)
{
	ldv<A, V>(dout + at, d);
	if (relu) {
		float o[V];

		ldv<A, V>(out + at, o);
		for (int k = 0; k < V; k++)
			if (!(o[k] > 0.0f))
				d[k] = 0.0f;
	}
}

/* dres += dv, dinp += k (dv - md - xhat mdx) for V channels from c of the
 * row at at; the channels' three constants at k3[kc], k3[kld + kc] and
 * k3[2 kld + kc] */
template <typename A, int V>
static __device__ __forceinline__ void
bwd_elts(size_t at, int c, A *dinp, const A *dout, const A *inp,
    const float *mean, const float *rstd, A *dres, const A *out, int relu,
    const float *k3, int kld, int kc)
{
	float d[V], a[V], x[V], m[V], r[V], k0[V], k1[V], k2[V];

	bwd_dv<A, V>(at, dout, out, relu, d);
	if (dres != NULL) {
		ldv<A, V>(dres + at, a);
		for (int k = 0; k < V; k++)
			a[k] = __fadd_rn(a[k], d[k]);
		stv<A, V>(dres + at, a);
	}
	if (dinp == NULL)
		return;
	ldv<A, V>(dinp + at, a);
	ldv<A, V>(inp + at, x);
	ldf<V>(mean, c, 0.0f, m);
	ldf<V>(rstd, c, 0.0f, r);
	ldf<V>(k3, kc, 0.0f, k0);
	ldf<V>(k3 + kld, kc, 0.0f, k1);
	ldf<V>(k3 + 2 * kld, kc, 0.0f, k2);
	for (int k = 0; k < V; k++)
		a[k] = __fadd_rn(a[k], __fmul_rn(k0[k], __fsub_rn(__fsub_rn(
		    d[k], k1[k]), __fmul_rn(__fmul_rn(__fsub_rn(x[k], m[k]),
		    r[k]), k2[k]))));
	stv<A, V>(dinp + at, a);
}

/*
 * grid (S, tiles), block (TX, TY): part[(c S + s) 2 + {0,1}] = sums of dv
 * and dv (x - mean) over part s. With part NULL (S 1), the block
 * finishes its channels: the parameters' gradients, then dres and dinp.
 */
template <typename A, int V>
static __global__ void __launch_bounds__(BN_TILE_NT)
bn_part_bwd_nhwc_kernel(int C, size_t n, const A *dout, const A *inp,
    const A *out, const float *mean, int relu, double *part, int S,
    size_t chunk, A *dinp, float *dgamma, float *dbeta, const float *gamma,
    const float *rstd, A *dres)
{
	__shared__ double sh1[BN_TILE_NT * V], sh2[BN_TILE_NT * V];
	__shared__ __align__(16) float k3[3 * 32 * V];	/* (3, w), TX <= 32 */
	int tx = threadIdx.x, ty = threadIdx.y, TX = blockDim.x;
	int TY = blockDim.y, w = TX * V, sp = blockIdx.x;
	int c0 = (blockIdx.y * TX + tx) * V;
	size_t j0 = (size_t)sp * chunk, j1 = j0 + chunk < n ? j0 + chunk : n;
	double sd[V], sdx[V];
	float m[V], d[V], x[V];

	for (int k = 0; k < V; k++) {
		sd[k] = sdx[k] = 0.0;
		m[k] = c0 < C ? mean[c0 + k] : 0.0f;
	}
	if (c0 < C)
		for (size_t j = j0 + ty; j < j1; j += TY) {
			size_t at = j * C + c0;

			bwd_dv<A, V>(at, dout, out, relu, d);
			ldv<A, V>(inp + at, x);
			for (int k = 0; k < V; k++) {
				sd[k] += d[k];
				sdx[k] += (double)d[k] * ((double)x[k] - m[k]);
			}
		}
	for (int k = 0; k < V; k++) {
		sh1[ty * w + tx * V + k] = sd[k];
		sh2[ty * w + tx * V + k] = sdx[k];
	}
	__syncthreads();
	tile_rows_sum<V>(sh1, w, tx, ty, TY);
	tile_rows_sum<V>(sh2, w, tx, ty, TY);
	if (part != NULL) {
		if (ty == 0 && c0 < C)
			for (int k = 0; k < V; k++) {
				int c = c0 + k;

				part[((size_t)c * S + sp) * 2] =
				    sh1[tx * V + k];
				part[((size_t)c * S + sp) * 2 + 1] =
				    sh2[tx * V + k];
			}
		return;
	}
	/* k3 (3, w), indexed by the channel's place in the tile */
	if (ty == 0 && c0 < C)
		for (int k = 0; k < V; k++)
			bwd_out(c0 + k, sh1[tx * V + k], sh2[tx * V + k],
			    (double)n, gamma, rstd, dgamma, dbeta,
			    &k3[tx * V + k], w);
	__syncthreads();
	if (c0 >= C || (dinp == NULL && dres == NULL))
		return;
	for (size_t j = ty; j < n; j += TY)
		bwd_elts<A, V>(j * C + c0, c0, dinp, dout, inp, mean, rstd,
		    dres, out, relu, k3, w, tx * V);
}

/* A warp per channel: its S parts, then bwd_out into k3 (3,C) */
static __global__ void
bn_fin_bwd_nhwc_kernel(int C, size_t n, const double *part, int S,
    const float *gamma, const float *rstd, float *dgamma, float *dbeta,
    float *k3)
{
	size_t c = WARP_ID();
	double sd, sdx;

	if (c >= (size_t)C)
		return;
	parts_sum(part, (int)c, S, &sd, &sdx);
	if ((threadIdx.x & 31) == 0)
		bwd_out((int)c, sd, sdx, (double)n, gamma, rstd, dgamma, dbeta,
		    k3 + c, C);
}

/* bn_apply_bwd_kernel element for element, V channels at a time */
template <typename A, int V>
static __global__ void
bn_apply_bwd_nhwc_kernel(size_t nv, int C, A *dinp, const A *dout,
    const A *inp, const float *mean, const float *rstd, A *dres,
    const A *out, int relu, const float *k3)
{
	GRID_LOOP(q, nv) {
		size_t at = q * V, c;

		divmod(at, (size_t)C, &c);
		bwd_elts<A, V>(at, (int)c, dinp, dout, inp, mean, rstd, dres,
		    out, relu, k3, C, (int)c);
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
 * vit.cu's patch_pixel.
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
 * A batch norm's launch: the vector width V (16 bytes of activations when
 * C and every pointer allow, else 1), the block (TX, TY) and the parts of
 * the rows: enough blocks in all (S tiles) to fill the GPU a few times
 * over, each of a block's row threads at least 8 rows.
 */
struct bn_launch {
	int V, S;
	size_t n, chunk;	/* rows B HW, and of a part */
	dim3 blk, grid;
};

static void
bn_plan(int B, int C, int HW, int vec_ok, struct bn_launch *L)
{
	int v = vec_ok ? 16 / (cuk_act_bf16 ? 2 : 4) : 1;
	size_t tx = 8, tiles, most, s, cols;

	L->V = C % v == 0 ? v : 1;
	cols = (size_t)C / L->V;
	/* at least 8 across, so at most 32 rows down: a block of a narrow
	 * tile of rows alone gave wrong sums on the GPU, not understood */
	while (tx < 32 && tx < cols)
		tx <<= 1;
	L->blk = dim3((unsigned)tx, (unsigned)(BN_TILE_NT / tx));
	tiles = (cols + tx - 1) / tx;
	L->n = (size_t)B * HW;
	most = (L->n + L->blk.y * 8 - 1) / (L->blk.y * 8);
	s = (2048 + tiles - 1) / tiles;
	if (s > most)
		s = most;
	if (s > 65535)
		s = 65535;
	if (s < 1)
		s = 1;
	L->chunk = (L->n + s - 1) / s;
	L->S = (int)((L->n + L->chunk - 1) / L->chunk);
	L->grid = dim3((unsigned)L->S, (unsigned)tiles);
}

/* Launch KERNEL<A, V> with V the plan's width (8 or 4 when vectors, 1) */
#define BN_LAUNCH(L, KERNEL, grid, blk, st, ...) do {			\
	if ((L).V == 1)							\
		DISPATCH(KERNEL<A, 1><<<grid, blk, 0, st>>>(__VA_ARGS__)); \
	else if (cuk_act_bf16) {					\
		typedef bf16 A;						\
		KERNEL<A, 8><<<grid, blk, 0, st>>>(__VA_ARGS__);	\
	} else {							\
		typedef float A;					\
		KERNEL<A, 4><<<grid, blk, 0, st>>>(__VA_ARGS__);	\
	}								\
} while (0)

extern "C" void
cuk_nhwc_batchnorm_forward(int B, int C, int HW, float *out,
    const float *inp, const float *gamma, const float *beta, float *mean,
    float *rstd, float *run_mean, float *run_var, float momentum, float eps,
    int training, int update, const float *res, int relu, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	struct bn_launch L;
	size_t n;

	/* an empty batch has no statistics: nothing to normalise or move */
	if (B <= 0 || C <= 0 || HW <= 0)
		return;
	bn_plan(B, C, HW, aligned16(out) && aligned16(inp) &&
	    aligned16(res) && aligned16(gamma) && aligned16(beta) &&
	    aligned16(mean) && aligned16(rstd) && aligned16(run_mean) &&
	    aligned16(run_var), &L);
	n = L.n * C;
	if (training) {
		double *part = (double *)cuk_workspace((size_t)C * L.S * 2 *
		    sizeof(double), st);

		if (part == NULL) {	/* one part: the blocks finish */
			L.S = 1;
			L.chunk = L.n;
			L.grid.x = 1;
		}
		BN_LAUNCH(L, bn_part_stats_nhwc_kernel, L.grid, L.blk, st, C,
		    L.n, (const A *)inp, part, L.S, L.chunk, mean, rstd,
		    run_mean, run_var, momentum, eps, update);
		if (part != NULL)
			DISPATCH(bn_fin_stats_nhwc_kernel<A><<<warp_blocks_for(
			    (size_t)C), NT, 0, st>>>(C, L.n, (const A *)inp,
			    part, L.S, mean, rstd, run_mean, run_var, momentum,
			    eps, update));
	}
	BN_LAUNCH(L, bn_apply_nhwc_kernel, blocks_for(n / L.V), NT, st,
	    n / L.V, C, (A *)out, (const A *)inp, gamma, beta, mean, rstd,
	    run_mean, run_var, eps, training, (const A *)res, relu);
}

extern "C" void
cuk_nhwc_batchnorm_backward(int B, int C, int HW, float *dinp,
    float *dgamma, float *dbeta, const float *dout, const float *inp,
    const float *gamma, const float *mean, const float *rstd, float *dres,
    const float *out, int relu, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	struct bn_launch L;
	double *part;
	float *k3;
	size_t n;

	if (B <= 0 || C <= 0 || HW <= 0)
		return;
	bn_plan(B, C, HW, aligned16(dinp) && aligned16(dout) &&
	    aligned16(inp) && aligned16(dres) && aligned16(out) &&
	    aligned16(mean) && aligned16(rstd), &L);
	n = L.n * C;
	/* the partial sums, then the channels' three constants */
	part = (double *)cuk_workspace((size_t)C * L.S * 2 * sizeof(double) +
	    (size_t)C * 3 * sizeof(float), st);
	if (part == NULL) {	/* one part: the blocks finish */
		L.grid.x = 1;
		BN_LAUNCH(L, bn_part_bwd_nhwc_kernel, L.grid, L.blk, st, C,
		    L.n, (const A *)dout, (const A *)inp, (const A *)out,
		    mean, relu, NULL, 1, L.n, (A *)dinp, dgamma, dbeta, gamma,
		    rstd, (A *)dres);
		return;
	}
	k3 = (float *)(part + (size_t)C * L.S * 2);
	BN_LAUNCH(L, bn_part_bwd_nhwc_kernel, L.grid, L.blk, st, C, L.n,
	    (const A *)dout, (const A *)inp, (const A *)out, mean, relu, part,
	    L.S, L.chunk, NULL, NULL, NULL, NULL, NULL, NULL);
	bn_fin_bwd_nhwc_kernel<<<warp_blocks_for((size_t)C), NT, 0, st>>>(C,
	    L.n, part, L.S, gamma, rstd, dgamma, dbeta, k3);
	if (dinp == NULL && dres == NULL)
		return;
	BN_LAUNCH(L, bn_apply_bwd_nhwc_kernel, blocks_for(n / L.V), NT, st,
	    n / L.V, C, (A *)dinp, (const A *)dout, (const A *)inp, mean,
	    rstd, (A *)dres, (const A *)out, relu, k3);
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
