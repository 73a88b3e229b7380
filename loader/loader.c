/*
 * loader.c - the public calls of the streaming loader: the config's
 * defaults and checks, open (shard list, batch slots, threads), next,
 * release, stats and close; and failing, which stops every stage.
 * pipeline.h draws the stages and lists the files that hold them.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "loader.h"
#include "pipeline.h"

#define SK__MAGIC_LOADER 0x534b4c44u	/* "SKLD" */

/* ------------------------------------------------------------------------ */
/* failing and stopping                                                     */

/*
 * Make every thread stop: set the flag and wake whoever waits on a
 * condition, the I/O queues' too. Call with l->mu held; taking a queue's
 * mutex under l->mu keeps the lock order (never l->mu under a queue's).
 */
static void
stop_all_locked(sk_loader *l)
{
	int i;

	__atomic_store_n(&l->stop, 1, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&l->cond_slot);
	pthread_cond_broadcast(&l->cond_ready);
	pthread_cond_broadcast(&l->cond_work);
	for (i = 0; i < l->nqueues_inited; i++) {
		pthread_mutex_lock(&l->queues[i].mu);
		pthread_cond_broadcast(&l->queues[i].cond);
		pthread_mutex_unlock(&l->queues[i].mu);
	}
}

/* Record a fatal error (the first one wins) and stop everything. Call
 * with l->mu held. */
static void
vfail_locked(sk_loader *l, int code, const char *fmt, va_list ap)
{
	if (!l->failed) {
		sk__verror_set(&l->h.err, code, fmt, ap);
		/* h.state is the consumer's: next() marks it fatal when it
		 * sees this, so sk__check never races with a pipeline thread. */
		l->failed = code;
	}
	stop_all_locked(l);
}

void
sk__loader_fail_locked(sk_loader *l, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail_locked(l, code, fmt, ap);
	va_end(ap);
}

void
sk__loader_fail(sk_loader *l, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	pthread_mutex_lock(&l->mu);
	vfail_locked(l, code, fmt, ap);
	pthread_mutex_unlock(&l->mu);
	va_end(ap);
}

/* ------------------------------------------------------------------------ */
/* the public calls                                                         */

void
sk_loader_config_init(struct sk_loader_config *c)
{
	static const float mean[3] = { 0.485f, 0.456f, 0.406f };
	static const float std[3] = { 0.229f, 0.224f, 0.225f };

	memset(c, 0, sizeof *c);
	c->batch = 256;
	c->epochs = 1;
	c->world = 1;
	c->io_streams = 2;
	c->prefetch_bytes = (size_t)64 << 20;
	c->shuffle = 0;
	c->image_size = 224;
	c->crop = SK_CROP_RANDOM_RESIZED;
	c->scale[0] = 0.08;
	c->scale[1] = 1.0;
	c->ratio[0] = 3.0 / 4.0;
	c->ratio[1] = 4.0 / 3.0;
	c->flip = 1;
	memcpy(c->mean, mean, sizeof mean);
	memcpy(c->std, std, sizeof std);
	c->max_pixels = SK_IMAGE_MAX_PIXELS;
	c->decode = 1;
	c->device = -1;
}

const char *
sk_skip_reason_name(enum sk_skip_reason r)
{
	static const char *const names[SK_SKIP_NREASONS] = {
		"decode", "too_big", "no_image", "no_label", "damaged"
	};

	return (unsigned)r < SK_SKIP_NREASONS ? names[r] : "unknown";
}

size_t
sk_dtype_size(enum sk_dtype t)
{
	switch (t) {
	case SK_DTYPE_U8:
		return 1;
	case SK_DTYPE_F32:
		return 4;
	case SK_DTYPE_BF16:
	case SK_DTYPE_F16:
		return 2;
	}
	return 0;
}

static int
ncpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (int)n : 1;
}

/* A batch slot's memory, and a kept batch's (sk_loader_keep), the caller's
 * until sk_batch_free(). */
struct kept {
	void *images;
	int pinned;
	int32_t *labels;
	char **keys;
	int nkeys;
	uint64_t *bytes;
	struct sk_sample_aug *aug;
	void *device_images;
};

/* Fresh memory for a slot of nb samples: 0, or -1 with nothing held. */
static int
kept_alloc(struct kept *m, size_t nb, size_t image_bytes)
{
	memset(m, 0, sizeof *m);
	m->nkeys = (int)nb;
	m->images = sk__host_alloc(nb * image_bytes + 64, &m->pinned);
	m->labels = calloc(nb, sizeof *m->labels);
	m->keys = calloc(nb, sizeof *m->keys);
	m->bytes = calloc(nb, sizeof *m->bytes);
	m->aug = calloc(nb, sizeof *m->aug);
	if (m->images != NULL && m->labels != NULL && m->keys != NULL &&
	    m->bytes != NULL && m->aug != NULL)
		return 0;
	sk__host_free(m->images, m->pinned);
	free(m->labels);
	free(m->keys);
	free(m->bytes);
	free(m->aug);
	memset(m, 0, sizeof *m);
	return -1;
}

/* The slot's memory from now on is m's. */
static void
slot_give(struct slot *sl, const struct kept *m)
{
	sl->images = m->images;
	sl->pinned = m->pinned;
	sl->labels = m->labels;
	sl->keys = m->keys;
	sl->bytes = m->bytes;
	sl->aug = m->aug;
}

/* Free the memory (the key strings too), not m itself. */
static void
kept_release(struct kept *m)
{
	int i;

	for (i = 0; m->keys != NULL && i < m->nkeys; i++)
		free(m->keys[i]);
	sk__host_free(m->images, m->pinned);
	sk__gpu_buffer_free(m->device_images);
	free(m->labels);
	free(m->keys);
	free(m->bytes);
	free(m->aug);
}

static int
check_config(sk_loader *l)
{
	struct sk_loader_config *c = &l->cfg;
	int i;

	if ((c->urls == NULL) == (c->manifest == NULL))
		return sk__fatal(&l->h, SK_EINVAL, "give shard URLs or a "
		    "manifest, not both or neither");
	if (c->batch < 1 || c->batch > SK_LOADER_MAX_BATCH)
		return sk__fatal(&l->h, SK_EINVAL, "batch %d: not in 1..%d",
		    c->batch, SK_LOADER_MAX_BATCH);
	if (c->world < 1 || c->world > SK_LOADER_MAX_RANKS || c->rank < 0 ||
	    c->rank >= c->world)
		return sk__fatal(&l->h, SK_EINVAL, "rank %d of world %d: "
		    "need 0 <= rank < world <= %d", c->rank, c->world,
		    SK_LOADER_MAX_RANKS);
	if (c->epoch < 0 || c->epoch > SK_LOADER_MAX_EPOCH || c->epochs < 1 ||
	    c->epochs > SK_LOADER_MAX_EPOCHS)
		return sk__fatal(&l->h, SK_EINVAL, "epoch %d, epochs %d: need "
		    "0..%d and 1..%d", c->epoch, c->epochs,
		    SK_LOADER_MAX_EPOCH, SK_LOADER_MAX_EPOCHS);
	if (c->workers < 0 || c->workers > SK_LOADER_MAX_WORKERS ||
	    c->io_streams < 1 || c->io_streams > SK_LOADER_MAX_IO_STREAMS)
		return sk__fatal(&l->h, SK_EINVAL, "workers %d, I/O streams "
		    "%d: need 0..%d and 1..%d", c->workers, c->io_streams,
		    SK_LOADER_MAX_WORKERS, SK_LOADER_MAX_IO_STREAMS);
	if (c->ahead < 0 || c->ahead > SK_LOADER_MAX_AHEAD)
		return sk__fatal(&l->h, SK_EINVAL, "ahead %d: need 0..%d",
		    c->ahead, SK_LOADER_MAX_AHEAD);
	if (c->shuffle < 0 || c->shuffle > SK_LOADER_MAX_SHUFFLE ||
	    c->resume_batch < 0 || c->resume_batch > SK_LOADER_MAX_EPOCH)
		return sk__fatal(&l->h, SK_EINVAL, "shuffle %d, resume batch "
		    "%d: need 0..%d and 0..%d", c->shuffle, c->resume_batch,
		    SK_LOADER_MAX_SHUFFLE, SK_LOADER_MAX_EPOCH);
	if (c->ring != 0 && (c->ring < SK_LOADER_MIN_RING ||
	    c->ring > SK_LOADER_MAX_RING))
		return sk__fatal(&l->h, SK_EINVAL, "ring %d: need 0 (the "
		    "default) or %d..%d", c->ring, SK_LOADER_MIN_RING,
		    SK_LOADER_MAX_RING);
	if (c->resize < 0 || c->resize > SK_LOADER_MAX_RESIZE)
		return sk__fatal(&l->h, SK_EINVAL, "resize %d: not in 0..%d",
		    c->resize, SK_LOADER_MAX_RESIZE);
	if (c->image_size < 1 || c->image_size > SK_LOADER_MAX_IMAGE_SIZE)
		return sk__fatal(&l->h, SK_EINVAL, "image size %d: not in "
		    "1..%d", c->image_size, SK_LOADER_MAX_IMAGE_SIZE);
	if ((unsigned)c->crop > SK_CROP_NONE || (unsigned)c->dtype >
	    SK_DTYPE_F16 || (unsigned)c->layout > SK_LAYOUT_NCHW ||
	    (unsigned)c->remainder > SK_REMAINDER_KEEP ||
	    (unsigned)c->form > SK_FORM_FILES)
		return sk__fatal(&l->h, SK_EINVAL, "bad crop, dtype, layout, "
		    "remainder or form value");
	if (!(c->scale[0] > 0 && c->scale[0] <= c->scale[1] &&
	    c->scale[1] <= 1) || !(c->ratio[0] > 0 && c->ratio[0] <=
	    c->ratio[1]))
		return sk__fatal(&l->h, SK_EINVAL, "scale %g..%g, ratio "
		    "%g..%g: need 0 < scale0 <= scale1 <= 1 and 0 < ratio0 "
		    "<= ratio1", c->scale[0], c->scale[1], c->ratio[0],
		    c->ratio[1]);
	if (c->resize == 0)
		c->resize = (int)(((int64_t)c->image_size * 8 + 6) / 7);
	if (c->crop == SK_CROP_CENTER && c->resize < c->image_size)
		return sk__fatal(&l->h, SK_EINVAL, "resize %d is smaller than "
		    "the image size %d", c->resize, c->image_size);
	for (i = 0; i < 3; i++)
		if (!(c->std[i] != 0))
			return sk__fatal(&l->h, SK_EINVAL, "std[%d] is 0", i);
	if (c->max_pixels == 0)
		c->max_pixels = SK_IMAGE_MAX_PIXELS;
	if (c->workers == 0)
		c->workers = ncpus();
	if (c->prefetch_bytes == 0)
		c->prefetch_bytes = (size_t)64 << 20;
	return 0;
}

static int
start_threads(sk_loader *l)
{
	int i, rc;

	for (i = 0; i < l->nio; i++) {
		l->io[i].l = l;
		l->io[i].id = i;
		if ((rc = pthread_create(&l->io[i].th, NULL, sk__io_main,
		    &l->io[i])) != 0)
			goto fail;
		l->nio_started = i + 1;
	}
	for (i = 0; i < l->nworkers; i++) {
		l->workers[i].l = l;
		if ((rc = pthread_create(&l->workers[i].th, NULL,
		    sk__worker_main, &l->workers[i])) != 0)
			goto fail;
		l->nworkers_started = i + 1;
	}
	if ((rc = pthread_create(&l->dispatcher, NULL, sk__dispatch_main,
	    l)) != 0)
		goto fail;
	l->dispatcher_started = 1;
	return 0;
fail:
	return sk__fatal(&l->h, SK_ENOMEM, "cannot start a thread: %s",
	    strerror(rc));
}

int
sk_loader_open(sk_loader **out, const struct sk_loader_config *cfg)
{
	sk_loader *l;
	struct sk_loader_config *c;
	uint64_t per_rank, b;
	size_t hostdt;
	int i, rc, convert;

	*out = NULL;
	if ((l = calloc(1, sizeof *l)) == NULL)
		return SK_ENOMEM;
	*out = l;
	sk__handle_init(&l->h, SK__MAGIC_LOADER);
	l->open_ns = sk__now_ns();
	pthread_mutex_init(&l->mu, NULL);
	pthread_mutex_init(&l->ahead_mu, NULL);
	pthread_cond_init(&l->cond_slot, NULL);
	/* sk_loader_next_wait() times its wait on the monotonic clock */
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&l->cond_ready, &ca);
		pthread_condattr_destroy(&ca);
	}
	pthread_cond_init(&l->cond_work, NULL);
	l->inited = 1;
	if (cfg == NULL)
		return sk__fatal(&l->h, SK_EINVAL, "no config");
	l->cfg = *cfg;
	c = &l->cfg;
	/* The strings are the caller's; keep copies. */
	if ((c->urls != NULL && (c->urls = l->urls_copy =
	    sk__strdup(c->urls)) == NULL) || (c->manifest != NULL &&
	    (c->manifest = l->manifest_copy = sk__strdup(c->manifest)) ==
	    NULL))
		return sk__fatal(&l->h, SK_ENOMEM, "out of memory");
	if ((rc = check_config(l)) != 0)
		return rc;
	if ((rc = sk__load_shards(l)) != 0)
		return rc;
	for (i = 0; i < (int)l->nshards; i++)
		l->total += l->shards[i].nsamples;

	/* DESIGN: every rank yields the same number of batches. */
	per_rank = c->remainder == SK_REMAINDER_DROP ?
	    l->total / (uint64_t)c->world :
	    (l->total + (uint64_t)c->world - 1) / (uint64_t)c->world;
	b = c->remainder == SK_REMAINDER_DROP ? per_rank / (uint64_t)c->batch :
	    (per_rank + (uint64_t)c->batch - 1) / (uint64_t)c->batch;
	if (b == 0)
		return sk__fatal(&l->h, SK_EINVAL, "%" PRIu64 " samples over "
		    "%d ranks do not fill one batch of %d per rank; use a "
		    "smaller batch or remainder keep", l->total, c->world,
		    c->batch);
	if (per_rank > UINT32_MAX)
		return sk__fatal(&l->h, SK_ETOOBIG, "%" PRIu64 " samples per "
		    "rank is over the limit of %" PRIu32, per_rank,
		    UINT32_MAX);
	l->nbatches = (int64_t)b;
	if (c->resume_batch >= l->nbatches)
		return sk__fatal(&l->h, SK_EINVAL, "resume batch %d: an epoch "
		    "has %" PRId64 " batches", c->resume_batch, l->nbatches);
	l->total_batches = (int64_t)c->epochs * l->nbatches - c->resume_batch;

	/* With a GPU, the host makes u8 NHWC and the GPU converts. */
	convert = c->device >= 0 && c->decode && (c->dtype != SK_DTYPE_U8 ||
	    c->layout != SK_LAYOUT_NHWC);
	l->acfg.size = c->image_size;
	l->acfg.crop = c->crop;
	memcpy(l->acfg.scale, c->scale, sizeof c->scale);
	memcpy(l->acfg.ratio, c->ratio, sizeof c->ratio);
	l->acfg.resize = c->resize;
	l->acfg.flip = c->flip;
	l->acfg.dtype = convert ? SK_DTYPE_U8 : c->dtype;
	l->acfg.layout = convert ? SK_LAYOUT_NHWC : c->layout;
	memcpy(l->acfg.mean, c->mean, sizeof c->mean);
	memcpy(l->acfg.std, c->std, sizeof c->std);
	l->acfg.max_pixels = c->max_pixels;
	hostdt = sk_dtype_size(l->acfg.dtype);
	l->image_bytes = c->decode ? (size_t)c->image_size *
	    (size_t)c->image_size * 3 * hostdt : 0;

	l->nworkers = c->decode ? c->workers : 0;
	l->nio = c->io_streams;
	l->nslots = c->ring ? c->ring : 2 + (2 * c->workers + c->batch - 1) /
	    c->batch;
	if (l->nslots < 3)
		l->nslots = 3;
	if ((l->slots = calloc((size_t)l->nslots, sizeof *l->slots)) == NULL ||
	    (l->queues = calloc((size_t)l->nio, sizeof *l->queues)) == NULL ||
	    (l->io = calloc((size_t)l->nio, sizeof *l->io)) == NULL ||
	    (l->workers = calloc((size_t)(l->nworkers ? l->nworkers : 1),
	    sizeof *l->workers)) == NULL ||
	    (l->plans = calloc((size_t)c->epochs, sizeof *l->plans)) ==
	    NULL || (l->plan_done = calloc((size_t)c->epochs, 1)) == NULL)
		return sk__fatal(&l->h, SK_ENOMEM, "out of memory");
	for (i = 0; i < l->nslots; i++) {
		struct slot *sl = &l->slots[i];
		size_t nb = (size_t)c->batch;
		struct kept m;
		int bad = kept_alloc(&m, nb, l->image_bytes) != 0;

		if (!bad && (sl->ok = calloc(nb, 1)) == NULL) {
			kept_release(&m);
			bad = 1;
		}
		if (bad)
			return sk__fatal(&l->h, SK_ENOMEM, "out of memory for "
			    "%d batch slots of %zu bytes", l->nslots,
			    nb * l->image_bytes);
		slot_give(sl, &m);
	}
	for (i = 0; i < l->nio; i++) {
		pthread_mutex_init(&l->queues[i].mu, NULL);
		pthread_cond_init(&l->queues[i].cond, NULL);
		l->queues[i].cap = c->prefetch_bytes / (size_t)l->nio;
	}
	l->nqueues_inited = l->nio;
	if (c->device >= 0) {
		struct sk_error err;

		if ((rc = sk__gpu_open(&l->gpu, c->device, l->nslots,
		    (size_t)c->batch * l->image_bytes, c->image_size,
		    c->batch, convert, c->dtype, c->layout, c->mean, c->std,
		    &err)) != 0)
			return sk__fatal(&l->h, rc, "%s", err.msg);
	}
	l->st.batches_per_epoch = l->nbatches;
	l->st.nshards = l->nshards;
	l->st.dataset_samples = l->total;
	l->st.nclasses = l->nclasses;
	l->st.workers = l->nworkers;
	l->st.io_streams = l->nio;
	l->st.ring = l->nslots;
	sk__ahead_init(l);
	return start_threads(l);
}

/* Wait on cond_ready until the next batch is ready, the loader stops or
 * the monotonic deadline (ns, 0: none) passes: 0, or SK_ETIMEDOUT. */
static int
wait_ready_locked(sk_loader *l, struct slot *sl, uint64_t deadline)
{
	struct timespec ts;
	int rc = 0;

	ts.tv_sec = (time_t)(deadline / 1000000000u);
	ts.tv_nsec = (long)(deadline % 1000000000u);
	while (!(sl->state == SLOT_READY && sl->global == l->next_global) &&
	    !l->stop) {
		if (deadline == 0) {
			pthread_cond_wait(&l->cond_ready, &l->mu);
			continue;
		}
		if (rc == ETIMEDOUT)
			return SK_ETIMEDOUT;
		rc = pthread_cond_timedwait(&l->cond_ready, &l->mu, &ts);
	}
	return 0;
}

int
sk_loader_next(sk_loader *l, struct sk_batch *b)
{
	return sk_loader_next_wait(l, b, -1);
}

int
sk_loader_next_wait(sk_loader *l, struct sk_batch *b, double seconds)
{
	struct slot *sl;
	uint64_t t0, deadline = 0;
	int rc, i;

	if ((rc = sk__check(&l->h, SK__MAGIC_LOADER, "sk_loader_next")) != 0)
		return rc;
	if (b == NULL)
		return sk__fail(&l->h, SK_EINVAL, "sk_loader_next: no batch");
	memset(b, 0, sizeof *b);
	b->slot = -1;
	if (seconds >= 0)
		deadline = sk__now_ns() + (seconds < 1e6 ?
		    (uint64_t)(seconds * 1e9) : (uint64_t)1e15) + 1;
	pthread_mutex_lock(&l->mu);
	if (l->next_global >= l->total_batches) {
		pthread_mutex_unlock(&l->mu);
		return 0;
	}
	sl = &l->slots[l->next_global % l->nslots];
	if (sl->state == SLOT_HELD) {
		pthread_mutex_unlock(&l->mu);
		return sk__fail(&l->h, SK_EINVAL, "sk_loader_next: batch "
		    "%" PRId64 " is still held and its slot is the next one "
		    "(ring %d); release it first", l->next_global - l->nslots,
		    l->nslots);
	}
	if (!(sl->state == SLOT_READY && sl->global == l->next_global) &&
	    !l->stop) {
		t0 = sk__now_ns();
		rc = wait_ready_locked(l, sl, deadline);
		sk__add_ns(&l->t_consumer_wait, t0);
		if (rc != 0) {
			pthread_mutex_unlock(&l->mu);
			return rc;
		}
	}
	if (l->failed) {
		rc = l->failed;
		l->h.state = SK__STATE_FATAL;
		pthread_mutex_unlock(&l->mu);
		return rc;
	}
	sl->state = SLOT_HELD;
	l->next_global++;
	l->st.batches++;
	l->st.samples += (uint64_t)sl->n;
	for (i = 0; i < sl->n; i++)
		l->st.sample_bytes += sl->bytes[i];
	pthread_mutex_unlock(&l->mu);

	b->epoch = sl->epoch;
	b->index = sl->index;
	b->n = sl->n;
	b->size = l->cfg.image_size;
	b->dtype = l->acfg.dtype;
	b->layout = l->acfg.layout;
	b->image_bytes = l->image_bytes;
	b->images = sl->images;
	b->labels = sl->labels;
	b->keys = (const char **)sl->keys;
	b->bytes = sl->bytes;
	b->aug = sl->aug;
	b->slot = (int)(sl - l->slots);
	if (l->gpu != NULL && sl->n > 0) {
		struct sk_error err;

		if ((rc = sk__gpu_submit(l->gpu, b->slot, sl->images, sl->n,
		    &b->device_images, &b->ready_event, &err)) != 0) {
			sk__loader_fail(l, rc, "%s", err.msg);
			return rc;
		}
		b->dtype = l->cfg.dtype;
		b->layout = l->cfg.layout;
	}
	return 1;
}

int
sk_loader_release(sk_loader *l, struct sk_batch *b)
{
	struct slot *sl;
	int i, rc;

	if ((rc = sk__check(&l->h, SK__MAGIC_LOADER,
	    "sk_loader_release")) != 0)
		return rc;
	if (b == NULL || b->slot < 0 || b->slot >= l->nslots)
		return sk__fail(&l->h, SK_EINVAL, "sk_loader_release: not a "
		    "batch of this loader");
	sl = &l->slots[b->slot];
	/* The copy to the GPU reads the host slot: workers may refill it
	 * only once that is done. */
	if (l->gpu != NULL && sl->state == SLOT_HELD && sl->n > 0) {
		struct sk_error err;

		if ((rc = sk__gpu_wait(l->gpu, b->slot, &err)) != 0)
			return sk__fatal(&l->h, rc, "%s", err.msg);
	}
	pthread_mutex_lock(&l->mu);
	if (sl->state != SLOT_HELD) {
		pthread_mutex_unlock(&l->mu);
		return sk__fail(&l->h, SK_EINVAL, "sk_loader_release: batch "
		    "%" PRId64 " was released already", b->index);
	}
	for (i = 0; i < l->cfg.batch; i++) {
		free(sl->keys[i]);
		sl->keys[i] = NULL;
	}
	sl->state = SLOT_FREE;
	pthread_cond_broadcast(&l->cond_slot);
	pthread_mutex_unlock(&l->mu);
	b->slot = -1;
	return 0;
}

int
sk_loader_keep(sk_loader *l, struct sk_batch *b)
{
	struct slot *sl;
	struct kept *k, fresh;
	struct sk_error err;
	void *dev = NULL;
	int rc;

	if ((rc = sk__check(&l->h, SK__MAGIC_LOADER, "sk_loader_keep")) != 0)
		return rc;
	if (b == NULL || b->slot < 0 || b->slot >= l->nslots)
		return sk__fail(&l->h, SK_EINVAL, "sk_loader_keep: not a "
		    "held batch of this loader");
	sl = &l->slots[b->slot];
	/* The new memory first: on failure the batch stays as it was. */
	if ((k = calloc(1, sizeof *k)) == NULL ||
	    kept_alloc(&fresh, (size_t)l->cfg.batch, l->image_bytes) != 0) {
		free(k);
		return sk__fail(&l->h, SK_ENOMEM, "sk_loader_keep: out of "
		    "memory for a batch slot of %zu bytes",
		    (size_t)l->cfg.batch * l->image_bytes);
	}
	/* Device mode: the copy must be done (it reads the host slot), and
	 * the device buffer goes with the batch. */
	if (l->gpu != NULL && sl->state == SLOT_HELD && sl->n > 0 &&
	    ((rc = sk__gpu_wait(l->gpu, b->slot, &err)) != 0 ||
	    (rc = sk__gpu_detach(l->gpu, b->slot, &dev, &err)) != 0)) {
		kept_release(&fresh);
		free(k);
		return sk__fail(&l->h, rc, "%s", err.msg);
	}
	pthread_mutex_lock(&l->mu);
	if (sl->state != SLOT_HELD) {
		pthread_mutex_unlock(&l->mu);
		kept_release(&fresh);
		free(k);
		return sk__fail(&l->h, SK_EINVAL, "sk_loader_keep: batch "
		    "%" PRId64 " was released already", b->index);
	}
	*k = (struct kept){ sl->images, sl->pinned, sl->labels, sl->keys,
	    l->cfg.batch, sl->bytes, sl->aug, dev };
	slot_give(sl, &fresh);
	sl->state = SLOT_FREE;
	pthread_cond_broadcast(&l->cond_slot);
	pthread_mutex_unlock(&l->mu);
	b->slot = -1;
	b->kept = k;
	b->ready_event = NULL;
	return 0;
}

void
sk_batch_free(struct sk_batch *b)
{
	if (b == NULL || b->kept == NULL)
		return;
	kept_release(b->kept);
	free(b->kept);
	memset(b, 0, sizeof *b);
	b->slot = -1;
}

const char *
sk_loader_bound(const struct sk_loader_stats *st, double wall, int decode,
    double *share)
{
	double dec, io, cons;

	/* A consumer that rarely waits means the pipeline keeps ahead of
	 * it; otherwise the stage whose threads were busiest, as a share of
	 * their capacity, is the one to give more to. */
	cons = wall > 0 ? 1.0 - st->consumer_wait / wall : 0;
	dec = decode && st->workers > 0 && wall > 0 ? st->decode_busy /
	    (st->workers * wall) : 0;
	io = st->io_streams > 0 && wall > 0 ? st->io_busy /
	    (st->io_streams * wall) : 0;
	if (cons > 0.9 && st->ring_wait > 0.1 * wall) {
		*share = cons;
		return "consumer";
	}
	if (dec >= io) {
		*share = dec;
		return "decode";
	}
	*share = io;
	return "io";
}

enum sk_verdict
sk_verdict_decide(double wait_share, double loader_ips, double compute_ips,
    int free_input)
{
	int known = loader_ips >= 0 && compute_ips > 0;
	double ratio = known ? loader_ips / compute_ips : -1;

	if (free_input)
		return SK_VERDICT_COMPUTE;
	if (wait_share >= SK_VERDICT_WAIT_INPUT || (known &&
	    ratio < SK_VERDICT_RATIO_INPUT))
		return SK_VERDICT_INPUT;
	if (wait_share <= SK_VERDICT_WAIT_COMPUTE && (!known ||
	    ratio >= SK_VERDICT_RATIO_COMPUTE))
		return SK_VERDICT_COMPUTE;
	return SK_VERDICT_BALANCED;
}

const char *
sk_verdict_name(enum sk_verdict v)
{
	switch (v) {
	case SK_VERDICT_INPUT:
		return "input-bound";
	case SK_VERDICT_COMPUTE:
		return "compute-bound";
	case SK_VERDICT_BALANCED:
		return "balanced";
	}
	return "?";
}

static double
secs(uint64_t *ns)
{
	return (double)__atomic_load_n(ns, __ATOMIC_RELAXED) / 1e9;
}

int
sk_loader_stats(sk_loader *l, struct sk_loader_stats *st)
{
	uint64_t avg, n;
	int e;

	if (l == NULL || l->h.magic != SK__MAGIC_LOADER || st == NULL)
		return SK_EINVAL;
	pthread_mutex_lock(&l->mu);
	*st = l->st;
	/* What the epochs so far planned and left out, from the plan: the
	 * remainder past the last full batch of this rank. */
	n = l->total * ((uint64_t)l->cfg.rank + 1) / (uint64_t)l->cfg.world -
	    l->total * (uint64_t)l->cfg.rank / (uint64_t)l->cfg.world;
	e = l->nbatches > 0 ? (int)((l->next_global + l->cfg.resume_batch +
	    l->nbatches - 1) / l->nbatches) : 0;
	if (e > l->cfg.epochs)
		e = l->cfg.epochs;
	if ((uint64_t)l->nbatches * (uint64_t)l->cfg.batch < n)
		st->dropped = (uint64_t)e * (n - (uint64_t)l->nbatches *
		    (uint64_t)l->cfg.batch);
	st->planned = (uint64_t)l->cfg.epochs * n;
	pthread_mutex_unlock(&l->mu);
	st->bytes = __atomic_load_n(&l->bytes_read, __ATOMIC_RELAXED);
	st->wall = (double)(sk__now_ns() - l->open_ns) / 1e9;
	st->unplanned = __atomic_load_n(&l->unplanned, __ATOMIC_RELAXED);
	st->mismatched_shards = __atomic_load_n(&l->mismatched,
	    __ATOMIC_RELAXED);
	st->io_busy = secs(&l->t_io_busy);
	st->io_blocked = secs(&l->t_io_blocked);
	st->input_wait = secs(&l->t_input_wait);
	st->decode_busy = secs(&l->t_decode_busy);
	st->decode_idle = secs(&l->t_decode_idle);
	st->ring_wait = secs(&l->t_ring_wait);
	st->consumer_wait = secs(&l->t_consumer_wait);
	pthread_mutex_lock(&l->ahead_mu);
	st->ahead = l->ahead;
	st->ahead_peak = l->ahead_peak;
	st->ahead_cap = l->ahead_cap;
	pthread_mutex_unlock(&l->ahead_mu);

	/*
	 * shardkit(3), MEMORY: the I/O queues (prefetch, plus one sample
	 * each over it), the shuffle buffer and the samples sent to workers
	 * (encoded), the batch slots, the workers' scratch, and the plans;
	 * remote shards add the parts in flight of each I/O thread's shard
	 * and of the next one it opened ahead, and the fetch engine's pool
	 * of freed part buffers.
	 */
	avg = st->samples ? st->sample_bytes / st->samples :
	    __atomic_load_n(&l->max_sample, __ATOMIC_RELAXED);
	st->memory_bound = (uint64_t)l->cfg.prefetch_bytes +
	    (uint64_t)l->nio * __atomic_load_n(&l->max_sample,
	    __ATOMIC_RELAXED) +
	    ((uint64_t)l->cfg.shuffle < n ? (uint64_t)l->cfg.shuffle : n) *
	    avg + (uint64_t)l->nslots * (uint64_t)l->cfg.batch * avg +
	    (uint64_t)l->nslots * (uint64_t)l->cfg.batch *
	    ((uint64_t)l->image_bytes + 64) +
	    (uint64_t)l->nworkers * __atomic_load_n(&l->scratch_peak,
	    __ATOMIC_RELAXED) +
	    2 * n * sizeof(uint32_t);
	if (l->nshards > 0 && (strncmp(l->shards[0].url, "http://", 7) == 0 ||
	    strncmp(l->shards[0].url, "https://", 8) == 0)) {
		struct sk_fetch_config fc;

		sk_fetch_get_config(&fc);
		/* Each I/O thread reads one shard and opens the ones ahead
		 * of it, each with its parts in flight. */
		st->memory_bound += (uint64_t)(1 + st->ahead_peak) *
		    (uint64_t)l->nio * (uint64_t)fc.parts * fc.part_size +
		    SK_FETCH_POOL_BYTES;
	}
	return 0;
}

void
sk_loader_close(sk_loader *l)
{
	struct lsample *s;
	int i, e;

	if (l == NULL)
		return;
	if (l->inited) {
		pthread_mutex_lock(&l->mu);
		stop_all_locked(l);
		pthread_mutex_unlock(&l->mu);
	}
	for (i = 0; i < l->nio_started; i++)
		pthread_join(l->io[i].th, NULL);
	for (i = 0; i < l->nworkers_started; i++)
		pthread_join(l->workers[i].th, NULL);
	if (l->dispatcher_started)
		pthread_join(l->dispatcher, NULL);
	for (i = 0; i < l->nworkers_started; i++)
		sk__aug_scratch_free(&l->workers[i].scratch);
	while ((s = l->work_head) != NULL) {
		l->work_head = s->next;
		sk__lsample_free(s);
	}
	for (i = 0; i < l->nqueues_inited; i++) {
		while ((s = l->queues[i].head) != NULL) {
			l->queues[i].head = s->next;
			sk__lsample_free(s);
		}
		pthread_mutex_destroy(&l->queues[i].mu);
		pthread_cond_destroy(&l->queues[i].cond);
	}
	/* The GPU's copies read the pinned slots: stop it first. */
	if (l->gpu != NULL)
		sk__gpu_close(l->gpu);
	for (i = 0; l->slots != NULL && i < l->nslots; i++) {
		struct slot *sl = &l->slots[i];
		struct kept m = { sl->images, sl->pinned, sl->labels, sl->keys,
		    l->cfg.batch, sl->bytes, sl->aug, NULL };

		kept_release(&m);
		free(sl->ok);
	}
	for (e = 0; l->plans != NULL && e < l->cfg.epochs; e++)
		sk__eplan_free(l->plans[e]);
	for (i = 0; l->shards != NULL && i < (int)l->nshards; i++) {
		free(l->shards[i].url);
		free(l->shards[i].fetch_url);
		free(l->shards[i].key);
	}
	free(l->shards);
	free(l->plans);
	free(l->plan_done);
	free(l->slots);
	free(l->queues);
	free(l->io);
	free(l->workers);
	free(l->urls_copy);
	free(l->manifest_copy);
	free(l->note);
	if (l->inited) {
		pthread_mutex_destroy(&l->mu);
		pthread_mutex_destroy(&l->ahead_mu);
		pthread_cond_destroy(&l->cond_slot);
		pthread_cond_destroy(&l->cond_ready);
		pthread_cond_destroy(&l->cond_work);
	}
	l->h.magic = 0;
	free(l);
}

const char *
sk_loader_note(const sk_loader *l)
{
	return l != NULL ? l->note : NULL;
}
