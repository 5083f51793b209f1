#!/usr/bin/python3
"""bench_s3.py - what S3 costs: cold epochs of the same 60 shards (Fashion-
MNIST train, 60,000 files) over plain HTTP and as s3:// with SigV4 on every
request, side by side, and the time from command to ready tree for an
s3://B/PREFIX/ source over --keys objects. Run through bench_s3.sh.

Cold-epoch modes, alternated within each round, a fresh cache each mount:
  http        nginx, plain URLs
  s3-nginx    s3:// signed (credentials from the environment), sent to the
              same nginx (path-style endpoint; nginx ignores the headers):
              the difference to http is signing and credential work only
  s3-relay    s3:// through tests/s3/gateway.py --no-verify to s3rver: the
              Python relay and s3rver, nothing checked
  s3-verify   s3:// through the verifying gateway (botocore recomputes every
              signature) to s3rver: the stand-in of the tests
Each reports files/s (bench_reader.py, median over --runs) and the echofs
daemon's CPU seconds for the epoch (utime + stime of /proc/PID/stat).

Listing: bucket "list", prefix big/: the 60 shards plus --keys minus 60
two-byte .json objects written straight into s3rver's directory store (its
FilesystemStore layout: KEY._S3rver_object and KEY._S3rver_object.md5), and
big/big.echofs-index beside them. Timed: `echofs s3://list/big/ MNT` from
start to its return (the daemon is up and the tree is ready), through the
verifying gateway and to s3rver directly, against botocore's own
ListObjectsV2 paginator over the same prefix and server."""

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import free_port, wait_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "dev"))
import nginx as nginx_mod  # noqa: E402

PY = "/usr/bin/python3"
S3RVER = os.path.join(REPO, "tests", "s3", "node_modules", "s3rver", "bin", "s3rver.js")
GATEWAY = os.path.join(REPO, "tests", "s3", "gateway.py")
AK, SK = "AKIABENCHS3000000001", "bench/secret+key/000000000000000000001"
SHARDS = 60
MODES = ("http", "s3-nginx", "s3-relay", "s3-verify")


def log(*a):
    print("bench:", *a, file=sys.stderr, flush=True)


class Bench:
    def __init__(self, a):
        self.a = a
        self.build = os.path.abspath(a.build)
        self.tmp = tempfile.mkdtemp(prefix="echofs-bench-s3.")
        self.procs, self.mounts = [], []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self.env.update(AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK,
                        AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
                        AWS_SHARED_CREDENTIALS_FILE=self.tmp + "/none",
                        AWS_CONFIG_FILE=self.tmp + "/none")

    # ---- servers ----------------------------------------------------------
    def start(self, argv, port, what, env=None):
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(self.tmp, what + ".err"), "w"),
                             env=env)
        self.procs.append(p)
        wait_port(port, p, what)
        return "http://127.0.0.1:%d" % port

    def servers(self):
        www = os.path.join(self.tmp, "www")
        os.makedirs(www)
        os.symlink(os.path.abspath(os.path.join(self.a.data, "shards")),
                   os.path.join(www, "shards"))
        self.nginx = nginx_mod.Nginx(www, os.path.join(self.tmp, "nginx"))
        port = free_port()
        self.store = os.path.join(self.tmp, "s3data")
        self.s3rver = self.start(
            ["node", S3RVER, "-d", self.store, "-a", "127.0.0.1", "-p", str(port),
             "--silent"], port, "s3rver",
            env=dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider"))
        keys = os.path.join(self.tmp, "keys.json")
        with open(keys, "w") as f:
            json.dump({AK: {"secret": SK}}, f)
        self.gw = {}
        for mode, extra in (("s3-relay", ["--no-verify"]), ("s3-verify", [])):
            port = free_port()
            self.gw[mode] = self.start(
                [PY, GATEWAY, "--upstream", self.s3rver, "--keys", keys, "--port",
                 str(port)] + extra, port, mode)

    def fill_store(self):
        """Buckets "shards" (the 60 shards) and "list" (shards + small keys
        under big/), written as s3rver's FilesystemStore lays them out."""
        shards = sorted(os.path.join(self.a.data, "shards", n)
                        for n in os.listdir(os.path.join(self.a.data, "shards"))
                        if n.endswith(".tar"))
        assert len(shards) == SHARDS, len(shards)
        for bucket, prefix in (("shards", ""), ("list", "big/")):
            d = os.path.join(self.store, bucket, prefix)
            os.makedirs(d, exist_ok=True)
            for p in shards:
                obj = os.path.join(d, os.path.basename(p) + "._S3rver_object")
                os.link(p, obj) if os.stat(p).st_dev == os.stat(d).st_dev \
                    else shutil.copy(p, obj)
                with open(p, "rb") as f:
                    md5 = hashlib.md5(f.read()).hexdigest()
                with open(obj + ".md5", "w") as f:
                    f.write(md5)
        d = os.path.join(self.store, "list", "big")
        small = hashlib.md5(b"{}").hexdigest()
        for i in range(self.a.keys - SHARDS):
            # names sort before, among and after the shards
            name = os.path.join(d, "%s-%06d.json._S3rver_object" % (
                ("a", "train-00003x", "zz")[i % 3], i))
            with open(name, "w") as f:
                f.write("{}")
            with open(name + ".md5", "w") as f:
                f.write(small)
        return shards

    # ---- indexes ----------------------------------------------------------
    def index(self, name, source, endpoint=None):
        out = os.path.join(self.tmp, name + ".echofs-index")
        env = dict(self.env)
        if endpoint:
            env["AWS_ENDPOINT_URL_S3"] = endpoint
        if endpoint == self.s3rver:  # s3rver checks only its own fixed key
            env.update(AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER")
        subprocess.run([os.path.join(self.build, "tools", "echofs-index"), "-j", "8",
                        "-o", out, source], env=env, check=True,
                       stderr=subprocess.DEVNULL)
        return out

    def setup(self):
        self.servers()
        self.fill_store()
        n = "{000000..%06d}" % (SHARDS - 1)
        self.source = {"http": "%s/shards/train-%s.tar" % (self.nginx.url, n)}
        self.endpoint = {"http": None, "s3-nginx": self.nginx.url}
        self.endpoint.update(self.gw)
        for m in MODES[1:]:
            self.source[m] = "s3://shards/train-%s.tar" % n
        self.indexes = {m: self.index(m, self.source[m], self.endpoint[m])
                        for m in MODES}
        big = self.index("big", "s3://list/big/train-%s.tar" % n, self.s3rver)
        os.link(big, os.path.join(self.store, "list", "big",
                                  "big.echofs-index._S3rver_object"))

    # ---- mounts -----------------------------------------------------------
    def mount(self, source, opts, env, name):
        mnt = os.path.join(self.tmp, name)
        os.makedirs(mnt)
        self.mounts.append(mnt)
        o = ",".join("%s=%s" % kv for kv in opts.items())
        t0 = time.monotonic()
        subprocess.run([os.path.join(self.build, "echofs"), "-o", o, source, mnt],
                       env=env, check=True)
        return mnt, time.monotonic() - t0

    def umount(self, mnt):
        subprocess.run(["fusermount3", "-u", mnt], check=False)
        self.mounts.remove(mnt)

    @staticmethod
    def daemon_pid(mnt):
        for p in os.listdir("/proc"):
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if mnt.encode() in argv and argv[0].endswith(b"echofs"):
                return p
        return None

    @staticmethod
    def cpu_s(pid):
        with open("/proc/%s/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def cold_epoch(self, mode, r):
        env = dict(self.env)
        if self.endpoint[mode]:
            env["AWS_ENDPOINT_URL_S3"] = self.endpoint[mode]
        cache = os.path.join(self.tmp, "cache-%s-%d" % (mode, r))
        mnt, _ = self.mount(self.source[mode], {
            "cache_dir": cache, "index": self.indexes[mode],
            "log_file": os.path.join(self.tmp, "echofs-%s.log" % mode)},
            env, "mnt-%s-%d" % (mode, r))
        pid = self.daemon_pid(mnt)
        c0 = self.cpu_s(pid)
        out = subprocess.run([PY, os.path.join(REPO, "tools", "bench", "bench_reader.py"),
                              mnt, "--procs", str(self.a.procs), "--seed", str(r),
                              "--json"], capture_output=True, text=True, check=True)
        cpu = self.cpu_s(pid) - c0
        with open(os.path.join(mnt, ".echofs", "stats")) as f:
            st = json.load(f)
        errs = {k: v for k, v in st["errors"].items() if v}
        self.umount(mnt)
        shutil.rmtree(cache, ignore_errors=True)
        if errs:
            log("%s: errors %s" % (mode, errs))
        rd = json.loads(out.stdout)
        return rd["files_per_s"], cpu, st["http_requests"], rd.get("seconds", 0)

    def listing(self, how, r):
        env = dict(self.env)
        if how == "direct":  # s3rver checks only its own fixed key
            env.update(AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER",
                       AWS_ENDPOINT_URL_S3=self.s3rver)
        else:
            env["AWS_ENDPOINT_URL_S3"] = self.gw["s3-verify"]
        cache = os.path.join(self.tmp, "lcache-%s-%d" % (how, r))
        mnt, t = self.mount("s3://list/big/", {"cache_dir": cache, "log_file": os.path.join(
            self.tmp, "echofs-list.log")}, env, "lmnt-%s-%d" % (how, r))
        n = sum(len(os.listdir(os.path.join(mnt, c))) for c in os.listdir(mnt))
        self.umount(mnt)
        shutil.rmtree(cache, ignore_errors=True)
        assert n == 60000, n
        return t

    def botocore_listing(self):
        import botocore.config
        import botocore.session
        c = botocore.session.get_session().create_client(
            "s3", region_name="us-east-1", endpoint_url=self.s3rver,
            aws_access_key_id="S3RVER", aws_secret_access_key="S3RVER",
            config=botocore.config.Config(s3={"addressing_style": "path"}))
        t0 = time.monotonic()
        n = 0
        for page in c.get_paginator("list_objects_v2").paginate(Bucket="list",
                                                                Prefix="big/"):
            n += len(page.get("Contents", []))
        assert n == self.a.keys + 1, n  # and the index
        return time.monotonic() - t0

    def signing_cost(self, n=100000):
        """CPU microseconds per signature: echofs's signer (tests/s3/
        sigv4_cli, the driver of the botocore differential test) over n
        ranged GETs with a session token; parsing and printing included, so
        an upper bound. CPU time, not wall time: a loaded machine barely
        moves it."""
        line = ("GET\thttp://127.0.0.1:9000/shards/train-000%03d.tar\tus-east-1\t"
                "20261203T120000Z\t%s\t%s\tFwoGZXIvYXdzEB//token==\trange\t"
                "bytes=%d-%d\n")
        text = "".join(line % (i % 60, AK, SK, i * 512, i * 512 + 4095)
                       for i in range(n))
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run([os.path.join(self.build, "tests", "sigv4_cli")],
                             input=text, capture_output=True, text=True, check=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert out.stdout.count("AWS4-HMAC-SHA256") == n
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        return cpu / n * 1e6

    def cleanup(self):
        for m in list(self.mounts):
            self.umount(m)
        for p in self.procs:
            p.terminate()
            p.wait()
        if getattr(self, "nginx", None):
            self.nginx.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def report(a, epochs, lists, sig_us, load0, load1):
    med = {m: statistics.median(x[0] for x in epochs[m]) for m in MODES}
    cpu = {m: statistics.median(x[1] for x in epochs[m]) for m in MODES}
    print("Cold epoch, Fashion-MNIST train (60 shards, 60,000 files), "
          "%d reader processes, median of %d mounts per mode:\n" % (a.procs, a.runs))
    print("| mode | files/s (runs) | vs http | daemon CPU s | requests |")
    print("|---|---|---|---|---|")
    for m in MODES:
        runs = ", ".join("%.0f" % x[0] for x in epochs[m])
        reqs = statistics.median(x[2] for x in epochs[m])
        print("| %s | %.0f (%s) | %.3f | %.2f | %.0f |" % (
            m, med[m], runs, med[m] / med["http"], cpu[m], reqs))
    reqs = statistics.median(x[2] for x in epochs["s3-nginx"])
    print("\nSigning: %.1f CPU us per request (echofs's signer over 100,000 "
          "ranged GETs with a session token, tests/s3/sigv4_cli, parsing and "
          "output included); x %.0f requests = %.4f CPU s per cold epoch, "
          "%.2f%% of the http epoch's daemon CPU (%.2f s) and %.3f%% of its "
          "wall time (%.1f s)." % (
              sig_us, reqs, sig_us * reqs / 1e6,
              100 * sig_us * reqs / 1e6 / cpu["http"], cpu["http"],
              100 * sig_us * reqs / 1e6 / (60000 / med["http"]),
              60000 / med["http"]))
    print("\nListing s3://list/big/ (%d keys, %d of them shards, index beside), "
          "command to ready tree, median of %d:\n" % (a.keys, SHARDS, a.runs))
    print("| how | seconds (runs) |")
    print("|---|---|")
    for how, ts in lists.items():
        print("| %s | %.2f (%s) |" % (how, statistics.median(ts),
                                      ", ".join("%.2f" % t for t in ts)))
    print("\nload average before / after: %s / %s" % (load0, load1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--data", required=True, help="holds shards/train-*.tar")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--keys", type=int, default=100000)
    ap.add_argument("--modes", default=",".join(MODES))
    a = ap.parse_args()
    b = Bench(a)
    load0 = open("/proc/loadavg").read().split()[:3]
    try:
        log("setting up (s3rver store, %d keys, indexes)" % a.keys)
        b.setup()
        epochs = {m: [] for m in MODES}
        modes = [m for m in MODES if m in a.modes.split(",")]
        for r in range(a.runs):
            for m in (modes if r % 2 == 0 else modes[::-1]):
                epochs[m].append(b.cold_epoch(m, r))
                log("round %d %s: %.0f files/s, %.2f CPU s, %d requests" % (r, m, *epochs[m][-1][:3]))
        lists = {"echofs via verifying gateway": [], "echofs to s3rver": [],
                 "botocore paginator to s3rver": []}
        for r in range(a.runs):
            lists["echofs via verifying gateway"].append(b.listing("gateway", r))
            lists["echofs to s3rver"].append(b.listing("direct", r))
            lists["botocore paginator to s3rver"].append(b.botocore_listing())
            log("listing round %d: %s" % (r, {k: round(v[-1], 2) for k, v in lists.items()}))
        sig_us = b.signing_cost()
        for m in MODES:
            epochs[m] = epochs[m] or [(float("nan"),) * 4]
        report(a, epochs, lists, sig_us, load0,
               open("/proc/loadavg").read().split()[:3])
    finally:
        b.cleanup()


if __name__ == "__main__":
    main()
