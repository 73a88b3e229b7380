/*
 * test_optim.c - the optimizer: the SGD and AdamW kernels against double
 * references of PyTorch's formulas over several steps, the learning-rate
 * schedule, gradient clipping, the weight-decay mask over segments that
 * cross parameter and block boundaries or carry FSDP padding, the state
 * layout and the step count.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "check.h"
#include "cpu/cpu.h"
#include "optim.h"

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */

static uint64_t rng_state = 0x243f6a8885a308d3ULL;

static float
frand(void)
{
	return t_frand(&rng_state);
}

/*
 * A two-block model with only a parameter table:
 *   block 0 at flat 0, 10 floats: w0 [0,6) decay, b0 [6,10) no decay;
 *   block 1 at flat 10, 9 floats: w1 [10,15) decay, b1 [15,17) no decay,
 *   w2 [17,19) decay.
 */
static struct block fake_blocks[2];
static struct param fake_params[5];

static void
fake_model(struct model *m)
{
	static const struct { const char *name; int block, off, n, decay; }
	    tab[5] = {
		{ "w0", 0, 0, 6, 1 }, { "b0", 0, 6, 4, 0 },
		{ "w1", 1, 0, 5, 1 }, { "b1", 1, 5, 2, 0 },
		{ "w2", 1, 7, 2, 1 },
	};
	int i;

	memset(m, 0, sizeof *m);
	memset(fake_blocks, 0, sizeof fake_blocks);
	memset(fake_params, 0, sizeof fake_params);
	fake_blocks[0].off = 0;
	fake_blocks[0].numel = 10;
	fake_blocks[1].off = 10;
	fake_blocks[1].numel = 9;
	/* listed out of flat order: the optimizer must not rely on it */
	for (i = 0; i < 5; i++) {
		struct param *p = &fake_params[(i + 3) % 5];

		snprintf(p->name, sizeof p->name, "%s", tab[i].name);
		p->block = tab[i].block;
		p->off = tab[i].off;
		p->numel = tab[i].n;
		p->decay = tab[i].decay;
	}
	m->blocks = fake_blocks;
	m->nblocks = 2;
	m->params = fake_params;
	m->nparams = 5;
	m->nflat = 19;
	m->be = backend_cpu();
}

/* Does flat float f of the fake model decay? */
static int
fake_decays(size_t f)
{
	return f < 6 || (f >= 10 && f < 15) || (f >= 17 && f < 19);
}

static struct optim_config
adamw_config(void)
{
	struct optim_config c;

	memset(&c, 0, sizeof c);
	c.kind = OPTIM_ADAMW;
	c.lr = 1e-3f;
	c.beta1 = 0.9f;
	c.beta2 = 0.999f;
	c.eps = 1e-8f;
	c.weight_decay = 0.05f;
	return c;
}

/* ------------------------------------------------------------------------ */
/* kernels                                                                  */

TEST(sgd_kernel_against_reference)
{
	static const struct { float momentum, wd; int nesterov; } cases[] = {
		{ 0, 0, 0 }, { 0, 1e-2f, 0 }, { 0.9f, 0, 0 },
		{ 0.9f, 5e-4f, 0 }, { 0.9f, 5e-4f, 1 }, { 0.5f, 0.1f, 1 },
	};
	size_t n = 1000, i, k;
	double max = 0;

	for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		float *p = t_falloc(n), *g = t_falloc(n), *buf = t_falloc(n);
		double *rp = calloc(n, sizeof *rp), *rb = calloc(n, sizeof *rb);
		float lr = 0.1f, mom = cases[k].momentum, wd = cases[k].wd;
		int step;

		CHECK(rp != NULL && rb != NULL);
		for (i = 0; i < n; i++)
			rp[i] = p[i] = frand();
		for (step = 0; step < 5; step++) {
			for (i = 0; i < n; i++)
				g[i] = frand() * (i % 7 == 0 ? 1e-4f : 1.0f);
			cpu_sgd_step(p, g, mom != 0 ? buf : NULL, n, lr, mom,
			    wd, cases[k].nesterov);
			/* PyTorch: d = g + wd p; buf = d, then mom buf + d;
			 * d = nesterov ? d + mom buf : buf; p -= lr d */
			for (i = 0; i < n; i++) {
				double d = g[i] + (double)wd * rp[i];

				if (mom != 0) {
					rb[i] = step == 0 ? d : mom * rb[i] + d;
					if (cases[k].nesterov)
						d += mom * rb[i];
					else
						d = rb[i];
				}
				rp[i] -= (double)lr * d;
			}
		}
		max = fmax(max, t_check_close("sgd p", p, rp, n, 1e-6, 1e-5));
		if (mom != 0)
			max = fmax(max, t_check_close("sgd buf", buf, rb, n, 1e-6,
			    1e-5));
		free(p); free(g); free(buf); free(rp); free(rb);
	}
	t_diag("SGD, 6 settings x 5 steps: max error %.3g", max);
}

TEST(adamw_kernel_against_reference)
{
	struct optim_config c = adamw_config();
	size_t n = 1000, i;
	float *p = t_falloc(n), *g = t_falloc(n), *m = t_falloc(n), *v = t_falloc(n);
	double *rp = calloc(n, sizeof *rp), *rm = calloc(n, sizeof *rm);
	double *rv = calloc(n, sizeof *rv), b1 = c.beta1, b2 = c.beta2;
	double maxp, maxm, maxv;
	int t;

	CHECK(rp != NULL && rm != NULL && rv != NULL);
	for (i = 0; i < n; i++)
		rp[i] = p[i] = frand();
	for (t = 1; t <= 10; t++) {
		float lr = c.lr * (t % 3 + 1);

		for (i = 0; i < n; i++)
			g[i] = frand() * (i % 5 == 0 ? 1e-6f : 1.0f);
		cpu_adamw_step(p, g, m, v, n, lr, c.beta1, c.beta2, c.eps,
		    c.weight_decay, t);
		/* PyTorch: p *= 1 - lr wd; m = b1 m + (1-b1) g;
		 * v = b2 v + (1-b2) g^2; p -= lr/bc1 m / (sqrt(v)/sqrt(bc2)
		 * + eps) */
		for (i = 0; i < n; i++) {
			double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);

			rp[i] *= 1 - (double)lr * c.weight_decay;
			rm[i] = b1 * rm[i] + (1 - b1) * g[i];
			rv[i] = b2 * rv[i] + (1 - b2) * (double)g[i] * g[i];
			rp[i] -= lr / bc1 * rm[i] / (sqrt(rv[i]) / sqrt(bc2) +
			    c.eps);
		}
	}
	maxm = t_check_close("adamw m", m, rm, n, 1e-7, 1e-5);
	maxv = t_check_close("adamw v", v, rv, n, 1e-10, 1e-5);
	maxp = t_check_close("adamw p", p, rp, n, 1e-6, 1e-6);
	t_diag("AdamW, 10 steps: max error p %.3g, m %.3g, v %.3g", maxp, maxm,
	    maxv);
	free(p); free(g); free(m); free(v); free(rp); free(rm); free(rv);
}

/* ------------------------------------------------------------------------ */
/* schedule                                                                 */

TEST(lr_schedule)
{
	struct optim_config c;
	double pi = acos(-1.0);

	memset(&c, 0, sizeof c);
	c.lr = 0.4f;
	c.min_lr = 0.004f;
	c.warmup = 5;
	c.total = 105;
	t_diag("lr at 0, 4, 5, 30, 55, 104, 105: %.7g %.7g %.7g %.7g %.7g "
	    "%.7g %.7g", optim_lr(&c, 0), optim_lr(&c, 4), optim_lr(&c, 5),
	    optim_lr(&c, 30), optim_lr(&c, 55), optim_lr(&c, 104),
	    optim_lr(&c, 105));
	/* warmup: lr (t+1)/warmup */
	CHECK(fabsf(optim_lr(&c, 0) - 0.08f) < 1e-7f);
	CHECK(fabsf(optim_lr(&c, 2) - 0.24f) < 1e-7f);
	CHECK(fabsf(optim_lr(&c, 4) - 0.4f) < 1e-7f);
	/* cosine from lr at warmup to min_lr at total */
	CHECK(fabsf(optim_lr(&c, 5) - 0.4f) < 1e-7f);
	CHECK(fabsf(optim_lr(&c, 55) - 0.202f) < 1e-7f);
	CHECK(fabs(optim_lr(&c, 30) - (0.004 + 0.198 * (1 + cos(pi * 0.25)))) <
	    1e-7);
	CHECK(fabs(optim_lr(&c, 104) - (0.004 + 0.198 * (1 + cos(pi * 0.99))))
	    < 1e-7);
	CHECK(optim_lr(&c, 105) == c.min_lr);
	CHECK(optim_lr(&c, 100000) == c.min_lr);
	/* monotone after the warmup */
	for (long t = 5; t < 110; t++)
		CHECK(optim_lr(&c, t + 1) <= optim_lr(&c, t));
	/* no warmup */
	c.warmup = 0;
	CHECK(optim_lr(&c, 0) == c.lr);
	/* total <= warmup: constant after the warmup */
	c.warmup = 10;
	c.total = 0;
	CHECK(fabsf(optim_lr(&c, 0) - 0.04f) < 1e-7f);
	CHECK(optim_lr(&c, 10) == c.lr);
	CHECK(optim_lr(&c, 1000000) == c.lr);
	c.total = 10;
	CHECK(optim_lr(&c, 50) == c.lr);
}

/* ------------------------------------------------------------------------ */
/* the decay mask and the state layout                                      */

/*
 * With zero gradients AdamW's moments stay zero and the update is 0 /
 * eps = 0, so the only change is the decay p *= 1 - lr wd: exactly where
 * the mask says.
 */
static void
check_decay(const struct strategy_view *v, const int *padding_from)
{
	struct model m;
	struct optim_config c = adamw_config();
	struct optim *o;
	float **before;
	float keep = (float)(1.0 - (double)0.5f * 0.1f);
	char err[256];
	int s;
	size_t i;

	fake_model(&m);
	c.lr = 0.5f;
	c.weight_decay = 0.1f;
	o = optim_open(&c, &m, v, backend_cpu(), err, sizeof err);
	if (o == NULL)
		t_fail(__FILE__, __LINE__, "optim_open: %s", err);
	before = calloc(v->nsegs, sizeof *before);
	CHECK(before != NULL);
	for (s = 0; s < v->nsegs; s++) {
		before[s] = t_falloc(v->segs[s].n);
		for (i = 0; i < v->segs[s].n; i++) {
			v->segs[s].p[i] = 1.0f +
			    (float)(v->segs[s].flat_off + i);
			v->segs[s].g[i] = 0.0f;
		}
		memcpy(before[s], v->segs[s].p, v->segs[s].n * sizeof(float));
	}
	CHECK(optim_step(o, NULL, 0) == 0.0);
	for (s = 0; s < v->nsegs; s++)
		for (i = 0; i < v->segs[s].n; i++) {
			size_t f = v->segs[s].flat_off + i;
			int pad = padding_from != NULL &&
			    (int)i >= padding_from[s];
			float want = !pad && fake_decays(f) ?
			    before[s][i] * keep : before[s][i];

			if (v->segs[s].p[i] != want)
				t_fail(__FILE__, __LINE__, "segment %d float "
				    "%zu (flat %zu%s): %.9g, want %.9g", s, i,
				    f, pad ? ", padding" : "", v->segs[s].p[i],
				    want);
		}
	for (s = 0; s < v->nsegs; s++)
		free(before[s]);
	free(before);
	optim_close(o);
}

TEST(decay_mask_across_boundaries)
{
	float p[19], g[19];
	/* [0,8) crosses w0|b0; [8,19) crosses b0|w1 (a block boundary),
	 * w1|b1 and b1|w2 */
	struct view_seg segs[2] = {
		{ 0, 8, p, g }, { 8, 11, p + 8, g + 8 },
	};
	struct strategy_view v = { segs, 2, 19, 0 };
	struct view_seg whole = { 0, 19, p, g };
	struct strategy_view v1 = { &whole, 1, 19, 0 };

	check_decay(&v, NULL);
	check_decay(&v1, NULL);
	t_diag("decay only on w0, w1, w2 over segments crossing 4 boundaries");
}

/*
 * FSDP with 3 ranks pads block 0 (10 floats) to shards of 4: rank 2's
 * shard is flat [8,12), whose last two floats are padding even though
 * flat 10 and 11 are w1's (decayed) in block 1. Block 1 (9 floats) shards
 * evenly by 3.
 */
TEST(decay_mask_fsdp_padding)
{
	float p1[7], g1[7], p2[7], g2[7];
	struct view_seg r1[2] = {
		{ 4, 4, p1, g1 }, { 13, 3, p1 + 4, g1 + 4 },
	};
	struct view_seg r2[2] = {
		{ 8, 4, p2, g2 }, { 16, 3, p2 + 4, g2 + 4 },
	};
	struct strategy_view v1 = { r1, 2, 7, 1 }, v2 = { r2, 2, 7, 1 };
	int pad1[2] = { 4, 3 }, pad2[2] = { 2, 3 };

	check_decay(&v1, pad1);
	check_decay(&v2, pad2);
	t_diag("rank 1 and rank 2 shards: padding kept, decay where due");
}

/* SGD's momentum after one step is g + wd p, segment after segment. */
TEST(state_layout)
{
	struct model m;
	struct optim_config c;
	struct optim *o;
	float p[19], g[19], p0[19], *st;
	struct view_seg segs[3] = {
		{ 12, 7, p + 12, g + 12 }, { 0, 5, p, g },
		{ 5, 7, p + 5, g + 5 },
	};
	struct strategy_view v = { segs, 3, 19, 0 };
	char err[256];
	size_t off = 0, i;
	int s;

	fake_model(&m);
	memset(&c, 0, sizeof c);
	c.kind = OPTIM_SGD;
	c.lr = 0.1f;
	c.momentum = 0.9f;
	c.weight_decay = 0.01f;
	o = optim_open(&c, &m, &v, backend_cpu(), err, sizeof err);
	if (o == NULL)
		t_fail(__FILE__, __LINE__, "optim_open: %s", err);
	CHECK_EQ_INT(optim_nstate(o), 1);
	CHECK(optim_state(o, 1) == NULL);
	for (i = 0; i < 19; i++) {
		p0[i] = p[i] = frand();
		g[i] = frand();
	}
	optim_step(o, NULL, 0);
	st = optim_state(o, 0);
	for (s = 0; s < 3; s++) {
		for (i = 0; i < segs[s].n; i++) {
			size_t f = segs[s].flat_off + i;
			float want = g[f];

			if (fake_decays(f))
				want = want + c.weight_decay * p0[f];
			if (st[off + i] != want)
				t_fail(__FILE__, __LINE__, "state[%zu] (flat "
				    "%zu) = %.9g, want %.9g", off + i, f,
				    st[off + i], want);
		}
		off += segs[s].n;
	}
	CHECK_EQ_INT(optim_steps(o), 1);
	optim_close(o);

	/* momentum 0: no state */
	c.momentum = 0;
	o = optim_open(&c, &m, &v, backend_cpu(), err, sizeof err);
	CHECK(o != NULL);
	CHECK_EQ_INT(optim_nstate(o), 0);
	optim_step(o, NULL, 0);
	optim_close(o);

	/* AdamW: two vectors */
	c = adamw_config();
	o = optim_open(&c, &m, &v, backend_cpu(), err, sizeof err);
	CHECK(o != NULL);
	CHECK_EQ_INT(optim_nstate(o), 2);
	CHECK(optim_state(o, 0) != NULL && optim_state(o, 1) != NULL);
	optim_close(o);
}

/* ------------------------------------------------------------------------ */
/* clipping, schedule in the step, step count                               */

TEST(clipping)
{
	struct model m;
	struct optim_config c;
	struct optim *o;
	float p[19], g[19], p0[19], g0[19];
	struct view_seg segs[2] = {
		{ 0, 10, p, g }, { 10, 9, p + 10, g + 10 },
	};
	struct strategy_view v = { segs, 2, 19, 1 };
	double ss = 0, norm, got, coef;
	char err[256];
	int i, round;

	fake_model(&m);
	for (i = 0; i < 19; i++) {
		p0[i] = frand();
		g0[i] = 3 * frand();
		ss += (double)g0[i] * g0[i];
	}
	norm = sqrt(ss);
	for (round = 0; round < 3; round++) {
		/* clip below the norm, above it, off */
		memset(&c, 0, sizeof c);
		c.kind = OPTIM_SGD;
		c.lr = 0.25f;
		c.clip = round == 0 ? (float)(norm / 2) : round == 1 ?
		    (float)(norm * 2) : 0.0f;
		o = optim_open(&c, &m, &v, backend_cpu(), err, sizeof err);
		if (o == NULL)
			t_fail(__FILE__, __LINE__, "optim_open: %s", err);
		memcpy(p, p0, sizeof p);
		memcpy(g, g0, sizeof g);
		got = optim_step(o, NULL, 0);
		t_diag("clip %g: norm %.9g, want %.9g", c.clip, got, norm);
		CHECK(fabs(got - norm) <= 1e-12 * norm);
		coef = c.clip / (got + 1e-6);
		for (i = 0; i < 19; i++) {
			float gw = round == 0 ? g0[i] * (float)coef : g0[i];

			CHECK(g[i] == gw);
			CHECK(p[i] == p0[i] + -c.lr * gw);
		}
		optim_close(o);
	}
}

TEST(schedule_and_step_count)
{
	struct model m;
	struct optim_config c;
	struct optim *o;
	float p[19], g[19], q[19], mm[19], vv[19], want;
	struct view_seg seg = { 0, 19, p, g };
	struct strategy_view v = { &seg, 1, 19, 0 };
	char err[256];
	long t;
	int i;

	fake_model(&m);
	/* SGD without momentum: p moves by exactly lr(t) g */
	memset(&c, 0, sizeof c);
	c.kind = OPTIM_SGD;
	c.lr = 0.5f;
	c.warmup = 4;
	c.total = 20;
	c.min_lr = 0.01f;
	o = optim_open(&c, &m, &v, backend_cpu(), err, sizeof err);
	CHECK(o != NULL);
	for (t = 0; t < 22; t += 7) {
		for (i = 0; i < 19; i++) {
			q[i] = p[i] = frand();
			g[i] = frand();
		}
		optim_step(o, NULL, t);
		for (i = 0; i < 19; i++) {
			want = q[i] + -optim_lr(&c, t) * g[i];
			CHECK(p[i] == want);
		}
	}
	CHECK_EQ_INT(optim_steps(o), 4);
	optim_close(o);

	/* AdamW's bias correction follows optim_steps() + 1 */
	c = adamw_config();
	o = optim_open(&c, &m, &v, backend_cpu(), err, sizeof err);
	CHECK(o != NULL);
	optim_set_steps(o, 100);
	CHECK_EQ_INT(optim_steps(o), 100);
	for (i = 0; i < 19; i++) {
		q[i] = p[i] = frand();
		g[i] = frand();
	}
	memset(mm, 0, sizeof mm);
	memset(vv, 0, sizeof vv);
	optim_step(o, NULL, 0);
	/* the same kernel over the whole vector, decay only where due */
	for (i = 0; i < 19; i++)
		cpu_adamw_step(&q[i], &g[i], &mm[i], &vv[i], 1, c.lr, c.beta1,
		    c.beta2, c.eps, fake_decays(i) ? c.weight_decay : 0.0f,
		    101);
	CHECK_MEM_EQ(p, q, sizeof p);
	CHECK_MEM_EQ(optim_state(o, 0), mm, sizeof mm);
	CHECK_MEM_EQ(optim_state(o, 1), vv, sizeof vv);
	CHECK_EQ_INT(optim_steps(o), 101);
	optim_close(o);
}

TEST(open_refuses_bad_input)
{
	struct model m;
	struct optim_config c;
	float p[19], g[19];
	struct view_seg seg = { 0, 19, p, g };
	struct strategy_view v = { &seg, 1, 18, 0 };
	char err[256];

	fake_model(&m);
	c = adamw_config();
	err[0] = '\0';
	CHECK(optim_open(&c, &m, &v, backend_cpu(), err, sizeof err) == NULL);
	t_diag("nlocal mismatch: %s", err);
	CHECK_CONTAINS(err, "nlocal");
	v.nlocal = 19;
	c.beta2 = 1.0f;
	CHECK(optim_open(&c, &m, &v, backend_cpu(), err, sizeof err) == NULL);
	CHECK_CONTAINS(err, "beta");
	memset(&c, 0, sizeof c);
	c.kind = OPTIM_SGD;
	c.lr = 0.1f;
	c.nesterov = 1;
	CHECK(optim_open(&c, &m, &v, backend_cpu(), err, sizeof err) == NULL);
	CHECK_CONTAINS(err, "nesterov");
}
