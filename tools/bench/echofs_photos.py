#!/usr/bin/python3
"""echofs_photos.py - makes realistic photo-sized colour JPEGs from Fashion-MNIST.

Each 28x28 grey article is upscaled (bicubic) onto a ~500x375 canvas,
coloured with a two-colour ramp picked from its index, laid over a soft
gradient background, and given fine film-grain noise so that the JPEGs have
the size and entropy of real photos (about 45 KB at quality 90, 4:2:0;
ImageNet's photos of this size are about 110 KB).
Deterministic: the same arguments give the same bytes (seeded PRNG, no
system randomness). Used by tools/bench/bench_transform.sh.

usage: /usr/bin/python3 tools/bench/echofs_photos.py --out DIR [--count 200]
       [--first 0] [--seed 1] [--width 500] [--height 375] [--quality 90]
       [--mnist GZ]
--first skips that many articles: photo_NNNNN.jpg is named by the article's
index in the idx file, so disjoint ranges (a training and a held-out set, or
one range per process) can be made separately and packed together.
"""
import argparse
import gzip
import os
import random
import struct
import sys

from PIL import Image, ImageChops, ImageFilter

MNIST = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"


def load_mnist(path, first, count):
    with gzip.open(path, "rb") as f:
        magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 2051 or rows != 28 or cols != 28:
            sys.exit(f"{path}: not an idx3 28x28 image file")
        count = max(0, min(count, n - first))
        f.seek(16 + first * 784)
        data = f.read(count * 28 * 28)
    return [data[i * 784:(i + 1) * 784] for i in range(count)]


def colour(rng):
    return tuple(rng.randrange(256) for _ in range(3))


def photo(pix, idx, seed, w, h):
    rng = random.Random(seed * 1000003 + idx)
    art = Image.frombytes("L", (28, 28), pix)
    side = h * rng.randrange(80, 100) // 100
    art = art.resize((side, side), Image.BICUBIC)
    # Colour the article: dark -> c0, bright -> c1.
    fg = Image.merge("RGB", [
        art.point(lambda v, a=a, b=b: a + (b - a) * v // 255)
        for a, b in zip(colour(rng), colour(rng))])
    # Soft background: a vertical blend of two colours.
    top = Image.new("RGB", (w, h), colour(rng))
    bot = Image.new("RGB", (w, h), colour(rng))
    ramp = Image.linear_gradient("L").resize((w, h))
    bg = Image.composite(bot, top, ramp)
    x = rng.randrange(0, w - side + 1)
    y = (h - side) // 2
    mask = art.point(lambda v: 255 if v > 8 else v * 30)
    bg.paste(fg, (x, y), mask)
    # Film grain: deterministic noise, slightly blurred, a few levels.
    noise = Image.frombytes("L", (w, h), rng.randbytes(w * h))
    noise = noise.filter(ImageFilter.GaussianBlur(0.6))
    noise = noise.point(lambda v: 128 + (v - 128) // 4)
    grain = Image.merge("RGB", [noise] * 3)
    bg = ImageChops.add(bg, grain, scale=1.0, offset=-128)
    return bg.filter(ImageFilter.SMOOTH_MORE)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--first", type=int, default=0,
                    help="index of the first article (default 0)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--width", type=int, default=500)
    ap.add_argument("--height", type=int, default=375)
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--mnist", default=MNIST)
    a = ap.parse_args()
    if a.count < 1 or a.first < 0 or a.width < 32 or a.height < 32:
        sys.exit("count >= 1, first >= 0, width and height >= 32")
    os.makedirs(a.out, exist_ok=True)
    arts = load_mnist(a.mnist, a.first, a.count)
    if not arts:
        sys.exit(f"{a.mnist}: no article at index {a.first}")
    total = 0
    for i, pix in enumerate(arts, start=a.first):
        im = photo(pix, i, a.seed, a.width, a.height)
        path = os.path.join(a.out, f"photo_{i:05d}.jpg")
        im.save(path, "JPEG", quality=a.quality, subsampling=2)
        total += os.path.getsize(path)
    print(f"{len(arts)} photos {a.width}x{a.height} in {a.out}, "
          f"{total // len(arts)} bytes average")


if __name__ == "__main__":
    main()
