"""What every batch transform shares: the base class ``BatchTransform``, the
batch being transformed (``BatchInfo``, published by the loader through
``batch_context`` and read with ``current_batch``), and the per-sample
randomness drawn from it (``uniforms``: a pure function of seed, epoch, sample
index and the transform's salt, so a resumed run draws the same parameters).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import zlib
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

__all__ = ["BatchInfo", "BatchTransform", "batch_context", "current_batch", "uniforms"]


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


def fresh_info(n: int) -> BatchInfo:
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


def info_for(n: int) -> BatchInfo:
    info = current_batch()
    if info is None:
        return fresh_info(n)
    if len(info.indices) != n:
        raise ValueError(f"the batch holds {n} images but the current batch info names {len(info.indices)} samples")
    return info


def salt_of(t: Any, position: int) -> int:
    # Distinct streams per transform (a crop and a flip must not share draws),
    # the same in the fused and the unfused path.
    return zlib.crc32(f"{type(t).__name__}:{position}".encode())



# ---- helpers ---------------------------------------------------------------------------


def image_sizes(images: Any) -> list[tuple[int, int]]:
    if isinstance(images, (list, tuple)):
        return [(int(t.shape[-2]), int(t.shape[-1])) for t in images]
    if images.dim() == 3:
        return [(int(images.shape[-2]), int(images.shape[-1]))]
    return [(int(images.shape[-2]), int(images.shape[-1]))] * int(images.shape[0])


def count_images(images: Any) -> int:
    if isinstance(images, (list, tuple)):
        return len(images)
    return 1 if images.dim() <= 3 else int(images.shape[0])



def each(images: Any, fn: Callable[[Any], Any]) -> Any:
    return [fn(t) for t in images] if isinstance(images, (list, tuple)) else fn(images)


def batch_out(seq: list[Any], size: Sequence[int], dtype: torch.dtype) -> torch.Tensor | None:
    """The fused op's output from the current batch's allocator (a loader's
    reused host buffers), or None (a fresh tensor)."""
    info = current_batch()
    if info is None or info.alloc is None or not seq or seq[0].device.type != "cpu":
        return None
    return info.alloc((len(seq), int(seq[0].shape[-3]), int(size[0]), int(size[1])), dtype)


def stack_if_same(images: list[Any]) -> Any:
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
        return self._apply(images, salt_of(self, -1))

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
