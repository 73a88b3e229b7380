/*
 * cmd-cat.c - write the bytes of one member of a shard to stdout, read
 * through the library's sample reader (so within its sample size cap).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shards.h"

static int cmd_cat_exec(int, char **);

static const struct cli_group cat_groups[] = {
	SHARDS_REMOTE_GROUP, { NULL, NULL }
};

const struct cli_command cmd_cat_entry = {
	.name = "cat",
	.usage = "cat URL KEY.EXT",
	.summary = "write one member of a shard to stdout",
	.about =
	    "Write the data of the member KEY.EXT to stdout. A URL may be a\n"
	    "brace pattern or a manifest NAME.json; the first shard holding\n"
	    "the member is used. A member of a sample over 256 MiB (the sample\n"
	    "size cap) is not written: a warning names the sample, exit 1.\n",
	.groups = cat_groups,
	.min_args = 2,
	.max_args = 2,
	.exec = cmd_cat_exec
};


/* GNU tar writes "./a.jpg" for "tar -C dir ."; "a.jpg" should find it. */
static int
same_name(const char *name, const char *want)
{
	if (strncmp(name, "./", 2) == 0 && strncmp(want, "./", 2) != 0)
		name += 2;
	return strcmp(name, want) == 0;
}

/* The member cat looks for, split as the sample reader splits names. */
struct cat_want {
	const struct sk_sample *s;	/* the sample being read */
	const char *name;
	char *key;
	const char *ext;
};

/*
 * Load only what may be the member: its extension, in a sample with its
 * key. The reader offers an extension, not a name, but it sets the
 * sample's key before offering its members; without a key every member
 * with the extension is loaded, which costs time, not correctness.
 */
static int
cat_wanted(const char *ext, void *arg)
{
	const struct cat_want *w = arg;

	return strcmp(ext, w->ext) == 0 &&
	    (w->s->key == NULL || same_name(w->s->key, w->key));
}

/* Write the member if this shard has it (*found), or < 0 when the shard is
 * damaged or the member's sample is over the size cap (reported). A failed
 * write to stdout is fatal. */
static int
cat_shard(const char *url, const char *name, int *found)
{
	struct sk_sample s = { 0 };
	struct cat_want w = { .s = &s, .name = name };
	const struct sk_sample_member *m = NULL;
	struct sk_error err;
	sk_sample_reader *r;
	size_t i, n, left;
	const uint8_t *p;
	ssize_t put;
	int rc;

	if ((rc = samples_open(url, 0, &r, &err)) < 0) {
		warn("%s", err.msg);
		return rc;
	}
	w.key = xstrdup(name);
	w.key[sk_key_split(name, &w.ext)] = '\0';
	do {
		rc = sk_sample_reader_next(r, &s, cat_wanted, &w);
		n = sample_whole(&s, rc);
		for (i = 0; i < n && m == NULL; i++)
			if (same_name(s.m[i].name, name))
				m = &s.m[i];
	} while (m == NULL && rc > 0);
	if (m != NULL) {
		*found = 1;
		rc = 0;
		if (s.too_big) {
			warn_too_big(url, &s);
			rc = SK_ETOOBIG;
		}
		for (p = m->data, left = m->data != NULL ? (size_t)m->size : 0;
		    left > 0; p += put, left -= (size_t)put) {
			if ((put = write(STDOUT_FILENO, p, left)) < 0 &&
			    errno != EINTR)
				die("stdout: %s", strerror(errno));
			if (put < 0)
				put = 0;
		}
	} else if (rc < 0)
		warn("%s", sk_errmsg(r));
	free(w.key);
	sk_sample_free(&s);
	sk_sample_reader_close(r);
	return rc;
}

static int
cmd_cat_exec(int argc, char **argv)
{
	struct shard_list shards;
	int failed = 0, found = 0, optind;
	size_t i;

	optind = shards_parse(&cmd_cat_entry, argc, argv, NULL, NULL);
	shards_expand(1, argv + optind, &shards);
	for (i = 0; i < shards.n && !found; i++) {
		if (cat_shard(shards.v[i].url, argv[optind + 1], &found) < 0)
			failed = 1;
	}
	shards_free(&shards);
	/* A damaged shard was reported; it may have held the member. */
	if (!found && !failed)
		die("%s: no such member in %s", argv[optind + 1],
		    argv[optind]);
	return failed;
}
