"""test_container.py - the echofs container image (issue 49), run with
rootful podman as a user would: `--device /dev/fuse` and the capabilities
in CAPS only. Inside, the entrypoint mounts as root (echofs-fdpass send) and
echofs serves the descriptor as the image's user echofs (uid 10001) with no
capabilities; the cache is a volume. The test split is served by nginx on
the host's loopback (--network host); the container mounts on a bind
volume with rshared propagation, and the host reads the tree there, byte
for byte against `tar -x` of the shards.

The image is not built here: tools/container/build.sh builds it (minutes
cold, about a minute warm; docs/guide/containers.md). The tests skip, and
say why, when podman is missing, the image is not built, or this machine
cannot run a container at all."""

import os
import shutil
import subprocess
import time

import pytest

import helpers
from helpers import source_of
from test_fd_mount import tar_x_tree

IMAGE = os.environ.get("ECHOFS_IMAGE", "localhost/echofs:latest")
ECHOFS_UID = 10001  # the image's user echofs (tools/container/Containerfile)
# The smallest set the entrypoint works with (each one removed fails it):
# SYS_ADMIN for mount(2) (podman's seccomp profile allows mount only with
# it), CHOWN and FOWNER to give the socket to echofs and make it 0600,
# SETUID and SETGID to become echofs.
CAPS = ["--cap-drop", "all",
        "--cap-add", "SYS_ADMIN,CHOWN,FOWNER,SETUID,SETGID"]


HOST_ARGS = os.path.join(helpers.REPO, "tools", "container", "host_args.sh")


def host_args(kind):
    """What this host needs beyond podman's defaults (host_args.sh: runc
    where crun refuses the cgroup layout, ulimits where the runtime may not
    raise them)."""
    return subprocess.run([HOST_ARGS, kind], capture_output=True, text=True,
                          check=True).stdout.split()


def podman(*args, timeout=120):
    """podman with this host's global flags; `run` also gets its run flags."""
    args = list(args)
    if args[0] == "run":
        args[1:1] = host_args("run")
    return subprocess.run(["podman", *host_args("global"), *args],
                          capture_output=True, text=True, timeout=timeout)


def last_line(text):
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


@pytest.fixture(scope="module")
def image():
    """The built image, once this machine has shown it can run it."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (apt-get install podman buildah "
                    "debootstrap; then tools/container/build.sh)")
    if os.geteuid() != 0:
        pytest.skip("the container tests use rootful podman: run as root")
    if podman("image", "exists", IMAGE).returncode != 0:
        pytest.skip("image %s is not built: run tools/container/build.sh"
                    % IMAGE)
    r = podman("run", "--rm", "--pull=never", "--network", "none",
               "--entrypoint", "/bin/true", IMAGE)
    if r.returncode != 0:
        pytest.skip("this machine cannot run containers: podman run of %s "
                    "failed: %s" % (IMAGE, last_line(r.stderr)))
    return IMAGE


@pytest.fixture
def share(tmp_path):
    """A host directory that is its own shared mount (the host's / may be
    private); unmounted at teardown whatever is left on it."""
    path = str(tmp_path / "share")
    os.mkdir(path)
    subprocess.run(["mount", "--bind", path, path], check=True)
    subprocess.run(["mount", "--make-rshared", path], check=True)
    yield path
    for _ in fstypes(path):
        subprocess.run(["umount", "-l", path], capture_output=True)


def fstypes(path):
    """The types of the mounts stacked on path, bottom first."""
    return [f[2] for f in helpers.proc_mounts() if f[1] == path]


def fuse_on(path):
    return any(t.startswith("fuse") for t in fstypes(path))


@pytest.fixture
def container(tmp_path):
    """run(*args) starts a detached container; every one is
    removed at teardown, its log printed."""
    names = []

    def run(*args):
        name = "echofs-test-%d-%d" % (os.getpid(), len(names))
        names.append(name)
        r = podman("run", "-d", "--name", name, "--pull=never", *args)
        assert r.returncode == 0, "podman run failed: %s" % r.stderr
        return name

    yield run
    for name in names:
        print("==== podman logs %s\n%s" % (name, logs(name)[-5000:]))
        podman("rm", "-f", "-t", "5", name)


def logs(name):
    r = podman("logs", name)
    return r.stdout + r.stderr


def state(name):
    r = podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}",
               name)
    status, code = r.stdout.split()
    return status, int(code)


def cache_volume(tmp_path):
    cache = str(tmp_path / "cache")
    os.mkdir(cache, 0o700)
    os.chown(cache, ECHOFS_UID, ECHOFS_UID)
    return cache


def wait_fuse_mount(name, path, guard=180):
    """Until the host sees a FUSE mount on path; fails when the container
    stops first."""
    deadline = time.monotonic() + guard
    while True:
        if fuse_on(path):
            return
        status, code = state(name)
        assert status == "running", "container %s (exit %d) before mounting: %s" % (
            status, code, logs(name)[-3000:])
        assert time.monotonic() < deadline, "no mount on %s: %s" % (
            path, logs(name)[-3000:])
        time.sleep(0.2)


def daemon_status(name):
    """/proc/PID/status fields of the container's echofs, seen from the host."""
    top = podman("top", name, "hpid", "user", "comm").stdout.splitlines()
    rows = [ln.split() for ln in top[1:] if ln.split()[2:] == ["echofs"]]
    assert len(rows) == 1, top
    with open("/proc/%s/status" % rows[0][0]) as f:
        fields = dict(ln.split(":", 1) for ln in f)
    return {k: v.strip() for k, v in fields.items()}


def test_image_mounts_and_the_host_reads_the_tree(image, nginx, dataset,
                                                  share, container, tmp_path):
    want = tar_x_tree(dataset, "test", str(tmp_path / "tar-x"))
    cache = cache_volume(tmp_path)
    name = container(
        "--network", "host", "--device", "/dev/fuse", *CAPS,
        "-v", "%s:/mnt/echofs:rshared" % share,
        "-v", "%s:/var/cache/echofs" % cache,
        image, source_of(nginx.url, "test"))
    wait_fuse_mount(name, share)
    # The daemon: the image's user, no capabilities, none to gain.
    st = daemon_status(name)
    assert st["Uid"].split() == [str(ECHOFS_UID)] * 4, st["Uid"]
    assert int(st["CapEff"], 16) == 0 and int(st["CapPrm"], 16) == 0, st
    assert st["NoNewPrivs"] == "1", st["NoNewPrivs"]
    got = helpers.walk(share)
    assert set(got) == set(want), "paths differ: %s" % sorted(
        set(got) ^ set(want))[:5]
    bad = [k for k in want if got[k] != want[k]]
    assert not bad, "%d files differ, e.g. %s" % (len(bad), bad[:3])
    # The shards landed in the volume, written by the daemon's user.
    owners = {os.lstat(os.path.join(d, n)).st_uid
              for d, _, names in os.walk(cache) for n in names}
    assert owners == {ECHOFS_UID}, owners
    # podman stop sends SIGTERM: echofs exits 0, the mount goes.
    r = podman("stop", "-t", "30", name)
    assert r.returncode == 0, r.stderr
    assert state(name) == ("exited", 0), logs(name)[-3000:]
    assert not fuse_on(share), "the FUSE mount outlived the container"


def test_without_sys_admin_the_start_fails_in_one_line(image, nginx, share,
                                                       container, tmp_path):
    caps = ["--cap-drop", "all", "--cap-add", "CHOWN,FOWNER,SETUID,SETGID"]
    name = container(
        "--network", "host", "--device", "/dev/fuse", *caps,
        "-v", "%s:/mnt/echofs:rshared" % share,
        "-v", "%s:/var/cache/echofs" % cache_volume(tmp_path),
        image, source_of(nginx.url, "test"))
    r = podman("wait", name, timeout=180)
    assert r.returncode == 0, r.stderr
    assert state(name) == ("exited", 1)
    out = logs(name).strip()
    assert out == "echofs-fdpass: error: /mnt/echofs: Operation not permitted", out
    assert not fuse_on(share)
