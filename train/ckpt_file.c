/*
 * ckpt_file.c - the checkpoint format (see ckpt_file.h): writing it
 * through the library's atomic writer, and reading it back with every
 * count checked against what the file can really hold.
 *
 * The reader trusts nothing in the file: each count is bounded by the
 * file's size before it is used, the only allocation made from the file
 * (the settings) is capped, and the checksum and settings are checked
 * before the caller applies a byte.
 */
#include "config.h"

#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_file.h"

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define OLD_MAGIC "SKCKPT1\n"
/* The hashing pass reads this much at a time. */
#define CHUNK (1u << 20)
/* Steps and batches a checkpoint may claim (--steps' own limit). */
#define POS_MAX (1LL << 40)

_Static_assert(sizeof(struct ckpt_header) == 88,
    "the checkpoint header has no padding");

static void
hash(uint64_t *h, const void *p, size_t n)
{
	const unsigned char *s = p;
	uint64_t v = *h;

	while (n--)
		v = (v ^ *s++) * 0x100000001b3ULL;
	*h = v;
}

/* ------------------------------------------------------------------------ */
/* settings                                                                 */

void
ckpt_settings_init(struct ckpt_settings *s)
{
	s->len = 0;
	s->overflow = 0;
	s->text[0] = '\0';
}

void
ckpt_setting(struct ckpt_settings *s, const char *name, const char *fmt, ...)
{
	char v[4400];
	va_list ap;
	size_t i;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(v, sizeof v, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof v) {
		s->overflow = 1;
		return;
	}
	/* one line each: a newline or tab inside a value would split it */
	for (i = 0; v[i] != '\0'; i++)
		if (v[i] == '\n' || v[i] == '\t')
			v[i] = ' ';
	n = snprintf(s->text + s->len, sizeof s->text - s->len, "%s\t%s\n",
	    name, v);
	if (n < 0 || (size_t)n >= sizeof s->text - s->len) {
		s->text[s->len] = '\0';
		s->overflow = 1;
		return;
	}
	s->len += (size_t)n;
}

/* The settings' form: lines "NAME\tVALUE\n", NAME not empty, no control
 * bytes but those two (values reach the terminal in messages). */
static int
settings_valid(const char *t, size_t len)
{
	size_t i, start = 0;
	int tab = 0;

	for (i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)t[i];

		if (ch == '\t') {
			if (tab || i == start)
				return 0;
			tab = 1;
		} else if (ch == '\n') {
			if (!tab)
				return 0;
			tab = 0;
			start = i + 1;
		} else if (ch < 0x20 || ch == 0x7f)
			return 0;
	}
	return start == len;
}

/* The value of NAME in a valid settings text, its length in *vlen. */
static const char *
setting_find(const char *t, size_t len, const char *name, size_t nlen,
    size_t *vlen)
{
	const char *p = t, *end = t + len, *tab, *nl;

	while (p < end) {
		tab = memchr(p, '\t', (size_t)(end - p));
		nl = memchr(p, '\n', (size_t)(end - p));
		if (tab == NULL || nl == NULL)
			return NULL;
		if ((size_t)(tab - p) == nlen && memcmp(p, name, nlen) == 0) {
			*vlen = (size_t)(nl - tab - 1);
			return tab + 1;
		}
		p = nl + 1;
	}
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* reading                                                                  */

static int
preadall(int fd, void *buf, size_t n, uint64_t off)
{
	char *p = buf;
	ssize_t got;

	while (n > 0) {
		got = pread(fd, p, n, (off_t)off);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -1;
		if (got == 0) {
			errno = 0;	/* the file ends early */
			return -1;
		}
		p += got;
		n -= (size_t)got;
		off += (uint64_t)got;
	}
	return 0;
}

static int
read_failed(struct ckpt_file *f, char *err, size_t errlen)
{
	snprintf(err, errlen, "%s: %s", f->path, errno != 0 ?
	    strerror(errno) : "truncated: the file ends early");
	return -1;
}

int
ckpt_file_open(struct ckpt_file *f, const char *path, char *err,
    size_t errlen)
{
	/* O_NONBLOCK: a FIFO planted in the folder must not block rank 0
	 * (and so every rank) in open; openfd refuses what is not a file. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);

	if (fd < 0) {
		memset(f, 0, sizeof *f);
		f->fd = -1;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	return ckpt_file_openfd(f, fd, path, err, errlen);
}

int
ckpt_file_openfd(struct ckpt_file *f, int fd, const char *path, char *err,
    size_t errlen)
{
	const uint64_t fixed = CKPT_MAGIC_LEN + sizeof(struct ckpt_header) +
	    sizeof(uint64_t);
	struct ckpt_header *hd = &f->hd;
	struct stat st;
	char magic[CKPT_MAGIC_LEN];
	unsigned char *buf = NULL;
	uint64_t room, floats, h = FNV_OFFSET, stored, off;
	int rc = -1;

	memset(f, 0, sizeof *f);
	f->fd = fd;
	snprintf(f->path, sizeof f->path, "%s", path);
	if (fstat(fd, &st) != 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		return -1;
	}
	f->size = (uint64_t)st.st_size;
	if (f->size < CKPT_MAGIC_LEN || preadall(fd, magic, sizeof magic, 0)) {
		snprintf(err, errlen, "%s: not a shardtrain checkpoint (%"
		    PRIu64 " bytes)", path, f->size);
		return -1;
	}
	if (memcmp(magic, OLD_MAGIC, CKPT_MAGIC_LEN) == 0) {
		snprintf(err, errlen, "%s: written by an older shardtrain "
		    "that did not record the run's settings, so a resume "
		    "cannot be checked: use another --checkpoint-dir", path);
		return -1;
	}
	if (memcmp(magic, CKPT_MAGIC, CKPT_MAGIC_LEN) != 0) {
		snprintf(err, errlen, "%s: not a shardtrain checkpoint", path);
		return -1;
	}
	if (f->size < fixed)
		goto truncated;
	if (preadall(fd, hd, sizeof *hd, CKPT_MAGIC_LEN) != 0)
		return read_failed(f, err, errlen);

	/* Every count against the bytes there are, before any is used:
	 * room is what the file holds besides its fixed parts. */
	room = f->size - fixed;
	if (hd->settings_len > CKPT_SETTINGS_MAX ||
	    hd->settings_len > room) {
		snprintf(err, errlen, "%s: damaged: its header claims %" PRIu32
		    " bytes of settings (at most %u, and the file has %" PRIu64
		    " bytes)", path, hd->settings_len, CKPT_SETTINGS_MAX,
		    f->size);
		return -1;
	}
	room = (room - hd->settings_len) / sizeof(float);
	if (hd->nstate > CKPT_NSTATE_MAX) {
		snprintf(err, errlen, "%s: damaged: its header claims %" PRIu32
		    " optimizer states (at most %d)", path, hd->nstate,
		    CKPT_NSTATE_MAX);
		return -1;
	}
	if (hd->nflat > room || hd->nbuf > room || (hd->nflat > 0 &&
	    (uint64_t)hd->nstate + 1 > room / hd->nflat))
		goto truncated;
	floats = hd->nflat * ((uint64_t)hd->nstate + 1);
	if (hd->nbuf > room - floats)
		goto truncated;
	floats += hd->nbuf;
	if (fixed + hd->settings_len + floats * sizeof(float) != f->size) {
		snprintf(err, errlen, "%s: damaged: %" PRIu64 " bytes, but its "
		    "header describes %" PRIu64, path, f->size, fixed +
		    hd->settings_len + floats * sizeof(float));
		return -1;
	}
	/* a position no run reaches: the caller casts these to long and int */
	if (hd->step < 0 || hd->step > POS_MAX || hd->batch < 0 ||
	    hd->batch > POS_MAX || hd->optim_steps < 0 ||
	    hd->optim_steps > POS_MAX || hd->epoch < 0) {
		snprintf(err, errlen, "%s: damaged: its position (step %" PRId64
		    ", epoch %" PRId32 ", batch %" PRId64 ") is out of range",
		    path, hd->step, hd->epoch, hd->batch);
		return -1;
	}
	f->data_off = CKPT_MAGIC_LEN + sizeof *hd + hd->settings_len;

	if ((f->settings = malloc((size_t)hd->settings_len + 1)) == NULL) {
		snprintf(err, errlen, "out of memory reading %s", path);
		return -1;
	}
	if (preadall(fd, f->settings, hd->settings_len,
	    CKPT_MAGIC_LEN + sizeof *hd) != 0)
		return read_failed(f, err, errlen);
	f->settings[hd->settings_len] = '\0';
	if (!settings_valid(f->settings, hd->settings_len)) {
		snprintf(err, errlen, "%s: damaged: its settings are not "
		    "lines of NAME<tab>VALUE", path);
		return -1;
	}

	/* the checksum over everything but itself */
	if ((buf = malloc(CHUNK)) == NULL) {
		snprintf(err, errlen, "out of memory reading %s", path);
		return -1;
	}
	for (off = 0; off < f->size - sizeof stored; ) {
		uint64_t left = f->size - sizeof stored - off;
		size_t n = left < CHUNK ? (size_t)left : CHUNK;

		if (preadall(fd, buf, n, off) != 0) {
			read_failed(f, err, errlen);
			goto out;
		}
		hash(&h, buf, n);
		off += n;
	}
	if (preadall(fd, &stored, sizeof stored, off) != 0) {
		read_failed(f, err, errlen);
		goto out;
	}
	if (stored != h) {
		snprintf(err, errlen, "%s: checksum mismatch: the file is "
		    "damaged", path);
		goto out;
	}
	rc = 0;
out:
	free(buf);
	return rc;
truncated:
	snprintf(err, errlen, "%s: truncated or damaged: its header "
	    "describes more than the file's %" PRIu64 " bytes", path, f->size);
	return -1;
}

int
ckpt_file_check(const struct ckpt_file *f, const char *model,
    uint64_t nflat, uint64_t nbuf, uint32_t nstate,
    const struct ckpt_settings *want, char *err, size_t errlen)
{
	const struct ckpt_header *hd = &f->hd;
	const char *p, *end, *tab, *nl, *v;
	size_t vlen;

	if (want->overflow) {
		snprintf(err, errlen, "this run's settings are too long to "
		    "compare with %s", f->path);
		return -1;
	}
	if (strncmp(hd->model, model, sizeof hd->model) != 0 ||
	    hd->nflat != nflat || hd->nbuf != nbuf || hd->nstate != nstate) {
		snprintf(err, errlen, "checkpoint %s was written for %.32s with "
		    "%" PRIu64 " parameters, %" PRIu64 " buffers and %" PRIu32
		    " optimizer states, not %s with %" PRIu64 ", %" PRIu64
		    " and %" PRIu32 ": use another --checkpoint-dir", f->path,
		    hd->model, hd->nflat, hd->nbuf, hd->nstate, model, nflat,
		    nbuf, nstate);
		return -1;
	}
	/* ours, in our order, so the first difference named is stable */
	for (p = want->text, end = want->text + want->len; p < end;
	    p = nl + 1) {
		tab = memchr(p, '\t', (size_t)(end - p));
		nl = memchr(p, '\n', (size_t)(end - p));
		if (tab == NULL || nl == NULL || tab > nl)
			break;
		v = setting_find(f->settings, f->hd.settings_len, p,
		    (size_t)(tab - p), &vlen);
		if (v == NULL) {
			snprintf(err, errlen, "checkpoint %s does not record "
			    "%.*s (this run has %.*s %.*s): use another "
			    "--checkpoint-dir", f->path, (int)(tab - p), p,
			    (int)(tab - p), p, (int)(nl - tab - 1), tab + 1);
			return -1;
		}
		if (vlen != (size_t)(nl - tab - 1) ||
		    memcmp(v, tab + 1, vlen) != 0) {
			/* --batch is per rank: another number of ranks is
			 * the usual cause of another global batch */
			static const char gbatch[] = "--global-batch";
			int gb = (size_t)(tab - p) == sizeof gbatch - 1 &&
			    memcmp(p, gbatch, sizeof gbatch - 1) == 0;

			snprintf(err, errlen, "checkpoint %s was written with "
			    "%.*s %.*s, this run has %.*s %.*s: resume with "
			    "%s%.*s%s or use another --checkpoint-dir",
			    f->path, (int)(tab - p), p, (int)vlen, v,
			    (int)(tab - p), p, (int)(nl - tab - 1), tab + 1,
			    gb ? "--global-batch " : "the same settings",
			    gb ? (int)vlen : 0, v, gb ? " (--batch is per rank, "
			    "so on another number of ranks the global batch "
			    "changes)" : "");
			return -1;
		}
	}
	/* and none recorded that this run does not have */
	for (p = f->settings, end = f->settings + f->hd.settings_len;
	    p < end; p = nl + 1) {
		tab = memchr(p, '\t', (size_t)(end - p));
		nl = memchr(p, '\n', (size_t)(end - p));
		if (tab == NULL || nl == NULL || tab > nl)
			break;
		if (setting_find(want->text, want->len, p, (size_t)(tab - p),
		    &vlen) == NULL) {
			snprintf(err, errlen, "checkpoint %s was written with "
			    "%.*s %.*s, which this run does not have: use "
			    "another --checkpoint-dir", f->path,
			    (int)(tab - p), p, (int)(nl - tab - 1), tab + 1);
			return -1;
		}
	}
	return 0;
}

int
ckpt_file_read(struct ckpt_file *f, void *buf, size_t n, uint64_t off,
    char *err, size_t errlen)
{
	uint64_t end = f->size - sizeof(uint64_t);

	if (off > end - f->data_off || n > end - f->data_off - off) {
		snprintf(err, errlen, "%s: a read past the data", f->path);
		return -1;
	}
	if (preadall(f->fd, buf, n, f->data_off + off) != 0)
		return read_failed(f, err, errlen);
	return 0;
}

void
ckpt_file_close(struct ckpt_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	free(f->settings);
	f->settings = NULL;
	f->fd = -1;
}

/* ------------------------------------------------------------------------ */
/* writing                                                                  */

int
ckpt_writer_open(struct ckpt_writer *w, const char *path,
    const struct ckpt_header *hd, const struct ckpt_settings *set,
    char *err, size_t errlen)
{
	struct ckpt_header h = *hd;
	struct sk_error e = { 0, "" };

	memset(w, 0, sizeof *w);
	w->h = FNV_OFFSET;
	if (set->overflow || set->len > CKPT_SETTINGS_MAX) {
		snprintf(err, errlen, "%s: the run's settings are too long to "
		    "record", path);
		return -1;
	}
	if (sk_atomic_open(&w->a, path, 0, 0644, &e) != 0) {
		snprintf(err, errlen, "%s", e.msg);
		return -1;
	}
	if ((w->fp = sk_atomic_stdio(&w->a, &e)) == NULL) {
		snprintf(err, errlen, "%s", e.msg);
		sk_atomic_abort(&w->a);
		return -1;
	}
	h.settings_len = (uint32_t)set->len;
	h.pad = 0;
	ckpt_writer_put(w, CKPT_MAGIC, CKPT_MAGIC_LEN);
	ckpt_writer_put(w, &h, sizeof h);
	ckpt_writer_put(w, set->text, set->len);
	return 0;
}

void
ckpt_writer_put(struct ckpt_writer *w, const void *p, size_t n)
{
	if (w->failed)
		return;
	hash(&w->h, p, n);
	if (fwrite(p, 1, n, w->fp) != n)
		w->failed = errno != 0 ? errno : EIO;
}

int
ckpt_writer_commit(struct ckpt_writer *w, char *err, size_t errlen)
{
	struct sk_error e = { 0, "" };
	uint64_t h = w->h;

	if (!w->failed && fwrite(&h, sizeof h, 1, w->fp) != 1)
		w->failed = errno != 0 ? errno : EIO;
	if (w->failed) {
		snprintf(err, errlen, "%s: write: %s", w->a.path,
		    strerror(w->failed));
		ckpt_writer_abort(w);
		return -1;
	}
	w->fp = NULL;
	if (sk_atomic_commit(&w->a, &e) != 0) {
		snprintf(err, errlen, "%s", e.msg);
		return -1;
	}
	return 0;
}

void
ckpt_writer_abort(struct ckpt_writer *w)
{
	w->fp = NULL;
	sk_atomic_abort(&w->a);
}
