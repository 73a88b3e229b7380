/*
 * aws.c - s3:// credentials, region and endpoint, found as the AWS CLI
 * finds them: the environment, then the profile in ~/.aws/credentials and
 * ~/.aws/config. A secret is read into memory and never into a message.
 */
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "internal.h"
#include "cloud.h"

#define INI_MAX	((size_t)1 << 20)

/* The keys of one profile that shardkit reads. */
struct profile {
	char *access_key, *secret_key, *session_token, *region, *endpoint;
	char *addressing, *ca_bundle;
};

static void
profile_free(struct profile *p)
{
	if (p->secret_key != NULL)
		OPENSSL_cleanse(p->secret_key, strlen(p->secret_key));
	if (p->session_token != NULL)
		OPENSSL_cleanse(p->session_token, strlen(p->session_token));
	free(p->access_key);
	free(p->secret_key);
	free(p->session_token);
	free(p->region);
	free(p->endpoint);
	free(p->addressing);
	free(p->ca_bundle);
	memset(p, 0, sizeof *p);
}

static char *
trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
		e--;
	*e = '\0';
	return s;
}

static int
set(char **dst, const char *v, struct sk_error *err)
{
	if (*dst != NULL)
		return 0;	/* the first one wins */
	if ((*dst = strdup(v)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	return 0;
}

/*
 * Read section want ("default", "profile x", ...) of an INI file into p
 * (keys already set stay). A missing file is no error; anything but a
 * regular file of at most 1 MiB is. Lines are "[section]", "key = value",
 * comments (# ;), and indented "key = value" under "s3 =".
 */
static int
read_ini(const char *path, const char *want, struct profile *p,
    struct sk_error *err)
{
	struct stat st;
	char *buf, *line, *next, *eq, *k, *v;
	int fd, rc = 0, in = 0, sub = 0, lineno = 0;
	ssize_t got;
	size_t len = 0;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0)
		return errno == ENOENT || errno == ENOTDIR ? 0 :
		    sk_error_set(err, SK_EACCES, "%s: %s", path,
		    strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return sk_error_set(err, SK_EINVAL, "%s: not a regular file",
		    path);
	}
	if ((uint64_t)st.st_size > INI_MAX) {
		close(fd);
		return sk_error_set(err, SK_ETOOBIG, "%s: %" PRIu64 " bytes; "
		    "at most %zu are read", path, (uint64_t)st.st_size,
		    INI_MAX);
	}
	if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
		close(fd);
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	while (len < (size_t)st.st_size && (got = read(fd, buf + len,
	    (size_t)st.st_size - len)) > 0)
		len += (size_t)got;
	close(fd);
	buf[len] = '\0';
	for (line = buf; line != NULL && rc == 0; line = next) {
		lineno++;
		next = strchr(line, '\n');
		if (next != NULL)
			*next++ = '\0';
		/* An indented line belongs to the "s3 =" block above it. */
		int indented = line[0] == ' ' || line[0] == '\t';

		k = trim(line);
		if (*k == '\0' || *k == '#' || *k == ';')
			continue;
		if (*k == '[') {
			char *end = strchr(k, ']');

			if (end == NULL) {
				rc = sk_error_set(err, SK_EFORMAT, "%s:%d: a "
				    "section header without ']'", path, lineno);
				break;
			}
			*end = '\0';
			in = strcmp(trim(k + 1), want) == 0;
			sub = 0;
			continue;
		}
		if ((eq = strchr(k, '=')) == NULL) {
			/* The value is not shown: it could be a secret. */
			rc = sk_error_set(err, SK_EFORMAT, "%s:%d: want \"key = "
			    "value\"", path, lineno);
			break;
		}
		*eq = '\0';
		v = trim(eq + 1);
		k = trim(k);
		if (!indented)
			sub = strcmp(k, "s3") == 0 && *v == '\0';
		if (!in)
			continue;
		if (indented && sub) {
			if (strcmp(k, "addressing_style") == 0)
				rc = set(&p->addressing, v, err);
			else if (strcmp(k, "endpoint_url") == 0)
				rc = set(&p->endpoint, v, err);
			continue;
		}
		if (strcmp(k, "aws_access_key_id") == 0)
			rc = set(&p->access_key, v, err);
		else if (strcmp(k, "aws_secret_access_key") == 0)
			rc = set(&p->secret_key, v, err);
		else if (strcmp(k, "aws_session_token") == 0)
			rc = set(&p->session_token, v, err);
		else if (strcmp(k, "region") == 0)
			rc = set(&p->region, v, err);
		else if (strcmp(k, "endpoint_url") == 0)
			rc = set(&p->endpoint, v, err);
		else if (strcmp(k, "addressing_style") == 0)
			rc = set(&p->addressing, v, err);
		else if (strcmp(k, "ca_bundle") == 0)
			rc = set(&p->ca_bundle, v, err);
	}
	OPENSSL_cleanse(buf, len);
	free(buf);
	return rc;
}

static const char *
env(const char *name)
{
	const char *v = getenv(name);

	return v != NULL && *v != '\0' ? v : NULL;
}

/* ~/.aws/NAME, or the variable's file. */
static char *
aws_file(const char *var, const char *name)
{
	const char *v = env(var), *home = env("HOME");

	if (v != NULL)
		return strdup(v);
	return sk__asprintf("%s/.aws/%s", home ? home : "", name);
}

static int
valid_region(const char *r)
{
	size_t i, n = strlen(r);

	if (n == 0 || n > 64)
		return 0;
	for (i = 0; i < n; i++)
		if (!((r[i] >= 'a' && r[i] <= 'z') || (r[i] >= '0' &&
		    r[i] <= '9') || r[i] == '-'))
			return 0;
	return 1;
}

/* scheme://host[:port], no path, no trailing '/', a default port left
 * out (curl leaves it out of Host, and so must the signature). */
static int
set_endpoint(struct sk__aws_creds *c, const char *v, const char *from,
    struct sk_error *err)
{
	size_t n = strlen(v);
	const char *host;
	int https;

	while (n > 0 && v[n - 1] == '/')
		n--;
	https = strncmp(v, "https://", 8) == 0;
	if (!https && strncmp(v, "http://", 7) != 0)
		return sk_error_set(err, SK_EINVAL, "%s: an endpoint starts "
		    "with http:// or https://", from);
	host = v + (https ? 8 : 7);
	if ((size_t)(host - v) >= n || *host == ':' || memchr(host, '/', n -
	    (size_t)(host - v)) != NULL || strpbrk(v, " \t\r\n?#@") != NULL)
		return sk_error_set(err, SK_EINVAL, "%s: want scheme://host"
		    "[:port] as the endpoint", from);
	if (https && n > 4 && strncmp(v + n - 4, ":443", 4) == 0)
		n -= 4;
	else if (!https && n > 3 && strncmp(v + n - 3, ":80", 3) == 0)
		n -= 3;
	if ((c->endpoint = strndup(v, n)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	return 0;
}

void
sk__aws_creds_free(struct sk__aws_creds *c)
{
	if (c->secret_key != NULL)
		OPENSSL_cleanse(c->secret_key, strlen(c->secret_key));
	if (c->session_token != NULL)
		OPENSSL_cleanse(c->session_token, strlen(c->session_token));
	free(c->access_key);
	free(c->secret_key);
	free(c->session_token);
	free(c->region);
	free(c->endpoint);
	free(c->ca_bundle);
	memset(c, 0, sizeof *c);
}

int
sk__aws_creds_load(struct sk__aws_creds *c, int no_sign,
    struct sk_error *err)
{
	struct profile cred = { 0 }, conf = { 0 };
	const char *name = env("AWS_PROFILE"), *v, *from;
	char *fcred = NULL, *fconf = NULL, *sect = NULL, *r;
	int rc;

	memset(c, 0, sizeof *c);
	if (name == NULL)
		name = "default";
	if ((fcred = aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials")) ==
	    NULL || (fconf = aws_file("AWS_CONFIG_FILE", "config")) == NULL ||
	    (sect = strcmp(name, "default") == 0 ? strdup("default") :
	    sk__asprintf("profile %s", name)) == NULL) {
		rc = sk_error_set(err, SK_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = read_ini(fcred, name, &cred, err)) != 0 ||
	    (rc = read_ini(fconf, sect, &conf, err)) != 0)
		goto out;

	/* The keys. */
	if (no_sign)
		snprintf(c->source, sizeof c->source, "none (unsigned "
		    "requests, --no-sign-request)");
	else if (env("AWS_ACCESS_KEY_ID") != NULL) {
		if (env("AWS_SECRET_ACCESS_KEY") == NULL) {
			rc = sk_error_set(err, SK_EACCES, "s3://: "
			    "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY "
			    "is not");
			goto out;
		}
		if ((c->access_key = strdup(env("AWS_ACCESS_KEY_ID"))) ==
		    NULL || (c->secret_key = strdup(env(
		    "AWS_SECRET_ACCESS_KEY"))) == NULL ||
		    (env("AWS_SESSION_TOKEN") != NULL && (c->session_token =
		    strdup(env("AWS_SESSION_TOKEN"))) == NULL))
			goto nomem;
		snprintf(c->source, sizeof c->source, "AWS_ACCESS_KEY_ID in "
		    "the environment");
	} else {
		struct profile *p = cred.access_key != NULL ? &cred : &conf;
		const char *file = p == &cred ? fcred : fconf;

		if (p->access_key == NULL) {
			rc = sk_error_set(err, SK_EACCES, "s3://: no AWS "
			    "credentials: AWS_ACCESS_KEY_ID is not set and "
			    "profile \"%s\" has no aws_access_key_id in %s or "
			    "%s; for a public bucket, --no-sign-request", name,
			    fcred, fconf);
			goto out;
		}
		if (p->secret_key == NULL) {
			rc = sk_error_set(err, SK_EACCES, "%s: profile \"%s\" "
			    "has aws_access_key_id but no "
			    "aws_secret_access_key", file, name);
			goto out;
		}
		c->access_key = p->access_key;
		c->secret_key = p->secret_key;
		c->session_token = p->session_token;
		p->access_key = p->secret_key = p->session_token = NULL;
		snprintf(c->source, sizeof c->source, "profile \"%s\" in %s",
		    name, file);
	}

	/* The region. */
	if ((v = env("AWS_REGION")) != NULL)
		from = "AWS_REGION";
	else if ((v = env("AWS_DEFAULT_REGION")) != NULL)
		from = "AWS_DEFAULT_REGION";
	else if ((v = conf.region) != NULL || (v = cred.region) != NULL)
		from = "the profile's region";
	else {
		v = "us-east-1";
		from = "the default";
	}
	if (!valid_region(v)) {
		rc = sk_error_set(err, SK_EINVAL, "%s: not a region name",
		    from);
		goto out;
	}
	if ((c->region = strdup(v)) == NULL)
		goto nomem;

	/* The endpoint and the addressing style. */
	if ((v = env("AWS_ENDPOINT_URL_S3")) != NULL)
		from = "AWS_ENDPOINT_URL_S3";
	else if ((v = env("AWS_ENDPOINT_URL")) != NULL)
		from = "AWS_ENDPOINT_URL";
	else if ((v = conf.endpoint) != NULL)
		from = "the profile's endpoint_url";
	if (v != NULL) {
		if ((rc = set_endpoint(c, v, from, err)) != 0)
			goto out;
		c->custom_endpoint = 1;
	} else if ((r = sk__asprintf("https://s3.%s.amazonaws.com",
	    c->region)) == NULL)
		goto nomem;
	else
		c->endpoint = r;
	v = env("SK_S3_ADDRESSING");
	if (v == NULL)
		v = conf.addressing;
	if (v != NULL && strcmp(v, "path") != 0 && strcmp(v, "virtual") != 0 &&
	    strcmp(v, "auto") != 0) {
		rc = sk_error_set(err, SK_EINVAL, "%s: addressing style \"%s\" "
		    "(want path, virtual or auto)", env("SK_S3_ADDRESSING") ?
		    "SK_S3_ADDRESSING" : fconf, v);
		goto out;
	}
	c->path_style = v != NULL && strcmp(v, "auto") != 0 ?
	    strcmp(v, "path") == 0 : c->custom_endpoint;
	/* The CA bundle, as the AWS CLI takes it (--ca-file wins). */
	if (((v = env("AWS_CA_BUNDLE")) != NULL ||
	    (v = conf.ca_bundle) != NULL) &&
	    (c->ca_bundle = strdup(v)) == NULL)
		goto nomem;
	rc = 0;
	goto out;
nomem:
	rc = sk_error_set(err, SK_ENOMEM, "out of memory");
out:
	if (rc != 0)
		sk__aws_creds_free(c);
	profile_free(&cred);
	profile_free(&conf);
	free(fcred);
	free(fconf);
	free(sect);
	return rc;
}
