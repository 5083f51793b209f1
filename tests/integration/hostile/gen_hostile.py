#!/usr/bin/python3
"""gen_hostile.py - write hostile WebDataset shards for the integration tests.

  gen_hostile.py OUTDIR [--tag TAG]

Each case is OUTDIR/<case>.tar plus OUTDIR/<case>.json describing what a safe
reader must show: {"kind": "member"|"archive", "good": {"<class>/<file>": sha256},
"evil": [names that must appear nowhere]}. "member" cases are well-formed
archives with some members a reader must skip; "archive" cases are malformed
archives a reader may refuse as a whole. Headers are built by hand because
Python's tarfile refuses to write most of these.
"""

import argparse
import hashlib
import io
import json
import os
import sys

BLOCK = 512
MTIME = 1577836800
GOOD_LABEL = "3"
EVIL_LABEL = "7"


def jpeg(seed):
    """A small deterministic grayscale JPEG (PIL when present, else a stub)."""
    try:
        from PIL import Image
    except ImportError:  # the bytes need not decode for the tar tests
        return b"\xff\xd8\xff\xe0fake-jpeg-%d\xff\xd9" % seed
    im = Image.new("L", (28, 28))
    im.putdata([(x * 7 + seed * 31) % 256 for x in range(28 * 28)])
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def octal(value, width):
    return ("%0*o" % (width - 1, value)).encode() + b"\0"


def header(name, size, typeflag=b"0", linkname=b"", bad_checksum=False,
           size_field=None, devmajor=0, devminor=0):
    if isinstance(name, str):
        name = name.encode()
    h = bytearray(BLOCK)
    h[0:len(name)] = name[:100]
    h[100:108] = octal(0o644, 8)
    h[108:116] = octal(0, 8)
    h[116:124] = octal(0, 8)
    h[124:136] = size_field if size_field is not None else octal(size, 12)
    h[136:148] = octal(MTIME, 12)
    h[156:157] = typeflag
    h[157:157 + len(linkname)] = linkname
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    h[329:337] = octal(devmajor, 8)
    h[337:345] = octal(devminor, 8)
    h[148:156] = b" " * 8
    chk = sum(h) + (1 if bad_checksum else 0)
    h[148:156] = ("%06o" % chk).encode() + b"\0 "
    return bytes(h)


def pad(data):
    return data + b"\0" * ((BLOCK - len(data) % BLOCK) % BLOCK)


def member(name, data, **kw):
    return header(name, len(data), **kw) + pad(data)


def pax(records):
    body = b""
    for key, val in records:
        rec = b" %s=%s\n" % (key, val)
        n = len(rec)
        while len(b"%d" % n) + len(rec) != n:
            n = len(b"%d" % n) + len(rec)
        body += b"%d" % n + rec
    return member("PaxHeaders/x", body, typeflag=b"x")


class Case:
    def __init__(self, name, kind):
        self.name, self.kind = name, kind
        self.parts, self.good, self.evil = [], {}, []

    def good_sample(self, key, seed, label=GOOD_LABEL):
        img = jpeg(seed)
        self.parts.append(member(key + ".jpg", img))
        self.parts.append(member(key + ".cls", label.encode()))
        self.good["%s/%s.jpg" % (label, key.rsplit("/", 1)[-1])] = \
            hashlib.sha256(img).hexdigest()

    def raw(self, data, evil=None):
        self.parts.append(data)
        if evil:
            self.evil.append(evil)

    def data(self, end=True):
        return b"".join(self.parts) + (b"\0" * 2 * BLOCK if end else b"")


def member_cases(tag):
    """Well-formed archives holding members a reader must skip."""
    evil = "echofs_evil_" + tag
    cls = EVIL_LABEL.encode()
    specs = {
        "absolute": [member("/tmp/%s_abs.jpg" % evil, jpeg(9)),
                     member("/tmp/%s_abs.cls" % evil, cls)],
        "dotdot": [member("../%s_dd.jpg" % evil, jpeg(9)),
                   member("../%s_dd.cls" % evil, cls),
                   member("a/../../%s_dd2.jpg" % evil, jpeg(9)),
                   member("a/../../%s_dd2.cls" % evil, cls)],
        "symlink": [header("%s_sym.jpg" % evil, 0, typeflag=b"2",
                           linkname=b"/etc/passwd"),
                    member("%s_sym.cls" % evil, cls)],
        "hardlink": [header("%s_hl.jpg" % evil, 0, typeflag=b"1",
                            linkname=b"good_000000.jpg"),
                     member("%s_hl.cls" % evil, cls)],
        "device": [header("%s_dev.jpg" % evil, 0, typeflag=b"3",
                          devmajor=1, devminor=3),
                   header("%s_fifo.jpg" % evil, 0, typeflag=b"6"),
                   member("%s_dev.cls" % evil, cls),
                   member("%s_fifo.cls" % evil, cls)],
        "control": [member("%s_c\x01\n.jpg" % evil, jpeg(9)),
                    member("%s_c\x01\n.cls" % evil, cls)],
        "pax_dotdot": [pax([(b"path", b"../../%s_pax.jpg" % evil.encode())]),
                       member("innocent_pax.jpg", jpeg(9)),
                       pax([(b"path", b"../../%s_pax.cls" % evil.encode())]),
                       member("innocent_pax.cls", cls)],
        "evil_label": [member("%s_lbl.jpg" % evil, jpeg(9)),
                       member("%s_lbl.cls" % evil, b"../../" + evil.encode())],
    }
    for name, evil_parts in specs.items():
        c = Case(name, "member")
        c.good_sample("good_000000", 1)
        for p in evil_parts:
            c.raw(p)
        c.evil.append(evil)
        c.good_sample("good_000002", 2)
        yield c, c.data()


def archive_cases(tag):
    """Malformed archives: refusing them whole is fine, skipping is too."""
    evil = "echofs_evil_" + tag
    c = Case("bad_checksum", "archive")
    c.good_sample("good_000000", 1)
    c.raw(member("%s_chk.jpg" % evil, jpeg(9), bad_checksum=True), evil)
    c.raw(member("%s_chk.cls" % evil, EVIL_LABEL.encode()))
    yield c, c.data()

    c = Case("size_overflow", "archive")
    c.good_sample("good_000000", 1)
    c.raw(header("%s_big.jpg" % evil, 0, size_field=b"77777777777\0"), evil)
    c.raw(jpeg(9))
    yield c, c.data()

    c = Case("size_not_octal", "archive")
    c.good_sample("good_000000", 1)
    c.raw(header("%s_nan.jpg" % evil, 0, size_field=b"0000000009x\0"), evil)
    yield c, c.data()

    c = Case("truncated", "archive")
    c.good_sample("good_000000", 1)
    img = jpeg(5)
    data = c.data(end=False) + member("trunc_000001.jpg", img)[:BLOCK + 100]
    c.evil.append(evil)
    yield c, data


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--tag", default="x")
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    names = []
    for gen in (member_cases, archive_cases):
        for case, data in gen(a.tag):
            with open(os.path.join(a.outdir, case.name + ".tar"), "wb") as f:
                f.write(data)
            with open(os.path.join(a.outdir, case.name + ".json"), "w") as f:
                json.dump({"kind": case.kind, "good": case.good,
                           "evil": case.evil}, f, indent=1)
            names.append(case.name)
    print("\n".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
