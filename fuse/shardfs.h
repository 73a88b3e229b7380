/*
 * shardfs.h - what the files of shardfs share: the options, the tree of
 * folders and objects a listing gives (tree.c), the block cache that reads
 * them (cache.c), the disk cache under it (disk.c) and the counters the
 * stats file shows.
 *
 * Lock order: the tree's lock, then the cache's, then an object's stream
 * (lib/fetch_stream.c) or the disk cache's index; no file or network I/O
 * under the tree's or the cache's lock.
 */
#ifndef SHARDFS_H
#define SHARDFS_H

#include <sys/types.h>

#include <pthread.h>
#include <stdint.h>

#include "shardkit.h"

/* A block: the unit of the caches and of a random read's fetch. */
#define FS_BLOCK	((uint64_t)1 << 20)

struct fs_opts {
	const char *source;	/* as given */
	char *root;		/* the folder URL (ending in '/') or the
				 * manifest's URL */
	int manifest;		/* root is an http(s) manifest */
	double metadata_ttl;	/* seconds a listing is trusted; < 0 forever */
	double negative_ttl;	/* seconds a missing name stays missing */
	uint64_t cache_bytes;	/* the block cache's memory */
	uint64_t readahead;	/* a sequential reader's window at most */
	uint64_t chunk;		/* bytes per ranged GET of read-ahead */
	const char *cache_dir;	/* NULL: no disk cache */
	uint64_t cache_max_bytes;
	double io_timeout;	/* a read waits this long at most */
	int threads;		/* FUSE worker threads at most */
	int direct_io;		/* files bypass the kernel's page cache */
	int allow_other;
	int foreground, debug;
	uid_t uid;		/* the owner every node shows */
	gid_t gid;
	mode_t file_mode;	/* permission bits of files and folders */
	mode_t dir_mode;
};

extern struct fs_opts fs_opts;

/* ------------------------------------------------------------------------ */
/* counters (atomics)                                                       */

struct fs_stats {
	uint64_t reads;		/* read calls */
	uint64_t read_bytes;	/* bytes handed to readers */
	uint64_t opens;
	uint64_t mem_hits;	/* lookups that found their chunk in memory */
	uint64_t disk_hits;	/* blocks read back from the disk cache */
	uint64_t misses;	/* chunks fetched for a reader that waits */
	uint64_t readahead_hits;	/* lookups that found a chunk read ahead */
	uint64_t readahead_bytes;	/* bytes asked for ahead of readers */
	uint64_t disk_corrupt;	/* cached blocks that failed their check */
	uint64_t disk_writes;	/* blocks written to the disk cache */
	uint64_t disk_evictions;	/* blocks removed from it for room */
	uint64_t evictions;	/* chunks dropped from memory for room */
	uint64_t dropped;	/* chunks a sequential reader had passed */
	uint64_t listings;	/* folder listings fetched */
	uint64_t lookups;
	uint64_t negative_hits;	/* lookups the negative cache answered */
	uint64_t eio, estale;	/* reads that failed */
	uint64_t wait_ns;	/* time in fs_read */
};

extern struct fs_stats fs_stats;

#define FS_ADD(field, v) \
	__atomic_fetch_add(&fs_stats.field, (v), __ATOMIC_RELAXED)

/* The stats file's text (JSON, malloc'd). */
char *fs_stats_json(size_t *len);

/* ------------------------------------------------------------------------ */
/* objects and the block cache (cache.c)                                    */

/* One object at one version; shared by every handle that opened it. */
struct fs_obj;

void fs_cache_shutdown(void);
/* The object url at the size and version a listing gave, held.
 * disk_version keys its blocks in the disk cache ("" or NULL: not
 * kept there). */
int fs_obj_get(struct fs_obj **out, const char *url, uint64_t size,
    const char *version, const char *disk_version, struct sk_error *err);
void fs_obj_put(struct fs_obj *o);

/* A reader: one open file handle. */
struct fs_reader;
struct fs_reader *fs_reader_new(struct fs_obj *o);
/* kernel_keeps: the kernel's page cache holds what r read (not
 * O_DIRECT); what r read whole may then go from the cache. */
void fs_reader_free(struct fs_reader *r, int kernel_keeps);
/* Up to n bytes at off into buf: bytes read, or -errno (EIO, also past
 * io_timeout; ESTALE when the object changed). */
int64_t fs_read(struct fs_reader *r, char *buf, size_t n, uint64_t off);
/* The same, but bytes that one chunk holds whole are not copied: *zc
 * points at them and *hold keeps them until fs_read_put(*hold) (NULL
 * when they were copied into *buf, which is malloc'd for n bytes at the
 * first copy when NULL: the caller frees it). */
int64_t fs_read_zc(struct fs_reader *r, char **buf, size_t n, uint64_t off,
    const void **zc, void **hold);
void fs_read_put(void *hold);
/* Whether a read of r found its object changed. */
int fs_reader_stale(const struct fs_reader *r);
/* Bytes the cache holds now, and at most ever. */
void fs_cache_usage(uint64_t *now, uint64_t *peak);

/* ------------------------------------------------------------------------ */
/* the disk cache (disk.c)                                                  */

/* Open (or make) the cache under dir, at most max bytes, its blocks found
 * and counted. */
int fs_disk_open(const char *dir, uint64_t max, struct sk_error *err);
void fs_disk_close(void);
int fs_disk_enabled(void);
/* The key of an object's blocks: a hex SHA-256 of its URL, version (a
 * generation, an ETag, "mtime:T", "md5:M") and size. */
void fs_disk_key(const char *url, const char *version, uint64_t size,
    char key[65]);
/* Whether block off (a multiple of FS_BLOCK) of the object key is there
 * (without reading it). */
int fs_disk_has(const char *key, uint64_t off);
/* That block of the object (url names it in messages; size is its size):
 * its len bytes into buf when cached and sound (1), else 0. A block that
 * fails its check is removed and counted. */
int fs_disk_get(const char *key, const char *url, uint64_t size,
    uint64_t off, void *buf, size_t len);
/* Keep a block, making room; errors are counted and forgotten. */
void fs_disk_put(const char *key, uint64_t size, uint64_t off,
    const void *buf, size_t len);
void fs_disk_usage(uint64_t *bytes, uint64_t *files);

/* ------------------------------------------------------------------------ */
/* the tree (tree.c)                                                        */

/* A node's version strings and shown URL as text: "" for NULL */
#define NODE_STR(s)	((s) != NULL ? (s) : "")
#define NODE_SHOWN(n)	((n)->shown != NULL ? (n)->shown : (n)->url)

struct fs_node {
	struct fs_node *parent;
	struct fs_node *all_prev, *all_next;	/* every node (tree.c) */
	char *name;
	char *url;		/* an object's URL, a folder's ending in '/' */
	char *shown;		/* url for messages, without its secrets
				 * (NODE_SHOWN: NULL when url holds none) */
	int dir;
	int special;		/* the .shardfs folder or its stats file */
	uint64_t size;
	int64_t mtime;
	/* Set once (a node is one version), each NULL for "": kept apart
	 * from the node so that a name costs what its strings do (about 300
	 * bytes, shardfs(1)), not three arrays of the longest. */
	char *listed;		/* the version its listing gave */
	char *version;		/* what pins its reads: that (a generation,
				 * an ETag, nginx's "mtime:T"), or "" for
				 * the first response's */
	char *disk_version;	/* keys blocks in the disk cache; "" none */
	int kept_version;	/* set once */
	uint64_t nlookup;	/* the kernel's references (and readdir's
				 * while it hands names out) */
	uint64_t pins;		/* kids and listings that need it */
	int kept;		/* merge's mark: still listed */
	int stale;		/* a read found its object changed: the next
				 * listing makes a new node of the name */
	int gone;		/* no longer listed: freed when forgotten */
	/* folders */
	struct fs_node **kids;	/* sorted by name */
	size_t nkids;
	double listed_at;	/* monotonic seconds; 0: never */
	int listing;		/* a listing is being fetched */
	int list_rc;		/* the last listing's -errno, 0 */
	double list_rc_at;
	/* names looked up and not found, until the time beside them */
	char **missing;
	double *missing_until;
	size_t nmissing;
};

/* The root, listed once: *empty when that listing had no name (a
 * prefix that matches nothing). */
int fs_tree_init(int *empty, struct sk_error *err);
void fs_tree_shutdown(void);
struct fs_node *fs_tree_root(void);
/* The kid name of dir: held (nlookup + 1) in *out, or -errno. */
int fs_tree_lookup(struct fs_node *dir, const char *name,
    struct fs_node **out);
/* The kernel let go of n references. */
void fs_tree_forget(struct fs_node *n, uint64_t count);
/* dir's kids as they stand (listing first when stale), copied: names,
 * kinds and sizes in order, and held once each (the caller puts them with
 * fs_tree_forget after handing them to the kernel, or not at all when
 * hold is 0). */
struct fs_dirent {
	char *name;
	struct fs_node *node;
};
int fs_tree_readdir(struct fs_node *dir, struct fs_dirent **out,
    size_t *n);
void fs_tree_dirents_free(struct fs_dirent *d, size_t n);
/* A read found n's object changed: list its folder again next time. */
void fs_tree_stale(struct fs_node *n);
/* Let go of a pin fs_notify_entry took. */
void fs_tree_unpin(struct fs_node *n);

/* Tell the kernel to forget the name in parent (a name that went, or
 * changed version): queued, sent by a thread of its own; parent stays
 * pinned until then. Caller holds the tree's lock. (shardfs.c) */
void fs_notify_entry(struct fs_node *parent, const char *name);
/* Lock around reading a node's fields that a listing may change. */
void fs_tree_lock(void);
void fs_tree_unlock(void);

#endif /* SHARDFS_H */
