/*
 * source_file.c - the local-file source: pread on a descriptor of a regular
 * file, and directory listing for sk_source_list.
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

static const char *
file_type(mode_t mode)
{
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISFIFO(mode))
		return "a fifo";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	return "an unknown kind of file";
}

/*
 * Only a regular file is a shard. A FIFO would block the open until a
 * writer comes and then give whatever it writes; a device or a directory
 * is never a tar. O_NONBLOCK keeps the open itself from waiting; the type
 * is checked on the descriptor (a named symlink is followed, its target
 * checked), and reads block as usual after that.
 */
static int
file_open(sk_source *s, const struct sk_url *u)
{
	struct file_impl *f;
	struct stat st;
	int fd, fl;

	if ((fd = open(u->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0) {
		int e = errno;

		/* A socket cannot be opened at all: say what it is. */
		if (e == ENXIO && stat(u->path, &st) == 0 &&
		    !S_ISREG(st.st_mode))
			return sk__fail(&s->h, SK_EINVAL, "%s: not a regular "
			    "file (%s)", s->url, file_type(st.st_mode));
		return sk__fail(&s->h, sk_errno_code(e), "%s: %s", s->url,
		    strerror(e));
	}
	if (fstat(fd, &st) != 0) {
		int e = errno;

		close(fd);
		return sk__fail(&s->h, sk_errno_code(e), "%s: %s", s->url,
		    strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return sk__fail(&s->h, SK_EINVAL, "%s: not a regular file (%s)",
		    s->url, file_type(st.st_mode));
	}
	if ((fl = fcntl(fd, F_GETFL)) < 0 ||
	    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
		int e = errno;

		close(fd);
		return sk__fail(&s->h, sk_errno_code(e), "%s: %s", s->url,
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

int
sk__file_list(const struct sk_url *u, const char *url,
    struct sk_strlist *out, struct sk_error *err)
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
	/* An empty list may have no array at all: nothing to sort. */
	if (rc == 0 && out->n > first)
		qsort(out->v + first, out->n - first, sizeof *out->v, cmp_str);
	return rc;
}

/*
 * A local folder's folders and regular files, as "shardtool pack folder"
 * lists a class tree: d_type saves a stat per file (1.28M for ImageNet
 * train); links and file systems without it take the stat, and a fifo or
 * a device (which would block or never end a read) is left out.
 */
int
sk__file_list_entries(const char *dir, const char *url,
    struct sk__entries *out, struct sk_error *err)
{
	size_t first = out->n;
	struct dirent *de;
	struct stat st;
	char *path;
	int dirent_dir, rc = 0;
	DIR *d;

	if ((d = opendir(dir)) == NULL)
		return sk_error_set(err, sk_errno_code(errno), "%s: %s", url,
		    strerror(errno));
	while (rc == 0 && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		if (de->d_type == DT_DIR || de->d_type == DT_REG) {
			dirent_dir = de->d_type == DT_DIR;
			st.st_size = 0;
		} else {
			if ((path = sk__asprintf("%s/%s", dir,
			    de->d_name)) == NULL) {
				rc = sk_error_set(err, SK_ENOMEM, "out of "
				    "memory");
				break;
			}
			if (stat(path, &st) != 0 || (!S_ISDIR(st.st_mode) &&
			    !S_ISREG(st.st_mode))) {
				sk_log(SK_LOG_WARN, "%s: not a regular file; "
				    "left out", path);
				free(path);
				continue;
			}
			free(path);
			dirent_dir = S_ISDIR(st.st_mode);
		}
		rc = sk__entries_add(out, de->d_name, strlen(de->d_name),
		    dirent_dir, dirent_dir ? 0 : (uint64_t)st.st_size, 0, "");
		if (rc == SK_EINVAL)
			rc = 0;		/* not one path segment: cannot be */
		else if (rc != 0)
			rc = sk_error_set(err, rc, "out of memory");
	}
	closedir(d);
	if (rc == 0)
		sk__entries_sort(out, first);
	return rc;
}

const struct sk__source_ops sk__source_file_ops = {
	.name = "file",
	.open = file_open,
	.pread = file_pread,
	.size = file_size,
	.close = file_close,
};
