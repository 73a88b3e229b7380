/*
 * atomic.c - the one way shardkit writes a file: under a unique temporary
 * name in the target's folder, created O_EXCL|O_NOFOLLOW (a symlink or a
 * file planted there is never written through), then fsync, rename over
 * the target and fsync of the folder. A reader sees the old file or the
 * whole new one, never a part; a failure removes the temporary file.
 */
#include <sys/random.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* Tries at a free temporary name; a collision of 36^8 names is a planted
 * file or a bug, not bad luck. */
#define NAME_TRIES 16

static void
clear(struct sk_atomic *a)
{
	free(a->path);
	free(a->tmp);
	if (a->dirfd >= 0)
		close(a->dirfd);
	memset(a, 0, sizeof *a);
	a->fd = a->dirfd = -1;
}

static int
fail_errno(struct sk_atomic *a, struct sk_error *err, const char *what,
    int e)
{
	int rc;

	rc = sk_error_set(err, sk_errno_code(e), "%s: %s%s%s", a->path,
	    what, *what != '\0' ? ": " : "", strerror(e));
	sk_atomic_abort(a);
	return rc;
}

int
sk_atomic_open(struct sk_atomic *a, const char *path, int flags, int mode,
    struct sk_error *err)
{
	static const char digits[] = "abcdefghijklmnopqrstuvwxyz0123456789";
	unsigned char rnd[8];
	const char *slash;
	char *dir, *base, suffix[9];
	int i, j, e;

	memset(a, 0, sizeof *a);
	a->fd = a->dirfd = -1;
	a->flags = flags;
	if (path == NULL || *path == '\0' || path[strlen(path) - 1] == '/')
		return sk_error_set(err, SK_EINVAL, "%s: not a file name",
		    path != NULL ? path : "(null)");
	if ((a->path = sk__strdup(path)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	slash = strrchr(path, '/');
	dir = slash == NULL ? sk__strdup(".") : slash == path ?
	    sk__strdup("/") : strndup(path, (size_t)(slash - path));
	if (dir == NULL) {
		clear(a);
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	a->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	e = errno;
	free(dir);
	if (a->dirfd < 0)
		return fail_errno(a, err, "its folder", e);
	base = (char *)(slash == NULL ? path : slash + 1);
	for (i = 0; i < NAME_TRIES; i++) {
		if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
			return fail_errno(a, err, "getrandom", errno);
		for (j = 0; j < 8; j++)
			suffix[j] = digits[rnd[j] % 36];
		suffix[8] = '\0';
		free(a->tmp);
		if ((a->tmp = sk__asprintf(".%s.%s.part", base, suffix)) ==
		    NULL) {
			clear(a);
			return sk_error_set(err, SK_ENOMEM, "out of memory");
		}
		a->fd = openat(a->dirfd, a->tmp, O_WRONLY | O_CREAT | O_EXCL |
		    O_NOFOLLOW | O_CLOEXEC, mode);
		if (a->fd >= 0)
			return 0;
		if (errno != EEXIST)
			break;
	}
	e = errno;
	free(a->tmp);
	a->tmp = NULL;	/* not ours: nothing to remove */
	return fail_errno(a, err, "cannot create a temporary file beside it",
	    e);
}

FILE *
sk_atomic_stdio(struct sk_atomic *a, struct sk_error *err)
{
	if (a->fp == NULL && (a->fp = fdopen(a->fd, "w")) == NULL)
		sk_error_set(err, sk_errno_code(errno), "%s: %s", a->path,
		    strerror(errno));
	return a->fp;
}

int
sk_atomic_write_all(struct sk_atomic *a, const void *data, size_t n,
    struct sk_error *err)
{
	const char *p = data;
	ssize_t put;

	while (n > 0) {
		if ((put = write(a->fd, p, n)) < 0) {
			if (errno == EINTR)
				continue;
			return sk_error_set(err, sk_errno_code(errno),
			    "%s: write: %s", a->path, strerror(errno));
		}
		p += put;
		n -= (size_t)put;
	}
	return 0;
}

int
sk_atomic_commit(struct sk_atomic *a, struct sk_error *err)
{
	int rc, fd;

	if (a->path == NULL || a->tmp == NULL)
		return sk_error_set(err, SK_EINVAL, "no file open to commit");
	if (a->fp != NULL) {
		if (fflush(a->fp) != 0 || ferror(a->fp))
			return fail_errno(a, err, "write",
			    errno != 0 ? errno : EIO);
	}
	if (!(a->flags & SK_ATOMIC_NOSYNC) && fsync(a->fd) != 0)
		return fail_errno(a, err, "fsync", errno);
	fd = a->fd;
	a->fd = -1;
	if (a->fp != NULL) {
		rc = fclose(a->fp);
		a->fp = NULL;
	} else
		rc = close(fd);
	if (rc != 0)
		return fail_errno(a, err, "close", errno);
	if (renameat(a->dirfd, a->tmp, a->dirfd, strrchr(a->path, '/') ?
	    strrchr(a->path, '/') + 1 : a->path) != 0)
		return fail_errno(a, err, "rename", errno);
	free(a->tmp);
	a->tmp = NULL;
	/* The rename is durable only once the folder is. */
	if (!(a->flags & SK_ATOMIC_NOSYNC) && fsync(a->dirfd) != 0 &&
	    errno != EINVAL) {
		rc = sk_error_set(err, sk_errno_code(errno), "%s: fsync of "
		    "its folder: %s", a->path, strerror(errno));
		clear(a);
		return rc;
	}
	clear(a);
	return 0;
}

void
sk_atomic_abort(struct sk_atomic *a)
{
	if (a->fp != NULL)
		fclose(a->fp);
	else if (a->fd >= 0)
		close(a->fd);
	a->fp = NULL;
	a->fd = -1;
	if (a->tmp != NULL && a->dirfd >= 0)
		unlinkat(a->dirfd, a->tmp, 0);
	clear(a);
}

int
sk_atomic_write_file(const char *path, const void *data, size_t n,
    int flags, struct sk_error *err)
{
	struct sk_atomic a;
	int rc;

	if ((rc = sk_atomic_open(&a, path, flags, 0644, err)) != 0)
		return rc;
	if ((rc = sk_atomic_write_all(&a, data, n, err)) != 0) {
		sk_atomic_abort(&a);
		return rc;
	}
	return sk_atomic_commit(&a, err);
}
