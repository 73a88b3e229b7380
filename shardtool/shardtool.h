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

/* Exit codes: 0 success, 1 run-time failure, 2 usage error. */
#define EXIT_USAGE 2

struct cmd_entry {
	const char *name;
	const char *usage;	/* "synth cifar10|imagenet DIR [options]" */
	const char *help;	/* the full --help text, options one per line */
	int (*exec)(int argc, char **argv);	/* argv[0] is the name */
};

extern const struct cmd_entry cmd_synth_entry;
extern const struct cmd_entry cmd_pack_entry;
extern const struct cmd_entry cmd_ls_entry;
extern const struct cmd_entry cmd_verify_entry;
extern const struct cmd_entry cmd_index_entry;
extern const struct cmd_entry cmd_cat_entry;
extern const struct cmd_entry cmd_extract_entry;

extern const char *progname;	/* "shardtool" or "shardtool CMD" */

/* "shardtool CMD: message" on stderr; die() then exits 1. */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Usage error: message, then "usage: shardtool USAGE", exit 2. */
void usage_error(const struct cmd_entry *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
/* The usage error for what getopt_long returned for a bad option: '?' or
 * ':' (optstring starting with ':' so that ':' means a missing value). */
void bad_option(const struct cmd_entry *cmd, int c, char **argv)
    __attribute__((noreturn));
/* Print cmd->help to stdout and exit 0. */
void print_help(const struct cmd_entry *cmd) __attribute__((noreturn));

/* Strict number parsing for option values: the whole string must be a
 * number in [min, max], else a usage error naming the option. Sizes accept
 * K, M, G suffixes (powers of 1024). */
long long parse_int(const struct cmd_entry *cmd, const char *opt,
    const char *s, long long min, long long max);
uint64_t parse_size(const struct cmd_entry *cmd, const char *opt,
    const char *s);

/* snprintf into a path buffer; a path that does not fit is fatal. */
char *pathf(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Read a whole file into a malloc'd buffer. */
int read_file(const char *path, uint8_t **data, size_t *size,
    struct sk_error *err);
/* Expand each URL argument (brace patterns, "::" lists) into out. */
void expand_args(const struct cmd_entry *cmd, int argc, char **argv,
    struct sk_strlist *out);
/* The splitmix64 generator: the same stream on every machine. */
uint64_t splitmix64(uint64_t *state);
/* Common long option for every command. */
#define OPT_HELP 'h'

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

#endif /* SHARDTOOL_H */
