/*
 * fuzz_gcsjson.c - a libFuzzer target for what Google's servers' JSON can
 * do to shardkit: each input is read as a GCS error body, an objects.get
 * answer, an objects.list page (objects and folders with their sizes and
 * generations) and a token endpoint's (or the metadata server's) answer.
 * Built by ./configure --enable-fuzzing CC=clang.
 *
 * The token must never reach a message: an answer that carries one is
 * read again with the token's letters and digits rotated, and must fail
 * or succeed the same way with the same words.
 *
 * Seeds: tests/fuzz/seeds.sh DIR gcsjson.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "internal.h"
#include "cloud.h"

#define FROM		"https://oauth2.googleapis.com/token"
#define TOKEN_MAX	8192
#define EXPIRES_MAX	(7 * 86400)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A NUL within n bytes, and printable ASCII up to it. */
static void
clean(const char *s, size_t n)
{
	const char *z;

	if ((z = memchr(s, '\0', n)) == NULL)
		abort();
	for (; s < z; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			abort();
}

static void
error_body(const uint8_t *data, size_t size)
{
	char m[400], r[100];

	memset(m, 'x', sizeof m);
	memset(r, 'x', sizeof r);
	sk__gcs_parse_error((const char *)data, size, m, sizeof m, r,
	    sizeof r);
	clean(m, sizeof m);
	clean(r, sizeof r);
}

/* An accepted size is the decimal "size" of the answer, whole. */
static void
meta(const uint8_t *data, size_t size)
{
	struct sk_error err = { 0 };
	unsigned long long want;
	json_t *root;
	const char *sz;
	char gen[32], *end;
	uint64_t n = 0;
	int rc;

	memset(gen, 'x', sizeof gen);
	rc = sk__gcs_parse_meta((const char *)data, size, "gs://b/o", gen, &n,
	    &err);
	if (rc != 0) {
		if (rc != SK_EFORMAT || err.msg[0] == '\0')
			abort();
		return;
	}
	if (memchr(gen, '\0', sizeof gen) == NULL || gen[0] == '\0' ||
	    strspn(gen, "0123456789") != strlen(gen))
		abort();
	if ((root = json_loadb((const char *)data, size, 0, NULL)) == NULL)
		abort();
	sz = json_string_value(json_object_get(root, "size"));
	if (sz == NULL || *sz == '\0' || strspn(sz, "0123456789") !=
	    strlen(sz))
		abort();
	errno = 0;
	want = strtoull(sz, &end, 10);
	if (errno != 0 || want != n)
		abort();
	json_decref(root);
}

/* The page gives x under d/: a prefix "d/NAME/" for a folder; for an
 * object an item "d/NAME" whose size is exactly x's in digits and whose
 * generation is x's version (or which has none when that is ""). */
static int
given(json_t *root, const struct sk__entry *x)
{
	json_t *arr, *it, *name;
	const char *s, *sz, *gen;
	size_t i, n = strlen(x->name);
	uint64_t v;

	arr = json_object_get(root, x->dir ? "prefixes" : "items");
	json_array_foreach(arr, i, it) {
		name = x->dir ? it : json_object_get(it, "name");
		if ((s = json_string_value(name)) == NULL ||
		    json_string_length(name) != n + 2 + (size_t)x->dir ||
		    strncmp(s, "d/", 2) != 0 || memcmp(s + 2, x->name, n) != 0)
			continue;
		if (x->dir) {
			if (s[n + 2] == '/')
				return 1;
			continue;
		}
		sz = json_string_value(json_object_get(it, "size"));
		gen = json_string_value(json_object_get(it, "generation"));
		if (sz == NULL || sz[0] == '\0' || strspn(sz, "0123456789") !=
		    strlen(sz))
			continue;
		errno = 0;
		v = strtoull(sz, NULL, 10);
		if (errno == 0 && v == x->size && strcmp(gen != NULL ? gen : "",
		    x->version) == 0)
			return 1;
	}
	return 0;
}

static void
list(const uint8_t *data, size_t size)
{
	struct sk__entries l = { NULL, 0, 0 };
	struct sk_error err = { 0 };
	const struct sk__entry *x;
	char *next = (char *)"unset";
	json_t *root = NULL;
	size_t i;
	int rc;

	rc = sk__gcs_parse_list((const char *)data, size, "d/", "gs://b/d/",
	    &l, &next, &err);
	if (rc != 0 && rc != SK_EFORMAT && rc != SK_ENOMEM)
		abort();
	if (rc != 0 && (next != NULL || err.msg[0] == '\0'))
		abort();
	/* Each name is a string of its own: "d/x/", at least. */
	if (l.n > size / 6)
		abort();
	if (l.n > 0 && (root = json_loadb((const char *)data, size, 0,
	    NULL)) == NULL)
		abort();
	/* Only names right under the folder, one segment each, with what
	 * the page gave them. */
	for (i = 0; i < l.n; i++) {
		x = &l.v[i];
		if (!sk__entry_name_ok(x->name, strlen(x->name)) ||
		    memchr(x->version, '\0', sizeof x->version) == NULL ||
		    strspn(x->version, "0123456789") != strlen(x->version) ||
		    (x->dir && (x->size != 0 || x->version[0] != '\0')) ||
		    !given(root, x))
			abort();
	}
	json_decref(root);
	sk__entries_sort(&l, 0);
	for (i = 1; i < l.n; i++) {
		rc = strcmp(l.v[i - 1].name, l.v[i].name);
		if (rc > 0 || (rc == 0 && (!l.v[i - 1].dir || l.v[i].dir)))
			abort();
	}
	/* The token goes into a query as it is: escaped, never empty. */
	if (next != NULL && (next[0] == '\0' || strspn(next,
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	    "-._~%") != strlen(next) || strlen(next) > 3 * size))
		abort();
	free(next);
	sk__entries_free(&l);
}

static int
oauth(const char *body, size_t len, char **token, long *expires,
    struct sk_error *err)
{
	int rc;

	*expires = -1;
	memset(err, 0, sizeof *err);
	rc = sk__oauth_parse(body, len, FROM, token, expires, err);
	if (rc == 0) {
		size_t n;

		if (*token == NULL || (n = strlen(*token)) == 0 ||
		    n > TOKEN_MAX || *expires < 1 || *expires > EXPIRES_MAX)
			abort();
		for (; n > 0; n--)
			if ((unsigned char)(*token)[n - 1] <= ' ' ||
			    (unsigned char)(*token)[n - 1] >= 0x7f)
				abort();
	} else if (rc > 0 || *token != NULL || *expires != 0 ||
	    err->msg[0] == '\0' || memchr(err->msg, '\0',
	    sizeof err->msg) == NULL)
		abort();
	return rc;
}

static void
rotate(char *s)
{
	for (; *s != '\0'; s++)
		if (*s >= 'a' && *s <= 'z')
			*s = (char)('a' + (*s - 'a' + 13) % 26);
		else if (*s >= 'A' && *s <= 'Z')
			*s = (char)('A' + (*s - 'A' + 13) % 26);
		else if (*s >= '0' && *s <= '9')
			*s = (char)('0' + (*s - '0' + 5) % 10);
}

/*
 * The answer as the token endpoint gave it, then, when it holds a token
 * with a letter or digit, twice more as jansson writes it back: with the
 * token, and with the token rotated. Both must end the same way and say
 * the same thing: a message that quoted the token would differ.
 */
static void
token(const uint8_t *data, size_t size)
{
	struct sk_error ea, eb;
	json_t *root, *v;
	char *t, *ta = NULL, *tb = NULL, *a = NULL, *b = NULL;
	long xa, xb;
	int ra, rb;

	if (oauth((const char *)data, size, &t, &xa, &ea) == 0)
		free(t);

	if ((root = json_loadb((const char *)data, size, 0, NULL)) == NULL)
		return;
	v = json_object_get(root, "access_token");
	if (!json_is_string(v) || strpbrk(json_string_value(v),
	    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") ==
	    NULL)
		goto out;
	if ((a = json_dumps(root, JSON_COMPACT)) == NULL ||
	    (t = strdup(json_string_value(v))) == NULL)
		goto out;
	rotate(t);
	json_object_set_new(root, "access_token", json_string(t));
	free(t);
	if ((b = json_dumps(root, JSON_COMPACT)) == NULL)
		goto out;
	ra = oauth(a, strlen(a), &ta, &xa, &ea);
	rb = oauth(b, strlen(b), &tb, &xb, &eb);
	if (ra != rb || strcmp(ea.msg, eb.msg) != 0)
		abort();
	if (ra == 0) {
		rotate(ta);
		if (strcmp(ta, tb) != 0 || xa != xb)
			abort();
	}
out:
	free(ta);
	free(tb);
	free(a);
	free(b);
	json_decref(root);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	error_body(data, size);
	meta(data, size);
	list(data, size);
	token(data, size);
	return 0;
}
