/*
 * cloud.h - what gs:// and s3:// add to an HTTP request: credentials found
 * the way Google's and AWS's own tools find them, SigV4 signatures and
 * service-account JWTs. Internal to libshardkit; no secret ever goes into
 * an sk_error or a log line.
 */
#ifndef SK_CLOUD_H
#define SK_CLOUD_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "shardkit.h"

struct sk__entries;

/* ------------------------------------------------------------------------ */
/* S3 and compatible stores (aws.c, sigv4.c)                               */

struct sk__aws_creds {
	char *access_key;	/* NULL: requests go unsigned (public buckets) */
	char *secret_key;
	char *session_token;	/* or NULL */
	char *region;		/* never NULL once loaded: "us-east-1" at least */
	char *endpoint;		/* "scheme://host[:port]", no trailing '/' */
	int path_style;		/* bucket in the path rather than the host */
	int custom_endpoint;	/* endpoint came from the user, not AWS's */
	char *ca_bundle;	/* AWS_CA_BUNDLE, else the profile's
				 * ca_bundle, or NULL */
	char source[200];	/* where the keys came from, for messages:
				 * "AWS_ACCESS_KEY_ID in the environment",
				 * "profile \"x\" in /root/.aws/credentials",
				 * "none (unsigned requests)"; never a secret */
};

/*
 * Find credentials, region and endpoint as the AWS CLI does:
 *  - keys: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN),
 *    else the profile AWS_PROFILE (or "default") in
 *    AWS_SHARED_CREDENTIALS_FILE (or ~/.aws/credentials), then in
 *    AWS_CONFIG_FILE (or ~/.aws/config, section "[profile NAME]", or
 *    "[default]"); none found is unsigned only when no_sign is set, else
 *    SK_EACCES with a message that lists what was looked at;
 *  - region: AWS_REGION, AWS_DEFAULT_REGION, the profile's region,
 *    "us-east-1";
 *  - endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
 *    endpoint_url, else https://s3.REGION.amazonaws.com;
 *  - addressing: SK_S3_ADDRESSING=path|virtual, else the profile's
 *    "s3 = addressing_style = ..." (or addressing_style), else path for a
 *    custom endpoint and virtual for AWS's own.
 *  - CA bundle: AWS_CA_BUNDLE, else the profile's ca_bundle (for https
 *    endpoints; the tools' --ca-file wins over both).
 * no_sign (the tools' --no-sign-request) skips the keys altogether.
 * Every file is read with a size bound; a malformed one is SK_EFORMAT
 * naming the file and line.
 */
int sk__aws_creds_load(struct sk__aws_creds *c, int no_sign,
    struct sk_error *err);
void sk__aws_creds_free(struct sk__aws_creds *c);

/* A header to sign: name in lower case, value trimmed. */
struct sk__hdr {
	const char *name;
	const char *value;
};

/*
 * AWS Signature Version 4: the value of the Authorization header.
 * path is the request's path as sent (already percent-encoded, S3 style:
 * not encoded twice); query is the raw query as sent, without '?', or "";
 * hdrs are all the headers to sign (host, x-amz-date, x-amz-content-sha256
 * and x-amz-security-token at least; range when sent), in any order;
 * payload is the hex SHA-256 of the body or "UNSIGNED-PAYLOAD"; amzdate is
 * "YYYYMMDDTHHMMSSZ". Returns 0, or SK_EINVAL / SK_ENOMEM (auth too
 * small, a bad date).
 */
int sk__sigv4(const char *access_key, const char *secret, const char *region,
    const char *service, const char *method, const char *path,
    const char *query, const struct sk__hdr *hdrs, size_t nhdrs,
    const char *payload, const char *amzdate, char *auth, size_t authlen);

/* The hex SHA-256 of n bytes (65 bytes with the NUL). */
void sk__sha256_hex(const void *data, size_t n, char out[65]);

/*
 * What S3 answers, parsed (source_s3.c; expat, no DTD, so no entity is
 * ever expanded). Each reads n bytes of server input and returns 0, or
 * SK_EFORMAT for a body that is not the XML it should be.
 */

/* An <Error> body's Code and Message, printable ASCII, "" when absent;
 * filled as far as the body parsed even on SK_EFORMAT. */
struct sk__s3_error {
	char code[128], message[512];
	char region[64];	/* where the bucket is, when S3 says */
};
int sk__s3_parse_error(const char *xml, size_t n, struct sk__s3_error *e);

/* One ListObjectsV2 page (delimiter '/'): the objects of its Contents
 * right under prefix with their Size, ETag and LastModified, and the
 * folders of its CommonPrefixes, appended to out, names relative to
 * prefix (other keys are dropped); NextContinuationToken in token (""
 * when none) and IsTruncated in *truncated. Also SK_EFORMAT with err set
 * naming display for an object's Size that is not decimal digits or an
 * ETag that cannot be a version, and SK_ENOMEM; what was added before a
 * failure stays in out. */
int sk__s3_parse_list(const char *xml, size_t n, const char *prefix,
    const char *display, struct sk__entries *out, char *token,
    size_t tokenlen, int *truncated, struct sk_error *err);

/* An InitiateMultipartUploadResult's UploadId; SK_EFORMAT when none. */
int sk__s3_parse_upload_id(const char *xml, size_t n, char *id,
    size_t idlen);

/* ------------------------------------------------------------------------ */
/* Google Cloud Storage (gcs_auth.c)                                        */

/*
 * A service-account key file (the JSON "type": "service_account" with
 * client_email, private_key, token_uri) to a signed RS256 JWT assertion for
 * scope, valid from now for an hour, and the token_uri to exchange it at.
 * file names the key in messages; the key itself never appears.
 */
int sk__gcs_jwt(const char *json, size_t len, const char *file,
    const char *scope, time_t now, char **jwt, char **token_uri,
    struct sk_error *err);

/*
 * Either kind of credentials file Google's application-default
 * credentials name: a service account's key (its JWT assertion, above) or
 * gcloud's "authorized_user" (a refresh token, with client_id and
 * client_secret). *body is the form to POST to *token_uri (wipe it after
 * use: it holds the assertion or the secrets); *quota the
 * quota_project_id to bill, or NULL; *user 1 for authorized_user. file
 * names the file in messages; no secret ever appears in one.
 */
int sk__gcs_grant(const char *json, size_t len, const char *file,
    const char *scope, time_t now, char **body, char **token_uri,
    char **quota, int *user, struct sk_error *err);

/*
 * What the JSON API answers, parsed (source_gs.c): n bytes of server
 * input each; display names the request in messages.
 */

/* An error body {"error": {"message", "errors": [{"reason"}]}}: message
 * and reason, printable ASCII, "" when absent or not JSON. */
void sk__gcs_parse_error(const char *body, size_t len, char *message,
    size_t mn, char *reason, size_t rn);

/* An objects.get answer: "generation" (decimal, into gen) and "size".
 * 0, or SK_EFORMAT without a usable pair. */
int sk__gcs_parse_meta(const char *text, size_t len, const char *display,
    char gen[32], uint64_t *size, struct sk_error *err);

/* One objects.list page (delimiter '/'): the objects of "items" right
 * under prefix with their size, generation and update time, and the
 * folders of "prefixes", appended to out, names relative to prefix (other
 * names are dropped: a server may not add objects from elsewhere to a
 * folder); "nextPageToken", URI-escaped, in *next (NULL when none; the
 * caller frees it). 0, SK_EFORMAT (also for an object's size or
 * generation that is not decimal digits), SK_ENOMEM; what was added
 * before a failure stays in out. */
int sk__gcs_parse_list(const char *text, size_t len, const char *prefix,
    const char *display, struct sk__entries *out, char **next,
    struct sk_error *err);

/* An OAuth2 token response {"access_token", "expires_in", "token_type"}:
 * the token and its lifetime in seconds. from names the endpoint. */
int sk__oauth_parse(const char *body, size_t len, const char *from,
    char **token, long *expires_in, struct sk_error *err);

#endif /* SK_CLOUD_H */
