# shellcheck shell=bash
# tests/cli/bucket-lib.sh - object stores on 127.0.0.1 for the gs:// and
# s3:// tests: gcp-storage-emulator (PyPI) and moto's S3 server (PyPI,
# moto[server]) with SigV4 checked. They join http-lib.sh's servers, so
# they are stopped on exit whatever the outcome. The host's own cloud
# settings never reach a test.
#
# Sourced after lib.sh and http-lib.sh.

unset STORAGE_EMULATOR_HOST GOOGLE_OAUTH_ACCESS_TOKEN \
    GOOGLE_APPLICATION_CREDENTIALS GCE_METADATA_HOST SK_GCS_ENDPOINT \
    AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_PROFILE \
    AWS_REGION AWS_DEFAULT_REGION AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 \
    SK_S3_ADDRESSING SK_LIST_PAGE
# gcloud's application-default credentials are looked for in
# CLOUDSDK_CONFIG (else ~/.config/gcloud): a folder with none.
export AWS_CONFIG_FILE="$T/no-aws-config" \
    AWS_SHARED_CREDENTIALS_FILE="$T/no-aws-credentials" \
    CLOUDSDK_CONFIG="$T/no-gcloud"

# bucket_server NAME PORT CMD...: start a server, wait for its port (30 s).
bucket_server() {
	local name=$1 port=$2 i
	shift 2
	"$@" >"$T/$name.log" 2>&1 &
	HTTP_PIDS+=($!)
	for i in $(seq 300); do
		python3 -c 'import socket, sys
socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' \
		    "$port" 2>/dev/null && return 0
		kill -0 "${HTTP_PIDS[-1]}" 2>/dev/null || break
		sleep 0.1
	done
	cat "$T/$name.log" >&2
	fail "$name did not start on 127.0.0.1:$port"
}

# gcs_start: gcp-storage-emulator in memory, through tests/py/gcs_server.py
# (which adds listing pages and generation checks); STORAGE_EMULATOR_HOST
# and GCS_PORT name it.
gcs_start() {
	command -v gcp-storage-emulator >/dev/null ||
		fail "gcp-storage-emulator is missing: pip install gcp-storage-emulator"
	GCS_PORT=$(free_port)
	bucket_server gcs "$GCS_PORT" \
	    python3 "$top_srcdir/tests/py/gcs_server.py" start --host 127.0.0.1 --port "$GCS_PORT" --in-memory
	export STORAGE_EMULATOR_HOST="http://127.0.0.1:$GCS_PORT"
}

# gcs_bucket NAME
gcs_bucket() {
	python3 - "$1" <<'EOF'
import json, os, sys, urllib.request
req = urllib.request.Request(
    os.environ["STORAGE_EMULATOR_HOST"] + "/storage/v1/b?project=test",
    data=json.dumps({"name": sys.argv[1]}).encode(), method="POST",
    headers={"Content-Type": "application/json"})
urllib.request.urlopen(req).read()
EOF
}

# s3_start: moto's S3 server with authentication on, through
# tests/py/moto_server.py, which checks signatures over the request as sent
# (stock moto fails a correctly signed '%2F' in a query). Its first three
# requests go unchecked: they make a user, its allow-all policy and its
# access key, which the test then signs with (AWS_ACCESS_KEY_ID, ...).
s3_start() {
	command -v moto_server >/dev/null ||
		fail "moto_server is missing: pip install 'moto[server]'"
	S3_PORT=$(free_port)
	INITIAL_NO_AUTH_ACTION_COUNT=3 bucket_server s3 "$S3_PORT" \
	    python3 "$top_srcdir/tests/py/moto_server.py" -H 127.0.0.1 \
	    -p "$S3_PORT"
	export AWS_REGION=us-east-1
	export AWS_ENDPOINT_URL_S3="http://127.0.0.1:$S3_PORT"
	python3 - >"$T/s3-keys" <<'EOF' || fail "cannot make moto's test keys"
import json, os, boto3
iam = boto3.client("iam", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"],
                   region_name="us-east-1", aws_access_key_id="setup",
                   aws_secret_access_key="setup")
iam.create_user(UserName="shardkit")
iam.put_user_policy(UserName="shardkit", PolicyName="all",
    PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
k = iam.create_access_key(UserName="shardkit")["AccessKey"]
print(k["AccessKeyId"], k["SecretAccessKey"])
EOF
	read -r AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY <"$T/s3-keys"
	rm -f "$T/s3-keys"
	export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
}

# s3_bucket NAME
s3_bucket() {
	python3 -c 'import boto3, sys
boto3.client("s3").create_bucket(Bucket=sys.argv[1])' "$1"
}
