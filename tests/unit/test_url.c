/*
 * test_url.c - shard patterns (brace ranges and lists, "::"), URL parsing
 * and WebDataset's key/extension split.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* ------------------------------------------------------------------------ */
/* brace expansion                                                          */

/* Expand pat and compare with the NULL-terminated list want, in order. */
static void
expect_expand(int line, const char *pat, const char *const *want)
{
	struct sk_strlist l = { 0 };
	struct sk_error err = { 0 };
	size_t i, n = 0;
	int rc;

	while (want[n] != NULL)
		n++;
	if ((rc = sk_url_expand(pat, &l, &err)) != 0)
		t_fail(__FILE__, line, "sk_url_expand(\"%s\") = %d (%s): %s",
		    pat, rc, sk_strerror(rc), err.msg);
	for (i = 0; i < n && i < l.n; i++) {
		if (strcmp(l.v[i], want[i]) != 0)
			t_fail(__FILE__, line, "sk_url_expand(\"%s\")[%zu] = "
			    "\"%s\", want \"%s\"", pat, i, l.v[i], want[i]);
	}
	if (l.n != n)
		t_fail(__FILE__, line, "sk_url_expand(\"%s\") gave %zu names, "
		    "want %zu (first extra or missing: \"%s\")", pat, l.n, n,
		    l.n > n ? l.v[n] : want[l.n]);
	sk_strlist_free(&l);
}

#define EXPECT_EXPAND(pat, ...) \
	expect_expand(__LINE__, (pat), (const char *const[]){ __VA_ARGS__, NULL })

TEST(expand_plain)
{
	EXPECT_EXPAND("shard.tar", "shard.tar");
	EXPECT_EXPAND("/data/x/shard-000000.tar", "/data/x/shard-000000.tar");
}

TEST(expand_range_imagenet_val)
{
	struct sk_strlist l = { 0 };
	struct sk_error err = { 0 };
	char want[64];
	size_t i;

	CHECK_OK(sk_url_expand("val-{000000..000146}.tar", &l, &err), &err);
	CHECK_EQ_INT(l.n, 147);
	for (i = 0; i < l.n; i++) {
		snprintf(want, sizeof want, "val-%06zu.tar", i);
		CHECK_EQ_STR(l.v[i], want);
	}
	sk_strlist_free(&l);
}

TEST(expand_range_widths)
{
	/* Unpadded bounds give unpadded numbers. */
	EXPECT_EXPAND("s{8..11}", "s8", "s9", "s10", "s11");
	/* The width is that of the wider bound. */
	EXPECT_EXPAND("s{08..10}", "s08", "s09", "s10");
	EXPECT_EXPAND("s{0..0}", "s0");
	EXPECT_EXPAND("{-1..1}", "-1", "0", "1");
}

TEST(expand_range_descending)
{
	/* Like bash: a descending range counts down. */
	EXPECT_EXPAND("x{3..1}.tar", "x3.tar", "x2.tar", "x1.tar");
	EXPECT_EXPAND("x{10..08}", "x10", "x09", "x08");
}

TEST(expand_list)
{
	EXPECT_EXPAND("{a,b}", "a", "b");
	EXPECT_EXPAND("pre-{train,val}.tar", "pre-train.tar", "pre-val.tar");
	EXPECT_EXPAND("{a,,b}x", "ax", "x", "bx");
}

TEST(expand_nested)
{
	EXPECT_EXPAND("{a,{b,c}}x", "ax", "bx", "cx");
	EXPECT_EXPAND("{a,b{1..2}}", "a", "b1", "b2");
}

TEST(expand_cartesian_order)
{
	/* bash: the leftmost brace varies slowest. */
	EXPECT_EXPAND("{a,b}{1,2}", "a1", "a2", "b1", "b2");
	EXPECT_EXPAND("d{0..1}/s{0..2}.tar", "d0/s0.tar", "d0/s1.tar",
	    "d0/s2.tar", "d1/s0.tar", "d1/s1.tar", "d1/s2.tar");
	EXPECT_EXPAND("{x,y}-{1..2}-{p,q}", "x-1-p", "x-1-q", "x-2-p",
	    "x-2-q", "y-1-p", "y-1-q", "y-2-p", "y-2-q");
}

TEST(expand_double_colon)
{
	EXPECT_EXPAND("a{1,2}::b", "a1", "a2", "b");
	EXPECT_EXPAND("/d/s-{0..1}.tar::gs://bkt/t-{00..01}.tar",
	    "/d/s-0.tar", "/d/s-1.tar", "gs://bkt/t-00.tar", "gs://bkt/t-01.tar");
	/* A URL's own "://" is not a separator. */
	EXPECT_EXPAND("http://h:8080/s-{0..1}.tar", "http://h:8080/s-0.tar",
	    "http://h:8080/s-1.tar");
}

TEST(expand_appends)
{
	struct sk_strlist l = { 0 };
	struct sk_error err = { 0 };

	CHECK_OK(sk_strlist_push(&l, "first"), &err);
	CHECK_OK(sk_url_expand("{a,b}", &l, &err), &err);
	CHECK_EQ_INT(l.n, 3);
	CHECK_EQ_STR(l.v[0], "first");
	CHECK_EQ_STR(l.v[1], "a");
	CHECK_EQ_STR(l.v[2], "b");
	sk_strlist_free(&l);
}

static void
expect_bad(int line, const char *pat, int code)
{
	struct sk_strlist l = { 0 };
	struct sk_error err = { 0 };
	int rc;

	rc = sk_url_expand(pat, &l, &err);
	if (rc >= 0 || (code != 0 && rc != code))
		t_fail(__FILE__, line, "sk_url_expand(\"%s\") = %d (%s), want "
		    "%s", pat, rc, sk_strerror(rc),
		    code != 0 ? sk_strerror(code) : "an error");
	if (err.code != rc || err.msg[0] == '\0')
		t_fail(__FILE__, line, "sk_url_expand(\"%s\") failed with "
		    "err.code %d and message \"%s\"", pat, err.code, err.msg);
	sk_strlist_free(&l);
	/* err may be NULL. */
	rc = sk_url_expand(pat, &l, NULL);
	if (rc >= 0)
		t_fail(__FILE__, line, "sk_url_expand(\"%s\", NULL err) = %d",
		    pat, rc);
	sk_strlist_free(&l);
}

TEST(expand_malformed)
{
	expect_bad(__LINE__, "s-{1..", SK_EINVAL);
	expect_bad(__LINE__, "s-{a,b", SK_EINVAL);
	expect_bad(__LINE__, "}", SK_EINVAL);
	expect_bad(__LINE__, "a}b{c,d}", SK_EINVAL);
	expect_bad(__LINE__, "{a,{b,c}", SK_EINVAL);
	expect_bad(__LINE__, "s{1..x}", SK_EINVAL);
	expect_bad(__LINE__, "", SK_EINVAL);
}

TEST(expand_too_big)
{
	struct sk_error err = { 0 };
	struct sk_strlist l = { 0 };
	char pat[64];
	const char *msg;

	/* One past the limit, checked before anything is generated. */
	snprintf(pat, sizeof pat, "s{0..%d}", SK_EXPAND_MAX);
	msg = CHECK_ERR(sk_url_expand(pat, &l, &err), SK_ETOOBIG, &err);
	t_diag("message: %s", msg);
	sk_strlist_free(&l);
	expect_bad(__LINE__, "s{0..99999999999}", SK_ETOOBIG);
	/* Exactly the limit is fine in principle; a smaller one must be. */
	CHECK_OK(sk_url_expand("s{0..99999}", &l, &err), &err);
	CHECK_EQ_INT(l.n, 100000);
	CHECK_EQ_STR(l.v[99999], "s99999");
	sk_strlist_free(&l);
}

/* ------------------------------------------------------------------------ */
/* URLs                                                                     */

static void
expect_url(int line, const char *text, enum sk_scheme scheme,
    const char *host, int port, const char *path)
{
	struct sk_url u;
	struct sk_error err = { 0 };
	int rc;

	if ((rc = sk_url_parse(text, &u, &err)) != 0)
		t_fail(__FILE__, line, "sk_url_parse(\"%s\") = %d: %s", text,
		    rc, err.msg);
	if (u.scheme != scheme)
		t_fail(__FILE__, line, "%s: scheme %s, want %s", text,
		    sk_scheme_name(u.scheme), sk_scheme_name(scheme));
	if ((host == NULL) != (u.host == NULL) ||
	    (host != NULL && strcmp(host, u.host) != 0))
		t_fail(__FILE__, line, "%s: host \"%s\", want \"%s\"", text,
		    u.host ? u.host : "(null)", host ? host : "(null)");
	if (host != NULL && u.port != port)
		t_fail(__FILE__, line, "%s: port %d, want %d", text, u.port,
		    port);
	if (u.path == NULL || strcmp(u.path, path) != 0)
		t_fail(__FILE__, line, "%s: path \"%s\", want \"%s\"", text,
		    u.path ? u.path : "(null)", path);
	sk_url_free(&u);
}

TEST(url_parse_file)
{
	expect_url(__LINE__, "/data/s-000.tar", SK_SCHEME_FILE, NULL, 0,
	    "/data/s-000.tar");
	expect_url(__LINE__, "rel/s.tar", SK_SCHEME_FILE, NULL, 0,
	    "rel/s.tar");
	expect_url(__LINE__, "file:///abs/dir/s.tar", SK_SCHEME_FILE, NULL, 0,
	    "/abs/dir/s.tar");
}

TEST(url_parse_http)
{
	expect_url(__LINE__, "http://h:8080/p?q", SK_SCHEME_HTTP, "h", 8080,
	    "/p?q");
	expect_url(__LINE__, "http://example.org/a/b.tar", SK_SCHEME_HTTP,
	    "example.org", 80, "/a/b.tar");
	expect_url(__LINE__, "https://h/p", SK_SCHEME_HTTPS, "h", 443, "/p");
	expect_url(__LINE__, "https://h:8443/x/y.tar", SK_SCHEME_HTTPS, "h",
	    8443, "/x/y.tar");
}

TEST(url_parse_buckets)
{
	expect_url(__LINE__, "gs://bucket/a/b", SK_SCHEME_GS, "bucket", 0,
	    "a/b");
	expect_url(__LINE__, "s3://b/k", SK_SCHEME_S3, "b", 0, "k");
	expect_url(__LINE__, "gs://bucket/train/s-000001.tar", SK_SCHEME_GS,
	    "bucket", 0, "train/s-000001.tar");
}

TEST(url_parse_bad)
{
	static const char *bad[] = {
		"gs://", "s3://", "http://", "https://", "ftp://x",
		"http://h:99999/p", "http://h:port/p", "",
		/* A bucket becomes a host name: nothing that moves the
		 * request (and its signature) to another host. */
		"s3://evil.example#/x.tar", "s3://evil.example?/x.tar",
		"gs://user@evil.example/x", "s3://evil.example:443/x",
		"gs://b%2Fc/x", "s3://b c/x"
	};
	struct sk_url u;
	struct sk_error err;
	size_t i;
	int rc;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		memset(&err, 0, sizeof err);
		rc = sk_url_parse(bad[i], &u, &err);
		if (rc >= 0)
			t_fail(__FILE__, __LINE__, "sk_url_parse(\"%s\") "
			    "accepted it", bad[i]);
		if (err.msg[0] == '\0')
			t_fail(__FILE__, __LINE__, "sk_url_parse(\"%s\") "
			    "failed without a message", bad[i]);
		t_diag("%s: %s", bad[i], err.msg);
	}
	/* An unknown scheme is "not handled", not a malformed URL. */
	CHECK_ERR(sk_url_parse("ftp://x/y", &u, &err), SK_EUNSUPPORTED, &err);
	CHECK_ERR(sk_url_parse("gs://", &u, &err), SK_EINVAL, &err);
}

TEST(scheme_names)
{
	CHECK_EQ_STR(sk_scheme_name(SK_SCHEME_FILE), "file");
	CHECK_EQ_STR(sk_scheme_name(SK_SCHEME_HTTP), "http");
	CHECK_EQ_STR(sk_scheme_name(SK_SCHEME_HTTPS), "https");
	CHECK_EQ_STR(sk_scheme_name(SK_SCHEME_GS), "gs");
	CHECK_EQ_STR(sk_scheme_name(SK_SCHEME_S3), "s3");
}

/* ------------------------------------------------------------------------ */
/* WebDataset keys                                                          */

static void
expect_key(int line, const char *name, const char *key, const char *ext)
{
	const char *e = NULL;
	size_t n;

	n = sk_key_split(name, &e);
	if (n != strlen(key) || strncmp(name, key, n) != 0)
		t_fail(__FILE__, line, "sk_key_split(\"%s\"): key \"%.*s\", "
		    "want \"%s\"", name, (int)n, name, key);
	if (e == NULL || strcmp(e, ext) != 0)
		t_fail(__FILE__, line, "sk_key_split(\"%s\"): ext \"%s\", "
		    "want \"%s\"", name, e ? e : "(null)", ext);
	/* ext points into name. */
	if (e < name || e > name + strlen(name))
		t_fail(__FILE__, line, "sk_key_split(\"%s\"): ext does not "
		    "point into name", name);
}

TEST(key_split)
{
	expect_key(__LINE__, "a/b/c.d.e", "a/b/c", "d.e");
	expect_key(__LINE__, "x.jpg", "x", "jpg");
	expect_key(__LINE__, "noext", "noext", "");
	expect_key(__LINE__, "dir.v1/f.png", "dir.v1/f", "png");
	expect_key(__LINE__, "n01440764/ILSVRC2012_val_00000293.JPEG",
	    "n01440764/ILSVRC2012_val_00000293", "JPEG");
	expect_key(__LINE__, "a.b/c", "a.b/c", "");
	expect_key(__LINE__, "k.cls", "k", "cls");
}

/* ------------------------------------------------------------------------ */
/* what messages may show of a URL                                          */

static void
expect_redact(int line, const char *url, const char *want)
{
	char *got = sk_url_redact(url);

	if (got == NULL)
		t_fail(__FILE__, line, "sk_url_redact(\"%s\") = NULL", url);
	if (strcmp(got, want) != 0)
		t_fail(__FILE__, line, "sk_url_redact(\"%s\") = \"%s\", want "
		    "\"%s\"", url, got, want);
	free(got);
}

/* Text from outside as a terminal may show it (sk_escape), and every
 * message libshardkit keeps (sk_error_set). */
TEST(escape_text)
{
	const char *s = "a\nb\rc\x1b]0;t\x07" "d\x7f\\e\xff\xc2\x9b\xe2\x80"
	    "\xae" "caf\xc3\xa9";
	struct sk_error err = { 0 };
	char buf[200], again[200];

	CHECK(sk_escape(buf, sizeof buf, s, strlen(s), 0) == 0);
	CHECK_EQ_STR(buf, "a\\nb\\rc\\x1b]0;t\\x07d\\x7f\\e\\xff\\u009b"
	    "\\u202ecaf\xc3\xa9");
	/* escaping twice changes nothing more */
	CHECK(sk_escape(again, sizeof again, buf, strlen(buf), 0) == 1);
	CHECK_EQ_STR(again, buf);
	/* with SK_ESCAPE_BACKSLASH a backslash is \\ */
	sk_escape(buf, sizeof buf, "a\\b\x1b", 4, SK_ESCAPE_BACKSLASH);
	CHECK_EQ_STR(buf, "a\\\\b\\x1b");
	/* overlong forms and surrogates are no UTF-8 */
	sk_escape(buf, sizeof buf, "\xc0\xaf\xed\xa0\x80", 5, 0);
	CHECK_EQ_STR(buf, "\\xc0\\xaf\\xed\\xa0\\x80");
	/* cut at a character, with "..." */
	sk_escape(buf, 12, "abcdef\x1b\x1b\x1b", 9, 0);
	CHECK_EQ_STR(buf, "abcdef...");
	sk_escape(buf, 9, "abcdefgh", 8, 0);
	CHECK_EQ_STR(buf, "abcdefgh");
	/* n 0 writes nothing and says whether s is plain */
	CHECK(sk_escape(NULL, 0, "plain \xc3\xa9", 8, 0) == 1);
	CHECK(sk_escape(NULL, 0, "x\x1by", 3, 0) == 0);
	/* a message never holds a raw control byte */
	sk_error_set(&err, SK_EFORMAT, "%s: bad", "gs://b/e\x1b[2Jx.tar");
	CHECK_EQ_STR(err.msg, "gs://b/e\\x1b[2Jx.tar: bad");
}

TEST(url_redact)
{
	expect_redact(__LINE__, "/data/in-000000.tar", "/data/in-000000.tar");
	expect_redact(__LINE__, "http://h:8080/s/in.json",
	    "http://h:8080/s/in.json");
	expect_redact(__LINE__, "https://user:secret@h/x.tar",
	    "https://user:***@h/x.tar");
	/* an '@' in the path is not userinfo */
	expect_redact(__LINE__, "http://h/a:b@c.tar", "http://h/a:b@c.tar");
	/* '@' in the password: the host is after the last one before the
	 * path, as sk_url_parse and libcurl split it */
	expect_redact(__LINE__, "http://alice:p@ssSECRET@127.0.0.1:1/x.tar",
	    "http://alice:***@127.0.0.1:1/x.tar");
	expect_redact(__LINE__, "https://a:@@b@@h/x?y@z",
	    "https://a:***@h/x?y@z");
	expect_redact(__LINE__, "http://a@b:c@h/", "http://a@b:***@h/");
	expect_redact(__LINE__, "https://b.s3.amazonaws.com/x.tar?"
	    "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F&"
	    "X-Amz-Signature=deadbeef&x-id=GetObject",
	    "https://b.s3.amazonaws.com/x.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256"
	    "&X-Amz-Credential=***&X-Amz-Signature=***&x-id=GetObject");
	expect_redact(__LINE__, "https://h/x.tar?sig=abc&se=2026#frag",
	    "https://h/x.tar?sig=***&se=2026#frag");
	expect_redact(__LINE__, "https://h/x.tar?token=", "https://h/x.tar?"
	    "token=***");
	expect_redact(__LINE__, "https://u:p@h/x?key=1&key=2&a",
	    "https://u:***@h/x?key=***&key=***&a");
	expect_redact(__LINE__, "", "");
}

/* RFC 3986 5.2 for a manifest fetched over http(s); paths for files. */
static void
expect_resolve(int line, const char *manifest, const char *url,
    const char *want)
{
	char *got = sk_manifest_resolve(manifest, url);

	if (got == NULL || strcmp(got, want) != 0)
		t_fail(__FILE__, line, "sk_manifest_resolve(\"%s\", \"%s\") = "
		    "\"%s\", want \"%s\"", manifest, url, got ? got : "NULL",
		    want);
	free(got);
}

/* A manifest from the network names only shards on its own origin. */
TEST(manifest_origin)
{
	static const struct {
		const char *manifest, *shard;
		int ok;
	} cases[] = {
		{ "/data/a.json", "s3://b/x.tar", 1 },
		{ "a.json", "http://h/x.tar", 1 },
		{ "http://h:8080/s/a.json", "http://h:8080/t/x.tar", 1 },
		{ "http://H:8080/s/a.json", "http://h:8080/x.tar", 1 },
		{ "http://h/a.json", "http://h:80/x.tar", 1 },
		{ "https://h/a.json?sig=1", "https://h/x.tar", 1 },
		{ "http://h:8080/a.json", "http://h:8081/x.tar", 0 },
		{ "http://h:8080/a.json", "https://h:8080/x.tar", 0 },
		{ "http://h/a.json", "http://other/x.tar", 0 },
		{ "http://h/a.json", "http://h.evil/x.tar", 0 },
		{ "http://h/a.json", "s3://b/x.tar", 0 },
		{ "http://h/a.json", "gs://h/x.tar", 0 },
		{ "s3://b/m/a.json", "s3://b/other/x.tar", 1 },
		{ "s3://b/a.json", "s3://c/x.tar", 0 },
		{ "s3://b/a.json", "gs://b/x.tar", 0 },
		{ "gs://b/a.json", "gs://b/x.tar", 1 },
		{ "gs://b/a.json", "http://b/x.tar", 0 },
		{ "http://h/a.json", "not a url", 0 },
	};
	struct sk_fetch_config c, saved;
	struct sk_error err = { 0 };
	const char *m;
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int rc = sk_manifest_check_origin(cases[i].manifest,
		    cases[i].shard, &err);

		if (cases[i].ok ? rc != 0 : rc != SK_EACCES)
			t_fail(__FILE__, __LINE__, "%s naming %s: %d, want %s",
			    cases[i].manifest, cases[i].shard, rc,
			    cases[i].ok ? "0" : "SK_EACCES");
	}
	m = CHECK_ERR(sk_manifest_check_origin("http://u:pw@h/a.json",
	    "http://x:pw2@h2/x.tar", &err), SK_EACCES, &err);
	CHECK_CONTAINS(m, "http://u:***@h/a.json: the manifest names "
	    "http://x:***@h2/x.tar, which is not on its own origin");
	CHECK_CONTAINS(m, "--allow-cross-origin");
	/* the user's explicit leave */
	sk_fetch_get_config(&saved);
	c = saved;
	c.allow_cross_origin = 1;
	CHECK_OK(sk_fetch_configure(&c, &err), &err);
	CHECK_OK(sk_manifest_check_origin("http://h/a.json", "s3://b/x.tar",
	    &err), &err);
	CHECK_OK(sk_fetch_configure(&saved, &err), &err);
}

TEST(manifest_resolve_urls)
{
	expect_resolve(__LINE__, "/d/in.json", "in-0.tar", "/d/in-0.tar");
	expect_resolve(__LINE__, "/d/in.json", "/e/in-0.tar", "/e/in-0.tar");
	expect_resolve(__LINE__, "in.json", "in-0.tar", "in-0.tar");
	expect_resolve(__LINE__, "http://h:81/a/b/in.json", "in-0.tar",
	    "http://h:81/a/b/in-0.tar");
	expect_resolve(__LINE__, "http://h:81/a/b/in.json", "/x/in-0.tar",
	    "http://h:81/x/in-0.tar");
	expect_resolve(__LINE__, "https://h/a/in.json?sig=1", "s/in-0.tar",
	    "https://h/a/s/in-0.tar");
	expect_resolve(__LINE__, "https://h/a/in.json?p=/x/y", "in-0.tar",
	    "https://h/a/in-0.tar");
	expect_resolve(__LINE__, "https://h", "in-0.tar", "https://h/in-0.tar");
	expect_resolve(__LINE__, "https://h/in.json", "gs://b/in-0.tar",
	    "gs://b/in-0.tar");
}

/* userinfo is not the host and never reaches a message */
TEST(url_parse_userinfo)
{
	struct sk_error err = { 0 };
	struct sk_url u;
	int rc;

	rc = sk_url_parse("https://user:secret@h.example:8443/a/b.tar", &u,
	    &err);
	if (rc != 0)
		t_fail(__FILE__, __LINE__, "rc %d: %s", rc, err.msg);
	if (strcmp(u.host, "h.example") != 0 || u.port != 8443 ||
	    strcmp(u.path, "/a/b.tar") != 0)
		t_fail(__FILE__, __LINE__, "host %s port %d path %s", u.host,
		    u.port, u.path);
	sk_url_free(&u);
	rc = sk_url_parse("https://user:secret@h:99999/x", &u, &err);
	if (rc != SK_EINVAL || strstr(err.msg, "secret") != NULL ||
	    strstr(err.msg, "bad port") == NULL)
		t_fail(__FILE__, __LINE__, "rc %d: %s", rc, err.msg);
}
