"""resize and resized_crop of gdsio.transforms (torchvision v2's), and how
they read torchvision's interpolation and antialias arguments.

uint8 tensors run gdsio's Pillow-exact (antialias=True) or OpenCV-exact
(antialias=False) kernels; float tensors and uint8 bicubic without antialias
are torch's ``interpolate`` as torchvision calls it; PIL images are Pillow's.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .. import _core
from ..config import current as _current_settings
from . import geometry, pil
from .base import is_int as _is_int
from .base import is_pil as _is_pil
from .images import ImageBatch, ImageInput, keeps_layout, run_resize
from .spatial import crop

__all__ = ["FILTERS", "MODES", "interpolation_mode", "parse_antialias", "parse_interpolation", "resize", "resized_crop"]

FILTERS = ("nearest", "bilinear", "bicubic", "box")
# torchvision's InterpolationMode values, and its (Pillow's) integer codes.
MODES = ("nearest", "nearest-exact", "bilinear", "bicubic", "box", "hamming", "lanczos")
_MODE_OF_INT = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


# ---- argument parsing ----------------------------------------------------------------------
def interpolation_mode(interpolation: Any) -> str:
    """torchvision's mode name of a name, an InterpolationMode (by its value) or an int code."""
    if _is_int(interpolation):  # also PIL's Image.Resampling members (an IntEnum)
        if int(interpolation) not in _MODE_OF_INT:
            raise ValueError(f"interpolation code {int(interpolation)} is none of Pillow's (0 to 5)")
        return _MODE_OF_INT[int(interpolation)]
    name = interpolation
    if not isinstance(name, str):
        # torchvision.transforms.InterpolationMode is an Enum whose values are
        # these names; comparing by value needs no torchvision import.
        name = getattr(interpolation, "value", None)
        if not isinstance(name, str):
            raise TypeError(
                f"interpolation must be a name ({', '.join(MODES)}), a torchvision InterpolationMode or a "
                f"Pillow integer code, got {interpolation!r}"
            )
    name = name.lower()
    if name not in MODES:
        raise ValueError(f"interpolation {name!r} is not one of {', '.join(MODES)}")
    return name


def parse_antialias(antialias: Any) -> bool:
    if antialias is None:  # torchvision v2: None means False
        return False
    if not isinstance(antialias, bool):
        raise TypeError(f"antialias must be a bool or None, got {type(antialias).__name__}")
    return antialias


def parse_interpolation(interpolation: Any, antialias: Any) -> tuple[str, bool]:
    """(filter name, antialias) of gdsio's uint8 resize."""
    name = interpolation_mode(interpolation)
    antialias = parse_antialias(antialias)
    if name == "nearest-exact":  # torchvision's name for Pillow's nearest
        return "nearest", True
    if name not in FILTERS:
        raise ValueError(
            f"interpolation {name!r} is not supported for uint8 tensors; use one of {', '.join(FILTERS)} "
            "(or give a PIL image, which Pillow resizes)"
        )
    if not antialias and name not in ("nearest", "bilinear"):
        raise ValueError(
            f"interpolation {name!r} with antialias=False: antialias=False follows OpenCV (INTER_NEAREST, "
            "INTER_LINEAR) and is defined for 'nearest' and 'bilinear' only"
        )
    return name, antialias



# ---- resize ----------------------------------------------------------------------------------
def _pil_antialias_warning(antialias: Any) -> None:
    if antialias is False:  # torchvision's warning, for the same reason
        warnings.warn(
            "Anti-alias option is always applied for PIL Image input. Argument antialias is ignored.",
            UserWarning,
            stacklevel=3,
        )


def _by_torch(img: Any, mode: str, antialias: bool) -> bool:
    """Whether the resize is torch's interpolate (torchvision's tensor path)
    rather than gdsio's uint8 kernels: any dtype but uint8, and uint8 bicubic
    without antialias (which OpenCV's rule does not define)."""
    first = img[0] if isinstance(img, (list, tuple)) and img else img
    if not isinstance(first, torch.Tensor):
        return False
    return first.dtype != torch.uint8 or (mode == "bicubic" and not antialias)


def _interpolate(image: torch.Tensor, out_h: int, out_w: int, mode: str, antialias: bool) -> torch.Tensor:
    """torchvision v2's resize_image from its interpolate call on: the same
    dtype rules, casts and rounding, so the result is torchvision's."""
    if mode not in ("nearest", "nearest-exact", "bilinear", "bicubic"):
        raise ValueError(
            f"interpolation {mode!r} is not supported for {image.dtype} tensors: torch's interpolate (which "
            "torchvision uses for them) has nearest, nearest-exact, bilinear and bicubic"
        )
    if image.ndim < 3:
        raise ValueError(f"img must be (..., C, H, W) or (H, W), got shape {tuple(image.shape)}")
    align_corners = False if mode in ("bilinear", "bicubic") else None
    antialias = antialias and mode in ("bilinear", "bicubic")
    shape = image.shape
    c, h, w = shape[-3:]
    if (out_h, out_w) == (h, w) or image.numel() == 0:
        return image if (out_h, out_w) == (h, w) else image.new_empty(shape[:-2] + (out_h, out_w))
    dtype = image.dtype
    accepted = [torch.float32, torch.float64]
    if mode in ("nearest", "nearest-exact") or (image.device.type == "cpu" and mode == "bicubic"):
        accepted.append(torch.uint8)  # torch's native uint8 kernels (bilinear takes the gdsio path)
    x = image.reshape(-1, c, h, w)
    cast = dtype not in accepted
    if cast:
        x = x.to(torch.float32)
    x = torch.nn.functional.interpolate(x, size=[out_h, out_w], mode=mode, align_corners=align_corners,
                                        antialias=antialias)
    if cast:
        if mode == "bicubic" and dtype == torch.uint8:
            x = x.clamp_(0, 255)
        if not dtype.is_floating_point:
            x = x.round_()
        x = x.to(dtype)
    return x.reshape(shape[:-3] + (c, out_h, out_w))


def _resize_by_torch(img: Any, size: Any, max_size: Any, mode: str, antialias: bool) -> torch.Tensor:
    items = list(img) if isinstance(img, (list, tuple)) else [img]
    for i, t in enumerate(items):
        if not isinstance(t, torch.Tensor) or t.dtype != items[0].dtype:
            raise TypeError(f"img[{i}] is not a tensor of img[0]'s dtype {items[0].dtype}")
    outs = [_interpolate(t, *geometry.output_size(int(t.shape[-2]), int(t.shape[-1]), size, max_size), mode, antialias)
            for t in items]
    if not isinstance(img, (list, tuple)):
        return outs[0]
    if len({tuple(o.shape) for o in outs}) > 1:
        raise ValueError(f"size={size!r} gives the images of this list different output shapes; give size as [h, w]")
    return torch.stack(outs)


def _as_chw_batch(img: Any) -> tuple[Any, Any]:
    """(H, W) and (..., C, H, W) with more than one leading dimension as
    (C, H, W) / (N, C, H, W), and how to give the result its caller's shape."""
    if isinstance(img, torch.Tensor) and img.ndim == 2:
        return img[None], lambda out: out[0]
    if isinstance(img, torch.Tensor) and img.ndim > 4:
        lead = tuple(img.shape[:-3])
        return img.reshape(-1, *img.shape[-3:]), lambda out: out.reshape(*lead, *out.shape[-3:])
    return img, None


# (mode, antialias) -> (core filter, antialias), as parse_interpolation decides them.
_FAST_FILTERS = {(m, aa): parse_interpolation(m, aa) for m in ("nearest", "nearest-exact", "bilinear", "bicubic", "box")
                 for aa in (True, False) if aa or m in ("nearest", "nearest-exact", "bilinear")}
_U8, _TENSOR = torch.uint8, torch.Tensor


def _resize_cpu_image(img: Any, size: Any, interpolation: Any, antialias: Any) -> torch.Tensor | None:
    """resize() of one uint8 (C, H, W) CPU tensor, or an (N, C, H, W) batch, to
    [h, w] with a mode given by name: the common case, in a few Python steps
    (a resize of a small image would otherwise spend more time here than in
    the kernel). None when the call is any other case; resize() then takes its
    general path, which makes the same core call."""
    if type(img) is not _TENSOR or img.dtype is not _U8 or not img.is_cpu:
        return None
    dim = img.dim()
    if dim != 3 and dim != 4:
        return None
    if type(size) not in (list, tuple) or len(size) != 2 or type(size[0]) is not int or type(size[1]) is not int:
        return None
    got = _FAST_FILTERS.get((interpolation, antialias)) if type(interpolation) is str and type(antialias) is bool else None
    if got is None:
        return None
    filt, aa = got
    n, (c, h, w) = (1, img.shape) if dim == 3 else (img.shape[0], img.shape[1:])
    out_h, out_w = size
    if not (n > 0 and 1 <= c <= 4 and h > 0 and w > 0 and out_h > 0 and out_w > 0):
        return None
    if not keeps_layout(img, img.stride(), w):
        return None
    out = torch.empty((n, c, out_h, out_w), dtype=_U8)
    _core.tf_resize((img,) if dim == 3 else img, out=out, filter=filt, antialias=aa,
                    threads=_current_settings().threads)
    return out[0] if dim == 3 else out


def resize(
    img: ImageInput,
    size: int | Sequence[int] | None,
    interpolation: Any = "bilinear",
    max_size: int | None = None,
    antialias: bool | None = True,
) -> Any:
    """torchvision v2's resize. uint8 tensors run gdsio's kernels: a (C, H, W)
    image, an (N, C, H, W) batch, or a list of (C, H, W) tensors of different
    sizes (-> one (N, C, H', W') tensor, one kernel launch for the whole list).

    Args:
        img: a uint8 or float tensor (C, H, W), (..., C, H, W) or (H, W), a list
            of (C, H, W) tensors, or a PIL image (resized by Pillow; a PIL image
            comes back).
        size: [h, w]; an int (or [int]) for the shorter side (torchvision's rule;
            with a list of different aspect ratios give [h, w]); or None with
            ``max_size``, the length of the longer side.
        interpolation: "nearest", "nearest-exact", "bilinear", "bicubic", "box"
            (uint8 and PIL), "hamming" and "lanczos" (PIL), torchvision's
            InterpolationMode, or Pillow's integer codes (0 nearest, 2 bilinear,
            3 bicubic, 4 box, 5 hamming, 1 lanczos), as v2 accepts them.
        max_size: with an int size, the longer side's cap; with size=None, its length.
        antialias: uint8: True (the default) equals ``PIL.Image.resize``
            (reducing_gap=None); False or None equals ``cv2.resize``
            (INTER_LINEAR / INTER_NEAREST), and for bicubic torch's interpolate
            as torchvision computes it. Float and other dtypes: passed to
            ``torch.nn.functional.interpolate`` exactly as torchvision v2 passes
            it (None is False), so the result is torchvision's. PIL: ignored
            (with torchvision's warning when False).

    Returns:
        The resized image(s): a tensor (a stacked batch for a list), or a PIL image.

    Raises:
        TypeError: bad argument types. ValueError: bad sizes, modes, or a list
        whose images would get different output shapes.

    >>> resize(img, [224, 224]).shape
    torch.Size([3, 224, 224])
    >>> resize([a, b, c], [224, 224], interpolation="bicubic").shape
    torch.Size([3, 3, 224, 224])
    >>> resize(img.float() / 255, 256, antialias=None).dtype      # torchvision's float resize
    torch.float32
    """
    if max_size is None:
        fast = _resize_cpu_image(img, size, interpolation, antialias)
        if fast is not None:
            return fast
    mode = interpolation_mode(interpolation)
    aa = parse_antialias(antialias)
    if _is_pil(img):
        _pil_antialias_warning(antialias)
        return pil.resize(img, *geometry.output_size(img.height, img.width, size, max_size), mode)
    img, restore = _as_chw_batch(img)
    if restore is not None:
        return restore(resize(img, size, mode, max_size, antialias))
    if _by_torch(img, mode, aa):
        return _resize_by_torch(img, size, max_size, mode, aa)
    filt, aa = parse_interpolation(mode, aa)
    batch = ImageBatch(img)
    shapes = batch.shapes()
    if isinstance(size, (list, tuple)) and len(size) == 2:  # [h, w]: the same for every image
        shapes = shapes[:1]
    sizes = {geometry.output_size(h, w, size, max_size) for h, w in shapes}
    if len(sizes) > 1:
        raise ValueError(
            f"size={size!r} gives images of this list different output shapes ({sorted(sizes)[:3]}...); "
            "give size as [h, w] to stack them"
        )
    out_h, out_w = sizes.pop()
    out = run_resize(batch, out_h, out_w, filt, aa)
    return out[0] if batch.single else out


def resized_crop(
    img: ImageInput,
    top: int,
    left: int,
    height: int,
    width: int,
    size: int | Sequence[int],
    interpolation: Any = "bilinear",
    antialias: bool | None = True,
) -> Any:
    """torchvision v2's resized_crop: crop then resize. For uint8 tensors with
    the box inside every image the crop is not copied (the kernel reads it in
    place); a box reaching outside is zero-padded first, as :func:`crop` does.

    Args:
        img, interpolation, antialias: as for :func:`resize`.
        top, left, height, width: the box (the same for every image of a list).
        size: as for :func:`resize`, of the box.

    Returns:
        The resized crop(s), as :func:`resize` returns them.

    >>> resized_crop(img, 10, 20, 200, 300, [224, 224]).shape
    torch.Size([3, 224, 224])
    """
    mode = interpolation_mode(interpolation)
    aa = parse_antialias(antialias)
    for name, v in (("top", top), ("left", left), ("height", height), ("width", width)):
        if not _is_int(v):
            raise TypeError(f"resized_crop: {name} must be an int, got {type(v).__name__}")
    if _is_pil(img):
        _pil_antialias_warning(antialias)
        box = pil.crop(img, top, left, height, width)
        return pil.resize(box, *geometry.output_size(height, width, size, None), mode)
    img, restore = _as_chw_batch(img)
    if restore is not None:
        return restore(resized_crop(img, top, left, height, width, size, mode, antialias))
    items = img if isinstance(img, (list, tuple)) else [img]
    inside = all(
        isinstance(t, torch.Tensor) and t.ndim >= 2 and top >= 0 and left >= 0 and height > 0 and width > 0
        and top + height <= t.shape[-2] and left + width <= t.shape[-1]
        for t in items
    )
    if not inside or _by_torch(img, mode, aa):
        cropped = [crop(t, top, left, height, width) for t in items] if isinstance(img, (list, tuple)) else crop(
            img, top, left, height, width)
        return resize(cropped, size, mode, None, antialias)
    filt, aa = parse_interpolation(mode, aa)
    batch = ImageBatch(img)
    n = len(batch)
    boxes = np.tile(np.array([[top, left, height, width]], dtype=np.int64), (n, 1))
    out_h, out_w = geometry.output_size(int(height), int(width), size, None)
    out = run_resize(batch, out_h, out_w, filt, aa, boxes=boxes)
    return out[0] if batch.single else out
