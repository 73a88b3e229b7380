/*
 * test_image.c - the image codec: PNG and JPEG round trips, gray and CMYK
 * JPEGs, probing, truncated and garbage input, the pixel limit against
 * decompression bombs, and the resizer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */

/* A smooth RGB gradient (JPEG-friendly), w*h*3 bytes. */
static uint8_t *
gradient(int w, int h)
{
	uint8_t *p = malloc((size_t)w * h * 3);
	int x, y;

	CHECK(p != NULL);
	for (y = 0; y < h; y++)
		for (x = 0; x < w; x++) {
			uint8_t *q = p + ((size_t)y * w + x) * 3;

			q[0] = (uint8_t)(x * 255 / (w > 1 ? w - 1 : 1));
			q[1] = (uint8_t)(y * 255 / (h > 1 ? h - 1 : 1));
			q[2] = (uint8_t)(128 + (x - y) / 2);
		}
	return (p);
}

/* Noise: every pixel different, so compressed data is large. */
static uint8_t *
noise(size_t n)
{
	uint8_t *p = malloc(n);
	uint32_t x = 12345;
	size_t i;

	CHECK(p != NULL);
	for (i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		p[i] = (uint8_t)(x >> 16);
	}
	return (p);
}

static double
mean_abs_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
	double sum = 0;
	size_t i;

	for (i = 0; i < n; i++)
		sum += a[i] > b[i] ? a[i] - b[i] : b[i] - a[i];
	return (n ? sum / (double)n : 0);
}

static uint32_t
crc32(const uint8_t *p, size_t n)
{
	uint32_t c = 0xffffffffu;
	size_t i;
	int k;

	for (i = 0; i < n; i++) {
		c ^= p[i];
		for (k = 0; k < 8; k++)
			c = (c >> 1) ^ (0xedb88320u & -(c & 1));
	}
	return (c ^ 0xffffffffu);
}

static void
put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* Append a PNG chunk to buf at *len. */
static void
png_chunk(uint8_t *buf, size_t *len, const char *type, const uint8_t *data,
    size_t n)
{
	uint8_t *p = buf + *len;

	put32(p, (uint32_t)n);
	memcpy(p + 4, type, 4);
	if (n > 0)
		memcpy(p + 8, data, n);
	put32(p + 8 + n, crc32(p + 4, 4 + n));
	*len += 12 + n;
}

/*
 * A PNG of color type ctype (8 bits) from raw rows, with one stored
 * (uncompressed) deflate block, so the test needs no zlib. plte may be NULL.
 */
static uint8_t *
png_by_hand(int w, int h, int ctype, int bpp, const uint8_t *pix,
    const uint8_t *plte, size_t nplte, size_t *outlen)
{
	size_t raw = (size_t)h * (1 + (size_t)w * bpp), len = 0, i;
	uint8_t *buf = malloc(raw + nplte + 200), *z, ihdr[13];
	uint32_t a = 1, b = 0;
	int y;

	CHECK(buf != NULL && raw < 65536);
	CHECK((z = malloc(raw + 11)) != NULL);
	memcpy(buf, "\x89PNG\r\n\x1a\n", 8);
	len = 8;
	put32(ihdr, (uint32_t)w);
	put32(ihdr + 4, (uint32_t)h);
	ihdr[8] = 8;
	ihdr[9] = (uint8_t)ctype;
	ihdr[10] = ihdr[11] = ihdr[12] = 0;
	png_chunk(buf, &len, "IHDR", ihdr, 13);
	if (plte != NULL)
		png_chunk(buf, &len, "PLTE", plte, nplte);
	/* zlib: header, one final stored block, Adler-32 */
	z[0] = 0x78;
	z[1] = 0x01;
	z[2] = 0x01;
	z[3] = (uint8_t)raw;
	z[4] = (uint8_t)(raw >> 8);
	z[5] = (uint8_t)~raw;
	z[6] = (uint8_t)(~raw >> 8);
	for (y = 0; y < h; y++) {
		uint8_t *row = z + 7 + (size_t)y * (1 + (size_t)w * bpp);

		row[0] = 0;	/* filter: none */
		memcpy(row + 1, pix + (size_t)y * w * bpp, (size_t)w * bpp);
	}
	for (i = 0; i < raw; i++) {
		a = (a + z[7 + i]) % 65521;
		b = (b + a) % 65521;
	}
	put32(z + 7 + raw, (b << 16) | a);
	png_chunk(buf, &len, "IDAT", z, raw + 11);
	png_chunk(buf, &len, "IEND", NULL, 0);
	free(z);
	*outlen = len;
	return (buf);
}

static uint8_t *
enc_png(const uint8_t *pix, int w, int h, int comps, int level, size_t *len)
{
	struct sk_error err = { 0 };
	uint8_t *out = NULL;

	CHECK_OK(sk_image_encode_png(pix, w, h, comps, level, &out, len, &err),
	    &err);
	CHECK(out != NULL && *len > 8);
	CHECK_MEM_EQ(out, "\x89PNG\r\n\x1a\n", 8);
	return (out);
}

static uint8_t *
enc_jpeg(const uint8_t *pix, int w, int h, int comps, int q, size_t *len)
{
	struct sk_error err = { 0 };
	uint8_t *out = NULL;

	CHECK_OK(sk_image_encode_jpeg(pix, w, h, comps, q, &out, len, &err),
	    &err);
	CHECK(out != NULL && *len > 4);
	CHECK(out[0] == 0xff && out[1] == 0xd8);
	CHECK(out[*len - 2] == 0xff && out[*len - 1] == 0xd9);
	return (out);
}

/* Decode, expecting success and size w x h. */
static uint8_t *
dec(const uint8_t *data, size_t len, int w, int h)
{
	struct sk_error err = { 0 };
	uint8_t *rgb = NULL;
	int gw = 0, gh = 0;

	CHECK_OK(sk_image_decode_rgb(data, len, 0, &rgb, &gw, &gh, &err),
	    &err);
	CHECK(rgb != NULL);
	CHECK_EQ_INT(gw, w);
	CHECK_EQ_INT(gh, h);
	return (rgb);
}

static void
expect_info(int line, const uint8_t *data, size_t len, int format, int cs,
    int w, int h, int comps, int truncated)
{
	struct sk_image_info info;
	struct sk_error err = { 0 };
	int rc;

	memset(&info, 0xa5, sizeof info);
	if ((rc = sk_image_probe(data, len, &info, &err)) != 0)
		t_fail(__FILE__, line, "sk_image_probe = %d: %s", rc, err.msg);
	if ((int)info.format != format || (int)info.colorspace != cs ||
	    info.width != w || info.height != h || info.components != comps ||
	    info.truncated != truncated)
		t_fail(__FILE__, line, "probe: format %d colorspace %d %dx%d, "
		    "%d components, truncated %d; want %d %d %dx%d, %d, %d",
		    info.format, info.colorspace, info.width, info.height,
		    info.components, info.truncated, format, cs, w, h, comps,
		    truncated);
}

/* ------------------------------------------------------------------------ */
/* PNG                                                                      */

TEST(image_png_rgb_roundtrip)
{
	uint8_t *pix = gradient(37, 23), *png, *png0, *png9, *rgb;
	size_t len, len0, len9;

	png = enc_png(pix, 37, 23, 3, -1, &len);
	expect_info(__LINE__, png, len, SK_IMAGE_PNG, SK_CS_RGB, 37, 23, 3, 0);
	rgb = dec(png, len, 37, 23);
	CHECK_MEM_EQ(rgb, pix, 37 * 23 * 3);
	free(rgb);

	/* The level changes the size, never the pixels. */
	png0 = enc_png(pix, 37, 23, 3, 0, &len0);
	png9 = enc_png(pix, 37, 23, 3, 9, &len9);
	CHECK(len0 > len9);
	CHECK(len0 >= 37 * 23 * 3);
	rgb = dec(png0, len0, 37, 23);
	CHECK_MEM_EQ(rgb, pix, 37 * 23 * 3);
	free(rgb);
	rgb = dec(png9, len9, 37, 23);
	CHECK_MEM_EQ(rgb, pix, 37 * 23 * 3);
	free(rgb);
	free(png);
	free(png0);
	free(png9);
	free(pix);
}

TEST(image_png_gray)
{
	uint8_t gray[20 * 10], *png, *rgb;
	size_t len;
	int i;

	for (i = 0; i < 200; i++)
		gray[i] = (uint8_t)(i * 7);
	png = enc_png(gray, 20, 10, 1, 6, &len);
	expect_info(__LINE__, png, len, SK_IMAGE_PNG, SK_CS_GRAY, 20, 10, 1,
	    0);
	rgb = dec(png, len, 20, 10);
	for (i = 0; i < 200; i++) {
		CHECK_EQ_INT(rgb[3 * i], gray[i]);
		CHECK_EQ_INT(rgb[3 * i + 1], gray[i]);
		CHECK_EQ_INT(rgb[3 * i + 2], gray[i]);
	}
	free(rgb);
	free(png);
}

TEST(image_png_rgba_and_palette)
{
	uint8_t rgba[5 * 3 * 4], idx[5 * 3], *png, *rgb;
	static const uint8_t plte[] = { 255, 0, 0, 0, 255, 0, 10, 20, 30 };
	size_t len;
	int i;

	/* Opaque RGBA: the color channels come through unchanged. */
	for (i = 0; i < 15; i++) {
		rgba[4 * i] = (uint8_t)(i * 17);
		rgba[4 * i + 1] = (uint8_t)(255 - i * 3);
		rgba[4 * i + 2] = (uint8_t)(i * i);
		rgba[4 * i + 3] = 255;
	}
	png = png_by_hand(5, 3, 6, 4, rgba, NULL, 0, &len);
	expect_info(__LINE__, png, len, SK_IMAGE_PNG, SK_CS_RGBA, 5, 3, 4, 0);
	rgb = dec(png, len, 5, 3);
	for (i = 0; i < 15; i++) {
		CHECK_EQ_INT(rgb[3 * i], rgba[4 * i]);
		CHECK_EQ_INT(rgb[3 * i + 1], rgba[4 * i + 1]);
		CHECK_EQ_INT(rgb[3 * i + 2], rgba[4 * i + 2]);
	}
	free(rgb);
	free(png);

	/* A palette image decodes to its colors. */
	for (i = 0; i < 15; i++)
		idx[i] = (uint8_t)(i % 3);
	png = png_by_hand(5, 3, 3, 1, idx, plte, sizeof plte, &len);
	rgb = dec(png, len, 5, 3);
	for (i = 0; i < 15; i++)
		CHECK_MEM_EQ(rgb + 3 * i, plte + 3 * (i % 3), 3);
	free(rgb);
	free(png);
}

/* ------------------------------------------------------------------------ */
/* JPEG                                                                     */

TEST(image_jpeg_rgb_q95)
{
	uint8_t *pix = gradient(64, 48), *jpg, *rgb, *small;
	size_t len, slen;
	double d;

	jpg = enc_jpeg(pix, 64, 48, 3, 95, &len);
	expect_info(__LINE__, jpg, len, SK_IMAGE_JPEG, SK_CS_RGB, 64, 48, 3, 0);
	rgb = dec(jpg, len, 64, 48);
	d = mean_abs_diff(rgb, pix, 64 * 48 * 3);
	t_diag("q95 mean abs diff %.3f", d);
	CHECK(d < 2.5);
	free(rgb);

	/* Lower quality: smaller file, still close on a smooth image. */
	small = enc_jpeg(pix, 64, 48, 3, 10, &slen);
	CHECK(slen < len);
	rgb = dec(small, slen, 64, 48);
	CHECK(mean_abs_diff(rgb, pix, 64 * 48 * 3) > d);
	free(rgb);
	free(small);
	free(jpg);
	free(pix);
}

TEST(image_jpeg_odd_size)
{
	uint8_t *pix = gradient(1, 1), *jpg, *rgb;
	size_t len;

	jpg = enc_jpeg(pix, 1, 1, 3, 90, &len);
	rgb = dec(jpg, len, 1, 1);
	CHECK(mean_abs_diff(rgb, pix, 3) < 8);
	free(rgb);
	free(jpg);
	free(pix);

	pix = gradient(333, 17);
	jpg = enc_jpeg(pix, 333, 17, 3, 90, &len);
	rgb = dec(jpg, len, 333, 17);
	CHECK(mean_abs_diff(rgb, pix, 333 * 17 * 3) < 4);
	free(rgb);
	free(jpg);
	free(pix);
}

TEST(image_jpeg_gray)
{
	uint8_t gray[32 * 24], *jpg, *rgb;
	size_t len;
	int i;
	double sum = 0;

	for (i = 0; i < 32 * 24; i++)
		gray[i] = (uint8_t)((i % 32) * 8);
	jpg = enc_jpeg(gray, 32, 24, 1, 95, &len);
	expect_info(__LINE__, jpg, len, SK_IMAGE_JPEG, SK_CS_GRAY, 32, 24, 1,
	    0);
	rgb = dec(jpg, len, 32, 24);
	for (i = 0; i < 32 * 24; i++) {
		CHECK_EQ_INT(rgb[3 * i], rgb[3 * i + 1]);
		CHECK_EQ_INT(rgb[3 * i], rgb[3 * i + 2]);
		sum += abs(rgb[3 * i] - gray[i]);
	}
	t_diag("gray mean abs diff %.3f", sum / (32 * 24));
	CHECK(sum / (32 * 24) < 3);
	free(rgb);
	free(jpg);
}

/* Check every decoded pixel against a color, within tol. */
static void
expect_color(int line, const uint8_t *rgb, int n, int r, int g, int b,
    int tol)
{
	int i;

	for (i = 0; i < n; i++)
		if (abs(rgb[3 * i] - r) > tol || abs(rgb[3 * i + 1] - g) > tol ||
		    abs(rgb[3 * i + 2] - b) > tol)
			t_fail(__FILE__, line, "pixel %d is (%d,%d,%d), want "
			    "(%d,%d,%d) +- %d", i, rgb[3 * i], rgb[3 * i + 1],
			    rgb[3 * i + 2], r, g, b, tol);
}

TEST(image_jpeg_cmyk)
{
	/* Adobe inverted CMYK: stored = 255 - ink. Red is M+Y ink, no K. */
	static const uint8_t red[4] = { 255, 0, 0, 255 };
	static const uint8_t blue[4] = { 0, 0, 255, 255 };
	uint8_t pix[16 * 16 * 4], *jpg, *rgb;
	struct sk_image_info info;
	struct sk_error err = { 0 };
	size_t len;
	int i;

	for (i = 0; i < 256; i++)
		memcpy(pix + 4 * i, red, 4);
	jpg = enc_jpeg(pix, 16, 16, 4, 95, &len);
	CHECK_OK(sk_image_probe(jpg, len, &info, &err), &err);
	CHECK_EQ_INT(info.format, SK_IMAGE_JPEG);
	CHECK(info.colorspace == SK_CS_CMYK || info.colorspace == SK_CS_YCCK);
	CHECK_EQ_INT(info.components, 4);
	CHECK_EQ_INT(info.width, 16);
	rgb = dec(jpg, len, 16, 16);
	t_diag("red decodes to (%d,%d,%d)", rgb[0], rgb[1], rgb[2]);
	expect_color(__LINE__, rgb, 256, 255, 0, 0, 40);
	free(rgb);
	free(jpg);

	for (i = 0; i < 256; i++)
		memcpy(pix + 4 * i, blue, 4);
	jpg = enc_jpeg(pix, 16, 16, 4, 95, &len);
	rgb = dec(jpg, len, 16, 16);
	t_diag("blue decodes to (%d,%d,%d)", rgb[0], rgb[1], rgb[2]);
	expect_color(__LINE__, rgb, 256, 0, 0, 255, 40);
	free(rgb);
	free(jpg);
}

TEST(image_jpeg_truncated)
{
	uint8_t *pix = noise(64 * 64 * 3), *jpg, *rgb = NULL;
	struct sk_error err = { 0 };
	size_t len, cut;
	int w, h;
	const char *msg;

	jpg = enc_jpeg(pix, 64, 64, 3, 90, &len);
	cut = len * 6 / 10;
	/* The header is intact: probe works and says truncated. */
	expect_info(__LINE__, jpg, cut, SK_IMAGE_JPEG, SK_CS_RGB, 64, 64, 3, 1);
	msg = CHECK_ERR(sk_image_decode_rgb(jpg, cut, 0, &rgb, &w, &h, &err),
	    SK_EDECODE, &err);
	t_diag("message: %s", msg);
	CHECK(rgb == NULL);
	/* Just the end-of-image marker missing. */
	CHECK_ERR(sk_image_decode_rgb(jpg, len - 2, 0, &rgb, &w, &h, &err),
	    SK_EDECODE, &err);
	expect_info(__LINE__, jpg, len - 2, SK_IMAGE_JPEG, SK_CS_RGB, 64, 64,
	    3, 1);
	free(jpg);
	free(pix);
}

TEST(image_png_truncated)
{
	uint8_t *pix = noise(64 * 64 * 3), *png, *rgb = NULL;
	struct sk_error err = { 0 };
	size_t len;
	int w, h;

	png = enc_png(pix, 64, 64, 3, 6, &len);
	CHECK_ERR(sk_image_decode_rgb(png, len * 6 / 10, 0, &rgb, &w, &h,
	    &err), SK_EDECODE, &err);
	CHECK(rgb == NULL);
	/* Cut inside IHDR: not even the header. */
	CHECK_ERR(sk_image_decode_rgb(png, 20, 0, &rgb, &w, &h, &err),
	    SK_EDECODE, &err);
	free(png);
	free(pix);
}

TEST(image_garbage)
{
	uint8_t *g = noise(1000), *rgb = NULL;
	struct sk_image_info info;
	struct sk_error err = { 0 };
	int w, h;

	CHECK(sk_image_probe(g, 1000, &info, &err) < 0);
	CHECK(err.msg[0] != '\0');
	CHECK_ERR(sk_image_decode_rgb(g, 1000, 0, &rgb, &w, &h, &err),
	    SK_EDECODE, &err);
	/* Right magic, garbage after it. */
	memcpy(g, "\xff\xd8\xff", 3);
	CHECK_ERR(sk_image_decode_rgb(g, 1000, 0, &rgb, &w, &h, &err),
	    SK_EDECODE, &err);
	memcpy(g, "\x89PNG\r\n\x1a\n", 8);
	CHECK_ERR(sk_image_decode_rgb(g, 1000, 0, &rgb, &w, &h, &err),
	    SK_EDECODE, &err);
	CHECK(sk_image_probe(g, 1000, &info, &err) < 0);
	/* Too short to be anything. */
	CHECK_ERR(sk_image_decode_rgb(g, 0, 0, &rgb, &w, &h, &err),
	    SK_EDECODE, &err);
	CHECK_ERR(sk_image_decode_rgb(g, 2, 0, &rgb, &w, &h, &err),
	    SK_EDECODE, &err);
	CHECK(rgb == NULL);
	free(g);
}

/* ------------------------------------------------------------------------ */
/* decompression bombs                                                      */

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

TEST(image_jpeg_bomb)
{
	uint8_t *pix = gradient(16, 16), *jpg, *rgb = NULL;
	struct sk_error err = { 0 };
	size_t len, sof;
	int w, h;
	const char *msg;

	jpg = enc_jpeg(pix, 16, 16, 3, 90, &len);

	/* The limit: pixels over max_pixels fail, up to it pass. */
	CHECK_ERR(sk_image_decode_rgb(jpg, len, 255, &rgb, &w, &h, &err),
	    SK_ETOOBIG, &err);
	CHECK(rgb == NULL);
	CHECK_OK(sk_image_decode_rgb(jpg, len, 256, &rgb, &w, &h, &err), &err);
	free(rgb);
	rgb = NULL;

	/* Claim 20000 x 20000 (400 MP) in SOF0. */
	CHECK((sof = find_sof(jpg, len)) != 0);
	jpg[sof + 5] = 20000 >> 8;
	jpg[sof + 6] = 20000 & 0xff;
	jpg[sof + 7] = 20000 >> 8;
	jpg[sof + 8] = 20000 & 0xff;
	expect_info(__LINE__, jpg, len, SK_IMAGE_JPEG, SK_CS_RGB, 20000, 20000,
	    3, 0);
	msg = CHECK_ERR(sk_image_decode_rgb(jpg, len, 0, &rgb, &w, &h, &err),
	    SK_ETOOBIG, &err);
	t_diag("message: %s", msg);
	CHECK(rgb == NULL);
	free(jpg);
	free(pix);
}

TEST(image_png_bomb)
{
	uint8_t *pix = gradient(1, 1), *png, *rgb = NULL;
	struct sk_error err = { 0 };
	size_t len;
	int w, h;

	png = enc_png(pix, 1, 1, 3, -1, &len);
	CHECK_MEM_EQ(png + 12, "IHDR", 4);
	put32(png + 16, 20000);
	put32(png + 20, 20000);
	put32(png + 29, crc32(png + 12, 17));
	expect_info(__LINE__, png, len, SK_IMAGE_PNG, SK_CS_RGB, 20000, 20000,
	    3, 0);
	CHECK_ERR(sk_image_decode_rgb(png, len, 0, &rgb, &w, &h, &err),
	    SK_ETOOBIG, &err);
	CHECK(rgb == NULL);
	free(png);
	free(pix);
}

/* ------------------------------------------------------------------------ */
/* encoder arguments                                                        */

TEST(image_encode_bad_args)
{
	uint8_t pix[4 * 4 * 4] = { 0 }, *out = NULL;
	struct sk_error err = { 0 };
	size_t len;

	CHECK(sk_image_encode_jpeg(pix, 4, 4, 2, 90, &out, &len, &err) < 0);
	CHECK(err.msg[0] != '\0');
	CHECK(sk_image_encode_jpeg(pix, 0, 4, 3, 90, &out, &len, &err) < 0);
	CHECK(sk_image_encode_png(pix, 4, 4, 4, -1, &out, &len, &err) < 0);
	CHECK(sk_image_encode_png(pix, 4, -1, 3, -1, &out, &len, &err) < 0);
	CHECK(out == NULL);
}

/* ------------------------------------------------------------------------ */
/* resize                                                                   */

/* Resize into a buffer with guard bytes on both sides. */
static uint8_t *
resize(const uint8_t *src, int sw, int sh, int dw, int dh)
{
	size_t n = (size_t)dw * dh * 3;
	uint8_t *buf = malloc(n + 64);
	int rc;

	CHECK(buf != NULL);
	memset(buf, 0xee, n + 64);
	rc = sk_image_resize_rgb(src, sw, sh, buf + 32, dw, dh);
	if (rc != 0)
		t_fail(__FILE__, __LINE__, "resize %dx%d -> %dx%d = %d", sw, sh,
		    dw, dh, rc);
	for (int i = 0; i < 32; i++)
		if (buf[i] != 0xee || buf[32 + n + i] != 0xee)
			t_fail(__FILE__, __LINE__, "resize %dx%d -> %dx%d wrote "
			    "outside the %dx%d output", sw, sh, dw, dh, dw, dh);
	memmove(buf, buf + 32, n);
	return (buf);
}

TEST(image_resize_constant)
{
	static const int sizes[][2] = {
		{ 17, 13 }, { 97, 61 }, { 40, 30 }, { 1, 1 }, { 200, 3 },
		{ 3, 200 }, { 20, 15 }
	};
	uint8_t src[40 * 30 * 3], *dst;
	size_t i;
	int j;

	for (j = 0; j < 40 * 30; j++) {
		src[3 * j] = 10;
		src[3 * j + 1] = 200;
		src[3 * j + 2] = 77;
	}
	for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		int dw = sizes[i][0], dh = sizes[i][1];

		dst = resize(src, 40, 30, dw, dh);
		expect_color(__LINE__, dst, dw * dh, 10, 200, 77, 1);
		free(dst);
	}
}

TEST(image_resize_gradient)
{
	uint8_t *src = gradient(64, 48), *dst;
	int x, y, dw, dh;

	/* Down and up: the horizontal ramp in R stays a ramp, and the
	 * vertical ramp in G too. */
	for (int k = 0; k < 2; k++) {
		dw = k == 0 ? 16 : 200;
		dh = k == 0 ? 12 : 150;
		dst = resize(src, 64, 48, dw, dh);
		for (y = 0; y < dh; y++)
			for (x = 1; x < dw; x++)
				CHECK(dst[(y * dw + x) * 3] >=
				    dst[(y * dw + x - 1) * 3]);
		for (x = 0; x < dw; x++)
			for (y = 1; y < dh; y++)
				CHECK(dst[(y * dw + x) * 3 + 1] >=
				    dst[((y - 1) * dw + x) * 3 + 1]);
		CHECK(dst[0] < 40);
		CHECK(dst[(dw - 1) * 3] > 215);
		CHECK(dst[1] < 40);
		CHECK(dst[((dh - 1) * dw) * 3 + 1] > 215);
		free(dst);
	}

	/* Same size: the image itself. */
	dst = resize(src, 64, 48, 64, 48);
	CHECK(mean_abs_diff(dst, src, 64 * 48 * 3) < 0.5);
	free(dst);
	free(src);
}

TEST(image_resize_bad_args)
{
	uint8_t src[12] = { 0 }, dst[12];

	CHECK(sk_image_resize_rgb(src, 2, 2, dst, 0, 2) < 0);
	CHECK(sk_image_resize_rgb(src, 0, 2, dst, 2, 2) < 0);
	CHECK(sk_image_resize_rgb(src, 2, 2, dst, 2, -1) < 0);
}
