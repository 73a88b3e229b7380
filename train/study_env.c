/*
 * study_env.c - the environment of shardtrain study: one local root made
 * available over HTTP (nginx), S3 (moto), GCS (gcp-storage-emulator) and a
 * shardfs mount of the HTTP tree, each remote server behind its own
 * linkproxy. It does in C what tests/cli/http-lib.sh, bucket-lib.sh and
 * fuse-lib.sh do in shell: start on first use, reuse, always stop.
 *
 * libshardkit reads its S3 and GCS settings once per process (the first
 * s3:// or gs:// call). The uploads here run in this process with the
 * emulator's own address, so the training runs that should go through the
 * proxy must be child processes, spawned after study_env_apply().
 *
 * With --remote (study_env_remote) no emulator runs: the cells read the
 * user's bucket or server with the user's own settings, which the env saved
 * at study_env_open and puts back for them, and a bucket is filled from
 * this process with those settings. Since libshardkit would keep an
 * emulator's address once read, that fill is refused in a process whose
 * libshardkit has already talked to an emulator of the same scheme.
 */
#include "config.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shardkit.h"

#include "study_env.h"

#ifndef SK_BINDIR
#define SK_BINDIR "/usr/local/bin"
#endif
#ifndef SK_PKGLIBEXECDIR
#define SK_PKGLIBEXECDIR "/usr/local/libexec/shardkit"
#endif

extern char **environ;

#define BUCKET		"shardkit-study"
#define START_S		30	/* a server's port, a proxy's line, a mount */
#define STOP_S		5	/* SIGTERM to SIGKILL */
#define HELPER_S	60	/* bucket creation, fusermount3 */
#define UPLOAD_THREADS	8
#define MAX_PROCS	64

/* Fixed dummy credentials: the stock servers check none. */
#define AWS_KEY		"study"
#define AWS_SECRET	"study"
#define AWS_REGION_ID	"us-east-1"

/*
 * Every process started, for study_env_kill_async(): a slot is written
 * with SIGINT and SIGTERM blocked, then published by raising nprocs; a
 * reaped process's slot goes back to 0 so a recycled pid is never hit.
 */
static volatile pid_t procs[MAX_PROCS];
static volatile sig_atomic_t nprocs;

struct proc {
	pid_t pid;		/* 0: not running */
	int port;		/* where it listens */
	const char *name;	/* its log: DIR/NAME.log */
};

struct study_env {
	char *dir, *root;
	struct study_link link;
	/* programs; NULL: not found */
	char *nginx, *moto, *gcs, *python, *fusermount, *shardfs, *linkproxy;
	int fuse_dev;
	char *boto_missing;	/* checked once; "" when boto3 imports */
	struct proc web, s3, gs, web_px, s3_px, gs_px, fs;
	int s3_filled, gs_filled, mounted;
	char mnt[PATH_MAX];
	char why[256];
	/* the user's values of user_var(i) at study_env_open; NULL: unset */
	char **user;
	/* --remote: NULL when the local servers serve */
	char *remote;		/* normalised, ending in '/' */
	char *remote_shown;	/* the same for messages: no password */
	const char *remote_kind;	/* "http", "s3" or "gs" */
	char remote_scheme[8];	/* "http", "https", "s3" or "gs" */
	int remote_ready;	/* checked, or filled: 1; failed: -1 */
	char *remote_err;	/* the failure, given to every later call */
	char *remote_note;
};

/*
 * Whether this process's libshardkit may have read an emulator's settings
 * for s3:// (0) or gs:// (1): it reads them once per process, at its first
 * request, so a later upload to a real bucket would go to the emulator.
 * Process-wide, as that state is: a closed env leaves it behind.
 */
static int emulator_read[2];

static const char *const CLOUD_VARS[] = {
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
	"AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
	"AWS_ENDPOINT_URL_S3", "SK_S3_ADDRESSING", "AWS_CONFIG_FILE",
	"AWS_SHARED_CREDENTIALS_FILE", "STORAGE_EMULATOR_HOST",
	"GOOGLE_OAUTH_ACCESS_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS",
	"GCE_METADATA_HOST", "SK_GCS_ENDPOINT", NULL
};
static const char *const PROXY_VARS[] = {
	"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
	"all_proxy", NULL
};
static const char *const NO_PROXY_VARS[] = { "no_proxy", "NO_PROXY", NULL };

/* The i-th variable the env may set or unset, NULL past the last: what
 * study_env_open saves of the user's and puts back. */
static const char *
user_var(size_t i)
{
	const char *const *lists[] = { CLOUD_VARS, PROXY_VARS, NO_PROXY_VARS };
	size_t l, k;

	for (l = 0; l < sizeof lists / sizeof lists[0]; l++) {
		for (k = 0; lists[l][k] != NULL; k++)
			if (i-- == 0)
				return lists[l][k];
	}
	return NULL;
}

/* -------------------------------------------------------------------- */
/* Small helpers                                                        */
/* -------------------------------------------------------------------- */

static int
fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
nap(void)
{
	struct timespec ts = { 0, 50 * 1000 * 1000 };

	nanosleep(&ts, NULL);
}

static char *
xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : s;
}

static int
is_exec(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
	    access(path, X_OK) == 0;
}

/* NAME on PATH, as the shell would find it, but only in absolute folders. */
static char *
find_path(const char *name)
{
	const char *p = getenv("PATH"), *end;
	char *f;

	if (p == NULL || *p == '\0')
		p = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
	for (; ; p = end + 1) {
		end = strchr(p, ':');
		if (end == NULL)
			end = p + strlen(p);
		/* Absolute folders only: an empty or relative element would
		 * run what the current folder holds under that name. */
		if (end > p && *p == '/') {
			f = xasprintf("%.*s/%s", (int)(end - p), p, name);
			if (f != NULL && is_exec(f))
				return f;
			free(f);
		}
		if (*end == '\0')
			return NULL;
	}
}

/*
 * shardfs and linkproxy: $VAR; else a build tree within 3 levels above
 * this program (libtool runs build/train/.libs/lt-shardtrain); else where
 * make install puts them (shardfs also on PATH).
 */
static char *
find_ours(const char *var, const char *tree_rel, const char *installed,
    const char *on_path)
{
	char exe[PATH_MAX], *f, *slash;
	const char *v = getenv(var);
	ssize_t n;
	int up;

	if (v != NULL && *v != '\0')
		return is_exec(v) ? strdup(v) : NULL;
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = '\0';
		for (up = 0; up <= 3; up++) {
			if ((slash = strrchr(exe, '/')) == NULL)
				break;
			*slash = '\0';
			if ((f = xasprintf("%s/%s", *exe ? exe : "", tree_rel)) ==
			    NULL)
				break;
			if (is_exec(f))
				return f;
			free(f);
		}
	}
	if (is_exec(installed))
		return strdup(installed);
	return on_path != NULL ? find_path(on_path) : NULL;
}

/* The last lines of a log, on one line, for an error message. */
static const char *
log_tail(const char *dir, const char *name, char *buf, size_t cap)
{
	char path[PATH_MAX], raw[2048], *p, *start;
	ssize_t n;
	size_t i, lines = 0, o = 0;
	off_t size;
	int fd;

	buf[0] = '\0';
	snprintf(path, sizeof path, "%s/%s.log", dir, name);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return buf;
	size = lseek(fd, 0, SEEK_END);
	if (size > (off_t)sizeof raw - 1)
		lseek(fd, size - (off_t)sizeof raw + 1, SEEK_SET);
	else
		lseek(fd, 0, SEEK_SET);
	n = read(fd, raw, sizeof raw - 1);
	close(fd);
	if (n <= 0)
		return buf;
	while (n > 0 && (raw[n - 1] == '\n' || raw[n - 1] == ' '))
		n--;
	raw[n] = '\0';
	/* back to the start of the third line from the end */
	start = raw;
	for (p = raw + n; p > raw; p--)
		if (p[-1] == '\n' && ++lines == 3) {
			start = p;
			break;
		}
	o = (size_t)snprintf(buf, cap, " (%s.log: ", name);
	for (i = 0; start[i] != '\0' && o + 2 < cap; i++) {
		unsigned char c = (unsigned char)start[i];

		buf[o++] = c == '\n' ? '|' : c < 0x20 || c == 0x7f ? '?' :
		    (char)c;
	}
	if (o + 2 <= cap) {
		buf[o++] = ')';
		buf[o] = '\0';
	} else
		buf[cap - 1] = '\0';
	return buf;
}

/* A port nothing listens on now (the server binds it right after). */
static int
free_port(void)
{
	struct sockaddr_in a;
	socklen_t len = sizeof a;
	int fd, port = -1;

	if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static int
port_open(int port)
{
	struct sockaddr_in a;
	int fd, ok;

	if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return 0;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)port);
	ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
	close(fd);
	return ok;
}

/*
 * A path written into nginx.conf inside double quotes: nginx expands '$'
 * there and reads '\' and '"' as escapes, so such paths are refused.
 */
static int
conf_safe(const char *s)
{
	for (; *s != '\0'; s++)
		if (*s == '"' || *s == '\\' || *s == '$' ||
		    (unsigned char)*s < 0x20 || *s == 0x7f)
			return 0;
	return 1;
}

/* -------------------------------------------------------------------- */
/* Processes                                                            */
/* -------------------------------------------------------------------- */

static void
proc_forget(pid_t pid)
{
	int i;

	for (i = 0; i < nprocs; i++)
		if (procs[i] == pid)
			procs[i] = 0;
}

/*
 * argv[0] (a full path) in its own process group, so a terminal's ^C
 * reaches only us and the mount outlives it until we unmount; stdin from
 * /dev/null, stdout to DIR/OUT (NULL: the log), stderr to DIR/NAME.log.
 */
static pid_t
spawn(struct study_env *e, char *const argv[], const char *name,
    const char *out, char *err, size_t errlen)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, def, block, old;
	char logp[PATH_MAX], outp[PATH_MAX];
	pid_t pid = -1;
	int rc, i, slot = -1;

	snprintf(logp, sizeof logp, "%s/%s.log", e->dir, name);
	if (out != NULL)
		snprintf(outp, sizeof outp, "%s/%s", e->dir, out);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, logp,
	    O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (out != NULL)
		posix_spawn_file_actions_addopen(&fa, 1, outp,
		    O_WRONLY | O_CREAT | O_TRUNC, 0644);
	else
		posix_spawn_file_actions_adddup2(&fa, 2, 1);
	posix_spawnattr_init(&at);
	sigemptyset(&none);
	sigemptyset(&def);
	sigaddset(&def, SIGINT);
	sigaddset(&def, SIGTERM);
	sigaddset(&def, SIGHUP);
	sigaddset(&def, SIGPIPE);
	sigaddset(&def, SIGQUIT);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &def);
	posix_spawnattr_setpgroup(&at, 0);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP |
	    POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

	/* No signal between the spawn and the slot that lets it be killed. */
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	for (i = 0; i < nprocs; i++)
		if (procs[i] == 0) {
			slot = i;
			break;
		}
	if (slot < 0 && nprocs < MAX_PROCS)
		slot = nprocs;
	if (slot < 0)
		rc = EAGAIN;
	else
		rc = posix_spawn(&pid, argv[0], &fa, &at, argv, environ);
	if (rc == 0) {
		procs[slot] = pid;
		if (slot == nprocs)
			nprocs = slot + 1;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	if (rc != 0) {
		fail(err, errlen, "cannot start %s: %s", argv[0],
		    slot < 0 ? "too many processes" : strerror(rc));
		return -1;
	}
	return pid;
}

/* pid has exited (and is reaped now)? */
static int
reaped(pid_t pid, int *status)
{
	pid_t r;

	do
		r = waitpid(pid, status, WNOHANG);
	while (r < 0 && errno == EINTR);
	if (r == pid || (r < 0 && errno == ECHILD)) {
		proc_forget(pid);
		return 1;
	}
	return 0;
}

/* Whether p still runs (a dead one is reaped and forgotten). */
static int
alive(struct proc *p)
{
	int st;

	if (p->pid > 0 && reaped(p->pid, &st))
		p->pid = 0;
	return p->pid > 0;
}

/* Run argv to its end (HELPER_S at most); its exit status or -1. */
static int
run_helper(struct study_env *e, char *const argv[], const char *name,
    char *err, size_t errlen)
{
	double until = now_s() + HELPER_S;
	pid_t pid;
	int st = 0;

	if ((pid = spawn(e, argv, name, NULL, err, errlen)) < 0)
		return -1;
	while (!reaped(pid, &st)) {
		if (now_s() > until) {
			kill(-pid, SIGKILL);
			while (!reaped(pid, &st))
				nap();
			fail(err, errlen, "%s took over %d s", argv[0],
			    HELPER_S);
			return -1;
		}
		nap();
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Wait until p listens on its port (START_S), or fail if it exits. */
static int
wait_port(struct study_env *e, struct proc *p, char *err, size_t errlen)
{
	double until = now_s() + START_S;
	char tail[600];
	int st;

	for (;;) {
		if (port_open(p->port))
			return 0;
		if (reaped(p->pid, &st)) {
			p->pid = 0;
			return fail(err, errlen, "%s exited before it listened "
			    "on 127.0.0.1:%d%s", p->name, p->port,
			    log_tail(e->dir, p->name, tail, sizeof tail));
		}
		if (now_s() > until)
			return fail(err, errlen, "%s did not listen on "
			    "127.0.0.1:%d in %d s%s", p->name, p->port, START_S,
			    log_tail(e->dir, p->name, tail, sizeof tail));
		nap();
	}
}

/* SIGTERM to each group, STOP_S for them to go, then SIGKILL; reaped. */
static void
stop_procs(struct proc *const *ps, int n)
{
	double until;
	int i, st, left;

	for (i = 0; i < n; i++)
		if (ps[i]->pid > 0) {
			kill(ps[i]->pid, SIGTERM);
			kill(-ps[i]->pid, SIGTERM);
		}
	until = now_s() + STOP_S;
	for (;;) {
		left = 0;
		for (i = 0; i < n; i++) {
			if (ps[i]->pid <= 0)
				continue;
			/* the leader reaped and its group empty (nginx's
			 * workers are in it) */
			if (reaped(ps[i]->pid, &st) &&
			    kill(-ps[i]->pid, 0) != 0)
				ps[i]->pid = 0;
			else
				left++;
		}
		if (left == 0)
			return;
		if (now_s() > until)
			break;
		nap();
	}
	for (i = 0; i < n; i++) {
		if (ps[i]->pid <= 0)
			continue;
		/* an unreaped pid is still ours, never a recycled one */
		if (!reaped(ps[i]->pid, &st))
			kill(ps[i]->pid, SIGKILL);
		kill(-ps[i]->pid, SIGKILL);
		while (!reaped(ps[i]->pid, &st))
			nap();
		ps[i]->pid = 0;
	}
}

void
study_env_kill_async(void)
{
	int i, n = nprocs, saved = errno;
	pid_t p;

	for (i = 0; i < n && i < MAX_PROCS; i++)
		if ((p = procs[i]) > 0)
			kill(-p, SIGTERM);
	errno = saved;
}

/* -------------------------------------------------------------------- */
/* Servers and proxies                                                  */
/* -------------------------------------------------------------------- */

/* linkproxy in front of up, its "port N" line read from DIR/NAME.port. */
static int
proxy_start(struct study_env *e, struct proc *px, const struct proc *up,
    char *err, size_t errlen)
{
	char upstream[32], stats[PATH_MAX], ttfb[32], crate[32], trate[32];
	char portf[PATH_MAX], outname[64], line[64], tail[600];
	char *argv[16];
	double until;
	FILE *f;
	int st, n;

	if (alive(px))
		return 0;
	if (e->linkproxy == NULL)
		return fail(err, errlen, "linkproxy was not found");
	snprintf(upstream, sizeof upstream, "127.0.0.1:%d", up->port);
	snprintf(stats, sizeof stats, "%s/%s.json", e->dir, px->name);
	snprintf(ttfb, sizeof ttfb, "%.3f", e->link.ttfb_ms);
	snprintf(crate, sizeof crate, "%.0f", e->link.conn_rate);
	snprintf(trate, sizeof trate, "%.0f", e->link.total_rate);
	snprintf(outname, sizeof outname, "%s.port", px->name);
	snprintf(portf, sizeof portf, "%s/%s", e->dir, outname);
	n = 0;
	argv[n++] = e->linkproxy;
	argv[n++] = "--upstream";
	argv[n++] = upstream;
	argv[n++] = "--stats";
	argv[n++] = stats;
	argv[n++] = "--ttfb";
	argv[n++] = ttfb;
	argv[n++] = "--conn-rate";
	argv[n++] = crate;
	argv[n++] = "--total-rate";
	argv[n++] = trate;
	argv[n] = NULL;
	if ((px->pid = spawn(e, argv, px->name, outname, err, errlen)) < 0) {
		px->pid = 0;
		return -1;
	}
	until = now_s() + START_S;
	for (;;) {
		if ((f = fopen(portf, "re")) != NULL) {
			n = fgets(line, sizeof line, f) != NULL &&
			    strchr(line, '\n') != NULL &&
			    sscanf(line, "port %d", &px->port) == 1;
			fclose(f);
			if (n && px->port > 0 && px->port < 65536)
				return 0;
		}
		if (reaped(px->pid, &st)) {
			px->pid = 0;
			return fail(err, errlen, "the link proxy in front of "
			    "%s exited%s", up->name, log_tail(e->dir, px->name,
			    tail, sizeof tail));
		}
		if (now_s() > until)
			return fail(err, errlen, "the link proxy in front of "
			    "%s did not start in %d s%s", up->name, START_S,
			    log_tail(e->dir, px->name, tail, sizeof tail));
		nap();
	}
}

/* The port clients use for server s: its proxy's, or its own. */
static int
front_port(struct study_env *e, struct proc *s, struct proc *px)
{
	return e->link.enabled ? px->port : s->port;
}

/* nginx serving the root, folders as JSON autoindex (http_start). */
static int
nginx_start(struct study_env *e, char *err, size_t errlen)
{
	char d[PATH_MAX], tmp[PATH_MAX], conf[PATH_MAX], elog[PATH_MAX];
	char *argv[8];
	FILE *f;
	int n;

	if (alive(&e->web))
		return 0;
	if (e->nginx == NULL)
		return fail(err, errlen, "nginx is not installed "
		    "(apt-get install nginx)");
	if (!conf_safe(e->root) || !conf_safe(e->dir))
		return fail(err, errlen, "nginx cannot serve %s from %s: a "
		    "path holds '$', '\\', '\"' or a control character",
		    e->root, e->dir);
	if (snprintf(d, sizeof d, "%s/nginx", e->dir) >= (int)sizeof d ||
	    snprintf(conf, sizeof conf, "%s/nginx.conf", d) >=
	    (int)sizeof conf ||
	    snprintf(elog, sizeof elog, "%s/error.log", d) >= (int)sizeof elog ||
	    snprintf(tmp, sizeof tmp, "%s/tmp", d) >= (int)sizeof tmp)
		return fail(err, errlen, "%s: the path is too long", e->dir);
	if ((mkdir(d, 0700) != 0 && errno != EEXIST) ||
	    (mkdir(tmp, 0700) != 0 && errno != EEXIST))
		return fail(err, errlen, "%s: %s", d, strerror(errno));
	if ((e->web.port = free_port()) < 0)
		return fail(err, errlen, "no free port: %s", strerror(errno));
	if ((f = fopen(conf, "we")) == NULL)
		return fail(err, errlen, "%s: %s", conf, strerror(errno));
	fprintf(f,
	    "daemon off;\n"
	    "%s"
	    "worker_processes 2;\n"
	    "pid \"%s/nginx.pid\";\n"
	    "error_log \"%s\";\n"
	    "events { worker_connections 1024; }\n"
	    "http {\n"
	    "\taccess_log off;\n"
	    "\tclient_body_temp_path \"%s/tmp\";\n"
	    "\tproxy_temp_path \"%s/tmp\";\n"
	    "\tfastcgi_temp_path \"%s/tmp\";\n"
	    "\tuwsgi_temp_path \"%s/tmp\";\n"
	    "\tscgi_temp_path \"%s/tmp\";\n"
	    "\tsendfile on;\n"
	    "\tkeepalive_requests 100000;\n"
	    "\ttypes { application/json json; application/x-tar tar; }\n"
	    "\tdefault_type application/octet-stream;\n"
	    "\tserver {\n"
	    "\t\tlisten 127.0.0.1:%d;\n"
	    "\t\troot \"%s\";\n"
	    "\t\tautoindex on;\n"
	    "\t\tautoindex_format json;\n"
	    "\t}\n"
	    "}\n",
	    geteuid() == 0 ? "user root;\n" : "", d, elog, d, d, d, d, d,
	    e->web.port, e->root);
	if (fclose(f) != 0)
		return fail(err, errlen, "%s: %s", conf, strerror(errno));
	n = 0;
	argv[n++] = e->nginx;
	argv[n++] = "-p";
	argv[n++] = d;
	argv[n++] = "-c";
	argv[n++] = conf;
	argv[n++] = "-e";
	argv[n++] = elog;
	argv[n] = NULL;
	if ((e->web.pid = spawn(e, argv, e->web.name, NULL, err, errlen)) < 0) {
		e->web.pid = 0;
		return -1;
	}
	return wait_port(e, &e->web, err, errlen);
}

/* moto_server or gcp-storage-emulator on a free port, waited for. */
static int
bucket_server_start(struct study_env *e, struct proc *p, char *err,
    size_t errlen)
{
	char port[16], *argv[10];
	int n = 0;

	if (alive(p))
		return 0;
	if ((p->port = free_port()) < 0)
		return fail(err, errlen, "no free port: %s", strerror(errno));
	snprintf(port, sizeof port, "%d", p->port);
	if (p == &e->s3) {
		argv[n++] = e->moto;
		argv[n++] = "-H";
		argv[n++] = "127.0.0.1";
		argv[n++] = "-p";
		argv[n++] = port;
	} else {
		argv[n++] = e->gcs;
		argv[n++] = "start";
		argv[n++] = "--host";
		argv[n++] = "127.0.0.1";
		argv[n++] = "--port";
		argv[n++] = port;
		argv[n++] = "--in-memory";
	}
	argv[n] = NULL;
	if ((p->pid = spawn(e, argv, p->name, NULL, err, errlen)) < 0) {
		p->pid = 0;
		return -1;
	}
	return wait_port(e, p, err, errlen);
}

/* -------------------------------------------------------------------- */
/* Client settings                                                      */
/* -------------------------------------------------------------------- */

static void user_free(struct study_env *);

/* The user's settings as study_env_open found them. */
static int
user_save(struct study_env *e)
{
	const char *v;
	size_t i, n = 0;

	while (user_var(n) != NULL)
		n++;
	if ((e->user = calloc(n, sizeof *e->user)) == NULL)
		return -1;
	for (i = 0; i < n; i++)
		if ((v = getenv(user_var(i))) != NULL &&
		    (e->user[i] = strdup(v)) == NULL) {
			/* half a copy would unset what the user has */
			user_free(e);
			return -1;
		}
	return 0;
}

/* Put them back: what the env set for emulators goes, the user's return. */
static void
user_restore(struct study_env *e)
{
	const char *name;
	size_t i;

	if (e->user == NULL)
		return;
	for (i = 0; (name = user_var(i)) != NULL; i++) {
		if (e->user[i] != NULL)
			setenv(name, e->user[i], 1);
		else
			unsetenv(name);
	}
}

static void
user_free(struct study_env *e)
{
	size_t i;

	if (e->user == NULL)
		return;
	for (i = 0; user_var(i) != NULL; i++)
		free(e->user[i]);
	free(e->user);
	e->user = NULL;
}

static void
set_client_env(struct study_env *e, const char *source, int port)
{
	char v[64], f[PATH_MAX];
	int i;

	for (i = 0; PROXY_VARS[i] != NULL; i++)
		unsetenv(PROXY_VARS[i]);
	setenv("no_proxy", "127.0.0.1,localhost", 1);
	setenv("NO_PROXY", "127.0.0.1,localhost", 1);
	for (i = 0; CLOUD_VARS[i] != NULL; i++)
		unsetenv(CLOUD_VARS[i]);
	if (strcmp(source, "s3") == 0) {
		snprintf(v, sizeof v, "http://127.0.0.1:%d", port);
		setenv("AWS_ENDPOINT_URL_S3", v, 1);
		setenv("AWS_ACCESS_KEY_ID", AWS_KEY, 1);
		setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET, 1);
		setenv("AWS_REGION", AWS_REGION_ID, 1);
		/* lib/aws.c: a custom endpoint means path style already;
		 * said here so no profile's addressing_style overrides it */
		setenv("SK_S3_ADDRESSING", "path", 1);
		/* the user's ~/.aws profiles are not the emulator's */
		snprintf(f, sizeof f, "%s/no-aws-config", e->dir);
		setenv("AWS_CONFIG_FILE", f, 1);
		snprintf(f, sizeof f, "%s/no-aws-credentials", e->dir);
		setenv("AWS_SHARED_CREDENTIALS_FILE", f, 1);
	} else if (strcmp(source, "gs") == 0) {
		snprintf(v, sizeof v, "http://127.0.0.1:%d", port);
		setenv("STORAGE_EMULATOR_HOST", v, 1);
	}
}

void
study_env_apply(struct study_env *e, const char *source)
{
	int port = 0;

	/* No emulator to keep the user's settings away from: every cell,
	 * the remote ones above all, runs with them as they were. */
	if (e->remote != NULL) {
		user_restore(e);
		return;
	}
	if (strcmp(source, "s3") == 0)
		port = front_port(e, &e->s3, &e->s3_px);
	else if (strcmp(source, "gs") == 0)
		port = front_port(e, &e->gs, &e->gs_px);
	set_client_env(e, source, port);
}

/* -------------------------------------------------------------------- */
/* Buckets                                                              */
/* -------------------------------------------------------------------- */

static const char S3_BUCKET_PY[] =
"import sys, boto3, botocore.config\n"
"boto3.client('s3', endpoint_url=sys.argv[2], region_name='" AWS_REGION_ID "',\n"
"    aws_access_key_id='" AWS_KEY "', aws_secret_access_key='" AWS_SECRET "',\n"
"    config=botocore.config.Config(s3={'addressing_style': 'path'})\n"
"    ).create_bucket(Bucket=sys.argv[1])\n";

static const char GS_BUCKET_PY[] =
"import json, sys, urllib.request\n"
"req = urllib.request.Request(sys.argv[2] + '/storage/v1/b?project=study',\n"
"    data=json.dumps({'name': sys.argv[1]}).encode(), method='POST',\n"
"    headers={'Content-Type': 'application/json'})\n"
"urllib.request.urlopen(req).read()\n";

/* The root's regular files, relative, never through a link. */
struct walk {
	char **names;
	size_t n, cap;
};

static int
walk_dir(const char *root, const char *rel, const char *skip, struct walk *w,
    char *err, size_t errlen)
{
	char path[PATH_MAX], sub[PATH_MAX], **nn;
	struct dirent *de;
	struct stat st;
	DIR *d;
	int rc = 0;

	snprintf(path, sizeof path, "%s%s%s", root, *rel ? "/" : "", rel);
	if ((d = opendir(path)) == NULL)
		return fail(err, errlen, "%s: %s", path, strerror(errno));
	while (rc == 0 && (de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if ((size_t)snprintf(sub, sizeof sub, "%s%s%s", rel,
		    *rel ? "/" : "", de->d_name) >= sizeof sub) {
			rc = fail(err, errlen, "%s/%s: name too long", path,
			    de->d_name);
			break;
		}
		if (snprintf(path, sizeof path, "%s/%s", root, sub) >=
		    (int)sizeof path) {
			rc = fail(err, errlen, "%s/%s: name too long", root,
			    sub);
			break;
		}
		if (lstat(path, &st) != 0) {
			rc = fail(err, errlen, "%s: %s", path, strerror(errno));
			break;
		}
		/* The one link followed: ROOT/files, which the study makes
		 * to a user's --data tree. */
		if (S_ISLNK(st.st_mode) && *rel == '\0' &&
		    strcmp(de->d_name, "files") == 0 && stat(path, &st) != 0) {
			rc = fail(err, errlen, "%s: %s", path, strerror(errno));
			break;
		}
		if (S_ISDIR(st.st_mode)) {
			/* our own working folder, should it be in the root */
			if (strcmp(path, skip) != 0)
				rc = walk_dir(root, sub, skip, w, err, errlen);
		} else if (S_ISREG(st.st_mode)) {
			if (w->n == w->cap) {
				w->cap = w->cap ? 2 * w->cap : 256;
				if ((nn = realloc(w->names, w->cap *
				    sizeof *nn)) == NULL) {
					rc = fail(err, errlen, "out of memory");
					break;
				}
				w->names = nn;
			}
			if ((w->names[w->n] = strdup(sub)) == NULL)
				rc = fail(err, errlen, "out of memory");
			else
				w->n++;
		}
		/* links, sockets, devices: not data */
	}
	closedir(d);
	return rc;
}

struct upload {
	const char *root, *base;	/* base: the URL of the root, '/' last */
	struct walk *w;
	atomic_size_t next;
	atomic_int failed;
	pthread_mutex_t mu;
	char err[SK_ERRMSG_MAX + 64];
};

static void *
upload_main(void *arg)
{
	struct upload *u = arg;
	struct sk_error se;
	char url[PATH_MAX + 64], path[PATH_MAX];
	size_t i;

	while (!atomic_load(&u->failed) &&
	    (i = atomic_fetch_add(&u->next, 1)) < u->w->n) {
		snprintf(url, sizeof url, "%s%s", u->base, u->w->names[i]);
		snprintf(path, sizeof path, "%s/%s", u->root, u->w->names[i]);
		if (sk_object_put_file(url, path, &se) != 0) {
			pthread_mutex_lock(&u->mu);
			/* the library's message names the URL, as a rule */
			if (!atomic_exchange(&u->failed, 1) &&
			    snprintf(u->err, sizeof u->err, "%s%s%s",
			    strstr(se.msg, url) != NULL ? "" : url,
			    strstr(se.msg, url) != NULL ? "" : ": ",
			    se.msg) < 0)
				u->err[0] = '\0';
			pthread_mutex_unlock(&u->mu);
		}
	}
	return NULL;
}

/* Every name of w, from root to the URL base (UPLOAD_THREADS at once),
 * with the settings this process's libshardkit has or reads now. */
static int
upload_names(const char *root, const char *base, struct walk *w, char *err,
    size_t errlen)
{
	struct upload u;
	pthread_t t[UPLOAD_THREADS];
	int i, nt = 0, rc = 0;

	memset(&u, 0, sizeof u);
	u.root = root;
	u.base = base;
	u.w = w;
	atomic_init(&u.next, 0);
	atomic_init(&u.failed, 0);
	pthread_mutex_init(&u.mu, NULL);
	for (i = 0; i < UPLOAD_THREADS && (size_t)i < w->n; i++)
		if (pthread_create(&t[nt], NULL, upload_main, &u) == 0)
			nt++;
	if (nt == 0 && w->n > 0)
		upload_main(&u);
	for (i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	pthread_mutex_destroy(&u.mu);
	if (atomic_load(&u.failed))
		rc = fail(err, errlen, "%s", u.err);
	return rc;
}

static void
walk_free(struct walk *w)
{
	size_t k;

	for (k = 0; k < w->n; k++)
		free(w->names[k]);
	free(w->names);
	w->names = NULL;
	w->n = w->cap = 0;
}

/*
 * The bucket made (with the python client at the emulator itself) and
 * every file of the root uploaded to it under its relative path, straight
 * to the emulator, not through the proxy.
 */
static int
bucket_fill(struct study_env *e, const char *scheme, struct proc *s,
    char *err, size_t errlen)
{
	struct walk w = { NULL, 0, 0 };
	char ep[64], name[32], base[64], tail[600], msg[SK_ERRMSG_MAX + 64];
	char *argv[8];
	int rc;

	snprintf(ep, sizeof ep, "http://127.0.0.1:%d", s->port);
	snprintf(name, sizeof name, "%s-bucket", scheme);
	argv[0] = e->python;
	argv[1] = "-c";
	argv[2] = (char *)(strcmp(scheme, "s3") == 0 ? S3_BUCKET_PY :
	    GS_BUCKET_PY);
	argv[3] = BUCKET;
	argv[4] = ep;
	argv[5] = NULL;
	if ((rc = run_helper(e, argv, name, err, errlen)) < 0)
		return -1;
	if (rc != 0)
		return fail(err, errlen, "cannot make the bucket " BUCKET
		    " at %s (%s): python3 exited %d%s", ep, s->name, rc,
		    log_tail(e->dir, name, tail, sizeof tail));

	if ((rc = walk_dir(e->root, "", e->dir, &w, err, errlen)) != 0)
		goto out;
	/* From here on this process's libshardkit may hold the emulator's
	 * address for the scheme (see study_env_remote). */
	emulator_read[strcmp(scheme, "s3") == 0 ? 0 : 1] = 1;
	set_client_env(e, scheme, s->port);
	snprintf(base, sizeof base, "%s://" BUCKET "/", scheme);
	if (upload_names(e->root, base, &w, msg, sizeof msg) != 0)
		rc = fail(err, errlen, "upload to %s: %s", s->name, msg);
	/* no client of this process keeps the emulator's own address */
	set_client_env(e, "local", 0);
out:
	walk_free(&w);
	return rc;
}

/* -------------------------------------------------------------------- */
/* --remote                                                             */
/* -------------------------------------------------------------------- */

#define REMOTE_MANIFEST		"shards/study.json"
#define MANIFEST_MAX		((uint64_t)64 << 20)

/* The whole of a small file or object (the manifest), malloc'd; NULL with
 * err on failure; *code: the SK_E* code (SK_ENOENT: none there). */
static char *
read_all(const char *url, const char *shown, size_t *len, int *code,
    char *err, size_t errlen)
{
	sk_source *src = NULL;
	uint64_t size;
	char *buf = NULL;
	size_t got = 0;
	int64_t n = 0;
	int rc;

	*code = 0;
	if ((rc = sk_source_open(&src, url)) != 0 ||
	    (rc = sk_source_size(src, &size)) != 0) {
		*code = rc;
		fail(err, errlen, "%s", src != NULL ? sk_errmsg(src) :
		    "out of memory");
		goto out;
	}
	if (size > MANIFEST_MAX) {
		*code = SK_ETOOBIG;
		fail(err, errlen, "%s: over %llu bytes", shown,
		    (unsigned long long)MANIFEST_MAX);
		goto out;
	}
	if ((buf = malloc((size_t)size + 1)) == NULL) {
		*code = SK_ENOMEM;
		fail(err, errlen, "out of memory");
		goto out;
	}
	while (got < (size_t)size && (n = sk_source_read(src, buf + got,
	    (size_t)size - got)) > 0)
		got += (size_t)n;
	if (got < (size_t)size) {
		*code = n < 0 ? (int)n : SK_EFORMAT;
		fail(err, errlen, "%s", n < 0 ? sk_errmsg(src) :
		    "the object is shorter than its size");
		free(buf);
		buf = NULL;
		goto out;
	}
	buf[got] = '\0';
	*len = got;
out:
	sk_source_close(src);
	return buf;
}

/* Whether the local manifest holds exactly data[0, len). */
static int
same_as_local(struct study_env *e, const char *data, size_t len)
{
	char path[PATH_MAX], *local;
	size_t n;
	int code, same;

	snprintf(path, sizeof path, "%s/" REMOTE_MANIFEST, e->root);
	if ((local = read_all(path, path, &n, &code, NULL, 0)) == NULL)
		return 0;
	same = n == len && memcmp(local, data, len) == 0;
	free(local);
	return same;
}

/*
 * The remote's manifest read (an http(s) server must serve a copy of the
 * root), or the bucket filled from the root: every file but the manifest,
 * then the manifest, so that a bucket holding it is a whole copy and a
 * fill cut short is done again next time. With the user's own settings.
 */
static int
remote_prepare(struct study_env *e, char *err, size_t errlen)
{
	struct walk w = { NULL, 0, 0 };
	struct sk_error se;
	struct stat st;
	char url[PATH_MAX + 64], shown[PATH_MAX + 64], path[PATH_MAX];
	char msg[SK_ERRMSG_MAX + 64], *data = NULL, *last = NULL;
	int code, rc = -1, is_http = strcmp(e->remote_kind, "http") == 0;
	size_t len, k;
	double bytes = 0;

	if (e->remote_ready > 0)
		return 0;
	if (e->remote_ready < 0)
		return fail(err, errlen, "%s", e->remote_err);
	snprintf(url, sizeof url, "%s" REMOTE_MANIFEST, e->remote);
	snprintf(shown, sizeof shown, "%s" REMOTE_MANIFEST, e->remote_shown);
	if (!is_http && emulator_read[strcmp(e->remote_kind, "s3") == 0 ?
	    0 : 1]) {
		fail(err, errlen, "--remote %s: this process has talked to the "
		    "local %s emulator, and libshardkit reads its %s settings "
		    "once per process: nothing is uploaded (run the remote "
		    "study in a process of its own)", e->remote_shown,
		    e->remote_kind, e->remote_kind);
		goto out;
	}
	user_restore(e);

	data = read_all(url, shown, &len, &code, msg, sizeof msg);
	if (data != NULL) {
		if (asprintf(&e->remote_note, "%s %s %s %s's%s",
		    e->remote_shown, is_http ? "serves" : "already holds",
		    same_as_local(e, data, len) ? REMOTE_MANIFEST
		    ", the same as" : "a " REMOTE_MANIFEST " that differs "
		    "from", e->root, is_http ? "" : ": used as it is, nothing "
		    "uploaded") < 0)
			e->remote_note = NULL;
		rc = 0;
		goto out;
	}
	if (is_http) {
		fail(err, errlen, "--remote %s: %s; the server must already "
		    "serve a copy of the study's data: copy %s (files/ and "
		    "shards/) there, its folders listed as nginx JSON "
		    "autoindex", e->remote_shown, msg, e->root);
		goto out;
	}
	if (code != SK_ENOENT) {
		fail(err, errlen, "--remote %s: cannot tell whether it holds "
		    REMOTE_MANIFEST ": %s", e->remote_shown, msg);
		goto out;
	}

	/* An empty PREFIX, or one from a fill cut short: fill it. */
	snprintf(path, sizeof path, "%s/" REMOTE_MANIFEST, e->root);
	errno = 0;
	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
		fail(err, errlen, "%s: %s: the data is not ready", path,
		    errno != 0 ? strerror(errno) : "not a regular file");
		goto out;
	}
	/* what the cells read, and no more: a real bucket's bytes cost */
	if (walk_dir(e->root, "files", e->dir, &w, err, errlen) != 0 ||
	    walk_dir(e->root, "shards", e->dir, &w, err, errlen) != 0)
		goto out;
	for (k = 0; k < w.n; k++) {
		snprintf(path, sizeof path, "%s/%s", e->root, w.names[k]);
		if (stat(path, &st) == 0)
			bytes += (double)st.st_size;
		if (last == NULL && strcmp(w.names[k], REMOTE_MANIFEST) == 0) {
			last = w.names[k];
			w.names[k--] = w.names[--w.n];
		}
	}
	if (last == NULL) {
		fail(err, errlen, "%s/" REMOTE_MANIFEST ": not a file of the "
		    "root", e->root);
		goto out;
	}
	if (upload_names(e->root, e->remote, &w, msg, sizeof msg) != 0) {
		fail(err, errlen, "--remote %s: upload: %s", e->remote_shown,
		    msg);
		goto out;
	}
	w.names[w.n++] = last;		/* its slot is still there */
	last = NULL;
	snprintf(path, sizeof path, "%s/" REMOTE_MANIFEST, e->root);
	if (sk_object_put_file(url, path, &se) != 0) {
		fail(err, errlen, "--remote %s: upload: %s: %s",
		    e->remote_shown, shown, se.msg);
		goto out;
	}
	if (asprintf(&e->remote_note, "uploaded %zu files (%.1f MB) from %s "
	    "to %s", w.n, bytes / 1e6, e->root, e->remote_shown) < 0)
		e->remote_note = NULL;
	rc = 0;
out:
	free(data);
	free(last);
	walk_free(&w);
	if (rc == 0)
		e->remote_ready = 1;
	else if (errlen > 0 && (e->remote_err = strdup(err)) != NULL)
		e->remote_ready = -1;
	return rc;
}

/* -------------------------------------------------------------------- */
/* The mount                                                            */
/* -------------------------------------------------------------------- */

/* /proc/mounts escapes ' ', '\t', '\n' and '\\' as \ooo. */
static void
unoctal(char *s)
{
	char *o = s;

	for (; *s != '\0'; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' &&
		    s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
			    (s[3] - '0'));
			s += 3;
		} else
			*o++ = *s;
	}
	*o = '\0';
}

static void mount_stop(struct study_env *);

/* Whether mnt is a FUSE mount now (fs_mounted). */
static int
fuse_mounted(const char *mnt)
{
	char line[3 * PATH_MAX], *dev, *dir, *type, *save;
	FILE *f;
	int found = 0;

	if ((f = fopen("/proc/mounts", "re")) == NULL)
		return 0;
	while (!found && fgets(line, sizeof line, f) != NULL) {
		if ((dev = strtok_r(line, " ", &save)) == NULL ||
		    (dir = strtok_r(NULL, " ", &save)) == NULL ||
		    (type = strtok_r(NULL, " ", &save)) == NULL)
			continue;
		unoctal(dir);
		found = strcmp(dir, mnt) == 0 && strncmp(type, "fuse", 4) == 0;
	}
	fclose(f);
	return found;
}

static int
mount_start(struct study_env *e, char *err, size_t errlen)
{
	char web[64], tail[600], *argv[8];
	const char *src = web, *shown = web;
	double until;
	int n = 0, st;

	if (e->mounted && alive(&e->fs) && fuse_mounted(e->mnt))
		return 0;
	if (e->mounted)
		mount_stop(e);	/* its shardfs died: a stale mount */
	if (e->shardfs == NULL)
		return fail(err, errlen, "shardfs was not found");
	if (e->fusermount == NULL)
		return fail(err, errlen, "fusermount3 is missing "
		    "(apt-get install fuse3)");
	if (mkdir(e->mnt, 0700) != 0 && errno != EEXIST)
		return fail(err, errlen, "%s: %s", e->mnt, strerror(errno));
	if (fuse_mounted(e->mnt))
		return fail(err, errlen, "%s is mounted already", e->mnt);
	if (e->remote != NULL) {
		src = e->remote;
		shown = e->remote_shown;
	} else
		snprintf(web, sizeof web, "http://127.0.0.1:%d/",
		    front_port(e, &e->web, &e->web_px));
	argv[n++] = e->shardfs;
	argv[n++] = (char *)src;
	argv[n++] = e->mnt;
	argv[n++] = "-f";
	argv[n++] = "-o";
	argv[n++] = "metadata_ttl=-1";
	argv[n] = NULL;
	/* the mount's client reaches nginx through the proxy, no http_proxy;
	 * or the user's remote as the user would */
	if (e->remote != NULL)
		user_restore(e);
	else
		set_client_env(e, "mount", 0);
	if ((e->fs.pid = spawn(e, argv, e->fs.name, NULL, err, errlen)) < 0) {
		e->fs.pid = 0;
		return -1;
	}
	e->mounted = 1;		/* from now on, study_env_stop unmounts */
	until = now_s() + START_S;
	for (;;) {
		if (fuse_mounted(e->mnt))
			return 0;
		if (reaped(e->fs.pid, &st)) {
			e->fs.pid = 0;
			return fail(err, errlen, "shardfs %s did not mount on "
			    "%s%s", shown, e->mnt, log_tail(e->dir, e->fs.name,
			    tail, sizeof tail));
		}
		if (now_s() > until)
			return fail(err, errlen, "shardfs %s did not mount on "
			    "%s in %d s%s", shown, e->mnt, START_S,
			    log_tail(e->dir, e->fs.name, tail, sizeof tail));
		nap();
	}
}

/* fusermount3 -u, lazily (-z) if a reader still holds it (fs_stop_all). */
static void
mount_stop(struct study_env *e)
{
	char msg[256];
	char *argv[5];
	struct proc *one[1] = { &e->fs };
	int i;

	if (e->mounted && e->fusermount != NULL && fuse_mounted(e->mnt)) {
		argv[0] = e->fusermount;
		argv[1] = "-u";
		argv[2] = e->mnt;
		argv[3] = NULL;
		if (run_helper(e, argv, "fusermount3", msg, sizeof msg) != 0) {
			argv[2] = "-z";
			argv[3] = e->mnt;
			argv[4] = NULL;
			run_helper(e, argv, "fusermount3", msg, sizeof msg);
		}
		/* shardfs exits once the kernel lets go of the mount */
		for (i = 0; i < 100 && e->fs.pid > 0; i++) {
			int st;

			if (reaped(e->fs.pid, &st))
				e->fs.pid = 0;
			else
				nap();
		}
	}
	e->mounted = 0;
	stop_procs(one, 1);
}

/* -------------------------------------------------------------------- */
/* The interface                                                        */
/* -------------------------------------------------------------------- */

int
study_env_open(struct study_env **out, const char *dir, const char *root,
    const struct study_link *link, char *err, size_t errlen)
{
	struct study_env *e;
	struct stat st;
	char *rdir = NULL, *rroot = NULL;

	*out = NULL;
	if ((rdir = realpath(dir, NULL)) == NULL)
		return fail(err, errlen, "%s: %s", dir, strerror(errno));
	if ((rroot = realpath(root, NULL)) == NULL) {
		fail(err, errlen, "%s: %s", root, strerror(errno));
		free(rdir);
		return -1;
	}
	if (stat(rroot, &st) != 0 || !S_ISDIR(st.st_mode)) {
		fail(err, errlen, "%s: not a folder", root);
		free(rdir);
		free(rroot);
		return -1;
	}
	if (link != NULL && link->enabled && !(link->ttfb_ms >= 0 && link->ttfb_ms <= 1e7 &&
	    link->conn_rate >= 0 && link->total_rate >= 0)) {
		fail(err, errlen, "the link: bad time to first byte or rate");
		free(rdir);
		free(rroot);
		return -1;
	}
	if ((e = calloc(1, sizeof *e)) == NULL) {
		free(rdir);
		free(rroot);
		return fail(err, errlen, "out of memory");
	}
	e->dir = rdir;
	e->root = rroot;
	if (user_save(e) != 0) {
		study_env_close(e);
		return fail(err, errlen, "out of memory");
	}
	if (link != NULL)
		e->link = *link;	/* else no proxy */
	snprintf(e->mnt, sizeof e->mnt, "%s/mnt", rdir);
	e->web.name = "nginx";
	e->s3.name = "moto";
	e->gs.name = "gcs";
	e->web_px.name = "proxy-http";
	e->s3_px.name = "proxy-s3";
	e->gs_px.name = "proxy-gs";
	e->fs.name = "shardfs";
	e->nginx = find_path("nginx");
	if (e->nginx == NULL && is_exec("/usr/sbin/nginx"))
		e->nginx = strdup("/usr/sbin/nginx");
	e->moto = find_path("moto_server");
	e->gcs = find_path("gcp-storage-emulator");
	e->python = find_path("python3");
	e->fusermount = find_path("fusermount3");
	e->fuse_dev = stat("/dev/fuse", &st) == 0 && S_ISCHR(st.st_mode) &&
	    access("/dev/fuse", R_OK | W_OK) == 0;
	e->shardfs = find_ours("SHARDKIT_SHARDFS", "fuse/shardfs",
	    SK_BINDIR "/shardfs", "shardfs");
	e->linkproxy = find_ours("SHARDKIT_LINKPROXY", "tests/proxy/linkproxy",
	    SK_PKGLIBEXECDIR "/linkproxy", NULL);
	*out = e;
	return 0;
}

/* Whether boto3 imports in python3 (bucket creation needs it). */
static const char *
boto_missing(struct study_env *e)
{
	char msg[256], *argv[4];

	if (e->boto_missing == NULL) {
		argv[0] = e->python;
		argv[1] = "-c";
		argv[2] = "import boto3";
		argv[3] = NULL;
		e->boto_missing = strdup(run_helper(e, argv, "boto3-check", msg,
		    sizeof msg) == 0 ? "" :
		    "boto3 does not import in python3 (pip install boto3)");
		if (e->boto_missing == NULL)
			return "out of memory";
	}
	return *e->boto_missing ? e->boto_missing : NULL;
}

/* What the mount needs besides its source. */
static const char *
mount_missing(struct study_env *e)
{
	if (!e->fuse_dev)
		return "no /dev/fuse";
	if (e->fusermount == NULL)
		return "fusermount3 is missing (apt-get install fuse3)";
	if (e->shardfs == NULL)
		return "shardfs was not found (configure found no libfuse3, or "
		    "set SHARDKIT_SHARDFS)";
	return NULL;
}

static int
known_source(const char *source)
{
	return strcmp(source, "local") == 0 || strcmp(source, "http") == 0 ||
	    strcmp(source, "s3") == 0 || strcmp(source, "gs") == 0 ||
	    strcmp(source, "mount") == 0;
}

const char *
study_env_missing(struct study_env *e, const char *source)
{
	const char *proxy = e->link.enabled && e->linkproxy == NULL ?
	    "linkproxy was not found (build shardkit, or set "
	    "SHARDKIT_LINKPROXY)" : NULL;

	if (strcmp(source, "local") == 0)
		return NULL;
	if (e->remote != NULL && known_source(source)) {
		if (strcmp(source, "mount") == 0)
			return mount_missing(e);
		if (strcmp(source, e->remote_kind) == 0)
			return NULL;
		snprintf(e->why, sizeof e->why, "--remote names a%s %s:// URL",
		    e->remote_scheme[0] == 'g' ? "" : "n", e->remote_scheme);
		return e->why;
	}
	if (strcmp(source, "http") == 0 || strcmp(source, "mount") == 0) {
		if (e->nginx == NULL)
			return "nginx is not installed (apt-get install nginx)";
		if (proxy != NULL)
			return proxy;
		if (strcmp(source, "http") == 0)
			return NULL;
		return mount_missing(e);
	}
	if (strcmp(source, "s3") == 0 || strcmp(source, "gs") == 0) {
		if (strcmp(source, "s3") == 0 && e->moto == NULL)
			return "moto_server is missing "
			    "(pip install 'moto[server]')";
		if (strcmp(source, "gs") == 0 && e->gcs == NULL)
			return "gcp-storage-emulator is missing "
			    "(pip install gcp-storage-emulator)";
		if (e->python == NULL)
			return "python3 is missing";
		if (proxy != NULL)
			return proxy;
		if (strcmp(source, "s3") == 0)
			return boto_missing(e);
		return NULL;
	}
	snprintf(e->why, sizeof e->why, "unknown source (want local, http, "
	    "s3, gs or mount)");
	return e->why;
}

int
study_env_remote(struct study_env *e, const char *url, char *err,
    size_t errlen)
{
	static const char *const kinds[][2] = {
		{ "http://", "http" }, { "https://", "http" },
		{ "s3://", "s3" }, { "gs://", "gs" }
	};
	static const char want[] = "want http(s)://HOST/PATH/, "
	    "s3://BUCKET/PREFIX/ or gs://BUCKET/PREFIX/";
	struct sk_url u;
	struct sk_error se;
	const char *kind = NULL, *p;
	char *norm = NULL, *shown;
	size_t i, n;
	int rc = -1;

	if (url == NULL || *url == '\0')
		return fail(err, errlen, "--remote: an empty URL (%s)", want);
	if (e->remote != NULL)
		return fail(err, errlen, "--remote: given twice");
	if (e->web.pid > 0 || e->s3.pid > 0 ||
	    e->gs.pid > 0 || e->mounted || e->s3_filled || e->gs_filled)
		return fail(err, errlen, "--remote: too late, the local "
		    "servers are in use");
	/* Messages show the URL without a password. */
	if ((shown = sk_url_redact(url)) == NULL)
		return fail(err, errlen, "out of memory");
	for (p = url; *p != '\0'; p++)
		if ((unsigned char)*p <= 0x20 || *p == 0x7f) {
			fail(err, errlen, "--remote %s: a space or a control "
			    "character in the URL", shown);
			goto out;
		}
	for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
		if (strncmp(url, kinds[i][0], strlen(kinds[i][0])) == 0) {
			kind = kinds[i][1];
			break;
		}
	if (kind == NULL) {
		fail(err, errlen, "--remote %s: %s", shown, want);
		goto out;
	}
	/* the URL of a folder: the cells append files/ and shards/NAME */
	if (strpbrk(url, "?#") != NULL) {
		fail(err, errlen, "--remote %s: a query or a fragment: %s",
		    shown, want);
		goto out;
	}
	if (sk_url_parse(url, &u, &se) != 0) {
		fail(err, errlen, "--remote: %s (%s)", se.msg, want);
		goto out;
	}
	/* an empty folder name: a key with "//", which no listing shows as
	 * the folder the mount would need */
	if (strcmp(kind, "http") != 0 && (strstr(u.path, "//") != NULL ||
	    u.path[0] == '/')) {
		sk_url_free(&u);
		fail(err, errlen, "--remote %s: an empty folder name in the "
		    "prefix (%s)", shown, want);
		goto out;
	}
	sk_url_free(&u);
	n = strlen(url);
	if (asprintf(&norm, "%s%s", url, url[n - 1] == '/' ? "" : "/") < 0) {
		norm = NULL;
		fail(err, errlen, "out of memory");
		goto out;
	}
	free(shown);
	if ((shown = sk_url_redact(norm)) == NULL) {
		fail(err, errlen, "out of memory");
		goto out;
	}
	if (strcmp(kind, "http") != 0 &&
	    emulator_read[strcmp(kind, "s3") == 0 ? 0 : 1]) {
		fail(err, errlen, "--remote %s: this process has talked to the "
		    "local %s emulator, and libshardkit reads its %s settings "
		    "once per process (run the remote study in a process of "
		    "its own)", shown, kind, kind);
		goto out;
	}
	e->remote = norm;
	e->remote_shown = shown;
	norm = shown = NULL;
	e->remote_kind = kind;
	snprintf(e->remote_scheme, sizeof e->remote_scheme, "%.*s",
	    (int)(strstr(url, "://") - url), url);
	/* the real link is the one measured */
	e->link.enabled = 0;
	rc = 0;
out:
	free(norm);
	free(shown);
	return rc;
}

const char *
study_env_remote_note(struct study_env *e)
{
	return e->remote_note;
}

void
study_env_cold(struct study_env *e)
{
	mount_stop(e);
}

int
study_env_source(struct study_env *e, const char *source, char *url,
    size_t cap, char *err, size_t errlen)
{
	struct proc *s, *px;
	const char *why;
	int n, is_s3, *filled;

	if ((why = study_env_missing(e, source)) != NULL)
		return fail(err, errlen, "%s: %s", source, why);
	if (strcmp(source, "local") == 0)
		n = snprintf(url, cap, "%s/", e->root);
	else if (e->remote != NULL) {
		/* the kind's own source or the mount: nothing else is left */
		if (remote_prepare(e, err, errlen) != 0)
			return -1;
		if (strcmp(source, "mount") == 0) {
			if (mount_start(e, err, errlen) != 0)
				return -1;
			n = snprintf(url, cap, "%s/", e->mnt);
		} else
			n = snprintf(url, cap, "%s", e->remote);
	} else if (strcmp(source, "http") == 0 || strcmp(source, "mount") == 0) {
		if (!alive(&e->web)) {
			/* a new nginx, a new port: nothing in front of the old
			 * one is of use */
			struct proc *front[1] = { &e->web_px };

			mount_stop(e);
			stop_procs(front, 1);
		}
		if (nginx_start(e, err, errlen) != 0 || (e->link.enabled &&
		    proxy_start(e, &e->web_px, &e->web, err, errlen) != 0))
			return -1;
		if (strcmp(source, "mount") == 0) {
			if (mount_start(e, err, errlen) != 0)
				return -1;
			n = snprintf(url, cap, "%s/", e->mnt);
		} else
			n = snprintf(url, cap, "http://127.0.0.1:%d/",
			    front_port(e, &e->web, &e->web_px));
	} else {
		is_s3 = strcmp(source, "s3") == 0;
		s = is_s3 ? &e->s3 : &e->gs;
		px = is_s3 ? &e->s3_px : &e->gs_px;
		filled = is_s3 ? &e->s3_filled : &e->gs_filled;

		/* In memory, a new server would hold nothing, and this
		 * process's libshardkit keeps the first one's address. */
		if (*filled && !alive(s)) {
			char tail[600];

			return fail(err, errlen, "%s exited, and the bucket with "
			    "it%s", s->name, log_tail(e->dir, s->name, tail,
			    sizeof tail));
		}
		if (bucket_server_start(e, s, err, errlen) != 0)
			return -1;
		if (!*filled) {
			if (bucket_fill(e, source, s, err, errlen) != 0)
				return -1;
			*filled = 1;
		}
		if (e->link.enabled && proxy_start(e, px, s, err, errlen) != 0)
			return -1;
		n = snprintf(url, cap, "%s://" BUCKET "/", source);
	}
	if (n < 0 || (size_t)n >= cap)
		return fail(err, errlen, "%s: the URL is too long", source);
	return 0;
}

void
study_env_stop(struct study_env *e)
{
	struct proc *ps[6];

	if (e == NULL)
		return;
	ps[0] = &e->web_px;
	ps[1] = &e->s3_px;
	ps[2] = &e->gs_px;
	ps[3] = &e->web;
	ps[4] = &e->s3;
	ps[5] = &e->gs;
	/* the mount first: its shardfs reads through the proxy */
	mount_stop(e);
	stop_procs(ps, (int)(sizeof ps / sizeof ps[0]));
	/* in-memory servers; a --remote bucket keeps what it was given */
	e->s3_filled = e->gs_filled = 0;
}

void
study_env_close(struct study_env *e)
{
	if (e == NULL)
		return;
	study_env_stop(e);
	/* this process's settings as the user had them */
	user_restore(e);
	user_free(e);
	free(e->remote);
	free(e->remote_shown);
	free(e->remote_err);
	free(e->remote_note);
	free(e->dir);
	free(e->root);
	free(e->nginx);
	free(e->moto);
	free(e->gcs);
	free(e->python);
	free(e->fusermount);
	free(e->shardfs);
	free(e->linkproxy);
	free(e->boto_missing);
	free(e);
}
