"""Writes the crafted bad inputs of this folder and MANIFEST.tsv (file, the
text the ValueError must contain). Run it from anywhere to regenerate:

    python3 tests/corpus/decode/generate.py

tests/image/test_image_errors.py decodes every file listed and checks the message; the
hypothesis fuzzers start from these files too.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent


def npy(header: str, data: bytes = b"", version: tuple[int, int] = (1, 0), hlen: int | None = None) -> bytes:
    h = header.encode("latin1")
    h += b" " * ((-(len(h) + 11)) % 64) + b"\n"
    n = len(h) if hlen is None else hlen
    if version[0] == 1:
        return b"\x93NUMPY" + bytes(version) + struct.pack("<H", n) + h + data
    return b"\x93NUMPY" + bytes(version) + struct.pack("<I", n) + h + data


def seg(marker: int, payload: bytes) -> bytes:
    return struct.pack(">BBH", 0xFF, marker, len(payload) + 2) + payload


def sof(h: int, w: int, comps: list[tuple[int, int, int]], marker: int = 0xC0, precision: int = 8) -> bytes:
    body = struct.pack(">BHHB", precision, h, w, len(comps))
    for cid, hs, vs in comps:
        body += bytes([cid, (hs << 4) | vs, 0])
    return seg(marker, body)


SOS1 = seg(0xDA, bytes([1, 1, 0x00, 0, 63, 0]))
GRAY = [(1, 1, 1)]


def real_jpeg() -> bytes:
    return real("JPEG", quality=90)


def real(fmt: str, **kw: object) -> bytes:
    """A noise image of 128x96 written by Pillow in `fmt`."""
    import numpy as np
    from PIL import Image

    noise = np.random.default_rng(7).integers(0, 256, (96, 128, 3), dtype=np.uint8)
    b = io.BytesIO()
    Image.fromarray(noise).save(b, format=fmt, **kw)
    return b.getvalue()


def png_chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# A valid PNG header of 30000 x 30000 RGB (900 Mpixels) and a few bytes of pixels.
PNG_HUGE = (PNG_MAGIC + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0))
            + png_chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + png_chunk(b"IEND", b""))


CASES: dict[str, tuple[bytes, str]] = {
    "empty.bin": (b"", "empty"),
    "unknown_format.ico": (b"\x00\x00\x01\x00\x01\x00\x10\x10" + b"\x00" * 32, "unknown image format"),
    "gif_no_frames.gif": (b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "Pillow cannot read this GIF image's header"),
    "png_huge.png": (PNG_HUGE, "decompression bomb"),
    "png_bad_crc.png": (PNG_HUGE.replace(b"\x00\x00\x75\x30", b"\x00\x00\x00\x30", 1),
                        "Pillow cannot read this PNG image's header"),
    "bmp_only_magic.bmp": (b"BM" + b"\x00" * 10, "Pillow cannot read this BMP image's header"),
    "webp_bad_chunk.webp": (b"RIFF\x20\x00\x00\x00WEBPVP8X\x0a\x00\x00\x00" + b"\x00" * 20, "Pillow cannot read this WEBP image's header"),
    # Plain PNM, bitmaps and gray PFM are Pillow's to read: what Pillow refuses.
    "pnm_p2_above_maxval.pgm": (b"P2\n2 2\n255\n0 1 2 256\n", "Channel value too large"),
    "pnm_p4_truncated.pbm": (b"P4\n8 2\n\x00", "image file is truncated"),
    "pnm_p7_pam.pam": (b"P7\nWIDTH 1\nHEIGHT 1\nDEPTH 1\nMAXVAL 255\nENDHDR\n\x00", "PAM (P7) is not supported"),
    "pnm_pf_colour.pfm": (b"PF\n1 1\n-1.0\n" + bytes(12), "colour PFM (PF) is not supported"),
    "pnm_no_whitespace.pgm": (b"P52 2 255\n\x00\x00\x00\x00", "expected whitespace before the width"),
    "pnm_letters.pgm": (b"P5\nab 2\n255\n\x00\x00\x00\x00", "the width is not a decimal number"),
    "pnm_negative.pgm": (b"P5\n-2 2\n255\n\x00\x00\x00\x00", "the width is not a decimal number"),
    "pnm_maxval_zero.pgm": (b"P5\n2 2\n0\n\x00\x00\x00\x00", "maxval 0 is outside 1..65535"),
    "pnm_maxval_big.pgm": (b"P5\n2 2\n70000\n" + b"\x00" * 8, "maxval 70000 is outside 1..65535"),
    "pnm_zero_width.pgm": (b"P5\n0 2\n255\n", "zero size 0x2"),
    "pnm_long_number.pgm": (b"P5\n12345678901234 2\n255\n", "more than 10 digits"),
    "pnm_bad_after_maxval.pgm": (b"P5\n1 1\n255x\x00", "followed by one whitespace character"),
    "pnm_truncated_header.pgm": (b"P5\n12", "truncated PNM header"),
    "pnm_huge.ppm": (b"P6\n100000 100000\n255\n" + b"\x00" * 16, "declares 100000x100000x3 uint8"),
    "pnm_truncated_raster.ppm": (b"P6\n4 4\n255\n" + b"\x01" * 20, "the data holds only 20 bytes"),
    "pnm_truncated_16bit.pgm": (b"P5\n3 3\n65535\n" + b"\x01" * 17, "the data holds only 17 bytes"),
    "npy_bad_version.npy": (b"\x93NUMPY\x04\x00" + struct.pack("<H", 6) + b"{}    ", "format version 4.0 is not supported"),
    "npy_object.npy": (npy("{'descr': '|O', 'fortran_order': False, 'shape': (2, 2), }", b"\x80\x04"), "object arrays need pickle"),
    "npy_structured.npy": (npy("{'descr': [('a', '|u1')], 'fortran_order': False, 'shape': (2, 2), }", b"\x00" * 4), "structured dtype"),
    "npy_int16.npy": (npy("{'descr': '<i2', 'fortran_order': False, 'shape': (2, 2), }", b"\x00" * 8), "dtype '<i2' is not supported"),
    "npy_float64.npy": (npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", b"\x00" * 32), "dtype '<f8' is not supported"),
    "npy_not_literal.npy": (npy("__import__('os').system('echo pwned')"), "not a Python literal"),
    "npy_bad_keys.npy": (npy("{'descr': '|u1', 'shape': (2, 2), }", b"\x00" * 4), "exactly the keys"),
    "npy_bad_shape.npy": (npy("{'descr': '|u1', 'fortran_order': False, 'shape': (2, -2), }", b"\x00" * 4), "non-negative ints"),
    "npy_1d.npy": (npy("{'descr': '|u1', 'fortran_order': False, 'shape': (10,), }", b"\x00" * 10), "is not an image"),
    "npy_4d.npy": (npy("{'descr': '|u1', 'fortran_order': False, 'shape': (1, 2, 2, 1), }", b"\x00" * 4), "is not an image"),
    "npy_zero_dim.npy": (npy("{'descr': '|u1', 'fortran_order': False, 'shape': (0, 5), }"), "is empty"),
    "npy_ambiguous.npy": (npy("{'descr': '|u1', 'fortran_order': False, 'shape': (8, 8, 8), }", b"\x00" * 512), "cannot tell HWC from CHW"),
    "npy_truncated.npy": (npy("{'descr': '<u2', 'fortran_order': False, 'shape': (100, 100), }", b"\x00" * 10), "the data holds only 10 bytes"),
    "npy_header_too_long.npy": (npy("{'descr': '|u1', 'fortran_order': False, 'shape': (1, 1), }", b"\x00", (2, 0), hlen=20000), "longer than 10000"),
    "npy_truncated_header.npy": (b"\x93NUMPY\x01\x00" + struct.pack("<H", 118) + b"{'descr'", "truncated NPY header"),
    "jpeg_eoi_first.jpg": (b"\xff\xd8\xff\xd9", "EOI before any scan"),
    "jpeg_sos_before_sof.jpg": (b"\xff\xd8" + SOS1 + b"\x00" * 8 + b"\xff\xd9", "before the frame header"),
    "jpeg_bad_marker.jpg": (b"\xff\xd8\x12\x34\x56\x78", "no marker after byte 2"),
    "jpeg_segment_len1.jpg": (b"\xff\xd8\xff\xe0\x00\x01" + b"\x00" * 8, "has length 1"),
    "jpeg_dnl.jpg": (b"\xff\xd8" + sof(0, 64, GRAY) + SOS1 + b"\x00" * 8 + b"\xff\xd9", "DNL marker"),
    "jpeg_zero_width.jpg": (b"\xff\xd8" + sof(64, 0, GRAY) + SOS1 + b"\x00" * 8 + b"\xff\xd9", "width 0"),
    "jpeg_bad_sof_length.jpg": (b"\xff\xd8" + seg(0xC0, struct.pack(">BHHB", 8, 8, 8, 3) + b"\x01\x11\x00") + SOS1 + b"\xff\xd9", "does not fit 3 components"),
    "jpeg_bad_sampling.jpg": (b"\xff\xd8" + sof(8, 8, [(1, 0, 1)]) + SOS1 + b"\xff\xd9", "sampling factors 0x1"),
    "jpeg_two_sof.jpg": (b"\xff\xd8" + sof(8, 8, GRAY) + sof(8, 8, GRAY) + SOS1 + b"\xff\xd9", "more than one frame header"),
    "jpeg_huge.jpg": (b"\xff\xd8" + sof(65000, 65000, GRAY) + SOS1 + b"\x00" * 64 + b"\xff\xd9", "pixels is more than twice max_image_pixels"),
    "jpeg_five_components.jpg": (b"\xff\xd8" + sof(8, 8, [(k, 1, 1) for k in range(1, 6)]) + seg(0xDA, bytes([1, 1, 0, 0, 63, 0])) + b"\xff\xd9", "5 components is not supported"),
    "jpeg_truncated_header.jpg": (b"\xff\xd8\xff\xe1\x10\x00Exif\x00\x00", "truncated JPEG header"),
}


def main() -> None:
    cases = dict(CASES)
    jp = real_jpeg()
    cases["jpeg_truncated_scan.jpg"] = (jp[: len(jp) * 2 // 3], "Pillow cannot decode it")
    # Pillow's formats cut in their pixel data: the header reads, the pixels do not.
    for name, fmt, kw in (("png", "PNG", {}), ("gif", "GIF", {}), ("bmp", "BMP", {}),
                          ("tif", "TIFF", {}), ("webp", "WEBP", {"lossless": True})):
        data = real(fmt, **kw)
        what = "read this WEBP image's header" if fmt == "WEBP" else f"decode this {fmt} image"
        cases[f"{name}_truncated.{name}"] = (data[: len(data) // 2], f"Pillow cannot {what}")
    lines = []
    for name, (data, expect) in sorted(cases.items()):
        (HERE / name).write_bytes(data)
        lines.append(f"{name}\t{expect}")
    (HERE / "MANIFEST.tsv").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
