/*
 * image.c - the image codec the tools and the loader share: probe and decode
 * JPEG (libjpeg-turbo) and PNG (libpng) from memory to 8-bit RGB, encode
 * both, and an antialiased bilinear resize. For the loader, also decode
 * just the region of a JPEG that a crop needs, at a DCT scale.
 */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>
#include <libdeflate.h>
#include <png.h>

#include "shardkit.h"
#include "loader.h"

static enum sk_image_format
sniff(const uint8_t *p, size_t size)
{
	if (size >= 2 && p[0] == 0xff && p[1] == 0xd8)
		return SK_IMAGE_JPEG;
	if (size >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0)
		return SK_IMAGE_PNG;
	return SK_IMAGE_UNKNOWN;
}

static int
check_pixels(int w, int h, uint64_t max_pixels, struct sk_error *err)
{
	uint64_t n = (uint64_t)w * (uint64_t)h;

	if (max_pixels == 0)
		max_pixels = SK_IMAGE_MAX_PIXELS;
	if (n > max_pixels)
		return sk_error_set(err, SK_ETOOBIG,
		    "%d x %d = %llu pixels is over the limit of %llu", w, h,
		    (unsigned long long)n, (unsigned long long)max_pixels);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* JPEG                                                                     */

/*
 * libjpeg reports errors through error_exit, which must not return: jump
 * back to the caller's setjmp with the message kept. Warnings come through
 * emit_message(-1); when strict, those about corrupt data fail the decode
 * too, since libjpeg would otherwise fill the damage with grey and carry on.
 */
struct jerr {
	struct jpeg_error_mgr pub;
	jmp_buf jmp;
	int strict;
	char msg[JMSG_LENGTH_MAX];
};

static void
jerr_exit(j_common_ptr cinfo)
{
	struct jerr *e = (struct jerr *)cinfo->err;

	cinfo->err->format_message(cinfo, e->msg);
	longjmp(e->jmp, 1);
}

static void
jerr_emit(j_common_ptr cinfo, int level)
{
	struct jerr *e = (struct jerr *)cinfo->err;
	int code = cinfo->err->msg_code;

	if (level >= 0)
		return;		/* trace messages */
	/* These two describe header fields newer than libjpeg knows, not
	 * damage; every other warning means the data is. */
	if (!e->strict || code == JWRN_JFIF_MAJOR || code == JWRN_ADOBE_XFORM)
		return;
	cinfo->err->format_message(cinfo, e->msg);
	longjmp(e->jmp, 1);
}

static void
jerr_output(j_common_ptr cinfo)
{
	/* Never print: messages go to struct sk_error. */
}

static void
jerr_init(struct jpeg_decompress_struct *cinfo, struct jerr *e, int strict)
{
	/* Zeroed, so jpeg_destroy is safe even if the create call failed. */
	memset(cinfo, 0, sizeof *cinfo);
	cinfo->err = jpeg_std_error(&e->pub);
	e->pub.error_exit = jerr_exit;
	e->pub.emit_message = jerr_emit;
	e->pub.output_message = jerr_output;
	e->strict = strict;
	e->msg[0] = '\0';
}

/* JPEG ends with EOI (FF D9); some writers pad with zeros after it. */
static int
jpeg_truncated(const uint8_t *p, size_t size)
{
	while (size > 0 && p[size - 1] == 0)
		size--;
	return size < 4 || p[size - 2] != 0xff || p[size - 1] != 0xd9;
}

static void
jpeg_info(const struct jpeg_decompress_struct *cinfo,
    struct sk_image_info *info)
{
	info->width = (int)cinfo->image_width;
	info->height = (int)cinfo->image_height;
	info->components = cinfo->num_components;
	switch (cinfo->jpeg_color_space) {
	case JCS_GRAYSCALE:
		info->colorspace = SK_CS_GRAY;
		break;
	case JCS_RGB:
	case JCS_YCbCr:
		info->colorspace = SK_CS_RGB;
		break;
	case JCS_CMYK:
		info->colorspace = SK_CS_CMYK;
		break;
	case JCS_YCCK:
		info->colorspace = SK_CS_YCCK;
		break;
	default:
		info->colorspace = SK_CS_UNKNOWN;
		break;
	}
}

static int
jpeg_probe(const uint8_t *data, size_t size, struct sk_image_info *info,
    struct sk_error *err)
{
	struct jpeg_decompress_struct cinfo;
	struct jerr e;
	volatile int rc = 0;

	jerr_init(&cinfo, &e, 0);
	if (setjmp(e.jmp)) {
		rc = sk_error_set(err, SK_EDECODE, "JPEG: %s", e.msg);
		goto out;
	}
	jpeg_create_decompress(&cinfo);
	jpeg_mem_src(&cinfo, data, (unsigned long)size);
	jpeg_read_header(&cinfo, TRUE);
	jpeg_info(&cinfo, info);
	info->truncated = jpeg_truncated(data, size);
out:
	jpeg_destroy_decompress(&cinfo);
	return rc;
}

/*
 * Adobe's CMYK JPEGs (Photoshop) store inverted values: 255 means no ink.
 * Others store plain ink amounts. Either way RGB = (1-C)(1-K) per channel.
 */
static void
cmyk_to_rgb(const uint8_t *cmyk, uint8_t *rgb, int w, int inverted)
{
	int x, c, m, y, k;

	for (x = 0; x < w; x++, cmyk += 4, rgb += 3) {
		c = cmyk[0];
		m = cmyk[1];
		y = cmyk[2];
		k = cmyk[3];
		if (!inverted) {
			c = 255 - c;
			m = 255 - m;
			y = 255 - y;
			k = 255 - k;
		}
		rgb[0] = (uint8_t)((c * k + 127) / 255);
		rgb[1] = (uint8_t)((m * k + 127) / 255);
		rgb[2] = (uint8_t)((y * k + 127) / 255);
	}
}

/*
 * The common start of a decode, called under the caller's setjmp (libjpeg
 * errors jump there): read the header, check the full image's size
 * against the pixel limit before anything is allocated, and ask for RGB,
 * or CMYK for CMYK and YCCK files (libjpeg turns YCCK into CMYK itself,
 * gray and YCbCr into RGB).
 */
static int
jpeg_begin(struct jpeg_decompress_struct *cinfo, const uint8_t *data,
    size_t size, uint64_t max_pixels, int *w, int *h, int *cmyk,
    struct sk_error *err)
{
	jpeg_create_decompress(cinfo);
	jpeg_mem_src(cinfo, data, (unsigned long)size);
	jpeg_read_header(cinfo, TRUE);
	*w = (int)cinfo->image_width;
	*h = (int)cinfo->image_height;
	*cmyk = cinfo->jpeg_color_space == JCS_CMYK ||
	    cinfo->jpeg_color_space == JCS_YCCK;
	cinfo->out_color_space = *cmyk ? JCS_CMYK : JCS_RGB;
	return check_pixels(*w, *h, max_pixels, err);
}

/* After jpeg_start_decompress: the components jpeg_begin asked for. */
static int
jpeg_check_components(const struct jpeg_decompress_struct *cinfo, int cmyk,
    struct sk_error *err)
{
	if (cinfo->output_components != (cmyk ? 4 : 3))
		return sk_error_set(err, SK_EDECODE, "JPEG: unexpected %d "
		    "output components", cinfo->output_components);
	return 0;
}

/* What jpeg_decode allocates after its setjmp, so the error path can free
 * it: locals changed after setjmp are indeterminate after longjmp. */
struct jdec {
	uint8_t *rgb;
	uint8_t *row;		/* one CMYK row */
	JSAMPROW *rows;
};

static int
jpeg_decode(const uint8_t *data, size_t size, uint64_t max_pixels,
    uint8_t **rgb, int *wp, int *hp, struct sk_error *err)
{
	struct jpeg_decompress_struct cinfo;
	struct jerr e;
	volatile struct jdec d = { NULL, NULL, NULL };
	size_t stride;
	volatile int rc = 0;
	int w, h, cmyk;
	JDIMENSION y;

	jerr_init(&cinfo, &e, 1);
	if (setjmp(e.jmp)) {
		rc = sk_error_set(err, SK_EDECODE, "JPEG: %s", e.msg);
		goto out;
	}
	if ((rc = jpeg_begin(&cinfo, data, size, max_pixels, &w, &h, &cmyk,
	    err)) != 0)
		goto out;
	jpeg_start_decompress(&cinfo);
	if ((rc = jpeg_check_components(&cinfo, cmyk, err)) != 0)
		goto out;

	stride = (size_t)w * 3;
	d.rgb = malloc(stride * (size_t)h);
	d.rows = malloc(sizeof *d.rows * (size_t)h);
	if (cmyk)
		d.row = malloc((size_t)w * 4);
	if (d.rgb == NULL || d.rows == NULL || (cmyk && d.row == NULL)) {
		rc = sk_error_set(err, SK_ENOMEM, "JPEG: out of memory for "
		    "%d x %d pixels", w, h);
		goto out;
	}
	if (!cmyk) {
		/* Hand libjpeg every remaining row at once, so it can write
		 * as many per call as its output pass produces. */
		for (y = 0; y < (JDIMENSION)h; y++)
			d.rows[y] = d.rgb + y * stride;
		while (cinfo.output_scanline < cinfo.output_height) {
			y = cinfo.output_scanline;
			jpeg_read_scanlines(&cinfo, d.rows + y,
			    cinfo.output_height - y);
		}
	} else {
		while (cinfo.output_scanline < cinfo.output_height) {
			y = cinfo.output_scanline;
			d.rows[0] = d.row;
			jpeg_read_scanlines(&cinfo, d.rows, 1);
			cmyk_to_rgb(d.row, d.rgb + y * stride, w,
			    cinfo.saw_Adobe_marker);
		}
	}
	jpeg_finish_decompress(&cinfo);

	*rgb = d.rgb;
	*wp = w;
	*hp = h;
	d.rgb = NULL;
out:
	jpeg_destroy_decompress(&cinfo);
	free(d.rgb);
	free(d.row);
	free(d.rows);
	return rc;
}

/*
 * A growing memory destination. jpeg_mem_dest() mallocs its buffer too, but
 * when it has grown the buffer and the compression then fails, the new
 * buffer is only reachable from libjpeg's private state and leaks; owning
 * the buffer here keeps the error path clean.
 */
struct jdest {
	struct jpeg_destination_mgr pub;
	uint8_t *buf;
	size_t cap;
	size_t len;
};

static void
jdest_init(j_compress_ptr cinfo)
{
	struct jdest *d = (struct jdest *)cinfo->dest;

	d->pub.next_output_byte = d->buf;
	d->pub.free_in_buffer = d->cap;
}

static boolean
jdest_empty(j_compress_ptr cinfo)
{
	struct jdest *d = (struct jdest *)cinfo->dest;
	uint8_t *p;

	/* Called with the whole buffer full: libjpeg's contract. */
	if ((p = realloc(d->buf, d->cap * 2)) == NULL)
		ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 10);
	d->buf = p;
	d->pub.next_output_byte = p + d->cap;
	d->pub.free_in_buffer = d->cap;
	d->cap *= 2;
	return TRUE;
}

static void
jdest_term(j_compress_ptr cinfo)
{
	struct jdest *d = (struct jdest *)cinfo->dest;

	d->len = d->cap - d->pub.free_in_buffer;
}

int
sk_image_encode_jpeg(const uint8_t *pix, int w, int h, int components,
    int quality, uint8_t **out, size_t *outlen, struct sk_error *err)
{
	struct jpeg_compress_struct cinfo;
	struct jerr e;
	struct jdest d;
	JSAMPROW row;
	size_t stride;
	volatile int rc = 0;

	if (out != NULL)
		*out = NULL;
	if (outlen != NULL)
		*outlen = 0;
	if (pix == NULL || out == NULL || outlen == NULL || w <= 0 ||
	    h <= 0 || w > JPEG_MAX_DIMENSION || h > JPEG_MAX_DIMENSION)
		return sk_error_set(err, SK_EINVAL, "JPEG: bad image size "
		    "%d x %d", w, h);
	if (components != 1 && components != 3 && components != 4)
		return sk_error_set(err, SK_EINVAL, "JPEG: %d components "
		    "(want 1, 3 or 4)", components);
	if (quality < 1 || quality > 100)
		return sk_error_set(err, SK_EINVAL, "JPEG: quality %d is not "
		    "in 1-100", quality);

	memset(&d, 0, sizeof d);
	/* Most photographs at quality <= 95 fit in a quarter of the raw
	 * size; start there and let jdest_empty double it when not. */
	stride = (size_t)w * (size_t)components;
	d.cap = stride * (size_t)h / 4 + 1024;
	if ((d.buf = malloc(d.cap)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "JPEG: out of memory");
	d.pub.init_destination = jdest_init;
	d.pub.empty_output_buffer = jdest_empty;
	d.pub.term_destination = jdest_term;

	/* The decoder's error manager, without its rule on warnings. */
	memset(&cinfo, 0, sizeof cinfo);
	cinfo.err = jpeg_std_error(&e.pub);
	e.pub.error_exit = jerr_exit;
	e.pub.emit_message = jerr_emit;
	e.pub.output_message = jerr_output;
	e.strict = 0;
	e.msg[0] = '\0';
	if (setjmp(e.jmp)) {
		rc = sk_error_set(err, e.pub.msg_code == JERR_OUT_OF_MEMORY ?
		    SK_ENOMEM : SK_EIO, "JPEG: %s", e.msg);
		goto out;
	}
	jpeg_create_compress(&cinfo);
	cinfo.dest = &d.pub;
	cinfo.image_width = (JDIMENSION)w;
	cinfo.image_height = (JDIMENSION)h;
	cinfo.input_components = components;
	cinfo.in_color_space = components == 1 ? JCS_GRAYSCALE :
	    components == 3 ? JCS_RGB : JCS_CMYK;
	/* For JCS_CMYK this also selects an Adobe marker with transform 0:
	 * the caller's values are stored as given (Adobe-inverted). */
	jpeg_set_defaults(&cinfo);
	jpeg_set_quality(&cinfo, quality, TRUE);
	jpeg_start_compress(&cinfo, TRUE);
	while (cinfo.next_scanline < cinfo.image_height) {
		row = (JSAMPROW)(pix + cinfo.next_scanline * stride);
		jpeg_write_scanlines(&cinfo, &row, 1);
	}
	jpeg_finish_compress(&cinfo);

	*out = d.buf;
	*outlen = d.len;
	d.buf = NULL;
out:
	jpeg_destroy_compress(&cinfo);
	free(d.buf);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* PNG                                                                      */

/* The reader's state; png_error() longjmps to png_jmpbuf with msg set. */
struct pngio {
	const uint8_t *data;
	size_t size, pos;
	uint8_t *rgb;
	png_bytep *rows;
	char msg[256];
};

static void
png_fail(png_structp png, png_const_charp msg)
{
	struct pngio *io = png_get_error_ptr(png);

	snprintf(io->msg, sizeof io->msg, "%s", msg);
	png_longjmp(png, 1);
}

static void
png_warn(png_structp png, png_const_charp msg)
{
	/* libpng warns about benign things (bad ancillary chunks, sRGB
	 * profiles); the pixels are still right. */
}

static void
png_read_mem(png_structp png, png_bytep buf, size_t n)
{
	struct pngio *io = png_get_io_ptr(png);

	if (n > io->size - io->pos)
		png_error(png, "unexpected end of data (truncated PNG)");
	memcpy(buf, io->data + io->pos, n);
	io->pos += n;
}

/*
 * Read through png_read_info. With decode, also set the transforms to 8-bit
 * RGB and read the pixels. The caller holds the jmp_buf via png_jmpbuf, so
 * this is one function with one setjmp.
 */
static int
png_run(const uint8_t *data, size_t size, struct sk_image_info *info,
    uint64_t max_pixels, uint8_t **rgb, int *wp, int *hp,
    struct sk_error *err)
{
	png_structp png;
	png_infop pinfo = NULL;
	struct pngio io;
	png_uint_32 w, h, y;
	volatile int rc = 0;
	int depth, ctype;
	size_t stride;

	memset(&io, 0, sizeof io);
	io.data = data;
	io.size = size;
	png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &io, png_fail,
	    png_warn);
	if (png == NULL || (pinfo = png_create_info_struct(png)) == NULL) {
		rc = sk_error_set(err, SK_ENOMEM, "PNG: out of memory");
		goto out;
	}
	if (setjmp(png_jmpbuf(png))) {
		rc = sk_error_set(err, SK_EDECODE, "PNG: %s", io.msg);
		goto out;
	}
	png_set_read_fn(png, &io, png_read_mem);
	png_read_info(png, pinfo);
	png_get_IHDR(png, pinfo, &w, &h, &depth, &ctype, NULL, NULL, NULL);
	if (w > INT_MAX || h > INT_MAX) {
		rc = sk_error_set(err, SK_EDECODE, "PNG: bad size %lu x %lu",
		    (unsigned long)w, (unsigned long)h);
		goto out;
	}

	if (info != NULL) {
		info->width = (int)w;
		info->height = (int)h;
		switch (ctype) {
		case PNG_COLOR_TYPE_GRAY:
			info->colorspace = SK_CS_GRAY;
			info->components = 1;
			break;
		case PNG_COLOR_TYPE_GRAY_ALPHA:
			info->colorspace = SK_CS_GRAY_ALPHA;
			info->components = 2;
			break;
		case PNG_COLOR_TYPE_RGB:
		case PNG_COLOR_TYPE_PALETTE:
			info->colorspace = SK_CS_RGB;
			info->components = 3;
			break;
		case PNG_COLOR_TYPE_RGB_ALPHA:
			info->colorspace = SK_CS_RGBA;
			info->components = 4;
			break;
		default:
			info->colorspace = SK_CS_UNKNOWN;
			info->components = png_get_channels(png, pinfo);
			break;
		}
	}
	if (rgb == NULL)
		goto out;

	if ((rc = check_pixels((int)w, (int)h, max_pixels, err)) != 0)
		goto out;
	/* Palette and low-bit gray to 8 bits, tRNS to alpha; then 16 bits
	 * to 8 by the high byte and gray to RGB. Alpha is dropped, not
	 * composited: PIL's convert("RGB"), which torchvision's loader
	 * uses, does the same, so the pixels match the reference pipeline. */
	png_set_expand(png);
	png_set_strip_16(png);
	png_set_gray_to_rgb(png);
	png_set_strip_alpha(png);
	png_set_interlace_handling(png);
	png_read_update_info(png, pinfo);
	if (png_get_channels(png, pinfo) != 3 ||
	    png_get_bit_depth(png, pinfo) != 8) {
		rc = sk_error_set(err, SK_EDECODE, "PNG: cannot convert color "
		    "type %d depth %d to RGB", ctype, depth);
		goto out;
	}

	stride = (size_t)w * 3;
	io.rgb = malloc(stride * h);
	io.rows = malloc(sizeof *io.rows * h);
	if (io.rgb == NULL || io.rows == NULL) {
		rc = sk_error_set(err, SK_ENOMEM, "PNG: out of memory for "
		    "%lu x %lu pixels", (unsigned long)w, (unsigned long)h);
		goto out;
	}
	for (y = 0; y < h; y++)
		io.rows[y] = io.rgb + y * stride;
	/* Handles all seven Adam7 passes when the image is interlaced. */
	png_read_image(png, io.rows);
	/* Checks the rest of the stream up to IEND, so a file cut after
	 * its pixel data still fails, like a truncated JPEG. */
	png_read_end(png, NULL);

	*rgb = io.rgb;
	*wp = (int)w;
	*hp = (int)h;
	io.rgb = NULL;
out:
	if (png != NULL)
		png_destroy_read_struct(&png, pinfo != NULL ? &pinfo : NULL,
		    NULL);
	free(io.rgb);
	free(io.rows);
	return rc;
}

/*
 * PNG encoding. libpng cannot reuse a zlib stream between images, and on
 * CIFAR-10's 32x32 images zlib's setup and its literal coding cost 50 us of
 * the 70 us a sample took. libdeflate compresses the same filtered rows in
 * a third of the time, from a compressor each thread keeps. The container
 * around it is three fixed chunks (PNG spec, 5.2-5.6); decoding stays with
 * libpng.
 */
struct deflater {
	struct libdeflate_compressor *c;
	int level;
};

static pthread_key_t deflater_key;
static pthread_once_t deflater_once = PTHREAD_ONCE_INIT;

static void
deflater_free(void *p)
{
	struct deflater *d = p;

	libdeflate_free_compressor(d->c);
	free(d);
}

static void
deflater_key_init(void)
{
	pthread_key_create(&deflater_key, deflater_free);
}

/* This thread's compressor at level, or NULL when memory ran out. */
static struct libdeflate_compressor *
deflater(int level)
{
	struct deflater *d;

	if (pthread_once(&deflater_once, deflater_key_init) != 0)
		return NULL;
	d = pthread_getspecific(deflater_key);
	if (d != NULL && d->level == level)
		return d->c;
	if (d == NULL && (d = calloc(1, sizeof *d)) == NULL)
		return NULL;
	if (d->c != NULL)
		libdeflate_free_compressor(d->c);
	d->level = level;
	if ((d->c = libdeflate_alloc_compressor(level)) == NULL) {
		free(d);
		pthread_setspecific(deflater_key, NULL);
		return NULL;
	}
	pthread_setspecific(deflater_key, d);
	return d->c;
}

static uint8_t *
put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
	return p + 4;
}

/* A chunk whose data already sits at p + 8: length, type, data, CRC. */
static uint8_t *
put_chunk(uint8_t *p, const char *type, size_t len)
{
	put32(p, (uint32_t)len);
	memcpy(p + 4, type, 4);
	return put32(p + 8 + len, libdeflate_crc32(0, p + 4, len + 4));
}

static uint8_t
paeth(int a, int b, int c)
{
	int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);

	return (uint8_t)(pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
}

/*
 * Filter every row with one filter type: Sub for speed, Paeth for size.
 * rows (h, 1 + stride) <- pix (h, stride), bpp bytes per pixel.
 */
static void
png_filter(const uint8_t *pix, size_t stride, int h, int bpp, int type,
    uint8_t *rows)
{
	const uint8_t *r, *up;
	uint8_t *q = rows;
	size_t x, b = (size_t)bpp;
	int y;

	for (y = 0; y < h; y++) {
		r = pix + (size_t)y * stride;
		up = y > 0 ? r - stride : NULL;
		*q++ = (uint8_t)type;
		if (type == 1 || up == NULL) {
			/* Sub; also the first row of Paeth, where it is the
			 * same thing (no row above). */
			q[-1] = 1;
			memcpy(q, r, b);
			for (x = b; x < stride; x++)
				q[x] = (uint8_t)(r[x] - r[x - b]);
		} else {
			for (x = 0; x < b; x++)
				q[x] = (uint8_t)(r[x] - up[x]);
			for (; x < stride; x++)
				q[x] = (uint8_t)(r[x] - paeth(r[x - b], up[x],
				    up[x - b]));
		}
		q += stride;
	}
}

int
sk_image_encode_png(const uint8_t *pix, int w, int h, int components,
    int level, uint8_t **out, size_t *outlen, struct sk_error *err)
{
	static const uint8_t sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n',
	    0x1a, '\n' };
	struct libdeflate_compressor *c;
	uint8_t *rows = NULL, *buf = NULL, *p;
	size_t stride, nrows, bound, z;

	if (out != NULL)
		*out = NULL;
	if (outlen != NULL)
		*outlen = 0;
	if (pix == NULL || out == NULL || outlen == NULL || w <= 0 || h <= 0 ||
	    w > 0x7fffffff / 4 || h > 0x7fffffff / 4)
		return sk_error_set(err, SK_EINVAL, "PNG: bad image size "
		    "%d x %d", w, h);
	if (components != 1 && components != 3)
		return sk_error_set(err, SK_EINVAL, "PNG: %d components "
		    "(want 1 or 3)", components);
	if (level < -1 || level > 9)
		return sk_error_set(err, SK_EINVAL, "PNG: deflate level %d is not "
		    "in -1..9", level);
	/* The default is the CIFAR-10 hot path: libdeflate level 1 with Sub
	 * rows, 19 us a 32x32 image and 5% larger than PIL's level 6. */
	if ((c = deflater(level < 0 ? 1 : level)) == NULL)
		return sk_error_set(err, SK_ENOMEM, "PNG: out of memory");
	stride = (size_t)w * (size_t)components;
	nrows = (stride + 1) * (size_t)h;
	bound = libdeflate_zlib_compress_bound(c, nrows);
	rows = malloc(nrows);
	/* signature, IHDR (25), IDAT (12 + data), IEND (12) */
	buf = malloc(8 + 25 + 12 + bound + 12);
	if (rows == NULL || buf == NULL) {
		free(rows);
		free(buf);
		return sk_error_set(err, SK_ENOMEM, "PNG: out of memory");
	}
	png_filter(pix, stride, h, components, level >= 4 ? 4 : 1, rows);

	memcpy(buf, sig, 8);
	p = buf + 8;
	put32(p + 8, (uint32_t)w);
	put32(p + 12, (uint32_t)h);
	p[16] = 8;				/* bit depth */
	p[17] = components == 1 ? 0 : 2;	/* gray or truecolour */
	p[18] = p[19] = p[20] = 0;		/* deflate, filter 0, no interlace */
	p = put_chunk(p, "IHDR", 13);
	z = libdeflate_zlib_compress(c, rows, nrows, p + 8, bound);
	free(rows);
	if (z == 0) {
		free(buf);
		return sk_error_set(err, SK_EIO, "PNG: compression failed");
	}
	p = put_chunk(p, "IDAT", z);
	p = put_chunk(p, "IEND", 0);
	*out = buf;
	*outlen = (size_t)(p - buf);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* probe and decode                                                         */

int
sk_image_probe(const void *data, size_t size, struct sk_image_info *info,
    struct sk_error *err)
{
	struct sk_image_info tmp;

	if (info == NULL)
		info = &tmp;
	memset(info, 0, sizeof *info);
	if (data == NULL)
		return sk_error_set(err, SK_EINVAL, "no image data");
	info->format = sniff(data, size);
	switch (info->format) {
	case SK_IMAGE_JPEG:
		return jpeg_probe(data, size, info, err);
	case SK_IMAGE_PNG:
		return png_run(data, size, info, 0, NULL, NULL, NULL, err);
	default:
		return sk_error_set(err, SK_EDECODE,
		    "not a JPEG or PNG image");
	}
}

int
sk_image_decode_rgb(const void *data, size_t size, uint64_t max_pixels,
    uint8_t **rgb, int *w, int *h, struct sk_error *err)
{
	if (data == NULL || rgb == NULL || w == NULL || h == NULL)
		return sk_error_set(err, SK_EINVAL, "no image data");
	*rgb = NULL;
	switch (sniff(data, size)) {
	case SK_IMAGE_JPEG:
		return jpeg_decode(data, size, max_pixels, rgb, w, h, err);
	case SK_IMAGE_PNG:
		return png_run(data, size, NULL, max_pixels, rgb, w, h, err);
	default:
		return sk_error_set(err, SK_EDECODE,
		    "not a JPEG or PNG image");
	}
}

/* ------------------------------------------------------------------------ */
/* resize                                                                   */

/*
 * Weights of a triangle filter whose support widens with the downscale
 * factor, so every source pixel contributes (PIL's BILINEAR with reducing
 * support, ImagingResample). Fixed point with PIL's 22 fractional bits, so
 * sums of 8-bit samples fit in int32.
 */
#define RS_BITS 22

struct rs_coeffs {
	int ksize;
	int *bounds;		/* (out, 2): first source index, count */
	int32_t *k;		/* (out, ksize) */
};

static int
rs_precompute(int in, int out, struct rs_coeffs *c)
{
	double scale, fscale, support, center, ss, ww, wt, *kd;
	int xx, x, xmin, xmax;

	scale = (double)in / out;
	fscale = scale < 1.0 ? 1.0 : scale;
	support = 1.0 * fscale;
	c->ksize = (int)ceil(support) * 2 + 1;
	c->bounds = malloc(sizeof *c->bounds * 2 * (size_t)out);
	c->k = calloc((size_t)out * (size_t)c->ksize, sizeof *c->k);
	kd = malloc(sizeof *kd * (size_t)c->ksize);
	if (c->bounds == NULL || c->k == NULL || kd == NULL) {
		free(kd);
		return SK_ENOMEM;
	}
	ss = 1.0 / fscale;
	for (xx = 0; xx < out; xx++) {
		center = (xx + 0.5) * scale;
		xmin = (int)(center - support + 0.5);
		if (xmin < 0)
			xmin = 0;
		xmax = (int)(center + support + 0.5);
		if (xmax > in)
			xmax = in;
		xmax -= xmin;
		ww = 0.0;
		for (x = 0; x < xmax; x++) {
			wt = 1.0 - fabs((x + xmin - center + 0.5) * ss);
			kd[x] = wt < 0.0 ? 0.0 : wt;
			ww += kd[x];
		}
		for (x = 0; x < xmax; x++) {
			wt = ww != 0.0 ? kd[x] / ww : 0.0;
			c->k[xx * c->ksize + x] = (int32_t)lround(wt *
			    (1 << RS_BITS));
		}
		c->bounds[xx * 2] = xmin;
		c->bounds[xx * 2 + 1] = xmax;
	}
	free(kd);
	return 0;
}

static void
rs_free(struct rs_coeffs *c)
{
	free(c->bounds);
	free(c->k);
}

static inline uint8_t
clip8(int32_t v)
{
	v >>= RS_BITS;
	return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/*
 * One row of the horizontal pass, Pillow's integer arithmetic: output
 * pixel x sums bounds[2x + 1] source pixels from bounds[2x] with the
 * weights k[x * ksize ...]. Shared with the loader's resize (augment.c),
 * whose SIMD kernels must give these very bytes.
 */
void
sk__resample_row_rgb(const uint8_t *row, uint8_t *dst, int out, int ksize,
    const int *bounds, const int32_t *k)
{
	const uint8_t *p;
	const int32_t *kx;
	int32_t r, g, b;
	int x, i, n;

	for (x = 0; x < out; x++) {
		kx = k + (size_t)x * ksize;
		p = row + (size_t)bounds[x * 2] * 3;
		n = bounds[x * 2 + 1];
		r = g = b = 1 << (RS_BITS - 1);
		for (i = 0; i < n; i++, p += 3) {
			r += p[0] * kx[i];
			g += p[1] * kx[i];
			b += p[2] * kx[i];
		}
		dst[0] = clip8(r);
		dst[1] = clip8(g);
		dst[2] = clip8(b);
		dst += 3;
	}
}

/* src (h, sw, 3) -> dst (h, dw, 3) */
static void
rs_horizontal(const uint8_t *src, int sw, int h, uint8_t *dst, int dw,
    const struct rs_coeffs *c)
{
	int y;

	for (y = 0; y < h; y++)
		sk__resample_row_rgb(src + (size_t)y * sw * 3,
		    dst + (size_t)y * dw * 3, dw, c->ksize, c->bounds, c->k);
}

/* src (sh, w, 3) -> dst (dh, w, 3) */
static void
rs_vertical(const uint8_t *src, int w, uint8_t *dst, int dh,
    const struct rs_coeffs *c)
{
	const int32_t *k;
	size_t stride = (size_t)w * 3;
	const uint8_t *p;
	int32_t s;
	size_t x;
	int y, i, n;

	for (y = 0; y < dh; y++) {
		k = c->k + y * c->ksize;
		n = c->bounds[y * 2 + 1];
		p = src + (size_t)c->bounds[y * 2] * stride;
		for (x = 0; x < stride; x++) {
			s = 1 << (RS_BITS - 1);
			for (i = 0; i < n; i++)
				s += p[i * stride + x] * k[i];
			*dst++ = clip8(s);
		}
	}
}

int
sk_image_resize_rgb(const uint8_t *src, int sw, int sh, uint8_t *dst,
    int dw, int dh)
{
	struct rs_coeffs ch = { 0, NULL, NULL }, cv = { 0, NULL, NULL };
	uint8_t *tmp = NULL;
	int rc = 0, hfirst;

	if (src == NULL || dst == NULL || sw <= 0 || sh <= 0 || dw <= 0 ||
	    dh <= 0)
		return SK_EINVAL;
	if (sw == dw && sh == dh) {
		memcpy(dst, src, (size_t)sw * sh * 3);
		return 0;
	}
	/* Skip a pass whose size is equal. */
	if (sw != dw && (rc = rs_precompute(sw, dw, &ch)) != 0)
		goto out;
	if (sh != dh && (rc = rs_precompute(sh, dh, &cv)) != 0)
		goto out;
	if (sw == dw) {
		rs_vertical(src, sw, dst, dh, &cv);
		goto out;
	}
	if (sh == dh) {
		rs_horizontal(src, sw, sh, dst, dw, &ch);
		goto out;
	}
	/* Both passes: run first the one that costs fewer multiply-adds in
	 * all. The order changes a pixel by at most 1 (the intermediate is
	 * rounded to 8 bits), so PIL agrees exactly only where it picks the
	 * same order. */
	hfirst = (double)sh * dw * ch.ksize + (double)dh * dw * cv.ksize <=
	    (double)dh * sw * cv.ksize + (double)dh * dw * ch.ksize;
	if ((tmp = malloc(hfirst ? (size_t)dw * sh * 3 :
	    (size_t)sw * dh * 3)) == NULL) {
		rc = SK_ENOMEM;
		goto out;
	}
	if (hfirst) {
		rs_horizontal(src, sw, sh, tmp, dw, &ch);
		rs_vertical(tmp, dw, dst, dh, &cv);
	} else {
		rs_vertical(src, sw, tmp, dh, &cv);
		rs_horizontal(tmp, sw, dh, dst, dw, &ch);
	}
out:
	rs_free(&ch);
	rs_free(&cv);
	free(tmp);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* cropped and scaled JPEG decoding (the loader's augment step)             */

int
sk__jpeg_size(const void *data, size_t size, int *w, int *h,
    struct sk_error *err)
{
	struct sk_image_info info;
	int rc;

	if (data == NULL || w == NULL || h == NULL)
		return sk_error_set(err, SK_EINVAL, "no image data");
	if (sniff(data, size) != SK_IMAGE_JPEG)
		return sk_error_set(err, SK_EDECODE, "not a JPEG image");
	memset(&info, 0, sizeof info);
	if ((rc = jpeg_probe(data, size, &info, err)) != 0)
		return rc;
	*w = info.width;
	*h = info.height;
	return 0;
}

/*
 * The smallest DCT scale that keeps the box at least min_w x min_h. Only
 * 1/2, 1/4 and 1/8 have SIMD inverse DCTs in libjpeg-turbo 2.1; the other
 * M/8 scales were slower than a full-size decode (DESIGN, "Fast paths").
 */
static int
region_denom(const struct sk__box *box, int min_w, int min_h)
{
	static const int denoms[3] = { 8, 4, 2 };
	int i;

	for (i = 0; i < 3; i++)
		if (box->w / denoms[i] >= min_w && box->h / denoms[i] >= min_h)
			return denoms[i];
	return 1;
}

/*
 * Pixels beyond the box on each side that a resize of a box of n scaled
 * pixels to out pixels can touch: its triangle filter reaches max(n/out, 1)
 * from a centre, rounded outwards, plus one. Two more keep the columns
 * next to a jpeg_crop_scanline edge out of use, where fancy upsampling
 * sees a replicated edge instead of the real neighbour.
 */
static int
region_margin(double n, int out)
{
	double support = out > 0 ? n / out : n;

	if (support < 1.0)
		support = 1.0;
	return (int)ceil(support) + 3;
}

/* [floor(a - m), ceil(b + m)) clipped to [0, limit), never empty. */
static void
region_span(double a, double b, int m, JDIMENSION limit, JDIMENSION *lo,
    JDIMENSION *hi)
{
	double l = floor(a) - m, r = ceil(b) + m;

	if (l < 0)
		l = 0;
	if (r > limit)
		r = limit;
	if (l > limit - 1)
		l = limit - 1;
	if (r < l + 1)
		r = l + 1;
	*lo = (JDIMENSION)l;
	*hi = (JDIMENSION)r;
}

/* Rows handed to one jpeg_read_scanlines call: more than libjpeg's output
 * pass makes at once (max_v_samp_factor * DCT size), so no call is short. */
#define REGION_ROWS 16

/*
 * One attempt at a region decode. With crop set, columns outside the
 * region are not run through the inverse DCT (jpeg_crop_scanline); when
 * that call itself fails, *crop_failed is set and the caller retries at
 * full width.
 */
static int
region_run(const uint8_t *data, size_t size, uint64_t max_pixels,
    struct sk__jpeg_region *r, uint8_t **buf, size_t *cap, int crop,
    volatile int *crop_failed, struct sk_error *err)
{
	struct jpeg_decompress_struct cinfo;
	struct jerr e;
	volatile int rc = 0, in_crop = 0;
	JDIMENSION x0, x1, y0, y1, xoff, width, y, n, i, got;
	JSAMPROW rows[REGION_ROWS];
	uint8_t *p, *cmyk_row;
	size_t stride, need;
	double sx, sy, sw, sh;
	int w, h, d, cmyk;

	jerr_init(&cinfo, &e, 1);
	if (setjmp(e.jmp)) {
		if (in_crop && crop_failed != NULL) {
			*crop_failed = 1;
			rc = SK_EDECODE;
		} else
			rc = sk_error_set(err, SK_EDECODE, "JPEG: %s", e.msg);
		goto out;
	}
	/* The full image's size is checked: the region may be small, but
	 * libjpeg's own buffers follow the full width. */
	if ((rc = jpeg_begin(&cinfo, data, size, max_pixels, &w, &h, &cmyk,
	    err)) != 0)
		goto out;
	d = region_denom(&r->box, r->min_w, r->min_h);
	cinfo.scale_num = 1;
	cinfo.scale_denom = (unsigned int)d;
	jpeg_start_decompress(&cinfo);
	if ((rc = jpeg_check_components(&cinfo, cmyk, err)) != 0)
		goto out;

	/* At 1/d, scaled pixel i covers source pixels [i*d, (i+1)*d): each
	 * 8x8 block becomes (8/d)x(8/d). */
	sx = r->box.x / d;
	sy = r->box.y / d;
	sw = r->box.w / d;
	sh = r->box.h / d;
	region_span(sx, sx + sw, region_margin(sw, r->min_w),
	    cinfo.output_width, &x0, &x1);
	region_span(sy, sy + sh, region_margin(sh, r->min_h),
	    cinfo.output_height, &y0, &y1);

	xoff = 0;
	width = cinfo.output_width;
	if (crop && x1 - x0 < cinfo.output_width) {
		/* libjpeg-turbo moves xoff down to an iMCU boundary and
		 * widens width to match; both come back changed. */
		xoff = x0;
		width = x1 - x0;
		in_crop = 1;
		jpeg_crop_scanline(&cinfo, &xoff, &width);
		in_crop = 0;
	}

	stride = (size_t)width * 3;
	need = stride * (y1 - y0) + (cmyk ? (size_t)width * 4 : 0);
	if (need > *cap) {
		if ((p = realloc(*buf, need)) == NULL) {
			rc = sk_error_set(err, SK_ENOMEM, "JPEG: out of memory "
			    "for a %u x %u region", width, y1 - y0);
			goto out;
		}
		*buf = p;
		*cap = need;
	}
	cmyk_row = *buf + stride * (y1 - y0);

	/* Rows above still go through entropy decoding (libjpeg has no
	 * index), but not through the inverse DCT and colour conversion. */
	if (y0 > 0 && jpeg_skip_scanlines(&cinfo, y0) != y0) {
		rc = sk_error_set(err, SK_EDECODE, "JPEG: cannot skip to row "
		    "%u", y0);
		goto out;
	}
	while ((y = cinfo.output_scanline) < y1) {
		if (cmyk) {
			rows[0] = cmyk_row;
			got = jpeg_read_scanlines(&cinfo, rows, 1);
			if (got == 1)
				cmyk_to_rgb(cmyk_row, *buf + (y - y0) * stride,
				    (int)width, cinfo.saw_Adobe_marker);
		} else {
			n = y1 - y < REGION_ROWS ? y1 - y : REGION_ROWS;
			for (i = 0; i < n; i++)
				rows[i] = *buf + (y - y0 + i) * stride;
			got = jpeg_read_scanlines(&cinfo, rows, n);
		}
		if (got == 0) {
			/* Only a suspending source stops short, and
			 * jpeg_mem_src never suspends. */
			rc = sk_error_set(err, SK_EDECODE, "JPEG: no data at "
			    "row %u", y);
			goto out;
		}
	}
	/*
	 * The rows below are not needed: do not even entropy-decode them.
	 * Damage down there goes unnoticed, the price of the speed; the
	 * pixels this sample uses were all checked. A region that reaches
	 * the bottom has had all the entropy data decoded anyway, so finish
	 * as a full decode does: that also reads up to the end-of-image
	 * marker, and a desynchronised scan, which can decode to garbage
	 * without one bad code, shows as extraneous or missing data there.
	 */
	if (y1 == cinfo.output_height)
		jpeg_finish_decompress(&cinfo);
	else
		jpeg_abort_decompress(&cinfo);

	r->src_w = w;
	r->src_h = h;
	r->scale_denom = d;
	r->out_w = (int)width;
	r->out_h = (int)(y1 - y0);
	r->rbox.x = sx - xoff;
	r->rbox.y = sy - y0;
	r->rbox.w = sw;
	r->rbox.h = sh;
out:
	jpeg_destroy_decompress(&cinfo);
	return rc;
}

int
sk__jpeg_decode_region(const void *data, size_t size, uint64_t max_pixels,
    struct sk__jpeg_region *r, uint8_t **buf, size_t *cap,
    struct sk_error *err)
{
	volatile int crop_failed = 0;
	int rc;

	if (data == NULL || r == NULL || buf == NULL || cap == NULL)
		return sk_error_set(err, SK_EINVAL, "no image data");
	if (sniff(data, size) != SK_IMAGE_JPEG)
		return sk_error_set(err, SK_EDECODE, "not a JPEG image");
	if (!(r->box.w > 0 && r->box.h > 0))
		return sk_error_set(err, SK_EINVAL, "empty crop box");
	rc = region_run(data, size, max_pixels, r, buf, cap, 1, &crop_failed,
	    err);
	if (rc != 0 && crop_failed) {
		sk_log(SK_LOG_DEBUG, "JPEG: jpeg_crop_scanline failed; "
		    "decoding full width");
		rc = region_run(data, size, max_pixels, r, buf, cap, 0, NULL,
		    err);
	}
	return rc;
}
