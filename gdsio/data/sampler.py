"""The order of samples: shuffled by (seed, epoch), sharded across ranks,
cut into batches. Pure numpy; the same numbers on every machine.

Sharding follows torch's DistributedSampler: the epoch's order is padded by
repeating its head (``drop_last=False``) or cut (``drop_last=True``) to a
multiple of ``world_size``, and rank ``r`` takes every ``world_size``-th
sample from position ``r``. So ranks see disjoint (apart from the padding),
equal-length shares, and together the whole dataset.

>>> order = ShardedOrder(10, batch_size=4, shuffle=True, seed=0, rank=1, world_size=2)
>>> len(order), [b.tolist() for b in order.batches(epoch=0)]
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np

__all__ = ["ShardedOrder"]


class ShardedOrder:
    """Batches of sample indices for one rank; ``drop_last`` cuts both the
    uneven tail of the dataset (before sharding) and the last short batch."""

    def __init__(
        self,
        num_samples: int,
        *,
        batch_size: int,
        shuffle: bool = False,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
    ) -> None:
        for name, v in (("batch_size", batch_size), ("world_size", world_size)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"{name} must be a positive int, got {v!r} ({type(v).__name__})")
            if v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < world_size:
            raise ValueError(f"rank must be an int in [0, world_size={world_size}), got {rank!r}")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        self.num_samples = int(num_samples)
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.drop_last = bool(drop_last)
        if self.drop_last:
            self.per_rank = self.num_samples // world_size
        else:
            self.per_rank = math.ceil(self.num_samples / world_size)
        if self.per_rank == 0:
            raise ValueError(
                f"{self.num_samples} samples cannot be shared by {world_size} ranks with drop_last=True; "
                "use drop_last=False (pads by repeating samples) or fewer ranks"
            )

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        if self.drop_last:
            return self.per_rank // self.batch_size
        return math.ceil(self.per_rank / self.batch_size)

    def indices(self, epoch: int) -> np.ndarray:
        """This rank's sample indices for `epoch`, in order (int64)."""
        n = self.num_samples
        if self.shuffle:
            # SeedSequence mixes (seed, epoch) into the generator's state: stable across numpy versions.
            order = np.random.default_rng([self.seed, int(epoch)]).permutation(n)
        else:
            order = np.arange(n, dtype=np.int64)
        total = self.per_rank * self.world_size
        # np.resize repeats cyclically: the same padding as DistributedSampler's `indices += indices[:pad]`.
        order = np.resize(order, total) if total != n else order
        return order[self.rank : total : self.world_size].astype(np.int64, copy=False)

    def batches(self, epoch: int, start: int = 0) -> Iterator[np.ndarray]:
        """The batches of `epoch` from batch number `start` on."""
        idx = self.indices(epoch)
        for b in range(start, len(self)):
            yield idx[b * self.batch_size : (b + 1) * self.batch_size]

    def batch(self, epoch: int, batch_no: int, indices: np.ndarray | None = None) -> np.ndarray:
        """Batch number `batch_no` of `epoch` alone (`indices`: this epoch's
        ``indices(epoch)``, when the caller holds them already)."""
        if not 0 <= batch_no < len(self):
            raise IndexError(f"batch {batch_no} is out of range for {len(self)} batches an epoch")
        idx = self.indices(epoch) if indices is None else indices
        return idx[batch_no * self.batch_size : (batch_no + 1) * self.batch_size]

    def numbered_batches(self, epoch: int, start: int = 0) -> Iterator[tuple[int, np.ndarray]]:
        """``(batch number, indices)`` from batch `start` on: what the loader's
        producer walks (an order of one's own may yield a subset of them)."""
        return enumerate(self.batches(epoch, start), start=start)
