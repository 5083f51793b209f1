#!/usr/bin/python3
"""make_fixtures.py - regenerates the transform test images in this directory.

Run: /usr/bin/python3 tests/data/img/make_fixtures.py  (needs python3-pil).
Deterministic: the same Pillow version writes the same bytes. The hostile
files are made by patching or hand-assembling JPEG markers (see below)."""
import io
import os
import struct
import zlib

from PIL import Image, ImageDraw

HERE = os.path.dirname(os.path.abspath(__file__))


def put(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def jpeg(im, **kw):
    b = io.BytesIO()
    im.save(b, "JPEG", **kw)
    return b.getvalue()


def photo(w, h):
    """A smooth colour scene with a few hard edges, like a photo."""
    im = Image.new("RGB", (w, h))
    px = im.load()
    for y in range(h):
        for x in range(w):
            px[x, y] = (x * 255 // w, y * 255 // h, (x + y) * 255 // (w + h))
    d = ImageDraw.Draw(im)
    d.ellipse((w // 5, h // 5, w // 2, h // 2 + h // 5), fill=(230, 40, 30))
    d.rectangle((w // 2, h // 3, w - w // 8, h - h // 8), fill=(20, 90, 200))
    d.line((0, h - 1, w - 1, 0), fill=(255, 255, 255), width=3)
    return im


def sof_offset(b):
    """Offset of the SOFn marker (0xFFC0..0xFFC2) in a Pillow JPEG."""
    i = 2
    while True:
        assert b[i] == 0xFF
        m = b[i + 1]
        if m in (0xC0, 0xC1, 0xC2):
            return i
        i += 2 + struct.unpack(">H", b[i + 2:i + 4])[0]


def scan_bomb():
    """An 8x8 grey progressive JPEG with a valid progression of 896 scans:
    every coefficient is sent once at Al=13 and refined 13 times. Each scan
    codes an all-zero block in one bit (one-code Huffman tables), so the
    file is small, valid, and only TJFLAG_LIMITSCANS (> 500 scans) stops
    it."""
    out = bytearray(b"\xff\xd8")
    out += b"\xff\xdb" + struct.pack(">H", 67) + b"\x00" + b"\x01" * 64
    out += b"\xff\xc2" + struct.pack(">HBHHB", 11, 8, 8, 8, 1) + b"\x01\x11\x00"
    one = bytes([1] + [0] * 15)  # one code of length 1 ...
    out += b"\xff\xc4" + struct.pack(">H", 2 + 17 + 1) + b"\x00" + one + b"\x00"
    out += b"\xff\xc4" + struct.pack(">H", 2 + 17 + 1) + b"\x10" + one + b"\x00"

    def sos(ss, se, ah, al):
        return (b"\xff\xda" + struct.pack(">HB", 8, 1) + b"\x01\x00" +
                bytes([ss, se, (ah << 4) | al]) + b"\x7f")  # ... code "0"

    for k in range(64):
        out += sos(k, k, 0, 13)
        for al in range(12, -1, -1):
            out += sos(k, k, al + 1, al)
    out += b"\xff\xd9"
    return bytes(out)


def sos_end(b):
    """Offset of the first byte of entropy-coded data (after the SOS)."""
    i = 2
    while True:
        assert b[i] == 0xFF
        n = struct.unpack(">H", b[i + 2:i + 4])[0]
        if b[i + 1] == 0xDA:
            return i + 2 + n
        i += 2 + n


def poisoners(base):
    """JPEGs that once left a TurboJPEG handle broken for the next image
    (issue 21): a frame header of 0x0, an unknown marker 0xFF5E between the
    frame header and the scan, and garbage entropy data holding 0xFF5E."""
    o = sof_offset(base)
    zero = bytearray(base)
    zero[o + 5:o + 9] = b"\0\0\0\0"
    put("zero_size.jpg", bytes(zero))
    n = 2 + struct.unpack(">H", base[o + 2:o + 4])[0]
    put("bad_marker.jpg", base[:o + n] + b"\xff\x5e\x00\x04ab" + base[o + n:])
    s = sos_end(base)
    junk = bytes((i * 73 + 5) & 0xFF if i % 17 else 0xFF for i in range(s, len(base) - 2))
    junk = junk.replace(b"\xff\x00", b"\xff\x5e")
    put("garbage_scan.jpg", base[:s] + junk + base[-2:])


def png(im, **kw):
    b = io.BytesIO()
    im.save(b, "PNG", **kw)
    return b.getvalue()


def webp(im, **kw):
    b = io.BytesIO()
    im.save(b, "WEBP", **kw)
    return b.getvalue()


def png_chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


def png_ihdr_claiming(w, h):
    """A valid small PNG whose IHDR (CRC fixed up) claims w x h."""
    b = bytearray(png(Image.new("L", (4, 4), 7)))
    ihdr = bytearray(b[16:29])
    ihdr[0:8] = struct.pack(">II", w, h)
    b[16:29] = ihdr
    b[29:33] = struct.pack(">I", zlib.crc32(b"IHDR" + bytes(ihdr)))
    return bytes(b)


def png_and_webp():
    """PNG (libspng) and WebP (libwebp) inputs: every colour type, alpha,
    16-bit, and hostile files (truncated, bad CRC, huge declared sizes,
    animation)."""
    put("rgb.png", png(photo(40, 30)))
    put("gray.png", png(photo(40, 30).convert("L")))
    put("palette.png", png(photo(40, 30).convert("P", palette=Image.ADAPTIVE)))
    g16 = Image.new("I;16", (8, 8))
    g16.putdata([0x8000 + 0x100 * i for i in range(64)])
    put("gray16.png", png(g16))
    rgba = Image.new("RGBA", (4, 4), (200, 100, 50, 128))
    rgba.putpixel((0, 0), (255, 255, 255, 0))
    put("rgba.png", png(rgba))
    ok = png(photo(40, 30))
    put("truncated.png", ok[:len(ok) * 6 // 10])
    bad = bytearray(ok)
    bad[40] ^= 0x55  # inside IDAT: its CRC no longer matches
    put("badcrc.png", bytes(bad))
    put("huge.png", png_ihdr_claiming(20000, 20000))   # 400 MP > max_pixels
    put("toowide.png", png_ihdr_claiming(70000, 4))    # a side > 65500
    # A zTXt chunk inflating to 64 MiB before IDAT: a bomb for any decoder
    # that keeps ancillary chunks.
    z = zlib.compress(b"\0" * (64 << 20), 9)
    put("ztxtbomb.png", ok[:33] + png_chunk(b"zTXt", b"bomb\0\0" + z) + ok[33:])
    put("photo.webp", webp(photo(64, 48), quality=90))
    wa = Image.new("RGBA", (4, 4), (200, 100, 50, 128))
    wa.putpixel((0, 0), (255, 255, 255, 0))
    put("alpha.webp", webp(wa, lossless=True))
    w = webp(photo(64, 48), quality=90)
    put("truncated.webp", w[:len(w) // 2])
    frames = [photo(16, 16), photo(16, 16).transpose(Image.FLIP_LEFT_RIGHT)]
    b = io.BytesIO()
    frames[0].save(b, "WEBP", save_all=True, append_images=frames[1:],
                   duration=100)
    put("animated.webp", b.getvalue())


def main():
    pic = photo(500, 375)
    base = jpeg(pic, quality=85, subsampling=2)  # 4:2:0
    put("photo.jpg", base)
    put("photo444.jpg", jpeg(photo(203, 157), quality=90, subsampling=0))
    put("progressive.jpg", jpeg(photo(200, 150), quality=85, progressive=True))
    put("gray.jpg", jpeg(photo(120, 90).convert("L"), quality=90))

    # CMYK: four flat quadrants with known ink values (Pillow writes Adobe
    # inverted CMYK).
    cm = Image.new("CMYK", (32, 32))
    d = ImageDraw.Draw(cm)
    for i, v in enumerate([(0, 0, 0, 0), (255, 0, 0, 0), (0, 128, 255, 0),
                           (40, 40, 40, 128)]):
        x, y = (i % 2) * 16, (i // 2) * 16
        d.rectangle((x, y, x + 15, y + 15), fill=v)
    put("cmyk.jpg", jpeg(cm, quality=95))

    put("truncated.jpg", base[:len(base) * 6 // 10])
    bad = bytearray(base)
    s = len(bad) // 2
    bad[s:s + 64] = bytes((i * 37 + 11) & 0xFF for i in range(64))
    bad[s + 64:s + 66] = b"\xff\xd3"  # a restart marker out of nowhere
    put("corrupt.jpg", bytes(bad))
    poisoners(base)

    small = bytearray(jpeg(photo(16, 16).convert("L"), quality=90))
    o = sof_offset(small)
    huge = bytearray(small)
    huge[o + 5:o + 9] = struct.pack(">HH", 65000, 65000)
    put("huge.jpg", bytes(huge))
    twelve = bytearray(small)
    twelve[o + 1] = 0xC1  # extended sequential
    twelve[o + 4] = 12    # 12-bit samples
    put("twelve_bit.jpg", bytes(twelve))

    bomb = scan_bomb()
    assert Image.open(io.BytesIO(bomb)).convert("L").size == (8, 8)
    put("scanbomb.jpg", bomb)

    ppm = photo(40, 30)
    put("small.ppm", b"P6\n# made by make_fixtures.py\n40 30\n255\n" +
        ppm.tobytes())
    put("deep.ppm", b"P6\n2 2\n65535\n" + b"\x00" * 24)
    put("huge.ppm", b"P6\n65000 65000\n255\n" + b"\x00" * 30)
    b = io.BytesIO()
    photo(8, 8).save(b, "PNG")
    put("tiny.png", b.getvalue())
    png_and_webp()


if __name__ == "__main__":
    main()
