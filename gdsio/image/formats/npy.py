"""NPY images: uint8, uint16 or float32 arrays of shape HW, HWC or CHW.

The header is parsed by gdsio.io.npy_header (numpy's rules, the parser
gdsio.load_npy uses too); this module adds an image's rules (three dtypes,
two or three dimensions) and finds where each sample sits, in C or Fortran
order, either byte order. Decoded by gdsio's kernels or their CPU twin
(formats/uncompressed.py).
"""

from __future__ import annotations

import dataclasses

from ...io.npy_header import NPY_MAGIC, NpyHeader, parse_npy_header
from ..layout import PixelLayout
from . import uncompressed
from ..codec import Format, Item, Options, Size

__all__ = ["FORMAT", "NpyHeader", "npy_layout", "parse_npy"]

_KINDS = ("u1", "u2", "f4")


def sniff(buf: bytes) -> bool:
    return buf[:6] == NPY_MAGIC


def _image_descr(descr: str) -> str:
    """descr (byte order explicit) restricted to an image's dtypes, 1-byte ones as '|u1'."""
    kind = descr[1:]
    if kind not in _KINDS:
        raise ValueError(f"NPY header: dtype {descr!r} is not supported; images are uint8, uint16 or float32")
    if kind == "u1":
        return "|u1"
    return ("<" if descr[0] == "|" else descr[0]) + kind


def parse_npy(buf: bytes, total: int, tail: bytes = b"") -> NpyHeader:
    """gdsio.io.npy_header's parse, then an image's dtypes: uint8, uint16, float32.

    Raises NeedMoreData for a header that runs past ``buf``, ValueError for
    anything else wrong, and nothing else whatever the bytes."""
    h = parse_npy_header(buf, total)
    return dataclasses.replace(h, descr=_image_descr(h.descr))


def _sample(h: NpyHeader) -> str:
    if h.dtype == "uint8":
        return "u8"
    kind = "u16" if h.dtype == "uint16" else "f32"
    return kind + ("be" if h.big_endian else "le")


def npy_layout(h: NpyHeader, layout: str) -> PixelLayout:
    """HW, HWC or CHW arrays; layout 'auto' takes a 3-D array as HWC when its
    last dimension is 1..4, else as CHW when its first is, else refuses."""
    shape = h.shape
    if len(shape) not in (2, 3):
        raise ValueError(f"NPY array of shape {shape} is not an image: expected HW, HWC or CHW")
    if any(d == 0 for d in shape):
        raise ValueError(f"NPY array of shape {shape} is empty")
    if len(shape) == 2:
        if layout not in ("auto", "HW"):
            raise ValueError(f"npy_layout {layout!r} does not fit the 2-D array of shape {shape}")
        lay = "HW"
        dims: tuple[int, ...] = (1, shape[0], shape[1])
    else:
        lay = layout
        if lay == "auto":
            if shape[2] <= 4:
                lay = "HWC"
            elif shape[0] <= 4:
                lay = "CHW"
            else:
                raise ValueError(f"cannot tell HWC from CHW for the NPY shape {shape}; pass npy_layout='HWC' or 'CHW'")
        if lay == "HWC":
            dims = (shape[2], shape[0], shape[1])
        elif lay == "CHW":
            dims = shape
        else:
            raise ValueError(f"npy_layout {layout!r} does not fit the 3-D array of shape {shape}")
    c, hh, w = dims
    # Element strides of the array as stored, C or Fortran order.
    strides = [0] * len(shape)
    acc = 1
    order = range(len(shape)) if h.fortran_order else reversed(range(len(shape)))
    for axis in order:
        strides[axis] = acc
        acc *= shape[axis]
    if lay == "HW":
        sc, sy, sx = 0, strides[0], strides[1]
    elif lay == "HWC":
        sc, sy, sx = strides[2], strides[0], strides[1]
    else:
        sc, sy, sx = strides[0], strides[1], strides[2]
    return PixelLayout(h.data_offset, hh, w, c, sc, sy, sx, _sample(h), h.dtype)


def check(item: Item, opts: Options) -> Size:
    return uncompressed.check_fits(item, npy_layout(item.header, opts.npy_layout), "NPY")


# No extensions: a Loader takes .npy files as tensors of their own kind (gdsio.load_npy).
FORMAT = Format(name="npy", title="NPY", sniff=sniff, parse=parse_npy, check=check, decode=uncompressed.decode)
