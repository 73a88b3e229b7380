/*
 * ckpt_file.h - the checkpoint file format on its own, apart from models
 * and ranks, so that the reader can be fuzzed: the header, the settings a
 * run must share to resume, the checksum, and a reader that checks all of
 * it against the file's size before it hands anything out.
 *
 * Layout (little-endian, as the machine writes it):
 *   "SKCKPT2\n", then struct ckpt_header (88 bytes),
 *   settings_len bytes of settings, lines "NAME\tVALUE\n",
 *   params (nflat floats), buffers (nbuf floats),
 *   nstate optimizer state vectors of nflat floats each,
 *   and an FNV-1a hash of everything before it (uint64).
 */
#ifndef SK_TRAIN_CKPT_FILE_H
#define SK_TRAIN_CKPT_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "shardkit.h"

#define CKPT_MAGIC "SKCKPT2\n"
#define CKPT_MAGIC_LEN 8
/* What a sane writer records: a few dozen short lines. */
#define CKPT_SETTINGS_MAX 16384
#define CKPT_NSTATE_MAX 16

struct ckpt_header {
	char model[32];			/* NUL-padded, maybe not terminated */
	uint64_t nflat, nbuf;
	uint32_t nstate, settings_len;
	int64_t step, batch, optim_steps;
	int32_t epoch, pad;
};

/* The settings a run records and a resume must match, "NAME\tVALUE\n"
 * each. A value too long for the buffer marks the whole list bad. */
struct ckpt_settings {
	char text[CKPT_SETTINGS_MAX];
	size_t len;
	int overflow;
};

void ckpt_settings_init(struct ckpt_settings *s);
void ckpt_setting(struct ckpt_settings *s, const char *name,
    const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A checkpoint open for reading: structure, sizes and checksum checked. */
struct ckpt_file {
	int fd;
	char path[4400];
	uint64_t size;
	struct ckpt_header hd;
	char *settings;			/* hd.settings_len bytes, then NUL */
	uint64_t data_off;		/* where the params begin */
};

/*
 * Open path and check it whole: the magic, the header's counts against
 * the file's real size (so nothing is ever allocated from a count in the
 * file), the settings' form, and the checksum. 0, or -1 with a message
 * naming the file in err. Closed either way by ckpt_file_close().
 */
int ckpt_file_open(struct ckpt_file *f, const char *path, char *err,
    size_t errlen);
/* The same on an open descriptor, which f then owns. */
int ckpt_file_openfd(struct ckpt_file *f, int fd, const char *path,
    char *err, size_t errlen);
/* Does the file fit this run: the model, its sizes, and every setting
 * (both ways: a setting recorded but not ours, or ours not recorded, is a
 * mismatch too). 0, or -1 with a message naming the file and setting. */
int ckpt_file_check(const struct ckpt_file *f, const char *model,
    uint64_t nflat, uint64_t nbuf, uint32_t nstate,
    const struct ckpt_settings *want, char *err, size_t errlen);
/* n bytes at off within the float data (params, buffers, states). */
int ckpt_file_read(struct ckpt_file *f, void *buf, size_t n, uint64_t off,
    char *err, size_t errlen);
void ckpt_file_close(struct ckpt_file *f);

/* Writing: through the library's atomic writer, hashed as it goes. */
struct ckpt_writer {
	struct sk_atomic a;
	FILE *fp;
	uint64_t h;
	int failed;
};

int ckpt_writer_open(struct ckpt_writer *w, const char *path,
    const struct ckpt_header *hd, const struct ckpt_settings *set,
    char *err, size_t errlen);
void ckpt_writer_put(struct ckpt_writer *w, const void *p, size_t n);
/* Append the hash and commit; on any failure remove the temporary. */
int ckpt_writer_commit(struct ckpt_writer *w, char *err, size_t errlen);
void ckpt_writer_abort(struct ckpt_writer *w);

#endif /* SK_TRAIN_CKPT_FILE_H */
