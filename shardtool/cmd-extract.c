/*
 * cmd-extract.c - extract the members of shards into a folder, refusing
 * any entry that could write or point outside it.
 *
 * Every path is walked from a descriptor of the folder one component at a
 * time with O_NOFOLLOW, and files are created with O_EXCL after removing
 * what was there, so neither a link in the archive nor one already in the
 * folder can redirect a write.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shards.h"

static int cmd_extract_exec(int, char **);

const struct cmd_entry cmd_extract_entry = {
	.name = "extract",
	.usage = "extract [-v] -C DIR URL...",
	.help =
	    "Extract every entry of the shards into the folder DIR, which must\n"
	    "exist: files (mode 0644), folders (0755), symbolic and hard links.\n"
	    "Entries that would land or point outside DIR are refused: absolute\n"
	    "names, \"..\" components, links with absolute targets, symbolic\n"
	    "links whose target climbs out of DIR or has \"..\" after a name,\n"
	    "and writes through a link already in DIR. A refused entry is an\n"
	    "error; the others are still extracted. A URL may be a brace\n"
	    "pattern or a manifest NAME.json.\n"
	    "\n"
	    "options:\n"
	    "  -C, --directory DIR   extract into DIR\n"
	    "  -v, --verbose         print each name extracted\n"
	    "  -h, --help            print this help\n",
	.exec = cmd_extract_exec
};

static const struct option extract_options[] = {
	{ "directory", required_argument, NULL, 'C' },
	{ "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 }
};

struct extract {
	int dirfd;		/* the folder everything goes under */
	int verbose;
	int failed;
	uint64_t nrefused;
	const char *url;
	const struct sk_tar_member *m;
};

/* A path cut into its components, "." and empty ones dropped. */
struct path {
	char *buf;
	char **c;
	size_t n;
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

static void
path_split(struct path *p, const char *s)
{
	char *save = NULL, *tok;

	p->buf = xstrdup(s);
	p->c = xcalloc(strlen(s) / 2 + 2, sizeof *p->c);
	p->n = 0;
	for (tok = strtok_r(p->buf, "/", &save); tok != NULL;
	    tok = strtok_r(NULL, "/", &save))
		if (strcmp(tok, ".") != 0)
			p->c[p->n++] = tok;
}

static void
path_free(struct path *p)
{
	free(p->buf);
	free(p->c);
}

/* A name inside DIR: relative, without "..". NULL if so, else why not. */
static const char *
path_unsafe(const char *s, const struct path *p)
{
	size_t i;

	if (s[0] == '/')
		return "absolute path";
	for (i = 0; i < p->n; i++)
		if (strcmp(p->c[i], "..") == 0)
			return "path with a \"..\" component";
	return NULL;
}

/*
 * A symbolic link at depth (folders under DIR) may point to target when
 * the target is relative and all its ".." components come first and climb
 * no higher than DIR. Lexically resolving "a/../.." would allow too much:
 * the kernel follows a link in "a" before applying "..", so a chain of
 * such links could climb out.
 */
static const char *
symlink_unsafe(const char *target, size_t depth)
{
	struct path p;
	const char *why = NULL;
	size_t i, up = 0;

	if (target[0] == '\0')
		return "empty target";
	if (target[0] == '/')
		return "absolute target";
	path_split(&p, target);
	for (i = 0; i < p.n && why == NULL; i++) {
		if (strcmp(p.c[i], "..") != 0)
			continue;
		if (i > up)
			why = "\"..\" after a name in the target";
		else if (++up > depth)
			why = "target outside the folder";
	}
	path_free(&p);
	return why;
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

/* < 0 only when the reader failed, which ends the shard. */
static int
extract_file(struct extract *x, sk_tar_reader *r, int dirfd,
    const char *name)
{
	int fd, rc, werr;

	if (clear_name(x, dirfd, name) < 0)
		return 0;
	fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
	    O_CLOEXEC, 0644);
	if (fd < 0) {
		refuse(x, "cannot create: %s", strerror(errno));
		return 0;
	}
	rc = copy_member(r, fd, &werr);
	if (close(fd) < 0 && rc == 0) {
		rc = SK_EIO;
		werr = errno;
	}
	if (rc < 0) {
		/* No truncated file is left to pass for a whole one. */
		unlinkat(dirfd, name, 0);
		if (werr == 0)
			return rc;
		refuse(x, "write failed: %s", strerror(werr));
	}
	return 0;
}

static void
extract_hardlink(struct extract *x, int dirfd, const char *name)
{
	struct path t;
	const char *why;
	int tfd;

	path_split(&t, x->m->linkname);
	if ((why = path_unsafe(x->m->linkname, &t)) != NULL || t.n == 0) {
		refuse(x, "hard link to %s: %s", x->m->linkname,
		    why != NULL ? why : "empty target");
		goto out;
	}
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

/* < 0 only when the reader failed, which ends the shard. */
static int
extract_entry(struct extract *x, sk_tar_reader *r)
{
	const struct sk_tar_member *m = x->m;
	const char *why, *last;
	uint64_t nrefused = x->nrefused;
	struct path p;
	int dirfd = -1, rc = 0;

	path_split(&p, m->name);
	if ((why = path_unsafe(m->name, &p)) != NULL) {
		refuse(x, "%s", why);
		goto out;
	}
	if (p.n == 0)
		goto out;	/* "." or "./": DIR itself */
	if (m->type == SK_TAR_SYMLINK &&
	    (why = symlink_unsafe(m->linkname, p.n - 1)) != NULL) {
		refuse(x, "symbolic link to %s: %s", m->linkname, why);
		goto out;
	}
	if (m->type == SK_TAR_OTHER) {
		refuse(x, "not a file, folder or link");
		goto out;
	}
	if ((dirfd = walk_parent(x, &p, 1)) < 0)
		goto out;
	last = p.c[p.n - 1];
	switch (m->type) {
	case SK_TAR_FILE:
		rc = extract_file(x, r, dirfd, last);
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
	if (x->verbose && rc == 0 && x->nrefused == nrefused)
		printf("%s\n", m->name);
out:
	if (dirfd >= 0 && dirfd != x->dirfd)
		close(dirfd);
	path_free(&p);
	return rc;
}

static void
extract_shard(struct extract *x, const char *url)
{
	struct sk_tar_member m;
	struct sk_error err;
	sk_tar_reader *r;
	int rc;

	x->url = url;
	x->m = &m;
	if (tar_open(url, SK_TAR_ALL_ENTRIES, &r, &err) < 0) {
		warn("%s", err.msg);
		x->failed = 1;
		return;
	}
	while ((rc = sk_tar_reader_next(r, &m)) > 0 &&
	    (rc = extract_entry(x, r)) >= 0)
		continue;
	if (rc < 0) {
		warn("%s", sk_errmsg(r));
		x->failed = 1;
	}
	sk_tar_reader_close(r);
}

static int
cmd_extract_exec(int argc, char **argv)
{
	struct extract x = { .dirfd = -1 };
	struct shard_list shards;
	const char *dir = NULL;
	size_t i;
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":C:vh", extract_options,
	    NULL)) != -1) {
		switch (c) {
		case 'C':
			dir = optarg;
			break;
		case 'v':
			x.verbose = 1;
			break;
		case 'h':
			print_help(&cmd_extract_entry);
		default:
			bad_option(&cmd_extract_entry, c, argv);
		}
	}
	if (dir == NULL)
		usage_error(&cmd_extract_entry, "no folder given with -C");
	shards_expand(&cmd_extract_entry, argc - optind, argv + optind,
	    &shards);
	if ((x.dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		die("%s: %s", dir, strerror(errno));
	for (i = 0; i < shards.n; i++)
		extract_shard(&x, shards.v[i].url);
	close(x.dirfd);
	flush_stdout();
	shards_free(&shards);
	return x.failed;
}
