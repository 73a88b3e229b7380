/*
 * shardkit.h - the public interface of libshardkit: sources, tar shards,
 * manifests and the image codec that the tools and the loader share.
 *
 * To write a dataset as shards:
 *   1) sk_tar_writer_open() on the final shard path (bytes go to a
 *      temporary file beside it, see sk_atomic_open());
 *   2) sk_tar_writer_add() each member of each sample, members of a sample
 *      adjacent, named KEY.EXT;
 *   3) sk_tar_writer_close() renames it to PATH and reports the size
 *      and MD5 for the manifest; sk_tar_writer_abort() removes it;
 *   4) sk_manifest_write() the wids shard index NAME.json.
 *
 * To read a shard:
 *   1) sk_source_open() on a URL (PATH, file://PATH, http(s)://...; remote
 *      transfers follow sk_fetch_configure());
 *   2) sk_tar_reader_open() over the source;
 *   3) sk_tar_reader_next() until it returns 0, sk_tar_reader_read() the
 *      data of each regular member it reports;
 *   4) sk_tar_reader_close(), which also closes the source.
 *
 * Every call returns 0 (or a count) on success and a negative SK_E* code on
 * failure. Handles keep the message of their last failure: sk_errmsg().
 * Calls without a handle take a struct sk_error * (may be NULL).
 */
#ifndef SHARDKIT_H
#define SHARDKIT_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SK_VERSION_STRING "0.1.0"

/* ------------------------------------------------------------------------ */
/* status codes and errors                                                  */

enum {
	SK_OK = 0,
	SK_EINVAL = -1,		/* bad argument, bad URL, bad pattern */
	SK_ENOMEM = -2,
	SK_EIO = -3,		/* a read or write failed */
	SK_ENOENT = -4,		/* no such file or object */
	SK_EFORMAT = -5,	/* corrupt or truncated data */
	SK_EDECODE = -6,	/* an image could not be decoded */
	SK_ETOOBIG = -7,	/* over a limit (pixels, expansion count) */
	SK_EUNSUPPORTED = -8,	/* a scheme or format not handled */
	SK_EFATAL = -9,		/* the handle failed before; it is closed to calls */
	SK_EACCES = -10,	/* permission denied */
	SK_ENOSPC = -11,	/* no space left on the device */
	SK_ENETWORK = -12,	/* the network failed past every retry */
	SK_ECHANGED = -13,	/* a remote object changed while being read */
	SK_ETIMEDOUT = -14,	/* a wait with a time limit ran out (not a
				 * failure: the handle goes on) */
	SK_ECANCELED = -15	/* the reader's owner stopped it */
};

#define SK_ERRMSG_MAX 512

struct sk_error {
	int code;
	char msg[SK_ERRMSG_MAX];
};

/* A short fixed description of a code ("corrupt or truncated data"). */
const char *sk_strerror(int code);
/* The message of the last failure on any shardkit handle, "" if none. */
const char *sk_errmsg(const void *handle);
/* Fill err (if not NULL) and return code. */
int sk_error_set(struct sk_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The SK_E* code for an errno value. */
int sk_errno_code(int errnum);

/* ------------------------------------------------------------------------ */
/* logging                                                                  */

enum { SK_LOG_ERROR = 0, SK_LOG_WARN = 1, SK_LOG_INFO = 2, SK_LOG_DEBUG = 3 };

/* Messages at or below level go to stderr as "shardkit: level: text". The
 * level starts from SHARDKIT_LOG (error|warn|info|debug), default warn. */
void sk_log_set_level(int level);
int sk_log_get_level(void);
void sk_log(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------------ */
/* string lists, brace expansion and URLs                                   */

struct sk_strlist {
	char **v;
	size_t n, cap;
};

int sk_strlist_push(struct sk_strlist *l, const char *s);
void sk_strlist_free(struct sk_strlist *l);

/* The most names one pattern may expand to. */
#define SK_EXPAND_MAX 10000000

/*
 * Expand a shard pattern into URLs, appending to out. "::" separates
 * patterns; "{a,b}" is a list, "{000..146}" a zero-padded numeric range
 * (a leading zero on either bound pads to the wider one, as bash does);
 * braces nest.
 */
int sk_url_expand(const char *pattern, struct sk_strlist *out,
    struct sk_error *err);

enum sk_scheme {
	SK_SCHEME_FILE = 0,
	SK_SCHEME_HTTP,
	SK_SCHEME_HTTPS,
	SK_SCHEME_GS,
	SK_SCHEME_S3
};

struct sk_url {
	enum sk_scheme scheme;
	char *host;	/* http(s): host; gs, s3: bucket; file: NULL */
	int port;	/* http(s): explicit port or the scheme's default */
	char *path;	/* file: the path; http(s): "/path?query"; gs, s3: key */
};

int sk_url_parse(const char *text, struct sk_url *url, struct sk_error *err);
/* The URL as messages and --json may show it: a password and
 * signature-like query values (X-Amz-Signature, sig, token, ...) become
 * "***". malloc'd; NULL when out of memory. */
char *sk_url_redact(const char *url);
void sk_url_free(struct sk_url *url);
const char *sk_scheme_name(enum sk_scheme scheme);

/*
 * Text from outside (a bucket key, a file or member name, a URL, a
 * server's message) as a terminal may show it: s[0..len) into dst[0..n),
 * valid UTF-8 as it is, while C0 controls and DEL (\n \r \t \xHH), C1
 * and the bidi controls (\uHHHH) and bytes of no valid UTF-8 sequence
 * (\xHH) are escaped, so that none can drive a terminal; cut at a
 * character with "..." when it does not fit. A backslash stays itself,
 * so escaping twice changes nothing more, unless flags has
 * SK_ESCAPE_BACKSLASH (then \\, and the text reads back unambiguously).
 * Returns 1 when s needed no escape, else 0. Every message libshardkit
 * writes (sk_errmsg, sk_log) is escaped this way.
 */
#define SK_ESCAPE_BACKSLASH	1
int sk_escape(char *dst, size_t n, const char *s, size_t len, int flags);

/*
 * WebDataset: the key is the member path up to the first dot of its
 * basename; the extension is everything after that dot. Returns the key
 * length; *ext points into name ("" when there is no dot).
 */
size_t sk_key_split(const char *name, const char **ext);

/* ------------------------------------------------------------------------ */
/* sources                                                                  */

typedef struct sk_source sk_source;

/*
 * Open a URL for reading. On failure *out still holds a handle whose
 * sk_errmsg() says why (NULL only when memory ran out); close it.
 */
int sk_source_open(sk_source **out, const char *url);
/* Sequential read from the current position: bytes read, 0 at the end. */
int64_t sk_source_read(sk_source *s, void *buf, size_t n);
/* Ranged read; does not move the sequential position. */
int64_t sk_source_pread(sk_source *s, void *buf, size_t n, uint64_t offset);
int sk_source_seek(sk_source *s, uint64_t offset);
int sk_source_size(sk_source *s, uint64_t *size);
const char *sk_source_url(const sk_source *s);
void sk_source_close(sk_source *s);

/* Size and hex MD5 of all the bytes at a URL (a shard, as a manifest
 * records it). */
int sk_source_md5(const char *url, uint64_t *size, char md5[33],
    struct sk_error *err);
/* The same while the source is read for something else, so its bytes
 * come once: start before the first read; skips read through; end (before
 * the source is closed, even by a reader that owns it) reads what no one
 * read and gives the size and MD5 of all the bytes, or < 0 when a read
 * failed (the source's message says why). */
int sk_source_md5_start(sk_source *s);
int sk_source_md5_end(sk_source *s, uint64_t *size, char md5[33]);

/* The objects under a directory or prefix URL, sorted, appended to out as
 * full URLs. http(s): the folder's nginx JSON autoindex. */
int sk_source_list(const char *url, struct sk_strlist *out,
    struct sk_error *err);
/* The same, keeping tar shards (.tar, .tar.gz, .tgz, .tar.zst); none is
 * an error naming the folder. */
int sk_source_list_shards(const char *url, struct sk_strlist *out,
    struct sk_error *err);
/* The same, also appending to manifests the folder's wids manifests
 * (names ending in .json), which reading the folder as shards leaves
 * unread; none with no tar shard is an error naming them. */
int sk_source_list_shards_seen(const char *url, struct sk_strlist *out,
    struct sk_strlist *manifests, struct sk_error *err);
/* One line for the user when a folder read as its ntars tar shards also
 * holds manifests: "URL: DONE the N .tar files of the folder; it also
 * holds in.json (give it to VERB by the manifest)" (done "read", verb
 * "read"; a tool's own words for what it did). malloc'd; NULL when
 * manifests is empty (or memory ran out). */
char *sk_source_folder_note(const char *url, size_t ntars,
    const struct sk_strlist *manifests, const char *done, const char *verb);

/*
 * Store bytes as the object at url (gs:// or s3://): a simple upload for a
 * small object; a resumable upload (gs://) or a multipart upload (s3://)
 * for a large one, which survives a broken connection. The object appears
 * whole or not at all. sk_object_put_file stores a local regular file.
 */
int sk_object_put(const char *url, const void *data, size_t len,
    struct sk_error *err);
int sk_object_put_file(const char *url, const char *path,
    struct sk_error *err);
/* The same, unless the object already holds the file's bytes, as its
 * size and MD5 say (S3: the ETag, a multipart one computed at this
 * process's part size; GCS: md5Hash): then nothing is sent and *skipped
 * is 1. As aws s3 sync does, so a stopped pack run again sends only what
 * is missing or different. */
int sk_object_sync_file(const char *url, const char *path, int *skipped,
    struct sk_error *err);
/* Whether the object at url (gs://, s3://, or a local file) holds size
 * bytes whose hex MD5 is md5, as a manifest records them, without the
 * bytes at hand: into *same, 0 when it is missing or differs. An S3
 * object uploaded in parts has an ETag that is not its MD5: it reads as
 * different, and only sk_object_sync_file, which has the bytes, can
 * tell. 0, or < 0 with err set when the store would not say. */
int sk_object_same(const char *url, uint64_t size, const char *md5,
    int *same, struct sk_error *err);
/* Delete the object at url (gs:// or s3://); none there is SK_ENOENT. */
int sk_object_delete(const char *url, struct sk_error *err);

/* ------------------------------------------------------------------------ */
/* remote I/O: the fetch engine under http(s):// sources (lib/fetch.c)      */

/*
 * One engine serves the whole process: one connection pool, one thread
 * driving every transfer. A shard is read as a stream of ranged GETs of
 * part_size bytes, parts_per_stream of them in flight ahead of the reader;
 * a broken transfer resumes at its exact byte offset after a backoff with
 * full jitter, and only if the object is still the same version.
 */
struct sk_fetch_config {
	int connections;	/* connections at once, all streams (64) */
	int parts;		/* parts in flight per stream (4) */
	uint64_t part_size;	/* bytes per ranged GET (8 MiB) */
	double connect_timeout;	/* seconds to connect (10) */
	double stall_timeout;	/* seconds without a byte (30) */
	double retry_time;	/* seconds one part may spend retrying (120) */
	int attempts;		/* tries per part at most (30) */
	const char *ca_file;	/* CA bundle (NULL: $CURL_CA_BUNDLE,
				 * $SSL_CERT_FILE, the system store) */
	int no_sign;		/* s3://: send requests unsigned (a public
				 * bucket), whatever keys there are */
	int allow_cross_origin;	/* a remote manifest may name shards on
				 * other origins (sk_manifest_check_origin) */
};

/* Freed part buffers the engine keeps for reuse, at most. */
#define SK_FETCH_POOL_BYTES	((uint64_t)64 << 20)

/* The limits of those options, which the tools and the Python package
 * hold to (seconds, bytes). */
#define SK_FETCH_MAX_CONNECTIONS	4096
#define SK_FETCH_MAX_PARTS		64
#define SK_FETCH_MIN_PART_SIZE		4096
#define SK_FETCH_MAX_PART_SIZE		((uint64_t)1 << 30)
#define SK_FETCH_MIN_CONNECT_TIMEOUT	0.001
#define SK_FETCH_MIN_STALL_TIMEOUT	1.0
#define SK_FETCH_MAX_TIMEOUT		3600.0
#define SK_FETCH_MAX_RETRY_TIME		86400.0
#define SK_FETCH_MAX_ATTEMPTS		1000

void sk_fetch_config_init(struct sk_fetch_config *c);
/* Set the engine's options for the transfers that start from now on. */
int sk_fetch_configure(const struct sk_fetch_config *c, struct sk_error *err);
void sk_fetch_get_config(struct sk_fetch_config *c);

/* Why a transfer was tried again. */
enum sk_retry_cause {
	SK_RETRY_CONNECT = 0,	/* could not connect, or reset */
	SK_RETRY_STALL,		/* no byte for stall_timeout */
	SK_RETRY_SHORT,		/* fewer bytes than Content-Length */
	SK_RETRY_429,		/* too many requests */
	SK_RETRY_5XX,		/* a server error */
	SK_RETRY_NCAUSES
};

/* Counters since the process started; subtract two snapshots for a run. */
struct sk_fetch_stats {
	uint64_t bytes;		/* body bytes received */
	uint64_t requests;	/* GETs sent, retries included */
	uint64_t retries;	/* GETs that repeated a failed one */
	uint64_t retries_by_cause[SK_RETRY_NCAUSES];
	uint64_t resumes;	/* retries that went on from a byte offset */
	uint64_t refetched_bytes;	/* bytes received twice */
	uint64_t failures;	/* transfers that gave up */
	double ttfb_seconds;	/* time to first byte, summed */
	uint64_t ttfb_count;	/* responses in that sum */
	double wait_seconds;	/* readers blocked on the network, summed */
};

void sk_fetch_stats(struct sk_fetch_stats *st);
/* a - b, field by field. */
void sk_fetch_stats_sub(struct sk_fetch_stats *out,
    const struct sk_fetch_stats *a, const struct sk_fetch_stats *b);
const char *sk_retry_cause_name(enum sk_retry_cause c);

/* ------------------------------------------------------------------------ */
/* writing a file whole or not at all                                       */

/*
 * The one way shardkit writes an output file:
 *   1) sk_atomic_open() creates DIR/.BASE.XXXXXXXX.part beside PATH with
 *      O_CREAT|O_EXCL|O_NOFOLLOW, so a symlink or file planted under any
 *      name is never written through;
 *   2) write to a->fd, or to the FILE * of sk_atomic_stdio();
 *   3) sk_atomic_commit() flushes, fsyncs the file, renames it over PATH
 *      (a symlink at PATH is replaced, not followed) and fsyncs the folder;
 *      sk_atomic_abort() removes the temporary file instead.
 * Commit and abort free everything; after a failed commit nothing is left.
 */
struct sk_atomic {
	int fd;			/* the temporary file, for writing */
	int dirfd;		/* PATH's folder */
	int flags;
	char *path;		/* PATH, for messages */
	char *tmp;		/* the temporary name, relative to dirfd */
	FILE *fp;		/* sk_atomic_stdio()'s stream, if made */
};

/* Skip both fsyncs: for bulk output whose caller syncs another way. */
#define SK_ATOMIC_NOSYNC 1

int sk_atomic_open(struct sk_atomic *a, const char *path, int flags,
    int mode, struct sk_error *err);
/* A stdio stream on a->fd, owned by a (commit or abort closes it). */
FILE *sk_atomic_stdio(struct sk_atomic *a, struct sk_error *err);
/* Write all n bytes to a->fd. */
int sk_atomic_write_all(struct sk_atomic *a, const void *data, size_t n,
    struct sk_error *err);
int sk_atomic_commit(struct sk_atomic *a, struct sk_error *err);
void sk_atomic_abort(struct sk_atomic *a);
/* Open, write n bytes, commit (mode 0644 less the umask). */
int sk_atomic_write_file(const char *path, const void *data, size_t n,
    int flags, struct sk_error *err);

/* ------------------------------------------------------------------------ */
/* tar shards                                                               */

typedef struct sk_tar_writer sk_tar_writer;

struct sk_tar_writer_opts {
	int64_t mtime;		/* < 0: SOURCE_DATE_EPOCH, else 0 */
	int fsync;		/* fsync the shard and its folder */
};

struct sk_shard_info {
	uint64_t filesize;
	uint64_t nmembers;
	char md5[33];		/* hex MD5 of the whole shard */
};

/* SOURCE_DATE_EPOCH as a member mtime: 0 when unset, SK_EINVAL (and 0)
 * when it is not a non-negative count of seconds. */
int sk_source_date_epoch(int64_t *mtime);
/* Create the temporary file. On failure *out holds a handle with the
 * message. */
int sk_tar_writer_open(sk_tar_writer **out, const char *path,
    const struct sk_tar_writer_opts *opts);
int sk_tar_writer_add(sk_tar_writer *w, const char *name, const void *data,
    size_t size);
/* Bytes written so far, headers and padding included. */
uint64_t sk_tar_writer_bytes(const sk_tar_writer *w);
/* Finish, rename the file to PATH, free w. info may be NULL. On failure
 * the temporary file is removed and err says why. */
int sk_tar_writer_close(sk_tar_writer *w, struct sk_shard_info *info,
    struct sk_error *err);
/* Remove the temporary file and free w. */
void sk_tar_writer_abort(sk_tar_writer *w);

/* An upper bound of the bytes a member adds to a shard (header, any PAX
 * header, data and padding) and the bytes that end a shard. */
uint64_t sk_tar_member_bytes(const char *name, uint64_t size);
#define SK_TAR_TRAILER_BYTES 1024

typedef struct sk_tar_reader sk_tar_reader;

enum sk_tar_type {
	SK_TAR_FILE = 0,
	SK_TAR_DIR,
	SK_TAR_SYMLINK,
	SK_TAR_HARDLINK,
	SK_TAR_OTHER
};

struct sk_tar_member {
	const char *name;	/* valid until the next call */
	const char *linkname;	/* links only */
	enum sk_tar_type type;
	uint64_t size;
	uint64_t header_offset;	/* of the first header block (PAX or ustar) */
	uint64_t data_offset;	/* of the first data byte */
};

/* Report every entry, not just regular files outside "__*__" names. */
#define SK_TAR_ALL_ENTRIES 0x1

/* Read a tar from src, which the reader owns from now on (also on failure). */
int sk_tar_reader_open(sk_tar_reader **out, sk_source *src, int flags);
/* 1 and a member, 0 at the end, or < 0 with a message naming the URL and
 * the offset of the damage. In a plain tar, a member that claims more bytes
 * than the file still holds is damage; m then holds that member (its name
 * valid until the reader is closed), so a caller can count its sample. */
int sk_tar_reader_next(sk_tar_reader *r, struct sk_tar_member *m);
/* Data of the current member: bytes read, 0 at its end. */
int64_t sk_tar_reader_read(sk_tar_reader *r, void *buf, size_t n);
/* The entries skipped so far (non-regular, "__*__" metadata). */
uint64_t sk_tar_reader_skipped(const sk_tar_reader *r);
void sk_tar_reader_close(sk_tar_reader *r);

/* Whether the tar is compressed (gzip, zstd): offsets are then into the
 * decompressed stream, and sizes cannot be checked against the file. */
int sk_tar_reader_compressed(const sk_tar_reader *r);

/* ------------------------------------------------------------------------ */
/* samples: tar members grouped by key                                      */

/*
 * The one sample reader: what the loader, shardtool and the index writer
 * use to read a shard sample by sample.
 *   1) sk_sample_reader_open() over a source (it takes the source);
 *   2) sk_sample_reader_next() until 0; a callback picks the members whose
 *      data to load, the rest are skipped (a seek on a file);
 *   3) sk_sample_free() the sample, sk_sample_reader_close() the reader.
 * Caps: a member claiming more than the file holds is damage (the tar
 * reader); a sample whose members' sizes add up to more than
 * max_sample_bytes comes back too_big with no data loaded, and the reading
 * goes on; more than max_members members under one key is damage.
 */
#define SK_SAMPLE_MAX_BYTES	((uint64_t)256 << 20)
#define SK_SAMPLE_MAX_MEMBERS	1024

struct sk_sample_member {
	char *name;
	const char *ext;	/* points into name */
	enum sk_tar_type type;
	char *linkname;		/* a link's target, else NULL */
	uint64_t size;
	uint64_t header_offset;
	uint64_t data_offset;
	uint8_t *data;		/* size bytes when loaded, else NULL; the caller
				 * may take it and set the field to NULL */
	int scanned;		/* read through but not kept (SK_SAMPLE_SCAN) */
};

struct sk_sample {
	char *key;
	struct sk_sample_member *m;
	size_t n, cap;
	uint64_t offset;	/* header offset of the first member */
	uint64_t end;		/* end of the last member's data */
	uint64_t bytes;		/* the members' sizes added up */
	int too_big;		/* over max_sample_bytes: nothing loaded */
	int cut;		/* damage followed its last member: it may
				 * have lost members (the next call fails) */
};

struct sk_sample_reader_opts {
	int tar_flags;			/* SK_TAR_ALL_ENTRIES */
	uint64_t max_sample_bytes;	/* 0: SK_SAMPLE_MAX_BYTES */
	size_t max_members;		/* 0: SK_SAMPLE_MAX_MEMBERS */
};

typedef struct sk_sample_reader sk_sample_reader;
/* What to do with a member's data (ext is what follows the key's dot):
 * 0 skip it (a seek on a file), SK_SAMPLE_LOAD load it into data, or
 * SK_SAMPLE_SCAN read it through without keeping it: its bytes are read
 * and checked as for a load, with no copy, data stays NULL and scanned
 * is set. */
#define SK_SAMPLE_LOAD	1
#define SK_SAMPLE_SCAN	2
typedef int sk_sample_want_fn(const char *ext, void *arg);

/* On failure *out holds a handle with the message (NULL: out of memory). */
int sk_sample_reader_open(sk_sample_reader **out, sk_source *src,
    const struct sk_sample_reader_opts *opts);
/* 1 and the next sample in s, 0 at the end, or < 0 with sk_errmsg(r)
 * naming the URL and offset; s then keeps the members read before the
 * damage. Damage in the header after a sample's last member ends the
 * sample: it comes back with cut set, the damage on the next call. want NULL
 * loads nothing. */
int sk_sample_reader_next(sk_sample_reader *r, struct sk_sample *s,
    sk_sample_want_fn *want, void *arg);
int sk_sample_reader_compressed(const sk_sample_reader *r);
/* Non-regular and "__*__" entries passed over (without ALL_ENTRIES). */
uint64_t sk_sample_reader_skipped(const sk_sample_reader *r);
void sk_sample_reader_close(sk_sample_reader *r);
/* Free the members' memory, keep the arrays for the next sample. */
void sk_sample_clear(struct sk_sample *s);
void sk_sample_free(struct sk_sample *s);

/* ------------------------------------------------------------------------ */
/* manifest (wids shard index)                                              */

struct sk_manifest_shard {
	char *url;		/* as written: relative to the manifest's folder */
	uint64_t nsamples;
	uint64_t filesize;
	char md5[33];
};

struct sk_manifest {
	struct sk_manifest_shard *shards;
	size_t nshards;
	/* info: the class names (index = label) and per-class counts */
	char **classes;
	uint64_t *class_counts;
	size_t nclasses;
	char *info_extra;	/* other info members as a JSON object, or NULL */
};

int sk_manifest_add_shard(struct sk_manifest *m, const char *url,
    uint64_t nsamples, uint64_t filesize, const char *md5);
/* The manifest as JSON text (malloc'd), or NULL with err set. */
char *sk_manifest_dumps(const struct sk_manifest *m, struct sk_error *err);
/* Written through sk_atomic_open(), fsynced. */
int sk_manifest_write(const char *path, const struct sk_manifest *m,
    struct sk_error *err);
int sk_manifest_read(const char *path, struct sk_manifest *m,
    struct sk_error *err);
void sk_manifest_free(struct sk_manifest *m);
/* A manifest URL resolved against the manifest's own location. */
char *sk_manifest_resolve(const char *manifest_path, const char *url);
/*
 * Whether shard (as sk_manifest_resolve gave it) may be read for the
 * manifest at manifest_path: any shard for a local manifest; for one from
 * the network (http(s), gs, s3) only a shard on its own origin (the same
 * scheme, host and port; for a bucket the same bucket), so that a
 * manifest's author can neither steer the user's cloud credentials to
 * objects of their choosing nor reach other hosts, unless the fetch
 * engine's allow_cross_origin is set (the tools' --allow-cross-origin).
 * 0, or SK_EACCES with a message naming both.
 */
int sk_manifest_check_origin(const char *manifest_path, const char *shard,
    struct sk_error *err);

/* ------------------------------------------------------------------------ */
/* images (loader/image.c)                                                  */

enum sk_image_format { SK_IMAGE_UNKNOWN = 0, SK_IMAGE_JPEG, SK_IMAGE_PNG };
enum sk_colorspace {
	SK_CS_UNKNOWN = 0, SK_CS_GRAY, SK_CS_RGB, SK_CS_CMYK, SK_CS_YCCK,
	SK_CS_GRAY_ALPHA, SK_CS_RGBA
};

struct sk_image_info {
	enum sk_image_format format;
	enum sk_colorspace colorspace;
	int width, height;
	int components;
	int truncated;		/* JPEG with no end-of-image marker */
};

/* The default pixel limit against decompression bombs (100 MP). */
#define SK_IMAGE_MAX_PIXELS 100000000ULL

/* Read the header only. */
int sk_image_probe(const void *data, size_t size, struct sk_image_info *info,
    struct sk_error *err);
/* Decode to 8-bit RGB (gray, CMYK, alpha converted). *rgb is malloc'd,
 * w*h*3 bytes. max_pixels 0 means SK_IMAGE_MAX_PIXELS. JPEG warnings about
 * corrupt data fail the decode. */
int sk_image_decode_rgb(const void *data, size_t size, uint64_t max_pixels,
    uint8_t **rgb, int *w, int *h, struct sk_error *err);
/* Encode w*h pixels of 1 (gray), 3 (RGB) or 4 (CMYK, Adobe inverted)
 * components. *out is malloc'd. */
int sk_image_encode_jpeg(const uint8_t *pix, int w, int h, int components,
    int quality, uint8_t **out, size_t *outlen, struct sk_error *err);
/* 1 (gray) or 3 (RGB) components, deflate level 0-9 (-1: the fast
 * default; 4 and up also use the smaller Paeth filter). */
int sk_image_encode_png(const uint8_t *pix, int w, int h, int components,
    int level, uint8_t **out, size_t *outlen, struct sk_error *err);
/* Antialiased bilinear (triangle filter) resize of 8-bit RGB. */
int sk_image_resize_rgb(const uint8_t *src, int sw, int sh, uint8_t *dst,
    int dw, int dh);

/* ------------------------------------------------------------------------ */
/* the streaming loader (loader/)                                           */

/*
 * To stream batches:
 *   1) sk_loader_config_init() for the defaults, then set urls or manifest
 *      and whatever else differs;
 *   2) sk_loader_open() reads the shard list and its sample counts and
 *      starts the threads, which plan each epoch as they reach it;
 *   3) sk_loader_next() until it returns 0, sk_loader_release() each batch
 *      once its images are used (a batch's memory is reused after that);
 *   4) sk_loader_stats() at any time; sk_loader_close().
 *
 * Determinism: (shards, seed, epoch, rank, world, batch, options) fix the
 * keys of every batch and every pixel, whatever the thread counts.
 */
typedef struct sk_loader sk_loader;

enum sk_crop {
	SK_CROP_RANDOM_RESIZED = 0,	/* torchvision RandomResizedCrop */
	SK_CROP_CENTER,			/* Resize(short side) + CenterCrop */
	SK_CROP_NONE			/* resize the whole image, any aspect */
};
enum sk_dtype { SK_DTYPE_U8 = 0, SK_DTYPE_F32, SK_DTYPE_BF16, SK_DTYPE_F16 };
enum sk_layout { SK_LAYOUT_NHWC = 0, SK_LAYOUT_NCHW };
/* What happens to the samples that do not fill a last batch on every rank. */
enum sk_remainder {
	SK_REMAINDER_DROP = 0,	/* no batch is short (except for skips) */
	SK_REMAINDER_KEEP	/* every sample; trailing batches may be short */
};

/* What the source holds: tar shards, or the image files of a class-per-
 * folder tree ROOT/CLASS/IMAGE (labels: the indexes of the sorted class
 * names; keys: "CLASS/stem", as "shardtool pack folder" gives them). Auto:
 * a manifest or pattern is shards; a folder (a local directory, or a URL
 * ending in '/') that holds .tar files is shards, one that holds none but
 * has subfolders is a files tree. */
enum sk_form { SK_FORM_AUTO = 0, SK_FORM_SHARDS, SK_FORM_FILES };

/* Why a planned sample did not reach a batch. */
enum sk_skip_reason {
	SK_SKIP_DECODE = 0,	/* the image would not decode */
	SK_SKIP_TOO_BIG,	/* over the pixel limit, or the sample over
				 * SK_SAMPLE_MAX_BYTES */
	SK_SKIP_NO_IMAGE,	/* no .jpg, .jpeg or .png member */
	SK_SKIP_NO_LABEL,	/* no .cls member, or not a number */
	SK_SKIP_DAMAGED,	/* lost to a corrupt or truncated shard */
	SK_SKIP_NREASONS
};

struct sk_loader_config {
	const char *urls;	/* a shard pattern (sk_url_expand), or */
	const char *manifest;	/* a manifest; sample counts come from it */
	enum sk_form form;	/* what urls holds (auto) */
	int batch;		/* 256 */
	int epoch;		/* the first epoch (0) */
	int epochs;		/* epochs to stream (1) */
	uint64_t seed;		/* 0 */
	int rank, world;	/* 0, 1 */
	int workers;		/* decode workers (0: the number of CPUs) */
	int io_streams;		/* shards read at once (2) */
	size_t prefetch_bytes;	/* read ahead of the shuffle buffer (64 MiB) */
	int shuffle;		/* shuffle buffer, samples (0: plan order) */
	int ring;		/* batch slots (0: 2 + ceil(2 * workers /
				 * batch), at least 3) */
	int image_size;		/* output height and width (224) */
	enum sk_crop crop;
	double scale[2];	/* random-resized area fraction (0.08, 1) */
	double ratio[2];	/* random-resized aspect w/h (3/4, 4/3) */
	int resize;		/* center: the short side (image_size * 8 / 7) */
	int flip;		/* random horizontal flip, p = 0.5 (1) */
	enum sk_dtype dtype;	/* u8 */
	enum sk_layout layout;	/* nhwc */
	float mean[3];		/* float outputs: (v / 255 - mean) / std */
	float std[3];		/* (ImageNet's) */
	int strict;		/* a bad sample fails the loader (0: skip) */
	uint64_t max_pixels;	/* decompression-bomb limit (100 MP) */
	uint64_t max_sample_bytes;	/* a sample's members over this are
					 * skipped as too_big, unread
					 * (0: SK_SAMPLE_MAX_BYTES) */
	enum sk_remainder remainder;
	int resume_batch;	/* start at this batch of the first epoch (0) */
	int decode;		/* 0: I/O and tar only, no pixels (1) */
	int device;		/* CUDA: copy batches to this GPU (-1: no) */
	/* Remote shards: how many each I/O stream opens ahead of the one it
	 * reads (their first parts go out at once). 0: as many as raise the
	 * measured rate, within max_inflight (shardkit(3), Remote I/O). */
	int ahead;
	uint64_t max_inflight;	/* bytes of parts in flight or buffered
				 * that ahead = 0 may grow to (256 MiB) */
};

/* Per sample: where its pixels came from, in source-image pixels. */
struct sk_sample_aug {
	int src_w, src_h;	/* the decoded image */
	float x, y, w, h;	/* the crop box */
	int flip;
};

struct sk_batch {
	int epoch;
	int64_t index;		/* the batch within the epoch */
	int n;			/* samples (< batch when skipped or kept) */
	int size;		/* image height = width */
	enum sk_dtype dtype;
	enum sk_layout layout;
	size_t image_bytes;	/* bytes of one host image */
	void *images;		/* (n,S,S,3) or (n,3,S,S); pinned with CUDA.
				 * In device mode with a conversion these are
				 * the u8 NHWC pixels; dtype and layout then
				 * describe device_images */
	int32_t *labels;	/* (n) */
	const char **keys;	/* (n) */
	const uint64_t *bytes;	/* (n) encoded bytes of each sample */
	const struct sk_sample_aug *aug;	/* (n) */
	void *device_images;	/* device mode: the batch on the GPU */
	void *ready_event;	/* device mode: a cudaEvent_t to wait on */
	int slot;		/* private */
	void *kept;		/* private: sk_loader_keep()'s memory */
};

struct sk_loader_stats {
	uint64_t batches;	/* delivered */
	uint64_t samples;	/* in delivered batches */
	uint64_t bytes;		/* shard bytes read */
	uint64_t sample_bytes;	/* encoded bytes of delivered samples */
	uint64_t skipped[SK_SKIP_NREASONS];
	uint64_t skipped_total;
	uint64_t dropped;	/* remainder left out of the epochs so far */
	/* Manifest truth: samples found past a shard's manifest count (never
	 * delivered: no plan has them), and shards whose size or count
	 * disagrees with the manifest. Missing samples count as damaged. */
	uint64_t unplanned;
	uint64_t mismatched_shards;
	uint64_t planned;	/* samples this rank's epochs hold */
	int64_t batches_per_epoch;
	size_t nshards;		/* in the data set (files form: files) */
	size_t nclasses;	/* files form: class folders (shards: 0) */
	uint64_t dataset_samples;
	/* seconds, summed over the threads of each stage */
	double wall;		/* since open */
	double io_busy;		/* reading shards and splitting samples */
	double io_blocked;	/* I/O threads waiting for the prefetch room */
	double input_wait;	/* the shuffle stage waiting for I/O */
	double decode_busy;	/* workers decoding and augmenting */
	double decode_idle;	/* workers waiting for samples */
	double ring_wait;	/* waiting for the consumer to release a slot */
	double consumer_wait;	/* sk_loader_next() waiting for a batch */
	int workers, io_streams;
	int ring;		/* batch slots */
	uint64_t memory_bound;	/* peak bytes by the formula in shardkit(3) */
	/* Shards opened ahead by each I/O stream: now, the most so far, and
	 * the most max_inflight allows (local shards: 1, 1, 1). */
	int ahead, ahead_peak, ahead_cap;
};

/* The limits sk_loader_open() holds the options to, which the tools'
 * options and the Python package share. */
#define SK_LOADER_MAX_BATCH	(1 << 20)
#define SK_LOADER_MAX_EPOCHS	1000000
#define SK_LOADER_MAX_SHUFFLE	(1 << 24)
#define SK_LOADER_MAX_WORKERS	1024
#define SK_LOADER_MAX_IO_STREAMS 256
#define SK_LOADER_MAX_AHEAD	16
#define SK_LOADER_MIN_RING	3
#define SK_LOADER_MAX_RING	4096
#define SK_LOADER_MAX_IMAGE_SIZE 8192
#define SK_LOADER_MAX_RESIZE	65536
#define SK_LOADER_MAX_RANKS	(1 << 20)
#define SK_LOADER_MAX_EPOCH	(1 << 30)

void sk_loader_config_init(struct sk_loader_config *cfg);
/* On failure *out still holds a handle with the message (NULL only when
 * memory ran out); close it. */
int sk_loader_open(sk_loader **out, const struct sk_loader_config *cfg);
/* Block for the next batch: 1 and a batch, 0 after the last, < 0 on a
 * fatal error (the message names the shard, offset or sample). */
int sk_loader_next(sk_loader *l, struct sk_batch *b);
int sk_loader_release(sk_loader *l, struct sk_batch *b);
/* sk_loader_next() waiting at most seconds (< 0: for ever): SK_ETIMEDOUT
 * when no batch came in time, and the loader goes on. A caller that must
 * notice a signal (an interpreter's Ctrl-C) waits in short steps. */
int sk_loader_next_wait(sk_loader *l, struct sk_batch *b, double seconds);
/*
 * Take a held batch's memory out of the ring instead of releasing it: the
 * images, labels, keys and (device mode) the device images stay where they
 * are and become the caller's, to free with sk_batch_free() whenever it
 * likes, even after sk_loader_close(); the slot gets new memory and goes
 * back to the pipeline. For a consumer that keeps batches longer than the
 * ring's slots allow: no batch is overwritten and nothing waits on it.
 */
int sk_loader_keep(sk_loader *l, struct sk_batch *b);
void sk_batch_free(struct sk_batch *b);
/* Device mode: make the CUDA stream (a cudaStream_t; 1 and 2 are CUDA's
 * legacy and per-thread default streams) wait for the batch's copy and
 * conversion, without blocking the host. SK_EUNSUPPORTED without CUDA. */
int sk_batch_stream_wait(const struct sk_batch *b, uintptr_t stream,
    struct sk_error *err);
int sk_loader_stats(sk_loader *l, struct sk_loader_stats *st);
/* Which stage set the pace over wall seconds, as shardload bench reports
 * it: "consumer" (the pipeline kept ahead and waited for a free slot),
 * "decode" or "io" (the busiest threads), and that stage's busy share of
 * its capacity in *share. */
const char *sk_loader_bound(const struct sk_loader_stats *st, double wall,
    int decode, double *share);
void sk_loader_close(sk_loader *l);
/* One line about the source the user may not expect, for a tool to show
 * after sk_loader_open(), or NULL: a folder read as its .tar files that
 * also holds a manifest (see sk_source_folder_note). Valid until close. */
const char *sk_loader_note(const sk_loader *l);
const char *sk_skip_reason_name(enum sk_skip_reason r);
/* What cfg's source holds (cfg->form, or what auto finds there, listing
 * its root folder once), without opening a loader: a tool that must size
 * something by the classes (a model's head) asks first. *form is
 * SK_FORM_SHARDS or SK_FORM_FILES; for files, the sorted class names (a
 * label is an index) are appended to classes when it is not NULL. 0, or
 * < 0 with err naming the folder. */
int sk_loader_source_form(const struct sk_loader_config *cfg,
    enum sk_form *form, struct sk_strlist *classes, struct sk_error *err);
size_t sk_dtype_size(enum sk_dtype t);

/*
 * Is a training loop input-bound or compute-bound? From the share of its
 * step time spent waiting for data, and, when measured (else < 0), the
 * images/s the loader reaches alone and the compute reaches alone (on
 * data already in memory). free_input: the data costs nothing to make
 * (synthetic), so nothing can wait for it. shardtrain(1) gives the rule:
 * input-bound at a wait share of 25 % or more, or a loader below 0.9x the
 * compute; compute-bound at 5 % or less with a loader at 1.1x or more (or
 * not measured); balanced between.
 */
enum sk_verdict { SK_VERDICT_INPUT = 0, SK_VERDICT_COMPUTE,
    SK_VERDICT_BALANCED };
#define SK_VERDICT_WAIT_INPUT	0.25
#define SK_VERDICT_WAIT_COMPUTE	0.05
#define SK_VERDICT_RATIO_INPUT	0.9
#define SK_VERDICT_RATIO_COMPUTE 1.1
enum sk_verdict sk_verdict_decide(double wait_share, double loader_ips,
    double compute_ips, int free_input);
/* "input-bound", "compute-bound", "balanced". */
const char *sk_verdict_name(enum sk_verdict v);

#ifdef __cplusplus
}
#endif

#endif /* SHARDKIT_H */
