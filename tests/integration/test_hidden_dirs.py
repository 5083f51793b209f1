"""test_hidden_dirs.py - a hidden directory in a shard (".git/", a class's
".ipynb_checkpoints/") is no class and holds no sample, as ImageFolder
skips hidden names; its members are counted in tar_skipped (issue 21,
finding 4b)."""

import io
import os
import tarfile


def make_shard(path, img):
    members = [("cat/a.jpg", img), (".hidden/b.jpg", img),
               ("cat/.ipynb_checkpoints/c.jpg", img), ("dog/d.jpg", img)]
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def test_hidden_directories_are_not_classes(mounter, private_nginx, dataset):
    img = open(os.path.join(os.path.dirname(__file__), "..", "data", "img",
                            "photo.jpg"), "rb").read()
    d = os.path.join(dataset.www, "hidden")
    os.makedirs(d, exist_ok=True)
    make_shard(os.path.join(d, "h-000000.tar"), img)
    m = mounter("%s/hidden/h-{000000..000000}.tar" % private_nginx.url)
    assert sorted(os.listdir(m.mnt)) == ["cat", "dog"]
    assert os.listdir(m.path("cat")) == ["a.jpg"]
    with open(m.path("cat", "a.jpg"), "rb") as f:
        assert f.read() == img
    assert m.stats()["errors"]["tar_skipped"] == 2
    assert "hidden name" in m.log()
