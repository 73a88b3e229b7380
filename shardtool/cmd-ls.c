/*
 * cmd-ls.c - list the samples of shards (key and extensions), or with -l
 * their members with data offset and size.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "shards.h"

static int cmd_ls_exec(int, char **);

static const struct cli_option ls_options[] = {
	{ "long", 'l', 'l', CLI_FLAG, NULL,
	    "list members instead: data offset, size and name", 0, 0, NULL, 0 },
	OPT_END
};
static const struct cli_group ls_groups[] = {
	{ "ls", ls_options }, SHARDS_REMOTE_GROUP, { NULL, NULL }
};

const struct cli_command cmd_ls_entry = {
	.name = "ls",
	.usage = "ls [-l] URL...",
	.summary = "list the samples (or members) of shards",
	.about =
	    "List the samples of each shard, one per line: the key, a tab and\n"
	    "the extensions of its members in tar order. With several shards\n"
	    "each shard's list follows a line \"URL:\". A URL may be a brace\n"
	    "pattern or a manifest NAME.json. A folder (URL/) with no shards\n"
	    "lists its sub-folders and objects, as aws s3 ls does; -l adds\n"
	    "their sizes and times.\n",
	.groups = ls_groups,
	.min_args = 1,
	.max_args = -1,
	.exec = cmd_ls_exec
};


/* The first n members of s: those read whole. Names are shown escaped
 * (sk_escape): a tar's names may hold anything but NUL and '/'s. */
static void
ls_print(const struct sk_sample *s, size_t n, int long_format)
{
	size_t i;

	if (n == 0)
		return;
	if (long_format) {
		for (i = 0; i < n; i++) {
			printf("%" PRIu64 " %" PRIu64 " ",
			    s->m[i].data_offset, s->m[i].size);
			sk__fputs_escaped(s->m[i].name, stdout);
			putchar('\n');
		}
		return;
	}
	sk__fputs_escaped(s->key, stdout);
	putchar('\t');
	for (i = 0; i < n; i++) {
		if (i > 0)
			putchar(' ');
		sk__fputs_escaped(s->m[i].ext, stdout);
	}
	putchar('\n');
}

/* List one shard; what was read before any damage is still listed. */
static int
ls_shard(const char *url, int long_format)
{
	struct sk_sample s = { 0 };
	struct sk_error err;
	sk_sample_reader *r;
	int rc;

	if ((rc = samples_open(url, 0, &r, &err)) < 0) {
		warn("%s", err.msg);
		return rc;
	}
	do {
		rc = sk_sample_reader_next(r, &s, NULL, NULL);
		ls_print(&s, sample_whole(&s, rc), long_format);
	} while (rc > 0);
	if (rc < 0)
		warn("%s", sk_errmsg(r));
	sk_sample_free(&s);
	sk_sample_reader_close(r);
	return rc;
}

/*
 * A remote folder that holds no shards, listed as aws s3 ls and gcloud
 * storage ls list one: "PRE name/" for a sub-folder, then the objects
 * (with -l their time and size). 0 when url holds shards or is local (the
 * caller lists their samples), 1 when it was listed here, -1 when it
 * could not be.
 */
static int
ls_folder(const char *url, int long_format)
{
	struct sk__entries e = { 0 };
	struct sk_error err;
	struct tm tm;
	char when[32];
	time_t t;
	size_t i;
	int rc = 1;

	if (strstr(url, "://") == NULL || strncmp(url, "file://", 7) == 0)
		return 0;	/* a local folder: its shards, as before */
	if (sk__source_list_entries(url, &e, &err) != 0) {
		warn("%s", err.msg);
		sk__entries_free(&e);
		return -1;
	}
	for (i = 0; i < e.n; i++)
		if (!e.v[i].dir && sk__is_tar_name(e.v[i].name))
			rc = 0;
	if (rc == 1 && e.n == 0) {
		warn("%s: nothing in this folder (or no such prefix)", url);
		rc = -1;
	}
	for (i = 0; rc == 1 && i < e.n; i++) {
		if (e.v[i].dir)
			fputs(long_format ? "                           PRE " :
			    "PRE ", stdout);
		else if (long_format) {
			t = (time_t)e.v[i].mtime;
			if (e.v[i].mtime > 0 && gmtime_r(&t, &tm) != NULL)
				strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S",
				    &tm);
			else
				snprintf(when, sizeof when, "%19s", "-");
			printf("%s %10" PRIu64 " ", when, e.v[i].size);
		}
		sk__fputs_escaped(e.v[i].name, stdout);
		fputs(e.v[i].dir ? "/\n" : "\n", stdout);
	}
	sk__entries_free(&e);
	return rc;
}

static void
set_flag(void *ctx, const struct cli_option *o, const struct cli_value *v)
{
	(void)o;
	(void)v;
	*(int *)ctx = 1;
}

static int
cmd_ls_exec(int argc, char **argv)
{
	struct shard_list shards;
	int long_format = 0, failed = 0, optind, rc;
	size_t i, j;

	optind = shards_parse(&cmd_ls_entry, argc, argv, set_flag, &long_format);
	/* Folders without shards are listed here and left out below. */
	for (i = (size_t)optind, j = (size_t)optind; i < (size_t)argc; i++) {
		size_t len = strlen(argv[i]);

		if (len > 0 && argv[i][len - 1] == '/' &&
		    (rc = ls_folder(argv[i], long_format)) != 0) {
			failed |= rc < 0;
			continue;
		}
		argv[j++] = argv[i];
	}
	argc = (int)j;
	if (argc == optind) {
		flush_stdout();
		return failed;
	}
	shards_expand(argc - optind, argv + optind, &shards);
	for (i = 0; i < shards.n; i++) {
		/* a folder's or bucket's names: shown escaped */
		if (shards.n > 1) {
			fputs(i > 0 ? "\n" : "", stdout);
			sk__fputs_escaped(shards.v[i].shown, stdout);
			fputs(":\n", stdout);
		}
		if (ls_shard(shards.v[i].url, long_format) < 0)
			failed = 1;
	}
	flush_stdout();
	shards_free(&shards);
	return failed;
}
