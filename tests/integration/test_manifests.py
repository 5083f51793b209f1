"""test_manifests.py - the Kubernetes manifests under docs/k8s/ pass
tools/dev/check_manifests.py (they parse and use only fields of the API
versions they declare; no cluster runs here), the check fails on the
mistakes it is meant to catch, and the echofs options the manifests pass
are real ones (issue 49)."""

import os
import re
import subprocess

import pytest

from helpers import ECHOFS, PYTHON, REPO

CHECK = os.path.join(REPO, "tools", "dev", "check_manifests.py")
K8S = os.path.join(REPO, "docs", "k8s")

GOOD = """apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: x
spec:
  selector:
    matchLabels: {app: x}
  template:
    metadata:
      labels: {app: x}
    spec:
      containers:
        - name: x
          image: x
          securityContext: {privileged: true}
          volumeMounts:
            - {name: m, mountPath: /m, mountPropagation: Bidirectional}
      volumes:
        - name: m
          hostPath: {path: /m, type: DirectoryOrCreate}
"""


def run_check(*paths):
    try:
        import yaml  # noqa: F401
    except ImportError:
        pytest.skip("python3-yaml is missing (apt-get install python3-yaml)")
    return subprocess.run([PYTHON, CHECK] + list(paths), capture_output=True,
                          text=True, timeout=60)


def test_docs_manifests_pass_the_check():
    r = run_check()
    assert r.returncode == 0, r.stdout + r.stderr
    names = sorted(os.listdir(K8S))
    assert "echofs-daemonset.yaml" in names and "echofs-unprivileged.yaml" in names
    assert "3 files, all well" in r.stdout or re.search(r"\d+ files, all well", r.stdout)


@pytest.mark.parametrize("bad, says", [
    (GOOD.replace("mountPropagation", "mountPropogation"),
     "mountPropogation: not a field of VolumeMount"),
    (GOOD.replace("privileged: true", "privileged: false"),
     "Bidirectional propagation needs a privileged container"),
    (GOOD.replace("apps/v1", "extensions/v1beta1"), "not a kind this check knows"),
    (GOOD.replace("labels: {app: x}", "labels: {app: y}"),
     "selector does not match"),
    (GOOD.replace("type: DirectoryOrCreate", "type: Dir"), "hostPath.type"),
    (GOOD.replace("image: x", "image: x\n          readinessProbe: {periodSeconds: 5}"),
     "exactly one of httpGet"),
    (GOOD.replace("image: x", "image: x\n          args: [\"$(POD_IP)\"]"),
     "$(POD_IP) is not in its env"),
    (GOOD.replace("name: m, mountPath", "name: n, mountPath"), "no volume 'n'"),
    (GOOD.replace("image: x", "image: x\n          resources: {limits: {memory: lots}}"),
     "not a quantity"),
    (GOOD + "  : [\n", "does not parse"),
])
def test_check_catches(tmp_path, bad, says):
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    assert run_check(str(good)).returncode == 0
    p = tmp_path / "bad.yaml"
    p.write_text(bad)
    r = run_check(str(p))
    assert r.returncode == 1, r.stdout
    assert says in r.stdout, r.stdout


def manifest_options():
    """The names of the -o options the manifests give echofs."""
    names = set()
    for name in os.listdir(K8S):
        with open(os.path.join(K8S, name)) as f:
            text = f.read()
        # "-o a=1,b" in a shell line, or "- -o" then "- a=1,b" in a list
        for arg in re.findall(r"-o\s+(?:- )?([a-z_][^\s'\"]*)", text):
            names |= {part.split("=")[0] for part in arg.split(",")}
    return names


def test_manifests_use_real_options():
    r = subprocess.run([ECHOFS, "--help"], capture_output=True, text=True, timeout=10)
    helped = set(re.findall(r"^ {2}-o ([a-z_]+)", r.stdout, re.M))
    used = manifest_options()
    assert {"cache_dir", "metrics", "mounted_at"} <= used, used
    assert used <= helped, "not echofs options: %s" % sorted(used - helped)
