/*
 * io.c - the fetch stage, where bytes arrive: I/O threads open each plan
 * item's shard, read the image and label of the samples this rank
 * delivers into their queue, check the shard against the manifest and
 * count the bytes read; or, in the files form, read each image file
 * whole. At open: the shard list and its sample counts.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"
#include "loader.h"
#include "pipeline.h"

/* ------------------------------------------------------------------------ */
/* I/O threads: shards to samples                                           */

/*
 * Damage is what the shard's bytes say (corrupt or truncated: the rest of
 * the shard is skipped and counted). Anything else is the source failing
 * to deliver bytes (the network past its retries, a changed object, a
 * read error): no sample can be trusted to be skipped for it, so it is
 * fatal, never counted as damage.
 */
static int
is_damage(int rc)
{
	return rc == SK_EFORMAT || rc == SK_ETOOBIG;
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

/* The members the loader reads: the image and the label. Without
 * decoding nothing looks at the pixels: the image is read through (its
 * bytes fetched and checked) but not copied out of the source's buffer. */
static int
want_member(const char *ext, void *arg)
{
	const sk_loader *l = arg;

	if (sk__is_image_ext(ext))
		return l->cfg.decode ? SK_SAMPLE_LOAD : SK_SAMPLE_SCAN;
	return strcmp(ext, "cls") == 0 ? SK_SAMPLE_LOAD : 0;
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
		if (m->data == NULL && !m->scanned)
			continue;
		if (!cur->has_img && sk__is_image_ext(m->ext)) {
			/* The reader's buffer becomes the sample's (none when
			 * the image was only read through). */
			cur->has_img = 1;
			cur->img = m->data;
			cur->img_len = m->data != NULL ? (size_t)m->size : 0;
			m->data = NULL;
			sk__atomic_max(&l->max_sample, m->size);
		} else if (m->data != NULL && cur->label < 0 &&
		    strcmp(m->ext, "cls") == 0 &&
		    parse_label((const char *)m->data, (size_t)m->size,
		    &cur->label) != 0)
			cur->label = -1;
	}
	if (!cur->has_img)
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
		sk__loader_fail(l, SK_EFORMAT, "%s", msg);
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
	int rc = 0;

	/* Once per shard, not once per epoch. */
	if (__atomic_exchange_n(&sh->tail_read, 1, __ATOMIC_RELAXED))
		return;
	while (!sk__stopping(l) && (rc = sk_sample_reader_next(r, s, NULL,
	    NULL)) > 0)
		extra++;
	if (sk__stopping(l))
		return;
	if (rc < 0 && l->cfg.strict) {
		sk__loader_fail(l, rc, "%s; after the %" PRIu64 " samples the "
		    "manifest counts", sk_errmsg(r), sh->nsamples);
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
		sk__loader_fail(l, SK_EFORMAT, "%s: %" PRIu64 " samples after "
		    "the %" PRIu64 " the manifest counts: the manifest is "
		    "stale", sh->url, extra, sh->nsamples);
		return;
	}
	sk_log(SK_LOG_WARN, "%s: %" PRIu64 " samples after the %" PRIu64
	    " the manifest counts: the manifest is stale; they are not "
	    "delivered (counted as unplanned)", sh->url, extra, sh->nsamples);
}

/* The end of a plan item: the dispatcher moves on to the next item. */
static void
push_end(sk_loader *l, struct squeue *q)
{
	struct lsample *s = calloc(1, sizeof *s);

	if (s == NULL) {
		sk__loader_fail(l, SK_ENOMEM, "out of memory");
		return;
	}
	s->end = 1;
	sk__squeue_push(l, q, s);
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
    const struct item *it, sk_source *src, int rc)
{
	const char *url = l->shards[it->shard].url;
	const uint64_t last = it->first + it->count;
	sk_sample_reader *r = NULL;
	struct sk_sample_reader_opts ropts;
	struct sk_sample smp;
	struct lsample *cur = NULL, *s;
	char errbuf[SK_ERRMSG_MAX];
	uint64_t idx = 0, pos = 0, start_off = 0, end_off = 0, counted = 0, t0;
	int have_start = 0;

	memset(&smp, 0, sizeof smp);
	t0 = sk__now_ns();
	errbuf[0] = '\0';
	/* Opened ahead by io_main: now its first bytes are needed. */
	if (rc != 0 || (rc = sk__source_ready(src)) != 0) {
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
		if (sk__stopping(l))
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
		    want_member : NULL, l);
		if (rc < 0)
			goto damaged;
		if (rc == 0) {
			/* The shard ended early: the tail reports it. */
			sk__lsample_free(cur);
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
		sk__add_ns(&l->t_io_busy, t0);
		sk__squeue_push(l, q, cur);
		t0 = sk__now_ns();
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
	if (l->cfg.strict || !is_damage(rc))
		goto fatal;
	sk_log(SK_LOG_WARN, "%s; the rest of this shard is skipped", errbuf);
	goto out;
fatal:
	sk__lsample_free(cur);
	sk_sample_reader_close(r);
	sk_sample_free(&smp);
	sk__add_ns(&l->t_io_busy, t0);
	sk__loader_fail(l, rc != 0 ? rc : SK_EIO, "%s", errbuf);
	return;
out:
	sk_sample_reader_close(r);
	sk_sample_free(&smp);
	/* A sample cut by damage is lost with the rest of the shard. */
	if (cur != NULL) {
		if (cur->key == NULL && (cur->key = sk__asprintf("#%" PRIu64,
		    idx)) == NULL) {
			sk__lsample_free(cur);
			sk__loader_fail(l, SK_ENOMEM, "out of memory");
			return;
		}
		cur->status = SK_SKIP_DAMAGED;
		sk__squeue_push(l, q, cur);
		idx++;
	}
	count_bytes(l, start_off, &counted, end_off);
	if (!sk__stopping(l) && idx < last) {
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
		for (; idx < last && !sk__stopping(l); idx++) {
			pos = it->base + (idx - it->first);
			if (!needed(p, pos))
				continue;
			if ((s = placeholder(p, pos, idx, url,
			    SK_SKIP_DAMAGED)) == NULL) {
				sk__loader_fail(l, SK_ENOMEM, "out of memory");
				return;
			}
			sk__squeue_push(l, q, s);
		}
	}
	count_bytes(l, start_off, &counted, end_off);
	sk__add_ns(&l->t_io_busy, t0);
	push_end(l, q);
}

/*
 * The files form: the item is one image file, its one sample, read whole
 * with one open (one GET) that io_main started ahead. A file over
 * max_sample_bytes is skipped as too_big, unread, as a shard's sample is;
 * a file the source fails to deliver is fatal, as a missing shard is.
 */
static void
io_file(sk_loader *l, struct squeue *q, const struct eplan *p,
    const struct item *it, sk_source *src, int rc)
{
	const struct shardinfo *sh = &l->shards[it->shard];
	uint64_t size = 0, got = 0, max, t0 = sk__now_ns();
	struct lsample *cur = NULL;
	char errbuf[SK_ERRMSG_MAX];
	int64_t n;

	max = l->cfg.max_sample_bytes ? l->cfg.max_sample_bytes :
	    SK_SAMPLE_MAX_BYTES;
	if (!needed(p, it->base)) {
		sk_source_close(src);
		goto end;
	}
	if (rc != 0 || (rc = sk__source_ready(src)) != 0 ||
	    (rc = sk_source_size(src, &size)) != 0) {
		snprintf(errbuf, sizeof errbuf, "%s", src != NULL ?
		    sk_errmsg(src) : "out of memory");
		goto fatal;
	}
	if ((cur = calloc(1, sizeof *cur)) == NULL ||
	    (cur->key = sk__strdup(sh->key)) == NULL)
		goto nomem;
	cur->seq = p->seq_of_pos[it->base];
	cur->status = SAMPLE_OK;
	cur->url = sh->url;
	cur->label = sh->label;
	cur->bytes = size;
	if (size > max) {
		cur->status = SK_SKIP_TOO_BIG;
		goto push;
	}
	if ((cur->img = malloc(size ? (size_t)size : 1)) == NULL)
		goto nomem;
	while (got < size && !sk__stopping(l)) {
		if ((n = sk_source_read(src, cur->img + got, (size_t)(size -
		    got))) < 0) {
			rc = (int)n;
			snprintf(errbuf, sizeof errbuf, "%s", sk_errmsg(src));
			goto fatal;
		}
		if (n == 0) {
			rc = SK_EIO;
			snprintf(errbuf, sizeof errbuf, "%s: the file ends "
			    "after %" PRIu64 " of its %" PRIu64 " bytes",
			    sh->url, got, size);
			goto fatal;
		}
		got += (uint64_t)n;
	}
	cur->img_len = (size_t)size;
	cur->has_img = 1;
	sk__atomic_max(&l->max_sample, size);
	/* Count the bytes before the sample can reach a batch, so stats
	 * taken then include them. */
	__atomic_fetch_add(&l->bytes_read, got, __ATOMIC_RELAXED);
push:
	sk_source_close(src);
	sk__add_ns(&l->t_io_busy, t0);
	sk__squeue_push(l, q, cur);
	t0 = sk__now_ns();
end:
	sk__add_ns(&l->t_io_busy, t0);
	push_end(l, q);
	return;
nomem:
	rc = SK_ENOMEM;
	snprintf(errbuf, sizeof errbuf, "%s: out of memory", sh->url);
fatal:
	sk__lsample_free(cur);
	sk_source_close(src);
	sk__add_ns(&l->t_io_busy, t0);
	sk__loader_fail(l, rc != 0 ? rc : SK_EIO, "%s", errbuf);
}

/* Start opening an item's shard; a remote one sizes its first parts by
 * the manifest's filesize. *src holds a handle even on failure. */
static int
open_item(sk_loader *l, const struct item *it, sk_source **src)
{
	const struct shardinfo *sh = &l->shards[it->shard];

	return sk__source_open_ahead(src, sh->fetch_url != NULL ?
	    sh->fetch_url : sh->url, sh->filesize);
}

/* ------------------------------------------------------------------------ */
/* the read-ahead of remote shards                                          */

/*
 * Each I/O thread opens the shards it reads next before it reads them:
 * their first parts go out at once, so the link stays busy while this
 * shard's bytes are split. How many to keep open ahead trades memory (each
 * holds its parts in flight) against the link's round trip and
 * per-connection rate, which only the run knows. With cfg.ahead 0 on
 * remote shards a tick measures, every AHEAD_TICK_NS, the rate of bytes
 * in and the share of the I/O threads' time spent waiting for them:
 *
 *   - the depth starts at AHEAD_START (or the cap);
 *   - readers that wait more than AHEAD_STARVED of the tick ask for a
 *     step up: the depth doubles until the first step that does not pay
 *     (slow start), then grows by one;
 *   - a step up is on trial for a tick: if the rate fell below
 *     AHEAD_WORSE of the rate before it, it is undone and the depth holds
 *     for AHEAD_HOLD ticks;
 *   - readers that waited less than AHEAD_FED for AHEAD_HOLD ticks in a
 *     row have more ahead than they use: one step down.
 *
 * Rates between ticks are noisy on a busy machine (shard boundaries, the
 * server's CPU), so only a fall undoes a step, and the readers' waits,
 * not the rate, drive it up. max_inflight caps it: the streams of every
 * I/O thread, each with parts x part-size in flight (or the shards' mean
 * size when smaller), stay within it.
 */
#define AHEAD_TICK_NS	250000000u	/* a quarter of a second */
#define AHEAD_STARVED	0.05
#define AHEAD_FED	0.01
#define AHEAD_WORSE	0.95
#define AHEAD_HOLD	4
#define AHEAD_START	4
#define AHEAD_INFLIGHT	((uint64_t)256 << 20)	/* max_inflight's default */

void
sk__ahead_init(sk_loader *l)
{
	struct sk_fetch_config fc;
	struct sk_fetch_stats fs;
	uint64_t per, sum = 0, bound;
	size_t i;
	int remote, cap;

	remote = !l->files && l->nshards > 0 &&
	    strstr(l->shards[0].url, "://") != NULL &&
	    strncmp(l->shards[0].url, "file://", 7) != 0;
	l->ahead = l->ahead_peak = l->ahead_cap = 1;
	if (!remote)
		return;
	if (l->cfg.ahead > 0) {
		l->ahead = l->ahead_peak = l->ahead_cap = l->cfg.ahead;
		return;
	}
	sk_fetch_get_config(&fc);
	per = (uint64_t)fc.parts * fc.part_size;
	for (i = 0; i < l->nshards; i++)
		sum += l->shards[i].filesize;
	if (sum > 0 && sum / l->nshards < per)
		per = sum / l->nshards + 1;
	bound = l->cfg.max_inflight ? l->cfg.max_inflight : AHEAD_INFLIGHT;
	cap = (int)(bound / ((uint64_t)l->nio * per)) - 1;
	if (cap > SK_LOADER_MAX_AHEAD)
		cap = SK_LOADER_MAX_AHEAD;
	l->ahead_cap = cap > 1 ? cap : 1;
	l->ahead_auto = l->ahead_cap > 1;
	l->ahead_slow = 1;
	/* Start where a cloud link usually ends up, as TCP starts with
	 * ten segments, not one: climbing from one took three ticks, half
	 * of a 1 GB read over a 30 ms link. Readers that are fed step it
	 * back down. */
	l->ahead = l->ahead_peak = l->ahead_cap < AHEAD_START ?
	    l->ahead_cap : AHEAD_START;
	sk_fetch_stats(&fs);
	l->ahead_t = sk__now_ns();
	l->ahead_bytes = fs.bytes;
	l->ahead_wait = fs.wait_seconds;
}

/* Set the depth (under ahead_mu; the I/O threads read it without). */
static void
ahead_set(sk_loader *l, int to, double rate, const char *why)
{
	if (to > l->ahead_cap)
		to = l->ahead_cap;
	if (to < 1)
		to = 1;
	__atomic_store_n(&l->ahead, to, __ATOMIC_RELAXED);
	if (to > l->ahead_peak)
		l->ahead_peak = to;
	sk_log(SK_LOG_DEBUG, "read-ahead: %d shards a stream (%.0f MB/s, "
	    "%s)", to, rate / 1e6, why);
}

/* How many shards to keep open ahead now; one thread at a time ticks. */
static int
ahead_now(sk_loader *l)
{
	struct sk_fetch_stats fs;
	uint64_t now;
	double rate, waited, dt;

	if (!l->ahead_auto || pthread_mutex_trylock(&l->ahead_mu) != 0)
		return __atomic_load_n(&l->ahead, __ATOMIC_RELAXED);
	now = sk__now_ns();
	if (now - l->ahead_t >= AHEAD_TICK_NS) {
		sk_fetch_stats(&fs);
		dt = (double)(now - l->ahead_t) / 1e9;
		rate = (double)(fs.bytes - l->ahead_bytes) / dt;
		waited = (fs.wait_seconds - l->ahead_wait) / (dt * l->nio);
		if (l->ahead_up) {
			l->ahead_up = 0;
			if (rate < l->ahead_rate * AHEAD_WORSE) {
				l->ahead_slow = 0;
				l->ahead_hold = AHEAD_HOLD;
				ahead_set(l, l->ahead_prev, rate, "undone");
			}
		} else if (l->ahead_hold > 0)
			l->ahead_hold--;
		else if (waited > AHEAD_STARVED && l->ahead < l->ahead_cap) {
			l->ahead_prev = l->ahead;
			l->ahead_rate = rate;
			l->ahead_up = 1;
			l->ahead_fed = 0;
			ahead_set(l, l->ahead_slow ? 2 * l->ahead :
			    l->ahead + 1, rate, "readers wait");
		} else if (waited < AHEAD_FED && l->ahead > 1) {
			if (++l->ahead_fed >= AHEAD_HOLD) {
				l->ahead_fed = 0;
				l->ahead_slow = 0;
				ahead_set(l, l->ahead - 1, rate, "readers fed");
			}
		} else
			l->ahead_fed = 0;
		l->ahead_t = now;
		l->ahead_bytes = fs.bytes;
		l->ahead_wait = fs.wait_seconds;
	}
	pthread_mutex_unlock(&l->ahead_mu);
	return __atomic_load_n(&l->ahead, __ATOMIC_RELAXED);
}

/* Where an I/O thread is in the run: epoch e's plan p, its item i. */
struct cursor {
	int e;
	struct eplan *p;
	size_t i, n;
};

/* Move c to this thread's next item: the next of the epoch, else the
 * first of a later epoch. 0 at the end of the run (or when stopping). */
static int
cursor_next(sk_loader *l, int id, struct cursor *c)
{
	if (c->p != NULL && c->i + (size_t)l->nio < c->n) {
		c->i += (size_t)l->nio;
		return 1;
	}
	for (c->e++; c->e < l->cfg.epochs && !sk__stopping(l); c->e++) {
		if ((c->p = sk__get_plan(l, c->e, &c->n)) == NULL)
			continue;
		c->i = (size_t)id;
		if (c->i < c->n)
			return 1;
	}
	c->p = NULL;
	return 0;
}

/*
 * I/O thread t streams items t, t + K, t + 2K, ... of every epoch into its
 * own queue, which the dispatcher drains in item order. The items it
 * opened ahead wait in a ring, oldest first; the ring runs on into the
 * next epoch, so the link stays as busy across an epoch's end as within
 * it (it drained to one shard a stream there, and refilled from a round
 * trip, every epoch).
 *
 * The dispatcher frees an epoch's plan once it has the end marker of its
 * last item, so a plan is read only for items whose marker this thread
 * has not pushed yet: the one being read, and those opened ahead.
 */
void *
sk__io_main(void *arg)
{
	struct iothread *io = arg;
	sk_loader *l = io->l;
	struct {
		sk_source *src;
		int rc;
		struct eplan *p;
		size_t i;
	} ring[SK_LOADER_MAX_AHEAD + 1];
	const int cap = (int)(sizeof ring / sizeof ring[0]);
	struct cursor op = { -1, NULL, 0, 0 };	/* the next to open */
	int head = 0, count = 0, want, k, more;

	/* close() and a failure elsewhere end this thread's network waits */
	sk__cancel_flag = &l->stop;
	more = cursor_next(l, io->id, &op);
	while (!sk__stopping(l) && (count > 0 || more)) {
		/* The next shards' first parts go out before this one is
		 * read: their round trips hide behind this one's bytes. */
		want = 1 + ahead_now(l);
		while (count < want && count < cap && more) {
			k = (head + count) % cap;
			ring[k].src = NULL;
			ring[k].p = op.p;
			ring[k].i = op.i;
			ring[k].rc = open_item(l, &op.p->items[op.i],
			    &ring[k].src);
			count++;
			more = cursor_next(l, io->id, &op);
		}
		k = head;
		head = (head + 1) % cap;
		count--;
		if (l->files)
			io_file(l, &l->queues[io->id], ring[k].p,
			    &ring[k].p->items[ring[k].i], ring[k].src,
			    ring[k].rc);
		else
			io_item(l, &l->queues[io->id], ring[k].p,
			    &ring[k].p->items[ring[k].i], ring[k].src,
			    ring[k].rc);
	}
	/* stopped early */
	for (; count > 0; count--) {
		sk_source_close(ring[head].src);
		head = (head + 1) % cap;
	}
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* opening: the shard list and its counts                                   */

/*
 * Count a shard's samples from its headers (a file seeks past the data; a
 * remote shard is read through). Thread-safe: the message goes to err.
 */
static int
count_samples(const struct shardinfo *sh, int strict, uint64_t *n,
    struct sk_error *err)
{
	const char *url = sh->url;
	sk_source *src = NULL;
	sk_sample_reader *r = NULL;
	struct sk_sample smp;
	int rc;

	*n = 0;
	memset(&smp, 0, sizeof smp);
	if ((rc = sk_source_open(&src, sh->fetch_url != NULL ? sh->fetch_url :
	    url)) != 0) {
		sk_error_set(err, rc, "shard %s: %s", url, src != NULL ?
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
	if (rc < 0 && is_damage(rc) && r != NULL && !strict) {
		sk_log(SK_LOG_WARN, "%s; counting %" PRIu64 " samples before "
		    "it", sk_errmsg(r), *n);
		rc = 0;
	}
	if (rc < 0)
		sk_error_set(err, rc, "%s", r != NULL ? sk_errmsg(r) :
		    "out of memory");
	sk_sample_reader_close(r);
	sk_sample_free(&smp);
	return rc < 0 ? rc : 0;
}

/* Counting threads share the next shard to count; the first failure in
 * shard order is the one reported. */
struct counting {
	sk_loader *l;
	pthread_mutex_t mu;
	size_t next, failed_at;
	int rc;
	struct sk_error err;
};

static void *
count_main(void *arg)
{
	struct counting *c = arg;
	struct sk_error err;
	uint64_t n;
	size_t i;
	int rc;

	for (;;) {
		pthread_mutex_lock(&c->mu);
		i = c->next++;
		if (i >= c->l->nshards || i > c->failed_at) {
			pthread_mutex_unlock(&c->mu);
			return NULL;
		}
		pthread_mutex_unlock(&c->mu);
		rc = count_samples(&c->l->shards[i], c->l->cfg.strict, &n,
		    &err);
		pthread_mutex_lock(&c->mu);
		c->l->shards[i].nsamples = n;
		if (rc != 0 && i < c->failed_at) {
			c->failed_at = i;
			c->rc = rc;
			c->err = err;
		}
		pthread_mutex_unlock(&c->mu);
	}
}

/*
 * A pattern or a folder gives no counts to plan with, so every shard is
 * read once at open, io_streams at a time: over a network one after
 * another would cost a round trip and a whole transfer each. A manifest
 * avoids it.
 */
static int
count_all(sk_loader *l)
{
	struct counting c;
	pthread_t t[256];
	size_t i, nt;
	int remote;

	remote = strstr(l->shards[0].url, "://") != NULL &&
	    strncmp(l->shards[0].url, "file://", 7) != 0;
	/* As many as the I/O streams: the memory bound of shardkit(3) holds
	 * (each remote stream keeps its parts in flight). */
	nt = (size_t)(l->cfg.io_streams > 0 ? l->cfg.io_streams : 2);
	if (nt > sizeof t / sizeof t[0])
		nt = sizeof t / sizeof t[0];
	if (nt > l->nshards)
		nt = l->nshards;
	if (remote && l->nshards > 1)
		sk_log(SK_LOG_INFO, "counting the samples of %zu shards reads "
		    "them once; a manifest (shardtool pack writes one) avoids "
		    "it", l->nshards);
	memset(&c, 0, sizeof c);
	c.l = l;
	c.failed_at = SIZE_MAX;
	pthread_mutex_init(&c.mu, NULL);
	for (i = 0; i < nt; i++)
		if (pthread_create(&t[i], NULL, count_main, &c) != 0)
			break;
	nt = i;
	if (nt == 0)
		count_main(&c);
	for (i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	pthread_mutex_destroy(&c.mu);
	if (c.rc != 0)
		return sk__fatal(&l->h, c.rc, "%s", c.err.msg);
	return 0;
}

static int
no_shards(sk_loader *l, const char *source)
{
	char *shown = sk_url_redact(source);
	int rc;

	rc = sk__fatal(&l->h, SK_EINVAL, "%s: no shards", shown != NULL ?
	    shown : "the source");
	free(shown);
	return rc;
}

/* Messages name a shard without the credentials its URL may carry. */
static int
redact_urls(sk_loader *l)
{
	struct shardinfo *sh;
	char *shown;
	size_t i;

	for (i = 0; i < l->nshards; i++) {
		sh = &l->shards[i];
		if ((shown = sk_url_redact(sh->url)) == NULL)
			return sk__fatal(&l->h, SK_ENOMEM, "out of memory");
		if (strcmp(shown, sh->url) == 0) {
			free(shown);
			continue;
		}
		sh->fetch_url = sh->url;
		sh->url = shown;
	}
	return 0;
}

int
sk__load_shards(sk_loader *l)
{
	const struct sk_loader_config *c = &l->cfg;
	struct sk_manifest m;
	struct sk_strlist urls = { NULL, 0, 0 };
	struct sk__entries root = { NULL, 0, 0 };
	struct sk_error err;
	enum sk_form form;
	size_t i, n;
	int rc;

	memset(&m, 0, sizeof m);
	if (c->manifest != NULL) {
		if ((rc = sk_manifest_read(c->manifest, &m, &err)) != 0)
			return sk__fatal(&l->h, rc, "%s", err.msg);
		if (m.nshards == 0) {
			sk_manifest_free(&m);
			return no_shards(l, c->manifest);
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
			/* a manifest from the network names only shards on
			 * its own origin (--allow-cross-origin) */
			if ((rc = sk_manifest_check_origin(c->manifest,
			    l->shards[i].url, &err)) != 0) {
				sk_manifest_free(&m);
				return sk__fatal(&l->h, rc, "%s", err.msg);
			}
		}
		sk_manifest_free(&m);
		return redact_urls(l);
	}

	/* A files tree (see sk_form): its image files. */
	if ((rc = sk__source_form(c, &form, &root, &err)) != 0) {
		sk__entries_free(&root);
		return sk__fatal(&l->h, rc, "%s", err.msg);
	}
	if (form == SK_FORM_FILES) {
		rc = sk__load_files(l, &root);
		sk__entries_free(&root);
		if (rc == 0 && l->nshards == 0)
			return no_shards(l, c->urls);
		return rc != 0 ? rc : redact_urls(l);
	}
	sk__entries_free(&root);

	/* A pattern, or a folder (a local one, or one ending in '/': an
	 * http(s) one's JSON autoindex, a bucket prefix): its tar shards. */
	n = strlen(c->urls);
	if ((n > 0 && c->urls[n - 1] == '/' && strstr(c->urls, "::") ==
	    NULL && strchr(c->urls, '{') == NULL) ||
	    sk__is_local_dir(c->urls)) {
		struct sk_strlist mans = { NULL, 0, 0 };

		/* A manifest beside the shards is not read: the folder's
		 * .tar files are the data set. Say so, in case it was the
		 * manifest's data set the user meant. */
		rc = sk_source_list_shards_seen(c->urls, &urls, &mans, &err);
		if (rc == 0)
			l->note = sk_source_folder_note(c->urls, urls.n, &mans,
			    "read", "read");
		sk_strlist_free(&mans);
	} else
		rc = sk_url_expand(c->urls, &urls, &err);
	if (rc != 0)
		return sk__fatal(&l->h, rc, "%s", err.msg);
	if (urls.n == 0) {
		sk_strlist_free(&urls);
		return no_shards(l, c->urls);
	}
	if ((l->shards = calloc(urls.n, sizeof *l->shards)) == NULL) {
		sk_strlist_free(&urls);
		return sk__fatal(&l->h, SK_ENOMEM, "out of memory");
	}
	l->nshards = urls.n;
	for (i = 0; i < urls.n; i++) {
		l->shards[i].url = urls.v[i];
		urls.v[i] = NULL;
	}
	sk_strlist_free(&urls);
	if ((rc = redact_urls(l)) != 0)
		return rc;
	return count_all(l);
}
