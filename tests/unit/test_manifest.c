/*
 * test_manifest.c - the wids shard index: write and read back, the fixed
 * wids fields, atomic writing, errors, and resolving shard URLs against
 * the manifest's location.
 */
#include <sys/stat.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define MD5_A "0123456789abcdef0123456789abcdef"
#define MD5_B "fedcba9876543210fedcba9876543210"

static int
exists(const char *path)
{
	struct stat st;

	return (lstat(path, &st) == 0);
}

/* The JSON text without whitespace (our test values have none). */
static char *
squeeze(const char *text)
{
	char *s = malloc(strlen(text) + 1), *p = s;

	CHECK(s != NULL);
	for (; *text != '\0'; text++)
		if (*text != ' ' && *text != '\n' && *text != '\t' &&
		    *text != '\r')
			*p++ = *text;
	*p = '\0';
	return (s);
}

static void
make_manifest(struct sk_manifest *m)
{
	static const char *names[] = { "airplane", "automobile", "bird" };
	struct sk_error err = { 0 };
	size_t i;

	memset(m, 0, sizeof *m);
	CHECK_OK(sk_manifest_add_shard(m, "cifar10-train-000000.tar", 10000,
	    51200000, MD5_A), &err);
	CHECK_OK(sk_manifest_add_shard(m, "cifar10-train-000001.tar", 2345,
	    12007424, MD5_B), &err);
	m->nclasses = 3;
	CHECK((m->classes = calloc(3, sizeof *m->classes)) != NULL);
	CHECK((m->class_counts = calloc(3, sizeof *m->class_counts)) != NULL);
	for (i = 0; i < 3; i++) {
		CHECK((m->classes[i] = strdup(names[i])) != NULL);
		m->class_counts[i] = 4000 + i;
	}
	CHECK((m->info_extra = strdup("{\"source\": \"cifar10\", "
	    "\"seed\": 7, \"resize\": [32, 32]}")) != NULL);
}

TEST(manifest_roundtrip)
{
	struct sk_manifest m, r;
	struct sk_error err = { 0 };
	char *extra;
	size_t i;

	make_manifest(&m);
	CHECK_OK(sk_manifest_write(t_path("cifar10-train.json"), &m, &err),
	    &err);
	CHECK(exists("cifar10-train.json"));
	CHECK(!exists("cifar10-train.json.part"));

	CHECK_OK(sk_manifest_read(t_path("cifar10-train.json"), &r, &err),
	    &err);
	CHECK_EQ_INT(r.nshards, 2);
	for (i = 0; i < 2; i++) {
		CHECK_EQ_STR(r.shards[i].url, m.shards[i].url);
		CHECK_EQ_INT(r.shards[i].nsamples, m.shards[i].nsamples);
		CHECK_EQ_INT(r.shards[i].filesize, m.shards[i].filesize);
		CHECK_EQ_STR(r.shards[i].md5, m.shards[i].md5);
	}
	CHECK_EQ_INT(r.nclasses, 3);
	CHECK(r.classes != NULL && r.class_counts != NULL);
	for (i = 0; i < 3; i++) {
		CHECK_EQ_STR(r.classes[i], m.classes[i]);
		CHECK_EQ_INT(r.class_counts[i], m.class_counts[i]);
	}
	/* The other info members come back as an object (any layout). */
	CHECK(r.info_extra != NULL);
	extra = squeeze(r.info_extra);
	CHECK(extra[0] == '{');
	CHECK_CONTAINS(extra, "\"source\":\"cifar10\"");
	CHECK_CONTAINS(extra, "\"seed\":7");
	CHECK_CONTAINS(extra, "\"resize\":[32,32]");
	CHECK(strstr(extra, "classes") == NULL);
	free(extra);
	sk_manifest_free(&m);
	sk_manifest_free(&r);
	CHECK_EQ_INT(m.nshards, 0);
}

TEST(manifest_wids_fields)
{
	struct sk_manifest m;
	struct sk_error err = { 0 };
	char *text, *sq;

	make_manifest(&m);
	CHECK_OK(sk_manifest_write("ds.json", &m, &err), &err);
	text = t_read_file("ds.json", NULL);
	sq = squeeze(text);
	t_diag("%.300s", sq);
	CHECK_CONTAINS(sq, "\"__kind__\":\"wids-shard-index-v1\"");
	CHECK_CONTAINS(sq, "\"wids_version\":1");
	CHECK_CONTAINS(sq, "\"shardlist\":[{");
	CHECK_CONTAINS(sq, "\"url\":\"cifar10-train-000000.tar\"");
	CHECK_CONTAINS(sq, "\"nsamples\":10000");
	CHECK_CONTAINS(sq, "\"filesize\":51200000");
	CHECK_CONTAINS(sq, "\"md5sum\":\"" MD5_A "\"");
	CHECK_CONTAINS(sq, "\"info\":{");
	CHECK_CONTAINS(sq, "\"airplane\"");
	/* Shards in order. */
	CHECK(strstr(sq, "000000.tar") < strstr(sq, "000001.tar"));
	free(sq);
	free(text);
	sk_manifest_free(&m);
}

TEST(manifest_minimal)
{
	struct sk_manifest m, r;
	struct sk_error err = { 0 };

	/* No classes, no extra info, no MD5. */
	memset(&m, 0, sizeof m);
	CHECK_OK(sk_manifest_add_shard(&m, "s.tar", 1, 3072, NULL), &err);
	CHECK_OK(sk_manifest_write("m.json", &m, &err), &err);
	CHECK_OK(sk_manifest_read("m.json", &r, &err), &err);
	CHECK_EQ_INT(r.nshards, 1);
	CHECK_EQ_STR(r.shards[0].url, "s.tar");
	CHECK_EQ_INT(r.shards[0].nsamples, 1);
	CHECK_EQ_INT(r.shards[0].filesize, 3072);
	CHECK_EQ_STR(r.shards[0].md5, "");
	CHECK_EQ_INT(r.nclasses, 0);
	CHECK(r.info_extra == NULL || strcmp(r.info_extra, "{}") == 0);
	sk_manifest_free(&m);
	sk_manifest_free(&r);
}

TEST(manifest_read_wids_written)
{
	/* As wids' widsindex writes it: no info, no md5sum, extra keys. */
	static const char text[] =
	    "{\n  \"__kind__\": \"wids-shard-index-v1\",\n"
	    "  \"wids_version\": 1,\n  \"name\": \"imagenet-val\",\n"
	    "  \"shardlist\": [\n"
	    "    {\"url\": \"https://h/val-000000.tar\", \"nsamples\": 340,"
	    " \"filesize\": 40960000},\n"
	    "    {\"url\": \"val-000001.tar\", \"nsamples\": 12,"
	    " \"filesize\": 1474560}\n  ]\n}\n";
	struct sk_manifest r;
	struct sk_error err = { 0 };

	t_write_file("w.json", text, sizeof text - 1);
	CHECK_OK(sk_manifest_read("w.json", &r, &err), &err);
	CHECK_EQ_INT(r.nshards, 2);
	CHECK_EQ_STR(r.shards[0].url, "https://h/val-000000.tar");
	CHECK_EQ_INT(r.shards[0].nsamples, 340);
	CHECK_EQ_INT(r.shards[0].filesize, 40960000);
	CHECK_EQ_STR(r.shards[0].md5, "");
	CHECK_EQ_STR(r.shards[1].url, "val-000001.tar");
	CHECK_EQ_INT(r.shards[1].nsamples, 12);
	CHECK_EQ_INT(r.nclasses, 0);
	sk_manifest_free(&r);
}

TEST(manifest_overwrite_atomic)
{
	struct sk_manifest m, r;
	struct sk_error err = { 0 };

	t_write_file("o.json", "old", 3);
	t_write_file("o.json.part", "stale", 5);
	memset(&m, 0, sizeof m);
	CHECK_OK(sk_manifest_add_shard(&m, "new.tar", 5, 6144, MD5_A), &err);
	CHECK_OK(sk_manifest_write("o.json", &m, &err), &err);
	/* A file at the old temporary name is not ours: left alone. */
	CHECK(exists("o.json.part"));
	t_system("cd '%s' && test \"$(ls -a | grep -c '^\\.o\\.json\\..*\\.part$')\" = 0",
	    t_tmpdir());
	CHECK_OK(sk_manifest_read("o.json", &r, &err), &err);
	CHECK_EQ_INT(r.nshards, 1);
	CHECK_EQ_STR(r.shards[0].url, "new.tar");
	sk_manifest_free(&m);
	sk_manifest_free(&r);
}

TEST(manifest_write_errors)
{
	struct sk_manifest m;
	struct sk_error err = { 0 };
	const char *msg;

	memset(&m, 0, sizeof m);
	CHECK_OK(sk_manifest_add_shard(&m, "a.tar", 5, 1024, MD5_A), &err);
	msg = CHECK_ERR(sk_manifest_write(t_path("nodir/x.json"), &m, &err),
	    SK_ENOENT, &err);
	CHECK_CONTAINS(msg, "nodir/x.json");
	CHECK(!exists("nodir"));

	/* info_extra must be a JSON object. */
	CHECK((m.info_extra = strdup("[1, 2]")) != NULL);
	CHECK(sk_manifest_write("bad.json", &m, &err) < 0);
	CHECK(err.msg[0] != '\0');
	CHECK(!exists("bad.json"));
	CHECK(!exists("bad.json.part"));
	sk_manifest_free(&m);
}

static void
expect_read_error(int line, const char *name, const char *text, int code)
{
	struct sk_manifest r;
	struct sk_error err = { 0 };
	int rc;

	if (text != NULL)
		t_write_file(name, text, strlen(text));
	memset(&r, 0xa5, sizeof r);
	rc = sk_manifest_read(t_path(name), &r, &err);
	if (rc != code)
		t_fail(__FILE__, line, "sk_manifest_read(%s) = %d (%s), want %d "
		    "(%s): %s", name, rc, sk_strerror(rc), code,
		    sk_strerror(code), err.msg);
	if (strstr(err.msg, name) == NULL)
		t_fail(__FILE__, line, "message does not name %s: %s", name,
		    err.msg);
	t_diag("%s: %s", name, err.msg);
	/* Nothing to free, but freeing must be safe. */
	CHECK_EQ_INT(r.nshards, 0);
	sk_manifest_free(&r);
}

TEST(manifest_read_errors)
{
	expect_read_error(__LINE__, "missing.json", NULL, SK_ENOENT);
	expect_read_error(__LINE__, "invalid.json", "{\"__kind__\": ",
	    SK_EFORMAT);
	expect_read_error(__LINE__, "empty.json", "", SK_EFORMAT);
	expect_read_error(__LINE__, "kind.json", "{\"__kind__\": "
	    "\"something-else\", \"wids_version\": 1, \"shardlist\": []}",
	    SK_EFORMAT);
	expect_read_error(__LINE__, "nokind.json", "{\"shardlist\": []}",
	    SK_EFORMAT);
	expect_read_error(__LINE__, "array.json", "[1, 2, 3]", SK_EFORMAT);
	expect_read_error(__LINE__, "nourl.json", "{\"__kind__\": "
	    "\"wids-shard-index-v1\", \"wids_version\": 1, \"shardlist\": "
	    "[{\"nsamples\": 3}]}", SK_EFORMAT);
}

#define WIDS "{\"__kind__\": \"wids-shard-index-v1\", \"wids_version\": 1, "

/* A manifest of one shardlist (JSON text) that must be refused with a
 * message naming the file and holding want. */
static void
expect_refused(int line, const char *name, const char *list, int code,
    const char *want)
{
	struct sk_manifest r;
	struct sk_error err = { 0 };
	char *text;
	int rc;

	CHECK((text = malloc(strlen(list) + 100)) != NULL);
	sprintf(text, WIDS "\"shardlist\": %s}", list);
	t_write_file(name, text, strlen(text));
	free(text);
	memset(&r, 0xa5, sizeof r);
	rc = sk_manifest_read(t_path(name), &r, &err);
	if (rc != code)
		t_fail(__FILE__, line, "%s: sk_manifest_read = %d (%s), want %d:"
		    " %s", name, rc, sk_strerror(rc), code, err.msg);
	if (strstr(err.msg, t_path(name)) == NULL ||
	    strstr(err.msg, want) == NULL)
		t_fail(__FILE__, line, "%s: message lacks the path or \"%s\": "
		    "%s", name, want, err.msg);
	t_diag("%s", err.msg);
	CHECK_EQ_INT(r.nshards, 0);
	sk_manifest_free(&r);
}

static void
expect_accepted(int line, const char *name, const char *list, size_t n)
{
	struct sk_manifest r;
	struct sk_error err = { 0 };
	char *text;

	CHECK((text = malloc(strlen(list) + 100)) != NULL);
	sprintf(text, WIDS "\"shardlist\": %s}", list);
	t_write_file(name, text, strlen(text));
	free(text);
	if (sk_manifest_read(t_path(name), &r, &err) != 0)
		t_fail(__FILE__, line, "%s refused: %s", name, err.msg);
	CHECK_EQ_INT(r.nshards, n);
	sk_manifest_free(&r);
}

/*
 * Issue 10, case 5: values no shard can have, from a stale or hostile
 * manifest, are refused with the manifest's name and the entry; the loader
 * would otherwise plan samples that are not there.
 */
TEST(manifest_read_impossible_values)
{
	/* A 10 KiB plain tar holds at most (10240 - 1024) / 512 = 18. */
	expect_refused(__LINE__, "stale.json", "[{\"url\": \"s-000.tar\", "
	    "\"nsamples\": 2000000, \"filesize\": 10240}]", SK_EFORMAT,
	    "shardlist[0] (s-000.tar): \"nsamples\": 2000000, but a "
	    "10240-byte tar holds at most 18 samples");
	expect_accepted(__LINE__, "edge.json", "[{\"url\": \"s-000.tar\", "
	    "\"nsamples\": 18, \"filesize\": 10240}]", 1);
	expect_refused(__LINE__, "edge1.json", "[{\"url\": \"a.tar\", "
	    "\"nsamples\": 1, \"filesize\": 10240}, {\"url\": \"s-000.tar\", "
	    "\"nsamples\": 19, \"filesize\": 10240}]", SK_EFORMAT,
	    "shardlist[1] (s-000.tar)");
	expect_refused(__LINE__, "zero.json", "[{\"url\": \"s.tar\", "
	    "\"nsamples\": 1, \"filesize\": 0}]", SK_EFORMAT, "at most 0");
	/* No filesize: nothing to check against. Compressed: no bound. */
	expect_accepted(__LINE__, "nosize.json", "[{\"url\": \"s.tar\", "
	    "\"nsamples\": 5}]", 1);
	expect_accepted(__LINE__, "gz.json", "[{\"url\": \"s.tar.gz\", "
	    "\"nsamples\": 1000, \"filesize\": 10240}, {\"url\": \"t.tar.zst\","
	    " \"nsamples\": 1000, \"filesize\": 2048}]", 2);

	/* Not a count. */
	expect_refused(__LINE__, "neg.json", "[{\"url\": \"s.tar\", "
	    "\"nsamples\": -1}]", SK_EFORMAT, "\"nsamples\" must be an "
	    "integer >= 0");
	expect_refused(__LINE__, "real.json", "[{\"url\": \"s.tar\", "
	    "\"nsamples\": 1.5}]", SK_EFORMAT, "(s.tar): \"nsamples\"");
	expect_refused(__LINE__, "exp.json", "[{\"url\": \"s.tar\", "
	    "\"nsamples\": 1e3}]", SK_EFORMAT, "(s.tar): \"nsamples\"");
	expect_refused(__LINE__, "str.json", "[{\"url\": \"s.tar\", "
	    "\"nsamples\": \"3\"}]", SK_EFORMAT, "(s.tar): \"nsamples\"");
	expect_refused(__LINE__, "huge.json", "[{\"url\": \"s.tar\", "
	    "\"nsamples\": 99999999999999999999}]", SK_EFORMAT, "line 1");
	expect_refused(__LINE__, "fsneg.json", "[{\"url\": \"s.tar\", "
	    "\"nsamples\": 1, \"filesize\": -4096}]", SK_EFORMAT,
	    "\"filesize\" must be an integer >= 0");
	expect_refused(__LINE__, "fsstr.json", "[{\"url\": \"s.tar\", "
	    "\"nsamples\": 1, \"filesize\": \"big\"}]", SK_EFORMAT,
	    "\"filesize\"");
	/* Counts that add up past 2^63 (no filesize to bound each). */
	expect_refused(__LINE__, "sum.json", "[{\"url\": \"a.tar\", "
	    "\"nsamples\": 5000000000000000000}, {\"url\": \"b.tar\", "
	    "\"nsamples\": 5000000000000000000}]", SK_EFORMAT,
	    "add up past 2^63 at shardlist[1]");

	/* Other entries no shard list can hold. */
	expect_refused(__LINE__, "dup.json", "[{\"url\": \"a.tar\", "
	    "\"nsamples\": 1}, {\"url\": \"b.tar\", \"nsamples\": 1}, "
	    "{\"url\": \"a.tar\", \"nsamples\": 1}]", SK_EFORMAT,
	    "shardlist[0] and shardlist[2] both name a.tar");
	expect_refused(__LINE__, "dupkey.json", "[{\"url\": \"a.tar\", "
	    "\"nsamples\": 1, \"nsamples\": 9000}]", SK_EFORMAT, "line 1");
	expect_refused(__LINE__, "emptyurl.json", "[{\"url\": \"\", "
	    "\"nsamples\": 1}]", SK_EFORMAT, "shardlist[0] needs");
	expect_refused(__LINE__, "notobj.json", "[3]", SK_EFORMAT,
	    "shardlist[0] needs");
	expect_refused(__LINE__, "md5num.json", "[{\"url\": \"a.tar\", "
	    "\"nsamples\": 1, \"md5sum\": 12}]", SK_EFORMAT, "\"md5sum\"");
	expect_refused(__LINE__, "md5short.json", "[{\"url\": \"a.tar\", "
	    "\"nsamples\": 1, \"md5sum\": \"abc\"}]", SK_EFORMAT, "\"md5sum\"");
	expect_accepted(__LINE__, "md5ok.json", "[{\"url\": \"a.tar\", "
	    "\"nsamples\": 1, \"md5sum\": \"\"}, {\"url\": \"b.tar\", "
	    "\"nsamples\": 1, \"md5sum\": \"" MD5_A "\"}]", 2);
	expect_refused(__LINE__, "classneg.json", "[{\"url\": \"a.tar\", "
	    "\"nsamples\": 1}], \"info\": {\"classes\": [\"x\"], "
	    "\"class_counts\": [-3]}", SK_EFORMAT, "info.class_counts[0]");
}

/* A FIFO, a folder or an oversized file named as a manifest: refused at
 * once, without blocking or reading it all. */
TEST(manifest_read_not_a_file)
{
	struct sk_manifest r;
	struct sk_error err = { 0 };
	FILE *f;

	CHECK(mkfifo("fifo.json", 0644) == 0);
	CHECK_ERR(sk_manifest_read(t_path("fifo.json"), &r, &err), SK_EINVAL,
	    &err);
	CHECK_CONTAINS(err.msg, t_path("fifo.json"));
	CHECK_CONTAINS(err.msg, "not a regular file (a fifo)");
	CHECK(mkdir("dir.json", 0755) == 0);
	CHECK_ERR(sk_manifest_read(t_path("dir.json"), &r, &err), SK_EINVAL,
	    &err);
	CHECK_CONTAINS(err.msg, "not a regular file (a directory)");
	/* Sparse: no disk is used, and nothing is read. */
	CHECK((f = fopen("big.json", "w")) != NULL);
	fclose(f);
	CHECK(truncate("big.json", ((off_t)256 << 20) + 1) == 0);
	CHECK_ERR(sk_manifest_read(t_path("big.json"), &r, &err), SK_ETOOBIG,
	    &err);
	CHECK_CONTAINS(err.msg, t_path("big.json"));
	CHECK_EQ_INT(r.nshards, 0);
}

static void
expect_resolve(int line, const char *manifest, const char *url,
    const char *want, const char *alt)
{
	char *got = sk_manifest_resolve(manifest, url);

	if (got == NULL || (strcmp(got, want) != 0 &&
	    (alt == NULL || strcmp(got, alt) != 0)))
		t_fail(__FILE__, line, "sk_manifest_resolve(\"%s\", \"%s\") = "
		    "\"%s\", want \"%s\"", manifest, url,
		    got ? got : "(null)", want);
	free(got);
}

TEST(manifest_resolve)
{
	expect_resolve(__LINE__, "/a/b/x.json", "s-000.tar", "/a/b/s-000.tar",
	    NULL);
	expect_resolve(__LINE__, "/a/b/x.json", "sub/s-000.tar",
	    "/a/b/sub/s-000.tar", NULL);
	expect_resolve(__LINE__, "/a/b/x.json", "/abs/s.tar", "/abs/s.tar",
	    NULL);
	expect_resolve(__LINE__, "/a/b/x.json", "http://h/s.tar",
	    "http://h/s.tar", NULL);
	expect_resolve(__LINE__, "/a/b/x.json", "gs://bkt/p/s.tar",
	    "gs://bkt/p/s.tar", NULL);
	expect_resolve(__LINE__, "http://h:8080/d/x.json", "s.tar",
	    "http://h:8080/d/s.tar", NULL);
	expect_resolve(__LINE__, "gs://bkt/imagenet/train.json", "t-0.tar",
	    "gs://bkt/imagenet/t-0.tar", NULL);
	expect_resolve(__LINE__, "x.json", "s.tar", "s.tar", "./s.tar");
	expect_resolve(__LINE__, "rel/dir/x.json", "s.tar", "rel/dir/s.tar",
	    NULL);
}
