/*
 * cpu.c - the fp32 CPU backend: memory, thread count and the kernel table.
 * Memory is plain host memory, 64-byte aligned so the GEMMs and the
 * vectorised loops start on a cache line.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <cblas.h>

#include "cpu.h"

/* OpenBLAS's own knobs; cblas.h declares them in OpenBLAS builds only. */
int openblas_get_parallel(void);
void openblas_set_num_threads(int n);
char *openblas_get_corename(void);
char *openblas_get_config(void);

#ifndef OPENBLAS_OPENMP		/* openblas_get_parallel(): the OpenMP build */
#define OPENBLAS_OPENMP	2
#endif

/* Below this many multiply-adds a tiled GEMM runs on the calling thread. */
#define GEMM_PAR_MIN	((size_t)1 << 18)

static int nthreads = 1;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
/* OpenBLAS's OpenMP build, and ours: it threads a GEMM called outside an
 * active parallel region unless blas_serial_begin() says not to. */
static int blas_follows_omp;
/* Open blas_serial_begin() calls and OpenMP's thread count before the
 * first; only serial code touches them. */
static int serial_depth, serial_saved;

/*
 * GEMM time, in thread-seconds: every GEMM runs on one thread (a tile of
 * cpu_gemm() or of a convolution, an attention head) and counts on that
 * thread only. Each thread adds into its own cache line.
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

static int
in_parallel(void)
{
#ifdef _OPENMP
	return omp_in_parallel();
#else
	return 0;
#endif
}

/* ------------------------------------------------------------------------ */
/* GEMMs: OpenBLAS always single-threaded, the tiles ours                   */

/*
 * OpenBLAS never splits a GEMM among threads here. How it would split one
 * (and so which kernel computes an element, and where the K blocking
 * rounds it) depends on the CPU model and the thread count: with its
 * Haswell, Zen or Prescott kernels a 260x576x192 GEMM gives other bits on
 * 2 threads than on 1. Its pthread build is set to one thread for good.
 * Its OpenMP build is serial inside an active parallel region by itself;
 * outside one it takes OpenMP's count, so a GEMM there is bracketed by
 * blas_serial_begin() and _end(). openblas_set_num_threads() in that build
 * sets OpenMP's count too, which the end of the bracket puts back.
 * One pool then does all the work: OpenBLAS's own threads running GEMMs
 * between OpenMP loops would fight the OpenMP threads for the cores
 * (libgomp's idle threads spin for milliseconds).
 */
static void
blas_init(void)
{
#ifdef _OPENMP
	blas_follows_omp = openblas_get_parallel() == OPENBLAS_OPENMP;
#endif
	if (!blas_follows_omp)
		openblas_set_num_threads(1);
}

static void
blas_serial_begin(void)
{
	pthread_once(&blas_once, blas_init);
	if (!blas_follows_omp || in_parallel() || serial_depth++ > 0)
		return;
#ifdef _OPENMP
	serial_saved = omp_get_max_threads();
#endif
	if (serial_saved > 1)
		openblas_set_num_threads(1);
}

static void
blas_serial_end(void)
{
	if (!blas_follows_omp || in_parallel() || --serial_depth > 0)
		return;
	if (serial_saved > 1) {
		openblas_set_num_threads(serial_saved);
#ifdef _OPENMP
		omp_set_num_threads(serial_saved);
#endif
	}
}

void
cpu_sgemm(int order, int transa, int transb, int M, int N, int K,
    float alpha, const float *A, int lda, const float *B, int ldb,
    float beta, float *C, int ldc)
{
	struct timespec t0;
	int slot = 0;

#ifdef _OPENMP
	slot = omp_get_thread_num() % GEMM_SLOTS;
#endif
	blas_serial_begin();
	clock_gettime(CLOCK_MONOTONIC, &t0);
	cblas_sgemm((enum CBLAS_ORDER)order, (enum CBLAS_TRANSPOSE)transa,
	    (enum CBLAS_TRANSPOSE)transb, M, N, K, alpha, A, lda, B, ldb, beta,
	    C, ldc);
	gemm_seconds[slot].s += elapsed(&t0);
	blas_serial_end();
}

/* Tile t of dim cut into nt tiles of a multiple of gran; the last may be
 * shorter, and rounding up may leave fewer than nt. */
static int
tile_span(int dim, int nt, int gran, int t, int *lo, int *len)
{
	int per = ((dim + nt - 1) / nt + gran - 1) / gran * gran;

	if (t * per >= dim)
		return 0;
	*lo = t * per;
	*len = dim - *lo < per ? dim - *lo : per;
	return 1;
}

int
cpu_tile(int dim, int t, int *lo, int *len)
{
	int nt = dim / CPU_TILE_MIN;

	if (nt > CPU_TILES)
		nt = CPU_TILES;
	return tile_span(dim, nt < 1 ? 1 : nt, 16, t, lo, len);
}

/*
 * Tile t of a GEMM's output side of length dim: [*lo, *lo + *len), 0 when
 * there is no tile t. Unlike cpu_tile() (conv's, tuned with its plans) the
 * count is a power of two, at most CPU_TILES, and the tiles are as equal
 * as gran allows, so 2, 4, 8 or 16 threads share them evenly: with conv's
 * rule a 192- or 576-wide output was cut into 3 or 9 tiles and on 2
 * threads one waited for the other (a weight gradient ran at 0.76x of
 * OpenBLAS's own split; bench/gemm.c). gran is the width of OpenBLAS's
 * micro-tiles that way: 4 rows, 16 columns of a row-major output.
 */
static int
gemm_tile(int dim, int gran, int t, int *lo, int *len)
{
	int nt = 1;

	while (nt * 2 <= CPU_TILES && dim / (nt * 2) >= CPU_TILE_MIN)
		nt *= 2;
	return tile_span(dim, nt, gran, t, lo, len);
}

/*
 * The output is cut along its longer side, so each tile re-reads (and
 * OpenBLAS re-packs) the smaller of the operands it shares with the others.
 */
void
cpu_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A,
    int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
	int byrows = M >= N, par, t;
	size_t macs = (size_t)M * N * K;

	if (M <= 0 || N <= 0)
		return;
	par = nthreads > 1 && !in_parallel() && macs >= GEMM_PAR_MIN;
	if (!par)
		blas_serial_begin();
#pragma omp parallel for schedule(dynamic, 1) if (par)
	for (t = 0; t < CPU_TILES; t++) {
		int lo, len;

		if (!gemm_tile(byrows ? M : N, byrows ? 4 : 16, t, &lo, &len))
			continue;
		if (byrows)
			cpu_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
			    tb ? CblasTrans : CblasNoTrans, len, N, K, alpha,
			    ta ? A + lo : A + (size_t)lo * lda, lda, B, ldb,
			    beta, C + (size_t)lo * ldc, ldc);
		else
			cpu_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
			    tb ? CblasTrans : CblasNoTrans, M, len, K, alpha,
			    A, lda, tb ? B + (size_t)lo * ldb : B + lo, ldb,
			    beta, C + lo, ldc);
	}
	if (!par)
		blas_serial_end();
}

const char *
cpu_blas_core(void)
{
	const char *s = openblas_get_corename();

	return s != NULL ? s : "unknown";
}

const char *
cpu_blas_config(void)
{
	const char *s = openblas_get_config();

	return s != NULL ? s : "unknown";
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

/* ------------------------------------------------------------------------ */
/* threads and memory                                                       */

int
cpu_threads(void)
{
	return nthreads;
}

static void
cpu_set_threads(int n)
{
	if (n < 1)
		n = 1;
	nthreads = n;
	pthread_once(&blas_once, blas_init);
	if (blas_follows_omp)
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

static void
cpu_input_from_f32(float *dst, const float *x, size_t n)
{
	cpu_copy(dst, x, n * sizeof(float));
}

static const struct backend cpu = {
	.name = "cpu",
	.act_elt = sizeof(float),
	.input_from_f32 = cpu_input_from_f32,
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
