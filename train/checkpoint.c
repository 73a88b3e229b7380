/*
 * checkpoint.c - save and load a run: DIR/step-NNNNNNNN.ckpt.
 *
 * Layout (little-endian, as the machine writes it):
 *   "SKCKPT1\n", then struct ckpt_header,
 *   params (nflat floats, the whole flat vector, gathered from shards),
 *   buffers (nbuf floats: rank 0's batch norm running statistics),
 *   nstate optimizer state vectors of nflat floats each,
 *   and an FNV-1a hash of everything before it (uint64).
 * Everything is full size, so a run can resume at another world size or
 * strategy. Rank 0 writes to NAME.part and renames; every rank reads.
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

#include "comm.h"
#include "train.h"

#define CKPT_MAGIC "SKCKPT1\n"

struct ckpt_header {
	char model[32];
	uint64_t nflat, nbuf;
	uint32_t nstate, pad;
	int64_t step, batch;
	int32_t epoch, pad2;
	int64_t optim_steps;
};

struct hfile {
	FILE *f;
	uint64_t h;
};

static void
hash(uint64_t *h, const void *p, size_t n)
{
	const unsigned char *s = p;

	while (n--)
		*h = (*h ^ *s++) * 0x100000001b3ULL;
}

static int
hwrite(struct hfile *f, const void *p, size_t n)
{
	hash(&f->h, p, n);
	return fwrite(p, 1, n, f->f) == n ? 0 : -1;
}

static int
hread(struct hfile *f, void *p, size_t n)
{
	if (fread(p, 1, n, f->f) != n)
		return -1;
	hash(&f->h, p, n);
	return 0;
}

int
ckpt_save(const char *dir, const struct ckpt_pos *pos, struct model *m,
    struct strategy *s, struct optim *o, struct comm *c, char *err,
    size_t errlen)
{
	struct ckpt_header hd;
	struct hfile hf = { NULL, 0xcbf29ce484222325ULL };
	float *flat, *bufs = NULL;
	char path[4200], tmp[4300];
	int i, rank = comm_rank(c), rc = -1;

	flat = malloc((m->nflat ? m->nflat : 1) * sizeof(float));
	if (m->nbuf)
		bufs = malloc(m->nbuf * sizeof(float));
	if (flat == NULL || (m->nbuf && bufs == NULL)) {
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
	snprintf(tmp, sizeof(tmp), "%s.part", path);

	/* every rank joins the gathers; only rank 0 writes */
	strategy_get_params(s, flat);
	if (rank == 0) {
		if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
			snprintf(err, errlen, "--checkpoint-dir %s: %s", dir,
			    strerror(errno));
			rank = -1;
		} else if ((hf.f = fopen(tmp, "wb")) == NULL) {
			snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
			rank = -1;
		}
	}
	if (rank == 0) {
		if (m->nbuf)
			m->be->to_host(bufs, m->bufs, m->nbuf * sizeof(float));
		if (hwrite(&hf, CKPT_MAGIC, 8) || hwrite(&hf, &hd, sizeof(hd)) ||
		    hwrite(&hf, flat, m->nflat * sizeof(float)) ||
		    (m->nbuf && hwrite(&hf, bufs, m->nbuf * sizeof(float))))
			rank = -2;
	}
	for (i = 0; i < (int)hd.nstate; i++) {
		strategy_gather_local(s, optim_state(o, i), flat);
		if (rank == 0 && hwrite(&hf, flat, m->nflat * sizeof(float)))
			rank = -2;
	}
	if (rank == 0) {
		uint64_t h = hf.h;

		if (fwrite(&h, sizeof(h), 1, hf.f) != 1 || fflush(hf.f) != 0 ||
		    fsync(fileno(hf.f)) != 0)
			rank = -2;
	}
	if (hf.f != NULL && fclose(hf.f) != 0 && rank == 0)
		rank = -2;
	if (rank == -2) {
		snprintf(err, errlen, "%s: %s", tmp, strerror(errno ? errno : EIO));
		unlink(tmp);
	} else if (rank == 0 && rename(tmp, path) != 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		unlink(tmp);
		rank = -2;
	}
	rc = rank < 0 ? -1 : 0;
out:
	free(flat);
	free(bufs);
	return rc;
}

/* The newest step-N.ckpt in dir, or "" */
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

int
ckpt_load(const char *dir, struct ckpt_pos *pos, struct model *m,
    struct strategy *s, struct optim *o, struct comm *c, char *err,
    size_t errlen)
{
	struct ckpt_header hd;
	struct hfile hf = { NULL, 0xcbf29ce484222325ULL };
	float *flat = NULL, *bufs = NULL;
	char path[4400], magic[8];
	uint64_t h;
	int i, rc = -1;

	if (newest(dir, path, sizeof(path)) < 0)
		return 1;
	if ((hf.f = fopen(path, "rb")) == NULL) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (hread(&hf, magic, 8) || memcmp(magic, CKPT_MAGIC, 8) != 0 ||
	    hread(&hf, &hd, sizeof(hd))) {
		snprintf(err, errlen, "%s: not a shardtrain checkpoint", path);
		goto out;
	}
	if (strncmp(hd.model, m->cfg.name, sizeof(hd.model)) != 0 ||
	    hd.nflat != m->nflat || hd.nbuf != m->nbuf ||
	    hd.nstate != (uint32_t)optim_nstate(o)) {
		snprintf(err, errlen, "%s was written for %.32s with %" PRIu64
		    " parameters and %u optimizer states, not %s with %zu and "
		    "%d: use another --checkpoint-dir", path, hd.model,
		    hd.nflat, hd.nstate, m->cfg.name, m->nflat,
		    optim_nstate(o));
		goto out;
	}
	flat = malloc((m->nflat ? m->nflat : 1) * sizeof(float));
	bufs = malloc((m->nbuf ? m->nbuf : 1) * sizeof(float));
	if (flat == NULL || bufs == NULL) {
		snprintf(err, errlen, "out of memory reading %s", path);
		goto out;
	}
	if (hread(&hf, flat, m->nflat * sizeof(float)) ||
	    hread(&hf, bufs, m->nbuf * sizeof(float)))
		goto short_read;
	strategy_set_params(s, flat);
	if (m->nbuf)
		m->be->to_device(m->bufs, bufs, m->nbuf * sizeof(float));
	for (i = 0; i < (int)hd.nstate; i++) {
		if (hread(&hf, flat, m->nflat * sizeof(float)))
			goto short_read;
		strategy_scatter_local(s, flat, optim_state(o, i));
	}
	if (fread(&h, sizeof(h), 1, hf.f) != 1)
		goto short_read;
	if (h != hf.h) {
		snprintf(err, errlen, "%s: checksum mismatch: the file is "
		    "damaged", path);
		goto out;
	}
	optim_set_steps(o, hd.optim_steps);
	pos->step = hd.step;
	pos->epoch = hd.epoch;
	pos->batch = hd.batch;
	rc = 0;
	goto out;
short_read:
	snprintf(err, errlen, "%s: truncated (%s)", path,
	    ferror(hf.f) ? strerror(errno) : "ends early");
out:
	(void)c;
	fclose(hf.f);
	free(flat);
	free(bufs);
	return rc;
}
