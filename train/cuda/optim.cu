/*
 * optim.cu - the optimizer updates (SGD, AdamW and the scale x *= s),
 * update.c's arithmetic op for op, and the sum of squares behind the
 * gradient's norm. Launchers at the end, declared in kernels.h.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels.h"
#include "common.cuh"

/* ------------------------------------------------------------------------ */
/* optimizer updates                                                        */

/* update.c's sgd_run, op for op */
static __global__ void
sgd_kernel(float *p, const float *g, float *buf, size_t n, float lr,
    float momentum, float wd, int decay, int mom, int nesterov)
{
	GRID_LOOP(i, n) {
		float d = g[i], b;

		if (decay)
			d = __fadd_rn(d, __fmul_rn(wd, p[i]));
		if (mom) {
			b = __fmul_rn(buf[i], momentum);
			b = __fadd_rn(b, d);
			buf[i] = b;
			d = nesterov ? __fadd_rn(d, __fmul_rn(momentum, b)) : b;
		}
		p[i] = __fadd_rn(p[i], __fmul_rn(-lr, d));
	}
}

/* update.c's AdamW loop, op for op; the scalars come from the host */
static __global__ void
adamw_kernel(float *p, const float *g, float *m, float *v, size_t n,
    float beta1, float beta2, float eps, float decay, float a1, float a2,
    float step, float bc2s)
{
	GRID_LOOP(i, n) {
		float gi = g[i], mi, vi, denom;

		mi = __fmul_rn(m[i], beta1);
		mi = __fadd_rn(mi, __fmul_rn(a1, gi));
		vi = __fmul_rn(v[i], beta2);
		vi = __fadd_rn(vi, __fmul_rn(__fmul_rn(a2, gi), gi));
		m[i] = mi;
		v[i] = vi;
		denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2s), eps);
		p[i] = __fadd_rn(__fmul_rn(p[i], decay),
		    __fdiv_rn(__fmul_rn(step, mi), denom));
	}
}

static __global__ void
scale_kernel(float *x, size_t n, float s)
{
	GRID_LOOP(i, n)
		x[i] = __fmul_rn(x[i], s);
}

/* ------------------------------------------------------------------------ */
/* sum of squares                                                           */

/* part[blockIdx.x] = this block's share of sum x^2, in double */
static __global__ void __launch_bounds__(NT)
sumsq_part_kernel(double *part, const float *x, size_t n)
{
	__shared__ double sh[32];
	double s = 0.0;

	GRID_LOOP(i, n) {
		double v = x[i];

		s += v * v;
	}
	s = block_sum(s, sh);
	if (threadIdx.x == 0)
		part[blockIdx.x] = s;
}

/* part[0] = sum of part[0..nb): every read is done before the write */
static __global__ void __launch_bounds__(NT)
sumsq_final_kernel(double *part, int nb)
{
	__shared__ double sh[32];
	double s = 0.0;

	for (int i = threadIdx.x; i < nb; i += blockDim.x)
		s += part[i];
	s = block_sum(s, sh);
	if (threadIdx.x == 0)
		part[0] = s;
}

/* ------------------------------------------------------------------------ */
/* launchers                                                                */

extern "C" void
cuk_sgd_step(float *p, const float *g, float *buf, size_t n, float lr,
    float momentum, float wd, int nesterov, void *stream)
{
	if (n == 0)
		return;
	sgd_kernel<<<blocks_for(n), NT, 0, (cudaStream_t)stream>>>(p, g, buf,
	    n, lr, momentum, wd, wd != 0.0f, momentum != 0.0f, nesterov);
}

/* The scalars as update.c computes them: in double, rounded to float. */
extern "C" void
cuk_adamw_step(float *p, const float *g, float *m, float *v, size_t n,
    float lr, float beta1, float beta2, float eps, float wd, int t,
    void *stream)
{
	double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
	float decay = (float)(1.0 - (double)lr * wd);
	float a1 = (float)(1.0 - beta1), a2 = (float)(1.0 - beta2);
	float step = (float)(-(double)lr / bc1);
	float bc2s = (float)sqrt(bc2);

	if (n == 0)
		return;
	adamw_kernel<<<blocks_for(n), NT, 0, (cudaStream_t)stream>>>(p, g, m,
	    v, n, beta1, beta2, eps, decay, a1, a2, step, bc2s);
}

extern "C" void
cuk_scale(float *x, size_t n, float s, void *stream)
{
	if (n == 0)
		return;
	scale_kernel<<<blocks_for(n), NT, 0, (cudaStream_t)stream>>>(x, n, s);
}

/*
 * The grid depends on n alone (at most CUK_SUMSQ_SCRATCH blocks, each at
 * least 8 floats a thread), and both stages add in a fixed tree, so the
 * result is the same on every run.
 */
extern "C" double
cuk_sumsq(const float *x, size_t n, double *dev_scratch, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	size_t nb = (n + NT * 8 - 1) / (NT * 8);
	double sum = 0.0;

	if (n == 0) {
		/* nothing queued, but the caller may count on the sync */
		return cudaStreamSynchronize(st) == cudaSuccess ? 0.0 : NAN;
	}
	if (nb > CUK_SUMSQ_SCRATCH)
		nb = CUK_SUMSQ_SCRATCH;
	sumsq_part_kernel<<<(unsigned)nb, NT, 0, st>>>(dev_scratch, x, n);
	sumsq_final_kernel<<<1, NT, 0, st>>>(dev_scratch, (int)nb);
	if (cudaMemcpyAsync(&sum, dev_scratch, sizeof sum,
	    cudaMemcpyDeviceToHost, st) != cudaSuccess)
		return NAN;
	if (cudaStreamSynchronize(st) != cudaSuccess)
		return NAN;
	return sum;
}
