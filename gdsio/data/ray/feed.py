"""gdsio.data.ray, the consumer's receiving side: the thread that asks the CPU
nodes' actors for batches and takes each result into a tensor of this
process's own, and the split of a transform into what the CPU nodes run and
what the consumer's device runs (the cast and the normalisation).

Ray Core, not Ray Data: each batch is one actor call. Ray Data's streaming
executor runs in the consumer's process, wakes every 0.1 s and converts each
block; measured on the consumer, its executor and iterator threads alone cost
more per image than the whole path here (bench/results/ray-receive-2026-12-03.md).

How the batch's bytes come (``FeedPlan.transport``), chosen by measurement
(bench/results/ray-receive-2026-12-04.md, CPU time of the consumer's process
and of its node's Ray processes, the two sharing the GPU node's cores):

* ``"socket"`` (the default; gdsio.data.ray.transport): the actor streams the
  batch over its own TCP connection to a socket of this process, whose
  kernel copies it straight into the batch's buffer (pinned for a GPU). The
  consumer's node runs nothing else per batch.
* ``"object_store"``: the call's result is one object whose numpy arrays
  ``ray.get`` maps from this node's object store. Before that, this node's
  raylet pulls the object from the CPU node's store over gRPC, in chunks: on
  the loopback cluster the consumer's node's Ray processes spent 0.15-0.20
  CPU-ms an image of uint8 224x224 (0.42-0.47 when float32 crossed), as much
  as the consumer's whole process, against 0.03-0.05 (their idle floor) with
  the socket, whose kernel copy costs the consumer 0.02-0.03. Kept for
  clusters whose nodes may not open other connections to the consumer's
  node, or whose traffic must be TLS (the socket is plain TCP).
* Not measured (left by reasoning): torch.distributed's gloo send/recv runs
  over TCP as the socket does, and adds a process group per pool, which a
  lost actor fails as a whole; Ray's compiled graphs fix their actors when
  compiled, while a pool here replaces a lost actor mid-epoch.

Package-internal (``__all__`` is empty; used by gdsio.data.ray.passes):
``RemoteBatch``, ``ActorFeed``, ``Tail``, ``split_transform``; ``RemoteFeed``
(the Ray Data feed, which bench/bench_ray.py --conversion measures)."""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import queue
import threading
import time
from typing import Any, Callable

import numpy as np
import torch

from ...io.buffers import host_empty
from ...transforms import functional as F
from ..flow import END, Failed, put_until_stopped
from ...transforms.classes import Compose, Normalize, ToDtype
from .remote import BatchMaker, import_ray, node_loss, placed_nodes, unwrapped_sample_error
from .transport import FAILED, NOTHING, STALL_S, Receiver, StreamMaker

__all__: list[str] = []  # the mechanics of gdsio.data.ray.Loader; nothing here is API

log = logging.getLogger("gdsio")

WAIT_S = 1.0  # how often a feed blocked on a result looks at its stop flag (not a poll of the result)
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # what the fused kernel writes


def calls_in_flight(actors: int) -> int:
    """The feed's actor calls in flight at most (FeedPlan.window): two an actor, so each has the next call
    queued while it makes one, and one more."""
    return 2 * actors + 1


TRANSPORTS = ("socket", "object_store")  # how a batch's images reach the consumer (the first: the default)


@dataclasses.dataclass(frozen=True, slots=True)
class RemoteBatch:
    """A batch the CPU nodes made, as a feed queues it (its own ``Failed``
    and ``END`` are gdsio.data.flow's), with the node that made it and its
    seconds per sample. ``tail``: the cast and normalisation still to run on
    the consumer's device (None: `images` is the batch)."""

    batch_no: int
    images: Any
    labels: Any
    node: str
    seconds: float
    epoch: int
    tail: Any = None


# ---- the transform's split ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Tail:
    """The end of a fused chain run on the consumer: ``ToDtype(dtype, scale)``
    then ``Normalize(mean, std)`` over uint8 batches. It runs gdsio's fused
    kernel (an identity bilinear resize, whose one tap has weight 1, and the
    same epilogue as the whole chain's), so the batch equals, bit for bit, the
    one the whole chain makes (float32, float16 and bfloat16)."""

    dtype: Any
    scale: bool
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None

    def __call__(self, images: Any, out: Any = None) -> Any:
        """The uint8 ``(N, C, H, W)`` batch `images` cast and normalised, into `out` when given."""
        n, _, h, w = images.shape
        boxes = np.zeros((n, 4), np.int64)
        boxes[:, 2], boxes[:, 3] = h, w
        return F.resized_crop_flip_normalize(
            images, boxes, np.zeros(n, bool), [h, w], list(self.mean) if self.mean is not None else None,
            list(self.std) if self.std is not None else None, interpolation="bilinear", antialias=True,
            dtype=self.dtype, scale=self.scale, out=out)


def split_transform(transform: Any) -> tuple[Any, Tail | None]:
    """(what the CPU nodes run, what the consumer runs after it). A fused
    ``Compose`` ending in ``ToDtype(<float>)`` (and ``Normalize``) after its
    geometry and flip: the CPU nodes run the uint8 part and send uint8 (a
    quarter of float32's bytes), the consumer the cast. Any other transform
    runs whole on the CPU nodes (None)."""
    if type(transform) is not Compose or not transform.fused:
        return transform, None
    ts = list(transform.transforms)
    norm = ts.pop() if ts and isinstance(ts[-1], Normalize) else None
    if not ts or not isinstance(ts[-1], ToDtype) or ts[-1].dtype not in FLOAT_DTYPES:
        return transform, None
    cast = ts.pop()
    head = Compose(ts)  # the same transforms at the same positions: the same random draws
    if not head.fused:
        return transform, None
    return head, Tail(cast.dtype, cast.scale, norm.mean if norm else None, norm.std if norm else None)


class _Mapped:
    """Ray's read-only numpy view of an object in the store, seen as writable
    (``__array_interface__`` with the read-only flag off), and holding that
    view, so the object stays in the store while a tensor over it lives.
    For a block no one else can read (``owned``); the mapping itself is
    read-write (``rw-s`` in /proc/self/maps), only Ray's flag says otherwise."""

    def __init__(self, a: np.ndarray) -> None:
        self.held = a
        face = dict(a.__array_interface__)
        face["data"] = (face["data"][0], False)
        self.__array_interface__ = face


def owned(a: np.ndarray) -> torch.Tensor:
    """A tensor over Ray's mapping of a block of the object store, without a
    copy, for a block that this process alone can read: the return of this
    feed's own actor call, whose one reference the feed drops once it has the
    value. No later reader (no other reference, no later epoch: every batch
    is a new call) sees a write to it, and the store frees the block when the
    tensor goes."""
    return torch.from_numpy(np.asarray(_Mapped(a)))


def _own(shape: tuple[int, ...], dtype: Any, pinned: bool) -> torch.Tensor:
    """A batch's tensor of this process's own: pinned for a GPU (torch's caching
    host allocator keeps those), else from gdsio's host pool, whose large
    blocks come back with their pages faulted in (a fresh torch.empty faults
    every page in again: bench/results/cpu-ray-conversion-2026-12-02.md)."""
    if pinned:
        return torch.empty(shape, dtype=dtype, pin_memory=True)
    return host_empty(math.prod(shape) * dtype.itemsize).view(dtype).view(shape)


def received(images: torch.Tensor, tail: Tail | None, pinned: bool) -> tuple[torch.Tensor, Tail | None]:
    """A batch the socket transport read into `images` (pinned for a GPU, else
    a host-pool tensor): the batch itself, with the tail to run on the GPU;
    on the CPU the tail's output, into another host-pool tensor."""
    if pinned or tail is None:
        return images, tail
    return tail(images, out=_own(images.shape, tail.dtype, False)), None


def receive(images: np.ndarray, tail: Tail | None, pinned: bool) -> tuple[torch.Tensor, Tail | None]:
    """A batch out of the object store (`images`: Ray's mapping of it). For a
    GPU, one copy into a pinned tensor (the tail then runs there: returned);
    on the CPU the block itself (``owned``), or the tail's output, which it
    writes into a host-pool tensor straight from the block."""
    if pinned:
        out = _own(images.shape, torch.from_numpy(np.empty(0, images.dtype)).dtype, True)
        out.numpy()[...] = images
        return out, tail
    if tail is None:
        return owned(images), None
    out = _own(images.shape, tail.dtype, False)
    return tail(owned(images), out=out), None


# ---- the feed -------------------------------------------------------------------------------


@dataclasses.dataclass
class FeedPlan:
    """What an ActorFeed runs: `count` batches (the execution's places 0..count-1), on `actors` actors."""

    spec: Any  # remote.ActorSpec
    count: int
    actors: int
    actor_options: dict[str, Any]
    placement: Any  # remote.Placement: where a lost actor's replacement may go
    tail: Tail | None
    pinned: bool
    window: int  # actor calls in flight at most
    transport: str = "socket"  # one of TRANSPORTS
    # "auto": skip(place) asks the trainer's Board for the place, as the feed has a call free for it: true for a
    # batch this node makes (its producer asked first), which needs no actor call. Asked only once an actor of
    # the pool is ready: while the pool starts (seconds), the producer takes the batches it can make.
    skip: Callable[[int], bool] | None = None


class ActorFeed:
    """Thread ``gdsio-ray``: starts the actor pool, keeps up to ``window``
    calls in flight (each actor makes its batches in turn), takes the results
    in order and queues a ``RemoteBatch`` per batch, then ``END``, or
    ``Failed``. An actor lost with its node has its calls made by the others;
    with none left the loss reaches the consumer (which makes the rest)."""

    def __init__(self, plan: FeedPlan, q: queue.Queue[Any], stop: threading.Event) -> None:
        self.plan, self.q, self.stop = plan, q, stop
        self.actors: list[Any] = []
        self.live: list[int] = []  # the actors not lost (indices into .actors)
        self.rx: Receiver | None = None  # the socket transport's receiving end
        self._seq = 0  # the calls' numbers (a frame names its call)
        self._cls: Any = None
        self._lock = threading.Lock()

    def run(self) -> None:
        rx: Receiver | None = None
        try:
            ray = import_ray()
            p = self.plan
            if p.transport == "socket":  # on the address Ray uses for this node: the actors reach it as they reach Ray
                rx = self.rx = Receiver(ray.util.get_node_ip_address(), self._alloc, self.stop)
            self._cls = ray.remote(StreamMaker if rx is not None else BatchMaker).options(**p.actor_options)
            with self._lock:
                if self.stop.is_set():
                    return
                for _ in range(p.actors):
                    self._new_actor()
            self.live = list(range(len(self.actors)))
            if p.skip is not None and not self._ready(ray):
                return
            # [place, actor, ref, seq], in order; [place, -1, None, 0]: a place this node makes (no call).
            inflight: collections.deque[list[Any]] = collections.deque()
            nxt, turn, calls = 0, 0, 0
            while True:
                # At most `window` calls in flight, and places at most twice that ahead of the first one
                # waited for (the window order's UnitBoard keeps units that far).
                while nxt < p.count and calls < p.window and (not inflight or nxt - inflight[0][0] < 2 * p.window):
                    if p.skip is not None and p.skip(nxt):
                        inflight.append([nxt, -1, None, 0])
                    else:
                        a = self.live[turn % len(self.live)]
                        turn += 1
                        inflight.append(self._call(a, nxt))
                        calls += 1
                    nxt += 1
                if not inflight:
                    break
                entry = inflight[0]
                if entry[2] is None:  # made here
                    inflight.popleft()
                    continue
                try:
                    out = self._result(ray, entry[2]) if rx is None else self._sent(ray, rx, entry)
                except Exception as e:  # noqa: BLE001 - a node's loss is handled, anything else handed on
                    if not node_loss(e):
                        raise
                    self._lose(entry[1], inflight, e)
                    continue
                if self.stop.is_set():
                    return
                inflight.popleft()
                calls -= 1
                if out is None:
                    continue  # none of its samples was left
                epoch, k, images, labels, node, seconds = out
                batch, tail = receive(images, p.tail, p.pinned) if rx is None else received(images, p.tail, p.pinned)
                item = RemoteBatch(k, batch, torch.from_numpy(np.array(labels, np.int64)), node, seconds, epoch, tail)
                del out, images, entry  # the object goes back to the store
                if not self._put(item):
                    return
            self._put(END)
        except BaseException as e:  # reaches the consumer, which re-raises it
            self._put(Failed(unwrapped_sample_error(e)))
        finally:
            self.end_actors()
            if rx is not None:
                rx.close()

    def _ready(self, ray: Any) -> bool:
        """Waits until an actor of the pool has started (False: stopped first). An actor that failed to start
        counts as ready: its first call raises why, as without the wait."""
        with self._lock:
            refs = [a.__ray_ready__.remote() for a in self.actors]
        while not self.stop.is_set():
            if ray.wait(refs, num_returns=1, timeout=WAIT_S)[0]:
                return True
        return False

    def _alloc(self, shape: tuple[int, ...], dtype: np.dtype) -> torch.Tensor:
        return _own(shape, torch.from_numpy(np.empty(0, dtype)).dtype, self.plan.pinned)

    def _new_actor(self) -> None:
        """One more actor (under self._lock); with the socket transport it is told where to send and its number."""
        args = (self.plan.spec,) if self.rx is None else (self.plan.spec, self.rx.dest, len(self.actors))
        self.actors.append(self._cls.remote(*args))

    def _call(self, a: int, place: int) -> list[Any]:
        """Actor `a` makes the batch at `place`: [place, a, the call's result, the call's number]."""
        self._seq += 1
        if self.rx is None:
            return [place, a, self.actors[a].make.remote(place), self._seq]
        return [place, a, self.actors[a].make_sent.remote(place, self._seq), self._seq]

    def _result(self, ray: Any, ref: Any) -> Any:
        """The call's result (its error raises), or None once stopped (the caller looks at the flag)."""
        while not self.stop.is_set():
            if ray.wait([ref], timeout=WAIT_S)[0]:
                return ray.get(ref)
        return None

    def _sent(self, ray: Any, rx: Receiver, entry: list[Any]) -> Any:
        """`entry`'s batch over the socket, as BatchMaker.make returns it, or None
        (no batch; stopped). The frame says how the call went: only a failed
        call's result is taken, for its error (a SampleError, a node's loss).
        A call that ended without a frame raises its error too; one that ended
        well and whose frame has not come within STALL_S raises ConnectionError."""
        settled: float | None = None
        while not self.stop.is_set():
            f = rx.take(entry[3])
            if f is not None:
                if f.status == FAILED:
                    self._result(ray, entry[2])  # raises the call's error
                    if self.stop.is_set():
                        return None
                    raise RuntimeError(f"gdsio.data.ray: call {entry[3]} said it failed, and its result did not")
                return None if f.status == NOTHING else (f.epoch, f.batch_no, f.images, f.labels, f.node, f.seconds)
            if ray.wait([entry[2]], timeout=0)[0]:
                ray.get(entry[2])  # the call's error, if it failed without a frame (its actor lost)
                settled = settled if settled is not None else time.monotonic()
                if time.monotonic() - settled > STALL_S:
                    raise ConnectionError(f"gdsio.data.ray: the batch of call {entry[3]} (actor {entry[1]}) did not "
                                          f"arrive within {STALL_S:g} s of the call's end (its connection was lost)")
        return None

    def _lose(self, a: int, inflight: collections.deque[list[Any]], err: BaseException) -> None:
        """Actor `a` (or its result) went with its node: a new actor takes its place
        while a node of the placement is live (as Ray Data's pool restarts one),
        and its calls go to the live actors, in place; with no node left, `err` raises."""
        if a in self.live:
            self.live.remove(a)
            if placed_nodes(self.plan.placement):
                with self._lock:
                    if self.stop.is_set():
                        raise err
                    self._new_actor()
                self.live.append(len(self.actors) - 1)
            log.warning("gdsio.data.ray.Loader: an actor was lost (%s: %s); %d live actor(s) make its batches",
                        type(err).__name__, err, len(self.live))
        if not self.live:
            raise err
        for i, entry in enumerate(inflight):
            if entry[1] == a:
                if self.rx is not None:
                    self.rx.discard(entry[3])  # its frame, if it still comes, is not wanted
                inflight[i] = self._call(self.live[i % len(self.live)], entry[0])

    def end_actors(self) -> None:
        """Ends the pool (its CPUs go back to the cluster); idempotent."""
        with self._lock:
            actors, self.actors = self.actors, []
            self.stop.set()
        if not actors:
            return
        ray = import_ray()
        for a in actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception as e:  # noqa: BLE001 - best effort: an actor of a lost node is gone already
                log.debug("gdsio.data.ray.Loader: could not end an actor: %s", e)

    def abort(self) -> bool:
        """Ends the pool from another thread (a feed blocked on a result returns within WAIT_S)."""
        self.end_actors()
        return True

    def _put(self, item: Any) -> bool:
        return put_until_stopped(self.q, item, self.stop)


class RemoteFeed:
    """The Ray Data feed, as gdsio.data.ray.Loader ran before ActorFeed
    (bench/bench_ray.py --conversion measures it): iterates a dataset of the
    CPU nodes' blocks, joins the rows of each batch, copies them into a
    (pinned) tensor and queues a ``RemoteBatch`` per batch, then ``END``, or ``Failed``."""

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
                    continue
                ep = np.asarray(block["epoch"])
                cuts = [0, *(np.flatnonzero((np.diff(bn) != 0) | (np.diff(ep) != 0)) + 1).tolist(), len(bn)]
                for a, b in zip(cuts[:-1], cuts[1:]):
                    parts.append({c: v[a:b] for c, v in block.items()})
                    have += b - a
                    if have == int(parts[0]["count"][0]):
                        if not put_until_stopped(self.q, self._batch(parts), self.stop):
                            return
                        parts, have = [], 0
            put_until_stopped(self.q, END, self.stop)
        except BaseException as e:  # reaches the consumer, which re-raises it
            put_until_stopped(self.q, Failed(unwrapped_sample_error(e)), self.stop)

    def _batch(self, parts: list[dict[str, np.ndarray]]) -> RemoteBatch:
        images = self._tensor([p["image"] for p in parts])
        labels = self._tensor([p["label"] for p in parts])
        first = parts[0]
        return RemoteBatch(int(first["batch_no"][0]), images, labels, str(first["node"][0]), float(first["seconds"][0]),
                           int(first["epoch"][0]))

    def _tensor(self, arrays: list[np.ndarray]) -> Any:
        n = sum(len(a) for a in arrays)
        out = self._empty((n, *arrays[0].shape[1:]), torch.from_numpy(np.empty(0, arrays[0].dtype)).dtype)
        view, at = out.numpy(), 0
        for a in arrays:
            view[at : at + len(a)] = a
            at += len(a)
        return out

    def _empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return _own(shape, dtype, self.pinned)
