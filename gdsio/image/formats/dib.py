"""DIB: BMP data without its 14-byte file header (a Windows clipboard
bitmap, ``.dib``), decoded by Pillow on the CPU (image/pillow.py: channels,
the pixel cap, the upload to a GPU) as its DibImagePlugin decodes it.

It has no magic: as Pillow's ``_dib_accept``, it is told by its first
field, the size of its info header (a little-endian u32), which is one of
the sizes BMP's info headers have.
"""

from __future__ import annotations

import struct

from ..pillow import pillow_format

__all__ = ["FORMAT"]

# BITMAPCOREHEADER, BITMAPINFOHEADER, the two Adobe ones, OS/2 2.x, V4, V5.
_INFO_HEADER_SIZES = (12, 40, 52, 56, 64, 108, 124)


def _sniff(buf: bytes) -> bool:
    return len(buf) >= 4 and struct.unpack_from("<I", buf)[0] in _INFO_HEADER_SIZES


FORMAT = pillow_format("dib", "DIB", [], pillow_name="DIB", sniff=_sniff, extensions=[".dib"])
