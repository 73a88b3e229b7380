/*
 * common.cuh - what the CUDA backend's kernel files (the families of
 * kernels.h, attention.cu, nhwc.cu) share: the activations' storage type
 * and its loads and stores, the launch shapes, the grid-stride loop, the
 * fixed-order warp and block reductions, and the column sum of norm.cu.
 * Included by .cu files only.
 */
#ifndef SK_TRAIN_CUDA_COMMON_CUH
#define SK_TRAIN_CUDA_COMMON_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels.h"

/*
 * Activations (and their gradients) are float or __nv_bfloat16, by the
 * backend's precision (cuk_set_bf16): the kernels that read or write them
 * are templates over that storage type A, and do their arithmetic in
 * float (or double) whatever A is. Loads go through ld(), stores through
 * st(), which rounds to nearest even.
 */
typedef __nv_bfloat16 bf16;

/* set once by cuk_set_bf16, before any launch (kernels.cu) */
extern int cuk_act_bf16;

static __device__ __forceinline__ float
ld(float v)
{
	return v;
}

static __device__ __forceinline__ float
ld(bf16 v)
{
	return __bfloat162float(v);
}

static __device__ __forceinline__ void
st(float *p, float v)
{
	*p = v;
}

static __device__ __forceinline__ void
st(bf16 *p, float v)
{
	*p = __float2bfloat16_rn(v);
}

/*
 * V consecutive activations at once: one 16-byte load or store when V
 * sizeof(A) is 16 (8 bf16, 4 floats) and p is aligned to it, as the
 * callers check; V 1 is a plain element.
 */
template <typename A, int V>
struct __align__(sizeof(A) * V) vec {
	A v[V];
};

template <typename A, int V>
static __device__ __forceinline__ void
ldv(const A *p, float *f)
{
	vec<A, V> t = *(const vec<A, V> *)p;

	for (int k = 0; k < V; k++)
		f[k] = ld(t.v[k]);
}

template <typename A, int V>
static __device__ __forceinline__ void
stv(A *p, const float *f)
{
	vec<A, V> t;

	for (int k = 0; k < V; k++)
		st(&t.v[k], f[k]);
	*(vec<A, V> *)p = t;
}

/* Run the statement with A the activations' storage type. */
#define DISPATCH(...) do {						\
	if (cuk_act_bf16) {							\
		typedef bf16 A;						\
		__VA_ARGS__;						\
	} else {							\
		typedef float A;					\
		__VA_ARGS__;						\
	}								\
} while (0)

/* Threads of an elementwise block; at most MAX_BLOCKS blocks, each thread
 * looping over the rest (a grid-stride loop). */
#define NT		256
#define MAX_BLOCKS	8192

/* Threads of a batch norm channel's block: one block reduces a whole
 * channel, so it gets many loads in flight. */
#define BN_NT		512

/* Columns one block sums over the rows (bias, dgamma, dpos): 8 floats is
 * one 32-byte sector of a row, so even a narrow matrix gets many blocks. */
#define COLS		8

/* Warps of a block whose warps each own a row (softmax, layer norm,
 * average pooling). */
#define WARPS		(NT / 32)

#define GRID_LOOP(i, n)							\
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;	\
	    i < (n); i += (size_t)gridDim.x * blockDim.x)

/* The warp of this thread and the number of warps in the grid. */
#define WARP_ID()	(((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5)
#define WARP_COUNT()	(((size_t)gridDim.x * blockDim.x) >> 5)

/* 1/sqrt(2) and 1/sqrt(2 pi) as eltwise.c rounds them */
#define GELU_S		((float)0.70710678118654752440)
#define GELU_K		((float)(0.5 * 1.12837916709551257390 *	\
			    0.70710678118654752440))

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */

/* a / d, and a % d in *r: a 32-bit division when both fit, as they nearly
 * always do, since the 64-bit one is a long software routine. */
static __device__ __forceinline__ size_t
divmod(size_t a, size_t d, size_t *r)
{
	size_t q = ((a | d) >> 32) == 0 ? (size_t)((unsigned)a /
	    (unsigned)d) : a / d;

	*r = a - q * d;
	return q;
}

/* Sum over a warp. The butterfly adds the same two values on both lanes
 * of each pair, so every lane ends with the same bits. */
template <typename T>
static __device__ __forceinline__ T
warp_sum(T v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* The larger of a and b, a when either is NaN: the same both ways round
 * only where no value is NaN unless all are, as at the callers. */
static __device__ __forceinline__ float
max_of(float a, float b)
{
	return b > a ? b : a;
}

static __device__ __forceinline__ float
warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = max_of(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/*
 * Sum over the block (blockDim.x a multiple of 32), returned to every
 * thread: each warp adds the warps' sums itself, all in the same order.
 * sh holds 32 values; it may be used again as soon as this returns.
 */
static __device__ double
block_sum(double v, double *sh)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int nw = blockDim.x >> 5;

	v = warp_sum(v);
	if (lane == 0)
		sh[w] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : 0.0;
	v = warp_sum(v);
	__syncthreads();
	return v;
}

/* The same for the maximum; the empty lanes repeat warp 0's value. */
static __device__ float
block_max(float v, float *sh)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int nw = blockDim.x >> 5;

	v = warp_max(v);
	if (lane == 0)
		sh[w] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : sh[0];
	v = warp_max(v);
	__syncthreads();
	return v;
}

/* Whether p may be read and written 16 bytes at a time (NULL may). */
static inline int
aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

/* Blocks of NT threads for n items, at most MAX_BLOCKS; n > 0. */
static inline unsigned
blocks_for(size_t n)
{
	size_t b = (n + NT - 1) / NT;

	return b > MAX_BLOCKS ? MAX_BLOCKS : (unsigned)b;
}

/* Blocks of WARPS warps for rows rows, a warp a row; rows > 0. */
static inline unsigned
warp_blocks_for(size_t rows)
{
	size_t b = (rows + WARPS - 1) / WARPS;

	return b > MAX_BLOCKS ? MAX_BLOCKS : (unsigned)b;
}

/*
 * out (N) += column sums of in (M rows, lda floats apart, N columns), in
 * double and a fixed order, and out2 (n2) += the first n2 of them; either
 * may be NULL. Queued on st, with the launchers' workspace when it can
 * have it (norm.cu: the bias gradient; vit.cu: dcls and dpos).
 */
void cuk_colsum(float *out, float *out2, long n2, const float *in, long M,
    long N, long lda, cudaStream_t st);

#endif /* SK_TRAIN_CUDA_COMMON_CUH */
