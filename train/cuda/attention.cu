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

/* dst (parts,B,NH,T,hd) = src (B,T,parts C): consecutive threads read and
 * write consecutive d, hd elements at a time */
static __global__ void
heads_split_kernel(bf16 *dst, const bf16 *src, size_t n, int B, int T,
    int NH, int hd, int parts)
{
	GRID_LOOP(o, n)
		dst[o] = src[token_major(o, B, T, NH, hd, parts)];
}

/* dst (B,T,parts C) (+)= src (parts,B,NH,T,hd), rounded to bf16 */
static __global__ void
heads_merge_kernel(bf16 *dst, const bf16 *src, size_t n, int B, int T,
    int NH, int hd, int parts, int acc)
{
	GRID_LOOP(o, n) {
		size_t at = token_major(o, B, T, NH, hd, parts);

		if (acc)
			st(&dst[at], __fadd_rn(ld(dst[at]), ld(src[o])));
		else
			dst[at] = src[o];
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
	heads_split_kernel<<<blocks_for(n), NT, 0, (cudaStream_t)stream>>>(
	    (bf16 *)dst, (const bf16 *)src, n, B, T, NH, C / NH, parts);
}

extern "C" void
cuk_heads_merge(void *dst, const void *src, int B, int T, int C, int NH,
    int parts, int acc, void *stream)
{
	size_t n = (size_t)parts * B * T * C;

	if (n == 0 || NH <= 0 || C % NH != 0)
		return;
	heads_merge_kernel<<<blocks_for(n), NT, 0, (cudaStream_t)stream>>>(
	    (bf16 *)dst, (const bf16 *)src, n, B, T, NH, C / NH, parts, acc);
}
