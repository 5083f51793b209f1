#!/usr/bin/python3
"""bench_prep_e2e.py - the Python parts of tools/bench/bench_prep_e2e.sh.

  bench_prep_e2e.py pack --photos DIR --tree DIR --shards DIR [--per-shard 500]
      photos/photo_NNNNN.jpg (tools/bench/echofs_photos.py) -> tree/<label>/<key>.jpg
      and WebDataset ustar shards shards/photos-NNNNNN.tar (key.jpg + key.cls);
      the label is the Fashion-MNIST label of the article the photo was made from
  bench_prep_e2e.py readall ROOT
      read every file under ROOT once (bytes only); prints the file count
  bench_prep_e2e.py train ROOT --mode ppm|jpeg [--batch 32]
      one DataLoader pass (num_workers=0, one torch thread) over
      ImageFolder(ROOT); ppm: ToTensor() only; jpeg: Resize(256),
      CenterCrop(224), ToTensor(). Prints one JSON line: images, cpu_s
      (getrusage self + children, user + sys, over dataset construction and
      the pass; the torch import is reported apart as import_cpu_s), wall_s.
  bench_prep_e2e.py compare PPM_ROOT JPEG_ROOT [--count 50]
      mean absolute pixel difference (0..255) between the echofs PPMs and the
      trainer's own Resize/CenterCrop of the same JPEGs, so the two pipelines
      are known to produce comparable inputs.
"""
import argparse
import gzip
import io
import json
import os
import resource
import sys
import tarfile
import time

LABELS = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz"


def cpu_now():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def load_labels(count):
    """The first count labels; exits with a message when the file has fewer
    (a photo's article index must name an article of the training split)."""
    with gzip.open(LABELS, "rb") as f:
        head = f.read(8)
        if int.from_bytes(head[:4], "big") != 2049:
            sys.exit(f"{LABELS}: not an idx1 label file")
        labels = list(f.read(count))
    if len(labels) < count:
        sys.exit(f"{LABELS}: {len(labels)} labels, a photo needs article {count - 1}")
    return labels


def add_member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def cmd_pack(a):
    names = sorted(n for n in os.listdir(a.photos) if n.endswith(".jpg"))
    # Labels are looked up by the article a photo was made from, which need
    # not be below the photo count (echofs_photos.py --first).
    idxs = [int(n[:-4].rsplit("_", 1)[1]) for n in names]
    labels = load_labels(max(idxs) + 1 if idxs else 0)
    os.makedirs(a.shards, exist_ok=True)
    tar = None
    for i, name in enumerate(names):
        key = name[:-4]
        label = labels[idxs[i]]
        with open(os.path.join(a.photos, name), "rb") as f:
            data = f.read()
        d = os.path.join(a.tree, str(label))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
        if i % a.per_shard == 0:
            if tar:
                tar.close()
            path = os.path.join(a.shards, f"photos-{i // a.per_shard:06d}.tar")
            tar = tarfile.open(path, "w", format=tarfile.USTAR_FORMAT)
        add_member(tar, key + ".jpg", data)
        add_member(tar, key + ".cls", b"%d" % label)
    if tar:
        tar.close()
    nshards = (len(names) + a.per_shard - 1) // a.per_shard
    print(nshards)


def cmd_readall(a):
    n = 0
    for dirpath, dirs, files in os.walk(a.root):
        dirs.sort()
        for name in sorted(files):
            with open(os.path.join(dirpath, name), "rb") as f:
                while f.read(1 << 20):
                    pass
            n += 1
    print(n)


def cmd_train(a):
    c0, w0 = cpu_now(), time.monotonic()
    import torch
    import torchvision as tv
    torch.set_num_threads(1)
    c1, w1 = cpu_now(), time.monotonic()
    T = tv.transforms
    if a.mode == "ppm":
        tf = T.ToTensor()
    else:
        tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()])
    ds = tv.datasets.ImageFolder(a.root, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, num_workers=0)
    n = 0
    for x, y in dl:
        if tuple(x.shape[1:]) != (3, 224, 224):
            sys.exit(f"unexpected batch shape {tuple(x.shape)}")
        n += x.shape[0]
    c2, w2 = cpu_now(), time.monotonic()
    print(json.dumps({"mode": a.mode, "images": n, "classes": len(ds.classes),
                      "cpu_s": round(c2 - c1, 3), "wall_s": round(w2 - w1, 3),
                      "import_cpu_s": round(c1 - c0, 3),
                      "import_wall_s": round(w1 - w0, 3)}))


def cmd_compare(a):
    import torchvision as tv
    import torch
    T = tv.transforms
    ppm = tv.datasets.ImageFolder(a.ppm_root, transform=T.ToTensor())
    jpg = tv.datasets.ImageFolder(a.jpeg_root, transform=T.Compose(
        [T.Resize(256), T.CenterCrop(224), T.ToTensor()]))
    if len(ppm) != len(jpg):
        sys.exit(f"{len(ppm)} PPMs vs {len(jpg)} JPEGs")
    diffs = []
    for i in range(min(a.count, len(ppm))):
        (xp, yp), (xj, yj) = ppm[i], jpg[i]
        sp = os.path.splitext(os.path.basename(ppm.samples[i][0]))[0]
        sj = os.path.splitext(os.path.basename(jpg.samples[i][0]))[0]
        if yp != yj or sp != sj:
            sys.exit(f"sample {i}: {sp}/{yp} vs {sj}/{yj}")
        diffs.append(float(torch.mean(torch.abs(xp - xj))) * 255)
    print(json.dumps({"compared": len(diffs),
                      "mean_abs_diff": round(sum(diffs) / len(diffs), 2),
                      "max_image_mean_abs_diff": round(max(diffs), 2)}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--photos", required=True)
    p.add_argument("--tree", required=True)
    p.add_argument("--shards", required=True)
    p.add_argument("--per-shard", type=int, default=500)
    p = sub.add_parser("readall")
    p.add_argument("root")
    p = sub.add_parser("train")
    p.add_argument("root")
    p.add_argument("--mode", choices=("ppm", "jpeg"), required=True)
    p.add_argument("--batch", type=int, default=32)
    p = sub.add_parser("compare")
    p.add_argument("ppm_root")
    p.add_argument("jpeg_root")
    p.add_argument("--count", type=int, default=50)
    a = ap.parse_args()
    {"pack": cmd_pack, "readall": cmd_readall, "train": cmd_train,
     "compare": cmd_compare}[a.cmd](a)


if __name__ == "__main__":
    main()
