/*
 * source_file.c - the local-file source: pread on a descriptor, and
 * directory listing for sk_source_list.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

struct file_impl {
	int fd;
	uint64_t size;
};

static int
file_open(sk_source *s, const struct sk_url *u)
{
	struct file_impl *f;
	struct stat st;
	int fd;

	if ((fd = open(u->path, O_RDONLY | O_CLOEXEC)) < 0)
		return sk__fail(&s->h, sk_errno_code(errno), "%s: %s",
		    s->url, strerror(errno));
	if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
		int e = errno;

		if (e == 0 || S_ISDIR(st.st_mode))
			e = EISDIR;
		close(fd);
		return sk__fail(&s->h, SK_EINVAL, "%s: %s", s->url,
		    strerror(e));
	}
	if ((f = malloc(sizeof *f)) == NULL) {
		close(fd);
		return sk__fail(&s->h, SK_ENOMEM, "out of memory");
	}
	f->fd = fd;
	f->size = (uint64_t)st.st_size;
	s->impl = f;
	/* Shards are read front to back: ask for aggressive readahead. */
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	return 0;
}

static int64_t
file_pread(sk_source *s, void *buf, size_t n, uint64_t off)
{
	struct file_impl *f = s->impl;
	ssize_t got;

	do
		got = pread(f->fd, buf, n, (off_t)off);
	while (got < 0 && errno == EINTR);
	if (got < 0)
		return sk__fail(&s->h, sk_errno_code(errno),
		    "%s: read at offset %llu: %s", s->url,
		    (unsigned long long)off, strerror(errno));
	return got;
}

static int
file_size(sk_source *s, uint64_t *size)
{
	*size = ((struct file_impl *)s->impl)->size;
	return 0;
}

static void
file_close(sk_source *s)
{
	struct file_impl *f = s->impl;

	close(f->fd);
	free(f);
	s->impl = NULL;
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int
file_list(const struct sk_url *u, const char *url, struct sk_strlist *out,
    struct sk_error *err)
{
	size_t first = out->n, len = strlen(u->path);
	const char *sep = len > 0 && u->path[len - 1] == '/' ? "" : "/";
	struct dirent *de;
	struct stat st;
	char *path;
	DIR *d;
	int rc = 0;

	if ((d = opendir(u->path)) == NULL)
		return sk_error_set(err, sk_errno_code(errno), "%s: %s", url,
		    strerror(errno));
	while (rc == 0 && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		if ((path = sk__asprintf("%s%s%s", u->path, sep,
		    de->d_name)) == NULL) {
			rc = sk_error_set(err, SK_ENOMEM, "out of memory");
			break;
		}
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
		    sk_strlist_push(out, path) != 0)
			rc = sk_error_set(err, SK_ENOMEM, "out of memory");
		free(path);
	}
	closedir(d);
	if (rc == 0)
		qsort(out->v + first, out->n - first, sizeof *out->v, cmp_str);
	return rc;
}

const struct sk__source_ops sk__source_file_ops = {
	.name = "file",
	.open = file_open,
	.pread = file_pread,
	.size = file_size,
	.close = file_close,
	.list = file_list,
};
