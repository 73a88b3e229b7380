/*
 * eltwise.cu - the elementwise passes (ReLU, add, GELU), the biases (a
 * GEMM's and a convolution's, and the latter's gradient) and the casts
 * between fp32 and bf16. Launchers at the end, declared in kernels.h.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels.h"
#include "common.cuh"

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

/* ------------------------------------------------------------------------ */
/* biases                                                                   */

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

/* ------------------------------------------------------------------------ */
/* casts                                                                    */

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
/* launchers                                                                */

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
