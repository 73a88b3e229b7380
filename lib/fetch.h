/*
 * fetch.h - the one fetch engine under every remote source: a libcurl multi
 * handle driven by one thread, one connection pool, retries that resume at
 * the exact byte, and the counters. Internal to libshardkit.
 *
 * A stream is one object read front to back (a shard): its bytes arrive in
 * parts, fixed-size ranged GETs kept in flight ahead of the reader. Lock
 * order: a stream's mu before the engine's mu; the engine thread takes a
 * stream's mu only in its callbacks and never holds its own mu then.
 */
#ifndef SK_FETCH_H
#define SK_FETCH_H

#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "shardkit.h"

struct sk__stream;

/*
 * What a gs:// or s3:// backend adds to its requests. headers runs on the
 * engine thread at each attempt (a SigV4 signature holds the time of the
 * attempt; a token may have been refreshed since the last one): it appends
 * "Name: value" lines to *h and must not block on the network. explain
 * turns a final error response (status and the start of its body) into a
 * message a user can act on and returns its SK_E* code; version is the
 * pinned version the request asked for, or NULL. ctx is theirs.
 */
struct sk__auth {
	int (*headers)(void *ctx, const char *method, const char *url,
	    const char *payload_sha256, struct curl_slist **h, char *msg,
	    size_t n);
	int (*explain)(void *ctx, long status, const char *body, size_t len,
	    const char *display, const char *version, char *msg, size_t n);
	void *ctx;
	/* A store's own version header (GCS: x-goog-generation): when a
	 * response has it, it must match the version the stream was opened
	 * at (or the first response's). */
	const char *version_header;
	int no_if_match;	/* the store does not take If-Match */
	/* The store's own CA bundle (S3: AWS_CA_BUNDLE), used when the
	 * engine has no ca_file; NULL: the usual search. */
	const char *ca_file;
};

/*
 * Open a stream on an http(s) URL in two steps, so a reader can open its
 * next shard ahead of time: start asks for the first parts and returns at
 * once (hint, the size a manifest gives, or 0, sizes them and sends them
 * all before the first response); wait blocks for the first response,
 * which gives the size and the version (ETag, Last-Modified) every later
 * part must match, or the error. display is the URL as messages show it.
 */
int sk__stream_start(struct sk__stream **out, const char *url,
    const char *display, uint64_t hint, struct sk_error *err);
/* The same with auth on every request (NULL: none), and the version the
 * URL pins (GCS: its generation=), or NULL. */
int sk__stream_start_auth(struct sk__stream **out, const char *url,
    const char *display, uint64_t hint, const struct sk__auth *auth,
    const char *version, struct sk_error *err);
int sk__stream_wait(struct sk__stream *s, struct sk_error *err);
/* The object's size in bytes (after a wait). */
uint64_t sk__stream_size(const struct sk__stream *s);
/* Up to n bytes at off: bytes copied, 0 at the end, < 0 with err set.
 * Reading past the parts in flight moves the window there. */
int64_t sk__stream_pread(struct sk__stream *s, void *buf, size_t n,
    uint64_t off, struct sk_error *err);
/* The same without the copy: *ptr points at up to n bytes at off, valid
 * until the next call on s. */
int64_t sk__stream_peek(struct sk__stream *s, const void **ptr, size_t n,
    uint64_t off, struct sk_error *err);
/* Cancel what is in flight and free s once the engine let go of it. */
void sk__stream_close(struct sk__stream *s);

/*
 * An object at the size and version a listing gave, for a cache: nothing
 * is sent until a range is asked for, and there is no read-ahead window.
 * etag (S3's, quotes and all) pins it by If-Match, else lastmod (an
 * IMF-fixdate, what nginx's listing time gives) by If-Unmodified-Since and
 * the responses' Last-Modified; with neither, the first response's ETag
 * (or Last-Modified) does, and every later one must match it. version is
 * the store's own (GCS: the generation=, which url must name too) or NULL.
 * A response of another total size is SK_ECHANGED. Close it with
 * sk__stream_close once its ranges are freed.
 */
int sk__stream_pinned(struct sk__stream **out, const char *url,
    const char *display, uint64_t size, const char *etag,
    const char *lastmod, const struct sk__auth *auth, const char *version,
    struct sk_error *err);
/* What pins a pinned stream ("etag:..." or "last-modified:..."): 0, or
 * -1 while its first response has yet to name it. */
int sk__stream_validator(struct sk__stream *s, char *buf, size_t n);

/*
 * A range of a pinned object fetched on its own, into a buffer of its own,
 * with the retries, resumes and checks of every part. start returns at
 * once; wait blocks until more than at bytes of it are in, it ended, or
 * the deadline (CLOCK_MONOTONIC ns; 0: none) passed: the bytes in so far
 * (> at) with *ptr at the range's first byte (bytes below that count never
 * change until free), 0 when it ended with no byte past at, or < 0 with
 * err set (the deadline: SK_ENETWORK, and the range goes on). state: 1
 * done, 0 going, -1 failed. free cancels what is in flight.
 */
struct sk__range;
int sk__range_start(struct sk__stream *s, uint64_t off, uint64_t len,
    struct sk__range **out, struct sk_error *err);
int64_t sk__range_wait(struct sk__range *r, uint64_t at, uint64_t deadline,
    const void **ptr, struct sk_error *err);
int sk__range_state(struct sk__range *r);
void sk__range_free(struct sk__range *r);

/* Content-Range "bytes A-B/T" (RFC 9110 14.4): 0 and A <= B, T (or
 * UINT64_MAX for "*"); -1 when malformed. */
int sk__parse_crange(const char *v, uint64_t *a, uint64_t *b, uint64_t *t);
/* The files and folders of an nginx JSON autoindex, appended to out in
 * its order: 0, SK_EFORMAT (not a listing; a file without a size in
 * bytes), SK_ENOMEM. display names the folder in messages. */
struct sk__entries;
int sk__http_listing(const char *text, size_t len, const char *display,
    struct sk__entries *out, struct sk_error *err);

/* GET a whole resource of at most max bytes (a manifest, a listing) into
 * *out (malloc'd, NUL-terminated), retried like every transfer. */
int sk__fetch_get(const char *url, size_t max, char **out, size_t *len,
    struct sk_error *err);

/*
 * One request of any method through the engine: a listing page, an
 * object's metadata, an upload, a token. The engine retries connection
 * errors, stalls, 408, 429 and 5xx (sending the body again); any other
 * final status comes back in status with its body, for the caller to
 * judge.
 */
struct sk__req {
	/* in */
	const char *method;	/* "GET", "HEAD", "PUT", "POST", "DELETE" */
	const char *url;
	const char *display;	/* for messages; NULL: the URL redacted */
	const struct sk__auth *auth;	/* or NULL */
	const char *const *headers;	/* more "Name: value", NULL-ended */
	const void *body;	/* sent as is, again on a retry; not copied */
	size_t body_len;
	size_t max;		/* response body bytes kept at most (more is
				 * SK_ETOOBIG for a 2xx, cut otherwise) */
	int no_retry;		/* a transport error or 5xx comes back as
				 * SK_ENETWORK at once (a resumable upload
				 * asks where it stands instead) */
	/* out */
	long status;
	char *resp;		/* malloc'd, NUL-terminated */
	size_t resp_len;
	char *resp_headers;	/* the final response's header lines */
	void *priv;
};

/* Run r to a final status: 0 with r->status set, or < 0 with err set (the
 * retries ran out, a refused certificate). Free with sk__req_free. */
int sk__fetch_request(struct sk__req *r, struct sk_error *err);
/* The same in two steps, so that several run at once. */
int sk__req_start(struct sk__req *r, struct sk_error *err);
int sk__req_wait(struct sk__req *r, struct sk_error *err);
/* A response header's value (case-insensitive name) into buf, or NULL. */
const char *sk__req_header(const struct sk__req *r, const char *name,
    char *buf, size_t n);
void sk__req_free(struct sk__req *r);

#endif /* SK_FETCH_H */
