/*
 * cpu.c - the fp32 CPU backend: memory, thread count and the kernel table.
 * Memory is plain host memory, 64-byte aligned so the GEMMs and the
 * vectorised loops start on a cache line.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <cblas.h>

#include "cpu.h"

/* OpenBLAS's own knob; cblas.h declares it in OpenBLAS builds only. */
void openblas_set_num_threads(int n);

static int nthreads = 1;
/*
 * GEMM time, in thread-seconds: a GEMM called from serial code runs on
 * every thread (OpenBLAS's OpenMP build shares the kernels' pool), so its
 * wall time counts once per thread; one called inside a parallel loop
 * (conv's tiles, attention's heads) counts on its own thread only. Each
 * thread adds into its own cache line.
 */
#define GEMM_SLOTS 256
static struct {
	double s;
	char pad[56];
} gemm_seconds[GEMM_SLOTS];

static double
elapsed(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (t1.tv_sec - t0->tv_sec) + (t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

void
cpu_sgemm(int order, int transa, int transb, int M, int N, int K,
    float alpha, const float *A, int lda, const float *B, int ldb,
    float beta, float *C, int ldc)
{
	struct timespec t0;
	int slot = 0, weight = nthreads;

#ifdef _OPENMP
	if (omp_in_parallel()) {
		slot = omp_get_thread_num() % GEMM_SLOTS;
		weight = 1;
	}
#endif
	clock_gettime(CLOCK_MONOTONIC, &t0);
	cblas_sgemm((enum CBLAS_ORDER)order, (enum CBLAS_TRANSPOSE)transa,
	    (enum CBLAS_TRANSPOSE)transb, M, N, K, alpha, A, lda, B, ldb, beta,
	    C, ldc);
	gemm_seconds[slot].s += weight * elapsed(&t0);
}

double
cpu_gemm_seconds(void)
{
	double s = 0;
	int i;

	for (i = 0; i < GEMM_SLOTS; i++)
		s += gemm_seconds[i].s;
	return s / nthreads;
}

int
cpu_threads(void)
{
	return nthreads;
}

static void
cpu_set_threads(int n)
{
	if (n <= 0) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);
		n = c > 0 ? (int)c : 1;
	}
	nthreads = n;
	openblas_set_num_threads(n);
#ifdef _OPENMP
	omp_set_num_threads(n);
#endif
}

static void *
cpu_alloc(size_t bytes)
{
	void *p;

	bytes = (bytes + 63) & ~(size_t)63;
	if (bytes == 0)
		bytes = 64;
	if (posix_memalign(&p, 64, bytes) != 0)
		return NULL;
	memset(p, 0, bytes);
	return p;
}

static void
cpu_free(void *p)
{
	free(p);
}

static void
cpu_zero(void *p, size_t bytes)
{
	if (bytes > 0)		/* an empty tensor may have no memory at all */
		memset(p, 0, bytes);
}

static void
cpu_copy(void *dst, const void *src, size_t bytes)
{
	if (dst != src && bytes > 0)
		memmove(dst, src, bytes);
}

static void
cpu_sync(void)
{
}

static const struct backend cpu = {
	.name = "cpu",
	.alloc = cpu_alloc,
	.free = cpu_free,
	.zero = cpu_zero,
	.copy = cpu_copy,
	.to_device = cpu_copy,
	.to_host = cpu_copy,
	.sync = cpu_sync,
	.set_threads = cpu_set_threads,
	.conv2d_scratch = cpu_conv2d_scratch,
	.conv2d_forward = cpu_conv2d_forward,
	.conv2d_backward = cpu_conv2d_backward,
	.batchnorm_forward = cpu_batchnorm_forward,
	.batchnorm_backward = cpu_batchnorm_backward,
	.relu_forward = cpu_relu_forward,
	.relu_backward = cpu_relu_backward,
	.add_forward = cpu_add_forward,
	.add_backward = cpu_add_backward,
	.gelu_forward = cpu_gelu_forward,
	.gelu_backward = cpu_gelu_backward,
	.maxpool_forward = cpu_maxpool_forward,
	.maxpool_backward = cpu_maxpool_backward,
	.avgpool_forward = cpu_avgpool_forward,
	.avgpool_backward = cpu_avgpool_backward,
	.matmul_forward = cpu_matmul_forward,
	.matmul_backward = cpu_matmul_backward,
	.layernorm_forward = cpu_layernorm_forward,
	.layernorm_backward = cpu_layernorm_backward,
	.attention_forward = cpu_attention_forward,
	.attention_scratch = cpu_attention_scratch,
	.attention_backward = cpu_attention_backward,
	.patchify_forward = cpu_patchify_forward,
	.patchify_backward = cpu_patchify_backward,
	.tokens_forward = cpu_tokens_forward,
	.tokens_backward = cpu_tokens_backward,
	.token0_forward = cpu_token0_forward,
	.token0_backward = cpu_token0_backward,
	.xent_forward = cpu_xent_forward,
	.xent_backward = cpu_xent_backward,
	.sgd_step = cpu_sgd_step,
	.adamw_step = cpu_adamw_step,
	.sumsq = cpu_sumsq,
	.scale = cpu_scale,
};

const struct backend *
backend_cpu(void)
{
	return &cpu;
}
