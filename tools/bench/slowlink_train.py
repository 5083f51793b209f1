#!/usr/bin/python3
"""slowlink_train.py - issue 46's trainer: an unmodified torchvision
ImageFolder trainer (or a webdataset-equivalent streaming reader) on
Fashion-MNIST, timed to several test accuracies.

  slowlink_train.py --test TREE --label NAME --log OUT.jsonl
                    (--train ROOT | --shards URL...)
                    [--targets 0.80,0.83,0.85,0.87] [--budget 700]
                    [--eval-steps 50] [--batch 128] [--lr 0.05]
                    [--momentum 0.9] [--workers 2] [--threads 1]
                    [--buffer 1000] [--seed 1] [--repeat 1] [--test-cache F]

--train: ImageFolder + DataLoader(shuffle=True, num_workers) over a tree
(an echofs mount). --shards: the webdataset pipeline rebuilt (the library
cannot be installed here): the shard URLs shuffled each epoch (the same
order in every worker), split across the loader workers by shard
(urls[worker::workers], as webdataset's split_by_worker), each shard
streamed over HTTP as a tar and grouped into samples by key, the samples
through webdataset's shuffle buffer (--buffer, starting to yield at 100 as
its `initial`), then decoded as ImageFolder does (PIL, convert("RGB"), the
same transforms) and batched by each worker. Both train bench_train.py's
two-convolution network with SGD; the model is evaluated on the whole test
split (read once into memory) every --eval-steps steps. The clock starts
before the dataset is built (so an ImageFolder scan of the mount counts).
The run ends when every target is reached or after --budget seconds.
One JSON line per evaluation goes to --log; a summary line (reached:
target -> seconds, first_steps_s: time to the first evaluation, wait_s:
time the loop waited for batches, and the mount's counters that moved) is
printed.
"""

import argparse
import io
import json
import random
import sys
import tarfile
import time
import urllib.request

import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from torchvision import datasets

from bench_train import TF, Net, accuracy, load_test
from benchlib import read_stats


def tar_samples(urls):
    """Samples ({"__key__", ext: bytes}) of each tar shard at urls, streamed
    in order; members grouped by key as webdataset does (the name up to the
    first dot of its last component)."""
    for url in urls:
        with urllib.request.urlopen(url, timeout=120) as resp:
            cur = None
            with tarfile.open(fileobj=resp, mode="r|") as tf:
                for m in tf:
                    if not m.isfile():
                        continue
                    slash = m.name.rfind("/") + 1
                    dot = m.name.find(".", slash)
                    if dot < 0:
                        continue
                    key, ext = m.name[:dot], m.name[dot + 1:]
                    if cur is not None and cur["__key__"] != key:
                        yield cur
                        cur = None
                    if cur is None:
                        cur = {"__key__": key}
                    cur[ext] = tf.extractfile(m).read()
            if cur is not None:
                yield cur


def shuffle_buffer(data, bufsize, initial, rng):
    """webdataset's shuffle(bufsize, initial): the buffer fills two samples
    per sample taken until full, yields from `initial` on, then drains."""
    initial = min(initial, bufsize)
    buf = []
    for sample in data:
        buf.append(sample)
        if len(buf) < bufsize:
            try:
                buf.append(next(data))
            except StopIteration:
                pass
        if len(buf) >= initial:
            k = rng.randrange(len(buf))
            buf[k], buf[-1] = buf[-1], buf[k]
            yield buf.pop()
    rng.shuffle(buf)
    yield from buf


def decode(sample):
    """As ImageFolder's loader: PIL, convert("RGB"), then the transforms."""
    img = Image.open(io.BytesIO(sample["jpg"])).convert("RGB")
    return TF(img), int(sample["cls"].decode().strip())


class ShardStream(IterableDataset):
    """The webdataset-equivalent reader (see the module text)."""

    def __init__(self, urls, seed, bufsize, initial=100):
        self.urls, self.seed = list(urls), seed
        self.bufsize, self.initial = bufsize, initial
        self.epoch = 0

    def __iter__(self):
        info = get_worker_info()
        wid, n = (info.id, info.num_workers) if info else (0, 1)
        self.epoch += 1  # persistent workers keep this object
        order = list(self.urls)
        random.Random(self.seed * 1000 + self.epoch).shuffle(order)
        rng = random.Random("%d/%d/%d" % (self.seed, self.epoch, wid))
        samples = shuffle_buffer(tar_samples(order[wid::n]), self.bufsize,
                                 self.initial, rng)
        return (decode(s) for s in samples)


def make_loader(a):
    common = dict(batch_size=a.batch, num_workers=a.workers,
                  persistent_workers=a.workers > 0)
    if a.shards:
        return DataLoader(ShardStream(a.shards, a.seed, a.buffer), **common)
    ds = datasets.ImageFolder(a.train, transform=TF)
    return DataLoader(ds, shuffle=True, drop_last=True,
                      generator=torch.Generator().manual_seed(a.seed), **common)


def counters(st0, st1):
    """The mount's numeric counters that moved during the run."""
    out = {}
    for k, v in (st1 or {}).items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            d = v - (st0 or {}).get(k, 0)
            if d:
                out[k] = round(d, 3) if isinstance(d, float) else d
    return out


def train(a, x, y, log):
    torch.manual_seed(a.seed)
    targets = sorted(float(t) for t in a.targets.split(","))
    st0 = read_stats(a.train) if a.train else None
    t0 = time.monotonic()
    loader = make_loader(a)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    steps = seen = 0
    wait = 0.0
    reached, first, acc = {}, None, 0.0
    done = False
    while not done:
        it = iter(loader)
        while not done:
            t = time.monotonic()
            try:
                xb, yb = next(it)
            except StopIteration:
                break
            wait += time.monotonic() - t
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
            steps += 1
            seen += len(yb)
            over = time.monotonic() - t0 >= a.budget
            if steps % a.eval_steps and not over:
                continue
            now = round(time.monotonic() - t0, 2)
            acc = accuracy(model, x, y)
            first = first if first is not None else now
            for tg in targets:
                if acc >= tg and str(tg) not in reached:
                    reached[str(tg)] = now
            rec = {"label": a.label, "repeat": a.repeat, "time_s": now,
                   "step": steps, "seen": seen, "wait_s": round(wait, 2),
                   "acc": round(acc, 4)}
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print("%s t=%6.1fs step=%5d wait=%6.1fs acc=%.4f" % (
                a.label, now, steps, wait, acc), file=sys.stderr)
            done = over or len(reached) == len(targets)
    return {"label": a.label, "repeat": a.repeat, "reached": reached,
            "targets": targets, "first_steps": a.eval_steps,
            "first_steps_s": first, "wait_s": round(wait, 2),
            "time_s": round(time.monotonic() - t0, 2), "steps": steps,
            "seen": seen, "acc": round(acc, 4), "budget_s": a.budget,
            "mount": counters(st0, read_stats(a.train)) if a.train else {}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--train", help="ImageFolder root (an echofs mount)")
    src.add_argument("--shards", nargs="+", help="tar shard URLs (streamed)")
    ap.add_argument("--test", required=True, help="test split ImageFolder tree")
    ap.add_argument("--test-cache", help="tensor file for the test split")
    ap.add_argument("--label", default="run")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--log", required=True, help="JSON lines, appended")
    ap.add_argument("--targets", default="0.80,0.83,0.85,0.87")
    ap.add_argument("--budget", type=float, default=700.0, help="seconds")
    ap.add_argument("--eval-steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--buffer", type=int, default=1000, help="shuffle buffer")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    x, y = load_test(a.test, a.test_cache)
    with open(a.log, "a") as log:
        print(json.dumps(train(a, x, y, log)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
