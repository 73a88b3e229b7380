/*
 * harness.c - the unit-test runner: TAP on stdout, each test in a forked
 * process (its own process group) with a timeout and a fresh temporary
 * directory that is removed afterwards.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define DEFAULT_TIMEOUT 60
#define EXIT_SKIP 77

static struct t_test *tests;
static size_t ntests;

/* Set in the test process only. */
static char tmpdir[PATH_MAX];
static int skip_fd = -1;

/* Parent state the signal handlers may touch. */
static volatile sig_atomic_t child_pid;
static volatile sig_atomic_t timed_out;
static volatile sig_atomic_t interrupted;

void
t_register(struct t_test *t)
{
	t->next = tests;
	tests = t;
	ntests++;
}

/* ------------------------------------------------------------------------ */
/* inside a test                                                            */

const char *
t_tmpdir(void)
{
	return (tmpdir);
}

const char *
t_path(const char *name)
{
	static char buf[8][PATH_MAX];
	static int next;
	char *p = buf[next++ % 8];

	if (snprintf(p, PATH_MAX, "%s/%s", tmpdir, name) >= PATH_MAX)
		t_fail(__FILE__, __LINE__, "path too long: %s", name);
	return (p);
}

/* Print text as TAP comment lines, one "# " per line. */
static void
diag_text(const char *text)
{
	const char *nl;

	do {
		nl = strchr(text, '\n');
		printf("# %.*s\n", nl ? (int)(nl - text) : (int)strlen(text),
		    text);
		text = nl ? nl + 1 : NULL;
	} while (text != NULL && *text != '\0');
	fflush(stdout);
}

void
t_diag(const char *fmt, ...)
{
	char buf[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	diag_text(buf);
}

void
t_fail(const char *file, int line, const char *fmt, ...)
{
	char buf[4096];
	const char *base;
	int n;
	va_list ap;

	base = strrchr(file, '/');
	base = base ? base + 1 : file;
	n = snprintf(buf, sizeof buf, "%s:%d: ", base, line);
	va_start(ap, fmt);
	vsnprintf(buf + n, sizeof buf - n, fmt, ap);
	va_end(ap);
	diag_text(buf);
	exit(1);
}

void
t_skip(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	ssize_t len;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (skip_fd >= 0) {
		len = write(skip_fd, buf, strlen(buf));
		(void)len;
	}
	fflush(stdout);
	exit(EXIT_SKIP);
}

void
t_write_file_at(const char *file, int line, const char *path,
    const void *data, size_t len)
{
	FILE *f;

	if ((f = fopen(path, "wb")) == NULL)
		t_fail(file, line, "%s: %s", path, strerror(errno));
	if (len > 0 && fwrite(data, 1, len, f) != len)
		t_fail(file, line, "%s: write: %s", path,
		    strerror(errno));
	if (fclose(f) != 0)
		t_fail(file, line, "%s: close: %s", path,
		    strerror(errno));
}

void *
t_read_file_at(const char *file, int line, const char *path, size_t *len)
{
	FILE *f;
	char *buf = NULL;
	size_t n = 0, cap = 0, got;

	if ((f = fopen(path, "rb")) == NULL)
		t_fail(file, line, "%s: %s", path, strerror(errno));
	for (;;) {
		if (cap - n < 4096) {
			cap = cap ? cap * 2 : 65536;
			if ((buf = realloc(buf, cap + 1)) == NULL)
				t_fail(file, line, "out of memory");
		}
		got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	if (ferror(f))
		t_fail(file, line, "%s: read: %s", path,
		    strerror(errno));
	fclose(f);
	buf[n] = '\0';
	if (len != NULL)
		*len = n;
	return (buf);
}

void
t_system_at(const char *file, int line, const char *fmt, ...)
{
	char cmd[8192];
	int status;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	fflush(stdout);
	status = system(cmd);
	if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		t_fail(file, line, "command failed (status %d): %s",
		    status, cmd);
}

const char *
t_err_msg(const struct sk_error *err)
{
	return (err != NULL ? err->msg : "(no error struct)");
}

/* ------------------------------------------------------------------------ */
/* the runner                                                               */

static void
on_alarm(int sig)
{
	timed_out = 1;
	if (child_pid > 0)
		kill(-(pid_t)child_pid, SIGKILL);
}

static void
on_interrupt(int sig)
{
	interrupted = sig;
	if (child_pid > 0)
		kill(-(pid_t)child_pid, SIGKILL);
}

static const char *
signal_name(int sig)
{
	switch (sig) {
	case SIGABRT:	return ("SIGABRT");
	case SIGALRM:	return ("SIGALRM");
	case SIGBUS:	return ("SIGBUS");
	case SIGFPE:	return ("SIGFPE");
	case SIGHUP:	return ("SIGHUP");
	case SIGILL:	return ("SIGILL");
	case SIGINT:	return ("SIGINT");
	case SIGKILL:	return ("SIGKILL");
	case SIGPIPE:	return ("SIGPIPE");
	case SIGQUIT:	return ("SIGQUIT");
	case SIGSEGV:	return ("SIGSEGV");
	case SIGSYS:	return ("SIGSYS");
	case SIGTERM:	return ("SIGTERM");
	case SIGTRAP:	return ("SIGTRAP");
	case SIGXCPU:	return ("SIGXCPU");
	case SIGXFSZ:	return ("SIGXFSZ");
	default:	return ("signal");
	}
}

static int
rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	if (remove(path) != 0)
		fprintf(stderr, "unit: remove %s: %s\n", path, strerror(errno));
	return (0);
}

static int
cmp_tests(const void *a, const void *b)
{
	const struct t_test *x = *(struct t_test *const *)a;
	const struct t_test *y = *(struct t_test *const *)b;
	int c;

	if ((c = strcmp(x->file, y->file)) != 0)
		return (c);
	return (x->line - y->line);
}

/* The test process: never returns. */
static void
run_child(struct t_test *t, const char *dir, int fd)
{
	setpgid(0, 0);
	signal(SIGALRM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(tmpdir, sizeof tmpdir, "%s", dir);
	skip_fd = fd;
	if (chdir(dir) != 0)
		t_fail(__FILE__, __LINE__, "chdir %s: %s", dir,
		    strerror(errno));
	t->fn();
	fflush(stdout);
	exit(0);
}

/* Run one test and print its TAP line; return 1 if it passed. */
static int
run_one(size_t num, struct t_test *t, unsigned timeout)
{
	char dir[PATH_MAX], reason[512];
	const char *base;
	int fds[2], status, ok = 0;
	ssize_t n;
	pid_t pid, w;

	base = getenv("TMPDIR");
	if (base == NULL || *base == '\0')
		base = "/tmp";
	snprintf(dir, sizeof dir, "%s/sk-unit-XXXXXX", base);
	if (mkdtemp(dir) == NULL) {
		printf("not ok %zu %s # mkdtemp %s: %s\n", num, t->name, dir,
		    strerror(errno));
		return (0);
	}
	if (pipe2(fds, O_CLOEXEC) != 0) {
		printf("not ok %zu %s # pipe: %s\n", num, t->name,
		    strerror(errno));
		rmdir(dir);
		return (0);
	}

	fflush(stdout);
	fflush(stderr);
	timed_out = 0;
	if ((pid = fork()) == -1) {
		printf("not ok %zu %s # fork: %s\n", num, t->name,
		    strerror(errno));
		close(fds[0]);
		close(fds[1]);
		rmdir(dir);
		return (0);
	}
	if (pid == 0) {
		close(fds[0]);
		run_child(t, dir, fds[1]);
	}
	close(fds[1]);
	setpgid(pid, pid);	/* also here, so kill(-pid) works at once */
	child_pid = pid;
	alarm(timeout);
	do
		w = waitpid(pid, &status, 0);
	while (w == -1 && errno == EINTR);
	alarm(0);
	child_pid = 0;
	kill(-pid, SIGKILL);	/* anything the test left running */

	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	n = read(fds[0], reason, sizeof reason - 1);
	reason[n > 0 ? n : 0] = '\0';
	close(fds[0]);

	if (w == -1)
		printf("not ok %zu %s # waitpid: %s\n", num, t->name,
		    strerror(errno));
	else if (timed_out)
		printf("not ok %zu %s # timeout after %u s\n", num, t->name,
		    timeout);
	else if (WIFSIGNALED(status))
		printf("not ok %zu %s # killed by %s (%s)\n", num, t->name,
		    signal_name(WTERMSIG(status)), strsignal(WTERMSIG(status)));
	else if (WEXITSTATUS(status) == 0) {
		printf("ok %zu %s\n", num, t->name);
		ok = 1;
	} else if (WEXITSTATUS(status) == EXIT_SKIP && reason[0] != '\0') {
		printf("ok %zu %s # SKIP %s\n", num, t->name, reason);
		ok = 1;
	} else
		printf("not ok %zu %s # exit status %d\n", num, t->name,
		    WEXITSTATUS(status));
	fflush(stdout);

	if (getenv("SK_TEST_KEEP") != NULL)
		printf("# kept %s\n", dir);
	else
		nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return (ok);
}

int
main(int argc, char **argv)
{
	struct t_test **v, *t;
	struct sigaction sa;
	const char *filter = NULL, *env;
	unsigned timeout = DEFAULT_TIMEOUT;
	size_t i, n = 0, failed = 0;

	if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
		fprintf(stderr, "usage: %s [NAME_SUBSTRING]\n", argv[0]);
		return (2);
	}
	if (argc == 2)
		filter = argv[1];
	if ((env = getenv("SK_TEST_TIMEOUT")) != NULL && atoi(env) > 0)
		timeout = (unsigned)atoi(env);

	if ((v = calloc(ntests + 1, sizeof *v)) == NULL) {
		fprintf(stderr, "unit: out of memory\n");
		return (1);
	}
	for (t = tests; t != NULL; t = t->next) {
		if (filter == NULL || strstr(t->name, filter) != NULL)
			v[n++] = t;
	}
	qsort(v, n, sizeof *v, cmp_tests);

	memset(&sa, 0, sizeof sa);
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = on_alarm;	/* no SA_RESTART: waitpid sees EINTR */
	sigaction(SIGALRM, &sa, NULL);
	sa.sa_handler = on_interrupt;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* If our reader goes away, finish the current test and clean up. */
	signal(SIGPIPE, SIG_IGN);

	if (n == 0)
		printf("1..0 # SKIP no test matches\n");
	else
		printf("1..%zu\n", n);
	for (i = 0; i < n && !interrupted && !ferror(stdout); i++) {
		if (!run_one(i + 1, v[i], timeout))
			failed++;
	}
	if (interrupted)
		printf("# interrupted by %s\n", signal_name(interrupted));
	free(v);
	return (failed > 0 || interrupted || ferror(stdout) ? 1 : 0);
}
