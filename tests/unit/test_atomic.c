/*
 * test_atomic.c - the one file writer: whole or nothing, never through a
 * symlink or file planted beside the target, nothing left on failure, and
 * the shard writer and the manifest writer going through it.
 */
#include <sys/stat.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* Entries of the test's folder whose name ends in ".part". */
static int
nparts(void)
{
	struct dirent *d;
	DIR *dp;
	size_t n;
	int count = 0;

	CHECK((dp = opendir(t_tmpdir())) != NULL);
	while ((d = readdir(dp)) != NULL) {
		n = strlen(d->d_name);
		if (n > 5 && strcmp(d->d_name + n - 5, ".part") == 0)
			count++;
	}
	closedir(dp);
	return count;
}

static char *
slurp(const char *name)
{
	size_t len;
	char *p = t_read_file(name, &len), *s = malloc(len + 1);

	CHECK(s != NULL);
	memcpy(s, p, len);
	s[len] = '\0';
	free(p);
	return s;
}

TEST(atomic_write_and_replace)
{
	struct sk_error err = { 0 };
	struct sk_atomic a;
	struct stat st;
	char *s;
	FILE *f;

	CHECK_OK(sk_atomic_write_file(t_path("x.txt"), "one", 3, 0, &err),
	    &err);
	s = slurp("x.txt");
	CHECK_EQ_STR(s, "one");
	free(s);
	/* While open, the target keeps its old bytes. */
	CHECK_OK(sk_atomic_open(&a, t_path("x.txt"), 0, 0600, &err), &err);
	CHECK((f = sk_atomic_stdio(&a, &err)) != NULL);
	fputs("two", f);
	s = slurp("x.txt");
	CHECK_EQ_STR(s, "one");
	free(s);
	CHECK_EQ_INT(nparts(), 1);
	CHECK_OK(sk_atomic_commit(&a, &err), &err);
	s = slurp("x.txt");
	CHECK_EQ_STR(s, "two");
	free(s);
	CHECK(stat(t_path("x.txt"), &st) == 0);
	CHECK_EQ_INT(st.st_mode & 0777, 0600);
	CHECK_EQ_INT(nparts(), 0);
}

/* issue 10, case 4: links planted at the target's old temporary name and
 * at the target itself are never written through. */
TEST(atomic_never_writes_through_a_symlink)
{
	struct sk_error err = { 0 };
	struct stat st;
	char *s;

	t_write_file("victim.txt", "precious", 8);
	CHECK(symlink("victim.txt", t_path("out.json.part")) == 0);
	CHECK(symlink("victim.txt", t_path("out.json")) == 0);
	CHECK_OK(sk_atomic_write_file(t_path("out.json"), "new", 3, 0, &err),
	    &err);
	s = slurp("victim.txt");
	CHECK_EQ_STR(s, "precious");
	free(s);
	/* The link at the target was replaced by a file, not followed. */
	CHECK(lstat(t_path("out.json"), &st) == 0);
	CHECK(S_ISREG(st.st_mode));
	s = slurp("out.json");
	CHECK_EQ_STR(s, "new");
	free(s);
	CHECK(lstat(t_path("out.json.part"), &st) == 0 && S_ISLNK(st.st_mode));
}

TEST(atomic_abort_and_failures_leave_nothing)
{
	struct sk_error err = { 0 };
	struct sk_atomic a;
	const char *msg;

	CHECK_OK(sk_atomic_open(&a, t_path("y.bin"), SK_ATOMIC_NOSYNC, 0644,
	    &err), &err);
	CHECK_OK(sk_atomic_write_all(&a, "abc", 3, &err), &err);
	sk_atomic_abort(&a);
	CHECK(access(t_path("y.bin"), F_OK) != 0);
	CHECK_EQ_INT(nparts(), 0);

	msg = CHECK_ERR(sk_atomic_open(&a, t_path("no/such/z.bin"), 0, 0644,
	    &err), SK_ENOENT, &err);
	CHECK_CONTAINS(msg, "no/such/z.bin");
	msg = CHECK_ERR(sk_atomic_open(&a, t_path("dir/"), 0, 0644, &err),
	    SK_EINVAL, &err);
	CHECK_CONTAINS(msg, "not a file name");

	/* Renaming over a folder fails: the temporary file goes. */
	CHECK(mkdir(t_path("d"), 0755) == 0);
	t_write_file("d/keep", "k", 1);
	CHECK_OK(sk_atomic_open(&a, t_path("d"), 0, 0644, &err), &err);
	CHECK(sk_atomic_commit(&a, &err) < 0);
	CHECK_CONTAINS(err.msg, "rename");
	CHECK_EQ_INT(nparts(), 0);
}

/* The shard writer and the manifest writer go through it: a symlink at
 * their old temporary names is left alone. */
TEST(atomic_writers_ignore_planted_part_files)
{
	struct sk_error err = { 0 };
	struct sk_manifest m;
	sk_tar_writer *w;
	char *s;

	t_write_file("victim.txt", "precious", 8);
	CHECK(symlink("victim.txt", t_path("s.tar.part")) == 0);
	CHECK(symlink("victim.txt", t_path("s.json.part")) == 0);
	CHECK_OK(sk_tar_writer_open(&w, t_path("s.tar"), NULL), w);
	CHECK_OK(sk_tar_writer_add(w, "a.cls", "1", 1), w);
	CHECK_OK(sk_tar_writer_close(w, NULL, &err), &err);
	memset(&m, 0, sizeof m);
	CHECK_OK(sk_manifest_add_shard(&m, "s.tar", 1, 2048, ""), &err);
	CHECK_OK(sk_manifest_write(t_path("s.json"), &m, &err), &err);
	sk_manifest_free(&m);
	s = slurp("victim.txt");
	CHECK_EQ_STR(s, "precious");
	free(s);
	CHECK_EQ_INT(nparts(), 2);	/* the two planted links */
}
