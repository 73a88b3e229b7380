/*
 * fuzz_s3xml.c - a libFuzzer target for what an S3 server's XML can do to
 * shardkit: each input is parsed as an <Error> body, a ListObjectsV2 page
 * (at the bucket's root and under a folder) and an
 * InitiateMultipartUploadResult, by the expat readers s3:// uses. Built by
 * ./configure --enable-fuzzing CC=clang.
 *
 * Seeds: tests/fuzz/seeds.sh DIR s3xml.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void
list(const uint8_t *data, size_t size, const char *prefix)
{
	struct sk_strlist l = { NULL, 0, 0 };
	char token[4096], want[64];
	size_t i, k;
	int rc, truncated = -1;

	memset(token, 'x', sizeof token);
	rc = sk__s3_parse_list((const char *)data, size, "b", prefix, &l,
	    token, sizeof token, &truncated);
	if (rc != 0 && rc != SK_EFORMAT && rc != SK_ENOMEM)
		abort();
	/* Each key is an element of its own: "<Key/>" at least. */
	if (l.n > size / 6)
		abort();
	/* Only keys right under the folder, never one below or beside it. */
	snprintf(want, sizeof want, "s3://b/%s", prefix);
	k = strlen(want);
	for (i = 0; i < l.n; i++)
		if (strncmp(l.v[i], want, k) != 0 ||
		    strchr(l.v[i] + k, '/') != NULL)
			abort();
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
	sk_strlist_free(&l);
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
