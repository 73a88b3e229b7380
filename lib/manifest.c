/*
 * manifest.c - the wids shard index (NAME.json): the shard list with
 * sample counts, sizes and MD5s, plus shardkit's "info" object with the
 * class names and counts.
 */
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

#include "internal.h"
#include "fetch.h"

#define WIDS_KIND "wids-shard-index-v1"

int
sk_manifest_add_shard(struct sk_manifest *m, const char *url,
    uint64_t nsamples, uint64_t filesize, const char *md5)
{
	struct sk_manifest_shard *v, *s;

	v = realloc(m->shards, (m->nshards + 1) * sizeof *v);
	if (v == NULL)
		return SK_ENOMEM;
	m->shards = v;
	s = &v[m->nshards];
	memset(s, 0, sizeof *s);
	if ((s->url = strdup(url)) == NULL)
		return SK_ENOMEM;
	s->nsamples = nsamples;
	s->filesize = filesize;
	snprintf(s->md5, sizeof s->md5, "%s", md5 ? md5 : "");
	m->nshards++;
	return 0;
}

void
sk_manifest_free(struct sk_manifest *m)
{
	size_t i;

	for (i = 0; i < m->nshards; i++)
		free(m->shards[i].url);
	for (i = 0; i < m->nclasses; i++)
		free(m->classes[i]);
	free(m->shards);
	free(m->classes);
	free(m->class_counts);
	free(m->info_extra);
	memset(m, 0, sizeof *m);
}

static json_t *
build_info(const struct sk_manifest *m, struct sk_error *err)
{
	json_t *info, *names, *counts;
	json_error_t jerr;
	size_t i;

	if (m->info_extra != NULL) {
		info = json_loads(m->info_extra, 0, &jerr);
		if (info == NULL || !json_is_object(info)) {
			json_decref(info);
			sk_error_set(err, SK_EINVAL,
			    "manifest info is not a JSON object");
			return NULL;
		}
	} else
		info = json_object();
	names = json_array();
	counts = json_array();
	for (i = 0; i < m->nclasses; i++) {
		/* jansson takes UTF-8 only; a NULL here would drop the name
		 * and shift every later label onto the wrong class. */
		if (json_array_append_new(names,
		    json_string(m->classes[i])) != 0) {
			json_decref(names);
			json_decref(counts);
			json_decref(info);
			sk_error_set(err, SK_EINVAL, "class name %zu is not "
			    "UTF-8", i);
			return NULL;
		}
		json_array_append_new(counts, json_integer(m->class_counts ?
		    (json_int_t)m->class_counts[i] : 0));
	}
	json_object_set_new(info, "classes", names);
	json_object_set_new(info, "class_counts", counts);
	return info;
}

char *
sk_manifest_dumps(const struct sk_manifest *m, struct sk_error *err)
{
	json_t *root, *list, *s, *info;
	char *text;
	size_t i;

	if ((info = build_info(m, err)) == NULL)
		return NULL;
	root = json_object();
	list = json_array();
	json_object_set_new(root, "__kind__", json_string(WIDS_KIND));
	json_object_set_new(root, "wids_version", json_integer(1));
	for (i = 0; i < m->nshards; i++) {
		s = json_object();
		if (json_object_set_new(s, "url",
		    json_string(m->shards[i].url)) != 0) {
			json_decref(s);
			json_decref(root);
			json_decref(list);
			json_decref(info);
			sk_error_set(err, SK_EINVAL, "shard URL %s is not UTF-8",
			    m->shards[i].url);
			return NULL;
		}
		json_object_set_new(s, "nsamples",
		    json_integer((json_int_t)m->shards[i].nsamples));
		json_object_set_new(s, "filesize",
		    json_integer((json_int_t)m->shards[i].filesize));
		json_object_set_new(s, "md5sum", json_string(m->shards[i].md5));
		json_array_append_new(list, s);
	}
	json_object_set_new(root, "shardlist", list);
	json_object_set_new(root, "info", info);
	text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(root);
	if (text == NULL)
		sk_error_set(err, SK_ENOMEM, "out of memory");
	return text;
}

int
sk_manifest_write(const char *path, const struct sk_manifest *m,
    struct sk_error *err)
{
	char *text, *nl;
	int rc;

	if ((text = sk_manifest_dumps(m, err)) == NULL)
		return err ? err->code : SK_EINVAL;
	if ((nl = sk__asprintf("%s\n", text)) == NULL)
		rc = sk_error_set(err, SK_ENOMEM, "out of memory");
	else
		rc = sk_atomic_write_file(path, nl, strlen(nl), 0, err);
	free(nl);
	free(text);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* reading                                                                  */

/*
 * What a manifest may make the reader hold. The largest public WebDataset
 * sets list about a million shards at some 150 bytes an entry; these
 * bounds leave room above that and keep a runaway file from costing
 * memory without end (jansson takes several times the text's size).
 */
#define MANIFEST_MAX_BYTES	((uint64_t)256 << 20)
#define MANIFEST_MAX_SHARDS	((size_t)10000000)

static int
is_remote(const char *url)
{
	return strncmp(url, "http://", 7) == 0 ||
	    strncmp(url, "https://", 8) == 0 ||
	    strncmp(url, "gs://", 5) == 0 || strncmp(url, "s3://", 5) == 0;
}

/* The whole file, NUL-terminated. Only a regular file: a FIFO would block
 * the reader until a writer came (O_NONBLOCK keeps the open from waiting). */
static char *
read_text(const char *path, size_t *len, struct sk_error *err)
{
	struct stat st;
	char *buf = NULL;
	size_t n = 0;
	ssize_t got;
	int fd, e;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0) {
		sk_error_set(err, sk_errno_code(errno), "%s: %s", path,
		    strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) != 0) {
		e = errno;
		sk_error_set(err, sk_errno_code(e), "%s: %s", path,
		    strerror(e));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		sk_error_set(err, SK_EINVAL, "%s: not a regular file (%s)", path,
		    S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ?
		    "a fifo" : "a device or socket");
		goto out;
	}
	if ((uint64_t)st.st_size > MANIFEST_MAX_BYTES) {
		sk_error_set(err, SK_ETOOBIG, "%s: %llu bytes; a manifest may "
		    "have at most %llu", path, (unsigned long long)st.st_size,
		    (unsigned long long)MANIFEST_MAX_BYTES);
		goto out;
	}
	if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
		sk_error_set(err, SK_ENOMEM, "out of memory");
		goto out;
	}
	/* Up to the size fstat saw: a file still growing is cut there and
	 * then fails to parse, rather than growing the buffer. */
	while (n < (size_t)st.st_size) {
		got = read(fd, buf + n, (size_t)st.st_size - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			e = errno;
			sk_error_set(err, sk_errno_code(e), "%s: %s", path,
			    strerror(e));
			free(buf);
			buf = NULL;
			goto out;
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	buf[n] = '\0';
	*len = n;
out:
	close(fd);
	return buf;
}

static int
read_info(json_t *info, struct sk_manifest *m, const char *path,
    struct sk_error *err)
{
	json_t *names = json_object_get(info, "classes");
	json_t *counts = json_object_get(info, "class_counts");
	json_t *rest, *c;
	size_t i, n;

	if (names != NULL && json_is_array(names)) {
		n = json_array_size(names);
		m->classes = calloc(n ? n : 1, sizeof *m->classes);
		m->class_counts = calloc(n ? n : 1, sizeof *m->class_counts);
		if (m->classes == NULL || m->class_counts == NULL)
			return sk_error_set(err, SK_ENOMEM, "out of memory");
		for (i = 0; i < n; i++) {
			const char *s = json_string_value(
			    json_array_get(names, i));
			if (s == NULL)
				return sk_error_set(err, SK_EFORMAT,
				    "%s: info.classes[%zu] is not a string",
				    path, i);
			if ((m->classes[i] = strdup(s)) == NULL)
				return sk_error_set(err, SK_ENOMEM,
				    "out of memory");
			m->nclasses++;
			c = json_is_array(counts) ?
			    json_array_get(counts, i) : NULL;
			if (json_is_integer(c) && json_integer_value(c) < 0)
				return sk_error_set(err, SK_EFORMAT,
				    "%s: info.class_counts[%zu] is negative",
				    path, i);
			if (json_is_integer(c))
				m->class_counts[i] = (uint64_t)
				    json_integer_value(c);
		}
	}
	rest = json_deep_copy(info);
	json_object_del(rest, "classes");
	json_object_del(rest, "class_counts");
	if (json_object_size(rest) > 0)
		m->info_extra = json_dumps(rest, JSON_COMPACT |
		    JSON_PRESERVE_ORDER);
	json_decref(rest);
	return 0;
}

/* A count or a size: a JSON integer >= 0 (jansson refuses integers past
 * int64 when it parses). A real such as 1.5 or 1e3 is refused too. */
static int
get_count(json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* Compressed shards hold more samples than their size allows a plain tar.
 * (wids itself reads plain tars only.) */
static int
compressed_name(const char *url)
{
	static const char *const ext[] = { ".gz", ".tgz", ".zst", ".zstd",
	    ".tzst" };
	size_t n = strcspn(url, "?#"), i, k;

	for (i = 0; i < sizeof ext / sizeof ext[0]; i++) {
		k = strlen(ext[i]);
		if (n >= k && strncasecmp(url + n - k, ext[i], k) == 0)
			return 1;
	}
	return 0;
}

/* One shardlist entry, checked: the values a stale or hostile manifest
 * could carry would otherwise plan samples that are not there. */
static int
read_shard(json_t *s, size_t i, struct sk_manifest_shard *out,
    const char *path, struct sk_error *err)
{
	json_t *fs = json_object_get(s, "filesize");
	json_t *md5 = json_object_get(s, "md5sum");
	const char *url, *hex;
	uint64_t most;
	size_t k;

	url = json_string_value(json_object_get(s, "url"));
	if (!json_is_object(s) || url == NULL || url[0] == '\0' ||
	    json_object_get(s, "nsamples") == NULL)
		return sk_error_set(err, SK_EFORMAT, "%s: shardlist[%zu] needs "
		    "\"url\" and \"nsamples\"", path, i);
	if (get_count(json_object_get(s, "nsamples"), &out->nsamples) != 0)
		return sk_error_set(err, SK_EFORMAT, "%s: shardlist[%zu] (%s): "
		    "\"nsamples\" must be an integer >= 0", path, i, url);
	if (fs != NULL && !json_is_null(fs) &&
	    get_count(fs, &out->filesize) != 0)
		return sk_error_set(err, SK_EFORMAT, "%s: shardlist[%zu] (%s): "
		    "\"filesize\" must be an integer >= 0", path, i, url);
	/* Each sample has at least one member, a 512-byte header, and a tar
	 * ends in two zero blocks (POSIX). */
	if (fs != NULL && !json_is_null(fs) && !compressed_name(url)) {
		most = out->filesize >= SK_TAR_TRAILER_BYTES ?
		    (out->filesize - SK_TAR_TRAILER_BYTES) / 512 : 0;
		if (out->nsamples > most)
			return sk_error_set(err, SK_EFORMAT, "%s: shardlist[%zu] "
			    "(%s): \"nsamples\": %llu, but a %llu-byte tar "
			    "holds at most %llu samples (a stale manifest?)",
			    path, i, url, (unsigned long long)out->nsamples,
			    (unsigned long long)out->filesize,
			    (unsigned long long)most);
	}
	if (md5 != NULL && !json_is_null(md5)) {
		hex = json_string_value(md5);
		k = hex != NULL ? strspn(hex, "0123456789abcdefABCDEF") : 0;
		if (hex == NULL || hex[k] != '\0' || (k != 0 && k != 32))
			return sk_error_set(err, SK_EFORMAT, "%s: shardlist[%zu] "
			    "(%s): \"md5sum\" must be 32 hex digits", path, i,
			    url);
		memcpy(out->md5, hex, k + 1);
	}
	if ((out->url = strdup(url)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	return 0;
}

struct url_at {
	const char *url;
	size_t i;
};

static int
cmp_url_at(const void *a, const void *b)
{
	const struct url_at *x = a, *y = b;
	int c = strcmp(x->url, y->url);

	return c != 0 ? c : (x->i > y->i) - (x->i < y->i);
}

/* A shard listed twice would be read twice an epoch: samples invented. */
static int
no_duplicates(const struct sk_manifest *m, const char *path,
    struct sk_error *err)
{
	struct url_at *v;
	size_t i;
	int rc = 0;

	if (m->nshards < 2)
		return 0;
	if ((v = malloc(m->nshards * sizeof *v)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	for (i = 0; i < m->nshards; i++) {
		v[i].url = m->shards[i].url;
		v[i].i = i;
	}
	qsort(v, m->nshards, sizeof *v, cmp_url_at);
	for (i = 1; i < m->nshards && rc == 0; i++)
		if (strcmp(v[i - 1].url, v[i].url) == 0)
			rc = sk_error_set(err, SK_EFORMAT, "%s: shardlist[%zu] "
			    "and shardlist[%zu] both name %s", path,
			    v[i - 1].i, v[i].i, v[i].url);
	free(v);
	return rc;
}

int
sk_manifest_read(const char *path, struct sk_manifest *m,
    struct sk_error *err)
{
	json_t *root = NULL, *list, *s, *info;
	json_error_t jerr;
	const char *kind;
	uint64_t total = 0;
	char *text = NULL, *shown = NULL;
	size_t i, len = 0;
	int rc = 0, remote;

	memset(m, 0, sizeof *m);
	remote = is_remote(path);
	if (remote) {
		/* Over the fetch engine; messages name it without secrets. */
		if ((shown = sk_url_redact(path)) == NULL)
			return sk_error_set(err, SK_ENOMEM, "out of memory");
		rc = sk__read_whole(path, MANIFEST_MAX_BYTES, &text, &len, err);
		path = shown;
		if (rc != 0)
			goto out;
	} else if (strstr(path, "://") != NULL) {
		/* file://, or a scheme the parser names as unsupported
		 * (htp://...), not a file of that name that is not there. */
		struct sk_url u;

		if ((rc = sk_url_parse(path, &u, err)) != 0)
			return rc;
		text = read_text(u.path, &len, err);
		sk_url_free(&u);
		if (text == NULL)
			return err != NULL ? err->code : SK_EIO;
	} else if ((text = read_text(path, &len, err)) == NULL)
		return err != NULL ? err->code : SK_EIO;
	/* Duplicate keys: {"nsamples": 1, "nsamples": 9} means no one thing. */
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	free(text);
	if (root == NULL) {
		rc = sk_error_set(err, SK_EFORMAT, "%s: line %d: %s", path,
		    jerr.line, jerr.text);
		goto out;
	}
	kind = json_string_value(json_object_get(root, "__kind__"));
	list = json_object_get(root, "shardlist");
	if (kind == NULL || strcmp(kind, WIDS_KIND) != 0 ||
	    !json_is_array(list)) {
		rc = sk_error_set(err, SK_EFORMAT,
		    "%s: not a wids shard index (want \"__kind__\": \"%s\" "
		    "and a \"shardlist\" array)", path, WIDS_KIND);
		goto out;
	}
	if (json_array_size(list) > MANIFEST_MAX_SHARDS) {
		rc = sk_error_set(err, SK_ETOOBIG, "%s: %zu shards; a manifest "
		    "may list at most %zu", path, json_array_size(list),
		    MANIFEST_MAX_SHARDS);
		goto out;
	}
	if (json_array_size(list) > 0 && (m->shards = calloc(
	    json_array_size(list), sizeof *m->shards)) == NULL) {
		rc = sk_error_set(err, SK_ENOMEM, "out of memory");
		goto out;
	}
	json_array_foreach(list, i, s) {
		if ((rc = read_shard(s, i, &m->shards[i], path, err)) != 0)
			goto out;
		m->nshards++;
		/* A server's manifest must not send the reader to this
		 * machine's files (or any other scheme). */
		if (remote && strstr(m->shards[i].url, "://") != NULL &&
		    !is_remote(m->shards[i].url)) {
			rc = sk_error_set(err, SK_EINVAL, "%s: shardlist[%zu]: "
			    "a remote manifest may name only remote shards "
			    "(http, https, gs, s3)", path, i);
			goto out;
		}
		/* Counts are added up into a uint64_t by every reader. */
		if (m->shards[i].nsamples > (uint64_t)INT64_MAX - total) {
			rc = sk_error_set(err, SK_EFORMAT, "%s: the shards' "
			    "\"nsamples\" add up past 2^63 at shardlist[%zu]",
			    path, i);
			goto out;
		}
		total += m->shards[i].nsamples;
	}
	if ((rc = no_duplicates(m, path, err)) != 0)
		goto out;
	info = json_object_get(root, "info");
	if (json_is_object(info))
		rc = read_info(info, m, path, err);
out:
	json_decref(root);
	free(shown);
	if (rc != 0)
		sk_manifest_free(m);
	return rc;
}

char *
sk_manifest_resolve(const char *manifest_path, const char *url)
{
	const char *slash, *host, *end;

	/* wids: relative shard URLs are relative to the index's location. */
	if (strstr(url, "://") != NULL)
		return strdup(url);
	if (is_remote(manifest_path)) {
		/* RFC 3986 5.2: "/x" keeps the origin, "x" the folder; the
		 * manifest's own query is not part of its folder. */
		host = strstr(manifest_path, "://") + 3;
		end = host + strcspn(host, "/?#");
		if (url[0] == '/')
			return sk__asprintf("%.*s%s", (int)(end - manifest_path),
			    manifest_path, url);
		end = end + strcspn(end, "?#");
		for (slash = end; slash > host && slash[-1] != '/'; slash--)
			;
		if (slash == host)
			return sk__asprintf("%.*s/%s", (int)(end -
			    manifest_path), manifest_path, url);
		return sk__asprintf("%.*s%s", (int)(slash - manifest_path),
		    manifest_path, url);
	}
	if (url[0] == '/')
		return strdup(url);
	slash = strrchr(manifest_path, '/');
	if (slash == NULL)
		return strdup(url);
	return sk__asprintf("%.*s/%s", (int)(slash - manifest_path),
	    manifest_path, url);
}

/* The origin of a parsed URL: scheme, host (case folded) and port; for a
 * bucket, its scheme and name. */
static int
same_origin(const struct sk_url *a, const struct sk_url *b)
{
	if (a->scheme != b->scheme || a->host == NULL || b->host == NULL)
		return 0;
	if (a->scheme == SK_SCHEME_GS || a->scheme == SK_SCHEME_S3)
		return strcmp(a->host, b->host) == 0;
	return strcasecmp(a->host, b->host) == 0 && a->port == b->port;
}

int
sk_manifest_check_origin(const char *manifest_path, const char *shard,
    struct sk_error *err)
{
	struct sk_fetch_config c;
	struct sk_url m, u;
	struct sk_error e;
	char *sm, *ss;
	int ok, rc;

	if (!is_remote(manifest_path))
		return 0;
	sk_fetch_get_config(&c);
	if (c.allow_cross_origin)
		return 0;
	memset(&m, 0, sizeof m);
	memset(&u, 0, sizeof u);
	ok = sk_url_parse(manifest_path, &m, &e) == 0 &&
	    sk_url_parse(shard, &u, &e) == 0 && same_origin(&m, &u);
	sk_url_free(&m);
	sk_url_free(&u);
	if (ok)
		return 0;
	sm = sk_url_redact(manifest_path);
	ss = sk_url_redact(shard);
	rc = sk_error_set(err, SK_EACCES, "%s: the manifest names %s, which "
	    "is not on its own origin: a manifest from the network may name "
	    "only shards beside it (same scheme, host and port, or the same "
	    "bucket); --allow-cross-origin reads it anyway", sm ? sm :
	    "manifest", ss ? ss : "a shard");
	free(sm);
	free(ss);
	return rc;
}
