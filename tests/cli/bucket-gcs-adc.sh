#!/usr/bin/env bash
# bucket-gcs-adc.sh - gcloud's application-default credentials ("type":
# "authorized_user": client_id, client_secret, refresh_token), against
# tests/py/fake_gcp_auth.py as the OAuth2 token endpoint (it checks the
# refresh_token grant against the file made here) and a storage proxy
# that takes only the tokens it issued, in front of gcp-storage-emulator.
# The file in GOOGLE_APPLICATION_CREDENTIALS, then gcloud's default file
# (CLOUDSDK_CONFIG, else ~/.config/gcloud), for shardtool, shardload and
# a shardfs mount; the quota project sent; a token refreshed before it
# runs out; a refresh token the endpoint refuses and a file without one
# fail naming the file and the field, never the secrets.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/bucket-lib.sh"
. "$top_srcdir/tests/cli/fuse-lib.sh"

FAKE="$PY/fake_gcp_auth.py"
LIFE=4		# the tokens' lifetime for the refresh, seconds

# auth_start NAME UPSTREAM [ARGS...]: the token endpoint for $T/u/adc.json
# and storage proxy in front of UPSTREAM, on one port; stopped on exit.
# Sets AUTH_URL; $T/NAME-adc.json is the credentials file with its
# token_uri.
auth_start() {
	local name=$1 up=$2
	shift 2
	: >"$T/$name.log"
	python3 "$FAKE" --token-endpoint --authorized-user "$T/u/adc.json" \
	    --storage-proxy "$up" --port-file "$T/$name.port" \
	    --log "$T/$name.log" --tokens-file "$T/tokens" "$@" \
	    >"$T/$name.stderr" 2>&1 &
	HTTP_PIDS+=($!)
	for _ in $(seq 100); do
		[ -s "$T/$name.port" ] && break
		kill -0 "${HTTP_PIDS[-1]}" 2>/dev/null || break
		sleep 0.1
	done
	[ -s "$T/$name.port" ] || {
		cat "$T/$name.stderr" >&2
		fail "fake_gcp_auth.py ($name) did not start"
	}
	AUTH_URL="http://127.0.0.1:$(cat "$T/$name.port")"
	sed "s|@TOKEN_URI@|$AUTH_URL/token|" "$T/u/adc.json" \
	    >"$T/$name-adc.json"
}

declare -A MARK
mark() { MARK[$1]=$(wc -l <"$T/$1.log"); }
# logq NAME EXPR: EXPR (Python) over the list L of NAME's log lines since
# the mark.
logq() {
	python3 - "$T/$1.log" "${MARK[$1]:-0}" "$2" <<'EOF' ||
import json, sys
L = [json.loads(l) for l in open(sys.argv[1]).read().splitlines()]
L = L[int(sys.argv[2]):]
print(eval(sys.argv[3]))
EOF
	    fail "cannot read $T/$1.log"
}
want() { [ "$2" = "$3" ] || fail "$1: $2, want $3"; }
# grants NAME: the refresh_token grants NAME's endpoint gave since the mark.
grants() { logq "$1" "sum(e['kind'] == 'token' and e['ok'] and
    e['grant'] == 'refresh_token' for e in L)"; }
# storage_ok NAME: storage requests since the mark, all let through, all
# with the file's quota project.
storage_ok() {
	[ "$(logq "$1" "sum(e['kind'] == 'storage' for e in L)")" -gt 0 ] ||
	    fail "$1: no storage request reached the proxy"
	want "$1: storage requests refused or without the quota project" \
	    "$(logq "$1" "[e for e in L if e['kind'] == 'storage' and
	    not (e['ok'] and e['user_project'] == 'shardkit-test')][:3]")" "[]"
}

synth_imagenet "$T/i" --classes 2 --per-class 8 --val 2 --seed 7
gcs_start
gcs_bucket data
st pack pack imagenet "$T/i" -o "gs://data/in/in-%06d.tar" --max-count 10
EMU=$STORAGE_EMULATOR_HOST
unset STORAGE_EMULATOR_HOST

py fake_gcp_auth.py --make-user "$T/u"
auth_start main "$EMU"
export SK_GCS_ENDPOINT=$AUTH_URL
ADC=$T/main-adc.json

say "GOOGLE_APPLICATION_CREDENTIALS names an authorized_user file"
mark main
GOOGLE_APPLICATION_CREDENTIALS=$ADC st gac verify "gs://data/in/in.json"
has gac.out "0 problems"
want "refresh_token grants" "$(grants main)" 1
storage_ok main

say "gcloud's default file in CLOUDSDK_CONFIG, for shardload"
mkdir -p "$T/gcloud"
cp "$ADC" "$T/gcloud/application_default_credentials.json"
mark main
CLOUDSDK_CONFIG=$T/gcloud sl cfg keys "gs://data/in/in.json" --batch 4 \
    --image-size 32 --workers 2
[ "$(wc -l <"$T/cfg.out")" -eq 16 ] || fail "cfg: want 16 keys"
want "refresh_token grants" "$(grants main)" 1
storage_ok main

say "gcloud's default file under HOME, CLOUDSDK_CONFIG unset"
mkdir -p "$T/home/.config/gcloud"
cp "$ADC" "$T/home/.config/gcloud/application_default_credentials.json"
mark main
(unset CLOUDSDK_CONFIG; HOME=$T/home st home ls "gs://data/in/in-000000.tar") ||
    fail "home: the file under HOME was not used"
want "refresh_token grants" "$(grants main)" 1
storage_ok main

say "GOOGLE_APPLICATION_CREDENTIALS comes before the default file"
printf '{"type": "authorized_user"}\n' >"$T/nofields.json"
mark main
GOOGLE_APPLICATION_CREDENTIALS=$T/nofields.json CLOUDSDK_CONFIG=$T/gcloud \
    st_rc 1 order ls "gs://data/in/in-000000.tar"
has order.err "$T/nofields.json"
has order.err '"client_id"'
has order.err "GOOGLE_APPLICATION_CREDENTIALS"
want "token requests with a file that has no client_id" \
    "$(logq main "sum(e['kind'] == 'token' for e in L)")" 0

say "a refresh token the endpoint does not know: refused, no secret shown"
python3 - "$ADC" "$T/wrong.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
j["refresh_token"] = "1//0g-wrong-" + j["refresh_token"][-20:]
json.dump(j, open(sys.argv[2], "w"))
EOF
mark main
GOOGLE_APPLICATION_CREDENTIALS=$T/wrong.json \
    st_rc 1 wrong ls "gs://data/in/in-000000.tar"
has wrong.err "$T/wrong.json"
has wrong.err "authorized_user"
has wrong.err "Token has been expired or revoked"
want "refused grants" "$(logq main "sum(e['kind'] == 'token' and
    not e['ok'] and e['grant'] == 'refresh_token' for e in L)")" 1
want "storage requests after a refused grant" \
    "$(logq main "sum(e['kind'] == 'storage' for e in L)")" 0
CLOUDSDK_CONFIG=$T/gcloud GOOGLE_APPLICATION_CREDENTIALS=$T/wrong.json \
    sl_rc 1 wrongl keys "gs://data/in/in.json" --batch 4
has wrongl.err "Token has been expired or revoked"

say "a file without its refresh_token names the field"
python3 - "$ADC" "$T/norefresh.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
del j["refresh_token"]
json.dump(j, open(sys.argv[2], "w"))
EOF
GOOGLE_APPLICATION_CREDENTIALS=$T/norefresh.json \
    st_rc 1 norefresh ls "gs://data/in/in-000000.tar"
has norefresh.err "$T/norefresh.json"
has norefresh.err '"refresh_token"'

say "shardfs mounts with the default file; its token is refreshed (life $LIFE s)"
auth_start life "$EMU" --expires-in "$LIFE"
mkdir -p "$T/gcloud-life"
cp "$T/life-adc.json" "$T/gcloud-life/application_default_credentials.json"
mark life
CLOUDSDK_CONFIG=$T/gcloud-life SK_GCS_ENDPOINT=$AUTH_URL \
    fs_mount life gs://data/in "$T/m" -o metadata_ttl=-1
STORAGE_EMULATOR_HOST=$EMU py fs_tool.py get-gs data in/ "$T/ref"
cmp "$T/m/in-000000.tar" "$T/ref/in-000000.tar" || fail "in-000000.tar differs"
# Past two lifetimes: reads go on with tokens refreshed in between.
sleep $((LIFE * 2 + 1))
cmp "$T/m/in-000001.tar" "$T/ref/in-000001.tar" ||
    fail "a read after $((LIFE * 2)) s failed"
fs_umount "$T/m"
n=$(grants life)
[ "$n" -ge 3 ] || fail "$n refresh_token grants in $((LIFE * 2 + 1)) s; want 3 at least (refreshed)"
storage_ok life

say "no client secret, refresh token or access token in any output or log"
http_stop
{
	cat "$T/tokens"
	python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
print(j["client_secret"]); print(j["refresh_token"])' "$T/u/adc.json"
	python3 -c 'import json, sys
print(json.load(open(sys.argv[1]))["refresh_token"])' "$T/wrong.json"
} >"$T/secrets"
[ "$(grep -c . "$T/secrets")" -ge 8 ] || fail "the secrets list is short"
files=$(cd "$T" && ls -- *.out *.err *.log *.stderr)
for f in $files; do
	if grep -qF -f "$T/secrets" "$T/$f"; then
		fail "$f holds a secret (a token, the client secret or a refresh token)"
	fi
done
echo ok
