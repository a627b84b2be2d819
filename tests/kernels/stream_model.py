"""The emulated runtime's lazy streams (emu_runtime.cpp, "streams") as a
Python model of ``torch.cuda.Stream`` and ``torch.cuda.Event``, for the one
ordering step that lives in Python: gdsio.Loader handing a ready batch to the
consumer's stream (``_Pass.__next__``: ``current_stream().wait_event(ready)``).

What is modelled: a stream is a FIFO of operations that run only when
something waits for them (``synchronize()``, or a queued ``wait_event`` that
the waiting stream has reached); ``Event.record`` queues a marker and
``wait_event`` waits for the marker the event last recorded. What is not: the
real torch streams, the caching allocator (``record_stream``), the device.

``handover_check()`` runs the real ``_Pass.__next__`` on one batch whose bytes
the loader's work stream writes (queued, not yet run) before recording the
batch's ready event, then the consumer's use of the batch queued on its own
(current) stream; it raises AssertionError when the consumer saw the bytes
before the loader's write, i.e. when its stream did not wait for the batch.
Command line: ``python stream_model.py`` runs it (the planted mutation of
loader.py runs it this way in a process of its own).
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

POISON = 0xDB  # what the batch holds before the loader's stream writes it


class Stream:
    def __init__(self, name: str) -> None:
        self.name = name
        self.ops: list[tuple[str, Any]] = []  # ("run", fn) | ("marker", None) | ("wait", (stream, index))
        self.done = 0  # operations run

    def enqueue(self, fn: Callable[[], None]) -> int:
        self.ops.append(("run", fn))
        return len(self.ops)

    def wait_event(self, event: "Event") -> None:
        if event.stream is not None:  # never recorded: nothing to wait for, as in CUDA
            self.ops.append(("wait", (event.stream, event.index)))

    def run_until(self, index: int, depth: int = 0) -> None:
        if depth > 64:
            raise RuntimeError("stream_model: a cycle of stream waits")
        while self.done < index:
            kind, arg = self.ops[self.done]
            if kind == "run":
                arg()
            elif kind == "wait":
                other, upto = arg
                other.run_until(upto, depth + 1)
            self.done += 1

    def synchronize(self) -> None:
        self.run_until(len(self.ops))


class Event:
    def __init__(self) -> None:
        self.stream: Stream | None = None
        self.index = 0

    def record(self, stream: Stream) -> None:
        stream.ops.append(("marker", None))
        self.stream, self.index = stream, len(stream.ops)

    def synchronize(self) -> None:
        if self.stream is not None:
            self.stream.run_until(self.index)


class _Meter:
    def consumed(self, *args: Any) -> None:
        pass


class _Loader:
    def __init__(self) -> None:
        import torch

        self.device = torch.device("cuda", 0)
        self._meter = _Meter()

    def _consumed(self, gen: int, batch_no: int) -> None:
        pass


def handover_check() -> None:
    """See the module docstring. Returns normally when the consumer saw the batch."""
    import torch

    from gdsio.data import loader as L
    from gdsio.data.flow import ByteBudget, ReadyBatch

    work, consumer = Stream("the loader's work stream"), Stream("the consumer's stream")
    images = torch.full((4, 3, 8, 8), POISON, dtype=torch.uint8)
    labels = torch.arange(4)
    want = (torch.arange(4 * 3 * 8 * 8) % 251).to(torch.uint8).view(4, 3, 8, 8)
    work.enqueue(lambda: images.copy_(want))  # the transform's output, written on the work stream
    ready = Event()
    ready.record(work)

    p = object.__new__(L._Pass)  # the pass without its producer thread: the batch is put on its queue here
    p._loader, p._epoch, p._gen = _Loader(), 0, 0
    p._queue = queue.Queue()
    p._queue.put(ReadyBatch(0, images, labels, ready))
    p._budget = ByteBudget(None)
    p._stop = threading.Event()
    p._closed, p._last = False, None
    p._thread = threading.current_thread()  # alive
    saved = torch.cuda.current_stream
    torch.cuda.current_stream = lambda device=None: consumer
    try:
        got_images, got_labels = next(p)
    finally:
        torch.cuda.current_stream = saved
    seen = torch.empty_like(got_images)
    consumer.enqueue(lambda: seen.copy_(got_images))  # the training step's first read of the batch
    consumer.synchronize()
    bad = int((seen != want).sum())
    assert bad == 0, (f"the consumer's stream read the batch before the loader's stream wrote it ({bad} of "
                      f"{seen.numel()} bytes still {POISON:#x}): it did not wait for the batch's ready event")
    work.synchronize()


if __name__ == "__main__":
    handover_check()
    print("stream_model: the consumer's stream waited for the batch")
