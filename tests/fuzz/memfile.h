/*
 * memfile.h - what the fuzz targets share: each input becomes the contents
 * of an in-memory file (a memfd, rewritten for each input) that the code
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

#define MEMFILE_SLOTS	2

/* Put size bytes of data in the process's memfd number slot (a target
 * that reads two files has two); its path, under a folder
 * (/proc/self/fd), so relative names resolve against it. */
static const char *
memfile_put(int slot, const uint8_t *data, size_t size)
{
	static int fd[MEMFILE_SLOTS] = { -1, -1 };
	static char path[MEMFILE_SLOTS][64];
	size_t off = 0;
	ssize_t n;

	if (slot < 0 || slot >= MEMFILE_SLOTS)
		abort();
	if (fd[slot] < 0) {
		if ((fd[slot] = memfd_create("fuzz", MFD_CLOEXEC)) < 0) {
			perror("memfd_create");
			abort();
		}
		snprintf(path[slot], sizeof path[slot], "/proc/self/fd/%d",
		    fd[slot]);
	}
	if (ftruncate(fd[slot], 0) != 0)
		abort();
	while (off < size) {
		if ((n = pwrite(fd[slot], data + off, size - off,
		    (off_t)off)) <= 0)
			abort();
		off += (size_t)n;
	}
	return path[slot];
}

/* The one file of a target that reads one. */
static inline const char *
memfile_load(const uint8_t *data, size_t size)
{
	return memfile_put(0, data, size);
}

#endif /* MEMFILE_H */
