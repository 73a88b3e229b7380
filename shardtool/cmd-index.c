/*
 * cmd-index.c - index existing shards: a wids manifest (sample count, size
 * and MD5 of each shard) or, with --dali, DALI's per-shard .idx files.
 */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shards.h"

static int cmd_index_exec(int, char **);

enum { OPT_DALI = 1, OPT_OUTPUT };

static const struct cli_option index_options[] = {
	{ "dali", 0, OPT_DALI, CLI_FLAG, NULL, "write DALI .idx files", 0, 0,
	    NULL, 0 },
	{ "output", 'o', OPT_OUTPUT, CLI_STRING, "OUT",
	    "the manifest file, or the folder for .idx files", 0, 0, NULL,
	    0 },
	OPT_END
};
static const struct cli_group index_groups[] = {
	{ "index", index_options }, SHARDS_REMOTE_GROUP, { NULL, NULL }
};

struct index_opts {
	int dali;
	const char *out;
};

static void
index_set(void *ctx, const struct cli_option *o, const struct cli_value *v)
{
	struct index_opts *io = ctx;

	if (o->id == OPT_DALI)
		io->dali = 1;
	else
		io->out = strcmp(v->s, "-") == 0 ? NULL : v->s;
}

const struct cli_command cmd_index_entry = {
	.name = "index",
	.usage = "index [--dali] [-o OUT] URL...",
	.summary = "write a manifest, or DALI index files, for shards",
	.about =
	    "Read each shard and write a wids manifest listing its URL, sample\n"
	    "count, size and MD5: to the file OUT, or to stdout without -o or\n"
	    "with -o -. In a manifest file, a local shard's URL is relative to\n"
	    "the manifest's folder when the shard lies under it, else absolute;\n"
	    "on stdout URLs are written as given.\n"
	    "With --dali, write DALI's index SHARD.idx next to each SHARD.tar,\n"
	    "or into the folder OUT: \"v1.2 N\", then one line per sample of\n"
	    "\"ext offset size name\" for each member (offset of its data).\n"
	    "DALI reads only uncompressed tars: a compressed shard is refused.\n"
	    "Two shards whose .idx files would have one name are refused (a\n"
	    "usage error) before any file is written.\n",
	.groups = index_groups,
	.min_args = 1,
	.max_args = -1,
	.exec = cmd_index_exec
};


/* DALI's index version that carries member names (wds2idx.py). */
#define DALI_INDEX_VERSION "v1.2"

/* ------------------------------------------------------------------------ */
/* reading a shard                                                          */

/* DALI splits index lines on white space, so names must hold none. */
static int
dali_line(const char *url, const struct sk_sample *s, FILE *f,
    struct sk_error *err)
{
	const struct sk_sample_member *sm;
	size_t i;

	for (i = 0; i < s->n; i++) {
		sm = &s->m[i];
		if (sm->ext[0] == '\0' || strpbrk(sm->name, " \t\n\r\v\f"))
			return sk_error_set(err, SK_EUNSUPPORTED, "%s: %s at "
			    "offset %" PRIu64 ": a name without extension or "
			    "with white space has no DALI index line", url,
			    sm->name, sm->header_offset);
		fprintf(f, "%s%s %" PRIu64 " %" PRIu64 " %s", i > 0 ? " " :
		    "", sm->ext, sm->data_offset, sm->size, sm->name);
	}
	fputc('\n', f);
	return 0;
}

/*
 * Count the samples of a shard (runs of one key, as the loader sees them,
 * through the same sample reader) and, when dali is not NULL, write their
 * DALI lines to it. DALI reads members at the offsets of the index in the
 * file itself, so a compressed shard, whose offsets count bytes of the
 * decompressed stream, has no DALI index.
 */
static int
index_shard(const char *url, FILE *dali, uint64_t *nsamples,
    struct sk_error *err)
{
	struct sk_sample s = { 0 };
	sk_sample_reader *r;
	int rc;

	*nsamples = 0;
	if ((rc = samples_open(url, 0, &r, err)) < 0)
		return rc;
	if (dali != NULL && sk_sample_reader_compressed(r)) {
		rc = sk_error_set(err, SK_EUNSUPPORTED, "%s: a compressed "
		    "shard: DALI reads only uncompressed tars, and offsets "
		    "into the decompressed stream would point at the wrong "
		    "bytes; decompress it first", url);
		goto out;
	}
	while ((rc = sk_sample_reader_next(r, &s, NULL, NULL)) > 0) {
		(*nsamples)++;
		if (dali != NULL && (rc = dali_line(url, &s, dali, err)) < 0)
			goto out;
	}
	if (rc < 0)
		sk_error_set(err, rc, "%s", sk_errmsg(r));
out:
	sk_sample_free(&s);
	sk_sample_reader_close(r);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* DALI index files                                                         */

/* SHARD.tar -> SHARD.idx, next to the shard or in the folder dir. */
static char *
dali_path(const char *url, const char *dir, struct sk_error *err)
{
	struct sk_url u;
	const char *base;
	char *path;
	size_t len;

	if (sk_url_parse(url, &u, err) < 0)
		return NULL;
	if (dir == NULL && u.scheme != SK_SCHEME_FILE) {
		sk_error_set(err, SK_EUNSUPPORTED, "%s: cannot write an index "
		    "next to a remote shard; give a folder with -o", url);
		sk_url_free(&u);
		return NULL;
	}
	base = strrchr(u.path, '/');
	base = dir == NULL || base == NULL ? u.path : base + 1;
	len = strcspn(base, "?");	/* an http query is no part of it */
	if (len > 4 && strncmp(base + len - 4, ".tar", 4) == 0)
		len -= 4;
	path = xmalloc((dir != NULL ? strlen(dir) + 1 : 0) + len + 5);
	sprintf(path, "%s%s%.*s.idx", dir != NULL ? dir : "",
	    dir != NULL ? "/" : "", (int)len, base);
	sk_url_free(&u);
	return path;
}

/*
 * Write the index of url to path through the library's atomic writer: a
 * failed run never leaves a truncated index under the final name, and a
 * link planted at any temporary name is never written through.
 */
static int
index_dali(const char *url, const char *path, struct sk_error *err)
{
	char head[64], *body = NULL;
	size_t bodylen = 0, headlen;
	struct sk_atomic a;
	uint64_t nsamples;
	FILE *f;
	int rc;

	/* The sample count heads the file, so the lines wait in memory. */
	if ((f = open_memstream(&body, &bodylen)) == NULL)
		die("open_memstream: %s", strerror(errno));
	rc = index_shard(url, f, &nsamples, err);
	if (fclose(f) != 0)
		die("open_memstream: %s", strerror(errno));
	if (rc >= 0) {
		headlen = (size_t)snprintf(head, sizeof head,
		    DALI_INDEX_VERSION " %" PRIu64 "\n", nsamples);
		if ((rc = sk_atomic_open(&a, path, 0, 0644, err)) == 0) {
			if ((rc = sk_atomic_write_all(&a, head, headlen,
			    err)) == 0 && (rc = sk_atomic_write_all(&a, body,
			    bodylen, err)) == 0)
				rc = sk_atomic_commit(&a, err);
			else
				sk_atomic_abort(&a);
		}
	}
	free(body);
	return rc;
}

/* The file path names, for comparing: its folder as a real path when it
 * exists ("a/./s.idx" and "a/s.idx" are one file). */
static char *
path_key(const char *path)
{
	char *copy, *base, real[PATH_MAX], *key;

	copy = xstrdup(path);
	base = strrchr(copy, '/');
	if (base != NULL)
		*base++ = '\0';
	if (realpath(base == NULL ? "." : *copy == '\0' ? "/" : copy,
	    real) == NULL) {
		free(copy);
		return xstrdup(path);
	}
	key = xmalloc(strlen(real) + strlen(base != NULL ? base : copy) + 2);
	sprintf(key, "%s/%s", real, base != NULL ? base : copy);
	free(copy);
	return key;
}

/*
 * The .idx path of every shard, before anything is read or written. Two
 * shards whose indexes would share a name (the same base name under -o DIR,
 * or S.tar and S side by side) are refused: the second index would replace
 * the first, and DALI would read one shard with the other's offsets.
 */
static char **
dali_paths(const struct shard_list *shards, const char *dir)
{
	struct sk_error err;
	char **paths, **keys, clash[3 * PATH_MAX + 256];
	size_t i, j;

	clash[0] = '\0';
	paths = xcalloc(shards->n, sizeof *paths);
	keys = xcalloc(shards->n, sizeof *keys);
	for (i = 0; i < shards->n; i++) {
		/* A shard with no index path fails alone, as before. */
		if ((paths[i] = dali_path(shards->v[i].url, dir, &err)) ==
		    NULL) {
			warn("%s", err.msg);
			continue;
		}
		keys[i] = path_key(paths[i]);
		/* Few shards per run; a quadratic check costs nothing. */
		for (j = 0; j < i && clash[0] == '\0'; j++)
			if (keys[j] != NULL && strcmp(keys[i], keys[j]) == 0)
				snprintf(clash, sizeof clash, "%s and %s would "
				    "both write the index %s; give shards "
				    "with distinct names, or index them "
				    "separately", shards->v[j].shown,
				    shards->v[i].shown, paths[i]);
		if (clash[0] != '\0')
			break;
	}
	for (i = 0; i < shards->n; i++)
		free(keys[i]);
	free(keys);
	if (clash[0] != '\0') {
		/* Freed first: the exit must leave nothing behind (LSan). */
		for (i = 0; i < shards->n; i++)
			free(paths[i]);
		free(paths);
		usage_error("%s", clash);
	}
	return paths;
}

/* ------------------------------------------------------------------------ */
/* manifests                                                                */

/*
 * The URL a manifest in the folder outdir (a real path) records for a
 * shard: relative when a local shard lies under outdir, since the loader
 * resolves manifest URLs against the manifest's folder; else absolute.
 */
static char *
manifest_url(const char *url, const char *outdir)
{
	char *copy, *dir, real[PATH_MAX], *out;
	const char *base;
	struct sk_url u;
	size_t n;

	if (outdir == NULL || sk_url_parse(url, &u, NULL) < 0)
		return xstrdup(url);
	if (u.scheme != SK_SCHEME_FILE) {
		sk_url_free(&u);
		return xstrdup(url);
	}
	copy = xstrdup(u.path);
	base = strrchr(u.path, '/') != NULL ? strrchr(u.path, '/') + 1 :
	    u.path;
	dir = dirname(copy);
	if (realpath(dir, real) == NULL) {
		out = xstrdup(url);
		goto out;
	}
	n = strlen(outdir);
	if (strcmp(real, outdir) == 0)
		out = xstrdup(base);
	else {
		out = xmalloc(strlen(real) + strlen(base) + 2);
		/* Under outdir: the rest of the path; else all of it. */
		sprintf(out, "%s/%s", strncmp(real, outdir, n) == 0 &&
		    real[n] == '/' ? real + n + 1 : real, base);
	}
out:
	free(copy);
	sk_url_free(&u);
	return out;
}

static void
manifest_to_stdout(const struct sk_manifest *m)
{
	struct sk_error err;
	char *text;

	if ((text = sk_manifest_dumps(m, &err)) == NULL)
		die("%s", err.msg);
	puts(text);
	free(text);
}

static int
index_manifest(const struct shard_list *shards, const char *out)
{
	char outdir[PATH_MAX], *copy, *url;
	struct sk_manifest m = { 0 };
	struct sk_error err;
	struct sk_shard_info info;
	uint64_t nsamples;
	size_t i, failed = 0;

	if (out != NULL) {
		copy = xstrdup(out);
		if (realpath(dirname(copy), outdir) == NULL)
			die("%s: %s", out, strerror(errno));
		free(copy);
	}
	for (i = 0; i < shards->n; i++) {
		url = shards->v[i].url;
		if (index_shard(url, NULL, &nsamples, &err) < 0 ||
		    sk_source_md5(url, &info.filesize, info.md5, &err) < 0) {
			warn("%s", err.msg);
			failed++;
			continue;
		}
		url = manifest_url(url, out != NULL ? outdir : NULL);
		if (sk_manifest_add_shard(&m, url, nsamples, info.filesize,
		    info.md5) < 0)
			die("%s: out of memory", url);
		free(url);
	}
	if (failed > 0)
		die("%zu of %zu shards failed; no manifest written", failed,
		    shards->n);
	if (out == NULL)
		manifest_to_stdout(&m);
	else if (sk_manifest_write(out, &m, &err) < 0)
		die("%s", err.msg);
	sk_manifest_free(&m);
	return 0;
}

static int
cmd_index_exec(int argc, char **argv)
{
	struct shard_list shards;
	struct sk_error err;
	char **paths = NULL;
	struct index_opts o = { 0, NULL };
	const char *out;
	int dali, failed = 0, first;
	size_t i;

	first = shards_parse(&cmd_index_entry, argc, argv, index_set, &o);
	dali = o.dali;
	out = o.out;
	shards_expand(argc - first, argv + first, &shards);
	if (!dali)
		failed = index_manifest(&shards, out);
	if (dali)
		paths = dali_paths(&shards, out);
	for (i = 0; dali && i < shards.n; i++) {
		if (paths[i] == NULL)
			failed = 1;
		else if (index_dali(shards.v[i].url, paths[i], &err) < 0) {
			warn("%s", err.msg);
			failed = 1;
		}
		free(paths[i]);
	}
	free(paths);
	flush_stdout();
	shards_free(&shards);
	return failed;
}
