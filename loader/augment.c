/*
 * augment.c - the loader's per-sample step: decode a JPEG or PNG, crop and
 * flip it as torchvision would, resize the crop with Pillow's antialiased
 * bilinear filter, and write it in the batch's dtype and layout. The
 * randomness of a sample comes from (seed, epoch, key) alone.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "loader.h"

/* ------------------------------------------------------------------------ */
/* per-sample randomness                                                    */

#define GOLDEN 0x9e3779b97f4a7c15ULL

/* splitmix64's finaliser (Steele, Lea, Flood 2014): a bijection on 64 bits
 * whose every output bit depends on every input bit. */
static uint64_t
mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

uint64_t
sk__rng_next(uint64_t *state)
{
	return mix64(*state += GOLDEN);
}

double
sk__rng_uniform(uint64_t *state)
{
	return (double)(sk__rng_next(state) >> 11) * 0x1.0p-53;
}

uint64_t
sk__sample_seed(uint64_t seed, int epoch, const char *key)
{
	const unsigned char *p;
	uint64_t h = 0xcbf29ce484222325ULL;	/* FNV-1a 64 offset basis */
	uint64_t s;

	if (key != NULL)
		for (p = (const unsigned char *)key; *p != '\0'; p++) {
			h ^= *p;
			h *= 0x100000001b3ULL;	/* FNV-1a 64 prime */
		}
	/* Each step is a bijection of its running value and of what it
	 * folds in, so with any two of (seed, epoch, key hash) fixed, two
	 * values of the third never give the same sample seed. */
	s = mix64(seed + GOLDEN);
	s = mix64(s ^ ((uint64_t)(uint32_t)epoch + 2 * GOLDEN));
	return mix64(s ^ h);
}

/* ------------------------------------------------------------------------ */
/* crop boxes                                                               */

/* torch.randint(0, n): uniform in [0, n). */
static int
randint(uint64_t *rng, int n)
{
	int v = (int)(sk__rng_uniform(rng) * n);

	return v < n ? v : n - 1;
}

/*
 * torchvision.transforms.RandomResizedCrop.get_params. Python's
 * int(round(x)) rounds half to even, as nearbyint() does in the default
 * rounding mode. Sizes are compared as doubles before any cast, so absurd
 * scales fall through to the fallback instead of overflowing an int.
 */
void
sk__rrc_box(uint64_t *rng, int w, int h, const double scale[2],
    const double ratio[2], struct sk__box *box)
{
	double area = (double)w * h, lr0 = log(ratio[0]), lr1 = log(ratio[1]);
	double target, aspect, bw, bh, in_ratio, rmin, rmax;
	int i, cw, ch, top, left;

	for (i = 0; i < 10; i++) {
		target = area * (scale[0] + (scale[1] - scale[0]) *
		    sk__rng_uniform(rng));
		aspect = exp(lr0 + (lr1 - lr0) * sk__rng_uniform(rng));
		bw = nearbyint(sqrt(target * aspect));
		bh = nearbyint(sqrt(target / aspect));
		if (bw > 0 && bw <= w && bh > 0 && bh <= h) {
			cw = (int)bw;
			ch = (int)bh;
			top = randint(rng, h - ch + 1);
			left = randint(rng, w - cw + 1);
			goto done;
		}
	}

	/* Ten misses: the whole image, cut to the nearest allowed aspect
	 * and centred. */
	in_ratio = (double)w / h;
	rmin = fmin(ratio[0], ratio[1]);
	rmax = fmax(ratio[0], ratio[1]);
	cw = w;
	ch = h;
	if (in_ratio < rmin)
		ch = (int)fmin(nearbyint(w / rmin), h);
	else if (in_ratio > rmax)
		cw = (int)fmin(nearbyint(h * rmax), w);
	/* torchvision would return an empty box here (ratios beyond the
	 * image's pixel count); one pixel is the nearest thing. */
	if (cw < 1)
		cw = 1;
	if (ch < 1)
		ch = 1;
	top = (h - ch) / 2;
	left = (w - cw) / 2;
done:
	box->x = left;
	box->y = top;
	box->w = cw;
	box->h = ch;
}

/*
 * torchvision Resize(resize) on a w x h image: the short side becomes
 * resize and the long side int(resize * long / short), truncated. Then
 * CenterCrop(size): int(round((rh - size) / 2.0)) from the top, likewise
 * from the left. With size > rw or rh torchvision pads with zeros first;
 * here the crop box then reaches outside the image, and columns wholly
 * outside come out black, those partly outside do not match. The loader
 * rejects resize < size, so that never happens there.
 */
static void
center_params(int w, int h, int resize, int size, int *rw, int *rh,
    int *top, int *left)
{
	/* Exact in integers: a non-integral resize * long / short is at
	 * least 1 / short from an integer, far more than a double's error,
	 * so Python's float division truncates to the same value. */
	if (w <= h) {
		*rw = resize;
		*rh = (int)((int64_t)resize * h / w);
	} else {
		*rh = resize;
		*rw = (int)((int64_t)resize * w / h);
	}
	*top = (int)nearbyint((*rh - size) / 2.0);
	*left = (int)nearbyint((*rw - size) / 2.0);
}

void
sk__center_box(int w, int h, int resize, int size, struct sk__box *box,
    int *rw, int *rh)
{
	int top, left;

	center_params(w, h, resize, size, rw, rh, &top, &left);
	box->x = left * (double)w / *rw;
	box->y = top * (double)h / *rh;
	box->w = size * (double)w / *rw;
	box->h = size * (double)h / *rh;
}

/* ------------------------------------------------------------------------ */
/* resize weights                                                           */

/*
 * Pillow's BILINEAR resample (libImaging/Resample.c): a triangle filter
 * whose support widens to the downscale factor, so every source pixel
 * counts; weights normalised per output pixel, then fixed point with 22
 * fractional bits so sums of 8-bit samples fit in int32.
 */
#define RS_BITS 22
#define RS_HALF (1 << (RS_BITS - 1))

/*
 * One axis of a resize. Output pixel xx (0 <= xx < out) has its centre at
 * in0 + (xx + o + 0.5) * scale in some coordinate space; its taps are
 * clipped to [lo, hi) of that space and stored shifted by shift, which
 * turns them into columns (or rows) of the decoded region.
 *
 * Two spaces are used. Crop-local (random-resized): the box starts at 0
 * and taps stop at its edges, which is Pillow's img.crop(box).resize(),
 * what torchvision's resized_crop does. Whole-image (center, none): the
 * coordinates of the full scaled image, o the crop's first output pixel
 * in the resized image, taps stopping at the image's edges only, which is
 * Pillow's img.resize((rw, rh)).crop(...) with the same arithmetic, so
 * the two agree bit for bit when no DCT scaling happens.
 */
struct axis {
	double in0, scale;
	int o;
	int lo, hi;
	int shift;
};

struct coeffs {
	int ksize;
	int *bounds;		/* (out, 2): first region index, count */
	int32_t *k;		/* (out, ksize) */
};

static int
axis_ksize(const struct axis *a)
{
	double support = a->scale < 1.0 ? 1.0 : a->scale;

	return (int)ceil(support) * 2 + 1;
}

/*
 * Pillow's precompute_coeffs and normalize_coeffs_8bpc, clipped to
 * [lo, hi). kd holds ksize doubles. With reverse, output pixel xx's
 * weights go to row out-1-xx: a horizontal flip that costs nothing in
 * the pixel loop.
 */
static void
axis_precompute(const struct axis *a, int out, int reverse, double *kd,
    struct coeffs *c)
{
	double fscale, support, center, ss, ww, wt;
	int32_t *k;
	int xx, x, xmin, xmax, row;

	fscale = a->scale < 1.0 ? 1.0 : a->scale;
	support = fscale;
	ss = 1.0 / fscale;
	for (xx = 0; xx < out; xx++) {
		center = a->in0 + (xx + a->o + 0.5) * a->scale;
		/* C's truncation toward zero, as Pillow's (int) casts. */
		xmin = (int)(center - support + 0.5);
		if (xmin < a->lo)
			xmin = a->lo;
		xmax = (int)(center + support + 0.5);
		if (xmax > a->hi)
			xmax = a->hi;
		xmax -= xmin;
		/* At most 2 * support + 1 taps: never more than ksize. */
		if (xmax > c->ksize)
			xmax = c->ksize;
		ww = 0.0;
		for (x = 0; x < xmax; x++) {
			wt = 1.0 - fabs((x + xmin - center + 0.5) * ss);
			kd[x] = wt < 0.0 ? 0.0 : wt;
			ww += kd[x];
		}
		row = reverse ? out - 1 - xx : xx;
		k = c->k + (size_t)row * c->ksize;
		for (x = 0; x < c->ksize; x++)
			k[x] = 0;
		for (x = 0; x < xmax; x++)
			k[x] = (int32_t)(0.5 + (ww != 0.0 ? kd[x] / ww : 0.0) *
			    (1 << RS_BITS));
		if (xmax <= 0) {
			/* Wholly outside: no taps, the pixel comes out 0. */
			xmin = a->lo;
			xmax = 0;
		}
		c->bounds[row * 2] = xmin + a->shift;
		c->bounds[row * 2 + 1] = xmax;
	}
}

/* ------------------------------------------------------------------------ */
/* output values                                                            */

/*
 * What an 8-bit channel value becomes in the output: torchvision's
 * ToTensor then Normalize, (v / 255 - mean) / std, each step in float32
 * as torch computes it; bf16 and f16 rounded to nearest even from that.
 */
struct lut {
	enum sk_dtype dtype;
	float mean[3], std[3];
	uint32_t v32[3][256];	/* f32 bits */
	uint16_t v16[3][256];	/* bf16 or f16 bits */
};

static uint16_t
f32_to_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	if ((u & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((u >> 16) | 0x40);	/* quiet NaN */
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static uint16_t
f32_to_f16(float f)
{
	uint32_t u, sign, mant, rest;
	uint16_t v;
	int e;

	memcpy(&u, &f, 4);
	sign = (u >> 16) & 0x8000;
	u &= 0x7fffffff;
	if (u > 0x7f800000)
		return (uint16_t)(sign | 0x7e00);	/* NaN */
	if (u >= 0x477ff000)
		return (uint16_t)(sign | 0x7c00);	/* >= 65520: inf */
	if (u < 0x38800000) {
		/* Below 2^-14: a subnormal half, in units of 2^-24. The
		 * scaling is exact; nearbyintf rounds half to even, and 1024
		 * is correctly the smallest normal. */
		memcpy(&f, &u, 4);
		return (uint16_t)(sign | (uint32_t)nearbyintf(f * 0x1p24f));
	}
	e = (int)(u >> 23) - 127 + 15;
	mant = u & 0x7fffff;
	v = (uint16_t)(sign | (uint32_t)e << 10 | mant >> 13);
	rest = mant & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (v & 1)))
		v++;		/* a carry into the exponent is right too */
	return v;
}

static const struct lut *
lut_get(struct sk__aug_scratch *s, const struct sk__aug_config *cfg)
{
	struct lut *t = s->lut;
	float f;
	int c, v;

	if (t != NULL && t->dtype == cfg->dtype &&
	    memcmp(t->mean, cfg->mean, sizeof t->mean) == 0 &&
	    memcmp(t->std, cfg->std, sizeof t->std) == 0)
		return t;
	if (t == NULL && (t = s->lut = malloc(sizeof *t)) == NULL)
		return NULL;
	t->dtype = cfg->dtype;
	memcpy(t->mean, cfg->mean, sizeof t->mean);
	memcpy(t->std, cfg->std, sizeof t->std);
	for (c = 0; c < 3; c++)
		for (v = 0; v < 256; v++) {
			f = ((float)v / 255.0f - cfg->mean[c]) / cfg->std[c];
			memcpy(&t->v32[c][v], &f, 4);
			t->v16[c][v] = cfg->dtype == SK_DTYPE_F16 ?
			    f32_to_f16(f) : f32_to_bf16(f);
		}
	return t;
}

/*
 * One output row y of 8-bit RGB, row (size, 3), into out: HWC puts it at
 * (y, x, c), CHW at (c, y, x).
 */
static void
emit_row(const uint8_t *row, int size, int y, enum sk_dtype dtype,
    enum sk_layout layout, const struct lut *t, void *out)
{
	size_t xs, cs, base, plane = (size_t)size * size;
	uint32_t *o32 = out;
	uint16_t *o16 = out;
	uint8_t *o8 = out;
	int x, c;

	if (layout == SK_LAYOUT_NHWC) {
		base = (size_t)y * size * 3;
		xs = 3;
		cs = 1;
	} else {
		base = (size_t)y * size;
		xs = 1;
		cs = plane;
	}
	if (dtype == SK_DTYPE_U8 && layout == SK_LAYOUT_NHWC) {
		memcpy(o8 + base, row, (size_t)size * 3);
		return;
	}
	for (c = 0; c < 3; c++) {
		switch (dtype) {
		case SK_DTYPE_U8:
			for (x = 0; x < size; x++)
				o8[base + x * xs] = row[x * 3 + c];
			break;
		case SK_DTYPE_F32:
			for (x = 0; x < size; x++)
				o32[base + x * xs] = t->v32[c][row[x * 3 + c]];
			break;
		default:
			for (x = 0; x < size; x++)
				o16[base + x * xs] = t->v16[c][row[x * 3 + c]];
			break;
		}
		base += cs;
	}
}

/* ------------------------------------------------------------------------ */
/* the resize                                                               */

/* The vertical pass works in chunks of this many bytes, a constant trip
 * count that gcc -O2 (its "very cheap" vectoriser) turns into SIMD; rows
 * are padded to a multiple of it. */
#define VCHUNK 16

/*
 * One output row of the vertical pass: n rows of q (pst bytes apart, pst a
 * multiple of VCHUNK) times their weights k, rounded and clipped into
 * row8. The restrict qualifiers matter: without them gcc must assume the
 * uint8_t pointers may alias the accumulator, and at -O2 it does not
 * vectorise loops that would need a run-time overlap check.
 */
static inline __attribute__((always_inline)) void
vert_row_body(int32_t *restrict acc, uint8_t *restrict row8,
    const uint8_t *restrict q, const int32_t *k, int n, size_t pst)
{
	size_t x, j;
	int32_t v, wt;
	int i;

	for (x = 0; x < pst; x += VCHUNK)
		for (j = 0; j < VCHUNK; j++)
			acc[x + j] = RS_HALF;
	for (i = 0; i < n; i++, q += pst) {
		wt = k[i];
		for (x = 0; x < pst; x += VCHUNK)
			for (j = 0; j < VCHUNK; j++)
				acc[x + j] += q[x + j] * wt;
	}
	for (x = 0; x < pst; x += VCHUNK)
		for (j = 0; j < VCHUNK; j++) {
			v = acc[x + j] >> RS_BITS;
			row8[x + j] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
		}
}

typedef void vert_row_fn(int32_t *, uint8_t *, const uint8_t *,
    const int32_t *, int, size_t);

static void
vert_row(int32_t *acc, uint8_t *row8, const uint8_t *q, const int32_t *k,
    int n, size_t pst)
{
	vert_row_body(acc, row8, q, k, n, pst);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define SK_HAVE_X86_KERNELS 1
#include <immintrin.h>

/*
 * The horizontal pass with SSE4.1: one pixel's R, G, B (and a lane of
 * nothing) per vector, one 32-bit multiply-add per tap instead of three.
 * Same integers as the scalar loop, so the same bytes. gcc's -O2 does not
 * vectorise the scalar loop (its trip count varies per pixel), and the
 * baseline x86-64 has no 32-bit lane multiply, hence the target attribute
 * and a check of the CPU at run time.
 */
static int
have_sse41(void)
{
	static int cached = -1;

	if (__atomic_load_n(&cached, __ATOMIC_RELAXED) < 0) {
		__builtin_cpu_init();
		__atomic_store_n(&cached, __builtin_cpu_supports("sse4.1") &&
		    __builtin_cpu_supports("ssse3") ?
		    1 : 0, __ATOMIC_RELAXED);
	}
	return __atomic_load_n(&cached, __ATOMIC_RELAXED);
}

/*
 * The vertical pass vectorises, but the baseline x86-64 has no 32-bit lane
 * multiply and gcc emulates it with shuffles: the same body built for
 * SSE4.1 and AVX2 uses pmulld on 4 or 8 lanes. Same integers, same bytes.
 * Picked at run time by hand rather than with target_clones: an ifunc
 * resolver runs while the library is relocated, before a sanitizer's
 * runtime is up, and TSan builds crashed there.
 */
__attribute__((target("sse4.1")))
static void
vert_row_sse41(int32_t *acc, uint8_t *row8, const uint8_t *q,
    const int32_t *k, int n, size_t pst)
{
	vert_row_body(acc, row8, q, k, n, pst);
}

__attribute__((target("avx2")))
static void
vert_row_avx2(int32_t *acc, uint8_t *row8, const uint8_t *q,
    const int32_t *k, int n, size_t pst)
{
	vert_row_body(acc, row8, q, k, n, pst);
}

static vert_row_fn *
vert_row_pick(void)
{
	static vert_row_fn *cached;
	vert_row_fn *f = __atomic_load_n(&cached, __ATOMIC_RELAXED);

	if (f != NULL)
		return f;
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2"))
		f = vert_row_avx2;
	else if (__builtin_cpu_supports("sse4.1"))
		f = vert_row_sse41;
	else
		f = vert_row;
	__atomic_store_n(&cached, f, __ATOMIC_RELAXED);
	return f;
}

/*
 * Split the 22-bit weights of output pixel xx into two 11-bit halves and
 * pair up its taps: w[(xx * kp + j) * 2] holds the high halves of taps 2j
 * and 2j + 1 as two int16, w[... + 1] the low halves. A tap past the last
 * has weight 0 in both.
 */
static void
horiz_pairs(const struct coeffs *ch, int size, int kp, int32_t *w)
{
	const int32_t *k;
	uint32_t h0, h1, l0, l1;
	int xx, j, n;

	for (xx = 0; xx < size; xx++) {
		k = ch->k + (size_t)xx * ch->ksize;
		n = ch->bounds[xx * 2 + 1];
		for (j = 0; j < kp; j++) {
			h0 = l0 = h1 = l1 = 0;
			if (2 * j < n) {
				h0 = (uint32_t)k[2 * j] >> 11;
				l0 = (uint32_t)k[2 * j] & 2047;
			}
			if (2 * j + 1 < n) {
				h1 = (uint32_t)k[2 * j + 1] >> 11;
				l1 = (uint32_t)k[2 * j + 1] & 2047;
			}
			w[((size_t)xx * kp + j) * 2] = (int32_t)(h0 | h1 << 16);
			w[((size_t)xx * kp + j) * 2 + 1] = (int32_t)(l0 | l1 << 16);
		}
	}
}

/*
 * The horizontal pass with SSSE3/SSE4.1: two taps at a time. Two RGB
 * pixels are spread to 16-bit lanes as (R0 R1 G0 G1 B0 B1 0 0) and
 * pmaddwd sums R0*w0 + R1*w1 per channel. The 22-bit weights do not fit
 * 16 bits, so each is split in two 11-bit halves, multiplied separately
 * and recombined: (hi << 11) + lo is the same integer the scalar loop
 * sums, so the bytes are the same. gcc -O2 does not vectorise the scalar
 * loop (its trip count varies per pixel). end is the end of the source
 * buffer: a pair's 8-byte load never reads past it.
 */
__attribute__((target("sse4.1")))
static void
horiz_sse41(const uint8_t *row, const uint8_t *end, uint8_t *dst, int size,
    const struct coeffs *ch, int kp, const int32_t *w)
{
	const __m128i spread = _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1,
	    2, -1, 5, -1, -1, -1, -1, -1);
	const int32_t *wp;
	const uint8_t *p;
	__m128i hi, lo, px, acc;
	uint8_t tmp[8];
	uint32_t v;
	int xx, j, n;

	for (xx = 0; xx < size; xx++, dst += 3) {
		p = row + (size_t)ch->bounds[xx * 2] * 3;
		n = (ch->bounds[xx * 2 + 1] + 1) / 2;
		wp = w + (size_t)xx * kp * 2;
		hi = lo = _mm_setzero_si128();
		for (j = 0; j < n; j++, p += 6, wp += 2) {
			if (p + 8 <= end)
				px = _mm_loadl_epi64((const __m128i *)p);
			else {
				memset(tmp, 0, sizeof tmp);
				memcpy(tmp, p, (size_t)(end - p) < 6 ?
				    (size_t)(end - p) : 6);
				px = _mm_loadl_epi64((const __m128i *)tmp);
			}
			px = _mm_shuffle_epi8(px, spread);
			hi = _mm_add_epi32(hi, _mm_madd_epi16(px,
			    _mm_set1_epi32(wp[0])));
			lo = _mm_add_epi32(lo, _mm_madd_epi16(px,
			    _mm_set1_epi32(wp[1])));
		}
		acc = _mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(hi, 11), lo),
		    _mm_set1_epi32(RS_HALF));
		/* >> 22, then clamp to 0..255 as the scalar row does. */
		acc = _mm_srai_epi32(acc, RS_BITS);
		acc = _mm_packs_epi32(acc, acc);
		acc = _mm_packus_epi16(acc, acc);
		v = (uint32_t)_mm_cvtsi128_si32(acc);
		dst[0] = (uint8_t)v;
		dst[1] = (uint8_t)(v >> 8);
		dst[2] = (uint8_t)(v >> 16);
	}
}
#endif

static size_t
align64(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

/* Grow buf to at least n bytes, keeping its contents. */
static int
grow(uint8_t **buf, size_t *cap, size_t n)
{
	uint8_t *p;

	if (n <= *cap)
		return 0;
	if ((p = realloc(*buf, n)) == NULL)
		return SK_ENOMEM;
	*buf = p;
	*cap = n;
	return 0;
}

/*
 * Resize the crop of region src (sh, sw, 3) that ax and ay describe to
 * (size, size), flipping if asked, and write it to out. As Pillow does,
 * the horizontal pass runs first, over only the rows the vertical pass
 * reads, into 8-bit rows; the vertical pass then writes the output.
 *
 * s->tmp holds, at 64-byte offsets: horizontal weights (size, hks) and
 * bounds (size, 2); vertical weights and bounds; ksize doubles; the
 * vertical accumulator (pst) int32 and its clipped row (pst); the
 * horizontal pass's rows (nrows, pst).
 */
static int
resize(const uint8_t *src, int sw, int sh, const struct axis *ax,
    const struct axis *ay, int size, int flip,
    const struct sk__aug_config *cfg, const struct lut *t,
    struct sk__aug_scratch *s, void *out, struct sk_error *err)
{
	struct coeffs ch, cv;
	size_t pst, o_hb, o_vk, o_vb, o_kd, o_acc, o_row, o_hw, o_mid;
	const uint8_t *row, *p;
	const int32_t *k;
	uint8_t *mid, *row8, *dst;
	int32_t *acc;
	size_t sstride = (size_t)sw * 3;
	vert_row_fn *vrow;
	int y, n, ylo, yhi, nrows, kmax, kp;

	ch.ksize = axis_ksize(ax);
	cv.ksize = axis_ksize(ay);
	kmax = ch.ksize > cv.ksize ? ch.ksize : cv.ksize;
	pst = ((size_t)size * 3 + VCHUNK - 1) / VCHUNK * VCHUNK;

	o_hb = align64(sizeof(int32_t) * size * ch.ksize);
	o_vk = o_hb + align64(sizeof(int) * size * 2);
	o_vb = o_vk + align64(sizeof(int32_t) * size * cv.ksize);
	o_kd = o_vb + align64(sizeof(int) * size * 2);
	o_acc = o_kd + align64(sizeof(double) * kmax);
	o_row = o_acc + align64(sizeof(int32_t) * pst);
	kp = (ch.ksize + 1) / 2;
	o_hw = o_row + align64(pst);
	o_mid = o_hw + align64(sizeof(int32_t) * 2 * (size_t)size * kp);
	if (grow(&s->tmp, &s->tmp_cap, o_mid) != 0)
		goto nomem;
	ch.k = (int32_t *)s->tmp;
	ch.bounds = (int *)(s->tmp + o_hb);
	cv.k = (int32_t *)(s->tmp + o_vk);
	cv.bounds = (int *)(s->tmp + o_vb);
	axis_precompute(ax, size, flip, (double *)(s->tmp + o_kd), &ch);
	axis_precompute(ay, size, 0, (double *)(s->tmp + o_kd), &cv);

	/* The rows the vertical pass reads. */
	ylo = sh;
	yhi = 0;
	for (y = 0; y < size; y++) {
		if ((n = cv.bounds[y * 2 + 1]) == 0)
			continue;
		if (cv.bounds[y * 2] < ylo)
			ylo = cv.bounds[y * 2];
		if (cv.bounds[y * 2] + n > yhi)
			yhi = cv.bounds[y * 2] + n;
	}
	nrows = yhi > ylo ? yhi - ylo : 0;

	/* The pointers move if tmp does; take them after this. */
	if (grow(&s->tmp, &s->tmp_cap, o_mid + pst * nrows) != 0)
		goto nomem;
	ch.k = (int32_t *)s->tmp;
	ch.bounds = (int *)(s->tmp + o_hb);
	cv.k = (int32_t *)(s->tmp + o_vk);
	cv.bounds = (int *)(s->tmp + o_vb);
	acc = (int32_t *)(s->tmp + o_acc);
	row8 = s->tmp + o_row;
	mid = s->tmp + o_mid;
#ifdef SK_HAVE_X86_KERNELS
	if (have_sse41())
		horiz_pairs(&ch, size, kp, (int32_t *)(s->tmp + o_hw));
#endif

	/* Horizontal: src rows [ylo, yhi) (sw, 3) -> mid (nrows, size, 3). */
	for (y = 0; y < nrows; y++) {
		row = src + (size_t)(ylo + y) * sstride;
		dst = mid + (size_t)y * pst;
#ifdef SK_HAVE_X86_KERNELS
		if (have_sse41())
			horiz_sse41(row, src + (size_t)sh * sstride, dst, size,
			    &ch, kp, (const int32_t *)(s->tmp + o_hw));
		else
#endif
			sk__resample_row_rgb(row, dst, size, ch.ksize,
			    ch.bounds, ch.k);
		/* The padding is read by the vertical chunks, never output;
		 * zero it so no uninitialised byte is ever touched. */
		memset(dst + (size_t)size * 3, 0, pst - (size_t)size * 3);
	}

	/* Vertical: mid (nrows, size, 3) -> out row by row. */
#ifdef SK_HAVE_X86_KERNELS
	vrow = vert_row_pick();
#else
	vrow = vert_row;
#endif
	for (y = 0; y < size; y++) {
		k = cv.k + (size_t)y * cv.ksize;
		n = cv.bounds[y * 2 + 1];
		p = n > 0 ? mid + (size_t)(cv.bounds[y * 2] - ylo) * pst : mid;
		vrow(acc, row8, p, k, n, pst);
		emit_row(row8, size, y, cfg->dtype, cfg->layout, t, out);
	}
	return 0;
nomem:
	return sk_error_set(err, SK_ENOMEM, "out of memory for the resize "
	    "buffers (%d x %d output)", size, size);
}

/* ------------------------------------------------------------------------ */
/* decode and augment                                                       */

static int
is_jpeg(const uint8_t *p, size_t n)
{
	return n >= 2 && p[0] == 0xff && p[1] == 0xd8;
}

static int
is_png(const uint8_t *p, size_t n)
{
	return n >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0;
}

/*
 * The crop-local axis of a random-resized crop: the box [b0, b0 + bn) in
 * region pixels, taps kept inside the region pixels the box touches. With
 * no DCT scaling the box has integer edges and this is exactly
 * img.crop(box).resize(); scaled, the box's edge pixels are partly
 * outside it and are used whole.
 */
static void
axis_local(struct axis *a, double b0, double bn, int n, int size)
{
	int l = (int)floor(b0), r = (int)ceil(b0 + bn);

	if (l < 0)
		l = 0;
	if (l > n - 1)
		l = n - 1;
	if (r > n)
		r = n;
	if (r < l + 1)
		r = l + 1;
	a->in0 = b0 - l;
	a->scale = bn / size;
	a->o = 0;
	a->lo = 0;
	a->hi = r - l;
	a->shift = l;
}

/*
 * The whole-image axis: the full image, full source pixels long, resized
 * to rn of which output starts at pixel o; at DCT scale 1/d, scaled. The
 * region starts at pixel org of the scaled image and is n long; it
 * already holds every tap (sk__jpeg_decode_region's margin), so clipping
 * to it clips only at the image's own edges.
 */
static void
axis_whole(struct axis *a, int full, int d, int rn, int o, int org, int n)
{
	a->in0 = 0.0;
	a->scale = ((double)full / d) / rn;
	a->o = o;
	a->lo = org;
	a->hi = org + n;
	a->shift = -org;
}

int
sk__augment(const struct sk__aug_config *cfg, struct sk__aug_scratch *s,
    uint64_t rng_seed, const void *data, size_t len, void *out,
    struct sk_sample_aug *aug, struct sk_error *err)
{
	struct sk__jpeg_region r;
	struct sk_image_info info;
	struct sk__box box, rbox;
	struct axis ax, ay;
	const struct lut *t = NULL;
	const uint8_t *pix;
	uint8_t *png = NULL;
	uint64_t rng = rng_seed;
	size_t held, png_bytes = 0;
	int jpeg, w, h, rw = 0, rh = 0, top = 0, left = 0, flip, d, rgw, rgh;
	int ox = 0, oy = 0, size = cfg->size, rc;

	if (data == NULL || out == NULL || size <= 0 ||
	    (cfg->layout != SK_LAYOUT_NHWC && cfg->layout != SK_LAYOUT_NCHW) ||
	    (unsigned)cfg->dtype > SK_DTYPE_F16)
		return sk_error_set(err, SK_EINVAL, "bad augment arguments");
	jpeg = is_jpeg(data, len);
	if (!jpeg && !is_png(data, len))
		return sk_error_set(err, SK_EDECODE, "not a JPEG or PNG image");
	if (jpeg)
		rc = sk__jpeg_size(data, len, &w, &h, err);
	else {
		rc = sk_image_probe(data, len, &info, err);
		w = info.width;
		h = info.height;
	}
	if (rc != 0)
		return rc;
	if (w <= 0 || h <= 0)
		return sk_error_set(err, SK_EDECODE, "empty image (%d x %d)",
		    w, h);

	/* The draws come in a fixed order, box then flip, so a sample's
	 * augmentation depends on its seed only. */
	switch (cfg->crop) {
	case SK_CROP_RANDOM_RESIZED:
		sk__rrc_box(&rng, w, h, cfg->scale, cfg->ratio, &box);
		break;
	case SK_CROP_CENTER:
		if (cfg->resize <= 0)
			return sk_error_set(err, SK_EINVAL, "center crop: "
			    "resize %d is not positive", cfg->resize);
		center_params(w, h, cfg->resize, size, &rw, &rh, &top, &left);
		sk__center_box(w, h, cfg->resize, size, &box, &rw, &rh);
		break;
	case SK_CROP_NONE:
		rw = rh = size;
		box.x = box.y = 0.0;
		box.w = w;
		box.h = h;
		break;
	default:
		return sk_error_set(err, SK_EINVAL, "unknown crop mode %d",
		    (int)cfg->crop);
	}
	flip = cfg->flip && (sk__rng_next(&rng) >> 63);

	if (cfg->dtype != SK_DTYPE_U8 && (t = lut_get(s, cfg)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "out of memory");

	if (jpeg) {
		memset(&r, 0, sizeof r);
		r.box = box;
		r.min_w = r.min_h = size;
		if ((rc = sk__jpeg_decode_region(data, len, cfg->max_pixels,
		    &r, &s->pix, &s->pix_cap, err)) != 0)
			return rc;
		pix = s->pix;
		d = r.scale_denom;
		rgw = r.out_w;
		rgh = r.out_h;
		rbox = r.rbox;
		/* Where the region starts in the scaled image; the struct
		 * does not carry it, but rbox is the scaled box less it. */
		ox = (int)lround(box.x / d - rbox.x);
		oy = (int)lround(box.y / d - rbox.y);
	} else {
		if ((rc = sk_image_decode_rgb(data, len, cfg->max_pixels, &png,
		    &w, &h, err)) != 0)
			return rc;
		png_bytes = (size_t)w * h * 3;
		pix = png;
		d = 1;
		rgw = w;
		rgh = h;
		rbox = box;
	}

	if (cfg->crop == SK_CROP_RANDOM_RESIZED) {
		axis_local(&ax, rbox.x, rbox.w, rgw, size);
		axis_local(&ay, rbox.y, rbox.h, rgh, size);
	} else {
		axis_whole(&ax, w, d, rw, left, ox, rgw);
		axis_whole(&ay, h, d, rh, top, oy, rgh);
	}
	rc = resize(pix, rgw, rgh, &ax, &ay, size, flip, cfg, t, s, out, err);

	/* Bytes this worker held at once: its buffers, and a PNG's full
	 * decode while it lived. */
	held = s->pix_cap + s->tmp_cap + (s->lut != NULL ? sizeof(struct lut) :
	    0) + png_bytes;
	if (held > s->high_water)
		s->high_water = held;
	free(png);
	if (rc != 0)
		return rc;

	if (aug != NULL) {
		aug->src_w = w;
		aug->src_h = h;
		aug->x = (float)box.x;
		aug->y = (float)box.y;
		aug->w = (float)box.w;
		aug->h = (float)box.h;
		aug->flip = flip;
	}
	return 0;
}

void
sk__aug_scratch_free(struct sk__aug_scratch *s)
{
	if (s == NULL)
		return;
	free(s->pix);
	free(s->tmp);
	free(s->lut);
	memset(s, 0, sizeof *s);
}
