/*
 * test_report.c - the verdict on crafted numbers (each rule and its
 * edges), the printed report, the JSON file read back with jansson, and
 * `shardtrain report` on crafted runs: the table, its errors and exit
 * codes, and real PNG and SVG plots when gnuplot is installed; hostile
 * runs: escaping, the reader's checks, planted symlinks.
 */
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "harness.h"
#include "report.h"
#include "train.h"

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */

static void
base_config(struct train_config *cfg, const char *data)
{
	/* The JSON's "tool" is the message prefix, as in shardtrain. */
	cli_init("shardtrain");
	memset(cfg, 0, sizeof *cfg);
	snprintf(cfg->model.name, sizeof cfg->model.name, "resnet18");
	cfg->model.family = MODEL_RESNET;
	cfg->model.image_size = 32;
	cfg->model.num_classes = 10;
	cfg->model.depth = 18;
	cfg->model.width = 1;
	snprintf(cfg->backend, sizeof cfg->backend, "cpu");
	cfg->strategy = STRATEGY_SINGLE;
	cfg->batch = 64;
	snprintf(cfg->data, sizeof cfg->data, "%s", data);
	cfg->epochs = 1;
	cfg->optim.kind = OPTIM_SGD;
	cfg->optim.lr = 0.1f;
	cfg->optim.momentum = 0.9f;
	cfg->optim.nesterov = 1;
	cfg->optim.weight_decay = 1e-4f;
	cfg->label_smoothing = 0.1f;
	cfg->loader.workers = 4;
	cfg->loader.io_streams = 2;
	cfg->loader.prefetch_bytes = 64 << 20;
	cfg->ceiling_steps = 10;
}

static void
base_result(struct run_result *res, double wait, double loader,
    double compute, const char *stage)
{
	memset(res, 0, sizeof *res);
	res->world = 1;
	res->steps = 100;
	res->images = 6400;
	res->seconds = 10;
	res->images_per_s = 640;
	res->wait_share = wait;
	res->loader_ips = loader;
	res->compute_ips = compute;
	res->gemm_share = -1;
	res->cost_per_epoch = -1;
	snprintf(res->bound_stage, sizeof res->bound_stage, "%s", stage);
}

/* Decide on the numbers given and return the verdict. */
static enum verdict
decide(struct run_result *res, double wait, double loader, double compute,
    const char *stage, const char *data, double throttle)
{
	struct train_config cfg;

	base_config(&cfg, data);
	cfg.throttle = throttle;
	base_result(res, wait, loader, compute, stage);
	verdict_decide(res, &cfg);
	t_diag("wait %.2f loader %g compute %g%s -> %s: %s | %s", wait,
	    loader, compute, throttle > 0 ? " throttled" : "",
	    verdict_name(res->verdict), res->reason, res->hint);
	CHECK(res->reason[0] != '\0');
	CHECK(res->hint[0] != '\0');
	return res->verdict;
}

/*
 * Run report_main(argv) in a child with stdout and stderr in files; return
 * its exit status and the two outputs (the caller frees them).
 */
static int
run_report(char **argv, char **out, char **err)
{
	const char *opath = "report.out", *epath = "report.err";
	int argc, status;
	pid_t pid;

	for (argc = 0; argv[argc] != NULL; argc++)
		;
	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (freopen(opath, "w", stdout) == NULL ||
		    freopen(epath, "w", stderr) == NULL)
			_exit(99);
		{
			static const struct cli_command *const table[] = {
				&report_command, NULL
			};
			char *av[64];
			int i, first;

			av[0] = "shardtrain";
			for (i = 0; i < argc && i < 62; i++)
				av[i + 1] = argv[i];
			av[i + 1] = NULL;
			cli_dispatch("shardtrain", NULL, table, NULL, i + 1, av,
			    &first);
			status = report_main(i + 1 - first, av + first);
		}
		fflush(NULL);
		_exit(status);
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status));
	*out = t_read_file(opath, NULL);
	*err = t_read_file(epath, NULL);
	return WEXITSTATUS(status);
}

/* report_print's text, printed by a child (stdout is the TAP stream). */
static char *
print_report(const struct run_result *res, const struct train_config *cfg)
{
	int status;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (freopen("print.txt", "w", stdout) == NULL)
			_exit(99);
		report_print(res, cfg);
		fflush(NULL);
		_exit(0);
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	return t_read_file("print.txt", NULL);
}

/* Write a run's JSON: model, strategy, data, images/s, wait, cost. */
static void
write_run(const char *path, const char *model, enum strategy_kind st,
    int world, const char *data, double ips, double wait, double cost)
{
	struct train_config cfg;
	struct run_result res;
	struct epoch_result ep[2];

	base_config(&cfg, data);
	snprintf(cfg.model.name, sizeof cfg.model.name, "%s", model);
	cfg.strategy = st;
	base_result(&res, wait, 2 * ips, 2 * ips, "decode");
	res.world = world;
	res.images_per_s = ips;
	res.cost_per_epoch = cost;
	memset(ep, 0, sizeof ep);
	ep[0].epoch = 0;
	ep[0].seconds = 40;
	ep[0].cost = cost;
	ep[1].epoch = 1;
	ep[1].seconds = 42;
	ep[1].cost = cost;
	res.epochs = ep;
	res.nepochs = 2;
	verdict_decide(&res, &cfg);
	report_write_json(path, &res, &cfg);
}

/* ------------------------------------------------------------------------ */
/* the verdict                                                              */

TEST(report_verdict_input_by_share)
{
	struct run_result r;

	CHECK_EQ_INT(decide(&r, 0.62, 410, 1630, "decode", "d.json", 0),
	    VERDICT_INPUT);
	CHECK_CONTAINS(r.reason, "data wait 62.0% of step time");
	CHECK_CONTAINS(r.reason, "loader alone 410 img/s < compute alone "
	    "1630 img/s");
	CHECK_CONTAINS(r.hint, "--workers");
	CHECK_CONTAINS(r.hint, "shardtool pack --resize-short");
	CHECK_EQ_STR(verdict_name(r.verdict), "input-bound");

	/* The share alone is enough, even with a fast loader; the edge
	 * belongs to input. */
	CHECK_EQ_INT(decide(&r, 0.25, 5000, 1000, "io", "d.json", 0),
	    VERDICT_INPUT);
	CHECK_CONTAINS(r.hint, "--io-streams");
	CHECK_CONTAINS(r.hint, "--prefetch");
	CHECK_EQ_INT(decide(&r, 0.2499, 5000, 1000, "io", "d.json", 0),
	    VERDICT_BALANCED);
}

TEST(report_verdict_input_by_ceiling)
{
	struct run_result r;

	/* Hardly any wait yet (the ring was full when it started), but
	 * the loader alone cannot keep up. */
	CHECK_EQ_INT(decide(&r, 0.02, 500, 1000, "io", "d.json", 0),
	    VERDICT_INPUT);
	CHECK_CONTAINS(r.reason, "data wait 2.0%");
	CHECK_CONTAINS(r.reason, "loader alone 500 img/s < compute alone "
	    "1000 img/s");
	CHECK_CONTAINS(r.hint, "--io-streams");
	/* 0.9 of the compute is the edge. */
	CHECK_EQ_INT(decide(&r, 0.02, 899, 1000, "", "d.json", 0),
	    VERDICT_INPUT);
	CHECK_CONTAINS(r.hint, "shardload bench");
	CHECK_EQ_INT(decide(&r, 0.02, 900, 1000, "", "d.json", 0),
	    VERDICT_BALANCED);
}

TEST(report_verdict_compute)
{
	struct run_result r;

	CHECK_EQ_INT(decide(&r, 0.01, 3000, 1000, "decode", "d.json", 0),
	    VERDICT_COMPUTE);
	CHECK_EQ_STR(verdict_name(r.verdict), "compute-bound");
	CHECK_CONTAINS(r.reason, "loader alone 3000 img/s > compute alone "
	    "1000 img/s");
	CHECK_CONTAINS(r.hint, "the input has headroom");
	CHECK_CONTAINS(r.hint, "--batch");
	/* Both edges: 5% and 1.1x. */
	CHECK_EQ_INT(decide(&r, 0.05, 1100, 1000, "", "d.json", 0),
	    VERDICT_COMPUTE);
	CHECK_EQ_INT(decide(&r, 0.0501, 1100, 1000, "", "d.json", 0),
	    VERDICT_BALANCED);
	CHECK_EQ_INT(decide(&r, 0.05, 1099, 1000, "", "d.json", 0),
	    VERDICT_BALANCED);
}

TEST(report_verdict_balanced)
{
	struct run_result r;

	CHECK_EQ_INT(decide(&r, 0.12, 2000, 1000, "decode", "d.json", 0),
	    VERDICT_BALANCED);
	CHECK_EQ_STR(verdict_name(r.verdict), "balanced");
	CHECK_CONTAINS(r.hint, "close");
	CHECK_CONTAINS(r.hint, "--workers");
	CHECK_EQ_INT(decide(&r, 0.03, 1000, 1000, "io", "d.json", 0),
	    VERDICT_BALANCED);
	CHECK_CONTAINS(r.reason, "loader alone 1000 img/s ~ compute alone "
	    "1000 img/s");
	CHECK_CONTAINS(r.hint, "--io-streams");
}

TEST(report_verdict_unknown_ceilings)
{
	struct run_result r;

	/* No ceilings: the share decides alone. */
	CHECK_EQ_INT(decide(&r, 0.30, -1, -1, "", "d.json", 0),
	    VERDICT_INPUT);
	CHECK_CONTAINS(r.reason, "ceilings not measured");
	CHECK_EQ_INT(decide(&r, 0.04, -1, -1, "", "d.json", 0),
	    VERDICT_COMPUTE);
	CHECK_EQ_INT(decide(&r, 0.10, -1, -1, "", "d.json", 0),
	    VERDICT_BALANCED);
	/* One ceiling missing: a slow loader number alone decides nothing. */
	CHECK_EQ_INT(decide(&r, 0.04, 10, -1, "", "d.json", 0),
	    VERDICT_COMPUTE);
	CHECK_CONTAINS(r.reason, "compute ceiling unknown");
	CHECK_EQ_INT(decide(&r, 0.04, -1, 1000, "", "d.json", 0),
	    VERDICT_COMPUTE);
	CHECK_CONTAINS(r.reason, "loader ceiling unknown");

	/* The printed block says n/a for them. */
	{
		struct train_config cfg;
		char *txt;

		base_config(&cfg, "d.json");
		base_result(&r, 0.3, -1, -1, "");
		verdict_decide(&r, &cfg);
		txt = print_report(&r, &cfg);
		CHECK_CONTAINS(txt, "loader alone   n/a img/s");
		CHECK_CONTAINS(txt, "compute alone  n/a img/s");
		CHECK_CONTAINS(txt, "INPUT-BOUND");
		free(txt);
	}
}

TEST(report_verdict_far_below_both)
{
	struct train_config cfg;
	struct run_result r;

	/* 98.6 img/s against ceilings of 7242 (loader) and 1049 (compute):
	 * neither bound explains it, and the hint says so. */
	base_config(&cfg, "s3://b/in/");
	base_result(&r, 0.02, 7242, 1049, "decode");
	r.images_per_s = 98.6;
	verdict_decide(&r, &cfg);
	CHECK_EQ_INT(r.verdict, VERDICT_COMPUTE);
	CHECK_CONTAINS(r.hint, "the run took 98.6 img/s, under half of both "
	    "ceilings");
	CHECK_CONTAINS(r.hint, "other processes on the CPUs");
	/* At 0.8 of the lower ceiling the usual hint stands. */
	r.images_per_s = 840;
	verdict_decide(&r, &cfg);
	CHECK_CONTAINS(r.hint, "the input has headroom");
}

TEST(report_verdict_synthetic)
{
	struct run_result r;

	/* Synthetic data is compute-bound by construction, whatever the
	 * (noisy) share says. */
	CHECK_EQ_INT(decide(&r, 0.40, -1, 1630, "", "synthetic", 0),
	    VERDICT_COMPUTE);
	CHECK_CONTAINS(r.reason, "synthetic");
	CHECK_CONTAINS(r.reason, "compute alone 1630 img/s");
	/* Throttled, it is an input like any other. */
	CHECK_EQ_INT(decide(&r, 0.80, 100, 1630, "", "synthetic", 100),
	    VERDICT_INPUT);
	CHECK_CONTAINS(r.reason, "throttled to 100 img/s");
	CHECK_CONTAINS(r.hint, "--throttle 100 img/s");
	CHECK_EQ_INT(decide(&r, 0.01, 5000, 1000, "", "synthetic", 5000),
	    VERDICT_COMPUTE);
	CHECK_CONTAINS(r.hint, "--throttle 5000");
	/* A throttled real source is named in the input-bound hint too... */
	CHECK_EQ_INT(decide(&r, 0.5, 200, 1000, "decode", "d.json", 200),
	    VERDICT_INPUT);
	CHECK_CONTAINS(r.hint, "--throttle 200 img/s");
	/* ...unless the loader could not reach the throttle anyway. */
	CHECK_EQ_INT(decide(&r, 0.5, 120, 1000, "decode", "d.json", 200),
	    VERDICT_INPUT);
	CHECK_CONTAINS(r.reason, "throttled to 200 img/s");
	CHECK_CONTAINS(r.hint, "--workers");
}

/* ------------------------------------------------------------------------ */
/* the printed report and the JSON file                                     */

TEST(report_print_lines)
{
	struct train_config cfg;
	struct run_result r;
	struct epoch_result ep[2];
	char *txt;

	base_config(&cfg, "d.json");
	cfg.price_per_hour = 3.0;
	base_result(&r, 0.12, 410, 1630, "decode");
	r.gemm_share = 0.712;
	r.params = 25557032;
	r.gflops_per_image = 8.18;
	r.peak_param_bytes = 292.5 * 1048576;
	r.skipped = 3;
	r.cost_per_epoch = 0.034;
	r.t.step = 10;
	r.t.wait = 1.2;
	memset(ep, 0, sizeof ep);
	ep[0] = (struct epoch_result){ 0, 50, 3200, 41.2, 1234.5, 0.12,
	    0.012, 2.3012 };
	ep[1] = (struct epoch_result){ 1, 50, 3200, 40.0, 1300.0, 0.10,
	    -1, 2.1 };
	r.epochs = ep;
	r.nepochs = 2;
	verdict_decide(&r, &cfg);
	txt = print_report(&r, &cfg);
	t_diag("%s", txt);
	CHECK_CONTAINS(txt, "epoch 0: 1234.5 img/s, 41.2 s, data wait 12.0%, "
	    "loss 2.301, $0.012\n");
	CHECK_CONTAINS(txt, "epoch 1: 1300.0 img/s, 40.0 s, data wait 10.0%, "
	    "loss 2.100\n");
	CHECK_CONTAINS(txt, "\nINPUT-BOUND\n");
	CHECK_CONTAINS(txt, "  data wait      12.0% of step time");
	CHECK_CONTAINS(txt, "  loader alone   410 img/s");
	CHECK_CONTAINS(txt, "  compute alone  1630 img/s");
	CHECK_CONTAINS(txt, r.reason);
	CHECK_CONTAINS(txt, r.hint);
	CHECK_CONTAINS(txt, "25.56M params");
	CHECK_CONTAINS(txt, "8.18 GFLOPs/image");
	CHECK_CONTAINS(txt, "292.5 MiB");
	CHECK_CONTAINS(txt, "71.2% of step time");
	CHECK_CONTAINS(txt, "3 samples");
	CHECK_CONTAINS(txt, "$0.034 per epoch");
	free(txt);
}

static double
jreal(json_t *root, const char *a, const char *b)
{
	json_t *v = json_object_get(json_object_get(root, a), b);

	if (!json_is_number(v))
		t_fail(__FILE__, __LINE__, "%s.%s is not a number", a, b);
	return json_number_value(v);
}

static const char *
jstr(json_t *root, const char *a, const char *b)
{
	json_t *v = json_object_get(json_object_get(root, a), b);

	if (!json_is_string(v))
		t_fail(__FILE__, __LINE__, "%s.%s is not a string", a, b);
	return json_string_value(v);
}

TEST(report_json_roundtrip)
{
	struct train_config cfg;
	struct run_result r;
	struct epoch_result ep[2];
	json_error_t jerr;
	json_t *root, *e, *v;
	const char *path = "run.json";

	base_config(&cfg, "gs://bucket/imagenet/train-{000000..000146}.tar");
	snprintf(cfg.model.name, sizeof cfg.model.name, "vit-ti16");
	cfg.model.family = MODEL_VIT;
	cfg.model.patch = 16;
	cfg.model.dim = 192;
	cfg.model.layers = 12;
	cfg.model.heads = 3;
	cfg.model.mlp = 768;
	cfg.strategy = STRATEGY_FSDP;
	cfg.optim.kind = OPTIM_ADAMW;
	cfg.optim.lr = 1e-3f;
	cfg.optim.beta2 = 0.999f;
	cfg.optim.clip = 1;
	cfg.optim.warmup = 5;
	cfg.seed = 1234567890123ULL;
	cfg.threads = 3;
	cfg.checkpoint_activations = 1;
	cfg.throttle = 250;
	base_result(&r, 0.3, -1, 900.5, "");
	r.world = 2;
	r.t = (struct step_times){ 1.5, 0.25, 3.0, 6.0, 0.5, 0.75, 12.0 };
	r.first_loss = 6.9;
	r.last_loss = 6.1;
	r.params = 5717416;
	r.gflops_per_image = 2.5;
	r.peak_param_bytes = 33.25 * 1048576;
	r.peak_rss_bytes = 512ull << 20;
	r.skipped = 7;
	r.skipped_by[0] = 5;
	r.skipped_by[SK_SKIP_NREASONS - 1] = 2;
	r.images = 12800000000ULL;	/* beyond 32 bits */
	memset(ep, 0, sizeof ep);
	ep[0] = (struct epoch_result){ 0, 40, 2560, 4.0, 640, 0.31, -1, 6.5 };
	ep[1] = (struct epoch_result){ 1, 40, 2560, 4.5, 569, 0.29, -1, 6.2 };
	r.epochs = ep;
	r.nepochs = 2;
	verdict_decide(&r, &cfg);
	report_write_json(path, &r, &cfg);
	CHECK(access("run.json.part", F_OK) != 0);

	root = json_load_file(path, 0, &jerr);
	if (root == NULL)
		t_fail(__FILE__, __LINE__, "%s:%d:%d: %s", path, jerr.line,
		    jerr.column, jerr.text);
	CHECK_EQ_INT(json_integer_value(json_object_get(root, "schema")), 1);
	CHECK_EQ_STR(json_string_value(json_object_get(root, "tool")),
	    "shardtrain");
	CHECK_EQ_STR(jstr(root, "config", "model"), "vit-ti16");
	CHECK_EQ_STR(jstr(root, "config", "family"), "vit");
	CHECK_EQ_STR(jstr(root, "config", "strategy"), "fsdp");
	CHECK_EQ_STR(jstr(root, "config", "backend"), "cpu");
	CHECK_EQ_STR(jstr(root, "config", "source"), cfg.data);
	CHECK(jreal(root, "config", "world") == 2);
	CHECK(jreal(root, "config", "global_batch") == 64);
	CHECK(jreal(root, "config", "batch_per_rank") == 32);
	CHECK(jreal(root, "config", "threads") == 3);
	CHECK(jreal(root, "config", "throttle_images_per_second") == 250);
	CHECK(jreal(root, "config", "seed") == 1234567890123.0);
	CHECK(json_is_true(json_object_get(json_object_get(root, "config"),
	    "checkpoint_activations")));
	v = json_object_get(json_object_get(root, "config"), "optimizer");
	CHECK_EQ_STR(json_string_value(json_object_get(v, "kind")), "adamw");
	/* The float as written on the command line, not 0.0010000000474. */
	CHECK(json_number_value(json_object_get(v, "lr")) == 1e-3);
	CHECK(json_number_value(json_object_get(v, "beta2")) == 0.999);
	CHECK_EQ_INT(json_integer_value(json_object_get(v, "warmup")), 5);
	v = json_object_get(json_object_get(root, "config"), "arch");
	CHECK_EQ_INT(json_integer_value(json_object_get(v, "dim")), 192);
	CHECK(jreal(root, "config", "workers") == 4);
	v = json_object_get(json_object_get(root, "config"), "loader");
	CHECK_EQ_INT(json_integer_value(json_object_get(v, "io_streams")), 2);

	CHECK(jreal(root, "result", "images_per_second") == 640);
	CHECK(jreal(root, "result", "wait_share") == 0.3);
	CHECK(jreal(root, "result", "compute_images_per_second") == 900.5);
	CHECK(json_is_null(json_object_get(json_object_get(root, "result"),
	    "loader_images_per_second")));
	CHECK(json_is_null(json_object_get(json_object_get(root, "result"),
	    "gemm_share")));
	CHECK(json_is_null(json_object_get(json_object_get(root, "result"),
	    "cost_per_epoch_usd")));
	CHECK(json_is_null(json_object_get(json_object_get(root, "result"),
	    "bound_stage")));
	CHECK(jreal(root, "result", "images") == 12800000000.0);
	CHECK(jreal(root, "result", "params") == 5717416);
	CHECK(json_is_integer(json_object_get(json_object_get(root, "result"),
	    "peak_param_bytes")));
	CHECK(jreal(root, "result", "peak_param_bytes") == 33.25 * 1048576);
	CHECK(jreal(root, "result", "peak_rss_bytes") == 512 << 20);
	CHECK(jreal(root, "result", "skipped") == 7);
	v = json_object_get(json_object_get(root, "result"),
	    "skipped_by_reason");
	CHECK_EQ_INT(json_object_size(v), SK_SKIP_NREASONS);
	CHECK_EQ_INT(json_integer_value(json_object_get(v,
	    sk_skip_reason_name(0))), 5);
	CHECK(jreal(root, "result", "last_loss") == 6.1);
	v = json_object_get(json_object_get(root, "result"), "stage_seconds");
	CHECK(json_number_value(json_object_get(v, "forward")) == 3.0);
	CHECK(json_number_value(json_object_get(v, "step")) == 12.0);
	CHECK(json_number_value(json_object_get(v, "h2d")) == 0.25);
	CHECK_EQ_STR(jstr(root, "result", "verdict"), "input-bound");
	CHECK_EQ_STR(jstr(root, "result", "reason"), r.reason);
	CHECK_EQ_STR(jstr(root, "result", "hint"), r.hint);

	v = json_object_get(root, "epochs");
	CHECK(json_is_array(v));
	CHECK_EQ_INT(json_array_size(v), 2);
	e = json_array_get(v, 1);
	CHECK_EQ_INT(json_integer_value(json_object_get(e, "epoch")), 1);
	CHECK(json_number_value(json_object_get(e, "wall_seconds")) == 4.5);
	CHECK(json_number_value(json_object_get(e, "loss")) == 6.2);
	CHECK(json_is_null(json_object_get(e, "cost_usd")));
	json_decref(root);

	/* A folder that does not exist: exit 1 naming it, nothing left. */
	{
		int status;
		pid_t pid;

		fflush(NULL);
		if ((pid = fork()) == 0) {
			if (freopen("w.err", "w", stderr) == NULL)
				_exit(99);
			report_write_json("no/such/run.json", &r, &cfg);
			_exit(0);
		}
		CHECK(waitpid(pid, &status, 0) == pid);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1);
		{
		char *werr = t_read_file("w.err", NULL);

		CHECK_CONTAINS(werr, "no/such/run.json");
		free(werr);
		}
	}
}

TEST(report_json_nan_is_null)
{
	struct train_config cfg;
	struct run_result r;
	json_t *root;

	base_config(&cfg, "synthetic");
	base_result(&r, 0, -1, -1, "");
	r.last_loss = NAN;
	verdict_decide(&r, &cfg);
	report_write_json("nan.json", &r, &cfg);
	root = json_load_file("nan.json", 0, NULL);
	CHECK(root != NULL);
	CHECK(json_is_null(json_object_get(json_object_get(root, "result"),
	    "last_loss")));
	json_decref(root);
}

/* ------------------------------------------------------------------------ */
/* shardtrain report                                                        */

TEST(report_main_table)
{
	char *argv[] = { "report", "a.json",
	    "b.json", "c.json", "d.json", NULL };
	char *out, *err;

	write_run("a.json", "resnet18", STRATEGY_SINGLE, 1,
	    "synthetic", 1630.25, 0.001, -1);
	/* A bucket keeps its name in the column. */
	write_run("d.json", "resnet18", STRATEGY_SINGLE, 1,
	    "s3://my-bucket/in/in-train.json", 90, 0.3, -1);
	write_run("b.json", "vit-ti16", STRATEGY_DDP, 2,
	    "/data/shards/cifar10.json", 410, 0.62, 0.034);
	write_run("c.json", "resnet50", STRATEGY_FSDP, 4,
	    "http://host:8080/in/train-{000..009}.tar?x=1", 100, 0.1, 12);
	CHECK_EQ_INT(run_report(argv, &out, &err), 0);
	t_diag("\n%s", out);
	CHECK_CONTAINS(out, "run");
	CHECK_CONTAINS(out, "images/s");
	CHECK_CONTAINS(out, "epoch time");
	CHECK_CONTAINS(out, "verdict");
	CHECK_CONTAINS(out, "a.json");
	CHECK_CONTAINS(out, "b.json");
	CHECK_CONTAINS(out, "synthetic");
	CHECK_CONTAINS(out, "file:cifar10.json");
	CHECK_CONTAINS(out, "http:train-{000..009}.tar ");
	CHECK_CONTAINS(out, "s3:my-bucket/in-train.json");
	CHECK_CONTAINS(out, "vit-ti16");
	CHECK_CONTAINS(out, "ddp");
	CHECK_CONTAINS(out, "fsdp");
	CHECK_CONTAINS(out, "1630.2");
	CHECK_CONTAINS(out, "41.0 s");		/* mean of 40 and 42 */
	CHECK_CONTAINS(out, "62.0%");
	CHECK_CONTAINS(out, "$0.034");
	CHECK_CONTAINS(out, "$12.000");
	CHECK_CONTAINS(out, "compute-bound");
	CHECK_CONTAINS(out, "input-bound");
	/* A header and one line per run, rows in the order given. */
	{
		int lines = 0;
		char *p;

		for (p = out; *p != '\0'; p++)
			lines += *p == '\n';
		CHECK_EQ_INT(lines, 5);
		CHECK(strstr(out, "a.json") < strstr(out, "b.json"));
		CHECK(strstr(out, "b.json") < strstr(out, "c.json"));
	}
	CHECK_EQ_STR(err, "");
	free(out);
	free(err);
}

TEST(report_main_errors)
{
	char *out, *err;
	const char *bad = "bad.json", *part = "part.json";

	write_run("a.json", "resnet18", STRATEGY_SINGLE, 1,
	    "synthetic", 1000, 0, -1);
	t_write_file(bad, "{\"schema\": 1,\n  oops }\n", 22);
	t_write_file(part, "{\"schema\": 1, \"tool\": \"shardtrain\", "
	    "\"config\": {}}\n", 50);

	/* Bad JSON: the file, its line and column. */
	{
		char *argv[] = { "report", "a.json",
		    (char *)bad, NULL };

		CHECK_EQ_INT(run_report(argv, &out, &err), 1);
		t_diag("%s", err);
		CHECK_CONTAINS(err, "shardtrain report: ");
		CHECK_CONTAINS(err, "bad.json:2:");
		free(out);
		free(err);
	}
	/* Valid JSON without the fields. */
	{
		char *argv[] = { "report", (char *)part, NULL };

		CHECK_EQ_INT(run_report(argv, &out, &err), 1);
		t_diag("%s", err);
		CHECK_CONTAINS(err, "part.json: not a shardtrain run: "
		    "config.model is missing");
		free(out);
		free(err);
	}
	/* A missing file. */
	{
		char *argv[] = { "report", "none.json", NULL };

		CHECK_EQ_INT(run_report(argv, &out, &err), 1);
		t_diag("%s", err);
		CHECK_CONTAINS(err, "none.json");
		free(out);
		free(err);
	}
}

TEST(report_main_usage)
{
	char *out, *err;
	char *a = "a.json";

	write_run(a, "resnet18", STRATEGY_SINGLE, 1, "synthetic", 1000, 0, -1);
	{
		char *argv[] = { "report", "--bogus", a, NULL };

		CHECK_EQ_INT(run_report(argv, &out, &err), 2);
		CHECK_CONTAINS(err, "--bogus");
		CHECK_CONTAINS(err, "usage: shardtrain report");
		free(out);
		free(err);
	}
	{
		char *argv[] = { "report", NULL };

		CHECK_EQ_INT(run_report(argv, &out, &err), 2);
		CHECK_CONTAINS(err, "usage:");
		free(out);
		free(err);
	}
	{
		char *argv[] = { "report", a, "--plot", "runs.jpg", NULL };

		CHECK_EQ_INT(run_report(argv, &out, &err), 2);
		CHECK_CONTAINS(err, "runs.jpg");
		CHECK_CONTAINS(err, "usage:");
		free(out);
		free(err);
	}
	{
		char *argv[] = { "report", a, "--plot", NULL };

		CHECK_EQ_INT(run_report(argv, &out, &err), 2);
		CHECK_CONTAINS(err, "usage:");
		free(out);
		free(err);
	}
	{
		char *argv[] = { "report", "--help", NULL };

		CHECK_EQ_INT(run_report(argv, &out, &err), 0);
		CHECK_CONTAINS(out, "usage: shardtrain report");
		CHECK_CONTAINS(out, "--plot");
		free(out);
		free(err);
	}
}

static void
need_gnuplot(void)
{
	if (system("command -v gnuplot >/dev/null 2>&1") != 0)
		t_skip("gnuplot is not installed (apt-get install gnuplot-nox)");
}

TEST(report_plot_png)
{
	static const unsigned char sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n',
	    0x1a, '\n' };
	char *png = "runs.png";
	char *argv[] = { "report", "a.json",
	    "b \"q\".json", "--plot", png, NULL };
	char *out, *err, *data;
	size_t len;

	need_gnuplot();
	write_run("a.json", "resnet18", STRATEGY_SINGLE, 1,
	    "synthetic", 1630, 0.01, -1);
	write_run("b \"q\".json", "resnet18", STRATEGY_DDP, 2,
	    "/d/c.json", 410, 0.62, 0.5);
	CHECK_EQ_INT(run_report(argv, &out, &err), 0);
	t_diag("stderr: %s", err);
	CHECK_CONTAINS(out, "a.json");
	data = t_read_file(png, &len);
	t_diag("runs.png: %zu bytes", len);
	CHECK(len > 1000);
	CHECK_MEM_EQ(data, sig, 8);
	free(data);
	free(out);
	free(err);
}

TEST(report_plot_svg)
{
	char *svg = "runs.svg";
	char *argv[] = { "report", "--plot", svg, "a.json",
	    "b.json", NULL };
	char *out, *err, *data;
	size_t len;

	need_gnuplot();
	write_run("a.json", "resnet18", STRATEGY_SINGLE, 1,
	    "synthetic", 1630, 0.01, -1);
	write_run("b.json", "vit-ti16", STRATEGY_DDP, 2,
	    "/d/c.json", 410, 0.62, 0.5);
	CHECK_EQ_INT(run_report(argv, &out, &err), 0);
	data = t_read_file(svg, &len);
	t_diag("runs.svg: %zu bytes", len);
	CHECK_CONTAINS(data, "<svg");
	CHECK_CONTAINS(data, "</svg>");
	CHECK_CONTAINS(data, "b.json");
	free(data);
	free(out);
	free(err);
}

TEST(report_plot_no_gnuplot)
{
	char *argv[] = { "report", "a.json", "--plot",
	    "runs.png", NULL };
	char *out, *err;

	write_run("a.json", "resnet18", STRATEGY_SINGLE, 1,
	    "synthetic", 1630, 0.01, -1);
	/* A PATH with no gnuplot in it: the table, then the error. */
	CHECK(setenv("PATH", t_tmpdir(), 1) == 0);
	CHECK_EQ_INT(run_report(argv, &out, &err), 1);
	CHECK_CONTAINS(out, "a.json");
	CHECK_CONTAINS(err, "shardtrain report: gnuplot not found: apt-get "
	    "install gnuplot-nox");
	CHECK(access("runs.png", F_OK) != 0);
	free(out);
	free(err);
}

/* ------------------------------------------------------------------------ */
/* hostile runs: escaping, the reader's checks, planted symlinks            */

static const char good_run[] =
    "{\"schema\": 1, \"tool\": \"shardtrain\", "
    "\"config\": {\"model\": \"resnet18\", "
    "\"strategy\": \"ddp\", \"world\": 2, \"source\": \"synthetic\"}, "
    "\"result\": {\"images_per_second\": 100.5, \"wall_seconds\": 3, "
    "\"wait_share\": 0.5, \"cost_per_epoch_usd\": null, "
    "\"verdict\": \"balanced\"}, \"epochs\": [{\"wall_seconds\": 2}, "
    "{\"wall_seconds\": 4}]}";

/* No byte of s is a control, and none is a raw C1 or bidi control. */
static void
check_printable(const char *s)
{
	for (; *s != '\0'; s++) {
		CHECK((unsigned char)*s >= 0x20 && *s != 0x7f);
		CHECK(strncmp(s, "\xc2\x9b", 2) != 0);
		CHECK(strncmp(s, "\xe2\x80\xae", 3) != 0);
	}
}

TEST(report_escape_controls)
{
	char buf[64];
	const char *s = "a\nb\rc\x1b[2Jd\x7f\\e\xff\xc2\x9b\xe2\x80\xae"
	    "caf\xc3\xa9";

	report_escape(buf, sizeof buf, s, strlen(s));
	t_diag("%s", buf);
	CHECK_EQ_STR(buf, "a\\nb\\rc\\x1b[2Jd\\x7f\\\\e\\xff\\u009b\\u202e"
	    "caf\xc3\xa9");
	check_printable(buf);
	/* Overlong forms and surrogates are not UTF-8 (RFC 3629). */
	report_escape(buf, sizeof buf, "\xc0\xaf\xed\xa0\x80", 5);
	CHECK_EQ_STR(buf, "\\xc0\\xaf\\xed\\xa0\\x80");
	/* Cut at a whole escape, never inside one, with an ellipsis. */
	report_escape(buf, 12, "abcdef\x1b\x1b\x1b", 9);
	CHECK_EQ_STR(buf, "abcdef...");
	report_escape(buf, 12, "abcdefgh", 8);
	CHECK_EQ_STR(buf, "abcdefgh");
	report_escape(buf, 4, "abcdefgh", 8);
	CHECK(strlen(buf) < 4);
}

/* report_read_run on text: 0 or -1, and the message. */
static int
read_run(const char *text, struct run_row *r, char *msg, size_t n)
{
	msg[0] = '\0';
	return report_read_run("x/run.json", text, strlen(text), r, msg, n);
}

TEST(report_read_fields)
{
	static const struct {
		const char *from, *to, *want;
	} bad[] = {
		{ "\"model\": \"resnet18\"", "\"model\": 5",
		    "config.model: expected a string, got an integer" },
		{ "\"world\": 2", "\"world\": 0", "config.world" },
		{ "\"world\": 2", "\"world\": 2.5", "config.world: expected "
		    "an integer" },
		{ "\"schema\": 1", "\"schema\": 4294967297",
		    "schema 4294967297, not 1" },
		{ "\"schema\": 1", "\"schema\": 0", "x/run.json: schema 0, "
		    "not 1: written by an older shardtrain? rerun it" },
		{ "\"schema\": 1", "\"schema\": \"1\"",
		    "schema: expected an integer, got a string" },
		{ "\"schema\": 1", "\"shardtrain\": 1", "no \"schema\", not 1: "
		    "written by an older shardtrain? rerun it" },
		{ "\"tool\": \"shardtrain\"", "\"tool\": \"shardload bench\"",
		    "written by shardload bench, not shardtrain" },
		{ "\"tool\": \"shardtrain\", ", "", "tool is missing" },
		{ "\"images_per_second\": 100.5",
		    "\"images_per_second\": -1",
		    "result.images_per_second: -1 is out of range" },
		{ "\"wait_share\": 0.5", "\"wait_share\": 2",
		    "result.wait_share" },
		{ "\"cost_per_epoch_usd\": null",
		    "\"cost_per_epoch_usd\": true",
		    "result.cost_per_epoch_usd: expected a number or null, got "
		    "a boolean" },
		{ "\"verdict\": \"balanced\"", "\"x\": 1", "result.verdict is "
		    "missing" },
		{ "{\"wall_seconds\": 4}", "{\"wall_seconds\": null}",
		    "epochs[1].wall_seconds" },
		{ "{\"wall_seconds\": 4}", "[]",
		    "epochs[1]: expected an object" },
		{ "\"config\": {", "\"config\": [{\"a\": 1}], \"c\": {",
		    "config: expected an object, got an array" },
		{ "\"world\": 2", "\"world\": 2, \"world\": 3", "duplicate" },
	};
	struct run_row r;
	char msg[512], text[1024];
	size_t i;

	CHECK_EQ_INT(read_run(good_run, &r, msg, sizeof msg), 0);
	CHECK_EQ_STR(r.model, "resnet18");
	CHECK_EQ_STR(r.ranks, "2");
	CHECK_EQ_STR(r.epoch, "3.0 s");
	CHECK_EQ_STR(r.wait, "50.0%");
	CHECK_EQ_STR(r.run, "run.json");
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *at = strstr(good_run, bad[i].from);

		CHECK(at != NULL);
		snprintf(text, sizeof text, "%.*s%s%s", (int)(at - good_run),
		    good_run, bad[i].to, at + strlen(bad[i].from));
		CHECK_EQ_INT(read_run(text, &r, msg, sizeof msg), -1);
		t_diag("%s", msg);
		CHECK_CONTAINS(msg, "x/run.json");
		CHECK_CONTAINS(msg, bad[i].want);
	}
	CHECK_EQ_INT(read_run("[1]", &r, msg, sizeof msg), -1);
	CHECK_CONTAINS(msg, "not a shardtrain run");
	CHECK_EQ_INT(read_run("", &r, msg, sizeof msg), -1);
	CHECK_CONTAINS(msg, "x/run.json");
	CHECK_EQ_INT(report_read_run("big.json", good_run,
	    (size_t)REPORT_MAX_BYTES + 1, &r, msg, sizeof msg), -1);
	CHECK_CONTAINS(msg, "larger than");
}

TEST(report_read_hostile_strings)
{
	struct run_row r;
	char msg[512], text[8192], longs[4000];
	const char *p;

	memset(longs, 'y', sizeof longs - 1);
	longs[sizeof longs - 1] = '\0';
	snprintf(text, sizeof text, "{\"schema\": 1, \"tool\": "
	    "\"shardtrain\", \"config\": {"
	    "\"model\": \"m\\n!touch PWNED\\u001b[31m\\u202e\", "
	    "\"strategy\": \"%s\", \"world\": 1, "
	    "\"source\": \"gs\\u001b://b/`x`\\r\\n\"}, \"result\": {"
	    "\"images_per_second\": 1e14, \"wall_seconds\": 1, "
	    "\"wait_share\": 1, \"cost_per_epoch_usd\": 1e14, "
	    "\"verdict\": \"v\\u0007\"}}", longs);
	CHECK_EQ_INT(report_read_run("d/a\nEOD\n!touch PWNED `x` \"q\" "
	    "\x1b.json", text, strlen(text), &r, msg, sizeof msg), 0);
	t_diag("%s | %s | %s | %s | %s | %s | %s", r.run, r.label, r.model,
	    r.strategy, r.source, r.ips, r.cost);
	check_printable(r.run);
	check_printable(r.model);
	check_printable(r.strategy);
	check_printable(r.source);
	check_printable(r.verdict);
	CHECK_CONTAINS(r.model, "\\n!touch PWNED\\x1b[31m\\u202e");
	CHECK_CONTAINS(r.strategy, "...");
	CHECK_EQ_STR(r.verdict, "v\\x07");
	CHECK_EQ_STR(r.source, "gs\\x1b:`x`\\r\\n");
	CHECK_EQ_STR(r.ips, "1e+14");
	/* The plot's label: a safe set only, whatever the name. */
	for (p = r.label; *p != '\0'; p++)
		CHECK(strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
		    "0123456789 ._+=,:()[]-", *p) != NULL);
	CHECK_EQ_STR(r.label, "a_EOD__touch PWNED _x_ _q_ _.json");
}

TEST(report_json_symlinks_not_followed)
{
	struct train_config cfg;
	struct run_result r;
	char *victim;

	base_config(&cfg, "synthetic");
	base_result(&r, 0, -1, -1, "");
	verdict_decide(&r, &cfg);
	t_write_file("victim", "victim\n", 7);
	CHECK(symlink("victim", "run.json.part") == 0);
	CHECK(symlink("victim", "run.json") == 0);
	report_write_json("run.json", &r, &cfg);
	victim = t_read_file("victim", NULL);
	CHECK_EQ_STR(victim, "victim\n");
	free(victim);
	{
		struct stat st;

		CHECK(lstat("run.json", &st) == 0 && S_ISREG(st.st_mode));
		CHECK(lstat("run.json.part", &st) == 0 && S_ISLNK(st.st_mode));
	}
}

TEST(report_load_not_regular)
{
	struct run_row r;
	char msg[512];

	CHECK(mkfifo("fifo.json", 0600) == 0);
	CHECK_EQ_INT(report_load_run("fifo.json", &r, msg, sizeof msg), -1);
	CHECK_CONTAINS(msg, "fifo.json: not a regular file");
	CHECK_EQ_INT(report_load_run(".", &r, msg, sizeof msg), -1);
	CHECK_CONTAINS(msg, "not a regular file");
	t_write_file("good.json", good_run, strlen(good_run));
	CHECK_EQ_INT(report_load_run("good.json", &r, msg, sizeof msg), 0);
	CHECK_EQ_STR(r.run, "good.json");
}
