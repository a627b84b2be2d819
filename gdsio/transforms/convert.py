"""to_dtype and normalize of gdsio.transforms (torchvision's): the
per-element conversions of pixel values.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .images import FLOAT_DTYPES

__all__ = ["normalize", "per_channel", "to_dtype"]


def to_dtype(img: torch.Tensor, dtype: torch.dtype = torch.float32, scale: bool = False) -> torch.Tensor:
    """torchvision's to_dtype for images, with torch's ops as torchvision
    calls them: uint8 -> float32/float16/bfloat16 is ``.to(dtype)``, then
    ``.mul_(1 / 255)`` when ``scale``, into a new contiguous tensor.

    >>> to_dtype(img, torch.float16, scale=True).dtype
    torch.float16
    """
    if not isinstance(img, torch.Tensor):
        raise TypeError(f"img must be a torch.Tensor, got {type(img).__name__}")
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
    if not isinstance(scale, bool):
        raise TypeError(f"scale must be a bool, got {type(scale).__name__}")
    if img.dtype == dtype:
        return img
    if img.dtype == torch.uint8 and dtype in FLOAT_DTYPES:
        out = img.to(dtype, memory_format=torch.contiguous_format)
        return out.mul_(1.0 / 255) if scale else out
    if img.dtype in FLOAT_DTYPES and dtype in FLOAT_DTYPES:
        return img.to(dtype)
    if img.dtype in FLOAT_DTYPES and dtype == torch.uint8:
        # torchvision: scale by 255 + 1 - eps so that 1.0 maps to 255, not 256.
        return (img.mul(255 + 1.0 - 1e-3) if scale else img).to(torch.uint8)
    raise TypeError(f"to_dtype converts between uint8, float32, float16 and bfloat16; got {img.dtype} -> {dtype}")


def per_channel(values: Any, channels: int, name: str) -> list[float]:
    if isinstance(values, torch.Tensor):
        values = values.tolist()
    if isinstance(values, numbers.Real) and not isinstance(values, bool):
        values = [float(values)] * channels
    elif isinstance(values, (list, tuple, np.ndarray)):
        values = [float(v) for v in values]
        if len(values) == 1:
            values = values * channels
    else:
        raise TypeError(f"{name} must be a number or a sequence of {channels} numbers, got {values!r}")
    if len(values) != channels:
        raise ValueError(f"{name} has {len(values)} values for {channels} channels")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{name} must be finite, got {values}")
    return values


def normalize(img: torch.Tensor, mean: Sequence[float], std: Sequence[float], inplace: bool = False) -> torch.Tensor:
    """torchvision's normalize: (img - mean[c]) / std[c] on a float (..., C, H, W)
    tensor, with mean and std in img's dtype (torch's ``sub`` then ``div_``,
    as torchvision calls them).

    Args:
        img: a float32, float16 or bfloat16 (..., C, H, W) tensor.
        mean, std: a number or one per channel.
        inplace: write into ``img`` and return it.

    Returns:
        ``img`` when ``inplace``, else a new contiguous tensor.

    >>> normalize(to_dtype(img, torch.float32, scale=True), [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    """
    if not isinstance(img, torch.Tensor):
        raise TypeError(f"img must be a torch.Tensor, got {type(img).__name__}")
    if img.dtype not in FLOAT_DTYPES:
        raise TypeError(f"normalize needs a float32, float16 or bfloat16 tensor, got {img.dtype} (use to_dtype first)")
    if img.ndim < 3:
        raise ValueError(f"img must be (..., C, H, W), got shape {tuple(img.shape)}")
    channels = int(img.shape[-3])
    mean_l = per_channel(mean, channels, "mean")
    std_l = per_channel(std, channels, "std")
    if not all(std_l):
        raise ValueError("std: a channel's std is 0 (division by zero)")
    # torch converts mean and std to the image dtype before subtracting.
    mean_t = torch.tensor(mean_l, dtype=img.dtype).view(-1, 1, 1)
    std_t = torch.tensor(std_l, dtype=img.dtype).view(-1, 1, 1)
    if not std_t.all():
        raise ValueError(f"std: a channel's std evaluates to 0 in {img.dtype} (division by zero)")
    mean_t, std_t = mean_t.to(img.device), std_t.to(img.device)
    if inplace:
        return img.sub_(mean_t).div_(std_t)
    out = torch.empty_like(img, memory_format=torch.contiguous_format)
    return torch.sub(img, mean_t, out=out).div_(std_t)
