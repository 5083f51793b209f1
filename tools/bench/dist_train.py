#!/usr/bin/python3
"""dist_train.py - data-parallel training of bench_train.py's small CNN on
Fashion-MNIST over W echofs mounts (one per simulated node) with
torch.distributed (gloo, CPU) and DistributedDataParallel; reports the time
to a target test accuracy, fresh examples per node and in total.

  dist_train.py --mounts M0,M1,... --test ROOT --log OUT.jsonl
                [--partitioned] [--label NAME] [--target 0.87] [--budget 300]
                [--eval-seconds 5] [--eval-subset 2000] [--batch 64]
                [--lr 0.003] [--workers 2] [--threads 1] [--seed 0]
                [--test-cache FILE] [--port 29533] [--keep-going]

Run without --rank it is the launcher: it reads the test split once (into
--test-cache), starts one trainer process per mount (rank r reads mount r)
and prints one JSON summary line: rank 0's time to --target and accuracy,
every rank's fresh examples (fresh_served from its mount's .echofs/stats)
and their sum.

Sampler: with --partitioned each mount already shows only its node's part
(echofs -o rank=r,world=W), so every rank shuffles its own tree with a plain
RandomSampler. Without it (the baseline: W mounts each showing the whole
dataset) rank r uses DistributedSampler(num_replicas=W, rank=r), reshuffled
every pass, as a PyTorch user would. The loop never ends on a pass boundary:
every step is a DDP all-reduce, and rank 0 broadcasts after each step
whether to stop, so all ranks take the same number of steps even when their
parts differ in length. Rank 0 evaluates (bench_train.py's Run: a fixed
2,000-image subset every --eval-seconds, the whole test split confirms the
target) while the others wait in the broadcast; wall time includes that, as
in bench_train.py. The batch is per rank (W x --batch per optimiser step).
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler  # noqa: E402
from torchvision import datasets  # noqa: E402

from bench_train import TF, Net, Run, echofs_stats, load_test  # noqa: E402


def make_loader(a, mount):
    ds = datasets.ImageFolder(mount, transform=TF)
    if a.partitioned:
        sampler = RandomSampler(ds, generator=torch.Generator().manual_seed(a.seed * 1000 + a.rank))
    else:
        sampler = DistributedSampler(ds, num_replicas=a.world, rank=a.rank,
                                     shuffle=True, seed=a.seed, drop_last=True)
    loader = DataLoader(ds, batch_size=a.batch, sampler=sampler, drop_last=True,
                        num_workers=a.workers, persistent_workers=a.workers > 0)
    return ds, sampler, loader


def batches(sampler, loader):
    """Endless batches; a new DistributedSampler order every pass."""
    epoch = 0
    while True:
        if isinstance(sampler, DistributedSampler):
            sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def decide(a, run, model):
    """Rank 0: evaluate when due; returns 1 to stop everyone."""
    if run.due():
        run.evaluate(model.module)
        if run.result and not a.keep_going:
            return 1
    return 1 if time.monotonic() - run.t0 >= a.budget else 0


def train_rank(a):
    mount = a.mounts[a.rank]
    torch.manual_seed(a.seed)  # same initial weights on every rank
    ds, sampler, loader = make_loader(a, mount)
    model = DistributedDataParallel(Net())
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    run = None
    if a.rank == 0:
        a.train = mount
        run = Run(a, load_test(a.test, a.test_cache))
    s0 = echofs_stats(mount)
    dist.barrier()
    t0 = time.monotonic()
    if run:
        run.start()
    stop = torch.zeros(1, dtype=torch.int32)
    steps = 0
    for x, y in batches(sampler, loader):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        steps += 1
        if run:
            run.steps, run.seen = steps, steps * a.batch * a.world
            stop[0] = decide(a, run, model)
        dist.broadcast(stop, 0)
        if stop[0]:
            break
    st = echofs_stats(mount)
    mine = {"rank": a.rank, "mount": mount, "samples_in_tree": len(ds), "steps": steps,
            "wall_s": round(time.monotonic() - t0, 2),
            "fresh": st.get("fresh_served", 0) - s0.get("fresh_served", 0),
            "echoes": st.get("echoes_served", 0) - s0.get("echoes_served", 0)}
    if run:
        res = run.result or dict(run.evaluate(model.module, final=True), reached=False)
        mine["result"] = res
    print(json.dumps(mine), flush=True)


def launch(a):
    """Start one process per mount; merge their lines into one summary."""
    if a.test_cache:
        load_test(a.test, a.test_cache)  # read once here, not W times at once
    procs = []
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port))
    for r in range(a.world):
        cmd = [sys.executable, os.path.abspath(__file__), "--rank", str(r)] + sys.argv[1:]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    while any(p.poll() is None for p in procs):
        if any(p.poll() for p in procs):  # one rank died: the rest would wait forever
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.2)
    lines = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        print("dist_train.py: a rank failed: %s" % [p.returncode for p in procs], file=sys.stderr)
        return 1
    ranks = sorted((json.loads(ln.strip().splitlines()[-1]) for ln in lines), key=lambda d: d["rank"])
    res = ranks[0].pop("result")
    res.update({"world": a.world, "partitioned": a.partitioned, "target": a.target,
                "budget_s": a.budget, "fresh": sum(d["fresh"] for d in ranks),
                "fresh_per_rank": [d["fresh"] for d in ranks],
                "echoes": sum(d["echoes"] for d in ranks),
                "samples_per_rank": [d["samples_in_tree"] for d in ranks]})
    print(json.dumps(res))
    return 0


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mounts", required=True, help="comma-separated, one per rank")
    ap.add_argument("--test", required=True)
    ap.add_argument("--partitioned", action="store_true",
                    help="mounts are rank/world parts: plain RandomSampler per rank")
    ap.add_argument("--label", default="dist")
    ap.add_argument("--repeat", type=int, default=1, help="recorded with every line")
    ap.add_argument("--log", required=True, help="JSON lines, appended (rank 0)")
    ap.add_argument("--target", type=float, default=0.87)
    ap.add_argument("--budget", type=float, default=300.0, help="seconds")
    ap.add_argument("--eval-seconds", type=float, default=5.0)
    ap.add_argument("--eval-steps", type=int, default=0, help="overrides --eval-seconds")
    ap.add_argument("--eval-subset", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=64, help="per rank")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers per rank")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--test-cache", help="tensor file for the test split")
    ap.add_argument("--port", type=int, default=29533, help="rendezvous port on 127.0.0.1")
    ap.add_argument("--keep-going", action="store_true")
    ap.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.mounts = [m for m in a.mounts.split(",") if m]
    a.world = len(a.mounts)
    return a


def main():
    a = parse()
    torch.set_num_threads(a.threads)
    if a.rank < 0:
        return launch(a)
    dist.init_process_group("gloo", rank=a.rank, world_size=a.world,
                            init_method="tcp://127.0.0.1:%d" % a.port)
    try:
        train_rank(a)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
