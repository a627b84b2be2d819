"""Image transforms named and shaped as ``torchvision.transforms.v2.functional``:
uint8 or float ``(C, H, W)`` tensors, ``(..., C, H, W)`` batches, ``(H, W)``
gray images, lists of images of different sizes, and PIL images.

CUDA tensors run gdsio's CUDA kernels on the current stream; CPU tensors run
the C++ twin of those kernels (``gdsio.settings(threads=...)`` threads). Both
share one implementation of the arithmetic, so they give the same bytes. PIL
images are handed to Pillow, as torchvision's functional ops do, and a PIL
image comes back.

``resize`` of uint8 tensors follows a reference library exactly, not approximately:

* ``antialias=True`` (the default) is Pillow's ``Image.resize`` (filters
  widened by the downscale factor, pixel centres at +0.5, windows clipped at
  the edges and renormalised, 22-bit fixed point rounded to uint8 between the
  horizontal and the vertical pass); ``"nearest"`` is Pillow's NEAREST.
* ``antialias=False`` (or None, which torchvision reads as False) is OpenCV's
  ``cv2.resize`` with ``INTER_LINEAR`` or ``INTER_NEAREST``; bicubic without
  antialias is torch's ``interpolate``, as torchvision computes it.

Float tensors are resized by ``torch.nn.functional.interpolate`` exactly as
torchvision v2 calls it (its results, not Pillow's). Channels are resampled
independently (as torchvision does). Pillow resizes RGBA images with
premultiplied alpha; gdsio does not.

The colour ops (adjust_brightness, adjust_contrast, adjust_saturation,
adjust_hue, color_jitter) are within 1 of torchvision on uint8 and close to
it on floats; pad and the flips move bytes and equal torchvision's.

>>> import gdsio.transforms as T
>>> small = T.resize(img, [224, 224])                     # == PIL's BILINEAR
>>> batch = T.resize([img_a, img_b], [224, 224])          # (2, C, 224, 224), one launch
>>> boxes = T.random_resized_crop_params([h_a, h_b], [w_a, w_b], generator=0)
>>> x = T.resized_crop_flip_normalize([img_a, img_b], boxes, [True, False], 224,
...                                   mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
>>> jittered = T.adjust_hue(T.adjust_saturation(small, 1.3), 0.05)
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image

from .. import _core
from ..config import current as _current_settings
from . import geometry, pil
from .base import check_spatial, elem_size_of, size_pair
from .base import device_args as _device_args
from .base import is_int as _is_int
from .base import is_pil as _is_pil
from .color import adjust_brightness, adjust_contrast, adjust_hue, adjust_saturation, color_jitter
from .pad import pad

__all__ = [
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "center_crop",
    "color_jitter",
    "crop",
    "hflip",
    "normalize",
    "pad",
    "random_resized_crop_params",
    "resize",
    "resized_crop",
    "resized_crop_flip_normalize",
    "to_dtype",
    "vflip",
]



def __dir__() -> list[str]:
    # dir() and tab completion show the API (and the dunders), not what was imported to build it (np, torch, Any).
    return sorted({*__all__, *(n for n in globals() if n.startswith("__") and n.endswith("__"))})


ImageInput = torch.Tensor | Sequence[torch.Tensor] | Image.Image

FILTERS = ("nearest", "bilinear", "bicubic", "box")
# torchvision's InterpolationMode values, and its (Pillow's) integer codes.
MODES = ("nearest", "nearest-exact", "bilinear", "bicubic", "box", "hamming", "lanczos")
_MODE_OF_INT = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
_FLOAT_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
_ALL_DTYPES = {torch.uint8: "uint8", **_FLOAT_DTYPES}


# ---- argument parsing ----------------------------------------------------------------------
def _interpolation_mode(interpolation: Any) -> str:
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


def _antialias(antialias: Any) -> bool:
    if antialias is None:  # torchvision v2: None means False
        return False
    if not isinstance(antialias, bool):
        raise TypeError(f"antialias must be a bool or None, got {type(antialias).__name__}")
    return antialias


def _parse_interpolation(interpolation: Any, antialias: Any) -> tuple[str, bool]:
    """(filter name, antialias) of gdsio's uint8 resize."""
    name = _interpolation_mode(interpolation)
    antialias = _antialias(antialias)
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


def _check_image(t: Any, name: str) -> tuple[int, int, int]:
    """(C, H, W) of a uint8 image, or the error naming it."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.uint8:
        raise TypeError(f"{name} must be a uint8 image, got dtype {t.dtype}")
    shape = t.shape
    if len(shape) != 3:
        raise ValueError(f"{name} must be (C, H, W), got shape {tuple(shape)}")
    c, h, w = shape
    if not 1 <= c <= 4:
        raise ValueError(f"{name} has {c} channels; 1 to 4 are supported (shape {tuple(shape)})")
    if h == 0 or w == 0:
        raise ValueError(f"{name} is empty (shape {tuple(shape)})")
    return c, h, w


def _keeps_layout(t: torch.Tensor, st: Sequence[int], w: int) -> bool:
    """Whether the core reads this (C, H, W) layout as it is: planes (last
    stride 1) anywhere; on the CPU also interleaved pixels (a (C,H,W) view of
    (H,W,C) memory, a channels_last batch) or any positive strides. Rows and
    channels must not overlap (an expanded tensor's zero strides): the core
    refuses those, so they are copied first."""
    if st[-1] != 1 and t.device.type != "cpu":
        return False
    return st[-1] >= 1 and st[-2] >= (w - 1) * st[-1] + 1 and (t.shape[-3] == 1 or st[-3] >= 1)


class _Batch:
    """Images as the core takes them: an (N, 6) int64 table of (data,
    channel_stride, row_stride, height, width, pixel_stride), built in one
    pass; the kernels read every image through it, so a list is one launch."""

    def __init__(self, img: ImageInput, name: str = "img") -> None:
        self.keep: list[torch.Tensor] = []  # copies made here stay alive until the call ends
        self.single = False
        if isinstance(img, torch.Tensor) and img.ndim == 4:
            if img.dtype != torch.uint8:
                raise TypeError(f"{name} must be a uint8 image batch, got dtype {img.dtype}")
            n = int(img.shape[0])
            if n == 0:
                raise ValueError(f"{name} is an empty batch (shape {tuple(img.shape)})")
            self.channels, h, w = _check_image(img[0], f"{name}[0]")
            if not _keeps_layout(img, img.stride(), w):
                img = img.contiguous()
                self.keep.append(img)
            s0, sc, sh, sw = img.stride()
            self.table = np.empty((n, 6), np.int64)
            self.table[:, 0] = img.data_ptr() + np.arange(n, dtype=np.int64) * s0
            self.table[:, 1:] = (sc, sh, h, w, sw)
            self.device = img.device
            self._shapes = {(int(h), int(w))}
        elif isinstance(img, (torch.Tensor, list, tuple)):
            self.single = isinstance(img, torch.Tensor)
            if self.single and img.ndim != 3:
                raise ValueError(
                    f"{name} must be (C, H, W), (H, W) or (..., C, H, W), got shape {tuple(img.shape)}"
                )
            items = [img] if self.single else img
            if not items:
                raise ValueError(f"{name} is an empty list")
            rows = []
            channels = set()
            devices = set()
            hw = set()
            u8, tensor = torch.uint8, torch.Tensor
            for i, t in enumerate(items):
                # A few attribute reads per image (a batch of 256 is built in ~0.5 ms);
                # the checks that name the problem run only when one fails.
                if type(t) is tensor and t.dtype is u8 and t.dim() == 3 and 1 <= t.shape[0] <= 4 and t.numel():
                    c, h, w = t.shape
                else:
                    c, h, w = _check_image(t, name if self.single else f"{name}[{i}]")
                st = t.stride()
                if not _keeps_layout(t, st, w):
                    t = t.contiguous()
                    self.keep.append(t)
                    st = t.stride()
                rows.append((t.data_ptr(), st[0], st[1], h, w, st[2]))
                channels.add(c)
                devices.add(t.get_device() if t.is_cuda or t.is_cpu else str(t.device))  # cuda index, -1: cpu
                hw.add((h, w))
            self._shapes = hw
            if len(channels) > 1 or len(devices) > 1:
                c0, d0 = items[0].shape[0], items[0].device
                for i, t in enumerate(items):
                    if t.device != d0:
                        raise ValueError(f"{name}[{i}] is on {t.device}, {name}[0] on {d0}: one device per batch")
                    if t.shape[0] != c0:
                        raise ValueError(f"{name}[{i}] has {t.shape[0]} channels, {name}[0] has {c0}")
            self.channels = channels.pop()
            self.device = items[0].device
            self.table = np.array(rows, dtype=np.int64)
        else:
            raise TypeError(f"{name} must be a uint8 tensor or a list of them, got {type(img).__name__}")
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{name} lives on {self.device}; gdsio transforms run on cpu or cuda tensors")

    def __len__(self) -> int:
        return int(self.table.shape[0])

    def shape(self, i: int) -> tuple[int, int]:
        return int(self.table[i, 3]), int(self.table[i, 4])

    def shapes(self) -> list[tuple[int, int]]:
        """The distinct (H, W) of the batch, sorted."""
        return sorted(self._shapes)

    def refs(self, boxes: np.ndarray | None = None, flips: np.ndarray | None = None) -> np.ndarray:
        """The (N, 7) table the core takes, (data, channel_stride, row_stride,
        height, width, flip, pixel_stride); boxes crop (top, left, h, w), flips mirror."""
        t = np.empty((len(self), 7), np.int64)
        t[:, :5] = self.table[:, :5]
        t[:, 5] = 0 if flips is None else flips
        t[:, 6] = self.table[:, 5]
        if boxes is not None:
            t[:, 0] += boxes[:, 0] * t[:, 2] + boxes[:, 1] * t[:, 6]
            t[:, 3:5] = boxes[:, 2:4]
        return t


def _run_resize(
    batch: _Batch,
    refs: np.ndarray,
    out_h: int,
    out_w: int,
    filt: str,
    antialias: bool,
    dtype: torch.dtype = torch.uint8,
    scale: bool = False,
    mean: list[float] | None = None,
    std: list[float] | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    shape = (len(refs), batch.channels, out_h, out_w)
    if out is None:
        out = torch.empty(shape, dtype=dtype, device=batch.device)
    elif (tuple(out.shape) != shape or out.dtype != dtype or out.device != batch.device
          or not out.is_contiguous()):
        raise ValueError(f"out must be a contiguous {tuple(shape)} {dtype} tensor on {batch.device}; got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    kw: dict[str, Any] = {
        "channels": batch.channels,
        "out_h": out_h,
        "out_w": out_w,
        "filter": filt,
        "antialias": antialias,
    }
    dev = _device_args(batch.device)
    extra: dict[str, Any] = {}
    if batch.device.type == "cuda":
        # The filter windows live in a workspace from torch's caching
        # allocator, on the current stream like the output.
        nbytes = _core.tf_resize_workspace_bytes(refs, **kw)
        ws = torch.empty(nbytes, dtype=torch.uint8, device=batch.device)
        extra = {"workspace": ws.data_ptr(), "workspace_bytes": nbytes}
    _core.tf_resize(
        refs, **kw, out=out.data_ptr(), out_dtype=_ALL_DTYPES[dtype], scale=scale, mean=mean, std=std, **dev, **extra
    )
    return out


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


# (mode, antialias) -> (core filter, antialias), as _parse_interpolation decides them.
_FAST_FILTERS = {(m, aa): _parse_interpolation(m, aa) for m in ("nearest", "nearest-exact", "bilinear", "bicubic", "box")
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
    st = img.stride()
    sc, sh, sw = st[-3:]
    if not _keeps_layout(img, (sc, sh, sw), w):
        return None
    out = torch.empty((c, out_h, out_w) if dim == 3 else (n, c, out_h, out_w), dtype=_U8)
    refs = np.array([[img.data_ptr(), sc, sh, h, w, 0, sw]], np.int64)
    if n > 1:
        refs = np.repeat(refs, n, axis=0)
        refs[:, 0] += np.arange(n, dtype=np.int64) * st[0]
    _core.tf_resize(refs, channels=c, out_h=out_h, out_w=out_w, filter=filt, antialias=aa, out=out.data_ptr(),
                    threads=_current_settings().threads)
    return out


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
    mode = _interpolation_mode(interpolation)
    aa = _antialias(antialias)
    if _is_pil(img):
        _pil_antialias_warning(antialias)
        return pil.resize(img, *geometry.output_size(img.height, img.width, size, max_size), mode)
    img, restore = _as_chw_batch(img)
    if restore is not None:
        return restore(resize(img, size, mode, max_size, antialias))
    if _by_torch(img, mode, aa):
        return _resize_by_torch(img, size, max_size, mode, aa)
    filt, aa = _parse_interpolation(mode, aa)
    batch = _Batch(img)
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
    out = _run_resize(batch, batch.refs(), out_h, out_w, filt, aa)
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
    mode = _interpolation_mode(interpolation)
    aa = _antialias(antialias)
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
    filt, aa = _parse_interpolation(mode, aa)
    batch = _Batch(img)
    n = len(batch)
    boxes = np.tile(np.array([[top, left, height, width]], dtype=np.int64), (n, 1))
    out_h, out_w = geometry.output_size(int(height), int(width), size, None)
    out = _run_resize(batch, batch.refs(boxes), out_h, out_w, filt, aa)
    return out[0] if batch.single else out


# ---- crops, flips and padding -----------------------------------------------------------------
def crop(img: Any, top: int, left: int, height: int, width: int) -> Any:
    """torchvision v2's crop: the (..., height, width) window at (top, left).
    Inside the image it is a view (no copy); where the box reaches outside,
    the outside is zeros (as torchvision pads it).

    Args:
        img: a (..., H, W) tensor of any dtype, or a PIL image (Pillow's crop).
        top, left: the box's corner (may be negative).
        height, width: the box's size, positive.

    Returns:
        The crop: a view, a new tensor where padded, or a PIL image.

    >>> crop(img, 0, 0, 100, 100).shape
    torch.Size([3, 100, 100])
    >>> crop(img, -10, -10, 20, 20)[..., :10, :].eq(0).all()      # outside: zeros
    tensor(True)
    """
    for name, v in (("top", top), ("left", left), ("height", height), ("width", width)):
        if not _is_int(v):
            raise TypeError(f"crop: {name} must be an int, got {type(v).__name__}")
    if height <= 0 or width <= 0:
        raise ValueError(f"crop: height and width must be positive, got {height}x{width}")
    if _is_pil(img):
        return pil.crop(img, top, left, height, width)
    check_spatial(img, "crop")
    h, w = img.shape[-2:]
    bottom, right = top + height, left + width
    if top >= 0 and left >= 0 and bottom <= h and right <= w:
        return img[..., top:bottom, left:right]
    if bottom <= 0 or right <= 0 or top >= h or left >= w:  # nothing of the image in the box
        return img.new_zeros(img.shape[:-2] + (height, width))
    return pad(img, [-left, -top, right - w, bottom - h], fill=0)


def center_crop(img: Any, output_size: int | Sequence[int]) -> Any:
    """torchvision v2's center_crop: the centred window, zero-padded where the
    output is larger than the image.

    Args:
        img: a (..., H, W) tensor of any dtype, or a PIL image.
        output_size: an int, [size] or [height, width].

    Returns:
        The crop: a view where no padding is needed, or a PIL image.

    >>> center_crop(img, 224).shape
    torch.Size([3, 224, 224])
    """
    ch, cw = size_pair(output_size, "output_size")
    if _is_pil(img):
        h, w = img.height, img.width
    else:
        check_spatial(img, "center_crop")
        h, w = img.shape[-2:]
    if ch > h or cw > w:
        pl = (cw - w) // 2 if cw > w else 0
        pt = (ch - h) // 2 if ch > h else 0
        pr = (cw - w + 1) // 2 if cw > w else 0
        pb = (ch - h + 1) // 2 if ch > h else 0
        img = pad(img, [pl, pt, pr, pb], fill=0)
        h, w = (img.height, img.width) if _is_pil(img) else img.shape[-2:]
        if ch == h and cw == w:
            return img
    top = int(round((h - ch) / 2.0))
    left = int(round((w - cw) / 2.0))
    if _is_pil(img):
        return pil.crop(img, top, left, ch, cw)
    return img[..., top : top + ch, left : left + cw]


def hflip(img: Any) -> Any:
    """torchvision v2's hflip: mirrors (..., H, W) left-right into a new tensor
    (any dtype of 1, 2, 4 or 8 bytes), or a PIL image.

    >>> hflip(img)[..., 0].equal(img[..., -1])
    True
    """
    if _is_pil(img):
        return pil.hflip(img)
    check_spatial(img, "hflip")
    elem = elem_size_of(img, "hflip")
    src = img.contiguous()
    out = torch.empty_like(src, memory_format=torch.contiguous_format)
    if src.numel():
        _core.tf_hflip(
            src.data_ptr(),
            out.data_ptr(),
            rows=src.numel() // src.shape[-1],
            width=src.shape[-1],
            elem_size=elem,
            **_device_args(src.device),
        )
    return out


def vflip(img: Any) -> Any:
    """torchvision v2's vflip: mirrors (..., H, W) top-bottom into a new tensor
    (any dtype of 1, 2, 4 or 8 bytes), or a PIL image.

    >>> vflip(img)[..., 0, :].equal(img[..., -1, :])
    True
    """
    if _is_pil(img):
        return pil.vflip(img)
    check_spatial(img, "vflip")
    elem = elem_size_of(img, "vflip")
    src = img.contiguous()
    out = torch.empty_like(src, memory_format=torch.contiguous_format)
    if src.numel():
        h, w = src.shape[-2:]
        _core.tf_vflip(
            src.data_ptr(),
            out.data_ptr(),
            planes=src.numel() // (h * w),
            height=h,
            width=w,
            elem_size=elem,
            **_device_args(src.device),
        )
    return out


# ---- dtypes and normalization ------------------------------------------------------------------
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
    if img.dtype == torch.uint8 and dtype in _FLOAT_DTYPES:
        src = img.contiguous()
        out = torch.empty(src.shape, dtype=dtype, device=src.device)
        if src.numel():
            _core.tf_to_float(
                src.data_ptr(),
                out.data_ptr(),
                dtype=_FLOAT_DTYPES[dtype],
                count=src.numel(),
                scale=scale,
                **_device_args(src.device),
            )
        return out
    if img.dtype in _FLOAT_DTYPES and dtype in _FLOAT_DTYPES:
        return img.to(dtype)
    if img.dtype in _FLOAT_DTYPES and dtype == torch.uint8:
        # torchvision: scale by 255 + 1 - eps so that 1.0 maps to 255, not 256.
        return (img.mul(255 + 1.0 - 1e-3) if scale else img).to(torch.uint8)
    raise TypeError(f"to_dtype converts between uint8, float32, float16 and bfloat16; got {img.dtype} -> {dtype}")


def _per_channel(values: Any, channels: int, name: str) -> list[float]:
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
    if img.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"normalize needs a float32, float16 or bfloat16 tensor, got {img.dtype} (use to_dtype first)")
    if img.ndim < 3:
        raise ValueError(f"img must be (..., C, H, W), got shape {tuple(img.shape)}")
    channels = int(img.shape[-3])
    if not 1 <= channels <= 4:
        raise ValueError(f"img has {channels} channels; 1 to 4 are supported")
    mean_l = _per_channel(mean, channels, "mean")
    std_l = _per_channel(std, channels, "std")
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
            dtype=_FLOAT_DTYPES[img.dtype],
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


# ---- random resized crop ----------------------------------------------------------------------
def random_resized_crop_params(
    height: int | Sequence[int],
    width: int | Sequence[int],
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
    generator: np.random.Generator | int | None = None,
) -> tuple[int, int, int, int] | np.ndarray:
    """torchvision's RandomResizedCrop.get_params, drawn from a numpy Generator
    (or a seed) so that a run can be replayed: up to 10 tries of an area
    fraction in ``scale`` and a log-uniform aspect ratio in ``ratio``, then the
    central crop of the closest ratio.

    height, width: ints -> (top, left, h, w); sequences (one per image) -> an
    (N, 4) int64 array, ready for resized_crop_flip_normalize.

    >>> top, left, h, w = random_resized_crop_params(375, 500, generator=0)
    >>> boxes = random_resized_crop_params([375, 480], [500, 640], generator=rng)  # (2, 4)
    """
    rng = generator if isinstance(generator, np.random.Generator) else np.random.default_rng(generator)
    scalar = _is_int(height) and _is_int(width)
    hs = np.atleast_1d(np.asarray(height))
    ws = np.atleast_1d(np.asarray(width))
    ints = np.issubdtype(hs.dtype, np.integer) and np.issubdtype(ws.dtype, np.integer)
    if hs.shape != ws.shape or hs.ndim != 1 or not ints:
        raise TypeError("height and width must be ints, or sequences of ints of the same length")
    if (hs <= 0).any() or (ws <= 0).any():
        raise ValueError("height and width must be positive")
    if len(scale) != 2 or len(ratio) != 2:
        raise ValueError("scale and ratio must be (min, max) pairs")
    s0, s1 = (float(v) for v in scale)
    r0, r1 = (float(v) for v in ratio)
    if not (0 < s0 <= s1) or not (0 < r0 <= r1):
        raise ValueError(f"scale and ratio must be positive (min, max) pairs, got scale={scale}, ratio={ratio}")
    n = hs.shape[0]
    tries = geometry.CROP_TRIES
    # The draws in this order (a seed replays a run): the tries' area fractions, their
    # log-uniform ratios, then one (top, left) placement per image.
    fraction = rng.uniform(s0, s1, size=(n, tries))
    aspect = np.exp(rng.uniform(math.log(r0), math.log(r1), size=(n, tries)))
    u = rng.random((n, 2))
    out = geometry.resized_crop_boxes(hs, ws, fraction, aspect, u[:, 0:1], u[:, 1:2], (r0, r1))
    if scalar:
        return tuple(int(v) for v in out[0])  # type: ignore[return-value]
    return out


# ---- the fused training step ---------------------------------------------------------------------
def _as_boxes(boxes: Any, n: int) -> np.ndarray:
    if isinstance(boxes, torch.Tensor):
        if boxes.device.type != "cpu":
            raise TypeError(f"boxes must be on the host (a list, numpy array or CPU tensor), not on {boxes.device}")
        boxes = boxes.numpy()
    arr = np.asarray(boxes)
    if arr.ndim == 1 and arr.shape[0] == 4 and n == 1:
        arr = arr[None]
    if arr.shape != (n, 4):
        raise ValueError(f"boxes must be (N, 4) = ({n}, 4) (top, left, height, width), got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.floor(arr) == arr):
            arr = arr.astype(np.int64)
        else:
            raise TypeError(f"boxes must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def _check_boxes(batch: _Batch, boxes: np.ndarray) -> None:
    top, left, bh, bw = boxes.T
    h, w = batch.table[:, 3], batch.table[:, 4]
    bad = (bh <= 0) | (bw <= 0) | (top < 0) | (left < 0) | (top + bh > h) | (left + bw > w)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"boxes[{i}] = (top={top[i]}, left={left[i]}, height={bh[i]}, width={bw[i]}) is outside images[{i}] "
            f"({h[i]}x{w[i]})"
        )


def _as_flips(flips: Any, n: int) -> np.ndarray:
    if flips is None or isinstance(flips, (bool, np.bool_)):
        return np.full(n, bool(flips), dtype=bool)
    if isinstance(flips, torch.Tensor):
        if flips.device.type != "cpu":
            raise TypeError("flips must be on the host (a list, numpy array or CPU tensor)")
        flips = flips.numpy()
    arr = np.asarray(flips)
    if arr.shape != (n,):
        raise ValueError(f"flips must hold one flag per image ({n}), got shape {arr.shape}")
    if arr.dtype != bool and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"flips must be bools, got dtype {arr.dtype}")
    return arr.astype(bool)


def resized_crop_flip_normalize(
    images: ImageInput,
    boxes: Any,
    flips: Any,
    size: int | Sequence[int],
    mean: Sequence[float] | None,
    std: Sequence[float] | None,
    interpolation: Any = "bilinear",
    antialias: bool = True,
    dtype: torch.dtype = torch.float16,
    scale: bool = True,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The training hot path in one kernel: per image crop ``boxes[i]`` =
    (top, left, height, width), resize to ``size`` ([h, w] or an int for a
    square), mirror where ``flips[i]``, then ``to_dtype(scale=scale)`` and
    ``normalize(mean, std)`` in float32, cast to ``dtype``.

    Equal to ``normalize(to_dtype(hflip(resized_crop(...)), float32, scale=scale),
    mean, std).to(dtype)``, the uint8 resize being Pillow-exact (or OpenCV's
    with antialias=False). ``mean``/``std`` None: only the cast (to [0, 1]
    with ``scale``, else 0..255); ``dtype=torch.uint8`` (with mean and std
    None): the resized bytes. ``out``: a contiguous ``(N, C, h, w)`` tensor of
    ``dtype`` on the images' device to write into (returned), as torch's ``out=``.

    >>> boxes = random_resized_crop_params([375, 480], [500, 640], generator=0)
    >>> x = resized_crop_flip_normalize([a, b], boxes, [True, False], 224,
    ...                                 [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    >>> x.shape, x.dtype
    (torch.Size([2, 3, 224, 224]), torch.float16)
    """
    filt, antialias = _parse_interpolation(interpolation, antialias)
    if dtype not in _ALL_DTYPES:
        raise TypeError(f"dtype must be torch.uint8, float32, float16 or bfloat16, got {dtype}")
    batch = _Batch(images, "images")
    n = len(batch)
    box_arr = _as_boxes(boxes, n)
    _check_boxes(batch, box_arr)
    flip_arr = _as_flips(flips, n)
    out_h, out_w = size_pair(size, "size")
    if (mean is None) != (std is None):
        raise ValueError("mean and std: give both or neither")
    mean_l = std_l = None
    if mean is not None:
        if dtype == torch.uint8:
            raise ValueError("dtype=torch.uint8 gives the resized bytes; normalizing needs a float dtype")
        mean_l = _per_channel(mean, batch.channels, "mean")
        std_l = _per_channel(std, batch.channels, "std")
        if not all(std_l):
            raise ValueError("std: a channel's std is 0 (division by zero)")
    out = _run_resize(
        batch,
        batch.refs(box_arr, flip_arr),
        out_h,
        out_w,
        filt,
        antialias,
        dtype=dtype,
        scale=scale and dtype != torch.uint8,
        mean=mean_l,
        std=std_l,
        out=out,
    )
    return out[0] if batch.single else out
