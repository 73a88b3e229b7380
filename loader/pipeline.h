/*
 * pipeline.h - what the files of the streaming loader share and users do
 * not see: the loader handle, the structs passed from stage to stage, and
 * the functions that cross files. The stages, along the data flow:
 *
 *   plan.c      the epoch plan: shard order, this rank's samples, shuffle
 *   io.c        fetch: I/O threads read shards into samples (and, at open,
 *               the shard list and its counts)
 *   pipeline.c  the I/O queues, the dispatcher, decode workers, batch slots
 *   loader.c    the public calls, and failing and stopping
 *
 *   I/O thread t ── queue t ──┐            ┌─ worker ─┐
 *   (items t, t+K, ...)       ├─ dispatcher ┼─ worker ─┼─ slots ─ next()
 *   I/O thread t+1 ─ queue ───┘  (heap)     └─ worker ─┘
 *
 * Determinism: an epoch's plan fixes, for each of this rank's stream
 * positions, the sequence number it gets after the shuffle buffer (the
 * buffer is simulated on positions, not on data). Sequence s lands in
 * batch s / B at index s % B, whichever thread decodes it, and its
 * augmentation draws from (seed, epoch, key). Skipped samples are removed
 * from their batch in place, so the order of the others never changes.
 */
#ifndef SK_PIPELINE_H
#define SK_PIPELINE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "internal.h"
#include "loader.h"

static inline void
sk__add_ns(uint64_t *acc, uint64_t t0)
{
	__atomic_fetch_add(acc, sk__now_ns() - t0, __ATOMIC_RELAXED);
}

static inline void
sk__atomic_max(uint64_t *v, uint64_t x)
{
	uint64_t cur = __atomic_load_n(v, __ATOMIC_RELAXED);

	while (x > cur && !__atomic_compare_exchange_n(v, &cur, x, 1,
	    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/* ------------------------------------------------------------------------ */
/* samples                                                                  */

enum { SAMPLE_OK = -1 };

/* A sample between its shard and its batch. Owned by whoever holds it:
 * an I/O queue, the dispatcher's heap, the work queue, then a worker. */
struct slot;

struct lsample {
	struct lsample *next;
	int end;		/* marks the end of a plan item, no data */
	uint32_t seq;		/* its sequence number in the epoch */
	int status;		/* SAMPLE_OK or an sk_skip_reason */
	char *key;
	const char *url;	/* the shard's, for messages */
	uint8_t *img;		/* the image member's data (NULL when read
				 * through without decoding) */
	size_t img_len;
	int has_img;		/* it has an image member */
	int32_t label;
	uint64_t bytes;		/* all members' data */
	struct slot *slot;	/* where the dispatcher sent it */
	int idx;		/* its index in that batch */
};

void sk__lsample_free(struct lsample *s);

/* ------------------------------------------------------------------------ */
/* the epoch plan                                                           */

/* Samples [first, first + count) of a shard, at stream position base. */
struct item {
	size_t shard;
	uint64_t first, count;
	uint64_t base;
};

struct eplan {
	int epoch;
	struct item *items;
	size_t nitems;
	uint64_t n;		/* this rank's samples */
	uint32_t *seq_of_pos;	/* (n) the shuffle's output order */
	uint32_t lo, hi;	/* the sequence numbers delivered */
	int64_t b0;		/* the first batch delivered */
};

struct shardinfo {
	char *url;		/* for messages: no credentials */
	char *fetch_url;	/* for sk_source_open: NULL when url is it */
	uint64_t nsamples;
	uint64_t filesize;	/* the manifest's, 0 when unknown */
	int mismatch;		/* the shard disagrees with the manifest */
	int tail_read;		/* count_extra has read past its count */
	/* The files form: this "shard" is one image file, its sample. */
	char *key;		/* NULL for a shard */
	int32_t label;
};

/* ------------------------------------------------------------------------ */
/* queues                                                                   */

/* An I/O stream's queue: bounded by bytes, but always takes one sample so
 * that a sample larger than the bound cannot stall the stream. */
struct squeue {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct lsample *head, *tail;
	size_t bytes, cap;
	size_t count;
};

/* A batch slot: where workers write a batch and the consumer reads it. */
enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY, SLOT_HELD };

struct slot {
	int state;
	int epoch;
	int64_t index;
	int64_t global;		/* the batch number since open */
	int expected, done;
	uint8_t *images;
	int pinned;
	int32_t *labels;
	char **keys;
	uint64_t *bytes;
	struct sk_sample_aug *aug;
	uint8_t *ok;
	int n;
};

struct worker {
	sk_loader *l;
	pthread_t th;
	struct sk__aug_scratch scratch;
};

struct iothread {
	sk_loader *l;
	pthread_t th;
	int id;
};

/*
 * Locks: l->mu guards everything shared below the "shared" comment in
 * struct sk_loader, the slots and the work queue; each I/O queue has its
 * own mutex. Never hold a queue's mutex while taking l->mu.
 */
struct sk_loader {
	struct sk__handle h;
	struct sk_loader_config cfg;
	struct sk__aug_config acfg;
	char *urls_copy, *manifest_copy;
	char *note;		/* sk_loader_note(), or NULL */

	struct shardinfo *shards;	/* the files form: one per file */
	size_t nshards;
	int files;		/* the files form */
	size_t nclasses;	/* its class folders */
	uint64_t total;		/* samples in the data set */
	int64_t nbatches;	/* per epoch, every rank */
	size_t image_bytes;	/* of one host image */
	int nslots;
	struct sk__gpu *gpu;

	pthread_t dispatcher;
	int dispatcher_started;
	int inited;		/* the mutex and conditions exist */
	int nio_started, nworkers_started, nqueues_inited;
	struct iothread *io;
	int nio;
	struct squeue *queues;
	struct worker *workers;
	int nworkers;
	uint64_t open_ns;

	pthread_mutex_t mu;
	/* ---- shared, under mu ---- */
	pthread_cond_t cond_slot;	/* a slot became free */
	pthread_cond_t cond_ready;	/* a slot became ready */
	pthread_cond_t cond_work;	/* work queued */
	struct eplan **plans;	/* by epoch index */
	uint8_t *plan_done;	/* by epoch index: freed, never again */
	struct slot *slots;
	struct lsample *work_head, *work_tail;
	int64_t next_global;	/* the next batch next() returns */
	int64_t total_batches;	/* over all epochs */
	int stop;
	int failed;
	int skips_logged;
	struct sk_loader_stats st;

	/* stage times in ns, added atomically */
	uint64_t t_io_busy, t_io_blocked, t_input_wait, t_decode_busy,
	    t_decode_idle, t_ring_wait, t_consumer_wait;
	uint64_t bytes_read;
	uint64_t scratch_peak;
	uint64_t max_sample;
	uint64_t unplanned;	/* samples past a manifest's count */
	uint64_t mismatched;	/* shards that disagree with the manifest */

	/* ---- the read-ahead of remote shards (io.c) ---- */
	int ahead;		/* shards each I/O thread opens ahead of the
				 * one it reads; atomic reads, set under
				 * ahead_mu */
	int ahead_peak, ahead_cap;
	int ahead_auto;		/* cfg.ahead 0 on remote shards: stepped */
	pthread_mutex_t ahead_mu;	/* the stepping below; tried, never
					 * waited on */
	int ahead_up;		/* the last step was up, on trial */
	int ahead_prev;		/* the depth before it */
	int ahead_slow;		/* steps up double the depth */
	int ahead_hold;		/* ticks to stay before the next step */
	int ahead_fed;		/* ticks in a row the readers did not wait */
	uint64_t ahead_t, ahead_bytes;	/* the last tick: ns, bytes in */
	double ahead_wait;	/* and the readers' network wait, s */
	double ahead_rate;	/* bytes/s before the step on trial */
};

/* Whether the loader is stopping; threads poll it without l->mu. */
static inline int
sk__stopping(sk_loader *l)
{
	return __atomic_load_n(&l->stop, __ATOMIC_ACQUIRE);
}

/* ------------------------------------------------------------------------ */
/* functions that cross files                                               */

/* loader.c: record a fatal error (the first one wins) and stop every
 * thread; _locked with l->mu held, the other takes it. */
void sk__loader_fail_locked(sk_loader *l, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void sk__loader_fail(sk_loader *l, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* plan.c: the plan of epoch index e (made on first use), and its end. */
struct eplan *sk__get_plan(sk_loader *l, int e, size_t *nitems);
void sk__eplan_free(struct eplan *p);

/* io.c: an I/O thread (arg: its struct iothread); the shard list and its
 * sample counts at open. */
void *sk__io_main(void *arg);
/* The read-ahead's start (after the shards and nio are known). */
void sk__ahead_init(sk_loader *l);
int sk__load_shards(sk_loader *l);

/* files.c: the form of the config's source (root: the folder's entries,
 * listed when it is one); the files form's shard list at open, from the
 * root's entries; whether a file name's extension is an image's. */
int sk__source_form(const struct sk_loader_config *c, enum sk_form *form,
    struct sk__entries *root, struct sk_error *err);
int sk__load_files(sk_loader *l, const struct sk__entries *root);
int sk__is_image_ext(const char *ext);

/* pipeline.c: an I/O thread's push into its queue; the dispatcher thread
 * (arg: the loader) and a decode worker (arg: its struct worker). */
void sk__squeue_push(sk_loader *l, struct squeue *q, struct lsample *s);
void *sk__dispatch_main(void *arg);
void *sk__worker_main(void *arg);

#endif /* SK_PIPELINE_H */
