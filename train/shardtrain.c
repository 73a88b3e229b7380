/*
 * shardtrain.c - the shardtrain CLI: parse the options into a
 * train_config, run it on every rank, print the report on rank 0.
 * "shardtrain info" prints a model's size; "shardtrain report" compares
 * the JSON files of several runs.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "comm.h"
#include "train.h"

static struct comm *comm;		/* for a clean exit under mpirun */

static const char about[] =
"Trains a ResNet or a ViT on shards streamed by the shardkit loader (or on\n"
"synthetic data), times every step by stage, then measures the compute\n"
"alone and the loader alone and says whether training is input-bound or\n"
"compute-bound. Under mpirun -np N it trains with --strategy ddp or fsdp;\n"
"--batch is per rank.\n";

/* ------------------------------------------------------------------------ */
/* options                                                                  */

enum {
	O_MODEL = 1, O_WIDTH, O_CLASSES, O_BACKEND, O_STRATEGY, O_CKACT,
	O_THREADS, O_DATA, O_GBATCH, O_STEPS, O_THROTTLE, O_OPTIM, O_LR,
	O_MOMENTUM, O_NONESTEROV, O_WD, O_WARMUP, O_SMOOTH, O_CLIP, O_CKDIR,
	O_CKEVERY, O_RESUME, O_CEIL, O_PRICE, O_JSON, O_DUMP, O_LOSSES,
	O_LOGEVERY, O_DIM, O_DEPTH, O_HEADS, O_MLP, O_PROFILE, O_PLOT,
	O_PRECISION, O_DETERMINISTIC
};

static const char *const backends[] = { "cpu", "cuda", NULL };
static const char *const precisions[] = { "fp32", "tf32", "bf16", NULL };
static const char *const strategies[] = { "single", "ddp", "fsdp", NULL };
static const char *const optimizers[] = { "sgd", "adamw", NULL };

#define OPT(name, id, type, arg, help, min, max) \
	{ name, 0, id, type, arg, help, min, max, NULL, 0 }
#define CHOICE(name, id, arg, help, list) \
	{ name, 0, id, CLI_CHOICE, arg, help, 0, 0, list, 0 }
#define END { NULL, 0, 0, 0, NULL, NULL, 0, 0, NULL, 0 }

static const struct cli_option model_opts[] = {
	OPT("model", O_MODEL, CLI_STRING, "NAME",
	    "resnet18|34|50|101|152, vit-ti|s|b|l|h|g|G with a\n"
	    "patch size: vit-l16, vit-h14, vit-ti4 (resnet18)", 0, 0),
	OPT("width", O_WIDTH, CLI_REAL, "X", "ResNet width multiplier (1)",
	    1e-3, 64),
	OPT("dim", O_DIM, CLI_INT, "D", "override a ViT's width", 1, 65536),
	OPT("depth", O_DEPTH, CLI_INT, "N", "override a ViT's blocks", 1,
	    4096),
	OPT("heads", O_HEADS, CLI_INT, "H", "override a ViT's heads", 1,
	    4096),
	OPT("mlp", O_MLP, CLI_INT, "M", "override a ViT's MLP width", 1,
	    1 << 20),
	OPT("classes", O_CLASSES, CLI_INT, "K",
	    "classes (from the manifest or the class folders,\n"
	    "else 1000; synthetic: 10)", 1,
	    1 << 24),
	CHOICE("backend", O_BACKEND, "cpu|cuda", "where to compute (cpu)",
	    backends),
	CHOICE("precision", O_PRECISION, "fp32|tf32|bf16",
	    "bf16 AMP-O2 (the default on cuda), fp32 (the\n"
	    "default on cpu; bf16 there emulates the GPU's\n"
	    "rounding), or fp32 data on TF32 tensor cores", precisions),
	OPT("deterministic", O_DETERMINISTIC, CLI_FLAG, NULL,
	    "cuda: deterministic algorithms only, the same\n"
	    "bits run to run (else the fastest; cpu always is)", 0, 0),
	CHOICE("strategy", O_STRATEGY, "single|ddp|fsdp",
	    "(single for 1 rank, else ddp)", strategies),
	OPT("checkpoint-activations", O_CKACT, CLI_FLAG, NULL,
	    "recompute each block's activations in backward", 0, 0),
	OPT("threads", O_THREADS, CLI_INT, "N",
	    "compute threads (this rank's CPUs; under mpirun\n"
	    "or srun, shared among the node's ranks)", 1, 4096),
	END
};

static const struct cli_option train_data_opts[] = {
	OPT("data", O_DATA, CLI_STRING, "SRC",
	    "a URL pattern, a manifest (.json), a folder of\n"
	    "shards or of CLASS/IMAGE files (--form), or\n"
	    "\"synthetic\" (synthetic)", 0, 0),
	OPT("global-batch", O_GBATCH, CLI_INT, "N",
	    "the batch of all ranks together, instead of\n"
	    "--batch; it must divide by the ranks", 1, 1 << 30),
	OPT("steps", O_STEPS, CLI_INT, "S", "stop after S steps instead of "
	    "--epochs", 1, 1e12),
	OPT("throttle", O_THROTTLE, CLI_REAL, "IMG/S",
	    "cap the data at this many images/s (what-if)", 1e-3, 1e9),
	END
};

static const struct cli_option optim_opts[] = {
	CHOICE("optimizer", O_OPTIM, "sgd|adamw",
	    "(sgd for ResNet, adamw for ViT)", optimizers),
	OPT("lr", O_LR, CLI_REAL, "X",
	    "peak learning rate (sgd 0.1, adamw 1e-3,\n"
	    "x global batch/256)", 0, 1e3),
	OPT("momentum", O_MOMENTUM, CLI_REAL, "X", "SGD momentum (0.9)", 0,
	    1),
	OPT("no-nesterov", O_NONESTEROV, CLI_FLAG, NULL,
	    "plain momentum instead of Nesterov", 0, 0),
	OPT("weight-decay", O_WD, CLI_REAL, "X",
	    "(sgd 1e-4, adamw 0.05); never on norms and biases", 0, 10),
	OPT("warmup", O_WARMUP, CLI_INT, "N", "linear warmup steps (0)", 0,
	    1e12),
	OPT("label-smoothing", O_SMOOTH, CLI_REAL, "X", "(0.1)", 0, 1),
	OPT("clip", O_CLIP, CLI_REAL, "X",
	    "max global gradient norm, 0 = off (sgd 0, adamw 1)", 0, 1e9),
	END
};

static const struct cli_option run_opts[] = {
	OPT("checkpoint-dir", O_CKDIR, CLI_STRING, "DIR",
	    "save model, optimizer and loader position here", 0, 0),
	OPT("checkpoint-every", O_CKEVERY, CLI_INT, "N",
	    "steps between checkpoints (at the end only)", 1, 1e12),
	OPT("resume", O_RESUME, CLI_FLAG, NULL,
	    "continue from the newest checkpoint in the dir", 0, 0),
	OPT("ceiling-steps", O_CEIL, CLI_INT, "N",
	    "steps for each of the two ceilings (10; 0 = skip)", 0, 1 << 20),
	OPT("price-per-hour", O_PRICE, CLI_REAL, "USD",
	    "price of the whole job, for cost per epoch", 0, 1e6),
	OPT("json", O_JSON, CLI_STRING, "FILE",
	    "write the config, per-epoch figures and verdict\n"
	    "(- for stdout; the report then goes to stderr)", 0, 0),
	OPT("dump-params", O_DUMP, CLI_STRING, "FILE",
	    "write the final parameters (raw fp32, flat)", 0, 0),
	OPT("losses", O_LOSSES, CLI_STRING, "FILE",
	    "write every step's loss, one per line", 0, 0),
	OPT("log-every", O_LOGEVERY, CLI_INT, "N",
	    "steps between progress lines (10; 0 = none)", 0, 1 << 30),
	OPT("profile", O_PROFILE, CLI_FLAG, NULL,
	    "time every layer kind and print where steps go", 0, 0),
	END
};

/* The loader's data options, but this tool's --batch also takes "auto";
 * filled from cli_loader_data by data_opts_init(). */
static struct cli_option data_opts[32];

static void
data_opts_init(void)
{
	size_t i;

	for (i = 0; cli_loader_data[i].name != NULL; i++) {
		if (i + 1 >= sizeof(data_opts) / sizeof(data_opts[0]))
			abort();	/* the table outgrew this copy */
		data_opts[i] = cli_loader_data[i];
		if (data_opts[i].id == CLI_L_BATCH) {
			data_opts[i].type = CLI_STRING;
			data_opts[i].arg = "N|auto";
			data_opts[i].help = "samples per batch on each rank "
			    "(256); auto: the largest\npower of two that fits "
			    "the GPU";
		}
	}
	data_opts[i] = cli_loader_data[i];
}

static const struct cli_group train_groups[] = {
	{ "model", model_opts },
	{ "data", data_opts },
	{ "training data", train_data_opts },
	{ "pipeline", cli_loader_pipeline },
	{ "augmentation", cli_loader_augment },
	{ "remote (http, https, gs, s3)", cli_remote_opts },
	{ "optimizer", optim_opts },
	{ "run", run_opts },
	{ NULL, NULL }
};

static const struct cli_option info_opts[] = {
	OPT("model", O_MODEL, CLI_STRING, "NAME", "the model (resnet18)", 0,
	    0),
	OPT("image-size", CLI_L_IMAGE_SIZE, CLI_INT, "N",
	    "input height and width in pixels (224)", 1, 8192),
	OPT("classes", O_CLASSES, CLI_INT, "K", "classes (1000)", 1, 1 << 24),
	OPT("width", O_WIDTH, CLI_REAL, "X", "ResNet width multiplier (1)",
	    1e-3, 64),
	OPT("dim", O_DIM, CLI_INT, "D", "override a ViT's width", 1, 65536),
	OPT("depth", O_DEPTH, CLI_INT, "N", "override a ViT's blocks", 1,
	    4096),
	OPT("heads", O_HEADS, CLI_INT, "H", "override a ViT's heads", 1,
	    4096),
	OPT("mlp", O_MLP, CLI_INT, "M", "override a ViT's MLP width", 1,
	    1 << 20),
	END
};
static const struct cli_group info_groups[] = {
	{ "info", info_opts }, { NULL, NULL }
};

static int train_exec(int, char **);
static int saved_stdout = -1;
static int info_exec(int, char **);

static const struct cli_command train_cmd = {
	"train", "[options]\n"
	"info [--model M] [--image-size N] [--classes K]\n"
	"report [--plot FILE.png|FILE.svg] RUN.json...\n"
	"study [--quick] [--data DIR] [--out DIR] [options]",
	"train and report what bounds it (the default)", about,
	train_groups, 0, 0, train_exec
};

static const struct cli_command info_cmd = {
	"info", "info [--model M] [--image-size N] [--classes K] [--width X]",
	"print a model's size: parameters, FLOPs, activations",
	"Print a model's shape, parameters, forward FLOPs per image and the\n"
	"memory of its activations and fp32 state.\n",
	info_groups, 0, 0, info_exec
};


static int
is_manifest(const char *s)
{
	size_t n = strlen(s);

	return n > 5 && strcasecmp(s + n - 5, ".json") == 0;
}

/* Classes of a files tree (its class folders), or 0 for shards. */
static int
tree_classes(const char *data, enum sk_form form)
{
	struct sk_loader_config c;
	struct sk_strlist classes = { NULL, 0, 0 };
	struct sk_error err;
	enum sk_form found;
	int n = 0;

	sk_loader_config_init(&c);
	c.urls = data;
	c.form = form;
	if (sk_loader_source_form(&c, &found, &classes, &err) != 0)
		die("%s", err.msg);
	if (found == SK_FORM_FILES)
		n = classes.n > (size_t)INT_MAX ? INT_MAX : (int)classes.n;
	sk_strlist_free(&classes);
	return n;
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
	struct cli_loader l;
	const char *model;
	int classes, strategy_set, optim_set, global_batch, batch_set;
	int batch_auto;
	double lr, wd, clip;		/* < 0: the default */
	float width;
	int dim, depth, heads, mlp;	/* 0: the preset's */
};

static void
copy_arg(const struct cli_option *o, char *dst, size_t len, const char *s)
{
	if (strlen(s) >= len)
		usage_error("--%s: too long", o->name);
	memcpy(dst, s, strlen(s) + 1);
}

static void
set_opt(void *ctx, const struct cli_option *o, const struct cli_value *v)
{
	struct parsed *p = ctx;
	struct train_config *cfg = &p->cfg;

	if (o->id == CLI_L_BATCH) {
		long long n;
		char err[128];

		p->batch_set = 1;
		p->batch_auto = strcmp(v->s, "auto") == 0;
		if (p->batch_auto)
			return;
		if (cli_parse_int(v->s, 1, 1 << 20, &n, err, sizeof(err)) != 0)
			usage_error("--batch %s: %s (or auto)", v->s, err);
		p->l.cfg.batch = (int)n;
		return;
	}
	if (cli_loader_set(&p->l, o, v))
		return;
	switch (o->id) {
	case O_MODEL: p->model = v->s; break;
	case O_WIDTH: p->width = (float)v->d; break;
	case O_DIM: p->dim = (int)v->i; break;
	case O_DEPTH: p->depth = (int)v->i; break;
	case O_HEADS: p->heads = (int)v->i; break;
	case O_MLP: p->mlp = (int)v->i; break;
	case O_CLASSES: p->classes = (int)v->i; break;
	case O_BACKEND:
		snprintf(cfg->backend, sizeof(cfg->backend), "%s",
		    v->i == 1 ? "cuda" : "cpu");
		break;
	case O_PRECISION:
		snprintf(cfg->precision, sizeof(cfg->precision), "%s",
		    precisions[v->i]);
		break;
	case O_DETERMINISTIC: cfg->deterministic = 1; break;
	case O_STRATEGY:
		cfg->strategy = v->i == 0 ? STRATEGY_SINGLE : v->i == 1 ?
		    STRATEGY_DDP : STRATEGY_FSDP;
		p->strategy_set = 1;
		break;
	case O_CKACT: cfg->checkpoint_activations = 1; break;
	case O_THREADS: cfg->threads = (int)v->i; break;
	case O_DATA: copy_arg(o, cfg->data, sizeof(cfg->data), v->s); break;
	case O_GBATCH: p->global_batch = (int)v->i; break;
	case O_STEPS: cfg->steps = (long)v->i; break;
	case O_THROTTLE: cfg->throttle = v->d; break;
	case O_OPTIM:
		cfg->optim.kind = v->i == 0 ? OPTIM_SGD : OPTIM_ADAMW;
		p->optim_set = 1;
		break;
	case O_LR: p->lr = v->d; break;
	case O_MOMENTUM: cfg->optim.momentum = (float)v->d; break;
	case O_NONESTEROV: cfg->optim.nesterov = 0; break;
	case O_WD: p->wd = v->d; break;
	case O_WARMUP: cfg->optim.warmup = (long)v->i; break;
	case O_SMOOTH: cfg->label_smoothing = (float)v->d; break;
	case O_CLIP: p->clip = v->d; break;
	case O_CKDIR:
		copy_arg(o, cfg->checkpoint_dir, sizeof(cfg->checkpoint_dir),
		    v->s);
		break;
	case O_CKEVERY: cfg->checkpoint_every = (long)v->i; break;
	case O_RESUME: cfg->resume = 1; break;
	case O_CEIL: cfg->ceiling_steps = (long)v->i; break;
	case O_PRICE: cfg->price_per_hour = v->d; break;
	case O_JSON: copy_arg(o, cfg->json, sizeof(cfg->json), v->s); break;
	case O_DUMP:
		copy_arg(o, cfg->dump_params, sizeof(cfg->dump_params), v->s);
		break;
	case O_LOSSES:
		copy_arg(o, cfg->losses, sizeof(cfg->losses), v->s);
		break;
	case O_LOGEVERY: cfg->log_every = (int)v->i; break;
	case O_PROFILE: cfg->profile = 1; break;
	}
}

static void
parse(const struct cli_command *cmd, int argc, char **argv,
    struct parsed *p)
{
	struct train_config *cfg = &p->cfg;

	memset(p, 0, sizeof(*p));
	p->model = "resnet18";
	p->lr = p->wd = p->clip = -1;
	p->width = 1;
	cli_loader_init(&p->l);
	snprintf(cfg->backend, sizeof(cfg->backend), "cpu");
	cfg->precision[0] = '\0';	/* by backend, once parsed */
	snprintf(cfg->data, sizeof(cfg->data), "synthetic");
	cfg->optim.momentum = 0.9f;
	cfg->optim.nesterov = 1;
	cfg->optim.beta1 = 0.9f;
	cfg->optim.beta2 = 0.999f;
	cfg->optim.eps = 1e-8f;
	cfg->label_smoothing = 0.1f;
	cfg->ceiling_steps = 10;
	cfg->log_every = 10;
	data_opts_init();
	cli_parse(cmd, argc, argv, set_opt, p);
	if (cli_quiet) {
		cfg->quiet = 1;
		cfg->log_every = 0;
	}
}

/* Defaults that depend on other options. */
static void
finish(struct parsed *p, int world)
{
	struct train_config *cfg = &p->cfg;
	char err[512];

	/* The loader's options, with this tool's batch: --batch per rank as
	 * everywhere, or --global-batch; the run works with the global. */
	cli_loader_finish(&p->l, NULL);
	cfg->loader = p->l.cfg;
	cfg->seed = p->l.cfg.seed;
	cfg->epochs = p->l.cfg.epochs;
	cfg->model.image_size = p->l.cfg.image_size;
	if (p->global_batch != 0 && p->batch_set)
		usage_error("--batch (per rank) and --global-batch (all ranks) "
		    "set the same thing: give one");
	if (p->global_batch != 0 && p->global_batch % world != 0)
		usage_error("--global-batch %d does not divide among %d ranks: "
		    "use a multiple of %d, or --batch per rank",
		    p->global_batch, world, world);
	if (p->global_batch != 0)
		cfg->batch = p->global_batch;
	else if (p->batch_auto)
		cfg->batch = 0;		/* train_run finds it */
	else if ((long long)p->l.cfg.batch * world > 1 << 30)
		usage_error("--batch %d x %d ranks is over 2^30", p->l.cfg.batch,
		    world);
	else
		cfg->batch = p->l.cfg.batch * world;

	cfg->classes_from = "--classes";
	if (p->classes == 0) {
		if (strcmp(cfg->data, "synthetic") == 0) {
			p->classes = 10;
			cfg->classes_from = "synthetic data";
		} else if (is_manifest(cfg->data)) {
			p->classes = manifest_classes(cfg->data);
			cfg->classes_from = "the manifest";
		} else {
			p->classes = tree_classes(cfg->data, p->l.cfg.form);
			cfg->classes_from = "the class folders";
		}
		if (p->classes == 0) {
			/* Shards with no manifest say nothing of their
			 * classes: a 10-class set would train a 1000-way
			 * head without a word. Say it once, up front. */
			p->classes = 1000;
			cfg->classes_from = "the default";
			warn("%s: no manifest gives the class count, so the "
			    "model has 1000 classes (ImageNet's); pass --classes "
			    "K for another data set, or read it through the "
			    "manifest that shardtool pack or index writes",
			    cfg->data);
		}
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
	cfg->batch_auto = p->batch_auto;
	if (p->lr < 0 && p->batch_auto) {
		/* set once the batch is found */
		cfg->lr_per_256 = cfg->optim.kind == OPTIM_SGD ? 0.1 : 1e-3;
		p->lr = 0;
	} else if (p->lr < 0)
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
	if (p->batch_auto && strcmp(cfg->backend, "cuda") != 0)
		usage_error("--batch auto finds the largest batch that fits a "
		    "GPU: add --backend cuda, or give --batch N");
	if (cfg->precision[0] == '\0')
		snprintf(cfg->precision, sizeof(cfg->precision), "%s",
		    strcmp(cfg->backend, "cuda") == 0 ? "bf16" : "fp32");
	if (strcmp(cfg->precision, "tf32") == 0 &&
	    strcmp(cfg->backend, "cuda") != 0)
		usage_error("--precision tf32 is a GPU precision: the cpu "
		    "backend computes in fp32 or emulates bf16 (add --backend "
		    "cuda)");
}

/* ------------------------------------------------------------------------ */
/* shardtrain info                                                          */

static int
info_exec(int argc, char **argv)
{
	struct parsed p;
	struct model m;
	char err[512];
	uint64_t params, macs;
	int i;

	parse(&info_cmd, argc, argv, &p);
	if (p.classes == 0)
		p.classes = 1000;	/* sizes are quoted for ImageNet */
	finish(&p, 1);
	if (model_build(&m, &p.cfg.model, err, sizeof(err)) != 0)
		die("%s", err);
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
		size_t act = 0, grad = 0, planned;

		for (i = 0; i < m.nacts; i++) {
			act += m.acts[i].per_sample;
			if (m.acts[i].has_grad)
				grad += m.acts[i].per_sample;
		}
		/* fp32, one image: the lifetimes do not depend on the
		 * batch, so the plan scales with it (but for alignment) */
		if (model_plan_grads(&m, 1, sizeof(float), &planned) != 0)
			die("out of memory");
		printf("activations:  %.1f MiB per image in training "
		    "(without checkpointing),\n              of which %.1f MiB "
		    "gradients (%.1f MiB if each had its own)\n",
		    (act + planned) * 4.0 / 1048576.0, planned * 4.0 / 1048576.0,
		    grad * 4.0 / 1048576.0);
	}
	printf("fp32 state:   %.1f MiB of parameters, x4 with gradients and "
	    "AdamW moments\n", params * 4.0 / 1048576.0);
	model_free(&m);
	return 0;
}

static void
exit_hook(int status)
{
	(void)status;
	if (comm != NULL)
		comm_close(comm);
	comm = NULL;
}

static int
train_exec(int argc, char **argv)
{
	struct parsed p;
	struct run_result res;
	char err[512];
	int rc, to_stdout;

	/* MPI first: the launcher may own some of argv */
	comm = comm_open(&argc, &argv, err, sizeof(err));
	if (comm == NULL)
		die("%s", err);
	cli_set_exit_hook(exit_hook);
	/* Every rank parses; only rank 0 speaks about it. */
	cli_set_silent(comm_rank(comm) != 0);
	parse(&train_cmd, argc, argv, &p);
	finish(&p, comm_world(comm));
	rc = train_run(&p.cfg, comm, &res);
	if (rc == 0 && comm_rank(comm) == 0) {
		/* With --json -, standard output is the JSON alone. */
		to_stdout = strcmp(p.cfg.json, "-") == 0;
		if (to_stdout) {
			fflush(stdout);
			saved_stdout = dup(STDOUT_FILENO);
			dup2(STDERR_FILENO, STDOUT_FILENO);
		}
		report_print(&res, &p.cfg);
		if (to_stdout) {
			fflush(stdout);
			dup2(saved_stdout, STDOUT_FILENO);
			close(saved_stdout);
		}
		if (p.cfg.json[0])
			report_write_json(p.cfg.json, &res, &p.cfg);
	}
	run_result_free(&res);
	comm_close(comm);
	comm = NULL;
	return rc;
}

int
main(int argc, char **argv)
{
	static const struct cli_command *const table[] = {
		&info_cmd, &report_command, &study_command, NULL
	};
	const struct cli_command *cmd;
	char err[256];
	int first, rank, world, local;

	cli_heap_tune();
	/* Under mpirun, rank 0 alone speaks about the command line, from the
	 * first word on (the launcher's environment says which rank this
	 * is); training sets it again from MPI. */
	if (cli_launcher(&rank, &world, &local, err, sizeof err) > 0 &&
	    rank != 0)
		cli_set_silent(1);
	cmd = cli_dispatch("shardtrain", about, table, &train_cmd, argc, argv,
	    &first);
	return cmd->exec(argc - first, argv + first);
}
