/*
 * sigv4.c - AWS Signature Version 4 for s3:// requests, with OpenSSL's
 * HMAC-SHA256: the canonical request, the string to sign, the derived key
 * and the Authorization header's value.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/crypto.h>

#include "internal.h"
#include "cloud.h"

#define MAX_SIGNED	16
#define MAX_PARAMS	64

static void
hex(const unsigned char *d, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = digits[d[i] >> 4];
		out[2 * i + 1] = digits[d[i] & 15];
	}
	out[2 * n] = '\0';
}

void
sk__sha256_hex(const void *data, size_t n, char out[65])
{
	unsigned char md[32];
	unsigned int len = 0;

	EVP_Digest(data, n, md, &len, EVP_sha256(), NULL);
	hex(md, 32, out);
}

static void
hmac(const void *key, size_t klen, const char *msg, unsigned char out[32])
{
	unsigned int len = 32;

	HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg,
	    strlen(msg), out, &len);
}

/* A growing string; a failed append leaves ok at 0. */
struct buf {
	char *p;
	size_t len, cap;
	int ok;
};

static void
put(struct buf *b, const char *s, size_t n)
{
	char *np;
	size_t ncap;

	if (!b->ok)
		return;
	if (b->len + n + 1 > b->cap) {
		ncap = (b->len + n + 1) * 2;
		if ((np = realloc(b->p, ncap)) == NULL) {
			b->ok = 0;
			return;
		}
		b->p = np;
		b->cap = ncap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void
puts_(struct buf *b, const char *s)
{
	put(b, s, strlen(s));
}

/* A percent-escape's hex digits in upper case, as the canonical forms
 * want; everything else as sent. */
static void
put_escaped(struct buf *b, const char *s, size_t n)
{
	int after = 0;
	size_t i;
	char c;

	for (i = 0; i < n; i++) {
		c = s[i];
		if (after > 0 && c >= 'a' && c <= 'f')
			c = (char)(c - 'a' + 'A');
		after = c == '%' ? 2 : after > 0 ? after - 1 : 0;
		put(b, &c, 1);
	}
}

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* A query name or value as SigV4 wants it, whatever form it was sent in
 * ("in/" or "in%2F"): decoded, then every byte but the unreserved ones
 * %XX-encoded in upper case. */
static void
put_canon(struct buf *b, const char *s, size_t n)
{
	static const char digits[] = "0123456789ABCDEF";
	unsigned char c;
	char e[3];
	size_t i;

	for (i = 0; i < n; i++) {
		c = (unsigned char)s[i];
		if (c == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 &&
		    hexval(s[i + 2]) >= 0) {
			c = (unsigned char)(hexval(s[i + 1]) * 16 +
			    hexval(s[i + 2]));
			i += 2;
		}
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		    (c >= '0' && c <= '9') || c == '-' || c == '.' ||
		    c == '_' || c == '~') {
			e[0] = (char)c;
			put(b, e, 1);
		} else {
			e[0] = '%';
			e[1] = digits[c >> 4];
			e[2] = digits[c & 15];
			put(b, e, 3);
		}
	}
}

static int
cmp_hdr(const void *a, const void *b)
{
	return strcmp(((const struct sk__hdr *)a)->name,
	    ((const struct sk__hdr *)b)->name);
}

struct param {
	const char *s;
	size_t len;
};

/* Query parameters sort by name, then by value: byte order of "n=v". */
static int
cmp_param(const void *a, const void *b)
{
	const struct param *x = a, *y = b;
	size_t xn = strcspn(x->s, "=&"), yn = strcspn(y->s, "=&");
	int c;

	if (xn > x->len)
		xn = x->len;
	if (yn > y->len)
		yn = y->len;
	c = memcmp(x->s, y->s, xn < yn ? xn : yn);
	if (c != 0 || xn != yn)
		return c != 0 ? c : (xn < yn ? -1 : 1);
	c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
	return c != 0 ? c : (x->len < y->len ? -1 : x->len > y->len);
}

/* A header value trimmed, inner runs of spaces as one. */
static void
put_value(struct buf *b, const char *v)
{
	int space = 0;

	while (*v == ' ' || *v == '\t')
		v++;
	for (; *v != '\0'; v++) {
		if (*v == ' ' || *v == '\t') {
			space = 1;
			continue;
		}
		if (space)
			put(b, " ", 1);
		space = 0;
		put(b, v, 1);
	}
}

int
sk__sigv4(const char *access_key, const char *secret, const char *region,
    const char *service, const char *method, const char *path,
    const char *query, const struct sk__hdr *hdrs, size_t nhdrs,
    const char *payload, const char *amzdate, char *auth, size_t authlen)
{
	struct sk__hdr h[MAX_SIGNED];
	struct param q[MAX_PARAMS];
	struct buf cr = { NULL, 0, 0, 1 }, sh = { NULL, 0, 0, 1 };
	unsigned char k[32], k2[32];
	char date[9], crhash[65], sig[65], *ksecret, scope[200], sts[400];
	const char *p;
	size_t i, nq = 0, n;
	int rc = 0;

	if (nhdrs > MAX_SIGNED || strlen(amzdate) != 16 || amzdate[8] != 'T' ||
	    amzdate[15] != 'Z')
		return SK_EINVAL;
	memcpy(date, amzdate, 8);
	date[8] = '\0';
	memcpy(h, hdrs, nhdrs * sizeof *h);
	qsort(h, nhdrs, sizeof *h, cmp_hdr);
	for (p = query; *p != '\0'; p += n + (p[n] == '&')) {
		n = strcspn(p, "&");
		if (n == 0)
			continue;
		if (nq == MAX_PARAMS)
			return SK_EINVAL;
		q[nq].s = p;
		q[nq++].len = n;
	}
	qsort(q, nq, sizeof *q, cmp_param);

	/* The canonical request. */
	puts_(&cr, method);
	put(&cr, "\n", 1);
	put_escaped(&cr, path[0] ? path : "/", strlen(path[0] ? path : "/"));
	put(&cr, "\n", 1);
	for (i = 0; i < nq; i++) {
		const char *eq = memchr(q[i].s, '=', q[i].len);
		size_t kn = eq != NULL ? (size_t)(eq - q[i].s) : q[i].len;

		if (i > 0)
			put(&cr, "&", 1);
		put_canon(&cr, q[i].s, kn);
		put(&cr, "=", 1);
		if (eq != NULL)
			put_canon(&cr, eq + 1, q[i].len - kn - 1);
	}
	put(&cr, "\n", 1);
	for (i = 0; i < nhdrs; i++) {
		puts_(&cr, h[i].name);
		put(&cr, ":", 1);
		put_value(&cr, h[i].value);
		put(&cr, "\n", 1);
		if (i > 0)
			put(&sh, ";", 1);
		puts_(&sh, h[i].name);
	}
	put(&cr, "\n", 1);
	puts_(&cr, sh.p ? sh.p : "");
	put(&cr, "\n", 1);
	puts_(&cr, payload);
	if (!cr.ok || !sh.ok) {
		rc = SK_ENOMEM;
		goto out;
	}
	sk__sha256_hex(cr.p, cr.len, crhash);

	/* The string to sign and the key derived for this day and scope. */
	snprintf(scope, sizeof scope, "%s/%s/%s/aws4_request", date, region,
	    service);
	snprintf(sts, sizeof sts, "AWS4-HMAC-SHA256\n%s\n%s\n%s", amzdate,
	    scope, crhash);
	if ((ksecret = sk__asprintf("AWS4%s", secret)) == NULL) {
		rc = SK_ENOMEM;
		goto out;
	}
	hmac(ksecret, strlen(ksecret), date, k);
	OPENSSL_cleanse(ksecret, strlen(ksecret));
	free(ksecret);
	hmac(k, 32, region, k2);
	hmac(k2, 32, service, k);
	hmac(k, 32, "aws4_request", k2);
	hmac(k2, 32, sts, k);
	hex(k, 32, sig);
	OPENSSL_cleanse(k, sizeof k);
	OPENSSL_cleanse(k2, sizeof k2);
	if ((size_t)snprintf(auth, authlen, "AWS4-HMAC-SHA256 Credential=%s/%s,"
	    "SignedHeaders=%s,Signature=%s", access_key, scope, sh.p, sig) >=
	    authlen)
		rc = SK_EINVAL;
out:
	free(cr.p);
	free(sh.p);
	return rc;
}
