#!/usr/bin/python3
"""nginx.py - start and stop a private nginx on a free loopback port from a
generated config (used by demo.sh, bench_epoch.sh and the integration tests).

  nginx.py start --root DIR --state STATEDIR [--autoindex /tree/]... [--limit-rate R]
      prints the port on stdout once nginx accepts connections
  nginx.py stop --state STATEDIR

Everything nginx writes (config, pid, error log, temp dirs) stays under
STATEDIR. The config runs nginx with `daemon off` so the pid we hold is the
master's; as root the workers also run as root so they can read private
(0700) temp dirs.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

NGINX = "/usr/sbin/nginx"

CONFIG = """\
worker_processes 1;
daemon off;
{user}
pid {state}/nginx.pid;
error_log {state}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {state}/tmp/body;
    proxy_temp_path {state}/tmp/proxy;
    fastcgi_temp_path {state}/tmp/fastcgi;
    uwsgi_temp_path {state}/tmp/uwsgi;
    scgi_temp_path {state}/tmp/scgi;
    types {{ application/x-tar tar; image/jpeg jpg; text/plain cls; }}
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    server {{
        listen 127.0.0.1:{port}{ssl};
        {tls}
        root {root};
        {limit}
        location / {{ autoindex off; }}
{autoindex}
    }}
}}
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(root, state, port, autoindex, limit_rate, tls=None):
    for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        os.makedirs(os.path.join(state, "tmp", d), exist_ok=True)
    locs = "".join("        location %s { autoindex on; }\n" % p for p in autoindex)
    conf = CONFIG.format(
        user="user root;" if os.geteuid() == 0 else "",
        state=state, port=port, root=os.path.abspath(root),
        limit="limit_rate %s;" % limit_rate if limit_rate else "",
        autoindex=locs,
        ssl=" ssl" if tls else "",
        tls=("ssl_certificate %s; ssl_certificate_key %s;" % tls) if tls else "")
    path = os.path.join(state, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    return path


def wait_ready(proc, port, timeout):
    """True once the port accepts connections; False if nginx died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


class Nginx:
    """A running private nginx. stop() is idempotent."""

    def __init__(self, root, state, autoindex=(), limit_rate=None, timeout=10,
                 tls=None):
        """tls: (certificate file, key file) to serve HTTPS instead."""
        self.root = root
        self.tls = tls
        self.state = os.path.abspath(state)
        os.makedirs(self.state, exist_ok=True)
        last_err = ""
        for _ in range(5):  # another process may grab the port in between
            self.port = free_port()
            conf = write_config(root, self.state, self.port, autoindex, limit_rate,
                                tls)
            log = open(os.path.join(self.state, "stderr.log"), "ab")
            self.proc = subprocess.Popen(
                [NGINX, "-p", self.state, "-e", self.state + "/error.log", "-c", conf],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True)
            log.close()
            if wait_ready(self.proc, self.port, timeout):
                with open(os.path.join(self.state, "master.pid"), "w") as f:
                    f.write("%d\n" % self.proc.pid)
                return
            self.stop()
            last_err = self.error_log()
        raise RuntimeError("nginx did not start:\n" + last_err)

    @property
    def url(self):
        return "%s://127.0.0.1:%d" % ("https" if self.tls else "http", self.port)

    def error_log(self):
        try:
            with open(os.path.join(self.state, "error.log")) as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def stop_state(state):
    """Stop the nginx whose master pid start recorded in state."""
    try:
        with open(os.path.join(state, "master.pid")) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return 0
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return 0
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    os.unlink(os.path.join(state, "master.pid"))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("start", "stop"))
    ap.add_argument("--root", help="document root (start)")
    ap.add_argument("--state", required=True, help="dir for config, pid, logs")
    ap.add_argument("--autoindex", action="append", default=[],
                    help="URL prefix to list, e.g. /tree/ (repeatable)")
    ap.add_argument("--limit-rate", help="nginx limit_rate per connection")
    a = ap.parse_args()
    if a.action == "stop":
        return stop_state(a.state)
    if not a.root:
        ap.error("start needs --root")
    try:
        n = Nginx(a.root, a.state, a.autoindex, a.limit_rate)
    except RuntimeError as e:
        print("nginx.py: %s" % e, file=sys.stderr)
        return 1
    n.proc = None  # keep it running after we exit; `stop` ends it
    print(n.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
