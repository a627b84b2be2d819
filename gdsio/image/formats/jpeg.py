"""JPEG: its header (parsed by image/jpeg_header.py), and where each image is decoded.

On a GPU target nvJPEG decodes what it can (image/nvjpeg.py: the hardware
engines, then the GPU hybrid backend, then nvJPEG's host backend); what it
cannot take, and every JPEG for a CPU target, goes to the host decoders
below, and is uploaded for a GPU. ``DecodeInfo.backend`` names the decoder
that ran and ``DecodeInfo.reason`` why a faster one did not.
"""

from __future__ import annotations

import dataclasses
import io
from typing import Any, Callable, Sequence

import torch

from ... import _core
from ...config import current as current_settings
from ...io.buffers import HUGE_PAGES_MIN
from .. import jpeg_cpu, nvjpeg, transfer
from ..codec import MAX_HEADER_BYTES, Format, Item, Options, Size
from ..jpeg_header import JpegHeader, parse_jpeg
from ..pillow import PILLOW, load_pillow, map_threads, to_chw

__all__ = ["FORMAT", "HOST_DECODERS", "HostDecoder", "JpegHeader", "decode_on_host", "decode_one", "parse_jpeg"]

def sniff(buf: bytes) -> bool:
    return buf[:2] == b"\xff\xd8"


def check(item: Item, opts: Options) -> Size:
    h: JpegHeader = item.header
    if h.components not in (1, 3, 4):
        raise ValueError(f"a JPEG of {h.components} components is not supported (1, 3 or 4)")
    item.orientation = h.orientation
    return Size(h.height, h.width, h.components)


def decode(items: Sequence[Item], target: Any, opts: Options) -> None:
    """nvJPEG first on a GPU target; the host decoders for the rest, and for a CPU target."""
    if target.type == "cuda":
        items = nvjpeg.decode(items, target, opts)  # what nvJPEG leaves, each saying why
    decode_on_host(items, target, opts)


# --------------------------------------------------------------------------- on the host


@dataclasses.dataclass(frozen=True)
class HostDecoder:
    """A JPEG decoder on the CPU: its DecodeInfo.backend name, why it leaves
    an image to the next decoder (None: it takes it), and a batch decode
    returning per image a CPU (C,H,W) uint8 tensor or the ValueError raised."""

    name: str
    refusal: Callable[[JpegHeader, str], str | None]  # (header, mode)
    decode_many: Callable[[Sequence[Any], Sequence[JpegHeader], str, int], list[Any]]  # (CPU data, headers, mode, threads)


def _pillow_decode(data: Any, mode: str) -> Any:
    """A CPU uint8 (C,H,W) tensor decoded by Pillow (libjpeg-turbo): UNCHANGED
    keeps L, RGB or CMYK; RGB converts; GRAY is the luma of the RGB image, as
    convert("L") (image/pillow.py's to_chw, the rules of every Pillow-decoded
    format). ValueError when Pillow cannot decode it; BackendUnavailable
    when Pillow is not installed (whatever on_error says)."""
    Image = load_pillow()
    try:
        with Image.open(io.BytesIO(data.numpy().tobytes()), formats=["JPEG"]) as f:
            f.load()
            return to_chw(f, mode)
    except Image.DecompressionBombError as e:
        raise ValueError(f"Pillow refused it as a decompression bomb: {e}") from None
    except Exception as e:  # OSError, SyntaxError... or whatever a corrupt marker makes Pillow raise
        raise ValueError(f"Pillow cannot decode it: {str(e) or type(e).__name__}") from None


def _pillow_many(datas: Sequence[Any], headers: Sequence[JpegHeader], mode: str, threads: int) -> list[Any]:
    return map_threads(lambda d: _pillow_decode(d, mode), list(datas), threads, "gdsio-jpeg")


PILLOW_JPEG = HostDecoder(PILLOW, lambda h, mode: None, _pillow_many)
# libjpeg-turbo through simplejpeg, decoded into the output tensor with the GIL
# released (image/jpeg_cpu.py): the same pixels as Pillow, about twice as fast.
SIMPLEJPEG_JPEG = HostDecoder(jpeg_cpu.BACKEND, jpeg_cpu.refusal, jpeg_cpu.decode_many)
# libjpeg-turbo linked into the extension (builds that found jpeglib.h): the
# same pixels, a batch in one C++ call over the engine's threads.
LIBJPEG_TURBO_JPEG = HostDecoder(jpeg_cpu.NATIVE_BACKEND, jpeg_cpu.native_refusal, jpeg_cpu.decode_many_native)

# The CPU decoders, tried in order: each takes what it can of what the ones
# before it left. The last takes every image (Pillow decodes every JPEG that
# libjpeg can); a faster decoder for the common cases goes before it.
# libjpeg-turbo linked in is a property of the build: a build without it
# leaves it out (no reason to give for every image).
HOST_DECODERS: tuple[HostDecoder, ...] = (
    ((LIBJPEG_TURBO_JPEG,) if jpeg_cpu.box_available() else ()) + (SIMPLEJPEG_JPEG, PILLOW_JPEG))


def decode_on_host(items: Sequence[Item], target: Any, opts: Options) -> None:
    """The host decoders, in order, over `items`; the images uploaded to `target`
    (one pinned copy per decoder) when it is a GPU. An image the last decoder
    cannot decode fails, its message adding why the others did not take it."""
    left = list(items)
    for k, dec in enumerate(HOST_DECODERS):
        last = k == len(HOST_DECODERS) - 1
        take, passed = [], []
        for it in left:
            why = dec.refusal(it.header, opts.mode)
            if why and not last:
                it.note(f"{dec.name}: {why}")
                passed.append(it)
            else:
                take.append(it)
        if not take:
            left = passed
            continue
        results = dec.decode_many([it.data.cpu() for it in take], [it.header for it in take], opts.mode, opts.threads)
        done = []
        for it, r in zip(take, results):
            if not isinstance(r, ValueError):
                it.result, it.backend = r, dec.name
                done.append(it)
            elif last:
                it.fail(str(r) + (f" (after: {it.reason})" if it.reason else ""))
            else:
                it.note(f"{dec.name}: {r}")
                passed.append(it)
        for it, r in zip(done, transfer.upload([it.result for it in done], target)):
            it.result = r
        left = passed


_NATIVE_FIRST = HOST_DECODERS[0] is LIBJPEG_TURBO_JPEG
_POOLED_MIN = jpeg_cpu.POOLED_OUTPUT_MIN


def decode_one(data: Any, mode: str, max_pixels: int | None) -> Any:
    """The common case of gdsio.image.decode in one core call: one JPEG in a
    1-D uint8 CPU tensor, decoded on the CPU by the linked libjpeg-turbo with
    on_error="raise", no EXIF orientation and no info (the caller has checked
    those arguments; `mode` is one of the three names). The core reads the
    header with libjpeg-turbo, applies the batch steps' rules to it (the
    markers parse_jpeg refuses, no EOI, jpeg_cpu.header_refusal, the pixel
    rule) and allocates the output: the same image the batch steps give
    (image/batch.py: header, checks, HOST_DECODERS[0]), or None for anything
    else (another format, a bad header, an image past the pixel rule or one
    libjpeg-turbo refuses or warns about): the caller then takes the batch
    steps, which raise, warn or hand it to the next decoder as they always do."""
    if not _NATIVE_FIRST:
        return None
    s = current_settings()
    arr = _core.jpeg_cpu_decode_image(data, mode == "RGB", s.max_image_pixels if max_pixels is None else max_pixels,
                                      MAX_HEADER_BYTES, _POOLED_MIN, HUGE_PAGES_MIN if s.huge_pages else 0)
    if arr is None:
        return None
    if mode == "GRAY" and arr.shape[0] == 3:  # Pillow's luma of the RGB pixels
        return jpeg_cpu.luma(arr.transpose(1, 2, 0))
    return torch.from_numpy(arr)


FORMAT = Format(
    name="jpeg", title="JPEG", sniff=sniff, parse=parse_jpeg, check=check, decode=decode,
    extensions=(".jpg", ".jpeg", ".jpe", ".jfif"),
)
