/*
 * fuzz_tar.c - a libFuzzer target for the tar reader: each input becomes
 * the contents of an in-memory file that is read through the file source,
 * as a shard on disk would be, once with default flags and once with
 * SK_TAR_ALL_ENTRIES. Built by ./configure --enable-fuzzing CC=clang.
 *
 * Seeds: any small tars make a good start, e.g.
 *	mkdir seeds && cd seeds && printf a > a.txt && printf bb > b.cls &&
 *	tar --format=ustar -cf ustar.tar a.txt b.cls &&
 *	tar --format=gnu -cf gnu.tar a.txt b.cls &&
 *	tar --format=pax --pax-option=comment:=x -cf pax.tar a.txt b.cls
 * and run: tests/fuzz/fuzz_tar -max_len=65536 corpus/ seeds/
 * (the CI script passes such a directory of GNU tar made seeds).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shardkit.h"
#include "memfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *url;	/* the input, as a file */

static void
run(int flags)
{
	static uint8_t buf[65536];
	struct sk_tar_member m;
	sk_source *src;
	sk_tar_reader *r;
	uint64_t got;
	int64_t n;
	int rc;

	if (sk_source_open(&src, url) != 0) {
		sk_source_close(src);
		return;
	}
	if (sk_tar_reader_open(&r, src, flags) != 0) {
		(void)sk_errmsg(r);
		sk_tar_reader_close(r);
		return;
	}
	while ((rc = sk_tar_reader_next(r, &m)) == 1) {
		/* The name is a string and the offsets are in order. */
		if (m.name == NULL || strlen(m.name) > (1u << 20) ||
		    m.data_offset < m.header_offset)
			abort();
		/* Every other member is read to its end, so both reading
		 * and skipping data get exercised. */
		if (m.type != SK_TAR_FILE || (m.data_offset / 512) % 2 == 0)
			continue;
		got = 0;
		while ((n = sk_tar_reader_read(r, buf, sizeof buf)) > 0)
			got += (uint64_t)n;
		/* A member read to a clean end gave exactly its size. */
		if (n == 0 && got != m.size)
			abort();
		if (n < 0)
			break;
	}
	(void)sk_errmsg(r);
	(void)sk_tar_reader_skipped(r);
	sk_tar_reader_close(r);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	url = memfile_load(data, size);
	run(0);
	run(SK_TAR_ALL_ENTRIES);
	return (0);
}
