/*
 * test_ref.c - the CPU backend against PyTorch. gen_ref.py dumps a tiny
 * timm ViT's and torchvision ResNet's state, logits, loss, gradients and
 * five optimizer steps; these tests build the same models with the C API,
 * load the same state by name and compare everything, tensor by tensor.
 * SK_REF_SEED=N draws another state (default 1).
 */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "ref.h"
#include "backend.h"
#include "comm.h"
#include "model.h"
#include "optim.h"
#include "strategy.h"

/* Debian's python3-torch installs for the system python only. */
#ifndef PYTHON
#define PYTHON "/usr/bin/python3"
#endif

/*
 * Tolerance, per element: |c - ref| <= ATOL * max|ref| + RTOL * |ref|,
 * max|ref| taken over the tensor. The reference runs in float64, so this
 * bounds the C side's fp32 rounding alone: the C backend stays within
 * about a third of it over 30 seeds.
 */
#define ATOL 1e-4
#define RTOL 1e-4
/* The mean loss, relative; the gradient norm takes ATOL, relative. */
#define STOL 2e-5
/*
 * After a kink flip (below) the gradients only have to be of the right
 * size: the float64 ones belong to the other branch.
 */
#define LOOSE 1.0

/* ------------------------------------------------------------------------ */
/* the generator                                                            */

/* The directory the binary started in: the harness moves every test into
 * its own temporary directory before it runs. */
static char start_dir[PATH_MAX];

__attribute__((constructor)) static void
remember_start_dir(void)
{
	if (getcwd(start_dir, sizeof(start_dir)) == NULL)
		start_dir[0] = '\0';
}

/* gen_ref.py: $top_srcdir (make check) or next to this source file. */
static const char *
script_path(void)
{
	static char path[PATH_MAX + 64];
	const char *top = getenv("top_srcdir"), *slash;
	const char *file = __FILE__;

	if (top != NULL && *top != '\0') {
		snprintf(path, sizeof(path), "%s/tests/train/gen_ref.py", top);
		if (access(path, R_OK) == 0)
			return path;
	}
	slash = strrchr(file, '/');
	snprintf(path, sizeof(path), "%s%s%.*sgen_ref.py",
	    file[0] == '/' ? "" : start_dir, file[0] == '/' ? "" : "/",
	    slash ? (int)(slash - file + 1) : 0, file);
	if (access(path, R_OK) != 0)
		t_fail(__FILE__, __LINE__, "cannot find gen_ref.py (tried %s; "
		    "set top_srcdir)", path);
	return path;
}

static struct ref *
generate(const char *model)
{
	const char *out = t_path("ref.bin");
	struct ref *r;
	const char *seed;
	char err[512], cmd[2 * PATH_MAX + 128];

	/* Importing torch takes most of a second: try the generator first
	 * and ask why only when it fails. */
	if ((seed = getenv("SK_REF_SEED")) == NULL || *seed == '\0')
		seed = "1";
	snprintf(cmd, sizeof(cmd), PYTHON " '%s' --model %s --out '%s' "
	    "--seed %d", script_path(), model, out, atoi(seed));
	if (system(cmd) != 0) {
		if (system(PYTHON " -c 'import torch' >/dev/null 2>&1") != 0)
			t_skip("python3-torch not installed");
		t_fail(__FILE__, __LINE__, "%s failed", cmd);
	}
	if ((r = ref_load(out, err, sizeof(err))) == NULL)
		t_fail(__FILE__, __LINE__, "%s", err);
	return r;
}

static const struct ref_tensor *
need(const struct ref *r, const char *fmt, const char *name)
{
	const struct ref_tensor *t;
	char full[160];

	snprintf(full, sizeof(full), fmt, name);
	if ((t = ref_find(r, full)) == NULL)
		t_fail(__FILE__, __LINE__, "the reference has no \"%s\"", full);
	return t;
}

static double
need_num(const struct ref *r, const char *key)
{
	const char *v = ref_config(r, key);

	if (v == NULL)
		t_fail(__FILE__, __LINE__, "the reference config has no %s",
		    key);
	return atof(v);
}

/* ------------------------------------------------------------------------ */
/* comparing                                                                */

struct tally {
	int tensors, failed;
	double worst;			/* max over tensors of err / allowed */
	char worst_name[160];
	int quiet;			/* diagnose failures only */
	int loose;			/* allow LOOSE * max|ref| */
};

/*
 * Compare n floats c to t, allowing extra_abs more on elements
 * [extra_lo, extra_hi). Prints the tensor's errors; a failure is counted
 * and printed, and the caller fails the test when it has seen them all.
 */
static void
compare(struct tally *ty, const char *name, const float *c,
    const struct ref_tensor *t, size_t extra_lo, size_t extra_hi,
    double extra_abs)
{
	double scale = 0, maxerr = 0, ratio = 0;
	size_t i, at = 0, bad = 0;

	for (i = 0; i < t->n; i++)
		scale = fmax(scale, fabs(t->data[i]));
	for (i = 0; i < t->n; i++) {
		double e = fabs((double)c[i] - t->data[i]);
		double allowed = (ty->loose ? LOOSE : ATOL) * scale +
		    RTOL * fabs(t->data[i]) + 1e-7 +
		    (i >= extra_lo && i < extra_hi ? extra_abs : 0);

		if (!(e <= allowed))	/* NaN fails */
			bad++;
		if (!(e <= maxerr))
			maxerr = e;
		if (!(e / allowed <= ratio)) {
			ratio = e / allowed;
			at = i;
		}
	}
	ty->tensors++;
	if (!(ratio <= ty->worst)) {
		ty->worst = ratio;
		snprintf(ty->worst_name, sizeof(ty->worst_name), "%s", name);
	}
	if (bad > 0) {
		ty->failed++;
		t_diag("FAIL %s: %zu of %zu elements off; max|ref| %.3g, max "
		    "abs err %.3g (rel %.3g); worst [%zu] %.8g vs ref %.8g",
		    name, bad, t->n, scale, maxerr, maxerr / fmax(scale, 1e-30),
		    at, (double)c[at], (double)t->data[at]);
	} else if (!ty->quiet)
		t_diag("%-44s n %-6zu max|ref| %-9.3g abs err %-9.3g rel "
		    "%-9.3g (%.2f of tol)", name, t->n, scale, maxerr,
		    maxerr / fmax(scale, 1e-30), ratio);
}

static void
compare_scalar(struct tally *ty, const char *name, double c, double ref,
    double tol)
{
	double e = fabs(c - ref);
	double allowed = (ty->loose ? LOOSE : tol) * fabs(ref) + 1e-7;

	ty->tensors++;
	if (!(e <= allowed)) {
		ty->failed++;
		t_diag("FAIL %s: %.9g vs ref %.9g (err %.3g, allowed %.3g)",
		    name, c, ref, e, allowed);
	} else if (!ty->quiet)
		t_diag("%-44s %.9g vs ref %.9g (err %.3g)", name, c, ref, e);
	if (!(e / allowed <= ty->worst)) {
		ty->worst = e / allowed;
		snprintf(ty->worst_name, sizeof(ty->worst_name), "%s", name);
	}
}

static void
tally_done(struct tally *ty, const char *what)
{
	t_diag("%s: %d tensors, worst %.3f of tolerance (%s)", what,
	    ty->tensors, ty->worst, ty->worst_name);
	if (ty->failed > 0)
		t_fail(__FILE__, __LINE__, "%s: %d of %d tensors differ from "
		    "PyTorch (see FAIL lines)", what, ty->failed, ty->tensors);
}

/* ------------------------------------------------------------------------ */
/* the model under test                                                     */

struct rig {
	struct ref *ref;
	const struct backend *be;
	struct model m;
	struct comm *comm;
	struct strategy *s;
	int B, K, S;
	float *x;			/* device (B,3,S,S) */
	int32_t *labels;		/* device (B) */
	float *flat, *host;		/* host, nflat floats each */
	float *bufs;			/* host, nbuf floats */
};

static void
rig_config(struct rig *r, struct model_config *cfg)
{
	const char *kind = ref_config(r->ref, "model");

	memset(cfg, 0, sizeof(*cfg));
	if (kind == NULL)
		t_fail(__FILE__, __LINE__, "the reference names no model");
	snprintf(cfg->name, sizeof(cfg->name), "ref-%s", kind);
	cfg->image_size = (int)need_num(r->ref, "image_size");
	cfg->num_classes = (int)need_num(r->ref, "classes");
	if (strcmp(kind, "vit") == 0) {
		cfg->family = MODEL_VIT;
		cfg->patch = (int)need_num(r->ref, "patch");
		cfg->dim = (int)need_num(r->ref, "dim");
		cfg->layers = (int)need_num(r->ref, "layers");
		cfg->heads = (int)need_num(r->ref, "heads");
		cfg->mlp = (int)need_num(r->ref, "mlp");
	} else {
		cfg->family = MODEL_RESNET;
		cfg->depth = (int)need_num(r->ref, "depth");
		cfg->width = (float)need_num(r->ref, "width");
	}
}

/* Every parameter and buffer on both sides, with the same shapes. */
static void
check_names(struct rig *r)
{
	const struct model *m = &r->m;
	size_t i, missing = 0;
	int j, k;

	for (j = 0; j < m->nparams; j++) {
		const struct param *p = &m->params[j];
		const struct ref_tensor *t;
		char full[96];
		int same;

		snprintf(full, sizeof(full), "param:%s", p->name);
		if ((t = ref_find(r->ref, full)) == NULL) {
			t_diag("the model's parameter %s is not in PyTorch's "
			    "state_dict", p->name);
			missing++;
			continue;
		}
		same = t->ndim == p->ndim && t->n == p->numel;
		for (k = 0; same && k < p->ndim; k++)
			same = t->dims[k] == p->shape[k];
		if (!same) {
			t_diag("%s: shape (%d,%d,%d,%d)/%d in the model, "
			    "(%d,%d,%d,%d)/%d in PyTorch", p->name,
			    p->shape[0], p->shape[1], p->shape[2], p->shape[3],
			    p->ndim, t->dims[0], t->dims[1], t->dims[2],
			    t->dims[3], t->ndim);
			missing++;
		}
	}
	for (j = 0; j < m->nbuffers; j++) {
		const struct buffer *bf = &m->buffers[j];
		const struct ref_tensor *t;
		char full[96];

		snprintf(full, sizeof(full), "param:%s", bf->name);
		if ((t = ref_find(r->ref, full)) == NULL) {
			t_diag("the model's buffer %s is not in PyTorch's "
			    "state_dict", bf->name);
			missing++;
		} else if (t->n != bf->numel) {
			t_diag("buffer %s: %zu floats in the model, %zu in "
			    "PyTorch", bf->name, bf->numel, t->n);
			missing++;
		}
	}
	for (i = 0; i < r->ref->nt; i++) {
		const char *name = r->ref->t[i].name;

		if (strncmp(name, "param:", 6) != 0)
			continue;
		if (model_find_param(m, name + 6) < 0 &&
		    model_find_buffer(m, name + 6) < 0) {
			t_diag("PyTorch's %s is not in the model", name + 6);
			missing++;
		}
	}
	if (missing > 0)
		t_fail(__FILE__, __LINE__, "%zu parameters or buffers differ "
		    "between the model and PyTorch", missing);
	t_diag("%d parameters (%zu floats) and %d buffers match by name and "
	    "shape", m->nparams, m->nflat, m->nbuffers);
}

/* Parameters and buffers from the records "PREFIX:NAME". */
static void
rig_set_state(struct rig *r, const char *prefix)
{
	struct model *m = &r->m;
	char fmt[32];
	int j;

	snprintf(fmt, sizeof(fmt), "%s:%%s", prefix);
	for (j = 0; j < m->nparams; j++) {
		const struct param *p = &m->params[j];
		const struct ref_tensor *t = need(r->ref, fmt, p->name);

		memcpy(r->flat + m->blocks[p->block].off + p->off, t->data,
		    p->numel * sizeof(float));
	}
	strategy_set_params(r->s, r->flat);
	for (j = 0; j < m->nbuffers; j++) {
		const struct buffer *bf = &m->buffers[j];
		const struct ref_tensor *t = need(r->ref, fmt, bf->name);

		memcpy(r->bufs + bf->off, t->data, bf->numel * sizeof(float));
	}
	r->be->to_device(m->bufs, r->bufs, m->nbuf * sizeof(float));
}

static void
rig_open(struct rig *r, const char *model)
{
	struct model_config cfg;
	const struct ref_tensor *x, *lab;
	int32_t *labels;
	char err[512];
	int i;

	memset(r, 0, sizeof(*r));
	r->ref = generate(model);
	r->be = backend_cpu();
	r->be->set_threads(1);
	rig_config(r, &cfg);
	r->B = (int)need_num(r->ref, "batch");
	r->K = cfg.num_classes;
	r->S = cfg.image_size;
	if (model_build(&r->m, &cfg, err, sizeof(err)) != 0)
		t_fail(__FILE__, __LINE__, "model_build %s: %s", cfg.name, err);
	if (model_alloc(&r->m, r->be, r->B, 0, err, sizeof(err)) != 0)
		t_fail(__FILE__, __LINE__, "model_alloc: %s", err);
	if ((r->comm = comm_open(NULL, NULL, err, sizeof(err))) == NULL)
		t_fail(__FILE__, __LINE__, "comm_open: %s", err);
	r->s = strategy_open(STRATEGY_SINGLE, &r->m, r->comm, 1, 0, err,
	    sizeof(err));
	if (r->s == NULL)
		t_fail(__FILE__, __LINE__, "strategy_open: %s", err);
	check_names(r);

	r->flat = calloc(r->m.nflat, sizeof(float));
	r->host = calloc(r->m.nflat, sizeof(float));
	r->bufs = calloc(r->m.nbuf + 1, sizeof(float));
	labels = calloc((size_t)r->B, sizeof(int32_t));
	CHECK(r->flat != NULL && r->host != NULL && r->bufs != NULL &&
	    labels != NULL);
	rig_set_state(r, "param");

	x = need(r->ref, "%s", "x");
	lab = need(r->ref, "%s", "labels");
	CHECK_EQ_INT(x->n, (size_t)r->B * 3 * r->S * r->S);
	CHECK_EQ_INT(lab->n, r->B);
	r->x = r->be->alloc(x->n * sizeof(float));
	r->labels = r->be->alloc((size_t)r->B * sizeof(int32_t));
	CHECK(r->x != NULL && r->labels != NULL);
	r->be->to_device(r->x, x->data, x->n * sizeof(float));
	for (i = 0; i < r->B; i++)
		labels[i] = (int32_t)lab->data[i];
	r->be->to_device(r->labels, labels, (size_t)r->B * sizeof(int32_t));
	free(labels);
}

static void
rig_close(struct rig *r)
{
	r->be->free(r->x);
	r->be->free(r->labels);
	strategy_close(r->s);
	model_free(&r->m);
	comm_close(r->comm);
	free(r->flat);
	free(r->host);
	free(r->bufs);
	ref_free(r->ref);
}

/* One training forward (loss smoothing from the reference). */
static float
rig_forward(struct rig *r)
{
	return model_forward(&r->m, r->B, r->x, r->labels,
	    (float)need_num(r->ref, "smoothing"), 1, strategy_hooks(r->s));
}

static void
rig_backward(struct rig *r)
{
	model_backward(&r->m, r->B, (float)need_num(r->ref, "smoothing"),
	    1.0f, strategy_hooks(r->s));
	strategy_end_backward(r->s);
}

/*
 * A ReLU input within rounding of 0, or a max-pool window whose top two
 * are within rounding of each other, is a branch point: fp32 may take the
 * other side than float64, and then the float64 gradient is not the
 * reference for this pass (flipping one ReLU input in ResNet-50 moves some
 * gradients by tens of percent). gen_ref.py lists the elements near such
 * points ("kinksN"); count those where the forward just run took the other
 * branch. Every other element is checked by the activations' comparison.
 */
static int
count_flips(struct rig *r, int step)
{
	const struct model *m = &r->m;
	const struct ref_tensor *k;
	int *calls[2], ncalls[2] = { 0, 0 }, flips = 0, i;
	char name[16];
	size_t row;

	if (m->cfg.family != MODEL_RESNET)
		return 0;
	snprintf(name, sizeof(name), "kinks%d", step);
	k = need(r->ref, "%s", name);
	if (k->n > 0 && (k->ndim != 2 || k->dims[1] != 4))
		t_fail(__FILE__, __LINE__, "%s is not (n,4)", name);
	calls[0] = calloc((size_t)m->nlayers, sizeof(int));
	calls[1] = calloc((size_t)m->nlayers, sizeof(int));
	CHECK(calls[0] != NULL && calls[1] != NULL);
	for (i = 0; i < m->nlayers; i++) {
		if (m->layers[i].kind == L_RELU)
			calls[0][ncalls[0]++] = i;
		else if (m->layers[i].kind == L_MAXPOOL)
			calls[1][ncalls[1]++] = i;
	}
	for (row = 0; row < k->n / 4; row++) {
		const float *e = k->data + 4 * row;
		int kind = (int)e[0], call = (int)e[1];
		size_t idx = (size_t)e[2];
		const struct layer *L;
		const struct act *a;

		if (kind < 0 || kind > 1 || call < 0 || call >= ncalls[kind])
			t_fail(__FILE__, __LINE__, "%s row %zu: %s call %d, "
			    "the model has %d", name, row, kind ? "max-pool" :
			    "ReLU", call, ncalls[kind & 1]);
		L = &m->layers[calls[kind][call]];
		a = &m->acts[kind == 0 ? L->in : L->save];
		if (idx >= (size_t)r->B * a->per_sample + a->fixed)
			t_fail(__FILE__, __LINE__, "%s row %zu: index %zu out "
			    "of range", name, row, idx);
		if (kind == 0) {
			float z;

			r->be->to_host(&z, a->data + idx, sizeof(z));
			if ((z > 0) != (e[3] > 0)) {
				t_diag("step %d: ReLU %d input [%zu] is %.3g, "
				    "float64 %.3g", step, call, idx, (double)z,
				    (double)e[3]);
				flips++;
			}
		} else {
			int32_t at;

			r->be->to_host(&at, (const int32_t *)(const void *)
			    a->data + idx, sizeof(at));
			if (at != (int32_t)e[3]) {
				t_diag("step %d: max pool %d output [%zu] "
				    "takes input %d, float64 %d", step, call,
				    idx, (int)at, (int)e[3]);
				flips++;
			}
		}
	}
	if (flips > 0)
		t_diag("step %d: %d of %zu kinks took the other branch than "
		    "float64 PyTorch: gradients and updates are checked only "
		    "for size (%.0f x max|ref|), the forward as always", step,
		    flips, k->n / 4, LOOSE);
	free(calls[0]);
	free(calls[1]);
	return flips;
}

/* The buffers now against "PREFIX:NAME". */
static void
compare_buffers(struct rig *r, struct tally *ty, const char *prefix)
{
	struct model *m = &r->m;
	char fmt[32], label[160];
	int j;

	snprintf(fmt, sizeof(fmt), "%s:%%s", prefix);
	r->be->to_host(r->bufs, m->bufs, m->nbuf * sizeof(float));
	for (j = 0; j < m->nbuffers; j++) {
		const struct buffer *bf = &m->buffers[j];

		snprintf(label, sizeof(label), "%s:%s", prefix, bf->name);
		compare(ty, label, r->bufs + bf->off,
		    need(r->ref, fmt, bf->name), 0, 0, 0);
	}
}

/* ------------------------------------------------------------------------ */
/* one forward and backward                                                 */

static void
check_pass(const char *model)
{
	struct rig r;
	struct model *m = &r.m;
	struct tally ty = { 0 }, tb = { 0 };
	const struct ref_tensor *t;
	char label[96];
	float loss, *host;
	size_t n;
	int b, j;

	rig_open(&r, model);
	strategy_begin_step(r.s);
	loss = rig_forward(&r);

	/* Each block's output where PyTorch has the same module: this names
	 * the first block that goes wrong. */
	for (b = 0; b < m->nblocks; b++) {
		const struct act *a = &m->acts[m->blocks[b].out];
		char full[96];

		snprintf(full, sizeof(full), "act:%s", m->blocks[b].name);
		if ((t = ref_find(r.ref, full)) == NULL)
			continue;
		n = (size_t)r.B * a->per_sample + a->fixed;
		if (n != t->n)
			t_fail(__FILE__, __LINE__, "block %s hands on %zu "
			    "floats, PyTorch's module %zu", m->blocks[b].name,
			    n, t->n);
		CHECK((host = malloc(n * sizeof(float))) != NULL);
		r.be->to_host(host, a->data, n * sizeof(float));
		compare(&ty, full, host, t, 0, 0, 0);
		free(host);
	}
	t = need(r.ref, "%s", "logits");
	CHECK_EQ_INT(t->n, (size_t)r.B * r.K);
	CHECK((host = malloc(t->n * sizeof(float))) != NULL);
	r.be->to_host(host, m->acts[m->logits].data, t->n * sizeof(float));
	compare(&ty, "logits", host, t, 0, 0, 0);
	free(host);
	compare_scalar(&ty, "loss", loss, need(r.ref, "%s", "loss")->data[0],
	    STOL);
	/* a training forward moves the running statistics */
	compare_buffers(&r, &ty, "buf1");
	snprintf(label, sizeof(label), "%s forward", model);
	tally_done(&ty, label);

	tb.loose = count_flips(&r, 0) > 0;
	rig_backward(&r);
	for (j = 0; j < m->nparams; j++) {
		const struct param *p = &m->params[j];

		snprintf(label, sizeof(label), "grad:%s", p->name);
		r.be->to_host(r.host, m->bgrads[p->block] + p->off,
		    p->numel * sizeof(float));
		compare(&tb, label, r.host, need(r.ref, "grad:%s", p->name),
		    0, 0, 0);
	}
	snprintf(label, sizeof(label), "%s backward", model);
	tally_done(&tb, label);
	rig_close(&r);
}

TEST(ref_vit)
{
	check_pass("vit");
}

TEST(ref_resnet18)
{
	check_pass("resnet");
}

TEST(ref_resnet_bottleneck)
{
	check_pass("resnet-bottleneck");
}

/* ------------------------------------------------------------------------ */
/* five optimizer steps                                                     */

/* PyTorch's names of the optimizer's state vectors, in optim_state order. */
static const char *const sgd_state[] = { "momentum_buffer" };
static const char *const adamw_state[] = { "exp_avg", "exp_avg_sq" };

static void
optim_config_of(const struct ref *ref, struct optim_config *oc)
{
	const char *kind = ref_config(ref, "optim");

	memset(oc, 0, sizeof(*oc));
	if (kind != NULL && strcmp(kind, "sgd") == 0) {
		oc->kind = OPTIM_SGD;
		oc->momentum = (float)need_num(ref, "momentum");
		oc->nesterov = (int)need_num(ref, "nesterov");
	} else if (kind != NULL && strcmp(kind, "adamw") == 0) {
		oc->kind = OPTIM_ADAMW;
		oc->beta1 = (float)need_num(ref, "beta1");
		oc->beta2 = (float)need_num(ref, "beta2");
		oc->eps = (float)need_num(ref, "eps");
	} else
		t_fail(__FILE__, __LINE__, "unknown optimizer %s",
		    kind ? kind : "(none)");
	oc->lr = (float)need_num(ref, "lr");
	oc->weight_decay = (float)need_num(ref, "weight_decay");
	oc->clip = (float)need_num(ref, "clip");
	oc->warmup = (long)need_num(ref, "warmup");
	oc->total = (long)need_num(ref, "steps");
	oc->min_lr = 0;
}

/* Optimizer state vector i from the records "PREFIX.KEY:NAME". */
static void
set_optim_state(struct rig *r, struct optim *o, int i, const char *prefix,
    const char *key)
{
	const struct model *m = &r->m;
	char fmt[48];
	int j;

	snprintf(fmt, sizeof(fmt), "%s.%s:%%s", prefix, key);
	for (j = 0; j < m->nparams; j++) {
		const struct param *p = &m->params[j];

		memcpy(r->flat + m->blocks[p->block].off + p->off,
		    need(r->ref, fmt, p->name)->data, p->numel * sizeof(float));
	}
	strategy_scatter_local(r->s, r->flat, optim_state(o, i));
}

/*
 * The slack of a ViT's key bias (the middle third of attn.qkv.bias): the
 * softmax is invariant to it, so its gradient is zero and what either side
 * computes is rounding noise, which AdamW's g / sqrt(v) turns into a step
 * of up to lr. Returns the element range through lo, hi.
 */
static void
key_bias_range(const struct rig *r, const struct param *p, size_t *lo,
    size_t *hi)
{
	size_t len = strlen(p->name);

	*lo = *hi = 0;
	if (r->m.cfg.family == MODEL_VIT && len > 13 &&
	    strcmp(p->name + len - 13, "attn.qkv.bias") == 0) {
		*lo = p->numel / 3;
		*hi = 2 * p->numel / 3;
	}
}

/*
 * forced: start every step from PyTorch's state after the previous one
 * (parameters, buffers, optimizer state and step count), so each step is
 * checked alone. Without it the C side runs five steps on its own state;
 * that suits the ViT, but SGD at lr 0.1 on batch-norm statistics of four
 * images is chaotic, and fp32 rounding grows to percent-level differences
 * within five steps.
 */
static void
check_steps(const char *model, int forced)
{
	struct rig r;
	struct model *m = &r.m;
	struct optim_config oc;
	struct optim *o;
	const struct ref_tensor *rloss, *rlr, *rnorm;
	const char *const *state_names;
	char err[512], pre[16], label[160];
	double slack = 0;
	long steps;
	int t, i, j, nstate;

	rig_open(&r, model);
	optim_config_of(r.ref, &oc);
	steps = oc.total;
	o = optim_open(&oc, m, strategy_view(r.s), r.be, err, sizeof(err));
	if (o == NULL)
		t_fail(__FILE__, __LINE__, "optim_open: %s", err);
	nstate = optim_nstate(o);
	CHECK_EQ_INT(nstate, oc.kind == OPTIM_SGD ? 1 : 2);
	state_names = oc.kind == OPTIM_SGD ? sgd_state : adamw_state;
	rloss = need(r.ref, "%s", "train:loss");
	rlr = need(r.ref, "%s", "train:lr");
	rnorm = need(r.ref, "%s", "train:gnorm");
	CHECK_EQ_INT(rloss->n, steps);

	for (t = 0; t < steps; t++) {
		struct tally tf = { 0 }, ty = { 0 };
		float loss;
		double norm;

		tf.quiet = ty.quiet = 1;
		if (forced && t > 0) {
			snprintf(pre, sizeof(pre), "step%d", t);
			rig_set_state(&r, pre);
			for (i = 0; i < nstate; i++)
				set_optim_state(&r, o, i, pre, state_names[i]);
			optim_set_steps(o, t);
			slack = 0;
		}
		snprintf(label, sizeof(label), "step %d lr", t);
		compare_scalar(&tf, label, optim_lr(&oc, t), rlr->data[t],
		    1e-6);
		strategy_begin_step(r.s);
		loss = rig_forward(&r);
		if (forced || t == 0)
			ty.loose = count_flips(&r, t) > 0;
		rig_backward(&r);
		norm = optim_step(o, r.comm, t);
		slack += rlr->data[t];
		snprintf(label, sizeof(label), "step %d loss", t);
		compare_scalar(&tf, label, loss, rloss->data[t], STOL);
		snprintf(label, sizeof(label), "step %d grad norm", t);
		compare_scalar(&ty, label, norm, rnorm->data[t], ATOL);

		/* the state after the step */
		snprintf(pre, sizeof(pre), "step%d", t + 1);
		strategy_get_params(r.s, r.host);
		for (j = 0; j < m->nparams; j++) {
			const struct param *p = &m->params[j];
			char fmt[48];
			size_t lo, hi;

			key_bias_range(&r, p, &lo, &hi);
			snprintf(fmt, sizeof(fmt), "%s:%%s", pre);
			snprintf(label, sizeof(label), "%s:%s", pre, p->name);
			compare(&ty, label, r.host + m->blocks[p->block].off +
			    p->off, need(r.ref, fmt, p->name), lo, hi,
			    slack * 1.01);
		}
		compare_buffers(&r, &tf, pre);
		for (i = 0; i < nstate; i++) {
			strategy_gather_local(r.s, optim_state(o, i), r.host);
			for (j = 0; j < m->nparams; j++) {
				const struct param *p = &m->params[j];
				char fmt[48];

				snprintf(fmt, sizeof(fmt), "%s.%s:%%s", pre,
				    state_names[i]);
				snprintf(label, sizeof(label), "%s.%s:%s", pre,
				    state_names[i], p->name);
				compare(&ty, label, r.host +
				    m->blocks[p->block].off + p->off,
				    need(r.ref, fmt, p->name), 0, 0, 0);
			}
		}
		snprintf(label, sizeof(label), "%s step %d%s: forward", model,
		    t, forced ? " from PyTorch's state" : "");
		tally_done(&tf, label);
		snprintf(label, sizeof(label), "%s step %d%s: update", model,
		    t, forced ? " from PyTorch's state" : "");
		tally_done(&ty, label);
	}
	optim_close(o);
	rig_close(&r);
}

TEST(ref_vit_steps)
{
	check_steps("vit", 0);
}

TEST(ref_resnet18_steps)
{
	check_steps("resnet", 1);
}

TEST(ref_resnet_bottleneck_steps)
{
	check_steps("resnet-bottleneck", 1);
}
