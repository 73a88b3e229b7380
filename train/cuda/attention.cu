/*
 * attention.cu - the bf16 attention's layout kernels: q, k, v (and out)
 * between the model's token-major (B,T,parts C) rows and head-major
 * (parts,B,NH,T,hd) blocks, so that each of attention's products is one
 * strided-batched GEMM over all B NH heads (cuda.c) rather than a launch
 * per head: at ViT-L's T = 197 and hd = 64 one head's product is too
 * small to cover its launch. Launchers at the end, declared in
 * attention.h.
 */
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "attention.h"
#include "kernels.h"
#include "common.cuh"

/*
 * Element o of the head-major (parts,B,NH,T,hd) tensor: its offset in the
 * token-major (B,T,parts C) one, C = NH hd, column s C + h hd + d.
 */
static __device__ __forceinline__ size_t
token_major(size_t o, int B, int T, int NH, int hd, int parts)
{
	size_t d, t, h, b, s, r, C = (size_t)NH * hd;

	r = divmod(o, (size_t)hd, &d);
	r = divmod(r, (size_t)T, &t);
	r = divmod(r, (size_t)NH, &h);
	s = divmod(r, (size_t)B, &b);
	return (b * T + t) * (parts * C) + s * C + h * hd + d;
}

/* dst (parts,B,NH,T,hd) = src (B,T,parts C), V consecutive d (of one
 * head's row) a thread: nv = n / V */
template <int V>
static __global__ void
heads_split_kernel(bf16 *dst, const bf16 *src, size_t nv, int B, int T,
    int NH, int hd, int parts)
{
	GRID_LOOP(q, nv) {
		size_t o = q * V;

		*(vec<bf16, V> *)(dst + o) = *(const vec<bf16, V> *)(src +
		    token_major(o, B, T, NH, hd, parts));
	}
}

/* dst (B,T,parts C) (+)= src (parts,B,NH,T,hd), rounded to bf16 */
template <int V>
static __global__ void
heads_merge_kernel(bf16 *dst, const bf16 *src, size_t nv, int B, int T,
    int NH, int hd, int parts, int acc)
{
	GRID_LOOP(q, nv) {
		size_t o = q * V;
		size_t at = token_major(o, B, T, NH, hd, parts);
		float a[V], b[V];

		if (acc) {
			ldv<bf16, V>(dst + at, a);
			ldv<bf16, V>(src + o, b);
			for (int k = 0; k < V; k++)
				a[k] = __fadd_rn(a[k], b[k]);
			stv<bf16, V>(dst + at, a);
		} else
			*(vec<bf16, V> *)(dst + at) =
			    *(const vec<bf16, V> *)(src + o);
	}
}

/* ------------------------------------------------------------------------ */
/* launchers                                                                */

extern "C" void
cuk_heads_split(void *dst, const void *src, int B, int T, int C, int NH,
    int parts, void *stream)
{
	size_t n = (size_t)parts * B * T * C;

	if (n == 0 || NH <= 0 || C % NH != 0)
		return;
	if ((C / NH) % 8 == 0 && aligned16(dst) && aligned16(src))
		heads_split_kernel<8><<<blocks_for(n / 8), NT, 0,
		    (cudaStream_t)stream>>>((bf16 *)dst, (const bf16 *)src,
		    n / 8, B, T, NH, C / NH, parts);
	else
		heads_split_kernel<1><<<blocks_for(n), NT, 0,
		    (cudaStream_t)stream>>>((bf16 *)dst, (const bf16 *)src, n,
		    B, T, NH, C / NH, parts);
}

extern "C" void
cuk_heads_merge(void *dst, const void *src, int B, int T, int C, int NH,
    int parts, int acc, void *stream)
{
	size_t n = (size_t)parts * B * T * C;

	if (n == 0 || NH <= 0 || C % NH != 0)
		return;
	if ((C / NH) % 8 == 0 && aligned16(dst) && aligned16(src))
		heads_merge_kernel<8><<<blocks_for(n / 8), NT, 0,
		    (cudaStream_t)stream>>>((bf16 *)dst, (const bf16 *)src,
		    n / 8, B, T, NH, C / NH, parts, acc);
	else
		heads_merge_kernel<1><<<blocks_for(n), NT, 0,
		    (cudaStream_t)stream>>>((bf16 *)dst, (const bf16 *)src, n,
		    B, T, NH, C / NH, parts, acc);
}
