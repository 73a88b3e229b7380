/*
 * shards.h - what ls, verify, index, cat and extract share: turning URL and
 * manifest arguments into a shard list, reading a shard sample by sample,
 * and option and output helpers.
 */
#ifndef SHARDS_H
#define SHARDS_H

#include <stddef.h>
#include <stdint.h>

#include "shardtool.h"

/* ------------------------------------------------------------------------ */
/* shard lists                                                              */

struct shard {
	char *url;		/* ready for sk_source_open() */
	/* The manifest entry this shard came from and the number of classes
	 * its manifest names; NULL and 0 for a plain URL argument. */
	const struct sk_manifest_shard *expect;
	size_t nclasses;
};

struct shard_list {
	struct shard *v;
	size_t n;
	struct sk_manifest **manifests;	/* owned; expect points into them */
	size_t nmanifests;
};

/*
 * Expand URL arguments (brace patterns, "::" lists) into shards. An
 * argument ending in ".json" is a manifest: its shards, resolved against
 * its folder, take its place. No argument is a usage error, a manifest
 * that cannot be read a run-time one.
 */
void shards_expand(const struct cmd_entry *cmd, int argc, char **argv,
    struct shard_list *out);
void shards_free(struct shard_list *l);

/* ------------------------------------------------------------------------ */
/* reading tars and samples                                                        */

/* Open a tar reader on a URL: 0, or < 0 with err naming the URL. */
int tar_open(const char *url, int flags, sk_tar_reader **r,
    struct sk_error *err);
/*
 * Copy the data of the current member to fd. < 0 when the reader failed
 * (sk_errmsg(r) says why) or, with *write_errno set, when a write failed.
 */
int copy_member(sk_tar_reader *r, int fd, int *write_errno);

struct sample_member {
	char *name;
	const char *ext;	/* points into name */
	uint64_t size;
	uint64_t header_offset;
	uint64_t data_offset;
	uint8_t *data;		/* size bytes when loaded, else NULL */
};

/* The members that share a key and sit next to each other in the tar. */
struct sample {
	char *key;
	struct sample_member *m;
	size_t n, cap;
};

struct sample_reader {
	sk_tar_reader *tar;
	const char *url;		/* the caller's, for messages */
	/* Load the data of members whose extension this accepts; NULL
	 * loads nothing. */
	int (*want)(const char *ext);
	struct sample_member ahead;	/* first member of the next sample */
	int have_ahead;
	int done;
	struct sk_error err;
};

/* 0, or < 0 with sr->err.msg naming the URL. */
int sample_reader_open(struct sample_reader *sr, const char *url,
    int (*want)(const char *ext));
/*
 * 1 and the next sample, 0 at the end, or < 0 with sr->err.msg naming the
 * URL and offset. On failure s keeps the members read before the damage.
 */
int sample_next(struct sample_reader *sr, struct sample *s);
void sample_reader_close(struct sample_reader *sr);
void sample_free(struct sample *s);

/* ------------------------------------------------------------------------ */
/* output                                                                   */

/* Flush stdout; a failed write (full disk, closed pipe) is fatal. */
void flush_stdout(void);

#endif /* SHARDS_H */
