/*
 * upload.c - the uploader pack and cp share (see upload.h).
 *
 * At most UPLOAD_QUEUE staged objects wait for the uploader thread;
 * everything in struct uploader is guarded by its mu.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "upload.h"

/* The staging folder goes with the process, even when it dies. */
static char *stage_dir;

static void
stage_cleanup(void)
{
	char cmd_path[4096];
	struct dirent *d;
	DIR *dir;

	if (stage_dir == NULL || (dir = opendir(stage_dir)) == NULL)
		return;
	while ((d = readdir(dir)) != NULL) {
		/* Not just '.': a half-written file is ".NAME.xxxx.part". */
		if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
			continue;
		snprintf(cmd_path, sizeof cmd_path, "%s/%s", stage_dir,
		    d->d_name);
		unlink(cmd_path);
	}
	closedir(dir);
	rmdir(stage_dir);
}

static void *
uploader_main(void *arg)
{
	struct uploader *u = arg;
	struct sk_error err;
	struct upload *x;
	int rc, same = 0;

	pthread_mutex_lock(&u->mu);
	for (;;) {
		while (u->head == NULL && !u->stop)
			pthread_cond_wait(&u->cv, &u->mu);
		if (u->head == NULL)
			break;
		x = u->head;
		u->head = x->next;
		if (u->head == NULL)
			u->tail = &u->head;
		u->busy = 1;
		pthread_mutex_unlock(&u->mu);
		/* A shard the bucket already holds, byte for byte (a run
		 * stopped half-way, started again), is not sent again. */
		rc = u->failed ? SK_EIO : sk_object_sync_file(x->url,
		    x->local, &same, &err);
		unlink(x->local);
		pthread_mutex_lock(&u->mu);
		u->busy = 0;
		u->queued--;
		if (rc == 0) {
			u->done++;
			u->unchanged += same != 0;
			u->bytes += x->size;
			u->sent += same ? 0 : x->size;
		} else if (!u->failed) {
			u->failed = 1;
			snprintf(u->err, sizeof u->err, "%s", err.msg);
		}
		pthread_cond_broadcast(&u->cv);
		free(x->local);
		free(x->url);
		free(x);
	}
	pthread_mutex_unlock(&u->mu);
	return NULL;
}

struct uploader *
uploader_start(const char *name)
{
	struct uploader *u = xcalloc(1, sizeof *u);
	const char *tmp = getenv("TMPDIR");

	pthread_mutex_init(&u->mu, NULL);
	pthread_cond_init(&u->cv, NULL);
	u->tail = &u->head;
	if (asprintf(&u->stage, "%s/shardtool-%s-XXXXXX", tmp != NULL &&
	    *tmp == '/' ? tmp : "/tmp", name) < 0)
		die("out of memory");
	if (mkdtemp(u->stage) == NULL)
		die("%s: cannot make a staging folder: %s", u->stage,
		    strerror(errno));
	stage_dir = u->stage;
	atexit(stage_cleanup);
	if (pthread_create(&u->thread, NULL, uploader_main, u) != 0)
		die("cannot start the upload thread");
	return u;
}

/* Where the object at url is written before it goes up: a name of its
 * own, as two shards may share a base name ('-o s3://b/%03d/data.tar'). */
char *
stage_path(struct uploader *u, const char *url)
{
	const char *base = strrchr(url, '/');
	size_t n = strlen(u->stage) + strlen(base) + 24;
	char *s = xmalloc(n);

	snprintf(s, n, "%s/%llu-%s", u->stage, ++u->nstaged, base + 1);
	return s;
}

/* Die with the first upload's error, saying what is in the bucket. */
void
uploader_check(struct uploader *u)
{
	if (u->failed)
		die("%s; %llu shards were uploaded and no manifest was written",
		    u->err, (unsigned long long)u->done);
}

void
uploader_add(struct uploader *u, char *local, const char *url,
    uint64_t size)
{
	struct upload *x = xcalloc(1, sizeof *x);

	x->local = local;
	x->url = xstrdup(url);
	x->size = size;
	pthread_mutex_lock(&u->mu);
	while (u->queued >= UPLOAD_QUEUE && !u->failed)
		pthread_cond_wait(&u->cv, &u->mu);
	uploader_check(u);
	*u->tail = x;
	u->tail = &x->next;
	u->queued++;
	pthread_cond_broadcast(&u->cv);
	pthread_mutex_unlock(&u->mu);
}

/* Wait for every shard to be in the bucket. */
void
uploader_finish(struct uploader *u, int progress)
{
	double t0 = cli_now(), dt;
	uint64_t b0;

	pthread_mutex_lock(&u->mu);
	b0 = u->bytes;
	while (u->queued > 0 && !u->failed) {
		dt = cli_now() - t0;
		if (progress)
			fprintf(stderr, "\ruploading: %d shard%s to go, %.1f MB "
			    "sent in all, %.1f MB/s\033[K", u->queued,
			    u->queued == 1 ? "" : "s", u->bytes / 1e6,
			    dt > 0 ? (u->bytes - b0) / 1e6 / dt : 0.0);
		pthread_cond_wait(&u->cv, &u->mu);
	}
	u->stop = 1;
	pthread_cond_broadcast(&u->cv);
	pthread_mutex_unlock(&u->mu);
	pthread_join(u->thread, NULL);
	if (progress)
		fprintf(stderr, "\r\033[K");
	uploader_check(u);
}

/* The staging folder and the uploader, once the manifest is up. */
void
uploader_free(struct uploader *u)
{
	stage_cleanup();
	stage_dir = NULL;
	pthread_cond_destroy(&u->cv);
	pthread_mutex_destroy(&u->mu);
	free(u->stage);
	free(u);
}

void
uploader_counts(struct uploader *u, uint64_t *done, uint64_t *unchanged,
    uint64_t *sent, int *queued)
{
	pthread_mutex_lock(&u->mu);
	*done = u->done;
	*unchanged = u->unchanged;
	*sent = u->sent;
	*queued = u->queued;
	pthread_mutex_unlock(&u->mu);
}
