/*
 * shardload.c - the loader without a model: `bench` measures the pipeline
 * and names the stage that bounds it, `dump` writes a batch as an image
 * grid (or a NumPy array) to look at, `keys` prints what every batch holds.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "shardkit.h"
#include "cli.h"

static const char about[] =
"Stream WebDataset shards through the shardkit loader: read, shuffle,\n"
"decode, augment and batch, with no model. A source ending in .json is a\n"
"manifest (sample counts come from it); anything else is a shard pattern\n"
"such as 'data/train-{000000..000146}.tar' (every shard's headers are\n"
"read once to count its samples).\n";

/* ------------------------------------------------------------------------ */
/* options                                                                  */

enum { O_LIMIT = 1, O_JSON, O_OUT, O_COLUMNS, O_CHECKSUM, O_BOXES };

struct opts {
	struct cli_loader l;
	const char *source;
	int64_t limit;
	const char *json;
	const char *out;
	int columns, checksum, boxes;
};

#define END { NULL, 0, 0, 0, NULL, NULL, 0, 0, NULL, 0 }

static const struct cli_option bench_opts[] = {
	{ "limit-batches", 0, O_LIMIT, CLI_INT, "N", "stop after N batches",
	    1, 1e15, NULL, 0 },
	{ "json", 0, O_JSON, CLI_STRING, "FILE",
	    "write the results as JSON (- for stdout)", 0, 0, NULL, 0 },
	END
};

static const struct cli_option dump_opts[] = {
	{ "out", 'o', O_OUT, CLI_STRING, "FILE",
	    "the .png grid or .npy array to write", 0, 0, NULL, 0 },
	{ "columns", 0, O_COLUMNS, CLI_INT, "N",
	    "grid columns (square-ish by default)", 1, 4096, NULL, 0 },
	END
};

static const struct cli_option keys_opts[] = {
	{ "checksum", 0, O_CHECKSUM, CLI_FLAG, NULL,
	    "add a 64-bit FNV-1a hash of each image's bytes", 0, 0, NULL, 0 },
	{ "boxes", 0, O_BOXES, CLI_FLAG, NULL,
	    "add the source size, crop box and flip", 0, 0, NULL, 0 },
	{ "limit-batches", 0, O_LIMIT, CLI_INT, "N", "stop after N batches",
	    1, 1e15, NULL, 0 },
	END
};

#define LOADER_GROUPS \
	{ "data", cli_loader_data }, \
	{ "pipeline", cli_loader_pipeline }, \
	{ "augmentation", cli_loader_augment }, \
	{ "output", cli_loader_output }, \
	{ "ranks and position", cli_loader_ranks }, \
	{ "remote (http, https, gs, s3)", cli_remote_opts }

static const struct cli_group bench_groups[] = {
	LOADER_GROUPS, { "bench", bench_opts }, { NULL, NULL }
};
static const struct cli_group dump_groups[] = {
	LOADER_GROUPS, { "dump", dump_opts }, { NULL, NULL }
};
static const struct cli_group keys_groups[] = {
	LOADER_GROUPS, { "keys", keys_opts }, { NULL, NULL }
};

static int bench_exec(int, char **);
static int dump_exec(int, char **);
static int keys_exec(int, char **);

static const struct cli_command bench_cmd = {
	"bench", "bench SOURCE [options]",
	"run the pipeline; print images/s, MB/s, each stage's busy and\n"
	"             waiting time, and the stage that bounds it",
	"Run the pipeline with no model and measure it: images/s, MB/s, the\n"
	"time each stage was busy and waiting, and the stage that bounds it.\n"
	"SOURCE is a manifest (.json) or a shard pattern.\n",
	bench_groups, 1, 1, bench_exec
};

static const struct cli_command dump_cmd = {
	"dump", "dump SOURCE --out FILE.png|FILE.npy [options]",
	"write the first batch as a labelled grid (.png) or a NumPy array",
	"Write the first batch as a labelled grid (.png) or as a NumPy array\n"
	"(.npy, the batch's dtype and layout); its keys and labels go to\n"
	"stdout. SOURCE is a manifest (.json) or a shard pattern.\n",
	dump_groups, 1, 1, dump_exec
};

static const struct cli_command keys_cmd = {
	"keys", "keys SOURCE [options]",
	"print one line per sample: epoch, batch, index, key, label",
	"Print one line per sample: epoch, batch, index, key and label (and\n"
	"more with --checksum, --boxes). SOURCE is a manifest (.json) or a\n"
	"shard pattern.\n",
	keys_groups, 1, 1, keys_exec
};

static void
set_opt(void *ctx, const struct cli_option *o, const struct cli_value *v)
{
	struct opts *op = ctx;

	if (cli_loader_set(&op->l, o, v))
		return;
	switch (o->id) {
	case O_LIMIT: op->limit = v->i; break;
	case O_JSON: op->json = v->s; break;
	case O_OUT: op->out = v->s; break;
	case O_COLUMNS: op->columns = (int)v->i; break;
	case O_CHECKSUM: op->checksum = 1; break;
	case O_BOXES: op->boxes = 1; break;
	}
}

static void
parse(const struct cli_command *cmd, int argc, char **argv, struct opts *o)
{
	int first;

	memset(o, 0, sizeof *o);
	cli_loader_init(&o->l);
	o->limit = -1;
	first = cli_parse(cmd, argc, argv, set_opt, o);
	o->source = argv[first];
	cli_loader_finish(&o->l, o->source);
	if (cmd == &dump_cmd && !o->l.cfg.decode)
		usage_error("dump needs pixels: drop --no-decode");
	if (cmd == &keys_cmd && o->checksum && !o->l.cfg.decode)
		usage_error("--checksum needs pixels: drop --no-decode");
}

/* A failed loader: stop its threads (so none is left running at exit),
 * then report its message. */
static void __attribute__((noreturn))
loader_die(sk_loader *l)
{
	char msg[SK_ERRMSG_MAX];

	snprintf(msg, sizeof msg, "%s", sk_errmsg(l));
	sk_loader_close(l);
	die("%s", msg);
}

static sk_loader *
open_loader(const struct opts *o)
{
	sk_loader *l;

	if (sk_loader_open(&l, &o->l.cfg) != 0)
		die("%s", l != NULL ? sk_errmsg(l) : "out of memory");
	if (sk_loader_note(l) != NULL && !cli_quiet)
		warn("%s", sk_loader_note(l));
	return l;
}

/* ------------------------------------------------------------------------ */
/* bench                                                                    */

struct bench_result {
	double wall, steady_wall;
	uint64_t samples, steady_samples;
	int64_t batches;
};

static void
write_json(const struct opts *o, const struct sk_loader_stats *st,
    const struct bench_result *r, uint64_t peak_rss)
{
	const struct sk_loader_config *c = &o->l.cfg;
	const char *reasons[SK_SKIP_NREASONS];
	double share;
	const char *bound = sk_loader_bound(st, r->wall, c->decode, &share);
	const struct sk_fetch_config *fc = &o->l.remote.cfg;
	struct sk_fetch_stats rs;
	struct cli_json *j;
	int i;

	cli_remote_stats(&o->l.remote, &rs);
	for (i = 0; i < SK_SKIP_NREASONS; i++)
		reasons[i] = sk_skip_reason_name(i);
	j = cli_json_open(o->json);
	cli_json_object(j, "config");
	cli_json_source(j, "source", o->source);
	cli_json_int(j, "batch_per_rank", c->batch);
	cli_json_int(j, "global_batch", (long long)c->batch * c->world);
	cli_json_int(j, "world", c->world);
	cli_json_int(j, "rank", c->rank);
	cli_json_int(j, "epoch", c->epoch);
	cli_json_int(j, "epochs", c->epochs);
	cli_json_uint(j, "seed", c->seed);
	cli_json_int(j, "workers", st->workers);
	cli_json_int(j, "io_streams", st->io_streams);
	cli_json_uint(j, "prefetch_bytes", c->prefetch_bytes);
	cli_json_int(j, "shuffle", c->shuffle);
	cli_json_int(j, "image_size", c->image_size);
	cli_json_str(j, "crop", cli_crop_name(c->crop));
	cli_json_bool(j, "flip", c->flip);
	cli_json_str(j, "dtype", cli_dtype_name(c->dtype));
	cli_json_str(j, "layout", cli_layout_name(c->layout));
	cli_json_bool(j, "decode", c->decode);
	cli_json_bool(j, "strict", c->strict);
	cli_json_str(j, "remainder", cli_remainder_name(c->remainder));
	cli_json_int(j, "resume_batch", c->resume_batch);
	if (o->limit >= 0)
		cli_json_int(j, "limit_batches", o->limit);
	else
		cli_json_null(j, "limit_batches");
	cli_json_int(j, "connections", fc->connections);
	cli_json_int(j, "parts", fc->parts);
	cli_json_uint(j, "part_size", fc->part_size);
	cli_json_real(j, "stall_timeout_seconds", fc->stall_timeout);
	cli_json_real(j, "retry_time_seconds", fc->retry_time);
	cli_json_end(j);

	cli_json_object(j, "result");
	cli_json_uint(j, "samples", st->samples);
	cli_json_uint(j, "batches", st->batches);
	cli_json_uint(j, "bytes", st->bytes);
	cli_json_uint(j, "sample_bytes", st->sample_bytes);
	cli_json_skips(j, st->skipped, reasons, SK_SKIP_NREASONS);
	cli_json_uint(j, "dropped", st->dropped);
	cli_json_uint(j, "unplanned", st->unplanned);
	cli_json_uint(j, "mismatched_shards", st->mismatched_shards);
	cli_json_int(j, "batches_per_epoch", st->batches_per_epoch);
	cli_json_real(j, "wall_seconds", r->wall);
	cli_json_real(j, "images_per_second", r->wall > 0 ?
	    (double)r->samples / r->wall : 0);
	cli_json_real(j, "steady_images_per_second", r->steady_wall > 0 ?
	    (double)r->steady_samples / r->steady_wall : 0);
	cli_json_real(j, "bytes_per_second", r->wall > 0 ?
	    (double)st->bytes / r->wall : 0);
	cli_json_str(j, "bound", bound);
	cli_json_real(j, "bound_share", share);
	cli_json_object(j, "stage_seconds");
	cli_json_real(j, "io_busy", st->io_busy);
	cli_json_real(j, "io_blocked", st->io_blocked);
	cli_json_real(j, "input_wait", st->input_wait);
	cli_json_real(j, "decode_busy", st->decode_busy);
	cli_json_real(j, "decode_idle", st->decode_idle);
	cli_json_real(j, "ring_wait", st->ring_wait);
	cli_json_real(j, "consumer_wait", st->consumer_wait);
	cli_json_end(j);
	cli_json_uint(j, "memory_bound_bytes", st->memory_bound);
	cli_json_uint(j, "peak_rss_bytes", peak_rss);
	cli_json_remote(j, "remote", &rs, st);
	cli_json_end(j);
	cli_json_close(j);
}

/* The process's peak resident set (VmHWM), in bytes. */
static uint64_t
peak_rss(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	unsigned long long kb = 0;

	if (f == NULL)
		return 0;
	while (fgets(line, sizeof line, f) != NULL)
		if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb * 1024;
}

static void
progress(struct cli_progress *p, const struct sk_loader_stats *st,
    double wall, int64_t total)
{
	double share;
	const char *bound = sk_loader_bound(st, wall, 1, &share);

	cli_progress(p, "batch %" PRIu64 "/%" PRId64 "  %.0f images/s  "
	    "%.1f MB/s  skipped %" PRIu64 "  bound: %s (%.0f%%)", st->batches,
	    total, wall > 0 ? (double)st->samples / wall : 0,
	    wall > 0 ? (double)st->bytes / 1e6 / wall : 0, st->skipped_total,
	    bound, share * 100);
}

static int
cmd_bench(const struct opts *o)
{
	sk_loader *l;
	struct sk_batch b;
	struct sk_loader_stats st;
	struct bench_result r;
	struct cli_progress prog;
	double t0, t1 = 0, t;
	int64_t total;
	int rc = 0, i;
	uint64_t first_n = 0;

	memset(&r, 0, sizeof r);
	t0 = cli_now();
	l = open_loader(o);
	sk_loader_stats(l, &st);
	total = st.batches_per_epoch * o->l.cfg.epochs - o->l.cfg.resume_batch;
	if (o->limit > 0 && o->limit < total)
		total = o->limit;
	cli_progress_init(&prog);
	while (r.batches < total && (rc = sk_loader_next(l, &b)) > 0) {
		if (r.batches == 0) {
			t1 = cli_now();
			first_n = (uint64_t)b.n;
		}
		r.samples += (uint64_t)b.n;
		r.batches++;
		if (sk_loader_release(l, &b) != 0)
			loader_die(l);
		if (cli_progress_due(&prog)) {
			sk_loader_stats(l, &st);
			progress(&prog, &st, cli_now() - t0, total);
		}
	}
	if (r.batches < total && rc < 0)
		loader_die(l);
	t = cli_now();
	cli_progress_done(&prog);
	sk_loader_stats(l, &st);
	r.wall = t - t0;
	r.steady_wall = t - t1;
	r.steady_samples = r.samples - first_n;
	if (o->json != NULL)
		write_json(o, &st, &r, peak_rss());
	if (o->json == NULL || strcmp(o->json, "-") != 0) {
		double share;
		const char *bound = sk_loader_bound(&st, r.wall, o->l.cfg.decode,
		    &share);
		struct sk_fetch_stats rs;

		printf("%" PRIu64 " samples in %" PRId64 " batches, %.3f s: "
		    "%.1f images/s, %.1f MB/s\n", r.samples, r.batches,
		    r.wall, r.wall > 0 ? (double)r.samples / r.wall : 0,
		    r.wall > 0 ? (double)st.bytes / 1e6 / r.wall : 0);
		printf("skipped %" PRIu64, st.skipped_total);
		for (i = 0; i < SK_SKIP_NREASONS; i++)
			if (st.skipped[i] > 0)
				printf(" %s=%" PRIu64, sk_skip_reason_name(i),
				    st.skipped[i]);
		printf(", dropped %" PRIu64 " (remainder)\n", st.dropped);
		if (st.mismatched_shards > 0)
			printf("manifest: %" PRIu64 " shards disagree with it, "
			    "%" PRIu64 " samples past its counts not "
			    "delivered\n", st.mismatched_shards,
			    st.unplanned);
		printf("stage        threads   busy s   wait s\n");
		printf("io           %7d %8.3f %8.3f  (blocked on prefetch "
		    "room %.3f s)\n", st.io_streams, st.io_busy,
		    st.input_wait, st.io_blocked);
		printf("decode       %7d %8.3f %8.3f\n", st.workers,
		    st.decode_busy, st.decode_idle);
		printf("consumer     %7d %8.3f %8.3f  (slots full %.3f s)\n", 1,
		    r.wall - st.consumer_wait, st.consumer_wait, st.ring_wait);
		printf("bound: %s (busy %.0f%% of its capacity)\n", bound,
		    share * 100);
		printf("memory: peak RSS %.1f MiB, bound by the formula %.1f "
		    "MiB\n", (double)peak_rss() / 1048576.0,
		    (double)st.memory_bound / 1048576.0);
		cli_remote_stats(&o->l.remote, &rs);
		cli_print_remote(stdout, &rs);
		if (rs.requests > 0)
			printf("read-ahead: %d shards a stream at the end, %d "
			    "at most (the bound allows %d)\n", st.ahead,
			    st.ahead_peak, st.ahead_cap);
	}
	sk_loader_close(l);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* keys                                                                     */

static uint64_t
fnv1a(const uint8_t *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	while (n-- > 0) {
		h ^= *p++;
		h *= 0x100000001b3ULL;
	}
	return h;
}

static int
cmd_keys(const struct opts *o)
{
	sk_loader *l = open_loader(o);
	struct sk_batch b;
	int64_t n = 0;
	int rc = 0, i;

	while ((o->limit < 0 || n < o->limit) &&
	    (rc = sk_loader_next(l, &b)) > 0) {
		for (i = 0; i < b.n; i++) {
			printf("%d\t%" PRId64 "\t%d\t%s\t%" PRId32, b.epoch,
			    b.index, i, b.keys[i], b.labels[i]);
			if (o->checksum)
				printf("\t%016" PRIx64, fnv1a((const uint8_t *)
				    b.images + (size_t)i * b.image_bytes,
				    b.image_bytes));
			if (o->boxes)
				printf("\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%d",
				    b.aug[i].src_w, b.aug[i].src_h, b.aug[i].x,
				    b.aug[i].y, b.aug[i].w, b.aug[i].h,
				    b.aug[i].flip);
			putchar('\n');
		}
		if (sk_loader_release(l, &b) != 0)
			loader_die(l);
		n++;
	}
	if ((o->limit < 0 || n < o->limit) && rc < 0)
		loader_die(l);
	if (fflush(stdout) != 0 || ferror(stdout))
		die("standard output: %s", strerror(errno));
	sk_loader_close(l);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* dump                                                                     */

/* 3x5 digits, one row per byte, bit 2 leftmost. */
static const uint8_t digits[10][5] = {
	{ 7, 5, 5, 5, 7 }, { 2, 6, 2, 2, 7 }, { 7, 1, 7, 4, 7 },
	{ 7, 1, 7, 1, 7 }, { 5, 5, 7, 1, 1 }, { 7, 4, 7, 1, 7 },
	{ 7, 4, 7, 5, 7 }, { 7, 1, 1, 1, 1 }, { 7, 5, 7, 5, 7 },
	{ 7, 5, 7, 1, 7 }
};

/* Draw a number at (x, y) of an RGB canvas, each font pixel s x s. */
static void
draw_number(uint8_t *pix, int cw, int ch, int x, int y, int s, int32_t v)
{
	char txt[16];
	int i, r, c, dy, dx, px, py;

	snprintf(txt, sizeof txt, "%" PRId32, v);
	for (i = 0; txt[i] != '\0'; i++, x += 4 * s) {
		if (txt[i] < '0' || txt[i] > '9')
			continue;
		for (r = 0; r < 5; r++)
			for (c = 0; c < 3; c++) {
				if (!(digits[txt[i] - '0'][r] & (4 >> c)))
					continue;
				for (dy = 0; dy < s; dy++)
					for (dx = 0; dx < s; dx++) {
						px = x + c * s + dx;
						py = y + r * s + dy;
						if (px < cw && py < ch)
							memset(pix + ((size_t)py *
							    cw + px) * 3, 255, 3);
					}
			}
	}
}

static void
write_all(FILE *f, const char *path, const void *p, size_t n)
{
	if (fwrite(p, 1, n, f) != n)
		die("%s: %s", path, strerror(errno));
}

static void
dump_npy(const char *path, const struct sk_batch *b)
{
	static const char *const descr[] = { "|u1", "<f4", "<u2", "<f2" };
	char hdr[256];
	int n, pad;
	FILE *f;

	/* NumPy has no bfloat16: bf16 is written as its raw 16 bits. */
	n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': "
	    "False, 'shape': (%d, %d, %d, %d), }", descr[b->dtype], b->n,
	    b->layout == SK_LAYOUT_NCHW ? 3 : b->size, b->size,
	    b->layout == SK_LAYOUT_NCHW ? b->size : 3);
	pad = 64 - (10 + n + 1) % 64;
	if (pad == 64)
		pad = 0;
	memset(hdr + n, ' ', (size_t)pad);
	hdr[n + pad] = '\n';
	n += pad + 1;
	if ((f = fopen(path, "wb")) == NULL)
		die("%s: %s", path, strerror(errno));
	write_all(f, path, "\x93NUMPY\x01\x00", 8);
	write_all(f, path, (uint8_t[]){ (uint8_t)(n & 0xff),
	    (uint8_t)(n >> 8) }, 2);
	write_all(f, path, hdr, (size_t)n);
	write_all(f, path, b->images, (size_t)b->n * b->image_bytes);
	if (fclose(f) != 0)
		die("%s: %s", path, strerror(errno));
}

static void
dump_png(const char *path, const struct sk_batch *b, int columns)
{
	const int S = b->size, label_h = 14, gap = 2;
	int cols, rows, cw, ch, i, y, x0, y0;
	uint8_t *canvas, *png = NULL;
	size_t pnglen;
	struct sk_error err;
	FILE *f;

	cols = columns > 0 ? columns : (int)ceil(sqrt((double)b->n));
	if (cols > b->n)
		cols = b->n;
	rows = (b->n + cols - 1) / cols;
	cw = cols * (S + gap) + gap;
	ch = rows * (S + label_h + gap) + gap;
	if ((canvas = calloc((size_t)cw * (size_t)ch, 3)) == NULL)
		die("out of memory for a %d x %d grid", cw, ch);
	for (i = 0; i < b->n; i++) {
		const uint8_t *img = (const uint8_t *)b->images +
		    (size_t)i * b->image_bytes;

		x0 = gap + (i % cols) * (S + gap);
		y0 = gap + (i / cols) * (S + label_h + gap);
		for (y = 0; y < S; y++)
			memcpy(canvas + ((size_t)(y0 + label_h + y) * cw + x0) *
			    3, img + (size_t)y * S * 3, (size_t)S * 3);
		draw_number(canvas, cw, ch, x0 + 1, y0 + 2, 2, b->labels[i]);
	}
	if (sk_image_encode_png(canvas, cw, ch, 3, 6, &png, &pnglen, &err) !=
	    0)
		die("%s: %s", path, err.msg);
	free(canvas);
	if ((f = fopen(path, "wb")) == NULL)
		die("%s: %s", path, strerror(errno));
	write_all(f, path, png, pnglen);
	if (fclose(f) != 0)
		die("%s: %s", path, strerror(errno));
	free(png);
}

static int
cmd_dump(struct opts *o)
{
	sk_loader *l;
	struct sk_batch b;
	size_t n;
	int png, rc, i;

	if (o->out == NULL)
		usage_error("dump needs --out FILE.png or FILE.npy");
	n = strlen(o->out);
	png = n > 4 && strcasecmp(o->out + n - 4, ".png") == 0;
	if (!png && !(n > 4 && strcasecmp(o->out + n - 4, ".npy") == 0))
		usage_error("--out %s: the name must end in .png or .npy",
		    o->out);
	/* A grid shows pixels as they are: u8, HWC. */
	if (png) {
		o->l.cfg.dtype = SK_DTYPE_U8;
		o->l.cfg.layout = SK_LAYOUT_NHWC;
	}
	o->l.cfg.device = -1;
	l = open_loader(o);
	if ((rc = sk_loader_next(l, &b)) < 0)
		loader_die(l);
	if (rc == 0 || b.n == 0)
		die("%s: the first batch is empty", o->source);
	if (png)
		dump_png(o->out, &b, o->columns);
	else
		dump_npy(o->out, &b);
	for (i = 0; i < b.n; i++) {
		char key[1024];

		/* a key is a member's name: shown escaped */
		sk_escape(key, sizeof key, b.keys[i], strlen(b.keys[i]), 0);
		printf("%d\t%s\t%" PRId32 "\n", i, key, b.labels[i]);
	}
	sk_loader_release(l, &b);
	sk_loader_close(l);
	return 0;
}

/* ------------------------------------------------------------------------ */

static int
bench_exec(int argc, char **argv)
{
	struct opts o;

	parse(&bench_cmd, argc, argv, &o);
	return cmd_bench(&o);
}

static int
keys_exec(int argc, char **argv)
{
	struct opts o;

	parse(&keys_cmd, argc, argv, &o);
	return cmd_keys(&o);
}

static int
dump_exec(int argc, char **argv)
{
	struct opts o;

	parse(&dump_cmd, argc, argv, &o);
	return cmd_dump(&o);
}

int
main(int argc, char **argv)
{
	static const struct cli_command *const table[] = {
		&bench_cmd, &dump_cmd, &keys_cmd, NULL
	};
	const struct cli_command *cmd;
	int first;

	cli_heap_tune();
	cmd = cli_dispatch("shardload", about, table, NULL, argc, argv,
	    &first);
	return cmd->exec(argc - first, argv + first);
}
