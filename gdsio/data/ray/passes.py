"""One pass of gdsio.data.ray.Loader: the local producer's and the Ray feed's
batches merged in batch order, the "auto" board that decides each batch's
owner once, and the watch on the CPU nodes (a lost one is named, never waited
for without bound)."""

from __future__ import annotations

import dataclasses
import logging
import math
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from ..flow import POLL_S, ByteBudget, batch_nbytes, put_until_stopped, track_threads
from ..producer import Producer
from ..sampler import ShardedOrder
from .remote import _describe, _nodes, _pipeline, _ray, _Spec

if TYPE_CHECKING:
    from .loader import Loader

__all__: list[str] = []  # the mechanics of gdsio.data.ray.Loader; nothing here is API

log = logging.getLogger("gdsio")

AUTO_START = 0.5  # local_share="auto" starts here, then follows the waits
AUTO_STEP = 0.05  # how far one waited-for batch moves the share
AUTO_WAITED = 0.1  # a batch "was waited for" when the wait is this share of the step
HEALTH_EVERY_S = 2.0  # while waiting for a remote batch, how often the nodes are looked at


class _BoardImpl:
    """local_share="auto": who makes each batch, decided once, at the first
    question from either side, from the share at that moment (a Ray actor on
    the trainer's node). Retried remote tasks get the same answer, so a batch
    is never made by both."""

    def __init__(self) -> None:
        self.pass_id = -1
        self.share = AUTO_START
        self.credit = 0.0
        self.owners: dict[int, str] = {}

    def begin(self, pass_id: int, share: float) -> None:
        self.pass_id, self.share, self.credit, self.owners = pass_id, share, 0.0, {}

    def set_share(self, pass_id: int, share: float) -> None:
        if pass_id == self.pass_id:
            self.share = share

    def owner(self, pass_id: int, batch_no: int) -> str:
        if pass_id != self.pass_id:
            return "stale"
        who = self.owners.get(batch_no)
        if who is None:
            self.credit += self.share
            who = "local" if self.credit >= 1.0 - 1e-9 else "remote"
            if who == "local":
                self.credit -= 1.0
            self.owners[batch_no] = who
        return who


def _fixed_local(share: float, k: int) -> bool:
    """Fixed share: batch k is made here for an even spread of ``share`` of the batches."""
    return math.floor((k + 1) * share + 1e-9) > math.floor(k * share + 1e-9)


class _LocalOrder:
    """The local producer's order: the rank's batches that this node makes."""

    def __init__(self, order: ShardedOrder, mine: Callable[[int], bool]) -> None:
        self._order, self._mine = order, mine
        self.seed = order.seed

    def numbered_batches(self, epoch: int, start: int = 0) -> Iterator[tuple[int, np.ndarray]]:
        for k, idx in self._order.numbered_batches(epoch, start):
            if self._mine(k):
                yield k, idx

class _Signalling(queue.Queue):  # type: ignore[type-arg]
    """A bounded queue that wakes the consumer on every put."""

    def __init__(self, maxsize: int, arrived: threading.Event) -> None:
        super().__init__(maxsize)
        self._arrived = arrived

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        self._arrived.set()


class _RemoteFeed:
    """Thread ``gdsio-ray``: iterates the Ray dataset, joins the rows of each
    batch, copies them into (pinned) tensors and queues ``("batch", k, images,
    labels, node, seconds)``, then ``("end",)``, or ``("error", exc)``."""

    def __init__(self, ds: Any, q: queue.Queue[Any], stop: threading.Event, pinned: bool, prefetch: int) -> None:
        self.ds, self.q, self.stop, self.pinned, self.prefetch = ds, q, stop, pinned, prefetch

    def run(self) -> None:
        try:
            parts: list[dict[str, np.ndarray]] = []
            have = 0
            for block in self.ds.iter_batches(batch_size=None, batch_format="numpy", prefetch_batches=self.prefetch):
                if self.stop.is_set():
                    return
                bn = np.asarray(block.get("batch_no", ()))
                if bn.size == 0:
                    continue  # an actor call that made nothing (a batch this node makes)
                cuts = [0, *(np.flatnonzero(np.diff(bn)) + 1).tolist(), len(bn)]
                for a, b in zip(cuts[:-1], cuts[1:]):
                    parts.append({c: v[a:b] for c, v in block.items()})
                    have += b - a
                    if have == int(parts[0]["count"][0]):
                        if not self._put(self._batch(parts)):
                            return
                        parts, have = [], 0
            if parts:
                raise RuntimeError(f"gdsio.data.ray: batch {int(parts[0]['batch_no'][0])} came incomplete "
                                   f"({have} of {int(parts[0]['count'][0])} rows)")
            self._put(("end",))
        except BaseException as e:  # reaches the consumer, which re-raises it
            self._put(("error", e))

    def _batch(self, parts: list[dict[str, np.ndarray]]) -> tuple[Any, ...]:
        images = self._tensor([p["image"] for p in parts])
        labels = self._tensor([p["label"] for p in parts])
        first = parts[0]
        return ("batch", int(first["batch_no"][0]), images, labels, str(first["node"][0]), float(first["seconds"][0]))

    def _tensor(self, arrays: list[np.ndarray]) -> Any:
        """One copy, from Ray's read-only buffers into a tensor of our own (pinned for a GPU)."""
        import torch

        n = sum(len(a) for a in arrays)
        dtype = torch.from_numpy(np.empty(0, arrays[0].dtype)).dtype
        out = torch.empty((n, *arrays[0].shape[1:]), dtype=dtype, pin_memory=self.pinned)
        view, at = out.numpy(), 0
        for a in arrays:
            view[at : at + len(a)] = a
            at += len(a)
        return out

    def abort(self) -> None:
        """Ends the dataset's execution from another thread: a feed blocked in
        Ray (its node lost, no other to run on) then returns. Ray Data has no
        public call for it; its executor's own shutdown, where there is one."""
        executor = getattr(self.ds, "_current_executor", None)
        if executor is not None:
            try:
                executor.shutdown(force=True)
            except Exception as e:  # noqa: BLE001 - best effort while closing; the thread is a daemon
                log.warning("gdsio.data.ray.Loader: could not stop the Ray dataset: %s: %s", type(e).__name__, e)

    def _put(self, item: tuple[Any, ...]) -> bool:
        return put_until_stopped(self.q, item, self.stop)


class _OffloadPass:
    """One pass: the local producer's and the Ray feed's batches, merged in
    batch order. Its threads stop when it ends, on close(), on an exception
    in next() and when it is garbage collected."""

    def __init__(self, loader: Loader, epoch: int, start: int, gen: int, pass_id: int) -> None:
        self._loader = loader
        self._epoch, self._gen, self._pass_id = epoch, gen, pass_id
        self._k, self._end = start, len(loader)
        self._closed = False
        self._last: float | None = None
        self._stop = threading.Event()
        self._arrived = threading.Event()
        self._budget = ByteBudget(loader._local.prefetch_bytes)
        inner = loader._local
        self._heads: dict[str, Any] = {"local": None, "remote": None}
        self._queues: dict[str, queue.Queue[Any]] = {}
        self._threads: dict[str, threading.Thread] = {}
        loader._meter.begin_pass(epoch, start)
        share = loader.local_share
        board = None
        if share == "auto":
            ray = _ray()
            board = loader._board_handle()
            ray.get(board.begin.remote(pass_id, loader._share), timeout=loader.timeout)
            mine: Callable[[int], bool] = lambda k: ray.get(board.owner.remote(pass_id, k), timeout=loader.timeout) == "local"  # noqa: E731
        else:
            mine = lambda k: _fixed_local(float(share), k)  # noqa: E731
        self._board = board
        # This node: gdsio.Loader's producer over the batches it keeps.
        if share != 0.0:
            plan = dataclasses.replace(inner._plan(epoch, start), order=_LocalOrder(inner.order, mine), meter=loader._meter)
            self._queues["local"] = _Signalling(inner.prefetch, self._arrived)
            producer = Producer(plan, self._queues["local"], self._stop, self._budget)
            self._threads["local"] = threading.Thread(target=producer.run, name="gdsio-loader", daemon=True)
        # The CPU nodes: Ray Data over the batches they make.
        rows = None if share == 1.0 else loader._input_rows("all" if share == "auto" else "fixed")
        self._watch: dict[str, dict[str, Any]] = {}
        self._feed: _RemoteFeed | None = None
        if rows is not None:
            o = inner.order
            spec = _Spec(table=inner.table, num_samples=o.num_samples, batch_size=o.batch_size, shuffle=o.shuffle,
                         seed=o.seed, rank=o.rank, world_size=o.world_size, drop_last=o.drop_last, epoch=epoch,
                         transform=inner.transform, mode=inner.image_mode, on_error=inner.on_error,
                         threads=max(1, int(loader.cpus_per_actor)), per_batch=True, start=start, board=board,
                         pass_id=pass_id)
            ds = _pipeline(rows, spec, loader.placement, actors=loader._actors or 1, cpus=loader.cpus_per_actor,
                           batch_size=1)
            self._watch = {n["NodeID"]: n for n in _nodes(loader.placement)}
            self._queues["remote"] = _Signalling(inner.prefetch, self._arrived)
            self._feed = _RemoteFeed(ds, self._queues["remote"], self._stop, inner.device.type == "cuda", inner.prefetch)
            self._threads["remote"] = threading.Thread(target=self._feed.run, name="gdsio-ray", daemon=True)
        self._lost_reported: set[str] = set()
        self._started: set[str] = set()  # the sides that handed over a batch in this pass ("auto" steering)
        for t in self._threads.values():
            t.start()
        track_threads(self._stop, *self._threads.values())  # stopped and joined at exit if still running

    def __iter__(self) -> "_OffloadPass":
        return self

    def __next__(self) -> tuple[Any, Any]:
        if self._closed:
            raise StopIteration
        t0 = time.perf_counter()
        try:
            while True:
                if self._k >= self._end:
                    self._loader._local._finished(self._gen, self._epoch)
                    self.close()
                    raise StopIteration
                got = self._take(self._k)
                k = self._k
                self._k += 1
                if got is not None:
                    break
                self._loader._local._consumed(self._gen, k)  # every sample of it skipped: nothing to yield
        except StopIteration:
            raise
        except BaseException:
            self.close()
            raise
        side, images, labels = got
        t1 = time.perf_counter()
        wait, wall = t1 - t0, t1 - (self._last if self._last is not None else t0)
        self._loader._meter.consumed(wait, wall, int(images.shape[0]))
        self._last = t1
        self._steer(side, wait, wall)
        self._loader._local._consumed(self._gen, k)
        return images, labels

    # ---- merging the two streams --------------------------------------------------------

    def _head(self, side: str) -> Any:
        """The next item of a side's queue, without taking it (None: not yet there; ("end",) once it ended)."""
        if side not in self._queues:
            return ("end",)
        if self._heads[side] is None:
            try:
                self._heads[side] = self._queues[side].get_nowait()
            except queue.Empty:
                if not self._threads[side].is_alive():  # ended without a last word: never wait on it
                    try:
                        self._heads[side] = self._queues[side].get_nowait()
                    except queue.Empty:
                        raise RuntimeError(f"gdsio.data.ray.Loader: the {side} producer ended without a result") from None
        head = self._heads[side]
        if head is not None and head[0] == "error":
            err = head[1]
            if side == "remote":
                lost = self._lost_nodes()
                if lost and isinstance(err, Exception):
                    err.add_note("gdsio.data.ray.Loader: lost during this epoch: " + ", ".join(_describe(n) for n in lost))
            raise err
        return head

    def _take(self, k: int) -> tuple[str, Any, Any] | None:
        """Batch k from whichever side made it, or None when neither did (all its samples skipped)."""
        waited_from = time.perf_counter()
        next_health = waited_from + HEALTH_EVERY_S
        while True:
            self._arrived.clear()
            heads = {side: self._head(side) for side in ("local", "remote")}
            for side, head in heads.items():
                if head is not None and head[0] in ("batch", "empty") and head[1] == k:
                    self._heads[side] = None
                    return None if head[0] == "empty" else self._hand_over(side, head)
            if all(h is not None and (h[0] == "end" or h[1] > k) for h in heads.values()):
                return None  # both sides are past k: it had no sample left
            now = time.perf_counter()
            if now - waited_from > self._loader.timeout:
                raise TimeoutError(f"gdsio.data.ray.Loader: batch {k} of epoch {self._epoch} did not come within "
                                   f"{self._loader.timeout:g} s (timeout=); {self._status()}")
            if heads["remote"] is None and now >= next_health:
                self._check_nodes(k, now - waited_from)
                next_health = now + HEALTH_EVERY_S
            self._arrived.wait(POLL_S)

    def _hand_over(self, side: str, head: tuple[Any, ...]) -> tuple[str, Any, Any]:
        import torch

        loader = self._loader
        if side == "local":
            _, k, images, labels, ready = head
            self._budget.release(batch_nbytes(images, labels))
            if ready is not None:  # CUDA: order the consumer's stream after the batch, no host sync
                cur = torch.cuda.current_stream(loader.device)
                cur.wait_event(ready)
                for t in (images, labels):
                    if isinstance(t, torch.Tensor) and t.is_cuda:
                        t.record_stream(cur)
            loader._sides.add("local", int(images.shape[0]))
            return side, images, labels
        _, k, images, labels, node, seconds = head
        if loader.device.type == "cuda":  # from pinned memory, on the consumer's current stream
            images = images.to(loader.device, non_blocking=True)
            labels = labels.to(loader.device, non_blocking=True)
        loader._sides.add("remote", int(images.shape[0]), node, seconds)
        return side, images, labels

    def _steer(self, side: str, wait: float, wall: float) -> None:
        """local_share="auto": a batch the consumer waited for moves the share away from the side that made it.
        A side's first batch of the pass does not count: its wait is the start (Ray Data starts an actor pool
        per pass, seconds), not a sign that the side lags."""
        loader = self._loader
        if self._board is None:
            return
        first = side not in self._started
        self._started.add(side)
        if first or wall <= 0 or wait < AUTO_WAITED * wall:
            return
        step = AUTO_STEP if side == "remote" else -AUTO_STEP
        share = min(1.0, max(0.0, loader._share + step))
        if share != loader._share:
            loader._share = share
            self._board.set_share.remote(self._pass_id, share)  # not waited for

    # ---- a lost node --------------------------------------------------------------------

    def _lost_nodes(self) -> list[dict[str, Any]]:
        alive = {n["NodeID"] for n in _ray().nodes() if n.get("Alive")}
        return [n for nid, n in self._watch.items() if nid not in alive]

    def _check_nodes(self, k: int, waited: float) -> None:
        """While a remote batch is awaited: a lost node with another to take
        its work is logged (Ray remakes its batches there); with none left,
        raises, naming the node, rather than waiting for ever."""
        lost = self._lost_nodes()
        if not lost:
            return
        names = ", ".join(_describe(n) for n in lost)
        left = _nodes(self._loader.placement)
        if left:
            new = [n for n in lost if n["NodeID"] not in self._lost_reported]
            if new:
                log.warning("gdsio.data.ray.Loader: lost %s in epoch %d; Ray remakes its batches on %d other node(s)",
                            ", ".join(_describe(n) for n in new), self._epoch, len(left))
                self._lost_reported.update(n["NodeID"] for n in new)
            return
        raise RuntimeError(
            f"gdsio.data.ray.Loader: lost {names} in epoch {self._epoch} (batch {k} awaited for {waited:.0f} s), and no "
            f"live node has {self._loader.placement} to remake its batches; add such a node, or pass local_share=1.0 "
            "to make every batch on this node"
        )

    def _status(self) -> str:
        parts = []
        for side in ("local", "remote"):
            if side in self._threads:
                alive = "running" if self._threads[side].is_alive() else "ended"
                parts.append(f"{side} producer {alive}, {self._queues[side].qsize()} batch(es) queued")
        lost = self._lost_nodes() if self._watch else []
        if lost:
            parts.append("lost: " + ", ".join(_describe(n) for n in lost))
        return "; ".join(parts)

    # ---- the end ------------------------------------------------------------------------

    def close(self) -> None:
        """Stops the pass's threads (a Ray read in flight ends with its dataset)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        for side, t in self._threads.items():
            if side == "remote":
                t.join(timeout=2 * POLL_S)
                if t.is_alive() and self._feed is not None:  # blocked in Ray, not at our queue: end the execution
                    self._feed.abort()
            t.join(timeout=60 if side == "local" else 10)
            if t.is_alive():
                log.warning("gdsio.data.ray.Loader: the %s producer did not stop in time", side)
        for q in self._queues.values():
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        self._heads = {"local": None, "remote": None}

    def __del__(self) -> None:
        self._closed = True
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
