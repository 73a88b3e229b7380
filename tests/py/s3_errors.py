"""s3_errors.py - an S3 endpoint on 127.0.0.1 that answers every request with
the error S3 sends in a case moto cannot stage (a skewed clock, an expired
session token, a bucket in another region, throttling), chosen by the
bucket's name in a path-style request, so that the tests can see what the
user is told.

  s3_errors.py --port-file F [--log F]

Buckets: skew, expired, region, redirect, slowdown, denied, dtd, empty;
any other bucket gets 404 NoSuchBucket. Bodies are those of S3's error
reference (Code, Message, RequestId, and the fields each adds). --log gets
one line a request: METHOD PATH STATUS, and whether it carried a SigV4
Authorization header ("signed" or "unsigned").
"""

import argparse
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def err(code, message, extra=""):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
            '<Message>%s</Message>%s<RequestId>4442587FB7D0A2F9</RequestId>'
            '</Error>' % (code, message, extra)).encode()


ANSWERS = {
    "skew": (403, err("RequestTimeTooSkewed", "The difference between the "
                      "request time and the current time is too large.",
                      "<RequestTime>20130524T000000Z</RequestTime>"
                      "<ServerTime>2026-11-25T08:00:00Z</ServerTime>"
                      "<MaxAllowedSkewMilliseconds>900000"
                      "</MaxAllowedSkewMilliseconds>"), {}),
    "expired": (400, err("ExpiredToken", "The provided token has expired."),
                {}),
    "region": (400, err("AuthorizationHeaderMalformed", "The authorization "
                        "header is malformed; the region 'us-east-1' is "
                        "wrong; expecting 'eu-west-1'",
                        "<Region>eu-west-1</Region>"), {}),
    "redirect": (301, err("PermanentRedirect", "The bucket you are "
                          "attempting to access must be addressed using "
                          "the specified endpoint.",
                          "<Endpoint>redirect.s3.eu-west-1.amazonaws.com"
                          "</Endpoint><Bucket>redirect</Bucket>"),
                 {"x-amz-bucket-region": "eu-west-1"}),
    "slowdown": (503, err("SlowDown", "Please reduce your request rate."),
                 {}),
    "denied": (403, err("AccessDenied", "Access Denied"), {}),
    "dtd": (403, b'<?xml version="1.0"?>\n<!DOCTYPE e [<!ENTITY a "aaaa">'
            b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>\n'
            b'<Error><Code>&b;</Code></Error>', {}),
    "empty": (403, b"", {}),
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        bucket = self.path.lstrip("/").split("/", 1)[0].split("?", 1)[0]
        status, body, headers = ANSWERS.get(bucket, (404, err(
            "NoSuchBucket", "The specified bucket does not exist",
            "<BucketName>%s</BucketName>" % bucket), {}))
        if args.log:
            auth = self.headers.get("Authorization") or ""
            with open(args.log, "a") as f:
                f.write("%s %s %d %s\n" % (
                    self.command, self.path.split("?", 1)[0], status,
                    "signed" if auth.startswith("AWS4-HMAC-SHA256 ")
                    else "unsigned"))
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = answer

    def log_message(self, *a):
        pass


ap = argparse.ArgumentParser()
ap.add_argument("--port-file", required=True)
ap.add_argument("--log")
args = ap.parse_args()
srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
tmp = args.port_file + ".tmp"
with open(tmp, "w") as f:
    f.write("%d\n" % srv.server_address[1])
os.rename(tmp, args.port_file)
try:
    srv.serve_forever()
except KeyboardInterrupt:
    sys.exit(0)
