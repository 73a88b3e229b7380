/*
 * test_model.c - the model zoo's sizes against the published counts, the
 * names and errors of the model table, activation checkpointing giving
 * the same gradients as keeping every activation, and the activation
 * gradients' shared memory plan giving the same gradients as memory of
 * their own.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "comm.h"
#include "model.h"
#include "strategy.h"

static void
build(struct model *m, const char *name, int size, int classes)
{
	struct model_config cfg;
	char err[512];

	if (model_config_from_name(&cfg, name, size, classes, err,
	    sizeof(err)) != 0)
		t_fail(__FILE__, __LINE__, "%s: %s", name, err);
	if (model_build(m, &cfg, err, sizeof(err)) != 0)
		t_fail(__FILE__, __LINE__, "%s: %s", name, err);
}

/* Published sizes at 224x224 and 1000 classes: torchvision's model table
 * (ResNets: params, GFLOPS counted as multiply-adds) and timm/torchvision
 * for the ViTs (ViT-L/16 304.33M, 61.55 GMACs; ViT-H/14 632.05M, 167.29). */
TEST(model_published_counts)
{
	static const struct {
		const char *name;
		uint64_t params;
		double gmacs;
	} want[] = {
		{ "resnet18", 11689512, 1.814 },
		{ "resnet34", 21797672, 3.664 },
		{ "resnet50", 25557032, 4.089 },
		{ "resnet101", 44549160, 7.801 },
		{ "resnet152", 60192808, 11.514 },
		{ "vit-b16", 86567656, 17.564 },
		{ "vit-l16", 304326632, 61.555 },
		{ "vit-h14", 632045800, 167.295 },
		{ "vit-g14", 1012611432, 267.031 },
	};
	size_t i;

	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		struct model m;
		double g;

		build(&m, want[i].name, 224, 1000);
		g = model_forward_macs(&m) / 1e9;
		t_diag("%-9s %11llu params  %8.3f GMACs", want[i].name,
		    (unsigned long long)model_param_count(&m), g);
		CHECK_EQ_INT(model_param_count(&m), want[i].params);
		CHECK(fabs(g - want[i].gmacs) < 0.0015);
		model_free(&m);
	}
}

TEST(model_names_and_shapes)
{
	struct model_config cfg;
	struct model m;
	char err[512];
	int p;

	CHECK(model_config_from_name(&cfg, "resnet51", 224, 10, err,
	    sizeof(err)) == -1);
	CHECK_CONTAINS(err, "unknown model 'resnet51'");
	CHECK_CONTAINS(err, "vit-l16");
	CHECK(model_config_from_name(&cfg, "vit-x16", 224, 10, err,
	    sizeof(err)) == -1);
	CHECK(model_config_from_name(&cfg, "vit-l", 224, 10, err,
	    sizeof(err)) == -1);
	/* g and G are different models */
	CHECK(model_config_from_name(&cfg, "vit-G14", 224, 10, err,
	    sizeof(err)) == 0);
	CHECK_EQ_INT(cfg.dim, 1664);
	CHECK_EQ_INT(cfg.mlp, 8192);
	CHECK(model_config_from_name(&cfg, "vit-g14", 224, 10, err,
	    sizeof(err)) == 0);
	CHECK_EQ_INT(cfg.dim, 1408);
	CHECK_EQ_INT(cfg.layers, 40);

	/* the patch must divide the image */
	CHECK(model_config_from_name(&cfg, "vit-ti16", 100, 10, err,
	    sizeof(err)) == 0);
	CHECK(model_build(&m, &cfg, err, sizeof(err)) == -1);
	CHECK_CONTAINS(err, "not a multiple");
	/* padding keeps every ResNet feature map at least 1x1, as in
	 * torchvision: even an 8x8 input builds */
	CHECK(model_config_from_name(&cfg, "resnet50", 8, 10, err,
	    sizeof(err)) == 0);
	CHECK(model_build(&m, &cfg, err, sizeof(err)) == 0);
	model_free(&m);

	/* PyTorch names and shapes */
	build(&m, "resnet50", 64, 10);
	p = model_find_param(&m, "layer2.0.downsample.0.weight");
	CHECK(p >= 0);
	CHECK_EQ_INT(m.params[p].shape[0], 512);
	CHECK_EQ_INT(m.params[p].shape[1], 256);
	p = model_find_param(&m, "layer2.0.conv2.weight");	/* v1.5 stride */
	CHECK(p >= 0);
	CHECK_EQ_INT(m.params[p].shape[2], 3);
	CHECK(model_find_buffer(&m, "layer4.2.bn3.running_var") >= 0);
	CHECK(!m.params[model_find_param(&m, "bn1.weight")].decay);
	CHECK(m.params[model_find_param(&m, "fc.weight")].decay);
	CHECK(!m.params[model_find_param(&m, "fc.bias")].decay);
	model_free(&m);
	build(&m, "vit-ti4", 32, 10);
	p = model_find_param(&m, "pos_embed");
	CHECK(p >= 0);
	CHECK_EQ_INT(m.params[p].shape[1], 65);
	CHECK(!m.params[p].decay);
	CHECK(!m.params[model_find_param(&m, "cls_token")].decay);
	CHECK(m.params[model_find_param(&m, "blocks.11.attn.qkv.weight")].decay);
	CHECK_EQ_INT(m.nblocks, 14);
	model_free(&m);
}

/* Blocks tile the flat vector in order; parameters tile their block. */
TEST(model_layout)
{
	struct model m;
	size_t off = 0;
	int b, i;

	build(&m, "resnet18", 32, 10);
	for (b = 0; b < m.nblocks; b++) {
		size_t in = 0;

		CHECK_EQ_INT(m.blocks[b].off, off);
		for (i = 0; i < m.blocks[b].nparams; i++) {
			const struct param *p = &m.params[m.blocks[b].first_param + i];

			CHECK_EQ_INT(p->block, b);
			CHECK_EQ_INT(p->off, in);
			in += p->numel;
		}
		CHECK_EQ_INT(in, m.blocks[b].numel);
		off += m.blocks[b].numel;
	}
	CHECK_EQ_INT(off, m.nflat);
	model_free(&m);
}

/*
 * ResNet's bn -> [add] -> relu runs as one layer: each ReLU is a fused
 * marker right after the norm that applies it (the k-th L_RELU is still
 * PyTorch's k-th ReLU call), and no add layer is left.
 */
TEST(model_resnet_fused_bn_relu)
{
	static const char *const names[] = { "resnet18", "resnet50" };
	static const int relus[] = { 17, 49 }, res[] = { 8, 16 };

	for (int k = 0; k < 2; k++) {
		struct model m;
		int nrelu = 0, nres = 0, i;

		build(&m, names[k], 64, 10);
		for (i = 0; i < m.nlayers; i++) {
			const struct layer *L = &m.layers[i], *P = L - 1;

			CHECK(L->kind != L_ADD);
			if (L->kind == L_BN && L->in2 >= 0) {
				CHECK(L->relu);
				nres++;
			}
			if (L->kind != L_RELU)
				continue;
			nrelu++;
			CHECK(i > 0 && L->fused && L->in == L->out);
			CHECK(P->kind == L_BN && P->relu && P->out == L->in);
		}
		t_diag("%s: %d fused ReLUs, %d with the residual", names[k],
		    nrelu, nres);
		CHECK_EQ_INT(nrelu, relus[k]);
		CHECK_EQ_INT(nres, res[k]);
		model_free(&m);
	}
}

/* A small variant of a named model. */
static struct model_config
small(const char *name, int size)
{
	struct model_config cfg;
	char err[512];

	if (model_config_from_name(&cfg, name, size, 10, err, sizeof(err)))
		t_fail(__FILE__, __LINE__, "%s", err);
	if (cfg.family == MODEL_VIT) {
		cfg.dim = 32, cfg.layers = 3, cfg.heads = 2, cfg.mlp = 64;
	} else {
		cfg.width = 0.125f;
	}
	return cfg;
}

/*
 * Forward + backward once; the gradients (malloc'd) and the loss. With
 * no_plan every activation gradient has memory of its own. The planned
 * arena starts as NaN, so a gradient read before it is zeroed shows.
 */
static float *
grads_plan(const struct model_config *cfg, int checkpoint, int no_plan,
    float *loss, size_t *n, size_t *act_bytes)
{
	struct model m;
	struct strategy *s;
	struct comm *c;
	char err[512];
	const int B = 3, size = cfg->image_size;
	float *x, *g;
	int32_t y[3] = { 1, 7, 3 };
	size_t i, nx;

	if (model_build(&m, cfg, err, sizeof(err)) != 0)
		t_fail(__FILE__, __LINE__, "%s", err);
	m.no_grad_plan = no_plan;
	if (model_alloc(&m, backend_cpu(), B, checkpoint, err,
	    sizeof(err)) != 0)
		t_fail(__FILE__, __LINE__, "%s", err);
	for (i = 0; i < m.gplan_floats; i++)
		m.gplan[i] = NAN;
	c = comm_open(NULL, NULL, err, sizeof(err));
	CHECK(c != NULL);
	s = strategy_open(STRATEGY_SINGLE, &m, c, 7, 0, err, sizeof(err));
	if (s == NULL)
		t_fail(__FILE__, __LINE__, "%s", err);
	nx = (size_t)B * 3 * size * size;
	x = malloc(nx * sizeof(float));
	g = malloc(m.nflat * sizeof(float));
	CHECK(x != NULL && g != NULL);
	for (i = 0; i < nx; i++)
		x[i] = (float)sin(0.37 * i);
	strategy_begin_step(s);
	*loss = model_forward(&m, B, x, y, 0.1f, 1, strategy_hooks(s));
	model_backward(&m, B, 0.1f, 1.0f, strategy_hooks(s));
	strategy_end_backward(s);
	for (i = 0; i < (size_t)m.nblocks; i++)
		memcpy(g + m.blocks[i].off, m.bgrads[i],
		    m.blocks[i].numel * sizeof(float));
	*n = m.nflat;
	*act_bytes = m.act_bytes;
	free(x);
	strategy_close(s);
	comm_close(c);
	model_free(&m);
	return g;
}

static float *
grads(const struct model_config *cfg, int checkpoint, float *loss, size_t *n,
    size_t *act_bytes)
{
	return grads_plan(cfg, checkpoint, 0, loss, n, act_bytes);
}

static void
check_checkpointing(const char *name, int size)
{
	struct model_config cfg = small(name, size);
	size_t na, nb, ma, mb, i;
	float la, lb, *a, *b;
	double gmax = 0;

	a = grads(&cfg, 0, &la, &na, &ma);
	b = grads(&cfg, 1, &lb, &nb, &mb);
	CHECK_EQ_INT(na, nb);
	for (i = 0; i < na; i++)
		gmax = fmax(gmax, fabs(a[i]));
	t_diag("%s: loss %.6f, max |grad| %.3g, activations %.2f MiB kept, "
	    "%.2f MiB with checkpointing", name, la, gmax, ma / 1048576.0,
	    mb / 1048576.0);
	CHECK(isfinite(la));
	CHECK(gmax > 0);
	CHECK(la == lb);
	CHECK_MEM_EQ(a, b, na * sizeof(float));
	CHECK(mb < ma);
	free(a);
	free(b);
}

TEST(model_checkpointing_same_grads_vit)
{
	check_checkpointing("vit-ti4", 16);
}

TEST(model_checkpointing_same_grads_resnet)
{
	check_checkpointing("resnet50", 32);
}

/* ------------------------------------------------------------------------ */
/* the activation gradients' memory plan                                    */

/*
 * Where layer_backward really touches each activation gradient, derived
 * again here from the layer kinds: *lo and *hi (per activation, -1 when
 * untouched) are the first and last layers that read or write it, and the
 * loss writes the logits' at nlayers.
 */
static void
grad_touches(const struct model *m, int *lo, int *hi)
{
	int i, k;

	for (i = 0; i < m->nacts; i++)
		lo[i] = hi[i] = -1;
	for (i = m->nlayers - 1; i >= 0; i--) {
		const struct layer *L = &m->layers[i];
		int t[3] = { -1, -1, -1 };

		if (L->kind == L_RELU && L->fused)
			continue;		/* no work */
		t[0] = L->out;			/* dout */
		if (L->need_dinp)
			t[1] = L->in;		/* din += */
		if (L->kind == L_ADD || L->kind == L_BN)
			t[2] = L->in2;		/* db, dres += */
		for (k = 0; k < 3; k++) {
			int a = t[k];

			if (a < 0 || !m->acts[a].has_grad)
				continue;
			if (hi[a] < 0)
				hi[a] = i;
			lo[a] = i;
		}
	}
	hi[m->logits] = m->nlayers;
	if (lo[m->logits] < 0)
		lo[m->logits] = m->nlayers;
}

/*
 * After model_alloc with the plan: each planned lifetime covers the
 * layers that touch the gradient, the planned ones are all in m->gplan,
 * and any two whose memory overlaps are never live at once. Returns the
 * sum of the planned gradients' bytes.
 */
static size_t
check_plan(const struct model *m, int checkpoint)
{
	int *lo = calloc((size_t)m->nacts, sizeof(int));
	int *hi = calloc((size_t)m->nacts, sizeof(int));
	const char *arena = (const char *)m->gplan;
	size_t sum = 0, shared = 0, arena_bytes = m->gplan_floats * sizeof(float);
	int i, j, planned = 0;

	CHECK(lo != NULL && hi != NULL);
	grad_touches(m, lo, hi);
	for (i = 0; i < m->nacts; i++) {
		const struct act *a = &m->acts[i];
		const char *g = (const char *)a->grad;

		if (!a->has_grad || (checkpoint && a->internal))
			continue;
		planned++;
		sum += model_act_bytes(m, a, m->max_batch);
		CHECK(g >= arena && g + model_act_bytes(m, a, m->max_batch) <=
		    arena + arena_bytes);
		CHECK_EQ_INT(((uintptr_t)g - (uintptr_t)arena) % 64, 0);
		if (hi[i] >= 0 && !(a->gend <= lo[i] && hi[i] <= a->gbegin))
			t_fail(__FILE__, __LINE__, "activation %d: touched by "
			    "layers %d..%d, planned live %d..%d", i, lo[i],
			    hi[i], a->gend, a->gbegin);
		/* the producer reads it last */
		CHECK(a->gend < m->nlayers && m->layers[a->gend].out == i);
	}
	CHECK_EQ_INT(planned, m->ngzero);
	for (i = 0; i < m->nacts; i++) {
		const struct act *a = &m->acts[i];
		const char *ga = (const char *)a->grad;

		if (!a->has_grad || (checkpoint && a->internal))
			continue;
		for (j = i + 1; j < m->nacts; j++) {
			const struct act *b = &m->acts[j];
			const char *gb = (const char *)b->grad;

			if (!b->has_grad || (checkpoint && b->internal))
				continue;
			if (ga + model_act_bytes(m, a, m->max_batch) <= gb ||
			    gb + model_act_bytes(m, b, m->max_batch) <= ga)
				continue;
			shared++;
			if (!(a->gend > b->gbegin || b->gend > a->gbegin))
				t_fail(__FILE__, __LINE__, "gradients of "
				    "activations %d (live %d..%d) and %d (live "
				    "%d..%d) overlap in memory", i, a->gend,
				    a->gbegin, j, b->gend, b->gbegin);
		}
	}
	t_diag("  %d planned gradients, %zu pairs share memory", planned,
	    shared);
	CHECK(planned > 0 && shared > 0);
	free(lo);
	free(hi);
	return sum;
}

/*
 * The plan for a full-size model at a small image, with and without
 * checkpointing: at most the fraction most (most_ckpt) of the gradients'
 * sum. Checkpointing plans only the gradients of what blocks hand on, which
 * are fewer and more often live at once.
 */
static void
check_plan_size(const char *name, int size, double most, double most_ckpt)
{
	for (int checkpoint = 0; checkpoint < 2; checkpoint++) {
		struct model m;
		char err[512];
		size_t sum, arena;

		build(&m, name, size, 10);
		if (model_alloc(&m, backend_cpu(), 4, checkpoint, err,
		    sizeof(err)) != 0)
			t_fail(__FILE__, __LINE__, "%s", err);
		t_diag("%s at %dx%d, batch 4%s:", name, size, size,
		    checkpoint ? ", checkpointing" : "");
		sum = check_plan(&m, checkpoint);
		arena = m.gplan_floats * sizeof(float);
		t_diag("  gradients %.2f MiB in all, %.2f MiB planned (%.1f%%)",
		    sum / 1048576.0, arena / 1048576.0, 100.0 * arena / sum);
		CHECK(arena < (checkpoint ? most_ckpt : most) * sum);
		model_free(&m);
	}
}

TEST(model_grad_plan_small_resnet50)
{
	check_plan_size("resnet50", 64, 0.15, 0.4);
}

TEST(model_grad_plan_small_vit_b16)
{
	check_plan_size("vit-b16", 64, 0.15, 0.4);
}

/* The plan gives bit-identical gradients to memory of their own (and to
 * checkpointing, whose block internals keep their own arena). */
static void
check_plan_same_grads(const char *name, int size)
{
	struct model_config cfg = small(name, size);
	size_t na, nb, nc, ma, mb, mc;
	float la, lb, lc, *a, *b, *c;

	a = grads_plan(&cfg, 0, 1, &la, &na, &ma);
	b = grads_plan(&cfg, 0, 0, &lb, &nb, &mb);
	c = grads_plan(&cfg, 1, 0, &lc, &nc, &mc);
	t_diag("%s: activations %.2f MiB with a gradient each, %.2f MiB "
	    "planned, %.2f MiB planned with checkpointing", name,
	    ma / 1048576.0, mb / 1048576.0, mc / 1048576.0);
	CHECK_EQ_INT(na, nb);
	CHECK_EQ_INT(na, nc);
	CHECK(isfinite(la) && la == lb && la == lc);
	CHECK_MEM_EQ(a, b, na * sizeof(float));
	CHECK_MEM_EQ(a, c, na * sizeof(float));
	CHECK(mb < ma && mc < mb);
	free(a);
	free(b);
	free(c);
}

TEST(model_grad_plan_same_grads_resnet)
{
	check_plan_same_grads("resnet50", 32);
}

TEST(model_grad_plan_same_grads_vit)
{
	check_plan_same_grads("vit-b16", 32);
}

/* The most gradient floats live at one backward step at batch B: no plan
 * can take less. */
static size_t
live_peak(const struct model *m, int B, size_t act_elt)
{
	size_t peak = 0;
	int i, j;

	for (i = m->nlayers; i >= 0; i--) {
		size_t live = 0;

		for (j = 0; j < m->nacts; j++) {
			const struct act *a = &m->acts[j];
			size_t n = (a->per_sample * B + a->fixed) * act_elt;

			if (a->has_grad && a->gend <= i && i <= a->gbegin)
				live += ((n + 63) & ~(size_t)63) / sizeof(float);
		}
		if (live > peak)
			peak = live;
	}
	return peak;
}

/* The sizes the plan saves where it matters, bf16 (2-byte) gradients:
 * nothing is allocated. */
TEST(model_grad_plan_bf16_sizes)
{
	static const struct {
		const char *name;
		int batch;
	} want[] = { { "resnet50", 256 }, { "vit-l16", 64 } };

	for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
		struct model m;
		size_t all, planned, peak;

		build(&m, want[k].name, 224, 1000);
		m.no_grad_plan = 1;
		CHECK(model_plan_grads(&m, want[k].batch, 2, &all) == 0);
		m.no_grad_plan = 0;
		CHECK(model_plan_grads(&m, want[k].batch, 2, &planned) == 0);
		peak = live_peak(&m, want[k].batch, 2);
		t_diag("%s at 224x224, batch %d, bf16: activation gradients "
		    "%.3f GiB each alone, %.3f GiB planned, %.3f GiB live at "
		    "the peak step", want[k].name, want[k].batch,
		    all * 4.0 / 1073741824.0, planned * 4.0 / 1073741824.0,
		    peak * 4.0 / 1073741824.0);
		CHECK(planned >= peak && planned < all / 4);
		model_free(&m);
	}
}
