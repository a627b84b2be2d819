"""What the loader's consumer side and its producer share: the messages on
the ready-batch queue, the byte budget of that queue, how a batch's bytes are
counted, the host batch buffers reused across batches, the stop-flag poll
interval, the mark of the loader's own threads, and the passes still running
when Python exits.
"""

from __future__ import annotations

import atexit
import dataclasses
import queue
import threading
import time
import weakref
from typing import Any, Callable

import torch

__all__ = ["END", "POLL_S", "BatchBuffers", "ByteBudget", "EmptyBatch", "End", "Failed", "ReadyBatch", "batch_nbytes",
           "in_loader_thread", "mark_loader_thread", "put_until_stopped", "track_threads"]

POLL_S = 0.1  # how often blocked threads look at the stop flag

_local = threading.local()  # .in_loader: set in the loader's own threads


# ---- the messages a producer puts on its queue, one record type per kind --------------------
# Read by type (isinstance), never by position. Defined at module level, so
# they pickle; none crosses a process today (a Ray actor reads its own
# producer's queue in its own process).


@dataclasses.dataclass(frozen=True, slots=True)
class ReadyBatch:
    """A batch made: ``images`` and ``labels`` on the loader's device."""

    batch_no: int
    images: Any
    labels: Any
    ready: Any = None  # CUDA: the event after which the batch may be read; None on the CPU


@dataclasses.dataclass(frozen=True, slots=True)
class EmptyBatch:
    """Batch ``batch_no`` had no sample left (on_error="skip" dropped them all)."""

    batch_no: int


@dataclasses.dataclass(frozen=True, slots=True)
class Failed:
    """The producing thread failed; the consumer re-raises ``error`` (its traceback kept)."""

    error: BaseException


@dataclasses.dataclass(frozen=True, slots=True)
class End:
    """The end of the stream: every batch was put. Use the one instance, ``END``."""


END = End()


@dataclasses.dataclass(frozen=True, slots=True)
class NotYet:
    """What an order's ``numbered_batches`` yields when it may not decide its next batch yet (gdsio.data.ray's
    "auto" board decides a batch only as the consumer nears it): the producer finishes the batches it has
    read, then calls the order's ``wait(stop)`` and asks again. Use the one instance, ``NOT_YET``."""


NOT_YET = NotYet()


# The threads of passes, with their stop flags, while they run (weakly held:
# an ended thread drops out). At exit they are stopped and joined before
# Python finalizes, whether or not their pass still exists: a loader thread
# still in C++ with the GIL released (a decode, a resize) would otherwise come
# back to a finalizing interpreter, and the process end in std::terminate.
_THREADS: weakref.WeakKeyDictionary[threading.Thread, threading.Event] = weakref.WeakKeyDictionary()
EXIT_JOIN_S = 10.0  # how long exit waits for the threads, in all


def track_threads(stop: threading.Event, *threads: threading.Thread) -> None:
    """Registers a pass's threads and the flag that stops them, for exit."""
    for t in threads:
        _THREADS[t] = stop


@atexit.register
def _stop_threads_at_exit() -> None:
    live = [(t, stop) for t, stop in list(_THREADS.items()) if t.is_alive()]
    for _, stop in live:
        stop.set()
    deadline = time.monotonic() + EXIT_JOIN_S
    for t, _ in live:
        if t is not threading.current_thread():
            t.join(timeout=max(0.0, deadline - time.monotonic()))


def mark_loader_thread(carry: Callable[[], None] | None = None) -> None:
    """Marks the calling thread as one of a loader's (its loader thread and
    readers); `carry` (gdsio.config.carried()): puts the pass's settings
    blocks in force in it."""
    _local.in_loader = True
    if carry is not None:
        carry()


def in_loader_thread() -> bool:
    """Whether the calling thread is one of a loader's: a pass closed there (by a
    garbage collection running in it) must not join the thread it runs in."""
    return getattr(_local, "in_loader", False)


def put_until_stopped(q: queue.Queue[Any], item: Any, stop: threading.Event) -> bool:
    """Puts ``item`` on the bounded queue ``q``, waiting for room but looking at
    ``stop`` every POLL_S; False if stopped first (the consumer went away)."""
    while not stop.is_set():
        try:
            q.put(item, timeout=POLL_S)
            return True
        except queue.Full:
            continue
    return False


def batch_nbytes(*tensors: Any) -> int:
    """Bytes held by the tensors among ``tensors`` (a transform may return anything)."""
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


class ByteBudget:
    """The bytes of the ready batches in the queue: ``acquire`` blocks the
    producer while adding a batch would pass the cap (unless nothing is
    queued, so a batch larger than the cap still moves); ``release`` as the
    consumer takes one. ``peak`` is the most ever held. No cap: counts only."""

    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        self.held = 0
        self.peak = 0
        self._cv = threading.Condition()

    def acquire(self, n: int, stop: threading.Event) -> bool:
        with self._cv:
            while self.cap is not None and self.held > 0 and self.held + n > self.cap:
                if stop.is_set():
                    return False
                self._cv.wait(timeout=POLL_S)
            self.held += n
            self.peak = max(self.peak, self.held)
            return True

    def release(self, n: int) -> None:
        with self._cv:
            self.held = max(0, self.held - n)
            self._cv.notify_all()


class BatchBuffers:
    """Host batch buffers (the raw kind's reads, the images' fused transform
    output), reused once nothing outside holds them: a fresh 25 MiB buffer per
    batch would page-fault every byte again.
    A buffer is busy from its batch's reads until its batch is built; after
    that the batch (a view the consumer holds) keeps it from reuse until the
    consumer lets go of it. Without torch's storage use count (a private
    function) nothing is reused: every batch gets a fresh buffer."""

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self.lock = threading.Lock()
        self.use_count = getattr(torch._C, "_storage_Use_Count", None)
        self.bufs: list[torch.Tensor] = []
        self.busy: set[int] = set()

    def _unused(self, t: torch.Tensor) -> bool:
        # The pool's tensor and the temporary storage object: nothing else.
        return self.use_count is not None and self.use_count(t.untyped_storage()._cdata) <= 2

    def take(self, shape: tuple[int, ...], dtype: torch.dtype = torch.uint8) -> torch.Tensor:
        shape = tuple(int(v) for v in shape)
        with self.lock:
            for t in self.bufs:
                if id(t) not in self.busy and tuple(t.shape) == shape and t.dtype == dtype and self._unused(t):
                    self.busy.add(id(t))
                    return t
            t = torch.empty(shape, dtype=dtype)
            if len(self.bufs) >= self.keep:
                self.bufs = [b for b in self.bufs if id(b) in self.busy or not self._unused(b)][-(self.keep - 1):]
            self.bufs.append(t)
            self.busy.add(id(t))
            return t

    def release(self, t: torch.Tensor) -> None:
        with self.lock:
            self.busy.discard(id(t))
