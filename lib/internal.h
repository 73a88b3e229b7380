/*
 * internal.h - what the files of libshardkit share and users do not see:
 * the common handle header and the source backend interface.
 */
#ifndef SK_INTERNAL_H
#define SK_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "shardkit.h"

/*
 * Every handle starts with this header, so sk_errmsg() can read any of
 * them. A handle that failed fatally keeps state SK__STATE_FATAL and
 * refuses further calls (libarchive's ARCHIVE_STATE_FATAL).
 */
enum { SK__STATE_OK = 0, SK__STATE_FATAL = 1 };

struct sk__handle {
	uint32_t magic;
	int state;
	struct sk_error err;
};

#define SK__MAGIC_SOURCE	0x534b5352u	/* "SKSR" */
#define SK__MAGIC_TAR_WRITER	0x534b5457u	/* "SKTW" */
#define SK__MAGIC_TAR_READER	0x534b5452u	/* "SKTR" */
#define SK__MAGIC_SAMPLE_READER	0x534b5341u	/* "SKSA" */

void sk__handle_init(struct sk__handle *h, uint32_t magic);
/* Record a failure on h; fatal ones make h refuse further calls. */
int sk__fail(struct sk__handle *h, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int sk__fatal(struct sk__handle *h, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The entry check of every public call: right magic, not failed. */
int sk__check(struct sk__handle *h, uint32_t magic, const char *fn);

int sk__verror_set(struct sk_error *err, int code, const char *fmt,
    va_list ap);

struct sk__entries;

/*
 * A source backend. Each scheme provides one of these; sk_source_open picks
 * it by the URL's scheme. read is sequential from pos; pread must not move
 * pos. Each returns bytes or a negative SK_E* after calling sk__fail.
 */
struct sk__source_ops {
	const char *name;
	/* NULL for a backend with open_ahead: opening is then open_ahead
	 * and ready. */
	int (*open)(sk_source *s, const struct sk_url *u);
	/* Optional: start opening (the first bytes asked for, the size hint
	 * of a manifest or 0) and return; ready waits for the open. */
	int (*open_ahead)(sk_source *s, const struct sk_url *u, uint64_t hint);
	int (*ready)(sk_source *s);
	int64_t (*pread)(sk_source *s, void *buf, size_t n, uint64_t off);
	/* Optional: pread without the copy; *ptr stays valid until the
	 * next call on the source. */
	int64_t (*peek)(sk_source *s, const void **ptr, size_t n,
	    uint64_t off);
	int (*size)(sk_source *s, uint64_t *size);
	/* Optional: open at the size and version a listing gave (GCS
	 * generation, S3 ETag, http "mtime:SECONDS" from nginx's listing, or
	 * "" to take the first response's), for a cache: nothing is sent
	 * until a range of the object is asked for (sk__source_stream). */
	int (*open_pinned)(sk_source *s, const struct sk_url *u,
	    uint64_t size, const char *version);
	void (*close)(sk_source *s);
	/* Optional: append the entries right under the folder url (its
	 * '/' checked), in any order (sk__source_list_entries sorts). The
	 * file backend has none: sk__file_list lists a local folder. */
	int (*list_entries)(const struct sk_url *u, const char *url,
	    struct sk__entries *out, struct sk_error *err);
	/* Optional: store size bytes as the object url (a bucket). */
	int (*put)(const struct sk_url *u, const char *url, const void *data,
	    uint64_t size, struct sk_error *err);
	int (*del)(const struct sk_url *u, const char *url,
	    struct sk_error *err);
	/* Optional: whether the object url holds exactly these size bytes
	 * (by its size and MD5, as the store keeps them), into *same; 0,
	 * or < 0 with err set. A missing object is 0 with *same 0. md5 is
	 * the bytes' hex MD5 when known; data may then be NULL, and an
	 * object whose checksum is not a plain MD5 (an S3 multipart ETag)
	 * reads as different. */
	int (*same)(const struct sk_url *u, const char *url, const void *data,
	    uint64_t size, const char *md5, int *same, struct sk_error *err);
};

struct sk_source {
	struct sk__handle h;
	const struct sk__source_ops *ops;
	char *url;
	uint64_t pos;		/* the sequential read position */
	void *impl;		/* the backend's state */
	void *md5;		/* sk_source_md5_start: an EVP_MD_CTX over
				 * bytes [0, hashed), in order */
	uint64_t hashed;
	int md5_rc;		/* a read it needed failed */
};

/*
 * Open a source ahead of its use: a remote one asks for its first parts
 * and returns at once (hint: the size a manifest gives, or 0). Like
 * sk_source_open, *out holds a handle even on failure. sk__source_ready
 * waits until it is open, and fails the handle as sk_source_open would.
 */
int sk__source_open_ahead(sk_source **out, const char *url, uint64_t hint);
int sk__source_ready(sk_source *s);
/* The rest of the current member's data read through and dropped, with
 * no copy: its length, or < 0 with the damage. */
int64_t sk__tar_reader_scan(sk_tar_reader *r);
/* A sequential read that hands out the source's own buffer when it has
 * one (valid until the next call on s), else copies into buf. */
int64_t sk__source_read_ptr(sk_source *s, const void **ptr, void *buf,
    size_t n);

/*
 * Open a remote object at the size and version a listing gave (see
 * open_pinned; version "" for http, whose first response then pins it).
 * Like sk_source_open, *out holds a handle even on failure. Its ranges
 * come from the fetch stream sk__source_stream gives (fetch.h), which
 * lives as long as the source; free every range before closing it.
 */
int sk__source_open_pinned(sk_source **out, const char *url, uint64_t size,
    const char *version);
struct sk__stream *sk__source_stream(sk_source *s);

extern const struct sk__source_ops sk__source_file_ops;
/* A local folder's regular files (not its subfolders, nor names that
 * begin with a dot) as paths under u->path, appended to out, sorted. */
int sk__file_list(const struct sk_url *u, const char *url,
    struct sk_strlist *out, struct sk_error *err);
/* A local folder's folders and regular files (see sk__folder_entries),
 * url naming it in messages. */
int sk__file_list_entries(const char *dir, const char *url,
    struct sk__entries *out, struct sk_error *err);
extern const struct sk__source_ops sk__source_http_ops;
extern const struct sk__source_ops sk__source_gs_ops;

/*
 * A thread that reads remote sources for an owner that may stop it (the
 * loader's I/O threads) points this at the owner's stop flag before it
 * opens them: a read that waits on the network then ends within 100 ms of
 * the flag turning non-zero, with SK_ECANCELED, instead of waiting for
 * the stall timeout.
 */
extern __thread const int *sk__cancel_flag;
extern const struct sk__source_ops sk__source_s3_ops;

/* The ops every remote backend shares: s->impl is a fetch stream
 * (source_http.c); start opens it on url for source s, messages naming
 * s->url. */
struct sk__auth;
int sk__remote_start(sk_source *s, const char *url, uint64_t hint,
    const struct sk__auth *auth, const char *version);
/* The same for open_pinned: etag pins by If-Match, else lastmod by
 * Last-Modified (both NULL: the first response's), version is the
 * store's own (GCS generation) or NULL. */
int sk__remote_pinned(sk_source *s, const char *url, uint64_t size,
    const char *etag, const char *lastmod, const struct sk__auth *auth,
    const char *version);
int sk__remote_ready(sk_source *s);
int64_t sk__remote_pread(sk_source *s, void *buf, size_t n, uint64_t off);
int64_t sk__remote_peek(sk_source *s, const void **ptr, size_t n,
    uint64_t off);
int sk__remote_size(sk_source *s, uint64_t *size);
void sk__remote_close(sk_source *s);

/* A whole object of at most max bytes (a manifest) from any remote
 * scheme, NUL-terminated, malloc'd. */
int sk__read_whole(const char *url, size_t max, char **out, size_t *len,
    struct sk_error *err);

/* The first 16 bytes of an MD5 digest as 32 hex digits and a NUL. */
void sk__md5_hex(const unsigned char *digest, char out[33]);
/* The hex MD5 of size bytes at data. */
void sk__md5_of(const void *data, uint64_t size, char out[33]);

/* RFC 3986 unreserved characters pass (and '/' when keep_slash); the
 * rest is %XX. malloc'd, NULL when out of memory. */
char *sk__uri_escape(const char *name, int keep_slash);

/* ------------------------------------------------------------------------ */
/* folder listings with metadata (listing.c)                                */

/* An object or a folder right under a listed folder. */
struct sk__entry {
	char *name;		/* one path segment: never "", ".", "..", and
				 * no '/' or NUL in it */
	int dir;		/* a folder: a common prefix (S3
				 * CommonPrefixes, GCS "prefixes") or nginx's
				 * "directory" */
	uint64_t size;		/* bytes; 0 for a folder */
	int64_t mtime;		/* seconds since the epoch, 0 when not given */
	char version[128];	/* what pins this version of the object for
				 * reads: the GCS "generation" (decimal
				 * digits), the S3 ETag as sent, quotes
				 * included; "" for http (nginx lists none)
				 * and for folders */
};

struct sk__entries {
	struct sk__entry *v;
	size_t n, cap;
};

/* The objects and folders right under the folder url (http(s)://, gs://
 * or s3://, ending in '/'), over every page, sorted by name (bytewise,
 * strcmp), each name once for each kind (an S3 key "a" and a prefix "a/"
 * give two entries, the folder first). 0, or < 0 with err set naming the
 * URL. What was added before a failure stays in out. */
int sk__source_list_entries(const char *url, struct sk__entries *out,
    struct sk_error *err);
void sk__entries_free(struct sk__entries *e);

/* A listing's JSON built apart from the heap (listing.c): install once,
 * at start, in a process that keeps listings for long (shardfs); a
 * parse between begin and end must let go of every value it made. */
void sk__json_scratch_install(void);
void sk__json_scratch_begin(void);
void sk__json_scratch_end(void);

/* What the parsers of listings share. A name of len bytes is one path
 * segment: not empty, "." or "..", no '/' or NUL. */
int sk__entry_name_ok(const char *name, size_t len);
/* The name of a key right under the folder prefix: past prefix, less the
 * '/' that ends a common prefix (dir), into key; NULL when that is not
 * one segment (another folder's key, a deeper one, the folder's own
 * marker "prefix/"), else *len is its length. */
const char *sk__entry_under(const char *key, size_t keylen,
    const char *prefix, int dir, size_t *len);
/* A version a listing may give: at most 127 bytes, printable ASCII with
 * no blank (it goes into a request as it is). */
int sk__entry_version_ok(const char *v);
/* Decimal digits only (no sign, no blank, not empty) that fit: 0, or -1. */
int sk__parse_u64(const char *s, uint64_t *v);
/* Append an entry (a copy of name); a folder keeps no size or version.
 * 0, SK_ENOMEM, or SK_EINVAL for a name or version that is not one. */
int sk__entries_add(struct sk__entries *e, const char *name, size_t len,
    int dir, uint64_t size, int64_t mtime, const char *version);
/* Sort e->v[first..] by name, the folder before the object of the same
 * name, and keep one of each name and kind. */
void sk__entries_sort(struct sk__entries *e, size_t first);
/* Seconds since the epoch of an RFC 3339 time ("2009-10-12T17:50:30.000Z",
 * S3 and GCS) or an IMF-fixdate ("Wed, 25 Nov 2026 16:30:00 GMT", nginx);
 * 0 when s is not one. */
int64_t sk__time_rfc3339(const char *s);
int64_t sk__time_http(const char *s);

/* CLOCK_MONOTONIC in nanoseconds (the fetch engine, the listings, the
 * loader's stage timers) */
static inline uint64_t
sk__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------------ */
/* text from outside, shown (escape.c)                                      */

/* Where url's password is (url.c; the userinfo after its first ':', up
 * to the last '@' before the path, as sk_url_parse splits it): 1 with its
 * offset and length (which may be 0), or 0 when there is none. */
int sk__url_password(const char *url, size_t *off, size_t *len);
/* s shown whole on f, as sk_escape() shows it (backslashes as they are) */
void sk__fputs_escaped(const char *s, FILE *f);

/* Names per page of a bucket listing: SK_LIST_PAGE, else 1000. */
int sk__list_page(void);
/* A listing's n names (or entries: objects and folders alike) after its
 * page 'page' (1-based), which found n - before of them, start being the
 * count before the first page: 0, or an error when the page holds more
 * than were asked for or the folder more than a million (a server that
 * ignores its page size, or lists without end). */
int sk__list_check(const char *url, int page, size_t n, size_t before,
    size_t start, struct sk_error *err);

/*
 * A paged listing against a server that pages without end: every page
 * token it gave (their 64-bit hashes), the pages in a row that added no
 * name, and when the first page came. sk__list_guard_page after each page
 * (next the page's token, NULL on the last; added the names it added):
 * 0 to go on, or an error naming url when a token comes again (A, B, A
 * is refused as well as A, A), when SK_LIST_EMPTY_MAX pages in a row add
 * nothing, or when the listing has run SK_LIST_SECONDS_MAX seconds.
 */
#define SK_LIST_EMPTY_MAX	32
#define SK_LIST_SECONDS_MAX	600
struct sk__list_guard {
	uint64_t *seen;		/* open addressing; 0 marks a free slot */
	size_t n, cap;
	int empty;		/* pages in a row with no new name */
	double t0;		/* monotonic seconds at the first page */
};
void sk__list_guard_init(struct sk__list_guard *g);
int sk__list_guard_page(struct sk__list_guard *g, const char *url,
    const char *next, size_t added, struct sk_error *err);
void sk__list_guard_free(struct sk__list_guard *g);

/* ------------------------------------------------------------------------ */
/* the keys of a class-per-folder tree (keys.c)                             */

/* Room for a key, NUL included: longer ones are cut (shardtool pack). */
#define SK__KEY_MAX 256

/* The key of file name in a class folder: prefix ("CLASS/") and the name
 * up to its last dot, with the stem's dots turned into '_' (WebDataset
 * would end the key at the first one), into dst of cap bytes. */
void sk__stem_key(char *dst, size_t cap, const char *prefix,
    const char *name);
/* Make keys[0..n) (one class folder's, in name order, malloc'd) unique:
 * a later duplicate of KEY becomes KEY_2, KEY_3 ..., and renamed (may be
 * NULL) hears of each. 0 or SK_ENOMEM. */
int sk__dedupe_keys(char **keys, size_t n, void (*renamed)(size_t i,
    const char *taken, const char *key, void *arg), void *arg);

/* ------------------------------------------------------------------------ */
/* any folder, local or remote (source.c)                                   */

/* The entries right under the folder url: a local path (a trailing '/'
 * optional) or file:// URL, whose folders and regular files (after links;
 * anything else is left out with a warning, names that begin with a dot
 * too) are listed, sizes included; or a remote folder as
 * sk__source_list_entries lists it. Sorted by name. */
int sk__folder_entries(const char *url, struct sk__entries *out,
    struct sk_error *err);
/* The URL of entry name right under the folder url (a folder's ends in
 * '/'), as sk_source_list makes it; malloc'd, NULL when out of memory. */
char *sk__folder_child(const char *url, const char *name, int dir);
/* Whether a name or URL is a tar shard's (.tar, .tar.gz, .tgz, .tar.zst). */
int sk__is_tar_name(const char *url);
/* Whether url names a local folder (a path or file:// URL). */
int sk__is_local_dir(const char *url);

char *sk__strdup(const char *s);
char *sk__asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* SK_INTERNAL_H */
