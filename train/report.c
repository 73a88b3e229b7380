/*
 * report.c - what a training run found: the verdict (input-bound,
 * compute-bound or balanced) with its evidence and a hint, the report
 * printed at the end of a run, the run's JSON file, and `shardtrain
 * report`, which compares runs from their JSON files and plots them.
 * Every file it writes goes through the atomic writer (sk_atomic_open).
 */
#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

#include "train.h"

/* The verdict's thresholds; the rule is in train.h and shardtrain(1). */
#define WAIT_INPUT	0.25	/* data wait share: input-bound at or above */
#define WAIT_COMPUTE	0.05	/* compute-bound at or below */
#define RATIO_INPUT	0.9	/* loader / compute: input-bound below */
#define RATIO_COMPUTE	1.1	/* compute-bound at or above */

const char *
verdict_name(enum verdict v)
{
	switch (v) {
	case VERDICT_INPUT:
		return "input-bound";
	case VERDICT_COMPUTE:
		return "compute-bound";
	case VERDICT_BALANCED:
		return "balanced";
	}
	return "?";
}

/* ------------------------------------------------------------------------ */
/* the verdict                                                              */

/* An images/s figure: whole numbers from 100 up, "n/a" when unknown. */
static const char *
fmt_ips(char *buf, size_t len, double v)
{
	if (v < 0 || !isfinite(v))
		snprintf(buf, len, "n/a");
	else if (v >= 100)
		snprintf(buf, len, "%.0f", v);
	else
		snprintf(buf, len, "%.1f", v);
	return buf;
}

static int
is_synthetic(const struct train_config *cfg)
{
	return strcmp(cfg->data, "synthetic") == 0;
}

/* What to raise when the input holds the run back, by the loader's
 * slowest stage (shardload bench names it "decode" or "io"). */
static const char *
input_knobs(const char *stage)
{
	if (strcmp(stage, "decode") == 0 || strcmp(stage, "augment") == 0)
		return "more loader workers (--workers N), or pre-resize the "
		    "shards (shardtool pack --resize-short N)";
	if (strcmp(stage, "io") == 0 || strcmp(stage, "read") == 0)
		return "more --io-streams, bigger --prefetch, or copy the "
		    "shards closer (local disk)";
	return "more loader workers (--workers N) or --io-streams; "
	    "shardload bench names the slow stage";
}

static const char *
input_first(const char *stage)
{
	if (strcmp(stage, "decode") == 0 || strcmp(stage, "augment") == 0)
		return "--workers";
	if (strcmp(stage, "io") == 0 || strcmp(stage, "read") == 0)
		return "--io-streams, --prefetch";
	return "--workers, --io-streams";
}

/*
 * Synthetic data costs nothing to load, so its run is compute-bound by
 * construction; --throttle turns it into a rate-limited input like any
 * other. Unknown ceilings (--ceiling-steps 0, or a ceiling that failed)
 * leave the data-wait share alone to decide.
 */
void
verdict_decide(struct run_result *res, const struct train_config *cfg)
{
	char l[32], c[32], th[32], cmp[128], thr[64];
	double share = res->wait_share, ratio = -1;
	int known, free_input, capped;

	known = res->loader_ips >= 0 && res->compute_ips > 0;
	if (known)
		ratio = res->loader_ips / res->compute_ips;
	free_input = is_synthetic(cfg) && cfg->throttle <= 0;
	/* The throttle is what limits the input unless the loader alone
	 * could not reach it anyway. */
	capped = cfg->throttle > 0 && (res->loader_ips < 0 ||
	    res->loader_ips >= RATIO_INPUT * cfg->throttle);

	if (free_input)
		res->verdict = VERDICT_COMPUTE;
	else if (share >= WAIT_INPUT || (known && ratio < RATIO_INPUT))
		res->verdict = VERDICT_INPUT;
	else if (share <= WAIT_COMPUTE && (!known || ratio >= RATIO_COMPUTE))
		res->verdict = VERDICT_COMPUTE;
	else
		res->verdict = VERDICT_BALANCED;

	fmt_ips(l, sizeof l, res->loader_ips);
	fmt_ips(c, sizeof c, res->compute_ips);
	fmt_ips(th, sizeof th, cfg->throttle);
	if (known)
		snprintf(cmp, sizeof cmp, "loader alone %s img/s %s compute "
		    "alone %s img/s", l, ratio < RATIO_INPUT ? "<" :
		    ratio >= RATIO_COMPUTE ? ">" : "~", c);
	else if (res->compute_ips > 0)
		snprintf(cmp, sizeof cmp, "compute alone %s img/s; loader "
		    "ceiling unknown", c);
	else if (res->loader_ips >= 0)
		snprintf(cmp, sizeof cmp, "loader alone %s img/s; compute "
		    "ceiling unknown", l);
	else
		snprintf(cmp, sizeof cmp, "ceilings not measured");
	thr[0] = '\0';
	if (cfg->throttle > 0)
		snprintf(thr, sizeof thr, "; data throttled to %s img/s", th);

	if (free_input && res->compute_ips > 0)
		snprintf(res->reason, sizeof res->reason, "synthetic data, no "
		    "input to wait for: data wait %.1f%% of step time; compute "
		    "alone %s img/s", share * 100, c);
	else if (free_input)
		snprintf(res->reason, sizeof res->reason, "synthetic data, no "
		    "input to wait for: data wait %.1f%% of step time",
		    share * 100);
	else
		snprintf(res->reason, sizeof res->reason, "data wait %.1f%% of "
		    "step time; %s%s", share * 100, cmp, thr);

	switch (res->verdict) {
	case VERDICT_INPUT:
		if (capped && res->compute_ips > 0)
			snprintf(res->hint, sizeof res->hint, "the data is "
			    "capped by --throttle %s img/s; the compute alone "
			    "could take %s img/s", th, c);
		else if (capped)
			snprintf(res->hint, sizeof res->hint, "the data is "
			    "capped by --throttle %s img/s: raise it or drop "
			    "it", th);
		else
			snprintf(res->hint, sizeof res->hint, "%s",
			    input_knobs(res->bound_stage));
		break;
	case VERDICT_COMPUTE:
		if (free_input)
			snprintf(res->hint, sizeof res->hint, "synthetic data "
			    "costs nothing to load: a bigger --batch, more "
			    "ranks, or a faster backend; --data to try a real "
			    "input");
		else
			snprintf(res->hint, sizeof res->hint, "the input has "
			    "headroom%s%s%s: a bigger --batch, more ranks, or "
			    "a faster backend", cfg->throttle > 0 ? " even at "
			    "--throttle " : "", cfg->throttle > 0 ? th : "",
			    cfg->throttle > 0 ? " img/s" : "");
		break;
	case VERDICT_BALANCED:
		if (capped)
			snprintf(res->hint, sizeof res->hint, "input (--throttle "
			    "%s img/s) and compute are close: a faster compute "
			    "would wait on the data; raise --throttle first",
			    th);
		else
			snprintf(res->hint, sizeof res->hint, "input and compute "
			    "are close: raise the input first (%s), or a "
			    "faster compute will only wait on it; then a bigger "
			    "--batch or more ranks",
			    input_first(res->bound_stage));
		break;
	}
}

/* ------------------------------------------------------------------------ */
/* the report printed after a run                                           */

static void
fmt_cost(char *buf, size_t len, double usd)
{
	if (usd < 0 || !isfinite(usd))
		snprintf(buf, len, "-");
	else if (usd >= 100)
		snprintf(buf, len, "$%.0f", usd);
	else if (usd >= 0.01 || usd == 0)
		snprintf(buf, len, "$%.3f", usd);
	else	/* a short demo's cent fractions: keep two digits */
		snprintf(buf, len, "$%.2g", usd);
}

static void
print_verdict_word(enum verdict v)
{
	const char *s;

	for (s = verdict_name(v); *s != '\0'; s++)
		putchar(*s >= 'a' && *s <= 'z' ? *s - 'a' + 'A' : *s);
	putchar('\n');
}

void
report_print(const struct run_result *res, const struct train_config *cfg)
{
	char a[32], b[32];
	double ms;
	int i;

	for (i = 0; i < res->nepochs; i++) {
		const struct epoch_result *e = &res->epochs[i];

		printf("epoch %d: %.1f img/s, %.1f s, data wait %.1f%%, "
		    "loss %.3f", e->epoch, e->images_per_s, e->seconds,
		    e->wait_share * 100, e->loss);
		if (e->cost >= 0) {
			fmt_cost(a, sizeof a, e->cost);
			printf(", %s", a);
		}
		putchar('\n');
	}
	if (res->nepochs > 0)
		putchar('\n');

	printf("%-16s %ld steps, %" PRIu64 " images, %.1f s, %.1f img/s on "
	    "%d rank%s\n", "run", res->steps, res->images, res->seconds,
	    res->images_per_s, res->world, res->world == 1 ? "" : "s");
	if (res->steps > 0) {
		ms = 1000.0 / (double)res->steps;
		printf("%-16s %.1f ms: data wait %.1f, h2d %.1f, forward %.1f, "
		    "backward %.1f, comm %.1f, optimizer %.1f (rank 0)\n",
		    "per step", res->t.step * ms, res->t.wait * ms,
		    res->t.h2d * ms, res->t.fwd * ms, res->t.bwd * ms,
		    res->t.comm * ms, res->t.optim * ms);
	}
	printf("%-16s %.3f -> %.3f\n", "loss", res->first_loss,
	    res->last_loss);
	printf("%-16s %s, %s, %.2fM params, %.2f GFLOPs/image\n", "model",
	    cfg->model.name, strategy_name(cfg->strategy),
	    (double)res->params / 1e6, res->gflops_per_image);
	printf("%-16s %.1f MiB params + grads + optimizer per rank, peak RSS "
	    "%.1f MiB\n", "memory", res->peak_param_mib, res->peak_rss_mib);
	if (res->gemm_share >= 0)
		printf("%-16s %.1f%% of step time\n", "GEMM share",
		    res->gemm_share * 100);
	printf("%-16s %" PRIu64 " samples\n", "skipped", res->skipped);
	if (res->cost_per_epoch >= 0) {
		fmt_cost(a, sizeof a, res->cost_per_epoch);
		printf("%-16s %s per epoch at $%.2f/hour\n", "cost", a,
		    cfg->price_per_hour);
	}

	putchar('\n');
	print_verdict_word(res->verdict);
	printf("  %-14s %.1f%% of step time\n", "data wait",
	    res->wait_share * 100);
	printf("  %-14s %s img/s", "loader alone",
	    fmt_ips(a, sizeof a, res->loader_ips));
	if (res->bound_stage[0] != '\0')
		printf(" (slowest stage: %s)", res->bound_stage);
	putchar('\n');
	printf("  %-14s %s img/s\n", "compute alone",
	    fmt_ips(b, sizeof b, res->compute_ips));
	printf("  %-14s %s\n", "evidence", res->reason);
	printf("  %-14s %s\n", "hint", res->hint);
	fflush(stdout);
}

/* ------------------------------------------------------------------------ */
/* the JSON file                                                            */

/* A number, or null when unknown (negative) or not finite: JSON has no
 * NaN. */
static json_t *
jnum(double v, int known)
{
	if (!known || !isfinite(v))
		return json_null();
	return json_real(v);
}

/* A float from the command line as the decimal it was written as, not
 * its binary expansion (0.1, not 0.10000000149011612). */
static json_t *
jflt(float f)
{
	char buf[32];

	if (!isfinite(f))
		return json_null();
	snprintf(buf, sizeof buf, "%.7g", (double)f);
	return json_real(strtod(buf, NULL));
}

static const char *
crop_name(enum sk_crop c)
{
	switch (c) {
	case SK_CROP_RANDOM_RESIZED:
		return "rrc";
	case SK_CROP_CENTER:
		return "center";
	case SK_CROP_NONE:
		return "none";
	}
	return "?";
}

static json_t *
config_json(const struct run_result *res, const struct train_config *cfg)
{
	const struct model_config *m = &cfg->model;
	const struct optim_config *o = &cfg->optim;
	json_t *j, *arch;

	if (m->family == MODEL_RESNET)
		arch = json_pack("{s:i, s:o}", "depth", m->depth, "width",
		    jflt(m->width));
	else
		arch = json_pack("{s:i, s:i, s:i, s:i, s:i}", "patch", m->patch,
		    "dim", m->dim, "layers", m->layers, "heads", m->heads,
		    "mlp", m->mlp);
	j = json_pack("{s:s, s:s, s:o, s:i, s:i, s:s, s:s, s:i, s:i, s:s, "
	    "s:i, s:I}",
	    "model", m->name,
	    "family", m->family == MODEL_RESNET ? "resnet" : "vit",
	    "arch", arch,
	    "image_size", m->image_size,
	    "classes", m->num_classes,
	    "backend", cfg->backend,
	    "strategy", strategy_name(cfg->strategy),
	    "world", res->world,
	    "batch", cfg->batch,
	    "data", cfg->data,
	    "epochs", cfg->epochs,
	    "steps", (json_int_t)cfg->steps);
	if (j == NULL)
		return NULL;
	json_object_set_new(j, "optimizer", json_pack("{s:s, s:o, s:o, s:b, "
	    "s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:o}",
	    "kind", o->kind == OPTIM_SGD ? "sgd" : "adamw",
	    "lr", jflt(o->lr),
	    "momentum", jflt(o->momentum),
	    "nesterov", o->nesterov,
	    "beta1", jflt(o->beta1),
	    "beta2", jflt(o->beta2),
	    "eps", jflt(o->eps),
	    "weight_decay", jflt(o->weight_decay),
	    "clip", jflt(o->clip),
	    "warmup", (json_int_t)o->warmup,
	    "total", (json_int_t)o->total,
	    "min_lr", jflt(o->min_lr)));
	json_object_set_new(j, "label_smoothing", jflt(cfg->label_smoothing));
	json_object_set_new(j, "loader", json_pack("{s:i, s:i, s:I, s:i, "
	    "s:s, s:b}",
	    "workers", cfg->loader.workers,
	    "io_streams", cfg->loader.io_streams,
	    "prefetch_bytes", (json_int_t)cfg->loader.prefetch_bytes,
	    "shuffle", cfg->loader.shuffle,
	    "crop", crop_name(cfg->loader.crop),
	    "strict", cfg->loader.strict));
	json_object_set_new(j, "threads", json_integer(cfg->threads));
	json_object_set_new(j, "throttle", json_real(cfg->throttle));
	json_object_set_new(j, "price_per_hour", json_real(cfg->price_per_hour));
	json_object_set_new(j, "seed", json_integer((json_int_t)cfg->seed));
	json_object_set_new(j, "checkpoint_activations",
	    json_boolean(cfg->checkpoint_activations));
	json_object_set_new(j, "ceiling_steps",
	    json_integer((json_int_t)cfg->ceiling_steps));
	return j;
}

static json_t *
result_json(const struct run_result *res)
{
	const struct step_times *t = &res->t;
	json_t *j;

	j = json_pack("{s:o, s:o, s:I, s:I, s:o, s:{s:o, s:o, s:o, s:o, s:o, "
	    "s:o, s:o}}",
	    "images_per_s", jnum(res->images_per_s, 1),
	    "seconds", jnum(res->seconds, 1),
	    "steps", (json_int_t)res->steps,
	    "images", (json_int_t)res->images,
	    "wait_share", jnum(res->wait_share, 1),
	    "times",
	    "wait", jnum(t->wait, 1),
	    "h2d", jnum(t->h2d, 1),
	    "fwd", jnum(t->fwd, 1),
	    "bwd", jnum(t->bwd, 1),
	    "comm", jnum(t->comm, 1),
	    "optim", jnum(t->optim, 1),
	    "step", jnum(t->step, 1));
	if (j == NULL)
		return NULL;
	json_object_set_new(j, "loader_ips",
	    jnum(res->loader_ips, res->loader_ips >= 0));
	json_object_set_new(j, "compute_ips",
	    jnum(res->compute_ips, res->compute_ips >= 0));
	json_object_set_new(j, "gemm_share",
	    jnum(res->gemm_share, res->gemm_share >= 0));
	json_object_set_new(j, "params", json_integer((json_int_t)res->params));
	json_object_set_new(j, "gflops_per_image",
	    jnum(res->gflops_per_image, 1));
	json_object_set_new(j, "peak_param_mib", jnum(res->peak_param_mib, 1));
	json_object_set_new(j, "peak_rss_mib", jnum(res->peak_rss_mib, 1));
	json_object_set_new(j, "cost_per_epoch",
	    jnum(res->cost_per_epoch, res->cost_per_epoch >= 0));
	json_object_set_new(j, "first_loss", jnum(res->first_loss, 1));
	json_object_set_new(j, "last_loss", jnum(res->last_loss, 1));
	json_object_set_new(j, "skipped", json_integer((json_int_t)res->skipped));
	json_object_set_new(j, "verdict", json_string(verdict_name(res->verdict)));
	json_object_set_new(j, "bound_stage", res->bound_stage[0] != '\0' ?
	    json_string(res->bound_stage) : json_null());
	json_object_set_new(j, "reason", json_string(res->reason));
	json_object_set_new(j, "hint", json_string(res->hint));
	return j;
}

/* The errno for an SK_E* code, for report_write_json's callers. */
static int
errno_of(int code)
{
	switch (code) {
	case SK_ENOENT:
		return ENOENT;
	case SK_EACCES:
		return EACCES;
	case SK_ENOSPC:
		return ENOSPC;
	case SK_ENOMEM:
		return ENOMEM;
	case SK_EINVAL:
		return EINVAL;
	}
	return EIO;
}

int
report_write_json(const char *path, const struct run_result *res,
    const struct train_config *cfg)
{
	struct sk_error serr;
	json_t *root = NULL, *epochs;
	char *text = NULL;
	int i, rc = -1, err = ENOMEM;

	epochs = json_array();
	for (i = 0; epochs != NULL && i < res->nepochs; i++) {
		const struct epoch_result *e = &res->epochs[i];

		if (json_array_append_new(epochs, json_pack("{s:i, s:I, s:I, "
		    "s:o, s:o, s:o, s:o, s:o}",
		    "epoch", e->epoch,
		    "steps", (json_int_t)e->steps,
		    "images", (json_int_t)e->images,
		    "seconds", jnum(e->seconds, 1),
		    "images_per_s", jnum(e->images_per_s, 1),
		    "wait_share", jnum(e->wait_share, 1),
		    "cost", jnum(e->cost, e->cost >= 0),
		    "loss", jnum(e->loss, 1))) != 0)
			goto out;
	}
	root = json_pack("{s:i, s:o, s:o, s:o}", "shardtrain", 1,
	    "config", config_json(res, cfg), "result", result_json(res),
	    "epochs", epochs);
	epochs = NULL;			/* json_pack took it, even on failure */
	if (root == NULL)
		goto out;

	if ((text = json_dumps(root, JSON_INDENT(2) |
	    JSON_REAL_PRECISION(15))) == NULL)
		goto out;
	/* The one atomic writer: a symlink or file planted at PATH or at any
	 * temporary name beside it is never written through. */
	if ((rc = sk_atomic_write_file(path, text, strlen(text), 0,
	    &serr)) != 0) {
		err = errno_of(rc);
		rc = -1;
		goto out;
	}
	rc = 0;
out:
	json_decref(epochs);
	json_decref(root);
	free(text);
	if (rc != 0)
		errno = err;
	return rc;
}

/* ------------------------------------------------------------------------ */
/* shardtrain report: compare runs                                          */

static const char report_usage[] =
    "usage: shardtrain report [--plot FILE.png|FILE.svg] RUN.json...\n";

static const char report_help[] =
    "usage: shardtrain report [--plot FILE.png|FILE.svg] RUN.json...\n"
    "\n"
    "Compare runs from the files shardtrain --json wrote: one line per run\n"
    "with its model, strategy, ranks, data source, images/s, epoch time,\n"
    "data-wait share, cost per epoch and verdict.\n"
    "\n"
    "  --plot FILE     also draw images/s and the data-wait share of each\n"
    "                  run with gnuplot, as PNG or SVG by FILE's extension\n"
    "  -h, --help      this help\n";

struct run_row {
	char run[64];
	char model[32];
	char strategy[16];
	char ranks[16];
	char source[96];
	char ips[32];
	char epoch[32];
	char wait[16];
	char cost[32];
	char verdict[16];
	double ips_v, wait_v;
};

static void
rmsg(const char *fmt, ...)
{
	va_list ap;

	fputs("shardtrain: report: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static const char *
base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s != NULL ? s + 1 : path;
}

/* Copy at most n - 1 bytes of s[0..len) into dst, with an ellipsis when
 * cut, so a long name keeps the table readable. */
static void
copy_cut(char *dst, size_t n, const char *s, size_t len)
{
	if (len < n) {
		memcpy(dst, s, len);
		dst[len] = '\0';
		return;
	}
	memcpy(dst, s, n - 4);
	memcpy(dst + n - 4, "...", 4);
}

/*
 * "synthetic", or the scheme and the last path element of the source:
 * "/data/cifar10.json" -> "file:cifar10.json", "gs://b/x/train-{0..9}.tar"
 * -> "gs:train-{0..9}.tar". A query string is left out.
 */
static void
short_source(char *dst, size_t n, const char *data)
{
	char scheme[16] = "file", buf[64];
	const char *p = data, *end, *s, *colon;
	size_t len;

	if (strcmp(data, "synthetic") == 0) {
		snprintf(dst, n, "synthetic");
		return;
	}
	colon = strstr(data, "://");
	if (colon != NULL && (size_t)(colon - data) < sizeof scheme) {
		memcpy(scheme, data, (size_t)(colon - data));
		scheme[colon - data] = '\0';
		p = colon + 3;
	}
	end = p + strcspn(p, "?#");
	while (end > p && end[-1] == '/')
		end--;
	for (s = end; s > p && s[-1] != '/'; s--)
		;
	len = (size_t)(end - s);
	copy_cut(buf, sizeof buf - strlen(scheme) - 1, s, len);
	snprintf(dst, n, "%s:%s", scheme, buf);
}

/* Read one run's JSON file into a table row. 0, or -1 with the message
 * printed. */
static int
load_run(const char *path, struct run_row *r)
{
	json_error_t jerr;
	json_t *root, *cost, *epochs, *e;
	const char *model, *strategy, *data, *verdict;
	double ips, seconds, wait, sum = 0;
	json_int_t world;
	int version, rc = -1;
	size_t i, n = 0;

	root = json_load_file(path, 0, &jerr);
	if (root == NULL) {
		if (jerr.line > 0)
			rmsg("%s:%d:%d: %s", path, jerr.line, jerr.column,
			    jerr.text);
		else if (strstr(jerr.text, path) != NULL)
			rmsg("%s", jerr.text);
		else
			rmsg("%s: %s", path, jerr.text);
		return -1;
	}
	epochs = NULL;
	if (json_unpack_ex(root, &jerr, 0, "{s:i, s:{s:s, s:s, s:I, s:s}, "
	    "s:{s:F, s:F, s:F, s:o, s:s}, s?o}",
	    "shardtrain", &version,
	    "config", "model", &model, "strategy", &strategy, "world", &world,
	    "data", &data,
	    "result", "images_per_s", &ips, "seconds", &seconds,
	    "wait_share", &wait, "cost_per_epoch", &cost, "verdict", &verdict,
	    "epochs", &epochs) != 0) {
		rmsg("%s: not a shardtrain run: %s", path, jerr.text);
		goto out;
	}
	if (version != 1) {
		rmsg("%s: shardtrain JSON version %d, not 1", path, version);
		goto out;
	}
	if (!json_is_null(cost) && !json_is_number(cost)) {
		rmsg("%s: result.cost_per_epoch is neither a number nor null",
		    path);
		goto out;
	}
	if (epochs != NULL && !json_is_array(epochs)) {
		rmsg("%s: epochs is not an array", path);
		goto out;
	}
	json_array_foreach(epochs, i, e) {
		json_t *s = json_object_get(e, "seconds");

		if (!json_is_number(s)) {
			rmsg("%s: epochs[%zu].seconds is not a number", path, i);
			goto out;
		}
		sum += json_number_value(s);
		n++;
	}

	copy_cut(r->run, sizeof r->run, base_name(path),
	    strlen(base_name(path)));
	copy_cut(r->model, sizeof r->model, model, strlen(model));
	copy_cut(r->strategy, sizeof r->strategy, strategy, strlen(strategy));
	snprintf(r->ranks, sizeof r->ranks, "%lld", (long long)world);
	short_source(r->source, sizeof r->source, data);
	snprintf(r->ips, sizeof r->ips, "%.1f", ips);
	/* The mean epoch; a run of --steps that ended inside its first
	 * epoch has only its own time. */
	snprintf(r->epoch, sizeof r->epoch, "%.1f s", n > 0 ? sum / n :
	    seconds);
	snprintf(r->wait, sizeof r->wait, "%.1f%%", wait * 100);
	fmt_cost(r->cost, sizeof r->cost, json_is_number(cost) ?
	    json_number_value(cost) : -1);
	copy_cut(r->verdict, sizeof r->verdict, verdict, strlen(verdict));
	r->ips_v = ips;
	r->wait_v = wait;
	rc = 0;
out:
	json_decref(root);
	return rc;
}

static void
print_table(const struct run_row *rows, int n)
{
	static const char *const head[] = { "run", "model", "strategy",
	    "ranks", "source", "images/s", "epoch time", "data wait",
	    "cost/epoch", "verdict" };
	/* numbers align right */
	static const int right[] = { 0, 0, 0, 1, 0, 1, 1, 1, 1, 0 };
	enum { NCOL = 10 };
	int w[NCOL], i, k;

	for (k = 0; k < NCOL; k++)
		w[k] = (int)strlen(head[k]);
	for (i = 0; i < n; i++) {
		const char *f[NCOL] = { rows[i].run, rows[i].model,
		    rows[i].strategy, rows[i].ranks, rows[i].source,
		    rows[i].ips, rows[i].epoch, rows[i].wait, rows[i].cost,
		    rows[i].verdict };

		for (k = 0; k < NCOL; k++)
			if ((int)strlen(f[k]) > w[k])
				w[k] = (int)strlen(f[k]);
	}
	for (i = -1; i < n; i++) {
		const char *const *f = head;
		const char *row[NCOL];

		if (i >= 0) {
			row[0] = rows[i].run;
			row[1] = rows[i].model;
			row[2] = rows[i].strategy;
			row[3] = rows[i].ranks;
			row[4] = rows[i].source;
			row[5] = rows[i].ips;
			row[6] = rows[i].epoch;
			row[7] = rows[i].wait;
			row[8] = rows[i].cost;
			row[9] = rows[i].verdict;
			f = row;
		}
		for (k = 0; k < NCOL; k++) {
			if (k == NCOL - 1)
				printf("%s", f[k]);
			else
				printf(right[k] ? "%*s  " : "%-*s  ", w[k],
				    f[k]);
		}
		putchar('\n');
	}
	fflush(stdout);
}

/* The gnuplot on PATH, or NULL. */
static char *
find_gnuplot(void)
{
	const char *path = getenv("PATH"), *p, *e;
	char *cand;
	size_t len;

	if (path == NULL || *path == '\0')
		path = "/usr/local/bin:/usr/bin:/bin";
	for (p = path; ; p = e + 1) {
		e = strchr(p, ':');
		len = e != NULL ? (size_t)(e - p) : strlen(p);
		if ((cand = malloc(len + sizeof "/gnuplot" + 1)) == NULL)
			return NULL;
		/* An empty element is the current folder (POSIX). */
		snprintf(cand, len + sizeof "/gnuplot" + 1, "%.*s/gnuplot",
		    len > 0 ? (int)len : 1, len > 0 ? p : ".");
		if (access(cand, X_OK) == 0)
			return cand;
		free(cand);
		if (e == NULL)
			return NULL;
	}
}

/* Put s in a gnuplot single-quoted string: a quote is doubled. */
static void
gp_quote(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s != '\0'; s++) {
		if (*s == '\'')
			fputc('\'', f);
		fputc(*s, f);
	}
	fputc('\'', f);
}

/*
 * Two panels, one bar per run: images/s above, the data-wait share below,
 * so the fastest run and the one waiting on its input stand out together.
 */
static int
write_plot_script(FILE *f, const char *out, int svg,
    const struct run_row *rows, int n)
{
	int i;

	if (svg)
		fprintf(f, "set terminal svg size 900,640 noenhanced "
		    "font 'sans,11'\n");
	else
		fprintf(f, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) "
		    "{\n  set terminal pngcairo size 900,640 noenhanced "
		    "font 'sans,10'\n} else {\n  set terminal png size 900,640 "
		    "noenhanced\n}\n");
	fprintf(f, "set output ");
	gp_quote(f, out);
	fprintf(f, "\n");
	fprintf(f, "$runs << EOD\n");
	for (i = 0; i < n; i++) {
		const char *s;

		/* The label is a double-quoted field of the data block. */
		fputc('"', f);
		for (s = rows[i].run; *s != '\0'; s++)
			fputc(*s == '"' || *s == '\\' ? '_' : *s, f);
		fprintf(f, "\" %.6g %.6g\n", rows[i].ips_v,
		    rows[i].wait_v * 100);
	}
	fprintf(f, "EOD\n"
	    "set multiplot layout 2,1 title 'shardtrain runs'\n"
	    "set style fill solid 0.8 border -1\n"
	    "set boxwidth 0.6\n"
	    "set grid ytics\n"
	    "set lmargin 12\n"
	    "set xrange [-0.5:%d.5]\n"
	    "set xtics rotate by -20 nomirror\n"
	    "unset key\n"
	    "set ylabel 'images/s'\n"
	    "set yrange [0:*]\n"
	    "plot $runs using 0:2:xtic(1) with boxes lc rgb '#4878a8'\n"
	    "set ylabel 'data wait (%% of step)'\n"
	    "set yrange [0:100]\n"
	    "plot $runs using 0:3:xtic(1) with boxes lc rgb '#d08040'\n"
	    "unset multiplot\n"
	    "set output\n", n - 1);
	return ferror(f) ? -1 : 0;
}

static int
plot_runs(const char *out, int svg, const struct run_row *rows, int n)
{
	char script[4096], *gnuplot;
	const char *tmp = getenv("TMPDIR");
	FILE *f = NULL;
	pid_t pid;
	int fd = -1, status, rc = -1;

	if ((gnuplot = find_gnuplot()) == NULL) {
		rmsg("gnuplot not found: apt-get install gnuplot-nox");
		return -1;
	}
	snprintf(script, sizeof script, "%s/shardtrain-plot.XXXXXX",
	    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
	if ((fd = mkstemp(script)) < 0) {
		rmsg("%s: %s", script, strerror(errno));
		goto out;
	}
	if ((f = fdopen(fd, "w")) == NULL) {
		rmsg("%s: %s", script, strerror(errno));
		close(fd);
		goto out_unlink;
	}
	if (write_plot_script(f, out, svg, rows, n) != 0 || fclose(f) != 0) {
		f = NULL;
		rmsg("%s: %s", script, strerror(errno));
		goto out_unlink;
	}
	f = NULL;

	fflush(NULL);
	if ((pid = fork()) < 0) {
		rmsg("fork: %s", strerror(errno));
		goto out_unlink;
	}
	if (pid == 0) {
		execl(gnuplot, "gnuplot", script, (char *)NULL);
		fprintf(stderr, "shardtrain: report: %s: %s\n", gnuplot,
		    strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			rmsg("waitpid: %s", strerror(errno));
			goto out_unlink;
		}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		rmsg("gnuplot failed (status %d) drawing %s", status, out);
		goto out_unlink;
	}
	if (access(out, R_OK) != 0) {
		rmsg("gnuplot wrote no %s", out);
		goto out_unlink;
	}
	rc = 0;
out_unlink:
	unlink(script);
out:
	free(gnuplot);
	return rc;
}

static int
has_suffix(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a > b && strcasecmp(s + a - b, suffix) == 0;
}

int
report_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "plot", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct run_row *rows = NULL;
	const char *plot = NULL;
	int c, i, n, svg = 0, rc = 1;

	optind = 0;			/* a fresh scan: main() used getopt */
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			plot = optarg;
			break;
		case 'h':
			fputs(report_help, stdout);
			return 0;
		case ':':
			rmsg("%s needs a value", argv[optind - 1]);
			fputs(report_usage, stderr);
			return 2;
		default:
			rmsg("unknown option %s", argv[optind - 1]);
			fputs(report_usage, stderr);
			return 2;
		}
	}
	if (plot != NULL) {
		if (has_suffix(plot, ".svg"))
			svg = 1;
		else if (!has_suffix(plot, ".png")) {
			rmsg("--plot %s: the name must end in .png or .svg",
			    plot);
			fputs(report_usage, stderr);
			return 2;
		}
	}
	n = argc - optind;
	if (n < 1) {
		rmsg("no run given");
		fputs(report_usage, stderr);
		return 2;
	}
	if ((rows = calloc((size_t)n, sizeof *rows)) == NULL) {
		rmsg("out of memory");
		return 1;
	}
	for (i = 0; i < n; i++)
		if (load_run(argv[optind + i], &rows[i]) != 0)
			goto out;
	print_table(rows, n);
	if (plot != NULL && plot_runs(plot, svg, rows, n) != 0)
		goto out;
	rc = 0;
out:
	free(rows);
	return rc;
}
