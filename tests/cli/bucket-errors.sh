#!/usr/bin/env bash
# bucket-errors.sh - the S3 errors moto cannot stage, from an endpoint that
# answers with S3's own error bodies (tests/py/s3_errors.py): a skewed
# clock, an expired session token, a bucket in another region (a malformed
# authorization header, a permanent redirect), throttling that outlasts the
# retries, a plain denial, a hostile XML body and an empty one. Each gets a
# message that says what to do, names the object and where the keys came
# from, and never holds the secret or the token; 4xx are not retried.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/bucket-lib.sh"

python3 "$top_srcdir/tests/py/s3_errors.py" --port-file "$T/s3e.port" \
    --log "$T/s3e.log" 2>"$T/s3e.err" &
HTTP_PIDS+=($!)
for _ in $(seq 100); do
	[ -s "$T/s3e.port" ] && break
	sleep 0.1
done
[ -s "$T/s3e.port" ] || { cat "$T/s3e.err" >&2; fail "s3_errors.py did not start"; }
export AWS_ENDPOINT_URL_S3="http://127.0.0.1:$(cat "$T/s3e.port")"
export AWS_REGION=us-east-1 SK_S3_ADDRESSING=path
export AWS_ACCESS_KEY_ID=AKIDSHARDKITTEST0001
export AWS_SECRET_ACCESS_KEY=secret-shardkit-never-to-print
export AWS_SESSION_TOKEN=session-shardkit-never-to-print
fast=(--retry-time 2 --connect-timeout 1)

# requests_for BUCKET: how many requests reached it.
requests_for() {
	grep -c " /$1/" "$T/s3e.log" || true
}

say "a skewed clock"
st_rc 1 skew ls "${fast[@]}" "s3://skew/a/s-000000.tar"
has skew.err "s3://skew/a/s-000000.tar"
has skew.err "RequestTimeTooSkewed"
has skew.err "clock"
[ "$(requests_for skew)" -eq 1 ] || fail "a 403 was retried"

say "an expired session token names where the keys came from"
st_rc 1 expired ls "${fast[@]}" "s3://expired/a/s-000000.tar"
has expired.err "ExpiredToken"
has expired.err "AWS_ACCESS_KEY_ID in the environment"
has expired.err "get new credentials"

say "a bucket in another region"
st_rc 1 region ls "${fast[@]}" "s3://region/a/s-000000.tar"
has region.err "AuthorizationHeaderMalformed"
has region.err "the bucket is in region eu-west-1, not us-east-1"
has region.err "set AWS_REGION=eu-west-1"
st_rc 1 redirect ls "${fast[@]}" "s3://redirect/a/s-000000.tar"
has redirect.err "PermanentRedirect"
has redirect.err "AWS_REGION"

say "throttling that outlasts --retry-time is retried, then named"
st_rc 1 slow ls "${fast[@]}" "s3://slowdown/a/s-000000.tar"
has slow.err "s3://slowdown/a/s-000000.tar"
has slow.err "503"
[ "$(requests_for slowdown)" -ge 2 ] || fail "a 503 was not retried"

say "a denial, a hostile body and an empty one"
st_rc 1 denied ls "${fast[@]}" "s3://denied/a/s-000000.tar"
has denied.err "AccessDenied"
has denied.err "check the bucket's policy"
st_rc 1 dtd ls "${fast[@]}" "s3://dtd/a/s-000000.tar"
has dtd.err "s3://dtd/a/s-000000.tar"
hasnt dtd.err "aaaa"
st_rc 1 empty ls "${fast[@]}" "s3://empty/a/s-000000.tar"
has empty.err "s3://empty/a/s-000000.tar"
has empty.err "HTTP 403: access denied"
st_rc 1 nobucket ls "${fast[@]}" "s3://other/a/s-000000.tar"
has nobucket.err "NoSuchBucket"

say "an endpoint that is not S3 (nginx's HTML 404) says so"
mkdir -p "$T/www"
http_start "$T/www"
AWS_ENDPOINT_URL_S3=$HTTP_URL st_rc 1 nots3 ls "${fast[@]}" \
    "s3://bucket/a/s-000000.tar"
has nots3.err "the answer is not an S3 error: is $HTTP_URL an S3 endpoint?"
hasnt nots3.err "NoSuchKey"

say "AWS_CA_BUNDLE and a profile's ca_bundle verify an https endpoint"
# The same nginx over https, its CA only in the bundle: refused without
# it, trusted with it (the answer then is nginx's, not S3's).
AWS_ENDPOINT_URL_S3=$HTTPS_URL st_rc 1 nobundle ls "${fast[@]}" \
    "s3://bucket/a/s-000000.tar"
has nobundle.err "certificate"
AWS_ENDPOINT_URL_S3=$HTTPS_URL AWS_CA_BUNDLE=$T/ca.pem st_rc 1 bundle ls \
    "${fast[@]}" "s3://bucket/a/s-000000.tar"
has bundle.err "is $HTTPS_URL an S3 endpoint?"
printf '[default]\nca_bundle = %s\n' "$T/ca.pem" >"$T/aws-config"
AWS_ENDPOINT_URL_S3=$HTTPS_URL AWS_CONFIG_FILE=$T/aws-config st_rc 1 \
    pbundle ls "${fast[@]}" "s3://bucket/a/s-000000.tar"
has pbundle.err "is $HTTPS_URL an S3 endpoint?"
# --ca-file wins: another CA refuses it whatever the bundle says.
AWS_ENDPOINT_URL_S3=$HTTPS_URL AWS_CA_BUNDLE=$T/ca.pem st_rc 1 cafile ls \
    "${fast[@]}" --ca-file "$T/other.pem" "s3://bucket/a/s-000000.tar"
has cafile.err "certificate"

say "pack and the loader say the same"
synth_imagenet "$T/i" --classes 2 --per-class 4 --val 2 --seed 3
st_rc 1 packskew pack imagenet "$T/i" "${fast[@]}" -o "s3://skew/p/p-%03d.tar"
has packskew.err "RequestTimeTooSkewed"
sl_rc 1 slexp keys "s3://expired/a/a.json" "${fast[@]}"
has slexp.err "ExpiredToken"

say "no secret or token in any output"
for f in "$T"/*.out "$T"/*.err; do
	if grep -qF -e "$AWS_SECRET_ACCESS_KEY" -e "$AWS_SESSION_TOKEN" "$f"; then
		fail "$f holds the secret or the session token"
	fi
done
echo ok
