/*
 * cmd-pack.c - "shardtool pack cifar10|imagenet|folder SRC -o PATTERN":
 * option parsing for the packing engine in pack.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pack.h"
#include "shards.h"

static int pack_exec(int, char **);

enum {
	OPT_OUTPUT = 1, OPT_MANIFEST, OPT_SPLIT, OPT_FORMAT, OPT_QUALITY,
	OPT_RESIZE, OPT_MAX_COUNT, OPT_MAX_SIZE, OPT_SEED, OPT_WORKERS,
	OPT_STRICT, OPT_FSYNC, OPT_JSON
};

static const char *const formats[] = { "png", "jpg", "jpeg", NULL };

static const struct cli_option pack_options[] = {
	{ "output", 'o', OPT_OUTPUT, CLI_STRING, "PATTERN",
	    "shard path with one %d, e.g. 'out/c10-%06d.tar'\nor "
	    "'gs://bucket/c10-%06d.tar' (required)", 0, 0, NULL, 0 },
	{ "manifest", 0, OPT_MANIFEST, CLI_STRING, "PATH",
	    "the manifest (default: NAME.json beside the shards)", 0, 0, NULL,
	    0 },
	{ "split", 0, OPT_SPLIT, CLI_STRING, "SPLIT",
	    "train (default), test (cifar10) or val (imagenet)", 0, 0, NULL,
	    0 },
	{ "format", 0, OPT_FORMAT, CLI_CHOICE, "png|jpg",
	    "cifar10 images as png (default, lossless) or jpg", 0, 0, formats,
	    0 },
	{ "quality", 0, OPT_QUALITY, CLI_INT, "Q",
	    "JPEG quality of every image shardtool encodes (95)", 1, 100,
	    NULL, 0 },
	{ "resize-short", 0, OPT_RESIZE, CLI_INT, "N",
	    "re-encode images whose shorter side is over N to N", 1, 65535,
	    NULL, 0 },
	{ "max-count", 0, OPT_MAX_COUNT, CLI_INT, "N",
	    "at most N samples per shard (10000)", 1, 9e18, NULL, 0 },
	{ "max-size", 0, OPT_MAX_SIZE, CLI_SIZE, "SIZE",
	    "at most SIZE bytes per shard unless one sample is\nlarger (1G)",
	    2 * SK_TAR_TRAILER_BYTES, 1ULL << 50, NULL, 0 },
	{ "seed", 0, OPT_SEED, CLI_UINT64, "N",
	    "shuffle the samples with seed N before packing\n"
	    "(default: keep the source order)", 0, 0, NULL, 0 },
	{ "workers", 'j', OPT_WORKERS, CLI_INT, "N",
	    "conversion threads (this rank's CPUs); the shards\n"
	    "are the same for every N", 1, 1024, NULL, 0 },
	{ "strict", 0, OPT_STRICT, CLI_FLAG, NULL,
	    "stop at the first bad image instead of skipping it", 0, 0, NULL,
	    0 },
	{ "fsync", 0, OPT_FSYNC, CLI_FLAG, NULL,
	    "fsync each shard before renaming it into place", 0, 0, NULL, 0 },
	{ "json", 0, OPT_JSON, CLI_STRING, "FILE",
	    "write the counts as JSON (- for stdout)", 0, 0, NULL, 0 },
	OPT_END
};

static const struct cli_group pack_groups[] = {
	{ "pack", pack_options }, SHARDS_REMOTE_GROUP, { NULL, NULL }
};

const struct cli_command cmd_pack_entry = {
	.name = "pack",
	.usage = "pack cifar10|imagenet|folder SRC -o 'OUT/name-%06d.tar' "
	    "[options]",
	.summary = "convert a dataset into tar shards and a manifest",
	.about =
	    "Convert a dataset into WebDataset tar shards and a manifest.\n"
	    "\n"
	    "datasets:\n"
	    "  cifar10   the CIFAR-10 binary layout (data_batch_N.bin, "
	    "test_batch.bin)\n"
	    "  imagenet  ILSVRC2012: train/WNID/*.JPEG, or a flat val/ "
	    "labelled by\n"
	    "            LOC_val_solution.csv\n"
	    "  folder    any tree of SRC/CLASS/IMAGE\n",
	.groups = pack_groups,
	.min_args = 2,
	.max_args = 2,
	.exec = pack_exec,
};

struct pack_cli {
	struct pack_opts o;
	struct cli_remote remote;
	const char *split;
	int format_given;
};

static void
pack_set(void *ctx, const struct cli_option *opt, const struct cli_value *v)
{
	struct pack_cli *p = ctx;
	struct pack_opts *o = &p->o;

	if (cli_remote_set(&p->remote, opt, v))
		return;

	switch (opt->id) {
	case OPT_OUTPUT: o->pattern = v->s; break;
	case OPT_MANIFEST: o->manifest = v->s; break;
	case OPT_SPLIT: p->split = v->s; break;
	case OPT_FORMAT:
		o->image_format = v->i == 0 ? SK_IMAGE_PNG : SK_IMAGE_JPEG;
		p->format_given = 1;
		break;
	case OPT_QUALITY: o->quality = (int)v->i; break;
	case OPT_RESIZE: o->resize_short = (int)v->i; break;
	case OPT_MAX_COUNT: o->maxcount = (uint64_t)v->i; break;
	case OPT_MAX_SIZE: o->maxsize = v->u; break;
	case OPT_SEED: o->seed = v->u; o->shuffle = 1; break;
	case OPT_WORKERS: o->workers = (int)v->i; break;
	case OPT_STRICT: o->strict = 1; break;
	case OPT_FSYNC: o->fsync = 1; break;
	case OPT_JSON: o->json = v->s; break;
	}
}

static int
pack_exec(int argc, char **argv)
{
	struct pack_cli p = {
		.o = {
			.maxcount = 10000,
			.maxsize = 1ULL << 30,
			.quality = 95,
			.image_format = SK_IMAGE_PNG,
			.progress = -1,
		},
	};
	struct pack_opts o;
	const char *split, *kind, *src;
	struct pack_dataset ds;
	int rc, format_given, optind;

	p.o.workers = cli_cpus_per_rank();
	cli_remote_init(&p.remote);
	optind = cli_parse(&cmd_pack_entry, argc, argv, pack_set, &p);
	cli_remote_finish(&p.remote);
	o = p.o;
	split = p.split;
	format_given = p.format_given;
	if (cli_quiet)
		o.progress = 0;
	kind = argv[optind];
	src = argv[optind + 1];
	o.source = src;
	if (o.pattern == NULL)
		usage_error("-o PATTERN is required");
	if (sk_source_date_epoch(&o.mtime) != 0)
		die("SOURCE_DATE_EPOCH=%s: want a non-negative integer of "
		    "seconds", getenv("SOURCE_DATE_EPOCH"));

	if (format_given && strcmp(kind, "cifar10") != 0)
		usage_error("--format applies to cifar10 only; %s images "
		    "keep their own format", kind);
	if (strcmp(kind, "cifar10") == 0) {
		if (o.resize_short)
			usage_error("--resize-short does not apply to "
			    "cifar10");
		pack_cifar10_init(&ds, src, split ? split : "train");
	} else if (strcmp(kind, "imagenet") == 0)
		pack_imagenet_init(&ds, src, split ? split : "train");
	else if (strcmp(kind, "folder") == 0) {
		if (split != NULL)
			usage_error("--split does not apply to folder");
		pack_folder_init(&ds, src);
	} else
		usage_error("unknown dataset '%s': want cifar10, imagenet "
		    "or folder", kind);
	rc = pack_run(&o, &ds);
	pack_dataset_free(&ds);
	return rc;
}
