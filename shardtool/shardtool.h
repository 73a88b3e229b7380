/*
 * shardtool.h - what the shardtool subcommands share: the command table
 * entry, error helpers and small parsing utilities.
 */
#ifndef SHARDTOOL_H
#define SHARDTOOL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "shardkit.h"

#include "cli.h"

/* Each command is a cli_command (lib/cli.h): its name, usage, option
 * tables and exec, parsed by cli_parse(). */
extern const struct cli_command cmd_synth_entry;
extern const struct cli_command cmd_pack_entry;
extern const struct cli_command cmd_ls_entry;
extern const struct cli_command cmd_verify_entry;
extern const struct cli_command cmd_index_entry;
extern const struct cli_command cmd_cat_entry;
extern const struct cli_command cmd_extract_entry;
extern const struct cli_command cmd_cp_entry;

/* The end of an option table. */
#define OPT_END { NULL, 0, 0, 0, NULL, NULL, 0, 0, NULL, 0 }

/* Read a whole file into a malloc'd buffer. */
int read_file(const char *path, uint8_t **data, size_t *size,
    struct sk_error *err);
/* Expand each URL argument (brace patterns, "::" lists) into out. */
void expand_args(int argc, char **argv, struct sk_strlist *out);
void mkdir_p(const char *dir);
/* Whether s names a bucket object or prefix (gs://, s3://). */
int is_bucket_url(const char *s);
/* The splitmix64 generator: the same stream on every machine. */
uint64_t splitmix64(uint64_t *state);

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

#endif /* SHARDTOOL_H */
