/*
 * cli.c - the tools' shared command-line layer: messages, the option
 * parser and --help built from option tables, value parsers, the node's
 * launcher and CPUs, progress lines and the --json writer. See cli.h.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#ifdef HAVE_MALLOC_H
#include <malloc.h>
#endif
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

int cli_quiet;
int cli_verbose;

static char prog[128] = "shardkit";
static const struct cli_command *cur_cmd;	/* for usage errors */
/* cli_parse's tables, freed by cli_exit when --help, --version or a usage
 * error ends the program from inside the parse. */
static const struct cli_option **cur_all;
static struct option *cur_lo;
static const char *cur_tool = "shardkit";
static void (*exit_hook)(int);
static int silent;

/* ------------------------------------------------------------------------ */
/* messages                                                                 */

void
cli_init(const char *tool)
{
	cur_tool = tool;
	snprintf(prog, sizeof prog, "%s", tool);
}

/*
 * The tools move their data through buffers of a few hundred KB to a few
 * MB that one thread allocates and another frees: a sample's bytes, an
 * image to encode or decode, a fetched part. glibc's sliding thresholds
 * give such blocks back to the kernel as they are freed (munmap, or a
 * trimmed arena) and fault them in again for the next: a third of pack's
 * time, and a fifth of shardload's CPU over loopback HTTP (200,000 page
 * faults for 2 GB). Keep blocks up to 8 MiB in the heap and up to 64 MiB
 * free at an arena's top. The library leaves its caller's allocator alone
 * (shardkit(3), Memory).
 */
void
cli_heap_tune(void)
{
#ifdef HAVE_MALLOPT
	mallopt(M_MMAP_THRESHOLD, 8 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}

int
cli_decimals(double v)
{
	int d = 2;

	while (v > 0 && v < 1 && d < 9) {
		v *= 10;
		if (v < 1)
			d++;
	}
	return v > 0 && d > 2 ? d + 1 : d;
}

const char *
cli_prog(void)
{
	return prog;
}

void
cli_set_exit_hook(void (*hook)(int status))
{
	exit_hook = hook;
}

void
cli_set_silent(int s)
{
	silent = s;
}

static void
free_parse_tables(void)
{
	free(cur_lo);
	free(cur_all);
	cur_lo = NULL;
	cur_all = NULL;
}

void
cli_exit(int status)
{
	free_parse_tables();
	fflush(stdout);
	if (exit_hook != NULL)
		exit_hook(status);
	exit(status);
}

static void
vmessage(const char *fmt, va_list ap)
{
	char buf[4096];

	vsnprintf(buf, sizeof buf, fmt, ap);
	fflush(stdout);
	/* One write, so lines of several ranks or threads do not mix. */
	fprintf(stderr, "%s: %s\n", prog, buf);
}

void
die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmessage(fmt, ap);
	va_end(ap);
	cli_exit(CLI_EXIT_FAILURE);
}

void
warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmessage(fmt, ap);
	va_end(ap);
}

static void
usage_line(FILE *f, const struct cli_command *cmd)
{
	const char *u = cmd->usage, *nl;

	/* A usage of several lines gets the tool's name on each. */
	fprintf(f, "usage: ");
	for (;;) {
		nl = strchr(u, '\n');
		fprintf(f, "%s %.*s\n", cur_tool, nl ? (int)(nl - u) :
		    (int)strlen(u), u);
		if (nl == NULL)
			break;
		u = nl + 1;
		fprintf(f, "       ");
	}
}

void
usage_error(const char *fmt, ...)
{
	va_list ap;

	if (!silent) {
		va_start(ap, fmt);
		vmessage(fmt, ap);
		va_end(ap);
		if (cur_cmd != NULL) {
			usage_line(stderr, cur_cmd);
			fprintf(stderr, "Try '%s --help' for more.\n", prog);
		}
	}
	cli_exit(CLI_EXIT_USAGE);
}

/* ------------------------------------------------------------------------ */
/* value parsers                                                            */

static int
bad(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
bad(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

int
cli_parse_int(const char *s, long long min, long long max, long long *out,
    char *err, size_t errlen)
{
	long long v;
	char *end;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (*s == '\0' || *end != '\0' || errno != 0 || v < min || v > max)
		return bad(err, errlen, "not a whole number from %lld to %lld",
		    min, max);
	*out = v;
	return 0;
}

int
cli_parse_uint64(const char *s, uint64_t *out, char *err, size_t errlen)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (*s < '0' || *s > '9' || *end != '\0' || errno != 0)
		return bad(err, errlen, "not a whole number from 0 to %llu",
		    (unsigned long long)UINT64_MAX);
	*out = (uint64_t)v;
	return 0;
}

int
cli_parse_real(const char *s, double min, double max, double *out,
    char *err, size_t errlen)
{
	double v;
	char *end;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end != '\0' || errno != 0 || !isfinite(v) ||
	    v < min || v > max)
		return bad(err, errlen, "not a number from %g to %g", min, max);
	*out = v;
	return 0;
}

/* A decimal number without sign, exponent, hex or inf: "1", "1.5", ".5". */
static int
decimal(const char *s, double *v, const char **end)
{
	const char *p = s;
	int digits = 0;

	while (*p >= '0' && *p <= '9')
		p++, digits++;
	if (*p == '.') {
		p++;
		while (*p >= '0' && *p <= '9')
			p++, digits++;
	}
	if (digits == 0)
		return -1;
	*v = strtod(s, NULL);
	*end = p;
	return 0;
}

static void
fmt_size(char *buf, size_t n, uint64_t v)
{
	static const char units[] = "KMGT";
	int i;

	for (i = 3; i >= 0; i--)
		if (v >= (1ULL << (10 * (i + 1))) &&
		    v % (1ULL << (10 * (i + 1))) == 0) {
			snprintf(buf, n, "%llu%c", (unsigned long long)(v >>
			    (10 * (i + 1))), units[i]);
			return;
		}
	snprintf(buf, n, "%llu", (unsigned long long)v);
}

int
cli_parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out,
    char *err, size_t errlen)
{
	char lo[32], hi[32];
	const char *p;
	double v, mul = 1;
	int shift = 0;

	fmt_size(lo, sizeof lo, min);
	fmt_size(hi, sizeof hi, max);
	if (decimal(s, &v, &p) != 0)
		goto fail;
	switch (*p) {
	case 'k': case 'K': shift = 10; break;
	case 'm': case 'M': shift = 20; break;
	case 'g': case 'G': shift = 30; break;
	case 't': case 'T': shift = 40; break;
	}
	if (shift != 0) {
		p++;
		mul = ldexp(1, shift);
		if (*p == 'i' || *p == 'I')
			p++;
		if (*p == 'b' || *p == 'B')
			p++;
		else if (p[-1] == 'i' || p[-1] == 'I')
			goto fail;
	} else if (*p == 'b' || *p == 'B')
		p++;
	if (*p != '\0')
		goto fail;
	v = floor(v * mul);
	if (v < (double)min || v > (double)max)
		return bad(err, errlen, "not a size from %s to %s", lo, hi);
	*out = (uint64_t)v;
	return 0;
fail:
	return bad(err, errlen, "not a size such as 64M, 1.5GiB or 4096 "
	    "(K, M, G and T are powers of 1024)");
}

int
cli_parse_duration(const char *s, double min, double max, double *out,
    char *err, size_t errlen)
{
	const char *p;
	double v;

	if (decimal(s, &v, &p) != 0)
		goto fail;
	if (strcmp(p, "ms") == 0)
		v /= 1000;
	else if (strcmp(p, "m") == 0 || strcmp(p, "min") == 0)
		v *= 60;
	else if (strcmp(p, "h") == 0)
		v *= 3600;
	else if (*p != '\0' && strcmp(p, "s") != 0)
		goto fail;
	if (v < min || v > max)
		return bad(err, errlen, "not a duration from %gs to %gs", min,
		    max);
	*out = v;
	return 0;
fail:
	return bad(err, errlen, "not a duration such as 30s, 250ms, 5m or "
	    "1.5h (a plain number is seconds)");
}

int
cli_parse_list(const char *s, int count, double *out, char *err,
    size_t errlen)
{
	const char *p = s;
	char *end;
	int i;

	for (i = 0; i < count; i++) {
		errno = 0;
		out[i] = strtod(p, &end);
		if (end == p || errno != 0 || !isfinite(out[i]) ||
		    (i < count - 1 ? *end != ',' : *end != '\0'))
			return bad(err, errlen, "need %d numbers separated by "
			    "commas", count);
		p = end + 1;
	}
	return 0;
}

int
cli_parse_choice(const char *s, const char *const *choices, int *out,
    char *err, size_t errlen)
{
	size_t n = 0;
	int i;

	for (i = 0; choices[i] != NULL; i++)
		if (strcmp(s, choices[i]) == 0) {
			*out = i;
			return 0;
		}
	n = (size_t)snprintf(err, errlen, "not one of ");
	for (i = 0; choices[i] != NULL && n < errlen; i++)
		n += (size_t)snprintf(err + n, errlen - n, "%s%s", i == 0 ? "" :
		    choices[i + 1] == NULL ? " or " : ", ", choices[i]);
	return -1;
}

/* ------------------------------------------------------------------------ */
/* the option parser                                                        */

/* A hidden first argument: print the words a shell may complete. */
#define COMPLETION_WORDS	"--completion-words"

static const struct cli_option common_opts[] = {
	{ "quiet", 'q', -1, CLI_FLAG, NULL,
	    "no progress lines; warnings and errors only", 0, 0, NULL, 0 },
	{ "verbose", 'v', -2, CLI_FLAG, NULL,
	    "more detail on stderr (twice: debug)", 0, 0, NULL, 0 },
	{ "help", 'h', -3, CLI_FLAG, NULL, "this help", 0, 0, NULL, 0 },
	{ "version", 'V', -4, CLI_FLAG, NULL, "the version", 0, 0, NULL, 0 },
	{ NULL, 0, 0, 0, NULL, NULL, 0, 0, NULL, 0 }
};

const char *
cli_optname(const struct cli_option *o)
{
	static __thread char buf[64];

	snprintf(buf, sizeof buf, "--%s", o->name);
	return buf;
}

/* Every option of cmd, then the common ones, as one array. */
static const struct cli_option **
all_options(const struct cli_command *cmd, int *n)
{
	const struct cli_option **v;
	const struct cli_group *g;
	const struct cli_option *o;
	int k = 0, cap = 0;

	for (g = cmd->groups; g != NULL && g->opts != NULL; g++)
		for (o = g->opts; o->name != NULL; o++)
			cap++;
	cap += 4;
	if ((v = calloc((size_t)cap, sizeof *v)) == NULL)
		die("out of memory");
	for (g = cmd->groups; g != NULL && g->opts != NULL; g++)
		for (o = g->opts; o->name != NULL; o++)
			v[k++] = o;
	for (o = common_opts; o->name != NULL; o++)
		v[k++] = o;
	*n = k;
	return v;
}

void
cli_value_of(const struct cli_option *o, const char *arg,
    struct cli_value *v, const char *as_typed)
{
	char err[256];
	int rc = 0, ci;

	memset(v, 0, sizeof *v);
	v->s = arg;
	switch (o->type) {
	case CLI_FLAG:
		v->i = 1;
		break;
	case CLI_INT:
		rc = cli_parse_int(arg, (long long)o->min, (long long)o->max,
		    &v->i, err, sizeof err);
		break;
	case CLI_UINT64:
		rc = cli_parse_uint64(arg, &v->u, err, sizeof err);
		break;
	case CLI_REAL:
		rc = cli_parse_real(arg, o->min, o->max, &v->d, err,
		    sizeof err);
		break;
	case CLI_SIZE:
		rc = cli_parse_size(arg, (uint64_t)o->min, (uint64_t)o->max,
		    &v->u, err, sizeof err);
		break;
	case CLI_DURATION:
		rc = cli_parse_duration(arg, o->min, o->max, &v->d, err,
		    sizeof err);
		break;
	case CLI_CHOICE:
		rc = cli_parse_choice(arg, o->choices, &ci, err, sizeof err);
		v->i = ci;
		break;
	case CLI_STRING:
		if (*arg == '\0')
			rc = bad(err, sizeof err, "empty");
		break;
	case CLI_LIST:
		rc = cli_parse_list(arg, o->count, v->list, err, sizeof err);
		break;
	}
	/* Named as the user wrote it: -j 0, --workers 0, -o workers=0. */
	if (rc != 0 && as_typed != NULL)
		usage_error("%s: %s", as_typed, err);
	if (rc != 0)
		usage_error("--%s %s: %s", o->name, arg, err);
}

static void
print_version(void)
{
	if (!silent)
		printf("%s (shardkit) %s\n", cur_tool, PACKAGE_VERSION);
	cli_exit(0);
}

/* Edits (insert, delete, change, swap two neighbours) from a to b, or
 * more than max. */
static int
edits(const char *a, size_t na, const char *b, size_t nb, int max)
{
	int d[3][64], i, j, v, best;

	if (na >= 63 || nb >= 63)
		return max + 1;
	for (j = 0; j <= (int)nb; j++)
		d[0][j] = j;
	for (i = 1; i <= (int)na; i++) {
		int *r = d[i % 3], *p = d[(i + 2) % 3], *q = d[(i + 1) % 3];

		r[0] = i;
		best = i;
		for (j = 1; j <= (int)nb; j++) {
			v = p[j - 1] + (a[i - 1] != b[j - 1]);
			if (p[j] + 1 < v)
				v = p[j] + 1;
			if (r[j - 1] + 1 < v)
				v = r[j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
			    a[i - 2] == b[j - 1] && q[j - 2] + 1 < v)
				v = q[j - 2] + 1;
			r[j] = v;
			if (v < best)
				best = v;
		}
		if (best > max)
			return max + 1;
	}
	return d[na % 3][nb];
}

/* The long option closest to what was typed (--btach: batch), or NULL
 * when none is a small slip away. */
static const char *
closest_option(const struct cli_option *const *all, int n, const char *arg)
{
	const char *best = NULL;
	size_t len;
	int i, d, max, bestd;

	if (strncmp(arg, "--", 2) != 0)
		return NULL;
	arg += 2;
	len = strcspn(arg, "=");
	max = len < 5 ? 1 : 2;
	bestd = max + 1;
	for (i = 0; i < n; i++) {
		d = edits(arg, len, all[i]->name, strlen(all[i]->name), max);
		if (d < bestd) {
			bestd = d;
			best = all[i]->name;
		}
	}
	return best;
}

/*
 * shardkit-cli(7): a long option may be cut to a unique prefix. getopt
 * reports one that is not unique as it does an unknown one: say which
 * options it could be (--cache: --cache-mb, --cache-dir, ...), and stop.
 */
static void
ambiguous(const struct cli_option *const *all, int n, const char *arg)
{
	char list[512];
	size_t len, k = 0;
	int i, found = 0;

	if (strncmp(arg, "--", 2) != 0)
		return;
	arg += 2;
	len = strcspn(arg, "=");
	if (len == 0)
		return;
	list[0] = '\0';
	for (i = 0; i < n; i++) {
		if (strncmp(all[i]->name, arg, len) != 0)
			continue;
		if (all[i]->name[len] == '\0')
			return;		/* whole: not ambiguous */
		if (k < sizeof list)
			k += (size_t)snprintf(list + k, sizeof list - k,
			    "%s--%s", found ? ", " : "", all[i]->name);
		found++;
	}
	if (found >= 2)
		usage_error("--%.*s: an ambiguous option; it could be %s",
		    (int)len, arg, list);
}

int
cli_parse(const struct cli_command *cmd, int argc, char **argv,
    cli_setter set, void *ctx)
{
	const struct cli_option **all, *o;
	struct option *lo;
	struct cli_value v;
	char shorts[128];
	size_t ns = 0;
	int n, i, c, nargs;

	cur_cmd = cmd;
	all = cur_all = all_options(cmd, &n);
	/* Shell completion (completions/shardkit.bash): the options, from
	 * the same table as the parser's. */
	if (argc >= 2 && strcmp(argv[1], COMPLETION_WORDS) == 0) {
		for (i = 0; i < n; i++)
			printf("--%s\n", all[i]->name);
		cli_exit(0);
	}
	if ((lo = cur_lo = calloc((size_t)n + 1, sizeof *lo)) == NULL)
		die("out of memory");
	/* '+' would stop at the first argument; GNU order mixes them, and
	 * ':' first reports a missing value apart from an unknown option. */
	shorts[ns++] = ':';
	for (i = 0; i < n; i++) {
		lo[i].name = all[i]->name;
		lo[i].has_arg = all[i]->type == CLI_FLAG ? no_argument :
		    required_argument;
		lo[i].val = 256 + i;
		if (all[i]->short_name != 0 && ns + 3 < sizeof shorts) {
			shorts[ns++] = (char)all[i]->short_name;
			if (all[i]->type != CLI_FLAG)
				shorts[ns++] = ':';
		}
	}
	shorts[ns] = '\0';
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
		if (c == ':') {
			usage_error("%s needs a value", optopt != 0 &&
			    optopt < 256 ? (char[]){ '-', (char)optopt, 0 } :
			    argv[optind - 1]);
		}
		if (c == '?') {
			const char *near;

			if (optopt != 0)
				usage_error("-%c: unknown option", optopt);
			ambiguous(all, n, argv[optind - 1]);
			if ((near = closest_option(all, n, argv[optind - 1])) !=
			    NULL)
				usage_error("%s: unknown option; did you mean "
				    "--%s?", argv[optind - 1], near);
			usage_error("%s: unknown option", argv[optind - 1]);
		}
		if (c >= 256)
			o = all[c - 256];
		else {
			for (i = 0; i < n && all[i]->short_name != c; i++)
				;
			o = all[i];
		}
		if (c < 256) {
			char typed[256];

			snprintf(typed, sizeof typed, "-%c %s", c, optarg ?
			    optarg : "");
			cli_value_of(o, optarg, &v, typed);
		} else
			cli_value_of(o, optarg, &v, NULL);
		switch (o->id) {
		case -1:
			cli_quiet = 1;
			sk_log_set_level(SK_LOG_WARN);
			continue;
		case -2:
			cli_verbose++;
			sk_log_set_level(cli_verbose > 1 ? SK_LOG_DEBUG :
			    SK_LOG_INFO);
			continue;
		case -3:
			if (!silent)
				cli_help(stdout, cmd);
			cli_exit(0);
		case -4:
			print_version();
		}
		set(ctx, o, &v);
	}
	free_parse_tables();
	nargs = argc - optind;
	if (nargs < cmd->min_args)
		usage_error("%s", cmd->min_args == 1 && nargs == 0 ?
		    "an argument is missing" : "too few arguments");
	if (cmd->max_args >= 0 && nargs > cmd->max_args)
		usage_error("%s: unexpected argument", argv[optind +
		    cmd->max_args]);
	return optind;
}

/* ------------------------------------------------------------------------ */
/* --help                                                                   */

static void
help_option(FILE *f, const struct cli_option *o)
{
	char left[96];
	const char *h = o->help, *nl;
	int n;

	n = snprintf(left, sizeof left, "  %c%c%s--%s%s%s",
	    o->short_name ? '-' : ' ', o->short_name ? o->short_name : ' ',
	    o->short_name ? ", " : "  ", o->name, o->arg ? " " : "",
	    o->arg ? o->arg : "");
	if (n > 26) {
		fprintf(f, "%s\n", left);
		fprintf(f, "%27s", "");
	} else
		fprintf(f, "%-27s", left);
	for (;;) {
		nl = strchr(h, '\n');
		fprintf(f, "%.*s\n", nl ? (int)(nl - h) : (int)strlen(h), h);
		if (nl == NULL)
			break;
		h = nl + 1;
		fprintf(f, "%27s", "");
	}
}

void
cli_help(FILE *f, const struct cli_command *cmd)
{
	const struct cli_group *g;
	const struct cli_option *o;

	usage_line(f, cmd);
	if (cmd->about != NULL)
		fprintf(f, "\n%s", cmd->about);
	for (g = cmd->groups; g != NULL && g->opts != NULL; g++) {
		fprintf(f, "\n%s:\n", g->title);
		for (o = g->opts; o->name != NULL; o++)
			help_option(f, o);
	}
	fprintf(f, "\ncommon:\n");
	for (o = common_opts; o->name != NULL; o++)
		help_option(f, o);
	fprintf(f, "\nSizes take K, M, G, T (powers of 1024, optional B or "
	    "iB); see shardkit-cli(7).\nExit status: 0 on success, 1 on a "
	    "run-time error, 2 on a usage error.\n");
}

static void
tool_help(FILE *f, const char *tool, const char *about,
    const struct cli_command *const *table)
{
	const struct cli_command *const *c;

	fprintf(f, "usage: %s [-h|-V] COMMAND [ARGS]\n", tool);
	if (about != NULL)
		fprintf(f, "\n%s", about);
	fprintf(f, "\ncommands:\n");
	for (c = table; *c != NULL; c++)
		fprintf(f, "  %-10s %s\n", (*c)->name, (*c)->summary);
	fprintf(f, "\n'%s COMMAND --help' shows a command's options; see "
	    "%s(1).\n", tool, tool);
}

const struct cli_command *
cli_dispatch(const char *tool, const char *about,
    const struct cli_command *const *table, const struct cli_command *dflt,
    int argc, char **argv, int *first)
{
	const struct cli_command *const *c, *found = NULL;
	const char *name;
	size_t len;
	int ambiguous = 0, i = 1;

	cli_init(tool);
	if (argc < 2 && dflt == NULL) {
		if (!silent)
			fprintf(stderr, "%s: no command given\nusage: %s [-h|-V] "
			    "COMMAND [ARGS]\nTry '%s --help' for more.\n",
			    tool, tool, tool);
		cli_exit(CLI_EXIT_USAGE);
	}
	name = argc >= 2 ? argv[1] : "-";
	if (strcmp(name, COMPLETION_WORDS) == 0) {
		/* The commands, then the default command's options. */
		for (c = table; *c != NULL; c++)
			printf("%s\n", (*c)->name);
		if (dflt == NULL)
			cli_exit(0);
	}
	if (dflt == NULL || name[0] != '-') {
		if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
			if (!silent)
				tool_help(stdout, tool, about, table);
			cli_exit(0);
		}
		if (strcmp(name, "-V") == 0 || strcmp(name, "--version") == 0)
			print_version();
		if (strcmp(name, "help") == 0 && argc >= 3)
			name = argv[i = 2];
		else if (strcmp(name, "help") == 0) {
			if (!silent)
				tool_help(stdout, tool, about, table);
			cli_exit(0);
		}
		len = strlen(name);
		for (c = table; *c != NULL; c++) {
			if (strcmp((*c)->name, name) == 0) {
				found = *c;
				ambiguous = 0;
				break;
			}
			if (len > 0 && strncmp((*c)->name, name, len) == 0) {
				ambiguous = found != NULL;
				found = *c;
			}
		}
		if (found == NULL || ambiguous) {
			if (!silent) {
				fprintf(stderr, "%s: %s: %s command (", tool,
				    name, ambiguous ? "an ambiguous" :
				    "not a");
				for (c = table; *c != NULL; c++)
					fprintf(stderr, "%s%s", c == table ?
					    "" : ", ", (*c)->name);
				fprintf(stderr, ")\nusage: %s [-h|-V] "
				    "COMMAND [ARGS]\nTry '%s --help' for "
				    "more.\n", tool, tool);
			}
			cli_exit(CLI_EXIT_USAGE);
		}
		if (i == 2) {
			snprintf(prog, sizeof prog, "%s %s", tool,
			    found->name);
			if (!silent)
				cli_help(stdout, found);
			cli_exit(0);
		}
		snprintf(prog, sizeof prog, "%s %s", tool, found->name);
		argv[1] = (char *)found->name;
		*first = 1;
		return found;
	}
	/* The default command takes argv as it is; argv[0] names it. */
	*first = 0;
	return dflt;
}

/* ------------------------------------------------------------------------ */
/* the node                                                                 */

static int
env_int(const char *name, int min, int *out, char *err, size_t errlen)
{
	const char *s = getenv(name);
	long long v;
	char why[128];

	if (s == NULL)
		return 0;
	if (cli_parse_int(s, min, 1 << 20, &v, why, sizeof why) != 0)
		return bad(err, errlen, "%s=%.32s: %s", name, s, why);
	*out = (int)v;
	return 1;
}

int
cli_launcher(int *rank, int *world, int *local_size, char *err,
    size_t errlen)
{
	/* rank, world and ranks on this node, per launcher */
	static const char *const vars[][3] = {
		{ "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
		    "OMPI_COMM_WORLD_LOCAL_SIZE" },
		{ "PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_SIZE" },
		{ "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS" },
		{ "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE" },
	};
	size_t i;
	int r, w, l, got;

	*rank = 0;
	*world = 1;
	*local_size = 1;
	for (i = 0; i < sizeof vars / sizeof vars[0]; i++) {
		if ((got = env_int(vars[i][0], 0, &r, err, errlen)) < 0)
			return -1;
		if (got == 0)
			continue;
		if ((got = env_int(vars[i][1], 1, &w, err, errlen)) < 0)
			return -1;
		if (got == 0)
			continue;
		if (r >= w)
			return bad(err, errlen, "%s=%d is not below %s=%d",
			    vars[i][0], r, vars[i][1], w);
		l = 1;
		if ((got = env_int(vars[i][2], 1, &l, err, errlen)) < 0)
			return -1;
		if (got == 0 && i == 3)
			/* srun without --ntasks-per-node: count ranks on
			 * the node as the whole job's share */
			env_int("SLURM_JOB_NUM_NODES", 1, &l, err, errlen) > 0 ?
			    (void)(l = (w + l - 1) / l) : (void)(l = 1);
		*rank = r;
		*world = w;
		*local_size = l > w ? w : l;
		return 1;
	}
	return 0;
}

int
cli_cpus_per_rank(void)
{
	cpu_set_t set;
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	int mine = 0, rank, world, local = 1;
	char err[256];

	if (online < 1)
		online = 1;
	if (sched_getaffinity(0, sizeof set, &set) == 0)
		mine = CPU_COUNT(&set);
	if (mine < 1 || mine > online)
		mine = (int)online;
	if (cli_launcher(&rank, &world, &local, err, sizeof err) <= 0)
		return mine;
	/* A launcher that bound this rank to its own cores already shared
	 * them out; one that did not leaves every rank every CPU. */
	if (mine < online || local <= 1)
		return mine;
	return mine / local > 0 ? mine / local : 1;
}

/* ------------------------------------------------------------------------ */
/* progress lines                                                           */

double
cli_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

char *
pathf(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= cap)
		die("path too long: %.64s...", buf);
	return buf;
}

void
cli_progress_init(struct cli_progress *p)
{
	p->on = !cli_quiet && !silent && isatty(STDERR_FILENO);
	p->shown = 0;
	p->last = cli_now();
}

int
cli_progress_due(struct cli_progress *p)
{
	double t;

	if (!p->on)
		return 0;
	t = cli_now();
	if (t - p->last < 1.0)
		return 0;
	p->last = t;
	return 1;
}

void
cli_progress(struct cli_progress *p, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	if (!p->on)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	/* Rewrite the line and clear what a longer one left behind. */
	fprintf(stderr, "\r%s: %s\033[K", prog, buf);
	fflush(stderr);
	p->shown = 1;
}

void
cli_progress_done(struct cli_progress *p)
{
	if (p->shown)
		fputc('\n', stderr);
	p->shown = 0;
}

/* ------------------------------------------------------------------------ */
/* --json                                                                   */

#define JSON_DEPTH 16

struct cli_json {
	FILE *f;
	struct sk_atomic a;
	int to_stdout;
	char *path;
	int depth;
	int count[JSON_DEPTH];		/* members written at each level */
	char close[JSON_DEPTH];		/* '}' or ']' */
};

/* Keys are a programmer's choice: snake_case, checked here. */
static void
check_key(const char *key)
{
	const char *p;

	for (p = key; *p != '\0'; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
		    *p == '_'))
			break;
	if (*key == '\0' || *p != '\0') {
		fprintf(stderr, "%s: internal error: JSON key '%s' is not "
		    "snake_case\n", prog, key);
		abort();
	}
}

static void
json_string(FILE *f, const char *s)
{
	const unsigned char *p;

	fputc('"', f);
	for (p = (const unsigned char *)s; *p != '\0'; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

/* The separator, indentation and key before a value at this level. */
static void
member(struct cli_json *j, const char *key)
{
	int d = j->depth;

	if (d > 0) {
		fputs(j->count[d - 1]++ ? ",\n" : "\n", j->f);
		fprintf(j->f, "%*s", 2 * d, "");
		if (j->close[d - 1] == '}') {
			if (key == NULL) {
				fprintf(stderr, "%s: internal error: JSON "
				    "value without a key\n", prog);
				abort();
			}
			check_key(key);
			json_string(j->f, key);
			fputs(": ", j->f);
		}
	}
}

static void
open_level(struct cli_json *j, const char *key, char open, char close)
{
	member(j, key);
	if (j->depth >= JSON_DEPTH) {
		fprintf(stderr, "%s: internal error: JSON too deep\n", prog);
		abort();
	}
	fputc(open, j->f);
	j->count[j->depth] = 0;
	j->close[j->depth++] = close;
}

struct cli_json *
cli_json_open(const char *path)
{
	struct cli_json *j;
	struct sk_error err;

	if ((j = calloc(1, sizeof *j)) == NULL ||
	    (j->path = strdup(path)) == NULL)
		die("out of memory");
	if (strcmp(path, "-") == 0) {
		j->f = stdout;
		j->to_stdout = 1;
	} else {
		if (sk_atomic_open(&j->a, path, SK_ATOMIC_NOSYNC, 0644,
		    &err) != 0)
			die("--json: %s", err.msg);
		if ((j->f = sk_atomic_stdio(&j->a, &err)) == NULL)
			die("--json: %s", err.msg);
	}
	open_level(j, NULL, '{', '}');
	cli_json_int(j, "schema", CLI_JSON_SCHEMA);
	cli_json_str(j, "tool", prog);
	cli_json_str(j, "version", PACKAGE_VERSION);
	return j;
}

void
cli_json_object(struct cli_json *j, const char *key)
{
	open_level(j, key, '{', '}');
}

void
cli_json_array(struct cli_json *j, const char *key)
{
	open_level(j, key, '[', ']');
}

void
cli_json_end(struct cli_json *j)
{
	int d = --j->depth;

	if (j->count[d] > 0)
		fprintf(j->f, "\n%*s", 2 * d, "");
	fputc(j->close[d], j->f);
}

void
cli_json_int(struct cli_json *j, const char *key, long long v)
{
	member(j, key);
	fprintf(j->f, "%lld", v);
}

void
cli_json_uint(struct cli_json *j, const char *key, uint64_t v)
{
	member(j, key);
	fprintf(j->f, "%llu", (unsigned long long)v);
}

void
cli_json_real(struct cli_json *j, const char *key, double v)
{
	char buf[32];

	member(j, key);
	/* The shortest digits that read back as the same double. */
	snprintf(buf, sizeof buf, "%.15g", v);
	if (strtod(buf, NULL) != v)
		snprintf(buf, sizeof buf, "%.17g", v);
	if (isfinite(v))
		fputs(buf, j->f);
	else
		fputs("null", j->f);
}

void
cli_json_str(struct cli_json *j, const char *key, const char *v)
{
	member(j, key);
	if (v != NULL)
		json_string(j->f, v);
	else
		fputs("null", j->f);
}

void
cli_json_bool(struct cli_json *j, const char *key, int v)
{
	member(j, key);
	fputs(v ? "true" : "false", j->f);
}

void
cli_json_null(struct cli_json *j, const char *key)
{
	member(j, key);
	fputs("null", j->f);
}

void
cli_json_skips(struct cli_json *j, const uint64_t *counts,
    const char *const *reasons, int n)
{
	uint64_t total = 0;
	int i;

	for (i = 0; i < n; i++)
		total += counts[i];
	cli_json_uint(j, "skipped", total);
	cli_json_object(j, "skipped_by_reason");
	for (i = 0; i < n; i++)
		cli_json_uint(j, reasons[i], counts[i]);
	cli_json_end(j);
}

void
cli_json_close(struct cli_json *j)
{
	struct sk_error err;

	while (j->depth > 0)
		cli_json_end(j);
	fputc('\n', j->f);
	if (j->to_stdout) {
		if (fflush(stdout) != 0 || ferror(stdout))
			die("--json -: standard output: %s", strerror(errno));
	} else if (ferror(j->f)) {
		sk_atomic_abort(&j->a);
		die("--json %s: a write failed", j->path);
	} else if (sk_atomic_commit(&j->a, &err) != 0)
		die("--json: %s", err.msg);
	free(j->path);
	free(j);
}
