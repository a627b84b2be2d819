"""The batch transforms that move pixels: Resize, CenterCrop,
RandomResizedCrop, RandomHorizontalFlip, RandomVerticalFlip and Pad.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import torch

from . import functional as F
from . import geometry
from .base import is_pil, size_arg, size_pair
from .batch_base import (
    BatchInfo, BatchTransform, batch_out, count_images, each, image_sizes, info_for, salt_of, uniforms,
)
from .pad import PADDING_MODES

__all__ = ["CenterCrop", "Pad", "RandomHorizontalFlip", "RandomResizedCrop", "RandomVerticalFlip", "Resize"]


class Resize(BatchTransform):
    """Resize to ``(height, width)``, or, given an int (or ``[n]``), the
    shorter side to that length keeping the aspect ratio (torchvision's
    rule, as gdsio.transforms.resize). Images of one output size are resized
    in one launch."""

    def __init__(self, size: int | Sequence[int], interpolation: str = "bilinear", antialias: bool = True) -> None:
        sizes = size_arg(size, "size")
        self.size: int | tuple[int, int] = sizes[0] if len(sizes) == 1 else (sizes[0], sizes[1])
        self.interpolation = interpolation
        self.antialias = antialias

    @property
    def fixed(self) -> bool:
        return not isinstance(self.size, int)

    def output_size(self, h: int, w: int) -> tuple[int, int]:
        # gdsio.transforms.resize's rule; this class takes no max_size (None: no cap).
        return geometry.output_size(h, w, self.size, None)

    def _apply(self, images: Any, salt: int) -> Any:
        outs = [self.output_size(h, w) for h, w in image_sizes(images)]
        kw = dict(interpolation=self.interpolation, antialias=self.antialias)
        if not isinstance(images, (list, tuple)) or len(set(outs)) == 1:
            return F.resize(images if not isinstance(images, tuple) else list(images), list(outs[0]), **kw)
        return [F.resize(t, list(o), **kw) for t, o in zip(images, outs)]


def center_box(h: int, w: int, ch: int, cw: int) -> tuple[int, int, int, int]:
    # torchvision's rounding of the centre offset.
    return int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0)), ch, cw


class CenterCrop(BatchTransform):
    """Crop the centre ``(height, width)``; smaller images are zero-padded first,
    as in torchvision. Crops are views: no copy, no launch."""

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = size_pair(size, "size")

    def _apply(self, images: Any, salt: int) -> Any:
        return each(images, lambda t: F.center_crop(t, list(self.size)))


class RandomResizedCrop(BatchTransform):
    """torchvision's RandomResizedCrop, per sample: a crop of random area
    (``scale``) and aspect ratio (``ratio``), resized to ``size``; all crops
    resized in one launch."""

    def __init__(
        self,
        size: int | Sequence[int],
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        interpolation: str = "bilinear",
        antialias: bool = True,
    ) -> None:
        self.size = size_pair(size, "size")
        if not (0 < scale[0] <= scale[1]) or not (0 < ratio[0] <= ratio[1]):
            raise ValueError(f"scale and ratio must be (min, max) with 0 < min <= max; got {scale}, {ratio}")
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        self.interpolation = interpolation
        self.antialias = antialias

    def boxes(self, sizes: Sequence[tuple[int, int]], u: np.ndarray) -> np.ndarray:
        """(N, 4) int64 boxes (top, left, height, width), torchvision's algorithm
        (gdsio.transforms.geometry): 10 attempts at a random area and ratio,
        then a central crop of the nearest allowed ratio. `u` holds 40
        uniforms per sample."""
        hw = np.asarray(sizes, np.int64).reshape(len(sizes), 2)
        return geometry.resized_crop_boxes(hw[:, 0], hw[:, 1], *self._tries(u), self.ratio)

    def _tries(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The 40 uniforms of each sample as its 10 tries' (area fraction,
        aspect ratio, top placement, left placement), each (N, 10)."""
        u = u.reshape(-1, geometry.CROP_TRIES, 4)
        fraction = self.scale[0] + (self.scale[1] - self.scale[0]) * u[..., 0]
        lr = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        aspect = np.exp(lr[0] + (lr[1] - lr[0]) * u[..., 1])
        return fraction, aspect, u[..., 2], u[..., 3]

    def boxes_for(self, images: Any, salt: int) -> np.ndarray:
        """The boxes of a batch (its sizes, current_batch()'s draws and decoded
        regions); package-internal: Compose's fused path (gdsio.transforms.classes) calls it too."""
        sizes = image_sizes(images)
        info = info_for(len(sizes))
        if info.regions is None:
            return self.boxes(sizes, uniforms(info, salt, 40))
        # Inputs the loader decoded as boxes of larger images: draw on the
        # images' sizes, then place each box in its input.
        reg = np.asarray(info.regions, np.int64).reshape(len(sizes), 4)
        whole = reg[:, 0] < 0
        full = [sizes[i] if whole[i] else (int(reg[i, 0]), int(reg[i, 1])) for i in range(len(sizes))]
        boxes = self.boxes(full, uniforms(info, salt, 40))
        boxes[~whole, 0] -= reg[~whole, 2]
        boxes[~whole, 1] -= reg[~whole, 3]
        h, w = np.asarray(sizes, np.int64).reshape(-1, 2).T
        if (boxes[:, :2] < 0).any() or (boxes[:, 0] + boxes[:, 2] > h).any() or (boxes[:, 1] + boxes[:, 3] > w).any():
            raise RuntimeError("gdsio: a decoded region does not hold its crop box (the loader's decode_boxes and "
                               "this transform disagree)")
        return boxes

    def decode_boxes(self, info: BatchInfo) -> Callable[[int, int, int], tuple[int, int, int, int]] | None:
        return self.box_drawer(info, salt_of(self, -1))

    def box_drawer(self, info: BatchInfo, salt: int) -> Callable[[int, int, int], tuple[int, int, int, int]]:
        """boxes() one image at a time, for a reader thread that knows one
        image's size: the draws, which do not depend on the size, are made for
        the whole batch here; each call computes one image's box from its row.
        Package-internal: Compose.decode_boxes (gdsio.transforms.classes) calls it too."""
        fraction, aspect, u_top, u_left = (t.tolist() for t in self._tries(uniforms(info, salt, 40)))

        def box(k: int, h: int, w: int) -> tuple[int, int, int, int]:
            return geometry.resized_crop_box(h, w, fraction[k], aspect[k], u_top[k], u_left[k], self.ratio)

        return box

    def _apply(self, images: Any, salt: int) -> Any:
        boxes = self.boxes_for(images, salt)
        seq = list(images) if isinstance(images, (list, tuple)) or images.dim() == 4 else [images]
        out = F.resized_crop_flip_normalize(seq, boxes, False, list(self.size), None, None, dtype=torch.uint8,
                                            interpolation=self.interpolation, antialias=self.antialias,
                                            out=batch_out(seq, self.size, torch.uint8))
        return out if isinstance(images, (list, tuple)) or images.dim() == 4 else out[0]


class _RandomFlip(BatchTransform):
    """Flip each sample with probability ``p`` (the flip is the subclass's)."""

    _flip = "hflip"

    def __init__(self, p: float = 0.5) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.p = float(p)

    def flags(self, n: int, salt: int) -> np.ndarray:
        return uniforms(info_for(n), salt, 1)[:, 0] < self.p

    def _apply(self, images: Any, salt: int) -> Any:
        flip = getattr(F, self._flip)
        if is_pil(images):
            return flip(images) if self.flags(1, salt)[0] else images
        flags = self.flags(count_images(images), salt)
        if isinstance(images, (list, tuple)):
            return [flip(t) if f else t for t, f in zip(images, flags.tolist())]
        if images.dim() <= 3:
            return flip(images) if flags[0] else images
        mask = torch.as_tensor(flags, device=images.device).view(-1, *([1] * (images.dim() - 1)))
        return torch.where(mask, flip(images), images)


class RandomHorizontalFlip(_RandomFlip):
    """Flip each sample left-right with probability ``p`` (torchvision's
    RandomHorizontalFlip, drawn per sample)."""

    _flip = "hflip"


class RandomVerticalFlip(_RandomFlip):
    """Flip each sample top-bottom with probability ``p`` (torchvision's
    RandomVerticalFlip, drawn per sample).

    >>> RandomVerticalFlip(0.5)(batch).shape == batch.shape
    True
    """

    _flip = "vflip"

class Pad(BatchTransform):
    """torchvision's Pad: ``padding`` an int, (left/right, top/bottom) or
    (left, top, right, bottom) (negative crops), ``fill`` a number or one per
    channel (for "constant"), ``padding_mode`` "constant", "edge", "reflect" or
    "symmetric". Each image of a list is padded; a batch in one launch.

    >>> Pad(4, padding_mode="reflect")(batch).shape[-1] == batch.shape[-1] + 8
    True
    """

    def __init__(self, padding: int | Sequence[int], fill: Any = 0, padding_mode: str = "constant") -> None:
        ok = isinstance(padding, int) and not isinstance(padding, bool)
        if isinstance(padding, (list, tuple)):
            if len(padding) not in (1, 2, 4):
                raise ValueError(f"padding must be an int or a 1, 2, or 4 element sequence, got {len(padding)} elements")
            ok = all(isinstance(p, int) and not isinstance(p, bool) for p in padding)
        if not ok:
            raise TypeError(f"padding must be an int or a sequence of ints, got {padding!r}")
        if padding_mode not in PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {', '.join(PADDING_MODES)}, got {padding_mode!r}")
        if fill is not None and not isinstance(fill, (int, float, list, tuple)) or isinstance(fill, bool):
            raise TypeError(f"fill must be a number or a sequence of numbers, got {fill!r}")
        if isinstance(fill, (list, tuple)) and len(fill) > 1 and padding_mode != "constant":
            raise ValueError(f"padding_mode {padding_mode!r} takes no per-channel fill (fill is for 'constant')")
        self.padding = list(padding) if isinstance(padding, (list, tuple)) else padding
        self.fill = fill
        self.padding_mode = padding_mode

    def _apply(self, images: Any, salt: int) -> Any:
        return F.pad(images, self.padding, self.fill, self.padding_mode)
