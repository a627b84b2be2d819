"""Binary PNM (formats/pnm.py): every variant round-trips exactly, maxval
rescaling follows Pillow, the header follows Netpbm's rules."""

from __future__ import annotations

import io
from fractions import Fraction

import numpy as np
import pytest
import torch
from image_helpers import as_tensor, chw, pil_bytes, pil_chw, pnm_bytes, rand, rng
from PIL import Image

import gdsio
import gdsio.image as gi
from gdsio.image.formats.pnm import parse_pnm


@pytest.mark.parametrize("shape", [(1, 1), (1, 17), (13, 1), (7, 5), (64, 33)])
@pytest.mark.parametrize("channels", [1, 3])
def test_pnm_8bit_round_trip(shape, channels):
    a = rand(shape if channels == 1 else shape + (3,))
    for data in (pnm_bytes(a), pil_bytes(Image.fromarray(a), "PPM")):
        img, info = gi.decode(as_tensor(data), return_info=True)
        assert img.dtype == torch.uint8 and img.shape == (channels,) + shape
        np.testing.assert_array_equal(img.numpy(), chw(a))
        assert (info.format, info.backend, info.reason) == ("pnm", "gdsio-cpu", "")


@pytest.mark.parametrize("channels", [1, 3])
def test_pnm_16bit_is_uint16(channels):
    a = rand((9, 11) if channels == 1 else (9, 11, 3), np.uint16)
    img = gi.decode(pnm_bytes(a))
    assert img.dtype == torch.uint16
    np.testing.assert_array_equal(img.numpy(), chw(a))
    if channels == 1:  # Pillow reads 16-bit P5 as mode I, same values
        np.testing.assert_array_equal(img.numpy()[0], np.array(Image.open(io.BytesIO(pnm_bytes(a)))))


@pytest.mark.parametrize("maxval", [1, 2, 3, 5, 7, 15, 100, 127, 128, 200, 254])
@pytest.mark.parametrize("magic", ["P5", "P6"])
def test_pnm_small_maxval_matches_pillow(maxval, magic):
    # Every sample value, including values above maxval (clamped by both).
    values = np.arange(256, dtype=np.uint8)
    a = np.tile(values, 3).reshape(3, 256) if magic == "P5" else np.stack([values, values[::-1], values], -1)[None]
    data = pnm_bytes(a, maxval=maxval)
    ours = gi.decode(data)
    ref = pil_chw(Image.open(io.BytesIO(data)))
    assert ours.dtype == torch.uint8
    np.testing.assert_array_equal(ours.numpy(), ref)


@pytest.mark.parametrize("maxval", [256, 257, 1000, 1023, 4095, 32767, 65534])
def test_pnm_16bit_maxval_matches_pillow(maxval):
    a = np.concatenate([np.arange(0, min(maxval + 40, 65536)), rand(2000, np.uint16)]).astype(np.uint16)[None]
    data = pnm_bytes(a, maxval=maxval)
    ours = gi.decode(data)
    assert ours.dtype == torch.uint16
    np.testing.assert_array_equal(ours.numpy()[0], np.array(Image.open(io.BytesIO(data))))


def test_pnm_p6_16bit_maxval_rule():
    # Pillow turns 16-bit P6 into 8 bits; gdsio keeps uint16: check the rule itself.
    maxval = 1000
    a = rng.integers(0, 1100, (4, 50, 3)).astype(np.uint16)
    ours = gi.decode(pnm_bytes(a, maxval=maxval)).numpy()
    expect = np.vectorize(lambda v: 65535 if v >= maxval else round(Fraction(int(v) * 65535, maxval)))(a)
    np.testing.assert_array_equal(ours, chw(expect))


@pytest.mark.parametrize(
    "header",
    [
        b"P5\n4 3\n255\n",
        b"P5 4 3 255 ",
        b"P5\r\n4\r\n3\r\n255\r",
        b"P5\t4\t3\t255\t",
        b"P5\n# a comment\n4 # width\n# more\n3\n255\n",
        b"P5#c\n4 3\n255\n",
        b"P5\n4 3\n255# comment ending the header\n",
        b"P5\n4 3\n255#\r",
        b"P5\n\n\n  4    3 \x0b\x0c 255\n",
    ],
)


def test_pnm_header_whitespace_and_comments(header):
    a = rand((3, 4))
    h = parse_pnm(header, len(header) + 12)
    assert (h.width, h.height, h.maxval, h.data_offset) == (4, 3, 255, len(header))
    np.testing.assert_array_equal(gi.decode(header + a.tobytes()).numpy(), chw(a))


def test_pnm_trailing_bytes_are_ignored():
    a = rand((5, 6, 3))
    np.testing.assert_array_equal(gi.decode(pnm_bytes(a) + b"P6\nmore").numpy(), chw(a))


def test_pnm_big_image_uses_every_band():
    a = rand((700, 1000, 3))
    with gdsio.settings(threads=4):
        np.testing.assert_array_equal(gi.decode(pnm_bytes(a)).numpy(), chw(a))
