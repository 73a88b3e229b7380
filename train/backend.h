/*
 * backend.h - the boundary between the model code and the kernels. A backend
 * owns memory on its device and runs every layer's forward and backward and
 * the optimizer updates. The fp32 CPU backend (train/cpu/) is the oracle;
 * a CUDA backend fills in the same table with device pointers.
 *
 * Conventions, for every backend:
 *  - pointers are device pointers of this backend, floats unless noted;
 *  - forward passes overwrite their output;
 *  - backward passes ACCUMULATE (+=) into every gradient they write: the
 *    input gradient and the parameter gradients. The caller zeroes them
 *    once per step. A NULL input gradient means "not needed";
 *  - every pass is deterministic: same inputs, same thread count, same bits.
 *
 * Precision (act_elt): an fp32 backend stores activations and their
 * gradients as floats (act_elt 4). A bf16 backend (AMP-O2: --precision
 * bf16) stores them as bfloat16 (act_elt 2) and casts the fp32 weights and
 * biases to bf16 where a GEMM or convolution reads them (attention's
 * scores and probabilities are stored in bf16 too); the pointers keep their
 * float type but address 2-byte elements. What stays fp32 in every
 * precision: parameters (the master weights) and their gradients,
 * optimizer state, batch-norm running statistics, the saved statistics of
 * the norms (mean, rstd), max-pool indices (int32), the loss's probs and
 * losses, scratch, and the x of input_from_f32. Statistics, softmax and
 * the loss are computed in fp32 or double from the bf16 values.
 */
#ifndef SK_TRAIN_BACKEND_H
#define SK_TRAIN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

/* A convolution: input (B,C,H,W), weight (K,C,R,S), output (B,K,P,Q). */
struct conv_shape {
	int B, C, H, W;
	int K, R, S;
	int stride, pad;
	int P, Q;
};

/* A max pool: input (B,C,H,W), window k, output (B,C,P,Q). Padding is -inf
 * (PyTorch's MaxPool2d). */
struct pool_shape {
	int B, C, H, W;
	int k, stride, pad;
	int P, Q;
};

struct backend {
	const char *name;
	/* bytes of one activation element: 4 (fp32) or 2 (bf16) */
	size_t act_elt;

	/* ---- memory (a 0-byte call does nothing, and its pointers may be
	 * NULL: an empty tensor may have no memory) ---- */
	void *(*alloc)(size_t bytes);		/* zero-filled, NULL on failure */
	void (*free)(void *p);
	void (*zero)(void *p, size_t bytes);
	void (*copy)(void *dst, const void *src, size_t bytes);	/* dev->dev */
	void (*to_device)(void *dst, const void *host, size_t bytes);
	void (*to_host)(void *host, const void *src, size_t bytes);
	void (*sync)(void);
	/* dst (n activation elements) = x (n floats, a device pointer),
	 * rounded to the activation precision: the image into the model */
	void (*input_from_f32)(float *dst, const float *x, size_t n);
	/* The image's (C,H,W), said once by model_alloc before the first
	 * input_from_f32: a backend that stores 4-D activations in a layout
	 * of its own (the CUDA backend's bf16 channels-last) needs it to
	 * place the (B,C,H,W) batch. NULL (the CPU backends): not needed. */
	void (*set_image_shape)(int C, int H, int W);
	/* The floats of scratch model_alloc allocated (the most any
	 * conv2d_scratch or attention_scratch asked for at its max_batch):
	 * a pass on a shape first seen later (a short last batch) must make
	 * do with it. NULL (the CPU backends): not needed. */
	void (*set_scratch)(size_t floats);
	/* Threads used by the CPU kernels and BLAS, at least 1 (the tool's
	 * default is cli_cpus_per_rank()). */
	void (*set_threads)(int n);

	/* ---- convolution (im2col + GEMM on the CPU) ---- */
	/* Floats of scratch conv2d_forward/backward need for shape s. */
	size_t (*conv2d_scratch)(const struct conv_shape *s);
	/* out (B,K,P,Q) = conv(inp (B,C,H,W), w (K,C,R,S)) + bias (K) or NULL */
	void (*conv2d_forward)(const struct conv_shape *s, float *out,
	    const float *inp, const float *w, const float *bias,
	    float *scratch);
	/* dinp (B,C,H,W) or NULL, dw (K,C,R,S), dbias (K) or NULL */
	void (*conv2d_backward)(const struct conv_shape *s, float *dinp,
	    float *dw, float *dbias, const float *dout, const float *inp,
	    const float *w, float *scratch);

	/* ---- batch norm over (B,C,HW) ---- */
	/*
	 * training: normalise with the batch statistics, save mean and rstd
	 * (C) for backward and, when update is set, move run_mean/run_var
	 * toward the batch mean and the UNBIASED batch variance by momentum
	 * (PyTorch). Not training: normalise with run_mean/run_var; mean and
	 * rstd are not written.
	 * Fused epilogue (ResNet's bn -> [add] -> relu): out = bn(inp) + res
	 * when res (B,C,HW) is not NULL, then max(out, 0) when relu is set,
	 * the same bits as the three separate passes.
	 */
	void (*batchnorm_forward)(int B, int C, int HW, float *out,
	    const float *inp, const float *gamma, const float *beta,
	    float *mean, float *rstd, float *run_mean, float *run_var,
	    float momentum, float eps, int training, int update,
	    const float *res, int relu);
	/*
	 * training-mode backward. With relu set, dout is first masked where
	 * the forward output out is not > 0 (out is unused otherwise); dres
	 * (or NULL) += the masked dout, the residual's gradient.
	 */
	void (*batchnorm_backward)(int B, int C, int HW, float *dinp,
	    float *dgamma, float *dbeta, const float *dout, const float *inp,
	    const float *gamma, const float *mean, const float *rstd,
	    float *dres, const float *out, int relu);

	/* ---- elementwise ---- */
	void (*relu_forward)(float *out, const float *inp, size_t n);
	/* uses the forward output: dinp += dout where out > 0 */
	void (*relu_backward)(float *dinp, const float *dout, const float *out,
	    size_t n);
	void (*add_forward)(float *out, const float *a, const float *b,
	    size_t n);
	/* da += dout, db += dout (either may be NULL) */
	void (*add_backward)(float *da, float *db, const float *dout,
	    size_t n);
	/* GELU with the exact erf: x/2 (1 + erf(x/sqrt 2)) */
	void (*gelu_forward)(float *out, const float *inp, size_t n);
	void (*gelu_backward)(float *dinp, const float *dout, const float *inp,
	    size_t n);

	/* ---- pooling ---- */
	/* idx (B,C,P,Q) records the argmax's offset within its (H,W) plane */
	void (*maxpool_forward)(const struct pool_shape *s, float *out,
	    int32_t *idx, const float *inp);
	void (*maxpool_backward)(const struct pool_shape *s, float *dinp,
	    const float *dout, const int32_t *idx);
	/* global average: inp (B,C,HW) -> out (B,C) */
	void (*avgpool_forward)(int B, int C, int HW, float *out,
	    const float *inp);
	void (*avgpool_backward)(int B, int C, int HW, float *dinp,
	    const float *dout);

	/* ---- linear ---- */
	/* out (M,N) = inp (M,K) . w (N,K)^T + bias (N) or NULL */
	void (*matmul_forward)(float *out, const float *inp, const float *w,
	    const float *bias, int M, int K, int N);
	/* dinp (M,K) or NULL, dw (N,K), dbias (N) or NULL */
	void (*matmul_backward)(float *dinp, float *dw, float *dbias,
	    const float *dout, const float *inp, const float *w,
	    int M, int K, int N);

	/* ---- layer norm over the last dimension C of (M,C) ---- */
	/* saves mean (M) and rstd (M) */
	void (*layernorm_forward)(float *out, float *mean, float *rstd,
	    const float *inp, const float *gamma, const float *beta,
	    int M, int C, float eps);
	void (*layernorm_backward)(float *dinp, float *dgamma, float *dbeta,
	    const float *dout, const float *inp, const float *gamma,
	    const float *mean, const float *rstd, int M, int C);

	/* ---- multi-head self-attention, no mask ---- */
	/*
	 * qkv (B,T,3C): q = [..., 0:C], k = [..., C:2C], v = [..., 2C:3C],
	 * head h at columns h*C/NH .. (h+1)*C/NH of each (timm's layout).
	 * att (B,NH,T,T) keeps softmax(q k^T / sqrt(C/NH)); out (B,T,C).
	 * att is the backend's to keep what its backward needs in: the
	 * CUDA backend's fused bf16 attention keeps a copy of out and the
	 * softmax statistics there instead (cuda/sdpa.h), so only
	 * attention_backward may read it.
	 */
	void (*attention_forward)(float *out, float *att, const float *qkv,
	    int B, int T, int C, int NH);
	/* Floats of scratch attention_backward needs. */
	size_t (*attention_scratch)(int B, int T, int C, int NH);
	void (*attention_backward)(float *dqkv, float *scratch,
	    const float *dout, const float *qkv, const float *att,
	    int B, int T, int C, int NH);

	/* ---- ViT embedding ---- */
	/*
	 * img (B,C,H,W) -> out (B, T=(H/p)(W/p), C*p*p): row t = patch
	 * (t / (W/p), t % (W/p)), columns in (c, kh, kw) order, so a conv
	 * weight (D,C,p,p) is a matmul weight (D, C*p*p).
	 */
	void (*patchify_forward)(float *out, const float *img, int B, int C,
	    int H, int W, int p);
	void (*patchify_backward)(float *dimg, const float *dout, int B, int C,
	    int H, int W, int p);
	/* out (B,T+1,C): row 0 = cls (C), rows 1.. = x (B,T,C); plus pos (T+1,C) */
	void (*tokens_forward)(float *out, const float *x, const float *cls,
	    const float *pos, int B, int T, int C);
	/* dx or NULL, dcls, dpos */
	void (*tokens_backward)(float *dx, float *dcls, float *dpos,
	    const float *dout, int B, int T, int C);
	/* out (B,C) = inp (B,T,C) row 0 of each sample */
	void (*token0_forward)(float *out, const float *inp, int B, int T,
	    int C);
	void (*token0_backward)(float *dinp, const float *dout, int B, int T,
	    int C);

	/* ---- loss ---- */
	/*
	 * Softmax cross-entropy with label smoothing eps (PyTorch):
	 * loss_i = (1-eps)(-log p_i,y) + eps * mean_k(-log p_i,k).
	 * losses (B) per sample, probs (B,K) kept for backward.
	 */
	void (*xent_forward)(float *losses, float *probs, const float *logits,
	    const int32_t *labels, int B, int K, float smoothing);
	/* dlogits += scale * (probs - target) */
	void (*xent_backward)(float *dlogits, const float *probs,
	    const int32_t *labels, int B, int K, float smoothing, float scale);

	/* ---- optimizer updates (PyTorch semantics) ---- */
	/* SGD: g' = g + wd p; buf = momentum buf + g'; p -= lr (nesterov ?
	 * g' + momentum buf : buf). buf starts at zero. */
	void (*sgd_step)(float *p, const float *g, float *buf, size_t n,
	    float lr, float momentum, float wd, int nesterov);
	/* AdamW: p *= 1 - lr wd; m, v moments; step t counts from 1. */
	void (*adamw_step)(float *p, const float *g, float *m, float *v,
	    size_t n, float lr, float beta1, float beta2, float eps, float wd,
	    int t);
	/* sum of squares, accumulated in double */
	double (*sumsq)(const float *x, size_t n);
	void (*scale)(float *x, size_t n, float s);
};

/* The fp32 CPU backend: OpenBLAS GEMMs, OpenMP elsewhere. */
const struct backend *backend_cpu(void);
/*
 * The CPU backend emulating bf16 AMP-O2 (--backend cpu --precision bf16),
 * the oracle of the GPU's bf16 path: storage stays fp32 (act_elt 4), but
 * every value the GPU stores in bf16 is rounded to bf16 (round to nearest
 * even) at the same points: each activation and activation gradient a
 * pass writes, the weights a GEMM or convolution reads, and a
 * convolution's weight gradient before it is added to the fp32 gradient.
 */
const struct backend *backend_cpu_bf16(void);

/* x rounded to the nearest bfloat16 (ties to even; NaN stays NaN). */
float bf16_round(float x);

#endif /* SK_TRAIN_BACKEND_H */
