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

from .. import _core
from .base import device_args as _device_args
from .images import FLOAT_DTYPES

__all__ = ["normalize", "per_channel", "to_dtype"]


def to_dtype(img: torch.Tensor, dtype: torch.dtype = torch.float32, scale: bool = False) -> torch.Tensor:
    """torchvision's to_dtype for images. uint8 -> float32/float16/bfloat16 runs
    gdsio's kernel (``scale=True`` divides by 255, rounded exactly as
    torchvision's ``.to(dtype).mul_(1 / 255)``); other conversions are torch's.

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
        src = img.contiguous()
        out = torch.empty(src.shape, dtype=dtype, device=src.device)
        if src.numel():
            _core.tf_to_float(
                src.data_ptr(),
                out.data_ptr(),
                dtype=FLOAT_DTYPES[dtype],
                count=src.numel(),
                scale=scale,
                **_device_args(src.device),
            )
        return out
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
    tensor, with mean, std and each step rounded to img's dtype as torch does.

    >>> normalize(to_dtype(img, torch.float32, scale=True), [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    """
    if not isinstance(img, torch.Tensor):
        raise TypeError(f"img must be a torch.Tensor, got {type(img).__name__}")
    if img.dtype not in FLOAT_DTYPES:
        raise TypeError(f"normalize needs a float32, float16 or bfloat16 tensor, got {img.dtype} (use to_dtype first)")
    if img.ndim < 3:
        raise ValueError(f"img must be (..., C, H, W), got shape {tuple(img.shape)}")
    channels = int(img.shape[-3])
    if not 1 <= channels <= 4:
        raise ValueError(f"img has {channels} channels; 1 to 4 are supported")
    mean_l = per_channel(mean, channels, "mean")
    std_l = per_channel(std, channels, "std")
    if not all(std_l):
        raise ValueError("std: a channel's std is 0 (division by zero)")
    # torch converts mean and std to the image dtype before subtracting.
    mean_l = torch.tensor(mean_l, dtype=img.dtype).float().tolist()
    std_l = torch.tensor(std_l, dtype=img.dtype).float().tolist()
    if not all(std_l):
        raise ValueError(f"std: a channel's std evaluates to 0 in {img.dtype} (division by zero)")
    src = img if img.is_contiguous() else img.contiguous()
    out = src if inplace and src is img else torch.empty_like(src, memory_format=torch.contiguous_format)
    if src.numel():
        plane = int(img.shape[-1] * img.shape[-2])
        _core.tf_normalize(
            src.data_ptr(),
            out.data_ptr(),
            dtype=FLOAT_DTYPES[img.dtype],
            planes=src.numel() // plane,
            plane_size=plane,
            channels=channels,
            mean=mean_l,
            std=std_l,
            **_device_args(src.device),
        )
    if inplace and out is not img:
        img.copy_(out)
        return img
    return out
