"""One pass of gdsio.data.ray.Loader: the local producer's and the Ray feed's
batches merged in batch order, the "auto" board that gives each batch to
the side that asks for it first, and the watch on the CPU nodes (a lost one is named, never waited
for without bound; with every one lost, this node makes the rest of the epoch).

Package-internal (``__all__`` is empty; used by gdsio.data.ray.loader):
``OffloadShared``, ``Board``, ``Execution``, ``OffloadPass``, ``fixed_local``; ``RemoteFeed`` and
``RemoteBatch`` (gdsio.data.ray.feed's, here for bench/bench_ray.py)."""

from __future__ import annotations

import dataclasses
import logging
import math
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np
import torch

from ..flow import END, NOT_YET, POLL_S, ByteBudget, EmptyBatch, End, Failed, ReadyBatch, batch_nbytes, track_threads
from ..loader import consumed, finished, pass_plan
from ..meter import Meter
from ..producer import Producer
from ..sampler import ShardedOrder
from .feed import ActorFeed, FeedPlan, RemoteBatch, RemoteFeed, calls_in_flight, split_transform  # noqa: F401 - bench_ray.py
from .remote import ActorSpec, describe_node, import_ray, node_loss, placed_nodes

if TYPE_CHECKING:
    from ..loader import Loader as GdsioLoader
    from .loader import Loader

__all__: list[str] = []  # the mechanics of gdsio.data.ray.Loader; nothing here is API

log = logging.getLogger("gdsio")

HEALTH_EVERY_S = 2.0  # while waiting for a remote batch, how often the nodes are looked at
NODE_DEAD_WAIT_S = 30.0  # Ray said work was lost with a node: how long its node may take to show as dead

@dataclasses.dataclass
class OffloadShared:
    """What a gdsio.data.ray.Loader shares with its passes and executions
    (package-internal: made by gdsio.data.ray.loader.Loader, used here)."""

    local: GdsioLoader  # this node's gdsio.Loader: its pipeline, settings, position and state
    meter: Meter  # the merged stream's counts
    sides: Any  # gdsio.data.ray.loader's counts of which side made what (.add)
    arrived: threading.Event  # set by every put of either side: the consumer wakes
    actors: int | None  # the actor pool's size (None: local_share=1.0, no pool)
    share: float | None  # the fixed share this node makes (None: "auto", each batch to the side that asks first)
    board: Any = None  # local_share="auto": the Board (an object of this process), made with the first execution


class Board:
    """local_share="auto": each batch goes to the side that asks for it first,
    and stays theirs (package-internal: gdsio.data.ray.loader makes it). Both
    sides ask in the trainer's process, each as it has room to start a batch:
    this node's producer as its pipeline takes the next one (its queue and
    the batches in hand), the feed when it has a call free (``2 * actors +
    1`` in flight; not before an actor of the pool is ready) and before it
    calls an actor (a batch made here costs no call; the CPU nodes never ask
    across the network). So each side makes batches at the rate it can,
    from the pass's first batch: no estimate to wait for, none to drift,
    the dynamic sharding of tf.data service's workers. An answer never
    changes, so a batch is never made by both, and which side made a batch
    never changes what it holds (the order decides that). One round of
    answers per execution (which may span epochs: ``epochs_per_pool``); an
    earlier execution is told "stale".

    The producer's questions are answered only within ``horizon`` batches of
    the consumer's position (``advance``): a batch the CPU nodes hold costs
    the producer nothing to pass over, and without the bound it would take
    batches far past the ones the feed is making, which the consumer then
    waits for at the end of the pass."""

    def __init__(self) -> None:
        self.gen = -1
        self.owners: dict[tuple[int, int], str] = {}
        self.per = 0  # batches an epoch
        self.horizon = 0  # the producer's questions: at most this far past the consumer (0: no limit)
        self.at = 0  # the consumer's position: epoch * per + the batch it takes next
        self._lock = threading.Lock()  # the producer's, the feed's and the consumer's threads
        self._moved = threading.Condition(self._lock)

    def begin(self, gen: int, *, epoch: int = 0, start: int = 0, per: int = 0, horizon: int = 0) -> None:
        with self._lock:
            self.gen, self.owners = gen, {}
            self.per, self.horizon, self.at = per, horizon, epoch * per + start
            self._moved.notify_all()

    def advance(self, gen: int, epoch: int, batch_no: int) -> None:
        """The consumer takes batch `batch_no` of `epoch` next: the producer may ask further."""
        with self._lock:
            if gen == self.gen:
                self.at = max(self.at, epoch * self.per + batch_no)
                self._moved.notify_all()

    def _far(self, epoch: int, batch_no: int) -> bool:
        return self.horizon > 0 and epoch * self.per + batch_no >= self.at + self.horizon

    def owner(self, gen: int, epoch: int, batch_no: int, side: str) -> str | None:
        """"local" or "remote", the batch's side (`side`, the asker's, if no side had asked for it before), or
        "stale"; None for the producer's question (`side` "local") about a batch no side holds yet and beyond
        the horizon: ask again after ``wait``. A batch the consumer has passed that no side held (the feed
        asking late, after the producer made the whole epoch) is "local": no call."""
        if side not in ("local", "remote"):
            raise ValueError(f"side must be 'local' or 'remote'; got {side!r}")
        with self._lock:
            if gen != self.gen:
                return "stale"
            key = (epoch, batch_no)
            who = self.owners.get(key)
            if who is None:
                if epoch * self.per + batch_no < self.at:
                    return "local"  # the consumer is past it (its epoch forgotten): nothing to make, no call
                if side == "local" and self._far(epoch, batch_no):
                    return None
                who = self.owners[key] = side
            return who

    def wait(self, gen: int, epoch: int, batch_no: int, stop: threading.Event) -> None:
        """Returns once batch `batch_no` of `epoch` is within the horizon, it is decided, `gen` is stale, or
        `stop` is set (looked at every 0.1 s)."""
        with self._lock:
            while (gen == self.gen and (epoch, batch_no) not in self.owners and self._far(epoch, batch_no)
                   and not stop.is_set()):
                self._moved.wait(0.1)

    def forget(self, gen: int, epoch: int) -> None:
        """Drops the answers for epochs before `epoch` (their batches are all handed out)."""
        with self._lock:
            if gen == self.gen:
                self.owners = {key: who for key, who in self.owners.items() if key[0] >= epoch}


def fixed_local(share: float, k: int) -> bool:
    """Fixed share: batch k is made here for an even spread of ``share`` of the
    batches (package-internal: gdsio.data.ray.loader too)."""
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


class _BoardOrder:
    """local_share="auto": the local producer's order, the batches the Board gives this node, each asked for as
    the producer reaches it (it has room to start it); one beyond the board's horizon is NOT_YET (the producer
    finishes what it has read, then ``wait``s for the consumer to come nearer)."""

    def __init__(self, order: ShardedOrder, board: Board, gen: int) -> None:
        self._order, self._board, self._gen = order, board, gen
        self.seed = order.seed
        self._asking = (0, 0)

    def numbered_batches(self, epoch: int, start: int = 0) -> Iterator[Any]:
        for k, idx in self._order.numbered_batches(epoch, start):
            while (who := self._board.owner(self._gen, epoch, k, "local")) is None:
                self._asking = (epoch, k)
                yield NOT_YET
            if who == "local":
                yield k, idx

    def wait(self, stop: threading.Event) -> None:
        self._board.wait(self._gen, *self._asking, stop)


class _Signalling(queue.Queue):  # type: ignore[type-arg]
    """A bounded queue that wakes the consumer on every put."""

    def __init__(self, maxsize: int, arrived: threading.Event) -> None:
        super().__init__(maxsize)
        self._arrived = arrived

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        self._arrived.set()


class Execution:
    """One execution: its actor pool and its feed thread (gdsio.data.ray.feed), the CPU
    nodes' batches of the epochs from `epoch` to ``last_epoch`` (the loader's
    ``epochs_per_pool``), from batch `start` of the first. It outlives a pass:
    a pass that begins where the last one stopped, within its epochs, goes on
    with it, and its actors have made the next epoch's first batches while
    the consumer finished the last one (a pool takes seconds to start)."""

    def __init__(self, loader: Loader, shared: OffloadShared, epoch: int, start: int, gen: int, count: int,
                 spec_args: dict[str, Any]) -> None:
        inner = shared.local
        self.gen = gen
        self.last_epoch = epoch + loader.epochs_per_pool - 1
        self.next = (epoch, start)  # where the consumer stands: a pass that begins here goes on with this execution
        self.failed = False
        self.head: Any = None  # the next item, taken from the queue and not yet handed over
        self.stop = threading.Event()
        self.q: queue.Queue[RemoteBatch | Failed | End] = _Signalling(inner.prefetch, shared.arrived)
        self.lost_reported: set[str] = set()
        o = inner.order
        # The CPU nodes send uint8 where the chain ends in a float cast: the consumer's device casts (Tail).
        remote_tf, tail = split_transform(inner.transform) if loader.cast_on == "device" else (inner.transform, None)
        spec = ActorSpec(table=inner.table, num_samples=o.num_samples, batch_size=o.batch_size, shuffle=o.shuffle,
                         seed=o.seed, rank=o.rank, world_size=o.world_size, drop_last=o.drop_last, epoch=epoch,
                         transform=remote_tf, mode=inner.image_mode, on_error=inner.on_error,
                         threads=max(1, int(loader.cpus_per_actor)), per_batch=True, gen=gen, **spec_args)
        actors = shared.actors or 1
        options = dict(num_cpus=loader.cpus_per_actor, scheduling_strategy="SPREAD", **loader.placement.remote_args())
        board = shared.board if loader.local_share == "auto" else None
        # "auto": the feed asks the board for each place it has a call free for, and calls an actor only for one
        # the CPU nodes got (this node's producer had not asked for it first).
        skip = (lambda place: board.owner(gen, *spec.place(place), "remote") != "remote") if board is not None else None
        plan = FeedPlan(spec, count, actors, options, loader.placement, tail, inner.device.type == "cuda", window=calls_in_flight(actors),
                        transport=loader.transport, skip=skip)
        self.watch = {n["NodeID"]: n for n in placed_nodes(loader.placement)}
        self.feed = ActorFeed(plan, self.q, self.stop)
        self.thread = threading.Thread(target=self.feed.run, name="gdsio-ray", daemon=True)
        self.thread.start()
        track_threads(self.stop, self.thread)  # stopped and joined at exit if still running

    def continues(self, epoch: int, start: int) -> bool:
        return not self.failed and not self.stop.is_set() and (epoch, start) == self.next and epoch <= self.last_epoch

    def peek(self, epoch: int) -> RemoteBatch | Failed | End | None:
        """The next item for a pass of `epoch` without taking it: None (not there yet), a batch of that epoch,
        END (the execution ended, or its next batch is of a later epoch), or Failed."""
        while True:
            if self.head is None:
                try:
                    self.head = self.q.get_nowait()
                except queue.Empty:
                    if self.thread.is_alive():
                        return None
                    try:  # ended: its last word may have come meanwhile
                        self.head = self.q.get_nowait()
                    except queue.Empty:
                        self.failed = True
                        raise RuntimeError("gdsio.data.ray.Loader: the remote feed ended without a result") from None
            head = self.head
            if isinstance(head, Failed):
                self.failed = True
            if not isinstance(head, RemoteBatch) or head.epoch == epoch:
                return head
            if head.epoch > epoch:
                return END
            self.head = None  # an earlier epoch's batch (cannot happen: passes go forward): dropped

    def take(self) -> RemoteBatch | Failed | End | None:
        head, self.head = self.head, None
        return head

    def close(self) -> None:
        """Ends the execution: the feed stops, the actor pool goes (a feed waiting on a result returns)."""
        if self.stop.is_set():
            return
        self.stop.set()
        self.feed.abort()  # its actors end (their CPUs go back); a feed blocked on a result returns
        self.thread.join(timeout=10)
        if self.thread.is_alive():
            log.warning("gdsio.data.ray.Loader: the remote feed did not stop in time")
        while True:
            try:
                self.q.get_nowait()
            except queue.Empty:
                break
        self.head = None


class OffloadPass:
    """One pass: the local producer's and the Ray feed's batches, merged in
    batch order. Its threads stop when it ends, on close(), on an exception
    in next() and when it is garbage collected; the Ray execution it reads
    from is the loader's, and goes on into the next pass when that one
    continues it (``epochs_per_pool``)."""

    def __init__(self, loader: Loader, shared: OffloadShared, epoch: int, start: int, gen: int,
                 ex: Execution | None, all_here: bool = False) -> None:
        self._loader = loader
        self._shared = shared
        self._epoch, self._gen = epoch, gen
        self._k, self._end = start, len(loader)
        self._closed = False
        self._last: float | None = None
        self._stop = threading.Event()
        self._arrived = shared.arrived
        self._budget = ByteBudget(shared.local.prefetch_bytes)
        self._local_head: Any = None
        self._queue: queue.Queue[Any] | None = None
        self._thread: threading.Thread | None = None
        self._ex = ex
        self._switches = 0  # times this pass went over to making every batch here (the CPU nodes lost)
        shared.meter.begin_pass(epoch, start)
        share = loader.local_share
        self._board = shared.board if share == "auto" else None
        inner = shared.local
        if share == 1.0 or all_here:
            order: Any = inner.order  # every batch, in the loader's own order (a window order's units read whole)
        elif share == "auto":
            order = _BoardOrder(inner.order, shared.board, ex.gen if ex is not None else -1)
        else:
            order = _LocalOrder(inner.order, lambda k: fixed_local(float(share), k))
        # This node: gdsio.Loader's producer over the batches it keeps.
        if share != 0.0 or all_here:
            self._start_local(start, order)

    def _start_local(self, start: int, order: Any) -> None:
        """This node's producer: gdsio.Loader's pipeline over the batches of `order` from `start`."""
        inner = self._shared.local
        plan = dataclasses.replace(pass_plan(inner, self._epoch, start), order=order, meter=self._shared.meter)
        self._queue = _Signalling(inner.prefetch, self._arrived)
        producer = Producer(plan, self._queue, self._stop, self._budget)
        self._thread = threading.Thread(target=producer.run, name="gdsio-loader", daemon=True)
        self._thread.start()
        track_threads(self._stop, self._thread)  # stopped and joined at exit if still running

    def __iter__(self) -> "OffloadPass":
        return self

    def __next__(self) -> tuple[Any, Any]:
        if self._closed:
            raise StopIteration
        t0 = time.perf_counter()
        try:
            while True:
                if self._k >= self._end:
                    finished(self._shared.local, self._gen, self._epoch)
                    self._moved(self._epoch + 1, 0)
                    self.close()
                    raise StopIteration
                got = self._take(self._k)
                k = self._k
                self._k += 1
                self._moved(self._epoch, self._k)
                if got is not None:
                    break
                consumed(self._shared.local, self._gen, k)  # every sample of it skipped: nothing to yield
        except StopIteration:
            raise
        except BaseException:
            self.close()
            raise
        images, labels = got
        t1 = time.perf_counter()
        wait, wall = t1 - t0, t1 - (self._last if self._last is not None else t0)
        self._shared.meter.consumed(wait, wall, int(images.shape[0]))
        self._last = t1
        consumed(self._shared.local, self._gen, k)
        return images, labels

    def _moved(self, epoch: int, k: int) -> None:
        """Where the consumer stands now: a pass beginning there goes on with the execution."""
        if self._ex is not None:
            if self._board is not None:
                if epoch > self._ex.next[0]:
                    self._board.forget(self._ex.gen, epoch)
                self._board.advance(self._ex.gen, epoch, k)
            self._ex.next = (epoch, k)

    # ---- merging the two streams --------------------------------------------------------

    def _head(self, side: str) -> ReadyBatch | EmptyBatch | RemoteBatch | End | None:
        """The next item of a side, without taking it (None: not yet there; END once it ended); a Failed raises."""
        if side == "remote":
            if self._ex is None:
                return END
            head = self._ex.peek(self._epoch)
        else:
            if self._queue is None or self._thread is None:
                return END
            if self._local_head is None:
                try:
                    self._local_head = self._queue.get_nowait()
                except queue.Empty:
                    if not self._thread.is_alive():  # ended without a last word: never wait on it
                        try:
                            self._local_head = self._queue.get_nowait()
                        except queue.Empty:
                            raise RuntimeError("gdsio.data.ray.Loader: the local producer ended without a result") from None
            head = self._local_head
        if isinstance(head, Failed):
            err = head.error
            if side == "remote":
                # Ray's word that the work went with its node, or a failure once no CPU node is left: the rest
                # of the epoch is made here. Any other error (a SampleError above all) raises, as gdsio.Loader's.
                lost = self._lost_nodes(NODE_DEAD_WAIT_S if (gone := node_loss(err)) else 0.0)
                if gone or (lost and not placed_nodes(self._loader.placement)):
                    self._finish_here(lost, f"{type(err).__name__}: {err}")
                    return END
                if lost and isinstance(err, Exception):
                    err.add_note("gdsio.data.ray.Loader: lost during this epoch: "
                                 + ", ".join(describe_node(n) for n in lost))
            raise err
        return head

    def _pop(self, side: str) -> Any:
        if side == "remote":
            assert self._ex is not None
            return self._ex.take()
        head, self._local_head = self._local_head, None
        return head

    def _take(self, k: int) -> tuple[Any, Any] | None:
        """Batch k from whichever side made it, or None when neither did (all its samples skipped)."""
        waited_from = time.perf_counter()
        next_health = waited_from + HEALTH_EVERY_S
        while True:
            self._arrived.clear()
            switches = self._switches
            heads = {side: self._head(side) for side in ("local", "remote")}
            if self._switches != switches:
                continue  # the CPU nodes were lost meanwhile: this node's new producer makes batch k
            for side, head in heads.items():
                if isinstance(head, (ReadyBatch, RemoteBatch, EmptyBatch)) and head.batch_no == k:
                    self._pop(side)
                    return None if isinstance(head, EmptyBatch) else self._hand_over(head)
            if all(h is not None and (isinstance(h, End) or h.batch_no > k) for h in heads.values()):
                return None  # both sides are past k: it had no sample left
            now = time.perf_counter()
            if now - waited_from > self._loader.timeout:
                raise TimeoutError(f"gdsio.data.ray.Loader: batch {k} of epoch {self._epoch} did not come within "
                                   f"{self._loader.timeout:g} s (timeout=); {self._status()}")
            if heads["remote"] is None and now >= next_health:
                next_health = now + HEALTH_EVERY_S
                if self._check_nodes():
                    continue
            self._arrived.wait(POLL_S)

    def _hand_over(self, head: ReadyBatch | RemoteBatch) -> tuple[Any, Any]:
        loader = self._loader
        if isinstance(head, ReadyBatch):  # this node's
            images, labels, ready = head.images, head.labels, head.ready
            self._budget.release(batch_nbytes(images, labels))
            if ready is not None:  # CUDA: order the consumer's stream after the batch, no host sync
                cur = torch.cuda.current_stream(loader.device)
                cur.wait_event(ready)
                for t in (images, labels):
                    if isinstance(t, torch.Tensor) and t.is_cuda:
                        t.record_stream(cur)
            self._shared.sides.add("local", int(images.shape[0]))
            return images, labels
        images, labels = head.images, head.labels
        if loader.device.type == "cuda":  # from pinned memory, on the consumer's current stream
            images = images.to(loader.device, non_blocking=True)
            labels = labels.to(loader.device, non_blocking=True)
        if head.tail is not None:  # the chain's cast and normalisation, fused, on this device and stream
            images = head.tail(images)
        self._shared.sides.add("remote", int(images.shape[0]), head.node, head.seconds)
        return images, labels

    # ---- a lost node --------------------------------------------------------------------

    def _lost_nodes(self, wait_s: float = 0.0) -> list[dict[str, Any]]:
        """The execution's nodes not alive, waiting up to `wait_s` for one (Ray's word of a loss can come first)."""
        deadline = time.monotonic() + wait_s
        while self._ex is not None:
            alive = {n["NodeID"] for n in import_ray().nodes() if n.get("Alive")}
            lost = [n for nid, n in self._ex.watch.items() if nid not in alive]
            if lost or time.monotonic() >= deadline:
                return lost
            time.sleep(POLL_S)
        return []

    def _check_nodes(self) -> bool:
        """While a remote batch is awaited: a lost node with another to take its work is logged (Ray remakes
        its batches there); with none left, this node makes the rest of the epoch (True: it does now)."""
        lost = self._lost_nodes()
        if not lost:
            return False
        assert self._ex is not None
        left = placed_nodes(self._loader.placement)
        if left:
            new = [n for n in lost if n["NodeID"] not in self._ex.lost_reported]
            if new:
                log.warning("gdsio.data.ray.Loader: lost %s in epoch %d; Ray remakes its batches on %d other node(s)",
                            ", ".join(describe_node(n) for n in new), self._epoch, len(left))
                self._ex.lost_reported.update(n["NodeID"] for n in new)
            return False
        self._finish_here(lost, f"no live node has {self._loader.placement}")
        return True

    def _finish_here(self, lost: list[dict[str, Any]], why: str) -> None:
        """The CPU nodes are lost: ends the execution; a new producer here makes every batch from the awaited one
        to the epoch's end, in order (the old one's queued batches are dropped: remade, they are the same)."""
        k, ex = self._k, self._ex
        assert ex is not None
        ex.failed, self._ex = True, None
        ex.close()
        self._stop_local()
        self._stop, self._budget = threading.Event(), ByteBudget(self._shared.local.prefetch_bytes)
        self._start_local(k, self._shared.local.order)
        self._switches += 1
        self._shared.sides.went_local(self._epoch, k, [n["NodeID"] for n in lost])
        log.warning("gdsio.data.ray.Loader: lost the CPU nodes (%s; %s) in epoch %d: this node makes batches %d-%d "
                    "of it", ", ".join(describe_node(n) for n in lost) or "none named", why, self._epoch, k, self._end - 1)

    def _status(self) -> str:
        parts = []
        if self._thread is not None and self._queue is not None:
            alive = "running" if self._thread.is_alive() else "ended"
            parts.append(f"local producer {alive}, {self._queue.qsize()} batch(es) queued")
        if self._ex is not None:
            alive = "running" if self._ex.thread.is_alive() else "ended"
            parts.append(f"remote feed {alive}, {self._ex.q.qsize()} batch(es) queued")
        lost = self._lost_nodes()
        if lost:
            parts.append("lost: " + ", ".join(describe_node(n) for n in lost))
        return "; ".join(parts)

    # ---- the end ------------------------------------------------------------------------

    def close(self) -> None:
        """Stops the pass's producer. The execution goes on only after a whole epoch, when it has epochs left
        and did not fail (the next pass continues it); a pass left mid-epoch ends it, and its actors with it."""
        if self._closed:
            return
        self._closed = True
        self._stop_local()
        ex = self._ex
        if ex is not None and (ex.failed or ex.next != (self._epoch + 1, 0) or ex.next[0] > ex.last_epoch):
            ex.close()

    def _stop_local(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            if self._thread.is_alive():
                log.warning("gdsio.data.ray.Loader: the local producer did not stop in time")
        if self._queue is not None:
            while True:
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
        self._local_head = None

    def __del__(self) -> None:
        self._closed = True
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
