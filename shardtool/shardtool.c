/*
 * shardtool.c - the command table and main: "shardtool CMD ARGS", where
 * CMD may be any unique prefix of a command name.
 */
#include "config.h"

#include <locale.h>
#include <stdio.h>
#include <stdlib.h>

#include "shardtool.h"

static const struct cli_command *const cmd_table[] = {
	&cmd_synth_entry,
	&cmd_pack_entry,
	&cmd_ls_entry,
	&cmd_verify_entry,
	&cmd_index_entry,
	&cmd_cat_entry,
	&cmd_extract_entry,
	&cmd_cp_entry,
	NULL
};

static const char about[] =
"Convert datasets to WebDataset tar shards and inspect them.\n";

int
main(int argc, char **argv)
{
	const struct cli_command *cmd;
	int first;

	/* libarchive converts member names through the locale's charset.
	 * One fixed UTF-8 locale keeps shards byte-identical whatever the
	 * user's LC_CTYPE, and holds names the C locale cannot. */
	if (setlocale(LC_CTYPE, "C.UTF-8") == NULL)
		setlocale(LC_CTYPE, "");
	/* Each image encode or decode allocates and frees a few hundred KB
	 * (libjpeg, libpng, whole files): kept in the heap. */
	cli_heap_tune();
	cmd = cli_dispatch("shardtool", about, cmd_table, NULL, argc, argv,
	    &first);
	return cmd->exec(argc - first, argv + first);
}
