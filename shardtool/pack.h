/*
 * pack.h - the packing engine that every "pack" dataset shares: a dataset
 * turns item i into a sample; the engine shuffles, runs the conversions on
 * --workers threads, writes samples in order into shards within
 * --max-count and --max-size, and writes the manifest and the summary.
 */
#ifndef PACK_H
#define PACK_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "shardtool.h"

#define PACK_MAX_MEMBERS 4
#define PACK_KEY_MAX SK__KEY_MAX	/* the loader's files form cuts keys alike */

struct pack_member {
	char ext[16];		/* "png", "cls", "json" */
	uint8_t *data;		/* malloc'd, freed by the engine */
	size_t size;
};

struct pack_sample {
	char key[PACK_KEY_MAX];
	int label;
	struct pack_member m[PACK_MAX_MEMBERS];
	int nm;
	const char *converted;	/* why it was converted ("CMYK JPEG"), or NULL */
	const char *skipped;	/* why it was skipped, or NULL */
	char detail[SK_ERRMSG_MAX];	/* the message behind skipped */
};

/* Options of every pack; the dataset-specific ones live in the dataset. */
struct pack_opts {
	const char *source;	/* SRC, for --json */
	const char *pattern;	/* -o 'DIR/name-%06d.tar' */
	const char *manifest;	/* --manifest, or NULL: derived from pattern */
	uint64_t maxcount;
	uint64_t maxsize;
	uint64_t seed;		/* --seed: shuffle the samples with it */
	int shuffle;		/* whether --seed was given */
	int workers;
	int strict;
	int fsync;
	int64_t mtime;		/* of every member: SOURCE_DATE_EPOCH or 0 */
	int quality;		/* JPEG quality of anything re-encoded */
	int resize_short;	/* 0: off */
	int image_format;	/* SK_IMAGE_PNG or SK_IMAGE_JPEG (CIFAR) */
	int progress;		/* -1: when stderr is a terminal */
	const char *json;	/* --json FILE, "-" for stdout, or NULL */
};

struct pack_dataset {
	const char *name;	/* "cifar10" */
	const char *split;	/* "train" */
	size_t nitems;
	char **classes;		/* index = label */
	size_t nclasses;
	/* Fill s for item i; called from several threads at once. Returns
	 * 0 (s filled, or s->skipped set), or < 0 to stop the whole pack
	 * with s->detail as the message. */
	int (*produce)(struct pack_dataset *ds, const struct pack_opts *o,
	    size_t i, struct pack_sample *s);
	void *ctx;
};

/* Add a member to s; data is taken over (freed by the engine). */
void pack_add(struct pack_sample *s, const char *ext, uint8_t *data,
    size_t size);
/* Add the label as a ".cls" member (ASCII decimal). */
void pack_add_label(struct pack_sample *s, int label);
/* Mark s skipped with a reason and a message. */
int pack_skip(struct pack_sample *s, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Set the message of a failed (rc < 0) sample. */
void pack_error(struct pack_sample *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Append src to dst as a JSON string literal. */
size_t json_quote(char *dst, size_t cap, const char *src);

/* Run the pack; prints the summary; returns the exit status. */
int pack_run(const struct pack_opts *o, struct pack_dataset *ds);

/* The datasets (pack-cifar10.c, pack-imagenet.c). Each dies with a clear
 * message when SRC is not what it expects. */
void pack_cifar10_init(struct pack_dataset *ds, const char *src,
    const char *split);
void pack_imagenet_init(struct pack_dataset *ds, const char *src,
    const char *split);
void pack_folder_init(struct pack_dataset *ds, const char *src);
void pack_dataset_free(struct pack_dataset *ds);
void pack_images_free(struct pack_dataset *ds);

#endif /* PACK_H */
