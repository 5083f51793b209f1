"""test_mount_helper.py - echofs mounted the way fstab and systemd do it:
`mount -t fuse.echofs SOURCE DIR -o ...` and an fstab line with `mount DIR`,
both through mount.fuse3, with the options such lines carry."""

import os
import shutil
import subprocess

import pytest

import helpers
from helpers import BUILD, source_of

MOUNT_FUSE3 = "/sbin/mount.fuse3"


LINK = "/usr/local/bin/echofs"


@pytest.fixture
def echofs_on_path():
    """mount(8) runs its helpers with the standard PATH and mount.fuse3 runs
    `echofs SOURCE DIR -o OPTS` found there: link the build's binary into
    /usr/local/bin for the test, as an installed one would be."""
    ours = os.path.join(BUILD, "echofs")
    if os.path.lexists(LINK):
        if os.path.realpath(LINK) != os.path.realpath(ours):
            pytest.skip("%s exists and is not this build's echofs" % LINK)
        yield
        return
    os.symlink(ours, LINK)
    try:
        yield
    finally:
        os.unlink(LINK)


@pytest.fixture
def helper_mount(tmp_path, echofs_on_path):
    if not os.path.exists(MOUNT_FUSE3) or not shutil.which("mount"):
        pytest.skip("mount.fuse3 or mount(8) is missing (Debian fuse3, mount)")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    yield str(mnt)
    if helpers.mount_entry(str(mnt)):
        subprocess.run(["umount", str(mnt)], capture_output=True)
        if helpers.mount_entry(str(mnt)):
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)


def check_mounted(mnt, dataset):
    ent = helpers.mount_entry(mnt)
    assert ent is not None, "%s is not mounted" % mnt
    assert ent[2] == "fuse.echofs", "fstype %s" % ent[2]
    ref = dataset.ref_dir("test")
    name = sorted(os.listdir(os.path.join(ref, "3")))[7]
    with open(os.path.join(mnt, "3", name), "rb") as f:
        got = f.read()
    with open(os.path.join(ref, "3", name), "rb") as f:
        assert got == f.read()
    return ent


def opts(tmp_path, extra):
    base = "cache_dir=%s,log_file=%s,index=%s" % (
        tmp_path / "cache", tmp_path / "echofs.log", "%(index)s")
    return base + "," + extra


def test_mount_t_fuse_echofs(nginx, dataset, helper_mount, tmp_path):
    """mount -t fuse.echofs with the options fstab lines carry: _netdev and
    nofail are mount(8)'s, allow_other is libfuse's, the rest echofs's."""
    o = opts(tmp_path, "_netdev,nofail,allow_other") % {"index": nginx.test_index}
    r = subprocess.run(["mount", "-t", "fuse.echofs", source_of(nginx.url, "test"),
                        helper_mount, "-o", o], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, "mount failed: %s %s" % (r.stdout, r.stderr)
    ent = check_mounted(helper_mount, dataset)
    assert ent[0] == source_of(nginx.url, "test"), "fsname %s" % ent[0]
    assert "allow_other" in ent[3] or "allow_other" in open("/proc/self/mountinfo").read()
    r = subprocess.run(["umount", helper_mount], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert helpers.mount_entry(helper_mount) is None


def test_fstab_line(nginx, dataset, helper_mount, tmp_path):
    """An fstab line (here in a private fstab file) mounted with `mount DIR`;
    x-systemd.* options are systemd's and must not reach echofs as errors."""
    fstab = tmp_path / "fstab"
    o = opts(tmp_path, "_netdev,nofail,x-systemd.automount,noauto") % {
        "index": nginx.test_index}
    # fstab fields are separated by blanks: the source has none.
    fstab.write_text("%s %s fuse.echofs %s 0 0\n" % (
        source_of(nginx.url, "test"), helper_mount, o))
    r = subprocess.run(["mount", "--fstab", str(fstab), helper_mount],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, "mount failed: %s %s" % (r.stdout, r.stderr)
    check_mounted(helper_mount, dataset)


def test_fstab_bad_option_fails_cleanly(nginx, helper_mount, tmp_path):
    """A typo in an fstab line fails the mount with echofs's one-line error."""
    o = opts(tmp_path, "cache_sise=1G") % {"index": nginx.test_index}
    r = subprocess.run(["mount", "-t", "fuse.echofs", source_of(nginx.url, "test"),
                        helper_mount, "-o", o], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    assert "cache_sise" in r.stderr, r.stderr
    assert helpers.mount_entry(helper_mount) is None
