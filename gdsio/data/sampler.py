"""The order of samples: shuffled by (seed, epoch), sharded across ranks,
cut into batches. Pure numpy; the same numbers on every machine.

Sharding follows torch's DistributedSampler: the epoch's order is padded by
repeating its head (``drop_last=False``) or cut (``drop_last=True``) to a
multiple of ``world_size``, and rank ``r`` takes every ``world_size``-th
sample from position ``r``. So ranks see disjoint (apart from the padding),
equal-length shares, and together the whole dataset.

``WindowOrder`` is the shard-window order of tar shards on an object store:
whole shards are read, ``shuffle_window`` at a time, and the samples are
shuffled within each window of shards (see its docstring).

>>> order = ShardedOrder(10, batch_size=4, shuffle=True, seed=0, rank=1, world_size=2)
>>> len(order), [b.tolist() for b in order.batches(epoch=0)]
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterator, Sequence

import numpy as np

__all__ = ["ShardedOrder", "WindowOrder", "WindowPlan"]


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
        if not isinstance(shuffle, (bool, np.bool_)):  # "window" is another order: never a truthy flag here
            raise TypeError(f"shuffle must be a bool (the shard-window order is WindowOrder), got {shuffle!r}")
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


@dataclasses.dataclass(frozen=True)
class WindowPlan:
    """One rank's epoch in the shard-window order: the samples in order, and
    the units the shards are read in (a unit: a run of one shard's samples,
    read by one ranged read of the bytes from its first image member to the
    end of its last)."""

    indices: np.ndarray  # int64: the rank's sample indices, in order
    unit_of: np.ndarray  # int64: per position of `indices`, the unit its sample is read with
    units: np.ndarray  # int64 (units, 3): shard, first sample index, end sample index (exclusive)
    window_of: np.ndarray  # int64: per unit, its window


class WindowOrder(ShardedOrder):
    """The shard-window order (``gdsio.Loader(shuffle="window")``) of tar
    shards, whose shard ``j`` holds samples ``shard_starts[j]`` to
    ``shard_starts[j+1] - 1``; a pure function of (seed, epoch, rank).

    1. The shards are permuted by (seed, epoch), the same on every rank, and
       their samples laid end to end in that order, each shard's in tar order.
    2. Ranks split that sequence as DistributedSampler splits its order, but
       into contiguous runs rather than every ``world_size``-th sample: padded
       by repeating its head (or cut with ``drop_last``) to ``per_rank *
       world_size`` samples, rank ``r`` takes positions ``r * per_rank`` to
       ``(r + 1) * per_rank - 1``. So ranks get disjoint, equal shares
       covering the dataset (padding aside), and each rank reads whole shards
       but for at most the two its run starts and ends in, of which it reads
       its own part only.
    3. A rank's shards (or parts) are cut into windows of ``shuffle_window``
       in order; the samples of each window are permuted by (seed, epoch,
       rank, window). Batches are cut from the result as by ``ShardedOrder``.

    A reader needs a window's shards whole before its first batch: the
    loader reads the window being consumed and the next one (at most
    ``2 * shuffle_window`` shards in memory, ``shuffle_window`` read at once).

    >>> order = WindowOrder([0, 4, 8, 12], batch_size=2, shuffle_window=2, seed=0)
    >>> order.window_plan(0).units.tolist()   # (shard, first, end) in read order
    """

    def __init__(self, shard_starts: Sequence[int] | np.ndarray, *, batch_size: int, shuffle_window: int = 4,
                 seed: int = 0, rank: int = 0, world_size: int = 1, drop_last: bool = False) -> None:
        if not isinstance(shuffle_window, int) or isinstance(shuffle_window, bool) or shuffle_window < 1:
            raise ValueError(f"shuffle_window must be a positive int (shards per window), got {shuffle_window!r}")
        starts = np.asarray(shard_starts, np.int64)
        if starts.ndim != 1 or len(starts) < 2 or starts[0] != 0 or np.any(np.diff(starts) < 0):
            raise ValueError("shard_starts must rise from 0, one entry per shard and one for the end")
        super().__init__(int(starts[-1]), batch_size=batch_size, shuffle=True, seed=seed, rank=rank,
                         world_size=world_size, drop_last=drop_last)
        # The order's name, as state_dict saves it: a loader resumes only in the order it saved.
        self.shuffle = "window"  # type: ignore[assignment]
        self.shard_starts = starts
        self.shuffle_window = shuffle_window
        self._plans: dict[int, WindowPlan] = {}

    def window_plan(self, epoch: int) -> WindowPlan:
        """This rank's plan of `epoch` (kept for the last epoch asked)."""
        plan = self._plans.get(epoch)
        if plan is None:
            plan = self._plan(int(epoch))
            self._plans = {epoch: plan}
        return plan

    def _plan(self, epoch: int) -> WindowPlan:
        starts, n = self.shard_starts, self.num_samples
        counts = np.diff(starts)
        perm = np.random.default_rng([self.seed, epoch]).permutation(len(counts))
        perm = perm[counts[perm] > 0]  # an empty shard is no unit
        at = np.concatenate([[0], np.cumsum(counts[perm])])  # where each shard starts in the epoch's sequence
        units: list[tuple[int, int, int]] = []
        pos, end = self.rank * self.per_rank, (self.rank + 1) * self.per_rank
        while pos < end:  # positions past n wrap to the head: DistributedSampler's padding
            q = pos % n
            j = int(np.searchsorted(at, q, side="right")) - 1
            take = min(int(at[j + 1]) - q, end - pos)
            first = int(starts[perm[j]]) + q - int(at[j])
            units.append((int(perm[j]), first, first + take))
            pos += take
        table = np.asarray(units, np.int64).reshape(-1, 3)
        window_of = np.arange(len(table), dtype=np.int64) // self.shuffle_window
        indices, unit_of = [], []
        for w in range(int(window_of[-1]) + 1 if len(table) else 0):
            ks = np.flatnonzero(window_of == w)
            idx = np.concatenate([np.arange(table[k, 1], table[k, 2]) for k in ks])
            uid = np.repeat(ks, table[ks, 2] - table[ks, 1])
            p = np.random.default_rng([self.seed, epoch, self.rank, w]).permutation(len(idx))
            indices.append(idx[p])
            unit_of.append(uid[p])
        return WindowPlan(np.concatenate(indices).astype(np.int64), np.concatenate(unit_of).astype(np.int64),
                          table, window_of)

    def indices(self, epoch: int) -> np.ndarray:
        """This rank's sample indices for `epoch`, in order (int64)."""
        return self.window_plan(epoch).indices
