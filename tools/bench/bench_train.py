#!/usr/bin/python3
"""bench_train.py - train a small CNN on Fashion-MNIST read through an echofs
mount with PyTorch's ImageFolder + DataLoader, and record test accuracy
against wall-clock time and fresh examples until a target accuracy.

  bench_train.py --train MNT --test ROOT --label NAME --log OUT.jsonl
                 [--target 0.87] [--budget 300] [--eval-seconds 5]
                 [--eval-steps 0] [--eval-subset 2000] [--batch 64]
                 [--lr 0.003] [--workers 2] [--threads 1] [--seed 0]
                 [--test-cache FILE] [--keep-going] [--pin]
                 [--input gray28|rgb64|gray16|tensor224]

--train is read with ImageFolder + DataLoader(shuffle=True, num_workers);
each open of <class>/<key>.jpg on an echo mount yields a sample of that class.
--test (an exact mount or a local tree) is read once into memory
(--test-cache keeps the tensors for the next runs), so evaluation costs no
I/O. Every --eval-seconds of wall time (or every --eval-steps steps) the
model is evaluated on a fixed random --eval-subset of the test split; when
that reaches --target the whole test split (10,000) decides. The run stops
at the target (unless --keep-going) or after --budget seconds of training.
Wall time includes evaluation (it is small and paid equally per second by
every run); fresh examples are fresh_served from MNT/.echofs/stats since the
first batch was asked for. One JSON line per evaluation goes to --log, and a
summary line (label, reached, time_s, fresh, served, accuracy, and the mount's
requests and decodes under "mount") is printed.
--input gray28 (default) trains on Fashion-MNIST's 28x28 JPEGs; rgb64 on
64x64 colour images (tools/bench/bench_train_decode.sh: photo-sized JPEGs
that an echofs mount decodes, resizes and crops to 64x64 PPMs) with a
network of about the same cost per pixel row, so decoding stays the slow stage.
gray16 and tensor224 are issue 29's decode-bound trainer (tools/bench/
bench_train_decode.sh --size 256 --crop 224): the mount's 224x224 PPMs
turned grey and resized to 16x16 by each DataLoader worker (gray16), or taken
as they are (ToTensor only: a reader with little work per file) and
average-pooled to 16x16 by the model (tensor224); both train the same
two-convolution network. --pin puts the model on core 1 (the accelerator's
stand-in) and the DataLoader workers on core 0 (with the echofs daemon, which
the caller pins there). The summary's wait_s is the time the training loop
spent waiting for its next batch.
"""

import argparse
import functools
import json
import os
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

from benchlib import read_stats

TF = transforms.Compose([
    transforms.Grayscale(1),
    transforms.ToTensor(),
    transforms.Normalize((0.2860,), (0.3530,)),  # Fashion-MNIST mean, std
])


TF_RGB = transforms.Compose([
    transforms.ToTensor(),
    transforms.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
])


class Net(nn.Module):
    """Two strided conv layers and one linear layer: small enough that
    Debian's CPU-only torch (generic BLAS) trains it at a few thousand
    images/s on one core, so the data path, not the model, is what a capped
    upstream slows down. The defaults take 1x28x28 (~21k parameters); rgb64
    takes 3x64x64 with a stride-4 first convolution that brings the image to
    16x16 at once, so a step costs a few times gray28's and the trainer stays
    faster than decoding a photo. side: c2's output width."""

    def __init__(self, chans=1, kernel=5, stride=2, side=7):
        super().__init__()
        self.c1 = nn.Conv2d(chans, 16, kernel, stride=stride, padding=2)
        self.c2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32 * side * side, 10)

    def forward(self, x):
        x = F.relu(self.c1(x))
        x = F.relu(self.c2(x))
        return self.fc(x.flatten(1))


def standardize(x):
    """Each image to mean 0 and deviation 1: the photos' colour ramps and
    backgrounds differ in brightness from image to image (echofs_photos.py),
    and a 16x16 grey network learns the article's shape about twice as fast
    without that offset (55% test accuracy after 15,000 images instead of
    48%)."""
    dims = tuple(range(x.dim() - 3, x.dim()))
    return (x - x.mean(dims, keepdim=True)) / (x.std(dims, keepdim=True) + 1e-3)


TF_GRAY16 = transforms.Compose([
    transforms.Grayscale(1),
    transforms.Resize(16),
    transforms.ToTensor(),
    standardize,
])


class PooledNet(nn.Module):
    """tensor224: the mount's 224x224 RGB output as it is, averaged down to
    16x16 grey in the model, then gray16's network."""

    def __init__(self):
        super().__init__()
        self.net = Net(chans=1, kernel=5, stride=2, side=4)

    def forward(self, x):
        x = F.avg_pool2d(x.mean(1, keepdim=True), 14)
        return self.net(standardize(x))


INPUTS = {"gray28": (TF, Net),
          "rgb64": (TF_RGB, functools.partial(Net, chans=3, kernel=8, stride=4, side=8)),
          "gray16": (TF_GRAY16, functools.partial(Net, chans=1, kernel=5, stride=2, side=4)),
          "tensor224": (transforms.ToTensor(), PooledNet)}


def pin_worker(_):
    """--pin: DataLoader workers share core 0 with the echofs daemon."""
    os.sched_setaffinity(0, {0})


def load_test(root, cache, tf=TF):
    if cache and os.path.exists(cache):
        return torch.load(cache)
    ds = datasets.ImageFolder(root, transform=tf)
    xs, ys = [], []
    for x, y in DataLoader(ds, batch_size=500, num_workers=2):
        xs.append(x)
        ys.append(y)
    data = (torch.cat(xs), torch.cat(ys))
    if cache:
        torch.save(data, cache + ".tmp")
        os.replace(cache + ".tmp", cache)
    return data


@torch.no_grad()
def accuracy(model, x, y):
    model.eval()
    correct = 0
    for i in range(0, len(x), 1000):
        correct += (model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item()
    model.train()
    return correct / len(x)


def echofs_stats(root):
    return read_stats(root) or {}


class Run:
    """Clock, counters and the evaluation log of one training run."""

    def __init__(self, a, test):
        self.a = a
        self.x, self.y = test
        g = torch.Generator().manual_seed(1234)  # same subset in every run
        idx = torch.randperm(len(self.x), generator=g)[:a.eval_subset]
        self.sx, self.sy = self.x[idx], self.y[idx]
        self.log = open(a.log, "a")
        self.t0 = None
        self.s0 = {}
        self.steps = self.seen = 0
        self.wait_s = 0.0
        self.next_eval_t = a.eval_seconds
        self.result = None

    def start(self):
        self.s0 = echofs_stats(self.a.train)
        self.t0 = time.monotonic()

    def since_start(self, key, st):
        return st.get(key, 0) - self.s0.get(key, 0)

    def fresh(self, st):
        """fresh_served since the start; on an echo mount gone exact
        (echo_reason "retired") the daemon no longer sees opens, and every
        image read from then on is its own path's: seen less the echoes."""
        if st.get("echo_reason") == "retired":
            return self.seen - self.since_start("echoes_served", st)
        return self.since_start("fresh_served", st)

    def due(self):
        if self.a.eval_steps:
            return self.steps % self.a.eval_steps == 0
        return time.monotonic() - self.t0 >= self.next_eval_t

    def evaluate(self, model, final=False):
        t = time.monotonic() - self.t0
        st = echofs_stats(self.a.train)
        sub = accuracy(model, self.sx, self.sy)
        full = None
        if final or sub >= self.a.target:
            full = accuracy(model, self.x, self.y)
        rec = {"label": self.a.label, "repeat": self.a.repeat, "time_s": round(t, 2), "step": self.steps,
               "seen": self.seen, "fresh": self.fresh(st),
               "echoes": self.since_start("echoes_served", st),
               "stall_s": round(self.since_start("stall_s", st), 2),
               "wait_s": round(self.wait_s, 2),
               "acc_subset": round(sub, 4),
               "acc_full": None if full is None else round(full, 4),
               "eval_s": round(time.monotonic() - self.t0 - t, 2)}
        self.log.write(json.dumps(rec) + "\n")
        self.log.flush()
        print("%s t=%6.1fs step=%5d seen=%6d fresh=%6d acc=%.4f%s" % (
            self.a.label, t, self.steps, self.seen, rec["fresh"], sub,
            "" if full is None else " full=%.4f" % full), file=sys.stderr)
        self.next_eval_t = t + self.a.eval_seconds
        if full is not None and full >= self.a.target and self.result is None:
            self.result = dict(rec, reached=True)
        return rec


def train(a, run):
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    tf, net = INPUTS[a.input]
    ds = datasets.ImageFolder(a.train, transform=tf)
    loader = DataLoader(ds, batch_size=a.batch, shuffle=True, drop_last=True,
                        num_workers=a.workers, persistent_workers=a.workers > 0,
                        generator=torch.Generator().manual_seed(a.seed),
                        worker_init_fn=pin_worker if a.pin else None)
    model = net()
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    run.start()
    last = None
    while True:
        it = iter(loader)
        while True:
            t = time.monotonic()
            try:
                x, y = next(it)
            except StopIteration:
                break
            run.wait_s += time.monotonic() - t
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            opt.step()
            run.steps += 1
            run.seen += len(y)
            if run.due():
                last = run.evaluate(model)
                if run.result and not a.keep_going:
                    return run.result
            if time.monotonic() - run.t0 >= a.budget:
                last = run.evaluate(model, final=True)
                return run.result or dict(last, reached=False)
    return last


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--label", default="run")
    ap.add_argument("--repeat", type=int, default=1, help="recorded with every line")
    ap.add_argument("--log", required=True, help="JSON lines, appended")
    ap.add_argument("--target", type=float, default=0.87)
    ap.add_argument("--budget", type=float, default=300.0, help="seconds")
    ap.add_argument("--eval-seconds", type=float, default=5.0)
    ap.add_argument("--eval-steps", type=int, default=0, help="overrides --eval-seconds")
    ap.add_argument("--eval-subset", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--test-cache", help="tensor file for the test split")
    ap.add_argument("--keep-going", action="store_true",
                    help="train the whole budget even after the target")
    ap.add_argument("--input", choices=sorted(INPUTS), default="gray28",
                    help="image kind and network (default gray28)")
    ap.add_argument("--pin", action="store_true",
                    help="model on core 1, DataLoader workers on core 0")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.pin:
        os.sched_setaffinity(0, {1})
    test = load_test(a.test, a.test_cache, INPUTS[a.input][0])
    run = Run(a, test)
    res = train(a, run)
    st = echofs_stats(a.train)
    res.update({"budget_s": a.budget, "target": a.target,
                "effective_echo": st.get("effective_echo"),
                "served": run.since_start("fresh_served", st) +
                run.since_start("echoes_served", st)})
    # What the mount did for it (since the first batch): requests and the
    # files it decoded for their own paths; the pool's stream at the end.
    res["mount"] = {k: run.since_start(k, st) for k in
                    ("lookups", "opens", "reads", "outputs_made")
                    if k in st}
    res["mount"].update({k: st[k] for k in ("fresh_in_pass", "pool_samples")
                         if k in st})
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
