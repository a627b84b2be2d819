"""``Loader.dataset``: the loader's samples as a map-style dataset, with the
attributes code written for torchvision's ImageFolder reads.

>>> ds = loader.dataset
>>> len(ds), ds.classes[:2], ds.class_to_idx["n01440764"]
(1281167, ['n01440764', 'n01443537'], 0)
>>> image, label = ds[0]            # decoded as the loader decodes it, before its transform
>>> path, label = ds.samples[0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .. import image
from ..io import read_into
from ..tensors import load_npy, npy_from_bytes
from .remote_shards import read_shard_range
from .sources import SampleTable

__all__ = ["SampleDataset"]


class _Samples(Sequence):  # type: ignore[type-arg]
    """(path, label) per sample, computed on access (a file of 50 million
    records costs no list of 50 million tuples)."""

    def __init__(self, table: SampleTable) -> None:
        self._table = table

    def __len__(self) -> int:
        return len(self._table)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        k = _index(i, len(self))
        f = int(self._table.file_of(np.asarray([k]))[0])
        return self._table.files.paths[f], int(self._table.files.labels[f])


def _index(i: Any, n: int) -> int:
    if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
        raise TypeError(f"dataset indices must be integers, got {type(i).__name__}")
    k = int(i) + n if i < 0 else int(i)
    if not 0 <= k < n:
        raise IndexError(f"sample index {int(i)} is out of range for {n} samples")
    return k


class SampleDataset:
    """The samples of a Loader, as torchvision's ImageFolder shows them:
    ``len(ds)`` (every sample, all ranks), ``ds[i] -> (sample, label)``,
    ``classes``, ``class_to_idx``, ``samples`` / ``imgs`` (``(path, label)``
    per sample; for raw records, the file holding the record) and
    ``targets`` (the labels; -1 where the source has none).

    ``ds[i]`` reads and decodes sample ``i`` on the loader's device with its
    image mode (an image: uint8 ``(C,H,W)``; npy: its tensor; raw: one
    record), without the loader's transform, which gdsio runs on batches.
    For one-off looks (the loader reads in bulk, not through this).

    >>> image, label = loader.dataset[0]
    """

    def __init__(self, table: SampleTable, device: Any, image_mode: str) -> None:
        self._table = table
        self._device = device
        self._mode = image_mode
        self.samples = _Samples(table)
        self.imgs = self.samples  # ImageFolder's older name for samples

    @property
    def kind(self) -> str:
        return self._table.kind

    @property
    def classes(self) -> list[str]:
        """Class names, index = label (ImageFolder layout); empty otherwise."""
        return list(self._table.classes)

    @property
    def class_to_idx(self) -> dict[str, int]:
        return {name: k for k, name in enumerate(self._table.classes)}

    @property
    def targets(self) -> list[int]:
        return self._table.labels_of(np.arange(len(self._table))).tolist()

    def __len__(self) -> int:
        return len(self._table)

    def __getitem__(self, i: Any) -> tuple[Any, int]:
        k = _index(i, len(self))
        t = self._table
        path, label = self.samples[k]
        if t.ranges is not None:  # a tar shard's member: its bytes, decoded (or an npy's loaded) as a file's
            offset, size = (int(v) for v in t.ranges[k])
            etag = t.shards.etags[t.shards.shard_of(k)] if t.shards is not None else ""
            data, _ = read_shard_range(path, etag, offset, size)  # a remote shard's ETag checked
            if t.kind == "npy":
                return npy_from_bytes(data, t.describe(k), device=self._device), label
            return image.decode(data, device=self._device, mode=self._mode), label
        if t.kind == "image":
            return image.read(path, device=self._device, mode=self._mode), label
        if t.kind == "npy":
            return load_npy(path, device=self._device), label
        out = torch.empty(t.record_bytes, dtype=torch.uint8, device=self._device)
        read_into(path, out, offset=int(t.offset_of(np.asarray([k]))[0]), size=t.record_bytes)
        return out.view(t.record_dtype).view(t.record_shape), label

    def __repr__(self) -> str:
        classes = f", {len(self._table.classes)} classes" if self._table.classes else ""
        return f"SampleDataset({len(self)} {self.kind} samples{classes}, device={self._device})"
