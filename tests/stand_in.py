"""stand_in.py - what the loopback stand-ins of cloud services under tests/
(tests/s3/gateway.py, tests/gcs/gateway.py, tests/gcs/token_server.py)
share: a threaded HTTP server on 127.0.0.1, the --port, --port-file and
--log flags, the port file written atomically, and one JSON line per
request in the log."""

import argparse
import http.server
import json
import os
import socketserver
import threading


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def arg_parser():
    """An ArgumentParser holding the flags every stand-in takes."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--log")
    return ap


def serve(handler, cfg):
    """Serves handler on 127.0.0.1:cfg.port (0: any free port) until killed;
    the handler finds cfg at self.server.cfg. With cfg.port_file, the port
    is written there first (renamed into place, so a reader never sees half
    a number)."""
    srv = Server(("127.0.0.1", cfg.port), handler)
    srv.cfg = cfg
    srv.log_lock = threading.Lock()
    if cfg.port_file:
        with open(cfg.port_file + ".tmp", "w") as f:
            f.write(str(srv.server_address[1]))
        os.rename(cfg.port_file + ".tmp", cfg.port_file)
    srv.serve_forever()


def log_line(server, obj):
    """Appends obj as one JSON line to server.cfg.log (if set); safe from
    the server's handler threads."""
    if not server.cfg.log:
        return
    line = json.dumps(obj)
    with server.log_lock, open(server.cfg.log, "a") as f:
        f.write(line + "\n")
