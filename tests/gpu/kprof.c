/*
 * kprof.c - a kernel-time profile of any CUDA program, for GPU machines
 * without Nsight Systems: a CUPTI injection library. The CUDA driver loads
 * it at cuInit when CUDA_INJECTION64_PATH names it; it records every
 * kernel, copy and memset through CUPTI's activity API and, when the
 * program exits, writes one line per kernel name to KPROF_OUT (default
 * stderr):
 *
 *	<total ns> TAB <launches> TAB <name>
 *
 * Two runs of different lengths (shardtrain --steps 4 and --steps 14, say)
 * give the steady state's time per step by difference, without the first
 * steps' autotuning: tests/gpu/kprof.py does that subtraction.
 *
 * The program's kernels run as they would without it (CUPTI's activity
 * records are timestamps taken by the GPU), except that concurrent
 * kernels are serialised to be timed one by one.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cupti.h>

#define BUF_BYTES	(8u << 20)
#define SLOTS		4096		/* distinct names; a power of two */

struct entry {
	char *name;
	uint64_t ns;
	uint64_t n;
};

static struct entry table[SLOTS];
static uint64_t dropped;

static uint64_t
hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	while (*s != '\0')
		h = (h ^ (unsigned char)*s++) * 1099511628211ull;
	return h;
}

static void
add(const char *name, uint64_t ns)
{
	uint64_t i = hash(name);

	for (int probe = 0; probe < SLOTS; probe++, i++) {
		struct entry *e = &table[i & (SLOTS - 1)];

		if (e->name == NULL) {
			if ((e->name = strdup(name)) == NULL)
				return;
		} else if (strcmp(e->name, name) != 0)
			continue;
		e->ns += ns;
		e->n++;
		return;
	}
}

static void CUPTIAPI
buf_request(uint8_t **buf, size_t *size, size_t *max)
{
	*buf = aligned_alloc(8, BUF_BYTES);
	*size = *buf != NULL ? BUF_BYTES : 0;
	*max = 0;
}

static const char *
copy_name(uint8_t kind)
{
	switch (kind) {
	case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "[copy host to device]";
	case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "[copy device to host]";
	case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "[copy device to device]";
	default: return "[copy other]";
	}
}

static void CUPTIAPI
buf_complete(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
    size_t valid)
{
	CUpti_Activity *r = NULL;
	size_t d = 0;

	(void)ctx;
	(void)stream;
	(void)size;
	while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
		switch (r->kind) {
		case CUPTI_ACTIVITY_KIND_KERNEL:
		case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
			CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)r;

			add(k->name != NULL ? k->name : "?", k->end - k->start);
			break;
		}
		case CUPTI_ACTIVITY_KIND_MEMCPY: {
			CUpti_ActivityMemcpy6 *m = (CUpti_ActivityMemcpy6 *)r;

			add(copy_name(m->copyKind), m->end - m->start);
			break;
		}
		case CUPTI_ACTIVITY_KIND_MEMSET: {
			CUpti_ActivityMemset4 *m = (CUpti_ActivityMemset4 *)r;

			add("[memset]", m->end - m->start);
			break;
		}
		default:
			break;
		}
	}
	if (cuptiActivityGetNumDroppedRecords(ctx, stream, &d) ==
	    CUPTI_SUCCESS)
		dropped += d;
	free(buf);
}

static void
report(void)
{
	const char *path = getenv("KPROF_OUT");
	FILE *f = stderr;

	cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	if (path != NULL && *path != '\0' && (f = fopen(path, "w")) == NULL) {
		perror(path);
		f = stderr;
	}
	for (int i = 0; i < SLOTS; i++)
		if (table[i].name != NULL)
			fprintf(f, "%llu\t%llu\t%s\n",
			    (unsigned long long)table[i].ns,
			    (unsigned long long)table[i].n, table[i].name);
	if (dropped != 0)
		fprintf(f, "0\t%llu\t[dropped records]\n",
		    (unsigned long long)dropped);
	if (f != stderr)
		fclose(f);
}

/* called by the CUDA driver at cuInit when CUDA_INJECTION64_PATH names us */
int
InitializeInjection(void)
{
	static const CUpti_ActivityKind kinds[] = {
		CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
		CUPTI_ACTIVITY_KIND_MEMCPY,
		CUPTI_ACTIVITY_KIND_MEMSET,
	};

	if (cuptiActivityRegisterCallbacks(buf_request, buf_complete) !=
	    CUPTI_SUCCESS) {
		fprintf(stderr, "kprof: cannot register CUPTI's callbacks\n");
		return 0;
	}
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (cuptiActivityEnable(kinds[i]) != CUPTI_SUCCESS)
			fprintf(stderr, "kprof: activity kind %d refused\n",
			    (int)kinds[i]);
	atexit(report);
	return 1;
}
