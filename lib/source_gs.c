/*
 * source_gs.c - gs:// sources: Google Cloud Storage's JSON API over the
 * fetch engine. A shard is a stream of ranged alt=media GETs pinned to the
 * object's generation; a folder is an objects.list listing; pack uploads
 * with a simple upload, or a resumable one that goes on from where the
 * server says it stands after a broken connection.
 *
 * Credentials, in the order Google's libraries look for them:
 * STORAGE_EMULATOR_HOST (plain http, no auth), GOOGLE_OAUTH_ACCESS_TOKEN,
 * GOOGLE_APPLICATION_CREDENTIALS (a service-account key: an RS256 JWT
 * exchanged at its token_uri; or gcloud's authorized_user: a refresh
 * token), else gcloud's application_default_credentials.json (in
 * CLOUDSDK_CONFIG or ~/.config/gcloud), the metadata server
 * (GCE_METADATA_HOST).
 * One thread refreshes the token before it expires, for every other one.
 */
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "internal.h"
#include "cloud.h"
#include "fetch.h"

#define GCS_ENDPOINT	"https://storage.googleapis.com"
#define META_HOST	"metadata.google.internal"
#define META_PATH	"/computeMetadata/v1/instance/service-accounts/" \
			"default/token"
#define SCOPE		"https://www.googleapis.com/auth/devstorage.read_write"
#define KEY_MAX		((size_t)64 << 10)
#define SMALL_MAX	((size_t)1 << 20)
#define LIST_PAGE_MAX	((size_t)32 << 20)
#define LIST_PAGES_MAX	100000
#define CHUNK_QUANTUM	((uint64_t)256 << 10)	/* GCS wants multiples */

enum { M_EMULATOR = 1, M_TOKEN, M_KEY, M_METADATA };

/* ------------------------------------------------------------------------ */
/* credentials                                                              */

/*
 * Lock order: gcs.mu alone; the refresher thread does its network call
 * without it. The token is read under gcs.mu by the engine thread (auth
 * headers) and replaced under it by whoever refreshed it.
 */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	int loaded, rc, mode;
	char err[SK_ERRMSG_MAX];
	char *endpoint;		/* scheme://host[:port], no '/' at the end */
	char *token;		/* NULL for the emulator */
	time_t expires;		/* wall clock; 0: never (a given token) */
	long lifetime;
	char refresh_err[SK_ERRMSG_MAX];	/* the last refresh's failure */
	char source[300];	/* where the token comes from, for messages */
	char *keyfile, *meta_url;
	const char *keyvar;	/* how keyfile was found, for messages */
	int user;		/* keyfile is gcloud's authorized_user */
	char *quota;		/* its quota_project_id, or NULL */
} gcs = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0,
    "", NULL, NULL, 0, 0, "", "", NULL, NULL, NULL, 0, NULL };

/* A file the user named, read whole: a regular file of at most max. */
static int
read_small(const char *path, size_t max, char **out, size_t *len,
    struct sk_error *err)
{
	struct stat st;
	ssize_t got;
	char *buf;
	int fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0)
		return sk_error_set(err, errno == ENOENT ? SK_ENOENT : SK_EACCES,
		    "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return sk_error_set(err, SK_EINVAL, "%s: not a regular file",
		    path);
	}
	if ((uint64_t)st.st_size > max) {
		close(fd);
		return sk_error_set(err, SK_ETOOBIG, "%s: %" PRIu64 " bytes; a "
		    "key file is at most %zu", path, (uint64_t)st.st_size, max);
	}
	if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
		close(fd);
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	*len = 0;
	while (*len < (size_t)st.st_size && (got = read(fd, buf + *len,
	    (size_t)st.st_size - *len)) > 0)
		*len += (size_t)got;
	close(fd);
	buf[*len] = '\0';
	*out = buf;
	return 0;
}

/* Ask for a token: the key's JWT or the refresh token at the file's
 * token_uri, or the metadata server. Called without gcs.mu: the engine
 * carries the request. */
static int
fetch_token(char **token, long *lifetime, char **quotap, int *userp,
    struct sk_error *err)
{
	static const char *const form[] = {
		"Content-Type: application/x-www-form-urlencoded", NULL
	};
	static const char *const flavor[] = { "Metadata-Flavor: Google",
		NULL };
	struct sk__req r;
	char *key = NULL, *uri = NULL, *body = NULL, *quota = NULL;
	size_t klen = 0;
	int rc, tries, user = 0;

	memset(&r, 0, sizeof r);
	*quotap = NULL;
	*userp = 0;
	if (gcs.mode == M_KEY) {
		if ((rc = read_small(gcs.keyfile, KEY_MAX, &key, &klen,
		    err)) != 0)
			return rc;
		rc = sk__gcs_grant(key, klen, gcs.keyfile, SCOPE, time(NULL),
		    &body, &uri, &quota, &user, err);
		OPENSSL_cleanse(key, klen);
		free(key);
		/* What the file is, for messages; the project to bill. Read
		 * again at each refresh, as the file may be replaced. */
		*userp = user;
		if (rc != 0)
			return rc;
		*quotap = quota;
		r.method = "POST";
		r.url = uri;
		r.headers = form;
		r.body = body;
		r.body_len = strlen(body);
	} else {
		r.method = "GET";
		r.url = gcs.meta_url;
		r.headers = flavor;
		/* Off Google Cloud nobody answers at metadata.google.internal:
		 * say so at once rather than retry for minutes. */
		r.no_retry = getenv("GCE_METADATA_HOST") == NULL;
	}
	r.max = SMALL_MAX;
	/* Without retries, a metadata server that does answer still gets
	 * three tries a second apart: one reset must not cost the process
	 * its credentials. A name that does not resolve is off Google
	 * Cloud. */
	for (tries = 1;; tries++) {
		rc = sk__fetch_request(&r, err);
		if (rc != SK_ENETWORK || !r.no_retry || tries == 3 ||
		    strstr(err->msg, "resolve") != NULL)
			break;
		sk__req_free(&r);
		sleep(1);
	}
	if (body != NULL) {
		OPENSSL_cleanse(body, strlen(body));
		free(body);
	}
	if (rc == 0) {
		/* An error body is {"error": ...}: oauth_parse says so. */
		rc = sk__oauth_parse(r.resp, r.resp_len, r.url, token,
		    lifetime, err);
		if (rc == 0 && r.status != 200) {
			free(*token);
			*token = NULL;
			rc = sk_error_set(err, SK_EACCES, "%s: HTTP %ld", r.url,
			    r.status);
		} else if (rc == SK_EFORMAT && r.status != 200)
			/* A 404 page from a VM with no service account, say:
			 * the status is what tells. */
			rc = sk_error_set(err, SK_EACCES, "%s: HTTP %ld%s", r.url,
			    r.status, r.status == 404 && gcs.mode == M_METADATA ?
			    " (no service account on this machine?)" : "");
	}
	if (r.resp != NULL)
		OPENSSL_cleanse(r.resp, r.resp_len);
	sk__req_free(&r);
	free(uri);
	if (rc != 0) {
		free(*quotap);
		*quotap = NULL;
	}
	return rc;
}

/* Refresh when a quarter of the token's life is left (at most 5 min
 * early): a retry that waited still carries a valid one. */
static time_t
refresh_at(void)
{
	long early = gcs.lifetime / 4;

	if (early > 300)
		early = 300;
	return gcs.expires - early;
}

static void *
refresher(void *arg)
{
	struct sk_error err;
	struct timespec ts;
	long lifetime = 0;
	char *tok = NULL, *quota = NULL;
	int rc, fails = 0, user = 0;
	double wait;

	(void)arg;
	pthread_mutex_lock(&gcs.mu);
	for (;;) {
		ts.tv_sec = refresh_at();
		ts.tv_nsec = 0;
		while (time(NULL) < ts.tv_sec)
			if (pthread_cond_timedwait(&gcs.cond, &gcs.mu, &ts) ==
			    ETIMEDOUT)
				break;
		if (time(NULL) < refresh_at())
			continue;
		pthread_mutex_unlock(&gcs.mu);
		rc = fetch_token(&tok, &lifetime, &quota, &user, &err);
		pthread_mutex_lock(&gcs.mu);
		if (rc == 0) {
			free(gcs.quota);
			gcs.quota = quota;
			if (gcs.token != NULL)
				OPENSSL_cleanse(gcs.token, strlen(gcs.token));
			free(gcs.token);
			gcs.token = tok;
			gcs.lifetime = lifetime;
			gcs.expires = time(NULL) + lifetime;
			gcs.refresh_err[0] = '\0';
			fails = 0;
			sk_log(SK_LOG_DEBUG, "gs: refreshed the access token "
			    "from %s (valid %ld s)", gcs.source, lifetime);
			continue;
		}
		/* Keep the old token while it lasts; try again soon. */
		snprintf(gcs.refresh_err, sizeof gcs.refresh_err, "%s",
		    err.msg);
		sk_log(SK_LOG_WARN, "gs: cannot refresh the access token from "
		    "%s: %s", gcs.source, err.msg);
		wait = fails < 6 ? (double)(1 << fails) : 60.0;
		fails++;
		pthread_mutex_unlock(&gcs.mu);
		ts.tv_sec = (time_t)wait;
		ts.tv_nsec = 0;
		nanosleep(&ts, NULL);
		pthread_mutex_lock(&gcs.mu);
	}
	return NULL;
}

/* The endpoint an environment variable names ("host:port" or an http(s)
 * URL), or NULL with err set. */
static char *
env_endpoint(const char *name, const char *v, struct sk_error *err)
{
	size_t n = strlen(v);
	char *ep;

	while (n > 0 && v[n - 1] == '/')
		n--;
	if (strncmp(v, "http://", 7) == 0 || strncmp(v, "https://", 8) == 0)
		ep = sk__asprintf("%.*s", (int)n, v);
	else if (strstr(v, "://") != NULL || strpbrk(v, "/?#@ ") != NULL) {
		sk_error_set(err, SK_EINVAL, "%s: want host:port or an "
		    "http(s) URL, not '%.64s'", name, v);
		return NULL;
	} else
		ep = sk__asprintf("http://%.*s", (int)n, v);
	if (ep == NULL)
		sk_error_set(err, SK_ENOMEM, "out of memory");
	return ep;
}

/*
 * gcloud's application-default credentials file, as Google's libraries
 * look for it when GOOGLE_APPLICATION_CREDENTIALS is unset:
 * $CLOUDSDK_CONFIG/application_default_credentials.json, CLOUDSDK_CONFIG
 * being ~/.config/gcloud unless set. *path is NULL when there is none.
 */
static int
gcloud_file(char **path, struct sk_error *err)
{
	const char *dir = getenv("CLOUDSDK_CONFIG"), *home = getenv("HOME");
	struct stat st;
	char *p;

	*path = NULL;
	if (dir != NULL && *dir != '\0')
		p = sk__asprintf("%s/application_default_credentials.json",
		    dir);
	else if (home != NULL && *home != '\0')
		p = sk__asprintf("%s/.config/gcloud/"
		    "application_default_credentials.json", home);
	else
		return 0;
	if (p == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	/* There, even if unreadable: its error says more than the
	 * metadata server's silence would. */
	if (stat(p, &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) {
		free(p);
		return 0;
	}
	*path = p;
	return 0;
}

static int
load(struct sk_error *err)
{
	const char *v;
	pthread_t t;
	long lifetime = 0;
	char *tok = NULL;
	int rc;

	if ((v = getenv("STORAGE_EMULATOR_HOST")) != NULL && *v != '\0') {
		gcs.mode = M_EMULATOR;
		gcs.endpoint = env_endpoint("STORAGE_EMULATOR_HOST", v, err);
		snprintf(gcs.source, sizeof gcs.source, "no credentials "
		    "(STORAGE_EMULATOR_HOST: an emulator)");
		return gcs.endpoint ? 0 : err->code;
	}
	v = getenv("SK_GCS_ENDPOINT");
	if (v != NULL && *v != '\0') {
		if ((gcs.endpoint = env_endpoint("SK_GCS_ENDPOINT", v,
		    err)) == NULL)
			return err->code;
	} else if ((gcs.endpoint = strdup(GCS_ENDPOINT)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	if ((v = getenv("GOOGLE_OAUTH_ACCESS_TOKEN")) != NULL && *v != '\0') {
		gcs.mode = M_TOKEN;
		snprintf(gcs.source, sizeof gcs.source,
		    "GOOGLE_OAUTH_ACCESS_TOKEN");
		return (gcs.token = strdup(v)) ? 0 : sk_error_set(err,
		    SK_ENOMEM, "out of memory");
	}
	if ((v = getenv("GOOGLE_APPLICATION_CREDENTIALS")) != NULL &&
	    *v != '\0') {
		gcs.mode = M_KEY;
		gcs.keyvar = "GOOGLE_APPLICATION_CREDENTIALS";
		if ((gcs.keyfile = strdup(v)) == NULL)
			return sk_error_set(err, SK_ENOMEM, "out of memory");
	} else if ((rc = gcloud_file(&gcs.keyfile, err)) != 0)
		return rc;
	if (gcs.keyfile != NULL && gcs.keyvar == NULL) {
		gcs.mode = M_KEY;
		gcs.keyvar = "gcloud's application-default credentials";
	} else if (gcs.keyfile == NULL) {
		gcs.mode = M_METADATA;
		v = getenv("GCE_METADATA_HOST");
		snprintf(gcs.source, sizeof gcs.source, "the metadata server "
		    "%s%s", v ? v : META_HOST, v ? " (GCE_METADATA_HOST)" : "");
		if ((gcs.meta_url = sk__asprintf("http://%s" META_PATH,
		    v ? v : META_HOST)) == NULL)
			return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	/* The first token now, so a bad key says so before any read. */
	rc = fetch_token(&tok, &lifetime, &gcs.quota, &gcs.user, err);
	if (gcs.mode == M_KEY)
		/* The kind is known once the file was read. */
		snprintf(gcs.source, sizeof gcs.source, "the %s %s (%s)",
		    gcs.user ? "authorized_user credentials" :
		    "service-account key", gcs.keyfile, gcs.keyvar);
	if (rc != 0) {
		char why[SK_ERRMSG_MAX];

		snprintf(why, sizeof why, "%s", err->msg);
		if (gcs.mode == M_METADATA && getenv("GCE_METADATA_HOST") ==
		    NULL)
			return sk_error_set(err, SK_EACCES, "gs://: no Google "
			    "credentials: run 'gcloud auth application-default "
			    "login', set GOOGLE_APPLICATION_CREDENTIALS to a "
			    "key file, GOOGLE_OAUTH_ACCESS_TOKEN to a token, "
			    "or STORAGE_EMULATOR_HOST for an emulator (the "
			    "metadata server did not answer: %s)", why);
		/* A token endpoint's refusal names only its URL: say which
		 * credentials it refused. */
		return sk_error_set(err, rc, "cannot get an access token from "
		    "%s: %s", gcs.source, why);
	}
	gcs.token = tok;
	gcs.lifetime = lifetime;
	gcs.expires = time(NULL) + lifetime;
	if (pthread_create(&t, NULL, refresher, NULL) != 0)
		return sk_error_set(err, SK_ENOMEM, "cannot start the token "
		    "refresh thread");
	pthread_detach(t);
	return 0;
}

/* Credentials at the first gs:// request; an error is given to every
 * later one. */
static int
gcs_creds(struct sk_error *err)
{
	struct sk_error e;
	int rc;

	pthread_mutex_lock(&gcs.mu);
	if (!gcs.loaded) {
		if ((gcs.rc = load(&e)) != 0)
			snprintf(gcs.err, sizeof gcs.err, "%s", e.msg);
		gcs.loaded = 1;
	}
	rc = gcs.rc;
	pthread_mutex_unlock(&gcs.mu);
	if (rc != 0)
		return sk_error_set(err, rc, "%s", gcs.err);
	return 0;
}

static int
gcs_headers(void *ctx, const char *method, const char *url,
    const char *payload, struct curl_slist **h, char *msg, size_t n)
{
	struct curl_slist *nl;
	char *line;
	int rc = 0;

	(void)ctx, (void)method, (void)url, (void)payload;
	pthread_mutex_lock(&gcs.mu);
	if (gcs.mode == M_EMULATOR)
		;
	else if (gcs.expires != 0 && time(NULL) >= gcs.expires) {
		snprintf(msg, n, "the access token from %s expired and could "
		    "not be refreshed: %s", gcs.source, gcs.refresh_err[0] ?
		    gcs.refresh_err : "no refresh yet");
		rc = SK_EACCES;
	} else if ((line = sk__asprintf("Authorization: Bearer %s",
	    gcs.token)) == NULL ||
	    (nl = curl_slist_append(*h, line)) == NULL) {
		if (line != NULL)
			OPENSSL_cleanse(line, strlen(line));
		free(line);
		snprintf(msg, n, "out of memory");
		rc = SK_ENOMEM;
	} else {
		*h = nl;
		OPENSSL_cleanse(line, strlen(line));
		free(line);
		/* gcloud's quota_project_id, sent as Google's libraries
		 * send it: the project billed for the requests. */
		if (gcs.quota != NULL && ((line = sk__asprintf(
		    "x-goog-user-project: %s", gcs.quota)) == NULL ||
		    (nl = curl_slist_append(*h, line)) == NULL)) {
			free(line);
			snprintf(msg, n, "out of memory");
			rc = SK_ENOMEM;
		} else if (gcs.quota != NULL) {
			*h = nl;
			free(line);
		}
	}
	pthread_mutex_unlock(&gcs.mu);
	return rc;
}

/* GCS's JSON error {"error": {"code", "message", "errors": [{"reason"}]}}
 * into message and reason. */
void
sk__gcs_parse_error(const char *body, size_t len, char *message, size_t mn,
    char *reason, size_t rn)
{
	json_t *root, *e, *errs;
	const char *m, *r;
	size_t i;

	message[0] = reason[0] = '\0';
	if (len == 0 || (root = json_loadb(body, len, 0, NULL)) == NULL)
		return;
	e = json_object_get(root, "error");
	m = json_string_value(json_object_get(e, "message"));
	errs = json_object_get(e, "errors");
	r = json_string_value(json_object_get(json_array_get(errs, 0),
	    "reason"));
	if (m != NULL)
		snprintf(message, mn, "%s", m);
	if (r != NULL)
		snprintf(reason, rn, "%s", r);
	/* A server's words reach a terminal: printable ASCII only. */
	for (i = 0; message[i] != '\0'; i++)
		if ((unsigned char)message[i] < 0x20 ||
		    (unsigned char)message[i] >= 0x7f)
			message[i] = '?';
	for (i = 0; reason[i] != '\0'; i++)
		if ((unsigned char)reason[i] < 0x20 ||
		    (unsigned char)reason[i] >= 0x7f)
			reason[i] = '?';
	json_decref(root);
}

static int
gcs_explain(void *ctx, long status, const char *body, size_t len,
    const char *display, const char *version, char *msg, size_t n)
{
	char m[400], r[100];

	(void)ctx;
	sk__gcs_parse_error(body, len, m, sizeof m, r, sizeof r);
	if (status == 404 && version != NULL) {
		snprintf(msg, n, "%s: the object changed while it was read "
		    "(generation %s is gone: replaced or deleted)", display,
		    version);
		return SK_ECHANGED;
	}
	if (status == 404) {
		/* "No such object: my-bucket/x.tar" is about an object. */
		int bucket = strncasecmp(m, "No such object", 14) != 0 &&
		    strcasestr(m, "bucket") != NULL;

		snprintf(msg, n, "%s: HTTP 404: no such %s%s%s", display,
		    bucket ? "bucket" : "object", m[0] ? " (" : "", m[0] ?
		    m : "");
		if (m[0])
			strncat(msg, ")", n - strlen(msg) - 1);
		return SK_ENOENT;
	}
	if (status == 401) {
		snprintf(msg, n, "%s: HTTP 401: the access token from %s was "
		    "refused (expired or revoked?)%s%s", display, gcs.source,
		    m[0] ? ": " : "", m);
		return SK_EACCES;
	}
	if (status == 403) {
		snprintf(msg, n, "%s: HTTP 403%s%s: access denied to the "
		    "credentials from %s: check that they hold "
		    "storage.objects.get and .list on the bucket (pack: "
		    ".create and .delete)%s%s", display, r[0] ? " " : "", r,
		    gcs.source, m[0] ? ": " : "", m);
		return SK_EACCES;
	}
	snprintf(msg, n, "%s: HTTP %ld%s%s", display, status, m[0] ? ": " : "",
	    m);
	return status == 400 ? SK_EINVAL : SK_EIO;
}

static const struct sk__auth gcs_auth = {
	.headers = gcs_headers,
	.explain = gcs_explain,
	.version_header = "x-goog-generation",
	.no_if_match = 1,
};

/* A request whose status must be in [lo, hi]; else the explained error. */
static int
gcs_request(struct sk__req *r, const char *method, const char *url,
    const char *display, const char *const *headers, const void *body,
    size_t len, size_t max, struct sk_error *err)
{
	int rc;

	memset(r, 0, sizeof *r);
	r->method = method;
	r->url = url;
	r->display = display;
	r->auth = &gcs_auth;
	r->headers = headers;
	r->body = body;
	r->body_len = len;
	r->max = max;
	if ((rc = sk__fetch_request(r, err)) == 0 && (r->status < 200 ||
	    r->status > 299)) {
		char msg[SK_ERRMSG_MAX];

		rc = gcs_explain(NULL, r->status, r->resp, r->resp_len,
		    display, NULL, msg, sizeof msg);
		sk_error_set(err, rc, "%s", msg);
	}
	if (rc != 0)
		sk__req_free(r);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* reading                                                                  */

/* An objects.get answer: the object's generation and size. */
int
sk__gcs_parse_meta(const char *text, size_t len, const char *display,
    char gen[32], uint64_t *size, struct sk_error *err)
{
	json_t *root;
	const char *g, *sz;
	char *end;
	int rc = 0;

	root = json_loadb(text, len, 0, NULL);
	g = json_string_value(json_object_get(root, "generation"));
	sz = json_string_value(json_object_get(root, "size"));
	if (g == NULL || sz == NULL || strlen(g) >= 32 ||
	    strspn(g, "0123456789") != strlen(g) || *g == '\0') {
		rc = sk_error_set(err, SK_EFORMAT, "%s: the object's metadata "
		    "has no usable generation and size", display);
	} else {
		snprintf(gen, 32, "%s", g);
		/* The JSON API's uint64 is a string of digits; strtoull
		 * alone also takes blanks, a sign, nothing, and saturates. */
		errno = 0;
		*size = strtoull(sz, &end, 10);
		if (*sz < '0' || *sz > '9' || *end != '\0' || errno == ERANGE)
			rc = sk_error_set(err, SK_EFORMAT, "%s: the object's "
			    "metadata has a bad size", display);
	}
	json_decref(root);
	return rc;
}

/* The object's generation and size (objects.get). */
static int
stat_object(const char *meta, const char *display, char gen[32],
    uint64_t *size, struct sk_error *err)
{
	struct sk__req r;
	int rc;

	if ((rc = gcs_request(&r, "GET", meta, display, NULL, NULL, 0,
	    SMALL_MAX, err)) != 0)
		return rc;
	rc = sk__gcs_parse_meta(r.resp, r.resp_len, display, gen, size, err);
	sk__req_free(&r);
	return rc;
}

/*
 * A 404 for an object or a listing whose answer does not say which is
 * missing (the emulator answers with no body): when the bucket itself is
 * missing (buckets.get is a 404 too), say so, naming it, as S3's
 * NoSuchBucket does. err is rewritten only then.
 */
static void
name_missing_bucket(const char *bucket, const char *display,
    struct sk_error *err)
{
	struct sk__req r;
	struct sk_error e2;
	char *url;

	if (err == NULL || err->code != SK_ENOENT ||
	    strstr(err->msg, "no such bucket") != NULL ||
	    (url = sk__asprintf("%s/storage/v1/b/%s", gcs.endpoint,
	    bucket)) == NULL)
		return;
	if (gcs_request(&r, "GET", url, display, NULL, NULL, 0, SMALL_MAX,
	    &e2) == 0)
		sk__req_free(&r);
	else if (e2.code == SK_ENOENT)
		sk_error_set(err, SK_ENOENT, "%s: HTTP 404: no such bucket %s "
		    "at %s", display, bucket, gcs.endpoint);
	free(url);
}

/* The object's JSON API URL into *meta, once credentials are found. */
static int
object_url(sk_source *s, const struct sk_url *u, char **meta)
{
	struct sk_error err;
	char *name;
	int rc;

	*meta = NULL;
	if ((rc = gcs_creds(&err)) != 0)
		return sk__fail(&s->h, rc, "%s: %s", s->url, err.msg);
	if (u->path[0] == '\0')
		return sk__fail(&s->h, SK_EINVAL, "%s: no object name (a "
		    "folder ends in '/')", s->url);
	if ((name = sk__uri_escape(u->path, 0)) == NULL ||
	    (*meta = sk__asprintf("%s/storage/v1/b/%s/o/%s", gcs.endpoint,
	    u->host, name)) == NULL) {
		free(name);
		return sk__fail(&s->h, SK_ENOMEM, "out of memory");
	}
	free(name);
	return 0;
}

/*
 * The object's metadata first: every ranged read then names its
 * generation, so a replaced object is a 404 (or another generation
 * header), never bytes of two versions. The size sizes the parts.
 */
static int
gs_open_ahead(sk_source *s, const struct sk_url *u, uint64_t hint)
{
	struct sk_error err;
	char *meta = NULL, *url = NULL, gen[32];
	uint64_t size = 0;
	int rc;

	(void)hint;
	if ((rc = object_url(s, u, &meta)) != 0)
		return rc;
	if ((rc = stat_object(meta, s->url, gen, &size, &err)) != 0) {
		free(meta);
		name_missing_bucket(u->host, s->url, &err);
		return sk__fail(&s->h, rc, "%s", err.msg);
	}
	if ((url = sk__asprintf("%s?alt=media&generation=%s", meta, gen)) ==
	    NULL) {
		free(meta);
		return sk__fail(&s->h, SK_ENOMEM, "out of memory");
	}
	free(meta);
	rc = sk__remote_start(s, url, size > 0 ? size : 1, &gcs_auth, gen);
	free(url);
	return rc;
}

/* The listing gave the generation: no objects.get. */
static int
gs_open_pinned(sk_source *s, const struct sk_url *u, uint64_t size,
    const char *version)
{
	char *meta, *url;
	size_t i;
	int rc;

	for (i = 0; version[i] != '\0'; i++)
		if (version[i] < '0' || version[i] > '9' || i >= 20)
			break;
	if (i == 0 || version[i] != '\0')
		return sk__fail(&s->h, SK_EINVAL, "%s: \"%.40s\" is not a "
		    "generation", s->url, version);
	if ((rc = object_url(s, u, &meta)) != 0)
		return rc;
	url = sk__asprintf("%s?alt=media&generation=%s", meta, version);
	free(meta);
	if (url == NULL)
		return sk__fail(&s->h, SK_ENOMEM, "out of memory");
	rc = sk__remote_pinned(s, url, size, NULL, NULL, &gcs_auth,
	    version);
	free(url);
	return rc;
}

/*
 * One page of objects.list with a delimiter: objects ("items", with their
 * "size", "generation" and "updated") and folders ("prefixes") right
 * under prefix, and the next page's token.
 */
int
sk__gcs_parse_list(const char *text, size_t len, const char *prefix,
    const char *display, struct sk__entries *out, char **next,
    struct sk_error *err)
{
	json_t *root, *items, *prefixes, *it, *name, *g;
	const char *nm, *sz, *gen, *updated, *tok;
	uint64_t size;
	size_t i, n;
	int rc = 0;

	*next = NULL;
	if ((root = json_loadb(text, len, 0, NULL)) == NULL ||
	    !json_is_object(root))
		rc = sk_error_set(err, SK_EFORMAT, "%s: the listing is not a "
		    "JSON object", display);
	items = json_object_get(root, "items");
	json_array_foreach(items, i, it) {
		if (rc != 0)
			break;
		name = json_object_get(it, "name");
		if ((nm = json_string_value(name)) == NULL ||
		    (nm = sk__entry_under(nm, json_string_length(name), prefix,
		    0, &n)) == NULL)
			continue;
		/* The JSON API's uint64 and int64 are strings of digits. */
		sz = json_string_value(json_object_get(it, "size"));
		g = json_object_get(it, "generation");
		gen = json_string_value(g);
		updated = json_string_value(json_object_get(it, "updated"));
		if (sz == NULL || sk__parse_u64(sz, &size) != 0)
			rc = sk_error_set(err, SK_EFORMAT, "%s: the listing "
			    "gives an object a size that is not decimal digits",
			    display);
		else if (g != NULL && (gen == NULL || *gen == '\0' ||
		    strspn(gen, "0123456789") != strlen(gen) ||
		    !sk__entry_version_ok(gen)))
			rc = sk_error_set(err, SK_EFORMAT, "%s: the listing "
			    "gives an object a generation that is not 1 to 127 "
			    "decimal digits", display);
		else if (sk__entries_add(out, nm, n, 0, size, updated != NULL ?
		    sk__time_rfc3339(updated) : 0, gen != NULL ? gen : "") != 0)
			rc = sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	prefixes = json_object_get(root, "prefixes");
	json_array_foreach(prefixes, i, it) {
		if (rc != 0)
			break;
		if ((nm = json_string_value(it)) != NULL &&
		    (nm = sk__entry_under(nm, json_string_length(it), prefix, 1,
		    &n)) != NULL && sk__entries_add(out, nm, n, 1, 0, 0,
		    "") != 0)
			rc = sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	tok = json_string_value(json_object_get(root, "nextPageToken"));
	if (rc == 0 && tok != NULL && *tok != '\0' &&
	    (*next = sk__uri_escape(tok, 0)) == NULL)
		rc = sk_error_set(err, SK_ENOMEM, "out of memory");
	json_decref(root);
	return rc;
}

static int
gs_list_entries(const struct sk_url *u, const char *url,
    struct sk__entries *out, struct sk_error *err)
{
	struct sk__req r;
	struct sk__list_guard g;
	char *prefix = NULL, *tok = NULL, *next = NULL, *q = NULL;
	size_t start = out->n, before = out->n, added;
	int rc, pages;

	if ((rc = gcs_creds(err)) != 0)
		return rc;
	if ((prefix = sk__uri_escape(u->path, 0)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	sk__list_guard_init(&g);
	for (pages = 0; pages < LIST_PAGES_MAX; pages++) {
		free(q);
		q = sk__asprintf("%s/storage/v1/b/%s/o?prefix=%s&delimiter=%%2F"
		    "&maxResults=%d%s%s", gcs.endpoint, u->host, prefix,
		    sk__list_page(), tok ? "&pageToken=" : "", tok ? tok : "");
		if (q == NULL) {
			rc = sk_error_set(err, SK_ENOMEM, "out of memory");
			break;
		}
		if ((rc = gcs_request(&r, "GET", q, url, NULL, NULL, 0,
		    LIST_PAGE_MAX, err)) != 0) {
			name_missing_bucket(u->host, url, err);
			break;
		}
		rc = sk__gcs_parse_list(r.resp, r.resp_len, u->path, url, out,
		    &next, err);
		sk__req_free(&r);
		if (rc == 0)
			rc = sk__list_check(url, pages + 1, out->n, before,
			    start, err);
		added = out->n - before;
		before = out->n;
		if (rc != 0 || next == NULL)
			break;
		/* A server that repeats itself would list forever. */
		if ((rc = sk__list_guard_page(&g, url, next, added, err)) != 0)
			break;
		free(tok);
		tok = next;
		next = NULL;
	}
	if (rc == 0 && pages == LIST_PAGES_MAX)
		rc = sk_error_set(err, SK_ETOOBIG, "%s: more than %d pages",
		    url, LIST_PAGES_MAX);
	free(next);
	sk__list_guard_free(&g);
	free(tok);
	free(prefix);
	free(q);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* writing                                                                  */

/* The offset the server holds of a resumable upload: a 308's "Range:
 * bytes=0-N" is N + 1, none is 0; a 200/201 is the whole object (done). */
static int
upload_status(struct sk__req *r, uint64_t size, uint64_t *have, int *done,
    const char *display, struct sk_error *err)
{
	char v[96];
	unsigned long long a, b;

	*done = 0;
	if (r->status == 200 || r->status == 201) {
		*done = 1;
		*have = size;
		return 0;
	}
	if (r->status != 308) {
		char msg[SK_ERRMSG_MAX];
		int rc = gcs_explain(NULL, r->status, r->resp, r->resp_len,
		    display, NULL, msg, sizeof msg);

		return sk_error_set(err, rc, "%s (resumable upload)", msg);
	}
	if (sk__req_header(r, "range", v, sizeof v) == NULL) {
		*have = 0;
		return 0;
	}
	if (sscanf(v, "bytes=%llu-%llu", &a, &b) != 2 || a != 0 || b >= size) {
		char *c;

		/* A server's bytes reach a terminal: printable ones only. */
		for (c = v; *c != '\0'; c++)
			if (*c < 0x20 || *c > 0x7e)
				*c = '?';
		return sk_error_set(err, SK_EIO, "%s: the server holds a range "
		    "this upload never sent (%s)", display, v);
	}
	*have = b + 1;
	return 0;
}

/* A resumable upload's chunk: --part-size in whole 256 KiB. An object
 * larger than one chunk goes up resumable. */
static uint64_t
chunk_size(void)
{
	struct sk_fetch_config cfg;
	uint64_t c;

	sk_fetch_get_config(&cfg);
	c = cfg.part_size / CHUNK_QUANTUM * CHUNK_QUANTUM;
	return c < CHUNK_QUANTUM ? CHUNK_QUANTUM : c;
}

/*
 * A resumable upload: a session, then chunks (multiples of 256 KiB) in
 * order. A chunk that fails on the way is not sent again blindly: the
 * server says how much it holds, and the upload goes on from there.
 */
static int
gs_put_resumable(const char *start, const char *display,
    const uint8_t *data, uint64_t size, struct sk_error *err)
{
	struct sk_fetch_config cfg;
	struct sk__req r;
	char loc[4096], range[128], *hdrs[3] = { range, NULL, NULL };
	uint64_t have = 0, chunk, n, progress_at = 0;
	int rc, done = 0, fails = 0, stuck = 0;

	sk_fetch_get_config(&cfg);
	chunk = chunk_size();
	snprintf(range, sizeof range, "X-Upload-Content-Length: %" PRIu64,
	    size);
	hdrs[1] = "Content-Type: application/json; charset=UTF-8";
	if ((rc = gcs_request(&r, "POST", start, display,
	    (const char *const *)hdrs, "{}", 2, SMALL_MAX, err)) != 0)
		return rc;
	hdrs[1] = NULL;
	if (sk__req_header(&r, "location", loc, sizeof loc) == NULL) {
		sk__req_free(&r);
		return sk_error_set(err, SK_EIO, "%s: no upload session "
		    "(Location) in the response", display);
	}
	sk__req_free(&r);
	/* The token goes only where the endpoint is. */
	if (strncmp(loc, gcs.endpoint, strlen(gcs.endpoint)) != 0 ||
	    loc[strlen(gcs.endpoint)] != '/')
		return sk_error_set(err, SK_EIO, "%s: the upload session is "
		    "not on %s; refused", display, gcs.endpoint);
	while (!done) {
		n = size - have < chunk ? size - have : chunk;
		if (have + n == size)
			snprintf(range, sizeof range, "Content-Range: bytes "
			    "%" PRIu64 "-%" PRIu64 "/%" PRIu64, have,
			    have + n - 1, size);
		else
			snprintf(range, sizeof range, "Content-Range: bytes "
			    "%" PRIu64 "-%" PRIu64 "/*", have, have + n - 1);
		if (size == 0)
			snprintf(range, sizeof range, "Content-Range: bytes "
			    "*/0");
		memset(&r, 0, sizeof r);
		r.method = "PUT";
		r.url = loc;
		r.display = display;
		r.auth = &gcs_auth;
		r.headers = (const char *const *)hdrs;
		r.body = data + have;
		r.body_len = (size_t)n;
		r.max = SMALL_MAX;
		r.no_retry = 1;
		rc = sk__fetch_request(&r, err);
		if (rc == SK_ENETWORK) {
			/* Broken on the way: ask where it stands. */
			sk__req_free(&r);
			if (++fails > cfg.attempts)
				return rc;
			sk_log(SK_LOG_INFO, "%s: %s; asking the server where "
			    "the upload stands", display, err->msg);
			snprintf(range, sizeof range, "Content-Range: bytes "
			    "*/%" PRIu64, size);
			memset(&r, 0, sizeof r);
			r.method = "PUT";
			r.url = loc;
			r.display = display;
			r.auth = &gcs_auth;
			r.headers = (const char *const *)hdrs;
			r.max = SMALL_MAX;
			if ((rc = sk__fetch_request(&r, err)) != 0)
				return rc;
		} else if (rc != 0)
			return rc;
		rc = upload_status(&r, size, &have, &done, display, err);
		sk__req_free(&r);
		if (rc != 0)
			return rc;
		if (have > progress_at) {
			progress_at = have;
			fails = 0;
			stuck = 0;
		} else if (!done && ++stuck > cfg.attempts)
			return sk_error_set(err, SK_EIO, "%s: the server "
			    "took none of the upload's next %d chunks; it "
			    "holds %" PRIu64 " of %" PRIu64 " bytes", display,
			    stuck, have, size);
	}
	return 0;
}

static int
gs_put(const struct sk_url *u, const char *url, const void *data,
    uint64_t size, struct sk_error *err)
{
	static const char *const octet[] = {
		"Content-Type: application/octet-stream", NULL
	};
	struct sk__req r;
	char *name, *q;
	int rc;

	if (u->path[0] == '\0' || u->path[strlen(u->path) - 1] == '/')
		return sk_error_set(err, SK_EINVAL, "%s: no object name", url);
	if ((rc = gcs_creds(err)) != 0)
		return rc;
	if ((name = sk__uri_escape(u->path, 0)) == NULL ||
	    (q = sk__asprintf("%s/upload/storage/v1/b/%s/o?uploadType=%s&"
	    "name=%s", gcs.endpoint, u->host, size <= chunk_size() ? "media" :
	    "resumable", name)) == NULL) {
		free(name);
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	free(name);
	if (size > chunk_size())
		rc = gs_put_resumable(q, url, data, size, err);
	else if ((rc = gcs_request(&r, "POST", q, url, octet, data,
	    (size_t)size, SMALL_MAX, err)) == 0)
		sk__req_free(&r);
	free(q);
	return rc;
}

/* Whether gs://bucket/name holds these bytes: its metadata's size and
 * md5Hash (base64; a composite object has none, and reads as different). */
static int
gs_same(const struct sk_url *u, const char *url, const void *data,
    uint64_t size, const char *md5, int *same, struct sk_error *err)
{
	struct sk__req r;
	json_t *root;
	const char *sz, *b64;
	unsigned char md[64];
	char *meta = NULL, *name, have[33], want[33];
	int rc, n;

	*same = 0;
	if ((rc = gcs_creds(err)) != 0)
		return rc;
	if ((name = sk__uri_escape(u->path, 0)) == NULL ||
	    (meta = sk__asprintf("%s/storage/v1/b/%s/o/%s", gcs.endpoint,
	    u->host, name)) == NULL) {
		free(name);
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	free(name);
	rc = gcs_request(&r, "GET", meta, url, NULL, NULL, 0, SMALL_MAX, err);
	free(meta);
	if (rc != 0)
		return rc == SK_ENOENT ? 0 : rc;
	root = json_loadb(r.resp, r.resp_len, 0, NULL);
	sk__req_free(&r);
	sz = json_string_value(json_object_get(root, "size"));
	b64 = json_string_value(json_object_get(root, "md5Hash"));
	if (sz != NULL && b64 != NULL && strlen(b64) == 24 &&
	    strtoull(sz, NULL, 10) == size &&
	    (n = EVP_DecodeBlock(md, (const unsigned char *)b64, 24)) >= 16) {
		sk__md5_hex(md, have);
		if (md5 != NULL)
			snprintf(want, sizeof want, "%s", md5);
		else
			sk__md5_of(data, size, want);
		*same = strcasecmp(have, want) == 0;
	}
	json_decref(root);
	return 0;
}

static int
gs_del(const struct sk_url *u, const char *url, struct sk_error *err)
{
	struct sk__req r;
	char *name, *q;
	int rc;

	if ((rc = gcs_creds(err)) != 0)
		return rc;
	if ((name = sk__uri_escape(u->path, 0)) == NULL ||
	    (q = sk__asprintf("%s/storage/v1/b/%s/o/%s", gcs.endpoint,
	    u->host, name)) == NULL) {
		free(name);
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	free(name);
	if ((rc = gcs_request(&r, "DELETE", q, url, NULL, NULL, 0, SMALL_MAX,
	    err)) == 0)
		sk__req_free(&r);
	free(q);
	return rc;
}

const struct sk__source_ops sk__source_gs_ops = {
	.name = "gs",
	.open_ahead = gs_open_ahead,
	.open_pinned = gs_open_pinned,
	.ready = sk__remote_ready,
	.pread = sk__remote_pread,
	.peek = sk__remote_peek,
	.size = sk__remote_size,
	.close = sk__remote_close,
	.list_entries = gs_list_entries,
	.put = gs_put,
	.del = gs_del,
	.same = gs_same,
};
