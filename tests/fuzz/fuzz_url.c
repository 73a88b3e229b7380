/*
 * fuzz_url.c - a libFuzzer target for what shardkit makes of the text a
 * user or a server hands it about URLs: the redaction every message and
 * --json goes through, manifest-relative resolution, the URL parser, a
 * Content-Range header, the times listings give, and an nginx JSON folder
 * listing with sizes and times. Built by ./configure --enable-fuzzing
 * CC=clang.
 *
 * The input is up to three NUL- or newline-separated strings: A, B, rest.
 * Seeds: tests/fuzz/seeds.sh DIR url.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "internal.h"
#include "fetch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Year 0 to 9999, a day either side for an offset. */
#define TIME_MIN	(-62167219200LL - 86400)
#define TIME_MAX	(253402300800LL + 86400)

/* The n-th '\n'-separated field of s (s is modified). */
static char *
field(char **s)
{
	char *f = *s, *nl = strchr(f, '\n');

	if (nl != NULL) {
		*nl = '\0';
		*s = nl + 1;
	} else
		*s = f + strlen(f);
	return f;
}

/* The listing gives x: a folder of its name, or a file of its name and
 * exactly its size. */
static int
given(json_t *root, const struct sk__entry *x)
{
	json_t *e, *name, *size;
	const char *type;
	size_t i;

	json_array_foreach(root, i, e) {
		name = json_object_get(e, "name");
		type = json_string_value(json_object_get(e, "type"));
		size = json_object_get(e, "size");
		if (json_string_value(name) == NULL || type == NULL ||
		    json_string_length(name) != strlen(x->name) ||
		    strcmp(json_string_value(name), x->name) != 0)
			continue;
		if (x->dir && strcmp(type, "directory") == 0)
			return 1;
		if (!x->dir && strcmp(type, "file") == 0 &&
		    json_is_integer(size) &&
		    (uint64_t)json_integer_value(size) == x->size)
			return 1;
	}
	return 0;
}

/* A listing only ever names entries right in the folder, each one of
 * its own with the size it was given; sorted, each name once a kind. */
static void
listing(const char *text)
{
	struct sk__entries e = { NULL, 0, 0 };
	struct sk_error err = { 0 };
	size_t i, len = strlen(text);
	const struct sk__entry *x;
	json_t *root;
	int rc;

	rc = sk__http_listing(text, len, "http://h/d/", &e, &err);
	if (rc != 0 && ((rc != SK_EFORMAT && rc != SK_ENOMEM) ||
	    err.msg[0] == '\0'))
		abort();
	/* {"name":"x","type":"directory"} at least. */
	if (e.n > len / 30)
		abort();
	root = e.n > 0 ? json_loadb(text, len, 0, NULL) : NULL;
	if (e.n > 0 && root == NULL)
		abort();
	for (i = 0; i < e.n; i++) {
		x = &e.v[i];
		if (!sk__entry_name_ok(x->name, strlen(x->name)) ||
		    x->name[0] == '.' || x->version[0] != '\0' ||
		    (x->dir && x->size != 0) || x->mtime < TIME_MIN ||
		    x->mtime > TIME_MAX || !given(root, x))
			abort();
	}
	json_decref(root);
	sk__entries_sort(&e, 0);
	for (i = 1; i < e.n; i++) {
		rc = strcmp(e.v[i - 1].name, e.v[i].name);
		if (rc > 0 || (rc == 0 && (!e.v[i - 1].dir || e.v[i].dir)))
			abort();
	}
	sk__entries_free(&e);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sk_error err;
	struct sk_url u;
	uint64_t a, b, t;
	int64_t when;
	char *buf, *rest, *x, *y, *r;
	size_t n;

	if ((buf = malloc(size + 1)) == NULL)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	rest = buf;
	x = field(&rest);
	y = field(&rest);

	/* Redaction keeps the length within its bound and never grows a
	 * URL without secrets. */
	if ((r = sk_url_redact(x)) == NULL)
		abort();
	n = strlen(x);
	if (strlen(r) > n + 4 * (n / 2 + 1))
		abort();
	free(r);

	if ((r = sk_manifest_resolve(x, y)) != NULL) {
		if (strstr(y, "://") != NULL && strcmp(r, y) != 0)
			abort();
		free(r);
	}

	if (sk_url_parse(x, &u, &err) == 0)
		sk_url_free(&u);

	if (sk__parse_crange(y, &a, &b, &t) == 0 && a > b)
		abort();

	when = sk__time_rfc3339(y);
	if (when < TIME_MIN || when > TIME_MAX)
		abort();
	when = sk__time_http(y);
	if (when < TIME_MIN || when > TIME_MAX)
		abort();

	listing(rest);
	free(buf);
	return 0;
}
