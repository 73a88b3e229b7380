/*
 * test_source.c - the local-file source: size, sequential and ranged
 * reads, seeking, errors that name the path, and directory listing.
 */
#include <sys/stat.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define DATA_SIZE 100000

/* A pattern that differs at every offset mod 251 (a prime). */
static uint8_t *
make_data(size_t n)
{
	uint8_t *p = malloc(n);
	size_t i;

	CHECK(p != NULL);
	for (i = 0; i < n; i++)
		p[i] = (uint8_t)(i % 251);
	return (p);
}

static void
check_whole_file(sk_source *s, const uint8_t *want, size_t n)
{
	uint8_t *buf = malloc(n + 4096);
	size_t got = 0;
	int64_t r;

	CHECK(buf != NULL);
	/* Odd chunk sizes, so reads straddle nothing in particular. */
	while ((r = CHECK_OK(sk_source_read(s, buf + got, 3001), s)) > 0) {
		got += (size_t)r;
		CHECK(got <= n);
	}
	CHECK_EQ_INT(got, n);
	CHECK_MEM_EQ(buf, want, n);
	/* At the end, reads keep returning 0. */
	CHECK_EQ_INT(sk_source_read(s, buf, 10), 0);
	free(buf);
}

TEST(source_file_read)
{
	uint8_t *data = make_data(DATA_SIZE);
	sk_source *s;
	uint64_t size = 0;

	t_write_file("data.bin", data, DATA_SIZE);
	CHECK_OK(sk_source_open(&s, t_path("data.bin")), s);
	CHECK_EQ_STR(sk_source_url(s), t_path("data.bin"));
	CHECK_OK(sk_source_size(s, &size), s);
	CHECK_EQ_INT(size, DATA_SIZE);
	check_whole_file(s, data, DATA_SIZE);
	sk_source_close(s);

	/* A relative path works too (the test runs in its directory). */
	CHECK_OK(sk_source_open(&s, "data.bin"), s);
	check_whole_file(s, data, DATA_SIZE);
	sk_source_close(s);
	free(data);
}

TEST(source_file_pread)
{
	uint8_t *data = make_data(DATA_SIZE), buf[1000];
	sk_source *s;

	t_write_file("data.bin", data, DATA_SIZE);
	CHECK_OK(sk_source_open(&s, "data.bin"), s);

	CHECK_EQ_INT(CHECK_OK(sk_source_read(s, buf, 10), s), 10);
	CHECK_MEM_EQ(buf, data, 10);

	CHECK_EQ_INT(CHECK_OK(sk_source_pread(s, buf, 100, 50000), s), 100);
	CHECK_MEM_EQ(buf, data + 50000, 100);
	CHECK_EQ_INT(CHECK_OK(sk_source_pread(s, buf, 1, 0), s), 1);
	CHECK_EQ_INT(buf[0], data[0]);

	/* pread did not move the sequential position. */
	CHECK_EQ_INT(CHECK_OK(sk_source_read(s, buf, 10), s), 10);
	CHECK_MEM_EQ(buf, data + 10, 10);

	/* A ranged read over the end is short; at the end it is 0. */
	CHECK_EQ_INT(CHECK_OK(sk_source_pread(s, buf, 100, DATA_SIZE - 10), s),
	    10);
	CHECK_MEM_EQ(buf, data + DATA_SIZE - 10, 10);
	CHECK_EQ_INT(CHECK_OK(sk_source_pread(s, buf, 100, DATA_SIZE), s), 0);

	/* And still the sequential position is where it was. */
	CHECK_EQ_INT(CHECK_OK(sk_source_read(s, buf, 5), s), 5);
	CHECK_MEM_EQ(buf, data + 20, 5);
	sk_source_close(s);
	free(data);
}

TEST(source_file_seek)
{
	uint8_t *data = make_data(DATA_SIZE), buf[1000];
	sk_source *s;

	t_write_file("data.bin", data, DATA_SIZE);
	CHECK_OK(sk_source_open(&s, "data.bin"), s);

	CHECK_OK(sk_source_seek(s, 90000), s);
	CHECK_EQ_INT(CHECK_OK(sk_source_read(s, buf, 100), s), 100);
	CHECK_MEM_EQ(buf, data + 90000, 100);
	CHECK_EQ_INT(CHECK_OK(sk_source_read(s, buf, 100), s), 100);
	CHECK_MEM_EQ(buf, data + 90100, 100);

	/* Backwards. */
	CHECK_OK(sk_source_seek(s, 7), s);
	CHECK_EQ_INT(CHECK_OK(sk_source_read(s, buf, 3), s), 3);
	CHECK_MEM_EQ(buf, data + 7, 3);

	/* To the end: the next read is 0. */
	CHECK_OK(sk_source_seek(s, DATA_SIZE), s);
	CHECK_EQ_INT(CHECK_OK(sk_source_read(s, buf, 100), s), 0);
	sk_source_close(s);
	free(data);
}

/* sk_source_md5_start/end give sk_source_md5's answer whatever the reads
 * in between: sequential, skips forward, reads back, reads ahead, none. */
TEST(source_md5_while_reading)
{
	uint8_t *data = make_data(DATA_SIZE), buf[5000];
	char want[33], got[33];
	uint64_t size;
	sk_source *s;
	int pass;

	t_write_file("data.bin", data, DATA_SIZE);
	CHECK_OK(sk_source_md5("data.bin", &size, want, NULL), NULL);
	CHECK_EQ_INT((long long)size, DATA_SIZE);
	for (pass = 0; pass < 4; pass++) {
		CHECK_OK(sk_source_open(&s, "data.bin"), s);
		CHECK_OK(sk_source_md5_start(s), s);
		if (pass == 0)
			while (CHECK_OK(sk_source_read(s, buf, 3001), s) > 0)
				;
		if (pass == 1) {
			/* A tar reader: a header, a skip, a read back. */
			CHECK_OK(sk_source_read(s, buf, 512), s);
			CHECK_OK(sk_source_seek(s, 40000), s);
			CHECK_OK(sk_source_read(s, buf, 700), s);
			CHECK_OK(sk_source_pread(s, buf, 100, 10), s);
			CHECK_OK(sk_source_seek(s, 99990), s);
		}
		if (pass == 2)
			/* Far ahead first: the gap is read at the end. */
			CHECK_OK(sk_source_pread(s, buf, 4000, 80000), s);
		CHECK_OK(sk_source_md5_end(s, &size, got), s);
		CHECK_EQ_INT((long long)size, DATA_SIZE);
		CHECK_EQ_STR(got, want);
		sk_source_close(s);
	}
	/* After the first read it is too late. */
	CHECK_OK(sk_source_open(&s, "data.bin"), s);
	CHECK_OK(sk_source_read(s, buf, 10), s);
	CHECK_EQ_INT(sk_source_md5_start(s), SK_EINVAL);
	sk_source_close(s);
	free(data);
}

TEST(source_file_empty)
{
	sk_source *s;
	uint64_t size = 1;
	char buf[16];

	t_write_file("empty", "", 0);
	CHECK_OK(sk_source_open(&s, "empty"), s);
	CHECK_OK(sk_source_size(s, &size), s);
	CHECK_EQ_INT(size, 0);
	CHECK_EQ_INT(CHECK_OK(sk_source_read(s, buf, sizeof buf), s), 0);
	sk_source_close(s);
}

TEST(source_file_missing)
{
	sk_source *s = NULL;
	const char *msg;

	msg = CHECK_ERR(sk_source_open(&s, t_path("no/such/shard-000.tar")),
	    SK_ENOENT, s);
	CHECK(s != NULL);
	CHECK_CONTAINS(msg, "no/such/shard-000.tar");
	t_diag("message: %s", msg);
	sk_source_close(s);

	/* The same through a file:// URL. */
	msg = CHECK_ERR(sk_source_open(&s, "file:///nonexistent-sk/x.tar"),
	    SK_ENOENT, s);
	CHECK_CONTAINS(msg, "nonexistent-sk/x.tar");
	sk_source_close(s);
}

/*
 * Issue 10, case 8: a FIFO named as a shard hung the reader in open();
 * only regular files are sources, and what else a path names is said at
 * once. A symbolic link is followed: its target's type counts.
 */
static void
expect_not_regular(int line, const char *path, const char *what)
{
	char want[100];
	sk_source *s = NULL;

	if (sk_source_open(&s, path) != SK_EINVAL)
		t_fail(__FILE__, line, "%s opened, or not SK_EINVAL: %s", path,
		    sk_errmsg(s));
	snprintf(want, sizeof want, "%s: not a regular file (%s)", path, what);
	if (strstr(sk_errmsg(s), want) == NULL)
		t_fail(__FILE__, line, "message lacks \"%s\": %s", want,
		    sk_errmsg(s));
	t_diag("%s", sk_errmsg(s));
	/* The handle failed fatally. */
	CHECK(sk_source_size(s, &(uint64_t){ 0 }) < 0);
	sk_source_close(s);
}

TEST(source_file_not_regular)
{
	uint8_t *data = make_data(1000);
	sk_source *s;
	uint64_t size = 0;

	CHECK(mkfifo("fifo.tar", 0644) == 0);
	expect_not_regular(__LINE__, t_path("fifo.tar"), "a fifo");
	CHECK(mkdir("dir.tar", 0755) == 0);
	expect_not_regular(__LINE__, t_path("dir.tar"), "a directory");
	expect_not_regular(__LINE__, "/dev/null", "a character device");
	CHECK(symlink("fifo.tar", "link-to-fifo.tar") == 0);
	expect_not_regular(__LINE__, t_path("link-to-fifo.tar"), "a fifo");

	/* A link to a regular file reads the file, and blocks as usual. */
	t_write_file("data.bin", data, 1000);
	CHECK(symlink("data.bin", "link.tar") == 0);
	CHECK_OK(sk_source_open(&s, t_path("link.tar")), s);
	CHECK_OK(sk_source_size(s, &size), s);
	CHECK_EQ_INT(size, 1000);
	check_whole_file(s, data, 1000);
	sk_source_close(s);
	free(data);
}

TEST(source_file_url)
{
	uint8_t *data = make_data(DATA_SIZE);
	char url[4200];
	sk_source *s;
	uint64_t size = 0;

	t_write_file("data.bin", data, DATA_SIZE);
	snprintf(url, sizeof url, "file://%s", t_path("data.bin"));
	CHECK_OK(sk_source_open(&s, url), s);
	CHECK_EQ_STR(sk_source_url(s), url);
	CHECK_OK(sk_source_size(s, &size), s);
	CHECK_EQ_INT(size, DATA_SIZE);
	check_whole_file(s, data, DATA_SIZE);
	sk_source_close(s);
	free(data);
}

TEST(source_open_unsupported)
{
	sk_source *s = NULL;

	/* Not a scheme shardkit knows: a failure with a message. */
	CHECK(sk_source_open(&s, "ftp://h/x.tar") < 0);
	CHECK(s != NULL);
	CHECK(sk_errmsg(s)[0] != '\0');
	sk_source_close(s);
}

TEST(source_list_dir)
{
	struct sk_strlist l = { 0 };
	struct sk_error err = { 0 };
	char want[4200];

	CHECK(mkdir("d", 0755) == 0);
	CHECK(mkdir("d/sub", 0755) == 0);
	t_write_file("d/b.tar", "b", 1);
	t_write_file("d/a.tar", "a", 1);
	t_write_file("d/c.json", "{}", 2);
	t_write_file("d/B.tar", "B", 1);

	CHECK_OK(sk_strlist_push(&l, "already-there"), &err);
	CHECK_OK(sk_source_list(t_path("d"), &l, &err), &err);
	/* Appended, sorted (bytewise), regular files only, full paths. */
	CHECK_EQ_INT(l.n, 5);
	CHECK_EQ_STR(l.v[0], "already-there");
	snprintf(want, sizeof want, "%s", t_path("d/B.tar"));
	CHECK_EQ_STR(l.v[1], want);
	snprintf(want, sizeof want, "%s", t_path("d/a.tar"));
	CHECK_EQ_STR(l.v[2], want);
	snprintf(want, sizeof want, "%s", t_path("d/b.tar"));
	CHECK_EQ_STR(l.v[3], want);
	snprintf(want, sizeof want, "%s", t_path("d/c.json"));
	CHECK_EQ_STR(l.v[4], want);
	sk_strlist_free(&l);
}

TEST(source_list_file_url)
{
	struct sk_strlist l = { 0 };
	struct sk_error err = { 0 };
	char url[4200];
	sk_source *s;
	size_t i;
	char c;

	CHECK(mkdir("d", 0755) == 0);
	t_write_file("d/y.tar", "y", 1);
	t_write_file("d/x.tar", "x", 1);
	snprintf(url, sizeof url, "file://%s", t_path("d"));
	CHECK_OK(sk_source_list(url, &l, &err), &err);
	CHECK_EQ_INT(l.n, 2);
	/* Either file:// URLs or paths; each must name the file and open. */
	for (i = 0; i < l.n; i++) {
		t_diag("listed: %s", l.v[i]);
		CHECK_CONTAINS(l.v[i], t_path(i == 0 ? "d/x.tar" : "d/y.tar"));
		CHECK_OK(sk_source_open(&s, l.v[i]), s);
		CHECK_EQ_INT(CHECK_OK(sk_source_read(s, &c, 1), s), 1);
		CHECK_EQ_INT(c, i == 0 ? 'x' : 'y');
		sk_source_close(s);
	}
	sk_strlist_free(&l);
}

TEST(source_list_missing)
{
	struct sk_strlist l = { 0 };
	struct sk_error err = { 0 };
	const char *msg;

	msg = CHECK_ERR(sk_source_list(t_path("nope"), &l, &err), SK_ENOENT,
	    &err);
	CHECK_CONTAINS(msg, "nope");
	CHECK_EQ_INT(l.n, 0);
	sk_strlist_free(&l);
}
