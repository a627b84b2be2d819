"""Where the samples of an uncompressed image sit (PixelLayout), and how its
channels map to the output for a mode (channel_plan): what the PNM, NPY and
raw formats tell the shared pixel decoder (formats/uncompressed.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .. import _core

__all__ = ["SAMPLE_BYTES", "PixelLayout", "channel_plan", "dtype_name", "interleaved_layout", "planar_layout"]

# The bytes of one sample of each kind the core reads (by the bound enum's names: "u8", "u16le", ...).
SAMPLE_BYTES = {name: _core.sample_bytes(v) for name, v in _core.Sample.__members__.items()}

_DTYPES = ("uint8", "uint16", "float32")


def dtype_name(dtype: Any) -> str:
    """'uint8', 'uint16' or 'float32' from a str, numpy or torch dtype; ValueError otherwise."""
    name = str(dtype).replace("torch.", "")
    if name not in _DTYPES:
        try:
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
    sample: str  # a key of core_types.SAMPLE
    dtype: str  # the output dtype
    maxval: int = 0  # PNM: rescale 0..maxval to the full range of dtype (0: none)

    @property
    def nbytes(self) -> int:
        """Bytes from offset to the end of the last sample."""
        last = (self.channels - 1) * self.stride_c + (self.height - 1) * self.stride_y + (self.width - 1) * self.stride_x
        return (last + 1) * SAMPLE_BYTES[self.sample]


def interleaved_layout(offset: int, h: int, w: int, c: int, sample: str, dtype: str, maxval: int = 0) -> PixelLayout:
    """(H, W, C) samples, one pixel's channels side by side."""
    return PixelLayout(offset, h, w, c, 1, w * c, c, sample, dtype, maxval)


def planar_layout(offset: int, c: int, h: int, w: int, sample: str, dtype: str) -> PixelLayout:
    """(C, H, W) samples, one plane per channel."""
    return PixelLayout(offset, h, w, c, h * w, w, 1, sample, dtype)


def channel_plan(channels: int, mode: str) -> tuple[int, str]:
    """(output channels, conversion: a key of core_types.CONVERT) for an image
    of `channels` channels in `mode`; ValueError when the mode cannot apply."""
    if mode == "UNCHANGED":
        return channels, "copy"
    if 1 <= channels <= 4:
        if mode == "RGB":
            return 3, ("replicate" if channels <= 2 else "copy")
        return 1, ("copy" if channels <= 2 else "luma")
    raise ValueError(f"mode {mode} needs an image of 1 to 4 channels; this one has {channels}")
