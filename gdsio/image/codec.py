"""What a format module provides, and what it is given: the contract
between the batch machinery and the formats.

A format is one ``Format`` record (``FORMAT`` in its module under
image/formats/, listed once in formats/__init__.py): its name, how to tell
it from the first bytes, how to parse its header, how to check an image's
sizes, and how to decode a group of images on a target device. The batch machinery (image/batch.py) drives
every format through these fields alone:

1. ``sniff(first bytes)`` picks the format (``chosen(options)`` instead for
   one picked by an argument, as ``raw=``);
2. ``parse(prefix, total, tail)`` reads the header from a prefix of the data
   (raising ``NeedMoreData`` for more of it, ``ValueError`` for bad data);
3. ``check(item, options)`` checks what the header says against the data,
   sets what the decoder needs on the item (a PixelLayout...), and returns the
   ``Size`` the machinery holds to the pixel cap and the mode's channel rule,
   or None when the decoder checks that itself;
4. ``decode(items, target, options)`` decodes a group of items of every
   format sharing this decode function (so that one kernel launch, or one
   upload, covers them all), setting ``result``, ``backend`` and ``reason`` of
   each, or failing it (``item.fail``).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, NamedTuple


from ..errors import DecompressionBombError, DecompressionBombWarning, NeedMoreData

__all__ = ["MAX_HEADER_BYTES", "SNIFF_BYTES", "Format", "Item", "NeedMoreData", "Options", "Size", "check_pixels"]

# Every sniff decides from this many first bytes (RIFF....WEBP needs 12).
SNIFF_BYTES = 12
# A header longer than this is refused: no real PNM/NPY/JPEG header before the
# first scan comes close (a JPEG's APPn segments are 64 KiB each at most).
MAX_HEADER_BYTES = 16 << 20


@dataclasses.dataclass(frozen=True)
class Options:
    """The arguments of one decode or read call, checked (batch.options)."""

    mode: str  # 'UNCHANGED', 'RGB' or 'GRAY'
    on_error: str  # 'raise' or 'skip'
    exif: bool  # apply EXIF orientation
    raw: Any  # a RawFormat, or None
    npy_layout: str  # 'auto', 'HWC', 'CHW' or 'HW'
    max_pixels: int | None  # the caller's hard cap (max_pixels=), or None: the bomb rule
    bomb_pixels: int  # the max_image_pixels setting (Pillow's rule: warn above, refuse above twice)
    threads: int  # host threads for CPU decoders


@dataclasses.dataclass(eq=False)
class Item:
    """One image on its way through a batch: its bytes, what its header
    said, and what became of it."""

    index: int  # position in the call's input
    name: str  # the path, or "data[i]": errors start with it
    data: Any = None  # 1-D uint8 tensor, cpu or cuda
    total: int = 0  # bytes of the data (the file size before it is read)
    prefix: bytes = b""  # the first bytes, on the host
    tail: bytes = b""  # the last bytes (a JPEG's EOI marker)
    format: Format | None = None
    header: Any = None  # what format.parse returned
    layout: Any = None  # the uncompressed formats' PixelLayout
    error: BaseException | None = None
    result: Any = None  # the decoded (C, H, W) tensor
    backend: str = ""  # DecodeInfo.backend
    reason: str = ""  # DecodeInfo.reason
    io: Any = None  # read(): the ReadStats of the file's read
    file: Any = None  # read(): the gdsio.File open from probe to body read (one open per file)
    span: tuple[int, int] | None = None  # (offset, size) of the image in its file (a tar shard's member); None: all of it
    orientation: int = 1  # EXIF orientation, as the format found it

    def fail(self, msg: str, kind: type[ValueError] = ValueError) -> None:
        """Marks the item failed: a ValueError (or the subclass `kind`) naming it."""
        self.error = kind(f"{self.name}: {msg}")

    def note(self, why: str) -> None:
        """Adds to ``reason`` (why a faster backend did not run)."""
        self.reason = "; ".join(r for r in (self.reason, why) if r)


class Size(NamedTuple):
    """What a header says of an image, for the pixel cap and the mode's channel rule."""

    height: int
    width: int
    channels: int


@dataclasses.dataclass(frozen=True)
class Format:
    """One image format: see the module docstring for the order of the calls."""

    name: str  # DecodeInfo.format: 'jpeg', 'pnm', 'npy', 'raw', 'png', ...
    title: str  # how messages name it: 'JPEG', 'PNM', ...
    sniff: Callable[[bytes], bool]  # from the first SNIFF_BYTES bytes (fewer for short data)
    parse: Callable[[bytes, int, bytes], Any]  # (prefix, total, tail) -> header
    check: Callable[[Item, Options], Size | None]
    decode: Callable[[list[Item], Any, Options], None]  # (items, target torch.device, options)
    # The bytes go to host memory whatever the target (a CPU decoder's formats).
    host_bytes: bool = False
    # Picked by an argument rather than by its bytes (raw=): nothing is sniffed or fetched.
    chosen: Callable[[Options], bool] | None = None
    # File name endings a Loader's folder scan takes for images of this format
    # (the format itself is still told from the bytes).
    extensions: tuple[str, ...] = ()


def check_pixels(width: int, height: int, opts: Options, name: str) -> None:
    """The pixel rule, from the header, before anything is allocated. With
    ``max_pixels=`` a hard cap (ValueError above it); else Pillow's
    decompression-bomb rule on the ``max_image_pixels`` setting: a
    DecompressionBombWarning above it, a DecompressionBombError (a ValueError)
    above twice it. `name` (the file, or data[i]) is what the warning names."""
    n = width * height
    if opts.max_pixels is not None:
        if n > opts.max_pixels:
            raise ValueError(f"{width}x{height} = {n} pixels is more than the cap of {opts.max_pixels} (max_pixels=)")
        return
    limit = opts.bomb_pixels
    how = "gdsio.settings(max_image_pixels=...) or GDSIO_MAX_IMAGE_PIXELS"
    if n > 2 * limit:
        raise DecompressionBombError(
            f"{width}x{height} = {n} pixels is more than twice max_image_pixels ({limit}): "
            f"a decompression bomb? Raise the setting to read it ({how})"
        )
    if n > limit:
        warnings.warn(DecompressionBombWarning(
            f"{name}: {width}x{height} = {n} pixels is more than max_image_pixels ({limit}): "
            f"a decompression bomb? ({how})"), stacklevel=2)
