/*
 * test_tar.c - tar shards: the writer's atomic rename, size/MD5 report and
 * fixed ustar header fields; the reader on our own, GNU and PAX tars, and
 * on truncated, corrupt, garbage and empty files.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* memmem */
#endif

#include <sys/stat.h>

#include <dirent.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */

struct member {
	const char *name;
	const uint8_t *data;
	size_t size;
};

/* Deterministic bytes that differ between seeds and offsets. */
static uint8_t *
make_data(size_t n, unsigned seed)
{
	uint8_t *p = malloc(n ? n : 1);
	uint32_t x = seed * 2654435761u + 1;
	size_t i;

	CHECK(p != NULL);
	for (i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		p[i] = (uint8_t)(x >> 16);
	}
	return (p);
}

static int
exists(const char *path)
{
	struct stat st;

	return (lstat(path, &st) == 0);
}

/* How many temporary files of the atomic writer sit beside path
 * (".BASE.XXXXXXXX.part"). */
static int
parts(const char *path)
{
	const char *slash = strrchr(path, '/');
	char dir[4096], prefix[512];
	struct dirent *d;
	DIR *dp;
	int n = 0;

	snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1,
	    slash ? path : ".");
	snprintf(prefix, sizeof prefix, ".%s.", slash ? slash + 1 : path);
	if ((dp = opendir(dir)) == NULL)
		return -1;
	while ((d = readdir(dp)) != NULL)
		if (strncmp(d->d_name, prefix, strlen(prefix)) == 0 &&
		    strlen(d->d_name) > 5 && strcmp(d->d_name +
		    strlen(d->d_name) - 5, ".part") == 0)
			n++;
	closedir(dp);
	return n;
}

static uint64_t
file_size(const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0)
		t_fail(__FILE__, __LINE__, "stat %s failed", path);
	return ((uint64_t)st.st_size);
}

static void
md5_file(const char *path, char out[33])
{
	char cmd[4300], line[128];
	FILE *p;

	snprintf(cmd, sizeof cmd, "md5sum '%s'", path);
	fflush(stdout);
	if ((p = popen(cmd, "r")) == NULL || fgets(line, sizeof line, p) ==
	    NULL)
		t_fail(__FILE__, __LINE__, "%s failed", cmd);
	pclose(p);
	CHECK(strlen(line) > 32 && line[32] == ' ');
	memcpy(out, line, 32);
	out[32] = '\0';
}

/* An octal header field (NUL- or space-terminated, maybe space-padded). */
static uint64_t
octal(const uint8_t *p, size_t n)
{
	uint64_t v = 0;
	size_t i = 0;

	while (i < n && p[i] == ' ')
		i++;
	for (; i < n && p[i] >= '0' && p[i] <= '7'; i++)
		v = v * 8 + (uint64_t)(p[i] - '0');
	return (v);
}

static int
header_sum_ok(const uint8_t *h)
{
	uint64_t sum = 0;
	int i;

	for (i = 0; i < 512; i++)
		sum += (i >= 148 && i < 156) ? ' ' : h[i];
	return (sum == octal(h + 148, 8));
}

static int
zero_block(const uint8_t *h)
{
	int i;

	for (i = 0; i < 512; i++)
		if (h[i] != 0)
			return (0);
	return (1);
}

static uint64_t
round512(uint64_t n)
{
	return ((n + 511) & ~(uint64_t)511);
}

/*
 * Write members to path and check the atomic-rename protocol and the
 * shard info. With accounting, also check sk_tar_writer_bytes() and that
 * each member grows the shard by at most sk_tar_member_bytes().
 */
static void
write_shard_at(int line, const char *path,
    const struct sk_tar_writer_opts *opts, const struct member *mv, size_t n,
    struct sk_shard_info *info, int accounting)
{
	struct sk_error err = { 0 };
	struct sk_shard_info local;
	sk_tar_writer *w;
	uint64_t before, after, bound = 0, size;
	uint8_t *buf;
	size_t i, len;
	int existed;

	existed = exists(path);
	CHECK_OK(sk_tar_writer_open(&w, path, opts), w);
	if (parts(path) != 1 || (!existed && exists(path)))
		t_fail(__FILE__, line, "%s: no .part while writing", path);
	if (accounting)
		CHECK_EQ_INT(sk_tar_writer_bytes(w), 0);
	for (i = 0; i < n; i++) {
		before = sk_tar_writer_bytes(w);
		CHECK_OK(sk_tar_writer_add(w, mv[i].name, mv[i].data,
		    mv[i].size), w);
		after = sk_tar_writer_bytes(w);
		bound += sk_tar_member_bytes(mv[i].name, mv[i].size);
		if (!accounting)
			continue;
		if (after < before || after - before >
		    sk_tar_member_bytes(mv[i].name, mv[i].size))
			t_fail(__FILE__, line, "member %s (%zu bytes) added "
			    "%ju bytes; sk_tar_member_bytes says at most %ju",
			    mv[i].name, mv[i].size,
			    (uintmax_t)(after - before),
			    (uintmax_t)sk_tar_member_bytes(mv[i].name,
			    mv[i].size));
		/* "headers and padding included" */
		if (after % 512 != 0)
			t_fail(__FILE__, line, "after member %s (%zu bytes) "
			    "sk_tar_writer_bytes = %ju, not whole blocks",
			    mv[i].name, mv[i].size, (uintmax_t)after);
	}
	before = sk_tar_writer_bytes(w);
	if (parts(path) != 1 || (!existed && exists(path)))
		t_fail(__FILE__, line, "%s: no .part while writing", path);
	if (info == NULL && accounting)
		info = &local;
	CHECK_OK(sk_tar_writer_close(w, info, &err), &err);
	if (!exists(path) || parts(path) != 0)
		t_fail(__FILE__, line, "%s: after close: final %s, .part %s",
		    path, exists(path) ? "exists" : "missing",
		    parts(path) != 0 ? "left" : "gone");
	size = file_size(path);
	if (size % 512 != 0 || size > bound + SK_TAR_TRAILER_BYTES)
		t_fail(__FILE__, line, "%s: %ju bytes; the members' bound is "
		    "%ju + %d", path, (uintmax_t)size, (uintmax_t)bound,
		    SK_TAR_TRAILER_BYTES);
	/* It ends with the two zero blocks of a tar. */
	buf = t_read_file(path, &len);
	CHECK(len >= 1024 && zero_block(buf + len - 1024) &&
	    zero_block(buf + len - 512));
	free(buf);
	/* The end is exactly the trailer: no record padding beyond it. */
	if (accounting && size != before + SK_TAR_TRAILER_BYTES)
		t_fail(__FILE__, line, "%s: %ju bytes, but sk_tar_writer_bytes "
		    "said %ju before the %d-byte trailer", path,
		    (uintmax_t)size, (uintmax_t)before, SK_TAR_TRAILER_BYTES);
	if (info != NULL) {
		CHECK_EQ_INT(info->filesize, size);
		CHECK_EQ_INT(info->nmembers, n);
	}
}

#define write_shard(path, opts, mv, n, info) \
	write_shard_at(__LINE__, (path), (opts), (mv), (n), (info), 0)
#define write_shard_accounted(path, opts, mv, n, info) \
	write_shard_at(__LINE__, (path), (opts), (mv), (n), (info), 1)

static sk_tar_reader *
open_reader(const char *url, int flags)
{
	sk_source *s;
	sk_tar_reader *r;

	CHECK_OK(sk_source_open(&s, url), s);
	CHECK_OK(sk_tar_reader_open(&r, s, flags), r);
	return (r);
}

/* Read the current member's data in odd-sized chunks; NUL-terminated. */
static uint8_t *
read_member(sk_tar_reader *r, size_t *len)
{
	uint8_t *buf = NULL;
	size_t n = 0, cap = 0;
	int64_t got;

	for (;;) {
		if (cap - n < 777) {
			cap = cap ? 2 * cap : 4096;
			CHECK((buf = realloc(buf, cap + 1)) != NULL);
		}
		got = CHECK_OK(sk_tar_reader_read(r, buf + n, 777), r);
		if (got == 0)
			break;
		n += (size_t)got;
	}
	buf[n] = '\0';
	*len = n;
	return (buf);
}

/* Expect the next member to be name with data; check its offsets. */
static void
expect_member(int line, sk_tar_reader *r, const char *raw, const char *name,
    const uint8_t *data, size_t size, struct sk_tar_member *mout)
{
	struct sk_tar_member m;
	uint8_t *got, *at;
	size_t len;
	FILE *f;
	int rc;

	memset(&m, 0, sizeof m);
	if ((rc = sk_tar_reader_next(r, &m)) != 1)
		t_fail(__FILE__, line, "sk_tar_reader_next = %d, want member "
		    "%s: %s", rc, name, sk_errmsg(r));
	if (m.name == NULL || strcmp(m.name, name) != 0)
		t_fail(__FILE__, line, "member name \"%s\", want \"%s\"",
		    m.name ? m.name : "(null)", name);
	if (m.type != SK_TAR_FILE)
		t_fail(__FILE__, line, "%s: type %d, want SK_TAR_FILE", name,
		    (int)m.type);
	if (m.size != size)
		t_fail(__FILE__, line, "%s: size %ju, want %zu", name,
		    (uintmax_t)m.size, size);
	if (m.header_offset % 512 != 0 || m.data_offset % 512 != 0 ||
	    m.data_offset < m.header_offset + 512)
		t_fail(__FILE__, line, "%s: header_offset %ju, data_offset %ju",
		    name, (uintmax_t)m.header_offset,
		    (uintmax_t)m.data_offset);
	if (mout != NULL)
		*mout = m;
	got = read_member(r, &len);
	if (len != size || memcmp(got, data, size) != 0)
		t_fail(__FILE__, line, "%s: data differs (%zu bytes read, want "
		    "%zu)", name, len, size);
	free(got);

	/* data_offset points at the data in the file itself. */
	if (raw != NULL && size > 0) {
		CHECK((at = malloc(size)) != NULL);
		CHECK((f = fopen(raw, "rb")) != NULL);
		CHECK(fseek(f, (long)m.data_offset, SEEK_SET) == 0);
		CHECK(fread(at, 1, size, f) == size);
		fclose(f);
		if (memcmp(at, data, size) != 0)
			t_fail(__FILE__, line, "%s: bytes at data_offset %ju "
			    "are not its data", name,
			    (uintmax_t)m.data_offset);
		free(at);
	}
}

static void
expect_end(int line, sk_tar_reader *r)
{
	struct sk_tar_member m;
	int rc;

	if ((rc = sk_tar_reader_next(r, &m)) != 0)
		t_fail(__FILE__, line, "sk_tar_reader_next = %d at the end, "
		    "want 0 (name %s): %s", rc, rc == 1 ? m.name : "-",
		    sk_errmsg(r));
}

/*
 * Read everything; return the first error (< 0) or 0 at a clean end, with
 * the number of members seen. The message goes to msg.
 */
static int
drain(sk_tar_reader *r, int *nmembers, char *msg, size_t msgsize)
{
	struct sk_tar_member m;
	uint8_t buf[1000];
	int64_t got;
	int rc;

	*nmembers = 0;
	msg[0] = '\0';
	for (;;) {
		rc = sk_tar_reader_next(r, &m);
		if (rc <= 0)
			break;
		(*nmembers)++;
		while ((got = sk_tar_reader_read(r, buf, sizeof buf)) > 0)
			;
		if (got < 0) {
			rc = (int)got;
			break;
		}
	}
	if (rc < 0)
		snprintf(msg, msgsize, "%s", sk_errmsg(r));
	return (rc);
}

/* ------------------------------------------------------------------------ */
/* writer                                                                   */

TEST(tar_write_basic)
{
	uint8_t *a = make_data(1000, 1), *b = make_data(513, 2);
	struct member mv[] = {
		{ "k1.jpg", a, 1000 },
		{ "k1.cls", (const uint8_t *)"3", 1 },
		{ "k2.jpg", b, 513 },
	};
	struct sk_shard_info info;
	char md5[33];
	size_t len;
	uint8_t *x;

	memset(&info, 0xff, sizeof info);
	write_shard_accounted(t_path("s-000000.tar"), NULL, mv, 3, &info);
	md5_file(t_path("s-000000.tar"), md5);
	CHECK_EQ_STR(info.md5, md5);

	/* GNU tar reads it back. */
	t_system("mkdir x && tar -xf s-000000.tar -C x");
	x = t_read_file("x/k1.jpg", &len);
	CHECK_EQ_INT(len, 1000);
	CHECK_MEM_EQ(x, a, 1000);
	free(x);
	x = t_read_file("x/k1.cls", &len);
	CHECK_EQ_STR((char *)x, "3");
	free(x);
	x = t_read_file("x/k2.jpg", &len);
	CHECK_EQ_INT(len, 513);
	CHECK_MEM_EQ(x, b, 513);
	free(x);
	free(a);
	free(b);
}

TEST(tar_write_info_null_and_empty)
{
	uint8_t *a = make_data(512, 3);
	struct member mv[] = {
		{ "e.cls", (const uint8_t *)"", 0 },
		{ "f.bin", a, 512 },
	};
	struct sk_shard_info info;
	char md5[33];

	write_shard(t_path("a.tar"), NULL, mv, 2, NULL);
	/* A shard with no members is a valid (empty) tar. */
	write_shard(t_path("empty.tar"), NULL, mv, 0, &info);
	CHECK_EQ_INT(info.filesize, SK_TAR_TRAILER_BYTES);
	CHECK_EQ_INT(info.nmembers, 0);
	md5_file(t_path("empty.tar"), md5);
	CHECK_EQ_STR(info.md5, md5);
	t_system("tar -tf empty.tar >/dev/null");
	free(a);
}

TEST(tar_write_deterministic)
{
	uint8_t *a = make_data(3000, 4);
	struct member mv[] = {
		{ "n01/img_0001.jpg", a, 3000 },
		{ "n01/img_0001.cls", (const uint8_t *)"17", 2 },
		{ "n01/img_0001.json", (const uint8_t *)"{\"a\":1}", 7 },
	};
	struct sk_shard_info i1, i2;
	uint8_t *x, *y;
	size_t nx, ny;

	unsetenv("SOURCE_DATE_EPOCH");
	write_shard(t_path("one.tar"), NULL, mv, 3, &i1);
	sleep(1);	/* a clock-derived field would now differ */
	write_shard(t_path("two.tar"), NULL, mv, 3, &i2);
	x = t_read_file("one.tar", &nx);
	y = t_read_file("two.tar", &ny);
	CHECK_EQ_INT(nx, ny);
	CHECK_MEM_EQ(x, y, nx);
	CHECK_EQ_STR(i1.md5, i2.md5);
	free(x);
	free(y);
	free(a);
}

/*
 * Walk the headers of a tar we wrote: every regular-file header has a good
 * checksum, magic "ustar", mode 0444, the given mtime and the same owner.
 * Returns the number of regular-file headers and of PAX ('x') headers.
 */
static void
check_headers(int line, const char *path, uint64_t mtime, int *nfiles,
    int *npax)
{
	uint8_t *buf, owner[512];
	size_t len, off = 0;
	uint64_t size;
	int have_owner = 0;

	*nfiles = *npax = 0;
	buf = t_read_file(path, &len);
	while (off + 512 <= len && !zero_block(buf + off)) {
		const uint8_t *h = buf + off;

		if (!header_sum_ok(h))
			t_fail(__FILE__, line, "%s: bad checksum at offset %zu",
			    path, off);
		if (memcmp(h + 257, "ustar", 5) != 0)
			t_fail(__FILE__, line, "%s: no ustar magic at offset "
			    "%zu", path, off);
		size = octal(h + 124, 12);
		if (h[156] == 'x')
			(*npax)++;
		else if (h[156] == '0' || h[156] == '\0') {
			(*nfiles)++;
			if ((octal(h + 100, 8) & 07777) != 0444)
				t_fail(__FILE__, line, "%s: mode %jo at offset "
				    "%zu, want 0444", path,
				    (uintmax_t)octal(h + 100, 8), off);
			if (octal(h + 136, 12) != mtime)
				t_fail(__FILE__, line, "%s: mtime %ju at offset "
				    "%zu, want %ju", path,
				    (uintmax_t)octal(h + 136, 12), off,
				    (uintmax_t)mtime);
			/* uid, gid, uname, gname: a fixed owner */
			memcpy(owner + 0, h + 108, 16);
			memcpy(owner + 16, h + 265, 64);
			if (have_owner && memcmp(owner + 256, owner, 80) != 0)
				t_fail(__FILE__, line, "%s: owner differs at "
				    "offset %zu", path, off);
			memcpy(owner + 256, owner, 80);
			have_owner = 1;
		} else
			t_fail(__FILE__, line, "%s: typeflag '%c' at offset %zu",
			    path, h[156], off);
		off += 512 + round512(size);
	}
	free(buf);
}

TEST(tar_write_header_fields)
{
	struct member mv[] = {
		{ "a.txt", (const uint8_t *)"hello", 5 },
		{ "a.cls", (const uint8_t *)"1", 1 },
	};
	struct sk_tar_writer_opts opts = { .mtime = -1, .fsync = 1 };
	int nfiles, npax;
	uint8_t *buf;
	size_t len;

	unsetenv("SOURCE_DATE_EPOCH");
	write_shard(t_path("z.tar"), NULL, mv, 2, NULL);
	buf = t_read_file("z.tar", &len);
	CHECK(len >= 512);
	CHECK_EQ_STR((char *)buf, "a.txt");		/* name at 0 */
	CHECK_EQ_INT(octal(buf + 100, 8) & 07777, 0444);
	CHECK_EQ_INT(octal(buf + 124, 12), 5);
	CHECK_EQ_INT(octal(buf + 136, 12), 0);
	CHECK_MEM_EQ(buf + 257, "ustar", 5);
	CHECK(buf[156] == '0');
	CHECK(header_sum_ok(buf));
	CHECK_MEM_EQ(buf + 512, "hello", 5);
	free(buf);
	check_headers(__LINE__, "z.tar", 0, &nfiles, &npax);
	CHECK_EQ_INT(nfiles, 2);
	CHECK_EQ_INT(npax, 0);

	/* SOURCE_DATE_EPOCH sets the mtime (reproducible-builds.org). */
	setenv("SOURCE_DATE_EPOCH", "1234", 1);
	write_shard(t_path("e.tar"), &opts, mv, 2, NULL);
	check_headers(__LINE__, "e.tar", 1234, &nfiles, &npax);
	CHECK_EQ_INT(nfiles, 2);
	write_shard(t_path("e2.tar"), NULL, mv, 2, NULL);
	check_headers(__LINE__, "e2.tar", 1234, &nfiles, &npax);

	/* An explicit mtime. */
	unsetenv("SOURCE_DATE_EPOCH");
	opts.mtime = 777;
	write_shard(t_path("m.tar"), &opts, mv, 2, NULL);
	check_headers(__LINE__, "m.tar", 777, &nfiles, &npax);
	CHECK_EQ_INT(nfiles, 2);
}

TEST(tar_write_pax_only_when_needed)
{
	char longname[160], name99[100], slashed[200];
	struct member mv[3];
	struct sk_tar_member m;
	sk_tar_reader *r;
	int nfiles, npax;
	uint8_t *buf;
	size_t len;
	char *list;

	/* 150 characters and no '/': ustar's prefix field cannot help. */
	memset(longname, 'n', 146);
	memcpy(longname + 146, ".jpg", 5);
	CHECK_EQ_INT(strlen(longname), 150);
	mv[0] = (struct member){ longname, (const uint8_t *)"L", 1 };
	write_shard(t_path("long.tar"), NULL, mv, 1, NULL);
	buf = t_read_file("long.tar", &len);
	CHECK(len >= 2048);
	CHECK(buf[156] == 'x');
	CHECK(memmem(buf, 1024, longname, 150) != NULL);
	free(buf);
	check_headers(__LINE__, "long.tar", 0, &nfiles, &npax);
	CHECK_EQ_INT(nfiles, 1);
	CHECK_EQ_INT(npax, 1);
	t_system("tar -tf long.tar > list.txt");
	list = t_read_file("list.txt", &len);
	CHECK_EQ_INT(len, 151);
	CHECK_MEM_EQ(list, longname, 150);
	free(list);
	r = open_reader("long.tar", 0);
	expect_member(__LINE__, r, "long.tar", longname,
	    (const uint8_t *)"L", 1, &m);
	CHECK_EQ_INT(m.header_offset, 0);
	expect_end(__LINE__, r);
	sk_tar_reader_close(r);

	/* 99 characters fit the name field: no PAX header. */
	memset(name99, 's', 95);
	memcpy(name99 + 95, ".cls", 5);
	mv[0] = (struct member){ name99, (const uint8_t *)"1", 1 };
	mv[1] = (struct member){ "short.cls", (const uint8_t *)"2", 1 };
	write_shard(t_path("short.tar"), NULL, mv, 2, NULL);
	buf = t_read_file("short.tar", &len);
	CHECK(buf[156] == '0');
	free(buf);
	check_headers(__LINE__, "short.tar", 0, &nfiles, &npax);
	CHECK_EQ_INT(nfiles, 2);
	CHECK_EQ_INT(npax, 0);

	/* A long path with slashes: PAX or prefix, either reads back. */
	snprintf(slashed, sizeof slashed, "%.60s/%.60s/%.40s.png", longname,
	    longname, longname);
	mv[0] = (struct member){ slashed, (const uint8_t *)"P", 1 };
	mv[1] = (struct member){ longname, (const uint8_t *)"Q", 1 };
	mv[2] = (struct member){ "after.cls", (const uint8_t *)"R", 1 };
	write_shard(t_path("mixed.tar"), NULL, mv, 3, NULL);
	r = open_reader("mixed.tar", 0);
	expect_member(__LINE__, r, "mixed.tar", slashed,
	    (const uint8_t *)"P", 1, NULL);
	expect_member(__LINE__, r, "mixed.tar", longname,
	    (const uint8_t *)"Q", 1, NULL);
	expect_member(__LINE__, r, "mixed.tar", "after.cls",
	    (const uint8_t *)"R", 1, NULL);
	expect_end(__LINE__, r);
	sk_tar_reader_close(r);
	t_system("tar -xf mixed.tar && test \"$(cat '%s')\" = P", slashed);
}

TEST(tar_member_bytes_bound)
{
	static const size_t sizes[] = { 0, 1, 511, 512, 513, 10240, 100001 };
	char names[5][400];
	struct member mv[5 * 7];
	uint8_t *data = make_data(100001, 5);
	size_t i, j, n = 0;

	snprintf(names[0], sizeof names[0], "k.jpg");
	memset(names[1], 'a', 99);
	names[1][99] = '\0';
	memset(names[2], 'b', 101);
	names[2][101] = '\0';
	memset(names[3], 'c', 300);
	memcpy(names[3] + 300, ".tar", 5);
	snprintf(names[4], sizeof names[4], "dir/%.200s/x.y.z", names[3]);
	for (i = 0; i < 5; i++)
		for (j = 0; j < 7; j++) {
			mv[n] = (struct member){ names[i], data, sizes[j] };
			/* data-only growth is always part of the bound */
			CHECK(sk_tar_member_bytes(names[i], sizes[j]) >=
			    512 + round512(sizes[j]));
			n++;
		}
	/* This checks each member's growth against the bound. */
	write_shard_accounted(t_path("b.tar"), NULL, mv, n, NULL);
	CHECK(SK_TAR_TRAILER_BYTES >= 1024);
	free(data);
}

TEST(tar_write_abort)
{
	sk_tar_writer *w;

	CHECK_OK(sk_tar_writer_open(&w, t_path("ab.tar"), NULL), w);
	CHECK_OK(sk_tar_writer_add(w, "a.txt", "abc", 3), w);
	CHECK_EQ_INT(parts(t_path("ab.tar")), 1);
	sk_tar_writer_abort(w);
	CHECK_EQ_INT(parts(t_path("ab.tar")), 0);
	CHECK(!exists("ab.tar"));
}

TEST(tar_write_open_missing_dir)
{
	sk_tar_writer *w = NULL;
	const char *msg;

	msg = CHECK_ERR(sk_tar_writer_open(&w, t_path("nodir/sub/s.tar"),
	    NULL), SK_ENOENT, w);
	CHECK(w != NULL);
	CHECK_CONTAINS(msg, "nodir/sub/s.tar");
	t_diag("message: %s", msg);
	sk_tar_writer_abort(w);
	CHECK(!exists("nodir"));
}

TEST(tar_write_replaces_existing)
{
	struct member mv[] = { { "a.cls", (const uint8_t *)"9", 1 } };
	uint8_t *buf;
	size_t len;

	t_write_file("s.tar", "old junk", 8);
	t_write_file("s.tar.part", "stale part", 10);
	write_shard(t_path("s.tar"), NULL, mv, 1, NULL);
	buf = t_read_file("s.tar", &len);
	CHECK_EQ_STR((char *)buf, "a.cls");
	free(buf);
	/* Not the writer's: left as it was. */
	buf = t_read_file("s.tar.part", &len);
	CHECK_MEM_EQ(buf, "stale part", 10);
	free(buf);
}

/* ------------------------------------------------------------------------ */
/* reader                                                                   */

TEST(tar_read_roundtrip)
{
	uint8_t *a = make_data(3000, 6), *b = make_data(1 << 20, 7);
	uint8_t *c = make_data(512, 8);
	struct member mv[] = {
		{ "s0/k0.jpg", a, 3000 },
		{ "s0/k0.cls", (const uint8_t *)"5", 1 },
		{ "s0/k1.bin", b, 1 << 20 },
		{ "s0/k1.cls", (const uint8_t *)"", 0 },
		{ "s0/k2.bin", c, 512 },
	};
	struct sk_tar_member m, prev;
	sk_tar_reader *r;
	uint8_t buf[100];
	size_t i;

	write_shard(t_path("rt.tar"), NULL, mv, 5, NULL);
	r = open_reader(t_path("rt.tar"), 0);
	for (i = 0; i < 5; i++) {
		expect_member(__LINE__, r, "rt.tar", mv[i].name, mv[i].data,
		    mv[i].size, &m);
		if (i == 0)
			CHECK_EQ_INT(m.header_offset, 0);
		else
			CHECK(m.header_offset >= prev.data_offset +
			    round512(prev.size));
		prev = m;
	}
	expect_end(__LINE__, r);
	CHECK_EQ_INT(sk_tar_reader_skipped(r), 0);
	sk_tar_reader_close(r);

	/* Members need not be read, or read to their end. */
	r = open_reader("rt.tar", 0);
	CHECK_EQ_INT(CHECK_OK(sk_tar_reader_next(r, &m), r), 1);
	CHECK_EQ_STR(m.name, "s0/k0.jpg");
	CHECK_EQ_INT(CHECK_OK(sk_tar_reader_next(r, &m), r), 1);
	CHECK_EQ_STR(m.name, "s0/k0.cls");
	CHECK_EQ_INT(CHECK_OK(sk_tar_reader_next(r, &m), r), 1);
	CHECK_EQ_STR(m.name, "s0/k1.bin");
	CHECK_EQ_INT(CHECK_OK(sk_tar_reader_read(r, buf, 100), r), 100);
	CHECK_MEM_EQ(buf, b, 100);
	expect_member(__LINE__, r, "rt.tar", "s0/k1.cls",
	    (const uint8_t *)"", 0, NULL);
	expect_member(__LINE__, r, "rt.tar", "s0/k2.bin", c, 512, NULL);
	expect_end(__LINE__, r);
	sk_tar_reader_close(r);
	free(a);
	free(b);
	free(c);
}

/* Make files under in/ for GNU tar: short, long-named, empty, metadata. */
static char *
make_tree(uint8_t **big)
{
	char *longname = malloc(200);
	char dir[100];

	CHECK(longname != NULL);
	memset(dir, 'd', 70);
	dir[70] = '\0';
	snprintf(longname, 200, "%s/%.60s.bin", dir,
	    "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff");
	CHECK(strlen(longname) > 100);
	t_system("mkdir -p in/%s in/sub", dir);
	*big = make_data(5000, 9);
	t_write_file("in/short.txt", "hello\n", 6);
	{
		char p[300];

		snprintf(p, sizeof p, "in/%s", longname);
		t_write_file(p, *big, 5000);
	}
	t_write_file("in/zero.cls", "", 0);
	t_write_file("in/__meta__.json", "{}", 2);
	t_write_file("in/sub/y.txt", "y", 1);
	CHECK(symlink("short.txt", "in/lnk") == 0);
	return (longname);
}

/* long_type: the typeflag of the long member's first header block. */
static void
check_made_tar(const char *tar, const char *longname, const uint8_t *big,
    int pax_each, char long_type)
{
	struct sk_tar_member m;
	sk_tar_reader *r;
	uint8_t *buf;
	size_t len;

	r = open_reader(tar, 0);
	expect_member(__LINE__, r, tar, "short.txt",
	    (const uint8_t *)"hello\n", 6, &m);
	buf = t_read_file(tar, &len);
	if (pax_each) {
		/* The first header block is the member's PAX header. */
		CHECK(buf[m.header_offset + 156] == 'x');
		CHECK(m.data_offset >= m.header_offset + 1536);
	}
	expect_member(__LINE__, r, tar, longname, big, 5000, &m);
	CHECK_EQ_INT(buf[m.header_offset + 156], long_type);
	free(buf);
	expect_member(__LINE__, r, tar, "zero.cls", (const uint8_t *)"", 0,
	    NULL);
	/* __meta__.json, sub/, lnk are skipped */
	expect_member(__LINE__, r, tar, "sub/y.txt", (const uint8_t *)"y", 1,
	    NULL);
	expect_end(__LINE__, r);
	CHECK_EQ_INT(sk_tar_reader_skipped(r), 3);
	sk_tar_reader_close(r);
}

#define TREE_ORDER "short.txt '%s' zero.cls __meta__.json sub lnk sub/y.txt"

TEST(tar_read_gnu_format)
{
	uint8_t *big;
	char *longname = make_tree(&big);

	t_system("cd in && tar --owner=0 --group=0 --numeric-owner --format=gnu --no-recursion -cf ../gnu.tar "
	    TREE_ORDER, longname);
	check_made_tar("gnu.tar", longname, big, 0, 'L');
	free(longname);
	free(big);
}

TEST(tar_read_pax_format)
{
	uint8_t *big;
	char *longname = make_tree(&big);

	t_system("cd in && tar --owner=0 --group=0 --numeric-owner --format=pax --no-recursion -cf ../pax.tar "
	    TREE_ORDER, longname);
	check_made_tar("pax.tar", longname, big, 0, 'x');

	/* A PAX header on every member, as webdataset's ShardWriter does. */
	t_system("cd in && tar --owner=0 --group=0 --numeric-owner --format=pax --pax-option=comment:=wds "
	    "--no-recursion -cf ../paxeach.tar " TREE_ORDER, longname);
	check_made_tar("paxeach.tar", longname, big, 1, 'x');

	/* A global header ('g') first. */
	t_system("cd in && tar --owner=0 --group=0 --numeric-owner --format=pax --pax-option=comment=global "
	    "--no-recursion -cf ../paxglobal.tar " TREE_ORDER, longname);
	t_system("head -c 512 paxglobal.tar | cut -b 157 | grep -q g");
	check_made_tar("paxglobal.tar", longname, big, 0, 'x');
	free(longname);
	free(big);
}

TEST(tar_read_ustar_format)
{
	sk_tar_reader *r;

	t_write_file("a.txt", "A", 1);
	t_write_file("b.txt", "BB", 2);
	t_system("tar --owner=0 --group=0 --numeric-owner --format=ustar -cf u.tar a.txt b.txt");
	r = open_reader("u.tar", 0);
	expect_member(__LINE__, r, "u.tar", "a.txt", (const uint8_t *)"A", 1,
	    NULL);
	expect_member(__LINE__, r, "u.tar", "b.txt", (const uint8_t *)"BB", 2,
	    NULL);
	expect_end(__LINE__, r);
	sk_tar_reader_close(r);
}

TEST(tar_read_all_entries)
{
	struct sk_tar_member m;
	sk_tar_reader *r;
	uint8_t *big;
	char *longname = make_tree(&big);
	int saw_dir = 0, saw_link = 0, saw_meta = 0, n = 0;

	t_system("cd in && tar --owner=0 --group=0 --numeric-owner --format=gnu --no-recursion -cf ../all.tar "
	    TREE_ORDER, longname);
	r = open_reader("all.tar", SK_TAR_ALL_ENTRIES);
	while (CHECK_OK(sk_tar_reader_next(r, &m), r) == 1) {
		n++;
		if (strcmp(m.name, "sub") == 0 || strcmp(m.name, "sub/") == 0) {
			CHECK_EQ_INT(m.type, SK_TAR_DIR);
			saw_dir = 1;
		} else if (strcmp(m.name, "lnk") == 0) {
			CHECK_EQ_INT(m.type, SK_TAR_SYMLINK);
			CHECK_EQ_STR(m.linkname, "short.txt");
			saw_link = 1;
		} else if (strcmp(m.name, "__meta__.json") == 0) {
			CHECK_EQ_INT(m.type, SK_TAR_FILE);
			CHECK_EQ_INT(m.size, 2);
			saw_meta = 1;
		} else
			CHECK_EQ_INT(m.type, SK_TAR_FILE);
	}
	CHECK_EQ_INT(n, 7);
	CHECK(saw_dir && saw_link && saw_meta);
	CHECK_EQ_INT(sk_tar_reader_skipped(r), 0);
	sk_tar_reader_close(r);
	free(longname);
	free(big);
}

static void
write_three(const char *path, struct sk_tar_member *second)
{
	uint8_t *a = make_data(3000, 10);
	struct member mv[] = {
		{ "t0.bin", a, 3000 },
		{ "t1.bin", a, 3000 },
		{ "t2.bin", a, 3000 },
	};
	struct sk_tar_member m;
	sk_tar_reader *r;

	write_shard(path, NULL, mv, 3, NULL);
	r = open_reader(path, 0);
	expect_member(__LINE__, r, path, "t0.bin", a, 3000, NULL);
	expect_member(__LINE__, r, path, "t1.bin", a, 3000, &m);
	*second = m;
	second->name = NULL;
	sk_tar_reader_close(r);
	free(a);
}

static void
expect_damage(int line, const char *path, int want_members)
{
	char msg[SK_ERRMSG_MAX];
	sk_tar_reader *r;
	sk_source *s;
	int rc, n = 0;

	CHECK_OK(sk_source_open(&s, path), s);
	rc = sk_tar_reader_open(&r, s, 0);
	if (rc < 0)
		snprintf(msg, sizeof msg, "%s", sk_errmsg(r));
	else
		rc = drain(r, &n, msg, sizeof msg);
	if (rc >= 0)
		t_fail(__FILE__, line, "%s: read to a clean end (%d members)",
		    path, n);
	t_diag("%s: %d members, then %d: %s", path, n, rc, msg);
	if (want_members >= 0 && n != want_members)
		t_fail(__FILE__, line, "%s: %d members before the error, want "
		    "%d", path, n, want_members);
	if (strstr(msg, path) == NULL)
		t_fail(__FILE__, line, "message does not name the URL %s: %s",
		    path, msg);
	if (strstr(msg, "offset") == NULL)
		t_fail(__FILE__, line, "message gives no offset: %s", msg);
	/* A failed reader stays failed. */
	if (rc != SK_ENOMEM && sk_tar_reader_next(r, &(struct sk_tar_member){
	    0 }) >= 0)
		t_fail(__FILE__, line, "sk_tar_reader_next after a failure did "
		    "not fail");
	sk_tar_reader_close(r);
}

TEST(tar_read_truncated_data)
{
	struct sk_tar_member second;
	char msg[SK_ERRMSG_MAX];
	sk_tar_reader *r;
	int n;

	write_three(t_path("t.tar"), &second);
	/* Cut in the middle of the second member's data: the member is
	 * refused at its header, since the file cannot hold its data. */
	CHECK(truncate("t.tar", (off_t)second.data_offset + 100) == 0);
	expect_damage(__LINE__, t_path("t.tar"), 1);
	r = open_reader("t.tar", 0);
	CHECK_EQ_INT(drain(r, &n, msg, sizeof msg), SK_EFORMAT);
	CHECK_CONTAINS(msg, "member t1.bin claims 3000 bytes, but the file "
	    "has 100 bytes left");
	sk_tar_reader_close(r);
}

TEST(tar_read_truncated_header)
{
	struct sk_tar_member second;

	write_three(t_path("t.tar"), &second);
	/* Cut in the middle of the second member's header. */
	CHECK(truncate("t.tar", (off_t)second.header_offset + 100) == 0);
	expect_damage(__LINE__, t_path("t.tar"), 1);
}

TEST(tar_read_bad_checksum)
{
	struct sk_tar_member second;
	FILE *f;

	write_three(t_path("t.tar"), &second);
	/* Change the second header's name: its checksum no longer fits. */
	CHECK((f = fopen("t.tar", "r+b")) != NULL);
	CHECK(fseek(f, (long)second.header_offset + 1, SEEK_SET) == 0);
	CHECK(fputc('X', f) != EOF);
	fclose(f);
	expect_damage(__LINE__, t_path("t.tar"), 1);
}

TEST(tar_read_garbage)
{
	uint8_t *g = make_data(5000, 11);
	char msg[SK_ERRMSG_MAX];
	sk_tar_reader *r;
	sk_source *s;
	int rc, n, i;

	t_write_file("g.tar", g, 5000);
	memset(g, 'A', 5000);
	t_write_file("a.tar", g, 5000);
	for (i = 0; i < 2; i++) {
		const char *p = t_path(i == 0 ? "g.tar" : "a.tar");

		CHECK_OK(sk_source_open(&s, p), s);
		rc = sk_tar_reader_open(&r, s, 0);
		if (rc < 0)
			snprintf(msg, sizeof msg, "%s", sk_errmsg(r));
		else
			rc = drain(r, &n, msg, sizeof msg);
		CHECK(rc < 0);
		CHECK_CONTAINS(msg, p);
		t_diag("%s", msg);
		sk_tar_reader_close(r);
	}
	free(g);
}

/*
 * An empty file is an error (SK_EFORMAT), as GNU tar and Python's tarfile
 * say: every shard we write has at least the end-of-archive blocks, so an
 * empty one is a failed upload or a truncation, not "no samples". A file of
 * only end-of-archive blocks is a valid tar with no members.
 */
TEST(tar_read_empty)
{
	char msg[SK_ERRMSG_MAX], zeros[10240];
	sk_tar_reader *r;
	sk_source *s;
	int rc, n = 0;

	t_write_file("empty.tar", "", 0);
	CHECK_OK(sk_source_open(&s, t_path("empty.tar")), s);
	rc = sk_tar_reader_open(&r, s, 0);
	if (rc < 0)
		snprintf(msg, sizeof msg, "%s", sk_errmsg(r));
	else
		rc = drain(r, &n, msg, sizeof msg);
	CHECK_EQ_INT(rc, SK_EFORMAT);
	CHECK_CONTAINS(msg, t_path("empty.tar"));
	sk_tar_reader_close(r);

	memset(zeros, 0, sizeof zeros);
	t_write_file("z1.tar", zeros, 1024);
	r = open_reader("z1.tar", 0);
	expect_end(__LINE__, r);
	sk_tar_reader_close(r);
	t_write_file("z2.tar", zeros, sizeof zeros);
	r = open_reader("z2.tar", 0);
	expect_end(__LINE__, r);
	sk_tar_reader_close(r);
}

/* ------------------------------------------------------------------------ */
/* hostile input (issue 10)                                                 */

/* One raw header block: a ustar header, or a PAX 'x' header with its
 * records in the data block that follows. size is the size field. */
static void
raw_header(uint8_t h[512], const char *name, char type, uint64_t size)
{
	unsigned sum = 0;
	int i;

	memset(h, 0, 512);
	snprintf((char *)h, 100, "%s", name);
	memcpy(h + 100, "0000644", 8);
	memcpy(h + 108, "0000000", 8);
	memcpy(h + 116, "0000000", 8);
	snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
	memcpy(h + 136, "00000000000", 12);
	h[156] = (uint8_t)type;
	memcpy(h + 257, "ustar\0" "00", 8);
	memset(h + 148, ' ', 8);
	for (i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
}

/*
 * A good sample, then a member whose PAX header claims claim bytes, a
 * little real data and the end blocks (as in issue 10: one good sample,
 * then a header that lies). Returns the file's size; the lying member's
 * first header block is at 1024.
 */
static size_t
write_liar(const char *path, const char *claim)
{
	uint8_t buf[512 * 9];
	char rec[100];
	size_t n = 0;
	int base, len;

	memset(buf, 0, sizeof buf);
	raw_header(buf + n, "a.cls", '0', 1);
	n += 512;
	buf[n] = '7';
	n += 512;
	/* PAX: "LEN size=CLAIM\n", LEN counting its own digits too. */
	base = (int)strlen(claim) + 7;
	for (len = base; len != base + snprintf(NULL, 0, "%d", len);)
		len = base + snprintf(NULL, 0, "%d", len);
	CHECK_EQ_INT(snprintf(rec, sizeof rec, "%d size=%s\n", len, claim),
	    len);
	raw_header(buf + n, "PaxHeader/b.jpg", 'x', (uint64_t)len);
	n += 512;
	memcpy(buf + n, rec, (size_t)len);
	n += 512;
	raw_header(buf + n, "b.jpg", '0', 1);
	n += 512;
	memset(buf + n, 'J', 512);
	n += 512;
	n += 1024;
	t_write_file(path, buf, n);
	return n;
}

/*
 * A plain file's GNU header with a garbage old-sparse map: libarchive
 * ends the data early without an error. The reader owes the size the
 * header gave, so that is damage (found by fuzz_tar).
 */
TEST(tar_read_short_member_data)
{
	t_system("cd '%s' && printf 1 > a.cls && "
	    "tar --format=gnu -cf g.tar a.cls && python3 - <<'PY'\n"
	    "h = bytearray(open('g.tar', 'rb').read())\n"
	    "h[386:398] = b'00000000000\\0'   # sparse[0].offset\n"
	    "h[398:410] = b'00000000000\\0'   # sparse[0].numbytes\n"
	    "h[148:156] = b' ' * 8\n"
	    "h[148:156] = b'%%06o\\0 ' %% sum(h[:512])\n"
	    "open('g.tar', 'wb').write(h)\n"
	    "PY", t_tmpdir());
	expect_damage(__LINE__, t_path("g.tar"), 1);
}

TEST(tar_read_size_lie)
{
	char msg[SK_ERRMSG_MAX], want[200];
	struct sk_tar_member m;
	sk_tar_reader *r;
	size_t size;
	int i;

	size = write_liar("lie.tar", "10000000000000");
	/* The good member comes first, whole. */
	r = open_reader(t_path("lie.tar"), 0);
	expect_member(__LINE__, r, "lie.tar", "a.cls", (const uint8_t *)"7",
	    1, NULL);
	CHECK_EQ_INT(sk_tar_reader_next(r, &m), SK_EFORMAT);
	/* The refused member is left in m, for a caller counting samples. */
	CHECK_EQ_STR(m.name, "b.jpg");
	CHECK_EQ_INT(m.size, 10000000000000ULL);
	CHECK_EQ_INT(m.header_offset, 1024);
	snprintf(msg, sizeof msg, "%s", sk_errmsg(r));
	t_diag("%s", msg);
	CHECK_CONTAINS(msg, t_path("lie.tar"));
	snprintf(want, sizeof want, "offset 1024: member b.jpg claims "
	    "10000000000000 bytes, but the file has %zu bytes left",
	    size - 2048 - 512);
	CHECK_CONTAINS(msg, want);
	/* Sticky. */
	CHECK(sk_tar_reader_next(r, &m) < 0);
	sk_tar_reader_close(r);
	expect_damage(__LINE__, t_path("lie.tar"), 1);

	/* Also with every entry reported, and with a size just one byte
	 * past the end: the bound is exact. */
	for (i = 0; i < 2; i++) {
		write_liar("lie2.tar", "1537");
		r = open_reader("lie2.tar", i ? SK_TAR_ALL_ENTRIES : 0);
		CHECK_EQ_INT(CHECK_OK(sk_tar_reader_next(r, &m), r), 1);
		CHECK_EQ_INT(sk_tar_reader_next(r, &m), SK_EFORMAT);
		CHECK_CONTAINS(sk_errmsg(r), "claims 1537 bytes, but the file "
		    "has 1536 bytes left");
		sk_tar_reader_close(r);
	}
	/* 1536 fits exactly: data up to the file's end. Then the end check
	 * says there are no end blocks. */
	write_liar("fit.tar", "1536");
	r = open_reader("fit.tar", 0);
	CHECK_EQ_INT(CHECK_OK(sk_tar_reader_next(r, &m), r), 1);
	CHECK_EQ_INT(CHECK_OK(sk_tar_reader_next(r, &m), r), 1);
	CHECK_EQ_STR(m.name, "b.jpg");
	CHECK_EQ_INT(m.size, 1536);
	CHECK(sk_tar_reader_next(r, &m) < 0);
	sk_tar_reader_close(r);
}

/* A ustar size field of eleven 7s (8 GiB), no PAX: the same check. */
TEST(tar_read_size_lie_ustar)
{
	uint8_t buf[512 * 4];
	struct sk_tar_member m;
	sk_tar_reader *r;

	memset(buf, 0, sizeof buf);
	raw_header(buf, "big.jpg", '0', 077777777777ULL);
	t_write_file("u.tar", buf, sizeof buf);
	r = open_reader("u.tar", 0);
	CHECK_EQ_INT(sk_tar_reader_next(r, &m), SK_EFORMAT);
	CHECK_CONTAINS(sk_errmsg(r), "offset 0: member big.jpg claims "
	    "8589934591 bytes, but the file has 1536 bytes left");
	sk_tar_reader_close(r);
}

/*
 * Fake decompressors first in PATH: each leaves a mark if anything runs
 * it. libarchive's filters for these run the program named by the magic
 * (lrzip -d, lzop -d, ...), and any of them may fall back to one.
 */
static const char *const fake_progs[] = { "lrzip", "lzop", "grzip", "lzip",
    "lz4", "xz", "bzip2", "gzip", "zstd", "compress", "uncompress", "lzma",
    "unzstd", "gunzip", NULL };

static void
fake_path(void)
{
	char script[300], path[8192];
	const char *old = getenv("PATH");
	int i;

	t_system("mkdir -p fakebin");
	snprintf(script, sizeof script, "#!/bin/sh\necho \"$0\" >> '%s'\n"
	    "exit 1\n", t_path("exec-mark"));
	for (i = 0; fake_progs[i] != NULL; i++) {
		char p[64];

		snprintf(p, sizeof p, "fakebin/%s", fake_progs[i]);
		t_write_file(p, script, strlen(script));
		CHECK(chmod(p, 0755) == 0);
	}
	snprintf(path, sizeof path, "%s:%s", t_path("fakebin"),
	    old ? old : "/usr/bin:/bin");
	CHECK(setenv("PATH", path, 1) == 0);
}

static void
no_exec_mark(int line)
{
	char *text;

	if (exists("exec-mark")) {
		text = t_read_file("exec-mark", NULL);
		t_fail(__FILE__, line, "a program was run: %s", text);
	}
}

TEST(tar_read_compression_no_exec)
{
	static const struct {
		const char *name, *magic, *what;
		size_t len;
	} cases[] = {
		{ "lrzip", "LRZI\0\6", "lrzip-compressed", 6 },
		{ "lzop", "\x89LZO\0\r\n\x1a\n\x10\x30\x20\x80\x09\x40", "lzop-compressed", 16 },
		{ "grzip", "GRZipII\0\2\4:)", "grzip-compressed", 12 },
		{ "lzip", "LZIP\1\x0c", "lzip-compressed", 6 },
		{ "bzip2", "BZh91AY&SY", "bzip2-compressed", 10 },
		{ "xz", "\xfd" "7zXZ\0\0\4", "xz-compressed", 7 },
		{ "lz4", "\x04\x22\x4d\x18\x64\x40\xa7", "lz4-compressed", 7 },
		{ "compress", "\x1f\x9d\x90", "compress (.Z)", 3 },
		{ "uu", "begin 644 x.tar\n", "uuencoded", 16 },
		{ "rpm", "\xed\xab\xee\xdb\3\0", "RPM package", 6 },
	};
	char msg[SK_ERRMSG_MAX], name[64];
	uint8_t buf[1024];
	sk_tar_reader *r;
	sk_source *s;
	size_t i;
	int rc, n;

	fake_path();
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		/* 512 bytes, as in the issue, and 1 KiB of noise after. */
		memset(buf, 0x5a, sizeof buf);
		memcpy(buf, cases[i].magic, cases[i].len);
		snprintf(name, sizeof name, "%s.tar", cases[i].name);
		t_write_file(name, buf, i % 2 ? 512 : sizeof buf);
		CHECK_OK(sk_source_open(&s, t_path(name)), s);
		rc = sk_tar_reader_open(&r, s, 0);
		if (rc < 0)
			snprintf(msg, sizeof msg, "%s", sk_errmsg(r));
		else
			rc = drain(r, &n, msg, sizeof msg);
		t_diag("%s: %d: %s", name, rc, msg);
		CHECK_EQ_INT(rc, SK_EFORMAT);
		CHECK_CONTAINS(msg, t_path(name));
		CHECK_CONTAINS(msg, "offset 0: not a tar archive (");
		CHECK_CONTAINS(msg, cases[i].what);
		CHECK_CONTAINS(msg, "shards may be plain, gzip or zstd");
		sk_tar_reader_close(r);
		no_exec_mark(__LINE__);
	}
}

/* The magic is looked at only once the tar format gave up: a tar whose
 * first member's name starts like lrzip or bzip2 data is read as a tar. */
TEST(tar_read_magic_like_names)
{
	static const char *const names[] = { "LRZI.cls", "BZh91.jpg",
	    "LZIP.txt", "begin .txt" };
	struct member mv[1];
	sk_tar_reader *r;
	char path[32];
	size_t i;

	for (i = 0; i < sizeof names / sizeof names[0]; i++) {
		mv[0].name = names[i];
		mv[0].data = (const uint8_t *)"x";
		mv[0].size = 1;
		snprintf(path, sizeof path, "m%zu.tar", i);
		write_shard(t_path(path), NULL, mv, 1, NULL);
		r = open_reader(path, 0);
		expect_member(__LINE__, r, path, names[i],
		    (const uint8_t *)"x", 1, NULL);
		expect_end(__LINE__, r);
		sk_tar_reader_close(r);
	}
}

/* gzip and zstd tars are read in-process, with no program run; their
 * sizes are not checked against the (smaller) file. */
TEST(tar_read_gzip_zstd)
{
	static const char *const tools[] = { "gzip", "zstd" };
	uint8_t *big = make_data(100000, 12);
	char cmd[200];
	struct sk_tar_member m;
	sk_tar_reader *r;
	size_t i;
	int got = 0;

	memset(big, 'z', 90000);	/* compresses far below its size */
	t_write_file("in.bin", big, 100000);
	t_system("tar --format=ustar -cf plain.tar in.bin");
	for (i = 0; i < 2; i++) {
		snprintf(cmd, sizeof cmd, "command -v %s >/dev/null || "
		    "exit 0; %s -c plain.tar > c%zu.tar", tools[i], tools[i], i);
		t_system("%s", cmd);
	}
	fake_path();
	for (i = 0; i < 2; i++) {
		snprintf(cmd, sizeof cmd, "c%zu.tar", i);
		if (!exists(cmd)) {
			t_diag("no %s: its case is not run", tools[i]);
			continue;
		}
		r = open_reader(cmd, 0);
		CHECK_EQ_INT(sk_tar_reader_compressed(r), 1);
		expect_member(__LINE__, r, NULL, "in.bin", big, 100000, &m);
		expect_end(__LINE__, r);
		sk_tar_reader_close(r);
		no_exec_mark(__LINE__);
		got++;
	}
	if (got == 0)
		t_skip("neither gzip nor zstd is installed");
	free(big);
}
