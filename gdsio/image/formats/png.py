"""PNG, decoded by Pillow on the CPU (image/pillow.py: channels, the pixel
cap, the upload to a GPU)."""

from __future__ import annotations

from typing import Any

from ..pillow import DEEP_COLOUR_MODES, pillow_format

__all__ = ["FORMAT"]


def _reduced_bits(im: Any, data: bytes) -> str:
    # IHDR's bit depth (byte 24): Pillow opens 16-bit colour PNG as 8-bit RGB(A).
    if im.mode in DEEP_COLOUR_MODES and len(data) > 24 and data[24] == 16:
        return "16-bit colour PNG: Pillow keeps 8 bits per channel"
    return ""


FORMAT = pillow_format("png", "PNG", [b"\x89PNG\r\n\x1a\n"], pillow_name="PNG", reduced_bits=_reduced_bits,
                        extensions=[".png"])
