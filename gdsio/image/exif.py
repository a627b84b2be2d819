"""EXIF orientation: read from an EXIF block, applied to a tensor.

A JPEG's orientation is read from its APP1 segment while its header is
parsed (formats/jpeg.py); Pillow's formats report theirs when Pillow decodes
them (image/pillow.py). ``decode(..., apply_exif_orientation=True)`` then
applies it, as torchvision's ``decode_jpeg(apply_exif_orientation=True)`` and
``PIL.ImageOps.exif_transpose`` do.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["apply_orientation", "exif_orientation"]

_ORIENTATION_TAG = 0x0112
_SHORT = 3  # the TIFF field type the tag must have


def exif_orientation(tiff: bytes) -> int:
    """The Orientation tag (0x0112) of IFD0 of an EXIF TIFF block; 1 when
    absent or unreadable (a damaged EXIF block only loses the orientation)."""
    if len(tiff) < 8:
        return 1
    if tiff[:2] == b"II":
        e = "<"
    elif tiff[:2] == b"MM":
        e = ">"
    else:
        return 1
    if struct.unpack_from(e + "H", tiff, 2)[0] != 42:
        return 1
    ifd = struct.unpack_from(e + "I", tiff, 4)[0]
    if ifd + 2 > len(tiff):
        return 1
    (n,) = struct.unpack_from(e + "H", tiff, ifd)
    for k in range(n):
        at = ifd + 2 + 12 * k
        if at + 12 > len(tiff):
            break
        tag, typ, count = struct.unpack_from(e + "HHI", tiff, at)
        if tag == _ORIENTATION_TAG:
            if typ != _SHORT or count < 1:
                return 1
            (v,) = struct.unpack_from(e + "H", tiff, at + 8)
            return v if 1 <= v <= 8 else 1
    return 1


def apply_orientation(img: Any, orientation: int) -> Any:
    """Applies EXIF orientation 1..8 to a (..., H, W) tensor.

    As torchvision's ``decode_jpeg(apply_exif_orientation=True)`` and
    ``PIL.ImageOps.exif_transpose``: 2 mirrors, 3 rotates by 180 degrees, 4
    flips vertically, 5 transposes, 6 rotates by 90 degrees clockwise, 7
    transverses, 8 rotates by 90 degrees counter-clockwise.

    Args:
        img: a tensor of at least two dimensions, (..., H, W).
        orientation: the EXIF value (``DecodeInfo.orientation``); 1 and
            anything outside 2..8 leave the image as it is.

    Returns:
        torch.Tensor: the oriented image, contiguous (``img`` itself for 1).

    Example:
        >>> img, info = gdsio.image.read("photo.jpg", return_info=True)
        >>> upright = gdsio.image.apply_orientation(img, info.orientation)
    """
    if orientation == 2:
        img = img.flip(-1)
    elif orientation == 3:
        img = img.flip((-2, -1))
    elif orientation == 4:
        img = img.flip(-2)
    elif orientation == 5:
        img = img.transpose(-1, -2)
    elif orientation == 6:
        img = img.transpose(-1, -2).flip(-1)
    elif orientation == 7:
        img = img.transpose(-1, -2).flip((-2, -1))
    elif orientation == 8:
        img = img.transpose(-1, -2).flip(-2)
    else:
        return img
    return img.contiguous()
