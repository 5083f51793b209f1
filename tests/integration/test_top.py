"""test_top.py - echofs-top: its stats.prom parser and rates on handwritten
files in a plain directory (no FUSE needed: the tool only reads files), its
errors and options, and a live echo mount and exact mount read under load."""

import itertools
import os
import random
import re
import subprocess
import threading
import time

import pytest

import helpers

TOP = os.path.join(helpers.BUILD, "tools", "echofs-top")
THROTTLE = "*.tar=slow:200000"  # as in test_echo.py: echoing has work to do

A = """# HELP echofs_uptime_s seconds since mount
# TYPE echofs_uptime_s gauge
echofs_uptime_s 10
echofs_echo 2
echofs_pass 1
echofs_fresh_served 100
echofs_echoes_served 50
echofs_effective_echo 1.5
echofs_stall_s 1
echofs_bytes_fetched 1000000
echofs_cache_hits 10
echofs_cache_misses 4
echofs_pool_bytes 1000000
echofs_errors_total{kind="http_5xx"} 1
echofs_errors_total{kind="read"} 0
echofs_ready{class="T-shirt"} 5
echofs_ready{class="Ankle boot"} 6
"""

# Two seconds later by the mount's clock (uptime_s), whatever the wall time.
B = """echofs_uptime_s 12
echofs_echo 2
echofs_pass 2
echofs_fresh_served 300
echofs_echoes_served 250
echofs_effective_echo 1.83
echofs_stall_s 4
echofs_bytes_fetched 5000000
echofs_cache_hits 30
echofs_cache_misses 4
echofs_pool_bytes 3500000
echofs_pool_samples 700
echofs_errors_total{kind="http_5xx"} 3
echofs_errors_total{kind="read"} 1
echofs_ready{class="T-shirt"} 17
echofs_ready{class="Ankle boot"} 0
other_exporter_metric 42
"""

EXACT = """echofs_uptime_s 5
echofs_bytes_fetched 0
echofs_cache_hits 0
echofs_reads 0
echofs_errors_total{kind="http_5xx"} 0
"""

EXACT2 = """echofs_uptime_s 6
echofs_bytes_fetched 3000000
echofs_cache_hits 250
echofs_reads 500
echofs_errors_total{kind="http_5xx"} 0
"""


@pytest.fixture(autouse=True)
def require_top():
    if not os.access(TOP, os.X_OK):
        pytest.fail("%s missing: build it (ECHOFS_BUILD=%s)" % (TOP, helpers.BUILD))


def run_top(*args, timeout=30):
    return subprocess.run([TOP] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def field(out, label):
    """The value printed after label (a number, or None for "-")."""
    m = re.search(r"(?m)(?:^|   )%s +(-|[0-9.]+)" % re.escape(label), out)
    assert m, "no %r in output:\n%s" % (label, out)
    return None if m.group(1) == "-" else float(m.group(1))


def fake_top(tmp_path, first, second, *args):
    """Run --once on a plain directory whose .echofs/stats.prom is a FIFO
    that serves `first` to the first read and `second` to the next one."""
    ctl = tmp_path / "fake" / ".echofs"
    ctl.mkdir(parents=True)
    fifo = str(ctl / "stats.prom")
    os.mkfifo(fifo)
    proc = subprocess.Popen([TOP, "--once", "-d", "0.5"] + list(args) +
                            [str(tmp_path / "fake")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        for text in (first, second):
            with open(fifo, "w") as f:  # blocks until the tool opens it
                f.write(text)
            time.sleep(0.2)  # let the reader see EOF before the next writer
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "\033" not in out, "--once printed terminal control codes"
    return out


def test_rates_from_two_reads(tmp_path):
    out = fake_top(tmp_path, A, B)
    assert "echo mount, E 2" in out
    assert "interval 2.00 s" in out  # the mount's clock, not the wall clock
    expect = {"fresh/s": 100, "echoes/s": 100, "opens/s": 200,
              "fetch MB/s": 2.0, "stall %": 150,  # 3 s waited in 2 s
              "effective e": 1.83, "interval e": 2.0, "pass": 2,
              "pool MB": 3.5, "pool samples": 700, "cache hits/s": 10,
              "misses/s": 0, "errors": 4, "new errors": 3}
    for label, want in expect.items():
        assert field(out, label) == pytest.approx(want), (label, out)
    assert "+2 http_5xx" in out and "+1 read" in out
    assert re.search(r"(?m)^T-shirt +17$", out), out
    assert re.search(r"(?m)^Ankle boot +0$", out), out
    assert field(out, "reads/s") is None  # not in the file: "-", not 0
    assert "malformed" not in out


def test_exact_mount_shows_fetch_and_cache(tmp_path):
    out = fake_top(tmp_path, EXACT, EXACT2)
    assert "exact mount" in out
    assert "fresh/s" not in out and "class" not in out
    assert field(out, "fetch MB/s") == pytest.approx(3.0)
    assert field(out, "cache hits/s") == pytest.approx(250)
    assert field(out, "reads/s") == pytest.approx(500)


BAD_LINES = [
    "echofs_fresh_served 12abc",        # trailing garbage
    "echofs_echoes_served",             # no value
    "echofs_stall_s nan",               # not finite
    "echofs_cache_hits 1e999",          # overflows
    "echofs_pass\t",                    # blank value
    'echofs_ready{class="x" 3',         # unclosed label
    "echofs_ 1",                        # empty name
]


def test_strict_parser_counts_malformed_lines(tmp_path):
    ignored = ['echofs_other{x="y"} 3', "node_load1 0.5", "# echofs_pass zzz", ""]
    second = "\n".join(["echofs_uptime_s 11", "echofs_echo 2",
                        "echofs_effective_echo 1.5\r"] + BAD_LINES + ignored) + "\n"
    out = fake_top(tmp_path, A, second)
    assert "warning: %d malformed line(s)" % len(BAD_LINES) in out, out
    for label in ("fresh/s", "echoes/s", "stall %", "cache hits/s", "pass"):
        assert field(out, label) is None, (label, out)
    assert field(out, "effective e") == pytest.approx(1.5)  # CRLF accepted
    assert "class" in out and not re.search(r"(?m)^x ", out)


def test_counter_reset_shows_no_rate(tmp_path):
    restarted = B.replace("echofs_uptime_s 12", "echofs_uptime_s 1").replace(
        "echofs_fresh_served 300", "echofs_fresh_served 7")
    out = fake_top(tmp_path, A, restarted)
    assert field(out, "fresh/s") is None, out


def test_not_an_echofs_mount(tmp_path):
    r = run_top("--once", tmp_path)
    assert r.returncode == 1
    assert "not an echofs mount" in r.stderr and str(tmp_path) in r.stderr
    assert r.stdout == ""
    (tmp_path / ".echofs").mkdir()
    (tmp_path / ".echofs" / "stats.prom").write_text("# nothing\nfoo 1\n")
    r = run_top("--once", tmp_path)
    assert r.returncode == 1 and "not an echofs mount" in r.stderr
    r = run_top("--once", tmp_path / "missing")
    assert r.returncode == 1 and "No such file or directory" in r.stderr


@pytest.mark.parametrize("args,status,msg", [
    (["-d", "0"], 1, "bad -d"),
    (["-d", "1x"], 1, "bad -d"),
    (["-d", "inf"], 1, "bad -d"),
    (["-n", "0"], 1, "bad -n"),
    (["-n", "-3"], 1, "bad -n"),
    (["--bogus"], 2, "usage"),
    ([], 2, "usage"),
])
def test_bad_arguments(tmp_path, args, status, msg):
    extra = [tmp_path] if args else []
    r = run_top(*(args + extra))
    assert r.returncode == status, r.stderr
    assert msg in r.stderr


def test_help_and_version():
    r = run_top("-h")
    assert r.returncode == 0 and "usage: echofs-top" in r.stdout
    assert "stall %" in r.stdout
    r = run_top("-V")
    assert r.returncode == 0 and re.match(r"echofs-top \d+\.\d+", r.stdout)


class Reader(threading.Thread):
    """Reads files of the mount, in a shuffled cycle, until stopped."""

    def __init__(self, root):
        super().__init__(daemon=True)
        self.paths = sorted(helpers.list_paths(root))
        random.Random(3).shuffle(self.paths)
        self.root = root
        self.done = 0
        self.error = None
        self.stop = threading.Event()

    def run(self):
        try:
            for rel in itertools.cycle(self.paths):
                if self.stop.is_set():
                    return
                with open(os.path.join(self.root, rel), "rb") as f:
                    f.read()
                self.done += 1
        except OSError as e:
            self.error = e


def wait_for(pred, timeout=30):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def top_under_load(m, *args):
    reader = Reader(m.mnt)
    reader.start()
    try:
        wait_for(lambda: reader.done >= 20 or reader.error or not reader.is_alive())
        r = run_top("--once", "-d", "1", *args, m.mnt)
    finally:
        reader.stop.set()
        reader.join(30)
    print(r.stdout)  # shown when the test fails
    assert reader.error is None, reader.error
    assert r.returncode == 0, r.stderr
    assert "\033" not in r.stdout
    return r.stdout, reader


def test_live_echo_mount(mounter, fault_server):
    fault_server.set_faults(THROTTLE)
    m = mounter(fault_server.source,
                opts={"index": fault_server.index, "echo": 2, "seed": 7})
    out, reader = top_under_load(m)
    assert reader.done > 20
    assert "echo mount, E 2" in out
    for label in ("fresh/s", "echoes/s", "opens/s", "fetch MB/s", "stall %",
                  "effective e", "interval e", "pass", "pool MB",
                  "cache hits/s", "misses/s", "errors", "new errors"):
        assert field(out, label) is not None, (label, out)
    assert field(out, "fresh/s") > 0, out
    assert field(out, "opens/s") >= field(out, "fresh/s")
    assert field(out, "effective e") <= 2.0 + 1e-9
    assert field(out, "errors") == 0, out
    classes = set(os.listdir(m.mnt)) - {".echofs"}
    ready = set(re.findall(r"(?m)^(.+?) +\d+$", out.split("\nclass", 1)[1]))
    assert ready == classes, out


def test_live_exact_mount(mounter, fault_server):
    m = mounter(fault_server.source, opts={"index": fault_server.index})
    out, reader = top_under_load(m, "-n", "5")  # --once wins over -n
    assert out.count("echofs-top - ") == 1, out
    assert "exact mount" in out and "fresh/s" not in out
    # Most reads of an exact mount end in the kernel's page cache, so
    # either figure may be the one that moves.
    assert field(out, "reads/s") + field(out, "cache hits/s") > 0, out
    assert field(out, "fetch MB/s") is not None
