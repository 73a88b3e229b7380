/*
 * kernels.h - the launchers of the CUDA backend's own kernels (one .cu
 * file per family in train/cuda/, listed in kernels.cu), callable from C.
 * cuda.c fills the backend table with them; GEMMs, attention's batched
 * GEMMs and convolutions are cuBLASLt and cuDNN calls in cuda.c itself.
 *
 * Every pointer is a device pointer except the shapes (struct pool_shape),
 * which are read on the host. stream is a cudaStream_t (NULL: the legacy
 * default stream). A launcher only queues work: it returns before the
 * kernels run, synchronizes nothing (cuk_sumsq excepted) and launches
 * nothing for an empty tensor. Launch errors are left for the caller's
 * cudaGetLastError(). Results are the same bits on every run: no float
 * atomics, every reduction in a fixed order that depends on the shape
 * alone.
 *
 * cuk_<op> takes the arguments of the slot <op> of struct backend, plus
 * the stream, and has that slot's contract (backend.h), the CPU backend's
 * semantics included (train/cpu/).
 */
#ifndef SK_TRAIN_CUDA_KERNELS_H
#define SK_TRAIN_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "../backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The activations' storage: float, or bf16 once cuk_set_bf16(1) was
 * called (the backend's act_elt 2). Every launcher below reads and writes
 * activations and their gradients in that type, and everything else
 * (parameters and their gradients, statistics, probs, losses, indices) in
 * fp32. Call it once, before the first launch.
 */
void cuk_set_bf16(int on);

/* Doubles of device scratch cuk_sumsq needs: one per block of its grid. */
#define CUK_SUMSQ_SCRATCH	1024

/* ---- batch norm over (B,C,HW) ---- */
/* backend.h batchnorm_forward; nothing is launched when B*HW or C is 0 */
void cuk_batchnorm_forward(int B, int C, int HW, float *out,
    const float *inp, const float *gamma, const float *beta, float *mean,
    float *rstd, float *run_mean, float *run_var, float momentum, float eps,
    int training, int update, const float *res, int relu, void *stream);
/* backend.h batchnorm_backward; dinp, dgamma, dbeta, dres may be NULL */
void cuk_batchnorm_backward(int B, int C, int HW, float *dinp,
    float *dgamma, float *dbeta, const float *dout, const float *inp,
    const float *gamma, const float *mean, const float *rstd, float *dres,
    const float *out, int relu, void *stream);

/* ---- elementwise ---- */
/* backend.h relu_forward: out = max(inp, 0), NaN passes */
void cuk_relu_forward(float *out, const float *inp, size_t n, void *stream);
/* backend.h relu_backward: dinp += out > 0 ? dout : +0 */
void cuk_relu_backward(float *dinp, const float *dout, const float *out,
    size_t n, void *stream);
/* backend.h add_forward: out = a + b */
void cuk_add_forward(float *out, const float *a, const float *b, size_t n,
    void *stream);
/* backend.h add_backward: da += dout, db += dout, either NULL */
void cuk_add_backward(float *da, float *db, const float *dout, size_t n,
    void *stream);
/* backend.h gelu_forward: x/2 (1 + erf(x/sqrt 2)), erff on the device */
void cuk_gelu_forward(float *out, const float *inp, size_t n, void *stream);
/* backend.h gelu_backward: dinp += dout (Phi(x) + x phi(x)) */
void cuk_gelu_backward(float *dinp, const float *dout, const float *inp,
    size_t n, void *stream);

/* ---- pooling ---- */
/* backend.h maxpool_forward; s is a host pointer */
void cuk_maxpool_forward(const struct pool_shape *s, float *out,
    int32_t *idx, const float *inp, void *stream);
/* backend.h maxpool_backward; s is a host pointer, idx from the forward */
void cuk_maxpool_backward(const struct pool_shape *s, float *dinp,
    const float *dout, const int32_t *idx, void *stream);
/* backend.h avgpool_forward: out (B,C) = mean of inp (B,C,HW) */
void cuk_avgpool_forward(int B, int C, int HW, float *out, const float *inp,
    void *stream);
/* backend.h avgpool_backward: dinp (B,C,HW) += dout (B,C) / HW */
void cuk_avgpool_backward(int B, int C, int HW, float *dinp,
    const float *dout, void *stream);

/* ---- layer norm over the last dimension C of (M,C) ---- */
/* backend.h layernorm_forward; gamma, beta may be NULL (1 and 0) */
void cuk_layernorm_forward(float *out, float *mean, float *rstd,
    const float *inp, const float *gamma, const float *beta, int M, int C,
    float eps, void *stream);
/* backend.h layernorm_backward; dinp, dgamma, dbeta may be NULL */
void cuk_layernorm_backward(float *dinp, float *dgamma, float *dbeta,
    const float *dout, const float *inp, const float *gamma,
    const float *mean, const float *rstd, int M, int C, void *stream);

/* ---- ViT embedding ---- */
/* backend.h patchify_forward: img (B,C,H,W) -> out (B,T,C p p) */
void cuk_patchify_forward(float *out, const float *img, int B, int C, int H,
    int W, int p, void *stream);
/* backend.h patchify_backward: dimg (B,C,H,W) += dout (B,T,C p p) */
void cuk_patchify_backward(float *dimg, const float *dout, int B, int C,
    int H, int W, int p, void *stream);
/* backend.h tokens_forward: out (B,T+1,C) = [cls; x] + pos */
void cuk_tokens_forward(float *out, const float *x, const float *cls,
    const float *pos, int B, int T, int C, void *stream);
/* backend.h tokens_backward: dx (or NULL), dcls, dpos (or NULL) += */
void cuk_tokens_backward(float *dx, float *dcls, float *dpos,
    const float *dout, int B, int T, int C, void *stream);
/* backend.h token0_forward: out (B,C) = inp (B,T,C) row 0 */
void cuk_token0_forward(float *out, const float *inp, int B, int T, int C,
    void *stream);
/* backend.h token0_backward: dinp (B,T,C) row 0 += dout (B,C) */
void cuk_token0_backward(float *dinp, const float *dout, int B, int T,
    int C, void *stream);

/* ---- loss ---- */
/* backend.h xent_forward; a label outside [0,K) gives loss 0 */
void cuk_xent_forward(float *losses, float *probs, const float *logits,
    const int32_t *labels, int B, int K, float smoothing, void *stream);
/* backend.h xent_backward; a label outside [0,K) gives no gradient */
void cuk_xent_backward(float *dlogits, const float *probs,
    const int32_t *labels, int B, int K, float smoothing, float scale,
    void *stream);

/* ---- optimizer updates ---- */
/* backend.h sgd_step; buf may be NULL when momentum is 0 */
void cuk_sgd_step(float *p, const float *g, float *buf, size_t n, float lr,
    float momentum, float wd, int nesterov, void *stream);
/* backend.h adamw_step; the bias corrections are computed on the host */
void cuk_adamw_step(float *p, const float *g, float *m, float *v, size_t n,
    float lr, float beta1, float beta2, float eps, float wd, int t,
    void *stream);
/* backend.h scale: x *= s */
void cuk_scale(float *x, size_t n, float s, void *stream);

/* ---- helpers for cuda.c ---- */
/* Sum of squares of x (n) in double, fixed grid and tree; dev_scratch holds
 * CUK_SUMSQ_SCRATCH doubles. Copies the result back and synchronizes the
 * stream before it returns; NaN when the copy fails. */
double cuk_sumsq(const float *x, size_t n, double *dev_scratch,
    void *stream);
/* dbias (N) += column sums of dout (M,N) row-major, in double, rows in a
 * fixed order (matmul_backward's bias gradient). */
void cuk_bias_grad(float *dbias, const float *dout, int M, int N,
    void *stream);
/* Each of rows rows of n floats, in place: softmax(scale x), the max
 * subtracted first, the sum in double (attention.c's softmax_row on the
 * scaled scores; pass 1 when the GEMM applied the scale). */
void cuk_softmax_rows(float *x, long rows, int n, float scale,
    void *stream);
/* Softmax backward in place, per row: d := scale (p (d - sum_j d_j p_j)),
 * the dot in double: the gradient of the scores before the scale, from
 * that of the probabilities p (attention.c's ds, times its GEMMs' scale). */
void cuk_softmax_rows_backward(float *d, const float *p, long rows, int n,
    float scale, void *stream);
/* out (M,N) += bias (N) on every row: the GEMM's bias where cuBLASLt's
 * epilogue cannot take the bias pointer's alignment */
void cuk_bias_add(float *out, const float *bias, int M, int N, void *stream);

/* out (B,K,PQ) += bias (K): a convolution's bias on activations */
void cuk_bias_add_nchw(float *out, const float *bias, int B, int K, int PQ,
    void *stream);
/* dbias (K) += sums of the activation gradient dout (B,K,PQ) over B and
 * PQ, in double, in a fixed order */
void cuk_bias_grad_nchw(float *dbias, const float *dout, int B, int K,
    int PQ, void *stream);
/* The launchers' shared device workspace (the split reductions' partial
 * sums) with room for bytes, or NULL when the pool has none. Grown on the
 * stream, so it stays valid for the work queued after this call until the
 * next call; a launcher asks once and uses it for all its kernels. */
void *cuk_workspace(size_t bytes, void *stream);
/* dst (n activation elements) = x (n floats), rounded to the storage */
void cuk_input_from_f32(float *dst, const float *x, size_t n, void *stream);

/* ---- the bf16 path's own: bf16 pointers whatever cuk_set_bf16 says ---- */
/* dst (n bf16) = src (n floats), rounded to nearest even: the weights a
 * GEMM or convolution reads */
void cuk_to_bf16(void *dst, const float *src, size_t n, void *stream);
/* dst (n floats) = src (n floats) rounded to bf16 */
void cuk_round_bf16(float *dst, const float *src, size_t n, void *stream);
/* dst (n floats) += src (n bf16): a convolution's bf16 weight gradient
 * into the fp32 gradient */
void cuk_acc_bf16(float *dst, const void *src, size_t n, void *stream);
/* Per row of n, in place: x (bf16) = softmax(x), in fp32 math with the
 * sum in double (attention's probabilities from its bf16 scores) */
void cuk_softmax_rows_bf16(void *x, long rows, int n, void *stream);
/* Per row of n: ds (bf16) = p (d - sum_j d_j p_j), d the fp32 gradient of
 * the probabilities p (bf16), the dot in double */
void cuk_softmax_rows_backward_bf16(void *ds, const float *d, const void *p,
    long rows, int n, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* SK_TRAIN_CUDA_KERNELS_H */
