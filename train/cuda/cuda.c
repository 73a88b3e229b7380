/*
 * cuda.c - the CUDA backend: memory, the compute stream, GEMMs through
 * cuBLASLt, convolutions through cuDNN, and the table that points the rest
 * at the kernels' launchers (kernels.h).
 *
 * Precisions: bf16 AMP-O2 (backend.h: bf16 activations, weights cast per
 * call, fp32 accumulation on the tensor cores), fp32 with TF32 off
 * (cuBLASLt's CUBLAS_COMPUTE_32F, cuDNN's CUDNN_FMA_MATH), or tf32. fp32
 * is checked against the CPU backend by tests/gpu/backend_gpu.c, bf16
 * against the CPU's bf16 emulation by tests/gpu/train_gpu.sh. The
 * model's layout is the CPU's: NCHW
 * activations, row-major (out, in) weights. bf16 alone stores the 4-D
 * activations channels-last instead (G.nhwc, nhwc.cu), unless
 * SHARDKIT_CUDA_NCHW=1: the passes that see them dispatch on G.nhwc.
 *
 * Everything is queued on one stream, in the order the model calls. The
 * copies to and from host memory wait for the stream, since the caller
 * reuses its host buffer as soon as they return. A CUDA, cuBLASLt or cuDNN
 * error is fatal: the message names the call, and the process exits (an
 * MPI launcher then stops the other ranks).
 *
 * Determinism: with --deterministic, cuDNN's algorithms are chosen among
 * the deterministic ones by its heuristics, once per shape (else the
 * fastest of its timed trials), and cuBLASLt's reductions are deterministic whatever the
 * algorithm (its split-K modes sum in a fixed order), so one GPU model
 * gives the same bits run to run.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm.h"
#include "cuda.h"

#if defined(HAVE_CUDA) && defined(HAVE_CUDNN) && defined(HAVE_CUBLASLT)

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "attention.h"
#include "sdpa.h"
#include "kernels.h"
#include "nhwc.h"

/* cuBLASLt's workspace: enough for its split-K and stream-K kernels. */
#define LT_WORKSPACE	((size_t)32 << 20)
/* n rounded up to a multiple of a (a power of two) */
#define ALIGN_UP(n, a)	(((n) + (a) - 1) & ~(size_t)((a) - 1))

/* Shapes remembered: every GEMM and convolution of the largest model has
 * a few dozen; the tables are open-addressed and never fill. */
#define GEMM_SLOTS	1024
#define CONV_SLOTS	512
/* The most workspace a convolution algorithm may ask for. */
#define CONV_WS_MAX	((size_t)1 << 30)

static struct {
	int ready, device;
	int tf32;			/* TF32 tensor-core math allowed */
	int bf16;			/* activations in bf16 (AMP-O2) */
	int det;			/* deterministic algorithms only */
	cudaStream_t stream;		/* compute */
	cudaStream_t release;		/* where freed blocks go back */
	cudaStream_t comm;		/* NCCL's, or NULL */
	cudaEvent_t ev_compute, ev_comm;
	cudaMemPool_t pool;
	size_t fixed;			/* bytes outside the pool */
	cublasLtHandle_t lt;
	cudnnHandle_t dnn;
	void *lt_ws;
	double *sumsq_ws;
	char name[256];
	size_t conv_ws;			/* the most conv2d_scratch said, bytes */
	/* bf16: the weights (and bias) of the GEMM or convolution at hand,
	 * cast from the fp32 masters; a convolution's bf16 weight gradient
	 * before it joins the fp32 one. Grown as layers ask, never shrunk;
	 * one stream orders every use. */
	void *wbuf, *bbuf, *gbuf;
	size_t wbuf_n, bbuf_n, gbuf_n;	/* bytes */
	/* bf16 attention's head-major copies of q, k, v and out */
	void *abuf;
	size_t abuf_n;
	/* bf16: 4-D activations (B,C,H,W) stored channels-last (B,H,W,C),
	 * cuDNN's fast layout for tensor cores (nhwc.cu) */
	int nhwc;
	/* bf16: attention through cuDNN's fused SDPA where it can (sdpa.h) */
	int sdpa;
} G;

static void
die(const char *call, const char *file, int line, const char *msg)
{
	fprintf(stderr, "shardtrain: cuda: %s failed at %s:%d: %s\n", call,
	    file, line, msg);
	comm_die();
}

#define CU(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) \
	die(#x, __FILE__, __LINE__, cudaGetErrorString(e_)); } while (0)
#define LT(x) do { cublasStatus_t e_ = (x); if (e_ != CUBLAS_STATUS_SUCCESS) { \
	char m_[32]; snprintf(m_, sizeof(m_), "cuBLAS status %d", (int)e_); \
	die(#x, __FILE__, __LINE__, m_); } } while (0)
#define DNN(x) do { cudnnStatus_t e_ = (x); if (e_ != CUDNN_STATUS_SUCCESS) \
	die(#x, __FILE__, __LINE__, cudnnGetErrorString(e_)); } while (0)

/* ------------------------------------------------------------------------ */
/* memory                                                                   */

/*
 * Device memory comes from CUDA's stream-ordered pool, which keeps what is
 * freed (its release threshold is set to the maximum) and hands it out
 * again without a device-wide synchronisation: FSDP frees and allocates
 * its gathered blocks every step. A block is given back on the release
 * stream once the compute stream and NCCL's stream (cuda_set_comm_stream)
 * have reached the free, so neither waits for it; the pool orders a reuse
 * after the free.
 */
static void *
cu_alloc(size_t bytes)
{
	void *p = NULL;

	if (bytes == 0)
		return NULL;
	if (cudaMallocAsync(&p, bytes, G.stream) != cudaSuccess) {
		(void)cudaGetLastError();	/* out of memory is not sticky */
		return NULL;
	}
	CU(cudaMemsetAsync(p, 0, bytes, G.stream));
	return p;
}

static void
cu_free(void *p)
{
	if (p == NULL)
		return;
	CU(cudaEventRecord(G.ev_compute, G.stream));
	CU(cudaStreamWaitEvent(G.release, G.ev_compute, 0));
	if (G.comm != NULL) {
		CU(cudaEventRecord(G.ev_comm, G.comm));
		CU(cudaStreamWaitEvent(G.release, G.ev_comm, 0));
	}
	CU(cudaFreeAsync(p, G.release));
}

static void
cu_zero(void *p, size_t bytes)
{
	if (bytes > 0)
		CU(cudaMemsetAsync(p, 0, bytes, G.stream));
}

static void
cu_copy(void *dst, const void *src, size_t bytes)
{
	if (bytes > 0 && dst != src)
		CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
		    G.stream));
}

static void
cu_to_device(void *dst, const void *host, size_t bytes)
{
	if (bytes == 0)
		return;
	CU(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice,
	    G.stream));
	CU(cudaStreamSynchronize(G.stream));
}

/* A kernel launch reports a bad configuration only here: check it where
 * the host waits anyway. */
static void
cu_to_host(void *host, const void *src, size_t bytes)
{
	if (bytes == 0)
		return;
	CU(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost,
	    G.stream));
	CU(cudaStreamSynchronize(G.stream));
	CU(cudaGetLastError());
}

static void
cu_sync(void)
{
	CU(cudaStreamSynchronize(G.stream));
	CU(cudaGetLastError());
}

/* The kernels run on the GPU; host threads only launch them. */
static void
cu_set_threads(int n)
{
	(void)n;
}

/* The model's image (C,H,W), from set_image_shape: channels-last needs it
 * to transpose the loader's NCHW batch, and input_from_f32 gives n alone. */
static int img_c, img_h, img_w;

/* Passes on shapes first seen after model_alloc pick algorithms that fit
 * the scratch the model has, not the most any earlier model asked for. */
static void
cu_set_scratch(size_t floats)
{
	G.conv_ws = floats * sizeof(float);
}

static void
cu_set_image_shape(int C, int H, int W)
{
	img_c = C;
	img_h = H;
	img_w = W;
}

static void
cu_input_from_f32(float *dst, const float *x, size_t n)
{
	size_t chw = (size_t)img_c * img_h * img_w;

	if (G.nhwc && n > 0) {
		if (chw == 0 || n % chw != 0)
			die("input_from_f32", __FILE__, __LINE__, "the image "
			    "shape is unknown (set_image_shape) or does not "
			    "divide the input: set SHARDKIT_CUDA_NCHW=1");
		cuk_nhwc_input_from_f32(dst, x, (int)(n / chw), img_c,
		    img_h * img_w, G.stream);
	} else if (G.bf16 || dst != x)
		cuk_input_from_f32(dst, x, n, G.stream);
}

/* *buf with room for bytes, grown on the stream (the old block goes back
 * to the pool once the stream reaches the free: no wait). */
static void *
grown(void **buf, size_t *have, size_t bytes)
{
	if (bytes > *have) {
		cu_free(*buf);
		*buf = NULL;
		*have = 0;
		if (cudaMallocAsync(buf, bytes, G.stream) != cudaSuccess) {
			(void)cudaGetLastError();
			die("cudaMallocAsync", __FILE__, __LINE__, "out of GPU "
			    "memory for a working buffer (bf16 weights, "
			    "attention's heads): try a smaller --batch or "
			    "--checkpoint-activations");
		}
		*have = bytes;
	}
	return *buf;
}

/*
 * An fp32 copy of bias (n) rounded to bf16, for the kernels that add a
 * convolution's bias: they take fp32, and the bias must be rounded as
 * every other weight a bf16 layer reads is.
 */
static const float *
bf16_bias(const float *bias, size_t n)
{
	void *d = grown(&G.bbuf, &G.bbuf_n, n * sizeof(float));

	cuk_round_bf16((float *)d, bias, n, G.stream);
	return d;
}

/* The bf16 copy of n fp32 weights (or of a bias: which = 1) */
static const void *
to_bf16(const float *w, size_t n, int which)
{
	void *d;

	if (w == NULL || n == 0)
		return NULL;
	d = which ? grown(&G.bbuf, &G.bbuf_n, n * 2) :
	    grown(&G.wbuf, &G.wbuf_n, n * 2);
	cuk_to_bf16(d, w, n, G.stream);
	return d;
}

/* ------------------------------------------------------------------------ */
/* GEMMs (cuBLASLt)                                                         */

/*
 * A GEMM in the model's row-major terms, batched with strides:
 *   C[i] (M,N) = alpha op(A[i]) (M,K) . op(B[i]) (K,N) + beta C[i] (+ bias)
 * cuBLASLt is column-major, and a row-major (M,N) matrix is its
 * column-major transpose, so it computes C^T = op(B)^T op(A)^T: the
 * operands swap and M and N with them.
 */
struct gemm_key {
	int ta, tb, M, N, K, lda, ldb, ldc, batch, bias;
	int type_ab, type_c;		/* cudaDataType of A and B, of C */
	/* the operands' alignment, bytes: an algorithm chosen for aligned
	 * pointers may fault on others (attention's heads start at h*hd,
	 * a bias at any parameter offset) */
	uint32_t al_a, al_b, al_c, al_bias;
	long long sa, sb, sc;
};

struct gemm_plan {
	int used;
	struct gemm_key key;
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulAlgo_t algo;
};

static struct gemm_plan gemm_plans[GEMM_SLOTS];

static uint64_t
hash_bytes(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ULL;

	while (n-- > 0) {
		h ^= *b++;
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* The largest power of two, up to 256, that divides the address. */
static uint32_t
align_of(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	uint32_t al = 256;

	while (al > 1 && a % al != 0)
		al /= 2;
	return al;
}

/* al, lowered until it divides a stride of stride elements of type */
static uint32_t
stride_align(uint32_t al, long long stride, int type)
{
	unsigned long long bytes = (unsigned long long)stride *
	    (type == CUDA_R_32F ? 4 : 2);

	while (al > 1 && bytes % al != 0)
		al /= 2;
	return al;
}

static cublasLtMatrixLayout_t
lt_layout(int type, int rows, int cols, int ld, int batch, long long stride)
{
	cublasLtMatrixLayout_t l;

	LT(cublasLtMatrixLayoutCreate(&l, (cudaDataType_t)type,
	    (uint64_t)rows, (uint64_t)cols, ld));
	if (batch > 1) {
		LT(cublasLtMatrixLayoutSetAttribute(l,
		    CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
		LT(cublasLtMatrixLayoutSetAttribute(l,
		    CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
		    sizeof(stride)));
	}
	return l;
}

static struct gemm_plan *
gemm_plan(const struct gemm_key *k, const void *bias)
{
	cublasLtMatmulPreference_t pref;
	cublasLtMatmulHeuristicResult_t res;
	cublasOperation_t opa, opb;
	cublasLtEpilogue_t epi;
	struct gemm_plan *p;
	size_t ws = LT_WORKSPACE, i, h;
	int found = 0;

	h = hash_bytes(k, sizeof(*k)) % GEMM_SLOTS;
	for (i = 0; i < GEMM_SLOTS; i++) {
		p = &gemm_plans[(h + i) % GEMM_SLOTS];
		if (!p->used)
			break;
		if (memcmp(&p->key, k, sizeof(*k)) == 0)
			return p;
	}
	if (i == GEMM_SLOTS)
		die("gemm_plan", __FILE__, __LINE__, "too many GEMM shapes");

	p->key = *k;
	/* column-major: A' = B (N x K after op), B' = A (K x M after op) */
	opa = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	opb = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
	/* bf16 operands accumulate in fp32 (CUBLAS_COMPUTE_32F) */
	LT(cublasLtMatmulDescCreate(&p->op, G.tf32 && k->type_ab ==
	    CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
	    CUDA_R_32F));
	LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA,
	    &opa, sizeof(opa)));
	LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB,
	    &opb, sizeof(opb)));
	epi = k->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
	LT(cublasLtMatmulDescSetAttribute(p->op,
	    CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
	/* the heuristic reads the bias pointer for its alignment */
	if (k->bias)
		LT(cublasLtMatmulDescSetAttribute(p->op,
		    CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
	p->la = k->tb ? lt_layout(k->type_ab, k->K, k->N, k->ldb, k->batch,
	    k->sb) : lt_layout(k->type_ab, k->N, k->K, k->ldb, k->batch, k->sb);
	p->lb = k->ta ? lt_layout(k->type_ab, k->M, k->K, k->lda, k->batch,
	    k->sa) : lt_layout(k->type_ab, k->K, k->M, k->lda, k->batch, k->sa);
	p->lc = lt_layout(k->type_c, k->N, k->M, k->ldc, k->batch, k->sc);

	LT(cublasLtMatmulPreferenceCreate(&pref));
	LT(cublasLtMatmulPreferenceSetAttribute(pref,
	    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
	/* cuBLASLt's A is our B and its B our A (column-major) */
	LT(cublasLtMatmulPreferenceSetAttribute(pref,
	    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k->al_b,
	    sizeof(k->al_b)));
	LT(cublasLtMatmulPreferenceSetAttribute(pref,
	    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k->al_a,
	    sizeof(k->al_a)));
	LT(cublasLtMatmulPreferenceSetAttribute(pref,
	    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k->al_c,
	    sizeof(k->al_c)));
	LT(cublasLtMatmulPreferenceSetAttribute(pref,
	    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k->al_c,
	    sizeof(k->al_c)));
	LT(cublasLtMatmulAlgoGetHeuristic(G.lt, p->op, p->la, p->lb, p->lc,
	    p->lc, pref, 1, &res, &found));
	LT(cublasLtMatmulPreferenceDestroy(pref));
	if (found < 1 || res.state != CUBLAS_STATUS_SUCCESS)
		die("cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__,
		    "no algorithm for this GEMM");
	p->algo = res.algo;
	p->used = 1;
	return p;
}

/*
 * The GEMM with its operands' types: A and B are tab (CUDA_R_32F or
 * CUDA_R_16BF), C is tc; the bias, when there is one, is of C's type (the
 * epilogue's rule). alpha and beta are floats: compute is fp32.
 */
static void
gemm_t(int tab, int tc, int ta, int tb, int M, int N, int K, float alpha,
    const void *A, int lda, long long sa, const void *B, int ldb,
    long long sb, float beta, void *C, int ldc, long long sc, int batch,
    const void *bias)
{
	struct gemm_key k;
	struct gemm_plan *p;
	size_t esz = tc == CUDA_R_32F ? sizeof(float) : 2;
	int epilogue_bias;

	if (M <= 0 || N <= 0 || batch <= 0)
		return;
	if (K <= 0) {		/* an empty sum: C = beta C */
		if (beta == 0.0f && ldc == N && (batch == 1 ||
		    sc == (long long)M * N))
			cu_zero(C, (size_t)batch * M * N * esz);
		if (bias != NULL && batch == 1 && ldc == N)
			die("gemm", __FILE__, __LINE__, "a bias on an empty "
			    "product");
		return;
	}
	memset(&k, 0, sizeof(k));	/* the key is hashed whole */
	k.type_ab = tab; k.type_c = tc;
	k.ta = ta; k.tb = tb; k.M = M; k.N = N; k.K = K;
	k.lda = lda; k.ldb = ldb; k.ldc = ldc; k.batch = batch;
	k.sa = sa; k.sb = sb; k.sc = sc;
	/* every matrix of a batch, not just the first, must have the
	 * alignment the algorithm is chosen for: att's (T,T) blocks at an
	 * odd T start on 2-byte boundaries */
	k.al_a = batch > 1 ? stride_align(align_of(A), sa, tab) : align_of(A);
	k.al_b = batch > 1 ? stride_align(align_of(B), sb, tab) : align_of(B);
	k.al_c = batch > 1 ? stride_align(align_of(C), sc, tc) : align_of(C);
	/* the epilogue wants a 16-byte aligned bias; a kernel adds others */
	epilogue_bias = bias != NULL && align_of(bias) >= 16 && batch == 1;
	k.bias = epilogue_bias;
	k.al_bias = epilogue_bias ? align_of(bias) : 0;
	p = gemm_plan(&k, epilogue_bias ? bias : NULL);
	if (epilogue_bias)
		LT(cublasLtMatmulDescSetAttribute(p->op,
		    CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
	LT(cublasLtMatmul(G.lt, p->op, &alpha, B, p->la, A, p->lb, &beta,
	    C, p->lc, C, p->lc, &p->algo, G.lt_ws, LT_WORKSPACE, G.stream));
	if (bias != NULL && !epilogue_bias)
		die("gemm", __FILE__, __LINE__, "a bias the epilogue cannot "
		    "take");
}

/* The fp32 GEMM; a bias the epilogue cannot take is added by a kernel. */
static void
gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A,
    int lda, long long sa, const float *B, int ldb, long long sb,
    float beta, float *C, int ldc, long long sc, int batch,
    const float *bias)
{
	int ep = bias != NULL && align_of(bias) >= 16 && batch == 1 && K > 0;

	gemm_t(CUDA_R_32F, CUDA_R_32F, ta, tb, M, N, K, alpha, A, lda, sa, B,
	    ldb, sb, beta, C, ldc, sc, batch, ep ? bias : NULL);
	if (bias != NULL && !ep && M > 0 && N > 0 && batch == 1)
		cuk_bias_add(C, bias, M, N, G.stream);
}

/* The bf16 GEMM: A, B bf16; C bf16 (bf16c) or fp32; bias bf16 */
static void
gemm16(int bf16c, int ta, int tb, int M, int N, int K, float alpha,
    const void *A, int lda, long long sa, const void *B, int ldb,
    long long sb, float beta, void *C, int ldc, long long sc, int batch,
    const void *bias)
{
	gemm_t(CUDA_R_16BF, bf16c ? CUDA_R_16BF : CUDA_R_32F, ta, tb, M, N, K,
	    alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch, bias);
}

static void
cu_matmul_forward(float *out, const float *inp, const float *w,
    const float *bias, int M, int K, int N)
{
	/* out (M,N) = inp (M,K) . w (N,K)^T + bias */
	if (G.bf16) {
		const void *wb = to_bf16(w, (size_t)N * K, 0);

		gemm16(1, 0, 1, M, N, K, 1.0f, inp, K, 0, wb, K, 0, 0.0f, out,
		    N, 0, 1, to_bf16(bias, (size_t)N, 1));
		return;
	}
	gemm(0, 1, M, N, K, 1.0f, inp, K, 0, w, K, 0, 0.0f, out, N, 0, 1,
	    bias);
}

static void
cu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
    const float *inp, const float *w, int M, int K, int N)
{
	if (G.bf16) {
		/* dinp (M,K) += dout (M,N) . w (N,K), in bf16 */
		if (dinp != NULL)
			gemm16(1, 0, 0, M, K, N, 1.0f, dout, N, 0,
			    to_bf16(w, (size_t)N * K, 0), K, 0, 1.0f, dinp, K,
			    0, 1, NULL);
		/* dw (N,K) += dout^T (N,M) . inp (M,K), into fp32 */
		gemm16(0, 1, 0, N, K, M, 1.0f, dout, N, 0, inp, K, 0, 1.0f, dw,
		    K, 0, 1, NULL);
		if (dbias != NULL)
			cuk_bias_grad(dbias, dout, M, N, G.stream);
		return;
	}
	/* dinp (M,K) += dout (M,N) . w (N,K) */
	if (dinp != NULL)
		gemm(0, 0, M, K, N, 1.0f, dout, N, 0, w, K, 0, 1.0f, dinp, K,
		    0, 1, NULL);
	/* dw (N,K) += dout^T (N,M) . inp (M,K) */
	gemm(1, 0, N, K, M, 1.0f, dout, N, 0, inp, K, 0, 1.0f, dw, K, 0, 1,
	    NULL);
	if (dbias != NULL)
		cuk_bias_grad(dbias, dout, M, N, G.stream);
}

/* ------------------------------------------------------------------------ */
/* attention: batched GEMMs and a row softmax                               */

/*
 * The bf16 path. q, k and v are first copied head-major, (3,B,NH,T,hd),
 * so that every product is one GEMM batched over the B NH heads (stride
 * T hd, or T T in att): a single head's product at T = 197 is too small
 * to cover its launch. The scores go straight into att in bf16 and the
 * softmax runs there in place (PyTorch's math attention in bf16); out =
 * att v in bf16. Pointers step in 2-byte elements. The forward's copies
 * live in G.abuf: 4 (B,T,C) tensors.
 */
static void
forward_unfused16(uint16_t *out, uint16_t *att, const uint16_t *qkv,
    int B, int T, int C, int NH)
{
	int hd = C / NH, BH = B * NH;
	size_t btc = (size_t)B * T * C;
	long long st = (long long)T * hd, sa = (long long)T * T;
	float scale = 1.0f / sqrtf((float)hd);
	size_t qkv3 = ALIGN_UP(3 * btc, 128);	/* out 256-byte aligned */
	uint16_t *qh = grown(&G.abuf, &G.abuf_n, (qkv3 + btc) * 2);
	uint16_t *kh = qh + btc, *vh = kh + btc, *oh = qh + qkv3;

	cuk_heads_split(qh, qkv, B, T, C, NH, 3, G.stream);
	/* att (T,T) = scale q (T,hd) . k^T, every head at once */
	gemm16(1, 0, 1, T, T, hd, scale, qh, hd, st, kh, hd, st, 0.0f, att, T,
	    sa, BH, NULL);
	cuk_softmax_rows_bf16(att, (long)BH * T, T, G.stream);
	/* o (T,hd) = att (T,T) . v */
	gemm16(1, 0, 0, T, hd, T, 1.0f, att, T, sa, vh, hd, st, 0.0f, oh, hd,
	    st, BH, NULL);
	cuk_heads_merge(out, oh, B, T, C, NH, 1, 0, G.stream);
}

/* Floats of attention_backward16's scratch: the fp32 gradient of the
 * probabilities (B,NH,T,T), then in bf16 the gradient of the scores (the
 * next GEMMs' operand), q k v and dO head-major (4 (B,T,C)) and dq dk dv
 * head-major (3 (B,T,C)). */
static size_t
attention_scratch16(int B, int T, int C, int NH)
{
	size_t tt = (size_t)B * NH * T * T, btc = (size_t)B * T * C;

	/* each part 256-byte aligned, as a GEMM operand prefers */
	return ALIGN_UP(tt, 64) + (ALIGN_UP(tt, 128) + ALIGN_UP(3 * btc, 128) +
	    ALIGN_UP(btc, 128) + 3 * btc + 1) / 2;
}

static void
backward_unfused16(uint16_t *dqkv, float *scratch, const uint16_t *dout,
    const uint16_t *qkv, const uint16_t *att, int B, int T, int C, int NH)
{
	int hd = C / NH, BH = B * NH;
	size_t tt = (size_t)BH * T * T, btc = (size_t)B * T * C;
	long long st = (long long)T * hd, sa = (long long)T * T;
	float scale = 1.0f / sqrtf((float)hd);
	/* q, k, v (and dq, dk, dv) are one (3,B,NH,T,hd) block each */
	uint16_t *ds = (uint16_t *)(scratch + ALIGN_UP(tt, 64));
	uint16_t *qh = ds + ALIGN_UP(tt, 128), *kh = qh + btc, *vh = kh + btc;
	uint16_t *doh = qh + ALIGN_UP(3 * btc, 128);
	uint16_t *dqh = doh + ALIGN_UP(btc, 128), *dkh = dqh + btc;
	uint16_t *dvh = dkh + btc;

	cuk_heads_split(qh, qkv, B, T, C, NH, 3, G.stream);
	cuk_heads_split(doh, dout, B, T, C, NH, 1, G.stream);
	/* da (T,T) = dO (T,hd) . v^T, fp32 */
	gemm16(0, 0, 1, T, T, hd, 1.0f, doh, hd, st, vh, hd, st, 0.0f, scratch,
	    T, sa, BH, NULL);
	/* dv (T,hd) = att^T (T,T) . dO */
	gemm16(1, 1, 0, T, hd, T, 1.0f, att, T, sa, doh, hd, st, 0.0f, dvh, hd,
	    st, BH, NULL);
	cuk_softmax_rows_backward_bf16(ds, scratch, att, (long)BH * T, T,
	    G.stream);
	/* dq (T,hd) = scale ds (T,T) . k; dk = scale ds^T . q */
	gemm16(1, 0, 0, T, hd, T, scale, ds, T, sa, kh, hd, st, 0.0f, dqh, hd,
	    st, BH, NULL);
	gemm16(1, 1, 0, T, hd, T, scale, ds, T, sa, qh, hd, st, 0.0f, dkh, hd,
	    st, BH, NULL);
	/* dqkv (B,T,3C) += the three, back in token order */
	cuk_heads_merge(dqkv, dqh, B, T, C, NH, 3, 1, G.stream);
}

/*
 * The fused path (sdpa.h): cuDNN's flash attention, unless
 * SHARDKIT_CUDA_SDPA=0 or it is not built in. att (B,NH,T,T) then keeps
 * what its backward reads instead of the probabilities: a copy of out
 * (B,T,C) bf16, then the softmax statistics (B,NH,T) floats, 256-byte
 * aligned. Where att cannot hold them (T small against C/NH), or cuDNN
 * refuses the shape, the unfused path below runs.
 */
static float *
sdpa_stats(uint16_t *att, int B, int T, int C, int NH)
{
	size_t o = ALIGN_UP((size_t)B * T * C, 128);

	if (!G.sdpa || (o * 2 + (size_t)B * NH * T * 4) >
	    (size_t)B * NH * T * T * 2)
		return NULL;
	return (float *)(att + o);
}

static void
attention_forward16(uint16_t *out, uint16_t *att, const uint16_t *qkv,
    int B, int T, int C, int NH)
{
	int hd = C / NH;
	float *stats = sdpa_stats(att, B, T, C, NH);

	if (stats != NULL && cusdpa_forward(G.dnn, G.stream, out, stats, qkv,
	    B, T, C, NH, 1.0f / sqrtf((float)hd), G.det) == 0) {
		CU(cudaMemcpyAsync(att, out, (size_t)B * T * C * 2,
		    cudaMemcpyDeviceToDevice, G.stream));
		return;
	}
	forward_unfused16(out, att, qkv, B, T, C, NH);
}

static void
attention_backward16(uint16_t *dqkv, float *scratch, const uint16_t *dout,
    const uint16_t *qkv, const uint16_t *att, int B, int T, int C, int NH)
{
	const float *stats = sdpa_stats((uint16_t *)att, B, T, C, NH);
	size_t n3 = (size_t)B * T * 3 * C;

	int r;

	/* whether the forward ran fused is the shape's (sdpa.h): then its
	 * gradients into scratch, added to dqkv */
	r = stats == NULL ? -1 : cusdpa_backward(G.dnn, G.stream, scratch,
	    dout, qkv, att, stats, B, T, C, NH, 1.0f / sqrtf((float)(C / NH)),
	    G.det);
	if (r == -2)
		die("cusdpa_backward", __FILE__, __LINE__, "cuDNN's fused "
		    "attention backward failed after its forward ran: try "
		    "SHARDKIT_CUDA_SDPA=0");
	if (r == 0) {
		cuk_add_forward((float *)dqkv, (const float *)dqkv,
		    (const float *)scratch, n3, G.stream);
		return;
	}
	backward_unfused16(dqkv, scratch, dout, qkv, att, B, T, C, NH);
}


/*
 * The unfused path: for each head h, batched over the B samples (stride
 * T*3C in qkv, T*C in out, NH*T*T in att), the GEMMs of
 * train/cpu/attention.c. Backward needs d(att) for every pair at once:
 * B*NH*T*T floats of scratch.
 */
static void
cu_attention_forward(float *out, float *att, const float *qkv, int B, int T,
    int C, int NH)
{
	int hd, C3 = 3 * C, h;
	long long sq = (long long)T * C3, so = (long long)T * C;
	long long sa = (long long)NH * T * T;
	float scale;

	if (B <= 0 || T <= 0 || NH <= 0 || C / NH <= 0)
		return;
	if (G.bf16) {
		attention_forward16((uint16_t *)out, (uint16_t *)att,
		    (const uint16_t *)qkv, B, T, C, NH);
		return;
	}
	hd = C / NH;
	scale = 1.0f / sqrtf((float)hd);
	for (h = 0; h < NH; h++) {
		const float *q = qkv + (size_t)h * hd, *k = q + C;
		float *a = att + (size_t)h * T * T;

		/* a (T,T) = scale q (T,hd) . k^T */
		gemm(0, 1, T, T, hd, scale, q, C3, sq, k, C3, sq, 0.0f, a, T,
		    sa, B, NULL);
	}
	cuk_softmax_rows(att, (long)B * NH * T, T, 1.0f, G.stream);
	for (h = 0; h < NH; h++) {
		const float *v = qkv + (size_t)h * hd + 2 * (size_t)C;

		/* o (T,hd) = a (T,T) . v (T,hd) */
		gemm(0, 0, T, hd, T, 1.0f, att + (size_t)h * T * T, T, sa, v, C3,
		    sq, 0.0f, out + (size_t)h * hd, C, so, B, NULL);
	}
}

static size_t
cu_attention_scratch(int B, int T, int C, int NH)
{
	if (G.bf16)
		return attention_scratch16(B, T, C, NH);
	(void)C;
	return (size_t)B * NH * T * T;
}

static void
cu_attention_backward(float *dqkv, float *scratch, const float *dout,
    const float *qkv, const float *att, int B, int T, int C, int NH)
{
	int hd, C3 = 3 * C, h;
	long long sq = (long long)T * C3, so = (long long)T * C;
	long long sa = (long long)NH * T * T;
	float scale;

	if (B <= 0 || T <= 0 || NH <= 0 || C / NH <= 0)
		return;
	if (G.bf16) {
		attention_backward16((uint16_t *)dqkv, scratch,
		    (const uint16_t *)dout, (const uint16_t *)qkv,
		    (const uint16_t *)att, B, T, C, NH);
		return;
	}
	hd = C / NH;
	scale = 1.0f / sqrtf((float)hd);
	for (h = 0; h < NH; h++) {
		size_t qo = (size_t)h * hd;
		const float *v = qkv + qo + 2 * (size_t)C, *dO = dout + qo;
		const float *a = att + (size_t)h * T * T;
		float *da = scratch + (size_t)h * T * T;

		/* da (T,T) = dO (T,hd) . v^T */
		gemm(0, 1, T, T, hd, 1.0f, dO, C, so, v, C3, sq, 0.0f, da, T,
		    sa, B, NULL);
		/* dv (T,hd) += a^T (T,T) . dO (T,hd) */
		gemm(1, 0, T, hd, T, 1.0f, a, T, sa, dO, C, so, 1.0f,
		    dqkv + qo + 2 * (size_t)C, C3, sq, B, NULL);
	}
	/* ds = a (da - sum_j a da), row by row */
	cuk_softmax_rows_backward(scratch, att, (long)B * NH * T, T, 1.0f,
	    G.stream);
	for (h = 0; h < NH; h++) {
		size_t qo = (size_t)h * hd;
		const float *q = qkv + qo, *k = q + C;
		const float *ds = scratch + (size_t)h * T * T;

		/* dq (T,hd) += scale ds (T,T) . k (T,hd) */
		gemm(0, 0, T, hd, T, scale, ds, T, sa, k, C3, sq, 1.0f,
		    dqkv + qo, C3, sq, B, NULL);
		/* dk (T,hd) += scale ds^T (T,T) . q (T,hd) */
		gemm(1, 0, T, hd, T, scale, ds, T, sa, q, C3, sq, 1.0f,
		    dqkv + qo + C, C3, sq, B, NULL);
	}
}

/* ------------------------------------------------------------------------ */
/* convolutions (cuDNN)                                                     */

/*
 * Per shape: the descriptors and one deterministic algorithm for each
 * direction, the fastest cuDNN's heuristics rank that fits CONV_WS_MAX,
 * and the workspace the three need.
 */
struct conv_plan {
	int used;
	struct conv_shape s;
	cudnnTensorDescriptor_t x, y, bias;
	cudnnFilterDescriptor_t w;
	cudnnConvolutionDescriptor_t conv;
	cudnnConvolutionFwdAlgo_t fwd;
	cudnnConvolutionBwdDataAlgo_t bwd_data;
	cudnnConvolutionBwdFilterAlgo_t bwd_filter;
	/* each algorithm's math type, set on the descriptor before it runs:
	 * with tensor-core math allowed, the heuristics pair an algorithm
	 * with a math type, and the workspace and determinism they report
	 * hold for that pair */
	cudnnMathType_t fwd_math, bwd_data_math, bwd_filter_math;
	size_t ws;			/* bytes */
};

static struct conv_plan conv_plans[CONV_SLOTS];

/* fp32 takes FMA algorithms alone; tf32 and bf16 any (TF32 is the
 * tensor ops' math for fp32 data, and bf16 runs on them) */
static int
math_ok(cudnnMathType_t m)
{
	return G.tf32 || G.bf16 || m == CUDNN_FMA_MATH;
}

/*
 * j = the first of the n results, in cuDNN's order (the heuristics' rank,
 * or the measured time of cudnnFind*), that runs, fits limit, uses an
 * allowed math type and, with --deterministic, is deterministic. The
 * three directions' result types share these fields, hence a macro.
 */
/* After a cudnnFind* that failed (out of memory, most likely): its
 * cudaMalloc's error is not sticky, but it would surface at the next
 * check as the run's error, so it is read here. 0: no algorithm yet. */
static int
find_failed(void)
{
	if (!G.det)
		(void)cudaGetLastError();
	return 0;
}

#define FIRST_OK(perf, n, limit, j) do {				\
	for ((j) = 0; (j) < (n); (j)++)					\
		if ((perf)[j].status == CUDNN_STATUS_SUCCESS &&		\
		    (!G.det ||						\
		    (perf)[j].determinism == CUDNN_DETERMINISTIC) &&	\
		    (perf)[j].memory <= (limit) &&			\
		    math_ok((perf)[j].mathType))			\
			break;						\
} while (0)
#define PICK(perf, n, limit, j, dir) do {				\
	FIRST_OK(perf, n, limit, j);					\
	if ((j) == (n))							\
		die("conv_plan", __FILE__, __LINE__, "no " dir		\
		    " algorithm fits the workspace");			\
} while (0)

/*
 * The plan for shape s. A shape first seen through conv2d_scratch may use
 * up to CONV_WS_MAX; one first seen in a pass (a batch size the model did
 * not allocate for) must fit the scratch the model has, limit.
 */
static struct conv_plan *
conv_plan(const struct conv_shape *s, size_t limit)
{
	cudnnConvolutionFwdAlgoPerf_t fp[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
	cudnnConvolutionBwdDataAlgoPerf_t dp[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
	cudnnConvolutionBwdFilterAlgoPerf_t wp[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
	cudnnDataType_t dt = G.bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
	cudnnTensorFormat_t fmt = G.nhwc ? CUDNN_TENSOR_NHWC :
	    CUDNN_TENSOR_NCHW;
	struct conv_plan *p;
	struct conv_shape key;
	size_t i, h;
	int n, j;

	memset(&key, 0, sizeof(key));
	key = *s;
	h = hash_bytes(&key, sizeof(key)) % CONV_SLOTS;
	for (i = 0; i < CONV_SLOTS; i++) {
		p = &conv_plans[(h + i) % CONV_SLOTS];
		if (!p->used)
			break;
		if (memcmp(&p->s, &key, sizeof(key)) == 0)
			return p;
	}
	if (i == CONV_SLOTS)
		die("conv_plan", __FILE__, __LINE__, "too many conv shapes");

	p->s = key;
	DNN(cudnnCreateTensorDescriptor(&p->x));
	DNN(cudnnCreateTensorDescriptor(&p->y));
	DNN(cudnnCreateTensorDescriptor(&p->bias));
	DNN(cudnnCreateFilterDescriptor(&p->w));
	DNN(cudnnCreateConvolutionDescriptor(&p->conv));
	/*
	 * bf16 data (and weights, cast per call) with fp32 accumulation.
	 * Channels-last (G.nhwc): x, y and the filter are NHWC, the dims
	 * still given as n, c, h, w; the filter is then (K,R,S,C) in memory
	 * (conv_weights16). The key needs no layout: G.nhwc is fixed for
	 * the process.
	 */
	DNN(cudnnSetTensor4dDescriptor(p->x, fmt, dt, s->B, s->C, s->H,
	    s->W));
	DNN(cudnnSetTensor4dDescriptor(p->y, fmt, dt, s->B, s->K, s->P,
	    s->Q));
	DNN(cudnnSetTensor4dDescriptor(p->bias, CUDNN_TENSOR_NCHW,
	    CUDNN_DATA_FLOAT, 1, s->K, 1, 1));
	DNN(cudnnSetFilter4dDescriptor(p->w, dt, fmt, s->K, s->C, s->R,
	    s->S));
	DNN(cudnnSetConvolution2dDescriptor(p->conv, s->pad, s->pad,
	    s->stride, s->stride, 1, 1, CUDNN_CROSS_CORRELATION,
	    CUDNN_DATA_FLOAT));
	/* fp32 means fp32: no TF32 tensor-core math unless asked (cuDNN's
	 * default math allows TF32 from the A100 on); bf16 is tensor ops' */
	DNN(cudnnSetConvolutionMathType(p->conv, G.bf16 ? CUDNN_TENSOR_OP_MATH :
	    G.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));

	/*
	 * --deterministic: the heuristics' ranking, the same every run.
	 * Else cudnnFind* times every algorithm on this shape once (its own
	 * buffers, synchronously), as cudnn.benchmark does, fastest first.
	 * Find allocates those buffers with cudaMalloc, so the pool first
	 * gives back what it keeps unused (after a --batch auto trial that
	 * did not fit, that is most of the GPU); where Find still fails, or
	 * none of its algorithms fits, the heuristics choose.
	 */
	if (!G.det)
		(void)cudaMemPoolTrimTo(G.pool, 0);
	n = 0;
	if (!G.det && cudnnFindConvolutionForwardAlgorithm(G.dnn, p->x, p->w,
	    p->conv, p->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, fp) ==
	    CUDNN_STATUS_SUCCESS)
		FIRST_OK(fp, n, limit, j);
	else
		j = n = find_failed();
	if (j == n)
		DNN(cudnnGetConvolutionForwardAlgorithm_v7(G.dnn, p->x, p->w,
		    p->conv, p->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, fp));
	PICK(fp, n, limit, j, "forward");
	p->fwd = fp[j].algo;
	p->fwd_math = fp[j].mathType;
	p->ws = fp[j].memory;
	if (!G.det && cudnnFindConvolutionBackwardDataAlgorithm(G.dnn, p->w,
	    p->y, p->conv, p->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n,
	    dp) == CUDNN_STATUS_SUCCESS)
		FIRST_OK(dp, n, limit, j);
	else
		j = n = find_failed();
	if (j == n)
		DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(G.dnn, p->w,
		    p->y, p->conv, p->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
		    &n, dp));
	PICK(dp, n, limit, j, "backward-data");
	p->bwd_data = dp[j].algo;
	p->bwd_data_math = dp[j].mathType;
	if (dp[j].memory > p->ws)
		p->ws = dp[j].memory;
	if (!G.det && cudnnFindConvolutionBackwardFilterAlgorithm(G.dnn, p->x,
	    p->y, p->conv, p->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n,
	    wp) == CUDNN_STATUS_SUCCESS)
		FIRST_OK(wp, n, limit, j);
	else
		j = n = find_failed();
	if (j == n)
		DNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(G.dnn, p->x,
		    p->y, p->conv, p->w,
		    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, wp));
	PICK(wp, n, limit, j, "backward-filter");
	p->bwd_filter = wp[j].algo;
	p->bwd_filter_math = wp[j].mathType;
	if (wp[j].memory > p->ws)
		p->ws = wp[j].memory;
	p->used = 1;
	return p;
}

/*
 * The bf16 copy of a convolution's weights w (K,C,R,S) in G.wbuf: (K,R,S,C)
 * when the filter descriptor is NHWC (G.nhwc), else as they are.
 */
static const void *
conv_weights16(const struct conv_shape *s, const float *w)
{
	size_t nw = (size_t)s->K * s->C * s->R * s->S;
	void *d;

	if (!G.nhwc)
		return to_bf16(w, nw, 0);
	d = grown(&G.wbuf, &G.wbuf_n, nw * 2);
	cuk_nhwc_weight_to_bf16(d, w, s->K, s->C, s->R * s->S, G.stream);
	return d;
}

/*
 * The bf16 backward: data gradient accumulated in bf16 (beta 1) with the
 * bf16 weights; the weight gradient comes out in bf16 (cuDNN's filter
 * type and format are the data's) and is added into the fp32 one, back
 * in (K,C,R,S) order; the bias gradient is summed from the bf16 dout in
 * double.
 */
static void
conv_backward16(struct conv_plan *p, float *dinp, float *dw, float *dbias,
    const float *dout, const float *inp, const float *w, float *scratch)
{
	const struct conv_shape *s = &p->s;
	size_t nw = (size_t)s->K * s->C * s->R * s->S;
	const float one = 1.0f, zero = 0.0f;
	void *g;

	if (dinp != NULL) {
		DNN(cudnnSetConvolutionMathType(p->conv, p->bwd_data_math));
		DNN(cudnnConvolutionBackwardData(G.dnn, &one, p->w,
		    conv_weights16(s, w), p->y, dout, p->conv, p->bwd_data,
		    scratch, p->ws, &one, p->x, dinp));
	}
	g = grown(&G.gbuf, &G.gbuf_n, nw * 2);
	DNN(cudnnSetConvolutionMathType(p->conv, p->bwd_filter_math));
	DNN(cudnnConvolutionBackwardFilter(G.dnn, &one, p->x, inp, p->y, dout,
	    p->conv, p->bwd_filter, scratch, p->ws, &zero, p->w, g));
	if (G.nhwc)
		cuk_nhwc_acc_weight_grad(dw, g, s->K, s->C, s->R * s->S,
		    G.stream);
	else
		cuk_acc_bf16(dw, g, nw, G.stream);
	/* dout (B,P,Q,K) channels-last is a (B P Q, K) matrix */
	if (dbias != NULL && G.nhwc)
		cuk_bias_grad(dbias, dout, s->B * s->P * s->Q, s->K, G.stream);
	else if (dbias != NULL)
		cuk_bias_grad_nchw(dbias, dout, s->B, s->K, s->P * s->Q,
		    G.stream);
}

/* The model allocates the largest scratch any layer asks for, once. */
static size_t
cu_conv2d_scratch(const struct conv_shape *s)
{
	size_t ws = conv_plan(s, CONV_WS_MAX)->ws;

	if (ws > G.conv_ws)
		G.conv_ws = ws;
	return (ws + sizeof(float) - 1) / sizeof(float);
}

static void
cu_conv2d_forward(const struct conv_shape *s, float *out, const float *inp,
    const float *w, const float *bias, float *scratch)
{
	const float one = 1.0f, zero = 0.0f;
	struct conv_plan *p;

	if (s->B <= 0)
		return;
	p = conv_plan(s, G.conv_ws);
	DNN(cudnnSetConvolutionMathType(p->conv, p->fwd_math));
	DNN(cudnnConvolutionForward(G.dnn, &one, p->x, inp, p->w, G.bf16 ?
	    conv_weights16(s, w) : w, p->conv, p->fwd, scratch, p->ws, &zero,
	    p->y, out));
	if (bias != NULL && G.nhwc)	/* out (B,P,Q,K): bias per column */
		cuk_bias_add(out, bf16_bias(bias, s->K), s->B * s->P * s->Q,
		    s->K, G.stream);
	else if (bias != NULL && G.bf16)	/* rounded as a bf16 weight is */
		cuk_bias_add_nchw(out, bf16_bias(bias, s->K), s->B, s->K,
		    s->P * s->Q, G.stream);
	else if (bias != NULL)
		DNN(cudnnAddTensor(G.dnn, &one, p->bias, bias, &one, p->y, out));
}

static void
cu_conv2d_backward(const struct conv_shape *s, float *dinp, float *dw,
    float *dbias, const float *dout, const float *inp, const float *w,
    float *scratch)
{
	const float one = 1.0f;
	struct conv_plan *p;

	if (s->B <= 0)
		return;
	p = conv_plan(s, G.conv_ws);
	if (G.bf16) {
		conv_backward16(p, dinp, dw, dbias, dout, inp, w, scratch);
		return;
	}
	/* beta = 1: backward passes accumulate */
	if (dinp != NULL) {
		DNN(cudnnSetConvolutionMathType(p->conv, p->bwd_data_math));
		DNN(cudnnConvolutionBackwardData(G.dnn, &one, p->w, w, p->y,
		    dout, p->conv, p->bwd_data, scratch, p->ws, &one, p->x,
		    dinp));
	}
	DNN(cudnnSetConvolutionMathType(p->conv, p->bwd_filter_math));
	DNN(cudnnConvolutionBackwardFilter(G.dnn, &one, p->x, inp, p->y, dout,
	    p->conv, p->bwd_filter, scratch, p->ws, &one, p->w, dw));
	if (dbias != NULL)
		DNN(cudnnConvolutionBackwardBias(G.dnn, &one, p->y, dout, &one,
		    p->bias, dbias));
}

/* ------------------------------------------------------------------------ */
/* the rest: kernels.h's launchers, on the stream                           */

static void
cu_batchnorm_forward(int B, int C, int HW, float *out, const float *inp,
    const float *gamma, const float *beta, float *mean, float *rstd,
    float *run_mean, float *run_var, float momentum, float eps,
    int training, int update, const float *res, int relu)
{
	if (G.nhwc)
		cuk_nhwc_batchnorm_forward(B, C, HW, out, inp, gamma, beta,
		    mean, rstd, run_mean, run_var, momentum, eps, training,
		    update, res, relu, G.stream);
	else
		cuk_batchnorm_forward(B, C, HW, out, inp, gamma, beta, mean,
		    rstd, run_mean, run_var, momentum, eps, training, update,
		    res, relu, G.stream);
}

static void
cu_batchnorm_backward(int B, int C, int HW, float *dinp, float *dgamma,
    float *dbeta, const float *dout, const float *inp, const float *gamma,
    const float *mean, const float *rstd, float *dres, const float *out,
    int relu)
{
	if (G.nhwc)
		cuk_nhwc_batchnorm_backward(B, C, HW, dinp, dgamma, dbeta,
		    dout, inp, gamma, mean, rstd, dres, out, relu, G.stream);
	else
		cuk_batchnorm_backward(B, C, HW, dinp, dgamma, dbeta, dout,
		    inp, gamma, mean, rstd, dres, out, relu, G.stream);
}

static void
cu_relu_forward(float *out, const float *inp, size_t n)
{
	cuk_relu_forward(out, inp, n, G.stream);
}

static void
cu_relu_backward(float *dinp, const float *dout, const float *out, size_t n)
{
	cuk_relu_backward(dinp, dout, out, n, G.stream);
}

static void
cu_add_forward(float *out, const float *a, const float *b, size_t n)
{
	cuk_add_forward(out, a, b, n, G.stream);
}

static void
cu_add_backward(float *da, float *db, const float *dout, size_t n)
{
	cuk_add_backward(da, db, dout, n, G.stream);
}

static void
cu_gelu_forward(float *out, const float *inp, size_t n)
{
	cuk_gelu_forward(out, inp, n, G.stream);
}

static void
cu_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n)
{
	cuk_gelu_backward(dinp, dout, inp, n, G.stream);
}

static void
cu_maxpool_forward(const struct pool_shape *s, float *out, int32_t *idx,
    const float *inp)
{
	if (G.nhwc)
		cuk_nhwc_maxpool_forward(s, out, idx, inp, G.stream);
	else
		cuk_maxpool_forward(s, out, idx, inp, G.stream);
}

static void
cu_maxpool_backward(const struct pool_shape *s, float *dinp,
    const float *dout, const int32_t *idx)
{
	if (G.nhwc)
		cuk_nhwc_maxpool_backward(s, dinp, dout, idx, G.stream);
	else
		cuk_maxpool_backward(s, dinp, dout, idx, G.stream);
}

static void
cu_avgpool_forward(int B, int C, int HW, float *out, const float *inp)
{
	if (G.nhwc)
		cuk_nhwc_avgpool_forward(B, C, HW, out, inp, G.stream);
	else
		cuk_avgpool_forward(B, C, HW, out, inp, G.stream);
}

static void
cu_avgpool_backward(int B, int C, int HW, float *dinp, const float *dout)
{
	if (G.nhwc)
		cuk_nhwc_avgpool_backward(B, C, HW, dinp, dout, G.stream);
	else
		cuk_avgpool_backward(B, C, HW, dinp, dout, G.stream);
}

static void
cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
    const float *gamma, const float *beta, int M, int C, float eps)
{
	cuk_layernorm_forward(out, mean, rstd, inp, gamma, beta, M, C, eps,
	    G.stream);
}

static void
cu_layernorm_backward(float *dinp, float *dgamma, float *dbeta,
    const float *dout, const float *inp, const float *gamma,
    const float *mean, const float *rstd, int M, int C)
{
	cuk_layernorm_backward(dinp, dgamma, dbeta, dout, inp, gamma, mean,
	    rstd, M, C, G.stream);
}

static void
cu_patchify_forward(float *out, const float *img, int B, int C, int H, int W,
    int p)
{
	if (G.nhwc)
		cuk_nhwc_patchify_forward(out, img, B, C, H, W, p, G.stream);
	else
		cuk_patchify_forward(out, img, B, C, H, W, p, G.stream);
}

static void
cu_patchify_backward(float *dimg, const float *dout, int B, int C, int H,
    int W, int p)
{
	if (G.nhwc)
		cuk_nhwc_patchify_backward(dimg, dout, B, C, H, W, p,
		    G.stream);
	else
		cuk_patchify_backward(dimg, dout, B, C, H, W, p, G.stream);
}

static void
cu_tokens_forward(float *out, const float *x, const float *cls,
    const float *pos, int B, int T, int C)
{
	cuk_tokens_forward(out, x, cls, pos, B, T, C, G.stream);
}

static void
cu_tokens_backward(float *dx, float *dcls, float *dpos, const float *dout,
    int B, int T, int C)
{
	cuk_tokens_backward(dx, dcls, dpos, dout, B, T, C, G.stream);
}

static void
cu_token0_forward(float *out, const float *inp, int B, int T, int C)
{
	cuk_token0_forward(out, inp, B, T, C, G.stream);
}

static void
cu_token0_backward(float *dinp, const float *dout, int B, int T, int C)
{
	cuk_token0_backward(dinp, dout, B, T, C, G.stream);
}

static void
cu_xent_forward(float *losses, float *probs, const float *logits,
    const int32_t *labels, int B, int K, float smoothing)
{
	cuk_xent_forward(losses, probs, logits, labels, B, K, smoothing,
	    G.stream);
}

static void
cu_xent_backward(float *dlogits, const float *probs, const int32_t *labels,
    int B, int K, float smoothing, float scale)
{
	cuk_xent_backward(dlogits, probs, labels, B, K, smoothing, scale,
	    G.stream);
}

static void
cu_sgd_step(float *p, const float *g, float *buf, size_t n, float lr,
    float momentum, float wd, int nesterov)
{
	cuk_sgd_step(p, g, buf, n, lr, momentum, wd, nesterov, G.stream);
}

static void
cu_adamw_step(float *p, const float *g, float *m, float *v, size_t n,
    float lr, float beta1, float beta2, float eps, float wd, int t)
{
	cuk_adamw_step(p, g, m, v, n, lr, beta1, beta2, eps, wd, t, G.stream);
}

static double
cu_sumsq(const float *x, size_t n)
{
	double s = cuk_sumsq(x, n, G.sumsq_ws, G.stream);

	/* a failed copy reads NaN: say so rather than clip by it */
	CU(cudaGetLastError());
	return s;
}

static void
cu_scale(float *x, size_t n, float s)
{
	cuk_scale(x, n, s, G.stream);
}

static struct backend cuda_backend = {
	.name = "cuda",
	.act_elt = sizeof(float),	/* 2 with bf16: backend_cuda() */
	.input_from_f32 = cu_input_from_f32,
	.set_image_shape = cu_set_image_shape,
	.set_scratch = cu_set_scratch,
	.alloc = cu_alloc,
	.free = cu_free,
	.zero = cu_zero,
	.copy = cu_copy,
	.to_device = cu_to_device,
	.to_host = cu_to_host,
	.sync = cu_sync,
	.set_threads = cu_set_threads,
	.conv2d_scratch = cu_conv2d_scratch,
	.conv2d_forward = cu_conv2d_forward,
	.conv2d_backward = cu_conv2d_backward,
	.batchnorm_forward = cu_batchnorm_forward,
	.batchnorm_backward = cu_batchnorm_backward,
	.relu_forward = cu_relu_forward,
	.relu_backward = cu_relu_backward,
	.add_forward = cu_add_forward,
	.add_backward = cu_add_backward,
	.gelu_forward = cu_gelu_forward,
	.gelu_backward = cu_gelu_backward,
	.maxpool_forward = cu_maxpool_forward,
	.maxpool_backward = cu_maxpool_backward,
	.avgpool_forward = cu_avgpool_forward,
	.avgpool_backward = cu_avgpool_backward,
	.matmul_forward = cu_matmul_forward,
	.matmul_backward = cu_matmul_backward,
	.layernorm_forward = cu_layernorm_forward,
	.layernorm_backward = cu_layernorm_backward,
	.attention_forward = cu_attention_forward,
	.attention_scratch = cu_attention_scratch,
	.attention_backward = cu_attention_backward,
	.patchify_forward = cu_patchify_forward,
	.patchify_backward = cu_patchify_backward,
	.tokens_forward = cu_tokens_forward,
	.tokens_backward = cu_tokens_backward,
	.token0_forward = cu_token0_forward,
	.token0_backward = cu_token0_backward,
	.xent_forward = cu_xent_forward,
	.xent_backward = cu_xent_backward,
	.sgd_step = cu_sgd_step,
	.adamw_step = cu_adamw_step,
	.sumsq = cu_sumsq,
	.scale = cu_scale,
};

int
cuda_device_count(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return n;
}

const struct backend *
backend_cuda(int device, enum cuda_precision prec, int deterministic,
    char *err, size_t errlen)
{
	struct cudaDeviceProp prop;
	cudaError_t ce;
	int n = 0;

	if (G.ready)
		return &cuda_backend;
	G.tf32 = prec == CUDA_TF32;
	G.bf16 = prec == CUDA_BF16;
	G.det = deterministic != 0;
	/* SHARDKIT_CUDA_NCHW=1: bf16 keeps NCHW, the fallback for diagnosis */
	{
		const char *v = getenv("SHARDKIT_CUDA_NCHW");

		G.nhwc = G.bf16 && !(v != NULL && strcmp(v, "1") == 0);
		/* SHARDKIT_CUDA_SDPA=0: bf16 keeps the unfused attention */
		v = getenv("SHARDKIT_CUDA_SDPA");
		G.sdpa = G.bf16 && !(v != NULL && strcmp(v, "0") == 0);
	}
	cuda_backend.act_elt = G.bf16 ? 2 : sizeof(float);
	cuk_set_bf16(G.bf16);
	if ((ce = cudaGetDeviceCount(&n)) != cudaSuccess || n <= 0) {
		snprintf(err, errlen, "--backend cuda: no CUDA device (%s)",
		    ce != cudaSuccess ? cudaGetErrorString(ce) :
		    "none visible");
		return NULL;
	}
	if (device < 0)
		device = 0;
	if (device >= n) {
		snprintf(err, errlen, "--backend cuda: this rank is local rank "
		    "%d on its node, and only %d GPU%s visible: run at most %d "
		    "rank%s per node", device, n, n == 1 ? " is" : "s are", n,
		    n == 1 ? "" : "s");
		return NULL;
	}
	G.device = device;
	if ((ce = cudaSetDevice(G.device)) != cudaSuccess ||
	    (ce = cudaGetDeviceProperties(&prop, G.device)) != cudaSuccess) {
		snprintf(err, errlen, "--backend cuda: device %d: %s", G.device,
		    cudaGetErrorString(ce));
		return NULL;
	}
	snprintf(G.name, sizeof(G.name), "%s", prop.name);
	CU(cudaStreamCreateWithFlags(&G.stream, cudaStreamNonBlocking));
	CU(cudaStreamCreateWithFlags(&G.release, cudaStreamNonBlocking));
	CU(cudaEventCreateWithFlags(&G.ev_compute, cudaEventDisableTiming));
	CU(cudaEventCreateWithFlags(&G.ev_comm, cudaEventDisableTiming));
	CU(cudaDeviceGetDefaultMemPool(&G.pool, G.device));
	{
		uint64_t keep = UINT64_MAX;

		CU(cudaMemPoolSetAttribute(G.pool,
		    cudaMemPoolAttrReleaseThreshold, &keep));
	}
	LT(cublasLtCreate(&G.lt));
	DNN(cudnnCreate(&G.dnn));
	DNN(cudnnSetStream(G.dnn, G.stream));
	if (cudaMalloc(&G.lt_ws, LT_WORKSPACE) != cudaSuccess ||
	    cudaMalloc((void **)&G.sumsq_ws, CUK_SUMSQ_SCRATCH *
	    sizeof(double)) != cudaSuccess) {
		snprintf(err, errlen, "--backend cuda: %s: out of GPU memory "
		    "for the workspaces", G.name);
		return NULL;
	}
	G.fixed = LT_WORKSPACE + CUK_SUMSQ_SCRATCH * sizeof(double);
	G.ready = 1;
	return &cuda_backend;
}

void *
cuda_stream(void)
{
	return G.ready ? (void *)G.stream : NULL;
}

const char *
cuda_device_name(void)
{
	return G.ready ? G.name : "";
}

size_t
cuda_peak_bytes(void)
{
	uint64_t high = 0;

	if (!G.ready || cudaMemPoolGetAttribute(G.pool,
	    cudaMemPoolAttrUsedMemHigh, &high) != cudaSuccess)
		return 0;
	return (size_t)high + G.fixed;
}

void
cuda_set_comm_stream(void *stream)
{
	G.comm = (cudaStream_t)stream;
}

int
cuda_device(void)
{
	return G.ready ? G.device : -1;
}

void
cuda_wait_event(void *ev)
{
	CU(cudaEventSynchronize((cudaEvent_t)ev));
	CU(cudaStreamWaitEvent(G.stream, (cudaEvent_t)ev, 0));
}

void *
cuda_host_alloc(size_t bytes)
{
	void *p = NULL;

	if (!G.ready || bytes == 0)
		return NULL;
	if (cudaMallocHost(&p, bytes) != cudaSuccess) {
		(void)cudaGetLastError();
		return NULL;
	}
	return p;
}

void
cuda_host_free(void *p)
{
	if (p != NULL)
		CU(cudaFreeHost(p));
}

#else /* no CUDA, cuDNN or cuBLASLt in this build */

const struct backend *
backend_cuda(int device, enum cuda_precision prec, int deterministic,
    char *err, size_t errlen)
{
	(void)device;
	(void)prec;
	(void)deterministic;
	snprintf(err, errlen, "--backend cuda: this shardtrain was built "
	    "without CUDA, cuDNN and cuBLASLt (see ./configure's summary); "
	    "use --backend cpu");
	return NULL;
}

int
cuda_device_count(void)
{
	return 0;
}

void *
cuda_stream(void)
{
	return NULL;
}

const char *
cuda_device_name(void)
{
	return "";
}

size_t
cuda_peak_bytes(void)
{
	return 0;
}

void
cuda_set_comm_stream(void *stream)
{
	(void)stream;
}

int
cuda_device(void)
{
	return -1;
}

void
cuda_wait_event(void *ev)
{
	(void)ev;
}

void *
cuda_host_alloc(size_t bytes)
{
	(void)bytes;
	return NULL;
}

void
cuda_host_free(void *p)
{
	(void)p;
}

#endif
