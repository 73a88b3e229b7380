/*
 * util.c - error exits, option parsing and small helpers the subcommands
 * share.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shardtool.h"

static void
vmessage(const char *fmt, va_list ap)
{
	fflush(stdout);
	fprintf(stderr, "%s: ", progname);
	vfprintf(stderr, fmt, ap);
}

void
die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmessage(fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

void
warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmessage(fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void
usage_error(const struct cmd_entry *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmessage(fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nusage: shardtool %s\n", cmd->usage);
	exit(EXIT_USAGE);
}

void
bad_option(const struct cmd_entry *cmd, int c, char **argv)
{
	const char *arg = argv[optind - 1];

	if (c == ':')
		usage_error(cmd, "option %s needs a value", arg);
	/* getopt sets optopt for a short option, 0 for a long one. */
	if (optopt != 0)
		usage_error(cmd, "unknown option -%c", optopt);
	usage_error(cmd, "unknown option %s", arg);
}

uint64_t
splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void
print_help(const struct cmd_entry *cmd)
{
	printf("usage: shardtool %s\n\n%s", cmd->usage, cmd->help);
	exit(0);
}

long long
parse_int(const struct cmd_entry *cmd, const char *opt, const char *s,
    long long min, long long max)
{
	long long v;
	char *end;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (*s == '\0' || *end != '\0' || errno != 0)
		usage_error(cmd, "%s: '%s' is not an integer", opt, s);
	if (v < min || v > max)
		usage_error(cmd, "%s: %lld is out of range [%lld, %lld]", opt,
		    v, min, max);
	return v;
}

uint64_t
parse_size(const struct cmd_entry *cmd, const char *opt, const char *s)
{
	unsigned long long v, mul = 1;
	char *end;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (*s == '\0' || *s == '-' || end == s || errno != 0)
		usage_error(cmd, "%s: '%s' is not a size", opt, s);
	switch (*end) {
	case 'k': case 'K': mul = 1ULL << 10; end++; break;
	case 'm': case 'M': mul = 1ULL << 20; end++; break;
	case 'g': case 'G': mul = 1ULL << 30; end++; break;
	case 't': case 'T': mul = 1ULL << 40; end++; break;
	}
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end != '\0')
		usage_error(cmd, "%s: '%s' is not a size (use K, M, G)", opt, s);
	if (v > ULLONG_MAX / mul)
		usage_error(cmd, "%s: '%s' is too large", opt, s);
	return v * mul;
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

int
read_file(const char *path, uint8_t **data, size_t *size,
    struct sk_error *err)
{
	uint8_t *buf = NULL, *nb;
	size_t len = 0, cap;
	struct stat st;
	ssize_t got;
	int fd, e;

	*data = NULL;
	*size = 0;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return sk_error_set(err, sk_errno_code(errno), "%s: %s", path,
		    strerror(errno));
	if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
		e = S_ISDIR(st.st_mode) ? EISDIR : errno;
		close(fd);
		return sk_error_set(err, sk_errno_code(e), "%s: %s", path,
		    strerror(e));
	}
	/* One read of the size fstat gives; more only if the file grew
	 * (or is not a regular file). */
	cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 64 * 1024;
	for (;;) {
		if (len == cap || buf == NULL) {
			if (buf != NULL)
				cap *= 2;
			if ((nb = realloc(buf, cap)) == NULL) {
				free(buf);
				close(fd);
				return sk_error_set(err, SK_ENOMEM,
				    "%s: out of memory", path);
			}
			buf = nb;
		}
		got = read(fd, buf + len, cap - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			e = errno;
			free(buf);
			close(fd);
			return sk_error_set(err, sk_errno_code(e), "%s: %s",
			    path, strerror(e));
		}
		if (got == 0)
			break;
		len += (size_t)got;
	}
	close(fd);
	*data = buf;
	*size = len;
	return 0;
}

void
expand_args(const struct cmd_entry *cmd, int argc, char **argv,
    struct sk_strlist *out)
{
	struct sk_error err;
	int i;

	for (i = 0; i < argc; i++)
		if (sk_url_expand(argv[i], out, &err) != 0)
			usage_error(cmd, "%s", err.msg);
}

void *
xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (p == NULL)
		die("out of memory (%zu bytes)", n);
	return p;
}

void *
xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (p == NULL)
		die("out of memory");
	return p;
}

void *
xrealloc(void *p, size_t n)
{
	if ((p = realloc(p, n ? n : 1)) == NULL)
		die("out of memory (%zu bytes)", n);
	return p;
}

char *
xstrdup(const char *s)
{
	char *p = strdup(s);

	if (p == NULL)
		die("out of memory");
	return p;
}
