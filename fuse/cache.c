/*
 * cache.c - the block cache every open file of shardfs reads through: one
 * bounded pool of chunks (block-aligned runs of an object, each fetched by
 * one ranged GET of the fetch engine, or one block read back from the disk
 * cache), read-ahead that grows for sequential readers, and objects pinned
 * to the version their listing gave.
 *
 * Ownership: a chunk lives while it is in the index or a reader uses it
 * (users > 0); an object lives while a handle or a chunk holds it (refs).
 * Everything here is guarded by mu, except a chunk's bytes, which its
 * range writes once and readers read only below what the range reports.
 * An object whose last reference went is closed after mu is let go
 * (reap): closing waits for the engine to let go of its ranges.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "fetch.h"
#include "shardfs.h"

#define NBUCKETS	65536u	/* block index: a power of two */
#define BLOCKS_KEPT	8	/* spare block buffers (block_get) */
#define OBUCKETS	4096u	/* objects by URL and version */

struct chunk;

/* One block of a chunk, as the index holds it. */
struct slot {
	struct slot *next;
	uint64_t oid, blk;
	struct chunk *c;
};

struct chunk {
	struct fs_obj *o;
	uint64_t off, len;	/* the object's bytes [off, off + len) */
	struct sk__range *r;	/* fetched: its buffer holds the bytes */
	uint8_t *buf;		/* or read back from the disk cache */
	int users;		/* readers copying from it now */
	int indexed;		/* its blocks are in the index */
	int ahead;		/* read ahead and not yet read */
	int kept;		/* written to the disk cache (or tried) */
	int on_lru;
	struct chunk *prev, *next;	/* the LRU, while users == 0 */
	int going;		/* read whole: freed once its range is done */
	struct chunk *gprev, *gnext;	/* cache.going */
	size_t nslots;
	struct slot slots[];
};

/* How long a read of bytes whose read just failed fails at once: long
 * enough for the kernel's retry of a failed read-ahead, short enough that
 * a server back a moment later is read. */
#define FAIL_FAST_NS	((uint64_t)1000000000)

struct fs_obj {
	struct fs_obj *hnext;	/* in its hash bucket, or the dead list */
	char *url;
	uint64_t size;
	char version[128];	/* the listing's: pins the reads */
	char disk_version[160];	/* the listing's for the disk cache */
	char disk_key[65];	/* its blocks' key in the disk cache; "" when
				 * not kept there */
	int disk_learn;		/* keyed by what its first response pins */
	uint64_t id;
	sk_source *src;		/* pinned: its stream fetches the ranges */
	struct sk__stream *st;
	int refs;
	int hashed;
	int stale;		/* a read found it changed */
	/* The range a read last failed on and until when a read of it fails
	 * at once: the kernel retries a failed read-ahead's pages with a read
	 * of its own, which would wait io_timeout a second time. */
	uint64_t fail_off, fail_end, fail_until;
	int fail_rc;
};

struct fs_reader {
	struct fs_obj *o;
	uint64_t next;		/* where the last read ended */
	uint64_t window;	/* read-ahead; 0 for a random reader */
	uint64_t ra_end;	/* read ahead up to here */
	uint64_t behind;	/* let go of up to here (drop_behind) */
	uint64_t grown;		/* bytes read in sequence since it last grew */
	int reads;
	int streak;		/* reads in a row near the last one's end */
};

static struct {
	pthread_mutex_t mu;
	struct slot *index[NBUCKETS];
	struct fs_obj *objs[OBUCKETS];
	struct fs_obj *dead;	/* to close once mu is let go */
	struct chunk *lru_head, *lru_tail;	/* oldest first */
	struct chunk *going;	/* let go of, their ranges still running */
	uint64_t used, peak;	/* bytes of every live chunk */
	uint8_t *free[BLOCKS_KEPT];	/* spare block buffers */
	int nfree;
	uint64_t next_oid;
	int nseq;		/* readers with a read-ahead window */
} cache = { .mu = PTHREAD_MUTEX_INITIALIZER, .next_oid = 1 };

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static size_t
hash2(uint64_t a, uint64_t b)
{
	uint64_t h = a * 0x9e3779b97f4a7c15u ^ (b + 0x632be59bd9b4e019u) *
	    0xbf58476d1ce4e5b9u;

	return (size_t)(h ^ (h >> 29));
}

static size_t
hash_str(const char *s, const char *t)
{
	uint64_t h = 1469598103934665603u;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211u;
	h = (h ^ 0xff) * 1099511628211u;
	for (; *t; t++)
		h = (h ^ (unsigned char)*t) * 1099511628211u;
	return (size_t)h;
}

void
fs_cache_usage(uint64_t *now, uint64_t *peak)
{
	pthread_mutex_lock(&cache.mu);
	*now = cache.used;
	*peak = cache.peak;
	pthread_mutex_unlock(&cache.mu);
}

/* ------------------------------------------------------------------------ */
/* objects                                                                  */

/* Caller holds mu. */
static void
obj_unhash(struct fs_obj *o)
{
	struct fs_obj **pp;

	if (!o->hashed)
		return;
	for (pp = &cache.objs[hash_str(o->url, o->version) % OBUCKETS];
	    *pp != NULL; pp = &(*pp)->hnext)
		if (*pp == o) {
			*pp = o->hnext;
			break;
		}
	o->hashed = 0;
}

/* Drop a reference; caller holds mu. The last one sends o to the dead
 * list. */
static void
obj_unref(struct fs_obj *o)
{
	if (--o->refs > 0)
		return;
	obj_unhash(o);
	o->hnext = cache.dead;
	cache.dead = o;
}

static void
obj_free(struct fs_obj *o)
{
	if (o == NULL)
		return;
	sk_source_close(o->src);
	free(o->url);
	free(o);
}

/* Close the objects that died; caller does not hold mu. */
static void
reap(void)
{
	struct fs_obj *o, *next;

	pthread_mutex_lock(&cache.mu);
	o = cache.dead;
	cache.dead = NULL;
	pthread_mutex_unlock(&cache.mu);
	for (; o != NULL; o = next) {
		next = o->hnext;
		obj_free(o);
	}
}

int
fs_obj_get(struct fs_obj **out, const char *url, uint64_t size,
    const char *version, const char *disk_version, struct sk_error *err)
{
	struct fs_obj *o;
	size_t h = hash_str(url, version) % OBUCKETS;
	int rc;

	*out = NULL;
	pthread_mutex_lock(&cache.mu);
	for (o = cache.objs[h]; o != NULL; o = o->hnext)
		if (o->size == size && strcmp(o->url, url) == 0 &&
		    strcmp(o->version, version) == 0 &&
		    strcmp(o->disk_version, disk_version ? disk_version : "") ==
		    0) {
			o->refs++;
			pthread_mutex_unlock(&cache.mu);
			*out = o;
			return 0;
		}
	pthread_mutex_unlock(&cache.mu);

	if ((o = calloc(1, sizeof *o)) == NULL ||
	    (o->url = strdup(url)) == NULL) {
		free(o);
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	o->size = size;
	snprintf(o->version, sizeof o->version, "%s", version);
	snprintf(o->disk_version, sizeof o->disk_version, "%s",
	    disk_version ? disk_version : "");
	if (fs_disk_enabled() && disk_version != NULL &&
	    strcmp(disk_version, "learned") == 0)
		o->disk_learn = 1;
	else if (fs_disk_enabled() && disk_version != NULL &&
	    disk_version[0] != '\0')
		fs_disk_key(url, disk_version, size, o->disk_key);
	if ((rc = sk__source_open_pinned(&o->src, url, size, version)) != 0) {
		sk_error_set(err, rc, "%s", sk_errmsg(o->src));
		obj_free(o);
		return rc;
	}
	o->st = sk__source_stream(o->src);
	o->refs = 1;
	pthread_mutex_lock(&cache.mu);
	o->id = cache.next_oid++;
	o->hnext = cache.objs[h];
	cache.objs[h] = o;
	o->hashed = 1;
	pthread_mutex_unlock(&cache.mu);
	*out = o;
	return 0;
}

void
fs_obj_put(struct fs_obj *o)
{
	pthread_mutex_lock(&cache.mu);
	obj_unref(o);
	pthread_mutex_unlock(&cache.mu);
	reap();
}

/* ------------------------------------------------------------------------ */
/* chunks: the index and the LRU, all under mu                              */

static struct chunk *
find(const struct fs_obj *o, uint64_t blk)
{
	struct slot *s;

	for (s = cache.index[hash2(o->id, blk) % NBUCKETS]; s != NULL;
	    s = s->next)
		if (s->oid == o->id && s->blk == blk)
			return s->c;
	return NULL;
}

static int on_disk(const struct fs_obj *o, uint64_t blk);

/* The first block in [blk, end) that o has here or on disk, or end: a
 * fetch stops there rather than fetch again what is kept. */
static uint64_t
next_here(const struct fs_obj *o, uint64_t blk, uint64_t end)
{
	for (; blk < end; blk++)
		if (find(o, blk) != NULL || on_disk(o, blk))
			break;
	return blk;
}

static void
lru_unlink(struct chunk *c)
{
	if (!c->on_lru)
		return;
	c->on_lru = 0;
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		cache.lru_head = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	else
		cache.lru_tail = c->prev;
	c->prev = c->next = NULL;
}

static void
lru_push(struct chunk *c)
{
	c->on_lru = 1;
	c->prev = cache.lru_tail;
	c->next = NULL;
	if (cache.lru_tail != NULL)
		cache.lru_tail->next = c;
	else
		cache.lru_head = c;
	cache.lru_tail = c;
}

static void
unindex(struct chunk *c)
{
	struct slot **pp;
	size_t i;

	if (!c->indexed)
		return;
	for (i = 0; i < c->nslots; i++)
		for (pp = &cache.index[hash2(c->slots[i].oid,
		    c->slots[i].blk) % NBUCKETS]; *pp != NULL;
		    pp = &(*pp)->next)
			if (*pp == &c->slots[i]) {
				*pp = c->slots[i].next;
				break;
			}
	c->indexed = 0;
}

/*
 * Buffers of one block for what the disk cache gives back: kept for the
 * next (BLOCKS_KEPT at most, 8 MiB), since a fresh one costs a page fault
 * per page, which was a third of reading an epoch back from disk. Caller
 * holds mu.
 */
static uint8_t *
block_get(void)
{
	return cache.nfree > 0 ? cache.free[--cache.nfree] :
	    malloc((size_t)FS_BLOCK);
}

static void
block_put(uint8_t *b)
{
	if (b == NULL)
		return;
	if (cache.nfree < BLOCKS_KEPT)
		cache.free[cache.nfree++] = b;
	else
		free(b);
}

static void
going_unlink(struct chunk *c)
{
	if (!c->going)
		return;
	c->going = 0;
	if (c->gprev != NULL)
		c->gprev->gnext = c->gnext;
	else
		cache.going = c->gnext;
	if (c->gnext != NULL)
		c->gnext->gprev = c->gprev;
	c->gprev = c->gnext = NULL;
}

/* Free a chunk no reader uses and the index no longer holds. */
static void
chunk_free(struct chunk *c)
{
	going_unlink(c);
	cache.used -= c->len;
	sk__range_free(c->r);
	block_put(c->buf);
	obj_unref(c->o);
	free(c);
}

/* Evict unused chunks, oldest first, until len more bytes fit: 1, or 0
 * when only chunks in use are left. Read-ahead (ahead) spares chunks read
 * ahead and not yet read: evicting them to read further ahead would fetch
 * every byte twice once the window outgrows the room. */
static int
make_room(uint64_t len, int ahead)
{
	struct chunk *c, *next;

	for (c = cache.lru_head; c != NULL && cache.used + len >
	    fs_opts.cache_bytes; c = next) {
		next = c->next;
		if (ahead && c->ahead)
			continue;
		lru_unlink(c);
		unindex(c);
		FS_ADD(evictions, 1);
		chunk_free(c);
	}
	return cache.used + len <= fs_opts.cache_bytes;
}

/* A new chunk of o for [off, off + len) holding r or buf, indexed and
 * counted. */
static struct chunk *
chunk_new(struct fs_obj *o, uint64_t off, uint64_t len, struct sk__range *r,
    uint8_t *buf)
{
	struct chunk *c;
	struct slot *s;
	size_t i, n = (size_t)((len + FS_BLOCK - 1) / FS_BLOCK), h;

	if ((c = calloc(1, sizeof *c + n * sizeof c->slots[0])) == NULL)
		return NULL;
	c->o = o;
	c->off = off;
	c->len = len;
	c->r = r;
	c->buf = buf;
	c->nslots = n;
	for (i = 0; i < n; i++) {
		s = &c->slots[i];
		s->oid = o->id;
		s->blk = off / FS_BLOCK + i;
		s->c = c;
		h = hash2(s->oid, s->blk) % NBUCKETS;
		s->next = cache.index[h];
		cache.index[h] = s;
	}
	c->indexed = 1;
	o->refs++;
	cache.used += len;
	if (cache.used > cache.peak)
		cache.peak = cache.used;
	return c;
}

/* Start fetching [off, off + len) of o; NULL when it cannot start. */
static struct chunk *
fetch(struct fs_obj *o, uint64_t off, uint64_t len)
{
	struct sk__range *r;
	struct sk_error err;
	struct chunk *c;

	if (sk__range_start(o->st, off, len, &r, &err) != 0) {
		sk_log(SK_LOG_WARN, "%s", err.msg);
		return NULL;
	}
	if ((c = chunk_new(o, off, len, r, NULL)) == NULL)
		sk__range_free(r);
	return c;
}

/* ------------------------------------------------------------------------ */
/* readers                                                                  */

struct fs_reader *
fs_reader_new(struct fs_obj *o)
{
	struct fs_reader *r;

	if ((r = calloc(1, sizeof *r)) == NULL)
		return NULL;
	pthread_mutex_lock(&cache.mu);
	o->refs++;
	pthread_mutex_unlock(&cache.mu);
	r->o = o;
	return r;
}

static void let_go_whole(struct fs_reader *r);

void
fs_reader_free(struct fs_reader *r, int kernel_keeps)
{
	if (r == NULL)
		return;
	if (r->window > 0) {
		pthread_mutex_lock(&cache.mu);
		cache.nseq--;
		if (kernel_keeps)
			let_go_whole(r);
		pthread_mutex_unlock(&cache.mu);
	}
	fs_obj_put(r->o);
	free(r);
}

/*
 * The reader's pattern. A reader starting at 0, or reading twice in a
 * row within 2 MiB of where its last read ended, is sequential; it stays
 * so while its reads land within 4 MiB of that (the kernel sends a file's
 * reads a few at a time, not always in order), and its read-ahead window
 * doubles from 4 MiB to readahead for every GROW_STEP it reads: at each
 * request of the kernel's read-ahead (128 KiB and up), but not at each
 * of a program's 8 KiB reads on a direct_io mount, where five of them
 * (40 KiB) would have fetched 64 MiB. Any other read makes it a random
 * reader, which fetches only what it asks for. The windows of all the
 * sequential readers share the cache: each is at most a half of it
 * divided among them, so that one reader's read-ahead does not evict what
 * another fetched and has yet to read. Caller holds mu.
 */
#define GROW_STEP	((uint64_t)128 << 10)

static void
follow(struct fs_reader *r, uint64_t off, uint64_t end)
{
	uint64_t slack = (r->window > 0 ? 4 : 2) * FS_BLOCK, cap;
	int near = r->reads > 0 && off + slack >= r->next &&
	    off <= r->next + slack;

	r->streak = near ? r->streak + 1 : 0;
	if ((r->reads == 0 && off == 0) || (near && (r->window > 0 ||
	    r->streak >= 2))) {
		if (r->window == 0) {
			r->window = 4 * FS_BLOCK;
			r->grown = 0;
			r->behind = off > 8 * FS_BLOCK ?
			    (off - 8 * FS_BLOCK) / FS_BLOCK * FS_BLOCK : 0;
			cache.nseq++;
		} else if (r->window < fs_opts.readahead &&
		    (r->grown += end - off) >= GROW_STEP) {
			r->window *= 2;
			r->grown = 0;
		}
		cap = fs_opts.cache_bytes / 2 / (uint64_t)cache.nseq;
		if (cap > fs_opts.readahead)
			cap = fs_opts.readahead;
		cap = cap / FS_BLOCK * FS_BLOCK;
		if (r->window > cap)
			r->window = cap > FS_BLOCK ? cap : FS_BLOCK;
	} else {
		if (r->window > 0)
			cache.nseq--;
		r->window = 0;
		r->ra_end = 0;
	}
	r->reads++;
	if (end > r->next || r->window == 0)
		r->next = end;
}

/* Bytes per ranged GET ahead of a reader: a quarter of its window while
 * that is small, so several go at once, fs_opts.chunk at most. */
static uint64_t
step_of(const struct fs_reader *r)
{
	uint64_t step = r->window / 4;

	if (step > fs_opts.chunk)
		step = fs_opts.chunk;
	step = (step + FS_BLOCK - 1) / FS_BLOCK * FS_BLOCK;
	return step < FS_BLOCK ? FS_BLOCK : step;
}

/* Whether the disk cache has o's block blk. */
static int
on_disk(const struct fs_obj *o, uint64_t blk)
{
	return o->disk_key[0] != '\0' && fs_disk_has(o->disk_key,
	    blk * FS_BLOCK);
}

/*
 * Read ahead of a sequential reader, from where it last stopped to window
 * bytes past off, skipping blocks in memory or on disk, while the cache
 * has room without evicting what readers use. Caller holds mu.
 */
static void
read_ahead(struct fs_reader *r, uint64_t off)
{
	struct fs_obj *o = r->o;
	uint64_t end, at, len, step = step_of(r), blk, stop;
	struct chunk *c;

	if (r->window == 0 || o->stale)
		return;
	end = off + r->window;
	if (end > o->size || end < off)
		end = o->size;
	at = (r->ra_end > off ? r->ra_end : off) / FS_BLOCK * FS_BLOCK;
	while (at < end) {
		blk = at / FS_BLOCK;
		if (find(o, blk) != NULL || on_disk(o, blk)) {
			at += FS_BLOCK;
			continue;
		}
		len = at + step > o->size ? o->size - at : step;
		stop = next_here(o, blk + 1, (at + len + FS_BLOCK - 1) /
		    FS_BLOCK);
		if (stop * FS_BLOCK < at + len)
			len = stop * FS_BLOCK - at;
		if (!make_room(len, 1) || (c = fetch(o, at, len)) == NULL)
			break;
		c->ahead = 1;
		FS_ADD(readahead_bytes, len);
		lru_push(c);
		at += len;
	}
	if (at > r->ra_end)
		r->ra_end = at;
}

/*
 * The chunk that holds byte pos of o, held (users + 1): in memory, read
 * back from disk, or fetched now. A miss fetches this read's blocks up
 * to end, or a whole small object, or a sequential reader's first step,
 * never over blocks already here. Caller holds mu (let go meanwhile to
 * read the disk); NULL when nothing could start.
 */
static struct chunk *
chunk_at(struct fs_reader *r, uint64_t pos, uint64_t end)
{
	struct fs_obj *o = r->o;
	uint64_t blk = pos / FS_BLOCK, from = blk * FS_BLOCK, to, len, stop, own;
	struct chunk *c;
	uint8_t *buf;

	if ((c = find(o, blk)) == NULL && on_disk(o, blk)) {
		len = o->size - from < FS_BLOCK ? o->size - from : FS_BLOCK;
		buf = block_get();
		pthread_mutex_unlock(&cache.mu);
		if (buf != NULL && fs_disk_get(o->disk_key, o->url, o->size,
		    from, buf, (size_t)len) != 1) {
			pthread_mutex_lock(&cache.mu);
			block_put(buf);
			pthread_mutex_unlock(&cache.mu);
			buf = NULL;
		}
		pthread_mutex_lock(&cache.mu);
		/* Another reader may have brought the block meanwhile, from
		 * disk or (when this copy failed its check) the network. */
		if ((c = find(o, blk)) == NULL && buf != NULL) {
			make_room(len, 0);
			if ((c = chunk_new(o, from, len, NULL, buf)) != NULL) {
				c->kept = 1;
				FS_ADD(disk_hits, 1);
				buf = NULL;
			}
		}
		block_put(buf);
		if (c != NULL && c->users == 0)
			lru_unlink(c);
	} else if (c != NULL && c->r != NULL && sk__range_state(c->r) < 0) {
		/* Its range failed for a read that gave up before it did:
		 * this read asks anew, as after any failure. */
		unindex(c);
		if (c->users == 0) {
			lru_unlink(c);
			chunk_free(c);
		}
		c = NULL;
	} else if (c != NULL) {
		if (c->users == 0)
			lru_unlink(c);
		if (c->ahead)
			FS_ADD(readahead_hits, 1);
		else if (c->r != NULL)
			FS_ADD(mem_hits, 1);
	}
	if (c == NULL) {
		own = (end + FS_BLOCK - 1) / FS_BLOCK * FS_BLOCK;
		if (own > o->size)
			own = o->size;
		to = own;
		if (from == 0 && o->size <= fs_opts.chunk)
			to = o->size;
		if (r->window > 0 && to - from < step_of(r))
			to = from + step_of(r);
		if (to > o->size)
			to = o->size;
		stop = next_here(o, blk + 1, (to + FS_BLOCK - 1) / FS_BLOCK);
		if (stop * FS_BLOCK < to)
			to = stop * FS_BLOCK;
		/* No room: only the blocks this read asks for, so that the
		 * cache passes cache_mb by at most a read's span per reading
		 * thread (man page, Memory), not a step or an object each. */
		if (!make_room(to - from, 0) && to > own)
			to = own;
		if ((c = fetch(o, from, to - from)) == NULL)
			return NULL;
		FS_ADD(misses, 1);
	}
	c->ahead = 0;
	c->users++;
	going_unlink(c);	/* read again: not let go of */
	return c;
}

/*
 * A reader lets go of c: drop_behind of what a sequential reader passed,
 * let_go_whole of a file read to the end and closed; the kernel's page
 * cache holds those bytes (keep_cache; on a direct_io mount it does not,
 * and a read again fetches them again). A mount reading small files
 * otherwise filled cache_mb with copies of them, each in fresh pages (a
 * page fault for every 4 KiB: a seventh of the daemon's CPU over 10,000
 * files of 110 KB), where the fetch engine's pool now hands the same
 * buffers to the next files. Caller holds mu.
 */
static void
let_go(struct chunk *c)
{
	lru_unlink(c);
	unindex(c);
	FS_ADD(dropped, 1);
	chunk_free(c);
}

/* Whether c may be let go of now: no one holds it and its range is over
 * (done, or failed for a read that gave up on it), or it came from the
 * disk cache. */
static int
gone_now(const struct chunk *c)
{
	return c->users == 0 && (c->r == NULL || sk__range_state(c->r) != 0);
}

/*
 * A sequential reader lets go of what it has passed: the kernel's page
 * cache holds it for a read again (let_go), and the chunk's buffer goes
 * back to the fetch engine's pool for the ranges ahead, rather than every
 * range landing in fresh pages until the cache is full (a third of the
 * daemon's CPU went to those page faults). Every chunk wholly 4 MiB behind
 * the reader (the kernel's reads come a few at a time, not always in
 * order) goes as soon as it may (gone_now). The walk starts where the last
 * one stopped, or 8 MiB before where the reader turned sequential (what
 * its random reads fetched).
 * Looking only at the chunk just behind the edge, as once, missed those
 * whose read was in flight or whose range was finishing as the edge
 * passed: 1 GiB read over loopback held up to 427 MiB, in fresh pages.
 * Caller holds mu.
 */
static void
drop_behind(struct fs_reader *r, uint64_t off)
{
	uint64_t edge, at;
	struct chunk *c;

	if (r->window == 0 || off < 8 * FS_BLOCK)
		return;
	edge = off - 4 * FS_BLOCK;
	for (at = r->behind; at < edge; ) {
		if ((c = find(r->o, at / FS_BLOCK)) == NULL) {
			at = (at / FS_BLOCK + 1) * FS_BLOCK;
			continue;
		}
		if (c->off + c->len > edge || !gone_now(c))
			break;
		at = c->off + c->len;
		let_go(c);
	}
	if (at > r->behind)
		r->behind = at;
}

/*
 * A range whose bytes are all in may not be done yet (the engine has yet
 * to see its transfer end); freeing it then would cut its connection. Nor
 * may a chunk go while the reply to the file's last read still holds it
 * (fs_read_put): the kernel can send the release before that thread lets
 * go. Either waits on cache.going, and goes at a later close or when that
 * read lets go, once no one holds it and its range is done; or it is
 * evicted or read meanwhile as any other. Skipped instead, those held ones
 * stayed in the cache until evicted, and each next file took fresh pages:
 * a quarter of 10^4 small files through the link, and 2.5 s more of the
 * daemon's system time, on a busy machine.
 */
static void
sweep_going(void)
{
	struct chunk *c, *next;

	for (c = cache.going; c != NULL; c = next) {
		next = c->gnext;
		if (c->ahead)
			going_unlink(c);
		else if (gone_now(c))
			let_go(c);
	}
}

static void
let_go_whole(struct fs_reader *r)
{
	struct fs_obj *o = r->o;
	struct chunk *c;
	uint64_t blk, end;

	sweep_going();
	if (r->next < o->size || o->size == 0)
		return;
	end = (o->size + FS_BLOCK - 1) / FS_BLOCK;
	for (blk = 0; blk < end; blk++) {
		if ((c = find(o, blk)) == NULL || c->ahead || c->going)
			continue;
		blk = (c->off + c->len + FS_BLOCK - 1) / FS_BLOCK - 1;
		if (gone_now(c)) {
			let_go(c);
			continue;
		}
		c->going = 1;
		c->gprev = NULL;
		c->gnext = cache.going;
		if (cache.going != NULL)
			cache.going->gprev = c;
		cache.going = c;
	}
}

/* Keep a fetched chunk's blocks on disk. */
static void
keep(const struct chunk *c, const uint8_t *p)
{
	uint64_t at, n;

	for (at = 0; at < c->len; at += FS_BLOCK) {
		n = c->len - at < FS_BLOCK ? c->len - at : FS_BLOCK;
		fs_disk_put(c->o->disk_key, c->o->size, c->off + at, p + at,
		    (size_t)n);
	}
}

/* A reader is done with c: let go of when its file was read whole and
 * closed (cache.going), back on the LRU, or freed when it left the
 * index. Caller holds mu. */
static void
release(struct chunk *c)
{
	if (--c->users > 0)
		return;
	if (c->going && gone_now(c))
		let_go(c);
	else if (c->indexed)
		lru_push(c);
	else
		chunk_free(c);
}

/* What an error of the fetch engine is to a reader. Caller holds mu. */
static int
errno_of(struct fs_obj *o, int rc)
{
	if (rc == SK_ECHANGED) {
		/* Never the bytes of two versions: this object is done;
		 * the next open lists it again. */
		o->stale = 1;
		obj_unhash(o);
		FS_ADD(estale, 1);
		return -ESTALE;
	}
	if (rc == SK_ENOMEM)
		return -ENOMEM;
	FS_ADD(eio, 1);
	return -EIO;
}

int
fs_reader_stale(const struct fs_reader *r)
{
	return r->o->stale;
}

/*
 * Wait for the bytes of c from at up to (not including) want, or the
 * first of them when want is 0: how many of c's bytes are in (> at), 0
 * when it ended short, < 0 on failure; *ptr at c's first byte.
 */
static int64_t
bytes_of(struct chunk *c, uint64_t at, uint64_t want, uint64_t deadline,
    const void **ptr, struct sk_error *err)
{
	int64_t got;

	if (c->buf != NULL) {
		*ptr = c->buf;
		return (int64_t)c->len;
	}
	do
		got = sk__range_wait(c->r, want > at ? want - 1 : at, deadline,
		    ptr, err);
	while (got > 0 && (uint64_t)got < want && (uint64_t)got > at &&
	    sk__range_state(c->r) == 0);
	return got;
}

int64_t
fs_read_zc(struct fs_reader *r, char **bufp, size_t n, uint64_t off,
    const void **zc, void **hold)
{
	struct fs_obj *o = r->o;
	struct sk_error err;
	struct chunk *c;
	const void *ptr;
	uint64_t end, pos, deadline, t0, at, take, want;
	int64_t got;
	int rc = 0, whole;

	FS_ADD(reads, 1);
	if (hold != NULL)
		*hold = NULL;
	if (off >= o->size || n == 0)
		return 0;
	end = off + n > o->size || off + n < off ? o->size : off + n;
	t0 = now_ns();
	deadline = t0 + (uint64_t)(fs_opts.io_timeout * 1e9);
	pthread_mutex_lock(&cache.mu);
	if (o->stale) {
		pthread_mutex_unlock(&cache.mu);
		FS_ADD(estale, 1);
		return -ESTALE;
	}
	if (t0 < o->fail_until && off < o->fail_end && end > o->fail_off) {
		rc = o->fail_rc;
		pthread_mutex_unlock(&cache.mu);
		FS_ADD(eio, 1);
		return rc;
	}
	follow(r, off, end);
	drop_behind(r, off);
	for (pos = off; pos < end && rc == 0; ) {
		if ((c = chunk_at(r, pos, end)) == NULL) {
			rc = -EIO;
			FS_ADD(eio, 1);
			break;
		}
		if (pos == off)
			read_ahead(r, off);
		pthread_mutex_unlock(&cache.mu);

		at = pos - c->off;
		/* A read that one chunk holds whole is handed out in place
		 * (zc): the chunk stays held until fs_read_put. */
		whole = zc != NULL && pos == off && end <= c->off + c->len;
		want = whole ? end - c->off : 0;
		got = bytes_of(c, at, want, deadline, &ptr, &err);
		if (whole && got >= (int64_t)want) {
			*zc = (const uint8_t *)ptr + at;
			pos = end;
		} else if (got > (int64_t)at) {
			/* Copied: into a buffer made at the first copy, so
			 * that a read handed out in place allocates none. */
			take = (uint64_t)got - at;
			if (take > end - pos)
				take = end - pos;
			if (*bufp == NULL && (*bufp = malloc(n)) == NULL)
				rc = -ENOMEM;
			else
				memcpy(*bufp + (pos - off), (const uint8_t *)ptr +
				    at, (size_t)take);
			pos += take;
			whole = 0;
		} else if (got == 0) {
			rc = -EIO;
			sk_log(SK_LOG_WARN, "%s: the object ended before byte %"
			    PRIu64 " of the %" PRIu64 " its listing gave",
			    o->url, pos, o->size);
		} else
			sk_log(SK_LOG_WARN, "%s", err.msg);

		pthread_mutex_lock(&cache.mu);
		if (got > 0 && o->disk_learn && o->disk_key[0] == '\0') {
			/* The first response named the version: from now on
			 * its blocks are kept under it. */
			char v[300];

			if (sk__stream_validator(o->st, v, sizeof v) == 0)
				fs_disk_key(o->url, v, o->size, o->disk_key);
		}
		if (got >= 0 && c->r != NULL && !c->kept &&
		    got == (int64_t)c->len && fs_disk_enabled() &&
		    o->disk_key[0] != '\0') {
			/* One reader writes it, holding it meanwhile. */
			c->kept = 1;
			pthread_mutex_unlock(&cache.mu);
			keep(c, ptr);
			pthread_mutex_lock(&cache.mu);
		}
		if (got == 0)
			FS_ADD(eio, 1);
		if (got < 0) {
			rc = errno_of(o, (int)got);
			/* A failed range is asked for again by the next
			 * read; one that only needs more time goes on. */
			if (sk__range_state(c->r) < 0 || rc == -ESTALE)
				unindex(c);
			/* for FAIL_FAST_NS the same bytes fail at once */
			if (rc == -EIO) {
				o->fail_off = off;
				o->fail_end = end;
				o->fail_until = now_ns() + FAIL_FAST_NS;
				o->fail_rc = rc;
			}
		}
		if (whole && pos == end)
			*hold = c;
		else
			release(c);
	}
	pthread_mutex_unlock(&cache.mu);
	reap();
	FS_ADD(wait_ns, now_ns() - t0);
	/* Short of end only with an error, and then the error: the kernel
	 * takes a short read for the end of the file. */
	if (rc != 0) {
		if (hold != NULL && *hold != NULL) {
			fs_read_put(*hold);
			*hold = NULL;
		}
		return rc;
	}
	FS_ADD(read_bytes, pos - off);
	return (int64_t)(pos - off);
}

int64_t
fs_read(struct fs_reader *r, char *buf, size_t n, uint64_t off)
{
	return fs_read_zc(r, &buf, n, off, NULL, NULL);
}

void
fs_read_put(void *hold)
{
	if (hold == NULL)
		return;
	pthread_mutex_lock(&cache.mu);
	release(hold);
	pthread_mutex_unlock(&cache.mu);
	reap();
}

void
fs_cache_shutdown(void)
{
	struct chunk *c;

	pthread_mutex_lock(&cache.mu);
	while ((c = cache.lru_head) != NULL) {
		lru_unlink(c);
		unindex(c);
		chunk_free(c);
	}
	while (cache.nfree > 0)
		free(cache.free[--cache.nfree]);
	pthread_mutex_unlock(&cache.mu);
	reap();
}
