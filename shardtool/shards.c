/*
 * shards.c - the shard list from URL and manifest arguments, the library's
 * sample reader opened on a URL, the entries extract refuses (verify reports
 * the same ones), and output helpers.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shards.h"

/* ------------------------------------------------------------------------ */
/* options                                                                  */

static struct cli_remote remote;
static cli_setter inner_set;

static void
remote_set(void *ctx, const struct cli_option *o, const struct cli_value *v)
{
	if (cli_remote_set(&remote, o, v))
		return;
	if (inner_set != NULL)
		inner_set(ctx, o, v);
}

int
shards_parse(const struct cli_command *cmd, int argc, char **argv,
    cli_setter set, void *ctx)
{
	int first;

	cli_remote_init(&remote);
	inner_set = set;
	first = cli_parse(cmd, argc, argv, remote_set, ctx);
	cli_remote_finish(&remote);
	return first;
}

/* ------------------------------------------------------------------------ */
/* shard lists                                                              */

static void push_shard(struct shard_list *l, char *url,
    const struct sk_manifest_shard *expect, size_t nclasses);

/* A folder argument: its tar files, sorted. */
static void
push_folder(struct shard_list *out, const char *url)
{
	struct sk_strlist l = { 0 }, mans = { 0 };
	struct sk_error err;
	char *note;
	size_t i;

	if (sk_source_list_shards_seen(url, &l, &mans, &err) != 0)
		die("%s", err.msg);
	for (i = 0; i < l.n; i++)
		push_shard(out, xstrdup(l.v[i]), NULL, 0);
	/* As the loader reads a folder: its .tar files, not a manifest
	 * beside them; say so. */
	if ((note = sk_source_folder_note(url, l.n, &mans, "read",
	    "read")) != NULL && !cli_quiet)
		warn("%s", note);
	free(note);
	sk_strlist_free(&l);
	sk_strlist_free(&mans);
}

static void
push_shard(struct shard_list *l, char *url,
    const struct sk_manifest_shard *expect, size_t nclasses)
{
	l->v = xrealloc(l->v, (l->n + 1) * sizeof *l->v);
	l->v[l->n].url = url;
	if ((l->v[l->n].shown = sk_url_redact(url)) == NULL)
		die("out of memory");
	l->v[l->n].expect = expect;
	l->v[l->n].nclasses = nclasses;
	l->n++;
}

void
shards_expand(int argc, char **argv, struct shard_list *out)
{
	struct sk_strlist urls = { 0 };
	struct sk_manifest *m;
	struct sk_error err;
	char *url;
	size_t i, j;

	memset(out, 0, sizeof *out);
	if (argc == 0)
		usage_error("no URL given");
	expand_args(argc, argv, &urls);
	for (i = 0; i < urls.n; i++) {
		if (urls.v[i][0] != '\0' &&
		    urls.v[i][strlen(urls.v[i]) - 1] == '/') {
			push_folder(out, urls.v[i]);
			continue;
		}
		if (!cli_is_manifest(urls.v[i])) {
			push_shard(out, xstrdup(urls.v[i]), NULL, 0);
			continue;
		}
		m = xcalloc(1, sizeof *m);
		if (sk_manifest_read(urls.v[i], m, &err) < 0)
			die("%s", err.msg);
		out->manifests = xrealloc(out->manifests,
		    (out->nmanifests + 1) * sizeof *out->manifests);
		out->manifests[out->nmanifests++] = m;
		for (j = 0; j < m->nshards; j++) {
			url = sk_manifest_resolve(urls.v[i], m->shards[j].url);
			if (url == NULL)
				die("%s: cannot resolve %s", urls.v[i],
				    m->shards[j].url);
			if (sk_manifest_check_origin(urls.v[i], url, &err) != 0)
				die("%s", err.msg);
			push_shard(out, url, &m->shards[j], m->nclasses);
		}
	}
	sk_strlist_free(&urls);
}

void
shards_free(struct shard_list *l)
{
	size_t i;

	for (i = 0; i < l->n; i++) {
		free(l->v[i].url);
		free(l->v[i].shown);
	}
	for (i = 0; i < l->nmanifests; i++) {
		sk_manifest_free(l->manifests[i]);
		free(l->manifests[i]);
	}
	free(l->v);
	free(l->manifests);
	memset(l, 0, sizeof *l);
}

/* ------------------------------------------------------------------------ */
/* reading samples                                                          */

int
samples_open(const char *url, int tar_flags, sk_sample_reader **r,
    struct sk_error *err)
{
	return samples_open_md5(url, tar_flags, r, NULL, err);
}

int
samples_open_md5(const char *url, int tar_flags, sk_sample_reader **r,
    sk_source **md5, struct sk_error *err)
{
	struct sk_sample_reader_opts o = { .tar_flags = tar_flags };
	sk_source *src = NULL;
	int rc;

	*r = NULL;
	if ((rc = sk_source_open(&src, url)) < 0 ||
	    (md5 != NULL && (rc = sk_source_md5_start(src)) < 0)) {
		sk_error_set(err, rc, "%s", src != NULL ? sk_errmsg(src) :
		    sk_strerror(rc));
		sk_source_close(src);
		return rc;
	}
	if (md5 != NULL)
		*md5 = src;
	/* The reader owns src from here on, also when it fails. */
	if ((rc = sk_sample_reader_open(r, src, &o)) < 0) {
		sk_error_set(err, rc, "%s", *r != NULL ? sk_errmsg(*r) :
		    sk_strerror(rc));
		sk_sample_reader_close(*r);
		*r = NULL;
	}
	return rc;
}

size_t
sample_whole(const struct sk_sample *s, int rc)
{
	if (rc >= 0 || s->n == 0)
		return s->n;
	/* A sample cut off at the member cap lost the member after them. */
	if (s->n == SK_SAMPLE_MAX_MEMBERS)
		return s->n;
	return s->n - 1;
}

void
warn_too_big(const char *url, const struct sk_sample *s)
{
	char *shown = sk_url_redact(url);

	warn("%s: key %s at offset %" PRIu64 ": sample of %" PRIu64 " bytes "
	    "is over the limit of %" PRIu64 " bytes; skipped", shown ? shown :
	    "(out of memory)", s->key, s->offset, s->bytes,
	    SK_SAMPLE_MAX_BYTES);
	free(shown);
}

/* ------------------------------------------------------------------------ */
/* entries extract refuses                                                  */

void
path_split(struct path *p, const char *s)
{
	char *save = NULL, *tok;

	p->buf = xstrdup(s);
	p->c = xcalloc(strlen(s) / 2 + 2, sizeof *p->c);
	p->n = 0;
	for (tok = strtok_r(p->buf, "/", &save); tok != NULL;
	    tok = strtok_r(NULL, "/", &save))
		if (strcmp(tok, ".") != 0)
			p->c[p->n++] = tok;
}

void
path_free(struct path *p)
{
	free(p->buf);
	free(p->c);
}

const char *
path_unsafe(const char *s, const struct path *p)
{
	size_t i;

	if (s[0] == '/')
		return "absolute path";
	for (i = 0; i < p->n; i++)
		if (strcmp(p->c[i], "..") == 0)
			return "path with a \"..\" component";
	return NULL;
}

/*
 * A symbolic link at depth (folders under DIR) may point to target when
 * the target is relative and all its ".." components come first and climb
 * no higher than DIR. Lexically resolving "a/../.." would allow too much:
 * the kernel follows a link in "a" before applying "..", so a chain of
 * such links could climb out.
 */
static const char *
symlink_unsafe(const char *target, size_t depth)
{
	struct path p;
	const char *why = NULL;
	size_t i, up = 0;

	if (target[0] == '\0')
		return "empty target";
	if (target[0] == '/')
		return "absolute target";
	path_split(&p, target);
	for (i = 0; i < p.n && why == NULL; i++) {
		if (strcmp(p.c[i], "..") != 0)
			continue;
		if (i > up)
			why = "\"..\" after a name in the target";
		else if (++up > depth)
			why = "target outside the folder";
	}
	path_free(&p);
	return why;
}

const char *
entry_refused(const char *name, enum sk_tar_type type, const char *linkname,
    char *why, size_t cap)
{
	struct path p, t;
	const char *bad = NULL;

	if (linkname == NULL)
		linkname = "";
	path_split(&p, name);
	if ((bad = path_unsafe(name, &p)) != NULL)
		snprintf(why, cap, "%s", bad);
	else if (p.n == 0)
		;	/* "." or "./": the folder itself */
	else if (type == SK_TAR_SYMLINK &&
	    (bad = symlink_unsafe(linkname, p.n - 1)) != NULL)
		snprintf(why, cap, "symbolic link to %s: %s", linkname, bad);
	else if (type == SK_TAR_OTHER)
		snprintf(why, cap, "%s", bad = "not a file, folder or link");
	else if (type == SK_TAR_HARDLINK) {
		path_split(&t, linkname);
		if ((bad = path_unsafe(linkname, &t)) != NULL || t.n == 0)
			snprintf(why, cap, "hard link to %s: %s", linkname,
			    bad = bad != NULL ? bad : "empty target");
		path_free(&t);
	}
	path_free(&p);
	return bad != NULL ? why : NULL;
}

/* ------------------------------------------------------------------------ */
/* output                                                                   */

void
flush_stdout(void)
{
	if (fflush(stdout) != 0 || ferror(stdout))
		die("stdout: %s", strerror(errno != 0 ? errno : EIO));
}
