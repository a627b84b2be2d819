"""NPY images (formats/npy.py): every dtype, layout, order and version
round-trips exactly."""

from __future__ import annotations


import numpy as np
import pytest
import torch
from image_helpers import npy_bytes, rand

import gdsio.image as gi


NPY_SHAPES = {"HW": (6, 9), "HWC1": (6, 9, 1), "HWC3": (6, 9, 3), "HWC4": (6, 9, 4), "CHW3": (3, 6, 9), "CHW2": (2, 6, 7)}


def npy_expected(a: np.ndarray, kind: str) -> np.ndarray:
    if kind == "HW":
        return a[None]
    return a if kind.startswith("CHW") else a.transpose(2, 0, 1)


@pytest.mark.parametrize("dtype", ["u1", "<u2", ">u2", "<f4", ">f4"])
@pytest.mark.parametrize("kind", sorted(NPY_SHAPES))
@pytest.mark.parametrize("order", ["C", "F"])
def test_npy_round_trip(dtype, kind, order):
    a = rand(NPY_SHAPES[kind], np.dtype(dtype).newbyteorder("=")).astype(dtype)
    a = np.asfortranarray(a) if order == "F" else a
    img = gi.decode(npy_bytes(a))
    expect = npy_expected(a, kind)
    assert img.dtype == {"u": {1: torch.uint8, 2: torch.uint16}, "f": {4: torch.float32}}[a.dtype.kind][a.dtype.itemsize]
    assert img.shape == expect.shape
    # Compare bit patterns, so float NaN / -0.0 would count too.
    got = img.numpy()
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), expect.astype(got.dtype).view(f"u{got.itemsize}"))


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npy_versions(version):
    a = rand((5, 4, 3))
    np.testing.assert_array_equal(gi.decode(npy_bytes(a, version)).numpy(), a.transpose(2, 0, 1))


def test_npy_float_specials_pass_through():
    a = np.array([[np.nan, -0.0, np.inf], [-np.inf, 1e-40, -3.5]], dtype=np.float32)
    got = gi.decode(npy_bytes(a)).numpy()[0]
    np.testing.assert_array_equal(got.view(np.uint32), a.view(np.uint32))


def test_npy_layout_choice():
    a = rand((3, 5, 4))
    np.testing.assert_array_equal(gi.decode(npy_bytes(a)).numpy(), a.transpose(2, 0, 1))  # auto: HWC (last dim 4)
    np.testing.assert_array_equal(gi.decode(npy_bytes(a), npy_layout="CHW").numpy(), a)
    b = rand((3, 8, 9))
    np.testing.assert_array_equal(gi.decode(npy_bytes(b)).numpy(), b)  # auto: CHW (first dim 3)
    with pytest.raises(ValueError, match="does not fit the 2-D array"):
        gi.decode(npy_bytes(rand((4, 4))), npy_layout="CHW")
    with pytest.raises(ValueError, match="does not fit the 3-D array"):
        gi.decode(npy_bytes(a), npy_layout="HW")
