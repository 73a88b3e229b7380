/*
 * ref.c - the reader of gen_ref.py's reference files (format in ref.h).
 * The whole file is read at once; every tensor gets its own aligned copy.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"

static const char MAGIC[] = "SKREF1\n";
#define MAGIC_LEN 7

struct cursor {
	const unsigned char *p;
	size_t len, off;
};

static void
seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* Read a u32 at the cursor; -1 if fewer than 4 bytes are left. */
static int
get_u32(struct cursor *c, uint32_t *v)
{
	const unsigned char *b;

	if (c->len - c->off < 4)
		return (-1);
	b = c->p + c->off;
	*v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
	    (uint32_t)b[3] << 24;
	c->off += 4;
	return (0);
}

static int
read_all(const char *path, unsigned char **buf, size_t *len, char *err,
    size_t errlen)
{
	FILE *f;
	unsigned char *p = NULL, *np;
	size_t cap = 0, n = 0, got;
	int rc = -1;

	if ((f = fopen(path, "rb")) == NULL) {
		seterr(err, errlen, "%s: %s", path, strerror(errno));
		return (-1);
	}
	for (;;) {
		if (n == cap) {
			cap = cap ? cap * 2 : 1 << 20;
			if ((np = realloc(p, cap)) == NULL) {
				seterr(err, errlen, "%s: out of memory", path);
				goto out;
			}
			p = np;
		}
		got = fread(p + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		seterr(err, errlen, "%s: read error", path);
		goto out;
	}
	*buf = p;
	*len = n;
	p = NULL;
	rc = 0;
out:
	free(p);
	fclose(f);
	return (rc);
}

/* Split the config text into key=value pairs, in place. */
static int
parse_config(struct ref *r, const char *path, char *err, size_t errlen)
{
	char *line, *next, *eq, **k, **v;
	int cap = 0;

	for (line = r->config; *line != '\0'; line = next) {
		if ((next = strchr(line, '\n')) != NULL)
			*next++ = '\0';
		else
			next = line + strlen(line);
		if (*line == '\0')
			continue;
		if ((eq = strchr(line, '=')) == NULL) {
			seterr(err, errlen, "%s: config line \"%s\" has no '='",
			    path, line);
			return (-1);
		}
		*eq = '\0';
		if (r->nkeys == cap) {
			cap = cap ? cap * 2 : 32;
			if ((k = realloc(r->keys, cap * sizeof *k)) != NULL)
				r->keys = k;
			if ((v = realloc(r->values, cap * sizeof *v)) != NULL)
				r->values = v;
			if (k == NULL || v == NULL) {
				seterr(err, errlen, "%s: out of memory", path);
				return (-1);
			}
		}
		r->keys[r->nkeys] = line;
		r->values[r->nkeys++] = eq + 1;
	}
	return (0);
}

/* One record at the cursor into t. */
static int
parse_record(struct cursor *c, struct ref_tensor *t, size_t idx,
    const char *path, char *err, size_t errlen)
{
	size_t start = c->off, i;
	uint32_t namelen, ndim, d;
	const unsigned char *b;

	if (get_u32(c, &namelen) != 0 || namelen == 0 || namelen > 255 ||
	    c->len - c->off < namelen) {
		seterr(err, errlen, "%s: record %zu at byte %zu: bad or "
		    "truncated name", path, idx, start);
		return (-1);
	}
	if ((t->name = malloc(namelen + 1)) == NULL)
		goto oom;
	memcpy(t->name, c->p + c->off, namelen);
	t->name[namelen] = '\0';
	c->off += namelen;
	if (get_u32(c, &ndim) != 0 || ndim > REF_MAX_DIMS) {
		seterr(err, errlen, "%s: record %zu (%s) at byte %zu: bad or "
		    "truncated ndim", path, idx, t->name, start);
		return (-1);
	}
	t->ndim = (int)ndim;
	t->n = 1;
	for (i = 0; i < ndim; i++) {
		if (get_u32(c, &d) != 0 || d > (1u << 30) ||
		    (d > 0 && t->n > ((size_t)1 << 34) / d)) {
			seterr(err, errlen, "%s: record %zu (%s) at byte %zu: "
			    "bad or truncated dims", path, idx, t->name, start);
			return (-1);
		}
		t->dims[i] = (int)d;
		t->n *= d;
	}
	if ((c->len - c->off) / 4 < t->n) {
		seterr(err, errlen, "%s: record %zu (%s) at byte %zu: data "
		    "truncated (%zu floats, %zu bytes left)", path, idx,
		    t->name, start, t->n, c->len - c->off);
		return (-1);
	}
	if ((t->data = malloc((t->n ? t->n : 1) * sizeof(float))) == NULL)
		goto oom;
	b = c->p + c->off;
	for (i = 0; i < t->n; i++, b += 4) {
		uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 |
		    (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
		memcpy(&t->data[i], &u, 4);
	}
	c->off += t->n * 4;
	return (0);
oom:
	seterr(err, errlen, "%s: out of memory", path);
	return (-1);
}

struct ref *
ref_load(const char *path, char *err, size_t errlen)
{
	struct ref *r;
	struct cursor c = { NULL, 0, 0 };
	unsigned char *buf = NULL;
	struct ref_tensor *nt;
	size_t cap = 0, i;
	uint32_t clen;

	if ((r = calloc(1, sizeof *r)) == NULL) {
		seterr(err, errlen, "%s: out of memory", path);
		return (NULL);
	}
	if (read_all(path, &buf, &c.len, err, errlen) != 0)
		goto fail;
	c.p = buf;
	if (c.len < MAGIC_LEN || memcmp(buf, MAGIC, MAGIC_LEN) != 0) {
		seterr(err, errlen, "%s: not a reference file (no SKREF1 "
		    "magic)", path);
		goto fail;
	}
	c.off = MAGIC_LEN;
	if (get_u32(&c, &clen) != 0 || c.len - c.off < clen) {
		seterr(err, errlen, "%s: config truncated", path);
		goto fail;
	}
	if ((r->config = malloc(clen + 1)) == NULL) {
		seterr(err, errlen, "%s: out of memory", path);
		goto fail;
	}
	memcpy(r->config, buf + c.off, clen);
	r->config[clen] = '\0';
	c.off += clen;
	if (strlen(r->config) != clen) {
		seterr(err, errlen, "%s: NUL byte in the config", path);
		goto fail;
	}
	if (parse_config(r, path, err, errlen) != 0)
		goto fail;

	while (c.off < c.len) {
		if (r->nt == cap) {
			cap = cap ? cap * 2 : 256;
			if ((nt = realloc(r->t, cap * sizeof *nt)) == NULL) {
				seterr(err, errlen, "%s: out of memory", path);
				goto fail;
			}
			r->t = nt;
		}
		memset(&r->t[r->nt], 0, sizeof r->t[r->nt]);
		r->nt++;
		if (parse_record(&c, &r->t[r->nt - 1], r->nt - 1, path, err,
		    errlen) != 0)
			goto fail;
		for (i = 0; i + 1 < r->nt; i++) {
			if (strcmp(r->t[i].name, r->t[r->nt - 1].name) == 0) {
				seterr(err, errlen, "%s: record %zu: \"%s\" "
				    "appears twice", path, r->nt - 1,
				    r->t[i].name);
				goto fail;
			}
		}
	}
	free(buf);
	return (r);
fail:
	free(buf);
	ref_free(r);
	return (NULL);
}

void
ref_free(struct ref *r)
{
	size_t i;

	if (r == NULL)
		return;
	for (i = 0; i < r->nt; i++) {
		free(r->t[i].name);
		free(r->t[i].data);
	}
	free(r->t);
	free(r->keys);
	free(r->values);
	free(r->config);
	free(r);
}

const struct ref_tensor *
ref_find(const struct ref *r, const char *name)
{
	size_t i;

	for (i = 0; i < r->nt; i++) {
		if (strcmp(r->t[i].name, name) == 0)
			return (&r->t[i]);
	}
	return (NULL);
}

const char *
ref_config(const struct ref *r, const char *key)
{
	int i;

	for (i = 0; i < r->nkeys; i++) {
		if (strcmp(r->keys[i], key) == 0)
			return (r->values[i]);
	}
	return (NULL);
}
