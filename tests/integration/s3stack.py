"""s3stack.py - one S3 stand-in per test session: s3rver (npm, installed by
tools/dev/setup.sh into tests/s3/node_modules) behind the verifying gateway
(tests/s3/gateway.py, every signature recomputed with botocore), with the
test split uploaded once; the train split and the 5,000-key bucket are
uploaded when a test first asks for them (ensure_train, ensure_many)."""

import hashlib
import json
import os
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import helpers
from helpers import free_port, stop_proc, wait_port

S3DIR = os.path.join(helpers.REPO, "tests", "s3")
S3RVER = os.path.join(S3DIR, "node_modules", "s3rver", "bin", "s3rver.js")
GATEWAY = os.path.join(S3DIR, "gateway.py")
AK, SK = "AKIAECHOFSTEST000001", "echofs/test+secret/key0000000000000000001"
AK_TOKEN, SK_TOKEN, TOKEN = ("ASIAECHOFSTEST000002", "session/secret+key2",
                             "FwoGZXIvYXdzEechofs//session+token==")
MANY = 5000


def clean_aws_env(monkeypatch, tmp_path):
    """AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY = AK/SK and nothing else of
    AWS's: no other AWS_ variable, no credentials or config file, no
    instance metadata."""
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AK)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SK)


def client(url):
    import botocore.config
    import botocore.session
    return botocore.session.get_session().create_client(
        "s3", region_name="us-east-1", endpoint_url=url,
        aws_access_key_id="S3RVER", aws_secret_access_key="S3RVER",
        config=botocore.config.Config(s3={"addressing_style": "path"},
                                      max_pool_connections=16))


def put_files(c, bucket, prefix, paths):
    def one(path):
        with open(path, "rb") as f:
            c.put_object(Bucket=bucket, Key=prefix + os.path.basename(path),
                         Body=f.read())
    with ThreadPoolExecutor(4) as ex:
        list(ex.map(one, paths))


class S3Stack:
    def __init__(self, work, dataset):
        self.work = work
        self.dataset = dataset
        self.lock = threading.Lock()
        self.have = set()
        self.keys = os.path.join(work, "keys.json")
        self.log = os.path.join(work, "gateway.log")
        self.set_keys({AK: {"secret": SK},
                       AK_TOKEN: {"secret": SK_TOKEN, "token": TOKEN}})
        self.s3port = free_port()
        env = dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider")
        self.data = os.path.join(work, "data")
        self.s3rver = subprocess.Popen(
            ["node", S3RVER, "-d", self.data, "-a", "127.0.0.1",
             "-p", str(self.s3port), "--silent"], env=env,
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "s3rver.err"), "w"))
        self.gateway = None
        wait_port(self.s3port, self.s3rver, "s3rver")
        self.s3url = "http://127.0.0.1:%d" % self.s3port
        self.client = client(self.s3url)
        self.client.create_bucket(Bucket="dset")
        put_files(self.client, "dset", "test/", dataset.shards("test"))
        self.port = free_port()
        self.gateway = subprocess.Popen(
            [helpers.PYTHON, GATEWAY, "--upstream", self.s3url, "--keys", self.keys,
             "--port", str(self.port), "--log", self.log],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "gw.err"), "w"))
        wait_port(self.port, self.gateway, "gateway")
        self.url = "http://127.0.0.1:%d" % self.port

    def ensure_train(self):
        """dset/train/: the 60 train shards and train.echofs-index beside
        them (s3:// URLs, written by the tests' own index writer)."""
        with self.lock:
            if "train" in self.have:
                return
            shards = self.dataset.shards("train")
            put_files(self.client, "dset", "train/", shards)
            path = os.path.join(self.work, "train.echofs-index")
            helpers.write_index(path, [("s3://dset/train/" + os.path.basename(p),
                                        p, None) for p in shards])
            with open(path, "rb") as f:
                self.client.put_object(Bucket="dset", Key="train/train.echofs-index",
                                       Body=f.read())
            self.have.add("train")

    def ensure_many(self):
        """Bucket "many": the test shards under big/ among 5,000 keys (five
        ListObjectsV2 pages); the other keys sort before, between and after
        the shards."""
        with self.lock:
            if "many" in self.have:
                return
            c = self.client
            c.create_bucket(Bucket="many")
            shards = self.dataset.shards("test")
            put_files(c, "many", "big/", shards)
            names = ["big/%s-%04d.json" % (p, i) for i in range(MANY - len(shards))
                     for p in ["a", "test-000004x", "zz"][i % 3:i % 3 + 1]]
            for k in names:
                self.store_object("many", k, b"{}")
            got = c.list_objects_v2(Bucket="many", Prefix="big/zz-", MaxKeys=5)
            assert got["KeyCount"] == 5 and got["IsTruncated"], \
                "s3rver does not list the keys written to its store: %r" % got
            self.have.add("many")

    def store_object(self, bucket, key, body):
        """Writes an object straight into s3rver's store directory, in the
        layout of its FilesystemStore (s3rver 3.7.1, which reads the disk at
        every request): <bucket>/<key>._S3rver_object and its .md5 (no
        ._S3rver_metadata.json: no content type, which nothing asks of these
        keys). 4,990 PUTs through the API cost 14-15 s, this under 2 s;
        ensure_many lists a few of them afterwards, so a changed layout
        fails there, saying so, rather than in a test."""
        path = os.path.join(self.data, bucket, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + "._S3rver_object", "wb") as f:
            f.write(body)
        with open(path + "._S3rver_object.md5", "w") as f:
            f.write(hashlib.md5(body).hexdigest())

    def set_keys(self, keys):
        with open(self.keys + ".tmp", "w") as f:
            json.dump(keys, f)
        os.rename(self.keys + ".tmp", self.keys)

    def requests(self):
        """gateway log lines since the last call"""
        return helpers.take_json_lines(self.log)

    def stop(self):
        for p in (self.gateway, self.s3rver):
            if p:
                stop_proc(p)
