"""EXIF orientation (image/exif.py): read as Pillow reads it, applied as
torchvision applies it."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from image_helpers import pil_bytes, pil_chw, rand
from PIL import Image, ImageOps

import gdsio.image as gi
from gdsio.image.exif import exif_orientation
from gdsio.image.formats.jpeg import parse_jpeg


def exif_jpeg(a: np.ndarray, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return pil_bytes(Image.fromarray(a), quality=95, subsampling=0, exif=exif.tobytes())


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_matches_pillow(orientation):
    a = rand((5, 8, 3))
    data = exif_jpeg(a, orientation)
    assert parse_jpeg(data, len(data)).orientation == orientation
    img, info = gi.decode(data, apply_exif_orientation=True, return_info=True)
    assert info.orientation == orientation
    ref = pil_chw(ImageOps.exif_transpose(Image.open(io.BytesIO(data))))
    np.testing.assert_array_equal(img.numpy(), ref)
    assert gi.decode(data).shape == (3, 5, 8)  # not applied unless asked


def test_apply_orientation_definitions():
    # torchvision's _exif_orientation rules, checked against numpy.
    a = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    t = torch.from_numpy(a)
    expect = {
        1: a, 2: a[:, :, ::-1], 3: a[:, ::-1, ::-1], 4: a[:, ::-1, :], 5: a.transpose(0, 2, 1),
        6: np.rot90(a, -1, (1, 2)), 7: a.transpose(0, 2, 1)[:, ::-1, ::-1], 8: np.rot90(a, 1, (1, 2)),
    }
    for o, e in expect.items():
        out = gi.apply_orientation(t, o)
        assert out.is_contiguous()
        np.testing.assert_array_equal(out.numpy(), e, err_msg=str(o))


def test_exif_parser_both_byte_orders_and_garbage():
    mm = b"MM\x00\x2a\x00\x00\x00\x08\x00\x01\x01\x12\x00\x03\x00\x00\x00\x01\x00\x06\x00\x00"
    ii = b"II\x2a\x00\x08\x00\x00\x00\x01\x00\x12\x01\x03\x00\x01\x00\x00\x00\x03\x00\x00\x00"
    assert exif_orientation(mm) == 6 and exif_orientation(ii) == 3
    assert exif_orientation(mm[:12]) == 1
    assert exif_orientation(mm.replace(b"\x00\x06", b"\x00\x09")) == 1  # out of range
    assert exif_orientation(b"XX" + mm[2:]) == 1
