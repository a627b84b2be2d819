"""Where the samples of an uncompressed image sit (PixelLayout), how its
channels map to the output for a mode, and the job tuples the core decodes
(csrc/image/decode.hpp: PixelJob, fields in that order)."""

from __future__ import annotations

import dataclasses
from typing import Any

from .headers import NpyHeader, PnmHeader

# The enums of csrc/image/decode.hpp.
SAMPLE = {"u8": 0, "u16le": 1, "u16be": 2, "f32le": 3, "f32be": 4}
SAMPLE_BYTES = {"u8": 1, "u16le": 2, "u16be": 2, "f32le": 4, "f32be": 4}
OUT = {"uint8": 0, "uint16": 1, "float32": 2}
CONVERT = {"copy": 0, "replicate": 1, "luma": 2}

_DTYPES = ("uint8", "uint16", "float32")


def dtype_name(dtype: Any) -> str:
    """'uint8', 'uint16' or 'float32' from a str, numpy or torch dtype; ValueError otherwise."""
    name = str(dtype).replace("torch.", "")
    if name not in _DTYPES:
        try:
            import numpy as np

            name = np.dtype(dtype).name
        except TypeError:
            pass
    if name not in _DTYPES:
        raise ValueError(f"dtype must be uint8, uint16 or float32, got {dtype!r}")
    return name


@dataclasses.dataclass(frozen=True)
class PixelLayout:
    """One image's samples: sample (c, y, x) is at element
    offset/itemsize + c*stride_c + y*stride_y + x*stride_x of the data."""

    offset: int  # bytes before the first sample
    height: int
    width: int
    channels: int
    stride_c: int  # in samples
    stride_y: int
    stride_x: int
    sample: str  # a key of SAMPLE
    dtype: str  # the output dtype
    maxval: int = 0  # PNM: rescale 0..maxval to the full range of dtype (0: none)

    @property
    def nbytes(self) -> int:
        """Bytes from offset to the end of the last sample."""
        last = (self.channels - 1) * self.stride_c + (self.height - 1) * self.stride_y + (self.width - 1) * self.stride_x
        return (last + 1) * SAMPLE_BYTES[self.sample]


def _interleaved(offset: int, h: int, w: int, c: int, sample: str, dtype: str, maxval: int = 0) -> PixelLayout:
    return PixelLayout(offset, h, w, c, 1, w * c, c, sample, dtype, maxval)


def planar_layout(offset: int, c: int, h: int, w: int, sample: str, dtype: str) -> PixelLayout:
    return PixelLayout(offset, h, w, c, h * w, w, 1, sample, dtype)


def pnm_layout(h: PnmHeader) -> PixelLayout:
    if h.maxval < 256:
        sample, dtype, full = "u8", "uint8", 255
    else:
        sample, dtype, full = "u16be", "uint16", 65535
    return _interleaved(h.data_offset, h.height, h.width, h.channels, sample, dtype, 0 if h.maxval == full else h.maxval)


def _npy_sample(h: NpyHeader) -> str:
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
    return PixelLayout(h.data_offset, hh, w, c, sc, sy, sx, _npy_sample(h), h.dtype)


@dataclasses.dataclass(frozen=True)
class RawFormat:
    """Raw records: samples with no header (or one of ``offset`` bytes to skip).

    ``layout`` is "HWC" (interleaved), "CHW" (planar) or "HW" (one channel);
    ``dtype`` uint8, uint16 or float32 (str, numpy or torch dtype);
    ``byteorder`` "little" or "big" for the 2- and 4-byte types. The data must
    hold exactly ``offset + height * width * channels * itemsize`` bytes.

    >>> fmt = RawFormat(height=480, width=640, channels=3, layout="HWC")
    >>> img = gdsio.image.decode(record, raw=fmt)        # uint8 (3, 480, 640)
    """

    height: int
    width: int
    channels: int = 1
    layout: str = "HWC"
    dtype: Any = "uint8"
    byteorder: str = "little"
    offset: int = 0

    def __post_init__(self) -> None:
        for name in ("height", "width", "channels"):
            v = getattr(self, name)
            if type(v) is not int or v < 1:
                raise ValueError(f"RawFormat.{name} must be a positive int, got {v!r}")
        if type(self.offset) is not int or self.offset < 0:
            raise ValueError(f"RawFormat.offset must be an int >= 0, got {self.offset!r}")
        if self.layout not in ("HWC", "CHW", "HW"):
            raise ValueError(f"RawFormat.layout must be 'HWC', 'CHW' or 'HW', got {self.layout!r}")
        if self.layout == "HW" and self.channels != 1:
            raise ValueError(f"RawFormat.layout 'HW' has one channel, got channels={self.channels}")
        if self.byteorder not in ("little", "big"):
            raise ValueError(f"RawFormat.byteorder must be 'little' or 'big', got {self.byteorder!r}")
        object.__setattr__(self, "dtype", dtype_name(self.dtype))

    @property
    def itemsize(self) -> int:
        return {"uint8": 1, "uint16": 2, "float32": 4}[self.dtype]

    @property
    def nbytes(self) -> int:
        """The exact size of one record."""
        return self.offset + self.height * self.width * self.channels * self.itemsize

    def layout_of(self) -> PixelLayout:
        if self.dtype == "uint8":
            sample = "u8"
        else:
            sample = ("u16" if self.dtype == "uint16" else "f32") + ("le" if self.byteorder == "little" else "be")
        if self.layout == "CHW":
            return planar_layout(self.offset, self.channels, self.height, self.width, sample, self.dtype)
        return _interleaved(self.offset, self.height, self.width, self.channels, sample, self.dtype)


def channel_plan(channels: int, mode: str) -> tuple[int, str]:
    """(output channels, conversion) for an image of `channels` channels."""
    if mode == "UNCHANGED":
        return channels, "copy"
    if 1 <= channels <= 4:
        if mode == "RGB":
            return 3, ("replicate" if channels <= 2 else "copy")
        return 1, ("copy" if channels <= 2 else "luma")
    raise ValueError(f"mode {mode} needs an image of 1 to 4 channels; this one has {channels}")


def job(lay: PixelLayout, src_ptr: int, src_bytes: int, dst_ptr: int, dst_channels: int, convert: str) -> tuple:
    """A PixelJob tuple; src_ptr points at the first byte of the data (not the first sample)."""
    return (
        src_ptr + lay.offset, src_bytes - lay.offset, dst_ptr, lay.height, lay.width,
        lay.stride_c, lay.stride_y, lay.stride_x, lay.channels, dst_channels,
        SAMPLE[lay.sample], OUT[lay.dtype], CONVERT[convert], lay.maxval,
    )
