/*
 * source_http.c - http(s):// sources over the fetch engine: a shard is a
 * stream of ranged GETs read ahead of the tar reader, and a directory URL
 * ending in '/' is listed from nginx's JSON autoindex.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "internal.h"
#include "fetch.h"

/* A listing is a few hundred bytes an entry: 64 MiB is ~200K shards. */
#define LIST_MAX_BYTES	((size_t)64 << 20)

int
sk__remote_start(sk_source *s, const char *url, uint64_t hint,
    const struct sk__auth *auth, const char *version)
{
	struct sk__stream *st = NULL;
	struct sk_error err;
	int rc;

	rc = sk__stream_start_auth(&st, url, s->url, hint, auth, version,
	    &err);
	if (rc != 0)
		return sk__fail(&s->h, rc, "%s", err.msg);
	s->impl = st;
	return 0;
}

int
sk__remote_pinned(sk_source *s, const char *url, uint64_t size,
    const char *etag, const char *lastmod, const struct sk__auth *auth,
    const char *version)
{
	struct sk__stream *st = NULL;
	struct sk_error err;
	int rc;

	rc = sk__stream_pinned(&st, url, s->url, size, etag, lastmod, auth,
	    version, &err);
	if (rc != 0)
		return sk__fail(&s->h, rc, "%s", err.msg);
	s->impl = st;
	return 0;
}

/*
 * Messages name the URL without its secrets; curl gets it whole. pinned:
 * NULL to open ahead, else a listing's version: an ETag, "mtime:SECONDS"
 * (nginx lists the time, which its Last-Modified repeats), or "".
 */
static int
http_open(sk_source *s, uint64_t hint, const char *pinned)
{
	char *url = s->url, *display, date[64];
	long long t;
	time_t tt;
	struct tm tm;
	int rc, n = 0;

	if ((display = sk_url_redact(url)) == NULL)
		return sk__fail(&s->h, SK_ENOMEM, "out of memory");
	s->url = display;
	date[0] = '\0';
	if (pinned != NULL && sscanf(pinned, "mtime:%lld%n", &t, &n) == 1 &&
	    pinned[n] == '\0' && t > 0) {
		tt = (time_t)t;
		if (gmtime_r(&tt, &tm) == NULL || strftime(date, sizeof date,
		    "%a, %d %b %Y %H:%M:%S GMT", &tm) == 0)
			date[0] = '\0';
		pinned = "";
	} else if (pinned != NULL && pinned[0] != '\0' && pinned[0] != '"' &&
	    strncmp(pinned, "W/", 2) != 0) {
		free(url);
		return sk__fail(&s->h, SK_EINVAL, "%s: \"%.40s\" is not a "
		    "version of an http object", s->url, pinned);
	}
	if (pinned != NULL)
		rc = sk__remote_pinned(s, url, hint, pinned, date, NULL, NULL);
	else
		rc = sk__remote_start(s, url, hint, NULL, NULL);
	free(url);
	return rc;
}

static int
http_open_ahead(sk_source *s, const struct sk_url *u, uint64_t hint)
{
	(void)u;
	return http_open(s, hint, NULL);
}

/* version is an ETag, or "": nginx lists none, so the first response's
 * pins the object. */
static int
http_open_pinned(sk_source *s, const struct sk_url *u, uint64_t size,
    const char *version)
{
	(void)u;
	return http_open(s, size, version);
}

int
sk__remote_ready(sk_source *s)
{
	struct sk_error err;
	int rc;

	if ((rc = sk__stream_wait(s->impl, &err)) != 0)
		return sk__fail(&s->h, rc, "%s", err.msg);
	return 0;
}

int64_t
sk__remote_pread(sk_source *s, void *buf, size_t n, uint64_t off)
{
	struct sk_error err;
	int64_t got;

	got = sk__stream_pread(s->impl, buf, n, off, &err);
	if (got < 0)
		return sk__fail(&s->h, (int)got, "%s", err.msg);
	return got;
}

int64_t
sk__remote_peek(sk_source *s, const void **ptr, size_t n, uint64_t off)
{
	struct sk_error err;
	int64_t got;

	got = sk__stream_peek(s->impl, ptr, n, off, &err);
	if (got < 0)
		return sk__fail(&s->h, (int)got, "%s", err.msg);
	return got;
}

int
sk__remote_size(sk_source *s, uint64_t *size)
{
	int rc;

	if ((rc = sk__remote_ready(s)) != 0)
		return rc;
	*size = sk__stream_size(s->impl);
	return 0;
}

void
sk__remote_close(sk_source *s)
{
	sk__stream_close(s->impl);
	s->impl = NULL;
}

/*
 * nginx "autoindex on; autoindex_format json;": an array of
 * {"name", "type": "file"|"directory"|"other", "mtime", "size"}, one
 * folder deep. nginx lists no name that begins with a dot (its autoindex
 * skips them), and neither does this; "other" (a device, a socket) is
 * neither a file nor a folder.
 */
int
sk__http_listing(const char *text, size_t len, const char *display,
    struct sk__entries *out, struct sk_error *err)
{
	const char *type, *nm, *mt, *first = NULL;
	json_error_t jerr;
	json_t *root, *e, *name, *size;
	size_t i, n, nosize = 0;
	int dir, rc = 0;

	sk__json_scratch_begin();
	root = json_loadb(text, len, 0, &jerr);
	if (root == NULL || !json_is_array(root)) {
		json_decref(root);
		sk__json_scratch_end();
		return sk_error_set(err, SK_EFORMAT, "%s: not a JSON listing (an "
		    "nginx folder with \"autoindex on; autoindex_format json;\""
		    "; give a manifest or a pattern instead)", display);
	}
	json_array_foreach(root, i, e) {
		name = json_object_get(e, "name");
		type = json_string_value(json_object_get(e, "type"));
		if ((nm = json_string_value(name)) == NULL || type == NULL)
			continue;
		if (strcmp(type, "directory") == 0)
			dir = 1;
		else if (strcmp(type, "file") == 0)
			dir = 0;
		else
			continue;
		n = json_string_length(name);
		if (!sk__entry_name_ok(nm, n) || nm[0] == '.')
			continue;
		/* nginx gives every file its size as a JSON integer: a file
		 * without one is left out, and counted below. */
		size = json_object_get(e, "size");
		if (!dir && (!json_is_integer(size) ||
		    json_integer_value(size) < 0)) {
			if (nosize++ == 0)
				first = nm;
			continue;
		}
		mt = json_string_value(json_object_get(e, "mtime"));
		if (sk__entries_add(out, nm, n, dir, dir ? 0 :
		    (uint64_t)json_integer_value(size), mt != NULL ?
		    sk__time_http(mt) : 0, "") != 0) {
			rc = sk_error_set(err, SK_ENOMEM, "out of memory");
			break;
		}
	}
	if (rc == 0 && nosize > 0)
		sk_log(SK_LOG_WARN, "%s: %zu file%s with no size in bytes in "
		    "the listing %s left out (the first: %.60s)", display,
		    nosize, nosize == 1 ? "" : "s", nosize == 1 ? "is" : "are",
		    first);
	json_decref(root);
	sk__json_scratch_end();
	return rc;
}

static int
http_list_entries(const struct sk_url *u, const char *url,
    struct sk__entries *out, struct sk_error *err)
{
	size_t len = 0;
	char *text = NULL, *display;
	int rc;

	(void)u;
	if ((display = sk_url_redact(url)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	if ((rc = sk__fetch_get(url, LIST_MAX_BYTES, &text, &len, err)) == 0)
		rc = sk__http_listing(text, len, display, out, err);
	free(text);
	free(display);
	return rc;
}

const struct sk__source_ops sk__source_http_ops = {
	.name = "http",
	.open_ahead = http_open_ahead,
	.open_pinned = http_open_pinned,
	.ready = sk__remote_ready,
	.pread = sk__remote_pread,
	.peek = sk__remote_peek,
	.size = sk__remote_size,
	.close = sk__remote_close,
	.list_entries = http_list_entries,
};
