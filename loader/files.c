/*
 * files.c - the files form at open: which form a source is, and a class-
 * per-folder tree's image files as the loader's "shards" of one sample
 * each, with their labels and keys, so that the epoch plan permutes and
 * deals them exactly as it does shards.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"
#include "loader.h"
#include "pipeline.h"

int
sk__is_image_ext(const char *ext)
{
	return strcasecmp(ext, "jpg") == 0 || strcasecmp(ext, "jpeg") == 0 ||
	    strcasecmp(ext, "png") == 0;
}

/* An image file by name: its extension past the last dot. */
static int
is_image_name(const char *name)
{
	const char *dot = strrchr(name, '.');

	return dot != NULL && dot != name && sk__is_image_ext(dot + 1);
}

/* Hidden names are left out, as "shardtool pack folder" leaves them. */
static int
hidden(const struct sk__entry *e)
{
	return e->name[0] == '.';
}

/* A folder by its spelling: a URL (or path) ending in '/', not a pattern. */
static int
is_folder_url(const char *urls)
{
	size_t n = strlen(urls);

	return n > 0 && urls[n - 1] == '/' && strstr(urls, "::") == NULL &&
	    strchr(urls, '{') == NULL;
}

static int
with_shown(struct sk_error *err, int code, const char *url, const char *why)
{
	char *shown = sk_url_redact(url);
	int rc;

	rc = sk_error_set(err, code, "%s: %s", shown != NULL ? shown :
	    "the source", why);
	free(shown);
	return rc;
}

int
sk__source_form(const struct sk_loader_config *c, enum sk_form *form,
    struct sk__entries *root, struct sk_error *err)
{
	size_t i;
	int folder, tars = 0, dirs = 0, rc;

	*form = SK_FORM_SHARDS;
	if (c->manifest != NULL || c->urls == NULL ||
	    c->form == SK_FORM_SHARDS)
		return 0;
	/* The files form lists whatever it is given: a missing folder, or
	 * a remote one not ending in '/', is the listing's error. */
	folder = is_folder_url(c->urls) || sk__is_local_dir(c->urls);
	if (!folder && c->form != SK_FORM_FILES)
		return 0;
	if (strstr(c->urls, "::") != NULL || strchr(c->urls, '{') != NULL)
		return with_shown(err, SK_EINVAL, c->urls, "the files form "
		    "takes one folder, not a pattern");
	if ((rc = sk__folder_entries(c->urls, root, err)) != 0)
		return rc;
	for (i = 0; i < root->n; i++) {
		if (hidden(&root->v[i]))
			continue;
		if (root->v[i].dir)
			dirs++;
		else if (sk__is_tar_name(root->v[i].name))
			tars++;
	}
	if (c->form == SK_FORM_FILES || (tars == 0 && dirs > 0))
		*form = SK_FORM_FILES;
	return 0;
}

int
sk_loader_source_form(const struct sk_loader_config *cfg,
    enum sk_form *form, struct sk_strlist *classes, struct sk_error *err)
{
	struct sk__entries root = { NULL, 0, 0 };
	size_t i;
	int rc;

	if (cfg == NULL || form == NULL || err == NULL)
		return err != NULL ? sk_error_set(err, SK_EINVAL, "no config") :
		    SK_EINVAL;
	rc = sk__source_form(cfg, form, &root, err);
	for (i = 0; rc == 0 && classes != NULL && *form == SK_FORM_FILES &&
	    i < root.n; i++)
		if (root.v[i].dir && !hidden(&root.v[i]) &&
		    sk_strlist_push(classes, root.v[i].name) != 0)
			rc = sk_error_set(err, SK_ENOMEM, "out of memory");
	sk__entries_free(&root);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* listing the class folders                                                */

struct cls {
	const char *name;
	char *url;		/* ROOT/CLASS/ */
	struct sk__entries e;
	struct sk_error err;
	int rc;
};

/* Listing threads share the next class to list. */
struct listing {
	struct cls *v;
	size_t n, next;
	pthread_mutex_t mu;
};

static void *
list_main(void *arg)
{
	struct listing *li = arg;
	struct cls *c;
	size_t i;

	for (;;) {
		pthread_mutex_lock(&li->mu);
		i = li->next++;
		pthread_mutex_unlock(&li->mu);
		if (i >= li->n)
			return NULL;
		c = &li->v[i];
		c->rc = sk__folder_entries(c->url, &c->e, &c->err);
	}
}

/*
 * N class folders are N listings, each a round trip over a network: they
 * run io_streams at a time (the bound the shard streams keep too).
 */
static void
list_classes(sk_loader *l, struct cls *v, size_t n)
{
	struct listing li;
	pthread_t t[64];
	size_t i, nt;

	nt = (size_t)(l->cfg.io_streams > 0 ? l->cfg.io_streams : 2);
	if (nt > sizeof t / sizeof t[0])
		nt = sizeof t / sizeof t[0];
	if (nt > n)
		nt = n;
	li.v = v;
	li.n = n;
	li.next = 0;
	pthread_mutex_init(&li.mu, NULL);
	for (i = 0; i < nt; i++)
		if (pthread_create(&t[i], NULL, list_main, &li) != 0)
			break;
	nt = i;
	if (nt == 0)
		list_main(&li);
	for (i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	pthread_mutex_destroy(&li.mu);
}

/* ------------------------------------------------------------------------ */
/* the files as shards of one sample                                        */

/* The folder a message names: its URL without credentials or the '/'. */
static char *
shown_folder(const char *url)
{
	char *s = sk_url_redact(url);
	size_t n;

	if (s != NULL && (n = strlen(s)) > 1 && s[n - 1] == '/')
		s[n - 1] = '\0';
	return s;
}

struct renaming {
	const struct cls *c;
	const size_t *file;	/* key index -> entry index */
};

static void
key_renamed(size_t i, const char *taken, const char *key, void *arg)
{
	const struct renaming *r = arg;
	char *shown = shown_folder(r->c->url);

	sk_log(SK_LOG_WARN, "%s/%s: key %s is taken; naming it %s", shown !=
	    NULL ? shown : "?", r->c->e.v[r->file[i]].name, taken, key);
	free(shown);
}

/*
 * One class folder's files in name order become shards, keyed by the
 * rule of "shardtool pack folder" (lib/keys.c): the keys are made over
 * every file it would pack, then the files without an image extension are
 * left out, so a tree and its shards give the same keys.
 */
static int
add_class(sk_loader *l, struct cls *c, int32_t label, size_t *cap,
    size_t *other)
{
	char key[SK__KEY_MAX], prefix[SK__KEY_MAX], *shown;
	struct shardinfo *sh;
	struct renaming ren;
	size_t i, n = 0, images = 0, *file = NULL;
	char **keys = NULL;
	int rc = 0;

	if ((keys = calloc(c->e.n ? c->e.n : 1, sizeof *keys)) == NULL ||
	    (file = calloc(c->e.n ? c->e.n : 1, sizeof *file)) == NULL)
		goto nomem;
	snprintf(prefix, sizeof prefix, "%s/", c->name);
	for (i = 0; i < c->e.n; i++) {
		if (c->e.v[i].dir || hidden(&c->e.v[i]))
			continue;
		sk__stem_key(key, sizeof key, prefix, c->e.v[i].name);
		if ((keys[n] = sk__strdup(key)) == NULL)
			goto nomem;
		file[n++] = i;
	}
	ren.c = c;
	ren.file = file;
	if (sk__dedupe_keys(keys, n, key_renamed, &ren) != 0)
		goto nomem;
	for (i = 0; i < n; i++) {
		if (!is_image_name(c->e.v[file[i]].name)) {
			(*other)++;
			continue;
		}
		if (l->nshards == *cap) {
			*cap = *cap ? *cap * 2 : 1024;
			if ((sh = realloc(l->shards, *cap *
			    sizeof *l->shards)) == NULL)
				goto nomem;
			l->shards = sh;
		}
		sh = &l->shards[l->nshards];
		memset(sh, 0, sizeof *sh);
		if ((sh->url = sk__folder_child(c->url, c->e.v[file[i]].name,
		    0)) == NULL)
			goto nomem;
		l->nshards++;
		sh->key = keys[i];
		keys[i] = NULL;
		sh->label = label;
		sh->nsamples = 1;
		sh->filesize = c->e.v[file[i]].size;
		images++;
	}
	if (images == 0) {
		shown = shown_folder(c->url);
		rc = sk__fatal(&l->h, SK_EINVAL, "%s: no images (want .jpg, "
		    ".jpeg or .png files)", shown != NULL ? shown : "?");
		free(shown);
	}
	goto out;
nomem:
	rc = sk__fatal(&l->h, SK_ENOMEM, "out of memory");
out:
	for (i = 0; keys != NULL && i < n; i++)
		free(keys[i]);
	free(keys);
	free(file);
	return rc;
}

int
sk__load_files(sk_loader *l, const struct sk__entries *root)
{
	const char *url = l->cfg.urls;
	struct cls *v = NULL;
	size_t i, n = 0, cap = 0, other = 0;
	char *shown;
	int rc = 0;

	for (i = 0; i < root->n; i++)
		if (root->v[i].dir && !hidden(&root->v[i]))
			n++;
	if (n == 0) {
		shown = shown_folder(url);
		rc = sk__fatal(&l->h, SK_EINVAL, "%s: no class folders (want "
		    "ROOT/CLASS/IMAGE)", shown != NULL ? shown : "the source");
		free(shown);
		return rc;
	}
	if (n > INT32_MAX)
		return sk__fatal(&l->h, SK_ETOOBIG, "%zu class folders", n);
	if ((v = calloc(n, sizeof *v)) == NULL)
		return sk__fatal(&l->h, SK_ENOMEM, "out of memory");
	for (i = 0, n = 0; i < root->n; i++) {
		if (!root->v[i].dir || hidden(&root->v[i]))
			continue;
		v[n].name = root->v[i].name;
		if ((v[n++].url = sk__folder_child(url, root->v[i].name, 1)) ==
		    NULL) {
			rc = sk__fatal(&l->h, SK_ENOMEM, "out of memory");
			goto out;
		}
	}
	if (n > 1)
		sk_log(SK_LOG_INFO, "listing %zu class folders, %d at a time",
		    n, l->cfg.io_streams > 0 ? l->cfg.io_streams : 2);
	list_classes(l, v, n);
	/* The first failure in class order is the one reported. */
	for (i = 0; i < n; i++)
		if (v[i].rc != 0) {
			rc = sk__fatal(&l->h, v[i].rc, "%s", v[i].err.msg);
			goto out;
		}
	for (i = 0; i < n && rc == 0; i++)
		rc = add_class(l, &v[i], (int32_t)i, &cap, &other);
	if (rc != 0)
		goto out;
	if (other > 0)
		sk_log(SK_LOG_INFO, "%zu files without an image extension "
		    "(.jpg, .jpeg, .png) are left out", other);
	l->files = 1;
	l->nclasses = n;
out:
	for (i = 0; i < n; i++) {
		free(v[i].url);
		sk__entries_free(&v[i].e);
	}
	free(v);
	return rc;
}
