/*
 * optim.c - SGD and AdamW over the strategy's local slices of the flat
 * parameter vector: the learning-rate schedule, global-norm clipping, and
 * weight decay only on the parameters that ask for it.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"

/* A stretch of one segment with one decay flag. */
struct orun {
	int seg;
	size_t off;			/* floats into the segment */
	size_t n;
	size_t state_off;		/* floats into each state vector */
	int decay;
};

struct optim {
	struct optim_config cfg;
	const struct backend *be;
	const struct strategy_view *v;
	struct orun *runs;
	int nruns;
	float *state[2];		/* SGD: momentum; AdamW: m, v */
	int nstate;
	long steps;			/* updates done (AdamW's t - 1) */
};

/* A parameter's place in the flat vector. */
struct span {
	size_t lo, hi;
	int decay;
};

static int
span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	return (x->lo > y->lo) - (x->lo < y->lo);
}

/* ------------------------------------------------------------------------ */
/* the decay mask                                                           */

static int
add_run(struct optim *o, int *cap, int seg, size_t off, size_t n,
    size_t state_off, int decay)
{
	struct orun *r;

	if (n == 0)
		return 0;
	if (o->nruns > 0) {
		r = &o->runs[o->nruns - 1];
		if (r->seg == seg && r->decay == decay &&
		    r->off + r->n == off) {
			r->n += n;
			return 0;
		}
	}
	if (o->nruns == *cap) {
		int ncap = *cap ? *cap * 2 : 16;

		r = realloc(o->runs, (size_t)ncap * sizeof *r);
		if (r == NULL)
			return -1;
		o->runs = r;
		*cap = ncap;
	}
	o->runs[o->nruns++] = (struct orun){ seg, off, n, state_off, decay };
	return 0;
}

/*
 * Where the real parameters of segment s end, in flat floats. A sharded
 * view's segment is one block's shard, and FSDP pads a block's region to
 * a multiple of the world size: what lies past the end of the block that
 * holds the segment's first float is padding, even where those flat
 * offsets belong to the next block. Other views may span blocks. A shard
 * that starts exactly at a block's end cannot be told from the next
 * block's first shard; it is all padding, zero in parameters and
 * gradients, so either reading leaves it zero.
 */
static size_t
seg_limit(const struct model *m, const struct view_seg *s, int sharded)
{
	int b;

	if (!sharded)
		return m->nflat;
	for (b = 0; b < m->nblocks; b++)
		if (s->flat_off >= m->blocks[b].off &&
		    s->flat_off < m->blocks[b].off + m->blocks[b].numel)
			return m->blocks[b].off + m->blocks[b].numel;
	return s->flat_off;		/* past every block: all padding */
}

/*
 * Cut every segment into runs of one decay flag. Floats no parameter
 * covers (padding, gaps) are not decayed.
 */
static int
build_runs(struct optim *o, const struct model *m, char *err, size_t errlen)
{
	const struct strategy_view *v = o->v;
	struct span *sp = NULL;
	size_t state_off = 0;
	int cap = 0, np = m->nparams, i, s, rc = -1;

	if (np > 0 && (sp = calloc((size_t)np, sizeof *sp)) == NULL)
		goto nomem;
	for (i = 0; i < np; i++) {
		const struct param *p = &m->params[i];

		if (p->block < 0 || p->block >= m->nblocks) {
			snprintf(err, errlen, "optimizer: parameter %s has no "
			    "block", p->name);
			goto out;
		}
		sp[i].lo = m->blocks[p->block].off + p->off;
		sp[i].hi = sp[i].lo + p->numel;
		sp[i].decay = p->decay != 0;
	}
	qsort(sp, (size_t)np, sizeof *sp, span_cmp);

	for (s = 0; s < v->nsegs; s++) {
		const struct view_seg *seg = &v->segs[s];
		size_t lo = seg->flat_off, hi = lo + seg->n;
		size_t lim = seg_limit(m, seg, v->sharded), at = lo;
		int a = 0, z = np;

		if (lim > hi)
			lim = hi;
		/* first parameter that ends past lo */
		while (a < z) {
			int mid = a + (z - a) / 2;

			if (sp[mid].hi <= lo)
				a = mid + 1;
			else
				z = mid;
		}
		for (i = a; i < np && sp[i].lo < lim && at < lim; i++) {
			size_t plo = sp[i].lo > at ? sp[i].lo : at;
			size_t phi = sp[i].hi < lim ? sp[i].hi : lim;

			if (phi <= plo)
				continue;
			if (add_run(o, &cap, s, at - lo, plo - at,
			    state_off + (at - lo), 0) < 0 ||
			    add_run(o, &cap, s, plo - lo, phi - plo,
			    state_off + (plo - lo), sp[i].decay) < 0)
				goto nomem;
			at = phi;
		}
		if (add_run(o, &cap, s, at - lo, hi - at,
		    state_off + (at - lo), 0) < 0)
			goto nomem;
		state_off += seg->n;
	}
	if (state_off != v->nlocal) {
		snprintf(err, errlen, "optimizer: the view's segments hold %zu "
		    "floats, not nlocal %zu", state_off, v->nlocal);
		goto out;
	}
	rc = 0;
	goto out;
nomem:
	snprintf(err, errlen, "optimizer: out of memory");
out:
	free(sp);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* open and close                                                           */

static int
check_config(const struct optim_config *c, char *err, size_t errlen)
{
	const char *why = NULL;

	if (!(c->lr >= 0.0f) || !(c->min_lr >= 0.0f))
		why = "learning rates must be >= 0";
	else if (!(c->weight_decay >= 0.0f))
		why = "weight decay must be >= 0";
	else if (!(c->clip >= 0.0f))
		why = "the clipping norm must be >= 0";
	else if (c->warmup < 0 || c->total < 0)
		why = "warmup and total steps must be >= 0";
	else if (c->kind == OPTIM_SGD) {
		if (!(c->momentum >= 0.0f && c->momentum < 1.0f))
			why = "momentum must be in [0,1)";
		else if (c->nesterov && c->momentum == 0.0f)
			/* PyTorch refuses it too */
			why = "nesterov needs a momentum";
	} else if (c->kind == OPTIM_ADAMW) {
		if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) ||
		    !(c->beta2 >= 0.0f && c->beta2 < 1.0f))
			why = "AdamW betas must be in [0,1)";
		else if (!(c->eps > 0.0f))
			why = "AdamW eps must be > 0";
	} else
		why = "unknown optimizer";
	if (why == NULL)
		return 0;
	snprintf(err, errlen, "optimizer: %s", why);
	return -1;
}

struct optim *
optim_open(const struct optim_config *cfg, const struct model *m,
    const struct strategy_view *v, const struct backend *be, char *err,
    size_t errlen)
{
	struct optim *o;
	int i;

	if (check_config(cfg, err, errlen) < 0)
		return NULL;
	if ((o = calloc(1, sizeof *o)) == NULL) {
		snprintf(err, errlen, "optimizer: out of memory");
		return NULL;
	}
	o->cfg = *cfg;
	o->be = be;
	o->v = v;
	if (build_runs(o, m, err, errlen) < 0)
		goto fail;
	if (cfg->kind == OPTIM_ADAMW)
		o->nstate = 2;
	else
		o->nstate = cfg->momentum != 0.0f ? 1 : 0;
	for (i = 0; i < o->nstate; i++)
		if ((o->state[i] = be->alloc(v->nlocal * sizeof(float))) ==
		    NULL) {
			snprintf(err, errlen, "optimizer: out of memory for "
			    "%zu floats of state", v->nlocal);
			goto fail;
		}
	return o;
fail:
	optim_close(o);
	return NULL;
}

void
optim_close(struct optim *o)
{
	int i;

	if (o == NULL)
		return;
	for (i = 0; i < 2; i++)
		if (o->state[i] != NULL)
			o->be->free(o->state[i]);
	free(o->runs);
	free(o);
}

/* ------------------------------------------------------------------------ */
/* schedule and step                                                        */

float
optim_lr(const struct optim_config *cfg, long t)
{
	double lr = cfg->lr, lo = cfg->min_lr, x;

	if (t < 0)
		t = 0;
	if (t < cfg->warmup)
		return (float)(lr * (double)(t + 1) / (double)cfg->warmup);
	if (cfg->total <= cfg->warmup)
		return cfg->lr;
	if (t >= cfg->total)
		return cfg->min_lr;
	x = (double)(t - cfg->warmup) / (double)(cfg->total - cfg->warmup);
	return (float)(lo + 0.5 * (lr - lo) * (1.0 + cos(M_PI * x)));
}

double
optim_step(struct optim *o, struct comm *c, long t)
{
	const struct strategy_view *v = o->v;
	const struct optim_config *cfg = &o->cfg;
	const struct backend *be = o->be;
	double ss = 0.0, norm, coef;
	float lr = optim_lr(cfg, t);
	int i, step;

	for (i = 0; i < v->nsegs; i++)
		ss += be->sumsq(v->segs[i].g, v->segs[i].n);
	if (v->sharded && c != NULL)
		comm_sum_double(c, &ss, 1);
	norm = sqrt(ss);

	/* torch.nn.utils.clip_grad_norm_: coef = clip / (norm + 1e-6),
	 * applied when it is below 1. */
	if (cfg->clip > 0.0f) {
		coef = (double)cfg->clip / (norm + 1e-6);
		if (coef < 1.0)
			for (i = 0; i < v->nsegs; i++)
				be->scale(v->segs[i].g, v->segs[i].n,
				    (float)coef);
	}

	step = (int)(o->steps + 1);
	for (i = 0; i < o->nruns; i++) {
		const struct orun *r = &o->runs[i];
		const struct view_seg *s = &v->segs[r->seg];
		float *p = s->p + r->off, *g = s->g + r->off;
		float wd = r->decay ? cfg->weight_decay : 0.0f;

		if (cfg->kind == OPTIM_ADAMW)
			be->adamw_step(p, g, o->state[0] + r->state_off,
			    o->state[1] + r->state_off, r->n, lr, cfg->beta1,
			    cfg->beta2, cfg->eps, wd, step);
		else
			be->sgd_step(p, g, o->nstate > 0 ?
			    o->state[0] + r->state_off : NULL, r->n, lr,
			    cfg->momentum, wd, cfg->nesterov);
	}
	o->steps++;
	return norm;
}

int
optim_nstate(const struct optim *o)
{
	return o->nstate;
}

float *
optim_state(struct optim *o, int i)
{
	return i >= 0 && i < o->nstate ? o->state[i] : NULL;
}

long
optim_steps(const struct optim *o)
{
	return o->steps;
}

void
optim_set_steps(struct optim *o, long t)
{
	o->steps = t < 0 ? 0 : t;
}
