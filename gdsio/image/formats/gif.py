"""GIF, decoded by Pillow on the CPU (image/pillow.py: channels, the pixel
cap, the upload to a GPU). An animation gives its first frame."""

from __future__ import annotations

from ..pillow import pillow_format

__all__ = ["FORMAT"]

FORMAT = pillow_format("gif", "GIF", [b"GIF87a", b"GIF89a"], pillow_name="GIF", extensions=[".gif"])
