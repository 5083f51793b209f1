#!/usr/bin/python3
"""soak.py - a long soak of echofs under combined faults (run by soak.sh).

Four mounts share one cache_dir on a small tmpfs (smaller than the data):
an exact one, an echo one (adaptive, size=32,format=ppm) and a rank/world
one read Fashion-MNIST train shards (echofs-pack) from the project's fault
server (tests/fault_server.py); an S3 one (--creds-life > 0) reads the first
10 from s3rver behind tests/s3/gateway.py with credentials from
soak_creds.py that expire every --creds-life seconds. 64 reader threads
read random files while a fault injector cycles through its windows:

  5xx       every shard GET answered 503
  reset     bodies cut after 64 KiB (the connection closed mid-body)
  trickle   shard bodies sent at 1 B/s
  stopped   the server process stopped for 20 s, then started again
  lie_range Range replies whose Content-Range is one byte off
  enospc    the cache tmpfs filled by a ballast file
  kill9     kill -9 of the rank mount's daemon, then a new mount
  clock     the machine's CLOCK_REALTIME stepped +1 h, then to -1 h, then
            back (root; restored from CLOCK_MONOTONIC, see Clock)

each followed by a quiet window. Recorded: files read, wrong bytes (exact and
rank mounts: sha256 against the packed tree; echo mount: a PPM of the right
size whose source, from user.echofs.source, is a sample of the class read),
errors per window and mount, the longest read, RSS and fds of each daemon
every 10 s, unexpected daemon deaths, and the largest cache size sampled
against cache_size. Prints a table and writes a JSON.
"""

import argparse
import collections
import errno
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402

FAULT_SERVER = os.path.join(REPO, "tests", "fault_server.py")
PY = "/usr/bin/python3"
NSHARDS = 60
# "clock" steps the clock of the whole machine (clock_settime as root):
# libfaketime 0.9.10 (Debian 12), preloaded, makes CLOCK_MONOTONIC condition
# waits time out early even at offset +0 (fixed upstream after it), so every
# read deadline failed at once, and a time namespace (unshare --time) offsets
# only MONOTONIC and BOOTTIME. The real step is what a node sees when NTP
# corrects a bad clock; the credential server and the S3 gateway live on the
# same clock, as a real node's would not, so expiry is still exercised by
# --creds-life.
FAULTS = ["5xx", "reset", "trickle", "stopped", "lie_range", "enospc",
          "kill9", "clock"]
RULES = {"5xx": ["*.tar=status:503"], "reset": ["*.tar=truncate:65536"],
         "trickle": ["*.tar=slow:1"], "lie_range": ["*.tar=lie-range"]}


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


# ---- the server -------------------------------------------------------------

class Server:
    """tests/fault_server.py over the shards, restartable on one port."""

    def __init__(self, root, work):
        self.root, self.work, self.port = root, work, 0
        self.proc = None
        self.start()

    def start(self):
        pf = os.path.join(self.work, "server.port")
        with open(os.path.join(self.work, "server.log"), "a") as out:
            self.proc, self.port = benchlib.start_port_file_server(
                [PY, FAULT_SERVER, "--root", self.root, "--port",
                 str(self.port), "--port-file", pf], pf, out,
                what="fault server")
        self.url = "http://127.0.0.1:%d" % self.port

    def faults(self, rules):
        for _ in range(5):
            try:
                benchlib_put(self.url + "/_faults", "\n".join(rules))
                return
            except OSError:
                time.sleep(1)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def benchlib_put(url, body):
    import urllib.request
    req = urllib.request.Request(url, data=body.encode(), method="PUT")
    with urllib.request.urlopen(req, timeout=10) as r:
        r.read()


# ---- the S3 stack: s3rver behind the verifying gateway -------------------

S3DIR = os.path.join(REPO, "tests", "s3")
S3RVER = os.path.join(S3DIR, "node_modules", "s3rver", "bin", "s3rver.js")
S3_SHARDS = 10


class S3:
    """s3rver with the first S3_SHARDS train shards in bucket dset, behind
    tests/s3/gateway.py, which checks every signature and the expiry of the
    keys soak_creds.py registers."""

    def __init__(self, www, work):
        import botocore.config
        import botocore.session
        self.work = work
        self.keys = os.path.join(work, "s3keys.json")
        with open(self.keys, "w") as f:
            f.write("{}")
        port = benchlib.free_port()
        err = open(os.path.join(work, "s3rver.err"), "w")
        self.s3rver = subprocess.Popen(
            ["node", S3RVER, "-d", os.path.join(work, "s3data"), "-a",
             "127.0.0.1", "-p", str(port), "--silent"],
            env=dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider"),
            stdout=subprocess.DEVNULL, stderr=err)
        self.gateway = None
        benchlib.wait_port(port, self.s3rver, "s3rver")
        c = botocore.session.get_session().create_client(
            "s3", region_name="us-east-1", endpoint_url="http://127.0.0.1:%d" % port,
            aws_access_key_id="S3RVER", aws_secret_access_key="S3RVER",
            config=botocore.config.Config(s3={"addressing_style": "path"}))
        c.create_bucket(Bucket="dset")
        for i in range(S3_SHARDS):
            name = "train-%06d.tar" % i
            with open(os.path.join(www, "train", name), "rb") as f:
                c.put_object(Bucket="dset", Key="train/" + name, Body=f.read())
        self.port = benchlib.free_port()
        self.log = os.path.join(work, "gateway.log")
        self.gateway = subprocess.Popen(
            [PY, os.path.join(S3DIR, "gateway.py"), "--upstream",
             "http://127.0.0.1:%d" % port, "--keys", self.keys, "--port",
             str(self.port), "--log", self.log],
            stdout=subprocess.DEVNULL, stderr=err)
        benchlib.wait_port(self.port, self.gateway, "gateway")
        self.url = "http://127.0.0.1:%d" % self.port

    def env(self, life):
        """The environment of a mount whose only AWS credentials come from
        soak_creds.py (credential_process), each set living `life` s."""
        cfg = os.path.join(self.work, "aws-config")
        with open(os.open(cfg, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write("[default]\nregion = us-east-1\ncredential_process = %s %s %s %g\n"
                    % (PY, os.path.join(HERE, "soak_creds.py"), self.keys, life))
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_CONFIG_FILE=cfg, AWS_EC2_METADATA_DISABLED="true",
                   AWS_SHARED_CREDENTIALS_FILE=os.path.join(self.work, "none"))
        return env

    def verdicts(self):
        c = collections.Counter()
        try:
            with open(self.log) as f:
                for line in f:
                    try:
                        c[json.loads(line)["verdict"]] += 1
                    except ValueError:
                        pass
        except OSError:
            pass
        return dict(c)

    def issued(self):
        try:
            return int(open(self.keys + ".n").read())
        except (OSError, ValueError):
            return 0

    def stop(self):
        for p in (self.gateway, self.s3rver):
            if p and p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


# ---- mounts -----------------------------------------------------------------

class Mount:
    def __init__(self, name, work, source, opts, env):
        self.name, self.source, self.env = name, source, env
        self.mnt = os.path.join(work, name)
        self.log_file = os.path.join(work, "logs", name + ".log")
        self.opts = opts
        self.pid = None
        self.files = []
        self.restarts = 0
        self.killed = False  # a deliberate kill in progress
        os.makedirs(self.mnt, exist_ok=True)

    def start(self, echofs):
        o = dict(self.opts, log_file=self.log_file, log_level="info")
        optstr = ",".join("%s=%s" % kv for kv in o.items())
        r = subprocess.run([echofs, "-o", optstr, self.source, self.mnt],
                           capture_output=True, text=True, env=self.env,
                           timeout=600, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise RuntimeError("mount %s failed: %s" % (self.name, r.stderr))
        self.pid = find_pid(self.mnt)
        if not self.files:
            self.files = sorted(
                (c, n) for c in os.listdir(self.mnt) if not c.startswith(".")
                for n in os.listdir(os.path.join(self.mnt, c)))

    def alive(self):
        return self.pid is not None and os.path.exists("/proc/%d" % self.pid)

    def umount(self):
        for _ in range(20):
            if subprocess.run(["fusermount3", "-u", self.mnt],
                              capture_output=True).returncode == 0:
                break
            time.sleep(0.5)
        else:
            subprocess.run(["fusermount3", "-uz", self.mnt], capture_output=True)
        for _ in range(100):
            if not self.alive():
                return
            time.sleep(0.1)

    def stats(self):
        return benchlib.read_stats(self.mnt)


def find_pid(mnt):
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"echofs" and mnt.encode() in argv:
            return int(pid)
    return None


def proc_rss_fds(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
        return rss * 1024, len(os.listdir("/proc/%d/fd" % pid))
    except (OSError, StopIteration):
        return None, None


# ---- the run's shared record ------------------------------------------------

class Record:
    def __init__(self):
        self.lock = threading.Lock()
        self.window = "start"
        self.reads = collections.Counter()        # mount -> files read
        self.wrong = collections.Counter()        # mount -> wrong files
        self.wrong_examples = []
        self.errors = collections.defaultdict(collections.Counter)  # window -> "mount errno"
        self.err_files = collections.defaultdict(set)  # window -> failed paths
        self.timeline = collections.defaultdict(collections.Counter)  # second -> mount
        self.t0 = time.monotonic()
        self.win_reads = collections.Counter()    # window -> reads
        self.longest = (0.0, None)
        self.samples = []                         # RSS/fd/cache every 10 s
        self.deaths = []
        self.cache_max = 0
        self.cache_samples = 0
        self.windows = []                         # (name, t0, t1)

    def read_done(self, mount, secs, path, ok, calls):
        with self.lock:
            self.reads[mount] += 1
            self.win_reads[self.window] += 1
            if not ok:
                self.wrong[mount] += 1
                if len(self.wrong_examples) < 20:
                    self.wrong_examples.append(path)
            if secs > self.longest[0]:
                self.longest = (secs, "%s (%s window; longest call: %s)" % (
                    path, self.window, ", ".join(
                        "%s %.2f s" % kv for kv in sorted(calls.items()))))

    def error(self, mount, err, path):
        with self.lock:
            self.errors[self.window]["%s %s" % (mount, errno.errorcode.get(err, err))] += 1
            self.err_files[self.window].add(path)
            self.timeline[int(time.monotonic() - self.t0)][mount] += 1


# ---- readers ----------------------------------------------------------------

def read_file(path, calls):
    """The file's bytes and its user.echofs.source; calls gets the longest
    time each system call took ("open", "read", "getxattr")."""
    t = time.monotonic()
    fd = os.open(path, os.O_RDONLY)
    calls["open"] = time.monotonic() - t
    try:
        chunks = []
        while True:
            t = time.monotonic()
            b = os.read(fd, 1 << 20)
            calls["read"] = max(calls.get("read", 0), time.monotonic() - t)
            if not b:
                break
            chunks.append(b)
        src = None
        t = time.monotonic()
        try:
            src = os.getxattr(fd, "user.echofs.source").decode()
        except OSError:
            pass
        calls["getxattr"] = time.monotonic() - t
        return b"".join(chunks), src
    finally:
        os.close(fd)


def ppm_ok(data):
    parts = data.split(b"\n", 3)
    if len(parts) < 4 or parts[0] != b"P6" or parts[2] != b"255":
        return False
    w, h = (int(x) for x in parts[1].split())
    return len(parts[3]) == w * h * 3 and min(w, h) == 32


def reader(m, ref, refkeys, rec, stop, seed):
    rnd = random.Random(seed)
    while not stop.is_set():
        if not m.files:
            time.sleep(1)
            continue
        cls, name = rnd.choice(m.files)
        path = os.path.join(m.mnt, cls, name)
        t0 = time.monotonic()
        calls = {}
        try:
            data, src = read_file(path, calls)
        except OSError as e:
            rec.error(m.name, e.errno or errno.EIO, path)
            if e.errno in (errno.ENOTCONN, errno.ENOENT):
                time.sleep(0.2)  # the mount is being restarted
            continue
        secs = time.monotonic() - t0
        if m.name == "echo":
            ok = ppm_ok(data) and src is not None and src in refkeys.get(cls, ())
        else:
            want = ref.get((cls, name))
            ok = want is not None and hashlib.sha256(data).hexdigest() == want
        rec.read_done(m.name, secs, path, ok, calls)


def load_ref(ref_dir):
    """{(class, file): sha256} of the packed tree and {class: {key}}."""
    ref, keys = {}, collections.defaultdict(set)
    for cls in os.listdir(ref_dir):
        for n in os.listdir(os.path.join(ref_dir, cls)):
            with open(os.path.join(ref_dir, cls, n), "rb") as f:
                ref[(cls, n)] = hashlib.sha256(f.read()).hexdigest()
            keys[cls].add(n.rsplit(".", 1)[0])
    return ref, keys


# ---- faults -----------------------------------------------------------------

class Clock:
    """Steps CLOCK_REALTIME by whole offsets and always puts it back: the
    true time is the real time at the first step plus the monotonic time
    since, so a restore is exact however long a step held."""

    def __init__(self):
        self.base = None
        self.lock = threading.Lock()

    def step(self, offset_s):
        with self.lock:
            if self.base is None:
                self.base = (time.clock_gettime(time.CLOCK_REALTIME),
                             time.monotonic())
            real0, mono0 = self.base
            true_now = real0 + (time.monotonic() - mono0)
            time.clock_settime(time.CLOCK_REALTIME, true_now + offset_s)
            if offset_s == 0:
                self.base = None

    def restore(self):
        if self.base is not None:
            self.step(0)


def fill_ballast(path):
    try:
        with open(path, "wb") as f:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise


def run_fault(name, secs, ctx, stop):
    srv, rec = ctx["server"], ctx["rec"]
    if name in RULES:
        srv.faults(RULES[name])
        stop.wait(secs)
        srv.faults([])
    elif name == "stopped":
        srv.stop()
        stop.wait(20)
        srv.start()
        stop.wait(max(0, secs - 20))
    elif name == "enospc":
        fill_ballast(ctx["ballast"])
        stop.wait(secs)
        os.unlink(ctx["ballast"])
    elif name == "kill9":
        m = ctx["victim"]
        m.killed = True
        os.kill(m.pid, signal.SIGKILL)
        time.sleep(1)
        subprocess.run(["fusermount3", "-uz", m.mnt], capture_output=True)
        stop.wait(3)
        for attempt in range(10):
            try:
                m.start(ctx["echofs"])
                break
            except RuntimeError as e:
                log("restart of %s failed: %s" % (m.name, e))
                time.sleep(5)
        m.restarts += 1
        m.killed = False
        stop.wait(max(0, secs - 5))
    elif name == "clock":
        clock = ctx["clock"]
        try:
            clock.step(3600)
            log("clock stepped +1 h")
            stop.wait(secs / 2)
            clock.step(-3600)
            log("clock stepped -1 h")
            stop.wait(secs / 2)
        finally:
            clock.restore()
            log("clock restored")
    with rec.lock:
        pass


def injector(ctx, seconds, stop):
    rec = ctx["rec"]
    # a fault window and a quiet window after each, filling the run
    win = max(20.0, seconds / (2 * len(FAULTS)))
    t_end = time.monotonic() + seconds
    i = 0
    while not stop.is_set() and time.monotonic() < t_end:
        fault = FAULTS[i % len(FAULTS)]
        for name in (fault, "quiet after " + fault):
            if stop.is_set() or time.monotonic() >= t_end:
                break
            secs = min(win, max(1.0, t_end - time.monotonic()))
            if name == "stopped":
                secs = max(secs, 20.0)
            with rec.lock:
                rec.window = name
            t0 = time.monotonic()
            log("window %s (%.0f s)" % (name, secs))
            if name.startswith("quiet"):
                stop.wait(secs)
            else:
                run_fault(name, secs, ctx, stop)
            rec.windows.append((name, t0 - rec.t0, time.monotonic() - rec.t0))
        i += 1
    with rec.lock:
        rec.window = "end"
    stop.set()


def sampler(ctx, stop):
    rec, mounts = ctx["rec"], ctx["mounts"]
    last = 0.0
    while not stop.is_set():
        c = benchlib.cache_bytes(ctx["cache_dir"])
        with rec.lock:
            rec.cache_max = max(rec.cache_max, c)
            rec.cache_samples += 1
        now = time.monotonic()
        if now - last >= 10:
            last = now
            row = {"t": round(now - ctx["t0"], 1), "window": rec.window,
                   "cache": c}
            for m in mounts:
                if not m.alive() and not m.killed:
                    rec.deaths.append((round(now - ctx["t0"]), m.name))
                    log("daemon of %s died: restarting" % m.name)
                    subprocess.run(["fusermount3", "-uz", m.mnt], capture_output=True)
                    try:
                        m.start(ctx["echofs"])
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        log("restart failed: %s" % e)
                    m.restarts += 1
                rss, fds = proc_rss_fds(m.pid) if m.pid else (None, None)
                row[m.name] = {"rss": rss, "fds": fds}
            rec.samples.append(row)
        stop.wait(1)


# ---- report -----------------------------------------------------------------

def growth(samples, name, key, after):
    vals = [s[name][key] for s in samples if s["t"] >= after and s[name][key]]
    if not vals:
        return None
    return {"first": vals[0], "max": max(vals), "last": vals[-1]}


def window_rows(rec):
    """One row per window in order: its errors per mount (from the per
    second timeline) and when, from its start, its last error came."""
    rows = []
    for name, a, b in rec.windows:
        errs, last = collections.Counter(), None
        # a second belongs to the window it started in
        for sec in range(int(a), int(b)):
            if rec.timeline.get(sec):
                errs.update(rec.timeline[sec])
                last = sec - int(a)
        rows.append({"window": name, "from": round(a), "to": round(b),
                     "errors": dict(errs), "last_error_at": last})
    return rows


def report(ctx, args, out):
    rec, mounts = ctx["rec"], ctx["mounts"]
    warm = args.minutes * 60 / 4  # "after the first pass": the last 3/4
    cap = parse_size(args.cache_size)
    over = sum(1 for x in rec.samples if x["cache"] > cap)
    rows = window_rows(rec)
    res = {
        "minutes": args.minutes, "readers": args.readers,
        "cache_size": args.cache_size, "tmpfs": args.tmpfs,
        "files_read": dict(rec.reads), "wrong": dict(rec.wrong),
        "wrong_examples": rec.wrong_examples,
        "errors_by_window": {w: dict(c) for w, c in rec.errors.items()},
        "files_failed_by_window": {w: len(f) for w, f in rec.err_files.items()},
        "reads_by_window": dict(rec.win_reads),
        "windows": rows,
        "longest_read_s": round(rec.longest[0], 2),
        "longest_read": rec.longest[1],
        "deaths": rec.deaths,
        "restarts": {m.name: m.restarts for m in mounts},
        "cache_cap": cap, "cache_max": rec.cache_max,
        "cache_samples": rec.cache_samples, "cache_over_cap_samples": over,
        "growth_after_warmup": {m.name: {
            "rss": growth(rec.samples, m.name, "rss", warm),
            "fds": growth(rec.samples, m.name, "fds", warm)} for m in mounts},
        "samples": rec.samples,
        "stats": ctx.get("stats", {}),
        "logged": ctx.get("logged", {}),
        "loadavg": ctx.get("loadavg"),
        "s3_credentials_issued": ctx.get("s3_issued"),
        "s3_gateway_verdicts": ctx.get("s3_verdicts"),
    }
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    print()
    print("soak: %g min, %d readers, cache_size %s on a %s tmpfs"
          % (args.minutes, args.readers, args.cache_size, args.tmpfs))
    print("%-10s %10s %8s %9s" % ("mount", "files", "wrong", "restarts"))
    for m in mounts:
        print("%-10s %10d %8d %9d" % (m.name, rec.reads[m.name],
                                      rec.wrong[m.name], m.restarts))
    print("unexpected daemon deaths: %d %s" % (len(rec.deaths), rec.deaths or ""))
    print("longest read: %.2f s: %s" % rec.longest)
    print("cache: max %.1f MiB of cap %.1f MiB; %d of %d samples over it"
          % (rec.cache_max / 2**20, cap / 2**20, over, len(rec.samples)))
    print("%-22s %8s %8s  %s" % ("window (all of a kind)", "reads", "files",
                                 "failed reads (mount errno: n)"))
    for w in sorted(set(rec.win_reads) | set(rec.errors)):
        e = ", ".join("%s: %d" % kv for kv in sorted(rec.errors[w].items()))
        print("%-22s %8d %8d  %s" % (w, rec.win_reads[w], len(rec.err_files[w]),
                                     e or "-"))
    print("each window: from-to s, failed reads per mount, last error at +s")
    for r in rows:
        print("  %-22s %5d-%-5d %-40s %s" % (
            r["window"], r["from"], r["to"],
            ", ".join("%s %d" % kv for kv in sorted(r["errors"].items())) or "-",
            "" if r["last_error_at"] is None else "+%d" % r["last_error_at"]))
    print("RSS/fds after the first quarter (first -> max, last):")
    for m in mounts:
        g = res["growth_after_warmup"][m.name]
        if g["rss"]:
            print("  %-8s RSS %.1f -> %.1f, %.1f MB; fds %d -> %d, %d" % (
                m.name, g["rss"]["first"] / 1e6, g["rss"]["max"] / 1e6,
                g["rss"]["last"] / 1e6, g["fds"]["first"], g["fds"]["max"],
                g["fds"]["last"]))
    print("counted errors: stats at the end / accounted for by the log:")
    for name, st in (ctx.get("stats") or {}).items():
        lg = ctx.get("logged", {}).get(name, {})
        print("  %-8s %s" % (name, ", ".join(
            "%s %d/%d" % (k, v, lg.get(k, 0)) for k, v in sorted((st or {}).items()) if v)
            or "-"))
    if ctx.get("s3_verdicts") is not None:
        print("s3: %d credential sets issued (life %g s); gateway verdicts %s"
              % (ctx["s3_issued"], args.creds_life, ctx["s3_verdicts"]))
    print("load average at the end: %s" % ctx.get("loadavg"))
    print("JSON: %s" % out)


def logged_counts(path):
    """Counted errors the log accounts for, per kind: a line each, plus the
    count of each "N more since the last"."""
    c = collections.Counter()
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return {}
    for m in re.finditer(r"warn: (.*)\[(\w+)(?:, (\d+) more since the last)?\]$",
                         text, re.M):
        c[m.group(2)] += (1 if m.group(1) else 0) + int(m.group(3) or 0)
    return dict(c)


# ---- main -------------------------------------------------------------------

def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--readers", type=int, default=64)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--data", required=True, help="packed shards and tree")
    ap.add_argument("--work", required=True)
    ap.add_argument("--cache-size", default="40M")
    ap.add_argument("--tmpfs", default="64M")
    ap.add_argument("--json", required=True)
    ap.add_argument("--creds-life", type=float, default=60,
                    help="seconds each S3 credential set lives (0: no S3 mount)")
    ap.add_argument("--faults", default=",".join(FAULTS),
                    help="the fault windows in order (default: all)")
    args = ap.parse_args()
    FAULTS[:] = [f for f in args.faults.split(",") if f]

    echofs = os.path.join(args.build, "echofs")
    www, ref_dir = os.path.join(args.data, "www"), os.path.join(args.data, "ref", "train")
    work = args.work
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)
    cachefs = os.path.join(work, "cachefs")
    os.makedirs(cachefs, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + args.tmpfs,
                    "tmpfs", cachefs], check=True)
    cache_dir = os.path.join(cachefs, "cache")
    os.makedirs(cache_dir, exist_ok=True)
    env = dict(os.environ)
    clock = Clock()
    # the clock goes back whatever ends the soak (kill -9 of this script
    # cannot be caught: then `date -s` by hand)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))

    rec = Record()
    ctx = {"rec": rec, "echofs": echofs, "cache_dir": cache_dir,
           "ballast": os.path.join(cachefs, "ballast"), "clock": clock}
    server = Server(www, work)
    ctx["server"] = server
    mounts = []
    s3 = None
    stop = threading.Event()
    threads = []
    try:
        log("indexing through %s" % server.url)
        src = "%s/train/train-{000000..%06d}.tar" % (server.url, NSHARDS - 1)
        subprocess.run([os.path.join(args.build, "tools", "echofs-index"), "-o",
                        os.path.join(www, "train", "train.echofs-index"), src],
                       check=True, capture_output=True)
        log("hashing the reference tree")
        ref, refkeys = load_ref(ref_dir)
        common = {"cache_dir": cache_dir, "cache_size": args.cache_size}
        mounts = [
            Mount("exact", work, src, dict(common), env),
            Mount("echo", work, src, dict(common, echo=4, echo_mode="adaptive",
                                         size=32, format="ppm"), env),
            Mount("rank", work, src, dict(common, rank=1, world=3), env),
        ]
        if args.creds_life > 0:
            log("starting s3rver and the gateway")
            s3 = S3(www, work)
            ctx["s3"] = s3
            mounts.append(Mount(
                "s3", work, "s3://dset/train/train-{000000..%06d}.tar" % (S3_SHARDS - 1),
                dict(common, endpoint=s3.url), s3.env(args.creds_life)))
        for m in mounts:
            log("mounting %s" % m.name)
            m.start(echofs)
        ctx["mounts"], ctx["victim"] = mounts, mounts[2]
        ctx["t0"] = rec.t0 = time.monotonic()
        per = {"exact": 0.35, "echo": 0.25, "rank": 0.25, "s3": 0.15}
        n = {m.name: max(1, int(args.readers * per[m.name])) for m in mounts}
        n["exact"] += args.readers - sum(n.values())
        k = 0
        for m in mounts:
            for _ in range(n[m.name]):
                threads.append(threading.Thread(
                    target=reader, args=(m, ref, refkeys, rec, stop, k), daemon=True))
                k += 1
        threads.append(threading.Thread(target=sampler, args=(ctx, stop), daemon=True))
        for t in threads:
            t.start()
        log("%d readers, %s" % (args.readers, n))
        injector(ctx, args.minutes * 60, stop)
        for t in threads:
            t.join(120)
        with open("/proc/loadavg") as f:
            ctx["loadavg"] = " ".join(f.read().split()[:3])
        ctx["stats"] = {m.name: (m.stats() or {}).get("errors") for m in mounts}
    finally:
        stop.set()
        clock.restore()
        server.faults([])
        for m in mounts:
            m.umount()
        server.stop()
        if s3:
            ctx["s3_verdicts"], ctx["s3_issued"] = s3.verdicts(), s3.issued()
            s3.stop()
        subprocess.run(["umount", "-l", cachefs], capture_output=True)
    ctx["logged"] = {m.name: logged_counts(m.log_file) for m in mounts}
    report(ctx, args, args.json)
    bad = sum(rec.wrong.values()) + len(rec.deaths)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
