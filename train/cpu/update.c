/*
 * update.c - the optimizer updates on the CPU, element by element in the
 * order PyTorch's single-tensor (foreach=False) torch.optim.SGD and
 * torch.optim.AdamW apply their tensor ops, so fp32 results agree to a few
 * ulps. (The sum of squares and the scaling for gradient clipping are in
 * eltwise.c.)
 */
#include "config.h"

#include <math.h>
#include <stddef.h>

#include "cpu.h"

/* Below this many floats a parameter is updated on one thread: waking the
 * team would cost more than the loop. */
#define PAR_MIN 16384

/* ------------------------------------------------------------------------ */
/* SGD                                                                      */

/*
 * torch.optim.SGD, dampening 0 (PyTorch 1.13 _single_tensor_sgd):
 *   d = g.add(p, alpha=wd)
 *   buf = clone(d) at the first step, else buf.mul_(momentum).add_(d)
 *   d = d.add(buf, alpha=momentum) if nesterov else buf
 *   p.add_(d, alpha=-lr)
 * buf starts at zero, so momentum * 0 + d is the clone. With momentum 0
 * there is no buffer and buf may be NULL.
 *
 * One loop per case, the flags constants after inlining: a branch inside
 * keeps the compiler from vectorising the loop, and this pass over three
 * vectors the size of the model is the optimizer's whole cost.
 */
static inline __attribute__((always_inline)) void
sgd_run(float *restrict p, const float *restrict g, float *restrict buf,
    size_t lo, size_t hi, float lr, float momentum, float wd, int decay,
    int mom, int nesterov)
{
	for (size_t i = lo; i < hi; i++) {
		float d = g[i], b;

		if (decay)
			d = d + wd * p[i];
		if (mom) {
			b = buf[i] * momentum;
			b = b + d;
			buf[i] = b;
			d = nesterov ? d + momentum * b : b;
		}
		p[i] = p[i] + -lr * d;
	}
}

#define SGD_BLK 8192

void
cpu_sgd_step(float *p, const float *g, float *buf, size_t n, float lr,
    float momentum, float wd, int nesterov)
{
	long nblk = (long)((n + SGD_BLK - 1) / SGD_BLK);
	int decay = wd != 0.0f, mom = momentum != 0.0f;

#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
	for (long j = 0; j < nblk; j++) {
		size_t lo = (size_t)j * SGD_BLK;
		size_t hi = lo + SGD_BLK < n ? lo + SGD_BLK : n;

		if (decay && mom && nesterov)
			sgd_run(p, g, buf, lo, hi, lr, momentum, wd, 1, 1, 1);
		else if (decay && mom)
			sgd_run(p, g, buf, lo, hi, lr, momentum, wd, 1, 1, 0);
		else if (decay)
			sgd_run(p, g, buf, lo, hi, lr, momentum, wd, 1, 0, 0);
		else if (mom && nesterov)
			sgd_run(p, g, buf, lo, hi, lr, momentum, wd, 0, 1, 1);
		else if (mom)
			sgd_run(p, g, buf, lo, hi, lr, momentum, wd, 0, 1, 0);
		else
			sgd_run(p, g, buf, lo, hi, lr, momentum, wd, 0, 0, 0);
	}
}

/* ------------------------------------------------------------------------ */
/* AdamW                                                                    */

/*
 * torch.optim.AdamW (PyTorch 1.13 _single_tensor_adamw), step t from 1:
 *   p.mul_(1 - lr wd)
 *   m.mul_(beta1).add_(g, alpha=1-beta1)
 *   v.mul_(beta2).addcmul_(g, g, value=1-beta2)
 *   denom = (v.sqrt() / sqrt(1 - beta2^t)).add_(eps)
 *   p.addcdiv_(m, denom, value=-lr / (1 - beta1^t))
 * Python computes the scalars in double and the tensor ops round them to
 * float; so do we. (PyTorch 2.x writes m.lerp_(g, 1-beta1), the same up
 * to rounding.)
 */
void
cpu_adamw_step(float *p, const float *g, float *m, float *v, size_t n,
    float lr, float beta1, float beta2, float eps, float wd, int t)
{
	double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
	float decay = (float)(1.0 - (double)lr * wd);
	float a1 = (float)(1.0 - beta1), a2 = (float)(1.0 - beta2);
	float step = (float)(-(double)lr / bc1);
	float bc2s = (float)sqrt(bc2);
	size_t i;

#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
	for (i = 0; i < n; i++) {
		float gi = g[i], mi, vi, denom;

		mi = m[i] * beta1;
		mi = mi + a1 * gi;
		vi = v[i] * beta2;
		vi = vi + a2 * gi * gi;
		m[i] = mi;
		v[i] = vi;
		denom = sqrtf(vi) / bc2s + eps;
		p[i] = p[i] * decay + step * mi / denom;
	}
}
