"""The colour ops of gdsio.transforms: torchvision.transforms.v2.functional's
adjust_brightness, adjust_contrast, adjust_saturation and adjust_hue, and
``color_jitter``, the four of them per sample in one pass (what the
ColorJitter class of gdsio.data runs).

Tensors run gdsio's kernels (csrc/image/color.hpp holds the arithmetic, once,
for the CUDA kernels and the CPU twin): uint8 results are within 1 of
torchvision's (which computes in float32, then truncates), float ones close to
it. PIL images are handled by Pillow (ImageEnhance, the HSV shift), as
torchvision does, and come back as PIL images.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .. import _core
from . import pil
from .base import is_pil, launch_args

__all__ = ["adjust_brightness", "adjust_contrast", "adjust_hue", "adjust_saturation", "color_jitter"]

_DTYPES = {torch.uint8: "uint8", torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
OPS = ("brightness", "contrast", "saturation", "hue")  # torchvision's ColorJitter fn_idx order
_CODES = dict(_core.tf_color_ops)
_PIL_OPS = {
    "brightness": pil.adjust_brightness,
    "contrast": pil.adjust_contrast,
    "saturation": pil.adjust_saturation,
    "hue": pil.adjust_hue,
}


# ---- arguments ------------------------------------------------------------------------------
def _factor(v: Any, name: str) -> float:
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        raise TypeError(f"{name} must be a number, got {type(v).__name__}")
    v = float(v)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    if name.startswith("hue"):
        if not -0.5 <= v <= 0.5:
            raise ValueError(f"{name} ({v}) is not in [-0.5, 0.5].")
    elif v < 0:
        raise ValueError(f"{name} ({v}) is not non-negative.")
    return v


def _per_sample(v: Any, n: int, name: str) -> np.ndarray | None:
    """None, one factor for every sample, or one per sample -> (n,) float64."""
    if v is None:
        return None
    if isinstance(v, torch.Tensor):
        v = v.tolist()
    if isinstance(v, (Sequence, np.ndarray)) and not isinstance(v, str):
        vals = list(v)
        if len(vals) != n:
            raise ValueError(f"{name} holds {len(vals)} factors for {n} images")
        return np.array([_factor(x, f"{name}[{i}]") for i, x in enumerate(vals)], np.float64)
    return np.full(n, _factor(v, name), np.float64)


def _order(order: Any, n: int) -> np.ndarray:
    """None (brightness, contrast, saturation, hue), one permutation of 0..3, or one per sample."""
    if order is None:
        return np.tile(np.arange(4, dtype=np.int64), (n, 1))
    if isinstance(order, torch.Tensor):
        order = order.cpu().numpy()
    arr = np.asarray(order)
    if arr.ndim == 1:
        arr = np.tile(arr, (n, 1))
    if arr.shape != (n, 4) or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"order must be a permutation of 0..3 or an ({n}, 4) array of them, got shape {arr.shape}")
    if not (np.sort(arr, axis=1) == np.arange(4)).all():
        raise ValueError("order: every row must be a permutation of 0, 1, 2, 3 (brightness, contrast, saturation, hue)")
    return arr.astype(np.int64)


# ---- the images of one call -----------------------------------------------------------------
class _Images:
    """The images of one call as the core takes them (the tensors, each with
    its output; the core views and checks both), and the results given back in
    the caller's form: a (C, H, W) or (H, W) tensor, a (..., C, H, W) batch,
    or a list."""

    def __init__(self, img: Any, what: str) -> None:
        self.what = what
        if isinstance(img, torch.Tensor):
            self.form = "tensor"
            self.shape = tuple(img.shape)
            if img.ndim < 2:
                raise ValueError(f"{what}: img must be (..., C, H, W) or (H, W), got shape {self.shape}")
            flat = img.reshape(1, 1, *img.shape) if img.ndim == 2 else img.reshape(-1, *img.shape[-3:])
            self._check(flat, "img")
            flat = flat.detach()  # a view the core can take (a tensor that requires grad has none)
            if flat.numel() and flat.stride(-1) != 1:
                flat = flat.contiguous()
            self.out = torch.empty(flat.shape, dtype=img.dtype, device=img.device)
            self.images: Any = flat
            self.outs: Any = self.out
            self.live = list(range(flat.shape[0])) if flat.shape[2] and flat.shape[3] else []
            self.dtype, self.device, self.channels = img.dtype, img.device, int(flat.shape[1])
        elif isinstance(img, (list, tuple)):
            self.form = "list"
            if not img:
                raise ValueError(f"{what}: img is an empty list")
            items = []
            for i, t in enumerate(img):
                if not isinstance(t, torch.Tensor):
                    raise TypeError(f"{what}: img[{i}] must be a torch.Tensor, got {type(t).__name__}")
                if t.ndim not in (2, 3):
                    raise ValueError(f"{what}: img[{i}] must be (C, H, W) or (H, W), got shape {tuple(t.shape)}")
                t3 = t[None] if t.ndim == 2 else t
                self._check(t3[None], f"img[{i}]")
                if t3.requires_grad:
                    t3 = t3.detach()
                if t3.numel() and t3.stride(-1) != 1:
                    t3 = t3.contiguous()
                items.append(t3)
            first = items[0]
            self.dtype, self.device, self.channels = first.dtype, first.device, int(first.shape[0])
            for i, t in enumerate(items):
                if t.dtype != self.dtype or t.device != self.device or t.shape[0] != self.channels:
                    raise ValueError(
                        f"{what}: img[{i}] is {t.dtype} with {t.shape[0]} channels on {t.device}, img[0] is "
                        f"{self.dtype} with {self.channels} on {self.device}: one dtype, channel count and device"
                    )
            self.dims = [t.ndim for t in img]
            sizes = [t.numel() for t in items]
            buf = torch.empty(sum(sizes), dtype=self.dtype, device=self.device)
            offs = np.concatenate([[0], np.cumsum(sizes)])
            self.views = [buf[int(o) : int(o) + s].view(t.shape) for o, s, t in zip(offs, sizes, items)]
            self.images, self.outs = items, self.views
            self.live = [i for i, t in enumerate(items) if t.shape[1] and t.shape[2]]
        else:
            raise TypeError(f"{what}: img must be a tensor, a list of tensors or a PIL image, got {type(img).__name__}")
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{what}: img lives on {self.device}; gdsio transforms run on cpu or cuda tensors")
        self.count = len(self.images)

    def _check(self, t: torch.Tensor, name: str) -> None:
        if t.dtype not in _DTYPES:
            raise TypeError(f"{self.what}: {name} has dtype {t.dtype}; the colour ops take uint8, float32, float16 "
                            "and bfloat16 images")
        if t.shape[1] not in (1, 3):
            raise TypeError(f"{self.what}: {name} has {t.shape[1]} channels; the colour ops take 1 or 3 "
                            f"(torchvision's rule), shape {tuple(t.shape)}")

    def run(self, ops: np.ndarray, factors: np.ndarray) -> Any:
        """ops: (count, 4) op codes, factors: (count, 4); returns the results in the caller's form."""
        live = self.live  # empty images have nothing to compute
        if live:
            images, outs = self.images, self.outs
            if len(live) < self.count:
                images, outs = [images[i] for i in live], [outs[i] for i in live]
            ops_l = np.ascontiguousarray(ops[live], np.int32)
            fac_l = np.ascontiguousarray(factors[live], np.float64)
            run: dict[str, Any] = launch_args(self.device)
            if self.device.type == "cuda":
                device = self.device  # the contrast sums' workspace, from torch's allocator (the core asks the bytes)
                run["workspace"] = lambda nbytes: torch.empty(nbytes, dtype=torch.uint8, device=device)
            _core.tf_color(images, outs, ops_l, fac_l, **run)
        if self.form == "tensor":
            return self.out.reshape(self.shape)
        return [v[0] if d == 2 else v for v, d in zip(self.views, self.dims)]


def _one_op(img: Any, op: str, factor: float, what: str) -> Any:
    if is_pil(img):
        return _PIL_OPS[op](img, factor)
    if op in ("saturation", "hue") and _gray(img):
        return list(img) if isinstance(img, (list, tuple)) else img  # torchvision: a gray image as it is
    images = _Images(img, what)
    ops = np.zeros((images.count, 4), np.int32)
    ops[:, 0] = _CODES[op]
    factors = np.zeros((images.count, 4), np.float64)
    factors[:, 0] = factor
    return images.run(ops, factors)


def _gray(img: Any) -> bool:
    items = img if isinstance(img, (list, tuple)) else [img]
    return bool(items) and all(isinstance(t, torch.Tensor) and (t.ndim == 2 or (t.ndim >= 3 and t.shape[-3] == 1))
                               for t in items)


# ---- the functional ops -----------------------------------------------------------------------
def adjust_brightness(img: Any, brightness_factor: float) -> Any:
    """torchvision's adjust_brightness: ``clamp(img * brightness_factor)``.

    Args:
        img: a (..., 1 or 3, H, W) or (H, W) tensor (uint8, float32, float16 or
            bfloat16; floats in [0, 1]), a list of (C, H, W) tensors of any sizes
            (one launch), or a PIL image (Pillow's ImageEnhance.Brightness).
        brightness_factor: 0 gives black, 1 the image, 2 twice as bright.

    Returns:
        The adjusted image(s), in the input's form and dtype.

    Raises:
        ValueError: a negative factor. TypeError: another dtype, or not 1 or 3 channels.

    >>> brighter = adjust_brightness(img, 1.5)
    """
    return _one_op(img, "brightness", _factor(brightness_factor, "brightness_factor"), "adjust_brightness")


def adjust_contrast(img: Any, contrast_factor: float) -> Any:
    """torchvision's adjust_contrast: a blend of the image with the mean of its
    grayscale (per image; floored for uint8), ``clamp(img * f + mean * (1 - f))``.

    Args:
        img: as for :func:`adjust_brightness` (PIL: ImageEnhance.Contrast).
        contrast_factor: 0 gives the gray mean, 1 the image.

    Returns:
        The adjusted image(s), in the input's form and dtype.

    Raises:
        ValueError: a negative factor. TypeError: another dtype, or not 1 or 3 channels.

    >>> flat = adjust_contrast(batch, 0.5)        # each image of the batch against its own mean
    """
    return _one_op(img, "contrast", _factor(contrast_factor, "contrast_factor"), "adjust_contrast")


def adjust_saturation(img: Any, saturation_factor: float) -> Any:
    """torchvision's adjust_saturation: a blend of the image with its grayscale
    (0.2989 R + 0.587 G + 0.114 B, floored for uint8). Gray images come back as they are.

    Args:
        img: as for :func:`adjust_brightness` (PIL: ImageEnhance.Color).
        saturation_factor: 0 gives gray, 1 the image, 2 twice as saturated.

    Returns:
        The adjusted image(s), in the input's form and dtype.

    Raises:
        ValueError: a negative factor. TypeError: another dtype, or not 1 or 3 channels.

    >>> gray3 = adjust_saturation(img, 0.0)
    """
    return _one_op(img, "saturation", _factor(saturation_factor, "saturation_factor"), "adjust_saturation")


def adjust_hue(img: Any, hue_factor: float) -> Any:
    """torchvision's adjust_hue: the hue turned by ``hue_factor`` of a full turn,
    through HSV in float32 (uint8 images are scaled to [0, 1] and back, as
    torchvision's to_dtype does). Gray images come back as they are.

    Args:
        img: as for :func:`adjust_brightness` (PIL: Pillow's HSV with the H band shifted).
        hue_factor: in [-0.5, 0.5].

    Returns:
        The adjusted image(s), in the input's form and dtype.

    Raises:
        ValueError: a factor outside [-0.5, 0.5]. TypeError: another dtype, or not 1 or 3 channels.

    >>> turned = adjust_hue(img, 0.25)
    """
    return _one_op(img, "hue", _factor(hue_factor, "hue_factor"), "adjust_hue")


def color_jitter(
    img: Any,
    brightness: Any = None,
    contrast: Any = None,
    saturation: Any = None,
    hue: Any = None,
    order: Any = None,
) -> Any:
    """torchvision's ColorJitter with its parameters given, per sample, in one
    pass: for each image the four ops run in ``order``, each with its factor
    (None: that op is skipped). Equal to calling adjust_brightness,
    adjust_contrast, adjust_saturation and adjust_hue one after the other
    (uint8 rounded between them, as torchvision does).

    Args:
        img: a (..., C, H, W) or (H, W) tensor, a list of (C, H, W) tensors, or a
            PIL image / a list of PIL images (Pillow's ops, one by one).
        brightness, contrast, saturation, hue: None, one factor for every image,
            or one factor per image (a sequence of N numbers).
        order: None (brightness, contrast, saturation, hue), a permutation of
            0..3 in that numbering (torchvision's ``fn_idx``), or an (N, 4)
            array of them, one per image.

    Returns:
        The adjusted image(s), in the input's form and dtype.

    Raises:
        ValueError: factors out of range or of the wrong count; a bad order.
        TypeError: another dtype, or not 1 or 3 channels.

    >>> out = color_jitter(batch, brightness=[0.8, 1.2], hue=[0.1, -0.1], order=[[3, 0, 1, 2], [0, 1, 2, 3]])
    """
    pil_list = isinstance(img, (list, tuple)) and bool(img) and all(is_pil(t) for t in img)
    if is_pil(img) or pil_list:
        items = list(img) if pil_list else [img]
        n = len(items)
    else:
        images = _Images(img, "color_jitter")
        n = images.count
    factors = [_per_sample(v, n, name) for v, name in zip((brightness, contrast, saturation, hue), OPS)]
    perm = _order(order, n)
    if is_pil(img) or pil_list:
        out = []
        for i, im in enumerate(items):
            for k in perm[i]:
                if factors[k] is not None:
                    im = _PIL_OPS[OPS[k]](im, float(factors[k][i]))
            out.append(im)
        return out if pil_list else out[0]
    ops = np.zeros((n, 4), np.int32)
    fac = np.zeros((n, 4), np.float64)
    for pos in range(4):
        for k, name in enumerate(OPS):
            if factors[k] is None:
                continue
            sel = perm[:, pos] == k
            ops[sel, pos] = _CODES[name]
            fac[sel, pos] = factors[k][sel]
    return images.run(ops, fac)
