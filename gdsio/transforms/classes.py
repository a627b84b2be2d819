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
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import zlib
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from PIL import Image

from . import functional as F
from . import geometry
from .base import size_arg, size_pair

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


# ---- which batch is this: (seed, epoch, sample indices) -------------------------------


@dataclasses.dataclass(frozen=True)
class BatchInfo:
    """Published by the loader around each call of its transform."""

    seed: int
    epoch: int
    indices: np.ndarray  # the dataset index of each sample in the batch, in order
    # Where each input sits in its image, when the loader decoded only the box
    # the first transform keeps (decode_boxes): (N, 4) int64 rows (image
    # height, image width, top, left); a row of -1 for an input that is its
    # whole image. None: every input is its whole image.
    regions: np.ndarray | None = None
    # Where a fused transform writes the batch: alloc(shape, dtype) -> a
    # contiguous tensor on the batch's device (a loader's reused buffers);
    # None: a fresh tensor.
    alloc: Callable[[tuple[int, ...], torch.dtype], torch.Tensor] | None = None


_current: contextvars.ContextVar[BatchInfo | None] = contextvars.ContextVar("gdsio_batch", default=None)


def current_batch() -> BatchInfo | None:
    """The batch being transformed (inside a loader), else None. A custom
    transform can draw its own per-sample randomness from it."""
    return _current.get()


@contextlib.contextmanager
def batch_context(info: BatchInfo) -> Iterator[BatchInfo]:
    """Makes `info` the current batch inside the block (thread- and task-local)."""
    token = _current.set(info)
    try:
        yield info
    finally:
        _current.reset(token)


def _fresh_info(n: int) -> BatchInfo:
    seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))  # repeatable under torch.manual_seed
    return BatchInfo(seed, 0, np.arange(n, dtype=np.int64))


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    # splitmix64's finaliser: a counter-based hash, so any sample's draws are
    # computed directly, vectorised over the batch, with no generator state.
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def uniforms(info: BatchInfo, salt: int, count: int) -> np.ndarray:
    """(N, count) floats in [0, 1), a pure function of (seed, epoch, index, salt, draw)."""
    mask = (1 << 64) - 1
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps by design
        key = _mix(np.array([info.seed & mask], np.uint64) + _GOLDEN)
        key = _mix(key ^ np.uint64(info.epoch & mask))
        key = _mix(key ^ np.uint64(salt & mask))
        per = _mix(key ^ (np.asarray(info.indices, np.int64).astype(np.uint64) * _GOLDEN))
        draws = _mix(per[:, None] + np.arange(1, count + 1, dtype=np.uint64)[None, :] * _GOLDEN)
    return (draws >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _info_for(n: int) -> BatchInfo:
    info = current_batch()
    if info is None:
        return _fresh_info(n)
    if len(info.indices) != n:
        raise ValueError(f"the batch holds {n} images but the current batch info names {len(info.indices)} samples")
    return info


def _salt(t: Any, position: int) -> int:
    # Distinct streams per transform (a crop and a flip must not share draws),
    # the same in the fused and the unfused path.
    return zlib.crc32(f"{type(t).__name__}:{position}".encode())


# ---- helpers ---------------------------------------------------------------------------


def _sizes(images: Any) -> list[tuple[int, int]]:
    if isinstance(images, (list, tuple)):
        return [(int(t.shape[-2]), int(t.shape[-1])) for t in images]
    if images.dim() == 3:
        return [(int(images.shape[-2]), int(images.shape[-1]))]
    return [(int(images.shape[-2]), int(images.shape[-1]))] * int(images.shape[0])


def _count(images: Any) -> int:
    if isinstance(images, (list, tuple)):
        return len(images)
    return 1 if images.dim() <= 3 else int(images.shape[0])


def _is_pil(images: Any) -> bool:
    return isinstance(images, Image.Image)


def _each(images: Any, fn: Callable[[Any], Any]) -> Any:
    return [fn(t) for t in images] if isinstance(images, (list, tuple)) else fn(images)


def _batch_out(seq: list[Any], size: Sequence[int], dtype: torch.dtype) -> torch.Tensor | None:
    """The fused op's output from the current batch's allocator (a loader's
    reused host buffers), or None (a fresh tensor)."""
    info = current_batch()
    if info is None or info.alloc is None or not seq or seq[0].device.type != "cpu":
        return None
    return info.alloc((len(seq), int(seq[0].shape[-3]), int(size[0]), int(size[1])), dtype)


def _stack_if_same(images: list[Any]) -> Any:
    if images and len({tuple(t.shape) for t in images}) == 1:
        return torch.stack(images)
    return images


# ---- the transforms ------------------------------------------------------------------


class BatchTransform:
    """Base class: ``t(images)`` applies the transform to a batch. The
    Loader hands a BatchTransform (Compose included) the whole batch; any
    other callable runs per sample. For a batch-level transform of your own,
    subclass this and define ``__call__(images)``, or wrap a function in
    ``BatchLambda``."""

    def __call__(self, images: Any) -> Any:
        return self._apply(images, _salt(self, -1))

    def _apply(self, images: Any, salt: int) -> Any:
        if type(self).__call__ is not BatchTransform.__call__:  # a subclass that defines __call__ only
            return self(images)
        raise NotImplementedError(f"{type(self).__name__} must define __call__(images)")

    def decode_boxes(self, info: BatchInfo) -> Callable[[int, int, int], tuple[int, int, int, int]] | None:
        """When this transform reads only a box of each image: for the batch
        `info` names, a function (position in the batch, image height, image
        width) -> the box (top, left, height, width) it will read of that
        image; None when it reads whole images. A CPU loader draws the boxes
        before decoding, decodes only them (the pixels are the same) and says
        so in ``info.regions``."""
        return None

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


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
        outs = [self.output_size(h, w) for h, w in _sizes(images)]
        kw = dict(interpolation=self.interpolation, antialias=self.antialias)
        if not isinstance(images, (list, tuple)) or len(set(outs)) == 1:
            return F.resize(images if not isinstance(images, tuple) else list(images), list(outs[0]), **kw)
        return [F.resize(t, list(o), **kw) for t, o in zip(images, outs)]


def _center_box(h: int, w: int, ch: int, cw: int) -> tuple[int, int, int, int]:
    # torchvision's rounding of the centre offset.
    return int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0)), ch, cw


class CenterCrop(BatchTransform):
    """Crop the centre ``(height, width)``; smaller images are zero-padded first,
    as in torchvision. Crops are views: no copy, no launch."""

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = size_pair(size, "size")

    def _apply(self, images: Any, salt: int) -> Any:
        return _each(images, lambda t: F.center_crop(t, list(self.size)))


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

    def _boxes_for(self, images: Any, salt: int) -> np.ndarray:
        sizes = _sizes(images)
        info = _info_for(len(sizes))
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
        return self._box_drawer(info, _salt(self, -1))

    def _box_drawer(self, info: BatchInfo, salt: int) -> Callable[[int, int, int], tuple[int, int, int, int]]:
        """boxes() one image at a time, for a reader thread that knows one
        image's size: the draws, which do not depend on the size, are made for
        the whole batch here; each call computes one image's box from its row."""
        fraction, aspect, u_top, u_left = (t.tolist() for t in self._tries(uniforms(info, salt, 40)))

        def box(k: int, h: int, w: int) -> tuple[int, int, int, int]:
            return geometry.resized_crop_box(h, w, fraction[k], aspect[k], u_top[k], u_left[k], self.ratio)

        return box

    def _apply(self, images: Any, salt: int) -> Any:
        boxes = self._boxes_for(images, salt)
        seq = list(images) if isinstance(images, (list, tuple)) or images.dim() == 4 else [images]
        out = F.resized_crop_flip_normalize(seq, boxes, False, list(self.size), None, None, dtype=torch.uint8,
                                            interpolation=self.interpolation, antialias=self.antialias,
                                            out=_batch_out(seq, self.size, torch.uint8))
        return out if isinstance(images, (list, tuple)) or images.dim() == 4 else out[0]


class _RandomFlip(BatchTransform):
    """Flip each sample with probability ``p`` (the flip is the subclass's)."""

    _flip = "hflip"

    def __init__(self, p: float = 0.5) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.p = float(p)

    def flags(self, n: int, salt: int) -> np.ndarray:
        return uniforms(_info_for(n), salt, 1)[:, 0] < self.p

    def _apply(self, images: Any, salt: int) -> Any:
        flip = getattr(F, self._flip)
        if _is_pil(images):
            return flip(images) if self.flags(1, salt)[0] else images
        flags = self.flags(_count(images), salt)
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


PADDING_MODES = ("constant", "edge", "reflect", "symmetric")


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
        u = uniforms(_info_for(n), salt, 8)
        ranges = (self.brightness, self.contrast, self.saturation, self.hue)
        factors = [None if r is None else r[0] + (r[1] - r[0]) * u[:, k] for k, r in enumerate(ranges)]
        return factors, np.argsort(u[:, 4:8], axis=1)

    def _apply(self, images: Any, salt: int) -> Any:
        if all(r is None for r in (self.brightness, self.contrast, self.saturation, self.hue)):
            return images
        if not _is_pil(images) and not isinstance(images, (list, tuple)) and images.dim() > 4:
            raise ValueError(f"ColorJitter takes (C, H, W), (N, C, H, W) or a list, got shape {tuple(images.shape)}")
        n = 1 if _is_pil(images) else _count(images)
        factors, order = self.params(n, salt)
        return F.color_jitter(images, *factors, order=order)


class ToDtype(BatchTransform):
    """Cast to ``dtype``; with ``scale=True`` integer pixel values are mapped
    to [0, 1] for float dtypes (torchvision's ToDtype, whose default is scale=False)."""

    def __init__(self, dtype: Any, scale: bool = False) -> None:
        self.dtype = dtype
        self.scale = bool(scale)

    def _apply(self, images: Any, salt: int) -> Any:
        return _each(images, lambda t: F.to_dtype(t, self.dtype, scale=self.scale))


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

        return _each(images, one)


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
        return _Fused(geo, _salt(geo, 0), resize, flip, _salt(flip, flip_pos) if flip else 0, None, None, None)
    mean = norm.mean if norm else None
    std = norm.std if norm else None
    return _Fused(geo, _salt(geo, 0), resize, flip, _salt(flip, flip_pos) if flip else 0, cast.dtype, mean, std,
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
            with batch_context(_fresh_info(_count(images))):
                return self._apply(images, 0)
        return self._apply(images, 0)

    def decode_boxes(self, info: BatchInfo) -> Callable[[int, int, int], tuple[int, int, int, int]] | None:
        first = self.transforms[0] if self.transforms else None
        if isinstance(first, RandomResizedCrop):  # the same draws in the fused and the unfused path
            return first._box_drawer(info, _salt(first, 0))
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
            x = first._apply(images, _salt(first, 0)) if isinstance(first, BatchTransform) else first(images)
            with batch_context(dataclasses.replace(info, regions=None)):
                return self._rest(x, 1)
        return self._rest(images, 0)

    def _rest(self, x: Any, start: int) -> Any:
        for pos in range(start, len(self.transforms)):
            t = self.transforms[pos]
            x = t._apply(x, _salt(t, pos)) if isinstance(t, BatchTransform) else t(x)
        return _stack_if_same(x) if isinstance(x, list) else x

    def _run_fused(self, images: Any, f: _Fused) -> Any:
        sizes = _sizes(images)
        n = len(sizes)
        if isinstance(f.geometry, RandomResizedCrop):
            boxes = f.geometry._boxes_for(images, f.geometry_salt)
        elif isinstance(f.geometry, CenterCrop):
            ch, cw = f.geometry.size
            if any(ch > h or cw > w for h, w in sizes):
                return None  # padding needed: the plain path pads
            boxes = np.asarray([_center_box(h, w, ch, cw) for h, w in sizes], np.int64).reshape(n, 4)
        else:
            boxes = np.asarray([(0, 0, h, w) for h, w in sizes], np.int64).reshape(n, 4)
        flips = f.flip.flags(n, f.flip_salt) if f.flip is not None else np.zeros(n, bool)
        seq = list(images) if isinstance(images, (list, tuple)) or images.dim() == 4 else [images]
        out = F.resized_crop_flip_normalize(
            seq, boxes, flips, list(f.resize.size),
            list(f.mean) if f.mean is not None else None, list(f.std) if f.std is not None else None,
            interpolation=f.resize.interpolation, antialias=f.resize.antialias,
            dtype=f.dtype if f.dtype is not None else torch.uint8, scale=f.scale,
            out=_batch_out(seq, f.resize.size, f.dtype if f.dtype is not None else torch.uint8),
        )
        return out if isinstance(images, (list, tuple)) or images.dim() == 4 else out[0]
