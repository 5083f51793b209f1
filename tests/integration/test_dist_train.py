"""test_dist_train.py - smoke test of tools/bench/dist_train.py: two gloo
ranks, each reading its own real echofs mount, train a few seconds with DDP
and report one summary. Skips when Debian's torch/torchvision are absent."""

import json
import os
import shutil
import socket
import subprocess

import pytest

import helpers
from helpers import PYTHON, source_of

TRAINER = os.path.join(helpers.REPO, "tools", "bench", "dist_train.py")


def have_torch():
    r = subprocess.run([PYTHON, "-c", "import torch, torchvision"], capture_output=True)
    return r.returncode == 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def small_tree(src, dst, per_class):
    """The first per_class images of every class: a quick test split."""
    for cls in sorted(os.listdir(src)):
        os.makedirs(os.path.join(dst, cls))
        for name in sorted(os.listdir(os.path.join(src, cls)))[:per_class]:
            shutil.copy(os.path.join(src, cls, name), os.path.join(dst, cls, name))


def run_trainer(mounts, tmp_path, dataset, *extra):
    test = str(tmp_path / "eval")
    if not os.path.isdir(test):
        small_tree(dataset.ref_dir("test"), test, 20)
    log = str(tmp_path / "evals.jsonl")
    r = subprocess.run([PYTHON, TRAINER, "--mounts", ",".join(m.mnt for m in mounts),
                        "--test", test, "--log", log, "--budget", "3", "--eval-seconds", "1",
                        "--eval-subset", "100", "--target", "1.01", "--workers", "1",
                        "--port", str(free_port())] + list(extra),
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["world"] == len(mounts)
    assert res["step"] > 0 and res["seen"] == res["step"] * 64 * len(mounts)
    assert res["reached"] is False and 0.0 <= res["acc_full"] <= 1.0
    with open(log) as f:
        assert len([ln for ln in f if ln.strip()]) >= 2  # evaluations were logged
    return res


@pytest.fixture
def torch_ok():
    if not have_torch():
        pytest.skip("%s cannot import torch/torchvision (apt-get install "
                    "python3-torch python3-torchvision)" % PYTHON)


def test_two_ranks_train_over_two_mounts(torch_ok, mounter, nginx, dataset, tmp_path):
    """The baseline: both mounts show everything, DistributedSampler splits it."""
    mounts = [mounter(source_of(nginx.url, "test"), opts={"index": nginx.test_index})
              for _ in range(2)]
    res = run_trainer(mounts, tmp_path, dataset)
    assert not res["partitioned"]
    assert res["samples_per_rank"] == [10000, 10000]


def test_two_ranks_train_over_their_parts(torch_ok, mounter, nginx, dataset, tmp_path):
    """-o rank=r,world=2: each rank shuffles its own part, equal in size."""
    h = subprocess.run([helpers.ECHOFS, "--help"], capture_output=True, text=True)
    if "rank=" not in h.stdout + h.stderr:
        pytest.skip("this echofs has no -o rank= (issue 12 not merged)")
    mounts = [mounter(source_of(nginx.url, "test"),
                      opts={"index": nginx.test_index, "rank": r, "world": 2})
              for r in range(2)]
    res = run_trainer(mounts, tmp_path, dataset, "--partitioned")
    assert res["partitioned"]
    n = res["samples_per_rank"]
    assert n[0] == n[1] and 0 < n[0] <= 5000
