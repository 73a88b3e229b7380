/*
 * test_gcs_jwt.c - service-account key files to RS256 JWT assertions,
 * gcloud's authorized_user files to refresh_token grants, and
 * OAuth2 token responses to tokens (lib/gcs_jwt.c). Keys are made here,
 * and each JWT is checked with the public half, as Google's endpoint would.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include "harness.h"
#include "cloud.h"

#define SCOPE	"https://www.googleapis.com/auth/devstorage.read_only"
#define EMAIL	"loader@shardkit-test.iam.gserviceaccount.com"
#define NOW	((time_t)1700000000)

/* ------------------------------------------------------------------------ */
/* keys and key files                                                       */

static EVP_PKEY *
make_key(int type)
{
	EVP_PKEY_CTX *ctx;
	EVP_PKEY *pkey = NULL;

	if ((ctx = EVP_PKEY_CTX_new_id(type, NULL)) == NULL ||
	    EVP_PKEY_keygen_init(ctx) != 1)
		t_fail(__FILE__, __LINE__, "cannot start a key generation");
	if (type == EVP_PKEY_RSA &&
	    EVP_PKEY_CTX_set_rsa_keygen_bits(ctx, 2048) != 1)
		t_fail(__FILE__, __LINE__, "cannot ask for 2048 bits");
	if (type == EVP_PKEY_EC &&
	    EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx,
	    NID_X9_62_prime256v1) != 1)
		t_fail(__FILE__, __LINE__, "cannot ask for P-256");
	if (EVP_PKEY_keygen(ctx, &pkey) != 1)
		t_fail(__FILE__, __LINE__, "key generation failed");
	EVP_PKEY_CTX_free(ctx);
	return (pkey);
}

/* The private key as PEM PKCS#8 ("BEGIN PRIVATE KEY"), as Google writes
 * it; malloc'd. */
static char *
pem_of(EVP_PKEY *pkey)
{
	BIO *bio = BIO_new(BIO_s_mem());
	char *data, *s;
	long n;

	if (bio == NULL || PEM_write_bio_PKCS8PrivateKey(bio, pkey, NULL, NULL,
	    0, NULL, NULL) != 1)
		t_fail(__FILE__, __LINE__, "cannot write the key as PEM");
	n = BIO_get_mem_data(bio, &data);
	if ((s = malloc((size_t)n + 1)) == NULL)
		t_fail(__FILE__, __LINE__, "out of memory");
	memcpy(s, data, (size_t)n);
	s[n] = '\0';
	BIO_free(bio);
	return (s);
}

/* A key file as the Cloud console writes one. */
static json_t *
key_json(const char *pem, const char *token_uri)
{
	json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}",
	    "type", "service_account",
	    "project_id", "shardkit-test",
	    "private_key_id", "0123456789abcdef0123456789abcdef01234567",
	    "private_key", pem,
	    "client_email", EMAIL,
	    "client_id", "123456789012345678901");

	if (j == NULL)
		t_fail(__FILE__, __LINE__, "json_pack failed");
	if (token_uri != NULL)
		json_object_set_new(j, "token_uri", json_string(token_uri));
	return (j);
}

/* Write j to sa.json, read it back, and run sk__gcs_jwt on it. */
static int
jwt_of(json_t *j, char **jwt, char **uri, struct sk_error *err)
{
	char *text;
	size_t len;
	int rc;

	if ((text = json_dumps(j, JSON_INDENT(2))) == NULL)
		t_fail(__FILE__, __LINE__, "json_dumps failed");
	t_write_file(t_path("sa.json"), text, strlen(text));
	free(text);
	text = t_read_file(t_path("sa.json"), &len);
	rc = sk__gcs_jwt(text, len, t_path("sa.json"), SCOPE, NOW, jwt, uri,
	    err);
	free(text);
	return (rc);
}

/* A failure message names the file and quotes no key. */
static void
check_clean(const char *msg, const char *pem)
{
	char frag[33];

	CHECK_CONTAINS(msg, "sa.json");
	CHECK(strstr(msg, "PRIVATE KEY") == NULL);
	if (pem != NULL && strlen(pem) > 200) {
		/* 32 characters from the middle of the base64 body */
		memcpy(frag, pem + 100, 32);
		frag[32] = '\0';
		CHECK(strstr(msg, frag) == NULL);
	}
}

/* ------------------------------------------------------------------------ */
/* taking a JWT apart                                                       */

static size_t
b64url_decode(const char *s, size_t n, unsigned char *out)
{
	static const char tab[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	uint32_t v = 0;
	size_t i, bits = 0, o = 0;
	const char *c;

	for (i = 0; i < n; i++) {
		if (s[i] == '\0' || (c = strchr(tab, s[i])) == NULL)
			t_fail(__FILE__, __LINE__, "'%c' is not base64url "
			    "(padding or + / are not either)", s[i]);
		v = v << 6 | (uint32_t)(c - tab);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (unsigned char)(v >> bits);
		}
	}
	return (o);
}

/* The three parts: a JSON header, JSON claims, a signature. */
struct parts {
	json_t *hdr;
	json_t *claims;
	unsigned char sig[1024];
	size_t siglen;
	size_t signed_len;	/* of "header.claims" */
};

static void
split(const char *jwt, struct parts *p)
{
	const char *d1, *d2;
	unsigned char buf[4096];
	json_error_t jerr;
	size_t n;

	d1 = strchr(jwt, '.');
	d2 = d1 != NULL ? strchr(d1 + 1, '.') : NULL;
	if (d1 == NULL || d2 == NULL || strchr(d2 + 1, '.') != NULL)
		t_fail(__FILE__, __LINE__, "not three parts: %s", jwt);
	if ((size_t)(d1 - jwt) > sizeof buf * 4 / 3 ||
	    (size_t)(d2 - d1) > sizeof buf * 4 / 3 ||
	    strlen(d2 + 1) > sizeof p->sig * 4 / 3)
		t_fail(__FILE__, __LINE__, "a part is too long");
	n = b64url_decode(jwt, (size_t)(d1 - jwt), buf);
	if ((p->hdr = json_loadb((char *)buf, n, 0, &jerr)) == NULL)
		t_fail(__FILE__, __LINE__, "header: %s", jerr.text);
	n = b64url_decode(d1 + 1, (size_t)(d2 - d1 - 1), buf);
	if ((p->claims = json_loadb((char *)buf, n, 0, &jerr)) == NULL)
		t_fail(__FILE__, __LINE__, "claims: %s", jerr.text);
	p->siglen = b64url_decode(d2 + 1, strlen(d2 + 1), p->sig);
	p->signed_len = (size_t)(d2 - jwt);
}

/* RS256: RSASSA-PKCS1-v1_5 over SHA-256 of "header.claims". */
static int
verify(EVP_PKEY *pub, const char *jwt, const struct parts *p)
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	int ok;

	ok = md != NULL &&
	    EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, pub) == 1 &&
	    EVP_DigestVerifyUpdate(md, jwt, p->signed_len) == 1 &&
	    EVP_DigestVerifyFinal(md, p->sig, p->siglen) == 1;
	EVP_MD_CTX_free(md);
	return (ok);
}

/* The public half alone, through PEM, as the endpoint would hold it. */
static EVP_PKEY *
public_of(EVP_PKEY *pkey)
{
	BIO *bio = BIO_new(BIO_s_mem());
	EVP_PKEY *pub;

	if (bio == NULL || PEM_write_bio_PUBKEY(bio, pkey) != 1 ||
	    (pub = PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL)) == NULL)
		t_fail(__FILE__, __LINE__, "cannot take the public key");
	BIO_free(bio);
	return (pub);
}

static const char *
str(json_t *o, const char *k)
{
	return (json_string_value(json_object_get(o, k)));
}

/* ------------------------------------------------------------------------ */
/* sk__gcs_jwt                                                              */

TEST(gcs_jwt_signs)
{
	struct sk_error err = { 0 };
	EVP_PKEY *pkey = make_key(EVP_PKEY_RSA), *pub = public_of(pkey);
	char *pem = pem_of(pkey), *jwt, *uri;
	json_t *j = key_json(pem, "http://127.0.0.1:8080/token");
	struct parts p;

	CHECK_OK(jwt_of(j, &jwt, &uri, &err), &err);
	CHECK_EQ_STR(uri, "http://127.0.0.1:8080/token");
	split(jwt, &p);
	CHECK(verify(pub, jwt, &p));

	CHECK_EQ_STR(str(p.hdr, "alg"), "RS256");
	CHECK_EQ_STR(str(p.hdr, "typ"), "JWT");
	CHECK_EQ_STR(str(p.hdr, "kid"),
	    "0123456789abcdef0123456789abcdef01234567");
	CHECK_EQ_INT(json_object_size(p.hdr), 3);

	CHECK_EQ_STR(str(p.claims, "iss"), EMAIL);
	CHECK_EQ_STR(str(p.claims, "scope"), SCOPE);
	CHECK_EQ_STR(str(p.claims, "aud"), "http://127.0.0.1:8080/token");
	CHECK(json_is_integer(json_object_get(p.claims, "iat")));
	CHECK(json_is_integer(json_object_get(p.claims, "exp")));
	CHECK_EQ_INT(json_integer_value(json_object_get(p.claims, "iat")),
	    NOW);
	CHECK_EQ_INT(json_integer_value(json_object_get(p.claims, "exp")),
	    NOW + 3600);
	CHECK_EQ_INT(json_object_size(p.claims), 5);

	/* The check above can fail: one changed byte breaks it. */
	jwt[p.signed_len - 2] ^= 1;
	CHECK(!verify(pub, jwt, &p));

	json_decref(p.hdr);
	json_decref(p.claims);
	json_decref(j);
	free(jwt);
	free(uri);
	free(pem);
	EVP_PKEY_free(pkey);
	EVP_PKEY_free(pub);
}

TEST(gcs_jwt_defaults)
{
	struct sk_error err = { 0 };
	EVP_PKEY *pkey = make_key(EVP_PKEY_RSA);
	char *pem = pem_of(pkey), *jwt, *uri;
	json_t *j = key_json(pem, NULL);
	struct parts p;

	/* No token_uri: Google's; no private_key_id: no "kid". */
	json_object_del(j, "private_key_id");
	CHECK_OK(jwt_of(j, &jwt, &uri, &err), &err);
	CHECK_EQ_STR(uri, "https://oauth2.googleapis.com/token");
	split(jwt, &p);
	CHECK(verify(pkey, jwt, &p));
	CHECK(json_object_get(p.hdr, "kid") == NULL);
	CHECK_EQ_STR(str(p.claims, "aud"), "https://oauth2.googleapis.com/token");
	json_decref(p.hdr);
	json_decref(p.claims);
	free(jwt);
	free(uri);
	json_decref(j);
	free(pem);
	EVP_PKEY_free(pkey);
}

TEST(gcs_jwt_pkcs1_key)
{
	struct sk_error err = { 0 };
	EVP_PKEY *pkey = make_key(EVP_PKEY_RSA);
	BIO *bio = BIO_new(BIO_s_mem());
	char *data, *pem, *jwt, *uri;
	json_t *j;
	struct parts p;
	long n;

	/* Older keys and openssl genrsa: "BEGIN RSA PRIVATE KEY". */
	CHECK(PEM_write_bio_PrivateKey_traditional(bio, pkey, NULL, NULL, 0,
	    NULL, NULL) == 1);
	n = BIO_get_mem_data(bio, &data);
	pem = strndup(data, (size_t)n);
	CHECK_CONTAINS(pem, "BEGIN RSA PRIVATE KEY");
	j = key_json(pem, NULL);
	CHECK_OK(jwt_of(j, &jwt, &uri, &err), &err);
	split(jwt, &p);
	CHECK(verify(pkey, jwt, &p));
	json_decref(p.hdr);
	json_decref(p.claims);
	json_decref(j);
	free(jwt);
	free(uri);
	free(pem);
	BIO_free(bio);
	EVP_PKEY_free(pkey);
}

TEST(gcs_jwt_not_json)
{
	struct sk_error err = { 0 };
	const char *bad[] = {
		"", "not json", "{\"type\": \"service_account\",",
		"[\"service_account\"]",
		/* Duplicates: which private_key would be meant? */
		"{\"type\": \"service_account\", \"type\": \"service_account\"}",
	};
	char *jwt = (char *)1, *uri = (char *)1;
	const char *msg;
	size_t i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		msg = CHECK_ERR(sk__gcs_jwt(bad[i], strlen(bad[i]),
		    "/keys/sa.json", SCOPE, NOW, &jwt, &uri, &err),
		    SK_EFORMAT, &err);
		CHECK_CONTAINS(msg, "/keys/sa.json");
		CHECK(jwt == NULL && uri == NULL);
	}
}

TEST(gcs_jwt_quotes_no_key)
{
	struct sk_error err = { 0 };
	const char *text = "{\"type\": \"service_account\", \"private_key\": "
	    "\"-----BEGIN PRIVATE KEY-----\\nMIIEvSECRET\\q\"}";
	char *jwt, *uri;
	const char *msg;

	/* jansson's message would quote the bad escape and what is near. */
	msg = CHECK_ERR(sk__gcs_jwt(text, strlen(text), "sa.json", SCOPE, NOW,
	    &jwt, &uri, &err), SK_EFORMAT, &err);
	check_clean(msg, NULL);
	CHECK(strstr(msg, "SECRET") == NULL);
}

TEST(gcs_jwt_wrong_type)
{
	struct sk_error err = { 0 };
	json_t *j = key_json("unused", NULL);
	char *jwt, *uri;
	const char *msg;

	json_object_set_new(j, "type", json_string("authorized_user"));
	msg = CHECK_ERR(jwt_of(j, &jwt, &uri, &err), SK_EACCES, &err);
	check_clean(msg, NULL);
	CHECK_CONTAINS(msg, "authorized_user");
	CHECK_CONTAINS(msg, "service_account");

	json_object_del(j, "type");
	msg = CHECK_ERR(jwt_of(j, &jwt, &uri, &err), SK_EFORMAT, &err);
	CHECK_CONTAINS(msg, "\"type\"");

	/* A type with a terminal escape in it is shown without. */
	json_object_set_new(j, "type", json_string("x\033[2Jy\r\n"));
	msg = CHECK_ERR(jwt_of(j, &jwt, &uri, &err), SK_EACCES, &err);
	CHECK_CONTAINS(msg, "\"x[2Jy\"");
	json_decref(j);
}

/* gcloud's authorized_user: the refresh_token grant, form-encoded. */
TEST(gcs_grant_authorized_user)
{
	struct sk_error err = { 0 };
	const char *good = "{\"type\": \"authorized_user\", \"client_id\": "
	    "\"1-x.apps.googleusercontent.com\", \"client_secret\": "
	    "\"GOCSPX-s+e/c=r&t\", \"refresh_token\": \"1//0gREFRESH\", "
	    "\"quota_project_id\": \"proj-1\"}";
	const char *fields[] = { "client_id", "client_secret",
	    "refresh_token" };
	char *body, *uri, *quota;
	const char *msg;
	json_t *j;
	char *text;
	size_t i;
	int user;

	CHECK(sk__gcs_grant(good, strlen(good), "adc.json", SCOPE, NOW, &body,
	    &uri, &quota, &user, &err) == 0);
	CHECK(user == 1);
	CHECK(strcmp(body, "grant_type=refresh_token&client_id="
	    "1-x.apps.googleusercontent.com&client_secret=GOCSPX-s%2Be%2Fc%3Dr"
	    "%26t&refresh_token=1%2F%2F0gREFRESH") == 0);
	CHECK(strcmp(uri, "https://oauth2.googleapis.com/token") == 0);
	CHECK(quota != NULL && strcmp(quota, "proj-1") == 0);
	free(body);
	free(uri);
	free(quota);

	/* Each secret missing in turn: the field and the file, no value. */
	for (i = 0; i < 3; i++) {
		j = json_loads(good, 0, NULL);
		json_object_del(j, fields[i]);
		text = json_dumps(j, 0);
		msg = CHECK_ERR(sk__gcs_grant(text, strlen(text), "adc.json",
		    SCOPE, NOW, &body, &uri, &quota, &user, &err), SK_EFORMAT,
		    &err);
		CHECK_CONTAINS(msg, "adc.json");
		CHECK_CONTAINS(msg, fields[i]);
		CHECK(strstr(msg, "GOCSPX") == NULL);
		CHECK(strstr(msg, "REFRESH") == NULL);
		CHECK(body == NULL && uri == NULL && quota == NULL);
		free(text);
		json_decref(j);
	}

	/* A quota project that would break its header. */
	j = json_loads(good, 0, NULL);
	json_object_set_new(j, "quota_project_id", json_string("p\r\nX: y"));
	text = json_dumps(j, 0);
	msg = CHECK_ERR(sk__gcs_grant(text, strlen(text), "adc.json", SCOPE,
	    NOW, &body, &uri, &quota, &user, &err), SK_EFORMAT, &err);
	CHECK_CONTAINS(msg, "quota_project_id");
	free(text);
	json_decref(j);

	/* Another kind of credentials: named, refused. */
	text = strdup("{\"type\": \"external_account\"}");
	msg = CHECK_ERR(sk__gcs_grant(text, strlen(text), "adc.json", SCOPE, NOW, &body, &uri, &quota, &user, &err),
	    SK_EACCES, &err);
	CHECK_CONTAINS(msg, "external_account");
	free(text);
}

TEST(gcs_jwt_missing_fields)
{
	struct sk_error err = { 0 };
	const char *fields[] = { "private_key", "client_email" };
	char *jwt, *uri;
	const char *msg;
	json_t *j;
	size_t i;

	for (i = 0; i < 2; i++) {
		j = key_json("-----BEGIN PRIVATE KEY-----\nAAAA\n"
		    "-----END PRIVATE KEY-----\n", NULL);
		json_object_del(j, fields[i]);
		msg = CHECK_ERR(jwt_of(j, &jwt, &uri, &err), SK_EFORMAT, &err);
		check_clean(msg, NULL);
		CHECK_CONTAINS(msg, fields[i]);

		json_object_set_new(j, fields[i], json_integer(7));
		msg = CHECK_ERR(jwt_of(j, &jwt, &uri, &err), SK_EFORMAT, &err);
		CHECK_CONTAINS(msg, fields[i]);

		json_object_set_new(j, fields[i], json_string(""));
		msg = CHECK_ERR(jwt_of(j, &jwt, &uri, &err), SK_EFORMAT, &err);
		CHECK_CONTAINS(msg, fields[i]);
		json_decref(j);
	}
}

TEST(gcs_jwt_key_not_pem)
{
	struct sk_error err = { 0 };
	EVP_PKEY *pkey = make_key(EVP_PKEY_RSA);
	char *pem = pem_of(pkey), *jwt, *uri, *cut;
	const char *msg;
	json_t *j;

	/* Base64 without the PEM lines around it. */
	cut = strdup(pem + strlen("-----BEGIN PRIVATE KEY-----\n"));
	*strstr(cut, "-----END") = '\0';
	j = key_json(cut, NULL);
	msg = CHECK_ERR(jwt_of(j, &jwt, &uri, &err), SK_EFORMAT, &err);
	check_clean(msg, pem);
	CHECK_CONTAINS(msg, "private_key");
	json_decref(j);

	/* Half a key. */
	free(cut);
	cut = strdup(pem);
	cut[strlen(cut) / 2] = '\0';
	j = key_json(cut, NULL);
	msg = CHECK_ERR(jwt_of(j, &jwt, &uri, &err), SK_EFORMAT, &err);
	check_clean(msg, pem);
	json_decref(j);

	/* An encrypted key fails at once; it must not ask on the tty. */
	{
		BIO *bio = BIO_new(BIO_s_mem());
		char *data, *enc;
		long n;

		CHECK(PEM_write_bio_PKCS8PrivateKey(bio, pkey,
		    EVP_aes_128_cbc(), NULL, 0, NULL, (void *)"pass") == 1);
		n = BIO_get_mem_data(bio, &data);
		enc = strndup(data, (size_t)n);
		j = key_json(enc, NULL);
		msg = CHECK_ERR(jwt_of(j, &jwt, &uri, &err), SK_EFORMAT, &err);
		check_clean(msg, enc);
		json_decref(j);
		free(enc);
		BIO_free(bio);
	}
	free(cut);
	free(pem);
	EVP_PKEY_free(pkey);
}

TEST(gcs_jwt_not_rsa)
{
	struct sk_error err = { 0 };
	EVP_PKEY *pkey = make_key(EVP_PKEY_EC);
	char *pem = pem_of(pkey), *jwt, *uri;
	json_t *j = key_json(pem, NULL);
	const char *msg;

	msg = CHECK_ERR(jwt_of(j, &jwt, &uri, &err), SK_EACCES, &err);
	check_clean(msg, pem);
	CHECK_CONTAINS(msg, "RSA");
	json_decref(j);
	free(pem);
	EVP_PKEY_free(pkey);
}

TEST(gcs_jwt_bad_token_uri)
{
	struct sk_error err = { 0 };
	const char *bad[] = { "file:///etc/passwd", "oauth2.googleapis.com",
	    "https://h/token\r\nX-Evil: 1", "https://h/a b", "" };
	char *jwt, *uri;
	const char *msg;
	json_t *j;
	size_t i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		j = key_json("unused", bad[i]);
		if (bad[i][0] == '\0')
			json_object_set_new(j, "token_uri", json_integer(1));
		msg = CHECK_ERR(jwt_of(j, &jwt, &uri, &err), SK_EFORMAT, &err);
		check_clean(msg, NULL);
		CHECK_CONTAINS(msg, "token_uri");
		json_decref(j);
	}
}

TEST(gcs_jwt_too_big)
{
	struct sk_error err = { 0 };
	size_t len = 64 * 1024 + 1;
	char *text = malloc(len), *jwt, *uri;
	const char *msg;

	memset(text, ' ', len);
	text[0] = '{';
	text[len - 1] = '}';
	msg = CHECK_ERR(sk__gcs_jwt(text, len, "sa.json", SCOPE, NOW, &jwt,
	    &uri, &err), SK_ETOOBIG, &err);
	CHECK_CONTAINS(msg, "sa.json");
	/* 64 KiB itself is not too big, only not a key. */
	CHECK_ERR(sk__gcs_jwt(text, len - 1, "sa.json", SCOPE, NOW, &jwt,
	    &uri, &err), SK_EFORMAT, &err);
	free(text);
}

/* ------------------------------------------------------------------------ */
/* sk__oauth_parse                                                          */

#define FROM	"http://127.0.0.1:1/token"

static int
parse(const char *body, char **token, long *exp, struct sk_error *err)
{
	return (sk__oauth_parse(body, strlen(body), FROM, token, exp, err));
}

TEST(gcs_oauth_good)
{
	struct sk_error err = { 0 };
	char *token;
	long exp;

	CHECK_OK(parse("{\"access_token\": \"ya29.a0Ad-_x.y~z/+=\", "
	    "\"expires_in\": 3599, \"token_type\": \"Bearer\"}", &token, &exp,
	    &err), &err);
	CHECK_EQ_STR(token, "ya29.a0Ad-_x.y~z/+=");
	CHECK_EQ_INT(exp, 3599);
	free(token);

	/* Defaults and case: no expires_in is an hour; "bearer" is Bearer. */
	CHECK_OK(parse("{\"access_token\": \"t\", \"token_type\": \"bearer\"}",
	    &token, &exp, &err), &err);
	CHECK_EQ_STR(token, "t");
	CHECK_EQ_INT(exp, 3600);
	free(token);
	CHECK_OK(parse("{\"access_token\": \"t\", \"scope\": \"x\"}", &token,
	    &exp, &err), &err);
	free(token);

	/* A year is a week: ask again within one. */
	CHECK_OK(parse("{\"access_token\": \"t\", \"expires_in\": 31536000}",
	    &token, &exp, &err), &err);
	CHECK_EQ_INT(exp, 7 * 86400);
	free(token);
}

TEST(gcs_oauth_bad)
{
	struct sk_error err = { 0 };
	const char *bad[] = {
		"", "<html>502 Bad Gateway</html>", "[]",
		"{\"expires_in\": 3600}",
		"{\"access_token\": \"\"}",
		"{\"access_token\": 12}",
		"{\"access_token\": \"t\", \"expires_in\": 0}",
		"{\"access_token\": \"t\", \"expires_in\": -5}",
		"{\"access_token\": \"t\", \"expires_in\": \"3600\"}",
		"{\"access_token\": \"t\", \"expires_in\": 1.5}",
		"{\"access_token\": \"t\", \"token_type\": \"MAC\"}",
		"{\"access_token\": \"t\", \"token_type\": 1}",
	};
	char *token = (char *)1;
	const char *msg;
	long exp = 1;
	size_t i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		msg = CHECK_ERR(parse(bad[i], &token, &exp, &err), SK_EFORMAT,
		    &err);
		CHECK_CONTAINS(msg, FROM);
		CHECK(token == NULL);
		CHECK_EQ_INT(exp, 0);
	}
}

TEST(gcs_oauth_error_body)
{
	struct sk_error err = { 0 };
	char body[2048], *token;
	const char *msg;
	long exp;

	msg = CHECK_ERR(parse("{\"error\": \"invalid_grant\", "
	    "\"error_description\": \"Invalid JWT Signature.\"}", &token, &exp,
	    &err), SK_EACCES, &err);
	CHECK_CONTAINS(msg, FROM);
	CHECK_CONTAINS(msg, "invalid_grant: Invalid JWT Signature.");

	msg = CHECK_ERR(parse("{\"error\": \"unauthorized_client\"}", &token,
	    &exp, &err), SK_EACCES, &err);
	CHECK_CONTAINS(msg, "unauthorized_client");

	/* Google APIs' own shape. */
	msg = CHECK_ERR(parse("{\"error\": {\"code\": 403, \"message\": "
	    "\"Forbidden\"}}", &token, &exp, &err), SK_EACCES, &err);
	CHECK_CONTAINS(msg, "Forbidden");

	/* The server's words are cut at 200 bytes and lose their controls;
	 * a token next to an error stays out of the message. */
	snprintf(body, sizeof body, "{\"error\": \"bad\\u001b[31m\\r\\nFAKE "
	    "LOG LINE\\u0085\", \"access_token\": \"SECRETTOKEN\", "
	    "\"error_description\": \"%0500d\"}", 7);
	msg = CHECK_ERR(parse(body, &token, &exp, &err), SK_EACCES, &err);
	CHECK_CONTAINS(msg, "bad[31mFAKE LOG LINE: 0000");
	CHECK(strstr(msg, "SECRETTOKEN") == NULL);
	CHECK(strchr(msg, '\033') == NULL && strchr(msg, '\n') == NULL);
	CHECK(strstr(msg, "\xc2\x85") == NULL);
	CHECK(strlen(msg) < strlen(FROM) + 2 * 200 + 30);
	CHECK_CONTAINS(msg, "...");
}

TEST(gcs_oauth_token_bytes)
{
	struct sk_error err = { 0 };
	const char *bad[] = { "a b", "a\\tb", "a\\r\\nX-Evil: 1", "caf\\u00e9",
	    "a\\u007fb" };
	char body[64], *token;
	const char *msg;
	long exp;
	size_t i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(body, sizeof body, "{\"access_token\": \"%s\"}",
		    bad[i]);
		msg = CHECK_ERR(parse(body, &token, &exp, &err), SK_EFORMAT,
		    &err);
		CHECK_CONTAINS(msg, FROM);
		CHECK(strstr(msg, "X-Evil") == NULL);
	}
}

TEST(gcs_oauth_huge_token)
{
	struct sk_error err = { 0 };
	size_t n = 8192, len;
	char *body = malloc(n + 64), *token;
	const char *msg;
	long exp;

	/* 8 KiB is the most. */
	len = (size_t)sprintf(body, "{\"access_token\": \"");
	memset(body + len, 'A', n);
	strcpy(body + len + n, "\"}");
	CHECK_OK(parse(body, &token, &exp, &err), &err);
	CHECK_EQ_INT(strlen(token), n);
	free(token);

	memset(body + len, 'A', n);
	strcpy(body + len + n, "A\"}");
	msg = CHECK_ERR(parse(body, &token, &exp, &err), SK_ETOOBIG, &err);
	CHECK(strstr(msg, "AAAA") == NULL);
	free(body);

	/* A response past 64 KiB is not read. */
	body = calloc(1, 70000);
	memset(body, ' ', 69999);
	CHECK_ERR(parse(body, &token, &exp, &err), SK_ETOOBIG, &err);
	free(body);
}
