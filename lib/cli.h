/*
 * cli.h - the command-line layer every shardkit tool links (shardtool,
 * shardload, shardtrain): messages, option tables and their parser, the
 * value parsers (numbers, sizes, durations, lists, choices), --help and
 * --version, progress lines, --json output, and the loader options the
 * streaming tools share. A convenience library for the tools; it is not
 * part of libshardkit's API. The conventions it enforces are written down
 * in shardkit-cli(7).
 */
#ifndef SK_CLI_H
#define SK_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "shardkit.h"

#define CLI_EXIT_FAILURE 1	/* a run-time error */
#define CLI_EXIT_USAGE 2	/* the command line is wrong */

/* The version of every tool's --json layout; bumped when a key changes
 * meaning or goes away. */
#define CLI_JSON_SCHEMA 1

/* ------------------------------------------------------------------------ */
/* messages                                                                 */

/* -q and -v, as parsed by cli_parse(); the tools read them. */
extern int cli_quiet;
extern int cli_verbose;

/* The name messages start with: "shardtool" until cli_dispatch() picks a
 * command, then "shardtool pack". */
void cli_init(const char *tool);
const char *cli_prog(void);
/* Keep the few-MB blocks the tools pass between threads in the heap (see
 * cli.c); call first thing in main. */
void cli_heap_tune(void);
/* Decimals for "%.*f" that show v (>= 0): 2, or three significant digits
 * under 0.1 (0.00418, 0.0312): a tiny model's 0.004 GFLOPs an image is
 * not "0.00". */
int cli_decimals(double v);

/*
 * A hook run before die() and usage_error() exit (shardtrain closes MPI
 * there), and whether this process speaks at all: under mpirun only rank 0
 * prints usage errors, help and the version.
 */
void cli_set_exit_hook(void (*hook)(int status));
void cli_set_silent(int silent);

/* "prog: message" on stderr, then exit 1. */
void die(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));
/* "prog: message" on stderr. */
void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "prog: message", the command's usage line and where to read more, then
 * exit 2. */
void usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));
/* Exit with status, through the exit hook. */
void cli_exit(int status) __attribute__((noreturn));

/* ------------------------------------------------------------------------ */
/* options                                                                  */

enum cli_type {
	CLI_FLAG,		/* no value */
	CLI_INT,		/* a whole number in [min, max] */
	CLI_UINT64,		/* any whole number in 0..2^64-1 (seeds) */
	CLI_REAL,		/* a finite number in [min, max] */
	CLI_SIZE,		/* bytes: 64M, 1.5GiB, 4096; in [min, max] */
	CLI_DURATION,		/* seconds: 30, 30s, 250ms, 5m, 1.5h; [min, max] */
	CLI_CHOICE,		/* one of choices[] */
	CLI_STRING,		/* anything non-empty */
	CLI_LIST		/* count numbers separated by commas */
};

struct cli_option {
	const char *name;	/* the long name, without "--" */
	int short_name;		/* 'o', or 0 */
	int id;			/* handed back to the tool's setter */
	enum cli_type type;
	const char *arg;	/* the value's name in --help: "N", "SIZE" */
	const char *help;	/* one line, the default in parentheses; a
				 * '\n' starts a continuation line */
	double min, max;	/* CLI_INT, CLI_REAL, CLI_SIZE, CLI_DURATION */
	const char *const *choices;	/* CLI_CHOICE: NULL-terminated */
	int count;		/* CLI_LIST: how many numbers */
};

/* A titled section of --help; a command's groups end with { NULL, NULL }. */
struct cli_group {
	const char *title;
	const struct cli_option *opts;	/* ends with a zero name */
};

/*
 * One command, as tmux's cmd_entry: its name, usage line, what --help
 * says about it and the options it takes. The library parses them; the
 * command's setter stores each value.
 */
struct cli_command {
	const char *name;	/* "pack"; NULL for a tool without commands */
	const char *usage;	/* after the tool's name: "pack DATASET SRC
				 * -o PATTERN [options]" */
	const char *summary;	/* one line for the tool's command list */
	const char *about;	/* paragraphs --help prints before options */
	const struct cli_group *groups;
	int min_args, max_args;	/* positional arguments; max -1: any */
	int (*exec)(int argc, char **argv);	/* argv[0] is the command */
};

/* What an option's value parsed to. */
struct cli_value {
	long long i;		/* CLI_INT; CLI_CHOICE's index; CLI_FLAG 1 */
	uint64_t u;		/* CLI_UINT64, CLI_SIZE */
	double d;		/* CLI_REAL, CLI_DURATION (seconds) */
	double list[4];		/* CLI_LIST */
	const char *s;		/* the argument as given (NULL for a flag) */
};

typedef void (*cli_setter)(void *ctx, const struct cli_option *o,
    const struct cli_value *v);

/*
 * Parse argv (argv[0] is the command's name) against cmd's groups and the
 * options every tool has (-h/--help, -V/--version, -q/--quiet,
 * -v/--verbose). Each option is checked and handed to set in order;
 * options and positional arguments may be mixed, and "--" ends the
 * options. Returns the index in argv of the first positional argument,
 * having checked their number against cmd. A bad option, value or
 * argument count is a usage error (exit 2); --help and --version print
 * and exit 0.
 */
int cli_parse(const struct cli_command *cmd, int argc, char **argv,
    cli_setter set, void *ctx);

/*
 * A tool with commands: "tool [-h|-V] COMMAND [ARGS]", where COMMAND may
 * be a unique prefix. "tool help COMMAND" is "tool COMMAND --help". With
 * dflt set, a first argument that is an option (or none) runs dflt.
 * Sets the message prefix to "tool command" and returns the command;
 * argv[*first] is then the command's argv[0].
 */
const struct cli_command *cli_dispatch(const char *tool, const char *about,
    const struct cli_command *const *table, const struct cli_command *dflt,
    int argc, char **argv, int *first);

/* Parse arg as o's value into v, as cli_parse does; a bad value is a
 * usage error naming it as_typed ("-o cache_mb=0"), or as "--name arg"
 * when as_typed is NULL. */
void cli_value_of(const struct cli_option *o, const char *arg,
    struct cli_value *v, const char *as_typed);

/* Write cmd's --help to f (cli_parse does this for --help). */
void cli_help(FILE *f, const struct cli_command *cmd);

/* The long name of an option, "--batch", for messages. */
const char *cli_optname(const struct cli_option *o);

/* ------------------------------------------------------------------------ */
/* value parsers: 0, or -1 with why in err (for messages of one's own)      */

int cli_parse_int(const char *s, long long min, long long max,
    long long *out, char *err, size_t errlen);
int cli_parse_uint64(const char *s, uint64_t *out, char *err, size_t errlen);
int cli_parse_real(const char *s, double min, double max, double *out,
    char *err, size_t errlen);
/* K, M, G, T (optionally followed by B or iB, any case) are 2^10, 2^20,
 * 2^30, 2^40 bytes; decimals are allowed and the result rounded down. */
int cli_parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out,
    char *err, size_t errlen);
/* ms, s, m, h, or no unit for seconds. */
int cli_parse_duration(const char *s, double min, double max, double *out,
    char *err, size_t errlen);
int cli_parse_list(const char *s, int count, double *out, char *err,
    size_t errlen);
int cli_parse_choice(const char *s, const char *const *choices, int *out,
    char *err, size_t errlen);

/* ------------------------------------------------------------------------ */
/* the node                                                                 */

/*
 * Under mpirun or srun: this rank, the world and the ranks on this node,
 * from the launcher's environment. Returns 1 when a launcher was found, 0
 * when not (rank 0 of 1), -1 with err for values that make no sense.
 */
int cli_launcher(int *rank, int *world, int *local_size, char *err,
    size_t errlen);
/*
 * Threads this process should run by default: the CPUs it may use, shared
 * among the ranks on this node unless the launcher already bound each rank
 * to its own CPUs. At least 1.
 */
int cli_cpus_per_rank(void);

/* ------------------------------------------------------------------------ */
/* progress lines                                                           */

/*
 * One line on stderr, rewritten in place at most once a second; only when
 * stderr is a terminal and not under --quiet.
 */
struct cli_progress {
	int on;
	int shown;
	double last;
};
void cli_progress_init(struct cli_progress *p);
/* Whether a second has passed since the last line (always 0 when off). */
int cli_progress_due(struct cli_progress *p);
void cli_progress(struct cli_progress *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* End the line, if one was shown. */
void cli_progress_done(struct cli_progress *p);

/* Seconds on the monotonic clock. */
double cli_now(void);

/* snprintf into a path buffer; a path that does not fit is fatal (a name
 * cut short would name another file). */
char *pathf(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------------ */
/* --json                                                                   */

/*
 * A JSON document written as it goes: cli_json_open("-") writes to stdout,
 * any other name to a file that appears whole when cli_json_close()
 * succeeds. The document opens with "schema", "tool" and "version". Keys
 * are snake_case with their unit as the suffix (_bytes, _seconds,
 * images_per_second); shardkit-cli(7) lists every key of every tool.
 * Write errors die naming the file.
 */
struct cli_json;
struct cli_json *cli_json_open(const char *path);
void cli_json_object(struct cli_json *j, const char *key);	/* { */
void cli_json_array(struct cli_json *j, const char *key);	/* [ */
void cli_json_end(struct cli_json *j);				/* } or ] */
void cli_json_int(struct cli_json *j, const char *key, long long v);
void cli_json_uint(struct cli_json *j, const char *key, uint64_t v);
/* NaN and infinities are written as null. */
void cli_json_real(struct cli_json *j, const char *key, double v);
/* NULL is written as null. */
void cli_json_str(struct cli_json *j, const char *key, const char *v);
void cli_json_bool(struct cli_json *j, const char *key, int v);
void cli_json_null(struct cli_json *j, const char *key);
/* "skipped" (the total) and "skipped_by_reason": {reason: count} for
 * every reason, zeros included. */
void cli_json_skips(struct cli_json *j, const uint64_t *counts,
    const char *const *reasons, int n);
void cli_json_close(struct cli_json *j);

/* ------------------------------------------------------------------------ */
/* the loader options shardload and shardtrain share                        */

/*
 * One table, so a flag means one thing with one limit in every tool. A
 * tool takes the groups it wants (and leaves out what it sets itself, as
 * shardtrain does the pixel type), passes every option cli_parse() hands
 * it with an id in the loader range to cli_loader_set(), and calls
 * cli_loader_finish() after parsing.
 */
enum {
	CLI_LOADER_FIRST = 1000,
	CLI_L_BATCH = CLI_LOADER_FIRST, CLI_L_EPOCH, CLI_L_EPOCHS, CLI_L_SEED,
	CLI_L_SHUFFLE, CLI_L_WORKERS, CLI_L_IO_STREAMS, CLI_L_PREFETCH,
	CLI_L_RING, CLI_L_REMAINDER, CLI_L_RESUME_BATCH, CLI_L_STRICT,
	CLI_L_MAX_PIXELS, CLI_L_MAX_SAMPLE, CLI_L_NO_DECODE, CLI_L_RANK,
	CLI_L_WORLD, CLI_L_DEVICE, CLI_L_IMAGE_SIZE, CLI_L_CROP, CLI_L_SCALE,
	CLI_L_RATIO, CLI_L_RESIZE, CLI_L_FLIP, CLI_L_NO_FLIP, CLI_L_DTYPE,
	CLI_L_LAYOUT, CLI_L_MEAN, CLI_L_STD, CLI_L_FORM, CLI_L_AHEAD,
	CLI_L_MAX_INFLIGHT,
	CLI_LOADER_LAST
};

/* The sections: what is streamed and how it is shuffled and batched; the
 * pipeline's threads and memory; the augmentation; the output's pixels;
 * where the process sits among ranks. */
/*
 * The fetch engine's options (http(s) sources), one group every tool that
 * reads remote data lists: cli_remote_set() takes its ids, and
 * cli_remote_finish() applies them and starts the run's counters.
 */
enum {
	CLI_REMOTE_FIRST = 1100,
	CLI_R_CONNECTIONS = CLI_REMOTE_FIRST, CLI_R_PARTS, CLI_R_PART_SIZE,
	CLI_R_CONNECT_TIMEOUT, CLI_R_STALL_TIMEOUT, CLI_R_RETRY_TIME,
	CLI_R_ATTEMPTS, CLI_R_CA_FILE, CLI_R_NO_SIGN, CLI_R_CROSS_ORIGIN,
	CLI_REMOTE_LAST
};

extern const struct cli_option cli_remote_opts[];

/* Whether a source names a manifest: NAME.json, before any query of an
 * http(s) URL (a signed URL). */
int cli_is_manifest(const char *source);
/* A source as --json writes it: without a password or signature. */
void cli_json_source(struct cli_json *j, const char *key,
    const char *source);

struct cli_remote {
	struct sk_fetch_config cfg;
	struct sk_fetch_stats start;
};

void cli_remote_init(struct cli_remote *r);
int cli_remote_set(struct cli_remote *r, const struct cli_option *o,
    const struct cli_value *v);
void cli_remote_finish(struct cli_remote *r);
/* The counters since cli_remote_finish(). */
void cli_remote_stats(const struct cli_remote *r, struct sk_fetch_stats *st);
/* KEY: {[ahead, ahead_peak, ahead_cap: a loader's read-ahead, when ls is
 * not NULL,] bytes, requests, retries, retries_by_cause, resumes,
 * refetched_bytes, failures, mean_ttfb_seconds, network_wait_seconds}. */
void cli_json_remote(struct cli_json *j, const char *key,
    const struct sk_fetch_stats *st, const struct sk_loader_stats *ls);
/* Two lines, or nothing when no request was made. */
void cli_print_remote(FILE *f, const struct sk_fetch_stats *st);

extern const struct cli_option cli_loader_data[];
extern const struct cli_option cli_loader_pipeline[];
extern const struct cli_option cli_loader_augment[];
extern const struct cli_option cli_loader_output[];
extern const struct cli_option cli_loader_ranks[];

struct cli_loader {
	struct sk_loader_config cfg;
	struct cli_remote remote;	/* the cli_remote_opts group */
	int rank_set, world_set, workers_set, local_size;
	int ahead_set;		/* --ahead */
	int io_fixed;		/* --io-streams, --parts or --part-size */
	int launcher;		/* 1: rank and world came from mpirun/srun */
};

void cli_loader_init(struct cli_loader *l);
/* 1 when o is a loader option (and was applied), else 0. */
int cli_loader_set(struct cli_loader *l, const struct cli_option *o,
    const struct cli_value *v);
/*
 * After parsing: the source (a name ending in .json is a manifest, else a
 * shard pattern), the launcher's rank and world where no option gave them,
 * workers from cli_cpus_per_rank(), and the checks between options. Usage
 * errors exit 2.
 */
void cli_loader_finish(struct cli_loader *l, const char *source);

/* The names the options take, for --json and messages. */

const char *cli_crop_name(enum sk_crop c);
const char *cli_dtype_name(enum sk_dtype d);
const char *cli_layout_name(enum sk_layout l);
const char *cli_remainder_name(enum sk_remainder r);
const char *cli_form_name(enum sk_form f);

#endif /* SK_CLI_H */
