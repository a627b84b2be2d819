"""BMP, decoded by Pillow on the CPU (image/pillow.py: channels, the pixel
cap, the upload to a GPU)."""

from __future__ import annotations

from ..pillow import pillow_format

__all__ = ["FORMAT"]

FORMAT = pillow_format("bmp", "BMP", [b"BM"], pillow_name="BMP", extensions=[".bmp"])
