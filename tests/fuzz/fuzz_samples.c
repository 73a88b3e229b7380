/*
 * fuzz_samples.c - a libFuzzer target for the sample reader, alone and
 * through the loader's I/O path: each input becomes the contents of an
 * in-memory file read as a shard on disk would be. The sample reader runs
 * with default flags and with SK_TAR_ALL_ENTRIES and a small byte limit;
 * then the loader streams the file as a one-shard data set (decoding
 * 8x8 images, so the I/O path and the decode hand-off both run).
 * Built by ./configure --enable-fuzzing CC=clang; seeds: tests/fuzz/seeds.sh
 * DIR samples.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shardkit.h"
#include "memfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static const char *url;	/* the input, as a file */

static int
want_odd(const char *ext, void *arg)
{
	(void)arg;
	return strlen(ext) % 2 == 1 || strcmp(ext, "cls") == 0;
}

static void
samples(int flags, uint64_t max_bytes)
{
	struct sk_sample_reader_opts o = { flags, max_bytes, 0 };
	struct sk_sample s;
	sk_sample_reader *r;
	sk_source *src;
	uint64_t last = 0, sum;
	size_t i;
	int rc;

	memset(&s, 0, sizeof s);
	if (sk_source_open(&src, url) != 0) {
		sk_source_close(src);
		return;
	}
	if (sk_sample_reader_open(&r, src, &o) != 0) {
		(void)sk_errmsg(r);
		sk_sample_reader_close(r);
		return;
	}
	while ((rc = sk_sample_reader_next(r, &s, want_odd, NULL)) == 1) {
		/* Samples come in file order, members under one key, and a
		 * loaded member holds exactly its size. */
		if (s.n == 0 || s.key == NULL || s.offset < last ||
		    s.n > SK_SAMPLE_MAX_MEMBERS)
			abort();
		last = s.offset;
		for (i = 0, sum = 0; i < s.n; i++) {
			if (strncmp(s.m[i].name, s.key, strlen(s.key)) != 0)
				abort();
			if (s.m[i].data != NULL && (s.too_big ||
			    s.m[i].type != SK_TAR_FILE))
				abort();
			sum += s.m[i].size;
		}
		if (sum != s.bytes || (s.too_big && s.bytes <= max_bytes))
			abort();
	}
	if (rc < 0 && *sk_errmsg(r) == '\0')
		abort();
	(void)sk_sample_reader_skipped(r);
	sk_sample_reader_close(r);
	sk_sample_free(&s);
}

static void
stream(void)
{
	struct sk_loader_config c;
	struct sk_loader_stats st;
	struct sk_batch b;
	sk_loader *l;
	int rc;

	sk_loader_config_init(&c);
	c.urls = url;
	c.batch = 2;
	c.image_size = 8;
	c.workers = 1;
	c.io_streams = 1;
	c.shuffle = 4;
	c.remainder = SK_REMAINDER_KEEP;
	c.max_pixels = 1 << 20;
	c.max_sample_bytes = 1 << 20;
	if (sk_loader_open(&l, &c) != 0) {
		if (l != NULL && *sk_errmsg(l) == '\0')
			abort();
		sk_loader_close(l);
		return;
	}
	while ((rc = sk_loader_next(l, &b)) > 0)
		if (sk_loader_release(l, &b) != 0)
			abort();
	/* Nothing is lost silently: every planned sample is delivered or
	 * counted as skipped. */
	if (rc == 0 && sk_loader_stats(l, &st) == 0 &&
	    st.samples + st.skipped_total != st.planned)
		abort();
	sk_loader_close(l);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	sk_log_set_level(SK_LOG_ERROR);	/* skips are expected */
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	url = memfile_load(data, size);
	samples(0, 0);
	samples(SK_TAR_ALL_ENTRIES, 1000);
	stream();
	return 0;
}
