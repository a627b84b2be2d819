"""The modes (layout.channel_plan and the core's conversions): gray to RGB
replicates, RGB to gray is Pillow's convert("L"), for every sample type."""

from __future__ import annotations


import numpy as np
import pytest
import torch
from image_helpers import chw, npy_bytes, photos, pil_chw, pnm_bytes, rand
from PIL import Image

import gdsio.image as gi


def test_gray_to_rgb_replicates():
    a = rand((6, 7))
    for data in (pnm_bytes(a), npy_bytes(a)):
        img = gi.decode(data, mode="RGB")
        assert img.shape == (3, 6, 7)
        for c in range(3):
            np.testing.assert_array_equal(img[c].numpy(), a)


def test_rgb_to_gray_is_pillow_convert_L():
    a = rand((256, 256, 3))
    ref = np.array(Image.fromarray(a).convert("L"))
    for data in (pnm_bytes(a), npy_bytes(a), npy_bytes(np.ascontiguousarray(a.transpose(2, 0, 1)))):
        img = gi.decode(data, mode="GRAY")
        assert img.shape == (1, 256, 256)
        np.testing.assert_array_equal(img[0].numpy(), ref)
    for name, photo in photos():
        np.testing.assert_array_equal(
            gi.decode(pnm_bytes(photo), mode="GRAY")[0].numpy(), np.array(Image.fromarray(photo).convert("L")), err_msg=name
        )


def test_rgba_and_la_follow_pillow():
    rgba = rand((9, 10, 4))
    im = Image.fromarray(rgba, "RGBA")
    np.testing.assert_array_equal(gi.decode(npy_bytes(rgba), mode="RGB").numpy(), pil_chw(im.convert("RGB")))
    np.testing.assert_array_equal(gi.decode(npy_bytes(rgba), mode="GRAY").numpy(), pil_chw(im.convert("L")))
    np.testing.assert_array_equal(gi.decode(npy_bytes(rgba)).numpy(), chw(rgba))
    la = rand((9, 10, 2))
    im = Image.fromarray(la, "LA")
    np.testing.assert_array_equal(gi.decode(npy_bytes(la), mode="GRAY").numpy(), pil_chw(im.convert("L")))
    np.testing.assert_array_equal(gi.decode(npy_bytes(la), mode="RGB").numpy(), pil_chw(im.convert("RGB")))


def test_uint16_and_float_luma():
    a = rand((20, 30, 3), np.uint16)
    r, g, b = (a[..., k].astype(np.uint64) for k in range(3))
    expect = ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).astype(np.uint16)
    got = gi.decode(pnm_bytes(a), mode="GRAY")
    assert got.dtype == torch.uint16
    np.testing.assert_array_equal(got[0].numpy(), expect)
    f = rand((20, 30, 3), np.float32)
    expect = (f[..., 0] * np.float32(0.299) + f[..., 1] * np.float32(0.587)) + f[..., 2] * np.float32(0.114)
    np.testing.assert_allclose(gi.decode(npy_bytes(f), mode="GRAY")[0].numpy(), expect, rtol=1e-6, atol=0)


def test_modes_accept_enums_and_case():
    a = rand((4, 5, 3))
    ref = gi.decode(pnm_bytes(a), mode="GRAY")
    for m in ("gray", gi.ImageReadMode.GRAY, type("TorchvisionMode", (), {"name": "GRAY"})()):
        assert torch.equal(gi.decode(pnm_bytes(a), mode=m), ref)


def test_mode_needs_1_to_4_channels():
    with pytest.raises(ValueError, match="data: mode RGB needs an image of 1 to 4 channels; this one has 5"):
        gi.decode(npy_bytes(rand((5, 4, 4))), mode="RGB", npy_layout="CHW")
    assert gi.decode(npy_bytes(rand((5, 4, 4))), npy_layout="CHW").shape == (5, 4, 4)
