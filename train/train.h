/*
 * train.h - one training run (train/run.c): its configuration, the timing
 * of every step and what the run found, which report.c turns into the
 * verdict, the JSON file and the comparison table.
 */
#ifndef SK_TRAIN_TRAIN_H
#define SK_TRAIN_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "shardkit.h"
#include "cli.h"
#include "model.h"
#include "optim.h"
#include "strategy.h"

struct train_config {
	struct model_config model;
	char backend[16];		/* "cpu" or "cuda" */
	char precision[8];		/* "fp32", "bf16" (AMP-O2; cpu
					 * emulates it), "tf32" (cuda only) */
	int deterministic;		/* cuda: deterministic engines only */
	enum strategy_kind strategy;
	int batch;			/* global batch, divided across ranks;
					 * 0 with batch_auto until train_run
					 * finds it */
	int batch_auto;			/* --batch auto */
	double lr_per_256;		/* > 0: lr = this x batch / 256, set
					 * once batch_auto has found batch */
	char data[4096];		/* URL pattern, manifest or "synthetic" */
	const char *classes_from;	/* where the class count came from,
					 * for the start line */
	int epochs;			/* when steps == 0 */
	long steps;			/* 0 = whole epochs */
	struct sk_loader_config loader;	/* rank, world, batch set by the run */
	struct optim_config optim;
	float label_smoothing;
	int checkpoint_activations;
	int threads;			/* compute threads; 0: the default */
	double throttle;		/* images/s cap on the data, 0 = none */
	double price_per_hour;		/* USD for the whole job, 0 = none */
	char checkpoint_dir[4096];	/* "" = no checkpoints */
	long checkpoint_every;		/* steps; 0 = at the end only */
	int resume;			/* load the newest checkpoint in the dir */
	long ceiling_steps;		/* steps for each ceiling; 0 = skip */
	uint64_t seed;
	char json[4096];		/* "" = none */
	char dump_params[4096];		/* write the final flat params, "" = none */
	char losses[4096];		/* write every step's loss, "" = none */
	int log_every;			/* steps between progress lines */
	int quiet;			/* no progress lines at all */
	int profile;			/* time every layer kind; print a table */
};

/* Seconds per stage, summed over steps. */
struct step_times {
	double wait;			/* blocked in sk_loader_next */
	double h2d;			/* host to device copy */
	double fwd, bwd;
	double comm;			/* exposed communication */
	double optim;
	double step;			/* the whole step, wall clock */
};

struct epoch_result {
	int epoch;
	long steps;
	uint64_t images;		/* global */
	double seconds;
	double images_per_s;
	double wait_share;		/* wait / step */
	double cost;			/* USD, or < 0 without a price */
	double loss;			/* mean over the epoch's steps */
};

enum verdict { VERDICT_INPUT, VERDICT_COMPUTE, VERDICT_BALANCED };

struct run_result {
	int world;
	long steps;
	uint64_t images;		/* global */
	double seconds;			/* training steps only */
	double images_per_s;
	double wait_share;
	struct step_times t;		/* rank 0 */
	struct epoch_result *epochs;
	int nepochs;
	double first_loss, last_loss;
	double loader_ips;		/* loader alone, same config; < 0 unknown */
	double compute_ips;		/* synthetic data; < 0 unknown */
	double gemm_share;		/* BLAS time / step time, < 0 unknown */
	uint64_t params;
	double gflops_per_image;	/* forward, 2 * MACs / 1e9 */
	uint64_t peak_param_bytes;	/* params + grads + optimizer, the
					 * largest rank's */
	uint64_t peak_rss_bytes;	/* the largest rank's */
	uint64_t peak_gpu_bytes;	/* the largest rank's, 0 on the CPU */
	uint64_t *peak_gpu_by_rank;	/* (world) on a GPU, else NULL */
	char gpu[128];			/* rank 0's device name, or "" */
	double cost_per_epoch;		/* < 0 without a price */
	uint64_t skipped;		/* samples the loader skipped */
	uint64_t skipped_by[SK_SKIP_NREASONS];	/* by reason, all ranks */
	uint64_t samples;		/* the loader delivered, all ranks */
	/* http(s) sources: the fetch engine's counters over the run, all
	 * ranks added up but wait_seconds (this rank's: the time the
	 * loader's I/O threads were blocked on the network) */
	struct sk_fetch_stats remote;
	enum verdict verdict;
	char bound_stage[32];		/* the loader's slowest stage, or "" */
	char reason[256];		/* the evidence, one line */
	char hint[256];			/* what to try, one line */
};

/* Run training as configured. Returns 0, 1 after a failure, or 2 for a
 * configuration error (a batch that does not divide across ranks, ranks
 * started with different options); the message is printed
 * ("shardtrain: ..."). The result is filled on every rank. With
 * batch_auto, the batch found (and a default lr from it) is written into
 * cfg, so the caller reports what ran. */
int train_run(struct train_config *cfg, struct comm *c,
    struct run_result *res);
void run_result_free(struct run_result *res);

/* checkpoint.c: DIR/step-NNNNNNNN.ckpt holds the whole model (gathered
 * from FSDP shards), the batch norm statistics, the optimizer state, where
 * the data stands and the settings that fix the data's sequence (seed,
 * global batch, loader options, data source), so a run can resume at any
 * world size but only with the same data. */
struct ckpt_pos {
	long step;			/* steps done */
	int epoch;			/* the epoch of the next batch */
	long batch;			/* the next batch within that epoch */
};
struct ckpt_settings;
/* The settings a checkpoint records and a resume must match; reads the
 * manifest (for its MD5), so rank 0 alone calls it. 0 or -1. */
int ckpt_settings_make(const struct train_config *cfg,
    struct ckpt_settings *set, char *err, size_t errlen);
/* Every rank calls these; set and want are read on rank 0 only. */
int ckpt_save(const char *dir, const struct ckpt_pos *pos,
    const struct ckpt_settings *set, struct model *m, struct strategy *s,
    struct optim *o, struct comm *c, char *err, size_t errlen);
/* Rank 0 picks the newest checkpoint in dir, checks it whole against the
 * model and want, and broadcasts its decision and the contents: 0 loaded,
 * 1 none there, -1 error (on every rank alike). */
int ckpt_load(const char *dir, const struct ckpt_settings *want,
    struct ckpt_pos *pos, struct model *m, struct strategy *s,
    struct optim *o, struct comm *c, char *err, size_t errlen);

/* report.c */
const char *verdict_name(enum verdict v);
/*
 * Decide the bound from the measured numbers and fill res->verdict,
 * reason and hint. Data-wait share >= 0.25, or a loader that alone is
 * slower than the compute (loader_ips < 0.9 compute_ips), is input-bound;
 * a share <= 0.05 with a loader at least 1.1x the compute is
 * compute-bound; anything else is balanced. With a ceiling unknown
 * (loader_ips < 0 or compute_ips <= 0) the share decides alone. Synthetic
 * data is compute-bound unless throttled; throttled, it is judged like any
 * input. The hint follows bound_stage ("decode"/"augment", "io"/"read").
 */
void verdict_decide(struct run_result *res, const struct train_config *cfg);
/* Print the per-epoch lines and the verdict block to stdout. */
void report_print(const struct run_result *res, const struct train_config *cfg);
/* Write everything plus the config as JSON (PATH "-": stdout); dies on a
 * write error. */
void report_write_json(const char *path, const struct run_result *res,
    const struct train_config *cfg);
/* NAME in an absolute folder of PATH (malloc'd; a link's own name, as a
 * multi-call program wants it), or NULL: never from the current folder. */
char *train_find_program(const char *name);
/*
 * Draw with gnuplot into out (SVG when svg, else PNG): script (no
 * terminal line; it reads 'plot.dat') and data, both fixed text the caller
 * made safe. No shell; out appears whole or not at all. 0, or -1 with a
 * message on stderr.
 */
int report_gnuplot(const char *out, int svg, const char *script,
    const char *data);
/* "shardtrain study": study.c */
extern const struct cli_command study_command;
int study_main(int argc, char **argv);
/* "shardtrain report RUN.json..." */
extern const struct cli_command report_command;
int report_main(int argc, char **argv);

#endif /* SK_TRAIN_TRAIN_H */
