/*
 * fuse_ceiling.c - the fastest a FUSE mount can serve files on this
 * machine: the files of one local folder, read into memory at start, served
 * read-only through libfuse's low-level API with shardfs's mount settings
 * (async reads, keep_cache, 64 worker threads, as many background requests,
 * 1 MiB replies handed out in place). No network, no cache to look up, no
 * copy in user space: what is left is the kernel's and libfuse's cost per
 * request, the ceiling of any network filesystem built on FUSE here.
 *
 *   fuse_ceiling DIR NAME MOUNTPOINT
 *
 * The mount holds one folder, NAME, with the regular files directly in
 * DIR (symlinks are not followed). It stays in the foreground until
 * unmounted (fusermount3 -u MOUNTPOINT) and prints "ready" on stdout once
 * the files are in memory and the mount is up. Built and run by
 * bench/shardfs.sh (its *-ceiling cases).
 */
#define FUSE_USE_VERSION 314
#define _GNU_SOURCE

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define TTL	3600.0
#define THREADS	64

struct file {
	char *name;
	char *data;
	size_t size;
};

static struct file *files;	/* sorted by name; inode = index + 3 */
static size_t nfiles;
static const char *folder;	/* the one folder at the root: inode 2 */

#define FOLDER_ID	2

static void
fail(const char *what, const char *arg)
{
	fprintf(stderr, "fuse_ceiling: %s%s%s\n", what, arg ? ": " : "",
	    arg ? arg : "");
	exit(1);
}

static int
by_name(const void *a, const void *b)
{
	return strcmp(((const struct file *)a)->name,
	    ((const struct file *)b)->name);
}

/* Big files in huge pages where the kernel gives them (madvise mode), as
 * a daemon tuned for throughput would keep its buffers. */
static void *
alloc(size_t n)
{
	void *p;

	if (n < (2u << 20))
		return malloc(n);
	n = (n + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
	if ((p = aligned_alloc(2u << 20, n)) != NULL)
		madvise(p, n, MADV_HUGEPAGE);
	return p;
}

static void
load(const char *dir)
{
	struct dirent *d;
	size_t cap = 0;
	DIR *dp;
	int dfd;

	if ((dp = opendir(dir)) == NULL)
		fail(strerror(errno), dir);
	dfd = dirfd(dp);
	while ((d = readdir(dp)) != NULL) {
		struct stat st;
		size_t got = 0;
		ssize_t n;
		int fd;

		if (d->d_name[0] == '.')
			continue;
		if (fstatat(dfd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			fail(strerror(errno), d->d_name);
		if (!S_ISREG(st.st_mode))
			continue;
		if ((fd = openat(dfd, d->d_name, O_RDONLY | O_NOFOLLOW)) < 0 ||
		    fstat(fd, &st) != 0)
			fail(strerror(errno), d->d_name);
		if (nfiles == cap) {
			cap = cap ? cap * 2 : 1024;
			if ((files = realloc(files, cap * sizeof *files)) ==
			    NULL)
				fail("out of memory", NULL);
		}
		files[nfiles].name = strdup(d->d_name);
		files[nfiles].size = (size_t)st.st_size;
		if ((files[nfiles].data = alloc(st.st_size + 1)) == NULL ||
		    files[nfiles].name == NULL)
			fail("out of memory", NULL);
		while (got < (size_t)st.st_size &&
		    (n = read(fd, files[nfiles].data + got,
		    (size_t)st.st_size - got)) > 0)
			got += (size_t)n;
		if (got != (size_t)st.st_size)
			fail("short read", d->d_name);
		close(fd);
		nfiles++;
	}
	closedir(dp);
	qsort(files, nfiles, sizeof *files, by_name);
}

static void
stat_of(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof *st);
	st->st_ino = ino;
	if (ino == FUSE_ROOT_ID || ino == FOLDER_ID) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		return;
	}
	st->st_mode = S_IFREG | 0444;
	st->st_nlink = 1;
	st->st_size = (off_t)files[ino - 3].size;
	st->st_blocks = (st->st_size + 511) / 512;
}

static struct file *
file_of(fuse_ino_t ino)
{
	return ino >= 3 && ino - 3 < nfiles ? &files[ino - 3] : NULL;
}

static void
op_init(void *data, struct fuse_conn_info *conn)
{
	(void)data;
	conn->want |= FUSE_CAP_ASYNC_READ;
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
	conn->want &= ~(unsigned)FUSE_CAP_ASYNC_DIO;
	conn->max_background = THREADS;
	conn->congestion_threshold = THREADS * 3 / 4;
}

/* The entry of inode ino: the folder, or a file. */
static void
entry_of(fuse_ino_t ino, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof *e);
	e->ino = ino;
	e->attr_timeout = e->entry_timeout = TTL;
	stat_of(e->ino, &e->attr);
}

static void
op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	struct file key = { .name = (char *)name }, *f;

	if (parent == FUSE_ROOT_ID && strcmp(name, folder) == 0) {
		entry_of(FOLDER_ID, &e);
		fuse_reply_entry(req, &e);
		return;
	}
	if (parent != FOLDER_ID || (f = bsearch(&key, files, nfiles,
	    sizeof *files, by_name)) == NULL) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	entry_of((fuse_ino_t)(f - files) + 3, &e);
	fuse_reply_entry(req, &e);
}

static void
op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	(void)fi;
	if (ino != FUSE_ROOT_ID && ino != FOLDER_ID && file_of(ino) == NULL) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	stat_of(ino, &st);
	fuse_reply_attr(req, &st, TTL);
}

static void
op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (file_of(ino) == NULL) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void
op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
    struct fuse_file_info *fi)
{
	struct file *f = file_of(ino);

	(void)fi;
	if (off < 0 || (size_t)off >= f->size) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > f->size - (size_t)off)
		size = f->size - (size_t)off;
	fuse_reply_buf(req, f->data + off, size);
}

static void
op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	fuse_reply_err(req, 0);
}

static void
list(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, int plus)
{
	size_t used = 0, n, count, i;
	char *buf;

	if (ino != FUSE_ROOT_ID && ino != FOLDER_ID) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	if ((buf = malloc(size)) == NULL) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/* off is the index of the next name; 0 and 1 are . and .. */
	count = ino == FUSE_ROOT_ID ? 1 : nfiles;
	for (i = (size_t)off; i < count + 2; i++) {
		struct fuse_entry_param e;
		const char *name = i == 0 ? "." : i == 1 ? ".." :
		    ino == FUSE_ROOT_ID ? folder : files[i - 2].name;

		/* . and .. carry no entry (ino 0): no reference to the
		 * kernel, as shardfs gives none. */
		memset(&e, 0, sizeof e);
		if (i < 2) {
			e.attr.st_ino = ino;
			e.attr.st_mode = S_IFDIR;
		} else
			entry_of(ino == FUSE_ROOT_ID ? FOLDER_ID :
			    (fuse_ino_t)i + 1, &e);
		if (plus)
			n = fuse_add_direntry_plus(req, buf + used,
			    size - used, name, &e, (off_t)i + 1);
		else
			n = fuse_add_direntry(req, buf + used, size - used,
			    name, &e.attr, (off_t)i + 1);
		if (n > size - used)
			break;
		used += n;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void
op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
    struct fuse_file_info *fi)
{
	(void)fi;
	list(req, ino, size, off, 0);
}

static void
op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
    struct fuse_file_info *fi)
{
	(void)fi;
	list(req, ino, size, off, 1);
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.getattr = op_getattr,
	.open = op_open,
	.read = op_read,
	.release = op_release,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
};

int
main(int argc, char **argv)
{
	char *fargv[] = { argv[0], "-o", "ro,default_permissions", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	struct fuse_loop_config *lc;
	struct fuse_session *se;
	int rc;

	if (argc != 4 || argv[2][0] == '\0' || strchr(argv[2], '/') != NULL) {
		fprintf(stderr, "usage: fuse_ceiling DIR NAME MOUNTPOINT\n");
		return 2;
	}
	folder = argv[2];
	load(argv[1]);
	if ((se = fuse_session_new(&args, &ops, sizeof ops, NULL)) == NULL ||
	    fuse_set_signal_handlers(se) != 0 ||
	    fuse_session_mount(se, argv[3]) != 0)
		fail("cannot mount", argv[3]);
	printf("ready: %zu files\n", nfiles);
	fflush(stdout);
	lc = fuse_loop_cfg_create();
	fuse_loop_cfg_set_max_threads(lc, THREADS);
	fuse_loop_cfg_set_idle_threads(lc, THREADS / 4);
	rc = fuse_session_loop_mt(se, lc);
	fuse_loop_cfg_destroy(lc);
	fuse_session_unmount(se);
	fuse_remove_signal_handlers(se);
	fuse_session_destroy(se);
	return rc != 0;
}
