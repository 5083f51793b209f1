"""test_whole_sample.py - whole-sample echo over layout=samples (issue 31):
on an echo mount, the files a reader opens for one key (the image, then its
caption) are members of one substituted sample, of the key's class when it
has a label, so an echoed image never comes with another sample's caption.

The data make every pair checkable: a caption names its class and the
SHA-256 of its image, and some keys carry a .json naming both too."""

import hashlib
import json
import os
import random
import threading

import pytest

from test_pack import pack, shards_of, source

import nginx as nginx_mod  # tools/dev (conftest puts it on the path)

READERS = 8


@pytest.fixture
def www(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    srv = nginx_mod.Nginx(str(root), str(tmp_path / "nginx"))
    yield str(root), srv
    srv.stop()


def make_pairs(root, labelled, unlabelled, rng):
    """Image-caption pairs: `labelled` in eight class directories (one of
    them with a .json beside half of its pairs: another echo class), and
    `unlabelled` at the top. Returns the keys and which have a .json."""
    keys, with_json = [], set()

    def put(rel, data):
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)

    for i in range(labelled + unlabelled):
        cls = "c%d" % (i % 8) if i < labelled else ""
        key = os.path.join(cls, "k%05d" % i)
        img = rng.randbytes(rng.randrange(200, 3000))
        digest = hashlib.sha256(img).hexdigest()
        put(key + ".jpg", img)
        put(key + ".txt", ("%s %s" % (cls or "-", digest)).encode())
        if cls == "c7" and i % 2:
            put(key + ".json", json.dumps({"cls": cls, "sha": digest}).encode())
            with_json.add(key)
        keys.append(key)
    return keys, with_json


def read(path):
    with open(path, "rb") as f:
        return f.read()


def check_pair(mnt, key, with_json):
    """Read key's image, then its caption (and .json), as a pair reader's
    __getitem__ does; the reason they do not belong together, or None."""
    img = read(os.path.join(mnt, key + ".jpg"))
    cls, digest = read(os.path.join(mnt, key + ".txt")).decode().split()
    want_cls = os.path.dirname(key) or "-"
    if hashlib.sha256(img).hexdigest() != digest:
        return "%s: caption of another image" % key
    if cls != want_cls:
        return "%s: a sample of class %s" % (key, cls)
    if key in with_json:
        meta = json.loads(read(os.path.join(mnt, key + ".json")))
        if meta["sha"] != digest or meta["cls"] != cls:
            return "%s: metadata of another sample" % key
    return None


def read_all(mnt, keys, with_json, readers=READERS):
    """Every pair read once by `readers` threads; the mismatches."""
    bad, lock = [], threading.Lock()

    def run(part):
        for key in part:
            try:
                why = check_pair(mnt, key, with_json)
            except OSError as e:
                why = "%s: %s" % (key, e)
            if why:
                with lock:
                    bad.append(why)

    threads = [threading.Thread(target=run, args=(keys[i::readers],))
               for i in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return bad


def packed(tmp_path, www, labelled, unlabelled, seed):
    root, srv = www
    src = str(tmp_path / "in")
    keys, with_json = make_pairs(src, labelled, unlabelled,
                                 random.Random(seed))
    out = os.path.join(root, "p")
    pack("--samples", src, "--out", out, "--shard-size", "256K",
         "--threads", "2", "--base-url", srv.url + "/p")
    assert len(shards_of(out)) > 4
    return source(srv, out, "p"), keys, with_json


def test_echoed_pairs_stay_pairs_under_8_readers(tmp_path, www, mounter):
    """10,000 pairs read by 8 concurrent readers through a fixed echo=4
    mount: many serves are echoes, and not one caption, class or .json
    belongs to another image than the one read with it."""
    src, keys, with_json = packed(tmp_path, www, 8000, 2000, 31)
    m = mounter(src, opts={"layout": "samples", "echo": 4,
                           "echo_mode": "fixed"})
    rng = random.Random(7)
    rng.shuffle(keys)
    bad = read_all(m.mnt, keys, with_json)
    st = m.stats()
    assert bad == [], "%d mismatched of %d: %s" % (len(bad), len(keys),
                                                   bad[:5])
    assert st["echoes_served"] > len(keys) // 5, st
    # One serve per visit, however many of its files were opened.
    assert st["echoes_served"] + st["fresh_served"] == len(keys), st


def test_visit_of_some_members_and_reopened_paths(tmp_path, www, mounter):
    """A reader that opens only the images (no captions) still gets a
    serve per key, and in a later pass its image read twice and then the
    caption are one visit of the key (issue 45): one new serve per key,
    the caption matching the image read just before it."""
    src, keys, with_json = packed(tmp_path, www, 600, 200, 5)
    m = mounter(src, opts={"layout": "samples", "echo": 4,
                           "echo_mode": "fixed"})
    for key in keys[:200]:
        read(os.path.join(m.mnt, key + ".jpg"))
    st = m.stats()
    assert st["echoes_served"] + st["fresh_served"] == 200, st
    for key in keys[:200]:
        read(os.path.join(m.mnt, key + ".jpg"))  # a second visit each
        why = check_pair(m.mnt, key, with_json)
        assert why is None, why
    # One visit more per key: the reader moved on to another key between.
    st = m.stats()
    assert st["echoes_served"] + st["fresh_served"] == 400, st


def test_exact_samples_mount_is_unchanged_by_echo_code(tmp_path, www, mounter):
    """echo=1 over the samples layout serves every pair as packed."""
    src, keys, with_json = packed(tmp_path, www, 300, 100, 11)
    m = mounter(src, opts={"layout": "samples"})
    assert read_all(m.mnt, keys, with_json, readers=2) == []


PAIRS_DATASET = '''
import glob, hashlib, io, sys
import torch
from PIL import Image

class Pairs(torch.utils.data.Dataset):
    """The README's pair reader: every *.jpg under root and its .txt."""
    def __init__(self, root):
        self.jpgs = sorted(glob.glob(root + "/**/*.jpg", recursive=True))
    def __len__(self):
        return len(self.jpgs)
    def __getitem__(self, i):
        with open(self.jpgs[i], "rb") as f:
            data = f.read()
        size = Image.open(io.BytesIO(data)).convert("RGB").size
        caption = open(self.jpgs[i][:-3] + "txt").read()
        return hashlib.sha256(data).hexdigest(), caption, size[0]

n = bad = 0
loader = torch.utils.data.DataLoader(Pairs(sys.argv[1]), batch_size=32,
                                     num_workers=2, shuffle=True)
for digests, captions, widths in loader:
    for d, c, w in zip(digests, captions, widths):
        n += 1
        bad += c.split()[1] != d or int(w) != 16
print(n, bad)
'''


def test_dataloader_pair_reader_on_exact_and_echo(tmp_path, www, mounter):
    """An unmodified PyTorch Dataset (the README's) lists *.jpg, decodes
    each and opens its sibling .txt, through DataLoader with 2 workers:
    every pair matches, on an exact and on an echo mount."""
    torch = pytest.importorskip("torch", reason="PyTorch not installed")
    del torch
    from PIL import Image
    import io
    import subprocess
    import sys
    root, srv = www
    src = tmp_path / "in"
    rng = random.Random(2)
    for i in range(1200):
        cls = "c%d" % (i % 4) if i < 1000 else ""
        key = os.path.join(str(src), cls, "p%04d" % i)
        os.makedirs(os.path.dirname(key), exist_ok=True)
        buf = io.BytesIO()
        Image.new("RGB", (16, 16), tuple(rng.randrange(256)
                                         for _ in range(3))).save(buf, "JPEG")
        with open(key + ".jpg", "wb") as f:
            f.write(buf.getvalue())
        with open(key + ".txt", "w") as f:
            f.write("%s %s" % (cls or "-",
                               hashlib.sha256(buf.getvalue()).hexdigest()))
    out = os.path.join(root, "d")
    pack("--samples", str(src), "--out", out, "--shards", "6",
         "--base-url", srv.url + "/d")
    s = source(srv, out, "d")
    script = tmp_path / "pairs.py"
    script.write_text(PAIRS_DATASET)
    for name, opts in (("exact", {"layout": "samples"}),
                       ("echo", {"layout": "samples", "echo": 4,
                                 "echo_mode": "fixed"})):
        m = mounter(s, opts=opts, name=name)
        r = subprocess.run([sys.executable, str(script), m.mnt],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.split() == ["1200", "0"], (name, r.stdout)
        if name == "echo":
            assert m.stats()["echoes_served"] > 0


def test_echoed_pairs_of_a_key_in_two_shards(tmp_path, www, mounter):
    """Issue 45: shards A and B both hold keys c/x and c/y. On an echo mount
    over the samples layout, B's are renamed whole (one suffix for the
    image and its caption), so for every stem the reader finds both files
    and, over several epochs of echoes, each caption holds the SHA-1 of the
    image served with it."""
    from test_names import paired_shards
    root, srv = www
    src = "%s/%s" % (srv.url, paired_shards(root))
    m = mounter(src, opts={"layout": "samples", "echo": 4,
                           "echo_mode": "fixed"})
    names = sorted(os.path.relpath(os.path.join(d, n), m.mnt)
                   for d, _, ns in os.walk(m.mnt) for n in ns)
    stems = sorted({p.rsplit(".", 1)[0] for p in names})
    assert len(stems) == 4 and len(names) == 8, names
    for _ in range(4):
        for stem in stems:
            with open(os.path.join(m.mnt, stem + ".jpg"), "rb") as f:
                img = f.read()
            with open(os.path.join(m.mnt, stem + ".txt"), "rb") as f:
                cap = f.read().decode()
            assert cap == hashlib.sha1(img).hexdigest(), stem
    assert m.stats()["errors"]["duplicate_key"] == 2
