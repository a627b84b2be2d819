"""PNG, GIF, BMP, TIFF and WebP: decoded by Pillow on the CPU.

These are the formats torchvision's ImageFolder opens besides JPEG and PNM
(``torchvision.datasets.folder.IMG_EXTENSIONS``, and GIF). gdsio has no GPU
decoder for them: the file is read into host memory, Pillow decodes it
there, and for a GPU destination the pixels are uploaded (one pinned copy
per batch, queued on the current stream). ``DecodeInfo.backend`` is
``"pillow"`` and ``DecodeInfo.reason`` says why no GPU decoder ran.

The format is told from the magic bytes (``headers.sniff``), not from the
file name, and Pillow is held to that format. The pixel cap
(``max_pixels`` / ``gdsio.image.MAX_IMAGE_PIXELS``) is checked on the size
Pillow reads from the header, before any pixel is decoded; Pillow's own
decompression-bomb check (``PIL.Image.MAX_IMAGE_PIXELS``: a warning above it,
a refusal, as ValueError, above twice it) runs first, as it does for JPEGs
Pillow decodes. Animated GIF and
WebP and multi-page TIFF give their first frame, as Pillow's ``Image.open``
(and so ImageFolder) does.

Channels follow torchvision's ``decode_image``:

* ``UNCHANGED``: gray 1 channel, gray + alpha 2, RGB 3, RGBA 4 (CMYK 4);
  palette images are expanded to RGB, or RGBA when they have transparency;
  1-bit images become 0/255 gray. 16-bit gray gives uint16 (as read_image
  keeps 16-bit PNG); 32-bit float TIFF gives float32.
* ``RGB``: alpha dropped, gray replicated, palette expanded.
* ``GRAY``: gdsio's rule for every format, Pillow's ``convert("L")`` luma
  of the RGB image (alpha dropped).

Pillow keeps 8 bits of a 16-bit colour PNG or TIFF (torchvision keeps 16
for PNG); ``DecodeInfo.reason`` says so when it happens.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
from typing import Any, Iterator, Sequence

__all__ = ["FORMATS", "KINDS", "PILLOW", "decode", "decode_many", "load_pillow", "to_chw"]

PILLOW = "pillow"
# gdsio's format name (headers.sniff) -> Pillow's.
FORMATS = {"png": "PNG", "gif": "GIF", "bmp": "BMP", "tiff": "TIFF", "webp": "WEBP"}
KINDS = tuple(FORMATS)

_SIXTEEN = ("I;16", "I;16L", "I;16B", "I;16N")
# UNCHANGED: the Pillow modes kept as they are, and what the others become.
_KEPT = ("L", "LA", "RGB", "RGBA", "CMYK")
_UNCHANGED_AS = {"1": "L", "La": "LA", "PA": "RGBA", "RGBa": "RGBA", "RGBX": "RGB"}


def load_pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:
        from ..errors import BackendUnavailable

        raise BackendUnavailable(
            "Pillow is needed to decode PNG, GIF, BMP, TIFF, WebP (and JPEG on the CPU) and is not installed "
            "(it is a dependency of gdsio): pip install pillow"
        ) from None
    return Image


def to_chw(im: Any, mode: str) -> Any:
    """A loaded Pillow image -> a CPU (C,H,W) tensor for gdsio's `mode`
    ('UNCHANGED', 'RGB' or 'GRAY'), by the rules of the module docstring.
    ValueError for pixels gdsio does not hold (32-bit integers)."""
    import numpy as np
    import torch

    m = im.mode
    if m in _SIXTEEN or (m == "I" and im.format == "PNG"):  # Pillow < 10 opens 16-bit gray PNG as mode I
        arr = np.asarray(im).astype(np.uint16)
    elif m == "F":
        arr = np.array(im, dtype=np.float32)
    elif m == "I":
        raise ValueError("32-bit integer pixels (Pillow mode I) are not supported: gdsio images are uint8, uint16 or float32")
    else:
        if m in ("P", "PA"):
            # Palette expanded first: RGBA where there is transparency, so the
            # conversions below drop alpha the way they do for RGBA images.
            im = im.convert("RGBA" if m == "PA" or "transparency" in im.info else "RGB")
            m = im.mode
        if mode == "UNCHANGED":
            if m not in _KEPT:
                im = im.convert(_UNCHANGED_AS.get(m, "RGB"))
        elif mode == "RGB":
            if m != "RGB":
                im = im.convert("RGB")
        elif m not in ("L", "1", "LA", "La"):  # GRAY: the luma of the RGB image, as for JPEG
            im = (im if m == "RGB" else im.convert("RGB")).convert("L")
        elif m != "L":
            im = im.convert("L")
        arr = np.array(im, dtype=np.uint8)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if mode == "RGB" and arr.shape[2] == 1:  # 16-bit and float gray: replicated, as gdsio's PNM path does
        arr = np.repeat(arr, 3, axis=2)
    return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))


def _reduced_bits(im: Any, kind: str, data: bytes) -> str:
    """Why the pixels hold fewer bits than the file ('' when they don't)."""
    if im.mode not in ("RGB", "RGBA", "LA"):
        return ""
    deep = False
    if kind == "png":
        deep = len(data) > 24 and data[24] == 16  # IHDR bit depth
    elif kind == "tiff":
        bits = getattr(im, "tag_v2", {}).get(258)
        deep = any(b > 8 for b in (bits if isinstance(bits, tuple) else (bits or 8,)))
    return f"16-bit colour {kind.upper()}: Pillow keeps 8 bits per channel" if deep else ""


def _orientation(im: Any) -> int:
    try:
        v = im.getexif().get(0x0112, 1)
    except Exception:  # a corrupt EXIF block only loses the orientation
        return 1
    return v if isinstance(v, int) and 1 <= v <= 8 else 1


def decode(data: bytes, kind: str, mode: str, max_pixels: int) -> tuple[Any, int, str]:
    """One image of format `kind` (a key of FORMATS) -> (CPU (C,H,W) tensor,
    EXIF orientation 1..8, note). The size Pillow reads from the header is
    checked against `max_pixels` before the pixels are decoded. ValueError
    says what is wrong (corrupt, truncated, too large); BackendUnavailable
    when Pillow is missing or was built without this format."""
    Image = load_pillow()
    fmt = FORMATS[kind]
    if kind == "webp":
        from PIL import features

        if not features.check_module("webp"):
            from ..errors import BackendUnavailable

            raise BackendUnavailable("this Pillow was built without WebP support: pip install --force-reinstall pillow")
    with _pillow_errors(Image, fmt, "read this {fmt} image's header"):
        f = Image.open(io.BytesIO(data), formats=[fmt])
    with f:
        w, h = f.size
        if w * h > max_pixels:
            raise ValueError(
                f"{w}x{h} = {w * h} pixels is more than the cap of {max_pixels} "
                "(max_pixels=, or gdsio.image.MAX_IMAGE_PIXELS)"
            )
        with _pillow_errors(Image, fmt, "decode this {fmt} image"):
            f.load()
        return to_chw(f, mode), _orientation(f), _reduced_bits(f, kind, data)


@contextlib.contextmanager
def _pillow_errors(Image: Any, fmt: str, doing: str) -> Iterator[None]:
    """Whatever corrupt or truncated data makes Pillow raise (OSError,
    SyntaxError, EOFError, ValueError...) as one ValueError saying so."""
    what = doing.format(fmt=fmt)
    try:
        yield
    except Image.DecompressionBombError as e:
        raise ValueError(f"Pillow refused it as a decompression bomb: {e}") from None
    except Image.UnidentifiedImageError:  # its message holds only the BytesIO's repr
        raise ValueError(f"Pillow cannot {what} (corrupt or truncated)") from None
    except Exception as e:
        raise ValueError(f"Pillow cannot {what}: {str(e) or type(e).__name__}") from None


def decode_many(blobs: Sequence[bytes], kinds: Sequence[str], mode: str, max_pixels: int, threads: int) -> list[Any]:
    """decode() over several threads (Pillow releases the GIL while it
    decodes); each entry is decode()'s tuple or the ValueError for that image."""

    def one(args: tuple[bytes, str]) -> Any:
        try:
            return decode(args[0], args[1], mode, max_pixels)
        except ValueError as e:
            return e

    work = list(zip(blobs, kinds))
    if len(work) <= 1 or threads <= 1:
        return [one(a) for a in work]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(threads, len(work)), thread_name_prefix="gdsio-pillow") as ex:
        return list(ex.map(one, work))
