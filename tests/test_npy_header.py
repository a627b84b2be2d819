"""gdsio.npy_header: the one NPY header parser, used by gdsio.load_npy and
gdsio.image alike: numpy's rules (exactly three keys), the same refusals in
both, and prefixes that ask for more bytes."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

import gdsio.image as gi
from gdsio.errors import NeedMoreData
from gdsio.io.npy_header import parse_npy_header
from gdsio.tensors import load_npy, read_npy_header


def npy(arr: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    b = io.BytesIO()
    np.lib.format.write_array(b, arr, version=version)
    return b.getvalue()


def with_header(text: str) -> bytes:
    body = text.encode("latin1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body + bytes(64)


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("arr", [np.zeros((3, 4), "<f4"), np.asfortranarray(np.zeros((2, 5), ">u2")), np.zeros(0, "|u1")])
def test_what_numpy_writes(arr, version):
    data = npy(arr, version)
    h = parse_npy_header(data, len(data))
    assert (h.version, h.descr, h.fortran_order, h.shape) == (version, arr.dtype.str, not arr.flags.c_contiguous and arr.ndim > 1, arr.shape)
    assert h.data_offset == len(data) - arr.nbytes


def test_a_prefix_asks_for_the_rest():
    data = npy(np.zeros((3, 4), np.uint8))
    with pytest.raises(NeedMoreData) as e:
        parse_npy_header(data[:12], len(data))
    assert e.value.nbytes == parse_npy_header(data, len(data)).data_offset
    with pytest.raises(ValueError, match="truncated NPY header"):
        parse_npy_header(data[:20], 20)


def test_native_byte_order_is_spelled_out():
    data = with_header("{'descr': '=u2', 'fortran_order': False, 'shape': (2, 2), }")
    assert parse_npy_header(data, len(data)).descr == "<u2"
    data = with_header("{'descr': 'f4', 'fortran_order': False, 'shape': (2, 2), }")
    assert parse_npy_header(data, len(data)).descr == "<f4"


# Headers both consumers refuse, with the words each message holds.
BAD = [
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", "exactly the keys"),
    ("{'descr': '<f4', 'shape': (2,)}", "exactly the keys"),
    ("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", "fortran_order must be True or False"),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1)}", "non-negative ints"),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (True,)}", "non-negative ints"),
    ("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}", "structured dtype"),
    ("{'descr': '|O', 'fortran_order': False, 'shape': (2,)}", "object arrays need pickle"),
    # Not a dtype at all, as numpy.load says ("descr is not a valid dtype descriptor"); a tuple is a sub-array.
    ("{'descr': 4, 'fortran_order': False, 'shape': (2,)}", r"descr 4 is not a dtype descriptor"),
    ("{'descr': None, 'fortran_order': False, 'shape': (2,)}", r"descr None is not a dtype descriptor"),
    ("{'descr': True, 'fortran_order': False, 'shape': (2,)}", r"descr True is not a dtype descriptor"),
    ("{'descr': b'<f4', 'fortran_order': False, 'shape': (2,)}", r"descr b'<f4' is not a dtype descriptor"),
    ("{'descr': {'names': ['a']}, 'fortran_order': False, 'shape': (2,)}", "is not a dtype descriptor"),
    ("{'descr': ('<f4', (2,)), 'fortran_order': False, 'shape': (2,)}", "sub-array dtype"),
    ("{'descr': __import__('os'), 'fortran_order': False, 'shape': (2,)}", "not a Python literal"),
]


@pytest.mark.parametrize("text, words", BAD)
def test_load_npy_and_image_decode_refuse_the_same_headers(tmp_path, text, words):
    data = with_header(text)
    with pytest.raises(ValueError, match=words):
        parse_npy_header(data, len(data))
    p = tmp_path / "bad.npy"
    p.write_bytes(data)
    with pytest.raises(ValueError, match=words) as e:
        load_npy(p, device="cpu")
    assert str(p) in str(e.value)
    with pytest.raises(ValueError, match=words) as e:
        gi.decode(data)
    assert str(e.value).startswith("data: ")


def test_versions_and_magic():
    with pytest.raises(ValueError, match="format version 4.0 is not supported"):
        parse_npy_header(b"\x93NUMPY\x04\x00" + bytes(8), 16)
    with pytest.raises(ValueError, match="bad magic"):
        parse_npy_header(b"\x93NUMPX\x01\x00" + bytes(8), 16)


def test_the_consumers_differ_only_in_dtypes(tmp_path):
    a = np.arange(6, dtype="<i8").reshape(2, 3)
    p = tmp_path / "a.npy"
    p.write_bytes(npy(a))
    assert read_npy_header(p) == (128, "<i8", False, (2, 3))
    np.testing.assert_array_equal(load_npy(p, device="cpu").numpy(), a)
    with pytest.raises(ValueError, match="dtype '<i8' is not supported; images are uint8, uint16 or float32"):
        gi.decode(npy(a))
