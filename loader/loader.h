/*
 * loader.h - what the files of the loader share and users do not see: the
 * per-sample decode and augment step, cropped JPEG decoding, and the
 * pinned-memory and GPU hooks (real with CUDA, refusals without).
 */
#ifndef SK_LOADER_H
#define SK_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "shardkit.h"

/* ------------------------------------------------------------------------ */
/* per-sample randomness                                                    */

/*
 * DESIGN: a sample's augmentation randomness derives from (seed, epoch,
 * key) only, so it is the same whichever worker draws it and whenever.
 */
uint64_t sk__sample_seed(uint64_t seed, int epoch, const char *key);
/* splitmix64: the next 64 random bits of *state. */
uint64_t sk__rng_next(uint64_t *state);
/* A uniform double in [0, 1) with 53 random bits. */
double sk__rng_uniform(uint64_t *state);

/* ------------------------------------------------------------------------ */
/* crop boxes                                                               */

struct sk__box {
	double x, y, w, h;	/* in source pixels; may be fractional */
};

/*
 * torchvision RandomResizedCrop.get_params: up to 10 tries at a box of
 * area scale[0..1] * W * H and aspect exp(U(log ratio)), placed uniformly;
 * then the whole image cropped to the nearest allowed aspect, centred.
 * Boxes have integer corners, as torchvision's do.
 */
void sk__rrc_box(uint64_t *rng, int w, int h, const double scale[2],
    const double ratio[2], struct sk__box *box);
/*
 * Resize(resize) + CenterCrop(size) as one box on the source: the short
 * side scaled to resize (the long side truncated, as torchvision does),
 * the crop centred with torchvision's rounding. *rw, *rh receive the
 * resized image size, which the resize must use for its weights.
 */
void sk__center_box(int w, int h, int resize, int size, struct sk__box *box,
    int *rw, int *rh);

/* ------------------------------------------------------------------------ */
/* decode and augment                                                       */

/* The options of the augment step, from the loader config. */
struct sk__aug_config {
	int size;		/* output height = width */
	enum sk_crop crop;
	double scale[2], ratio[2];
	int resize;		/* center: the short side */
	int flip;
	enum sk_dtype dtype;
	enum sk_layout layout;
	float mean[3], std[3];
	uint64_t max_pixels;
};

/* A worker's reusable buffers and tables; zero-initialise, then reuse. */
struct sk__aug_scratch {
	uint8_t *pix;		/* decoded pixels */
	size_t pix_cap;
	uint8_t *tmp;		/* after the horizontal pass */
	size_t tmp_cap;
	void *lut;		/* 3 x 256 output values for dtype, mean, std */
	uint64_t high_water;	/* the most bytes these buffers held */
};

/*
 * Decode one encoded image (JPEG or PNG, sniffed) and write the augmented
 * image to out: size*size*3 values of cfg->dtype in cfg->layout (HWC or
 * CHW). The crop and flip draw from rng_seed (sk__sample_seed). aug
 * receives the source size and the box. Returns 0, SK_EDECODE (err says
 * why), SK_ETOOBIG (pixel limit) or SK_ENOMEM.
 *
 * JPEGs are decoded at the smallest DCT scale of 1, 1/2, 1/4, 1/8 that
 * keeps the crop at least size pixels on both sides, and only the rows and
 * (iMCU-aligned) columns of the crop are decoded.
 */
int sk__augment(const struct sk__aug_config *cfg,
    struct sk__aug_scratch *s, uint64_t rng_seed, const void *data,
    size_t len, void *out, struct sk_sample_aug *aug, struct sk_error *err);
void sk__aug_scratch_free(struct sk__aug_scratch *s);

/*
 * The region of a JPEG an augment needs, decoded to 8-bit RGB at a DCT
 * scale (loader/image.c). In: the box in source pixels and the smallest
 * width and height the scaled box may have. Out: pixels of the decoded
 * region (rgb, (out_h, out_w, 3), grown in *buf), the scale denominator,
 * and the box in the region's own coordinates.
 */
struct sk__jpeg_region {
	/* in */
	struct sk__box box;
	int min_w, min_h;
	/* out */
	int src_w, src_h;	/* the full image */
	int scale_denom;	/* 1, 2, 4 or 8 */
	int out_w, out_h;	/* the decoded region */
	struct sk__box rbox;	/* box within the region, scaled */
};

/* One row of Pillow's bilinear horizontal pass in 22-bit fixed point
 * (loader/image.c): out pixels from bounds (out, 2: first, count) and
 * weights k (out, ksize). */
void sk__resample_row_rgb(const uint8_t *row, uint8_t *dst, int out,
    int ksize, const int *bounds, const int32_t *k);

/* Header only: the size of the image. */
int sk__jpeg_size(const void *data, size_t size, int *w, int *h,
    struct sk_error *err);
int sk__jpeg_decode_region(const void *data, size_t size,
    uint64_t max_pixels, struct sk__jpeg_region *r, uint8_t **buf,
    size_t *cap, struct sk_error *err);

/* ------------------------------------------------------------------------ */
/* pinned memory and the GPU (loader/gpu.c; without CUDA: plain memory)     */

/* Host memory for batch slots: cudaHostAlloc when built with CUDA and a
 * device is present, else 64-byte aligned. *pinned says which. */
void *sk__host_alloc(size_t n, int *pinned);
void sk__host_free(void *p, int pinned);

struct sk__gpu;

/*
 * Device mode: nslots device buffers of slot_bytes each and the loader's
 * own stream. With cfg->dtype u8 and NHWC host batches, convert selects a
 * GPU conversion to out_dtype / out_layout with mean and std after the copy.
 * Without CUDA or a device: SK_EUNSUPPORTED with a message.
 */
int sk__gpu_open(struct sk__gpu **out, int device, int nslots,
    size_t host_slot_bytes, int size, int batch, int convert,
    enum sk_dtype out_dtype, enum sk_layout out_layout, const float mean[3],
    const float std[3], struct sk_error *err);
/* Copy n images of slot from host to the device and convert them, all on
 * the loader's stream; record the slot's event. */
int sk__gpu_submit(struct sk__gpu *g, int slot, const void *host, int n,
    void **dev, void **event, struct sk_error *err);
/* Wait until the copy out of slot's host buffer is done, so the slot can be
 * refilled. */
int sk__gpu_wait(struct sk__gpu *g, int slot, struct sk_error *err);
/* Hand slot's device buffer to the caller (*buf; its last submit must be
 * done) and give the slot a new one. */
int sk__gpu_detach(struct sk__gpu *g, int slot, void **buf,
    struct sk_error *err);
/* Free a buffer sk__gpu_detach() handed out (NULL: nothing). */
void sk__gpu_buffer_free(void *buf);
void sk__gpu_close(struct sk__gpu *g);

#endif /* SK_LOADER_H */
