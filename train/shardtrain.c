/*
 * shardtrain.c - the shardtrain CLI: parse the options into a
 * train_config, run it on every rank, print the report on rank 0.
 * "shardtrain info" prints a model's size; "shardtrain report" compares
 * the JSON files of several runs.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "comm.h"
#include "train.h"

static const char *progname = "shardtrain";
static struct comm *comm;		/* for a clean exit under mpirun */

static const char usage_short[] =
"usage: shardtrain [options]\n"
"       shardtrain info [--model M] [--image-size N] [--classes K] [--width X]\n"
"       shardtrain report [--plot FILE.png|FILE.svg] RUN.json...\n";

static const char usage_long[] =
"usage: shardtrain [options]                     train and report the bound\n"
"       shardtrain info [--model M] [--image-size N] [--classes K] [--width X]\n"
"       shardtrain report [--plot FILE.png|FILE.svg] RUN.json...\n"
"       mpirun -np N shardtrain --strategy ddp|fsdp [options]\n"
"\n"
"Trains a ResNet or a ViT on shards streamed by the shardkit loader (or on\n"
"synthetic data), times every step by stage, then measures the compute\n"
"alone and the loader alone and says whether training is input-bound or\n"
"compute-bound.\n"
"\n"
"model:\n"
"  --model NAME           resnet18|34|50|101|152, vit-ti|s|b|l|h|g|G with a\n"
"                         patch size: vit-l16, vit-h14, vit-ti4 (resnet18)\n"
"  --width X              ResNet width multiplier (1)\n"
"  --dim D, --depth N, --heads H, --mlp M\n"
"                         override a ViT's width, blocks, heads and MLP\n"
"                         width, for small variants\n"
"  --image-size N         input side in pixels (224)\n"
"  --classes K            classes (from the manifest, else 1000; synthetic: 10)\n"
"  --backend cpu          where to compute (cpu)\n"
"  --strategy S           single|ddp|fsdp (single for 1 rank, else ddp)\n"
"  --checkpoint-activations  recompute each block's activations in backward\n"
"  --threads N            compute threads per rank (cores / ranks)\n"
"\n"
"data:\n"
"  --data SRC             a URL pattern, a manifest (.json) or \"synthetic\"\n"
"                         (synthetic)\n"
"  --batch N              global batch, divided across ranks (256)\n"
"  --epochs E             epochs to train (1)\n"
"  --steps S              stop after S steps instead\n"
"  --workers N            loader decode threads (cores)\n"
"  --io-streams N         shards read at once (2)\n"
"  --prefetch SIZE        loader readahead bytes (64M)\n"
"  --shuffle N            shuffle buffer in samples (0 = none)\n"
"  --crop C               random-resized|center|none (random-resized)\n"
"  --strict               a bad sample stops the run\n"
"  --throttle IMG/S       cap the data at this many images/s (what-if)\n"
"\n"
"optimizer:\n"
"  --optimizer sgd|adamw  (sgd for ResNet, adamw for ViT)\n"
"  --lr X                 peak learning rate (sgd 0.1, adamw 1e-3, x batch/256)\n"
"  --momentum X           SGD momentum (0.9)\n"
"  --no-nesterov          plain momentum instead of Nesterov\n"
"  --weight-decay X       (sgd 1e-4, adamw 0.05); never on norms and biases\n"
"  --warmup N             linear warmup steps (0)\n"
"  --label-smoothing X    (0.1)\n"
"  --clip X               max global gradient norm, 0 = off (sgd 0, adamw 1)\n"
"  --seed N               initialisation and data order (0)\n"
"\n"
"run:\n"
"  --checkpoint-dir DIR   save model, optimizer and loader position here\n"
"  --checkpoint-every N   steps between checkpoints (at the end only)\n"
"  --resume               continue from the newest checkpoint in the dir\n"
"  --ceiling-steps N      steps for each of the two ceilings (10; 0 = skip)\n"
"  --price-per-hour USD   price of the whole job, for cost per epoch\n"
"  --json FILE            write the config, per-epoch figures and verdict\n"
"  --dump-params FILE     write the final parameters (raw fp32, flat)\n"
"  --losses FILE          write every step's loss, one per line\n"
"  --log-every N          steps between progress lines (10; 0 = none)\n"
"  --profile              time every layer kind and print where steps go\n"
"  -q, --quiet            only the final report\n"
"  -h, --help             this help\n"
"  -V, --version          the version\n";

static void
usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));

static void
usage_error(const char *fmt, ...)
{
	va_list ap;

	if (comm == NULL || comm_rank(comm) == 0) {
		va_start(ap, fmt);
		fprintf(stderr, "%s: ", progname);
		vfprintf(stderr, fmt, ap);
		fprintf(stderr, "\n%s", usage_short);
		va_end(ap);
	}
	if (comm)
		comm_close(comm);
	exit(2);
}

enum {
	O_MODEL = 256, O_WIDTH, O_SIZE, O_CLASSES, O_BACKEND, O_STRATEGY,
	O_CKACT, O_THREADS, O_DATA, O_BATCH, O_EPOCHS, O_STEPS, O_WORKERS,
	O_IO, O_PREFETCH, O_SHUFFLE, O_CROP, O_STRICT, O_THROTTLE, O_OPTIM,
	O_LR, O_MOMENTUM, O_NONESTEROV, O_WD, O_WARMUP, O_SMOOTH, O_CLIP,
	O_SEED, O_CKDIR, O_CKEVERY, O_RESUME, O_CEIL, O_PRICE, O_JSON,
	O_DUMP, O_LOSSES, O_LOGEVERY, O_DIM, O_DEPTH, O_HEADS, O_MLP, O_PROFILE
};

static const struct option longopts[] = {
	{ "model", required_argument, NULL, O_MODEL },
	{ "width", required_argument, NULL, O_WIDTH },
	{ "dim", required_argument, NULL, O_DIM },
	{ "depth", required_argument, NULL, O_DEPTH },
	{ "heads", required_argument, NULL, O_HEADS },
	{ "mlp", required_argument, NULL, O_MLP },
	{ "image-size", required_argument, NULL, O_SIZE },
	{ "classes", required_argument, NULL, O_CLASSES },
	{ "backend", required_argument, NULL, O_BACKEND },
	{ "strategy", required_argument, NULL, O_STRATEGY },
	{ "checkpoint-activations", no_argument, NULL, O_CKACT },
	{ "threads", required_argument, NULL, O_THREADS },
	{ "data", required_argument, NULL, O_DATA },
	{ "batch", required_argument, NULL, O_BATCH },
	{ "epochs", required_argument, NULL, O_EPOCHS },
	{ "steps", required_argument, NULL, O_STEPS },
	{ "workers", required_argument, NULL, O_WORKERS },
	{ "io-streams", required_argument, NULL, O_IO },
	{ "prefetch", required_argument, NULL, O_PREFETCH },
	{ "shuffle", required_argument, NULL, O_SHUFFLE },
	{ "crop", required_argument, NULL, O_CROP },
	{ "strict", no_argument, NULL, O_STRICT },
	{ "throttle", required_argument, NULL, O_THROTTLE },
	{ "optimizer", required_argument, NULL, O_OPTIM },
	{ "lr", required_argument, NULL, O_LR },
	{ "momentum", required_argument, NULL, O_MOMENTUM },
	{ "no-nesterov", no_argument, NULL, O_NONESTEROV },
	{ "weight-decay", required_argument, NULL, O_WD },
	{ "warmup", required_argument, NULL, O_WARMUP },
	{ "label-smoothing", required_argument, NULL, O_SMOOTH },
	{ "clip", required_argument, NULL, O_CLIP },
	{ "seed", required_argument, NULL, O_SEED },
	{ "checkpoint-dir", required_argument, NULL, O_CKDIR },
	{ "checkpoint-every", required_argument, NULL, O_CKEVERY },
	{ "resume", no_argument, NULL, O_RESUME },
	{ "ceiling-steps", required_argument, NULL, O_CEIL },
	{ "price-per-hour", required_argument, NULL, O_PRICE },
	{ "json", required_argument, NULL, O_JSON },
	{ "dump-params", required_argument, NULL, O_DUMP },
	{ "losses", required_argument, NULL, O_LOSSES },
	{ "log-every", required_argument, NULL, O_LOGEVERY },
	{ "profile", no_argument, NULL, O_PROFILE },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 }
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

static double
real(int c, const char *s, double min, double max)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end != '\0' || errno != 0 || !isfinite(v) ||
	    v < min || v > max)
		usage_error("--%s %s: not a number in %g..%g", optname(c), s,
		    min, max);
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

static void
copy_arg(int c, char *dst, size_t len, const char *s)
{
	if (strlen(s) >= len || *s == '\0')
		usage_error("--%s: %s", optname(c), *s ? "too long" : "empty");
	memcpy(dst, s, strlen(s) + 1);
}

static int
is_manifest(const char *s)
{
	size_t n = strlen(s);

	return n > 5 && strcasecmp(s + n - 5, ".json") == 0;
}

/* Classes from a manifest's info, or 0. */
static int
manifest_classes(const char *path)
{
	struct sk_manifest man;
	struct sk_error err;
	int n = 0;

	memset(&man, 0, sizeof(man));
	if (sk_manifest_read(path, &man, &err) == 0)
		n = (int)man.nclasses;
	sk_manifest_free(&man);
	return n;
}

struct parsed {
	struct train_config cfg;
	const char *model;
	int classes, strategy_set, optim_set;
	double lr, wd, clip;		/* < 0: the default */
	float width;
	int dim, depth, heads, mlp;	/* 0: the preset's */
};

static void
parse(int argc, char **argv, struct parsed *p)
{
	static const char *const crops[] = { "random-resized", "center",
	    "none", NULL };
	struct train_config *cfg = &p->cfg;
	int c, i;

	memset(p, 0, sizeof(*p));
	p->model = "resnet18";
	p->lr = p->wd = p->clip = -1;
	p->width = 1;
	cfg->model.image_size = 224;
	snprintf(cfg->backend, sizeof(cfg->backend), "cpu");
	cfg->batch = 256;
	snprintf(cfg->data, sizeof(cfg->data), "synthetic");
	cfg->epochs = 1;
	sk_loader_config_init(&cfg->loader);
	cfg->optim.momentum = 0.9f;
	cfg->optim.nesterov = 1;
	cfg->optim.beta1 = 0.9f;
	cfg->optim.beta2 = 0.999f;
	cfg->optim.eps = 1e-8f;
	cfg->label_smoothing = 0.1f;
	cfg->ceiling_steps = 10;
	cfg->log_every = 10;

	optind = 1;
	while ((c = getopt_long(argc, argv, "qhV", longopts, NULL)) != -1) {
		switch (c) {
		case O_MODEL: p->model = optarg; break;
		case O_WIDTH: p->width = (float)real(c, optarg, 1e-3, 64); break;
		case O_DIM: p->dim = (int)num(c, optarg, 1, 65536); break;
		case O_DEPTH: p->depth = (int)num(c, optarg, 1, 4096); break;
		case O_HEADS: p->heads = (int)num(c, optarg, 1, 4096); break;
		case O_MLP: p->mlp = (int)num(c, optarg, 1, 1 << 20); break;
		case O_SIZE:
			cfg->model.image_size = (int)num(c, optarg, 1, 8192);
			break;
		case O_CLASSES:
			p->classes = (int)num(c, optarg, 1, 1 << 24);
			break;
		case O_BACKEND:
			if (strcmp(optarg, "cpu") == 0)
				break;
			if (strcmp(optarg, "cuda") == 0)
				usage_error("--backend cuda: the CUDA backend "
				    "is not in this build yet; use --backend "
				    "cpu");
			usage_error("--backend %s: not cpu", optarg);
		case O_STRATEGY:
			if (strcmp(optarg, "single") == 0)
				cfg->strategy = STRATEGY_SINGLE;
			else if (strcmp(optarg, "ddp") == 0)
				cfg->strategy = STRATEGY_DDP;
			else if (strcmp(optarg, "fsdp") == 0)
				cfg->strategy = STRATEGY_FSDP;
			else
				usage_error("--strategy %s: not single, ddp "
				    "or fsdp", optarg);
			p->strategy_set = 1;
			break;
		case O_CKACT: cfg->checkpoint_activations = 1; break;
		case O_THREADS:
			cfg->threads = (int)num(c, optarg, 1, 4096);
			break;
		case O_DATA:
			copy_arg(c, cfg->data, sizeof(cfg->data), optarg);
			break;
		case O_BATCH:
			cfg->batch = (int)num(c, optarg, 1, 1 << 20);
			break;
		case O_EPOCHS:
			cfg->epochs = (int)num(c, optarg, 1, 1 << 20);
			break;
		case O_STEPS:
			cfg->steps = (long)num(c, optarg, 1, 1LL << 40);
			break;
		case O_WORKERS:
			cfg->loader.workers = (int)num(c, optarg, 1, 1024);
			break;
		case O_IO:
			cfg->loader.io_streams = (int)num(c, optarg, 1, 256);
			break;
		case O_PREFETCH:
			cfg->loader.prefetch_bytes = size_arg(c, optarg);
			break;
		case O_SHUFFLE:
			cfg->loader.shuffle = (int)num(c, optarg, 0, 1 << 24);
			break;
		case O_CROP:
			for (i = 0; crops[i] != NULL; i++)
				if (strcmp(optarg, crops[i]) == 0)
					break;
			if (crops[i] == NULL)
				usage_error("--crop %s: not random-resized, "
				    "center or none", optarg);
			cfg->loader.crop = (enum sk_crop)i;
			break;
		case O_STRICT: cfg->loader.strict = 1; break;
		case O_THROTTLE:
			cfg->throttle = real(c, optarg, 1e-3, 1e9);
			break;
		case O_OPTIM:
			if (strcmp(optarg, "sgd") == 0)
				cfg->optim.kind = OPTIM_SGD;
			else if (strcmp(optarg, "adamw") == 0)
				cfg->optim.kind = OPTIM_ADAMW;
			else
				usage_error("--optimizer %s: not sgd or adamw",
				    optarg);
			p->optim_set = 1;
			break;
		case O_LR: p->lr = real(c, optarg, 0, 1e3); break;
		case O_MOMENTUM:
			cfg->optim.momentum = (float)real(c, optarg, 0, 1);
			break;
		case O_NONESTEROV: cfg->optim.nesterov = 0; break;
		case O_WD: p->wd = real(c, optarg, 0, 10); break;
		case O_WARMUP:
			cfg->optim.warmup = (long)num(c, optarg, 0, 1LL << 40);
			break;
		case O_SMOOTH:
			cfg->label_smoothing = (float)real(c, optarg, 0, 1);
			break;
		case O_CLIP: p->clip = real(c, optarg, 0, 1e9); break;
		case O_SEED:
			cfg->seed = (uint64_t)num(c, optarg, 0, INT64_MAX);
			break;
		case O_CKDIR:
			copy_arg(c, cfg->checkpoint_dir,
			    sizeof(cfg->checkpoint_dir), optarg);
			break;
		case O_CKEVERY:
			cfg->checkpoint_every = (long)num(c, optarg, 1,
			    1LL << 40);
			break;
		case O_RESUME: cfg->resume = 1; break;
		case O_CEIL:
			cfg->ceiling_steps = (long)num(c, optarg, 0, 1 << 20);
			break;
		case O_PRICE:
			cfg->price_per_hour = real(c, optarg, 0, 1e6);
			break;
		case O_JSON:
			copy_arg(c, cfg->json, sizeof(cfg->json), optarg);
			break;
		case O_DUMP:
			copy_arg(c, cfg->dump_params, sizeof(cfg->dump_params),
			    optarg);
			break;
		case O_LOSSES:
			copy_arg(c, cfg->losses, sizeof(cfg->losses), optarg);
			break;
		case O_LOGEVERY:
			cfg->log_every = (int)num(c, optarg, 0, 1 << 30);
			break;
		case O_PROFILE: cfg->profile = 1; break;
		case 'q':
			cfg->quiet = 1;
			cfg->log_every = 0;
			break;
		case 'h':
			if (comm == NULL || comm_rank(comm) == 0)
				fputs(usage_long, stdout);
			if (comm)
				comm_close(comm);
			exit(0);
		case 'V':
			if (comm == NULL || comm_rank(comm) == 0)
				printf("shardtrain %s\n", PACKAGE_VERSION);
			if (comm)
				comm_close(comm);
			exit(0);
		default:
			usage_error("unknown option (see --help)");
		}
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
}

/* Defaults that depend on other options. */
static void
finish(struct parsed *p, int world)
{
	struct train_config *cfg = &p->cfg;
	char err[512];

	if (p->classes == 0) {
		if (strcmp(cfg->data, "synthetic") == 0)
			p->classes = 10;
		else if (is_manifest(cfg->data))
			p->classes = manifest_classes(cfg->data);
		if (p->classes == 0)
			p->classes = 1000;
	}
	if (model_config_from_name(&cfg->model, p->model,
	    cfg->model.image_size, p->classes, err, sizeof(err)) != 0)
		usage_error("--model: %s", err);
	cfg->model.width = p->width;
	if (p->width != 1 && cfg->model.family != MODEL_RESNET)
		usage_error("--width is for ResNets; a ViT's width comes from "
		    "its size (vit-ti, vit-s, ...) or --dim");
	if ((p->dim || p->depth || p->heads || p->mlp) &&
	    cfg->model.family != MODEL_VIT)
		usage_error("--dim, --depth, --heads and --mlp shape a ViT; a "
		    "ResNet's depth is in its name and --width scales it");
	if (p->dim)
		cfg->model.dim = p->dim;
	if (p->depth)
		cfg->model.layers = p->depth;
	if (p->heads)
		cfg->model.heads = p->heads;
	if (p->mlp)
		cfg->model.mlp = p->mlp;
	{
		/* the shape checks (patch vs image size, strides) are the
		 * options' fault: report them as usage errors */
		struct model m;

		if (model_build(&m, &cfg->model, err, sizeof(err)) != 0)
			usage_error("%s", err);
		model_free(&m);
	}
	if (strcmp(cfg->data, "synthetic") != 0) {
		if (is_manifest(cfg->data))
			cfg->loader.manifest = cfg->data;
		else
			cfg->loader.urls = cfg->data;
	}
	if (!p->strategy_set)
		cfg->strategy = world > 1 ? STRATEGY_DDP : STRATEGY_SINGLE;
	if (cfg->strategy == STRATEGY_SINGLE && world > 1)
		usage_error("--strategy single with %d ranks: use ddp or fsdp "
		    "under mpirun", world);
	if (!p->optim_set)
		cfg->optim.kind = cfg->model.family == MODEL_VIT ?
		    OPTIM_ADAMW : OPTIM_SGD;
	if (p->lr < 0)
		p->lr = (cfg->optim.kind == OPTIM_SGD ? 0.1 : 1e-3) *
		    cfg->batch / 256.0;
	if (p->wd < 0)
		p->wd = cfg->optim.kind == OPTIM_SGD ? 1e-4 : 0.05;
	if (p->clip < 0)
		p->clip = cfg->optim.kind == OPTIM_SGD ? 0 : 1;
	cfg->optim.lr = (float)p->lr;
	cfg->optim.weight_decay = (float)p->wd;
	cfg->optim.clip = (float)p->clip;
	if (cfg->resume && cfg->checkpoint_dir[0] == '\0')
		usage_error("--resume needs --checkpoint-dir");
	if (cfg->checkpoint_every && cfg->checkpoint_dir[0] == '\0')
		usage_error("--checkpoint-every needs --checkpoint-dir");
}

/* ------------------------------------------------------------------------ */
/* shardtrain info                                                          */

static int
info_main(int argc, char **argv)
{
	struct parsed p;
	struct model m;
	char err[512];
	uint64_t params, macs;
	int i;

	parse(argc, argv, &p);
	if (p.classes == 0)
		p.classes = 1000;	/* sizes are quoted for ImageNet */
	finish(&p, 1);
	if (model_build(&m, &p.cfg.model, err, sizeof(err)) != 0) {
		fprintf(stderr, "%s: %s\n", progname, err);
		return 1;
	}
	params = model_param_count(&m);
	macs = model_forward_macs(&m);
	printf("model:        %s at %dx%d, %d classes\n", m.cfg.name,
	    m.cfg.image_size, m.cfg.image_size, m.cfg.num_classes);
	if (m.cfg.family == MODEL_VIT)
		printf("shape:        patch %d, width %d, %d blocks, %d heads, "
		    "MLP %d, %d tokens\n", m.cfg.patch, m.cfg.dim,
		    m.cfg.layers, m.cfg.heads, m.cfg.mlp,
		    (m.cfg.image_size / m.cfg.patch) *
		    (m.cfg.image_size / m.cfg.patch) + 1);
	else
		printf("shape:        depth %d, width x%g\n", m.cfg.depth,
		    (double)m.cfg.width);
	printf("parameters:   %" PRIu64 " (%.2fM)\n", params, params / 1e6);
	printf("forward:      %.3f GMACs = %.3f GFLOPs per image "
	    "(training ~%.2f GFLOPs)\n", macs / 1e9, 2 * macs / 1e9,
	    6 * macs / 1e9);
	printf("layers:       %d in %d blocks (the FSDP and checkpointing "
	    "unit)\n", m.nlayers, m.nblocks);
	{
		size_t act = 0;

		for (i = 0; i < m.nacts; i++)
			act += m.acts[i].per_sample * (m.acts[i].has_grad ? 2 : 1);
		printf("activations:  %.1f MiB per image in training "
		    "(without checkpointing)\n", act * 4.0 / 1048576.0);
	}
	printf("fp32 state:   %.1f MiB of parameters, x4 with gradients and "
	    "AdamW moments\n", params * 4.0 / 1048576.0);
	model_free(&m);
	return 0;
}

int
main(int argc, char **argv)
{
	struct parsed p;
	struct run_result res;
	char err[512];
	int rc;

	if (argc > 1 && strcmp(argv[1], "report") == 0)
		return report_main(argc - 1, argv + 1);
	if (argc > 1 && strcmp(argv[1], "info") == 0)
		return info_main(argc - 1, argv + 1);

	/* MPI first: the launcher may own some of argv */
	comm = comm_open(&argc, &argv, err, sizeof(err));
	if (comm == NULL) {
		fprintf(stderr, "%s: %s\n", progname, err);
		return 1;
	}
	parse(argc, argv, &p);
	finish(&p, comm_world(comm));
	rc = train_run(&p.cfg, comm, &res);
	if (rc == 0 && comm_rank(comm) == 0) {
		report_print(&res, &p.cfg);
		if (p.cfg.json[0] && report_write_json(p.cfg.json, &res,
		    &p.cfg) != 0) {
			fprintf(stderr, "%s: %s: %s\n", progname, p.cfg.json,
			    strerror(errno));
			rc = 1;
		}
	}
	run_result_free(&res);
	comm_close(comm);
	return rc;
}
