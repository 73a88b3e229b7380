/*
 * nhwc.h - the launchers of train/cuda/nhwc.cu: the passes that see a 4-D
 * activation, for the bf16 path's channels-last storage. With it, every
 * activation the model calls (B,C,H,W) is stored (B,H,W,C): element
 * (b,c,h,w) at ((b H + h) W + w) C + c, cuDNN's fast layout for its
 * tensor-core convolutions. The layout is the CUDA backend's private
 * affair (cuda.c picks it): the model and the CPU oracle see NCHW, and only
 * losses and parameter gradients are ever compared across backends.
 *
 * Each cuk_nhwc_<op> has the contract of kernels.h's cuk_<op> (and of the
 * slot <op> of backend.h), the same arithmetic and the same bits on every
 * run, with its 4-D activations (and max-pool indices) channels-last.
 * What is not 4-D keeps its layout: avgpool's out (B,C), patchify's
 * out (B,T,C p p), parameters and their gradients, statistics.
 */
#ifndef SK_TRAIN_CUDA_NHWC_H
#define SK_TRAIN_CUDA_NHWC_H

#include <stddef.h>
#include <stdint.h>

#include "../backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst (B,H,W,C activation elements) = x (B,C,H,W floats, the loader's
 * NCHW), HW = H W: the image into the model */
void cuk_nhwc_input_from_f32(float *dst, const float *x, int B, int C,
    int HW, void *stream);

/* dst (K,R,S,C bf16) = w (K,C,R,S floats) rounded to nearest even, RS =
 * R S: the weights of a convolution whose filter descriptor is NHWC */
void cuk_nhwc_weight_to_bf16(void *dst, const float *w, int K, int C,
    int RS, void *stream);
/* dw (K,C,R,S floats) += g (K,R,S,C bf16): cuDNN's bf16 weight gradient
 * into the fp32 one */
void cuk_nhwc_acc_weight_grad(float *dw, const void *g, int K, int C,
    int RS, void *stream);

/* ---- batch norm over (B,HW,C) ---- */
void cuk_nhwc_batchnorm_forward(int B, int C, int HW, float *out,
    const float *inp, const float *gamma, const float *beta, float *mean,
    float *rstd, float *run_mean, float *run_var, float momentum, float eps,
    int training, int update, const float *res, int relu, void *stream);
void cuk_nhwc_batchnorm_backward(int B, int C, int HW, float *dinp,
    float *dgamma, float *dbeta, const float *dout, const float *inp,
    const float *gamma, const float *mean, const float *rstd, float *dres,
    const float *out, int relu, void *stream);

/* ---- pooling ---- */
/* inp (B,H,W,C) -> out, idx (B,P,Q,C); idx is still the offset h W + w
 * within the (H,W) plane */
void cuk_nhwc_maxpool_forward(const struct pool_shape *s, float *out,
    int32_t *idx, const float *inp, void *stream);
void cuk_nhwc_maxpool_backward(const struct pool_shape *s, float *dinp,
    const float *dout, const int32_t *idx, void *stream);
/* inp (B,HW,C) -> out (B,C) */
void cuk_nhwc_avgpool_forward(int B, int C, int HW, float *out,
    const float *inp, void *stream);
/* dinp (B,HW,C) += dout (B,C) / HW */
void cuk_nhwc_avgpool_backward(int B, int C, int HW, float *dinp,
    const float *dout, void *stream);

/* ---- ViT embedding: img (B,H,W,C) <-> out (B,T,C p p) ---- */
void cuk_nhwc_patchify_forward(float *out, const float *img, int B, int C,
    int H, int W, int p, void *stream);
void cuk_nhwc_patchify_backward(float *dimg, const float *dout, int B,
    int C, int H, int W, int p, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* SK_TRAIN_CUDA_NHWC_H */
