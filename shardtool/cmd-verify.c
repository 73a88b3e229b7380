/*
 * cmd-verify.c - check shards: tar structure, sample adjacency, duplicate
 * members, labels, optionally image decoding, and against a manifest the
 * sample count, size and MD5 of each shard. Entries that extract refuses
 * (entry_refused() in shards.c) and links, which no sample holds, are
 * problems too: a shard that verifies is one that every tool accepts.
 */
#include <ctype.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "shards.h"

static int cmd_verify_exec(int, char **);

enum { OPT_DECODE = 1, OPT_CLASSES, OPT_JSON };

static const struct cli_option verify_options[] = {
	{ "decode", 0, OPT_DECODE, CLI_FLAG, NULL, "also decode every image",
	    0, 0, NULL, 0 },
	{ "classes", 0, OPT_CLASSES, CLI_INT, "N", "labels must be below N",
	    1, 1e15, NULL, 0 },
	{ "json", 0, OPT_JSON, CLI_STRING, "FILE",
	    "write the counts as JSON (- for stdout)", 0, 0, NULL, 0 },
	OPT_END
};
static const struct cli_group verify_groups[] = {
	{ "verify", verify_options }, SHARDS_REMOTE_GROUP, { NULL, NULL }
};

const struct cli_command cmd_verify_entry = {
	.name = "verify",
	.usage = "verify [--decode] [--classes N] [-q] URL...",
	.summary = "check shards (and their manifest) for problems",
	.about =
	    "Check every shard: the tar structure, that the members of a\n"
	    "sample are adjacent and unique, and that no entry is one extract\n"
	    "refuses (an absolute name, a \"..\" component, a device or FIFO)\n"
	    "or a symbolic or hard link. In a shard with any image (.jpg,\n"
	    ".jpeg, .png) or label (.cls), or when the number of classes is\n"
	    "known, every sample must have an image and a .cls label, a\n"
	    "non-negative decimal number; a shard of other members (text) is\n"
	    "not held to that. A sample over 256 MiB, which the loader skips,\n"
	    "is a problem. For a manifest NAME.json also check each shard's\n"
	    "sample count, size and MD5 and that labels are below the number\n"
	    "of classes it names. Each problem is a line on stderr; a summary\n"
	    "goes to stdout (-q: none). Exit status 1 if any problem was found.\n",
	.groups = verify_groups,
	.min_args = 1,
	.max_args = -1,
	.exec = cmd_verify_exec
};


/* The keys seen in one shard: open addressing, linear probing. */
struct keyset {
	char **slot;
	size_t cap, n;
};

/* A sample with neither image nor label, reported once the shard turns
 * out to be one of images and labels. */
struct unlabelled {
	char *key;
	uint64_t offset;
};

struct verify {
	long long classes;	/* labels must be below; 0: no limit */
	const char *url;
	const char *shown;	/* url, redacted: for messages */
	uint64_t nsamples, nmembers, nproblems;
	uint64_t nskipped;	/* entries that are no sample member */
	struct keyset seen;
	int classify;		/* this shard holds images and labels */
	struct unlabelled *wait;	/* samples waiting on classify */
	size_t nwait;
	/* the progress line: shards done of nshards, bytes of samples read */
	struct cli_progress prog;
	size_t ishard, nshards;
	uint64_t bytes;
	double t0;
};

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */

static uint64_t
key_hash(const char *s)
{
	uint64_t h = 14695981039346656037ULL;	/* FNV-1a */

	while (*s != '\0')
		h = (h ^ (unsigned char)*s++) * 1099511628211ULL;
	return h;
}

/* 1 if key (malloc'd; the set owns it from now on) is new, 0 if it was
 * seen before. */
static int
keyset_add(struct keyset *ks, char *key)
{
	char **old = ks->slot;
	size_t oldcap = ks->cap, i, j;

	if (2 * (ks->n + 1) > ks->cap) {
		ks->cap = ks->cap == 0 ? 256 : ks->cap * 2;
		ks->slot = xcalloc(ks->cap, sizeof *ks->slot);
		for (j = 0; j < oldcap; j++) {
			if (old[j] == NULL)
				continue;
			i = key_hash(old[j]) & (ks->cap - 1);
			while (ks->slot[i] != NULL)
				i = (i + 1) & (ks->cap - 1);
			ks->slot[i] = old[j];
		}
		free(old);
	}
	i = key_hash(key) & (ks->cap - 1);
	while (ks->slot[i] != NULL) {
		if (strcmp(ks->slot[i], key) == 0) {
			free(key);
			return 0;
		}
		i = (i + 1) & (ks->cap - 1);
	}
	ks->slot[i] = key;
	ks->n++;
	return 1;
}

static void
keyset_clear(struct keyset *ks)
{
	size_t i;

	for (i = 0; i < ks->cap; i++)
		free(ks->slot[i]);
	free(ks->slot);
	memset(ks, 0, sizeof *ks);
}

static void
vproblem(struct verify *v, const char *prefix, const char *fmt, va_list ap)
{
	char msg[SK_ERRMSG_MAX + 512];

	vsnprintf(msg, sizeof msg, fmt, ap);
	/* A problem's line replaces the progress line, which comes back
	 * at its next update. */
	if (v->prog.shown) {
		fputs("\r\033[K", stderr);
		v->prog.shown = 0;
	}
	warn("%s%s", prefix, msg);
	v->nproblems++;
}

static void __attribute__((format(printf, 2, 3)))
problem(struct verify *v, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vproblem(v, "", fmt, ap);
	va_end(ap);
}

/* A problem of one sample: "URL: key K at offset O: what". */
static void __attribute__((format(printf, 4, 5)))
problem_at(struct verify *v, const char *key, uint64_t offset,
    const char *fmt, ...)
{
	char prefix[SK_ERRMSG_MAX];
	va_list ap;

	snprintf(prefix, sizeof prefix, "%s: key %s at offset %" PRIu64 ": ",
	    v->shown, key, offset);
	va_start(ap, fmt);
	vproblem(v, prefix, fmt, ap);
	va_end(ap);
}

static int
is_image(const char *ext)
{
	return strcasecmp(ext, "jpg") == 0 || strcasecmp(ext, "jpeg") == 0 ||
	    strcasecmp(ext, "png") == 0;
}

static int
is_label(const char *ext)
{
	return strcmp(ext, "cls") == 0;
}

/* What the sample reader loads: labels, and images when decoding. */
static int
want_data(const char *ext, void *decode)
{
	return is_label(ext) || (*(const int *)decode && is_image(ext));
}

/* WebDataset metadata ("__key__", "dir/__index__.json"): the tar reader
 * passes over these unless asked for every entry. */
static int
is_metadata(const char *name)
{
	const char *ext, *base = strrchr(name, '/');
	size_t n;

	base = base != NULL ? base + 1 : name;
	n = sk_key_split(base, &ext);
	return n >= 4 && strncmp(base, "__", 2) == 0 &&
	    strncmp(base + n - 2, "__", 2) == 0;
}

/* A label is ASCII decimal, optionally surrounded by white space. */
static int
parse_label(const uint8_t *p, size_t n, unsigned long long *label)
{
	size_t i = 0, digits = 0;

	*label = 0;
	while (i < n && isspace(p[i]))
		i++;
	for (; i < n && isdigit(p[i]); i++, digits++) {
		if (*label > (ULLONG_MAX - 9) / 10)
			return -1;
		*label = *label * 10 + (p[i] - '0');
	}
	while (i < n && isspace(p[i]))
		i++;
	return digits > 0 && i == n ? 0 : -1;
}

/* ------------------------------------------------------------------------ */
/* checks                                                                   */

static void
check_label(struct verify *v, const struct sk_sample *s,
    const struct sk_sample_member *cls)
{
	unsigned long long label;

	if (parse_label(cls->data, cls->size, &label) < 0) {
		problem_at(v, s->key, cls->header_offset, "%s is not a "
		    "decimal label", cls->name);
		return;
	}
	if (v->classes > 0 && label >= (unsigned long long)v->classes)
		problem_at(v, s->key, cls->header_offset, "label %llu out of "
		    "range (%lld classes)", label, v->classes);
}

static void
check_decode(struct verify *v, const struct sk_sample *s,
    const struct sk_sample_member *img)
{
	struct sk_error err = { 0 };
	uint8_t *rgb = NULL;
	int w, h;

	if (sk_image_decode_rgb(img->data, img->size, 0, &rgb, &w, &h,
	    &err) < 0)
		problem_at(v, s->key, img->header_offset, "%s: %s", img->name,
		    err.msg);
	free(rgb);
}

/* An entry that is no sample member: reported if extract refuses it or it
 * is a link, else (a folder, metadata) only counted. */
static void
check_other(struct verify *v, const struct sk_sample *s,
    const struct sk_sample_member *m)
{
	char why[SK_ERRMSG_MAX];

	v->nskipped++;
	if (entry_refused(m->name, m->type, m->linkname, why,
	    sizeof why) != NULL)
		problem_at(v, s->key, m->header_offset, "%s: %s", m->name, why);
	else if (m->type == SK_TAR_SYMLINK || m->type == SK_TAR_HARDLINK)
		problem_at(v, s->key, m->header_offset, "%s: %s link to %s: "
		    "a link is no sample member", m->name, m->type ==
		    SK_TAR_SYMLINK ? "symbolic" : "hard", m->linkname);
}

/* The shard holds images or labels: the samples that had neither and
 * waited for this are problems now, and later ones at once. */
static void
set_classify(struct verify *v)
{
	size_t i;

	if (v->classify)
		return;
	v->classify = 1;
	for (i = 0; i < v->nwait; i++)
		problem_at(v, v->wait[i].key, v->wait[i].offset, "no image "
		    "(.jpg, .jpeg, .png) and no label (.cls)");
}

static void
wait_clear(struct verify *v)
{
	size_t i;

	for (i = 0; i < v->nwait; i++)
		free(v->wait[i].key);
	free(v->wait);
	v->wait = NULL;
	v->nwait = 0;
}

static void
check_sample(struct verify *v, const struct sk_sample *s, int decode)
{
	const struct sk_sample_member *cls = NULL, *img = NULL, *m, *first;
	char why[SK_ERRMSG_MAX];
	size_t i, j, n = 0;

	/* The loader's sample: the regular files, metadata aside. With
	 * every entry read, a run of only folders or links is none. */
	for (i = 0, first = NULL; i < s->n; i++) {
		m = &s->m[i];
		if (m->type != SK_TAR_FILE || is_metadata(m->name)) {
			check_other(v, s, m);
			continue;
		}
		if (first == NULL)
			first = m;
		n++;
		if (entry_refused(m->name, m->type, m->linkname, why,
		    sizeof why) != NULL)
			problem_at(v, s->key, m->header_offset, "%s: %s",
			    m->name, why);
	}
	if (n == 0)
		return;
	v->nsamples++;
	v->nmembers += n;
	if (!keyset_add(&v->seen, xstrdup(s->key)))
		problem_at(v, s->key, first->header_offset, "members not "
		    "adjacent (key seen before)");
	for (i = 0; i < s->n; i++) {
		m = &s->m[i];
		if (m->type != SK_TAR_FILE || is_metadata(m->name))
			continue;
		for (j = 0; j < i; j++)
			if (s->m[j].type == SK_TAR_FILE &&
			    strcmp(m->ext, s->m[j].ext) == 0)
				break;
		if (j < i)
			problem_at(v, s->key, m->header_offset,
			    "duplicate member %s", m->name);
		if (cls == NULL && is_label(m->ext))
			cls = m;
		if (is_image(m->ext)) {
			if (img == NULL)
				img = m;
			if (decode && !s->too_big)
				check_decode(v, s, m);
		}
	}
	/* The loader skips it; nothing of it was loaded to check. */
	if (s->too_big) {
		problem_at(v, s->key, first->header_offset, "sample of %"
		    PRIu64 " bytes is over the limit of %" PRIu64 " bytes",
		    s->bytes, SK_SAMPLE_MAX_BYTES);
		return;
	}
	if (cls != NULL || img != NULL || v->classes > 0)
		set_classify(v);
	if (cls != NULL)
		check_label(v, s, cls);
	/* Damage came next and is reported next: what follows it is lost,
	 * not missing from the sample. */
	if (s->cut)
		return;
	if (cls == NULL && img != NULL)
		problem_at(v, s->key, first->header_offset, "missing label");
	if (img == NULL && cls != NULL)
		problem_at(v, s->key, first->header_offset, "missing image "
		    "(.jpg, .jpeg, .png)");
	if (img == NULL && cls == NULL) {
		if (v->classify) {
			problem_at(v, s->key, first->header_offset, "no image "
			    "(.jpg, .jpeg, .png) and no label (.cls)");
			return;
		}
		v->wait = xrealloc(v->wait, (v->nwait + 1) * sizeof *v->wait);
		v->wait[v->nwait].key = xstrdup(s->key);
		v->wait[v->nwait++].offset = first->header_offset;
	}
}

/*
 * Compare what a manifest says about a shard with the shard itself: its
 * size and MD5 come from src, hashed while the samples were read, so the
 * shard's bytes come once (src is still the reader's).
 */
static void
check_manifest(struct verify *v, const struct sk_manifest_shard *expect,
    uint64_t nsamples, sk_source *src)
{
	uint64_t size;
	char md5[33];

	if (nsamples != expect->nsamples)
		problem(v, "%s: %" PRIu64 " samples, manifest says %" PRIu64,
		    v->shown, nsamples, expect->nsamples);
	if (sk_source_md5_end(src, &size, md5) < 0) {
		problem(v, "%s: cannot read it whole for its MD5: %s", v->shown,
		    sk_errmsg(src));
		return;
	}
	if (size != expect->filesize)
		problem(v, "%s: size %" PRIu64 ", manifest says %" PRIu64,
		    v->shown, size, expect->filesize);
	if (strcasecmp(md5, expect->md5) != 0)
		problem(v, "%s: md5 %s, manifest says %s", v->shown, md5,
		    expect->md5);
}

static void
progress(struct verify *v)
{
	double dt = cli_now() - v->t0;

	cli_progress(&v->prog, "%zu/%zu shards, %" PRIu64 " samples, %.1f MB, "
	    "%.0f samples/s, %" PRIu64 " problems", v->ishard, v->nshards,
	    v->nsamples, v->bytes / 1e6, dt > 0 ? v->nsamples / dt : 0.0,
	    v->nproblems);
}

static void
verify_shard(struct verify *v, const struct shard *sh, int decode)
{
	struct sk_sample s = { 0 };
	struct sk_error err;
	sk_sample_reader *r;
	sk_source *src = NULL;
	uint64_t first = v->nsamples;
	int rc;

	v->url = sh->url;
	v->shown = sh->shown;
	v->classify = 0;
	/* Every entry, so that links and devices are seen and reported. */
	if (samples_open_md5(sh->url, SK_TAR_ALL_ENTRIES, &r, sh->expect ?
	    &src : NULL, &err) < 0) {
		/* One line for a missing shard, not one per manifest field. */
		problem(v, "%s", err.msg);
		return;
	}
	while ((rc = sk_sample_reader_next(r, &s, want_data, &decode)) > 0) {
		check_sample(v, &s, decode);
		v->bytes += s.bytes;
		if (cli_progress_due(&v->prog))
			progress(v);
	}
	if (rc < 0)
		problem(v, "%s", sk_errmsg(r));
	sk_sample_free(&s);
	keyset_clear(&v->seen);
	/* Not a shard of images and labels: text-only samples are fine. */
	wait_clear(v);
	if (sh->expect != NULL)
		check_manifest(v, sh->expect, v->nsamples - first, src);
	sk_sample_reader_close(r);
}

struct verify_opts {
	int decode;
	long long classes;
	const char *json;
};

static void
verify_set(void *ctx, const struct cli_option *opt, const struct cli_value *v)
{
	struct verify_opts *o = ctx;

	switch (opt->id) {
	case OPT_DECODE: o->decode = 1; break;
	case OPT_CLASSES: o->classes = v->i; break;
	case OPT_JSON: o->json = v->s; break;
	}
}

static int
cmd_verify_exec(int argc, char **argv)
{
	struct verify v = { 0 };
	struct verify_opts o = { 0, 0, NULL };
	struct shard_list shards;
	struct cli_json *j;
	double t0 = cli_now();
	FILE *summary;
	size_t i;
	int first;

	first = shards_parse(&cmd_verify_entry, argc, argv, verify_set, &o);
	shards_expand(argc - first, argv + first, &shards);
	/* Decoding every image takes long: on a terminal, a line says how
	 * far it is (stderr; not under -q), ending where the summary does. */
	cli_progress_init(&v.prog);
	v.nshards = shards.n;
	v.t0 = t0;
	for (i = 0; i < shards.n; i++) {
		/* --classes wins over what a manifest names. */
		v.classes = o.classes > 0 ? o.classes :
		    (long long)shards.v[i].nclasses;
		verify_shard(&v, &shards.v[i], o.decode);
		v.ishard = i + 1;
		if (cli_progress_due(&v.prog))
			progress(&v);
	}
	progress(&v);
	cli_progress_done(&v.prog);
	/* With --json -, standard output holds the JSON alone. */
	summary = o.json != NULL && strcmp(o.json, "-") == 0 ? stderr : stdout;
	if (!cli_quiet) {
		fprintf(summary, "verified %zu shards, %" PRIu64 " samples, %" PRIu64
		    " members: %" PRIu64 " problems", shards.n, v.nsamples,
		    v.nmembers, v.nproblems);
		/* Nothing read goes unreported: directories, links and
		 * __*__ metadata are not sample members. */
		if (v.nskipped > 0)
			fprintf(summary, " (%" PRIu64 " other entries skipped: "
			    "directories, links, __*__ metadata)", v.nskipped);
		fputc('\n', summary);
	}
	flush_stdout();
	if (o.json != NULL) {
		j = cli_json_open(o.json);
		cli_json_object(j, "config");
		cli_json_array(j, "sources");
		for (i = 0; i < (size_t)(argc - first); i++)
			cli_json_str(j, NULL, argv[first + i]);
		cli_json_end(j);
		cli_json_bool(j, "decode", o.decode);
		if (o.classes > 0)
			cli_json_int(j, "classes", o.classes);
		else
			cli_json_null(j, "classes");
		cli_json_end(j);
		cli_json_object(j, "result");
		cli_json_uint(j, "shards", shards.n);
		cli_json_uint(j, "samples", v.nsamples);
		cli_json_uint(j, "members", v.nmembers);
		cli_json_uint(j, "other_entries", v.nskipped);
		cli_json_uint(j, "problems", v.nproblems);
		cli_json_real(j, "wall_seconds", cli_now() - t0);
		cli_json_end(j);
		cli_json_close(j);
	}
	shards_free(&shards);
	return v.nproblems > 0;
}
