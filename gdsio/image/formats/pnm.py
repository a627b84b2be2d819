"""PNM: binary PGM (P5, gray) and PPM (P6, RGB), 8 and 16 bit, by gdsio's
kernels; the other Netpbm variants Pillow reads, by Pillow.

P5 and P6 are decoded by gdsio's kernels or their CPU twin
(formats/uncompressed.py); a 16-bit image (maxval above 255) gives uint16,
as torchvision's read_image keeps 16-bit PNG, and a maxval below the full
range is rescaled to it by Pillow's rule.

Plain PBM/PGM/PPM (P1, P2, P3), bitmap PBM (P4) and gray PFM (Pf) are
decoded by Pillow on the CPU (image/pillow.py), which also reads their
headers (its rules: tokens of up to 10 characters, '#' comments anywhere in
the header and the plain samples, maxval 1..65535, plain samples no larger
than maxval) and refuses what it cannot read: the error names the image.
Their pixels are Pillow's: a bitmap is 0/255 gray as a 1-bit PNG is; a
plain PGM above maxval 255 gives uint16 (as P5 does); a plain PPM above 255
gives Pillow's 8 bits (``DecodeInfo.reason`` says so, a P6 keeps 16); PFM
gives float32. PAM (P7) and colour PFM (PF) are refused, as Pillow refuses
them.

>>> h = parse_pnm(b"P5\\n# a comment\\n640 480\\n255\\n", 307220)
>>> (h.width, h.height, h.maxval, h.data_offset)
(640, 480, 255, 27)
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

from .. import pillow
from ..layout import PixelLayout, interleaved_layout
from . import uncompressed
from ..codec import Format, Item, NeedMoreData, Options, Size

__all__ = ["FORMAT", "PillowPnm", "PnmHeader", "parse_pnm", "pnm_layout"]

_WS = b" \t\n\v\f\r"
# The magics Pillow decodes (its PpmImagePlugin): plain and bitmap PNM, gray PFM.
_PILLOW_MAGICS = (b"P1", b"P2", b"P3", b"P4", b"Pf")


@dataclasses.dataclass(frozen=True)
class PnmHeader:
    """A binary PGM (P5) or PPM (P6) header."""

    magic: str  # "P5" or "P6"
    width: int
    height: int
    maxval: int  # 1..65535; samples are 2 bytes big-endian above 255
    data_offset: int  # where the raster starts

    @property
    def channels(self) -> int:
        return 1 if self.magic == "P5" else 3

    @property
    def sample_bytes(self) -> int:
        return 1 if self.maxval < 256 else 2

    @property
    def raster_bytes(self) -> int:
        return self.width * self.height * self.channels * self.sample_bytes

    @property
    def dtype(self) -> str:
        return "uint8" if self.maxval < 256 else "uint16"


@dataclasses.dataclass(frozen=True)
class PillowPnm:
    """A PNM variant Pillow decodes (P1, P2, P3, P4 or Pf): Pillow reads its header."""

    magic: str


def sniff(buf: bytes) -> bool:
    # Every Netpbm magic, so that the ones gdsio does not read get a message saying so.
    return len(buf) >= 2 and buf[0:1] == b"P" and buf[1:2] in b"1234567fF"


def parse_pnm(buf: bytes, total: int, tail: bytes = b"") -> PnmHeader | PillowPnm:
    """A P5 or P6 header by Netpbm's rules: the magic, then width, height and
    maxval as decimal numbers, each after whitespace; a comment runs from '#'
    to the end of the line and counts as whitespace (also right after maxval,
    as in libnetpbm's pm_getc); exactly one whitespace character ends the
    header. The variants Pillow decodes give a PillowPnm (Pillow reads the rest).

    Raises NeedMoreData for a header that runs past ``buf``, ValueError for
    anything else wrong, and nothing else whatever the bytes."""
    need = NeedMoreData.require
    need(buf, total, 2, "PNM header")
    magic = bytes(buf[:2])
    if magic in _PILLOW_MAGICS:
        return PillowPnm(magic.decode())
    if magic == b"P7":
        raise ValueError("PAM (P7) is not supported (nor by Pillow): PNM P1 to P6 and gray PFM (Pf) are")
    if magic == b"PF":
        raise ValueError("colour PFM (PF) is not supported (nor by Pillow): gray PFM (Pf) is")
    if magic not in (b"P5", b"P6"):
        raise ValueError(f"not a PNM image: magic {magic!r}")
    pos = 2

    def byte(i: int) -> int:
        need(buf, total, i + 1, "PNM header")
        return buf[i]

    def skip_comment(i: int) -> int:
        # From '#' to the next CR or LF, which is consumed too.
        while True:
            c = byte(i)
            i += 1
            if c in (0x0A, 0x0D):
                return i

    values = []
    for name in ("width", "height", "maxval"):
        separated = False
        while True:
            c = byte(pos)
            if c in _WS:
                pos += 1
                separated = True
            elif c == 0x23:  # '#'
                pos = skip_comment(pos)
                separated = True
            else:
                break
        if not separated:
            raise ValueError(f"PNM header: expected whitespace before the {name} at byte {pos}")
        start = pos
        while 0x30 <= byte(pos) <= 0x39:
            pos += 1
            if pos - start > 10:
                raise ValueError(f"PNM header: the {name} has more than 10 digits")
        if pos == start:
            raise ValueError(f"PNM header: the {name} is not a decimal number (found {bytes([buf[pos]])!r} at byte {pos})")
        values.append(int(bytes(buf[start:pos])))
    c = byte(pos)
    if c in _WS:
        pos += 1
    elif c == 0x23:
        pos = skip_comment(pos)
    else:
        raise ValueError(f"PNM header: the maxval must be followed by one whitespace character, found {bytes([c])!r}")
    width, height, maxval = values
    if width < 1 or height < 1:
        raise ValueError(f"PNM header: zero size {width}x{height}")
    if not 1 <= maxval <= 65535:
        raise ValueError(f"PNM header: maxval {maxval} is outside 1..65535")
    return PnmHeader(magic.decode(), width, height, maxval, pos)


def pnm_layout(h: PnmHeader) -> PixelLayout:
    """Interleaved samples, 16-bit ones big-endian; maxval kept when it is not the full range."""
    if h.maxval < 256:
        sample, dtype, full = "u8", "uint8", 255
    else:
        sample, dtype, full = "u16be", "uint16", 65535
    return interleaved_layout(h.data_offset, h.height, h.width, h.channels, sample, dtype, 0 if h.maxval == full else h.maxval)


def check(item: Item, opts: Options) -> Size | None:
    if isinstance(item.header, PillowPnm):
        return None  # Pillow reads the size when it decodes, and pillow.decode_one caps it then
    return uncompressed.check_fits(item, pnm_layout(item.header), "PNM")


def decode(items: Sequence[Item], target: Any, opts: Options) -> None:
    """P5 and P6 by gdsio's kernels (one call), the variants Pillow reads by Pillow."""
    uncompressed.decode([it for it in items if isinstance(it.header, PnmHeader)], target, opts)
    pillow.decode([it for it in items if isinstance(it.header, PillowPnm)], target, opts)


_TOKEN_COMMENT = re.compile(rb"#[^\r\n]*[\r\n]?")


def _reduced_bits(im: Any, data: bytes) -> str:
    """A plain PPM (P3) above maxval 255: Pillow keeps 8 bits of it. The
    maxval is the header's third token, read as Pillow reads tokens (a '#'
    comment, through its CR or LF, is skipped even inside one)."""
    if data[:2] != b"P3":
        return ""
    tokens = _TOKEN_COMMENT.sub(b"", data[3:4096]).split()
    try:
        deep = int(tokens[2]) > 255
    except (IndexError, ValueError):
        return ""
    return "plain PPM (P3) with maxval above 255: Pillow keeps 8 bits per channel" if deep else ""


pillow.pillow_decoder("pnm", pillow_name="PPM", reduced_bits=_reduced_bits)

FORMAT = Format(
    name="pnm", title="PNM", sniff=sniff, parse=parse_pnm, check=check, decode=decode,
    extensions=(".pnm", ".pbm", ".pgm", ".ppm", ".pfm"),
)
