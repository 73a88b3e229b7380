/*
 * fuzz_awsini.c - a libFuzzer target for the ~/.aws/credentials and
 * ~/.aws/config reader behind s3://: each input becomes the two files
 * (credentials, a NUL, config; or both the same without a NUL), and the
 * keys, region, endpoint and addressing style are looked up for a few
 * profiles, signed and unsigned, as sk__aws_creds_load does at the first
 * s3:// request. Built by ./configure --enable-fuzzing CC=clang.
 *
 * No secret may reach a message: the seeds' secrets and session tokens
 * hold MARK, which no message is allowed to show (but for the one value
 * that is quoted on purpose, a bad addressing_style).
 *
 * Seeds: tests/fuzz/seeds.sh DIR awsini.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "cloud.h"
#include "memfile.h"

#define MARK	"wJalrXUtnFEMI"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const profiles[] = { NULL, "x", "dev" };

static const char *fcred, *fconf;

/* What the user sees may show anything but a secret. */
static void
no_secret(const char *msg)
{
	char buf[SK_ERRMSG_MAX], *q;

	if (memchr(msg, '\0', SK_ERRMSG_MAX) == NULL)
		abort();
	snprintf(buf, sizeof buf, "%s", msg);
	if ((q = strstr(buf, "addressing style \"")) != NULL)
		*q = '\0';	/* the refused value itself, on purpose */
	if (strstr(buf, MARK) != NULL)
		abort();
}

static int
region_ok(const char *r)
{
	size_t n = r != NULL ? strlen(r) : 0;

	return n > 0 && n <= 64 && strspn(r, "abcdefghijklmnopqrstuvwxyz"
	    "0123456789-") == n;
}

/* scheme://host[:port]: a host, no path, no '/' at the end. */
static int
endpoint_ok(const char *e)
{
	const char *h;

	if (e == NULL)
		return 0;
	if (strncmp(e, "https://", 8) == 0)
		h = e + 8;
	else if (strncmp(e, "http://", 7) == 0)
		h = e + 7;
	else
		return 0;
	return *h != '\0' && *h != ':' && strchr(h, '/') == NULL &&
	    strpbrk(e, " \t\r\n?#@") == NULL;
}

static void
lookup(const char *name)
{
	struct sk__aws_creds c, u;
	struct sk_error err = { 0 }, err2 = { 0 };
	char a[300], b[300];
	int rc, rcu;

	if (name != NULL)
		setenv("AWS_PROFILE", name, 1);
	else
		unsetenv("AWS_PROFILE");
	rc = sk__aws_creds_load(&c, 0, &err);
	rcu = sk__aws_creds_load(&u, 1, &err2);
	if (rc > 0 || rcu > 0)
		abort();
	if (rc != 0) {
		if (err.msg[0] == '\0')
			abort();
		no_secret(err.msg);
	}
	if (rcu != 0) {
		if (err2.msg[0] == '\0')
			abort();
		no_secret(err2.msg);
	}
	/* Signing needs more than not signing, never less. */
	if (rc == 0 && rcu != 0)
		abort();
	if (rc == 0) {
		if (c.access_key == NULL || c.secret_key == NULL)
			abort();
		/* Where the keys came from, exactly: no value of the file. */
		snprintf(a, sizeof a, "profile \"%s\" in %s",
		    name ? name : "default", fcred);
		snprintf(b, sizeof b, "profile \"%s\" in %s",
		    name ? name : "default", fconf);
		if (strcmp(c.source, a) != 0 && strcmp(c.source, b) != 0)
			abort();
		if (!region_ok(c.region) || !endpoint_ok(c.endpoint) ||
		    (c.path_style != 0 && c.path_style != 1))
			abort();
		/* The same files give the same place to send requests. */
		if (strcmp(c.region, u.region) != 0 ||
		    strcmp(c.endpoint, u.endpoint) != 0 ||
		    c.path_style != u.path_style ||
		    c.custom_endpoint != u.custom_endpoint)
			abort();
		sk__aws_creds_free(&c);
	}
	if (rcu == 0) {
		if (u.access_key != NULL || u.secret_key != NULL ||
		    u.session_token != NULL)
			abort();
		if (strcmp(u.source, "none (unsigned requests, "
		    "--no-sign-request)") != 0)
			abort();
		if (!region_ok(u.region) || !endpoint_ok(u.endpoint))
			abort();
		sk__aws_creds_free(&u);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const clear[] = { "AWS_ACCESS_KEY_ID",
	    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
	    "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL",
	    "SK_S3_ADDRESSING" };
	static int once;
	const uint8_t *nul;
	size_t i;

	if (!once) {
		for (i = 0; i < sizeof clear / sizeof clear[0]; i++)
			unsetenv(clear[i]);
		once = 1;
	}
	if ((nul = memchr(data, '\0', size)) != NULL) {
		fcred = memfile_put(0, data, (size_t)(nul - data));
		fconf = memfile_put(1, nul + 1, size - (size_t)(nul - data) -
		    1);
	} else {
		fcred = memfile_put(0, data, size);
		fconf = memfile_put(1, data, size);
	}
	setenv("AWS_SHARED_CREDENTIALS_FILE", fcred, 1);
	setenv("AWS_CONFIG_FILE", fconf, 1);
	for (i = 0; i < sizeof profiles / sizeof profiles[0]; i++)
		lookup(profiles[i]);
	return 0;
}
