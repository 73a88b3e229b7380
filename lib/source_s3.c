/*
 * source_s3.c - s3:// sources: S3 and the stores that speak its API (MinIO,
 * Ceph, R2, GCS's XML endpoint) over the fetch engine, every request signed
 * with SigV4. A shard is a stream of ranged GETs (If-Match on its ETag once
 * the first response gave it); a folder is a ListObjectsV2 listing; pack
 * uploads with PutObject, or a multipart upload whose parts are retried
 * alone and which is aborted when it fails.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <expat.h>
#include <openssl/evp.h>

#include "internal.h"
#include "cloud.h"
#include "fetch.h"

#define LIST_PAGE_MAX	((size_t)16 << 20)	/* one ListObjectsV2 page */
#define LIST_PAGES_MAX	100000			/* 100M keys */
#define XML_TEXT_MAX	4096			/* a key is 1024 bytes */
#define SMALL_MAX	((size_t)1 << 20)	/* other responses */
#define MPU_PARTS_MAX	10000			/* S3's limit */
#define MPU_INFLIGHT	8

/* ------------------------------------------------------------------------ */
/* credentials, once per process                                            */

static struct {
	pthread_mutex_t mu;
	int loaded, rc, no_sign;
	char err[SK_ERRMSG_MAX];
	struct sk__aws_creds c;
} s3 = { PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, "", { 0 } };

static struct sk__auth s3_auth;

/* The keys are read at the first s3:// request; an error is kept and
 * given to every later one. */
static int
s3_creds(struct sk_error *err)
{
	struct sk_fetch_config cfg;
	struct sk_error e;
	int rc;

	pthread_mutex_lock(&s3.mu);
	if (!s3.loaded) {
		sk_fetch_get_config(&cfg);
		s3.no_sign = cfg.no_sign;
		s3.rc = sk__aws_creds_load(&s3.c, s3.no_sign, &e);
		if (s3.rc != 0)
			snprintf(s3.err, sizeof s3.err, "%s", e.msg);
		else
			s3_auth.ca_file = s3.c.ca_bundle;
		s3.loaded = 1;
	}
	rc = s3.rc;
	pthread_mutex_unlock(&s3.mu);
	if (rc != 0)
		return sk_error_set(err, rc, "%s", s3.err);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* URLs and signatures                                                      */

/*
 * The request URL of bucket/key (query without '?', or NULL). Path style
 * puts the bucket in the path (every compatible store takes it);
 * virtual-hosted style in the host name, as AWS prefers.
 */
static char *
s3_url(const char *bucket, const char *key, const char *query)
{
	const char *ep = s3.c.endpoint, *host;
	char *k, *out;

	if ((k = sk__uri_escape(key, 1)) == NULL)
		return NULL;
	host = strstr(ep, "://") + 3;
	/* "my.data" under *.s3.amazonaws.com fails TLS: path style, as the
	 * AWS SDKs do for such names. */
	if (s3.c.path_style || strchr(bucket, '.') != NULL)
		out = sk__asprintf("%s/%s/%s%s%s", ep, bucket, k,
		    query ? "?" : "", query ? query : "");
	else
		out = sk__asprintf("%.*s%s.%s/%s%s%s", (int)(host - ep), ep,
		    bucket, host, k, query ? "?" : "", query ? query : "");
	free(k);
	return out;
}

/* SigV4 headers for one attempt: the engine calls this each time, so a
 * retry an hour later carries a fresh date. */
static int
s3_headers(void *ctx, const char *method, const char *url,
    const char *payload, struct curl_slist **h, char *msg, size_t n)
{
	struct sk__hdr hd[4];
	char host[512], path[4096], amzdate[17], line[4200], auth[1024];
	const char *a, *p, *q;
	struct curl_slist *nl;
	size_t nh = 0, hl;
	struct tm tm;
	time_t now;
	int i;

	(void)ctx;
	if (s3.c.access_key == NULL)
		return 0;	/* unsigned: a public bucket */
	a = strstr(url, "://");
	a = a != NULL ? a + 3 : url;
	p = a + strcspn(a, "/?");
	q = strchr(p, '?');
	hl = (size_t)(p - a);
	/* curl leaves a default port out of Host: so does the signature. */
	if (hl > 3 && strncmp(url, "http:", 5) == 0 &&
	    strncmp(p - 3, ":80", 3) == 0)
		hl -= 3;
	else if (hl > 4 && strncmp(url, "https:", 6) == 0 &&
	    strncmp(p - 4, ":443", 4) == 0)
		hl -= 4;
	if (hl >= sizeof host || (size_t)((q ? q : p + strlen(p)) - p) + 2 >
	    sizeof path) {
		snprintf(msg, n, "URL too long to sign");
		return SK_EINVAL;
	}
	memcpy(host, a, hl);
	host[hl] = '\0';
	if (*p == '/')
		snprintf(path, sizeof path, "%.*s", (int)((q ? q : p +
		    strlen(p)) - p), p);
	else
		strcpy(path, "/");
	now = time(NULL);
	gmtime_r(&now, &tm);
	strftime(amzdate, sizeof amzdate, "%Y%m%dT%H%M%SZ", &tm);
	hd[nh++] = (struct sk__hdr){ "host", host };
	hd[nh++] = (struct sk__hdr){ "x-amz-content-sha256", payload };
	hd[nh++] = (struct sk__hdr){ "x-amz-date", amzdate };
	if (s3.c.session_token != NULL)
		hd[nh++] = (struct sk__hdr){ "x-amz-security-token",
		    s3.c.session_token };
	if (sk__sigv4(s3.c.access_key, s3.c.secret_key, s3.c.region, "s3",
	    method, path, q ? q + 1 : "", hd, nh, payload, amzdate, auth,
	    sizeof auth) != 0) {
		snprintf(msg, n, "cannot sign the request (SigV4)");
		return SK_EINVAL;
	}
	for (i = 1; i < (int)nh + 1; i++) {
		if (i == (int)nh)
			snprintf(line, sizeof line, "Authorization: %s", auth);
		else
			snprintf(line, sizeof line, "%s: %s", hd[i].name,
			    hd[i].value);
		if ((nl = curl_slist_append(*h, line)) == NULL) {
			snprintf(msg, n, "out of memory");
			return SK_ENOMEM;
		}
		*h = nl;
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* XML: error bodies, listings, upload ids                                  */

/*
 * A small expat reader: on_text gets each element's path from the root
 * ("/ListBucketResult/Contents/Key") and its text. No DTD: a document
 * that declares one is refused, so no entity is ever expanded.
 */
struct xml {
	XML_Parser p;
	char path[256];
	size_t plen;
	char text[XML_TEXT_MAX];
	size_t tlen;
	int bad;		/* too deep, too long, a DTD */
	int (*on_text)(struct xml *x, const char *path, const char *text);
	void *arg;
};

static void
xml_start(void *arg, const XML_Char *name, const XML_Char **attrs)
{
	struct xml *x = arg;
	size_t n = strlen(name);

	(void)attrs;
	if (x->plen + n + 2 > sizeof x->path) {
		x->bad = 1;
		XML_StopParser(x->p, XML_FALSE);
		return;
	}
	x->path[x->plen++] = '/';
	memcpy(x->path + x->plen, name, n + 1);
	x->plen += n;
	x->tlen = 0;
	x->text[0] = '\0';
}

static void
xml_end(void *arg, const XML_Char *name)
{
	struct xml *x = arg;

	(void)name;
	if (x->on_text(x, x->path, x->text) != 0) {
		XML_StopParser(x->p, XML_FALSE);
		return;
	}
	while (x->plen > 0 && x->path[x->plen - 1] != '/')
		x->plen--;
	if (x->plen > 0)
		x->plen--;
	x->path[x->plen] = '\0';
	x->tlen = 0;
	x->text[0] = '\0';
}

static void
xml_chars(void *arg, const XML_Char *s, int len)
{
	struct xml *x = arg;

	if (x->tlen + (size_t)len >= sizeof x->text) {
		x->bad = 1;
		XML_StopParser(x->p, XML_FALSE);
		return;
	}
	memcpy(x->text + x->tlen, s, (size_t)len);
	x->tlen += (size_t)len;
	x->text[x->tlen] = '\0';
}

static void
xml_doctype(void *arg, const XML_Char *name, const XML_Char *sysid,
    const XML_Char *pubid, int internal)
{
	struct xml *x = arg;

	(void)name, (void)sysid, (void)pubid, (void)internal;
	x->bad = 1;
	XML_StopParser(x->p, XML_FALSE);
}

/* 0 when the whole body parsed, -1 otherwise (on_text's own stop too). */
static int
xml_parse(const char *body, size_t len,
    int (*on_text)(struct xml *, const char *, const char *), void *arg)
{
	struct xml *x;
	int rc;

	if ((x = calloc(1, sizeof *x)) == NULL)
		return -1;
	if ((x->p = XML_ParserCreate("UTF-8")) == NULL) {
		free(x);
		return -1;
	}
	x->on_text = on_text;
	x->arg = arg;
	XML_SetUserData(x->p, x);
	XML_SetElementHandler(x->p, xml_start, xml_end);
	XML_SetCharacterDataHandler(x->p, xml_chars);
	XML_SetStartDoctypeDeclHandler(x->p, xml_doctype);
	rc = len > INT32_MAX || XML_Parse(x->p, body, (int)len, XML_TRUE) !=
	    XML_STATUS_OK || x->bad ? -1 : 0;
	XML_ParserFree(x->p);
	free(x);
	return rc;
}

/* Printable ASCII only: a server's words reach a terminal. */
static void
copy_clean(char *dst, size_t n, const char *src)
{
	size_t i;

	for (i = 0; i + 1 < n && src[i] != '\0'; i++)
		dst[i] = (unsigned char)src[i] < 0x20 || src[i] == 0x7f ||
		    (unsigned char)src[i] >= 0x80 ? '?' : src[i];
	dst[i] = '\0';
}

static int
err_text(struct xml *x, const char *path, const char *text)
{
	struct sk__s3_error *e = x->arg;

	if (strcmp(path, "/Error/Code") == 0)
		copy_clean(e->code, sizeof e->code, text);
	else if (strcmp(path, "/Error/Message") == 0)
		copy_clean(e->message, sizeof e->message, text);
	else if (strcmp(path, "/Error/Region") == 0)
		copy_clean(e->region, sizeof e->region, text);
	return 0;
}

int
sk__s3_parse_error(const char *xml, size_t n, struct sk__s3_error *e)
{
	memset(e, 0, sizeof *e);
	return xml_parse(xml, n, err_text, e) == 0 ? 0 : SK_EFORMAT;
}

/*
 * A message a user can act on, from an S3 error response: what failed,
 * which credentials were used (never the secret) and what to check.
 */
static int
s3_explain(void *ctx, long status, const char *body, size_t len,
    const char *display, const char *version, char *msg, size_t n)
{
	struct sk__s3_error e;
	const char *src = s3.c.source;

	(void)ctx, (void)version;
	memset(&e, 0, sizeof e);
	if (len > 0)
		sk__s3_parse_error(body, len, &e);
	if (strcmp(e.code, "RequestTimeTooSkewed") == 0) {
		snprintf(msg, n, "%s: HTTP %ld RequestTimeTooSkewed: this "
		    "machine's clock differs from the server's by more than 15 "
		    "minutes; set the clock (NTP) and retry", display, status);
		return SK_EACCES;
	}
	if (strcmp(e.code, "SignatureDoesNotMatch") == 0) {
		snprintf(msg, n, "%s: HTTP %ld SignatureDoesNotMatch: the "
		    "server refused the signature made with the keys from %s: "
		    "check AWS_SECRET_ACCESS_KEY (or the profile's "
		    "aws_secret_access_key) and the endpoint %s", display,
		    status, src, s3.c.endpoint);
		return SK_EACCES;
	}
	if (strcmp(e.code, "InvalidAccessKeyId") == 0) {
		snprintf(msg, n, "%s: HTTP %ld InvalidAccessKeyId: the access "
		    "key from %s is unknown at %s: check the key and "
		    "AWS_ENDPOINT_URL_S3", display, status, src,
		    s3.c.endpoint);
		return SK_EACCES;
	}
	if (strcmp(e.code, "ExpiredToken") == 0 ||
	    strcmp(e.code, "TokenRefreshRequired") == 0) {
		snprintf(msg, n, "%s: HTTP %ld %s: the session token that "
		    "came with the keys from %s has expired: get new "
		    "credentials", display, status, e.code, src);
		return SK_EACCES;
	}
	if (strcmp(e.code, "NoSuchBucket") == 0) {
		snprintf(msg, n, "%s: HTTP %ld NoSuchBucket: no such bucket at "
		    "%s", display, status, s3.c.endpoint);
		return SK_ENOENT;
	}
	if (strcmp(e.code, "AuthorizationHeaderMalformed") == 0 ||
	    strcmp(e.code, "PermanentRedirect") == 0 || status == 301) {
		if (e.region[0] != '\0') {
			snprintf(msg, n, "%s: HTTP %ld %s: the bucket is in "
			    "region %s, not %s: set AWS_REGION=%s", display,
			    status, e.code[0] ? e.code : "redirect", e.region,
			    s3.c.region, e.region);
			return SK_EACCES;
		}
		snprintf(msg, n, "%s: HTTP %ld %s: the bucket is not in region "
		    "%s or not at %s: set AWS_REGION (%s)", display, status,
		    e.code[0] ? e.code : "redirect", s3.c.region,
		    s3.c.endpoint, e.message[0] ? e.message : "no message");
		return SK_EACCES;
	}
	if (status == 404 && e.code[0] == '\0' && len > 0) {
		/* S3 answers a missing key with <Error><Code>NoSuchKey; an
		 * HTML page or plain text is another kind of server. */
		snprintf(msg, n, "%s: HTTP 404, and the answer is not an S3 "
		    "error: is %s an S3 endpoint? (AWS_ENDPOINT_URL_S3, "
		    "AWS_ENDPOINT_URL)", display, s3.c.endpoint);
		return SK_ENOENT;
	}
	if (status == 404) {
		snprintf(msg, n, "%s: HTTP 404%s%s: no such object", display,
		    e.code[0] ? " " : "", e.code);
		return SK_ENOENT;
	}
	if (status == 401 || status == 403) {
		snprintf(msg, n, "%s: HTTP %ld%s%s: access denied to the keys "
		    "from %s: check the bucket's policy for them, the region "
		    "(%s) and the endpoint (%s)%s", display, status,
		    e.code[0] ? " " : "", e.code, src, s3.c.region,
		    s3.c.endpoint, s3.c.access_key == NULL ? "; unsigned "
		    "requests reach only public buckets" : "");
		return SK_EACCES;
	}
	snprintf(msg, n, "%s: HTTP %ld%s%s%s%s", display, status,
	    e.code[0] ? " " : "", e.code, e.message[0] ? ": " : "",
	    e.message);
	return status == 400 ? SK_EINVAL : SK_EIO;
}

/* Not const: its ca_file is the credentials' CA bundle, set once when
 * they are loaded (s3_creds), before any request uses it. */
static struct sk__auth s3_auth = {
	.headers = s3_headers,
	.explain = s3_explain,
};

/* One signed request to bucket/key?query; 0 with the response in *r
 * when its status is 2xx, else the explained error. */
static int
s3_request(struct sk__req *r, const char *method, const char *bucket,
    const char *key, const char *shown, const char *query, const void *body,
    size_t len, size_t max, struct sk_error *err)
{
	char *url, *display;
	int rc;

	memset(r, 0, sizeof *r);
	if ((rc = s3_creds(err)) != 0)
		return rc;
	if ((url = s3_url(bucket, key, query)) == NULL ||
	    (display = shown != NULL ? strdup(shown) :
	    sk__asprintf("s3://%s/%s", bucket, key)) == NULL) {
		free(url);
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	r->method = method;
	r->url = url;
	r->display = display;
	r->auth = &s3_auth;
	r->body = body;
	r->body_len = len;
	r->max = max;
	rc = sk__fetch_request(r, err);
	if (rc == 0 && (r->status < 200 || r->status > 299)) {
		char msg[SK_ERRMSG_MAX];

		rc = s3_explain(NULL, r->status, r->resp, r->resp_len, display,
		    NULL, msg, sizeof msg);
		sk_error_set(err, rc, "%s", msg);
	}
	r->url = r->display = NULL;
	free(url);
	free(display);
	if (rc != 0)
		sk__req_free(r);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* reading                                                                  */

/* pinned: the ETag a listing gave, or NULL to open ahead. */
static int
s3_open(sk_source *s, const struct sk_url *u, uint64_t hint,
    const char *pinned)
{
	struct sk_error err;
	char *url;
	int rc;

	if ((rc = s3_creds(&err)) != 0)
		return sk__fail(&s->h, rc, "%s: %s", s->url, err.msg);
	if (u->path[0] == '\0')
		return sk__fail(&s->h, SK_EINVAL, "%s: no object name (a "
		    "folder ends in '/')", s->url);
	if ((url = s3_url(u->host, u->path, NULL)) == NULL)
		return sk__fail(&s->h, SK_ENOMEM, "out of memory");
	if (pinned != NULL)
		rc = sk__remote_pinned(s, url, hint, pinned, NULL, &s3_auth,
		    NULL);
	else
		rc = sk__remote_start(s, url, hint, &s3_auth, NULL);
	free(url);
	return rc;
}

static int
s3_open_ahead(sk_source *s, const struct sk_url *u, uint64_t hint)
{
	return s3_open(s, u, hint, NULL);
}

/* The listing's ETag pins the object by If-Match: no HEAD. */
static int
s3_open_pinned(sk_source *s, const struct sk_url *u, uint64_t size,
    const char *version)
{
	return s3_open(s, u, size, version);
}

struct listing {
	const char *prefix;	/* keys beside it or deeper below it are
				 * not the folder's own */
	const char *display;
	struct sk__entries *out;
	struct sk_error *err;
	int rc;			/* why list_text stopped the parse */
	/* the <Contents> being read */
	char key[XML_TEXT_MAX];
	int has_key, has_size, size_ok, etag_ok;
	uint64_t size;
	char etag[128];
	int64_t mtime;
	char token[XML_TEXT_MAX];
	int truncated;
};

/* A <Contents> read whole: its object, when right under the prefix. */
static int
contents_end(struct listing *l)
{
	const char *name;
	size_t n;
	int rc = 0;

	/* The server was asked for the prefix; one that answers with other
	 * keys does not put them in the folder. */
	if (l->has_key && (name = sk__entry_under(l->key, strlen(l->key),
	    l->prefix, 0, &n)) != NULL) {
		if (!l->has_size || !l->size_ok)
			rc = sk_error_set(l->err, SK_EFORMAT, "%s: the listing "
			    "gives an object a size that is not decimal digits",
			    l->display);
		else if (!l->etag_ok)
			rc = sk_error_set(l->err, SK_EFORMAT, "%s: the listing "
			    "gives an object an ETag that is not at most 127 "
			    "printable characters", l->display);
		else if (sk__entries_add(l->out, name, n, 0, l->size, l->mtime,
		    l->etag) != 0)
			rc = sk_error_set(l->err, SK_ENOMEM, "out of memory");
	}
	l->key[0] = l->etag[0] = '\0';
	l->has_key = l->has_size = l->size_ok = 0;
	l->etag_ok = 1;
	l->size = 0;
	l->mtime = 0;
	return rc;
}

static int
list_text(struct xml *x, const char *path, const char *text)
{
	struct listing *l = x->arg;
	const char *name;
	size_t n;

	if (strncmp(path, "/ListBucketResult/Contents", 26) == 0) {
		path += 26;
		if (*path == '\0')
			l->rc = contents_end(l);
		else if (strcmp(path, "/Key") == 0) {
			snprintf(l->key, sizeof l->key, "%s", text);
			l->has_key = 1;
		} else if (strcmp(path, "/Size") == 0) {
			l->has_size = 1;
			l->size_ok = sk__parse_u64(text, &l->size) == 0;
		} else if (strcmp(path, "/ETag") == 0) {
			l->etag_ok = sk__entry_version_ok(text);
			snprintf(l->etag, sizeof l->etag, "%s",
			    l->etag_ok ? text : "");
		} else if (strcmp(path, "/LastModified") == 0)
			l->mtime = sk__time_rfc3339(text);
		return l->rc != 0 ? -1 : 0;
	}
	if (strcmp(path, "/ListBucketResult/CommonPrefixes/Prefix") == 0) {
		if ((name = sk__entry_under(text, strlen(text), l->prefix, 1,
		    &n)) != NULL && sk__entries_add(l->out, name, n, 1, 0, 0,
		    "") != 0)
			l->rc = sk_error_set(l->err, SK_ENOMEM,
			    "out of memory");
		return l->rc != 0 ? -1 : 0;
	}
	if (strcmp(path, "/ListBucketResult/NextContinuationToken") == 0)
		snprintf(l->token, sizeof l->token, "%s", text);
	else if (strcmp(path, "/ListBucketResult/IsTruncated") == 0)
		l->truncated = strcmp(text, "true") == 0;
	return 0;
}

int
sk__s3_parse_list(const char *xml, size_t n, const char *prefix,
    const char *display, struct sk__entries *out, char *token,
    size_t tokenlen, int *truncated, struct sk_error *err)
{
	struct listing *l;
	int rc = 0;

	/* Two keys' room: off the stack. */
	if ((l = calloc(1, sizeof *l)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	l->prefix = prefix;
	l->display = display;
	l->out = out;
	l->err = err;
	l->etag_ok = 1;
	if (xml_parse(xml, n, list_text, l) != 0)
		rc = l->rc != 0 ? l->rc : sk_error_set(err, SK_EFORMAT,
		    "%s: the listing is not a ListObjectsV2 response",
		    display);
	else {
		snprintf(token, tokenlen, "%s", l->token);
		*truncated = l->truncated;
	}
	free(l);
	return rc;
}

/*
 * The objects and folders right under a folder (prefix ending in '/'),
 * page after page: the delimiter keeps the server from listing what lies
 * below subfolders, which come as CommonPrefixes, and a key that still
 * has a '/' past the prefix is dropped.
 */
static int
s3_list_entries(const struct sk_url *u, const char *url,
    struct sk__entries *out, struct sk_error *err)
{
	struct sk__req r;
	struct sk__list_guard g;
	char *prefix = NULL, *tok = NULL, *query = NULL;
	char token[XML_TEXT_MAX];
	size_t start = out->n, before = out->n, added;
	int rc = 0, pages, truncated;

	if ((prefix = sk__uri_escape(u->path, 0)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	sk__list_guard_init(&g);
	for (pages = 0; pages < LIST_PAGES_MAX; pages++) {
		free(query);
		query = sk__asprintf("list-type=2&prefix=%s&delimiter=%%2F&"
		    "max-keys=%d%s%s", prefix, sk__list_page(), tok ?
		    "&continuation-token=" : "", tok ? tok : "");
		if (query == NULL) {
			rc = sk_error_set(err, SK_ENOMEM, "out of memory");
			break;
		}
		if ((rc = s3_request(&r, "GET", u->host, "", url, query, NULL,
		    0, LIST_PAGE_MAX, err)) != 0)
			break;
		rc = sk__s3_parse_list(r.resp, r.resp_len, u->path, url, out,
		    token, sizeof token, &truncated, err);
		sk__req_free(&r);
		if (rc != 0 || (rc = sk__list_check(url, pages + 1, out->n,
		    before, start, err)) != 0)
			break;
		added = out->n - before;
		before = out->n;
		if (!truncated)
			break;
		if (token[0] == '\0') {
			rc = sk_error_set(err, SK_EFORMAT, "%s: the listing is "
			    "truncated with no continuation token", url);
			break;
		}
		/* A server that repeats itself would list forever. */
		if ((rc = sk__list_guard_page(&g, url, token, added, err)) != 0)
			break;
		free(tok);
		if ((tok = sk__uri_escape(token, 0)) == NULL) {
			rc = sk_error_set(err, SK_ENOMEM, "out of memory");
			break;
		}
	}
	if (rc == 0 && pages == LIST_PAGES_MAX)
		rc = sk_error_set(err, SK_ETOOBIG, "%s: more than %d pages",
		    url, LIST_PAGES_MAX);
	sk__list_guard_free(&g);
	free(query);
	free(tok);
	free(prefix);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* writing                                                                  */

struct upload_id {
	char id[1024];
};

static int
id_text(struct xml *x, const char *path, const char *text)
{
	struct upload_id *u = x->arg;

	if (strcmp(path, "/InitiateMultipartUploadResult/UploadId") == 0)
		snprintf(u->id, sizeof u->id, "%s", text);
	return 0;
}

int
sk__s3_parse_upload_id(const char *xml, size_t n, char *id, size_t idlen)
{
	struct upload_id u;

	memset(&u, 0, sizeof u);
	if (xml_parse(xml, n, id_text, &u) != 0 || u.id[0] == '\0')
		return SK_EFORMAT;
	snprintf(id, idlen, "%s", u.id);
	return 0;
}

struct mpu_part {
	struct sk__req r;
	char *url;
	int number;
	int busy;
	char etag[256];
};

/* Wait for part p and keep its ETag: 0 or the explained error. */
static int
part_wait(struct mpu_part *p, const char *display, struct sk_error *err)
{
	char msg[SK_ERRMSG_MAX];
	int rc;

	p->busy = 0;
	rc = sk__req_wait(&p->r, err);
	if (rc == 0 && (p->r.status < 200 || p->r.status > 299)) {
		rc = s3_explain(NULL, p->r.status, p->r.resp, p->r.resp_len,
		    display, NULL, msg, sizeof msg);
		sk_error_set(err, rc, "%s (part %d)", msg, p->number);
	} else if (rc == 0 && sk__req_header(&p->r, "etag", p->etag,
	    sizeof p->etag) == NULL)
		rc = sk_error_set(err, SK_EIO, "%s: part %d: no ETag in the "
		    "response", display, p->number);
	sk__req_free(&p->r);
	free(p->url);
	p->url = NULL;
	return rc;
}

/* The part size of a multipart upload: --part-size, at least the 5 MiB S3
 * wants of every part but the last. An object of two parts or more goes
 * up in parts. */
static uint64_t
mpu_part_size(void)
{
	struct sk_fetch_config cfg;

	sk_fetch_get_config(&cfg);
	return cfg.part_size < ((uint64_t)5 << 20) ? (uint64_t)5 << 20 :
	    cfg.part_size;
}

/* The part size and count of a multipart upload of size bytes. */
static void
mpu_layout(uint64_t size, uint64_t *psize, int *nparts)
{
	*psize = mpu_part_size();
	while ((size + *psize - 1) / *psize > MPU_PARTS_MAX)
		*psize *= 2;
	*nparts = (int)((size + *psize - 1) / *psize);
}

/*
 * Whether s3://bucket/key holds these bytes: a HEAD's size, then its ETag,
 * which S3 makes the MD5 of a single-part upload, and for a multipart one
 * "MD5(the parts' MD5s)-N": computed here for this process's part size, so
 * an object uploaded with another part size reads as different and is
 * sent again, never wrongly kept.
 */
static int
s3_same(const struct sk_url *u, const char *url, const void *data,
    uint64_t size, const char *md5, int *same, struct sk_error *err)
{
	struct sk__req r;
	char etag[128], len[32], want[48], hex[33], *q, *end;
	unsigned char md[16];
	uint64_t psize, off;
	size_t n;
	int rc, nparts, i;
	EVP_MD_CTX *c;

	*same = 0;
	if ((rc = s3_request(&r, "HEAD", u->host, u->path, url, NULL, NULL, 0,
	    SMALL_MAX, err)) != 0)
		return rc == SK_ENOENT ? 0 : rc;
	if (sk__req_header(&r, "Content-Length", len, sizeof len) == NULL ||
	    sk__req_header(&r, "ETag", etag, sizeof etag) == NULL) {
		sk__req_free(&r);
		return 0;
	}
	sk__req_free(&r);
	if (strtoull(len, &end, 10) != size || *end != '\0')
		return 0;
	q = etag[0] == '"' ? etag + 1 : etag;
	if ((n = strlen(q)) > 0 && q[n - 1] == '"')
		q[--n] = '\0';
	if (strchr(q, '-') == NULL) {
		if (md5 != NULL)
			snprintf(want, sizeof want, "%s", md5);
		else
			sk__md5_of(data, size, want);
		*same = strcasecmp(q, want) == 0;
		return 0;
	}
	/* The parts' MD5s are not the whole's: only the bytes tell. */
	if (data == NULL)
		return 0;
	mpu_layout(size, &psize, &nparts);
	if ((c = EVP_MD_CTX_new()) == NULL ||
	    EVP_DigestInit_ex(c, EVP_md5(), NULL) != 1) {
		EVP_MD_CTX_free(c);
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	for (i = 0, off = 0; i < nparts; i++, off += psize) {
		unsigned int ml = 0;

		EVP_Digest((const uint8_t *)data + off, (size_t)(size - off <
		    psize ? size - off : psize), md, &ml, EVP_md5(), NULL);
		EVP_DigestUpdate(c, md, ml);
	}
	EVP_DigestFinal_ex(c, md, NULL);
	EVP_MD_CTX_free(c);
	sk__md5_hex(md, hex);
	snprintf(want, sizeof want, "%s-%d", hex, nparts);
	*same = strcasecmp(q, want) == 0;
	return 0;
}

/*
 * Multipart upload: parts of mpu_part_size(), MPU_INFLIGHT at once, each
 * retried alone by the engine; completed with their ETags, or aborted so
 * no half upload is left to bill.
 */
static int
s3_put_multipart(const char *bucket, const char *key, const uint8_t *data,
    uint64_t size, const char *display, struct sk_error *err)
{
	struct mpu_part slot[MPU_INFLIGHT];
	char uid[1024];
	struct sk__req r;
	char *q = NULL, *xml = NULL, *idq = NULL, **etags = NULL;
	uint64_t psize, off;
	size_t cap, used;
	int rc, nparts, i, k;

	memset(slot, 0, sizeof slot);
	mpu_layout(size, &psize, &nparts);
	if ((rc = s3_request(&r, "POST", bucket, key, NULL, "uploads", NULL, 0,
	    SMALL_MAX, err)) != 0)
		return rc;
	if (sk__s3_parse_upload_id(r.resp, r.resp_len, uid, sizeof uid) != 0) {
		sk__req_free(&r);
		return sk_error_set(err, SK_EFORMAT, "%s: the server gave no "
		    "UploadId for a multipart upload", display);
	}
	sk__req_free(&r);
	if ((idq = sk__uri_escape(uid, 0)) == NULL ||
	    (etags = calloc((size_t)nparts, sizeof *etags)) == NULL) {
		rc = sk_error_set(err, SK_ENOMEM, "out of memory");
		goto abort;
	}
	for (i = 0, off = 0; i < nparts; i++, off += psize) {
		struct mpu_part *p = &slot[i % MPU_INFLIGHT];

		if (p->busy) {
			if ((rc = part_wait(p, display, err)) != 0)
				goto abort;
			if ((etags[p->number - 1] = strdup(p->etag)) == NULL)
				goto nomem;
		}
		if ((q = sk__asprintf("partNumber=%d&uploadId=%s", i + 1,
		    idq)) == NULL || (p->url = s3_url(bucket, key, q)) == NULL)
			goto nomem;
		free(q);
		q = NULL;
		memset(&p->r, 0, sizeof p->r);
		p->number = i + 1;
		p->r.method = "PUT";
		p->r.url = p->url;
		p->r.display = display;
		p->r.auth = &s3_auth;
		p->r.body = data + off;
		p->r.body_len = (size_t)(size - off < psize ? size - off :
		    psize);
		p->r.max = SMALL_MAX;
		if ((rc = sk__req_start(&p->r, err)) != 0) {
			free(p->url);
			p->url = NULL;
			goto abort;
		}
		p->busy = 1;
	}
	for (k = 0; k < MPU_INFLIGHT; k++) {
		struct mpu_part *p = &slot[(i + k) % MPU_INFLIGHT];

		if (!p->busy)
			continue;
		if ((rc = part_wait(p, display, err)) != 0)
			goto abort;
		if ((etags[p->number - 1] = strdup(p->etag)) == NULL)
			goto nomem;
	}
	cap = 128 + (size_t)nparts * 320;
	if ((xml = malloc(cap)) == NULL)
		goto nomem;
	used = (size_t)snprintf(xml, cap, "<CompleteMultipartUpload>");
	for (i = 0; i < nparts; i++)
		used += (size_t)snprintf(xml + used, cap - used, "<Part><Part"
		    "Number>%d</PartNumber><ETag>%s</ETag></Part>", i + 1,
		    etags[i]);
	used += (size_t)snprintf(xml + used, cap - used,
	    "</CompleteMultipartUpload>");
	if ((q = sk__asprintf("uploadId=%s", idq)) == NULL)
		goto nomem;
	if ((rc = s3_request(&r, "POST", bucket, key, NULL, q, xml, used, SMALL_MAX,
	    err)) != 0)
		goto abort;
	/* A 200 may still carry an error (S3's documented quirk). */
	if (strstr(r.resp, "<Error>") != NULL) {
		char msg[SK_ERRMSG_MAX];

		rc = s3_explain(NULL, 500, r.resp, r.resp_len, display, NULL,
		    msg, sizeof msg);
		sk_error_set(err, rc, "%s (completing the upload)", msg);
		sk__req_free(&r);
		goto abort;
	}
	sk__req_free(&r);
	goto out;
nomem:
	rc = sk_error_set(err, SK_ENOMEM, "out of memory");
abort:
	for (k = 0; k < MPU_INFLIGHT; k++)
		if (slot[k].busy) {
			struct sk_error e2;

			part_wait(&slot[k], display, &e2);
		}
	if (idq != NULL) {
		struct sk_error e2;

		free(q);
		if ((q = sk__asprintf("uploadId=%s", idq)) != NULL &&
		    s3_request(&r, "DELETE", bucket, key, NULL, q, NULL, 0,
		    SMALL_MAX, &e2) == 0)
			sk__req_free(&r);
		else
			sk_log(SK_LOG_WARN, "%s: the failed multipart upload "
			    "could not be aborted; a lifecycle rule for "
			    "incomplete uploads cleans it up", display);
	}
out:
	if (etags != NULL)
		for (i = 0; i < nparts; i++)
			free(etags[i]);
	free(etags);
	free(xml);
	free(q);
	free(idq);
	return rc;
}

static int
s3_put(const struct sk_url *u, const char *url, const void *data,
    uint64_t size, struct sk_error *err)
{
	struct sk__req r;
	int rc;

	if (u->path[0] == '\0' || u->path[strlen(u->path) - 1] == '/')
		return sk_error_set(err, SK_EINVAL, "%s: no object name", url);
	if (size > mpu_part_size())
		return s3_put_multipart(u->host, u->path, data, size, url,
		    err);
	if ((rc = s3_request(&r, "PUT", u->host, u->path, NULL, NULL, data,
	    (size_t)size, SMALL_MAX, err)) != 0)
		return rc;
	sk__req_free(&r);
	return 0;
}

static int
s3_del(const struct sk_url *u, const char *url, struct sk_error *err)
{
	struct sk__req r;
	int rc;

	(void)url;
	/* S3 answers 204 whether or not the key was there. */
	if ((rc = s3_request(&r, "DELETE", u->host, u->path, NULL, NULL, NULL, 0,
	    SMALL_MAX, err)) != 0)
		return rc;
	sk__req_free(&r);
	return 0;
}

const struct sk__source_ops sk__source_s3_ops = {
	.name = "s3",
	.open_ahead = s3_open_ahead,
	.open_pinned = s3_open_pinned,
	.ready = sk__remote_ready,
	.pread = sk__remote_pread,
	.peek = sk__remote_peek,
	.size = sk__remote_size,
	.close = sk__remote_close,
	.list_entries = s3_list_entries,
	.put = s3_put,
	.del = s3_del,
	.same = s3_same,
};
