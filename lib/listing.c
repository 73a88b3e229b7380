/*
 * listing.c - what a folder listing gives: entries whose names are one
 * path segment each, sorted and listed once, with the sizes, versions and
 * times the servers write, read without the locale.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>

#include <jansson.h>

#include "internal.h"

/* ------------------------------------------------------------------------ */
/* names                                                                    */

int
sk__entry_name_ok(const char *name, size_t len)
{
	if (len == 0 || memchr(name, '\0', len) != NULL ||
	    memchr(name, '/', len) != NULL)
		return 0;
	return !(name[0] == '.' && (len == 1 || (len == 2 && name[1] == '.')));
}

const char *
sk__entry_under(const char *key, size_t keylen, const char *prefix, int dir,
    size_t *len)
{
	size_t plen = strlen(prefix);

	/* A server was asked for the prefix; what it adds from elsewhere
	 * is not in the folder. */
	if (keylen < plen || memcmp(key, prefix, plen) != 0)
		return NULL;
	key += plen;
	keylen -= plen;
	/* A common prefix is "prefix/name/" (the delimiter ends it). */
	if (dir) {
		if (keylen == 0 || key[keylen - 1] != '/')
			return NULL;
		keylen--;
	}
	if (!sk__entry_name_ok(key, keylen))
		return NULL;
	*len = keylen;
	return key;
}

int
sk__entry_version_ok(const char *v)
{
	size_t i;

	/* It goes into a request as it is (If-Match, generation=). */
	for (i = 0; v[i] != '\0'; i++)
		if (i == sizeof ((struct sk__entry *)0)->version - 1 ||
		    v[i] <= ' ' || v[i] > '~')
			return 0;
	return 1;
}

int
sk__parse_u64(const char *s, uint64_t *v)
{
	uint64_t x = 0, d;

	if (*s == '\0')
		return -1;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		d = (uint64_t)(*s - '0');
		if (x > (UINT64_MAX - d) / 10)
			return -1;
		x = x * 10 + d;
	}
	*v = x;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* entries                                                                  */

int
sk__entries_add(struct sk__entries *e, const char *name, size_t len, int dir,
    uint64_t size, int64_t mtime, const char *version)
{
	struct sk__entry *v, *x;
	size_t cap;

	if (!sk__entry_name_ok(name, len) || !sk__entry_version_ok(version))
		return SK_EINVAL;
	if (e->n == e->cap) {
		cap = e->cap ? e->cap * 2 : 16;
		if (cap > SIZE_MAX / sizeof *v ||
		    (v = realloc(e->v, cap * sizeof *v)) == NULL)
			return SK_ENOMEM;
		e->v = v;
		e->cap = cap;
	}
	x = &e->v[e->n];
	memset(x, 0, sizeof *x);
	if ((x->name = malloc(len + 1)) == NULL)
		return SK_ENOMEM;
	memcpy(x->name, name, len);
	x->name[len] = '\0';
	x->dir = dir;
	x->size = dir ? 0 : size;
	x->mtime = mtime;
	if (!dir)
		snprintf(x->version, sizeof x->version, "%s", version);
	e->n++;
	return 0;
}

static int
entry_cmp(const void *a, const void *b)
{
	const struct sk__entry *x = a, *y = b;
	int c;

	if ((c = strcmp(x->name, y->name)) != 0)
		return c;
	if (x->dir != y->dir)
		return x->dir ? -1 : 1;	/* the folder first */
	/* The same name and kind twice (a folder's prefix on two pages, a
	 * server that repeats itself): the rest orders them, so which one
	 * stays does not depend on qsort. */
	if (x->size != y->size)
		return x->size < y->size ? -1 : 1;
	if (x->mtime != y->mtime)
		return x->mtime < y->mtime ? -1 : 1;
	return strcmp(x->version, y->version);
}

void
sk__entries_sort(struct sk__entries *e, size_t first)
{
	size_t i, k;

	if (first >= e->n || e->n - first < 2)
		return;
	qsort(e->v + first, e->n - first, sizeof *e->v, entry_cmp);
	for (i = k = first + 1; i < e->n; i++) {
		if (e->v[i].dir == e->v[k - 1].dir &&
		    strcmp(e->v[i].name, e->v[k - 1].name) == 0) {
			free(e->v[i].name);
			continue;
		}
		e->v[k++] = e->v[i];
	}
	e->n = k;
}

void
sk__entries_free(struct sk__entries *e)
{
	size_t i;

	for (i = 0; i < e->n; i++)
		free(e->v[i].name);
	free(e->v);
	e->v = NULL;
	e->n = e->cap = 0;
}

/* ------------------------------------------------------------------------ */
/* times                                                                    */

/* n decimal digits at s, or -1. */
static int
digits(const char *s, int n)
{
	int v = 0, i;

	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

/* A UTC calendar time into *t: 0, or -1 when a field is out of range
 * (timegm would carry a 31 April into May). */
static int
utc(int year, int mon, int mday, int hour, int min, int sec, int64_t *t)
{
	static const int mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31,
	    30, 31 };
	struct tm tm;
	int leap;

	if (year < 0 || mon < 1 || mon > 12 || mday < 1 || hour < 0 ||
	    hour > 23 || min < 0 || min > 59 || sec < 0 || sec > 60)
		return -1;
	leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
	if (mday > mdays[mon - 1] + (mon == 2 && leap))
		return -1;
	memset(&tm, 0, sizeof tm);
	tm.tm_year = year - 1900;
	tm.tm_mon = mon - 1;
	tm.tm_mday = mday;
	tm.tm_hour = hour;
	tm.tm_min = min;
	tm.tm_sec = sec;	/* a leap second is the next minute's first */
	*t = (int64_t)timegm(&tm);
	return 0;
}

/*
 * RFC 3339 (GCS "updated", S3 LastModified):
 * "2009-10-12T17:50:30.000Z", the fraction optional, "Z" or "+hh:mm".
 */
int64_t
sk__time_rfc3339(const char *s)
{
	const char *p;
	int64_t t;
	int oh, om;

	if (strlen(s) < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' &&
	    s[10] != 't' && s[10] != ' ') || s[13] != ':' || s[16] != ':' ||
	    utc(digits(s, 4), digits(s + 5, 2), digits(s + 8, 2),
	    digits(s + 11, 2), digits(s + 14, 2), digits(s + 17, 2), &t) != 0)
		return 0;
	p = s + 19;
	if (*p == '.') {
		if (p[1] < '0' || p[1] > '9')
			return 0;
		for (p++; *p >= '0' && *p <= '9'; p++)
			;
	}
	if ((*p == 'Z' || *p == 'z') && p[1] == '\0')
		return t;
	if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':' &&
	    (oh = digits(p + 1, 2)) >= 0 && oh <= 23 &&
	    (om = digits(p + 4, 2)) >= 0 && om <= 59)
		return *p == '+' ? t - (oh * 3600 + om * 60) :
		    t + (oh * 3600 + om * 60);
	return 0;
}

/* RFC 9110 5.6.7 IMF-fixdate (nginx's "mtime"):
 * "Wed, 25 Nov 2026 16:30:00 GMT". */
int64_t
sk__time_http(const char *s)
{
	static const char days[] = "MonTueWedThuFriSatSun";
	static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
	const char *m;
	int64_t t;
	int i;

	if (strlen(s) != 29 || s[3] != ',' || s[4] != ' ' || s[7] != ' ' ||
	    s[11] != ' ' || s[16] != ' ' || s[19] != ':' || s[22] != ':' ||
	    strcmp(s + 25, " GMT") != 0)
		return 0;
	for (i = 0; i < 7 && memcmp(s, days + 3 * i, 3) != 0; i++)
		;
	for (m = months; *m != '\0' && memcmp(s + 8, m, 3) != 0; m += 3)
		;
	if (i == 7 || *m == '\0' ||
	    utc(digits(s + 12, 4), (int)(m - months) / 3 + 1, digits(s + 5, 2),
	    digits(s + 17, 2), digits(s + 20, 2), digits(s + 23, 2), &t) != 0)
		return 0;
	return t;
}

/* ------------------------------------------------------------------------ */
/* a listing's JSON, apart from the heap                                    */

/*
 * nginx sends a folder as one JSON document, and its tree (jansson:
 * about 1 KB a name) was spread through the heap between the names a
 * long-lived process keeps from it: after a folder of 100,000 names
 * shardfs's heap held 146 MB, 42 MB of it in use and the rest holes no
 * trim gives back. A process that keeps listings (shardfs) installs
 * this allocator for jansson: then, while a thread parses a listing, its
 * tree is built in a scratch area of the thread's own, mapped for the
 * parse and unmapped whole after it; everywhere else it is malloc.
 * Only a parse whose values all die inside it may use the scratch (no
 * json_dumps, nothing kept).
 */
struct scratch {
	struct scratch *next;
	size_t used, cap, map;	/* cap bytes of data, map bytes mapped */
	max_align_t data[];
};

#define SCRATCH_BLOCK	((size_t)4 << 20)

static int scratch_installed;
static __thread struct scratch *scratch;
static __thread int scratch_on;

static void *
scratch_alloc(size_t n)
{
	struct scratch *s = scratch;
	size_t need, map;
	void *p;

	if (!scratch_on)
		return malloc(n);
	if (n > SIZE_MAX / 2)
		return NULL;
	need = (n + 15) & ~(size_t)15;
	if (s == NULL || s->cap - s->used < need) {
		map = need + sizeof *s > SCRATCH_BLOCK ? need + sizeof *s :
		    SCRATCH_BLOCK;
		p = mmap(NULL, map, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
		s = p;
		s->next = scratch;
		s->used = 0;
		s->map = map;
		s->cap = map - sizeof *s;
		scratch = s;
	}
	p = (char *)s->data + s->used;
	s->used += need;
	return p;
}

static void
scratch_free(void *p)
{
	const struct scratch *s;

	for (s = scratch; s != NULL; s = s->next)
		if ((const char *)p >= (const char *)s->data &&
		    (const char *)p < (const char *)s->data + s->cap)
			return;		/* goes with its area */
	free(p);
}

void
sk__json_scratch_install(void)
{
	json_set_alloc_funcs(scratch_alloc, scratch_free);
	__atomic_store_n(&scratch_installed, 1, __ATOMIC_RELEASE);
}

void
sk__json_scratch_begin(void)
{
	scratch_on = __atomic_load_n(&scratch_installed, __ATOMIC_ACQUIRE);
}

void
sk__json_scratch_end(void)
{
	struct scratch *s;

	scratch_on = 0;
	while ((s = scratch) != NULL) {
		scratch = s->next;
		munmap(s, s->map);
	}
}
