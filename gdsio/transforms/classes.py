"""Batch transforms: torchvision's names, applied to a whole batch at once on
the device, on top of ``gdsio.transforms``.

A transform takes the decoded images of one batch (a list of ``(C,H,W)``
tensors whose sizes may differ, or an ``(N,C,H,W)`` tensor) and returns a
batch. ``Compose`` recognises the usual training and evaluation chains and runs
them as one fused kernel (crop + resize + flip + normalise + cast):

* ``RandomResizedCrop``, or a fixed-size ``Resize``, or ``CenterCrop`` then a
  fixed-size ``Resize``;
* then, in any order, an optional ``RandomHorizontalFlip`` and an optional
  ``ToDtype(<float dtype>)``, which ``Normalize`` may follow.

Other transforms (``ColorJitter``, ``RandomVerticalFlip``, ``Pad``, any
callable) make a chain unfused: each then runs in turn on the whole batch (a
stacked batch in one launch per transform; ``ColorJitter`` takes a list of
different sizes in one launch too).

``Resize(256), CenterCrop(224)`` is not fused: resizing a crop is not the same
as cropping a resize at the crop's border, and the fused op would differ from
torchvision there. The fused op resizes to uint8 (Pillow-exact) and then
normalises in float32 before the cast, so it equals the unfused chain with a
float32 ``ToDtype`` and differs from a float16 chain only by float16
rounding (the unfused ``Normalize`` computes in float16).

Random parameters are drawn per sample from (seed, epoch, sample index), which
the loader publishes for each batch (``current_batch()``), so a resumed or
repeated run draws the same crops, flips and colour jitter. Used on their
own, outside a loader, random transforms draw a seed from torch's global generator
(``torch.manual_seed`` makes them repeatable), as torchvision's do.

>>> train = Compose([RandomResizedCrop(224), RandomHorizontalFlip(),
...                  ToDtype(torch.float16, scale=True), Normalize(IMAGENET_MEAN, IMAGENET_STD)])
>>> train.fused
True
>>> batch = train([img_a, img_b])            # (2, 3, 224, 224) float16

This module holds the chains (Compose and its fusion plan, BatchLambda) and
gathers the rest: ``batch_base`` (BatchTransform, BatchInfo, the per-sample
draws), ``batch_geometry`` (Resize, CenterCrop, RandomResizedCrop, the flips,
Pad) and ``batch_pixels`` (ColorJitter, ToDtype, Normalize).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np
import torch

from . import functional as F
from .batch_base import (
    BatchInfo, BatchTransform, batch_context, batch_out, count_images, current_batch, fresh_info, image_sizes,
    salt_of, stack_if_same, uniforms,
)
# Every batch transform is importable from here (gdsio.data imports them from here), as before the split.
from .batch_geometry import (
    CenterCrop, Pad, RandomHorizontalFlip, RandomResizedCrop, RandomVerticalFlip, Resize, center_box,
)
from .batch_pixels import ColorJitter, Normalize, ToDtype

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "BatchInfo",
    "BatchTransform",
    "CenterCrop",
    "Compose",
    "Normalize",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "ToDtype",
    "batch_context",
    "current_batch",
    "uniforms",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_salt = salt_of  # the name the tests import from here


@dataclasses.dataclass
class _Fused:
    geometry: BatchTransform  # RandomResizedCrop, Resize (fixed) or CenterCrop
    geometry_salt: int
    resize: Resize | RandomResizedCrop
    flip: RandomHorizontalFlip | None
    flip_salt: int
    dtype: Any  # None: uint8 out (no ToDtype in the chain)
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None
    scale: bool = True  # ToDtype's scale: u / 255, else u as it is


def _plan(ts: Sequence[Any]) -> _Fused | None:
    if not ts:
        return None
    if isinstance(ts[0], RandomResizedCrop):
        geo, resize, rest = ts[0], ts[0], 1
    elif isinstance(ts[0], Resize) and ts[0].fixed:
        geo, resize, rest = ts[0], ts[0], 1
    elif isinstance(ts[0], CenterCrop) and len(ts) > 1 and isinstance(ts[1], Resize) and ts[1].fixed:
        geo, resize, rest = ts[0], ts[1], 2
    else:
        return None
    flip = cast = norm = None
    flip_pos = -1
    for pos in range(rest, len(ts)):
        t = ts[pos]
        if isinstance(t, RandomHorizontalFlip) and flip is None:
            flip, flip_pos = t, pos
        elif isinstance(t, ToDtype) and cast is None and _is_float(t.dtype):
            cast = t
        elif isinstance(t, Normalize) and cast is not None and norm is None:
            norm = t
        else:
            return None
    if cast is None:  # crop + resize + flip, uint8 out
        return _Fused(geo, salt_of(geo, 0), resize, flip, salt_of(flip, flip_pos) if flip else 0, None, None, None)
    mean = norm.mean if norm else None
    std = norm.std if norm else None
    return _Fused(geo, salt_of(geo, 0), resize, flip, salt_of(flip, flip_pos) if flip else 0, cast.dtype, mean, std,
                  cast.scale)


def _is_float(dtype: Any) -> bool:
    return dtype in (torch.float32, torch.float16, torch.bfloat16)  # what the fused op writes


class BatchLambda(BatchTransform):
    """``fn`` applied to the whole batch: the samples of one batch as a list of
    tensors (sizes may differ), or an ``(N, ...)`` tensor after a fixed-size
    step of a Compose. ``fn`` returns an ``(N, ...)`` tensor or a list of
    same-shape tensors. (Given to the Loader without this wrapper, ``fn``
    would run once per sample, as a DataLoader transform does.)

    >>> jitter = BatchLambda(lambda imgs: [t + 1 for t in imgs])
    >>> loader = gdsio.Loader("train", 64, transform=jitter, device="cpu")
    """

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        self.fn = fn

    def _apply(self, images: Any, salt: int) -> Any:
        return self.fn(images)


class Compose(BatchTransform):
    """Transforms applied in order; the usual chains run fused (see the module
    docstring; ``fused`` says whether this one does). Plain callables may
    appear in the list too; they make the chain unfused and get the batch as
    it stands at that point (a list of tensors, or an ``(N,C,H,W)`` tensor
    after a fixed-size step)."""

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms = list(transforms)
        for i, t in enumerate(self.transforms):
            if not callable(t):
                raise TypeError(f"transforms[{i}] is not callable: {t!r}")
        self._fusion = _plan(self.transforms)

    @property
    def fused(self) -> bool:
        return self._fusion is not None

    def __call__(self, images: Any) -> Any:
        if current_batch() is None:
            # Standalone: one seed for the whole chain, so fused and unfused agree.
            with batch_context(fresh_info(count_images(images))):
                return self._apply(images, 0)
        return self._apply(images, 0)

    def decode_boxes(self, info: BatchInfo) -> Callable[[int, int, int], tuple[int, int, int, int]] | None:
        first = self.transforms[0] if self.transforms else None
        if isinstance(first, RandomResizedCrop):  # the same draws in the fused and the unfused path
            return first.box_drawer(info, salt_of(first, 0))
        return None

    def _apply(self, images: Any, salt: int) -> Any:
        if self._fusion is not None:
            out = self._run_fused(images, self._fusion)
            if out is not None:
                return out
        info = current_batch()
        if info is not None and info.regions is not None and len(self.transforms) > 1:
            # Decoded regions are the first transform's business only: the rest
            # see its output, whole images.
            first = self.transforms[0]
            x = first._apply(images, salt_of(first, 0)) if isinstance(first, BatchTransform) else first(images)
            with batch_context(dataclasses.replace(info, regions=None)):
                return self._rest(x, 1)
        return self._rest(images, 0)

    def _rest(self, x: Any, start: int) -> Any:
        for pos in range(start, len(self.transforms)):
            t = self.transforms[pos]
            x = t._apply(x, salt_of(t, pos)) if isinstance(t, BatchTransform) else t(x)
        return stack_if_same(x) if isinstance(x, list) else x

    def _run_fused(self, images: Any, f: _Fused) -> Any:
        sizes = image_sizes(images)
        n = len(sizes)
        if isinstance(f.geometry, RandomResizedCrop):
            boxes = f.geometry.boxes_for(images, f.geometry_salt)
        elif isinstance(f.geometry, CenterCrop):
            ch, cw = f.geometry.size
            if any(ch > h or cw > w for h, w in sizes):
                return None  # padding needed: the plain path pads
            boxes = np.asarray([center_box(h, w, ch, cw) for h, w in sizes], np.int64).reshape(n, 4)
        else:
            boxes = np.asarray([(0, 0, h, w) for h, w in sizes], np.int64).reshape(n, 4)
        flips = f.flip.flags(n, f.flip_salt) if f.flip is not None else np.zeros(n, bool)
        seq = list(images) if isinstance(images, (list, tuple)) or images.dim() == 4 else [images]
        out = F.resized_crop_flip_normalize(
            seq, boxes, flips, list(f.resize.size),
            list(f.mean) if f.mean is not None else None, list(f.std) if f.std is not None else None,
            interpolation=f.resize.interpolation, antialias=f.resize.antialias,
            dtype=f.dtype if f.dtype is not None else torch.uint8, scale=f.scale,
            out=batch_out(seq, f.resize.size, f.dtype if f.dtype is not None else torch.uint8),
        )
        return out if isinstance(images, (list, tuple)) or images.dim() == 4 else out[0]
