/*
 * pack-imagenet.c - image trees as pack datasets: ILSVRC2012 (train in
 * WNID folders, val flat with labels from LOC_val_solution.csv) and any
 * SRC/CLASS/IMAGE folder. JPEGs pass through byte for byte; what a loader
 * would trip on (grayscale, CMYK, a PNG named .JPEG) is converted to RGB
 * JPEG and counted.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"
#include "pack.h"

struct item {
	char *path;	/* to open */
	char *rel;	/* relative to SRC, for the .json member */
	char *key;
	int label;	/* -1: no label found */
};

struct images {
	struct item *items;
	size_t n, cap;
	char *src;
	int imagenet;	/* PNGs become JPEGs; the .json names the WNID */
	char **names;	/* human class names, index = label (imagenet) */
};

static int
is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in dir, sorted bytewise (not by locale), hidden ones left out. */
static void
list_dir(const char *dir, int want_dirs, struct sk_strlist *out)
{
	char path[4096];
	struct dirent *de;
	struct stat st;
	mode_t kind;
	DIR *d;

	if ((d = opendir(dir)) == NULL)
		die("%s: %s", dir, strerror(errno));
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		/* d_type saves a stat per file (1.28M for ImageNet train);
		 * links and file systems without it take the stat. */
		if (de->d_type == DT_DIR || de->d_type == DT_REG)
			kind = de->d_type == DT_DIR ? S_IFDIR : S_IFREG;
		else {
			pathf(path, sizeof path, "%s/%s", dir, de->d_name);
			kind = stat(path, &st) == 0 ? st.st_mode & S_IFMT : 0;
		}
		/* A fifo or a device would block or never end a read. */
		if (kind != S_IFDIR && kind != S_IFREG) {
			if (!want_dirs)
				warn("%s/%s: not a regular file; left out", dir,
				    de->d_name);
			continue;
		}
		if ((kind == S_IFDIR) == want_dirs &&
		    sk_strlist_push(out, de->d_name) != 0)
			die("out of memory");
	}
	closedir(d);
	if (out->n > 1)
		qsort(out->v, out->n, sizeof *out->v, cmp_str);
}

static void
add_item(struct images *im, const char *dir, const char *name,
    const char *key, int label)
{
	struct item *it;

	if (im->n == im->cap) {
		im->cap = im->cap ? im->cap * 2 : 1024;
		im->items = xrealloc(im->items, im->cap * sizeof *im->items);
	}
	it = &im->items[im->n++];
	if (asprintf(&it->path, "%s/%s/%s", im->src, dir, name) < 0 ||
	    asprintf(&it->rel, "%s/%s", dir, name) < 0)
		die("out of memory");
	it->key = xstrdup(key);
	it->label = label;
}

/* Warn of a key that dedupe_keys renames (internal.h: sk__dedupe_keys). */
static void
key_renamed(size_t i, const char *taken, const char *key, void *arg)
{
	const struct item *items = arg;

	warn("%s: key %s is taken; naming it %s", items[i].path, taken, key);
}

/* The keys of items [first, n) made unique, as the loader's files form
 * makes them (one rule, in lib/keys.c). */
static void
dedupe_keys(struct images *im, size_t first)
{
	size_t n = im->n - first, i;
	char **keys = xmalloc((n ? n : 1) * sizeof *keys);

	for (i = 0; i < n; i++)
		keys[i] = im->items[first + i].key;
	if (sk__dedupe_keys(keys, n, key_renamed, im->items + first) != 0)
		die("out of memory");
	for (i = 0; i < n; i++)
		im->items[first + i].key = keys[i];
	free(keys);
}

/* Every image under dir/CLASS for the classes in order; dir "" is SRC. */
static void
scan_classes(struct images *im, const char *dir, char **classes,
    size_t nclasses)
{
	char path[4096], key[PACK_KEY_MAX], sub[4096], prefix[1024];
	struct sk_strlist files;
	size_t c, i, first;

	for (c = 0; c < nclasses; c++) {
		pathf(sub, sizeof sub, "%s%s%s", dir, *dir ? "/" : "",
		    classes[c]);
		pathf(path, sizeof path, "%s/%s", im->src, sub);
		/* ImageNet stems are unique ("n01440764_10026"); a folder's
		 * are unique only within their class. */
		snprintf(prefix, sizeof prefix, "%s%s", im->imagenet ? "" :
		    classes[c], im->imagenet ? "" : "/");
		if (!is_dir(path)) {
			/* A subset of the classes with the full mapping. */
			warn("%s: no such folder; class %s has no images", path,
			    classes[c]);
			continue;
		}
		memset(&files, 0, sizeof files);
		list_dir(path, 0, &files);
		first = im->n;
		for (i = 0; i < files.n; i++) {
			sk__stem_key(key, sizeof key, prefix, files.v[i]);
			add_item(im, sub, files.v[i], key, (int)c);
		}
		dedupe_keys(im, first);
		sk_strlist_free(&files);
	}
}

/* ------------------------------------------------------------------------ */
/* ImageNet                                                                 */

/* The standard ILSVRC2012 layout, or the one Kaggle ships. */
static const char *
imagenet_root(const char *src, const char *split, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/%s", src, split);
	if (is_dir(buf))
		return split;
	snprintf(buf, cap, "%s/ILSVRC/Data/CLS-LOC/%s", src, split);
	if (is_dir(buf)) {
		snprintf(buf, cap, "ILSVRC/Data/CLS-LOC/%s", split);
		return buf;
	}
	die("%s: no %s/ folder (want SRC/%s/ or SRC/ILSVRC/Data/CLS-LOC/%s/)",
	    src, split, split, split);
}

/* LOC_synset_mapping.txt: "n01440764 tench, Tinca tinca" per line. */
static void
read_synsets(struct pack_dataset *ds, struct images *im, const char *dir)
{
	char path[4096], line[1024], *sp;
	struct sk_strlist wnids;
	size_t n = 0, cap = 0;
	FILE *f;

	pathf(path, sizeof path, "%s/LOC_synset_mapping.txt", im->src);
	if ((f = fopen(path, "r")) == NULL) {
		/* Without the mapping, the class order is the folders'. */
		pathf(path, sizeof path, "%s/%s", im->src, dir);
		if (!is_dir(path))
			die("%s/LOC_synset_mapping.txt: %s", im->src,
			    strerror(errno));
		warn("%s/LOC_synset_mapping.txt: not found; classes are the "
		    "sorted folders of %s", im->src, path);
		memset(&wnids, 0, sizeof wnids);
		list_dir(path, 1, &wnids);
		ds->classes = wnids.v;
		ds->nclasses = wnids.n;
		im->names = xcalloc(wnids.n, sizeof *im->names);
		for (n = 0; n < wnids.n; n++)
			im->names[n] = xstrdup(wnids.v[n]);
		return;
	}
	while (fgets(line, sizeof line, f) != NULL) {
		line[strcspn(line, "\r\n")] = '\0';
		if (line[0] == '\0')
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 1024;
			ds->classes = xrealloc(ds->classes,
			    cap * sizeof *ds->classes);
			im->names = xrealloc(im->names, cap * sizeof *im->names);
		}
		sp = strchr(line, ' ');
		im->names[n] = xstrdup(sp ? sp + 1 : line);
		if (sp)
			*sp = '\0';
		ds->classes[n++] = xstrdup(line);
	}
	fclose(f);
	if (n == 0)
		die("%s: no classes", path);
	ds->nclasses = n;
}

static int
find_class(struct pack_dataset *ds, const char *wnid)
{
	size_t i;

	for (i = 0; i < ds->nclasses; i++)
		if (strcmp(ds->classes[i], wnid) == 0)
			return (int)i;
	return -1;
}

/* Sorted "ImageId\tWNID" lines: compare an ImageId with one. */
static int
cmp_id(const void *key, const void *entry)
{
	const char *k = key, *e = *(char *const *)entry;
	size_t n = strlen(k);
	int c = strncmp(k, e, n);

	if (c != 0)
		return c;
	return e[n] == '\t' ? 0 : -1;
}

/* val/: flat files named by ImageId, labels from LOC_val_solution.csv. */
static void
scan_val(struct pack_dataset *ds, struct images *im, const char *dir)
{
	char path[4096], line[4096], key[PACK_KEY_MAX], *comma, *wnid, *pair;
	struct sk_strlist files, ids;
	size_t i, lineno = 0;
	char **hit;
	FILE *f;
	int label;

	pathf(path, sizeof path, "%s/LOC_val_solution.csv", im->src);
	if ((f = fopen(path, "r")) == NULL)
		die("%s: %s (the val labels come from it)", path,
		    strerror(errno));
	memset(&ids, 0, sizeof ids);
	while (fgets(line, sizeof line, f) != NULL) {
		lineno++;
		line[strcspn(line, "\r\n")] = '\0';
		if (line[0] == '\0' || (lineno == 1 &&
		    strncmp(line, "ImageId,", 8) == 0))
			continue;
		if ((comma = strchr(line, ',')) == NULL)
			die("%s:%zu: want ImageId,PredictionString", path,
			    lineno);
		*comma = '\0';
		/* The first token of PredictionString is the WNID. */
		wnid = comma + 1;
		wnid[strcspn(wnid, " ")] = '\0';
		if (asprintf(&pair, "%s\t%s", line, wnid) < 0 ||
		    sk_strlist_push(&ids, pair) != 0)
			die("out of memory");
		free(pair);
	}
	fclose(f);
	qsort(ids.v, ids.n, sizeof *ids.v, cmp_str);

	memset(&files, 0, sizeof files);
	pathf(path, sizeof path, "%s/%s", im->src, dir);
	list_dir(path, 0, &files);
	for (i = 0; i < files.n; i++) {
		sk__stem_key(key, sizeof key, "", files.v[i]);
		label = -1;
		hit = bsearch(key, ids.v, ids.n, sizeof *ids.v, cmp_id);
		if (hit != NULL) {
			wnid = *hit + strlen(key) + 1;
			if ((label = find_class(ds, wnid)) < 0)
				warn("%s: WNID %s is not in "
				    "LOC_synset_mapping.txt", key, wnid);
		}
		add_item(im, dir, files.v[i], key, label);
	}
	sk_strlist_free(&files);
	sk_strlist_free(&ids);
}

/* ------------------------------------------------------------------------ */
/* producing a sample                                                       */

static int
add_json(struct pack_sample *s, const struct images *im,
    const struct pack_dataset *ds, const struct item *it)
{
	char src[2048], cls[1024], wnid[256], buf[4096];
	int n;

	json_quote(src, sizeof src, it->rel);
	json_quote(cls, sizeof cls, im->names ? im->names[it->label] :
	    ds->classes[it->label]);
	if (im->imagenet) {
		json_quote(wnid, sizeof wnid, ds->classes[it->label]);
		n = snprintf(buf, sizeof buf, "{\"source\": %s, \"class\": %s, "
		    "\"wnid\": %s}", src, cls, wnid);
	} else
		n = snprintf(buf, sizeof buf, "{\"source\": %s, \"class\": %s}",
		    src, cls);
	pack_add(s, "json", (uint8_t *)xstrdup(buf), (size_t)n);
	return 0;
}

/* What must be converted, or NULL to pass the bytes through. */
static const char *
conversion(const struct images *im, const struct sk_image_info *info)
{
	if (info->format == SK_IMAGE_PNG)
		return im->imagenet ? "PNG to JPEG" : NULL;
	switch (info->colorspace) {
	case SK_CS_GRAY:
		return "grayscale JPEG to RGB";
	case SK_CS_CMYK:
	case SK_CS_YCCK:
		return "CMYK JPEG to RGB";
	default:
		return NULL;
	}
}

static int
images_produce(struct pack_dataset *ds, const struct pack_opts *o, size_t i,
    struct pack_sample *s)
{
	struct images *im = ds->ctx;
	const struct item *it = &im->items[i];
	struct sk_image_info info;
	struct sk_error err;
	uint8_t *data = NULL, *rgb = NULL, *small = NULL, *out = NULL;
	size_t size, outlen;
	const char *conv;
	int w, h, dw, dh, resize, png, rc = 0;

	snprintf(s->key, sizeof s->key, "%s", it->key);
	if (it->label < 0)
		return pack_skip(s, "missing label", "%s: no label in "
		    "LOC_val_solution.csv", it->path);
	if (read_file(it->path, &data, &size, &err) != 0)
		return pack_skip(s, "unreadable file", "%s", err.msg);
	if (sk_image_probe(data, size, &info, &err) != 0) {
		pack_skip(s, "undecodable image", "%s: %s", it->path, err.msg);
		goto out;
	}
	if (info.truncated) {
		pack_skip(s, "undecodable image", "%s: JPEG data is truncated "
		    "(no end-of-image marker)", it->path);
		goto out;
	}
	conv = conversion(im, &info);
	w = info.width;
	h = info.height;
	resize = o->resize_short > 0 && (w < h ? w : h) > o->resize_short;
	png = info.format == SK_IMAGE_PNG && conv == NULL;
	if (conv == NULL && !resize) {
		pack_add(s, png ? "png" : "jpg", data, size);
		data = NULL;
		goto label;
	}
	if ((rc = sk_image_decode_rgb(data, size, 0, &rgb, &w, &h,
	    &err)) != 0) {
		pack_skip(s, rc == SK_ETOOBIG ? "over the pixel limit" :
		    "undecodable image", "%s: %s", it->path, err.msg);
		rc = 0;
		goto out;
	}
	if (resize) {
		/* The shorter side becomes N; the other keeps the aspect. */
		if (w < h) {
			dw = o->resize_short;
			dh = (int)(((long long)h * dw + w / 2) / w);
		} else {
			dh = o->resize_short;
			dw = (int)(((long long)w * dh + h / 2) / h);
		}
		small = xmalloc((size_t)dw * dh * 3);
		sk_image_resize_rgb(rgb, w, h, small, dw, dh);
		free(rgb);
		rgb = small;
		w = dw;
		h = dh;
	}
	if (png)
		rc = sk_image_encode_png(rgb, w, h, 3, -1, &out, &outlen, &err);
	else
		rc = sk_image_encode_jpeg(rgb, w, h, 3, o->quality, &out,
		    &outlen, &err);
	if (rc != 0) {
		pack_error(s, "%s: %s", it->path,
		    err.msg);
		goto out;
	}
	pack_add(s, png ? "png" : "jpg", out, outlen);
	s->converted = conv ? conv : "resized";
label:
	pack_add_label(s, it->label);
	add_json(s, im, ds, it);
out:
	free(data);
	free(rgb);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* the datasets                                                             */

static struct images *
images_new(struct pack_dataset *ds, const char *src, const char *name)
{
	struct images *im = xcalloc(1, sizeof *im);
	struct stat st;

	memset(ds, 0, sizeof *ds);
	if (stat(src, &st) != 0)
		die("%s: %s", src, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		die("%s: not a directory", src);
	im->src = xstrdup(src);
	ds->name = name;
	ds->produce = images_produce;
	ds->ctx = im;
	return im;
}

void
pack_imagenet_init(struct pack_dataset *ds, const char *src,
    const char *split)
{
	struct images *im = images_new(ds, src, "imagenet");
	char buf[4096], path[4096];
	struct sk_strlist sub;
	const char *dir;

	if (strcmp(split, "train") != 0 && strcmp(split, "val") != 0)
		usage_error("--split: imagenet has train and "
		    "val, not '%s'", split);
	im->imagenet = 1;
	ds->split = split;
	dir = imagenet_root(src, split, buf, sizeof buf);
	read_synsets(ds, im, dir);
	/* Some preparation scripts sort val/ into WNID folders too. */
	pathf(path, sizeof path, "%s/%s", src, dir);
	memset(&sub, 0, sizeof sub);
	list_dir(path, 1, &sub);
	if (strcmp(split, "val") == 0 && sub.n == 0)
		scan_val(ds, im, dir);
	else {
		size_t i;

		for (i = 0; i < sub.n; i++)
			if (find_class(ds, sub.v[i]) < 0)
				warn("%s/%s: not in LOC_synset_mapping.txt; "
				    "left out", path, sub.v[i]);
		scan_classes(im, dir, ds->classes, ds->nclasses);
	}
	sk_strlist_free(&sub);
	if (im->n == 0)
		die("%s/%s: no images", src, dir);
	ds->nitems = im->n;
}

void
pack_folder_init(struct pack_dataset *ds, const char *src)
{
	struct images *im = images_new(ds, src, "folder");
	struct sk_strlist classes;

	ds->split = "all";
	memset(&classes, 0, sizeof classes);
	list_dir(src, 1, &classes);
	if (classes.n == 0)
		die("%s: no class folders (want SRC/CLASS/IMAGE)", src);
	ds->classes = classes.v;
	ds->nclasses = classes.n;
	scan_classes(im, "", ds->classes, ds->nclasses);
	if (im->n == 0)
		die("%s: no images in the class folders", src);
	ds->nitems = im->n;
}

void
pack_images_free(struct pack_dataset *ds)
{
	struct images *im = ds->ctx;
	size_t i;

	for (i = 0; i < im->n; i++) {
		free(im->items[i].path);
		free(im->items[i].rel);
		free(im->items[i].key);
	}
	if (im->names != NULL)
		for (i = 0; i < ds->nclasses; i++)
			free(im->names[i]);
	free(im->names);
	free(im->items);
	free(im->src);
}
