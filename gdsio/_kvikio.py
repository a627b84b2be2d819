"""The kvikio backend: the same API through the kvikio package (optional extra)."""

from __future__ import annotations

import os
import time
from typing import Any

from . import _core
from ._buffers import Destination
from ._settings import Settings


def kvikio_unusable_reason() -> str | None:
    import importlib.util

    if importlib.util.find_spec("kvikio") is None:
        return "kvikio is not installed (pip install 'gdsio[kvikio]', or 'gdsio[cu12]' for CUDA 12)"
    return None


def kvikio_read(path: str, dest: Destination, view: Any, size: int, offset: int, s: Settings) -> dict[str, Any]:
    """Reads through kvikio.CuFile.pread into `view` (a uint8 view of the destination)."""
    why = kvikio_unusable_reason()
    if why:
        raise _core.BackendUnavailable(why)
    try:
        import kvikio
        import kvikio.defaults
    except Exception as e:  # kvikio raises OSError when libcuda is missing
        raise _core.BackendUnavailable(f"kvikio cannot be imported here: {e}") from e
    compat = bool(getattr(kvikio.defaults, "is_compat_mode_preferred", lambda: False)())
    t0 = time.perf_counter()
    config = {"num_threads": s.threads, "task_size": s.chunk_bytes}
    with kvikio.defaults.set(config), kvikio.CuFile(os.fspath(path), "r") as f:
        got = f.pread(view, size, offset).get()
    seconds = time.perf_counter() - t0
    if got != size:
        raise OSError(5, f"kvikio read {got} of {size} bytes at offset {offset} (file truncated?)", path)
    reason = (
        "kvikio runs in its compat mode (POSIX reads, a synchronous copy per task)"
        if compat
        else ""
    )
    return {
        "backend": "kvikio",
        "nbytes": size,
        "seconds": seconds,
        "threads": s.threads,
        "chunks": max(1, -(-size // s.chunk_bytes)),
        "direct_io": not compat,
        "reason": reason,
    }
