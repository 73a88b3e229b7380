/*
 * fuzz_report.c - a libFuzzer target for the reader behind `shardtrain
 * report` (train/report.c, linked from libtrain as tests/train/train is):
 * each input is read as a run file, and then used as the run's file name
 * beside a valid run. Whatever the input, every text the table would show
 * holds no control character and the plot's label only its safe set.
 * Built by ./configure --enable-fuzzing CC=clang.
 *
 * Seeds: tests/fuzz/seeds.sh DIR report writes a few real run files; run
 *	tests/fuzz/fuzz_report -max_len=65536 corpus/ seeds/
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char good_run[] =
    "{\"schema\": 1, \"tool\": \"shardtrain\", "
    "\"config\": {\"model\": \"resnet18\", "
    "\"strategy\": \"ddp\", \"world\": 2, \"source\": \"gs://b/t-{0..9}.tar\"}, "
    "\"result\": {\"images_per_second\": 100.5, \"wall_seconds\": 3, "
    "\"wait_share\": 0.5, \"cost_per_epoch_usd\": 0.25, "
    "\"verdict\": \"balanced\"}, \"epochs\": [{\"wall_seconds\": 3}]}";

/* s ends within its n bytes and shows no control, C1 or bidi control. */
static void
check_shown(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;

	if (memchr(s, '\0', n) == NULL)
		abort();
	for (; *p != '\0'; p++)
		if (*p < 0x20 || *p == 0x7f ||
		    (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) ||
		    (p[0] == 0xe2 && p[1] == 0x80 && p[2] >= 0xaa &&
		    p[2] <= 0xae))
			abort();
}

static void
check_row(const struct run_row *r)
{
	const char *p;

	check_shown(r->run, sizeof r->run);
	check_shown(r->model, sizeof r->model);
	check_shown(r->strategy, sizeof r->strategy);
	check_shown(r->ranks, sizeof r->ranks);
	check_shown(r->source, sizeof r->source);
	check_shown(r->ips, sizeof r->ips);
	check_shown(r->epoch, sizeof r->epoch);
	check_shown(r->wait, sizeof r->wait);
	check_shown(r->cost, sizeof r->cost);
	check_shown(r->verdict, sizeof r->verdict);
	if (memchr(r->label, '\0', sizeof r->label) == NULL)
		abort();
	for (p = r->label; *p != '\0'; p++)
		if (strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
		    "0123456789 ._+=,:()[]-", *p) == NULL)
			abort();
	if (!(r->ips_v >= 0 && r->wait_v >= 0 && r->wait_v <= 1))
		abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct run_row r;
	char msg[512], *name;

	/* The input as a run file. */
	if (report_read_run("fuzz.json", (const char *)data, size, &r, msg,
	    sizeof msg) == 0)
		check_row(&r);
	else if (memchr(msg, '\0', sizeof msg) == NULL ||
	    strstr(msg, "fuzz.json") == NULL)
		abort();		/* every refusal names the file */

	/* The input as the run's file name. */
	if ((name = malloc(size + 1)) == NULL)
		return 0;
	memcpy(name, data, size);
	name[size] = '\0';
	if (report_read_run(name, good_run, strlen(good_run), &r, msg,
	    sizeof msg) != 0)
		abort();
	check_row(&r);
	report_escape(msg, sizeof msg, name, size);
	check_shown(msg, sizeof msg);
	free(name);
	return 0;
}
