"""test_pack.py - echofs-pack on a user's own files (an ImageFolder tree, a
directory of samples, a file list) and the samples layout over its output:
what a mount shows is byte for byte the input and what `tar -x` of the
shards gives; bad input fails with one clear line."""

import hashlib
import json
import os
import random
import subprocess
import tarfile

import pytest

import helpers
from helpers import PACK

import nginx as nginx_mod  # tools/dev (conftest puts it on the path)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def tree_hashes(root, skip_hidden=True):
    out = {}
    for dirpath, dirs, files in os.walk(root):
        if skip_hidden:
            dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if skip_hidden and name.startswith("."):
                continue
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, root)] = sha(p)
    return out


def pack(*args, check=True):
    r = subprocess.run([PACK] + list(args), capture_output=True, text=True)
    if check:
        assert r.returncode == 0, "echofs-pack failed: %s" % r.stderr
    return r


def shards_of(out, prefix="data"):
    return sorted(os.path.join(out, n) for n in os.listdir(out)
                  if n.startswith(prefix + "-") and n.endswith(".tar"))


def source(srv, out, sub, prefix="data"):
    n = len(shards_of(out, prefix))
    return "%s/%s/%s-{000000..%06d}.tar" % (srv.url, sub, prefix, n - 1)


def extract(shards, dest):
    """`tar -x` of every shard into dest: {path: sha256}."""
    os.makedirs(dest, exist_ok=True)
    for s in shards:
        subprocess.run(["tar", "-xf", s, "-C", dest], check=True)
    return tree_hashes(dest, skip_hidden=False)


@pytest.fixture
def www(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    srv = nginx_mod.Nginx(str(root), str(tmp_path / "nginx"))
    yield str(root), srv
    srv.stop()


def make_imagefolder(root, rng):
    """Three classes of random "images" (an exact mount never decodes),
    plus what ImageFolder ignores: a hidden file and directory, a text
    file, a file beside the classes."""
    want = {}
    for cls in ("cat", "dog", "n01440764"):
        os.makedirs(os.path.join(root, cls))
        for i in range(40):
            ext = rng.choice(["jpg", "png", "jpeg"])
            rel = os.path.join(cls, "%s_%03d.%s" % (cls, i, ext))
            data = rng.randbytes(rng.randrange(1, 20000))
            with open(os.path.join(root, rel), "wb") as f:
                f.write(data)
            want[rel] = hashlib.sha256(data).hexdigest()
    with open(os.path.join(root, "dog", "notes.txt"), "w") as f:
        f.write("not an image")
    with open(os.path.join(root, "cat", ".hidden.jpg"), "wb") as f:
        f.write(b"x")
    os.makedirs(os.path.join(root, ".git", "x"))
    with open(os.path.join(root, ".git", "x", "y.jpg"), "wb") as f:
        f.write(b"y")
    with open(os.path.join(root, "README.txt"), "w") as f:
        f.write("beside the classes")
    return want


def test_imagefolder_tree_round_trip(tmp_path, www, mounter):
    """An ImageFolder tree packed into shards (labels as .cls, class names
    in the index) mounts as the same tree, byte for byte."""
    root, srv = www
    src = str(tmp_path / "in")
    want = make_imagefolder(src, random.Random(31))
    out = os.path.join(root, "if")
    r = pack("--imagefolder", src, "--out", out, "--shards", "3",
             "--threads", "2", "--base-url", srv.url + "/if")
    assert "120 samples" in r.stdout, r.stdout
    assert len(shards_of(out)) == 3
    with tarfile.open(shards_of(out)[0]) as t:
        names = t.getnames()
    assert any(n.endswith(".cls") for n in names), names[:5]
    m = mounter(source(srv, out, "if"))
    got = helpers.walk(m.mnt)
    assert got == want
    assert m.stats()["classes"] == 3


def test_pack_shuffles_by_seed(tmp_path):
    """Samples are shuffled across shards: the same seed gives the same
    bytes, another seed another order."""
    src = str(tmp_path / "in")
    make_imagefolder(src, random.Random(7))
    outs = {}
    for name, seed in (("a", "1"), ("b", "1"), ("c", "2")):
        out = str(tmp_path / name)
        pack("--imagefolder", src, "--out", out, "--shards", "4",
             "--seed", seed, "--threads", "2")
        outs[name] = [sha(s) for s in shards_of(out)]
    assert outs["a"] == outs["b"]
    assert outs["a"] != outs["c"]
    with tarfile.open(shards_of(str(tmp_path / "a"))[0]) as t:
        classes = {n.split("/")[0] for n in t.getnames()}
    assert len(classes) > 1, "one shard holds one class: not shuffled"


def make_samples(root, rng):
    """Image-caption pairs with .json metadata (some labelled, in nested
    key directories), unlabelled samples at the top, a mask with a
    two-part extension, and an unlabelled sample with no image at all."""
    files = {}

    def put(rel, data):
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
        files[rel] = hashlib.sha256(data).hexdigest()

    for i in range(60):
        d = "pairs/part%d" % (i % 3)
        key = "%s/k%04d" % (d, i)
        put(key + ".jpg", rng.randbytes(rng.randrange(100, 9000)))
        put(key + ".txt", ("caption of sample %d" % i).encode())
        put(key + ".json", json.dumps({"id": i, "w": 10 + i}).encode())
        if i % 2:
            put(key + ".cls", str(i % 5).encode())
        if i % 7 == 0:
            put(key + ".seg.png", rng.randbytes(300))
    for i in range(20):
        put("u%03d.webp" % i, rng.randbytes(rng.randrange(1, 5000)))
        put("u%03d.txt" % i, b"unlabelled %d" % i)
    put("meta/only.json", b"{}")  # a sample without an image
    return files


def test_samples_layout_matches_tar_x(tmp_path, www, mounter):
    """A directory of samples packed into shards and mounted with
    layout=samples: every member of every sample (unlabelled ones too) is
    a file at <key>.<ext>, byte-identical to `tar -x` of the shards."""
    root, srv = www
    src = str(tmp_path / "in")
    files = make_samples(src, random.Random(3))
    out = os.path.join(root, "s")
    pack("--samples", src, "--out", out, "--shard-size", "64K",
         "--threads", "2", "--base-url", srv.url + "/s")
    shards = shards_of(out)
    assert len(shards) > 3
    tar_x = extract(shards, str(tmp_path / "x"))
    assert tar_x == files
    m = mounter(source(srv, out, "s"), opts={"layout": "samples"})
    got = helpers.walk(m.mnt)
    assert got == tar_x
    assert "u000.webp" in os.listdir(m.mnt)  # unlabelled: shown
    # Directory link counts: 2 + subdirectories (find and ls -l rely on
    # them): the root has pairs/ and meta/, pairs/ three parts.
    assert os.stat(m.mnt).st_nlink == 2 + 2
    assert os.stat(m.path("pairs")).st_nlink == 2 + 3
    assert os.stat(m.path("pairs", "part0")).st_nlink == 2
    # The default layout over the same index: labelled images only (by
    # .cls or by their directory; the top-level u*.webp have neither).
    m2 = mounter(source(srv, out, "s"))
    shown = helpers.list_paths(m2.mnt)
    assert len(shown) == 60
    assert all(p.endswith(".jpg") for p in shown)


def test_file_list(tmp_path, www, mounter):
    """A list of files (relative to --base) is packed as a directory
    of them would be: the mount shows exactly the listed files."""
    root, srv = www
    src = str(tmp_path / "in")
    files = make_samples(src, random.Random(5))
    listed = sorted(p for p in files if p.startswith("pairs/part1/"))
    lst = tmp_path / "list.txt"
    lst.write_text("\n".join(listed) + "\n")
    out = os.path.join(root, "l")
    pack("--files", str(lst), "--base", src, "--out", out, "--per-shard",
         "5", "--base-url", srv.url + "/l", "--prefix", "lst")
    m = mounter(source(srv, out, "l", "lst"), opts={"layout": "samples"})
    got = helpers.walk(m.mnt)
    assert got == {p: files[p] for p in listed}


def one_line_error(r):
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.parametrize("case", ["no_extension", "control_char",
                                  "too_long", "empty", "missing_listed",
                                  "two_images"])
def test_bad_input_fails_clearly(tmp_path, case):
    src = tmp_path / "in"
    (src / "c").mkdir(parents=True)
    (src / "c" / "ok.jpg").write_bytes(b"fine")
    mode = ["--samples", str(src)]
    if case == "no_extension":
        (src / "c" / "README").write_text("x")
        want = "README: cannot be a WebDataset member: no extension"
    elif case == "control_char":
        (src / "c" / "a\tb.jpg").write_bytes(b"x")
        want = "control character"
    elif case == "too_long":
        deep = src / ("d" * 150) / ("e" * 120)
        deep.mkdir(parents=True)
        (deep / "x.jpg").write_bytes(b"x")
        want = "too long for a tar header"
    elif case == "empty":
        os.remove(src / "c" / "ok.jpg")
        want = "no files to pack"
    elif case == "missing_listed":
        (tmp_path / "l.txt").write_text("c/ok.jpg\nc/missing.jpg\n")
        mode = ["--files", str(tmp_path / "l.txt"), "--base", str(src)]
        want = "missing.jpg: No such file or directory"
    elif case == "two_images":
        (src / "c" / "ok.png").write_bytes(b"other")
        mode = ["--imagefolder", str(src)]
        want = "two inputs make this member"
    out = tmp_path / "out"
    line = one_line_error(pack(*mode, "--out", str(out), check=False))
    assert want in line, line
    assert line.startswith("echofs-pack: ")
    assert not (out.exists() and [n for n in os.listdir(out)
                                  if ".tar" in n])


def test_samples_layout_refuses_what_it_cannot_do(tmp_path, www, mounter):
    """Preprocessing and repartition are refused with layout=samples, as
    is an index without members (format 2), each with one line."""
    root, srv = www
    src = str(tmp_path / "in")
    make_samples(src, random.Random(9))
    out = os.path.join(root, "r")
    pack("--samples", src, "--out", out, "--shards", "2",
         "--base-url", srv.url + "/r")
    s = source(srv, out, "r")
    # Option errors: one error line (then the usage line, as for every
    # bad option).
    for opts, want in (({"layout": "samples", "echo": 2, "repartition": 1},
                        "repartition needs layout=imagefolder"),
                       ({"layout": "samples", "size": 64},
                        "layout=samples serves members as they are"),
                       ({"layout": "tree"}, "bad layout 'tree'")):
        err = helpers.failed_mount(mounter, s, opts, one_line=False)
        assert want in err.splitlines()[0], err
    # The same shards with an index of format 2 (no F lines).
    v3 = open(os.path.join(out, "data.echofs-index")).read().splitlines()
    v2 = ["echofs-index 2"] + [ln for ln in v3[1:] if not ln.startswith("F")]
    old = tmp_path / "old.echofs-index"
    old.write_text("\n".join(v2) + "\n")
    err = helpers.failed_mount(mounter, s, {"layout": "samples",
                                            "index": str(old)})
    assert "needs an index that lists every member (format 3)" in err
    # ... which still mounts in the default layout.
    m = mounter(s, opts={"index": str(old)})
    assert len(helpers.list_paths(m.mnt)) == 60


def test_samples_layout_names(tmp_path, www, mounter):
    """Name rules of the samples layout: a hidden key directory is left
    out, a key seen twice (two shards) gets a _dup name, and a file called
    like a directory beside it gives way to the directory."""
    root, srv = www
    www_dir = os.path.join(root, "n")
    os.makedirs(www_dir)

    def shard(path, members):
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
            for name, data in members:
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                import io
                t.addfile(ti, io.BytesIO(data))

    shard(os.path.join(www_dir, "n-000000.tar"),
          [("a/k.txt", b"first"), (".hid/k.txt", b"h"), ("x.y", b"file"),
           ("x.y/z.txt", b"under")])
    shard(os.path.join(www_dir, "n-000001.tar"), [("a/k.txt", b"second")])
    idx = os.path.join(www_dir, "n.echofs-index")
    r = subprocess.run([os.path.join(helpers.BUILD, "tools", "echofs-index"),
                        "--base-url", srv.url + "/n", "-o", idx,
                        os.path.join(www_dir, "n-000000.tar"),
                        os.path.join(www_dir, "n-000001.tar")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    m = mounter("%s/n/n-{000000..000001}.tar" % srv.url,
                opts={"layout": "samples"})
    got = helpers.walk(m.mnt)
    dup = [p for p in got if p.startswith("a/k_dup")]
    assert set(got) == {"a/k.txt", "x.y/z.txt"} | set(dup), got
    assert len(dup) == 1
    assert {got["a/k.txt"], got[dup[0]]} == {
        hashlib.sha256(b"first").hexdigest(),
        hashlib.sha256(b"second").hexdigest()}
    assert "members skipped (hidden name)" in m.log()


# --- Symlinks and special files (issue 50, finding 1) ----------------------
# The packer never leaves its input tree unless asked, never blocks on a
# FIFO, and packs the rest: a user packing a home directory for upload must
# not publish what a symlink in it points at.

MARKER = b"ECHOFS-SECRET-" + os.urandom(8).hex().encode()


def open_tmp():
    """A scratch directory every user can enter, for the packer run as
    nobody (pytest's tmp_path is 0700)."""
    import tempfile
    d = tempfile.mkdtemp(prefix="echofs-pack-")
    os.chmod(d, 0o755)
    return d


def as_nobody():
    """The packer run as nobody when we are root (root reads a mode-000
    file), or None when that cannot be done."""
    import shutil
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        return None
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o644)


def hostile_tree(base):
    """An input tree with real files and, around them, everything that
    must not be packed: symlinks to a file, into a class and as a whole
    class leading out of the tree (to a secret holding MARKER), a
    directory loop, a broken link, a FIFO and an unreadable file."""
    secret = os.path.join(base, "secret")
    write(os.path.join(secret, "shadow.jpg"), MARKER)
    write(os.path.join(secret, "dir", "x.jpg"), MARKER + b" in a dir")
    src = os.path.join(base, "in")
    real = {"cat/a.jpg": b"a-bytes", "cat/b.png": b"b-bytes",
            "cat/sub/c.jpg": b"c-bytes", "dog/d.jpg": b"d-bytes"}
    for rel, data in real.items():
        write(os.path.join(src, rel), data)
    os.symlink(os.path.join(secret, "shadow.jpg"),
               os.path.join(src, "cat", "creds.jpg"))
    os.symlink("../../secret/dir", os.path.join(src, "cat", "out"))
    os.symlink(os.path.join(secret, "dir"), os.path.join(src, "stolen"))
    os.symlink("..", os.path.join(src, "cat", "loop"))
    os.symlink("nowhere.jpg", os.path.join(src, "dog", "gone.jpg"))
    os.mkfifo(os.path.join(src, "cat", "pipe.jpg"))
    write(os.path.join(src, "dog", "locked.jpg"), MARKER + b" locked")
    os.chmod(os.path.join(src, "dog", "locked.jpg"), 0)
    for d, dirs, _ in os.walk(base):
        for n in dirs:
            os.chmod(os.path.join(d, n), 0o755)
    return src, real


def members(out):
    """{member name: bytes} over every shard under out; asserts that no
    file written under out holds MARKER."""
    got = {}
    for name in os.listdir(out):
        with open(os.path.join(out, name), "rb") as f:
            assert MARKER not in f.read(), "secret bytes in %s" % name
    for s in shards_of(out):
        with tarfile.open(s) as t:
            for ti in t.getmembers():
                got[ti.name] = t.extractfile(ti).read()
    return got


def run_pack(prefix, *args):
    # A timeout: a packer that opens a FIFO blocks forever.
    r = subprocess.run(prefix + [PACK] + list(args), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, "echofs-pack failed: %s" % r.stderr
    return r


def skipped_line(stderr, path, *words):
    """The one stderr line that names path as skipped, with every word."""
    lines = [ln for ln in stderr.splitlines()
             if ln.startswith("echofs-pack: skipped ") and
             (path + ":") in ln]
    assert len(lines) == 1, "no one line for %s in:\n%s" % (path, stderr)
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def counted(stdout, what):
    import re
    m = re.search(r"(\d+) %s" % re.escape(what), stdout)
    assert m, "%r not counted in: %s" % (what, stdout)
    return int(m.group(1))


@pytest.mark.parametrize("mode", ["imagefolder", "samples"])
def test_pack_stays_inside_the_tree(mode):
    """Symlinks out of the tree (a file, a directory in a class, a whole
    class), a loop, a broken link, a FIFO and an unreadable file are each
    skipped with a line and counted; the real files are packed and no
    byte from outside the tree reaches a shard."""
    prefix = as_nobody()
    if prefix is None:
        pytest.skip("root without setpriv: cannot make a file unreadable")
    base = open_tmp()
    try:
        src, real = hostile_tree(base)
        out = os.path.join(base, "out")
        os.mkdir(out)
        os.chmod(out, 0o777)
        r = run_pack(prefix, "--" + mode, src, "--out", out)
        got = members(out)
        if mode == "imagefolder":
            want = {k: v for k, v in real.items()}
            want.update({k.rsplit(".", 1)[0] + ".cls":
                         b"0" if k.startswith("cat/") else b"1"
                         for k in real})
        else:
            want = real
        assert got == want
        secret = os.path.join(base, "secret")
        err = r.stderr
        skipped_line(err, src + "/cat/creds.jpg", "symlink to " + secret +
                     "/shadow.jpg", "leaves the input tree")
        skipped_line(err, src + "/cat/out", "symlink to ../../secret/dir",
                     "leaves the input tree")
        skipped_line(err, src + "/stolen", "leaves the input tree")
        skipped_line(err, src + "/cat/loop", "symlink to ..")
        skipped_line(err, src + "/dog/gone.jpg", "symlink to nowhere.jpg",
                     "No such file or directory")
        skipped_line(err, src + "/cat/pipe.jpg", "FIFO")
        skipped_line(err, src + "/dog/locked.jpg", "Permission denied")
        assert counted(r.stdout, "symlinks out of the tree") == 3
        assert counted(r.stdout, "symlink not followed") == 1
        assert counted(r.stdout, "broken symlink") == 1
        assert counted(r.stdout, "special file") == 1
        assert counted(r.stdout, "unreadable") == 1
    finally:
        subprocess.run(["rm", "-rf", base], check=True)


def test_follow_symlinks_inside_the_tree(tmp_path):
    """--follow-symlinks follows a link whose target is inside the tree
    (a file, relative or absolute, a directory), still skips one leading
    out, and names a directory loop instead of walking it forever."""
    src, real = hostile_tree(str(tmp_path))
    os.remove(os.path.join(src, "dog", "locked.jpg"))
    os.symlink("a.jpg", os.path.join(src, "cat", "alias.jpg"))
    os.symlink(os.path.join(src, "cat", "b.png"),
               os.path.join(src, "cat", "abs.png"))
    os.symlink("../dog", os.path.join(src, "cat", "more"))
    out = str(tmp_path / "out")
    r = run_pack([], "--samples", src, "--out", out, "--follow-symlinks")
    want = dict(real)
    want.update({"cat/alias.jpg": real["cat/a.jpg"],
                 "cat/abs.png": real["cat/b.png"],
                 "cat/more/d.jpg": real["dog/d.jpg"]})
    assert members(out) == want
    err = r.stderr
    skipped_line(err, src + "/cat/creds.jpg", "leaves the input tree")
    skipped_line(err, src + "/cat/out", "leaves the input tree")
    skipped_line(err, src + "/stolen", "leaves the input tree")
    skipped_line(err, src + "/cat/loop", "directory loop")
    skipped_line(err, src + "/cat/pipe.jpg", "FIFO")
    assert counted(r.stdout, "directory loop") == 1
    assert counted(r.stdout, "symlinks out of the tree") == 3


def test_file_list_stays_inside_base(tmp_path):
    """--files names paths under --base: a listed symlink out of it, a
    FIFO and a path through a symlinked directory are skipped with a
    line, never read."""
    src, real = hostile_tree(str(tmp_path))
    os.remove(os.path.join(src, "dog", "locked.jpg"))
    lst = tmp_path / "list.txt"
    lst.write_text("cat/a.jpg\ncat/creds.jpg\ncat/out/x.jpg\n"
                   "cat/pipe.jpg\ndog/d.jpg\n")
    out = str(tmp_path / "out")
    r = run_pack([], "--files", str(lst), "--base", src, "--out", out)
    assert members(out) == {"cat/a.jpg": real["cat/a.jpg"],
                            "dog/d.jpg": real["dog/d.jpg"]}
    skipped_line(r.stderr, src + "/cat/creds.jpg", "leaves the input tree")
    skipped_line(r.stderr, src + "/cat/out/x.jpg", "leaves the input tree")
    skipped_line(r.stderr, src + "/cat/pipe.jpg", "FIFO")
