/*
 * fuzz_s3xml.c - a libFuzzer target for what an S3 server's XML can do to
 * shardkit: each input is parsed as an <Error> body, a ListObjectsV2 page
 * (at the bucket's root and under a folder: objects with their sizes and
 * ETags, and subfolders) and an InitiateMultipartUploadResult, by the
 * expat readers s3:// uses. Built by
 * ./configure --enable-fuzzing CC=clang.
 *
 * Seeds: tests/fuzz/seeds.sh DIR s3xml.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <expat.h>

#include "internal.h"
#include "cloud.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A NUL within n bytes, and printable ASCII up to it (what reaches a
 * terminal); its length. */
static size_t
clean_len(const char *s, size_t n)
{
	const char *z;
	size_t i;

	if ((z = memchr(s, '\0', n)) == NULL)
		abort();
	for (i = 0; s + i < z; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
			abort();
	return (size_t)(z - s);
}

/* Does the input hold this text anywhere (it need not be a string)? */
static int
has(const uint8_t *data, size_t size, const char *what)
{
	return memmem(data, size, what, strlen(what)) != NULL;
}

/*
 * What the page says, read again with expat the way s3:// reads it (an
 * element's text is what follows its last child): the text of each Key
 * and Size of a Contents, numbered by their Contents, and of each
 * CommonPrefixes Prefix.
 */
struct said {
	XML_Parser p;
	char path[1024];
	char *text;
	size_t tlen, n, cap;
	int contents;
	struct {
		int contents;	/* 0: a Prefix */
		char kind;	/* 'k' Key, 's' Size, 'p' Prefix */
		char *text;
	} *v;
};

static void
said_start(void *arg, const XML_Char *name, const XML_Char **attrs)
{
	struct said *w = arg;
	size_t n = strlen(w->path);

	(void)attrs;
	snprintf(w->path + n, sizeof w->path - n, "/%s", name);
	w->tlen = 0;
	if (strcmp(w->path, "/ListBucketResult/Contents") == 0)
		w->contents++;
}

static void
said_end(void *arg, const XML_Char *name)
{
	struct said *w = arg;
	char kind = 0, *slash;

	(void)name;
	if (strcmp(w->path, "/ListBucketResult/Contents/Key") == 0)
		kind = 'k';
	else if (strcmp(w->path, "/ListBucketResult/Contents/Size") == 0)
		kind = 's';
	else if (strcmp(w->path, "/ListBucketResult/CommonPrefixes/Prefix") ==
	    0)
		kind = 'p';
	if (kind != 0) {
		if (w->n == w->cap) {
			w->cap = w->cap ? 2 * w->cap : 16;
			if ((w->v = realloc(w->v, w->cap * sizeof *w->v)) ==
			    NULL)
				abort();
		}
		w->v[w->n].contents = kind == 'p' ? 0 : w->contents;
		w->v[w->n].kind = kind;
		if ((w->v[w->n].text = strndup(w->text ? w->text : "",
		    w->tlen)) == NULL)
			abort();
		w->n++;
	}
	if ((slash = strrchr(w->path, '/')) != NULL)
		*slash = '\0';
	w->tlen = 0;
}

static void
said_chars(void *arg, const XML_Char *s, int len)
{
	struct said *w = arg;

	if ((w->text = realloc(w->text, w->tlen + (size_t)len + 1)) == NULL)
		abort();
	memcpy(w->text + w->tlen, s, (size_t)len);
	w->tlen += (size_t)len;
}

static void
said_read(struct said *w, const uint8_t *data, size_t size)
{
	memset(w, 0, sizeof *w);
	if ((w->p = XML_ParserCreate("UTF-8")) == NULL)
		abort();
	XML_SetUserData(w->p, w);
	XML_SetElementHandler(w->p, said_start, said_end);
	XML_SetCharacterDataHandler(w->p, said_chars);
	/* What came before an error is what s3:// read too. */
	if (size <= INT32_MAX)
		XML_Parse(w->p, (const char *)data, (int)size, XML_TRUE);
	XML_ParserFree(w->p);
}

static void
said_free(struct said *w)
{
	size_t i;

	for (i = 0; i < w->n; i++)
		free(w->v[i].text);
	free(w->v);
	free(w->text);
}

/* The page gives x under prefix: a Prefix "prefix NAME/" for a folder; a
 * Contents with the Key "prefix NAME" and a Size of exactly x's digits
 * for an object. */
static int
given(const struct said *w, const char *prefix, const struct sk__entry *x)
{
	char want[4200];
	unsigned long long v;
	size_t i, j;
	char *end;

	snprintf(want, sizeof want, "%s%s%s", prefix, x->name,
	    x->dir ? "/" : "");
	for (i = 0; i < w->n; i++) {
		if (strcmp(w->v[i].text, want) != 0 ||
		    w->v[i].kind != (x->dir ? 'p' : 'k'))
			continue;
		if (x->dir)
			return 1;
		for (j = 0; j < w->n; j++) {
			if (w->v[j].kind != 's' ||
			    w->v[j].contents != w->v[i].contents ||
			    w->v[j].text[0] == '\0' ||
			    strspn(w->v[j].text, "0123456789") !=
			    strlen(w->v[j].text))
				continue;
			errno = 0;
			v = strtoull(w->v[j].text, &end, 10);
			if (errno == 0 && v == x->size)
				return 1;
		}
	}
	return 0;
}

static void
list(const uint8_t *data, size_t size, const char *prefix)
{
	struct sk__entries l = { NULL, 0, 0 };
	struct sk_error err = { 0 };
	const struct sk__entry *x;
	struct said w;
	char token[4096];
	size_t i;
	int rc, c, truncated = -1;

	memset(token, 'x', sizeof token);
	rc = sk__s3_parse_list((const char *)data, size, prefix, "s3://b/d/",
	    &l, token, sizeof token, &truncated, &err);
	if (rc != 0 && ((rc != SK_EFORMAT && rc != SK_ENOMEM) ||
	    err.msg[0] == '\0'))
		abort();
	/* Each name is an element of its own: "<Prefix>x/</Prefix>" at
	 * least. */
	if (l.n > size / 19)
		abort();
	/* Only names right under the folder, never one below or beside it,
	 * one segment each, with the size the page gave and a version that
	 * can go into a request as it is. */
	said_read(&w, data, size);
	for (i = 0; i < l.n; i++) {
		x = &l.v[i];
		if (!sk__entry_name_ok(x->name, strlen(x->name)) ||
		    memchr(x->version, '\0', sizeof x->version) == NULL ||
		    !sk__entry_version_ok(x->version) ||
		    (x->dir && (x->size != 0 || x->version[0] != '\0')) ||
		    !given(&w, prefix, x))
			abort();
	}
	said_free(&w);
	sk__entries_sort(&l, 0);
	for (i = 1; i < l.n; i++) {
		c = strcmp(l.v[i - 1].name, l.v[i].name);
		if (c > 0 || (c == 0 && (!l.v[i - 1].dir || l.v[i].dir)))
			abort();
	}
	if (rc == 0) {
		if (memchr(token, '\0', sizeof token) == NULL ||
		    strlen(token) > size)
			abort();
		if (truncated != 0 && truncated != 1)
			abort();
		if (truncated && !has(data, size, "IsTruncated"))
			abort();
		if (token[0] != '\0' &&
		    !has(data, size, "NextContinuationToken"))
			abort();
	}
	sk__entries_free(&l);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sk__s3_error e;
	char id[1024];
	int rc;

	/* An error body: only ever printable, bounded words. */
	rc = sk__s3_parse_error((const char *)data, size, &e);
	if (rc != 0 && rc != SK_EFORMAT)
		abort();
	if (clean_len(e.code, sizeof e.code) > size ||
	    clean_len(e.message, sizeof e.message) > size)
		abort();
	if (e.code[0] != '\0' && !has(data, size, "Code"))
		abort();

	list(data, size, "");
	list(data, size, "dir/");

	memset(id, 'x', sizeof id);
	rc = sk__s3_parse_upload_id((const char *)data, size, id, sizeof id);
	if (rc != 0 && rc != SK_EFORMAT)
		abort();
	if (rc == 0 && (memchr(id, '\0', sizeof id) == NULL ||
	    id[0] == '\0' || strlen(id) > size ||
	    !has(data, size, "UploadId")))
		abort();
	return 0;
}
