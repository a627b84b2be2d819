"""uint8 images as gdsio's resize kernels take them: ``ImageBatch`` checks a
tensor, an (N, C, H, W) batch or a list of (C, H, W) tensors of different sizes
once and packs them into one table, so a list is one kernel launch;
``run_resize`` makes that launch (crop boxes, flips, the cast and normalize
ride along: the fused training step is the same call).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image

from .. import _core
from .base import device_args as _device_args

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
    channels must not overlap (an expanded tensor's zero strides): the core
    refuses those, so they are copied first."""
    if st[-1] != 1 and t.device.type != "cpu":
        return False
    return st[-1] >= 1 and st[-2] >= (w - 1) * st[-1] + 1 and (t.shape[-3] == 1 or st[-3] >= 1)


class ImageBatch:
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
            self.channels, h, w = check_image(img[0], f"{name}[0]")
            if not keeps_layout(img, img.stride(), w):
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
                    c, h, w = check_image(t, name if self.single else f"{name}[{i}]")
                st = t.stride()
                if not keeps_layout(t, st, w):
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


def run_resize(
    batch: ImageBatch,
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
        refs, **kw, out=out.data_ptr(), out_dtype=ALL_DTYPES[dtype], scale=scale, mean=mean, std=std, **dev, **extra
    )
    return out
