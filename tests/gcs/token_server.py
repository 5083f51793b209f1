#!/usr/bin/python3
"""token_server.py - loopback stand-ins for Google's OAuth token endpoint and
the GCE metadata server, for the gs:// tests.

  token_server.py --pubkey SA_PUBLIC.pem --email SA_EMAIL --tokens TOKENS.json
                  [--user USER.json] [--life SECONDS] [--port 0] [--port-file F]
                  [--log F]

POST /token, jwt-bearer grant: the assertion's RS256 signature is checked
with python3-cryptography against the service account's public key, and its
claims: iss == SA_EMAIL, scope == devstorage.read_only, aud == this
endpoint's URL, iat within 60 s of now, exp == iat + 3600. POST /token,
refresh_token grant: client_id, client_secret and refresh_token must equal
USER.json's. GET /computeMetadata/v1/instance/service-accounts/default/token
needs "Metadata-Flavor: Google". Each good request gets a new random access
token living --life seconds; every live token is written to TOKENS.json
({token: expiry}) for the gateway. Refusals answer 400 {"error":
"invalid_grant", ...} like Google. Each request is logged as a JSON line."""

import base64
import http.server
import json
import os
import secrets
import sys
import threading
import time
from urllib.parse import parse_qs

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import stand_in  # noqa: E402

SCOPE = "https://www.googleapis.com/auth/devstorage.read_only"
META = "/computeMetadata/v1/instance/service-accounts/default/token"


def b64d(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def check_jwt(cfg, assertion, aud):
    """None when the assertion is good, else why not."""
    parts = assertion.split(".")
    if len(parts) != 3:
        return "not a JWT"
    try:
        head, claims = json.loads(b64d(parts[0])), json.loads(b64d(parts[1]))
        sig = b64d(parts[2])
    except ValueError:
        return "bad JWT encoding"
    if "=" in assertion or head.get("alg") != "RS256":
        return "bad JWT header"
    with open(cfg.pubkey, "rb") as f:
        pub = serialization.load_pem_public_key(f.read())
    try:
        pub.verify(sig, (parts[0] + "." + parts[1]).encode(),
                   padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        return "Invalid JWT Signature."
    now = time.time()
    if claims.get("iss") != cfg.email or claims.get("scope") != SCOPE:
        return "bad iss or scope"
    if claims.get("aud") != aud:
        return "bad aud %r" % claims.get("aud")
    iat, exp = claims.get("iat"), claims.get("exp")
    if not isinstance(iat, int) or abs(iat - now) > 60 or exp != iat + 3600:
        return "bad iat/exp"
    return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def answer(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def issue(self, kind):
        srv = self.server
        tok = "ya29.test-" + secrets.token_urlsafe(24)
        now = time.time()
        with TOKENS_LOCK:
            try:
                with open(srv.cfg.tokens) as f:
                    live = json.load(f)
            except (OSError, ValueError):
                live = {}
            live = {t: e for t, e in live.items() if e > now}
            live[tok] = now + srv.cfg.life
            with open(srv.cfg.tokens + ".tmp", "w") as f:
                json.dump(live, f)
            os.rename(srv.cfg.tokens + ".tmp", srv.cfg.tokens)
        self.record(kind, "ok")
        self.answer(200, {"access_token": tok, "expires_in": srv.cfg.life,
                          "token_type": "Bearer"})

    def refuse(self, kind, why):
        self.record(kind, why)
        self.answer(400, {"error": "invalid_grant", "error_description": why})

    def record(self, kind, verdict):
        stand_in.log_line(self.server, {"kind": kind, "verdict": verdict,
                                        "time": time.time()})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        form = {k: v[0] for k, v in parse_qs(self.rfile.read(n).decode()).items()}
        cfg = self.server.cfg
        grant = form.get("grant_type")
        if self.path != "/token":
            return self.answer(404, {"error": "not_found"})
        if grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":
            aud = "http://127.0.0.1:%d/token" % self.server.server_address[1]
            why = check_jwt(cfg, form.get("assertion", ""), aud)
            return self.refuse("jwt", why) if why else self.issue("jwt")
        if grant == "refresh_token" and cfg.user:
            with open(cfg.user) as f:
                u = json.load(f)
            good = all(form.get(k) == u[k] for k in
                       ("client_id", "client_secret", "refresh_token"))
            return self.issue("user") if good else self.refuse(
                "user", "Token has been expired or revoked.")
        return self.refuse(str(grant), "unsupported grant")

    def do_GET(self):
        if self.path != META:
            return self.answer(404, {"error": "not_found"})
        if self.headers.get("Metadata-Flavor") != "Google":
            self.record("metadata", "no Metadata-Flavor")
            return self.answer(403, {"error": "Missing Metadata-Flavor"})
        return self.issue("metadata")


# Guards TOKENS.json, which every issue rewrites.
TOKENS_LOCK = threading.Lock()


def main():
    ap = stand_in.arg_parser()
    ap.add_argument("--pubkey", required=True)
    ap.add_argument("--email", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--user")
    ap.add_argument("--life", type=int, default=3600)
    stand_in.serve(Handler, ap.parse_args())


if __name__ == "__main__":
    main()
