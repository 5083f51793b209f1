"""test_security.py - who may steer a mount, secrets that must stay in
memory, decode memory, names and reporting (issue 10)."""

import errno
import os
import pwd
import shutil
import subprocess
import tempfile
import time

import pytest

import helpers
from helpers import Mount

PLAIN_USER = "echofs_plain"


def plain_user():
    """(uid, gid) of a plain user made with useradd for these tests."""
    try:
        pw = pwd.getpwnam(PLAIN_USER)
    except KeyError:
        r = subprocess.run(["useradd", "--system", "--no-create-home",
                            "--shell", "/usr/sbin/nologin", PLAIN_USER],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip("cannot add a plain user: %s" % r.stderr.strip())
        pw = pwd.getpwnam(PLAIN_USER)
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is missing")
    return pw.pw_uid, pw.pw_gid


def as_user(uid, gid, script, caps=()):
    """Run a shell script as uid:gid with no groups (and, if given, these
    capabilities kept as ambient ones)."""
    cmd = ["setpriv", "--reuid=%d" % uid, "--regid=%d" % gid, "--clear-groups"]
    if caps:
        c = ",".join("+" + x for x in caps)
        cmd += ["--inh-caps=" + c, "--ambient-caps=" + c]
    return subprocess.run(cmd + ["sh", "-c", script], capture_output=True,
                          text=True, timeout=30)


@pytest.fixture
def open_mount(tmp_path):
    """Like mounter, but under a world-traversable directory, so that
    another user can reach the mountpoint (pytest's tmp dirs are 0700)."""
    top = tempfile.mkdtemp(prefix="echofs-sec-", dir="/tmp")
    os.chmod(top, 0o755)
    mounts = []

    def make(source, opts):
        m = Mount(top, source, os.path.join(str(tmp_path), "cache%d" % len(mounts)),
                  opts, "mnt%d" % len(mounts))
        os.chmod(m.dir, 0o755)
        mounts.append(m)
        r = m.start()
        assert r.returncode == 0, "echofs failed: %s\n%s" % (r.stderr, m.log()[-3000:])
        return m

    yield make
    for m in mounts:
        m.umount()
    shutil.rmtree(top, ignore_errors=True)


def echo_of(m):
    with open(m.path(".echofs", "config")) as f:
        for line in f:
            if line.startswith("echo="):
                return float(line.split("=", 1)[1])
    return None


def test_other_user_cannot_steer_an_allow_other_mount(open_mount, fault_server):
    uid, gid = plain_user()
    m = open_mount(fault_server.source, {"index": fault_server.index, "echo": 3,
                                         "allow_other": None})
    cfg = m.path(".echofs", "config")
    st = os.stat(cfg)
    assert st.st_uid == os.getuid(), "config owned by uid %d" % st.st_uid
    assert st.st_mode & 0o777 == 0o600, "config mode %o" % (st.st_mode & 0o777)
    mounted = helpers.mount_entry(m.mnt)
    assert "default_permissions" in mounted[3], mounted[3]
    # The plain user can read the tree (allow_other) ...
    r = as_user(uid, gid, "ls '%s' >/dev/null" % m.mnt)
    assert r.returncode == 0, r.stderr
    # ... but not change the echo factor: refused with EACCES, unchanged.
    r = as_user(uid, gid, "echo echo=7 > '%s'" % cfg)
    assert r.returncode != 0, "a plain user changed the config"
    assert "Permission denied" in r.stderr, r.stderr
    assert echo_of(m) == 3
    # The daemon refuses it too, not only the kernel: a user whom the kernel
    # lets through (CAP_DAC_OVERRIDE) still gets EACCES.
    r = as_user(uid, gid, "echo echo=7 > '%s'" % cfg, caps=("dac_override",))
    assert r.returncode != 0, "the daemon took a write from uid %d" % uid
    assert "Permission denied" in r.stderr, r.stderr
    assert "uid %d refused" % uid in m.log(), m.log()[-2000:]
    assert echo_of(m) == 3
    # The owner still can.
    with open(cfg, "w") as f:
        f.write("echo=2\n")
    assert echo_of(m) == 2


SECRETS = (b"s3cretpw", b"TOPSECRET", b"Z9token", b"K9param")


def secret_source(base_url, token):
    """The test split's SOURCE with userinfo, a signature, a query token (a
    credential: it may change between mounts) and a parameter that is not
    a credential but must not reach the disk either."""
    user = base_url.replace("http://", "http://reader:s3cretpw@")
    return (helpers.source_of(user, "test") + "?sig=TOPSECRET&token=" + token
            + "&k=K9param")


def assert_no_secret(what, data):
    for s in SECRETS:
        assert s not in data, "%s shows %r" % (what, s)


def test_secrets_stay_in_memory(mounter, nginx, tmp_path):
    cache = str(tmp_path / "cache")
    src = secret_source(nginx.url, "Z9token")
    m = mounter(src, cache_dir=cache, opts={"log_level": "debug"})
    files = sorted(helpers.list_paths(m.mnt))
    assert files, "empty tree"
    with open(m.path(files[0]), "rb") as f:
        assert f.read()
    pids = helpers.echofs_pids(m.mnt)
    assert pids, "no daemon found for %s" % m.mnt
    for pid in pids:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            assert_no_secret("/proc/%d/cmdline" % pid, f.read())
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True).stdout
    assert_no_secret("ps", ps)
    for name in ("stats", "stats.prom"):
        with open(m.path(".echofs", name), "rb") as f:
            assert_no_secret(name, f.read())
    m.umount()
    assert_no_secret("the debug log", m.log().encode())
    seen = 0
    for dirpath, _, names in os.walk(cache):
        for n in names:
            p = os.path.join(dirpath, n)
            mode = os.stat(p).st_mode & 0o777
            assert mode == 0o600, "%s has mode %o" % (p, mode)
            with open(p, "rb") as f:
                assert_no_secret(p, f.read())
            seen += 1
    assert seen > 1, "nothing was cached"
    # Another token, same cache: the cached shards are found again.
    m2 = mounter(secret_source(nginx.url, "other"), cache_dir=cache,
                 name="again")
    assert sorted(helpers.list_paths(m2.mnt)) == files
    with open(m2.path(files[0]), "rb") as f:
        assert f.read()
    st = m2.stats()
    assert st["bytes_fetched"] == 0, "cache not reused: %r" % st
    assert st["cache_hits"] > 0


def test_echofs_index_strips_credentials(mounter, nginx, tmp_path):
    out = str(tmp_path / "test.echofs-index")
    src = secret_source(nginx.url, "Z9token")
    r = subprocess.run([os.path.join(helpers.BUILD, "tools", "echofs-index"),
                        "-o", out, src], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert b"strip" in r.stderr, "no warning: %r" % r.stderr
    assert_no_secret("echofs-index's stderr", r.stderr + r.stdout)
    with open(out, "rb") as f:
        text = f.read()
    assert_no_secret("the index", text)
    assert b"S\t" + nginx.url.encode() + b"/test/test-000000.tar\t" in text
    # echofs takes that index for the SOURCE with credentials.
    m = mounter(src, opts={"index": out})
    assert m.stats()["samples"] > 0
    files = sorted(helpers.list_paths(m.mnt))
    with open(m.path(files[-1]), "rb") as f:
        assert f.read()


BIG_SIDE = 8000
BIG_FILES = 6


def progressive_jpeg(path):
    """A progressive 8000x8000 4:2:0 JPEG of about a megabyte: smooth
    gradients with a little noise, made with PIL at test time."""
    try:
        from PIL import Image
    except ImportError:
        pytest.skip("python3-pil is missing (apt-get install python3-pil)")
    small = Image.effect_noise((500, 500), 6).convert("L")
    grad = Image.linear_gradient("L").resize((500, 500))
    img = Image.merge("RGB", (small, grad, grad.rotate(90)))
    img = img.resize((BIG_SIDE, BIG_SIDE), Image.BILINEAR)
    img.save(path, "JPEG", quality=85, progressive=True)


@pytest.fixture(scope="module")
def big_jpegs(tmp_path_factory):
    """www/big/big-000000.tar: six progressive 8000x8000 JPEGs, served by
    a private nginx."""
    import tarfile
    root = str(tmp_path_factory.mktemp("bigjpeg"))
    www = os.path.join(root, "www", "big")
    os.makedirs(www)
    jpg = os.path.join(root, "big.jpg")
    progressive_jpeg(jpg)
    with tarfile.open(os.path.join(www, "big-000000.tar"), "w",
                      format=tarfile.USTAR_FORMAT) as t:
        for i in range(BIG_FILES):
            t.add(jpg, "s%02d.jpg" % i)
            cls = os.path.join(root, "cls")
            with open(cls, "w") as f:
                f.write("1")
            t.add(cls, "s%02d.cls" % i)
    import nginx as nginx_mod
    srv = nginx_mod.Nginx(os.path.join(root, "www"), os.path.join(root, "nginx"))
    try:
        yield srv.url + "/big/big-{000000..000000}.tar", os.path.getsize(jpg)
    finally:
        srv.stop()


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def read_all_at_once(m, files):
    """Read every file in its own thread; (results, peak daemon RSS MB)."""
    import threading
    pid = helpers.echofs_pids(m.mnt)[0]
    results, peak, done = {}, [rss_mb(pid)], threading.Event()

    def reader(rel):
        try:
            with open(m.path(rel), "rb") as f:
                results[rel] = f.read()
        except OSError as e:
            results[rel] = e

    def sampler():
        while not done.is_set():
            peak[0] = max(peak[0], rss_mb(pid))
            time.sleep(0.02)

    s = threading.Thread(target=sampler)
    s.start()
    ts = [threading.Thread(target=reader, args=(rel,)) for rel in files]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    done.set()
    s.join()
    return results, peak[0]


PREP = {"size": 64, "crop": 56, "format": "ppm", "threads": BIG_FILES}


def test_decode_memory_is_bounded(mounter, big_jpegs):
    source, size = big_jpegs
    assert size > 200000, "test image too small: %d bytes" % size
    m = mounter(source, opts=PREP)
    files = sorted(helpers.list_paths(m.mnt))
    assert len(files) == BIG_FILES
    results, peak = read_all_at_once(m, files)
    want = len(b"P6\n56 56\n255\n") + 56 * 56 * 3
    for rel, got in results.items():
        assert isinstance(got, bytes), "%s: %s" % (rel, got)
        assert len(got) == want, "%s: %d bytes" % (rel, len(got))
    if sanitized():
        pytest.skip("under ASan freed memory stays in quarantine: the RSS "
                    "bound cannot be checked (reads were)")
    assert peak < 256 + 150, "daemon RSS reached %.0f MB" % peak


def sanitized():
    """Whether echofs runs under ASan (tools/test.sh --asan)."""
    return "ASAN_OPTIONS" in os.environ


def test_image_above_decode_mem_is_refused(mounter, big_jpegs):
    source, _ = big_jpegs
    m = mounter(source, opts=dict(PREP, decode_mem="64M"))
    files = sorted(helpers.list_paths(m.mnt))
    results, peak = read_all_at_once(m, files)
    for rel, got in results.items():
        assert isinstance(got, OSError) and got.errno == errno.EIO, \
            "%s: %r" % (rel, got if isinstance(got, OSError) else len(got))
    assert sanitized() or peak < 64 + 150, "daemon RSS reached %.0f MB" % peak
    # Counted once per failed file (the kernel retries a failed read).
    errors = m.stats()["errors"]
    assert errors["image"] == BIG_FILES, errors
    assert errors["read"] == BIG_FILES, errors
    # Logged at warn, at most one line a second for the kind.
    assert "more than decode_mem" in m.log(), m.log()[-3000:]
    assert m.log().count("more than decode_mem") <= 2, m.log()[-3000:]


@pytest.mark.parametrize("target,want", [
    ("file:///etc/passwd", "redirect refused"),
    ("LOOP", "too many redirects"),
])
def test_redirect_errors_name_their_cause(mounter, fault_server, target, want):
    if target == "LOOP":
        target = fault_server.url + "/test/test-000003.tar"
    fault_server.set_faults("/test/test-000003.tar=redirect:" + target)
    # No index: echofs streams every shard to build one, and must fail.
    m = mounter(fault_server.source, check=False)
    r = m.result
    assert r.returncode != 0, "mount should fail"
    assert want in r.stderr, r.stderr
    for wrong in ("length or range mismatch", "symbolic links"):
        assert wrong not in r.stderr, r.stderr


def test_too_small_cache_size_says_so(mounter, fault_server):
    m = mounter(fault_server.source,
                opts={"index": fault_server.index, "cache_size": "1M"})
    files = sorted(helpers.list_paths(m.mnt))
    with open(m.path(files[0]), "rb") as f:
        assert f.read()
    deadline = time.monotonic() + 10
    while "larger than cache_size" not in m.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    log = m.log()
    assert "larger than cache_size" in log, log[-3000:]
    assert "No space left on device" not in log, log[-3000:]


HOSTILE_LABELS = ('q"uote', "back\\slash", '"}, "x": 1, "')


def test_stats_escape_hostile_class_names(mounter, fault_server, dataset):
    """Class directories named with quotes and backslashes (labels from
    the directory part of member names) keep both stats files valid."""
    import json
    import re
    import tarfile
    d = os.path.join(fault_server.root, "labels")
    os.makedirs(d, exist_ok=True)
    jpg = next(iter(sorted(helpers.list_paths(dataset.ref_dir("test")))))
    jpg = os.path.join(dataset.ref_dir("test"), jpg)
    with tarfile.open(os.path.join(d, "labels-000000.tar"), "w",
                      format=tarfile.PAX_FORMAT) as t:
        for i, label in enumerate(HOSTILE_LABELS * 2):
            t.add(jpg, "%s/k%02d.jpg" % (label, i))
    m = mounter(fault_server.url + "/labels/labels-{000000..000000}.tar",
                opts={"echo": 2})
    assert sorted(os.listdir(m.mnt)) == sorted(HOSTILE_LABELS)
    with open(m.path(".echofs", "stats")) as f:
        text = f.read()
    st = json.loads(text)  # raises on main: the names were not escaped
    assert sorted(st["ready"]) == sorted(HOSTILE_LABELS), text
    with open(m.path(".echofs", "stats.prom")) as f:
        prom = f.read()
    line = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*'
                      r'(\{([a-zA-Z_]+="([^"\\\n]|\\[\\"n])*",?)*\})? \S+$')
    for ln in prom.splitlines():
        if not ln.startswith("#"):
            assert line.match(ln), "bad Prometheus line: %r" % ln
    assert prom.count("echofs_ready{") == len(HOSTILE_LABELS)


@pytest.mark.parametrize("sub", ["shards", "prepared"])
def test_a_symlinked_cache_subdirectory_fails_the_mount(mounter, nginx, tmp_path, sub):
    """A link put in place of cache_dir/shards or cache_dir/prepared would
    send the next mount's entries wherever it points (issue 50): the mount
    refuses, with one line naming the directory, and writes nothing
    there."""
    cache = tmp_path / "c"
    elsewhere = tmp_path / "elsewhere"
    cache.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, cache / sub)
    err = helpers.failed_mount(
        lambda src, opts, check, timeout: mounter(
            src, cache_dir=str(cache), opts=opts, check=check, timeout=timeout),
        helpers.source_of(nginx.url, "test"),
        {"index": nginx.test_index, "size": 32, "format": "ppm"})
    assert "cache dir %s/%s is a symlink" % (cache, sub) in err, err
    assert os.listdir(elsewhere) == []


def test_default_cache_dir_is_the_users_own(nginx, tmp_path):
    """Without HOME or XDG_CACHE_HOME, a plain user's default cache_dir is
    /tmp/echofs-cache-UID (made 0700, theirs); one that another user made
    first is refused with one line, not used (issue 50)."""
    uid, gid = plain_user()
    d = "/tmp/echofs-cache-%d" % uid
    top = tempfile.mkdtemp(prefix="echofs-sec-", dir="/tmp")
    os.chmod(top, 0o755)
    mnt = os.path.join(top, "mnt")
    os.mkdir(mnt)
    os.chown(mnt, uid, gid)
    index = os.path.join(top, "test.echofs-index")
    shutil.copy(nginx.test_index, index)
    os.chmod(index, 0o644)
    cmd = "env -i PATH=/usr/bin:/bin %s -o index=%s %s %s" % (
        helpers.ECHOFS, index, helpers.source_of(nginx.url, "test"), mnt)
    try:
        shutil.rmtree(d, ignore_errors=True)
        as_user(uid, gid, cmd)  # mounted or not: the store opened first
        st = os.lstat(d)
        assert st.st_uid == uid and st.st_mode & 0o777 == 0o700, (
            st.st_uid, oct(st.st_mode))
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        shutil.rmtree(d)
        os.mkdir(d, 0o755)  # planted by root, before the user's mount
        r = as_user(uid, gid, cmd)
        assert r.returncode != 0, "mounted on a cache dir another user made"
        err = r.stderr.strip()
        assert len(err.splitlines()) == 1, err
        assert "cache dir %s is owned by uid 0" % d in err, err
    finally:
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(top, ignore_errors=True)
