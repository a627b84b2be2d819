"""WebP, decoded by Pillow on the CPU (image/pillow.py: channels, the pixel
cap, the upload to a GPU). An animation gives its first frame."""

from __future__ import annotations

from ..pillow import load_pillow, pillow_format

__all__ = ["FORMAT"]


def _sniff(buf: bytes) -> bool:
    return buf[:4] == b"RIFF" and buf[8:12] == b"WEBP"


def _missing() -> str | None:
    load_pillow()  # BackendUnavailable first when there is no Pillow at all
    from PIL import features

    if not features.check_module("webp"):
        return "this Pillow was built without WebP support: pip install --force-reinstall pillow"
    return None


FORMAT = pillow_format("webp", "WebP", [], pillow_name="WEBP", sniff=_sniff, missing=_missing,
                        extensions=[".webp"])
