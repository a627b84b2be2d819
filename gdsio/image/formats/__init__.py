"""The image formats gdsio decodes, in one registry.

Each format is a module here with one ``FORMAT`` record (image/codec.py says
what its fields do); the batch machinery (image/batch.py) finds formats only
through ``FORMATS`` and never names one. A new format is one module and one
entry below.

The uncompressed formats share one decoder (uncompressed.py: gdsio's kernels
or their CPU twin), and the formats Pillow decodes share another
(image/pillow.py); a batch's images of formats sharing a decoder are decoded
in one call.

>>> from gdsio.image import formats
>>> formats.identify(b"\\xff\\xd8\\xff\\xe0", options).name
'jpeg'
"""

from __future__ import annotations

from ..codec import Format, Options
from . import bmp, dib, gif, jpeg, npy, png, pnm, raw, tiff, webp

__all__ = ["FORMATS", "by_name", "chosen", "file_extensions", "identify"]

# The registry. Order matters only for formats picked by an argument
# (``chosen``: raw=), which come before any sniffing; magics do not overlap.
FORMATS: tuple[Format, ...] = (
    raw.FORMAT,
    jpeg.FORMAT,
    pnm.FORMAT,
    npy.FORMAT,
    png.FORMAT,
    gif.FORMAT,
    bmp.FORMAT,
    tiff.FORMAT,
    webp.FORMAT,
    dib.FORMAT,  # last: no magic, only its info header's size (a weaker sign than the others' magics)
)

def chosen(opts: Options) -> Format | None:
    """The format an argument picks for every image of the call (raw=), or None."""
    for f in FORMATS:
        if f.chosen is not None and f.chosen(opts):
            return f
    return None


def identify(prefix: bytes, opts: Options) -> Format:
    """The format of data starting with `prefix` (12 bytes are enough), never
    told from a file name; ValueError when no format knows the bytes."""
    f = chosen(opts)
    if f is not None:
        return f
    sniffed = [f for f in FORMATS if f.chosen is None]
    for f in sniffed:
        if f.sniff(prefix):
            return f
    titles = ", ".join(f.title for f in sniffed[:-1]) + " or " + sniffed[-1].title
    raise ValueError(f"unknown image format (not {titles}): it starts with {prefix[:8]!r}")


def by_name(name: str) -> Format:
    """The format of that DecodeInfo.format name; KeyError for another."""
    for f in FORMATS:
        if f.name == name:
            return f
    raise KeyError(f"no image format {name!r}; gdsio has {[f.name for f in FORMATS]}")


def file_extensions() -> tuple[str, ...]:
    """The file name endings of every format, in registry order (a Loader's folder scan)."""
    return tuple(e for f in FORMATS for e in f.extensions)
