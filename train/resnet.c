/*
 * resnet.c - ResNet-18/34/50/101/152 as torchvision builds them: a 7x7
 * stride-2 stem, max pool, four stages of basic blocks (18, 34) or
 * bottlenecks with the stride on the 3x3 (ResNet v1.5: 50, 101, 152),
 * global average pool and a fully connected head. The width multiplier
 * scales every stage's channels, for small test variants.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>

#include "model.h"

struct resnet_spec {
	int depth, bottleneck, blocks[4];
};

static const struct resnet_spec specs[] = {
	{ 18, 0, { 2, 2, 2, 2 } },
	{ 34, 0, { 3, 4, 6, 3 } },
	{ 50, 1, { 3, 4, 6, 3 } },
	{ 101, 1, { 3, 4, 23, 3 } },
	{ 152, 1, { 3, 8, 36, 3 } },
};

/*
 * conv, then batch norm: "layer1.0" + "conv1"/"bn1". With relu set the
 * norm adds res (an activation, or -1) and applies the ReLU in the same
 * layer (mb_bn_relu).
 */
static int
conv_bn(struct model *m, const char *blk, const char *conv, const char *bn,
    int in, int C, int *H, int K, int R, int stride, int pad, int res,
    int relu)
{
	char name[64];
	int P, x;

	snprintf(name, sizeof(name), "%s%s%s", blk, *blk ? "." : "", conv);
	x = mb_conv(m, name, in, C, *H, *H, K, R, stride, pad, 0, &P);
	if (x < 0)
		return x;
	*H = P;
	snprintf(name, sizeof(name), "%s%s%s", blk, *blk ? "." : "", bn);
	return relu ? mb_bn_relu(m, name, x, res, K, P * P) :
	    mb_bn(m, name, x, K, P * P);
}

/*
 * One residual block: in (C,H,H) -> out (planes*expansion, H/stride, ...).
 * relu(bn_last(x) + identity) is one layer: the last norm of the main path
 * adds the block's input; with a downsample branch, which runs after the
 * main path as in torchvision, the branch's norm adds the main path.
 */
static int
residual(struct model *m, const char *blk, int bottleneck, int in, int C,
    int *H, int planes, int stride)
{
	int expansion = bottleneck ? 4 : 1, out = planes * expansion;
	int h = *H, hid = h, x, down = stride != 1 || C != out;
	int res = down ? -1 : in;

	if (bottleneck) {
		x = conv_bn(m, blk, "conv1", "bn1", in, C, &h, planes, 1, 1, 0,
		    -1, 1);
		x = x < 0 ? x : conv_bn(m, blk, "conv2", "bn2", x, planes, &h,
		    planes, 3, stride, 1, -1, 1);
		x = x < 0 ? x : conv_bn(m, blk, "conv3", "bn3", x, planes, &h,
		    out, 1, 1, 0, res, !down);
	} else {
		x = conv_bn(m, blk, "conv1", "bn1", in, C, &h, planes, 3,
		    stride, 1, -1, 1);
		x = x < 0 ? x : conv_bn(m, blk, "conv2", "bn2", x, planes, &h,
		    planes, 3, 1, 1, res, !down);
	}
	if (x >= 0 && down) {
		char dn[64];

		snprintf(dn, sizeof(dn), "%s.downsample", blk);
		x = conv_bn(m, dn, "0", "1", in, C, &hid, out, 1, stride, 0, x,
		    1);
	}
	*H = h;
	return x;
}

int
resnet_build(struct model *m, char *err, size_t errlen)
{
	const struct model_config *cfg = &m->cfg;
	const struct resnet_spec *sp = NULL;
	int H = cfg->image_size, C, base, x, i, j;
	size_t k;

	for (k = 0; k < sizeof(specs) / sizeof(specs[0]); k++)
		if (specs[k].depth == cfg->depth)
			sp = &specs[k];
	if (sp == NULL) {
		snprintf(err, errlen, "resnet depth %d: use 18, 34, 50, 101 "
		    "or 152", cfg->depth);
		return -1;
	}
	base = (int)lroundf(64 * cfg->width);
	if (!(cfg->width > 0) || base < 1) {
		snprintf(err, errlen, "--width %g leaves no channels",
		    (double)cfg->width);
		return -1;
	}

	model_begin_block(m, "stem");
	x = model_input(m, 3, H);
	x = x < 0 ? x : conv_bn(m, "", "conv1", "bn1", x, 3, &H, base, 7, 2, 3,
	    -1, 1);
	if (x >= 0) {
		int P;

		x = mb_maxpool(m, x, base, H, 3, 2, 1, &P);
		H = P;
	}
	C = base;
	for (i = 0; i < 4 && x >= 0; i++) {
		int planes = base << i;

		for (j = 0; j < sp->blocks[i] && x >= 0; j++) {
			char blk[32];

			snprintf(blk, sizeof(blk), "layer%d.%d", i + 1, j);
			model_begin_block(m, blk);
			x = residual(m, blk, sp->bottleneck, x, C, &H, planes,
			    i > 0 && j == 0 ? 2 : 1);
			C = planes * (sp->bottleneck ? 4 : 1);
		}
	}
	if (x >= 0) {
		/* nn.Linear's default init: U(+-1/sqrt(fan_in)) */
		float bound = 1.0f / sqrtf((float)C);

		model_begin_block(m, "head");
		x = mb_avgpool(m, x, C, H * H);
		x = x < 0 ? x : mb_linear(m, "fc", x, 1, C, cfg->num_classes,
		    1, 0, NULL, INIT_UNIFORM, bound, INIT_UNIFORM, bound);
	}
	if (x == -2) {
		snprintf(err, errlen, "--image-size %d is too small for %s: "
		    "a feature map shrinks below 1x1", cfg->image_size,
		    cfg->name);
		return -1;
	}
	return model_finish(m, x, err, errlen);
}
