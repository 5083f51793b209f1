"""test_s3.py - s3:// sources against a real S3 API server (s3rver from npm,
installed by tools/dev/setup.sh into tests/s3/node_modules) behind a
verifying gateway (tests/s3/gateway.py) that recomputes every request's
SigV4 signature with botocore and answers 403 like AWS. Every echofs request
must pass it; a wrong secret must fail the mount with S3's reason."""

import http.server
import json
import os
import socketserver
import ssl
import subprocess
import threading
import time
from urllib.parse import parse_qs, urlsplit

import pytest

import helpers

pytest.importorskip("botocore", reason="python3-botocore is not installed")

from helpers import check_tree, failed_mount, free_port, stop_proc, wait_port  # noqa: E402
from s3stack import (AK, AK_TOKEN, GATEWAY, MANY, SK, SK_TOKEN, TOKEN,  # noqa: E402
                     clean_aws_env, client)


@pytest.fixture(scope="module")
def s3(s3_session):
    """The session's S3 stand-in, with the 5,000-key bucket uploaded."""
    s3_session.ensure_many()
    s3_session.requests()
    return s3_session


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """A clean AWS environment: no real files, no instance metadata."""
    clean_aws_env(monkeypatch, tmp_path)
    return monkeypatch


TEST_SRC = "s3://dset/test/test-{000000..%06d}.tar" % (helpers.TEST_SHARDS - 1)


def test_brace_source_every_request_signed(s3, dataset, aws_env, mounter):
    s3.requests()
    m = mounter(TEST_SRC, opts={"endpoint": s3.url})
    check_tree(m, dataset)
    seen = s3.requests()
    assert len(seen) >= helpers.TEST_SHARDS
    assert all(r["verdict"] == "ok" or r["path"].endswith(".echofs-index")
               for r in seen), [r for r in seen if r["verdict"] != "ok"][:3]
    assert all(r["verdict"] == "ok" for r in seen), seen[:3]


def test_session_token_sent_and_checked(s3, dataset, aws_env, mounter):
    aws_env.setenv("AWS_ACCESS_KEY_ID", AK_TOKEN)
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", SK_TOKEN)
    aws_env.setenv("AWS_SESSION_TOKEN", TOKEN)
    s3.requests()
    m = mounter(TEST_SRC, opts={"endpoint": s3.url})
    check_tree(m, dataset)
    seen = s3.requests()
    assert seen and all(r["verdict"] == "ok" and r["token"] for r in seen)


def test_prefix_glob_source(s3, dataset, aws_env, mounter):
    m = mounter("s3://dset/test/*.tar", opts={"endpoint": s3.url})
    check_tree(m, dataset)


def test_list_file_of_s3_urls_without_options(s3, dataset, aws_env, mounter,
                                             tmp_path):
    """A shard list file naming s3:// URLs opens S3 by itself (endpoint from
    AWS_ENDPOINT_URL, as the AWS CLI takes it), as one naming gs:// URLs
    opens GCS: every request signed, every file right."""
    lst = tmp_path / "shards.txt"
    lst.write_text("".join("s3://dset/test/%s\n" % os.path.basename(p)
                           for p in dataset.shards("test")))
    aws_env.setenv("AWS_ENDPOINT_URL", s3.url)
    s3.requests()
    m = mounter(str(lst))
    check_tree(m, dataset)
    seen = s3.requests()
    assert seen and all(r["verdict"] == "ok" for r in seen), seen[:3]


def test_listing_5000_keys_over_pages(s3, dataset, aws_env, mounter):
    s3.requests()
    m = mounter("s3://many/big/", opts={"endpoint": s3.url})
    check_tree(m, dataset)
    lists = [r for r in s3.requests() if "list-type=2" in r["path"]]
    assert len(lists) >= MANY // 1000, lists
    assert sum("continuation-token=" in r["path"] for r in lists) >= MANY // 1000 - 1
    assert "listed %d shards" % helpers.TEST_SHARDS in m.log()


def test_wrong_secret_fails_mount(s3, aws_env, mounter):
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", SK + "x")
    err = failed_mount(mounter, TEST_SRC, {"endpoint": s3.url})
    assert "SignatureDoesNotMatch" in err and "wrong secret key" in err, err
    assert SK not in err


def test_unknown_key_and_unsigned(s3, aws_env, mounter):
    aws_env.setenv("AWS_ACCESS_KEY_ID", "AKIAUNKNOWN000000000")
    err = failed_mount(mounter, TEST_SRC, {"endpoint": s3.url})
    assert "InvalidAccessKeyId" in err, err
    err = failed_mount(mounter, TEST_SRC, {"endpoint": s3.url, "no_sign": "1"})
    assert "AccessDenied" in err, err


def test_no_such_bucket_and_key(s3, aws_env, mounter):
    err = failed_mount(mounter, "s3://nobucket/x/", {"endpoint": s3.url})
    assert "NoSuchBucket" in err, err
    err = failed_mount(mounter, "s3://dset/test/missing-{0..1}.tar",
                       {"endpoint": s3.url})
    assert "NoSuchKey" in err or "404" in err, err


def test_no_credentials_names_sources(s3, aws_env, mounter):
    aws_env.delenv("AWS_ACCESS_KEY_ID")
    aws_env.delenv("AWS_SECRET_ACCESS_KEY")
    err = failed_mount(mounter, TEST_SRC, {"endpoint": s3.url})
    assert "no AWS credentials found" in err
    for src in ("environment", "profile default", "web identity",
                "container credentials", "instance metadata"):
        assert src in err, err


# ---- credential sources: loopback stand-ins for IMDSv2, ECS and STS ----

class Issuer:
    """Hands out fresh session credentials that expire after `life` seconds
    and registers each set with the gateway (which then refuses it with
    ExpiredToken once it has expired)."""

    def __init__(self, s3, life=3600):
        self.s3 = s3
        self.life = life
        self.lock = threading.Lock()
        self.n = 0
        self.keys = {AK: {"secret": SK},
                     AK_TOKEN: {"secret": SK_TOKEN, "token": TOKEN}}

    def issue(self, kind):
        with self.lock:
            self.n += 1
            ak = "ASIA%s%012d" % (kind.upper()[:4].ljust(4, "X"), self.n)
            exp = time.time() + self.life
            k = {"secret": "sec/%s+%d" % (kind, self.n),
                 "token": "tok/%s/%d==" % (kind, self.n), "expires": exp}
            self.keys[ak] = k
            self.s3.set_keys(self.keys)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(exp))
        return ak, k["secret"], k["token"], stamp


class StandIn(http.server.BaseHTTPRequestHandler):
    """IMDSv2 (/latest/...), ECS (/ecs/creds) and STS (/sts/) in one."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, status, body, ctype="application/json"):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def creds_json(self, kind, token_name):
        ak, sk, tok, exp = self.server.issuer.issue(kind)
        return json.dumps({"Code": "Success", "AccessKeyId": ak,
                           "SecretAccessKey": sk, token_name: tok,
                           "Expiration": exp})

    def do_PUT(self):
        if (self.path == "/latest/api/token" and
                self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")):
            return self.reply(200, "imds-session-token", "text/plain")
        self.reply(403, "")

    def do_GET(self):
        srv = self.server
        if self.path.startswith("/latest/"):
            if self.headers.get("X-aws-ec2-metadata-token") != "imds-session-token":
                return self.reply(401, "")
            if self.path == "/latest/meta-data/iam/security-credentials/":
                return self.reply(200, "echofs-role", "text/plain")
            if self.path == "/latest/meta-data/iam/security-credentials/echofs-role":
                return self.reply(200, self.creds_json("imds", "Token"))
        elif self.path == "/ecs/creds":
            if self.headers.get("Authorization") != srv.ecs_auth:
                return self.reply(403, "")
            return self.reply(200, self.creds_json("ecs", "Token"))
        elif self.path.startswith("/sts/"):
            q = parse_qs(urlsplit(self.path).query)
            with open(srv.web_token_file) as f:
                want = f.read().strip()
            if (q.get("Action") != ["AssumeRoleWithWebIdentity"] or
                    q.get("WebIdentityToken") != [want] or
                    q.get("RoleArn") != ["arn:aws:iam::123456789012:role/echofs"]):
                return self.reply(403, "<ErrorResponse/>", "text/xml")
            ak, sk, tok, exp = srv.issuer.issue("sts")
            return self.reply(200, (
                "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult>"
                "<Credentials><SessionToken>%s</SessionToken><SecretAccessKey>%s"
                "</SecretAccessKey><Expiration>%s</Expiration><AccessKeyId>%s"
                "</AccessKeyId></Credentials></AssumeRoleWithWebIdentityResult>"
                "</AssumeRoleWithWebIdentityResponse>" % (tok, sk, exp, ak)),
                "text/xml")
        self.reply(404, "")


class TlsStandIn(StandIn):
    """The same over TLS: the handshake is made in the handler's thread, so
    a client that refuses the certificate stalls no other connection."""

    def setup(self):
        self.request.do_handshake()
        super().setup()


def serve_standin(s3, tmp_path, tls=None):
    """A stand-in on a free loopback port; tls=(cert, key) serves https."""
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0),
                                          TlsStandIn if tls else StandIn)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True,
                                     do_handshake_on_connect=False)
    srv.daemon_threads = True
    srv.issuer = Issuer(s3)
    srv.ecs_auth = "ecs-auth-token-value"
    srv.web_token_file = str(tmp_path / "web-identity-token")
    with open(srv.web_token_file, "w") as f:
        f.write("eyJhbGciOi.web.identity\n")
    srv.url = "%s://127.0.0.1:%d" % ("https" if tls else "http",
                                     srv.server_address[1])
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def stop_standin(srv):
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def standin(s3, tmp_path):
    srv = serve_standin(s3, tmp_path)
    yield srv
    stop_standin(srv)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    pytest.importorskip("cryptography",
                        reason="python3-cryptography is not installed")
    import tls_certs
    return tls_certs.make_all(str(tmp_path_factory.mktemp("certs")))


@pytest.fixture
def tls_standin(s3, tmp_path, certs):
    """The stand-in over https, its certificate signed by a private CA."""
    srv = serve_standin(s3, tmp_path, tls=certs["good"])
    yield srv
    stop_standin(srv)


def use_imds(env, standin):
    env.setenv("AWS_EC2_METADATA_DISABLED", "false")
    env.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", standin.url + "/")


def use_ecs(env, standin, tmp_path):
    env.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", standin.url + "/ecs/creds")
    tok = tmp_path / "ecs-token"
    tok.write_text(standin.ecs_auth)
    tok.chmod(0o600)
    env.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(tok))


def use_web_identity(env, standin):
    env.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", standin.web_token_file)
    env.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/echofs")
    env.setenv("AWS_ENDPOINT_URL_STS", standin.url + "/sts")


def akids(s3):
    seen = s3.requests()
    assert seen and all(r["verdict"] == "ok" for r in seen), \
        [r for r in seen if r["verdict"] != "ok"][:3]
    return {r["akid"] for r in seen}


@pytest.mark.parametrize("source", ["imds", "ecs", "web_identity"])
def test_remote_credential_source(s3, dataset, aws_env, standin, mounter,
                                  tmp_path, source):
    aws_env.delenv("AWS_ACCESS_KEY_ID")
    aws_env.delenv("AWS_SECRET_ACCESS_KEY")
    {"imds": lambda: use_imds(aws_env, standin),
     "ecs": lambda: use_ecs(aws_env, standin, tmp_path),
     "web_identity": lambda: use_web_identity(aws_env, standin)}[source]()
    s3.requests()
    m = mounter(TEST_SRC, opts={"endpoint": s3.url})
    check_tree(m, dataset)
    ids = akids(s3)
    prefix = {"imds": "ASIAIMDS", "ecs": "ASIAECSX", "web_identity": "ASIASTSX"}
    assert ids and all(i.startswith(prefix[source]) for i in ids), ids
    log = m.log()
    for secret in ("sec/", "tok/", standin.ecs_auth, "web.identity"):
        assert secret not in log


USE = {"imds": use_imds, "ecs": use_ecs, "web_identity": use_web_identity}
PREFIX = {"imds": "ASIAIMDS", "ecs": "ASIAECSX", "web_identity": "ASIASTSX"}


def use_source(env, standin, tmp_path, source):
    env.delenv("AWS_ACCESS_KEY_ID")
    env.delenv("AWS_SECRET_ACCESS_KEY")
    if source == "ecs":
        use_ecs(env, standin, tmp_path)
    else:
        USE[source](env, standin)


@pytest.mark.parametrize("source", ["imds", "ecs", "web_identity"])
def test_credential_endpoint_behind_private_ca(s3, dataset, aws_env,
                                               tls_standin, certs, mounter,
                                               tmp_path, source):
    """ca_file= trusts a private CA for the credential request too (an
    in-house STS, metadata or container endpoint), not only for the
    shards."""
    use_source(aws_env, tls_standin, tmp_path, source)
    s3.requests()
    m = mounter(TEST_SRC, opts={"endpoint": s3.url, "ca_file": certs["ca"][0]})
    check_tree(m, dataset)
    ids = akids(s3)
    assert ids and all(i.startswith(PREFIX[source]) for i in ids), ids


@pytest.mark.parametrize("source", ["imds", "ecs", "web_identity"])
def test_untrusted_credential_endpoint_says_so(s3, aws_env, tls_standin,
                                              mounter, tmp_path, source):
    """Without the CA, the mount fails naming the certificate check, not
    an unreachable endpoint or a missing key."""
    use_source(aws_env, tls_standin, tmp_path, source)
    err = failed_mount(mounter, TEST_SRC, {"endpoint": s3.url})
    assert "TLS certificate not trusted" in err, err
    assert "Key was rejected" not in err and "unreachable" not in err, err


def test_precedence_order(s3, aws_env, standin, mounter, tmp_path):
    """environment > profile > web identity > ECS > instance metadata"""
    use_imds(aws_env, standin)
    use_ecs(aws_env, standin, tmp_path)
    use_web_identity(aws_env, standin)
    creds = tmp_path / "credentials"
    creds.write_text("[default]\naws_access_key_id = %s\n"
                     "aws_secret_access_key = %s\naws_session_token = %s\n"
                     % (AK_TOKEN, SK_TOKEN, TOKEN))
    creds.chmod(0o600)
    aws_env.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    src = "s3://dset/test/test-000000.tar"
    order = [(lambda: None, AK),
             (lambda: (aws_env.delenv("AWS_ACCESS_KEY_ID"),
                       aws_env.delenv("AWS_SECRET_ACCESS_KEY")), AK_TOKEN),
             (lambda: aws_env.setenv("AWS_SHARED_CREDENTIALS_FILE",
                                     str(tmp_path / "none")), "ASIASTSX"),
             (lambda: aws_env.delenv("AWS_WEB_IDENTITY_TOKEN_FILE"), "ASIAECSX"),
             (lambda: aws_env.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI"),
              "ASIAIMDS")]
    for i, (change, want) in enumerate(order):
        change()
        s3.requests()
        m = mounter(src, opts={"endpoint": s3.url}, name="p%d" % i)
        ids = akids(s3)
        assert all(x.startswith(want) for x in ids), (want, ids)
        m.umount()


def test_group_readable_credentials_file_refused(s3, aws_env, mounter, tmp_path):
    aws_env.delenv("AWS_ACCESS_KEY_ID")
    aws_env.delenv("AWS_SECRET_ACCESS_KEY")
    creds = tmp_path / "credentials"
    creds.write_text("[default]\naws_access_key_id = %s\n"
                     "aws_secret_access_key = %s\n" % (AK, SK))
    creds.chmod(0o640)
    aws_env.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    err = failed_mount(mounter, TEST_SRC, {"endpoint": s3.url})
    assert "too open" in err and "chmod 600" in err, err


def test_expiring_credentials_refreshed_during_reads(s3, dataset, aws_env,
                                                     standin, mounter):
    """Credentials that live 4 s (renewed at half their life, so new ones
    every 2 s), reads through a cache too small to hold the data (so shards
    are fetched again and again) until requests have gone out under three
    successive keys: no read fails. The lifetime is short so that the test
    takes seconds, not the minutes a real one would."""
    aws_env.delenv("AWS_ACCESS_KEY_ID")
    aws_env.delenv("AWS_SECRET_ACCESS_KEY")
    use_imds(aws_env, standin)
    standin.issuer.life = 4
    s3.requests()
    m = mounter(TEST_SRC, opts={"endpoint": s3.url, "cache_size": "1M"})
    seen = []

    def three_keys():
        seen.extend(s3.requests())
        return len({r["akid"] for r in seen}) >= 3
    reads = helpers.read_checked_until(m, dataset.ref_hashes("test"), three_keys)
    seen.extend(s3.requests())
    assert seen and all(r["verdict"] == "ok" for r in seen), \
        [r for r in seen if r["verdict"] != "ok"][:3]
    ids = {r["akid"] for r in seen}
    assert len(ids) >= 3, ids
    assert reads > 20


def test_token_refused_as_expired_renewed_at_once(s3, dataset, aws_env,
                                                  standin, mounter):
    """The server refuses the session token as expired an hour before the
    expiry it was issued with (its clock runs ahead of ours, or ours was
    stepped back; seen in the soak's clock step): echofs fetches new
    credentials at once and tries the request again, so no read fails.
    Before, every shard GET failed with ExpiredToken until the refresher's
    next turn, 5 minutes before the expiry on this machine's clock. The
    mount indexes the split (no index beside it) and a cache too small to
    keep a shard makes every read a GET after the refusal: every 50th file
    is read and checked, not all 10,000 (four minutes of GETs)."""
    aws_env.delenv("AWS_ACCESS_KEY_ID")
    aws_env.delenv("AWS_SECRET_ACCESS_KEY")
    use_imds(aws_env, standin)
    standin.issuer.life = 3600
    s3.requests()
    m = mounter(TEST_SRC, opts={"endpoint": s3.url, "cache_size": "1M"})
    first = akids(s3)
    with standin.issuer.lock:
        for k in standin.issuer.keys.values():
            if "expires" in k:
                k["expires"] = time.time() - 1
        s3.set_keys(standin.issuer.keys)
    assert helpers.read_checked_every(m, dataset.ref_hashes("test"), 50) > 100
    seen = s3.requests()
    verdicts = [r["verdict"] for r in seen]
    assert "ExpiredToken" in verdicts, verdicts[:5]
    assert verdicts[-1] == "ok", verdicts[-5:]
    assert {r["akid"] for r in seen if r["verdict"] == "ok"} - first
    assert "renewed after a refusal" in m.log(), m.log()


def test_clock_skew_corrected_from_server_time(s3, dataset, aws_env, mounter,
                                               tmp_path):
    """A server whose clock is an hour ahead answers RequestTimeTooSkewed
    with its time; echofs signs with the server's clock from then on and
    retries once: the mount works and every file is right."""
    port = free_port()
    log = str(tmp_path / "skew.log")
    gw = subprocess.Popen(
        [helpers.PYTHON, GATEWAY, "--upstream", s3.s3url, "--keys", s3.keys,
         "--port", str(port), "--log", log, "--clock-offset", "3600"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, gw, "skewed gateway")
        m = mounter(TEST_SRC, opts={"endpoint": "http://127.0.0.1:%d" % port})
        check_tree(m, dataset)
        with open(log) as f:
            verdicts = [json.loads(x)["verdict"] for x in f]
        assert verdicts.count("RequestTimeTooSkewed") >= 1
        assert verdicts[-1] == "ok" and verdicts.count("ok") >= helpers.TEST_SHARDS
        assert "clock is +3600 s from ours" in m.log() or \
            "clock is +3599 s from ours" in m.log() or \
            "clock is +3601 s from ours" in m.log(), m.log()
    finally:
        stop_proc(gw)


def test_echofs_index_on_s3_then_mount_with_it(s3, dataset, aws_env, mounter,
                                               tmp_path):
    aws_env.setenv("AWS_ENDPOINT_URL_S3", s3.url)
    out = str(tmp_path / "test.echofs-index")
    s3.requests()
    r = subprocess.run([os.path.join(helpers.BUILD, "tools", "echofs-index"),
                        "-o", out, TEST_SRC], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    with open(out) as f:
        text = f.read()
    assert "s3://dset/test/test-000000.tar" in text and SK not in text
    assert all(x["verdict"] == "ok" for x in s3.requests())
    m = mounter(TEST_SRC, opts={"index": out})  # endpoint from the environment
    check_tree(m, dataset)
    assert "index from option" in m.log()


def region_gateway(s3, tmp_path, *extra):
    port = free_port()
    log = str(tmp_path / "region.log")
    gw = subprocess.Popen(
        [helpers.PYTHON, GATEWAY, "--upstream", s3.s3url, "--keys", s3.keys,
         "--port", str(port), "--region", "eu-west-3", "--log", log] + list(extra),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, gw, "gateway")
    return gw, "http://127.0.0.1:%d" % port, log


def gateway_log(log):
    with open(log) as f:
        return [json.loads(x) for x in f]


def test_wrong_region_names_the_right_one(s3, dataset, aws_env, mounter,
                                          tmp_path):
    """A region the user set is kept: a bucket elsewhere fails the mount
    naming its region."""
    gw, url, _ = region_gateway(s3, tmp_path)
    try:
        err = failed_mount(mounter, TEST_SRC, {"endpoint": url,
                                               "region": "us-west-2"})
        assert "AuthorizationHeaderMalformed" in err and "wrong region" in err, err
        assert "eu-west-3" in err, err
        aws_env.setenv("AWS_REGION", "eu-west-3")
        m = mounter(TEST_SRC, opts={"endpoint": url})
        check_tree(m, dataset)
    finally:
        stop_proc(gw)


@pytest.mark.parametrize("source", [TEST_SRC, "s3://dset/test/"])
def test_region_found_from_bucket_header(s3, dataset, aws_env, mounter,
                                         tmp_path, source):
    """No region anywhere: one HEAD on the bucket, whose reply (refused,
    signed for us-east-1) carries x-amz-bucket-region; every later request
    is signed for eu-west-3 and passes."""
    gw, url, log = region_gateway(s3, tmp_path)
    try:
        m = mounter(source, opts={"endpoint": url})
        check_tree(m, dataset)
        seen = gateway_log(log)
        assert seen[0]["method"] == "HEAD" and seen[0]["path"] == "/dset/", seen[0]
        bad = [r for r in seen[1:] if r["verdict"] != "ok"]
        assert not bad, bad[:3]
        assert "is in region eu-west-3 (x-amz-bucket-region)" in m.log(), m.log()
    finally:
        stop_proc(gw)


def test_region_corrected_from_error_without_header(s3, dataset, aws_env,
                                                    mounter, tmp_path):
    """A server that sends no x-amz-bucket-region: the first refusal
    (AuthorizationHeaderMalformed naming eu-west-3) switches the signing
    region and that request is tried once more; the rest pass."""
    gw, url, log = region_gateway(s3, tmp_path, "--no-region-header")
    try:
        m = mounter(TEST_SRC, opts={"endpoint": url})
        check_tree(m, dataset)
        verdicts = [r["verdict"] for r in gateway_log(log)]
        assert 1 <= verdicts.count("AuthorizationHeaderMalformed") <= 2, verdicts
        assert verdicts.count("ok") >= helpers.TEST_SHARDS
        assert "signing for us-east-1" in m.log()
        assert "the bucket is in region eu-west-3" in m.log(), m.log()
    finally:
        stop_proc(gw)


@pytest.mark.parametrize("source", ["s3://dset/test/", "s3://dset/test/*.tar"])
def test_prefix_source_finds_index_beside(s3, dataset, aws_env, mounter,
                                          tmp_path, source):
    """An index published as PREFIX/<last component>.echofs-index is the
    one a prefix or glob source uses (it was looked for at
    PREFIX/.echofs-index)."""
    aws_env.setenv("AWS_ENDPOINT_URL_S3", s3.url)
    out = str(tmp_path / "test.echofs-index")
    r = subprocess.run([os.path.join(helpers.BUILD, "tools", "echofs-index"),
                        "-o", out, TEST_SRC], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    c = client(s3.s3url)
    with open(out, "rb") as f:
        c.put_object(Bucket="dset", Key="test/test.echofs-index", Body=f.read())
    try:
        s3.requests()
        m = mounter(source, cache_dir=str(tmp_path / "cache"))
        check_tree(m, dataset)
        assert "index from beside" in m.log(), m.log()
        gets = [x["path"] for x in s3.requests() if x["method"] == "GET"]
        assert "/dset/test/test.echofs-index" in gets, gets
    finally:
        c.delete_object(Bucket="dset", Key="test/test.echofs-index")
