"""test_tls.py - HTTPS sources: nginx serving TLS on loopback with a
certificate from a throwaway CA (trusted through ca_file, ca_path or the
environment curl and the AWS SDKs honour) and with broken certificates
(self-signed, another name, expired), each failure named in one line."""

import os
import subprocess

import pytest

import helpers
import nginx as nginx_mod
import tls_certs
from helpers import source_of

CA_VARS = ("AWS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return tls_certs.make_all(str(tmp_path_factory.mktemp("certs")))


@pytest.fixture
def https(dataset, certs, tmp_path):
    servers = []

    def start(name):
        cert, key = certs[name]
        srv = nginx_mod.Nginx(dataset.www, os.path.join(str(tmp_path), "ng-" + name),
                              tls=(cert, key))
        servers.append(srv)
        return srv

    yield start
    for s in servers:
        s.stop()


def one_file_matches(m, dataset):
    ref = dataset.ref_dir("test")
    name = sorted(os.listdir(os.path.join(ref, "2")))[3]
    with open(m.path("2", name), "rb") as f, open(os.path.join(ref, "2", name), "rb") as g:
        assert f.read() == g.read()


def test_private_ca_through_ca_file(https, certs, mounter, dataset):
    srv = https("good")
    m = mounter(source_of(srv.url, "test"), opts={"ca_file": certs["ca"][0]})
    one_file_matches(m, dataset)


@pytest.mark.parametrize("var", ["SSL_CERT_FILE", "CURL_CA_BUNDLE", "AWS_CA_BUNDLE"])
def test_private_ca_through_the_environment(https, certs, tmp_path, dataset, var):
    srv = https("good")
    mnt = helpers.Mount(str(tmp_path), source_of(srv.url, "test"))
    # The machine may set all of them (to the system bundle): only ours.
    env = {k: v for k, v in os.environ.items() if k not in CA_VARS}
    env[var] = certs["ca"][0]
    try:
        r = subprocess.run(mnt.argv(), capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL, env=env)
        assert r.returncode == 0, r.stderr
        mnt.mounted = True
        one_file_matches(mnt, dataset)
    finally:
        mnt.umount()


def test_private_ca_through_ca_path(https, certs, mounter, dataset, tmp_path):
    d = tmp_path / "cadir"
    d.mkdir()
    with open(certs["ca"][0], "rb") as f:
        (d / "ca.pem").write_bytes(f.read())
    subprocess.run(["openssl", "rehash", str(d)], check=True, capture_output=True)
    srv = https("good")
    m = mounter(source_of(srv.url, "test"), opts={"ca_path": str(d)})
    one_file_matches(m, dataset)


@pytest.mark.parametrize("cert, ca, words", [
    ("selfsigned", False, "TLS certificate not trusted"),
    ("good", False, "TLS certificate not trusted"),
    ("wrongname", True, "TLS certificate name mismatch"),
    ("expired", True, "TLS certificate expired"),
])
def test_broken_certificates_fail_with_their_reason(https, certs, mounter, cert, ca,
                                                   words):
    srv = https(cert)
    opts = {"ca_file": certs["ca"][0]} if ca else {}
    m = mounter(source_of(srv.url, "test"), opts=opts, check=False)
    assert m.result.returncode == 1
    lines = m.result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("echofs: error: "), lines
    assert words in lines[0], lines[0]
    assert "Permission denied" not in lines[0]
    assert not m.mounted
