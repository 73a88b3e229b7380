/*
 * test_cli.c - the tools' command-line layer (lib/cli): sizes, durations,
 * numbers, lists and choices parse one way; the launcher's environment and
 * the CPUs per rank; the --json writer's layout and escaping.
 */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "cli.h"

#define MAXU64 18446744073709551615ULL

static uint64_t
size_ok(int line, const char *s)
{
	char err[256];
	uint64_t v = 0;

	if (cli_parse_size(s, 0, MAXU64, &v, err, sizeof err) != 0)
		t_fail(__FILE__, line, "size '%s' refused: %s", s, err);
	return v;
}

static void
size_bad(int line, const char *s, uint64_t min, uint64_t max)
{
	char err[256];
	uint64_t v = 0;

	if (cli_parse_size(s, min, max, &v, err, sizeof err) == 0)
		t_fail(__FILE__, line, "size '%s' accepted as %llu", s,
		    (unsigned long long)v);
}

TEST(cli_sizes)
{
	CHECK(size_ok(__LINE__, "4096") == 4096);
	CHECK(size_ok(__LINE__, "64M") == 64ULL << 20);
	CHECK(size_ok(__LINE__, "64MB") == 64ULL << 20);
	CHECK(size_ok(__LINE__, "64MiB") == 64ULL << 20);
	CHECK(size_ok(__LINE__, "64mib") == 64ULL << 20);
	CHECK(size_ok(__LINE__, "64m") == 64ULL << 20);
	CHECK(size_ok(__LINE__, "1.5G") == 1610612736ULL);
	CHECK(size_ok(__LINE__, "2T") == 2ULL << 40);
	CHECK(size_ok(__LINE__, "1K") == 1024);
	CHECK(size_ok(__LINE__, ".5K") == 512);
	CHECK(size_ok(__LINE__, "0.3K") == 307);	/* rounded down */
	CHECK(size_ok(__LINE__, "100B") == 100);
	size_bad(__LINE__, "", 0, MAXU64);
	size_bad(__LINE__, "M", 0, MAXU64);
	size_bad(__LINE__, "12X", 0, MAXU64);
	size_bad(__LINE__, "12Mi", 0, MAXU64);
	size_bad(__LINE__, "12MBs", 0, MAXU64);
	size_bad(__LINE__, "-1", 0, MAXU64);
	size_bad(__LINE__, "+1", 0, MAXU64);
	size_bad(__LINE__, "1e3", 0, MAXU64);
	size_bad(__LINE__, "0x10", 0, MAXU64);
	size_bad(__LINE__, "inf", 0, MAXU64);
	size_bad(__LINE__, "nan", 0, MAXU64);
	size_bad(__LINE__, " 1M", 0, MAXU64);
	size_bad(__LINE__, "1 M", 0, MAXU64);
	size_bad(__LINE__, "0", 1, 100);
	size_bad(__LINE__, "1K", 1, 1000);
	size_bad(__LINE__, "99999999999T", 0, MAXU64);
}

TEST(cli_size_error_names_the_range)
{
	char err[256];
	uint64_t v;

	CHECK(cli_parse_size("2G", 1, 1ULL << 30, &v, err, sizeof err) != 0);
	CHECK_CONTAINS(err, "1 to 1G");
	CHECK(cli_parse_size("12Q", 1, 1ULL << 30, &v, err, sizeof err) != 0);
	CHECK_CONTAINS(err, "64M");
	CHECK_CONTAINS(err, "powers of 1024");
}

TEST(cli_durations)
{
	char err[256];
	double d;

	CHECK(cli_parse_duration("30", 0, 1e9, &d, err, sizeof err) == 0 &&
	    d == 30);
	CHECK(cli_parse_duration("30s", 0, 1e9, &d, err, sizeof err) == 0 &&
	    d == 30);
	CHECK(cli_parse_duration("250ms", 0, 1e9, &d, err, sizeof err) == 0 &&
	    fabs(d - 0.25) < 1e-12);
	CHECK(cli_parse_duration("5m", 0, 1e9, &d, err, sizeof err) == 0 &&
	    d == 300);
	CHECK(cli_parse_duration("1.5h", 0, 1e9, &d, err, sizeof err) == 0 &&
	    d == 5400);
	CHECK(cli_parse_duration("5x", 0, 1e9, &d, err, sizeof err) != 0);
	CHECK(cli_parse_duration("-1s", 0, 1e9, &d, err, sizeof err) != 0);
	CHECK(cli_parse_duration("s", 0, 1e9, &d, err, sizeof err) != 0);
	CHECK(cli_parse_duration("2h", 0, 3600, &d, err, sizeof err) != 0);
	CHECK_CONTAINS(err, "3600s");
}

TEST(cli_numbers_lists_choices)
{
	static const char *const c[] = { "drop", "keep", NULL };
	char err[256];
	long long i;
	uint64_t u;
	double r, l[3];
	int k;

	CHECK(cli_parse_int("42", 1, 100, &i, err, sizeof err) == 0 &&
	    i == 42);
	CHECK(cli_parse_int("0", 1, 100, &i, err, sizeof err) != 0);
	CHECK_CONTAINS(err, "from 1 to 100");
	CHECK(cli_parse_int("4x", 1, 100, &i, err, sizeof err) != 0);
	CHECK(cli_parse_int("", 1, 100, &i, err, sizeof err) != 0);
	CHECK(cli_parse_int("99999999999999999999", 0, 100, &i, err,
	    sizeof err) != 0);
	CHECK(cli_parse_uint64("18446744073709551615", &u, err,
	    sizeof err) == 0 && u == MAXU64);
	CHECK(cli_parse_uint64("18446744073709551616", &u, err,
	    sizeof err) != 0);
	CHECK(cli_parse_uint64("-1", &u, err, sizeof err) != 0);
	CHECK(cli_parse_uint64(" 1", &u, err, sizeof err) != 0);
	CHECK(cli_parse_real("0.5", 0, 1, &r, err, sizeof err) == 0 &&
	    r == 0.5);
	CHECK(cli_parse_real("nan", 0, 1, &r, err, sizeof err) != 0);
	CHECK(cli_parse_real("2", 0, 1, &r, err, sizeof err) != 0);
	CHECK(cli_parse_list("0.1,0.2,0.3", 3, l, err, sizeof err) == 0 &&
	    l[2] == 0.3);
	CHECK(cli_parse_list("0.1,0.2", 3, l, err, sizeof err) != 0);
	CHECK(cli_parse_list("0.1,0.2,0.3,", 3, l, err, sizeof err) != 0);
	CHECK(cli_parse_list("0.1,,0.3", 3, l, err, sizeof err) != 0);
	CHECK(cli_parse_choice("keep", c, &k, err, sizeof err) == 0 && k == 1);
	CHECK(cli_parse_choice("kee", c, &k, err, sizeof err) != 0);
	CHECK_CONTAINS(err, "drop or keep");
}

static void
clear_launchers(void)
{
	static const char *const v[] = { "OMPI_COMM_WORLD_RANK",
	    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_RANK",
	    "PMIX_SIZE", "PMIX_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE",
	    "MPI_LOCALNRANKS", "SLURM_PROCID", "SLURM_NTASKS",
	    "SLURM_NTASKS_PER_NODE", "SLURM_JOB_NUM_NODES", NULL };
	int i;

	for (i = 0; v[i] != NULL; i++)
		unsetenv(v[i]);
}

TEST(cli_launcher_env)
{
	char err[256];
	int r, w, l;

	clear_launchers();
	CHECK(cli_launcher(&r, &w, &l, err, sizeof err) == 0);
	CHECK(r == 0 && w == 1 && l == 1);
	setenv("OMPI_COMM_WORLD_RANK", "3", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
	setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
	CHECK(cli_launcher(&r, &w, &l, err, sizeof err) == 1);
	CHECK(r == 3 && w == 8 && l == 4);
	setenv("OMPI_COMM_WORLD_RANK", "8", 1);
	CHECK(cli_launcher(&r, &w, &l, err, sizeof err) == -1);
	CHECK_CONTAINS(err, "not below");
	setenv("OMPI_COMM_WORLD_RANK", "x", 1);
	CHECK(cli_launcher(&r, &w, &l, err, sizeof err) == -1);
	CHECK_CONTAINS(err, "OMPI_COMM_WORLD_RANK");
	clear_launchers();
	/* srun without --ntasks-per-node: tasks over nodes, rounded up */
	setenv("SLURM_PROCID", "1", 1);
	setenv("SLURM_NTASKS", "6", 1);
	setenv("SLURM_JOB_NUM_NODES", "2", 1);
	CHECK(cli_launcher(&r, &w, &l, err, sizeof err) == 1);
	CHECK(r == 1 && w == 6 && l == 3);
	clear_launchers();
}

TEST(cli_cpus_per_rank_shares_the_node)
{
	cpu_set_t set, one;
	int n;

	clear_launchers();
	CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
	n = CPU_COUNT(&set);
	CHECK(cli_cpus_per_rank() == n);
	setenv("OMPI_COMM_WORLD_RANK", "0", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
	setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
	if (n == sysconf(_SC_NPROCESSORS_ONLN))
		CHECK(cli_cpus_per_rank() == (n / 2 > 0 ? n / 2 : 1));
	/* Bound to one CPU by the launcher: that CPU, not a share of it. */
	if (n > 1) {
		CPU_ZERO(&one);
		for (n = 0; !CPU_ISSET(n, &set); n++)
			;
		CPU_SET(n, &one);
		CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
		CHECK(cli_cpus_per_rank() == 1);
	}
	clear_launchers();
}

TEST(cli_json_layout)
{
	struct cli_json *j;
	uint64_t skips[2] = { 3, 0 };
	const char *reasons[2] = { "decode", "too_big" };
	char *text;
	size_t len;

	cli_init("shardtest");
	j = cli_json_open(t_path("out.json"));
	cli_json_object(j, "config");
	cli_json_str(j, "source", "a\"b\\c\n\x01");
	cli_json_uint(j, "seed", MAXU64);
	cli_json_null(j, "limit_batches");
	cli_json_end(j);
	cli_json_object(j, "result");
	cli_json_real(j, "wall_seconds", 0.1);
	cli_json_real(j, "images_per_second", NAN);
	cli_json_skips(j, skips, reasons, 2);
	cli_json_array(j, "epochs");
	cli_json_object(j, NULL);
	cli_json_int(j, "epoch", -1);
	cli_json_end(j);
	cli_json_end(j);
	cli_json_close(j);
	text = t_read_file(t_path("out.json"), &len);
	CHECK(strncmp(text, "{\n  \"schema\": 1,\n  \"tool\": \"shardtest\",\n"
	    "  \"version\": ", 45) == 0);
	CHECK_CONTAINS(text, "\"source\": \"a\\\"b\\\\c\\u000a\\u0001\"");
	CHECK_CONTAINS(text, "\"seed\": 18446744073709551615");
	CHECK_CONTAINS(text, "\"limit_batches\": null");
	CHECK_CONTAINS(text, "\"wall_seconds\": 0.1,");
	CHECK_CONTAINS(text, "\"images_per_second\": null");
	CHECK_CONTAINS(text, "\"skipped\": 3,");
	CHECK_CONTAINS(text, "\"too_big\": 0");
	CHECK_CONTAINS(text, "\"epoch\": -1");
	CHECK(text[len - 2] == '}' && text[len - 1] == '\n');
	free(text);
	/* nothing but the file: the temporary name is gone */
	CHECK(access(t_path("out.json"), R_OK) == 0);
}
