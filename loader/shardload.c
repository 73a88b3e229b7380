/*
 * shardload.c - the loader without a model: `bench` measures the pipeline
 * and names the stage that bounds it, `dump` writes a batch as an image
 * grid (or a NumPy array) to look at, `keys` prints what every batch holds.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "shardkit.h"

#define EXIT_USAGE 2

static const char *progname = "shardload";
static const char *cmdname;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2),
    noreturn));
static void usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));

/* "shardload CMD: message" on stderr. */
static void
vmsg(const char *fmt, va_list ap)
{
	fprintf(stderr, "%s%s%s: ", progname, cmdname ? " " : "",
	    cmdname ? cmdname : "");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

static void
die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
	exit(1);
}

static const char usage_text[] =
"usage: shardload bench URL|MANIFEST [options]\n"
"       shardload dump URL|MANIFEST --out FILE.png|FILE.npy [options]\n"
"       shardload keys URL|MANIFEST [options]\n";

static void
usage_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
	fputs(usage_text, stderr);
	exit(EXIT_USAGE);
}

static const char help_text[] =
"usage: shardload bench URL|MANIFEST [options]\n"
"       shardload dump URL|MANIFEST --out FILE.png|FILE.npy [options]\n"
"       shardload keys URL|MANIFEST [options]\n"
"\n"
"Stream WebDataset shards through the shardkit loader: read, shuffle,\n"
"decode, augment and batch, with no model. A source ending in .json is a\n"
"manifest (sample counts come from it); anything else is a shard pattern\n"
"such as 'data/train-{000000..000146}.tar' (every shard's headers are\n"
"read once to count its samples).\n"
"\n"
"commands:\n"
"  bench         run the pipeline; print images/s, MB/s, the time each\n"
"                stage was busy and waiting, and the stage that bounds it\n"
"  dump          write the first batch as a labelled grid (.png) or as a\n"
"                NumPy array (.npy, the batch's dtype and layout); its keys\n"
"                and labels go to stdout\n"
"  keys          print one line per sample: epoch, batch, index, key,\n"
"                label (and more with --checksum, --boxes)\n"
"\n"
"pipeline:\n"
"      --batch N          samples per batch (256)\n"
"      --epoch N          the first epoch (0)\n"
"      --epochs N         epochs to stream (1)\n"
"      --seed N           shuffle and augmentation seed (0)\n"
"      --rank N           this rank (0; under mpirun, from the launcher)\n"
"      --world N          ranks in all (1; under mpirun, from the launcher)\n"
"      --workers N        decode workers (the number of CPUs)\n"
"      --io-streams N     shards read at once (2)\n"
"      --prefetch SIZE    bytes read ahead of the shuffle buffer (64M)\n"
"      --shuffle N        shuffle buffer in samples (0: shard order only)\n"
"      --ring N           batch slots (at least 3)\n"
"      --remainder drop|keep\n"
"                         samples that do not fill a batch on every rank:\n"
"                         left out (drop), or in short batches (keep)\n"
"      --resume-batch N   start the first epoch at batch N\n"
"      --strict           a bad sample or damaged shard is fatal\n"
"      --max-pixels N     skip images with more pixels (100000000)\n"
"      --no-decode        read and split shards only, no pixels\n"
"      --device N         copy batches to CUDA device N\n"
"\n"
"augmentation and output:\n"
"      --image-size N     output height and width (224)\n"
"      --crop random-resized|center|none\n"
"                         the crop (random-resized)\n"
"      --scale A,B        random-resized area fraction (0.08,1)\n"
"      --ratio A,B        random-resized aspect range (0.75,1.3333)\n"
"      --resize N         center: the short side before the crop\n"
"                         (image size * 8/7)\n"
"      --flip, --no-flip  random horizontal flip (on)\n"
"      --dtype u8|f32|bf16|f16\n"
"                         pixel type (u8; floats are normalized)\n"
"      --layout nhwc|nchw pixel layout (nhwc)\n"
"      --mean A,B,C       float outputs: (v/255 - mean) / std\n"
"      --std A,B,C        (ImageNet's mean and std)\n"
"\n"
"bench:\n"
"      --limit-batches N  stop after N batches\n"
"      --json FILE        write the results as JSON (- for stdout)\n"
"      --quiet            no progress lines\n"
"dump:\n"
"  -o, --out FILE         the .png grid or .npy array to write\n"
"      --columns N        grid columns (square-ish by default)\n"
"keys:\n"
"      --checksum         add a 64-bit FNV-1a hash of each image's bytes\n"
"      --boxes            add the source size, crop box and flip\n"
"      --limit-batches N  stop after N batches\n"
"\n"
"  -h, --help             this help\n"
"  -V, --version          the version\n"
"\n"
"Exit status: 0 on success, 1 on a run-time error, 2 on a usage error.\n";

/* ------------------------------------------------------------------------ */
/* options                                                                  */

enum {
	O_BATCH = 256, O_EPOCH, O_EPOCHS, O_SEED, O_RANK, O_WORLD, O_WORKERS,
	O_IO, O_PREFETCH, O_SHUFFLE, O_RING, O_REMAINDER, O_RESUME, O_STRICT,
	O_MAXPIX, O_NODECODE, O_DEVICE, O_SIZE, O_CROP, O_SCALE, O_RATIO,
	O_RESIZE, O_FLIP, O_NOFLIP, O_DTYPE, O_LAYOUT, O_MEAN, O_STD,
	O_LIMIT, O_JSON, O_QUIET, O_COLUMNS, O_CHECKSUM, O_BOXES
};

static const struct option longopts[] = {
	{ "batch", required_argument, NULL, O_BATCH },
	{ "epoch", required_argument, NULL, O_EPOCH },
	{ "epochs", required_argument, NULL, O_EPOCHS },
	{ "seed", required_argument, NULL, O_SEED },
	{ "rank", required_argument, NULL, O_RANK },
	{ "world", required_argument, NULL, O_WORLD },
	{ "workers", required_argument, NULL, O_WORKERS },
	{ "io-streams", required_argument, NULL, O_IO },
	{ "prefetch", required_argument, NULL, O_PREFETCH },
	{ "shuffle", required_argument, NULL, O_SHUFFLE },
	{ "ring", required_argument, NULL, O_RING },
	{ "remainder", required_argument, NULL, O_REMAINDER },
	{ "resume-batch", required_argument, NULL, O_RESUME },
	{ "strict", no_argument, NULL, O_STRICT },
	{ "max-pixels", required_argument, NULL, O_MAXPIX },
	{ "no-decode", no_argument, NULL, O_NODECODE },
	{ "device", required_argument, NULL, O_DEVICE },
	{ "image-size", required_argument, NULL, O_SIZE },
	{ "crop", required_argument, NULL, O_CROP },
	{ "scale", required_argument, NULL, O_SCALE },
	{ "ratio", required_argument, NULL, O_RATIO },
	{ "resize", required_argument, NULL, O_RESIZE },
	{ "flip", no_argument, NULL, O_FLIP },
	{ "no-flip", no_argument, NULL, O_NOFLIP },
	{ "dtype", required_argument, NULL, O_DTYPE },
	{ "layout", required_argument, NULL, O_LAYOUT },
	{ "mean", required_argument, NULL, O_MEAN },
	{ "std", required_argument, NULL, O_STD },
	{ "limit-batches", required_argument, NULL, O_LIMIT },
	{ "json", required_argument, NULL, O_JSON },
	{ "quiet", no_argument, NULL, O_QUIET },
	{ "out", required_argument, NULL, 'o' },
	{ "columns", required_argument, NULL, O_COLUMNS },
	{ "checksum", no_argument, NULL, O_CHECKSUM },
	{ "boxes", no_argument, NULL, O_BOXES },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 }
};

struct opts {
	struct sk_loader_config cfg;
	const char *source;
	int64_t limit;
	const char *json;
	const char *out;
	int quiet, columns, checksum, boxes;
	int rank_set, world_set;
};

static const char *
optname(int c)
{
	const struct option *o;

	for (o = longopts; o->name != NULL; o++)
		if (o->val == c)
			return o->name;
	return "?";
}

static long long
num(int c, const char *s, long long min, long long max)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (*s == '\0' || *end != '\0' || errno != 0 || v < min || v > max)
		usage_error("--%s %s: not a whole number in %lld..%lld",
		    optname(c), s, min, max);
	return v;
}

static uint64_t
size_arg(int c, const char *s)
{
	char *end;
	double v;
	uint64_t mul = 1;

	errno = 0;
	v = strtod(s, &end);
	if (end != s && *end != '\0' && end[1] == '\0') {
		switch (*end) {
		case 'k': case 'K': mul = 1ULL << 10; end++; break;
		case 'm': case 'M': mul = 1ULL << 20; end++; break;
		case 'g': case 'G': mul = 1ULL << 30; end++; break;
		}
	}
	if (end == s || *end != '\0' || errno != 0 || !(v >= 1) ||
	    v * (double)mul > 1e15)
		usage_error("--%s %s: not a size such as 64M", optname(c), s);
	return (uint64_t)(v * (double)mul);
}

/* "A,B" or "A,B,C" into n doubles. */
static void
list_arg(int c, const char *s, double *out, int n)
{
	const char *p = s;
	char *end;
	int i;

	for (i = 0; i < n; i++) {
		errno = 0;
		out[i] = strtod(p, &end);
		if (end == p || errno != 0 || !isfinite(out[i]) ||
		    (i < n - 1 ? *end != ',' : *end != '\0'))
			usage_error("--%s %s: need %d numbers separated by "
			    "commas", optname(c), s, n);
		p = end + 1;
	}
}

static int
choice(int c, const char *s, const char *const *names)
{
	int i;

	for (i = 0; names[i] != NULL; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	usage_error("--%s %s: not one of the choices (see --help)",
	    optname(c), s);
}

static long
env_num(const char *name, const char *s)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || errno != 0 || v < 0 || v > 1 << 20)
		usage_error("%s=%s: not a rank or size", name, s);
	return v;
}

/* Under mpirun or srun the launcher says which rank this is. */
static void
launcher_rank(struct opts *o)
{
	static const char *const pairs[][2] = {
		{ "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
		{ "PMI_RANK", "PMI_SIZE" },
		{ "PMIX_RANK", "PMIX_SIZE" },
		{ "SLURM_PROCID", "SLURM_NTASKS" },
	};
	const char *r, *w;
	size_t i;

	for (i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
		r = getenv(pairs[i][0]);
		w = getenv(pairs[i][1]);
		if (r == NULL || w == NULL)
			continue;
		if (!o->rank_set)
			o->cfg.rank = (int)env_num(pairs[i][0], r);
		if (!o->world_set)
			o->cfg.world = (int)env_num(pairs[i][1], w);
		return;
	}
}

static void
parse(int argc, char **argv, struct opts *o)
{
	static const char *const crops[] = { "random-resized", "center",
	    "none", NULL };
	static const char *const dtypes[] = { "u8", "f32", "bf16", "f16",
	    NULL };
	static const char *const layouts[] = { "nhwc", "nchw", NULL };
	static const char *const rems[] = { "drop", "keep", NULL };
	double v[3];
	int c, i;

	memset(o, 0, sizeof *o);
	sk_loader_config_init(&o->cfg);
	o->limit = -1;
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":o:hV", longopts, NULL)) != -1) {
		switch (c) {
		case O_BATCH:
			o->cfg.batch = (int)num(c, optarg, 1, 1 << 20);
			break;
		case O_EPOCH:
			o->cfg.epoch = (int)num(c, optarg, 0, INT_MAX);
			break;
		case O_EPOCHS:
			o->cfg.epochs = (int)num(c, optarg, 1, 1000000);
			break;
		case O_SEED: {
			char *end;

			errno = 0;
			o->cfg.seed = strtoull(optarg, &end, 10);
			if (*optarg == '\0' || *optarg == '-' || *end != '\0' ||
			    errno != 0)
				usage_error("--seed %s: not a whole number in "
				    "0..%llu", optarg, (unsigned long long)
				    UINT64_MAX);
			break;
		}
		case O_RANK:
			o->cfg.rank = (int)num(c, optarg, 0, 1 << 20);
			o->rank_set = 1;
			break;
		case O_WORLD:
			o->cfg.world = (int)num(c, optarg, 1, 1 << 20);
			o->world_set = 1;
			break;
		case O_WORKERS:
			o->cfg.workers = (int)num(c, optarg, 1, 1024);
			break;
		case O_IO:
			o->cfg.io_streams = (int)num(c, optarg, 1, 256);
			break;
		case O_PREFETCH:
			o->cfg.prefetch_bytes = (size_t)size_arg(c, optarg);
			break;
		case O_SHUFFLE:
			o->cfg.shuffle = (int)num(c, optarg, 0, 100000000);
			break;
		case O_RING:
			o->cfg.ring = (int)num(c, optarg, 3, 4096);
			break;
		case O_REMAINDER:
			o->cfg.remainder = (enum sk_remainder)choice(c, optarg,
			    rems);
			break;
		case O_RESUME:
			o->cfg.resume_batch = (int)num(c, optarg, 0, INT_MAX);
			break;
		case O_STRICT:
			o->cfg.strict = 1;
			break;
		case O_MAXPIX:
			o->cfg.max_pixels = (uint64_t)num(c, optarg, 1,
			    LLONG_MAX);
			break;
		case O_NODECODE:
			o->cfg.decode = 0;
			break;
		case O_DEVICE:
			o->cfg.device = (int)num(c, optarg, 0, 1024);
			break;
		case O_SIZE:
			o->cfg.image_size = (int)num(c, optarg, 1, 8192);
			break;
		case O_CROP:
			o->cfg.crop = (enum sk_crop)choice(c, optarg, crops);
			break;
		case O_SCALE:
			list_arg(c, optarg, o->cfg.scale, 2);
			break;
		case O_RATIO:
			list_arg(c, optarg, o->cfg.ratio, 2);
			break;
		case O_RESIZE:
			o->cfg.resize = (int)num(c, optarg, 1, 65536);
			break;
		case O_FLIP:
			o->cfg.flip = 1;
			break;
		case O_NOFLIP:
			o->cfg.flip = 0;
			break;
		case O_DTYPE:
			o->cfg.dtype = (enum sk_dtype)choice(c, optarg, dtypes);
			break;
		case O_LAYOUT:
			o->cfg.layout = (enum sk_layout)choice(c, optarg,
			    layouts);
			break;
		case O_MEAN:
		case O_STD:
			list_arg(c, optarg, v, 3);
			for (i = 0; i < 3; i++)
				(c == O_MEAN ? o->cfg.mean : o->cfg.std)[i] =
				    (float)v[i];
			break;
		case O_LIMIT:
			o->limit = num(c, optarg, 1, LLONG_MAX);
			break;
		case O_JSON:
			o->json = optarg;
			break;
		case O_QUIET:
			o->quiet = 1;
			break;
		case 'o':
			o->out = optarg;
			break;
		case O_COLUMNS:
			o->columns = (int)num(c, optarg, 1, 4096);
			break;
		case O_CHECKSUM:
			o->checksum = 1;
			break;
		case O_BOXES:
			o->boxes = 1;
			break;
		case 'h':
			fputs(help_text, stdout);
			exit(0);
		case 'V':
			printf("shardload %s\n", SK_VERSION_STRING);
			exit(0);
		case ':':
			usage_error("%s needs a value", argv[optind - 1]);
		default:
			usage_error("%s: unknown option", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		usage_error("no shards given (a URL pattern or a manifest)");
	if (strcmp(cmdname, "dump") != 0 && (o->out != NULL || o->columns))
		usage_error("--out and --columns are for dump");
	if (strcmp(cmdname, "keys") != 0 && (o->checksum || o->boxes))
		usage_error("--checksum and --boxes are for keys");
	if (strcmp(cmdname, "bench") != 0 && (o->json != NULL || o->quiet))
		usage_error("--json and --quiet are for bench");
	if (strcmp(cmdname, "dump") == 0 && (o->limit >= 0 ||
	    !o->cfg.decode))
		usage_error("dump takes neither --limit-batches nor "
		    "--no-decode");
	if (strcmp(cmdname, "keys") == 0 && o->checksum && !o->cfg.decode)
		usage_error("--checksum needs pixels: drop --no-decode");
	if (optind + 1 < argc)
		usage_error("%s: one source only (use a brace pattern or a "
		    "manifest for several shards)", argv[optind + 1]);
	o->source = argv[optind];
	launcher_rank(o);
	if (o->cfg.rank >= o->cfg.world)
		usage_error("--rank %d is not below --world %d", o->cfg.rank,
		    o->cfg.world);
	if (o->cfg.crop == SK_CROP_CENTER && o->cfg.resize != 0 &&
	    o->cfg.resize < o->cfg.image_size)
		usage_error("--resize %d is smaller than --image-size %d",
		    o->cfg.resize, o->cfg.image_size);
	if (o->cfg.scale[0] > o->cfg.scale[1] || o->cfg.scale[0] <= 0 ||
	    o->cfg.scale[1] > 1)
		usage_error("--scale %g,%g: need 0 < A <= B <= 1",
		    o->cfg.scale[0], o->cfg.scale[1]);
	if (o->cfg.ratio[0] > o->cfg.ratio[1] || o->cfg.ratio[0] <= 0)
		usage_error("--ratio %g,%g: need 0 < A <= B", o->cfg.ratio[0],
		    o->cfg.ratio[1]);
	for (i = 0; i < 3; i++)
		if (o->cfg.std[i] == 0)
			usage_error("--std: a component is 0");
	{
		size_t n = strlen(o->source);

		if (n > 5 && strcasecmp(o->source + n - 5, ".json") == 0)
			o->cfg.manifest = o->source;
		else
			o->cfg.urls = o->source;
	}
}

static sk_loader *
open_loader(const struct opts *o)
{
	sk_loader *l;

	if (sk_loader_open(&l, &o->cfg) != 0)
		die("%s", l != NULL ? sk_errmsg(l) : "out of memory");
	return l;
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *
dtype_name(enum sk_dtype t)
{
	static const char *const n[] = { "u8", "f32", "bf16", "f16" };

	return (unsigned)t < 4 ? n[t] : "?";
}

/* ------------------------------------------------------------------------ */
/* bench                                                                    */

/*
 * Which stage sets the pace. A consumer that rarely waits means the
 * pipeline keeps ahead of it; otherwise the stage whose threads were
 * busiest, as a share of their capacity, is the one to give more to.
 */
static const char *
bound_stage(const struct sk_loader_stats *st, double wall, int decode,
    double *share)
{
	double dec, io, cons;

	cons = wall > 0 ? 1.0 - st->consumer_wait / wall : 0;
	dec = decode && st->workers > 0 && wall > 0 ? st->decode_busy /
	    (st->workers * wall) : 0;
	io = st->io_streams > 0 && wall > 0 ? st->io_busy /
	    (st->io_streams * wall) : 0;
	if (cons > 0.9 && st->ring_wait > 0.1 * wall) {
		*share = cons;
		return "consumer";
	}
	if (dec >= io) {
		*share = dec;
		return "decode";
	}
	*share = io;
	return "io";
}

static void
json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s != '\0'; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

struct bench_result {
	double wall, steady_wall;
	uint64_t samples, steady_samples;
	int64_t batches;
};

static void
write_json(const struct opts *o, const struct sk_loader_stats *st,
    const struct bench_result *r, uint64_t peak_rss)
{
	static const char *const crops[] = { "random-resized", "center",
	    "none" };
	const struct sk_loader_config *c = &o->cfg;
	double share;
	const char *bound = bound_stage(st, r->wall, c->decode, &share);
	FILE *f;
	int i;

	if (strcmp(o->json, "-") == 0)
		f = stdout;
	else if ((f = fopen(o->json, "w")) == NULL)
		die("%s: %s", o->json, strerror(errno));
	fprintf(f, "{\n  \"images_per_sec\": %.3f,\n",
	    r->wall > 0 ? (double)r->samples / r->wall : 0);
	fprintf(f, "  \"images_per_sec_steady\": %.3f,\n",
	    r->steady_wall > 0 ? (double)r->steady_samples / r->steady_wall :
	    0);
	fprintf(f, "  \"mb_per_sec\": %.3f,\n", r->wall > 0 ?
	    (double)st->bytes / 1e6 / r->wall : 0);
	fprintf(f, "  \"samples\": %" PRIu64 ",\n", st->samples);
	fprintf(f, "  \"batches\": %" PRIu64 ",\n", st->batches);
	fprintf(f, "  \"skipped\": %" PRIu64 ",\n", st->skipped_total);
	fprintf(f, "  \"skipped_by_reason\": {");
	for (i = 0; i < SK_SKIP_NREASONS; i++)
		fprintf(f, "%s\"%s\": %" PRIu64, i ? ", " : "",
		    sk_skip_reason_name(i), st->skipped[i]);
	fprintf(f, "},\n");
	fprintf(f, "  \"dropped\": %" PRIu64 ",\n", st->dropped);
	fprintf(f, "  \"unplanned\": %" PRIu64 ",\n", st->unplanned);
	fprintf(f, "  \"mismatched_shards\": %" PRIu64 ",\n",
	    st->mismatched_shards);
	fprintf(f, "  \"bytes\": %" PRIu64 ",\n", st->bytes);
	fprintf(f, "  \"sample_bytes\": %" PRIu64 ",\n", st->sample_bytes);
	fprintf(f, "  \"wall_s\": %.6f,\n", r->wall);
	fprintf(f, "  \"stages\": {\"io_busy_s\": %.6f, \"io_blocked_s\": %.6f, "
	    "\"input_wait_s\": %.6f, \"decode_busy_s\": %.6f, "
	    "\"decode_idle_s\": %.6f, \"ring_wait_s\": %.6f, "
	    "\"consumer_wait_s\": %.6f},\n", st->io_busy, st->io_blocked,
	    st->input_wait, st->decode_busy, st->decode_idle, st->ring_wait,
	    st->consumer_wait);
	fprintf(f, "  \"bound\": \"%s\",\n", bound);
	fprintf(f, "  \"memory_bound_bytes\": %" PRIu64 ",\n",
	    st->memory_bound);
	fprintf(f, "  \"peak_rss_bytes\": %" PRIu64 ",\n", peak_rss);
	fprintf(f, "  \"batches_per_epoch\": %" PRId64 ",\n",
	    st->batches_per_epoch);
	fprintf(f, "  \"config\": {\"source\": ");
	json_str(f, o->source);
	fprintf(f, ", \"batch\": %d, \"epoch\": %d, \"epochs\": %d, "
	    "\"seed\": %" PRIu64 ", \"rank\": %d, \"world\": %d, "
	    "\"workers\": %d, \"io_streams\": %d, \"prefetch_bytes\": %zu, "
	    "\"shuffle\": %d, \"image_size\": %d, \"crop\": \"%s\", "
	    "\"flip\": %s, \"dtype\": \"%s\", \"layout\": \"%s\", "
	    "\"decode\": %s, \"strict\": %s, \"remainder\": \"%s\", "
	    "\"resume_batch\": %d, \"limit_batches\": %" PRId64 "}\n}\n",
	    c->batch, c->epoch, c->epochs, c->seed, c->rank, c->world,
	    st->workers, st->io_streams, c->prefetch_bytes, c->shuffle,
	    c->image_size, crops[c->crop], c->flip ? "true" : "false",
	    dtype_name(c->dtype), c->layout == SK_LAYOUT_NCHW ? "nchw" :
	    "nhwc", c->decode ? "true" : "false", c->strict ? "true" :
	    "false", c->remainder == SK_REMAINDER_KEEP ? "keep" : "drop",
	    c->resume_batch, o->limit);
	if (f != stdout && fclose(f) != 0)
		die("%s: %s", o->json, strerror(errno));
	if (f == stdout)
		fflush(stdout);
}

/* The process's peak resident set (VmHWM), in bytes. */
static uint64_t
peak_rss(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	unsigned long long kb = 0;

	if (f == NULL)
		return 0;
	while (fgets(line, sizeof line, f) != NULL)
		if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb * 1024;
}

static void
progress(const struct sk_loader_stats *st, double wall, int64_t total)
{
	double share;
	const char *bound = bound_stage(st, wall, 1, &share);

	fprintf(stderr, "\r%s: batch %" PRIu64 "/%" PRId64 "  %.0f images/s  "
	    "%.1f MB/s  skipped %" PRIu64 "  bound: %s (%.0f%%)  ", progname,
	    st->batches, total, wall > 0 ? (double)st->samples / wall : 0,
	    wall > 0 ? (double)st->bytes / 1e6 / wall : 0, st->skipped_total,
	    bound, share * 100);
}

static int
cmd_bench(const struct opts *o)
{
	sk_loader *l;
	struct sk_batch b;
	struct sk_loader_stats st;
	struct bench_result r;
	double t0, t1 = 0, tlast, t;
	int64_t total;
	int rc, tty = !o->quiet && isatty(2), i;
	uint64_t first_n = 0;

	memset(&r, 0, sizeof r);
	t0 = now_s();
	l = open_loader(o);
	sk_loader_stats(l, &st);
	total = st.batches_per_epoch * o->cfg.epochs - o->cfg.resume_batch;
	if (o->limit > 0 && o->limit < total)
		total = o->limit;
	tlast = t0;
	while (r.batches < total && (rc = sk_loader_next(l, &b)) > 0) {
		if (r.batches == 0) {
			t1 = now_s();
			first_n = (uint64_t)b.n;
		}
		r.samples += (uint64_t)b.n;
		r.batches++;
		if (sk_loader_release(l, &b) != 0)
			die("%s", sk_errmsg(l));
		if (tty && (t = now_s()) - tlast >= 1.0) {
			sk_loader_stats(l, &st);
			progress(&st, t - t0, total);
			tlast = t;
		}
	}
	if (r.batches < total && rc < 0)
		die("%s", sk_errmsg(l));
	t = now_s();
	if (tty)
		fputc('\n', stderr);
	sk_loader_stats(l, &st);
	r.wall = t - t0;
	r.steady_wall = t - t1;
	r.steady_samples = r.samples - first_n;
	if (o->json != NULL)
		write_json(o, &st, &r, peak_rss());
	if (o->json == NULL || strcmp(o->json, "-") != 0) {
		double share;
		const char *bound = bound_stage(&st, r.wall, o->cfg.decode,
		    &share);

		printf("%" PRIu64 " samples in %" PRId64 " batches, %.3f s: "
		    "%.1f images/s, %.1f MB/s\n", r.samples, r.batches,
		    r.wall, r.wall > 0 ? (double)r.samples / r.wall : 0,
		    r.wall > 0 ? (double)st.bytes / 1e6 / r.wall : 0);
		printf("skipped %" PRIu64, st.skipped_total);
		for (i = 0; i < SK_SKIP_NREASONS; i++)
			if (st.skipped[i] > 0)
				printf(" %s=%" PRIu64, sk_skip_reason_name(i),
				    st.skipped[i]);
		printf(", dropped %" PRIu64 " (remainder)\n", st.dropped);
		if (st.mismatched_shards > 0)
			printf("manifest: %" PRIu64 " shards disagree with it, "
			    "%" PRIu64 " samples past its counts not "
			    "delivered\n", st.mismatched_shards,
			    st.unplanned);
		printf("stage        threads   busy s   wait s\n");
		printf("io           %7d %8.3f %8.3f  (blocked on prefetch "
		    "room %.3f s)\n", st.io_streams, st.io_busy,
		    st.input_wait, st.io_blocked);
		printf("decode       %7d %8.3f %8.3f\n", st.workers,
		    st.decode_busy, st.decode_idle);
		printf("consumer     %7d %8.3f %8.3f  (slots full %.3f s)\n", 1,
		    r.wall - st.consumer_wait, st.consumer_wait, st.ring_wait);
		printf("bound: %s (busy %.0f%% of its capacity)\n", bound,
		    share * 100);
		printf("memory: peak RSS %.1f MiB, bound by the formula %.1f "
		    "MiB\n", (double)peak_rss() / 1048576.0,
		    (double)st.memory_bound / 1048576.0);
	}
	sk_loader_close(l);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* keys                                                                     */

static uint64_t
fnv1a(const uint8_t *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	while (n-- > 0) {
		h ^= *p++;
		h *= 0x100000001b3ULL;
	}
	return h;
}

static int
cmd_keys(const struct opts *o)
{
	sk_loader *l = open_loader(o);
	struct sk_batch b;
	int64_t n = 0;
	int rc, i;

	while ((o->limit < 0 || n < o->limit) &&
	    (rc = sk_loader_next(l, &b)) > 0) {
		for (i = 0; i < b.n; i++) {
			printf("%d\t%" PRId64 "\t%d\t%s\t%" PRId32, b.epoch,
			    b.index, i, b.keys[i], b.labels[i]);
			if (o->checksum)
				printf("\t%016" PRIx64, fnv1a((const uint8_t *)
				    b.images + (size_t)i * b.image_bytes,
				    b.image_bytes));
			if (o->boxes)
				printf("\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%d",
				    b.aug[i].src_w, b.aug[i].src_h, b.aug[i].x,
				    b.aug[i].y, b.aug[i].w, b.aug[i].h,
				    b.aug[i].flip);
			putchar('\n');
		}
		if (sk_loader_release(l, &b) != 0)
			die("%s", sk_errmsg(l));
		n++;
	}
	if ((o->limit < 0 || n < o->limit) && rc < 0)
		die("%s", sk_errmsg(l));
	if (fflush(stdout) != 0 || ferror(stdout))
		die("standard output: %s", strerror(errno));
	sk_loader_close(l);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* dump                                                                     */

/* 3x5 digits, one row per byte, bit 2 leftmost. */
static const uint8_t digits[10][5] = {
	{ 7, 5, 5, 5, 7 }, { 2, 6, 2, 2, 7 }, { 7, 1, 7, 4, 7 },
	{ 7, 1, 7, 1, 7 }, { 5, 5, 7, 1, 1 }, { 7, 4, 7, 1, 7 },
	{ 7, 4, 7, 5, 7 }, { 7, 1, 1, 1, 1 }, { 7, 5, 7, 5, 7 },
	{ 7, 5, 7, 1, 7 }
};

/* Draw a number at (x, y) of an RGB canvas, each font pixel s x s. */
static void
draw_number(uint8_t *pix, int cw, int ch, int x, int y, int s, int32_t v)
{
	char txt[16];
	int i, r, c, dy, dx, px, py;

	snprintf(txt, sizeof txt, "%" PRId32, v);
	for (i = 0; txt[i] != '\0'; i++, x += 4 * s) {
		if (txt[i] < '0' || txt[i] > '9')
			continue;
		for (r = 0; r < 5; r++)
			for (c = 0; c < 3; c++) {
				if (!(digits[txt[i] - '0'][r] & (4 >> c)))
					continue;
				for (dy = 0; dy < s; dy++)
					for (dx = 0; dx < s; dx++) {
						px = x + c * s + dx;
						py = y + r * s + dy;
						if (px < cw && py < ch)
							memset(pix + ((size_t)py *
							    cw + px) * 3, 255, 3);
					}
			}
	}
}

static void
write_all(FILE *f, const char *path, const void *p, size_t n)
{
	if (fwrite(p, 1, n, f) != n)
		die("%s: %s", path, strerror(errno));
}

static void
dump_npy(const char *path, const struct sk_batch *b)
{
	static const char *const descr[] = { "|u1", "<f4", "<u2", "<f2" };
	char hdr[256];
	int n, pad;
	FILE *f;

	/* NumPy has no bfloat16: bf16 is written as its raw 16 bits. */
	n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': "
	    "False, 'shape': (%d, %d, %d, %d), }", descr[b->dtype], b->n,
	    b->layout == SK_LAYOUT_NCHW ? 3 : b->size, b->size,
	    b->layout == SK_LAYOUT_NCHW ? b->size : 3);
	pad = 64 - (10 + n + 1) % 64;
	if (pad == 64)
		pad = 0;
	memset(hdr + n, ' ', (size_t)pad);
	hdr[n + pad] = '\n';
	n += pad + 1;
	if ((f = fopen(path, "wb")) == NULL)
		die("%s: %s", path, strerror(errno));
	write_all(f, path, "\x93NUMPY\x01\x00", 8);
	write_all(f, path, (uint8_t[]){ (uint8_t)(n & 0xff),
	    (uint8_t)(n >> 8) }, 2);
	write_all(f, path, hdr, (size_t)n);
	write_all(f, path, b->images, (size_t)b->n * b->image_bytes);
	if (fclose(f) != 0)
		die("%s: %s", path, strerror(errno));
}

static void
dump_png(const char *path, const struct sk_batch *b, int columns)
{
	const int S = b->size, label_h = 14, gap = 2;
	int cols, rows, cw, ch, i, y, x0, y0;
	uint8_t *canvas, *png = NULL;
	size_t pnglen;
	struct sk_error err;
	FILE *f;

	cols = columns > 0 ? columns : (int)ceil(sqrt((double)b->n));
	if (cols > b->n)
		cols = b->n;
	rows = (b->n + cols - 1) / cols;
	cw = cols * (S + gap) + gap;
	ch = rows * (S + label_h + gap) + gap;
	if ((canvas = calloc((size_t)cw * (size_t)ch, 3)) == NULL)
		die("out of memory for a %d x %d grid", cw, ch);
	for (i = 0; i < b->n; i++) {
		const uint8_t *img = (const uint8_t *)b->images +
		    (size_t)i * b->image_bytes;

		x0 = gap + (i % cols) * (S + gap);
		y0 = gap + (i / cols) * (S + label_h + gap);
		for (y = 0; y < S; y++)
			memcpy(canvas + ((size_t)(y0 + label_h + y) * cw + x0) *
			    3, img + (size_t)y * S * 3, (size_t)S * 3);
		draw_number(canvas, cw, ch, x0 + 1, y0 + 2, 2, b->labels[i]);
	}
	if (sk_image_encode_png(canvas, cw, ch, 3, 6, &png, &pnglen, &err) !=
	    0)
		die("%s: %s", path, err.msg);
	free(canvas);
	if ((f = fopen(path, "wb")) == NULL)
		die("%s: %s", path, strerror(errno));
	write_all(f, path, png, pnglen);
	if (fclose(f) != 0)
		die("%s: %s", path, strerror(errno));
	free(png);
}

static int
cmd_dump(struct opts *o)
{
	sk_loader *l;
	struct sk_batch b;
	size_t n;
	int png, rc, i;

	if (o->out == NULL)
		usage_error("dump needs --out FILE.png or FILE.npy");
	n = strlen(o->out);
	png = n > 4 && strcasecmp(o->out + n - 4, ".png") == 0;
	if (!png && !(n > 4 && strcasecmp(o->out + n - 4, ".npy") == 0))
		usage_error("--out %s: the name must end in .png or .npy",
		    o->out);
	/* A grid shows pixels as they are: u8, HWC. */
	if (png) {
		o->cfg.dtype = SK_DTYPE_U8;
		o->cfg.layout = SK_LAYOUT_NHWC;
	}
	o->cfg.device = -1;
	l = open_loader(o);
	if ((rc = sk_loader_next(l, &b)) < 0)
		die("%s", sk_errmsg(l));
	if (rc == 0 || b.n == 0)
		die("%s: the first batch is empty", o->source);
	if (png)
		dump_png(o->out, &b, o->columns);
	else
		dump_npy(o->out, &b);
	for (i = 0; i < b.n; i++)
		printf("%d\t%s\t%" PRId32 "\n", i, b.keys[i], b.labels[i]);
	sk_loader_release(l, &b);
	sk_loader_close(l);
	return 0;
}

/* ------------------------------------------------------------------------ */

int
main(int argc, char **argv)
{
	struct opts o;

	if (argc < 2)
		usage_error("no command given");
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		fputs(help_text, stdout);
		return 0;
	}
	if (strcmp(argv[1], "-V") == 0 || strcmp(argv[1], "--version") == 0) {
		printf("shardload %s\n", SK_VERSION_STRING);
		return 0;
	}
	cmdname = argv[1];
	if (strcmp(cmdname, "bench") != 0 && strcmp(cmdname, "dump") != 0 &&
	    strcmp(cmdname, "keys") != 0) {
		cmdname = NULL;
		usage_error("%s: not a command (bench, dump, keys)", argv[1]);
	}
	parse(argc - 1, argv + 1, &o);
	if (strcmp(cmdname, "bench") == 0)
		return cmd_bench(&o);
	if (strcmp(cmdname, "keys") == 0)
		return cmd_keys(&o);
	return cmd_dump(&o);
}
