/*
 * fetch_stream.c - the readers' side of the fetch engine: a stream reads
 * an object front to back (a shard) through a window of parts kept in
 * flight ahead of it, and a pinned object gives ranges fetched on their
 * own (shardfs's cache). Here a reader waits for its bytes: sk__wait_net
 * under sk__stream_wait and sk__stream_peek, and sk__range_wait.
 *
 * Ownership: a stream is its reader's. Its mu guards the window and what
 * the engine fills in (a part's bytes and state, the size and version);
 * the engine thread takes it only in its callbacks. A stream is freed by
 * its reader only after every part it gave the engine came back
 * (s->inflight == 0), so the engine never sees a freed stream.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "fetch.h"
#include "fetch_int.h"

#define WAKE_BYTES	(256u << 10)	/* a stream's reader waits for this
					 * much at once */

/* The opener's stop flag, which the streams it opens watch (internal.h). */
__thread const int *sk__cancel_flag;

/* ------------------------------------------------------------------------ */
/* streams: what the readers call                                           */

/* Keep up to s->parts parts ahead. Caller holds s->mu. */
static int
top_up(struct sk__stream *s)
{
	struct part *p;
	uint64_t len;

	while (s->ready && s->nwin < s->parts && s->next_off < s->size) {
		len = s->size - s->next_off;
		if (len > s->part_size)
			len = s->part_size;
		if ((p = sk__part_new(s, s->next_off, len,
		    (size_t)len)) == NULL)
			return SK_ENOMEM;
		if (p->off < s->high)
			p->again = s->high - p->off;
		s->win[s->nwin++] = p;
		s->next_off += len;
		sk__part_submit(s, p);
	}
	return 0;
}

void
sk__stream_free(struct sk__stream *s)
{
	if (s == NULL)
		return;
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cond);
	free(s->url);
	free(s->display);
	free(s);
}

struct sk__stream *
sk__stream_new(const char *url, const char *display)
{
	struct sk__stream *s;
	pthread_condattr_t ca;

	if ((s = calloc(1, sizeof *s)) == NULL)
		return NULL;
	pthread_mutex_init(&s->mu, NULL);
	/* Range waits have a deadline on the monotonic clock. */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	s->cancel = sk__cancel_flag;
	s->url = strdup(url);
	s->display = display != NULL ? strdup(display) : sk_url_redact(url);
	if (s->url == NULL || s->display == NULL) {
		sk__stream_free(s);
		return NULL;
	}
	sk__engine_window(&s->parts, &s->part_size);
	return s;
}

static int
cancelled(const struct sk__stream *s)
{
	return s->cancel != NULL && __atomic_load_n(s->cancel,
	    __ATOMIC_ACQUIRE) != 0;
}

/* Wait on s->cond, counting the time as time waiting on the network; a
 * stream with a cancel flag looks at it every 100 ms. 1 when cancelled. */
int
sk__wait_net(struct sk__stream *s)
{
	uint64_t t0 = sk__now_ns(), t;
	struct timespec ts;

	if (s->cancel == NULL)
		pthread_cond_wait(&s->cond, &s->mu);
	else {
		t = t0 + 100000000u;
		ts.tv_sec = (time_t)(t / 1000000000u);
		ts.tv_nsec = (long)(t % 1000000000u);
		(void)pthread_cond_timedwait(&s->cond, &s->mu, &ts);
	}
	sk__count_wait(sk__now_ns() - t0);
	return cancelled(s);
}

/*
 * Ask for the first parts and return. Without a size hint that is one
 * part: its response gives the size, and the rest follow. With one (a
 * manifest's filesize), parts of at most part_size, at least 256 KiB and
 * small enough that the object fills the parts in flight, all go out at
 * once: no round trip waits for the size.
 */
int
sk__stream_start(struct sk__stream **out, const char *url,
    const char *display, uint64_t hint, struct sk_error *err)
{
	return sk__stream_start_auth(out, url, display, hint, NULL, NULL, err);
}

int
sk__stream_start_auth(struct sk__stream **out, const char *url,
    const char *display, uint64_t hint, const struct sk__auth *auth,
    const char *version, struct sk_error *err)
{
	struct sk__stream *s;
	struct part *p;
	uint64_t ps, off = 0;
	int rc, i, n = 1;

	*out = NULL;
	if ((rc = sk__engine_get(err)) != 0)
		return rc;
	if ((s = sk__stream_new(url, display)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	if (auth != NULL)
		s->auth = *auth;
	if (version != NULL)
		snprintf(s->version, sizeof s->version, "%s", version);
	if (hint > 0) {
		ps = (hint + (uint64_t)s->parts - 1) / (uint64_t)s->parts;
		if (ps < (256u << 10))
			ps = 256u << 10;
		if (ps < s->part_size)
			s->part_size = ps;
		n = (int)((hint + s->part_size - 1) / s->part_size);
		if (n > s->parts)
			n = s->parts;
	}
	pthread_mutex_lock(&s->mu);
	for (i = 0; i < n; i++) {
		if ((p = sk__part_new(s, off, s->part_size,
		    (size_t)s->part_size)) == NULL)
			break;
		s->win[s->nwin++] = p;
		sk__part_submit(s, p);
		off += s->part_size;
	}
	s->next_off = off;
	pthread_mutex_unlock(&s->mu);
	if (i == 0) {
		sk__stream_close(s);
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	*out = s;
	return 0;
}

/* Wait for the size and version; then the window follows the size. */
int
sk__stream_wait(struct sk__stream *s, struct sk_error *err)
{
	int rc = 0, i, k;

	pthread_mutex_lock(&s->mu);
	while (s->meta == 0)
		if (sk__wait_net(s))
			break;
	if (s->meta == 0)
		rc = sk_error_set(err, SK_ECANCELED, "%s: the read was "
		    "cancelled", s->display);
	else if (s->meta < 0)
		rc = sk_error_set(err, s->err_code, "%s", s->err);
	else if (!s->ready) {
		/* Parts asked for past the end are not wanted. */
		for (i = k = 0; i < s->nwin; i++)
			if (s->win[i]->off >= s->size && i > 0)
				sk__part_drop(s, s->win[i]);
			else
				s->win[k++] = s->win[i];
		s->nwin = k;
		if (s->next_off > s->size)
			s->next_off = s->size;
		s->ready = 1;
		if ((rc = top_up(s)) != 0)
			rc = sk_error_set(err, rc, "out of memory");
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

uint64_t
sk__stream_size(const struct sk__stream *s)
{
	return s->size;
}

int64_t
sk__stream_peek(struct sk__stream *s, const void **ptr, size_t n,
    uint64_t off, struct sk_error *err)
{
	struct part *p;
	uint64_t at, want;
	size_t take;
	int i, k, rc = 0;

	/* Opened ahead: the size comes first (only this reader sets
	 * ready). */
	if (!s->ready && (rc = sk__stream_wait(s, err)) != 0)
		return rc;
	if (off >= s->size || n == 0)
		return 0;
	pthread_mutex_lock(&s->mu);
	/* Parts wholly before off are read or skipped: let them go. */
	for (k = 0; k < s->nwin && s->win[k]->off + s->win[k]->len <= off; k++)
		sk__part_drop(s, s->win[k]);
	if (k > 0) {
		memmove(s->win, s->win + k, (size_t)(s->nwin - k) *
		    sizeof *s->win);
		s->nwin -= k;
	}
	/* Before the window (read again) or past every part asked for: the
	 * window starts over at off. A skip inside it costs no request. */
	if (s->nwin == 0 || off < s->win[0]->off) {
		for (i = 0; i < s->nwin; i++)
			sk__part_drop(s, s->win[i]);
		s->nwin = 0;
		s->next_off = off;
	}
	if ((rc = top_up(s)) != 0) {
		pthread_mutex_unlock(&s->mu);
		return sk_error_set(err, rc, "out of memory");
	}
	p = s->win[0];
	at = off - p->off;
	/* Wait for WAKE_BYTES (or what was asked, or the part's end), so a
	 * reader takes the bytes in a few large pieces, not a write's. */
	want = n < WAKE_BYTES ? n : WAKE_BYTES;
	want = want < p->len - at ? at + want : p->len;
	while (p->have < want && p->state != P_FAILED && p->state != P_DONE) {
		p->waiters++;
		if (want - 1 < p->wake_at)
			p->wake_at = want - 1;
		rc = sk__wait_net(s);
		if (--p->waiters == 0 || p->have > p->wake_at)
			p->wake_at = UINT64_MAX;
		if (rc) {
			rc = 0;
			break;
		}
	}
	if (p->have <= at) {
		if (p->state != P_FAILED && p->state != P_DONE)
			rc = sk_error_set(err, SK_ECANCELED, "%s: offset %"
			    PRIu64 ": the read was cancelled", s->display, off);
		else if (p->state == P_FAILED)
			rc = sk_error_set(err, p->code ? p->code : SK_EIO, "%s",
			    p->err);
		else
			rc = sk_error_set(err, SK_EIO, "%s: offset %" PRIu64
			    ": the part ended early", s->display, off);
		pthread_mutex_unlock(&s->mu);
		return rc;
	}
	take = p->have - at < n ? (size_t)(p->have - at) : n;
	pthread_mutex_unlock(&s->mu);
	/* Bytes below have are written once and never move; the part
	 * stays until this reader's next call. */
	*ptr = p->buf + at;
	return (int64_t)take;
}

int64_t
sk__stream_pread(struct sk__stream *s, void *buf, size_t n, uint64_t off,
    struct sk_error *err)
{
	const void *ptr;
	int64_t got;

	if ((got = sk__stream_peek(s, &ptr, n, off, err)) > 0)
		memcpy(buf, ptr, (size_t)got);
	return got;
}

void
sk__stream_close(struct sk__stream *s)
{
	int i;

	if (s == NULL)
		return;
	pthread_mutex_lock(&s->mu);
	for (i = 0; i < s->nwin; i++)
		sk__part_drop(s, s->win[i]);
	s->nwin = 0;
	while (s->inflight > 0)
		pthread_cond_wait(&s->cond, &s->mu);
	pthread_mutex_unlock(&s->mu);
	sk__stream_free(s);
}

/* ------------------------------------------------------------------------ */
/* pinned objects and ranges: what a cache calls                           */

int
sk__stream_pinned(struct sk__stream **out, const char *url,
    const char *display, uint64_t size, const char *etag,
    const char *lastmod, const struct sk__auth *auth, const char *version,
    struct sk_error *err)
{
	struct sk__stream *s;
	int rc;

	*out = NULL;
	if ((rc = sk__engine_get(err)) != 0)
		return rc;
	if ((s = sk__stream_new(url, display)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	if (auth != NULL)
		s->auth = *auth;
	if (version != NULL)
		snprintf(s->version, sizeof s->version, "%s", version);
	if (etag != NULL && *etag != '\0')
		snprintf(s->etag, sizeof s->etag, "%s", etag);
	else if (lastmod != NULL && *lastmod != '\0')
		snprintf(s->lastmod, sizeof s->lastmod, "%s", lastmod);
	else
		s->learn = 1;
	s->size = size;
	s->meta = 1;
	s->ready = 1;
	s->parts = 0;		/* no window: ranges only */
	*out = s;
	return 0;
}

int
sk__stream_validator(struct sk__stream *s, char *buf, size_t n)
{
	int rc = 0;

	buf[0] = '\0';
	pthread_mutex_lock(&s->mu);
	if (!s->learn && s->etag[0] != '\0')
		snprintf(buf, n, "etag:%s", s->etag);
	else if (!s->learn && s->lastmod[0] != '\0')
		snprintf(buf, n, "last-modified:%s", s->lastmod);
	else
		rc = -1;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int
sk__range_start(struct sk__stream *s, uint64_t off, uint64_t len,
    struct sk__range **out, struct sk_error *err)
{
	struct part *p;

	*out = NULL;
	if (len == 0 || off > s->size || len > s->size - off)
		return sk_error_set(err, SK_EINVAL, "%s: bytes %" PRIu64 " to %"
		    PRIu64 " are not in the object's %" PRIu64, s->display,
		    off, off + len, s->size);
	if (len > SIZE_MAX - 1)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	pthread_mutex_lock(&s->mu);
	if ((p = sk__part_new(s, off, len, (size_t)len)) == NULL) {
		pthread_mutex_unlock(&s->mu);
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	p->range = 1;
	p->wake_at = UINT64_MAX;
	sk__part_submit(s, p);
	pthread_mutex_unlock(&s->mu);
	*out = (struct sk__range *)p;
	return 0;
}

int64_t
sk__range_wait(struct sk__range *r, uint64_t at, uint64_t deadline,
    const void **ptr, struct sk_error *err)
{
	struct part *p = (struct part *)r;
	struct sk__stream *s = p->s;
	struct timespec ts;
	uint64_t t0 = sk__now_ns(), have;
	int rc = 0;

	ts.tv_sec = (time_t)(deadline / 1000000000u);
	ts.tv_nsec = (long)(deadline % 1000000000u);
	pthread_mutex_lock(&s->mu);
	while (p->have <= at && p->state != P_DONE && p->state != P_FAILED) {
		p->waiters++;
		if (at < p->wake_at)
			p->wake_at = at;
		if (deadline == 0)
			pthread_cond_wait(&s->cond, &s->mu);
		else if (pthread_cond_timedwait(&s->cond, &s->mu, &ts) ==
		    ETIMEDOUT && p->have <= at && p->state != P_DONE &&
		    p->state != P_FAILED) {
			rc = sk_error_set(err, SK_ENETWORK, "%s: bytes from %"
			    PRIu64 ": no answer in %.1f s", s->display,
			    p->off + at, (double)(sk__now_ns() - t0) / 1e9);
		}
		/* The next waiter (or this one again) sets its own mark. */
		if (--p->waiters == 0 || p->have > p->wake_at)
			p->wake_at = UINT64_MAX;
		if (rc != 0)
			break;
	}
	have = p->have;
	if (rc == 0 && have <= at && p->state == P_FAILED)
		rc = sk_error_set(err, p->code ? p->code : SK_EIO, "%s",
		    p->err);
	pthread_mutex_unlock(&s->mu);
	sk__count_wait(sk__now_ns() - t0);
	if (rc != 0)
		return rc;
	/* Bytes below have are written once and never move. */
	*ptr = p->buf;
	return have > at ? (int64_t)have : 0;
}

int
sk__range_state(struct sk__range *r)
{
	struct part *p = (struct part *)r;
	int st;

	pthread_mutex_lock(&p->s->mu);
	st = p->state == P_DONE ? 1 : p->state == P_FAILED ? -1 : 0;
	pthread_mutex_unlock(&p->s->mu);
	return st;
}

void
sk__range_free(struct sk__range *r)
{
	struct part *p = (struct part *)r;
	struct sk__stream *s;

	if (p == NULL)
		return;
	s = p->s;
	pthread_mutex_lock(&s->mu);
	sk__part_drop(s, p);
	pthread_mutex_unlock(&s->mu);
}
