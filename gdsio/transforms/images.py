"""uint8 images as gdsio's resize kernels take them: ``ImageBatch`` checks a
tensor, an (N, C, H, W) batch or a list of (C, H, W) tensors of different sizes
once (copying a layout the core cannot read as it is), and the core views each
image, so a list is one kernel launch; ``run_resize`` makes that launch (crop
boxes, flips, the cast and normalize ride along: the fused training step is the
same call).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image

from .. import _core
from .base import launch_args

__all__ = ["ALL_DTYPES", "FLOAT_DTYPES", "ImageBatch", "check_image", "keeps_layout", "run_resize"]

ImageInput = torch.Tensor | Sequence[torch.Tensor] | Image.Image

FLOAT_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
ALL_DTYPES = {torch.uint8: "uint8", **FLOAT_DTYPES}


def check_image(t: Any, name: str) -> tuple[int, int, int]:
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


def keeps_layout(t: torch.Tensor, st: Sequence[int], w: int) -> bool:
    """Whether the core reads this (C, H, W) layout as it is: planes (last
    stride 1) anywhere; on the CPU also interleaved pixels (a (C,H,W) view of
    (H,W,C) memory, a channels_last batch) or any positive strides. Rows and
    channels must not overlap (an expanded tensor's zero strides). The core
    refuses the others (it checks every view); they are copied first here, so
    that the caller's tensor is resized all the same."""
    if st[-1] != 1 and t.device.type != "cpu":
        return False
    return st[-1] >= 1 and st[-2] >= (w - 1) * st[-1] + 1 and (t.shape[-3] == 1 or st[-3] >= 1)


class ImageBatch:
    """Images as the core takes them: one (N, C, H, W) tensor or a list of
    (C, H, W) tensors (``images``), each in a layout the core reads as it is;
    the core views every image and checks its dtype, channels, device and
    strides, so a list is one launch."""

    def __init__(self, img: ImageInput, name: str = "img") -> None:
        self.single = False
        self.images: torch.Tensor | list[torch.Tensor]
        if isinstance(img, torch.Tensor) and img.ndim == 4:
            if img.dtype != torch.uint8:
                raise TypeError(f"{name} must be a uint8 image batch, got dtype {img.dtype}")
            n = int(img.shape[0])
            if n == 0:
                raise ValueError(f"{name} is an empty batch (shape {tuple(img.shape)})")
            self.channels, h, w = check_image(img[0], f"{name}[0]")
            if not keeps_layout(img, img.stride(), w):
                img = img.contiguous()
            self.images = img
            self.count = n
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
            images = []
            channels = set()
            hw = set()
            u8, tensor = torch.uint8, torch.Tensor
            dev0 = items[0].get_device() if isinstance(items[0], tensor) else None  # -1: the host
            for i, t in enumerate(items):
                # A few attribute reads per image; the checks that name the
                # problem run only when one fails. Devices are checked here,
                # so that a mixed list is named as the caller's argument.
                if (type(t) is tensor and t.dtype is u8 and t.dim() == 3 and 1 <= t.shape[0] <= 4 and t.numel()
                        and t.get_device() == dev0):
                    c, h, w = t.shape
                else:
                    c, h, w = check_image(t, name if self.single else f"{name}[{i}]")
                    if t.device != items[0].device:
                        raise ValueError(f"{name}[{i}] is on {t.device}, but {name}[0] is on {items[0].device}")
                if not keeps_layout(t, t.stride(), w):
                    t = t.contiguous()
                images.append(t)
                channels.add(c)
                hw.add((h, w))
            self._shapes = hw
            if len(channels) > 1:
                c0 = items[0].shape[0]
                for i, t in enumerate(items):
                    if t.shape[0] != c0:
                        raise ValueError(f"{name}[{i}] has {t.shape[0]} channels, {name}[0] has {c0}")
            self.channels = channels.pop()
            self.device = items[0].device
            self.images = images
            self.count = len(images)
        else:
            raise TypeError(f"{name} must be a uint8 tensor or a list of them, got {type(img).__name__}")
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{name} lives on {self.device}; gdsio transforms run on cpu or cuda tensors")

    def __len__(self) -> int:
        return self.count

    def shapes(self) -> list[tuple[int, int]]:
        """The distinct (H, W) of the batch, sorted."""
        return sorted(self._shapes)


def run_resize(
    batch: ImageBatch,
    out_h: int,
    out_w: int,
    filt: str,
    antialias: bool,
    boxes: np.ndarray | None = None,
    flips: np.ndarray | None = None,
    dtype: torch.dtype = torch.uint8,
    scale: bool = False,
    mean: list[float] | None = None,
    std: list[float] | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """One launch over the batch: each image cropped to ``boxes[i]`` (top,
    left, height, width; the core checks each lies inside its image), resized,
    mirrored where ``flips[i]``, cast (and normalized) into ``out``."""
    shape = (len(batch), batch.channels, out_h, out_w)
    if out is None:
        out = torch.empty(shape, dtype=dtype, device=batch.device)
    elif (tuple(out.shape) != shape or out.dtype != dtype or out.device != batch.device
          or not out.is_contiguous()):
        raise ValueError(f"out must be a contiguous {tuple(shape)} {dtype} tensor on {batch.device}; got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    run: dict[str, Any] = launch_args(batch.device)
    if batch.device.type == "cuda":
        # The filter windows live in a workspace from torch's caching
        # allocator, on the current stream like the output; the core asks
        # for the bytes it needs.
        device = batch.device
        run["workspace"] = lambda nbytes: torch.empty(nbytes, dtype=torch.uint8, device=device)
    _core.tf_resize(batch.images, out=out, filter=filt, antialias=antialias, boxes=boxes, flips=flips, scale=scale,
                    mean=mean, std=std, **run)
    return out
