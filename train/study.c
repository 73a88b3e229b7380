/*
 * study.c - "shardtrain study": the seed study in one command. The same
 * images as individual files and as shards, read from local disk, from
 * nginx over HTTP, from S3 and GCS emulators and through a shardfs mount,
 * every remote source behind an emulated cloud link (study_env.c), each
 * trained on with one rank, DDP and FSDP. Every cell is a shardtrain run
 * of its own (under mpirun for ranks), so a cell that fails is one line
 * of the table, not the end of the study. Out come study.json, a table
 * like the published study's, a grouped-bar plot, and findings computed
 * from the numbers.
 */
#include "config.h"

#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "study_env.h"
#include "train.h"

extern char **environ;

enum { F_FILES, F_SHARDS, NFORMS };
enum { S_LOCAL, S_HTTP, S_S3, S_GS, S_MOUNT, NSOURCES };
enum { ST_SINGLE, ST_DDP, ST_FSDP, NSTRATS };

static const char *const form_names[] = { "files", "shards", NULL };
static const char *const source_names[] = { "local", "http", "s3", "gs",
    "mount", NULL };
static const char *const strategy_names[] = { "single", "ddp", "fsdp",
    NULL };
static const char *const backends[] = { "cpu", "cuda", NULL };

/*
 * --quick: ResNet-50 at a quarter of its width on 96-pixel crops of
 * ImageNet-sized JPEGs (about 500x375, 120 KB), 640 of them in 8
 * classes. On 2 cores its compute alone runs at about 210 images/s
 * (measured on synthetic data), twice the study's T4 (fp32 ResNet-50 at
 * 224 pixels: 102 images/s per GPU, 50,000 images in 489 s), so against
 * a link with cloud figures one rank stands near where the study's one
 * GPU stood. Only the model is scaled; the link and the images are not.
 */
#define QUICK_MODEL	"resnet50"
#define QUICK_WIDTH	0.25
#define QUICK_SIZE	96
#define QUICK_CLASSES	8
#define QUICK_PER_CLASS	80
#define QUICK_BATCH	32
#define QUICK_TIMEOUT	240

/* The link: the defaults of linkproxy, round figures for a regional bucket
 * seen from a VM in its region (see the man page and README). */
#define LINK_TTFB_MS	30
#define LINK_CONN_RATE	60e6
#define LINK_TOTAL_RATE	1e9

/* A finding's thresholds. */
#define FAR_SLOWER	1.25	/* files over the link: "far slower" from */
#define NEAR_LOCAL	1.05	/* shards over the link: "within 5%" */
#define WAIT_KEPT_UP	0.05	/* a data wait share the input kept up at */

struct study_opts {
	const char *data, *out, *json, *model, *remote;
	unsigned forms, sources, strategies;
	int sources_given;
	int quick, ranks, steps, epochs, batch, image_size, classes;
	int per_class, io_streams, threads, workers, backend, repeats;
	double width, price, cell_timeout;
	struct study_link link;
};

enum { CELL_OK, CELL_FAILED, CELL_SKIPPED };
static const char *const status_names[] = { "ok", "failed", "skipped" };

struct cell {
	int form, source, strategy, ranks;
	int status;
	char why[1024];		/* the error or the reason for a skip */
	char json[PATH_MAX];	/* its shardtrain --json */
	char log[PATH_MAX];
	double epoch_s, ips, wait, cost, seconds;
	double loader_ips, compute_ips;	/* the two ceilings, or -1 */
	int estimated;		/* epoch_s from images/s, not measured */
	char verdict[32], bound[32];
	json_t *remote;		/* result.remote of its run */
};

struct study {
	struct study_opts o;
	char root[PATH_MAX];	/* data: files/ and shards/ */
	char work[PATH_MAX];	/* the env's folder */
	char self[PATH_MAX];	/* this shardtrain */
	char shardtool[PATH_MAX];
	const char *mpirun_why;	/* why there are no ranks, or NULL */
	int openmpi;
	uint64_t images;	/* in the data set */
	char remote_note[1024];	/* what became of the --remote data */
	struct study_env *env;
	struct cell *cells;
	int ncells;
};

/* ------------------------------------------------------------------------ */
/* names and messages                                                       */

/* Format into buf: 0, or -1 when it does not fit. */
static int
fits(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
fits(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
	return n >= 0 && (size_t)n < cap ? 0 : -1;
}

/* A cell's error or reason; a long one is cut. */
#define setwhy(c, ...) ((void)fits((c)->why, sizeof (c)->why, __VA_ARGS__))

/* ------------------------------------------------------------------------ */
/* stopping                                                                 */

static volatile sig_atomic_t stop_signal;
static volatile pid_t running_child;	/* its process group, or 0 */

static void
on_signal(int sig)
{
	pid_t c = running_child;

	stop_signal = sig;
	if (c > 0)
		kill(-c, SIGTERM);
	study_env_kill_async();
}

static void
catch_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

static struct study *the_study;	/* for cleanup on die() */

static void
cleanup(void)
{
	if (the_study != NULL && the_study->env != NULL) {
		study_env_close(the_study->env);
		the_study->env = NULL;
	}
}

static void
exit_hook(int status)
{
	(void)status;
	cleanup();
}

/* After a signal: everything stopped and unmounted, then exit as killed. */
static void
stop_now(void)
{
	int sig = stop_signal;

	cleanup();
	fprintf(stderr, "%s: stopped by signal %d; servers and mounts are "
	    "stopped\n", cli_prog(), sig);
	signal(sig, SIG_DFL);
	raise(sig);
	_exit(128 + sig);
}

/* ------------------------------------------------------------------------ */
/* running programs                                                         */

/*
 * Run argv (no shell) in a process group of its own, output to log
 * (appended), for at most timeout seconds (0: no limit). Returns its exit
 * status, 124 on timeout, -1 when it could not start (errno set).
 */
static int
run_logged(char *const argv[], const char *log, double timeout)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	double t0 = cli_now();
	int status = 0, rc, timed_out = 0;
	pid_t pid, w;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null",
	    O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log,
	    O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0644);
	posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
	posix_spawnattr_init(&at);
	posix_spawnattr_setpgroup(&at, 0);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
	rc = posix_spawn(&pid, argv[0], &fa, &at, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	if (rc != 0) {
		errno = rc;
		return -1;
	}
	running_child = pid;
	for (;;) {
		w = waitpid(pid, &status, WNOHANG);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR)
			break;
		if (!timed_out && timeout > 0 && cli_now() - t0 > timeout) {
			kill(-pid, SIGTERM);
			timed_out = 1;
			t0 = cli_now();
		} else if (timed_out && cli_now() - t0 > 5)
			kill(-pid, SIGKILL);
		usleep(20000);
	}
	running_child = 0;
	/* what it started (mpirun's ranks) goes with it */
	kill(-pid, SIGKILL);
	if (stop_signal)
		stop_now();
	if (timed_out)
		return 124;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* The last line of a log that says something, for a cell's error. */
static void
last_line(const char *log, char *out, size_t cap)
{
	char line[1024];
	FILE *f = fopen(log, "r");
	size_t n;

	out[0] = '\0';
	if (f == NULL)
		return;
	while (fgets(line, sizeof line, f) != NULL) {
		n = strlen(line);
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (n > 0 && strncmp(line, "---", 3) != 0)
			snprintf(out, cap, "%s", line);
	}
	fclose(f);
}

/* PROG on PATH (absolute folders only) into out; 0 or -1. */
static int
find_on_path(const char *prog, char *out, size_t cap)
{
	char *p = train_find_program(prog);
	int rc = p != NULL ? fits(out, cap, "%s", p) : -1;

	free(p);
	return rc;
}

/*
 * shardtool: beside this program in the build tree (train/../shardtool/),
 * installed beside it (bin/), or on PATH.
 */
static void
find_tools(struct study *s)
{
	char dir[PATH_MAX], *slash;
	ssize_t n;
	int up;

	n = readlink("/proc/self/exe", s->self, sizeof s->self - 1);
	if (n <= 0)
		die("cannot find this program (/proc/self/exe): %s",
		    strerror(errno));
	s->self[n] = '\0';
	snprintf(dir, sizeof dir, "%s", s->self);
	for (up = 0; up < 3; up++) {
		if ((slash = strrchr(dir, '/')) == NULL)
			break;
		*slash = '\0';
		if (fits(s->shardtool, sizeof s->shardtool,
		    "%s/shardtool/shardtool", dir) == 0 &&
		    access(s->shardtool, X_OK) == 0)
			return;
		if (fits(s->shardtool, sizeof s->shardtool, "%s/shardtool",
		    dir) == 0 &&
		    access(s->shardtool, X_OK) == 0)
			return;
	}
	if (find_on_path("shardtool", s->shardtool, sizeof s->shardtool) != 0)
		die("shardtool was not found beside %s or on PATH", s->self);
}

/* Whether mpirun can start ranks here, and whether it is Open MPI. */
static void
check_mpirun(struct study *s)
{
	char mpirun[PATH_MAX], log[PATH_MAX + 32], line[256];
	char *argv[] = { mpirun, "--version", NULL };
	FILE *f;

	if (find_on_path("mpirun", mpirun, sizeof mpirun) != 0) {
		s->mpirun_why = "mpirun is missing (apt-get install "
		    "openmpi-bin)";
		return;
	}
	pathf(log, sizeof log, "%s/mpirun-version.log", s->work);
	if (run_logged(argv, log, 30) != 0) {
		s->mpirun_why = "mpirun --version failed";
		return;
	}
	if ((f = fopen(log, "r")) != NULL) {
		while (fgets(line, sizeof line, f) != NULL)
			/* "mpirun (Open MPI) 4.1.4"; "orterun (OpenRTE)"
			 * when called by that name */
			if (strstr(line, "Open MPI") != NULL ||
			    strstr(line, "OpenRTE") != NULL)
				s->openmpi = 1;
		fclose(f);
	}
}

/* ------------------------------------------------------------------------ */
/* the data                                                                 */

static void
mkdir_p(const char *path)
{
	char buf[PATH_MAX], *p;

	if (fits(buf, sizeof buf, "%s", path) != 0)
		die("%s: the name is too long", path);
	for (p = buf + 1; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) != 0 && errno != EEXIST)
			die("%s: cannot make the folder: %s", buf,
			    strerror(errno));
		*p = '/';
	}
	if (mkdir(buf, 0755) != 0 && errno != EEXIST)
		die("%s: cannot make the folder: %s", buf, strerror(errno));
}

static int
is_dir(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Run shardtool with args (NULL-ended, after the program), or die with
 * its log's last line. */
static void
shardtool(struct study *s, const char *what, char *args[])
{
	char *argv[32], log[PATH_MAX + 32], last[1024];
	int i, rc;

	argv[0] = s->shardtool;
	for (i = 0; args[i] != NULL && i < 30; i++)
		argv[i + 1] = args[i];
	argv[i + 1] = NULL;
	pathf(log, sizeof log, "%s/shardtool.log", s->work);
	rc = run_logged(argv, log, 0);
	if (rc != 0) {
		last_line(log, last, sizeof last);
		die("%s failed (%s): %s", what, log, last);
	}
}

/* Images under a class-per-folder tree (regular files in its folders). */
static uint64_t
count_images(const char *root, int *classes)
{
	struct sk_strlist dirs = { NULL, 0, 0 };
	char path[PATH_MAX];
	uint64_t n = 0;
	struct stat st;
	struct dirent *d;
	DIR *dp, *cp;
	size_t i;

	if ((dp = opendir(root)) == NULL)
		die("%s: %s", root, strerror(errno));
	while ((d = readdir(dp)) != NULL) {
		if (d->d_name[0] == '.')
			continue;
		pathf(path, sizeof path, "%s/%s", root, d->d_name);
		if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
			sk_strlist_push(&dirs, path);
	}
	closedir(dp);
	*classes = (int)dirs.n;
	for (i = 0; i < dirs.n; i++) {
		if ((cp = opendir(dirs.v[i])) == NULL)
			die("%s: %s", dirs.v[i], strerror(errno));
		while ((d = readdir(cp)) != NULL)
			if (d->d_name[0] != '.')
				n++;
		closedir(cp);
	}
	sk_strlist_free(&dirs);
	return n;
}

/*
 * OUT/data/.study holds what the data was made from: a later study over
 * the same OUT reuses it only for the same data, never trains on
 * shards of other images.
 */
static void
check_stamp(struct study *s, const char *real)
{
	char path[PATH_MAX + 16], want[PATH_MAX + 128], have[PATH_MAX + 128];
	struct sk_error err;
	size_t n;
	FILE *f;

	if (s->o.data != NULL)
		pathf(want, sizeof want, "data %s\n", real);
	else
		pathf(want, sizeof want, "synthetic %d classes %d per class\n",
		    s->o.classes, s->o.per_class);
	pathf(path, sizeof path, "%s/.study", s->root);
	if ((f = fopen(path, "r")) != NULL) {
		n = fread(have, 1, sizeof have - 1, f);
		have[n] = '\0';
		fclose(f);
		if (strcmp(have, want) == 0)
			return;
		die("%s was made from other data (%.*s); remove it or choose "
		    "another --out", s->root, (int)strcspn(have, "\n"), have);
	}
	if (sk_atomic_write_file(path, want, strlen(want), SK_ATOMIC_NOSYNC,
	    &err) != 0)
		die("%s", err.msg);
}

/*
 * OUT/data/files: the images, one file each, in class folders (made by
 * shardtool synth, or the user's tree linked in); OUT/data/shards: the
 * same images packed. Made once: a second study over the same OUT reuses
 * them.
 */
static void
prepare_data(struct study *s)
{
	char files[PATH_MAX], shards[PATH_MAX], synth[PATH_MAX];
	char pattern[PATH_MAX], manifest[PATH_MAX], count[32], per[32];
	char classes[32], real[PATH_MAX];
	char *synth_args[] = { "synth", "imagenet", synth, "--classes", classes,
	    "--per-class", per, "--val", "0", "-q", NULL };
	char *pack_args[] = { "pack", "folder", files, "-o", pattern,
	    "--max-count", count, "--max-size", "256M", "-q", NULL };
	struct stat st;
	int nclasses;

	pathf(files, sizeof files, "%s/files", s->root);
	pathf(shards, sizeof shards, "%s/shards", s->root);
	pathf(manifest, sizeof manifest, "%s/study.json", shards);
	if (s->o.data != NULL && (realpath(s->o.data, real) == NULL ||
	    !is_dir(real)))
		die("--data %s: not a folder of class folders", s->o.data);
	/* An ILSVRC2012 tree, as shardtool pack imagenet reads it: its
	 * train/ holds the class folders. */
	if (s->o.data != NULL && fits(synth, sizeof synth, "%s/train", real) ==
	    0 && is_dir(synth)) {
		pathf(pattern, sizeof pattern, "%s/LOC_synset_mapping.txt",
		    real);
		if (access(pattern, R_OK) == 0)
			pathf(real, sizeof real, "%s", synth);
	}
	check_stamp(s, real);
	if (s->o.data != NULL) {
		if (lstat(files, &st) == 0 && unlink(files) != 0)
			die("%s: %s", files, strerror(errno));
		if (symlink(real, files) != 0)
			die("%s: %s", files, strerror(errno));
	} else if (!is_dir(files)) {
		pathf(synth, sizeof synth, "%s/synth", s->root);
		snprintf(classes, sizeof classes, "%d", s->o.classes);
		snprintf(per, sizeof per, "%d", s->o.per_class);
		if (!cli_quiet)
			fprintf(stderr, "%s: making %d synthetic ImageNet-like "
			    "images in %s\n", cli_prog(), s->o.classes *
			    s->o.per_class, files);
		shardtool(s, "shardtool synth", synth_args);
		pathf(real, sizeof real, "%s/train", synth);
		if (rename(real, files) != 0)
			die("%s: %s", files, strerror(errno));
	}
	s->images = count_images(files, &nclasses);
	if (s->images == 0)
		die("%s: no images", files);
	if (s->o.classes == 0 || s->o.data != NULL)
		s->o.classes = nclasses;
	if (stat(manifest, &st) != 0) {
		/* 16 shards at least: every rank's I/O streams have several
		 * to read, as a real data set's would. */
		snprintf(count, sizeof count, "%llu", (unsigned long long)
		    (s->images + 15) / 16);
		pathf(pattern, sizeof pattern, "%s/study-%%06d.tar", shards);
		if (!cli_quiet)
			fprintf(stderr, "%s: packing %llu images into %s\n",
			    cli_prog(), (unsigned long long)s->images, shards);
		shardtool(s, "shardtool pack", pack_args);
	}
}

/* ------------------------------------------------------------------------ */
/* the cells                                                                */

static const char *
setup_name(int strategy, int ranks, char *buf, size_t cap)
{
	if (strategy == ST_SINGLE)
		snprintf(buf, cap, "1 rank");
	else
		snprintf(buf, cap, "%d ranks, %s", ranks, strategy == ST_DDP ?
		    "DDP" : "FSDP");
	return buf;
}

/* Why a cell cannot run here, or NULL. */
static const char *
skip_reason(struct study *s, const struct cell *c)
{
	const char *why;

	if (c->ranks > 1 && s->mpirun_why != NULL)
		return s->mpirun_why;
	if ((why = study_env_missing(s->env, source_names[c->source])) != NULL)
		return why;
	return NULL;
}

static void
make_cells(struct study *s)
{
	int f, src, st, n = 0;
	struct cell *c;

	s->cells = calloc(NFORMS * NSOURCES * NSTRATS, sizeof *s->cells);
	if (s->cells == NULL)
		die("out of memory");
	/* Setups are rows, as in the study's table: the one-rank row
	 * first. */
	for (st = 0; st < NSTRATS; st++) {
		if (!(s->o.strategies & 1u << st))
			continue;
		for (f = 0; f < NFORMS; f++) {
			if (!(s->o.forms & 1u << f))
				continue;
			for (src = 0; src < NSOURCES; src++) {
				if (!(s->o.sources & 1u << src))
					continue;
				c = &s->cells[n++];
				c->form = f;
				c->source = src;
				c->strategy = st;
				c->ranks = st == ST_SINGLE ? 1 : s->o.ranks;
				c->epoch_s = c->ips = c->wait = c->cost = -1;
			}
		}
	}
	s->ncells = n;
}

static double
jreal(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_number(v) ? json_number_value(v) : -1;
}

static void
jstr(json_t *o, const char *key, char *out, size_t cap)
{
	json_t *v = json_object_get(o, key);

	snprintf(out, cap, "%s", json_is_string(v) ? json_string_value(v) :
	    "");
}

/* A finished run's figures from its --json. */
static int
read_cell(struct study *s, struct cell *c)
{
	json_error_t je;
	json_t *root, *res, *ep;

	if ((root = json_load_file(c->json, 0, &je)) == NULL) {
		setwhy(c, "%s: %s", c->json, je.text);
		return -1;
	}
	res = json_object_get(root, "result");
	if (!json_is_object(res)) {
		setwhy(c, "%s: no result", c->json);
		json_decref(root);
		return -1;
	}
	c->ips = jreal(res, "images_per_second");
	c->wait = jreal(res, "wait_share");
	c->seconds = jreal(res, "wall_seconds");
	c->loader_ips = jreal(res, "loader_images_per_second");
	c->compute_ips = jreal(res, "compute_images_per_second");
	jstr(res, "verdict", c->verdict, sizeof c->verdict);
	jstr(res, "bound_stage", c->bound, sizeof c->bound);
	c->remote = json_incref(json_object_get(res, "remote"));
	ep = json_array_get(json_object_get(root, "epochs"), 0);
	if (s->o.steps == 0 && json_is_object(ep) &&
	    jreal(ep, "wall_seconds") > 0)
		c->epoch_s = jreal(ep, "wall_seconds");
	else if (c->ips > 0) {
		/* --steps: the epoch it would take at the measured rate */
		c->epoch_s = (double)s->images / c->ips;
		c->estimated = 1;
	}
	if (s->o.price > 0 && c->epoch_s > 0)
		c->cost = c->epoch_s / 3600 * s->o.price;
	json_decref(root);
	return 0;
}

/* The --data of a cell: its source's base plus the form's folder. */
static int
cell_data(struct study *s, struct cell *c, char *data, size_t cap)
{
	char base[PATH_MAX], err[1024];

	if (study_env_source(s->env, source_names[c->source], base,
	    sizeof base, err, sizeof err) != 0) {
		setwhy(c, "%s", err);
		return -1;
	}
	if (fits(data, cap, "%s%s", base, c->form == F_FILES ? "files/" :
	    "shards/study.json") != 0) {
		setwhy(c, "%s: the name is too long",
		    base);
		return -1;
	}
	return 0;
}

/* A command line: its words, and a pool for the numbers among them. */
struct args {
	char *v[64];
	int n;
	char pool[1024];
	size_t used;
};

static void
arg(struct args *a, const char *word)
{
	if (a->n + 1 >= (int)(sizeof a->v / sizeof a->v[0]))
		die("internal error: too many arguments");
	a->v[a->n++] = (char *)word;
	a->v[a->n] = NULL;
}

/* "--opt VALUE", the value formatted into the pool. */
static void
argf(struct args *a, const char *opt, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
argf(struct args *a, const char *opt, const char *fmt, ...)
{
	char *v = a->pool + a->used;
	va_list ap;
	int len;

	va_start(ap, fmt);
	len = vsnprintf(v, sizeof a->pool - a->used, fmt, ap);
	va_end(ap);
	if (len < 0 || (size_t)len >= sizeof a->pool - a->used)
		die("internal error: arguments too long");
	a->used += (size_t)len + 1;
	arg(a, opt);
	arg(a, v);
}

/* The shardtrain command line of a cell, under mpirun for ranks. */
static int
cell_args(struct study *s, struct cell *c, const char *data,
    char *mpirun, size_t cap, struct args *a)
{
	if (c->ranks > 1) {
		if (find_on_path("mpirun", mpirun, cap) != 0) {
			setwhy(c, "mpirun is gone");
			return -1;
		}
		arg(a, mpirun);
		if (s->openmpi) {
			arg(a, "--oversubscribe");
			if (geteuid() == 0)
				arg(a, "--allow-run-as-root");
		}
		argf(a, "-np", "%d", c->ranks);
	}
	arg(a, s->self);
	argf(a, "--backend", "%s", backends[s->o.backend]);
	argf(a, "--data", "%s", data);
	argf(a, "--model", "%s", s->o.model);
	if (s->o.width != 1)
		argf(a, "--width", "%.17g", s->o.width);
	argf(a, "--image-size", "%d", s->o.image_size);
	argf(a, "--classes", "%d", s->o.classes);
	argf(a, "--batch", "%d", s->o.batch);
	if (s->o.steps > 0)
		argf(a, "--steps", "%d", s->o.steps);
	else
		argf(a, "--epochs", "%d", s->o.epochs);
	if (s->o.io_streams > 0)
		argf(a, "--io-streams", "%d", s->o.io_streams);
	if (s->o.threads > 0)
		argf(a, "--threads", "%d", s->o.threads);
	if (s->o.workers > 0)
		argf(a, "--workers", "%d", s->o.workers);
	if (c->ranks > 1)
		argf(a, "--strategy", "%s", strategy_names[c->strategy]);
	if (s->o.price > 0)
		argf(a, "--price-per-hour", "%.17g", s->o.price);
	argf(a, "--ceiling-steps", "%d", 3);
	argf(a, "--json", "%s", c->json);
	return 0;
}

static void
run_cell(struct study *s, struct cell *c, int idx, int rep)
{
	char data[PATH_MAX + 64], mpirun[PATH_MAX], name[128], setup[64];
	struct args a;
	int rc;

	memset(&a, 0, sizeof a);
	snprintf(name, sizeof name, "%s-%s-%s%d", form_names[c->form],
	    source_names[c->source], strategy_names[c->strategy], c->ranks);
	if (s->o.repeats > 1)
		snprintf(name + strlen(name), sizeof name - strlen(name),
		    "-run%d", rep + 1);
	pathf(c->json, sizeof c->json, "%s/cells/%s.json", s->o.out, name);
	pathf(c->log, sizeof c->log, "%s/cells/%s.log", s->o.out, name);
	setup_name(c->strategy, c->ranks, setup, sizeof setup);
	if (!cli_quiet && s->o.repeats > 1)
		fprintf(stderr, "%s: [%d/%d, run %d of %d] %s from %s, %s: ",
		    cli_prog(), idx + 1, s->ncells, rep + 1, s->o.repeats,
		    form_names[c->form], source_names[c->source], setup);
	else if (!cli_quiet)
		fprintf(stderr, "%s: [%d/%d] %s from %s, %s: ", cli_prog(),
		    idx + 1, s->ncells, form_names[c->form],
		    source_names[c->source], setup);
	/* Every cell starts cold: a mount's cache went with the last one. */
	if (c->source == S_MOUNT)
		study_env_cold(s->env);
	if (cell_data(s, c, data, sizeof data) != 0 ||
	    cell_args(s, c, data, mpirun, sizeof mpirun, &a) != 0) {
		c->status = CELL_FAILED;
		goto said;
	}
	study_env_apply(s->env, source_names[c->source]);
	unlink(c->json);
	unlink(c->log);

	rc = run_logged(a.v, c->log, s->o.cell_timeout);
	if (rc == 0 && read_cell(s, c) == 0) {
		c->status = CELL_OK;
	} else {
		c->status = CELL_FAILED;
		if (rc < 0)
			setwhy(c, "%s: %s", a.v[0], strerror(errno));
		else if (rc == 124)
			setwhy(c, "no result after %.0f s (--cell-timeout); "
			    "see %s", s->o.cell_timeout, c->log);
		else if (rc != 0)
			last_line(c->log, c->why, sizeof c->why);
		if (c->why[0] == '\0')
			setwhy(c, "exit status %d; see %s", rc, c->log);
	}
said:
	if (cli_quiet)
		return;
	if (c->status == CELL_OK)
		fprintf(stderr, "%.1f s/epoch, %.0f images/s, %s\n", c->epoch_s,
		    c->ips, c->verdict);
	else
		fprintf(stderr, "failed: %s\n", c->why);
}

static int
by_epoch(const void *a, const void *b)
{
	const struct cell *x = a, *y = b;

	return (x->epoch_s > y->epoch_s) - (x->epoch_s < y->epoch_s);
}

/*
 * With --repeats, each run of the matrix goes through every cell before
 * the next begins, so a machine that slows down for a while slows every
 * cell alike; a cell's figures are then those of its median run (a run
 * that failed makes the cell fail).
 */
static void
run_cells(struct study *s)
{
	const int nr = s->o.repeats;
	struct cell *c, *tries;
	char setup[64];
	int i, r, bad;

	if ((tries = calloc((size_t)s->ncells * (size_t)nr, sizeof *tries)) ==
	    NULL)
		die("out of memory");
	for (i = 0; i < s->ncells; i++) {
		c = &s->cells[i];
		const char *why = skip_reason(s, c);

		if (why == NULL)
			continue;
		c->status = CELL_SKIPPED;
		setwhy(c, "%s", why);
		if (!cli_quiet)
			fprintf(stderr, "%s: [%d/%d] %s from %s, %s: skipped: "
			    "%s\n", cli_prog(), i + 1, s->ncells,
			    form_names[c->form], source_names[c->source],
			    setup_name(c->strategy, c->ranks, setup,
			    sizeof setup), why);
	}
	for (r = 0; r < nr; r++)
		for (i = 0; i < s->ncells; i++) {
			if (s->cells[i].status == CELL_SKIPPED)
				continue;
			c = &tries[(size_t)i * nr + r];
			*c = s->cells[i];
			run_cell(s, c, i, r);
		}
	for (i = 0; i < s->ncells; i++) {
		if (s->cells[i].status == CELL_SKIPPED)
			continue;
		c = &tries[(size_t)i * nr];
		for (r = 0, bad = -1; r < nr; r++)
			if (c[r].status != CELL_OK && bad < 0)
				bad = r;
		if (bad < 0)
			qsort(c, (size_t)nr, sizeof *c, by_epoch);
		/* the failed run, or the median */
		s->cells[i] = c[bad >= 0 ? bad : nr / 2];
		c[bad >= 0 ? bad : nr / 2].remote = NULL;
		for (r = 0; r < nr; r++)
			json_decref(c[r].remote);
	}
	free(tries);
}

/* ------------------------------------------------------------------------ */
/* the findings                                                             */

static const struct cell *
get(const struct study *s, int form, int source, int strategy)
{
	int i;

	for (i = 0; i < s->ncells; i++) {
		const struct cell *c = &s->cells[i];

		if (c->form == form && c->source == source &&
		    c->strategy == strategy)
			return c->status == CELL_OK && c->epoch_s > 0 ? c :
			    NULL;
	}
	return NULL;
}

/* A source's epoch over local disk's, same form and setup; -1 unknown. */
static double
ratio(const struct study *s, int form, int source, int strategy)
{
	const struct cell *a = get(s, form, source, strategy);
	const struct cell *b = get(s, form, S_LOCAL, strategy);

	return a != NULL && b != NULL ? a->epoch_s / b->epoch_s : -1;
}

/* The range and mean of a form's ratios over the remote sources. */
static int
remote_ratios(const struct study *s, int form, int strategy, double *lo,
    double *hi, double *mean, int *worst)
{
	int src, n = 0;
	double r, sum = 0;

	*lo = INFINITY;
	*hi = -INFINITY;
	*worst = -1;
	for (src = S_HTTP; src < NSOURCES; src++) {
		if ((r = ratio(s, form, src, strategy)) < 0)
			continue;
		if (r < *lo)
			*lo = r;
		if (r > *hi) {
			*hi = r;
			*worst = src;
		}
		sum += r;
		n++;
	}
	*mean = n > 0 ? sum / n : -1;
	return n;
}

struct findings {
	char **v;
	int n;
};

static void
add(struct findings *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
add(struct findings *f, const char *fmt, ...)
{
	va_list ap;
	char *line, **v;

	va_start(ap, fmt);
	if (vasprintf(&line, fmt, ap) < 0)
		die("out of memory");
	va_end(ap);
	if ((v = realloc(f->v, (size_t)(f->n + 1) * sizeof *v)) == NULL)
		die("out of memory");
	f->v = v;
	f->v[f->n++] = line;
}

static const char *
range(double lo, double hi, char *buf, size_t cap)
{
	if (hi - lo < 0.005)
		snprintf(buf, cap, "%.2fx", hi);
	else
		snprintf(buf, cap, "%.2f-%.2fx", lo, hi);
	return buf;
}

/* One line per setup and form: each remote source against local disk. */
static void
per_setup(const struct study *s, struct findings *f)
{
	char line[2048], setup[64];
	const struct cell *c;
	int st, form, src;
	size_t len;
	double r;

	for (st = 0; st < NSTRATS; st++)
		for (form = 0; form < NFORMS; form++) {
			if (get(s, form, S_LOCAL, st) == NULL)
				continue;
			len = (size_t)snprintf(line, sizeof line, "%s, %s "
			    "over the link:", setup_name(st, st == ST_SINGLE ?
			    1 : s->o.ranks, setup, sizeof setup),
			    form_names[form]);
			for (src = S_HTTP; src < NSOURCES; src++) {
				if ((r = ratio(s, form, src, st)) < 0 ||
				    len >= sizeof line)
					continue;
				c = get(s, form, src, st);
				len += (size_t)snprintf(line + len, sizeof line
				    - len, "%s %s %.2fx local disk (%s, data "
				    "wait %.0f%% of the step)", line[len - 1]
				    == ':' ? "" : ";", source_names[src], r,
				    c->verdict, c->wait * 100);
			}
			if (line[len - 1] != ':')
				add(f, "%s", line);
		}
}

static void
findings(const struct study *s, struct findings *f)
{
	double lo, hi, mean, lo2, hi2, mean2, fl, sh;
	char a[64], b[64], setup[64];
	const struct cell *c;
	int st, base = -1, worst, worst2, src, n;

	for (st = 0; st < NSTRATS && base < 0; st++)
		if (get(s, F_FILES, S_LOCAL, st) != NULL ||
		    get(s, F_SHARDS, S_LOCAL, st) != NULL)
			base = st;
	if (base < 0) {
		add(f, "No finding: no cell read from local disk finished, "
		    "and every finding compares against it.");
		return;
	}
	setup_name(base, base == ST_SINGLE ? 1 : s->o.ranks, setup,
	    sizeof setup);

	/* 1. individual files over a network are far slower */
	if (remote_ratios(s, F_FILES, base, &lo, &hi, &mean, &worst) > 0) {
		c = get(s, F_FILES, worst, base);
		if (lo >= FAR_SLOWER)
			add(f, "Files over the link are far slower than local "
			    "disk, as in the study: %s the local epoch (%s; "
			    "slowest %s: %s, data wait %.0f%% of the step). "
			    "The study: 1.64x through gcsfuse on 1 GPU.",
			    range(lo, hi, a, sizeof a), setup,
			    source_names[worst], c->verdict, c->wait * 100);
		else
			add(f, "The study's finding that files over the link "
			    "are far slower does not hold here: %s the local "
			    "epoch (%s, under %.2fx); the compute is slow "
			    "enough that one rank's I/O streams keep up with "
			    "it (%s: loader alone %.0f images/s, compute "
			    "alone %.0f).", range(lo, hi, a, sizeof a), setup,
			    FAR_SLOWER, source_names[worst], c->loader_ips,
			    c->compute_ips);
	}
	/* 2. shards over the network come within a few percent */
	if (remote_ratios(s, F_SHARDS, base, &lo, &hi, &mean, &worst) > 0) {
		c = get(s, F_SHARDS, worst, base);
		if (hi <= NEAR_LOCAL)
			add(f, "Shards over the link are at most %.0f%% slower "
			    "than local disk, as in the study: %s the local "
			    "epoch (%s; %s). The study: 1.02x for DDP + "
			    "WebDataset through gcsfuse.", (NEAR_LOCAL - 1) *
			    100, range(lo, hi, a, sizeof a), setup,
			    get(s, F_SHARDS, S_LOCAL, base)->verdict);
		else if (c->wait <= WAIT_KEPT_UP)
			add(f, "Shards over the link took %s the local epoch "
			    "(%s), more than the study's 1.02x, but the input "
			    "kept up: the slowest, %s, waited on data %.0f%% "
			    "of the step (%s). The rest is the compute itself, "
			    "which varies from run to run, and the servers and "
			    "proxies of the emulated link, which share the "
			    "cores with training here; --repeats takes each "
			    "cell's median run.", range(lo, hi, a, sizeof a),
			    setup, source_names[worst], c->wait * 100,
			    c->verdict);
		else
			add(f, "The study's finding that shards over the link "
			    "come within a few percent of local disk does not "
			    "hold here: %s the local epoch (%s; %s worst: "
			    "%s, data wait %.0f%% of the step; its loader "
			    "alone %.0f images/s, the compute alone %.0f).",
			    range(lo, hi, a, sizeof a), setup,
			    source_names[worst], c->verdict, c->wait * 100,
			    c->loader_ips, c->compute_ips);
	}
	/* 3. shards against files, over the same link */
	n = 0;
	fl = sh = 0;
	for (src = S_HTTP; src < NSOURCES; src++) {
		const struct cell *x = get(s, F_FILES, src, base);
		const struct cell *y = get(s, F_SHARDS, src, base);

		if (x != NULL && y != NULL) {
			fl += x->epoch_s;
			sh += y->epoch_s;
			n++;
		}
	}
	if (n > 0)
		add(f, "Over the link, the same images as shards train %.2fx "
		    "as fast as individual files (%s, mean over %d "
		    "source%s).", fl / sh, setup, n, n > 1 ? "s" : "");
	/* 4. more ranks narrow the files gap */
	if (remote_ratios(s, F_FILES, base, &lo, &hi, &mean, &worst) == 0)
		return;
	for (st = base + 1; st < NSTRATS; st++) {
		if (remote_ratios(s, F_FILES, st, &lo2, &hi2, &mean2,
		    &worst2) == 0)
			continue;
		setup_name(st, s->o.ranks, b, sizeof b);
		if (mean2 < mean - 0.005)
			add(f, "%s narrows files over the link from %.2fx to "
			    "%.2fx local disk (mean over the remote sources). "
			    "The study: 4 GPUs with DDP took files over "
			    "gcsfuse from 804 s to 432 s an epoch, while its "
			    "local disk went from 489 s to 134 s.", b, mean,
			    mean2);
		else
			add(f, "%s does not narrow files over the link here: "
			    "%.2fx local disk, against %.2fx with %s.", b,
			    mean2, mean, setup);
	}
}

/* ------------------------------------------------------------------------ */
/* outputs                                                                  */

static char
verdict_letter(const char *v)
{
	if (strcmp(v, "input-bound") == 0)
		return 'I';
	if (strcmp(v, "compute-bound") == 0)
		return 'C';
	if (strcmp(v, "balanced") == 0)
		return 'B';
	return '?';
}

/* The table and findings: stdout, or stderr when --json - takes it. */
static FILE *tout;

/* The study's table: setups down, form x source across; seconds per
 * epoch and the verdict's letter (or the cost per epoch). */
static void
print_table(const struct study *s, int cost)
{
	char setup[64], buf[32];
	int st, form, src, i;
	const struct cell *c;

	fprintf(tout, "\n%s\n", cost ? "cost per epoch (USD)" : "seconds per epoch "
	    "(C compute-bound, I input-bound, B balanced)");
	fprintf(tout, "%-16s", "");
	for (form = 0; form < NFORMS; form++)
		for (src = 0; src < NSOURCES; src++)
			if ((s->o.forms & 1u << form) &&
			    (s->o.sources & 1u << src))
				fprintf(tout, " %10s", form_names[form]);
	fprintf(tout, "\n%-16s", "setup");
	for (form = 0; form < NFORMS; form++)
		for (src = 0; src < NSOURCES; src++)
			if ((s->o.forms & 1u << form) &&
			    (s->o.sources & 1u << src))
				fprintf(tout, " %10s", source_names[src]);
	fprintf(tout, "\n");
	for (st = 0; st < NSTRATS; st++) {
		if (!(s->o.strategies & 1u << st))
			continue;
		fprintf(tout, "%-16s", setup_name(st, st == ST_SINGLE ? 1 :
		    s->o.ranks, setup, sizeof setup));
		for (form = 0; form < NFORMS; form++)
			for (src = 0; src < NSOURCES; src++) {
				if (!(s->o.forms & 1u << form) ||
				    !(s->o.sources & 1u << src))
					continue;
				c = NULL;
				for (i = 0; i < s->ncells; i++)
					if (s->cells[i].form == form &&
					    s->cells[i].source == src &&
					    s->cells[i].strategy == st)
						c = &s->cells[i];
				if (c == NULL || c->status == CELL_SKIPPED)
					snprintf(buf, sizeof buf, "skipped");
				else if (c->status == CELL_FAILED)
					snprintf(buf, sizeof buf, "failed");
				else if (cost && c->cost >= 0)
					snprintf(buf, sizeof buf, "%.4g",
					    c->cost);
				else if (cost)
					snprintf(buf, sizeof buf, "-");
				else
					snprintf(buf, sizeof buf, "%.1f%s %c",
					    c->epoch_s, c->estimated ? "~" :
					    "", verdict_letter(c->verdict));
				fprintf(tout, " %10s", buf);
			}
		fprintf(tout, "\n");
	}
}

/* Grouped bars: one group per setup and form, one bar per source. */
static void
plot(const struct study *s)
{
	char *data = NULL, *script = NULL, path[PATH_MAX + 16], setup[64];
	size_t len = 0;
	int st, form, src, nsrc = 0, svg;
	unsigned shown = 0;
	const struct cell *c;
	FILE *f;

	/* a column per source with a bar to draw */
	for (src = 0; src < NSOURCES; src++)
		for (st = 0; st < NSTRATS; st++)
			for (form = 0; form < NFORMS; form++)
				if (get(s, form, src, st) != NULL)
					shown |= 1u << src;
	if (shown == 0) {
		warn("no cell ran: no plot");
		return;
	}
	if ((f = open_memstream(&data, &len)) == NULL)
		die("out of memory");
	fprintf(f, "setup");
	for (src = 0; src < NSOURCES; src++)
		if (shown & 1u << src) {
			fprintf(f, " %s", source_names[src]);
			nsrc++;
		}
	fprintf(f, "\n");
	for (st = 0; st < NSTRATS; st++)
		for (form = 0; form < NFORMS; form++) {
			if (!(s->o.strategies & 1u << st) ||
			    !(s->o.forms & 1u << form))
				continue;
			fprintf(f, "\"%s, %s\"", setup_name(st, st ==
			    ST_SINGLE ? 1 : s->o.ranks, setup, sizeof setup),
			    form_names[form]);
			for (src = 0; src < NSOURCES; src++) {
				if (!(shown & 1u << src))
					continue;
				c = get(s, form, src, st);
				if (c != NULL)
					fprintf(f, " %.6g", c->epoch_s);
				else
					fprintf(f, " -");
			}
			fprintf(f, "\n");
		}
	if (fclose(f) != 0)
		die("out of memory");
	if (asprintf(&script, "set title 'shardtrain study: seconds per "
	    "epoch by setup, form and source'\n"
	    "set style data histograms\n"
	    "set style histogram clustered gap 1\n"
	    "set style fill solid 0.8 border -1\n"
	    "set datafile missing '-'\n"
	    "set key autotitle columnhead top left\n"
	    "set ylabel 'seconds per epoch'\n"
	    "set yrange [0:*]\n"
	    "set grid ytics\n"
	    "set xtics rotate by -20 nomirror\n"
	    "plot for [i=2:%d] 'plot.dat' using i:xtic(1)\n", nsrc + 1) < 0)
		die("out of memory");
	for (svg = 1; svg >= 0; svg--) {
		pathf(path, sizeof path, "%s/study.%s", s->o.out, svg ?
		    "svg" : "png");
		if (report_gnuplot(path, svg, script, data) != 0)
			warn("%s: no plot", path);
	}
	free(data);
	free(script);
}

/* A JSON value from a cell's run, written as it is. */
static void
copy_json(struct cli_json *j, const char *key, json_t *v)
{
	const char *k;
	json_t *x;
	size_t i;

	switch (json_typeof(v)) {
	case JSON_OBJECT:
		cli_json_object(j, key);
		json_object_foreach(v, k, x)
			copy_json(j, k, x);
		cli_json_end(j);
		break;
	case JSON_ARRAY:
		cli_json_array(j, key);
		json_array_foreach(v, i, x)
			copy_json(j, NULL, x);
		cli_json_end(j);
		break;
	case JSON_STRING:
		cli_json_str(j, key, json_string_value(v));
		break;
	case JSON_INTEGER:
		cli_json_int(j, key, json_integer_value(v));
		break;
	case JSON_REAL:
		cli_json_real(j, key, json_real_value(v));
		break;
	case JSON_TRUE:
	case JSON_FALSE:
		cli_json_bool(j, key, json_is_true(v));
		break;
	default:
		cli_json_null(j, key);
	}
}

static void
jnum(struct cli_json *j, const char *key, double v)
{
	if (v >= 0 && isfinite(v))
		cli_json_real(j, key, v);
	else
		cli_json_null(j, key);
}

static void
jmask(struct cli_json *j, const char *key, unsigned mask,
    const char *const *names)
{
	int i;

	cli_json_array(j, key);
	for (i = 0; names[i] != NULL; i++)
		if (mask & 1u << i)
			cli_json_str(j, NULL, names[i]);
	cli_json_end(j);
}

static void
write_json(const struct study *s, const char *path,
    const struct findings *fd)
{
	struct cli_json *j = cli_json_open(path);
	const struct cell *c;
	int i;

	cli_json_object(j, "config");
	cli_json_str(j, "out", s->o.out);
	cli_json_str(j, "data", s->o.data != NULL ? s->o.data : "synthetic");
	cli_json_uint(j, "images", s->images);
	cli_json_int(j, "classes", s->o.classes);
	cli_json_bool(j, "quick", s->o.quick);
	jmask(j, "forms", s->o.forms, form_names);
	jmask(j, "sources", s->o.sources, source_names);
	jmask(j, "strategies", s->o.strategies, strategy_names);
	cli_json_int(j, "ranks", s->o.ranks);
	cli_json_str(j, "backend", backends[s->o.backend]);
	cli_json_str(j, "model", s->o.model);
	cli_json_real(j, "width", s->o.width);
	cli_json_int(j, "image_size", s->o.image_size);
	cli_json_int(j, "batch", s->o.batch);
	cli_json_int(j, "repeats", s->o.repeats);
	if (s->o.io_streams > 0)
		cli_json_int(j, "io_streams", s->o.io_streams);
	else
		cli_json_null(j, "io_streams");
	if (s->o.threads > 0)
		cli_json_int(j, "threads", s->o.threads);
	else
		cli_json_null(j, "threads");
	if (s->o.workers > 0)
		cli_json_int(j, "workers", s->o.workers);
	else
		cli_json_null(j, "workers");
	if (s->o.steps > 0)
		cli_json_int(j, "steps", s->o.steps);
	else
		cli_json_null(j, "steps");
	cli_json_int(j, "epochs", s->o.steps > 0 ? 0 : s->o.epochs);
	if (s->o.remote != NULL)
		cli_json_source(j, "remote", s->o.remote);
	else
		cli_json_null(j, "remote");
	cli_json_str(j, "remote_note", s->remote_note[0] ? s->remote_note :
	    NULL);
	cli_json_object(j, "link");
	cli_json_bool(j, "emulated", s->o.link.enabled);
	cli_json_real(j, "ttfb_seconds", s->o.link.ttfb_ms / 1000);
	cli_json_real(j, "conn_bytes_per_second", s->o.link.conn_rate);
	cli_json_real(j, "total_bytes_per_second", s->o.link.total_rate);
	cli_json_end(j);
	jnum(j, "price_per_hour_usd", s->o.price > 0 ? s->o.price : -1);
	cli_json_end(j);

	cli_json_array(j, "cells");
	for (i = 0; i < s->ncells; i++) {
		c = &s->cells[i];
		cli_json_object(j, NULL);
		cli_json_str(j, "form", form_names[c->form]);
		cli_json_str(j, "source", source_names[c->source]);
		cli_json_str(j, "strategy", strategy_names[c->strategy]);
		cli_json_int(j, "ranks", c->ranks);
		cli_json_str(j, "status", status_names[c->status]);
		jnum(j, "epoch_seconds", c->epoch_s);
		cli_json_bool(j, "epoch_seconds_estimated", c->estimated);
		jnum(j, "images_per_second", c->ips);
		jnum(j, "data_wait_share", c->wait);
		cli_json_str(j, "verdict", c->verdict[0] ? c->verdict : NULL);
		cli_json_str(j, "bound_stage", c->bound[0] ? c->bound : NULL);
		jnum(j, "cost_per_epoch_usd", c->cost);
		if (c->remote != NULL)
			copy_json(j, "remote", c->remote);
		else
			cli_json_null(j, "remote");
		cli_json_str(j, "error", c->status == CELL_FAILED ? c->why :
		    NULL);
		cli_json_str(j, "skip_reason", c->status == CELL_SKIPPED ?
		    c->why : NULL);
		cli_json_str(j, "run_json", c->status == CELL_OK ? c->json :
		    NULL);
		cli_json_str(j, "log", c->status != CELL_SKIPPED ? c->log :
		    NULL);
		cli_json_end(j);
	}
	cli_json_end(j);
	cli_json_array(j, "findings");
	for (i = 0; i < fd->n; i++)
		cli_json_str(j, NULL, fd->v[i]);
	cli_json_end(j);
	cli_json_close(j);
}

/* ------------------------------------------------------------------------ */
/* the command                                                              */

enum {
	O_DATA = 1, O_OUT, O_QUICK, O_FORMS, O_SOURCES, O_STRATEGIES, O_RANKS,
	O_MODEL, O_WIDTH, O_SIZE, O_BATCH, O_CLASSES, O_PER_CLASS, O_STEPS,
	O_EPOCHS, O_IO, O_TTFB, O_CONN, O_TOTAL, O_NO_LINK, O_BACKEND,
	O_PRICE, O_TIMEOUT, O_JSON, O_THREADS, O_WORKERS, O_REPEATS,
	O_REMOTE
};

#define OPT(name, id, type, arg, help, min, max) \
	{ name, 0, id, type, arg, help, min, max, NULL, 0 }
#define END { NULL, 0, 0, 0, NULL, NULL, 0, 0, NULL, 0 }

static const struct cli_option matrix_opts[] = {
	OPT("data", O_DATA, CLI_STRING, "DIR",
	    "a class-per-folder image tree, or an ILSVRC2012\n"
	    "tree (its train/) (default: a synthetic\n"
	    "ImageNet-like set, made with shardtool synth)", 0, 0),
	OPT("out", O_OUT, CLI_STRING, "DIR",
	    "where the data, runs and results go (study)", 0, 0),
	OPT("quick", O_QUICK, CLI_FLAG, NULL,
	    "a scaled study of about 5 minutes on 2 cores", 0, 0),
	OPT("forms", O_FORMS, CLI_STRING, "LIST",
	    "files,shards (both)", 0, 0),
	OPT("sources", O_SOURCES, CLI_STRING, "LIST",
	    "local,http,s3,gs,mount (all; named ones must run)", 0, 0),
	OPT("strategies", O_STRATEGIES, CLI_STRING, "LIST",
	    "single,ddp,fsdp (all)", 0, 0),
	OPT("ranks", O_RANKS, CLI_INT, "N", "ranks of ddp and fsdp (2)", 2,
	    1024),
	OPT("remote", O_REMOTE, CLI_STRING, "URL",
	    "the remote cells read from this bucket prefix or\n"
	    "server (s3://, gs://, http(s)://), not the local\n"
	    "emulators; no link is emulated", 0, 0),
	END
};

static const struct cli_option run_opts[] = {
	{ "backend", 0, O_BACKEND, CLI_CHOICE, "cpu|cuda",
	    "where to compute (cpu)", 0, 0, backends, 0 },
	OPT("model", O_MODEL, CLI_STRING, "NAME",
	    "the model (resnet50; --quick: at width 0.25)", 0, 0),
	OPT("width", O_WIDTH, CLI_REAL, "X", "ResNet width multiplier", 1e-3,
	    64),
	OPT("image-size", O_SIZE, CLI_INT, "N",
	    "input height and width (224; --quick: 96)", 8, 8192),
	OPT("batch", O_BATCH, CLI_INT, "N", "samples per batch per rank (32)",
	    1, 1 << 20),
	OPT("classes", O_CLASSES, CLI_INT, "K",
	    "synthetic data: classes (100; --quick: 8)", 1, 1000),
	OPT("per-class", O_PER_CLASS, CLI_INT, "N",
	    "synthetic data: images per class (50; --quick: 80)", 1, 100000),
	OPT("epochs", O_EPOCHS, CLI_INT, "N", "epochs per cell (1)", 1, 1000),
	OPT("steps", O_STEPS, CLI_INT, "N",
	    "steps per cell instead; the epoch is then\n"
	    "estimated from images/s", 1, 1 << 30),
	OPT("repeats", O_REPEATS, CLI_INT, "N",
	    "run the matrix N times; each cell's figures are\n"
	    "its median run's (1)", 1, 99),
	OPT("io-streams", O_IO, CLI_INT, "N",
	    "the loader's files or shards in flight per rank\n"
	    "(shardtrain's default)", 1, 256),
	OPT("threads", O_THREADS, CLI_INT, "N",
	    "compute threads per rank (shardtrain's default)", 1, 4096),
	OPT("workers", O_WORKERS, CLI_INT, "N",
	    "decode threads per rank (shardtrain's default)", 1, 1024),
	OPT("price-per-hour", O_PRICE, CLI_REAL, "USD",
	    "price of the job per hour, for cost per epoch", 0, 1e6),
	{ "cell-timeout", 0, O_TIMEOUT, CLI_DURATION, "TIME",
	    "a cell with no result by then fails (none;\n"
	    "--quick: 4m)", 1, 1e7, NULL, 0 },
	OPT("json", O_JSON, CLI_STRING, "FILE",
	    "also write study.json here (- for stdout)", 0, 0),
	END
};

static const struct cli_option link_opts[] = {
	{ "link-ttfb", 0, O_TTFB, CLI_DURATION, "TIME",
	    "time to first byte of every request (30ms)", 0, 600, NULL, 0 },
	OPT("link-conn-rate", O_CONN, CLI_SIZE, "SIZE",
	    "bytes/s of one connection (60 MB/s)", 1, 1e13),
	OPT("link-total-rate", O_TOTAL, CLI_SIZE, "SIZE",
	    "bytes/s of all connections (1 GB/s)", 1, 1e14),
	OPT("no-link", O_NO_LINK, CLI_FLAG, NULL,
	    "no emulated link: loopback speed", 0, 0),
	END
};

static const struct cli_group study_groups[] = {
	{ "matrix", matrix_opts },
	{ "runs", run_opts },
	{ "the emulated link", link_opts },
	{ NULL, NULL }
};

/* "a,b,c" against names: a bit mask, or a usage error. */
static unsigned
parse_set(const char *opt, const char *list, const char *const *names)
{
	char buf[256], *tok, *save;
	unsigned mask = 0;
	int i;

	if (fits(buf, sizeof buf, "%s", list) != 0)
		usage_error("--%s: the list is too long", opt);
	for (tok = strtok_r(buf, ",", &save); tok != NULL;
	    tok = strtok_r(NULL, ",", &save)) {
		for (i = 0; names[i] != NULL; i++)
			if (strcmp(tok, names[i]) == 0)
				break;
		if (names[i] == NULL)
			usage_error("--%s: no such choice: %s", opt, tok);
		mask |= 1u << i;
	}
	if (mask == 0)
		usage_error("--%s: the list is empty", opt);
	return mask;
}

static void
study_set(void *ctx, const struct cli_option *o, const struct cli_value *v)
{
	struct study_opts *p = ctx;

	switch (o->id) {
	case O_DATA: p->data = v->s; break;
	case O_OUT: p->out = v->s; break;
	case O_QUICK: p->quick = 1; break;
	case O_FORMS: p->forms = parse_set("forms", v->s, form_names); break;
	case O_SOURCES:
		p->sources = parse_set("sources", v->s, source_names);
		p->sources_given = 1;
		break;
	case O_STRATEGIES:
		p->strategies = parse_set("strategies", v->s, strategy_names);
		break;
	case O_RANKS: p->ranks = (int)v->i; break;
	case O_MODEL: p->model = v->s; break;
	case O_WIDTH: p->width = v->d; break;
	case O_SIZE: p->image_size = (int)v->i; break;
	case O_BATCH: p->batch = (int)v->i; break;
	case O_CLASSES: p->classes = (int)v->i; break;
	case O_PER_CLASS: p->per_class = (int)v->i; break;
	case O_STEPS: p->steps = (int)v->i; break;
	case O_EPOCHS: p->epochs = (int)v->i; break;
	case O_IO: p->io_streams = (int)v->i; break;
	case O_THREADS: p->threads = (int)v->i; break;
	case O_REPEATS: p->repeats = (int)v->i; break;
	case O_WORKERS: p->workers = (int)v->i; break;
	case O_TTFB: p->link.ttfb_ms = v->d * 1000; break;
	case O_CONN: p->link.conn_rate = (double)v->u; break;
	case O_TOTAL: p->link.total_rate = (double)v->u; break;
	case O_NO_LINK: p->link.enabled = 0; break;
	case O_BACKEND: p->backend = (int)v->i; break;
	case O_PRICE: p->price = v->d; break;
	case O_TIMEOUT: p->cell_timeout = v->d; break;
	case O_JSON: p->json = v->s; break;
	case O_REMOTE: p->remote = v->s; break;
	}
}

const struct cli_command study_command = {
	"study", "study [--quick] [--data DIR] [--out DIR] [--forms LIST] "
	"[--sources LIST]\n      [--strategies LIST] [--ranks N] [options]",
	"the seed study: files vs shards, local vs remote, 1 rank vs DDP/FSDP",
	"Run the same training on the same images as individual files and as\n"
	"shards, read from local disk, from nginx over HTTP, from S3 (moto) and\n"
	"GCS (gcp-storage-emulator) emulators and through a shardfs mount of the\n"
	"HTTP tree, every remote source behind an emulated cloud link; with one\n"
	"rank, DDP and FSDP (under mpirun). Each cell is a shardtrain run of its\n"
	"own. Prints the table of seconds per epoch and the findings, and writes\n"
	"DIR/study.json, DIR/study.svg and DIR/study.png. Servers, proxies and\n"
	"mounts it starts are stopped on every exit. A source whose programs are\n"
	"missing is skipped with the reason, unless --sources names it.\n",
	study_groups, 0, 0, study_main
};

static void
defaults(struct study_opts *o)
{
	if (o->forms == 0)
		o->forms = (1u << NFORMS) - 1;
	if (o->sources == 0)
		o->sources = (1u << NSOURCES) - 1;
	if (o->strategies == 0)
		o->strategies = (1u << NSTRATS) - 1;
	if (o->out == NULL)
		o->out = "study";
	if (o->model == NULL)
		o->model = QUICK_MODEL;
	if (o->width == 0)
		o->width = o->quick ? QUICK_WIDTH : 1;
	if (o->image_size == 0)
		o->image_size = o->quick ? QUICK_SIZE : 224;
	if (o->batch == 0)
		o->batch = QUICK_BATCH;
	if (o->classes == 0 && o->data == NULL)
		o->classes = o->quick ? QUICK_CLASSES : 100;
	if (o->per_class == 0)
		o->per_class = o->quick ? QUICK_PER_CLASS : 50;
	if (o->epochs == 0)
		o->epochs = 1;
	if (o->repeats == 0)
		o->repeats = 1;
	if (o->cell_timeout == 0 && o->quick)
		o->cell_timeout = QUICK_TIMEOUT;
	if (o->steps > 0 && o->epochs > 1)
		usage_error("--steps and --epochs: give one");
}

int
study_main(int argc, char **argv)
{
	struct study s;
	struct findings fd = { NULL, 0 };
	char err[1024], path[PATH_MAX + 32], out[PATH_MAX];
	const char *why;
	int i, src, ok = 0;

	memset(&s, 0, sizeof s);
	s.o.ranks = 2;
	s.o.link.enabled = 1;
	s.o.link.ttfb_ms = LINK_TTFB_MS;
	s.o.link.conn_rate = LINK_CONN_RATE;
	s.o.link.total_rate = LINK_TOTAL_RATE;
	cli_parse(&study_command, argc, argv, study_set, &s.o);
	defaults(&s.o);

	mkdir_p(s.o.out);
	if (realpath(s.o.out, out) == NULL)
		die("%s: %s", s.o.out, strerror(errno));
	s.o.out = out;
	pathf(path, sizeof path, "%s/cells", out);
	mkdir_p(path);
	pathf(s.work, sizeof s.work, "%s/work", out);
	mkdir_p(s.work);
	the_study = &s;
	cli_set_exit_hook(exit_hook);
	catch_signals();

	find_tools(&s);
	if (s.o.strategies & ~(1u << ST_SINGLE))
		check_mpirun(&s);
	/* What cannot run is known before any data is made. */
	pathf(s.root, sizeof s.root, "%s/data", out);
	mkdir_p(s.root);
	if (study_env_open(&s.env, s.work, s.root, &s.o.link, err,
	    sizeof err) != 0)
		die("%s", err);
	if (s.o.remote != NULL) {
		if (study_env_remote(s.env, s.o.remote, err, sizeof err) != 0)
			die("%s", err);
		s.o.link.enabled = 0;
	}
	for (src = 0; src < NSOURCES; src++)
		if (s.o.sources_given && (s.o.sources & 1u << src) &&
		    (why = study_env_missing(s.env, source_names[src])) != NULL)
			die("--sources names %s, which cannot run here: %s",
			    source_names[src], why);
	if (s.o.sources_given && (s.o.strategies & ~(1u << ST_SINGLE)) &&
	    s.mpirun_why != NULL)
		warn("ddp and fsdp cells are skipped: %s", s.mpirun_why);
	prepare_data(&s);
	if (stop_signal)
		stop_now();

	/*
	 * The cells share the cores with the servers, the proxies and each
	 * other: threads that spin at a barrier would take the core a server
	 * needs, and a cell's time would swing by half between runs (measured
	 * on 2 cores: 2.9 to 5.4 s for one cell). Waiting threads sleep
	 * instead, unless the user chose otherwise.
	 */
	setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
	make_cells(&s);
	run_cells(&s);
	if (study_env_remote_note(s.env) != NULL)
		snprintf(s.remote_note, sizeof s.remote_note, "%s",
		    study_env_remote_note(s.env));
	study_env_close(s.env);
	s.env = NULL;

	tout = s.o.json != NULL && strcmp(s.o.json, "-") == 0 ? stderr :
	    stdout;
	per_setup(&s, &fd);
	findings(&s, &fd);
	if (fd.n == 0)
		add(&fd, "No finding: no remote cell ran to compare with local "
		    "disk.");
	print_table(&s, 0);
	if (s.o.price > 0)
		print_table(&s, 1);
	if (s.remote_note[0])
		fprintf(tout, "\nremote: %s\n", s.remote_note);
	fprintf(tout, "\nfindings:\n");
	for (i = 0; i < fd.n; i++)
		fprintf(tout, "  - %s\n", fd.v[i]);
	for (i = 0; i < s.ncells; i++) {
		if (s.cells[i].status == CELL_OK)
			ok++;
		else if (s.cells[i].status == CELL_SKIPPED)
			fprintf(tout, "  skipped: %s from %s (%s): %s\n",
			    form_names[s.cells[i].form],
			    source_names[s.cells[i].source],
			    strategy_names[s.cells[i].strategy],
			    s.cells[i].why);
		else
			fprintf(tout, "  failed: %s from %s (%s): %s\n",
			    form_names[s.cells[i].form],
			    source_names[s.cells[i].source],
			    strategy_names[s.cells[i].strategy],
			    s.cells[i].why);
	}
	fflush(stdout);
	pathf(path, sizeof path, "%s/study.json", out);
	write_json(&s, path, &fd);
	if (s.o.json != NULL)
		write_json(&s, s.o.json, &fd);
	plot(&s);
	if (!cli_quiet)
		fprintf(stderr, "%s: %d of %d cells ran; %s/study.json, "
		    "study.svg, study.png\n", cli_prog(), ok, s.ncells, out);
	for (i = 0; i < s.ncells; i++)
		json_decref(s.cells[i].remote);
	for (i = 0; i < fd.n; i++)
		free(fd.v[i]);
	free(fd.v);
	free(s.cells);
	the_study = NULL;
	return ok > 0 ? 0 : CLI_EXIT_FAILURE;
}
