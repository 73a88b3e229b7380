/*
 * source.c - one interface over every place a shard can live. The backend
 * is chosen by the URL's scheme; sequential reads are ranged reads at a
 * position the source keeps.
 */
#include <sys/mman.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "internal.h"
#include "fetch.h"

static const struct sk__source_ops *
backend(enum sk_scheme scheme)
{
	switch (scheme) {
	case SK_SCHEME_FILE:
		return &sk__source_file_ops;
	case SK_SCHEME_HTTP:
	case SK_SCHEME_HTTPS:
		return &sk__source_http_ops;
	case SK_SCHEME_GS:
		return &sk__source_gs_ops;
	case SK_SCHEME_S3:
		return &sk__source_s3_ops;
	default:
		return NULL;
	}
}

/* How source_open opens: at once, ahead, or pinned to a listing's
 * size and version. */
struct how {
	int ahead;
	uint64_t hint;
	const char *version;	/* non-NULL: pinned, hint is the size */
};

/*
 * A remote object that is not there, or not an object, is often a folder
 * named without its '/' or a shell glob: say which, after the message.
 * Only on failure: a glob costs nothing, a folder one listing.
 */
static void
hint_missing(sk_source *s, int rc)
{
	struct sk__entries e = { 0 };
	struct sk_error lerr;
	struct sk_url u;
	const char *tail;
	char *dir;
	size_t len;

	/* Not after a network failure: the listing would wait as long. */
	if ((rc != SK_ENOENT && rc != SK_EIO) ||
	    sk_url_parse(s->url, &u, &lerr) != 0)
		return;
	if (u.scheme == SK_SCHEME_FILE)
		goto out;
	tail = strrchr(u.path, '/');
	tail = tail != NULL ? tail + 1 : u.path;
	len = strlen(s->h.err.msg);
	if (strcspn(tail, "*?[") < strlen(tail)) {
		snprintf(s->h.err.msg + len, sizeof s->h.err.msg - len, " (a "
		    "URL is not a glob: name shards with braces, as in "
		    "in-{000000..000014}.tar, or list the folder)");
		goto out;
	}
	/* A folder: no '.' in its last segment, and it lists. */
	if (*tail == '\0' || strchr(tail, '.') != NULL ||
	    (u.scheme == SK_SCHEME_HTTP || u.scheme == SK_SCHEME_HTTPS ?
	    strchr(tail, '?') != NULL : rc != SK_ENOENT) ||
	    (dir = sk__asprintf("%s/", s->url)) == NULL)
		goto out;
	if (sk__source_list_entries(dir, &e, &lerr) == 0 && e.n > 0)
		snprintf(s->h.err.msg + len, sizeof s->h.err.msg - len,
		    " (a folder: did you mean %s/?)", s->url);
	sk__entries_free(&e);
	free(dir);
out:
	sk_url_free(&u);
}

static int
source_open(sk_source **out, const char *url, const struct how *how)
{
	struct sk_url u;
	struct sk_error err;
	sk_source *s;
	int rc;

	*out = NULL;
	if ((s = calloc(1, sizeof *s)) == NULL)
		return SK_ENOMEM;
	sk__handle_init(&s->h, SK__MAGIC_SOURCE);
	*out = s;
	if (url == NULL)
		return sk__fatal(&s->h, SK_EINVAL, "no URL");
	if ((s->url = strdup(url)) == NULL)
		return sk__fatal(&s->h, SK_ENOMEM, "out of memory");
	if ((rc = sk_url_parse(url, &u, &err)) != 0)
		return sk__fatal(&s->h, rc, "%s", err.msg);
	s->ops = backend(u.scheme);
	if (s->ops == NULL)
		rc = sk__fatal(&s->h, SK_EUNSUPPORTED,
		    "%s: %s:// sources are not built into this shardkit", url,
		    sk_scheme_name(u.scheme));
	else if (how->version != NULL) {
		if (s->ops->open_pinned == NULL)
			rc = sk__fatal(&s->h, SK_EUNSUPPORTED, "%s: %s:// "
			    "objects cannot be opened for ranged reads", url,
			    sk_scheme_name(u.scheme));
		else if ((rc = s->ops->open_pinned(s, &u, how->hint,
		    how->version)) != 0)
			s->h.state = SK__STATE_FATAL;
	} else if (s->ops->open == NULL || (how->ahead &&
	    s->ops->open_ahead != NULL)) {
		/* A remote backend opens ahead; a plain open waits for it. */
		if ((rc = s->ops->open_ahead(s, &u, how->hint)) != 0 ||
		    (!how->ahead && (rc = s->ops->ready(s)) != 0))
			s->h.state = SK__STATE_FATAL;
	} else if ((rc = s->ops->open(s, &u)) != 0)
		s->h.state = SK__STATE_FATAL;
	sk_url_free(&u);
	if (rc != 0 && how->version == NULL)
		hint_missing(s, rc);
	return rc;
}

int
sk_source_open(sk_source **out, const char *url)
{
	const struct how how = { 0 };

	return source_open(out, url, &how);
}

int
sk__source_open_ahead(sk_source **out, const char *url, uint64_t hint)
{
	const struct how how = { .ahead = 1, .hint = hint };

	return source_open(out, url, &how);
}

int
sk__source_open_pinned(sk_source **out, const char *url, uint64_t size,
    const char *version)
{
	const struct how how = { .hint = size, .version = version ?
	    version : "" };

	return source_open(out, url, &how);
}

struct sk__stream *
sk__source_stream(sk_source *s)
{
	return s->ops != NULL && s->ops->open_pinned != NULL ? s->impl : NULL;
}

int
sk__source_ready(sk_source *s)
{
	int rc;

	if ((rc = sk__check(&s->h, SK__MAGIC_SOURCE, __func__)) != 0)
		return rc;
	if (s->ops->ready != NULL && (rc = s->ops->ready(s)) != 0) {
		s->h.state = SK__STATE_FATAL;
		hint_missing(s, rc);
	}
	return rc;
}

/* ------------------------------------------------------------------------ */
/* hashing what is read (sk_source_md5_start)                               */

/* Bytes [off, off + n) went to a reader: the part past what is hashed
 * joins the MD5 when it follows on from it. */
static void
hash_feed(sk_source *s, const void *p, uint64_t off, int64_t n)
{
	if (s->md5 == NULL || n <= 0 || off > s->hashed ||
	    off + (uint64_t)n <= s->hashed)
		return;
	EVP_DigestUpdate(s->md5, (const uint8_t *)p + (s->hashed - off),
	    (size_t)(off + (uint64_t)n - s->hashed));
	s->hashed = off + (uint64_t)n;
}

/* Hash on to byte end (or the object's end), reading what no reader
 * asked for; the position does not move. */
static int
hash_upto(sk_source *s, uint64_t end)
{
	uint8_t buf[1 << 16];
	const void *p;
	int64_t got;
	size_t n;

	while (s->md5 != NULL && s->md5_rc == 0 && s->hashed < end) {
		n = end - s->hashed < sizeof buf ? (size_t)(end - s->hashed) :
		    sizeof buf;
		if (s->ops->peek != NULL)
			got = s->ops->peek(s, &p, n, s->hashed);
		else {
			p = buf;
			got = s->ops->pread(s, buf, n, s->hashed);
		}
		if (got < 0)
			s->md5_rc = (int)got;
		if (got <= 0)
			break;
		hash_feed(s, p, s->hashed, got);
	}
	return s->md5_rc;
}

int
sk_source_md5_start(sk_source *s)
{
	int rc;

	if ((rc = sk__check(&s->h, SK__MAGIC_SOURCE, __func__)) != 0)
		return rc;
	if (s->md5 != NULL || s->pos != 0)
		return sk__fail(&s->h, SK_EINVAL, "%s: an MD5 starts before the "
		    "first read", s->url);
	if ((s->md5 = EVP_MD_CTX_new()) == NULL ||
	    EVP_DigestInit_ex(s->md5, EVP_md5(), NULL) != 1)
		return sk__fail(&s->h, SK_ENOMEM, "%s: cannot start MD5", s->url);
	s->hashed = 0;
	s->md5_rc = 0;
	return 0;
}

int
sk_source_md5_end(sk_source *s, uint64_t *size, char md5[33])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int rc;

	*size = 0;
	md5[0] = '\0';
	if (s == NULL || s->h.magic != SK__MAGIC_SOURCE || s->md5 == NULL)
		return SK_EINVAL;
	/* What the reader skipped or never reached: read it now. */
	if (s->md5_rc == 0 && s->h.state == SK__STATE_OK)
		hash_upto(s, UINT64_MAX);
	rc = s->md5_rc != 0 ? s->md5_rc : s->h.state != SK__STATE_OK ?
	    SK_EFATAL : 0;
	if (rc == 0) {
		EVP_DigestFinal_ex(s->md5, md, &mdlen);
		sk__md5_hex(md, md5);
		*size = s->hashed;
	}
	EVP_MD_CTX_free(s->md5);
	s->md5 = NULL;
	return rc;
}

int64_t
sk_source_pread(sk_source *s, void *buf, size_t n, uint64_t offset)
{
	int64_t got;
	int rc;

	if ((rc = sk__check(&s->h, SK__MAGIC_SOURCE, __func__)) != 0)
		return rc;
	got = s->ops->pread(s, buf, n, offset);
	hash_feed(s, buf, offset, got);
	return got;
}

int64_t
sk_source_read(sk_source *s, void *buf, size_t n)
{
	int64_t got;

	got = sk_source_pread(s, buf, n, s->pos);
	if (got > 0)
		s->pos += (uint64_t)got;
	return got;
}

int64_t
sk__source_read_ptr(sk_source *s, const void **ptr, void *buf, size_t n)
{
	int64_t got;
	int rc;

	if ((rc = sk__check(&s->h, SK__MAGIC_SOURCE, __func__)) != 0)
		return rc;
	if (s->ops->peek == NULL) {
		*ptr = buf;
		got = s->ops->pread(s, buf, n, s->pos);
	} else
		got = s->ops->peek(s, ptr, n, s->pos);
	if (got > 0) {
		hash_feed(s, *ptr, s->pos, got);
		s->pos += (uint64_t)got;
	}
	return got;
}

int
sk_source_seek(sk_source *s, uint64_t offset)
{
	int rc;

	if ((rc = sk__check(&s->h, SK__MAGIC_SOURCE, __func__)) != 0)
		return rc;
	/* A skip while hashing reads through: the MD5 needs every byte,
	 * and a remote stream has them in its window anyway. */
	if (s->md5 != NULL && offset > s->hashed)
		hash_upto(s, offset);
	s->pos = offset;
	return 0;
}

int
sk_source_size(sk_source *s, uint64_t *size)
{
	int rc;

	if ((rc = sk__check(&s->h, SK__MAGIC_SOURCE, __func__)) != 0)
		return rc;
	return s->ops->size(s, size);
}

const char *
sk_source_url(const sk_source *s)
{
	return s != NULL && s->url != NULL ? s->url : "";
}

void
sk_source_close(sk_source *s)
{
	if (s == NULL)
		return;
	if (s->ops != NULL && s->impl != NULL)
		s->ops->close(s);
	EVP_MD_CTX_free(s->md5);
	free(s->url);
	s->h.magic = 0;
	free(s);
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The entries of the folder url from its backend, sorted. */
static int
folder_entries(const struct sk__source_ops *ops, const struct sk_url *u,
    const char *url, struct sk__entries *out, struct sk_error *err)
{
	size_t first = out->n, n = strlen(url);
	char *display;
	int rc;

	if (n == 0 || url[n - 1] != '/') {
		if ((display = sk_url_redact(url)) == NULL)
			return sk_error_set(err, SK_ENOMEM, "out of memory");
		rc = sk_error_set(err, SK_EINVAL, "%s: a folder URL ends in "
		    "'/'", display);
		free(display);
		return rc;
	}
	if ((rc = ops->list_entries(u, url, out, err)) == 0)
		sk__entries_sort(out, first);
	return rc;
}

int
sk__source_list_entries(const char *url, struct sk__entries *out,
    struct sk_error *err)
{
	const struct sk__source_ops *ops;
	struct sk_url u;
	int rc;

	if ((rc = sk_url_parse(url, &u, err)) != 0)
		return rc;
	ops = backend(u.scheme);
	if (ops == NULL || ops->list_entries == NULL)
		rc = sk_error_set(err, SK_EUNSUPPORTED, "%s: %s:// folders are "
		    "not listed with sizes and times (http(s)://, gs:// and "
		    "s3:// ones are)", url, sk_scheme_name(u.scheme));
	else
		rc = folder_entries(ops, &u, url, out, err);
	sk_url_free(&u);
	return rc;
}

int
sk__folder_entries(const char *url, struct sk__entries *out,
    struct sk_error *err)
{
	struct sk_url u;
	int rc;

	if ((rc = sk_url_parse(url, &u, err)) != 0)
		return rc;
	if (u.scheme == SK_SCHEME_FILE)
		rc = sk__file_list_entries(u.path, url, out, err);
	else
		rc = sk__source_list_entries(url, out, err);
	sk_url_free(&u);
	return rc;
}

char *
sk__folder_child(const char *url, const char *name, int dir)
{
	struct sk_url u;
	struct sk_error err;
	size_t n = strlen(url);
	const char *sep = n > 0 && url[n - 1] == '/' ? "" : "/";
	char *esc, *full;

	if (sk_url_parse(url, &u, &err) != 0)
		return NULL;
	if (u.scheme == SK_SCHEME_HTTP || u.scheme == SK_SCHEME_HTTPS) {
		/* A name goes into an http URL escaped (folder_urls). */
		full = (esc = sk__uri_escape(name, 0)) == NULL ? NULL :
		    sk__asprintf("%s%s%s%s", url, sep, esc, dir ? "/" : "");
		free(esc);
	} else if (u.scheme == SK_SCHEME_FILE)
		full = sk__asprintf("%s%s%s%s", url, sep, name, dir ? "/" : "");
	else
		full = sk__asprintf("%s://%s/%s%s%s%s",
		    sk_scheme_name(u.scheme), u.host, u.path,
		    *u.path != '\0' ? sep : "", name, dir ? "/" : "");
	sk_url_free(&u);
	return full;
}

int
sk__is_local_dir(const char *url)
{
	struct sk_url u;
	struct sk_error err;
	struct stat st;
	int rc;

	if (sk_url_parse(url, &u, &err) != 0)
		return 0;
	rc = u.scheme == SK_SCHEME_FILE && stat(u.path, &st) == 0 &&
	    S_ISDIR(st.st_mode);
	sk_url_free(&u);
	return rc;
}

/*
 * A remote folder's objects as full URLs, in the URLs' order: an http
 * name goes into its URL escaped (a '%' sorts before the letters its
 * character did not), a bucket's key as it is. Nothing is added on a
 * failure.
 */
static int
folder_urls(const struct sk__source_ops *ops, const struct sk_url *u,
    const char *url, struct sk_strlist *out, struct sk_error *err)
{
	struct sk__entries e = { NULL, 0, 0 };
	int http = u->scheme == SK_SCHEME_HTTP || u->scheme == SK_SCHEME_HTTPS;
	size_t i, first = out->n;
	char *name = NULL, *full;
	int rc;

	rc = folder_entries(ops, u, url, &e, err);
	for (i = 0; rc == 0 && i < e.n; i++) {
		if (e.v[i].dir)
			continue;
		if (http)
			full = (name = sk__uri_escape(e.v[i].name, 0)) == NULL ?
			    NULL : sk__asprintf("%s%s", url, name);
		else
			full = sk__asprintf("%s://%s/%s%s",
			    sk_scheme_name(u->scheme), u->host, u->path,
			    e.v[i].name);
		if (full == NULL || sk_strlist_push(out, full) != 0)
			rc = sk_error_set(err, SK_ENOMEM, "out of memory");
		free(name);
		free(full);
		name = NULL;
	}
	sk__entries_free(&e);
	if (rc != 0) {
		while (out->n > first)
			free(out->v[--out->n]);
	} else if (out->n - first > 1)
		qsort(out->v + first, out->n - first, sizeof *out->v, cmp_str);
	return rc;
}

int
sk_source_list(const char *url, struct sk_strlist *out, struct sk_error *err)
{
	const struct sk__source_ops *ops;
	struct sk_url u;
	int rc;

	if ((rc = sk_url_parse(url, &u, err)) != 0)
		return rc;
	ops = backend(u.scheme);
	if (u.scheme == SK_SCHEME_FILE)
		rc = sk__file_list(&u, url, out, err);
	else if (ops == NULL || ops->list_entries == NULL)
		rc = sk_error_set(err, SK_EUNSUPPORTED,
		    "%s: listing %s:// is not built into this shardkit", url,
		    sk_scheme_name(u.scheme));
	else
		rc = folder_urls(ops, &u, url, out, err);
	sk_url_free(&u);
	return rc;
}

int
sk__read_whole(const char *url, size_t max, char **out, size_t *len,
    struct sk_error *err)
{
	sk_source *src = NULL;
	uint64_t size;
	int64_t got = 0;
	char *buf;
	int rc;

	*out = NULL;
	*len = 0;
	if (strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0)
		return sk__fetch_get(url, max, out, len, err);
	if ((rc = sk_source_open(&src, url)) != 0 ||
	    (rc = sk_source_size(src, &size)) != 0) {
		rc = sk_error_set(err, rc, "%s", sk_errmsg(src));
		sk_source_close(src);
		return rc;
	}
	if (size > max) {
		sk_source_close(src);
		return sk_error_set(err, SK_ETOOBIG, "%s: %" PRIu64 " bytes; at "
		    "most %zu are read", url, size, max);
	}
	if ((buf = malloc((size_t)size + 1)) == NULL) {
		sk_source_close(src);
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	while (*len < size && (got = sk_source_read(src, buf + *len,
	    (size_t)size - *len)) > 0)
		*len += (size_t)got;
	if (*len < size) {
		rc = sk_error_set(err, got < 0 ? (int)got : SK_EFORMAT, "%s",
		    got < 0 ? sk_errmsg(src) : "the object ended early");
		free(buf);
		sk_source_close(src);
		return rc;
	}
	buf[*len] = '\0';
	*out = buf;
	sk_source_close(src);
	return 0;
}

/* The backend of a bucket URL, or an error naming what is wanted. */
static const struct sk__source_ops *
bucket_ops(const char *url, struct sk_url *u, struct sk_error *err)
{
	const struct sk__source_ops *ops;

	if (sk_url_parse(url, u, err) != 0)
		return NULL;
	ops = backend(u->scheme);
	if (ops == NULL || ops->put == NULL || ops->del == NULL) {
		sk_error_set(err, SK_EUNSUPPORTED, "%s: cannot store objects "
		    "at a %s:// URL (want gs:// or s3://)", url,
		    sk_scheme_name(u->scheme));
		sk_url_free(u);
		return NULL;
	}
	return ops;
}

int
sk_object_put(const char *url, const void *data, size_t len,
    struct sk_error *err)
{
	const struct sk__source_ops *ops;
	struct sk_url u;
	int rc;

	if ((ops = bucket_ops(url, &u, err)) == NULL)
		return err->code;
	rc = ops->put(&u, url, data, len, err);
	sk_url_free(&u);
	return rc;
}

int
sk_object_delete(const char *url, struct sk_error *err)
{
	const struct sk__source_ops *ops;
	struct sk_url u;
	int rc;

	if ((ops = bucket_ops(url, &u, err)) == NULL)
		return err->code;
	rc = ops->del(&u, url, err);
	sk_url_free(&u);
	return rc;
}

int
sk_object_put_file(const char *url, const char *path, struct sk_error *err)
{
	return sk_object_sync_file(url, path, NULL, err);
}

/* The object already holds exactly data (or bytes of that size and md5,
 * when data is NULL): 1; not (or not there): 0. */
static int
object_same(const char *url, const void *data, uint64_t size,
    const char *md5, int *same, struct sk_error *err)
{
	const struct sk__source_ops *ops;
	struct sk_url u;
	int rc;

	*same = 0;
	if ((ops = bucket_ops(url, &u, err)) == NULL)
		return err->code;
	rc = ops->same != NULL ? ops->same(&u, url, data, size, md5, same,
	    err) : 0;
	sk_url_free(&u);
	return rc;
}

int
sk_object_same(const char *url, uint64_t size, const char *md5, int *same,
    struct sk_error *err)
{
	struct sk_error e2;
	struct sk_url u;
	struct stat st;
	uint64_t have;
	char hex[33];
	int rc;

	if (err == NULL)
		err = &e2;
	*same = 0;
	if (md5 == NULL || strlen(md5) != 32)
		return sk_error_set(err, SK_EINVAL, "%s: no MD5 to compare "
		    "with", url);
	if ((rc = sk_url_parse(url, &u, err)) != 0)
		return rc;
	if (u.scheme != SK_SCHEME_FILE) {
		sk_url_free(&u);
		return object_same(url, NULL, size, md5, same, err);
	}
	/* A local file: its size first, so that a different one is not
	 * read through. */
	rc = 0;
	if (stat(u.path, &st) != 0) {
		if (errno != ENOENT && errno != ENOTDIR)
			rc = sk_error_set(err, sk_errno_code(errno), "%s: %s",
			    url, strerror(errno));
	} else if (S_ISREG(st.st_mode) && (uint64_t)st.st_size == size &&
	    (rc = sk_source_md5(url, &have, hex, err)) == 0)
		*same = have == size && strcasecmp(hex, md5) == 0;
	sk_url_free(&u);
	return rc;
}

int
sk_object_sync_file(const char *url, const char *path, int *skipped,
    struct sk_error *err)
{
	struct stat st;
	void *map = NULL;
	int fd, rc, same = 0;

	/* Only a regular file, never through a link. */
	if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return sk_error_set(err, errno == ENOENT ? SK_ENOENT : SK_EIO,
		    "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return sk_error_set(err, SK_EINVAL, "%s: not a regular file",
		    path);
	}
	if (st.st_size > 0 && (map = mmap(NULL, (size_t)st.st_size,
	    PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
		rc = sk_error_set(err, SK_EIO, "%s: %s", path,
		    strerror(errno));
		close(fd);
		return rc;
	}
	close(fd);
	/* A store that will not say (no read permission, a failed HEAD)
	 * gets the upload, as if nothing were there. */
	rc = 0;
	if (skipped != NULL) {
		*skipped = 0;
		if (object_same(url, st.st_size > 0 ? map : "",
		    (uint64_t)st.st_size, NULL, &same, err) == 0 && same)
			*skipped = 1;
		else
			same = 0;
	}
	if (!same)
		rc = sk_object_put(url, st.st_size > 0 ? map : "",
		    (size_t)st.st_size, err);
	if (st.st_size > 0)
		munmap(map, (size_t)st.st_size);
	return rc;
}

/* What one folder of a bucket may list: a million shards. */
#define LIST_NAMES_MAX	1000000

int
sk__list_page(void)
{
	const char *v = getenv("SK_LIST_PAGE");
	long n;

	if (v == NULL || (n = strtol(v, NULL, 10)) < 1 || n > 1000)
		return 1000;
	return (int)n;
}

int
sk__list_check(const char *url, int page, size_t n, size_t before,
    size_t start, struct sk_error *err)
{
	if (n - before > (size_t)sk__list_page())
		return sk_error_set(err, SK_EFORMAT, "%s: page %d of the "
		    "listing holds %zu names, more than the %d asked for",
		    url, page, n - before, sk__list_page());
	if (n - start > LIST_NAMES_MAX)
		return sk_error_set(err, SK_ETOOBIG, "%s: more than %d names "
		    "in one folder", url, LIST_NAMES_MAX);
	return 0;
}

void
sk__list_guard_init(struct sk__list_guard *g)
{
	memset(g, 0, sizeof *g);
	g->t0 = (double)sk__now_ns() / 1e9;
}

void
sk__list_guard_free(struct sk__list_guard *g)
{
	free(g->seen);
	g->seen = NULL;
	g->n = g->cap = 0;
}

/* FNV-1a of s, never 0 (the free slot) */
static uint64_t
token_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (; *s != '\0'; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return h != 0 ? h : 1;
}

/* 1 when h was in the set, else adds it: 0, or -1 out of memory */
static int
seen_add(struct sk__list_guard *g, uint64_t h)
{
	size_t i;

	if (2 * (g->n + 1) > g->cap) {
		size_t cap = g->cap != 0 ? 2 * g->cap : 64, j;
		uint64_t *v = calloc(cap, sizeof *v);

		if (v == NULL)
			return -1;
		for (j = 0; j < g->cap; j++)
			if (g->seen[j] != 0) {
				for (i = g->seen[j] & (cap - 1); v[i] != 0;
				    i = (i + 1) & (cap - 1))
					;
				v[i] = g->seen[j];
			}
		free(g->seen);
		g->seen = v;
		g->cap = cap;
	}
	for (i = h & (g->cap - 1); g->seen[i] != 0; i = (i + 1) & (g->cap - 1))
		if (g->seen[i] == h)
			return 1;
	g->seen[i] = h;
	g->n++;
	return 0;
}

int
sk__list_guard_page(struct sk__list_guard *g, const char *url,
    const char *next, size_t added, struct sk_error *err)
{
	int r;

	g->empty = added != 0 ? 0 : g->empty + 1;
	if (next == NULL)
		return 0;
	if ((r = seen_add(g, token_hash(next))) < 0)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	if (r == 1)
		return sk_error_set(err, SK_EFORMAT, "%s: the listing gives a "
		    "page token it gave before, after %zu pages: the server "
		    "would list without end", url, g->n + 1);
	if (g->empty >= SK_LIST_EMPTY_MAX)
		return sk_error_set(err, SK_EFORMAT, "%s: %d pages in a row of "
		    "the listing held no name: the server would list without "
		    "end", url, g->empty);
	if ((double)sk__now_ns() / 1e9 - g->t0 > SK_LIST_SECONDS_MAX)
		return sk_error_set(err, SK_ETOOBIG, "%s: the listing has "
		    "taken more than %d seconds (%zu pages)", url,
		    SK_LIST_SECONDS_MAX, g->n + 1);
	return 0;
}

/* Tar shards by name, as pack writes them and webdataset reads them. */
int
sk__is_tar_name(const char *url)
{
	static const char *const exts[] = { ".tar", ".tar.gz", ".tgz",
	    ".tar.zst" };
	size_t len = strlen(url), i, n;

	for (i = 0; i < sizeof exts / sizeof exts[0]; i++) {
		n = strlen(exts[i]);
		if (len > n && strcmp(url + len - n, exts[i]) == 0)
			return 1;
	}
	return 0;
}

/* A wids manifest by name, as the tools tell one from a pattern. */
static int
is_manifest_name(const char *url)
{
	size_t n = strlen(url);

	return n > 5 && strcasecmp(url + n - 5, ".json") == 0;
}

/* The last segment of a URL, escaped for a terminal, into buf. */
static const char *
shown_base(char *buf, size_t cap, const char *url)
{
	const char *b = strrchr(url, '/');

	b = b != NULL ? b + 1 : url;
	sk_escape(buf, cap, b, strlen(b), 0);
	return buf;
}

/* "a.json", "a.json and b.json", "a.json, b.json and 3 more .json files" */
static void
name_list(char *dst, size_t cap, const struct sk_strlist *l)
{
	char a[256], b[256];

	if (l->n == 1)
		snprintf(dst, cap, "%s", shown_base(a, sizeof a, l->v[0]));
	else if (l->n == 2)
		snprintf(dst, cap, "%s and %s", shown_base(a, sizeof a,
		    l->v[0]), shown_base(b, sizeof b, l->v[1]));
	else
		snprintf(dst, cap, "%s, %s and %zu more .json files",
		    shown_base(a, sizeof a, l->v[0]), shown_base(b, sizeof b,
		    l->v[1]), l->n - 2);
}

char *
sk_source_folder_note(const char *url, size_t ntars,
    const struct sk_strlist *manifests, const char *done, const char *verb)
{
	char names[700], *shown, *note;

	if (manifests == NULL || manifests->n == 0)
		return NULL;
	name_list(names, sizeof names, manifests);
	if ((shown = sk_url_redact(url)) == NULL)
		return NULL;
	note = sk__asprintf("%s: %s the %zu .tar file%s of the folder; it also "
	    "holds %s (give %s to %s by the manifest)", shown, done, ntars,
	    ntars == 1 ? "" : "s", names, manifests->n == 1 ? "it" : "one",
	    verb);
	free(shown);
	return note;
}

int
sk_source_list_shards_seen(const char *url, struct sk_strlist *out,
    struct sk_strlist *manifests, struct sk_error *err)
{
	struct sk_strlist l = { NULL, 0, 0 }, m = { NULL, 0, 0 };
	size_t i, first = out->n;
	char names[700], *shown;
	int rc;

	if ((rc = sk_source_list(url, &l, err)) != 0)
		return rc;
	for (i = 0; i < l.n && rc == 0; i++)
		if ((sk__is_tar_name(l.v[i]) && sk_strlist_push(out,
		    l.v[i]) != 0) || (is_manifest_name(l.v[i]) &&
		    sk_strlist_push(&m, l.v[i]) != 0))
			rc = sk_error_set(err, SK_ENOMEM, "out of memory");
	sk_strlist_free(&l);
	if (rc == 0 && out->n == first) {
		/* The folder of a dataset named by its folder rather than
		 * its manifest: say which file to give. */
		shown = sk_url_redact(url);
		if (m.n > 0)
			name_list(names, sizeof names, &m);
		rc = sk_error_set(err, SK_ENOENT, "%s: no .tar files in this "
		    "folder%s%s%s", shown != NULL ? shown : url, m.n > 0 ?
		    "; it holds " : "", m.n > 0 ? names : "", m.n == 0 ? "" :
		    m.n == 1 ? ": give it to read by the manifest" :
		    ": give one to read by the manifest");
		free(shown);
	}
	for (i = 0; rc == 0 && manifests != NULL && i < m.n; i++)
		if (sk_strlist_push(manifests, m.v[i]) != 0)
			rc = sk_error_set(err, SK_ENOMEM, "out of memory");
	sk_strlist_free(&m);
	return rc;
}

int
sk_source_list_shards(const char *url, struct sk_strlist *out,
    struct sk_error *err)
{
	return sk_source_list_shards_seen(url, out, NULL, err);
}

void
sk__md5_of(const void *data, uint64_t size, char out[33])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;

	EVP_Digest(data, (size_t)size, md, &len, EVP_md5(), NULL);
	sk__md5_hex(md, out);
}

void
sk__md5_hex(const unsigned char *digest, char out[33])
{
	static const char hex[] = "0123456789abcdef";
	int i;

	for (i = 0; i < 16; i++) {
		out[2 * i] = hex[digest[i] >> 4];
		out[2 * i + 1] = hex[digest[i] & 15];
	}
	out[32] = '\0';
}

int
sk_source_md5(const char *url, uint64_t *size, char md5[33],
    struct sk_error *err)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	EVP_MD_CTX *ctx = NULL;
	sk_source *src = NULL;
	uint8_t *buf = NULL;
	int64_t got;
	int rc;

	*size = 0;
	if ((rc = sk_source_open(&src, url)) < 0) {
		sk_error_set(err, rc, "%s", sk_errmsg(src));
		goto out;
	}
	if ((buf = malloc(1 << 20)) == NULL ||
	    (ctx = EVP_MD_CTX_new()) == NULL ||
	    EVP_DigestInit_ex(ctx, EVP_md5(), NULL) != 1) {
		rc = sk_error_set(err, SK_ENOMEM, "%s: cannot start MD5", url);
		goto out;
	}
	while ((got = sk_source_read(src, buf, 1 << 20)) > 0) {
		EVP_DigestUpdate(ctx, buf, (size_t)got);
		*size += (uint64_t)got;
	}
	if (got < 0) {
		rc = sk_error_set(err, (int)got, "%s", sk_errmsg(src));
		goto out;
	}
	EVP_DigestFinal_ex(ctx, md, &mdlen);
	sk__md5_hex(md, md5);
	rc = 0;
out:
	EVP_MD_CTX_free(ctx);
	free(buf);
	sk_source_close(src);
	return rc;
}
