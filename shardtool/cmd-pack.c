/*
 * cmd-pack.c - "shardtool pack cifar10|imagenet|folder SRC -o PATTERN":
 * option parsing for the packing engine in pack.c.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pack.h"

static int pack_exec(int, char **);

const struct cmd_entry cmd_pack_entry = {
	.name = "pack",
	.usage = "pack cifar10|imagenet|folder SRC -o 'OUT/name-%06d.tar' "
	    "[options]",
	.help =
	    "Convert a dataset into WebDataset tar shards and a manifest.\n"
	    "\n"
	    "datasets:\n"
	    "  cifar10   the CIFAR-10 binary layout (data_batch_N.bin, "
	    "test_batch.bin)\n"
	    "  imagenet  ILSVRC2012: train/WNID/*.JPEG, or a flat val/ "
	    "labelled by\n"
	    "            LOC_val_solution.csv\n"
	    "  folder    any tree of SRC/CLASS/IMAGE\n"
	    "\n"
	    "options:\n"
	    "  -o, --output PATTERN  shard path with one %d, e.g. "
	    "'out/c10-%06d.tar' (required)\n"
	    "      --manifest PATH   the manifest (default: NAME.json "
	    "beside the shards)\n"
	    "      --split SPLIT     train (default), test (cifar10) or "
	    "val (imagenet)\n"
	    "      --format FMT      cifar10 images as png (default, "
	    "lossless) or jpg\n"
	    "      --quality Q       JPEG quality of every image shardtool "
	    "encodes (default 95)\n"
	    "      --resize-short N  re-encode images whose shorter side is "
	    "over N to N\n"
	    "      --maxcount N      at most N samples per shard "
	    "(default 10000)\n"
	    "      --maxsize BYTES   at most BYTES per shard unless one "
	    "sample is larger;\n"
	    "                        K, M, G, T suffixes (default 1G)\n"
	    "      --shuffle SEED    shuffle the samples with SEED before "
	    "packing\n"
	    "  -j, --jobs N          conversion threads (default: the "
	    "number of CPUs);\n"
	    "                        the shards are the same for every N\n"
	    "      --strict          stop at the first bad image instead "
	    "of skipping it\n"
	    "      --fsync           fsync each shard before renaming it "
	    "into place\n"
	    "      --progress        show progress even when stderr is "
	    "not a terminal\n"
	    "      --no-progress     never show progress\n"
	    "  -h, --help            print this help\n",
	.exec = pack_exec,
};

enum {
	OPT_MANIFEST = 256, OPT_SPLIT, OPT_FORMAT, OPT_QUALITY, OPT_RESIZE,
	OPT_MAXCOUNT, OPT_MAXSIZE, OPT_SHUFFLE, OPT_STRICT, OPT_FSYNC,
	OPT_PROGRESS, OPT_NO_PROGRESS
};

static const struct option longopts[] = {
	{ "output", required_argument, NULL, 'o' },
	{ "manifest", required_argument, NULL, OPT_MANIFEST },
	{ "split", required_argument, NULL, OPT_SPLIT },
	{ "format", required_argument, NULL, OPT_FORMAT },
	{ "quality", required_argument, NULL, OPT_QUALITY },
	{ "resize-short", required_argument, NULL, OPT_RESIZE },
	{ "maxcount", required_argument, NULL, OPT_MAXCOUNT },
	{ "maxsize", required_argument, NULL, OPT_MAXSIZE },
	{ "shuffle", required_argument, NULL, OPT_SHUFFLE },
	{ "jobs", required_argument, NULL, 'j' },
	{ "strict", no_argument, NULL, OPT_STRICT },
	{ "fsync", no_argument, NULL, OPT_FSYNC },
	{ "progress", no_argument, NULL, OPT_PROGRESS },
	{ "no-progress", no_argument, NULL, OPT_NO_PROGRESS },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 }
};

static int
pack_exec(int argc, char **argv)
{
	const struct cmd_entry *cmd = &cmd_pack_entry;
	struct pack_opts o = {
		.maxcount = 10000,
		.maxsize = 1ULL << 30,
		.shuffle = -1,
		.quality = 95,
		.image_format = SK_IMAGE_PNG,
		.progress = -1,
	};
	const char *split = NULL, *kind, *src;
	struct pack_dataset ds;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int c, rc, format_given = 0;

	o.jobs = ncpu > 0 ? (int)ncpu : 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":o:j:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'o':
			o.pattern = optarg;
			break;
		case OPT_MANIFEST:
			o.manifest = optarg;
			break;
		case OPT_SPLIT:
			split = optarg;
			break;
		case OPT_FORMAT:
			if (strcmp(optarg, "png") == 0)
				o.image_format = SK_IMAGE_PNG;
			else if (strcmp(optarg, "jpg") == 0 ||
			    strcmp(optarg, "jpeg") == 0)
				o.image_format = SK_IMAGE_JPEG;
			else
				usage_error(cmd, "--format: want png or jpg, "
				    "not '%s'", optarg);
			format_given = 1;
			break;
		case OPT_QUALITY:
			o.quality = (int)parse_int(cmd, "--quality", optarg, 1,
			    100);
			break;
		case OPT_RESIZE:
			o.resize_short = (int)parse_int(cmd, "--resize-short",
			    optarg, 1, 65535);
			break;
		case OPT_MAXCOUNT:
			o.maxcount = (uint64_t)parse_int(cmd, "--maxcount",
			    optarg, 1, INT64_MAX);
			break;
		case OPT_MAXSIZE:
			o.maxsize = parse_size(cmd, "--maxsize", optarg);
			if (o.maxsize < 2 * SK_TAR_TRAILER_BYTES)
				usage_error(cmd, "--maxsize: %s is smaller than "
				    "one tar block and the end marker", optarg);
			break;
		case OPT_SHUFFLE:
			o.shuffle = parse_int(cmd, "--shuffle", optarg, 0,
			    INT64_MAX);
			break;
		case 'j':
			o.jobs = (int)parse_int(cmd, "-j", optarg, 1, 1024);
			break;
		case OPT_STRICT:
			o.strict = 1;
			break;
		case OPT_FSYNC:
			o.fsync = 1;
			break;
		case OPT_PROGRESS:
			o.progress = 1;
			break;
		case OPT_NO_PROGRESS:
			o.progress = 0;
			break;
		case 'h':
			print_help(cmd);
		default:
			bad_option(cmd, c, argv);
		}
	}
	if (argc - optind != 2)
		usage_error(cmd, "want a dataset kind and a source directory");
	kind = argv[optind];
	src = argv[optind + 1];
	if (o.pattern == NULL)
		usage_error(cmd, "-o PATTERN is required");
	if (sk_source_date_epoch(&o.mtime) != 0)
		die("SOURCE_DATE_EPOCH=%s: want a non-negative integer of "
		    "seconds", getenv("SOURCE_DATE_EPOCH"));

	if (format_given && strcmp(kind, "cifar10") != 0)
		usage_error(cmd, "--format applies to cifar10 only; %s images "
		    "keep their own format", kind);
	if (strcmp(kind, "cifar10") == 0) {
		if (o.resize_short)
			usage_error(cmd, "--resize-short does not apply to "
			    "cifar10");
		pack_cifar10_init(&ds, src, split ? split : "train");
	} else if (strcmp(kind, "imagenet") == 0)
		pack_imagenet_init(&ds, src, split ? split : "train");
	else if (strcmp(kind, "folder") == 0) {
		if (split != NULL)
			usage_error(cmd, "--split does not apply to folder");
		pack_folder_init(&ds, src);
	} else
		usage_error(cmd, "unknown dataset '%s': want cifar10, imagenet "
		    "or folder", kind);
	rc = pack_run(&o, &ds);
	pack_dataset_free(&ds);
	return rc;
}
