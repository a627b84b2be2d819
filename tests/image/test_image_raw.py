"""Raw records (formats/raw.py): every layout, dtype and byte order, and
the RawFormat checks."""

from __future__ import annotations


import numpy as np
import pytest
import torch
from image_helpers import rand

import gdsio.image as gi


@pytest.mark.parametrize("layout", ["HWC", "CHW", "HW"])
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "float32"])
@pytest.mark.parametrize("byteorder", ["little", "big"])
@pytest.mark.parametrize("offset", [0, 7])
def test_raw_round_trip(layout, dtype, byteorder, offset):
    c = 1 if layout == "HW" else 3
    native = rand((c, 5, 8), np.dtype(dtype))
    stored = native if layout == "CHW" else native.transpose(1, 2, 0)
    stored = np.ascontiguousarray(stored).astype(np.dtype(dtype).newbyteorder("<" if byteorder == "little" else ">"))
    fmt = gi.RawFormat(height=5, width=8, channels=c, layout=layout, dtype=dtype, byteorder=byteorder, offset=offset)
    data = b"\xaa" * offset + stored.tobytes()
    assert fmt.nbytes == len(data)
    img, info = gi.decode(data, raw=fmt, return_info=True)
    assert info.format == "raw"
    got = img.numpy()
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), native.view(f"u{got.itemsize}"))


def test_raw_accepts_numpy_and_torch_dtypes():
    assert gi.RawFormat(2, 2, dtype=np.uint16).dtype == "uint16"
    assert gi.RawFormat(2, 2, dtype=torch.float32).dtype == "float32"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(height=0, width=2), "RawFormat.height must be a positive int"),
        (dict(height=2, width=2, layout="WHC"), "RawFormat.layout"),
        (dict(height=2, width=2, layout="HW", channels=3), "one channel"),
        (dict(height=2, width=2, dtype="int8"), "dtype must be uint8, uint16 or float32"),
        (dict(height=2, width=2, byteorder="native"), "RawFormat.byteorder"),
        (dict(height=2, width=2, offset=-1), "RawFormat.offset"),
    ],
)


def test_raw_format_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gi.RawFormat(**kwargs)


def test_raw_size_must_match():
    fmt = gi.RawFormat(height=4, width=4, channels=3)
    with pytest.raises(ValueError, match=r"data: a raw record of 4x4x3 uint8 .* holds 48 bytes, but the data holds 47"):
        gi.decode(bytes(47), raw=fmt)
    with pytest.raises(ValueError, match="holds 48 bytes, but the data holds 49"):
        gi.decode(bytes(49), raw=fmt)
