/*
 * fuzz_manifest.c - a libFuzzer target for the manifest reader: each input
 * becomes the contents of an in-memory file that sk_manifest_read reads by
 * its path, as a NAME.json on disk would be. What it accepts must hold
 * together: URLs are non-empty strings, no URL twice, counts that fit the
 * stated file sizes, and it resolves and writes back as JSON. Built by
 * ./configure --enable-fuzzing CC=clang.
 *
 * Seeds: tests/fuzz/seeds.sh DIR manifest writes a few, then run
 *	tests/fuzz/fuzz_manifest -max_len=65536 corpus/ DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shardkit.h"
#include "memfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *path;	/* the input, as a file */

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* What the reader promises about a manifest it accepted. */
static void
check(const struct sk_manifest *m)
{
	struct sk_error err = { 0 };
	const char **urls;
	uint64_t total = 0, most;
	char *text, *r;
	size_t i;

	if (m->nshards > 0 && m->shards == NULL)
		abort();
	if ((urls = malloc((m->nshards + 1) * sizeof *urls)) == NULL)
		abort();
	for (i = 0; i < m->nshards; i++) {
		const struct sk_manifest_shard *s = &m->shards[i];
		size_t k = strlen(s->url);

		if (k == 0 || strlen(s->md5) > 32)
			abort();
		/* A plain tar of filesize bytes holds (filesize - 1024) / 512
		 * samples at most; compressed names are not bounded. (A
		 * filesize of 0 is also what a missing one reads as.) */
		most = s->filesize >= 1024 ? (s->filesize - 1024) / 512 :
		    s->filesize == 0 ? UINT64_MAX : 0;
		if (s->nsamples > most && strcasestr(s->url, ".gz") == NULL &&
		    strcasestr(s->url, ".zst") == NULL &&
		    strcasestr(s->url, ".tgz") == NULL &&
		    strcasestr(s->url, ".tzst") == NULL)
			abort();
		if (s->nsamples > (uint64_t)INT64_MAX - total)
			abort();
		total += s->nsamples;
		urls[i] = s->url;
		if ((r = sk_manifest_resolve(path, s->url)) == NULL)
			abort();
		free(r);
	}
	qsort(urls, m->nshards, sizeof *urls, cmp_str);
	for (i = 1; i < m->nshards; i++)
		if (strcmp(urls[i - 1], urls[i]) == 0)
			abort();
	free(urls);
	for (i = 0; i < m->nclasses; i++)
		if (m->classes == NULL || m->classes[i] == NULL)
			abort();
	/* What was read can be written back (non-UTF-8 names are refused
	 * there with a message, not a crash). */
	text = sk_manifest_dumps(m, &err);
	if (text == NULL && err.msg[0] == '\0')
		abort();
	free(text);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sk_manifest m;
	struct sk_error err = { 0 };
	int rc;

	path = memfile_load(data, size);
	rc = sk_manifest_read(path, &m, &err);
	if (rc == 0)
		check(&m);
	else if (rc > 0 || err.msg[0] == '\0' ||
	    strstr(err.msg, path) == NULL)
		abort();	/* a failure says why, naming the file */
	sk_manifest_free(&m);
	return 0;
}
