#!/usr/bin/python3
"""bench_transform_pil.py - the Pillow baseline for tools/bench/bench_transform.sh.

Same work as echofs's transform on the same files, one thread: decode ->
resize shorter side to SIZE -> centre crop CROP -> JPEG quality Q (4:2:0, as
Pillow's default at q90). Files are read into memory first. Prints one line
per run and mode: "pil-draft <images/s>" uses Image.draft, Pillow's DCT
scaling trick (libjpeg scales by 1/2, 1/4 or 1/8 while decoding);
"pil-full <images/s>" decodes at full size. The resample filter (--filter)
is BOX by default, the same area average echofs uses to shrink.

usage: /usr/bin/python3 tools/bench/bench_transform_pil.py [--runs 5] [--size 256]
       [--crop 224] [--quality 90] [--filter box|bilinear] FILE.jpg...
"""
import argparse
import io
import time

from PIL import Image


def one(data, size, crop, quality, filt, draft):
    im = Image.open(io.BytesIO(data))
    if draft:
        im.draft("RGB", (size, size))
    im = im.convert("RGB")
    w, h = im.size
    if w <= h:
        nw, nh = size, int(h * size / w + 0.5)
    else:
        nw, nh = int(w * size / h + 0.5), size
    im = im.resize((nw, nh), filt)
    x, y = (nw - crop) // 2, (nh - crop) // 2
    im = im.crop((x, y, x + crop, y + crop))
    out = io.BytesIO()
    im.save(out, "JPEG", quality=quality)
    return len(out.getvalue())


def run(files, a, filt, draft):
    t0 = time.perf_counter()
    for d in files:
        one(d, a.size, a.crop, a.quality, filt, draft)
    return len(files) / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--filter", choices=["box", "bilinear"], default="box")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    filt = Image.BOX if a.filter == "box" else Image.BILINEAR
    files = []
    for p in a.files:
        with open(p, "rb") as f:
            files.append(f.read())
    run(files[:20], a, filt, True)  # warm up
    for _ in range(a.runs):
        print(f"pil-draft {run(files, a, filt, True):.1f}", flush=True)
        print(f"pil-full {run(files, a, filt, False):.1f}", flush=True)


if __name__ == "__main__":
    main()
