/*
 * run.c - one training run: data from the loader (or synthetic), the model
 * through the strategy and the optimizer, every step timed by stage, then
 * the two ceilings (compute alone on synthetic data, the loader alone) that
 * frame the verdict.
 *
 * Every rank runs this same code. Anything that decides control flow (the
 * loss, the step count, a failure) is agreed across ranks first, so ranks
 * never wait on a collective another rank has left.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_file.h"
#include "comm.h"
#include "cpu/cpu.h"
#include "cli.h"
#include "cuda/cuda.h"
#include "train.h"

/* An epoch of synthetic data: CIFAR-10's training set. */
#define SYNTHETIC_EPOCH 50000

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
sleep_until(double t)
{
	double d = t - now();
	struct timespec ts;

	if (d <= 0)
		return;
	ts.tv_sec = (time_t)d;
	ts.tv_nsec = (long)((d - (double)ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ------------------------------------------------------------------------ */
/* data: the loader, or synthetic batches                                   */

struct data {
	const struct train_config *cfg;
	int rank, world, local;		/* local batch */
	int synthetic;
	sk_loader *l;
	struct sk_fetch_stats fetch0;	/* the fetch engine's counters at open */
	struct sk_batch b;
	int holding;
	int classes;
	/* synthetic */
	float *x;			/* pinned for a GPU backend, when it can */
	int x_pinned;
	int32_t *y;
	long next;			/* global step of the next batch */
	long per_epoch;			/* batches per epoch */
	/* throttle */
	int unthrottled;
	double t0;
	uint64_t delivered;
};

struct data_batch {
	const float *x;			/* host memory, or the GPU's */
	const int32_t *y;		/* host memory */
	int n, epoch;
	long index;
	const char *const *keys;
	void *ready;			/* x on the GPU: a cudaEvent_t the
					 * loader's copy fires, else NULL */
	int resident;			/* x and y are already in the model's
					 * device buffers (model_input_f32,
					 * m->labels): nothing to copy */
};

static uint64_t
mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/*
 * Synthetic sample g of the run: pixels uniform in [-2, 2) and a label,
 * from (seed, g) only, so a rank's share of a global batch does not depend
 * on the world size (DDP on N ranks sees what one rank sees).
 */
static void
synth_sample(uint64_t seed, uint64_t g, int classes, float *x, size_t n,
    int32_t *y)
{
	uint64_t s = mix64(seed * 0x9e3779b97f4a7c15ULL + g + 1);
	size_t i;

	*y = (int32_t)(mix64(s) % (uint64_t)classes);
	for (i = 0; i < n; i++) {
		s = s * 6364136223846793005ULL + 1442695040888963407ULL;
		x[i] = (float)((s >> 40) * (4.0 / 16777216.0) - 2.0);
	}
}

static int
data_open(struct data *d, const struct train_config *cfg, int rank, int world,
    int epoch, long batch, long epochs, int synthetic, char *err,
    size_t errlen)
{
	static int noted;
	struct sk_loader_config lc = cfg->loader;
	struct sk_loader_stats st;
	int rc;

	memset(d, 0, sizeof(*d));
	d->cfg = cfg;
	d->rank = rank;
	d->world = world;
	d->local = cfg->batch / world;
	d->classes = cfg->model.num_classes;
	d->synthetic = synthetic;
	/* a throttled source delivers at its rate from the moment it is
	 * opened, so its start-up time is inside the budget */
	d->t0 = now();
	if (synthetic) {
		size_t n = (size_t)d->local * 3 * cfg->model.image_size *
		    cfg->model.image_size;

		d->per_epoch = (SYNTHETIC_EPOCH + cfg->batch - 1) / cfg->batch;
		d->next = (long)epoch * d->per_epoch + batch;
		/* a GPU copies from pinned memory at the bus's speed, and
		 * from pageable memory through a staging buffer */
		if (strcmp(cfg->backend, "cuda") == 0 &&
		    (d->x = cuda_host_alloc(n * sizeof(float))) != NULL)
			d->x_pinned = 1;
		else
			d->x = malloc(n * sizeof(float));
		d->y = malloc((size_t)d->local * sizeof(int32_t));
		if (d->x == NULL || d->y == NULL) {
			snprintf(err, errlen, "out of memory for a synthetic "
			    "batch of %d", d->local);
			return -1;
		}
		return 0;
	}
	lc.batch = d->local;
	lc.rank = rank;
	lc.world = world;
	lc.epoch = epoch;
	lc.epochs = (int)(epochs > 0 ? epochs : 1);
	lc.resume_batch = (int)batch;
	lc.seed = cfg->seed;
	lc.image_size = cfg->model.image_size;
	lc.dtype = SK_DTYPE_F32;
	lc.layout = SK_LAYOUT_NCHW;
	/* training on a GPU: the loader's device mode copies each batch as
	 * u8 on its own stream, a quarter of fp32's bytes, and normalises it
	 * there (the same bits as on the host) */
	lc.device = strcmp(cfg->backend, "cuda") == 0 ? cuda_device() : -1;
	sk_fetch_stats(&d->fetch0);
	rc = sk_loader_open(&d->l, &lc);
	if (rc < 0 && lc.device >= 0) {
		fprintf(stderr, "shardtrain: warning: rank %d: the loader's "
		    "device mode failed (%s); copying batches from the host "
		    "instead\n", rank, d->l ? sk_errmsg(d->l) :
		    sk_strerror(rc));
		sk_loader_close(d->l);
		d->l = NULL;
		lc.device = -1;
		rc = sk_loader_open(&d->l, &lc);
	}
	if (rc < 0) {
		snprintf(err, errlen, "%s: %s", cfg->data,
		    d->l ? sk_errmsg(d->l) : sk_strerror(rc));
		sk_loader_close(d->l);
		d->l = NULL;
		return -1;
	}
	/* a folder read as its shards beside a manifest: say which, once
	 * (the ceilings and each resume open the loader again) */
	if (rank == 0 && !noted && sk_loader_note(d->l) != NULL) {
		fprintf(stderr, "shardtrain: %s\n", sk_loader_note(d->l));
		noted = 1;
	}
	sk_loader_stats(d->l, &st);
	d->per_epoch = st.batches_per_epoch;
	return 0;
}

/* Batches per epoch of a loader config, without streaming anything. */
static long
data_batches_per_epoch(const struct train_config *cfg, int rank, int world,
    int synthetic, char *err, size_t errlen)
{
	struct data d;
	long n;

	if (synthetic)
		return (SYNTHETIC_EPOCH + cfg->batch - 1) / cfg->batch;
	if (data_open(&d, cfg, rank, world, 0, 0, 1, 0, err, errlen) != 0)
		return -1;
	n = d.per_epoch;
	sk_loader_close(d.l);
	return n;
}

static void
data_close(struct data *d)
{
	if (d->l) {
		if (d->holding)
			sk_loader_release(d->l, &d->b);
		sk_loader_close(d->l);
	}
	if (d->x_pinned)
		cuda_host_free(d->x);
	else
		free(d->x);
	free(d->y);
	memset(d, 0, sizeof(*d));
}

static void
throttle(struct data *d, int n)
{
	double rate = d->cfg->throttle / d->world;

	if (rate <= 0 || d->unthrottled)
		return;
	d->delivered += (uint64_t)n;
	sleep_until(d->t0 + (double)d->delivered / rate);
}

/* 0 with a batch, 1 at the end of the data, -1 on error. */
static int
data_next(struct data *d, struct data_batch *out, char *err, size_t errlen)
{
	int i, rc;

	if (d->synthetic) {
		size_t per = (size_t)3 * d->cfg->model.image_size *
		    d->cfg->model.image_size;
		uint64_t g0 = (uint64_t)d->next * d->cfg->batch +
		    (uint64_t)d->rank * d->local;

		for (i = 0; i < d->local; i++)
			synth_sample(d->cfg->seed, g0 + i, d->classes,
			    d->x + per * i, per, &d->y[i]);
		out->x = d->x;
		out->y = d->y;
		out->n = d->local;
		out->epoch = (int)(d->next / d->per_epoch);
		out->index = d->next % d->per_epoch;
		out->keys = NULL;
		out->ready = NULL;
		out->resident = 0;
		d->next++;
		throttle(d, out->n);
		return 0;
	}
	rc = sk_loader_next(d->l, &d->b);
	if (rc == 0)
		return 1;	/* the epochs are done */
	if (rc < 0) {
		snprintf(err, errlen, "%s", sk_errmsg(d->l));
		return -1;
	}
	d->holding = 1;
	for (i = 0; i < d->b.n; i++)
		if (d->b.labels[i] < 0 || d->b.labels[i] >= d->classes) {
			snprintf(err, errlen, "sample '%s' has label %d, outside "
			    "[0, %d): set --classes to the data set's class "
			    "count", d->b.keys[i], d->b.labels[i], d->classes);
			return -1;
		}
	out->x = d->b.images;
	out->ready = NULL;
	out->resident = 0;
	if (d->b.device_images != NULL) {
		out->x = d->b.device_images;
		out->ready = d->b.ready_event;
	}
	out->y = d->b.labels;
	out->n = d->b.n;
	out->epoch = d->b.epoch;
	out->index = (long)d->b.index;
	out->keys = d->b.keys;
	throttle(d, out->n);
	return 0;
}

/* What the loader skipped, and which of its stages was the busiest. */
static void
loader_summary(struct data *d, struct run_result *res)
{
	struct sk_loader_stats st;
	double dec, io;
	int i;

	if (sk_loader_stats(d->l, &st) < 0)
		return;

	res->skipped = st.skipped_total;
	res->samples = st.samples;
	{
		struct sk_fetch_stats now;

		sk_fetch_stats(&now);
		sk_fetch_stats_sub(&res->remote, &now, &d->fetch0);
	}
	for (i = 0; i < SK_SKIP_NREASONS; i++)
		res->skipped_by[i] = st.skipped[i];
	dec = st.workers > 0 && st.wall > 0 ? st.decode_busy /
	    (st.workers * st.wall) : 0;
	io = st.io_streams > 0 && st.wall > 0 ? st.io_busy /
	    (st.io_streams * st.wall) : 0;
	snprintf(res->bound_stage, sizeof(res->bound_stage), "%s",
	    dec >= io ? "decode" : "io");
}

static void
data_release(struct data *d)
{
	if (d->l && d->holding) {
		sk_loader_release(d->l, &d->b);
		d->holding = 0;
	}
}

/* ------------------------------------------------------------------------ */
/* the run                                                                  */

struct run {
	const struct train_config *cfg;
	struct comm *c;
	int rank, world, local;
	struct model m;
	struct strategy *s;
	struct optim *o;
	struct optim_config oc;		/* with the run's total steps */
	const struct backend *be;
	int device;			/* the backend's memory is not the host's */
	int synthetic;
	FILE *losses;
	struct ckpt_settings set;	/* rank 0: what checkpoints record */
	char err[8400];
};

static void
say(const struct run *r, const char *fmt, ...)
{
	va_list ap;

	if (r->rank != 0 || r->cfg->quiet)
		return;
	va_start(ap, fmt);
	fprintf(stderr, "shardtrain: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/*
 * Agree on failure: every rank passes whether it failed; all learn whether
 * any did. The first failing rank's message is what rank 0 prints (each
 * failing rank prints its own, labelled, when world > 1).
 */
static int
any_failed(struct run *r, int failed)
{
	double v = failed ? 1 : 0;

	comm_sum_double(r->c, &v, 1);
	if (failed) {
		if (r->world > 1)
			fprintf(stderr, "shardtrain: rank %d: %s\n", r->rank,
			    r->err);
		else
			fprintf(stderr, "shardtrain: %s\n", r->err);
	}
	return v > 0;
}

/* Each config field that must agree across ranks, compared one by one so
 * the message names the field. */
static int
check_config(struct run *r)
{
	const struct train_config *cfg = r->cfg;
	char v[64][160];
	const char *names[64];
	int n = 0, i, bad;

#define FIELD(name, ...) do {						\
	names[n] = (name);						\
	memset(v[n], 0, sizeof(v[n]));					\
	snprintf(v[n], sizeof(v[n]), __VA_ARGS__);			\
	n++;								\
} while (0)
	FIELD("--model", "%s", cfg->model.name);
	FIELD("--width", "%g", (double)cfg->model.width);
	FIELD("--dim/--depth/--heads/--mlp", "%d %d %d %d", cfg->model.dim,
	    cfg->model.layers, cfg->model.heads, cfg->model.mlp);
	FIELD("--image-size", "%d", cfg->model.image_size);
	FIELD("--classes", "%d", cfg->model.num_classes);
	FIELD("--backend", "%s", cfg->backend);
	FIELD("--precision", "%s", cfg->precision);
	FIELD("--deterministic", "%d", cfg->deterministic);
	FIELD("--strategy", "%d", (int)cfg->strategy);
	FIELD("--global-batch", "%d", cfg->batch);
	FIELD("--data", "%.150s", cfg->data);
	FIELD("--epochs", "%d", cfg->epochs);
	FIELD("--steps", "%ld", cfg->steps);
	FIELD("--optimizer", "%d", (int)cfg->optim.kind);
	FIELD("--lr", "%a", (double)cfg->optim.lr);
	FIELD("--momentum", "%a", (double)cfg->optim.momentum);
	FIELD("--no-nesterov", "%d", cfg->optim.nesterov);
	FIELD("--weight-decay", "%a", (double)cfg->optim.weight_decay);
	FIELD("--warmup", "%ld", cfg->optim.warmup);
	FIELD("--clip", "%a", (double)cfg->optim.clip);
	FIELD("--label-smoothing", "%a", (double)cfg->label_smoothing);
	FIELD("--seed", "%" PRIu64, cfg->seed);
	FIELD("--checkpoint-activations", "%d", cfg->checkpoint_activations);
	FIELD("--shuffle", "%d", cfg->loader.shuffle);
	FIELD("--crop", "%d", (int)cfg->loader.crop);
	FIELD("--scale", "%a %a", cfg->loader.scale[0], cfg->loader.scale[1]);
	FIELD("--ratio", "%a %a", cfg->loader.ratio[0], cfg->loader.ratio[1]);
	FIELD("--resize", "%d", cfg->loader.resize);
	FIELD("--flip", "%d", cfg->loader.flip);
	FIELD("--max-pixels", "%" PRIu64, cfg->loader.max_pixels);
	FIELD("--max-sample-size", "%" PRIu64, cfg->loader.max_sample_bytes);
	FIELD("--throttle", "%a", cfg->throttle);
	FIELD("--checkpoint-dir", "%.150s", cfg->checkpoint_dir);
	FIELD("--ceiling-steps", "%ld", cfg->ceiling_steps);
#undef FIELD
	for (i = 0; i < n; i++) {
		bad = comm_first_mismatch(r->c, v[i], sizeof(v[i]));
		if (bad >= 0) {
			if (r->rank == 0)
				fprintf(stderr, "shardtrain: rank %d was "
				    "started with a different %s than rank 0 "
				    "(rank 0: %s): give every rank the same "
				    "options\n", bad, names[i], v[i]);
			return -1;
		}
	}
	return 0;
}

static size_t
peak_rss_bytes(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0;
	return (size_t)ru.ru_maxrss * 1024;
}

/*
 * The rank's place on its node, which picks its GPU: the launcher's
 * variable (Open MPI, Slurm, MPICH/Hydra), or 0. A value that is not a
 * small number is ignored, not trusted.
 */
static int
local_rank(void)
{
	static const char *const vars[] = {
		"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
		"MPI_LOCALRANKID", "PMI_LOCAL_RANK",
	};
	const char *v;
	char *end;
	long n;
	size_t i;

	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		if ((v = getenv(vars[i])) == NULL || *v == '\0')
			continue;
		errno = 0;
		n = strtol(v, &end, 10);
		if (errno == 0 && *end == '\0' && n >= 0 && n < 4096)
			return (int)n;
	}
	return 0;
}

/*
 * One step on a batch. Returns the mean loss over the global batch (every
 * rank gets the same value), timing into t.
 */
static double
step(struct run *r, const struct data_batch *db, long t, struct step_times *tm)
{
	const struct step_hooks *h = strategy_hooks(r->s);
	double t0, t1, t2, t3, t4, comm, fwd_comm, loss[2];
	const float *x;
	const int32_t *y;
	float l;

	t0 = now();
	/* the CPU backend reads the loader's batch in place: the "copy" is
	 * the input activation's fill in model_forward. A GPU backend copies
	 * the batch and its labels into the model's input now. */
	x = db->x;
	y = db->y;
	if (r->device) {
		struct model *m = &r->m;

		/* a batch the loader copied: wait for its copy (the part the
		 * host did not hide) and read it in place; else copy it */
		if (db->resident)
			x = model_input_f32(m);
		else if (db->ready != NULL)
			cuda_wait_event(db->ready);
		else {
			x = model_input_f32(m);
			r->be->to_device((float *)x, db->x, (size_t)db->n *
			    m->acts[m->input].per_sample * sizeof(float));
		}
		y = m->labels;
		if (!db->resident)
			r->be->to_device(m->labels, db->y, (size_t)db->n *
			    sizeof(int32_t));
	}
	t1 = now();
	strategy_begin_step(r->s);
	/* forward ends in a copy of the losses to the host: its time is the
	 * device's, not the launches' */
	l = model_forward(&r->m, db->n, x, y, r->cfg->label_smoothing, 1, h);
	t2 = now();
	fwd_comm = strategy_comm_so_far(r->s);	/* FSDP's gathers */
	model_backward(&r->m, db->n, r->cfg->label_smoothing, 1.0f, h);
	comm = strategy_end_backward(r->s);
	/* a queued backward would be counted as the optimizer's time */
	r->be->sync();
	t3 = now();
	optim_step(r->o, r->c, t);
	r->be->sync();
	t4 = now();
	/* the global mean loss: weighted by each rank's samples */
	loss[0] = (double)l * db->n;
	loss[1] = db->n;
	comm_sum_double(r->c, loss, 2);
	/* waits inside the hooks are part of the forward and backward wall
	 * time; report them as communication, not compute */
	tm->h2d += t1 - t0;
	tm->fwd += t2 - t1 - fwd_comm;
	tm->bwd += t3 - t2 - (comm - fwd_comm);
	tm->comm += comm;
	tm->optim += t4 - t3;
	return loss[1] > 0 ? loss[0] / loss[1] : 0;
}

/* --profile: where forward and backward spent their time, by layer kind */
static void
print_profile(const struct run *r, long steps)
{
	double total = 0;
	int k;

	if (steps <= 0)
		return;
	for (k = 0; k <= L_TOKEN0; k++)
		total += r->m.prof[0][k] + r->m.prof[1][k];
	fprintf(stderr, "shardtrain: profile, ms per step (rank 0, %ld steps, "
	    "%.1f ms in layers)\n", steps, 1000 * total / steps);
	fprintf(stderr, "  %-10s %9s %9s %6s\n", "layer", "forward",
	    "backward", "share");
	for (k = 0; k <= L_TOKEN0; k++) {
		double f = r->m.prof[0][k], b = r->m.prof[1][k];

		if (f + b == 0)
			continue;
		fprintf(stderr, "  %-10s %9.2f %9.2f %5.1f%%\n",
		    layer_kind_name((enum layer_kind)k), 1000 * f / steps,
		    1000 * b / steps, total > 0 ? 100 * (f + b) / total : 0);
	}
}

static int
save(struct run *r, long steps, int epoch, long batch)
{
	struct ckpt_pos pos = { steps, epoch, batch };

	if (ckpt_save(r->cfg->checkpoint_dir, &pos, &r->set, &r->m, r->s, r->o,
	    r->c, r->err, sizeof(r->err)) != 0)
		return -1;
	say(r, "checkpoint at step %ld in %s", steps, r->cfg->checkpoint_dir);
	return 0;
}

static int
dump_params(struct run *r)
{
	float *flat = malloc(r->m.nflat * sizeof(float));
	struct sk_atomic a;
	struct sk_error e = { 0, "" };
	double bad = flat == NULL;
	int rc = 0;

	/* strategy_get_params gathers: every rank joins it, or none */
	comm_max_double(r->c, &bad, 1);
	if (bad > 0) {
		snprintf(r->err, sizeof(r->err), "out of memory for "
		    "--dump-params");
		free(flat);
		return -1;
	}
	strategy_get_params(r->s, flat);
	if (r->rank == 0) {
		if (sk_atomic_open(&a, r->cfg->dump_params, 0, 0644, &e) != 0)
			rc = -1;
		else if (sk_atomic_write_all(&a, flat, r->m.nflat *
		    sizeof(float), &e) != 0) {
			sk_atomic_abort(&a);
			rc = -1;
		} else if (sk_atomic_commit(&a, &e) != 0)
			rc = -1;
		if (rc != 0)
			snprintf(r->err, sizeof(r->err), "--dump-params %s",
			    e.msg);
	}
	free(flat);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* --batch auto                                                             */

/* The largest local batch tried. */
#define AUTO_BATCH_MAX	4096

/*
 * Can the model train at local batch b on this GPU? Every rank builds the
 * model, strategy and optimizer at b; if all of them could, all run one
 * step on synthetic data; then everything is freed (CUDA's pool keeps the
 * memory for the run). 1 fits on every rank, 0 not, -1 an error that is
 * not a lack of memory (in r->err).
 */
static int
try_batch(struct run *r, int b)
{
	const struct train_config *cfg = r->cfg;
	struct run t = *r;
	struct optim_config oc = cfg->optim;
	struct data_batch db;
	struct step_times tm = { 0 };
	size_t per = (size_t)3 * cfg->model.image_size *
	    cfg->model.image_size;
	float *x = NULL;
	int32_t *y = NULL;
	int i, ok;

	memset(&t.m, 0, sizeof(t.m));
	t.s = NULL;
	t.o = NULL;
	t.local = b;
	if (model_build(&t.m, &cfg->model, r->err, sizeof(r->err)) != 0)
		return -1;
	oc.total = 1;
	ok = model_alloc(&t.m, t.be, b, cfg->checkpoint_activations, t.err,
	    sizeof(t.err)) == 0 &&
	    (t.s = strategy_open(cfg->strategy, &t.m, t.c, cfg->seed, 0,
	    t.err, sizeof(t.err))) != NULL &&
	    (t.o = optim_open(&oc, &t.m, strategy_view(t.s), t.be, t.err,
	    sizeof(t.err))) != NULL &&
	    (x = malloc(per * b * sizeof(float))) != NULL &&
	    (y = malloc((size_t)b * sizeof(int32_t))) != NULL;
	/* a step has collectives: all ranks take it, or none */
	{
		double bad = !ok;

		comm_sum_double(t.c, &bad, 1);
		ok = bad == 0;
	}
	if (ok) {
		for (i = 0; i < b; i++)
			synth_sample(cfg->seed, (uint64_t)i,
			    cfg->model.num_classes, x + per * i, per, &y[i]);
		db.x = x;
		db.y = y;
		db.n = b;
		db.epoch = 0;
		db.index = 0;
		db.keys = NULL;
		db.ready = NULL;
		db.resident = 0;
		step(&t, &db, 0, &tm);
	}
	free(x);
	free(y);
	optim_close(t.o);
	strategy_close(t.s);
	model_free(&t.m);
	return ok;
}

/*
 * Find the largest power-of-two local batch that trains on every rank's
 * GPU, from AUTO_BATCH_MAX down. Out of memory in a step itself (FSDP's
 * gathered blocks, allocated as it goes) still stops the run: such a
 * model is near the edge at that batch anyway.
 */
static int
find_batch(struct run *r)
{
	int b, rc;

	for (b = AUTO_BATCH_MAX; b >= 1; b /= 2) {
		if ((rc = try_batch(r, b)) < 0)
			return -1;
		if (rc == 1) {
			say(r, "--batch auto: %d per rank fits on %s%s (global "
			    "batch %d)", b, cuda_device_name(),
			    b < AUTO_BATCH_MAX ? ", twice that does not" :
			    ", the most tried", b * r->world);
			return b;
		}
	}
	snprintf(r->err, sizeof(r->err), "--batch auto: even a batch of 1 "
	    "does not fit on %s: try --checkpoint-activations, --strategy "
	    "fsdp over more GPUs, or a smaller model", cuda_device_name());
	return -1;
}

/*
 * Compute alone: one synthetic batch, made once and (on a GPU) copied to
 * the device once, outside the timed steps; then `steps` steps on it, the
 * first warm-up steps untimed (allocations, cuDNN's trials, caches). Each
 * step ends in a wait for the device, so the wall time from the end of
 * the warm-up to the end of the last step is the device's time for the
 * steps, with nothing of the data in it.
 */
#define CEILING_WARMUP	2

static double
compute_ceiling(struct run *r, long steps, long t0)
{
	struct data d;
	struct data_batch db;
	struct step_times tm = { 0 };
	double start, wall[1];
	long i, warm = steps > CEILING_WARMUP ? CEILING_WARMUP : steps - 1;

	if (data_open(&d, r->cfg, r->rank, r->world, 0, 0, 1, 1, r->err,
	    sizeof(r->err)) != 0)
		return -1;
	d.unthrottled = 1;
	if (data_next(&d, &db, r->err, sizeof(r->err)) != 0) {
		data_close(&d);
		return -1;
	}
	if (r->device) {
		struct model *m = &r->m;

		r->be->to_device(model_input_f32(m), db.x, (size_t)db.n *
		    m->acts[m->input].per_sample * sizeof(float));
		r->be->to_device(m->labels, db.y, (size_t)db.n *
		    sizeof(int32_t));
		db.resident = 1;
	}
	start = now();
	for (i = 0; i < steps; i++) {
		if (i == warm) {
			r->be->sync();
			start = now();
		}
		step(r, &db, t0 + i, &tm);
	}
	r->be->sync();
	wall[0] = now() - start;
	data_close(&d);
	comm_max_double(r->c, wall, 1);
	steps -= warm;
	return wall[0] > 0 ? (double)steps * r->cfg->batch / wall[0] : -1;
}

/* The loader alone on the same config: batches as fast as they come. */
static double
loader_ceiling(struct run *r, long batches)
{
	struct data d;
	struct data_batch db;
	double start = 0, wall[1];
	uint64_t n = 0;
	long i;
	int rc = 0;

	if (data_open(&d, r->cfg, r->rank, r->world, 0, 0, 1, r->synthetic,
	    r->err, sizeof(r->err)) != 0)
		return -1;
	if (batches > d.per_epoch)
		batches = d.per_epoch;
	for (i = 0; i < batches; i++) {
		rc = data_next(&d, &db, r->err, sizeof(r->err));
		if (rc != 0)
			break;
		if (i == 0)
			start = now();
		else
			n += (uint64_t)db.n;
		data_release(&d);
	}
	wall[0] = now() - start;
	data_close(&d);
	if (rc < 0)
		return -1;
	comm_max_double(r->c, wall, 1);
	{
		double nn = (double)n;

		comm_sum_double(r->c, &nn, 1);
		return wall[0] > 0 && nn > 0 ? nn / wall[0] : -1;
	}
}

static void
epoch_close(struct run *r, struct run_result *res, int epoch, long steps,
    double images, double seconds, double wait, double stepsec,
    double losssum)
{
	struct epoch_result *e;
	double v[2] = { images, 0 };

	comm_sum_double(r->c, v, 1);
	v[1] = seconds;
	comm_max_double(r->c, &v[1], 1);
	e = realloc(res->epochs, (res->nepochs + 1) * sizeof(*e));
	if (e == NULL)
		return;
	res->epochs = e;
	e = &res->epochs[res->nepochs++];
	memset(e, 0, sizeof(*e));
	e->epoch = epoch;
	e->steps = steps;
	e->images = (uint64_t)v[0];
	e->seconds = v[1];
	e->images_per_s = v[1] > 0 ? v[0] / v[1] : 0;
	e->wait_share = stepsec > 0 ? wait / stepsec : 0;
	e->loss = steps > 0 ? losssum / steps : NAN;
	e->cost = r->cfg->price_per_hour > 0 ?
	    r->cfg->price_per_hour * v[1] / 3600 : -1;
}

int
train_run(struct train_config *cfg, struct comm *c, struct run_result *res)
{
	struct run R = { 0 }, *r = &R;
	struct data d = { 0 };
	struct data_batch db;
	struct ckpt_pos pos = { 0, 0, 0 };
	struct step_times tm = { 0 };
	long per_epoch, total, t, ep_steps = 0;
	double t_start, ep_start = 0, ep_images = 0, ep_wait = 0, ep_step = 0;
	double ep_loss = 0, loss = NAN, gemm0, rate_t = 0, rate_img = 0;
	int rc = 1, failed, cur_epoch = -1, threads, loaded = 0;
	size_t pb;
	char batch[64];

	memset(res, 0, sizeof(*res));
	res->loader_ips = res->compute_ips = res->gemm_share = -1;
	res->cost_per_epoch = -1;
	r->cfg = cfg;
	r->c = c;
	r->rank = comm_rank(c);
	r->world = comm_world(c);
	r->synthetic = strcmp(cfg->data, "synthetic") == 0;
	res->world = r->world;

	if (cfg->batch % r->world != 0) {
		if (r->rank == 0)
			fprintf(stderr, "shardtrain: --global-batch %d does not "
			    "divide across %d ranks: use a multiple of %d "
			    "(e.g. %d)\n", cfg->batch, r->world, r->world,
			    (cfg->batch / r->world + 1) * r->world);
		return 2;
	}
	r->local = cfg->batch / r->world;
	if (check_config(r) != 0)
		return 2;
	if (r->world == 1 && cfg->strategy != STRATEGY_SINGLE)
		say(r, "%s on one rank: launch with mpirun -np N for more",
		    strategy_name(cfg->strategy));

	if (strcmp(cfg->backend, "cuda") == 0) {
		enum cuda_precision prec = CUDA_BF16;

		if (strcmp(cfg->precision, "fp32") == 0)
			prec = CUDA_FP32;
		else if (strcmp(cfg->precision, "tf32") == 0)
			prec = CUDA_TF32;
		r->be = backend_cuda(local_rank(), prec, cfg->deterministic,
		    r->err, sizeof(r->err));
		/* every rank has its GPU before any starts NCCL's bootstrap,
		 * a collective */
		if (any_failed(r, r->be == NULL))
			goto out;
		failed = comm_use_device(c, cuda_stream(), r->err,
		    sizeof(r->err)) != 0;
		if (any_failed(r, failed))
			goto out;
		r->device = 1;
		say(r, "training on %s (%s, %s)", cuda_device_name(),
		    prec == CUDA_BF16 ? "bf16 AMP-O2: bf16 weights and "
		    "activations, fp32 master weights" : prec == CUDA_TF32 ?
		    "fp32 data, TF32 tensor-core math" : "fp32, TF32 off",
		    cfg->deterministic ? "deterministic algorithms" :
		    "fastest algorithms");
	} else if (strcmp(cfg->precision, "bf16") == 0)
		r->be = backend_cpu_bf16();
	else
		r->be = backend_cpu();
	if (cfg->batch_auto) {
		int b = find_batch(r);

		if (any_failed(r, b < 0))
			goto out;
		cfg->batch = b * r->world;
		r->local = b;
		if (cfg->lr_per_256 > 0)
			cfg->optim.lr = (float)(cfg->lr_per_256 * cfg->batch /
			    256.0);
	}
	threads = cfg->threads;
	if (threads <= 0)
		threads = cli_cpus_per_rank();
	r->be->set_threads(threads);

	/* the model, its memory, the strategy and the optimizer */
	failed = model_build(&r->m, &cfg->model, r->err, sizeof(r->err)) != 0;
	if (!failed)
		failed = model_alloc(&r->m, r->be, r->local,
		    cfg->checkpoint_activations, r->err, sizeof(r->err)) != 0;
	if (any_failed(r, failed))
		goto out;
	r->m.profile = cfg->profile;
	res->params = model_param_count(&r->m);
	res->gflops_per_image = 2.0 * model_forward_macs(&r->m) / 1e9;
	r->s = strategy_open(cfg->strategy, &r->m, c, cfg->seed, 0, r->err,
	    sizeof(r->err));
	failed = r->s == NULL;
	if (any_failed(r, failed))
		goto out;

	per_epoch = data_batches_per_epoch(cfg, r->rank, r->world,
	    r->synthetic, r->err, sizeof(r->err));
	failed = per_epoch < 0;
	if (!failed && per_epoch == 0) {
		snprintf(r->err, sizeof(r->err), "%s: an epoch holds no full "
		    "batch of %d per rank: use a smaller --batch", cfg->data,
		    r->local);
		failed = 1;
	}
	if (any_failed(r, failed))
		goto out;
	total = cfg->steps > 0 ? cfg->steps : per_epoch * cfg->epochs;
	r->oc = cfg->optim;
	r->oc.total = total;
	r->o = optim_open(&r->oc, &r->m, strategy_view(r->s), r->be, r->err,
	    sizeof(r->err));
	failed = r->o == NULL;
	if (any_failed(r, failed))
		goto out;

	if (cfg->checkpoint_dir[0]) {
		/* rank 0 alone reads and writes checkpoints */
		failed = r->rank == 0 && ckpt_settings_make(cfg, &r->set,
		    r->err, sizeof(r->err)) != 0;
		if (any_failed(r, failed))
			goto out;
	}
	if (cfg->resume && cfg->checkpoint_dir[0]) {
		int lr = ckpt_load(cfg->checkpoint_dir, &r->set, &pos, &r->m,
		    r->s, r->o, c, r->err, sizeof(r->err));

		failed = lr < 0;
		/* the settings match, so the position must fit this run's
		 * epochs; rank 0's values, so every rank agrees */
		if (lr == 0 && (pos.batch >= per_epoch || pos.step !=
		    (long)pos.epoch * per_epoch + pos.batch)) {
			snprintf(r->err, sizeof(r->err), "the checkpoint in "
			    "--checkpoint-dir %s is at step %ld, epoch %d, batch "
			    "%ld, which does not fit epochs of %ld batches",
			    cfg->checkpoint_dir, pos.step, pos.epoch,
			    pos.batch, per_epoch);
			failed = 1;
		}
		if (any_failed(r, failed))
			goto out;
		loaded = lr == 0;
		if (loaded)
			say(r, "resumed from step %ld (epoch %d, batch %ld)",
			    pos.step, pos.epoch, pos.batch);
	}
	if (cfg->losses[0] && r->rank == 0) {
		r->losses = fopen(cfg->losses, loaded ? "a" : "w");
		if (r->losses == NULL) {
			snprintf(r->err, sizeof(r->err), "%s: %s", cfg->losses,
			    strerror(errno));
			failed = 1;
		}
	}
	if (any_failed(r, failed))
		goto out;
	if (pos.step >= total) {
		say(r, "the checkpoint is at step %ld: nothing left of %ld",
		    pos.step, total);
	}

	if (r->world > 1)
		snprintf(batch, sizeof batch, "batch %d per rank, %d global",
		    cfg->batch / r->world, cfg->batch);
	else
		snprintf(batch, sizeof batch, "batch %d", cfg->batch);
	say(r, "%s (%.*fM params, %.*f GFLOPs/image, %d classes from %s) on "
	    "%s, %s x %d rank%s, %s, %ld steps", cfg->model.name,
	    cli_decimals(res->params / 1e6), res->params / 1e6,
	    cli_decimals(res->gflops_per_image), res->gflops_per_image,
	    cfg->model.num_classes, cfg->classes_from != NULL ?
	    cfg->classes_from : "--classes", cfg->backend,
	    strategy_name(cfg->strategy),
	    r->world, r->world > 1 ? "s" : "", batch, total);

	{
		long epochs = (total + per_epoch - 1) / per_epoch - pos.epoch;

		failed = data_open(&d, cfg, r->rank, r->world, pos.epoch,
		    pos.batch, epochs > 0 ? epochs : 1, r->synthetic, r->err,
		    sizeof(r->err)) != 0;
	}
	if (any_failed(r, failed))
		goto out;

	gemm0 = cpu_gemm_seconds();
	t_start = now();
	for (t = pos.step; t < total; t++) {
		double s0 = now(), s1, s2, wait;
		int got = data_next(&d, &db, r->err, sizeof(r->err));
		double v = got;

		/* all ranks stop together: at the end of the data or on a
		 * bad batch on any rank */
		comm_max_double(c, &v, 1);
		failed = got < 0;
		if (any_failed(r, failed))
			goto out;
		if (v != 0)
			break;
		s1 = now();
		wait = s1 - s0;
		if (db.epoch != cur_epoch) {
			if (cur_epoch >= 0)
				epoch_close(r, res, cur_epoch, ep_steps,
				    ep_images, s0 - ep_start, ep_wait, ep_step,
				    ep_loss);
			cur_epoch = db.epoch;
			ep_start = s0;
			ep_steps = 0;
			ep_images = ep_wait = ep_step = ep_loss = 0;
		}
		loss = step(r, &db, t, &tm);
		data_release(&d);
		s2 = now();
		tm.wait += wait;
		tm.step += s2 - s0;
		ep_wait += wait;
		ep_step += s2 - s0;
		ep_images += db.n;
		ep_steps++;
		ep_loss += loss;
		res->steps++;
		res->images += (uint64_t)db.n;
		if (t == pos.step)
			res->first_loss = loss;
		res->last_loss = loss;
		rate_img += db.n;
		if (r->losses)
			fprintf(r->losses, "%ld %.9g\n", t, loss);
		if (!isfinite(loss)) {
			if (r->rank == 0)
				fprintf(stderr, "shardtrain: the loss is %s at "
				    "step %ld (epoch %d, batch %ld): lower "
				    "--lr (now %g), add --warmup or --clip 1, "
				    "or check the data\n", isnan(loss) ? "NaN" :
				    "infinite", t, db.epoch, db.index,
				    (double)optim_lr(&r->oc, t));
			goto out;
		}
		if (cfg->log_every > 0 && (t + 1) % cfg->log_every == 0) {
			double el = s2 - (rate_t > 0 ? rate_t : t_start);

			say(r, "step %ld/%ld  epoch %d  loss %.4f  lr %.3g  "
			    "%.1f img/s  data wait %.0f%%", t + 1, total,
			    db.epoch, loss, (double)optim_lr(&r->oc, t),
			    el > 0 ? rate_img * r->world / el : 0,
			    tm.step > 0 ? 100 * tm.wait / tm.step : 0);
			rate_t = s2;
			rate_img = 0;
		}
		if (cfg->checkpoint_dir[0] && cfg->checkpoint_every > 0 &&
		    (t + 1) % cfg->checkpoint_every == 0 && t + 1 < total) {
			failed = save(r, t + 1, (int)((t + 1) / per_epoch),
			    (t + 1) % per_epoch) != 0;
			if (any_failed(r, failed))
				goto out;
		}
	}
	if (cur_epoch >= 0)
		epoch_close(r, res, cur_epoch, ep_steps, ep_images,
		    now() - ep_start, ep_wait, ep_step, ep_loss);
	res->seconds = now() - t_start;
	{
		double v[2] = { (double)res->images, res->seconds };

		comm_sum_double(c, v, 1);
		comm_max_double(c, &v[1], 1);
		res->images = (uint64_t)v[0];
		res->seconds = v[1];
	}
	res->images_per_s = res->seconds > 0 ? res->images / res->seconds : 0;
	res->wait_share = tm.step > 0 ? tm.wait / tm.step : 0;
	res->t = tm;
	if (tm.step > 0)
		res->gemm_share = (cpu_gemm_seconds() - gemm0) / tm.step;
	if (cfg->profile && r->rank == 0)
		print_profile(r, res->steps);
	if (!r->synthetic) {
		double v[SK_SKIP_NREASONS + 2 + 8 + SK_RETRY_NCAUSES];
		struct sk_fetch_stats *f = &res->remote;
		int i, k = SK_SKIP_NREASONS + 2;

		loader_summary(&d, res);
		/* Counts below 2^53 are exact in a double. */
		v[0] = (double)res->skipped;
		v[1] = (double)res->samples;
		for (i = 0; i < SK_SKIP_NREASONS; i++)
			v[2 + i] = (double)res->skipped_by[i];
		/* The fetch engine's counters, all ranks added up. */
		v[k + 0] = (double)f->bytes;
		v[k + 1] = (double)f->requests;
		v[k + 2] = (double)f->retries;
		v[k + 3] = (double)f->resumes;
		v[k + 4] = (double)f->refetched_bytes;
		v[k + 5] = (double)f->failures;
		v[k + 6] = f->ttfb_seconds;
		v[k + 7] = (double)f->ttfb_count;
		for (i = 0; i < SK_RETRY_NCAUSES; i++)
			v[k + 8 + i] = (double)f->retries_by_cause[i];
		comm_sum_double(c, v, k + 8 + SK_RETRY_NCAUSES);
		res->skipped = (uint64_t)v[0];
		res->samples = (uint64_t)v[1];
		for (i = 0; i < SK_SKIP_NREASONS; i++)
			res->skipped_by[i] = (uint64_t)v[2 + i];
		f->bytes = (uint64_t)v[k + 0];
		f->requests = (uint64_t)v[k + 1];
		f->retries = (uint64_t)v[k + 2];
		f->resumes = (uint64_t)v[k + 3];
		f->refetched_bytes = (uint64_t)v[k + 4];
		f->failures = (uint64_t)v[k + 5];
		f->ttfb_seconds = v[k + 6];
		f->ttfb_count = (uint64_t)v[k + 7];
		for (i = 0; i < SK_RETRY_NCAUSES; i++)
			f->retries_by_cause[i] = (uint64_t)v[k + 8 + i];
	}
	data_close(&d);

	if (cfg->checkpoint_dir[0] && t > pos.step) {
		failed = save(r, t, (int)(t / per_epoch), t % per_epoch) != 0;
		if (any_failed(r, failed))
			goto out;
	}
	if (cfg->dump_params[0]) {
		failed = dump_params(r) != 0;
		if (any_failed(r, failed))
			goto out;
	}

	/* the ceilings: after everything is saved, since these steps move
	 * the parameters */
	if (r->synthetic && cfg->throttle <= 0) {
		/* the run itself is the compute ceiling */
		double busy = res->seconds * (1 - res->wait_share);

		res->compute_ips = busy > 0 ? res->images / busy : -1;
	} else if (cfg->ceiling_steps > 0) {
		say(r, "ceilings: %ld steps on synthetic data, then the loader "
		    "alone", cfg->ceiling_steps);
		res->compute_ips = compute_ceiling(r, cfg->ceiling_steps +
		    CEILING_WARMUP, total);
		res->loader_ips = loader_ceiling(r, cfg->ceiling_steps + 1);
		if (res->loader_ips < 0 && r->err[0])
			say(r, "the loader-only ceiling failed: %s", r->err);
	}
	if (cfg->price_per_hour > 0 && per_epoch > 0 && res->images_per_s > 0)
		res->cost_per_epoch = cfg->price_per_hour / 3600 *
		    (double)per_epoch * cfg->batch / res->images_per_s;
	pb = strategy_peak_param_bytes(r->s) + (size_t)optim_nstate(r->o) *
	    strategy_view(r->s)->nlocal * sizeof(float);
	{
		double v[3] = { (double)pb, (double)peak_rss_bytes(),
		    (double)(r->device ? cuda_peak_bytes() : 0) };

		comm_max_double(c, v, 3);
		res->peak_param_bytes = (uint64_t)v[0];
		res->peak_rss_bytes = (uint64_t)v[1];
		res->peak_gpu_bytes = (uint64_t)v[2];
		snprintf(res->gpu, sizeof(res->gpu), "%s",
		    r->device ? cuda_device_name() : "");
	}
	if (r->device) {
		/* each rank's own: FSDP's shards and a rank 0 that does more
		 * can make them differ */
		double *g = calloc((size_t)r->world, sizeof(double));

		res->peak_gpu_by_rank = calloc((size_t)r->world,
		    sizeof(uint64_t));
		if (g != NULL) {
			g[r->rank] = (double)cuda_peak_bytes();
			comm_sum_double(c, g, r->world);
		}
		if (g != NULL && res->peak_gpu_by_rank != NULL) {
			int i;

			for (i = 0; i < r->world; i++)
				res->peak_gpu_by_rank[i] = (uint64_t)g[i];
		} else {
			free(res->peak_gpu_by_rank);
			res->peak_gpu_by_rank = NULL;
		}
		free(g);
	}
	verdict_decide(res, cfg);
	rc = 0;
out:
	if (r->losses)
		fclose(r->losses);
	data_close(&d);
	optim_close(r->o);
	strategy_close(r->s);
	model_free(&r->m);
	return rc;
}

void
run_result_free(struct run_result *res)
{
	free(res->epochs);
	res->epochs = NULL;
	res->nepochs = 0;
	free(res->peak_gpu_by_rank);
	res->peak_gpu_by_rank = NULL;
}
