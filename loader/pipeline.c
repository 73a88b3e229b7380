/*
 * pipeline.c - from the I/O queues to whole batches: the dispatcher takes
 * samples off the queues in item order, puts them in sequence order (the
 * shuffle buffer's heap) and sends them to their batch slot, workers
 * decode and augment them into it, and complete() makes a full batch
 * ready for next().
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "loader.h"
#include "pipeline.h"

/* Log the first few skipped samples one by one, then only count them. */
#define SKIP_LOG_MAX 20

/* ------------------------------------------------------------------------ */
/* samples and the I/O queues                                               */

void
sk__lsample_free(struct lsample *s)
{
	if (s == NULL)
		return;
	free(s->key);
	free(s->img);
	free(s);
}

/* Each queue has its own mutex: never take l->mu while holding it. */
void
sk__squeue_push(sk_loader *l, struct squeue *q, struct lsample *s)
{
	size_t sz = s->img_len;
	uint64_t t0;

	pthread_mutex_lock(&q->mu);
	if (q->count > 0 && q->bytes + sz > q->cap && !sk__stopping(l)) {
		t0 = sk__now_ns();
		while (q->count > 0 && q->bytes + sz > q->cap &&
		    !sk__stopping(l))
			pthread_cond_wait(&q->cond, &q->mu);
		sk__add_ns(&l->t_io_blocked, t0);
	}
	if (sk__stopping(l)) {
		pthread_mutex_unlock(&q->mu);
		sk__lsample_free(s);
		return;
	}
	s->next = NULL;
	if (q->tail != NULL)
		q->tail->next = s;
	else
		q->head = s;
	q->tail = s;
	q->bytes += sz;
	q->count++;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->mu);
}

/* The next sample of q, waiting for it; NULL when stopping. */
static struct lsample *
squeue_pop(sk_loader *l, struct squeue *q)
{
	struct lsample *s;
	uint64_t t0;

	pthread_mutex_lock(&q->mu);
	if (q->head == NULL && !sk__stopping(l)) {
		t0 = sk__now_ns();
		while (q->head == NULL && !sk__stopping(l))
			pthread_cond_wait(&q->cond, &q->mu);
		sk__add_ns(&l->t_input_wait, t0);
	}
	if ((s = q->head) != NULL) {
		q->head = s->next;
		if (q->head == NULL)
			q->tail = NULL;
		q->bytes -= s->img_len;
		q->count--;
		pthread_cond_broadcast(&q->cond);
	}
	pthread_mutex_unlock(&q->mu);
	return s;
}

/* ------------------------------------------------------------------------ */
/* batch slots                                                              */

/* Wait until the slot of batch `global` is free and claim it; NULL when
 * stopping. */
static struct slot *
slot_claim(sk_loader *l, int64_t global, const struct eplan *p, int64_t b)
{
	struct slot *sl = &l->slots[global % l->nslots];
	int64_t lo, hi, first = b * l->cfg.batch;
	uint64_t t0;

	pthread_mutex_lock(&l->mu);
	if (sl->state != SLOT_FREE && !l->stop) {
		t0 = sk__now_ns();
		while (sl->state != SLOT_FREE && !l->stop)
			pthread_cond_wait(&l->cond_slot, &l->mu);
		sk__add_ns(&l->t_ring_wait, t0);
	}
	if (l->stop) {
		pthread_mutex_unlock(&l->mu);
		return NULL;
	}
	lo = first > p->lo ? first : p->lo;
	hi = first + l->cfg.batch < p->hi ? first + l->cfg.batch : p->hi;
	sl->state = SLOT_FILLING;
	sl->epoch = p->epoch;
	sl->index = b;
	sl->global = global;
	sl->expected = hi > lo ? (int)(hi - lo) : 0;
	sl->done = 0;
	sl->n = 0;
	memset(sl->ok, 0, (size_t)l->cfg.batch);
	pthread_mutex_unlock(&l->mu);
	return sl;
}

/* Close up the holes skipped samples left, keeping the order. */
static void
slot_compact(sk_loader *l, struct slot *sl)
{
	int i, j;

	for (i = 0, j = 0; i < l->cfg.batch; i++) {
		if (!sl->ok[i])
			continue;
		if (i != j) {
			memmove(sl->images + (size_t)j * l->image_bytes,
			    sl->images + (size_t)i * l->image_bytes,
			    l->image_bytes);
			sl->labels[j] = sl->labels[i];
			sl->keys[j] = sl->keys[i];
			sl->keys[i] = NULL;
			sl->bytes[j] = sl->bytes[i];
			sl->aug[j] = sl->aug[i];
			sl->ok[j] = 1;
			sl->ok[i] = 0;
		}
		j++;
	}
	sl->n = j;
}

static void
slot_ready_locked(sk_loader *l, struct slot *sl)
{
	sl->state = SLOT_READY;
	pthread_cond_broadcast(&l->cond_ready);
}

/*
 * A sample is done with (status SAMPLE_OK or a skip reason); s is freed
 * here, its key moved to the slot. The last sample of a batch compacts it
 * (outside the lock: nobody else touches a slot whose samples are all
 * done) and makes it ready.
 */
static void
complete(sk_loader *l, struct lsample *s, int status, const char *why)
{
	struct slot *sl = s->slot;
	int idx = s->idx, last;

	pthread_mutex_lock(&l->mu);
	if (status == SAMPLE_OK) {
		sl->ok[idx] = 1;
		sl->keys[idx] = s->key;
		s->key = NULL;
		sl->labels[idx] = s->label;
		sl->bytes[idx] = s->bytes;
	} else {
		l->st.skipped[status]++;
		l->st.skipped_total++;
		if (l->skips_logged < SKIP_LOG_MAX)
			sk_log(SK_LOG_WARN, "%s: skipped sample %s (%s): %s",
			    s->url, s->key, sk_skip_reason_name(status), why);
		else if (l->skips_logged == SKIP_LOG_MAX)
			sk_log(SK_LOG_WARN, "more skipped samples are only "
			    "counted");
		l->skips_logged++;
	}
	last = ++sl->done == sl->expected;
	pthread_mutex_unlock(&l->mu);
	sk__lsample_free(s);
	if (!last)
		return;
	slot_compact(l, sl);
	pthread_mutex_lock(&l->mu);
	slot_ready_locked(l, sl);
	pthread_mutex_unlock(&l->mu);
}

static const char *
status_text(int status)
{
	switch (status) {
	case SK_SKIP_NO_IMAGE:
		return "no .jpg, .jpeg or .png member";
	case SK_SKIP_NO_LABEL:
		return "no .cls member holding a label";
	case SK_SKIP_DAMAGED:
		return "lost with the damaged part of its shard";
	case SK_SKIP_TOO_BIG:
		return "its members add up to more than the sample size "
		    "limit; not read";
	}
	return "";
}

/* ------------------------------------------------------------------------ */
/* the dispatcher: samples in sequence order to the workers                 */

/* A min-heap of samples by sequence number: the shuffle buffer's content
 * (at most `shuffle` samples). */
struct heap {
	struct lsample **v;
	size_t n, cap;
};

static int
heap_push(struct heap *h, struct lsample *s)
{
	struct lsample **nv, *t;
	size_t i, up;

	if (h->n == h->cap) {
		if ((nv = realloc(h->v, sizeof *nv * (h->cap ? h->cap * 2 :
		    64))) == NULL)
			return SK_ENOMEM;
		h->v = nv;
		h->cap = h->cap ? h->cap * 2 : 64;
	}
	i = h->n++;
	h->v[i] = s;
	while (i > 0 && h->v[up = (i - 1) / 2]->seq > h->v[i]->seq) {
		t = h->v[up];
		h->v[up] = h->v[i];
		h->v[i] = t;
		i = up;
	}
	return 0;
}

static struct lsample *
heap_pop(struct heap *h)
{
	struct lsample *top = h->v[0], *t;
	size_t i = 0, c;

	h->v[0] = h->v[--h->n];
	for (;;) {
		c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && h->v[c + 1]->seq < h->v[c]->seq)
			c++;
		if (h->v[i]->seq <= h->v[c]->seq)
			break;
		t = h->v[i];
		h->v[i] = h->v[c];
		h->v[c] = t;
		i = c;
	}
	return top;
}

static void
queue_work(sk_loader *l, struct lsample *s)
{
	pthread_mutex_lock(&l->mu);
	s->next = NULL;
	if (l->work_tail != NULL)
		l->work_tail->next = s;
	else
		l->work_head = s;
	l->work_tail = s;
	pthread_cond_signal(&l->cond_work);
	pthread_mutex_unlock(&l->mu);
}

/* Send sample s to index idx of slot sl: to a worker, or straight to its
 * batch when there is nothing to decode. */
static void
dispatch(sk_loader *l, struct lsample *s, struct slot *sl, int idx)
{
	s->slot = sl;
	s->idx = idx;
	if (s->status != SAMPLE_OK) {
		if (l->cfg.strict) {
			sk__loader_fail(l, SK_EFORMAT, "%s: sample %s: %s",
			    s->url, s->key, status_text(s->status));
			sk__lsample_free(s);
			return;
		}
		complete(l, s, s->status, status_text(s->status));
		return;
	}
	if (!l->cfg.decode) {
		memset(&sl->aug[idx], 0, sizeof sl->aug[idx]);
		complete(l, s, SAMPLE_OK, NULL);
		return;
	}
	queue_work(l, s);
}

void *
sk__dispatch_main(void *arg)
{
	sk_loader *l = arg;
	struct heap h = { NULL, 0, 0 };
	struct eplan *p;
	struct slot *sl;
	struct lsample *s;
	int64_t global = 0, b, seq, lo, hi;
	size_t item;
	int e;

	for (e = 0; e < l->cfg.epochs && !sk__stopping(l); e++) {
		if ((p = sk__get_plan(l, e, NULL)) == NULL)
			break;
		item = 0;
		for (b = p->b0; b < l->nbatches && !sk__stopping(l); b++) {
			if ((sl = slot_claim(l, global++, p, b)) == NULL)
				goto out;
			if (sl->expected == 0) {
				pthread_mutex_lock(&l->mu);
				slot_ready_locked(l, sl);
				pthread_mutex_unlock(&l->mu);
				continue;
			}
			lo = b * l->cfg.batch;
			hi = lo + l->cfg.batch;
			if (lo < p->lo)
				lo = p->lo;
			if (hi > p->hi)
				hi = p->hi;
			for (seq = lo; seq < hi; seq++) {
				/* Read on until the sample due is in. */
				while (h.n == 0 || h.v[0]->seq != seq) {
					if (item >= p->nitems) {
						sk__loader_fail(l, SK_EFORMAT,
						    "internal error: sample "
						    "missing from the plan");
						goto out;
					}
					s = squeue_pop(l, &l->queues[item %
					    (size_t)l->nio]);
					if (s == NULL)
						goto out;
					if (s->end) {
						sk__lsample_free(s);
						item++;
						continue;
					}
					if (heap_push(&h, s) != 0) {
						sk__lsample_free(s);
						sk__loader_fail(l, SK_ENOMEM,
						    "out of memory");
						goto out;
					}
				}
				s = heap_pop(&h);
				dispatch(l, s, sl, (int)(seq - b *
				    l->cfg.batch));
			}
		}
		/* Take the end markers of the items not drained yet, so the
		 * next epoch starts at its first item on every queue. */
		while (item < p->nitems && !sk__stopping(l)) {
			if ((s = squeue_pop(l, &l->queues[item %
			    (size_t)l->nio])) == NULL)
				goto out;
			if (s->end)
				item++;
			sk__lsample_free(s);
		}
		/* Stopped mid-drain: I/O threads may still read the plan;
		 * close() frees it after joining them. */
		if (sk__stopping(l))
			goto out;
		while (h.n > 0)
			sk__lsample_free(heap_pop(&h));
		pthread_mutex_lock(&l->mu);
		sk__eplan_free(l->plans[e]);
		l->plans[e] = NULL;
		l->plan_done[e] = 1;
		pthread_mutex_unlock(&l->mu);
	}
out:
	while (h.n > 0)
		sk__lsample_free(heap_pop(&h));
	free(h.v);
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* decode workers                                                           */

void *
sk__worker_main(void *arg)
{
	struct worker *w = arg;
	sk_loader *l = w->l;
	struct lsample *s;
	struct slot *sl;
	struct sk_error err;
	uint64_t t0, seed;
	int rc, status;

	for (;;) {
		pthread_mutex_lock(&l->mu);
		if (l->work_head == NULL && !l->stop) {
			t0 = sk__now_ns();
			while (l->work_head == NULL && !l->stop)
				pthread_cond_wait(&l->cond_work, &l->mu);
			sk__add_ns(&l->t_decode_idle, t0);
		}
		if (l->stop) {
			pthread_mutex_unlock(&l->mu);
			break;
		}
		s = l->work_head;
		l->work_head = s->next;
		if (l->work_head == NULL)
			l->work_tail = NULL;
		pthread_mutex_unlock(&l->mu);

		t0 = sk__now_ns();
		sl = s->slot;
		seed = sk__sample_seed(l->cfg.seed, sl->epoch, s->key);
		err.code = 0;
		err.msg[0] = '\0';
		rc = sk__augment(&l->acfg, &w->scratch, seed, s->img,
		    s->img_len, sl->images + (size_t)s->idx * l->image_bytes,
		    &sl->aug[s->idx], &err);
		free(s->img);
		s->img = NULL;
		sk__atomic_max(&l->scratch_peak, w->scratch.high_water);
		sk__add_ns(&l->t_decode_busy, t0);
		if (rc == 0) {
			complete(l, s, SAMPLE_OK, NULL);
			continue;
		}
		if (rc == SK_ENOMEM || l->cfg.strict) {
			sk__loader_fail(l, rc, "%s: sample %s: %s", s->url,
			    s->key, err.msg);
			sk__lsample_free(s);
			break;
		}
		status = rc == SK_ETOOBIG ? SK_SKIP_TOO_BIG : SK_SKIP_DECODE;
		complete(l, s, status, err.msg);
	}
	return NULL;
}
