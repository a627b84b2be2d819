"""Decompression bombs: Pillow's MAX_IMAGE_PIXELS rule on the max_image_pixels
setting (GDSIO_MAX_IMAGE_PIXELS, default 89,478,485 as Pillow's): above it a
gdsio.DecompressionBombWarning naming the file, above twice it a
gdsio.DecompressionBombError (a ValueError) naming the file and the pixel
count, checked from the header before any pixel memory is allocated, for
every format. ``max_pixels=`` stays a hard cap the caller picks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

import gdsio
import gdsio.image as gi
from image_helpers import npy_bytes, pil_bytes, pnm_bytes

LIMIT = 100  # pixels, in these tests


def make(fmt: str, h: int, w: int) -> tuple[bytes, dict]:
    """A valid image of h x w pixels in `fmt`, and the decode arguments it needs."""
    a = (np.arange(h * w) % 251).astype(np.uint8).reshape(h, w)
    if fmt == "pnm":
        return pnm_bytes(a), {}
    if fmt == "npy":
        return npy_bytes(a), {}
    if fmt == "raw":
        return a.tobytes(), {"raw": gi.RawFormat(height=h, width=w)}
    if fmt == "jpeg":
        return pil_bytes(Image.fromarray(a), "JPEG"), {}
    return pil_bytes(Image.fromarray(a), fmt.upper()), {}  # Pillow's formats


FORMATS = ["pnm", "npy", "raw", "jpeg", "png", "bmp"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_pillows_rule_for_every_format(tmp_path, fmt):
    with gdsio.settings(max_image_pixels=LIMIT):
        data, kw = make(fmt, 10, 10)  # = the limit: quiet
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert gi.decode(data, device="cpu", **kw).shape[-2:] == (10, 10)
        p = tmp_path / f"warned.{fmt}"
        p.write_bytes(make(fmt, 10, 20)[0])
        kw = make(fmt, 10, 20)[1]
        with pytest.warns(gdsio.DecompressionBombWarning, match=rf"^{p}: 20x10 = 200 pixels is more than max_image_pixels \(100\)"):
            assert gi.read(p, device="cpu", **kw).shape[-2:] == (10, 20)
        p = tmp_path / f"refused.{fmt}"
        p.write_bytes(make(fmt, 10, 21)[0])
        kw = make(fmt, 10, 21)[1]
        with pytest.raises(gdsio.DecompressionBombError, match=rf"^{p}: 21x10 = 210 pixels is more than twice max_image_pixels \(100\)"):
            gi.read(p, device="cpu", **kw)
        images, failed = gi.read([str(p)], device="cpu", on_error="skip", **kw)  # skipped like any bad file
        assert images == [] and failed == [0]


def test_a_bomb_is_a_value_error_and_the_warning_a_runtime_warning():
    assert issubclass(gdsio.DecompressionBombError, ValueError)
    assert issubclass(gdsio.DecompressionBombWarning, RuntimeWarning)


def _sof_jpeg(h: int, w: int) -> bytes:
    """A tiny JPEG whose frame header claims h x w (gray): the 0.7 KB 13000 x 13000 kind."""
    import struct

    def seg(m, body):
        return b"\xff" + bytes([m]) + struct.pack(">H", len(body) + 2) + body

    sof = seg(0xC0, struct.pack(">BHHB", 8, h, w, 1) + bytes([1, 0x11, 0]))
    dqt = seg(0xDB, bytes([0]) + bytes([1] * 64))
    dht = seg(0xC4, bytes([0x00]) + bytes([1] + [0] * 15) + bytes([0])) + seg(0xC4, bytes([0x10]) + bytes([1] + [0] * 15) + bytes([0]))
    sos = seg(0xDA, bytes([1, 1, 0x00, 0, 63, 0]))
    return b"\xff\xd8" + dqt + sof + dht + sos + bytes(600) + b"\xff\xd9"


def _png_claiming(h: int, w: int) -> bytes:
    import struct
    import zlib

    def chunk(t, body):
        return struct.pack(">I", len(body)) + t + body + struct.pack(">I", zlib.crc32(t + body))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(bytes(64))) + chunk(b"IEND", b""))


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_a_tiny_file_claiming_14000x14000_is_refused_before_any_allocation(tmp_path, fmt, monkeypatch):
    """Default setting: 196,000,000 pixels is more than twice 89,478,485. The file
    is under a KB: refused as a bomb from its header, fast, nothing of the
    image's size allocated. (PNM, NPY and raw hold their pixels uncompressed:
    a short one is refused as truncated, as early.)"""
    data = _sof_jpeg(14000, 14000) if fmt == "jpeg" else _png_claiming(14000, 14000)
    p = tmp_path / f"bomb.{fmt}"
    p.write_bytes(data)
    sizes = []
    real_empty = torch.empty

    def watched(*a, **k):
        dims = a[0] if a and isinstance(a[0], (tuple, list, torch.Size)) else a
        sizes.append(int(np.prod([int(d) for d in dims])) if dims else 0)
        return real_empty(*a, **k)

    monkeypatch.setattr(torch, "empty", watched)
    t0 = time.monotonic()
    with pytest.raises(gdsio.DecompressionBombError, match=rf"^{p}: .*196000000 pixels"):
        gi.read(p, device="cpu")
    assert time.monotonic() - t0 < 5
    assert max(sizes, default=0) < 1 << 20


def test_max_pixels_is_a_hard_cap_that_replaces_the_rule():
    data, _ = make("pnm", 10, 30)
    with gdsio.settings(max_image_pixels=LIMIT):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert gi.decode(data, device="cpu", max_pixels=300).shape == (1, 10, 30)
        with pytest.raises(ValueError, match="300 pixels is more than the cap of 299 \\(max_pixels=\\)"):
            gi.decode(data, device="cpu", max_pixels=299)


def test_the_setting_comes_from_the_environment(tmp_path):
    p = tmp_path / "a.pgm"
    p.write_bytes(make("pnm", 10, 21)[0])
    code = f"import gdsio, gdsio.image as gi; print(gdsio.current_settings().max_image_pixels); gi.read({str(p)!r}, device='cpu')"
    r = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "GDSIO_MAX_IMAGE_PIXELS": "100"})
    assert r.stdout.strip() == "100" and "DecompressionBombError" in r.stderr and "more than twice max_image_pixels (100)" in r.stderr
    assert gdsio.Settings().max_image_pixels == 89_478_485  # Pillow's MAX_IMAGE_PIXELS
    assert gdsio.Settings().max_image_pixels == Image.MAX_IMAGE_PIXELS
    with pytest.raises(ValueError, match="max_image_pixels"):
        with gdsio.settings(max_image_pixels=0):
            pass
