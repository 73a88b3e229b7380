# shellcheck shell=bash
# tests/cli/http-lib.sh - real servers on 127.0.0.1 for the remote tests:
# Debian's nginx over HTTP and HTTPS (a CA made here, at test time) and the
# link-emulating, fault-injecting proxy in front of it. Everything started
# here is stopped on exit, whatever the test's outcome.
#
# Sourced after lib.sh. make check sets LINKPROXY.

need_cmd nginx
need_cmd openssl
: "${LINKPROXY:?LINKPROXY is not set; run the test through make check}"

# The CA and proxy settings come from each test, not from the caller.
unset CURL_CA_BUNDLE SSL_CERT_FILE SSL_CERT_DIR AWS_CA_BUNDLE http_proxy \
    https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost

HTTP_PIDS=()
http_stop() {
	local p
	for p in "${HTTP_PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${HTTP_PIDS[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	HTTP_PIDS=()
}
trap 'http_stop; sk_cleanup' EXIT

# A port nothing listens on now (the servers bind it right after).
free_port() {
	python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_port PORT: until something accepts on 127.0.0.1:PORT (10 s).
wait_port() {
	local i
	for i in $(seq 100); do
		python3 -c 'import socket, sys
socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' \
		    "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	fail "nothing listens on 127.0.0.1:$1"
}

# make_ca NAME: $T/NAME.key and $T/NAME.pem, a self-signed test CA.
make_ca() {
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$1" \
	    -keyout "$T/$1.key" -out "$T/$1.pem" >/dev/null 2>&1 ||
	    fail "openssl: cannot make the test CA $1"
}

# A server certificate for 127.0.0.1 and localhost, signed by the CA "ca".
make_server_cert() {
	printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$T/san.ext"
	openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
	    -keyout "$T/server.key" -out "$T/server.csr" >/dev/null 2>&1 &&
	openssl x509 -req -in "$T/server.csr" -CA "$T/ca.pem" \
	    -CAkey "$T/ca.key" -CAcreateserial -days 2 -extfile "$T/san.ext" \
	    -out "$T/server.pem" >/dev/null 2>&1 ||
	    fail "openssl: cannot make the server certificate"
}

# http_start ROOT: nginx serves ROOT on HTTP_URL and HTTPS_URL (trusted by
# $T/ca.pem, not by $T/other.pem), folders as JSON autoindex; /private/
# answers 403.
http_start() {
	local root=$1 d="$T/nginx" port tport user=
	make_ca ca
	make_ca other
	make_server_cert
	mkdir -p "$d/tmp"
	port=$(free_port)
	tport=$(free_port)
	[ "$(id -u)" -ne 0 ] || user="user root;"
	cat >"$d/nginx.conf" <<EOF
daemon off;
$user
worker_processes 2;
pid $d/nginx.pid;
error_log $d/error.log;
events { worker_connections 1024; }
http {
	access_log $d/access.log;
	client_body_temp_path $d/tmp;
	proxy_temp_path $d/tmp;
	fastcgi_temp_path $d/tmp;
	uwsgi_temp_path $d/tmp;
	scgi_temp_path $d/tmp;
	sendfile on;
	keepalive_requests 100000;
	types { application/json json; application/x-tar tar; }
	default_type application/octet-stream;
	server {
		listen 127.0.0.1:$port;
		listen 127.0.0.1:$tport ssl http2;
		ssl_certificate $T/server.pem;
		ssl_certificate_key $T/server.key;
		root $root;
		autoindex on;
		autoindex_format json;
		location /private/ { deny all; }
	}
}
EOF
	nginx -p "$d" -c "$d/nginx.conf" -e "$d/error.log" &
	HTTP_PIDS+=($!)
	wait_port "$port"
	wait_port "$tport"
	HTTP_PORT=$port
	HTTP_URL="http://127.0.0.1:$port"
	HTTPS_URL="https://127.0.0.1:$tport"
}

# proxy_start PORT ARGS...: the link proxy in front of 127.0.0.1:PORT with
# ARGS; PROXY_URL, and its counters in $PROXY_STATS (JSON).
proxy_start() {
	local up=$1 n=${#HTTP_PIDS[@]} line
	shift
	PROXY_STATS="$T/proxy-$n.json"
	"$LINKPROXY" --upstream "127.0.0.1:$up" --stats "$PROXY_STATS" "$@" \
	    >"$T/proxy-$n.port" 2>"$T/proxy-$n.err" &
	HTTP_PIDS+=($!)
	for _ in $(seq 100); do
		line=$(head -n 1 "$T/proxy-$n.port" 2>/dev/null || true)
		case $line in
		"port "*) break ;;
		esac
		sleep 0.1
	done
	case $line in
	"port "*) ;;
	*) cat "$T/proxy-$n.err" >&2; fail "the link proxy did not start" ;;
	esac
	PROXY_URL="http://127.0.0.1:${line#port }"
}

# train_like_disk NAME MANIFEST URL: shardtrain on URL trains on what it
# trains on from the local MANIFEST (the same losses, bit for bit), and its
# --json counts URL's requests and none for local disk. A build without
# shardtrain (CI's TSan run) skips this check.
train_like_disk() {
	local name=$1 local=$2 url=$3 topts
	[ -n "${SHARDTRAIN:-}" ] || return 0
	say "shardtrain --data $url: the losses of local disk, and the counters"
	topts=(--model vit-ti4 --dim 16 --depth 1 --heads 1 --mlp 16
	    --image-size 16 --batch 8 --steps 4 --seed 3 --threads 1
	    --ceiling-steps 0 --part-size 64K)
	run_rc 0 "$name-l" "$SHARDTRAIN" "${topts[@]}" --data "$local" \
	    --json "$T/$name-l.json"
	run_rc 0 "$name-r" "$SHARDTRAIN" "${topts[@]}" --data "$url" \
	    --json "$T/$name-r.json"
	[ "$(jget "$T/$name-l.json" result.last_loss)" = \
	    "$(jget "$T/$name-r.json" result.last_loss)" ] ||
	    fail "shardtrain on $url trained on other data than local disk"
	[ "$(jget "$T/$name-r.json" result.remote.requests)" -gt 0 ] ||
	    fail "shardtrain --json counted no request to $url"
	[ "$(jget "$T/$name-l.json" result.remote.requests)" -eq 0 ] ||
	    fail "shardtrain --json counted remote requests on local disk"
	[ "$(jget "$T/$name-r.json" config.source)" = "$url" ] ||
	    fail "config.source is not $url"
}
