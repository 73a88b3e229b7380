/*
 * kernels.cu - what the CUDA backend's kernel files share at run time: the
 * activations' storage (cuk_set_bf16) and the launchers' device workspace
 * (cuk_workspace). The kernels are one file per family, their launchers
 * declared in kernels.h: norm.cu (batch and layer norm, column sums),
 * eltwise.cu (elementwise, biases, casts), pool.cu, vit.cu (the ViT's
 * embedding), loss.cu, optim.cu (optimizer updates, sum of squares) and
 * softmax.cu (attention's softmax). Each kernel follows its CPU twin in
 * train/cpu/ (the oracle) and the contract in backend.h.
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
#include <stddef.h>

#include <cuda_runtime.h>

#include "kernels.h"
#include "common.cuh"

/* ------------------------------------------------------------------------ */
/* the activations' storage                                                 */

int cuk_act_bf16;

extern "C" void
cuk_set_bf16(int on)
{
	cuk_act_bf16 = on != 0;
}

/* ------------------------------------------------------------------------ */
/* the launchers' workspace                                                 */

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
