"""What the loader's consumer side and its producer share: the byte budget
of the ready-batch queue, how a batch's bytes are counted, the stop-flag poll
interval, and the mark of the loader's own threads.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

__all__ = ["POLL_S", "ByteBudget", "batch_nbytes", "in_loader_thread", "mark_loader_thread"]

POLL_S = 0.1  # how often blocked threads look at the stop flag

_local = threading.local()  # .in_loader: set in the loader's own threads


def mark_loader_thread() -> None:
    """Marks the calling thread as one of a loader's (its loader thread and readers)."""
    _local.in_loader = True


def in_loader_thread() -> bool:
    """Whether the calling thread is one of a loader's: a pass closed there (by a
    garbage collection running in it) must not join the thread it runs in."""
    return getattr(_local, "in_loader", False)


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
