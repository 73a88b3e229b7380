/*
 * bf16.c - the CPU backend emulating bf16 AMP-O2 (--backend cpu
 * --precision bf16), the oracle of the CUDA backend's bf16 path. Storage
 * stays fp32, but each value the GPU stores as bfloat16 is rounded to
 * bfloat16 here at the same point: every activation and activation
 * gradient a pass writes, the weights a GEMM or convolution reads, and a
 * convolution's weight gradient before it joins the fp32 gradient. The
 * arithmetic in between is the fp32 CPU kernels' (cpu.h); attention is
 * written out here because the GPU rounds inside it.
 */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <cblas.h>

#include "cpu.h"

/* Per-thread (T,T) buffers of attention backward, as attention.c: more
 * threads than this do not take part. */
#define ATT_SLOTS 64

/* ------------------------------------------------------------------------ */
/* rounding                                                                 */

/*
 * The bits of the bfloat16 nearest to the float with bits u, ties to even,
 * as a float's bits (the low 16 zero). Adding 0x7fff plus the lowest kept
 * bit carries into the kept bits exactly when the dropped half is above
 * the midpoint, or on it with the kept value odd; a carry out of the
 * largest finite bf16 lands on infinity, as IEEE rounding does. A NaN
 * keeps its sign and the top of its payload, made quiet so dropping the
 * low payload cannot turn it into an infinity.
 */
static inline uint32_t
round_bits(uint32_t u)
{
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (u | 0x00400000u) & 0xffff0000u;
	return (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
}

float
bf16_round(float x)
{
	uint32_t u;

	memcpy(&u, &x, sizeof(u));
	u = round_bits(u);
	memcpy(&x, &u, sizeof(x));
	return x;
}

static inline void
round_one(float *x)
{
	uint32_t u;

	memcpy(&u, x, sizeof(u));
	u = round_bits(u);
	memcpy(x, &u, sizeof(u));
}

/* x[0..n) = bf16(x): what the GPU stores; x may be NULL */
static void
round_n(float *x, size_t n)
{
	if (x == NULL)
		return;
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++)
		round_one(x + i);
}

/* (rows, cols) at stride ld, on the calling thread: inside attention's
 * loop over heads, already parallel */
static void
round_rows(float *x, int rows, int cols, size_t ld)
{
	int i, j;

	for (i = 0; i < rows; i++)
		for (j = 0; j < cols; j++)
			round_one(x + (size_t)i * ld + j);
}

/* ------------------------------------------------------------------------ */
/* weight copies                                                            */

/*
 * The bf16 copy of the weights a GEMM or convolution reads (the fp32
 * master weights are never touched), and a convolution's weight gradient
 * before it is rounded and added to the fp32 one. Each grows to the
 * largest layer and is kept; the model calls the backend from one thread,
 * and each buffer is used within one call.
 */
static float *wbuf, *dwbuf, *bbuf;
static size_t wcap, dwcap, bcap;

static float *
grow(float **buf, size_t *cap, size_t n)
{
	float *p;

	if (n <= *cap)
		return *buf;
	if ((p = realloc(*buf, n * sizeof(float))) == NULL) {
		/* the kernels cannot fail; a layer's weights are small next
		 * to its activations, so memory is gone anyway */
		fprintf(stderr, "shardtrain: bf16 emulation: out of memory "
		    "for %zu floats of weights\n", n);
		exit(1);
	}
	*buf = p;
	*cap = n;
	return p;
}

/* bias (n) rounded into its own buffer: the GPU reads a GEMM's or a
 * convolution's bias in bf16, like its weights; NULL stays NULL */
static const float *
bias_bf16(const float *bias, size_t n)
{
	float *c;

	if (bias == NULL || n == 0)
		return bias;
	c = grow(&bbuf, &bcap, n);
	memcpy(c, bias, n * sizeof(float));
	round_n(c, n);
	return c;
}

/* w (n) rounded into the weight buffer */
static const float *
weights_bf16(const float *w, size_t n)
{
	float *c;

	if (n == 0)
		return w;
	c = grow(&wbuf, &wcap, n);
	memcpy(c, w, n * sizeof(float));
	round_n(c, n);
	return c;
}

/* ------------------------------------------------------------------------ */
/* memory and the input                                                     */

// x (n) fp32 -> dst (n) bf16 values; dst may be x
static void
bf16_input_from_f32(float *dst, const float *x, size_t n)
{
	if (dst != x && n > 0)
		memmove(dst, x, n * sizeof(float));
	round_n(dst, n);
}

/* ------------------------------------------------------------------------ */
/* convolution and batch norm                                               */

static void
bf16_conv2d_forward(const struct conv_shape *s, float *out, const float *inp,
    const float *w, const float *bias, float *scratch)
{
	size_t nw = (size_t)s->K * s->C * s->R * s->S;
	size_t pq = (size_t)s->P * s->Q, n = (size_t)s->B * s->K * pq;
	const float *br;

	/* the GPU stores the convolution in bf16, then adds the bf16 bias
	 * and stores again: two roundings */
	cpu_conv2d_forward(s, out, inp, weights_bf16(w, nw), NULL, scratch);
	round_n(out, n);
	if ((br = bias_bf16(bias, (size_t)s->K)) == NULL)
		return;
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++)
		out[i] += br[(i / pq) % (size_t)s->K];
	round_n(out, n);
}

/*
 * The GPU's weight gradient comes out of cuDNN in bf16 and is then added
 * to the fp32 gradient: computed alone into a zeroed buffer here, rounded,
 * added. The bias gradient is fp32 throughout.
 */
static void
bf16_conv2d_backward(const struct conv_shape *s, float *dinp, float *dw,
    float *dbias, const float *dout, const float *inp, const float *w,
    float *scratch)
{
	size_t nw = (size_t)s->K * s->C * s->R * s->S;
	const float *wr = weights_bf16(w, nw);
	float *dwt = grow(&dwbuf, &dwcap, nw);

	memset(dwt, 0, nw * sizeof(float));
	cpu_conv2d_backward(s, dinp, dwt, dbias, dout, inp, wr, scratch);
	round_n(dinp, (size_t)s->B * s->C * s->H * s->W);
	round_n(dwt, nw);
#pragma omp parallel for schedule(static) if (nw > CPU_PAR_MIN)
	for (size_t i = 0; i < nw; i++)
		dw[i] += dwt[i];
}

/* mean, rstd and the running statistics stay fp32 */
static void
bf16_batchnorm_forward(int B, int C, int HW, float *out, const float *inp,
    const float *gamma, const float *beta, float *mean, float *rstd,
    float *run_mean, float *run_var, float momentum, float eps, int training,
    int update, const float *res, int relu)
{
	cpu_batchnorm_forward(B, C, HW, out, inp, gamma, beta, mean, rstd,
	    run_mean, run_var, momentum, eps, training, update, res, relu);
	round_n(out, (size_t)B * C * HW);
}

static void
bf16_batchnorm_backward(int B, int C, int HW, float *dinp, float *dgamma,
    float *dbeta, const float *dout, const float *inp, const float *gamma,
    const float *mean, const float *rstd, float *dres, const float *out,
    int relu)
{
	size_t n = (size_t)B * C * HW;

	cpu_batchnorm_backward(B, C, HW, dinp, dgamma, dbeta, dout, inp,
	    gamma, mean, rstd, dres, out, relu);
	round_n(dinp, n);
	round_n(dres, n);
}

/* ------------------------------------------------------------------------ */
/* elementwise and pooling                                                  */

static void
bf16_relu_forward(float *out, const float *inp, size_t n)
{
	cpu_relu_forward(out, inp, n);
	round_n(out, n);
}

static void
bf16_relu_backward(float *dinp, const float *dout, const float *out,
    size_t n)
{
	cpu_relu_backward(dinp, dout, out, n);
	round_n(dinp, n);
}

static void
bf16_add_forward(float *out, const float *a, const float *b, size_t n)
{
	cpu_add_forward(out, a, b, n);
	round_n(out, n);
}

static void
bf16_add_backward(float *da, float *db, const float *dout, size_t n)
{
	cpu_add_backward(da, db, dout, n);
	round_n(da, n);
	round_n(db, n);
}

static void
bf16_gelu_forward(float *out, const float *inp, size_t n)
{
	cpu_gelu_forward(out, inp, n);
	round_n(out, n);
}

static void
bf16_gelu_backward(float *dinp, const float *dout, const float *inp,
    size_t n)
{
	cpu_gelu_backward(dinp, dout, inp, n);
	round_n(dinp, n);
}

/* the indices stay int32 */
static void
bf16_maxpool_forward(const struct pool_shape *s, float *out, int32_t *idx,
    const float *inp)
{
	cpu_maxpool_forward(s, out, idx, inp);
	round_n(out, (size_t)s->B * s->C * s->P * s->Q);
}

static void
bf16_maxpool_backward(const struct pool_shape *s, float *dinp,
    const float *dout, const int32_t *idx)
{
	cpu_maxpool_backward(s, dinp, dout, idx);
	round_n(dinp, (size_t)s->B * s->C * s->H * s->W);
}

static void
bf16_avgpool_forward(int B, int C, int HW, float *out, const float *inp)
{
	cpu_avgpool_forward(B, C, HW, out, inp);
	round_n(out, (size_t)B * C);
}

static void
bf16_avgpool_backward(int B, int C, int HW, float *dinp, const float *dout)
{
	cpu_avgpool_backward(B, C, HW, dinp, dout);
	round_n(dinp, (size_t)B * C * HW);
}

/* ------------------------------------------------------------------------ */
/* linear and layer norm                                                    */

// inp (M,K), w (N,K) and bias (N) read as bf16 -> out (M,N)
static void
bf16_matmul_forward(float *out, const float *inp, const float *w,
    const float *bias, int M, int K, int N)
{
	const float *wr = w;

	if (M <= 0 || N <= 0)
		return;
	if (K > 0)
		wr = weights_bf16(w, (size_t)N * K);
	cpu_matmul_forward(out, inp, wr, bias_bf16(bias, (size_t)N), M, K, N);
	round_n(out, (size_t)M * N);
}

/*
 * dinp reads the bf16 weights and is stored bf16. The GPU's weight
 * gradient GEMM reads bf16 dout and inp but accumulates and writes fp32
 * straight into the gradient, so dw is not rounded; neither is dbias.
 */
static void
bf16_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
    const float *inp, const float *w, int M, int K, int N)
{
	const float *wr = w;

	if (M <= 0 || N <= 0)
		return;
	if (K > 0 && dinp != NULL)
		wr = weights_bf16(w, (size_t)N * K);
	cpu_matmul_backward(dinp, dw, dbias, dout, inp, wr, M, K, N);
	if (K > 0)
		round_n(dinp, (size_t)M * K);
}

/* mean and rstd stay fp32 */
static void
bf16_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
    const float *gamma, const float *beta, int M, int C, float eps)
{
	cpu_layernorm_forward(out, mean, rstd, inp, gamma, beta, M, C, eps);
	round_n(out, (size_t)M * C);
}

static void
bf16_layernorm_backward(float *dinp, float *dgamma, float *dbeta,
    const float *dout, const float *inp, const float *gamma,
    const float *mean, const float *rstd, int M, int C)
{
	cpu_layernorm_backward(dinp, dgamma, dbeta, dout, inp, gamma, mean,
	    rstd, M, C);
	round_n(dinp, (size_t)M * C);
}

/* ------------------------------------------------------------------------ */
/* attention                                                                */

/*
 * attention.c's computation with the GPU's rounding points. Forward: the
 * scores are stored bf16, the softmax of them runs in fp32, the
 * probabilities are stored bf16 and out = probs . v is rounded. Backward: da = dO v^T stays fp32; dv += a^T
 * dO is rounded after the accumulate; ds = a (da - sum a da) is fp32,
 * rounded because it is a GEMM's input; dq += scale ds k and dk += scale
 * ds^T q are rounded after. Each (b,h) pair runs single-threaded GEMMs
 * (cpu_sgemm) on one thread, so the bits do not depend on the thread count.
 */

// qkv (B,T,3C) -> att (B,NH,T,T) bf16 values, out (B,T,C) bf16 values
static void
bf16_attention_forward(float *out, float *att, const float *qkv, int B,
    int T, int C, int NH)
{
	int hd = NH > 0 ? C / NH : 0, C3 = 3 * C, pairs = B * NH, nthr, bh;
	float scale = 1.0f / sqrtf((float)hd);

	if (B <= 0 || T <= 0 || NH <= 0 || hd <= 0)
		return;
	nthr = cpu_attention_team(pairs, pairs);
	#pragma omp parallel for num_threads(nthr) schedule(static)
	for (bh = 0; bh < pairs; bh++) {
		int b = bh / NH, h = bh % NH, i;
		const float *q = qkv + (size_t)b * T * C3 + h * hd;
		const float *k = q + C, *v = q + 2 * C;
		float *a = att + (size_t)bh * T * T;
		float *o = out + (size_t)b * T * C + h * hd;

		/* a (T,T) = scale q (T,hd) . k^T (hd,T), stored in bf16: the
		 * GPU writes the scores into att and softmaxes them there */
		cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd,
		    scale, q, C3, k, C3, 0.0f, a, T);
		round_rows(a, T, T, (size_t)T);
		for (i = 0; i < T; i++)
			cpu_softmax_row(a + (size_t)i * T, T);
		round_rows(a, T, T, (size_t)T);
		/* o (T,hd) = a (T,T) . v (T,hd) */
		cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T,
		    1.0f, a, T, v, C3, 0.0f, o, C);
		round_rows(o, T, hd, (size_t)C);
	}
}

static size_t
bf16_attention_scratch(int B, int T, int C, int NH)
{
	size_t slots = (size_t)B * NH;

	(void)C;
	if (slots > ATT_SLOTS)
		slots = ATT_SLOTS;
	return slots * T * T;
}

/* scratch: one (T,T) buffer per thread for d(att), then d(scores) */
// dout (B,T,C), qkv (B,T,3C), att (B,NH,T,T) -> dqkv (B,T,3C) +=
static void
bf16_attention_backward(float *dqkv, float *scratch, const float *dout,
    const float *qkv, const float *att, int B, int T, int C, int NH)
{
	int hd = NH > 0 ? C / NH : 0, C3 = 3 * C, pairs = B * NH, nthr, bh;
	float scale = 1.0f / sqrtf((float)hd);

	if (B <= 0 || T <= 0 || NH <= 0 || hd <= 0)
		return;
	nthr = cpu_attention_team(pairs, ATT_SLOTS);
	#pragma omp parallel num_threads(nthr)
	{
#ifdef _OPENMP
		int tid = omp_get_thread_num();
#else
		int tid = 0;
#endif
		float *da = scratch + (size_t)tid * T * T;

		#pragma omp for schedule(static)
		for (bh = 0; bh < pairs; bh++) {
			int b = bh / NH, h = bh % NH, i, j;
			size_t qo = (size_t)b * T * C3 + h * hd;
			const float *q = qkv + qo, *k = q + C, *v = q + 2 * C;
			float *dq = dqkv + qo, *dk = dq + C, *dv = dq + 2 * C;
			const float *a = att + (size_t)bh * T * T;
			const float *dO = dout + (size_t)b * T * C + h * hd;

			/* da (T,T) = dO (T,hd) . v^T (hd,T), fp32 */
			cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
			    T, T, hd, 1.0f, dO, C, v, C3, 0.0f, da, T);
			/* dv (T,hd) += a^T (T,T) . dO (T,hd) */
			cpu_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans,
			    T, hd, T, 1.0f, a, T, dO, C, 1.0f, dv, C3);
			round_rows(dv, T, hd, (size_t)C3);
			/* ds = a (da - sum_j a da) in fp32, then bf16: the
			 * GPU's next two GEMMs read it */
			for (i = 0; i < T; i++) {
				const float *ar = a + (size_t)i * T;
				float *dr = da + (size_t)i * T, dot;
				double s = 0.0;

				for (j = 0; j < T; j++)
					s += (double)ar[j] * dr[j];
				dot = (float)s;
				for (j = 0; j < T; j++)
					dr[j] = ar[j] * (dr[j] - dot);
			}
			round_rows(da, T, T, (size_t)T);
			/* dq (T,hd) += scale ds (T,T) . k (T,hd) */
			cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
			    T, hd, T, scale, da, T, k, C3, 1.0f, dq, C3);
			/* dk (T,hd) += scale ds^T (T,T) . q (T,hd) */
			cpu_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans,
			    T, hd, T, scale, da, T, q, C3, 1.0f, dk, C3);
			round_rows(dq, T, hd, (size_t)C3);
			round_rows(dk, T, hd, (size_t)C3);
		}
	}
}

/* ------------------------------------------------------------------------ */
/* ViT embedding and the loss                                               */

static void
bf16_patchify_forward(float *out, const float *img, int B, int C, int H,
    int W, int p)
{
	cpu_patchify_forward(out, img, B, C, H, W, p);
	if (p > 0)	/* out is (B, T, C p p), T = (H/p)(W/p) */
		round_n(out, (size_t)B * (H / p) * (W / p) * C * p * p);
}

static void
bf16_patchify_backward(float *dimg, const float *dout, int B, int C, int H,
    int W, int p)
{
	cpu_patchify_backward(dimg, dout, B, C, H, W, p);
	round_n(dimg, (size_t)B * C * H * W);
}

/* x + pos in fp32 (cls and pos are parameters), then stored bf16 */
static void
bf16_tokens_forward(float *out, const float *x, const float *cls,
    const float *pos, int B, int T, int C)
{
	cpu_tokens_forward(out, x, cls, pos, B, T, C);
	round_n(out, (size_t)B * (T + 1) * C);
}

/* dcls and dpos are parameter gradients: fp32 */
static void
bf16_tokens_backward(float *dx, float *dcls, float *dpos, const float *dout,
    int B, int T, int C)
{
	cpu_tokens_backward(dx, dcls, dpos, dout, B, T, C);
	round_n(dx, (size_t)B * T * C);
}

static void
bf16_token0_forward(float *out, const float *inp, int B, int T, int C)
{
	cpu_token0_forward(out, inp, B, T, C);
	round_n(out, (size_t)B * C);
}

/* only row 0 of each sample is written */
static void
bf16_token0_backward(float *dinp, const float *dout, int B, int T, int C)
{
	int b;

	cpu_token0_backward(dinp, dout, B, T, C);
	for (b = 0; b < B; b++)
		round_n(dinp + (size_t)b * T * C, (size_t)C);
}

/* losses and probs stay fp32 (xent_forward is the CPU's); the logits'
 * gradient is an activation gradient */
static void
bf16_xent_backward(float *dlogits, const float *probs, const int32_t *labels,
    int B, int K, float smoothing, float scale)
{
	cpu_xent_backward(dlogits, probs, labels, B, K, smoothing, scale);
	round_n(dlogits, (size_t)B * K);
}

/* ------------------------------------------------------------------------ */
/* the table                                                                */

static struct backend bf16;
static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;

/* The fp32 CPU table (memory, threads, scratch sizes, loss forward, the
 * optimizers) with the passes that store bf16 replaced. */
static void
bf16_init(void)
{
	bf16 = *backend_cpu();
	bf16.name = "cpu";
	bf16.act_elt = sizeof(float);
	bf16.input_from_f32 = bf16_input_from_f32;
	bf16.conv2d_forward = bf16_conv2d_forward;
	bf16.conv2d_backward = bf16_conv2d_backward;
	bf16.batchnorm_forward = bf16_batchnorm_forward;
	bf16.batchnorm_backward = bf16_batchnorm_backward;
	bf16.relu_forward = bf16_relu_forward;
	bf16.relu_backward = bf16_relu_backward;
	bf16.add_forward = bf16_add_forward;
	bf16.add_backward = bf16_add_backward;
	bf16.gelu_forward = bf16_gelu_forward;
	bf16.gelu_backward = bf16_gelu_backward;
	bf16.maxpool_forward = bf16_maxpool_forward;
	bf16.maxpool_backward = bf16_maxpool_backward;
	bf16.avgpool_forward = bf16_avgpool_forward;
	bf16.avgpool_backward = bf16_avgpool_backward;
	bf16.matmul_forward = bf16_matmul_forward;
	bf16.matmul_backward = bf16_matmul_backward;
	bf16.layernorm_forward = bf16_layernorm_forward;
	bf16.layernorm_backward = bf16_layernorm_backward;
	bf16.attention_forward = bf16_attention_forward;
	bf16.attention_scratch = bf16_attention_scratch;
	bf16.attention_backward = bf16_attention_backward;
	bf16.patchify_forward = bf16_patchify_forward;
	bf16.patchify_backward = bf16_patchify_backward;
	bf16.tokens_forward = bf16_tokens_forward;
	bf16.tokens_backward = bf16_tokens_backward;
	bf16.token0_forward = bf16_token0_forward;
	bf16.token0_backward = bf16_token0_backward;
	bf16.xent_backward = bf16_xent_backward;
}

const struct backend *
backend_cpu_bf16(void)
{
	pthread_once(&bf16_once, bf16_init);
	return &bf16;
}
