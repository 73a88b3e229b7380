/*
 * study_env.h - the environment of shardtrain study: the servers (nginx,
 * moto, the GCS emulator), the link proxies in front of them and the
 * shardfs mount that make one local root available as every source, started
 * on first use and always stopped.
 */
#ifndef STUDY_ENV_H
#define STUDY_ENV_H

#include <stddef.h>

struct study_link {
	int enabled;		/* 0: no proxy in front (e.g. --remote) */
	double ttfb_ms;		/* time to first byte, ms */
	double conn_rate;	/* bytes/s per connection */
	double total_rate;	/* bytes/s all connections */
};

struct study_env;

/*
 * dir: a private working folder for configs, logs, mount points (exists).
 * Finds the programs: nginx, moto_server, gcp-storage-emulator, python3,
 * fusermount3 (+ /dev/fuse), and shardkit's own shardfs and linkproxy (see
 * "finding our programs"). Never fails for a missing program: that is
 * study_env_missing's job.
 */
int study_env_open(struct study_env **out, const char *dir, const char *root,
    const struct study_link *link, char *err, size_t errlen);

/*
 * --remote: the remote cells read from url (http(s)://HOST/PATH/,
 * s3://BUCKET/PREFIX/ or gs://BUCKET/PREFIX/, normalised to end in '/')
 * instead of the local servers, with no link emulated. The source of its
 * kind ("http" for http and https, "s3", "gs") and "mount" (shardfs
 * mounting url) use it; the other remote sources are skipped
 * (study_env_missing says "--remote names an s3:// URL"). A bucket is
 * filled from the root's files/ and shards/ on first use (study_env_source
 * of its source or of "mount"), object by object with the user's own
 * credentials, shards/study.json last (so that a fill cut short is done
 * again), unless it already holds PREFIX/shards/study.json: then it is
 * used as it is (study_env_remote_note says so). An http(s) URL must
 * already serve a copy of the root (files/ and shards/, folders as nginx
 * JSON autoindex for the mount); study_env_source fails, saying to copy
 * the root there, when URL/shards/study.json cannot be read. A failure
 * there is kept and given to every later call. In remote mode
 * study_env_apply puts back the user's own cloud and proxy settings (as
 * they were at study_env_open) rather than the emulators'. Call after
 * study_env_open and before any study_env_source. Returns 0, or -1 with
 * err (a bad scheme or form; or this process's libshardkit has already
 * read the emulator's settings for that scheme).
 */
int study_env_remote(struct study_env *e, const char *url, char *err,
    size_t errlen);

/*
 * What became of the --remote data, once study_env_source has looked at
 * it; NULL before (and without --remote). One line, no credentials:
 * "s3://b/p/ already holds shards/study.json, the same as ROOT's: used as
 * it is, nothing uploaded", "s3://b/p/ already holds a shards/study.json
 * that differs from ROOT's: used as it is, nothing uploaded", "uploaded
 * 1234 files (56.7 MB) from ROOT to s3://b/p/", "https://h/p/ serves
 * shards/study.json, the same as ROOT's".
 */
const char *study_env_remote_note(struct study_env *e);

/*
 * NULL when `source` ("local", "http", "s3", "gs", "mount") can run here;
 * else a one-line reason, e.g. "nginx is not installed (apt-get install
 * nginx)", "no /dev/fuse", "fusermount3 is missing (apt-get install fuse3)",
 * "moto_server is missing (pip install 'moto[server]')", "linkproxy was not
 * found".
 */
const char *study_env_missing(struct study_env *e, const char *source);

/*
 * Make the root available at `source` (servers started on first use, then
 * reused by later calls; uploads done once per bucket) and write into url
 * the base that stands for root, ending in '/': "ROOT/" for local,
 * "http://127.0.0.1:PROXYPORT/" for http, "s3://shardkit-study/" for s3,
 * "gs://shardkit-study/" for gs, "DIR/mnt/" for mount (shardfs mounting the
 * http tree through the proxy, with metadata_ttl=-1, waited for in
 * /proc/mounts for 30 s at most). The caller appends "files/" or
 * "shards/NAME.json". With --remote, the URL itself for its source and
 * "DIR/mnt/" for mount (see study_env_remote). Returns 0, or -1 with a
 * message in err.
 */
int study_env_source(struct study_env *e, const char *source, char *url,
    size_t cap, char *err, size_t errlen);

/* The next "mount" source is a fresh mount: the current one (and the block
 * cache of its shardfs) goes now, so no cell reads what another fetched. */
void study_env_cold(struct study_env *e);

/*
 * Set (setenv) in this process the variables a client of `source` needs, and
 * unset the others: for s3 AWS_ENDPOINT_URL_S3 = the PROXY in front of moto,
 * AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION and path-style
 * addressing (SK_S3_ADDRESSING); for gs
 * STORAGE_EMULATOR_HOST = the proxy in front of the emulator; for
 * local/http/mount, unset them. Also export no_proxy=127.0.0.1,localhost and
 * unset http_proxy etc. Children spawned afterwards inherit them. With
 * --remote, for every source: the user's own settings (and proxies) as
 * study_env_open found them, nothing of the emulators'.
 */
void study_env_apply(struct study_env *e, const char *source);

/*
 * Stop everything: unmount mounts first (fusermount3 -u, then -u -z if
 * busy), then kill servers and proxies (SIGTERM, wait up to 5 s, SIGKILL),
 * and reap them. Idempotent.
 */
void study_env_stop(struct study_env *e);
void study_env_close(struct study_env *e);	/* stop + free */

/*
 * For a SIGINT/SIGTERM handler: async-signal-safe; SIGTERM to every
 * process started, without waiting or freeing. The main path then calls
 * study_env_stop, which unmounts and reaps.
 */
void study_env_kill_async(void);

#endif
