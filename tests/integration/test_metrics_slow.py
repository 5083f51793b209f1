"""test_metrics_slow.py - slow clients cannot starve the metrics endpoint:
200 connections from one address that trickle a header line now and then
hold at most a few slots (a per-address limit), a scraper from another
address is still answered, a scraper from the drippers' own address takes
the slot of the oldest unfinished one, a request not complete within its
deadline is cut off however steadily it drips, and a connection that goes
quiet is closed by the idle timeout, which gives its slot back to its own
address too."""

import select
import socket
import threading
import time
import urllib.request

import pytest

import helpers
from helpers import source_of

SLOW = 200


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port, source="127.0.0.1"):
    """GET /metrics from the given local address; the status line and
    whether the body has an echofs series."""
    with socket.create_connection(("127.0.0.1", port), timeout=30,
                                  source_address=(source, 0)) as s:
        s.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0].decode(), b"echofs_" in body


def open_slow(port, n):
    """n connections that have sent a request line and one header, no end."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(10)
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        except OSError:
            s.close()
            continue
        socks.append(s)
    return socks


def still_open(socks):
    """Connections the server has not closed (no EOF, no reset)."""
    alive = []
    for s in socks:
        r, _, _ = select.select([s], [], [], 0)
        if not r:
            alive.append(s)
            continue
        try:
            if s.recv(1, socket.MSG_PEEK):
                alive.append(s)
        except OSError:
            pass
    return alive


def trickle(socks):
    """One more header line on every open connection (a slow loris)."""
    for s in socks:
        try:
            s.sendall(b"X-Slow: 1\r\n")
        except OSError:
            pass


@pytest.fixture
def endpoint(nginx, mounter):
    port = free_port()
    mounter(source_of(nginx.url, "test"), opts={"index": nginx.test_index,
                                                 "metrics": "127.0.0.1:%d" % port})
    return port


def test_slow_clients_do_not_starve_a_scraper(endpoint):
    port = endpoint
    socks = open_slow(port, SLOW)
    try:
        for _ in range(3):
            trickle(socks)
            status, has = scrape(port, source="127.0.0.2")
            assert status.endswith("200 OK") and has, \
                "scrape beside slow connections: %r" % status
            # Every slow connection beyond the per-address limit was refused.
            # Counted after the scrape: the server accepts in arrival order,
            # so by the time the scraper is answered every slow connection
            # was accepted, and one over the limit closed at once. Counted
            # before it, connections still waiting in the listen queue look
            # open (CI saw 11 of 200 on a loaded machine).
            # None may be left: the request deadline (3 s from accept) cuts
            # the first 4 too on a slow machine.
            alive = still_open(socks)
            assert len(alive) <= 4, "%d slow connections held" % len(alive)
    finally:
        for s in socks:
            s.close()


def test_idle_timeout_gives_the_slots_back(endpoint):
    port = endpoint
    socks = open_slow(port, 8)
    try:
        # Silent from now on: the server closes them one by one (counted,
        # not timed; the guard only stops a hang).
        deadline = time.monotonic() + 120
        while still_open(socks):
            assert time.monotonic() < deadline, "idle connections never closed"
            time.sleep(0.2)
        status, has = scrape(port)
        assert status.endswith("200 OK") and has, status
    finally:
        for s in socks:
            s.close()


def test_drip_on_every_slot_does_not_starve_a_scraper(endpoint):
    """4 connections (the per-address limit) send a header line every 2 s,
    under the 3 s idle timeout, and never end their request; 8 scrapes from
    the same address are all answered."""
    port = endpoint
    socks = open_slow(port, 4)
    stop = threading.Event()

    def drip():
        while not stop.wait(2):
            trickle(socks)

    t = threading.Thread(target=drip, daemon=True)
    t.start()
    # Past the 0.5 s in which a new connection's slot cannot be taken (a
    # flood of fresh connections is refused, not made room for).
    time.sleep(1)
    try:
        failed = []
        for i in range(8):
            try:
                status, has = scrape(port)
            except OSError as e:
                status, has = repr(e), False
            if not (status.endswith("200 OK") and has):
                failed.append((i, status))
            time.sleep(0.5)
        assert not failed, "%d of 8 scrapes failed: %r" % (len(failed), failed)
    finally:
        stop.set()
        t.join()
        for s in socks:
            s.close()


def test_steady_drip_is_cut_by_the_request_deadline(endpoint):
    """A request that never completes is closed within the request deadline
    (3 s from accept), though a line every 1 s keeps it from being idle."""
    port = endpoint
    socks = open_slow(port, 1)
    try:
        start = time.monotonic()
        while still_open(socks):
            # the guard only stops a hang: a drip is cut after 3 s
            assert time.monotonic() - start < 30, "a dripping request held on"
            trickle(socks)
            time.sleep(1)
        # Cut by the deadline, not the idle timeout, which a line a second
        # never reaches.
        assert time.monotonic() - start < 10
    finally:
        for s in socks:
            s.close()
