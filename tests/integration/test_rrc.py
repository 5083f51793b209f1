"""test_rrc.py - augment=rrc (torchvision's RandomResizedCrop in the
filesystem) on an echo mount: every serve is crop x crop, read through an
unmodified torchvision ImageFolder + DataLoader; a full-image box (scale
1-1, ratio 1-1) is the whole resized image scaled to the crop, the same on
every serve; the default ranges draw a different box per serve."""

import collections
import hashlib
import os

import pytest

import helpers

PPM_24 = len(b"P6\n24 24\n255\n") + 24 * 24 * 3


def rrc_opts(fault_server, **extra):
    o = {"index": fault_server.index, "echo": 4, "echo_mode": "fixed",
         "seed": 3, "size": 32, "crop": 24, "augment": "rrc",
         "format": "ppm"}
    o.update(extra)
    return o


def serves_by_source(m, cls, n):
    out = collections.defaultdict(list)
    d = m.path(cls)
    for name in sorted(os.listdir(d))[:n]:
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
            src = os.getxattr(f.fileno(), "user.echofs.source").decode()
        assert len(data) == PPM_24, name
        out[src].append(data)
    return {s: d for s, d in out.items() if len(d) > 1}


def test_rrc_mount_through_torchvision_imagefolder(mounter, fault_server):
    tv = pytest.importorskip("torchvision",
                             reason="Debian's python3-torchvision is not installed")
    import torch
    m = mounter(fault_server.source, opts=rrc_opts(fault_server, flip=1))
    ds = tv.datasets.ImageFolder(m.mnt, transform=tv.transforms.ToTensor())
    assert len(ds) > 0
    loader = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True,
                                         num_workers=2)
    seen = 0
    for i, (x, y) in enumerate(loader):
        assert tuple(x.shape[1:]) == (3, 24, 24)
        assert int(y.max()) < len(ds.classes)
        seen += x.shape[0]
        if i == 9:
            break
    assert seen == 640
    assert m.stats()["errors"]["image"] == 0


def test_full_box_is_the_resized_image_on_every_serve(mounter, fault_server):
    import io

    from PIL import Image
    m = mounter(fault_server.source,
                opts=rrc_opts(fault_server, rrc_scale="1-1", rrc_ratio="1-1"))
    repeats = serves_by_source(m, "3", 400)
    assert repeats, "no sample was served twice"
    for src, serves in repeats.items():
        assert len(set(serves)) == 1, src
        im = Image.open(io.BytesIO(serves[0]))
        assert im.size == (24, 24)


def test_default_ranges_draw_a_new_box_per_serve(mounter, fault_server):
    m = mounter(fault_server.source, opts=rrc_opts(fault_server))
    repeats = serves_by_source(m, "3", 400)
    assert repeats, "no sample was served twice"
    differing = sum(1 for d in repeats.values()
                    if len({hashlib.sha256(x).digest() for x in d}) > 1)
    assert differing >= 0.8 * len(repeats), (differing, len(repeats))


def test_rrc_needs_a_crop(mounter, fault_server):
    err = helpers.failed_mount(mounter, fault_server.source,
                               {"index": fault_server.index, "echo": 2,
                                "augment": "rrc"}, one_line=False)
    assert "augment=rrc needs crop" in err, err
