/*
 * optim.h - SGD (momentum, nesterov) and AdamW over the strategy's local
 * slices, weight decay only where a parameter asks for it, a warmup +
 * cosine schedule and global-norm gradient clipping.
 */
#ifndef SK_TRAIN_OPTIM_H
#define SK_TRAIN_OPTIM_H

#include <stddef.h>

#include "comm.h"
#include "model.h"
#include "strategy.h"

enum optim_kind { OPTIM_SGD, OPTIM_ADAMW };

struct optim_config {
	enum optim_kind kind;
	float lr;			/* peak learning rate */
	float momentum;			/* SGD */
	int nesterov;			/* SGD */
	float beta1, beta2, eps;	/* AdamW */
	float weight_decay;
	float clip;			/* max global grad norm, 0 = off */
	long warmup;			/* steps of linear warmup */
	long total;			/* steps of the whole run (cosine) */
	float min_lr;			/* cosine floor */
};

struct optim;

/*
 * v must stay valid while the optimizer lives (strategy_view's does). The
 * state vectors hold the segments one after another, nlocal floats each.
 * Weight decay applies where a parameter's decay flag is set; floats no
 * parameter covers are not decayed. In a sharded view a segment is one
 * block's shard: floats past the end of the block holding its first float
 * are padding (zero, never decayed), even where their flat offsets reach
 * into the next block.
 */
struct optim *optim_open(const struct optim_config *cfg,
    const struct model *m, const struct strategy_view *v,
    const struct backend *be, char *err, size_t errlen);
void optim_close(struct optim *o);
/*
 * Learning rate at step t (0-based): lr (t+1)/warmup for t < warmup, then
 * min_lr + (lr - min_lr)(1 + cos(pi (t - warmup)/(total - warmup)))/2 up
 * to total and min_lr from there on. With total <= warmup it stays at lr
 * after the warmup.
 */
float optim_lr(const struct optim_config *cfg, long t);
/*
 * One update at step t with the gradients now in the view: clip (the
 * global norm is summed over ranks when the view is sharded and c is not
 * NULL; NULL means one rank), then update with optim_lr(t). Clipping is
 * clip_grad_norm_'s: gradients are scaled by clip/(norm + 1e-6) when that
 * is below 1. AdamW's bias correction counts optim_steps() + 1, and every
 * call adds one. Returns the gradient norm before clipping.
 */
double optim_step(struct optim *o, struct comm *c, long t);
/* State (momentum, or AdamW's m and v) for checkpoints: nstate vectors of
 * nlocal floats on the device. */
int optim_nstate(const struct optim *o);
float *optim_state(struct optim *o, int i);
long optim_steps(const struct optim *o);
void optim_set_steps(struct optim *o, long t);

#endif /* SK_TRAIN_OPTIM_H */
