#!/usr/bin/python3
"""trickle_server.py - a static HTTP/1.1 server whose bodies crawl, for
liveness tests of echofs (standard library only).

Usage:
  /usr/bin/python3 tests/trickle_server.py --root DIR [--port N]
        [--port-file FILE] [--slow GLOB] [--rate BPS | --stall]

HEAD and GET of files under --root, with keep-alive, the right
Content-Length, a strong ETag ("<size hex>-<mtime_ns hex>") and single
Range requests (206 + Content-Range). HEAD always answers at once, and so
does GET of a path that does not match --slow (default "*.tar", matched with
fnmatch against the URL path). A GET of a matching path sends its headers at
once, then the body at --rate bytes per second (default 1), or with --stall
nothing at all until the client goes away. Once the socket listens the port
is written to --port-file (atomically) and printed as "PORT <n>".
"""

import argparse
import fnmatch
import os
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "trickle_server/1"

    def log_message(self, fmt, *args):
        pass

    def do_HEAD(self):
        self.serve(body=False)

    def do_GET(self):
        self.serve(body=True)

    def resolve(self):
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        full = os.path.realpath(os.path.join(self.server.root, path.lstrip("/")))
        if not full.startswith(self.server.root + os.sep) or not os.path.isfile(full):
            return path, None
        return path, full

    def serve(self, body):
        path, full = self.resolve()
        if full is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        st = os.stat(full)
        size = st.st_size
        start, end = 0, size - 1
        rng = self.headers.get("Range")
        partial = False
        if rng and rng.startswith("bytes=") and "," not in rng:
            a, _, b = rng[6:].partition("-")
            if a.isdigit():
                start = int(a)
                end = min(int(b), size - 1) if b.isdigit() else size - 1
                partial = start <= end
        self.send_response(206 if partial else 200)
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("ETag", '"%x-%x"' % (size, st.st_mtime_ns))
        self.send_header("Accept-Ranges", "bytes")
        if partial:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.end_headers()
        if not body:
            return
        with open(full, "rb") as f:
            f.seek(start)
            data = f.read(end - start + 1)
        if fnmatch.fnmatch(path, self.server.slow):
            self.crawl(data)
        else:
            self.wfile.write(data)

    def crawl(self, data):
        self.wfile.flush()
        if self.server.stall:
            # Nothing more until the client gives up.
            while self.connection.recv(1024):
                pass
            self.close_connection = True
            return
        step = max(1, int(self.server.rate / 10))
        for i in range(0, len(data), step):
            self.wfile.write(data[i:i + step])
            self.wfile.flush()
            time.sleep(step / self.server.rate)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--slow", default="*.tar")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--rate", type=float, default=1.0)
    mode.add_argument("--stall", action="store_true")
    a = ap.parse_args()
    if a.rate <= 0:
        ap.error("--rate must be positive")
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    srv.root = os.path.realpath(a.root)
    srv.slow, srv.rate, srv.stall = a.slow, a.rate, a.stall
    port = srv.server_address[1]
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.rename(tmp, a.port_file)
    print("PORT %d" % port, flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
