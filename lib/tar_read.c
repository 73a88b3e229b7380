/*
 * tar_read.c - reading shards through libarchive from any source: ustar,
 * GNU and PAX (the webdataset ShardWriter writes PAX for every member),
 * plain or compressed with gzip or zstd. Damage is reported with the URL
 * and the offset.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <archive.h>
#include <archive_entry.h>

#include "internal.h"

#define READ_BUF (1u << 20)

/* libarchive may fail without a message (EOF inside a header). */
#define AERR(a) (archive_error_string(a) ? archive_error_string(a) : \
    "truncated tar archive")

struct sk_tar_reader {
	struct sk__handle h;
	struct archive *a;
	sk_source *src;
	int flags;
	int gzip, zstd;		/* whether each filter is on (in-process) */
	unsigned char *buf;
	uint64_t next_header;	/* where the next header should start */
	uint64_t member_offset;	/* header offset of the current member */
	uint64_t data_offset;	/* of the current member */
	uint64_t data_read;	/* of the current member, so far */
	uint64_t data_size;	/* of the current member, as its header says */
	uint64_t skipped;
	int src_rc;		/* the source's failure: not the tar's damage */
};

/* A read that failed in the source (the network, after its retries) is
 * the source's error, not damage in the shard: say so with its code. */
#define SOURCE_FAILED(r) ((r)->src_rc != 0 ? sk__fatal(&(r)->h, (r)->src_rc, \
    "%s", sk_errmsg((r)->src)) : 0)

static la_ssize_t
read_cb(struct archive *a, void *arg, const void **out)
{
	struct sk_tar_reader *r = arg;
	const void *ptr;
	int64_t got;

	/* A remote source lends its part buffer: libarchive needs it only
	 * until its next read (one copy fewer per byte). */
	got = sk__source_read_ptr(r->src, &ptr, r->buf, READ_BUF);
	if (got < 0) {
		r->src_rc = (int)got;
		archive_set_error(a, -1, "%s", sk_errmsg(r->src));
		return -1;
	}
	*out = ptr;
	return (la_ssize_t)got;
}

/* Skipping member data is a seek: ls and index need no data bytes. */
static la_int64_t
skip_cb(struct archive *a, void *arg, la_int64_t request)
{
	struct sk_tar_reader *r = arg;
	uint64_t size;

	if (sk_source_size(r->src, &size) != 0 || r->src->pos >= size)
		return 0;
	if ((uint64_t)request > size - r->src->pos)
		request = (la_int64_t)(size - r->src->pos);
	if (sk_source_seek(r->src, r->src->pos + (uint64_t)request) != 0)
		return 0;
	return request;
}

/*
 * Turn on one of the filters libarchive can run in-process. A support call
 * returns ARCHIVE_WARN when this libarchive was built without the codec
 * and would fork an external program (gzip -d, zstd -d) from $PATH on the
 * bytes instead; a filter cannot be taken back once added, so try it on a
 * scratch handle first. Every other filter (lrzip, lzop, grzip, lzip, ...)
 * runs a program whatever the build, and none of them is ever turned on:
 * shards are untrusted input.
 */
static int
add_filter(struct archive *a, int (*support)(struct archive *))
{
	struct archive *probe;
	int rc;

	if ((probe = archive_read_new()) == NULL)
		return 0;
	rc = support(probe);
	archive_read_free(probe);
	return rc == ARCHIVE_OK && support(a) == ARCHIVE_OK;
}

/* Compressed or encoded data the tar format did not recognize: named, so
 * the message says why. Sniffed only after libarchive gave up, so a tar
 * whose first name happens to start with "BZh" or "LZIP" is still read. */
enum { NO_FILTER, GZIP, ZSTD };

static const struct {
	const char *what;
	size_t len;
	const char *magic;
	int filter;		/* read in-process when that filter is on */
} magics[] = {
	{ "gzip-compressed data", 2, "\x1f\x8b", GZIP },
	{ "zstd-compressed data", 4, "\x28\xb5\x2f\xfd", ZSTD },
	{ "bzip2-compressed data", 3, "BZh", NO_FILTER },
	{ "xz-compressed data", 6, "\xfd" "7zXZ\0", NO_FILTER },
	{ "lz4-compressed data", 4, "\x04\x22\x4d\x18", NO_FILTER },
	{ "lz4-compressed data", 4, "\x02\x21\x4c\x18", NO_FILTER },
	{ "lzop-compressed data", 9, "\x89" "LZO\0\r\n\x1a\n", NO_FILTER },
	{ "lrzip-compressed data", 4, "LRZI", NO_FILTER },
	{ "grzip-compressed data", 8, "GRZipII\0", NO_FILTER },
	{ "lzip-compressed data", 4, "LZIP", NO_FILTER },
	{ "compress (.Z) data", 2, "\x1f\x9d", NO_FILTER },
	{ "uuencoded data", 6, "begin ", NO_FILTER },
	{ "an RPM package", 4, "\xed\xab\xee\xdb", NO_FILTER },
	{ "lzma-compressed data", 3, "\x5d\0\0", NO_FILTER },
};

static int
open_failed(struct sk_tar_reader *r)
{
	unsigned char head[16];
	int64_t got;
	size_t i;

	if (r->src_rc != 0)
		return SOURCE_FAILED(r);
	got = sk_source_pread(r->src, head, sizeof head, 0);
	for (i = 0; got > 0 && i < sizeof magics / sizeof magics[0]; i++) {
		if ((size_t)got < magics[i].len ||
		    memcmp(head, magics[i].magic, magics[i].len) != 0)
			continue;
		if ((magics[i].filter == GZIP && r->gzip) ||
		    (magics[i].filter == ZSTD && r->zstd))
			break;	/* compressed, but no tar inside */
		if (magics[i].filter != NO_FILTER)
			return sk__fatal(&r->h, SK_EFORMAT, "%s: offset 0: "
			    "not a tar archive (%s needs a libarchive built "
			    "with %s; this one would run an external program)",
			    r->src->url, magics[i].what,
			    magics[i].filter == GZIP ? "zlib" : "libzstd");
		return sk__fatal(&r->h, SK_EFORMAT, "%s: offset 0: not a tar "
		    "archive (%s is not supported; shards may be plain, gzip "
		    "or zstd)", r->src->url, magics[i].what);
	}
	return sk__fatal(&r->h, SK_EFORMAT, "%s: offset 0: %s", r->src->url,
	    AERR(r->a));
}

int
sk_tar_reader_open(sk_tar_reader **out, sk_source *src, int flags)
{
	struct sk_tar_reader *r;
	uint64_t size;

	*out = NULL;
	if ((r = calloc(1, sizeof *r)) == NULL) {
		sk_source_close(src);
		return SK_ENOMEM;
	}
	sk__handle_init(&r->h, SK__MAGIC_TAR_READER);
	*out = r;
	r->src = src;
	r->flags = flags;
	if (src == NULL || src->h.magic != SK__MAGIC_SOURCE)
		return sk__fatal(&r->h, SK_EINVAL, "no source");
	if (src->h.state == SK__STATE_FATAL)
		return sk__fatal(&r->h, src->h.err.code, "%s", src->h.err.msg);
	if (sk_source_size(src, &size) == 0 && size == 0)
		return sk__fatal(&r->h, SK_EFORMAT,
		    "%s: empty file, not a tar archive", src->url);
	if ((r->buf = malloc(READ_BUF)) == NULL ||
	    (r->a = archive_read_new()) == NULL)
		return sk__fatal(&r->h, SK_ENOMEM, "out of memory");
	archive_read_support_format_tar(r->a);
	r->gzip = add_filter(r->a, archive_read_support_filter_gzip);
	r->zstd = add_filter(r->a, archive_read_support_filter_zstd);
	archive_read_set_callback_data(r->a, r);
	archive_read_set_read_callback(r->a, read_cb);
	archive_read_set_skip_callback(r->a, skip_cb);
	if (archive_read_open1(r->a) != ARCHIVE_OK)
		return open_failed(r);
	return 0;
}

/* WebDataset metadata members: a key like "__key__" or "__index__". */
static int
is_metadata(const char *name)
{
	const char *ext, *base = strrchr(name, '/');
	size_t n;

	base = base ? base + 1 : name;
	n = sk_key_split(base, &ext);
	return n >= 4 && strncmp(base, "__", 2) == 0 &&
	    strncmp(base + n - 2, "__", 2) == 0;
}

static enum sk_tar_type
entry_type(struct archive_entry *e)
{
	if (archive_entry_hardlink(e) != NULL)
		return SK_TAR_HARDLINK;
	switch (archive_entry_filetype(e)) {
	case AE_IFREG:	return SK_TAR_FILE;
	case AE_IFDIR:	return SK_TAR_DIR;
	case AE_IFLNK:	return SK_TAR_SYMLINK;
	}
	return SK_TAR_OTHER;
}

/* Name where the damage is: past the end of the file means the last
 * member's data was cut short, not that a header is bad. */
static int
header_damage(struct sk_tar_reader *r)
{
	uint64_t size;

	if (r->src_rc != 0)
		return SOURCE_FAILED(r);
	if (sk_source_size(r->src, &size) == 0 && r->next_header > size)
		return sk__fatal(&r->h, SK_EFORMAT, "%s: offset %llu: "
		    "truncated: the file ends inside the data of the member "
		    "at offset %llu", r->src->url, (unsigned long long)size,
		    (unsigned long long)r->member_offset);
	return sk__fatal(&r->h, SK_EFORMAT, "%s: offset %llu: %s",
	    r->src->url, (unsigned long long)r->next_header, AERR(r->a));
}

/*
 * POSIX ends a tar with two zero blocks, and every writer we know adds
 * them. libarchive takes a file that stops right after a member, or a
 * single zero block, as a clean end; either way members can be lost with
 * no error (a header zeroed on disk, shards concatenated). So check the
 * end ourselves: something must follow the last member, and all of it
 * must be zeros (writers pad to their record size). Compressed input has
 * no such boundary to check.
 */
static int
end_check(struct sk_tar_reader *r)
{
	uint64_t size, off;
	int64_t got, i;

	if (archive_filter_count(r->a) > 1 ||
	    sk_source_size(r->src, &size) != 0)
		return 0;
	if (r->next_header > 0 && size <= r->next_header)
		return sk__fatal(&r->h, SK_EFORMAT, "%s: offset %llu: "
		    "truncated: no end-of-archive blocks after the last member",
		    r->src->url, (unsigned long long)size);
	for (off = r->next_header; off < size; off += (uint64_t)got) {
		got = sk_source_pread(r->src, r->buf, READ_BUF, off);
		if (got <= 0)
			return got < 0 ? sk__fatal(&r->h, (int)got, "%s",
			    sk_errmsg(r->src)) : 0;
		for (i = 0; i < got; i++)
			if (r->buf[i] != 0)
				return sk__fatal(&r->h, SK_EFORMAT, "%s: offset "
				    "%llu: data after an end-of-archive block "
				    "(a zeroed header, or tars joined end to end)",
				    r->src->url, (unsigned long long)
				    ((off + (uint64_t)i) & ~511ULL));
	}
	return 0;
}

/*
 * A header may claim any size (PAX: any decimal). In a plain tar the data
 * follows the header, so a member that claims more than the file still
 * holds is damage now, not an allocation or a long skip later; this also
 * catches a truncated file at the member it cuts. Compressed input has no
 * such bound: readers grow their buffers with the data that arrives.
 */
static int
size_check(struct sk_tar_reader *r, const struct sk_tar_member *m)
{
	uint64_t size, left;
	char name[128];
	size_t i;

	if (archive_filter_count(r->a) > 1 ||
	    sk_source_size(r->src, &size) != 0)
		return 0;
	left = m->data_offset < size ? size - m->data_offset : 0;
	if (m->size <= left)
		return 0;
	/* The name is the shard's to choose: no control bytes to a terminal. */
	snprintf(name, sizeof name, "%s", m->name);
	for (i = 0; name[i] != '\0'; i++)
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
			name[i] = '?';
	return sk__fatal(&r->h, SK_EFORMAT, "%s: offset %llu: member %s "
	    "claims %llu bytes, but the file has %llu bytes left",
	    r->src->url, (unsigned long long)m->header_offset, name,
	    (unsigned long long)m->size, (unsigned long long)left);
}

int
sk_tar_reader_next(sk_tar_reader *r, struct sk_tar_member *m)
{
	struct archive_entry *e;
	const char *name;
	int rc;

	if ((rc = sk__check(&r->h, SK__MAGIC_TAR_READER, __func__)) != 0)
		return rc;
	for (;;) {
		/* A skipped entry's strings die with the next header: a
		 * failure must not leave them in m (only a member refused for
		 * its size is left there, by size_check). */
		memset(m, 0, sizeof *m);
		rc = archive_read_next_header(r->a, &e);
		if (rc == ARCHIVE_EOF)
			return end_check(r);
		/* RETRY is a damaged header (bad checksum); libarchive would
		 * resync past it on the next call and lose members quietly. */
		if (rc < ARCHIVE_WARN || rc == ARCHIVE_RETRY)
			return header_damage(r);
		name = archive_entry_pathname(e);
		if (name == NULL)
			name = archive_entry_pathname_utf8(e);
		if (name == NULL)
			name = "";
		m->name = name;
		m->type = entry_type(e);
		m->linkname = m->type == SK_TAR_HARDLINK ?
		    archive_entry_hardlink(e) : archive_entry_symlink(e);
		m->size = archive_entry_size_is_set(e) ?
		    (uint64_t)archive_entry_size(e) : 0;
		m->header_offset = (uint64_t)archive_read_header_position(r->a);
		m->data_offset = (uint64_t)archive_filter_bytes(r->a, 0);
		r->data_offset = m->data_offset;
		r->member_offset = m->header_offset;
		r->data_read = 0;
		r->data_size = m->size;
		if ((rc = size_check(r, m)) != 0)
			return rc;
		r->next_header = m->data_offset + ((m->size + 511) & ~511ULL);
		if ((r->flags & SK_TAR_ALL_ENTRIES) ||
		    (m->type == SK_TAR_FILE && !is_metadata(name)))
			return 1;
		r->skipped++;
	}
}

/* libarchive failed inside the current member's data: the source's
 * failure, or damage at the offset reached. */
static int
data_damage(struct sk_tar_reader *r)
{
	if (r->src_rc != 0)
		return SOURCE_FAILED(r);
	return sk__fatal(&r->h, SK_EFORMAT, "%s: offset %llu: %s",
	    r->src->url, (unsigned long long)(r->data_offset + r->data_read),
	    AERR(r->a));
}

/* libarchive may end a member early without an error (a garbage old-GNU
 * sparse map in a plain file's header): callers are owed the size the
 * header gave, or damage. */
static int
ended_early(struct sk_tar_reader *r)
{
	return sk__fatal(&r->h, SK_EFORMAT, "%s: offset %llu: the member at "
	    "offset %llu ends after %llu of its %llu bytes", r->src->url,
	    (unsigned long long)(r->data_offset + r->data_read),
	    (unsigned long long)r->member_offset,
	    (unsigned long long)r->data_read,
	    (unsigned long long)r->data_size);
}

int64_t
sk_tar_reader_read(sk_tar_reader *r, void *buf, size_t n)
{
	la_ssize_t got;
	int rc;

	if ((rc = sk__check(&r->h, SK__MAGIC_TAR_READER, __func__)) != 0)
		return rc;
	got = archive_read_data(r->a, buf, n);
	if (got < 0)
		return data_damage(r);
	if (got == 0 && n > 0 && r->data_read < r->data_size)
		return ended_early(r);
	r->data_read += (uint64_t)got;
	return got;
}

/*
 * Read the rest of the current member's data without keeping it: the
 * bytes pass through libarchive's read-ahead (a remote source's own part
 * buffer, lent) and are never copied, with the damage checks of a read.
 * For the loader's --no-decode, which reads and splits but keeps no
 * pixels.
 */
int64_t
sk__tar_reader_scan(sk_tar_reader *r)
{
	const void *buf;
	size_t len;
	la_int64_t off;
	uint64_t start;
	int rc;

	if ((rc = sk__check(&r->h, SK__MAGIC_TAR_READER, __func__)) != 0)
		return rc;
	start = r->data_read;
	for (;;) {
		rc = archive_read_data_block(r->a, &buf, &len, &off);
		if (rc == ARCHIVE_EOF)
			break;
		if (rc < ARCHIVE_WARN)
			return data_damage(r);
		/* A sparse member's blocks skip its holes. */
		if (off >= 0 && (uint64_t)off + len > r->data_read)
			r->data_read = (uint64_t)off + len;
	}
	if (r->data_read < r->data_size)
		return ended_early(r);
	return (int64_t)(r->data_read - start);
}

uint64_t
sk_tar_reader_skipped(const sk_tar_reader *r)
{
	return r->skipped;
}

void
sk_tar_reader_close(sk_tar_reader *r)
{
	if (r == NULL)
		return;
	if (r->a != NULL)
		archive_read_free(r->a);
	sk_source_close(r->src);
	free(r->buf);
	r->h.magic = 0;
	free(r);
}

int
sk_tar_reader_compressed(const sk_tar_reader *r)
{
	return r->a != NULL && archive_filter_count(r->a) > 1;
}
