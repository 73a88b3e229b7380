/*
 * loader.c - the streaming pipeline: plan each epoch, read shards on I/O
 * threads, put the samples in shuffle order, decode and augment them on
 * workers into batch slots, and hand whole batches to the consumer in
 * order.
 *
 *   I/O thread t ── queue t ──┐            ┌─ worker ─┐
 *   (items t, t+K, ...)       ├─ dispatcher ┼─ worker ─┼─ slots ─ next()
 *   I/O thread t+1 ─ queue ───┘  (heap)     └─ worker ─┘
 *
 * Determinism: an epoch's plan fixes, for each of this rank's stream
 * positions, the sequence number it gets after the shuffle buffer (the
 * buffer is simulated on positions, not on data). Sequence s lands in
 * batch s / B at index s % B, whichever thread decodes it, and its
 * augmentation draws from (seed, epoch, key). Skipped samples are removed
 * from their batch in place, so the order of the others never changes.
 *
 * Locks: l->mu guards everything shared below the "shared" comment in
 * struct sk_loader, the slots and the work queue; each I/O queue has its
 * own mutex. Never hold a queue's mutex while taking l->mu.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "loader.h"

#define SK__MAGIC_LOADER 0x534b4c44u	/* "SKLD" */

/* Log the first few skipped samples one by one, then only count them. */
#define SKIP_LOG_MAX 20

/* ------------------------------------------------------------------------ */
/* time                                                                     */

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void
add_ns(uint64_t *acc, uint64_t t0)
{
	__atomic_fetch_add(acc, now_ns() - t0, __ATOMIC_RELAXED);
}

static void
atomic_max(uint64_t *v, uint64_t x)
{
	uint64_t cur = __atomic_load_n(v, __ATOMIC_RELAXED);

	while (x > cur && !__atomic_compare_exchange_n(v, &cur, x, 1,
	    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/* ------------------------------------------------------------------------ */
/* samples                                                                  */

enum { SAMPLE_OK = -1 };

/* A sample between its shard and its batch. Owned by whoever holds it:
 * an I/O queue, the dispatcher's heap, the work queue, then a worker. */
struct slot;

struct lsample {
	struct lsample *next;
	int end;		/* marks the end of a plan item, no data */
	uint32_t seq;		/* its sequence number in the epoch */
	int status;		/* SAMPLE_OK or an sk_skip_reason */
	char *key;
	const char *url;	/* the shard's, for messages */
	uint8_t *img;		/* the image member's data */
	size_t img_len;
	int32_t label;
	uint64_t bytes;		/* all members' data */
	struct slot *slot;	/* where the dispatcher sent it */
	int idx;		/* its index in that batch */
};

static void
lsample_free(struct lsample *s)
{
	if (s == NULL)
		return;
	free(s->key);
	free(s->img);
	free(s);
}

/* ------------------------------------------------------------------------ */
/* the epoch plan                                                           */

/* Samples [first, first + count) of a shard, at stream position base. */
struct item {
	size_t shard;
	uint64_t first, count;
	uint64_t base;
};

struct eplan {
	int epoch;
	struct item *items;
	size_t nitems;
	uint64_t n;		/* this rank's samples */
	uint32_t *seq_of_pos;	/* (n) the shuffle's output order */
	uint32_t lo, hi;	/* the sequence numbers delivered */
	int64_t b0;		/* the first batch delivered */
};

struct shardinfo {
	char *url;
	uint64_t nsamples;
	uint64_t filesize;	/* the manifest's, 0 when unknown */
	int mismatch;		/* the shard disagrees with the manifest */
	int tail_read;		/* count_extra has read past its count */
};

/* ------------------------------------------------------------------------ */
/* queues                                                                   */

/* An I/O stream's queue: bounded by bytes, but always takes one sample so
 * that a sample larger than the bound cannot stall the stream. */
struct squeue {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct lsample *head, *tail;
	size_t bytes, cap;
	size_t count;
};

/* A batch slot: where workers write a batch and the consumer reads it. */
enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY, SLOT_HELD };

struct slot {
	int state;
	int epoch;
	int64_t index;
	int64_t global;		/* the batch number since open */
	int expected, done;
	uint8_t *images;
	int pinned;
	int32_t *labels;
	char **keys;
	uint64_t *bytes;
	struct sk_sample_aug *aug;
	uint8_t *ok;
	int n;
};

struct worker {
	sk_loader *l;
	pthread_t th;
	struct sk__aug_scratch scratch;
};

struct iothread {
	sk_loader *l;
	pthread_t th;
	int id;
};

struct sk_loader {
	struct sk__handle h;
	struct sk_loader_config cfg;
	struct sk__aug_config acfg;
	char *urls_copy, *manifest_copy;

	struct shardinfo *shards;
	size_t nshards;
	uint64_t total;		/* samples in the data set */
	int64_t nbatches;	/* per epoch, every rank */
	size_t image_bytes;	/* of one host image */
	int nslots;
	struct sk__gpu *gpu;

	pthread_t dispatcher;
	int dispatcher_started;
	int inited;		/* the mutex and conditions exist */
	int nio_started, nworkers_started, nqueues_inited;
	struct iothread *io;
	int nio;
	struct squeue *queues;
	struct worker *workers;
	int nworkers;
	uint64_t open_ns;

	pthread_mutex_t mu;
	/* ---- shared, under mu ---- */
	pthread_cond_t cond_slot;	/* a slot became free */
	pthread_cond_t cond_ready;	/* a slot became ready */
	pthread_cond_t cond_work;	/* work queued */
	struct eplan **plans;	/* by epoch index */
	uint8_t *plan_done;	/* by epoch index: freed, never again */
	struct slot *slots;
	struct lsample *work_head, *work_tail;
	int64_t next_global;	/* the next batch next() returns */
	int64_t total_batches;	/* over all epochs */
	int stop;
	int failed;
	int skips_logged;
	struct sk_loader_stats st;

	/* stage times in ns, added atomically */
	uint64_t t_io_busy, t_io_blocked, t_input_wait, t_decode_busy,
	    t_decode_idle, t_ring_wait, t_consumer_wait;
	uint64_t bytes_read;
	uint64_t scratch_peak;
	uint64_t max_sample;
	uint64_t unplanned;	/* samples past a manifest's count */
	uint64_t mismatched;	/* shards that disagree with the manifest */
};

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

static void
fail_locked(sk_loader *l, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
fail_locked(sk_loader *l, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail_locked(l, code, fmt, ap);
	va_end(ap);
}

static void
fail(sk_loader *l, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
fail(sk_loader *l, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	pthread_mutex_lock(&l->mu);
	vfail_locked(l, code, fmt, ap);
	pthread_mutex_unlock(&l->mu);
	va_end(ap);
}

static int
stopping(sk_loader *l)
{
	return __atomic_load_n(&l->stop, __ATOMIC_ACQUIRE);
}

/* ------------------------------------------------------------------------ */
/* planning                                                                 */

static uint64_t
mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* A uniform integer in [0, n) without modulo bias. */
static uint64_t
rng_below(uint64_t *state, uint64_t n)
{
	uint64_t x, lim = UINT64_MAX - UINT64_MAX % n;

	do
		x = sk__rng_next(state);
	while (x >= lim);
	return x % n;
}

/*
 * The epoch's plan for this rank. DESIGN: the shard order is a seeded
 * permutation each epoch; the samples of the shards in that order are
 * dealt to ranks as contiguous runs of floor or ceil(N / world) samples, so
 * every rank has the same count give or take one, and reads at most two
 * shards in part.
 */
static struct eplan *
plan_epoch(sk_loader *l, int eidx)
{
	const struct sk_loader_config *c = &l->cfg;
	struct eplan *p;
	size_t *perm = NULL, i, j, t;
	uint64_t rng, start, end, at, lo, hi, k, npos, *buf = NULL;
	uint64_t pos, nbuf, seq, r;

	if ((p = calloc(1, sizeof *p)) == NULL)
		return NULL;
	p->epoch = c->epoch + eidx;
	if ((perm = malloc(sizeof *perm * l->nshards)) == NULL ||
	    (p->items = calloc(l->nshards, sizeof *p->items)) == NULL)
		goto fail;
	rng = mix64(c->seed ^ mix64((uint64_t)p->epoch + 0x5348415244ULL));
	for (i = 0; i < l->nshards; i++)
		perm[i] = i;
	for (i = l->nshards; i > 1; i--) {
		j = (size_t)rng_below(&rng, i);
		t = perm[i - 1];
		perm[i - 1] = perm[j];
		perm[j] = t;
	}
	start = l->total * (uint64_t)c->rank / (uint64_t)c->world;
	end = l->total * ((uint64_t)c->rank + 1) / (uint64_t)c->world;
	p->n = end - start;
	for (i = 0, at = 0; i < l->nshards && at < end; i++) {
		lo = at;
		hi = at + l->shards[perm[i]].nsamples;
		at = hi;
		if (hi <= start)
			continue;
		if (lo < start)
			lo = start;
		if (hi > end)
			hi = end;
		if (hi <= lo)
			continue;
		p->items[p->nitems].shard = perm[i];
		p->items[p->nitems].first = lo - (at -
		    l->shards[perm[i]].nsamples);
		p->items[p->nitems].count = hi - lo;
		p->items[p->nitems].base = lo - start;
		p->nitems++;
	}

	/*
	 * The shuffle buffer, run on positions: fill it, then for each new
	 * position emit a random occupant and put the newcomer in its place;
	 * at the end emit the rest in random order (WebDataset's shuffle).
	 */
	npos = p->n;
	if ((p->seq_of_pos = malloc(sizeof *p->seq_of_pos *
	    (npos ? npos : 1))) == NULL)
		goto fail;
	nbuf = c->shuffle > 1 ? (uint64_t)c->shuffle : 1;
	if (nbuf > npos)
		nbuf = npos ? npos : 1;
	if ((buf = malloc(sizeof *buf * nbuf)) == NULL)
		goto fail;
	rng = mix64(c->seed ^ mix64((uint64_t)p->epoch * 0x9e3779b97f4a7c15ULL ^
	    ((uint64_t)c->rank << 32) ^ 0x5348554646ULL));
	for (pos = 0, seq = 0, k = 0; pos < npos; pos++) {
		if (k < nbuf) {
			buf[k++] = pos;
			continue;
		}
		r = rng_below(&rng, nbuf);
		p->seq_of_pos[buf[r]] = (uint32_t)seq++;
		buf[r] = pos;
	}
	while (k > 0) {
		r = rng_below(&rng, k);
		p->seq_of_pos[buf[r]] = (uint32_t)seq++;
		buf[r] = buf[--k];
	}

	p->b0 = eidx == 0 ? c->resume_batch : 0;
	p->lo = (uint32_t)(p->b0 * c->batch);
	hi = (uint64_t)l->nbatches * (uint64_t)c->batch;
	p->hi = (uint32_t)(hi < p->n ? hi : p->n);
	if (p->lo > p->hi)
		p->lo = p->hi;
	free(perm);
	free(buf);
	return p;
fail:
	free(perm);
	free(buf);
	if (p != NULL) {
		free(p->items);
		free(p->seq_of_pos);
		free(p);
	}
	return NULL;
}

static void
eplan_free(struct eplan *p)
{
	if (p == NULL)
		return;
	free(p->items);
	free(p->seq_of_pos);
	free(p);
}

/* The plan of epoch index e, made by whoever needs it first. NULL when the
 * loader stops (or memory ran out, which stops it), or when the epoch is
 * over already. */
static struct eplan *
get_plan(sk_loader *l, int e, size_t *nitems)
{
	struct eplan *p;

	pthread_mutex_lock(&l->mu);
	if (l->plan_done[e]) {
		pthread_mutex_unlock(&l->mu);
		return NULL;
	}
	if (l->plans[e] == NULL && !l->stop) {
		if ((l->plans[e] = plan_epoch(l, e)) == NULL)
			fail_locked(l, SK_ENOMEM, "out of memory planning "
			    "epoch %d", l->cfg.epoch + e);
	}
	p = l->stop ? NULL : l->plans[e];
	if (p != NULL && nitems != NULL)
		*nitems = p->nitems;
	pthread_mutex_unlock(&l->mu);
	return p;
}

/* ------------------------------------------------------------------------ */
/* I/O threads: shards to samples                                           */

static void
squeue_push(sk_loader *l, struct squeue *q, struct lsample *s)
{
	size_t sz = s->img_len;
	uint64_t t0;

	pthread_mutex_lock(&q->mu);
	if (q->count > 0 && q->bytes + sz > q->cap && !stopping(l)) {
		t0 = now_ns();
		while (q->count > 0 && q->bytes + sz > q->cap && !stopping(l))
			pthread_cond_wait(&q->cond, &q->mu);
		add_ns(&l->t_io_blocked, t0);
	}
	if (stopping(l)) {
		pthread_mutex_unlock(&q->mu);
		lsample_free(s);
		return;
	}
	s->next = NULL;
	if (q->tail != NULL)
		q->tail->next = s;
	else
		q->head = s;
	q->tail = s;
	q->bytes += sz;
	q->count++;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->mu);
}

/* The next sample of q, waiting for it; NULL when stopping. */
static struct lsample *
squeue_pop(sk_loader *l, struct squeue *q)
{
	struct lsample *s;
	uint64_t t0;

	pthread_mutex_lock(&q->mu);
	if (q->head == NULL && !stopping(l)) {
		t0 = now_ns();
		while (q->head == NULL && !stopping(l))
			pthread_cond_wait(&q->cond, &q->mu);
		add_ns(&l->t_input_wait, t0);
	}
	if ((s = q->head) != NULL) {
		q->head = s->next;
		if (q->head == NULL)
			q->tail = NULL;
		q->bytes -= s->img_len;
		q->count--;
		pthread_cond_broadcast(&q->cond);
	}
	pthread_mutex_unlock(&q->mu);
	return s;
}

static int
is_image_ext(const char *ext)
{
	return strcasecmp(ext, "jpg") == 0 || strcasecmp(ext, "jpeg") == 0 ||
	    strcasecmp(ext, "png") == 0;
}

/* WebDataset .cls: the label as ASCII decimal, blanks around it allowed. */
static int
parse_label(const char *buf, size_t n, int32_t *out)
{
	char tmp[32], *end;
	long v;

	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
	    buf[n - 1] == ' ' || buf[n - 1] == '\t'))
		n--;
	while (n > 0 && (*buf == ' ' || *buf == '\t')) {
		buf++;
		n--;
	}
	if (n == 0 || n >= sizeof tmp)
		return -1;
	memcpy(tmp, buf, n);
	tmp[n] = '\0';
	errno = 0;
	v = strtol(tmp, &end, 10);
	if (*end != '\0' || errno != 0 || v < 0 || v > INT32_MAX)
		return -1;
	*out = (int32_t)v;
	return 0;
}

/* Add the shard bytes from start (or what was counted) to end. */
static void
count_bytes(sk_loader *l, uint64_t start, uint64_t *counted, uint64_t end)
{
	uint64_t from = start + *counted;

	if (end > from) {
		__atomic_fetch_add(&l->bytes_read, end - from,
		    __ATOMIC_RELAXED);
		*counted = end - start;
	}
}

/* An item's sample: is its position one this rank delivers? */
static int
needed(const struct eplan *p, uint64_t pos)
{
	uint32_t s = p->seq_of_pos[pos];

	return s >= p->lo && s < p->hi;
}

/* A sample lost with its shard: its key is unknown, so it is named by its
 * index in the shard. */
static struct lsample *
placeholder(const struct eplan *p, uint64_t pos, uint64_t idx,
    const char *url, int why)
{
	struct lsample *s = calloc(1, sizeof *s);

	if (s == NULL)
		return NULL;
	s->seq = p->seq_of_pos[pos];
	s->status = why;
	s->url = url;
	if ((s->key = sk__asprintf("#%" PRIu64, idx)) == NULL) {
		free(s);
		return NULL;
	}
	return s;
}

/* The members the loader reads: the image and the label. */
static int
want_member(const char *ext, void *arg)
{
	(void)arg;
	return is_image_ext(ext) || strcmp(ext, "cls") == 0;
}

/* Move a read sample's image and label into cur; set its status. */
static void
take_sample(sk_loader *l, struct lsample *cur, struct sk_sample *s)
{
	struct sk_sample_member *m;
	size_t i;

	cur->bytes = s->bytes;
	if (s->too_big) {
		cur->status = SK_SKIP_TOO_BIG;
		return;
	}
	for (i = 0; i < s->n; i++) {
		m = &s->m[i];
		if (m->data == NULL)
			continue;
		if (cur->img == NULL && is_image_ext(m->ext)) {
			/* The reader's buffer becomes the sample's. */
			cur->img = m->data;
			cur->img_len = (size_t)m->size;
			m->data = NULL;
			atomic_max(&l->max_sample, m->size);
		} else if (cur->label < 0 && strcmp(m->ext, "cls") == 0 &&
		    parse_label((const char *)m->data, (size_t)m->size,
		    &cur->label) != 0)
			cur->label = -1;
	}
	if (cur->img == NULL)
		cur->status = SK_SKIP_NO_IMAGE;
	else if (cur->label < 0)
		cur->status = SK_SKIP_NO_LABEL;
	/* Whole as far as the loader goes, a sample before damage is good;
	 * one missing a member may have lost it to the damage. */
	if (s->cut && cur->status != SAMPLE_OK) {
		free(cur->img);
		cur->img = NULL;
		cur->img_len = 0;
		cur->status = SK_SKIP_DAMAGED;
	}
}

/* Count sh as a shard that disagrees with the manifest, once; 1 the first
 * time. */
static int
mark_mismatch(sk_loader *l, struct shardinfo *sh)
{
	if (__atomic_exchange_n(&sh->mismatch, 1, __ATOMIC_RELAXED))
		return 0;
	__atomic_fetch_add(&l->mismatched, 1, __ATOMIC_RELAXED);
	return 1;
}

/*
 * Manifest truth, checked once per shard by the rank that reads its first
 * sample: a size other than the manifest's means the manifest is stale,
 * and its sample count (which fixed the plan) may be wrong too.
 */
static void
check_filesize(sk_loader *l, const struct item *it, sk_source *src)
{
	struct shardinfo *sh = &l->shards[it->shard];
	char msg[SK_ERRMSG_MAX];
	uint64_t size;

	if (it->first != 0 || sh->filesize == 0 ||
	    sk_source_size(src, &size) != 0 || size == sh->filesize ||
	    !mark_mismatch(l, sh))
		return;
	if (size < sh->filesize)
		snprintf(msg, sizeof msg, "%s: offset %" PRIu64 ": the file "
		    "ends here, but the manifest says it has %" PRIu64
		    " bytes (a truncated shard, or a stale manifest)", sh->url,
		    size, sh->filesize);
	else
		snprintf(msg, sizeof msg, "%s: %" PRIu64 " bytes, but the "
		    "manifest says %" PRIu64 " (a stale manifest)", sh->url,
		    size, sh->filesize);
	if (l->cfg.strict)
		fail(l, SK_EFORMAT, "%s", msg);
	else
		sk_log(SK_LOG_WARN, "%s; samples are read as the manifest "
		    "plans them, extra or missing ones are counted", msg);
}

/*
 * Past the manifest's last sample of a shard: count what else is there.
 * Those samples are in no plan, so they are never delivered; they are
 * counted as unplanned, and the shard as one the manifest gets wrong.
 */
static void
count_extra(sk_loader *l, const struct item *it, sk_sample_reader *r,
    struct sk_sample *s)
{
	struct shardinfo *sh = &l->shards[it->shard];
	uint64_t extra = 0;
	int rc;

	/* Once per shard, not once per epoch. */
	if (__atomic_exchange_n(&sh->tail_read, 1, __ATOMIC_RELAXED))
		return;
	while (!stopping(l) && (rc = sk_sample_reader_next(r, s, NULL,
	    NULL)) > 0)
		extra++;
	if (stopping(l))
		return;
	if (rc < 0 && l->cfg.strict) {
		fail(l, rc, "%s; after the %" PRIu64 " samples the manifest "
		    "counts", sk_errmsg(r), sh->nsamples);
		return;
	}
	if (rc < 0)
		sk_log(SK_LOG_WARN, "%s; after the %" PRIu64 " samples the "
		    "manifest counts", sk_errmsg(r), sh->nsamples);
	if (extra == 0)
		return;
	__atomic_fetch_add(&l->unplanned, extra, __ATOMIC_RELAXED);
	mark_mismatch(l, sh);
	if (l->cfg.strict) {
		fail(l, SK_EFORMAT, "%s: %" PRIu64 " samples after the %"
		    PRIu64 " the manifest counts: the manifest is stale",
		    sh->url, extra, sh->nsamples);
		return;
	}
	sk_log(SK_LOG_WARN, "%s: %" PRIu64 " samples after the %" PRIu64
	    " the manifest counts: the manifest is stale; they are not "
	    "delivered (counted as unplanned)", sh->url, extra, sh->nsamples);
}

/*
 * Stream one plan item: skip to its first sample, read the image and label
 * of each needed sample (other members and unneeded samples are skipped,
 * which is a seek on a file), then push an end marker. A shard that fails
 * or ends early turns its remaining needed samples into placeholders that
 * count as damaged; with strict it fails the loader. The item that ends a
 * shard also counts samples past the manifest's count.
 */
static void
io_item(sk_loader *l, struct squeue *q, const struct eplan *p,
    const struct item *it)
{
	const char *url = l->shards[it->shard].url;
	const uint64_t last = it->first + it->count;
	sk_source *src = NULL;
	sk_sample_reader *r = NULL;
	struct sk_sample_reader_opts ropts;
	struct sk_sample smp;
	struct lsample *cur = NULL, *s;
	char errbuf[SK_ERRMSG_MAX];
	uint64_t idx = 0, pos = 0, start_off = 0, end_off = 0, counted = 0, t0;
	int rc, have_start = 0;

	memset(&smp, 0, sizeof smp);
	t0 = now_ns();
	errbuf[0] = '\0';
	if ((rc = sk_source_open(&src, url)) != 0) {
		/* A missing shard is an error, never a skip. */
		snprintf(errbuf, sizeof errbuf, "%s", src != NULL ?
		    sk_errmsg(src) : "out of memory");
		sk_source_close(src);
		goto fatal;
	}
	check_filesize(l, it, src);
	ropts.tar_flags = 0;
	ropts.max_sample_bytes = l->cfg.max_sample_bytes;
	ropts.max_members = 0;
	rc = sk_sample_reader_open(&r, src, &ropts);
	src = NULL;		/* the reader owns it now */
	if (rc != 0)
		goto damaged;

	for (idx = 0; idx < last; idx++) {
		if (stopping(l))
			goto out;
		/* Samples before the item's first, and those this rank does
		 * not deliver, pass without reading data. */
		if (idx >= it->first) {
			pos = it->base + (idx - it->first);
			if (needed(p, pos)) {
				if ((cur = calloc(1, sizeof *cur)) == NULL)
					goto nomem;
				cur->seq = p->seq_of_pos[pos];
				cur->status = SAMPLE_OK;
				cur->url = url;
				cur->label = -1;
			}
		}
		rc = sk_sample_reader_next(r, &smp, cur != NULL ?
		    want_member : NULL, NULL);
		if (rc < 0)
			goto damaged;
		if (rc == 0) {
			/* The shard ended early: the tail reports it. */
			lsample_free(cur);
			cur = NULL;
			break;
		}
		if (!have_start) {
			start_off = smp.offset;
			have_start = 1;
		}
		end_off = smp.end;
		if (cur == NULL)
			continue;
		/* The reader's key becomes the sample's. */
		cur->key = smp.key;
		smp.key = NULL;
		take_sample(l, cur, &smp);
		/* Count the bytes before the sample can reach a batch, so
		 * stats taken then include them. */
		count_bytes(l, start_off, &counted, end_off);
		add_ns(&l->t_io_busy, t0);
		squeue_push(l, q, cur);
		t0 = now_ns();
		cur = NULL;
	}
	if (idx == last && last == l->shards[it->shard].nsamples)
		count_extra(l, it, r, &smp);
	goto out;

nomem:
	rc = SK_ENOMEM;
	snprintf(errbuf, sizeof errbuf, "%s: out of memory at sample %" PRIu64,
	    url, idx);
	goto fatal;
damaged:
	/* The reader's message names the URL and the offset. */
	snprintf(errbuf, sizeof errbuf, "%s", r != NULL ? sk_errmsg(r) :
	    "out of memory");
	if (l->cfg.strict)
		goto fatal;
	sk_log(SK_LOG_WARN, "%s; the rest of this shard is skipped", errbuf);
	goto out;
fatal:
	lsample_free(cur);
	sk_sample_reader_close(r);
	sk_sample_free(&smp);
	add_ns(&l->t_io_busy, t0);
	fail(l, rc != 0 ? rc : SK_EIO, "%s", errbuf);
	return;
out:
	sk_sample_reader_close(r);
	sk_sample_free(&smp);
	/* A sample cut by damage is lost with the rest of the shard. */
	if (cur != NULL) {
		if (cur->key == NULL && (cur->key = sk__asprintf("#%" PRIu64,
		    idx)) == NULL) {
			lsample_free(cur);
			fail(l, SK_ENOMEM, "out of memory");
			return;
		}
		cur->status = SK_SKIP_DAMAGED;
		squeue_push(l, q, cur);
		idx++;
	}
	count_bytes(l, start_off, &counted, end_off);
	if (!stopping(l) && idx < last) {
		/* A clean end before the planned count: the manifest (or the
		 * count taken at open) is stale. */
		if (errbuf[0] == '\0') {
			mark_mismatch(l, &l->shards[it->shard]);
			sk_log(SK_LOG_WARN, "%s: %" PRIu64 " samples, but the "
			    "plan (manifest) counts more; the missing ones "
			    "are counted as damaged", url, idx);
		}
		if (idx < it->first)
			idx = it->first;
		for (; idx < last && !stopping(l); idx++) {
			pos = it->base + (idx - it->first);
			if (!needed(p, pos))
				continue;
			if ((s = placeholder(p, pos, idx, url,
			    SK_SKIP_DAMAGED)) == NULL) {
				fail(l, SK_ENOMEM, "out of memory");
				return;
			}
			squeue_push(l, q, s);
		}
	}
	count_bytes(l, start_off, &counted, end_off);
	add_ns(&l->t_io_busy, t0);
	if ((s = calloc(1, sizeof *s)) == NULL) {
		fail(l, SK_ENOMEM, "out of memory");
		return;
	}
	s->end = 1;
	squeue_push(l, q, s);
}

/* I/O thread t streams items t, t + K, t + 2K, ... of every epoch into its
 * own queue, which the dispatcher drains in item order. */
static void *
io_main(void *arg)
{
	struct iothread *io = arg;
	sk_loader *l = io->l;
	struct eplan *p;
	size_t i, n;
	int e;

	for (e = 0; e < l->cfg.epochs && !stopping(l); e++) {
		/* The dispatcher frees the plan once it has the end marker
		 * of the epoch's last item: read nothing of it after that,
		 * and its size only under the lock. */
		if ((p = get_plan(l, e, &n)) == NULL)
			continue;
		for (i = (size_t)io->id; i < n && !stopping(l);
		    i += (size_t)l->nio)
			io_item(l, &l->queues[io->id], p, &p->items[i]);
	}
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* batch slots                                                              */

/* Wait until the slot of batch `global` is free and claim it; NULL when
 * stopping. */
static struct slot *
slot_claim(sk_loader *l, int64_t global, const struct eplan *p, int64_t b)
{
	struct slot *sl = &l->slots[global % l->nslots];
	int64_t lo, hi, first = b * l->cfg.batch;
	uint64_t t0;

	pthread_mutex_lock(&l->mu);
	if (sl->state != SLOT_FREE && !l->stop) {
		t0 = now_ns();
		while (sl->state != SLOT_FREE && !l->stop)
			pthread_cond_wait(&l->cond_slot, &l->mu);
		add_ns(&l->t_ring_wait, t0);
	}
	if (l->stop) {
		pthread_mutex_unlock(&l->mu);
		return NULL;
	}
	lo = first > p->lo ? first : p->lo;
	hi = first + l->cfg.batch < p->hi ? first + l->cfg.batch : p->hi;
	sl->state = SLOT_FILLING;
	sl->epoch = p->epoch;
	sl->index = b;
	sl->global = global;
	sl->expected = hi > lo ? (int)(hi - lo) : 0;
	sl->done = 0;
	sl->n = 0;
	memset(sl->ok, 0, (size_t)l->cfg.batch);
	pthread_mutex_unlock(&l->mu);
	return sl;
}

/* Close up the holes skipped samples left, keeping the order. */
static void
slot_compact(sk_loader *l, struct slot *sl)
{
	int i, j;

	for (i = 0, j = 0; i < l->cfg.batch; i++) {
		if (!sl->ok[i])
			continue;
		if (i != j) {
			memmove(sl->images + (size_t)j * l->image_bytes,
			    sl->images + (size_t)i * l->image_bytes,
			    l->image_bytes);
			sl->labels[j] = sl->labels[i];
			sl->keys[j] = sl->keys[i];
			sl->keys[i] = NULL;
			sl->bytes[j] = sl->bytes[i];
			sl->aug[j] = sl->aug[i];
			sl->ok[j] = 1;
			sl->ok[i] = 0;
		}
		j++;
	}
	sl->n = j;
}

static void
slot_ready_locked(sk_loader *l, struct slot *sl)
{
	sl->state = SLOT_READY;
	pthread_cond_broadcast(&l->cond_ready);
}

/*
 * A sample is done with (status SAMPLE_OK or a skip reason); s is freed
 * here, its key moved to the slot. The last sample of a batch compacts it
 * (outside the lock: nobody else touches a slot whose samples are all
 * done) and makes it ready.
 */
static void
complete(sk_loader *l, struct lsample *s, int status, const char *why)
{
	struct slot *sl = s->slot;
	int idx = s->idx, last;

	pthread_mutex_lock(&l->mu);
	if (status == SAMPLE_OK) {
		sl->ok[idx] = 1;
		sl->keys[idx] = s->key;
		s->key = NULL;
		sl->labels[idx] = s->label;
		sl->bytes[idx] = s->bytes;
	} else {
		l->st.skipped[status]++;
		l->st.skipped_total++;
		if (l->skips_logged < SKIP_LOG_MAX)
			sk_log(SK_LOG_WARN, "%s: skipped sample %s (%s): %s",
			    s->url, s->key, sk_skip_reason_name(status), why);
		else if (l->skips_logged == SKIP_LOG_MAX)
			sk_log(SK_LOG_WARN, "more skipped samples are only "
			    "counted");
		l->skips_logged++;
	}
	last = ++sl->done == sl->expected;
	pthread_mutex_unlock(&l->mu);
	lsample_free(s);
	if (!last)
		return;
	slot_compact(l, sl);
	pthread_mutex_lock(&l->mu);
	slot_ready_locked(l, sl);
	pthread_mutex_unlock(&l->mu);
}

static const char *
status_text(int status)
{
	switch (status) {
	case SK_SKIP_NO_IMAGE:
		return "no .jpg, .jpeg or .png member";
	case SK_SKIP_NO_LABEL:
		return "no .cls member holding a label";
	case SK_SKIP_DAMAGED:
		return "lost with the damaged part of its shard";
	case SK_SKIP_TOO_BIG:
		return "its members add up to more than the sample size "
		    "limit; not read";
	}
	return "";
}

/* ------------------------------------------------------------------------ */
/* the dispatcher: samples in sequence order to the workers                 */

/* A min-heap of samples by sequence number: the shuffle buffer's content
 * (at most `shuffle` samples). */
struct heap {
	struct lsample **v;
	size_t n, cap;
};

static int
heap_push(struct heap *h, struct lsample *s)
{
	struct lsample **nv, *t;
	size_t i, up;

	if (h->n == h->cap) {
		if ((nv = realloc(h->v, sizeof *nv * (h->cap ? h->cap * 2 :
		    64))) == NULL)
			return SK_ENOMEM;
		h->v = nv;
		h->cap = h->cap ? h->cap * 2 : 64;
	}
	i = h->n++;
	h->v[i] = s;
	while (i > 0 && h->v[up = (i - 1) / 2]->seq > h->v[i]->seq) {
		t = h->v[up];
		h->v[up] = h->v[i];
		h->v[i] = t;
		i = up;
	}
	return 0;
}

static struct lsample *
heap_pop(struct heap *h)
{
	struct lsample *top = h->v[0], *t;
	size_t i = 0, c;

	h->v[0] = h->v[--h->n];
	for (;;) {
		c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && h->v[c + 1]->seq < h->v[c]->seq)
			c++;
		if (h->v[i]->seq <= h->v[c]->seq)
			break;
		t = h->v[i];
		h->v[i] = h->v[c];
		h->v[c] = t;
		i = c;
	}
	return top;
}

static void
queue_work(sk_loader *l, struct lsample *s)
{
	pthread_mutex_lock(&l->mu);
	s->next = NULL;
	if (l->work_tail != NULL)
		l->work_tail->next = s;
	else
		l->work_head = s;
	l->work_tail = s;
	pthread_cond_signal(&l->cond_work);
	pthread_mutex_unlock(&l->mu);
}

/* Send sample s to index idx of slot sl: to a worker, or straight to its
 * batch when there is nothing to decode. */
static void
dispatch(sk_loader *l, struct lsample *s, struct slot *sl, int idx)
{
	s->slot = sl;
	s->idx = idx;
	if (s->status != SAMPLE_OK) {
		if (l->cfg.strict) {
			fail(l, SK_EFORMAT, "%s: sample %s: %s", s->url,
			    s->key, status_text(s->status));
			lsample_free(s);
			return;
		}
		complete(l, s, s->status, status_text(s->status));
		return;
	}
	if (!l->cfg.decode) {
		memset(&sl->aug[idx], 0, sizeof sl->aug[idx]);
		complete(l, s, SAMPLE_OK, NULL);
		return;
	}
	queue_work(l, s);
}

static void *
dispatch_main(void *arg)
{
	sk_loader *l = arg;
	struct heap h = { NULL, 0, 0 };
	struct eplan *p;
	struct slot *sl;
	struct lsample *s;
	int64_t global = 0, b, seq, lo, hi;
	size_t item;
	int e;

	for (e = 0; e < l->cfg.epochs && !stopping(l); e++) {
		if ((p = get_plan(l, e, NULL)) == NULL)
			break;
		item = 0;
		for (b = p->b0; b < l->nbatches && !stopping(l); b++) {
			if ((sl = slot_claim(l, global++, p, b)) == NULL)
				goto out;
			if (sl->expected == 0) {
				pthread_mutex_lock(&l->mu);
				slot_ready_locked(l, sl);
				pthread_mutex_unlock(&l->mu);
				continue;
			}
			lo = b * l->cfg.batch;
			hi = lo + l->cfg.batch;
			if (lo < p->lo)
				lo = p->lo;
			if (hi > p->hi)
				hi = p->hi;
			for (seq = lo; seq < hi; seq++) {
				/* Read on until the sample due is in. */
				while (h.n == 0 || h.v[0]->seq != seq) {
					if (item >= p->nitems) {
						fail(l, SK_EFORMAT, "internal "
						    "error: sample missing "
						    "from the plan");
						goto out;
					}
					s = squeue_pop(l, &l->queues[item %
					    (size_t)l->nio]);
					if (s == NULL)
						goto out;
					if (s->end) {
						lsample_free(s);
						item++;
						continue;
					}
					if (heap_push(&h, s) != 0) {
						lsample_free(s);
						fail(l, SK_ENOMEM, "out of "
						    "memory");
						goto out;
					}
				}
				s = heap_pop(&h);
				dispatch(l, s, sl, (int)(seq - b *
				    l->cfg.batch));
			}
		}
		/* Take the end markers of the items not drained yet, so the
		 * next epoch starts at its first item on every queue. */
		while (item < p->nitems && !stopping(l)) {
			if ((s = squeue_pop(l, &l->queues[item %
			    (size_t)l->nio])) == NULL)
				goto out;
			if (s->end)
				item++;
			lsample_free(s);
		}
		/* Stopped mid-drain: I/O threads may still read the plan;
		 * close() frees it after joining them. */
		if (stopping(l))
			goto out;
		while (h.n > 0)
			lsample_free(heap_pop(&h));
		pthread_mutex_lock(&l->mu);
		eplan_free(l->plans[e]);
		l->plans[e] = NULL;
		l->plan_done[e] = 1;
		pthread_mutex_unlock(&l->mu);
	}
out:
	while (h.n > 0)
		lsample_free(heap_pop(&h));
	free(h.v);
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* decode workers                                                           */

static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	sk_loader *l = w->l;
	struct lsample *s;
	struct slot *sl;
	struct sk_error err;
	uint64_t t0, seed;
	int rc, status;

	for (;;) {
		pthread_mutex_lock(&l->mu);
		if (l->work_head == NULL && !l->stop) {
			t0 = now_ns();
			while (l->work_head == NULL && !l->stop)
				pthread_cond_wait(&l->cond_work, &l->mu);
			add_ns(&l->t_decode_idle, t0);
		}
		if (l->stop) {
			pthread_mutex_unlock(&l->mu);
			break;
		}
		s = l->work_head;
		l->work_head = s->next;
		if (l->work_head == NULL)
			l->work_tail = NULL;
		pthread_mutex_unlock(&l->mu);

		t0 = now_ns();
		sl = s->slot;
		seed = sk__sample_seed(l->cfg.seed, sl->epoch, s->key);
		err.code = 0;
		err.msg[0] = '\0';
		rc = sk__augment(&l->acfg, &w->scratch, seed, s->img,
		    s->img_len, sl->images + (size_t)s->idx * l->image_bytes,
		    &sl->aug[s->idx], &err);
		free(s->img);
		s->img = NULL;
		atomic_max(&l->scratch_peak, w->scratch.high_water);
		add_ns(&l->t_decode_busy, t0);
		if (rc == 0) {
			complete(l, s, SAMPLE_OK, NULL);
			continue;
		}
		if (rc == SK_ENOMEM || l->cfg.strict) {
			fail(l, rc, "%s: sample %s: %s", s->url, s->key,
			    err.msg);
			lsample_free(s);
			break;
		}
		status = rc == SK_ETOOBIG ? SK_SKIP_TOO_BIG : SK_SKIP_DECODE;
		complete(l, s, status, err.msg);
	}
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* opening: the shard list and its counts                                   */

/* Count a shard's samples from its headers (no data is read). */
static int
count_samples(sk_loader *l, const char *url, uint64_t *n)
{
	sk_source *src = NULL;
	sk_sample_reader *r = NULL;
	struct sk_sample smp;
	int rc;

	*n = 0;
	memset(&smp, 0, sizeof smp);
	if ((rc = sk_source_open(&src, url)) != 0) {
		sk__fatal(&l->h, rc, "shard %s: %s", url, src != NULL ?
		    sk_errmsg(src) : "out of memory");
		sk_source_close(src);
		return rc;
	}
	if ((rc = sk_sample_reader_open(&r, src, NULL)) != 0)
		goto out;
	while ((rc = sk_sample_reader_next(r, &smp, NULL, NULL)) > 0)
		(*n)++;
	if (rc < 0 && smp.n > 0)
		(*n)++;		/* cut by the damage: streaming skips it */
out:
	/*
	 * Damage: the samples before it are what the stream will find too
	 * (a sample cut by it counts, as a damaged skip), so the plan holds;
	 * only strict makes it fatal here, as it would be when streaming.
	 */
	if (rc < 0 && rc != SK_ENOMEM && r != NULL && !l->cfg.strict) {
		sk_log(SK_LOG_WARN, "%s; counting %" PRIu64 " samples before "
		    "it", sk_errmsg(r), *n);
		rc = 0;
	}
	if (rc < 0)
		sk__fatal(&l->h, rc, "%s", r != NULL ? sk_errmsg(r) :
		    "out of memory");
	sk_sample_reader_close(r);
	sk_sample_free(&smp);
	return rc < 0 ? rc : 0;
}

static int
load_shards(sk_loader *l)
{
	const struct sk_loader_config *c = &l->cfg;
	struct sk_manifest m;
	struct sk_strlist urls = { NULL, 0, 0 };
	struct sk_error err;
	size_t i;
	int rc;

	memset(&m, 0, sizeof m);
	if (c->manifest != NULL) {
		if ((rc = sk_manifest_read(c->manifest, &m, &err)) != 0)
			return sk__fatal(&l->h, rc, "%s", err.msg);
		if (m.nshards == 0) {
			sk_manifest_free(&m);
			return sk__fatal(&l->h, SK_EINVAL, "%s: no shards",
			    c->manifest);
		}
		if ((l->shards = calloc(m.nshards, sizeof *l->shards)) ==
		    NULL) {
			sk_manifest_free(&m);
			return sk__fatal(&l->h, SK_ENOMEM, "out of memory");
		}
		l->nshards = m.nshards;
		for (i = 0; i < m.nshards; i++) {
			l->shards[i].url = sk_manifest_resolve(c->manifest,
			    m.shards[i].url);
			l->shards[i].nsamples = m.shards[i].nsamples;
			l->shards[i].filesize = m.shards[i].filesize;
			if (l->shards[i].url == NULL) {
				sk_manifest_free(&m);
				return sk__fatal(&l->h, SK_ENOMEM, "out of "
				    "memory");
			}
		}
		sk_manifest_free(&m);
		return 0;
	}

	/* A pattern: no counts to plan with, so read every shard's headers
	 * once (pass the manifest to avoid it). */
	if ((rc = sk_url_expand(c->urls, &urls, &err)) != 0)
		return sk__fatal(&l->h, rc, "%s", err.msg);
	if (urls.n == 0) {
		sk_strlist_free(&urls);
		return sk__fatal(&l->h, SK_EINVAL, "%s: no shards", c->urls);
	}
	if ((l->shards = calloc(urls.n, sizeof *l->shards)) == NULL) {
		sk_strlist_free(&urls);
		return sk__fatal(&l->h, SK_ENOMEM, "out of memory");
	}
	l->nshards = urls.n;
	for (i = 0; i < urls.n; i++) {
		l->shards[i].url = urls.v[i];
		urls.v[i] = NULL;
		if ((rc = count_samples(l, l->shards[i].url,
		    &l->shards[i].nsamples)) != 0)
			break;
	}
	sk_strlist_free(&urls);
	return rc;
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

static int
check_config(sk_loader *l)
{
	struct sk_loader_config *c = &l->cfg;
	int i;

	if ((c->urls == NULL) == (c->manifest == NULL))
		return sk__fatal(&l->h, SK_EINVAL, "give shard URLs or a "
		    "manifest, not both or neither");
	if (c->batch < 1 || c->batch > 1 << 20)
		return sk__fatal(&l->h, SK_EINVAL, "batch %d: not in 1..%d",
		    c->batch, 1 << 20);
	if (c->world < 1 || c->rank < 0 || c->rank >= c->world)
		return sk__fatal(&l->h, SK_EINVAL, "rank %d of world %d: "
		    "need 0 <= rank < world", c->rank, c->world);
	if (c->epoch < 0 || c->epochs < 1)
		return sk__fatal(&l->h, SK_EINVAL, "epoch %d, epochs %d: need "
		    "epoch >= 0 and epochs >= 1", c->epoch, c->epochs);
	if (c->workers < 0 || c->workers > 1024 || c->io_streams < 1 ||
	    c->io_streams > 256)
		return sk__fatal(&l->h, SK_EINVAL, "workers %d, I/O streams "
		    "%d: need 0..1024 and 1..256", c->workers, c->io_streams);
	if (c->shuffle < 0 || c->ring < 0 || c->resume_batch < 0)
		return sk__fatal(&l->h, SK_EINVAL, "shuffle, ring and resume "
		    "batch must not be negative");
	if (c->image_size < 1 || c->image_size > 8192)
		return sk__fatal(&l->h, SK_EINVAL, "image size %d: not in "
		    "1..8192", c->image_size);
	if ((unsigned)c->crop > SK_CROP_NONE || (unsigned)c->dtype >
	    SK_DTYPE_F16 || (unsigned)c->layout > SK_LAYOUT_NCHW ||
	    (unsigned)c->remainder > SK_REMAINDER_KEEP)
		return sk__fatal(&l->h, SK_EINVAL, "bad crop, dtype, layout "
		    "or remainder value");
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
		if ((rc = pthread_create(&l->io[i].th, NULL, io_main,
		    &l->io[i])) != 0)
			goto fail;
		l->nio_started = i + 1;
	}
	for (i = 0; i < l->nworkers; i++) {
		l->workers[i].l = l;
		if ((rc = pthread_create(&l->workers[i].th, NULL, worker_main,
		    &l->workers[i])) != 0)
			goto fail;
		l->nworkers_started = i + 1;
	}
	if ((rc = pthread_create(&l->dispatcher, NULL, dispatch_main, l)) != 0)
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
	l->open_ns = now_ns();
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cond_slot, NULL);
	pthread_cond_init(&l->cond_ready, NULL);
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
	if ((rc = load_shards(l)) != 0)
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

		sl->images = sk__host_alloc(nb * l->image_bytes + 64,
		    &sl->pinned);
		sl->labels = calloc(nb, sizeof *sl->labels);
		sl->keys = calloc(nb, sizeof *sl->keys);
		sl->bytes = calloc(nb, sizeof *sl->bytes);
		sl->aug = calloc(nb, sizeof *sl->aug);
		sl->ok = calloc(nb, 1);
		if (sl->images == NULL || sl->labels == NULL ||
		    sl->keys == NULL || sl->bytes == NULL || sl->aug == NULL ||
		    sl->ok == NULL)
			return sk__fatal(&l->h, SK_ENOMEM, "out of memory for "
			    "%d batch slots of %zu bytes", l->nslots,
			    nb * l->image_bytes);
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
	l->st.workers = l->nworkers;
	l->st.io_streams = l->nio;
	return start_threads(l);
}

int
sk_loader_next(sk_loader *l, struct sk_batch *b)
{
	struct slot *sl;
	uint64_t t0;
	int rc, i;

	if ((rc = sk__check(&l->h, SK__MAGIC_LOADER, "sk_loader_next")) != 0)
		return rc;
	if (b == NULL)
		return sk__fail(&l->h, SK_EINVAL, "sk_loader_next: no batch");
	memset(b, 0, sizeof *b);
	b->slot = -1;
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
		t0 = now_ns();
		while (!(sl->state == SLOT_READY &&
		    sl->global == l->next_global) && !l->stop)
			pthread_cond_wait(&l->cond_ready, &l->mu);
		add_ns(&l->t_consumer_wait, t0);
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
			fail(l, rc, "%s", err.msg);
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
	st->wall = (double)(now_ns() - l->open_ns) / 1e9;
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

	/*
	 * shardkit(3), MEMORY: the I/O queues (prefetch, plus one sample
	 * each over it), the shuffle buffer and the samples sent to workers
	 * (encoded), the batch slots, the workers' scratch, and the plans.
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
		lsample_free(s);
	}
	for (i = 0; i < l->nqueues_inited; i++) {
		while ((s = l->queues[i].head) != NULL) {
			l->queues[i].head = s->next;
			lsample_free(s);
		}
		pthread_mutex_destroy(&l->queues[i].mu);
		pthread_cond_destroy(&l->queues[i].cond);
	}
	/* The GPU's copies read the pinned slots: stop it first. */
	if (l->gpu != NULL)
		sk__gpu_close(l->gpu);
	for (i = 0; l->slots != NULL && i < l->nslots; i++) {
		struct slot *sl = &l->slots[i];
		int k;

		for (k = 0; sl->keys != NULL && k < l->cfg.batch; k++)
			free(sl->keys[k]);
		sk__host_free(sl->images, sl->pinned);
		free(sl->labels);
		free(sl->keys);
		free(sl->bytes);
		free(sl->aug);
		free(sl->ok);
	}
	for (e = 0; l->plans != NULL && e < l->cfg.epochs; e++)
		eplan_free(l->plans[e]);
	for (i = 0; l->shards != NULL && i < (int)l->nshards; i++)
		free(l->shards[i].url);
	free(l->shards);
	free(l->plans);
	free(l->plan_done);
	free(l->slots);
	free(l->queues);
	free(l->io);
	free(l->workers);
	free(l->urls_copy);
	free(l->manifest_copy);
	if (l->inited) {
		pthread_mutex_destroy(&l->mu);
		pthread_cond_destroy(&l->cond_slot);
		pthread_cond_destroy(&l->cond_ready);
		pthread_cond_destroy(&l->cond_work);
	}
	l->h.magic = 0;
	free(l);
}
