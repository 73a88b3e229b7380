/*
 * augment.c - how fast the loader's per-sample step runs on one core:
 * sk__augment (region decode + random-resized crop + resize + flip) against
 * a plain full decode (sk_image_decode_rgb) of the same JPEGs.
 *
 * Not built by make. From the top of the tree, after a build in build/:
 *
 *   cc -O2 -std=gnu11 -D_GNU_SOURCE -Iinclude -Iloader bench/augment.c \
 *       -o /tmp/bench-augment -Lbuild/lib/.libs -lshardkit \
 *       -Wl,-rpath,$PWD/build/lib/.libs -lm
 *   /tmp/bench-augment [-n SECONDS] [-s SIZE] [-c rrc|center|none]
 *       [-t u8|f32] [FILE.jpg ...]
 *
 * Without files it makes 64 synthetic 500x375 JPEGs at quality 90 (smooth
 * shapes plus texture, ~2 bits a pixel); ImageNet-like ones come from
 * `shardtool synth imagenet`, whose JPEGs are about 500x375 too. Each
 * measurement cycles over the files for SECONDS (2) and reports images/s;
 * the two are interleaved three times and the best of each is kept.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shardkit.h"
#include "loader.h"

struct file {
	uint8_t *data;
	size_t len;
};

/* CPU time of this thread: the machines are shared, and wall time would
 * charge other processes' work to ours. */
static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
die(const char *what, const struct sk_error *err)
{
	fprintf(stderr, "bench-augment: %s: %s\n", what, err ? err->msg : "");
	exit(1);
}

/* A photograph-like test image: soft blobs of colour over a gradient,
 * plus fine texture, so the JPEG's entropy data is realistic in size. */
static uint8_t *
synth(int w, int h, uint32_t seed)
{
	uint8_t *p = malloc((size_t)w * h * 3);
	double cx[6], cy[6], r[6], col[6][3], v, d;
	uint32_t x = seed * 2654435761u + 1;
	int i, j, c, k;

	if (p == NULL)
		die("out of memory", NULL);
	for (k = 0; k < 6; k++) {
		x = x * 1103515245u + 12345u;
		cx[k] = (x >> 8) % w;
		x = x * 1103515245u + 12345u;
		cy[k] = (x >> 8) % h;
		x = x * 1103515245u + 12345u;
		r[k] = 30 + (x >> 8) % 150;
		for (c = 0; c < 3; c++) {
			x = x * 1103515245u + 12345u;
			col[k][c] = (x >> 8) % 256;
		}
	}
	for (j = 0; j < h; j++)
		for (i = 0; i < w; i++)
			for (c = 0; c < 3; c++) {
				v = 60 + 100.0 * (i + j * (c + 1)) /
				    (w + h * 3);
				for (k = 0; k < 6; k++) {
					d = hypot(i - cx[k], j - cy[k]) / r[k];
					if (d < 1)
						v += (col[k][c] - v) *
						    (1 - d * d);
				}
				x = x * 1103515245u + 12345u;
				v += ((x >> 16) % 41) - 20;
				v += 25 * sin(i * 0.3 + c) * sin(j * 0.23);
				p[((size_t)j * w + i) * 3 + c] =
				    (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
			}
	return p;
}

static struct file *
load(int argc, char **argv, int *nfiles)
{
	struct sk_error err = { 0 };
	struct file *f;
	uint8_t *pix;
	FILE *fp;
	long n;
	int i;

	*nfiles = argc > 0 ? argc : 64;
	if ((f = calloc((size_t)*nfiles, sizeof *f)) == NULL)
		die("out of memory", NULL);
	for (i = 0; i < *nfiles; i++) {
		if (argc == 0) {
			pix = synth(500, 375, (uint32_t)i);
			if (sk_image_encode_jpeg(pix, 500, 375, 3, 90,
			    &f[i].data, &f[i].len, &err) != 0)
				die("encode", &err);
			free(pix);
			continue;
		}
		if ((fp = fopen(argv[i], "rb")) == NULL ||
		    fseek(fp, 0, SEEK_END) != 0 || (n = ftell(fp)) < 0) {
			perror(argv[i]);
			exit(1);
		}
		rewind(fp);
		f[i].len = (size_t)n;
		if ((f[i].data = malloc(f[i].len)) == NULL ||
		    fread(f[i].data, 1, f[i].len, fp) != f[i].len) {
			perror(argv[i]);
			exit(1);
		}
		fclose(fp);
	}
	return f;
}

/* Images per second of sk__augment over the files for secs seconds. */
static double
run_augment(const struct file *f, int nf, const struct sk__aug_config *cfg,
    double secs)
{
	struct sk__aug_scratch s;
	struct sk_sample_aug aug;
	struct sk_error err = { 0 };
	void *out;
	double t0, t;
	long n = 0;

	memset(&s, 0, sizeof s);
	out = malloc((size_t)cfg->size * cfg->size * 3 * 4);
	t0 = now();
	do {
		if (sk__augment(cfg, &s, sk__sample_seed(1, 0, "") + n,
		    f[n % nf].data, f[n % nf].len, out, &aug, &err) != 0)
			die("augment", &err);
		n++;
	} while ((t = now() - t0) < secs);
	free(out);
	sk__aug_scratch_free(&s);
	return n / t;
}

static double
run_decode(const struct file *f, int nf, double secs)
{
	struct sk_error err = { 0 };
	uint8_t *rgb;
	double t0, t;
	long n = 0;
	int w, h;

	t0 = now();
	do {
		if (sk_image_decode_rgb(f[n % nf].data, f[n % nf].len, 0, &rgb,
		    &w, &h, &err) != 0)
			die("decode", &err);
		free(rgb);
		n++;
	} while ((t = now() - t0) < secs);
	return n / t;
}

int
main(int argc, char **argv)
{
	struct sk__aug_config cfg;
	struct file *f;
	double secs = 2, a, d, best_a = 0, best_d = 0;
	size_t bytes = 0;
	int c, nf, i;

	memset(&cfg, 0, sizeof cfg);
	cfg.size = 224;
	cfg.crop = SK_CROP_RANDOM_RESIZED;
	cfg.scale[0] = 0.08;
	cfg.scale[1] = 1;
	cfg.ratio[0] = 3.0 / 4;
	cfg.ratio[1] = 4.0 / 3;
	cfg.flip = 1;
	cfg.dtype = SK_DTYPE_U8;
	cfg.layout = SK_LAYOUT_NHWC;
	for (i = 0; i < 3; i++) {
		cfg.mean[i] = 0.45f;
		cfg.std[i] = 0.225f;
	}
	while ((c = getopt(argc, argv, "n:s:c:t:")) != -1) {
		switch (c) {
		case 'n':
			secs = atof(optarg);
			break;
		case 's':
			cfg.size = atoi(optarg);
			break;
		case 'c':
			cfg.crop = strcmp(optarg, "center") == 0 ?
			    SK_CROP_CENTER : strcmp(optarg, "none") == 0 ?
			    SK_CROP_NONE : SK_CROP_RANDOM_RESIZED;
			break;
		case 't':
			cfg.dtype = strcmp(optarg, "f32") == 0 ? SK_DTYPE_F32 :
			    SK_DTYPE_U8;
			break;
		default:
			fprintf(stderr, "usage: bench-augment [-n SECONDS] "
			    "[-s SIZE] [-c rrc|center|none] [-t u8|f32] "
			    "[FILE ...]\n");
			return 2;
		}
	}
	cfg.resize = cfg.size * 8 / 7;
	f = load(argc - optind, argv + optind, &nf);
	for (i = 0; i < nf; i++)
		bytes += f[i].len;
	printf("%d JPEGs, %.1f KB average; output %d, crop %s, %s\n", nf,
	    bytes / 1024.0 / nf, cfg.size, cfg.crop == SK_CROP_CENTER ?
	    "center" : cfg.crop == SK_CROP_NONE ? "none" : "random-resized",
	    cfg.dtype == SK_DTYPE_F32 ? "f32" : "u8");
	for (i = 0; i < 3; i++) {
		a = run_augment(f, nf, &cfg, secs);
		d = run_decode(f, nf, secs);
		printf("round %d: augment %.0f images/s, full decode %.0f "
		    "images/s\n", i + 1, a, d);
		if (a > best_a)
			best_a = a;
		if (d > best_d)
			best_d = d;
	}
	printf("best: augment %.0f images/s (%.0f us), full decode %.0f "
	    "images/s (%.0f us); ratio %.2f\n", best_a, 1e6 / best_a, best_d,
	    1e6 / best_d, best_a / best_d);
	for (i = 0; i < nf; i++)
		free(f[i].data);
	free(f);
	return 0;
}
