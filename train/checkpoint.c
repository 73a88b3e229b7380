/*
 * checkpoint.c - save and load a run: DIR/step-NNNNNNNN.ckpt, in the
 * format of ckpt_file.h.
 *
 * Everything is full size, so a run can resume at another world size or
 * strategy. Rank 0 alone writes (through the atomic writer) and rank 0
 * alone reads: it picks the newest file, checks it whole (sizes,
 * checksum, model, every recorded setting) and only then broadcasts its
 * decision and the contents to the other ranks. So the ranks can never
 * disagree about where they resume, and a folder that only rank 0 can see
 * is enough.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_file.h"
#include "comm.h"
#include "train.h"

static const char *const crop_names[] = { "random-resized", "center",
    "none" };

int
ckpt_settings_make(const struct train_config *cfg, struct ckpt_settings *set,
    char *err, size_t errlen)
{
	const struct sk_loader_config *lc = &cfg->loader;
	struct sk_error e = { 0, "" };
	uint64_t size;
	char md5[33];

	ckpt_settings_init(set);
	ckpt_setting(set, "--global-batch", "%d", cfg->batch);
	ckpt_setting(set, "--seed", "%" PRIu64, cfg->seed);
	ckpt_setting(set, "--image-size", "%d", cfg->model.image_size);
	/* another precision is another run (and --backend cuda's default
	 * became bf16); fp32 is not recorded, so fp32 checkpoints from before
	 * precisions were recorded still resume */
	if (strcmp(cfg->precision, "fp32") != 0)
		ckpt_setting(set, "--precision", "%s", cfg->precision);
	/* A manifest is known by its bytes, so the same shards may be read
	 * from another place; a pattern only by its text. */
	if (lc->manifest != NULL) {
		if (sk_source_md5(lc->manifest, &size, md5, &e) != 0) {
			snprintf(err, errlen, "%s", e.msg);
			return -1;
		}
		ckpt_setting(set, "--data", "a manifest with MD5 %s", md5);
	} else
		ckpt_setting(set, "--data", "%s", cfg->data);
	/* what changes the sample sequence or the augmentation; synthetic
	 * data depends on neither */
	if (strcmp(cfg->data, "synthetic") != 0) {
		ckpt_setting(set, "--shuffle", "%d", lc->shuffle);
		ckpt_setting(set, "--crop", "%s", (unsigned)lc->crop < 3 ?
		    crop_names[lc->crop] : "?");
		ckpt_setting(set, "--scale", "%.17g %.17g",
		    lc->scale[0], lc->scale[1]);
		ckpt_setting(set, "--ratio", "%.17g %.17g",
		    lc->ratio[0], lc->ratio[1]);
		ckpt_setting(set, "--resize", "%d", lc->resize);
		ckpt_setting(set, "--flip", "%d", lc->flip);
		ckpt_setting(set, "the loader's mean", "%.9g %.9g %.9g",
		    (double)lc->mean[0], (double)lc->mean[1],
		    (double)lc->mean[2]);
		ckpt_setting(set, "the loader's std", "%.9g %.9g %.9g",
		    (double)lc->std[0], (double)lc->std[1],
		    (double)lc->std[2]);
		ckpt_setting(set, "the loader's remainder", "%s",
		    lc->remainder == SK_REMAINDER_KEEP ? "keep" : "drop");
		ckpt_setting(set, "--max-pixels", "%" PRIu64,
		    lc->max_pixels);
		ckpt_setting(set, "--max-sample-size", "%" PRIu64,
		    lc->max_sample_bytes);
	}
	if (set->overflow) {
		snprintf(err, errlen, "%.150s: too long to record in a "
		    "checkpoint", cfg->data);
		return -1;
	}
	return 0;
}

/* Agree across ranks on a local failure: nonzero when any rank failed. */
static int
any(struct comm *c, int failed)
{
	double v = failed ? 1 : 0;

	comm_max_double(c, &v, 1);
	return v > 0;
}

int
ckpt_save(const char *dir, const struct ckpt_pos *pos,
    const struct ckpt_settings *set, struct model *m, struct strategy *s,
    struct optim *o, struct comm *c, char *err, size_t errlen)
{
	struct ckpt_header hd;
	struct ckpt_writer w;
	float *flat, *bufs = NULL;
	char path[4200];
	int i, rank = comm_rank(c), writing = 0, rc = -1;

	flat = malloc((m->nflat ? m->nflat : 1) * sizeof(float));
	if (m->nbuf)
		bufs = malloc(m->nbuf * sizeof(float));
	/* the gathers below are collectives: every rank joins them or none */
	if (any(c, flat == NULL || (m->nbuf && bufs == NULL))) {
		snprintf(err, errlen, "out of memory writing a checkpoint");
		goto out;
	}
	memset(&hd, 0, sizeof(hd));
	snprintf(hd.model, sizeof(hd.model), "%s", m->cfg.name);
	hd.nflat = m->nflat;
	hd.nbuf = m->nbuf;
	hd.nstate = (uint32_t)optim_nstate(o);
	hd.step = pos->step;
	hd.epoch = pos->epoch;
	hd.batch = pos->batch;
	hd.optim_steps = optim_steps(o);
	snprintf(path, sizeof(path), "%s/step-%08ld.ckpt", dir, pos->step);

	/* every rank joins the gathers; only rank 0 writes */
	strategy_get_params(s, flat);
	if (rank == 0) {
		if (mkdir(dir, 0777) != 0 && errno != EEXIST)
			snprintf(err, errlen, "--checkpoint-dir %s: %s", dir,
			    strerror(errno));
		else if (ckpt_writer_open(&w, path, &hd, set, err,
		    errlen) == 0)
			writing = 1;
	}
	if (writing) {
		if (m->nbuf)
			m->be->to_host(bufs, m->bufs, m->nbuf * sizeof(float));
		ckpt_writer_put(&w, flat, m->nflat * sizeof(float));
		if (m->nbuf)
			ckpt_writer_put(&w, bufs, m->nbuf * sizeof(float));
	}
	for (i = 0; i < (int)hd.nstate; i++) {
		strategy_gather_local(s, optim_state(o, i), flat);
		if (writing)
			ckpt_writer_put(&w, flat, m->nflat * sizeof(float));
	}
	if (writing)
		rc = ckpt_writer_commit(&w, err, errlen);
	else
		rc = rank == 0 ? -1 : 0;
out:
	free(flat);
	free(bufs);
	return rc;
}

/* The newest step-N.ckpt in dir, or -1 and "" */
static long
newest(const char *dir, char *path, size_t len)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	long best = -1;

	path[0] = '\0';
	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		char tail[8];
		long n;

		if (sscanf(e->d_name, "step-%ld%7s", &n, tail) == 2 &&
		    strcmp(tail, ".ckpt") == 0 && n > best) {
			best = n;
			snprintf(path, len, "%s/%s", dir, e->d_name);
		}
	}
	closedir(d);
	return best;
}

/* What rank 0 broadcasts: its decision, then where the run stands. */
enum { DECIDE_RESUME = 0, DECIDE_NONE = 1, DECIDE_REFUSED = -1 };

/* Rank 0 reads n bytes at off into buf, tells every rank whether it
 * could, then broadcasts them. 0, or -1 on every rank. */
static int
bcast_part(struct comm *c, struct ckpt_file *f, void *buf, size_t n,
    uint64_t off, char *err, size_t errlen)
{
	int64_t ok = 1;

	if (comm_rank(c) == 0 && ckpt_file_read(f, buf, n, off, err,
	    errlen) != 0)
		ok = 0;
	comm_bcast(c, &ok, sizeof ok, 0);
	if (!ok) {
		if (comm_rank(c) != 0)
			snprintf(err, errlen, "rank 0 failed to read its "
			    "checkpoint (rank 0 says why)");
		return -1;
	}
	comm_bcast(c, buf, n, 0);
	return 0;
}

int
ckpt_load(const char *dir, const struct ckpt_settings *want,
    struct ckpt_pos *pos, struct model *m, struct strategy *s,
    struct optim *o, struct comm *c, char *err, size_t errlen)
{
	struct ckpt_file f = { .fd = -1 };
	float *flat, *bufs;
	size_t fbytes = m->nflat * sizeof(float);
	size_t bbytes = m->nbuf * sizeof(float);
	int64_t d[5] = { DECIDE_NONE, 0, 0, 0, 0 };
	int i, rank = comm_rank(c), rc = -1;

	flat = malloc(fbytes ? fbytes : 1);
	bufs = malloc(bbytes ? bbytes : 1);
	if (any(c, flat == NULL || bufs == NULL)) {
		snprintf(err, errlen, "out of memory reading a checkpoint");
		goto out;
	}
	/* rank 0 decides, from its folder alone, and checks the file whole
	 * before anything is applied */
	if (rank == 0) {
		char path[4400];

		if (newest(dir, path, sizeof(path)) < 0)
			d[0] = DECIDE_NONE;
		else if (ckpt_file_open(&f, path, err, errlen) != 0 ||
		    ckpt_file_check(&f, m->cfg.name, m->nflat, m->nbuf,
		    (uint32_t)optim_nstate(o), want, err, errlen) != 0)
			d[0] = DECIDE_REFUSED;
		else {
			d[0] = DECIDE_RESUME;
			d[1] = f.hd.step;
			d[2] = f.hd.epoch;
			d[3] = f.hd.batch;
			d[4] = f.hd.optim_steps;
		}
	}
	comm_bcast(c, d, sizeof d, 0);
	if (d[0] == DECIDE_NONE) {
		rc = 1;
		goto out;
	}
	if (d[0] != DECIDE_RESUME) {
		if (rank != 0)
			snprintf(err, errlen, "rank 0 refused the checkpoint "
			    "in --checkpoint-dir %s (rank 0 says why)", dir);
		goto out;
	}
	if (bcast_part(c, &f, flat, fbytes, 0, err, errlen) != 0)
		goto out;
	strategy_set_params(s, flat);
	if (m->nbuf) {
		if (bcast_part(c, &f, bufs, bbytes, fbytes, err, errlen) != 0)
			goto out;
		m->be->to_device(m->bufs, bufs, bbytes);
	}
	for (i = 0; i < optim_nstate(o); i++) {
		if (bcast_part(c, &f, flat, fbytes, fbytes + bbytes +
		    (uint64_t)i * fbytes, err, errlen) != 0)
			goto out;
		strategy_scatter_local(s, flat, optim_state(o, i));
	}
	optim_set_steps(o, (long)d[4]);
	pos->step = (long)d[1];
	pos->epoch = (int)d[2];
	pos->batch = (long)d[3];
	rc = 0;
out:
	ckpt_file_close(&f);
	free(flat);
	free(bufs);
	return rc;
}
