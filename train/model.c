/*
 * model.c - the layer list: building it (the mb_* blocks resnet.c and
 * vit.c use), sizing and allocating activations, initialising parameters,
 * and running forward and backward through the backend table.
 *
 * Memory rule: every activation is resident unless activation
 * checkpointing is on, in which case the activations a block only uses
 * inside itself (and the state its layers save for backward) live in one
 * arena shared by all blocks; backward recomputes a block's forward into
 * the arena before running its layers in reverse. Activation gradients
 * live only from the backward step that first writes them to the one that
 * last reads them, and share one arena planned for those lifetimes (as
 * PyTorch frees a gradient once its producer's backward consumed it).
 */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model.h"

/* ------------------------------------------------------------------------ */
/* the model zoo                                                            */

struct vit_preset {
	const char *size;
	int dim, layers, heads, mlp;
};

/* timm's vision_transformer.py: vit_{tiny,small,base,large,huge,giant,
 * gigantic}; g and G use mlp ratios 48/11 and 64/13. */
static const struct vit_preset vit_presets[] = {
	{ "ti", 192, 12, 3, 768 },
	{ "s", 384, 12, 6, 1536 },
	{ "b", 768, 12, 12, 3072 },
	{ "l", 1024, 24, 16, 4096 },
	{ "h", 1280, 32, 16, 5120 },
	{ "g", 1408, 40, 16, 6144 },
	{ "G", 1664, 48, 16, 8192 },
};

static const int resnet_depths[] = { 18, 34, 50, 101, 152 };

int
model_config_from_name(struct model_config *cfg, const char *name,
    int image_size, int num_classes, char *err, size_t errlen)
{
	size_t i;

	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->name, sizeof(cfg->name), "%s", name);
	cfg->image_size = image_size;
	cfg->num_classes = num_classes;
	if (strncmp(name, "resnet", 6) == 0) {
		char *end;
		long d = strtol(name + 6, &end, 10);

		for (i = 0; i < sizeof(resnet_depths) / sizeof(resnet_depths[0]); i++)
			if (*end == '\0' && end != name + 6 && d == resnet_depths[i]) {
				cfg->family = MODEL_RESNET;
				cfg->depth = (int)d;
				cfg->width = 1;
				return 0;
			}
	} else if (strncmp(name, "vit-", 4) == 0) {
		for (i = 0; i < sizeof(vit_presets) / sizeof(vit_presets[0]); i++) {
			const struct vit_preset *v = &vit_presets[i];
			size_t n = strlen(v->size);
			char *end;
			long p;

			if (strncmp(name + 4, v->size, n) != 0 ||
			    name[4 + n] < '0' || name[4 + n] > '9')
				continue;
			p = strtol(name + 4 + n, &end, 10);
			if (*end != '\0' || p < 1 || p > 1024)
				break;
			cfg->family = MODEL_VIT;
			cfg->patch = (int)p;
			cfg->dim = v->dim;
			cfg->layers = v->layers;
			cfg->heads = v->heads;
			cfg->mlp = v->mlp;
			return 0;
		}
	}
	snprintf(err, errlen, "unknown model '%s' (try resnet18, resnet34, "
	    "resnet50, resnet101, resnet152, or vit-SIZE PATCH with SIZE "
	    "ti, s, b, l, h, g, G: vit-ti16, vit-l16, vit-h14, vit-g14, "
	    "vit-G14, vit-ti4)", name);
	return -1;
}

/* ------------------------------------------------------------------------ */
/* building                                                                 */

/*
 * Room for element n of a build-time array that doubles from 16 slots.
 * The arrays only grow while a model is built, so the capacity follows
 * from the count (it is reached at 0 and at each power of two from 16)
 * and is not stored. Returns the new element, or NULL out of memory.
 */
static void *
grow(void *arrp, int n, size_t size)
{
	void **arr = arrp, *p;

	if (n == 0 || (n >= 16 && (n & (n - 1)) == 0)) {
		p = realloc(*arr, (n ? 2 * (size_t)n : 16) * size);
		if (p == NULL)
			return NULL;
		*arr = p;
	}
	return (char *)*arr + (size_t)n * size;
}

static int
new_act(struct model *m, size_t per_sample, size_t fixed, int has_grad)
{
	struct act *a = grow(&m->acts, m->nacts, sizeof(*a));

	if (a == NULL)
		return -1;
	memset(a, 0, sizeof(*a));
	a->per_sample = per_sample;
	a->fixed = fixed;
	a->block = m->nblocks - 1;
	a->has_grad = has_grad;
	return m->nacts++;
}

/* Saved statistics or indices: fp32 (int32) in every precision. */
static int
new_stat(struct model *m, size_t per_sample, size_t fixed)
{
	int a = new_act(m, per_sample, fixed, 0);

	if (a >= 0)
		m->acts[a].f32 = 1;
	return a;
}

static struct layer *
new_layer(struct model *m, enum layer_kind kind, int in)
{
	struct layer *L = grow(&m->layers, m->nlayers, sizeof(*L));

	if (L == NULL)
		return NULL;
	m->nlayers++;
	memset(L, 0, sizeof(*L));
	L->kind = kind;
	L->block = m->nblocks - 1;
	L->in = in;
	L->in2 = L->out = L->save = L->save2 = -1;
	L->w = L->b = L->extra = L->run_mean = L->run_var = -1;
	m->blocks[m->nblocks - 1].nlayers++;
	return L;
}

static int
new_param(struct model *m, const char *prefix, const char *suffix, int ndim,
    const int *shape, int decay, int init, float scale)
{
	struct block *bk = &m->blocks[m->nblocks - 1];
	struct param *p = grow(&m->params, m->nparams, sizeof(*p));
	int i;

	if (p == NULL)
		return -1;
	memset(p, 0, sizeof(*p));
	if (suffix)
		snprintf(p->name, sizeof(p->name), "%s.%s", prefix, suffix);
	else
		snprintf(p->name, sizeof(p->name), "%s", prefix);
	p->block = m->nblocks - 1;
	p->off = bk->numel;
	p->ndim = ndim;
	p->numel = 1;
	for (i = 0; i < ndim; i++) {
		p->shape[i] = shape[i];
		p->numel *= (size_t)shape[i];
	}
	p->decay = decay;
	p->init = init;
	p->init_scale = scale;
	bk->numel += p->numel;
	m->nflat += p->numel;
	if (bk->nparams == 0)
		bk->first_param = m->nparams;
	bk->nparams++;
	return m->nparams++;
}

static int
new_buffer(struct model *m, const char *prefix, const char *suffix,
    size_t numel)
{
	struct buffer *b = grow(&m->buffers, m->nbuffers, sizeof(*b));

	if (b == NULL)
		return -1;
	snprintf(b->name, sizeof(b->name), "%s.%s", prefix, suffix);
	b->off = m->nbuf;
	b->numel = numel;
	m->nbuf += numel;
	return m->nbuffers++;
}

int
model_begin_block(struct model *m, const char *name)
{
	struct block *b = grow(&m->blocks, m->nblocks, sizeof(*b));

	if (b == NULL)
		return -1;
	memset(b, 0, sizeof(*b));
	snprintf(b->name, sizeof(b->name), "%s", name);
	b->off = m->nflat;
	b->first_layer = m->nlayers;
	b->first_param = m->nparams;
	b->out = -1;
	return m->nblocks++;
}

int
model_input(struct model *m, int C, int S)
{
	m->input = new_act(m, (size_t)C * S * S, 0, 0);
	if (m->input >= 0)
		m->acts[m->input].block = -1;
	return m->input;
}

/* A layer's output, with a gradient when its input has one or it has
 * parameters. */
static int
layer_out(struct model *m, struct layer *L, size_t per_sample, int grad)
{
	L->out = new_act(m, per_sample, 0, grad);
	m->blocks[L->block].out = L->out;
	return L->out;
}

static int
grad_of(const struct model *m, int a)
{
	return a >= 0 && m->acts[a].has_grad;
}

int
mb_conv(struct model *m, const char *prefix, int in, int C, int H, int W,
    int K, int R, int stride, int pad, int bias, int *P)
{
	int shape[4] = { K, C, R, R };
	struct layer *L = new_layer(m, L_CONV, in);
	struct conv_shape *s;

	if (L == NULL)
		return -1;
	s = &L->conv;
	s->C = C, s->H = H, s->W = W, s->K = K, s->R = R, s->S = R;
	s->stride = stride, s->pad = pad;
	s->P = (H + 2 * pad - R) / stride + 1;
	s->Q = (W + 2 * pad - R) / stride + 1;
	if (s->P < 1 || s->Q < 1)
		return -2;
	/* torchvision ResNet: kaiming_normal_(mode="fan_out", relu) */
	L->w = new_param(m, prefix, "weight", 4, shape, 1, INIT_NORMAL,
	    sqrtf(2.0f / (float)(K * R * R)));
	if (bias)
		L->b = new_param(m, prefix, "bias", 1, &K, 0, INIT_ZERO, 0);
	L->need_dinp = grad_of(m, in);
	*P = s->P;
	return layer_out(m, L, (size_t)K * s->P * s->Q, 1);
}

int
mb_bn(struct model *m, const char *prefix, int in, int C, int HW)
{
	struct layer *L = new_layer(m, L_BN, in);

	if (L == NULL)
		return -1;
	L->C = C;
	L->HW = HW;
	L->eps = 1e-5f;
	L->w = new_param(m, prefix, "weight", 1, &C, 0, INIT_ONE, 0);
	L->b = new_param(m, prefix, "bias", 1, &C, 0, INIT_ZERO, 0);
	L->run_mean = new_buffer(m, prefix, "running_mean", (size_t)C);
	L->run_var = new_buffer(m, prefix, "running_var", (size_t)C);
	L->save = new_stat(m, 0, (size_t)C);
	L->save2 = new_stat(m, 0, (size_t)C);
	L->need_dinp = grad_of(m, in);
	return layer_out(m, L, (size_t)C * HW, 1);
}

int
mb_bn_relu(struct model *m, const char *prefix, int in, int res, int C,
    int HW)
{
	struct layer *L;
	int x = mb_bn(m, prefix, in, C, HW);

	if (x < 0)
		return x;
	L = &m->layers[m->nlayers - 1];
	L->in2 = res;
	L->relu = 1;
	if ((L = new_layer(m, L_RELU, x)) == NULL)
		return -1;
	L->out = x;
	L->n = (size_t)C * HW;
	L->fused = 1;
	return x;
}

static int
eltwise(struct model *m, enum layer_kind kind, int in, size_t n)
{
	struct layer *L = new_layer(m, kind, in);

	if (L == NULL)
		return -1;
	L->n = n;
	L->need_dinp = grad_of(m, in);
	return layer_out(m, L, n, L->need_dinp);
}

int
mb_relu(struct model *m, int in, size_t n)
{
	return eltwise(m, L_RELU, in, n);
}

int
mb_gelu(struct model *m, int in, size_t n)
{
	return eltwise(m, L_GELU, in, n);
}

int
mb_add(struct model *m, int a, int b, size_t n)
{
	struct layer *L = new_layer(m, L_ADD, a);

	if (L == NULL)
		return -1;
	L->in2 = b;
	L->n = n;
	L->need_dinp = 1;
	return layer_out(m, L, n, 1);
}

int
mb_maxpool(struct model *m, int in, int C, int H, int k, int stride, int pad,
    int *P)
{
	struct layer *L = new_layer(m, L_MAXPOOL, in);
	struct pool_shape *s;

	if (L == NULL)
		return -1;
	s = &L->pool;
	s->C = C, s->H = H, s->W = H, s->k = k, s->stride = stride;
	s->pad = pad;
	s->P = s->Q = (H + 2 * pad - k) / stride + 1;
	if (s->P < 1)
		return -2;
	L->save = new_stat(m, (size_t)C * s->P * s->Q, 0);	/* int32 idx */
	L->need_dinp = grad_of(m, in);
	*P = s->P;
	return layer_out(m, L, (size_t)C * s->P * s->Q, 1);
}

int
mb_avgpool(struct model *m, int in, int C, int HW)
{
	struct layer *L = new_layer(m, L_AVGPOOL, in);

	if (L == NULL)
		return -1;
	L->C = C;
	L->HW = HW;
	L->need_dinp = grad_of(m, in);
	return layer_out(m, L, (size_t)C, 1);
}

int
mb_linear(struct model *m, const char *prefix, int in, int M, int K, int N,
    int bias, int wndim, const int *wshape, int winit, float wscale,
    int binit, float bscale)
{
	struct layer *L = new_layer(m, L_LINEAR, in);
	int shape2[2] = { N, K };

	if (L == NULL)
		return -1;
	L->M = M, L->K = K, L->N = N;
	if (wshape == NULL) {
		wndim = 2;
		wshape = shape2;
	}
	L->w = new_param(m, prefix, "weight", wndim, wshape, 1, winit, wscale);
	if (bias)
		L->b = new_param(m, prefix, "bias", 1, &N, 0, binit, bscale);
	L->need_dinp = grad_of(m, in);
	return layer_out(m, L, (size_t)M * N, 1);
}

int
mb_patchify(struct model *m, int in, int C, int S, int p)
{
	struct layer *L = new_layer(m, L_PATCHIFY, in);
	size_t T = (size_t)(S / p) * (S / p);

	if (L == NULL)
		return -1;
	L->img_c = C, L->img_hw = S, L->patch = p;
	L->need_dinp = grad_of(m, in);
	return layer_out(m, L, T * C * p * p, L->need_dinp);
}

int
mb_tokens(struct model *m, int in, int T, int D)
{
	struct layer *L = new_layer(m, L_TOKENS, in);
	int cshape[3] = { 1, 1, D }, pshape[3] = { 1, T + 1, D };

	if (L == NULL)
		return -1;
	L->T = T, L->D = D;
	/* timm: cls_token normal std 1e-6, pos_embed trunc_normal std .02;
	 * both are kept out of weight decay (no_weight_decay()). */
	L->w = new_param(m, "cls_token", NULL, 3, cshape, 0, INIT_NORMAL, 1e-6f);
	L->b = new_param(m, "pos_embed", NULL, 3, pshape, 0, INIT_TRUNC_NORMAL,
	    0.02f);
	L->need_dinp = grad_of(m, in);
	return layer_out(m, L, (size_t)(T + 1) * D, 1);
}

int
mb_layernorm(struct model *m, const char *prefix, int in, int M, int C,
    float eps)
{
	struct layer *L = new_layer(m, L_LAYERNORM, in);

	if (L == NULL)
		return -1;
	L->M = M, L->C = C, L->eps = eps;
	L->w = new_param(m, prefix, "weight", 1, &C, 0, INIT_ONE, 0);
	L->b = new_param(m, prefix, "bias", 1, &C, 0, INIT_ZERO, 0);
	L->save = new_stat(m, (size_t)M, 0);
	L->save2 = new_stat(m, (size_t)M, 0);
	L->need_dinp = grad_of(m, in);
	return layer_out(m, L, (size_t)M * C, 1);
}

int
mb_attention(struct model *m, int qkv, int T, int C, int NH)
{
	struct layer *L = new_layer(m, L_ATTENTION, qkv);

	if (L == NULL)
		return -1;
	L->T = T, L->D = C, L->NH = NH;
	L->save = new_act(m, (size_t)NH * T * T, 0, 0);
	L->need_dinp = grad_of(m, qkv);
	return layer_out(m, L, (size_t)T * C, 1);
}

int
mb_token0(struct model *m, int in, int T, int D)
{
	struct layer *L = new_layer(m, L_TOKEN0, in);

	if (L == NULL)
		return -1;
	L->T = T, L->D = D;
	L->need_dinp = grad_of(m, in);
	return layer_out(m, L, (size_t)D, 1);
}

/*
 * Gradient lifetimes, from what layer_backward touches at layer i:
 *  - every kind reads G(out), the fused L_RELU too (no work; in == out);
 *  - with need_dinp it writes G(in) (+=): conv, bn, relu, gelu, add,
 *    maxpool, avgpool, linear, patchify, tokens, layernorm, attention,
 *    token0;
 *  - L_ADD writes G(in2), and L_BN with a residual (in2) writes it as dres.
 * Backward runs from the last layer down, so the gradient of a is first
 * written by the last layer that names a (gbegin) and last read by the
 * first layer whose out is a (gend, the producer); the loss writes the
 * logits' gradient before any layer (gbegin = nlayers). Counting every
 * layer that names a, written or not, can only make a lifetime longer. A
 * gradient nothing writes is live at its producer alone, and is zero
 * there, as the producer expects.
 */
static void
grad_lifetimes(struct model *m)
{
	int i, k;

	for (i = 0; i < m->nacts; i++)
		m->acts[i].gbegin = m->acts[i].gend = -1;
	for (i = 0; i < m->nlayers; i++) {
		const struct layer *L = &m->layers[i];
		const int use[3] = { L->in, L->in2, L->out };

		if (L->out >= 0 && m->acts[L->out].gend < 0)
			m->acts[L->out].gend = i;
		for (k = 0; k < 3; k++)
			if (use[k] >= 0)
				m->acts[use[k]].gbegin = i;
	}
	for (i = 0; i < m->nacts; i++) {
		struct act *a = &m->acts[i];

		if (a->gend < 0)	/* no producer (the input) */
			a->gend = 0;
		if (a->gbegin < a->gend)
			a->gbegin = a->gend;
	}
	m->acts[m->logits].gbegin = m->nlayers;
}

/*
 * An activation is internal when every layer that reads it sits in the
 * block that writes it. Saved state is read only by its own layer. The
 * logits are read by the loss, and the input by nobody's backward.
 */
int
model_finish(struct model *m, int logits, char *err, size_t errlen)
{
	int i;

	if (logits < 0) {
		snprintf(err, errlen, "out of memory building %s", m->cfg.name);
		return -1;
	}
	m->logits = logits;
	for (i = 0; i < m->nacts; i++)
		m->acts[i].internal = m->acts[i].block >= 0;
	for (i = 0; i < m->nlayers; i++) {
		const struct layer *L = &m->layers[i];

		if (L->in >= 0 && m->acts[L->in].block != L->block)
			m->acts[L->in].internal = 0;
		if (L->in2 >= 0 && m->acts[L->in2].block != L->block)
			m->acts[L->in2].internal = 0;
	}
	for (i = 0; i < m->nblocks; i++)
		if (m->blocks[i].out >= 0)
			m->acts[m->blocks[i].out].internal = 0;
	m->acts[logits].internal = 0;
	m->num_classes = m->cfg.num_classes;
	grad_lifetimes(m);
	return 0;
}

int
model_build(struct model *m, const struct model_config *cfg, char *err,
    size_t errlen)
{
	int rc;

	memset(m, 0, sizeof(*m));
	m->cfg = *cfg;
	m->input = m->logits = -1;
	if (cfg->num_classes < 1) {
		snprintf(err, errlen, "--classes must be at least 1");
		return -1;
	}
	if (cfg->image_size < 1) {
		snprintf(err, errlen, "--image-size must be at least 1");
		return -1;
	}
	rc = cfg->family == MODEL_RESNET ? resnet_build(m, err, errlen) :
	    vit_build(m, err, errlen);
	if (rc != 0) {
		model_free(m);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* counting                                                                 */

uint64_t
model_param_count(const struct model *m)
{
	return m->nflat;
}

uint64_t
model_forward_macs(const struct model *m)
{
	uint64_t macs = 0;
	int i;

	for (i = 0; i < m->nlayers; i++) {
		const struct layer *L = &m->layers[i];

		switch (L->kind) {
		case L_CONV:
			macs += (uint64_t)L->conv.K * L->conv.C * L->conv.R *
			    L->conv.S * L->conv.P * L->conv.Q;
			break;
		case L_LINEAR:
			macs += (uint64_t)L->M * L->K * L->N;
			break;
		case L_ATTENTION:	/* q k^T and att v */
			macs += 2 * (uint64_t)L->T * L->T * L->D;
			break;
		default:
			break;
		}
	}
	return macs;
}

int
model_find_param(const struct model *m, const char *name)
{
	int i;

	for (i = 0; i < m->nparams; i++)
		if (strcmp(m->params[i].name, name) == 0)
			return i;
	return -1;
}

int
model_find_buffer(const struct model *m, const char *name)
{
	int i;

	for (i = 0; i < m->nbuffers; i++)
		if (strcmp(m->buffers[i].name, name) == 0)
			return i;
	return -1;
}

/* ------------------------------------------------------------------------ */
/* initialisation                                                           */

static uint64_t
splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static double
uniform01(uint64_t *s)
{
	return ((splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double
normal01(uint64_t *s)
{
	double u = uniform01(s), v = uniform01(s);

	return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* FNV-1a: each parameter's stream depends on the seed and its name only,
 * so adding a layer does not change the others' values. */
static uint64_t
name_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	while (*s)
		h = (h ^ (unsigned char)*s++) * 0x100000001b3ULL;
	return h;
}

void
model_init_block(const struct model *m, int b, uint64_t seed, float *dst)
{
	const struct block *bk = &m->blocks[b];
	int i;

	memset(dst, 0, bk->numel * sizeof(float));
	for (i = bk->first_param; i < bk->first_param + bk->nparams; i++) {
		const struct param *p = &m->params[i];
		uint64_t st = seed * 0x9e3779b97f4a7c15ULL ^ name_hash(p->name);
		float *x = dst + p->off;
		double v;
		size_t j;

		for (j = 0; j < p->numel; j++) {
			switch (p->init) {
			case INIT_ONE:
				x[j] = 1;
				break;
			case INIT_NORMAL:
				x[j] = (float)(p->init_scale * normal01(&st));
				break;
			case INIT_TRUNC_NORMAL:
				do
					v = normal01(&st);
				while (v < -2 || v > 2);
				x[j] = (float)(p->init_scale * v);
				break;
			case INIT_UNIFORM:
				x[j] = (float)(p->init_scale *
				    (2 * uniform01(&st) - 1));
				break;
			default:
				x[j] = 0;
				break;
			}
		}
	}
}

void
model_init_buffers(struct model *m)
{
	float *h;
	int i;
	size_t j;

	if (m->nbuf == 0 || m->bufs == NULL)
		return;
	h = calloc(m->nbuf, sizeof(float));
	if (h == NULL)
		return;
	for (i = 0; i < m->nbuffers; i++)
		if (strstr(m->buffers[i].name, "running_var"))
			for (j = 0; j < m->buffers[i].numel; j++)
				h[m->buffers[i].off + j] = 1;
	m->be->to_device(m->bufs, h, m->nbuf * sizeof(float));
	free(h);
}

/* ------------------------------------------------------------------------ */
/* memory                                                                   */

static size_t
act_elems(const struct act *a, int B)
{
	return a->per_sample * (size_t)B + a->fixed;
}

/* Floats of memory that hold activation a at batch B with act_elt-byte
 * elements (rounded up). */
static size_t
act_floats_elt(const struct act *a, int B, size_t act_elt)
{
	size_t bytes = act_elems(a, B) * (a->f32 ? sizeof(float) : act_elt);

	return (bytes + sizeof(float) - 1) / sizeof(float);
}

size_t
model_act_bytes(const struct model *m, const struct act *a, int B)
{
	return act_elems(a, B) * (a->f32 ? sizeof(float) : m->be->act_elt);
}

static size_t
act_floats(const struct model *m, const struct act *a, int B)
{
	return act_floats_elt(a, B, m->be->act_elt);
}

float *
model_input_f32(struct model *m)
{
	return m->xin != NULL ? m->xin : m->acts[m->input].data;
}

/* A gradient to place: floats n (64-byte multiple) at off, live [end, begin]. */
struct gplace {
	size_t n, off;
	int act, begin, end;
};

/* Largest first, then the one live first, then by index: first fit packs
 * big tensors best, and the order is total, so every rank plans alike. */
static int
place_order(const void *x, const void *y)
{
	const struct gplace *a = x, *b = y;

	if (a->n != b->n)
		return a->n > b->n ? -1 : 1;
	if (a->begin != b->begin)
		return a->begin > b->begin ? -1 : 1;
	return (a->act > b->act) - (a->act < b->act);
}

/* The order backward reaches them in. */
static int
zero_order(const void *x, const void *y)
{
	const struct gplace *a = x, *b = y;

	if (a->begin != b->begin)
		return a->begin > b->begin ? -1 : 1;
	return (a->act > b->act) - (a->act < b->act);
}

static int
in_gplan(const struct model *m, const struct act *a)
{
	return a->has_grad && !(m->checkpoint && a->internal);
}

int
model_plan_grads(struct model *m, int B, size_t act_elt, size_t *floats)
{
	struct gplace *g = malloc(((size_t)m->nacts + 1) * sizeof(*g));
	struct gplace **by_off = malloc(((size_t)m->nacts + 1) *
	    sizeof(*by_off));
	size_t total = 0;
	int i, j, k, n = 0, nplaced = 0;

	free(m->gzero);
	m->gzero = malloc(((size_t)m->nacts + 1) * sizeof(int));
	m->ngzero = 0;
	if (g == NULL || by_off == NULL || m->gzero == NULL) {
		free(g);
		free(by_off);
		return -1;
	}
	for (i = 0; i < m->nacts; i++) {
		const struct act *a = &m->acts[i];

		if (!in_gplan(m, a))
			continue;
		g[n].n = (act_floats_elt(a, B, act_elt) + 15) & ~(size_t)15;
		g[n].off = 0;
		g[n].act = i;
		g[n].begin = a->gbegin;
		g[n].end = a->gend;
		n++;
	}
	if (m->no_grad_plan) {
		for (k = 0; k < n; k++) {
			g[k].off = total;
			total += g[k].n;
		}
	} else {
		qsort(g, (size_t)n, sizeof(*g), place_order);
		for (k = 0; k < n; k++) {
			struct gplace *q = &g[k];
			size_t off = 0;

			/* the lowest gap between the placed gradients live
			 * at the same time as q (by_off: placed, by offset) */
			for (j = 0; j < nplaced; j++) {
				const struct gplace *p = by_off[j];

				if (p->end > q->begin || q->end > p->begin)
					continue;
				if (off + q->n <= p->off)
					break;
				if (p->off + p->n > off)
					off = p->off + p->n;
			}
			q->off = off;
			for (j = nplaced; j > 0 && by_off[j - 1]->off > off; j--)
				by_off[j] = by_off[j - 1];
			by_off[j] = q;
			nplaced++;
			if (off + q->n > total)
				total = off + q->n;
		}
	}
	qsort(g, (size_t)n, sizeof(*g), zero_order);
	for (k = 0; k < n; k++) {
		m->acts[g[k].act].goff = g[k].off;
		m->gzero[k] = g[k].act;
	}
	m->ngzero = n;
	*floats = total;
	free(g);
	free(by_off);
	return 0;
}

static void *
xalloc(struct model *m, size_t floats, int *fail)
{
	void *p;

	if (floats == 0)
		return NULL;
	p = m->be->alloc(floats * sizeof(float));
	if (p == NULL)
		*fail = 1;
	else
		m->act_bytes += floats * sizeof(float);
	return p;
}

int
model_alloc(struct model *m, const struct backend *be, int max_batch,
    int checkpoint, char *err, size_t errlen)
{
	size_t *blk_size, *blk_gsize, scratch;
	int i, fail = 0;

	m->be = be;
	m->max_batch = max_batch;
	m->checkpoint = checkpoint;
	m->act_bytes = 0;
	blk_size = calloc((size_t)m->nblocks, sizeof(size_t));
	blk_gsize = calloc((size_t)m->nblocks, sizeof(size_t));
	m->bparams = calloc((size_t)m->nblocks, sizeof(float *));
	m->bgrads = calloc((size_t)m->nblocks, sizeof(float *));
	if (!blk_size || !blk_gsize || !m->bparams || !m->bgrads) {
		fail = 1;
		goto out;
	}
	/* arena offsets: internal activations of one block, packed */
	if (checkpoint) {
		size_t *off = calloc((size_t)m->nacts * 2, sizeof(size_t));
		size_t gmax = 0;

		if (off == NULL) {
			fail = 1;
			goto out;
		}
		for (i = 0; i < m->nacts; i++) {
			const struct act *a = &m->acts[i];
			size_t n = (act_floats(m, a, max_batch) + 15) & ~(size_t)15;

			if (!a->internal)
				continue;
			off[2 * i] = blk_size[a->block];
			blk_size[a->block] += n;
			if (a->has_grad) {
				off[2 * i + 1] = blk_gsize[a->block];
				blk_gsize[a->block] += n;
			}
		}
		for (i = 0; i < m->nblocks; i++) {
			if (blk_size[i] > m->arena_floats)
				m->arena_floats = blk_size[i];
			if (blk_gsize[i] > gmax)
				gmax = blk_gsize[i];
		}
		m->arena = xalloc(m, m->arena_floats, &fail);
		m->garena = xalloc(m, gmax, &fail);
		for (i = 0; i < m->nacts && !fail; i++) {
			struct act *a = &m->acts[i];

			if (!a->internal)
				continue;
			a->data = m->arena + off[2 * i];
			if (a->has_grad)
				a->grad = m->garena + off[2 * i + 1];
		}
		free(off);
		if (fail)
			goto out;
	}
	if (model_plan_grads(m, max_batch, be->act_elt, &m->gplan_floats)) {
		fail = 1;
		goto out;
	}
	m->gplan = xalloc(m, m->gplan_floats, &fail);
	for (i = 0; i < m->nacts && !fail; i++) {
		struct act *a = &m->acts[i];

		if (checkpoint && a->internal)
			continue;
		a->data = xalloc(m, act_floats(m, a, max_batch), &fail);
		if (a->has_grad)
			a->grad = m->gplan + a->goff;
	}
	/* one scratch for the largest conv or attention; none asked for
	 * once out of memory (a GPU backend's trials need room) */
	scratch = 0;
	for (i = 0; i < m->nlayers && !fail; i++) {
		const struct layer *L = &m->layers[i];
		size_t s = 0;

		if (L->kind == L_CONV) {
			struct conv_shape cs = L->conv;

			cs.B = max_batch;
			s = be->conv2d_scratch(&cs);
		} else if (L->kind == L_ATTENTION) {
			s = be->attention_scratch(max_batch, L->T, L->D, L->NH);
		}
		if (s > scratch)
			scratch = s;
	}
	m->scratch_floats = scratch;
	m->scratch = xalloc(m, scratch, &fail);
	if (!fail && be->set_scratch != NULL)
		be->set_scratch(scratch);
	if (be->act_elt != sizeof(float))
		m->xin = xalloc(m, act_elems(&m->acts[m->input], max_batch),
		    &fail);
	/* the input is (C,S,S), S the image size (model_input) */
	if (be->set_image_shape != NULL) {
		int S = m->cfg.image_size;

		be->set_image_shape((int)(m->acts[m->input].per_sample /
		    ((size_t)S * S)), S, S);
	}
	m->losses = xalloc(m, (size_t)max_batch, &fail);
	if ((m->host_losses = malloc((size_t)max_batch * sizeof(float))) == NULL)
		fail = 1;
	m->probs = xalloc(m, (size_t)max_batch * m->num_classes, &fail);
	m->labels = (int32_t *)xalloc(m, (size_t)max_batch, &fail);
	if (m->nbuf)
		m->bufs = xalloc(m, m->nbuf, &fail);
	if (!fail)
		model_init_buffers(m);
out:
	free(blk_size);
	free(blk_gsize);
	if (fail) {
		snprintf(err, errlen, "out of memory allocating activations "
		    "for %s at batch %d (%.1f MiB so far): try a smaller "
		    "--batch or --checkpoint-activations", m->cfg.name,
		    max_batch, m->act_bytes / 1048576.0);
		return -1;
	}
	return 0;
}

void
model_free(struct model *m)
{
	int i;

	if (m->be) {
		for (i = 0; i < m->nacts; i++) {
			struct act *a = &m->acts[i];

			if (m->checkpoint && a->internal)
				continue;
			m->be->free(a->data);
		}
		m->be->free(m->arena);
		m->be->free(m->garena);
		m->be->free(m->gplan);
		m->be->free(m->scratch);
		m->be->free(m->xin);
		m->be->free(m->losses);
		m->be->free(m->probs);
		m->be->free(m->labels);
		m->be->free(m->bufs);
	}
	free(m->host_losses);
	free(m->gzero);
	free(m->layers);
	free(m->params);
	free(m->buffers);
	free(m->blocks);
	free(m->acts);
	free(m->bparams);
	free(m->bgrads);
	memset(m, 0, sizeof(*m));
}

/* ------------------------------------------------------------------------ */
/* forward and backward                                                     */

#define A(i) (m->acts[(i)].data)
#define G(i) ((i) >= 0 && m->acts[(i)].has_grad ? m->acts[(i)].grad : NULL)
#define P(L, f) ((L)->f >= 0 ? m->bparams[(L)->block] + \
    m->params[(L)->f].off : NULL)
#define PG(L, f) ((L)->f >= 0 ? m->bgrads[(L)->block] + \
    m->params[(L)->f].off : NULL)
#define BUF(L, f) (m->bufs + m->buffers[(L)->f].off)

static void
layer_forward(struct model *m, const struct layer *L, int B, int training,
    int update)
{
	const struct backend *be = m->be;
	float *out = A(L->out);
	const float *in = A(L->in);

	switch (L->kind) {
	case L_CONV: {
		struct conv_shape s = L->conv;

		s.B = B;
		be->conv2d_forward(&s, out, in, P(L, w), P(L, b), m->scratch);
		break;
	}
	case L_BN:
		be->batchnorm_forward(B, L->C, L->HW, out, in, P(L, w), P(L, b),
		    A(L->save), A(L->save2), BUF(L, run_mean), BUF(L, run_var),
		    0.1f, L->eps, training, update,
		    L->in2 >= 0 ? A(L->in2) : NULL, L->relu);
		break;
	case L_RELU:
		if (!L->fused)
			be->relu_forward(out, in, L->n * B);
		break;
	case L_GELU:
		be->gelu_forward(out, in, L->n * B);
		break;
	case L_ADD:
		be->add_forward(out, in, A(L->in2), L->n * B);
		break;
	case L_MAXPOOL: {
		struct pool_shape s = L->pool;

		s.B = B;
		be->maxpool_forward(&s, out, (int32_t *)A(L->save), in);
		break;
	}
	case L_AVGPOOL:
		be->avgpool_forward(B, L->C, L->HW, out, in);
		break;
	case L_LINEAR:
		be->matmul_forward(out, in, P(L, w), P(L, b), B * L->M, L->K,
		    L->N);
		break;
	case L_PATCHIFY:
		be->patchify_forward(out, in, B, L->img_c, L->img_hw,
		    L->img_hw, L->patch);
		break;
	case L_TOKENS:
		be->tokens_forward(out, in, P(L, w), P(L, b), B, L->T, L->D);
		break;
	case L_LAYERNORM:
		be->layernorm_forward(out, A(L->save), A(L->save2), in, P(L, w),
		    P(L, b), B * L->M, L->C, L->eps);
		break;
	case L_ATTENTION:
		be->attention_forward(out, A(L->save), in, B, L->T, L->D,
		    L->NH);
		break;
	case L_TOKEN0:
		be->token0_forward(out, in, B, L->T, L->D);
		break;
	}
}

static void
layer_backward(struct model *m, const struct layer *L, int B)
{
	const struct backend *be = m->be;
	const float *dout = G(L->out), *in = A(L->in);
	float *din = L->need_dinp ? G(L->in) : NULL;

	switch (L->kind) {
	case L_CONV: {
		struct conv_shape s = L->conv;

		s.B = B;
		be->conv2d_backward(&s, din, PG(L, w), PG(L, b), dout, in,
		    P(L, w), m->scratch);
		break;
	}
	case L_BN:
		be->batchnorm_backward(B, L->C, L->HW, din, PG(L, w), PG(L, b),
		    dout, in, P(L, w), A(L->save), A(L->save2), G(L->in2),
		    A(L->out), L->relu);
		break;
	case L_RELU:
		if (din && !L->fused)
			be->relu_backward(din, dout, A(L->out), L->n * B);
		break;
	case L_GELU:
		if (din)
			be->gelu_backward(din, dout, in, L->n * B);
		break;
	case L_ADD:
		be->add_backward(din, G(L->in2), dout, L->n * B);
		break;
	case L_MAXPOOL: {
		struct pool_shape s = L->pool;

		s.B = B;
		if (din)
			be->maxpool_backward(&s, din, dout,
			    (const int32_t *)A(L->save));
		break;
	}
	case L_AVGPOOL:
		if (din)
			be->avgpool_backward(B, L->C, L->HW, din, dout);
		break;
	case L_LINEAR:
		be->matmul_backward(din, PG(L, w), PG(L, b), dout, in, P(L, w),
		    B * L->M, L->K, L->N);
		break;
	case L_PATCHIFY:
		if (din)
			be->patchify_backward(din, dout, B, L->img_c,
			    L->img_hw, L->img_hw, L->patch);
		break;
	case L_TOKENS:
		be->tokens_backward(din, PG(L, w), PG(L, b), dout, B, L->T,
		    L->D);
		break;
	case L_LAYERNORM:
		be->layernorm_backward(din, PG(L, w), PG(L, b), dout, in,
		    P(L, w), A(L->save), A(L->save2), B * L->M, L->C);
		break;
	case L_ATTENTION:
		if (din)
			be->attention_backward(din, m->scratch, dout, in,
			    A(L->save), B, L->T, L->D, L->NH);
		break;
	case L_TOKEN0:
		if (din)
			be->token0_backward(din, dout, B, L->T, L->D);
		break;
	}
}

const char *
layer_kind_name(enum layer_kind k)
{
	static const char *const names[] = {
		"conv", "batchnorm", "relu", "maxpool", "avgpool", "linear",
		"add", "patchify", "tokens", "layernorm", "attention", "gelu",
		"token0"
	};

	return (unsigned)k < sizeof(names) / sizeof(names[0]) ? names[k] : "?";
}

static double
prof_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
block_forward(struct model *m, int b, int B, int training, int update)
{
	const struct block *bk = &m->blocks[b];
	int i;

	for (i = bk->first_layer; i < bk->first_layer + bk->nlayers; i++) {
		double t0 = m->profile ? prof_now() : 0;

		layer_forward(m, &m->layers[i], B, training, update);
		if (m->profile) {
			m->be->sync();
			m->prof[0][m->layers[i].kind] += prof_now() - t0;
		}
	}
}

float
model_forward(struct model *m, int B, const float *x, const int32_t *labels,
    float smoothing, int training, const struct step_hooks *h)
{
	const struct backend *be = m->be;
	double sum = 0;
	int b, i;

	/* always: the bf16 emulation rounds in place when x is the input */
	be->input_from_f32(A(m->input), x, (size_t)B *
	    m->acts[m->input].per_sample);
	if (labels != m->labels)
		be->copy(m->labels, labels, (size_t)B * sizeof(int32_t));
	for (b = 0; b < m->nblocks; b++) {
		if (h && h->pre_forward)
			h->pre_forward(h->ctx, b);
		block_forward(m, b, B, training, 1);
		if (h && h->post_forward)
			h->post_forward(h->ctx, b);
	}
	be->xent_forward(m->losses, m->probs, A(m->logits), m->labels, B,
	    m->num_classes, smoothing);
	be->to_host(m->host_losses, m->losses, (size_t)B * sizeof(float));
	for (i = 0; i < B; i++)
		sum += m->host_losses[i];
	return B > 0 ? (float)(sum / B) : 0;
}

/*
 * Zero the gradients in m->gplan that become live at layer i (m->nlayers:
 * the loss; -1: all that are left), from m->gzero[z] on. Returns the next z.
 */
static int
zero_live(struct model *m, int z, int i, int B)
{
	for (; z < m->ngzero && m->acts[m->gzero[z]].gbegin >= i; z++) {
		struct act *a = &m->acts[m->gzero[z]];

		m->be->zero(a->grad, model_act_bytes(m, a, B));
	}
	return z;
}

void
model_backward(struct model *m, int B, float smoothing, float scale,
    const struct step_hooks *h)
{
	const struct backend *be = m->be;
	int b, i, z;

	/* without the plan no gradient shares memory: zero them all now */
	z = zero_live(m, 0, m->no_grad_plan ? -1 : m->nlayers, B);
	be->xent_backward(G(m->logits), m->probs, m->labels, B, m->num_classes,
	    smoothing, B > 0 ? scale / B : 0);
	for (b = m->nblocks - 1; b >= 0; b--) {
		const struct block *bk = &m->blocks[b];

		if (h && h->pre_backward)
			h->pre_backward(h->ctx, b);
		if (m->checkpoint) {
			/* recompute this block's internals; batch norm must
			 * not move its running statistics a second time */
			block_forward(m, b, B, 1, 0);
			for (i = 0; i < m->nacts; i++) {
				struct act *a = &m->acts[i];

				if (a->block == b && a->internal && a->has_grad)
					be->zero(a->grad,
					    model_act_bytes(m, a, B));
			}
		}
		for (i = bk->first_layer + bk->nlayers - 1; i >= bk->first_layer; i--) {
			double t0;

			z = zero_live(m, z, i, B);
			t0 = m->profile ? prof_now() : 0;
			layer_backward(m, &m->layers[i], B);
			if (m->profile) {
				be->sync();
				m->prof[1][m->layers[i].kind] += prof_now() - t0;
			}
		}
		if (h && h->post_backward)
			h->post_backward(h->ctx, b);
	}
}
