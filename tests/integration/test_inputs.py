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
              "cannot read {fifo}: "),
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
