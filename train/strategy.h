/*
 * strategy.h - where parameters, gradients and optimizer state live across
 * ranks, and when they move: single (one rank holds everything), DDP (every
 * rank holds everything; gradients are averaged in buckets during
 * backward) and FSDP (ZeRO-3: each block's region is a flat shard of 1/N
 * per rank, gathered before use and freed after, gradients reduce-scattered).
 *
 * The optimizer sees the rank's local slices through strategy_view(): it
 * never knows which strategy runs.
 */
#ifndef SK_TRAIN_STRATEGY_H
#define SK_TRAIN_STRATEGY_H

#include <stddef.h>

#include "comm.h"
#include "model.h"

enum strategy_kind { STRATEGY_SINGLE, STRATEGY_DDP, STRATEGY_FSDP };

struct strategy;

/* A local slice of the flat parameter vector this rank updates. */
struct view_seg {
	size_t flat_off;		/* offset in the flat vector (floats) */
	size_t n;
	float *p, *g;			/* device pointers */
};

struct strategy_view {
	struct view_seg *segs;
	int nsegs;
	size_t nlocal;			/* floats over all segments */
	int sharded;			/* slices differ across ranks: reductions
					 * over them (gradient norm) need comm */
};

/*
 * Open a strategy over a built and allocated model. Initialises the
 * parameters (model_init_block with seed) into their home. bucket_bytes:
 * DDP bucket size (0 = 25 MiB). Returns NULL with a message in err.
 */
struct strategy *strategy_open(enum strategy_kind kind, struct model *m,
    struct comm *c, uint64_t seed, size_t bucket_bytes, char *err,
    size_t errlen);
void strategy_close(struct strategy *s);

/* Hooks to pass to model_forward/model_backward. */
const struct step_hooks *strategy_hooks(struct strategy *s);
/* Before a step: zero the gradients. */
void strategy_begin_step(struct strategy *s);
/* After model_backward: finish outstanding communication. Returns the
 * seconds spent waiting (exposed communication) during this step's forward
 * and backward. */
double strategy_end_backward(struct strategy *s);

/* Seconds waited on communication so far in this step (forward's
 * gathers, when read between forward and backward). */
double strategy_comm_so_far(struct strategy *s);

const struct strategy_view *strategy_view(struct strategy *s);

/* Copy the whole flat vector (nflat floats) to host memory on every rank,
 * gathering shards; or set it from host memory (every rank passes the
 * same values). */
void strategy_get_params(struct strategy *s, float *host);
void strategy_set_params(struct strategy *s, const float *host);
/* Same for a per-parameter state vector laid out like the view (the
 * optimizer's moments): local (nlocal) <-> full (nflat) host. */
void strategy_gather_local(struct strategy *s, const float *local_dev,
    float *full_host);
void strategy_scatter_local(struct strategy *s, const float *full_host,
    float *local_dev);

/* Peak bytes of parameters + gradients this rank held at once: the
 * resident vectors or shards plus FSDP's gathered blocks. */
size_t strategy_peak_param_bytes(const struct strategy *s);

const char *strategy_name(enum strategy_kind k);

#endif /* SK_TRAIN_STRATEGY_H */
