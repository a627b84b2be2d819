"""JPEG on the CPU: libjpeg-turbo, decoded straight into the output tensor's
memory with the GIL released. Two ways to it, the first the build has:

* linked into gdsio._core (``libjpeg-turbo``; csrc/image/jpeg_turbo.hpp),
  when the build found libjpeg-turbo's headers (``GDSIO_LIBJPEG``): a batch in
  one C++ call over the engine's threads, and boxes of images (what a crop
  keeps: ``decode_box``, the Loader's crop decode, ``libjpeg-turbo-box``);
* through simplejpeg (``simplejpeg``), a dependency whose wheels bundle
  libjpeg-turbo 3 with its SIMD for every platform, so ``pip install .``
  needs nothing but a compiler.

The output is what torchvision's CPU decoder returns: a (C, H, W) view of
interleaved (H, W, C) memory (strides (1, 3W, 3)); gdsio's CPU resize reads
that layout as it is, with no copy. The pixels equal Pillow's (libjpeg-turbo,
ISLOW IDCT, fancy upsampling; simplejpeg is called with
``fastdct=False, fastupsample=False``).

These are the first of formats/jpeg.py's HOST_DECODERS. What they do not take
goes to Pillow, and ``DecodeInfo.reason`` says why: 12-bit, lossless or arithmetic-coded files, CMYK / YCCK / RGB-coded
JPEGs, unusual chroma subsampling, data without an EOI marker, and any file
libjpeg-turbo warns about (strict mode, both ways), so that Pillow's own
rules decide what a damaged file gives.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Sequence

import numpy as np
import torch

from .. import _core
from ..io.buffers import host_empty
from .core_types import pixel_job
from .jpeg_header import JpegHeader
from .layout import interleaved_layout

__all__ = ["BACKEND", "BOX_BACKEND", "NATIVE_BACKEND", "available", "box_available", "decode", "decode_box",
           "decode_many", "decode_many_native", "header_refusal", "luma", "native_refusal", "refusal"]

BACKEND = "simplejpeg"
# Whole images through the same linked libjpeg-turbo, a batch in one call
# over the engine's threads (the GIL released once, no Python per image).
NATIVE_BACKEND = "libjpeg-turbo"
# A box of the image only (a crop's), through libjpeg-turbo's libjpeg API
# linked into gdsio._core when the build found it (csrc/image/jpeg_turbo.hpp).
BOX_BACKEND = "libjpeg-turbo-box"

# Outputs of libjpeg-turbo's batch decode from this size on come from the host
# pool (io/buffers.py host_empty): a decoded photo freed by its consumer is
# reused by the next one of about its size, its pages already faulted in. A
# fresh 2 MB output (1000x700 RGB) costs ~1.2 ms of page faults on the CPU
# machine class, 40% of its decode; malloc gives buffers this large back to
# the kernel when freed. Smaller ones come from malloc's heap, which reuses them.
POOLED_OUTPUT_MIN = 1 << 20

_SUBSAMPLINGS = ("gray", "444", "422", "420", "440", "411")


def _module() -> Any:
    try:
        import simplejpeg
    except ImportError:
        return None
    return simplejpeg


def available() -> bool:
    """Whether simplejpeg (a dependency of gdsio) can be imported."""
    return _module() is not None


def refusal(h: JpegHeader, mode: str) -> str | None:
    """Why the simplejpeg path leaves the image to Pillow, or None when it takes it."""
    if _module() is None:
        return "simplejpeg is not installed (a dependency of gdsio: pip install simplejpeg)"
    return header_refusal(h)


def native_refusal(h: JpegHeader, mode: str) -> str | None:
    """Why the linked libjpeg-turbo path leaves the image to the next decoder, or None."""
    if not box_available():
        return f"this build has no libjpeg-turbo ({_core.jpeg_cpu_version()})"
    return header_refusal(h)


def header_refusal(h: JpegHeader) -> str | None:
    """Why libjpeg-turbo's paths leave an image with this header to the next decoder, or None."""
    if h.coding not in ("baseline", "extended", "progressive"):
        return f"{h.coding} JPEG"
    if h.precision != 8:
        return f"{h.precision}-bit JPEG"
    if h.color not in ("gray", "ycbcr"):
        return f"{h.color.upper()}-coded JPEG"
    if h.subsampling not in _SUBSAMPLINGS:
        return "unusual chroma subsampling"
    if not h.has_eoi:
        return "no EOI marker at the end of the data (truncated, or trailing bytes)"
    return None


def _colorspace(h: JpegHeader, mode: str) -> tuple[str, int]:
    """(simplejpeg colorspace, output channels) for an image this path takes.
    GRAY of a colour JPEG decodes RGB: Pillow's convert("L") is a luma of the
    RGB pixels, not libjpeg's Y channel."""
    if h.components == 1 and mode != "RGB":
        return "GRAY", 1
    return "RGB", 3


def luma(rgb: Any) -> Any:
    """Pillow's convert("L") of an (H, W, 3) uint8 numpy array, as a (1, H, W)
    tensor (gdsio's CPU pixel job, the arithmetic the GPU path shares)."""
    h, w, _ = rgb.shape
    out = np.empty((1, h, w), np.uint8)  # numpy, as decode_many_native's outputs
    lay = interleaved_layout(0, h, w, 3, "u8", "uint8")
    _core.img_decode_pixels_cpu([pixel_job(lay, rgb, out, "luma")], threads=1)
    return torch.from_numpy(out)


def decode(data: Any, h: JpegHeader, mode: str) -> Any:
    """One image: `data` a 1-D uint8 CPU tensor; returns a uint8 (C, H, W) view
    of (H, W, C) memory. ValueError when libjpeg-turbo refuses or warns (the
    caller hands the image to Pillow)."""
    sj = _module()
    space, c = _colorspace(h, mode)
    out = torch.empty((h.height, h.width, c), dtype=torch.uint8)
    # Both views share memory with the tensors: no copy of the bitstream, and
    # libjpeg-turbo writes the pixels where they stay.
    arr = sj.decode_jpeg(data.numpy(), colorspace=space, fastdct=False, fastupsample=False, buffer=out.numpy())
    if arr.shape[:2] != (h.height, h.width):
        raise ValueError(f"libjpeg-turbo decoded {arr.shape[1]}x{arr.shape[0]}, the header says {h.width}x{h.height}")
    if mode == "GRAY" and c == 3:
        return luma(arr)
    return out.permute(2, 0, 1)


def box_available() -> bool:
    """Whether this build decodes boxes of JPEGs (it links libjpeg-turbo:
    ``gdsio._core.jpeg_cpu_version()`` says which, or why not)."""
    return bool(_core.jpeg_cpu_available())


def decode_box(data: Any, h: JpegHeader, mode: str, box: tuple[int, int, int, int]) -> Any:
    """The box (top, left, height, width) of one image, the pixels a full
    decode() has there: a uint8 (C, height, width) view of (height, width, C)
    memory. Only the box's rows (and a margin) run through IDCT, upsampling
    and colour conversion, only its iMCU columns (and a margin) are decoded;
    rows below it are not read. ValueError when libjpeg-turbo refuses or warns."""
    got = decode_many_native([data], [h], mode, 1, [box])[0]
    if isinstance(got, ValueError):
        raise got
    return got


def decode_many(blobs: Sequence[Any], headers: Sequence[JpegHeader], mode: str, threads: int) -> list[Any]:
    """decode() over several threads (simplejpeg releases the GIL); each entry is
    a tensor or the ValueError raised for that image."""

    def one(k: int) -> Any:
        try:
            return decode(blobs[k], headers[k], mode)
        except ValueError as e:
            return e

    n = len(blobs)
    if n <= 1 or threads <= 1:
        return [one(k) for k in range(n)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(threads, n), thread_name_prefix="gdsio-jpeg") as ex:
        return list(ex.map(one, range(n)))


def decode_many_native(blobs: Sequence[Any], headers: Sequence[JpegHeader], mode: str, threads: int,
                       boxes: Sequence[tuple[int, int, int, int]] | None = None) -> list[Any]:
    """Images through the linked libjpeg-turbo, one C++ call for the batch:
    whole, or the box (top, left, height, width) of each when `boxes` is
    given. Each entry a uint8 (C, H, W) view of (H, W, C) memory, or the
    ValueError libjpeg-turbo raised (or warned: strict) for that image, a size
    other than its header's included."""
    outs, jobs = [], []
    for k, (data, h) in enumerate(zip(blobs, headers)):
        top, left, bh, bw = (int(v) for v in boxes[k]) if boxes is not None else (0, 0, h.height, h.width)
        out = _native_output(bh, bw, _colorspace(h, mode)[1])
        outs.append(out)
        jobs.append((data.numpy(), top, left, out, h.height, h.width))
    errors = _core.jpeg_cpu_decode_many(jobs, threads=max(1, threads), strict=True) if jobs else []
    return [ValueError(err) if err else _native_image(out, mode) for out, err in zip(outs, errors)]


def _native_output(bh: int, bw: int, c: int) -> Any:
    """The (bh, bw, c) uint8 numpy array libjpeg-turbo writes whole (never zeroed first)."""
    # numpy arrays, here and to the core: np.empty, .numpy() and the core's view of a numpy array
    # retire fewer instructions than host_empty, .view() and a tensor's view (4% of a small JPEG's decode).
    if bh * bw * c >= POOLED_OUTPUT_MIN:
        return host_empty(bh * bw * c, pool_from=POOLED_OUTPUT_MIN).numpy().reshape(bh, bw, c)
    return np.empty((bh, bw, c), np.uint8)  # malloc's heap, as torch.empty's


def _native_image(out: Any, mode: str) -> Any:
    """The (C, H, W) tensor of a decoded (H, W, C) array: a view, or the luma for GRAY of RGB."""
    if mode == "GRAY" and out.shape[2] == 3:
        return luma(out)
    return torch.from_numpy(out.transpose(2, 0, 1))
