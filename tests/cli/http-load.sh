#!/usr/bin/env bash
# http-load.sh - shards served by nginx over HTTP and HTTPS stream exactly
# as they do from disk: the same keys and pixel hashes for a manifest, a
# pattern and a JSON-autoindex folder, for any thread count, and the same
# losses in shardtrain; shardtool ls, verify, cat and index read URLs; a wrong CA, 404, 403, unknown schemes,
# bad flags and a server gone for good fail clearly and in bounded time.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/http-lib.sh"

synth_imagenet "$T/i" --classes 4 --per-class 12 --val 4 --seed 43
mkdir -p "$T/www/s" "$T/www/private"
st pack pack imagenet "$T/i" -o "$T/www/s/in-%06d.tar" --max-count 10
cp "$T/www/s/in-000000.tar" "$T/www/private/"
M="$T/www/s/in.json"
http_start "$T/www"
U="$HTTP_URL/s"

# Small parts, so a shard takes several ranged GETs and skips cross them.
opts=(--checksum --batch 6 --image-size 32 --shuffle 16 --seed 5 --epochs 2
    --part-size 16K)

say "the reference: the same shards on local disk"
sl ref keys "$M" "${opts[@]}" --workers 1 --io-streams 1
[ "$(wc -l <"$T/ref.out")" -eq 96 ] || fail "want 96 lines (2 epochs of 48)"

n=0
for v in "--workers 1 --io-streams 1" "--workers 4 --io-streams 3 --parts 3" \
    "--workers 2 --io-streams 2 --parts 1 --part-size 1M"; do
	n=$((n + 1))
	say "http manifest, $v: the same keys and pixels"
	# shellcheck disable=SC2086
	sl h$n keys "$U/in.json" "${opts[@]}" $v
	cmp -s "$T/ref.out" "$T/h$n.out" || {
		diff "$T/ref.out" "$T/h$n.out" | head -5 >&2
		fail "http ($v) differs from local disk"
	}
done

say "an http brace pattern and a JSON-autoindex folder"
sl hp keys "$U/in-{000000..000004}.tar" "${opts[@]}" --workers 3
cmp -s "$T/ref.out" "$T/hp.out" || fail "the http pattern differs from disk"
sl hd keys "$U/" "${opts[@]}" --workers 3
cmp -s "$T/ref.out" "$T/hd.out" || fail "the http folder differs from disk"

say "https with the test CA (--ca-file, CURL_CA_BUNDLE, SSL_CERT_FILE)"
sl hs1 keys "$HTTPS_URL/s/in.json" "${opts[@]}" --ca-file "$T/ca.pem"
cmp -s "$T/ref.out" "$T/hs1.out" || fail "https differs from disk"
CURL_CA_BUNDLE="$T/ca.pem" sl hs2 keys "$HTTPS_URL/s/in.json" "${opts[@]}"
cmp -s "$T/ref.out" "$T/hs2.out" || fail "https (CURL_CA_BUNDLE) differs"
SSL_CERT_FILE="$T/ca.pem" st hs3 verify "$HTTPS_URL/s/in.json"

say "https with the wrong CA, or none, is refused, naming the URL"
sl_rc 1 badca keys "$HTTPS_URL/s/in.json" "${opts[@]}" --ca-file "$T/other.pem"
has badca.err "$HTTPS_URL/s/in.json"
has badca.err "certificate"
CURL_CA_BUNDLE="$T/other.pem" run_rc 1 badca2 "$SHARDTOOL" verify \
    "$HTTPS_URL/s/in-000000.tar"
has badca2.err "certificate"

say "shardtool ls, verify, cat and index on URLs give what they give on disk"
st lsl ls "$T/www/s/in-000001.tar"
st lsh ls "$U/in-000001.tar"
cmp -s "$T/lsl.out" "$T/lsh.out" || fail "ls over http differs"
st lsd ls "$U/"
has lsd.out "$U/in-000004.tar:"
st vh verify --decode "$U/in.json"
has vh.out "0 problems"
key=$(head -n 1 "$T/lsl.out" | cut -f1)
st catl cat "$T/www/s/in-000001.tar" "$key.cls"
st cath cat "$U/in-000001.tar" "$key.cls"
cmp -s "$T/catl.out" "$T/cath.out" || fail "cat over http differs"
mkdir "$T/idxl" "$T/idxh"
st idxl index --dali -o "$T/idxl" "$T/www/s/in-000002.tar"
st idxh index --dali -o "$T/idxh" "$U/in-000002.tar"
cmp -s "$T/idxl/in-000002.idx" "$T/idxh/in-000002.idx" ||
    fail "index --dali over http differs"

say "a presigned URL's signature and token never print"
sig=5ec2e7d00dfeedfacecafe5ec2e7d00dfeedfacecafe5ec2e7d00dfeedface01
q="X-Amz-Signature=$sig&X-Amz-Security-Token=tok-not-to-print"
st lsq ls "$U/in-000001.tar?$q" "$U/in-000002.tar?$q"
has lsq.out "X-Amz-Signature=***"
st vq verify "$U/in-000001.tar?$q"
st_rc 1 nq ls "$U/nope.tar?$q"
has nq.err "X-Amz-Signature=***"
for f in lsq.out lsq.err vq.out vq.err nq.out nq.err; do
	hasnt "$f" "$sig"
	hasnt "$f" "tok-not-to-print"
done

say "a server's manifest may not send the reader to this machine's files"
python3 - "$M" "$T/www/s/evil.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["shardlist"][0]["url"] = "file://" + sys.argv[1].replace("in.json",
                                                          "in-000000.tar")
json.dump(m, open(sys.argv[2], "w"))
EOF
sl_rc 1 evil keys "$U/evil.json" --batch 6
has evil.err "may name only remote shards"
st_rc 1 evil2 verify "$U/evil.json"
has evil2.err "may name only remote shards"

say "a server's manifest names only shards on its own origin"
# the same host by https on its other port, and a bucket: refused unless
# --allow-cross-origin, naming the manifest and the shard
python3 - "$M" "$T/www/s/other.json" "$T/www/s/bucket.json" \
    "$HTTPS_URL/s/in-000000.tar" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["shardlist"] = m["shardlist"][:1]
m["shardlist"][0]["url"] = sys.argv[4]
json.dump(m, open(sys.argv[2], "w"))
m["shardlist"][0]["url"] = "s3://someone-elses-bucket/in-000000.tar"
json.dump(m, open(sys.argv[3], "w"))
EOF
sl_rc 1 xo keys "$U/other.json" --batch 6
has xo.err "$U/other.json: the manifest names $HTTPS_URL/s/in-000000.tar, which is not on its own origin"
has xo.err "--allow-cross-origin"
st_rc 1 xo2 verify "$U/other.json"
has xo2.err "not on its own origin"
sl_rc 1 xb keys "$U/bucket.json" --batch 6
has xb.err "s3://someone-elses-bucket/in-000000.tar, which is not on its own origin"
sl xok keys "$U/other.json" --batch 6 --allow-cross-origin --ca-file "$T/ca.pem"
[ "$(wc -l <"$T/xok.out")" -ge 1 ] || fail "--allow-cross-origin read nothing"

say "404 and 403 are reported with the URL and not retried"
sl_rc 1 nf keys "$U/nope.json" --batch 6
has nf.err "$U/nope.json"
has nf.err "404"
st_rc 1 nf2 verify "$U/in-000009.tar"
has nf2.err "404"
sl_rc 1 fb keys "$HTTP_URL/private/in-000000.tar" --batch 6
has fb.err "403"
grep -c ' /private/' "$T/nginx/access.log" >"$T/fb.count"
[ "$(cat "$T/fb.count")" -eq 1 ] || fail "a 403 was asked again"

say "unknown schemes, malformed URLs and bad flags"
sl_rc 1 sch keys "ftp://127.0.0.1/x.tar" --batch 6
has sch.err "unsupported URL scheme"
# A manifest too: not "No such file or directory" for a typo'd scheme.
sl_rc 1 schm keys "htp://127.0.0.1/s/in.json" --batch 6
has schm.err "htp: unsupported URL scheme"
sl fileman keys "file://$M" --batch 6
# An nginx folder without its '/' (a redirect to the listing) and a glob.
st_rc 1 noslash ls "$U"
has noslash.err "a folder: did you mean $U/?"
st_rc 1 glob ls "$U/*.tar"
has glob.err "a URL is not a glob"
sl_rc 1 mal keys "http:///x.tar" --batch 6
has mal.err "no host"
sl_rc 1 port keys "http://127.0.0.1:99999/x.tar" --batch 6
has port.err "bad port"
sl_rc 2 parts keys "$U/in.json" --parts 0
is_sl_usage_error parts
sl_rc 2 psz keys "$U/in.json" --part-size 12X
is_sl_usage_error psz
st_rc 2 stall verify "$U/in.json" --stall-timeout 0
is_usage_error stall

say "a server that ignores Range (python3 -m http.server): whole GETs"
port=$(free_port)
(cd "$T/www" && exec python3 -m http.server "$port" --bind 127.0.0.1) \
    >"$T/pyhttp.log" 2>&1 &
HTTP_PIDS+=($!)
wait_port "$port"
sl norange keys "http://127.0.0.1:$port/s/in.json" "${opts[@]}" --workers 2
cmp -s "$T/ref.out" "$T/norange.out" || fail "a range-less server differs"
[ "$(grep -c 'ignores byte ranges' "$T/norange.err")" -eq 1 ] ||
    { show norange; fail "want one warning"; }
# Broken transfers of those whole GETs start over and skip what is in.
# The first three shard GETs are broken, whatever order they come in: a
# rate of faults drawn by request number put the first one at the tenth
# request, which a slow run (TSan) did not always reach with a shard
# that was still wanted.
proxy_start "$port" --ttfb 0 --conn-rate 0 --total-rate 0 --seed 3 \
    --fault-rate 1 --max-faults 3 --fault-match .tar --faults reset,short
sl norangef keys "$PROXY_URL/s/in.json" "${opts[@]}" --workers 2 \
    --retry-time 20
cmp -s "$T/ref.out" "$T/norangef.out" ||
    fail "a range-less server with faults differs"
injected=$(jget "$PROXY_STATS" faults | python3 -c 'import json, sys
print(sum(json.load(sys.stdin).values()))')
[ "$injected" -eq 3 ] || fail "the proxy injected $injected faults, want 3"
grep -q "retrying: " "$T/norangef.err" || { show norangef; fail "no retry"; }

say "a server that never answered: refused at once, with the reason"
port=$(free_port)
t0=$(date +%s)
sl_rc 1 gone keys "http://127.0.0.1:$port/s/in.json" --batch 6
t1=$(date +%s)
has gone.err "127.0.0.1:$port/s/in.json"
has gone.err "not retried, as this server has not answered yet"
[ $((t1 - t0)) -le 2 ] || fail "the loader took $((t1 - t0)) s to give up"
st_rc 1 gone2 verify "http://127.0.0.1:$port/s/in-000000.tar"
has gone2.err "check the host and port"
say "https on an http port, and a host with no address: refused at once"
t0=$(date +%s)
st_rc 1 tls ls "https://127.0.0.1:$HTTP_PORT/s/in.json"
has tls.err "is this an http port"
st_rc 1 dns ls "http://no-such-host.invalid/s/in.json"
has dns.err "check the host name"
t1=$(date +%s)
[ $((t1 - t0)) -le 4 ] || fail "took $((t1 - t0)) s to refuse"

say "a server that answered, then is gone: retried, said once, given up"
# It serves the manifest once (wait_port's bare connection aside) and
# closes its socket: the shards' GETs
# then find the port refused, as a restarting server's would be.
port=$(free_port)
python3 - "$port" "$M" >"$T/once.log" 2>&1 <<'PY' &
import http.server, sys
body = open(sys.argv[2], "rb").read()
served = []
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        served.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
while not served:
    s.handle_request()
s.server_close()
PY
HTTP_PIDS+=($!)
wait_port "$port"
t0=$(date +%s)
sl_rc 1 later keys "http://127.0.0.1:$port/s/in.json" --batch 6 \
    --retry-time 3
t1=$(date +%s)
has later.err "gave up after"
has later.err "retrying: "
[ "$(grep -c 'retrying: ' "$T/later.err")" -eq 1 ] ||
    { show later; fail "want one 'retrying:' line"; }
[ $((t1 - t0)) -le 8 ] || fail "the loader took $((t1 - t0)) s to give up"

train_like_disk trh "$M" "$U/in.json"
