"""pad of gdsio.transforms: torchvision.transforms.v2.functional.pad over
tensors of any 1, 2, 4 or 8-byte dtype (gdsio's kernel: csrc/image/pad.hpp
holds the index rule for the CUDA kernel and the CPU twin), lists of them,
and PIL images (Pillow and numpy, as torchvision does)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import torch

from .. import _core
from . import pil
from .base import check_spatial, elem_size_of, is_int, is_pil, launch_args

__all__ = ["PADDING_MODES", "pad"]


PADDING_MODES = ("constant", "edge", "reflect", "symmetric")


def _parse_padding(padding: Any) -> list[int]:
    """torchvision's padding forms -> [left, top, right, bottom]."""
    if is_int(padding):
        return [int(padding)] * 4
    if isinstance(padding, (list, tuple)):
        if not all(is_int(p) for p in padding):
            raise TypeError(f"padding must hold ints, got {padding!r}")
        p = [int(v) for v in padding]
        if len(p) == 1:
            return p * 4
        if len(p) == 2:
            return [p[0], p[1], p[0], p[1]]
        if len(p) == 4:
            return p
        raise ValueError(f"padding must be an int or a 1, 2, or 4 element tuple or list, got {len(p)} elements")
    raise TypeError(f"padding must be an int or a tuple or list of ints, got {padding!r}")


def _parse_fill(fill: Any) -> list[float]:
    if fill is None:
        return [0.0]
    if isinstance(fill, numbers.Real) and not isinstance(fill, bool):
        return [float(fill)]
    if isinstance(fill, (list, tuple)) and fill and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) for v in fill
    ):
        return [float(v) for v in fill]
    raise TypeError(f"fill must be a number or a sequence of numbers, got {fill!r}")


def _fill_bits(fills: list[float], dtype: torch.dtype) -> list[int]:
    """The fill values as the dtype's bits (torchvision converts with .to(dtype))."""
    if not dtype.is_floating_point and dtype != torch.bool and not dtype.is_complex:
        info = torch.iinfo(dtype)
        for v in fills:
            if not math.isfinite(v) or not info.min <= math.trunc(v) <= info.max:
                raise ValueError(f"fill value {v} does not fit the image dtype {dtype}")
    t = torch.tensor(fills, dtype=torch.float64).to(dtype)
    raw = t.view(torch.uint8).reshape(len(fills), -1).numpy()
    return [int.from_bytes(row.tobytes(), "little") for row in raw]


def pad(img: Any, padding: int | Sequence[int], fill: Any = None, padding_mode: str = "constant") -> Any:
    """torchvision v2's pad.

    Args:
        img: a (..., C, H, W) or (H, W) tensor of any dtype of 1, 2, 4 or 8
            bytes, a list of them (each padded), or a PIL image.
        padding: an int or [p] for every side, [left/right, top/bottom], or
            [left, top, right, bottom]; a negative value crops that side.
        fill: for "constant": a number, or one per channel (None: 0); converted
            to the image dtype as torchvision does (uint8: truncated, 0..255).
        padding_mode: "constant", "edge" (the border repeated), "reflect"
            (mirrored without the border; padding < side) or "symmetric"
            (mirrored with it; padding <= side).

    Returns:
        The padded image(s), a new tensor (or list), or a PIL image.

    Raises:
        TypeError: bad types. ValueError: a bad mode, a padding too large for
        reflect/symmetric, a crop of the whole image, a fill that does not fit.

    >>> pad(img, [4, 8]).shape[-2:]                      # 4 left and right, 8 top and bottom
    torch.Size([H + 16, W + 8])
    >>> pad(img, 16, padding_mode="reflect")
    """
    ltrb = _parse_padding(padding)
    if not isinstance(padding_mode, str) or padding_mode not in PADDING_MODES:
        raise ValueError(f"padding_mode must be one of {', '.join(PADDING_MODES)}, got {padding_mode!r}")
    fills = _parse_fill(fill)
    if len(fills) > 1 and padding_mode != "constant":
        raise ValueError(f"padding_mode {padding_mode!r} takes no per-channel fill (fill is for 'constant')")
    if is_pil(img):
        c = len(img.getbands())
        if len(fills) not in (1, c):
            raise ValueError(f"fill has {len(fills)} values for a PIL image of {c} bands")
        return pil.pad(img, ltrb, fills, padding_mode)
    if isinstance(img, (list, tuple)):
        return [pad(t, padding, fill, padding_mode) for t in img]
    check_spatial(img, "pad")
    elem_size_of(img, "pad")  # the dtypes the kernel moves (the core checks the size too)
    channels = int(img.shape[-3]) if img.ndim >= 3 else 1
    if len(fills) not in (1, channels):
        raise ValueError(f"fill has {len(fills)} values for {channels} channels")
    if len(fills) > _core.tf_max_pad_fill:
        raise ValueError(f"fill: one value per channel is taken up to {_core.tf_max_pad_fill} channels; give one value")
    left, top, right, bottom = ltrb
    h, w = int(img.shape[-2]), int(img.shape[-1])
    out_hw = []
    for name, n, before, after in (("height", h, top, bottom), ("width", w, left, right)):
        kept = n - max(-before, 0) - max(-after, 0)
        if kept < 1:
            raise ValueError(f"padding {ltrb}: the negative padding crops away the whole {name} ({n})")
        out_hw.append(max(before, 0) + kept + max(after, 0))
    # A plain contiguous tensor the core can view (DLPack takes no tensor that
    # requires grad or carries a lazy conjugate or negation).
    src = img.detach().resolve_conj().resolve_neg().contiguous()
    out = torch.empty(tuple(img.shape[:-2]) + tuple(out_hw), dtype=img.dtype, device=img.device)
    _core.tf_pad(src, out, left=left, top=top, right=right, bottom=bottom, mode=padding_mode,
                 fill=_fill_bits(fills, img.dtype), **launch_args(src.device))
    return out
