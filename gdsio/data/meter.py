"""The loader's meter: per batch, how long the consumer was blocked in
``next()`` and how long the batch took to produce; bytes read and the
backends that ran. ``Loader.stats()`` returns its ``LoaderStats``.

>>> s = loader.stats()
>>> s.data_wait_share, s.samples_per_s, s.io_backends
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from typing import Any

__all__ = ["LoaderStats", "Meter"]

_KEEP_PASSES = 1000  # per-pass summaries kept; older ones are dropped so memory stays flat


@dataclasses.dataclass
class LoaderStats:
    """What a loader did since it was made (or since ``stats(reset=True)``).

    data_wait_share: time the consumer was blocked in ``next()`` over the
    wall time of its loops (host clock). produce_ms: mean time from a batch's
    first read to its being ready (read, decode, transform; the reads of one
    batch overlap the transform of the one before), host clock; on a GPU also
    ``gpu_ms``, the decode+transform time on the loader's streams (CUDA
    events, from the decode's start to the transform's end). passes: one
    entry per pass over the data (an epoch, or the part
    of one a loop ran) with the bytes read from disk in it: 0 when a cache
    served everything. early_reads: samples of a pass's first batch read
    alone, one ranged GET each, while the first window of shards on a store
    was still arriving (the shard-window order; gdsio.data.remote_shards.
    ShardWindows): their bytes are in bytes_read, and again in their shards'.
    """

    batches: int = 0
    samples: int = 0
    seconds: float = 0.0
    data_wait_s: float = 0.0
    produce_ms: float = 0.0
    gpu_ms: float | None = None
    bytes_read: int = 0
    skipped: int = 0
    cache_hits: int = 0
    early_reads: int = 0
    io_backends: dict[str, int] = dataclasses.field(default_factory=dict)
    decode_backends: dict[str, int] = dataclasses.field(default_factory=dict)
    passes: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    clock: str = "host"

    @property
    def data_wait_share(self) -> float:
        return self.data_wait_s / self.seconds if self.seconds > 0 else 0.0

    @property
    def batches_per_s(self) -> float:
        return self.batches / self.seconds if self.seconds > 0 else 0.0

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_read / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(data_wait_share=self.data_wait_share, batches_per_s=self.batches_per_s,
                 samples_per_s=self.samples_per_s, bytes_per_s=self.bytes_per_s)
        return d

    def __str__(self) -> str:
        io = ", ".join(f"{k} x{v}" for k, v in sorted(self.io_backends.items())) or "none"
        dec = ", ".join(f"{k} x{v}" for k, v in sorted(self.decode_backends.items())) or "none"
        return (
            f"{self.batches} batches, {self.samples_per_s:.1f} samples/s, {self.batches_per_s:.2f} batches/s, "
            f"data wait {100 * self.data_wait_share:.1f}%, {self.bytes_per_s / 1e6:.1f} MB/s read; "
            f"I/O: {io}; decode: {dec}"
            + (f"; {self.skipped} skipped" if self.skipped else "")
            + (f"; {self.cache_hits} cache hits" if self.cache_hits else "")
            + (f"; {self.early_reads} early reads" if self.early_reads else "")
        )


class Meter:
    """Thread-safe counters behind ``Loader.stats()``: the consumer adds waits,
    the loader's threads add reads and batches. Sums only, so memory is flat."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._s = LoaderStats()
            self._produce_s = 0.0
            self._produced = 0
            self._gpu_pending: collections.deque[tuple[Any, Any]] = collections.deque(maxlen=256)
            self._gpu_s = 0.0
            self._gpu_n = 0
            self._pass: dict[str, Any] | None = None

    def begin_pass(self, epoch: int, start_batch: int) -> None:
        with self._lock:
            self._pass = {"epoch": epoch, "start_batch": start_batch, "batches": 0, "samples": 0,
                          "bytes_read": 0, "cache_hits": 0, "skipped": 0, "early_reads": 0}
            self._s.passes.append(self._pass)
            del self._s.passes[:-_KEEP_PASSES]

    def consumed(self, wait_s: float, wall_s: float, samples: int) -> None:
        """The consumer got a batch after waiting `wait_s`; `wall_s` since its previous one."""
        with self._lock:
            self._s.batches += 1
            self._s.samples += samples
            self._s.data_wait_s += wait_s
            self._s.seconds += wall_s
            if self._pass is not None:
                self._pass["batches"] += 1
                self._pass["samples"] += samples

    def read(self, backend: str, nbytes: int, early: bool = False) -> None:
        """A read by `backend` of `nbytes`; `early`: a sample read alone while its window of shards arrives."""
        with self._lock:
            self._s.io_backends[backend] = self._s.io_backends.get(backend, 0) + 1
            self._s.bytes_read += nbytes
            self._s.early_reads += early
            if self._pass is not None:
                self._pass["bytes_read"] += nbytes
                self._pass["early_reads"] += early

    def decoded(self, backend: str, count: int = 1) -> None:
        with self._lock:
            self._s.decode_backends[backend] = self._s.decode_backends.get(backend, 0) + count

    def produced(self, seconds: float, cache_hits: int, skipped: int, gpu_events: tuple[Any, Any] | None) -> None:
        with self._lock:
            self._produce_s += seconds
            self._produced += 1
            self._s.cache_hits += cache_hits
            self._s.skipped += skipped
            if self._pass is not None:
                self._pass["cache_hits"] += cache_hits
                self._pass["skipped"] += skipped
            if gpu_events is not None:
                self._gpu_pending.append(gpu_events)

    def snapshot(self) -> LoaderStats:
        with self._lock:
            still = collections.deque(maxlen=256)
            for start, end in self._gpu_pending:
                if end.query():  # never waits: unfinished pairs are counted next time
                    self._gpu_s += start.elapsed_time(end) / 1e3
                    self._gpu_n += 1
                else:
                    still.append((start, end))
            self._gpu_pending = still
            s = dataclasses.replace(
                self._s,
                io_backends=dict(self._s.io_backends),
                decode_backends=dict(self._s.decode_backends),
                passes=[dict(p) for p in self._s.passes],
                produce_ms=1e3 * self._produce_s / self._produced if self._produced else 0.0,
                gpu_ms=1e3 * self._gpu_s / self._gpu_n if self._gpu_n else None,
            )
        return s
