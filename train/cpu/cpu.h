/*
 * cpu.h - the fp32 CPU backend's kernels, one family per file: conv.c,
 * pool.c, batchnorm.c, eltwise.c, matmul.c, layernorm.c, attention.c,
 * embed.c, loss.c, update.c. cpu.c holds memory, threads and the table.
 * Each kernel has the contract written next to its slot in backend.h.
 */
#ifndef SK_TRAIN_CPU_H
#define SK_TRAIN_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "../backend.h"

/* Below this many elements a loop runs on one thread: waking the team
 * costs more than the work, and a team member the loader's threads have
 * pushed off a core stalls the whole loop. */
#define CPU_PAR_MIN	32768

/* Threads the kernels may use (OpenMP and OpenBLAS agree on it). */
int cpu_threads(void);

/*
 * GEMMs. OpenBLAS runs single-threaded; parallel GEMMs are cut into tiles
 * whose sizes depend on the shape alone, so an element is computed by the
 * same single-threaded call at any thread count (shardtrain(1),
 * DETERMINISM). Tiles are at most CPU_TILES along one side of the output,
 * each at least CPU_TILE_MIN long unless the side is shorter: conv's a
 * multiple of 16 (cpu_tile()), cpu_gemm()'s a power of two in number.
 */
#define CPU_TILES	16
#define CPU_TILE_MIN	64

/* Tile t of [0, dim): [*lo, *lo + *len); 0 when there is no tile t. */
int cpu_tile(int dim, int t, int *lo, int *len);

/* One cblas_sgemm, single-threaded on the calling thread, timed so a run
 * can report how much of its step time BLAS took. */
void cpu_sgemm(int order, int transa, int transb, int M, int N, int K,
    float alpha, const float *A, int lda, const float *B, int ldb,
    float beta, float *C, int ldc);

/* C (M,N) = alpha op(A) (M,K) . op(B) (K,N) + beta C, row-major, from
 * serial code: the tiles go to the kernel threads. */
void cpu_gemm(int ta, int tb, int M, int N, int K, float alpha,
    const float *A, int lda, const float *B, int ldb, float beta, float *C,
    int ldc);
/* The kernel set OpenBLAS chose for this CPU (or OPENBLAS_CORETYPE):
 * "Haswell", "Zen", "SkylakeX", ... Bits differ between kernel sets. */
const char *cpu_blas_core(void);
/* OpenBLAS's build line: version, DYNAMIC_ARCH (OPENBLAS_CORETYPE works
 * only then), the default core, MAX_THREADS. */
const char *cpu_blas_config(void);
/* Seconds of the whole thread team's time spent in cpu_sgemm since the
 * process started, divided by the team's size: comparable with wall time. */
double cpu_gemm_seconds(void);

/* attention.c's helpers, shared with the bf16 emulation (bf16.c): the
 * threads for a loop over (b,h) pairs, and one row of scores turned into
 * probabilities in place (max subtracted first, the sum in double). */
int cpu_attention_team(int pairs, int cap);
void cpu_softmax_row(float *x, int n);

size_t cpu_conv2d_scratch(const struct conv_shape *s);
void cpu_conv2d_forward(const struct conv_shape *s, float *out, const float
    *inp, const float *w, const float *bias, float *scratch);
void cpu_conv2d_backward(const struct conv_shape *s, float *dinp, float *dw,
    float *dbias, const float *dout, const float *inp, const float *w, float
    *scratch);
void cpu_batchnorm_forward(int B, int C, int HW, float *out, const float *inp,
    const float *gamma, const float *beta, float *mean, float *rstd, float
    *run_mean, float *run_var, float momentum, float eps, int training, int
    update, const float *res, int relu);
void cpu_batchnorm_backward(int B, int C, int HW, float *dinp, float *dgamma,
    float *dbeta, const float *dout, const float *inp, const float *gamma,
    const float *mean, const float *rstd, float *dres, const float *out,
    int relu);
void cpu_relu_forward(float *out, const float *inp, size_t n);
void cpu_relu_backward(float *dinp, const float *dout, const float *out,
    size_t n);
void cpu_add_forward(float *out, const float *a, const float *b, size_t n);
void cpu_add_backward(float *da, float *db, const float *dout, size_t n);
void cpu_gelu_forward(float *out, const float *inp, size_t n);
void cpu_gelu_backward(float *dinp, const float *dout, const float *inp,
    size_t n);
void cpu_maxpool_forward(const struct pool_shape *s, float *out, int32_t *idx,
    const float *inp);
void cpu_maxpool_backward(const struct pool_shape *s, float *dinp, const float
    *dout, const int32_t *idx);
void cpu_avgpool_forward(int B, int C, int HW, float *out, const float *inp);
void cpu_avgpool_backward(int B, int C, int HW, float *dinp, const float
    *dout);
void cpu_matmul_forward(float *out, const float *inp, const float *w, const
    float *bias, int M, int K, int N);
void cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float
    *dout, const float *inp, const float *w, int M, int K, int N);
void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float
    *inp, const float *gamma, const float *beta, int M, int C, float eps);
void cpu_layernorm_backward(float *dinp, float *dgamma, float *dbeta, const
    float *dout, const float *inp, const float *gamma, const float *mean,
    const float *rstd, int M, int C);
void cpu_attention_forward(float *out, float *att, const float *qkv, int B,
    int T, int C, int NH);
size_t cpu_attention_scratch(int B, int T, int C, int NH);
void cpu_attention_backward(float *dqkv, float *scratch, const float *dout,
    const float *qkv, const float *att, int B, int T, int C, int NH);
void cpu_patchify_forward(float *out, const float *img, int B, int C, int H,
    int W, int p);
void cpu_patchify_backward(float *dimg, const float *dout, int B, int C, int
    H, int W, int p);
void cpu_tokens_forward(float *out, const float *x, const float *cls, const
    float *pos, int B, int T, int C);
void cpu_tokens_backward(float *dx, float *dcls, float *dpos, const float
    *dout, int B, int T, int C);
void cpu_token0_forward(float *out, const float *inp, int B, int T, int C);
void cpu_token0_backward(float *dinp, const float *dout, int B, int T, int C);
void cpu_xent_forward(float *losses, float *probs, const float *logits, const
    int32_t *labels, int B, int K, float smoothing);
void cpu_xent_backward(float *dlogits, const float *probs, const int32_t
    *labels, int B, int K, float smoothing, float scale);
void cpu_sgd_step(float *p, const float *g, float *buf, size_t n, float lr,
    float momentum, float wd, int nesterov);
void cpu_adamw_step(float *p, const float *g, float *m, float *v, size_t n,
    float lr, float beta1, float beta2, float eps, float wd, int t);
double cpu_sumsq(const float *x, size_t n);
void cpu_scale(float *x, size_t n, float s);

#endif /* SK_TRAIN_CPU_H */
