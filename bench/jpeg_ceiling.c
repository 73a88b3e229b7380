/*
 * bench/jpeg_ceiling.c - the decode ceiling of the loader benchmark (issue 3).
 *
 * Build:  cc -O2 -o jpeg_ceiling bench/jpeg_ceiling.c -ljpeg
 * Run:    jpeg_ceiling [--passes K] PATH...
 *
 * Reads every *.jpg / *.jpeg / *.JPEG under the PATHs (directories are
 * walked; files are taken as they are) into memory, then, on one thread,
 * decodes each to 8-bit RGB at full size with the libjpeg API the way a
 * loader would at best: one reused jpeg_decompress_struct, jpeg_mem_src,
 * out_color_space = JCS_RGB, the library's default DCT method and
 * upsampling, every scanline read into one reused buffer. One untimed
 * warm-up pass over all the files comes first, then K timed passes (1).
 *
 * Prints a human line per pass and, last, machine-readable lines:
 *   images N
 *   megapixels MP          (per pass)
 *   seconds S              (the fastest timed pass, wall)
 *   cpu_seconds C          (that pass's thread CPU time)
 *   images_per_sec R       (N / S: one core's ceiling)
 *   failed F               (files libjpeg refused; they count in no figure)
 * bench/load.sh multiplies images_per_sec by the number of CPUs.
 */
#define _XOPEN_SOURCE 700
#define _DEFAULT_SOURCE

#include <errno.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include <jpeglib.h>

struct blob {
	unsigned char *data;
	size_t size;
};

static struct blob *blobs;
static size_t nblobs, capblobs;
static size_t total_bytes;

static void die(const char *fmt, const char *arg)
{
	fprintf(stderr, "jpeg_ceiling: ");
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
	exit(1);
}

static int is_jpeg_name(const char *path)
{
	const char *dot = strrchr(path, '.');

	return dot && (strcasecmp(dot, ".jpg") == 0 ||
	    strcasecmp(dot, ".jpeg") == 0);
}

static void load_file(const char *path, off_t size)
{
	FILE *f;
	struct blob *b;

	if (nblobs == capblobs) {
		capblobs = capblobs ? capblobs * 2 : 1024;
		blobs = realloc(blobs, capblobs * sizeof *blobs);
		if (!blobs)
			die("%s", "out of memory");
	}
	b = &blobs[nblobs];
	b->size = (size_t)size;
	b->data = malloc(b->size ? b->size : 1);
	if (!b->data)
		die("%s", "out of memory");
	f = fopen(path, "rb");
	if (!f)
		die("cannot open %s", path);
	if (fread(b->data, 1, b->size, f) != b->size)
		die("cannot read %s", path);
	fclose(f);
	total_bytes += b->size;
	nblobs++;
}

static int visit(const char *path, const struct stat *st, int type,
    struct FTW *ftw)
{
	(void)ftw;
	if (type == FTW_F && S_ISREG(st->st_mode) && is_jpeg_name(path))
		load_file(path, st->st_size);
	return 0;
}

/* libjpeg's errors longjmp back to the decode loop instead of exiting. */
struct err_mgr {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
};

static void on_error(j_common_ptr cinfo)
{
	struct err_mgr *e = (struct err_mgr *)cinfo->err;

	longjmp(e->jb, 1);
}

static void on_message(j_common_ptr cinfo, int level)
{
	/* warnings (corrupt-data notes) are not interesting here */
	(void)cinfo;
	(void)level;
}

static double now(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct pass {
	double wall, cpu, mpix;
	size_t failed;
	uint64_t check;
};

/* Decode one image into *buf (grown as needed): its pixels, or -1. */
static int decode_one(struct jpeg_decompress_struct *cinfo,
    struct err_mgr *jerr, const struct blob *b, unsigned char **buf,
    size_t *cap, double *mpix, uint64_t *check)
{
	size_t stride, need;

	if (setjmp(jerr->jb)) {
		jpeg_abort_decompress(cinfo);
		return -1;
	}
	jpeg_mem_src(cinfo, b->data, (unsigned long)b->size);
	jpeg_read_header(cinfo, TRUE);
	cinfo->out_color_space = JCS_RGB;
	jpeg_start_decompress(cinfo);
	stride = (size_t)cinfo->output_width * 3;
	need = stride * cinfo->output_height;
	if (need > *cap) {
		free(*buf);
		*buf = malloc(need);
		if (!*buf)
			die("%s", "out of memory");
		*cap = need;
	}
	while (cinfo->output_scanline < cinfo->output_height) {
		JSAMPROW rows[16];
		JDIMENSION k, n = cinfo->output_height - cinfo->output_scanline;

		if (n > 16)
			n = 16;
		for (k = 0; k < n; k++)
			rows[k] = *buf + stride * (cinfo->output_scanline + k);
		jpeg_read_scanlines(cinfo, rows, n);
	}
	*mpix += (double)cinfo->output_width * cinfo->output_height / 1e6;
	/* touch the output so the pass provably produced pixels */
	*check += (*buf)[need / 2] + (*buf)[need - 1];
	jpeg_finish_decompress(cinfo);
	return 0;
}

static void decode_all(struct jpeg_decompress_struct *cinfo,
    struct err_mgr *jerr, unsigned char **buf, size_t *cap, struct pass *p)
{
	size_t i;
	double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);

	memset(p, 0, sizeof *p);
	for (i = 0; i < nblobs; i++)
		if (decode_one(cinfo, jerr, &blobs[i], buf, cap, &p->mpix,
		    &p->check) != 0)
			p->failed++;
	p->wall = now(CLOCK_MONOTONIC) - t0;
	p->cpu = now(CLOCK_THREAD_CPUTIME_ID) - c0;
}

int main(int argc, char **argv)
{
	struct jpeg_decompress_struct cinfo;
	struct err_mgr jerr;
	unsigned char *buf = NULL;
	size_t cap = 0;
	struct pass p, best = { -1, 0, 0, 0, 0 };
	int passes = 1, i, k, npaths = 0;

	for (i = 1; i < argc; i++) {
		struct stat st;

		if (strcmp(argv[i], "--passes") == 0 && i + 1 < argc) {
			passes = atoi(argv[++i]);
			if (passes < 1)
				die("bad --passes %s", argv[i]);
			continue;
		}
		if (strcmp(argv[i], "-h") == 0 ||
		    strcmp(argv[i], "--help") == 0) {
			printf("usage: jpeg_ceiling [--passes K] PATH...\n");
			return 0;
		}
		if (stat(argv[i], &st) != 0)
			die("cannot stat %s", argv[i]);
		if (S_ISDIR(st.st_mode)) {
			if (nftw(argv[i], visit, 32, FTW_PHYS) != 0)
				die("cannot walk %s", argv[i]);
		} else {
			load_file(argv[i], st.st_size);
		}
		npaths++;
	}
	if (npaths == 0) {
		fprintf(stderr, "usage: jpeg_ceiling [--passes K] PATH...\n");
		return 2;
	}
	if (nblobs == 0)
		die("%s", "no *.jpg or *.jpeg files found");

	cinfo.err = jpeg_std_error(&jerr.pub);
	jerr.pub.error_exit = on_error;
	jerr.pub.emit_message = on_message;
	jpeg_create_decompress(&cinfo);

	fprintf(stderr, "jpeg_ceiling: %zu files, %.1f MB in memory; "
	    "libjpeg version %d\n", nblobs, total_bytes / 1e6, JPEG_LIB_VERSION);
	decode_all(&cinfo, &jerr, &buf, &cap, &p);
	fprintf(stderr, "jpeg_ceiling: warm-up: %.3f s, %.0f images/s\n",
	    p.wall, (nblobs - p.failed) / p.wall);
	for (k = 0; k < passes; k++) {
		decode_all(&cinfo, &jerr, &buf, &cap, &p);
		fprintf(stderr, "jpeg_ceiling: pass %d: %.3f s wall, %.3f s CPU,"
		    " %.0f images/s, %.1f MP/s\n", k + 1, p.wall, p.cpu,
		    (nblobs - p.failed) / p.wall, p.mpix / p.wall);
		if (best.wall < 0 || p.wall < best.wall)
			best = p;
	}
	jpeg_destroy_decompress(&cinfo);
	free(buf);

	printf("images %zu\n", nblobs - best.failed);
	printf("megapixels %.3f\n", best.mpix);
	printf("seconds %.4f\n", best.wall);
	printf("cpu_seconds %.4f\n", best.cpu);
	printf("images_per_sec %.2f\n", (nblobs - best.failed) / best.wall);
	printf("failed %zu\n", best.failed);
	printf("checksum %llu\n", (unsigned long long)best.check);
	return 0;
}
