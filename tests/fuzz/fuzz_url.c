/*
 * fuzz_url.c - a libFuzzer target for what shardkit makes of the text a
 * user or a server hands it about URLs: the redaction every message and
 * --json goes through, manifest-relative resolution, the URL parser, a
 * Content-Range header, and an nginx JSON folder listing. Built by
 * ./configure --enable-fuzzing CC=clang.
 *
 * The input is up to three NUL- or newline-separated strings: A, B, rest.
 * Seeds: tests/fuzz/seeds.sh DIR url.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "fetch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sk_strlist l = { NULL, 0, 0 };
	struct sk_error err;
	struct sk_url u;
	uint64_t a, b, t;
	char *buf, *rest, *x, *y, *r;
	size_t i, n;

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

	/* A listing only ever names files directly in the folder. */
	if (sk__http_listing(rest, strlen(rest), "http://h/d/", "http://h/d/",
	    &l, &err) == 0)
		for (i = 0; i < l.n; i++)
			if (strncmp(l.v[i], "http://h/d/", 11) != 0 ||
			    strchr(l.v[i] + 11, '/') != NULL ||
			    l.v[i][11] == '\0' || l.v[i][11] == '.')
				abort();
	sk_strlist_free(&l);
	free(buf);
	return 0;
}
