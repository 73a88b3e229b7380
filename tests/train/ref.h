/*
 * ref.h - reads the reference states tests/train/gen_ref.py dumps from
 * PyTorch: a config of key=value lines and named fp32 tensors.
 *
 * File format, integers u32 little-endian:
 *   "SKREF1\n"                    7 bytes of magic
 *   u32 len, len bytes            the config, "key=value\n" lines
 *   then records to the end of the file:
 *   u32 namelen, name bytes       no NUL, 1..255 bytes
 *   u32 ndim (0..8), u32 dims[ndim]
 *   f32 data[prod(dims)]          little-endian, row-major; 1 value if ndim 0
 *
 * The record names are listed at the top of gen_ref.py ("param:NAME",
 * "grad:NAME", "logits", "step3:NAME", ...).
 */
#ifndef SK_TEST_REF_H
#define SK_TEST_REF_H

#include <stddef.h>
#include <stdint.h>

#define REF_MAX_DIMS 8

struct ref_tensor {
	char *name;
	int ndim;
	int dims[REF_MAX_DIMS];
	size_t n;			/* elements: the product of dims */
	float *data;
};

struct ref {
	char *config;			/* the config text, NUL-terminated */
	char **keys, **values;		/* parsed config, nkeys of each */
	int nkeys;
	struct ref_tensor *t;
	size_t nt;
};

/* Load a whole file. Returns NULL with a message in err (path, record and
 * byte offset) if it cannot be read or is not a well-formed reference. */
struct ref *ref_load(const char *path, char *err, size_t errlen);
void ref_free(struct ref *r);

/* The tensor with this name, or NULL. */
const struct ref_tensor *ref_find(const struct ref *r, const char *name);
/* The config value of key, or NULL. */
const char *ref_config(const struct ref *r, const char *key);

#endif /* SK_TEST_REF_H */
