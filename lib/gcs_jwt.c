/*
 * gcs_jwt.c - the steps of Google's OAuth2 that need no network: a
 * credentials file (a service account's key, or gcloud's authorized_user
 * refresh token) to the form that asks a token endpoint for an access
 * token, and that endpoint's answer to the token. The requests themselves
 * are source_gs.c's.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "internal.h"
#include "cloud.h"

/* A key file is about 2.3 KB; anything past this is not one. */
#define KEY_MAX_BYTES		(64 * 1024)
/* Token responses are a few hundred bytes; tokens are Google's ~200. */
#define RESPONSE_MAX_BYTES	(64 * 1024)
#define TOKEN_MAX_BYTES		8192
#define TOKEN_URI_DEFAULT	"https://oauth2.googleapis.com/token"
/* Google: "exp" may be at most an hour after "iat". */
#define JWT_LIFETIME		3600
#define EXPIRES_DEFAULT		3600
#define EXPIRES_MAX		(7 * 86400)
/* What an endpoint's error and error_description may fill in a message. */
#define REASON_MAX		200

/*
 * Codes: a file or response that is not what it should be is SK_EFORMAT; a
 * well-formed one we cannot authenticate with (another kind of credential,
 * a key that cannot sign RS256, a refusal from the endpoint) is SK_EACCES.
 * No message quotes the input: jansson's own error text quotes the bytes
 * near the fault, and those may be the key or the token.
 */

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */

/* RFC 7515 section 2: base64url without padding. */
static char *
b64url(const void *data, size_t n)
{
	static const char tab[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	const unsigned char *p = data;
	char *s, *o;
	uint32_t v;
	size_t i;

	if ((s = malloc(n / 3 * 4 + 4)) == NULL)
		return (NULL);
	o = s;
	for (i = 0; i + 3 <= n; i += 3) {
		v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
		*o++ = tab[v >> 18 & 63];
		*o++ = tab[v >> 12 & 63];
		*o++ = tab[v >> 6 & 63];
		*o++ = tab[v & 63];
	}
	if (n - i == 1) {
		v = (uint32_t)p[i] << 16;
		*o++ = tab[v >> 18 & 63];
		*o++ = tab[v >> 12 & 63];
	} else if (n - i == 2) {
		v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
		*o++ = tab[v >> 18 & 63];
		*o++ = tab[v >> 12 & 63];
		*o++ = tab[v >> 6 & 63];
	}
	*o = '\0';
	return (s);
}

/* JSON compact, base64url'd. */
static char *
b64url_json(json_t *j)
{
	char *text, *s;

	if ((text = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER)) == NULL)
		return (NULL);
	s = b64url(text, strlen(text));
	free(text);
	return (s);
}

/*
 * A server's words, fit for a message: at most REASON_MAX bytes, without
 * C0 or C1 control characters (no terminal escapes, no forged log lines).
 * jansson has checked the UTF-8, so C1 is the pair 0xc2 0x80..0x9f.
 */
static void
clean(char *out, size_t outlen, const char *in)
{
	const unsigned char *p = (const unsigned char *)in;
	size_t n = 0;

	for (; *p != '\0' && n + 4 < outlen && n < REASON_MAX; p++) {
		if (*p < 0x20 || *p == 0x7f)
			continue;
		if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
			p++;
			continue;
		}
		out[n++] = (char)*p;
	}
	if (*p != '\0') {
		/* Cut: do not leave half a UTF-8 sequence before the dots. */
		while (n > 0 && ((unsigned char)out[n - 1] & 0xc0) == 0x80)
			n--;
		if (n > 0 && (unsigned char)out[n - 1] >= 0xc0)
			n--;
		memcpy(out + n, "...", 3);
		n += 3;
	}
	out[n] = '\0';
}

/*
 * A string member of a key file: SK_EFORMAT when it is there but not a
 * string, or when it is required and missing or empty; else *out is the
 * value (NULL or "" for an optional one that is absent or empty).
 */
static int
member(json_t *root, const char *name, int required, const char *file,
    const char **out, struct sk_error *err)
{
	json_t *v = json_object_get(root, name);

	*out = NULL;
	if (v == NULL || json_is_null(v)) {
		if (required)
			return (sk_error_set(err, SK_EFORMAT, "%s: no \"%s\"; "
			    "not a service-account key file", file, name));
		return (0);
	}
	if (!json_is_string(v))
		return (sk_error_set(err, SK_EFORMAT, "%s: \"%s\" is not a "
		    "string", file, name));
	*out = json_string_value(v);
	if (required && (*out)[0] == '\0')
		return (sk_error_set(err, SK_EFORMAT, "%s: \"%s\" is empty",
		    file, name));
	return (0);
}

/* A token_uri becomes a request: a file must not point it at file:// or
 * smuggle a header in with a newline. */
static int
uri_ok(const char *uri, const char *file, struct sk_error *err)
{
	const char *p;

	for (p = uri; *p > ' ' && *p != 0x7f; p++)
		;
	if ((strncmp(uri, "https://", 8) != 0 &&
	    strncmp(uri, "http://", 7) != 0) || *p != '\0')
		return (sk_error_set(err, SK_EFORMAT, "%s: \"token_uri\" is not "
		    "an http:// or https:// URL", file));
	return (0);
}

/* OpenSSL would ask on the terminal for an encrypted key's passphrase. */
static int
no_passphrase(char *buf, int size, int rwflag, void *u)
{
	return (-1);
}

/* ------------------------------------------------------------------------ */
/* the JWT assertion                                                        */

/*
 * RS256 over input (RFC 7518 section 3.3: RSASSA-PKCS1-v1_5 with SHA-256,
 * the default padding of an RSA EVP_PKEY), base64url'd into *sig64.
 */
static int
sign(const char *pem, size_t pemlen, const char *input, const char *file,
    char **sig64, struct sk_error *err)
{
	EVP_MD_CTX *md = NULL;
	EVP_PKEY *pkey = NULL;
	BIO *bio = NULL;
	unsigned char *sig = NULL;
	size_t siglen = 0;
	int rc = 0;

	*sig64 = NULL;
	if (pemlen > (size_t)KEY_MAX_BYTES ||
	    (bio = BIO_new_mem_buf(pem, (int)pemlen)) == NULL) {
		rc = sk_error_set(err, SK_ENOMEM, "out of memory");
		goto out;
	}
	if ((pkey = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase,
	    NULL)) == NULL) {
		rc = sk_error_set(err, SK_EFORMAT, "%s: \"private_key\" is not "
		    "an unencrypted PEM private key", file);
		goto out;
	}
	if (EVP_PKEY_base_id(pkey) != EVP_PKEY_RSA) {
		rc = sk_error_set(err, SK_EACCES, "%s: \"private_key\" is not "
		    "an RSA key; Google's JWT assertions are RS256", file);
		goto out;
	}
	if ((md = EVP_MD_CTX_new()) == NULL) {
		rc = sk_error_set(err, SK_ENOMEM, "out of memory");
		goto out;
	}
	if (EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, pkey) != 1 ||
	    EVP_DigestSignUpdate(md, input, strlen(input)) != 1 ||
	    EVP_DigestSignFinal(md, NULL, &siglen) != 1 ||
	    (sig = malloc(siglen)) == NULL ||
	    EVP_DigestSignFinal(md, sig, &siglen) != 1) {
		rc = sk_error_set(err, SK_EACCES, "%s: cannot sign with "
		    "\"private_key\" (RS256)", file);
		goto out;
	}
	if ((*sig64 = b64url(sig, siglen)) == NULL)
		rc = sk_error_set(err, SK_ENOMEM, "out of memory");
out:
	/* The key's numbers are cleared by EVP_PKEY_free (BN_clear_free). */
	EVP_MD_CTX_free(md);
	EVP_PKEY_free(pkey);
	BIO_free(bio);
	free(sig);
	/* Leave no stale errors for the next TLS call on this thread. */
	if (rc != 0)
		ERR_clear_error();
	return (rc);
}

/* A credentials file's JSON object, what (a "credentials file") named in
 * the messages; *root NULL unless it is one. */
static int
load_object(const char *json, size_t len, const char *file,
    const char *what, json_t **root, struct sk_error *err)
{
	json_error_t jerr;

	*root = NULL;
	if (len > KEY_MAX_BYTES)
		return (sk_error_set(err, SK_ETOOBIG, "%s: %zu bytes; a %s is "
		    "at most %d", file, len, what, KEY_MAX_BYTES));
	if ((*root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr)) ==
	    NULL)
		return (sk_error_set(err, SK_EFORMAT, "%s: not JSON (line %d, "
		    "column %d)", file, jerr.line, jerr.column));
	if (!json_is_object(*root)) {
		json_decref(*root);
		*root = NULL;
		return (sk_error_set(err, SK_EFORMAT, "%s: not a JSON object; "
		    "not a %s", file, what));
	}
	return (0);
}

/*
 * Google, "Using OAuth 2.0 for Server to Server Applications": the header
 * {"alg":"RS256","typ":"JWT"} (with "kid", the key's id, when the file
 * has one) and the claims iss, scope, aud (the token URI), iat and exp.
 */
int
sk__gcs_jwt(const char *json, size_t len, const char *file,
    const char *scope, time_t now, char **jwt, char **token_uri,
    struct sk_error *err)
{
	json_t *root = NULL, *hdr = NULL, *claims = NULL;
	const char *type, *email, *pem = NULL, *uri, *kid;
	char *hdr64 = NULL, *claims64 = NULL, *input = NULL, *sig64 = NULL;
	char why[REASON_MAX + 4];
	size_t pemlen = 0;
	int rc;

	*jwt = NULL;
	*token_uri = NULL;
	if (file == NULL)
		file = "service-account key";
	if (scope == NULL || scope[0] == '\0')
		return (sk_error_set(err, SK_EINVAL, "%s: no OAuth scope to ask "
		    "for", file));
	if ((rc = load_object(json, len, file, "service-account key file",
	    &root, err)) != 0)
		goto out;
	if ((rc = member(root, "type", 1, file, &type, err)) != 0)
		goto out;
	if (strcmp(type, "service_account") != 0) {
		/* "authorized_user", "external_account": real credentials,
		 * but not ones that sign their own assertions. */
		clean(why, sizeof why, type);
		rc = sk_error_set(err, SK_EACCES, "%s: \"type\" is \"%s\", not "
		    "\"service_account\"", file, why);
		goto out;
	}
	if ((rc = member(root, "client_email", 1, file, &email, err)) != 0 ||
	    (rc = member(root, "private_key", 1, file, &pem, err)) != 0 ||
	    (rc = member(root, "token_uri", 0, file, &uri, err)) != 0 ||
	    (rc = member(root, "private_key_id", 0, file, &kid, err)) != 0)
		goto out;
	pemlen = json_string_length(json_object_get(root, "private_key"));
	if (uri == NULL || uri[0] == '\0')
		uri = TOKEN_URI_DEFAULT;
	if ((rc = uri_ok(uri, file, err)) != 0)
		goto out;

	hdr = json_pack("{s:s, s:s}", "alg", "RS256", "typ", "JWT");
	claims = json_pack("{s:s, s:s, s:s, s:I, s:I}", "iss", email,
	    "scope", scope, "aud", uri, "iat", (json_int_t)now,
	    "exp", (json_int_t)now + JWT_LIFETIME);
	if (hdr == NULL || claims == NULL || (kid != NULL && kid[0] != '\0' &&
	    json_object_set_new(hdr, "kid", json_string(kid)) != 0)) {
		/* Strings from json_loadb are UTF-8, so only the scope can
		 * make json_pack fail for other than memory. */
		rc = sk_error_set(err, SK_EINVAL, "%s: cannot build the JWT "
		    "(out of memory, or a scope that is not UTF-8)", file);
		goto out;
	}
	if ((hdr64 = b64url_json(hdr)) == NULL ||
	    (claims64 = b64url_json(claims)) == NULL ||
	    (input = sk__asprintf("%s.%s", hdr64, claims64)) == NULL) {
		rc = sk_error_set(err, SK_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = sign(pem, pemlen, input, file, &sig64, err)) != 0)
		goto out;
	if ((*jwt = sk__asprintf("%s.%s", input, sig64)) == NULL ||
	    (*token_uri = strdup(uri)) == NULL) {
		free(*jwt);
		*jwt = NULL;
		rc = sk_error_set(err, SK_ENOMEM, "out of memory");
	}
out:
	/* jansson's copy of the PEM is ours to wipe; the caller's buffer
	 * (json) is the caller's. */
	if (pem != NULL)
		OPENSSL_cleanse((void *)pem, pemlen);
	json_decref(root);
	json_decref(hdr);
	json_decref(claims);
	free(hdr64);
	free(claims64);
	free(input);
	free(sig64);
	return (rc);
}

/* ------------------------------------------------------------------------ */
/* gcloud's authorized_user, and either kind of file                        */

/* A member of an authorized_user file: a non-empty string. */
static int
user_member(json_t *root, const char *name, const char *file,
    const char **out, struct sk_error *err)
{
	json_t *v = json_object_get(root, name);

	*out = json_string_value(v);
	if (v == NULL || json_is_null(v))
		return (sk_error_set(err, SK_EFORMAT, "%s: no \"%s\"; not "
		    "gcloud's authorized_user credentials", file, name));
	if (*out == NULL)
		return (sk_error_set(err, SK_EFORMAT, "%s: \"%s\" is not a "
		    "string", file, name));
	if ((*out)[0] == '\0')
		return (sk_error_set(err, SK_EFORMAT, "%s: \"%s\" is empty",
		    file, name));
	return (0);
}

/* jansson's copy of a secret member, wiped before it goes back. */
static void
wipe_member(json_t *root, const char *name)
{
	json_t *v = json_object_get(root, name);

	if (json_is_string(v))
		OPENSSL_cleanse((void *)json_string_value(v),
		    json_string_length(v));
}

/* An escaped secret, wiped and freed. */
static void
free_secret(char *s)
{
	if (s != NULL)
		OPENSSL_cleanse(s, strlen(s));
	free(s);
}

/*
 * RFC 6749 section 6 as Google's libraries send it for the
 * application-default credentials "gcloud auth application-default login"
 * writes: {"type": "authorized_user", "client_id", "client_secret",
 * "refresh_token"[, "quota_project_id", "token_uri"]}.
 */
static int
user_grant(json_t *root, const char *file, char **body, char **token_uri,
    char **quota, struct sk_error *err)
{
	const char *id, *secret, *refresh, *uri, *qp;
	char *eid = NULL, *esecret = NULL, *erefresh = NULL;
	json_t *v;
	int rc;

	if ((rc = user_member(root, "client_id", file, &id, err)) != 0 ||
	    (rc = user_member(root, "client_secret", file, &secret,
	    err)) != 0 ||
	    (rc = user_member(root, "refresh_token", file, &refresh,
	    err)) != 0 || (rc = member(root, "token_uri", 0, file, &uri,
	    err)) != 0 || (rc = member(root, "quota_project_id", 0, file, &qp,
	    err)) != 0)
		return (rc);
	if (uri == NULL || uri[0] == '\0')
		uri = TOKEN_URI_DEFAULT;
	if ((rc = uri_ok(uri, file, err)) != 0)
		return (rc);
	/* It goes into an x-goog-user-project header: a project id is
	 * lower-case letters, digits and '-', 30 at most; allow a little
	 * more, but nothing that could break the header. */
	if (qp != NULL && qp[0] != '\0') {
		if ((v = json_object_get(root, "quota_project_id")) == NULL ||
		    json_string_length(v) > 100 ||
		    strspn(qp, "abcdefghijklmnopqrstuvwxyz"
		    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:") !=
		    json_string_length(v))
			return (sk_error_set(err, SK_EFORMAT, "%s: "
			    "\"quota_project_id\" is not a project id", file));
	} else
		qp = NULL;
	/* application/x-www-form-urlencoded: every byte but the unreserved
	 * ones as %XX. */
	if ((eid = sk__uri_escape(id, 0)) == NULL ||
	    (esecret = sk__uri_escape(secret, 0)) == NULL ||
	    (erefresh = sk__uri_escape(refresh, 0)) == NULL ||
	    (*body = sk__asprintf("grant_type=refresh_token&client_id=%s&"
	    "client_secret=%s&refresh_token=%s", eid, esecret,
	    erefresh)) == NULL ||
	    (*token_uri = strdup(uri)) == NULL ||
	    (qp != NULL && (*quota = strdup(qp)) == NULL)) {
		free_secret(*body);
		free(*token_uri);
		*body = *token_uri = NULL;
		rc = sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	free(eid);
	free_secret(esecret);
	free_secret(erefresh);
	return (rc);
}

int
sk__gcs_grant(const char *json, size_t len, const char *file,
    const char *scope, time_t now, char **body, char **token_uri,
    char **quota, int *user, struct sk_error *err)
{
	json_t *root;
	const char *type;
	char *jwt = NULL, why[REASON_MAX + 4];
	int rc;

	*body = *token_uri = *quota = NULL;
	*user = 0;
	if (file == NULL)
		file = "credentials file";
	if ((rc = load_object(json, len, file, "credentials file", &root,
	    err)) != 0)
		goto out;
	if ((rc = member(root, "type", 1, file, &type, err)) != 0)
		goto out;
	if (strcmp(type, "authorized_user") == 0) {
		*user = 1;
		rc = user_grant(root, file, body, token_uri, quota, err);
		goto out;
	}
	if (strcmp(type, "service_account") != 0) {
		/* "external_account", "impersonated_service_account": they
		 * need more than one request; said plainly. */
		clean(why, sizeof why, type);
		rc = sk_error_set(err, SK_EACCES, "%s: \"type\" is \"%s\"; "
		    "shardkit takes \"service_account\" and "
		    "\"authorized_user\" files", file, why);
		goto out;
	}
	if ((rc = sk__gcs_jwt(json, len, file, scope, now, &jwt, token_uri,
	    err)) != 0)
		goto out;
	/* RFC 7523 section 2.1. */
	*body = sk__asprintf("grant_type=urn%%3Aietf%%3Aparams%%3Aoauth%%3A"
	    "grant-type%%3Ajwt-bearer&assertion=%s", jwt);
	/* It buys tokens for an hour. */
	free_secret(jwt);
	if (*body == NULL) {
		free(*token_uri);
		*token_uri = NULL;
		rc = sk_error_set(err, SK_ENOMEM, "out of memory");
	}
out:
	if (root != NULL) {
		wipe_member(root, "private_key");
		wipe_member(root, "client_secret");
		wipe_member(root, "refresh_token");
	}
	json_decref(root);
	return (rc);
}

/* ------------------------------------------------------------------------ */
/* the token response                                                       */

/*
 * RFC 6749 section 5.1: {"access_token", "token_type", "expires_in"}; 5.2:
 * {"error", "error_description"} (Google's metadata server and some
 * proxies put an object {"code", "message"} in "error" instead).
 */
int
sk__oauth_parse(const char *body, size_t len, const char *from,
    char **token, long *expires_in, struct sk_error *err)
{
	json_t *root, *v;
	json_error_t jerr;
	const char *s, *desc;
	char why[REASON_MAX + 4], what[REASON_MAX + 4];
	const unsigned char *p;
	size_t n;
	json_int_t e;
	int rc = 0;

	*token = NULL;
	*expires_in = 0;
	if (from == NULL)
		from = "token endpoint";
	if (len > RESPONSE_MAX_BYTES)
		return (sk_error_set(err, SK_ETOOBIG, "%s: a %zu-byte token "
		    "response; at most %d", from, len, RESPONSE_MAX_BYTES));
	root = json_loadb(body, len, 0, &jerr);
	if (root == NULL || !json_is_object(root)) {
		rc = sk_error_set(err, SK_EFORMAT, "%s: the token response is "
		    "not a JSON object", from);
		goto out;
	}

	if ((v = json_object_get(root, "error")) != NULL && !json_is_null(v)) {
		s = json_string_value(v);
		if (json_is_object(v))
			s = json_string_value(json_object_get(v, "message"));
		desc = json_string_value(json_object_get(root,
		    "error_description"));
		clean(what, sizeof what, s != NULL ? s : "(no reason given)");
		clean(why, sizeof why, desc != NULL ? desc : "");
		rc = sk_error_set(err, SK_EACCES, "%s: refused: %s%s%s", from,
		    what, why[0] != '\0' ? ": " : "", why);
		goto out;
	}

	v = json_object_get(root, "access_token");
	if (!json_is_string(v) || json_string_length(v) == 0) {
		rc = sk_error_set(err, SK_EFORMAT, "%s: no \"access_token\" "
		    "in the token response", from);
		goto out;
	}
	n = json_string_length(v);
	if (n > TOKEN_MAX_BYTES) {
		rc = sk_error_set(err, SK_ETOOBIG, "%s: a %zu-byte access "
		    "token; at most %d", from, n, TOKEN_MAX_BYTES);
		goto out;
	}
	/* It goes into an Authorization header: RFC 6750's b64token is
	 * narrower still, but no space, control or non-ASCII byte at all. */
	for (p = (const unsigned char *)json_string_value(v); n > 0; p++, n--) {
		if (*p <= ' ' || *p >= 0x7f) {
			rc = sk_error_set(err, SK_EFORMAT, "%s: the access token "
			    "has a byte that is not printable ASCII", from);
			goto out;
		}
	}

	if ((v = json_object_get(root, "token_type")) != NULL &&
	    !json_is_null(v)) {
		if ((s = json_string_value(v)) == NULL) {
			rc = sk_error_set(err, SK_EFORMAT, "%s: \"token_type\" "
			    "is not a string", from);
			goto out;
		}
		/* RFC 6749 section 5.1: the type is case-insensitive. */
		if (strcasecmp(s, "Bearer") != 0) {
			clean(what, sizeof what, s);
			rc = sk_error_set(err, SK_EFORMAT, "%s: token_type "
			    "\"%s\", not Bearer", from, what);
			goto out;
		}
	}

	if ((v = json_object_get(root, "expires_in")) == NULL ||
	    json_is_null(v))
		e = EXPIRES_DEFAULT;
	else if (!json_is_integer(v)) {
		rc = sk_error_set(err, SK_EFORMAT, "%s: \"expires_in\" is not "
		    "an integer", from);
		goto out;
	} else if ((e = json_integer_value(v)) <= 0) {
		rc = sk_error_set(err, SK_EFORMAT, "%s: \"expires_in\" is %lld; "
		    "a token must live a second at least", from, (long long)e);
		goto out;
	}
	if ((*token = strdup(json_string_value(json_object_get(root,
	    "access_token")))) == NULL) {
		rc = sk_error_set(err, SK_ENOMEM, "out of memory");
		goto out;
	}
	/* Ask again within a week whatever the server says. */
	*expires_in = e > EXPIRES_MAX ? EXPIRES_MAX : (long)e;
out:
	/* jansson's copy of the token: wipe it before it goes back to
	 * malloc. */
	if (root != NULL && (v = json_object_get(root, "access_token")) != NULL &&
	    json_is_string(v))
		OPENSSL_cleanse((void *)json_string_value(v),
		    json_string_length(v));
	json_decref(root);
	return (rc);
}
