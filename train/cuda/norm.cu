/*
 * norm.cu - batch norm over (B,C,HW) and layer norm over the rows of
 * (M,C), and the column sums that layer norm's dgamma and dbeta share with
 * the bias gradient and the ViT's dcls and dpos (cuk_colsum, common.cuh).
 * Launchers at the end, declared in kernels.h; kernels.cu has the rules
 * they all keep (fixed-order sums, the _rn intrinsics).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels.h"
#include "common.cuh"

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
/* launchers                                                                */

/* Blocks for a column sum over chunks of COLS columns. */
static unsigned
col_blocks_for(long N)
{
	long b = (N + COLS - 1) / COLS;

	return b > 65535L * 16 ? 65535u * 16 : (unsigned)b;
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

void
cuk_colsum(float *out, float *out2, long n2, const float *in, long M, long N,
    long ld, cudaStream_t st)
{
	long R, rows;
	double *part;

	if (M <= 0 || N <= 0 || (out == NULL && out2 == NULL))
		return;
	col_parts(M, N, &R, &rows);
	if ((part = (double *)cuk_workspace((size_t)R * N * sizeof(double),
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
		part = C <= 65535 ? (double *)cuk_workspace((size_t)C * S * 2 *
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
	part = C <= 65535 ? (double *)cuk_workspace((size_t)C * S * 2 *
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
		part = (double *)cuk_workspace((size_t)R * C * 2 *
		    sizeof(double), st);
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
cuk_bias_grad(float *dbias, const float *dout, int M, int N, void *stream)
{
	cuk_colsum(dbias, NULL, 0, dout, M, N, N, (cudaStream_t)stream);
}
