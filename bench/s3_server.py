"""s3_server.py - moto's S3 server for bench/shardfs.sh: the tests' server
(tests/py/moto_server.py: SigV4 checked against the request as sent), with
its objects loaded before it listens, ranged GETs that read only their
range, and the query string canonicalized as S3 does it.

  s3_server.py -H 127.0.0.1 -p PORT [--preload BUCKET/PREFIX=DIR ...]

--preload puts every regular file under DIR (not hidden ones) into BUCKET
(made if missing)
as PREFIX/RELATIVE-PATH, in this process, before the server starts: 10^5
objects load in seconds, where as many signed PUTs would take minutes.
The objects are moto's own (the same code makes them as a PUT would), in
the default account, so the keys the caller makes through IAM read them.

Ranged GETs: moto copies an object's whole value for every GET and then
slices the range out of the copy, so each 8 MiB part of a 1 GiB object
costs a 1 GiB copy, and eight at once hold 8 GiB. Here a GET with a Range
header reads only the range from the object's buffer (under the object's
lock, as moto's own reads are); status, headers and errors are moto's.
Objects are kept in memory (MOTO_S3_DEFAULT_KEY_BUFFER_SIZE), never in
temporary files, so dropping the page cache does not reach the server.

The query string: S3 decodes each name and value of the query it receives
and encodes them again (SigV4: the canonical query string URI-encodes
everything but A-Z a-z 0-9 - _ . ~) before it checks the signature. The
tests' server signs the query exactly as sent, which refuses a client
that sends '/' raw and signs it as %2F (s3fs sends ?delimiter=/&prefix=
a/ and gets 403 SignatureDoesNotMatch, where S3 lets it in). Here the
query is canonicalized first, as S3 does; the path stays as sent. A
client that sends the canonical form (boto3, shardkit, rclone) signs the
same string either way.
"""

import os
import sys
import threading

# Before moto reads it: every object in memory.
os.environ.setdefault("MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", str(1 << 40))

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "py"))
import moto_server  # noqa: E402  (SigV4 as sent: patches moto on import)

from urllib.parse import quote, unquote, urlsplit  # noqa: E402

from moto.core import DEFAULT_ACCOUNT_ID  # noqa: E402
from moto.core.authorization import ActionAuthenticatorMixin  # noqa: E402
from moto.s3.models import FakeKey, s3_backends  # noqa: E402
from moto.s3.responses import S3Response  # noqa: E402

def _canonical_query(query):
    pairs = []
    for pair in query.split("&") if query else []:
        k, eq, v = pair.partition("=")
        pairs.append(quote(unquote(k), safe="-_.~") + "=" +
                     quote(unquote(v), safe="-_.~"))
    return "&".join(pairs)


def _check_as_s3(self, iam_request_cls, resource="*"):
    request = getattr(self, "request", None)
    raw = getattr(request, "environ", {}).get("RAW_URI") if request else None
    if not raw:
        return moto_server._check(self, iam_request_cls, resource)
    parts = urlsplit(raw)
    saved = self.uri
    self.uri = parts.path + ("?" + _canonical_query(parts.query)
                             if parts.query else "")
    try:
        return moto_server._check(self, iam_request_cls, resource)
    finally:
        self.uri = saved


ActionAuthenticatorMixin._authenticate_and_authorize_action = _check_as_s3

_tls = threading.local()
_value = FakeKey.value


class _Range:
    """An object's value as _handle_range_header uses it: a length and
    slices, each read from the buffer when asked for."""

    def __init__(self, key):
        self.key = key

    def __len__(self):
        return self.key.contentsize

    def __bool__(self):
        return self.key.contentsize > 0

    def __getitem__(self, s):
        start, stop, _ = s.indices(self.key.contentsize)
        with self.key.lock:
            self.key._value_buffer.seek(start)
            return self.key._value_buffer.read(max(0, stop - start))


def _value_get(key):
    if getattr(_tls, "ranged", False):
        return _Range(key)
    return _value.fget(key)


FakeKey.value = property(_value_get, _value.fset)
_key_response = S3Response.key_response


def _key_response_ranged(self, request, full_url, headers):
    _tls.ranged = request.method == "GET" and bool(
        request.headers.get("range"))
    try:
        status, hdrs, body = _key_response(self, request, full_url, headers)
    finally:
        _tls.ranged = False
    if isinstance(body, _Range):  # a range moto answers whole (a,b-c)
        body = body[0:len(body)]
    return status, hdrs, body


S3Response.key_response = _key_response_ranged


def preload(spec):
    target, _, folder = spec.partition("=")
    bucket, _, prefix = target.partition("/")
    if not bucket or not folder or not os.path.isdir(folder):
        sys.exit("s3_server.py: --preload BUCKET/PREFIX=DIR, not %r" % spec)
    be = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    if bucket not in be.buckets:
        be.create_bucket(bucket, "us-east-1")
    n = 0
    for top, dirs, files in os.walk(folder, followlinks=True):
        dirs.sort()
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        for f in sorted(files):
            if f.startswith("."):
                continue
            path = os.path.join(top, f)
            if not os.path.isfile(path):
                continue
            rel = os.path.relpath(path, folder).replace(os.sep, "/")
            key = prefix.strip("/") + "/" + rel if prefix.strip("/") else rel
            with open(path, "rb") as fp:
                be.put_object(bucket, key, fp.read())
            n += 1
    print("s3_server.py: %d objects from %s in s3://%s/%s" % (
        n, folder, bucket, prefix), file=sys.stderr, flush=True)


if __name__ == "__main__":
    args, i = [], 1
    while i < len(sys.argv):
        if sys.argv[i] == "--preload" and i + 1 < len(sys.argv):
            preload(sys.argv[i + 1])
            i += 2
        else:
            args.append(sys.argv[i])
            i += 1
    moto_server.main(args)
