"""Byte counts and sizes are ints: 1.5, 2.0 or True is a TypeError naming the
argument (as torchvision names `size`), never a pybind or torch error, never
truncated to 2 in silence. The transforms' sizes are in tests/transforms/test_sizes.py."""

from __future__ import annotations

import numpy as np
import pytest

import gdsio
from gdsio.image import RawFormat


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "a.bin"
    p.write_bytes(bytes(range(100)))
    (tmp_path / "ds" / "c0").mkdir(parents=True)
    np.save(tmp_path / "ds" / "c0" / "x.npy", np.zeros(3))
    return p


def buf():
    return np.empty(10, np.uint8)


CALLS = {
    "read size": ("size", lambda p, v: gdsio.read(p, device="cpu", size=v)),
    "read offset": ("offset", lambda p, v: gdsio.read(p, device="cpu", offset=v)),
    "read_into size": ("size", lambda p, v: gdsio.read_into(p, buf(), size=v)),
    "read_into offset": ("offset", lambda p, v: gdsio.read_into(p, buf(), offset=v)),
    "File.read size": ("size", lambda p, v: gdsio.File(p).read(device="cpu", size=v)),
    "File.read_into file_offset": ("file_offset", lambda p, v: gdsio.File(p).read_into(buf(), 2, v)),
    "File.read_into out_offset": ("out_offset", lambda p, v: gdsio.File(p).read_into(buf(), 2, 0, v)),
    "File.pread size": ("size", lambda p, v: gdsio.File(p).pread(buf(), v).result()),
    "File.read_batch size": ("request 0: size", lambda p, v: gdsio.File(p).read_batch([(buf(), v, 0)])),
    "File.read_batch offset": ("request 0: file_offset", lambda p, v: gdsio.File(p).read_batch([(buf(), 2, v)])),
    "RawFormat height": ("RawFormat.height", lambda p, v: RawFormat(height=v, width=2)),
    "image.read max_pixels": ("max_pixels", lambda p, v: gdsio.image.read(p, device="cpu", max_pixels=v)),
    "Loader batch_size": ("batch_size", lambda p, v: gdsio.Loader(p.parent / "ds", v, device="cpu")),
}


@pytest.mark.parametrize("bad", [1.5, 2.0, True, "2"])
@pytest.mark.parametrize("call", list(CALLS))
def test_a_size_that_is_not_an_int_is_a_type_error_naming_it(path, call, bad):
    name, fn = CALLS[call]
    with pytest.raises(TypeError, match=rf"^{name} must be (a positive )?(an )?int") as e:
        fn(path, bad)
    assert repr(bad) in str(e.value)


def test_numpy_ints_are_ints(path):
    t = gdsio.read(path, device="cpu", offset=np.int64(2), size=np.uint8(3))
    assert t.tolist() == [2, 3, 4]
