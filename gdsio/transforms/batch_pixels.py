"""The batch transforms that change pixel values: ColorJitter (drawn per
sample), ToDtype and Normalize.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from . import functional as F
from .base import is_pil
from .batch_base import BatchTransform, count_images, each, info_for, uniforms

__all__ = ["ColorJitter", "Normalize", "ToDtype"]


def _jitter_range(value: Any, name: str, center: float = 1.0, bound: tuple[float, float] = (0.0, math.inf),
                  clip_first_on_zero: bool = True) -> tuple[float, float] | None:
    """torchvision's ColorJitter._check_input: None, a number v -> [center - v,
    center + v] (clipped at 0), or a (min, max) pair inside `bound`; None when
    the range is the identity."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"If {name} is a single number, it must be non negative.")
        lo, hi = center - float(value), center + float(value)
        if clip_first_on_zero:
            lo = max(lo, 0.0)
    elif isinstance(value, (list, tuple)) and len(value) == 2:
        lo, hi = float(value[0]), float(value[1])
    else:
        raise TypeError(f"{name}={value} should be a single number or a sequence with length 2.")
    if not bound[0] <= lo <= hi <= bound[1]:
        raise ValueError(f"{name} values should be between {bound} and increasing, but got {[lo, hi]}.")
    return None if lo == hi == center else (lo, hi)


class ColorJitter(BatchTransform):
    """torchvision's ColorJitter, drawn per sample: a brightness, contrast and
    saturation factor uniform in ``[max(0, 1 - v), 1 + v]`` (or the given
    ``(min, max)``), a hue factor uniform in ``[-v, v]`` (``v <= 0.5``), and a
    random order of the four ops, all from (seed, epoch, sample index). The
    whole batch runs in one pass (``gdsio.transforms.color_jitter``); uint8,
    float32, float16 and bfloat16 images with 1 or 3 channels.

    >>> train = Compose([RandomResizedCrop(224), ColorJitter(0.4, 0.4, 0.4, 0.1), RandomHorizontalFlip(),
    ...                  ToDtype(torch.float32, scale=True), Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    """

    def __init__(self, brightness: Any = None, contrast: Any = None, saturation: Any = None, hue: Any = None) -> None:
        self.brightness = _jitter_range(brightness, "brightness")
        self.contrast = _jitter_range(contrast, "contrast")
        self.saturation = _jitter_range(saturation, "saturation")
        self.hue = _jitter_range(hue, "hue", center=0.0, bound=(-0.5, 0.5), clip_first_on_zero=False)

    def params(self, n: int, salt: int) -> tuple[list[np.ndarray | None], np.ndarray]:
        """Per sample: the four factors (None for an op not jittered) and the
        order, an (n, 4) array of permutations of (brightness, contrast,
        saturation, hue) as torchvision's ``fn_idx``."""
        u = uniforms(info_for(n), salt, 8)
        ranges = (self.brightness, self.contrast, self.saturation, self.hue)
        factors = [None if r is None else r[0] + (r[1] - r[0]) * u[:, k] for k, r in enumerate(ranges)]
        return factors, np.argsort(u[:, 4:8], axis=1)

    def _apply(self, images: Any, salt: int) -> Any:
        if all(r is None for r in (self.brightness, self.contrast, self.saturation, self.hue)):
            return images
        if not is_pil(images) and not isinstance(images, (list, tuple)) and images.dim() > 4:
            raise ValueError(f"ColorJitter takes (C, H, W), (N, C, H, W) or a list, got shape {tuple(images.shape)}")
        n = 1 if is_pil(images) else count_images(images)
        factors, order = self.params(n, salt)
        return F.color_jitter(images, *factors, order=order)


class ToDtype(BatchTransform):
    """Cast to ``dtype``; with ``scale=True`` integer pixel values are mapped
    to [0, 1] for float dtypes (torchvision's ToDtype, whose default is scale=False)."""

    def __init__(self, dtype: Any, scale: bool = False) -> None:
        self.dtype = dtype
        self.scale = bool(scale)

    def _apply(self, images: Any, salt: int) -> Any:
        return each(images, lambda t: F.to_dtype(t, self.dtype, scale=self.scale))


class Normalize(BatchTransform):
    """``(x - mean) / std`` per channel, on float images (put ``ToDtype``
    before it, as with torchvision)."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        if len(self.mean) != len(self.std) or any(s == 0 for s in self.std):
            raise ValueError(f"mean and std need one value per channel and std no zero; got {mean}, {std}")

    def _apply(self, images: Any, salt: int) -> Any:
        def one(t: Any) -> Any:
            if not t.dtype.is_floating_point:
                raise TypeError(f"Normalize needs float images, got {t.dtype}; put ToDtype(torch.float32, scale=True) before it")
            return F.normalize(t, list(self.mean), list(self.std))

        return each(images, one)
