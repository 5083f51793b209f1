"""test_image_formats.py - PNG and WebP shards through preprocessing mounts:
every option (size, crop, format=ppm|jpeg, echo with augment and flip) gives
files of the right size whose content is the source image's; a broken PNG
reads as EIO on an exact mount."""

import io
import os
import tarfile

import pytest

import helpers

CLASSES = 4
PER_CLASS = 6


def photo(seed, w=96, h=72):
    """A colour image that differs per seed (so files can be told apart)."""
    from PIL import Image, ImageDraw
    im = Image.new("RGB", (w, h), ((seed * 53) % 256, (seed * 97) % 256, 128))
    d = ImageDraw.Draw(im)
    d.rectangle((seed % 40, 10, seed % 40 + 30, 50), fill=(250, 250, 20))
    d.ellipse((50, (seed * 7) % 30, 90, (seed * 7) % 30 + 30), fill=(10, 30, 200))
    return im


def encode(im, kind, seed):
    b = io.BytesIO()
    if kind == "png":
        mode = ("RGB", "L", "P", "RGBA")[seed % 4]
        out = im.convert(mode) if mode != "P" else im.convert("P", palette=1)
        out.save(b, "PNG")
    else:
        im.save(b, "WEBP", quality=95, lossless=seed % 2 == 0)
    return b.getvalue()


def make_shard(path):
    """{key: (class, source RGB image)} of a shard mixing PNG and WebP."""
    from PIL import Image
    src = {}
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for i in range(CLASSES * PER_CLASS):
            kind = "png" if i % 2 == 0 else "webp"
            key, cls = "img%03d" % i, i % CLASSES
            data = encode(photo(i), kind, i)
            ref = Image.open(io.BytesIO(data))
            ref = ref.convert("RGBA")
            black = Image.new("RGBA", ref.size, (0, 0, 0, 255))
            src[key] = (cls, Image.alpha_composite(black, ref).convert("RGB"))
            for name, d in (("%s.%s" % (key, kind), data),
                            ("%s.cls" % key, str(cls).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(d)
                t.addfile(info, io.BytesIO(d))
    return src


@pytest.fixture(scope="module")
def pngwebp(dataset):
    d = os.path.join(dataset.www, "pngwebp")
    os.makedirs(d, exist_ok=True)
    return make_shard(os.path.join(d, "pw-000000.tar"))


def psnr(a, b):
    import numpy as np
    x = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    mse = float((x * x).mean())
    return 99.0 if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def centre_ref(im, size, crop):
    from PIL import Image
    w, h = im.size
    s = size / min(w, h)
    r = im.resize((round(w * s), round(h * s)), Image.BOX)
    x, y = (r.size[0] - crop) // 2, (r.size[1] - crop) // 2
    return r.crop((x, y, x + crop, y + crop))


@pytest.mark.parametrize("fmt", ["ppm", "jpeg"])
def test_exact_mount_converts_png_and_webp(mounter, private_nginx, pngwebp, fmt):
    from PIL import Image
    src = "%s/pngwebp/pw-{000000..000000}.tar" % private_nginx.url
    m = mounter(src, opts={"size": 48, "crop": 40, "format": fmt})
    ext = ".ppm" if fmt == "ppm" else ".jpg"
    paths = sorted(helpers.list_paths(m.mnt))
    assert len(paths) == CLASSES * PER_CLASS
    keys = sorted(pngwebp)
    for rel in paths:
        cls, name = rel.split(os.sep)
        key = name[: -len(ext)]
        assert name.endswith(ext) and int(cls) == pngwebp[key][0], rel
        with open(m.path(rel), "rb") as f:
            data = f.read()
        assert len(data) == os.stat(m.path(rel)).st_size
        im = Image.open(io.BytesIO(data))
        assert im.size == (40, 40) and im.mode == "RGB", (rel, im.size, im.mode)
        # Resamplers differ on hard edges: the image must be far closer to
        # its own source than to any other.
        own = psnr(im, centre_ref(pngwebp[key][1], 48, 40))
        other = max(psnr(im, centre_ref(pngwebp[k][1], 48, 40))
                    for k in keys if k != key)
        assert own > 22 and own > other + 6, (rel, own, other)
    assert m.stats()["errors"]["image"] == 0


def test_echo_mount_augments_png_and_webp(mounter, private_nginx, pngwebp):
    from PIL import Image
    src = "%s/pngwebp/pw-{000000..000000}.tar" % private_nginx.url
    m = mounter(src, opts={"echo": 2, "size": 48, "crop": 40, "augment": 1,
                           "flip": 1, "format": "ppm"})
    for cls in range(CLASSES):
        for name in sorted(os.listdir(m.path(str(cls)))):
            with open(m.path(str(cls), name), "rb") as f:
                key = os.getxattr(f.fileno(), "user.echofs.source").decode()
                im = Image.open(io.BytesIO(f.read()))
            assert im.size == (40, 40)
            assert pngwebp[key][0] == cls, (name, key)
    assert m.stats()["errors"]["image"] == 0


def test_broken_png_is_eio(mounter, private_nginx, dataset):
    good = open(os.path.join(os.path.dirname(__file__), "..", "data", "img",
                             "rgb.png"), "rb").read()
    d = os.path.join(dataset.www, "badpng")
    os.makedirs(d, exist_ok=True)
    with tarfile.open(os.path.join(d, "bp-000000.tar"), "w",
                      format=tarfile.USTAR_FORMAT) as t:
        for name, data in (("ok.png", good), ("ok.cls", b"0"),
                           ("cut.png", good[: len(good) // 2]), ("cut.cls", b"0")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    src = "%s/badpng/bp-{000000..000000}.tar" % private_nginx.url
    m = mounter(src, opts={"size": 16, "format": "ppm"})
    assert helpers.read_errno(m.path("0", "ok.ppm")) == 0
    assert helpers.read_errno(m.path("0", "cut.ppm")) == 5  # EIO
    assert m.stats()["errors"]["image"] >= 1
