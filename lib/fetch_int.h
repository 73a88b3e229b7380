/*
 * fetch_int.h - what the files of the fetch engine share and the rest of
 * the library does not see (it sees fetch.h): the part, one transfer into
 * a buffer of its own; the stream, the object its parts fill; and the
 * calls that pass parts between the readers (fetch_stream.c, fetch_req.c)
 * and the engine thread (fetch.c).
 *
 * Who may touch a field is said beside it. A part is the engine's while
 * p->engine is set, and the reader's again once the engine hands it back
 * (fetch.c); a stream's mu guards what both sides read of it.
 */
#ifndef SK_FETCH_INT_H
#define SK_FETCH_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "shardkit.h"
#include "fetch.h"

#define MAX_PARTS	64

enum { P_QUEUED = 0, P_RUNNING, P_WAITING, P_DONE, P_FAILED };

struct part {
	struct sk__stream *s;
	CURL *easy;
	struct curl_slist *hdrs;
	struct part *next;	/* in the adds or the waiting list */
	struct part *cnext;	/* in the cancels list: a part may be queued
				 * there while still in adds */
	struct part *rnext;	/* in the running list, engine thread only */
	uint64_t off, len;	/* the object's bytes [off, off + len) */
	uint8_t *buf;
	size_t cap;		/* bytes buf holds */
	uint64_t have;		/* bytes in buf */
	int state;
	int engine;		/* owned by the engine */
	int cancel;		/* the reader let go of it (set under s->mu,
				 * read anywhere with atomics) */
	int whole;		/* a plain GET of a resource of unknown size */
	int range;		/* a range (sk__range_start): its readers say
				 * what they wait for */
	int waiters;		/* readers blocked on it, under s->mu */
	uint64_t wake_at;	/* wake them once more than this is in */
	int read_soon;		/* a reader waited at the last write: the
				 * engine's own copy of waiters > 0 */
	struct sk__req *req;	/* a request of any method, judged by its
				 * caller (sk__fetch_request) */
	char body_sha[65];	/* of req->body, for a signature */
	char *rhdrs;		/* req: the response's header lines */
	size_t rhlen;
	char ebody[4096];	/* the start of an error response's body */
	size_t elen;
	/* the current attempt, engine thread only */
	int attempts;
	uint64_t t_first, due;	/* ns: first attempt, next retry */
	uint64_t last_byte;	/* ns: the response's latest byte, 0 before
				 * its first */
	uint64_t t_attempt;	/* ns: this attempt's start */
	int stalled;		/* the engine cut it for want of bytes */
	long status;		/* of the current response */
	int checked;		/* the response's head was judged */
	uint64_t skip;		/* a whole GET of a norange stream sent
				 * again: its first bytes, which the part
				 * has and a reader may be reading, are
				 * dropped, not written over */
	uint64_t again;		/* its leading bytes the stream had before
				 * (a read went back): fetched twice */
	int complete;		/* all len bytes came, the rest is dropped */
	uint64_t error_body;	/* bytes of a non-2xx body seen */
	uint64_t attempt_have;	/* have when this attempt started */
	double retry_after;	/* seconds, from the response; < 0 none */
	char etag[256], lastmod[64], crange[96];
	char version[64];	/* auth.version_header's value */
	int64_t clength;	/* Content-Length, -1 none */
	/* the outcome when FAILED */
	int code;
	char err[SK_ERRMSG_MAX];
	char curlerr[CURL_ERROR_SIZE];
};

struct sk__stream {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	char *url;		/* for curl */
	char *display;		/* for messages */
	struct sk__auth auth;	/* headers and error messages of gs:// and
				 * s3:// (auth.headers NULL: none) */
	int meta;		/* size and version known (1), or a part
				 * failed before they were (-1: err) */
	int ready;		/* the window was set to the size */
	int err_code;
	char err[SK_ERRMSG_MAX];
	uint64_t size;
	char etag[256], lastmod[64];
	char version[64];	/* see sk__auth.version_header */
	struct part *win[MAX_PARTS];	/* in flight or buffered, in order */
	int nwin;
	uint64_t next_off;	/* where the next part starts */
	uint64_t high;		/* bytes [0, high) have arrived once */
	int inflight;		/* parts the engine owns */
	int parts;		/* in flight at most */
	uint64_t part_size;
	size_t whole_max;
	int learn;		/* opened pinned with no ETag: the first
				 * response's ETag and Last-Modified become
				 * the version */
	const int *cancel;	/* the opener's sk__cancel_flag, or NULL */
	int norange;		/* the server ignores Range: the first part
				 * became one whole GET of the object */
};

/* SigV4: the SHA-256 of an empty payload. */
#define EMPTY_SHA256 \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* ------------------------------------------------------------------------ */
/* the engine (fetch.c)                                                     */

/* Start the engine once per process: 0, or < 0 with err set (libcurl
 * would not start; this process is a fork() of the one that started it). */
int sk__engine_get(struct sk_error *err);
/* The window a new stream gets: parts in flight at most, and their size. */
void sk__engine_window(int *parts, uint64_t *part_size);
/* Time a reader was blocked on the network (sk_fetch_stats' wait). */
void sk__count_wait(uint64_t ns);

/* A part for the object's bytes [off, off + len), with a buffer of cap
 * bytes (and one more for a NUL), or NULL when out of memory. */
struct part *sk__part_new(struct sk__stream *s, uint64_t off, uint64_t len,
    size_t cap);
/* Give p to the engine. Caller holds s->mu. */
void sk__part_submit(struct sk__stream *s, struct part *p);
/* Let go of p: the engine frees it if it still has it. Caller holds
 * s->mu. */
void sk__part_drop(struct sk__stream *s, struct part *p);
/* Free a part the engine does not hold. */
void sk__part_free(struct part *p);

/* ------------------------------------------------------------------------ */
/* streams (fetch_stream.c)                                                 */

/* A stream on url with the engine's window, shown as display (NULL: url
 * redacted); NULL when out of memory. Call after sk__engine_get. */
struct sk__stream *sk__stream_new(const char *url, const char *display);
/* Free s, once the engine holds none of its parts. */
void sk__stream_free(struct sk__stream *s);
/* Wait on s->cond (caller holds s->mu), counted as time waiting on the
 * network: 1 when the opener's cancel flag turned, else 0. */
int sk__wait_net(struct sk__stream *s);

#endif /* SK_FETCH_INT_H */
