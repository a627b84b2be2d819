"""The header of a .npy file, parsed once for gdsio.load_npy and gdsio.image.

numpy's own rules (``numpy.lib.format.read_array_header_*``): the magic, a
format version 1.0, 2.0 or 3.0, a little-endian header length, and a dict
literal with exactly the keys ``descr``, ``fortran_order`` and ``shape``. The
dict is read by gdsio.io.npy_literal (literals only, as numpy's
``ast.literal_eval``, but thread-safe), never evaluated or unpickled, and
headers longer than numpy's cap are refused before they are parsed.

What the dtype may be is the caller's rule: ``gdsio.load_npy`` takes every
dtype torch has, gdsio.image the three an image holds. Both refuse what this
parser refuses: structured dtypes and object arrays (they would need pickle).

>>> h = parse_npy_header(open("a.npy", "rb").read(4096), os.path.getsize("a.npy"))
>>> h.descr, h.shape, h.data_offset
('<f4', (3, 4), 128)
"""

from __future__ import annotations

import dataclasses
import math
import struct

import numpy as np

from ..errors import NeedMoreData
from . import npy_literal

__all__ = ["NPY_MAGIC", "NPY_MAX_HEADER", "NpyHeader", "parse_npy_header"]

NPY_MAGIC = b"\x93NUMPY"
# numpy's own limit (np.lib.format, max_header_size): a longer header
# describes a structured dtype, which gdsio never reads.
NPY_MAX_HEADER = npy_literal.NPY_MAX_HEADER
_KEYS = {"descr", "fortran_order", "shape"}
# The dtypes an image holds, by their descr without the byte order.
_IMAGE_DTYPES = {"u1": "uint8", "u2": "uint16", "f4": "float32"}


@dataclasses.dataclass(frozen=True)
class NpyHeader:
    """An NPY header (format versions 1.0, 2.0, 3.0) of a plain (not structured) array.

    ``descr`` is numpy's dtype string with its byte order spelled out
    (``'<u2'``, ``'|u1'``; a missing or native ``'='`` order becomes this
    host's); ``data_offset`` is where the array's bytes start.
    """

    version: tuple[int, int]
    descr: str
    fortran_order: bool
    shape: tuple[int, ...]
    data_offset: int

    @property
    def dtype(self) -> str:
        """'uint8', 'uint16' or 'float32' for the dtypes an image holds, '' for any other."""
        return _IMAGE_DTYPES.get(self.descr[1:], "")

    @property
    def itemsize(self) -> int:
        """Bytes per element of a plain numeric descr ('<u2' -> 2); 0 when the descr has none."""
        digits = self.descr[2:]
        return int(digits) if digits.isdigit() else 0

    @property
    def big_endian(self) -> bool:
        return self.descr[0] == ">"

    @property
    def data_bytes(self) -> int:
        n = self.itemsize
        for d in self.shape:
            n *= d
        return n


def parse_npy_header(buf: bytes, total: int) -> NpyHeader:
    """Parses the header at the start of ``buf``, a prefix of .npy data ``total`` bytes long.

    Args:
        buf: the first bytes of the data (12 are enough to learn how many the header needs).
        total: the length of the whole data (the file size).

    Returns:
        NpyHeader: version, descr (byte order explicit), fortran_order, shape and data offset.

    Raises:
        NeedMoreData: the header runs past ``buf`` (but not past ``total``):
            call again with at least ``nbytes`` bytes.
        ValueError: not an NPY header, or one numpy would refuse, or a
            structured or object dtype; the message says which.

    Example:
        >>> parse_npy_header(data[:4096], len(data)).shape
        (480, 640, 3)
    """
    need = NeedMoreData.require
    need(buf, total, 8, "NPY header")
    if bytes(buf[:6]) != NPY_MAGIC:
        raise ValueError(f"not a .npy file: bad magic {bytes(buf[:6])!r}")
    major, minor = buf[6], buf[7]
    if (major, minor) not in ((1, 0), (2, 0), (3, 0)):
        v = f"{major}.{minor}"
        # Both spellings callers match on: the version, and that it is not supported.
        raise ValueError(f"unsupported .npy format version {v} (format version {v} is not supported; numpy reads 1.0, 2.0 and 3.0)")
    if major == 1:
        need(buf, total, 10, "NPY header")
        (hlen,) = struct.unpack_from("<H", buf, 8)
        start = 10
    else:
        need(buf, total, 12, "NPY header")
        (hlen,) = struct.unpack_from("<I", buf, 8)
        start = 12
    # numpy's cap is on the decoded text; a UTF-8 character is at most 4 bytes.
    if hlen > NPY_MAX_HEADER * (4 if major >= 3 else 1):
        raise ValueError(f"NPY header of {hlen} bytes is longer than {NPY_MAX_HEADER} (numpy's own limit)")
    need(buf, total, start + hlen, "NPY header")
    raw = bytes(buf[start : start + hlen])
    try:
        text = raw.decode("utf-8" if major >= 3 else "latin1")
    except UnicodeDecodeError as e:
        raise ValueError(f"NPY header is not UTF-8: {e}"[:300]) from None
    if len(text) > NPY_MAX_HEADER:
        raise ValueError(f"NPY header of {len(text)} characters is longer than {NPY_MAX_HEADER} (numpy's own limit)")
    try:
        d = npy_literal.literal(text, python2_longs=major <= 2)
    except Exception as e:  # ValueError, MemoryError...
        raise ValueError(f"NPY header is not a Python literal: {type(e).__name__}: {e}"[:300]) from None
    if not isinstance(d, dict) or set(d) != _KEYS:
        raise ValueError("NPY header must be a dict with exactly the keys 'descr', 'fortran_order' and 'shape'")
    fortran, shape, descr = d["fortran_order"], d["shape"], d["descr"]
    if not isinstance(fortran, bool):
        raise ValueError("NPY header: fortran_order must be True or False")
    # Dimensions are ints (True is not one: numpy refuses it), each one an intp.
    if not isinstance(shape, tuple) or not all(type(v) is int and 0 <= v < 2**63 for v in shape):
        raise ValueError(f"NPY header: shape must be a tuple of non-negative ints below 2**63, got {shape!r}"[:200])
    # numpy's descr_to_dtype: a str is a dtype, a list a structured one, a tuple a
    # sub-array; anything else is not a dtype at all ("not a valid dtype descriptor").
    if isinstance(descr, list):
        raise ValueError(f"NPY header: a structured dtype ({descr!r}) is not supported: only arrays of one plain type"[:200])
    if isinstance(descr, tuple):
        raise ValueError(f"NPY header: the sub-array dtype {descr!r} is not an array of scalars (numpy.load refuses it too)"[:200])
    if not isinstance(descr, str):
        raise ValueError(f"NPY header: descr {descr!r} is not a dtype descriptor (numpy.load refuses it too)"[:200])
    try:
        dt = np.dtype(descr)
    except (TypeError, ValueError, Warning) as e:  # a Warning: a deprecated alias, where warnings are errors
        raise ValueError(f"NPY header: descr {descr!r} is not a numpy dtype: {e}"[:300]) from None
    if dt.names is not None:
        raise ValueError(f"NPY header: a structured dtype ({descr!r}) is not supported: only arrays of one plain type"[:200])
    if dt.hasobject:
        raise ValueError("NPY header: object arrays need pickle, which gdsio never runs")
    if dt.subdtype is not None:  # numpy.load refuses these too: it reads more elements than the shape holds
        raise ValueError(f"NPY header: the sub-array dtype {descr!r} is not an array of scalars (numpy.load refuses it too)")
    # numpy's rule (PyArray_NewFromDescr): the bytes of the non-zero dimensions fit in an intp.
    if math.prod(d for d in shape if d) * max(dt.itemsize, 1) >= 2**63:
        raise ValueError(f"NPY header: shape {shape} of {descr} is too big: more than 2**63 - 1 bytes"[:200])
    return NpyHeader((major, minor), dt.str, fortran, shape, start + hlen)
