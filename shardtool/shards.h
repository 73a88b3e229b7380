/*
 * shards.h - what ls, verify, index, cat and extract share: turning URL and
 * manifest arguments into a shard list, opening the library's sample reader,
 * what extract refuses (verify reports the same), and output helpers.
 */
#ifndef SHARDS_H
#define SHARDS_H

#include <stddef.h>
#include <stdint.h>

#include "shardtool.h"

/* ------------------------------------------------------------------------ */
/* options                                                                  */

/* The "remote (http, https, gs, s3)" group every reading command lists. */
#define SHARDS_REMOTE_GROUP { "remote (http, https, gs, s3)", cli_remote_opts }

/*
 * cli_parse() for a command that reads shards: the remote options go to
 * the fetch engine, the rest to set (which may be NULL), and the engine is
 * configured before any URL is read.
 */
int shards_parse(const struct cli_command *cmd, int argc, char **argv,
    cli_setter set, void *ctx);

/* ------------------------------------------------------------------------ */
/* shard lists                                                              */

struct shard {
	char *url;		/* ready for sk_source_open() */
	char *shown;		/* url for messages: no password, signature
				 * or token (sk_url_redact) */
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
 * its folder, take its place; one ending in '/' is a folder (local, or an
 * http(s) JSON autoindex) whose tar files take its place. No argument is a usage error, a manifest
 * that cannot be read a run-time one.
 */
void shards_expand(int argc, char **argv, struct shard_list *out);
void shards_free(struct shard_list *l);

/* ------------------------------------------------------------------------ */
/* reading samples                                                          */

/*
 * Open the library's sample reader (sk_sample_reader) on a URL with the
 * tar reader flags tar_flags: 0, or < 0 with err naming the URL.
 */
int samples_open(const char *url, int tar_flags, sk_sample_reader **r,
    struct sk_error *err);
/* The same, hashing the shard's bytes as they are read (md5 non-NULL:
 * *md5 is the source, which the reader owns; sk_source_md5_end it before
 * closing the reader). */
int samples_open_md5(const char *url, int tar_flags, sk_sample_reader **r,
    sk_source **md5, struct sk_error *err);
/*
 * How many of s's members were read whole, given what
 * sk_sample_reader_next() returned: all of them, or after a failure (rc < 0)
 * those before the damaged member, which the reader keeps in s last.
 */
size_t sample_whole(const struct sk_sample *s, int rc);
/* Warn that a sample over SK_SAMPLE_MAX_BYTES was skipped, naming its URL,
 * key, offset and size. */
void warn_too_big(const char *url, const struct sk_sample *s);

/* ------------------------------------------------------------------------ */
/* entries extract refuses                                                  */

/* A member path cut into its components, "." and empty ones dropped. */
struct path {
	char *buf;
	char **c;
	size_t n;
};

void path_split(struct path *p, const char *s);
void path_free(struct path *p);
/* A name inside the folder: relative, without "..". NULL if so, else why
 * not. */
const char *path_unsafe(const char *s, const struct path *p);

/*
 * Why extract refuses the tar entry (name, type, linkname) whatever the
 * folder holds, in why (cap bytes), or NULL when it does not: an absolute
 * name or a ".." component, a device or FIFO, a symbolic link whose target
 * could leave the folder, a hard link to an unsafe or empty target. verify
 * reports the same entries, so the two agree.
 */
const char *entry_refused(const char *name, enum sk_tar_type type,
    const char *linkname, char *why, size_t cap);

/* ------------------------------------------------------------------------ */
/* output                                                                   */

/* Flush stdout; a failed write (full disk, closed pipe) is fatal. */
void flush_stdout(void);

#endif /* SHARDS_H */
