/*
 * shardkit.h - the public interface of libshardkit: sources, tar shards,
 * manifests and the image codec that the tools and the loader share.
 *
 * To write a dataset as shards:
 *   1) sk_tar_writer_open() on the final shard path (bytes go to PATH.part);
 *   2) sk_tar_writer_add() each member of each sample, members of a sample
 *      adjacent, named KEY.EXT;
 *   3) sk_tar_writer_close() renames PATH.part to PATH and reports the size
 *      and MD5 for the manifest; sk_tar_writer_abort() removes PATH.part;
 *   4) sk_manifest_write() the wids shard index NAME.json.
 *
 * To read a shard:
 *   1) sk_source_open() on a URL (PATH, file://PATH; other schemes later);
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
	SK_ENOSPC = -11		/* no space left on the device */
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
void sk_url_free(struct sk_url *url);
const char *sk_scheme_name(enum sk_scheme scheme);

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

/* The objects under a directory or prefix URL, sorted, appended to out as
 * full URLs. */
int sk_source_list(const char *url, struct sk_strlist *out,
    struct sk_error *err);

/* ------------------------------------------------------------------------ */
/* tar shards                                                               */

typedef struct sk_tar_writer sk_tar_writer;

struct sk_tar_writer_opts {
	int64_t mtime;		/* < 0: SOURCE_DATE_EPOCH, else 0 */
	int fsync;		/* fsync PATH.part before the rename */
};

struct sk_shard_info {
	uint64_t filesize;
	uint64_t nmembers;
	char md5[33];		/* hex MD5 of the whole shard */
};

/* SOURCE_DATE_EPOCH as a member mtime: 0 when unset, SK_EINVAL (and 0)
 * when it is not a non-negative count of seconds. */
int sk_source_date_epoch(int64_t *mtime);
/* Create PATH.part. On failure *out holds a handle with the message. */
int sk_tar_writer_open(sk_tar_writer **out, const char *path,
    const struct sk_tar_writer_opts *opts);
int sk_tar_writer_add(sk_tar_writer *w, const char *name, const void *data,
    size_t size);
/* Bytes written so far, headers and padding included. */
uint64_t sk_tar_writer_bytes(const sk_tar_writer *w);
/* Finish, rename PATH.part to PATH, free w. info may be NULL. On failure
 * PATH.part is removed and err says why. */
int sk_tar_writer_close(sk_tar_writer *w, struct sk_shard_info *info,
    struct sk_error *err);
/* Remove PATH.part and free w. */
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
 * the offset of the damage. */
int sk_tar_reader_next(sk_tar_reader *r, struct sk_tar_member *m);
/* Data of the current member: bytes read, 0 at its end. */
int64_t sk_tar_reader_read(sk_tar_reader *r, void *buf, size_t n);
/* The entries skipped so far (non-regular, "__*__" metadata). */
uint64_t sk_tar_reader_skipped(const sk_tar_reader *r);
void sk_tar_reader_close(sk_tar_reader *r);

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
/* Written to PATH.part, then renamed. */
int sk_manifest_write(const char *path, const struct sk_manifest *m,
    struct sk_error *err);
int sk_manifest_read(const char *path, struct sk_manifest *m,
    struct sk_error *err);
void sk_manifest_free(struct sk_manifest *m);
/* A manifest URL resolved against the manifest's own location. */
char *sk_manifest_resolve(const char *manifest_path, const char *url);

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

#ifdef __cplusplus
}
#endif

#endif /* SHARDKIT_H */
