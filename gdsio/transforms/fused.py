"""The training step of gdsio.transforms: random_resized_crop_params draws
RandomResizedCrop's boxes (torchvision's algorithm, replayable from a seed),
and resized_crop_flip_normalize runs crop, resize, flip, cast and normalize of
a whole batch in one kernel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from . import geometry
from .base import is_int as _is_int
from .base import size_pair
from .convert import per_channel
from .images import ALL_DTYPES, ImageBatch, ImageInput, run_resize
from .resizing import parse_interpolation

__all__ = ["random_resized_crop_params", "resized_crop_flip_normalize"]


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
    # One placement per image, whichever try fits: the same for every try.
    top, left = (np.broadcast_to(u[:, k:k + 1], fraction.shape) for k in (0, 1))
    out = geometry.resized_crop_boxes(hs, ws, fraction, aspect, top, left, (r0, r1))
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
    filt, antialias = parse_interpolation(interpolation, antialias)
    if dtype not in ALL_DTYPES:
        raise TypeError(f"dtype must be torch.uint8, float32, float16 or bfloat16, got {dtype}")
    batch = ImageBatch(images, "images")
    n = len(batch)
    box_arr = _as_boxes(boxes, n)  # the core checks each box lies inside its image
    flip_arr = _as_flips(flips, n)
    out_h, out_w = size_pair(size, "size")
    if (mean is None) != (std is None):
        raise ValueError("mean and std: give both or neither")
    mean_l = std_l = None
    if mean is not None:
        if dtype == torch.uint8:
            raise ValueError("dtype=torch.uint8 gives the resized bytes; normalizing needs a float dtype")
        mean_l = per_channel(mean, batch.channels, "mean")
        std_l = per_channel(std, batch.channels, "std")
        if not all(std_l):
            raise ValueError("std: a channel's std is 0 (division by zero)")
    out = run_resize(
        batch,
        out_h,
        out_w,
        filt,
        antialias,
        boxes=box_arr,
        flips=flip_arr,
        dtype=dtype,
        scale=scale and dtype != torch.uint8,
        mean=mean_l,
        std=std_l,
        out=out,
    )
    return out[0] if batch.single else out
