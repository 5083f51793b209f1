#!/usr/bin/python3
"""gateway.py - a GCS XML API stand-in for the gs:// tests: it accepts only
requests carrying "Authorization: Bearer TOKEN" with a token the token
stand-in (token_server.py) issued and that has not expired, answering 401
like GCS otherwise (403 AccessDenied without any token, unless
--allow-anonymous), and passes good requests (object GETs, ranged GETs,
HEADs, list-type=2 listings, all path-style) on to s3rver, which speaks the
same XML. It reuses the relay of tests/s3/gateway.py.

  gateway.py --upstream http://127.0.0.1:PORT --tokens TOKENS.json
             [--port 0] [--port-file F] [--log F] [--allow-anonymous]

Each request is logged as a JSON line: method, path, verdict, and a short
hash of the token (never the token)."""

import hashlib
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "s3"), os.path.join(HERE, "..")]
import gateway as s3gateway  # noqa: E402
import stand_in  # noqa: E402


class Handler(s3gateway.Handler):
    def verdict(self):
        cfg = self.server.cfg
        auth = self.headers.get("Authorization")
        if auth is None:
            if cfg.allow_anonymous:
                return None
            return (403, "AccessDenied", "Anonymous caller does not have "
                    "storage.objects.get access.")
        if not auth.startswith("Bearer "):
            return (401, "AuthenticationRequired", "Invalid Credentials")
        try:
            with open(cfg.tokens) as f:
                live = json.load(f)
        except (OSError, ValueError):
            live = {}
        exp = live.get(auth[7:])
        if exp is None or exp < time.time():
            return (401, "AuthenticationRequired", "Invalid Credentials")
        return None

    def record(self, verdict):
        auth = self.headers.get("Authorization") or ""
        stand_in.log_line(self.server, {
            "method": self.command, "path": self.path,
            "verdict": verdict[1] if verdict else "ok",
            "token": hashlib.sha256(auth.encode()).hexdigest()[:12]
            if auth else None,
            "range": self.headers.get("Range"),
            "time": time.time()})


def main():
    ap = stand_in.arg_parser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--allow-anonymous", action="store_true")
    cfg = ap.parse_args()
    # What the S3 gateway's handler also reads: GCS has no regions, no
    # throttle here.
    cfg.region, cfg.no_region_header, cfg.rate = None, True, 0
    stand_in.serve(Handler, cfg)


if __name__ == "__main__":
    main()
