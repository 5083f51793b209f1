"""test_gcs.py - gs:// sources against loopback stand-ins of Google's parts:
the session's s3rver (tests/integration/s3stack.py: bucket dset with the test
split under test/, bucket many with it among 5,000 keys under big/) behind
tests/gcs/gateway.py, which accepts
only bearer tokens issued by tests/gcs/token_server.py and not yet expired
(401 otherwise); the token server checks service-account JWTs' RS256
signatures with python3-cryptography and also plays the metadata server.
The service-account key is made at test time (never committed)."""

import json
import os
import socket
import ssl
import stat
import subprocess
import threading

import pytest

import helpers

botocore = pytest.importorskip("botocore", reason="python3-botocore is not installed")
crypto = pytest.importorskip("cryptography", reason="python3-cryptography is not installed")
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: E402

from helpers import check_tree, free_port, stop_proc, wait_port  # noqa: E402
import tls_certs  # noqa: E402

GCSDIR = os.path.join(helpers.REPO, "tests", "gcs")
EMAIL = "echofs-test@echofs-test.iam.gserviceaccount.com"
USER = {"client_id": "echofs-client.apps.googleusercontent.com",
        "client_secret": "d-FL95Q19q7MQmFpd7hHD0Ty",
        "refresh_token": "1//echofs-refresh+token/==", "type": "authorized_user"}
TEST_SRC = "gs://dset/test/test-{000000..%06d}.tar" % (helpers.TEST_SHARDS - 1)


def write_secret(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)
    os.chmod(path, 0o600)
    return path


class GcsStack:
    """The token/metadata stand-in and the GCS gateway in front of the
    session's s3rver (s3url); a fresh service-account key (its public half
    goes to the token server)."""

    def __init__(self, work, s3url):
        self.work = work
        self.procs = []
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.pem = key.private_bytes(serialization.Encoding.PEM,
                                     serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()).decode()
        self.pub = os.path.join(work, "sa.pub")
        with open(self.pub, "wb") as f:
            f.write(key.public_key().public_bytes(
                serialization.Encoding.PEM,
                serialization.PublicFormat.SubjectPublicKeyInfo))
        self.tokens = os.path.join(work, "tokens.json")
        self.tlog = os.path.join(work, "token.log")
        self.glog = os.path.join(work, "gateway.log")
        self.user = write_secret(os.path.join(work, "user.json"), USER)
        self.token_port = self.start_tokens(life=3600)
        self.port = free_port()
        self.start([helpers.PYTHON, os.path.join(GCSDIR, "gateway.py"),
                    "--upstream", s3url, "--tokens",
                    self.tokens, "--port", str(self.port), "--log", self.glog],
                   self.port, "gateway")
        self.url = "http://127.0.0.1:%d" % self.port

    def start(self, argv, port, what):
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(self.work, what + ".err"), "a"))
        self.procs.append(p)
        wait_port(port, p, what)
        return p

    def start_tokens(self, life):
        port = free_port()
        self.token_proc = self.start(
            [helpers.PYTHON, os.path.join(GCSDIR, "token_server.py"), "--pubkey",
             self.pub, "--email", EMAIL, "--tokens", self.tokens, "--user",
             self.user, "--life", str(life), "--port", str(port), "--log",
             self.tlog], port, "token_server")
        return port

    def restart_tokens(self, life):
        stop_proc(self.token_proc)
        self.procs.remove(self.token_proc)
        self.token_port = self.start_tokens(life)

    def sa_key(self, path, pem=None, token_port=None):
        return write_secret(path, {
            "type": "service_account", "project_id": "echofs-test",
            "private_key_id": "0123abcd", "private_key": pem or self.pem,
            "client_email": EMAIL, "client_id": "1234567890",
            "token_uri": "http://127.0.0.1:%d/token" % (token_port or self.token_port)})

    def user_key(self, path):
        return write_secret(path, dict(USER, token_uri="http://127.0.0.1:%d/token"
                                       % self.token_port))

    def requests(self):
        return helpers.take_json_lines(self.glog)

    def token_requests(self):
        return helpers.take_json_lines(self.tlog)

    def stop(self):
        for p in reversed(self.procs):
            stop_proc(p)


@pytest.fixture(scope="module")
def gcs(s3_session, tmp_path_factory):
    """One s3rver per session (s3_session skips when it is not installed):
    starting another and uploading to it cost this module 12-18 s."""
    s3_session.ensure_many()
    st = GcsStack(str(tmp_path_factory.mktemp("gcs")), s3_session.s3url)
    try:
        yield st
    finally:
        st.stop()


@pytest.fixture
def gcp_env(monkeypatch, tmp_path, gcs):
    """No real Google files or metadata server; GOOGLE_APPLICATION_CREDENTIALS
    names a fresh service-account key."""
    for k in ("GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG",
              "GCE_METADATA_HOST", "STORAGE_EMULATOR_HOST"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    os.makedirs(str(tmp_path / "gcloud"), exist_ok=True)
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:%d" % free_port())
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS",
                       gcs.sa_key(str(tmp_path / "sa.json")))
    return monkeypatch


def failed_mount(mounter, source, opts):
    return helpers.failed_mount(mounter, source, opts, timeout=60,
                                one_line=False)


def test_exact_mount_equals_http_every_request_with_token(gcs, dataset, gcp_env,
                                                          nginx, mounter):
    gcs.requests()
    gcs.token_requests()
    m = mounter(TEST_SRC, opts={"endpoint": gcs.url})
    got = check_tree(m, dataset)
    h = mounter(helpers.source_of(nginx.url, "test"), name="http")
    assert helpers.walk(h.mnt) == got
    seen = gcs.requests()
    assert len(seen) >= helpers.TEST_SHARDS
    bad = [r for r in seen if r["verdict"] != "ok" or not r["token"]]
    assert not bad, bad[:3]
    assert [t["kind"] for t in gcs.token_requests()] == ["jwt"]
    log = m.log()
    assert "ya29." not in log and "PRIVATE KEY" not in log


def test_prefix_listing_over_several_pages(gcs, dataset, gcp_env, mounter):
    gcs.requests()
    m = mounter("gs://many/big/", opts={"endpoint": gcs.url})
    check_tree(m, dataset)
    pages = [r for r in gcs.requests() if "list-type=2" in r["path"]]
    assert len(pages) >= 3, pages
    assert sum("continuation-token=" in r["path"] for r in pages) >= 2


def test_glob_source_and_list_file(gcs, dataset, gcp_env, mounter, tmp_path):
    m = mounter("gs://dset/test/*.tar", opts={"endpoint": gcs.url})
    check_tree(m, dataset)
    lst = tmp_path / "shards.txt"
    lst.write_text("".join("gs://dset/test/%s\n" % os.path.basename(p)
                           for p in dataset.shards("test")))
    m = mounter(str(lst), opts={"endpoint": gcs.url}, name="list")
    check_tree(m, dataset)


def test_authorized_user_in_gcloud_adc_file(gcs, dataset, gcp_env, mounter,
                                            tmp_path):
    gcp_env.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    gcs.user_key(str(tmp_path / "gcloud" / "application_default_credentials.json"))
    gcs.token_requests()
    m = mounter(TEST_SRC, opts={"endpoint": gcs.url})
    check_tree(m, dataset)
    assert [t["kind"] for t in gcs.token_requests()] == ["user"]


def test_metadata_server(gcs, dataset, gcp_env, mounter):
    gcp_env.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    gcp_env.setenv("GCE_METADATA_HOST", "127.0.0.1:%d" % gcs.token_port)
    gcs.token_requests()
    m = mounter(TEST_SRC, opts={"endpoint": gcs.url})
    check_tree(m, dataset)
    assert [t["kind"] for t in gcs.token_requests()] == ["metadata"]


def test_precedence_order(gcs, gcp_env, mounter, tmp_path):
    """Key file beats the ADC file, which beats the metadata server."""
    gcp_env.setenv("GCE_METADATA_HOST", "127.0.0.1:%d" % gcs.token_port)
    gcs.user_key(str(tmp_path / "gcloud" / "application_default_credentials.json"))
    kinds = []
    for drop in (None, "GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG"):
        if drop == "CLOUDSDK_CONFIG":
            gcp_env.setenv(drop, str(tmp_path / "empty"))
        elif drop:
            gcp_env.delenv(drop)
        gcs.token_requests()
        m = mounter(TEST_SRC, opts={"endpoint": gcs.url})
        m.umount()
        kinds.append([t["kind"] for t in gcs.token_requests()])
    assert kinds == [["jwt"], ["user"], ["metadata"]]


def test_wrong_key_fails_mount_naming_it(gcs, gcp_env, mounter, tmp_path):
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = other.private_bytes(serialization.Encoding.PEM,
                              serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()).decode()
    path = gcs.sa_key(str(tmp_path / "wrong.json"), pem=pem)
    gcp_env.setenv("GOOGLE_APPLICATION_CREDENTIALS", path)
    err = failed_mount(mounter, TEST_SRC, {"endpoint": gcs.url})
    assert "invalid_grant" in err and path in err, err
    assert "Invalid JWT Signature" in err, err
    assert "PRIVATE KEY" not in err


def test_no_credentials_names_sources(gcs, gcp_env, mounter, tmp_path):
    gcp_env.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    err = failed_mount(mounter, TEST_SRC, {"endpoint": gcs.url})
    assert "no Google credentials found" in err, err
    for src in ("GOOGLE_APPLICATION_CREDENTIALS",
                str(tmp_path / "gcloud" / "application_default_credentials.json"),
                "metadata server", "unreachable"):
        assert src in err, err


def test_key_file_readable_by_others_refused(gcs, gcp_env, mounter, tmp_path):
    path = str(tmp_path / "sa.json")
    os.chmod(path, 0o644)
    err = failed_mount(mounter, TEST_SRC, {"endpoint": gcs.url})
    assert "too open" in err and path in err, err
    os.chmod(path, 0o600)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_gcs_errors_named(gcs, gcp_env, mounter):
    err = failed_mount(mounter, "gs://nobucket/x/", {"endpoint": gcs.url})
    assert "NoSuchBucket" in err, err
    err = failed_mount(mounter, "gs://dset/test/missing-{0..1}.tar",
                       {"endpoint": gcs.url})
    assert "NoSuchKey" in err or "404" in err, err
    err = failed_mount(mounter, TEST_SRC, {"endpoint": gcs.url, "no_sign": "1"})
    assert "AccessDenied" in err, err


def test_revoked_token_refetched_once_on_401(gcs, dataset, gcp_env, mounter):
    """Every live token revoked under a mounted tree: the next request gets
    401, echofs fetches a new token and tries once more; no read fails.
    The mount indexes the split (no index beside it) and a cache too small
    to keep a shard makes every read a GET after the revocation: every
    50th file is read and checked, not all 10,000 (four minutes of GETs)."""
    m = mounter(TEST_SRC, opts={"endpoint": gcs.url, "cache_size": "1M"})
    with open(gcs.tokens + ".tmp", "w") as f:
        json.dump({}, f)
    os.rename(gcs.tokens + ".tmp", gcs.tokens)
    gcs.requests()
    gcs.token_requests()
    assert helpers.read_checked_every(m, dataset.ref_hashes("test"), 50) > 100
    seen = gcs.requests()
    assert any(r["verdict"] == "AuthenticationRequired" for r in seen), seen[:5]
    assert seen[-1]["verdict"] == "ok"
    assert [t["kind"] for t in gcs.token_requests()][:1] == ["jwt"]


def test_expiring_tokens_refreshed_during_reads(gcs, dataset, gcp_env, mounter,
                                                tmp_path):
    """Tokens that live 4 s (renewed at half their life, so a new one every
    2 s), reads through a cache too small to hold the data (shards are
    fetched again and again) until requests have gone out under three
    successive tokens: no read fails. The lifetime is short so that the
    test takes seconds, not the minutes a real one would."""
    gcs.restart_tokens(life=4)
    try:
        gcp_env.setenv("GOOGLE_APPLICATION_CREDENTIALS",
                       gcs.sa_key(str(tmp_path / "sa30.json")))
        gcs.requests()
        m = mounter(TEST_SRC, opts={"endpoint": gcs.url, "cache_size": "1M"})
        seen = []

        def three_tokens():
            seen.extend(gcs.requests())
            return len({r["token"] for r in seen}) >= 3
        reads = helpers.read_checked_until(m, dataset.ref_hashes("test"),
                                           three_tokens)
        seen.extend(gcs.requests())
        assert all(r["verdict"] == "ok" for r in seen), \
            [r for r in seen if r["verdict"] != "ok"][:3]
        assert len({r["token"] for r in seen}) >= 3
        assert reads > 20
    finally:
        gcs.restart_tokens(life=3600)


def test_echofs_index_on_gs_then_mount_with_it(gcs, dataset, gcp_env, mounter,
                                               tmp_path):
    ix = str(tmp_path / "test.echofs-index")
    gcp_env.setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:%d" % gcs.port)
    r = subprocess.run([os.path.join(helpers.BUILD, "tools", "echofs-index"),
                        "-o", ix, TEST_SRC], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    with open(ix) as f:
        assert "gs://dset/test/test-000000.tar" in f.read()
    gcp_env.delenv("STORAGE_EMULATOR_HOST")
    gcs.requests()
    m = mounter(TEST_SRC, opts={"endpoint": gcs.url, "index": ix})
    check_tree(m, dataset)
    assert not any("echofs-index" in r["path"] for r in gcs.requests())
    assert "index from option" in m.log()


class TlsRelay:
    """https on a free loopback port in front of a plain http server: each
    connection's TLS is ended here (certificate signed by a private CA) and
    its bytes relayed both ways, so the token server needs no TLS of its
    own."""

    def __init__(self, upstream_port, cert, key):
        self.upstream = upstream_port
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self.relay, args=(c,), daemon=True).start()

    @staticmethod
    def pump(src, dst):
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                dst.sendall(b)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def relay(self, c):
        try:
            t = self.ctx.wrap_socket(c, server_side=True)
        except (OSError, ssl.SSLError):
            c.close()
            return  # the client refused the certificate
        u = socket.create_connection(("127.0.0.1", self.upstream))
        threading.Thread(target=self.pump, args=(u, t), daemon=True).start()
        self.pump(t, u)

    def close(self):
        self.sock.close()


@pytest.fixture
def tls_token_uri(gcs, gcp_env, tmp_path):
    """GOOGLE_APPLICATION_CREDENTIALS names an authorized-user key whose
    token_uri is https, served through a private CA's certificate; yields
    that CA's file."""
    certs = tls_certs.make_all(str(tmp_path / "certs"))
    relay = TlsRelay(gcs.token_port, *certs["good"])
    gcp_env.setenv("GOOGLE_APPLICATION_CREDENTIALS", write_secret(
        str(tmp_path / "user-tls.json"),
        dict(USER, token_uri="https://127.0.0.1:%d/token" % relay.port)))
    yield certs["ca"][0]
    relay.close()


def test_token_uri_behind_private_ca(gcs, dataset, gcp_env, mounter,
                                     tls_token_uri):
    """ca_file= trusts a private CA for the token request too (a token
    endpoint behind a company proxy), not only for the shards."""
    gcs.token_requests()
    m = mounter(TEST_SRC, opts={"endpoint": gcs.url, "ca_file": tls_token_uri})
    check_tree(m, dataset)
    assert [t["kind"] for t in gcs.token_requests()] == ["user"]


def test_untrusted_token_uri_says_so(gcs, gcp_env, mounter, tls_token_uri):
    err = failed_mount(mounter, TEST_SRC, {"endpoint": gcs.url})
    assert "TLS certificate not trusted" in err, err
    assert "unreachable" not in err, err
