/*
 * pack-cifar10.c - the CIFAR-10 binary layout as a pack dataset. A record
 * is one label byte, then 1024 R, 1024 G and 1024 B bytes of a 32x32 image.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pack.h"

#define SIDE 32
#define RECORD (1 + 3 * SIDE * SIDE)

static const char *default_classes[10] = {
	"airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
	"horse", "ship", "truck"
};

struct cifar {
	uint8_t *data[5];	/* the files of the split, whole */
	size_t nrec[5];
	int nfiles;
};

static int
exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/* Say which layout to use when SRC holds the python (pickle) one. */
static void
check_layout(const char *src)
{
	char path[4096];

	pathf(path, sizeof path, "%s/data_batch_1", src);
	if (exists(path) || (pathf(path, sizeof path, "%s/test_batch",
	    src), exists(path)))
		die("%s: this is the CIFAR-10 python (pickle) layout, which "
		    "shardtool does not read; use the binary version "
		    "(cifar-10-binary.tar.gz: data_batch_1.bin ... "
		    "test_batch.bin)", src);
	pathf(path, sizeof path, "%s/cifar-10-batches-py", src);
	if (exists(path))
		die("%s: holds the CIFAR-10 python (pickle) layout; use the "
		    "binary version (cifar-10-batches-bin)", src);
}

static void
read_classes(struct pack_dataset *ds, const char *dir)
{
	char path[4096], line[256];
	size_t n = 0, len;
	FILE *f;

	ds->classes = xcalloc(10, sizeof *ds->classes);
	ds->nclasses = 10;
	pathf(path, sizeof path, "%s/batches.meta.txt", dir);
	if ((f = fopen(path, "r")) != NULL) {
		while (n < 10 && fgets(line, sizeof line, f) != NULL) {
			len = strcspn(line, "\r\n");
			line[len] = '\0';
			if (len > 0)
				ds->classes[n++] = xstrdup(line);
		}
		fclose(f);
	}
	if (n != 10 && n != 0) {
		warn("%s: %zu class names, want 10; using the standard names",
		    path, n);
		while (n > 0)
			free(ds->classes[--n]);
		memset(ds->classes, 0, 10 * sizeof *ds->classes);
	}
	for (n = 0; n < 10; n++)
		if (ds->classes[n] == NULL)
			ds->classes[n] = xstrdup(default_classes[n]);
}

static int
cifar_produce(struct pack_dataset *ds, const struct pack_opts *o, size_t i,
    struct pack_sample *s)
{
	struct cifar *c = ds->ctx;
	uint8_t rgb[SIDE * SIDE * 3], *out = NULL;
	const uint8_t *rec;
	struct sk_error err;
	size_t item = i, outlen, p;
	int f, rc;

	for (f = 0; item >= c->nrec[f]; f++)
		item -= c->nrec[f];
	rec = c->data[f] + item * RECORD;
	snprintf(s->key, sizeof s->key, "%s_%05zu", ds->split, i);
	if (rec[0] > 9)
		return pack_skip(s, "bad label", "%s: record %zu has label %d, "
		    "want 0-9", s->key, item, rec[0]);
	/* planar R, G, B -> interleaved RGB */
	for (p = 0; p < SIDE * SIDE; p++) {
		rgb[3 * p] = rec[1 + p];
		rgb[3 * p + 1] = rec[1 + SIDE * SIDE + p];
		rgb[3 * p + 2] = rec[1 + 2 * SIDE * SIDE + p];
	}
	if (o->image_format == SK_IMAGE_JPEG)
		rc = sk_image_encode_jpeg(rgb, SIDE, SIDE, 3, o->quality, &out,
		    &outlen, &err);
	else
		rc = sk_image_encode_png(rgb, SIDE, SIDE, 3, -1, &out, &outlen,
		    &err);
	if (rc != 0) {
		pack_error(s, "%s: %s", s->key,
		    err.msg);
		return rc;
	}
	pack_add(s, o->image_format == SK_IMAGE_JPEG ? "jpg" : "png", out,
	    outlen);
	pack_add_label(s, rec[0]);
	return 0;
}

void
pack_cifar10_init(struct pack_dataset *ds, const char *src,
    const char *split)
{
	struct cifar *c = xcalloc(1, sizeof *c);
	char path[4096], sub[4096];
	const char *dir = src;
	struct sk_error err;
	size_t size;
	int i;

	memset(ds, 0, sizeof *ds);
	ds->name = "cifar10";
	ds->produce = cifar_produce;
	ds->ctx = c;
	if (strcmp(split, "train") != 0 && strcmp(split, "test") != 0)
		usage_error("--split: cifar10 has train and "
		    "test, not '%s'", split);
	ds->split = split;
	/* Accept the folder the archive unpacks into, too. */
	pathf(sub, sizeof sub, "%s/cifar-10-batches-bin", src);
	if (exists(sub))
		dir = sub;
	if (!exists(dir))
		die("%s: %s", src, strerror(errno));
	check_layout(dir);
	c->nfiles = strcmp(split, "train") == 0 ? 5 : 1;
	for (i = 0; i < c->nfiles; i++) {
		if (c->nfiles == 5)
			pathf(path, sizeof path, "%s/data_batch_%d.bin", dir,
			    i + 1);
		else
			pathf(path, sizeof path, "%s/test_batch.bin", dir);
		if (read_file(path, &c->data[i], &size, &err) != 0)
			die("%s", err.msg);
		if (size % RECORD != 0)
			die("%s: truncated: %zu bytes is not a whole number of "
			    "%d-byte records; the record at offset %zu is cut "
			    "short", path, size, RECORD,
			    size - size % RECORD);
		if (size == 0)
			die("%s: empty file", path);
		c->nrec[i] = size / RECORD;
		ds->nitems += c->nrec[i];
	}
	read_classes(ds, dir);
}

void
pack_dataset_free(struct pack_dataset *ds)
{
	size_t i;

	for (i = 0; i < ds->nclasses; i++)
		free(ds->classes[i]);
	free(ds->classes);
	if (ds->produce == cifar_produce) {
		struct cifar *c = ds->ctx;

		for (i = 0; i < 5; i++)
			free(c->data[i]);
	} else
		pack_images_free(ds);
	free(ds->ctx);
	memset(ds, 0, sizeof *ds);
}
