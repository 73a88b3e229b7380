/*
 * test_listing.c - folder listings with metadata: which names a folder
 * may hold, the order and uniqueness of its entries, the times the
 * servers write, what nginx, GCS and S3 listings are read as, and whole
 * listings over pages against a canned server on loopback.
 */
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "internal.h"
#include "cloud.h"
#include "fetch.h"

TEST(listing_names)
{
	static const char *const bad[] = { "", ".", "..", "a/b", "a/", "/" };
	size_t i, len = 0;
	const char *n;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECK(!sk__entry_name_ok(bad[i], strlen(bad[i])));
	CHECK(!sk__entry_name_ok("a\0b", 3));
	CHECK(sk__entry_name_ok("...", 3));
	CHECK(sk__entry_name_ok(".hidden", 7));
	CHECK(sk__entry_name_ok("a b%.tar", 8));

	n = sk__entry_under("dir/a.tar", 9, "dir/", 0, &len);
	CHECK(n != NULL && len == 5 && memcmp(n, "a.tar", 5) == 0);
	n = sk__entry_under("dir/sub/", 8, "dir/", 1, &len);
	CHECK(n != NULL && len == 3 && memcmp(n, "sub", 3) == 0);
	n = sk__entry_under("a.tar", 5, "", 0, &len);
	CHECK(n != NULL && len == 5);
	/* The folder's own marker, another folder's key, a deeper one. */
	CHECK(sk__entry_under("dir/", 4, "dir/", 0, &len) == NULL);
	CHECK(sk__entry_under("dir/", 4, "dir/", 1, &len) == NULL);
	CHECK(sk__entry_under("dix/a", 5, "dir/", 0, &len) == NULL);
	CHECK(sk__entry_under("di", 2, "dir/", 0, &len) == NULL);
	CHECK(sk__entry_under("dir/sub/b", 9, "dir/", 0, &len) == NULL);
	CHECK(sk__entry_under("dir/a/b/", 8, "dir/", 1, &len) == NULL);
	/* A common prefix ends in the delimiter; a key does not. */
	CHECK(sk__entry_under("dir/sub", 7, "dir/", 1, &len) == NULL);
	CHECK(sk__entry_under("dir/sub/", 8, "dir/", 0, &len) == NULL);
	/* Empty segments, "." and "..", a NUL. */
	CHECK(sk__entry_under("dir//", 5, "dir/", 1, &len) == NULL);
	CHECK(sk__entry_under("dir//b", 6, "dir/", 0, &len) == NULL);
	CHECK(sk__entry_under("dir/.", 5, "dir/", 0, &len) == NULL);
	CHECK(sk__entry_under("dir/../", 7, "dir/", 1, &len) == NULL);
	CHECK(sk__entry_under("dir/a\0b", 7, "dir/", 0, &len) == NULL);
}

/* A server that pages without end: tokens A, B, A; empty pages with new
 * tokens; a listing that runs too long. */
TEST(listing_guard)
{
	struct sk__list_guard g;
	struct sk_error err = { 0 };
	const char *m;
	char tok[32];
	int i;

	sk__list_guard_init(&g);
	CHECK_OK(sk__list_guard_page(&g, "s3://b/p/", "A", 0, &err), &err);
	CHECK_OK(sk__list_guard_page(&g, "s3://b/p/", "B", 0, &err), &err);
	m = CHECK_ERR(sk__list_guard_page(&g, "s3://b/p/", "A", 0, &err),
	    SK_EFORMAT, &err);
	CHECK_CONTAINS(m, "s3://b/p/");
	CHECK_CONTAINS(m, "page token it gave before");
	sk__list_guard_free(&g);

	/* new tokens, no names: refused at the SK_LIST_EMPTY_MAX-th page in
	 * a row; a page with a name starts the count again */
	sk__list_guard_init(&g);
	for (i = 1; i < SK_LIST_EMPTY_MAX; i++) {
		snprintf(tok, sizeof tok, "t%d", i);
		CHECK_OK(sk__list_guard_page(&g, "gs://b/p/", tok, 0, &err),
		    &err);
	}
	CHECK_OK(sk__list_guard_page(&g, "gs://b/p/", "named", 3, &err), &err);
	for (i = 1; i < SK_LIST_EMPTY_MAX; i++) {
		snprintf(tok, sizeof tok, "u%d", i);
		CHECK_OK(sk__list_guard_page(&g, "gs://b/p/", tok, 0, &err),
		    &err);
	}
	m = CHECK_ERR(sk__list_guard_page(&g, "gs://b/p/", "v", 0, &err),
	    SK_EFORMAT, &err);
	CHECK_CONTAINS(m, "gs://b/p/");
	CHECK_CONTAINS(m, "held no name");
	sk__list_guard_free(&g);
	/* the last page (no token) ends the listing whatever it held */
	sk__list_guard_init(&g);
	CHECK_OK(sk__list_guard_page(&g, "gs://b/p/", NULL, 0, &err), &err);
	sk__list_guard_free(&g);

	/* thousands of distinct tokens are fine (the set grows) */
	sk__list_guard_init(&g);
	for (i = 0; i < 5000; i++) {
		snprintf(tok, sizeof tok, "w%d", i);
		CHECK_OK(sk__list_guard_page(&g, "s3://b/", tok, 1, &err), &err);
	}
	CHECK_ERR(sk__list_guard_page(&g, "s3://b/", "w17", 1, &err),
	    SK_EFORMAT, &err);
	/* and the whole listing's time */
	g.t0 -= SK_LIST_SECONDS_MAX + 1;
	m = CHECK_ERR(sk__list_guard_page(&g, "s3://b/", "x", 1, &err),
	    SK_ETOOBIG, &err);
	CHECK_CONTAINS(m, "seconds");
	sk__list_guard_free(&g);
}

TEST(listing_sizes_and_versions)
{
	static const char *const bad[] = { "", "+5", "-1", " 5", "5 ", "0x10",
	    "1e3", "18446744073709551616", "99999999999999999999" };
	char v[200];
	uint64_t n = 1;
	size_t i;

	CHECK_EQ_INT(sk__parse_u64("0", &n), 0);
	CHECK(n == 0);
	CHECK_EQ_INT(sk__parse_u64("007", &n), 0);
	CHECK(n == 7);
	CHECK_EQ_INT(sk__parse_u64("18446744073709551615", &n), 0);
	CHECK(n == UINT64_MAX);
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		n = 42;
		CHECK_EQ_INT(sk__parse_u64(bad[i], &n), -1);
		CHECK(n == 42);
	}

	CHECK(sk__entry_version_ok(""));
	CHECK(sk__entry_version_ok("\"9b2cf535f27731c974343645a3985328-3\""));
	CHECK(sk__entry_version_ok("1700000000000001"));
	CHECK(!sk__entry_version_ok("\"a b\""));
	CHECK(!sk__entry_version_ok("\"a\r\nX-Injected: 1\""));
	CHECK(!sk__entry_version_ok("caf\xc3\xa9"));
	memset(v, 'a', sizeof v);
	v[127] = '\0';
	CHECK(sk__entry_version_ok(v));
	v[127] = 'a';
	v[128] = '\0';
	CHECK(!sk__entry_version_ok(v));
}

/* Sorted bytewise, the folder before the file of its name, each name
 * once for each kind; what was there before is left alone. */
TEST(listing_sort)
{
	struct sk__entries e = { NULL, 0, 0 };

	CHECK_EQ_INT(sk__entries_add(&e, "zz", 2, 0, 1, 0, ""), 0);
	CHECK_EQ_INT(sk__entries_add(&e, "b", 1, 0, 5, 10, "\"e1\""), 0);
	CHECK_EQ_INT(sk__entries_add(&e, "a", 1, 0, 3, 0, "\"x\""), 0);
	CHECK_EQ_INT(sk__entries_add(&e, "B", 1, 0, 4, 0, ""), 0);
	CHECK_EQ_INT(sk__entries_add(&e, "a", 1, 1, 9, 7, "\"v\""), 0);
	CHECK_EQ_INT(sk__entries_add(&e, "b", 1, 0, 5, 10, "\"e1\""), 0);
	CHECK_EQ_INT(sk__entries_add(&e, "a", 1, 1, 0, 0, ""), 0);
	CHECK_EQ_INT(sk__entries_add(&e, "a-b", 3, 0, 2, 0, ""), 0);
	CHECK_EQ_INT(sk__entries_add(&e, "a.", 2, 0, 2, 0, ""), 0);
	CHECK_EQ_INT(sk__entries_add(&e, "..", 2, 1, 0, 0, ""), SK_EINVAL);
	CHECK_EQ_INT(sk__entries_add(&e, "x", 1, 0, 0, 0, "a b"), SK_EINVAL);
	CHECK_EQ_INT((int)e.n, 9);
	sk__entries_sort(&e, 1);
	CHECK_EQ_INT((int)e.n, 7);
	CHECK_EQ_STR(e.v[0].name, "zz");	/* before first: untouched */
	CHECK_EQ_STR(e.v[1].name, "B");
	CHECK_EQ_STR(e.v[2].name, "a");
	CHECK_EQ_INT(e.v[2].dir, 1);
	/* A folder has no size or version. */
	CHECK(e.v[2].size == 0 && e.v[2].version[0] == '\0');
	CHECK_EQ_STR(e.v[3].name, "a");
	CHECK_EQ_INT(e.v[3].dir, 0);
	CHECK(e.v[3].size == 3);
	CHECK_EQ_STR(e.v[3].version, "\"x\"");
	CHECK_EQ_STR(e.v[4].name, "a-b");
	CHECK_EQ_STR(e.v[5].name, "a.");
	CHECK_EQ_STR(e.v[6].name, "b");
	CHECK(e.v[6].size == 5 && e.v[6].mtime == 10);
	sk__entries_free(&e);
	CHECK(e.v == NULL && e.n == 0);
	sk__entries_sort(&e, 0);
}

TEST(listing_times)
{
	/* date -u -d 2009-10-12T17:50:30Z +%s */
	CHECK_EQ_INT(sk__time_rfc3339("2009-10-12T17:50:30.000Z"), 1255369830);
	CHECK_EQ_INT(sk__time_rfc3339("2009-10-12T17:50:30Z"), 1255369830);
	CHECK_EQ_INT(sk__time_rfc3339("2026-01-15T10:00:00.123456Z"),
	    1768471200);
	CHECK_EQ_INT(sk__time_rfc3339("2009-10-12T19:50:30+02:00"), 1255369830);
	CHECK_EQ_INT(sk__time_rfc3339("2009-10-12t15:20:30.5-02:30"),
	    1255369830);
	CHECK_EQ_INT(sk__time_rfc3339("2024-02-29T00:00:00Z"), 1709164800);
	CHECK_EQ_INT(sk__time_http("Wed, 25 Nov 2026 16:30:00 GMT"),
	    1795624200);
	CHECK_EQ_INT(sk__time_http("Thu, 01 Jan 1970 00:00:01 GMT"), 1);

	/* Unparsable times are 0, not errors. */
	CHECK_EQ_INT(sk__time_rfc3339(""), 0);
	CHECK_EQ_INT(sk__time_rfc3339("2009-10-12"), 0);
	CHECK_EQ_INT(sk__time_rfc3339("2009-10-12T17:50:30"), 0);
	CHECK_EQ_INT(sk__time_rfc3339("2009-10-12T17:50:30.Z"), 0);
	CHECK_EQ_INT(sk__time_rfc3339("2009-10-12T17:50:30ZZ"), 0);
	CHECK_EQ_INT(sk__time_rfc3339("2009-13-12T17:50:30Z"), 0);
	CHECK_EQ_INT(sk__time_rfc3339("2023-02-29T00:00:00Z"), 0);
	CHECK_EQ_INT(sk__time_rfc3339("2009-04-31T00:00:00Z"), 0);
	CHECK_EQ_INT(sk__time_rfc3339("2009-10-12T24:00:00Z"), 0);
	CHECK_EQ_INT(sk__time_rfc3339("2009-10-12T17:5a:30Z"), 0);
	CHECK_EQ_INT(sk__time_rfc3339("2009-10-12T17:50:30+2:00"), 0);
	CHECK_EQ_INT(sk__time_rfc3339("+009-10-12T17:50:30Z"), 0);
	CHECK_EQ_INT(sk__time_http("Wed, 25 Nov 2026 16:30:00 UTC"), 0);
	CHECK_EQ_INT(sk__time_http("Wed, 25 Nvb 2026 16:30:00 GMT"), 0);
	CHECK_EQ_INT(sk__time_http("Xyz, 25 Nov 2026 16:30:00 GMT"), 0);
	CHECK_EQ_INT(sk__time_http("Wed, 31 Nov 2026 16:30:00 GMT"), 0);
	CHECK_EQ_INT(sk__time_http("Wednesday, 25-Nov-26 16:30:00 GMT"), 0);
	CHECK_EQ_INT(sk__time_http("2009-10-12T17:50:30Z"), 0);
}

/* ------------------------------------------------------------------------ */
/* the three listings                                                       */

/* The entry of this name and kind, or a failed test. */
static const struct sk__entry *
find(const struct sk__entries *e, const char *name, int dir)
{
	size_t i;

	for (i = 0; i < e->n; i++)
		if (strcmp(e->v[i].name, name) == 0 && e->v[i].dir == dir)
			return &e->v[i];
	t_fail(__FILE__, __LINE__, "no %s \"%s\" in the listing",
	    dir ? "folder" : "file", name);
}

/* The names in order, "name/" for a folder, joined by spaces. */
static const char *
names(const struct sk__entries *e)
{
	static char buf[1000];
	size_t i, n = 0;

	buf[0] = '\0';
	for (i = 0; i < e->n && n < sizeof buf; i++)
		n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s%s",
		    i ? " " : "", e->v[i].name, e->v[i].dir ? "/" : "");
	return buf;
}

/* nginx: files and folders with their sizes and times; "other", names
 * with a dot first and names that are not one segment are not listed. */
TEST(listing_nginx)
{
	const char *page = "[\n"
	    "{ \"name\":\"b.tar\", \"type\":\"file\", \"mtime\":\"Wed, 25 Nov "
	    "2026 16:30:00 GMT\", \"size\":20450304 },\n"
	    "{ \"name\":\"sub\", \"type\":\"directory\", \"mtime\":\"Thu, 01 "
	    "Jan 1970 00:00:01 GMT\" },\n"
	    "{ \"name\":\"sub\", \"type\":\"file\", \"size\":0 },\n"
	    "{ \"name\":\"a b%.tar\", \"type\":\"file\", "
	    "\"mtime\":\"yesterday\", \"size\":9223372036854775807 },\n"
	    "{ \"name\":\"fifo\", \"type\":\"other\" },\n"
	    "{ \"name\":\".hidden\", \"type\":\"file\", \"size\":1 },\n"
	    "{ \"name\":\".\", \"type\":\"directory\" },\n"
	    "{ \"name\":\"..\", \"type\":\"directory\" },\n"
	    "{ \"name\":\"\", \"type\":\"file\", \"size\":1 },\n"
	    "{ \"name\":\"x/y\", \"type\":\"file\", \"size\":1 },\n"
	    "{ \"name\":\"link\", \"type\":\"symlink\", \"size\":1 },\n"
	    "{ \"type\":\"file\", \"size\":1 }, 7, \"str\"\n"
	    "]";
	struct sk__entries e = { NULL, 0, 0 };
	struct sk_error err = { 0 };
	const struct sk__entry *x;

	CHECK_OK(sk__http_listing(page, strlen(page), "http://h/d/", &e, &err),
	    &err);
	sk__entries_sort(&e, 0);
	CHECK_EQ_STR(names(&e), "a b%.tar b.tar sub/ sub");
	x = find(&e, "b.tar", 0);
	CHECK(x->size == 20450304);
	CHECK_EQ_INT(x->mtime, 1795624200);
	CHECK_EQ_STR(x->version, "");
	x = find(&e, "sub", 1);
	CHECK(x->size == 0);
	CHECK_EQ_INT(x->mtime, 1);
	x = find(&e, "sub", 0);
	CHECK(x->size == 0 && x->mtime == 0);
	x = find(&e, "a b%.tar", 0);
	CHECK(x->size == INT64_MAX);
	CHECK_EQ_INT(x->mtime, 0);	/* "yesterday" is no time */
	sk__entries_free(&e);
}

/* A file must come with its size in bytes: a string, a negative or a
 * fraction is not one, and nothing else on the page is trusted then. */
TEST(listing_nginx_bad)
{
	static const char *const bad[] = {
		"[{\"name\":\"a\",\"type\":\"file\",\"size\":\"12\"}]",
		"[{\"name\":\"a\",\"type\":\"file\",\"size\":-1}]",
		"[{\"name\":\"a\",\"type\":\"file\",\"size\":1.5}]",
		"[{\"name\":\"a\",\"type\":\"file\"}]",
		"[{\"name\":\"a\",\"type\":\"file\",\"size\":null}]",
	};
	struct sk__entries e = { NULL, 0, 0 };
	struct sk_error err = { 0 };
	const char *msg, *p;
	size_t i;

	/* A file with no size is left out (and counted in a warning); the
	 * rest of the listing stays. */
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char text[200];

		snprintf(text, sizeof text, "[%.*s, {\"name\":\"b\",\"type\":"
		    "\"file\",\"size\":3}]", (int)strlen(bad[i]) - 2, bad[i] + 1);
		CHECK_OK(sk__http_listing(text, strlen(text), "http://h/d/", &e,
		    &err), &err);
		CHECK_EQ_STR(names(&e), "b");
		sk__entries_free(&e);
		memset(&e, 0, sizeof e);
	}
	/* Not a listing at all; a name with a NUL is no JSON jansson reads;
	 * a size past 2^63 - 1 neither. */
	p = "{\"name\":\"a\"}";
	msg = CHECK_ERR(sk__http_listing(p, strlen(p), "http://h/d/", &e,
	    &err), SK_EFORMAT, &err);
	CHECK_CONTAINS(msg, "not a JSON listing");
	p = "[{\"name\":\"a\\u0000b\",\"type\":\"file\",\"size\":1}]";
	CHECK_ERR(sk__http_listing(p, strlen(p), "http://h/d/", &e, &err),
	    SK_EFORMAT, &err);
	p = "[{\"name\":\"a\",\"type\":\"file\",\"size\":9223372036854775808}]";
	CHECK_ERR(sk__http_listing(p, strlen(p), "http://h/d/", &e, &err),
	    SK_EFORMAT, &err);
	CHECK_EQ_INT((int)e.n, 0);
	/* A directory has no size to give. */
	p = "[{\"name\":\"d\",\"type\":\"directory\",\"size\":\"x\"}]";
	CHECK_OK(sk__http_listing(p, strlen(p), "http://h/d/", &e, &err), &err);
	CHECK_EQ_STR(names(&e), "d/");
	sk__entries_free(&e);
}

/* objects.list: objects with their size, generation and update time,
 * folders from "prefixes"; the folder's own marker, other folders' names,
 * deeper ones, empty segments, "." and ".." are not listed. */
TEST(listing_gcs)
{
	const char *page = "{\"kind\": \"storage#objects\", "
	    "\"nextPageToken\": \"Ci/x=\", "
	    "\"prefixes\": [\"d/sub/\", \"d/a/\", \"d//\", \"d/../\", "
	    "\"d/./\", \"e/f/\", \"d/x/y/\", \"d/nodelim\", 7], "
	    "\"items\": ["
	    "{\"name\": \"d/b.tar\", \"size\": \"20450304\", \"generation\": "
	    "\"1700000000000001\", \"updated\": \"2026-01-15T10:00:00.000Z\"},"
	    "{\"name\": \"d/a\", \"size\": \"0\", \"generation\": \"1\"},"
	    "{\"name\": \"d/\", \"size\": \"0\", \"generation\": \"2\"},"
	    "{\"name\": \"d/.\", \"size\": \"1\"},"
	    "{\"name\": \"d/..\", \"size\": \"1\"},"
	    "{\"name\": \"d//b\", \"size\": \"1\"},"
	    "{\"name\": \"d/sub/c\", \"size\": \"x\"},"
	    "{\"name\": \"e/c\", \"size\": \"-1\"},"
	    "{\"name\": \"d\", \"size\": \"1\"},"
	    "{\"name\": \"d/nogen\", \"size\": \"18446744073709551615\", "
	    "\"updated\": \"not a time\"},"
	    "{\"size\": \"1\"}, \"d/str\", {\"name\": 5}]}";
	struct sk__entries e = { NULL, 0, 0 };
	struct sk_error err = { 0 };
	const struct sk__entry *x;
	char *next = NULL;

	CHECK_OK(sk__gcs_parse_list(page, strlen(page), "d/", "gs://b/d/", &e,
	    &next, &err), &err);
	CHECK_EQ_STR(next, "Ci%2Fx%3D");
	free(next);
	sk__entries_sort(&e, 0);
	CHECK_EQ_STR(names(&e), "a/ a b.tar nogen sub/");
	x = find(&e, "b.tar", 0);
	CHECK(x->size == 20450304);
	CHECK_EQ_STR(x->version, "1700000000000001");
	CHECK_EQ_INT(x->mtime, 1768471200);
	x = find(&e, "a", 0);
	CHECK(x->size == 0 && x->mtime == 0);
	CHECK_EQ_STR(x->version, "1");
	x = find(&e, "a", 1);
	CHECK(x->size == 0 && x->mtime == 0 && x->version[0] == '\0');
	x = find(&e, "nogen", 0);
	CHECK(x->size == UINT64_MAX && x->mtime == 0);
	CHECK_EQ_STR(x->version, "");
	sk__entries_free(&e);

	/* At the bucket's root. */
	page = "{\"prefixes\": [\"top/\"], \"items\": [{\"name\": \"x.tar\", "
	    "\"size\": \"3\"}, {\"name\": \"top/y\", \"size\": \"1\"}]}";
	CHECK_OK(sk__gcs_parse_list(page, strlen(page), "", "gs://b/", &e,
	    &next, &err), &err);
	CHECK(next == NULL);
	CHECK_EQ_STR(names(&e), "x.tar top/");
	sk__entries_free(&e);
}

/* A size that is not a string of digits, or a generation that is not
 * one of at most 127, fails the page naming the folder. */
TEST(listing_gcs_bad)
{
	static const char *const bad[] = {
		"\"size\": \"+5\"", "\"size\": \"\"", "\"size\": \" 5\"",
		"\"size\": 5", "\"size\": \"18446744073709551616\"",
		"\"generation\": \"1\"",
		"\"size\": \"1\", \"generation\": \"12a\"",
		"\"size\": \"1\", \"generation\": \"\"",
		"\"size\": \"1\", \"generation\": 12",
		"\"size\": \"1\", \"generation\": null",
	};
	struct sk__entries e = { NULL, 0, 0 };
	struct sk_error err = { 0 };
	char page[600], gen[200];
	const char *msg;
	char *next = NULL;
	size_t i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(page, sizeof page, "{\"nextPageToken\": \"t\", "
		    "\"items\": [{\"name\": \"d/ok\", \"size\": \"1\"}, "
		    "{\"name\": \"d/x\", %s}]}", bad[i]);
		msg = CHECK_ERR(sk__gcs_parse_list(page, strlen(page), "d/",
		    "gs://b/d/", &e, &next, &err), SK_EFORMAT, &err);
		CHECK_CONTAINS(msg, "gs://b/d/: the listing gives an "
		    "object a ");
		CHECK(next == NULL);
		/* What came before stays, for the caller to free. */
		CHECK_EQ_INT((int)e.n, 1);
		sk__entries_free(&e);
	}
	memset(gen, '7', 127);
	gen[127] = '\0';
	snprintf(page, sizeof page, "{\"items\": [{\"name\": \"d/x\", \"size\":"
	    " \"1\", \"generation\": \"%s\"}]}", gen);
	CHECK_OK(sk__gcs_parse_list(page, strlen(page), "d/", "gs://b/d/", &e,
	    &next, &err), &err);
	CHECK_EQ_STR(e.v[0].version, gen);
	sk__entries_free(&e);
	snprintf(page, sizeof page, "{\"items\": [{\"name\": \"d/x\", \"size\":"
	    " \"1\", \"generation\": \"%s7\"}]}", gen);
	msg = CHECK_ERR(sk__gcs_parse_list(page, strlen(page), "d/",
	    "gs://b/d/", &e, &next, &err), SK_EFORMAT, &err);
	CHECK_CONTAINS(msg, "generation");
	/* Another folder's object is not looked at. */
	snprintf(page, sizeof page, "{\"items\": [{\"name\": \"e/x\", \"size\":"
	    " \"bad\", \"generation\": \"bad\"}]}");
	CHECK_OK(sk__gcs_parse_list(page, strlen(page), "d/", "gs://b/d/", &e,
	    &next, &err), &err);
	CHECK_EQ_INT((int)e.n, 0);
	msg = CHECK_ERR(sk__gcs_parse_list("[]", 2, "d/", "gs://b/d/", &e,
	    &next, &err), SK_EFORMAT, &err);
	CHECK_CONTAINS(msg, "not a JSON object");
}

/* ListObjectsV2: objects with their Size, ETag (as sent, quotes
 * included) and LastModified; folders from CommonPrefixes. */
TEST(listing_s3)
{
	const char *page = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
	    "<ListBucketResult "
	    "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
	    "<Name>b</Name><Prefix>dir/</Prefix><IsTruncated>false"
	    "</IsTruncated>"
	    "<Contents><Key>dir/b.tar</Key><LastModified>2009-10-12T17:50:30"
	    ".000Z</LastModified><ETag>&quot;70ee1738b6b21e2c8a43f3a5ab0eee71"
	    "&quot;</ETag><Size>20450304</Size><StorageClass>STANDARD"
	    "</StorageClass></Contents>"
	    "<Contents><Key>dir/a</Key><Size>0</Size><ETag>\"x-2\"</ETag>"
	    "</Contents>"
	    "<Contents><Key>dir/</Key><Size>0</Size></Contents>"
	    "<Contents><Key>dir/.</Key><Size>x</Size></Contents>"
	    "<Contents><Key>dir/..</Key></Contents>"
	    "<Contents><Key>dir//x</Key><Size>1</Size></Contents>"
	    "<Contents><Key>dir/sub/deep</Key><Size>-1</Size></Contents>"
	    "<Contents><Key>dix/c</Key><Size>1</Size></Contents>"
	    "<Contents><Key>dir/noetag</Key><Size>18446744073709551615</Size>"
	    "<LastModified>yesterday</LastModified></Contents>"
	    "<Contents><Size>1</Size></Contents>"
	    "<CommonPrefixes><Prefix>dir/a/</Prefix></CommonPrefixes>"
	    "<CommonPrefixes><Prefix>dir/sub/</Prefix><Prefix>dir/two/</Prefix>"
	    "</CommonPrefixes>"
	    "<CommonPrefixes><Prefix>dir//</Prefix></CommonPrefixes>"
	    "<CommonPrefixes><Prefix>dir/../</Prefix></CommonPrefixes>"
	    "<CommonPrefixes><Prefix>other/x/</Prefix></CommonPrefixes>"
	    "<CommonPrefixes><Prefix>dir/x/y/</Prefix></CommonPrefixes>"
	    "<CommonPrefixes><Prefix>dir/nodelim</Prefix></CommonPrefixes>"
	    "</ListBucketResult>";
	struct sk__entries e = { NULL, 0, 0 };
	struct sk_error err = { 0 };
	const struct sk__entry *x;
	char token[64];
	int truncated = -1;

	CHECK_OK(sk__s3_parse_list(page, strlen(page), "dir/", "s3://b/dir/",
	    &e, token, sizeof token, &truncated, &err), &err);
	CHECK_EQ_INT(truncated, 0);
	CHECK_EQ_STR(token, "");
	sk__entries_sort(&e, 0);
	CHECK_EQ_STR(names(&e), "a/ a b.tar noetag sub/ two/");
	x = find(&e, "b.tar", 0);
	CHECK(x->size == 20450304);
	CHECK_EQ_STR(x->version, "\"70ee1738b6b21e2c8a43f3a5ab0eee71\"");
	CHECK_EQ_INT(x->mtime, 1255369830);
	x = find(&e, "a", 0);
	CHECK_EQ_STR(x->version, "\"x-2\"");
	CHECK(x->size == 0 && x->mtime == 0);
	x = find(&e, "a", 1);
	CHECK(x->size == 0 && x->mtime == 0 && x->version[0] == '\0');
	x = find(&e, "noetag", 0);
	CHECK(x->size == UINT64_MAX && x->mtime == 0);
	CHECK_EQ_STR(x->version, "");
	sk__entries_free(&e);

	/* At the bucket's root. */
	page = "<ListBucketResult><Contents><Key>x.tar</Key><Size>3</Size>"
	    "</Contents><Contents><Key>top/y</Key><Size>1</Size></Contents>"
	    "<CommonPrefixes><Prefix>top/</Prefix></CommonPrefixes>"
	    "</ListBucketResult>";
	CHECK_OK(sk__s3_parse_list(page, strlen(page), "", "s3://b/", &e,
	    token, sizeof token, &truncated, &err), &err);
	CHECK_EQ_STR(names(&e), "x.tar top/");
	sk__entries_free(&e);
}

/* A Size that is not digits (or none), or an ETag that cannot go back
 * into an If-Match as it is, fails the page naming the folder. */
TEST(listing_s3_bad)
{
	static const char *const bad[] = {
		"<Size>+5</Size>", "<Size></Size>", "<Size> 5</Size>",
		"<Size>0x1</Size>", "<Size>18446744073709551616</Size>", "",
		"<Size>1</Size><ETag>\"a b\"</ETag>",
		"<Size>1</Size><ETag>\"a&#10;Injected: 1\"</ETag>",
		"<Size>1</Size><ETag>\"caf&#233;\"</ETag>",
	};
	struct sk__entries e = { NULL, 0, 0 };
	struct sk_error err = { 0 };
	char page[800], etag[200], token[64];
	const char *msg;
	int truncated;
	size_t i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(page, sizeof page, "<ListBucketResult><Contents><Key>"
		    "dir/ok</Key><Size>1</Size></Contents><Contents><Key>dir/x"
		    "</Key>%s</Contents></ListBucketResult>", bad[i]);
		msg = CHECK_ERR(sk__s3_parse_list(page, strlen(page), "dir/",
		    "s3://b/dir/", &e, token, sizeof token, &truncated, &err),
		    SK_EFORMAT, &err);
		CHECK_CONTAINS(msg, "s3://b/dir/: the listing gives an "
		    "object ");
		/* What came before stays, for the caller to free. */
		CHECK_EQ_INT((int)e.n, 1);
		sk__entries_free(&e);
	}
	memset(etag, 'e', 127);
	etag[127] = '\0';
	snprintf(page, sizeof page, "<ListBucketResult><Contents><Key>dir/x"
	    "</Key><Size>1</Size><ETag>%s</ETag></Contents>"
	    "</ListBucketResult>", etag);
	CHECK_OK(sk__s3_parse_list(page, strlen(page), "dir/", "s3://b/dir/",
	    &e, token, sizeof token, &truncated, &err), &err);
	CHECK_EQ_STR(e.v[0].version, etag);
	sk__entries_free(&e);
	snprintf(page, sizeof page, "<ListBucketResult><Contents><Key>dir/x"
	    "</Key><Size>1</Size><ETag>%se</ETag></Contents>"
	    "</ListBucketResult>", etag);
	msg = CHECK_ERR(sk__s3_parse_list(page, strlen(page), "dir/",
	    "s3://b/dir/", &e, token, sizeof token, &truncated, &err),
	    SK_EFORMAT, &err);
	CHECK_CONTAINS(msg, "ETag");
	CHECK_EQ_INT((int)e.n, 0);
	/* Not XML, or with a DTD: not a listing. */
	msg = CHECK_ERR(sk__s3_parse_list("<a>", 3, "dir/", "s3://b/dir/", &e,
	    token, sizeof token, &truncated, &err), SK_EFORMAT, &err);
	CHECK_CONTAINS(msg, "s3://b/dir/: the listing is not a ListObjectsV2");
	CHECK_ERR(sk__s3_parse_list("<!DOCTYPE x><x/>", 16, "dir/",
	    "s3://b/dir/", &e, token, sizeof token, &truncated, &err),
	    SK_EFORMAT, &err);
	CHECK_EQ_INT((int)e.n, 0);
}

/* ------------------------------------------------------------------------ */
/* whole listings against a server                                          */

/* A route: a request whose request line holds match gets body (the first
 * route that matches; a 404 when none does). */
struct route {
	const char *match;
	const char *body;
};

static struct {
	int fd;
	const struct route *routes;
	int requests;
} srv;

static void
send_all(int fd, const char *p, size_t n)
{
	ssize_t w;

	while (n > 0 && (w = send(fd, p, n, MSG_NOSIGNAL)) > 0) {
		p += w;
		n -= (size_t)w;
	}
}

static void *
serve(void *arg)
{
	const struct route *r;
	char req[8192], head[200];
	const char *body;
	ssize_t got;
	size_t n;
	int c;

	(void)arg;
	while ((c = accept(srv.fd, NULL, NULL)) >= 0) {
		n = 0;
		req[0] = '\0';
		while (strstr(req, "\r\n\r\n") == NULL && n < sizeof req - 1 &&
		    (got = recv(c, req + n, sizeof req - 1 - n, 0)) > 0) {
			n += (size_t)got;
			req[n] = '\0';
		}
		req[strcspn(req, "\r\n")] = '\0';
		/* counted before the answer, which the client may see and
		 * return from before this thread runs again */
		__atomic_add_fetch(&srv.requests, 1, __ATOMIC_SEQ_CST);
		for (r = srv.routes; r->match != NULL &&
		    strstr(req, r->match) == NULL; r++)
			;
		body = r->match != NULL ? r->body : "{}";
		snprintf(head, sizeof head, "HTTP/1.1 %s\r\nContent-Length: "
		    "%zu\r\nConnection: close\r\n\r\n", r->match != NULL ?
		    "200 OK" : "404 Not Found", strlen(body));
		send_all(c, head, strlen(head));
		send_all(c, body, strlen(body));
		close(c);
	}
	return NULL;
}

/* Serve routes on 127.0.0.1 for the rest of the test: the port. */
static int
serve_start(const struct route *routes)
{
	struct sockaddr_in a;
	socklen_t len = sizeof a;
	pthread_t t;

	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK((srv.fd = socket(AF_INET, SOCK_STREAM, 0)) >= 0);
	CHECK(bind(srv.fd, (struct sockaddr *)&a, sizeof a) == 0);
	CHECK(listen(srv.fd, 16) == 0);
	CHECK(getsockname(srv.fd, (struct sockaddr *)&a, &len) == 0);
	srv.routes = routes;
	CHECK(pthread_create(&t, NULL, serve, NULL) == 0);
	pthread_detach(t);
	setenv("no_proxy", "*", 1);
	setenv("NO_PROXY", "*", 1);
	return ntohs(a.sin_port);
}

static int
requests(void)
{
	return __atomic_load_n(&srv.requests, __ATOMIC_SEQ_CST);
}

/* The strings of l joined by spaces. */
static const char *
joined(const struct sk_strlist *l)
{
	static char buf[2000];
	size_t i, n = 0;

	buf[0] = '\0';
	for (i = 0; i < l->n && n < sizeof buf; i++)
		n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s",
		    i ? " " : "", l->v[i]);
	return buf;
}

/*
 * nginx: the entries sorted by name; sk_source_list gives the files'
 * URLs sorted as URLs, as before ("[" escaped is "%5B", before "A").
 */
TEST(listing_http_server)
{
	static const struct route routes[] = {
		{ "GET /d/ ", "[{\"name\":\"Ax.tar\",\"type\":\"file\","
		    "\"size\":1,\"mtime\":\"Thu, 01 Jan 1970 00:00:01 GMT\"},"
		    "{\"name\":\"sub\",\"type\":\"file\",\"size\":3},"
		    "{\"name\":\"[x.tar\",\"type\":\"file\",\"size\":2},"
		    "{\"name\":\"sub\",\"type\":\"directory\"},"
		    "{\"name\":\"notes.txt\",\"type\":\"file\",\"size\":4}]" },
		{ "GET /bad/ ", "[{\"name\":\"a\",\"type\":\"file\"}]" },
		{ NULL, NULL },
	};
	struct sk__entries e = { NULL, 0, 0 };
	struct sk_strlist l = { NULL, 0, 0 };
	struct sk_error err = { 0 };
	char url[200], want[1000];
	const char *msg;
	int port = serve_start(routes);

	snprintf(url, sizeof url, "http://127.0.0.1:%d/d/", port);
	CHECK_OK(sk__source_list_entries(url, &e, &err), &err);
	CHECK_EQ_STR(names(&e), "Ax.tar [x.tar notes.txt sub/ sub");
	CHECK(e.v[0].size == 1 && e.v[0].mtime == 1);
	CHECK(e.v[1].size == 2 && e.v[1].mtime == 0);
	sk__entries_free(&e);

	CHECK_OK(sk_strlist_push(&l, "already-there"), &err);
	CHECK_OK(sk_source_list(url, &l, &err), &err);
	snprintf(want, sizeof want, "already-there %s%%5Bx.tar %sAx.tar "
	    "%snotes.txt %ssub", url, url, url, url);
	CHECK_EQ_STR(joined(&l), want);
	sk_strlist_free(&l);
	CHECK_OK(sk_source_list_shards(url, &l, &err), &err);
	snprintf(want, sizeof want, "%s%%5Bx.tar %sAx.tar", url, url);
	CHECK_EQ_STR(joined(&l), want);
	sk_strlist_free(&l);

	/* A file with no size: left out (a warning counts it), the rest of
	 * the folder listed, here nothing. */
	snprintf(url, sizeof url, "http://127.0.0.1:%d/bad/", port);
	CHECK_OK(sk_source_list(url, &l, &err), &err);
	CHECK_EQ_INT((int)l.n, 0);

	/* A folder ends in '/'; the message keeps the password out. */
	snprintf(url, sizeof url, "http://u:s3cret@127.0.0.1:%d/d", port);
	msg = CHECK_ERR(sk__source_list_entries(url, &e, &err), SK_EINVAL,
	    &err);
	CHECK_CONTAINS(msg, "a folder URL ends in '/'");
	CHECK(strstr(msg, "s3cret") == NULL);
	msg = CHECK_ERR(sk__source_list_entries("file:///tmp/", &e, &err),
	    SK_EUNSUPPORTED, &err);
	CHECK_CONTAINS(msg, "file:///tmp/: file:// folders are not listed");
	CHECK_EQ_INT((int)e.n, 0);
}

/*
 * GCS over two pages (STORAGE_EMULATOR_HOST: plain http, no token): the
 * objects of both, the folder's marker left out, a subfolder listed on
 * both pages once, beside an object of its name; a server that repeats
 * its token or ignores its page size, and a bad size, are refused.
 */
TEST(listing_gcs_server)
{
	static const struct route routes[] = {
		{ "/b/bkt/o?prefix=d%2F&delimiter=%2F&maxResults=1000&pageToken"
		    "=t1 ", "{\"prefixes\": [\"d/m/\", \"d/z/\"], \"items\": ["
		    "{\"name\": \"d/m\", \"size\": \"5\", \"generation\": "
		    "\"18\"}, {\"name\": \"d/a.tar\", \"size\": \"10\", "
		    "\"generation\": \"19\"}]}" },
		{ "/b/bkt/o?prefix=d%2F&delimiter=%2F&maxResults=1000 ",
		    "{\"nextPageToken\": \"t1\", \"prefixes\": [\"d/m/\"], "
		    "\"items\": [{\"name\": \"d/\", \"size\": \"0\", "
		    "\"generation\": \"1\"}, {\"name\": \"d/c.tar\", \"size\":"
		    " \"30\", \"generation\": \"17\", \"updated\": "
		    "\"2026-01-15T10:00:00.000Z\"}]}" },
		{ "/b/loop/o?", "{\"nextPageToken\": \"t1\", \"items\": []}" },
		/* tokens A, B, A, ...: no two in a row alike */
		{ "/b/alt/o?prefix=d%2F&delimiter=%2F&maxResults=1000&pageToken"
		    "=A ", "{\"nextPageToken\": \"B\", \"items\": []}" },
		{ "/b/alt/o?", "{\"nextPageToken\": \"A\", \"items\": []}" },
		{ "/b/big/o?prefix=&delimiter=%2F&maxResults=1 ",
		    "{\"items\": [{\"name\": \"a\", \"size\": \"1\"}], "
		    "\"prefixes\": [\"b/\"]}" },
		{ "/b/bad/o?", "{\"items\": [{\"name\": \"d/a\", \"size\": "
		    "\"1\"}, {\"name\": \"d/b\", \"size\": \"1.0\"}]}" },
		{ NULL, NULL },
	};
	struct sk__entries e = { NULL, 0, 0 };
	struct sk_strlist l = { NULL, 0, 0 };
	struct sk_error err = { 0 };
	const struct sk__entry *x;
	char host[64];
	const char *msg;
	int n;

	snprintf(host, sizeof host, "127.0.0.1:%d", serve_start(routes));
	setenv("STORAGE_EMULATOR_HOST", host, 1);
	unsetenv("SK_LIST_PAGE");
	CHECK_OK(sk__source_list_entries("gs://bkt/d/", &e, &err), &err);
	CHECK_EQ_INT(requests(), 2);
	CHECK_EQ_STR(names(&e), "a.tar c.tar m/ m z/");
	x = find(&e, "c.tar", 0);
	CHECK(x->size == 30 && x->mtime == 1768471200);
	CHECK_EQ_STR(x->version, "17");
	CHECK_EQ_STR(find(&e, "m", 0)->version, "18");
	sk__entries_free(&e);
	CHECK_OK(sk_source_list("gs://bkt/d/", &l, &err), &err);
	CHECK_EQ_STR(joined(&l), "gs://bkt/d/a.tar gs://bkt/d/c.tar "
	    "gs://bkt/d/m");
	sk_strlist_free(&l);

	msg = CHECK_ERR(sk__source_list_entries("gs://loop/d/", &e, &err),
	    SK_EFORMAT, &err);
	CHECK_CONTAINS(msg, "gs://loop/d/: the listing gives a page token it "
	    "gave before");
	n = requests();
	msg = CHECK_ERR(sk__source_list_entries("gs://alt/d/", &e, &err),
	    SK_EFORMAT, &err);
	CHECK_CONTAINS(msg, "gs://alt/d/: the listing gives a page token it "
	    "gave before, after 3 pages");
	CHECK_EQ_INT(requests() - n, 3);
	/* Folders count against the names a page was asked for. */
	setenv("SK_LIST_PAGE", "1", 1);
	msg = CHECK_ERR(sk__source_list_entries("gs://big/", &e, &err),
	    SK_EFORMAT, &err);
	CHECK_CONTAINS(msg, "gs://big/: page 1 of the listing holds 2 names, "
	    "more than the 1 asked for");
	sk__entries_free(&e);
	unsetenv("SK_LIST_PAGE");
	msg = CHECK_ERR(sk__source_list_entries("gs://bad/d/", &e, &err),
	    SK_EFORMAT, &err);
	CHECK_CONTAINS(msg, "gs://bad/d/: the listing gives an object a size");
	/* What was added before the failure stays. */
	CHECK_EQ_STR(names(&e), "a");
	sk__entries_free(&e);
}

/* S3 over two pages (path style at a custom endpoint, signed): as GCS. */
TEST(listing_s3_server)
{
	static const struct route routes[] = {
		{ "GET /bkt/?list-type=2&prefix=d%2F&delimiter=%2F&"
		    "max-keys=1000&continuation-token=c%2F1 ",
		    "<ListBucketResult><IsTruncated>false</IsTruncated>"
		    "<Contents><Key>d/m</Key><Size>5</Size>"
		    "<ETag>&quot;e2&quot;</ETag></Contents>"
		    "<Contents><Key>d/a.tar</Key><Size>10</Size>"
		    "<ETag>&quot;e3&quot;</ETag></Contents>"
		    "<CommonPrefixes><Prefix>d/m/</Prefix></CommonPrefixes>"
		    "<CommonPrefixes><Prefix>d/z/</Prefix></CommonPrefixes>"
		    "</ListBucketResult>" },
		{ "GET /bkt/?list-type=2&prefix=d%2F&delimiter=%2F&"
		    "max-keys=1000 ",
		    "<ListBucketResult><IsTruncated>true</IsTruncated>"
		    "<NextContinuationToken>c/1</NextContinuationToken>"
		    "<Contents><Key>d/</Key><Size>0</Size></Contents>"
		    "<Contents><Key>d/c.tar</Key>"
		    "<LastModified>2009-10-12T17:50:30.000Z</LastModified>"
		    "<ETag>&quot;e1&quot;</ETag><Size>30</Size>"
		    "</Contents><CommonPrefixes><Prefix>d/m/</Prefix>"
		    "</CommonPrefixes></ListBucketResult>" },
		{ "GET /loop/?", "<ListBucketResult><IsTruncated>true"
		    "</IsTruncated><NextContinuationToken>c1"
		    "</NextContinuationToken></ListBucketResult>" },
		/* tokens A, B, A, ...: no two in a row alike */
		{ "&continuation-token=A ", "<ListBucketResult>"
		    "<IsTruncated>true</IsTruncated><NextContinuationToken>B"
		    "</NextContinuationToken></ListBucketResult>" },
		{ "GET /alt/?", "<ListBucketResult><IsTruncated>true"
		    "</IsTruncated><NextContinuationToken>A"
		    "</NextContinuationToken></ListBucketResult>" },
		{ "GET /bad/?", "<ListBucketResult><Contents><Key>d/a</Key>"
		    "<Size>1</Size><ETag>\"a b\"</ETag></Contents>"
		    "</ListBucketResult>" },
		{ NULL, NULL },
	};
	struct sk__entries e = { NULL, 0, 0 };
	struct sk_strlist l = { NULL, 0, 0 };
	struct sk_error err = { 0 };
	const struct sk__entry *x;
	char ep[64];
	const char *msg;
	int n;

	snprintf(ep, sizeof ep, "http://127.0.0.1:%d", serve_start(routes));
	setenv("AWS_ENDPOINT_URL", ep, 1);
	setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/EXAMPLEKEY", 1);
	setenv("AWS_REGION", "us-east-1", 1);
	setenv("AWS_SHARED_CREDENTIALS_FILE", t_path("none"), 1);
	setenv("AWS_CONFIG_FILE", t_path("none"), 1);
	unsetenv("AWS_ENDPOINT_URL_S3");
	unsetenv("SK_S3_ADDRESSING");
	unsetenv("SK_LIST_PAGE");
	CHECK_OK(sk__source_list_entries("s3://bkt/d/", &e, &err), &err);
	CHECK_EQ_INT(requests(), 2);
	CHECK_EQ_STR(names(&e), "a.tar c.tar m/ m z/");
	x = find(&e, "c.tar", 0);
	CHECK(x->size == 30 && x->mtime == 1255369830);
	CHECK_EQ_STR(x->version, "\"e1\"");
	CHECK_EQ_STR(find(&e, "m", 0)->version, "\"e2\"");
	sk__entries_free(&e);
	CHECK_OK(sk_source_list("s3://bkt/d/", &l, &err), &err);
	CHECK_EQ_STR(joined(&l), "s3://bkt/d/a.tar s3://bkt/d/c.tar "
	    "s3://bkt/d/m");
	sk_strlist_free(&l);

	msg = CHECK_ERR(sk__source_list_entries("s3://loop/d/", &e, &err),
	    SK_EFORMAT, &err);
	CHECK_CONTAINS(msg, "s3://loop/d/: the listing gives a page token it "
	    "gave before");
	n = requests();
	msg = CHECK_ERR(sk__source_list_entries("s3://alt/d/", &e, &err),
	    SK_EFORMAT, &err);
	CHECK_CONTAINS(msg, "s3://alt/d/: the listing gives a page token it "
	    "gave before, after 3 pages");
	CHECK_EQ_INT(requests() - n, 3);
	msg = CHECK_ERR(sk__source_list_entries("s3://bad/d/", &e, &err),
	    SK_EFORMAT, &err);
	CHECK_CONTAINS(msg, "s3://bad/d/: the listing gives an object an ETag");
	CHECK(strstr(msg, "EXAMPLEKEY") == NULL);
	CHECK_EQ_INT((int)e.n, 0);
}
