"""test_prepared.py - the prepared-sample tier (cache_dir/prepared): an exact
preprocessing mount serves the same bytes with and without it; a later mount
on the same cache_dir serves from it (hits, no decode); an echo mount of the
same recipe fills its pool from what an exact mount prepared (a mount
that draws nothing keeps the centre crop only; one that augments keeps whole
images, apart); a prepared file
altered or truncated on disk is never served, but dropped and made again.
A sample's entry is written at its second use (issue 47): a first run
writes nothing, the next one on the cache_dir fills the tier."""

import os
import random
import struct
import subprocess
import time

import pytest

import helpers

N = 300


def mount(mounter, nginx, cache_dir, **extra):
    o = {"index": nginx.test_index, "size": 32, "crop": 28, "format": "ppm"}
    o.update(extra)
    return mounter(helpers.source_of(nginx.url, "test"), cache_dir=cache_dir,
                   opts=o)


def some_paths(m):
    paths = sorted(helpers.list_paths(m.mnt))
    return random.Random(30).sample(paths, N)


def read_all(m, paths):
    return {p: helpers.sha256_file(m.path(p)) for p in paths}


def settled(m, guard=120):
    """The stats once the tier's writer has written what was queued (it
    runs at the lowest CPU priority, after the reads that made them); the
    guard only stops a hang."""
    t0 = time.monotonic()
    while True:
        st = m.stats()
        if st["prepared_queued"] == 0 or time.monotonic() - t0 > guard:
            return st
        time.sleep(0.05)


def prepared_files(cache_dir):
    d = os.path.join(cache_dir, "prepared", "shards")
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".shard"))


@pytest.mark.parametrize("fmt", ["ppm", "jpeg"])
def test_exact_mount_same_bytes_with_and_without_tier(mounter, nginx, tmp_path, fmt):
    plain = mount(mounter, nginx, str(tmp_path / "c0"), prepared=0, format=fmt)
    paths = some_paths(plain)
    want = read_all(plain, paths)
    assert "prepared_hits" not in plain.stats()
    assert not os.path.exists(tmp_path / "c0" / "prepared")
    plain.umount()

    cache = str(tmp_path / "c1")
    first = mount(mounter, nginx, cache, format=fmt)
    assert read_all(first, paths) == want
    st = settled(first)
    # A first use writes nothing (issue 47: it wrote N, and the first run
    # paid for it).
    assert st["prepared_misses"] == N and st["prepared_writes"] == 0, st
    assert st["prepared_skipped"] == 0 and st["prepared_queued"] == 0, st
    assert st["prepared_hits"] == 0
    first.umount()
    assert len(prepared_files(cache)) == 0

    # The second run on the cache_dir: each file's second use, written.
    second = mount(mounter, nginx, cache, format=fmt)
    assert read_all(second, paths) == want
    st = settled(second)
    assert st["prepared_misses"] == N and st["prepared_writes"] == N, st
    assert st["prepared_skipped"] == 0, st
    second.umount()
    assert len(prepared_files(cache)) == N

    # The third: every file from the tier.
    third = mount(mounter, nginx, cache, format=fmt)
    assert read_all(third, paths) == want
    st = third.stats()
    assert st["prepared_hits"] == N and st["prepared_misses"] == 0, st
    assert st["prepared_bytes"] > 0


def fill(mounter, nginx, cache, read, **extra):
    """The tier filled for read's files: two mounts read them (an entry is
    written at a sample's second use)."""
    for _ in range(2):
        m = mount(mounter, nginx, cache, **extra)
        read(m)
        settled(m)
        m.umount()


def read_class_0(m):
    """Class 0 whole (its 1,000 samples): every sample an echo mount's
    class 0 can serve (classes 0 and 1 took twice as long)."""
    paths = sorted(helpers.list_paths(m.mnt))
    read_all(m, [p for p in paths if p.startswith("0/")])


def read_some_echoes(m):
    for p in sorted(helpers.list_paths(m.mnt))[:200]:
        with open(m.path(p), "rb") as f:
            assert len(f.read()) == len(b"P6\n28 28\n255\n") + 28 * 28 * 3


def entry_sizes(cache_dir):
    """The data sizes of the tier's entries, from each file's tail (its
    last 40 bytes: magic[16], u64 size, ...; cache/store/store_format.c)."""
    sizes = set()
    for f in prepared_files(cache_dir):
        with open(f, "rb") as fh:
            fh.seek(-40, os.SEEK_END)
            sizes.add(struct.unpack_from("<Q", fh.read(40), 16)[0])
    return sizes


HEADER = 16  # a prepared buffer's own header (cache/image/prep.c)


def test_echo_mount_fills_from_what_an_exact_mount_prepared(mounter, nginx, tmp_path):
    cache = str(tmp_path / "c")
    fill(mounter, nginx, cache, read_class_0)
    # Neither draws: the same centre-crop entries (28x28, not 32x32).
    assert entry_sizes(cache) == {HEADER + 28 * 28 * 3}
    echo = mount(mounter, nginx, cache, echo=2)
    read_some_echoes(echo)
    st = echo.stats()
    assert st["prepared_hits"] > 0, st
    assert st["prepared_writes"] == 0, st


def test_an_augmenting_mount_keeps_whole_images_apart(mounter, nginx, tmp_path):
    cache = str(tmp_path / "c")
    fill(mounter, nginx, cache, read_class_0)
    # A random crop needs the whole resized image (32x32): not the exact
    # mount's 28x28 centre crops, entries of its own, written at a
    # sample's second use: in the second mount.
    for i in range(2):
        echo = mount(mounter, nginx, cache, echo=2, augment=1, flip=1)
        read_class_0(echo)
        st = settled(echo)
        assert st["prepared_hits"] == 0, st
        assert (st["prepared_writes"] > 0) == (i == 1), st
        echo.umount()
    assert entry_sizes(cache) == {HEADER + 28 * 28 * 3, HEADER + 32 * 32 * 3}
    again = mount(mounter, nginx, cache, echo=2, augment=1, flip=1)
    read_some_echoes(again)
    assert again.stats()["prepared_hits"] > 0


def test_altered_or_truncated_prepared_file_is_never_served(mounter, nginx, tmp_path):
    plain = mount(mounter, nginx, str(tmp_path / "c0"), prepared=0)
    paths = some_paths(plain)
    want = read_all(plain, paths)
    plain.umount()

    cache = str(tmp_path / "c1")
    fill(mounter, nginx, cache, lambda m: read_all(m, paths))
    files = prepared_files(cache)
    assert len(files) == N
    altered, truncated = files[::2], files[1::2]
    for f in altered:  # one byte of a pixel inside the crop changed
        with open(f, "r+b") as fh:
            fh.seek(16 + (15 * 32 + 16) * 3)
            b = fh.read(1)
            fh.seek(16 + (15 * 32 + 16) * 3)
            fh.write(bytes([b[0] ^ 0x40]))
    for f in truncated:
        os.truncate(f, os.path.getsize(f) - 7)

    again = mount(mounter, nginx, cache)
    # Past the second in which loading logged the truncated files (one
    # cache_corrupt line a second), so that the altered ones get a line.
    time.sleep(1.1)
    assert read_all(again, paths) == want
    st = settled(again)
    assert st["prepared_hits"] == 0, st
    assert st["prepared_misses"] == N, st
    # The store drops the truncated files when it loads the directory; the
    # altered ones fail their checksum when read.
    assert st["prepared_corrupt"] == len(altered), st
    assert st["prepared_writes"] == N, st
    # Rate-limited with the cache's other corrupt entries (issue 50: a
    # line each, 150 here), each line saying what was wrong.
    lines = [ln for ln in again.log().splitlines() if "corrupt" in ln]
    assert len(lines) < 20, "%d lines:\n%s" % (len(lines), "\n".join(lines[:5]))
    assert any("prepared sample" in ln and "failed its checksum" in ln
               for ln in lines), lines
    again.umount()
    # Made again: a fresh mount reads every one from the tier.
    last = mount(mounter, nginx, cache)
    assert read_all(last, paths) == want
    assert last.stats()["prepared_hits"] == N


def test_a_full_prepared_disk_counts_cache_write(mounter, nginx, tmp_path):
    """The tier's writes that fail for a full disk are cache_write errors
    in the stats, as they are in the log (issue 50: 1,509 logged, 0
    counted)."""
    cache = tmp_path / "c"
    prep = cache / "prepared"
    prep.mkdir(parents=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700",
                        "tmpfs", str(prep)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount tmpfs: %s" % r.stderr.strip())
    try:
        m = mount(mounter, nginx, str(cache))
        read_all(m, some_paths(m))
        settled(m)
        m.umount()
        m = mount(mounter, nginx, str(cache))  # second uses: written
        read_all(m, some_paths(m))
        st = settled(m)
        logged = m.log().count("cannot write an entry in %s" % prep)
        assert logged > 0, m.log()[-2000:]
        assert st["errors"]["cache_write"] > 0, st["errors"]
        m.umount()
    finally:
        subprocess.run(["umount", "-l", str(prep)], capture_output=True)
