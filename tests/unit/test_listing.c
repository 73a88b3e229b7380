/*
 * test_listing.c - folder listings with metadata: which names a folder
 * may hold, the order and uniqueness of its entries, and the times the
 * servers write.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		msg = CHECK_ERR(sk__http_listing(bad[i], strlen(bad[i]),
		    "http://h/d/", &e, &err), SK_EFORMAT, &err);
		CHECK_CONTAINS(msg, "http://h/d/: the listing gives a file no "
		    "size");
		CHECK_EQ_INT((int)e.n, 0);
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
