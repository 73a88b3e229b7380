/*
 * matmul.c - the linear layer on the CPU: out = inp . w^T + bias as one
 * tiled GEMM (nn.Linear's layout, weight (N,K)), and its backward as two
 * GEMMs plus a column sum for the bias.
 */
#include "config.h"

#include <stddef.h>
#include <string.h>

#include "cpu.h"

/* Columns one thread sums for the bias gradient: few enough that the
 * accumulators stay in registers, many enough to read whole cache lines. */
#define DBIAS_COLS 32

/* ------------------------------------------------------------------------ */
/* forward                                                                  */

// inp (M,K), w (N,K), bias (N) or NULL -> out (M,N)
void
cpu_matmul_forward(float *out, const float *inp, const float *w,
    const float *bias, int M, int K, int N)
{
	float beta = 0.0f;
	int i;

	if (M <= 0 || N <= 0)
		return;
	if (bias != NULL) {
		/* Start from the bias and let the GEMM add the product, as
		 * PyTorch's addmm does. */
#pragma omp parallel for schedule(static) if ((size_t)M * N > CPU_PAR_MIN)
		for (i = 0; i < M; i++)
			memcpy(out + (size_t)i * N, bias,
			    (size_t)N * sizeof *out);
		beta = 1.0f;
	}
	if (K <= 0) {
		if (bias == NULL)
			memset(out, 0, (size_t)M * N * sizeof *out);
		return;
	}
	cpu_gemm(0, 1, M, N, K, 1.0f, inp, K, w, K, beta, out, N);
}

/* ------------------------------------------------------------------------ */
/* backward                                                                 */

/*
 * dbias (N) += column sums of dout (M,N). Each thread owns whole columns
 * and adds the rows in order 0..M-1 in double, so the bits do not depend
 * on the thread count.
 */
static void
bias_backward(float *dbias, const float *dout, int M, int N)
{
	int nblk = (N + DBIAS_COLS - 1) / DBIAS_COLS, blk;

#pragma omp parallel for schedule(static) if ((size_t)M * N > CPU_PAR_MIN)
	for (blk = 0; blk < nblk; blk++) {
		double acc[DBIAS_COLS];
		int j0 = blk * DBIAS_COLS, nj = N - j0, i, j;

		if (nj > DBIAS_COLS)
			nj = DBIAS_COLS;
		for (j = 0; j < nj; j++)
			acc[j] = 0.0;
		for (i = 0; i < M; i++) {
			const float *row = dout + (size_t)i * N + j0;

			for (j = 0; j < nj; j++)
				acc[j] += row[j];
		}
		for (j = 0; j < nj; j++)
			dbias[j0 + j] += (float)acc[j];
	}
}

// dout (M,N) -> dinp (M,K) or NULL, dw (N,K), dbias (N) or NULL; all +=
void
cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
    const float *inp, const float *w, int M, int K, int N)
{
	if (M <= 0 || N <= 0)
		return;
	if (K > 0) {
		/* dinp (M,K) += dout (M,N) . w (N,K) */
		if (dinp != NULL)
			cpu_gemm(0, 0, M, K, N, 1.0f, dout, N, w, K, 1.0f,
			    dinp, K);
		/* dw (N,K) += dout^T (N,M) . inp (M,K) */
		cpu_gemm(1, 0, N, K, M, 1.0f, dout, N, inp, K, 1.0f, dw, K);
	}
	if (dbias != NULL)
		bias_backward(dbias, dout, M, N);
}
