#!/usr/bin/python3
"""gateway.py - a verifying S3 gateway for the tests: it recomputes every
request's SigV4 signature with botocore (AWS's reference signer) and answers
403 like AWS (SignatureDoesNotMatch, InvalidAccessKeyId, ExpiredToken,
InvalidToken, RequestTimeTooSkewed, AccessDenied for unsigned requests)
before passing a good request on to the S3 server behind it (s3rver, which
checks no signature itself).

  gateway.py --upstream http://127.0.0.1:PORT --keys KEYS.json
             [--port 0] [--port-file F] [--allow-anonymous] [--log F]
             [--clock-offset SECONDS] [--region REGION] [--no-region-header]
             [--rate BYTES_PER_S] [--no-verify]

KEYS.json, read again for every request so a test can rotate keys:
  {"AKID": {"secret": "...", "token": "..." or null,
            "expires": unix time or null}}
Every request it saw is appended to --log as one JSON line (method, path,
verdict, signed headers, whether a token was sent) for the tests.

With --region, requests signed for any other region are refused with 400
AuthorizationHeaderMalformed naming the right one, and every reply carries
x-amz-bucket-region as AWS's do (on 200, 301, 400 and 403 alike), unless
--no-region-header (then only the error body names the region).
--rate sends each reply body at most that fast (a slow bucket, for the echo
tests). --no-verify passes every request on unchecked (the benchmark
separates the cost of this Python relay from that of verifying)."""

import calendar
import http.client
import http.server
import json
import os
import re
import sys
import time
from urllib.parse import urlsplit

import botocore.auth
import botocore.awsrequest
import botocore.credentials

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import stand_in  # noqa: E402

AUTH_RE = re.compile(r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/s3/"
                     r"aws4_request, SignedHeaders=([a-z0-9;-]+), "
                     r"Signature=([0-9a-f]{64})$")
HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer",
       "upgrade", "proxy-authorization", "proxy-authenticate"}


def error_xml(code, message, extra=""):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
            "<Message>%s</Message>%s<RequestId>gateway</RequestId></Error>"
            % (code, message, extra)).encode()


def expected_signature(method, host, raw_path, headers, signed, akid, secret,
                       token, stamp, region):
    creds = botocore.credentials.Credentials(akid, secret, token)
    auth = botocore.auth.S3SigV4Auth(creds, "s3", region)
    hdrs = {name: headers.get(name, "") for name in signed}
    req = botocore.awsrequest.AWSRequest(method=method,
                                         url="http://%s%s" % (host, raw_path),
                                         headers=hdrs)
    req.context["timestamp"] = stamp
    cr = auth.canonical_request(req)
    return auth.signature(auth.string_to_sign(req, cr), req)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def verdict(self):
        """None when the request may pass, else (status, code, message)."""
        cfg = self.server.cfg
        if cfg.no_verify:
            return None
        auth = self.headers.get("Authorization")
        if auth is None:
            if cfg.allow_anonymous:
                return None
            return (403, "AccessDenied", "Anonymous access is forbidden")
        m = AUTH_RE.match(auth)
        if not m:
            return (400, "AuthorizationHeaderMalformed", "bad Authorization")
        akid, day, region, signed, sig = m.groups()
        signed = signed.split(";")
        if cfg.region and region != cfg.region:
            return (400, "AuthorizationHeaderMalformed", "The authorization "
                    "header is malformed; the region '%s' is wrong; expecting "
                    "'%s'" % (region, cfg.region),
                    "<Region>%s</Region>" % cfg.region)
        with open(cfg.keys) as f:
            keys = json.load(f)
        if akid not in keys:
            return (403, "InvalidAccessKeyId", "The AWS Access Key Id you "
                    "provided does not exist in our records.")
        k = keys[akid]
        for must in ("host", "x-amz-date", "x-amz-content-sha256"):
            if must not in signed:
                return (403, "AccessDenied", "%s must be signed" % must)
        stamp = self.headers.get("x-amz-date", "")
        try:
            t = calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))
        except ValueError:
            return (403, "AccessDenied", "bad x-amz-date")
        now = time.time() + cfg.clock_offset
        if abs(t - now) > 900 or stamp[:8] != day:
            return (403, "RequestTimeTooSkewed", "The difference between the "
                    "request time and the current time is too large.",
                    "<RequestTime>%s</RequestTime><ServerTime>%s</ServerTime>"
                    "<MaxAllowedSkewMilliseconds>900000"
                    "</MaxAllowedSkewMilliseconds>" % (
                        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)),
                        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))))
        token = self.headers.get("x-amz-security-token")
        if k.get("token") is not None:
            if token is None or "x-amz-security-token" not in signed:
                return (403, "InvalidToken", "session token missing")
            if token != k["token"]:
                return (403, "InvalidToken", "The provided token is malformed "
                        "or otherwise invalid.")
        if k.get("expires") is not None and now > k["expires"]:
            return (400, "ExpiredToken", "The provided token has expired.")
        want = expected_signature(self.command, self.headers.get("Host", ""),
                                  self.path, self.headers, signed, akid,
                                  k["secret"], token, stamp, region)
        if want != sig:
            return (403, "SignatureDoesNotMatch", "The request signature we "
                    "calculated does not match the signature you provided.")
        return None

    def record(self, verdict):
        stand_in.log_line(self.server, {
            "method": self.command, "path": self.path,
            "verdict": verdict[1] if verdict else "ok",
            "token": "x-amz-security-token" in self.headers,
            "akid": (AUTH_RE.match(self.headers.get(
                "Authorization", "")) or [None, None])[1],
            "range": self.headers.get("Range"),
            "time": time.time()})

    def relay(self):
        up = urlsplit(self.server.cfg.upstream)
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
        # s3rver checks signatures only against its own fixed key: what
        # was verified here goes on anonymously, which s3rver accepts
        hdrs = {k: v for k, v in self.headers.items()
                if k.lower() not in HOP and k.lower() not in
                ("authorization", "x-amz-security-token")}
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        conn.request(self.command, self.path, body=body, headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        self.send_response(r.status)
        self.region_header()
        for k, v in r.getheaders():
            if k.lower() not in HOP and k.lower() != "content-length":
                self.send_header(k, v)
        length = r.getheader("Content-Length") if self.command == "HEAD" else None
        self.send_header("Content-Length", length or str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.send_body(data)
        conn.close()

    def send_body(self, data):
        rate = self.server.cfg.rate
        if not rate:
            self.wfile.write(data)
            return
        step = 16384
        for at in range(0, len(data), step):
            self.wfile.write(data[at:at + step])
            time.sleep(min(step, len(data) - at) / rate)

    def region_header(self):
        cfg = self.server.cfg
        if cfg.region and not cfg.no_region_header:
            self.send_header("x-amz-bucket-region", cfg.region)

    def handle_any(self):
        v = self.verdict()
        self.record(v)
        if v is None:
            self.relay()
            return
        body = error_xml(*v[1:])
        self.send_response(v[0])
        self.region_header()
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = handle_any


def main():
    ap = stand_in.arg_parser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--keys", required=True)
    ap.add_argument("--allow-anonymous", action="store_true")
    ap.add_argument("--region", help="the only signing region accepted")
    ap.add_argument("--no-verify", action="store_true",
                    help="relay every request without checking it")
    ap.add_argument("--rate", type=float, default=0,
                    help="reply bodies at most this many bytes/s")
    ap.add_argument("--no-region-header", action="store_true",
                    help="never send x-amz-bucket-region")
    ap.add_argument("--clock-offset", type=float, default=0,
                    help="seconds added to this server's clock")
    stand_in.serve(Handler, ap.parse_args())


if __name__ == "__main__":
    main()
