"""test_inputs.py - the files a user names to echofs (issue 50): a shard
list, index=, header_file= and credential files that are not regular files
fail at once naming what they are, never hang the mount; log_file is never
reached through a symlink nor appended to as another user's file, at mount
or at a reopen; a failure to set up libfuse's loop is a failed start, not a
crash. Every echofs run here has a subprocess timeout, so a hang fails."""

import os
import shutil
import signal
import subprocess
import time

import pytest

import helpers
from helpers import ECHOFS, source_of


def run(args, timeout=60, env=None):
    """echofs with args; a hang is a TimeoutExpired, a test failure."""
    return subprocess.run([ECHOFS] + args, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env=env)


def fail_one_line(m, *says):
    err = m.result.stderr
    assert m.result.returncode != 0, "started anyway: %r" % err
    assert not m.mounted
    for s in says:
        assert s in err, err


@pytest.mark.parametrize("what", ["index", "SOURCE", "header_file"])
def test_a_fifo_input_fails_at_once_naming_its_option(nginx, mounter, tmp_path,
                                                      what):
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    opts = {}
    source = source_of(nginx.url, "test")
    if what == "SOURCE":
        source = fifo
    else:
        opts[what] = fifo
    t0 = time.monotonic()
    m = mounter(source, opts=opts, check=False, timeout=60)
    fail_one_line(m, ("SOURCE " if what == "SOURCE" else what + "=") + fifo,
                  "a FIFO, not a regular file")
    assert time.monotonic() - t0 < 30


def test_check_with_a_fifo_source_fails_at_once(tmp_path):
    fifo = str(tmp_path / "list")
    os.mkfifo(fifo)
    r = run(["--check", "-o", "cache_dir=%s" % (tmp_path / "c"), fifo])
    assert r.returncode != 0
    assert "SOURCE %s: a FIFO, not a regular file" % fifo in r.stderr, r.stderr


CRED_FIFOS = {
    # the web identity token file: read through file_read_all alone (it
    # hung here); the other two are also checked as secret files first
    "token": ("s3", {"AWS_ROLE_ARN": "arn:aws:iam::1:role/x",
                     "AWS_WEB_IDENTITY_TOKEN_FILE": "{fifo}"},
              "cannot read {fifo}: not a regular file"),
    "aws_shared": ("s3", {"AWS_SHARED_CREDENTIALS_FILE": "{fifo}"},
                   "{fifo} is not a regular file"),
    "gcs_key": ("gs", {"GOOGLE_APPLICATION_CREDENTIALS": "{fifo}"},
                "{fifo} is not a regular file"),
}


@pytest.mark.parametrize("which", sorted(CRED_FIFOS))
def test_a_fifo_credentials_file_fails_at_once(tmp_path, which):
    """Files no option names, read through the same helper. The endpoint
    127.0.0.1:9 is never asked: the credential chain runs first."""
    scheme, extra, says = CRED_FIFOS[which]
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "GOOGLE_"))}
    env.update(AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_EC2_METADATA_DISABLED="true", HOME=str(tmp_path))
    env.update({k: v.format(fifo=fifo) for k, v in extra.items()})
    r = run(["--check", "-o", "cache_dir=%s,endpoint=http://127.0.0.1:9"
             % (tmp_path / "c"), "%s://bucket/x-{0..1}.tar" % scheme], env=env)
    assert r.returncode != 0, r.stdout
    assert says.format(fifo=fifo) in r.stderr, r.stderr


def test_log_file_symlink_is_refused_at_mount(nginx, mounter, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "echofs.log"
    link.symlink_to(victim)
    m = mounter(source_of(nginx.url, "test"), opts={"log_file": str(link)},
                check=False)
    fail_one_line(m, "log_file %s" % link, "symlink")
    assert victim.read_text() == "precious\n"


def test_log_file_of_another_user_is_refused_at_mount(nginx, mounter, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    theirs = tmp_path / "theirs.log"
    theirs.write_text("theirs\n")
    os.chown(theirs, 65534, 65534)
    m = mounter(source_of(nginx.url, "test"), opts={"log_file": str(theirs)},
                check=False)
    fail_one_line(m, "log_file %s" % theirs, "not this user's own file")
    assert theirs.read_text() == "theirs\n"


def test_a_reopen_onto_a_symlink_keeps_the_old_file(nginx, mounter, tmp_path):
    """logrotate's rename, then a symlink planted where the log was, then
    SIGUSR1: the daemon keeps writing the file it has open."""
    m = mounter(source_of(nginx.url, "test"))
    pids = helpers.echofs_pids(m.mnt)
    assert len(pids) == 1, pids
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    rotated = m.log_file + ".1"
    os.rename(m.log_file, rotated)
    os.symlink(victim, m.log_file)
    os.kill(pids[0], signal.SIGUSR1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(rotated) as f:
            if "cannot reopen log_file" in f.read():
                break
        time.sleep(0.1)
    with open(rotated) as f:
        text = f.read()
    assert "cannot reopen log_file" in text, text[-2000:]
    assert victim.read_text() == "precious\n"
    assert helpers.echofs_pids(m.mnt) == pids


@pytest.mark.parametrize("planted,why", [
    ("symlink", "a symlink (refused: name the file itself)"),
    ("foreign", "not this user's own file with one link (refused)"),
])
def test_a_refused_reopen_says_why(nginx, mounter, tmp_path, planted, why):
    """A reopen refused by log_set_file says why in log_file_strerror's
    words, not the raw errno ("Too many levels of symbolic links",
    "Operation not permitted")."""
    m = mounter(source_of(nginx.url, "test"))
    pids = helpers.echofs_pids(m.mnt)
    assert len(pids) == 1, pids
    rotated = m.log_file + ".1"
    os.rename(m.log_file, rotated)
    if planted == "symlink":
        os.symlink(tmp_path / "victim", m.log_file)
    else:  # another user's file
        with open(m.log_file, "w") as f:
            f.write("theirs\n")
        os.chown(m.log_file, 65534, 65534)
    os.kill(pids[0], signal.SIGUSR1)
    deadline = time.monotonic() + 30
    text = ""
    while time.monotonic() < deadline and "cannot reopen" not in text:
        time.sleep(0.1)
        with open(rotated) as f:
            text = f.read()
    line = [ln for ln in text.splitlines() if "cannot reopen log_file" in ln]
    assert line, text[-2000:]
    assert why in line[-1], line[-1]
    assert helpers.echofs_pids(m.mnt) == pids


SHIM = r"""
#include <stddef.h>
struct fuse_loop_config;
struct fuse_loop_config *fuse_loop_cfg_create(void) { return NULL; }
"""


def test_no_loop_config_is_a_failed_start_not_a_crash(nginx, tmp_path):
    """fuse_loop_cfg_create returning NULL (its out-of-memory answer),
    through an LD_PRELOAD stand-in: echofs used the NULL and crashed with
    the file system mounted."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build the LD_PRELOAD stand-in")
    src = tmp_path / "shim.c"
    src.write_text(SHIM)
    lib = tmp_path / "shim.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)],
                   check=True, timeout=60)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = dict(os.environ, LD_PRELOAD=str(lib))
    try:
        r = run(["-f", "-o", "cache_dir=%s" % (tmp_path / "c"),
                 source_of(nginx.url, "test"), str(mnt)], env=env)
    finally:
        if helpers.mount_entry(str(mnt)) is not None:
            subprocess.run(["fusermount3", "-uz", str(mnt)])
    assert r.returncode == 1, "rc %d: %s" % (r.returncode, r.stderr[-2000:])
    assert "out of memory for libfuse's loop settings" in r.stderr, r.stderr
