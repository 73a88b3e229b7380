/*
 * pack.c - the packing engine: ordered parallel conversion, shard rotation
 * within --max-count and --max-size, the manifest, progress and the summary.
 *
 * Threads: -j workers call ds->produce() for items claimed in order into a
 * ring of slots; the main thread writes the slots in item order, so the
 * shards do not depend on -j. Ownership: a slot belongs to the worker that
 * claimed it until ready is set, then to the writer until it clears ready.
 * All of next, written and ready are guarded by mu.
 *
 * To a bucket (-o gs://... or s3://...), each shard is written in a local
 * staging folder and handed to the uploader thread when it closes; the
 * uploader stores it and deletes the local copy while the next shards are
 * packed. The manifest goes up last, once every shard is in the bucket.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pack.h"
#include "upload.h"

#define MAX_REASONS 16
#define MAX_SKIP_WARNINGS 20

struct reason {
	const char *why;
	uint64_t n;
};

struct engine {
	const struct pack_opts *o;
	struct pack_dataset *ds;
	size_t *order;			/* item of each position */
	size_t n;

	/* the ring: guarded by mu */
	struct pack_sample *slots;
	int *ready;
	size_t window;
	size_t next, written;
	pthread_mutex_t mu;
	pthread_cond_t cv_ready, cv_space;

	/* the writer's own state */
	sk_tar_writer *w;
	char *path;			/* of the open shard */
	char *url;			/* path as the manifest names it */
	const char *mpath;		/* the manifest */
	size_t mdir_len;		/* length of its folder, with '/' */
	const char *prefix;		/* pattern before "%NNd" */
	const char *suffix;		/* pattern after it */
	int width;
	uint64_t shard_samples, shard_bytes, nshards;
	struct sk_manifest man;
	uint64_t samples, bytes;
	uint64_t *class_counts;
	struct reason converted[MAX_REASONS], skipped[MAX_REASONS];
	uint64_t nskipped;
	double t0, last_progress;
	int progress;

	/* to a bucket */
	int remote;
	char *rpath;			/* the open shard's URL */
	struct uploader *up;
	uint64_t unchanged;		/* shards already there, not sent */
};

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------------ */
/* what datasets call                                                       */

void
pack_add(struct pack_sample *s, const char *ext, uint8_t *data, size_t size)
{
	struct pack_member *m;

	if (s->nm == PACK_MAX_MEMBERS)
		die("internal error: too many members in sample %s", s->key);
	m = &s->m[s->nm++];
	snprintf(m->ext, sizeof m->ext, "%s", ext);
	m->data = data;
	m->size = size;
}

void
pack_add_label(struct pack_sample *s, int label)
{
	char buf[16];
	int n;

	s->label = label;
	n = snprintf(buf, sizeof buf, "%d", label);
	pack_add(s, "cls", (uint8_t *)xstrdup(buf), (size_t)n);
}

int
pack_skip(struct pack_sample *s, const char *reason, const char *fmt, ...)
{
	va_list ap;

	s->skipped = reason;
	va_start(ap, fmt);
	vsnprintf(s->detail, sizeof s->detail, fmt, ap);
	va_end(ap);
	return 0;
}

void
pack_error(struct pack_sample *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->detail, sizeof s->detail, fmt, ap);
	va_end(ap);
}

/* The length of the UTF-8 sequence at p (RFC 3629), or 0 if invalid. */
static size_t
utf8_len(const unsigned char *p)
{
	size_t n, i;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		n = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		n = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		n = 4;
	else
		return 0;
	for (i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	if ((n == 3 && p[0] == 0xe0 && p[1] < 0xa0) ||
	    (n == 3 && p[0] == 0xed && p[1] >= 0xa0) ||
	    (n == 4 && p[0] == 0xf0 && p[1] < 0x90) ||
	    (n == 4 && p[0] == 0xf4 && p[1] >= 0x90))
		return 0;
	return n;
}

size_t
json_quote(char *dst, size_t cap, const char *src)
{
	const unsigned char *p = (const unsigned char *)src;
	size_t n = 0, k, i;
	char esc[8];

#define PUT(c) do { if (n + 1 < cap) dst[n] = (c); n++; } while (0)
	PUT('"');
	while (*p != '\0') {
		if (*p == '"' || *p == '\\') {
			PUT('\\');
			PUT((char)*p++);
			continue;
		}
		if (*p < 0x20) {
			snprintf(esc, sizeof esc, "\\u%04x", *p++);
			for (i = 0; esc[i] != '\0'; i++)
				PUT(esc[i]);
			continue;
		}
		/* JSON is UTF-8: a byte that is not becomes U+FFFD. */
		if ((k = utf8_len(p)) == 0) {
			for (i = 0; i < 6; i++)
				PUT("\\ufffd"[i]);
			p++;
			continue;
		}
		while (k-- > 0)
			PUT((char)*p++);
	}
	PUT('"');
#undef PUT
	if (cap > 0)
		dst[n < cap ? n : cap - 1] = '\0';
	return n;
}

/* ------------------------------------------------------------------------ */
/* the output pattern                                                       */

/*
 * A local -o whose folder does not exist: make it, as a user expects.
 * What cannot be made is left to the shard's own open, whose message
 * names the file (a plain file in the way, a folder without w).
 */
static void
make_parent(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir, *p;

	if (slash == NULL || slash == path)
		return;
	dir = xstrdup(path);
	dir[slash - path] = '\0';
	for (p = dir + 1; ; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;

		*p = '\0';
		if (mkdir(dir, 0777) != 0 && errno != EEXIST)
			break;
		*p = c;
		if (c == '\0')
			break;
	}
	free(dir);
}

/* Split "DIR/name-%06d.tar" around its one integer conversion. */
static void
parse_pattern(struct engine *e)
{
	const char *p = e->o->pattern, *pct = NULL, *q;
	char *prefix;

	for (q = p; *q != '\0'; q++) {
		if (*q != '%')
			continue;
		if (pct != NULL)
			usage_error("-o %s: want exactly one %%d, as in "
			    "'out/name-%%06d.tar'", p);
		pct = q;
	}
	if (pct == NULL)
		usage_error("-o %s: no %%d for the shard number, as in "
		    "'out/name-%%06d.tar'", p);
	q = pct + 1;
	if (*q == '0')
		q++;
	e->width = 0;
	while (*q >= '0' && *q <= '9')
		e->width = e->width * 10 + (*q++ - '0');
	if (*q != 'd' || e->width > 12)
		usage_error("-o %s: the shard number must be %%d or "
		    "%%0Nd", p);
	/* One folder holds the shards and their manifest. */
	if (strchr(q, '/') != NULL)
		usage_error("-o %s: the shard number goes in the file name, "
		    "not a folder, as in 'out/name-%%06d.tar'", p);
	prefix = xmalloc((size_t)(pct - p) + 1);
	memcpy(prefix, p, (size_t)(pct - p));
	prefix[pct - p] = '\0';
	e->prefix = prefix;
	e->suffix = q + 1;
}

static char *
shard_path(const struct engine *e, uint64_t i)
{
	char *s;

	if (asprintf(&s, "%s%0*llu%s", e->prefix, e->width,
	    (unsigned long long)i, e->suffix) < 0)
		die("out of memory");
	return s;
}

/* NAME.json beside the shards: the pattern's name up to the number. */
static char *
manifest_path(const struct engine *e)
{
	const char *base = strrchr(e->prefix, '/');
	size_t dirlen = base ? (size_t)(base - e->prefix) + 1 : 0;
	size_t len = strlen(e->prefix);
	char *s;

	if (e->o->manifest != NULL)
		return xstrdup(e->o->manifest);
	while (len > dirlen && strchr("-_.", e->prefix[len - 1]) != NULL)
		len--;
	if (len == dirlen) {
		if (asprintf(&s, "%.*sshards.json", (int)dirlen,
		    e->prefix) < 0)
			die("out of memory");
	} else if (asprintf(&s, "%.*s.json", (int)len, e->prefix) < 0)
		die("out of memory");
	return s;
}

/* ------------------------------------------------------------------------ */
/* the writer                                                               */

static void
count_reason(struct reason *v, const char *why)
{
	int i;

	for (i = 0; i < MAX_REASONS && v[i].why != NULL; i++)
		if (strcmp(v[i].why, why) == 0)
			break;
	if (i == MAX_REASONS)
		i = MAX_REASONS - 1;	/* lump the rare rest together */
	if (v[i].why == NULL)
		v[i].why = why;
	v[i].n++;
}

static void
progress(struct engine *e, int final)
{
	double t = now(), dt = t - e->t0;

	if (!e->progress || (!final && t - e->last_progress < 0.25))
		return;
	e->last_progress = t;
	fprintf(stderr, "\r%s %s: %llu/%zu samples, %llu shards, %.1f MB, "
	    "%.0f samples/s%s", e->ds->name, e->ds->split,
	    (unsigned long long)(e->samples + e->nskipped), e->n,
	    (unsigned long long)(e->nshards + (e->w != NULL)),
	    (e->bytes + e->shard_bytes) / 1e6,
	    dt > 0 ? (e->samples + e->nskipped) / dt : 0.0,
	    final ? "\n" : "\033[K");
}

/* The open shard as the manifest names it: wids resolves a relative URL
 * against the manifest's folder, so beside it a bare name will do. */
static const char *
manifest_url(struct engine *e)
{
	const char *path = e->remote ? e->rpath : e->path;
	const char *base = strrchr(path, '/');
	size_t dir = base ? (size_t)(base - path) + 1 : 0;

	free(e->url);
	if (e->mdir_len == dir && strncmp(path, e->mpath, dir) == 0)
		e->url = xstrdup(path + dir);
	else if (path[0] == '/' || e->remote)
		e->url = xstrdup(path);
	else {
		char *cwd = getcwd(NULL, 0);

		if (cwd == NULL || asprintf(&e->url, "%s/%s", cwd,
		    e->path) < 0)
			die("cannot name %s in the manifest: %s", e->path,
			    strerror(errno));
		free(cwd);
	}
	return e->url;
}

static void
close_shard(struct engine *e)
{
	struct sk_shard_info info;
	struct sk_error err;

	if (sk_tar_writer_close(e->w, &info, &err) != 0) {
		e->w = NULL;
		die("%s", err.msg);
	}
	e->w = NULL;
	if (sk_manifest_add_shard(&e->man, manifest_url(e), e->shard_samples,
	    info.filesize, info.md5) != 0)
		die("out of memory");
	e->bytes += info.filesize;
	e->shard_bytes = 0;	/* counted in bytes now, not twice */
	e->nshards++;
	if (e->remote) {
		uploader_add(e->up, e->path, e->rpath, info.filesize);
		free(e->rpath);
		e->rpath = NULL;
	} else
		free(e->path);
	e->path = NULL;
}

static void
open_shard(struct engine *e)
{
	struct sk_tar_writer_opts wo = { .mtime = e->o->mtime,
	    .fsync = e->o->fsync };

	char *name = shard_path(e, e->nshards);

	if (e->remote) {
		/* Written in the staging folder under its own name. */
		e->rpath = name;
		e->path = stage_path(e->up, name);
	} else
		e->path = name;
	if (sk_tar_writer_open(&e->w, e->path, &wo) != 0) {
		const char *msg = sk_errmsg(e->w);

		warn("%s", msg);
		sk_tar_writer_abort(e->w);
		e->w = NULL;
		exit(1);
	}
	e->shard_samples = 0;
	e->shard_bytes = SK_TAR_TRAILER_BYTES;
}

/* Write one sample, starting a new shard first when it would not fit. */
static void
write_sample(struct engine *e, struct pack_sample *s)
{
	uint64_t need = 0;
	char name[PACK_KEY_MAX + 24];
	int i;

	for (i = 0; i < s->nm; i++) {
		snprintf(name, sizeof name, "%s.%s", s->key, s->m[i].ext);
		need += sk_tar_member_bytes(name, s->m[i].size);
	}
	if (e->w != NULL && e->shard_samples > 0 &&
	    (e->shard_samples >= e->o->maxcount ||
	    e->shard_bytes + need > e->o->maxsize))
		close_shard(e);
	if (e->w == NULL)
		open_shard(e);
	for (i = 0; i < s->nm; i++) {
		snprintf(name, sizeof name, "%s.%s", s->key, s->m[i].ext);
		if (sk_tar_writer_add(e->w, name, s->m[i].data,
		    s->m[i].size) != 0) {
			warn("%s", sk_errmsg(e->w));
			sk_tar_writer_abort(e->w);
			e->w = NULL;
			die("stopped; %llu complete shards were written and no "
			    "manifest", (unsigned long long)e->nshards);
		}
	}
	/* need was an upper bound (PAX headers); keep the real size. */
	e->shard_bytes = sk_tar_writer_bytes(e->w) + SK_TAR_TRAILER_BYTES;
	e->shard_samples++;
	e->samples++;
	if (s->label >= 0 && (size_t)s->label < e->ds->nclasses)
		e->class_counts[s->label]++;
	if (s->converted != NULL)
		count_reason(e->converted, s->converted);
}

static void
free_sample(struct pack_sample *s)
{
	int i;

	for (i = 0; i < s->nm; i++)
		free(s->m[i].data);
	s->nm = 0;
}

/* Handle the sample at the next position: write it or count its skip. */
static void
consume(struct engine *e, struct pack_sample *s, int rc)
{
	if (rc < 0) {
		if (e->w != NULL)
			sk_tar_writer_abort(e->w);
		die("%s", s->detail);
	}
	if (s->skipped != NULL) {
		if (e->o->strict) {
			if (e->w != NULL)
				sk_tar_writer_abort(e->w);
			die("%s (%s; stopping because of --strict)", s->detail,
			    s->skipped);
		}
		if (e->nskipped < MAX_SKIP_WARNINGS)
			warn("skipping %s", s->detail);
		else if (e->nskipped == MAX_SKIP_WARNINGS)
			warn("more samples skipped; the summary counts them");
		e->nskipped++;
		count_reason(e->skipped, s->skipped);
	} else
		write_sample(e, s);
	free_sample(s);
	progress(e, 0);
}

/* ------------------------------------------------------------------------ */
/* the workers                                                              */

static void
produce(struct engine *e, size_t pos, struct pack_sample *s, int *rc)
{
	memset(s, 0, offsetof(struct pack_sample, detail));
	s->detail[0] = '\0';
	s->label = -1;
	*rc = e->ds->produce(e->ds, e->o, e->order[pos], s);
}

static void *
worker(void *arg)
{
	struct engine *e = arg;
	size_t pos;
	int rc;

	pthread_mutex_lock(&e->mu);
	for (;;) {
		while (e->next < e->n && e->next >= e->written + e->window)
			pthread_cond_wait(&e->cv_space, &e->mu);
		if (e->next >= e->n)
			break;
		pos = e->next++;
		pthread_mutex_unlock(&e->mu);
		produce(e, pos, &e->slots[pos % e->window], &rc);
		pthread_mutex_lock(&e->mu);
		/* ready holds rc + 1 so that 0 still means "not yet". */
		e->ready[pos % e->window] = rc < 0 ? rc : rc + 1;
		pthread_cond_broadcast(&e->cv_ready);
	}
	pthread_mutex_unlock(&e->mu);
	return NULL;
}

static void
run_parallel(struct engine *e)
{
	pthread_t *tids;
	size_t pos, slot;
	int i, r;

	e->window = (size_t)e->o->workers * 16;
	e->slots = xcalloc(e->window, sizeof *e->slots);
	e->ready = xcalloc(e->window, sizeof *e->ready);
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv_ready, NULL);
	pthread_cond_init(&e->cv_space, NULL);
	tids = xcalloc((size_t)e->o->workers, sizeof *tids);
	for (i = 0; i < e->o->workers; i++)
		if ((errno = pthread_create(&tids[i], NULL, worker, e)) != 0)
			die("cannot start a thread: %s", strerror(errno));
	for (pos = 0; pos < e->n; pos++) {
		slot = pos % e->window;
		pthread_mutex_lock(&e->mu);
		while (e->ready[slot] == 0)
			pthread_cond_wait(&e->cv_ready, &e->mu);
		r = e->ready[slot];
		pthread_mutex_unlock(&e->mu);
		/* On a fatal error consume() exits; the workers go with it. */
		consume(e, &e->slots[slot], r < 0 ? r : r - 1);
		pthread_mutex_lock(&e->mu);
		e->ready[slot] = 0;
		e->written = pos + 1;
		pthread_cond_broadcast(&e->cv_space);
		pthread_mutex_unlock(&e->mu);
	}
	for (i = 0; i < e->o->workers; i++)
		pthread_join(tids[i], NULL);
	free(tids);
	free(e->slots);
	free(e->ready);
}

/* ------------------------------------------------------------------------ */
/* the run                                                                  */

static void
make_order(struct engine *e)
{
	uint64_t state = e->o->seed;
	size_t i, j, t;

	e->order = xmalloc((e->n ? e->n : 1) * sizeof *e->order);
	for (i = 0; i < e->n; i++)
		e->order[i] = i;
	if (!e->o->shuffle)
		return;
	/* Fisher-Yates with a fixed generator: the same seed, the same order
	 * on every machine. */
	for (i = e->n; i > 1; i--) {
		j = (size_t)(splitmix64(&state) % i);
		t = e->order[i - 1];
		e->order[i - 1] = e->order[j];
		e->order[j] = t;
	}
}

static void
print_reasons(FILE *f, const char *title, const struct reason *v,
    uint64_t total)
{
	int i;

	fprintf(f, "  %s: %llu", title, (unsigned long long)total);
	for (i = 0; i < MAX_REASONS && v[i].why != NULL; i++)
		fprintf(f, "%s%llu %s", i ? ", " : " (",
		    (unsigned long long)v[i].n, v[i].why);
	fprintf(f, "%s\n", total ? ")" : "");
}

/* Whether an object is at url (its open answers). */
static int
remote_exists(const char *url)
{
	sk_source *s;
	int rc;

	rc = sk_source_open(&s, url);
	sk_source_close(s);
	return rc == 0;
}

static void
summary(struct engine *e, const char *mpath)
{
	double dt = now() - e->t0;
	uint64_t nconv = 0;
	struct stat st;
	char *next;
	int i;

	/* With --json -, standard output holds the JSON alone. */
	FILE *f = e->o->json != NULL && strcmp(e->o->json, "-") == 0 ?
	    stderr : stdout;

	for (i = 0; i < MAX_REASONS; i++)
		nconv += e->converted[i].n;
	fprintf(f, "packed %s %s: %llu samples into %llu shard%s, %.1f MB, in "
	    "%.2f s (%.0f samples/s)\n", e->ds->name, e->ds->split,
	    (unsigned long long)e->samples, (unsigned long long)e->nshards,
	    e->nshards == 1 ? "" : "s",
	    e->bytes / 1e6, dt, dt > 0 ? e->samples / dt : 0.0);
	fprintf(f, "  manifest: %s\n", mpath);
	if (e->remote)
		fprintf(f, "  uploaded: %llu shard%s; %llu already in the "
		    "bucket with the same size and MD5, not sent\n",
		    (unsigned long long)(e->nshards - e->unchanged),
		    e->nshards - e->unchanged == 1 ? "" : "s",
		    (unsigned long long)e->unchanged);
	print_reasons(f, "converted", e->converted, nconv);
	print_reasons(f, "skipped", e->skipped, e->nskipped);
	/* A shard from an earlier, longer run would look like part of this
	 * dataset to a glob or a folder listing. Say so rather than delete
	 * a user's file. */
	next = shard_path(e, e->nshards);
	if (e->remote ? remote_exists(next) : stat(next, &st) == 0)
		warn("%s is left from an earlier run and is not in %s", next,
		    mpath);
	free(next);
}

/* The reasons a sample is skipped (pack_skip's first words), and their
 * --json names; every one is written, zeros included. */
static const char *const skip_reasons[][2] = {
	{ "bad label", "bad_label" },
	{ "missing label", "missing_label" },
	{ "unreadable file", "unreadable_file" },
	{ "undecodable image", "undecodable_image" },
	{ "over the pixel limit", "over_pixel_limit" },
};
#define NSKIP (sizeof skip_reasons / sizeof skip_reasons[0])

static uint64_t
reason_count(const struct reason *v, const char *why)
{
	int i;

	for (i = 0; i < MAX_REASONS && v[i].why != NULL; i++)
		if (strcmp(v[i].why, why) == 0)
			return v[i].n;
	return 0;
}

static void
write_json(struct engine *e, const char *mpath)
{
	const struct pack_opts *o = e->o;
	const char *names[NSKIP];
	uint64_t counts[NSKIP], nconv = 0;
	double dt = now() - e->t0;
	struct cli_json *j;
	size_t i;

	for (i = 0; i < NSKIP; i++) {
		names[i] = skip_reasons[i][1];
		counts[i] = reason_count(e->skipped, skip_reasons[i][0]);
	}
	for (i = 0; i < MAX_REASONS; i++)
		nconv += e->converted[i].n;
	j = cli_json_open(o->json);
	cli_json_object(j, "config");
	cli_json_str(j, "source", o->source);
	cli_json_str(j, "dataset", e->ds->name);
	cli_json_str(j, "split", e->ds->split);
	cli_json_str(j, "output", o->pattern);
	cli_json_str(j, "manifest", mpath);
	cli_json_uint(j, "max_count", o->maxcount);
	cli_json_uint(j, "max_size_bytes", o->maxsize);
	if (o->shuffle)
		cli_json_uint(j, "seed", o->seed);
	else
		cli_json_null(j, "seed");
	cli_json_int(j, "workers", o->workers);
	cli_json_bool(j, "strict", o->strict);
	cli_json_end(j);
	cli_json_object(j, "result");
	cli_json_uint(j, "samples", e->samples);
	cli_json_uint(j, "shards", e->nshards);
	cli_json_uint(j, "unchanged_shards", e->unchanged);
	cli_json_uint(j, "bytes", e->bytes);
	cli_json_skips(j, counts, names, (int)NSKIP);
	cli_json_uint(j, "converted", nconv);
	cli_json_real(j, "wall_seconds", dt);
	cli_json_real(j, "images_per_second", dt > 0 ? e->samples / dt : 0);
	cli_json_real(j, "bytes_per_second", dt > 0 ? e->bytes / dt : 0);
	cli_json_end(j);
	cli_json_close(j);
}

int
pack_run(const struct pack_opts *o, struct pack_dataset *ds)
{
	struct engine e;
	struct sk_error err;
	char *mpath;
	size_t pos;
	int rc;

	memset(&e, 0, sizeof e);
	e.o = o;
	e.ds = ds;
	e.n = ds->nitems;
	e.progress = o->progress >= 0 ? o->progress : isatty(2);
	parse_pattern(&e);
	mpath = manifest_path(&e);
	e.remote = is_bucket_url(o->pattern);
	if (e.remote != is_bucket_url(mpath))
		usage_error("--manifest %s: put the manifest where the shards "
		    "go (%s)", mpath, o->pattern);
	/* A manifest from an earlier run would describe shards this run is
	 * about to replace; until this run writes its own, there is none. */
	if (e.remote) {
		if (strrchr(o->pattern, '/') == strstr(o->pattern, "://") + 2)
			usage_error("-o %s: want gs://BUCKET/name-%%06d.tar",
			    o->pattern);
		if (sk_object_delete(mpath, &err) != 0 && err.code != SK_ENOENT)
			die("%s", err.msg);
		e.up = uploader_start("pack");
	} else {
		make_parent(e.prefix);
		make_parent(mpath);
		if (unlink(mpath) != 0 && errno != ENOENT && errno != ENOTDIR)
			die("%s: %s", mpath, strerror(errno));
	}
	e.mpath = mpath;
	e.mdir_len = strrchr(mpath, '/') ? (size_t)(strrchr(mpath, '/') -
	    mpath) + 1 : 0;
	e.class_counts = xcalloc(ds->nclasses, sizeof *e.class_counts);
	make_order(&e);
	e.t0 = now();

	if (o->workers <= 1) {
		struct pack_sample *s = xmalloc(sizeof *s);

		for (pos = 0; pos < e.n; pos++) {
			produce(&e, pos, s, &rc);
			consume(&e, s, rc);
		}
		free(s);
	} else
		run_parallel(&e);
	if (e.w != NULL)
		close_shard(&e);
	progress(&e, 1);
	if (e.samples == 0)
		die("no samples to pack: all %zu were skipped", e.n);
	if (e.remote)
		uploader_finish(e.up, e.progress);

	e.man.classes = ds->classes;
	e.man.nclasses = ds->nclasses;
	e.man.class_counts = e.class_counts;
	{
		char extra[512], name[64], split[64];

		json_quote(name, sizeof name, ds->name);
		json_quote(split, sizeof split, ds->split);
		snprintf(extra, sizeof extra, "{\"dataset\": %s, \"split\": %s, "
		    "\"samples\": %llu, \"skipped\": %llu}", name, split,
		    (unsigned long long)e.samples,
		    (unsigned long long)e.nskipped);
		e.man.info_extra = xstrdup(extra);
	}
	if (e.remote) {
		/* Last, when every shard it names is in the bucket. */
		char *local = stage_path(e.up, mpath);

		if (sk_manifest_write(local, &e.man, &err) != 0 ||
		    sk_object_put_file(mpath, local, &err) != 0)
			die("%s; the %llu shards are in the bucket", err.msg,
			    (unsigned long long)e.nshards);
		unlink(local);
		free(local);
		e.unchanged = e.up->unchanged;
		uploader_free(e.up);
	} else if (sk_manifest_write(mpath, &e.man, &err) != 0)
		die("%s", err.msg);
	summary(&e, mpath);
	if (fflush(stdout) != 0 || ferror(stdout))
		die("stdout: %s", strerror(errno));
	if (o->json != NULL)
		write_json(&e, mpath);

	/* The classes belong to the dataset. */
	e.man.classes = NULL;
	e.man.nclasses = 0;
	e.man.class_counts = NULL;
	sk_manifest_free(&e.man);
	free(e.class_counts);
	free(e.url);
	free(e.order);
	free((char *)e.prefix);
	free(mpath);
	return 0;
}
