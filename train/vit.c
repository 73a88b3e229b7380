/*
 * vit.c - the Vision Transformer as timm defines it: a patch embedding
 * (a conv with kernel = stride = patch), a class token, a learned position
 * embedding over the patches and the class token, pre-norm blocks
 * (x + attn(norm1(x)), then x + mlp(norm2(x)) with an exact-erf GELU),
 * a final LayerNorm and a linear head on the class token.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>

#include "model.h"

#define LN_EPS 1e-6f		/* timm: partial(nn.LayerNorm, eps=1e-6) */

static int
linear(struct model *m, const char *blk, const char *name, int in, int T,
    int K, int N)
{
	char prefix[64];

	/* timm init_weights: trunc_normal_(std=.02) weights, zero biases */
	snprintf(prefix, sizeof(prefix), "%s.%s", blk, name);
	return mb_linear(m, prefix, in, T, K, N, 1, 0, NULL, INIT_TRUNC_NORMAL,
	    0.02f, INIT_ZERO, 0);
}

static int
norm(struct model *m, const char *blk, const char *name, int in, int T, int D)
{
	char prefix[64];

	snprintf(prefix, sizeof(prefix), "%s.%s", blk, name);
	return mb_layernorm(m, prefix, in, T, D, LN_EPS);
}

/* x (T,D) -> x + attn(norm1(x)) -> + mlp(norm2(.)) */
static int
vit_block(struct model *m, const char *blk, int x, int T, int D, int NH,
    int hidden)
{
	int h, x1;

	h = norm(m, blk, "norm1", x, T, D);
	h = h < 0 ? h : linear(m, blk, "attn.qkv", h, T, D, 3 * D);
	h = h < 0 ? h : mb_attention(m, h, T, D, NH);
	h = h < 0 ? h : linear(m, blk, "attn.proj", h, T, D, D);
	x1 = h < 0 ? h : mb_add(m, x, h, (size_t)T * D);
	h = x1 < 0 ? x1 : norm(m, blk, "norm2", x1, T, D);
	h = h < 0 ? h : linear(m, blk, "mlp.fc1", h, T, D, hidden);
	h = h < 0 ? h : mb_gelu(m, h, (size_t)T * hidden);
	h = h < 0 ? h : linear(m, blk, "mlp.fc2", h, T, hidden, D);
	return h < 0 ? h : mb_add(m, x1, h, (size_t)T * D);
}

int
vit_build(struct model *m, char *err, size_t errlen)
{
	const struct model_config *cfg = &m->cfg;
	int S = cfg->image_size, p = cfg->patch, D = cfg->dim, x, i, T;

	if (p < 1 || S % p != 0) {
		snprintf(err, errlen, "--image-size %d is not a multiple of "
		    "%s's patch size %d", S, cfg->name, p);
		return -1;
	}
	if (D < 1 || cfg->heads < 1 || D % cfg->heads != 0) {
		snprintf(err, errlen, "%s: width %d does not split into %d "
		    "heads", cfg->name, D, cfg->heads);
		return -1;
	}
	T = (S / p) * (S / p);

	model_begin_block(m, "embed");
	x = model_input(m, 3, S);
	x = x < 0 ? x : mb_patchify(m, x, 3, S, p);
	if (x >= 0) {
		/* a Conv2d(3, D, p, stride=p): PyTorch's default init,
		 * kaiming_uniform(a=sqrt 5) = U(+-1/sqrt(fan_in)) */
		int shape[4] = { D, 3, p, p };
		float bound = 1.0f / sqrtf((float)(3 * p * p));

		x = mb_linear(m, "patch_embed.proj", x, T, 3 * p * p, D, 1, 4,
		    shape, INIT_UNIFORM, bound, INIT_UNIFORM, bound);
	}
	x = x < 0 ? x : mb_tokens(m, x, T, D);
	for (i = 0; i < cfg->layers && x >= 0; i++) {
		char blk[32];

		snprintf(blk, sizeof(blk), "blocks.%d", i);
		model_begin_block(m, blk);
		x = vit_block(m, blk, x, T + 1, D, cfg->heads, cfg->mlp);
	}
	if (x >= 0) {
		model_begin_block(m, "head");
		x = mb_layernorm(m, "norm", x, T + 1, D, LN_EPS);
		x = x < 0 ? x : mb_token0(m, x, T + 1, D);
		/* timm zero-inits the head when head_init_scale is 0; the
		 * default init is trunc_normal(.02) like every Linear */
		x = x < 0 ? x : mb_linear(m, "head", x, 1, D, cfg->num_classes,
		    1, 0, NULL, INIT_TRUNC_NORMAL, 0.02f, INIT_ZERO, 0);
	}
	return model_finish(m, x, err, errlen);
}
