/*
 * fuzz_checkpoint.c - a libFuzzer target for shardtrain's checkpoint
 * reader (train/ckpt_file.c): each input becomes the contents of an
 * in-memory file that is opened by its path, as a checkpoint on disk
 * would be, checked against a run's model and settings and read through.
 * Inputs of even length get their trailing checksum fixed first, so the
 * fuzzer reaches what lies behind it. Built by ./configure
 * --enable-fuzzing CC=clang.
 *
 * Seeds: tests/fuzz/seeds.sh DIR checkpoint (real checkpoints of tiny
 * runs), then: tests/fuzz/fuzz_checkpoint -max_len=65536 corpus/ DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_file.h"
#include "memfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *path;	/* the input, as a file */

static void
load(const uint8_t *data, size_t size)
{
	uint8_t *copy = NULL;

	if (size % 2 == 0 && size >= 8) {
		/* FNV-1a 64 of all but the last 8 bytes, as the writer puts */
		uint64_t h = 0xcbf29ce484222325ULL;
		size_t i;

		if ((copy = malloc(size)) == NULL)
			abort();
		memcpy(copy, data, size);
		for (i = 0; i < size - 8; i++)
			h = (h ^ copy[i]) * 0x100000001b3ULL;
		memcpy(copy + size - 8, &h, 8);
		data = copy;
	}
	path = memfile_load(data, size);
	free(copy);
}

/* What the seeds' tiny runs record (tests/fuzz/seeds.sh checkpoint). */
static void
settings(struct ckpt_settings *s, int batch)
{
	ckpt_settings_init(s);
	ckpt_setting(s, "--batch", "%d", batch);
	ckpt_setting(s, "--seed", "%d", 0);
	ckpt_setting(s, "--image-size", "%d", 16);
	ckpt_setting(s, "--data", "%s", "synthetic");
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct ckpt_settings want, other;
	static float buf[4096];
	struct ckpt_file f;
	char err[8192], model[sizeof f.hd.model + 1];
	uint64_t floats, off, n;

	load(data, size);
	settings(&want, 8);
	settings(&other, 16);
	err[0] = '\0';
	if (ckpt_file_open(&f, path, err, sizeof err) != 0) {
		/* a refusal always says which file and why */
		if (strstr(err, path) == NULL)
			abort();
		ckpt_file_close(&f);
		return 0;
	}
	/* accepted: the header describes exactly the file's bytes */
	floats = f.hd.nflat * ((uint64_t)f.hd.nstate + 1) + f.hd.nbuf;
	if (f.data_off + floats * sizeof(float) + 8 != f.size ||
	    f.data_off != CKPT_MAGIC_LEN + sizeof f.hd + f.hd.settings_len ||
	    strlen(f.settings) != f.hd.settings_len)
		abort();
	/* checked against a run of its own sizes, then of others */
	(void)ckpt_file_check(&f, "vit-ti4", f.hd.nflat, f.hd.nbuf,
	    f.hd.nstate, &want, err, sizeof err);
	memcpy(model, f.hd.model, sizeof f.hd.model);
	model[sizeof f.hd.model] = '\0';
	(void)ckpt_file_check(&f, model, f.hd.nflat, f.hd.nbuf,
	    f.hd.nstate, &other, err, sizeof err);
	if (ckpt_file_check(&f, "vit-ti4", f.hd.nflat + 1, f.hd.nbuf,
	    f.hd.nstate, &want, err, sizeof err) == 0)
		abort();
	/* every float can be read, and nothing past them */
	for (off = 0; off < floats * sizeof(float); off += n) {
		n = floats * sizeof(float) - off;
		if (n > sizeof buf)
			n = sizeof buf;
		if (ckpt_file_read(&f, buf, (size_t)n, off, err,
		    sizeof err) != 0)
			abort();
	}
	if (ckpt_file_read(&f, buf, 1, floats * sizeof(float), err,
	    sizeof err) == 0)
		abort();
	ckpt_file_close(&f);
	return 0;
}
