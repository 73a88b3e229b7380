/*
 * report.h - the reader of run files behind `shardtrain report`, apart
 * from the command so that tests and the fuzz target
 * (tests/fuzz/fuzz_report.c) can call it on a buffer.
 */
#ifndef SK_TRAIN_REPORT_H
#define SK_TRAIN_REPORT_H

#include <stddef.h>

/* A run file larger than this is refused unread: one shardtrain writes
 * is a few KiB plus ~250 bytes an epoch. */
#define REPORT_MAX_BYTES	(16u << 20)

/*
 * One run's line of the table. Every text field is printable: control
 * characters, C1 controls, bidi overrides and invalid UTF-8 from a file
 * name or a JSON string are shown escaped (\n, \x1b, \u202e). label is
 * the run's name for the plot, cut down to [A-Za-z0-9 ._+=,:()[]-] and
 * '_' for anything else, so gnuplot can only ever read it as data.
 */
struct run_row {
	char run[80];
	char label[48];
	char model[48];
	char strategy[32];
	char ranks[24];
	char source[96];
	char ips[32];
	char epoch[32];
	char wait[24];
	char cost[32];
	char verdict[32];
	double ips_v, wait_v;
};

/* Read a run from buf[0..len) (need not end in a NUL); name is the file
 * the run came from. 0, or -1 with a message naming the file (and the
 * field at fault) in msg, raw: escape it before it reaches a terminal. */
int report_read_run(const char *name, const char *buf, size_t len,
    struct run_row *r, char *msg, size_t msglen);
/* The same on the regular file at path, refused unread when larger than
 * REPORT_MAX_BYTES. */
int report_load_run(const char *path, struct run_row *r, char *msg,
    size_t msglen);
/* s[0..len) escaped for a terminal into dst (a NUL-terminated string of at
 * most n - 1 bytes, cut at a character with "..." when longer). */
void report_escape(char *dst, size_t n, const char *s, size_t len);

#endif
