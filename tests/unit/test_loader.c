/*
 * test_loader.c - the streaming loader end to end on shards the tests
 * write: every sample once over any number of ranks, the same batches for
 * any thread counts, resume, epochs, the remainder policy, and bad input
 * (corrupt images, missing labels, damaged and missing shards).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */

/* A small JPEG whose pixels depend on i, so checksums tell samples apart. */
static void
make_jpeg(int i, int w, int h, uint8_t **out, size_t *len)
{
	uint8_t *pix = malloc((size_t)w * h * 3);
	struct sk_error err;
	int x, y;

	CHECK(pix != NULL);
	for (y = 0; y < h; y++)
		for (x = 0; x < w; x++) {
			uint8_t *p = pix + ((size_t)y * w + x) * 3;

			p[0] = (uint8_t)(x * 7 + i * 13);
			p[1] = (uint8_t)(y * 5 + i * 29);
			p[2] = (uint8_t)((x ^ y) + i * 3);
		}
	CHECK_OK(sk_image_encode_jpeg(pix, w, h, 3, 90, out, len, &err), &err);
	free(pix);
}

enum { F_BAD_JPEG = 1, F_NO_LABEL = 2, F_NO_IMAGE = 4 };

/*
 * Write nshards shards of per samples each as DIR/s-NNNNNN.tar and a
 * manifest DIR/s.json. Sample keys are "sNNNNNN" numbered across shards;
 * flags(i) says what to break in sample i.
 */
static void
make_shards(int nshards, int per, int (*flags)(int))
{
	struct sk_manifest m;
	struct sk_shard_info info;
	struct sk_error err;
	sk_tar_writer *w;
	char path[256], name[64], cls[16], url[64];
	uint8_t *jpg;
	size_t len;
	int s, k, i, f;

	memset(&m, 0, sizeof m);
	for (s = 0; s < nshards; s++) {
		snprintf(url, sizeof url, "s-%06d.tar", s);
		snprintf(path, sizeof path, "%s/%s", t_tmpdir(), url);
		CHECK_OK(sk_tar_writer_open(&w, path, NULL), w);
		for (k = 0; k < per; k++) {
			i = s * per + k;
			f = flags != NULL ? flags(i) : 0;
			make_jpeg(i, 40 + i % 7, 30 + i % 5, &jpg, &len);
			if (f & F_BAD_JPEG)
				memset(jpg + len / 2, 0x55, len / 4);
			snprintf(name, sizeof name, "s%06d.cls", i);
			snprintf(cls, sizeof cls, "%d", i % 10);
			if (!(f & F_NO_LABEL))
				CHECK_OK(sk_tar_writer_add(w, name, cls,
				    strlen(cls)), w);
			snprintf(name, sizeof name, "s%06d.jpg", i);
			if (!(f & F_NO_IMAGE))
				CHECK_OK(sk_tar_writer_add(w, name, jpg, len),
				    w);
			snprintf(name, sizeof name, "s%06d.json", i);
			CHECK_OK(sk_tar_writer_add(w, name, "{}", 2), w);
			free(jpg);
		}
		CHECK_OK(sk_tar_writer_close(w, &info, &err), &err);
		CHECK_OK(sk_manifest_add_shard(&m, url, (uint64_t)per,
		    info.filesize, info.md5), &err);
	}
	snprintf(path, sizeof path, "%s/s.json", t_tmpdir());
	CHECK_OK(sk_manifest_write(path, &m, &err), &err);
	sk_manifest_free(&m);
}

static void
small_config(struct sk_loader_config *c, int batch)
{
	sk_loader_config_init(c);
	c->manifest = t_path("s.json");
	c->batch = batch;
	c->image_size = 16;
	c->workers = 2;
	c->shuffle = 20;
	c->seed = 7;
}

static uint64_t
fnv(const void *p, size_t n, uint64_t h)
{
	const uint8_t *b = p;

	while (n-- > 0) {
		h ^= *b++;
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* What a run delivered: "epoch/batch/key/label/pixel hash" per sample in
 * order, and the counts. */
struct run {
	char *text;
	size_t len, cap;
	int batches;
	int samples;
	struct sk_loader_stats st;
};

static void
run_add(struct run *r, const char *s)
{
	size_t n = strlen(s);

	if (r->len + n + 1 > r->cap) {
		r->cap = (r->len + n + 1) * 2;
		r->text = realloc(r->text, r->cap);
		CHECK(r->text != NULL);
	}
	memcpy(r->text + r->len, s, n + 1);
	r->len += n;
}

/* A line per sample: epoch/batch/key/label/pixel hash. */
static void
run_add_batch(struct run *r, const struct sk_batch *b)
{
	char line[256];
	int i;

	for (i = 0; i < b->n; i++) {
		snprintf(line, sizeof line, "%d/%lld/%s/%d/%016llx\n",
		    b->epoch, (long long)b->index, b->keys[i],
		    (int)b->labels[i], (unsigned long long)fnv(
		    (const uint8_t *)b->images + (size_t)i * b->image_bytes,
		    b->image_bytes, 14695981039346656037ULL));
		run_add(r, line);
	}
}

static void
run_loader(const struct sk_loader_config *c, struct run *r)
{
	sk_loader *l;
	struct sk_batch b;
	int rc;

	memset(r, 0, sizeof *r);
	run_add(r, "");
	CHECK_OK(sk_loader_open(&l, c), l);
	while ((rc = sk_loader_next(l, &b)) > 0) {
		run_add_batch(r, &b);
		r->batches++;
		r->samples += b.n;
		CHECK_OK(sk_loader_release(l, &b), l);
	}
	CHECK_OK(rc, l);
	CHECK_OK(sk_loader_stats(l, &r->st), l);
	sk_loader_close(l);
}

static int
count_lines_with(const char *text, const char *needle)
{
	int n = 0;

	while ((text = strstr(text, needle)) != NULL) {
		n++;
		text += strlen(needle);
	}
	return n;
}

/* ------------------------------------------------------------------------ */
/* coverage over ranks                                                      */

TEST(loader_ranks_cover_each_sample_once)
{
	struct sk_loader_config c;
	struct run r;
	char key[32];
	int world, rank, i, n, seen, total, batches;
	uint64_t dropped;

	/* 5 shards of 23: 115 samples, which no world here divides. */
	make_shards(5, 23, NULL);
	for (world = 1; world <= 4; world++) {
		char *all = calloc(1, 1);
		size_t alllen = 0;

		batches = -1;
		total = 0;
		dropped = 0;
		for (rank = 0; rank < world; rank++) {
			small_config(&c, 8);
			c.rank = rank;
			c.world = world;
			c.decode = 0;
			run_loader(&c, &r);
			if (batches < 0)
				batches = r.batches;
			/* DDP: every rank steps the same number of times. */
			CHECK_EQ_INT(r.batches, batches);
			CHECK_EQ_INT(r.batches, (115 / world) / 8);
			CHECK_EQ_INT(r.samples, r.batches * 8);
			total += r.samples;
			dropped += r.st.dropped;
			all = realloc(all, alllen + r.len + 1);
			memcpy(all + alllen, r.text, r.len + 1);
			alllen += r.len;
			free(r.text);
		}
		/* Nothing repeats, and only the documented remainder (each
		 * rank's samples past its last full batch) is left out. */
		for (i = 0, seen = 0; i < 115; i++) {
			snprintf(key, sizeof key, "/s%06d/", i);
			n = count_lines_with(all, key);
			CHECK(n <= 1);
			seen += n;
		}
		CHECK_EQ_INT(seen, total);
		CHECK_EQ_INT((uint64_t)total + dropped, 115);
		for (rank = 0, n = 0; rank < world; rank++)
			n += (int)((115 * (rank + 1)) / world -
			    (115 * rank) / world) - batches * 8;
		CHECK_EQ_INT(dropped, n);
		free(all);
	}
}

TEST(loader_remainder_keep_delivers_everything)
{
	struct sk_loader_config c;
	struct run r;
	int world, rank, total, batches;

	make_shards(3, 10, NULL);
	for (world = 1; world <= 4; world++) {
		total = 0;
		batches = -1;
		for (rank = 0; rank < world; rank++) {
			small_config(&c, 4);
			c.rank = rank;
			c.world = world;
			c.remainder = SK_REMAINDER_KEEP;
			c.decode = 0;
			run_loader(&c, &r);
			if (batches < 0)
				batches = r.batches;
			CHECK_EQ_INT(r.batches, batches);
			CHECK_EQ_INT(r.st.dropped, 0);
			total += r.samples;
			free(r.text);
		}
		CHECK_EQ_INT(total, 30);
	}
}

/* ------------------------------------------------------------------------ */
/* determinism                                                              */

TEST(loader_same_batches_for_any_threads)
{
	struct sk_loader_config c;
	struct run a, b;
	static const int workers[] = { 1, 4, 3 }, io[] = { 1, 4, 2 };
	int i;

	make_shards(6, 17, NULL);
	small_config(&c, 10);
	c.epochs = 2;
	c.workers = 2;
	c.io_streams = 2;
	run_loader(&c, &a);
	CHECK(a.samples == 2 * 100);
	for (i = 0; i < 3; i++) {
		small_config(&c, 10);
		c.epochs = 2;
		c.workers = workers[i];
		c.io_streams = io[i];
		c.prefetch_bytes = i == 2 ? 4096 : 0;	/* tiny: always full */
		run_loader(&c, &b);
		CHECK_EQ_STR(a.text, b.text);
		free(b.text);
	}
	/* Epochs differ in order, and so do seeds. */
	CHECK(strstr(a.text, "\n1/0/") != NULL);
	small_config(&c, 10);
	c.seed = 8;
	c.epochs = 2;
	run_loader(&c, &b);
	CHECK(strcmp(a.text, b.text) != 0);
	free(b.text);
	free(a.text);
}

TEST(loader_resume_gives_the_tail)
{
	struct sk_loader_config c;
	struct run full, tail;
	const char *p;
	int k;

	make_shards(4, 25, NULL);
	small_config(&c, 8);
	c.epochs = 2;
	run_loader(&c, &full);
	for (k = 1; k < 12; k += 5) {
		char mark[32];

		small_config(&c, 8);
		c.epochs = 2;
		c.resume_batch = k;
		run_loader(&c, &tail);
		snprintf(mark, sizeof mark, "0/%d/", k);
		p = strstr(full.text, mark);
		CHECK(p != NULL);
		CHECK(p == full.text || p[-1] == '\n');
		CHECK_EQ_STR(p, tail.text);
		CHECK_EQ_INT(tail.batches, full.batches - k);
		free(tail.text);
	}
	free(full.text);
}

TEST(loader_shuffle_reorders_within_the_set)
{
	struct sk_loader_config c;
	struct run a, b;
	char key[32];
	int i;

	make_shards(2, 30, NULL);
	small_config(&c, 6);
	c.shuffle = 0;
	c.decode = 0;
	run_loader(&c, &a);
	small_config(&c, 6);
	c.shuffle = 25;
	c.decode = 0;
	run_loader(&c, &b);
	CHECK(strcmp(a.text, b.text) != 0);
	for (i = 0; i < 60; i++) {
		snprintf(key, sizeof key, "/s%06d/", i);
		CHECK_EQ_INT(count_lines_with(a.text, key),
		    count_lines_with(b.text, key));
	}
	free(a.text);
	free(b.text);
}

/* ------------------------------------------------------------------------ */
/* output                                                                   */

TEST(loader_dtypes_and_layouts_agree)
{
	struct sk_loader_config c;
	sk_loader *l[2];
	struct sk_batch b[2];
	const uint8_t *u8;
	const float *f;
	int i, ch, S = 16, k;

	make_shards(1, 12, NULL);
	small_config(&c, 4);
	CHECK_OK(sk_loader_open(&l[0], &c), l[0]);
	c.dtype = SK_DTYPE_F32;
	c.layout = SK_LAYOUT_NCHW;
	CHECK_OK(sk_loader_open(&l[1], &c), l[1]);
	CHECK_EQ_INT(CHECK_OK(sk_loader_next(l[0], &b[0]), l[0]), 1);
	CHECK_EQ_INT(CHECK_OK(sk_loader_next(l[1], &b[1]), l[1]), 1);
	CHECK_EQ_INT(b[1].image_bytes, (size_t)S * S * 3 * 4);
	for (i = 0; i < b[0].n; i++) {
		CHECK_EQ_STR(b[0].keys[i], b[1].keys[i]);
		u8 = (const uint8_t *)b[0].images + (size_t)i *
		    b[0].image_bytes;
		f = (const float *)((const uint8_t *)b[1].images +
		    (size_t)i * b[1].image_bytes);
		for (ch = 0; ch < 3; ch++)
			for (k = 0; k < S * S; k++) {
				float want = ((float)u8[k * 3 + ch] / 255.0f -
				    c.mean[ch]) / c.std[ch];

				if (f[ch * S * S + k] != want)
					t_fail(__FILE__, __LINE__, "sample %d "
					    "channel %d pixel %d: %g != %g", i,
					    ch, k, f[ch * S * S + k], want);
			}
	}
	for (i = 0; i < 2; i++) {
		CHECK_OK(sk_loader_release(l[i], &b[i]), l[i]);
		sk_loader_close(l[i]);
	}
}

TEST(loader_release_misuse)
{
	struct sk_loader_config c;
	sk_loader *l;
	struct sk_batch b, held[3];
	int i;

	make_shards(2, 20, NULL);
	small_config(&c, 4);
	c.ring = 3;
	CHECK_OK(sk_loader_open(&l, &c), l);
	for (i = 0; i < 3; i++)
		CHECK_EQ_INT(CHECK_OK(sk_loader_next(l, &held[i]), l), 1);
	/* Holding every slot would wait forever: an error instead. */
	CHECK_CONTAINS(CHECK_ERR(sk_loader_next(l, &b), SK_EINVAL, l),
	    "release");
	CHECK_OK(sk_loader_release(l, &held[0]), l);
	b = held[0];
	b.slot = 0;
	CHECK_ERR(sk_loader_release(l, &b), SK_EINVAL, l);
	CHECK_EQ_INT(CHECK_OK(sk_loader_next(l, &b), l), 1);
	CHECK_EQ_INT(b.index, 3);
	sk_loader_close(l);	/* with batches still held */
}

/* A batch held past the ring is kept: its memory leaves the ring as it is,
 * the loader goes on, and the batches are the ones a plain run gives. */
TEST(loader_keep_moves_a_held_batch_out_of_the_ring)
{
	struct sk_loader_config c;
	struct run ref;
	sk_loader *l;
	struct sk_batch b, held[3];
	uint8_t *copy;
	char key0[64];
	struct run got;
	void *img0;
	size_t bytes;
	int i, rc, n0;

	make_shards(2, 20, NULL);
	small_config(&c, 4);
	c.ring = 3;
	run_loader(&c, &ref);
	memset(&got, 0, sizeof got);
	run_add(&got, "");
	CHECK_OK(sk_loader_open(&l, &c), l);
	for (i = 0; i < 3; i++)
		CHECK_EQ_INT(CHECK_OK(sk_loader_next(l, &held[i]), l), 1);
	bytes = (size_t)held[0].n * held[0].image_bytes;
	copy = malloc(bytes);
	CHECK(copy != NULL);
	memcpy(copy, held[0].images, bytes);
	snprintf(key0, sizeof key0, "%s", held[0].keys[0]);
	img0 = held[0].images;
	n0 = held[0].n;
	CHECK_OK(sk_loader_keep(l, &held[0]), l);
	CHECK_EQ_INT(held[0].slot, -1);
	CHECK(held[0].kept != NULL);
	/* a kept batch is no longer the ring's to release or keep */
	CHECK_ERR(sk_loader_release(l, &held[0]), SK_EINVAL, l);
	/* its slot came back: the loader runs to the end */
	for (i = 0; i < 3; i++)
		run_add_batch(&got, &held[i]);
	CHECK_OK(sk_loader_release(l, &held[1]), l);
	CHECK_OK(sk_loader_release(l, &held[2]), l);
	/* a wait with no time left either has a batch or times out, and
	 * the loader goes on either way */
	while ((rc = sk_loader_next_wait(l, &b, 0)) == SK_ETIMEDOUT)
		;
	for (; rc > 0; rc = sk_loader_next_wait(l, &b, 5)) {
		CHECK(b.images != img0);
		run_add_batch(&got, &b);
		CHECK_OK(sk_loader_release(l, &b), l);
	}
	CHECK_OK(rc, l);
	CHECK_EQ_STR(got.text, ref.text);
	sk_loader_close(l);
	/* the kept batch outlives its loader, unchanged */
	CHECK_EQ_INT(held[0].n, n0);
	CHECK(held[0].images == img0);
	CHECK_MEM_EQ(held[0].images, copy, bytes);
	CHECK_EQ_STR(held[0].keys[0], key0);
	sk_batch_free(&held[0]);
	sk_batch_free(&held[0]);	/* twice is nothing */
	free(copy);
	free(got.text);
	free(ref.text);
}

TEST(verdict_rule)
{
	CHECK_EQ_STR(sk_verdict_name(sk_verdict_decide(0.30, -1, -1, 0)),
	    "input-bound");
	CHECK_EQ_STR(sk_verdict_name(sk_verdict_decide(0.01, 80, 100, 0)),
	    "input-bound");
	CHECK_EQ_STR(sk_verdict_name(sk_verdict_decide(0.01, 200, 100, 0)),
	    "compute-bound");
	CHECK_EQ_STR(sk_verdict_name(sk_verdict_decide(0.01, -1, -1, 0)),
	    "compute-bound");
	CHECK_EQ_STR(sk_verdict_name(sk_verdict_decide(0.10, 200, 100, 0)),
	    "balanced");
	CHECK_EQ_STR(sk_verdict_name(sk_verdict_decide(0.90, 1, 100, 1)),
	    "compute-bound");
}

/* ------------------------------------------------------------------------ */
/* bad input                                                                */

static int
bad_every_tenth(int i)
{
	if (i % 10 == 3)
		return F_BAD_JPEG;
	if (i % 10 == 6)
		return F_NO_LABEL;
	if (i == 15)
		return F_NO_IMAGE;
	return 0;
}

TEST(loader_skips_bad_samples_and_counts_them)
{
	struct sk_loader_config c;
	struct run r, r2;
	char key[32];

	make_shards(2, 20, bad_every_tenth);
	small_config(&c, 5);
	c.remainder = SK_REMAINDER_KEEP;
	run_loader(&c, &r);
	CHECK_EQ_INT(r.st.skipped[SK_SKIP_DECODE], 4);
	CHECK_EQ_INT(r.st.skipped[SK_SKIP_NO_LABEL], 4);
	CHECK_EQ_INT(r.st.skipped[SK_SKIP_NO_IMAGE], 1);
	CHECK_EQ_INT(r.st.skipped_total, 9);
	CHECK_EQ_INT(r.samples, 31);
	/* Batch count is fixed by the plan; skips shorten batches. */
	CHECK_EQ_INT(r.batches, 8);
	snprintf(key, sizeof key, "/s%06d/", 13);
	CHECK(strstr(r.text, key) == NULL);
	snprintf(key, sizeof key, "/s%06d/", 14);
	CHECK(strstr(r.text, key) != NULL);
	/* Skips are deterministic too. */
	c.workers = 3;
	run_loader(&c, &r2);
	CHECK_EQ_STR(r.text, r2.text);
	free(r.text);
	free(r2.text);
}

TEST(loader_strict_fails_on_a_bad_sample)
{
	struct sk_loader_config c;
	sk_loader *l;
	struct sk_batch b;
	const char *msg;
	int rc;

	make_shards(2, 20, bad_every_tenth);
	small_config(&c, 5);
	c.strict = 1;
	CHECK_OK(sk_loader_open(&l, &c), l);
	while ((rc = sk_loader_next(l, &b)) > 0)
		sk_loader_release(l, &b);
	CHECK(rc < 0);
	msg = sk_errmsg(l);
	CHECK_CONTAINS(msg, "s-00000");
	CHECK_CONTAINS(msg, "sample s0000");
	/* The handle stays failed. */
	CHECK_EQ_INT(sk_loader_next(l, &b), SK_EFATAL);
	sk_loader_close(l);
}

/* A strict run fails, with a message that holds both words. */
static void
strict_fails(const struct sk_loader_config *c, const char *w1,
    const char *w2)
{
	sk_loader *l;
	struct sk_batch b;
	int rc;

	CHECK_OK(sk_loader_open(&l, c), l);
	while ((rc = sk_loader_next(l, &b)) > 0)
		sk_loader_release(l, &b);
	CHECK(rc < 0);
	CHECK_CONTAINS(sk_errmsg(l), w1);
	CHECK_CONTAINS(sk_errmsg(l), w2);
	sk_loader_close(l);
}

TEST(loader_truncated_shard_counts_the_lost_samples)
{
	struct sk_loader_config c;
	struct run r;
	char path[256];
	size_t len;
	uint8_t *data;

	make_shards(3, 10, NULL);
	/* Cut shard 1 in the middle of its fourth sample or so. */
	snprintf(path, sizeof path, "%s/s-000001.tar", t_tmpdir());
	data = t_read_file(path, &len);
	t_write_file(path, data, len * 4 / 10);
	free(data);
	small_config(&c, 5);
	c.remainder = SK_REMAINDER_KEEP;
	run_loader(&c, &r);
	CHECK(r.st.skipped[SK_SKIP_DAMAGED] >= 6);
	CHECK(r.st.skipped[SK_SKIP_DAMAGED] <= 7);
	CHECK_EQ_INT(r.samples + (int)r.st.skipped_total, 30);
	CHECK_EQ_INT(r.batches, 6);
	free(r.text);

	/* Strict: fatal, naming the shard and the offset. */
	small_config(&c, 5);
	c.strict = 1;
	strict_fails(&c, "s-000001.tar", "offset");
}

TEST(loader_missing_shard_is_an_error)
{
	struct sk_loader_config c;
	sk_loader *l;
	struct sk_batch b;
	char path[256];
	int rc;

	make_shards(3, 10, NULL);
	snprintf(path, sizeof path, "%s/s-000002.tar", t_tmpdir());
	CHECK(remove(path) == 0);
	small_config(&c, 5);
	CHECK_OK(sk_loader_open(&l, &c), l);
	while ((rc = sk_loader_next(l, &b)) > 0)
		sk_loader_release(l, &b);
	CHECK(rc < 0);
	CHECK_CONTAINS(sk_errmsg(l), "s-000002.tar");
	sk_loader_close(l);

	/* A pattern is counted at open, so it fails there. */
	sk_loader_config_init(&c);
	c.urls = t_path("s-{000000..000002}.tar");
	c.batch = 5;
	CHECK_ERR(sk_loader_open(&l, &c), SK_ENOENT, l);
	CHECK_CONTAINS(sk_errmsg(l), "s-000002.tar");
	sk_loader_close(l);
}

TEST(loader_pattern_counts_like_the_manifest)
{
	struct sk_loader_config c;
	struct run a, b;

	make_shards(3, 11, NULL);
	small_config(&c, 4);
	run_loader(&c, &a);
	small_config(&c, 4);
	c.manifest = NULL;
	c.urls = t_path("s-{000000..000002}.tar");
	run_loader(&c, &b);
	CHECK_EQ_STR(a.text, b.text);
	free(a.text);
	free(b.text);
}

TEST(loader_bad_config)
{
	struct sk_loader_config c;
	sk_loader *l;

	make_shards(1, 10, NULL);
	small_config(&c, 11);
	CHECK_CONTAINS(CHECK_ERR(sk_loader_open(&l, &c), SK_EINVAL, l),
	    "batch");
	sk_loader_close(l);
	small_config(&c, 4);
	c.rank = 2;
	c.world = 2;
	CHECK_ERR(sk_loader_open(&l, &c), SK_EINVAL, l);
	sk_loader_close(l);
	small_config(&c, 4);
	c.resume_batch = 2;
	CHECK_CONTAINS(CHECK_ERR(sk_loader_open(&l, &c), SK_EINVAL, l),
	    "resume");
	sk_loader_close(l);
	small_config(&c, 4);
	c.urls = "x.tar";
	CHECK_ERR(sk_loader_open(&l, &c), SK_EINVAL, l);
	sk_loader_close(l);
	small_config(&c, 4);
	c.crop = SK_CROP_CENTER;
	c.resize = 8;
	CHECK_ERR(sk_loader_open(&l, &c), SK_EINVAL, l);
	sk_loader_close(l);
}

/* ------------------------------------------------------------------------ */
/* hostile shards and stale manifests (issue 10)                            */

/*
 * A shard with good samples and then a member whose PAX header claims
 * 10^13 bytes: the good samples are delivered, nothing is allocated for
 * the claim, and the liar's sample counts as damaged, whether the plan
 * comes from counting the shard or from a manifest.
 */
TEST(loader_lying_size_keeps_the_good_samples)
{
	struct sk_loader_config c;
	struct run r;
	uint8_t *jpg;
	size_t len;

	make_jpeg(1, 40, 30, &jpg, &len);
	t_write_file(t_path("a.jpg"), jpg, len);
	free(jpg);
	t_system("cd '%s' && python3 - <<'PY'\n"
	    "import io, tarfile\n"
	    "jpg = open('a.jpg', 'rb').read()\n"
	    "with tarfile.open('lie.tar', 'w', format=tarfile.PAX_FORMAT) as tf:\n"
	    "    for k in ('good0', 'good1'):\n"
	    "        for ext, data in (('jpg', jpg), ('cls', b'3')):\n"
	    "            ti = tarfile.TarInfo(k + '.' + ext)\n"
	    "            ti.size = len(data)\n"
	    "            tf.addfile(ti, io.BytesIO(data))\n"
	    "    ti = tarfile.TarInfo('liar.jpg')\n"
	    "    ti.size = len(jpg)\n"
	    "    ti.pax_headers = {'size': '10000000000000'}\n"
	    "    tf.addfile(ti, io.BytesIO(jpg))\n"
	    "    ti = tarfile.TarInfo('liar.cls')\n"
	    "    ti.size = 1\n"
	    "    tf.addfile(ti, io.BytesIO(b'4'))\n"
	    "PY", t_tmpdir());
	sk_loader_config_init(&c);
	c.urls = t_path("lie.tar");
	c.batch = 1;
	c.image_size = 16;
	c.workers = 1;
	c.remainder = SK_REMAINDER_KEEP;
	run_loader(&c, &r);
	CHECK_EQ_INT(r.samples, 2);
	CHECK(strstr(r.text, "/good0/3/") != NULL);
	CHECK(strstr(r.text, "/good1/3/") != NULL);
	CHECK_EQ_INT((int)r.st.skipped[SK_SKIP_DAMAGED], 1);
	CHECK_EQ_INT((int)r.st.skipped_total, 1);
	free(r.text);

	t_write_file(t_path("lie.json"), "{\"__kind__\": "
	    "\"wids-shard-index-v1\", \"wids_version\": 1, \"shardlist\": "
	    "[{\"url\": \"lie.tar\", \"nsamples\": 3}]}\n", 105);
	c.urls = NULL;
	c.manifest = t_path("lie.json");
	run_loader(&c, &r);
	CHECK_EQ_INT(r.samples, 2);
	CHECK_EQ_INT((int)r.st.skipped[SK_SKIP_DAMAGED], 1);
	free(r.text);
}

/* Write s.json again with shard i's count (and size, unless keep_size is
 * 0) changed. */
static void
edit_manifest(size_t i, uint64_t nsamples, int keep_size)
{
	struct sk_manifest m;
	struct sk_error err;

	memset(&m, 0, sizeof m);
	CHECK_OK(sk_manifest_read(t_path("s.json"), &m, &err), &err);
	CHECK(i < m.nshards);
	m.shards[i].nsamples = nsamples;
	if (!keep_size)
		m.shards[i].filesize += 512;
	CHECK_OK(sk_manifest_write(t_path("s.json"), &m, &err), &err);
	sk_manifest_free(&m);
}

/* A manifest that counts fewer samples than a shard holds: the extra ones
 * are counted as unplanned and the shard as mismatched, never silently
 * dropped; one that counts more: the missing ones are damaged. */
TEST(loader_stale_manifest_is_reported)
{
	struct sk_loader_config c;
	struct run r;

	make_shards(2, 3, NULL);
	edit_manifest(0, 2, 1);
	small_config(&c, 1);
	c.remainder = SK_REMAINDER_KEEP;
	run_loader(&c, &r);
	CHECK_EQ_INT(r.samples, 5);
	CHECK_EQ_INT((int)r.st.unplanned, 1);
	CHECK_EQ_INT((int)r.st.mismatched_shards, 1);
	CHECK_EQ_INT((int)r.st.skipped_total, 0);
	free(r.text);

	/* Over two epochs the extra sample is counted once. */
	c.epochs = 2;
	run_loader(&c, &r);
	CHECK_EQ_INT(r.samples, 10);
	CHECK_EQ_INT((int)r.st.unplanned, 1);
	CHECK_EQ_INT((int)r.st.mismatched_shards, 1);
	free(r.text);

	make_shards(2, 3, NULL);
	edit_manifest(1, 4, 1);
	small_config(&c, 1);
	c.remainder = SK_REMAINDER_KEEP;
	run_loader(&c, &r);
	CHECK_EQ_INT(r.samples, 6);
	CHECK_EQ_INT((int)r.st.skipped[SK_SKIP_DAMAGED], 1);
	CHECK_EQ_INT((int)r.st.mismatched_shards, 1);
	free(r.text);

	/* A size other than the file's: reported; fatal with strict. */
	make_shards(2, 3, NULL);
	edit_manifest(1, 3, 0);
	small_config(&c, 1);
	c.remainder = SK_REMAINDER_KEEP;
	run_loader(&c, &r);
	CHECK_EQ_INT(r.samples, 6);
	CHECK_EQ_INT((int)r.st.mismatched_shards, 1);
	free(r.text);
	c.strict = 1;
	strict_fails(&c, "s-000001.tar", "manifest");
}

/* Samples over the byte limit are skipped as too big, unread, and the
 * epoch goes on to its end. */
TEST(loader_sample_over_the_byte_limit_is_skipped)
{
	struct sk_loader_config c;
	struct run r;

	make_shards(1, 4, NULL);
	small_config(&c, 1);
	c.remainder = SK_REMAINDER_KEEP;
	c.max_sample_bytes = 200;	/* every sample's JPEG is larger */
	run_loader(&c, &r);
	CHECK_EQ_INT(r.samples, 0);
	CHECK_EQ_INT((int)r.st.skipped[SK_SKIP_TOO_BIG], 4);
	free(r.text);
}

/*
 * A folder entry (skipped by the readers) and then a header that is cut
 * off: the sample before it comes back whole and cut, then the damage,
 * and no sample is made of the skipped entry's freed name.
 */
TEST(sample_reader_damage_after_a_skipped_entry)
{
	struct sk_sample smp;
	sk_sample_reader *r;
	sk_source *src;
	size_t len;
	uint8_t *data;

	memset(&smp, 0, sizeof smp);
	t_system("cd '%s' && python3 - <<'PY'\n"
	    "import io, tarfile\n"
	    "with tarfile.open('d.tar', 'w', format=tarfile.USTAR_FORMAT) as tf:\n"
	    "    for n, d in (('a.jpg', b'x' * 700), ('a.cls', b'1')):\n"
	    "        ti = tarfile.TarInfo(n)\n"
	    "        ti.size = len(d)\n"
	    "        tf.addfile(ti, io.BytesIO(d))\n"
	    "    ti = tarfile.TarInfo('d')\n"
	    "    ti.type = tarfile.DIRTYPE\n"
	    "    tf.addfile(ti)\n"
	    "    ti = tarfile.TarInfo('b.cls')\n"
	    "    ti.size = 1\n"
	    "    tf.addfile(ti, io.BytesIO(b'2'))\n"
	    "PY", t_tmpdir());
	/* Cut inside b.cls's header: after a.jpg (512 + 1024), a.cls
	 * (1024) and d/ (512). */
	data = t_read_file("d.tar", &len);
	CHECK(len > 3072 + 100);
	t_write_file("d.tar", data, 3072 + 100);
	free(data);
	CHECK_OK(sk_source_open(&src, t_path("d.tar")), src);
	CHECK_OK(sk_sample_reader_open(&r, src, NULL), r);
	CHECK_EQ_INT(sk_sample_reader_next(r, &smp, NULL, NULL), 1);
	CHECK_EQ_STR(smp.key, "a");
	CHECK_EQ_INT((int)smp.n, 2);
	CHECK(smp.cut);
	CHECK(sk_sample_reader_next(r, &smp, NULL, NULL) < 0);
	CHECK_EQ_INT((int)smp.n, 0);
	CHECK_CONTAINS(sk_errmsg(r), "d.tar");
	sk_sample_reader_close(r);
	sk_sample_free(&smp);
}

static int
load_all(const char *ext, void *arg)
{
	(void)ext;
	(void)arg;
	return SK_SAMPLE_LOAD;
}

static int
scan_jpg(const char *ext, void *arg)
{
	(void)arg;
	return strcmp(ext, "jpg") == 0 ? SK_SAMPLE_SCAN : SK_SAMPLE_LOAD;
}

/*
 * SK_SAMPLE_SCAN reads a member through without keeping it: data stays
 * NULL and scanned is set, the members after it are read as before, and
 * a member cut short is damage at the same offset a load names.
 */
TEST(sample_reader_scan)
{
	struct sk_sample smp;
	sk_sample_reader *r;
	sk_source *src;
	size_t len, i;
	uint8_t *data;
	char load_err[SK_ERRMSG_MAX];

	memset(&smp, 0, sizeof smp);
	t_system("cd '%s' && python3 - <<'PY'\n"
	    "import io, tarfile\n"
	    "with tarfile.open('s.tar', 'w', format=tarfile.USTAR_FORMAT) as tf:\n"
	    "    for n, d in (('a.jpg', b'x' * 70000), ('a.cls', b'1'),\n"
	    "                 ('b.jpg', b'y' * 3000), ('b.cls', b'2')):\n"
	    "        ti = tarfile.TarInfo(n)\n"
	    "        ti.size = len(d)\n"
	    "        tf.addfile(ti, io.BytesIO(d))\n"
	    "PY", t_tmpdir());
	CHECK_OK(sk_source_open(&src, t_path("s.tar")), src);
	CHECK_OK(sk_sample_reader_open(&r, src, NULL), r);
	for (i = 0; i < 2; i++) {
		CHECK_EQ_INT(sk_sample_reader_next(r, &smp, scan_jpg, NULL), 1);
		CHECK_EQ_INT((int)smp.n, 2);
		CHECK(smp.m[0].data == NULL);
		CHECK(smp.m[0].scanned);
		CHECK_EQ_INT((int)smp.m[0].size, i == 0 ? 70000 : 3000);
		CHECK(smp.m[1].data != NULL && !smp.m[1].scanned);
		CHECK_EQ_INT(smp.m[1].data[0], i == 0 ? '1' : '2');
	}
	CHECK_EQ_INT(sk_sample_reader_next(r, &smp, scan_jpg, NULL), 0);
	sk_sample_reader_close(r);

	/* Cut inside a.jpg's data: a scan fails as a load does, at the
	 * same offset, and the member is not marked scanned. */
	data = t_read_file("s.tar", &len);
	t_write_file("s.tar", data, 512 + 40000);
	free(data);
	CHECK_OK(sk_source_open(&src, t_path("s.tar")), src);
	CHECK_OK(sk_sample_reader_open(&r, src, NULL), r);
	CHECK(sk_sample_reader_next(r, &smp, load_all, NULL) < 0);
	snprintf(load_err, sizeof load_err, "%s", sk_errmsg(r));
	sk_sample_reader_close(r);
	CHECK_OK(sk_source_open(&src, t_path("s.tar")), src);
	CHECK_OK(sk_sample_reader_open(&r, src, NULL), r);
	CHECK(sk_sample_reader_next(r, &smp, scan_jpg, NULL) < 0);
	CHECK_EQ_INT((int)smp.n, 1);
	CHECK(smp.m[0].data == NULL && !smp.m[0].scanned);
	CHECK_EQ_STR(sk_errmsg(r), load_err);
	CHECK_CONTAINS(load_err, "s.tar: offset");
	sk_sample_reader_close(r);

	/* Compressed, no size to check a header against: the scan itself
	 * meets the end of the data, as a load does. */
	t_system("cd '%s' && python3 - <<'PY'\n"
	    "import io, os, tarfile\n"
	    "with tarfile.open('z.tar.gz', 'w:gz', format=tarfile.USTAR_FORMAT) as tf:\n"
	    "    ti = tarfile.TarInfo('a.jpg')\n"
	    "    d = os.urandom(8 << 20)\n"
	    "    ti.size = len(d)\n"
	    "    tf.addfile(ti, io.BytesIO(d))\n"
	    "PY", t_tmpdir());
	data = t_read_file("z.tar.gz", &len);
	t_write_file("z.tar.gz", data, len / 2);
	free(data);
	CHECK_OK(sk_source_open(&src, t_path("z.tar.gz")), src);
	CHECK_OK(sk_sample_reader_open(&r, src, NULL), r);
	CHECK(sk_sample_reader_next(r, &smp, load_all, NULL) < 0);
	snprintf(load_err, sizeof load_err, "%s", sk_errmsg(r));
	sk_sample_reader_close(r);
	CHECK_OK(sk_source_open(&src, t_path("z.tar.gz")), src);
	CHECK_OK(sk_sample_reader_open(&r, src, NULL), r);
	CHECK(sk_sample_reader_next(r, &smp, scan_jpg, NULL) < 0);
	CHECK(smp.m[0].data == NULL && !smp.m[0].scanned);
	/* The same damage; the scan's offset is where the data stopped,
	 * a load's where its read began. */
	CHECK_CONTAINS(sk_errmsg(r), "z.tar.gz: offset ");
	CHECK_CONTAINS(sk_errmsg(r), "truncated gzip input");
	CHECK_CONTAINS(load_err, "truncated gzip input");
	sk_sample_reader_close(r);
	sk_sample_free(&smp);
}
