"""test_over_s3.py - the suite's exact-mount checks run once more over an
s3:// source: the same test functions as test_tree.py, test_echo.py and
test_preprocess.py, collected here a second time with the `nginx` and
`fault_server` fixtures replaced by the session's S3 stand-in (s3rver behind
the verifying gateway, tests/integration/s3stack.py), so every byte comes
through signed requests. The tests listed below are the ones marked for it:
sha256 of every file (train split with its index beside the shards, test
split indexed at mount), layout, echo same-class checks and preprocessing.
Fault injection's one use there, a throttle ("slow:N" per connection, so
that echoing has work to do), points the mount at a second gateway that
sends every reply at N bytes/s."""

import os
import re
import subprocess

import pytest

import helpers

pytest.importorskip("botocore", reason="python3-botocore is not installed")

from helpers import free_port, stop_proc, wait_port  # noqa: E402
from s3stack import GATEWAY, clean_aws_env  # noqa: E402
from test_tree import (  # noqa: E402,F401
    test_train_tree_byte_identical, test_test_split_indexed_at_mount,
    test_layout_listing_and_read_only, test_eight_concurrent_readers)
from test_echo import (  # noqa: E402,F401
    refs, test_every_open_serves_a_sample_of_its_class,
    test_readers_see_consistent_files, test_stat_and_ls_do_not_consume_samples)
from test_echo import test_eight_concurrent_readers as \
    test_echo_eight_concurrent_readers  # noqa: E402,F401
from test_preprocess import (  # noqa: E402,F401
    test_exact_ppm_files_have_one_size_and_the_right_content,
    test_echoes_before_augment_differ, test_echoes_after_augment_are_identical)


class S3Source:
    """What those tests use of nginx (url, test_index) and of the fault
    server (source, index, set_faults), for bucket "dset"."""

    def __init__(self, st, test_index):
        self.stack = st
        self.url = "s3://dset"
        self.test_index = self.index = test_index
        self.source = helpers.source_of(self.url, "test")
        self.slow = {}  # rate -> (gateway process, URL)

    def set_faults(self, *rules):
        """Only "PATTERN=slow:N" is understood: the mounts that follow go
        through a gateway sending N bytes/s per reply."""
        for rule in rules:
            m = re.fullmatch(r"\S+=slow:(\d+)", rule)
            assert m, "no S3 counterpart for fault %r" % rule
            os.environ["AWS_ENDPOINT_URL_S3"] = self.slow_gateway(int(m[1]))

    def slow_gateway(self, rate):
        if rate not in self.slow:
            st, port = self.stack, free_port()
            gw = subprocess.Popen(
                [helpers.PYTHON, GATEWAY, "--upstream", st.s3url, "--keys",
                 st.keys, "--port", str(port), "--log", st.log,
                 "--rate", str(rate)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.slow[rate] = (gw, "http://127.0.0.1:%d" % port)
            wait_port(port, gw, "slow gateway")
        return self.slow[rate][1]

    def stop(self):
        for gw, _ in self.slow.values():
            stop_proc(gw)


@pytest.fixture(scope="module")
def s3_source(s3_session, dataset, tmp_path_factory):
    s3_session.ensure_train()
    path = str(tmp_path_factory.mktemp("s3idx") / "test.echofs-index")
    helpers.write_index(path, [("s3://dset/test/" + os.path.basename(p), p, None)
                               for p in dataset.shards("test")])
    src = S3Source(s3_session, path)
    try:
        yield src
    finally:
        src.stop()


@pytest.fixture(autouse=True)
def s3_env(s3_source, monkeypatch, tmp_path):
    """Keys and endpoint from the environment, nothing else of AWS's; no
    region, so each mount asks the bucket for it."""
    clean_aws_env(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_source.stack.url)
    s3_source.stack.requests()
    yield
    bad = [r for r in s3_source.stack.requests() if r["verdict"] != "ok"]
    assert not bad, "requests the gateway refused: %s" % bad[:3]


@pytest.fixture
def nginx(s3_source):
    return s3_source


@pytest.fixture
def fault_server(s3_source):
    return s3_source
