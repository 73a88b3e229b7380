/*
 * cmd-extract.c - extract the members of shards into a folder, refusing
 * any entry that could write or point outside it.
 *
 * Every path is walked from a descriptor of the folder one component at a
 * time with O_NOFOLLOW, and files are created with O_EXCL after removing
 * what was there, so neither a link in the archive nor one already in the
 * folder can redirect a write. What is refused without looking at the
 * folder, entry_refused() in shards.c decides, so verify reports the same.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "shards.h"

static int cmd_extract_exec(int, char **);

static const struct cli_option extract_options[] = {
	{ "directory", 'C', 'C', CLI_STRING, "DIR", "extract into DIR "
	    "(required; -v prints each name)", 0, 0, NULL, 0 },
	OPT_END
};
static const struct cli_group extract_groups[] = {
	{ "extract", extract_options }, SHARDS_REMOTE_GROUP, { NULL, NULL }
};

static void
extract_set(void *ctx, const struct cli_option *o, const struct cli_value *v)
{
	(void)o;
	*(const char **)ctx = v->s;
}

const struct cli_command cmd_extract_entry = {
	.name = "extract",
	.usage = "extract [-v] -C DIR URL...",
	.summary = "extract shards into a folder, safely",
	.about =
	    "Extract every entry of the shards into the folder DIR, which must\n"
	    "exist: files (mode 0644), folders (0755), symbolic and hard links.\n"
	    "Entries that would land or point outside DIR are refused: absolute\n"
	    "names, \"..\" components, links with absolute targets, symbolic\n"
	    "links whose target climbs out of DIR or has \"..\" after a name,\n"
	    "and writes through a link already in DIR. A refused entry is an\n"
	    "error; the others are still extracted. A sample (the entries that\n"
	    "share a key) over 256 MiB is skipped with a warning naming it, and\n"
	    "is an error too. A URL may be a brace pattern or a manifest\n"
	    "NAME.json.\n",
	.groups = extract_groups,
	.min_args = 1,
	.max_args = -1,
	.exec = cmd_extract_exec
};


struct extract {
	int dirfd;		/* the folder everything goes under */
	int verbose;
	int failed;
	uint64_t nrefused;
	const char *url;
	const struct sk_sample_member *m;
};

/* ------------------------------------------------------------------------ */
/* paths                                                                    */

static void __attribute__((format(printf, 2, 3)))
refuse(struct extract *x, const char *fmt, ...)
{
	char why[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	warn("%s: %s at offset %" PRIu64 ": %s", x->url, x->m->name,
	    x->m->header_offset, why);
	x->failed = 1;
	x->nrefused++;
}

static int
is_symlink(int dirfd, const char *name)
{
	struct stat st;
	int saved = errno, rc;

	rc = fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISLNK(st.st_mode);
	errno = saved;
	return rc;
}

/*
 * Open the folder that holds the last component of p, walking from DIR,
 * never following a symbolic link, creating folders when create is set.
 * Returns a descriptor (x->dirfd itself for the top level) or -1.
 */
static int
walk_parent(struct extract *x, const struct path *p, int create)
{
	int fd = x->dirfd, next;
	size_t i;

	for (i = 0; i + 1 < p->n; i++) {
		if (create && mkdirat(fd, p->c[i], 0755) < 0 &&
		    errno != EEXIST) {
			refuse(x, "cannot create folder %s: %s", p->c[i],
			    strerror(errno));
			next = -1;
		} else if ((next = openat(fd, p->c[i], O_RDONLY | O_DIRECTORY |
		    O_NOFOLLOW | O_CLOEXEC)) < 0)
			refuse(x, "%s: %s", p->c[i], is_symlink(fd, p->c[i]) ?
			    "a symbolic link, not followed" : strerror(errno));
		if (fd != x->dirfd)
			close(fd);
		if ((fd = next) < 0)
			return -1;
	}
	return fd;
}

/* Make room for a new entry: what was there goes, unless a folder. */
static int
clear_name(struct extract *x, int dirfd, const char *name)
{
	if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT) {
		refuse(x, "cannot replace %s: %s", name, strerror(errno));
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* entries                                                                  */

static void
extract_file(struct extract *x, int dirfd, const char *name)
{
	const uint8_t *p = x->m->data;
	size_t left = (size_t)x->m->size;
	ssize_t put;
	int fd, werr = 0;

	if (clear_name(x, dirfd, name) < 0)
		return;
	fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
	    O_CLOEXEC, 0644);
	if (fd < 0) {
		refuse(x, "cannot create: %s", strerror(errno));
		return;
	}
	while (left > 0 && werr == 0) {
		if ((put = write(fd, p, left)) >= 0) {
			p += put;
			left -= (size_t)put;
		} else if (errno != EINTR)
			werr = errno;
	}
	if (close(fd) < 0 && werr == 0)
		werr = errno;
	if (werr != 0) {
		/* No truncated file is left to pass for a whole one. */
		unlinkat(dirfd, name, 0);
		refuse(x, "write failed: %s", strerror(werr));
	}
}

static void
extract_hardlink(struct extract *x, int dirfd, const char *name)
{
	struct path t;
	int tfd;

	/* entry_refused() checked the target: relative, no "..", a name. */
	path_split(&t, x->m->linkname);
	if ((tfd = walk_parent(x, &t, 0)) < 0)
		goto out;
	/* A symbolic link's target was checked from its own folder; a hard
	 * link to it elsewhere would resolve differently. */
	if (is_symlink(tfd, t.c[t.n - 1]))
		refuse(x, "hard link to %s: a symbolic link", x->m->linkname);
	else if (clear_name(x, dirfd, name) == 0 &&
	    linkat(tfd, t.c[t.n - 1], dirfd, name, 0) < 0)
		refuse(x, "hard link to %s: %s", x->m->linkname,
		    strerror(errno));
	if (tfd != x->dirfd)
		close(tfd);
out:
	path_free(&t);
}

static void
extract_entry(struct extract *x)
{
	const struct sk_sample_member *m = x->m;
	const char *last;
	char why[1024];
	uint64_t nrefused = x->nrefused;
	struct path p;
	int dirfd = -1;

	path_split(&p, m->name);
	if (entry_refused(m->name, m->type, m->linkname, why,
	    sizeof why) != NULL) {
		refuse(x, "%s", why);
		goto out;
	}
	if (p.n == 0)
		goto out;	/* "." or "./": DIR itself */
	/* A file whose data the reader did not load was damaged; the reader
	 * reports it. */
	if (m->type == SK_TAR_FILE && m->data == NULL)
		goto out;
	if ((dirfd = walk_parent(x, &p, 1)) < 0)
		goto out;
	last = p.c[p.n - 1];
	switch (m->type) {
	case SK_TAR_FILE:
		extract_file(x, dirfd, last);
		break;
	case SK_TAR_DIR:
		if (mkdirat(dirfd, last, 0755) < 0 && errno != EEXIST)
			refuse(x, "cannot create folder: %s", strerror(errno));
		break;
	case SK_TAR_SYMLINK:
		if (clear_name(x, dirfd, last) == 0 &&
		    symlinkat(m->linkname, dirfd, last) < 0)
			refuse(x, "cannot create link: %s", strerror(errno));
		break;
	case SK_TAR_HARDLINK:
		extract_hardlink(x, dirfd, last);
		break;
	case SK_TAR_OTHER:
		break;
	}
	if (x->verbose && x->nrefused == nrefused) {
		sk__fputs_escaped(m->name, stdout);
		putchar('\n');
	}
out:
	if (dirfd >= 0 && dirfd != x->dirfd)
		close(dirfd);
	path_free(&p);
}

/* Every file's data: extract writes them all. */
static int
want_all(const char *ext, void *arg)
{
	(void)ext;
	(void)arg;
	return 1;
}

/*
 * Extract a shard sample by sample through the library's reader, so a
 * sample over its size cap is skipped (and named) rather than loaded; the
 * entries read whole before any damage are still extracted.
 */
static void
extract_shard(struct extract *x, const char *url, const char *shown)
{
	struct sk_sample s = { 0 };
	struct sk_error err;
	sk_sample_reader *r;
	size_t i, n;
	int rc;

	x->url = shown;
	if (samples_open(url, SK_TAR_ALL_ENTRIES, &r, &err) < 0) {
		warn("%s", err.msg);
		x->failed = 1;
		return;
	}
	do {
		rc = sk_sample_reader_next(r, &s, want_all, NULL);
		if (s.too_big) {
			warn_too_big(url, &s);
			x->failed = 1;
			continue;
		}
		n = sample_whole(&s, rc);
		for (i = 0; i < n; i++) {
			x->m = &s.m[i];
			extract_entry(x);
		}
	} while (rc > 0);
	if (rc < 0) {
		warn("%s", sk_errmsg(r));
		x->failed = 1;
	}
	sk_sample_free(&s);
	sk_sample_reader_close(r);
}

static int
cmd_extract_exec(int argc, char **argv)
{
	struct extract x = { .dirfd = -1 };
	struct shard_list shards;
	const char *dir = NULL;
	size_t i;
	int first;

	first = shards_parse(&cmd_extract_entry, argc, argv, extract_set, &dir);
	x.verbose = cli_verbose > 0;
	if (dir == NULL)
		usage_error("no folder given with -C");
	shards_expand(argc - first, argv + first, &shards);
	if ((x.dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		die("%s: %s", dir, strerror(errno));
	for (i = 0; i < shards.n; i++)
		extract_shard(&x, shards.v[i].url, shards.v[i].shown);
	close(x.dirfd);
	flush_stdout();
	shards_free(&shards);
	return x.failed;
}
