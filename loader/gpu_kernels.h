/*
 * gpu_kernels.h - the launchers of the loader's CUDA kernels
 * (loader/gpu_kernels.cu), callable from C. Only built with CUDA.
 */
#ifndef SK_GPU_KERNELS_H
#define SK_GPU_KERNELS_H

#include <cuda_runtime.h>

#include "shardkit.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Convert n images on stream:
 *   inp (n,S,S,3) uint8 -> out (n,S,S,3) or (n,3,S,S) of dtype,
 * each float value ((float)v / 255 - mean[c]) / std[c], rounded once, in
 * the order the CPU path computes it, so f32 results are bit-identical and
 * bf16/f16 ones (round to nearest even) match too. A u8 output is the
 * layout change alone. Returns the launch status (cudaGetLastError).
 */
cudaError_t sk__gpu_convert_launch(void *out, const void *inp, int n,
    int size, enum sk_dtype dtype, enum sk_layout layout,
    const float mean[3], const float std[3], cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* SK_GPU_KERNELS_H */
