/*
 * tree.c - shardfs's folders and objects, as the source lists them: each
 * folder is one listing (every page of it, or the manifest for an http
 * manifest source), trusted for metadata_ttl seconds, merged into the
 * nodes the kernel already holds. A name looked up and not found stays
 * missing for negative_ttl seconds without a new listing. The root also
 * holds the virtual .shardfs folder and its stats file.
 *
 * Nodes: the kernel holds them by nlookup (lookup and readdirplus add,
 * forget takes away), a folder holds its kids, and a kid pins its parent
 * (pins). A node no longer listed is marked gone and freed once nothing
 * holds it. Everything is guarded by tree.mu; a listing is fetched without
 * it, one per folder at a time (listing), others waiting on cond.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef HAVE_MALLOC_TRIM
#include <malloc.h>
#endif

#include "internal.h"
#include "shardfs.h"

#define MISSING_MAX	1024	/* names remembered missing per folder */
#define ERROR_HOLD	1.0	/* seconds a failed listing is not retried */

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cond;	/* a listing ended (CLOCK_MONOTONIC) */
	struct fs_node *root;
	struct fs_node *dot;	/* /.shardfs */
	int closing;		/* unmounted: the kernel's references are
				 * gone with it */
	struct fs_node *all;	/* every node */
} tree = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* What one listing gives for a name. */
/* Listings of this many names and more give their memory back after */
#define TRIM_NAMES	4096

struct item {
	char *name;
	char *url;
	int dir;
	uint64_t size;
	int64_t mtime;
	char version[128];
	char disk_version[160];
};

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void
fs_tree_lock(void)
{
	pthread_mutex_lock(&tree.mu);
}

void
fs_tree_unlock(void)
{
	pthread_mutex_unlock(&tree.mu);
}

struct fs_node *
fs_tree_root(void)
{
	return tree.root;
}

static struct fs_node *
node_new(struct fs_node *parent, const char *name, const char *url, int dir)
{
	struct fs_node *n;

	if ((n = calloc(1, sizeof *n)) == NULL)
		return NULL;
	n->name = strdup(name);
	n->url = url != NULL ? strdup(url) : NULL;
	n->shown = url != NULL ? sk_url_redact(url) : NULL;
	if (n->name == NULL || (url != NULL && (n->url == NULL ||
	    n->shown == NULL))) {
		free(n->name);
		free(n->url);
		free(n->shown);
		free(n);
		return NULL;
	}
	/* most URLs hold no secret: then shown is url (NODE_SHOWN) */
	if (n->shown != NULL && strcmp(n->shown, n->url) == 0) {
		free(n->shown);
		n->shown = NULL;
	}
	n->dir = dir;
	n->parent = parent;
	/* Every node, so the last ones go at unmount even when no folder
	 * holds them any more. */
	n->all_next = tree.all;
	if (tree.all != NULL)
		tree.all->all_prev = n;
	tree.all = n;
	if (parent != NULL)
		parent->pins++;
	return n;
}

/* A copy of s, NULL for "" (and when out of memory: the node then
 * shows no version, and its reads pin the first response's). */
static char *
str_or_null(const char *s)
{
	return s[0] != '\0' ? strdup(s) : NULL;
}

static void
missing_clear(struct fs_node *n)
{
	size_t i;

	for (i = 0; i < n->nmissing; i++)
		free(n->missing[i]);
	free(n->missing);
	free(n->missing_until);
	n->missing = NULL;
	n->missing_until = NULL;
	n->nmissing = 0;
}

static void
node_free(struct fs_node *n)
{
	if (n->all_prev != NULL)
		n->all_prev->all_next = n->all_next;
	else
		tree.all = n->all_next;
	if (n->all_next != NULL)
		n->all_next->all_prev = n->all_prev;
	missing_clear(n);
	free(n->kids);
	free(n->name);
	free(n->url);
	free(n->shown);
	free(n->listed);
	free(n->version);
	free(n->disk_version);
	free(n);
}

/* Free n and whatever that lets go of above it; caller holds mu. */
static void
maybe_free(struct fs_node *n)
{
	struct fs_node *p;

	while (n != NULL && n->gone && (n->nlookup == 0 || tree.closing) &&
	    n->pins == 0 && n->nkids == 0) {
		p = n->parent;
		node_free(n);
		if (p != NULL)
			p->pins--;
		n = p;
	}
}

/*
 * n is no longer listed: nor is anything below it. n is pinned while its
 * kids go (freeing the last of them climbs to n), then freed itself if
 * nothing holds it; the caller must not touch n afterwards.
 */
static void
mark_gone(struct fs_node *n)
{
	struct fs_node **kids = n->kids;
	size_t i, nk = n->nkids;

	n->gone = 1;
	n->kids = NULL;
	n->nkids = 0;
	/* Pinned while its kids go: freeing the last of them would free n
	 * (and what is above it) under this loop. */
	n->pins++;
	for (i = 0; i < nk; i++)
		mark_gone(kids[i]);
	free(kids);
	n->pins--;
	maybe_free(n);
}

/* ------------------------------------------------------------------------ */
/* listings                                                                 */

static void
items_free(struct item *v, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		free(v[i].name);
		free(v[i].url);
	}
	free(v);
}

/* The last segment of a URL's path, before any query. */
static char *
base_name(const char *url)
{
	const char *end = url + strcspn(url, "?#"), *b = end;

	while (b > url && b[-1] != '/')
		b--;
	return b < end ? strndup(b, (size_t)(end - b)) : NULL;
}

static int
cmp_item(const void *a, const void *b)
{
	const struct item *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c != 0 ? c : y->dir - x->dir;
}

/*
 * An http(s) manifest as a folder: its shards by their names (which must
 * differ), sized by its filesize and kept on disk by its MD5, and the
 * manifest itself when every shard sits beside it, so a loader given the
 * mounted manifest finds them.
 */
static int
list_manifest(const char *url, struct item **out, size_t *nout,
    struct sk_error *err)
{
	struct sk_manifest m = { 0 };
	struct item *v = NULL;
	size_t i, n = 0;
	char *dir = NULL, *full, *b, *shown;
	int rc, beside = 1;

	*out = NULL;
	*nout = 0;
	if ((rc = sk_manifest_read(url, &m, err)) != 0)
		return rc;
	if ((shown = sk_url_redact(url)) == NULL) {
		sk_manifest_free(&m);
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	if ((v = calloc(m.nshards + 1, sizeof *v)) == NULL ||
	    (dir = strndup(url, (size_t)(strrchr(url, '/') - url + 1))) ==
	    NULL) {
		rc = sk_error_set(err, SK_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < m.nshards; i++) {
		if ((full = sk_manifest_resolve(url, m.shards[i].url)) == NULL) {
			rc = sk_error_set(err, SK_ENOMEM, "out of memory");
			goto out;
		}
		v[n].url = full;
		n++;
		/* An http manifest mounts http(s) shards only: not this
		 * machine's files, nor a bucket read with the mounting
		 * user's credentials for whoever reads the mount; and only
		 * its own origin's, unless allow-cross-origin. */
		if (strncmp(full, "http://", 7) != 0 &&
		    strncmp(full, "https://", 8) != 0) {
			rc = sk_error_set(err, SK_EINVAL, "%s: shardlist[%zu]: a "
			    "mounted manifest may name only http(s) shards",
			    shown, i);
			goto out;
		}
		if ((rc = sk_manifest_check_origin(url, full, err)) != 0)
			goto out;
		if ((b = base_name(full)) == NULL ||
		    !sk__entry_name_ok(b, strlen(b)) || strlen(b) > NAME_MAX ||
		    !sk_escape(NULL, 0, b, strlen(b), 0)) {
			rc = sk_error_set(err, SK_EFORMAT, "%s: shardlist[%zu] "
			    "has no file name a folder can show", shown, i);
			free(b);
			goto out;
		}
		v[n - 1].name = b;
		v[n - 1].size = m.shards[i].filesize;
		/* Its version is what its first response says: the blocks
		 * are kept on disk under that (not the manifest's MD5,
		 * which no read checks). */
		snprintf(v[n - 1].disk_version, sizeof v[n - 1].disk_version,
		    "learned");
		if (strncmp(full, dir, strlen(dir)) != 0 ||
		    strchr(full + strlen(dir), '/') != NULL)
			beside = 0;
	}
	if (beside && (v[n].name = base_name(url)) != NULL &&
	    (v[n].url = strdup(url)) != NULL) {
		/* Its size: read once more for it is cheap and a listing
		 * promises the exact bytes. */
		char *text = NULL;
		size_t len = 0;

		if (sk__read_whole(url, (size_t)256 << 20, &text, &len,
		    err) == 0) {
			v[n].size = len;
			snprintf(v[n].disk_version, sizeof v[n].disk_version,
			    "learned");
			n++;
		} else {
			free(v[n].name);
			free(v[n].url);
		}
		free(text);
	}
	qsort(v, n, sizeof *v, cmp_item);
	for (i = 1; i < n; i++)
		if (strcmp(v[i - 1].name, v[i].name) == 0) {
			rc = sk_error_set(err, SK_EFORMAT, "%s: two shards are "
			    "named %s; a mount shows one folder of names", shown,
			    v[i].name);
			goto out;
		}
out:
	sk_manifest_free(&m);
	free(dir);
	free(shown);
	if (rc != 0) {
		items_free(v, n);
		return rc;
	}
	*out = v;
	*nout = n;
	return 0;
}

/* A folder's listing as items, sorted by name, folders first. */
/*
 * What the listings last said of a folder (its URL's hash): how many names
 * they left out, as unshowable and as too long, so that a re-listing that
 * leaves out the same says nothing again. A small table; a folder whose
 * slot another took says it once more.
 */
#define SAID_SLOTS	256
static struct {
	uint64_t url;
	size_t bad, long_names;
} said[SAID_SLOTS];
static pthread_mutex_t said_mu = PTHREAD_MUTEX_INITIALIZER;

/* 1 when the counts for url differ from what was last said (and keeps
 * them), else 0 */
static int
say_again(const char *url, size_t bad, size_t long_names)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	const char *p;
	int again;

	for (p = url; *p != '\0'; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
	pthread_mutex_lock(&said_mu);
	again = said[h % SAID_SLOTS].url != h ||
	    said[h % SAID_SLOTS].bad != bad ||
	    said[h % SAID_SLOTS].long_names != long_names;
	said[h % SAID_SLOTS].url = h;
	said[h % SAID_SLOTS].bad = bad;
	said[h % SAID_SLOTS].long_names = long_names;
	pthread_mutex_unlock(&said_mu);
	return again;
}

static int
list_folder(const char *url, int manifest, struct item **out, size_t *nout,
    struct sk_error *err)
{
	struct sk__entries e = { 0 };
	struct item *v;
	size_t i, n = 0, unshown = 0, too_long = 0;
	int http = strncmp(url, "http", 4) == 0, rc;
	const char *first_long = NULL;
	char *name, *shown;

	*out = NULL;
	*nout = 0;
	if (manifest)
		return list_manifest(url, out, nout, err);
	if ((rc = sk__source_list_entries(url, &e, err)) != 0) {
		sk__entries_free(&e);
		return rc;
	}
	if ((shown = sk_url_redact(url)) == NULL ||
	    (v = calloc(e.n + 1, sizeof *v)) == NULL) {
		free(shown);
		sk__entries_free(&e);
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	for (i = 0; i < e.n; i++) {
		/* A name with control characters or bytes of no valid UTF-8
		 * would reach every terminal that lists the folder. */
		if (!sk_escape(NULL, 0, e.v[i].name, strlen(e.v[i].name), 0)) {
			unshown++;
			continue;
		}
		if (strlen(e.v[i].name) > NAME_MAX) {
			if (too_long++ == 0)
				first_long = e.v[i].name;
			continue;
		}
		if (e.v[i].size > (uint64_t)INT64_MAX) {
			sk_log(SK_LOG_WARN, "%s: %.60s: a size of %" PRIu64
			    " bytes is not shown", shown, e.v[i].name,
			    e.v[i].size);
			continue;
		}
		name = http ? sk__uri_escape(e.v[i].name, 0) : NULL;
		v[n].url = sk__asprintf("%s%s%s", url, http ? name :
		    e.v[i].name, e.v[i].dir ? "/" : "");
		free(name);
		if (v[n].url == NULL || (v[n].name = strdup(e.v[i].name)) ==
		    NULL) {
			free(v[n].url);
			items_free(v, n);
			sk__entries_free(&e);
			free(shown);
			return sk_error_set(err, SK_ENOMEM, "out of memory");
		}
		v[n].dir = e.v[i].dir;
		v[n].size = e.v[i].size;
		v[n].mtime = e.v[i].mtime;
		snprintf(v[n].version, sizeof v[n].version, "%s",
		    e.v[i].version);
		/* gs and s3 give a version; nginx only the time (and size)
		 * its own ETag is made of: reads are pinned to that time
		 * (its Last-Modified), and the disk cache keys by it. With
		 * none, the first response's version does both. */
		if (e.v[i].version[0] != '\0')
			snprintf(v[n].disk_version, sizeof v[n].disk_version,
			    "v:%s", e.v[i].version);
		else if (!e.v[i].dir && http && e.v[i].mtime > 0) {
			snprintf(v[n].version, sizeof v[n].version,
			    "mtime:%" PRId64, e.v[i].mtime);
			snprintf(v[n].disk_version, sizeof v[n].disk_version,
			    "%s", v[n].version);
		} else if (!e.v[i].dir)
			snprintf(v[n].disk_version, sizeof v[n].disk_version,
			    "learned");
		n++;
	}
	/* once for a folder, and again only when the counts change */
	if ((unshown > 0 || too_long > 0) && say_again(url, unshown,
	    too_long)) {
		if (unshown > 0)
			sk_log(SK_LOG_WARN, "%s: %zu name%s with control "
			    "characters or bytes of no valid UTF-8 %s not shown",
			    shown, unshown, unshown == 1 ? "" : "s",
			    unshown == 1 ? "is" : "are");
		if (too_long > 0)
			sk_log(SK_LOG_WARN, "%s: %zu name%s longer than %d bytes "
			    "%s not shown (the first: %.40s...)", shown,
			    too_long, too_long == 1 ? "" : "s", NAME_MAX,
			    too_long == 1 ? "is" : "are", first_long);
	}
	sk__entries_free(&e);
	free(shown);
	*out = v;
	*nout = n;
	return 0;
}

/* The kid of dir named name (a folder before an object of that name). */
static struct fs_node *
kid(const struct fs_node *dir, const char *name)
{
	size_t lo = 0, hi = dir->nkids, mid;
	int c;

	while (lo < hi) {
		mid = (lo + hi) / 2;
		c = strcmp(dir->kids[mid]->name, name);
		if (c == 0)
			return dir->kids[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/*
 * Put a fresh listing in dir: nodes the kernel knows keep their identity
 * (and take the new size and version), names no longer listed go. A name
 * that is both a folder and an object shows the folder. Caller holds mu.
 */
static int
merge(struct fs_node *dir, struct item *v, size_t n)
{
	struct fs_node **kids, *k, *old;
	size_t i, nk = 0;
	int trust;

	if ((kids = calloc(n + 1, sizeof *kids)) == NULL)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		if (nk > 0 && strcmp(kids[nk - 1]->name, v[i].name) == 0) {
			sk_log(SK_LOG_INFO, "%s: the object %s is hidden by the "
			    "folder of that name", NODE_SHOWN(dir), v[i].name);
			continue;
		}
		if (dir == tree.root && strcmp(v[i].name, ".shardfs") == 0) {
			sk_log(SK_LOG_WARN, "%s.shardfs is hidden by the mount's "
			    "own .shardfs folder", NODE_SHOWN(dir));
			continue;
		}
		/*
		 * A node is one version of an object: another version is
		 * another inode, so the kernel's page cache never holds the
		 * bytes of two (the old one goes, and the kernel is told).
		 */
		k = kid(dir, v[i].name);
		if (k != NULL && (k->dir != v[i].dir || k->special ||
		    k->stale || (!k->dir && (k->size != v[i].size ||
		    strcmp(NODE_STR(k->listed), v[i].version) != 0))))
			k = NULL;
		trust = 1;
		if (k == NULL && (old = kid(dir, v[i].name)) != NULL &&
		    old->stale && !old->dir && !v[i].dir &&
		    strcmp(NODE_STR(old->listed), v[i].version) == 0 &&
		    strncmp(v[i].version, "mtime:", 6) == 0)
			/* The listing's time no longer names what the server
			 * serves (a read found the object changed, yet the
			 * folder lists it as it was): the first response
			 * names this node's version, and keys its blocks. */
			trust = 0;
		if (k == NULL) {
			if ((k = node_new(dir, v[i].name, v[i].url,
			    v[i].dir)) == NULL) {
				sk_log(SK_LOG_WARN, "%s%s: out of memory; not "
				    "shown", NODE_SHOWN(dir), v[i].name);
				continue;
			}
		}
		k->kept = 1;
		k->size = v[i].dir ? 0 : v[i].size;
		k->mtime = v[i].mtime;
		if (!k->kept_version) {
			k->listed = str_or_null(v[i].version);
			k->version = str_or_null(trust ? v[i].version : "");
			k->disk_version = str_or_null(trust ?
			    v[i].disk_version : "learned");
			k->kept_version = 1;
		}
		kids[nk++] = k;
	}
	if (dir == tree.root && tree.dot != NULL) {
		/* .shardfs sorts before letters but not before every
		 * name: put it in its place. */
		size_t at = 0;

		while (at < nk && strcmp(kids[at]->name, ".shardfs") < 0)
			at++;
		memmove(kids + at + 1, kids + at, (nk - at) * sizeof *kids);
		kids[at] = tree.dot;
		tree.dot->kept = 1;
		nk++;
	}
	/* What the new listing did not take over is gone: the kernel
	 * forgets the name, so the next lookup finds what is there now. */
	for (i = 0; i < dir->nkids; i++)
		if (!dir->kids[i]->kept) {
			fs_notify_entry(dir, dir->kids[i]->name);
			mark_gone(dir->kids[i]);
		}
	for (i = 0; i < nk; i++)
		kids[i]->kept = 0;
	free(dir->kids);
	dir->kids = kids;
	dir->nkids = nk;
	missing_clear(dir);
	return 0;
}

/* Whether dir's listing may be used as it is. */
static int
fresh(const struct fs_node *dir, double now)
{
	if (dir->special)
		return 1;
	if (dir->listed_at == 0)
		return 0;
	return fs_opts.metadata_ttl < 0 || now - dir->listed_at <
	    fs_opts.metadata_ttl;
}

/*
 * List dir when its listing is stale: 0, or -errno when there is none to
 * use. A failed listing keeps the last good one (for ERROR_HOLD, then it
 * is tried again). Caller holds mu, which is let go meanwhile.
 */
static int
listed(struct fs_node *dir)
{
	struct sk_error err;
	struct item *v = NULL;
	struct timespec until;
	size_t n = 0;
	double now = now_s(), end = now + fs_opts.io_timeout;
	char *url;
	int rc;

	until.tv_sec = (time_t)end;
	until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
	for (;;) {
		if (fresh(dir, now))
			return 0;
		if (dir->list_rc != 0 && now - dir->list_rc_at < ERROR_HOLD)
			return dir->listed_at > 0 ? 0 : dir->list_rc;
		if (!dir->listing)
			break;
		/* Another thread lists it: wait as long as a read would,
		 * then make do with the last listing, if any. */
		if (pthread_cond_timedwait(&tree.cond, &tree.mu, &until) ==
		    ETIMEDOUT && dir->listing)
			return dir->listed_at > 0 ? 0 : -EIO;
		now = now_s();
	}
	dir->listing = 1;
	dir->pins++;		/* it stays while the listing is fetched */
	url = strdup(dir->url);
	pthread_mutex_unlock(&tree.mu);
	FS_ADD(listings, 1);
	if (url == NULL)
		rc = sk_error_set(&err, SK_ENOMEM, "out of memory");
	else
		rc = list_folder(url, dir == tree.root && fs_opts.manifest, &v,
		    &n, &err);
	free(url);
	pthread_mutex_lock(&tree.mu);
	dir->listing = 0;
	dir->pins--;
	if (rc == 0) {
		if (!dir->gone && (rc = merge(dir, v, n)) == 0)
			dir->listed_at = now_s();
		dir->list_rc = rc;
		items_free(v, n);
#ifdef HAVE_MALLOC_TRIM
		/* A large listing's parse (the JSON or XML tree, the entries
		 * and items) is gone again: its pages go back to the system
		 * rather than stay in the arenas (shardfs(1), Memory). */
		if (n >= TRIM_NAMES)
			malloc_trim(0);
#endif
	} else {
		sk_log(SK_LOG_WARN, "%s", err.msg);	/* names no secret */
		dir->list_rc = rc == SK_ENOENT ? -ENOENT : rc == SK_EACCES ?
		    -EACCES : rc == SK_ENOMEM ? -ENOMEM : -EIO;
		dir->list_rc_at = now_s();
		rc = dir->listed_at > 0 ? 0 : dir->list_rc;
	}
	pthread_cond_broadcast(&tree.cond);
	maybe_free(dir);
	return rc;
}

/* Whether name was found missing in dir lately. Caller holds mu. */
static int
known_missing(struct fs_node *dir, const char *name, double now)
{
	size_t i;

	for (i = 0; i < dir->nmissing; i++)
		if (strcmp(dir->missing[i], name) == 0)
			return now < dir->missing_until[i];
	return 0;
}

static void
remember_missing(struct fs_node *dir, const char *name, double now)
{
	char **nm;
	double *nu;
	size_t i;

	if (fs_opts.negative_ttl <= 0)
		return;
	for (i = 0; i < dir->nmissing; i++)
		if (strcmp(dir->missing[i], name) == 0) {
			dir->missing_until[i] = now + fs_opts.negative_ttl;
			return;
		}
	if (dir->nmissing == MISSING_MAX) {
		/* Full: the oldest goes. */
		free(dir->missing[0]);
		memmove(dir->missing, dir->missing + 1, (MISSING_MAX - 1) *
		    sizeof *dir->missing);
		memmove(dir->missing_until, dir->missing_until + 1,
		    (MISSING_MAX - 1) * sizeof *dir->missing_until);
		dir->nmissing--;
	}
	nm = realloc(dir->missing, (dir->nmissing + 1) * sizeof *nm);
	if (nm == NULL)
		return;
	dir->missing = nm;
	nu = realloc(dir->missing_until, (dir->nmissing + 1) * sizeof *nu);
	if (nu == NULL)
		return;
	dir->missing_until = nu;
	if ((nm[dir->nmissing] = strdup(name)) == NULL)
		return;
	nu[dir->nmissing++] = now + fs_opts.negative_ttl;
}

/* ------------------------------------------------------------------------ */
/* what the filesystem calls                                                */

int
fs_tree_init(int *empty, struct sk_error *err)
{
	struct fs_node *stats;
	size_t i;
	int rc;

	pthread_condattr_t ca;

	/* A large folder's JSON is parsed apart from the names kept. */
	sk__json_scratch_install();
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&tree.cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_lock(&tree.mu);
	tree.root = node_new(NULL, "", fs_opts.root, 1);
	tree.dot = tree.root ? node_new(tree.root, ".shardfs", NULL, 1) : NULL;
	stats = tree.dot ? node_new(tree.dot, "stats", NULL, 0) : NULL;
	if (stats == NULL || (tree.dot->kids = calloc(1, sizeof stats)) ==
	    NULL) {
		pthread_mutex_unlock(&tree.mu);
		return sk_error_set(err, SK_ENOMEM, "out of memory");
	}
	tree.dot->special = stats->special = 1;
	tree.dot->kids[0] = stats;
	tree.dot->nkids = 1;
	tree.root->nlookup = 1;	/* the kernel's root, never forgotten */
	/* The first listing now: a mount that cannot list its source
	 * fails here, with the reason, rather than later with EIO. */
	rc = listed(tree.root);
	*empty = rc == 0;
	for (i = 0; rc == 0 && i < tree.root->nkids; i++)
		if (!tree.root->kids[i]->special)	/* .shardfs aside */
			*empty = 0;
	if (rc != 0)
		rc = sk_error_set(err, rc == -ENOENT ? SK_ENOENT : rc == -EACCES ?
		    SK_EACCES : SK_EIO, "%s: cannot be listed (see the "
		    "warning above)", fs_opts.source);
	pthread_mutex_unlock(&tree.mu);
	return rc;
}

int
fs_tree_lookup(struct fs_node *dir, const char *name, struct fs_node **out)
{
	struct fs_node *k;
	double now = now_s();
	int rc = 0;

	*out = NULL;
	FS_ADD(lookups, 1);
	pthread_mutex_lock(&tree.mu);
	if (!dir->dir)
		rc = -ENOTDIR;
	else if (!fresh(dir, now) && known_missing(dir, name, now)) {
		FS_ADD(negative_hits, 1);
		rc = -ENOENT;
	} else if ((rc = listed(dir)) == 0) {
		if ((k = kid(dir, name)) == NULL) {
			remember_missing(dir, name, now);
			rc = -ENOENT;
		} else {
			k->nlookup++;
			*out = k;
		}
	}
	pthread_mutex_unlock(&tree.mu);
	return rc;
}

void
fs_tree_forget(struct fs_node *n, uint64_t count)
{
	pthread_mutex_lock(&tree.mu);
	n->nlookup = n->nlookup > count ? n->nlookup - count : 0;
	maybe_free(n);
	pthread_mutex_unlock(&tree.mu);
}

int
fs_tree_readdir(struct fs_node *dir, struct fs_dirent **out, size_t *nout)
{
	struct fs_dirent *d;
	size_t i;
	int rc;

	*out = NULL;
	*nout = 0;
	pthread_mutex_lock(&tree.mu);
	if ((rc = listed(dir)) != 0) {
		pthread_mutex_unlock(&tree.mu);
		return rc;
	}
	if ((d = calloc(dir->nkids + 1, sizeof *d)) == NULL) {
		pthread_mutex_unlock(&tree.mu);
		return -ENOMEM;
	}
	for (i = 0; i < dir->nkids; i++) {
		if ((d[i].name = strdup(dir->kids[i]->name)) == NULL) {
			while (i-- > 0)
				d[i].node->nlookup--;
			fs_tree_dirents_free(d, dir->nkids);
			pthread_mutex_unlock(&tree.mu);
			return -ENOMEM;
		}
		d[i].node = dir->kids[i];
		d[i].node->nlookup++;	/* held until handed out */
	}
	*out = d;
	*nout = dir->nkids;
	pthread_mutex_unlock(&tree.mu);
	return 0;
}

void
fs_tree_dirents_free(struct fs_dirent *d, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(d[i].name);
	free(d);
}

void
fs_tree_stale(struct fs_node *n)
{
	pthread_mutex_lock(&tree.mu);
	if (n->parent != NULL && !n->gone) {
		/* Listed again at the next lookup, which the kernel makes
		 * once it forgot the name; whatever the listing says, that
		 * is a new node: its pages are not this one's. */
		n->parent->listed_at = 0;
		n->stale = 1;
		fs_notify_entry(n->parent, n->name);
	}
	pthread_mutex_unlock(&tree.mu);
}

void
fs_tree_unpin(struct fs_node *n)
{
	pthread_mutex_lock(&tree.mu);
	n->pins--;
	maybe_free(n);
	pthread_mutex_unlock(&tree.mu);
}

void
fs_tree_shutdown(void)
{
	pthread_mutex_lock(&tree.mu);
	tree.closing = 1;
	if (tree.root != NULL)
		mark_gone(tree.root);
	/* What is left was held by a kernel that is gone (a name no longer
	 * listed but not yet forgotten), or by a pin no one lets go of. */
	while (tree.all != NULL)
		node_free(tree.all);
	tree.root = tree.dot = NULL;
	pthread_mutex_unlock(&tree.mu);
}
