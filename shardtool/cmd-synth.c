/*
 * cmd-synth.c - write a synthetic CIFAR-10 or ImageNet tree in the real
 * on-disk formats, so tests and benchmarks need neither download.
 *
 * Everything derives from --seed through integer arithmetic and a fixed
 * PRNG (splitmix64, xoshiro256**), so the same options give the same bytes
 * on every machine and for every -j.
 */
#include <sys/stat.h>
#include <sys/types.h>

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shardtool.h"

static int cmd_synth_exec(int, char **);

enum {
	OPT_TRAIN = 256,
	OPT_TEST,
	OPT_SEED,
	OPT_CLASSES,
	OPT_PER_CLASS,
	OPT_VAL,
	OPT_QUALITY,
	OPT_WORKERS
};

static const struct cli_option synth_cifar_opts[] = {
	{ "train", 0, OPT_TRAIN, CLI_INT, "N",
	    "training images over the 5 batch files, the\n"
	    "first files taking any remainder (50000)", 0, 100000000, NULL, 0 },
	{ "test", 0, OPT_TEST, CLI_INT, "N", "test images (10000)", 0,
	    100000000, NULL, 0 },
	OPT_END
};
static const struct cli_option synth_imagenet_opts[] = {
	{ "classes", 0, OPT_CLASSES, CLI_INT, "C", "classes (10)", 1, 10000,
	    NULL, 0 },
	{ "per-class", 0, OPT_PER_CLASS, CLI_INT, "N",
	    "training images per class (50)", 0, 1000000, NULL, 0 },
	{ "val", 0, OPT_VAL, CLI_INT, "N",
	    "validation images, labels balanced (5 per class)", 0, 10000000,
	    NULL, 0 },
	{ "quality", 0, OPT_QUALITY, CLI_INT, "Q", "JPEG quality, 1-100 (90)",
	    1, 100, NULL, 0 },
	{ "workers", 'j', OPT_WORKERS, CLI_INT, "N",
	    "threads (this rank's CPUs, at most 64)", 1, 1024, NULL, 0 },
	OPT_END
};
static const struct cli_option synth_both_opts[] = {
	{ "seed", 0, OPT_SEED, CLI_UINT64, "S", "random seed (0)", 0, 0, NULL,
	    0 },
	OPT_END
};
static const struct cli_group synth_groups[] = {
	{ "cifar10", synth_cifar_opts },
	{ "imagenet", synth_imagenet_opts },
	{ "both", synth_both_opts },
	{ NULL, NULL }
};

const struct cli_command cmd_synth_entry = {
	.name = "synth",
	.usage = "synth cifar10|imagenet DIR [options]",
	.summary = "write a synthetic CIFAR-10 or ImageNet in the real layout",
	.about =
	    "Write a synthetic dataset under DIR (created if missing) in the\n"
	    "real on-disk layout. Each class draws its own shape and colors,\n"
	    "placed and sized at random per image. The same options give\n"
	    "byte-identical files, whatever --workers is.\n"
	    "\n"
	    "cifar10: DIR/data_batch_1.bin ... data_batch_5.bin, test_batch.bin\n"
	    "(records of 1 label byte and 32x32 R, G, B planes) and\n"
	    "batches.meta.txt (the 10 class names).\n"
	    "\n"
	    "imagenet: DIR/train/WNID/WNID_N.JPEG (N from 1),\n"
	    "DIR/val/ILSVRC2012_val_NNNNNNNN.JPEG, DIR/LOC_val_solution.csv (a\n"
	    "WNID and a box per val image) and DIR/LOC_synset_mapping.txt. The\n"
	    "JPEGs are about 500x375 in varied shapes and average about 0.65\n"
	    "bytes per pixel. As in the real set, three training files are odd:\n"
	    "the first three in class order (WNID_1, _2 and _3 of class 0) are\n"
	    "a grayscale JPEG, a CMYK JPEG (Adobe, inverted) and a PNG named\n"
	    ".JPEG; none are made when there are fewer than 3 training images.\n",
	.groups = synth_groups,
	.min_args = 2,
	.max_args = 2,
	.exec = cmd_synth_exec
};



/* ------------------------------------------------------------------------ */
/* random numbers                                                           */

struct rng {
	uint64_t s[4];
};

/* A stream per (seed, what, index): images do not depend on the order or
 * the thread that makes them. */
static void
rng_init(struct rng *r, uint64_t seed, uint64_t what, uint64_t index)
{
	uint64_t x = seed;
	int i;

	x = splitmix64(&x) ^ what;
	x = splitmix64(&x) ^ index;
	for (i = 0; i < 4; i++)
		r->s[i] = splitmix64(&x);
}

static inline uint64_t
rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t
rng_next(struct rng *r)
{
	uint64_t *s = r->s, v = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return v;
}

/* Uniform in [lo, hi]; the modulo bias is irrelevant at these ranges. */
static int
rng_range(struct rng *r, int lo, int hi)
{
	return lo + (int)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

/* Labels i % n for count items, shuffled (Fisher-Yates). */
static uint16_t *
balanced_labels(uint64_t seed, uint64_t what, size_t count, int n)
{
	uint16_t *v = xmalloc(count * sizeof *v + 1);
	struct rng r;
	size_t i, j;
	uint16_t t;

	rng_init(&r, seed, what, 0);
	for (i = 0; i < count; i++)
		v[i] = (uint16_t)(i % (size_t)n);
	for (i = count; i > 1; i--) {
		j = (size_t)(rng_next(&r) % i);
		t = v[i - 1];
		v[i - 1] = v[j];
		v[j] = t;
	}
	return v;
}

/* Stream tags for rng_init. */
#define WHAT_TRAIN_LABELS	1
#define WHAT_TEST_LABELS	2
#define WHAT_TRAIN		3
#define WHAT_TEST		4
#define WHAT_CLASS		5
#define WHAT_VAL		6
#define WHAT_VAL_LABELS		7

/* ------------------------------------------------------------------------ */
/* drawing                                                                  */

/*
 * Coordinates are in 1/16 pixel, integers only: floating point would let
 * FMA contraction or libm change a pixel between machines.
 */
#define SUB 16

struct rgb {
	int r, g, b;
};

#define NSHAPES 10

static int
in_disk(int dx, int dy, int cx, int cy, int rad)
{
	int64_t x = dx - cx, y = dy - cy;

	return x * x + y * y < (int64_t)rad * rad;
}

static int
iabs(int v)
{
	return v < 0 ? -v : v;
}

/*
 * Which part of shape kind covers the point (dx, dy) from the shape's
 * center, radius r: 0 none, 1 body, 2 and 3 accents. Every shape stays
 * inside the square of side 2r, which is also the val box. The shapes only
 * hint at the CIFAR-10 classes; what matters is that they differ.
 */
static int
shape_hit(int kind, int dx, int dy, int r)
{
	int64_t d2 = (int64_t)dx * dx + (int64_t)dy * dy, rr = (int64_t)r * r;
	int ax = iabs(dx), ay = iabs(dy), s;

	switch (kind) {
	case 0:		/* airplane: fuselage, swept wings, tail fin */
		if (ay < r / 7 && ax < r)
			return 1;
		if (ay < r * 4 / 5 && iabs(dx + r / 8) < (r * 4 / 5 - ay) / 3)
			return 2;
		if (dx < -r * 3 / 4 && dy < 0 && dy > -r / 2)
			return 3;
		return 0;
	case 1:		/* automobile: body, cabin, two wheels */
		if (in_disk(dx, dy, -r / 2, r / 3, r / 4) ||
		    in_disk(dx, dy, r / 2, r / 3, r / 4))
			return 3;
		if (ax < r && dy > -r / 5 && dy < r / 3)
			return 1;
		if (ax < r / 2 && dy > -r * 3 / 5 && dy <= -r / 5)
			return 2;
		return 0;
	case 2:		/* bird: body, head, beak */
		if (dx > r * 2 / 3 && iabs(dy + r / 3) < (r - dx) / 2)
			return 2;
		if (in_disk(dx, dy, r / 2, -r / 3, r / 4))
			return 1;
		if ((int64_t)dx * dx + 4 * (int64_t)dy * dy <
		    (int64_t)r * r * 4 / 9)
			return 1;
		return 0;
	case 3:		/* cat: face, two ears, two eyes */
		if (in_disk(dx, dy, -r / 3, r / 6, r / 8) ||
		    in_disk(dx, dy, r / 3, r / 6, r / 8))
			return 3;
		if (in_disk(dx, dy, 0, r / 4, r * 3 / 4))
			return 1;
		for (s = -1; s <= 1; s += 2)
			if (dy > -r && dy < -r / 4 &&
			    iabs(dx - s * r / 2) < (dy + r) / 3)
				return 2;
		return 0;
	case 4:		/* deer: a disk of vertical stripes */
		if (d2 >= rr)
			return 0;
		return ((dx + r) / (r / 3)) % 2 ? 1 : 2;
	case 5:		/* dog: a ring */
		return d2 < rr && d2 * 4 > rr ? 1 : 0;
	case 6:		/* frog: a checkerboard */
		if (ax >= r || ay >= r)
			return 0;
		return ((dx + r) / (r / 2) + (dy + r) / (r / 2)) % 2 ? 1 : 2;
	case 7:		/* horse: diagonal stripes in a diamond */
		if (ax + ay >= r)
			return 0;
		return ((dx + dy + 2 * r) / (r / 3)) % 2 ? 1 : 3;
	case 8:		/* ship: hull, mast, sail */
		if (dy >= 0 && dy < r / 2 && ax < r - dy)
			return 1;
		if (ax < r / 12 && dy < 0 && dy > -r)
			return 3;
		if (dy > -r * 9 / 10 && dy < -r / 10 && dx > r / 12 &&
		    dx - r / 12 < (dy + r) * 3 / 5)
			return 2;
		return 0;
	default:	/* truck: cargo box, cab, wheels */
		if (in_disk(dx, dy, -r / 2, r / 2, r / 4) ||
		    in_disk(dx, dy, r * 2 / 3, r / 2, r / 4))
			return 3;
		if (dx >= -r && dx < r / 3 && dy > -r * 2 / 3 && dy < r / 2)
			return 1;
		if (dx >= r / 3 + r / 12 && dx < r && dy > -r / 4 && dy < r / 2)
			return 2;
		return 0;
	}
}

/* What a class looks like: base colors that each image jitters. */
struct style {
	int shape;
	struct rgb fg, accent, bg0, bg1;
};

/* Hand-picked so classes differ at a glance; more classes derive theirs. */
static const struct style styles[NSHAPES] = {
	{ 0, { 200, 200, 210 }, { 90, 100, 140 }, { 90, 150, 230 }, { 200, 225, 250 } },
	{ 1, { 200, 30, 30 }, { 150, 200, 230 }, { 120, 120, 120 }, { 190, 190, 170 } },
	{ 2, { 120, 80, 40 }, { 240, 180, 20 }, { 130, 190, 240 }, { 60, 140, 60 } },
	{ 3, { 230, 150, 60 }, { 250, 230, 200 }, { 110, 70, 60 }, { 200, 170, 140 } },
	{ 4, { 150, 100, 50 }, { 230, 210, 170 }, { 40, 110, 40 }, { 120, 170, 80 } },
	{ 5, { 90, 60, 30 }, { 220, 200, 160 }, { 90, 160, 70 }, { 170, 210, 120 } },
	{ 6, { 40, 170, 40 }, { 200, 220, 60 }, { 60, 90, 50 }, { 130, 110, 70 } },
	{ 7, { 100, 50, 20 }, { 30, 20, 10 }, { 120, 180, 80 }, { 210, 200, 150 } },
	{ 8, { 240, 240, 240 }, { 200, 60, 40 }, { 20, 60, 150 }, { 120, 180, 230 } },
	{ 9, { 230, 200, 40 }, { 60, 60, 200 }, { 100, 100, 100 }, { 160, 170, 180 } }
};

static struct rgb
jitter(struct rng *r, struct rgb c, int amount)
{
	c.r += rng_range(r, -amount, amount);
	c.g += rng_range(r, -amount, amount);
	c.b += rng_range(r, -amount, amount);
	return c;
}

static void
class_style(uint64_t seed, int cls, struct style *st)
{
	struct rng r;

	*st = styles[cls % NSHAPES];
	if (cls < NSHAPES)
		return;
	/* Classes past the first ten reuse a shape with other colors. */
	rng_init(&r, seed, WHAT_CLASS, (uint64_t)cls);
	st->fg = jitter(&r, st->fg, 90);
	st->accent = jitter(&r, st->accent, 90);
	st->bg0 = jitter(&r, st->bg0, 90);
	st->bg1 = jitter(&r, st->bg1, 90);
}

static inline uint8_t
clamp8(int v)
{
	return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* One image's scene: a two-color gradient and the class's shape. */
struct scene {
	int w, h;
	struct rgb c[4];	/* outside (unused), body, accent, dark/light */
	struct rgb bg0, bg1;
	int cx, cy, r;		/* shape center and radius, in SUB units */
	int gx, gy;		/* gradient direction, |v| <= 256 */
	int64_t gmin, gspan;
	int shape;
};

static void
scene_make(struct scene *sc, struct rng *r, const struct style *st, int w,
    int h, int min_r, int max_r)
{
	int64_t v[4];
	int i;

	sc->w = w;
	sc->h = h;
	sc->shape = st->shape;
	sc->c[1] = jitter(r, st->fg, 35);
	sc->c[2] = jitter(r, st->accent, 35);
	sc->c[3] = rng_range(r, 0, 1) ? (struct rgb){ 25, 25, 30 } :
	    (struct rgb){ 235, 235, 225 };
	sc->bg0 = jitter(r, st->bg0, 40);
	sc->bg1 = jitter(r, st->bg1, 40);
	sc->r = rng_range(r, min_r * SUB, max_r * SUB);
	/* The center keeps at least two thirds of the shape in the frame. */
	sc->cx = rng_range(r, sc->r / 3, w * SUB - sc->r / 3);
	sc->cy = rng_range(r, sc->r / 3, h * SUB - sc->r / 3);
	sc->gx = rng_range(r, -256, 256);
	sc->gy = rng_range(r, -256, 256);
	if (sc->gx == 0 && sc->gy == 0)
		sc->gy = 256;
	v[0] = 0;
	v[1] = (int64_t)sc->gx * w;
	v[2] = (int64_t)sc->gy * h;
	v[3] = v[1] + v[2];
	sc->gmin = sc->gspan = v[0];
	for (i = 1; i < 4; i++) {
		if (v[i] < sc->gmin)
			sc->gmin = v[i];
		if (v[i] > sc->gspan)
			sc->gspan = v[i];
	}
	sc->gspan -= sc->gmin;
	if (sc->gspan == 0)
		sc->gspan = 1;
}

/*
 * Base colors of row y, before texture: (w, 3) ints. The gradient position
 * t in [0, 256] steps by a fixed amount along the row (16.16 fixed point).
 */
static void
scene_row(const struct scene *sc, int y, int *row)
{
	int64_t t, step;
	int x, t8, py, part, x0, x1;
	const struct rgb *c;

	t = ((int64_t)sc->gy * y - sc->gmin) * 65536 * 256 / sc->gspan;
	step = (int64_t)sc->gx * 65536 * 256 / sc->gspan;
	for (x = 0; x < sc->w; x++, t += step) {
		t8 = (int)(t >> 16);
		t8 = t8 < 0 ? 0 : t8 > 256 ? 256 : t8;
		row[x * 3] = sc->bg0.r + ((sc->bg1.r - sc->bg0.r) * t8 >> 8);
		row[x * 3 + 1] = sc->bg0.g + ((sc->bg1.g - sc->bg0.g) * t8 >> 8);
		row[x * 3 + 2] = sc->bg0.b + ((sc->bg1.b - sc->bg0.b) * t8 >> 8);
	}
	py = y * SUB + SUB / 2 - sc->cy;
	if (iabs(py) >= sc->r)
		return;
	x0 = (sc->cx - sc->r) / SUB;
	x1 = (sc->cx + sc->r) / SUB + 1;
	x0 = x0 < 0 ? 0 : x0;
	x1 = x1 > sc->w ? sc->w : x1;
	for (x = x0; x < x1; x++) {
		part = shape_hit(sc->shape, x * SUB + SUB / 2 - sc->cx, py,
		    sc->r);
		if (part == 0)
			continue;
		c = &sc->c[part];
		row[x * 3] = c->r;
		row[x * 3 + 1] = c->g;
		row[x * 3 + 2] = c->b;
	}
}

/* ------------------------------------------------------------------------ */
/* cifar10                                                                  */

#define CIFAR_SIDE 32
#define CIFAR_PIXELS (CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_RECORD (1 + 3 * CIFAR_PIXELS)

static const char *cifar_names[10] = {
	"airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
	"horse", "ship", "truck"
};

/* One record: the label, then the R, G and B planes (row-major). */
static void
cifar_record(uint64_t seed, uint64_t what, uint64_t index, int label,
    uint8_t *rec)
{
	int row[CIFAR_SIDE * 3], x, y, k;
	struct scene sc;
	struct rng r;
	uint64_t bits = 0;

	rng_init(&r, seed, what, index);
	scene_make(&sc, &r, &styles[label], CIFAR_SIDE, CIFAR_SIDE, 7, 14);
	rec[0] = (uint8_t)label;
	for (y = 0; y < CIFAR_SIDE; y++) {
		scene_row(&sc, y, row);
		for (x = 0; x < CIFAR_SIDE; x++) {
			for (k = 0; k < 3; k++) {
				/* Mild noise, 4 bits a sample: +-8. */
				if ((x * 3 + k) % 16 == 0)
					bits = rng_next(&r);
				rec[1 + k * CIFAR_PIXELS + y * CIFAR_SIDE + x] =
				    clamp8(row[x * 3 + k] +
				    (int)(bits & 15) - 8);
				bits >>= 4;
			}
		}
	}
}

/*
 * Synthesized files go through the library's atomic writer: a temporary
 * name it creates with O_EXCL|O_NOFOLLOW (a link planted there is never
 * written through), renamed into place when whole. No fsync: the files are
 * made again from the seed in less time than a sync of thousands would take.
 */
#define SYNTH_ATOMIC_FLAGS SK_ATOMIC_NOSYNC

/* A stream on path's temporary file; dies with the path and reason. */
static FILE *
out_open(struct sk_atomic *a, const char *path)
{
	struct sk_error err;
	FILE *f;

	if (sk_atomic_open(a, path, SYNTH_ATOMIC_FLAGS, 0644, &err) != 0)
		die("%s", err.msg);
	if ((f = sk_atomic_stdio(a, &err)) == NULL) {
		sk_atomic_abort(a);
		die("%s", err.msg);
	}
	return f;
}

/* Rename into place; a failed write leaves no file behind. */
static void
out_close(struct sk_atomic *a)
{
	struct sk_error err;

	if (sk_atomic_commit(a, &err) != 0)
		die("%s", err.msg);
}

static void
write_records(const char *dir, const char *name, uint64_t seed,
    uint64_t what, const uint16_t *labels, size_t first, size_t n,
    uint64_t *bytes)
{
	char path[4096];
	uint8_t rec[CIFAR_RECORD];
	struct sk_atomic a;
	FILE *f;
	size_t i;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	f = out_open(&a, path);
	for (i = first; i < first + n; i++) {
		cifar_record(seed, what, i, labels[i], rec);
		if (fwrite(rec, 1, sizeof rec, f) != sizeof rec)
			break;
	}
	out_close(&a);
	*bytes += (uint64_t)n * CIFAR_RECORD;
}

static int
synth_cifar10(const char *dir, size_t ntrain, size_t ntest, uint64_t seed)
{
	char path[4096], name[64];
	struct sk_atomic a;
	uint16_t *labels;
	uint64_t bytes = 0;
	size_t first = 0, n;
	FILE *f;
	int i;

	mkdir_p(dir);
	/* Balanced labels, shuffled: every class shows up in a small set. */
	labels = balanced_labels(seed, WHAT_TRAIN_LABELS, ntrain, 10);
	for (i = 0; i < 5; i++) {
		n = ntrain / 5 + ((size_t)i < ntrain % 5);
		snprintf(name, sizeof name, "data_batch_%d.bin", i + 1);
		write_records(dir, name, seed, WHAT_TRAIN, labels, first, n,
		    &bytes);
		first += n;
	}
	free(labels);
	labels = balanced_labels(seed, WHAT_TEST_LABELS, ntest, 10);
	write_records(dir, "test_batch.bin", seed, WHAT_TEST, labels, 0, ntest,
	    &bytes);
	free(labels);

	snprintf(path, sizeof path, "%s/batches.meta.txt", dir);
	f = out_open(&a, path);
	for (i = 0; i < 10; i++)
		fprintf(f, "%s\n", cifar_names[i]);
	out_close(&a);

	printf("synth cifar10: %s: 7 files, %zu train and %zu test images, "
	    "%llu bytes\n", dir, ntrain, ntest, (unsigned long long)bytes);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* imagenet                                                                 */

/* ImageNet-like sizes; 500x375 and its portrait are the common ones. */
static const int sizes[16][2] = {
	{ 500, 375 }, { 500, 375 }, { 500, 375 }, { 500, 375 },
	{ 500, 375 }, { 375, 500 }, { 375, 500 }, { 500, 333 },
	{ 500, 333 }, { 333, 500 }, { 400, 400 }, { 500, 400 },
	{ 500, 500 }, { 400, 300 }, { 500, 281 }, { 450, 500 }
};

/* Kinds of file: the three real-world oddities come first in train. */
enum { KIND_RGB = 0, KIND_GRAY, KIND_CMYK, KIND_PNG };

struct job {
	int cls;
	int index;		/* train: 1-based within the class; val: id */
	int kind;
	int val;
};

struct synth {
	const char *dir;
	uint64_t seed;
	int quality;
	int nclasses;
	struct style *styles;
	char (*wnids)[16];
	struct job *jobs;
	size_t njobs;
	/* val boxes, by val id - 1: xmin ymin xmax ymax */
	int (*boxes)[4];

	atomic_size_t next;	/* the next job to take */
	atomic_size_t done;
	atomic_int running;	/* workers not yet finished */
	atomic_int failed;
	pthread_mutex_t lock;	/* guards err and the byte counts */
	char err[1024];
	uint64_t bytes, jpeg_bytes, jpeg_pixels;
};

/* Synthetic WNIDs, increasing with the class index ("n%08d"). The step
 * leaves room for a hashed offset so they look less regular. */
static void
make_wnid(int cls, char *out, size_t size)
{
	uint64_t x = (uint64_t)cls;
	int n = 1000000 + cls * 9000 + (int)(splitmix64(&x) % 8000);

	snprintf(out, size, "n%08d", n);
}

static const char *adjectives[16] = {
	"spotted", "common", "greater", "lesser", "red", "striped", "giant",
	"mountain", "desert", "golden", "black", "marsh", "silver", "crested",
	"pygmy", "northern"
};
static const char *nouns[16] = {
	"heron", "tench", "gecko", "terrier", "beetle", "kettle", "lantern",
	"canoe", "violin", "teapot", "warbler", "mongoose", "sundial",
	"harp", "otter", "toucan"
};

/* A unique plausible name per class: adjective and noun pairs. */
static void
class_name(int cls, char *out, size_t size)
{
	int a = cls % 16, q = cls / 16;

	if (cls < 256)
		snprintf(out, size, "%s %s", adjectives[a],
		    nouns[(q + a) % 16]);
	else
		snprintf(out, size, "%s %s %d", adjectives[a],
		    nouns[(q + a) % 16], q / 16);
}

/*
 * Value noise: random values on a grid of cell pixels, bilinear between
 * them. A photograph's bytes come from its textured regions (foliage,
 * fur) while sky and walls are smooth, so a 64-pixel field decides where
 * the fine octaves (8 and 2 pixels) show; a 32-pixel octave adds shading
 * everywhere. White noise alone would look like static and compress far
 * worse; smooth gradients alone would compress far better.
 */
struct octave {
	int shift;		/* cell = 1 << shift pixels */
	int gw;
	int16_t *grid;		/* (gh, gw) in [-128, 127] */
	int *row;		/* (w) this octave at the current row */
};

#define NOCT 4
enum { OCT_MOD = 0, OCT_SHADE, OCT_MID, OCT_FINE };
static const int oct_shift[NOCT] = { 6, 5, 3, 1 };

/* Amplitudes in 1/256 level per noise unit (noise is +-128), tuned for
 * about 0.65 bytes per pixel at quality 90, within the 0.5-1.0 typical
 * of ImageNet's JPEGs (measured over 500 images). */
#define AMP_SHADE	48
#define AMP_MID		128
#define AMP_FINE	192
#define AMP_WHITE	192

struct texture {
	struct octave o[NOCT];
	int *acc;		/* (w) the texture of the row, in levels */
	int *mod;		/* (w) where fine detail shows, 0-128 */
	int *rowv;		/* (gw) a grid row interpolated along y */
};

static void
texture_make(struct texture *t, struct rng *r, int w, int h)
{
	size_t n, k, maxgw = 0;
	uint64_t bits = 0;
	int i;

	for (i = 0; i < NOCT; i++) {
		struct octave *o = &t->o[i];

		o->shift = oct_shift[i];
		o->gw = (w >> o->shift) + 2;
		n = (size_t)o->gw * (size_t)((h >> o->shift) + 2);
		o->grid = xmalloc(n * sizeof *o->grid);
		for (k = 0; k < n; k++) {
			if (k % 8 == 0)
				bits = rng_next(r);
			o->grid[k] = (int16_t)((int)(bits & 255) - 128);
			bits >>= 8;
		}
		o->row = xmalloc((size_t)w * sizeof *o->row);
		if ((size_t)o->gw > maxgw)
			maxgw = (size_t)o->gw;
	}
	t->acc = xmalloc((size_t)w * sizeof *t->acc);
	t->mod = xmalloc((size_t)w * sizeof *t->mod);
	t->rowv = xmalloc(maxgw * sizeof *t->rowv);
}

static void
texture_free(struct texture *t)
{
	int i;

	for (i = 0; i < NOCT; i++) {
		free(t->o[i].grid);
		free(t->o[i].row);
	}
	free(t->acc);
	free(t->mod);
	free(t->rowv);
}

/* One octave at row y into o->row, in [-128, 127]. */
static void
octave_row(struct octave *o, int *rowv, int y, int w)
{
	int x, gx, fx, sh = o->shift, cell = 1 << sh;
	int fy = y & (cell - 1);
	const int16_t *g0 = o->grid + (size_t)(y >> sh) * o->gw;
	const int16_t *g1 = g0 + o->gw;

	/* Along y into rowv (x cell), then along x (x cell again). */
	for (gx = 0; gx < o->gw; gx++)
		rowv[gx] = g0[gx] * (cell - fy) + g1[gx] * fy;
	for (x = 0; x < w; x++) {
		gx = x >> sh;
		fx = x & (cell - 1);
		o->row[x] = (rowv[gx] * (cell - fx) + rowv[gx + 1] * fx) >>
		    (2 * sh);
	}
}

static void
texture_row(struct texture *t, int y, int w)
{
	int i, x, m;

	for (i = 0; i < NOCT; i++)
		octave_row(&t->o[i], t->rowv, y, w);
	for (x = 0; x < w; x++) {
		/* Where the field is below -96 the fine octaves are off;
		 * they reach full strength at +32. */
		m = t->o[OCT_MOD].row[x] + 96;
		m = m < 0 ? 0 : m > 128 ? 128 : m;
		t->mod[x] = m;
		t->acc[x] = (t->o[OCT_SHADE].row[x] * AMP_SHADE +
		    ((t->o[OCT_MID].row[x] * AMP_MID +
		    t->o[OCT_FINE].row[x] * AMP_FINE) >> 7) * m) >> 8;
	}
}

/* Draw job j into rgb (h, w, 3) and return the box of the shape. */
static void
draw_image(const struct synth *s, const struct job *j, struct rng *r,
    uint8_t *rgb, int w, int h, int box[4])
{
	struct texture tex;
	struct scene sc;
	int *row, x, y, k, v, n, nbits = 0;
	uint64_t bits = 0;

	n = w < h ? w : h;
	scene_make(&sc, r, &s->styles[j->cls], w, h, n / 5, n * 2 / 5);
	texture_make(&tex, r, w, h);
	row = xmalloc((size_t)w * 3 * sizeof *row);
	for (y = 0; y < h; y++) {
		scene_row(&sc, y, row);
		texture_row(&tex, y, w);
		for (x = 0; x < w; x++) {
			/* 14 random bits a pixel: per-pixel luminance grain
			 * where the field allows texture, and +-2 levels of
			 * sensor noise per channel everywhere. */
			if (nbits < 14) {
				bits = rng_next(r);
				nbits = 64;
			}
			v = tex.acc[x] + ((((int)(bits & 255) - 128) *
			    AMP_WHITE >> 8) * tex.mod[x] >> 7);
			bits >>= 8;
			for (k = 0; k < 3; k++) {
				*rgb++ = clamp8(row[x * 3 + k] + v +
				    (int)(bits & 3) - 2);
				bits >>= 2;
			}
			nbits -= 14;
		}
	}
	free(row);
	texture_free(&tex);

	box[0] = (sc.cx - sc.r) / SUB;
	box[1] = (sc.cy - sc.r) / SUB;
	box[2] = (sc.cx + sc.r) / SUB;
	box[3] = (sc.cy + sc.r) / SUB;
	box[0] = box[0] < 0 ? 0 : box[0];
	box[1] = box[1] < 0 ? 0 : box[1];
	box[2] = box[2] > w - 1 ? w - 1 : box[2];
	box[3] = box[3] > h - 1 ? h - 1 : box[3];
}

/* In place: RGB (n, 3) to gray (n) with the BT.601 weights. */
static void
to_gray(uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)((77 * p[i * 3] + 150 * p[i * 3 + 1] +
		    29 * p[i * 3 + 2] + 128) >> 8);
}

/*
 * RGB (n, 3) to Adobe-inverted CMYK (n, 4): stored values are 255 - ink,
 * so a decoder computes R = C * K / 255. K carries the brightest channel.
 */
static void
to_cmyk(const uint8_t *rgb, uint8_t *cmyk, size_t n)
{
	int k, c;
	size_t i;

	for (i = 0; i < n; i++, rgb += 3, cmyk += 4) {
		k = rgb[0] > rgb[1] ? rgb[0] : rgb[1];
		k = k > rgb[2] ? k : rgb[2];
		for (c = 0; c < 3; c++)
			cmyk[c] = k == 0 ? 255 :
			    (uint8_t)((rgb[c] * 255 + k / 2) / k);
		cmyk[3] = (uint8_t)k;
	}
}

static void
job_path(const struct synth *s, const struct job *j, char *path, size_t n)
{
	if (j->val)
		snprintf(path, n, "%s/val/ILSVRC2012_val_%08d.JPEG", s->dir,
		    j->index);
	else
		snprintf(path, n, "%s/train/%s/%s_%d.JPEG", s->dir,
		    s->wnids[j->cls], s->wnids[j->cls], j->index);
}

/* Keep the first failure for the main thread's die(); workers stop. A
 * NULL path: why names it already. */
static void
fail_job(struct synth *s, const char *path, const char *why)
{
	pthread_mutex_lock(&s->lock);
	if (!atomic_load(&s->failed)) {
		snprintf(s->err, sizeof s->err, "%s%s%s", path != NULL ?
		    path : "", path != NULL ? ": " : "", why);
		atomic_store(&s->failed, 1);
	}
	pthread_mutex_unlock(&s->lock);
}

/* Make, encode and write one image; 0 or -1 after fail_job. */
static int
run_job(struct synth *s, const struct job *j, uint8_t *pix, uint8_t *cmyk)
{
	char path[4096];
	struct sk_error err = { 0, "" };
	struct sk_atomic a;
	struct rng r;
	uint8_t *out = NULL;
	size_t len = 0;
	int w, h, pick, box[4], rc;

	rng_init(&r, s->seed, j->val ? WHAT_VAL : WHAT_TRAIN,
	    ((uint64_t)j->cls << 32) | (uint64_t)j->index);
	pick = (int)(rng_next(&r) % 16);
	w = sizes[pick][0];
	h = sizes[pick][1];
	draw_image(s, j, &r, pix, w, h, box);
	if (j->val)
		memcpy(s->boxes[j->index - 1], box, sizeof box);

	switch (j->kind) {
	case KIND_GRAY:
		to_gray(pix, (size_t)w * h);
		rc = sk_image_encode_jpeg(pix, w, h, 1, s->quality, &out, &len,
		    &err);
		break;
	case KIND_CMYK:
		to_cmyk(pix, cmyk, (size_t)w * h);
		rc = sk_image_encode_jpeg(cmyk, w, h, 4, s->quality, &out,
		    &len, &err);
		break;
	case KIND_PNG:
		rc = sk_image_encode_png(pix, w, h, 3, -1, &out, &len, &err);
		break;
	default:
		rc = sk_image_encode_jpeg(pix, w, h, 3, s->quality, &out, &len,
		    &err);
		break;
	}
	job_path(s, j, path, sizeof path);
	if (rc < 0) {
		fail_job(s, path, err.msg);
		return -1;
	}

	if ((rc = sk_atomic_open(&a, path, SYNTH_ATOMIC_FLAGS, 0644,
	    &err)) == 0) {
		if ((rc = sk_atomic_write_all(&a, out, len, &err)) == 0)
			rc = sk_atomic_commit(&a, &err);
		else
			sk_atomic_abort(&a);
	}
	free(out);
	if (rc != 0) {
		/* The library's message names the path already. */
		fail_job(s, NULL, err.msg);
		return -1;
	}

	pthread_mutex_lock(&s->lock);
	s->bytes += len;
	if (j->kind == KIND_RGB) {
		s->jpeg_bytes += len;
		s->jpeg_pixels += (uint64_t)w * h;
	}
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static void *
worker(void *arg)
{
	struct synth *s = arg;
	uint8_t *pix, *cmyk;
	size_t i;

	/* The largest size in the table is 500x500. */
	pix = xmalloc(500 * 500 * 3);
	cmyk = xmalloc(500 * 500 * 4);
	while (!atomic_load(&s->failed)) {
		i = atomic_fetch_add(&s->next, 1);
		if (i >= s->njobs)
			break;
		if (run_job(s, &s->jobs[i], pix, cmyk) < 0)
			break;
		atomic_fetch_add(&s->done, 1);
	}
	free(pix);
	free(cmyk);
	atomic_fetch_sub(&s->running, 1);
	return NULL;
}

static void
write_text(const char *path, const char *text, size_t len)
{
	struct sk_error err;

	if (sk_atomic_write_file(path, text, len, SYNTH_ATOMIC_FLAGS,
	    &err) != 0)
		die("%s", err.msg);
}

/* A growing text buffer for the CSV and the synset list. */
struct text {
	char *p;
	size_t len, cap;
};

static void
text_add(struct text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
text_add(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
		va_end(ap);
		if (n < 0)
			die("formatting failed");
		if ((size_t)n < t->cap - t->len)
			break;
		t->cap = t->cap * 2 + (size_t)n + 64;
		t->p = xrealloc(t->p, t->cap);
	}
	t->len += (size_t)n;
}

static int
synth_imagenet(const char *dir, int nclasses, int per_class, size_t nval,
    uint64_t seed, int jobs, int quality)
{
	struct synth s;
	struct text txt = { xmalloc(4096), 0, 4096 };
	pthread_t *tids;
	uint16_t *labels;
	char path[4096], name[128];
	size_t i, ntrain, nstarted;
	int c, isatty2 = isatty(2);
	struct timespec nap = { 0, 200 * 1000 * 1000 };

	memset(&s, 0, sizeof s);
	s.dir = dir;
	s.seed = seed;
	s.quality = quality;
	s.nclasses = nclasses;
	s.styles = xcalloc((size_t)nclasses, sizeof *s.styles);
	s.wnids = xcalloc((size_t)nclasses, sizeof *s.wnids);
	for (c = 0; c < nclasses; c++) {
		class_style(seed, c, &s.styles[c]);
		make_wnid(c, s.wnids[c], sizeof s.wnids[c]);
	}

	ntrain = (size_t)nclasses * (size_t)per_class;
	s.njobs = ntrain + nval;
	s.jobs = xcalloc(s.njobs ? s.njobs : 1, sizeof *s.jobs);
	for (i = 0; i < ntrain; i++) {
		s.jobs[i].cls = (int)(i / (size_t)per_class);
		s.jobs[i].index = (int)(i % (size_t)per_class) + 1;
		/* The oddities: the first three training files. */
		if (ntrain >= 3 && i < 3)
			s.jobs[i].kind = KIND_GRAY + (int)i;
	}
	labels = balanced_labels(seed, WHAT_VAL_LABELS, nval,
	    nclasses);
	for (i = 0; i < nval; i++) {
		s.jobs[ntrain + i].cls = labels[i];
		s.jobs[ntrain + i].index = (int)i + 1;
		s.jobs[ntrain + i].val = 1;
	}
	free(labels);
	s.boxes = xcalloc(nval ? nval : 1, sizeof *s.boxes);

	mkdir_p(dir);
	for (c = 0; c < nclasses && per_class > 0; c++) {
		snprintf(path, sizeof path, "%s/train/%s", dir, s.wnids[c]);
		mkdir_p(path);
	}
	snprintf(path, sizeof path, "%s/val", dir);
	mkdir_p(path);

	atomic_init(&s.next, 0);
	atomic_init(&s.done, 0);
	atomic_init(&s.failed, 0);
	pthread_mutex_init(&s.lock, NULL);
	if ((size_t)jobs > s.njobs)
		jobs = s.njobs > 0 ? (int)s.njobs : 1;
	atomic_init(&s.running, jobs);
	tids = xcalloc((size_t)jobs, sizeof *tids);
	for (nstarted = 0; nstarted < (size_t)jobs; nstarted++) {
		if ((errno = pthread_create(&tids[nstarted], NULL, worker,
		    &s)) != 0) {
			/* Run with the threads we have; none means fail. */
			atomic_fetch_sub(&s.running,
			    jobs - (int)nstarted);
			if (nstarted == 0)
				die("pthread_create: %s", strerror(errno));
			break;
		}
	}
	while (isatty2 && atomic_load(&s.running) > 0) {
		fprintf(stderr, "\rsynth imagenet: %zu/%zu images",
		    atomic_load(&s.done), s.njobs);
		nanosleep(&nap, NULL);
	}
	for (i = 0; i < nstarted; i++)
		pthread_join(tids[i], NULL);
	if (isatty2)
		fprintf(stderr, "\rsynth imagenet: %zu/%zu images\n",
		    atomic_load(&s.done), s.njobs);
	free(tids);
	pthread_mutex_destroy(&s.lock);
	if (atomic_load(&s.failed))
		die("%s", s.err);

	/* Kaggle's LOC_val_solution.csv: "ImageId,WNID xmin ymin xmax ymax". */
	text_add(&txt, "ImageId,PredictionString\n");
	for (i = 0; i < nval; i++) {
		const int *b = s.boxes[i];

		text_add(&txt, "ILSVRC2012_val_%08zu,%s %d %d %d %d\n", i + 1,
		    s.wnids[s.jobs[ntrain + i].cls], b[0], b[1], b[2], b[3]);
	}
	snprintf(path, sizeof path, "%s/LOC_val_solution.csv", dir);
	write_text(path, txt.p, txt.len);

	txt.len = 0;
	for (c = 0; c < nclasses; c++) {
		class_name(c, name, sizeof name);
		text_add(&txt, "%s %s\n", s.wnids[c], name);
	}
	snprintf(path, sizeof path, "%s/LOC_synset_mapping.txt", dir);
	write_text(path, txt.p, txt.len);
	free(txt.p);

	printf("synth imagenet: %s: %zu images (%zu train in %d classes, "
	    "%zu val), %llu bytes", dir, s.njobs, ntrain, nclasses, nval,
	    (unsigned long long)s.bytes);
	if (s.jpeg_pixels > 0)
		printf(", RGB JPEGs %.2f bytes/pixel",
		    (double)s.jpeg_bytes / (double)s.jpeg_pixels);
	printf("\n");

	free(s.styles);
	free(s.wnids);
	free(s.jobs);
	free(s.boxes);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* options                                                                  */

struct synth_opts {
	long long ntrain, ntest, nval;
	int nclasses, per_class, quality, jobs;
	const char *cifar_opt, *imagenet_opt;
	uint64_t seed;
};

static void
synth_set(void *ctx, const struct cli_option *opt, const struct cli_value *v)
{
	struct synth_opts *o = ctx;

	switch (opt->id) {
	case OPT_TRAIN: o->ntrain = v->i; o->cifar_opt = "--train"; break;
	case OPT_TEST: o->ntest = v->i; o->cifar_opt = "--test"; break;
	case OPT_SEED: o->seed = v->u; break;
	case OPT_CLASSES:
		o->nclasses = (int)v->i;
		o->imagenet_opt = "--classes";
		break;
	case OPT_PER_CLASS:
		o->per_class = (int)v->i;
		o->imagenet_opt = "--per-class";
		break;
	case OPT_VAL: o->nval = v->i; o->imagenet_opt = "--val"; break;
	case OPT_QUALITY:
		o->quality = (int)v->i;
		o->imagenet_opt = "--quality";
		break;
	case OPT_WORKERS:
		o->jobs = (int)v->i;
		o->imagenet_opt = "--workers";
		break;
	}
}

static int
cmd_synth_exec(int argc, char **argv)
{
	struct synth_opts o = { 50000, 10000, -1, 10, 50, 90, 0, NULL, NULL,
	    0 };
	long long ntrain, ntest, nval;
	int nclasses, per_class, quality, jobs, optind;
	const char *kind, *dir, *cifar_opt, *imagenet_opt;
	uint64_t seed;
	long n;

	optind = cli_parse(&cmd_synth_entry, argc, argv, synth_set, &o);
	ntrain = o.ntrain;
	ntest = o.ntest;
	nval = o.nval;
	nclasses = o.nclasses;
	per_class = o.per_class;
	quality = o.quality;
	jobs = o.jobs;
	cifar_opt = o.cifar_opt;
	imagenet_opt = o.imagenet_opt;
	seed = o.seed;
	kind = argv[optind];
	dir = argv[optind + 1];

	if (strcmp(kind, "cifar10") == 0) {
		if (imagenet_opt != NULL)
			usage_error("%s does not apply to cifar10",
			    imagenet_opt);
		return synth_cifar10(dir, (size_t)ntrain, (size_t)ntest, seed);
	}
	if (strcmp(kind, "imagenet") != 0)
		usage_error("unknown dataset '%s': want cifar10 or "
		    "imagenet", kind);
	if (cifar_opt != NULL)
		usage_error("%s does not apply to imagenet", cifar_opt);
	if ((long long)nclasses * per_class > 100000000)
		usage_error("--classes x --per-class is over 100000000");
	if (nval < 0)
		nval = 5LL * nclasses;
	if (jobs == 0) {
		n = cli_cpus_per_rank();
		jobs = n > 64 ? 64 : (int)n;
	}
	return synth_imagenet(dir, nclasses, per_class, (size_t)nval, seed,
	    jobs, quality);
}
