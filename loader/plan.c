/*
 * plan.c - the epoch plan: each epoch a seeded permutation of the shards,
 * this rank's contiguous run of their samples, and the shuffle buffer run
 * on stream positions, which gives every sample its sequence number (and
 * so its batch and index) before a byte is read.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "internal.h"
#include "loader.h"
#include "pipeline.h"

static uint64_t
mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* A uniform integer in [0, n) without modulo bias. */
static uint64_t
rng_below(uint64_t *state, uint64_t n)
{
	uint64_t x, lim = UINT64_MAX - UINT64_MAX % n;

	do
		x = sk__rng_next(state);
	while (x >= lim);
	return x % n;
}

/*
 * The epoch's plan for this rank. DESIGN: the shard order is a seeded
 * permutation each epoch; the samples of the shards in that order are
 * dealt to ranks as contiguous runs of floor or ceil(N / world) samples, so
 * every rank has the same count give or take one, and reads at most two
 * shards in part.
 */
static struct eplan *
plan_epoch(sk_loader *l, int eidx)
{
	const struct sk_loader_config *c = &l->cfg;
	struct eplan *p;
	size_t *perm = NULL, i, j, t;
	uint64_t rng, start, end, at, lo, hi, k, npos, *buf = NULL;
	uint64_t pos, nbuf, seq, r;

	if ((p = calloc(1, sizeof *p)) == NULL)
		return NULL;
	p->epoch = c->epoch + eidx;
	if ((perm = malloc(sizeof *perm * l->nshards)) == NULL ||
	    (p->items = calloc(l->nshards, sizeof *p->items)) == NULL)
		goto fail;
	rng = mix64(c->seed ^ mix64((uint64_t)p->epoch + 0x5348415244ULL));
	for (i = 0; i < l->nshards; i++)
		perm[i] = i;
	for (i = l->nshards; i > 1; i--) {
		j = (size_t)rng_below(&rng, i);
		t = perm[i - 1];
		perm[i - 1] = perm[j];
		perm[j] = t;
	}
	start = l->total * (uint64_t)c->rank / (uint64_t)c->world;
	end = l->total * ((uint64_t)c->rank + 1) / (uint64_t)c->world;
	p->n = end - start;
	for (i = 0, at = 0; i < l->nshards && at < end; i++) {
		lo = at;
		hi = at + l->shards[perm[i]].nsamples;
		at = hi;
		if (hi <= start)
			continue;
		if (lo < start)
			lo = start;
		if (hi > end)
			hi = end;
		if (hi <= lo)
			continue;
		p->items[p->nitems].shard = perm[i];
		p->items[p->nitems].first = lo - (at -
		    l->shards[perm[i]].nsamples);
		p->items[p->nitems].count = hi - lo;
		p->items[p->nitems].base = lo - start;
		p->nitems++;
	}

	/*
	 * The shuffle buffer, run on positions: fill it, then for each new
	 * position emit a random occupant and put the newcomer in its place;
	 * at the end emit the rest in random order (WebDataset's shuffle).
	 */
	npos = p->n;
	if ((p->seq_of_pos = malloc(sizeof *p->seq_of_pos *
	    (npos ? npos : 1))) == NULL)
		goto fail;
	nbuf = c->shuffle > 1 ? (uint64_t)c->shuffle : 1;
	if (nbuf > npos)
		nbuf = npos ? npos : 1;
	if ((buf = malloc(sizeof *buf * nbuf)) == NULL)
		goto fail;
	rng = mix64(c->seed ^ mix64((uint64_t)p->epoch * 0x9e3779b97f4a7c15ULL ^
	    ((uint64_t)c->rank << 32) ^ 0x5348554646ULL));
	for (pos = 0, seq = 0, k = 0; pos < npos; pos++) {
		if (k < nbuf) {
			buf[k++] = pos;
			continue;
		}
		r = rng_below(&rng, nbuf);
		p->seq_of_pos[buf[r]] = (uint32_t)seq++;
		buf[r] = pos;
	}
	while (k > 0) {
		r = rng_below(&rng, k);
		p->seq_of_pos[buf[r]] = (uint32_t)seq++;
		buf[r] = buf[--k];
	}

	p->b0 = eidx == 0 ? c->resume_batch : 0;
	p->lo = (uint32_t)(p->b0 * c->batch);
	hi = (uint64_t)l->nbatches * (uint64_t)c->batch;
	p->hi = (uint32_t)(hi < p->n ? hi : p->n);
	if (p->lo > p->hi)
		p->lo = p->hi;
	free(perm);
	free(buf);
	return p;
fail:
	free(perm);
	free(buf);
	if (p != NULL) {
		free(p->items);
		free(p->seq_of_pos);
		free(p);
	}
	return NULL;
}

void
sk__eplan_free(struct eplan *p)
{
	if (p == NULL)
		return;
	free(p->items);
	free(p->seq_of_pos);
	free(p);
}

/* The plan of epoch index e, made by whoever needs it first. NULL when the
 * loader stops (or memory ran out, which stops it), or when the epoch is
 * over already. */
struct eplan *
sk__get_plan(sk_loader *l, int e, size_t *nitems)
{
	struct eplan *p;

	pthread_mutex_lock(&l->mu);
	if (l->plan_done[e]) {
		pthread_mutex_unlock(&l->mu);
		return NULL;
	}
	if (l->plans[e] == NULL && !l->stop) {
		if ((l->plans[e] = plan_epoch(l, e)) == NULL)
			sk__loader_fail_locked(l, SK_ENOMEM, "out of memory "
			    "planning epoch %d", l->cfg.epoch + e);
	}
	p = l->stop ? NULL : l->plans[e];
	if (p != NULL && nitems != NULL)
		*nitems = p->nitems;
	pthread_mutex_unlock(&l->mu);
	return p;
}
