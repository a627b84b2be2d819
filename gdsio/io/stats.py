"""``ReadStats``: what one read did, and which backend really ran."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["ReadStats", "Result", "stats_from_core"]


@dataclasses.dataclass(frozen=True)
class ReadStats:
    """What one read did. ``backend`` is the path that ran: gds,
    cufile-compat, kvikio, pinned or posix for local files; s3, http or
    kvikio-remote for remote objects. ``reason`` says why a faster one (or
    O_DIRECT) was not used, empty when nothing was skipped. ``requests`` and
    ``retries`` count the HTTP requests a remote read sent (retries
    included) and the retried ones (0 for local files)."""

    backend: str
    nbytes: int
    seconds: float
    threads: int
    chunks: int
    direct_io: bool = False
    reason: str = ""
    path: str = ""
    device: str = "cpu"
    requests: int = 0
    retries: int = 0

    @property
    def gbps(self) -> float:
        """Gigabytes (1e9 bytes) per second."""
        return self.nbytes / self.seconds / 1e9 if self.seconds > 0 else float("inf")

    def __str__(self) -> str:
        s = (
            f"{self.backend}: {self.nbytes} bytes in {self.seconds * 1e3:.2f} ms "
            f"({self.gbps:.2f} GB/s, {self.threads} threads, {self.chunks} chunks"
            f"{', O_DIRECT' if self.direct_io else ''}"
            f"{f', {self.requests} requests' if self.requests else ''}"
            f"{f', {self.retries} retries' if self.retries else ''}) -> {self.device}"
        )
        return s + (f" [{self.reason}]" if self.reason else "")


@dataclasses.dataclass(frozen=True)
class Result:
    """What a backend written in Python (remote, kvikio) did: the fields of
    the core's ReadResult, and the HTTP requests a remote read sent."""

    backend: str
    nbytes: int
    seconds: float
    threads: int
    chunks: int
    direct_io: bool
    reason: str
    requests: int = 0
    retries: int = 0


def stats_from_core(r: Any, path: str, device: str, reason: str) -> ReadStats:
    """The core's ReadResult (or a Result) as ReadStats; `reason` (why a
    faster backend was skipped) comes before the backend's own."""
    reasons = [x for x in (reason, r.reason) if x]
    return ReadStats(
        backend=r.backend,
        nbytes=int(r.nbytes),
        seconds=float(r.seconds),
        threads=int(r.threads),
        chunks=int(r.chunks),
        direct_io=bool(r.direct_io),
        reason="; ".join(reasons),
        path=path,
        device=device,
        requests=int(getattr(r, "requests", 0)),
        retries=int(getattr(r, "retries", 0)),
    )
