"""test_metrics.py - the Prometheus endpoint (-o metrics=ADDR:PORT): the
text parses as Prometheus exposition format, holds echofs's series and the
process's, and a real Prometheus server (Debian's) scrapes it."""

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

import helpers
from helpers import source_of

PROMETHEUS = "/usr/bin/prometheus"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def parse_families(text):
    """{name: (type, [(labels, value)])} by prometheus_client's parser when
    it is there (it rejects malformed text), else a strict small parser."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        text_string_to_metric_families = None
    out = {}
    if text_string_to_metric_families:
        for fam in text_string_to_metric_families(text):
            out[fam.name] = (fam.type, [(s.labels, s.value) for s in fam.samples])
        return out
    types = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            types[name] = typ
        elif line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            base = name.split("{", 1)[0]
            out.setdefault(base, (types.get(base), []))[1].append((name, float(value)))
    return out


def test_metrics_endpoint_text(nginx, mounter):
    port = free_port()
    m = mounter(source_of(nginx.url, "test"), opts={"index": nginx.test_index,
                                                     "metrics": "127.0.0.1:%d" % port})
    with open(os.path.join(m.mnt, "4", sorted(os.listdir(m.path("4")))[0]), "rb") as f:
        f.read()
    status, ctype, text = get("http://127.0.0.1:%d/metrics" % port)
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4"), ctype
    fams = parse_families(text)
    # prometheus_client strips _total from counter family names.
    assert fams["echofs_samples"][1][0][1] == 10000
    assert fams["echofs_shards"][1][0][1] == 10
    assert fams["process_resident_memory_bytes"][1][0][1] > 1e6
    assert fams["process_threads"][1][0][1] >= 2
    assert fams["process_open_fds"][1][0][1] >= 3
    assert "# HELP echofs_samples " in text and "# TYPE echofs_samples gauge" in text
    # The same figures as the control file.
    with open(m.path(".echofs", "stats.prom")) as f:
        prom = f.read()
    assert "echofs_samples 10000" in prom and "echofs_samples 10000" in text
    # Anything but GET /metrics is refused without rendering the stats.
    with pytest.raises(urllib.error.HTTPError) as e:
        get("http://127.0.0.1:%d/other" % port)
    assert e.value.code == 404
    req = urllib.request.Request("http://127.0.0.1:%d/metrics" % port, data=b"x",
                                 method="POST")
    with pytest.raises((urllib.error.HTTPError, urllib.error.URLError,
                        ConnectionError)):
        urllib.request.urlopen(req, timeout=5)


def test_metrics_bad_address_fails_mount(nginx, mounter):
    for bad in ("host.example:9100", "127.0.0.1:0", "127.0.0.1:70000", "abc"):
        m = mounter(source_of(nginx.url, "test"), check=False,
                    opts={"index": nginx.test_index, "metrics": bad})
        assert m.result.returncode != 0
        assert "metrics" in m.result.stderr, m.result.stderr
        assert not m.mounted


def test_metrics_port_in_use_fails_mount(nginx, mounter):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        m = mounter(source_of(nginx.url, "test"), check=False,
                    opts={"index": nginx.test_index, "metrics": "127.0.0.1:%d" % port})
        assert m.result.returncode != 0
        assert "cannot serve metrics" in m.result.stderr, m.result.stderr
        assert not m.mounted


@pytest.fixture
def prometheus(tmp_path):
    if not os.path.exists(PROMETHEUS):
        pytest.skip("Debian's prometheus package is not installed")
    procs = []

    def start(target):
        port = free_port()
        cfg = tmp_path / "prometheus.yml"
        cfg.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                       "scrape_configs:\n  - job_name: echofs\n"
                       "    static_configs:\n      - targets: ['%s']\n" % target)
        log = open(tmp_path / "prometheus.log", "w")
        p = subprocess.Popen([PROMETHEUS, "--config.file=%s" % cfg,
                              "--storage.tsdb.path=%s" % (tmp_path / "tsdb"),
                              "--web.listen-address=127.0.0.1:%d" % port],
                             stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
        procs.append(p)
        return "http://127.0.0.1:%d" % port

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def query(base, expr):
    url = "%s/api/v1/query?query=%s" % (base, urllib.parse.quote(expr))
    try:
        _, _, body = get(url)
    except OSError:
        return None
    res = json.loads(body)
    if res.get("status") != "success" or not res["data"]["result"]:
        return None
    return float(res["data"]["result"][0]["value"][1])


def test_prometheus_scrapes_echofs(nginx, mounter, prometheus):
    port = free_port()
    m = mounter(source_of(nginx.url, "test"), opts={"index": nginx.test_index,
                                                     "metrics": "127.0.0.1:%d" % port})
    base = prometheus("127.0.0.1:%d" % port)
    for cls in ("0", "1"):
        for name in sorted(os.listdir(m.path(cls)))[:20]:
            with open(m.path(cls, name), "rb") as f:
                f.read()
    deadline = time.monotonic() + 60
    got = {}
    while time.monotonic() < deadline:
        got = {e: query(base, e) for e in
               ('up{job="echofs"}', "echofs_samples", "echofs_classes",
                "process_resident_memory_bytes", "echofs_shards_cached")}
        if None not in got.values() and got["echofs_shards_cached"] >= 1:
            break
        time.sleep(0.2)
    assert got['up{job="echofs"}'] == 1, got
    assert got["echofs_samples"] == 10000, got
    assert got["echofs_classes"] == 10, got
    assert got["process_resident_memory_bytes"] > 1e6, got
    assert got["echofs_shards_cached"] >= 1, got
