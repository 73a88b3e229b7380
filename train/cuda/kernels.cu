/*
 * kernels.cu - the CUDA backend's own kernels: batch and layer norm,
 * the elementwise passes, pooling, the ViT's embedding glue, the loss, the
 * optimizer updates, and the softmax, sum of squares and bias gradient
 * cuda.c builds attention, clipping and the linear layer from. Each one
 * follows its CPU twin in train/cpu/ (the oracle) and the contract in
 * backend.h; the launchers are at the end, declared in kernels.h.
 *
 * Results are the same bits on every run: no float atomics; a reduction
 * is one block (or warp) per output, its threads' partial sums added by a
 * fixed tree whose shape depends on the tensor's shape alone. Statistics
 * and sums are accumulated in double where the CPU does so.
 *
 * Elementwise arithmetic is written with the _rn intrinsics where the CPU
 * does the same float operations: they are never contracted into an FMA
 * (nvcc contracts by default, the CPU build does not), so the optimizer
 * updates, ReLU, add and the norms' final affine steps give the CPU's bits
 * when their inputs agree.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels.h"
#include "common.cuh"

int cuk_act_bf16;

extern "C" void
cuk_set_bf16(int on)
{
	cuk_act_bf16 = on != 0;
}

/*
 * Adds sh[RY][COLS] over its rows into row 0, halving: the tree of the
 * column reductions, the same for every run of a shape.
 */
template <int RY>
static __device__ __forceinline__ void
rows_sum(double (*sh)[COLS], int tx, int ty)
{
	for (int s = RY / 2; s > 0; s >>= 1) {
		if (ty < s)
			sh[ty][tx] += sh[ty + s][tx];
		__syncthreads();
	}
}

/* ------------------------------------------------------------------------ */
/* batch norm                                                               */

/*
 * Training statistics of channel blockIdx.x: sums of x - shift and its
 * square in double, shift the channel's first value (batchnorm.c: it
 * keeps the one-pass variance from cancelling under a large mean). Writes
 * mean and rstd and, with update, moves the running statistics toward the
 * mean and the unbiased variance.
 */
template <typename A>
static __global__ void __launch_bounds__(BN_NT)
bn_stats_kernel(int B, int C, int HW, const A *inp, float *mean,
    float *rstd, float *run_mean, float *run_var, float momentum, float eps,
    int update)
{
	__shared__ double sh[32];
	int c = blockIdx.x;
	size_t n = (size_t)B * HW, chw = (size_t)C * HW;
	const A *x = inp + (size_t)c * HW;
	double dn = (double)B * HW, shift = ld(x[0]), s1 = 0.0, s2 = 0.0;

	for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
		size_t i, b = divmod(j, (size_t)HW, &i);
		double v = (double)ld(x[b * chw + i]) - shift;

		s1 += v;
		s2 += v * v;
	}
	s1 = block_sum(s1, sh);
	s2 = block_sum(s2, sh);
	if (threadIdx.x == 0) {
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
			run_mean[c] = (float)__dadd_rn(__dmul_rn(1.0 -
			    momentum, run_mean[c]), __dmul_rn(momentum, mu));
			run_var[c] = (float)__dadd_rn(__dmul_rn(1.0 -
			    momentum, run_var[c]), __dmul_rn(momentum, uvar));
		}
	}
}

/*
 * out = (x - m) a + b, then + res, then ReLU: batchnorm.c's bn_apply, op
 * for op, so the fused epilogue gives the separate passes' bits. The grid
 * is (elements of a channel, channels): a block works out its channel's
 * constants once.
 */
template <typename A>
static __global__ void
bn_apply_kernel(int B, int C, int HW, A *out, const A *inp,
    const float *gamma, const float *beta, const float *mean,
    const float *rstd, const float *run_mean, const float *run_var,
    float eps, int training, const A *res, int relu)
{
	size_t n = (size_t)B * HW;

	for (int c = blockIdx.y; c < C; c += gridDim.y) {
		float g = gamma != NULL ? gamma[c] : 1.0f;
		float bt = beta != NULL ? beta[c] : 0.0f, m, a;

		if (training) {
			m = mean[c];
			a = __fmul_rn(rstd[c], g);
		} else {
			m = run_mean[c];
			a = __fmul_rn((float)(1.0 / sqrt((double)run_var[c] +
			    eps)), g);
		}
		GRID_LOOP(j, n) {
			size_t i, b = divmod(j, (size_t)HW, &i);
			size_t at = (b * C + c) * HW + i;
			float v = __fadd_rn(__fmul_rn(__fsub_rn(ld(inp[at]), m),
			    a), bt);

			if (res != NULL)
				v = __fadd_rn(v, ld(res[at]));
			if (relu)
				v = v < 0.0f ? 0.0f : v;	/* NaN passes */
			st(&out[at], v);
		}
	}
}

/*
 * Backward of channel blockIdx.x, whole in one block: the sums need every
 * element of the channel before any input gradient can be written, and
 * there is no scratch to hand them to a second kernel. dv is dout masked
 * where the fused ReLU's output is not > 0 (+0 there, as relu_mask);
 * dbeta += sum dv, dgamma += sum dv xhat, dres += dv, dinp += gamma rstd
 * (dv - mean(dv) - xhat mean(dv xhat)).
 */
template <typename A>
static __global__ void __launch_bounds__(BN_NT)
bn_backward_kernel(int B, int C, int HW, A *dinp, float *dgamma,
    float *dbeta, const A *dout, const A *inp, const float *gamma,
    const float *mean, const float *rstd, A *dres, const A *out,
    int relu)
{
	__shared__ double sh[32];
	int c = blockIdx.x;
	size_t n = (size_t)B * HW, chw = (size_t)C * HW;
	size_t c0 = (size_t)c * HW;
	float m = mean[c], r = rstd[c];
	float g = gamma != NULL ? gamma[c] : 1.0f, k, md, mdx;
	double dn = (double)B * HW, sd = 0.0, sdx = 0.0;

	for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
		size_t i, b = divmod(j, (size_t)HW, &i);
		size_t at = c0 + b * chw + i;
		float d = ld(dout[at]);

		if (relu && !(ld(out[at]) > 0.0f))
			d = 0.0f;
		sd += d;
		sdx += (double)d * ((double)ld(inp[at]) - m);
	}
	sd = block_sum(sd, sh);
	sdx = block_sum(sdx, sh) * r;
	if (threadIdx.x == 0) {
		if (dbeta != NULL)
			dbeta[c] = __fadd_rn(dbeta[c], (float)sd);
		if (dgamma != NULL)
			dgamma[c] = __fadd_rn(dgamma[c], (float)sdx);
	}
	if (dinp == NULL && dres == NULL)
		return;
	k = __fmul_rn(g, r);
	md = (float)(sd / dn);
	mdx = (float)(sdx / dn);
	for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
		size_t i, b = divmod(j, (size_t)HW, &i);
		size_t at = c0 + b * chw + i;
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
}

/*
 * The split batch norm: a channel of B*HW values is cut into S parts of
 * chunk values, one block each (grid (S, C)), so a 64-channel layer keeps
 * every multiprocessor busy; a second kernel adds a channel's S partial
 * sums in order. The sums are the single-block kernels' (double, the
 * channel's first value as the shift), only in parts: the same to float
 * precision, and the same bits on every run.
 *
 * part[(c S + s) 2 + {0,1}] = sums of (x - shift) and its square over the
 * part s of channel c.
 */
template <typename A>
static __global__ void __launch_bounds__(BN_NT)
bn_part_stats_kernel(int B, int C, int HW, const A *inp, double *part,
    int S, size_t chunk)
{
	__shared__ double sh[32];
	int c = blockIdx.y, sp = blockIdx.x;
	size_t n = (size_t)B * HW, chw = (size_t)C * HW;
	size_t j0 = (size_t)sp * chunk, j1 = j0 + chunk < n ? j0 + chunk : n;
	const A *x = inp + (size_t)c * HW;
	double shift = ld(x[0]), s1 = 0.0, s2 = 0.0;

	for (size_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
		size_t i, b = divmod(j, (size_t)HW, &i);
		double v = (double)ld(x[b * chw + i]) - shift;

		s1 += v;
		s2 += v * v;
	}
	s1 = block_sum(s1, sh);
	s2 = block_sum(s2, sh);
	if (threadIdx.x == 0) {
		part[((size_t)c * S + sp) * 2] = s1;
		part[((size_t)c * S + sp) * 2 + 1] = s2;
	}
}

/* One thread per channel: bn_stats_kernel's epilogue on the S parts. */
template <typename A>
static __global__ void
bn_fin_stats_kernel(int B, int C, int HW, const A *inp, const double *part,
    int S, float *mean, float *rstd, float *run_mean, float *run_var,
    float momentum, float eps, int update)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	double dn = (double)B * HW, s1 = 0.0, s2 = 0.0, mu, var, uvar;

	if (c >= C)
		return;
	for (int sp = 0; sp < S; sp++) {
		s1 += part[((size_t)c * S + sp) * 2];
		s2 += part[((size_t)c * S + sp) * 2 + 1];
	}
	mu = s1 / dn;
	var = __dsub_rn(s2 / dn, __dmul_rn(mu, mu));
	if (var < 0)
		var = 0;
	mu += (double)ld(inp[(size_t)c * HW]);
	mean[c] = (float)mu;
	rstd[c] = (float)(1.0 / sqrt(var + eps));
	if (update) {
		uvar = dn > 1 ? var * dn / (dn - 1) : var;
		run_mean[c] = (float)__dadd_rn(__dmul_rn(1.0 - momentum,
		    run_mean[c]), __dmul_rn(momentum, mu));
		run_var[c] = (float)__dadd_rn(__dmul_rn(1.0 - momentum,
		    run_var[c]), __dmul_rn(momentum, uvar));
	}
}

/* part[(c S + s) 2 + {0,1}] = sums of dv and dv (x - mean) over part s */
template <typename A>
static __global__ void __launch_bounds__(BN_NT)
bn_part_bwd_kernel(int B, int C, int HW, const A *dout, const A *inp,
    const A *out, const float *mean, int relu, double *part, int S,
    size_t chunk)
{
	__shared__ double sh[32];
	int c = blockIdx.y, sp = blockIdx.x;
	size_t n = (size_t)B * HW, chw = (size_t)C * HW, c0 = (size_t)c * HW;
	size_t j0 = (size_t)sp * chunk, j1 = j0 + chunk < n ? j0 + chunk : n;
	float m = mean[c];
	double sd = 0.0, sdx = 0.0;

	for (size_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
		size_t i, b = divmod(j, (size_t)HW, &i);
		size_t at = c0 + b * chw + i;
		float d = ld(dout[at]);

		if (relu && !(ld(out[at]) > 0.0f))
			d = 0.0f;
		sd += d;
		sdx += (double)d * ((double)ld(inp[at]) - m);
	}
	sd = block_sum(sd, sh);
	sdx = block_sum(sdx, sh);
	if (threadIdx.x == 0) {
		part[((size_t)c * S + sp) * 2] = sd;
		part[((size_t)c * S + sp) * 2 + 1] = sdx;
	}
}

/*
 * One thread per channel: the parameters' gradients, and the channel's
 * constants for bn_apply_bwd_kernel in k3 (C,3): gamma rstd, mean(dv),
 * mean(dv xhat), as bn_backward_kernel computes them.
 */
static __global__ void
bn_fin_bwd_kernel(int B, int C, int HW, const double *part, int S,
    const float *gamma, const float *rstd, float *dgamma, float *dbeta,
    float *k3)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	double dn = (double)B * HW, sd = 0.0, sdx = 0.0;
	float r, g;

	if (c >= C)
		return;
	for (int sp = 0; sp < S; sp++) {
		sd += part[((size_t)c * S + sp) * 2];
		sdx += part[((size_t)c * S + sp) * 2 + 1];
	}
	r = rstd[c];
	g = gamma != NULL ? gamma[c] : 1.0f;
	sdx *= r;
	if (dbeta != NULL)
		dbeta[c] = __fadd_rn(dbeta[c], (float)sd);
	if (dgamma != NULL)
		dgamma[c] = __fadd_rn(dgamma[c], (float)sdx);
	k3[3 * c] = __fmul_rn(g, r);
	k3[3 * c + 1] = (float)(sd / dn);
	k3[3 * c + 2] = (float)(sdx / dn);
}

/* dres += dv, dinp += k (dv - md - xhat mdx): bn_backward_kernel's second
 * pass, with the grid of bn_apply_kernel */
template <typename A>
static __global__ void
bn_apply_bwd_kernel(int B, int C, int HW, A *dinp, const A *dout,
    const A *inp, const float *mean, const float *rstd, A *dres,
    const A *out, int relu, const float *k3)
{
	size_t n = (size_t)B * HW;

	for (int c = blockIdx.y; c < C; c += gridDim.y) {
		float m = mean[c], r = rstd[c], k = k3[3 * c];
		float md = k3[3 * c + 1], mdx = k3[3 * c + 2];

		GRID_LOOP(j, n) {
			size_t i, b = divmod(j, (size_t)HW, &i);
			size_t at = (b * C + c) * HW + i;
			float d = ld(dout[at]);

			if (relu && !(ld(out[at]) > 0.0f))
				d = 0.0f;
			if (dres != NULL)
				st(&dres[at], __fadd_rn(ld(dres[at]), d));
			if (dinp != NULL)
				st(&dinp[at], __fadd_rn(ld(dinp[at]), __fmul_rn(k,
				    __fsub_rn(__fsub_rn(d, md), __fmul_rn(
				    __fmul_rn(__fsub_rn(ld(inp[at]), m), r),
				    mdx)))));
		}
	}
}

/* ------------------------------------------------------------------------ */
/* elementwise                                                              */

template <typename A>
static __global__ void
relu_fwd_kernel(A *out, const A *inp, size_t n)
{
	GRID_LOOP(i, n) {
		float v = ld(inp[i]);

		st(&out[i], v < 0.0f ? 0.0f : v);	/* NaN passes */
	}
}

/* dinp += out > 0 ? dout : +0; the +0 is added, as the CPU adds it */
template <typename A>
static __global__ void
relu_bwd_kernel(A *dinp, const A *dout, const A *out, size_t n)
{
	GRID_LOOP(i, n)
		st(&dinp[i], __fadd_rn(ld(dinp[i]), ld(out[i]) > 0.0f ?
		    ld(dout[i]) : 0.0f));
}

/*
 * The elementwise kernels below take V activations at a time (ldv/stv):
 * 16 bytes when n and the pointers allow (ELT_LAUNCH), else 1; n counts
 * elements, a multiple of V.
 */
template <typename A, int V>
static __global__ void
add_fwd_kernel(A *out, const A *a, const A *b, size_t n)
{
	GRID_LOOP(q, n / V) {
		float x[V], y[V];

		ldv<A, V>(a + q * V, x);
		ldv<A, V>(b + q * V, y);
		for (int k = 0; k < V; k++)
			x[k] = __fadd_rn(x[k], y[k]);
		stv<A, V>(out + q * V, x);
	}
}

template <typename A, int V>
static __global__ void
add_bwd_kernel(A *da, A *db, const A *dout, size_t n)
{
	GRID_LOOP(q, n / V) {
		float d[V], x[V];

		ldv<A, V>(dout + q * V, d);
		if (da != NULL) {
			ldv<A, V>(da + q * V, x);
			for (int k = 0; k < V; k++)
				x[k] = __fadd_rn(x[k], d[k]);
			stv<A, V>(da + q * V, x);
		}
		if (db != NULL) {
			ldv<A, V>(db + q * V, x);
			for (int k = 0; k < V; k++)
				x[k] = __fadd_rn(x[k], d[k]);
			stv<A, V>(db + q * V, x);
		}
	}
}

/* x/2 (1 + erf(x/sqrt 2)) in eltwise.c's order, with CUDA's erff */
template <typename A, int V>
static __global__ void
gelu_fwd_kernel(A *__restrict__ out, const A *__restrict__ inp, size_t n)
{
	GRID_LOOP(q, n / V) {
		float x[V];

		ldv<A, V>(inp + q * V, x);
		for (int k = 0; k < V; k++)
			x[k] = __fmul_rn(__fmul_rn(0.5f, x[k]), __fadd_rn(1.0f,
			    erff(__fmul_rn(x[k], GELU_S))));
		stv<A, V>(out + q * V, x);
	}
}

/* dinp += dout (Phi(x) + x phi(x)) */
template <typename A, int V>
static __global__ void
gelu_bwd_kernel(A *__restrict__ dinp, const A *__restrict__ dout,
    const A *__restrict__ inp, size_t n)
{
	GRID_LOOP(q, n / V) {
		float x[V], d[V], a[V];

		ldv<A, V>(inp + q * V, x);
		ldv<A, V>(dout + q * V, d);
		ldv<A, V>(dinp + q * V, a);
		for (int k = 0; k < V; k++) {
			float cdf, pdf;

			cdf = __fmul_rn(0.5f, __fadd_rn(1.0f, erff(__fmul_rn(
			    x[k], GELU_S))));
			pdf = __fmul_rn(__fmul_rn(x[k], expf(__fmul_rn(
			    __fmul_rn(-0.5f, x[k]), x[k]))), GELU_K);
			a[k] = __fadd_rn(a[k], __fmul_rn(d[k], __fadd_rn(cdf,
			    pdf)));
		}
		stv<A, V>(dinp + q * V, a);
	}
}

/* Launch KERNEL<A, V>(ARGS) over n elements, V 16 bytes of activations
 * when ok (the pointers are aligned) and n allows, else 1. */
#define ELT_LAUNCH(ok, n, st, KERNEL, ...) do {				\
	if (cuk_act_bf16) {						\
		typedef bf16 A;						\
		if ((ok) && (n) % 8 == 0)				\
			KERNEL<A, 8><<<blocks_for((n) / 8), NT, 0, st>>>( \
			    __VA_ARGS__);				\
		else							\
			KERNEL<A, 1><<<blocks_for(n), NT, 0, st>>>(	\
			    __VA_ARGS__);				\
	} else {							\
		typedef float A;					\
		if ((ok) && (n) % 4 == 0)				\
			KERNEL<A, 4><<<blocks_for((n) / 4), NT, 0, st>>>( \
			    __VA_ARGS__);				\
		else							\
			KERNEL<A, 1><<<blocks_for(n), NT, 0, st>>>(	\
			    __VA_ARGS__);				\
	}								\
} while (0)

static __global__ void
scale_kernel(float *x, size_t n, float s)
{
	GRID_LOOP(i, n)
		x[i] = __fmul_rn(x[i], s);
}

template <typename A>
static __global__ void
bias_add_kernel(A *out, const float *bias, size_t n, int N)
{
	GRID_LOOP(i, n)
		st(&out[i], __fadd_rn(ld(out[i]), bias[i % (size_t)N]));
}

/* out (B,K,PQ) += bias (K): a convolution's bias */
template <typename A>
static __global__ void
bias_add_nchw_kernel(A *out, const float *bias, size_t n, int K, size_t PQ)
{
	GRID_LOOP(i, n) {
		size_t r, k;

		divmod(divmod(i, PQ, &r), (size_t)K, &k);
		st(&out[i], __fadd_rn(ld(out[i]), bias[k]));
	}
}

/* dbias (K) += sums of dout (B,K,PQ) over B and PQ, channel blockIdx.x
 * in one block, in double */
template <typename A>
static __global__ void __launch_bounds__(NT)
bias_grad_nchw_kernel(float *dbias, const A *dout, int B, int K, size_t PQ)
{
	__shared__ double sh[32];
	size_t n = (size_t)B * PQ;
	int k = blockIdx.x;
	double s = 0.0;

	for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
		size_t r, b = divmod(j, PQ, &r);

		s += ld(dout[(b * K + k) * PQ + r]);
	}
	s = block_sum(s, sh);
	if (threadIdx.x == 0)
		dbias[k] = __fadd_rn(dbias[k], (float)s);
}

/* dst (n) = src (n), rounded to the storage type A */
template <typename A, typename S>
static __global__ void
convert_kernel(A *dst, const S *src, size_t n)
{
	GRID_LOOP(i, n)
		st(&dst[i], ld(src[i]));
}

/* dst (n) = src (n) rounded to bf16, kept in fp32 */
static __global__ void
round_bf16_kernel(float *dst, const float *src, size_t n)
{
	GRID_LOOP(i, n)
		dst[i] = __bfloat162float(__float2bfloat16_rn(src[i]));
}

/* dst (n) += src (n) bf16: a bf16 weight gradient into the fp32 one */
static __global__ void
acc_bf16_kernel(float *dst, const bf16 *src, size_t n)
{
	GRID_LOOP(i, n)
		dst[i] = __fadd_rn(dst[i], __bfloat162float(src[i]));
}

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
/* layer norm                                                               */

/*
 * One warp per row, as layernorm.c: the mean in double, then the variance
 * of the centred values in double (two passes, so a large mean costs no
 * digits), then n = (x - m) rstd and out = n gamma + beta in float.
 */
template <typename A>
static __global__ void
ln_fwd_kernel(A *out, float *mean, float *rstd, const A *inp,
    const float *gamma, const float *beta, int M, int C, float eps)
{
	int lane = threadIdx.x & 31;

	for (size_t row = WARP_ID(); row < (size_t)M; row += WARP_COUNT()) {
		const A *x = inp + row * C;
		A *y = out + row * C;
		double s = 0.0, v = 0.0;
		float m, r;

		for (int j = lane; j < C; j += 32)
			s += ld(x[j]);
		s = warp_sum(s) / C;
		for (int j = lane; j < C; j += 32) {
			double d = ld(x[j]) - s;

			v += d * d;
		}
		v = warp_sum(v) / C;
		m = (float)s;
		r = (float)(1.0 / sqrt(v + eps));
		for (int j = lane; j < C; j += 32) {
			float nv = __fmul_rn(__fsub_rn(ld(x[j]), m), r);

			st(&y[j], __fadd_rn(__fmul_rn(nv, gamma != NULL ?
			    gamma[j] : 1.0f), beta != NULL ? beta[j] : 0.0f));
		}
		if (lane == 0) {
			mean[row] = m;
			rstd[row] = r;
		}
	}
}

/* gamma[j .. j + V), all ones when gamma is NULL */
template <int V>
static __device__ __forceinline__ void
gamma_at(const float *gamma, int j, float *g)
{
	if (gamma != NULL)
		ldv<float, V>(gamma + j, g);
	else
		for (int k = 0; k < V; k++)
			g[k] = 1.0f;
}

/* One warp per row: dinp += rstd (dn - mean(dn) - n mean(dn n)), with
 * dn = dout gamma and the two means in double; lane l takes the V-wide
 * runs l, l + 32, ... of the row (V 1, or 16 bytes of activations when C
 * and the pointers allow). */
template <typename A, int V>
static __global__ void
ln_bwd_kernel(A *__restrict__ dinp, const A *__restrict__ dout,
    const A *__restrict__ inp, const float *__restrict__ gamma,
    const float *__restrict__ mean, const float *__restrict__ rstd, int M,
    int C)
{
	int lane = threadIdx.x & 31;

	for (size_t row = WARP_ID(); row < (size_t)M; row += WARP_COUNT()) {
		const A *x = inp + row * C, *dy = dout + row * C;
		A *dx = dinp + row * C;
		float m = mean[row], r = rstd[row], a, b;
		float xv[V], dv[V], g[V], o[V];
		double sdn = 0.0, sdnn = 0.0;

		for (int j = lane * V; j < C; j += 32 * V) {
			ldv<A, V>(x + j, xv);
			ldv<A, V>(dy + j, dv);
			gamma_at<V>(gamma, j, g);
			for (int k = 0; k < V; k++) {
				float nv = __fmul_rn(__fsub_rn(xv[k], m), r);
				float dn = __fmul_rn(dv[k], g[k]);

				sdn += dn;
				sdnn += (double)dn * nv;
			}
		}
		a = (float)(warp_sum(sdn) / C);
		b = (float)(warp_sum(sdnn) / C);
		for (int j = lane * V; j < C; j += 32 * V) {
			ldv<A, V>(x + j, xv);
			ldv<A, V>(dy + j, dv);
			gamma_at<V>(gamma, j, g);
			ldv<A, V>(dx + j, o);
			for (int k = 0; k < V; k++) {
				float nv = __fmul_rn(__fsub_rn(xv[k], m), r);
				float dn = __fmul_rn(dv[k], g[k]);

				o[k] = __fadd_rn(o[k], __fmul_rn(__fsub_rn(
				    __fsub_rn(dn, a), __fmul_rn(nv, b)), r));
			}
			stv<A, V>(dx + j, o);
		}
	}
}

/*
 * dgamma += sum over rows of dout n, dbeta += sum of dout, in double. A
 * block owns COLS columns; its RY row groups each take every RY-th row,
 * then the groups' sums meet in a fixed tree.
 */
template <int RY, typename A>
static __global__ void __launch_bounds__(COLS * RY)
ln_dparams_kernel(float *dgamma, float *dbeta, const A *dout,
    const A *inp, const float *mean, const float *rstd, int M, int C)
{
	__shared__ double sg[RY][COLS], sb[RY][COLS];
	int tx = threadIdx.x % COLS, ty = threadIdx.x / COLS;
	int chunks = (C + COLS - 1) / COLS;

	for (int ch = blockIdx.x; ch < chunks; ch += gridDim.x) {
		int j = ch * COLS + tx;
		double ag = 0.0, ab = 0.0;

		if (j < C)
			for (int i = ty; i < M; i += RY) {
				size_t at = (size_t)i * C + j;
				float dy = ld(dout[at]);

				ag += __fmul_rn(dy, __fmul_rn(__fsub_rn(
				    ld(inp[at]), mean[i]), rstd[i]));
				ab += dy;
			}
		sg[ty][tx] = ag;
		sb[ty][tx] = ab;
		__syncthreads();
		rows_sum<RY>(sg, tx, ty);
		rows_sum<RY>(sb, tx, ty);
		if (ty == 0 && j < C) {
			if (dgamma != NULL)
				dgamma[j] = __fadd_rn(dgamma[j],
				    (float)sg[0][tx]);
			if (dbeta != NULL)
				dbeta[j] = __fadd_rn(dbeta[j],
				    (float)sb[0][tx]);
		}
		/* row 0 is read before the next chunk overwrites it */
		__syncthreads();
	}
}

/* ------------------------------------------------------------------------ */
/* column sums: the bias gradient, dpos and dcls                            */

/*
 * out (N) += column sums of in (M rows, ld floats apart, N columns), in
 * double; out2 (n2) += the first n2 of them too. Either may be NULL. The
 * shape of ln_dparams_kernel.
 */
template <int RY, typename A>
static __global__ void __launch_bounds__(COLS * RY)
colsum_kernel(float *out, float *out2, long n2, const A *in, long M,
    long N, long lda)
{
	__shared__ double sh[RY][COLS];
	int tx = threadIdx.x % COLS, ty = threadIdx.x / COLS;
	long chunks = (N + COLS - 1) / COLS;

	for (long ch = blockIdx.x; ch < chunks; ch += gridDim.x) {
		long j = ch * COLS + tx;
		double acc = 0.0;

		if (j < N)
			for (long i = ty; i < M; i += RY)
				acc += ld(in[(size_t)i * lda + j]);
		sh[ty][tx] = acc;
		__syncthreads();
		rows_sum<RY>(sh, tx, ty);
		if (ty == 0 && j < N) {
			float v = (float)sh[0][tx];

			if (out != NULL)
				out[j] = __fadd_rn(out[j], v);
			if (out2 != NULL && j < n2)
				out2[j] = __fadd_rn(out2[j], v);
		}
		__syncthreads();
	}
}

/*
 * Column sums in parts: block (x, r) gives each of its threads one column
 * j (consecutive threads, consecutive columns: every row read is
 * coalesced) and sums rows [r rows, (r + 1) rows) of it in double into
 * part[r N + j]; with LN set, part2 gets the layer norm's dgamma term
 * dy (x - mean) rstd as ln_dparams_kernel has it, and in is dy. Then
 * colfin_kernel adds a column's parts in order.
 */
#define CS_NT	256

template <typename A, int LN>
static __global__ void __launch_bounds__(CS_NT)
colpart_kernel(double *part, double *part2, const A *in, const A *x,
    const float *mean, const float *rstd, long M, long N, long lda,
    long rows)
{
	long j = (long)blockIdx.x * CS_NT + threadIdx.x;
	long i0 = (long)blockIdx.y * rows, i1 = i0 + rows < M ? i0 + rows : M;
	double a = 0.0, g = 0.0;

	if (j >= N)
		return;
	for (long i = i0; i < i1; i++) {
		size_t at = (size_t)i * lda + j;
		float dy = ld(in[at]);

		if (LN)
			g += __fmul_rn(dy, __fmul_rn(__fsub_rn(ld(x[at]),
			    mean[i]), rstd[i]));
		a += dy;
	}
	part[(size_t)blockIdx.y * N + j] = a;
	if (LN)
		part2[(size_t)blockIdx.y * N + j] = g;
}

/*
 * out[j] += sum_r part[r N + j] (and out2 for j < n2); with part2,
 * out2[j] += sum_r part2[r N + j] for every j instead. Block (32, FIN_RG):
 * a thread per column and row group, group g adding the parts g, g +
 * FIN_RG, ... in order, then the groups in a fixed tree.
 */
#define FIN_RG	8

static __global__ void __launch_bounds__(32 * FIN_RG)
colfin_kernel(float *out, float *out2, long n2, const double *part,
    const double *part2, long R, long N)
{
	__shared__ double sa[FIN_RG][32], sg[FIN_RG][32];
	int tx = threadIdx.x, ty = threadIdx.y;
	long j = (long)blockIdx.x * 32 + tx;
	double a = 0.0, g = 0.0;

	if (j < N)
		for (long r = ty; r < R; r += FIN_RG) {
			a += part[(size_t)r * N + j];
			if (part2 != NULL)
				g += part2[(size_t)r * N + j];
		}
	sa[ty][tx] = a;
	sg[ty][tx] = g;
	__syncthreads();
	for (int h = FIN_RG / 2; h > 0; h >>= 1) {
		if (ty < h) {
			sa[ty][tx] += sa[ty + h][tx];
			sg[ty][tx] += sg[ty + h][tx];
		}
		__syncthreads();
	}
	if (ty != 0 || j >= N)
		return;
	a = sa[0][tx];
	g = sg[0][tx];
	if (out != NULL)
		out[j] = __fadd_rn(out[j], (float)a);
	if (part2 != NULL) {
		if (out2 != NULL)
			out2[j] = __fadd_rn(out2[j], (float)g);
	} else if (out2 != NULL && j < n2)
		out2[j] = __fadd_rn(out2[j], (float)a);
}

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
/* optimizer updates                                                        */

/* update.c's sgd_run, op for op */
static __global__ void
sgd_kernel(float *p, const float *g, float *buf, size_t n, float lr,
    float momentum, float wd, int decay, int mom, int nesterov)
{
	GRID_LOOP(i, n) {
		float d = g[i], b;

		if (decay)
			d = __fadd_rn(d, __fmul_rn(wd, p[i]));
		if (mom) {
			b = __fmul_rn(buf[i], momentum);
			b = __fadd_rn(b, d);
			buf[i] = b;
			d = nesterov ? __fadd_rn(d, __fmul_rn(momentum, b)) : b;
		}
		p[i] = __fadd_rn(p[i], __fmul_rn(-lr, d));
	}
}

/* update.c's AdamW loop, op for op; the scalars come from the host */
static __global__ void
adamw_kernel(float *p, const float *g, float *m, float *v, size_t n,
    float beta1, float beta2, float eps, float decay, float a1, float a2,
    float step, float bc2s)
{
	GRID_LOOP(i, n) {
		float gi = g[i], mi, vi, denom;

		mi = __fmul_rn(m[i], beta1);
		mi = __fadd_rn(mi, __fmul_rn(a1, gi));
		vi = __fmul_rn(v[i], beta2);
		vi = __fadd_rn(vi, __fmul_rn(__fmul_rn(a2, gi), gi));
		m[i] = mi;
		v[i] = vi;
		denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2s), eps);
		p[i] = __fadd_rn(__fmul_rn(p[i], decay),
		    __fdiv_rn(__fmul_rn(step, mi), denom));
	}
}

/* ------------------------------------------------------------------------ */
/* sum of squares                                                           */

/* part[blockIdx.x] = this block's share of sum x^2, in double */
static __global__ void __launch_bounds__(NT)
sumsq_part_kernel(double *part, const float *x, size_t n)
{
	__shared__ double sh[32];
	double s = 0.0;

	GRID_LOOP(i, n) {
		double v = x[i];

		s += v * v;
	}
	s = block_sum(s, sh);
	if (threadIdx.x == 0)
		part[blockIdx.x] = s;
}

/* part[0] = sum of part[0..nb): every read is done before the write */
static __global__ void __launch_bounds__(NT)
sumsq_final_kernel(double *part, int nb)
{
	__shared__ double sh[32];
	double s = 0.0;

	for (int i = threadIdx.x; i < nb; i += blockDim.x)
		s += part[i];
	s = block_sum(s, sh);
	if (threadIdx.x == 0)
		part[0] = s;
}

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

/* Blocks for a column sum over chunks of COLS columns. */
static unsigned
col_blocks_for(long N)
{
	long b = (N + COLS - 1) / COLS;

	return b > 65535L * 16 ? 65535u * 16 : (unsigned)b;
}

/*
 * The launchers' device workspace (the split reductions' partial sums):
 * one block from the stream-ordered pool, grown when a launch needs more
 * and freed on the stream, so its reuse is ordered after every kernel
 * that read it. NULL when the pool has no room: the caller falls back to
 * the one-block-per-output kernels, which need none.
 */
static void *ws;
static size_t ws_bytes;

static void *
workspace(size_t bytes, cudaStream_t st)
{
	if (bytes <= ws_bytes)
		return ws;
	if (ws != NULL)
		(void)cudaFreeAsync(ws, st);
	ws = NULL;
	ws_bytes = 0;
	if (cudaMallocAsync(&ws, bytes, st) != cudaSuccess) {
		(void)cudaGetLastError();	/* out of memory: not sticky */
		ws = NULL;
		return NULL;
	}
	ws_bytes = bytes;
	return ws;
}

extern "C" void *
cuk_workspace(size_t bytes, void *stream)
{
	return workspace(bytes, (cudaStream_t)stream);
}

/* The parts of a column sum of M rows and N columns: R parts of rows
 * rows each, enough blocks to fill the GPU and at least 16 rows a part. */
static void
col_parts(long M, long N, long *R, long *rows)
{
	long gx = (N + CS_NT - 1) / CS_NT, r = (1024 + gx - 1) / gx;
	long most = (M + 15) / 16;

	if (r > most)
		r = most;
	if (r > 65535)
		r = 65535;
	if (r < 1)
		r = 1;
	*rows = (M + r - 1) / r;
	*R = (M + *rows - 1) / *rows;
}

/* Row groups of a column sum: 128 when there are rows enough to keep
 * them busy, else 32. */
#define COLSUM_TALL	4096

static void
colsum(float *out, float *out2, long n2, const float *in, long M, long N,
    long ld, cudaStream_t st)
{
	long R, rows;
	double *part;

	if (M <= 0 || N <= 0 || (out == NULL && out2 == NULL))
		return;
	col_parts(M, N, &R, &rows);
	if ((part = (double *)workspace((size_t)R * N * sizeof(double),
	    st)) != NULL) {
		dim3 g((unsigned)((N + CS_NT - 1) / CS_NT), (unsigned)R);

		DISPATCH(colpart_kernel<A, 0><<<g, CS_NT, 0, st>>>(part, NULL,
		    (const A *)in, (const A *)NULL, NULL, NULL, M, N, ld,
		    rows));
		colfin_kernel<<<(unsigned)((N + 31) / 32), dim3(32, FIN_RG),
		    0, st>>>(out, out2, n2, part, NULL, R, N);
		return;
	}
	if (M >= COLSUM_TALL)
		DISPATCH(colsum_kernel<128, A><<<col_blocks_for(N), COLS * 128,
		    0, st>>>(out, out2, n2, (const A *)in, M, N, ld));
	else
		DISPATCH(colsum_kernel<32, A><<<col_blocks_for(N), COLS * 32,
		    0, st>>>(out, out2, n2, (const A *)in, M, N, ld));
}

/*
 * The parts of a batch norm channel: enough blocks in all (C S) to fill
 * the GPU a few times over, each part at least BN_NT * 8 values.
 */
static void
bn_split(int B, int C, int HW, int *S, size_t *chunk)
{
	size_t n = (size_t)B * HW, most = (n + BN_NT * 8 - 1) / (BN_NT * 8);
	size_t s = (2048 + (size_t)C - 1) / (size_t)C;

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
cuk_batchnorm_forward(int B, int C, int HW, float *out, const float *inp,
    const float *gamma, const float *beta, float *mean, float *rstd,
    float *run_mean, float *run_var, float momentum, float eps, int training,
    int update, const float *res, int relu, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	size_t n = (size_t)B * HW;
	unsigned gy, gx;

	/* an empty batch has no statistics: nothing to normalise or move */
	if (B <= 0 || C <= 0 || HW <= 0)
		return;
	if (training) {
		int S;
		size_t chunk;
		double *part;

		bn_split(B, C, HW, &S, &chunk);
		/* grid (S, C): C is gridDim.y, at most 65535 */
		part = C <= 65535 ? (double *)workspace((size_t)C * S * 2 *
		    sizeof(double), st) : NULL;
		if (part != NULL) {
			DISPATCH(bn_part_stats_kernel<A><<<dim3(S, C), BN_NT, 0,
			    st>>>(B, C, HW, (const A *)inp, part, S, chunk));
			DISPATCH(bn_fin_stats_kernel<A><<<(C + NT - 1) / NT, NT,
			    0, st>>>(B, C, HW, (const A *)inp, part, S, mean,
			    rstd, run_mean, run_var, momentum, eps, update));
		} else
			DISPATCH(bn_stats_kernel<A><<<C, BN_NT, 0, st>>>(B, C,
			    HW, (const A *)inp, mean, rstd, run_mean, run_var,
			    momentum, eps, update));
	}
	gy = C < 65535 ? (unsigned)C : 65535u;
	gx = blocks_for(n);
	if (gx > 2 * MAX_BLOCKS / gy)
		gx = 2 * MAX_BLOCKS / gy > 0 ? 2 * MAX_BLOCKS / gy : 1;
	DISPATCH(bn_apply_kernel<A><<<dim3(gx, gy), NT, 0, st>>>(B, C, HW,
	    (A *)out, (const A *)inp, gamma, beta, mean, rstd, run_mean,
	    run_var, eps, training, (const A *)res, relu));
}

extern "C" void
cuk_batchnorm_backward(int B, int C, int HW, float *dinp, float *dgamma,
    float *dbeta, const float *dout, const float *inp, const float *gamma,
    const float *mean, const float *rstd, float *dres, const float *out,
    int relu, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	size_t chunk;
	double *part;
	unsigned gy, gx;
	int S;

	if (B <= 0 || C <= 0 || HW <= 0)
		return;
	bn_split(B, C, HW, &S, &chunk);
	/* the partial sums, then the channels' three constants */
	part = C <= 65535 ? (double *)workspace((size_t)C * S * 2 *
	    sizeof(double) + (size_t)C * 3 * sizeof(float), st) : NULL;
	if (part == NULL) {
		DISPATCH(bn_backward_kernel<A><<<C, BN_NT, 0, st>>>(B, C, HW,
		    (A *)dinp, dgamma, dbeta, (const A *)dout, (const A *)inp,
		    gamma, mean, rstd, (A *)dres, (const A *)out, relu));
		return;
	}
	float *k3 = (float *)(part + (size_t)C * S * 2);

	DISPATCH(bn_part_bwd_kernel<A><<<dim3(S, C), BN_NT, 0, st>>>(B, C, HW,
	    (const A *)dout, (const A *)inp, (const A *)out, mean, relu, part,
	    S, chunk));
	bn_fin_bwd_kernel<<<(C + NT - 1) / NT, NT, 0, st>>>(B, C, HW, part, S,
	    gamma, rstd, dgamma, dbeta, k3);
	if (dinp == NULL && dres == NULL)
		return;
	gy = C < 65535 ? (unsigned)C : 65535u;
	gx = blocks_for((size_t)B * HW);
	if (gx > 2 * MAX_BLOCKS / gy)
		gx = 2 * MAX_BLOCKS / gy > 0 ? 2 * MAX_BLOCKS / gy : 1;
	DISPATCH(bn_apply_bwd_kernel<A><<<dim3(gx, gy), NT, 0, st>>>(B, C, HW,
	    (A *)dinp, (const A *)dout, (const A *)inp, mean, rstd, (A *)dres,
	    (const A *)out, relu, k3));
}

extern "C" void
cuk_relu_forward(float *out, const float *inp, size_t n, void *stream)
{
	if (n == 0)
		return;
	DISPATCH(relu_fwd_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>((A *)out, (const A *)inp, n));
}

extern "C" void
cuk_relu_backward(float *dinp, const float *dout, const float *out, size_t n,
    void *stream)
{
	if (n == 0 || dinp == NULL)
		return;
	DISPATCH(relu_bwd_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>((A *)dinp, (const A *)dout,
	    (const A *)out, n));
}

extern "C" void
cuk_add_forward(float *out, const float *a, const float *b, size_t n,
    void *stream)
{
	if (n == 0)
		return;
	ELT_LAUNCH(aligned16(out) && aligned16(a) && aligned16(b), n,
	    (cudaStream_t)stream, add_fwd_kernel, (A *)out, (const A *)a,
	    (const A *)b, n);
}

extern "C" void
cuk_add_backward(float *da, float *db, const float *dout, size_t n,
    void *stream)
{
	if (n == 0 || (da == NULL && db == NULL))
		return;
	ELT_LAUNCH(aligned16(da) && aligned16(db) && aligned16(dout), n,
	    (cudaStream_t)stream, add_bwd_kernel, (A *)da, (A *)db,
	    (const A *)dout, n);
}

extern "C" void
cuk_gelu_forward(float *out, const float *inp, size_t n, void *stream)
{
	if (n == 0)
		return;
	ELT_LAUNCH(aligned16(out) && aligned16(inp), n, (cudaStream_t)stream,
	    gelu_fwd_kernel, (A *)out, (const A *)inp, n);
}

extern "C" void
cuk_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n,
    void *stream)
{
	if (n == 0 || dinp == NULL)
		return;
	ELT_LAUNCH(aligned16(dinp) && aligned16(dout) && aligned16(inp), n,
	    (cudaStream_t)stream, gelu_bwd_kernel, (A *)dinp,
	    (const A *)dout, (const A *)inp, n);
}

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

extern "C" void
cuk_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
    const float *gamma, const float *beta, int M, int C, float eps,
    void *stream)
{
	if (M <= 0 || C <= 0)
		return;
	DISPATCH(ln_fwd_kernel<A><<<warp_blocks_for((size_t)M), NT, 0,
	    (cudaStream_t)stream>>>((A *)out, mean, rstd, (const A *)inp,
	    gamma, beta, M, C, eps));
}

extern "C" void
cuk_layernorm_backward(float *dinp, float *dgamma, float *dbeta,
    const float *dout, const float *inp, const float *gamma,
    const float *mean, const float *rstd, int M, int C, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;

	if (M <= 0 || C <= 0)
		return;
	if (dinp != NULL) {
		unsigned g = warp_blocks_for((size_t)M);

		if (C % 8 == 0 && aligned16(dinp) && aligned16(dout) &&
		    aligned16(inp) && aligned16(gamma))
			DISPATCH(ln_bwd_kernel<A, 16 / sizeof(A)><<<g, NT, 0,
			    st>>>((A *)dinp, (const A *)dout, (const A *)inp,
			    gamma, mean, rstd, M, C));
		else
			DISPATCH(ln_bwd_kernel<A, 1><<<g, NT, 0, st>>>(
			    (A *)dinp, (const A *)dout, (const A *)inp, gamma,
			    mean, rstd, M, C));
	}
	if (dgamma == NULL && dbeta == NULL)
		return;
	{
		long R, rows;
		double *part;

		col_parts(M, C, &R, &rows);
		part = (double *)workspace((size_t)R * C * 2 * sizeof(double),
		    st);
		if (part != NULL) {
			dim3 g((unsigned)((C + CS_NT - 1) / CS_NT), (unsigned)R);

			DISPATCH(colpart_kernel<A, 1><<<g, CS_NT, 0, st>>>(
			    part, part + (size_t)R * C, (const A *)dout,
			    (const A *)inp, mean, rstd, M, C, C, rows));
			colfin_kernel<<<(unsigned)((C + 31) / 32),
			    dim3(32, FIN_RG), 0, st>>>(dbeta, dgamma, 0, part,
			    part + (size_t)R * C, R, C);
			return;
		}
	}
	if (M >= COLSUM_TALL)
		DISPATCH(ln_dparams_kernel<128, A><<<col_blocks_for(C),
		    COLS * 128, 0, st>>>(dgamma, dbeta, (const A *)dout,
		    (const A *)inp, mean, rstd, M, C));
	else
		DISPATCH(ln_dparams_kernel<32, A><<<col_blocks_for(C),
		    COLS * 32, 0, st>>>(dgamma, dbeta, (const A *)dout,
		    (const A *)inp, mean, rstd, M, C));
}

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
	colsum(dpos, dcls, C, dout, B, dpos != NULL ? ld : C, ld, st);
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

extern "C" void
cuk_sgd_step(float *p, const float *g, float *buf, size_t n, float lr,
    float momentum, float wd, int nesterov, void *stream)
{
	if (n == 0)
		return;
	sgd_kernel<<<blocks_for(n), NT, 0, (cudaStream_t)stream>>>(p, g, buf,
	    n, lr, momentum, wd, wd != 0.0f, momentum != 0.0f, nesterov);
}

/* The scalars as update.c computes them: in double, rounded to float. */
extern "C" void
cuk_adamw_step(float *p, const float *g, float *m, float *v, size_t n,
    float lr, float beta1, float beta2, float eps, float wd, int t,
    void *stream)
{
	double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
	float decay = (float)(1.0 - (double)lr * wd);
	float a1 = (float)(1.0 - beta1), a2 = (float)(1.0 - beta2);
	float step = (float)(-(double)lr / bc1);
	float bc2s = (float)sqrt(bc2);

	if (n == 0)
		return;
	adamw_kernel<<<blocks_for(n), NT, 0, (cudaStream_t)stream>>>(p, g, m,
	    v, n, beta1, beta2, eps, decay, a1, a2, step, bc2s);
}

extern "C" void
cuk_scale(float *x, size_t n, float s, void *stream)
{
	if (n == 0)
		return;
	scale_kernel<<<blocks_for(n), NT, 0, (cudaStream_t)stream>>>(x, n, s);
}

/*
 * The grid depends on n alone (at most CUK_SUMSQ_SCRATCH blocks, each at
 * least 8 floats a thread), and both stages add in a fixed tree, so the
 * result is the same on every run.
 */
extern "C" double
cuk_sumsq(const float *x, size_t n, double *dev_scratch, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	size_t nb = (n + NT * 8 - 1) / (NT * 8);
	double sum = 0.0;

	if (n == 0) {
		/* nothing queued, but the caller may count on the sync */
		return cudaStreamSynchronize(st) == cudaSuccess ? 0.0 : NAN;
	}
	if (nb > CUK_SUMSQ_SCRATCH)
		nb = CUK_SUMSQ_SCRATCH;
	sumsq_part_kernel<<<(unsigned)nb, NT, 0, st>>>(dev_scratch, x, n);
	sumsq_final_kernel<<<1, NT, 0, st>>>(dev_scratch, (int)nb);
	if (cudaMemcpyAsync(&sum, dev_scratch, sizeof sum,
	    cudaMemcpyDeviceToHost, st) != cudaSuccess)
		return NAN;
	if (cudaStreamSynchronize(st) != cudaSuccess)
		return NAN;
	return sum;
}

extern "C" void
cuk_bias_grad(float *dbias, const float *dout, int M, int N, void *stream)
{
	colsum(dbias, NULL, 0, dout, M, N, N, (cudaStream_t)stream);
}

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
cuk_bias_add(float *out, const float *bias, int M, int N, void *stream)
{
	size_t n = (size_t)M * N;

	if (M <= 0 || N <= 0)
		return;
	DISPATCH(bias_add_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>((A *)out, bias, n, N));
}

extern "C" void
cuk_bias_add_nchw(float *out, const float *bias, int B, int K, int PQ,
    void *stream)
{
	size_t n = (size_t)B * K * PQ;

	if (n == 0)
		return;
	DISPATCH(bias_add_nchw_kernel<A><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>((A *)out, bias, n, K, (size_t)PQ));
}

extern "C" void
cuk_bias_grad_nchw(float *dbias, const float *dout, int B, int K, int PQ,
    void *stream)
{
	if (B <= 0 || K <= 0 || PQ <= 0)
		return;
	DISPATCH(bias_grad_nchw_kernel<A><<<K, NT, 0, (cudaStream_t)stream>>>(
	    dbias, (const A *)dout, B, K, (size_t)PQ));
}

extern "C" void
cuk_input_from_f32(float *dst, const float *x, size_t n, void *stream)
{
	if (n == 0)
		return;
	DISPATCH(convert_kernel<A, float><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>((A *)dst, x, n));
}

extern "C" void
cuk_to_bf16(void *dst, const float *src, size_t n, void *stream)
{
	if (n == 0)
		return;
	convert_kernel<bf16, float><<<blocks_for(n), NT, 0,
	    (cudaStream_t)stream>>>((bf16 *)dst, src, n);
}

extern "C" void
cuk_round_bf16(float *dst, const float *src, size_t n, void *stream)
{
	if (n == 0)
		return;
	round_bf16_kernel<<<blocks_for(n), NT, 0, (cudaStream_t)stream>>>(dst,
	    src, n);
}

extern "C" void
cuk_acc_bf16(float *dst, const void *src, size_t n, void *stream)
{
	if (n == 0)
		return;
	acc_bf16_kernel<<<blocks_for(n), NT, 0, (cudaStream_t)stream>>>(dst,
	    (const bf16 *)src, n);
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
