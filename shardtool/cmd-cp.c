/*
 * cmd-cp.c - "shardtool cp SRC DST": copy a dataset (its shards, then its
 * manifest) between local folders, buckets (gs://, s3://) and, as a
 * source, http(s) servers, resumable as "aws s3 sync" is: an object the
 * destination already holds with the same size and MD5 is not sent again.
 *
 * Each shard is read once, its MD5 taken on the way (sk_source_md5_*),
 * and checked against the manifest before it is kept. Into a bucket it is
 * staged and handed to the uploader pack uses (upload.c); into a folder it
 * is written beside its final name and renamed (sk_atomic). The manifest
 * goes last, once every shard it names is there; an earlier one at the
 * destination is removed first, so a copy that stops leaves none.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shards.h"
#include "upload.h"

static int cp_exec(int, char **);

enum { OPT_DRY_RUN = 1, OPT_JSON };

static const struct cli_option cp_options[] = {
	{ "dry-run", 'n', OPT_DRY_RUN, CLI_FLAG, NULL,
	    "say what would be copied and what is already there;\n"
	    "write nothing", 0, 0, NULL, 0 },
	{ "json", 0, OPT_JSON, CLI_STRING, "FILE",
	    "write the counts as JSON (- for stdout)", 0, 0, NULL, 0 },
	OPT_END
};

static const struct cli_group cp_groups[] = {
	{ "cp", cp_options }, SHARDS_REMOTE_GROUP, { NULL, NULL }
};

const struct cli_command cmd_cp_entry = {
	.name = "cp",
	.usage = "cp [--dry-run] [--json FILE] SRC DST",
	.summary = "copy a dataset between folders and buckets",
	.about =
	    "Copy a dataset's shards, then its manifest, to the folder or\n"
	    "bucket prefix DST (a local folder, gs://BUCKET/PREFIX/ or\n"
	    "s3://BUCKET/PREFIX/). SRC is a manifest NAME.json (a path or an\n"
	    "http(s), gs:// or s3:// URL), or a folder of .tar shards. A shard\n"
	    "DST already holds with the same size and MD5 is not copied again,\n"
	    "so a stopped copy run again sends only what is missing. Each\n"
	    "shard copied is checked against the manifest's size and MD5. The\n"
	    "manifest is written last, its shard URLs relative as they were;\n"
	    "a copy that fails leaves no manifest at DST. A bucket is not\n"
	    "made: one that does not exist is an error.\n",
	.groups = cp_groups,
	.min_args = 2,
	.max_args = 2,
	.exec = cp_exec,
};

/* ------------------------------------------------------------------------ */
/* the plan                                                                 */

struct item {
	char *src;		/* the shard's URL */
	char *shown;		/* src for messages: redacted, escaped */
	char *rel;		/* its name under DST */
	char *dst;		/* DST + rel: a URL, or a local path */
	char *dst_shown;	/* dst for messages */
	uint64_t size;		/* from the manifest, 0: not given */
	const char *md5;	/* from the manifest, NULL: not given */
};

struct cp {
	int dry_run;
	const char *json;
	const char *src, *dst_arg;
	char *dst;		/* DST with its '/', a local path or a URL */
	int remote;		/* DST is a bucket */
	char *src_manifest;	/* SRC when it is a manifest */
	char *dst_manifest;	/* where the manifest goes, or NULL */
	struct sk_manifest man;
	int rewritten;		/* a shard URL had to change */
	struct item *v;
	size_t n;
	char *note;		/* a folder's manifests left unread */

	/* the run */
	struct cli_progress prog;
	double t0;
	size_t done;
	uint64_t moved;		/* bytes read from SRC */
	uint64_t inflight;	/* of the shard being read */
	uint64_t total;		/* of the manifest's sizes, 0: unknown */
	uint64_t copied, unchanged, verified;
	uint64_t bytes, copied_bytes;
	struct uploader *up;
};

/* A URL for messages: without a password or signature, and escaped. */
static char *
shown(const char *url)
{
	char *r = sk_url_redact(url), buf[1024];

	if (r == NULL)
		die("out of memory");
	sk_escape(buf, sizeof buf, r, strlen(r), 0);
	free(r);
	return xstrdup(buf);
}

static int
is_http_url(const char *s)
{
	return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0;
}

static char *
join(const char *dir, const char *name)
{
	char *s;

	if (asprintf(&s, "%s%s", dir, name) < 0)
		die("out of memory");
	return s;
}

/* The last path segment of a URL or path, before any query. */
static char *
base_name(const char *url)
{
	size_t end = is_http_url(url) ? strcspn(url, "?#") : strlen(url);
	size_t b = end;

	while (b > 0 && url[b - 1] != '/')
		b--;
	return strndup(url + b, end - b);
}

/* A manifest's shard URL may stay as it is at DST when it is relative and
 * stays below the manifest's folder. */
static int
rel_ok(const char *url)
{
	struct path p;
	int ok;

	if (url[0] == '/' || strstr(url, "://") != NULL ||
	    strpbrk(url, "?#") != NULL)
		return 0;
	path_split(&p, url);
	ok = p.n > 0 && path_unsafe(url, &p) == NULL;
	path_free(&p);
	return ok;
}

static void
add_item(struct cp *c, const char *src, const char *rel, uint64_t size,
    const char *md5)
{
	struct item *it;
	size_t i;

	c->v = xrealloc(c->v, (c->n + 1) * sizeof *c->v);
	it = &c->v[c->n];
	it->src = xstrdup(src);
	it->shown = shown(src);
	it->rel = xstrdup(rel);
	it->dst = join(c->dst, rel);
	it->dst_shown = shown(it->dst);
	for (i = 0; i < c->n; i++)
		if (strcmp(c->v[i].rel, rel) == 0)
			die("%s and %s would both be %s", c->v[i].shown,
			    it->shown, it->dst_shown);
	c->n++;
	it->size = size;
	it->md5 = md5 != NULL && md5[0] != '\0' ? md5 : NULL;
	c->total += size;
}

static void
plan_manifest(struct cp *c)
{
	struct sk_error err;
	char *url, *rel, *name;
	size_t i;

	if (sk_manifest_read(c->src, &c->man, &err) < 0)
		die("%s", err.msg);
	if (c->man.nshards == 0)
		die("%s: the manifest names no shard", c->src_manifest);
	for (i = 0; i < c->man.nshards; i++) {
		struct sk_manifest_shard *s = &c->man.shards[i];

		if ((url = sk_manifest_resolve(c->src, s->url)) == NULL)
			die("out of memory");
		if (sk_manifest_check_origin(c->src, url, &err) != 0)
			die("%s", err.msg);
		/* wids resolves a relative URL against the manifest's
		 * folder: kept as it is, it names the copy. Any other
		 * goes beside the manifest under its own name. */
		if (rel_ok(s->url))
			rel = xstrdup(s->url);
		else {
			if ((rel = base_name(url)) == NULL || rel[0] == '\0')
				die("%s: shard %zu (%s) has no file name to copy "
				    "it under", c->src_manifest, i, s->url);
			free(s->url);
			s->url = xstrdup(rel);
			c->rewritten = 1;
		}
		add_item(c, url, rel, s->filesize, s->md5);
		free(rel);
		free(url);
	}
	if ((name = base_name(c->src)) == NULL)
		die("out of memory");
	c->dst_manifest = join(c->dst, name);
	free(name);
}

/* A folder: its .tar files, under their names. What else it holds that a
 * user may have meant (a manifest) is said, not copied. */
static void
plan_folder(struct cp *c)
{
	struct sk_strlist l = { 0 }, jsons = { 0 };
	struct sk_error err;
	char *name, *folder;
	size_t i;

	folder = c->src[strlen(c->src) - 1] == '/' ? xstrdup(c->src) :
	    join(c->src, "/");
	if (sk_source_list_shards_seen(folder, &l, &jsons, &err) != 0)
		die("%s", err.msg);
	for (i = 0; i < l.n; i++) {
		if ((name = base_name(l.v[i])) == NULL)
			die("out of memory");
		add_item(c, l.v[i], name, 0, NULL);
		free(name);
	}
	c->note = sk_source_folder_note(folder, l.n, &jsons, "copying",
	    "copy");
	sk_strlist_free(&l);
	sk_strlist_free(&jsons);
	free(folder);
}

/* ------------------------------------------------------------------------ */
/* the destination                                                          */

/* DST as a folder: checked, made when local, its bucket there. */
static void
open_destination(struct cp *c)
{
	struct sk_strlist l = { 0 };
	struct sk_error err;
	struct sk_url u;
	const char *d = c->dst_arg;
	char *s;

	if (is_http_url(d))
		usage_error("%s: cannot write to an http(s) URL; DST is a "
		    "folder, gs://BUCKET/PREFIX/ or s3://BUCKET/PREFIX/", d);
	if (strncmp(d, "file://", 7) == 0) {
		if (sk_url_parse(d, &u, &err) != 0)
			usage_error("%s", err.msg);
		d = s = xstrdup(u.path);
		sk_url_free(&u);
	} else
		s = NULL;
	c->remote = is_bucket_url(d);
	if (strstr(d, "://") != NULL && !c->remote)
		usage_error("%s: DST is a folder, gs://BUCKET/PREFIX/ or "
		    "s3://BUCKET/PREFIX/", d);
	c->dst = d[strlen(d) - 1] == '/' ? xstrdup(d) : join(d, "/");
	free(s);
	if (!c->remote) {
		if (!c->dry_run)
			mkdir_p(c->dst);
		return;
	}
	if (sk_url_parse(c->dst, &u, &err) != 0)
		usage_error("%s", err.msg);
	/* Making a bucket is the cloud's job (its region, billing and
	 * access are the owner's choice): one that is not there stops the
	 * copy before anything is read. */
	if (sk_source_list(c->dst, &l, &err) != 0) {
		if (err.code == SK_ENOENT)
			die("%s: there is no bucket %s (%s); make it first "
			    "(%s %s://%s): cp does not make buckets", c->dst,
			    u.host, err.msg, u.scheme == SK_SCHEME_GS ?
			    "gcloud storage buckets create" : "aws s3 mb",
			    sk_scheme_name(u.scheme), u.host);
		die("%s", err.msg);
	}
	sk_strlist_free(&l);
	sk_url_free(&u);
}

/* Refuse to copy a folder onto itself: every shard would be "unchanged"
 * and the manifest rewritten in place. */
static void
check_not_same(struct cp *c)
{
	char *sdir = xstrdup(c->src), *p;
	char a[4096], b[4096];
	int same;

	if (c->src_manifest != NULL) {
		if ((p = strrchr(sdir, '/')) != NULL)
			p[1] = '\0';
		else
			strcpy(sdir, "./");
	} else if (sdir[strlen(sdir) - 1] != '/') {
		p = join(sdir, "/");
		free(sdir);
		sdir = p;
	}
	same = strcmp(sdir, c->dst) == 0 || (!c->remote &&
	    realpath(sdir, a) != NULL && realpath(c->dst, b) != NULL &&
	    strcmp(a, b) == 0);
	free(sdir);
	if (same)
		usage_error("%s and %s are the same folder", c->src,
		    c->dst_arg);
}

/* Remove a manifest DST holds from before: until this copy writes its
 * own, the shards it names may be half replaced. */
static void
remove_old_manifest(struct cp *c)
{
	struct sk_error err;

	if (c->dst_manifest == NULL || c->dry_run)
		return;
	if (c->remote) {
		if (sk_object_delete(c->dst_manifest, &err) != 0 &&
		    err.code != SK_ENOENT)
			die("%s", err.msg);
	} else if (unlink(c->dst_manifest) != 0 && errno != ENOENT)
		die("%s: %s", c->dst_manifest, strerror(errno));
}

/* ------------------------------------------------------------------------ */
/* copying                                                                  */

/* Stop a copy under way, saying what DST holds and what to do. */
static void __attribute__((format(printf, 2, 3), noreturn))
fail_copy(struct cp *c, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	cli_progress_done(&c->prog);
	die("%s; stopped after %zu of %zu shards and no manifest was written "
	    "at %s: run cp again to go on", msg, c->done, c->n, c->dst);
}

static void
progress(struct cp *c)
{
	double dt = cli_now() - c->t0, mb = (c->bytes + c->inflight) / 1e6;
	double rate = dt > 0 ? c->moved / 1e6 / dt : 0.0;

	if (c->total > 0)
		cli_progress(&c->prog, "%zu/%zu shards, %.1f/%.1f MB, %.1f MB/s, "
		    "%zu left", c->done, c->n, mb, c->total / 1e6, rate,
		    c->n - c->done);
	else
		cli_progress(&c->prog, "%zu/%zu shards, %.1f MB, %.1f MB/s, "
		    "%zu left", c->done, c->n, mb, rate, c->n - c->done);
}

/* Whether DST already holds the manifest's bytes for it; a store that
 * will not say gets the copy. */
static int
already_there(const struct item *it)
{
	struct sk_error err;
	int same = 0;

	if (it->md5 == NULL)
		return 0;
	if (sk_object_same(it->dst, it->size, it->md5, &same, &err) != 0)
		return 0;
	return same;
}

/* Read it->src into path (a new file, renamed into place when done) with
 * its size and MD5, checked against the manifest. Dies naming the shard
 * when it cannot be read or is not what the manifest says. */
static void
fetch(struct cp *c, const struct item *it, struct sk_atomic *a,
    uint64_t *size, char md5[33])
{
	static uint8_t buf[1 << 20];
	sk_source *s = NULL;
	int64_t got;
	int rc;

	c->inflight = 0;
	if ((rc = sk_source_open(&s, it->src)) < 0 ||
	    (rc = sk_source_md5_start(s)) < 0) {
		sk_atomic_abort(a);
		fail_copy(c, "%s", s != NULL ? sk_errmsg(s) : sk_strerror(rc));
	}
	while ((got = sk_source_read(s, buf, sizeof buf)) > 0) {
		struct sk_error err;

		if (sk_atomic_write_all(a, buf, (size_t)got, &err) != 0) {
			sk_atomic_abort(a);
			fail_copy(c, "%s", err.msg);
		}
		c->moved += (uint64_t)got;
		c->inflight += (uint64_t)got;
		if (cli_progress_due(&c->prog))
			progress(c);
	}
	if (got < 0 || sk_source_md5_end(s, size, md5) < 0) {
		sk_atomic_abort(a);
		fail_copy(c, "%s", sk_errmsg(s));
	}
	sk_source_close(s);
	c->inflight = 0;
	/* Nothing is lost silently: what the manifest promises is what is
	 * kept. */
	if ((it->size > 0 || it->md5 != NULL) && *size != it->size) {
		sk_atomic_abort(a);
		fail_copy(c, "%s: %" PRIu64 " bytes, the manifest says %" PRIu64
		    "; not copied", it->shown, *size, it->size);
	}
	if (it->md5 != NULL && strcasecmp(md5, it->md5) != 0) {
		sk_atomic_abort(a);
		fail_copy(c, "%s: MD5 %s, the manifest says %s; not copied",
		    it->shown, md5, it->md5);
	}
}

static void
copy_one(struct cp *c, const struct item *it)
{
	struct sk_atomic a;
	struct sk_error err;
	uint64_t size;
	char md5[33], *path, *dir;
	int same = 0;

	if (already_there(it)) {
		c->unchanged++;
		c->bytes += it->size;
		return;
	}
	if (c->remote)
		path = stage_path(c->up, it->dst);
	else {
		path = xstrdup(it->dst);
		/* A manifest's "sub/x.tar" keeps its folder. */
		if (strchr(it->rel, '/') != NULL) {
			dir = xstrdup(path);
			*strrchr(dir, '/') = '\0';
			mkdir_p(dir);
			free(dir);
		}
	}
	if (sk_atomic_open(&a, path, c->remote ? SK_ATOMIC_NOSYNC : 0, 0644,
	    &err) != 0)
		fail_copy(c, "%s", err.msg);
	fetch(c, it, &a, &size, md5);
	c->verified += it->md5 != NULL;
	c->bytes += size;
	/* Without a manifest's MD5 the bytes are compared once they are
	 * here: into a folder, with the file there; into a bucket, by the
	 * uploader (sk_object_sync_file). */
	if (!c->remote && it->md5 == NULL &&
	    sk_object_same(it->dst, size, md5, &same, &err) == 0 && same) {
		sk_atomic_abort(&a);
		c->unchanged++;
		free(path);
		return;
	}
	if (sk_atomic_commit(&a, &err) != 0)
		fail_copy(c, "%s", err.msg);
	if (c->remote)
		uploader_add(c->up, path, it->dst, size);	/* takes path */
	else {
		c->copied++;
		c->copied_bytes += size;
		free(path);
	}
}

/* The manifest's bytes as SRC has them, or as rewritten. */
static char *
manifest_text(struct cp *c, size_t *len)
{
	struct sk_error err;
	sk_source *s = NULL;
	uint64_t size;
	int64_t got = 0;
	char *text;

	if (c->rewritten) {
		if ((text = sk_manifest_dumps(&c->man, &err)) == NULL)
			die("%s", err.msg);
		*len = strlen(text);
		return text;
	}
	if (sk_source_open(&s, c->src) < 0 || sk_source_size(s, &size) < 0)
		die("%s", sk_errmsg(s));
	if (size > ((uint64_t)1 << 30))
		die("%s: %" PRIu64 " bytes: too large for a manifest",
		    c->src_manifest, size);
	text = xmalloc((size_t)size + 1);
	*len = 0;
	while (*len < size && (got = sk_source_read(s, text + *len,
	    (size_t)size - *len)) > 0)
		*len += (size_t)got;
	if (got < 0)
		die("%s", sk_errmsg(s));
	if (*len < size)
		die("%s: the manifest ended early", c->src_manifest);
	sk_source_close(s);
	return text;
}

static void
write_manifest(struct cp *c)
{
	struct sk_error err;
	size_t len;
	char *text;

	if (c->dst_manifest == NULL)
		return;
	text = manifest_text(c, &len);
	if ((c->remote ? sk_object_put(c->dst_manifest, text, len, &err) :
	    sk_atomic_write_file(c->dst_manifest, text, len, 0, &err)) != 0)
		die("%s; the %zu shards are at %s", err.msg, c->n, c->dst);
	free(text);
}

/* ------------------------------------------------------------------------ */
/* the run                                                                  */

static void
dry_run(struct cp *c)
{
	size_t i;

	for (i = 0; i < c->n; i++) {
		if (already_there(&c->v[i])) {
			c->unchanged++;
			c->bytes += c->v[i].size;
			printf("unchanged %s\n", c->v[i].dst_shown);
		} else {
			c->copied++;
			c->copied_bytes += c->v[i].size;
			c->bytes += c->v[i].size;
			printf("copy %s -> %s\n", c->v[i].shown,
			    c->v[i].dst_shown);
		}
	}
	if (c->dst_manifest != NULL)
		printf("then the manifest %s\n", c->dst_manifest);
}

static void
summary(struct cp *c, double dt)
{
	FILE *f = c->json != NULL && strcmp(c->json, "-") == 0 ? stderr :
	    stdout;

	char *src;

	if (cli_quiet)
		return;
	src = shown(c->src);
	if (c->dry_run)
		fprintf(f, "dry run, %s to %s: %zu shard%s, %.1f MB; %" PRIu64
		    " to copy (%.1f MB), %" PRIu64 " already there with the "
		    "same size and MD5\n", src, c->dst, c->n, c->n == 1 ? "" :
		    "s", c->bytes / 1e6, c->copied, c->copied_bytes / 1e6,
		    c->unchanged);
	else
		fprintf(f, "copied %s to %s: %zu shard%s, %.1f MB, in %.2f s; "
		    "%" PRIu64 " sent (%.1f MB, %.1f MB/s), %" PRIu64 " already "
		    "there with the same size and MD5, not sent\n", src, c->dst,
		    c->n, c->n == 1 ? "" : "s", c->bytes / 1e6, dt, c->copied,
		    c->copied_bytes / 1e6, dt > 0 ? c->copied_bytes / 1e6 / dt :
		    0.0, c->unchanged);
	free(src);
	if (c->dst_manifest != NULL)
		fprintf(f, "  manifest: %s%s%s\n", c->dst_manifest,
		    c->dry_run ? " (not written)" : "",
		    c->rewritten ? " (shard URLs that were not relative to it "
		    "now are)" : "");
	if (c->verified > 0)
		fprintf(f, "  checked: %" PRIu64 " shard%s read match%s the "
		    "manifest's size and MD5\n", c->verified,
		    c->verified == 1 ? "" : "s", c->verified == 1 ? "es" : "");
	flush_stdout();
}

static void
write_json(struct cp *c, double dt)
{
	struct cli_json *j = cli_json_open(c->json);

	cli_json_object(j, "config");
	cli_json_source(j, "source", c->src);
	cli_json_str(j, "destination", c->dst);
	cli_json_str(j, "manifest", c->dst_manifest);
	cli_json_bool(j, "dry_run", c->dry_run);
	cli_json_end(j);
	cli_json_object(j, "result");
	cli_json_uint(j, "shards", c->n);
	cli_json_uint(j, "copied_shards", c->copied);
	cli_json_uint(j, "unchanged_shards", c->unchanged);
	cli_json_uint(j, "verified_shards", c->verified);
	cli_json_uint(j, "bytes", c->bytes);
	cli_json_uint(j, "copied_bytes", c->copied_bytes);
	cli_json_real(j, "wall_seconds", dt);
	cli_json_real(j, "bytes_per_second", dt > 0 ? c->copied_bytes / dt :
	    0);
	cli_json_end(j);
	cli_json_close(j);
}

static void
cp_set(void *ctx, const struct cli_option *opt, const struct cli_value *v)
{
	struct cp *c = ctx;

	switch (opt->id) {
	case OPT_DRY_RUN: c->dry_run = 1; break;
	case OPT_JSON: c->json = v->s; break;
	}
}

static int
cp_exec(int argc, char **argv)
{
	struct cp c;
	uint64_t done, unchanged, bytes;
	double dt;
	size_t i;
	int first, queued;

	memset(&c, 0, sizeof c);
	first = shards_parse(&cmd_cp_entry, argc, argv, cp_set, &c);
	c.src = argv[first];
	c.dst_arg = argv[first + 1];
	open_destination(&c);
	if (cli_is_manifest(c.src)) {
		c.src_manifest = shown(c.src);
		plan_manifest(&c);
	} else
		plan_folder(&c);
	check_not_same(&c);
	if (c.note != NULL)
		warn("%s", c.note);
	c.t0 = cli_now();
	if (c.dry_run)
		dry_run(&c);
	else {
		remove_old_manifest(&c);
		cli_progress_init(&c.prog);
		if (c.remote)
			c.up = uploader_start("cp");
		for (i = 0; i < c.n; i++) {
			copy_one(&c, &c.v[i]);
			c.done++;
			if (cli_progress_due(&c.prog))
				progress(&c);
		}
		/* The last line agrees with the summary. */
		progress(&c);
		cli_progress_done(&c.prog);
		if (c.remote) {
			uploader_finish(c.up, c.prog.on);
			uploader_counts(c.up, &done, &unchanged, &bytes,
			    &queued);
			c.unchanged += unchanged;
			c.copied += done - unchanged;
			c.copied_bytes += bytes;
		}
		/* Last: a reader never sees a manifest naming shards that
		 * are not there yet. */
		write_manifest(&c);
		if (c.remote)
			uploader_free(c.up);
	}
	dt = cli_now() - c.t0;
	summary(&c, dt);
	if (c.json != NULL)
		write_json(&c, dt);
	for (i = 0; i < c.n; i++) {
		free(c.v[i].src);
		free(c.v[i].shown);
		free(c.v[i].rel);
		free(c.v[i].dst);
		free(c.v[i].dst_shown);
	}
	free(c.v);
	sk_manifest_free(&c.man);
	free(c.src_manifest);
	free(c.dst_manifest);
	free(c.dst);
	free(c.note);
	return 0;
}
