/*
 * shardtool.c - the command table and main: "shardtool CMD ARGS", where
 * CMD may be any unique prefix of a command name.
 */
#include "config.h"

#include <locale.h>
#ifdef HAVE_MALLOC_H
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardtool.h"

static const struct cmd_entry *cmd_table[] = {
	&cmd_synth_entry,
	&cmd_pack_entry,
	&cmd_ls_entry,
	&cmd_verify_entry,
	&cmd_index_entry,
	&cmd_cat_entry,
	&cmd_extract_entry,
	NULL
};

const char *progname = "shardtool";

static void
usage(FILE *f)
{
	const struct cmd_entry **c;

	fprintf(f, "usage: shardtool [--version] [--help] COMMAND [ARGS]\n\n"
	    "Convert datasets to WebDataset tar shards and inspect them.\n\n"
	    "commands:\n");
	for (c = cmd_table; *c != NULL; c++)
		fprintf(f, "  %s\n", (*c)->usage);
	fprintf(f, "\n'shardtool COMMAND --help' shows a command's options; "
	    "see shardtool(1).\n");
}

static const struct cmd_entry *
find_cmd(const char *name)
{
	const struct cmd_entry **c, *found = NULL;
	size_t len = strlen(name);
	int ambiguous = 0;

	for (c = cmd_table; *c != NULL; c++) {
		if (strcmp((*c)->name, name) == 0)
			return *c;
		if (strncmp((*c)->name, name, len) == 0) {
			ambiguous = found != NULL;
			found = *c;
		}
	}
	if (ambiguous) {
		fprintf(stderr, "shardtool: ambiguous command: %s\n", name);
		exit(EXIT_USAGE);
	}
	return found;
}

int
main(int argc, char **argv)
{
	static char name[64];
	const struct cmd_entry *cmd;

	/* libarchive converts member names through the locale's charset.
	 * One fixed UTF-8 locale keeps shards byte-identical whatever the
	 * user's LC_CTYPE, and holds names the C locale cannot. */
	if (setlocale(LC_CTYPE, "C.UTF-8") == NULL)
		setlocale(LC_CTYPE, "");
#ifdef HAVE_MALLOPT
	/* Each image encode or decode allocates and frees a few hundred KB
	 * (libjpeg, libpng, whole files). Keep that in the heap: glibc would
	 * otherwise mmap and munmap it per image, which took a third of
	 * pack's time in the kernel. */
	mallopt(M_MMAP_THRESHOLD, 8 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("shardtool (shardkit) %s\n", SK_VERSION_STRING);
		return 0;
	}
	if ((cmd = find_cmd(argv[1])) == NULL) {
		fprintf(stderr, "shardtool: unknown command: %s\n", argv[1]);
		usage(stderr);
		return EXIT_USAGE;
	}
	snprintf(name, sizeof name, "shardtool %s", cmd->name);
	progname = name;
	argv[1] = (char *)cmd->name;
	return cmd->exec(argc - 1, argv + 1);
}
