/*
 * util.c - small helpers the subcommands share (messages and option
 * parsing are lib/cli's).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shardtool.h"

uint64_t
splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
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
expand_args(int argc, char **argv, struct sk_strlist *out)
{
	struct sk_error err;
	int i;

	for (i = 0; i < argc; i++)
		if (sk_url_expand(argv[i], out, &err) != 0)
			usage_error("%s", err.msg);
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

int
is_bucket_url(const char *s)
{
	return strncmp(s, "gs://", 5) == 0 || strncmp(s, "s3://", 5) == 0;
}

/* Make dir and its parents, as "mkdir -p" does; die naming the one that
 * fails. */
void
mkdir_p(const char *dir)
{
	char buf[4096], *p, c;
	struct stat st;

	if ((size_t)snprintf(buf, sizeof buf, "%s", dir) >= sizeof buf)
		die("%s: path too long", dir);
	for (p = buf + 1; ; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		c = *p;
		*p = '\0';
		if (mkdir(buf, 0777) != 0 && errno != EEXIST)
			die("%s: %s", buf, strerror(errno));
		*p = c;
		if (c == '\0')
			break;
	}
	if (stat(buf, &st) != 0)
		die("%s: %s", buf, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		die("%s: not a directory", buf);
}
