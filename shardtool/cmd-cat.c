/*
 * cmd-cat.c - write the bytes of one member of a shard to stdout.
 */
#include <errno.h>
#include <getopt.h>
#include <string.h>
#include <unistd.h>

#include "shards.h"

static int cmd_cat_exec(int, char **);

const struct cmd_entry cmd_cat_entry = {
	.name = "cat",
	.usage = "cat URL KEY.EXT",
	.help =
	    "Write the data of the member KEY.EXT to stdout. A URL may be a\n"
	    "brace pattern or a manifest NAME.json; the first shard holding\n"
	    "the member is used.\n"
	    "\n"
	    "options:\n"
	    "  -h, --help   print this help\n",
	.exec = cmd_cat_exec
};

static const struct option cat_options[] = {
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 }
};

/* GNU tar writes "./a.jpg" for "tar -C dir ."; "a.jpg" should find it. */
static int
same_name(const char *name, const char *want)
{
	if (strncmp(name, "./", 2) == 0 && strncmp(want, "./", 2) != 0)
		name += 2;
	return strcmp(name, want) == 0;
}

/* Write the member if this shard has it (*found), or < 0 when the shard is
 * damaged (reported). A failed write to stdout is fatal. */
static int
cat_shard(const char *url, const char *want, int *found)
{
	struct sk_tar_member m;
	struct sk_error err;
	sk_tar_reader *r;
	int rc, werr;

	if ((rc = tar_open(url, 0, &r, &err)) < 0) {
		warn("%s", err.msg);
		return rc;
	}
	while ((rc = sk_tar_reader_next(r, &m)) > 0 &&
	    !same_name(m.name, want))
		continue;
	if (rc > 0) {
		*found = 1;
		rc = copy_member(r, STDOUT_FILENO, &werr);
		if (rc < 0 && werr != 0)
			die("stdout: %s", strerror(werr));
	}
	if (rc < 0)
		warn("%s", sk_errmsg(r));
	sk_tar_reader_close(r);
	return rc;
}

static int
cmd_cat_exec(int argc, char **argv)
{
	struct shard_list shards;
	int failed = 0, found = 0, c;
	size_t i;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", cat_options, NULL)) != -1) {
		if (c == 'h')
			print_help(&cmd_cat_entry);
		bad_option(&cmd_cat_entry, c, argv);
	}
	if (argc - optind != 2)
		usage_error(&cmd_cat_entry, "need a URL and a member name");
	shards_expand(&cmd_cat_entry, 1, argv + optind, &shards);
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
