/*
 * cli-remote.c - the options of the fetch engine (connections, parts,
 * timeouts, the CA bundle, unsigned s3://) that every tool reading
 * http(s)://, gs:// and s3:// takes, and
 * the remote counters as each tool prints and --jsons them.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

#define OPT(name, id, type, arg, help, min, max) \
	{ name, 0, id, type, arg, help, min, max, NULL, 0 }
#define END { NULL, 0, 0, 0, NULL, NULL, 0, 0, NULL, 0 }

const struct cli_option cli_remote_opts[] = {
	OPT("connections", CLI_R_CONNECTIONS, CLI_INT, "N",
	    "connections at once, all shards (64)", 1,
	    SK_FETCH_MAX_CONNECTIONS),
	OPT("parts", CLI_R_PARTS, CLI_INT, "N",
	    "ranged GETs in flight per shard (4)", 1, SK_FETCH_MAX_PARTS),
	OPT("part-size", CLI_R_PART_SIZE, CLI_SIZE, "SIZE",
	    "bytes per ranged GET (8M)", SK_FETCH_MIN_PART_SIZE,
	    SK_FETCH_MAX_PART_SIZE),
	OPT("connect-timeout", CLI_R_CONNECT_TIMEOUT, CLI_DURATION, "TIME",
	    "time to connect (10s)", SK_FETCH_MIN_CONNECT_TIMEOUT,
	    SK_FETCH_MAX_TIMEOUT),
	OPT("stall-timeout", CLI_R_STALL_TIMEOUT, CLI_DURATION, "TIME",
	    "a transfer with no byte for this long\nis retried (30s)",
	    SK_FETCH_MIN_STALL_TIMEOUT, SK_FETCH_MAX_TIMEOUT),
	OPT("retry-time", CLI_R_RETRY_TIME, CLI_DURATION, "TIME",
	    "give up on a part after retrying\nthis long (2m)", 0,
	    SK_FETCH_MAX_RETRY_TIME),
	OPT("attempts", CLI_R_ATTEMPTS, CLI_INT, "N",
	    "tries per part at most (30)", 1, SK_FETCH_MAX_ATTEMPTS),
	OPT("no-sign-request", CLI_R_NO_SIGN, CLI_FLAG, NULL,
	    "s3: send requests unsigned (a public bucket)", 0, 0),
	OPT("allow-cross-origin", CLI_R_CROSS_ORIGIN, CLI_FLAG, NULL,
	    "a remote manifest may name shards on\nother origins (only its "
	    "own)", 0, 0),
	OPT("ca-file", CLI_R_CA_FILE, CLI_STRING, "FILE",
	    "https: trust these CAs (CURL_CA_BUNDLE,\nSSL_CERT_FILE, the "
	    "system store)", 0, 0),
	END
};

int
cli_is_manifest(const char *source)
{
	size_t n = strlen(source);

	/* A signed URL's query follows the name: ".json?X-Amz-..." */
	if (strncmp(source, "http://", 7) == 0 ||
	    strncmp(source, "https://", 8) == 0)
		n = strcspn(source, "?#");
	return n > 5 && strncasecmp(source + n - 5, ".json", 5) == 0;
}

void
cli_json_source(struct cli_json *j, const char *key, const char *source)
{
	char *shown;

	if (source == NULL) {
		cli_json_null(j, key);
		return;
	}
	if ((shown = sk_url_redact(source)) == NULL)
		die("out of memory");
	cli_json_str(j, key, shown);
	free(shown);
}

void
cli_remote_init(struct cli_remote *r)
{
	memset(r, 0, sizeof *r);
	sk_fetch_config_init(&r->cfg);
}

int
cli_remote_set(struct cli_remote *r, const struct cli_option *o,
    const struct cli_value *v)
{
	struct sk_fetch_config *c = &r->cfg;

	switch (o->id) {
	case CLI_R_CONNECTIONS: c->connections = (int)v->i; break;
	case CLI_R_PARTS: c->parts = (int)v->i; break;
	case CLI_R_PART_SIZE: c->part_size = v->u; break;
	case CLI_R_CONNECT_TIMEOUT: c->connect_timeout = v->d; break;
	case CLI_R_STALL_TIMEOUT: c->stall_timeout = v->d; break;
	case CLI_R_RETRY_TIME: c->retry_time = v->d; break;
	case CLI_R_ATTEMPTS: c->attempts = (int)v->i; break;
	case CLI_R_CA_FILE: c->ca_file = v->s; break;
	case CLI_R_NO_SIGN: c->no_sign = 1; break;
	case CLI_R_CROSS_ORIGIN: c->allow_cross_origin = 1; break;
	default:
		return 0;
	}
	return 1;
}

void
cli_remote_finish(struct cli_remote *r)
{
	struct sk_error err;

	if (sk_fetch_configure(&r->cfg, &err) != 0)
		usage_error("%s", err.msg);
	sk_fetch_stats(&r->start);
}

void
cli_remote_stats(const struct cli_remote *r, struct sk_fetch_stats *st)
{
	struct sk_fetch_stats now;

	sk_fetch_stats(&now);
	sk_fetch_stats_sub(st, &now, &r->start);
}

void
cli_json_remote(struct cli_json *j, const char *key,
    const struct sk_fetch_stats *st, const struct sk_loader_stats *ls)
{
	int i;

	cli_json_object(j, key);
	if (ls != NULL) {
		cli_json_int(j, "ahead", ls->ahead);
		cli_json_int(j, "ahead_peak", ls->ahead_peak);
		cli_json_int(j, "ahead_cap", ls->ahead_cap);
	}
	cli_json_uint(j, "bytes", st->bytes);
	cli_json_uint(j, "requests", st->requests);
	cli_json_uint(j, "retries", st->retries);
	cli_json_object(j, "retries_by_cause");
	for (i = 0; i < SK_RETRY_NCAUSES; i++)
		cli_json_uint(j, sk_retry_cause_name(i),
		    st->retries_by_cause[i]);
	cli_json_end(j);
	cli_json_uint(j, "resumes", st->resumes);
	cli_json_uint(j, "refetched_bytes", st->refetched_bytes);
	cli_json_uint(j, "failures", st->failures);
	if (st->ttfb_count > 0)
		cli_json_real(j, "mean_ttfb_seconds", st->ttfb_seconds /
		    (double)st->ttfb_count);
	else
		cli_json_null(j, "mean_ttfb_seconds");
	cli_json_real(j, "network_wait_seconds", st->wait_seconds);
	cli_json_end(j);
}

void
cli_print_remote(FILE *f, const struct sk_fetch_stats *st)
{
	int i, any = 0;

	if (st->requests == 0)
		return;
	fprintf(f, "remote: %llu requests, %.1f MiB, %llu retries",
	    (unsigned long long)st->requests, (double)st->bytes / 1048576,
	    (unsigned long long)st->retries);
	for (i = 0; i < SK_RETRY_NCAUSES; i++)
		if (st->retries_by_cause[i] > 0)
			fprintf(f, "%s%s %llu", any++ ? ", " : " (",
			    sk_retry_cause_name(i),
			    (unsigned long long)st->retries_by_cause[i]);
	fprintf(f, "%s, %llu resumed, %llu bytes fetched twice\n",
	    any ? ")" : "", (unsigned long long)st->resumes,
	    (unsigned long long)st->refetched_bytes);
	fprintf(f, "remote: mean time to first byte %.1f ms, readers waited "
	    "%.3f s on the network\n", st->ttfb_count > 0 ?
	    1e3 * st->ttfb_seconds / (double)st->ttfb_count : 0.0,
	    st->wait_seconds);
}
