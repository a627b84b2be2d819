"""Raw records: samples with no header, described by a RawFormat.

Picked by ``decode(..., raw=RawFormat(...))`` rather than by the bytes (a
record has no magic); decoded by gdsio's kernels or their CPU twin
(formats/uncompressed.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..layout import PixelLayout, dtype_name, interleaved_layout, planar_layout
from . import uncompressed
from ..codec import Format, Item, Options, Size

__all__ = ["FORMAT", "RawFormat"]

_ITEMSIZE = {"uint8": 1, "uint16": 2, "float32": 4}


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
            if type(v) is not int:
                raise TypeError(f"RawFormat.{name} must be a positive int, got {v!r} ({type(v).__name__})")
            if v < 1:
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
        return _ITEMSIZE[self.dtype]

    @property
    def nbytes(self) -> int:
        """The exact size of one record."""
        return self.offset + self.height * self.width * self.channels * self.itemsize

    def layout_of(self) -> PixelLayout:
        """Where each sample of a record sits."""
        if self.dtype == "uint8":
            sample = "u8"
        else:
            sample = ("u16" if self.dtype == "uint16" else "f32") + ("le" if self.byteorder == "little" else "be")
        if self.layout == "CHW":
            return planar_layout(self.offset, self.channels, self.height, self.width, sample, self.dtype)
        return interleaved_layout(self.offset, self.height, self.width, self.channels, sample, self.dtype)


def chosen(opts: Options) -> bool:
    return opts.raw is not None


def sniff(buf: bytes) -> bool:
    return False  # a record has no magic: only raw= picks this format


def parse(buf: bytes, total: int, tail: bytes = b"") -> None:
    return None  # no header: the RawFormat says it all


def check(item: Item, opts: Options) -> Size:
    fmt: RawFormat = opts.raw
    if item.total != fmt.nbytes:
        raise ValueError(
            f"a raw record of {fmt.height}x{fmt.width}x{fmt.channels} {fmt.dtype} "
            f"({fmt.layout}, offset {fmt.offset}) holds {fmt.nbytes} bytes, but the data holds {item.total}"
        )
    item.layout = fmt.layout_of()
    return Size(fmt.height, fmt.width, fmt.channels)


FORMAT = Format(name="raw", title="raw", sniff=sniff, parse=parse, check=check, decode=uncompressed.decode, chosen=chosen)
