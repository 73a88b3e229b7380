/*
 * memfile.h - what the fuzz targets share: each input becomes the contents
 * of one in-memory file (a memfd, rewritten for each input) that the code
 * under test opens by its path, as a file on disk would be.
 */
#ifndef MEMFILE_H
#define MEMFILE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* memfd_create */
#endif

#include <sys/mman.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Put size bytes of data in the process's memfd; its path, under a folder
 * (/proc/self/fd), so relative names resolve against it. */
static const char *
memfile_load(const uint8_t *data, size_t size)
{
	static int fd = -1;
	static char path[64];
	size_t off = 0;
	ssize_t n;

	if (fd < 0) {
		if ((fd = memfd_create("fuzz", MFD_CLOEXEC)) < 0) {
			perror("memfd_create");
			abort();
		}
		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	}
	if (ftruncate(fd, 0) != 0)
		abort();
	while (off < size) {
		if ((n = pwrite(fd, data + off, size - off, (off_t)off)) <= 0)
			abort();
		off += (size_t)n;
	}
	return path;
}

#endif /* MEMFILE_H */
