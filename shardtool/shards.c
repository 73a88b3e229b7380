/*
 * shards.c - the shard list from URL and manifest arguments, a reader that
 * groups adjacent tar members into samples, and option and output helpers.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


#include "shards.h"

/* ------------------------------------------------------------------------ */
/* shard lists                                                              */

static int
is_manifest(const char *url)
{
	size_t len = strlen(url);

	return len > 5 && strcmp(url + len - 5, ".json") == 0;
}

static void
push_shard(struct shard_list *l, char *url,
    const struct sk_manifest_shard *expect, size_t nclasses)
{
	l->v = xrealloc(l->v, (l->n + 1) * sizeof *l->v);
	l->v[l->n].url = url;
	l->v[l->n].expect = expect;
	l->v[l->n].nclasses = nclasses;
	l->n++;
}

void
shards_expand(const struct cmd_entry *cmd, int argc, char **argv,
    struct shard_list *out)
{
	struct sk_strlist urls = { 0 };
	struct sk_manifest *m;
	struct sk_error err;
	char *url;
	size_t i, j;

	memset(out, 0, sizeof *out);
	if (argc == 0)
		usage_error(cmd, "no URL given");
	expand_args(cmd, argc, argv, &urls);
	for (i = 0; i < urls.n; i++) {
		if (!is_manifest(urls.v[i])) {
			push_shard(out, xstrdup(urls.v[i]), NULL, 0);
			continue;
		}
		m = xcalloc(1, sizeof *m);
		if (sk_manifest_read(urls.v[i], m, &err) < 0)
			die("%s", err.msg);
		out->manifests = xrealloc(out->manifests,
		    (out->nmanifests + 1) * sizeof *out->manifests);
		out->manifests[out->nmanifests++] = m;
		for (j = 0; j < m->nshards; j++) {
			url = sk_manifest_resolve(urls.v[i], m->shards[j].url);
			if (url == NULL)
				die("%s: cannot resolve %s", urls.v[i],
				    m->shards[j].url);
			push_shard(out, url, &m->shards[j], m->nclasses);
		}
	}
	sk_strlist_free(&urls);
}

void
shards_free(struct shard_list *l)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		free(l->v[i].url);
	for (i = 0; i < l->nmanifests; i++) {
		sk_manifest_free(l->manifests[i]);
		free(l->manifests[i]);
	}
	free(l->v);
	free(l->manifests);
	memset(l, 0, sizeof *l);
}

/* ------------------------------------------------------------------------ */
/* reading samples                                                          */

static void
member_free(struct sample_member *sm)
{
	free(sm->name);
	free(sm->data);
	memset(sm, 0, sizeof *sm);
}

static void
sample_clear(struct sample *s)
{
	size_t i;

	for (i = 0; i < s->n; i++)
		member_free(&s->m[i]);
	s->n = 0;
	free(s->key);
	s->key = NULL;
}

void
sample_free(struct sample *s)
{
	sample_clear(s);
	free(s->m);
	memset(s, 0, sizeof *s);
}

/* Keep the reader's message; it already names the URL and the offset. */
static int
reader_failed(struct sample_reader *sr, int rc)
{
	sk_error_set(&sr->err, rc, "%s", sk_errmsg(sr->tar));
	sr->done = 1;
	return rc;
}

int
tar_open(const char *url, int flags, sk_tar_reader **r, struct sk_error *err)
{
	sk_source *src = NULL;
	int rc;

	*r = NULL;
	if ((rc = sk_source_open(&src, url)) < 0) {
		sk_error_set(err, rc, "%s", src != NULL ? sk_errmsg(src) :
		    sk_strerror(rc));
		sk_source_close(src);
		return rc;
	}
	/* The reader owns src from here on, also when it fails. */
	if ((rc = sk_tar_reader_open(r, src, flags)) < 0) {
		sk_error_set(err, rc, "%s", *r != NULL ? sk_errmsg(*r) :
		    sk_strerror(rc));
		sk_tar_reader_close(*r);
		*r = NULL;
	}
	return rc;
}

int
copy_member(sk_tar_reader *r, int fd, int *write_errno)
{
	char buf[65536];
	int64_t got;
	ssize_t put;
	size_t done;

	*write_errno = 0;
	while ((got = sk_tar_reader_read(r, buf, sizeof buf)) > 0) {
		for (done = 0; done < (size_t)got; done += (size_t)put) {
			put = write(fd, buf + done, (size_t)got - done);
			if (put < 0 && errno == EINTR)
				put = 0;
			else if (put < 0) {
				*write_errno = errno;
				return SK_EIO;
			}
		}
	}
	return got < 0 ? (int)got : 0;
}

int
sample_reader_open(struct sample_reader *sr, const char *url,
    int (*want)(const char *ext))
{
	memset(sr, 0, sizeof *sr);
	sr->want = want;
	sr->url = url;
	return tar_open(url, 0, &sr->tar, &sr->err);
}

void
sample_reader_close(struct sample_reader *sr)
{
	member_free(&sr->ahead);
	if (sr->tar != NULL)
		sk_tar_reader_close(sr->tar);
	sr->tar = NULL;
}

/*
 * Read the data of the current member. The buffer grows with the data that
 * arrives, not with the size the header claims, so a forged size in a
 * truncated shard ends in the reader's error rather than a huge malloc.
 */
static int
load_data(struct sample_reader *sr, struct sample_member *sm)
{
	size_t have = 0, cap = 0, want;
	uint8_t *buf = NULL, *nb;
	int64_t got;

	if (sr->want == NULL || !sr->want(sm->ext))
		return 0;
	for (;;) {
		if (have == cap) {
			want = cap == 0 ? 65536 : cap * 2;
			if (want > sm->size)
				want = sm->size + 1;	/* room to see the end */
			if ((nb = realloc(buf, want)) == NULL) {
				free(buf);
				return sk_error_set(&sr->err, SK_ENOMEM,
				    "%s: out of memory", sm->name);
			}
			buf = nb;
			cap = want;
		}
		got = sk_tar_reader_read(sr->tar, buf + have, cap - have);
		if (got < 0) {
			free(buf);
			return reader_failed(sr, (int)got);
		}
		if (got == 0)
			break;
		have += (size_t)got;
	}
	sm->data = buf;
	return 0;
}

/* Copy what the tar reader's member holds until its next call. */
static void
take_member(const struct sk_tar_member *tm, struct sample_member *sm)
{
	const char *ext;

	sk_key_split(tm->name, &ext);
	sm->name = xstrdup(tm->name);
	sm->ext = sm->name + (ext - tm->name);
	sm->size = tm->size;
	sm->header_offset = tm->header_offset;
	sm->data_offset = tm->data_offset;
	sm->data = NULL;
}

/* More members than any sample has; a hostile shard with a million
 * members under one key would otherwise cost memory and O(n^2) checks. */
#define SAMPLE_MAX_MEMBERS 1024

static int
push_member(struct sample_reader *sr, struct sample *s,
    struct sample_member *sm)
{
	if (s->n == SAMPLE_MAX_MEMBERS) {
		sr->done = 1;
		return sk_error_set(&sr->err, SK_EFORMAT, "%s: offset %llu: "
		    "sample %s has more than %d members",
		    sr->url, (unsigned long long)sm->header_offset,
		    s->key, SAMPLE_MAX_MEMBERS);
	}
	if (s->n == s->cap) {
		s->cap = s->cap == 0 ? 4 : s->cap * 2;
		s->m = xrealloc(s->m, s->cap * sizeof *s->m);
	}
	s->m[s->n++] = *sm;
	memset(sm, 0, sizeof *sm);
	return load_data(sr, &s->m[s->n - 1]);
}

int
sample_next(struct sample_reader *sr, struct sample *s)
{
	struct sk_tar_member tm;
	struct sample_member sm;
	size_t keylen;
	const char *ext;
	int rc;

	sample_clear(s);
	if (sr->done)
		return 0;
	if (!sr->have_ahead) {
		if ((rc = sk_tar_reader_next(sr->tar, &tm)) <= 0) {
			sr->done = 1;
			return rc < 0 ? reader_failed(sr, rc) : 0;
		}
		take_member(&tm, &sr->ahead);
	}
	sr->have_ahead = 0;
	keylen = sk_key_split(sr->ahead.name, &ext);
	s->key = xmalloc(keylen + 1);
	memcpy(s->key, sr->ahead.name, keylen);
	s->key[keylen] = '\0';
	if ((rc = push_member(sr, s, &sr->ahead)) < 0)
		return rc;

	for (;;) {
		if ((rc = sk_tar_reader_next(sr->tar, &tm)) <= 0) {
			sr->done = 1;
			return rc < 0 ? reader_failed(sr, rc) : 1;
		}
		/* WebDataset: a sample is the run of members with one key. */
		if (sk_key_split(tm.name, &ext) != keylen ||
		    memcmp(tm.name, s->key, keylen) != 0) {
			take_member(&tm, &sr->ahead);
			sr->have_ahead = 1;
			return 1;
		}
		take_member(&tm, &sm);
		if ((rc = push_member(sr, s, &sm)) < 0)
			return rc;
	}
}

/* ------------------------------------------------------------------------ */
/* output                                                                   */

void
flush_stdout(void)
{
	if (fflush(stdout) != 0 || ferror(stdout))
		die("stdout: %s", strerror(errno != 0 ? errno : EIO));
}
