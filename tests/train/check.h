/*
 * check.h - what the training kernel tests share: a seeded uniform
 * generator, a checked allocation, and the fp32-against-double comparison
 * with tolerance tol + |ref| eps.
 */
#ifndef SK_TEST_TRAIN_CHECK_H
#define SK_TEST_TRAIN_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "harness.h"

/* uniform in [-1, 1), from the caller's state (splitmix64) */
static inline float
t_frand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return (float)((double)(z >> 40) * 0x1.0p-23 - 1.0);
}

/* n zeroed floats; fails the test when memory runs out */
static inline float *
t_falloc(size_t n)
{
	float *p = calloc(n ? n : 1, sizeof *p);

	CHECK(p != NULL);
	return p;
}

/*
 * Fail unless every |got - ref| <= tol + |ref| eps. Returns the largest
 * absolute error so the caller can report it.
 */
static inline double
t_check_close(const char *what, const float *got, const double *ref,
    size_t n, double tol, double eps)
{
	double max = 0, e;
	size_t i;

	for (i = 0; i < n; i++) {
		e = fabs((double)got[i] - ref[i]);
		if (!(e <= tol + fabs(ref[i]) * eps))
			t_fail(__FILE__, __LINE__, "%s[%zu] = %.9g, want %.9g "
			    "(error %.3g)", what, i, got[i], ref[i], e);
		if (e > max)
			max = e;
	}
	return max;
}

#endif /* SK_TEST_TRAIN_CHECK_H */
