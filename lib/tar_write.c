/*
 * tar_write.c - deterministic shard writing through libarchive: ustar
 * headers with fixed fields, PAX only where ustar cannot say it, bytes to
 * a temporary file renamed when the shard is complete (sk_atomic_open).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>
#include <openssl/evp.h>

#include "internal.h"

/*
 * The MD5 runs on its own thread, a few chunks behind the writes: it costs
 * more CPU than reading and writing the bytes together (~760 MB/s), and on
 * the writing thread it was the slowest stage of a pack.
 *
 * Ring: the writing thread fills chunk[head % HASH_SLOTS] and publishes it
 * by advancing head; the hash thread owns chunks from tail to head - 1 and
 * releases each by advancing tail. head, tail, len[] and stop are guarded
 * by mu; the bytes of a published chunk are read only by the hash thread.
 */
#define HASH_CHUNK (1u << 20)
#define HASH_SLOTS 4

struct hasher {
	pthread_t tid;
	int running;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint8_t *chunk[HASH_SLOTS];
	size_t len[HASH_SLOTS];
	size_t fill;			/* bytes in the chunk being filled */
	unsigned head, tail;
	int stop;			/* no more chunks will come */
	EVP_MD_CTX *md5;
};

struct sk_tar_writer {
	struct sk__handle h;
	struct archive *a;
	struct archive_entry *entry;	/* reused for every member */
	struct hasher hash;
	char *path;
	struct sk_atomic out;		/* the shard, under a temporary name */
	int opened;
	int64_t mtime;
	uint64_t bytes;			/* bytes that reached the file */
	uint64_t nmembers;
};

static void *
hash_main(void *arg)
{
	struct hasher *hs = arg;
	unsigned slot;

	pthread_mutex_lock(&hs->mu);
	for (;;) {
		while (hs->tail == hs->head && !hs->stop)
			pthread_cond_wait(&hs->cv, &hs->mu);
		if (hs->tail == hs->head)
			break;
		slot = hs->tail % HASH_SLOTS;
		pthread_mutex_unlock(&hs->mu);
		EVP_DigestUpdate(hs->md5, hs->chunk[slot], hs->len[slot]);
		pthread_mutex_lock(&hs->mu);
		hs->tail++;
		pthread_cond_broadcast(&hs->cv);
	}
	pthread_mutex_unlock(&hs->mu);
	return NULL;
}

static int
hash_start(struct hasher *hs)
{
	int i;

	pthread_mutex_init(&hs->mu, NULL);
	pthread_cond_init(&hs->cv, NULL);
	if ((hs->md5 = EVP_MD_CTX_new()) == NULL ||
	    EVP_DigestInit_ex(hs->md5, EVP_md5(), NULL) != 1)
		return SK_ENOMEM;
	for (i = 0; i < HASH_SLOTS; i++)
		if ((hs->chunk[i] = malloc(HASH_CHUNK)) == NULL)
			return SK_ENOMEM;
	if (pthread_create(&hs->tid, NULL, hash_main, hs) != 0)
		return SK_ENOMEM;
	hs->running = 1;
	return 0;
}

/* Hand the chunk being filled to the hash thread. */
static void
hash_publish(struct hasher *hs)
{
	pthread_mutex_lock(&hs->mu);
	hs->len[hs->head % HASH_SLOTS] = hs->fill;
	hs->head++;
	pthread_cond_broadcast(&hs->cv);
	/* Wait for a free chunk: the hash may lag by HASH_SLOTS - 1. */
	while (hs->head - hs->tail == HASH_SLOTS)
		pthread_cond_wait(&hs->cv, &hs->mu);
	pthread_mutex_unlock(&hs->mu);
	hs->fill = 0;
}

static void
hash_feed(struct hasher *hs, const uint8_t *p, size_t n)
{
	size_t k;

	while (n > 0) {
		k = HASH_CHUNK - hs->fill;
		if (k > n)
			k = n;
		memcpy(hs->chunk[hs->head % HASH_SLOTS] + hs->fill, p, k);
		hs->fill += k;
		p += k;
		n -= k;
		if (hs->fill == HASH_CHUNK)
			hash_publish(hs);
	}
}

/* Hash what is left and stop the thread. */
static void
hash_finish(struct hasher *hs)
{
	if (!hs->running)
		return;
	if (hs->fill > 0)
		hash_publish(hs);
	pthread_mutex_lock(&hs->mu);
	hs->stop = 1;
	pthread_cond_broadcast(&hs->cv);
	pthread_mutex_unlock(&hs->mu);
	pthread_join(hs->tid, NULL);
	hs->running = 0;
}

static void
hash_free(struct hasher *hs)
{
	int i;

	hash_finish(hs);
	for (i = 0; i < HASH_SLOTS; i++)
		free(hs->chunk[i]);
	if (hs->md5 != NULL)
		EVP_MD_CTX_free(hs->md5);
	pthread_mutex_destroy(&hs->mu);
	pthread_cond_destroy(&hs->cv);
}

/* libarchive's write callback: every byte of the shard passes here. */
static la_ssize_t
write_cb(struct archive *a, void *arg, const void *buf, size_t n)
{
	struct sk_tar_writer *w = arg;
	const char *p = buf;
	size_t left = n;
	ssize_t put;

	while (left > 0) {
		put = write(w->out.fd, p, left);
		if (put < 0 && errno == EINTR)
			continue;
		if (put < 0) {
			archive_set_error(a, errno, "%s: write at offset %llu: %s",
			    w->path, (unsigned long long)w->bytes,
			    strerror(errno));
			return -1;
		}
		hash_feed(&w->hash, (const uint8_t *)p, (size_t)put);
		w->bytes += (uint64_t)put;
		p += put;
		left -= (size_t)put;
	}
	return (la_ssize_t)n;
}

int
sk_source_date_epoch(int64_t *mtime)
{
	const char *s = getenv("SOURCE_DATE_EPOCH");
	long long v;
	char *end;

	/* reproducible-builds.org: unset or empty means no fixed date. */
	*mtime = 0;
	if (s == NULL || *s == '\0')
		return 0;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (*end != '\0' || errno != 0 || v < 0)
		return SK_EINVAL;
	*mtime = v;
	return 0;
}

static int64_t
default_mtime(void)
{
	int64_t v;

	if (sk_source_date_epoch(&v) != 0)
		sk_log(SK_LOG_WARN, "SOURCE_DATE_EPOCH=%s is not a timestamp; "
		    "using 0", getenv("SOURCE_DATE_EPOCH"));
	return v;
}

/* The errno behind the last libarchive failure, as an SK_E* code. */
static int
archive_code(struct archive *a)
{
	int e = archive_errno(a);

	return e > 0 ? sk_errno_code(e) : SK_EIO;
}

int
sk_tar_writer_open(sk_tar_writer **out, const char *path,
    const struct sk_tar_writer_opts *opts)
{
	struct sk_tar_writer *w;
	struct sk_error err;
	int rc;

	*out = NULL;
	if ((w = calloc(1, sizeof *w)) == NULL)
		return SK_ENOMEM;
	sk__handle_init(&w->h, SK__MAGIC_TAR_WRITER);
	*out = w;
	w->mtime = opts != NULL && opts->mtime >= 0 ? opts->mtime :
	    default_mtime();
	if ((w->path = strdup(path)) == NULL ||
	    (w->a = archive_write_new()) == NULL ||
	    (w->entry = archive_entry_new()) == NULL ||
	    hash_start(&w->hash) != 0)
		return sk__fatal(&w->h, SK_ENOMEM, "out of memory");
	/* Shards are bulk output: fsync only when asked (pack --fsync). */
	if ((rc = sk_atomic_open(&w->out, path, opts != NULL && opts->fsync ?
	    0 : SK_ATOMIC_NOSYNC, 0644, &err)) != 0)
		return sk__fatal(&w->h, rc, "%s", err.msg);
	w->opened = 1;
	/*
	 * pax_restricted is ustar until a name or size does not fit. Blocks
	 * of 10240 keep writes large; the last one is not padded, so a
	 * shard's size is exactly its members plus the 1024-byte end.
	 */
	if (archive_write_set_format_pax_restricted(w->a) != ARCHIVE_OK ||
	    archive_write_set_bytes_per_block(w->a, 10240) != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(w->a, 1) != ARCHIVE_OK ||
	    archive_write_open2(w->a, w, NULL, write_cb, NULL, NULL) !=
	    ARCHIVE_OK) {
		rc = sk__fatal(&w->h, archive_code(w->a), "%s: %s",
		    w->path, archive_error_string(w->a));
		sk_atomic_abort(&w->out);
		w->opened = 0;
		return rc;
	}
	return 0;
}

int
sk_tar_writer_add(sk_tar_writer *w, const char *name, const void *data,
    size_t size)
{
	struct archive_entry *e = w->entry;
	int rc;

	if ((rc = sk__check(&w->h, SK__MAGIC_TAR_WRITER, __func__)) != 0)
		return rc;
	if (name == NULL || *name == '\0' || name[0] == '/')
		return sk__fail(&w->h, SK_EINVAL,
		    "%s: bad member name '%s'", w->path, name ? name : "");
	/* The fixed header fields of DESIGN.md's shard contract. */
	archive_entry_clear(e);
	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0444);
	archive_entry_set_size(e, (la_int64_t)size);
	archive_entry_set_mtime(e, (time_t)w->mtime, 0);
	archive_entry_set_uid(e, 0);
	archive_entry_set_gid(e, 0);
	/* WARN: a name the locale cannot convert; libarchive stores its raw
	 * bytes (hdrcharset=BINARY), which is what the name was. */
	if (archive_write_header(w->a, e) < ARCHIVE_WARN ||
	    (size > 0 && archive_write_data(w->a, data, size) !=
	    (la_ssize_t)size))
		return sk__fatal(&w->h, archive_code(w->a), "%s: %s: %s",
		    w->path, name, archive_error_string(w->a));
	w->nmembers++;
	return 0;
}

uint64_t
sk_tar_writer_bytes(const sk_tar_writer *w)
{
	/* libarchive pads a member's data when the next header comes; count
	 * the padding now, so the answer is whole blocks. */
	return ((uint64_t)archive_filter_bytes(w->a, 0) + 511) & ~511ULL;
}

static void
writer_free(sk_tar_writer *w)
{
	if (w->a != NULL)
		archive_write_free(w->a);
	if (w->entry != NULL)
		archive_entry_free(w->entry);
	hash_free(&w->hash);
	if (w->opened)
		sk_atomic_abort(&w->out);
	free(w->path);
	w->h.magic = 0;
	free(w);
}

void
sk_tar_writer_abort(sk_tar_writer *w)
{
	if (w == NULL)
		return;
	writer_free(w);		/* removes the temporary file */
}

int
sk_tar_writer_close(sk_tar_writer *w, struct sk_shard_info *info,
    struct sk_error *err)
{
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int dlen = 0;
	int rc;

	if ((rc = sk__check(&w->h, SK__MAGIC_TAR_WRITER, __func__)) != 0) {
		sk_error_set(err, rc, "%s", rc == SK_EFATAL ? w->h.err.msg :
		    "invalid tar writer");
		if (rc == SK_EFATAL)
			sk_tar_writer_abort(w);
		return rc;
	}
	if (archive_write_close(w->a) != ARCHIVE_OK) {
		rc = sk_error_set(err, archive_code(w->a), "%s",
		    archive_error_string(w->a));
		goto fail;
	}
	/* Commit closes (which reports delayed write errors: NFS,
	 * quotas), renames, and removes the temporary file on failure. */
	w->opened = 0;
	if ((rc = sk_atomic_commit(&w->out, err)) != 0)
		goto out;
	if (info != NULL) {
		hash_finish(&w->hash);
		EVP_DigestFinal_ex(w->hash.md5, digest, &dlen);
		sk__md5_hex(digest, info->md5);
		info->filesize = w->bytes;
		info->nmembers = w->nmembers;
	}
	rc = 0;
	goto out;
fail:
	/* writer_free removes the temporary file */
out:
	writer_free(w);
	return rc;
}

static uint64_t
round512(uint64_t n)
{
	return (n + 511) & ~(uint64_t)511;
}

/* ustar holds a name of up to 100 bytes, or one split at a '/' into a
 * prefix of up to 155 and a name of up to 100 (POSIX.1-1988). */
static int
ustar_name_fits(const char *name, size_t len)
{
	const char *slash;

	if (len <= 100)
		return 1;
	for (slash = strchr(name, '/'); slash != NULL;
	    slash = strchr(slash + 1, '/'))
		if ((size_t)(slash - name) <= 155 &&
		    len - (size_t)(slash - name) - 1 <= 100 &&
		    slash[1] != '\0')
			return 1;
	return 0;
}

uint64_t
sk_tar_member_bytes(const char *name, uint64_t size)
{
	uint64_t n = 512 + round512(size);
	size_t len = strlen(name), i;
	int pax = !ustar_name_fits(name, len) || size >= 077777777777ULL;

	for (i = 0; i < len && !pax; i++)
		pax = (unsigned char)name[i] >= 0x80;
	/* A PAX header: its own ustar block and records (path, size). */
	if (pax)
		n += 512 + round512(2 * len + 128);
	return n;
}
