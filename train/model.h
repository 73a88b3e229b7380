/*
 * model.h - a model is a list of layers built from a config (ResNet, ViT),
 * grouped into blocks. A block is the unit FSDP shards and activation
 * checkpointing recomputes. Parameters live in one flat vector, block after
 * block, each parameter at a fixed offset inside its block's region; where
 * a block's region sits in memory at any moment (the whole vector for
 * single/DDP, a gathered buffer for FSDP) is up to the strategy, through
 * model->bparams[b] and model->bgrads[b].
 *
 * The model code only calls the backend table (backend.h), so the same
 * models run on the CPU and on CUDA.
 */
#ifndef SK_TRAIN_MODEL_H
#define SK_TRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

enum model_family { MODEL_RESNET, MODEL_VIT };

struct model_config {
	char name[32];			/* "resnet50", "vit-l16", ... */
	enum model_family family;
	int image_size;			/* input is (B,3,S,S) */
	int num_classes;
	/* ResNet */
	int depth;			/* 18, 34, 50, 101, 152 */
	float width;			/* multiplier of the 64-channel base */
	/* ViT */
	int patch;
	int dim;			/* embedding width D */
	int layers;			/* blocks */
	int heads;
	int mlp;			/* hidden width of the MLP */
};

/*
 * Fill cfg for a model name: resnet18|34|50|101|152, vit-ti|s|b|l|h|g|G
 * followed by the patch size (vit-l16, vit-h14, vit-ti4). Returns 0, or -1
 * with a message in err naming the known models.
 */
int model_config_from_name(struct model_config *cfg, const char *name,
    int image_size, int num_classes, char *err, size_t errlen);

enum layer_kind {
	L_CONV, L_BN, L_RELU, L_MAXPOOL, L_AVGPOOL, L_LINEAR, L_ADD,
	L_PATCHIFY, L_TOKENS, L_LAYERNORM, L_ATTENTION, L_GELU, L_TOKEN0
};

/* A parameter tensor, named as PyTorch's state_dict names it. */
struct param {
	char name[64];
	int block;
	size_t off;			/* floats into its block's region */
	size_t numel;
	int ndim, shape[4];
	int decay;			/* weight decay applies (not norms, biases,
					 * class token or position embedding) */
	int init;			/* enum param_init */
	float init_scale;		/* std or bound, by init */
};

enum param_init {
	INIT_ZERO, INIT_ONE,
	INIT_NORMAL,			/* N(0, scale^2) */
	INIT_TRUNC_NORMAL,		/* N(0, scale^2) cut at +-2 (timm) */
	INIT_UNIFORM			/* U(-scale, scale) */
};

/* A non-trained tensor (batch norm running statistics). */
struct buffer {
	char name[64];
	size_t off;			/* floats into model->bufs */
	size_t numel;
};

struct block {
	char name[48];			/* "stem", "layer2.1", "blocks.7", "head" */
	size_t off, numel;		/* region in the flat parameter vector */
	int first_layer, nlayers;
	int first_param, nparams;
	int out;			/* the activation the block hands on */
};

/*
 * An activation: per-sample size; data and grad are sized for max_batch.
 * Saved state that backward needs (batch norm mean/rstd, max-pool indices,
 * attention probabilities, layer norm statistics) is an activation too, so
 * activation checkpointing can put it in the shared arena.
 *
 * A gradient is live during backward from the layer gbegin, the first
 * backward step that may write it (the last layer reading the activation,
 * or m->nlayers for the logits, which the loss writes), down to the layer
 * gend that produces the activation, the last step that reads it. Two
 * gradients whose [gend, gbegin] intervals are disjoint may share memory
 * (model_plan_grads).
 */
struct act {
	size_t per_sample;		/* floats per sample, or per_batch below */
	size_t fixed;			/* floats independent of the batch */
	int block;			/* block of the layer that writes it */
	int internal;			/* only read inside its own block */
	int has_grad;
	int f32;			/* saved statistics or indices: 4-byte
					 * elements in every precision */
	int gbegin, gend;		/* layers; set by model_finish */
	size_t goff;			/* floats into model->gplan */
	float *data, *grad;
};

struct layer {
	enum layer_kind kind;
	int block;
	int in, in2, out;		/* activations; in2 for L_ADD, -1 if unused */
	int save, save2;		/* saved-state activations, -1 if unused */
	int w, b, extra;		/* params (index into model->params), -1 */
	int run_mean, run_var;		/* buffers (L_BN), -1 */
	int need_dinp;			/* input gradient wanted */
	int relu;			/* L_BN: out = relu(bn(in) + in2), in2
					 * the residual or -1 (mb_bn_relu) */
	int fused;			/* L_RELU: done by the layer writing its
					 * input; in == out, no work */
	/* per-sample shapes; the batch is filled in at run time */
	struct conv_shape conv;		/* L_CONV */
	struct pool_shape pool;		/* L_MAXPOOL */
	int C, HW;			/* L_BN, L_AVGPOOL: channels, H*W */
	int M, K, N;			/* L_LINEAR: rows per sample, in, out */
	int T, D, NH;			/* L_TOKENS/L_ATTENTION/L_TOKEN0/L_LAYERNORM */
	int img_c, img_hw, patch;	/* L_PATCHIFY */
	size_t n;			/* elements per sample (elementwise) */
	float eps;			/* norms */
};

/* Called around each block so a strategy can gather, free and reduce. */
struct step_hooks {
	void *ctx;
	void (*pre_forward)(void *ctx, int block);
	void (*post_forward)(void *ctx, int block);
	void (*pre_backward)(void *ctx, int block);
	void (*post_backward)(void *ctx, int block);	/* block's grads done */
};

struct model {
	struct model_config cfg;
	const struct backend *be;

	struct layer *layers;
	int nlayers;
	struct param *params;
	int nparams;
	struct buffer *buffers;
	int nbuffers;
	size_t nbuf;			/* floats of all buffers */
	struct block *blocks;
	int nblocks;
	size_t nflat;			/* floats of all parameters */
	struct act *acts;
	int nacts;
	int input, logits;		/* activations */
	int num_classes;

	/* set between model_build (which clears it) and model_alloc: each
	 * activation gradient outside the checkpoint arena gets memory of
	 * its own, zeroed at the start of backward (the tests' baseline) */
	int no_grad_plan;

	/* set by model_alloc */
	int max_batch;
	int checkpoint;			/* activation checkpointing on */
	float *bufs;			/* buffers, always resident */
	float *arena, *garena;		/* shared internal activations (checkpoint) */
	size_t arena_floats;
	float *gplan;			/* the activation gradients not in garena,
					 * placed by model_plan_grads */
	size_t gplan_floats;
	int *gzero;			/* those gradients by gbegin, descending:
					 * the order backward zeroes them in */
	int ngzero;
	float *scratch;			/* conv / attention scratch */
	size_t scratch_floats;
	float *xin;			/* (B,3,S,S) fp32 on the device, when the
					 * input activation is not fp32 (bf16):
					 * where a batch lands before
					 * input_from_f32 rounds it; else NULL */
	float *losses, *probs;		/* (B), (B,K) */
	float *host_losses;		/* (B) on the host, to average */
	int32_t *labels;		/* (B) on the device */
	size_t act_bytes;		/* activation memory allocated */

	/* where each block's parameters and gradients are now (strategy) */
	float **bparams, **bgrads;

	/* seconds per layer kind, forward and backward, when profile is set
	 * (shardtrain --profile) */
	int profile;
	double prof[2][L_TOKEN0 + 1];
};

/* The layer kinds' names, for the profile: "conv", "bn", ... */
const char *layer_kind_name(enum layer_kind k);

/* Build the layer list and parameter table (no tensor memory). */
int model_build(struct model *m, const struct model_config *cfg,
    char *err, size_t errlen);
/* Allocate activations for batches up to max_batch on backend be. With
 * checkpoint, internal activations of blocks share one arena and are
 * recomputed in backward. Returns 0 or -1 (out of memory, message in err). */
int model_alloc(struct model *m, const struct backend *be, int max_batch,
    int checkpoint, char *err, size_t errlen);
void model_free(struct model *m);

/* Bytes of activation a's data (and of its gradient) at batch B, in the
 * backend's precision. */
size_t model_act_bytes(const struct model *m, const struct act *a, int B);
/*
 * Place the activation gradients that model_alloc puts in m->gplan (all of
 * them, or those not internal when m->checkpoint is set) for batch B and
 * act_elt-byte elements: gradients whose live intervals are disjoint share
 * memory, first fit, largest first, unless m->no_grad_plan. Sets each
 * one's goff and m->gzero, and *floats to the arena's size. Needs no
 * backend, so "shardtrain info" can size it. Returns 0, or -1 out of host
 * memory.
 */
int model_plan_grads(struct model *m, int B, size_t act_elt, size_t *floats);
/* Where the caller puts a batch of fp32 images on the device before
 * model_forward: m->xin, or the input activation itself when it is fp32. */
float *model_input_f32(struct model *m);

/* Parameter count and forward multiply-adds per image. */
uint64_t model_param_count(const struct model *m);
uint64_t model_forward_macs(const struct model *m);

/*
 * Initialise block b's parameters into host memory dst (block.numel floats)
 * the way torchvision/timm do, from seed. Every rank gets the same values.
 * Buffers (running statistics) are set by model_init_buffers.
 */
void model_init_block(const struct model *m, int b, uint64_t seed,
    float *dst);
void model_init_buffers(struct model *m);

/* Index of a parameter or buffer by name, or -1. */
int model_find_param(const struct model *m, const char *name);
int model_find_buffer(const struct model *m, const char *name);

/*
 * One training forward on B samples: x (B,3,S,S) and labels (B) are device
 * pointers (x is copied into the input activation when it differs). Runs
 * hooks around each block. Returns the mean loss (label smoothing eps), and
 * per-sample losses stay in m->losses.
 */
float model_forward(struct model *m, int B, const float *x,
    const int32_t *labels, float smoothing, int training,
    const struct step_hooks *h);
/*
 * Backward for the last forward: seeds d(loss) with scale/B per sample
 * (scale 1 for the plain mean), runs the layers in reverse, recomputing
 * checkpointed blocks, and accumulates into m->bgrads[b] (the caller or
 * strategy zeroes those). Each activation gradient is zeroed just before
 * the step where it becomes live, since its memory may have held another
 * one's; after backward, an activation's grad holds no meaning. Hooks run
 * around each block, last block first.
 */
void model_backward(struct model *m, int B, float smoothing, float scale,
    const struct step_hooks *h);

/* ------------------------------------------------------------------------ */
/* building blocks for resnet.c and vit.c: each appends to the current block
 * and returns the new output activation (or -1 when out of memory). Names
 * are PyTorch's: prefix "layer1.0.conv1" gives "layer1.0.conv1.weight".   */

int model_begin_block(struct model *m, const char *name);
int model_input(struct model *m, int C, int S);	/* the image (B,C,S,S) */
/* (C,H,W) -> (K,P,Q); *P receives the output side */
int mb_conv(struct model *m, const char *prefix, int in, int C, int H,
    int W, int K, int R, int stride, int pad, int bias, int *P);
int mb_bn(struct model *m, const char *prefix, int in, int C, int HW);
/*
 * bn -> add res (or -1) -> relu as one layer, which saves two passes over
 * the activation each way and the memory of the two in between. A fused
 * L_RELU follows it, so the k-th L_RELU is still PyTorch's k-th ReLU call
 * (its input, the result, is > 0 exactly where the ReLU's input was).
 */
int mb_bn_relu(struct model *m, const char *prefix, int in, int res, int C,
    int HW);
int mb_relu(struct model *m, int in, size_t n);
int mb_maxpool(struct model *m, int in, int C, int H, int k, int stride,
    int pad, int *P);
int mb_avgpool(struct model *m, int in, int C, int HW);
/* (M,K) -> (M,N) per sample; weight shape given for the state_dict */
int mb_linear(struct model *m, const char *prefix, int in, int M, int K,
    int N, int bias, int wndim, const int *wshape, int winit, float wscale,
    int binit, float bscale);
int mb_add(struct model *m, int a, int b, size_t n);
int mb_gelu(struct model *m, int in, size_t n);
int mb_patchify(struct model *m, int in, int C, int S, int p);
int mb_tokens(struct model *m, int in, int T, int D);
int mb_layernorm(struct model *m, const char *prefix, int in, int M, int C,
    float eps);
int mb_attention(struct model *m, int qkv, int T, int C, int NH);
int mb_token0(struct model *m, int in, int T, int D);
/* Finish: mark internal activations, set the logits. */
int model_finish(struct model *m, int logits, char *err, size_t errlen);

int resnet_build(struct model *m, char *err, size_t errlen);
int vit_build(struct model *m, char *err, size_t errlen);

#endif /* SK_TRAIN_MODEL_H */
