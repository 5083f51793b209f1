"""test_sigv4_diff.py - echofs's SigV4 signer against botocore's
S3SigV4Auth (AWS's reference implementation, Debian python3-botocore): the
Authorization header must be identical byte for byte over hundreds of
generated requests (GET, ranged GET, HEAD, ListObjectsV2 with continuation
tokens and prefixes full of reserved and non-ASCII characters, session
tokens, path-style and virtual-hosted, several regions), with a fixed
timestamp. The C side is tests/s3/sigv4_cli.c."""

import datetime
import os
import random
import subprocess
import types
from urllib.parse import quote

import pytest

import helpers

botocore = pytest.importorskip("botocore", reason="python3-botocore is not installed")
import botocore.auth  # noqa: E402
import botocore.awsrequest  # noqa: E402
import botocore.config  # noqa: E402
import botocore.credentials  # noqa: E402
import botocore.session  # noqa: E402

CLI = os.path.join(helpers.BUILD, "tests", "sigv4_cli")
STAMP = "20240229T235959Z"
REGIONS = ["us-east-1", "eu-west-1", "ap-southeast-2", "us-gov-west-1", "auto"]
# characters that make AWS's encoding rules matter
NASTY = "=/+% &?#~*'()!$,;:@[]\"<>\\^`{|}\u00e9\u00df\u4e2d\u6587\U0001f600-_."


def rand_text(rng, n):
    alpha = "abcXYZ019" + NASTY
    return "".join(rng.choice(alpha) for _ in range(n))


def rand_creds(rng):
    ak = "AKIA" + "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
                          for _ in range(16))
    sk = "".join(rng.choice("abcdefABCDEF0123456789/+") for _ in range(40))
    tok = None
    if rng.random() < 0.5:
        tok = "".join(rng.choice("abcdefABCDEF0123456789/+=")
                      for _ in range(rng.randint(100, 900)))
    return ak, sk, tok


def sign_c(cases):
    """cases: [(method, url, region, ak, sk, tok, [(name, value)])]"""
    lines = []
    for method, url, region, ak, sk, tok, hdrs in cases:
        f = [method, url, region, STAMP, ak, sk, tok or ""]
        for n, v in hdrs:
            f += [n, v]
        assert not any("\t" in x or "\n" in x for x in f)
        lines.append("\t".join(f))
    r = subprocess.run([CLI], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert len(out) == len(cases)
    return out


def sign_botocore(method, url, region, ak, sk, tok, hdrs):
    """add_auth with the timestamp fixed (add_auth itself reads the clock)."""
    creds = botocore.credentials.Credentials(ak, sk, tok)
    auth = botocore.auth.S3SigV4Auth(creds, "s3", region)
    req = botocore.awsrequest.AWSRequest(method=method, url=url,
                                         headers=dict(hdrs))
    req.context["timestamp"] = STAMP
    auth._modify_request_before_signing(req)
    cr = auth.canonical_request(req)
    sts = auth.string_to_sign(req, cr)
    auth._inject_signature_to_request(req, auth.signature(sts, req))
    return req.headers["Authorization"]


def gen_direct(rng):
    """Requests built here, URLs encoded as S3 wants them."""
    cases = []
    hosts = ["bucket.s3.amazonaws.com", "s3.eu-west-1.amazonaws.com",
             "127.0.0.1:9000", "Mixed.Case.Example:443", "localhost:80",
             "[::1]:4566", "minio.internal:9000"]
    for i in range(300):
        ak, sk, tok = rand_creds(rng)
        scheme = rng.choice(["http", "https"])
        host = rng.choice(hosts)
        bucket = rng.choice(["ds", "my.bucket-1", "b"])
        key = rand_text(rng, rng.randint(1, 30))
        method = rng.choice(["GET", "GET", "HEAD"])
        hdrs = []
        if i % 3 == 0:
            path = "/" + bucket + "/"
            q = [("list-type", "2"), ("prefix", rand_text(rng, 12))]
            if rng.random() < 0.6:
                q.append(("continuation-token", rand_text(rng, 40)))
            if rng.random() < 0.3:
                q.append(("start-after", rand_text(rng, 8)))
            if rng.random() < 0.3:
                q.append(("delimiter", rng.choice(["/", "%", " "])))
            if rng.random() < 0.3:
                q.append(("encoding-type", "url"))
            if rng.random() < 0.3:  # a key that extends another, repeats
                q += [("prefix-x", rand_text(rng, 3)), ("a", "2"), ("a", "1")]
            rng.shuffle(q)
            query = "&".join(quote(k, safe="-_.~") + "=" + quote(v, safe="-_.~")
                             for k, v in q)
            url = "%s://%s%s?%s" % (scheme, host, path, query)
        else:
            url = "%s://%s/%s" % (scheme, host, quote(key, safe="/~"))
            if method == "GET" and rng.random() < 0.6:
                a = rng.randint(0, 1 << 40)
                hdrs.append(("Range", "bytes=%d-%d" % (a, a + rng.randint(0, 1 << 30))))
        if rng.random() < 0.2:
            hdrs.append(("x-amz-request-payer", "requester"))
        cases.append((method, url, rng.choice(REGIONS), ak, sk, tok, hdrs))
    return cases


class Captured(Exception):
    pass


def fixed_clock():
    class Fixed(datetime.datetime):
        @classmethod
        def utcnow(cls):
            return cls.strptime(STAMP, "%Y%m%dT%H%M%SZ")

        @classmethod
        def now(cls, tz=None):
            t = cls.utcnow()
            return t.replace(tzinfo=datetime.timezone.utc).astimezone(tz) \
                if tz else t
    return types.SimpleNamespace(datetime=Fixed, timezone=datetime.timezone)


@pytest.fixture
def fixed_signers(monkeypatch):
    """Fix the clock of every signer a botocore client may use: its own
    (botocore.auth) and, when python3-awscrt is installed, AWS's C signer
    through botocore.crt.auth, which the client then prefers. Each reads
    datetime from its own module."""
    monkeypatch.setattr(botocore.auth, "datetime", fixed_clock())
    try:
        import botocore.crt.auth as crt_auth
    except ImportError:
        return
    monkeypatch.setattr(crt_auth, "datetime", fixed_clock())


def signed_at_stamp(auth):
    """A reference signature made at STAMP, not at today's date: a signer
    whose clock is not fixed fails here, saying so."""
    day = "/%s/" % STAMP[:8]
    assert day in auth, "the reference signer used its own clock, not " \
        "STAMP (a signer fixed_signers does not know?): %s" % auth
    return auth


def gen_client(rng):
    """Requests as a real botocore S3 client prepares and signs them (its
    URL building, addressing styles and query encoding), captured before
    they would be sent."""
    sent = []

    def capture(request, **kw):
        sent.append(request)
        raise Captured()

    session = botocore.session.get_session()
    cases = []
    for i in range(150):
        ak, sk, tok = rand_creds(rng)
        region = rng.choice(REGIONS[:4])
        style = rng.choice(["path", "virtual"])
        endpoint = rng.choice([None, None, "http://127.0.0.1:9000",
                               "https://minio.example:9443"])
        cfg = botocore.config.Config(s3={"addressing_style": style},
                                     retries={"max_attempts": 0})
        client = session.create_client(
            "s3", region_name=region, endpoint_url=endpoint,
            aws_access_key_id=ak, aws_secret_access_key=sk,
            aws_session_token=tok, config=cfg)
        client.meta.events.register("before-send.s3", capture)
        bucket = rng.choice(["ds", "train-data", "b3"])
        key = rand_text(rng, rng.randint(1, 24))
        op = i % 4
        try:
            if op == 0:
                kw = {"Bucket": bucket, "Prefix": rand_text(rng, 10)}
                if rng.random() < 0.7:
                    kw["ContinuationToken"] = rand_text(rng, 30)
                if rng.random() < 0.3:
                    kw["StartAfter"] = rand_text(rng, 6)
                client.list_objects_v2(**kw)
            elif op == 1:
                a = rng.randint(0, 1 << 33)
                client.get_object(Bucket=bucket, Key=key,
                                  Range="bytes=%d-%d" % (a, a + 99))
            elif op == 2:
                client.head_object(Bucket=bucket, Key=key)
            else:
                client.get_object(Bucket=bucket, Key=key,
                                  RequestPayer="requester")
        except Captured:
            pass
        req = sent[-1]
        auth = req.headers["Authorization"].decode() \
            if isinstance(req.headers["Authorization"], bytes) \
            else req.headers["Authorization"]
        signed_at_stamp(auth)
        signed = auth.split("SignedHeaders=")[1].split(",")[0].split(";")
        own = {"host", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token"}
        hdrs = []
        for name in signed:
            if name in own:
                continue
            v = req.headers[name]
            hdrs.append((name, v.decode() if isinstance(v, bytes) else v))
        cases.append((req.method, req.url, region, ak, sk, tok, hdrs, auth))
    return cases


@pytest.fixture(scope="module")
def cli():
    if not os.access(CLI, os.X_OK):
        pytest.fail("%s is not built" % CLI)
    return CLI


def test_direct_requests_match_botocore(cli):
    rng = random.Random(8)
    cases = gen_direct(rng)
    got = sign_c(cases)
    bad = [(c[1], g, sign_botocore(*c)) for c, g in zip(cases, got)
           if g != sign_botocore(*c)]
    assert not bad, "%d of %d differ, first: %r" % (len(bad), len(cases), bad[0])
    assert len({g for g in got}) == len(cases)  # no constant output


def test_botocore_client_requests_match(cli, fixed_signers):
    rng = random.Random(80)
    cases = gen_client(rng)
    got = sign_c([c[:7] for c in cases])
    bad = [(c[1], g, c[7]) for c, g in zip(cases, got) if g != c[7]]
    assert not bad, "%d of %d differ, first: %r" % (len(bad), len(cases), bad[0])
    # the generated set really covers what it claims
    urls = [c[1] for c in cases]
    assert any("continuation-token=" in u for u in urls)
    assert any("%25" in u and "%2B" in u for u in urls)
    assert any(c[5] for c in cases) and any(c[5] is None for c in cases)
    assert any(u.split("/")[2].split(".")[0] in ("ds", "train-data", "b3")
               for u in urls)  # virtual-hosted
    assert any(u.startswith("http://127.0.0.1:9000/") for u in urls)  # path


DOT_KEYS = ["ds/../../otherbucket/secret.tar", "./a.tar", "ds/./../x.tar",
            "../..", "ds//../x.tar", "a/../b/./c.tar"]


def test_dot_segment_keys_match_botocore(cli, fixed_signers):
    """S3 keys are opaque: echofs sends them unnormalised (CURLOPT_PATH_AS_IS)
    and must sign that very path as botocore's client does."""
    sent = []

    def capture(request, **kw):
        sent.append(request)
        raise Captured()

    session = botocore.session.get_session()
    cases = []
    for key in DOT_KEYS:
        client = session.create_client(
            "s3", region_name="us-east-1", endpoint_url="http://127.0.0.1:9000",
            aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="s" * 40,
            config=botocore.config.Config(s3={"addressing_style": "path"},
                                          retries={"max_attempts": 0}))
        client.meta.events.register("before-send.s3", capture)
        try:
            client.get_object(Bucket="escape", Key=key)
        except Captured:
            pass
        req = sent[-1]
        auth = req.headers["Authorization"]
        auth = signed_at_stamp(auth.decode() if isinstance(auth, bytes)
                               else auth)
        assert "/escape/" + quote(key, safe="/~") in req.url, req.url
        cases.append(("GET", req.url, "us-east-1", "AKIDEXAMPLE", "s" * 40,
                      None, [], auth))
    got = sign_c([c[:7] for c in cases])
    bad = [(c[1], g, c[7]) for c, g in zip(cases, got) if g != c[7]]
    assert not bad, "%d of %d differ, first: %r" % (len(bad), len(cases), bad[0])
