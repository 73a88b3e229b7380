/*
 * cli-loader.c - the loader options shardload and shardtrain share (and the
 * mount to come): one table, so each flag has one meaning, one limit and
 * one default in every tool, and one place that fills sk_loader_config.
 */
#include "config.h"

#include <string.h>
#include <strings.h>

#include "cli.h"

static const char *const crops[] = { "random-resized", "center", "none",
    NULL };
static const char *const dtypes[] = { "u8", "f32", "bf16", "f16", NULL };
static const char *const layouts[] = { "nhwc", "nchw", NULL };
static const char *const remainders[] = { "drop", "keep", NULL };
static const char *const forms[] = { "auto", "shards", "files", NULL };

#define OPT(name, id, type, arg, help, min, max) \
	{ name, 0, id, type, arg, help, min, max, NULL, 0 }
#define END { NULL, 0, 0, 0, NULL, NULL, 0, 0, NULL, 0 }

const struct cli_option cli_loader_data[] = {
	OPT("batch", CLI_L_BATCH, CLI_INT, "N",
	    "samples per batch on each rank (256)", 1, SK_LOADER_MAX_BATCH),
	OPT("epochs", CLI_L_EPOCHS, CLI_INT, "N", "epochs to stream (1)", 1,
	    SK_LOADER_MAX_EPOCHS),
	{ "seed", 0, CLI_L_SEED, CLI_UINT64, "N",
	    "seed of the shard order, shuffle and augmentation (0)", 0, 0,
	    NULL, 0 },
	OPT("shuffle", CLI_L_SHUFFLE, CLI_INT, "N",
	    "shuffle buffer in samples (0: shard order only)", 0,
	    SK_LOADER_MAX_SHUFFLE),
	OPT("strict", CLI_L_STRICT, CLI_FLAG, NULL,
	    "a bad sample or damaged shard is fatal", 0, 0),
	OPT("max-pixels", CLI_L_MAX_PIXELS, CLI_INT, "N",
	    "skip images with more pixels (100000000)", 1, 1e15),
	OPT("max-sample-size", CLI_L_MAX_SAMPLE, CLI_SIZE, "SIZE",
	    "skip samples larger than this, unread (256M)", 1, 1ULL << 40),
	{ "form", 0, CLI_L_FORM, CLI_CHOICE, "auto|shards|files",
	    "what SOURCE holds: tar shards, or image files in\n"
	    "CLASS folders (auto: a folder with .tar files is\n"
	    "shards, one with only subfolders a files tree)", 0, 0, forms,
	    0 },
	END
};

const struct cli_option cli_loader_pipeline[] = {
	OPT("workers", CLI_L_WORKERS, CLI_INT, "N",
	    "decode threads (this rank's CPUs; under mpirun\n"
	    "or srun, shared among the node's ranks)", 1,
	    SK_LOADER_MAX_WORKERS),
	OPT("io-streams", CLI_L_IO_STREAMS, CLI_INT, "N",
	    "shards read at once (2)", 1, SK_LOADER_MAX_IO_STREAMS),
	OPT("prefetch", CLI_L_PREFETCH, CLI_SIZE, "SIZE",
	    "bytes read ahead of the shuffle buffer (64M)", 1, 1ULL << 40),
	OPT("ahead", CLI_L_AHEAD, CLI_INT, "N",
	    "remote shards each I/O stream opens ahead (0: as\n"
	    "many as raise the rate; 1 when --io-streams, --parts\n"
	    "or --part-size is given)", 0, SK_LOADER_MAX_AHEAD),
	OPT("max-inflight", CLI_L_MAX_INFLIGHT, CLI_SIZE, "SIZE",
	    "bytes of remote parts --ahead 0 may keep in flight\n"
	    "(256M)", 1 << 20, 1ULL << 40),
	OPT("ring", CLI_L_RING, CLI_INT, "N",
	    "batch slots (at least 3; 2 + 2 x workers / batch)",
	    SK_LOADER_MIN_RING, SK_LOADER_MAX_RING),
	END
};

const struct cli_option cli_loader_augment[] = {
	OPT("image-size", CLI_L_IMAGE_SIZE, CLI_INT, "N",
	    "output height and width in pixels (224)", 1,
	    SK_LOADER_MAX_IMAGE_SIZE),
	{ "crop", 0, CLI_L_CROP, CLI_CHOICE, "random-resized|center|none",
	    "the crop (random-resized)", 0, 0, crops, 0 },
	{ "scale", 0, CLI_L_SCALE, CLI_LIST, "A,B",
	    "random-resized area fraction (0.08,1)", 0, 0, NULL, 2 },
	{ "ratio", 0, CLI_L_RATIO, CLI_LIST, "A,B",
	    "random-resized aspect range (0.75,1.3333)", 0, 0, NULL, 2 },
	OPT("resize", CLI_L_RESIZE, CLI_INT, "N",
	    "center: the short side before the crop\n(image size x 8/7)", 1,
	    SK_LOADER_MAX_RESIZE),
	OPT("flip", CLI_L_FLIP, CLI_FLAG, NULL,
	    "random horizontal flip (on)", 0, 0),
	OPT("no-flip", CLI_L_NO_FLIP, CLI_FLAG, NULL, "no flip", 0, 0),
	END
};

const struct cli_option cli_loader_output[] = {
	{ "dtype", 0, CLI_L_DTYPE, CLI_CHOICE, "u8|f32|bf16|f16",
	    "pixel type (u8; floats are normalized)", 0, 0, dtypes, 0 },
	{ "layout", 0, CLI_L_LAYOUT, CLI_CHOICE, "nhwc|nchw",
	    "pixel layout (nhwc)", 0, 0, layouts, 0 },
	{ "mean", 0, CLI_L_MEAN, CLI_LIST, "A,B,C",
	    "float outputs: (v/255 - mean) / std", 0, 0, NULL, 3 },
	{ "std", 0, CLI_L_STD, CLI_LIST, "A,B,C", "(ImageNet's mean and std)",
	    0, 0, NULL, 3 },
	OPT("no-decode", CLI_L_NO_DECODE, CLI_FLAG, NULL,
	    "read and split shards only, no pixels", 0, 0),
	OPT("device", CLI_L_DEVICE, CLI_INT, "N",
	    "copy batches to CUDA device N", 0, 1024),
	END
};

const struct cli_option cli_loader_ranks[] = {
	OPT("epoch", CLI_L_EPOCH, CLI_INT, "N", "the first epoch (0)", 0,
	    SK_LOADER_MAX_EPOCH),
	OPT("resume-batch", CLI_L_RESUME_BATCH, CLI_INT, "N",
	    "start the first epoch at batch N (0)", 0, SK_LOADER_MAX_EPOCH),
	{ "remainder", 0, CLI_L_REMAINDER, CLI_CHOICE, "drop|keep",
	    "samples that do not fill a batch on every rank:\n"
	    "left out (drop), or in short batches (keep)", 0, 0, remainders,
	    0 },
	OPT("rank", CLI_L_RANK, CLI_INT, "N",
	    "this rank (0; under mpirun/srun, the launcher's)", 0,
	    SK_LOADER_MAX_RANKS - 1),
	OPT("world", CLI_L_WORLD, CLI_INT, "N",
	    "ranks in all (1; under mpirun/srun, the launcher's)", 1,
	    SK_LOADER_MAX_RANKS),
	END
};

void
cli_loader_init(struct cli_loader *l)
{
	memset(l, 0, sizeof *l);
	sk_loader_config_init(&l->cfg);
	cli_remote_init(&l->remote);
	l->local_size = 1;
}

int
cli_loader_set(struct cli_loader *l, const struct cli_option *o,
    const struct cli_value *v)
{
	struct sk_loader_config *c = &l->cfg;
	int i;

	if (cli_remote_set(&l->remote, o, v)) {
		if (o->id == CLI_R_PARTS || o->id == CLI_R_PART_SIZE)
			l->io_fixed = 1;
		return 1;
	}
	switch (o->id) {
	case CLI_L_BATCH: c->batch = (int)v->i; break;
	case CLI_L_EPOCH: c->epoch = (int)v->i; break;
	case CLI_L_EPOCHS: c->epochs = (int)v->i; break;
	case CLI_L_SEED: c->seed = v->u; break;
	case CLI_L_SHUFFLE: c->shuffle = (int)v->i; break;
	case CLI_L_WORKERS: c->workers = (int)v->i; l->workers_set = 1; break;
	case CLI_L_IO_STREAMS: c->io_streams = (int)v->i; l->io_fixed = 1;
		break;
	case CLI_L_AHEAD: c->ahead = (int)v->i; l->ahead_set = 1; break;
	case CLI_L_MAX_INFLIGHT: c->max_inflight = v->u; break;
	case CLI_L_PREFETCH: c->prefetch_bytes = (size_t)v->u; break;
	case CLI_L_RING: c->ring = (int)v->i; break;
	case CLI_L_REMAINDER: c->remainder = (enum sk_remainder)v->i; break;
	case CLI_L_FORM: c->form = (enum sk_form)v->i; break;
	case CLI_L_RESUME_BATCH: c->resume_batch = (int)v->i; break;
	case CLI_L_STRICT: c->strict = 1; break;
	case CLI_L_MAX_PIXELS: c->max_pixels = (uint64_t)v->i; break;
	case CLI_L_MAX_SAMPLE: c->max_sample_bytes = v->u; break;
	case CLI_L_NO_DECODE: c->decode = 0; break;
	case CLI_L_RANK: c->rank = (int)v->i; l->rank_set = 1; break;
	case CLI_L_WORLD: c->world = (int)v->i; l->world_set = 1; break;
	case CLI_L_DEVICE: c->device = (int)v->i; break;
	case CLI_L_IMAGE_SIZE: c->image_size = (int)v->i; break;
	case CLI_L_CROP: c->crop = (enum sk_crop)v->i; break;
	case CLI_L_SCALE: c->scale[0] = v->list[0]; c->scale[1] = v->list[1];
		break;
	case CLI_L_RATIO: c->ratio[0] = v->list[0]; c->ratio[1] = v->list[1];
		break;
	case CLI_L_RESIZE: c->resize = (int)v->i; break;
	case CLI_L_FLIP: c->flip = 1; break;
	case CLI_L_NO_FLIP: c->flip = 0; break;
	case CLI_L_DTYPE: c->dtype = (enum sk_dtype)v->i; break;
	case CLI_L_LAYOUT: c->layout = (enum sk_layout)v->i; break;
	case CLI_L_MEAN:
	case CLI_L_STD:
		for (i = 0; i < 3; i++)
			(o->id == CLI_L_MEAN ? c->mean : c->std)[i] =
			    (float)v->list[i];
		break;
	default:
		return 0;
	}
	return 1;
}

void
cli_loader_finish(struct cli_loader *l, const char *source)
{
	struct sk_loader_config *c = &l->cfg;
	char err[256];
	int rank, world, local, i;

	if (source != NULL) {
		if (cli_is_manifest(source))
			c->manifest = source;
		else
			c->urls = source;
	}
	switch (cli_launcher(&rank, &world, &local, err, sizeof err)) {
	case -1:
		usage_error("%s", err);
	case 1:
		l->launcher = 1;
		l->local_size = local;
		if (!l->rank_set)
			c->rank = rank;
		if (!l->world_set)
			c->world = world;
		break;
	}
	if (!l->workers_set)
		c->workers = cli_cpus_per_rank();
	/* Options that fix the I/O fix the read-ahead too: the result is
	 * what they say, as before --ahead existed. */
	if (l->io_fixed && !l->ahead_set)
		c->ahead = 1;
	if (c->rank >= c->world)
		usage_error("--rank %d is not below --world %d", c->rank,
		    c->world);
	if (c->crop == SK_CROP_CENTER && c->resize != 0 &&
	    c->resize < c->image_size)
		usage_error("--resize %d is smaller than --image-size %d",
		    c->resize, c->image_size);
	if (c->scale[0] > c->scale[1] || c->scale[0] <= 0 || c->scale[1] > 1)
		usage_error("--scale %g,%g: need 0 < A <= B <= 1", c->scale[0],
		    c->scale[1]);
	if (c->ratio[0] > c->ratio[1] || c->ratio[0] <= 0)
		usage_error("--ratio %g,%g: need 0 < A <= B", c->ratio[0],
		    c->ratio[1]);
	for (i = 0; i < 3; i++)
		if (c->std[i] == 0)
			usage_error("--std: a component is 0");
	cli_remote_finish(&l->remote);
}

const char *
cli_crop_name(enum sk_crop c)
{
	return (unsigned)c < 3 ? crops[c] : "?";
}

const char *
cli_dtype_name(enum sk_dtype d)
{
	return (unsigned)d < 4 ? dtypes[d] : "?";
}

const char *
cli_layout_name(enum sk_layout l)
{
	return (unsigned)l < 2 ? layouts[l] : "?";
}

const char *
cli_remainder_name(enum sk_remainder r)
{
	return (unsigned)r < 2 ? remainders[r] : "?";
}

const char *
cli_form_name(enum sk_form f)
{
	return (unsigned)f < 3 ? forms[f] : "?";
}
