#!/usr/bin/env bash
# bucket-gcs-auth.sh - gs://'s credential chain against real servers on
# 127.0.0.1: tests/py/fake_gcp_auth.py as the GCE metadata server, the
# OAuth2 token endpoint (it checks the JWT's RS256 signature against a key
# made here, now) and a storage proxy that takes only the tokens it issued,
# in front of gcp-storage-emulator. The chain's order (emulator, a given
# token, a key file, the metadata server); a key the endpoint does not know;
# a token refreshed before it runs out, once for all threads, while the
# loader reads; denied, expired and unknown tokens; and no token, key or
# assertion in anything shardkit printed or the servers logged.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"
. "$top_srcdir/tests/cli/bucket-lib.sh"
need_python cryptography

FAKE="$PY/fake_gcp_auth.py"
LIFE=8		# the refresh server's token lifetime, seconds

# auth_start NAME UPSTREAM [ARGS...]: fake_gcp_auth.py as metadata server,
# token endpoint (for $T/key) and storage proxy in front of UPSTREAM, on one
# port; stopped on exit. Its requests go to $T/NAME.log, its tokens to
# $T/tokens. Sets AUTH_URL and AUTH_HOST (host:port); $T/NAME-sa.json is
# the key file with its token_uri.
auth_start() {
	local name=$1 up=$2
	shift 2
	: >"$T/$name.log"
	python3 "$FAKE" --metadata --token-endpoint \
	    --public-key "$T/key/sa.pub.pem" --storage-proxy "$up" \
	    --port-file "$T/$name.port" --log "$T/$name.log" \
	    --tokens-file "$T/tokens" "$@" >"$T/$name.stderr" 2>&1 &
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
	AUTH_HOST="127.0.0.1:$(cat "$T/$name.port")"
	AUTH_URL="http://$AUTH_HOST"
	sed "s|@TOKEN_URI@|$AUTH_URL/token|" "$T/key/sa.json" \
	    >"$T/$name-sa.json"
}

# mark NAME: later counts see only what NAME's log gets from now on.
declare -A MARK
mark() { MARK[$1]=$(wc -l <"$T/$1.log"); }

# logq NAME EXPR: what EXPR (Python, over the list L of the log's JSON
# lines since mark NAME) gives.
logq() {
	python3 - "$T/$1.log" "${MARK[$1]:-0}" "$2" <<'EOF' ||
import json, sys
L = [json.loads(l) for l in open(sys.argv[1]).read().splitlines()]
L = L[int(sys.argv[2]):]
print(eval(sys.argv[3]))
EOF
	    fail "cannot read $T/$1.log"
}

# nlog NAME KIND: requests of KIND in NAME's log since the mark.
nlog() { logq "$1" "sum(e['kind'] == '$2' for e in L)"; }

# want_n WHAT GOT WANT: GOT is WANT (a number), else fail naming WHAT.
want_n() { [ "$2" -eq "$3" ] || fail "$1: $2, want $3"; }

# storage_ok NAME: NAME's storage requests since the mark all went up and
# got 200 or 206; there was one at least.
storage_ok() {
	local bad n
	n=$(nlog "$1" storage)
	[ "$n" -gt 0 ] || fail "$1: no storage request reached the proxy"
	bad=$(logq "$1" "[e for e in L if e['kind'] == 'storage' and
	    not (e['ok'] and e['status'] in (200, 206))][:3]")
	[ "$bad" = "[]" ] || fail "$1: storage requests refused: $bad"
}

# meta_token HOST: a token from the metadata server at HOST.
meta_token() {
	python3 - "$1" <<'EOF' || fail "no token from the metadata server $1"
import json, sys, urllib.request
r = urllib.request.Request("http://%s/computeMetadata/v1/instance/"
    "service-accounts/default/token" % sys.argv[1],
    headers={"Metadata-Flavor": "Google"})
print(json.load(urllib.request.urlopen(r))["access_token"])
EOF
}

synth_imagenet "$T/i" --classes 4 --per-class 12 --val 4 --seed 43
gcs_start
gcs_bucket data
st pack pack imagenet "$T/i" -o "gs://data/in/in-%06d.tar" --max-count 10
EMU=$STORAGE_EMULATOR_HOST
unset STORAGE_EMULATOR_HOST

# The service account's key, made now: the endpoints trust its public
# half. "other" is a well-formed key they do not know.
py fake_gcp_auth.py --make-key "$T/key"
py fake_gcp_auth.py --make-key "$T/other"
auth_start main "$EMU"
MAIN_URL=$AUTH_URL MAIN_HOST=$AUTH_HOST
export SK_GCS_ENDPOINT=$MAIN_URL
KEY=$T/main-sa.json

say "a key file and a metadata server: the key file's token is used"
mark main
GOOGLE_APPLICATION_CREDENTIALS=$KEY GCE_METADATA_HOST=$MAIN_HOST \
    st keymeta verify "gs://data/in/in.json"
has keymeta.out "0 problems"
want_n "token requests (key file)" "$(nlog main token)" 1
want_n "metadata token requests" "$(nlog main metadata-token)" 0
want_n "refused token requests" "$(logq main \
    "sum(not e['ok'] for e in L if e['kind'] == 'token')")" 0
storage_ok main

say "GOOGLE_OAUTH_ACCESS_TOKEN beats the key file: no token request"
envtok=$(meta_token "$MAIN_HOST")
mark main
GOOGLE_OAUTH_ACCESS_TOKEN=$envtok GOOGLE_APPLICATION_CREDENTIALS=$KEY \
    GCE_METADATA_HOST=$MAIN_HOST st envtok verify "gs://data/in/in.json"
has envtok.out "0 problems"
want_n "token requests with GOOGLE_OAUTH_ACCESS_TOKEN" \
    "$(logq main "sum(e['kind'] in ('token', 'metadata-token') for e in L)")" 0
storage_ok main

say "STORAGE_EMULATOR_HOST beats them all: no Authorization at all"
# Pointed at the proxy, the requests come with no token (not a wrong one).
mark main
STORAGE_EMULATOR_HOST=$MAIN_URL GOOGLE_OAUTH_ACCESS_TOKEN=$envtok \
    GOOGLE_APPLICATION_CREDENTIALS=$KEY GCE_METADATA_HOST=$MAIN_HOST \
    st_rc 1 emuproxy ls "gs://data/in/in-000000.tar"
has emuproxy.err "HTTP 401"
want_n "requests sent to the proxy with no token" "$(logq main \
    "sum(e.get('why') == 'no token' for e in L)")" 1
want_n "requests sent to the proxy with a token" "$(logq main \
    "sum(e['kind'] == 'storage' and e.get('why') != 'no token' for e in L)")" 0
want_n "token requests under STORAGE_EMULATOR_HOST" \
    "$(logq main "sum(e['kind'] in ('token', 'metadata-token') for e in L)")" 0
# Pointed at the emulator, it works, SK_GCS_ENDPOINT notwithstanding.
mark main
STORAGE_EMULATOR_HOST=$EMU GOOGLE_OAUTH_ACCESS_TOKEN=$envtok \
    GOOGLE_APPLICATION_CREDENTIALS=$KEY GCE_METADATA_HOST=$MAIN_HOST \
    st emu verify "gs://data/in/in.json"
has emu.out "0 problems"
want_n "requests to the proxy under STORAGE_EMULATOR_HOST" \
    "$(logq main "len(L)")" 0

say "the metadata server alone: its token is used"
mark main
GCE_METADATA_HOST=$MAIN_HOST sl meta keys "gs://data/in/in.json" \
    --batch 8 --image-size 32 --workers 2
[ "$(wc -l <"$T/meta.out")" -eq 48 ] || fail "meta: want 48 lines"
want_n "metadata token requests" "$(nlog main metadata-token)" 1
want_n "token requests (key file) with none set" "$(nlog main token)" 0
storage_ok main

say "the endpoint checks the JWT's signature: a key it does not know"
sed "s|@TOKEN_URI@|$MAIN_URL/token|" "$T/other/sa.json" >"$T/other-sa.json"
mark main
GOOGLE_APPLICATION_CREDENTIALS=$T/other-sa.json \
    st_rc 1 badkey ls "gs://data/in/in-000000.tar"
has badkey.err "$T/other-sa.json"
has badkey.err "GOOGLE_APPLICATION_CREDENTIALS"
has badkey.err "Invalid JWT Signature"
hasnt badkey.err "PRIVATE KEY"
want_n "refused assertions" "$(logq main "sum(e['kind'] == 'token' and
    e['status'] == 400 and e.get('why') == 'Invalid JWT Signature.'
    for e in L)")" 1
want_n "storage requests after a refused assertion" "$(nlog main storage)" 0
GOOGLE_APPLICATION_CREDENTIALS=$T/other-sa.json \
    sl_rc 1 badkeyl keys "gs://data/in/in.json" --batch 8
has badkeyl.err "$T/other-sa.json"
has badkeyl.err "Invalid JWT Signature"

say "an unknown token: a 401 that names where it came from"
unknown="ya29.shardkit-test-unknown-$(python3 -c 'import secrets
print(secrets.token_hex(16))')"
mark main
GOOGLE_OAUTH_ACCESS_TOKEN=$unknown st_rc 1 unknown ls "gs://data/in/in-000000.tar"
has unknown.err "HTTP 401"
has unknown.err "GOOGLE_OAUTH_ACCESS_TOKEN"
has unknown.err "expired or revoked"
want_n "unknown-token refusals" "$(logq main \
    "sum(e.get('why') == 'unknown token' for e in L)")" 1

say "a token that lives $LIFE s is refreshed while the loader reads, once for all threads"
# The storage link is slowed so that two epochs last about 3 lifetimes.
proxy_start "$GCS_PORT" --total-rate 500K
auth_start refresh "$PROXY_URL" --expires-in "$LIFE"
REFRESH_URL=$AUTH_URL
oldtok=$(meta_token "$AUTH_HOST")	# expired by the end of the run
mark refresh
t0=$(date +%s.%N)
GOOGLE_APPLICATION_CREDENTIALS=$T/refresh-sa.json SK_GCS_ENDPOINT=$REFRESH_URL \
    sl refresh bench "gs://data/in/in.json" --epochs 2 --workers 4 \
    --io-streams 3 --parts 2 --part-size 64K --batch 8 --image-size 32 \
    -v -v --json "$T/refresh.json"
t1=$(date +%s.%N)
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%d", b - a }')
[ "$secs" -ge $((LIFE * 5 / 2)) ] ||
    fail "the run took $secs s, under 2.5 token lifetimes: it tests no refresh"
storage_ok refresh
ntok=$(nlog refresh token)
say "  $secs s, $ntok token requests, $(nlog refresh storage) storage requests"
[ "$ntok" -ge 2 ] || fail "one token request in a $secs s run: no refresh"
want_n "refused token requests" "$(logq refresh \
    "sum(not e['ok'] for e in L if e['kind'] == 'token')")" 0
# One refresher: a token every LIFE - LIFE/4 s less the clock's second at
# most, and the first. A refresh per thread (3 streams, 4 workers) is more.
[ "$ntok" -le $((2 + secs / (LIFE - LIFE / 4 - 1))) ] ||
    fail "$ntok token requests in $secs s: more than one refresher's"
# The loader saw each refresh but one it may have exited during.
n=$(grep -c "refreshed the access token from the service-account key" \
    "$T/refresh.err" || true)
[ "$n" -ge $((ntok - 2)) ] && [ "$n" -le $((ntok - 1)) ] ||
    fail "the loader logged $n refreshes; the endpoint issued $ntok tokens"
# The reads went on across the tokens: storage requests after each token
# but perhaps the last.
n=$(logq refresh "len({sum(f['kind'] == 'token' for f in L[:i])
    for i, e in enumerate(L) if e['kind'] == 'storage'})")
[ "$n" -ge 3 ] && [ "$n" -ge $((ntok - 1)) ] ||
    fail "storage requests came after $n of $ntok tokens"

say "an expired token: a 401 that says so"
mark refresh
GOOGLE_OAUTH_ACCESS_TOKEN=$oldtok SK_GCS_ENDPOINT=$REFRESH_URL \
    st_rc 1 expired ls "gs://data/in/in-000000.tar"
has expired.err "HTTP 401"
has expired.err "GOOGLE_OAUTH_ACCESS_TOKEN"
has expired.err "expired or revoked"
want_n "expired-token refusals" "$(logq refresh \
    "sum(e.get('why') == 'expired' for e in L)")" 1

say "a denied token: a 403 that names the credentials and what to check"
auth_start deny "$EMU" --deny-token-prefix ""
mark deny
GOOGLE_APPLICATION_CREDENTIALS=$T/deny-sa.json SK_GCS_ENDPOINT=$AUTH_URL \
    st_rc 1 denykey ls "gs://data/in/in-000000.tar"
has denykey.err "HTTP 403"
has denykey.err "GOOGLE_APPLICATION_CREDENTIALS"
has denykey.err "$T/deny-sa.json"
has denykey.err "check that they hold storage.objects.get"
GCE_METADATA_HOST=$AUTH_HOST SK_GCS_ENDPOINT=$AUTH_URL \
    sl_rc 1 denymeta keys "gs://data/in/in.json" --batch 8
has denymeta.err "HTTP 403"
has denymeta.err "the metadata server $AUTH_HOST (GCE_METADATA_HOST)"
has denymeta.err "check that they hold storage.objects.get"
want_n "denied requests" "$(logq deny \
    "sum(e.get('why') == 'denied' for e in L)")" 2

say "no token, private key or assertion in any output or server log"
http_stop	# the servers' logs are whole
{
	cat "$T/tokens"
	echo "$unknown"
	for k in key other; do
		python3 -c 'import json, sys
for l in json.load(open(sys.argv[1]))["private_key"].splitlines():
    if l and not l.startswith("-----"):
        print(l)' "$T/$k/sa.json"
	done
} >"$T/secrets"
[ "$(grep -c . "$T/tokens")" -ge $((ntok + 6)) ] ||
    fail "fewer tokens in $T/tokens than were issued"
[ "$(wc -l <"$T/secrets")" -ge 40 ] || fail "the secrets list is short"
files=$(cd "$T" && ls -- *.out *.err *.log *.stderr refresh.json)
[ "$(echo "$files" | wc -l)" -ge 25 ] || fail "too few files to check: $files"
for f in $files; do
	if grep -qF -f "$T/secrets" "$T/$f"; then
		# which one, by its line in the list: not a byte of it
		fail "$f holds a secret: line $(grep -nxF -f <(grep -oF \
		    -f "$T/secrets" "$T/$f") "$T/secrets" | head -n 1 |
		    cut -d: -f1) of the list (tokens, then key lines)"
	fi
	# a JWT: base64url JSON header and claims, dot-separated
	if grep -qE 'eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}' "$T/$f"; then
		fail "$f holds a JWT"
	fi
done
echo ok
