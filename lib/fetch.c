/*
 * fetch.c - the fetch engine: one libcurl multi handle, driven by one
 * thread, serves every remote read of the process. Readers (the loader's
 * I/O threads, shardtool) ask for parts and wait on their stream
 * (fetch_stream.c, fetch_req.c); the engine runs the transfers, retries
 * them, and fills the part buffers. Its options and counters live here.
 *
 * Ownership: a part belongs to the engine from the moment it is queued
 * until it is DONE or FAILED (p->engine set); the engine alone touches its
 * easy handle. A reader that no longer wants a part the engine owns marks
 * it cancelled and queues it back; the engine frees it. The engine's
 * waiting and running lists are its thread's alone; eng.mu guards what
 * readers hand it (adds, cancels) and the options. Lock order (fetch.h):
 * a stream's mu before eng.mu.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>

#include <curl/curl.h>
#include <openssl/crypto.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "internal.h"
#include "fetch.h"
#include "fetch_int.h"

#define BACKOFF_BASE	0.1	/* seconds: the first retry waits up to this */
#define BACKOFF_CAP	10.0	/* and no retry waits longer, Retry-After
				 * aside */
#define MIN_RATE	4096	/* bytes/s: an attempt slower than this on
				 * average, past stall + retry time, fails */
#define EASY_KEPT	32	/* idle easy handles kept for the next
				 * transfers (256 KiB of buffer each) */

struct engine {
	pthread_t thread;
	pthread_mutex_t mu;	/* guards adds, cancels, stop, cfg */
	CURLM *multi;
	CURLSH *share;
	struct part *adds, *cancels;
	struct part *waiting;	/* engine thread only */
	struct part *running;	/* in the multi handle, engine thread only */
	int stop, started, cfg_changed;
	int asleep;		/* in curl_multi_poll with nothing queued */
	struct sk_fetch_config cfg;
	char *ca_file;
	uint64_t rng;
	CURL *idle[EASY_KEPT];	/* easy handles to reuse, engine thread only */
	int nidle;
};

static struct engine eng = { .mu = PTHREAD_MUTEX_INITIALIZER };
static pthread_once_t eng_once = PTHREAD_ONCE_INIT;
static pid_t eng_pid;		/* the process that started it */
static int eng_rc;
static char eng_err[SK_ERRMSG_MAX];

/* The counters, updated with atomics. */
static struct {
	uint64_t bytes, requests, retries, resumes, refetched, failures;
	uint64_t cause[SK_RETRY_NCAUSES];
	uint64_t ttfb_ns, ttfb_count, wait_ns;
} ctr;

#define ADD(field, v) __atomic_fetch_add(&ctr.field, (v), __ATOMIC_RELAXED)

/* ------------------------------------------------------------------------ */
/* options and counters                                                     */

void
sk_fetch_config_init(struct sk_fetch_config *c)
{
	memset(c, 0, sizeof *c);
	c->connections = 64;
	c->parts = 4;
	c->part_size = (uint64_t)8 << 20;
	c->connect_timeout = 10;
	c->stall_timeout = 30;
	c->retry_time = 120;
	c->attempts = 30;
}

static void
cfg_defaults_once(void)
{
	if (eng.cfg.parts == 0)
		sk_fetch_config_init(&eng.cfg);
}

int
sk_fetch_configure(const struct sk_fetch_config *c, struct sk_error *err)
{
	char *ca = NULL;
	int started;

	if (c->connections < 1 || c->connections > 4096)
		return sk_error_set(err, SK_EINVAL, "connections: %d is not in "
		    "1..4096", c->connections);
	if (c->parts < 1 || c->parts > MAX_PARTS)
		return sk_error_set(err, SK_EINVAL, "parts: %d is not in 1..%d",
		    c->parts, MAX_PARTS);
	if (c->part_size < 4096 || c->part_size > ((uint64_t)1 << 30))
		return sk_error_set(err, SK_EINVAL, "part size: %" PRIu64
		    " is not in 4 KiB..1 GiB", c->part_size);
	if (!(c->connect_timeout > 0) || !(c->stall_timeout > 0) ||
	    !(c->retry_time >= 0) || c->attempts < 1)
		return sk_error_set(err, SK_EINVAL, "timeouts must be positive "
		    "and attempts at least 1");
	if (c->ca_file != NULL && (ca = strdup(c->ca_file)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	pthread_mutex_lock(&eng.mu);
	eng.cfg = *c;
	free(eng.ca_file);
	eng.ca_file = ca;
	eng.cfg.ca_file = ca;
	eng.cfg_changed = 1;	/* the engine thread applies it */
	started = eng.started;
	pthread_mutex_unlock(&eng.mu);
	if (started)
		curl_multi_wakeup(eng.multi);
	return 0;
}

void
sk_fetch_get_config(struct sk_fetch_config *c)
{
	pthread_mutex_lock(&eng.mu);
	cfg_defaults_once();
	*c = eng.cfg;
	pthread_mutex_unlock(&eng.mu);
}

void
sk__engine_window(int *parts, uint64_t *part_size)
{
	pthread_mutex_lock(&eng.mu);
	*parts = eng.cfg.parts;
	*part_size = eng.cfg.part_size;
	pthread_mutex_unlock(&eng.mu);
}

void
sk__count_wait(uint64_t ns)
{
	ADD(wait_ns, ns);
}

void
sk_fetch_stats(struct sk_fetch_stats *st)
{
	int i;

	memset(st, 0, sizeof *st);
	st->bytes = __atomic_load_n(&ctr.bytes, __ATOMIC_RELAXED);
	st->requests = __atomic_load_n(&ctr.requests, __ATOMIC_RELAXED);
	st->retries = __atomic_load_n(&ctr.retries, __ATOMIC_RELAXED);
	st->resumes = __atomic_load_n(&ctr.resumes, __ATOMIC_RELAXED);
	st->refetched_bytes = __atomic_load_n(&ctr.refetched,
	    __ATOMIC_RELAXED);
	st->failures = __atomic_load_n(&ctr.failures, __ATOMIC_RELAXED);
	for (i = 0; i < SK_RETRY_NCAUSES; i++)
		st->retries_by_cause[i] = __atomic_load_n(&ctr.cause[i],
		    __ATOMIC_RELAXED);
	st->ttfb_seconds = (double)__atomic_load_n(&ctr.ttfb_ns,
	    __ATOMIC_RELAXED) / 1e9;
	st->ttfb_count = __atomic_load_n(&ctr.ttfb_count, __ATOMIC_RELAXED);
	st->wait_seconds = (double)__atomic_load_n(&ctr.wait_ns,
	    __ATOMIC_RELAXED) / 1e9;
}

void
sk_fetch_stats_sub(struct sk_fetch_stats *o, const struct sk_fetch_stats *a,
    const struct sk_fetch_stats *b)
{
	int i;

	o->bytes = a->bytes - b->bytes;
	o->requests = a->requests - b->requests;
	o->retries = a->retries - b->retries;
	for (i = 0; i < SK_RETRY_NCAUSES; i++)
		o->retries_by_cause[i] = a->retries_by_cause[i] -
		    b->retries_by_cause[i];
	o->resumes = a->resumes - b->resumes;
	o->refetched_bytes = a->refetched_bytes - b->refetched_bytes;
	o->failures = a->failures - b->failures;
	o->ttfb_seconds = a->ttfb_seconds - b->ttfb_seconds;
	o->ttfb_count = a->ttfb_count - b->ttfb_count;
	o->wait_seconds = a->wait_seconds - b->wait_seconds;
}

const char *
sk_retry_cause_name(enum sk_retry_cause c)
{
	static const char *const names[SK_RETRY_NCAUSES] = {
		"connection", "stall", "short_body", "status_429",
		"status_5xx"
	};

	return (unsigned)c < SK_RETRY_NCAUSES ? names[c] : "unknown";
}

/* ------------------------------------------------------------------------ */
/* starting the engine                                                      */

/*
 * A tool that dies exits with the engine thread (and a tool's own, such as
 * shardtool's uploader) still signing or hashing. OpenSSL's own atexit
 * handler would free its tables under them, and the thread would crash in
 * EVP_Digest instead of the process exiting 1 with its message. So OpenSSL
 * is told first, before anything in the process uses it, to leave its
 * state to the process's end.
 */
__attribute__((constructor)) static void
crypto_outlives_exit(void)
{
	OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
}

static void *engine_main(void *arg);

static void
engine_start(void)
{
	CURLcode cc;

	pthread_mutex_lock(&eng.mu);
	cfg_defaults_once();
	pthread_mutex_unlock(&eng.mu);
	if ((cc = curl_global_init(CURL_GLOBAL_DEFAULT)) != CURLE_OK) {
		snprintf(eng_err, sizeof eng_err, "cannot start libcurl: %s",
		    curl_easy_strerror(cc));
		eng_rc = SK_EIO;
		return;
	}
	eng.multi = curl_multi_init();
	eng.share = curl_share_init();
	if (eng.multi == NULL || eng.share == NULL) {
		snprintf(eng_err, sizeof eng_err, "cannot start libcurl: out "
		    "of memory");
		eng_rc = SK_ENOMEM;
		return;
	}
	/* Only the engine thread uses these handles: no lock callbacks. */
	curl_share_setopt(eng.share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(eng.share, CURLSHOPT_SHARE,
	    CURL_LOCK_DATA_SSL_SESSION);
	pthread_mutex_lock(&eng.mu);
	curl_multi_setopt(eng.multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
	    (long)eng.cfg.connections);
	pthread_mutex_unlock(&eng.mu);
	curl_multi_setopt(eng.multi, CURLMOPT_PIPELINING,
	    (long)CURLPIPE_MULTIPLEX);
	eng.rng = sk__now_ns() | 1;
	eng_pid = getpid();
	pthread_mutex_lock(&eng.mu);
	eng.started = 1;
	pthread_mutex_unlock(&eng.mu);
	if (pthread_create(&eng.thread, NULL, engine_main, NULL) != 0) {
		snprintf(eng_err, sizeof eng_err, "cannot start the fetch "
		    "thread");
		eng_rc = SK_ENOMEM;
		eng.started = 0;
	}
}

int
sk__engine_get(struct sk_error *err)
{
	pid_t pid;

	pthread_once(&eng_once, engine_start);
	/* fork() copies the engine's memory but not its thread: a child
	 * that waited on it would wait for ever. */
	if (eng_rc == 0 && (pid = getpid()) != eng_pid)
		return sk_error_set(err, SK_EUNSUPPORTED, "the fetch engine "
		    "was started in process %ld, and process %ld is a fork() "
		    "of it: remote reads work only in a process that did not "
		    "inherit a started engine (start children with 'spawn' "
		    "or 'forkserver', or before the first remote read)",
		    (long)eng_pid, (long)pid);
	if (eng_rc != 0)
		return sk_error_set(err, eng_rc, "%s", eng_err);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* parts: their buffers, and how they pass between a reader and the engine  */

/*
 * Part buffers are megabytes, and malloc maps and unmaps each one: every
 * byte then costs a page fault and a zeroed page. Freed ones wait here for
 * the next part, POOL_MAX bytes at most (shardkit(3), MEMORY).
 */
#define POOL_MAX	((size_t)SK_FETCH_POOL_BYTES)

struct pooled {
	struct pooled *next;
	size_t cap;
};

static struct {
	pthread_mutex_t mu;
	struct pooled *head;
	size_t bytes;
} pool = { .mu = PTHREAD_MUTEX_INITIALIZER };

/*
 * A buffer of at least *cap + 1 bytes; *cap becomes what it holds. New
 * ones are rounded up to POOL_ROUND, so that a freed buffer fits the next
 * part of about its size: objects of 100-120 KB each took a fresh buffer
 * (and its page faults) while the pool held hundreds a few KB too small.
 */
#define POOL_ROUND	((size_t)64 << 10)

static uint8_t *
pool_get(size_t *cap)
{
	struct pooled **pp, *b;
	size_t want = *cap;

	pthread_mutex_lock(&pool.mu);
	for (pp = &pool.head; (b = *pp) != NULL; pp = &b->next)
		if (b->cap >= want && b->cap <= 2 * want + 4096) {
			*pp = b->next;
			pool.bytes -= b->cap;
			pthread_mutex_unlock(&pool.mu);
			*cap = b->cap;
			return (uint8_t *)b;
		}
	pthread_mutex_unlock(&pool.mu);
	if (want > POOL_ROUND && want < SIZE_MAX - POOL_ROUND)
		want = (want + POOL_ROUND - 1) / POOL_ROUND * POOL_ROUND;
	if (want < sizeof *b)
		want = sizeof *b;
	*cap = want;
	return malloc(want + 1);
}

static void
pool_put(uint8_t *buf, size_t cap)
{
	struct pooled *b = (struct pooled *)(void *)buf;

	if (buf == NULL)
		return;
	pthread_mutex_lock(&pool.mu);
	if (cap >= sizeof *b && pool.bytes + cap <= POOL_MAX) {
		b->cap = cap;
		b->next = pool.head;
		pool.head = b;
		pool.bytes += cap;
		buf = NULL;
	}
	pthread_mutex_unlock(&pool.mu);
	free(buf);
}

/* A request's headers hold a token or a signature: wiped, then freed. */
static void
hdrs_free(struct curl_slist *l)
{
	struct curl_slist *h;

	for (h = l; h != NULL; h = h->next)
		explicit_bzero(h->data, strlen(h->data));
	curl_slist_free_all(l);
}

void
sk__part_free(struct part *p)
{
	if (p == NULL)
		return;
	if (p->easy != NULL)
		curl_easy_cleanup(p->easy);
	hdrs_free(p->hdrs);
	free(p->rhdrs);
	if (p->whole)
		free(p->buf);	/* grown by realloc: not the pool's */
	else
		pool_put(p->buf, p->cap);
	free(p);
}

/* Hand parts to the engine: queue them and wake it. The caller holds
 * p->s->mu. */
static void
engine_queue(struct part *p, int cancel)
{
	int wake;

	pthread_mutex_lock(&eng.mu);
	if (cancel) {
		p->cnext = eng.cancels;
		eng.cancels = p;
	} else {
		p->next = eng.adds;
		eng.adds = p;
	}
	/* Only a sleeping engine is woken, once: an awake one takes the
	 * queue before it sleeps (engine_main). A wakeup for every part
	 * cost a send here and a poll and a recv there, per small file. */
	wake = eng.asleep;
	eng.asleep = 0;
	pthread_mutex_unlock(&eng.mu);
	if (wake)
		curl_multi_wakeup(eng.multi);
}

struct part *
sk__part_new(struct sk__stream *s, uint64_t off, uint64_t len, size_t cap)
{
	struct part *p;

	if ((p = calloc(1, sizeof *p)) == NULL)
		return NULL;
	if ((p->buf = pool_get(&cap)) == NULL) {
		free(p);
		return NULL;
	}
	p->s = s;
	p->off = off;
	p->len = len;
	p->cap = cap;
	p->clength = -1;
	p->retry_after = -1;
	p->wake_at = UINT64_MAX;
	return p;
}

/* Give p to the engine. Caller holds s->mu. */
void
sk__part_submit(struct sk__stream *s, struct part *p)
{
	p->engine = 1;
	p->state = P_QUEUED;
	s->inflight++;
	engine_queue(p, 0);
}

/* Let go of p. Caller holds s->mu. */
void
sk__part_drop(struct sk__stream *s, struct part *p)
{
	if (p->off + p->have > s->high)
		s->high = p->off + p->have;
	if (p->engine) {
		__atomic_store_n(&p->cancel, 1, __ATOMIC_RELAXED);
		engine_queue(p, 1);
	} else
		sk__part_free(p);
}

/* ------------------------------------------------------------------------ */
/* the engine thread: transfers, retries and the loop                       */

static double
rand01(void)
{
	/* xorshift64*: the jitter needs no quality, only spread. */
	eng.rng ^= eng.rng >> 12;
	eng.rng ^= eng.rng << 25;
	eng.rng ^= eng.rng >> 27;
	return (double)((eng.rng * 2685821657736338717ULL) >> 11) /
	    9007199254740992.0;
}

/* A request keeps its response's header lines (32 KiB at most) for
 * sk__req_header. 0, or -1 when out of memory. */
#define RHDRS_MAX	32768

static int
keep_header(struct part *p, const char *line, size_t len)
{
	char *nb;

	if (p->rhlen + len + 1 > RHDRS_MAX)
		return 0;
	if (p->rhdrs == NULL && (p->rhdrs = malloc(RHDRS_MAX)) == NULL)
		return -1;
	nb = p->rhdrs;
	memcpy(nb + p->rhlen, line, len);
	p->rhlen += len;
	nb[p->rhlen] = '\0';
	return 0;
}

/* Header lines of the current response; a new status line starts over
 * (a redirect or 100 Continue came first). */
/*
 * The hosts that answered this process with an HTTP response, engine
 * thread only. A host that never answered and refuses the connection,
 * has no address or fails the TLS handshake is misnamed or misconfigured
 * (an https URL on an http port, a wrong endpoint), which no retry fixes:
 * that fails at once. One that answered before and then does so is
 * restarting or overloaded, and is retried.
 */
#define ANSWERED_MAX	256

static uint64_t answered[ANSWERED_MAX];
static int nanswered;

/* A hash of URL's scheme, host and port (no user or password). */
static uint64_t
origin_of(const char *url)
{
	const char *a, *e, *at;
	uint64_t h = 1469598103934665603ULL;
	const char *c;

	if (url == NULL || (a = strstr(url, "://")) == NULL)
		return 0;
	e = a + 3 + strcspn(a + 3, "/?#");
	for (at = a + 3, c = a + 3; c < e; c++)
		if (*c == '@')
			at = c + 1;
	for (c = url; c < e; c++) {
		if (c == a + 3)
			c = at;
		h = (h ^ (uint64_t)(unsigned char)(*c | 0x20)) *
		    1099511628211ULL;
	}
	return h;
}

static int
has_answered(CURL *easy)
{
	char *url = NULL;
	uint64_t o;
	int i;

	curl_easy_getinfo(easy, CURLINFO_EFFECTIVE_URL, &url);
	o = origin_of(url);
	for (i = 0; i < nanswered; i++)
		if (answered[i] == o)
			return 1;
	return 0;
}

static void
note_answer(CURL *easy)
{
	char *url = NULL;

	if (has_answered(easy))
		return;
	if (nanswered == ANSWERED_MAX) {
		/* the oldest half goes */
		memmove(answered, answered + ANSWERED_MAX / 2,
		    ANSWERED_MAX / 2 * sizeof answered[0]);
		nanswered = ANSWERED_MAX / 2;
	}
	curl_easy_getinfo(easy, CURLINFO_EFFECTIVE_URL, &url);
	answered[nanswered++] = origin_of(url);
}

static size_t
header_cb(char *line, size_t size, size_t n, void *arg)
{
	struct part *p = arg;
	size_t len = size * n, k, v, i;
	char val[256], *end, *colon;

	p->last_byte = sk__now_ns();
	if (len >= 5 && strncmp(line, "HTTP/", 5) == 0) {
		note_answer(p->easy);
		p->etag[0] = p->lastmod[0] = p->crange[0] = '\0';
		p->version[0] = '\0';
		p->clength = -1;
		p->retry_after = -1;
		p->rhlen = 0;
		return len;
	}
	if (p->req != NULL && keep_header(p, line, len) != 0)
		return 0;
	/* libcurl does not promise a NUL: bound every scan by len. */
	if ((colon = memchr(line, ':', len)) == NULL)
		return len;
	k = (size_t)(colon - line);
	v = k + 1;
	while (v < len && (line[v] == ' ' || line[v] == '\t'))
		v++;
	while (len > v && (line[len - 1] == '\r' || line[len - 1] == '\n' ||
	    line[len - 1] == ' '))
		len--;
	/* A value that does not fit is not kept: a cut ETag would match
	 * nothing (or the wrong thing). Control bytes never reach a
	 * message. */
	if (len - v >= sizeof val)
		val[0] = '\0';
	else {
		memcpy(val, line + v, len - v);
		val[len - v] = '\0';
		for (i = 0; val[i] != '\0'; i++)
			if ((unsigned char)val[i] < 0x20 || val[i] == 0x7f)
				val[i] = '?';
	}
#define HEADER(name, field) \
	if (k == sizeof name - 1 && strncasecmp(line, name, k) == 0) { \
		if (strlen(val) < sizeof p->field) \
			memcpy(p->field, val, strlen(val) + 1); \
		else \
			p->field[0] = '\0'; \
		return size * n; \
	}
	HEADER("etag", etag)
	HEADER("last-modified", lastmod)
	HEADER("content-range", crange)
#undef HEADER
	if (p->s->auth.version_header != NULL &&
	    k == strlen(p->s->auth.version_header) &&
	    strncasecmp(line, p->s->auth.version_header, k) == 0 &&
	    strlen(val) < sizeof p->version)
		memcpy(p->version, val, strlen(val) + 1);
	if (k == 14 && strncasecmp(line, "content-length", k) == 0) {
		errno = 0;
		p->clength = (int64_t)strtoll(val, &end, 10);
		if (errno != 0 || end == val || p->clength < 0)
			p->clength = -1;
	} else if (k == 11 && strncasecmp(line, "retry-after", k) == 0) {
		/* Seconds; an HTTP date is taken as "soon" (1 s). */
		p->retry_after = strtod(val, &end);
		if (end == val || !(p->retry_after >= 0) ||
		    p->retry_after > 86400)
			p->retry_after = 1;
	}
	return size * n;
}

static int
fail_part(struct part *p, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
fail_part(struct part *p, int code, const char *fmt, ...)
{
	va_list ap;

	p->code = code;
	va_start(ap, fmt);
	vsnprintf(p->err, sizeof p->err, fmt, ap);
	va_end(ap);
	return code;
}

/*
 * "bytes A-B/T" (RFC 9110 14.4); T may be "*". Returns 0 and the three
 * numbers (T = UINT64_MAX when unknown), -1 when malformed.
 */
int
sk__parse_crange(const char *v, uint64_t *a, uint64_t *b, uint64_t *t)
{
	unsigned long long x, y;
	char tot[32];

	if (sscanf(v, "bytes %llu-%llu/%31s", &x, &y, tot) != 3 || y < x)
		return -1;
	*a = x;
	*b = y;
	if (strcmp(tot, "*") == 0) {
		*t = UINT64_MAX;
		return 0;
	}
	if (sscanf(tot, "%llu", &x) != 1)
		return -1;
	*t = x;
	return 0;
}

/*
 * The first body byte of a 2xx response: does it continue what the part
 * has, from the same version of the object? The stream's first response
 * sets the size and the version. Called with s->mu held. Returns 0 or a
 * failure code (the transfer is then aborted and not retried).
 */
/*
 * The first part's answer was 200 with the whole object (t bytes): the
 * server ignores Range, as python3 -m http.server does. Rather than fail,
 * read the shard as webdataset's pipe:curl would, with that one GET: the
 * part grows to the object (bytes are held as they arrive, so a lying
 * Content-Length costs only what was sent), the other parts go, and no
 * more are asked for. A retry starts from the first byte. Said once a
 * process. The caller holds s->mu.
 */
#define WHOLE_OBJECT_MAX	((uint64_t)4 << 30)

static int
whole_object(struct part *p, uint64_t t)
{
	static int said;
	struct sk__stream *s = p->s;
	int i;

	if (t > WHOLE_OBJECT_MAX)
		return fail_part(p, SK_EUNSUPPORTED, "%s: the server ignores "
		    "byte ranges, and the object (%" PRIu64 " bytes) is more "
		    "than %" PRIu64 " to read with one GET", s->display, t,
		    WHOLE_OBJECT_MAX), -1;
	if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		sk_log(SK_LOG_WARN, "%s: the server ignores byte ranges: each "
		    "shard is read with one plain GET, held whole in memory, "
		    "and a broken transfer starts again from its first byte",
		    s->display);
	/* Its buffer holds the object from the start: bytes below have
	 * never move while a reader may point into them, so no realloc. */
	if (p->have == 0 && p->cap < t) {
		uint8_t *nb = malloc((size_t)t + 1);

		if (nb == NULL)
			return fail_part(p, SK_ENOMEM, "%s: out of memory for "
			    "the whole object (%" PRIu64 " bytes; the server "
			    "ignores byte ranges)", s->display, t), -1;
		pool_put(p->buf, p->cap);
		p->buf = nb;
		p->cap = (size_t)t;
	} else if (p->cap < t)
		return fail_part(p, SK_EUNSUPPORTED, "%s: the server ignores "
		    "byte ranges", s->display), -1;
	p->whole = 1;
	p->len = t;
	s->norange = 1;
	for (i = 1; i < s->nwin; i++)
		sk__part_drop(s, s->win[i]);
	if (s->nwin > 0 && s->win[0] == p)
		s->nwin = 1;
	s->next_off = t;
	return 0;
}

static int
check_response(struct part *p)
{
	struct sk__stream *s = p->s;
	uint64_t a, b, t, want = p->off + p->have;

	if (p->status == 206) {
		const char *slash = strrchr(p->crange, '/');

		/* Another total is another object, however the rest reads
		 * (an emulator answers a range past the end with B < A). */
		if (s->meta > 0 && slash != NULL && slash[1] != '*' &&
		    strtoull(slash + 1, NULL, 10) != s->size)
			return fail_part(p, SK_ECHANGED, "%s: the object changed "
			    "while it was read (%" PRIu64 " bytes, now %s)",
			    s->display, s->size, slash + 1);
		if (sk__parse_crange(p->crange, &a, &b, &t) != 0)
			return fail_part(p, SK_EIO, "%s: a 206 response with "
			    "no usable Content-Range (\"%s\")", s->display,
			    p->crange);
		if (a != want)
			return fail_part(p, SK_EIO, "%s: asked for bytes from "
			    "%" PRIu64 ", the server sent them from %" PRIu64,
			    s->display, want, a);
	} else if (want > 0 && !p->whole) {
		/* Range ignored: every part would fetch the object from its
		 * first byte again, a quadratic cost. A stream's later parts
		 * give way to its first, which reads the whole object
		 * (below); a read that went back, or a cache's range, says
		 * so instead. */
		if (s->norange || (p->off > 0 && !p->range && !s->meta &&
		    p->again == 0))
			return fail_part(p, SK_ECANCELED, "%s: the server "
			    "ignores byte ranges: bytes from %" PRIu64 " come "
			    "with the whole object's GET", s->display, want);
		return fail_part(p, SK_EUNSUPPORTED, "%s: the server ignores "
		    "byte ranges (HTTP 200 for bytes from %" PRIu64 "); shards "
		    "are read in ranged parts", s->display, want);
	} else {
		t = p->clength >= 0 ? (uint64_t)p->clength : UINT64_MAX;
		if (p->off == 0 && !p->whole && !p->range && !s->meta &&
		    t != UINT64_MAX && t > p->len && whole_object(p, t) != 0)
			return -1;
	}
	if (s->learn) {
		/* Opened at a size a listing gave, with no version: the
		 * first response names it for every later one. */
		snprintf(s->etag, sizeof s->etag, "%s", p->etag);
		snprintf(s->lastmod, sizeof s->lastmod, "%s", p->lastmod);
		if (s->version[0] == '\0')
			snprintf(s->version, sizeof s->version, "%s",
			    p->version);
		s->learn = 0;
	}
	if (!s->meta) {
		if (t == UINT64_MAX && !p->whole)
			return fail_part(p, SK_EIO, "%s: the server gives no "
			    "size for this object", s->display);
		s->size = t;
		snprintf(s->etag, sizeof s->etag, "%s", p->etag);
		snprintf(s->lastmod, sizeof s->lastmod, "%s", p->lastmod);
		if (s->version[0] == '\0')
			snprintf(s->version, sizeof s->version, "%s",
			    p->version);
		s->meta = 1;
		pthread_cond_broadcast(&s->cond);
	}
	if (s->version[0] != '\0' && p->version[0] != '\0' &&
	    strcmp(s->version, p->version) != 0)
		return fail_part(p, SK_ECHANGED, "%s: the object changed while "
		    "it was read (%s %s, now %s)", s->display,
		    s->auth.version_header, s->version, p->version[0] ?
		    p->version : "none");
	/* A changed object: never mix the bytes of two versions. */
	if ((s->etag[0] != '\0' && strcmp(s->etag, p->etag) != 0) ||
	    (s->etag[0] == '\0' && s->lastmod[0] != '\0' &&
	    strcmp(s->lastmod, p->lastmod) != 0) ||
	    (t != UINT64_MAX && t != s->size)) {
		char now[32];

		if (t == UINT64_MAX)
			snprintf(now, sizeof now, "?");
		else
			snprintf(now, sizeof now, "%" PRIu64, t);
		return fail_part(p, SK_ECHANGED, "%s: the object changed while "
		    "it was read (ETag %s, %" PRIu64 " bytes, now %s, %s "
		    "bytes)", s->display, s->etag[0] ? s->etag : "none",
		    s->size, p->etag[0] ? p->etag : "none", now);
	}
	/* Parts are asked for before the size is known: the one that
	 * holds the end is cut there. */
	if (!p->whole && p->off + p->len > s->size)
		p->len = p->off < s->size ? s->size - p->off : 0;
	return 0;
}

/* Grow a whole part's buffer to hold len more bytes (at most p->len). */
static int
grow(struct part *p, size_t len)
{
	size_t ncap;
	uint8_t *nb;

	if (len <= p->cap - p->have)
		return 0;
	ncap = p->cap * 2 > p->have + len ? p->cap * 2 : p->have + len;
	if (ncap > p->len)
		ncap = (size_t)p->len;
	if ((nb = realloc(p->buf, ncap + 1)) == NULL)
		return -1;
	p->buf = nb;
	p->cap = ncap;
	return 0;
}

/*
 * A request keeps its response body whatever the status: its caller
 * judges it. A 2xx body longer than max fails; an error body is cut at
 * max and the transfer at 64 KiB.
 */
static size_t
req_body(struct part *p, char *data, size_t len)
{
	int ok = p->status >= 200 && p->status < 300;
	size_t take = len;

	if (ok)
		ADD(bytes, len);
	else if ((p->error_body += len) > 65536)
		return 0;
	if (p->have + take > p->len) {
		if (ok)
			return fail_part(p, SK_ETOOBIG, "%s: a response of more "
			    "than %" PRIu64 " bytes", p->s->display, p->len), 0;
		take = (size_t)(p->len - p->have);
	}
	if (grow(p, take) != 0)
		return fail_part(p, SK_ENOMEM, "out of memory"), 0;
	memcpy(p->buf + p->have, data, take);
	p->have += take;
	return len;
}

/*
 * Copy a received block into its part. Most parts are read long after
 * they are written (read-ahead keeps many megabytes in flight), so on
 * x86-64 the copy streams past the cache unless a reader is waiting for
 * these very bytes: plain stores would first read every destination line
 * from memory only to overwrite it (half the copy's time, measured).
 */
static void
copy_in(uint8_t *dst, const char *src, size_t n, int read_soon)
{
#if defined(__x86_64__) && defined(__SSE2__)
	size_t head = (size_t)(-(uintptr_t)dst & 15);

	if (read_soon || n < 4096 + head) {
		memcpy(dst, src, n);
		return;
	}
	memcpy(dst, src, head);
	dst += head;
	src += head;
	n -= head;
	for (; n >= 64; n -= 64, dst += 64, src += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)(const void *)src);
		__m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(const void *)(src + 32));
		__m128i d = _mm_loadu_si128((const __m128i *)(const void *)(src + 48));
		_mm_stream_si128((__m128i *)(void *)dst, a);
		_mm_stream_si128((__m128i *)(void *)(dst + 16), b);
		_mm_stream_si128((__m128i *)(void *)(dst + 32), c);
		_mm_stream_si128((__m128i *)(void *)(dst + 48), d);
	}
	memcpy(dst, src, n);
	_mm_sfence();	/* before the bytes are published to a reader */
#else
	(void)read_soon;
	memcpy(dst, src, n);
#endif
}

static size_t
write_cb(char *data, size_t size, size_t n, void *arg)
{
	struct part *p = arg;
	struct sk__stream *s = p->s;
	size_t len = size * n, take;
	uint64_t room;

	if (__atomic_load_n(&p->cancel, __ATOMIC_RELAXED))
		return 0;
	p->last_byte = sk__now_ns();
	if (!p->checked) {
		curl_easy_getinfo(p->easy, CURLINFO_RESPONSE_CODE, &p->status);
		p->checked = 1;
		if (p->req == NULL && (p->status == 200 || p->status == 206)) {
			pthread_mutex_lock(&s->mu);
			if (check_response(p) != 0) {
				pthread_mutex_unlock(&s->mu);
				return 0;
			}
			pthread_mutex_unlock(&s->mu);
		}
	}
	if (p->req != NULL)
		return req_body(p, data, len);
	if (p->status != 200 && p->status != 206) {
		/* An error page: judged by its status in finish(), its start
		 * kept for the message; an endless one is cut after 64 KiB. */
		take = sizeof p->ebody - 1 - p->elen;
		if (take > len)
			take = len;
		memcpy(p->ebody + p->elen, data, take);
		p->elen += take;
		p->error_body += len;
		return p->error_body > 65536 ? 0 : len;
	}
	ADD(bytes, len);
	if (p->complete || len == 0)
		return size * n;
	if (p->skip > 0) {
		take = len < p->skip ? len : (size_t)p->skip;
		p->skip -= take;
		data += take;
		len -= take;
		if (len == 0)
			return size * n;
	}
	room = p->len - p->have;
	if (p->whole && len > p->cap - p->have) {
		if (p->have + len > p->len)
			return fail_part(p, SK_ETOOBIG, "%s: more than %" PRIu64
			    " bytes", s->display, p->len), 0;
		if (grow(p, len) != 0)
			return fail_part(p, SK_ENOMEM, "out of memory"), 0;
	}
	take = len < room ? len : (size_t)room;
	copy_in(p->buf + p->have, data, take, p->read_soon);
	pthread_mutex_lock(&s->mu);
	p->have += take;
	p->read_soon = p->waiters > 0;
	/* Readers are woken when what they wait for is in, not at every
	 * write: waking them for each 16 KiB cost a quarter of a mount's
	 * CPU, and a loader's I/O thread a switch per write. */
	if (p->waiters > 0 && p->have > p->wake_at)
		pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->mu);
	if (take < len) {
		/* A server that ignored the range's end: all is here. */
		p->complete = 1;
		return 0;
	}
	return size * n;
}

/* p->state is read by the reader under s->mu. */
static void
set_state(struct part *p, int state)
{
	pthread_mutex_lock(&p->s->mu);
	p->state = state;
	pthread_mutex_unlock(&p->s->mu);
}

/* Append a header line; -1 when out of memory. */
static int
add_header(struct curl_slist **h, const char *line)
{
	struct curl_slist *n;

	if ((n = curl_slist_append(*h, line)) == NULL)
		return -1;
	*h = n;
	return 0;
}

/* A request's method, body and headers on p->easy. */
static int
set_method(struct part *p)
{
	const struct sk__req *r = p->req;
	CURL *e = p->easy;
	const char *const *h;
	int ctype = 0;

	if (strcmp(r->method, "HEAD") == 0)
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	else if (strcmp(r->method, "GET") != 0)
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method);
	for (h = r->headers; h != NULL && *h != NULL; h++) {
		if (strncasecmp(*h, "content-type:", 13) == 0)
			ctype = 1;
		if (add_header(&p->hdrs, *h) != 0)
			goto nomem;
	}
	if (r->body != NULL || strcmp(r->method, "PUT") == 0 ||
	    strcmp(r->method, "POST") == 0) {
		/* The body is sent from the caller's memory, again on a
		 * retry; no 100-continue round trip, no form type. */
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body != NULL ?
		    (const char *)r->body : "");
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
		    (curl_off_t)r->body_len);
		if (add_header(&p->hdrs, "Expect:") != 0 || (!ctype &&
		    add_header(&p->hdrs, "Content-Type: "
		    "application/octet-stream") != 0))
			goto nomem;
	}
	return 0;
nomem:
	fail_part(p, SK_ENOMEM, "out of memory");
	return -1;
}

/*
 * Easy handles are kept for the next transfers rather than made for each:
 * a new one allocates its 256 KiB receive buffer, which lands in fresh
 * pages (a page fault each 4 KiB), and a mount reading small files made
 * and freed one per file. Engine thread only; reset when put, so that a
 * kept one points at no part.
 */
static CURL *
easy_get(void)
{
	return eng.nidle > 0 ? eng.idle[--eng.nidle] : curl_easy_init();
}

static void
easy_put(CURL *e)
{
	if (e == NULL)
		return;
	if (eng.nidle == EASY_KEPT) {
		curl_easy_cleanup(e);
		return;
	}
	curl_easy_reset(e);
	eng.idle[eng.nidle++] = e;
}

/* Set up the easy handle for the next attempt and give it to the multi:
 * 0, or -1 with the part's error set (the caller hands it back). */
static int
start_attempt(struct part *p)
{
	struct sk__stream *s = p->s;
	char range[64];
	uint64_t from = p->off + p->have;
	const char *url;
	CURL *e;

	if (p->easy == NULL)
		p->easy = easy_get();
	else
		curl_easy_reset(p->easy);
	e = p->easy;
	if (e == NULL)
		return fail_part(p, SK_ENOMEM, "out of memory"), -1;
	hdrs_free(p->hdrs);
	p->hdrs = NULL;
	p->status = 0;
	p->checked = 0;
	p->last_byte = 0;
	p->stalled = 0;
	p->error_body = 0;
	p->elen = 0;
	p->rhlen = 0;
	/* A whole resource is asked for without a range: a retry starts
	 * it over rather than appending a second copy; a shard's bytes in
	 * hand stay put (readers hold pointers into them) and are skipped
	 * in the new answer. */
	if (p->whole && s->norange && p->req == NULL)
		p->skip = p->have;
	else if (p->whole)
		p->have = 0;
	p->attempt_have = p->have;
	p->clength = -1;
	p->retry_after = -1;
	p->curlerr[0] = '\0';
	url = s->url;
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_PRIVATE, p);
	curl_easy_setopt(e, CURLOPT_SHARE, eng.share);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, p->curlerr);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, p);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, p);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	/* An https source is never sent on over plain http. */
	curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR,
	    strncmp(url, "https:", 6) == 0 ? "https" : "http,https");
	/*
	 * A request is judged by its caller, a redirect included. A signed
	 * stream follows none: its headers (a session token among them)
	 * would go with it to whatever host the answer names. Its path is
	 * sent as signed, "." and ".." segments and all.
	 */
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, p->req == NULL &&
	    s->auth.headers == NULL ? 1L : 0L);
	curl_easy_setopt(e, CURLOPT_PATH_AS_IS, s->auth.headers != NULL ?
	    1L : 0L);
	curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
	curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
	curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024);
	curl_easy_setopt(e, CURLOPT_USERAGENT, "shardkit/" SK_VERSION_STRING);
	pthread_mutex_lock(&eng.mu);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
	    (long)(eng.cfg.connect_timeout * 1000));
	/*
	 * The stall timeout. Before the response, curl's low-speed check
	 * (below 1 byte/s for that long) is exact; once bytes flowed, its
	 * average over the last seconds stays above 1 byte/s for a while,
	 * so the engine itself cuts a response silent for that long.
	 */
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME,
	    (long)(eng.cfg.stall_timeout + 0.999));
	if (eng.ca_file != NULL)
		curl_easy_setopt(e, CURLOPT_CAINFO, eng.ca_file);
	else if (s->auth.ca_file != NULL)
		curl_easy_setopt(e, CURLOPT_CAINFO, s->auth.ca_file);
	else if (getenv("CURL_CA_BUNDLE") != NULL)
		curl_easy_setopt(e, CURLOPT_CAINFO, getenv("CURL_CA_BUNDLE"));
	else if (getenv("SSL_CERT_FILE") != NULL)
		curl_easy_setopt(e, CURLOPT_CAINFO, getenv("SSL_CERT_FILE"));
	if (getenv("SSL_CERT_DIR") != NULL && eng.ca_file == NULL &&
	    s->auth.ca_file == NULL)
		curl_easy_setopt(e, CURLOPT_CAPATH, getenv("SSL_CERT_DIR"));
	pthread_mutex_unlock(&eng.mu);
	if (p->req != NULL && set_method(p) != 0)
		return -1;
	if (!p->whole) {
		/* The first part asks for part_size bytes of an object of
		 * unknown size; the server answers with what there is. */
		snprintf(range, sizeof range, "%" PRIu64 "-%" PRIu64, from,
		    p->off + p->len - 1);
		curl_easy_setopt(e, CURLOPT_RANGE, range);
		pthread_mutex_lock(&s->mu);
		/* If-Match on a strong ETag: a changed object is a 412 rather
		 * than bytes of another version (weak ones cannot match). */
		if (s->meta && s->etag[0] == '"' && !s->auth.no_if_match) {
			char h[300];

			snprintf(h, sizeof h, "If-Match: %s", s->etag);
			add_header(&p->hdrs, h);
		} else if (s->meta && s->etag[0] == '\0' && !s->auth.no_if_match &&
		    s->lastmod[0] != '\0') {
			/* No ETag: Last-Modified is the version (to the
			 * second, RFC 9110 13.1.4). */
			char h[100];

			snprintf(h, sizeof h, "If-Unmodified-Since: %s",
			    s->lastmod);
			add_header(&p->hdrs, h);
		}
		pthread_mutex_unlock(&s->mu);
	}
	if (s->auth.headers != NULL) {
		char msg[SK_ERRMSG_MAX];
		int rc;

		msg[0] = '\0';
		rc = s->auth.headers(s->auth.ctx, p->req != NULL ?
		    p->req->method : "GET", url, p->req != NULL ?
		    p->body_sha : EMPTY_SHA256, &p->hdrs, msg, sizeof msg);
		if (rc != 0)
			return fail_part(p, rc, "%s: %s", s->display, msg), -1;
	}
	if (p->hdrs != NULL)
		curl_easy_setopt(e, CURLOPT_HTTPHEADER, p->hdrs);
	p->t_attempt = sk__now_ns();
	if (p->attempts == 0)
		p->t_first = p->t_attempt;
	p->attempts++;
	ADD(requests, 1);
	if (curl_multi_add_handle(eng.multi, e) != CURLM_OK) {
		fail_part(p, SK_ENOMEM, "%s: cannot start a transfer",
		    s->display);
		return -1;
	}
	set_state(p, P_RUNNING);
	p->rnext = eng.running;
	eng.running = p;
	return 0;
}

static void unlink_running(struct part *p);

/* The part is the reader's again (DONE or FAILED). */
static void
hand_back(struct part *p, int state)
{
	struct sk__stream *s = p->s;

	unlink_running(p);
	if (p->easy != NULL) {
		curl_multi_remove_handle(eng.multi, p->easy);
		easy_put(p->easy);
		p->easy = NULL;
	}
	pthread_mutex_lock(&s->mu);
	if (p->cancel) {
		/* The reader let go of it first: it waits in the cancel
		 * queue, which frees and counts it. */
		pthread_mutex_unlock(&s->mu);
		return;
	}
	if (state == P_FAILED)
		ADD(failures, 1);
	if (p->again > 0)
		ADD(refetched, p->again < p->have ? p->again : p->have);
	if (p->off + p->have > s->high)
		s->high = p->off + p->have;
	p->state = state;
	p->engine = 0;
	s->inflight--;
	/* A later part that gave way to a whole GET is no error. */
	if (state == P_FAILED && p->code == SK_ECANCELED && p->off > 0) {
		p->state = P_DONE;
		p->len = p->have = 0;
		state = P_DONE;
	}
	if (state == P_FAILED && !s->meta) {
		/* The reader waiting for the size takes this error. */
		s->meta = -1;
		s->err_code = p->code ? p->code : SK_EIO;
		snprintf(s->err, sizeof s->err, "%s", p->err[0] ? p->err :
		    "the first request failed");
	}
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->mu);
}

static int
retryable_curl(CURLcode cc, enum sk_retry_cause *cause)
{
	switch (cc) {
	case CURLE_OPERATION_TIMEDOUT:
		*cause = SK_RETRY_STALL;
		return 1;
	case CURLE_PARTIAL_FILE:
		*cause = SK_RETRY_SHORT;
		return 1;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_COULDNT_CONNECT:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_SSL_CONNECT_ERROR:
		*cause = SK_RETRY_CONNECT;
		return 1;
	default:
		return 0;
	}
}

/* The kinds of retry already warned about, engine thread only. */
static int warned[SK_RETRY_NCAUSES];

/* Transport errors that, before a host ever answered, mean a wrong
 * address, port or scheme rather than a passing fault. */
static int
first_contact_fatal(CURLcode cc)
{
	return cc == CURLE_COULDNT_RESOLVE_HOST ||
	    cc == CURLE_COULDNT_RESOLVE_PROXY ||
	    cc == CURLE_COULDNT_CONNECT || cc == CURLE_SSL_CONNECT_ERROR;
}

static const char *
first_contact_hint(CURLcode cc)
{
	switch (cc) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return "check the host name";
	case CURLE_SSL_CONNECT_ERROR:
		return "the TLS handshake failed; is this an http port, or "
		    "does the server speak another TLS version?";
	default:
		return "check the host and port, and that the server runs";
	}
}

/*
 * A request ended: any final status but 408, 429 and 5xx is its caller's
 * to judge; with no_retry, a transport error or a 5xx is too. 1 when p was
 * handed back, 0 to go on to the retries.
 */
static int
req_final(struct part *p, CURLcode cc)
{
	int retryable = p->status == 408 || p->status == 429 ||
	    p->status >= 500;

	if (p->status >= 200 && !retryable && (cc == CURLE_OK ||
	    cc == CURLE_WRITE_ERROR)) {
		p->len = p->have;
		hand_back(p, P_DONE);
		return 1;
	}
	if (!p->req->no_retry)
		return 0;
	if (p->status >= 200)
		fail_part(p, SK_ENETWORK, "%s: HTTP %ld", p->s->display,
		    p->status);
	else
		fail_part(p, SK_ENETWORK, "%s: %s", p->s->display,
		    p->stalled ? "no byte for the stall timeout" :
		    p->curlerr[0] ? p->curlerr : curl_easy_strerror(cc));
	hand_back(p, P_FAILED);
	return 1;
}

/* A transfer ended: done, retried later, or failed for good. */
static void
finish(struct part *p, CURLcode cc)
{
	struct sk__stream *s = p->s;
	enum sk_retry_cause cause = SK_RETRY_CONNECT;
	double delay, left, elapsed, tries_left, rt;
	curl_off_t ttfb = 0;
	char why[SK_ERRMSG_MAX];
	int retry = 0;

	if (__atomic_load_n(&p->cancel, __ATOMIC_RELAXED))
		return;		/* freed with the cancel queue */
	curl_easy_getinfo(p->easy, CURLINFO_RESPONSE_CODE, &p->status);
	if (cc == CURLE_OK && !p->checked && p->req == NULL &&
	    (p->status == 200 || p->status == 206)) {
		/* A body of no bytes never reached write_cb. */
		p->checked = 1;
		pthread_mutex_lock(&s->mu);
		check_response(p);
		pthread_mutex_unlock(&s->mu);
	}
	if (curl_easy_getinfo(p->easy, CURLINFO_STARTTRANSFER_TIME_T, &ttfb) ==
	    CURLE_OK && ttfb > 0) {
		ADD(ttfb_ns, (uint64_t)ttfb * 1000);
		ADD(ttfb_count, 1);
	}
	if (p->code != 0) {
		/* check_response or write_cb refused it */
		hand_back(p, P_FAILED);
		return;
	}
	if (p->req != NULL && req_final(p, cc))
		return;
	if (p->status >= 200 && p->status != 200 && p->status != 206) {
		/* A final status that is not a body of the object: judged by
		 * the status, whatever became of its body (cut, stalled). */
		unsigned long long tot;
		char rest;

		if (p->status == 416 && !p->whole &&
		    sscanf(p->crange, "bytes */%llu%c", &tot, &rest) == 1 &&
		    p->off >= tot) {
			/* Asked for past the end (parts go out before the
			 * size is known; an empty object has no byte 0). */
			pthread_mutex_lock(&s->mu);
			if (!s->meta && p->off == 0) {
				s->size = 0;
				snprintf(s->etag, sizeof s->etag, "%s", p->etag);
				snprintf(s->lastmod, sizeof s->lastmod, "%s",
				    p->lastmod);
				s->meta = 1;
			}
			if (s->meta > 0 && tot != s->size) {
				pthread_mutex_unlock(&s->mu);
				fail_part(p, SK_ECHANGED, "%s: the object changed "
				    "while it was read (%" PRIu64 " bytes, now "
				    "%llu)", s->display, s->size, tot);
			} else {
				p->len = 0;
				pthread_mutex_unlock(&s->mu);
				hand_back(p, P_DONE);
				return;
			}
		} else if (p->status == 416 && p->off == 0) {
			fail_part(p, SK_EIO, "%s: HTTP 416 (range not "
			    "satisfiable) for its first bytes", s->display);
		} else if (p->status == 416) {
			fail_part(p, SK_ECHANGED, "%s: HTTP 416 for bytes from %"
			    PRIu64 ": the object shrank while it was read",
			    s->display, p->off + p->have);
		} else if (s->auth.explain != NULL && (p->status == 301 ||
		    (p->status >= 400 && p->status < 500 && p->status != 408 &&
		    p->status != 412 && p->status != 429))) {
			/* A bucket's error body says what is wrong. */
			pthread_mutex_lock(&s->mu);
			p->code = s->auth.explain(s->auth.ctx, p->status,
			    p->ebody, p->elen, s->display, s->version[0] ?
			    s->version : NULL, p->err, sizeof p->err);
			pthread_mutex_unlock(&s->mu);
		} else if (p->status == 404 || p->status == 410) {
			fail_part(p, SK_ENOENT, "%s: HTTP %ld: no such object",
			    s->display, p->status);
		} else if (p->status == 401 || p->status == 403) {
			fail_part(p, SK_EACCES, "%s: HTTP %ld: access denied",
			    s->display, p->status);
		} else if (p->status == 412) {
			fail_part(p, SK_ECHANGED, "%s: HTTP 412: the object "
			    "changed while it was read (it no longer has %s %s)",
			    s->display, s->etag[0] ? "ETag" : "Last-Modified",
			    s->etag[0] ? s->etag : s->lastmod);
		} else if (p->status == 408 || p->status == 429 ||
		    p->status >= 500) {
			cause = p->status == 429 ? SK_RETRY_429 : SK_RETRY_5XX;
			retry = 1;
			snprintf(why, sizeof why, "HTTP %ld", p->status);
		} else {
			fail_part(p, SK_EIO, "%s: HTTP %ld", s->display,
			    p->status);
		}
	} else if (cc == CURLE_OK || (cc == CURLE_WRITE_ERROR && p->complete)) {
		if (p->status == 200 || p->status == 206) {
			if (p->whole || p->have == p->len) {
				/* A whole GET of a norange stream is in its
				 * window: its readers read len under mu. */
				if (p->whole) {
					pthread_mutex_lock(&s->mu);
					p->len = p->have;
					pthread_mutex_unlock(&s->mu);
				}
				hand_back(p, P_DONE);
				return;
			}
			cause = SK_RETRY_SHORT;
			retry = 1;
			snprintf(why, sizeof why, "the body ended after %" PRIu64
			    " of %" PRIu64 " bytes", p->have, p->len);
		} else {
			fail_part(p, SK_EIO, "%s: no HTTP response", s->display);
		}
	} else if (p->stalled) {
		retry = 1;
		cause = SK_RETRY_STALL;
		snprintf(why, sizeof why, "no byte for the stall timeout after "
		    "%" PRIu64 " of %" PRIu64, p->have, p->len);
	} else if (first_contact_fatal(cc) && !has_answered(p->easy)) {
		fail_part(p, SK_ENETWORK, "%s: %s (not retried, as this "
		    "server has not answered yet: %s)", s->display,
		    p->curlerr[0] ? p->curlerr : curl_easy_strerror(cc),
		    first_contact_hint(cc));
	} else if (retryable_curl(cc, &cause)) {
		retry = 1;
		snprintf(why, sizeof why, "%s", p->curlerr[0] ? p->curlerr :
		    curl_easy_strerror(cc));
	} else {
		int code = SK_EIO;

		if (cc == CURLE_PEER_FAILED_VERIFICATION ||
		    cc == CURLE_SSL_CACERT_BADFILE ||
		    cc == CURLE_SSL_CERTPROBLEM)
			code = SK_EACCES;
		else if (cc == CURLE_URL_MALFORMAT ||
		    cc == CURLE_UNSUPPORTED_PROTOCOL)
			code = SK_EINVAL;
		fail_part(p, code, "%s: %s%s", s->display,
		    p->curlerr[0] ? p->curlerr : curl_easy_strerror(cc),
		    code == SK_EACCES ? " (the server's certificate was "
		    "refused; see --ca-file, CURL_CA_BUNDLE, SSL_CERT_FILE)" :
		    "");
	}
	if (!retry) {
		hand_back(p, P_FAILED);
		return;
	}

	/* An attempt that got bytes starts the count over: a flaky link
	 * that keeps making progress is not given up on, one that makes
	 * none is, after retry_time or the attempts. */
	if (p->have > p->attempt_have) {
		p->attempts = 1;
		p->t_first = sk__now_ns();
	}
	/* Exponential backoff with full jitter; Retry-After if longer. */
	pthread_mutex_lock(&eng.mu);
	left = rt = eng.cfg.retry_time;
	tries_left = eng.cfg.attempts - p->attempts;
	pthread_mutex_unlock(&eng.mu);
	elapsed = (double)(sk__now_ns() - p->t_first) / 1e9;
	left -= elapsed;
	delay = BACKOFF_BASE * (double)(1u << (p->attempts < 20 ?
	    p->attempts - 1 : 19));
	if (delay > BACKOFF_CAP)
		delay = BACKOFF_CAP;
	delay *= rand01();
	if (p->retry_after > delay)
		delay = p->retry_after;
	if (tries_left <= 0 || delay > left) {
		fail_part(p, SK_ENETWORK, "%s: gave up after %d attempts in "
		    "%.1f s: %s", s->display, p->attempts, elapsed, why);
		hand_back(p, P_FAILED);
		return;
	}
	if (!warned[cause]) {
		/* Said once a kind at the default verbosity, so a long
		 * silence has a reason; each retry is said with -v. */
		warned[cause] = 1;
		sk_log(SK_LOG_WARN, "retrying: %s (%s); a part that makes no "
		    "progress is given up after %.0f s (--retry-time)",
		    s->display, why, rt);
	}
	ADD(retries, 1);
	ADD(cause[cause], 1);
	if (p->have > 0 && !p->whole)
		ADD(resumes, 1);
	sk_log(SK_LOG_INFO, "%s: %s; retry %d at byte %" PRIu64 " in %.2f s",
	    s->display, why, p->attempts, p->whole ? 0 : p->off + p->have,
	    delay);
	unlink_running(p);
	curl_multi_remove_handle(eng.multi, p->easy);
	set_state(p, P_WAITING);
	p->due = sk__now_ns() + (uint64_t)(delay * 1e9);
	p->next = eng.waiting;
	eng.waiting = p;
}

static void
unlink_waiting(struct part *p)
{
	struct part **pp;

	for (pp = &eng.waiting; *pp != NULL; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			return;
		}
}

static void
unlink_running(struct part *p)
{
	struct part **pp;

	for (pp = &eng.running; *pp != NULL; pp = &(*pp)->rnext)
		if (*pp == p) {
			*pp = p->rnext;
			return;
		}
}

/* Cut the responses that went silent; finish() retries them. */
static void
check_stalls(uint64_t now)
{
	struct part *p, *next;
	uint64_t limit, slow;

	pthread_mutex_lock(&eng.mu);
	limit = (uint64_t)(eng.cfg.stall_timeout * 1e9);
	slow = (uint64_t)((eng.cfg.stall_timeout + eng.cfg.retry_time) * 1e9);
	pthread_mutex_unlock(&eng.mu);
	for (p = eng.running; p != NULL; p = next) {
		next = p->rnext;
		if (p->last_byte == 0 || __atomic_load_n(&p->cancel,
		    __ATOMIC_RELAXED))
			continue;
		if ((!p->whole && now - p->t_attempt > slow +
		    (uint64_t)((p->len + 65536) / MIN_RATE * 1e9)) ||
		    (p->whole && (p->req == NULL || p->req->body_len == 0) &&
		    now - p->t_attempt > slow &&
		    (double)(p->have - p->attempt_have) * 1e9 <
		    (double)MIN_RATE * (double)(now - p->t_attempt))) {
			/* Bytes trickle in, never a stall, never an end:
			 * nothing may wait forever (a whole resource of
			 * unknown size, a listing page, by its average). */
			unlink_running(p);
			fail_part(p, SK_ENETWORK, "%s: slower than %d bytes/s "
			    "for %.0f s (%" PRIu64 " of %" PRIu64 " bytes)",
			    p->s->display, MIN_RATE, (double)(now -
			    p->t_attempt) / 1e9, p->have, p->len);
			hand_back(p, P_FAILED);
			continue;
		}
		if (now - p->last_byte < limit)
			continue;
		p->stalled = 1;
		unlink_running(p);
		finish(p, CURLE_OPERATION_TIMEDOUT);
	}
}

static void *
engine_main(void *arg)
{
	struct part *adds, *cancels, *p, *next, **pp;
	struct sk__stream *s;
	struct CURLMsg *msg;
	uint64_t now, soonest;
	long timeout;
	int running, left, stop, idle;

	(void)arg;
	for (;;) {
		pthread_mutex_lock(&eng.mu);
		adds = eng.adds;
		cancels = eng.cancels;
		eng.adds = eng.cancels = NULL;
		eng.asleep = 0;
		stop = eng.stop;
		if (eng.cfg_changed)
			curl_multi_setopt(eng.multi,
			    CURLMOPT_MAX_TOTAL_CONNECTIONS,
			    (long)eng.cfg.connections);
		eng.cfg_changed = 0;
		pthread_mutex_unlock(&eng.mu);
		/* Queued in reverse: start the earliest part first. */
		for (p = NULL; adds != NULL; adds = next) {
			next = adds->next;
			adds->next = p;
			p = adds;
		}
		for (; p != NULL; p = next) {
			next = p->next;
			p->next = NULL;
			if (start_attempt(p) != 0)
				hand_back(p, P_FAILED);
		}
		for (p = cancels; p != NULL; p = next) {
			next = p->cnext;
			s = p->s;
			if (p->state == P_WAITING)
				unlink_waiting(p);
			else if (p->easy != NULL)
				curl_multi_remove_handle(eng.multi, p->easy);
			unlink_running(p);
			easy_put(p->easy);
			p->easy = NULL;
			sk__part_free(p);
			pthread_mutex_lock(&s->mu);
			s->inflight--;
			pthread_cond_broadcast(&s->cond);
			pthread_mutex_unlock(&s->mu);
		}
		if (stop)
			break;
		now = sk__now_ns();
		soonest = UINT64_MAX;
		for (pp = &eng.waiting; (p = *pp) != NULL; ) {
			if (p->due <= now) {
				*pp = p->next;
				p->next = NULL;
				if (start_attempt(p) != 0)
					hand_back(p, P_FAILED);
				continue;
			}
			if (p->due < soonest)
				soonest = p->due;
			pp = &p->next;
		}
		curl_multi_perform(eng.multi, &running);
		while ((msg = curl_multi_info_read(eng.multi, &left)) != NULL) {
			if (msg->msg != CURLMSG_DONE)
				continue;
			p = NULL;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE,
			    (char **)&p);
			if (p != NULL)
				finish(p, msg->data.result);
		}
		check_stalls(sk__now_ns());
		/* Wake at least 4 times a second to look for stalls. */
		timeout = 250;
		if (soonest != UINT64_MAX) {
			now = sk__now_ns();
			timeout = soonest <= now ? 0 :
			    (long)((soonest - now) / 1000000 + 1);
			if (timeout > 250)
				timeout = 250;
		}
		/* Asleep only with nothing queued: what comes after this
		 * wakes it (engine_queue); what came before is taken now. */
		pthread_mutex_lock(&eng.mu);
		idle = eng.asleep = eng.adds == NULL && eng.cancels == NULL;
		pthread_mutex_unlock(&eng.mu);
		if (idle)
			curl_multi_poll(eng.multi, NULL, 0, (int)timeout, NULL);
	}
	return NULL;
}
