"""gdsio.data.ray over tar shards in the shard-window order
(``shuffle="window"``; gdsio.data.sampler.WindowOrder): each unit of the
window plan (a shard, or the part of one a rank takes) is read whole, once
per actor pool, and shared by every actor through Ray's object store.

A batch of the window order draws its samples from every unit of its window,
so the actors that make a window's batches all need its units. Rather than
each actor reading them (a read per sample, or the window once per actor),
the pool's ``UnitBoard`` (a Ray actor on the trainer's node, one per loader)
hands out one reference per unit: the first actor to ask for a unit starts
its read, a Ray task of no CPU on that actor's node (``read_unit``: one
ranged read of the unit's image span, as gdsio.Loader's ShardWindows reads
it), and every actor that asks later gets the same object. An actor on that
node maps it from the store; one on another node has Ray copy the unit to its
node once (its store keeps the copy for that node's other actors). The feed
hands the batches to the actors in turn (gdsio.data.ray.feed: two calls in
flight per actor, so that all of them work), not window by window, so every
node of the pool usually makes batches of every window: the store serves each
unit once, and the cluster's network carries it once more to each other node
of the pool (node to node). The object store holds the units of the window
being made and of the next (more where the calls in flight span more
windows), as gdsio.Loader's ShardWindows holds them in host memory. With each
batch an actor also asks for the next window's units, so they are read while
this window's batches are made. The board drops its reference to a unit once
the batches being asked for are past the unit's last batch by more than the
pool's calls in flight can span; a batch asked for later than that (remade
after a node's loss) has the unit read again. A lost node's units are read
again by Ray (a task's output is rebuilt from its lineage).

Package-internal (``__all__`` is empty; used by gdsio.data.ray.remote and
loader): ``UnitBoard``, ``Units``, ``UnitView``, ``units_wanted``, ``read_unit``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..remote_shards import read_shard_range
from ..sampler import WindowOrder

__all__: list[str] = []  # the mechanics of gdsio.data.ray.Loader; nothing here is API


def read_unit(path: str, etag: str, offset: int, size: int) -> Any:
    """A Ray task (num_cpus=0, on the asking actor's node): the unit's bytes
    as a uint8 array, or the read's error as a value, raised by the samples
    that use it (a SampleError each, or skipped with ``on_error="skip"``, as
    gdsio.Loader does with a unit it cannot read)."""
    try:
        data, _ = read_shard_range(path, etag, offset, size)
    except Exception as e:  # noqa: BLE001 - handed to the samples, as ShardWindows hands a read's error
        return e
    return data.numpy()


class UnitBoard:
    """The units of one actor pool at a time (a Ray actor on the trainer's
    node, made by gdsio.data.ray.loader): key ``(epoch, unit)`` -> the
    reference of its bytes, read once. ``begin`` starts a pool's round (an
    earlier pool's actors are then told "stale")."""

    def __init__(self) -> None:
        self.gen = -1
        self.refs: dict[tuple[int, int], Any] = {}
        self.last: dict[tuple[int, int], int] = {}  # key -> the position of the last batch that needs it
        self.top = -1  # the furthest batch position asked for
        self.keep = 0  # batch positions behind `top` whose units are kept
        self._read: Any = None

    def begin(self, gen: int, keep: int) -> None:
        self.gen, self.refs, self.last, self.top, self.keep = gen, {}, {}, -1, keep

    def units(self, gen: int, position: int, wanted: list[tuple[Any, ...]], ahead: list[tuple[Any, ...]],
              node: str) -> list[list[Any]] | None:
        """References of the `wanted` units' bytes, each in a list of one (a
        reference handed over, not its value); the `ahead` units' reads start
        too. Each unit: ``(epoch, unit, last position, path, etag, offset,
        size)``; `position`: the asking batch's; `node`: where reads start.
        None: a stale pool's actor (its batch is not wanted)."""
        if gen != self.gen:
            return None
        out = [[self._ref(u, node)] for u in wanted]
        for u in ahead:
            self._ref(u, node)
        if position > self.top:
            self.top = position
            for key in [key for key, last in self.last.items() if last < position - self.keep]:
                del self.refs[key], self.last[key]
        return out

    def _ref(self, unit: tuple[Any, ...], node: str) -> Any:
        epoch, u, last, path, etag, offset, size = unit
        key = (epoch, u)
        ref = self.refs.get(key)
        if ref is None:
            if self._read is None:
                import ray

                self._read = ray.remote(read_unit)
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            where = NodeAffinitySchedulingStrategy(node, soft=True)  # soft: elsewhere once that node is gone
            ref = self.refs[key] = self._read.options(num_cpus=0, scheduling_strategy=where).remote(
                path, etag, offset, size)
        self.last[key] = max(last, self.last.get(key, last))
        return ref


class UnitView:
    """One actor call's units, as the loader's producer reads shard members
    in the window order (gdsio.data.producer's ``windows``: ``units_of``,
    ``want``, ``taken``, ``member``, ``close``): `data` maps a unit to
    ``(its bytes, their offset in the shard)`` or to its read's error."""

    def __init__(self, order: WindowOrder, epoch: int, ranges: np.ndarray, data: dict[int, Any]) -> None:
        self.plan = order.window_plan(epoch)
        self.bs, self.ranges, self.data = order.batch_size, ranges, data

    def units_of(self, batch_no: int, count: int) -> list[int]:
        at = batch_no * self.bs
        return self.plan.unit_of[at: at + count].tolist()

    def want(self, units: list[int], samples: list[int] | None = None, batch_no: int = -1) -> None:
        pass  # asked for before the call: the board's reads (none alone: the board reads whole units)

    def taken(self, units: list[int]) -> None:
        pass

    def member(self, u: int, index: int) -> tuple[Any, None]:
        got = self.data[u]
        if isinstance(got, BaseException):
            raise got
        data, lo = got
        off, size = int(self.ranges[index, 0]), int(self.ranges[index, 1])
        # A copy of the member: Ray's mapping of the store is read-only, and a decoder may write its input.
        return torch.from_numpy(np.array(data[off - lo: off - lo + size])), None  # counted by no meter here

    def close(self, finish: bool = False) -> None:
        pass


class Units:
    """An actor's side of the window order: which units a batch needs, with
    their reads' arguments and how long the board keeps each."""

    def __init__(self, table: Any, order: WindowOrder, first_epoch: int) -> None:
        self.table, self.order, self.first_epoch = table, order, first_epoch
        self._last: dict[int, np.ndarray] = {}  # epoch -> per unit, the batch number of its last sample

    def position(self, epoch: int, k: int) -> int:
        """Batch k of `epoch`'s position in the pool's sequence of batches (across its epochs)."""
        return (epoch - self.first_epoch) * len(self.order) + k

    def _last_batches(self, epoch: int) -> np.ndarray:
        got = self._last.get(epoch)
        if got is None:
            plan = self.order.window_plan(epoch)
            last = np.zeros(len(plan.units), np.int64)
            np.maximum.at(last, plan.unit_of, np.arange(len(plan.unit_of), dtype=np.int64))
            got = self._last[epoch] = last // self.order.batch_size
            for e in [e for e in self._last if e < epoch - 1]:
                del self._last[e]
        return got

    def wanted(self, epoch: int, k: int, count: int) -> tuple[list[int], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """(the units batch k of `epoch` reads, in order; the board's entries
        for them; those of the next window's units, to read ahead)."""
        plan = self.order.window_plan(epoch)
        at = k * self.order.batch_size
        us = sorted(set(plan.unit_of[at: at + count].tolist()))
        nxt = int(plan.window_of[us[-1]]) + 1 if us else 0
        ahead = np.flatnonzero(plan.window_of == nxt).tolist()
        return us, [self._entry(epoch, u) for u in us], [self._entry(epoch, u) for u in ahead]

    def _entry(self, epoch: int, u: int) -> tuple[Any, ...]:
        plan, t = self.order.window_plan(epoch), self.table
        shard, first, end = (int(v) for v in plan.units[u])
        lo = int(t.ranges[first, 0])
        hi = int(t.ranges[end - 1, 0] + t.ranges[end - 1, 1])
        last = self.position(epoch, int(self._last_batches(epoch)[u]))
        return (epoch, u, last, t.shards.paths[shard], t.shards.etags[shard], lo, hi - lo)


def units_wanted(units: Units, board: Any, gen: int, epoch: int, k: int, count: int, node: str) -> UnitView | None:
    """The units batch k of `epoch` (`count` samples) reads, from the board
    (its reads started if not yet), as a UnitView; None: a stale pool."""
    import ray

    us, wanted, ahead = units.wanted(epoch, k, count)
    refs = ray.get(board.units.remote(gen, units.position(epoch, k), wanted, ahead, node))
    if refs is None:
        return None
    values = ray.get([r[0] for r in refs])
    data = {u: (v if isinstance(v, BaseException) else (v, w[5])) for u, v, w in zip(us, values, wanted)}
    return UnitView(units.order, epoch, units.table.ranges, data)
