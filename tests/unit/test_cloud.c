/*
 * test_cloud.c - SigV4 against AWS's published examples, the AWS
 * credential chain (environment, profiles, region, endpoint) with no
 * secret in any message, and what S3 and GCS answers are read as.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "cloud.h"
#include "internal.h"

#define AKID	"AKIAIOSFODNN7EXAMPLE"
#define SECRET	"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define EMPTY	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* AWS's "GET Object" example of the S3 SigV4 documentation. */
TEST(sigv4_aws_get_object_example)
{
	const struct sk__hdr h[] = {
		{ "host", "examplebucket.s3.amazonaws.com" },
		{ "range", "bytes=0-9" },
		{ "x-amz-content-sha256", EMPTY },
		{ "x-amz-date", "20130524T000000Z" },
	};
	char auth[512];

	CHECK_EQ_INT(sk__sigv4(AKID, SECRET, "us-east-1", "s3", "GET",
	    "/test.txt", "", h, 4, EMPTY, "20130524T000000Z", auth,
	    sizeof auth), 0);
	CHECK_EQ_STR(auth, "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/"
	    "20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;"
	    "x-amz-content-sha256;x-amz-date,Signature="
	    "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

/* The "GET Bucket (List Objects)" example: a query to sort. */
TEST(sigv4_aws_list_objects_example)
{
	const struct sk__hdr h[] = {
		{ "x-amz-date", "20130524T000000Z" },
		{ "host", "examplebucket.s3.amazonaws.com" },
		{ "x-amz-content-sha256", EMPTY },
	};
	char auth[512];

	CHECK_EQ_INT(sk__sigv4(AKID, SECRET, "us-east-1", "s3", "GET", "/",
	    "prefix=J&max-keys=2", h, 3, EMPTY, "20130524T000000Z", auth,
	    sizeof auth), 0);
	CHECK_CONTAINS(auth, "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a"
	    "534bc59db6670ed5711ef69dc6f7");
}

/* The "PUT Object" example: a "$" in the key sent as %24, a Date and a
 * storage class signed too, the headers given out of order. */
TEST(sigv4_aws_put_object_example)
{
	const char *payload =
	    "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072";
	const struct sk__hdr h[] = {
		{ "host", "examplebucket.s3.amazonaws.com" },
		{ "date", "Fri, 24 May 2013 00:00:00 GMT" },
		{ "x-amz-date", "20130524T000000Z" },
		{ "x-amz-storage-class", "REDUCED_REDUNDANCY" },
		{ "x-amz-content-sha256", payload },
	};
	char auth[512];

	CHECK_EQ_INT(sk__sigv4(AKID, SECRET, "us-east-1", "s3", "PUT",
	    "/test%24file.text", "", h, 5, payload, "20130524T000000Z", auth,
	    sizeof auth), 0);
	CHECK_CONTAINS(auth, "SignedHeaders=date;host;x-amz-content-sha256;"
	    "x-amz-date;x-amz-storage-class,");
	CHECK_CONTAINS(auth, "Signature=98ad721746da40c64f1a55b78f14c238d841"
	    "ea1380cd77a1b5971af0ece108bd");
}

/* The "GET Bucket Lifecycle" example: a bare "lifecycle" is signed as
 * "lifecycle=". */
TEST(sigv4_aws_lifecycle_example)
{
	const struct sk__hdr h[] = {
		{ "host", "examplebucket.s3.amazonaws.com" },
		{ "x-amz-date", "20130524T000000Z" },
		{ "x-amz-content-sha256", EMPTY },
	};
	const char *q[] = { "lifecycle", "lifecycle=" };
	char auth[512];
	int i;

	for (i = 0; i < 2; i++) {
		CHECK_EQ_INT(sk__sigv4(AKID, SECRET, "us-east-1", "s3", "GET",
		    "/", q[i], h, 3, EMPTY, "20130524T000000Z", auth,
		    sizeof auth), 0);
		CHECK_CONTAINS(auth, "Signature=fea454ca298b7da1c68078a5d1bd"
		    "bfbbe0d65c699e0f91ac7a200a0136783543");
	}
}

TEST(sigv4_refuses_bad_input)
{
	const struct sk__hdr h[] = { { "host", "h" } };
	char auth[16];

	CHECK_EQ_INT(sk__sigv4(AKID, SECRET, "us-east-1", "s3", "GET", "/", "", h,
	    1, EMPTY, "2013-05-24", auth, sizeof auth), SK_EINVAL);
	CHECK_EQ_INT(sk__sigv4(AKID, SECRET, "us-east-1", "s3", "GET", "/", "", h,
	    1, EMPTY, "20130524T000000Z", auth, sizeof auth), SK_EINVAL);
}

static void
clear_env(void)
{
	static const char *const v[] = { "AWS_ACCESS_KEY_ID",
		"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
		"AWS_ENDPOINT_URL_S3", "SK_S3_ADDRESSING" };
	size_t i;

	for (i = 0; i < sizeof v / sizeof v[0]; i++)
		unsetenv(v[i]);
	setenv("AWS_SHARED_CREDENTIALS_FILE", t_path("credentials"), 1);
	setenv("AWS_CONFIG_FILE", t_path("config"), 1);
}

TEST(aws_env_beats_profile)
{
	struct sk__aws_creds c;
	struct sk_error err;
	const char *cred = "[default]\naws_access_key_id = FILEKEY\n"
	    "aws_secret_access_key = filesecret\n";

	clear_env();
	t_write_file(t_path("credentials"), cred, strlen(cred));
	setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	CHECK_EQ_INT(sk__aws_creds_load(&c, 0, &err), 0);
	CHECK_EQ_STR(c.access_key, "ENVKEY");
	CHECK_EQ_STR(c.region, "us-east-1");
	CHECK_EQ_STR(c.endpoint, "https://s3.us-east-1.amazonaws.com");
	CHECK_EQ_INT(c.path_style, 0);
	sk__aws_creds_free(&c);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	CHECK_EQ_INT(sk__aws_creds_load(&c, 0, &err), 0);
	CHECK_EQ_STR(c.access_key, "FILEKEY");
	CHECK_EQ_STR(c.secret_key, "filesecret");
	CHECK_CONTAINS(c.source, "credentials");
	sk__aws_creds_free(&c);
}

TEST(aws_profile_config_region_endpoint)
{
	struct sk__aws_creds c;
	struct sk_error err;
	const char *conf = "# comment\n[profile other]\nregion = eu-west-3\n"
	    "aws_access_key_id = K2\naws_secret_access_key = S2\n"
	    "aws_session_token = T2\nendpoint_url = http://127.0.0.1:9000/\n"
	    "s3 =\n  addressing_style = virtual\n[default]\nregion = x\n";

	clear_env();
	t_write_file(t_path("config"), conf, strlen(conf));
	setenv("AWS_PROFILE", "other", 1);
	CHECK_EQ_INT(sk__aws_creds_load(&c, 0, &err), 0);
	CHECK_EQ_STR(c.access_key, "K2");
	CHECK_EQ_STR(c.session_token, "T2");
	CHECK_EQ_STR(c.region, "eu-west-3");
	CHECK_EQ_STR(c.endpoint, "http://127.0.0.1:9000");
	CHECK_EQ_INT(c.path_style, 0);
	sk__aws_creds_free(&c);
	setenv("AWS_DEFAULT_REGION", "ap-south-1", 1);
	setenv("AWS_ENDPOINT_URL_S3", "https://s3.example.com:443", 1);
	setenv("SK_S3_ADDRESSING", "path", 1);
	CHECK_EQ_INT(sk__aws_creds_load(&c, 0, &err), 0);
	CHECK_EQ_STR(c.region, "ap-south-1");
	CHECK_EQ_STR(c.endpoint, "https://s3.example.com");
	CHECK_EQ_INT(c.path_style, 1);
	sk__aws_creds_free(&c);
	/* auto: path style for a custom endpoint; a bad value names all
	 * three. */
	setenv("SK_S3_ADDRESSING", "auto", 1);
	CHECK_EQ_INT(sk__aws_creds_load(&c, 0, &err), 0);
	CHECK_EQ_INT(c.path_style, 1);
	sk__aws_creds_free(&c);
	setenv("SK_S3_ADDRESSING", "vhost", 1);
	CHECK_EQ_INT(sk__aws_creds_load(&c, 0, &err), SK_EINVAL);
	CHECK_CONTAINS(err.msg, "SK_S3_ADDRESSING");
	CHECK_CONTAINS(err.msg, "want path, virtual or auto");
	unsetenv("SK_S3_ADDRESSING");
}

TEST(aws_bad_files_and_missing_keys)
{
	struct sk__aws_creds c;
	struct sk_error err;
	const char *bad = "[default]\naws_access_key_id = K\n"
	    "aws_secret_access_key topsecretvalue\n";
	const char *half = "[default]\naws_access_key_id = K\n";

	clear_env();
	t_write_file(t_path("credentials"), bad, strlen(bad));
	CHECK_EQ_INT(sk__aws_creds_load(&c, 0, &err), SK_EFORMAT);
	CHECK_CONTAINS(err.msg, ":3:");
	CHECK(strstr(err.msg, "topsecret") == NULL);
	t_write_file(t_path("credentials"), half, strlen(half));
	CHECK_EQ_INT(sk__aws_creds_load(&c, 0, &err), SK_EACCES);
	CHECK_CONTAINS(err.msg, "aws_secret_access_key");
	unlink(t_path("credentials"));
	CHECK_EQ_INT(sk__aws_creds_load(&c, 0, &err), SK_EACCES);
	CHECK_CONTAINS(err.msg, "--no-sign-request");
	CHECK_EQ_INT(sk__aws_creds_load(&c, 1, &err), 0);
	CHECK(c.access_key == NULL);
	sk__aws_creds_free(&c);
	mkdir(t_path("credentials"), 0700);
	CHECK_EQ_INT(sk__aws_creds_load(&c, 0, &err), SK_EINVAL);
	setenv("AWS_REGION", "us east", 1);
	rmdir(t_path("credentials"));
	setenv("AWS_ACCESS_KEY_ID", "K", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "S", 1);
	CHECK_EQ_INT(sk__aws_creds_load(&c, 0, &err), SK_EINVAL);
	CHECK_CONTAINS(err.msg, "AWS_REGION");
	unsetenv("AWS_REGION");
	setenv("AWS_ENDPOINT_URL", "ftp://x", 1);
	CHECK_EQ_INT(sk__aws_creds_load(&c, 0, &err), SK_EINVAL);
	CHECK_CONTAINS(err.msg, "AWS_ENDPOINT_URL");
	/* A port with no host before it (fuzz_awsini). */
	setenv("AWS_ENDPOINT_URL", "https://:9000", 1);
	CHECK_EQ_INT(sk__aws_creds_load(&c, 0, &err), SK_EINVAL);
	setenv("AWS_ENDPOINT_URL", "https://:443", 1);
	CHECK_EQ_INT(sk__aws_creds_load(&c, 0, &err), SK_EINVAL);
}

/* objects.get: the size is a string of decimal digits and nothing else
 * (fuzz_gcsjson found "+0450304" taken). */
TEST(gcs_meta_size)
{
	static const char *const bad[] = { "+5", "-1", "", " 5",
	    "18446744073709551616" };
	struct sk_error err;
	char gen[32], body[200];
	uint64_t size = 0;
	size_t i;

	snprintf(body, sizeof body, "{\"generation\": \"17\", \"size\": "
	    "\"18446744073709551615\"}");
	CHECK_EQ_INT(sk__gcs_parse_meta(body, strlen(body), "gs://b/o", gen,
	    &size, &err), 0);
	CHECK_EQ_STR(gen, "17");
	CHECK(size == UINT64_MAX);
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(body, sizeof body, "{\"generation\": \"17\", "
		    "\"size\": \"%s\"}", bad[i]);
		CHECK_EQ_INT(sk__gcs_parse_meta(body, strlen(body), "gs://b/o",
		    gen, &size, &err), SK_EFORMAT);
		CHECK_CONTAINS(err.msg, "bad size");
	}
}

/* ListObjectsV2: only the keys right under the prefix, whatever the
 * server sends (fuzz_s3xml found a key beside the folder listed). */
TEST(s3_list_page)
{
	const char *page = "<?xml version=\"1.0\"?><ListBucketResult>"
	    "<IsTruncated>true</IsTruncated><NextContinuationToken>t/1="
	    "</NextContinuationToken><Contents><Key>dir/a.tar</Key><Size>1"
	    "</Size></Contents><Contents><Key>dir/sub/b.tar</Key></Contents>"
	    "<Contents><Key>dix/c.tar</Key></Contents><Contents><Key>"
	    "dir/d.tar</Key><Size>2</Size></Contents></ListBucketResult>";
	struct sk__entries l = { NULL, 0, 0 };
	struct sk_error err = { 0 };
	struct sk__s3_error e;
	char token[64];
	int truncated;

	CHECK_EQ_INT(sk__s3_parse_list(page, strlen(page), "dir/",
	    "s3://b/dir/", &l, token, sizeof token, &truncated, &err), 0);
	CHECK_EQ_INT((int)l.n, 2);
	CHECK_EQ_STR(l.v[0].name, "a.tar");
	CHECK_EQ_STR(l.v[1].name, "d.tar");
	CHECK_EQ_STR(token, "t/1=");
	CHECK_EQ_INT(truncated, 1);
	sk__entries_free(&l);
	CHECK_EQ_INT(sk__s3_parse_list("<!DOCTYPE x><x/>", 16, "", "s3://b/",
	    &l, token, sizeof token, &truncated, &err), SK_EFORMAT);
	page = "<Error><Code>No&#233;Such</Code><Message>m</Message></Error>";
	CHECK_EQ_INT(sk__s3_parse_error(page, strlen(page), &e), 0);
	CHECK_EQ_STR(e.code, "No??Such");	/* UTF-8, two bytes */
	CHECK_EQ_STR(e.message, "m");
}

/* A server that ignores the page size it was asked for is refused. */
TEST(list_page_size_is_checked)
{
	struct sk_strlist l = { 0 };
	struct sk_error err = { 0 };
	int i;

	setenv("SK_LIST_PAGE", "2", 1);
	for (i = 0; i < 2; i++)
		CHECK_EQ_INT(sk_strlist_push(&l, "gs://b/d/x.tar"), 0);
	CHECK_EQ_INT(sk__list_check("gs://b/d/", 1, l.n, 0, 0, &err), 0);
	CHECK_EQ_INT(sk_strlist_push(&l, "gs://b/d/y.tar"), 0);
	CHECK_EQ_INT(sk__list_check("gs://b/d/", 2, l.n, 0, 0, &err),
	    SK_EFORMAT);
	CHECK_CONTAINS(err.msg, "page 2 of the listing holds 3 names, more "
	    "than the 2 asked for");
	CHECK_EQ_INT(sk__list_check("gs://b/d/", 2, l.n, 1, 0, &err), 0);
	unsetenv("SK_LIST_PAGE");
	sk_strlist_free(&l);
}

static void *
hash_forever(void *arg)
{
	char hex[65];

	(void)arg;
	for (;;)
		sk__sha256_hex("shardkit", 8, hex);
	return NULL;
}

/* A tool that dies while another thread signs a request exits with its
 * status: libcrypto's tables outlive exit() (they once went with an atexit
 * handler, and the signing thread crashed the dying process). */
TEST(exit_while_a_thread_hashes)
{
	int i, status;

	for (i = 0; i < 20; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			pthread_t t[2];

			pthread_create(&t[0], NULL, hash_forever, NULL);
			pthread_create(&t[1], NULL, hash_forever, NULL);
			usleep(2000);
			exit(1);
		}
		CHECK(pid > 0);
		CHECK(waitpid(pid, &status, 0) == pid);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1);
	}
}
