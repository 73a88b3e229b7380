/*
 * fetch_req.c - whole-resource requests through the fetch engine: a GET of
 * a resource of unknown size (a manifest, a listing), and a request of any
 * method (a listing page, an object's metadata, an upload, a token) whose
 * final status and body its caller judges.
 *
 * Ownership: each request is one part on a stream of its own, both the
 * requester's. The requester waits until the engine let go of the part
 * (p->engine clear, not just its state final), and only then frees the
 * part and the stream, so the engine never sees either freed.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"
#include "cloud.h"
#include "fetch.h"
#include "fetch_int.h"

/* ------------------------------------------------------------------------ */
/* a whole resource of at most max bytes                                    */

int
sk__fetch_get(const char *url, size_t max, char **out, size_t *len,
    struct sk_error *err)
{
	struct sk__stream *s;
	struct part *p;
	int rc;

	*out = NULL;
	*len = 0;
	if ((rc = sk__engine_get(err)) != 0)
		return rc;
	if ((s = sk__stream_new(url, NULL)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	pthread_mutex_lock(&s->mu);
	if ((p = sk__part_new(s, 0, max, max < 65536 ? max : 65536)) == NULL) {
		pthread_mutex_unlock(&s->mu);
		sk__stream_free(s);
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	p->whole = 1;
	sk__part_submit(s, p);
	/* Until the engine let go of it, not just until its state says so. */
	while (p->engine)
		(void)sk__wait_net(s);
	pthread_mutex_unlock(&s->mu);
	if (p->state == P_FAILED)
		rc = sk_error_set(err, p->code ? p->code : SK_EIO, "%s",
		    p->err);
	else {
		p->buf[p->have] = '\0';
		*out = (char *)p->buf;
		*len = (size_t)p->have;
		p->buf = NULL;
	}
	sk__part_free(p);
	sk__stream_free(s);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* requests of any method                                                   */

int
sk__req_start(struct sk__req *r, struct sk_error *err)
{
	struct sk__stream *s;
	struct part *p;
	size_t max = r->max > 0 ? r->max : 1;
	int rc;

	r->status = 0;
	r->resp = r->resp_headers = NULL;
	r->resp_len = 0;
	r->priv = NULL;
	if ((rc = sk__engine_get(err)) != 0)
		return rc;
	if ((s = sk__stream_new(r->url, r->display)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	if (r->auth != NULL)
		s->auth = *r->auth;
	if ((p = sk__part_new(s, 0, max, max < 65536 ? max : 65536)) == NULL) {
		sk__stream_free(s);
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	p->whole = 1;
	p->req = r;
	if (r->auth != NULL && r->body_len > 0)
		sk__sha256_hex(r->body, r->body_len, p->body_sha);
	else
		memcpy(p->body_sha, EMPTY_SHA256, sizeof p->body_sha);
	r->priv = p;
	pthread_mutex_lock(&s->mu);
	sk__part_submit(s, p);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

int
sk__req_wait(struct sk__req *r, struct sk_error *err)
{
	struct part *p = r->priv;
	struct sk__stream *s;
	int rc = 0;

	if (p == NULL)
		return sk_error_set(err, SK_EINVAL, "no request in flight");
	s = p->s;
	pthread_mutex_lock(&s->mu);
	/* Until the engine let go of it, not just until its state says so. */
	while (p->engine)
		(void)sk__wait_net(s);
	pthread_mutex_unlock(&s->mu);
	if (p->state == P_FAILED)
		rc = sk_error_set(err, p->code ? p->code : SK_EIO, "%s",
		    p->err);
	else {
		p->buf[p->have] = '\0';
		r->status = p->status;
		r->resp = (char *)p->buf;
		r->resp_len = (size_t)p->have;
		r->resp_headers = p->rhdrs;
		p->buf = NULL;
		p->rhdrs = NULL;
	}
	r->priv = NULL;
	sk__part_free(p);
	sk__stream_free(s);
	return rc;
}

int
sk__fetch_request(struct sk__req *r, struct sk_error *err)
{
	int rc;

	if ((rc = sk__req_start(r, err)) != 0)
		return rc;
	return sk__req_wait(r, err);
}

const char *
sk__req_header(const struct sk__req *r, const char *name, char *buf,
    size_t n)
{
	const char *l, *end, *v, *e;
	size_t k = strlen(name);

	if (r->resp_headers == NULL || n == 0)
		return NULL;
	for (l = r->resp_headers; *l != '\0'; l = *end ? end + 1 : end) {
		end = l + strcspn(l, "\n");
		if ((size_t)(end - l) <= k || l[k] != ':' ||
		    strncasecmp(l, name, k) != 0)
			continue;
		for (v = l + k + 1; v < end && (*v == ' ' || *v == '\t'); v++)
			;
		for (e = end; e > v && (e[-1] == '\r' || e[-1] == ' '); e--)
			;
		if ((size_t)(e - v) >= n)
			return NULL;	/* cut, it would be wrong */
		memcpy(buf, v, (size_t)(e - v));
		buf[e - v] = '\0';
		return buf;
	}
	return NULL;
}

void
sk__req_free(struct sk__req *r)
{
	struct sk_error err;

	if (r->priv != NULL)
		sk__req_wait(r, &err);
	free(r->resp);
	free(r->resp_headers);
	r->resp = r->resp_headers = NULL;
	r->resp_len = 0;
}
