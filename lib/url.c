/*
 * url.c - shard patterns and URLs: brace expansion, "::" lists, the URL
 * forms of DESIGN.md and WebDataset's key rule, and URLs as messages show
 * them (a password or a signature hidden).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

/* ------------------------------------------------------------------------ */
/* brace expansion                                                          */

/* The index of the brace that closes the one at s[open], or -1. */
static long
match_brace(const char *s, size_t open)
{
	size_t i;
	int depth = 0;

	for (i = open; s[i] != '\0'; i++) {
		if (s[i] == '{')
			depth++;
		else if (s[i] == '}' && --depth == 0)
			return (long)i;
	}
	return -1;
}

/* A decimal bound: "-"? digits. */
static int
parse_bound(const char *s, size_t n, long long *v, int *padded)
{
	size_t i = 0, digits;
	char buf[32];

	if (n == 0 || n >= sizeof buf)
		return -1;
	if (s[0] == '-')
		i = 1;
	digits = n - i;
	if (digits == 0)
		return -1;
	for (; i < n; i++)
		if (!isdigit((unsigned char)s[i]))
			return -1;
	memcpy(buf, s, n);
	buf[n] = '\0';
	errno = 0;
	*v = strtoll(buf, NULL, 10);
	if (errno != 0)
		return -1;
	/* bash: a leading zero on either bound asks for zero padding. */
	*padded = digits > 1 && s[n - digits] == '0';
	return 0;
}

static int expand_one(const char *pat, struct sk_strlist *out,
    struct sk_error *err);

/* Expand prefix + mid + suffix, where mid is one alternative. */
static int
expand_join(const char *pre, size_t npre, const char *mid, size_t nmid,
    const char *suf, struct sk_strlist *out, struct sk_error *err)
{
	size_t nsuf = strlen(suf);
	char *s;
	int rc;

	if ((s = malloc(npre + nmid + nsuf + 1)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	memcpy(s, pre, npre);
	memcpy(s + npre, mid, nmid);
	memcpy(s + npre + nmid, suf, nsuf + 1);
	rc = expand_one(s, out, err);
	free(s);
	return rc;
}

static int
expand_range(const char *pat, size_t open, size_t close, const char *dots,
    struct sk_strlist *out, struct sk_error *err)
{
	const char *body = pat + open + 1;
	long long lo, hi, v, step;
	int plo, phi, width = 0, rc;
	unsigned long long count;
	char num[32];
	size_t nlo = (size_t)(dots - body), nhi = close - (size_t)(dots + 2 - pat);

	if (parse_bound(body, nlo, &lo, &plo) != 0 ||
	    parse_bound(dots + 2, nhi, &hi, &phi) != 0)
		return sk_error_set(err, SK_EINVAL,
		    "%s: bad range '%.*s': want {FIRST..LAST} with integers",
		    pat, (int)(close - open + 1), pat + open);
	if (plo || phi)
		width = (int)(nlo > nhi ? nlo : nhi);
	/* In unsigned arithmetic: hi - lo can overflow a long long. */
	count = (hi >= lo ? (unsigned long long)hi - (unsigned long long)lo :
	    (unsigned long long)lo - (unsigned long long)hi) + 1;
	if (count > SK_EXPAND_MAX || out->n + count > SK_EXPAND_MAX)
		return sk_error_set(err, SK_ETOOBIG,
		    "%s: expands to more than %d names", pat, SK_EXPAND_MAX);
	step = hi >= lo ? 1 : -1;
	for (v = lo;; v += step) {
		int n = snprintf(num, sizeof num, "%0*lld", width, v);
		rc = expand_join(pat, open, num, (size_t)n, pat + close + 1,
		    out, err);
		if (rc != 0 || v == hi)
			return rc;
	}
}

static int
expand_one(const char *pat, struct sk_strlist *out, struct sk_error *err)
{
	const char *open_p = strchr(pat, '{'), *close_p = strchr(pat, '}');
	size_t open, close, i, start;
	const char *dots;
	int depth, rc;
	long c;

	if (open_p == NULL) {
		if (close_p != NULL)
			return sk_error_set(err, SK_EINVAL,
			    "%s: unmatched '}' at column %zu", pat,
			    (size_t)(close_p - pat) + 1);
		if (out->n >= SK_EXPAND_MAX)
			return sk_error_set(err, SK_ETOOBIG,
			    "pattern expands to more than %d names",
			    SK_EXPAND_MAX);
		return sk_strlist_push(out, pat) == 0 ? 0 :
		    sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	if (close_p != NULL && close_p < open_p)
		return sk_error_set(err, SK_EINVAL,
		    "%s: unmatched '}' at column %zu", pat,
		    (size_t)(close_p - pat) + 1);
	open = (size_t)(open_p - pat);
	if ((c = match_brace(pat, open)) < 0)
		return sk_error_set(err, SK_EINVAL,
		    "%s: unmatched '{' at column %zu", pat, open + 1);
	close = (size_t)c;

	/* A top-level comma makes a list; otherwise it must be a range. */
	depth = 0;
	for (i = open + 1; i < close; i++) {
		if (pat[i] == '{')
			depth++;
		else if (pat[i] == '}')
			depth--;
		else if (pat[i] == ',' && depth == 0)
			break;
	}
	if (i == close) {
		dots = strstr(pat + open + 1, "..");
		if (dots == NULL || dots > pat + close)
			return sk_error_set(err, SK_EINVAL,
			    "%s: brace group '%.*s' has neither ',' nor '..'",
			    pat, (int)(close - open + 1), pat + open);
		return expand_range(pat, open, close, dots, out, err);
	}
	depth = 0;
	start = open + 1;
	for (i = open + 1; i <= close; i++) {
		if (i < close && pat[i] == '{')
			depth++;
		else if (i < close && pat[i] == '}')
			depth--;
		else if (i == close || (pat[i] == ',' && depth == 0)) {
			rc = expand_join(pat, open, pat + start, i - start,
			    pat + close + 1, out, err);
			if (rc != 0)
				return rc;
			start = i + 1;
		}
	}
	return 0;
}

int
sk_url_expand(const char *pattern, struct sk_strlist *out,
    struct sk_error *err)
{
	const char *p = pattern, *sep;
	int depth, rc, bracket;
	char *part;

	if (pattern == NULL || *pattern == '\0')
		return sk_error_set(err, SK_EINVAL, "empty shard pattern");
	for (;;) {
		/* "::" joins patterns; not inside braces or an IPv6 [host]. */
		depth = bracket = 0;
		for (sep = p; *sep != '\0'; sep++) {
			if (*sep == '{')
				depth++;
			else if (*sep == '}')
				depth--;
			else if (*sep == '[')
				bracket = 1;
			else if (*sep == ']')
				bracket = 0;
			else if (depth == 0 && !bracket && sep[0] == ':' &&
			    sep[1] == ':')
				break;
		}
		if ((part = strndup(p, (size_t)(sep - p))) == NULL)
			return sk_error_set(err, SK_ENOMEM, "out of memory");
		if (*part == '\0')
			rc = sk_error_set(err, SK_EINVAL,
			    "%s: empty pattern in a '::' list", pattern);
		else
			rc = expand_one(part, out, err);
		free(part);
		if (rc != 0 || *sep == '\0')
			return rc;
		p = sep + 2;
	}
}

/* ------------------------------------------------------------------------ */
/* URLs                                                                     */

const char *
sk_scheme_name(enum sk_scheme scheme)
{
	static const char *names[] = { "file", "http", "https", "gs", "s3" };

	return (unsigned)scheme < 5 ? names[scheme] : "?";
}

void
sk_url_free(struct sk_url *u)
{
	free(u->host);
	free(u->path);
	u->host = u->path = NULL;
}

static int
parse_http(const char *text, const char *rest, struct sk_url *u,
    struct sk_error *err)
{
	const char *slash, *hostend, *colon = NULL, *at;
	char *end;
	long port;

	/* RFC 3986 3.2.1: userinfo@ before the host; libcurl sends it. */
	slash = rest + strcspn(rest, "/?#");
	for (at = slash; at > rest && at[-1] != '@'; at--)
		;
	if (at > rest)
		rest = at;
	slash = strchr(rest, '/');
	if (slash == NULL)
		slash = rest + strlen(rest);
	if (rest[0] == '[') {
		hostend = memchr(rest, ']', (size_t)(slash - rest));
		if (hostend == NULL)
			return sk_error_set(err, SK_EINVAL,
			    "%s: unmatched '[' in host", text);
		u->host = strndup(rest, (size_t)(hostend - rest) + 1);
		if (hostend[1] == ':')
			colon = hostend + 1;
	} else {
		colon = memchr(rest, ':', (size_t)(slash - rest));
		hostend = colon ? colon : slash;
		u->host = strndup(rest, (size_t)(hostend - rest));
	}
	if (u->host == NULL || u->host[0] == '\0')
		return sk_error_set(err, SK_EINVAL, "%s: no host", text);
	if (colon != NULL) {
		errno = 0;
		port = strtol(colon + 1, &end, 10);
		if (end != slash || end == colon + 1 || errno != 0 ||
		    port < 1 || port > 65535)
			return sk_error_set(err, SK_EINVAL, "%s: bad port",
			    text);
		u->port = (int)port;
	} else
		u->port = u->scheme == SK_SCHEME_HTTPS ? 443 : 80;
	u->path = strdup(*slash != '\0' ? slash : "/");
	return u->path ? 0 : sk_error_set(err, SK_ENOMEM, "out of memory");
}

int
sk_url_parse(const char *text, struct sk_url *u, struct sk_error *err)
{
	const char *sep, *rest, *slash;
	int rc;

	memset(u, 0, sizeof *u);
	if (text == NULL || *text == '\0')
		return sk_error_set(err, SK_EINVAL, "empty URL");
	sep = strstr(text, "://");
	if (sep == NULL) {
		u->scheme = SK_SCHEME_FILE;
		u->path = strdup(text);
		return u->path ? 0 : sk_error_set(err, SK_ENOMEM,
		    "out of memory");
	}
	rest = sep + 3;
	if (strncmp(text, "file://", 7) == 0) {
		u->scheme = SK_SCHEME_FILE;
		/* RFC 8089: file://HOST/PATH; only the local host is ours. */
		if (strncmp(rest, "localhost/", 10) == 0)
			rest += 9;
		if (rest[0] != '/')
			return sk_error_set(err, SK_EINVAL,
			    "%s: want file:///absolute/path", text);
		u->path = strdup(rest);
		rc = u->path ? 0 : SK_ENOMEM;
	} else if (strncmp(text, "http://", 7) == 0 ||
	    strncmp(text, "https://", 8) == 0) {
		char *shown = sk_url_redact(text);

		u->scheme = text[4] == 's' ? SK_SCHEME_HTTPS : SK_SCHEME_HTTP;
		/* Messages show the URL without its password. */
		rc = parse_http(shown != NULL ? shown : "the URL", rest, u,
		    err);
		free(shown);
	} else if (strncmp(text, "gs://", 5) == 0 ||
	    strncmp(text, "s3://", 5) == 0) {
		u->scheme = text[0] == 'g' ? SK_SCHEME_GS : SK_SCHEME_S3;
		slash = strchr(rest, '/');
		if (slash == NULL)
			slash = rest + strlen(rest);
		if (slash == rest)
			rc = sk_error_set(err, SK_EINVAL, "%s: no bucket",
			    text);
		else if (slash - rest > 222 || strspn(rest, "abcdefghijklmn"
		    "opqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") <
		    (size_t)(slash - rest))
			/* It becomes a host name or a path segment: nothing
			 * that could move the request elsewhere. */
			rc = sk_error_set(err, SK_EINVAL, "%.*s: not a bucket "
			    "name (letters, digits, '.', '-' and '_')",
			    (int)(slash - text), text);
		else {
			u->host = strndup(rest, (size_t)(slash - rest));
			u->path = strdup(*slash ? slash + 1 : "");
			rc = u->host && u->path ? 0 : SK_ENOMEM;
		}
	} else
		rc = sk_error_set(err, SK_EUNSUPPORTED,
		    "%.*s: unsupported URL scheme (want file, http, https, gs "
		    "or s3)", (int)(sep - text), text);
	if (rc == SK_ENOMEM)
		sk_error_set(err, rc, "out of memory");
	if (rc != 0)
		sk_url_free(u);
	return rc;
}

size_t
sk_key_split(const char *name, const char **ext)
{
	const char *base = strrchr(name, '/'), *dot;

	base = base ? base + 1 : name;
	dot = strchr(base, '.');
	if (dot == NULL) {
		*ext = name + strlen(name);
		return strlen(name);
	}
	*ext = dot + 1;
	return (size_t)(dot - name);
}

/* RFC 3986 unreserved characters pass, and '/' when keep_slash (an S3
 * key in a path); everything else is %XX. */
char *
sk__uri_escape(const char *name, int keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t i, n = strlen(name);
	char *out, *o;

	if ((out = malloc(3 * n + 1)) == NULL)
		return NULL;
	for (o = out, i = 0; i < n; i++) {
		unsigned char c = (unsigned char)name[i];

		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		    (c >= '0' && c <= '9') || c == '-' || c == '.' ||
		    c == '_' || c == '~' || (c == '/' && keep_slash))
			*o++ = (char)c;
		else {
			*o++ = '%';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		}
	}
	*o = '\0';
	return out;
}

/* ------------------------------------------------------------------------ */
/* URLs as messages show them                                               */

/* Query parameters that carry a credential (SigV4, GCS signed URLs, SAS). */
static int
secret_param(const char *name, size_t n)
{
	static const char *const names[] = {
		"x-amz-signature", "x-amz-credential", "x-amz-security-token",
		"x-goog-signature", "x-goog-credential", "signature", "sig",
		"token", "access_token", "key"
	};
	size_t i;

	for (i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strlen(names[i]) == n && strncasecmp(name, names[i], n) == 0)
			return 1;
	return 0;
}

int
sk__url_password(const char *url, size_t *off, size_t *len)
{
	const char *p, *q, *at, *hostend;

	p = strstr(url, "://");
	p = p != NULL ? p + 3 : url;
	/* The host starts after the last '@' before the path, as
	 * sk_url_parse and libcurl split it, so a password holding '@' is
	 * found whole; the user ends at the userinfo's first ':'. */
	hostend = p + strcspn(p, "/?#");
	for (at = hostend; at > p && at[-1] != '@'; at--)
		;
	if (at == p || (q = memchr(p, ':', (size_t)(at - 1 - p))) == NULL)
		return 0;
	*off = (size_t)(q + 1 - url);
	*len = (size_t)(at - 1 - (q + 1));
	return 1;
}

char *
sk_url_redact(const char *url)
{
	const char *p, *q, *eq, *amp;
	size_t n = strlen(url), off, plen;
	char *out, *o;

	/* Each secret shrinks to "***" or grows by at most 3 bytes. */
	if ((out = malloc(n + 4 * (n / 2 + 1) + 1)) == NULL)
		return NULL;
	o = out;
	p = url;
	/* userinfo: keep the user, hide the password */
	if (sk__url_password(url, &off, &plen)) {
		memcpy(o, url, off);
		o += off;
		memcpy(o, "***", 3);
		o += 3;
		p = url + off + plen;
	}
	q = strchr(p, '?');
	if (q == NULL) {
		strcpy(o, p);
		return out;
	}
	memcpy(o, p, (size_t)(q - p) + 1);
	o += q - p + 1;
	for (p = q + 1; *p != '\0'; p = *amp ? amp + 1 : amp) {
		amp = p + strcspn(p, "&#");
		eq = memchr(p, '=', (size_t)(amp - p));
		if (eq != NULL && secret_param(p, (size_t)(eq - p))) {
			memcpy(o, p, (size_t)(eq - p) + 1);
			o += eq - p + 1;
			memcpy(o, "***", 3);
			o += 3;
		} else {
			memcpy(o, p, (size_t)(amp - p));
			o += amp - p;
		}
		if (*amp == '#') {
			strcpy(o, amp);
			return out;
		}
		if (*amp == '&')
			*o++ = '&';
	}
	*o = '\0';
	return out;
}
