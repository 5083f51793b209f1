#!/usr/bin/python3
"""hostile_server.py - an HTTP/1.1 server that serves wrong bytes with
plausible headers, for testing that echofs never passes them on (standard
library only).

Usage:
  /usr/bin/python3 tests/hostile_server.py --root DIR --alt DIR [--port N]
        [--port-file FILE]

Serves the files under --root (GET and HEAD, keep-alive, Content-Length, a
strong ETag "<size hex>-<mtime_ns hex>" of the --root file, single Range
requests) and lies according to the current mode:
  ok         the truth
  lie-range  a GET without Range is cut off after a third of the body (the
             client resumes); a Range reply carries the right Content-Range
             header over the bytes from offset 0
  html       an HTML page padded to the file's exact size (Range honoured
             over that page)
  gzip       the file gzipped, padded or cut to its exact size, sent with
             Content-Encoding: gzip (Range honoured over those bytes)
  overwrite  the file changed in place during the transfer: the first half
             from --root, the rest from the same path under --alt (same
             size); Range replies come from --alt, all with --root's ETag
  moved      the --alt file (members moved, another size), without ETag;
             Range honoured over it, with its true total size
The mode applies to every path; `PUT /_mode` (body: the mode) changes it,
`GET /_stats` returns JSON {"requests": n, "ranges": n, "accept_encoding":
[values seen]} and `POST /_reset` zeroes it.
"""

import argparse
import gzip
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODES = ("ok", "lie-range", "html", "gzip", "overwrite", "moved")


class State:
    def __init__(self, root, alt):
        self.root, self.alt = root, alt
        self.mode = "ok"
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.requests, self.ranges, self.accept_encoding = 0, 0, []


def read(path):
    with open(path, "rb") as f:
        return f.read()


def fit(data, size):
    """data padded with zeros or cut to exactly size bytes."""
    return data[:size] + b"\0" * max(0, size - len(data))


def html_page(size):
    page = b"<!DOCTYPE html><html><body><h1>Welcome</h1></body></html>\n"
    return fit(page + b" " * size, size)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None  # set in main()

    def log_message(self, fmt, *args):
        pass

    def do_PUT(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        mode = body.decode().strip()
        if self.path != "/_mode" or mode not in MODES:
            return self.reply(400, b"bad mode\n", {})
        self.state.mode = mode
        self.reply(200, b"ok\n", {})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with self.state.lock:
            self.state.reset()
        self.reply(200, b"ok\n", {})

    def do_HEAD(self):
        self.serve(head=True)

    def do_GET(self):
        if self.path == "/_stats":
            s = self.state
            with s.lock:
                body = json.dumps({"requests": s.requests, "ranges": s.ranges,
                                   "accept_encoding": s.accept_encoding})
            return self.reply(200, body.encode(), {})
        self.serve(head=False)

    def reply(self, code, body, headers, head=False, cut=None):
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if head:
            return
        if cut is not None:
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)

    def count(self, ranged):
        s = self.state
        with s.lock:
            s.requests += 1
            s.ranges += 1 if ranged else 0
            s.accept_encoding.append(self.headers.get("Accept-Encoding", ""))

    def body_of(self, rel, mode):
        """(bytes served, ETag or None, extra headers) for mode."""
        path = os.path.join(self.state.root, rel)
        st = os.stat(path)
        etag = '"%x-%x"' % (st.st_size, st.st_mtime_ns)
        alt = os.path.join(self.state.alt, rel)
        if mode == "html":
            return html_page(st.st_size), etag, {"Content-Type": "text/html"}
        if mode == "gzip":
            return (fit(gzip.compress(read(path)), st.st_size), etag,
                    {"Content-Encoding": "gzip"})
        if mode == "moved":
            return read(alt), None, {}
        return read(path), etag, {}

    def serve(self, head):
        rel = self.path.split("?", 1)[0].lstrip("/")
        if ".." in rel.split("/") or not os.path.isfile(
                os.path.join(self.state.root, rel)):
            return self.reply(404, b"not found\n", {}, head)
        mode = self.state.mode
        rng = self.headers.get("Range")
        self.count(rng is not None)
        data, etag, extra = self.body_of(rel, mode)
        headers = dict(extra)
        if etag:
            headers["ETag"] = etag
        size = len(data)
        if rng is None or head:
            return self.serve_full(rel, data, headers, head, mode)
        first, last = parse_range(rng, size)
        if first is None:
            headers["Content-Range"] = "bytes */%d" % size
            return self.reply(416, b"", headers)
        headers["Content-Range"] = "bytes %d-%d/%d" % (first, last, size)
        n = last - first + 1
        if mode == "lie-range":
            part = data[:n]
        elif mode == "overwrite":
            part = read(os.path.join(self.state.alt, rel))[first:last + 1]
        else:
            part = data[first:last + 1]
        self.reply(206, part, headers)

    def serve_full(self, rel, data, headers, head, mode):
        if mode == "overwrite" and not head:
            new = read(os.path.join(self.state.alt, rel))
            half = len(data) // 2
            data = data[:half] + new[half:]
        cut = len(data) // 3 if mode == "lie-range" and not head else None
        self.reply(200, data, headers, head, cut)


def parse_range(value, size):
    """(first, last) of a single "bytes=A-B" / "bytes=A-" range, or
    (None, None) when unsatisfiable or not understood."""
    if not value.startswith("bytes=") or "," in value:
        return None, None
    a, _, b = value[6:].partition("-")
    try:
        first = int(a)
        last = int(b) if b else size - 1
    except ValueError:
        return None, None
    if first >= size or last < first:
        return None, None
    return first, min(last, size - 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--alt", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    a = ap.parse_args()
    Handler.state = State(a.root, a.alt)
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    port = srv.server_address[1]
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.rename(tmp, a.port_file)
    print("PORT %d" % port, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
