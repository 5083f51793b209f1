"""test_whole_sample_order.py - whole-sample echo in any read order
(issue 45, finding 2): what one reader reads of a key, one member after
the other, is one sample, whatever it read before, whatever other readers
read, and whatever members it leaves out. Before: an image-only pass left
visits open for 10 s that the next reads' captions joined while their
images started new visits (200 of 200 pairs mixed), and 8 readers on 8 hot
keys shared visits (74% mixed)."""

import hashlib
import os
import random
import threading

import pytest

from test_whole_sample import packed, read, www  # noqa: F401 (fixture)


def pair_reason(mnt, key, caption_first):
    """Read key's caption and image in the given order; the reason they do
    not belong together, or None."""
    if caption_first:
        cls, digest = read(os.path.join(mnt, key + ".txt")).decode().split()
        img = read(os.path.join(mnt, key + ".jpg"))
    else:
        img = read(os.path.join(mnt, key + ".jpg"))
        cls, digest = read(os.path.join(mnt, key + ".txt")).decode().split()
    if hashlib.sha256(img).hexdigest() != digest:
        return "%s: caption of another image" % key
    if cls != (os.path.dirname(key) or "-"):
        return "%s: a sample of class %s" % (key, cls)
    return None


def in_threads(n, work):
    """Run work(i) in n threads (n readers); the reasons they returned."""
    bad, lock = [], threading.Lock()

    def run(i):
        for why in work(i):
            with lock:
                bad.append(why)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return bad


@pytest.mark.parametrize("mode", ["fixed", "adaptive"])
def test_pairs_stay_pairs_in_any_order(tmp_path, www, mounter, mode):  # noqa: F811
    src, keys, _ = packed(tmp_path, www, 1600, 400, 45)
    m = mounter(src, opts={"layout": "samples", "echo": 4, "echo_mode": mode,
                           "seed": 3, "exact_first": 0})
    rng = random.Random(1)
    sample = rng.sample(keys, 200)
    mixed = {}

    # An image-only pass (thumbnails, an evaluation), then the pairs with
    # the image read again after the caption.
    for k in sample:
        read(os.path.join(m.mnt, k + ".jpg"))
    mixed["image pass, then caption first"] = [
        w for w in (pair_reason(m.mnt, k, True) for k in sample) if w]
    mixed["image first"] = [
        w for w in (pair_reason(m.mnt, k, False) for k in sample) if w]

    # 8 readers in random orders over all pairs, each pair caption or
    # image first at random.
    def random_reader(i):
        r = random.Random(i)
        mine = keys[i::8]
        r.shuffle(mine)
        return [w for w in (pair_reason(m.mnt, k, r.random() < 0.5)
                            for k in mine) if w]
    mixed["8 random readers"] = in_threads(8, random_reader)

    # 8 readers on 8 hot keys, each reading pairs over and over.
    hot = keys[:8]

    def hot_reader(i):
        r = random.Random(100 + i)
        return [w for w in (pair_reason(m.mnt, r.choice(hot), r.random() < 0.5)
                            for _ in range(150)) if w]
    mixed["8 readers on 8 hot keys"] = in_threads(8, hot_reader)

    st = m.stats()
    counts = {k: len(v) for k, v in mixed.items()}
    assert not any(counts.values()), "mixed pairs %s, e.g. %s" % (
        counts, [v[:2] for v in mixed.values() if v])
    if mode == "fixed":
        assert st["echoes_served"] > 0, st
