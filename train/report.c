/*
 * report.c - what a training run found: the verdict (input-bound,
 * compute-bound or balanced) with its evidence and a hint, the report
 * printed at the end of a run, the run's JSON file, and `shardtrain
 * report`, which compares runs from their JSON files and plots them.
 * Every file it writes goes through the atomic writer (sk_atomic_open).
 */
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "report.h"
#include "train.h"

/* The verdict's rule and thresholds are libshardkit's
 * (sk_verdict_decide), so a PyTorch loop's verdict is shardtrain's. */
#define RATIO_INPUT	SK_VERDICT_RATIO_INPUT
#define RATIO_COMPUTE	SK_VERDICT_RATIO_COMPUTE

const char *
verdict_name(enum verdict v)
{
	switch (v) {
	case VERDICT_INPUT:
		return sk_verdict_name(SK_VERDICT_INPUT);
	case VERDICT_COMPUTE:
		return sk_verdict_name(SK_VERDICT_COMPUTE);
	case VERDICT_BALANCED:
		return sk_verdict_name(SK_VERDICT_BALANCED);
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
#define FAR_BELOW	0.5	/* of the lower ceiling: neither explains it
				 * (the hint says "half") */

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

	switch (sk_verdict_decide(share, res->loader_ips, res->compute_ips,
	    free_input)) {
	case SK_VERDICT_INPUT:
		res->verdict = VERDICT_INPUT;
		break;
	case SK_VERDICT_COMPUTE:
		res->verdict = VERDICT_COMPUTE;
		break;
	default:
		res->verdict = VERDICT_BALANCED;
		break;
	}

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
		else if (res->remote.requests > 0 &&
		    strcmp(res->bound_stage, "io") == 0)
			/* Remote shards: the I/O threads wait on the link. */
			snprintf(res->hint, sizeof res->hint, "the network: "
			    "the I/O threads waited %.1f s for bytes (%llu "
			    "retries); more --parts, --io-streams or "
			    "--connections, or the shards closer",
			    res->remote.wait_seconds, (unsigned long long)
			    res->remote.retries);
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
	/* Far below both ceilings, neither bound explains the run: say so
	 * rather than let the verdict's hint send the user after one. */
	if (known && !capped && res->images_per_s > 0 && res->images_per_s <
	    FAR_BELOW * (ratio < 1 ? res->loader_ips : res->compute_ips)) {
		char run[32];

		fmt_ips(run, sizeof run, res->images_per_s);
		snprintf(res->hint, sizeof res->hint, "the run took %.16s "
		    "img/s, under half of both ceilings: something else held "
		    "it back (other processes on the CPUs, too few cores for "
		    "loader and compute together, a first epoch filling a "
		    "cache, a throttled CPU or GPU)", run);
	}
}

/* ------------------------------------------------------------------------ */
/* the report printed after a run                                           */

/*
 * "shardfs" when the local path data is inside a shardfs mount (the
 * longest mount point of /proc/self/mounts that holds it has the type
 * fuse.shardfs), else NULL. Only the path's text is compared: nothing
 * is opened or followed.
 */
static const char *
source_mount(const char *data)
{
	char line[4096], dev[1024], dir[1024], type[64], path[4096];
	size_t best = 0, len;
	const char *kind = NULL;
	FILE *f;

	if (strstr(data, "://") != NULL || strcmp(data, "synthetic") == 0 ||
	    realpath(data, path) == NULL) {
		/* A pattern: its folder. */
		const char *slash = strrchr(data, '/');

		if (strstr(data, "://") != NULL || slash == NULL)
			return NULL;
		snprintf(dir, sizeof dir, "%.*s", (int)(slash - data), data);
		if (realpath(dir, path) == NULL)
			return NULL;
	}
	if ((f = fopen("/proc/self/mounts", "re")) == NULL)
		return NULL;
	while (fgets(line, sizeof line, f) != NULL) {
		if (sscanf(line, "%1023s %1023s %63s", dev, dir, type) != 3)
			continue;
		len = strlen(dir);
		if (strncmp(path, dir, len) != 0 || (path[len] != '/' &&
		    path[len] != '\0' && strcmp(dir, "/") != 0) || len < best)
			continue;
		best = len;
		kind = strcmp(type, "fuse.shardfs") == 0 ? "shardfs" : NULL;
	}
	fclose(f);
	return kind;
}

static void
fmt_cost(char *buf, size_t len, double usd)
{
	if (usd < 0 || !isfinite(usd))
		snprintf(buf, len, "-");
	else if (usd >= 1e9)	/* would not fit a column */
		snprintf(buf, len, "$%.3g", usd);
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
	printf("%-16s %s, %s, %.*fM params, %.*f GFLOPs/image\n", "model",
	    cfg->model.name, strategy_name(cfg->strategy),
	    cli_decimals(res->params / 1e6), (double)res->params / 1e6,
	    cli_decimals(res->gflops_per_image), res->gflops_per_image);
	printf("%-16s %.1f MiB params + grads + optimizer per rank, peak RSS "
	    "%.1f MiB\n", "memory", res->peak_param_bytes / 1048576.0,
	    res->peak_rss_bytes / 1048576.0);
	if (res->gpu[0]) {
		printf("%-16s %s, peak %.1f MiB held", "GPU", res->gpu,
		    res->peak_gpu_bytes / 1048576.0);
		if (res->world > 1 && res->peak_gpu_by_rank != NULL) {
			int i;

			printf(" (by rank:");
			for (i = 0; i < res->world; i++)
				printf(" %.1f", res->peak_gpu_by_rank[i] /
				    1048576.0);
			printf(")");
		}
		printf("\n");
	}
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
/* A number, or null where it is not known. */
static void
jnum(struct cli_json *j, const char *key, double v, int known)
{
	if (known && isfinite(v))
		cli_json_real(j, key, v);
	else
		cli_json_null(j, key);
}

/* A float from the command line as the decimal it was written as, not
 * its binary expansion (0.1, not 0.10000000149011612). */
static void
jflt(struct cli_json *j, const char *key, float f)
{
	char buf[32];

	snprintf(buf, sizeof buf, "%.7g", (double)f);
	jnum(j, key, strtod(buf, NULL), isfinite(f));
}

static void
config_json(struct cli_json *j, const struct run_result *res,
    const struct train_config *cfg)
{
	const struct model_config *m = &cfg->model;
	const struct optim_config *o = &cfg->optim;
	int vit = m->family == MODEL_VIT;

	cli_json_object(j, "config");
	cli_json_str(j, "model", m->name);
	cli_json_str(j, "family", vit ? "vit" : "resnet");
	/* Every key in both families; null where it does not apply. */
	cli_json_object(j, "arch");
	if (vit) {
		cli_json_null(j, "depth");
		cli_json_null(j, "width");
		cli_json_int(j, "patch", m->patch);
		cli_json_int(j, "dim", m->dim);
		cli_json_int(j, "layers", m->layers);
		cli_json_int(j, "heads", m->heads);
		cli_json_int(j, "mlp", m->mlp);
	} else {
		cli_json_int(j, "depth", m->depth);
		jflt(j, "width", m->width);
		cli_json_null(j, "patch");
		cli_json_null(j, "dim");
		cli_json_null(j, "layers");
		cli_json_null(j, "heads");
		cli_json_null(j, "mlp");
	}
	cli_json_end(j);
	cli_json_int(j, "image_size", m->image_size);
	cli_json_int(j, "classes", m->num_classes);
	cli_json_str(j, "backend", cfg->backend);
	cli_json_str(j, "precision", cfg->precision);
	cli_json_bool(j, "deterministic", cfg->deterministic);
	cli_json_str(j, "strategy", strategy_name(cfg->strategy));
	cli_json_int(j, "world", res->world);
	cli_json_int(j, "batch_per_rank", res->world > 0 ?
	    cfg->batch / res->world : cfg->batch);
	cli_json_int(j, "global_batch", cfg->batch);
	cli_json_source(j, "source", cfg->data);
	/* A local path inside a mount of a remote source: report names
	 * the mount's kind (shardfs), as it would a bucket. */
	cli_json_str(j, "source_mount", source_mount(cfg->data));
	cli_json_int(j, "epochs", cfg->epochs);
	if (cfg->steps > 0)
		cli_json_int(j, "steps", cfg->steps);
	else
		cli_json_null(j, "steps");
	cli_json_uint(j, "seed", cfg->seed);
	cli_json_int(j, "workers", cfg->loader.workers);
	cli_json_int(j, "threads", cfg->threads > 0 ? cfg->threads :
	    cli_cpus_per_rank());
	cli_json_object(j, "optimizer");
	cli_json_str(j, "kind", o->kind == OPTIM_SGD ? "sgd" : "adamw");
	jflt(j, "lr", o->lr);
	jflt(j, "momentum", o->momentum);
	cli_json_bool(j, "nesterov", o->nesterov);
	jflt(j, "beta1", o->beta1);
	jflt(j, "beta2", o->beta2);
	jflt(j, "eps", o->eps);
	jflt(j, "weight_decay", o->weight_decay);
	jflt(j, "clip", o->clip);
	cli_json_int(j, "warmup", o->warmup);
	cli_json_int(j, "total", o->total);
	jflt(j, "min_lr", o->min_lr);
	cli_json_end(j);
	jflt(j, "label_smoothing", cfg->label_smoothing);
	cli_json_object(j, "loader");
	cli_json_int(j, "io_streams", cfg->loader.io_streams);
	cli_json_uint(j, "prefetch_bytes", cfg->loader.prefetch_bytes);
	cli_json_int(j, "shuffle", cfg->loader.shuffle);
	cli_json_str(j, "crop", cli_crop_name(cfg->loader.crop));
	cli_json_bool(j, "flip", cfg->loader.flip);
	cli_json_bool(j, "strict", cfg->loader.strict);
	cli_json_end(j);
	jnum(j, "throttle_images_per_second", cfg->throttle,
	    cfg->throttle > 0);
	jnum(j, "price_per_hour_usd", cfg->price_per_hour,
	    cfg->price_per_hour > 0);
	cli_json_bool(j, "checkpoint_activations",
	    cfg->checkpoint_activations);
	cli_json_int(j, "ceiling_steps", cfg->ceiling_steps);
	cli_json_end(j);
}

static void
result_json(struct cli_json *j, const struct run_result *res)
{
	const struct step_times *t = &res->t;
	const char *reasons[SK_SKIP_NREASONS];
	int i;

	for (i = 0; i < SK_SKIP_NREASONS; i++)
		reasons[i] = sk_skip_reason_name(i);
	cli_json_object(j, "result");
	cli_json_int(j, "steps", res->steps);
	cli_json_uint(j, "images", res->images);
	cli_json_uint(j, "samples", res->samples);
	cli_json_skips(j, res->skipped_by, reasons, SK_SKIP_NREASONS);
	jnum(j, "wall_seconds", res->seconds, 1);
	jnum(j, "images_per_second", res->images_per_s, 1);
	jnum(j, "wait_share", res->wait_share, 1);
	cli_json_object(j, "stage_seconds");
	jnum(j, "data_wait", t->wait, 1);
	jnum(j, "h2d", t->h2d, 1);
	jnum(j, "forward", t->fwd, 1);
	jnum(j, "backward", t->bwd, 1);
	jnum(j, "comm", t->comm, 1);
	jnum(j, "optimizer", t->optim, 1);
	jnum(j, "step", t->step, 1);
	cli_json_end(j);
	jnum(j, "loader_images_per_second", res->loader_ips,
	    res->loader_ips >= 0);
	jnum(j, "compute_images_per_second", res->compute_ips,
	    res->compute_ips >= 0);
	jnum(j, "gemm_share", res->gemm_share, res->gemm_share >= 0);
	cli_json_uint(j, "params", res->params);
	jnum(j, "gflops_per_image", res->gflops_per_image, 1);
	cli_json_uint(j, "peak_param_bytes", res->peak_param_bytes);
	cli_json_uint(j, "peak_rss_bytes", res->peak_rss_bytes);
	if (res->gpu[0]) {
		cli_json_str(j, "gpu", res->gpu);
		cli_json_uint(j, "peak_gpu_bytes", res->peak_gpu_bytes);
	} else {
		cli_json_null(j, "gpu");
		cli_json_null(j, "peak_gpu_bytes");
	}
	if (res->peak_gpu_by_rank != NULL) {
		int i;

		cli_json_array(j, "peak_gpu_bytes_by_rank");
		for (i = 0; i < res->world; i++)
			cli_json_uint(j, NULL, res->peak_gpu_by_rank[i]);
		cli_json_end(j);
	} else
		cli_json_null(j, "peak_gpu_bytes_by_rank");
	jnum(j, "cost_per_epoch_usd", res->cost_per_epoch,
	    res->cost_per_epoch >= 0);
	jnum(j, "first_loss", res->first_loss, 1);
	jnum(j, "last_loss", res->last_loss, 1);
	cli_json_remote(j, "remote", &res->remote, NULL);
	cli_json_str(j, "verdict", verdict_name(res->verdict));
	cli_json_str(j, "bound_stage", res->bound_stage[0] != '\0' ?
	    res->bound_stage : NULL);
	cli_json_str(j, "reason", res->reason);
	cli_json_str(j, "hint", res->hint);
	cli_json_end(j);
}

void
report_write_json(const char *path, const struct run_result *res,
    const struct train_config *cfg)
{
	struct cli_json *j;
	int i;

	j = cli_json_open(path);
	config_json(j, res, cfg);
	result_json(j, res);
	cli_json_array(j, "epochs");
	for (i = 0; i < res->nepochs; i++) {
		const struct epoch_result *e = &res->epochs[i];

		cli_json_object(j, NULL);
		cli_json_int(j, "epoch", e->epoch);
		cli_json_int(j, "steps", e->steps);
		cli_json_uint(j, "images", e->images);
		jnum(j, "wall_seconds", e->seconds, 1);
		jnum(j, "images_per_second", e->images_per_s, 1);
		jnum(j, "wait_share", e->wait_share, 1);
		jnum(j, "cost_usd", e->cost, e->cost >= 0);
		jnum(j, "loss", e->loss, 1);
		cli_json_end(j);
	}
	cli_json_end(j);
	cli_json_close(j);
}

/* ------------------------------------------------------------------------ */
/* shardtrain report: compare runs                                          */

/*
 * Every run file and every name in it is untrusted: a name is data to
 * show, escaped, never text that a terminal or gnuplot could act on.
 * gnuplot is run without a shell, with a fixed argument list, in a
 * private folder, on a fixed script; the runs reach it only through a
 * data file whose labels are cut down to a safe set.
 */

/* ------------------------------------------------------------------------ */
/* escaping                                                                 */

static int
is_label_char(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || (c != '\0' && strchr(" ._+=,:()[]-",
	    c) != NULL);
}

/* The bytes of the character at s[0..len) in UTF-8: a valid lead byte
 * and its continuation bytes, else 1 (a label shows each as one '_'). */
static size_t
char_len(const unsigned char *s, size_t len)
{
	size_t n = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 &&
	    s[0] <= 0xef ? 3 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 1, i;

	if (n > len)
		return 1;
	for (i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 1;
	return n;
}

/* s[0..len) shown into dst[0..n): escaped for a terminal (sk_escape,
 * backslashes too), or for a plot label, cut down to a safe set of ASCII
 * with '_' for every other character. */
static void
esc_copy(char *dst, size_t n, const char *s, size_t len, int label)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i, at = 0;

	if (!label) {
		sk_escape(dst, n, s, len, SK_ESCAPE_BACKSLASH);
		return;
	}
	if (n == 0)
		return;
	for (i = 0; i < len && at + 1 < n; i += char_len(p + i, len - i))
		dst[at++] = p[i] < 0x80 && is_label_char(p[i]) ? (char)p[i] :
		    '_';
	dst[at] = '\0';
}

void
report_escape(char *dst, size_t n, const char *s, size_t len)
{
	esc_copy(dst, n, s, len, 0);
}

/* Columns a shown string takes: its code points (escaping leaves valid
 * UTF-8; wide characters still count one). */
static int
text_width(const char *s)
{
	int w = 0;

	for (; *s != '\0'; s++)
		w += ((unsigned char)*s & 0xc0) != 0x80;
	return w;
}

/* "shardtrain: report: MESSAGE", the message escaped: it may hold a file
 * name or a parser's quote of hostile input. */
static void
rmsg(const char *fmt, ...)
{
	char raw[1024], shown[2048];
	va_list ap;
	int len;

	va_start(ap, fmt);
	len = vsnprintf(raw, sizeof raw, fmt, ap);
	va_end(ap);
	if (len < 0)
		len = 0;
	esc_copy(shown, sizeof shown, raw, (size_t)len < sizeof raw ?
	    (size_t)len : sizeof raw - 1, 0);
	fprintf(stderr, "%s: %s\n", cli_prog(), shown);
}

/* ------------------------------------------------------------------------ */
/* reading a run                                                            */

static const char *
base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s != NULL ? s + 1 : path;
}

/* A number for the table: one decimal, or three digits and an exponent
 * when it would not fit a column. */
static void
fmt_num(char *buf, size_t len, double v, const char *unit)
{
	if (fabs(v) < 1e9)
		snprintf(buf, len, "%.1f%s", v, unit);
	else
		snprintf(buf, len, "%.3g%s", v, unit);
}

/*
 * "synthetic", or the scheme and the last path element of the source,
 * with a bucket's name: "/data/cifar10.json" -> "file:cifar10.json",
 * "gs://b/x/train-{0..9}.tar" -> "gs:b/train-{0..9}.tar"; a local path in
 * a shardfs mount (mount, from the run's JSON) -> "shardfs:in.json". A
 * query string is left out.
 */
static void
short_source(char *dst, size_t n, const char *data, const char *mount)
{
	char scheme[48] = "file", elem[64], bucket[64] = "";
	const char *p = data, *end, *s, *colon;
	size_t blen;

	if (strcmp(data, "synthetic") == 0) {
		snprintf(dst, n, "synthetic");
		return;
	}
	colon = strstr(data, "://");
	if (colon != NULL && colon - data < 16) {
		esc_copy(scheme, sizeof scheme, data, (size_t)(colon - data),
		    0);
		p = colon + 3;
		if (strcmp(scheme, "gs") == 0 || strcmp(scheme, "s3") == 0) {
			blen = strcspn(p, "/?#");
			esc_copy(bucket, sizeof bucket - 1, p, blen, 0);
			strcat(bucket, "/");
		}
	} else if (mount != NULL && strcmp(mount, "shardfs") == 0)
		snprintf(scheme, sizeof scheme, "shardfs");
	end = p + strcspn(p, "?#");
	while (end > p && end[-1] == '/')
		end--;
	for (s = end; s > p && s[-1] != '/'; s--)
		;
	esc_copy(elem, sizeof elem, s, (size_t)(end - s), 0);
	if (bucket[0] != '\0' && s == p)	/* the bucket's root */
		bucket[0] = '\0';
	snprintf(dst, n, "%s:%s%s", scheme, bucket, elem);
}

static const char *
type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "an object";
	case JSON_ARRAY:
		return "an array";
	case JSON_STRING:
		return "a string";
	case JSON_INTEGER:
		return "an integer";
	case JSON_REAL:
		return "a number";
	case JSON_TRUE:
	case JSON_FALSE:
		return "a boolean";
	case JSON_NULL:
		return "null";
	}
	return "?";
}

/* What a field must be. */
enum want { W_OBJECT, W_STRING, W_INT, W_NUMBER, W_NUMBER_OR_NULL };

static const char *const want_name[] = { "an object", "a string",
    "an integer", "a number", "a number or null" };

static int
is_want(const json_t *v, enum want w)
{
	switch (w) {
	case W_OBJECT:
		return json_is_object(v);
	case W_STRING:
		return json_is_string(v);
	case W_INT:
		return json_is_integer(v);
	case W_NUMBER:
		return json_is_number(v);
	case W_NUMBER_OR_NULL:
		return json_is_number(v) || json_is_null(v);
	}
	return 0;
}

/*
 * The member of root at a dotted path ("config.model") if it is what w
 * says; NULL with the message in msg when it is missing or of another
 * type, naming the file and the field.
 */
static json_t *
field(json_t *root, const char *path, enum want w, const char *name,
    char *msg, size_t msglen)
{
	json_t *v = root;
	const char *p = path, *dot;
	char key[32];
	size_t len;

	for (;;) {
		dot = strchr(p, '.');
		len = dot != NULL ? (size_t)(dot - p) : strlen(p);
		snprintf(key, sizeof key, "%.*s", (int)len, p);
		if (!json_is_object(v)) {
			snprintf(msg, msglen, "%s: %.*s: expected an object, "
			    "got %s", name, (int)(p - path - 1), path,
			    type_name(v));
			return NULL;
		}
		if ((v = json_object_get(v, key)) == NULL) {
			snprintf(msg, msglen, "%s: not a shardtrain run: %s is "
			    "missing", name, path);
			return NULL;
		}
		if (dot == NULL)
			break;
		p = dot + 1;
	}
	if (!is_want(v, w)) {
		snprintf(msg, msglen, "%s: %s: expected %s, got %s", name, path,
		    want_name[w], type_name(v));
		return NULL;
	}
	return v;
}

/* A number field at least lo and at most hi. */
static int
number_field(json_t *root, const char *path, double lo, double hi,
    double *out, const char *name, char *msg, size_t msglen)
{
	json_t *v;

	if ((v = field(root, path, W_NUMBER, name, msg, msglen)) == NULL)
		return -1;
	*out = json_number_value(v);
	if (!(*out >= lo && *out <= hi)) {
		snprintf(msg, msglen, "%s: %s: %g is out of range (%g to %g)",
		    name, path, *out, lo, hi);
		return -1;
	}
	return 0;
}

/* Anything a run's time or rate could be, with room to spare. */
#define BIG	1e15

int
report_read_run(const char *name, const char *buf, size_t len,
    struct run_row *r, char *msg, size_t msglen)
{
	json_error_t jerr;
	json_t *root, *v, *epochs, *e;
	const char *model, *strategy, *data, *verdict;
	double ips, seconds, wait, cost = -1, s, mean = 0;
	json_int_t version, world;
	int rc = -1;
	size_t i;

	memset(r, 0, sizeof *r);
	if (len > REPORT_MAX_BYTES) {
		snprintf(msg, msglen, "%s: %zu bytes, larger than the %u MiB a "
		    "run file can be", name, len, REPORT_MAX_BYTES >> 20);
		return -1;
	}
	/* A run file never repeats a key: a repeated one would hide a value. */
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL) {
		if (jerr.line > 0)
			snprintf(msg, msglen, "%s:%d:%d: %s", name, jerr.line,
			    jerr.column, jerr.text);
		else
			snprintf(msg, msglen, "%s: %s", name, jerr.text);
		return -1;
	}
	if (!json_is_object(root)) {
		snprintf(msg, msglen, "%s: not a shardtrain run: %s, not an "
		    "object", name, type_name(root));
		goto out;
	}
	/* The layout of schema 1 only: an older shardtrain wrote other keys
	 * ("shardtrain": 1, images_per_s), and another tool's --json is not
	 * a run. */
	if ((v = json_object_get(root, "schema")) == NULL) {
		snprintf(msg, msglen, "%s: no \"schema\", not 1: written by an "
		    "older shardtrain? rerun it", name);
		goto out;
	}
	if ((v = field(root, "schema", W_INT, name, msg, msglen)) == NULL)
		goto out;
	if ((version = json_integer_value(v)) != 1) {
		snprintf(msg, msglen, "%s: schema %lld, not 1: written by %s "
		    "shardtrain? rerun it", name, (long long)version,
		    version < 1 ? "an older" : "a newer");
		goto out;
	}
	if ((v = field(root, "tool", W_STRING, name, msg, msglen)) == NULL)
		goto out;
	if (strcmp(json_string_value(v), "shardtrain") != 0) {
		/* raw, as every message here: the caller escapes it */
		snprintf(msg, msglen, "%s: written by %.48s, not shardtrain: "
		    "not a training run", name, json_string_value(v));
		goto out;
	}
	if ((v = field(root, "config.model", W_STRING, name, msg,
	    msglen)) == NULL)
		goto out;
	model = json_string_value(v);
	if ((v = field(root, "config.strategy", W_STRING, name, msg,
	    msglen)) == NULL)
		goto out;
	strategy = json_string_value(v);
	if ((v = field(root, "config.source", W_STRING, name, msg,
	    msglen)) == NULL)
		goto out;
	data = json_string_value(v);
	if ((v = field(root, "config.world", W_INT, name, msg,
	    msglen)) == NULL)
		goto out;
	if ((world = json_integer_value(v)) < 1) {
		snprintf(msg, msglen, "%s: config.world: %lld ranks", name,
		    (long long)world);
		goto out;
	}
	if (number_field(root, "result.images_per_second", 0, BIG, &ips, name,
	    msg, msglen) != 0 ||
	    number_field(root, "result.wall_seconds", 0, BIG, &seconds, name,
	    msg, msglen) != 0 ||
	    number_field(root, "result.wait_share", 0, 1, &wait, name,
	    msg, msglen) != 0)
		goto out;
	if ((v = field(root, "result.cost_per_epoch_usd", W_NUMBER_OR_NULL, name,
	    msg, msglen)) == NULL)
		goto out;
	if (json_is_number(v) && number_field(root, "result.cost_per_epoch_usd",
	    0, BIG, &cost, name, msg, msglen) != 0)
		goto out;
	if ((v = field(root, "result.verdict", W_STRING, name, msg,
	    msglen)) == NULL)
		goto out;
	verdict = json_string_value(v);

	epochs = json_object_get(root, "epochs");
	if (epochs != NULL && !json_is_array(epochs)) {
		snprintf(msg, msglen, "%s: epochs: expected an array, got %s",
		    name, type_name(epochs));
		goto out;
	}
	/* The mean epoch, kept as a running mean so that no sum can
	 * overflow; a run of --steps that ended inside its first epoch has
	 * only its own time. */
	json_array_foreach(epochs, i, e) {
		if (!json_is_object(e)) {
			snprintf(msg, msglen, "%s: epochs[%zu]: expected an "
			    "object, got %s", name, i, type_name(e));
			goto out;
		}
		v = json_object_get(e, "wall_seconds");
		if (!json_is_number(v) || !((s = json_number_value(v)) >= 0 &&
		    s <= BIG)) {
			snprintf(msg, msglen, "%s: epochs[%zu].wall_seconds: expected "
			    "a number from 0 to %g, got %s", name, i, BIG,
			    v != NULL ? type_name(v) : "nothing");
			goto out;
		}
		mean += (s - mean) / (double)(i + 1);
	}
	if (epochs == NULL || json_array_size(epochs) == 0)
		mean = seconds;

	{
		const char *base = base_name(name);

		esc_copy(r->run, sizeof r->run, base, strlen(base), 0);
		esc_copy(r->label, sizeof r->label, base, strlen(base), 1);
	}
	/* Without JSON_ALLOW_NUL no string holds a NUL: strlen is its
	 * length. */
	esc_copy(r->model, sizeof r->model, model, strlen(model), 0);
	esc_copy(r->strategy, sizeof r->strategy, strategy, strlen(strategy),
	    0);
	snprintf(r->ranks, sizeof r->ranks, "%lld", (long long)world);
	v = json_object_get(json_object_get(root, "config"), "source_mount");
	short_source(r->source, sizeof r->source, data, json_string_value(v));
	fmt_num(r->ips, sizeof r->ips, ips, "");
	fmt_num(r->epoch, sizeof r->epoch, mean, " s");
	snprintf(r->wait, sizeof r->wait, "%.1f%%", wait * 100);
	fmt_cost(r->cost, sizeof r->cost, cost);
	esc_copy(r->verdict, sizeof r->verdict, verdict, strlen(verdict), 0);
	r->ips_v = ips;
	r->wait_v = wait;
	rc = 0;
out:
	json_decref(root);
	return rc;
}

int
report_load_run(const char *path, struct run_row *r, char *msg,
    size_t msglen)
{
	struct stat st;
	char *buf = NULL, *nbuf;
	size_t len = 0, cap;
	ssize_t got;
	int fd, rc = -1;

	/* O_NONBLOCK: a FIFO is refused below, not waited on. */
	fd = open(path, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		snprintf(msg, msglen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0) {
		snprintf(msg, msglen, "%s: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(msg, msglen, "%s: not a regular file", path);
		goto out;
	}
	if ((uint64_t)st.st_size > REPORT_MAX_BYTES) {
		snprintf(msg, msglen, "%s: %lld bytes, larger than the %u MiB a "
		    "run file can be", path, (long long)st.st_size,
		    REPORT_MAX_BYTES >> 20);
		goto out;
	}
	/* The file may grow while it is read: never past the limit. */
	cap = (size_t)st.st_size + 1;
	for (;;) {
		if (len == cap) {
			if (cap > REPORT_MAX_BYTES) {
				snprintf(msg, msglen, "%s: grew past the %u MiB "
				    "a run file can be", path,
				    REPORT_MAX_BYTES >> 20);
				goto out;
			}
			cap = cap * 2 < REPORT_MAX_BYTES + 1 ? cap * 2 :
			    REPORT_MAX_BYTES + 1;
		}
		if ((nbuf = realloc(buf, cap)) == NULL) {
			snprintf(msg, msglen, "%s: out of memory", path);
			goto out;
		}
		buf = nbuf;
		got = read(fd, buf + len, cap - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			snprintf(msg, msglen, "%s: %s", path, strerror(errno));
			goto out;
		}
		if (got == 0)
			break;
		len += (size_t)got;
	}
	rc = report_read_run(path, buf, len, r, msg, msglen);
out:
	free(buf);
	close(fd);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* the table                                                                */

enum { NCOL = 10 };

static void
row_fields(const struct run_row *r, const char *f[NCOL])
{
	f[0] = r->run;
	f[1] = r->model;
	f[2] = r->strategy;
	f[3] = r->ranks;
	f[4] = r->source;
	f[5] = r->ips;
	f[6] = r->epoch;
	f[7] = r->wait;
	f[8] = r->cost;
	f[9] = r->verdict;
}

static void
print_table(const struct run_row *rows, int n)
{
	static const char *const head[NCOL] = { "run", "model", "strategy",
	    "ranks", "source", "images/s", "epoch time", "data wait",
	    "cost/epoch", "verdict" };
	/* numbers align right */
	static const int right[NCOL] = { 0, 0, 0, 1, 0, 1, 1, 1, 1, 0 };
	const char *f[NCOL];
	int w[NCOL], i, k, pad;

	for (k = 0; k < NCOL; k++)
		w[k] = text_width(head[k]);
	for (i = 0; i < n; i++) {
		row_fields(&rows[i], f);
		for (k = 0; k < NCOL; k++)
			if (text_width(f[k]) > w[k])
				w[k] = text_width(f[k]);
	}
	for (i = -1; i < n; i++) {
		if (i < 0)
			memcpy(f, head, sizeof f);
		else
			row_fields(&rows[i], f);
		for (k = 0; k < NCOL; k++) {
			pad = w[k] - text_width(f[k]);
			if (k == NCOL - 1)
				printf("%s", f[k]);
			else if (right[k])
				printf("%*s%s  ", pad, "", f[k]);
			else
				printf("%s%*s  ", f[k], pad, "");
		}
		putchar('\n');
	}
	fflush(stdout);
}

/* ------------------------------------------------------------------------ */
/* the plot                                                                 */

char *
train_find_program(const char *name)
{
	const char *path = getenv("PATH"), *p, *e;
	struct stat st;
	size_t len, cap;
	char *cand;

	if (path == NULL || *path == '\0')
		path = "/usr/local/bin:/usr/bin:/bin";
	for (p = path; ; p = e + 1) {
		e = strchr(p, ':');
		len = e != NULL ? (size_t)(e - p) : strlen(p);
		cap = len + strlen(name) + 2;
		if ((cand = malloc(cap)) == NULL)
			return NULL;
		/* Only absolute folders: an empty or relative element would
		 * run whatever the current folder (perhaps extracted data)
		 * holds under that name. */
		snprintf(cand, cap, "%.*s/%s", (int)len, p, name);
		if (len > 0 && p[0] == '/' && stat(cand, &st) == 0 &&
		    S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
			return cand;
		free(cand);
		if (e == NULL)
			return NULL;
	}
}

/* One line a run: its label in double quotes (the label holds no quote,
 * '#', backslash or control), images/s and the data-wait percentage. */
static char *
plot_data(const struct run_row *rows, int n)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	int i;

	if ((f = open_memstream(&buf, &len)) == NULL)
		return NULL;
	for (i = 0; i < n; i++)
		fprintf(f, "\"%s\" %.6g %.6g\n", rows[i].label[0] != '\0' ?
		    rows[i].label : "_", rows[i].ips_v, rows[i].wait_v * 100);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

/*
 * Two panels, one bar per run: images/s above, the data-wait share below,
 * so the fastest run and the one waiting on its input stand out together.
 * The script is fixed but for the count of runs: no name reaches it, the
 * data comes from plot.dat beside it.
 */
static char *
plot_script(int n)
{
	char *s;

	if (asprintf(&s, "set multiplot layout 2,1 title 'shardtrain runs'\n"
	    "set style fill solid 0.8 border -1\n"
	    "set boxwidth 0.6\n"
	    "set grid ytics\n"
	    "set lmargin 12\n"
	    "set xrange [-0.5:%d.5]\n"
	    "set xtics rotate by -20 nomirror\n"
	    "unset key\n"
	    "set ylabel 'images/s'\n"
	    "set yrange [0:*]\n"
	    "plot 'plot.dat' using 0:2:xtic(1) with boxes lc rgb '#4878a8'\n"
	    "set ylabel 'data wait (%% of step)'\n"
	    "set yrange [0:100]\n"
	    "plot 'plot.dat' using 0:3:xtic(1) with boxes lc rgb '#d08040'\n"
	    "unset multiplot\n", n - 1) < 0)
		return NULL;
	return s;
}

/* Write dir/name whole through the atomic writer. */
static int
write_plot_file(const char *dir, const char *name, const char *head,
    const char *text)
{
	struct sk_error err;
	struct sk_atomic a;
	char path[4096];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	if (sk_atomic_open(&a, path, SK_ATOMIC_NOSYNC, 0600, &err) != 0) {
		rmsg("%s", err.msg);
		return -1;
	}
	if ((f = sk_atomic_stdio(&a, &err)) == NULL) {
		rmsg("%s", err.msg);
		sk_atomic_abort(&a);
		return -1;
	}
	fputs(head, f);
	fputs(text, f);
	if (sk_atomic_commit(&a, &err) != 0) {
		rmsg("%s", err.msg);
		return -1;
	}
	return 0;
}

/* The terminal: SVG, or PNG (cairo when there). */
static const char *
plot_terminal(int svg)
{
	return svg ? "set terminal svg size 900,640 noenhanced "
	    "font 'sans,11'\n" :
	    "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) "
	    "{\n  set terminal pngcairo size 900,640 noenhanced "
	    "font 'sans,10'\n} else {\n  set terminal png size 900,640 "
	    "noenhanced\n}\n";
}

/*
 * gnuplot runs without a shell on a fixed argument list, in a private
 * folder that holds only its script and data; its stdout is the
 * temporary file of the atomic writer, so the image appears at out whole
 * or not at all, and a symlink planted at out is replaced, not followed.
 */
int
report_gnuplot(const char *out, int svg, const char *script,
    const char *data)
{
	const char *tmp = getenv("TMPDIR");
	char dir[4096], path[4096 + 16], *gnuplot;
	struct sk_error err;
	struct sk_atomic a;
	struct stat st;
	pid_t pid;
	int status, made = 0, opened = 0, rc = -1;

	if ((gnuplot = train_find_program("gnuplot")) == NULL) {
		rmsg("gnuplot not found: apt-get install gnuplot-nox");
		return -1;
	}
	if (tmp == NULL || *tmp == '\0')
		tmp = "/tmp";
	if ((size_t)snprintf(dir, sizeof dir, "%s/shardtrain-plot.XXXXXX",
	    tmp) >= sizeof dir) {
		rmsg("TMPDIR is too long");
		goto out;
	}
	if (mkdtemp(dir) == NULL) {
		rmsg("%s: %s", dir, strerror(errno));
		goto out;
	}
	made = 1;
	if (write_plot_file(dir, "plot.dat", "", data) != 0 ||
	    write_plot_file(dir, "plot.gp", plot_terminal(svg), script) != 0)
		goto out;
	if (sk_atomic_open(&a, out, 0, 0644, &err) != 0) {
		rmsg("%s", err.msg);
		goto out;
	}
	opened = 1;

	fflush(NULL);
	if ((pid = fork()) < 0) {
		rmsg("fork: %s", strerror(errno));
		goto out;
	}
	if (pid == 0) {
		int nul = open("/dev/null", O_RDONLY);

		if (nul < 0 || dup2(nul, STDIN_FILENO) < 0 ||
		    dup2(a.fd, STDOUT_FILENO) < 0 || chdir(dir) != 0) {
			fprintf(stderr, "%s: starting gnuplot: %s\n",
			    cli_prog(), strerror(errno));
			_exit(127);
		}
		execl(gnuplot, "gnuplot", "plot.gp", (char *)NULL);
		fprintf(stderr, "%s: %s: %s\n", cli_prog(), gnuplot,
		    strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			rmsg("waitpid: %s", strerror(errno));
			goto out;
		}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		rmsg("%s: gnuplot failed (status %d)", out, status);
		goto out;
	}
	if (fstat(a.fd, &st) != 0 || st.st_size == 0) {
		rmsg("%s: gnuplot drew nothing", out);
		goto out;
	}
	opened = 0;
	if (sk_atomic_commit(&a, &err) != 0) {
		rmsg("%s", err.msg);
		goto out;
	}
	rc = 0;
out:
	if (opened)
		sk_atomic_abort(&a);
	if (made) {
		snprintf(path, sizeof path, "%s/plot.dat", dir);
		unlink(path);
		snprintf(path, sizeof path, "%s/plot.gp", dir);
		unlink(path);
		rmdir(dir);
	}
	free(gnuplot);
	return rc;
}

static int
plot_runs(const char *out, int svg, const struct run_row *rows, int n)
{
	char *data = plot_data(rows, n), *script = plot_script(n);
	int rc = -1;

	if (data == NULL || script == NULL)
		rmsg("out of memory");
	else
		rc = report_gnuplot(out, svg, script, data);
	free(data);
	free(script);
	return rc;
}

static int
has_suffix(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a > b && strcasecmp(s + a - b, suffix) == 0;
}

static const char *report_plot;

static void
report_set(void *ctx, const struct cli_option *o, const struct cli_value *v)
{
	(void)ctx;
	(void)o;
	report_plot = v->s;
}

static const struct cli_option report_opts[] = {
	{ "plot", 0, 1, CLI_STRING, "FILE",
	    "also draw images/s and the data-wait share of each\n"
	    "run with gnuplot, as PNG or SVG by FILE's extension", 0, 0, NULL,
	    0 },
	{ NULL, 0, 0, 0, NULL, NULL, 0, 0, NULL, 0 }
};

static const struct cli_group report_groups[] = {
	{ "report", report_opts }, { NULL, NULL }
};

const struct cli_command report_command = {
	"report", "report [--plot FILE.png|FILE.svg] RUN.json...",
	"compare the runs of several --json files",
	"Compare runs from the files shardtrain --json wrote: one line per run\n"
	"with its model, strategy, ranks, data source, images/s, epoch time,\n"
	"data-wait share, cost per epoch and verdict.\n",
	report_groups, 1, -1, report_main
};

/* "shardtrain report [--plot FILE] RUN.json...": argv[0] is "report". */
int
report_main(int argc, char **argv)
{
	struct run_row *rows = NULL;
	const char *plot;
	char msg[1024], **runs;
	int i, n, first, bad = 0, svg = 0, rc = 1;

	report_plot = NULL;
	first = cli_parse(&report_command, argc, argv, report_set, NULL);
	plot = report_plot;
	runs = argv + first;
	n = argc - first;

	if (plot != NULL) {
		if (has_suffix(plot, ".svg"))
			svg = 1;
		else if (!has_suffix(plot, ".png")) {
			usage_error("--plot %s: the name must end in .png or "
			    ".svg", plot);
		}
	}
	if ((rows = calloc((size_t)n, sizeof *rows)) == NULL) {
		rmsg("out of memory");
		return 1;
	}
	/* Every bad run is named, not only the first; a table over the
	 * others would hide that one is missing. */
	for (i = 0; i < n; i++)
		if (report_load_run(runs[i], &rows[i], msg,
		    sizeof msg) != 0) {
			rmsg("%s", msg);
			bad++;
		}
	if (bad > 0)
		goto out;
	print_table(rows, n);
	if (plot != NULL && plot_runs(plot, svg, rows, n) != 0)
		goto out;
	rc = 0;
out:
	free(rows);
	return rc;
}
