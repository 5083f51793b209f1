"""test_preprocess.py - preprocessing in the filesystem (size=, crop=,
format=, augment=, echo_stage=): converted files of the right size, class
and content, for PIL and torchvision readers; echoes before augment differ,
after augment they are identical; bad images fail cleanly."""

import collections
import hashlib
import io
import os
import random
import tarfile

import pytest

import helpers

PPM_28 = len(b"P6\n28 28\n255\n") + 28 * 28 * 3


def exact_ppm(mounter, nginx, **opts):
    o = {"index": nginx.test_index, "size": 32, "crop": 28, "format": "ppm"}
    o.update(opts)
    return mounter(helpers.source_of(nginx.url, "test"), opts=o)


def psnr(a, b):
    import numpy as np
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    mse = float((d * d).mean())
    return 99.0 if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def reference(dataset, rel):
    """The test split's source image for a converted file, resized to 32 and
    centre-cropped to 28 by PIL: what echofs should have made."""
    from PIL import Image
    cls, name = rel.split(os.sep)
    src = os.path.join(dataset.ref_dir("test"), cls, os.path.splitext(name)[0] + ".jpg")
    im = Image.open(src).convert("RGB").resize((32, 32), Image.BILINEAR)
    return im.crop((2, 2, 30, 30))


def test_exact_ppm_files_have_one_size_and_the_right_content(mounter, nginx, dataset):
    from PIL import Image
    m = exact_ppm(mounter, nginx)
    paths = sorted(helpers.list_paths(m.mnt))
    assert len(paths) == 10000
    assert all(p.endswith(".ppm") for p in paths)
    ref_classes = sorted(os.listdir(dataset.ref_dir("test")))
    assert sorted(os.listdir(m.mnt)) == ref_classes
    sample = random.Random(4).sample(paths, 200)
    scores = []
    for i, rel in enumerate(sample):
        p = m.path(rel)
        assert os.stat(p).st_size == PPM_28, rel
        with open(p, "rb") as f:
            data = f.read()
        assert len(data) == PPM_28
        im = Image.open(io.BytesIO(data))
        assert im.size == (28, 28) and im.mode == "RGB"
        # Upscaling 28 -> 32 differs in detail between resamplers, so
        # compare with the image's own reference against another one's.
        own = psnr(im, reference(dataset, rel))
        other = psnr(im, reference(dataset, sample[i - 1]))
        assert own > 20, (rel, own)
        scores.append(own > other + 3)
    assert sum(scores) >= 0.95 * len(scores), sum(scores)
    assert m.stats()["errors"]["image"] == 0


def test_torchvision_imagefolder_reads_the_converted_tree(mounter, nginx):
    tv = pytest.importorskip("torchvision", reason="Debian's python3-torchvision is not installed")
    m = exact_ppm(mounter, nginx)
    ds = tv.datasets.ImageFolder(m.mnt, transform=tv.transforms.ToTensor())
    assert len(ds) == 10000
    assert ds.classes == sorted(os.listdir(m.mnt))
    for i in random.Random(5).sample(range(len(ds)), 50):
        x, y = ds[i]
        assert tuple(x.shape) == (3, 28, 28)
        assert ds.classes[y] == os.path.basename(os.path.dirname(ds.samples[i][0]))


def served_by_source(m, cls, n):
    out = collections.defaultdict(list)
    d = m.path(cls)
    for name in sorted(os.listdir(d))[:n]:
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
            src = os.getxattr(f.fileno(), "user.echofs.source").decode()
        assert len(data) == len(b"P6\n24 24\n255\n") + 24 * 24 * 3
        out[src].append(hashlib.sha256(data).hexdigest())
    return {s: h for s, h in out.items() if len(h) > 1}


def echo_opts(fault_server, stage):
    return {"index": fault_server.index, "echo": 4, "echo_mode": "fixed",
            "seed": 3, "size": 32, "crop": 24, "augment": 1, "flip": 1,
            "format": "ppm", "echo_stage": stage}


def test_echoes_before_augment_differ(mounter, fault_server):
    m = mounter(fault_server.source, opts=echo_opts(fault_server, "before_augment"))
    repeats = served_by_source(m, "3", 600)
    assert repeats, "no sample was served twice"
    differing = sum(1 for h in repeats.values() if len(set(h)) > 1)
    # A random 24x24 crop of 32x32 and a coin flip: two serves of one
    # sample are equal with probability about 1/162.
    assert differing >= 0.8 * len(repeats), (differing, len(repeats))


def test_encoded_echoes_differ(mounter, fault_server):
    """echo_stage=encoded (adaptive mode's default, issue 29): the pool
    holds the sample's bytes and every serve, echoes too, is decoded with a
    new crop and flip."""
    m = mounter(fault_server.source, opts=echo_opts(fault_server, "encoded"))
    repeats = served_by_source(m, "3", 600)
    assert repeats, "no sample was served twice"
    differing = sum(1 for h in repeats.values() if len(set(h)) > 1)
    assert differing >= 0.8 * len(repeats), (differing, len(repeats))
    assert m.stats()["echo_stage"] == "encoded"


@pytest.mark.parametrize("mode,stage", [("adaptive", "encoded"),
                                        ("fixed", "before_augment"),
                                        ("greedy", "before_augment")])
def test_echo_stage_auto_follows_the_mode(mounter, fault_server, mode, stage):
    opts = dict(echo_opts(fault_server, "auto"), echo_mode=mode)
    m = mounter(fault_server.source, opts=opts)
    assert m.stats()["echo_stage"] == stage


def test_echoes_after_augment_are_identical(mounter, fault_server):
    m = mounter(fault_server.source, opts=echo_opts(fault_server, "after_augment"))
    repeats = served_by_source(m, "3", 600)
    assert repeats, "no sample was served twice"
    for src, h in repeats.items():
        assert len(set(h)) == 1, src


def make_bad_shard(path):
    """Three good samples and two broken JPEGs, all of class 1."""
    good = open(os.path.join(os.path.dirname(__file__), "..", "data", "img",
                             "photo.jpg"), "rb").read()
    members = [("ok%d.jpg" % i, good) for i in range(3)]
    members += [("trunc.jpg", good[: len(good) // 3]), ("junk.jpg", b"\xff\xd8" + os.urandom(500))]
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in members:
            for n, d in ((name, data), (name.split(".")[0] + ".cls", b"1")):
                info = tarfile.TarInfo(n)
                info.size = len(d)
                t.addfile(info, io.BytesIO(d))


def test_bad_images_fail_cleanly(mounter, private_nginx, dataset):
    d = os.path.join(dataset.www, "badimg")
    os.makedirs(d, exist_ok=True)
    make_bad_shard(os.path.join(d, "bad-000000.tar"))
    src = "%s/badimg/bad-{000000..000000}.tar" % private_nginx.url
    m = mounter(src, opts={"size": 64, "format": "ppm"}, name="exact")
    names = sorted(os.listdir(m.path("1")))
    assert len(names) == 5
    errs = {n: helpers.read_errno(m.path("1", n)) for n in names}
    assert errs["trunc.ppm"] == 5 and errs["junk.ppm"] == 5, errs  # EIO
    assert all(errs["ok%d.ppm" % i] == 0 for i in range(3)), errs
    assert m.stats()["errors"]["image"] >= 2
    # An echo mount skips them: every open gets one of the good ones. The
    # streamer meets the bad ones again on every pass, counting each time
    # (so the count need not be even: a pass may be half way).
    e = mounter(src, opts={"size": 64, "format": "ppm", "echo": 2}, name="echo")
    for n in names:
        with open(e.path("1", n), "rb") as f:
            assert f.read()[:2] == b"P6"
            assert os.getxattr(f.fileno(), "user.echofs.source") in (b"ok0", b"ok1", b"ok2")
    st = e.stats()
    assert st["errors"]["image"] >= 2


@pytest.mark.parametrize("crop", [0, 32])
def test_encoded_echo_mount_skips_bad_images(mounter, private_nginx, dataset, crop):
    """echo_stage=encoded decodes at the serve, not at ingest: a bad JPEG
    found then is discarded from the pool and the open (crop: bound at
    open) or lookup (no crop) takes another sample, so readers see only
    good ones, and each bad one is counted once. exact_first=0: the pool
    serves every open (the shard is local once indexed, so exact first
    would answer bad paths with a good neighbour, test_exact_first.py)."""
    d = os.path.join(dataset.www, "badimg")
    os.makedirs(d, exist_ok=True)
    make_bad_shard(os.path.join(d, "bad-000000.tar"))
    src = "%s/badimg/bad-{000000..000000}.tar" % private_nginx.url
    opts = {"size": 64, "format": "ppm", "echo": 2, "echo_stage": "encoded",
            "exact_first": 0}
    if crop:
        opts.update(crop=crop, augment=1)
    e = mounter(src, opts=opts, name="echo%d" % crop)
    names = sorted(os.listdir(e.path("1")))
    for _ in range(4):
        for n in names:
            with open(e.path("1", n), "rb") as f:
                assert f.read()[:2] == b"P6"
                assert os.getxattr(f.fileno(), "user.echofs.source") in (b"ok0", b"ok1", b"ok2")
    st = e.stats()
    assert st["errors"]["image"] == 2, st["errors"]
    assert st["fresh_served"] >= 3


POISONERS = ("zero_size.jpg", "bad_marker.jpg", "garbage_scan.jpg")


def make_poison_shard(path):
    """Fifteen class-1 JPEGs in name order: each bad one (tests/data/img)
    followed by good ones, so one decode worker meets a good JPEG right
    after every bad one."""
    img = os.path.join(os.path.dirname(__file__), "..", "data", "img")
    read = lambda n: open(os.path.join(img, n), "rb").read()
    good = [read(n) for n in ("photo.jpg", "photo444.jpg", "progressive.jpg", "gray.jpg")]
    members, bad = [], {}
    for i in range(15):
        name = "s%02d" % i
        if i % 5 == 1:
            bad[name] = POISONERS[i // 5]
            members.append((name, read(bad[name])))
        else:
            members.append((name, good[i % len(good)]))
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in members:
            for n, d in ((name + ".jpg", data), (name + ".cls", b"1")):
                info = tarfile.TarInfo(n)
                info.size = len(d)
                t.addfile(info, io.BytesIO(d))
    return bad


def test_a_bad_jpeg_does_not_poison_its_decode_worker(mounter, private_nginx, dataset):
    """Issue 21: after one bad JPEG every JPEG its worker decoded failed
    (EIO, logged with the bad one's reason). One worker, so every image
    goes through the same TurboJPEG handle, read in name order."""
    from PIL import Image
    d = os.path.join(dataset.www, "poison")
    os.makedirs(d, exist_ok=True)
    bad = make_poison_shard(os.path.join(d, "poison-000000.tar"))
    src = "%s/poison/poison-{000000..000000}.tar" % private_nginx.url
    m = mounter(src, opts={"size": 64, "format": "ppm", "threads": 1,
                           "decode_mem": "1G"})
    names = sorted(os.listdir(m.path("1")))
    assert len(names) == 15
    failed = []
    for n in names:
        stem = n.split(".")[0]
        if stem in bad:
            assert helpers.read_errno(m.path("1", n)) == 5, n  # EIO
            continue
        try:
            with open(m.path("1", n), "rb") as f:
                im = Image.open(io.BytesIO(f.read()))
                im.load()
            assert min(im.size) == 64 and im.mode == "RGB", (n, im.size)
        except OSError as e:
            failed.append((n, str(e)))
    assert not failed, (failed, m.log()[-2000:])
    assert m.stats()["errors"]["image"] == len(bad)
    blamed = [l for l in m.log().splitlines() if "cannot preprocess" in l]
    assert blamed, "no image error was logged"
    for line in blamed:
        assert any("sample %s:" % s in line for s in bad), line
