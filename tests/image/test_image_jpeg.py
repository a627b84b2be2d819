"""JPEG on the CPU (formats/jpeg.py): the header fields, and decode equal
to Pillow's in every mode."""

from __future__ import annotations

import io

import numpy as np
import pytest
from image_helpers import as_tensor, photos, pil_bytes, pil_chw
from PIL import Image

import gdsio.image as gi
from gdsio.image.formats.jpeg import parse_jpeg


@pytest.mark.parametrize("subsampling", [0, 1, 2])  # 4:4:4, 4:2:2, 4:2:0
def test_jpeg_cpu_equals_pillow(subsampling):
    for name, photo in photos():
        data = pil_bytes(Image.fromarray(photo), quality=90, subsampling=subsampling)
        h = parse_jpeg(data, len(data), data[-32:])
        assert h.subsampling == ["444", "422", "420"][subsampling] and h.color == "ycbcr"
        img, info = gi.decode(as_tensor(data), return_info=True)
        assert (info.backend, info.format) == ("pillow", "jpeg")
        np.testing.assert_array_equal(img.numpy(), pil_chw(Image.open(io.BytesIO(data))), err_msg=name)
        for mode, pil_mode in (("GRAY", "L"), ("RGB", "RGB")):
            np.testing.assert_array_equal(
                gi.decode(data, mode=mode).numpy(), pil_chw(Image.open(io.BytesIO(data)).convert(pil_mode))
            )


def test_jpeg_gray_progressive_and_cmyk_on_cpu():
    photo = photos()[0][1]
    gray = pil_bytes(Image.fromarray(photo).convert("L"), quality=90)
    img = gi.decode(gray)
    assert img.shape == (1,) + photo.shape[:2]
    np.testing.assert_array_equal(gi.decode(gray, mode="RGB").numpy(), pil_chw(Image.open(io.BytesIO(gray)).convert("RGB")))
    prog = pil_bytes(Image.fromarray(photo), quality=90, progressive=True)
    assert parse_jpeg(prog, len(prog)).coding == "progressive"
    np.testing.assert_array_equal(gi.decode(prog).numpy(), pil_chw(Image.open(io.BytesIO(prog))))
    cmyk = pil_bytes(Image.fromarray(photo).convert("CMYK"), quality=90)
    h = parse_jpeg(cmyk, len(cmyk))
    assert h.components == 4 and h.color in ("cmyk", "ycck")
    np.testing.assert_array_equal(gi.decode(cmyk).numpy(), pil_chw(Image.open(io.BytesIO(cmyk))))  # 4 channels
    np.testing.assert_array_equal(gi.decode(cmyk, mode="RGB").numpy(), pil_chw(Image.open(io.BytesIO(cmyk)).convert("RGB")))


def test_jpeg_header_fields():
    photo = photos()[0][1]
    data = pil_bytes(Image.fromarray(photo), quality=90, subsampling=2)
    h = parse_jpeg(data, len(data), data[-32:])
    assert (h.width, h.height, h.components, h.precision, h.coding) == (photo.shape[1], photo.shape[0], 3, 8, "baseline")
    assert h.interleaved and h.has_eoi and h.restart_interval == 0 and h.orientation == 1
    assert h.sampling == ((2, 2), (1, 1), (1, 1))
    assert not parse_jpeg(data[:-2], len(data) - 2, data[-34:-2]).has_eoi
    # Restart intervals, when this Pillow can write them.
    try:
        rst = pil_bytes(Image.fromarray(photo), quality=90, restart_marker_blocks=4)
    except TypeError:
        return
    assert parse_jpeg(rst, len(rst)).restart_interval == 4
