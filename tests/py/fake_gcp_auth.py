"""fake_gcp_auth.py - Google's two token sources, on loopback, for the gs://
tests: the GCE metadata server and the OAuth2 token endpoint that takes a
service account's signed JWT.

  fake_gcp_auth.py --metadata --port-file F [COMMON]
  fake_gcp_auth.py --token-endpoint [--public-key PEM]
                   [--authorized-user JSON] --port-file F [COMMON]
  fake_gcp_auth.py --storage-proxy URL [--deny-token-prefix P]
                   --port-file F [COMMON]
  fake_gcp_auth.py --make-key DIR [--token-uri URL]
  fake_gcp_auth.py --make-user DIR [--token-uri URL]

COMMON: [--log F] [--tokens-file F] [--expires-in N]

The server forms listen on 127.0.0.1, an ephemeral port, write the port to
--port-file (whole, by rename) and serve until killed; --metadata,
--token-endpoint and --storage-proxy may be given together, on one port,
and should be: the proxy takes only the tokens this process issued.

  --metadata        GET /computeMetadata/v1/instance/service-accounts/
                    default/token (any query) wants "Metadata-Flavor:
                    Google" (else 403) and answers {"access_token":
                    "meta-N-HEX", "expires_in": N, "token_type": "Bearer"}.
                    GET / and /computeMetadata/v1/ answer 200, as the
                    client libraries' ping expects. Every answer carries
                    "Metadata-Flavor: Google".
  --token-endpoint  POST /token, a form: grant_type=urn:ietf:params:oauth:
                    grant-type:jwt-bearer&assertion=JWT. The JWT must be
                    RS256 signed by --public-key's private half, with iss
                    and scope, aud http://127.0.0.1:PORT/token, exp - iat at
                    most 3600 and iat within 300 s of now. Answers
                    {"access_token": "sa-N-HEX", ...} or 400
                    {"error": "invalid_grant", "error_description": WHY}.
                    With --authorized-user JSON (gcloud's
                    application_default_credentials.json, as --make-user
                    writes it), also grant_type=refresh_token&client_id=
                    &client_secret=&refresh_token= (RFC 6749 section 6),
                    all three as JSON has them: {"access_token":
                    "user-N-HEX", ...}; a refresh token or client it does
                    not know gets 400 invalid_grant "Token has been
                    expired or revoked." as Google's endpoint says.
  --storage-proxy URL
                    every request (any method) whose path starts with
                    /storage/, /upload/ or /download/ wants "Authorization:
                    Bearer TOKEN", TOKEN one this process issued whose
                    expires_in has not run out; else 401 with GCS's JSON
                    error body ("Invalid Credentials", reason authError).
                    Good ones go to URL (a gcp-storage-emulator, say
                    http://127.0.0.1:4443) with their method, path, query,
                    body and headers less Host, Authorization, Connection;
                    the answer comes back as it is, less the hop-by-hop
                    headers, its body streamed, and a Location on URL's
                    origin rewritten to this server's, so that resumable
                    upload sessions come back here too. 308 passes as is.
                    An answer without Content-Length closes the connection.
                    An upstream that cannot be reached gives 502.
  --deny-token-prefix P
                    a good token that starts with P gets 403 with GCS's
                    JSON error body ("... does not have
                    storage.objects.get access ...", reason forbidden)
  --expires-in N    the tokens' expires_in (3600)
  --tokens-file F   append each token issued, one a line: grep the tests'
                    output and logs for them to find leaks
  --log F           one JSON line a request: {"method", "path", "kind":
                    "metadata-token" | "token" | "ping" | "storage" |
                    "other", "status", "ok", "why"}; never a token or an
                    assertion, and "path" never has the query. The number
                    of token requests is the number of lines of kind
                    "metadata-token" or "token". A storage line is "ok":
                    true when the request went upstream, whatever upstream
                    answered ("status" is upstream's); else "why" is
                    "no token" | "unknown token" | "expired" (401),
                    "denied" (403), "bad body" (400, a Content-Length or
                    chunked body that does not parse) or "upstream: ERROR"
                    (502).

--make-user writes DIR/adc.json, gcloud's authorized_user credentials
(fresh client_secret and refresh_token, a quota_project_id) with the
same token_uri, for --authorized-user.

A storage log line has "user_project": the x-goog-user-project header
sent, or null. A token line has "grant": "jwt-bearer" or
"refresh_token" (or what else was asked).

--make-key writes DIR/sa.json, a service-account key file as the Cloud
console gives one (a fresh 2048-bit RSA key, PKCS#8 PEM), whose token_uri
is --token-uri or else the placeholder "@TOKEN_URI@" to fill in, and
DIR/sa.pub.pem, its public key for --public-key.
"""

import argparse
import base64
import http.client
import json
import os
import secrets
import signal
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

META_TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
BODY_MAX = 64 * 1024
CLOCK_SKEW = 300
PLACEHOLDER = "@TOKEN_URI@"
STORAGE_PREFIXES = ("/storage/", "/upload/", "/download/")
SA_EMAIL = "loader@shardkit-test.iam.gserviceaccount.com"
CHUNK = 256 * 1024
UPSTREAM_TIMEOUT = 120
# Not forwarded upstream: Host and Authorization are this hop's, the rest
# are hop-by-hop (the body is sent on with a Content-Length of its own).
REQUEST_DROP = {"host", "authorization", "connection", "keep-alive",
                "proxy-connection", "proxy-authorization", "te", "trailer",
                "transfer-encoding", "upgrade", "expect", "content-length"}
RESPONSE_DROP = {"connection", "keep-alive", "proxy-connection",
                 "transfer-encoding", "te", "trailer", "upgrade"}


# ---------------------------------------------------------------------------
# --make-key


def make_key(folder, token_uri):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM,
                            serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM,
        serialization.PublicFormat.SubjectPublicKeyInfo)
    email = SA_EMAIL
    sa = {
        "type": "service_account",
        "project_id": "shardkit-test",
        "private_key_id": secrets.token_hex(20),
        "private_key": pem,
        "client_email": email,
        "client_id": str(100000000000000000000 + secrets.randbelow(10**20)),
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri or PLACEHOLDER,
        "auth_provider_x509_cert_url":
            "https://www.googleapis.com/oauth2/v1/certs",
        "client_x509_cert_url":
            "https://www.googleapis.com/robot/v1/metadata/x509/"
            + urllib.parse.quote(email),
        "universe_domain": "googleapis.com",
    }
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "sa.json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(sa, f, indent=2)
        f.write("\n")
    with open(os.path.join(folder, "sa.pub.pem"), "wb") as f:
        f.write(pub)


def make_user(folder, token_uri):
    adc = {
        "account": "",
        "client_id": "%d-shardkit.apps.googleusercontent.com"
                     % secrets.randbelow(10**12),
        "client_secret": "GOCSPX-" + secrets.token_urlsafe(21),
        "quota_project_id": "shardkit-test",
        "refresh_token": "1//0g" + secrets.token_urlsafe(72),
        "type": "authorized_user",
        "token_uri": token_uri or PLACEHOLDER,
        "universe_domain": "googleapis.com",
    }
    os.makedirs(folder, exist_ok=True)
    fd = os.open(os.path.join(folder, "adc.json"),
                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(adc, f, indent=2)
        f.write("\n")


# ---------------------------------------------------------------------------
# the server


class State:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.counter = 0
        self.port = 0
        self.public_key = None
        # every token issued -> when it runs out (time.monotonic())
        self.expiry = {}
        self.upstream = None
        if args.storage_proxy:
            self.upstream = parse_upstream(args.storage_proxy)
        if args.token_endpoint and args.public_key:
            with open(args.public_key, "rb") as f:
                self.public_key = serialization.load_pem_public_key(f.read())
        self.user = None
        if args.authorized_user:
            with open(args.authorized_user) as f:
                self.user = json.load(f)

    def new_token(self, prefix):
        with self.lock:
            self.counter += 1
            token = "%s-%d-%s" % (prefix, self.counter, secrets.token_hex(16))
            self.expiry[token] = time.monotonic() + self.args.expires_in
            if self.args.tokens_file:
                with open(self.args.tokens_file, "a") as f:
                    f.write(token + "\n")
        return token

    def check_token(self, token):
        """None if TOKEN is one of ours and still good, else why not."""
        with self.lock:
            expiry = self.expiry.get(token)
        if expiry is None:
            return "unknown token"
        if time.monotonic() >= expiry:
            return "expired"
        return None

    def log(self, entry):
        if not self.args.log:
            return
        with self.lock:
            with open(self.args.log, "a") as f:
                f.write(json.dumps(entry) + "\n")


class Upstream:
    def __init__(self, host, port, base):
        self.host, self.port, self.base = host, port, base
        # Location values on these origins come back as ours
        self.origins = {"http://%s:%d" % (host, port)}
        if port == 80:
            self.origins.add("http://%s" % host)


def parse_upstream(url):
    u = urllib.parse.urlsplit(url)
    if u.scheme != "http" or not u.hostname or u.query or u.fragment:
        raise ValueError("--storage-proxy wants http://HOST[:PORT][/PATH], "
                         "not %r" % url)
    return Upstream(u.hostname, u.port or 80, u.path.rstrip("/"))


class LimitedReader:
    """The next N bytes of a stream, for http.client to send on."""

    def __init__(self, f, n):
        self.f, self.left = f, n

    def read(self, size=-1):
        if self.left <= 0:
            return b""
        if size is None or size < 0 or size > self.left:
            size = self.left
        data = self.f.read(size)
        if not data:
            raise ConnectionError("the client's body ended early")
        self.left -= len(data)
        return data


def b64url_decode(s):
    if not s or any(c in s for c in "=+/"):
        raise ValueError("not base64url without padding")
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def check_assertion(state, jwt, aud):
    """None if the JWT is good, else why not."""
    parts = jwt.split(".")
    if len(parts) != 3:
        return "the assertion is not three dot-separated parts"
    try:
        header = json.loads(b64url_decode(parts[0]))
        claims = json.loads(b64url_decode(parts[1]))
        sig = b64url_decode(parts[2])
    except ValueError as e:
        return "the assertion does not decode: %s" % e
    if not isinstance(header, dict) or not isinstance(claims, dict):
        return "the assertion's header or claims is not a JSON object"
    if header.get("alg") != "RS256":
        return "alg is %r, not RS256" % header.get("alg")
    if header.get("typ", "JWT") != "JWT":
        return "typ is %r, not JWT" % header.get("typ")
    try:
        state.public_key.verify(sig, (parts[0] + "." + parts[1]).encode(),
                                padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        return "Invalid JWT Signature."
    for name in ("iss", "scope", "aud"):
        if not isinstance(claims.get(name), str) or not claims[name]:
            return "no %s claim" % name
    if claims["aud"] != aud:
        return "aud is %r, not %r" % (claims["aud"], aud)
    iat, exp = claims.get("iat"), claims.get("exp")
    if type(iat) is not int or type(exp) is not int:
        return "iat and exp must be integers"
    if exp - iat > 3600 or exp <= iat:
        return "exp - iat is %d; it must be 1 to 3600" % (exp - iat)
    now = int(time.time())
    if abs(iat - now) > CLOCK_SKEW:
        return "iat is %d s from now" % (iat - now)
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-gcp-auth"

    def log_message(self, fmt, *args):
        pass

    def answer(self, status, body, kind, why=None, ctype="application/json"):
        data = body if isinstance(body, bytes) else body.encode()
        entry = {"method": self.command,
                 "path": self.path.split("?", 1)[0], "kind": kind,
                 "status": status, "ok": status == 200}
        if why:
            entry["why"] = why
        if kind == "token":
            entry["grant"] = getattr(self, "grant", None)
        # logged before the answer: a test reads the log as soon as its
        # client has the answer and exits
        self.server.state.log(entry)
        self.send_response(status)
        if self.server.state.args.metadata:
            self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def token_json(self, prefix):
        return json.dumps({
            "access_token": self.server.state.new_token(prefix),
            "expires_in": self.server.state.args.expires_in,
            "token_type": "Bearer"})

    def is_storage(self):
        return (self.server.state.upstream is not None
                and self.path.split("?", 1)[0].startswith(STORAGE_PREFIXES))

    def do_GET(self):
        if self.is_storage():
            self.storage()
            return
        state = self.server.state
        path = self.path.split("?", 1)[0]
        if state.args.metadata and path == META_TOKEN_PATH:
            if self.headers.get("Metadata-Flavor") != "Google":
                self.answer(403, "Missing Metadata-Flavor:Google header.",
                            "metadata-token", "no Metadata-Flavor: Google",
                            "text/html")
                return
            self.answer(200, self.token_json("meta"), "metadata-token")
        elif state.args.metadata and path in ("/", "/computeMetadata/v1/",
                                              "/computeMetadata/v1"):
            self.answer(200, "computeMetadata/\n", "ping", ctype="text/plain")
        else:
            self.answer(404, "not found\n", "other", "no such path",
                        "text/plain")

    do_HEAD = do_GET

    def do_other(self):
        if self.is_storage():
            self.storage()
        else:
            # what BaseHTTPRequestHandler answers a method it lacks
            self.send_error(501, "Unsupported method (%r)" % self.command)

    do_PUT = do_PATCH = do_DELETE = do_other

    def do_POST(self):
        if self.is_storage():
            self.storage()
            return
        state = self.server.state
        path = self.path.split("?", 1)[0]
        try:
            n = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            n = -1
        if n < 0 or n > BODY_MAX:
            self.close_connection = True
            self.answer(413, "bad length\n", "other", "bad Content-Length",
                        "text/plain")
            return
        body = self.rfile.read(n)
        if not (state.args.token_endpoint and path == "/token"):
            self.answer(404, "not found\n", "other", "no such path",
                        "text/plain")
            return
        form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
        aud = "http://127.0.0.1:%d/token" % state.port
        grant = form.get("grant_type", [""])[0]
        self.grant = "jwt-bearer" if grant == JWT_BEARER else grant
        prefix = "sa"
        if state.user is not None and form.get("grant_type") == [
                "refresh_token"]:
            prefix = "user"
            why = None
            for name in ("client_id", "client_secret", "refresh_token"):
                if form.get(name) != [state.user[name]]:
                    # Google's words; never the value
                    why = "Token has been expired or revoked."
        elif state.public_key is None:
            why = "grant_type is not refresh_token"
        elif form.get("grant_type") != [JWT_BEARER]:
            why = "grant_type is not %s" % JWT_BEARER
        elif len(form.get("assertion", [])) != 1:
            why = "no assertion"
        else:
            why = check_assertion(state, form["assertion"][0], aud)
        if why:
            self.answer(400, json.dumps({"error": "invalid_grant",
                                         "error_description": why}),
                        "token", why)
            return
        self.answer(200, self.token_json(prefix), "token")


    # -- --storage-proxy

    def storage_log(self, status, why=None):
        entry = {"kind": "storage", "method": self.command,
                 "path": self.path.split("?", 1)[0], "status": status,
                 "ok": why is None,
                 "user_project": self.headers.get("x-goog-user-project")}
        if why:
            entry["why"] = why
        self.server.state.log(entry)

    def request_body(self):
        """(body for http.client, its length), (None, None) if there is
        none; raises ValueError on a Content-Length or chunk size that does
        not parse."""
        te = self.headers.get("Transfer-Encoding", "").strip().lower()
        if te:
            if te != "chunked":
                raise ValueError("Transfer-Encoding %r" % te)
            parts = []
            while True:
                line = self.rfile.readline(1024)
                n = int(line.split(b";", 1)[0].strip(), 16)
                if n == 0:
                    break
                parts.append(self.rfile.read(n))
                self.rfile.readline(1024)
            while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                pass                                    # trailers
            data = b"".join(parts)
            return data, len(data)
        cl = self.headers.get("Content-Length")
        if cl is None:
            return None, None
        n = int(cl)
        if n < 0:
            raise ValueError("negative Content-Length")
        return LimitedReader(self.rfile, n), n

    def drain(self, body):
        """Read and drop what is left of the request's body, so the
        connection can carry the next request."""
        if isinstance(body, LimitedReader):
            while body.left > 0:
                body.read(CHUNK)

    def storage_error(self, status, message, reason, why, extra=None):
        err = {"reason": reason, "message": message}
        err.update(extra or {})
        data = json.dumps({"error": {"code": status, "message": message,
                                     "errors": [err]}}).encode()
        self.storage_log(status, why)           # before, as answer()'s
        self.send_response(status)
        if status == 401:
            self.send_header("WWW-Authenticate",
                             'Bearer realm="https://accounts.google.com/"')
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def storage(self):
        state = self.server.state
        up = state.upstream
        try:
            body, length = self.request_body()
        except (ValueError, ConnectionError) as e:
            self.close_connection = True
            self.storage_error(400, "Bad request body: %s" % e, "badRequest",
                               "bad body")
            return
        auth = self.headers.get("Authorization", "")
        scheme, _, token = auth.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            why = "no token"
        else:
            why = state.check_token(token)
        if why is None and state.args.deny_token_prefix is not None \
                and token.startswith(state.args.deny_token_prefix):
            why = "denied"
        if why:
            try:
                self.drain(body)
            except (OSError, ConnectionError):
                self.close_connection = True
            if why == "denied":
                self.storage_error(
                    403, "%s does not have storage.objects.get access to "
                    "the Google Cloud Storage object. Permission "
                    "'storage.objects.get' denied on resource (or it may not "
                    "exist)." % SA_EMAIL, "forbidden", why)
            else:
                self.storage_error(401, "Invalid Credentials", "authError",
                                   why, {"domain": "global",
                                         "locationType": "header",
                                         "location": "Authorization"})
            return

        headers = {}
        drop = set(REQUEST_DROP)
        for name in self.headers.get_all("Connection", []):
            drop.update(t.strip().lower() for t in name.split(","))
        for name, value in self.headers.items():
            if name.lower() in drop:
                continue
            if name in headers:         # http.client takes a dict
                headers[name] += ", " + value
            else:
                headers[name] = value
        if length is not None:
            headers["Content-Length"] = str(length)
        conn = http.client.HTTPConnection(up.host, up.port,
                                          timeout=UPSTREAM_TIMEOUT)
        try:
            try:
                conn.request(self.command, up.base + self.path, body=body,
                             headers=headers)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                # the client's body may be part read: this connection is done
                self.close_connection = True
                self.storage_error(502, "upstream: %s" % e, "backendError",
                                   "upstream: %s" % e)
                return
            self.relay(resp)
        finally:
            conn.close()

    def relay(self, resp):
        state = self.server.state
        self.send_response_only(resp.status, resp.reason)
        drop = set(RESPONSE_DROP)
        for value in resp.headers.get_all("Connection", []):
            drop.update(t.strip().lower() for t in value.split(","))
        length = None
        for name, value in resp.getheaders():
            low = name.lower()
            if low in drop:
                continue
            if low == "content-length":
                length = value.strip()
            elif low == "location":
                for origin in state.upstream.origins:
                    if value == origin or value.startswith(
                            (origin + "/", origin + "?")):
                        value = "http://127.0.0.1:%d%s" % (
                            state.port, value[len(origin):])
                        break
            self.send_header(name, value)
        bodiless = (self.command == "HEAD" or resp.status in (204, 304)
                    or 100 <= resp.status < 200)
        if length is None and not bodiless:
            self.close_connection = True
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        # logged before the body: the status is settled, and a client that
        # stops reading early should not lose the line
        self.storage_log(resp.status)
        if bodiless:
            return
        try:
            while True:
                chunk = resp.read(CHUNK)
                if not chunk:
                    break
                self.wfile.write(chunk)
        except (OSError, http.client.HTTPException):
            # too late for another status: cut the connection, the client
            # sees a short body
            self.close_connection = True
            return
        if resp.length:
            self.close_connection = True    # upstream sent less than it said


def write_port(path, port):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
    os.rename(tmp, path)


def main():
    ap = argparse.ArgumentParser(
        description="A fake GCE metadata server and OAuth2 token endpoint.")
    ap.add_argument("--metadata", action="store_true")
    ap.add_argument("--token-endpoint", action="store_true")
    ap.add_argument("--public-key", metavar="PEM")
    ap.add_argument("--port-file", metavar="FILE")
    ap.add_argument("--log", metavar="FILE")
    ap.add_argument("--tokens-file", metavar="FILE")
    ap.add_argument("--expires-in", type=int, default=3600, metavar="N")
    ap.add_argument("--storage-proxy", metavar="URL")
    ap.add_argument("--deny-token-prefix", metavar="P")
    ap.add_argument("--make-key", metavar="DIR")
    ap.add_argument("--make-user", metavar="DIR")
    ap.add_argument("--authorized-user", metavar="JSON")
    ap.add_argument("--token-uri", metavar="URL")
    args = ap.parse_args()

    if args.make_key:
        if args.metadata or args.token_endpoint or args.storage_proxy:
            ap.error("--make-key stands alone")
        make_key(args.make_key, args.token_uri)
        return 0
    if args.make_user:
        if args.metadata or args.token_endpoint or args.storage_proxy:
            ap.error("--make-user stands alone")
        make_user(args.make_user, args.token_uri)
        return 0
    if args.token_uri:
        ap.error("--token-uri goes with --make-key or --make-user")
    if not (args.metadata or args.token_endpoint or args.storage_proxy):
        ap.error("say --metadata, --token-endpoint, --storage-proxy or "
                 "--make-key")
    if args.deny_token_prefix is not None and not args.storage_proxy:
        ap.error("--deny-token-prefix goes with --storage-proxy")
    if args.storage_proxy:
        try:
            parse_upstream(args.storage_proxy)
        except ValueError as e:
            ap.error(str(e))
    if args.token_endpoint and not (args.public_key or
                                    args.authorized_user):
        ap.error("--token-endpoint needs --public-key or --authorized-user")
    if not args.port_file:
        ap.error("--port-file is needed")

    state = State(args)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.state = state
    state.port = server.server_address[1]
    # SIGTERM ends serve_forever's loop by way of an exception.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    write_port(args.port_file, state.port)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
