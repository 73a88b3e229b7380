/*
 * bench/gemm.c - what the CPU backend's deterministic GEMMs cost: each
 * linear-layer GEMM of a ViT step timed as OpenBLAS splits it among its
 * own threads (fast, but its bits depend on the thread count on some CPUs)
 * and as cpu_gemm() tiles it by shape over the same number of OpenMP
 * threads with OpenBLAS single-threaded (the same bits at any count).
 *
 *   make -C build bench/gemm && build/bench/gemm [--threads N] [--reps N]
 *
 * Prints, per GEMM, the median milliseconds of each, their ratio, and
 * whether each gave the same bits at 1 and N threads; then the totals
 * over a forward and backward pass of one block.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <omp.h>

#include <cblas.h>

#include "../train/cpu/cpu.h"

void openblas_set_num_threads(int n);

struct shape {
	const char *name;
	int ta, tb, M, N, K;
};

/*
 * One block of ViT-Ti/4 at 32x32 (bench/train.sh's model: 65 tokens,
 * width 192, MLP 768) at batch 64, and of ViT-B/16 at 224x224 (197
 * tokens, width 768, MLP 3072) at batch 16: nn.Linear's forward, input
 * gradient and weight gradient for qkv, proj, fc1 and fc2.
 */
static const struct shape shapes[] = {
	{ "ti4 qkv fwd", 0, 1, 4160, 576, 192 },
	{ "ti4 qkv dinp", 0, 0, 4160, 192, 576 },
	{ "ti4 qkv dw", 1, 0, 576, 192, 4160 },
	{ "ti4 proj fwd", 0, 1, 4160, 192, 192 },
	{ "ti4 proj dinp", 0, 0, 4160, 192, 192 },
	{ "ti4 proj dw", 1, 0, 192, 192, 4160 },
	{ "ti4 fc1 fwd", 0, 1, 4160, 768, 192 },
	{ "ti4 fc1 dinp", 0, 0, 4160, 192, 768 },
	{ "ti4 fc1 dw", 1, 0, 768, 192, 4160 },
	{ "ti4 fc2 fwd", 0, 1, 4160, 192, 768 },
	{ "ti4 fc2 dinp", 0, 0, 4160, 768, 192 },
	{ "ti4 fc2 dw", 1, 0, 192, 768, 4160 },
	{ "b16 qkv fwd", 0, 1, 3152, 2304, 768 },
	{ "b16 qkv dinp", 0, 0, 3152, 768, 2304 },
	{ "b16 qkv dw", 1, 0, 2304, 768, 3152 },
	{ "b16 fc1 fwd", 0, 1, 3152, 3072, 768 },
	{ "b16 fc1 dinp", 0, 0, 3152, 768, 3072 },
	{ "b16 fc1 dw", 1, 0, 3072, 768, 3152 },
};

static double
now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* C = op(A) op(B), by OpenBLAS on n threads (tiled == 0) or cpu_gemm(). */
static void
run(const struct shape *s, int tiled, int n, const float *A, const float *B,
    float *C)
{
	int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;

	if (tiled) {
		backend_cpu()->set_threads(n);
		cpu_gemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, A, lda, B, ldb,
		    0.0f, C, s->N);
	} else {
		openblas_set_num_threads(n);
		omp_set_num_threads(n);
		cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
		    s->tb ? CblasTrans : CblasNoTrans, s->M, s->N, s->K, 1.0f,
		    A, lda, B, ldb, 0.0f, C, s->N);
	}
}

/* Median milliseconds of reps runs, after one warm-up. */
static double
time_ms(const struct shape *s, int tiled, int n, int reps, const float *A,
    const float *B, float *C)
{
	double t[64], t0;
	int r;

	run(s, tiled, n, A, B, C);
	for (r = 0; r < reps; r++) {
		t0 = now();
		run(s, tiled, n, A, B, C);
		t[r] = (now() - t0) * 1e3;
	}
	qsort(t, reps, sizeof t[0], cmp_double);
	return t[reps / 2];
}

static float *
frandom(size_t n, unsigned *seed)
{
	float *p = malloc(n * sizeof *p);

	if (p == NULL) {
		perror("gemm");
		exit(1);
	}
	for (size_t i = 0; i < n; i++) {
		*seed = *seed * 1664525u + 1013904223u;
		p[i] = (float)(*seed >> 8) / (1 << 24) - 0.5f;
	}
	return p;
}

/* Same bits at 1 and n threads? */
static const char *
same_bits(const struct shape *s, int tiled, int n, const float *A,
    const float *B, float *C1, float *Cn)
{
	size_t nc = (size_t)s->M * s->N;

	run(s, tiled, 1, A, B, C1);
	run(s, tiled, n, A, B, Cn);
	return memcmp(C1, Cn, nc * sizeof(float)) == 0 ? "yes" : "NO";
}

int
main(int argc, char **argv)
{
	int threads = omp_get_num_procs(), reps = 9, i;
	double tot[2][2] = { { 0 } };
	unsigned seed = 1;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
			reps = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: gemm [--threads N] [--reps N]\n");
			return 2;
		}
	}
	if (threads < 1 || reps < 1 || reps > 64) {
		fprintf(stderr, "gemm: --threads >= 1, 1 <= --reps <= 64\n");
		return 2;
	}
	printf("OpenBLAS %s, core %s; %d threads, median of %d\n\n",
	    cpu_blas_config(), cpu_blas_core(), threads, reps);
	printf("%-14s %6s %6s %6s  %9s %9s %6s  %s\n", "GEMM", "M", "N", "K",
	    "OpenBLAS", "tiled", "ratio", "same bits 1/N: OpenBLAS tiled");
	for (i = 0; i < (int)(sizeof shapes / sizeof shapes[0]); i++) {
		const struct shape *s = &shapes[i];
		size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N;
		size_t nc = (size_t)s->M * s->N;
		float *A = frandom(na, &seed), *B = frandom(nb, &seed);
		float *C1 = frandom(nc, &seed), *Cn = frandom(nc, &seed);
		double ob, tl;
		const char *sb_ob, *sb_tl;
		int big = s->name[0] == 'b';

		sb_ob = same_bits(s, 0, threads, A, B, C1, Cn);
		sb_tl = same_bits(s, 1, threads, A, B, C1, Cn);
		ob = time_ms(s, 0, threads, reps, A, B, Cn);
		tl = time_ms(s, 1, threads, reps, A, B, Cn);
		tot[big][0] += ob;
		tot[big][1] += tl;
		printf("%-14s %6d %6d %6d  %7.2fms %7.2fms %5.2fx  %s %s\n",
		    s->name, s->M, s->N, s->K, ob, tl, ob / tl, sb_ob, sb_tl);
		free(A), free(B), free(C1), free(Cn);
	}
	printf("\n%-14s %22s %7.2fms %7.2fms %5.2fx\n", "ti4 block", "",
	    tot[0][0], tot[0][1], tot[0][0] / tot[0][1]);
	printf("%-14s %22s %7.2fms %7.2fms %5.2fx\n", "b16 (part)", "",
	    tot[1][0], tot[1][1], tot[1][0] / tot[1][1]);
	return 0;
}
