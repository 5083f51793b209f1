"""conftest.py - fixtures of the echofs integration suite: the packed
Fashion-MNIST dataset with its reference tree, nginx, the fault server and a
mount helper that always unmounts.

Layout of the session data dir:
  www/train/train-0000NN.tar + train.echofs-index   (index beside the shards)
  www/test/test-0000NN.tar                          (no index: echofs indexes)
  www/hostile/<case>.tar                            (tests/integration/hostile)
  ref/train/<label>/<key>.jpg, ref/test/...        (echofs-pack --tree)
  fault/test/...                                    (hard links, fault server root)
"""

import json
import os
import subprocess
import sys
import time

import pytest

import helpers
from helpers import PACK, PYTHON, FAULT_SERVER, Mount, TRAIN_SHARDS, TEST_SHARDS

sys.path.insert(0, os.path.join(helpers.REPO, "tools", "dev"))
import nginx as nginx_mod  # noqa: E402  (tools/dev/nginx.py)


# ---- test tiers -------------------------------------------------------------
# `bash tools/test.sh` (the README's everyday command) runs the fast tier:
# the unit suites and the tests named here, about 5 minutes on 2 cores with
# the build. Every other test is marked `slow` and runs with
# `tools/test.sh --full` and in CI. Chosen for what they cover per second
# (`pytest --durations=0` over the whole suite): real mounts of the tree and
# its reads, an echo mount, a preprocessing mount, a failing server and S3
# signing, plus the cheap checks (docs, --check, hostile tar names). A name
# covers every parameter of that test; a name that is not a test in its
# file stops the run, so renaming a test cannot drop it from the tier.
FAST = {
    # the tree and its reads: every file of both splits, byte for byte
    "test_tree.py": ["test_layout_listing_and_read_only", "test_stats_counts",
                     "test_train_tree_byte_identical",
                     "test_test_split_indexed_at_mount"],
    # an echo mount, a preprocessing mount, image formats
    "test_echo.py": ["test_every_open_serves_a_sample_of_its_class",
                     "test_echo_mount_is_read_only_but_config",
                     "test_readers_see_consistent_files"],
    "test_echo_serve.py": ["test_echo_file_read_sends_no_read_request",
                           "test_echo_ppm_is_the_same_bytes_whatever_the_reads"],
    "test_preprocess.py": ["test_exact_ppm_files_have_one_size_and_the_right_content",
                           "test_bad_images_fail_cleanly",
                           "test_echoes_after_augment_are_identical"],
    "test_image_formats.py": ["test_broken_png_is_eio",
                              "test_echo_mount_augments_png_and_webp",
                              "test_exact_mount_converts_png_and_webp"],
    # faults and failures
    "test_faults.py": ["test_truncated_body_is_resumed",
                       "test_ignore_range_uncached",
                       "test_header_file_reaches_server"],
    "test_failures.py": ["test_corrupt_index_fails_fast",
                         "test_shard_404_at_index_time_fails_fast",
                         "test_unwritable_cache_dir_serves_uncached",
                         "test_unreachable_server_fails_fast"],
    "test_integrity.py": ["test_echo_and_prep_mounts_see_only_checked_bytes",
                          "test_moved_members_without_etag"],
    "test_hostile.py": ["test_hostile_shard"],
    "test_names.py": ["test_index_names_are_skipped_one_by_one"],
    "test_liveness.py": ["test_mount_over_live_fuse_mount_is_refused"],
    # S3 signing against a verifying gateway, and botocore's signer
    "test_s3.py": ["test_brace_source_every_request_signed",
                   "test_session_token_sent_and_checked",
                   "test_wrong_secret_fails_mount",
                   "test_unknown_key_and_unsigned",
                   "test_no_such_bucket_and_key",
                   "test_no_credentials_names_sources",
                   "test_group_readable_credentials_file_refused"],
    "test_sigv4_diff.py": ["test_direct_requests_match_botocore",
                           "test_dot_segment_keys_match_botocore"],
    "test_tls.py": ["test_private_ca_through_ca_file"],
    # the command line, the tools, docs and the rest of the face
    "test_docs.py": ["test_echofs_options_agree", "test_tool_flags_agree",
                     "test_every_option_listed_once",
                     "test_examples_use_real_options",
                     "test_doc_links_resolve",
                     "test_version_names_the_libraries"],
    "test_check.py": ["test_check_takes_source_alone",
                      "test_check_with_index_beside",
                      "test_check_without_index_says_it_would_build"],
    "test_mount_helper.py": ["test_fstab_bad_option_fails_cleanly",
                             "test_fstab_line", "test_mount_t_fuse_echofs"],
    "test_metrics.py": ["test_metrics_bad_address_fails_mount",
                        "test_metrics_endpoint_text",
                        "test_metrics_port_in_use_fails_mount"],
    "test_nodes.py": ["test_bad_rank_or_world_fails_the_mount",
                      "test_rank_and_world_from_the_environment",
                      "test_uneven_parts_are_trimmed_to_equal_counts",
                      "test_echo_ranks_serve_only_their_part"],
    "test_top.py": ["test_help_and_version", "test_exact_mount_shows_fetch_and_cache",
                    "test_counter_reset_shows_no_rate",
                    "test_strict_parser_counts_malformed_lines"],
    "test_zerocopy.py": ["test_python_open_costs_one_ioctl_per_file",
                         "test_bytes_changed_on_disk_after_the_check_are_not_spliced"],
    "test_security.py": ["test_other_user_cannot_steer_an_allow_other_mount",
                         "test_image_above_decode_mem_is_refused"],
    # the most-changed areas, by what each covers per second (issue 50;
    # --durations=0 on 2 cores: about 25 s for all of these together)
    "test_exact_first.py": ["test_local_paths_are_served_their_own_bytes",
                            "test_exact_first_off_and_augment_keep_the_pool",
                            "test_a_cold_path_is_echoed",
                            "test_a_bad_own_image_is_echoed_and_counted_once",
                            "test_a_bad_image_on_a_mount_gone_exact_reads_a_good_one",
                            "test_a_bad_own_image_after_its_class_is_served",
                            "test_a_class_of_bad_images_fails_at_once",
                            "test_a_warm_mount_decodes_nothing_for_the_pool"],
    "test_signals.py": ["test_user_signals_leave_the_mount_serving",
                        "test_signal_after_logrotate_makes_a_new_log_file"],
    "test_shared_cache.py": ["test_second_mount_keeps_first_mounts_downloads"],
    # the files a user names: special files, log_file, libfuse's loop
    "test_inputs.py": ["test_a_fifo_input_fails_at_once_naming_its_option",
                       "test_a_fifo_credentials_file_fails_at_once",
                       "test_log_file_symlink_is_refused_at_mount",
                       "test_a_reopen_onto_a_symlink_keeps_the_old_file",
                       "test_no_loop_config_is_a_failed_start_not_a_crash"],
    # the daemon without mount privileges, probes, the Kubernetes manifests
    # (issue 49; --durations=0 on 2 cores under load: about 17 s together)
    "test_fd_mount.py": ["test_inherited_descriptor_served_by_nobody",
                         "test_descriptor_over_a_unix_socket",
                         "test_sender_stopped_first_unmounts_and_the_daemon_exits",
                         "test_bad_descriptor_is_one_line",
                         "test_healthz_answers_probes"],
    "test_manifests.py": ["test_docs_manifests_pass_the_check",
                          "test_check_catches",
                          "test_manifests_use_real_options"],
}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: not in the fast tier (tools/test.sh runs "
        "-m 'not slow'; tools/test.sh --full runs everything); see FAST in "
        "tests/integration/conftest.py")


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(os.path.abspath(__file__))
    gone = [f for f in FAST if not os.path.exists(os.path.join(here, f))]
    if gone:
        raise pytest.UsageError("conftest.py FAST names missing files: %s"
                                % ", ".join(gone))
    checked = set()
    for item in items:
        fname = os.path.basename(str(item.fspath))
        names = FAST.get(fname, ())
        if fname not in checked:
            checked.add(fname)
            missing = [n for n in names if not hasattr(item.module, n)]
            if missing:
                raise pytest.UsageError(
                    "conftest.py FAST names %s, not tests in %s"
                    % (", ".join(missing), fname))
        if getattr(item, "originalname", item.name) not in names:
            item.add_marker(pytest.mark.slow)


def pytest_runtest_makereport(item, call):
    if call.when == "call":
        item.echofs_failed = call.excinfo is not None


def echofs_works():
    try:
        r = subprocess.run([helpers.ECHOFS, "-V"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


@pytest.fixture(scope="session", autouse=True)
def require_echofs():
    if not os.path.exists("/dev/fuse"):
        pytest.skip("/dev/fuse is missing: FUSE mounts cannot run here")
    if not echofs_works():
        pytest.fail("%s -V fails: build echofs first (ECHOFS_BUILD=%s)"
                    % (helpers.ECHOFS, helpers.BUILD))


class Dataset:
    def __init__(self, root):
        self.root = root
        self.www = os.path.join(root, "www")
        self.ref = os.path.join(root, "ref")
        self._ref_hashes = {}

    def shard_dir(self, split):
        return os.path.join(self.www, split)

    def shards(self, split):
        d = self.shard_dir(split)
        return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".tar"))

    def ref_dir(self, split):
        return os.path.join(self.ref, split)

    def ref_hashes(self, split):
        if split not in self._ref_hashes:
            self._ref_hashes[split] = helpers.walk(self.ref_dir(split))
        return self._ref_hashes[split]


def pack(split, www, ref):
    out = os.path.join(www, split)
    r = subprocess.run([PACK, "--split", split, "--out", out,
                        "--tree", os.path.join(ref, split)],
                       capture_output=True, text=True)
    assert r.returncode == 0, "echofs-pack failed: %s" % r.stderr


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("data"))
    ds = Dataset(root)
    for split in ("train", "test"):
        pack(split, ds.www, ds.ref)
    gen = os.path.join(os.path.dirname(__file__), "hostile", "gen_hostile.py")
    subprocess.run([PYTHON, gen, os.path.join(ds.www, "hostile"),
                    "--tag", "t%d" % os.getpid()], check=True, capture_output=True)
    assert len(ds.shards("train")) == TRAIN_SHARDS
    assert len(ds.shards("test")) == TEST_SHARDS
    return ds


def index_for(base_url, split, shards, path):
    """Write an index whose URLs and ETags come from the server at base_url."""
    entries = []
    for local in shards:
        url = "%s/%s/%s" % (base_url, split, os.path.basename(local))
        entries.append((url, local, helpers.http_etag(url)))
    helpers.write_index(path, entries)


@pytest.fixture(scope="session")
def nginx(dataset, tmp_path_factory):
    state = str(tmp_path_factory.mktemp("nginx"))
    srv = nginx_mod.Nginx(dataset.www, state)
    try:
        # The train split gets its index beside the shards, where echofs
        # looks first; the test split has none, so echofs indexes it.
        index_for(srv.url, "train", dataset.shards("train"),
                  os.path.join(dataset.shard_dir("train"), "train.echofs-index"))
        # For cold mounts of the test split: passed as index=, not beside.
        srv.test_index = os.path.join(state, "test.echofs-index")
        index_for(srv.url, "test", dataset.shards("test"), srv.test_index)
        yield srv
    finally:
        srv.stop()


class FaultServer:
    def __init__(self, root, workdir):
        self.root = root
        port_file = os.path.join(workdir, "port")
        self.log = open(os.path.join(workdir, "fault_server.log"), "w")
        self.proc = subprocess.Popen(
            [PYTHON, FAULT_SERVER, "--root", root, "--port", "0",
             "--port-file", port_file],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("fault server did not start")
            time.sleep(0.05)
        with open(port_file) as f:
            self.port = int(f.read())
        self.url = "http://127.0.0.1:%d" % self.port

    def set_faults(self, *rules):
        helpers.http_get(self.url + "/_faults", data="\n".join(rules).encode(),
                         method="PUT")

    def reset_stats(self):
        helpers.http_get(self.url + "/_reset_stats", data=b"", method="POST")

    def stats(self):
        return json.loads(helpers.http_get(self.url + "/_stats"))

    def last_headers(self):
        return json.loads(helpers.http_get(self.url + "/_last_headers"))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="session")
def fault_server_session(dataset, tmp_path_factory):
    work = str(tmp_path_factory.mktemp("fault"))
    root = os.path.join(work, "root")
    os.makedirs(os.path.join(root, "test"))
    for src in dataset.shards("test"):
        os.link(src, os.path.join(root, "test", os.path.basename(src)))
    srv = FaultServer(root, work)
    try:
        srv.index = os.path.join(work, "test.echofs-index")
        index_for(srv.url, "test", sorted(
            os.path.join(root, "test", n) for n in os.listdir(os.path.join(root, "test"))),
            srv.index)
        srv.source = helpers.source_of(srv.url, "test")
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def fault_server(fault_server_session):
    """The session fault server with no faults and zeroed statistics."""
    fault_server_session.set_faults()
    fault_server_session.reset_stats()
    yield fault_server_session
    fault_server_session.set_faults()


@pytest.fixture
def mounter(tmp_path, request):
    """mounter(source, cache_dir=None, opts=None, name="mnt", check=True)
    runs echofs and returns the Mount; with check=True a failing mount fails
    the test. Every mount is unmounted at teardown; the logs are printed when
    the test failed."""
    mounts = []

    def make(source, cache_dir=None, opts=None, name=None, check=True, timeout=120):
        m = Mount(str(tmp_path), source, cache_dir, opts,
                  name or "mnt%d" % len(mounts))
        mounts.append(m)
        r = m.start(timeout=timeout)
        if check:
            assert r.returncode == 0, "echofs failed (rc %d): %s\nlog:\n%s" % (
                r.returncode, r.stderr.strip(), m.log()[-3000:])
        return m

    yield make
    for m in mounts:
        m.umount()
    if getattr(request.node, "echofs_failed", False):
        for m in mounts:
            print("==== %s: %s\n%s" % (m.mnt, " ".join(m.argv()), m.log()[-20000:]))


@pytest.fixture
def tmpfs(tmp_path):
    """tmpfs(size, ro=False) mounts a small tmpfs and returns its path."""
    made = []

    def make(size, ro=False):
        d = os.path.join(str(tmp_path), "tmpfs%d" % len(made))
        os.makedirs(d)
        opts = "size=%s%s" % (size, ",ro" if ro else "")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", d],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip("cannot mount tmpfs: %s" % r.stderr.strip())
        made.append(d)
        return d

    yield make
    for d in made:
        subprocess.run(["umount", d], capture_output=True)
        if helpers.mount_entry(d) is not None:
            subprocess.run(["umount", "-l", d], capture_output=True)


@pytest.fixture
def private_nginx(dataset, tmp_path):
    """A private nginx over www that a test may stop."""
    srv = nginx_mod.Nginx(dataset.www, os.path.join(str(tmp_path), "nginx"))
    yield srv
    srv.stop()



@pytest.fixture(scope="session")
def s3_session(dataset, tmp_path_factory):
    """One S3 stand-in (s3rver behind the verifying gateway) for the whole
    session, test split uploaded (tests/integration/s3stack.py)."""
    import s3stack
    pytest.importorskip("botocore", reason="python3-botocore is not installed")
    if not os.path.exists(s3stack.S3RVER):
        pytest.skip("s3rver is not installed (tools/dev/setup.sh installs it "
                    "into tests/s3/node_modules)")
    st = s3stack.S3Stack(str(tmp_path_factory.mktemp("s3")), dataset)
    try:
        yield st
    finally:
        st.stop()
