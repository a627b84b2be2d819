"""TIFF (and BigTIFF), decoded by Pillow on the CPU (image/pillow.py:
channels, the pixel cap, the upload to a GPU). A multi-page file gives its
first page; 32-bit float samples give float32."""

from __future__ import annotations

from typing import Any

from ..pillow import DEEP_COLOUR_MODES, pillow_format

__all__ = ["FORMAT"]

_BITS_PER_SAMPLE = 258  # the TIFF tag


def _reduced_bits(im: Any, data: bytes) -> str:
    if im.mode not in DEEP_COLOUR_MODES:
        return ""
    bits = getattr(im, "tag_v2", {}).get(_BITS_PER_SAMPLE)
    if any(b > 8 for b in (bits if isinstance(bits, tuple) else (bits or 8,))):
        return "16-bit colour TIFF: Pillow keeps 8 bits per channel"
    return ""


FORMAT = pillow_format(
    "tiff", "TIFF", [b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"], pillow_name="TIFF", reduced_bits=_reduced_bits,
    extensions=[".tif", ".tiff"],
)
