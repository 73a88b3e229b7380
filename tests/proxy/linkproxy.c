/*
 * linkproxy.c - an HTTP/1.1 reverse proxy that emulates a cloud object
 * store's link on loopback (time to first byte, per-connection and
 * aggregate bandwidth) and injects faults on a seeded schedule, for the
 * tests and benchmarks. One thread per client connection, blocking sockets.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/types.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/*
 * Defaults: round figures for a cloud bucket seen from a VM in the same
 * region, taken from the providers' public docs and published benchmarks,
 * not measured here: tens of ms time to first byte for a GCS or S3 GET
 * (30 ms), roughly 50-100 MB/s for a single TCP stream to GCS or S3
 * (60 MB/s), and an aggregate bounded by the VM's NIC, ~10 Gbit/s or about
 * 1.25 GB/s (1 GB/s). Change them per run with --ttfb, --conn-rate and
 * --total-rate.
 */
#define DEF_TTFB_MS	30
#define DEF_CONN_RATE	60e6
#define DEF_TOTAL_RATE	1e9

#define RELAY_SIZE	(256 * 1024)	/* relay buffer, one per connection */
#define HEAD_MAX	(64 * 1024)	/* request or response head */
#define HBUF_SIZE	(HEAD_MAX + 16 * 1024)	/* rewritten heads */
#define MAX_HDRS	256
#define MAX_CONNS	1024		/* bounds memory: ~400 KiB each */
#define MAX_REPLACED	4096
#define MAX_REPLACE_PATH 4096
#define IO_TIMEOUT_S	120
#define UNKNOWN_LEN_CUT	(1024 * 1024)	/* cut point base for bodies of unknown length */

/* An ETag of a replaced object: "abc" becomes "r1-abc". */
#define REPLACE_TAG	"r1-"
/* Later than any file an nginx root can hold today. */
#define REPLACE_DATE	"Thu, 01 Jan 2099 00:00:00 GMT"

enum {
	F_503,
	F_429,
	F_RESET,
	F_SHORT,
	F_STALL,
	F_REPLACE,
	F_UPCUT,
	NFAULT
};
#define F_NONE (-1)

static const char *const fault_names[NFAULT] = {
	"503", "429", "reset", "short", "stall", "replace", "upcut"
};

enum { BODY_NONE, BODY_LEN, BODY_CHUNKED, BODY_CLOSE };

static struct {
	struct sockaddr_storage	 up_addr;
	socklen_t		 up_len;
	uint64_t		 ttfb_ns;
	double			 conn_rate;
	double			 total_rate;
	size_t			 quantum;	/* most bytes per throttled send */
	uint64_t		 seed;
	double			 fault_rate;
	int			 kinds[NFAULT];	/* enabled kinds */
	int			 nkinds;
	const char		*fault_match;
	uint64_t		 fault_min_offset;
	uint64_t		 fault_after;
	uint64_t		 max_faults;
	unsigned		 retry_after;
	double			 stall_s;
	const char		*stats_path;
	FILE			*log;
} cfg;

static atomic_uint_fast64_t n_requests;	/* also numbers requests */
static atomic_uint_fast64_t n_bytes;	/* response body bytes to clients */
static atomic_uint_fast64_t n_conns;
static atomic_uint_fast64_t n_faults[NFAULT];
static atomic_uint_fast64_t faults_used;	/* reservations for --max-faults */
static atomic_int active_conns;
static volatile sig_atomic_t stopping;

/* -------------------------------------------------------------------- */
/* Errors and time                                                      */
/* -------------------------------------------------------------------- */

static void
die(const char *fmt, ...)
{
	va_list ap;

	fputs("linkproxy: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void
usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("linkproxy: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'linkproxy --help'.\n", stderr);
	exit(2);
}

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void
sleep_until(uint64_t t)
{
	struct timespec ts;

	ts.tv_sec = (time_t)(t / 1000000000u);
	ts.tv_nsec = (long)(t % 1000000000u);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	    EINTR)
		;
}

/* -------------------------------------------------------------------- */
/* Bandwidth                                                            */
/* -------------------------------------------------------------------- */

/*
 * A token bucket that may go into debt: a sender reserves its bytes and
 * sleeps until the debt is paid. Senders queue in reservation order, and
 * each connection holds at most one reservation at a time, so the global
 * bucket shares fairly without a scheduler.
 */
struct bucket {
	double		tokens;
	double		rate;	/* bytes per second */
	double		burst;
	uint64_t	last;	/* ns */
};

static struct bucket global_bucket;
static pthread_mutex_t global_lock = PTHREAD_MUTEX_INITIALIZER;

/* Burst: 64 KiB or 1 ms worth, whichever is larger. */
static double
bucket_burst(double rate)
{
	return rate / 1000 > 65536 ? rate / 1000 : 65536;
}

static void
bucket_init(struct bucket *b, double rate)
{
	b->rate = rate;
	b->burst = bucket_burst(rate);
	b->tokens = b->burst;
	b->last = now_ns();
}

/* Returns how many ns the caller must wait before sending n bytes. */
static uint64_t
bucket_take(struct bucket *b, size_t n, uint64_t now)
{
	if (now > b->last) {
		b->tokens += (double)(now - b->last) * b->rate / 1e9;
		if (b->tokens > b->burst)
			b->tokens = b->burst;
		b->last = now;
	}
	b->tokens -= (double)n;
	if (b->tokens >= 0)
		return 0;
	return (uint64_t)(-b->tokens / b->rate * 1e9);
}

static void
throttle(struct bucket *conn, size_t n)
{
	uint64_t now, w = 0, w2;

	if (conn->rate <= 0 && cfg.total_rate <= 0)
		return;
	now = now_ns();
	if (conn->rate > 0)
		w = bucket_take(conn, n, now);
	if (cfg.total_rate > 0) {
		pthread_mutex_lock(&global_lock);
		w2 = bucket_take(&global_bucket, n, now);
		pthread_mutex_unlock(&global_lock);
		if (w2 > w)
			w = w2;
	}
	/* A short wait stays as debt and is slept off with the next one. */
	if (w > 50000)
		sleep_until(now + w);
}

/* -------------------------------------------------------------------- */
/* Stats and log                                                        */
/* -------------------------------------------------------------------- */

/*
 * Writers bump stats_gen and then write if nobody else is writing; the
 * thread holding stats_lock rewrites until the file matches the latest
 * generation, so every update lands without threads queueing on the lock.
 */
static atomic_uint_fast64_t stats_gen;
static uint64_t stats_written;		/* under stats_lock */
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;

static void
stats_write(void)
{
	char buf[1024], tmp[PATH_MAX];
	int fd, len;
	ssize_t n;

	len = snprintf(buf, sizeof buf,
	    "{\"requests\": %" PRIu64 ", \"bytes\": %" PRIu64 ", "
	    "\"faults\": {\"503\": %" PRIu64 ", \"429\": %" PRIu64 ", "
	    "\"reset\": %" PRIu64 ", \"short\": %" PRIu64 ", "
	    "\"stall\": %" PRIu64 ", \"replace\": %" PRIu64 ", "
	    "\"upcut\": %" PRIu64 "}, "
	    "\"connections\": %" PRIu64 "}\n",
	    (uint64_t)atomic_load(&n_requests), (uint64_t)atomic_load(&n_bytes),
	    (uint64_t)atomic_load(&n_faults[F_503]),
	    (uint64_t)atomic_load(&n_faults[F_429]),
	    (uint64_t)atomic_load(&n_faults[F_RESET]),
	    (uint64_t)atomic_load(&n_faults[F_SHORT]),
	    (uint64_t)atomic_load(&n_faults[F_STALL]),
	    (uint64_t)atomic_load(&n_faults[F_REPLACE]),
	    (uint64_t)atomic_load(&n_faults[F_UPCUT]),
	    (uint64_t)atomic_load(&n_conns));
	if (snprintf(tmp, sizeof tmp, "%s.tmp", cfg.stats_path) >=
	    (int)sizeof tmp)
		return;
	fd = open(tmp, O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	n = write(fd, buf, (size_t)len);
	if (close(fd) != 0 || n != len) {
		unlink(tmp);
		return;
	}
	rename(tmp, cfg.stats_path);
}

static void
stats_update(int wait)
{
	uint64_t g;

	if (cfg.stats_path == NULL)
		return;
	atomic_fetch_add(&stats_gen, 1);
	do {
		if (wait)
			pthread_mutex_lock(&stats_lock);
		else if (pthread_mutex_trylock(&stats_lock) != 0)
			return;
		while ((g = atomic_load(&stats_gen)) != stats_written) {
			stats_written = g;
			stats_write();
		}
		pthread_mutex_unlock(&stats_lock);
	} while (atomic_load(&stats_gen) != g);
}

/* -------------------------------------------------------------------- */
/* Replaced objects                                                     */
/* -------------------------------------------------------------------- */

/*
 * Entries are appended under replaced_lock and published by bumping
 * n_replaced, and never removed, so lookups scan without the lock; only
 * the etag field changes later, and it is read and written under the lock.
 */
struct replaced {
	uint64_t	 hash;
	char		*path;
	size_t		 len;
	char		 etag[256];	/* current (rewritten) ETag, "" unknown */
};

static struct replaced replaced[MAX_REPLACED];
static atomic_int n_replaced;
static pthread_mutex_t replaced_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t
mix64(uint64_t x)
{
	/* splitmix64's finalizer */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

static uint64_t
hash_bytes(const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;	/* FNV-1a */
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ (unsigned char)p[i]) * 0x100000001b3ULL;
	return h;
}

static int
replaced_find(const char *path, size_t len)
{
	uint64_t h;
	int i, n;

	n = atomic_load_explicit(&n_replaced, memory_order_acquire);
	if (n == 0)
		return -1;
	h = hash_bytes(path, len);
	for (i = 0; i < n; i++) {
		if (replaced[i].hash == h && replaced[i].len == len &&
		    memcmp(replaced[i].path, path, len) == 0)
			return i;
	}
	return -1;
}

static int
replaced_add(const char *path, size_t len)
{
	struct replaced *e;
	int i, n;

	if (len > MAX_REPLACE_PATH)
		return -1;
	pthread_mutex_lock(&replaced_lock);
	if ((i = replaced_find(path, len)) >= 0)
		goto out;
	n = atomic_load(&n_replaced);
	i = -1;
	if (n == MAX_REPLACED)
		goto out;
	e = &replaced[n];
	if ((e->path = malloc(len + 1)) == NULL)
		goto out;
	memcpy(e->path, path, len);
	e->path[len] = '\0';
	e->len = len;
	e->hash = hash_bytes(path, len);
	e->etag[0] = '\0';
	atomic_store_explicit(&n_replaced, n + 1, memory_order_release);
	i = n;
out:
	pthread_mutex_unlock(&replaced_lock);
	return i;
}

/* -------------------------------------------------------------------- */
/* HTTP parsing                                                         */
/* -------------------------------------------------------------------- */

struct hdr {
	const char	*line;	/* whole line with its line end */
	size_t		 linelen;
	const char	*name;
	size_t		 nlen;
	const char	*val;	/* trimmed */
	size_t		 vlen;
};

struct conn {
	int		 cfd;
	int		 ufd;
	char		*cbuf;		/* client input: heads and leftovers */
	size_t		 cstart;
	size_t		 cend;
	char		*buf;		/* relay buffer, also response heads */
	char		*hbuf;		/* rewritten heads */
	size_t		 hblen;
	struct bucket	 bucket;
	struct hdr	 hdrs[MAX_HDRS];
	int		 nhdrs;
	size_t		 firstlen;	/* the head's first line */
};

struct req {
	uint64_t	 num;
	uint64_t	 t0;		/* head received, ns */
	const char	*method;
	size_t		 mlen;
	const char	*target;
	size_t		 tlen;
	int		 is_head;
	int		 keepalive;
	int		 expect;	/* Expect: 100-continue */
	uint64_t	 clen;		/* request body */
	uint64_t	 range_from;	/* Range: bytes=N-, else 0 */
	int		 fault;
	double		 frac;		/* where a cut fault cuts, 0.1..0.9 */
	int		 rep;		/* replaced entry or -1 */
	int		 status;
	uint64_t	 sent;		/* body bytes sent to the client */
	int		 done;		/* logged and counted */
};

struct resp {
	int		 status;
	int		 http10;
	int		 close;		/* the upstream closes after this one */
	int		 mode;		/* BODY_* */
	uint64_t	 len;
	size_t		 hlen;
};

static int
hdr_is(const struct hdr *h, const char *name)
{
	return strlen(name) == h->nlen && strncasecmp(h->name, name,
	    h->nlen) == 0;
}

/* Whether a comma-separated header value lists token (case-insensitive). */
static int
has_token(const char *v, size_t n, const char *token)
{
	size_t i = 0, j, tl = strlen(token), e;

	while (i < n) {
		while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		j = i;
		while (j < n && v[j] != ',')
			j++;
		e = j;
		while (e > i && (v[e - 1] == ' ' || v[e - 1] == '\t'))
			e--;
		if (e - i == tl && strncasecmp(v + i, token, tl) == 0)
			return 1;
		i = j;
	}
	return 0;
}

/* Offset just past the empty line that ends a head, or 0 if not seen. */
static size_t
head_end(const char *p, size_t n, size_t from)
{
	const char *q;
	size_t i;

	for (i = from; i < n; i = (size_t)(q - p) + 1) {
		q = memchr(p + i, '\n', n - i);
		if (q == NULL)
			return 0;
		if ((size_t)(q - p) + 1 < n && q[1] == '\n')
			return (size_t)(q - p) + 2;
		if ((size_t)(q - p) + 2 < n && q[1] == '\r' && q[2] == '\n')
			return (size_t)(q - p) + 3;
	}
	return 0;
}

/*
 * Split a head's header lines (after its first line) into c->hdrs.
 * Returns the first line's length, or -1 if malformed. Obsolete line
 * folding is refused (RFC 9112 5.2 allows that).
 */
static ssize_t
parse_head(struct conn *c, const char *p, size_t n)
{
	const char *q, *line, *colon, *v, *e;
	size_t first, i;

	q = memchr(p, '\n', n);
	if (q == NULL)
		return -1;
	first = (size_t)(q - p) + 1;
	c->firstlen = first;
	c->nhdrs = 0;
	for (i = first; i < n; i = (size_t)(q - p) + 1) {
		line = p + i;
		q = memchr(line, '\n', n - i);
		if (q == NULL)
			return -1;
		if (q == line || (q == line + 1 && line[0] == '\r'))
			break;		/* the empty line */
		if (line[0] == ' ' || line[0] == '\t')
			return -1;
		colon = memchr(line, ':', (size_t)(q - line));
		if (colon == NULL || colon == line)
			return -1;
		if (c->nhdrs == MAX_HDRS)
			return -1;
		v = colon + 1;
		e = q;
		while (v < e && (*v == ' ' || *v == '\t'))
			v++;
		while (e > v && (e[-1] == '\r' || e[-1] == ' ' ||
		    e[-1] == '\t'))
			e--;
		c->hdrs[c->nhdrs].line = line;
		c->hdrs[c->nhdrs].linelen = (size_t)(q - line) + 1;
		c->hdrs[c->nhdrs].name = line;
		c->hdrs[c->nhdrs].nlen = (size_t)(colon - line);
		c->hdrs[c->nhdrs].val = v;
		c->hdrs[c->nhdrs].vlen = (size_t)(e - v);
		c->nhdrs++;
	}
	return (ssize_t)first;
}

static int
parse_u64(const char *p, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (n == 0 || n > 19)
		return -1;
	for (i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(p[i] - '0');
	}
	*out = v;
	return 0;
}

/*
 * Chunked transfer coding (RFC 9112 7.1), walked as it streams past so
 * the relay knows where the body ends and which bytes are chunk data.
 */
enum {
	CH_SIZE, CH_EXT, CH_DATA, CH_DATA_END, CH_TRAILER, CH_TRAILER_LINE,
	CH_LAST_LF, CH_DONE
};

struct chunkst {
	int		state;
	int		digits;
	uint64_t	size;	/* chunk size, then data bytes left */
};

static void
xor_bytes(unsigned char *p, size_t n)
{
	uint64_t w;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		memcpy(&w, p + i, 8);
		w ^= 0x5a5a5a5a5a5a5a5aULL;
		memcpy(p + i, &w, 8);
	}
	for (; i < n; i++)
		p[i] ^= 0x5a;
}

static int
hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static void
chunk_size_done(struct chunkst *st)
{
	st->state = st->size == 0 ? CH_TRAILER : CH_DATA;
}

/*
 * Walk n bytes, XORing chunk data if asked. Returns how many bytes belong
 * to the message (fewer than n only when it ends inside them), or -1 if
 * the coding is malformed.
 */
static ssize_t
chunk_scan(struct chunkst *st, unsigned char *p, size_t n, int xor)
{
	size_t i = 0, k;
	int ch, v;

	while (i < n && st->state != CH_DONE) {
		if (st->state == CH_DATA) {
			k = n - i;
			if (k > st->size)
				k = (size_t)st->size;
			if (xor)
				xor_bytes(p + i, k);
			i += k;
			st->size -= k;
			if (st->size == 0)
				st->state = CH_DATA_END;
			continue;
		}
		ch = p[i++];
		switch (st->state) {
		case CH_SIZE:
			if ((v = hexval(ch)) >= 0) {
				if (st->size >> 56)
					return -1;
				st->size = st->size * 16 + (uint64_t)v;
				st->digits++;
			} else if (st->digits == 0)
				return -1;
			else if (ch == '\n')
				chunk_size_done(st);
			else
				st->state = CH_EXT;
			break;
		case CH_EXT:
			if (ch == '\n')
				chunk_size_done(st);
			break;
		case CH_DATA_END:
			if (ch == '\n') {
				st->state = CH_SIZE;
				st->size = 0;
				st->digits = 0;
			} else if (ch != '\r')
				return -1;
			break;
		case CH_TRAILER:
			if (ch == '\n')
				st->state = CH_DONE;
			else if (ch == '\r')
				st->state = CH_LAST_LF;
			else
				st->state = CH_TRAILER_LINE;
			break;
		case CH_TRAILER_LINE:
			if (ch == '\n')
				st->state = CH_TRAILER;
			break;
		case CH_LAST_LF:
			if (ch != '\n')
				return -1;
			st->state = CH_DONE;
			break;
		}
	}
	return (ssize_t)i;
}

/* -------------------------------------------------------------------- */
/* Sockets                                                              */
/* -------------------------------------------------------------------- */

static int
send_all(int fd, const void *p, size_t n)
{
	const char *s = p;
	ssize_t k;

	while (n > 0) {
		k = send(fd, s, n, MSG_NOSIGNAL);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		s += k;
		n -= (size_t)k;
	}
	return 0;
}

static ssize_t
recv_some(int fd, void *p, size_t n, int flags)
{
	ssize_t k;

	do
		k = recv(fd, p, n, flags);
	while (k < 0 && errno == EINTR);
	return k;
}

static void
sock_setup(int fd)
{
	struct timeval tv = { IO_TIMEOUT_S, 0 };
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static int
parse_hostport(const char *arg, char **host, char **port)
{
	const char *colon;
	char *h;

	colon = strrchr(arg, ':');
	if (colon == NULL || colon[1] == '\0')
		return -1;
	if (arg[0] == '[') {
		if (colon == arg || colon[-1] != ']')
			return -1;
		h = strndup(arg + 1, (size_t)(colon - arg) - 2);
	} else
		h = strndup(arg, (size_t)(colon - arg));
	if (h == NULL)
		return -1;
	*host = h;
	*port = strdup(colon + 1);
	return *port == NULL ? -1 : 0;
}

static void
upstream_close(struct conn *c)
{
	if (c->ufd >= 0)
		close(c->ufd);
	c->ufd = -1;
}

/* Whether the idle upstream connection can take a request. */
static int
upstream_alive(struct conn *c)
{
	struct pollfd pfd;

	if (c->ufd < 0)
		return 0;
	pfd.fd = c->ufd;
	pfd.events = POLLIN;
	pfd.revents = 0;
	if (poll(&pfd, 1, 0) == 0)
		return 1;
	/* Readable while idle: closed by the server, or junk. */
	upstream_close(c);
	return 0;
}

static int
upstream_open(struct conn *c)
{
	int fd;

	fd = socket(cfg.up_addr.ss_family, SOCK_STREAM|SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&cfg.up_addr, cfg.up_len) != 0) {
		close(fd);
		return -1;
	}
	sock_setup(fd);
	c->ufd = fd;
	return 0;
}

/* -------------------------------------------------------------------- */
/* Requests                                                             */
/* -------------------------------------------------------------------- */

static int
fault_pick(struct req *r)
{
	uint64_t h1, h2, h3;
	int kind;

	if (cfg.fault_rate <= 0 || cfg.nkinds == 0)
		return F_NONE;
	if (r->num < cfg.fault_after)
		return F_NONE;
	if (cfg.fault_match != NULL && memmem(r->target, r->tlen,
	    cfg.fault_match, strlen(cfg.fault_match)) == NULL)
		return F_NONE;
	if (r->range_from < cfg.fault_min_offset)
		return F_NONE;
	h1 = mix64(cfg.seed * 0x9e3779b97f4a7c15ULL ^ mix64(r->num + 1));
	if ((double)(h1 >> 11) * 0x1p-53 >= cfg.fault_rate)
		return F_NONE;
	h2 = mix64(h1 + 1);
	h3 = mix64(h2 + 1);
	kind = cfg.kinds[h2 % (uint64_t)cfg.nkinds];
	/* Only a request with a body can be cut on its way up. */
	if (kind == F_UPCUT && r->clen == 0)
		return F_NONE;
	if (cfg.max_faults != 0 &&
	    atomic_fetch_add(&faults_used, 1) >= cfg.max_faults)
		return F_NONE;
	r->frac = 0.1 + 0.8 * (double)(h3 >> 11) * 0x1p-53;
	return kind;
}

static void
log_request(const struct req *r)
{
	if (cfg.log == NULL)
		return;
	fprintf(cfg.log, "%" PRIu64 " %.*s %.*s %d %s %" PRIu64 "\n",
	    r->num, (int)r->mlen, r->method, (int)r->tlen, r->target,
	    r->status, r->fault == F_NONE ? "-" : fault_names[r->fault],
	    r->sent);
}

/*
 * Log and count a request. Called before the client can see the end of
 * the response (its last bytes, or the close), so a test that has its
 * whole response always finds it in the stats.
 */
static void
request_done(struct req *r)
{
	if (r->done)
		return;
	r->done = 1;
	log_request(r);
	stats_update(0);
}

/* Append to c->hbuf; on overflow hblen goes past the end and sticks. */
static void
hb_add(struct conn *c, const char *p, size_t n)
{
	if (c->hblen + n > HBUF_SIZE) {
		c->hblen = HBUF_SIZE + 1;
		return;
	}
	memcpy(c->hbuf + c->hblen, p, n);
	c->hblen += n;
}

static void
hb_str(struct conn *c, const char *s)
{
	hb_add(c, s, strlen(s));
}

/*
 * Strong comparison of an If-Match list against the replaced object's
 * current tag (RFC 9110 13.1.1: a weak tag never matches). With the tag
 * not yet known, any tag this proxy made matches.
 */
static int
etag_list_match(const char *v, size_t n, const char *cur)
{
	size_t i = 0, j, cl = strlen(cur);
	int weak;

	while (i < n) {
		while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		if (i == n)
			break;
		if (v[i] == '*')
			return 1;
		weak = 0;
		if (n - i >= 2 && v[i] == 'W' && v[i + 1] == '/') {
			weak = 1;
			i += 2;
		}
		if (i >= n || v[i] != '"')
			return 0;
		for (j = i + 1; j < n && v[j] != '"'; j++)
			;
		if (j == n)
			return 0;
		j++;
		if (!weak) {
			if (cl != 0 && j - i == cl && memcmp(v + i, cur, cl) == 0)
				return 1;
			if (cl == 0 && j - i > 4 &&
			    memcmp(v + i, "\"" REPLACE_TAG, 4) == 0)
				return 1;
		}
		i = j;
	}
	return 0;
}

static void
replaced_etag(int rep, char *out, size_t size)
{
	pthread_mutex_lock(&replaced_lock);
	snprintf(out, size, "%s", replaced[rep].etag);
	pthread_mutex_unlock(&replaced_lock);
}

/*
 * Judge a replaced object's preconditions here, since the upstream would
 * judge them against the original. Returns 412 or 0, and sets *drop_range
 * when an If-Range names another representation (RFC 9110 13.1.5).
 */
static int
replaced_preconditions(struct conn *c, struct req *r, int *drop_range)
{
	const struct hdr *h;
	char cur[256];
	int i;

	replaced_etag(r->rep, cur, sizeof cur);
	*drop_range = 0;
	for (i = 0; i < c->nhdrs; i++) {
		h = &c->hdrs[i];
		if (hdr_is(h, "If-Match")) {
			if (!etag_list_match(h->val, h->vlen, cur))
				return 412;
		} else if (hdr_is(h, "If-Unmodified-Since")) {
			/* Any date a client holds is before REPLACE_DATE. */
			if (h->vlen != strlen(REPLACE_DATE) ||
			    memcmp(h->val, REPLACE_DATE, h->vlen) != 0)
				return 412;
		} else if (hdr_is(h, "If-Range")) {
			if (h->vlen > 0 && (h->val[0] == '"' || h->val[0] == 'W'))
				*drop_range = !(h->val[0] == '"' &&
				    etag_list_match(h->val, h->vlen, cur));
			else
				*drop_range = h->vlen != strlen(REPLACE_DATE) ||
				    memcmp(h->val, REPLACE_DATE, h->vlen) != 0;
		}
	}
	return 0;
}

/*
 * Consume the request body from the client, to upstream or to nowhere;
 * only its first 'upto' bytes when that is less than the body (the rest
 * stays unread: the connection is then cut).
 */
static int
relay_request_body(struct conn *c, struct req *r, int to, uint64_t upto)
{
	uint64_t left = r->clen < upto ? r->clen : upto;
	const char *p;
	size_t n;
	ssize_t k;

	while (left > 0) {
		if (c->cstart < c->cend) {
			n = c->cend - c->cstart;
			if (n > left)
				n = (size_t)left;
			p = c->cbuf + c->cstart;
			c->cstart += n;
		} else {
			n = cfg.quantum;
			if (n > left)
				n = (size_t)left;
			k = recv_some(c->cfd, c->buf, n, 0);
			if (k <= 0)
				return -2;
			n = (size_t)k;
			p = c->buf;
		}
		left -= n;
		if (to < 0)
			continue;
		throttle(&c->bucket, n);
		if (send_all(to, p, n) != 0)
			return -1;
	}
	return 0;
}

/*
 * Answer without the upstream (injected 503/429, 412, 4xx/5xx of our own).
 * Returns 0 if the connection stays usable.
 */
static int
respond_local(struct conn *c, struct req *r, int code, const char *reason,
    const char *extra)
{
	char head[512], body[128];
	int hl, bl, close_after = !r->keepalive;

	if (r->clen > 0) {
		/* With Expect the client waits for us: do not read. */
		if (r->expect || relay_request_body(c, r, -1, UINT64_MAX) != 0)
			close_after = 1;
	}
	bl = snprintf(body, sizeof body, "linkproxy: %d %s\n", code, reason);
	hl = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\n"
	    "Content-Type: text/plain\r\nContent-Length: %d\r\n%s%s\r\n",
	    code, reason, bl, extra != NULL ? extra : "",
	    close_after ? "Connection: close\r\n" : "");
	sleep_until(r->t0 + cfg.ttfb_ns);
	r->status = code;
	if (!r->is_head) {
		r->sent = (uint64_t)bl;
		atomic_fetch_add(&n_bytes, (uint64_t)bl);
	}
	request_done(r);
	if (send_all(c->cfd, head, (size_t)hl) != 0 || (!r->is_head &&
	    send_all(c->cfd, body, (size_t)bl) != 0))
		return -1;
	return close_after ? -1 : 0;
}

/* An error before any request could be numbered sensibly: answer, close. */
static void
respond_bad(struct conn *c, int code, const char *reason)
{
	struct req r;

	memset(&r, 0, sizeof r);
	r.num = atomic_fetch_add(&n_requests, 1);
	r.t0 = now_ns();
	r.method = "-";
	r.mlen = 1;
	r.target = "-";
	r.tlen = 1;
	r.fault = F_NONE;
	r.rep = -1;
	respond_local(c, &r, code, reason, NULL);
	request_done(&r);
}

/*
 * Read a request head into cbuf. Returns its length, 0 on a clean close
 * between requests, -1 on error, -2 when it exceeds HEAD_MAX.
 */
static ssize_t
read_request_head(struct conn *c)
{
	size_t scan = 0, e;
	ssize_t k;

	for (;;) {
		/* RFC 9112 2.2: ignore empty lines before a request line. */
		while (c->cstart < c->cend && (c->cbuf[c->cstart] == '\r' ||
		    c->cbuf[c->cstart] == '\n'))
			c->cstart++;
		if (c->cstart == c->cend)
			c->cstart = c->cend = scan = 0;
		if (c->cend > c->cstart) {
			e = head_end(c->cbuf + c->cstart, c->cend - c->cstart,
			    scan);
			if (e != 0)
				return (ssize_t)e;
			scan = c->cend - c->cstart;
			scan = scan > 3 ? scan - 3 : 0;
		}
		if (c->cend - c->cstart >= HEAD_MAX)
			return -2;
		if (c->cend == HEAD_MAX) {
			memmove(c->cbuf, c->cbuf + c->cstart,
			    c->cend - c->cstart);
			c->cend -= c->cstart;
			c->cstart = 0;
		}
		k = recv_some(c->cfd, c->cbuf + c->cend, HEAD_MAX - c->cend, 0);
		if (k == 0 && c->cend == c->cstart)
			return 0;
		if (k <= 0)
			return -1;
		c->cend += (size_t)k;
	}
}

/*
 * Read a response head into c->buf, which holds *got bytes already and
 * may also take the start of the body: *got says how much it holds.
 * Returns 0, -1 on I/O error, -2 when too large, -3 when the upstream
 * closed before sending a byte.
 */
static int
read_response_head(struct conn *c, struct resp *rs, size_t *got)
{
	size_t scan = 0, e;
	ssize_t k;

	for (;;) {
		if (*got > 0 && (e = head_end(c->buf, *got, scan)) != 0) {
			rs->hlen = e;
			return 0;
		}
		scan = *got > 3 ? *got - 3 : 0;
		if (*got >= HEAD_MAX)
			return -2;
		k = recv_some(c->ufd, c->buf + *got, RELAY_SIZE - *got, 0);
		if (k == 0 && *got == 0)
			return -3;
		if (k <= 0)
			return -1;
		*got += (size_t)k;
	}
}

static int
parse_response(struct conn *c, struct req *r, struct resp *rs)
{
	const struct hdr *h;
	uint64_t v;
	int i, http10, has_len = 0, chunked = 0, te = 0, keep = 0;

	if (parse_head(c, c->buf, rs->hlen) < 0)
		return -1;
	if (rs->hlen < 12 || memcmp(c->buf, "HTTP/1.", 7) != 0 ||
	    c->buf[8] != ' ' || c->buf[9] < '1' || c->buf[9] > '5' ||
	    c->buf[10] < '0' || c->buf[10] > '9' || c->buf[11] < '0' ||
	    c->buf[11] > '9')
		return -1;
	rs->http10 = http10 = c->buf[7] == '0';
	rs->status = (c->buf[9] - '0') * 100 + (c->buf[10] - '0') * 10 +
	    (c->buf[11] - '0');
	rs->close = 0;
	rs->len = 0;
	for (i = 0; i < c->nhdrs; i++) {
		h = &c->hdrs[i];
		if (hdr_is(h, "Content-Length")) {
			if (parse_u64(h->val, h->vlen, &v) != 0 ||
			    (has_len && v != rs->len))
				return -1;
			rs->len = v;
			has_len = 1;
		} else if (hdr_is(h, "Transfer-Encoding")) {
			te = 1;
			/* RFC 9112 6.3: chunked must be the last coding. */
			chunked = h->vlen >= 7 && strncasecmp(h->val +
			    h->vlen - 7, "chunked", 7) == 0;
		} else if (hdr_is(h, "Connection")) {
			if (has_token(h->val, h->vlen, "close"))
				rs->close = 1;
			if (has_token(h->val, h->vlen, "keep-alive"))
				keep = 1;
		}
	}
	if (http10 && !keep)
		rs->close = 1;
	if (r->is_head || rs->status < 200 || rs->status == 204 ||
	    rs->status == 304)
		rs->mode = BODY_NONE;
	else if (te)
		rs->mode = chunked ? BODY_CHUNKED : BODY_CLOSE;
	else if (has_len)
		rs->mode = BODY_LEN;
	else
		rs->mode = BODY_CLOSE;
	if (rs->mode == BODY_CLOSE)
		rs->close = 1;
	return 0;
}

/*
 * The head a replaced object answers with: ETag marked, Last-Modified
 * moved to REPLACE_DATE, and the checksums dropped, since they describe
 * the original bytes and this proxy does not recompute them. With
 * strip_conn, the upstream's Connection header goes too: its close is
 * about the upstream link, not the client's.
 */
static int
rewrite_response_head(struct conn *c, struct req *r, int strip_conn)
{
	const struct hdr *h;
	char tag[256];
	size_t i;
	int k;

	c->hblen = 0;
	tag[0] = '\0';
	hb_add(c, c->buf, c->firstlen);
	for (k = 0; k < c->nhdrs; k++) {
		h = &c->hdrs[k];
		if (strip_conn && hdr_is(h, "Connection"))
			continue;
		if (r->rep < 0) {
			hb_add(c, h->line, h->linelen);
			continue;
		}
		if (hdr_is(h, "ETag")) {
			i = h->vlen >= 3 && memcmp(h->val, "W/\"", 3) == 0 ? 3 :
			    h->vlen >= 1 && h->val[0] == '"' ? 1 : 0;
			snprintf(tag, sizeof tag, "%.*s" REPLACE_TAG "%.*s",
			    (int)i, h->val, (int)(h->vlen - i), h->val + i);
			if (strlen(tag) != h->vlen + strlen(REPLACE_TAG))
				tag[0] = '\0';	/* too long to keep */
			hb_str(c, "ETag: ");
			hb_add(c, h->val, i);
			hb_str(c, REPLACE_TAG);
			hb_add(c, h->val + i, h->vlen - i);
			hb_str(c, "\r\n");
		} else if (hdr_is(h, "Last-Modified"))
			hb_str(c, "Last-Modified: " REPLACE_DATE "\r\n");
		else if (hdr_is(h, "Content-MD5") || hdr_is(h, "Digest") ||
		    hdr_is(h, "x-goog-hash") || (h->nlen > 15 &&
		    strncasecmp(h->name, "x-amz-checksum-", 15) == 0))
			continue;
		else
			hb_add(c, h->line, h->linelen);
	}
	hb_str(c, "\r\n");
	if (c->hblen > HBUF_SIZE)
		return -1;
	if (r->rep >= 0 && tag[0] != '\0') {
		pthread_mutex_lock(&replaced_lock);
		snprintf(replaced[r->rep].etag, sizeof replaced[0].etag, "%s",
		    tag);
		pthread_mutex_unlock(&replaced_lock);
	}
	return 0;
}

/*
 * Relay a response body from upstream to the client, starting with the
 * bytes already in c->buf[off, end). Stops after cutoff bytes when cut.
 * Returns 0 when the body is done, 1 when cut, -1 on an upstream error,
 * -2 on a client error.
 */
static int
relay_body(struct conn *c, struct req *r, const struct resp *rs, size_t off,
    size_t end, int cut, uint64_t cutoff)
{
	struct chunkst cs = { CH_SIZE, 0, 0 };
	uint64_t left = rs->len;
	unsigned char *p;
	size_t n, want;
	ssize_t k;
	int xor = r->rep >= 0, flags = 0;

	/*
	 * The buckets are fair per reservation, not per byte: when pacing,
	 * wait for a whole quantum so a connection whose reads come back
	 * short does not fall behind. Not for chunked bodies, whose end
	 * shows only in the data.
	 */
	if ((cfg.conn_rate > 0 || cfg.total_rate > 0) &&
	    rs->mode != BODY_CHUNKED)
		flags = MSG_WAITALL;
	for (;;) {
		if (rs->mode == BODY_NONE || (rs->mode == BODY_LEN &&
		    left == 0) || cs.state == CH_DONE)
			break;
		if (cut && r->sent >= cutoff)
			return 1;
		if (off == end) {
			want = flags != 0 ? cfg.quantum : RELAY_SIZE;
			if (rs->mode == BODY_LEN && left < want)
				want = (size_t)left;
			k = recv_some(c->ufd, c->buf, want, flags);
			if (k == 0 && rs->mode == BODY_CLOSE)
				return 0;
			if (k <= 0)
				return -1;
			off = 0;
			end = (size_t)k;
		}
		n = end - off;
		if (n > cfg.quantum)
			n = cfg.quantum;
		if (rs->mode == BODY_LEN && n > left)
			n = (size_t)left;
		if (cut && n > cutoff - r->sent)
			n = (size_t)(cutoff - r->sent);
		p = (unsigned char *)c->buf + off;
		if (rs->mode == BODY_CHUNKED) {
			if ((k = chunk_scan(&cs, p, n, xor)) < 0)
				return -1;
			n = (size_t)k;
		} else if (xor)
			xor_bytes(p, n);
		throttle(&c->bucket, n);
		off += n;
		left -= rs->mode == BODY_LEN ? n : 0;
		r->sent += n;
		atomic_fetch_add(&n_bytes, n);
		if (!cut && ((rs->mode == BODY_LEN && left == 0) ||
		    cs.state == CH_DONE))
			request_done(r);
		if (send_all(c->cfd, p, n) != 0)
			return -2;
	}
	/* Anything past the end of the message is junk: drop the link. */
	if (off != end)
		upstream_close(c);
	return 0;
}

static void
close_gently(struct conn *c)
{
	struct timeval tv = { 1, 0 };
	char junk[4096];
	int i;

	shutdown(c->cfd, SHUT_WR);
	/* Unread input would turn the close into an RST: drain a little. */
	setsockopt(c->cfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	for (i = 0; i < 256 && recv_some(c->cfd, junk, sizeof junk, 0) > 0; i++)
		;
	close(c->cfd);
	c->cfd = -1;
}

static void
close_reset(struct conn *c)
{
	struct linger l = { 1, 0 };

	setsockopt(c->cfd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
	close(c->cfd);
	c->cfd = -1;
}

/*
 * Forward one request and relay its response. Returns 0 if the client
 * connection stays open.
 */
static int
forward(struct conn *c, struct req *r, const char *head, size_t hlen)
{
	static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
	struct resp rs;
	uint64_t cutoff = 0;
	size_t got = 0;
	int attempt, reused, e, cut, strip_conn, rewrite;

	for (attempt = 0;; attempt++) {
		got = 0;
		reused = upstream_alive(c);
		if (!reused && upstream_open(c) != 0)
			goto bad_gateway;
		if (send_all(c->ufd, head, hlen) != 0) {
			upstream_close(c);
			if (reused && attempt == 0)
				continue;
			goto bad_gateway;
		}
		if (r->clen > 0) {
			/* Expect was stripped: answer it here. */
			if (r->expect && send_all(c->cfd, cont,
			    sizeof cont - 1) != 0)
				return -1;
			if (r->fault == F_UPCUT) {
				/* A broken upload: part of the body goes up,
				 * then both connections drop. */
				atomic_fetch_add(&n_faults[F_UPCUT], 1);
				relay_request_body(c, r, c->ufd,
				    (uint64_t)(r->frac * (double)r->clen));
				upstream_close(c);
				request_done(r);
				close_reset(c);
				return -1;
			}
			if ((e = relay_request_body(c, r, c->ufd,
			    UINT64_MAX)) == -2)
				return -1;
			if (e != 0)
				goto bad_gateway;
		}
		for (;;) {
			e = read_response_head(c, &rs, &got);
			if (e == 0 && parse_response(c, r, &rs) != 0)
				e = -2;
			if (e != 0 || rs.status >= 200)
				break;
			/* Interim response (103 and the like): pass it on. */
			if (rs.status == 101 ||
			    send_all(c->cfd, c->buf, rs.hlen) != 0) {
				e = -1;
				break;
			}
			memmove(c->buf, c->buf + rs.hlen, got - rs.hlen);
			got -= rs.hlen;
		}
		if (e == -3 && reused && attempt == 0 && r->clen == 0) {
			upstream_close(c);
			continue;
		}
		if (e != 0 || rs.status < 200)
			goto bad_gateway;
		break;
	}

	/*
	 * An HTTP/1.1 upstream closing after a delimited body says nothing
	 * about the client's connection, which stays up as it would with a
	 * real store; the next request reconnects upstream.
	 */
	strip_conn = rs.close && !rs.http10 && rs.mode != BODY_CLOSE &&
	    r->keepalive;
	rewrite = r->rep >= 0 || strip_conn;
	if (rewrite && rewrite_response_head(c, r, strip_conn) != 0)
		goto bad_gateway;
	r->status = rs.status;
	cut = r->fault == F_RESET || r->fault == F_SHORT ||
	    r->fault == F_STALL;
	if (cut) {
		cutoff = (uint64_t)(r->frac * (double)(rs.mode == BODY_LEN ?
		    rs.len : rs.mode == BODY_NONE ? 0 : UNKNOWN_LEN_CUT));
		atomic_fetch_add(&n_faults[r->fault], 1);
	}
	/* Measured from the request's arrival, so upstream time counts. */
	sleep_until(r->t0 + cfg.ttfb_ns);
	if ((rs.mode == BODY_NONE || (rs.mode == BODY_LEN && rs.len == 0)) &&
	    !cut)
		request_done(r);
	if (rewrite)
		e = send_all(c->cfd, c->hbuf, c->hblen);
	else
		e = send_all(c->cfd, c->buf, rs.hlen);
	if (e != 0)
		goto client_gone;
	e = relay_body(c, r, &rs, rs.hlen, got, cut, cutoff);
	if (e == -2)
		goto client_gone;
	if (e == -1) {
		/* Mid-body: the client can only learn of it by a close. */
		upstream_close(c);
		request_done(r);
		return -1;
	}
	if (rs.close)
		upstream_close(c);
	if (cut) {
		upstream_close(c);
		request_done(r);
		if (r->fault == F_RESET)
			close_reset(c);
		else {
			if (r->fault == F_STALL)
				sleep_until(now_ns() +
				    (uint64_t)(cfg.stall_s * 1e9));
			close_gently(c);
		}
		return -1;
	}
	request_done(r);
	if (!r->keepalive || (rs.close && !strip_conn))
		return -1;
	return 0;

bad_gateway:
	/* The body may be half sent: close rather than drain it. */
	upstream_close(c);
	r->keepalive = 0;
	r->clen = 0;
	respond_local(c, r, 502, "Bad Gateway", NULL);
	request_done(r);
	return -1;
client_gone:
	upstream_close(c);
	request_done(r);
	return -1;
}

/* Serve one request. Returns 0 if the connection stays open. */
static int
serve_one(struct conn *c)
{
	const struct hdr *h;
	struct req r;
	const char *p, *q, *end, *head, *path_end;
	char extra[64];
	ssize_t hl, first;
	size_t plen;
	uint64_t v;
	int k, te = 0, conn_close = 0, conn_keep = 0, drop_range = 0;
	int http10, code, rewrite;

	hl = read_request_head(c);
	if (hl == 0 || hl == -1)
		return -1;
	if (hl == -2) {
		respond_bad(c, 431, "Request Header Fields Too Large");
		return -1;
	}
	head = c->cbuf + c->cstart;
	c->cstart += (size_t)hl;

	memset(&r, 0, sizeof r);
	r.t0 = now_ns();
	r.fault = F_NONE;
	r.rep = -1;
	if ((first = parse_head(c, head, (size_t)hl)) < 0)
		goto bad_request;
	/* request-line = method SP request-target SP HTTP-version */
	end = head + first;
	q = memchr(head, ' ', (size_t)first);
	if (q == NULL || q == head)
		goto bad_request;
	p = q + 1;
	q = memchr(p, ' ', (size_t)(end - p));
	if (q == NULL || q == p || end - q < 9 || memcmp(q + 1, "HTTP/1.", 7))
		goto bad_request;
	http10 = q[8] == '0';
	r.num = atomic_fetch_add(&n_requests, 1);
	r.method = head;
	r.mlen = (size_t)(p - 1 - head);
	r.target = p;
	r.tlen = (size_t)(q - p);
	r.is_head = r.mlen == 4 && memcmp(r.method, "HEAD", 4) == 0;

	for (k = 0; k < c->nhdrs; k++) {
		h = &c->hdrs[k];
		if (hdr_is(h, "Content-Length")) {
			if (parse_u64(h->val, h->vlen, &v) != 0 ||
			    (r.clen != 0 && v != r.clen))
				goto bad_request_numbered;
			r.clen = v;
		} else if (hdr_is(h, "Transfer-Encoding"))
			te = 1;
		else if (hdr_is(h, "Connection")) {
			conn_close |= has_token(h->val, h->vlen, "close");
			conn_keep |= has_token(h->val, h->vlen, "keep-alive");
		} else if (hdr_is(h, "Expect"))
			r.expect = has_token(h->val, h->vlen, "100-continue");
		else if (hdr_is(h, "Range") && h->vlen > 6 &&
		    strncasecmp(h->val, "bytes=", 6) == 0) {
			const char *d = memchr(h->val + 6, '-', h->vlen - 6);

			if (d != NULL && parse_u64(h->val + 6, (size_t)(d -
			    h->val - 6), &v) == 0)
				r.range_from = v;
		}
	}
	r.keepalive = http10 ? conn_keep && !conn_close : !conn_close;
	if (te) {
		/* No way to find the body's end without decoding it. */
		r.keepalive = 0;
		r.clen = 0;
		respond_local(c, &r, 501, "Not Implemented", NULL);
		request_done(&r);
		return -1;
	}

	path_end = memchr(r.target, '?', r.tlen);
	plen = path_end != NULL ? (size_t)(path_end - r.target) : r.tlen;
	r.fault = fault_pick(&r);
	if (r.fault == F_REPLACE) {
		if ((r.rep = replaced_add(r.target, plen)) < 0)
			r.fault = F_NONE;
		else
			atomic_fetch_add(&n_faults[F_REPLACE], 1);
	} else
		r.rep = replaced_find(r.target, plen);

	if (r.fault == F_503 || r.fault == F_429) {
		atomic_fetch_add(&n_faults[r.fault], 1);
		if (r.fault == F_503)
			k = respond_local(c, &r, 503, "Service Unavailable",
			    NULL);
		else {
			snprintf(extra, sizeof extra, "Retry-After: %u\r\n",
			    cfg.retry_after);
			k = respond_local(c, &r, 429, "Too Many Requests",
			    extra);
		}
		request_done(&r);
		return k;
	}
	if (r.rep >= 0 &&
	    (code = replaced_preconditions(c, &r, &drop_range)) != 0) {
		k = respond_local(c, &r, code, "Precondition Failed", NULL);
		request_done(&r);
		return k;
	}

	rewrite = r.expect || r.rep >= 0;
	if (!rewrite)
		return forward(c, &r, head, (size_t)hl);
	c->hblen = 0;
	hb_add(c, head, (size_t)first);
	for (k = 0; k < c->nhdrs; k++) {
		h = &c->hdrs[k];
		if (hdr_is(h, "Expect"))
			continue;
		if (r.rep >= 0 && (hdr_is(h, "If-Match") ||
		    hdr_is(h, "If-None-Match") || hdr_is(h, "If-Range") ||
		    hdr_is(h, "If-Modified-Since") ||
		    hdr_is(h, "If-Unmodified-Since") ||
		    (drop_range && hdr_is(h, "Range"))))
			continue;
		hb_add(c, h->line, h->linelen);
	}
	hb_str(c, "\r\n");
	/* No longer than the original head, so it fits. */
	return forward(c, &r, c->hbuf, c->hblen);

bad_request:
	respond_bad(c, 400, "Bad Request");
	return -1;
bad_request_numbered:
	r.keepalive = 0;
	r.clen = 0;
	respond_local(c, &r, 400, "Bad Request", NULL);
	request_done(&r);
	return -1;
}

/* -------------------------------------------------------------------- */
/* Connections and main                                                 */
/* -------------------------------------------------------------------- */

static void
conn_free(struct conn *c)
{
	if (c->cfd >= 0)
		close(c->cfd);
	if (c->ufd >= 0)
		close(c->ufd);
	free(c->cbuf);
	free(c->buf);
	free(c->hbuf);
	free(c);
}

static struct conn *
conn_new(int fd)
{
	struct conn *c;

	if ((c = calloc(1, sizeof *c)) == NULL)
		return NULL;
	c->cfd = fd;
	c->ufd = -1;
	c->cbuf = malloc(HEAD_MAX);
	c->buf = malloc(RELAY_SIZE);
	c->hbuf = malloc(HBUF_SIZE);
	if (c->cbuf == NULL || c->buf == NULL || c->hbuf == NULL) {
		c->cfd = -1;
		conn_free(c);
		return NULL;
	}
	bucket_init(&c->bucket, cfg.conn_rate);
	return c;
}

static void *
conn_main(void *arg)
{
	struct conn *c = arg;

	sock_setup(c->cfd);
	while (serve_one(c) == 0)
		;
	conn_free(c);
	atomic_fetch_sub(&active_conns, 1);
	return NULL;
}

static void
on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

static double
parse_rate(const char *opt, const char *s)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || errno != 0 || v < 0)
		usage_error("%s: bad rate '%s'", opt, s);
	switch (*end) {
	case 'k': case 'K':
		v *= 1e3;
		end++;
		break;
	case 'm': case 'M':
		v *= 1e6;
		end++;
		break;
	case 'g': case 'G':
		v *= 1e9;
		end++;
		break;
	}
	if (*end == 'B')
		end++;
	if (*end != '\0')
		usage_error("%s: bad rate '%s'", opt, s);
	return v;
}

static double
parse_num(const char *opt, const char *s, double lo, double hi)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end != '\0' || errno != 0 || !(v >= lo && v <= hi))
		usage_error("%s: bad value '%s'", opt, s);
	return v;
}

static uint64_t
parse_count(const char *opt, const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (end == s || *end != '\0' || errno != 0 || s[0] == '-')
		usage_error("%s: bad number '%s'", opt, s);
	return v;
}

static void
parse_faults(const char *list)
{
	char *copy, *tok, *save = NULL;
	int i, seen[NFAULT] = { 0 };

	if ((copy = strdup(list)) == NULL)
		die("out of memory");
	cfg.nkinds = 0;
	for (tok = strtok_r(copy, ",", &save); tok != NULL;
	    tok = strtok_r(NULL, ",", &save)) {
		for (i = 0; i < NFAULT; i++) {
			if (strcmp(tok, fault_names[i]) == 0)
				break;
		}
		if (i == NFAULT)
			usage_error("--faults: unknown kind '%s' (want 503, "
			    "429, reset, short, stall, replace, upcut)", tok);
		if (!seen[i]++)
			cfg.kinds[cfg.nkinds++] = i;
	}
	free(copy);
	if (cfg.nkinds == 0)
		usage_error("--faults: empty list");
}

/* Long options only; values past any char keep getopt's optopt unambiguous. */
enum {
	OPT_LISTEN = 256, OPT_UPSTREAM, OPT_PID_FILE, OPT_TTFB, OPT_CONN_RATE,
	OPT_TOTAL_RATE, OPT_SEED, OPT_FAULT_RATE, OPT_FAULTS, OPT_FAULT_MATCH,
	OPT_FAULT_AFTER, OPT_FAULT_MIN_OFFSET, OPT_MAX_FAULTS, OPT_RETRY_AFTER, OPT_STALL, OPT_STATS,
	OPT_LOG, OPT_HELP
};

static void
usage(void)
{
	printf(
"usage: linkproxy --upstream HOST:PORT [options]\n"
"\n"
"An HTTP/1.1 reverse proxy that emulates a cloud object store's link and\n"
"injects faults. Prints 'port N' on stdout once listening.\n"
"\n"
"  --listen HOST:PORT     address to listen on (default 127.0.0.1:0, a free port)\n"
"  --upstream HOST:PORT   the real server (required)\n"
"  --pid-file FILE        write the process id to FILE\n"
"  --ttfb MS              delay before each response head (default %d)\n"
"  --conn-rate BYTES/s    per-connection body rate, K/M/G = 1e3/1e6/1e9,\n"
"                         0 unlimited (default 60M)\n"
"  --total-rate BYTES/s   aggregate body rate, 0 unlimited (default 1G)\n"
"  --seed N               fault schedule seed (default 1)\n"
"  --fault-rate P         probability of a fault per request, 0..1 (default 0)\n"
"  --faults LIST          kinds: 503,429,reset,short,stall,replace,upcut\n"
"                         (default all but replace and upcut); upcut sends\n"
"                         part of a request body up, then drops both\n"
"                         connections (a broken upload)\n"
"  --fault-match STR      only requests whose target contains STR\n"
"  --fault-after N        no faults for the first N requests\n"
"  --fault-min-offset N   only requests whose Range starts at byte N or\n"
"                         later (1: only the parts after an object's first)\n"
"  --max-faults N         at most N faults in all (default 0, no limit)\n"
"  --retry-after S        Retry-After of an injected 429 (default 1)\n"
"  --stall S              how long a stall lasts, seconds (default 30)\n"
"  --stats FILE           keep JSON counters in FILE\n"
"  --log FILE             one line per request\n"
"  --help                 show this help\n", DEF_TTFB_MS);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "listen",	required_argument, NULL, OPT_LISTEN },
		{ "upstream",	required_argument, NULL, OPT_UPSTREAM },
		{ "pid-file",	required_argument, NULL, OPT_PID_FILE },
		{ "ttfb",	required_argument, NULL, OPT_TTFB },
		{ "conn-rate",	required_argument, NULL, OPT_CONN_RATE },
		{ "total-rate",	required_argument, NULL, OPT_TOTAL_RATE },
		{ "seed",	required_argument, NULL, OPT_SEED },
		{ "fault-rate",	required_argument, NULL, OPT_FAULT_RATE },
		{ "faults",	required_argument, NULL, OPT_FAULTS },
		{ "fault-match", required_argument, NULL, OPT_FAULT_MATCH },
		{ "fault-after", required_argument, NULL, OPT_FAULT_AFTER },
		{ "fault-min-offset", required_argument, NULL,
		    OPT_FAULT_MIN_OFFSET },
		{ "max-faults",	required_argument, NULL, OPT_MAX_FAULTS },
		{ "retry-after", required_argument, NULL, OPT_RETRY_AFTER },
		{ "stall",	required_argument, NULL, OPT_STALL },
		{ "stats",	required_argument, NULL, OPT_STATS },
		{ "log",	required_argument, NULL, OPT_LOG },
		{ "help",	no_argument,	   NULL, OPT_HELP },
		{ NULL, 0, NULL, 0 }
	};
	const char *listen_arg = "127.0.0.1:0", *up_arg = NULL;
	const char *pid_path = NULL, *log_path = NULL;
	struct addrinfo hints, *ai = NULL, *a;
	struct sockaddr_storage ss;
	struct sigaction sa;
	pthread_attr_t attr;
	pthread_t t;
	sigset_t sigs, old;
	struct pollfd pfd;
	struct conn *c;
	socklen_t sl;
	char *host, *port, pbuf[NI_MAXSERV];
	FILE *f;
	int ch, lfd = -1, fd, one = 1, e;

	cfg.ttfb_ns = DEF_TTFB_MS * 1000000ULL;
	cfg.conn_rate = DEF_CONN_RATE;
	cfg.total_rate = DEF_TOTAL_RATE;
	cfg.seed = 1;
	cfg.retry_after = 1;
	cfg.stall_s = 30;
	parse_faults("503,429,reset,short,stall");

	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_LISTEN:
			listen_arg = optarg;
			break;
		case OPT_UPSTREAM:
			up_arg = optarg;
			break;
		case OPT_PID_FILE:
			pid_path = optarg;
			break;
		case OPT_TTFB:
			cfg.ttfb_ns = (uint64_t)(parse_num("--ttfb", optarg, 0,
			    1e7) * 1e6);
			break;
		case OPT_CONN_RATE:
			cfg.conn_rate = parse_rate("--conn-rate", optarg);
			break;
		case OPT_TOTAL_RATE:
			cfg.total_rate = parse_rate("--total-rate", optarg);
			break;
		case OPT_SEED:
			cfg.seed = parse_count("--seed", optarg);
			break;
		case OPT_FAULT_RATE:
			cfg.fault_rate = parse_num("--fault-rate", optarg, 0, 1);
			break;
		case OPT_FAULTS:
			parse_faults(optarg);
			break;
		case OPT_FAULT_MATCH:
			cfg.fault_match = optarg;
			break;
		case OPT_FAULT_AFTER:
			cfg.fault_after = parse_count("--fault-after", optarg);
			break;
		case OPT_FAULT_MIN_OFFSET:
			cfg.fault_min_offset = parse_count("--fault-min-offset",
			    optarg);
			break;
		case OPT_MAX_FAULTS:
			cfg.max_faults = parse_count("--max-faults", optarg);
			break;
		case OPT_RETRY_AFTER:
			cfg.retry_after = (unsigned)parse_num("--retry-after",
			    optarg, 0, 86400);
			break;
		case OPT_STALL:
			cfg.stall_s = parse_num("--stall", optarg, 0, 86400);
			break;
		case OPT_STATS:
			cfg.stats_path = optarg;
			break;
		case OPT_LOG:
			log_path = optarg;
			break;
		case 'h':
		case OPT_HELP:
			usage();
			return 0;
		case ':':
			usage_error("%s: needs an argument", argv[optind - 1]);
			break;
		default:
			if (optopt > 0 && optopt < 256)
				usage_error("unknown option '-%c'", optopt);
			usage_error("bad option '%s'", argv[optind - 1]);
		}
	}
	if (optind != argc)
		usage_error("unexpected argument '%s'", argv[optind]);
	if (up_arg == NULL)
		usage_error("--upstream HOST:PORT is required");

	/* Throttled sends come in bursts at most, so pacing stays smooth. */
	cfg.quantum = RELAY_SIZE;
	if (cfg.conn_rate > 0 && bucket_burst(cfg.conn_rate) < cfg.quantum)
		cfg.quantum = (size_t)bucket_burst(cfg.conn_rate);
	if (cfg.total_rate > 0) {
		bucket_init(&global_bucket, cfg.total_rate);
		if (global_bucket.burst < cfg.quantum)
			cfg.quantum = (size_t)global_bucket.burst;
	}

	memset(&hints, 0, sizeof hints);
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	if (parse_hostport(up_arg, &host, &port) != 0)
		usage_error("--upstream: want HOST:PORT, not '%s'", up_arg);
	if ((e = getaddrinfo(host, port, &hints, &ai)) != 0)
		die("%s: %s", up_arg, gai_strerror(e));
	memcpy(&cfg.up_addr, ai->ai_addr, ai->ai_addrlen);
	cfg.up_len = ai->ai_addrlen;
	freeaddrinfo(ai);
	free(host);
	free(port);

	if (parse_hostport(listen_arg, &host, &port) != 0)
		usage_error("--listen: want HOST:PORT, not '%s'", listen_arg);
	hints.ai_flags |= AI_PASSIVE;
	if ((e = getaddrinfo(host[0] != '\0' ? host : NULL, port, &hints,
	    &ai)) != 0)
		die("%s: %s", listen_arg, gai_strerror(e));
	for (a = ai; a != NULL; a = a->ai_next) {
		lfd = socket(a->ai_family, SOCK_STREAM|SOCK_CLOEXEC, 0);
		if (lfd < 0)
			continue;
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(lfd, a->ai_addr, a->ai_addrlen) == 0 &&
		    listen(lfd, 1024) == 0)
			break;
		e = errno;
		close(lfd);
		lfd = -1;
		errno = e;
	}
	if (lfd < 0)
		die("listen %s: %s", listen_arg, strerror(errno));
	freeaddrinfo(ai);
	free(host);
	free(port);
	sl = sizeof ss;
	if (getsockname(lfd, (struct sockaddr *)&ss, &sl) != 0 ||
	    getnameinfo((struct sockaddr *)&ss, sl, NULL, 0, pbuf,
	    sizeof pbuf, NI_NUMERICSERV) != 0)
		die("getsockname: %s", strerror(errno));

	if (log_path != NULL) {
		if ((cfg.log = fopen(log_path, "ae")) == NULL)
			die("%s: %s", log_path, strerror(errno));
		setvbuf(cfg.log, NULL, _IOLBF, 0);
	}
	if (pid_path != NULL) {
		if ((f = fopen(pid_path, "we")) == NULL)
			die("%s: %s", pid_path, strerror(errno));
		fprintf(f, "%ld\n", (long)getpid());
		if (fclose(f) != 0)
			die("%s: %s", pid_path, strerror(errno));
	}

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	sa.sa_handler = on_signal;	/* no SA_RESTART: wake poll() */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	/* Connection threads block the signals so they reach this one. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);

	stats_update(1);
	printf("port %s\n", pbuf);
	fflush(stdout);

	while (!stopping) {
		pfd.fd = lfd;
		pfd.events = POLLIN;
		pfd.revents = 0;
		if (poll(&pfd, 1, 500) <= 0)
			continue;
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE)
				sleep_until(now_ns() + 10000000);
			continue;
		}
		if (atomic_load(&active_conns) >= MAX_CONNS ||
		    (c = conn_new(fd)) == NULL) {
			close(fd);
			continue;
		}
		atomic_fetch_add(&n_conns, 1);
		atomic_fetch_add(&active_conns, 1);
		pthread_sigmask(SIG_BLOCK, &sigs, &old);
		e = pthread_create(&t, &attr, conn_main, c);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (e != 0) {
			atomic_fetch_sub(&active_conns, 1);
			conn_free(c);
		}
	}
	close(lfd);
	stats_update(1);
	if (cfg.log != NULL)
		fflush(cfg.log);
	return 0;
}
