"""moto_server.py - moto's S3 server (python3 -m moto.server) for the
s3:// tests, with one fix: a SigV4 signature is checked against the request
target as the client sent it.

  moto_server.py -H 127.0.0.1 -p PORT      (moto.server's own options)

Stock moto 5 in server mode recomputes the signature over werkzeug's
request.url, which undoes percent-encoding: a correctly signed request whose
query holds %2F (?prefix=dir%2F&delimiter=%2F, as every SDK sends it) or
%3A %40 %2C or UTF-8, or whose key holds + = : @ , ( ) * ! $ ' ; % or UTF-8,
fails with 403 SignatureDoesNotMatch, boto3's too (getmoto/moto#5948). Here
the check reads the path and query from werkzeug's RAW_URI, the request line
as it came. A client that sends the canonical encoding (boto3 does, and so
must shardkit) signs exactly that, so it passes as it would on S3. S3 itself
re-canonicalizes: a client that sends and signs a non-canonical encoding
(a raw '+' or ':' in the path, say) passes here but would fail there.
Nothing else changes.
"""

import sys
from urllib.parse import urlsplit

try:
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.server import main
except ImportError as e:
    sys.exit("moto_server.py: %s: pip install 'moto[server]'" % e)

_check = getattr(ActionAuthenticatorMixin,
                 "_authenticate_and_authorize_action", None)
if _check is None:
    sys.exit("moto_server.py: this moto has no ActionAuthenticatorMixin."
             "_authenticate_and_authorize_action: tests/py/moto_server.py "
             "needs updating for it")


def _check_as_sent(self, iam_request_cls, resource="*"):
    # self.request is set by S3's responses (a werkzeug request here); moto
    # takes the path and query to sign from self.uri.
    request = getattr(self, "request", None)
    raw = getattr(request, "environ", {}).get("RAW_URI") if request else None
    if not raw:
        return _check(self, iam_request_cls, resource)
    parts = urlsplit(raw)
    saved = self.uri
    self.uri = parts.path + ("?" + parts.query if parts.query else "")
    try:
        return _check(self, iam_request_cls, resource)
    finally:
        self.uri = saved


ActionAuthenticatorMixin._authenticate_and_authorize_action = _check_as_sent

if __name__ == "__main__":
    main(sys.argv[1:])
