/*
 * loader_gpu.c - the loader's GPU hooks on a real device: pinned batch
 * memory, and the copy and conversion of uint8 batches checked against the
 * CPU formula, bit for bit in f32, bf16 and f16. Prints TAP; exits 77 (skip)
 * without a GPU. "loader_gpu --bench" then times the kernel and the copy
 * against copying CPU-normalized f32 batches, after checking the results.
 */
#include "config.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "gpu_kernels.h"
#include "loader.h"

static const float mean[3] = { 0.485f, 0.456f, 0.406f };
static const float stdv[3] = { 0.229f, 0.224f, 0.225f };

static int ntests, nfailed;

static void
result(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
result(int ok, const char *fmt, ...)
{
	va_list ap;

	ntests++;
	if (!ok)
		nfailed++;
	printf("%s %d - ", ok ? "ok" : "not ok", ntests);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

/* Print a "# " diagnostic and return 0, for "return diag(...)". */
static int
diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int
diag(const char *fmt, ...)
{
	va_list ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	return 0;
}

#define CUDA_OK(call) cuda_ok((call), #call, __FILE__, __LINE__)

static int
cuda_ok(cudaError_t e, const char *call, const char *file, int line)
{
	if (e == cudaSuccess)
		return 1;
	return diag("%s:%d: %s: %s", file, line, call, cudaGetErrorString(e));
}

static uint64_t
rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------------ */
/* the CPU reference                                                        */

/* The CPU path's formula, exactly as the augment LUT computes it. */
static float
ref_f32(uint8_t v, int c)
{
	return ((float)v / 255.0f - mean[c]) / stdv[c];
}

/* float -> bfloat16, round to nearest even (finite values; NaN quiet). */
static uint16_t
ref_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	if ((u & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

/* float -> IEEE half, round to nearest even, subnormals and overflow
 * included. */
static uint16_t
ref_f16(float f)
{
	uint32_t u, a, sign;
	float x;

	memcpy(&u, &f, 4);
	sign = (u >> 16) & 0x8000;
	a = u & 0x7fffffff;
	if (a > 0x7f800000)			/* NaN */
		return (uint16_t)(sign | 0x7e00);
	if (a >= 0x477ff000)			/* >= 65520: inf */
		return (uint16_t)(sign | 0x7c00);
	if (a < 0x38800000) {			/* below 2^-14: subnormal */
		memcpy(&x, &a, 4);
		/* x * 2^24 is exact; units of 2^-24, rounded to even (the
		 * default rounding mode); 1024 is the smallest normal */
		return (uint16_t)(sign | (uint32_t)__builtin_nearbyintf(x *
		    16777216.0f));
	}
	a -= 112u << 23;			/* rebias 127 -> 15 */
	a += 0xfff + ((a >> 13) & 1);
	return (uint16_t)(sign | (a >> 13));
}

static size_t
dtype_bytes(enum sk_dtype t)
{
	return t == SK_DTYPE_U8 ? 1 : t == SK_DTYPE_F32 ? 4 : 2;
}

static const char *
dtype_name(enum sk_dtype t)
{
	static const char *names[] = { "u8", "f32", "bf16", "f16" };

	return names[t];
}

/* The expected bytes of element (i, c, y, x) of out: v is its input. */
static void
ref_value(enum sk_dtype t, uint8_t v, int c, void *out)
{
	float f = ref_f32(v, c);
	uint16_t h;

	switch (t) {
	case SK_DTYPE_U8:
		*(uint8_t *)out = v;
		break;
	case SK_DTYPE_F32:
		memcpy(out, &f, 4);
		break;
	case SK_DTYPE_BF16:
		h = ref_bf16(f);
		memcpy(out, &h, 2);
		break;
	case SK_DTYPE_F16:
		h = ref_f16(f);
		memcpy(out, &h, 2);
		break;
	}
}

/*
 * Compare n converted images got with the reference of inp (n,S,S,3).
 * Returns 1 when every byte matches, else 0 after naming the first
 * mismatch.
 */
static int
check_batch(const uint8_t *inp, const void *got, int n, int size,
    enum sk_dtype t, enum sk_layout layout)
{
	size_t es = dtype_bytes(t), hw = (size_t)size * size;
	unsigned char want[4];
	size_t i, p, c, o;

	for (i = 0; i < (size_t)n; i++) {
		for (p = 0; p < hw; p++) {
			for (c = 0; c < 3; c++) {
				uint8_t v = inp[(i * hw + p) * 3 + c];

				o = layout == SK_LAYOUT_NCHW ?
				    (i * 3 + c) * hw + p : (i * hw + p) * 3 + c;
				ref_value(t, v, (int)c, want);
				if (memcmp((const char *)got + o * es, want,
				    es) != 0) {
					uint32_t g = 0, w = 0;

					memcpy(&g, (const char *)got + o * es,
					    es);
					memcpy(&w, want, es);
					return diag("image %zu pixel %zu "
					    "channel %zu (v %u): got 0x%x, "
					    "want 0x%x", i, p, c, v, g, w);
				}
			}
		}
	}
	return 1;
}

/* ------------------------------------------------------------------------ */
/* tests                                                                    */

static void
test_host_alloc(void)
{
	struct cudaPointerAttributes attr;
	int pinned = -1, ok;
	void *p;

	p = sk__host_alloc(1 << 20, &pinned);
	ok = p != NULL && pinned == 1 && (uintptr_t)p % 64 == 0;
	if (p != NULL) {
		memset(p, 0xa5, 1 << 20);
		ok = ok && CUDA_OK(cudaPointerGetAttributes(&attr, p)) &&
		    attr.type == cudaMemoryTypeHost;
	}
	if (!ok)
		diag("p %p pinned %d", p, pinned);
	sk__host_free(p, pinned);
	result(ok, "sk__host_alloc gives pinned, 64-byte aligned memory");

	p = sk__host_alloc(0, &pinned);
	result(p != NULL, "sk__host_alloc(0) gives a pointer");
	sk__host_free(p, pinned);
	sk__host_free(NULL, 1);
	sk__host_free(NULL, 0);
}

/*
 * Submit n of batch images of size x size into slot 2 of a 3-slot ring,
 * then as the consumer: wait on the event from a stream of our own, copy
 * the batch back, check it.
 */
static void
test_convert(enum sk_dtype t, enum sk_layout layout, int batch, int size,
    int n, uint64_t seed)
{
	size_t pix = (size_t)size * size * 3, es = dtype_bytes(t);
	const char *lname = layout == SK_LAYOUT_NCHW ? "nchw" : "nhwc";
	struct sk__gpu *g = NULL;
	struct sk_error err = { 0 };
	cudaStream_t cs = NULL;
	void *dev = NULL, *ev = NULL, *got = NULL, *dev0 = NULL, *ev0 = NULL;
	uint8_t *host = NULL;
	int pinned = 0, ok = 0, dev_before = -1, dev_after = -2, rc;
	size_t i;

	host = sk__host_alloc(pix * batch, &pinned);
	got = malloc(pix * es * batch);
	if (host == NULL || got == NULL)
		goto out;
	for (i = 0; i < pix * batch; i++)
		host[i] = (uint8_t)rng_next(&seed);
	/* every value in every channel of image 0, where it fits */
	for (i = 0; i < pix && i < 3 * 256; i++)
		host[i] = (uint8_t)(i / 3);

	(void)cudaGetDevice(&dev_before);
	rc = sk__gpu_open(&g, 0, 3, pix * batch, size, batch, 1, t, layout,
	    mean, stdv, &err);
	if (rc != 0) {
		diag("sk__gpu_open: %d %s", rc, err.msg);
		goto out;
	}
	/* slot 0 first, with other pixels: slot 2 must not see them */
	if (sk__gpu_submit(g, 0, host + pix, 1, &dev0, &ev0, &err) != 0 ||
	    sk__gpu_submit(g, 2, host, n, &dev, &ev, &err) != 0) {
		diag("sk__gpu_submit: %s", err.msg);
		goto out;
	}
	(void)cudaGetDevice(&dev_after);
	if (dev == NULL || ev == NULL || dev == dev0 || ev == ev0) {
		diag("dev %p ev %p, slot 0: dev %p ev %p", dev, ev, dev0, ev0);
		goto out;
	}
	if (!CUDA_OK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking)) ||
	    !CUDA_OK(cudaStreamWaitEvent(cs, (cudaEvent_t)ev, 0)) ||
	    !CUDA_OK(cudaMemcpyAsync(got, dev, es * pix * n,
	    cudaMemcpyDeviceToHost, cs)) ||
	    !CUDA_OK(cudaStreamSynchronize(cs)) ||
	    !CUDA_OK(cudaEventQuery((cudaEvent_t)ev)))
		goto out;
	ok = check_batch(host, got, n, size, t, layout) &&
	    dev_before == dev_after;
	/* slot 0 holds image 1 alone */
	if (ok && (!CUDA_OK(cudaEventSynchronize((cudaEvent_t)ev0)) ||
	    !CUDA_OK(cudaMemcpy(got, dev0, es * pix, cudaMemcpyDeviceToHost)) ||
	    !check_batch(host + pix, got, 1, size, t, layout)))
		ok = 0;
out:
	if (cs != NULL)
		cudaStreamDestroy(cs);
	sk__gpu_close(g);
	sk__host_free(host, pinned);
	free(got);
	result(ok, "convert u8 -> %s %s, %d of %d images of %dx%d", dtype_name(t),
	    lname, n, batch, size, size);
}

/* No conversion: the device slot gets the host bytes as they are, also
 * from pageable memory. */
static void
test_copy(void)
{
	struct sk__gpu *g = NULL;
	struct sk_error err = { 0 };
	size_t image = 1000, batch = 4;
	uint8_t *host = malloc(image * batch), *got = malloc(image * batch);
	void *dev = NULL, *ev = NULL;
	uint64_t seed = 7;
	int ok = 0;
	size_t i;

	if (host == NULL || got == NULL)
		goto out;
	for (i = 0; i < image * batch; i++)
		host[i] = (uint8_t)rng_next(&seed);
	if (sk__gpu_open(&g, 0, 2, image * batch, 10, (int)batch, 0,
	    SK_DTYPE_F32, SK_LAYOUT_NCHW, NULL, NULL, &err) != 0 ||
	    sk__gpu_submit(g, 1, host, 3, &dev, &ev, &err) != 0) {
		diag("%s", err.msg);
		goto out;
	}
	ok = CUDA_OK(cudaEventSynchronize((cudaEvent_t)ev)) &&
	    CUDA_OK(cudaMemcpy(got, dev, image * 3, cudaMemcpyDeviceToHost)) &&
	    memcmp(got, host, image * 3) == 0;
	/* an empty submit still records the event */
	ok = ok && sk__gpu_submit(g, 0, NULL, 0, &dev, &ev, &err) == 0 &&
	    CUDA_OK(cudaEventSynchronize((cudaEvent_t)ev));
out:
	sk__gpu_close(g);
	free(host);
	free(got);
	result(ok, "no conversion: the batch is copied as it is");
}

static void
test_errors(void)
{
	struct sk__gpu *g = NULL;
	struct sk_error err = { 0 };
	void *dev, *ev;
	int ndev = 0, rc;

	(void)cudaGetDeviceCount(&ndev);
	rc = sk__gpu_open(&g, ndev, 2, 3 * 4 * 4 * 2, 4, 2, 1, SK_DTYPE_F32,
	    SK_LAYOUT_NCHW, mean, stdv, &err);
	result(rc == SK_EINVAL && g == NULL && err.msg[0] != '\0',
	    "a device past the last is refused (%s)", err.msg);

	rc = sk__gpu_open(&g, 0, 2, 3 * 4 * 4 * 2 - 1, 4, 2, 1, SK_DTYPE_F32,
	    SK_LAYOUT_NCHW, mean, stdv, &err);
	result(rc == SK_EINVAL && g == NULL,
	    "a host slot too small is refused (%s)", err.msg);

	rc = sk__gpu_open(&g, 0, 2, 3 * 4 * 4 * 2, 4, 2, 1, SK_DTYPE_F32,
	    SK_LAYOUT_NCHW, mean, stdv, &err);
	if (rc == 0) {
		int a = sk__gpu_submit(g, 2, "", 1, &dev, &ev, &err);
		int b = sk__gpu_submit(g, 0, "", 3, &dev, &ev, &err);

		result(a == SK_EINVAL && b == SK_EINVAL,
		    "a bad slot or count is refused (%s)", err.msg);
	} else {
		result(0, "sk__gpu_open: %s", err.msg);
	}
	sk__gpu_close(g);

	/* a device allocation that cannot succeed */
	rc = sk__gpu_open(&g, 0, 1, (size_t)3 * 40000 * 40000 * 4096, 40000,
	    4096, 1, SK_DTYPE_F32, SK_LAYOUT_NCHW, mean, stdv, &err);
	result(rc == SK_ENOMEM && g == NULL && strstr(err.msg, "CUDA: "
	    "cudaMalloc: ") != NULL && strstr(err.msg, "gpu.c:") != NULL,
	    "cudaMalloc failing is SK_ENOMEM with where (%s)", err.msg);
}

/* ------------------------------------------------------------------------ */
/* benchmark                                                                */

/*
 * ImageNet-sized batches: the kernel alone, and submit (copy of u8 plus
 * kernel), against the peer the GPU path replaces: copying batches the CPU
 * already normalized to f32, 4x the bytes.
 */
static void
bench(void)
{
	const int batch = 256, size = 224, iters = 20;
	size_t pix = (size_t)size * size * 3;
	struct sk__gpu *g = NULL;
	struct sk_error err = { 0 };
	cudaEvent_t t0, t1;
	cudaStream_t s;
	uint8_t *host;
	void *f32host, *in, *out, *dev, *ev;
	float *got;
	int pinned, pinned2, i;
	uint64_t seed = 1;
	float ms;
	double t, copy_u8, copy_f32, kern;

	host = sk__host_alloc(pix * batch, &pinned);
	f32host = sk__host_alloc(pix * batch * 4, &pinned2);
	got = malloc(pix * batch * 4);
	for (i = 0; i < (int)(pix * batch); i++)
		host[i] = (uint8_t)rng_next(&seed);
	if (sk__gpu_open(&g, 0, 3, pix * batch, size, batch, 1, SK_DTYPE_F32,
	    SK_LAYOUT_NCHW, mean, stdv, &err) != 0) {
		result(0, "bench: %s", err.msg);
		return;
	}
	/* check before timing */
	if (sk__gpu_submit(g, 0, host, batch, &dev, &ev, &err) != 0 ||
	    !CUDA_OK(cudaEventSynchronize((cudaEvent_t)ev)) ||
	    !CUDA_OK(cudaMemcpy(got, dev, pix * batch * 4,
	    cudaMemcpyDeviceToHost))) {
		result(0, "bench: %s", err.msg);
		return;
	}
	result(check_batch(host, got, batch, size, SK_DTYPE_F32,
	    SK_LAYOUT_NCHW), "bench: %d images of %dx%d match the CPU",
	    batch, size, size);

	/* the kernel alone */
	cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	cudaEventCreate(&t0);
	cudaEventCreate(&t1);
	cudaMalloc(&in, pix * batch);
	cudaMalloc(&out, pix * batch * 4);
	cudaMemcpy(in, host, pix * batch, cudaMemcpyHostToDevice);
	sk__gpu_convert_launch(out, in, batch, size, SK_DTYPE_F32,
	    SK_LAYOUT_NCHW, mean, stdv, s);
	cudaEventRecord(t0, s);
	for (i = 0; i < iters; i++)
		sk__gpu_convert_launch(out, in, batch, size, SK_DTYPE_F32,
		    SK_LAYOUT_NCHW, mean, stdv, s);
	cudaEventRecord(t1, s);
	cudaEventSynchronize(t1);
	cudaEventElapsedTime(&ms, t0, t1);
	kern = ms / 1e3 / iters;

	/* submit: copy u8 + kernel */
	t = now();
	for (i = 0; i < iters; i++)
		sk__gpu_submit(g, i % 3, host, batch, &dev, &ev, &err);
	cudaEventSynchronize((cudaEvent_t)ev);
	copy_u8 = (now() - t) / iters;

	/* the peer: copy f32 batches the CPU normalized */
	cudaMemcpyAsync(out, f32host, pix * batch * 4, cudaMemcpyHostToDevice,
	    s);
	cudaStreamSynchronize(s);
	t = now();
	for (i = 0; i < iters; i++)
		cudaMemcpyAsync(out, f32host, pix * batch * 4,
		    cudaMemcpyHostToDevice, s);
	cudaStreamSynchronize(s);
	copy_f32 = (now() - t) / iters;

	diag("bench: %d x %dx%d u8 -> f32 nchw, %d iterations, host %s",
	    batch, size, size, iters, pinned && pinned2 ? "pinned" : "pageable");
	diag("kernel alone:        %8.3f ms  %8.0f images/s  %6.1f GB/s "
	    "(read + write)", kern * 1e3, batch / kern,
	    pix * batch * 5 / kern / 1e9);
	diag("submit (u8 + kernel): %7.3f ms  %8.0f images/s", copy_u8 * 1e3,
	    batch / copy_u8);
	diag("peer: copy f32:      %8.3f ms  %8.0f images/s", copy_f32 * 1e3,
	    batch / copy_f32);
	diag("submit / peer: %.2fx the images per second",
	    copy_f32 / copy_u8);

	cudaFree(in);
	cudaFree(out);
	cudaEventDestroy(t0);
	cudaEventDestroy(t1);
	cudaStreamDestroy(s);
	sk__gpu_close(g);
	sk__host_free(host, pinned);
	sk__host_free(f32host, pinned2);
	free(got);
}

int
main(int argc, char **argv)
{
	static const enum sk_dtype dtypes[] = {
		SK_DTYPE_U8, SK_DTYPE_F32, SK_DTYPE_BF16, SK_DTYPE_F16
	};
	cudaError_t e;
	int ndev = 0, d, l;

	e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess || ndev == 0) {
		printf("1..0 # SKIP no CUDA device (%s)\n", e == cudaSuccess ?
		    "none found" : e == cudaErrorInsufficientDriver ?
		    "no NVIDIA driver, or one older than this CUDA runtime" :
		    cudaGetErrorString(e));
		return 77;
	}

	test_host_alloc();
	for (d = 0; d < 4; d++) {
		for (l = 0; l < 2; l++) {
			test_convert(dtypes[d], (enum sk_layout)l, 5, 7, 4,
			    10 + d * 2 + l);
			test_convert(dtypes[d], (enum sk_layout)l, 3, 224, 3,
			    20 + d * 2 + l);
		}
	}
	test_copy();
	test_errors();
	if (argc > 1 && strcmp(argv[1], "--bench") == 0)
		bench();
	printf("1..%d\n", ntests);
	return nfailed > 0 ? 1 : 0;
}
