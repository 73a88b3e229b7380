/*
 * disk.c - shardfs's disk cache: blocks of objects kept as files under
 * DIR/shardfs-cache-v1/XX/, each with a header that names the object (a
 * SHA-256 of its URL, version and size), the block's offset and length
 * and a CRC-32 of its bytes. A block is served only when all of it checks
 * out; one that does not is removed and fetched again. The files' bytes
 * never exceed the limit: room is made (oldest first) before a block is
 * written, and what a previous mount left is counted when it opens.
 *
 * Files are made fresh under names of our own (O_EXCL, O_NOFOLLOW, then
 * renamed into place) in folders this mount made or checked are ours, so
 * no symlink planted in the cache is ever followed.
 */
#include <sys/stat.h>
#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libdeflate.h>

#include "internal.h"
#include "cloud.h"
#include "shardfs.h"

#define TOP		"shardfs-cache-v1"
#define MAGIC		"SKFSBLK1"
#define NBUCKETS	65536u

/* A block file's header; all fields little-endian as written (the cache
 * is for this machine). */
struct hdr {
	char magic[8];
	uint64_t size;		/* the object's */
	uint64_t off;		/* the block's */
	uint32_t len;		/* bytes after the header */
	uint32_t crc;		/* CRC-32 of them */
	char key[64];		/* hex SHA-256 of url, version and size */
	uint32_t hcrc;		/* CRC-32 of the fields above */
	uint32_t pad;
};

struct entry {
	struct entry *hnext;
	struct entry *prev, *next;	/* oldest first */
	char key[65];
	uint64_t blk;
	uint64_t bytes;		/* the file's size */
	int writing;		/* being written: not there yet */
	uint64_t serial;	/* which file of this name it is */
};

static struct {
	pthread_mutex_t mu;
	int on;
	int top;		/* the cache folder, opened O_DIRECTORY */
	int sub[256];		/* its 256 subfolders */
	uint64_t max, bytes, files, serial;
	struct entry *index[NBUCKETS];
	struct entry *head, *tail;
} disk = { .mu = PTHREAD_MUTEX_INITIALIZER, .top = -1 };

int
fs_disk_enabled(void)
{
	return disk.on;
}

void
fs_disk_usage(uint64_t *bytes, uint64_t *files)
{
	pthread_mutex_lock(&disk.mu);
	*bytes = disk.bytes;
	*files = disk.files;
	pthread_mutex_unlock(&disk.mu);
}

void
fs_disk_key(const char *url, const char *version, uint64_t size,
    char key[65])
{
	char *s;

	s = sk__asprintf("%s\n%s\n%" PRIu64, url, version, size);
	if (s == NULL) {
		key[0] = '\0';
		return;
	}
	sk__sha256_hex(s, strlen(s), key);
	free(s);
}

static size_t
bucket(const char *key, uint64_t blk)
{
	uint64_t h = blk * 0x9e3779b97f4a7c15u;
	int i;

	for (i = 0; i < 16; i++)
		h = (h ^ (unsigned char)key[i]) * 1099511628211u;
	return (size_t)(h % NBUCKETS);
}

/* Caller holds mu. */
static struct entry *
lookup(const char *key, uint64_t blk)
{
	struct entry *e;

	for (e = disk.index[bucket(key, blk)]; e != NULL; e = e->hnext)
		if (e->blk == blk && strcmp(e->key, key) == 0)
			return e;
	return NULL;
}

static void
lru_unlink(struct entry *e)
{
	if (e->prev != NULL)
		e->prev->next = e->next;
	else
		disk.head = e->next;
	if (e->next != NULL)
		e->next->prev = e->prev;
	else
		disk.tail = e->prev;
	e->prev = e->next = NULL;
}

static void
lru_push(struct entry *e)
{
	e->prev = disk.tail;
	e->next = NULL;
	if (disk.tail != NULL)
		disk.tail->next = e;
	else
		disk.head = e;
	disk.tail = e;
}

static void
name_of(const struct entry *e, char *buf, size_t n)
{
	snprintf(buf, n, "%s-%016" PRIx64, e->key, e->blk);
}

static int
sub_of(const char *key)
{
	return (int)strtol((char[]){ key[0], key[1], 0 }, NULL, 16);
}

/* Forget e and remove its file; caller holds mu. */
static void
drop(struct entry *e)
{
	struct entry **pp;
	char name[96];

	for (pp = &disk.index[bucket(e->key, e->blk)]; *pp != NULL;
	    pp = &(*pp)->hnext)
		if (*pp == e) {
			*pp = e->hnext;
			break;
		}
	lru_unlink(e);
	name_of(e, name, sizeof name);
	if (!e->writing)
		unlinkat(disk.sub[sub_of(e->key)], name, 0);
	disk.bytes -= e->bytes;
	disk.files--;
	free(e);
}

/* Remove the oldest block no one is writing: 1, or 0 when none. Caller
 * holds mu. */
static int
evict_one(void)
{
	struct entry *e;

	for (e = disk.head; e != NULL && e->writing; e = e->next)
		;
	if (e == NULL)
		return 0;
	drop(e);
	FS_ADD(disk_evictions, 1);
	return 1;
}

static struct entry *
add(const char *key, uint64_t blk, uint64_t bytes)
{
	struct entry *e;
	size_t b = bucket(key, blk);

	if ((e = calloc(1, sizeof *e)) == NULL)
		return NULL;
	memcpy(e->key, key, 64);
	e->key[64] = '\0';
	e->blk = blk;
	e->bytes = bytes;
	e->serial = ++disk.serial;
	e->hnext = disk.index[b];
	disk.index[b] = e;
	lru_push(e);
	disk.bytes += bytes;
	disk.files++;
	return e;
}

/* ------------------------------------------------------------------------ */
/* opening: the folders, and what a previous mount left                     */

/* Open (making it 0700 if missing) the folder name under at, refusing
 * anything but a folder of ours: never a symlink. */
static int
own_dir(int at, const char *name, struct sk_error *err, const char *shown)
{
	struct stat st;
	int fd;

	if (mkdirat(at, name, 0700) != 0 && errno != EEXIST)
		return sk_error_set(err, SK_EIO, "%s: cannot make it: %s", shown,
		    strerror(errno));
	if ((fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC)) < 0) {
		int e = errno;

		/* O_DIRECTORY meets a symlink with ENOTDIR, not ELOOP */
		if (e == ELOOP || (e == ENOTDIR && fstatat(at, name, &st,
		    AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)))
			return sk_error_set(err, SK_EINVAL, "%s: a symlink; the "
			    "cache follows none", shown);
		return sk_error_set(err, e == ENOTDIR ? SK_EINVAL : SK_EIO,
		    "%s: %s", shown, e == ENOTDIR ? "not a folder" :
		    strerror(e));
	}
	if (fstat(fd, &st) != 0 || st.st_uid != geteuid()) {
		close(fd);
		return sk_error_set(err, SK_EACCES, "%s: not owned by this user; "
		    "the cache keeps to folders of its own", shown);
	}
	/* No one else may plant blocks in it. */
	if ((st.st_mode & 077) != 0 && fchmod(fd, 0700) != 0) {
		close(fd);
		return sk_error_set(err, SK_EACCES, "%s: others may write in it "
		    "and it cannot be made 0700: %s", shown, strerror(errno));
	}
	return fd;
}

static int
cmp_age(const void *a, const void *b)
{
	const struct { struct entry *e; int64_t t; } *x = a, *y = b;

	return x->t < y->t ? -1 : x->t > y->t;
}

/* Count every block file of subfolder i; leftovers of a crash go. */
static void
scan(int i, void **ages, size_t *n, size_t *cap)
{
	struct { struct entry *e; int64_t t; } *v = *ages;
	struct dirent *de;
	struct stat st;
	struct entry *e;
	uint64_t blk;
	char key[65], *end;
	DIR *d;
	int fd;

	if ((fd = dup(disk.sub[i])) < 0 || (d = fdopendir(fd)) == NULL) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.') {
			if (strncmp(de->d_name, ".tmp-", 5) == 0)
				unlinkat(disk.sub[i], de->d_name, 0);
			continue;
		}
		if (fstatat(disk.sub[i], de->d_name, &st,
		    AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
		    strlen(de->d_name) != 64 + 1 + 16 ||
		    de->d_name[64] != '-') {
			/* Not ours: removed, never followed. */
			unlinkat(disk.sub[i], de->d_name, 0);
			continue;
		}
		memcpy(key, de->d_name, 64);
		key[64] = '\0';
		blk = strtoull(de->d_name + 65, &end, 16);
		if (*end != '\0' || sub_of(key) != i || lookup(key, blk) ||
		    (e = add(key, blk, (uint64_t)st.st_size)) == NULL) {
			unlinkat(disk.sub[i], de->d_name, 0);
			continue;
		}
		if (*n == *cap) {
			size_t nc = *cap ? *cap * 2 : 1024;
			void *nv = realloc(v, nc * sizeof *v);

			if (nv == NULL)
				continue;
			v = nv;
			*cap = nc;
		}
		v[*n].e = e;
		v[*n].t = st.st_mtime;
		(*n)++;
	}
	closedir(d);
	*ages = v;
}

int
fs_disk_open(const char *dir, uint64_t max, struct sk_error *err)
{
	struct { struct entry *e; int64_t t; } *ages = NULL;
	size_t n = 0, cap = 0, i;
	char name[8], *shown;
	int root, rc = 0;

	if ((root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return sk_error_set(err, SK_EIO, "%s: %s", dir, strerror(errno));
	shown = sk__asprintf("%s/%s", dir, TOP);
	disk.top = shown ? own_dir(root, TOP, err, shown) : SK_ENOMEM;
	close(root);
	if (disk.top < 0) {
		rc = disk.top;
		disk.top = -1;
		free(shown);
		return rc;
	}
	for (i = 0; i < 256; i++)
		disk.sub[i] = -1;
	for (i = 0; i < 256 && rc == 0; i++) {
		snprintf(name, sizeof name, "%02zx", i);
		if ((disk.sub[i] = own_dir(disk.top, name, err, shown)) < 0) {
			rc = disk.sub[i];
			disk.sub[i] = -1;
		}
	}
	free(shown);
	if (rc != 0) {
		fs_disk_close();
		return rc;
	}
	disk.max = max;
	for (i = 0; i < 256; i++)
		scan((int)i, (void **)&ages, &n, &cap);
	/* Oldest first, as the files' times say; then trimmed to fit. */
	if (n > 0) {
		qsort(ages, n, sizeof *ages, cmp_age);
		for (i = 0; i < n; i++) {
			lru_unlink(ages[i].e);
			lru_push(ages[i].e);
		}
	}
	free(ages);
	while (disk.bytes > disk.max && evict_one())
		;
	disk.on = 1;
	return 0;
}

void
fs_disk_close(void)
{
	size_t i;

	pthread_mutex_lock(&disk.mu);
	disk.on = 0;
	for (i = 0; i < NBUCKETS; i++) {
		struct entry *e, *next;

		for (e = disk.index[i]; e != NULL; e = next) {
			next = e->hnext;
			free(e);
		}
		disk.index[i] = NULL;
	}
	disk.head = disk.tail = NULL;
	for (i = 0; i < 256; i++)
		if (disk.sub[i] >= 0) {
			close(disk.sub[i]);
			disk.sub[i] = -1;
		}
	if (disk.top >= 0)
		close(disk.top);
	disk.top = -1;
	pthread_mutex_unlock(&disk.mu);
}

/* ------------------------------------------------------------------------ */
/* blocks                                                                   */

static uint32_t
hdr_crc(const struct hdr *h)
{
	return (uint32_t)libdeflate_crc32(0, h, offsetof(struct hdr, hcrc));
}

int
fs_disk_has(const char *key, uint64_t off)
{
	struct entry *e;
	int there;

	if (!disk.on || key[0] == '\0')
		return 0;
	pthread_mutex_lock(&disk.mu);
	e = lookup(key, off / FS_BLOCK);
	there = e != NULL && !e->writing;
	pthread_mutex_unlock(&disk.mu);
	return there;
}

/* Read all of n bytes at fd's offset: 0, or -1. */
static int
read_all(int fd, void *buf, size_t n)
{
	ssize_t got;

	while (n > 0) {
		if ((got = read(fd, buf, n)) <= 0) {
			if (got < 0 && errno == EINTR)
				continue;
			return -1;
		}
		buf = (char *)buf + got;
		n -= (size_t)got;
	}
	return 0;
}

int
fs_disk_get(const char *key, const char *url, uint64_t size, uint64_t off,
    void *buf, size_t len)
{
	struct entry *e;
	struct hdr h;
	char name[96];
	uint64_t serial;
	int fd = -1, sub, ok = 0;

	if (!disk.on || key[0] == '\0')
		return 0;
	pthread_mutex_lock(&disk.mu);
	if ((e = lookup(key, off / FS_BLOCK)) == NULL || e->writing) {
		pthread_mutex_unlock(&disk.mu);
		return 0;
	}
	lru_unlink(e);
	lru_push(e);
	name_of(e, name, sizeof name);
	sub = disk.sub[sub_of(key)];
	serial = e->serial;
	pthread_mutex_unlock(&disk.mu);

	if ((fd = openat(sub, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) >= 0 &&
	    read_all(fd, &h, sizeof h) == 0 &&
	    memcmp(h.magic, MAGIC, 8) == 0 && h.hcrc == hdr_crc(&h) &&
	    h.size == size && h.off == off && h.len == len &&
	    memcmp(h.key, key, 64) == 0 && read_all(fd, buf, len) == 0 &&
	    (uint32_t)libdeflate_crc32(0, buf, len) == h.crc)
		ok = 1;
	if (fd >= 0)
		close(fd);
	if (ok)
		return 1;
	/* Torn, flipped or someone else's: never served. Counted once,
	 * by the reader that removes it: two may have read it at once, and
	 * the other may have put a sound block there since. */
	pthread_mutex_lock(&disk.mu);
	if ((e = lookup(key, off / FS_BLOCK)) != NULL && !e->writing &&
	    e->serial == serial) {
		drop(e);
		FS_ADD(disk_corrupt, 1);
		sk_log(SK_LOG_WARN, "disk cache: block %" PRIu64 " of %s "
		    "failed its check; it is fetched again", off / FS_BLOCK,
		    url);
	}
	pthread_mutex_unlock(&disk.mu);
	return 0;
}

/* Write all of n bytes: 0, or -1. */
static int
write_all(int fd, const void *buf, size_t n)
{
	ssize_t put;

	while (n > 0) {
		if ((put = write(fd, buf, n)) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		buf = (const char *)buf + put;
		n -= (size_t)put;
	}
	return 0;
}

void
fs_disk_put(const char *key, uint64_t size, uint64_t off, const void *buf,
    size_t len)
{
	static uint64_t seq;
	struct entry *e;
	struct hdr h;
	uint64_t bytes = sizeof h + len, blk = off / FS_BLOCK;
	char name[96], tmp[64];
	int fd, sub, ok;

	if (!disk.on || key[0] == '\0' || bytes > disk.max)
		return;
	pthread_mutex_lock(&disk.mu);
	if (lookup(key, blk) != NULL) {
		pthread_mutex_unlock(&disk.mu);
		return;
	}
	/* Room first: the limit holds while the file is written. */
	while (disk.bytes + bytes > disk.max && evict_one())
		;
	if (disk.bytes + bytes > disk.max ||
	    (e = add(key, blk, bytes)) == NULL) {
		pthread_mutex_unlock(&disk.mu);
		return;
	}
	e->writing = 1;
	name_of(e, name, sizeof name);
	sub = disk.sub[sub_of(key)];
	snprintf(tmp, sizeof tmp, ".tmp-%ld-%" PRIu64, (long)getpid(),
	    __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED));
	pthread_mutex_unlock(&disk.mu);

	memset(&h, 0, sizeof h);
	memcpy(h.magic, MAGIC, 8);
	h.size = size;
	h.off = off;
	h.len = (uint32_t)len;
	h.crc = (uint32_t)libdeflate_crc32(0, buf, len);
	memcpy(h.key, key, 64);
	h.hcrc = hdr_crc(&h);
	ok = (fd = openat(sub, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
	    O_CLOEXEC, 0600)) >= 0 && write_all(fd, &h, sizeof h) == 0 &&
	    write_all(fd, buf, len) == 0;
	if (fd >= 0 && close(fd) != 0)
		ok = 0;
	if (ok && renameat(sub, tmp, sub, name) != 0)
		ok = 0;
	if (!ok && fd >= 0)
		unlinkat(sub, tmp, 0);

	pthread_mutex_lock(&disk.mu);
	if ((e = lookup(key, blk)) != NULL && e->writing) {
		e->writing = 0;
		if (ok)
			FS_ADD(disk_writes, 1);
		else {
			/* Nothing there: forget it without unlinking the
			 * name (drop unlinks only written files). */
			e->writing = 1;
			drop(e);
		}
	}
	pthread_mutex_unlock(&disk.mu);
}
