/*
 * gpu.c - pinned batch memory and the loader's device mode: each batch is
 * copied to the GPU on the loader's own stream and, for uint8 batches,
 * normalized there by the kernel in loader/gpu_kernels.cu. Built without
 * CUDA, it hands out plain aligned memory and refuses the device mode.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CUDA
#include <pthread.h>

#include <cuda_runtime.h>
#endif

#include "loader.h"
#ifdef HAVE_CUDA
#include "gpu_kernels.h"
#endif

/* Batch slots are 64-byte aligned, a cache line and enough for any SIMD
 * store the augment step makes. */
static void *
aligned_alloc64(size_t n)
{
	void *p;

	if (posix_memalign(&p, 64, n > 0 ? n : 1) != 0)
		return NULL;
	return p;
}

#ifndef HAVE_CUDA

/* ------------------------------------------------------------------------ */
/* without CUDA                                                             */

void *
sk__host_alloc(size_t n, int *pinned)
{
	if (pinned != NULL)
		*pinned = 0;
	return aligned_alloc64(n);
}

void
sk__host_free(void *p, int pinned)
{
	free(p);
}

int
sk__gpu_open(struct sk__gpu **out, int device, int nslots,
    size_t host_slot_bytes, int size, int batch, int convert,
    enum sk_dtype out_dtype, enum sk_layout out_layout, const float mean[3],
    const float std[3], struct sk_error *err)
{
	*out = NULL;
	return sk_error_set(err, SK_EUNSUPPORTED,
	    "shardkit was built without CUDA; rebuild with --with-cuda");
}

int
sk__gpu_submit(struct sk__gpu *g, int slot, const void *host, int n,
    void **dev, void **event, struct sk_error *err)
{
	return sk_error_set(err, SK_EUNSUPPORTED,
	    "shardkit was built without CUDA; rebuild with --with-cuda");
}

int
sk__gpu_wait(struct sk__gpu *g, int slot, struct sk_error *err)
{
	return sk_error_set(err, SK_EUNSUPPORTED,
	    "shardkit was built without CUDA; rebuild with --with-cuda");
}

void
sk__gpu_close(struct sk__gpu *g)
{
}

int
sk__gpu_detach(struct sk__gpu *g, int slot, void **buf, struct sk_error *err)
{
	return sk_error_set(err, SK_EUNSUPPORTED,
	    "shardkit was built without CUDA; rebuild with --with-cuda");
}

void
sk__gpu_buffer_free(void *buf)
{
}

int
sk_batch_stream_wait(const struct sk_batch *b, uintptr_t stream,
    struct sk_error *err)
{
	return sk_error_set(err, SK_EUNSUPPORTED,
	    "shardkit was built without CUDA; rebuild with --with-cuda");
}

#else /* HAVE_CUDA */

/* ------------------------------------------------------------------------ */
/* CUDA errors                                                              */

/* "loader/gpu.c" out of __FILE__, whatever the build directory was. */
static const char *
src_name(const char *file)
{
	const char *p = file + strlen(file);
	int slashes = 0;

	while (p > file) {
		if (p[-1] == '/' && ++slashes == 2)
			return p;
		p--;
	}
	return file;
}

/*
 * A failed CUDA call as an SK_E* code and a message naming the function
 * (the text of the call up to its parenthesis) and where it was made:
 * "CUDA: cudaMalloc: out of memory (loader/gpu.c:123); try ...".
 */
static int
cuda_fail(cudaError_t e, const char *call, const char *file, int line,
    struct sk_error *err)
{
	const char *hint = "";
	int code = SK_EIO;

	/* clear the error unless it is sticky (the context is lost then) */
	(void)cudaGetLastError();
	switch (e) {
	case cudaErrorMemoryAllocation:
		code = SK_ENOMEM;
		hint = "; try a smaller batch, image size or ring";
		break;
	case cudaErrorNoKernelImageForDevice:
		hint = "; rebuild with NVCC_ARCH_FLAGS that include this GPU "
		    "(see ./configure --help)";
		break;
	case cudaErrorInsufficientDriver:
		hint = "; the NVIDIA driver is older than this CUDA runtime";
		break;
	default:
		break;
	}
	return sk_error_set(err, code, "CUDA: %.*s: %s (%s:%d)%s",
	    (int)strcspn(call, "("), call, cudaGetErrorString(e),
	    src_name(file), line, hint);
}

static inline int
cuda_check(cudaError_t e, const char *call, const char *file, int line,
    struct sk_error *err)
{
	return e == cudaSuccess ? 0 : cuda_fail(e, call, file, line, err);
}

/* 0, or an SK_E* code with err saying which call failed where. */
#define CUDA_CHECK(err, call) \
	cuda_check((call), #call, __FILE__, __LINE__, (err))

/* ------------------------------------------------------------------------ */
/* host memory                                                              */

/*
 * Whether there is a device is asked once per process: cudaGetDeviceCount
 * loads the driver, which takes a while, and its answer does not change.
 * No driver, no device, or a driver too old all read as 0 devices.
 */
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int probe_count;
static cudaError_t probe_status;

static void
probe(void)
{
	int n = 0;

	probe_status = cudaGetDeviceCount(&n);
	if (probe_status != cudaSuccess) {
		(void)cudaGetLastError();
		n = 0;
	}
	probe_count = n;
}

static int
device_count(cudaError_t *status)
{
	pthread_once(&probe_once, probe);
	if (status != NULL)
		*status = probe_status;
	return probe_count;
}

void *
sk__host_alloc(size_t n, int *pinned)
{
	cudaError_t e;
	void *p = NULL;

	if (pinned == NULL)
		return aligned_alloc64(n);
	*pinned = 0;
	if (device_count(NULL) > 0) {
		/*
		 * Portable: pinned for the context of every device, not just
		 * the one current on this thread, because the ring may be
		 * allocated on any thread and before sk__gpu_open picks the
		 * device. Not WriteCombined: batches are read on the host
		 * too (CPU training, checks), and reading WC memory is
		 * uncached. Not Mapped: the loader copies, it does not read
		 * host memory from kernels.
		 */
		e = cudaHostAlloc(&p, n > 0 ? n : 1, cudaHostAllocPortable);
		if (e == cudaSuccess) {
			*pinned = 1;
			return p;
		}
		(void)cudaGetLastError();
		sk_log(SK_LOG_WARN, "cudaHostAlloc of %zu bytes: %s; batch "
		    "memory is not pinned, so copies to the GPU are slower",
		    n, cudaGetErrorString(e));
	}
	return aligned_alloc64(n);
}

void
sk__host_free(void *p, int pinned)
{
	if (p == NULL)
		return;
	if (!pinned) {
		free(p);
		return;
	}
	/* fails only once the runtime is unloading at exit: the process
	 * gives the pages back then anyway */
	if (cudaFreeHost(p) != cudaSuccess)
		(void)cudaGetLastError();
}

/* ------------------------------------------------------------------------ */
/* device mode                                                              */

static size_t
dtype_bytes(enum sk_dtype t)
{
	switch (t) {
	case SK_DTYPE_U8:	return 1;
	case SK_DTYPE_F32:	return 4;
	case SK_DTYPE_BF16:
	case SK_DTYPE_F16:	return 2;
	}
	return 0;
}

/*
 * Ownership and ordering. Everything below runs on g->stream, the
 * loader's own non-blocking stream, so it never waits for the legacy
 * default stream and the consumer's work never waits for it, except
 * through a slot's event. Per submit: copy (host slot -> staging or the
 * slot's buffer), convert (staging -> slot's buffer), record the slot's
 * event. The one staging buffer serves every slot: the stream orders the
 * next copy into it after the kernel that read it.
 *
 * g is not locked and does not change after open. Submits must come one
 * at a time (two at once would share the staging buffer); a wait may run
 * beside a submit of another slot; close only when no other call runs.
 * The host slot passed to submit is read by the copy after submit
 * returns: refill it only after sk__gpu_wait on the slot. The slot's
 * device buffer is overwritten by the next submit to that slot, so the
 * consumer must have finished reading it (not just queued the reads) by
 * then. Close before freeing the host slots.
 */
struct gpu_slot {
	void *buf;		/* the batch on the device, as the consumer
				 * gets it: (batch,S,S,3) or (batch,3,S,S) */
	cudaEvent_t done;	/* recorded after the slot's last submit */
};

struct sk__gpu {
	int device;
	int nslots;
	int size, batch;
	int convert;
	enum sk_dtype dtype;
	enum sk_layout layout;
	float mean[3], std[3];
	size_t in_image_bytes;	/* one image in a host slot */
	size_t out_image_bytes;	/* one image in a device slot */
	cudaStream_t stream;
	void *staging;		/* convert: (batch,S,S,3) u8 as copied */
	struct gpu_slot *slots;	/* (nslots) */
};

/* Make g's device current on this thread, which may be the consumer's:
 * *prev receives its device, for leave() to put back. */
static int
enter(const struct sk__gpu *g, int *prev, struct sk_error *err)
{
	int rc;

	*prev = -1;
	if ((rc = CUDA_CHECK(err, cudaGetDevice(prev))) != 0)
		return rc;
	if (*prev != g->device &&
	    (rc = CUDA_CHECK(err, cudaSetDevice(g->device))) != 0)
		return rc;
	return 0;
}

static void
leave(int device, int prev)
{
	if (prev >= 0 && prev != device && cudaSetDevice(prev) != cudaSuccess)
		(void)cudaGetLastError();
}

/* Free what was made; the device must be current. */
static void
gpu_free(struct sk__gpu *g)
{
	int i;

	if (g->stream != NULL)
		(void)cudaStreamSynchronize(g->stream);
	for (i = 0; g->slots != NULL && i < g->nslots; i++) {
		if (g->slots[i].done != NULL)
			(void)cudaEventDestroy(g->slots[i].done);
		if (g->slots[i].buf != NULL)
			(void)cudaFree(g->slots[i].buf);
	}
	if (g->staging != NULL)
		(void)cudaFree(g->staging);
	if (g->stream != NULL)
		(void)cudaStreamDestroy(g->stream);
	(void)cudaGetLastError();
	free(g->slots);
	free(g);
}

int
sk__gpu_open(struct sk__gpu **out, int device, int nslots,
    size_t host_slot_bytes, int size, int batch, int convert,
    enum sk_dtype out_dtype, enum sk_layout out_layout, const float mean[3],
    const float std[3], struct sk_error *err)
{
	struct sk__gpu *g = NULL;
	cudaError_t status;
	size_t pixels;
	int ndev, prev = -1, rc, i;

	*out = NULL;
	if (device < 0 || nslots < 1 || size < 1 || batch < 1)
		return sk_error_set(err, SK_EINVAL, "GPU: bad arguments "
		    "(device %d, %d slots, size %d, batch %d)", device,
		    nslots, size, batch);
	ndev = device_count(&status);
	if (ndev == 0)
		return sk_error_set(err, SK_EUNSUPPORTED, "no CUDA device "
		    "(cudaGetDeviceCount: %s)", status == cudaSuccess ?
		    "none found" : status == cudaErrorInsufficientDriver ?
		    "no NVIDIA driver, or one older than this CUDA runtime" :
		    cudaGetErrorString(status));
	if (device >= ndev)
		return sk_error_set(err, SK_EINVAL, "CUDA device %d "
		    "requested, but there %s only %d", device,
		    ndev == 1 ? "is" : "are", ndev);

	if ((g = calloc(1, sizeof *g)) == NULL ||
	    (g->slots = calloc(nslots, sizeof *g->slots)) == NULL) {
		free(g);
		return sk_error_set(err, SK_ENOMEM, "GPU: out of memory");
	}
	g->device = device;
	g->nslots = nslots;
	g->size = size;
	g->batch = batch;
	g->convert = convert != 0;
	g->dtype = out_dtype;
	g->layout = out_layout;
	pixels = (size_t)size * size * 3;
	if (g->convert) {
		/* the kernel indexes pixels with ints */
		if (dtype_bytes(out_dtype) == 0 || (out_layout !=
		    SK_LAYOUT_NHWC && out_layout != SK_LAYOUT_NCHW) ||
		    size > 46340 || mean == NULL || std == NULL) {
			rc = sk_error_set(err, SK_EINVAL, "GPU: bad conversion "
			    "(dtype %d, layout %d, size %d)", (int)out_dtype,
			    (int)out_layout, size);
			goto fail;
		}
		if (host_slot_bytes < pixels * batch) {
			rc = sk_error_set(err, SK_EINVAL, "GPU: a host slot of "
			    "%zu bytes cannot hold %d uint8 images of %dx%d",
			    host_slot_bytes, batch, size, size);
			goto fail;
		}
		memcpy(g->mean, mean, sizeof g->mean);
		memcpy(g->std, std, sizeof g->std);
		g->in_image_bytes = pixels;
		g->out_image_bytes = pixels * dtype_bytes(out_dtype);
	} else {
		/* as the host has it: batch images of host_slot_bytes / batch
		 * (0 when the loader reads without decoding) */
		if (host_slot_bytes % batch != 0) {
			rc = sk_error_set(err, SK_EINVAL, "GPU: a host slot of "
			    "%zu bytes is not %d whole images",
			    host_slot_bytes, batch);
			goto fail;
		}
		g->in_image_bytes = host_slot_bytes / batch;
		g->out_image_bytes = g->in_image_bytes;
	}

	if ((rc = enter(g, &prev, err)) != 0)
		goto fail;
	if ((rc = CUDA_CHECK(err, cudaStreamCreateWithFlags(&g->stream,
	    cudaStreamNonBlocking))) != 0)
		goto fail;
	if (g->convert && (rc = CUDA_CHECK(err, cudaMalloc(&g->staging,
	    g->in_image_bytes * batch))) != 0)
		goto fail;
	for (i = 0; i < nslots; i++) {
		if (g->out_image_bytes > 0 && (rc = CUDA_CHECK(err,
		    cudaMalloc(&g->slots[i].buf, g->out_image_bytes *
		    batch))) != 0)
			goto fail;
		/* no timing: recording and waiting are cheaper without it */
		if ((rc = CUDA_CHECK(err, cudaEventCreateWithFlags(
		    &g->slots[i].done, cudaEventDisableTiming))) != 0)
			goto fail;
	}
	leave(device, prev);
	*out = g;
	return 0;

fail:
	gpu_free(g);
	leave(device, prev);
	return rc;
}

int
sk__gpu_submit(struct sk__gpu *g, int slot, const void *host, int n,
    void **dev, void **event, struct sk_error *err)
{
	struct gpu_slot *s;
	int prev, rc;

	if (g == NULL || slot < 0 || slot >= g->nslots || n < 0 ||
	    n > g->batch || (n > 0 && host == NULL))
		return sk_error_set(err, SK_EINVAL, "GPU: bad submit (slot %d "
		    "of %d, %d images of %d)", slot, g != NULL ? g->nslots : 0,
		    n, g != NULL ? g->batch : 0);
	s = &g->slots[slot];
	if ((rc = enter(g, &prev, err)) != 0)
		return rc;
	if (n > 0 && g->in_image_bytes > 0 && g->convert) {
		/* host (n,S,S,3) u8 -> staging -> buf (n,S,S,3) | (n,3,S,S) */
		if ((rc = CUDA_CHECK(err, cudaMemcpyAsync(g->staging, host,
		    g->in_image_bytes * n, cudaMemcpyHostToDevice,
		    g->stream))) != 0)
			goto out;
		if ((rc = CUDA_CHECK(err, sk__gpu_convert_launch(s->buf,
		    g->staging, n, g->size, g->dtype, g->layout, g->mean,
		    g->std, g->stream))) != 0)
			goto out;
	} else if (n > 0 && g->in_image_bytes > 0) {
		if ((rc = CUDA_CHECK(err, cudaMemcpyAsync(s->buf, host,
		    g->in_image_bytes * n, cudaMemcpyHostToDevice,
		    g->stream))) != 0)
			goto out;
	}
	if ((rc = CUDA_CHECK(err, cudaEventRecord(s->done, g->stream))) != 0)
		goto out;
	*dev = s->buf;
	*event = (void *)s->done;
out:
	leave(g->device, prev);
	return rc;
}

/*
 * Block this thread until the last submit of slot has finished on the
 * device (copy and conversion), so its host slot may be refilled. Returns
 * at once for a slot never submitted.
 */
int
sk__gpu_wait(struct sk__gpu *g, int slot, struct sk_error *err)
{
	int prev, rc;

	if (g == NULL || slot < 0 || slot >= g->nslots)
		return sk_error_set(err, SK_EINVAL, "GPU: bad slot %d", slot);
	if ((rc = enter(g, &prev, err)) != 0)
		return rc;
	rc = CUDA_CHECK(err, cudaEventSynchronize(g->slots[slot].done));
	leave(g->device, prev);
	return rc;
}

int
sk__gpu_detach(struct sk__gpu *g, int slot, void **buf, struct sk_error *err)
{
	void *fresh = NULL;
	int prev, rc;

	*buf = NULL;
	if (g == NULL || slot < 0 || slot >= g->nslots)
		return sk_error_set(err, SK_EINVAL, "GPU: bad slot %d", slot);
	if (g->slots[slot].buf == NULL)
		return 0;
	if ((rc = enter(g, &prev, err)) != 0)
		return rc;
	if ((rc = CUDA_CHECK(err, cudaEventSynchronize(
	    g->slots[slot].done))) == 0 && (rc = CUDA_CHECK(err,
	    cudaMalloc(&fresh, g->out_image_bytes * g->batch))) == 0) {
		*buf = g->slots[slot].buf;
		g->slots[slot].buf = fresh;
	}
	leave(g->device, prev);
	return rc;
}

void
sk__gpu_buffer_free(void *buf)
{
	/* Unified addressing: cudaFree finds the buffer's device. */
	if (buf != NULL && cudaFree(buf) != cudaSuccess)
		(void)cudaGetLastError();
}

int
sk_batch_stream_wait(const struct sk_batch *b, uintptr_t stream,
    struct sk_error *err)
{
	if (b == NULL)
		return sk_error_set(err, SK_EINVAL, "no batch");
	/* a kept batch was waited for when it was kept */
	if (b->ready_event == NULL)
		return 0;
	return CUDA_CHECK(err, cudaStreamWaitEvent((cudaStream_t)stream,
	    (cudaEvent_t)b->ready_event, 0));
}

void
sk__gpu_close(struct sk__gpu *g)
{
	struct sk_error ignored;
	int device, prev;

	if (g == NULL)
		return;
	device = g->device;
	/* a failure here leaves nothing to do but free what can be */
	(void)enter(g, &prev, &ignored);
	gpu_free(g);
	leave(device, prev);
}

#endif /* HAVE_CUDA */
