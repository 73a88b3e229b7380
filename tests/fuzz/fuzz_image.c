/*
 * fuzz_image.c - a libFuzzer target for the loader's decode-and-augment
 * step: each input is an encoded image (JPEG or PNG, or anything else)
 * taken through random-resized-crop, center and no crop, to u8 and f32,
 * as a worker would. Nothing may crash or read out of bounds; errors must
 * come back as codes. Built by ./configure --enable-fuzzing CC=clang.
 *
 * Seeds: tests/fuzz/seeds.sh DIR image writes small JPEGs and PNGs.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"
#include "loader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const enum sk_crop crops[] = { SK_CROP_RANDOM_RESIZED,
	    SK_CROP_CENTER, SK_CROP_NONE };
	struct sk__aug_scratch s;
	struct sk__aug_config c;
	struct sk_sample_aug aug;
	struct sk_error err;
	static float out[32 * 32 * 3];
	size_t i;

	memset(&c, 0, sizeof c);
	c.size = 32;
	c.scale[0] = 0.08;
	c.scale[1] = 1.0;
	c.ratio[0] = 0.75;
	c.ratio[1] = 4.0 / 3.0;
	c.resize = 37;
	c.flip = 1;
	c.mean[0] = c.mean[1] = c.mean[2] = 0.5f;
	c.std[0] = c.std[1] = c.std[2] = 0.25f;
	/* Keep bombs cheap: the limit is what the test is about. */
	c.max_pixels = 4u << 20;
	memset(&s, 0, sizeof s);
	for (i = 0; i < 3; i++) {
		c.crop = crops[i];
		c.dtype = i == 1 ? SK_DTYPE_F32 : SK_DTYPE_U8;
		c.layout = i == 1 ? SK_LAYOUT_NCHW : SK_LAYOUT_NHWC;
		(void)sk__augment(&c, &s, 0x9e3779b97f4a7c15ULL * (i + 1), data,
		    size, out, &aug, &err);
	}
	sk__aug_scratch_free(&s);
	return 0;
}
