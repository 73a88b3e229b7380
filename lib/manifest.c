/*
 * manifest.c - the wids shard index (NAME.json): the shard list with
 * sample counts, sizes and MD5s, plus shardkit's "info" object with the
 * class names and counts.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "internal.h"

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

static int
read_info(json_t *info, struct sk_manifest *m, const char *path,
    struct sk_error *err)
{
	json_t *names = json_object_get(info, "classes");
	json_t *counts = json_object_get(info, "class_counts");
	json_t *rest;
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
			if (json_is_array(counts) &&
			    json_is_integer(json_array_get(counts, i)))
				m->class_counts[i] = (uint64_t)
				    json_integer_value(json_array_get(counts, i));
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

int
sk_manifest_read(const char *path, struct sk_manifest *m,
    struct sk_error *err)
{
	json_t *root, *list, *s, *info;
	json_error_t jerr;
	const char *kind, *url, *md5;
	size_t i;
	int rc = 0;

	memset(m, 0, sizeof *m);
	if ((root = json_load_file(path, 0, &jerr)) == NULL) {
		if (jerr.line < 1)
			return sk_error_set(err, SK_ENOENT, "%s: %s", path,
			    jerr.text);
		return sk_error_set(err, SK_EFORMAT, "%s: line %d: %s", path,
		    jerr.line, jerr.text);
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
	json_array_foreach(list, i, s) {
		url = json_string_value(json_object_get(s, "url"));
		md5 = json_string_value(json_object_get(s, "md5sum"));
		if (url == NULL ||
		    !json_is_integer(json_object_get(s, "nsamples"))) {
			rc = sk_error_set(err, SK_EFORMAT,
			    "%s: shardlist[%zu] needs \"url\" and \"nsamples\"",
			    path, i);
			goto out;
		}
		if (json_integer_value(json_object_get(s, "nsamples")) < 0 ||
		    json_integer_value(json_object_get(s, "filesize")) < 0) {
			rc = sk_error_set(err, SK_EFORMAT, "%s: shardlist[%zu] "
			    "(%s): \"nsamples\" and \"filesize\" must not be "
			    "negative", path, i, url);
			goto out;
		}
		if (sk_manifest_add_shard(m, url, (uint64_t)json_integer_value(
		    json_object_get(s, "nsamples")), (uint64_t)
		    json_integer_value(json_object_get(s, "filesize")),
		    md5) != 0) {
			rc = sk_error_set(err, SK_ENOMEM, "out of memory");
			goto out;
		}
	}
	info = json_object_get(root, "info");
	if (json_is_object(info))
		rc = read_info(info, m, path, err);
out:
	json_decref(root);
	if (rc != 0)
		sk_manifest_free(m);
	return rc;
}

char *
sk_manifest_resolve(const char *manifest_path, const char *url)
{
	const char *slash;

	/* wids: relative shard URLs are relative to the index's location. */
	if (url[0] == '/' || strstr(url, "://") != NULL)
		return strdup(url);
	slash = strrchr(manifest_path, '/');
	if (slash == NULL)
		return strdup(url);
	return sk__asprintf("%.*s/%s", (int)(slash - manifest_path),
	    manifest_path, url);
}
