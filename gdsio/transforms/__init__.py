"""Image transforms on uint8 ``(C, H, W)`` tensors, ``(N, C, H, W)`` batches and
lists of different sizes, named and argued as
``torchvision.transforms.v2.functional``; on the GPU by gdsio's CUDA kernels,
on the CPU by their multithreaded twin (one arithmetic for both).

The functional ops are here (``functional``, with ``color`` and ``pad``); the
classes that draw random parameters per sample and call them are in
``classes`` and are used as ``gdsio.data.Compose``, ``gdsio.data.RandomResizedCrop``, ...

>>> small = gdsio.transforms.resize(imgs, [224, 224], antialias=True)
>>> x = gdsio.transforms.normalize(gdsio.transforms.to_dtype(small, torch.float32, scale=True), mean, std)
"""

from __future__ import annotations

from .functional import *  # noqa: F403
from .functional import __all__ as __all__


def __dir__() -> list[str]:
    # dir() and tab completion show the API (and the dunders), not the submodules that build it.
    return sorted({*__all__, *(n for n in globals() if n.startswith("__") and n.endswith("__"))})
