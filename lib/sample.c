/*
 * sample.c - the one sample reader: tar members grouped into WebDataset
 * samples (the run of adjacent members that share a key), with the caps
 * that keep a hostile shard from costing more than it holds. The loader,
 * shardtool and the index writer all read samples through it.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct sk_sample_reader {
	struct sk__handle h;
	sk_tar_reader *tar;
	char *url;
	uint64_t max_bytes;
	size_t max_members;
	struct sk_sample_member ahead;	/* first member of the next sample */
	int have_ahead;
	int done;
	int pending;	/* damage found after the last sample returned */
};

static void
member_free(struct sk_sample_member *m)
{
	free(m->name);
	free(m->linkname);
	free(m->data);
	memset(m, 0, sizeof *m);
}

void
sk_sample_clear(struct sk_sample *s)
{
	size_t i;

	for (i = 0; i < s->n; i++)
		member_free(&s->m[i]);
	free(s->key);
	s->key = NULL;
	s->n = 0;
	s->offset = s->end = s->bytes = 0;
	s->too_big = 0;
	s->cut = 0;
}

void
sk_sample_free(struct sk_sample *s)
{
	sk_sample_clear(s);
	free(s->m);
	memset(s, 0, sizeof *s);
}

int
sk_sample_reader_open(sk_sample_reader **out, sk_source *src,
    const struct sk_sample_reader_opts *o)
{
	struct sk_sample_reader *r;
	int rc;

	*out = NULL;
	if ((r = calloc(1, sizeof *r)) == NULL) {
		sk_source_close(src);
		return SK_ENOMEM;
	}
	sk__handle_init(&r->h, SK__MAGIC_SAMPLE_READER);
	*out = r;
	r->max_bytes = o != NULL && o->max_sample_bytes > 0 ?
	    o->max_sample_bytes : SK_SAMPLE_MAX_BYTES;
	r->max_members = o != NULL && o->max_members > 0 ?
	    o->max_members : SK_SAMPLE_MAX_MEMBERS;
	if ((r->url = sk__strdup(src != NULL ? sk_source_url(src) : "")) ==
	    NULL) {
		sk_source_close(src);
		return sk__fatal(&r->h, SK_ENOMEM, "out of memory");
	}
	/* The tar reader owns src from here on, also when it fails. */
	rc = sk_tar_reader_open(&r->tar, src, o != NULL ? o->tar_flags : 0);
	if (rc != 0)
		return sk__fatal(&r->h, rc, "%s", r->tar != NULL ?
		    sk_errmsg(r->tar) : "out of memory");
	return 0;
}

/* Keep the tar reader's message: it names the URL and the offset. */
static int
tar_failed(struct sk_sample_reader *r, int rc)
{
	r->done = 1;
	return sk__fatal(&r->h, rc, "%s", sk_errmsg(r->tar));
}

/* Copy what the tar reader's member holds until its next call. */
static int
take(struct sk_sample_reader *r, const struct sk_tar_member *tm,
    struct sk_sample_member *m)
{
	const char *ext;

	memset(m, 0, sizeof *m);
	sk_key_split(tm->name, &ext);
	if ((m->name = sk__strdup(tm->name)) == NULL ||
	    (tm->linkname != NULL &&
	    (m->linkname = sk__strdup(tm->linkname)) == NULL)) {
		member_free(m);
		r->done = 1;
		return sk__fatal(&r->h, SK_ENOMEM, "out of memory");
	}
	m->ext = m->name + (ext - tm->name);
	m->type = tm->type;
	m->size = tm->size;
	m->header_offset = tm->header_offset;
	m->data_offset = tm->data_offset;
	return 0;
}

/*
 * Read the current member's data. The buffer grows with the bytes that
 * arrive, from at most LOAD_FIRST, so a size the header claims costs
 * nothing until the data is there (the tar reader checks sizes against
 * the file; compressed input has no such bound).
 */
#define LOAD_FIRST (4u << 20)

static int
load(struct sk_sample_reader *r, struct sk_sample_member *m)
{
	uint64_t have = 0, cap = 0, want;
	uint8_t *buf = NULL, *nb;
	int64_t got;

	while (have < m->size) {
		if (have == cap) {
			want = cap == 0 ? LOAD_FIRST : cap * 2;
			if (want > m->size)
				want = m->size;
			if (want > SIZE_MAX ||
			    (nb = realloc(buf, (size_t)want)) == NULL) {
				free(buf);
				r->done = 1;
				return sk__fatal(&r->h, SK_ENOMEM, "%s: offset "
				    "%llu: out of memory for member %s (%llu "
				    "bytes)", r->url, (unsigned long long)
				    m->header_offset, m->name,
				    (unsigned long long)m->size);
			}
			buf = nb;
			cap = want;
		}
		got = sk_tar_reader_read(r->tar, buf + have,
		    (size_t)(cap - have));
		if (got < 0) {
			free(buf);
			return tar_failed(r, (int)got);
		}
		if (got == 0)
			break;
		have += (uint64_t)got;
	}
	if (have < m->size) {
		free(buf);
		r->done = 1;
		return sk__fatal(&r->h, SK_EFORMAT, "%s: offset %llu: member "
		    "%s ends after %llu of its %llu bytes", r->url,
		    (unsigned long long)m->data_offset, m->name,
		    (unsigned long long)have, (unsigned long long)m->size);
	}
	if (buf == NULL && (buf = malloc(1)) == NULL) {
		r->done = 1;
		return sk__fatal(&r->h, SK_ENOMEM, "out of memory");
	}
	m->data = buf;
	return 0;
}

/* Read the current member's data through without keeping it. */
static int
scan(struct sk_sample_reader *r, struct sk_sample_member *m)
{
	int64_t got = sk__tar_reader_scan(r->tar);

	if (got < 0)
		return tar_failed(r, (int)got);
	m->scanned = 1;
	return 0;
}

/* Add m to s, taking it, and load its data if wanted and within the
 * sample's byte limit; a sample over it keeps no data and is too_big. */
static int
push(struct sk_sample_reader *r, struct sk_sample *s,
    struct sk_sample_member *m, sk_sample_want_fn *want, void *arg)
{
	struct sk_sample_member *nm;
	size_t i, cap;
	int how;

	if (s->n == r->max_members) {
		r->done = 1;
		sk__fatal(&r->h, SK_EFORMAT, "%s: offset %llu: sample %s has "
		    "more than %zu members", r->url, (unsigned long long)
		    m->header_offset, s->key, r->max_members);
		member_free(m);
		return r->h.err.code;
	}
	if (s->n == s->cap) {
		cap = s->cap == 0 ? 4 : s->cap * 2;
		if ((nm = realloc(s->m, cap * sizeof *nm)) == NULL) {
			member_free(m);
			r->done = 1;
			return sk__fatal(&r->h, SK_ENOMEM, "out of memory");
		}
		s->m = nm;
		s->cap = cap;
	}
	if (s->n == 0)
		s->offset = m->header_offset;
	s->end = m->data_offset + m->size;
	s->bytes = m->size > UINT64_MAX - s->bytes ? UINT64_MAX :
	    s->bytes + m->size;
	s->m[s->n++] = *m;
	memset(m, 0, sizeof *m);
	m = &s->m[s->n - 1];
	if (!s->too_big && s->bytes > r->max_bytes) {
		s->too_big = 1;
		for (i = 0; i + 1 < s->n; i++) {
			free(s->m[i].data);
			s->m[i].data = NULL;
			s->m[i].scanned = 0;
		}
	}
	if (s->too_big || m->type != SK_TAR_FILE || want == NULL ||
	    (how = want(m->ext, arg)) == 0)
		return 0;
	return how == SK_SAMPLE_SCAN ? scan(r, m) : load(r, m);
}

/* Start s with r->ahead: its key, and the member (loaded if wanted). */
static int
start(struct sk_sample_reader *r, struct sk_sample *s, size_t *keylen,
    sk_sample_want_fn *want, void *arg)
{
	const char *ext;

	r->have_ahead = 0;
	*keylen = sk_key_split(r->ahead.name, &ext);
	if ((s->key = strndup(r->ahead.name, *keylen)) == NULL) {
		member_free(&r->ahead);
		r->done = 1;
		return sk__fatal(&r->h, SK_ENOMEM, "out of memory");
	}
	return push(r, s, &r->ahead, want, arg);
}

/*
 * The tar reader failed. A member it refused for its size (it leaves that
 * member in tm) starts a sample or belongs to s: either way that sample is
 * the damaged one, so callers count it. Damage with no member, or in a
 * new sample's first header, ends s whole: it comes back with cut set, the
 * damage (and the new sample, if one began) on the next call.
 */
static int
tar_damage(struct sk_sample_reader *r, struct sk_sample *s, size_t keylen,
    const struct sk_tar_member *tm, int rc)
{
	struct sk_sample_member m;
	const char *ext;

	r->done = 1;
	if (tm->name != NULL && s->key != NULL &&
	    sk_key_split(tm->name, &ext) == keylen &&
	    memcmp(tm->name, s->key, keylen) == 0) {
		/* Its claimed size is a lie: it must not make the sample
		 * too_big and cost the members read whole before it. */
		if (take(r, tm, &m) != 0)
			return r->h.err.code;
		m.size = 0;
		if (push(r, s, &m, NULL, NULL) < 0)
			return r->h.err.code;
		return tar_failed(r, rc);
	}
	if (tm->name != NULL) {
		if (take(r, tm, &r->ahead) != 0)
			return r->h.err.code;
		r->ahead.size = 0;	/* the claim was a lie */
		r->have_ahead = 1;
	}
	if (s->key == NULL) {
		if (r->have_ahead && start(r, s, &keylen, NULL, NULL) < 0)
			return r->h.err.code;
		return tar_failed(r, rc);
	}
	r->pending = rc;
	s->cut = 1;
	return 1;
}

int
sk_sample_reader_next(sk_sample_reader *r, struct sk_sample *s,
    sk_sample_want_fn *want, void *arg)
{
	struct sk_tar_member tm = { 0 };	/* cleared per header */
	struct sk_sample_member m;
	const char *ext;
	size_t keylen = 0;
	int rc;

	if ((rc = sk__check(&r->h, SK__MAGIC_SAMPLE_READER, __func__)) != 0)
		return rc;
	sk_sample_clear(s);
	if (r->pending < 0) {
		rc = r->pending;
		r->pending = 0;
		/* The sample whose header was refused, with no data. */
		if (r->have_ahead && start(r, s, &keylen, NULL, NULL) < 0)
			return r->h.err.code;
		return tar_failed(r, rc);
	}
	if (r->done)
		return 0;
	if (!r->have_ahead) {
		if ((rc = sk_tar_reader_next(r->tar, &tm)) < 0)
			return tar_damage(r, s, 0, &tm, rc);
		if (rc == 0) {
			r->done = 1;
			return 0;
		}
		if ((rc = take(r, &tm, &r->ahead)) != 0)
			return rc;
	}
	if ((rc = start(r, s, &keylen, want, arg)) < 0)
		return rc;

	for (;;) {
		if ((rc = sk_tar_reader_next(r->tar, &tm)) < 0)
			return tar_damage(r, s, keylen, &tm, rc);
		if (rc == 0) {
			r->done = 1;
			return 1;
		}
		/* WebDataset: a sample is the run of members with one key. */
		if (sk_key_split(tm.name, &ext) != keylen ||
		    memcmp(tm.name, s->key, keylen) != 0) {
			if ((rc = take(r, &tm, &r->ahead)) != 0)
				return rc;
			r->have_ahead = 1;
			return 1;
		}
		if ((rc = take(r, &tm, &m)) != 0 ||
		    (rc = push(r, s, &m, want, arg)) < 0)
			return rc;
	}
}

int
sk_sample_reader_compressed(const sk_sample_reader *r)
{
	return r->tar != NULL && sk_tar_reader_compressed(r->tar);
}

uint64_t
sk_sample_reader_skipped(const sk_sample_reader *r)
{
	return r->tar != NULL ? sk_tar_reader_skipped(r->tar) : 0;
}

void
sk_sample_reader_close(sk_sample_reader *r)
{
	if (r == NULL)
		return;
	member_free(&r->ahead);
	sk_tar_reader_close(r->tar);
	free(r->url);
	r->h.magic = 0;
	free(r);
}
