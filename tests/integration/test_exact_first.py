"""test_exact_first.py - an adaptive echo mount serves a path its own sample
when that sample's shard is on local disk (exact first, issue 29): the bytes
an exact mount serves, under the tree's own inode, whose pages the kernel
keeps from one epoch to the next; counted as fresh serves (own_served). The
pool serves the opens that would wait for the network, and every open with
exact_first=0 or augment=1."""

import errno
import io
import os
import random
import tarfile
import threading
import time

import pytest

import helpers

from test_preprocess import make_bad_shard

PREP = {"size": 40, "crop": 32, "format": "ppm"}


def warm(mounter, fault_server, cache):
    """Every shard into cache: an exact mount reads one file per shard's
    worth of samples (the whole tree, unconverted: a shard is fetched
    whole)."""
    m = mounter(fault_server.source, cache_dir=cache,
                opts={"index": fault_server.index}, name="warm")
    for cls in sorted(os.listdir(m.mnt)):
        for name in os.listdir(m.path(cls)):
            with open(m.path(cls, name), "rb") as f:
                f.read()
    m.umount()


def read(path):
    """The file's bytes, and its source sample's key on an echo mount."""
    with open(path, "rb") as f:
        data = f.read()
        try:
            return data, os.getxattr(f.fileno(), "user.echofs.source")
        except OSError:
            return data, None


def exact_and_echo(mounter, fault_server, tmp_path):
    """An exact and an echo=4 mount over one warm cache; also the cache
    and the options they share."""
    cache = str(tmp_path / "cache")
    warm(mounter, fault_server, cache)
    opts = dict(PREP, index=fault_server.index)
    exact = mounter(fault_server.source, cache_dir=cache, opts=opts, name="exact")
    echo = mounter(fault_server.source, cache_dir=cache, name="echo",
                   opts=dict(opts, echo=4, seed=7))
    return exact, echo, cache, opts


def test_local_paths_are_served_their_own_bytes(mounter, fault_server, tmp_path):
    exact, _, cache, opts = exact_and_echo(mounter, fault_server, tmp_path)
    # exact_when_local=0: own_served counts opens, which a mount gone
    # exact no longer gets.
    echo = mounter(fault_server.source, cache_dir=cache, name="counting",
                   opts=dict(opts, echo=4, seed=7, exact_when_local=0))
    names = sorted(os.listdir(echo.path("3")))[:60]
    for n in names:
        want, _ = read(exact.path("3", n))
        got, src = read(echo.path("3", n))
        assert got == want, n
        assert src == os.path.splitext(n)[0].encode(), (n, src)
    st = echo.stats()
    assert st["own_served"] == len(names), st
    assert st["echoes_served"] == 0, st
    assert st["fresh_served"] >= st["own_served"], st
    # A second epoch: the same inode, its pages kept (no READ reaches the
    # daemon but the stats file's own).
    inos = {n: os.stat(echo.path("3", n)).st_ino for n in names}
    reads0 = echo.stats()["reads"]
    per_stats = echo.stats()["reads"] - reads0
    r0 = echo.stats()["reads"]
    for n in names:
        got, _ = read(echo.path("3", n))
        assert os.stat(echo.path("3", n)).st_ino == inos[n], n
    assert echo.stats()["reads"] - r0 <= per_stats, "pages not kept"
    assert echo.stats()["own_served"] == 2 * len(names)


def test_exact_first_off_and_augment_keep_the_pool(mounter, fault_server, tmp_path):
    cache = str(tmp_path / "cache")
    warm(mounter, fault_server, cache)
    base = dict(PREP, index=fault_server.index, echo=4, seed=7)
    for name, extra in (("off", {"exact_first": 0}), ("augment", {"augment": 1})):
        m = mounter(fault_server.source, cache_dir=cache, name=name,
                    opts=dict(base, **extra))
        names = sorted(os.listdir(m.path("3")))[:40]
        for n in names:
            got, src = read(m.path("3", n))
            assert got.startswith(b"P6\n32 32\n255\n"), n
        st = m.stats()
        assert st["own_served"] == 0, (name, st)
        assert st["fresh_served"] + st["echoes_served"] >= len(names), (name, st)


def test_a_cold_path_is_echoed(mounter, fault_server):
    """Nothing local yet: the first opens take from the pool (exact first
    never waits for a fetch)."""
    m = mounter(fault_server.source, opts=dict(PREP, index=fault_server.index,
                                               echo=4, seed=7))
    names = sorted(os.listdir(m.path("3")))[:5]
    for n in names:
        got, _ = read(m.path("3", n))
        assert got.startswith(b"P6\n32 32\n255\n"), n
    st = m.stats()
    assert st["fresh_served"] + st["echoes_served"] - st["own_served"] >= 1, st


def test_a_bad_own_image_is_echoed_and_counted_once(mounter, private_nginx, dataset):
    """The shard is local from the start (building the index fetched it):
    a bad image's path is answered with a good file of its class, by its
    lookup, or by its READ when the listing gave its entry, and
    user.echofs.source names that file. Without exact first's marks the bad
    samples would fail every open (EIO) or be counted again."""
    d = os.path.join(dataset.www, "badimg")
    os.makedirs(d, exist_ok=True)
    make_bad_shard(os.path.join(d, "bad-000000.tar"))
    src = "%s/badimg/bad-{000000..000000}.tar" % private_nginx.url
    m = mounter(src, opts={"size": 64, "crop": 32, "format": "ppm", "echo": 2})
    names = sorted(os.listdir(m.path("1")))
    assert len(names) == 5
    for _ in range(4):
        for n in names:
            got, src_key = read(m.path("1", n))
            assert got.startswith(b"P6\n32 32\n255\n"), n
            assert src_key in (b"ok0", b"ok1", b"ok2"), (n, src_key)
    st = m.stats()
    assert st["own_served"] > 0, st
    assert st["errors"]["image"] == 2, st["errors"]


def test_every_open_over_a_warm_cache_is_served_its_own(mounter, fault_server, tmp_path):
    """Every shard on disk: two readers go through the whole tree twice
    while the pool's stream opens shards too; every open is served its own
    sample (a lookup that took the pool here would bind its path to the
    pool while the kernel keeps the entry)."""
    cache = str(tmp_path / "cache")
    warm(mounter, fault_server, cache)
    # exact_when_local=0: every open must reach the daemon to be counted.
    m = mounter(fault_server.source, cache_dir=cache, name="echo",
                opts=dict(PREP, index=fault_server.index, echo=4, seed=7,
                          exact_when_local=0))
    paths = [m.path(c, n) for c in sorted(os.listdir(m.mnt))
             for n in sorted(os.listdir(m.path(c)))]
    random.Random(5).shuffle(paths)

    def reader(part):
        for p in part:
            with open(p, "rb") as f:
                f.read()

    for _ in range(2):
        threads = [threading.Thread(target=reader, args=(paths[i::2],))
                   for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    st = m.stats()
    assert st["own_served"] == 2 * len(paths), st
    assert st["echoes_served"] == 0, st


def all_shards_cached(m):
    st = m.stats()
    return st["shards_cached"] >= st["shards"]


def test_a_path_echoed_while_remote_is_its_own_once_local(mounter, fault_server):
    """A path looked up while its shard was remote is bound to the pool, and
    the kernel keeps that entry (a fixed-size output binds at open): once
    the shard is on disk, its next open is handed back to the tree's own
    inode (ESTALE, the kernel looks it up again), not echoed for good."""
    # exact_when_local=0: the opens after every shard is cached are the
    # point here (exact when local would stop them reaching the daemon).
    m = mounter(fault_server.source, opts=dict(PREP, index=fault_server.index,
                                               echo=4, seed=7,
                                               exact_when_local=0))
    names = sorted(os.listdir(m.path("3")))[:5]
    for n in names:
        read(m.path("3", n))
    assert m.stats()["own_served"] == 0
    # Every shard to disk: the pool's stream fetches them as opens take
    # (a hang guard, not a time bound). It takes about 25,000 opens; the
    # stats are read once per 200 (reading them per open doubled the cost).
    others = [m.path(c, n) for c in sorted(os.listdir(m.mnt)) if c != "3"
              for n in sorted(os.listdir(m.path(c)))]
    deadline = time.monotonic() + 120
    while not all_shards_cached(m):
        assert time.monotonic() < deadline, ("shards never cached", m.stats())
        for _ in range(200):
            read(random.choice(others))
    own0 = m.stats()["own_served"]
    for n in names:
        got, src = read(m.path("3", n))
        assert src == os.path.splitext(n)[0].encode(), (n, src)
        assert got.startswith(b"P6\n32 32\n255\n"), n
    assert m.stats()["own_served"] - own0 == len(names), m.stats()


def test_echo_1_serves_each_sample_once_a_pass(mounter, fault_server):
    """echo=1 is no echo: over one shuffled pass of a cold mount, while
    shards arrive, a path is served its own sample (its shard local) or one
    from the pool (remote), and no sample is served twice. A sample served
    as its own path's is one the pool has used for this pass."""
    m = mounter(fault_server.source, opts={"index": fault_server.index,
                                           "echo": 1, "echo_mode": "adaptive",
                                           "seed": 7})
    paths = [m.path(c, n) for c in sorted(os.listdir(m.mnt))
             for n in sorted(os.listdir(m.path(c)))]
    random.Random(5).shuffle(paths)
    seen = {}
    for p in paths:
        _, src = read(p)
        # The tree's own inode (an own serve) names no other source.
        own = os.path.splitext(os.path.basename(p))[0].encode()
        seen.setdefault(src or own, []).append(p)
    twice = {s: ps for s, ps in seen.items() if len(ps) > 1}
    st = m.stats()
    assert st["own_served"] > 0, st  # the pass mixed own and pool serves
    assert not twice, ("%d of %d samples served twice in one pass, e.g. %r; %r"
                       % (len(twice), len(paths), next(iter(twice.items())), st))
    assert st["echoes_served"] == 0, st

def all_paths(m):
    return [(c, n) for c in sorted(os.listdir(m.mnt))
            for n in sorted(os.listdir(m.path(c)))]


def test_a_local_mount_becomes_exact_for_good(mounter, fault_server, tmp_path):
    """Exact when local: every shard on disk, an adaptive echo mount answers
    its first OPEN with ENOSYS, after which the kernel opens files itself as
    on an exact mount: the first pass sends one OPEN and later passes none
    (and no RELEASE), their bytes are the exact mount's, the reason says
    "retired", and an echo setting written is refused with EBUSY. With
    exact_when_local=0 every open still reaches the daemon."""
    exact, echo, cache, opts = exact_and_echo(mounter, fault_server, tmp_path)
    keep = mounter(fault_server.source, cache_dir=cache, name="keep",
                   opts=dict(opts, echo=4, seed=7, exact_when_local=0))
    paths = all_paths(echo)
    want = {p: read(exact.path(*p))[0] for p in paths}
    opens0 = echo.stats()["opens"]
    for p in paths:
        assert read(echo.path(*p))[0] == want[p], p
    st = echo.stats()
    assert st["echo_reason"] == "retired", st
    # Two OPENs: the stats file's for opens0 (control files are opened
    # for real until the mount goes exact) and the first file's, answered
    # ENOSYS. One reader: no other open was on its way then.
    assert st["opens"] - opens0 == 2, ("OPENs reached the daemon", st)
    opens = st["opens"]
    for p in random.Random(3).sample(paths, len(paths)):
        assert read(echo.path(*p))[0] == want[p], p
    st = echo.stats()
    assert st["opens"] == opens, ("an OPEN reached the daemon", st)
    assert st["echoes_served"] == 0, st
    with pytest.raises(OSError) as e:
        with open(echo.path(".echofs", "config"), "w") as f:
            f.write("echo_mode=fixed\n")
    assert e.value.errno == errno.EBUSY, e.value
    assert echo.stats()["echo_mode"] == "adaptive"
    # The same passes over exact_when_local=0: every open is counted.
    for _ in range(3):
        for p in paths:
            assert read(keep.path(*p))[0] == want[p], p
    st = keep.stats()
    assert st["echo_reason"] != "retired", st
    assert st["opens"] >= 3 * len(paths), st


def make_distinct_bad_shard(path):
    """make_bad_shard's layout (ok0-ok2, trunc and junk, all of class 1),
    with three good images that differ, so a stand-in's bytes name it."""
    from PIL import Image
    members = []
    for i, colour in enumerate(((200, 30, 30), (30, 200, 30), (30, 30, 200))):
        buf = io.BytesIO()
        Image.new("RGB", (80, 60), colour).save(buf, "JPEG", quality=90)
        members.append(("ok%d.jpg" % i, buf.getvalue()))
    good = members[0][1]
    members += [("trunc.jpg", good[: len(good) // 3]),
                ("junk.jpg", b"\xff\xd8" + os.urandom(500))]
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in members:
            for n, b in ((name, data), (name.split(".")[0] + ".cls", b"1")):
                info = tarfile.TarInfo(n)
                info.size = len(b)
                t.addfile(info, io.BytesIO(b))


def serve_distinct_bad_shard(dataset, private_nginx, name):
    """make_distinct_bad_shard's shard served by private_nginx under
    www/name/: its source."""
    d = os.path.join(dataset.www, name)
    os.makedirs(d, exist_ok=True)
    make_distinct_bad_shard(os.path.join(d, "bad-000000.tar"))
    return "%s/%s/bad-{000000..000000}.tar" % (private_nginx.url, name)


@pytest.mark.parametrize("listed", [False, True], ids=["looked-up", "listed"])
def test_a_bad_image_on_a_mount_gone_exact_reads_a_good_one(
        mounter, private_nginx, dataset, tmp_path, listed):
    """A mount gone exact (every shard local) gets no OPEN to echo a bad
    image at. Looked up: the lookup finds it (its output cannot be made)
    and answers with the next good file of its class, whose bytes every
    read of the path then gets, never EIO. Listed first: the listing gave
    the kernel the path's own entry (no lookup follows), so its READ finds
    it and returns that good file's bytes. Without either the kernel would
    read the bad path itself and fail (an exact mount's EIO)."""
    src = serve_distinct_bad_shard(dataset, private_nginx, "badimg3")
    cache = str(tmp_path / "cache")
    opts = {"size": 64, "crop": 32, "format": "ppm"}
    exact = mounter(src, cache_dir=cache, opts=opts, name="exact")
    names = sorted(os.listdir(exact.path("1")))
    good = {}
    for n in names:
        try:
            good[read(exact.path("1", n))[0]] = n
        except OSError as e:
            assert e.errno == errno.EIO, (n, e)
    assert len(good) == 3, good.values()  # two bad images: EIO there
    m = mounter(src, cache_dir=cache, name="echo",
                opts=dict(opts, echo=4, seed=7))
    if listed:
        assert sorted(os.listdir(m.path("1"))) == names
    lookups = m.stats()["lookups"]
    # ok0 first: its open makes the mount exact, before any bad path.
    order = sorted(names, key=lambda n: (not n.startswith("ok"), n))
    for _ in range(2):
        for n in order:
            got, src_key = read(m.path("1", n))
            assert got in good, n
            # The source named is the file whose bytes were read.
            assert src_key == good[got].split(".")[0].encode(), (n, src_key)
            if n.startswith("ok"):
                assert good[got] == n, n
    st = m.stats()
    assert st["echo_reason"] == "retired", st
    # The stats file's (control files are opened for real until the mount
    # goes exact) and ok0's, answered ENOSYS.
    assert st["opens"] == 2, st
    assert st["errors"]["image"] == 2, st["errors"]
    assert st["errors"]["read"] == 0, st["errors"]
    # Listed: no file was looked up (the stats file's own walk is).
    if listed:
        assert st["lookups"] - lookups <= 2, st
    else:
        assert st["lookups"] - lookups >= len(names), st


def test_a_listed_warm_mount_sends_the_requests_of_an_exact_one(
        mounter, fault_server, tmp_path):
    """Every shard local: the listing of an adaptive echo mount gives the
    kernel each path's own entry, as an exact mount's listing does, so a
    first pass over the listed tree costs no LOOKUP a file (it cost one
    each: 10,021 LOOKUPs in a trainer's run against an exact mount's 27,
    BENCHMARKS §26) and sends the exact mount's READs."""
    exact, echo, _, _ = exact_and_echo(mounter, fault_server, tmp_path)
    sent, data = {}, {}
    for name, m in (("exact", exact), ("echo", echo)):
        paths = all_paths(m)
        st0 = m.stats()
        data[name] = [read(m.path(*p))[0] for p in paths]
        st = m.stats()
        sent[name] = {k: st[k] - st0[k] for k in ("lookups", "reads")}
    assert data["echo"] == data["exact"]
    assert sent["echo"]["lookups"] == sent["exact"]["lookups"], sent
    assert sent["echo"]["lookups"] < 5, sent
    # Give or take the stats file's READ (opened for real, direct_io, on
    # the echo mount until it goes exact).
    assert abs(sent["echo"]["reads"] - sent["exact"]["reads"]) <= 1, sent
    assert echo.stats()["echo_reason"] == "retired"


def test_a_warm_mount_decodes_nothing_for_the_pool(mounter, fault_server, tmp_path):
    """Every shard on disk at mount time: exact first serves every path its
    own sample, so the pool is never taken from, and its stream must not
    read and decode a buffer's worth of samples ahead of readers that will
    never take them (it did: 1,000 or more decodes on the input core a
    decode-bound trainer needed, BENCHMARKS §26)."""
    _, echo, _, _ = exact_and_echo(mounter, fault_server, tmp_path)
    paths = all_paths(echo)[:50]
    time.sleep(1.5)  # the stream started at mount time before
    for p in paths:
        read(echo.path(*p))
    time.sleep(0.5)
    st = echo.stats()
    assert st["fresh_in_pass"] == 0, st
    assert st["pool_samples"] == 0, st
    # The only decodes are the 50 files' own outputs, made once each.
    assert st["outputs_made"] == len(paths), st
    for p in paths:
        read(echo.path(*p))
    st = echo.stats()
    assert st["outputs_made"] == len(paths), st
    assert st["outputs_hits"] >= len(paths), st


def test_a_bad_own_image_after_its_class_is_served(mounter, private_nginx,
                                                   dataset, tmp_path):
    """Every good file of the bad image's class already served its own
    sample this pass (a sorted reader on a warm mount that keeps its opens):
    the pool has no sample of that class to give and will get none before
    the next pass. The bad path must still read a good file of its class
    at once, not wait out the pool's 30 s (ETIMEDOUT)."""
    src = serve_distinct_bad_shard(dataset, private_nginx, "badimg4")
    cache = str(tmp_path / "cache")
    opts = {"size": 64, "crop": 32, "format": "ppm"}
    exact = mounter(src, cache_dir=cache, opts=opts, name="exact")
    good = {}
    for n in ("ok0.ppm", "ok1.ppm", "ok2.ppm"):
        good[read(exact.path("1", n))[0]] = n
    exact.umount()
    m = mounter(src, cache_dir=cache, name="echo",
                opts=dict(opts, echo=4, seed=7, exact_when_local=0))
    for n in ("ok0.ppm", "ok1.ppm", "ok2.ppm"):
        got, src_key = read(m.path("1", n))
        assert good.get(got) == n, n
    t0 = time.monotonic()
    for n in ("trunc.ppm", "junk.ppm"):
        got, _ = read(m.path("1", n))
        assert got in good, n
    assert time.monotonic() - t0 < 2.5, "a bad path waited for the pool"
    st = m.stats()
    assert st["errors"]["image"] == 2, st["errors"]
    assert st["errors"].get("timeout", 0) == 0, st["errors"]


def test_a_class_of_bad_images_fails_at_once(mounter, private_nginx, dataset,
                                             tmp_path):
    """A class whose every image is bad has nothing to echo or stand in:
    its paths fail with EIO at once, as on an exact mount, instead of
    waiting for a pool that can never give a sample of it."""
    from PIL import Image
    d = os.path.join(dataset.www, "badclass")
    os.makedirs(d, exist_ok=True)
    buf = io.BytesIO()
    Image.new("RGB", (80, 60), (10, 120, 240)).save(buf, "JPEG")
    good = buf.getvalue()
    members = [("g%d" % i, good, b"0") for i in range(3)]
    members += [("trunc", good[: len(good) // 3], b"1"),
                ("junk", b"\xff\xd8" + os.urandom(500), b"1")]
    with tarfile.open(os.path.join(d, "bad-000000.tar"), "w",
                      format=tarfile.USTAR_FORMAT) as t:
        for key, img, cls in members:
            for n, b in ((key + ".jpg", img), (key + ".cls", cls)):
                info = tarfile.TarInfo(n)
                info.size = len(b)
                t.addfile(info, io.BytesIO(b))
    src = "%s/badclass/bad-{000000..000000}.tar" % private_nginx.url
    url = src.replace("{000000..000000}", "000000")
    index = str(tmp_path / "bad.echofs-index")
    helpers.write_index(index, [(url, os.path.join(d, "bad-000000.tar"),
                                 helpers.http_etag(url))])
    opts = {"size": 64, "crop": 32, "format": "ppm", "index": index}
    # cold: nothing local when the bad paths are opened (the pool's take
    # fetches the shard and finds no good sample of the class).
    for name, extra in (("cold", {}), ("keep", {"exact_when_local": 0}),
                        ("default", {})):
        m = mounter(src, cache_dir=str(tmp_path / "cache"), name=name,
                    opts=dict(opts, echo=4, seed=7, **extra))
        if name != "cold":
            assert read(m.path("0", "g0.ppm"))[0].startswith(b"P6")
        t0 = time.monotonic()
        for n in ("junk.ppm", "trunc.ppm"):
            with pytest.raises(OSError) as e:
                read(m.path("1", n))
            assert e.value.errno == errno.EIO, (name, n, e.value)
        assert time.monotonic() - t0 < 2.5, (name, "waited for the pool")
        m.umount()


def cache_file_of(cache, shard_path):
    """The cache file that holds shard_path's bytes (its first 4 KB)."""
    with open(shard_path, "rb") as f:
        head = f.read(4096)
    d = os.path.join(cache, "shards")
    for n in sorted(os.listdir(d)):
        if n.endswith(".shard"):
            with open(os.path.join(d, n), "rb") as f:
                if f.read(4096) == head:
                    return os.path.join(d, n)
    raise AssertionError("no cache file holds %s" % shard_path)


@pytest.mark.parametrize("keep", [True, False], ids=["keep", "may-retire"])
def test_a_transient_failure_of_an_own_path_is_not_a_bad_image(
        mounter, fault_server, tmp_path, keep):
    """Issue 50: a path's own output that cannot be made for a reason of the
    moment is no bad image. Here its shard's cache copy is found corrupt at
    the lookup and the new copy's fetch stalls past read_timeout: the open
    fails with ETIMEDOUT (counted as a read error, not an image error) and
    the sample stays the path's, so once the shard is back the path reads
    its own sample. Marked bad, it read a neighbour's file for good."""
    cache = str(tmp_path / "cache")
    warm(mounter, fault_server, cache)
    shard = os.path.join(fault_server.root, "test", "test-000003.tar")
    off, size, label, key, _ = helpers.shard_samples(shard)[500]
    opts = dict(PREP, index=fault_server.index)
    exact = mounter(fault_server.source, cache_dir=cache, opts=opts,
                    name="exact")
    want, _ = read(exact.path(label, key + ".ppm"))
    exact.umount()
    with open(cache_file_of(cache, shard), "r+b") as f:
        f.seek(off + size // 2)
        f.write(b"\x00" * 64)
    # One stalled GET of the shard: the first fetch of a new copy sends
    # nothing for 3 s, then the retry gets it.
    fault_server.set_faults("/test/test-000003.tar=stall:3,count=1")
    # keep: exact_when_local=0, every open reaches the daemon; else the
    # first open that succeeds may make the mount exact (retired).
    extra = {"exact_when_local": 0} if keep else {}
    m = mounter(fault_server.source, cache_dir=cache, name="echo",
                opts=dict(opts, echo=4, seed=7, read_timeout=1, **extra))
    path = m.path(label, key + ".ppm")
    with pytest.raises(OSError) as e:
        got, src = read(path)
        raise AssertionError("read %r's file while its shard stalled" % src)
    assert e.value.errno == errno.ETIMEDOUT, e.value
    deadline = time.monotonic() + 60  # a hang guard
    while not all_shards_cached(m):
        assert time.monotonic() < deadline, ("shard never back", m.stats())
        time.sleep(0.2)
    got, src = read(path)
    assert src == key.encode(), (key, src)
    assert got == want
    st = m.stats()
    assert st["errors"]["image"] == 0, st["errors"]
    assert st["errors"]["read"] == 1, st["errors"]


def test_a_corrupt_prepared_entry_names_its_sample(mounter, fault_server,
                                                   tmp_path):
    """A prepared entry (the tier an exact mount wrote) altered on disk is
    dropped and made again when an echo mount serves its path its own
    sample, and the line that says so names the sample's key (it said
    "prepared sample ?")."""
    cache = str(tmp_path / "cache")
    warm(mounter, fault_server, cache)
    shard = os.path.join(fault_server.root, "test", "test-000003.tar")
    _, _, label, key, _ = helpers.shard_samples(shard)[500]
    opts = dict(PREP, index=fault_server.index)
    # The tier keeps a sample at its second use (issue 47): two exact
    # mounts read the path, the second one writes its entry.
    for name in ("exact", "exact-again"):
        exact = mounter(fault_server.source, cache_dir=cache, opts=opts,
                        name=name)
        want, _ = read(exact.path(label, key + ".ppm"))
        deadline = time.monotonic() + 60  # a hang guard
        while exact.stats()["prepared_queued"]:
            assert time.monotonic() < deadline, exact.stats()
            time.sleep(0.05)
        exact.umount()
    d = os.path.join(cache, "prepared", "shards")
    files = [os.path.join(d, n) for n in os.listdir(d) if n.endswith(".shard")]
    assert len(files) == 1, files
    with open(files[0], "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0x40]))
    m = mounter(fault_server.source, cache_dir=cache, name="echo",
                opts=dict(opts, echo=4, seed=7, exact_when_local=0))
    got, src = read(m.path(label, key + ".ppm"))
    assert (got, src) == (want, key.encode())
    assert m.stats()["prepared_corrupt"] == 1, m.stats()
    lines = [ln for ln in m.log().splitlines() if "prepared sample" in ln]
    assert any("prepared sample %s (" % key in ln for ln in lines), lines
