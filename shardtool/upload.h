/*
 * upload.h - what pack and cp share to write into a bucket: objects are
 * staged as local files and handed to one uploader thread, which stores
 * each with sk_object_sync_file() (an object the bucket already holds,
 * byte for byte, is not sent again) and deletes the local copy, while the
 * caller makes the next ones. A failed upload stops the run: no manifest
 * is written after it.
 */
#ifndef UPLOAD_H
#define UPLOAD_H

#include <pthread.h>
#include <stdint.h>

#include "shardtool.h"

/*
 * At most UPLOAD_QUEUE closed shards wait for the uploader: the staging
 * folder holds a few shards, never the dataset, and packing waits when the
 * link is the slower side. Everything is guarded by mu.
 */
#define UPLOAD_QUEUE 2

struct upload {
	char *local, *url;
	uint64_t size;
	struct upload *next;
};

struct uploader {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct upload *head, **tail;
	int queued, busy, stop, failed;
	char err[SK_ERRMSG_MAX];
	uint64_t done, bytes;
	uint64_t unchanged;		/* of done: already there, not sent */
	uint64_t sent;			/* bytes of the others */
	char *stage;			/* the local staging folder */
	unsigned long long nstaged;	/* names given out in it */
};

/* Start the thread and make the staging folder (TMPDIR/shardtool-NAME-*),
 * which goes with the process, even when it dies. */
struct uploader *uploader_start(const char *name);
/* A path of its own in the staging folder for the object at url. */
char *stage_path(struct uploader *u, const char *url);
/* Queue the staged file local (taken over: deleted and freed once sent)
 * for url; waits while UPLOAD_QUEUE are queued. Dies if an upload failed. */
void uploader_add(struct uploader *u, char *local, const char *url,
    uint64_t size);
/* Die with the first upload's error, saying what is in the bucket. */
void uploader_check(struct uploader *u);
/* Wait for every queued object to be in the bucket (a progress line on
 * stderr when progress is set), stop the thread; dies if one failed. */
void uploader_finish(struct uploader *u, int progress);
/* The counts so far: stored, of them already there, bytes sent (of the
 * others), still queued. */
void uploader_counts(struct uploader *u, uint64_t *done, uint64_t *unchanged,
    uint64_t *sent, int *queued);
/* Remove the staging folder and free u, after uploader_finish(). */
void uploader_free(struct uploader *u);

#endif /* UPLOAD_H */
