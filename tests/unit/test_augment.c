/*
 * test_augment.c - the loader's decode-and-augment step: per-sample seeds,
 * torchvision's crop boxes, cropped and DCT-scaled JPEG decoding against
 * full decodes, the resize against a plain Pillow-style reference, flips,
 * output dtypes and layouts, other image kinds, and bad input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "loader.h"

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */

/*
 * The unit binary links only libshardkit, and on systems whose linker
 * wants every DSO named (Debian's libtool), -lm is not among them: these
 * few stand-ins keep the test free of libm.
 */
static double
dabs(double x)
{
	return (x < 0 ? -x : x);
}

static double
dfloor(double x)
{
	double t = (double)(int64_t)x;

	return (t > x ? t - 1 : t);
}

static double
dceil(double x)
{
	return (-dfloor(-x));
}

/* Python's round(): half to even. */
static double
rne(double x)
{
	double f = dfloor(x), r = x - f;

	if (r > 0.5 || (r == 0.5 && (int64_t)f % 2 != 0))
		return (f + 1);
	return (f);
}

/* Triangle wave of period p: 0 up to p/2 and back. */
static int
tri(int x, int p)
{
	return (abs(x % p - p / 2));
}

/*
 * A test photograph: a gradient, ridges a few dozen pixels apart, and a
 * little noise, w*h*comps bytes. The ridges make a crop one pixel off
 * measurably wrong; the noise keeps the JPEG's entropy data dense.
 */
static uint8_t *
photo(int w, int h, int comps, uint32_t seed)
{
	uint8_t *p = malloc((size_t)w * h * comps);
	uint32_t x = seed * 2654435761u + 7;
	int i, j, c, v;

	CHECK(p != NULL);
	for (j = 0; j < h; j++)
		for (i = 0; i < w; i++)
			for (c = 0; c < comps; c++) {
				x = x * 1103515245u + 12345u;
				v = (i * 120 / w + j * 80 / h + c * 60) % 256;
				v += 3 * tri(i + 13 * c, 46) +
				    3 * tri(j + 7 * c, 38) - 60;
				v += (int)((x >> 16) % 9) - 4;
				p[((size_t)j * w + i) * comps + c] =
				    (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
			}
	return (p);
}

static uint8_t *
enc_jpeg(const uint8_t *pix, int w, int h, int comps, int q, size_t *len)
{
	struct sk_error err = { 0 };
	uint8_t *out = NULL;

	CHECK_OK(sk_image_encode_jpeg(pix, w, h, comps, q, &out, len, &err),
	    &err);
	return (out);
}

static uint8_t *
enc_png(const uint8_t *pix, int w, int h, int comps, size_t *len)
{
	struct sk_error err = { 0 };
	uint8_t *out = NULL;

	CHECK_OK(sk_image_encode_png(pix, w, h, comps, -1, &out, len, &err),
	    &err);
	return (out);
}

static uint8_t *
dec(const uint8_t *data, size_t len, int *w, int *h)
{
	struct sk_error err = { 0 };
	uint8_t *rgb = NULL;

	CHECK_OK(sk_image_decode_rgb(data, len, 0, &rgb, w, h, &err), &err);
	return (rgb);
}

static void
config(struct sk__aug_config *c, enum sk_crop crop, int size)
{
	int i;

	memset(c, 0, sizeof *c);
	c->size = size;
	c->crop = crop;
	c->scale[0] = 0.08;
	c->scale[1] = 1.0;
	c->ratio[0] = 3.0 / 4.0;
	c->ratio[1] = 4.0 / 3.0;
	c->resize = size * 8 / 7;
	c->flip = 0;
	c->dtype = SK_DTYPE_U8;
	c->layout = SK_LAYOUT_NHWC;
	for (i = 0; i < 3; i++) {
		c->mean[i] = 0.485f + 0.01f * i;
		c->std[i] = 0.229f + 0.002f * i;
	}
}

static size_t
dtype_size(enum sk_dtype t)
{
	return (t == SK_DTYPE_U8 ? 1 : t == SK_DTYPE_F32 ? 4 : 2);
}

/* sk__augment that must succeed; out is malloc'd, size*size*3 values. */
static void *
augment(const struct sk__aug_config *c, struct sk__aug_scratch *s,
    uint64_t seed, const uint8_t *data, size_t len, struct sk_sample_aug *aug)
{
	struct sk_error err = { 0 };
	struct sk_sample_aug tmp;
	void *out = malloc((size_t)c->size * c->size * 3 *
	    dtype_size(c->dtype));

	CHECK(out != NULL);
	CHECK_OK(sk__augment(c, s, seed, data, len, out, aug ? aug : &tmp,
	    &err), &err);
	return (out);
}

/*
 * The reference resize, written as plainly as possible from Pillow's
 * libImaging/Resample.c (precompute_coeffs, normalize_coeffs_8bpc,
 * ImagingResampleInner): BILINEAR with support scaled by the reduction,
 * 22-bit fixed point, the horizontal pass over every row, rounded to 8
 * bits, then the vertical pass. box is (x0, y0, x1, y1) in src pixels.
 */
static void
ref_coeffs(int in, double in0, double in1, int out, int *ksize, int **bounds,
    int32_t **kk)
{
	double scale = (in1 - in0) / out, fs = scale < 1 ? 1 : scale;
	double center, ww, w[512];
	int xx, x, xmin, xmax;

	*ksize = (int)dceil(fs) * 2 + 1;
	CHECK(*ksize <= 512);
	*bounds = calloc((size_t)out * 2, sizeof **bounds);
	*kk = calloc((size_t)out * *ksize, sizeof **kk);
	CHECK(*bounds != NULL && *kk != NULL);
	for (xx = 0; xx < out; xx++) {
		center = in0 + (xx + 0.5) * scale;
		xmin = (int)(center - fs + 0.5);
		if (xmin < 0)
			xmin = 0;
		xmax = (int)(center + fs + 0.5);
		if (xmax > in)
			xmax = in;
		xmax -= xmin;
		ww = 0;
		for (x = 0; x < xmax; x++) {
			double t = dabs((x + xmin - center + 0.5) / fs);

			w[x] = t < 1 ? 1 - t : 0;
			ww += w[x];
		}
		for (x = 0; x < xmax; x++)
			(*kk)[xx * *ksize + x] = (int32_t)(0.5 + w[x] / ww *
			    (1 << 22));
		(*bounds)[xx * 2] = xmin;
		(*bounds)[xx * 2 + 1] = xmax;
	}
}

static uint8_t
ref_clip(int64_t v)
{
	v >>= 22;
	return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static uint8_t *
ref_resize(const uint8_t *src, int sw, int sh, const double box[4], int dw,
    int dh)
{
	uint8_t *tmp = malloc((size_t)sh * dw * 3), *out = malloc((size_t)dh *
	    dw * 3);
	int *bh, *bv, kh, kv, x, y, c, i;
	int32_t *wh, *wv;
	int64_t s;

	CHECK(tmp != NULL && out != NULL);
	ref_coeffs(sw, box[0], box[2], dw, &kh, &bh, &wh);
	ref_coeffs(sh, box[1], box[3], dh, &kv, &bv, &wv);
	for (y = 0; y < sh; y++)
		for (x = 0; x < dw; x++)
			for (c = 0; c < 3; c++) {
				s = 1 << 21;
				for (i = 0; i < bh[x * 2 + 1]; i++)
					s += (int64_t)src[((size_t)y * sw +
					    bh[x * 2] + i) * 3 + c] *
					    wh[x * kh + i];
				tmp[((size_t)y * dw + x) * 3 + c] = ref_clip(s);
			}
	for (y = 0; y < dh; y++)
		for (x = 0; x < dw; x++)
			for (c = 0; c < 3; c++) {
				s = 1 << 21;
				for (i = 0; i < bv[y * 2 + 1]; i++) {
					size_t at = (size_t)(bv[y * 2] + i) *
					    dw + x;

					s += (int64_t)tmp[at * 3 + c] *
					    wv[y * kv + i];
				}
				out[((size_t)y * dw + x) * 3 + c] = ref_clip(s);
			}
	free(bh);
	free(bv);
	free(wh);
	free(wv);
	free(tmp);
	return (out);
}

/* Pixels (x, y, w, h) of src (sh rows of sw), as a new image. */
static uint8_t *
crop(const uint8_t *src, int sw, int x, int y, int w, int h)
{
	uint8_t *p = malloc((size_t)w * h * 3);
	int j;

	CHECK(p != NULL);
	for (j = 0; j < h; j++)
		memcpy(p + (size_t)j * w * 3, src + ((size_t)(y + j) * sw + x) *
		    3, (size_t)w * 3);
	return (p);
}

/* Left-right mirror of (h, w, 3), in place. */
static void
mirror(uint8_t *p, int w, int h)
{
	uint8_t t[3];
	int x, y;

	for (y = 0; y < h; y++)
		for (x = 0; x < w / 2; x++) {
			uint8_t *a = p + ((size_t)y * w + x) * 3;
			uint8_t *b = p + ((size_t)y * w + w - 1 - x) * 3;

			memcpy(t, a, 3);
			memcpy(a, b, 3);
			memcpy(b, t, 3);
		}
}

/* The reference for a random-resized crop: torchvision's resized_crop on
 * a PIL image, img.crop(box).resize((size, size)), then the flip. */
static uint8_t *
ref_rrc(const uint8_t *full, int w, const struct sk_sample_aug *a, int size)
{
	uint8_t *c, *out;
	double box[4];

	CHECK(a->x == (int)a->x && a->y == (int)a->y && a->w == (int)a->w &&
	    a->h == (int)a->h);
	c = crop(full, w, (int)a->x, (int)a->y, (int)a->w, (int)a->h);
	box[0] = box[1] = 0;
	box[2] = a->w;
	box[3] = a->h;
	out = ref_resize(c, (int)a->w, (int)a->h, box, size, size);
	if (a->flip)
		mirror(out, size, size);
	free(c);
	return (out);
}

/* Resize(resize) + CenterCrop(size): resize the whole image, then crop. */
static uint8_t *
ref_center(const uint8_t *full, int w, int h, int resize, int size)
{
	double box[4] = { 0, 0, w, h };
	uint8_t *r, *out;
	int rw, rh, top, left;

	if (w <= h) {
		rw = resize;
		rh = (int)((double)resize * h / w);
	} else {
		rh = resize;
		rw = (int)((double)resize * w / h);
	}
	top = (int)rne((rh - size) / 2.0);
	left = (int)rne((rw - size) / 2.0);
	r = ref_resize(full, w, h, box, rw, rh);
	out = crop(r, rw, left, top, size, size);
	free(r);
	return (out);
}

struct diff {
	int max;
	double mean;
	size_t ndiff;
};

static struct diff
compare(const uint8_t *a, const uint8_t *b, size_t n)
{
	struct diff d = { 0, 0, 0 };
	double sum = 0;
	size_t i;
	int e;

	for (i = 0; i < n; i++) {
		e = abs(a[i] - b[i]);
		sum += e;
		if (e > d.max)
			d.max = e;
		if (e != 0)
			d.ndiff++;
	}
	d.mean = n ? sum / n : 0;
	return (d);
}

/* The DCT scale sk__jpeg_decode_region picks: 1/8, 1/4, 1/2 or 1, the
 * smallest that keeps the box at least min pixels on both sides. */
static int
denom_for(double bw, double bh, int min)
{
	int d;

	for (d = 8; d > 1; d /= 2)
		if (bw / d >= min && bh / d >= min)
			return (d);
	return (1);
}

/* ------------------------------------------------------------------------ */
/* randomness                                                               */

TEST(augment_rng)
{
	uint64_t a = 42, b = 42, c = 43, v;
	double u, sum = 0, lo = 1, hi = 0;
	int i;

	/* A pure function of the state: equal states, equal streams. */
	for (i = 0; i < 100; i++)
		CHECK(sk__rng_next(&a) == sk__rng_next(&b));
	CHECK(sk__rng_next(&a) != sk__rng_next(&c));
	for (i = 0; i < 100000; i++) {
		u = sk__rng_uniform(&a);
		CHECK(u >= 0.0 && u < 1.0);
		/* 53 random bits: a multiple of 2^-53. */
		CHECK(u * 9007199254740992.0 == dfloor(u * 9007199254740992.0));
		sum += u;
		lo = u < lo ? u : lo;
		hi = u > hi ? u : hi;
	}
	t_diag("mean %.4f over 1e5 draws, min %.2g, max %.6f", sum / 1e5, lo,
	    hi);
	CHECK(dabs(sum / 1e5 - 0.5) < 0.005);
	CHECK(lo < 1e-3 && hi > 1 - 1e-3);
	/* State 0 is not special (splitmix64 adds before mixing). */
	v = 0;
	CHECK(sk__rng_next(&v) != 0);
}

static int
popcount64(uint64_t x)
{
	int n = 0;

	for (; x != 0; x &= x - 1)
		n++;
	return (n);
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x < y ? -1 : x > y);
}

TEST(augment_sample_seed)
{
	enum { N = 20000 };
	uint64_t *v = malloc(sizeof *v * N), s0, s1;
	char key[64];
	double bits = 0;
	int i;

	CHECK(v != NULL);
	/* Stable: the same inputs give the same seed, call after call. */
	s0 = sk__sample_seed(7, 3, "n01440764_10026");
	CHECK(sk__sample_seed(7, 3, "n01440764_10026") == s0);
	/* NULL is the empty key. */
	CHECK(sk__sample_seed(7, 3, NULL) == sk__sample_seed(7, 3, ""));

	/* Distinct keys, epochs and seeds: no two alike. */
	for (i = 0; i < N; i++) {
		snprintf(key, sizeof key, "shard-%03d/sample%06d", i % 7, i);
		v[i] = sk__sample_seed(7, 3, key);
	}
	qsort(v, N, sizeof *v, cmp_u64);
	for (i = 1; i < N; i++)
		CHECK(v[i] != v[i - 1]);
	for (i = 0; i < N; i++)
		v[i] = sk__sample_seed(7, i - N / 2, "k");
	qsort(v, N, sizeof *v, cmp_u64);
	for (i = 1; i < N; i++)
		CHECK(v[i] != v[i - 1]);
	for (i = 0; i < N; i++)
		v[i] = sk__sample_seed((uint64_t)i * 0x10001, 3, "k");
	qsort(v, N, sizeof *v, cmp_u64);
	for (i = 1; i < N; i++)
		CHECK(v[i] != v[i - 1]);

	/* Avalanche: a one-character change, or the next epoch, flips about
	 * half of the 64 bits. */
	for (i = 0; i < 1000; i++) {
		snprintf(key, sizeof key, "img%05d", i);
		s0 = sk__sample_seed(1, 0, key);
		key[3] ^= 1;
		s1 = sk__sample_seed(1, 0, key);
		bits += popcount64(s0 ^ s1);
		bits += popcount64(s0 ^ sk__sample_seed(1, 1, key));
	}
	t_diag("mean bits flipped: %.2f of 64", bits / 2000);
	CHECK(bits / 2000 > 30 && bits / 2000 < 34);
	/* The seed is not the key hash alone: seeds 0 and 1 differ. */
	CHECK(sk__sample_seed(0, 0, "a") != sk__sample_seed(1, 0, "a"));
	/* Nor does epoch -1 alias epoch 0xffffffff only by accident of a
	 * cast: epochs are 32-bit, and these two are different epochs. */
	CHECK(sk__sample_seed(0, -1, "a") != sk__sample_seed(0, 1, "a"));
	free(v);
}

/* ------------------------------------------------------------------------ */
/* crop boxes                                                               */

/* Is b a box the random branch of get_params could return for a w x h
 * image? The target area and aspect are drawn, then w and h rounded: so
 * sqrt(area * aspect) is within 0.5 of bw, sqrt(area / aspect) within 0.5
 * of bh, which bounds area = the product and aspect = the quotient. */
static int
rrc_random_ok(const struct sk__box *b, int w, int h, const double scale[2],
    const double ratio[2])
{
	double area = (double)w * h, bw = b->w, bh = b->h;

	if (bw < 1 || bh < 1 || bw > w || bh > h)
		return (0);
	if ((bw - 0.5) * (bh - 0.5) > scale[1] * area * (1 + 1e-12) ||
	    (bw + 0.5) * (bh + 0.5) < scale[0] * area * (1 - 1e-12))
		return (0);
	if ((bw - 0.5) / (bh + 0.5) > ratio[1] * (1 + 1e-12) ||
	    (bw + 0.5) / (bh - 0.5) < ratio[0] * (1 - 1e-12))
		return (0);
	return (1);
}

/* torchvision's fallback box for a w x h image. */
static void
rrc_fallback(int w, int h, const double ratio[2], struct sk__box *b)
{
	double in = (double)w / h;
	int cw = w, ch = h;

	if (in < ratio[0])
		ch = (int)rne(w / ratio[0]);
	else if (in > ratio[1])
		cw = (int)rne(h * ratio[1]);
	b->w = cw;
	b->h = ch;
	b->x = (w - cw) / 2;
	b->y = (h - ch) / 2;
}

TEST(augment_rrc_box)
{
	static const double scale[2] = { 0.08, 1.0 };
	static const double ratio[2] = { 3.0 / 4.0, 4.0 / 3.0 };
	struct sk__box b, fb;
	uint64_t pick = 99, rng;
	int i, w, h, fallbacks = 0, random = 0, left0 = 0, leftmax = 0;
	double area = 0;

	for (i = 0; i < 20000; i++) {
		/* Sizes from 1 to 4096 on each side, a tenth of them very
		 * wide or very tall. */
		w = 1 + (int)(sk__rng_uniform(&pick) * 4096);
		h = 1 + (int)(sk__rng_uniform(&pick) * 4096);
		if (i % 10 == 0)
			h = 1 + h / 64;
		else if (i % 10 == 1)
			w = 1 + w / 64;
		rng = sk__sample_seed(5, 0, "") + (uint64_t)i;
		sk__rrc_box(&rng, w, h, scale, ratio, &b);
		if (b.x != dfloor(b.x) || b.y != dfloor(b.y) ||
		    b.w != dfloor(b.w) || b.h != dfloor(b.h) || b.w < 1 ||
		    b.h < 1 || b.x < 0 || b.y < 0 || b.x + b.w > w ||
		    b.y + b.h > h)
			t_fail(__FILE__, __LINE__, "%d x %d: box (%g, %g, %g, "
			    "%g) is not an integer box inside the image", w, h,
			    b.x, b.y, b.w, b.h);
		if (rrc_random_ok(&b, w, h, scale, ratio)) {
			random++;
			area += b.w * b.h / ((double)w * h);
			left0 += b.x == 0;
			leftmax += b.x == w - b.w;
			continue;
		}
		/* Not a box the random branch makes: then it is exactly
		 * the centred fallback. */
		rrc_fallback(w, h, ratio, &fb);
		if (b.x != fb.x || b.y != fb.y || b.w != fb.w || b.h != fb.h)
			t_fail(__FILE__, __LINE__, "%d x %d: box (%g, %g, %g, "
			    "%g) is neither random nor the fallback (%g, %g, "
			    "%g, %g)", w, h, b.x, b.y, b.w, b.h, fb.x, fb.y,
			    fb.w, fb.h);
		fallbacks++;
	}
	t_diag("%d random boxes (mean area %.3f), %d fallbacks", random,
	    area / random, fallbacks);
	/* The very wide and very tall images (a fifth) and a few more of
	 * extreme aspect fall back: about 4400 of 20000 here. */
	CHECK(fallbacks > 3000 && fallbacks < 6000);
	CHECK(area / random > 0.3 && area / random < 0.6);
	/* Placement reaches both edges. */
	CHECK(left0 > 0 && leftmax > 0);
}

TEST(augment_rrc_fallback)
{
	static const double scale[2] = { 0.08, 1.0 };
	static const double ratio[2] = { 3.0 / 4.0, 4.0 / 3.0 };
	static const double big[2] = { 1.5, 2.0 };
	struct sk__box b;
	uint64_t rng;
	int i;

	for (i = 0; i < 100; i++) {
		/* 2000 x 50: every target area is over 8000 pixels, so h
		 * exceeds 50 on each try; the fallback keeps the full
		 * height at the widest aspect, centred. */
		rng = (uint64_t)i;
		sk__rrc_box(&rng, 2000, 50, scale, ratio, &b);
		CHECK(b.w == 67 && b.h == 50 && b.x == 966 && b.y == 0);
		rng = (uint64_t)i;
		sk__rrc_box(&rng, 50, 2000, scale, ratio, &b);
		CHECK(b.w == 50 && b.h == 67 && b.x == 0 && b.y == 966);
		/* Areas over the image's can never fit: the whole image,
		 * its aspect being within ratio. */
		rng = (uint64_t)i;
		sk__rrc_box(&rng, 640, 480, big, ratio, &b);
		CHECK(b.w == 640 && b.h == 480 && b.x == 0 && b.y == 0);
	}
	/* Ratio bounds that round to zero pixels still give a pixel. */
	{
		static const double odd[2] = { 10.0, 20.0 };

		rng = 1;
		sk__rrc_box(&rng, 3, 1, big, odd, &b);
		CHECK(b.w >= 1 && b.h >= 1 && b.x + b.w <= 3 &&
		    b.y + b.h <= 1);
	}
}

TEST(augment_center_box)
{
	static const int sizes[][4] = {
		/* w, h, resize, size */
		{ 500, 375, 256, 224 }, { 375, 500, 256, 224 },
		{ 333, 500, 256, 224 }, { 256, 256, 256, 224 },
		{ 1000, 201, 183, 160 }, { 32, 32, 256, 224 },
		{ 499, 375, 255, 224 },
	};
	struct sk__box b;
	int i, w, h, rs, size, rw, rh, ew, eh, top, left;

	for (i = 0; i < (int)(sizeof sizes / sizeof sizes[0]); i++) {
		w = sizes[i][0];
		h = sizes[i][1];
		rs = sizes[i][2];
		size = sizes[i][3];
		sk__center_box(w, h, rs, size, &b, &rw, &rh);
		/* torchvision: short side to resize, long side
		 * int(resize * long / short), in Python floats. */
		if (w <= h) {
			ew = rs;
			eh = (int)((double)rs * h / w);
		} else {
			eh = rs;
			ew = (int)((double)rs * w / h);
		}
		CHECK_EQ_INT(rw, ew);
		CHECK_EQ_INT(rh, eh);
		/* CenterCrop: int(round((rh - size) / 2.0)), half to even. */
		top = (int)rne((rh - size) / 2.0);
		left = (int)rne((rw - size) / 2.0);
		CHECK(dabs(b.x - left * (double)w / rw) < 1e-9);
		CHECK(dabs(b.y - top * (double)h / rh) < 1e-9);
		CHECK(dabs(b.w - size * (double)w / rw) < 1e-9);
		CHECK(dabs(b.h - size * (double)h / rh) < 1e-9);
		CHECK(b.x >= 0 && b.y >= 0 && b.x + b.w <= w + 1e-9 &&
		    b.y + b.h <= h + 1e-9);
	}
	/* An odd margin rounds half to even: 255 - 224 = 31, 15.5 -> 16. */
	sk__center_box(499, 375, 255, 224, &b, &rw, &rh);
	CHECK_EQ_INT(rw, 339);
	CHECK(dabs(b.y - 16 * 375.0 / 255) < 1e-9);
}

/* ------------------------------------------------------------------------ */
/* region decoding                                                          */

/* Decode box from jpg at the DCT scale min forces and check every pixel
 * of the region against ref (the image decoded whole at that scale,
 * rw x rh). */
static void
check_region(const uint8_t *jpg, size_t len, const uint8_t *ref, int rw,
    int rh, double x, double y, double w, double h, int min, int want_d)
{
	struct sk__jpeg_region r;
	struct sk_error err = { 0 };
	uint8_t *buf = NULL;
	size_t cap = 0;
	int ox, oy, i, j, a, b, cut;
	double support;

	memset(&r, 0, sizeof r);
	r.box.x = x;
	r.box.y = y;
	r.box.w = w;
	r.box.h = h;
	r.min_w = r.min_h = min;
	CHECK_OK(sk__jpeg_decode_region(jpg, len, 0, &r, &buf, &cap, &err),
	    &err);
	CHECK_EQ_INT(r.scale_denom, want_d);
	CHECK(cap >= (size_t)r.out_w * r.out_h * 3);
	/* rbox is the scaled box less the region's origin. */
	ox = (int)rne(x / want_d - r.rbox.x);
	oy = (int)rne(y / want_d - r.rbox.y);
	CHECK(dabs(x / want_d - r.rbox.x - ox) < 1e-9);
	CHECK(dabs(r.rbox.w - w / want_d) < 1e-9);
	CHECK(dabs(r.rbox.h - h / want_d) < 1e-9);
	/* The region holds the box. */
	CHECK(ox >= 0 && oy >= 0 && ox + r.out_w <= rw && oy + r.out_h <= rh);
	CHECK(r.rbox.x >= 0 && r.rbox.y >= 0);
	CHECK(r.rbox.x + r.rbox.w <= r.out_w + 1e-9);
	CHECK(r.rbox.y + r.rbox.h <= r.out_h + 1e-9);
	/*
	 * Every pixel is the whole decode's, except that in a column next
	 * to a cut (not the image's own edge) fancy upsampling saw the
	 * chroma sample beyond the cut replicated, not the real one (and
	 * colour conversion amplifies the difference). Those columns lie
	 * outside the box by more than the resize filter reaches: the
	 * decoder's margin.
	 */
	support = r.rbox.w / min > 1 ? r.rbox.w / min : 1;
	if (ox > 0)
		CHECK(r.rbox.x - support - 1 >= 1);
	if (ox + r.out_w < rw)
		CHECK(r.rbox.x + r.rbox.w + support + 1 <= r.out_w - 1);
	for (j = 0; j < r.out_h; j++)
		for (i = 0; i < r.out_w * 3; i++) {
			a = buf[(size_t)j * r.out_w * 3 + i];
			b = ref[((size_t)(oy + j) * rw + ox) * 3 + i];
			cut = (i / 3 == 0 && ox > 0) ||
			    (i / 3 == r.out_w - 1 && ox + r.out_w < rw);
			if (a != b && !cut)
				t_fail(__FILE__, __LINE__, "box (%g, %g, %g, "
				    "%g) at 1/%d: region (%d, %d) is %d, the "
				    "whole decode %d (origin %d, %d, %d x %d)",
				    x, y, w, h, want_d, i / 3, j, a, b, ox, oy,
				    r.out_w, r.out_h);
		}
	free(buf);
}

/* The whole image decoded at 1/d, through the region decoder itself
 * with a box of everything. */
static uint8_t *
whole_at(const uint8_t *jpg, size_t len, int w, int h, int d, int *rw,
    int *rh)
{
	struct sk__jpeg_region r;
	struct sk_error err = { 0 };
	uint8_t *buf = NULL;
	size_t cap = 0;

	memset(&r, 0, sizeof r);
	r.box.w = w;
	r.box.h = h;
	r.min_w = w / d;
	r.min_h = h / d;
	CHECK_OK(sk__jpeg_decode_region(jpg, len, 0, &r, &buf, &cap, &err),
	    &err);
	CHECK_EQ_INT(r.scale_denom, d);
	CHECK_EQ_INT(r.out_w, (w + d - 1) / d);
	CHECK_EQ_INT(r.out_h, (h + d - 1) / d);
	CHECK(r.rbox.x == 0 && r.rbox.y == 0);
	*rw = r.out_w;
	*rh = r.out_h;
	return (buf);
}

static void
region_case(int w, int h, int comps)
{
	uint8_t *pix = photo(w, h, comps, 3), *jpg, *full, *sc;
	uint64_t rng = 11;
	size_t len;
	int fw, fh, i, d, rw, rh, min;
	double x, y, bw, bh;

	jpg = enc_jpeg(pix, w, h, comps, 90, &len);
	full = dec(jpg, len, &fw, &fh);
	/* At full scale the region decoder's own whole image is the plain
	 * decoder's, pixel for pixel. */
	sc = whole_at(jpg, len, w, h, 1, &rw, &rh);
	CHECK_MEM_EQ(sc, full, (size_t)w * h * 3);
	free(sc);
	for (d = 1; d <= 8; d *= 2) {
		sc = d == 1 ? full : whole_at(jpg, len, w, h, d, &rw, &rh);
		if (d == 1) {
			rw = w;
			rh = h;
		}
		/* Corners, edges and random boxes, sized so that min = the
		 * scaled box's short side picks scale d exactly. */
		for (i = 0; i < 40; i++) {
			bw = 8 * d + sk__rng_uniform(&rng) * (w - 8 * d);
			bh = 8 * d + sk__rng_uniform(&rng) * (h - 8 * d);
			bw = dfloor(bw);
			bh = dfloor(bh);
			x = dfloor(sk__rng_uniform(&rng) * (w - bw + 1));
			y = dfloor(sk__rng_uniform(&rng) * (h - bh + 1));
			if (i == 0)
				x = y = 0;
			else if (i == 1) {
				x = w - bw;
				y = h - bh;
			} else if (i == 2) {
				x = w - bw;
				y = 0;
			}
			min = (int)((bw < bh ? bw : bh) / d);
			if (denom_for(bw, bh, min) != d)
				continue;
			check_region(jpg, len, sc, rw, rh, x, y, bw, bh, min,
			    d);
		}
		if (d != 1)
			free(sc);
	}
	free(full);
	free(jpg);
	free(pix);
}

TEST(augment_region_rgb)
{
	/* 4:2:0 (libjpeg's default), sizes off the 16-pixel iMCU grid. */
	region_case(1001, 757, 3);
	region_case(640, 480, 3);
}

TEST(augment_region_gray_cmyk)
{
	region_case(517, 389, 1);
	region_case(300, 211, 4);
}

/* ------------------------------------------------------------------------ */
/* crops against the reference                                              */

TEST(augment_center_exact)
{
	/* size, resize, image w, h: each box is about 328 source pixels,
	 * under twice the size, so no DCT scaling; then the output is the
	 * reference resize-then-crop. 299 is Inception's. */
	static const int cases[][4] = {
		{ 224, 256, 500, 375 }, { 192, 219, 500, 375 },
		{ 299, 341, 375, 500 }, { 224, 256, 333, 500 },
	};
	struct sk__aug_scratch s;
	struct sk__aug_config c;
	struct sk_sample_aug a;
	struct diff d;
	uint8_t *pix, *jpg, *full, *out, *ref;
	size_t len;
	int i, w, h, sz;

	memset(&s, 0, sizeof s);
	for (i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
		sz = cases[i][0];
		pix = photo(cases[i][2], cases[i][3], 3, 1);
		jpg = enc_jpeg(pix, cases[i][2], cases[i][3], 3, 90, &len);
		full = dec(jpg, len, &w, &h);
		config(&c, SK_CROP_CENTER, sz);
		c.resize = cases[i][1];
		out = augment(&c, &s, 1, jpg, len, &a);
		CHECK_EQ_INT(denom_for(a.w, a.h, sz), 1);
		ref = ref_center(full, w, h, c.resize, sz);
		d = compare(out, ref, (size_t)sz * sz * 3);
		t_diag("center %d of %d x %d: max %d, mean %.4f, %zu values "
		    "differ", sz, w, h, d.max, d.mean, d.ndiff);
		CHECK(d.max <= 1);
		CHECK_EQ_INT(a.src_w, w);
		CHECK_EQ_INT(a.src_h, h);
		CHECK_EQ_INT(a.flip, 0);
		free(out);
		free(ref);
		free(full);
		free(jpg);
		free(pix);
	}
	sk__aug_scratch_free(&s);
}

TEST(augment_none_exact)
{
	uint8_t *pix = photo(375, 500, 3, 2), *jpg, *full, *out, *ref;
	double box[4] = { 0, 0, 375, 500 };
	struct sk__aug_scratch s;
	struct sk__aug_config c;
	struct sk_sample_aug a;
	struct diff d;
	size_t len;
	int w, h;

	memset(&s, 0, sizeof s);
	jpg = enc_jpeg(pix, 375, 500, 3, 90, &len);
	full = dec(jpg, len, &w, &h);
	config(&c, SK_CROP_NONE, 224);
	out = augment(&c, &s, 1, jpg, len, &a);
	ref = ref_resize(full, w, h, box, 224, 224);
	d = compare(out, ref, 224 * 224 * 3);
	t_diag("none: max %d, mean %.4f", d.max, d.mean);
	CHECK(d.max <= 1);
	CHECK(a.x == 0 && a.y == 0 && a.w == 375 && a.h == 500);
	free(out);
	free(ref);
	sk__aug_scratch_free(&s);
	free(full);
	free(jpg);
	free(pix);
}

TEST(augment_center_dct_scaled)
{
	uint8_t *pix = photo(2000, 1500, 3, 4), *jpg, *full, *out, *ref;
	struct sk__aug_scratch s;
	struct sk__aug_config c;
	struct sk_sample_aug a;
	struct diff d;
	size_t len;
	int w, h;

	memset(&s, 0, sizeof s);
	jpg = enc_jpeg(pix, 2000, 1500, 3, 90, &len);
	full = dec(jpg, len, &w, &h);
	config(&c, SK_CROP_CENTER, 224);
	c.resize = 256;
	out = augment(&c, &s, 1, jpg, len, &a);
	/* The box is 1312 pixels: decoded at 1/4 (328 >= 224). */
	CHECK_EQ_INT(denom_for(a.w, a.h, 224), 4);
	ref = ref_center(full, w, h, 256, 224);
	d = compare(out, ref, 224 * 224 * 3);
	/* The IDCT at 1/4 keeps the lowest 2x2 frequencies of each block:
	 * a sharper low-pass than the triangle filter over a full decode.
	 * Measured: mean 0.46, max 17. The crop one scaled pixel off
	 * measured mean 9.3. */
	t_diag("center at 1/4: max %d, mean %.4f", d.max, d.mean);
	CHECK(d.mean < 1.5);
	free(out);
	free(ref);
	sk__aug_scratch_free(&s);
	free(full);
	free(jpg);
	free(pix);
}

TEST(augment_rrc_exact)
{
	uint8_t *pix = photo(500, 375, 3, 5), *jpg, *full, *out, *ref;
	struct sk__aug_scratch s;
	struct sk__aug_config c;
	struct sk_sample_aug a;
	struct sk__box b;
	struct diff d;
	uint64_t seed, rng;
	size_t len;
	int w, h, i, flips = 0, worst = 0;

	memset(&s, 0, sizeof s);
	jpg = enc_jpeg(pix, 500, 375, 3, 90, &len);
	full = dec(jpg, len, &w, &h);
	config(&c, SK_CROP_RANDOM_RESIZED, 224);
	c.flip = 1;
	for (i = 0; i < 60; i++) {
		seed = sk__sample_seed(9, i, "x");
		out = augment(&c, &s, seed, jpg, len, &a);
		/* The box is the first draw from the seed. */
		rng = seed;
		sk__rrc_box(&rng, 500, 375, c.scale, c.ratio, &b);
		CHECK(a.x == b.x && a.y == b.y && a.w == b.w && a.h == b.h);
		/* A 375-pixel-high image never reaches 1/2 at 224. */
		CHECK_EQ_INT(denom_for(a.w, a.h, 224), 1);
		ref = ref_rrc(full, w, &a, 224);
		d = compare(out, ref, 224 * 224 * 3);
		if (d.max > 1)
			t_fail(__FILE__, __LINE__, "seed %d: box (%g, %g, %g, "
			    "%g) flip %d: max %d, mean %.4f", i, a.x, a.y, a.w,
			    a.h, a.flip, d.max, d.mean);
		worst = d.max > worst ? d.max : worst;
		flips += a.flip;
		free(out);
		free(ref);
	}
	t_diag("60 crops: worst max %d, %d flipped", worst, flips);
	CHECK(flips > 15 && flips < 45);
	sk__aug_scratch_free(&s);
	free(full);
	free(jpg);
	free(pix);
}

TEST(augment_rrc_scaled)
{
	uint8_t *pix = photo(1280, 960, 3, 6), *jpg, *full, *out, *ref;
	struct sk__aug_scratch s;
	struct sk__aug_config c;
	struct sk_sample_aug a;
	struct diff d;
	size_t len;
	int w, h, i, dn, count[9] = { 0 };
	double worst[9] = { 0 };

	memset(&s, 0, sizeof s);
	jpg = enc_jpeg(pix, 1280, 960, 3, 90, &len);
	full = dec(jpg, len, &w, &h);
	config(&c, SK_CROP_RANDOM_RESIZED, 224);
	c.flip = 1;
	/* Boxes of 8% to all of 1280 x 960 land at 1/1, 1/2 and 1/4. */
	for (i = 0; i < 60; i++) {
		out = augment(&c, &s, sk__sample_seed(3, 0, "big") + i, jpg,
		    len, &a);
		dn = denom_for(a.w, a.h, 224);
		ref = ref_rrc(full, w, &a, 224);
		d = compare(out, ref, 224 * 224 * 3);
		/* Full scale: the crop came from a region (columns widened
		 * to the iMCU grid, rows skipped), and still matches. */
		if (dn == 1 && d.max > 1)
			t_fail(__FILE__, __LINE__, "box (%g, %g, %g, %g) at "
			    "1/1: max %d", a.x, a.y, a.w, a.h, d.max);
		/* Scaled: the box edges fall inside scaled pixels, and the
		 * IDCT low-pass differs from the triangle filter. Measured:
		 * worst mean 0.62 at 1/2, 0.75 at 1/4; with the region one
		 * scaled pixel off, 5.2. */
		if (d.mean > 2.0)
			t_fail(__FILE__, __LINE__, "box (%g, %g, %g, %g) at "
			    "1/%d: mean %.3f", a.x, a.y, a.w, a.h, dn, d.mean);
		count[dn]++;
		worst[dn] = d.mean > worst[dn] ? d.mean : worst[dn];
		free(out);
		free(ref);
	}
	t_diag("crops at 1/1: %d (worst mean %.3f), 1/2: %d (%.3f), 1/4: %d "
	    "(%.3f), 1/8: %d", count[1], worst[1], count[2], worst[2],
	    count[4], worst[4], count[8]);
	CHECK(count[1] > 0 && count[2] > 0 && count[4] > 0);
	sk__aug_scratch_free(&s);
	free(full);
	free(jpg);
	free(pix);
}

/* ------------------------------------------------------------------------ */
/* flips, dtypes, layouts                                                   */

TEST(augment_flip)
{
	uint8_t *pix = photo(400, 300, 3, 7), *jpg, *on, *off;
	struct sk__aug_scratch s;
	struct sk__aug_config c;
	struct sk_sample_aug a, b;
	size_t len;
	int i, flipped = 0;

	memset(&s, 0, sizeof s);
	jpg = enc_jpeg(pix, 400, 300, 3, 90, &len);
	for (i = 0; i < 40; i++) {
		config(&c, i % 2 ? SK_CROP_RANDOM_RESIZED : SK_CROP_CENTER,
		    96 + i);
		c.flip = 1;
		on = augment(&c, &s, (uint64_t)i * 77, jpg, len, &a);
		c.flip = 0;
		off = augment(&c, &s, (uint64_t)i * 77, jpg, len, &b);
		/* The same box either way: it is drawn before the flip. */
		CHECK(a.x == b.x && a.y == b.y && a.w == b.w && a.h == b.h);
		CHECK_EQ_INT(b.flip, 0);
		if (a.flip) {
			mirror(off, c.size, c.size);
			flipped++;
		}
		CHECK_MEM_EQ(on, off, (size_t)c.size * c.size * 3);
		free(on);
		free(off);
	}
	CHECK(flipped > 5 && flipped < 35);
	sk__aug_scratch_free(&s);
	free(jpg);
	free(pix);
}

/* Round to nearest even: an independent float -> bf16. */
static uint16_t
bf16(float f)
{
	uint32_t u, lsb;

	memcpy(&u, &f, 4);
	lsb = (u >> 16) & 1;
	return ((uint16_t)((u + 0x7fffu + lsb) >> 16));
}

/* An independent float -> IEEE half, through double arithmetic. */
static uint16_t
f16(float f)
{
#ifdef __FLT16_MAX__
	_Float16 h = (_Float16)f;
	uint16_t u;

	memcpy(&u, &h, 2);
	return (u);
#else
	double a = dabs(f), m;
	uint16_t sign = f < 0 ? 0x8000 : 0;
	int e = 0;

	if (a >= 65520.0)
		return (sign | 0x7c00);
	if (a < 1.0 / 16384)	/* subnormal: units of 2^-24 */
		return (sign | (uint16_t)rne(a * 16777216.0));
	while (a >= 2.0) {
		a /= 2;
		e++;
	}
	while (a < 1.0) {
		a *= 2;
		e--;
	}
	m = rne(a * 1024.0);	/* 11 significant bits */
	if (m == 2048) {
		m = 1024;
		e++;
	}
	return (sign | (uint16_t)((e + 15) << 10) | (uint16_t)(m - 1024));
#endif
}

TEST(augment_dtypes_layouts)
{
	static const enum sk_dtype types[3] = { SK_DTYPE_F32, SK_DTYPE_BF16,
	    SK_DTYPE_F16 };
	uint8_t *pix = photo(320, 240, 3, 8), *jpg, *u8, *chw;
	struct sk__aug_scratch s;
	struct sk__aug_config c;
	const int S = 64;
	size_t len, i;
	int t, l, x, y, ch, v;
	void *o;

	memset(&s, 0, sizeof s);
	jpg = enc_jpeg(pix, 320, 240, 3, 90, &len);
	config(&c, SK_CROP_RANDOM_RESIZED, S);
	c.flip = 1;
	u8 = augment(&c, &s, 5, jpg, len, NULL);
	c.layout = SK_LAYOUT_NCHW;
	chw = augment(&c, &s, 5, jpg, len, NULL);
	for (y = 0; y < S; y++)
		for (x = 0; x < S; x++)
			for (ch = 0; ch < 3; ch++)
				CHECK(chw[(ch * S + y) * S + x] ==
				    u8[(y * S + x) * 3 + ch]);
	free(chw);

	for (t = 0; t < 3; t++)
		for (l = 0; l < 2; l++) {
			c.dtype = types[t];
			c.layout = l ? SK_LAYOUT_NCHW : SK_LAYOUT_NHWC;
			o = augment(&c, &s, 5, jpg, len, NULL);
			for (i = 0; i < (size_t)S * S * 3; i++) {
				float f;
				uint32_t fb, ob;
				uint16_t hb;

				/* Position i of the output is channel ch
				 * of pixel (x, y). */
				if (l) {
					ch = (int)(i / (S * S));
					y = (int)(i / S % S);
					x = (int)(i % S);
				} else {
					ch = (int)(i % 3);
					x = (int)(i / 3 % S);
					y = (int)(i / 3 / S);
				}
				v = u8[(y * S + x) * 3 + ch];
				/* ToTensor then Normalize, in float32. */
				f = ((float)v / 255.0f - c.mean[ch]) /
				    c.std[ch];
				if (types[t] == SK_DTYPE_F32) {
					memcpy(&fb, &f, 4);
					memcpy(&ob, (uint32_t *)o + i, 4);
					if (fb != ob)
						t_fail(__FILE__, __LINE__,
						    "f32 %zu: %08x want %08x",
						    i, ob, fb);
					continue;
				}
				hb = types[t] == SK_DTYPE_BF16 ? bf16(f) :
				    f16(f);
				if (((uint16_t *)o)[i] != hb)
					t_fail(__FILE__, __LINE__, "%s %zu (v "
					    "%d): %04x want %04x",
					    t == 1 ? "bf16" : "f16", i, v,
					    ((uint16_t *)o)[i], hb);
			}
			free(o);
		}
	/* A spot check of the formula: 255 with mean 0.485, std 0.229. */
	CHECK(dabs((1.0f - 0.485f) / 0.229f - 2.2489083f) < 1e-5);
	free(u8);
	sk__aug_scratch_free(&s);
	free(jpg);
	free(pix);
}

TEST(augment_f16_edges)
{
	/* Values a 3 x 256 table can meet with odd means and stds: tiny,
	 * huge, halfway cases. The output is the table entry for v. */
	static const float stds[4] = { 1e-7f, 1e-3f, 7.0f, 3e4f };
	uint8_t pix[16 * 16 * 3];
	struct sk__aug_scratch s;
	struct sk__aug_config c;
	uint8_t *jpg, *u8;
	uint16_t *o;
	size_t len;
	int k, i, ch;
	float f;

	memset(&s, 0, sizeof s);
	for (i = 0; i < (int)sizeof pix; i++)
		pix[i] = (uint8_t)(i * 13);
	jpg = enc_jpeg(pix, 16, 16, 3, 95, &len);
	config(&c, SK_CROP_NONE, 16);
	u8 = augment(&c, &s, 0, jpg, len, NULL);
	c.dtype = SK_DTYPE_F16;
	for (k = 0; k < 4; k++) {
		for (ch = 0; ch < 3; ch++) {
			c.std[ch] = stds[k];
			c.mean[ch] = 0.25f * ch;
		}
		o = augment(&c, &s, 0, jpg, len, NULL);
		for (i = 0; i < 16 * 16 * 3; i++) {
			ch = i % 3;
			f = ((float)u8[i] / 255.0f - c.mean[ch]) / c.std[ch];
			if (o[i] != f16(f))
				t_fail(__FILE__, __LINE__, "std %g: %g -> %04x "
				    "want %04x", stds[k], f, o[i], f16(f));
		}
		free(o);
	}
	free(u8);
	sk__aug_scratch_free(&s);
	free(jpg);
}

/* ------------------------------------------------------------------------ */
/* other images                                                             */

TEST(augment_gray_jpeg)
{
	uint8_t *pix = photo(300, 200, 1, 9), *jpg, *out, *full, *ref;
	double box[4] = { 0, 0, 300, 200 };
	struct sk__aug_scratch s;
	struct sk__aug_config c;
	size_t len;
	int i, w, h;

	memset(&s, 0, sizeof s);
	jpg = enc_jpeg(pix, 300, 200, 1, 90, &len);
	config(&c, SK_CROP_NONE, 128);
	out = augment(&c, &s, 1, jpg, len, NULL);
	for (i = 0; i < 128 * 128; i++)
		CHECK(out[i * 3] == out[i * 3 + 1] &&
		    out[i * 3] == out[i * 3 + 2]);
	full = dec(jpg, len, &w, &h);
	ref = ref_resize(full, w, h, box, 128, 128);
	CHECK(compare(out, ref, 128 * 128 * 3).max <= 1);
	free(ref);
	free(full);
	free(out);
	sk__aug_scratch_free(&s);
	free(jpg);
	free(pix);
}

TEST(augment_cmyk_jpeg)
{
	/* Adobe-inverted CMYK: stored = 255 - ink. Magenta + yellow ink
	 * and no black is red. */
	static const uint8_t red[4] = { 255, 0, 0, 255 };
	uint8_t *pix = malloc(256 * 192 * 4), *jpg, *out, *full, *ref;
	struct sk__aug_scratch s;
	struct sk__aug_config c;
	struct sk_sample_aug a;
	size_t len;
	int i, w, h;

	CHECK(pix != NULL);
	memset(&s, 0, sizeof s);
	for (i = 0; i < 256 * 192; i++)
		memcpy(pix + 4 * i, red, 4);
	jpg = enc_jpeg(pix, 256, 192, 4, 95, &len);
	config(&c, SK_CROP_RANDOM_RESIZED, 64);
	out = augment(&c, &s, 3, jpg, len, NULL);
	for (i = 0; i < 64 * 64; i++)
		if (out[i * 3] < 215 || out[i * 3 + 1] > 40 ||
		    out[i * 3 + 2] > 40)
			t_fail(__FILE__, __LINE__, "pixel %d is (%d, %d, %d), "
			    "not red", i, out[3 * i], out[3 * i + 1],
			    out[3 * i + 2]);
	free(out);
	free(pix);
	free(jpg);

	/* A textured CMYK image against the full decode, at a size that
	 * keeps the DCT scale at 1. */
	pix = photo(256, 192, 4, 10);
	jpg = enc_jpeg(pix, 256, 192, 4, 90, &len);
	full = dec(jpg, len, &w, &h);
	config(&c, SK_CROP_RANDOM_RESIZED, 112);
	out = augment(&c, &s, 4, jpg, len, &a);
	CHECK_EQ_INT(denom_for(a.w, a.h, 112), 1);
	ref = ref_rrc(full, w, &a, 112);
	CHECK(compare(out, ref, 112 * 112 * 3).max <= 1);
	free(ref);
	free(full);
	free(out);
	sk__aug_scratch_free(&s);
	free(jpg);
	free(pix);
}

TEST(augment_png)
{
	uint8_t *rgb = photo(200, 150, 3, 11), *gray = photo(200, 150, 1, 12);
	uint8_t *png, *out, *full, *ref;
	struct sk__aug_scratch s;
	struct sk__aug_config c;
	struct sk_sample_aug a;
	size_t len;
	int w, h, k;

	memset(&s, 0, sizeof s);
	for (k = 0; k < 2; k++) {
		png = enc_png(k ? gray : rgb, 200, 150, k ? 1 : 3, &len);
		full = dec(png, len, &w, &h);
		config(&c, SK_CROP_RANDOM_RESIZED, 96);
		c.flip = 1;
		out = augment(&c, &s, 21, png, len, &a);
		ref = ref_rrc(full, w, &a, 96);
		/* PNG is decoded whole: the same pixels as the reference. */
		CHECK(compare(out, ref, 96 * 96 * 3).max <= 1);
		CHECK_EQ_INT(a.src_w, 200);
		CHECK_EQ_INT(a.src_h, 150);
		free(out);
		free(ref);
		config(&c, SK_CROP_CENTER, 96);
		out = augment(&c, &s, 21, png, len, &a);
		ref = ref_center(full, w, h, c.resize, 96);
		CHECK(compare(out, ref, 96 * 96 * 3).max <= 1);
		free(out);
		free(ref);
		free(full);
		free(png);
	}
	/* The PNG's full decode counts while it lives. */
	CHECK(s.high_water >= 200 * 150 * 3);
	sk__aug_scratch_free(&s);
	free(rgb);
	free(gray);
}

TEST(augment_upscale)
{
	uint8_t *pix = photo(32, 32, 3, 13), *png, *out, *ref;
	double box[4] = { 0, 0, 32, 32 };
	struct sk__aug_scratch s;
	struct sk__aug_config c;
	struct sk_sample_aug a;
	size_t len;
	int i;

	memset(&s, 0, sizeof s);
	/* CIFAR-10 to ViT: 32 x 32 to 224 x 224. */
	png = enc_png(pix, 32, 32, 3, &len);
	config(&c, SK_CROP_NONE, 224);
	out = augment(&c, &s, 1, png, len, &a);
	ref = ref_resize(pix, 32, 32, box, 224, 224);
	CHECK_MEM_EQ(out, ref, 224 * 224 * 3);
	free(out);
	free(ref);
	/* Random-resized crops of it upscale too, every one. */
	config(&c, SK_CROP_RANDOM_RESIZED, 224);
	c.flip = 1;
	for (i = 0; i < 20; i++) {
		out = augment(&c, &s, (uint64_t)i, png, len, &a);
		ref = ref_rrc(pix, 32, &a, 224);
		CHECK(compare(out, ref, 224 * 224 * 3).max <= 1);
		free(out);
		free(ref);
	}
	/* And a JPEG the same way (the region is the whole image). */
	free(png);
	png = enc_jpeg(pix, 32, 32, 3, 95, &len);
	config(&c, SK_CROP_CENTER, 224);
	c.resize = 256;
	out = augment(&c, &s, 1, png, len, &a);
	CHECK(a.w == 28 && a.h == 28 && a.x == 2 && a.y == 2);
	free(out);
	sk__aug_scratch_free(&s);
	free(png);
	free(pix);
}

/* ------------------------------------------------------------------------ */
/* bad input                                                                */

/* The offset of the first entropy-coded byte: after the SOS segment. */
static size_t
find_scan(const uint8_t *p, size_t len)
{
	size_t i = 2;

	while (i + 4 <= len && p[i] == 0xff) {
		uint8_t m = p[i + 1];
		size_t seg = 2 + ((size_t)p[i + 2] << 8 | p[i + 3]);

		if (m == 0xda)
			return (i + seg);
		i += seg;
	}
	return (0);
}

TEST(augment_corrupt_jpeg)
{
	uint8_t *pix = photo(320, 240, 3, 14), *jpg;
	uint8_t out[64 * 64 * 3];
	struct sk__aug_scratch s;
	struct sk__aug_config c;
	struct sk_sample_aug a;
	struct sk_error err = { 0 };
	size_t len, scan, i;
	const char *msg;
	int k, failed = 0;

	memset(&s, 0, sizeof s);
	jpg = enc_jpeg(pix, 320, 240, 3, 90, &len);
	CHECK((scan = find_scan(jpg, len)) != 0);
	/* A restart marker where none belongs, early in the entropy data:
	 * libjpeg warns of corrupt data and the strict decoder fails. The
	 * damage is in the rows every crop of the whole image reads. */
	i = scan + (len - scan) / 8;
	jpg[i] = 0xff;
	jpg[i + 1] = 0xd3;
	config(&c, SK_CROP_NONE, 64);
	msg = CHECK_ERR(sk__augment(&c, &s, 1, jpg, len, out, &a, &err),
	    SK_EDECODE, &err);
	t_diag("message: %s", msg);
	CHECK_CONTAINS(msg, "JPEG");
	/*
	 * Bit flips over a stretch of entropy data, at 16 places. Garbage
	 * can decode without a bad Huffman code and show only as a scan
	 * that ends early or late; whatever the strict full decoder says
	 * of each, the augment step (whole image, so every row and the
	 * end marker are read) must say the same.
	 */
	for (k = 0; k < 16; k++) {
		uint8_t *rgb = NULL;
		int w, h, full_rc, aug_rc;

		free(jpg);
		jpg = enc_jpeg(pix, 320, 240, 3, 90, &len);
		for (i = 0; i < 64; i++)
			jpg[scan + (len - scan - 100) * k / 16 + i] ^= 0x5a;
		full_rc = sk_image_decode_rgb(jpg, len, 0, &rgb, &w, &h, &err);
		free(rgb);
		aug_rc = sk__augment(&c, &s, 1, jpg, len, out, &a, &err);
		if (aug_rc != full_rc)
			t_fail(__FILE__, __LINE__, "flips at %d/16: full "
			    "decode %d, augment %d (%s)", k, full_rc, aug_rc,
			    err.msg);
		failed += aug_rc == SK_EDECODE;
	}
	t_diag("%d of 16 damaged JPEGs fail to decode", failed);
	CHECK(failed >= 4);
	/* Cut in the middle. */
	free(jpg);
	jpg = enc_jpeg(pix, 320, 240, 3, 90, &len);
	CHECK_ERR(sk__augment(&c, &s, 1, jpg, len / 2, out, &a, &err),
	    SK_EDECODE, &err);
	sk__aug_scratch_free(&s);
	free(jpg);
	free(pix);
}

/* The offset of the SOFn segment's marker in a JPEG, or 0. */
static size_t
find_sof(const uint8_t *p, size_t len)
{
	size_t i = 2;

	while (i + 4 <= len && p[i] == 0xff) {
		uint8_t m = p[i + 1];

		if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 &&
		    m != 0xcc)
			return (i);
		i += 2 + ((size_t)p[i + 2] << 8 | p[i + 3]);
	}
	return (0);
}

TEST(augment_too_big)
{
	uint8_t *pix = photo(64, 64, 3, 15), *jpg, *png;
	uint8_t out[32 * 32 * 3];
	struct sk__aug_scratch s;
	struct sk__aug_config c;
	struct sk_sample_aug a;
	struct sk_error err = { 0 };
	size_t len, plen, sof;
	const char *msg;

	memset(&s, 0, sizeof s);
	jpg = enc_jpeg(pix, 64, 64, 3, 90, &len);
	png = enc_png(pix, 64, 64, 3, &plen);
	config(&c, SK_CROP_RANDOM_RESIZED, 32);
	/* The limit is on the whole image, however small the crop. */
	c.max_pixels = 64 * 64 - 1;
	msg = CHECK_ERR(sk__augment(&c, &s, 1, jpg, len, out, &a, &err),
	    SK_ETOOBIG, &err);
	t_diag("message: %s", msg);
	CHECK_ERR(sk__augment(&c, &s, 1, png, plen, out, &a, &err),
	    SK_ETOOBIG, &err);
	/* Nothing was allocated for it. */
	CHECK(s.pix == NULL && s.tmp == NULL && s.high_water == 0);
	c.max_pixels = 64 * 64;
	CHECK_OK(sk__augment(&c, &s, 1, jpg, len, out, &a, &err), &err);
	CHECK_OK(sk__augment(&c, &s, 1, png, plen, out, &a, &err), &err);

	/* A header that claims 40000 x 40000 (1.6 GP) under the default
	 * limit: refused from the header, before any pixel buffer. */
	sk__aug_scratch_free(&s);
	c.max_pixels = 0;
	CHECK((sof = find_sof(jpg, len)) != 0);
	jpg[sof + 5] = 40000 >> 8;
	jpg[sof + 6] = 40000 & 0xff;
	jpg[sof + 7] = 40000 >> 8;
	jpg[sof + 8] = 40000 & 0xff;
	CHECK_ERR(sk__augment(&c, &s, 1, jpg, len, out, &a, &err),
	    SK_ETOOBIG, &err);
	CHECK(s.pix == NULL && s.pix_cap == 0 && s.high_water == 0);
	sk__aug_scratch_free(&s);
	free(png);
	free(jpg);
	free(pix);
}

TEST(augment_garbage)
{
	uint8_t junk[1000], out[16 * 16 * 3];
	struct sk__aug_scratch s;
	struct sk__aug_config c;
	struct sk_sample_aug a;
	struct sk_error err = { 0 };
	uint64_t rng = 5;
	const char *msg;
	size_t i;

	memset(&s, 0, sizeof s);
	for (i = 0; i < sizeof junk; i++)
		junk[i] = (uint8_t)sk__rng_next(&rng);
	junk[0] = 'G';
	config(&c, SK_CROP_RANDOM_RESIZED, 16);
	msg = CHECK_ERR(sk__augment(&c, &s, 1, junk, sizeof junk, out, &a,
	    &err), SK_EDECODE, &err);
	CHECK_CONTAINS(msg, "not a JPEG or PNG");
	CHECK_ERR(sk__augment(&c, &s, 1, junk, 0, out, &a, &err), SK_EDECODE,
	    &err);
	/* The right magic with junk after it. */
	memcpy(junk, "\xff\xd8\xff", 3);
	CHECK_ERR(sk__augment(&c, &s, 1, junk, sizeof junk, out, &a, &err),
	    SK_EDECODE, &err);
	CHECK_ERR(sk__augment(&c, &s, 1, junk, 2, out, &a, &err), SK_EDECODE,
	    &err);
	memcpy(junk, "\x89PNG\r\n\x1a\n", 8);
	CHECK_ERR(sk__augment(&c, &s, 1, junk, sizeof junk, out, &a, &err),
	    SK_EDECODE, &err);
	/* And region decoding refuses the same. */
	{
		struct sk__jpeg_region r;
		uint8_t *buf = NULL;
		size_t cap = 0;
		int w, h;

		memset(&r, 0, sizeof r);
		r.box.w = r.box.h = 8;
		CHECK_ERR(sk__jpeg_decode_region(junk, sizeof junk, 0, &r,
		    &buf, &cap, &err), SK_EDECODE, &err);
		CHECK_ERR(sk__jpeg_size(junk, sizeof junk, &w, &h, &err),
		    SK_EDECODE, &err);
		CHECK(buf == NULL);
	}
	sk__aug_scratch_free(&s);
}

/* ------------------------------------------------------------------------ */
/* determinism and the scratch                                              */

TEST(augment_scratch_reuse)
{
	uint8_t *big = photo(900, 700, 3, 16), *small = photo(120, 90, 3, 17);
	uint8_t *jb, *js, *o1, *o2, *o3;
	struct sk__aug_scratch s, fresh;
	struct sk__aug_config c;
	struct sk_sample_aug a1, a2;
	size_t lb, ls;
	uint64_t hw;

	memset(&s, 0, sizeof s);
	memset(&fresh, 0, sizeof fresh);
	jb = enc_jpeg(big, 900, 700, 3, 90, &lb);
	js = enc_jpeg(small, 120, 90, 3, 90, &ls);
	config(&c, SK_CROP_RANDOM_RESIZED, 112);
	c.flip = 1;
	c.dtype = SK_DTYPE_F32;
	/* A scratch that held a big image gives the same bytes for a small
	 * one as a fresh scratch, and the same augmentation. */
	o1 = augment(&c, &s, 8, jb, lb, &a1);
	o2 = augment(&c, &s, 8, js, ls, &a1);
	o3 = augment(&c, &fresh, 8, js, ls, &a2);
	CHECK_MEM_EQ(o2, o3, 112 * 112 * 3 * 4);
	CHECK(memcmp(&a1, &a2, sizeof a1) == 0);
	/* The scratch only grows, and high_water covers what it holds. */
	hw = s.high_water;
	CHECK(hw >= s.pix_cap + s.tmp_cap);
	CHECK(s.pix_cap > fresh.pix_cap);
	free(o1);
	o1 = augment(&c, &s, 8, js, ls, &a1);
	CHECK_EQ_INT(s.high_water, hw);
	CHECK_MEM_EQ(o1, o3, 112 * 112 * 3 * 4);
	/* Changing the normalisation rebuilds the table. */
	c.mean[1] = 0.0f;
	free(o2);
	o2 = augment(&c, &s, 8, js, ls, &a1);
	CHECK(memcmp(o2, o3, 112 * 112 * 3 * 4) != 0);
	sk__aug_scratch_free(&s);
	CHECK(s.pix == NULL && s.tmp == NULL && s.lut == NULL &&
	    s.high_water == 0);
	sk__aug_scratch_free(&s);	/* twice is fine */
	sk__aug_scratch_free(&fresh);
	free(o1);
	free(o2);
	free(o3);
	free(jb);
	free(js);
	free(big);
	free(small);
}

TEST(augment_bad_config)
{
	uint8_t pix[8 * 8 * 3] = { 0 }, *jpg, out[8 * 8 * 3 * 4];
	struct sk__aug_scratch s;
	struct sk__aug_config c;
	struct sk_sample_aug a;
	struct sk_error err = { 0 };
	size_t len;

	memset(&s, 0, sizeof s);
	jpg = enc_jpeg(pix, 8, 8, 3, 90, &len);
	config(&c, SK_CROP_CENTER, 0);
	CHECK_ERR(sk__augment(&c, &s, 1, jpg, len, out, &a, &err), SK_EINVAL,
	    &err);
	config(&c, SK_CROP_CENTER, 8);
	c.resize = 0;
	CHECK_ERR(sk__augment(&c, &s, 1, jpg, len, out, &a, &err), SK_EINVAL,
	    &err);
	config(&c, (enum sk_crop)7, 8);
	CHECK_ERR(sk__augment(&c, &s, 1, jpg, len, out, &a, &err), SK_EINVAL,
	    &err);
	config(&c, SK_CROP_NONE, 8);
	c.dtype = (enum sk_dtype)9;
	CHECK_ERR(sk__augment(&c, &s, 1, jpg, len, out, &a, &err), SK_EINVAL,
	    &err);
	sk__aug_scratch_free(&s);
	free(jpg);
}
