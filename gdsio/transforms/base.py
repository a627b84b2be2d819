"""What the transform modules share: how the core runs on a tensor's device,
and the argument checks every op makes the same way.

Sizes have one rule: an int, or a sequence of 1 or 2 ints (h, w). Every
transform that takes a size (resize, center_crop, resized_crop; Resize,
CenterCrop, RandomResizedCrop) reads it through ``size_arg``/``size_pair``, so
a mistake raises the same exception everywhere, as torchvision's
``_setup_size`` does: ``TypeError`` when the value is not an int or a
sequence of ints, ``ValueError`` for the wrong length or a size that is not
positive. Each message names the argument.
"""

from __future__ import annotations

import numbers
from typing import Any

import torch
from PIL import Image

from ..config import current as _current_settings

__all__ = ["check_spatial", "elem_size_of", "is_int", "is_pil", "launch_args", "size_arg", "size_pair"]


def is_int(v: Any) -> bool:
    """An integer that is not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def is_pil(v: Any) -> bool:
    """A PIL image (torchvision's functional ops dispatch those to Pillow)."""
    return isinstance(v, Image.Image)


def launch_args(device: torch.device) -> dict[str, int]:
    """How the core runs on the tensors' device (which it reads from the
    arrays): the current stream for CUDA, the thread count for the CPU."""
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        return {"stream": torch.cuda.current_stream(idx).cuda_stream}
    return {"threads": _current_settings().threads}


def check_spatial(img: Any, what: str) -> None:
    """img is a tensor of at least (H, W), or the error naming `what`."""
    if not isinstance(img, torch.Tensor):
        raise TypeError(f"{what}: img must be a torch.Tensor or a PIL image, got {type(img).__name__}")
    if img.ndim < 2:
        raise ValueError(f"{what}: img must have at least 2 dimensions (..., H, W), got shape {tuple(img.shape)}")


def elem_size_of(img: torch.Tensor, what: str) -> int:
    """The element size of the byte-moving ops (flips, pad), or the error naming `what`."""
    if img.element_size() not in (1, 2, 4, 8) or img.dtype == torch.complex128:
        raise TypeError(f"{what} supports 1, 2, 4 and 8-byte dtypes, got {img.dtype}")
    return img.element_size()


def size_arg(value: Any, name: str) -> tuple[int, ...]:
    """``value`` as a tuple of one (an int or ``[n]``) or two (``[h, w]``) positive ints.

    What a single size means (the shorter side, or a square) is the caller's rule.

    Raises:
        TypeError: naming ``name``, when ``value`` is not an int or a list/tuple of ints.
        ValueError: naming ``name``, for a sequence of other than 1 or 2 sizes, or a size <= 0.
    """
    if is_int(value):
        sizes: tuple[int, ...] = (int(value),)
    elif isinstance(value, (list, tuple)) and all(is_int(v) for v in value):
        sizes = tuple(int(v) for v in value)
    else:
        raise TypeError(f"{name} must be an int or a sequence of 1 or 2 ints, got {value!r}")
    if len(sizes) not in (1, 2):
        raise ValueError(f"{name} must be an int or a sequence of 1 or 2 ints (height, width), got {len(sizes)} of them: {value!r}")
    if any(s <= 0 for s in sizes):
        raise ValueError(f"{name} must be positive, got {value!r}")
    return sizes


def size_pair(value: Any, name: str) -> tuple[int, int]:
    """``value`` as ``(height, width)``: an int or ``[n]`` is the square ``(n, n)``.

    Raises:
        TypeError, ValueError: as ``size_arg``.
    """
    sizes = size_arg(value, name)
    return (sizes[0], sizes[-1])
