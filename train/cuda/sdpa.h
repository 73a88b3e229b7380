/*
 * sdpa.h - flash attention for the bf16 path: cuDNN's fused scaled
 * dot-product attention (its graph API, through NVIDIA's header-only
 * cudnn-frontend, in sdpa.cu, the backend's one C++ unit). Forward and
 * backward read q, k and v where the model keeps them, in the token-major
 * (B,T,3C) rows, and write their results token-major too, so no head-major
 * copies are made; the (T,T) probabilities are never stored: the backward
 * recomputes them from the forward's softmax statistics.
 *
 * Each call plans its graph once per shape (and determinism) and keeps
 * the plan. A shape cuDNN does not support, or a build without the
 * frontend, returns -1 and the caller takes the math path (cuda.c); the
 * first refusal is said once on stderr with cuDNN's reason.
 */
#ifndef SK_TRAIN_CUDA_SDPA_H
#define SK_TRAIN_CUDA_SDPA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * out (B,T,C) bf16 = softmax(q k^T scale) v for each of the NH heads of
 * qkv (B,T,3C) bf16 (q, k, v at columns 0, C, 2C; head h at h C/NH),
 * and stats (B,NH,T) floats the softmax's log-sum-exp per query row, for
 * the backward. handle is the cudnnHandle_t, already on stream. The
 * backward's plan (for deterministic) is built here too, so that a shape
 * runs fused both ways or not at all. 0, or -1 when not supported
 * (nothing written: the caller's unfused attention runs, and the
 * backward of that shape will return -1 too).
 */
int cusdpa_forward(void *handle, void *stream, void *out, float *stats,
    const void *qkv, int B, int T, int C, int NH, float scale,
    int deterministic);

/*
 * dqkv (B,T,3C) bf16 = the gradients of q, k and v (overwritten, not
 * added) from dout (B,T,C) bf16, the forward's out and stats. With
 * deterministic set, cuDNN's deterministic backward (no atomic adds in
 * dq). 0; -1 when the shape is not supported (its forward was not fused
 * either); -2 when cuDNN failed to run it after its forward ran fused.
 */
int cusdpa_backward(void *handle, void *stream, void *dqkv,
    const void *dout, const void *qkv, const void *out, const float *stats,
    int B, int T, int C, int NH, float scale, int deterministic);

#ifdef __cplusplus
}
#endif

#endif /* SK_TRAIN_CUDA_SDPA_H */
