"""Boundary cases of the transform bindings (csrc/bindings/transforms.cpp, color.cpp).

Each entry is one bad call of a binding that writes memory: a destination (or
source, or workspace) on the wrong device, with the wrong strides, too small,
read-only, of the wrong dtype. Each must raise ValueError or TypeError naming
the argument before any byte moves. The CUDA paths check everything, the
workspace included, before any CUDA call, so their cases raise on a machine
without a GPU too: device arrays are host memory described as CUDA memory
(boundary.fakes.on_device).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from boundary.fakes import on_device


def _u8(*shape: int) -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.uint8)


def _read_only(shape: tuple[int, ...], dtype: Any = np.uint8) -> np.ndarray:
    a = np.zeros(shape, dtype)
    a.flags.writeable = False
    return a


def _strided(*shape: int) -> torch.Tensor:
    """A uint8 array of `shape` whose last dimension skips every other element."""
    return _u8(*shape[:-1], 2 * shape[-1])[..., ::2]


def writers(core: Any) -> dict[str, dict[str, Callable[[], object]]]:
    def resize(images: Any, out: Any, **kw: Any) -> Callable[[], object]:
        return lambda: core.tf_resize(images, out=out, filter="bilinear", antialias=True, **kw)

    def pad(src: Any, out: Any) -> Callable[[], object]:
        # One pixel on every side: (1, 4, 4) -> (1, 6, 6).
        return lambda: core.tf_pad(src, out, left=1, top=1, right=1, bottom=1, mode="constant", fill=[0])

    def color(images: Any, outs: Any, **kw: Any) -> Callable[[], object]:
        # A contrast op per image: the CUDA path needs workspace for its sums.
        n = len(images)
        ops, factors = np.tile(np.array([[2, 0, 0, 0]], np.int32), (n, 1)), np.full((n, 4), 0.5)
        return lambda: core.tf_color(images, outs, ops, factors, **kw)

    two = [_u8(3, 4, 4), _u8(3, 4, 4)]
    dev_two = [on_device(t) for t in two]
    hwc = _u8(4, 4, 3).permute(2, 0, 1)  # (C, H, W) of (H, W, C) memory: pixel stride 3
    return {
        "tf_resize": {
            "wrong device": resize(two, on_device(_u8(2, 3, 2, 2))),
            "mixed image devices": resize([two[0], on_device(two[1])], _u8(2, 3, 2, 2)),
            "wrong stride": resize(two, _strided(2, 3, 2, 2)),
            "overlapping image rows": resize([_u8(3, 1, 4).expand(3, 4, 4), two[1]], _u8(2, 3, 2, 2)),
            "interleaved pixels on a device": resize([on_device(hwc)] * 2, on_device(_u8(2, 3, 2, 2)),
                                                     workspace=on_device(_u8(1 << 12))),
            "too small": resize(two, _u8(1, 3, 2, 2)),
            "too small (one batch array)": resize(_u8(2, 3, 4, 4), _u8(2, 1, 2, 2)),
            "workspace too small": resize(dev_two, on_device(_u8(2, 3, 2, 2)), workspace=on_device(_u8(4))),
            "workspace on another device": resize(dev_two, on_device(_u8(2, 3, 2, 2)), workspace=_u8(1 << 12)),
            "no workspace": resize(dev_two, on_device(_u8(2, 3, 2, 2))),
            "read-only": resize(two, _read_only((2, 3, 2, 2))),
            "wrong dtype": resize(two, torch.zeros((2, 3, 2, 2), dtype=torch.float64)),
            "images of a wrong dtype": resize([t.float() for t in two], _u8(2, 3, 2, 2)),
            "images of other channels": resize([two[0], _u8(1, 4, 4)], _u8(2, 3, 2, 2)),
        },
        "tf_pad": {
            "wrong device": pad(_u8(1, 4, 4), on_device(_u8(1, 6, 6))),
            "wrong stride": pad(_u8(1, 4, 4), _strided(1, 6, 6)),
            "strided source": pad(_strided(1, 4, 4), _u8(1, 6, 6)),
            "too small": pad(_u8(1, 4, 4), _u8(1, 5, 5)),
            "read-only": pad(_u8(1, 4, 4), _read_only((1, 6, 6))),
            "wrong dtype": pad(_u8(1, 4, 4), torch.zeros((1, 6, 6), dtype=torch.int16)),
            "16-byte elements": pad(torch.zeros((1, 4, 4), dtype=torch.complex128),
                                    torch.zeros((1, 6, 6), dtype=torch.complex128)),
        },
        "tf_color": {
            "wrong device": color([_u8(3, 4, 4)], [on_device(_u8(3, 4, 4))]),
            "wrong stride": color([_u8(3, 4, 4)], [_strided(3, 4, 4)]),
            "interleaved source": color([hwc], [_u8(3, 4, 4)]),
            "too small": color([_u8(3, 4, 4)], [_u8(3, 4, 3)]),
            "too few outputs": color([_u8(3, 4, 4), _u8(3, 4, 4)], [_u8(3, 4, 4)]),
            "workspace too small": color([on_device(_u8(3, 4, 4))], [on_device(_u8(3, 4, 4))],
                                         workspace=on_device(_u8(4))),
            "read-only": color([_u8(3, 4, 4)], [_read_only((3, 4, 4))]),
            "wrong dtype": color([_u8(3, 4, 4)], [torch.zeros((3, 4, 4), dtype=torch.float32)]),
        },
    }
