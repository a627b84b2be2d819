"""The geometry rules the functional ops and the batch classes share, each in
one place: the size a resize produces (torchvision's rule) and the box a
RandomResizedCrop keeps (torchvision's algorithm).

Where the random numbers come from is the caller's business (a numpy
Generator in ``functional.random_resized_crop_params``; the counter-based
draws of (seed, epoch, index) in ``classes.RandomResizedCrop``); what they
become is decided here, so every path crops the same box from the same draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import is_int, size_arg

__all__ = ["CROP_TRIES", "output_size", "resized_crop_box", "resized_crop_boxes"]

CROP_TRIES = 10  # torchvision's attempts at a random area and ratio before the central crop


def output_size(h: int, w: int, size: Any, max_size: Any) -> tuple[int, int]:
    """torchvision's rule for the (height, width) a resize of an ``h`` x ``w``
    image produces.

    Args:
        h, w: the image's size.
        size: [h, w]; an int (or [int]) for the shorter side, the longer one
            scaled to keep the aspect ratio; or None (with ``max_size``).
        max_size: with an int size, the longer side's cap; with size=None, its
            length; None for neither.

    Returns:
        (height, width) of the output.

    Raises:
        TypeError: ``size`` or ``max_size`` is not an int (or sizes). ValueError:
        a size that is not positive, or ``max_size`` where it does not apply or
        is not larger than ``size``.

    >>> output_size(375, 500, 256, None)
    (256, 341)
    """
    if max_size is not None and not is_int(max_size):
        raise TypeError(f"max_size must be an int or None, got {max_size!r}")
    if size is None:
        if max_size is None:
            raise ValueError("size=None needs max_size (the length of the longer side)")
        if max_size <= 0:
            raise ValueError(f"max_size must be positive, got {max_size}")
        short, long = (w, h) if w <= h else (h, w)
        new_short, new_long = int(max_size * short / long), int(max_size)
        if new_short <= 0:
            raise ValueError(f"max_size={max_size} makes the shorter side of a {h}x{w} image 0 pixels")
        new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
        return new_h, new_w
    size = size_arg(size, "size")  # or None with max_size, above
    if len(size) == 2:
        if max_size is not None:
            raise ValueError("max_size is only allowed when size is None or a single int (the shorter side)")
        return int(size[0]), int(size[1])
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = int(size[0]), int(size[0] * long / short)
    if max_size is not None:
        if max_size <= new_short:
            raise ValueError(f"max_size = {max_size} must be an int strictly greater than the requested size {size[0]}")
        if new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), int(max_size)
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    return new_h, new_w


def resized_crop_box(
    h: int,
    w: int,
    area_fraction: Sequence[float],
    aspect: Sequence[float],
    u_top: Sequence[float],
    u_left: Sequence[float],
    ratio: tuple[float, float],
) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop box of one ``h`` x ``w`` image, from draws already made.

    The first try whose box fits (``area_fraction[a]`` of the image's area,
    width/height ``aspect[a]``, sides rounded half to even) is placed at
    ``floor(u * (room + 1))`` with ``u_top[a]`` and ``u_left[a]``; when no try
    fits, the central crop with its ratio clamped to ``ratio``.

    Plain floats on purpose: a reader thread calls this once per image (numpy
    would cost it ~50x more under the GIL), and IEEE arithmetic with a
    correctly rounded sqrt gives the same boxes as any vectorised evaluation.

    Args:
        h, w: the image's size.
        area_fraction, aspect, u_top, u_left: one float per try.
        ratio: the (min, max) aspect ratio of the central fallback.

    Returns:
        (top, left, height, width).
    """
    area = float(h * w)
    for a in range(len(area_fraction)):
        target = area * area_fraction[a]
        cw = round(math.sqrt(target * aspect[a]))
        ch = round(math.sqrt(target / aspect[a]))
        if 0 < cw <= w and 0 < ch <= h:
            return math.floor(u_top[a] * (h - ch + 1)), math.floor(u_left[a] * (w - cw + 1)), ch, cw
    in_ratio = w / h
    if in_ratio < ratio[0]:
        bh, bw = round(w / ratio[0]), w
    elif in_ratio > ratio[1]:
        bh, bw = h, round(h * ratio[1])
    else:
        bh, bw = h, w
    return (h - bh) // 2, (w - bw) // 2, bh, bw


def resized_crop_boxes(
    heights: Any,
    widths: Any,
    area_fraction: np.ndarray,
    aspect: np.ndarray,
    u_top: np.ndarray,
    u_left: np.ndarray,
    ratio: tuple[float, float],
) -> np.ndarray:
    """``resized_crop_box`` of each image of a batch.

    Args:
        heights, widths: (N,) ints.
        area_fraction, aspect, u_top, u_left: (N, tries) floats (a placement
            the same for every try broadcasts: ``np.broadcast_to(u, (N, tries))``).
        ratio: as for ``resized_crop_box``.

    Returns:
        (N, 4) int64 boxes (top, left, height, width).
    """
    fraction, asp, top, left = (np.asarray(u).tolist() for u in (area_fraction, aspect, u_top, u_left))
    hw = zip(np.asarray(heights).tolist(), np.asarray(widths).tolist())
    boxes = [resized_crop_box(h, w, fraction[i], asp[i], top[i], left[i], ratio) for i, (h, w) in enumerate(hw)]
    return np.array(boxes, np.int64).reshape(len(boxes), 4)
