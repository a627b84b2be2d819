"""The CPU JPEG box decode (csrc/image/jpeg_turbo.hpp through
gdsio.image.jpeg_cpu.decode_box): every box of every sampling, coding and
size gives the pixels of a whole decode there (Pillow's), and bad data or a
box outside the image is a ValueError naming the problem."""

from __future__ import annotations

import io
import random
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from gdsio import _core
from gdsio.image import jpeg_cpu
from gdsio.image.formats.jpeg import parse_jpeg

pytestmark = pytest.mark.skipif(not _core.jpeg_cpu_available(), reason=_core.jpeg_cpu_version())


def _photo(h: int, w: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([(x * 3 + y) % 256, (y * 5) % 256, ((x * y) // 7) % 256], -1)
    return (a + rng.integers(0, 40, a.shape)).clip(0, 255).astype(np.uint8)


def _encode(a: np.ndarray, sub: str, progressive: bool = False, restart: int = 0) -> bytes:
    import simplejpeg

    if progressive or restart:  # simplejpeg writes neither: Pillow (4:4:4, 4:2:2 and 4:2:0 only)
        kw = {"progressive": progressive}
        if restart:
            kw["restart_marker_blocks"] = restart
        bio = io.BytesIO()
        Image.fromarray(a).save(bio, "JPEG", quality=90, subsampling={"444": 0, "422": 1, "420": 2}[sub], **kw)
        return bio.getvalue()
    return simplejpeg.encode_jpeg(a, quality=88, colorsubsampling=sub)


def _header(b: bytes):
    return parse_jpeg(b, len(b), b[-2:])


def _boxes(h: int, w: int, n: int, seed: int) -> list[tuple[int, int, int, int]]:
    r = random.Random(seed)
    out = [(0, 0, h, w), (0, 0, 1, 1), (h - 1, w - 1, 1, 1), (0, w - 1, h, 1), (h - 1, 0, 1, w)]
    for _ in range(n):
        bh, bw = r.randint(1, h), r.randint(1, w)
        out.append((r.randint(0, h - bh), r.randint(0, w - bw), bh, bw))
    return out


CASES = [(sub, False, 0) for sub in ("444", "422", "420", "440", "411")] + [
    ("420", True, 0), ("422", True, 0), ("420", False, 2), ("422", False, 1)]  # Pillow writes no progressive 4:4:4


@pytest.mark.parametrize("sub,progressive,restart", CASES)
@pytest.mark.parametrize("size", [(375, 500), (61, 83), (17, 9), (240, 1)])
def test_every_box_equals_the_whole_decode(sub, progressive, restart, size):
    h, w = size
    b = _encode(_photo(h, w, seed=h + w), sub, progressive, restart)
    ref = np.asarray(Image.open(io.BytesIO(b)).convert("RGB")).transpose(2, 0, 1)
    hdr = _header(b)
    data = torch.frombuffer(bytearray(b), dtype=torch.uint8)
    for top, left, bh, bw in _boxes(h, w, 25, seed=h * w):
        got = jpeg_cpu.decode_box(data, hdr, "RGB", (top, left, bh, bw))
        assert got.shape == (3, bh, bw) and got.stride() == (1, 3 * bw, 3)
        assert np.array_equal(got.numpy(), ref[:, top : top + bh, left : left + bw]), (top, left, bh, bw)


def test_gray_jpegs_and_modes():
    a = _photo(120, 90)
    bio = io.BytesIO()
    Image.fromarray(a[..., 0]).save(bio, "JPEG", quality=85)
    gray = bio.getvalue()
    colour = _encode(a, "420")
    for b, mode, pil_mode in ((gray, "GRAY", "L"), (gray, "RGB", "RGB"), (colour, "GRAY", "L"), (colour, "UNCHANGED", "RGB")):
        ref = np.asarray(Image.open(io.BytesIO(b)).convert(pil_mode)).reshape(120, 90, -1).transpose(2, 0, 1)
        data = torch.frombuffer(bytearray(b), dtype=torch.uint8)
        for top, left, bh, bw in _boxes(120, 90, 10, seed=7):
            got = jpeg_cpu.decode_box(data, _header(b), mode, (top, left, bh, bw))
            assert np.array_equal(got.numpy(), ref[:, top : top + bh, left : left + bw]), (mode, top, left, bh, bw)


def _raw_decode(b: bytes, box: tuple[int, int, int, int], channels: int = 3, strict: bool = True) -> Any:
    top, left, h, w = box
    out = np.empty((h, w, channels), np.uint8)
    return _core.jpeg_cpu_decode(np.frombuffer(b, np.uint8), top, left, out, strict)


def test_only_the_box_is_decoded():
    b = _encode(_photo(512, 512), "420")
    whole = _raw_decode(b, (0, 0, 512, 512))
    assert (whole.rows_decoded, whole.columns_decoded) == (512, 512)
    part = _raw_decode(b, (300, 200, 50, 60))
    assert part.image_height == 512 and part.image_width == 512
    # The rows of the box and a margin above it; the box's iMCU columns and a margin.
    assert 50 <= part.rows_decoded <= 50 + 16
    assert 60 < part.columns_decoded <= 60 + 2 * 16 + 16


def test_bad_data_and_boxes_are_value_errors():
    b = _encode(_photo(64, 48), "420")
    with pytest.raises(ValueError, match="outside the 48x64 image"):
        _raw_decode(b, (10, 0, 60, 10))
    with pytest.raises(ValueError, match="libjpeg-turbo: Not a JPEG file"):
        _raw_decode(b"xx" + b, (0, 0, 1, 1))
    with pytest.raises(ValueError, match="libjpeg-turbo"):
        _raw_decode(b[:40], (0, 0, 1, 1))
    with pytest.raises(ValueError, match="grayscale output of a 3-component JPEG"):
        _raw_decode(b, (0, 0, 4, 4), channels=1)
    with pytest.raises(ValueError, match="out: has 1 dimensions"):
        _core.jpeg_cpu_decode(np.frombuffer(b, np.uint8), 0, 0, np.empty(10, np.uint8))


def test_a_warning_raises_when_strict():
    """Corrupt entropy-coded data: libjpeg-turbo warns and goes on; strict (what
    the loader uses) raises, so that the whole-image decoders decide."""
    b = bytearray(_encode(_photo(256, 256), "420"))
    h = _header(bytes(b))
    mid = h.header_bytes + (len(b) - h.header_bytes) // 3
    b[mid : mid + 64] = b"\xff\x00" * 32 + bytes(range(32)) * 1  # stuffed bytes, then a broken run
    b[mid + 40] = 0xFF
    b[mid + 41] = 0xD5  # a restart marker where none belongs
    got = _raw_decode(bytes(b), (0, 0, 256, 256), strict=False)
    assert got.warning is not None
    with pytest.raises(ValueError, match="libjpeg-turbo warned"):
        _raw_decode(bytes(b), (0, 0, 256, 256), strict=True)


def test_the_build_says_which_library():
    assert jpeg_cpu.box_available()
    assert _core.jpeg_cpu_version().startswith("libjpeg")
