"""How a JPEG decoder upsampled chroma, measured on a probe image rather than
taken from a flag: nvjpegCreateEx may accept
NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION on a backend that then upsamples
by replication anyway, and what a backend did is what decides how close to
Pillow (libjpeg's "fancy" upsampling) its output can be."""

from __future__ import annotations

import functools
import io
from typing import Any

import numpy as np
import torch
from PIL import Image

from .. import _core
from .core_types import NVJPEG_HOST as HOST

__all__ = ["PROBE_SIZE", "decode_probe", "measure", "probe_jpeg", "upsampling_of"]

# The probe: 4:2:0, constant luma, chroma steps on chroma-block boundaries
# (so each 8x8 chroma block is flat and the samples come back exact).
# Replicated chroma gives identical pixels in every 2x2 block; interpolated
# chroma blends across the steps, so the blocks beside them differ inside.
PROBE_SIZE = 32


@functools.lru_cache(maxsize=None)
def probe_jpeg() -> bytes:
    """The probe image: a 32x32 baseline JPEG, 4:2:0, quality 100."""

    n = PROBE_SIZE
    ycc = np.empty((n, n, 3), np.uint8)
    ycc[..., 0] = 128
    ycc[..., 1] = np.where(np.arange(n)[None, :] < n // 2, 80, 176)  # Cb: a step across
    ycc[..., 2] = np.where(np.arange(n)[:, None] < n // 2, 100, 156)  # Cr: a step down
    buf = io.BytesIO()
    Image.fromarray(ycc, "YCbCr").save(buf, format="JPEG", quality=100, subsampling=2)
    return buf.getvalue()


def upsampling_of(rgb: Any) -> str:
    """``"interpolated"`` or ``"nearest"``: how the chroma of the probe image
    was upsampled in `rgb`, its decoded uint8 (3, 32, 32) array or tensor.

    >>> upsampling_of(gdsio.image.decode(probe_jpeg()))  # Pillow: libjpeg's fancy upsampling
    'interpolated'
    """
    a = np.asarray(rgb.cpu() if hasattr(rgb, "cpu") else rgb)
    if a.shape != (3, PROBE_SIZE, PROBE_SIZE):
        raise ValueError(f"rgb: expected the probe's (3, {PROBE_SIZE}, {PROBE_SIZE}) pixels, got shape {a.shape}")
    blocks = a.reshape(3, PROBE_SIZE // 2, 2, PROBE_SIZE // 2, 2).astype(np.int16)
    spread = blocks.max(axis=(2, 4)) - blocks.min(axis=(2, 4))
    return "interpolated" if spread.any() else "nearest"


def decode_probe(device: int, backend: str) -> Any:
    """The probe image decoded by nvJPEG `backend` on cuda:`device`: a uint8
    (3, 32, 32) CUDA tensor. Raises what nvjpeg_decode_batch raises."""
    data = torch.frombuffer(bytearray(probe_jpeg()), dtype=torch.uint8)
    dev = torch.device("cuda", device)
    bits = data if backend == HOST else data.to(dev)
    out = torch.empty((3, PROBE_SIZE, PROBE_SIZE), dtype=torch.uint8, device=dev)
    stream = torch.cuda.current_stream(dev).cuda_stream
    _core.nvjpeg_decode_batch(device, backend, "rgb", [(bits, out)], stream)
    torch.cuda.synchronize(dev)  # `bits` (and the host bitstream) live until the decode is done
    return out


def measure(device: int, backend: str) -> bool | None:
    """Whether nvJPEG `backend` upsamples chroma by interpolation on
    cuda:`device`, from its decode of the probe; None when the probe could
    not be decoded (the error is nvJPEG's to report on real images)."""
    try:
        return upsampling_of(decode_probe(device, backend)) == "interpolated"
    except (ValueError, RuntimeError):
        return None
