/*
 * shardfs - mount a bucket (gs://, s3://) or an http(s) tree (an nginx
 * JSON autoindex, or a manifest) read-only with FUSE: folders from the
 * listings, reads through one bounded block cache with read-ahead for
 * sequential readers, an optional disk cache, versions pinned per open
 * file, bounded waits, and the counters in .shardfs/stats.
 */
#define FUSE_USE_VERSION 314

#include "config.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#ifdef HAVE_MALLOC_H
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fuse_lowlevel.h>

#include "cli.h"
#include "internal.h"
#include "shardfs.h"

struct fs_opts fs_opts;
struct fs_stats fs_stats;

static const double FOREVER = 365.0 * 86400;	/* the kernel's "always" */
static time_t started;

/* ------------------------------------------------------------------------ */
/* the stats file                                                           */

char *
fs_stats_json(size_t *len)
{
	struct sk_fetch_stats f;
	struct fs_stats s;
	uint64_t mem, peak, dbytes = 0, dfiles = 0;
	char *out = NULL;
	size_t n = 0;
	FILE *fp;
	int i;

	sk_fetch_stats(&f);
	{
		/* Counter by counter: each is an atomic of its own. */
		const uint64_t *from = (const uint64_t *)&fs_stats;
		uint64_t *to = (uint64_t *)&s;
		size_t k;

		for (k = 0; k < sizeof s / sizeof *to; k++)
			to[k] = __atomic_load_n(&from[k], __ATOMIC_RELAXED);
	}
	fs_cache_usage(&mem, &peak);
	fs_disk_usage(&dbytes, &dfiles);
	if ((fp = open_memstream(&out, &n)) == NULL)
		return NULL;
	fprintf(fp, "{\n  \"schema\": %d,\n  \"tool\": \"shardfs\",\n"
	    "  \"version\": \"%s\",\n", CLI_JSON_SCHEMA, SK_VERSION_STRING);
	fprintf(fp, "  \"reads\": %" PRIu64 ",\n  \"read_bytes\": %" PRIu64
	    ",\n  \"opens\": %" PRIu64 ",\n  \"read_errors\": {\"eio\": %"
	    PRIu64 ", \"estale\": %" PRIu64 "},\n", s.reads, s.read_bytes,
	    s.opens, s.eio, s.estale);
	fprintf(fp, "  \"reader_wait_seconds\": %.6f,\n",
	    (double)s.wait_ns / 1e9);
	fprintf(fp, "  \"cache\": {\"memory_bytes\": %" PRIu64 ", "
	    "\"memory_peak_bytes\": %" PRIu64 ", \"memory_limit_bytes\": %"
	    PRIu64 ", \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
	    ", \"readahead_hits\": %" PRIu64 ", \"readahead_bytes\": %" PRIu64
	    ", \"evicted_chunks\": %" PRIu64 ", \"dropped_behind_chunks\": %"
	    PRIu64 "},\n", mem, peak, fs_opts.cache_bytes, s.mem_hits,
	    s.misses, s.readahead_hits, s.readahead_bytes, s.evictions,
	    s.dropped);
	fprintf(fp, "  \"disk_cache\": {\"enabled\": %s, \"bytes\": %" PRIu64
	    ", \"files\": %" PRIu64 ", \"limit_bytes\": %" PRIu64 ", "
	    "\"hit_blocks\": %" PRIu64 ", \"written_blocks\": %" PRIu64 ", "
	    "\"evicted_blocks\": %" PRIu64 ", \"corrupt_blocks\": %" PRIu64
	    "},\n", fs_disk_enabled() ? "true" : "false", dbytes, dfiles,
	    fs_opts.cache_dir ? fs_opts.cache_max_bytes : 0, s.disk_hits,
	    s.disk_writes, s.disk_evictions, s.disk_corrupt);
	fprintf(fp, "  \"metadata\": {\"listings\": %" PRIu64 ", \"lookups\": %"
	    PRIu64 ", \"negative_hits\": %" PRIu64 "},\n", s.listings,
	    s.lookups, s.negative_hits);
	fprintf(fp, "  \"remote\": {\"bytes\": %" PRIu64 ", \"requests\": %"
	    PRIu64 ", \"retries\": %" PRIu64 ", \"retries_by_cause\": {",
	    f.bytes, f.requests, f.retries);
	for (i = 0; i < SK_RETRY_NCAUSES; i++)
		fprintf(fp, "%s\"%s\": %" PRIu64, i ? ", " : "",
		    sk_retry_cause_name((enum sk_retry_cause)i),
		    f.retries_by_cause[i]);
	fprintf(fp, "}, \"resumes\": %" PRIu64 ", \"failures\": %" PRIu64
	    ", \"mean_ttfb_seconds\": %.6f, \"network_wait_seconds\": %.6f}\n}\n",
	    f.resumes, f.failures, f.ttfb_count ? f.ttfb_seconds /
	    (double)f.ttfb_count : 0.0, f.wait_seconds);
	if (fclose(fp) != 0) {
		free(out);
		return NULL;
	}
	*len = n;
	return out;
}

/* ------------------------------------------------------------------------ */
/* the kernel's read-ahead                                                 */

/*
 * The kernel reads a FUSE file ahead in requests of at most its
 * read_ahead_kb (128 KiB by default): 1 MiB requests cost an eighth of
 * the round trips through /dev/fuse. Raised when this process may (root);
 * otherwise left as it is. Not before the kernel took the INIT answer,
 * which lowers it again: the first request after it raises it (ra_once).
 * The mount's device number comes from /proc/self/mountinfo, as a stat()
 * of the mount point would wait for that INIT.
 */
static char ra_path[96];
static int ra_state;		/* 0 not yet, 1 done */

static void
kernel_read_ahead(const char *mnt)
{
	unsigned maj = 0, min = 0, a, b;
	char line[8192], point[4096];
	FILE *f;
	int found = 0;

	if ((f = fopen("/proc/self/mountinfo", "re")) == NULL)
		return;
	/* ID PARENT MAJ:MIN ROOT POINT ...; the last match is the newest.
	 * (A point with a blank is written \\040: such a mount keeps the
	 * kernel's default.) */
	while (fgets(line, sizeof line, f) != NULL)
		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &a, &b,
		    point) == 3 && strcmp(point, mnt) == 0) {
			maj = a;
			min = b;
			found = 1;
		}
	fclose(f);
	if (found)
		snprintf(ra_path, sizeof ra_path,
		    "/sys/class/bdi/%u:%u/read_ahead_kb", maj, min);
}

static void
ra_once(void)
{
	char cur[32];
	ssize_t n;
	int fd;

	if (__atomic_exchange_n(&ra_state, 1, __ATOMIC_ACQ_REL) != 0 ||
	    ra_path[0] == '\0')
		return;
	if ((fd = open(ra_path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)) < 0)
		return;
	if ((n = read(fd, cur, sizeof cur - 1)) > 0) {
		cur[n] = '\0';
		if (strtol(cur, NULL, 10) < 1024 && pwrite(fd, "1024", 4, 0) !=
		    4)
			sk_log(SK_LOG_INFO, "%s: cannot raise to 1024", ra_path);
	}
	close(fd);
}

/* ------------------------------------------------------------------------ */
/* the FUSE operations                                                      */

/* An open file: a reader of the object, or the stats file's text. */
struct handle {
	struct fs_node *node;
	struct fs_reader *r;
	char *text;
	size_t len;
};

/* An open folder: its names as they stood at opendir, held. */
struct dirh {
	struct fs_dirent *d;
	size_t n;
};

static struct fs_node *
node_of(fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? fs_tree_root() :
	    (struct fs_node *)(uintptr_t)ino;
}

static fuse_ino_t
ino_of(struct fs_node *n)
{
	return n == fs_tree_root() ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)n;
}

static double
ttl(const struct fs_node *n)
{
	if (n->special)
		return 0;
	return fs_opts.metadata_ttl < 0 ? FOREVER : fs_opts.metadata_ttl;
}

/* n's attributes; caller holds the tree's lock. */
static void
stat_of(struct fs_node *n, struct stat *st)
{
	memset(st, 0, sizeof *st);
	st->st_ino = ino_of(n);
	st->st_mode = n->dir ? S_IFDIR | fs_opts.dir_mode :
	    S_IFREG | fs_opts.file_mode;
	st->st_nlink = n->dir ? 2 : 1;
	st->st_uid = fs_opts.uid;
	st->st_gid = fs_opts.gid;
	st->st_size = (off_t)n->size;
	st->st_blksize = (blksize_t)FS_BLOCK;
	st->st_blocks = (blkcnt_t)((n->size + 511) / 512);
	/* Folders a listing gives no time for (prefixes, the root) show
	 * when the mount started. */
	st->st_mtime = st->st_ctime = st->st_atime = n->mtime != 0 ?
	    (time_t)n->mtime : started;
}

static void
entry_of(struct fs_node *n, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof *e);
	e->ino = ino_of(n);
	e->generation = 1;
	fs_tree_lock();
	stat_of(n, &e->attr);
	fs_tree_unlock();
	e->attr_timeout = e->entry_timeout = ttl(n);
}

static void
op_init(void *data, struct fuse_conn_info *conn)
{
	(void)data;
	/* Reads as large as libfuse's buffer takes (1 MiB), several at
	 * once per file. */
	conn->want |= FUSE_CAP_ASYNC_READ;
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
	/* The kernel sends a mount 12 reads at once unless told more:
	 * 32 threads reading small files waited on 12 (0.38x curl through
	 * the link; 1.03x with 64). As many as there are threads to take
	 * them. */
	conn->max_background = (unsigned)(fs_opts.threads < 65535 ?
	    fs_opts.threads : 65535);
	conn->congestion_threshold = conn->max_background * 3 / 4;
	/* An O_DIRECT read sent as async requests waits for them in
	 * uninterruptible sleep (up to io_timeout with the server down);
	 * sent one request at a time it waits interruptibly, as a read
	 * through the page cache waits killably. */
	conn->want &= ~(unsigned)FUSE_CAP_ASYNC_DIO;
#ifdef FUSE_CAP_DIRECT_IO_ALLOW_MMAP
	/* A read-only mount has no dirty pages to keep coherent: a shared
	 * mmap of a direct_io file may use the page cache (libfuse 3.16
	 * and later can ask; 3.14 cannot, and the kernel says ENODEV). */
	if (conn->capable & FUSE_CAP_DIRECT_IO_ALLOW_MMAP)
		conn->want |= FUSE_CAP_DIRECT_IO_ALLOW_MMAP;
#endif
}

static void
op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	struct fs_node *n;
	int rc;

	ra_once();
	if ((rc = fs_tree_lookup(node_of(parent), name, &n)) != 0) {
		if (rc == -ENOENT && fs_opts.negative_ttl > 0) {
			/* A negative entry the kernel keeps. */
			memset(&e, 0, sizeof e);
			e.entry_timeout = fs_opts.negative_ttl;
			fuse_reply_entry(req, &e);
			return;
		}
		fuse_reply_err(req, -rc);
		return;
	}
	entry_of(n, &e);
	if (fuse_reply_entry(req, &e) != 0)
		fs_tree_forget(n, 1);
}

static void
op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	fs_tree_forget(node_of(ino), nlookup);
	fuse_reply_none(req);
}

static void
op_forget_multi(fuse_req_t req, size_t count,
    struct fuse_forget_data *forgets)
{
	size_t i;

	for (i = 0; i < count; i++)
		fs_tree_forget(node_of(forgets[i].ino), forgets[i].nlookup);
	fuse_reply_none(req);
}

static void
op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_node *n = node_of(ino);
	struct stat st;

	ra_once();
	(void)fi;
	fs_tree_lock();
	stat_of(n, &st);
	fs_tree_unlock();
	fuse_reply_attr(req, &st, ttl(n));
}

static void
op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_node *n = node_of(ino);
	struct sk_error err;
	struct handle *h;
	struct fs_obj *o;
	char *url, version[128], dv[160];
	uint64_t size;
	int rc;

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (n->dir) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if ((h = calloc(1, sizeof *h)) == NULL) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	h->node = n;
	if (n->special) {
		/* The counters as they are now; read past the size. */
		if ((h->text = fs_stats_json(&h->len)) == NULL) {
			free(h);
			fuse_reply_err(req, ENOMEM);
			return;
		}
		fi->direct_io = 1;
		fi->fh = (uintptr_t)h;
		fuse_reply_open(req, fi);
		return;
	}
	fs_tree_lock();
	url = strdup(n->url);
	size = n->size;
	snprintf(version, sizeof version, "%s", NODE_STR(n->version));
	snprintf(dv, sizeof dv, "%s", NODE_STR(n->disk_version));
	fs_tree_unlock();
	if (url == NULL) {
		free(h);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	rc = fs_obj_get(&o, url, size, version, dv, &err);
	free(url);
	if (rc != 0) {
		sk_log(SK_LOG_WARN, "%s", err.msg);
		free(h);
		fuse_reply_err(req, rc == SK_ENOMEM ? ENOMEM : EIO);
		return;
	}
	h->r = fs_reader_new(o);
	fs_obj_put(o);
	if (h->r == NULL) {
		free(h);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	FS_ADD(opens, 1);
	/* An inode is one version of its object (tree.c): what the
	 * kernel cached of it stays right across opens. With direct_io
	 * a read(2) is not cached: it is copied from the block cache
	 * straight into the reader's buffer. What such a reader passed or
	 * read whole leaves the block cache as it does for any other
	 * (cache.c): a read again fetches it again. */
	if (fs_opts.direct_io)
		fi->direct_io = 1;
	else
		fi->keep_cache = 1;
	fi->fh = (uintptr_t)h;
	if (fuse_reply_open(req, fi) != 0) {
		fs_reader_free(h->r, 0);
		free(h);
	}
}

static void
op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
    struct fuse_file_info *fi)
{
	struct handle *h = (struct handle *)(uintptr_t)fi->fh;
	const void *zc = NULL;
	void *hold = NULL;
	int64_t got;
	char *buf = NULL;

	(void)ino;
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (h->text != NULL) {
		size_t n;

		if ((uint64_t)off >= h->len) {
			fuse_reply_buf(req, NULL, 0);
			return;
		}
		/* Replied from a copy: once the kernel has the reply the
		 * reader may close, and op_release free h->text, while this
		 * thread is still in writev() (ASan's writev check reads the
		 * buffer after the call: a use after free). */
		n = (uint64_t)off + size > h->len ? h->len - (size_t)off : size;
		if ((buf = malloc(n)) == NULL) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		memcpy(buf, h->text + off, n);
		fuse_reply_buf(req, buf, n);
		free(buf);
		return;
	}
	/* Bytes one chunk holds go to the kernel from the cache itself;
	 * only a read across chunks is copied (and allocates). */
	got = fs_read_zc(h->r, &buf, size, (uint64_t)off, &zc, &hold);
	if (got < 0) {
		if (got == -ESTALE)
			fs_tree_stale(h->node);
		fuse_reply_err(req, (int)-got);
	} else
		fuse_reply_buf(req, hold != NULL ? zc : buf, (size_t)got);
	fs_read_put(hold);
	free(buf);
}

static void
op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct handle *h = (struct handle *)(uintptr_t)fi->fh;

	(void)ino;
	fs_reader_free(h->r, !(fi->flags & O_DIRECT));
	free(h->text);
	free(h);
	fuse_reply_err(req, 0);
}

static void
op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_node *n = node_of(ino);
	struct dirh *d;
	int rc;

	if (!n->dir) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	if ((d = calloc(1, sizeof *d)) == NULL) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if ((rc = fs_tree_readdir(n, &d->d, &d->n)) != 0) {
		free(d);
		fuse_reply_err(req, -rc);
		return;
	}
	fi->fh = (uintptr_t)d;
	fi->cache_readdir = fs_opts.metadata_ttl < 0;
	if (fuse_reply_open(req, fi) != 0) {
		size_t i;

		for (i = 0; i < d->n; i++)
			fs_tree_forget(d->d[i].node, 1);
		fs_tree_dirents_free(d->d, d->n);
		free(d);
	}
}

/* Entries from off (0 and 1 are "." and ".."), as many as fit in size. */
static void
readdir_any(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
    struct fuse_file_info *fi, int plus)
{
	struct dirh *d = (struct dirh *)(uintptr_t)fi->fh;
	struct fuse_entry_param e;
	struct fs_node *n;
	size_t used = 0, k, i;
	char *buf;
	const char *name;

	if ((buf = malloc(size)) == NULL) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (i = off < 0 ? 0 : (size_t)off; i < d->n + 2; i++) {
		memset(&e, 0, sizeof e);
		if (i < 2) {
			name = i == 0 ? "." : "..";
			n = node_of(ino);
			e.attr.st_ino = ino;
			e.attr.st_mode = S_IFDIR;
		} else {
			name = d->d[i - 2].name;
			n = d->d[i - 2].node;
			entry_of(n, &e);
		}
		if (plus)
			k = fuse_add_direntry_plus(req, buf + used, size - used,
			    name, &e, (off_t)(i + 1));
		else
			k = fuse_add_direntry(req, buf + used, size - used,
			    name, &e.attr, (off_t)(i + 1));
		if (k > size - used)
			break;
		/* readdirplus hands the kernel a reference (not for . and
		 * ..), as lookup does; taken back if the reply fails. */
		if (plus && i >= 2) {
			fs_tree_lock();
			n->nlookup++;
			fs_tree_unlock();
		}
		used += k;
	}
	if (fuse_reply_buf(req, buf, used) != 0 && plus) {
		size_t j;

		for (j = off < 2 ? 2 : (size_t)off; j < i; j++)
			fs_tree_forget(d->d[j - 2].node, 1);
	}
	free(buf);
}

static void
op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
    struct fuse_file_info *fi)
{
	readdir_any(req, ino, size, off, fi, 0);
}

static void
op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
    struct fuse_file_info *fi)
{
	readdir_any(req, ino, size, off, fi, 1);
}

static void
op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct dirh *d = (struct dirh *)(uintptr_t)fi->fh;
	size_t i;

	(void)ino;
	for (i = 0; i < d->n; i++)
		fs_tree_forget(d->d[i].node, 1);
	fs_tree_dirents_free(d->d, d->n);
	free(d);
	fuse_reply_err(req, 0);
}

static void
op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs st;

	ra_once();
	(void)ino;
	memset(&st, 0, sizeof st);
	st.f_bsize = st.f_frsize = (unsigned long)FS_BLOCK;
	st.f_namemax = NAME_MAX;
	st.f_flag = ST_RDONLY | ST_NOSUID | ST_NODEV;
	fuse_reply_statfs(req, &st);
}

/* Every call that would change something: a read-only filesystem. */
static void
op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
    struct fuse_file_info *fi)
{
	(void)ino, (void)attr, (void)to_set, (void)fi;
	fuse_reply_err(req, EROFS);
}

static void
op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
    dev_t rdev)
{
	(void)parent, (void)name, (void)mode, (void)rdev;
	fuse_reply_err(req, EROFS);
}

static void
op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	(void)parent, (void)name, (void)mode;
	fuse_reply_err(req, EROFS);
}

static void
op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent, (void)name;
	fuse_reply_err(req, EROFS);
}

static void
op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
    const char *name)
{
	(void)link, (void)parent, (void)name;
	fuse_reply_err(req, EROFS);
}

static void
op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
    fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	(void)parent, (void)name, (void)newparent, (void)newname, (void)flags;
	fuse_reply_err(req, EROFS);
}

static void
op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
    const char *newname)
{
	(void)ino, (void)newparent, (void)newname;
	fuse_reply_err(req, EROFS);
}

static void
op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
    off_t off, struct fuse_file_info *fi)
{
	(void)ino, (void)buf, (void)size, (void)off, (void)fi;
	fuse_reply_err(req, EROFS);
}

static void
op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
    struct fuse_file_info *fi)
{
	(void)parent, (void)name, (void)mode, (void)fi;
	fuse_reply_err(req, EROFS);
}

static void
op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
    const char *value, size_t size, int flags)
{
	(void)ino, (void)name, (void)value, (void)size, (void)flags;
	fuse_reply_err(req, EROFS);
}

static void
op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	(void)ino, (void)name;
	fuse_reply_err(req, EROFS);
}

static void
op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset,
    off_t length, struct fuse_file_info *fi)
{
	(void)ino, (void)mode, (void)offset, (void)length, (void)fi;
	fuse_reply_err(req, EROFS);
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.open = op_open,
	.read = op_read,
	.release = op_release,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
	.statfs = op_statfs,
	.setattr = op_setattr,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_unlink,
	.symlink = op_symlink,
	.rename = op_rename,
	.link = op_link,
	.write = op_write,
	.create = op_create,
	.setxattr = op_setxattr,
	.removexattr = op_removexattr,
	.fallocate = op_fallocate,
};

/* ------------------------------------------------------------------------ */
/* telling the kernel to forget names                                       */

/*
 * fuse_lowlevel_notify_inval_entry may wait for the kernel's lock on the
 * folder, which a request this process has yet to answer can hold: it is
 * sent from a thread of its own, never from a request.
 */
struct note {
	struct note *next;
	struct fs_node *parent;	/* pinned until sent */
	char *name;
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct note *head, *tail;
	struct fuse_session *se;
	pthread_t thread;
	int on, stop;
} notes = { .mu = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER };

void
fs_notify_entry(struct fs_node *parent, const char *name)
{
	struct note *n;

	if (!__atomic_load_n(&notes.on, __ATOMIC_ACQUIRE))
		return;
	if ((n = calloc(1, sizeof *n)) == NULL ||
	    (n->name = strdup(name)) == NULL) {
		free(n);
		return;		/* the entry times out instead */
	}
	n->parent = parent;
	parent->pins++;
	pthread_mutex_lock(&notes.mu);
	if (notes.tail != NULL)
		notes.tail->next = n;
	else
		notes.head = n;
	notes.tail = n;
	pthread_cond_signal(&notes.cond);
	pthread_mutex_unlock(&notes.mu);
}

static void *
notifier(void *arg)
{
	struct note *n;
	int rc;

	(void)arg;
	pthread_mutex_lock(&notes.mu);
	for (;;) {
		while (notes.head == NULL && !notes.stop)
			pthread_cond_wait(&notes.cond, &notes.mu);
		if ((n = notes.head) == NULL)
			break;
		if ((notes.head = n->next) == NULL)
			notes.tail = NULL;
		pthread_mutex_unlock(&notes.mu);
		if (!notes.stop && (rc = fuse_lowlevel_notify_inval_entry(
		    notes.se, ino_of(n->parent), n->name,
		    strlen(n->name))) != 0 && rc != -ENOENT)
			sk_log(SK_LOG_INFO, "the kernel did not forget %s: %s",
			    n->name, strerror(-rc));
		fs_tree_unpin(n->parent);
		free(n->name);
		free(n);
		pthread_mutex_lock(&notes.mu);
	}
	pthread_mutex_unlock(&notes.mu);
	return NULL;
}

static void
fs_notify_start(struct fuse_session *se)
{
	notes.se = se;
	if (pthread_create(&notes.thread, NULL, notifier, NULL) != 0)
		return;		/* names time out instead */
	__atomic_store_n(&notes.on, 1, __ATOMIC_RELEASE);
}

/* Before the session goes: what is queued is dropped, unpinned. */
static void
fs_notify_stop(void)
{
	if (!__atomic_load_n(&notes.on, __ATOMIC_ACQUIRE))
		return;
	__atomic_store_n(&notes.on, 0, __ATOMIC_RELEASE);
	pthread_mutex_lock(&notes.mu);
	notes.stop = 1;
	pthread_cond_signal(&notes.cond);
	pthread_mutex_unlock(&notes.mu);
	pthread_join(notes.thread, NULL);
}

/* ------------------------------------------------------------------------ */
/* options                                                                  */

enum {
	O_METADATA_TTL = 1, O_NEGATIVE_TTL, O_CACHE_MB, O_READAHEAD,
	O_CACHE_DIR, O_CACHE_MAX_MB, O_IO_TIMEOUT, O_THREADS,
	O_ALLOW_OTHER, O_FOREGROUND, O_DEBUG, O_MOUNT_OPTS, O_UID, O_GID,
	O_FILE_MODE, O_DIR_MODE, O_READ_ONLY, O_IMPLICIT_DIRS, O_PREFIX,
	O_ENDPOINT_URL, O_REGION, O_DIRECT_IO
};

static const struct cli_option mount_opts[] = {
	{ "metadata-ttl", 0, O_METADATA_TTL, CLI_STRING, "S",
	    "trust a listing this long: a duration, or -1 for ever\n"
	    "(immutable training data) (60s)", 0, 0, NULL, 0 },
	{ "negative-ttl", 0, O_NEGATIVE_TTL, CLI_DURATION, "S",
	    "a name looked up and not found stays missing (5s)", 0, 86400,
	    NULL, 0 },
	{ "cache-mb", 0, O_CACHE_MB, CLI_INT, "N",
	    "memory for the block cache, MiB (512)", 16, 1 << 20, NULL, 0 },
	{ "readahead", 0, O_READAHEAD, CLI_SIZE, "SIZE",
	    "a sequential reader's read-ahead window at most (64M)",
	    1 << 20, (double)(1ull << 34), NULL, 0 },
	{ "cache-dir", 0, O_CACHE_DIR, CLI_STRING, "DIR",
	    "keep blocks on disk under DIR, across mounts; made\n"
	    "0700 if missing (none)", 0, 0,
	    NULL, 0 },
	{ "cache-max-mb", 0, O_CACHE_MAX_MB, CLI_INT, "N",
	    "the disk cache's size at most, MiB (10240)", 1, 1 << 30, NULL, 0 },
	{ "io-timeout", 0, O_IO_TIMEOUT, CLI_DURATION, "S",
	    "a read that gets no data this long fails with EIO (60s)", 1,
	    86400, NULL, 0 },
	{ "threads", 0, O_THREADS, CLI_INT, "N",
	    "FUSE worker threads at most (64)", 1, 1024, NULL, 0 },
	{ "direct-io", 0, O_DIRECT_IO, CLI_FLAG, NULL,
	    "bypass the kernel's page cache: one copy fewer for\n"
	    "shards streamed once; no shared mmap before libfuse\n"
	    "3.16 (off)", 0, 0, NULL, 0 },
	{ "allow-other", 0, O_ALLOW_OTHER, CLI_FLAG, NULL,
	    "let other users read the mount (needs user_allow_other in\n"
	    "/etc/fuse.conf unless root); default: the mounting user only",
	    0, 0, NULL, 0 },
	{ "foreground", 'f', O_FOREGROUND, CLI_FLAG, NULL,
	    "stay in the foreground", 0, 0, NULL, 0 },
	{ "debug", 'd', O_DEBUG, CLI_FLAG, NULL,
	    "print every FUSE request (implies -f)", 0, 0, NULL, 0 },
	{ "options", 'o', O_MOUNT_OPTS, CLI_STRING, "OPT[,OPT...]",
	    "mount options: any option of shardfs as name=value or name\n"
	    "(metadata_ttl=-1,cache_mb=1024,uid=1000), and FUSE's ro,\n"
	    "default_permissions, allow_root, auto_unmount, fsname=,\n"
	    "subtype=", 0, 0, NULL, 0 },
	{ NULL, 0, 0, CLI_FLAG, NULL, NULL, 0, 0, NULL, 0 }
};

/* What gcsfuse and mountpoint-s3 users type, meaning what it means there
 * (shardfs(1), "For gcsfuse and mountpoint-s3 users"). The bucket ones
 * set the variables the library reads already. */
static const struct cli_option compat_opts[] = {
	{ "prefix", 0, O_PREFIX, CLI_STRING, "PREFIX",
	    "mount only the objects under PREFIX of SOURCE\n"
	    "(mountpoint-s3; appended to a prefix in SOURCE)", 0, 0, NULL,
	    0 },
	{ "endpoint-url", 0, O_ENDPOINT_URL, CLI_STRING, "URL",
	    "s3: as AWS_ENDPOINT_URL_S3; gs: as SK_GCS_ENDPOINT\n"
	    "(or STORAGE_EMULATOR_HOST when that is set)", 0, 0, NULL, 0 },
	{ "region", 0, O_REGION, CLI_STRING, "REGION",
	    "s3: as AWS_REGION (us-east-1)", 0, 0, NULL, 0 },
	{ "uid", 0, O_UID, CLI_INT, "N",
	    "the owner files and folders show (the mounting user)", 0,
	    4294967294.0, NULL, 0 },
	{ "gid", 0, O_GID, CLI_INT, "N",
	    "the group they show (the mounting user's)", 0, 4294967294.0,
	    NULL, 0 },
	{ "file-mode", 0, O_FILE_MODE, CLI_STRING, "MODE",
	    "the permission bits files show, octal (0444)", 0, 0, NULL, 0 },
	{ "dir-mode", 0, O_DIR_MODE, CLI_STRING, "MODE",
	    "the permission bits folders show, octal (0555)", 0, 0, NULL,
	    0 },
	{ "read-only", 0, O_READ_ONLY, CLI_FLAG, NULL,
	    "accepted and ignored: the mount is always read-only", 0, 0,
	    NULL, 0 },
	{ "implicit-dirs", 0, O_IMPLICIT_DIRS, CLI_FLAG, NULL,
	    "accepted and ignored: folders are always implied by\n"
	    "object names", 0, 0, NULL, 0 },
	{ NULL, 0, 0, CLI_FLAG, NULL, NULL, 0, 0, NULL, 0 }
};

/* The fetch engine's options without --parts: the mount's read-ahead
 * window sets how many ranges are in flight. */
static struct cli_option remote_opts[16];

static struct cli_group groups[] = {
	{ "mount", mount_opts },
	{ "as gcsfuse and mountpoint-s3 spell them", compat_opts },
	{ "remote (http, https, gs, s3)", remote_opts },
	{ NULL, NULL }
};

static int cmd_mount(int argc, char **argv);

static const struct cli_command shardfs_cmd = {
	.name = NULL,
	.usage = "SOURCE MOUNTPOINT [-f] [-o OPT,...] [options]",
	.summary = "mount a bucket or an http(s) tree read-only",
	.about =
	    "Mount SOURCE read-only at MOUNTPOINT with FUSE. SOURCE is\n"
	    "gs://BUCKET[/PREFIX], s3://BUCKET[/PREFIX], an http(s):// folder\n"
	    "served as an nginx JSON autoindex (ending in '/'), or an\n"
	    "http(s):// manifest (NAME.json), whose shards appear side by\n"
	    "side. Folders come from object names; sequential readers get\n"
	    "read-ahead; every open file reads one version of its object.\n"
	    "Counters are in MOUNTPOINT/.shardfs/stats. Unmount with\n"
	    "'fusermount3 -u MOUNTPOINT', or SIGINT/SIGTERM.",
	.groups = groups,
	.min_args = 2,
	.max_args = 2,
	.exec = cmd_mount,
};

struct setup {
	struct cli_remote remote;
	char fuse_opts[1024];	/* passed on to libfuse */
	char *copies[64];	/* of -o lists, which values point into */
	size_t ncopies;
	const char *prefix;	/* --prefix */
	const char *endpoint;	/* --endpoint-url */
	const char *region;	/* --region */
};

/* FUSE's own options that may be passed on: nothing that could make the
 * mount writable or let others in behind the user's back. */
static int
fuse_option_ok(const char *o)
{
	static const char *const plain[] = { "ro", "default_permissions",
	    "allow_root", "auto_unmount", NULL };
	static const char *const valued[] = { "fsname=", "subtype=", NULL };
	int i;

	for (i = 0; plain[i] != NULL; i++)
		if (strcmp(o, plain[i]) == 0)
			return 1;
	for (i = 0; valued[i] != NULL; i++)
		if (strncmp(o, valued[i], strlen(valued[i])) == 0)
			return 1;
	return 0;
}

static void setter(void *ctx, const struct cli_option *o,
    const struct cli_value *v);

/* --file-mode 0644, as chmod(1) and gcsfuse take it: octal, at most
 * 0777 (no set-id or sticky bit on a mount that runs nothing). */
static mode_t
mode_of(const struct cli_option *o, const char *s)
{
	unsigned long m = 0;
	const char *p;

	for (p = s; *p >= '0' && *p <= '7' && m <= 07777; p++)
		m = m * 8 + (unsigned long)(*p - '0');
	if (*p != '\0' || p == s || m > 0777)
		usage_error("%s %.32s: want an octal mode from 0 to 0777 "
		    "(0644)", cli_optname(o), s);
	return (mode_t)m;
}

/* -o a,b=c: each one ours (as --a, --b c) or FUSE's. */
static void
mount_options(struct setup *su, const char *list)
{
	char *copy, *tok, *save = NULL, *eq, name[64];
	const struct cli_group *g;
	const struct cli_option *o;
	size_t i;

	/* Values point into the copy (a --cache-dir, a --ca-file): it lives
	 * as long as the options. */
	if (su->ncopies == sizeof su->copies / sizeof su->copies[0])
		usage_error("-o: given too many times");
	if ((copy = strdup(list)) == NULL)
		die("out of memory");
	su->copies[su->ncopies++] = copy;
	for (tok = strtok_r(copy, ",", &save); tok != NULL;
	    tok = strtok_r(NULL, ",", &save)) {
		eq = strchr(tok, '=');
		snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - tok) :
		    (int)strlen(tok), tok);
		for (i = 0; name[i]; i++)
			if (name[i] == '_')
				name[i] = '-';
		o = NULL;
		for (g = groups; g->opts != NULL && o == NULL; g++)
			for (i = 0; g->opts[i].name != NULL; i++)
				if (strcmp(g->opts[i].name, name) == 0 &&
				    g->opts[i].id != O_MOUNT_OPTS) {
					o = &g->opts[i];
					break;
				}
		if (o != NULL) {
			struct cli_value v;

			if ((o->type == CLI_FLAG) != (eq == NULL))
				usage_error("-o %s: %s", tok, eq ? "takes no "
				    "value" : "needs a value");
			cli_value_of(o, eq ? eq + 1 : NULL, &v, tok);
			setter(su, o, &v);
			continue;
		}
		if (!fuse_option_ok(tok))
			usage_error("-o %s: not a shardfs or allowed FUSE mount "
			    "option (see shardfs --help)", tok);
		if (strlen(su->fuse_opts) + strlen(tok) + 2 >
		    sizeof su->fuse_opts)
			usage_error("-o: too many mount options");
		if (su->fuse_opts[0] != '\0')
			strcat(su->fuse_opts, ",");
		strcat(su->fuse_opts, tok);
	}
}

static void
setter(void *ctx, const struct cli_option *o, const struct cli_value *v)
{
	struct setup *su = ctx;
	char err[200];

	if (cli_remote_set(&su->remote, o, v))
		return;
	switch (o->id) {
	case O_METADATA_TTL:
		if (strcmp(v->s, "-1") == 0 || strcmp(v->s, "forever") == 0)
			fs_opts.metadata_ttl = -1;
		else if (cli_parse_duration(v->s, 0, 1e9, &fs_opts.metadata_ttl,
		    err, sizeof err) != 0)
			usage_error("metadata_ttl %s: %s (or -1 for ever)", v->s,
			    err);
		break;
	case O_NEGATIVE_TTL:
		fs_opts.negative_ttl = v->d;
		break;
	case O_CACHE_MB:
		fs_opts.cache_bytes = (uint64_t)v->i << 20;
		break;
	case O_READAHEAD:
		fs_opts.readahead = v->u;
		break;
	case O_CACHE_DIR:
		fs_opts.cache_dir = v->s;
		break;
	case O_CACHE_MAX_MB:
		fs_opts.cache_max_bytes = (uint64_t)v->i << 20;
		break;
	case O_IO_TIMEOUT:
		fs_opts.io_timeout = v->d;
		break;
	case O_THREADS:
		fs_opts.threads = (int)v->i;
		break;
	case O_ALLOW_OTHER:
		fs_opts.allow_other = 1;
		break;
	case O_DIRECT_IO:
		fs_opts.direct_io = 1;
		break;
	case O_FOREGROUND:
		fs_opts.foreground = 1;
		break;
	case O_DEBUG:
		fs_opts.debug = fs_opts.foreground = 1;
		break;
	case O_MOUNT_OPTS:
		mount_options(su, v->s);
		break;
	case O_UID:
		fs_opts.uid = (uid_t)v->i;
		break;
	case O_GID:
		fs_opts.gid = (gid_t)v->i;
		break;
	case O_FILE_MODE:
		fs_opts.file_mode = mode_of(o, v->s);
		break;
	case O_DIR_MODE:
		fs_opts.dir_mode = mode_of(o, v->s);
		break;
	case O_READ_ONLY:
	case O_IMPLICIT_DIRS:
		break;		/* what shardfs always does */
	case O_PREFIX:
		su->prefix = v->s;
		break;
	case O_ENDPOINT_URL:
		su->endpoint = v->s;
		break;
	case O_REGION:
		su->region = v->s;
		break;
	}
}

/*
 * The bucket spellings, once SOURCE is known: each sets the variable the
 * library reads (lib/aws.c, lib/source_gs.c), over what the environment
 * said, as an option beats the environment. A spelling that means nothing
 * for SOURCE is refused rather than ignored.
 */
static void
bucket_options(const struct setup *su, enum sk_scheme scheme)
{
	const char *p;

	if (su->region != NULL) {
		if (scheme != SK_SCHEME_S3)
			usage_error("--region: only for s3:// sources");
		/* AWS region names: lower-case letters, digits, '-'. */
		for (p = su->region; (*p >= 'a' && *p <= 'z') ||
		    (*p >= '0' && *p <= '9') || *p == '-'; p++)
			;
		if (*p != '\0' || p - su->region > 64)
			usage_error("--region %.64s: not a region name "
			    "(us-east-1, eu-west-3)", su->region);
		setenv("AWS_REGION", su->region, 1);
	}
	if (su->endpoint == NULL)
		return;
	if (scheme != SK_SCHEME_S3 && scheme != SK_SCHEME_GS)
		usage_error("--endpoint-url: only for s3:// and gs:// sources "
		    "(an http(s) SOURCE is its own endpoint)");
	if (strncmp(su->endpoint, "http://", 7) != 0 &&
	    strncmp(su->endpoint, "https://", 8) != 0)
		usage_error("--endpoint-url %.100s: want an http:// or "
		    "https:// URL", su->endpoint);
	for (p = su->endpoint; *p > ' ' && *p != 0x7f; p++)
		;
	if (*p != '\0')
		usage_error("--endpoint-url: a space or control character in "
		    "the URL");
	if (scheme == SK_SCHEME_S3)
		setenv("AWS_ENDPOINT_URL_S3", su->endpoint, 1);
	else if (getenv("STORAGE_EMULATOR_HOST") != NULL &&
	    *getenv("STORAGE_EMULATOR_HOST") != '\0')
		/* Set, it would win over SK_GCS_ENDPOINT: the emulator
		 * (no credentials) is now at the URL given. */
		setenv("STORAGE_EMULATOR_HOST", su->endpoint, 1);
	else
		setenv("SK_GCS_ENDPOINT", su->endpoint, 1);
}

/* The source as a folder URL (or a manifest's): what is listed; with
 * --prefix, the folder that prefix names under it. */
static char *
root_of(const char *source, const char *prefix, int *manifest,
    enum sk_scheme *scheme)
{
	struct sk_url u;
	struct sk_error err;
	size_t n = strlen(source);
	char *root, *tail, *full;
	const char *p, *seg;

	*manifest = 0;
	if (sk_url_parse(source, &u, &err) != 0)
		usage_error("%s", err.msg);
	*scheme = u.scheme;
	sk_url_free(&u);
	if (*scheme != SK_SCHEME_GS && *scheme != SK_SCHEME_S3 &&
	    *scheme != SK_SCHEME_HTTP && *scheme != SK_SCHEME_HTTPS)
		usage_error("%s: want gs://, s3:// or http(s)://", source);
	if (*scheme == SK_SCHEME_HTTP || *scheme == SK_SCHEME_HTTPS) {
		if (cli_is_manifest(source)) {
			if (prefix != NULL)
				usage_error("--prefix: %s is a manifest; a "
				    "prefix goes with a folder SOURCE", source);
			*manifest = 1;
			return sk__strdup(source);
		}
		if (source[n - 1] != '/')
			usage_error("%s: an http(s) source is a folder (ending "
			    "in '/') or a manifest (NAME.json)", source);
		root = sk__strdup(source);
	} else
		/* gs://bucket, gs://bucket/, gs://bucket/prefix: one
		 * folder. */
		root = source[n - 1] == '/' ? sk__strdup(source) :
		    sk__asprintf("%s/", source);
	if (root == NULL)
		die("out of memory");
	if (prefix == NULL)
		return root;
	/*
	 * mountpoint-s3's --prefix names a folder of the bucket; here it is
	 * one under SOURCE's folder (s3://b/x --prefix y/ is s3://b/x/y/),
	 * and it stays there: no empty, "." or ".." part that would climb
	 * out of it, nothing a listing URL cannot carry.
	 */
	for (seg = p = prefix;; p++) {
		if ((unsigned char)*p < 0x20 && *p != '\0')
			usage_error("--prefix: a control character in it");
		if (*p != '/' && *p != '\0')
			continue;
		if ((p == seg && (*p != '\0' || p == prefix)) ||
		    (p - seg == 1 && seg[0] == '.') ||
		    (p - seg == 2 && seg[0] == '.' && seg[1] == '.'))
			usage_error("--prefix %.200s: want a folder inside "
			    "SOURCE (a/b/): no leading '/', '//', '.' or "
			    "'..'", prefix);
		if (*p == '\0' || p[1] == '\0')
			break;
		seg = p + 1;
	}
	n = strlen(prefix);
	tail = *scheme == SK_SCHEME_HTTP || *scheme == SK_SCHEME_HTTPS ?
	    sk__uri_escape(prefix, 1) : sk__strdup(prefix);
	if (tail == NULL || (full = sk__asprintf("%s%s%s", root, tail,
	    prefix[n - 1] == '/' ? "" : "/")) == NULL)
		die("out of memory");
	free(tail);
	free(root);
	return full;
}

/*
 * --cache-dir: a folder the user named, made 0700 when it is not there
 * yet (its parent must be). The mkdir is the only folder made; a name
 * that is there is taken as it is, and disk.c keeps to folders of its
 * own under it.
 */
static char *
cache_dir_of(const char *dir)
{
	struct stat st;
	char *abs;
	int fd;

	if (lstat(dir, &st) != 0 && errno == ENOENT) {
		if (mkdir(dir, 0700) != 0)
			die("--cache-dir %s: cannot make it: %s%s", dir,
			    strerror(errno), errno == ENOENT ? " (its parent "
			    "folder must exist)" : "");
		/* What was made, not a symlink planted since: 0700 even
		 * under a umask that took the owner's bits. */
		if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
		    O_CLOEXEC)) < 0 || fstat(fd, &st) != 0)
			die("--cache-dir %s: made it, but cannot open it as a "
			    "folder: %s", dir, strerror(errno));
		if (st.st_uid != geteuid())
			die("--cache-dir %s: made it, but it was replaced by "
			    "another user's", dir);
		if (fchmod(fd, 0700) != 0)
			die("--cache-dir %s: cannot make it 0700: %s", dir,
			    strerror(errno));
		close(fd);
		sk_log(SK_LOG_INFO, "--cache-dir %s: made it (0700)", dir);
	}
	if ((abs = realpath(dir, NULL)) == NULL)
		die("--cache-dir %s: %s", dir, strerror(errno));
	return abs;
}

/* Write what the mount came to (0, or an exit status) to the parent
 * that waits in daemonize(). */
static int status_fd = -1;

static void
tell_parent(int status)
{
	unsigned char c = (unsigned char)status;

	if (status_fd < 0)
		return;
	if (write(status_fd, &c, 1) != 1) {
		/* The parent is gone: nothing to tell. */
	}
	close(status_fd);
	status_fd = -1;
}

static void
tell_on_exit(int status)
{
	tell_parent(status == 0 ? 1 : status);
}

/*
 * Into the background before the first request: the fetch engine's
 * thread would not survive a fork. The parent waits until the child has
 * listed the source and mounted (exit 0), or says why not and exits with
 * the child's status, so errors reach the terminal that ran shardfs.
 */
static void
daemonize(void)
{
	int p[2], st;
	unsigned char c;
	pid_t pid;

	if (pipe(p) != 0)
		die("pipe: %s", strerror(errno));
	if ((pid = fork()) < 0)
		die("fork: %s", strerror(errno));
	if (pid > 0) {
		close(p[1]);
		if (read(p[0], &c, 1) == 1 && c == 0)
			_exit(0);
		waitpid(pid, &st, 0);
		_exit(WIFEXITED(st) && WEXITSTATUS(st) != 0 ? WEXITSTATUS(st) :
		    CLI_EXIT_FAILURE);
	}
	close(p[0]);
	status_fd = p[1];
	cli_set_exit_hook(tell_on_exit);
	if (setsid() < 0)
		die("setsid: %s", strerror(errno));
}

/*
 * Files read again later (a key file at each token refresh, a CA bundle
 * for each new connection) by a path relative to a folder the background
 * leaves: made absolute now.
 */
static void
absolute_env(const char *name)
{
	const char *v = getenv(name);
	char *abs;

	if (v == NULL || *v == '\0' || *v == '/')
		return;
	if ((abs = realpath(v, NULL)) == NULL)
		return;		/* reported where it is read */
	setenv(name, abs, 1);
	free(abs);
}

static void
absolute_paths(struct setup *su, char **ca)
{
	static const char *const vars[] = { "GOOGLE_APPLICATION_CREDENTIALS",
	    "CLOUDSDK_CONFIG", "HOME", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "CURL_CA_BUNDLE",
	    "SSL_CERT_FILE", "SSL_CERT_DIR", NULL };
	int i;

	for (i = 0; vars[i] != NULL; i++)
		absolute_env(vars[i]);
	*ca = NULL;
	if (su->remote.cfg.ca_file != NULL && su->remote.cfg.ca_file[0] !=
	    '/' && (*ca = realpath(su->remote.cfg.ca_file, NULL)) != NULL)
		su->remote.cfg.ca_file = *ca;
}

/* Leave the terminal once mounted. */
static void
detach(void)
{
	int fd;

	tell_parent(0);
	if (chdir("/") != 0) {
		/* Nothing holds a relative path past this point. */
	}
	if ((fd = open("/dev/null", O_RDWR)) >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		if (fd > 2)
			close(fd);
	}
}

static int
cmd_mount(int argc, char **argv)
{
	struct setup su;
	struct sk_error err;
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_session *se;
	struct fuse_loop_config *lc;
	char opts[2048], *shown, *cache_dir = NULL, *mnt, *ca;
	const struct cli_option *r;
	enum sk_scheme scheme;
	size_t k = 0, i, pw_off, pw_len;
	int first, rc, empty = 0;

	for (r = cli_remote_opts; r->name != NULL && k + 1 <
	    sizeof remote_opts / sizeof remote_opts[0]; r++)
		if (r->id != CLI_R_PARTS)
			remote_opts[k++] = *r;
	memset(&su, 0, sizeof su);
	fs_opts.metadata_ttl = 60;
	fs_opts.negative_ttl = 5;
	fs_opts.cache_bytes = (uint64_t)512 << 20;
	fs_opts.readahead = (uint64_t)64 << 20;
	fs_opts.cache_max_bytes = (uint64_t)10240 << 20;
	fs_opts.io_timeout = 60;
	fs_opts.threads = 64;
	fs_opts.uid = getuid();
	fs_opts.gid = getgid();
	fs_opts.file_mode = 0444;
	fs_opts.dir_mode = 0555;
	cli_remote_init(&su.remote);
	first = cli_parse(&shardfs_cmd, argc, argv, setter, &su);
	/* A password in SOURCE would stay in /proc/PID/cmdline, which other
	 * users read (ps): keep a copy, and overwrite it in argv. */
	if ((fs_opts.source = strdup(argv[first])) == NULL)
		die("out of memory");
	if (sk__url_password(argv[first], &pw_off, &pw_len))
		memset(argv[first] + pw_off, '*', pw_len);
	/* Absolute: libfuse unmounts by this path, after the background
	 * left the folder it was relative to. */
	if ((mnt = realpath(argv[first + 1], NULL)) == NULL)
		die("%s: %s", argv[first + 1], strerror(errno));
	fs_opts.root = root_of(fs_opts.source, su.prefix, &fs_opts.manifest,
	    &scheme);
	bucket_options(&su, scheme);
	fs_opts.chunk = su.remote.cfg.part_size;
	if (fs_opts.chunk < FS_BLOCK)
		usage_error("--part-size %" PRIu64 ": at least 1M for a mount "
		    "(its block)", fs_opts.chunk);
	fs_opts.chunk = fs_opts.chunk / FS_BLOCK * FS_BLOCK;
	/* Room for 4 read-ahead chunks: the smallest that keeps a
	 * sequential reader's next chunk in flight while it reads one. */
	if (fs_opts.cache_bytes < 4 * fs_opts.chunk)
		usage_error("cache_mb %" PRIu64 ": too small; the smallest is "
		    "%" PRIu64 " (MB) with --part-size %" PRIu64 "M (4 "
		    "read-ahead chunks)", fs_opts.cache_bytes >> 20,
		    (4 * fs_opts.chunk) >> 20, fs_opts.chunk >> 20);
	if (fs_opts.cache_dir != NULL)
		cache_dir = cache_dir_of(fs_opts.cache_dir);
	fs_opts.cache_dir = cache_dir;
	/* A read gives up at io_timeout: so does a range's retrying. */
	if (su.remote.cfg.retry_time > fs_opts.io_timeout)
		su.remote.cfg.retry_time = fs_opts.io_timeout;
	if (su.remote.cfg.stall_timeout > fs_opts.io_timeout)
		su.remote.cfg.stall_timeout = fs_opts.io_timeout;
	if (su.remote.cfg.parts < 1)
		su.remote.cfg.parts = 1;
	absolute_paths(&su, &ca);

	if (!fs_opts.foreground)
		daemonize();
	cli_remote_finish(&su.remote);
	if (fs_opts.cache_dir != NULL && fs_disk_open(fs_opts.cache_dir,
	    fs_opts.cache_max_bytes, &err) != 0)
		die("--cache-dir %s", err.msg);
	if (fs_tree_init(&empty, &err) != 0)
		die("%s", err.msg);
	if (empty) {
		/* As gcsfuse and mountpoint-s3: mounted all the same (the
		 * objects may come), but a typo in a prefix should show. */
		if ((shown = sk_url_redact(fs_opts.root)) == NULL)
			die("out of memory");
		warn("%s: no objects under this prefix", shown);
		free(shown);
	}

	if ((shown = sk_url_redact(fs_opts.source)) == NULL)
		die("out of memory");
	/* fsname: the source without its secrets; ',' and '\' escaped
	 * for libfuse's option parser. */
	k = (size_t)snprintf(opts, sizeof opts, "ro,fsname=");
	for (i = 0; shown[i] != '\0' && k + 4 < sizeof opts; i++) {
		if (shown[i] == ',' || shown[i] == '\\')
			opts[k++] = '\\';
		opts[k++] = shown[i];
	}
	opts[k] = '\0';
	free(shown);
	snprintf(opts + k, sizeof opts - k, ",subtype=shardfs%s%s%s",
	    fs_opts.allow_other ? ",allow_other" : "",
	    su.fuse_opts[0] ? "," : "", su.fuse_opts);
	if (fuse_opt_add_arg(&args, "shardfs") != 0 ||
	    fuse_opt_add_arg(&args, "-o") != 0 ||
	    fuse_opt_add_arg(&args, opts) != 0 ||
	    (fs_opts.debug && fuse_opt_add_arg(&args, "-d") != 0))
		die("out of memory");
	if ((se = fuse_session_new(&args, &ops, sizeof ops, NULL)) == NULL)
		die("%s: cannot start a FUSE session (see above)", mnt);
	if (fuse_set_signal_handlers(se) != 0)
		die("cannot set signal handlers");
	if (fuse_session_mount(se, mnt) != 0)
		die("%s: cannot mount (see above; is it an empty folder, and "
		    "is /dev/fuse there?)", mnt);
	kernel_read_ahead(mnt);
	fs_notify_start(se);
	if (!fs_opts.foreground)
		detach();
	else
		tell_parent(0);
	if ((lc = fuse_loop_cfg_create()) == NULL)
		die("out of memory");
	fuse_loop_cfg_set_max_threads(lc, (unsigned)fs_opts.threads);
	fuse_loop_cfg_set_idle_threads(lc, (unsigned)(fs_opts.threads / 4 > 4 ?
	    fs_opts.threads / 4 : 4));
	/* 0, or the signal that ended it (SIGINT, SIGTERM, SIGHUP): both a
	 * clean end; < 0 is an error. */
	rc = fuse_session_loop_mt(se, lc);
	fuse_loop_cfg_destroy(lc);
	fs_notify_stop();
	fuse_session_unmount(se);
	fuse_remove_signal_handlers(se);
	fuse_session_destroy(se);
	fuse_opt_free_args(&args);
	fs_cache_shutdown();
	fs_tree_shutdown();
	fs_disk_close();
	free(fs_opts.root);
	free(cache_dir);
	free(ca);
	free(mnt);
	for (i = 0; i < su.ncopies; i++)
		free(su.copies[i]);
	/* The loop returns the signal that ended it (SIGINT, SIGTERM,
	 * SIGHUP: fuse_set_signal_handlers()), a clean end as unmounting
	 * is; only -errno is a failure. */
	return rc >= 0 ? 0 : CLI_EXIT_FAILURE;
}

int
main(int argc, char **argv)
{
	cli_init("shardfs");
	started = time(NULL);
#ifdef HAVE_MALLOPT
	/* Fetched ranges of 2 MiB and more come and go in every size, and
	 * glibc's sliding mmap threshold soon moves them into its arenas,
	 * where freed ones stay resident: peak RSS went to 192 MiB where the
	 * man page's bound (Memory) was 158. A fixed threshold maps and
	 * unmaps them (the fetch engine's pool keeps those it reuses); 1 MiB
	 * blocks and FUSE reads stay in the heap. */
	mallopt(M_MMAP_THRESHOLD, 3 << 19);
	/* One arena: each FUSE thread that lists a large folder otherwise
	 * leaves the listing's parse behind in an arena of its own, and a
	 * mount of 100,000 names re-listed every second grew from 218 to
	 * 400 MiB (man page, Memory); with one it stays where the first
	 * listing left it, and small-file reads ran no slower here. */
	mallopt(M_ARENA_MAX, 1);
	/* The blocks small files come and go in (a fetched object, a
	 * thread's request buffer) were handed back to the kernel as the
	 * heap's top was freed and faulted in again for the next: 16 MiB
	 * free at the top are kept (RSS stays below its peak). */
	mallopt(M_TRIM_THRESHOLD, 16 << 20);
#endif
	return cmd_mount(argc, argv);
}
