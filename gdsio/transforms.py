"""Image transforms on uint8 ``(C, H, W)`` tensors and ``(N, C, H, W)`` batches,
named and shaped as ``torchvision.transforms.v2.functional``.

CUDA tensors run gdsio's CUDA kernels on the current stream; CPU tensors run
the C++ twin of those kernels (``gdsio.settings(threads=...)`` threads). Both
share one implementation of the arithmetic, so they give the same bytes.

``resize`` follows a reference library exactly, not approximately:

* ``antialias=True`` (the default) is Pillow's ``Image.resize`` (filters
  widened by the downscale factor, pixel centres at +0.5, windows clipped at
  the edges and renormalised, 22-bit fixed point rounded to uint8 between the
  horizontal and the vertical pass); ``"nearest"`` is Pillow's NEAREST.
* ``antialias=False`` is OpenCV's ``cv2.resize`` with ``INTER_LINEAR`` or
  ``INTER_NEAREST`` (no antialiasing; "bicubic" and "box" are not offered).

Channels are resampled independently (as torchvision does). Pillow resizes
RGBA images with premultiplied alpha; gdsio does not.

>>> import gdsio.transforms as T
>>> small = T.resize(img, [224, 224])                     # == PIL's BILINEAR
>>> batch = T.resize([img_a, img_b], [224, 224])          # (2, C, 224, 224), one launch
>>> boxes = T.random_resized_crop_params([h_a, h_b], [w_a, w_b], generator=0)
>>> x = T.resized_crop_flip_normalize([img_a, img_b], boxes, [True, False], 224,
...                                   mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from . import _core
from .config import current as _current_settings
from .sizes import is_int as _is_int
from .sizes import size_arg, size_pair

__all__ = [
    "center_crop",
    "crop",
    "hflip",
    "normalize",
    "random_resized_crop_params",
    "resize",
    "resized_crop",
    "resized_crop_flip_normalize",
    "to_dtype",
]


def __dir__() -> list[str]:
    # dir() and tab completion show the API (and the dunders), not what was imported to build it (np, torch, Any).
    return sorted({*__all__, *(n for n in globals() if n.startswith("__") and n.endswith("__"))})

ImageInput = torch.Tensor | Sequence[torch.Tensor]

FILTERS = ("nearest", "bilinear", "bicubic", "box")
_FLOAT_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
_ALL_DTYPES = {torch.uint8: "uint8", **_FLOAT_DTYPES}


# ---- argument parsing ----------------------------------------------------------------------
def _parse_interpolation(interpolation: Any, antialias: Any) -> tuple[str, bool]:
    """(filter name, antialias): a name or torchvision's InterpolationMode (by its value)."""
    if not isinstance(antialias, bool):
        raise TypeError(f"antialias must be a bool, got {type(antialias).__name__}")
    name = interpolation
    if not isinstance(name, str):
        # torchvision.transforms.InterpolationMode is an Enum whose values are
        # these names; comparing by value needs no torchvision import.
        value = getattr(interpolation, "value", None)
        if not isinstance(value, str):
            raise TypeError(
                f"interpolation must be one of {', '.join(FILTERS)} or a torchvision InterpolationMode, "
                f"got {interpolation!r}"
            )
        name = value
    name = name.lower()
    if name == "nearest-exact":  # torchvision's name for Pillow's nearest
        return "nearest", True
    if name not in FILTERS:
        raise ValueError(f"interpolation {name!r} is not supported; use one of {', '.join(FILTERS)}")
    if not antialias and name not in ("nearest", "bilinear"):
        raise ValueError(
            f"interpolation {name!r} with antialias=False: antialias=False follows OpenCV (INTER_NEAREST, "
            "INTER_LINEAR) and is defined for 'nearest' and 'bilinear' only"
        )
    return name, antialias


def _output_size(h: int, w: int, size: Any, max_size: int | None) -> tuple[int, int]:
    """torchvision's rule: [h, w], or an int (or [int]) for the shorter side."""
    size = size_arg(size, "size")
    if len(size) == 2:
        if max_size is not None:
            raise ValueError("max_size is only allowed when size is a single int (the shorter side)")
        return int(size[0]), int(size[1])
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = int(size[0]), int(size[0] * long / short)
    if max_size is not None:
        if not _is_int(max_size) or max_size <= new_short:
            raise ValueError(f"max_size = {max_size} must be an int strictly greater than the requested size {size[0]}")
        if new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), int(max_size)
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    return new_h, new_w


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


class _Batch:
    """Images as the core takes them: an (N, 5) int64 table of (data,
    channel_stride, row_stride, height, width), built in one pass; the kernels
    read every image through it, so a list is one launch."""

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
            if img.stride(-1) != 1:
                img = img.contiguous()
                self.keep.append(img)
            s0, sc, sh, _ = img.stride()
            self.table = np.empty((n, 5), np.int64)
            self.table[:, 0] = img.data_ptr() + np.arange(n, dtype=np.int64) * s0
            self.table[:, 1:] = (sc, sh, h, w)
            self.device = img.device
            self._shapes = {(int(h), int(w))}
        elif isinstance(img, (torch.Tensor, list, tuple)):
            self.single = isinstance(img, torch.Tensor)
            if self.single and img.ndim != 3:
                raise ValueError(f"{name} must be (C, H, W) or (N, C, H, W), got shape {tuple(img.shape)}")
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
                if st[2] != 1:
                    t = t.contiguous()
                    self.keep.append(t)
                    st = t.stride()
                rows.append((t.data_ptr(), st[0], st[1], h, w))
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
        """The (N, 6) table the core takes; boxes crop (top, left, h, w), flips mirror."""
        t = np.empty((len(self), 6), np.int64)
        t[:, :5] = self.table
        t[:, 5] = 0 if flips is None else flips
        if boxes is not None:
            t[:, 0] += boxes[:, 0] * t[:, 2] + boxes[:, 1]
            t[:, 3:5] = boxes[:, 2:4]
        return t


def _device_args(device: torch.device) -> dict[str, int]:
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        return {"device": idx, "stream": torch.cuda.current_stream(idx).cuda_stream}
    return {"device": -1, "threads": _current_settings().threads}


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
) -> torch.Tensor:
    out = torch.empty((len(refs), batch.channels, out_h, out_w), dtype=dtype, device=batch.device)
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
def resize(
    img: ImageInput,
    size: int | Sequence[int],
    interpolation: Any = "bilinear",
    max_size: int | None = None,
    antialias: bool = True,
) -> torch.Tensor:
    """Resizes uint8 images: a (C, H, W) tensor, an (N, C, H, W) batch, or a list
    of (C, H, W) tensors of different sizes (-> one (N, C, H', W') tensor, one
    kernel launch for the whole list on the GPU).

    ``size``: [h, w], or an int for the shorter side (torchvision's rule; with
    a list of different aspect ratios give [h, w]). ``interpolation``:
    "nearest", "bilinear", "bicubic", "box" or torchvision's InterpolationMode.
    ``antialias=True`` equals ``PIL.Image.resize`` (reducing_gap=None),
    ``antialias=False`` equals ``cv2.resize`` (INTER_LINEAR / INTER_NEAREST).

    >>> resize(img, [224, 224]).shape
    torch.Size([3, 224, 224])
    >>> resize([a, b, c], [224, 224], interpolation="bicubic").shape
    torch.Size([3, 3, 224, 224])
    """
    filt, antialias = _parse_interpolation(interpolation, antialias)
    batch = _Batch(img)
    shapes = batch.shapes()
    if isinstance(size, (list, tuple)) and len(size) == 2:  # [h, w]: the same for every image
        shapes = shapes[:1]
    sizes = {_output_size(h, w, size, max_size) for h, w in shapes}
    if len(sizes) > 1:
        raise ValueError(
            f"size={size!r} gives images of this list different output shapes ({sorted(sizes)[:3]}...); "
            "give size as [h, w] to stack them"
        )
    out_h, out_w = sizes.pop()
    out = _run_resize(batch, batch.refs(), out_h, out_w, filt, antialias)
    return out[0] if batch.single else out


def resized_crop(
    img: ImageInput,
    top: int,
    left: int,
    height: int,
    width: int,
    size: int | Sequence[int],
    interpolation: Any = "bilinear",
    antialias: bool = True,
) -> torch.Tensor:
    """crop then resize (torchvision's resized_crop), without copying the crop.

    >>> resized_crop(img, 10, 20, 200, 300, [224, 224]).shape
    torch.Size([3, 224, 224])
    """
    filt, antialias = _parse_interpolation(interpolation, antialias)
    batch = _Batch(img)
    n = len(batch)
    for i in range(n):
        _check_box_values(*batch.shape(i), top, left, height, width, "img" if batch.single else f"img[{i}]")
    boxes = np.tile(np.array([[top, left, height, width]], dtype=np.int64), (n, 1))
    out_h, out_w = _output_size(int(height), int(width), size, None)
    out = _run_resize(batch, batch.refs(boxes), out_h, out_w, filt, antialias)
    return out[0] if batch.single else out


# ---- crops and flips ------------------------------------------------------------------------
def _check_box_values(h: int, w: int, top: Any, left: Any, height: Any, width: Any, what: str) -> None:
    for name, v in (("top", top), ("left", left), ("height", height), ("width", width)):
        if not _is_int(v):
            raise TypeError(f"{what}: {name} must be an int, got {type(v).__name__}")
    if height <= 0 or width <= 0:
        raise ValueError(f"{what}: height and width must be positive, got {height}x{width}")
    if top < 0 or left < 0 or top + height > h or left + width > w:
        raise ValueError(
            f"{what}: the box (top={top}, left={left}, height={height}, width={width}) is outside the {h}x{w} image"
        )


def crop(img: torch.Tensor, top: int, left: int, height: int, width: int) -> torch.Tensor:
    """The (..., height, width) window at (top, left): a view, no copy. Unlike
    torchvision, a box reaching outside the image is an error, not padding.

    >>> crop(img, 0, 0, 100, 100).shape
    torch.Size([3, 100, 100])
    """
    if not isinstance(img, torch.Tensor):
        raise TypeError(f"img must be a torch.Tensor, got {type(img).__name__}")
    if img.ndim < 2:
        raise ValueError(f"img must have at least 2 dimensions (..., H, W), got shape {tuple(img.shape)}")
    h, w = img.shape[-2:]
    _check_box_values(h, w, top, left, height, width, "crop")
    return img[..., top : top + height, left : left + width]


def center_crop(img: torch.Tensor, output_size: int | Sequence[int]) -> torch.Tensor:
    """torchvision's center_crop: the centred window, zero-padded where the
    output is larger than the image.

    >>> center_crop(img, 224).shape
    torch.Size([3, 224, 224])
    """
    if not isinstance(img, torch.Tensor):
        raise TypeError(f"img must be a torch.Tensor, got {type(img).__name__}")
    if img.ndim < 2:
        raise ValueError(f"img must have at least 2 dimensions (..., H, W), got shape {tuple(img.shape)}")
    ch, cw = size_pair(output_size, "output_size")
    h, w = img.shape[-2:]
    if ch > h or cw > w:
        pl = (cw - w) // 2 if cw > w else 0
        pt = (ch - h) // 2 if ch > h else 0
        pr = (cw - w + 1) // 2 if cw > w else 0
        pb = (ch - h + 1) // 2 if ch > h else 0
        img = torch.nn.functional.pad(img, [pl, pr, pt, pb], value=0)
        h, w = img.shape[-2:]
        if ch == h and cw == w:
            return img
    top = round((h - ch) / 2.0)
    left = round((w - cw) / 2.0)
    return img[..., top : top + ch, left : left + cw]


def hflip(img: torch.Tensor) -> torch.Tensor:
    """Mirrors (..., H, W) left-right into a new tensor (uint8 or 1, 2, 4-byte dtypes).

    >>> hflip(img)[..., 0].equal(img[..., -1])
    True
    """
    if not isinstance(img, torch.Tensor):
        raise TypeError(f"img must be a torch.Tensor, got {type(img).__name__}")
    if img.ndim < 2:
        raise ValueError(f"img must have at least 2 dimensions (..., H, W), got shape {tuple(img.shape)}")
    if img.element_size() not in (1, 2, 4) or img.is_complex():
        raise TypeError(f"hflip supports 1, 2 and 4-byte dtypes, got {img.dtype}")
    src = img.contiguous()
    out = torch.empty_like(src, memory_format=torch.contiguous_format)
    if src.numel():
        _core.tf_hflip(
            src.data_ptr(),
            out.data_ptr(),
            rows=src.numel() // src.shape[-1],
            width=src.shape[-1],
            elem_size=src.element_size(),
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
    hs = hs.astype(np.int64)
    ws = ws.astype(np.int64)
    area = (hs * ws).astype(np.float64)[:, None]
    tries = 10
    target = area * rng.uniform(s0, s1, size=(n, tries))
    aspect = np.exp(rng.uniform(math.log(r0), math.log(r1), size=(n, tries)))
    cw = np.round(np.sqrt(target * aspect)).astype(np.int64)  # round half to even, as Python's round
    ch = np.round(np.sqrt(target / aspect)).astype(np.int64)
    ok = (cw > 0) & (cw <= ws[:, None]) & (ch > 0) & (ch <= hs[:, None])
    first = np.argmax(ok, axis=1)
    found = ok[np.arange(n), first]
    bh = np.where(found, ch[np.arange(n), first], 0)
    bw = np.where(found, cw[np.arange(n), first], 0)
    u = rng.random((n, 2))
    top = np.floor(u[:, 0] * (hs - bh + 1)).astype(np.int64)
    left = np.floor(u[:, 1] * (ws - bw + 1)).astype(np.int64)
    # The fallback: the central crop, clamped to the ratio range.
    in_ratio = ws / hs
    fb_w = np.where(in_ratio < r0, ws, np.where(in_ratio > r1, np.round(hs * r1).astype(np.int64), ws))
    fb_h = np.where(in_ratio < r0, np.round(ws / r0).astype(np.int64), hs)
    out = np.stack(
        [
            np.where(found, top, (hs - fb_h) // 2),
            np.where(found, left, (ws - fb_w) // 2),
            np.where(found, bh, fb_h),
            np.where(found, bw, fb_w),
        ],
        axis=1,
    ).astype(np.int64)
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
) -> torch.Tensor:
    """The training hot path in one kernel: per image crop ``boxes[i]`` =
    (top, left, height, width), resize to ``size`` ([h, w] or an int for a
    square), mirror where ``flips[i]``, then ``to_dtype(scale=scale)`` and
    ``normalize(mean, std)`` in float32, cast to ``dtype``.

    Equal to ``normalize(to_dtype(hflip(resized_crop(...)), float32, scale=scale),
    mean, std).to(dtype)``, the uint8 resize being Pillow-exact (or OpenCV's
    with antialias=False). ``mean``/``std`` None: only the cast (to [0, 1]
    with ``scale``, else 0..255); ``dtype=torch.uint8`` (with mean and std
    None): the resized bytes.

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
    )
    return out[0] if batch.single else out
