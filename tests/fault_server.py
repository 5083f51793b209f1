#!/usr/bin/python3
"""fault_server.py - a static HTTP/1.1 file server that misbehaves on request,
for testing echofs against flaky servers (standard library only).

Usage:
  /usr/bin/python3 tests/fault_server.py --root DIR [--port N] [--port-file FILE]
        [--fault RULE]... [--tls-cert PEM --tls-key PEM] [--verbose]

Serves the files under --root (GET and HEAD) with keep-alive, Content-Length,
a strong ETag ("<size hex>-<mtime_ns hex>"), single-range Range requests
(206 + Content-Range; 416 with "Content-Range: bytes */SIZE" when
unsatisfiable; several ranges are answered with 200 and the full body),
If-Range (a non-matching validator gives 200 and the full body), If-Match
(412 on mismatch) and If-None-Match (304 on match).
--port 0 (the default) picks a free port. Once the socket listens the port is
written to --port-file (atomically, via rename) and printed on stdout as
"PORT <n>". With --tls-cert/--tls-key the server speaks HTTPS instead.

Fault rules: GLOB=MODE[,count=N][,retry_after=S]
  GLOB is matched with fnmatch against the URL path (query string removed).
  count: how many requests the rule applies to before it expires (default
  unlimited). retry_after: adds "Retry-After: S" (with status: modes).
  Modes:
    status:CODE     reply CODE with a short text body
    truncate:BYTES  send full headers, then close after BYTES body bytes
    ignore-range    answer Range requests with 200 and the full body
    slow:BPS        throttle the body to BPS bytes per second
    stall:SECONDS   send headers, then nothing for SECONDS, then close
    stall-at:BYTES  send headers and BYTES of the body, then nothing until
                    the client goes away (an hour at most), then close
    reset           close the connection (RST) without any response
    etag:VALUE      report VALUE (sent as is, give the quotes) as the ETag;
                    If-Range / If-Match are compared against it
    redirect:URL    reply 302 with "Location: URL"
    lie-range       answer a Range request with the right bytes but a
                    Content-Range whose first and last byte are one too high
    range-from-zero answer a Range request with the right headers over the
                    bytes from offset 0 (a resume that starts over, lying)
    range-restart   answer a Range request with 206 and the whole object,
                    its Content-Range starting at 0
    long-length:N   announce a Content-Length N bytes longer than the body
                    on a 200 (GET and HEAD), send the body and keep the
                    connection open, as a server whose size is wrong does
  Per request at most one etag: rule and at most one other rule apply: the
  first matching unexpired rule of each kind (in the order given); only an
  applied rule has its count decremented.

Control endpoints (not counted in the statistics, never faulted):
  PUT /_faults        body: newline-separated rules replacing the current ones
                      (an empty body clears them); 400 with a reason if a rule
                      does not parse.
  GET /_stats         JSON {"requests": n, "by_path": {path: n}, "ranges": n,
                      "connections": n, "max_open": n, "gets": {path: n}}:
                      requests served (all methods; "gets": GET only),
                      requests carrying a Range header, connections
                      accepted in total and the peak of simultaneously open
                      connections.
  GET /_last_headers  JSON {"path": p, "headers": {name: value}} of the last
                      non-control request.
  POST /_reset_stats  zero the statistics.
"""

import argparse
import email.utils
import fnmatch
import json
import os
import select
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHUNK = 64 * 1024
RULE_OPTS = ("count", "retry_after")


class Rule:
    def __init__(self, text):
        text = text.strip()
        glob, sep, rest = text.partition("=")
        if not sep or not glob or not rest:
            raise ValueError("rule needs GLOB=MODE: %r" % text)
        parts = rest.split(",")
        # Options are trailing key=value parts with a known key; anything
        # else (e.g. a comma inside a redirect URL) belongs to the mode.
        opts = {}
        while len(parts) > 1:
            key, eq, val = parts[-1].partition("=")
            if not eq or key.strip() not in RULE_OPTS:
                break
            opts[key.strip()] = val.strip()
            parts.pop()
        mode = ",".join(parts)
        self.glob = glob
        self.kind, _, self.arg = mode.partition(":")
        self.count = int(opts["count"]) if "count" in opts else None
        self.retry_after = opts.get("retry_after")
        self.check()

    def check(self):
        numeric = {"status": int, "truncate": int, "slow": float, "stall": float,
                   "long-length": int, "stall-at": int}
        if self.kind in numeric:
            numeric[self.kind](self.arg)
            if self.kind == "slow" and float(self.arg) <= 0:
                raise ValueError("slow needs BPS > 0")
        elif self.kind in ("etag", "redirect"):
            if not self.arg:
                raise ValueError("%s needs a value" % self.kind)
        elif self.kind not in ("ignore-range", "reset", "lie-range",
                               "range-from-zero", "range-restart"):
            raise ValueError("unknown fault mode %r" % self.kind)
        if self.count is not None and self.count < 0:
            raise ValueError("count must be >= 0")


class State:
    """Everything shared between handler threads, under one lock."""

    def __init__(self, root, rules):
        self.root = os.path.realpath(root)
        self.lock = threading.Lock()
        self.rules = rules
        self.reset_stats()
        self.last_headers = {"path": None, "headers": {}}

    def reset_stats(self):
        """Zeroes the counters; open connections stay counted as open."""
        self.requests = 0
        self.by_path = {}
        self.gets = {}
        self.ranges = 0
        self.connections = 0
        self.open = getattr(self, "open", 0)
        self.max_open = self.open

    def pick(self, path):
        """Returns (etag_rule, action_rule) for path, consuming counts."""
        with self.lock:
            etag_rule = action = None
            for r in self.rules:
                if r.count == 0 or not fnmatch.fnmatchcase(path, r.glob):
                    continue
                if r.kind == "etag":
                    if etag_rule is None:
                        etag_rule = r
                elif action is None:
                    action = r
            for r in (etag_rule, action):
                if r is not None and r.count is not None:
                    r.count -= 1
            return etag_rule, action


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fault_server/1"
    timeout = 120  # idle keep-alive connections give up eventually

    def setup(self):
        super().setup()
        st = self.server.state
        with st.lock:
            st.connections += 1
            st.open += 1
            st.max_open = max(st.max_open, st.open)

    def finish(self):
        st = self.server.state
        with st.lock:
            st.open -= 1
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("fault_server: " + (fmt % args) + "\n")

    # ---- control endpoints -------------------------------------------------

    def send_small(self, code, body, ctype="text/plain", extra=()):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def control(self, path):
        st = self.server.state
        if path == "/_stats" and self.command == "GET":
            with st.lock:
                body = json.dumps({"requests": st.requests, "by_path": st.by_path,
                                   "ranges": st.ranges,
                                   "connections": st.connections,
                                   "max_open": st.max_open,
                                   "gets": st.gets})
            self.send_small(200, body, "application/json")
        elif path == "/_last_headers" and self.command == "GET":
            with st.lock:
                body = json.dumps(st.last_headers)
            self.send_small(200, body, "application/json")
        elif path == "/_faults" and self.command == "PUT":
            text = self.read_body()
            try:
                rules = [Rule(l) for l in text.splitlines() if l.strip()]
            except ValueError as e:
                self.send_small(400, "bad rule: %s\n" % e)
                return
            with st.lock:
                st.rules = rules
            self.send_small(200, "%d rules\n" % len(rules))
        elif path == "/_reset_stats" and self.command == "POST":
            self.read_body()
            with st.lock:
                st.reset_stats()
            self.send_small(200, "ok\n")
        else:
            self.send_small(405, "bad control request\n")

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n).decode("utf-8", "replace") if n > 0 else ""

    # ---- file serving ------------------------------------------------------

    def do_GET(self):
        self.serve()

    def do_HEAD(self):
        self.serve()

    def do_PUT(self):
        self.serve()

    def do_POST(self):
        self.serve()

    def serve(self):
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        if path.startswith("/_"):
            self.control(path)
            return
        st = self.server.state
        with st.lock:
            st.requests += 1
            st.by_path[path] = st.by_path.get(path, 0) + 1
            if self.command == "GET":
                st.gets[path] = st.gets.get(path, 0) + 1
            if "Range" in self.headers:
                st.ranges += 1
            st.last_headers = {"path": path, "headers": dict(self.headers.items())}
        etag_rule, rule = st.pick(path)
        if self.command not in ("GET", "HEAD"):
            self.send_small(405, "method not allowed\n", extra=[("Allow", "GET, HEAD")])
            return
        if rule is not None and self.early_fault(rule):
            return
        self.serve_file(path, etag_rule, rule)

    def early_fault(self, rule):
        """Faults that replace the response entirely. True when handled."""
        if rule.kind == "reset":
            self.close_connection = True
            try:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
            except OSError:
                pass
            return True
        if rule.kind == "status":
            extra = [("Retry-After", rule.retry_after)] if rule.retry_after else []
            code = int(rule.arg)
            self.send_small(code, "fault_server: injected status %d\n" % code,
                            extra=extra)
            return True
        if rule.kind == "redirect":
            self.send_small(302, "moved\n", extra=[("Location", rule.arg)])
            return True
        return False

    def resolve(self, path):
        root = self.server.state.root
        full = os.path.realpath(os.path.join(root, path.lstrip("/")))
        if full != root and not full.startswith(root + os.sep):
            return None
        return full if os.path.isfile(full) else None

    def serve_file(self, path, etag_rule, rule):
        full = self.resolve(path)
        if full is None:
            self.send_small(404, "not found\n")
            return
        try:
            f = open(full, "rb")
        except OSError:
            self.send_small(403, "cannot open\n")
            return
        with f:
            sta = os.fstat(f.fileno())
            size = sta.st_size
            etag = '"%x-%x"' % (size, sta.st_mtime_ns)
            if etag_rule is not None:
                etag = etag_rule.arg
            self.respond(f, size, etag, sta.st_mtime, rule)

    def etag_matches(self, header, etag, weak_ok):
        for tag in (t.strip() for t in header.split(",")):
            if tag == "*":
                return True
            if weak_ok and tag.startswith("W/"):
                tag = tag[2:]
            if tag == etag:
                return True
        return False

    def respond(self, f, size, etag, mtime, rule):
        common = [("ETag", etag), ("Accept-Ranges", "bytes"),
                  ("Last-Modified", email.utils.formatdate(mtime, usegmt=True))]
        im = self.headers.get("If-Match")
        if im is not None and not self.etag_matches(im, etag, False):
            self.send_small(412, "precondition failed\n", extra=common)
            return
        inm = self.headers.get("If-None-Match")
        if inm is not None and self.etag_matches(inm, etag, True):
            self.send_response(304)
            for k, v in common:
                self.send_header(k, v)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        start, end, status = 0, size - 1, 200
        rng = self.headers.get("Range")
        ir = self.headers.get("If-Range")
        use_range = rng is not None and not (rule and rule.kind == "ignore-range")
        if use_range and ir is not None and ir.strip() != etag:
            use_range = False  # validator changed: whole new representation
        if use_range:
            parsed = parse_range(rng, size)
            if parsed == "unsatisfiable":
                self.send_small(416, "range not satisfiable\n",
                                extra=common + [("Content-Range", "bytes */%d" % size)])
                return
            if parsed is not None:
                start, end = parsed
                status = 206
            if parsed is not None and rule and rule.kind == "range-restart":
                start, end = 0, size - 1
        length = end - start + 1 if size > 0 else 0
        self.send_response(status)
        for k, v in common:
            self.send_header(k, v)
        self.send_header("Content-Type", "application/octet-stream")
        extra = 0
        if status == 200 and rule and rule.kind == "long-length":
            extra = int(rule.arg)
        self.send_header("Content-Length", str(length + extra))
        if status == 206:
            lie = 1 if rule and rule.kind == "lie-range" else 0
            self.send_header("Content-Range", "bytes %d-%d/%d"
                             % (start + lie, end + lie, size + lie))
        self.end_headers()
        if self.command == "HEAD":
            return
        if rule and rule.kind == "range-from-zero":
            start = 0
        self.send_body(f, start, length, rule)

    def send_body(self, f, start, length, rule):
        kind = rule.kind if rule else None
        if kind == "stall":
            self.wfile.flush()
            time.sleep(float(rule.arg))
            self.close_connection = True
            return
        limit = length
        if kind in ("truncate", "stall-at"):
            limit = min(length, int(rule.arg))
            self.close_connection = True
        bps = float(rule.arg) if kind == "slow" else None
        f.seek(start)
        sent = 0
        try:
            while sent < limit:
                n = min(CHUNK, limit - sent)
                if bps is not None:
                    n = min(n, max(1, int(bps / 10)))
                data = f.read(n)
                if not data:
                    self.close_connection = True  # file shrank under us
                    return
                self.wfile.write(data)
                sent += len(data)
                if bps is not None:
                    time.sleep(len(data) / bps)
        except OSError:
            self.close_connection = True
            return
        if kind == "stall-at":
            self.wait_for_hangup(3600)

    def wait_for_hangup(self, seconds):
        """Sends nothing until the client closes (or seconds pass)."""
        self.wfile.flush()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            r, _, _ = select.select([self.connection], [], [], 0.2)
            try:
                if r and not self.connection.recv(1, socket.MSG_PEEK):
                    return
            except (OSError, ValueError):  # ValueError: TLS has no peek
                return


def parse_range(header, size):
    """(start, end) inclusive, "unsatisfiable", or None to ignore the header
    (malformed or several ranges: RFC 9110 allows answering with 200)."""
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash:
        return None
    try:
        if first == "":
            n = int(last)
            if n <= 0:
                return "unsatisfiable"
            return (max(0, size - n), size - 1) if size > 0 else "unsatisfiable"
        a = int(first)
        b = int(last) if last != "" else size - 1
    except ValueError:
        return None
    if a < 0:
        return None
    if a >= size:
        return "unsatisfiable"
    if b < a:
        return None
    return a, min(b, size - 1)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def handle_error(self, request, client_address):
        # Clients hanging up (a reader stopping a body early, a rejected
        # certificate) are normal here; anything else is a server bug.
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, ssl.SSLError, TimeoutError)) \
                and not self.verbose:
            return
        super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--fault", action="append", default=[])
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    try:
        rules = [Rule(r) for r in a.fault]
    except ValueError as e:
        ap.error("bad --fault: %s" % e)
    if not os.path.isdir(a.root):
        ap.error("--root is not a directory: %s" % a.root)
    srv = Server(("127.0.0.1", a.port), Handler)
    srv.state = State(a.root, rules)
    srv.verbose = a.verbose
    if a.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls_cert, a.tls_key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    port = srv.server_address[1]
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as pf:
            pf.write("%d\n" % port)
        os.rename(tmp, a.port_file)
    print("PORT %d" % port, flush=True)
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()


if __name__ == "__main__":
    main()
