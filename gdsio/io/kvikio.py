"""The kvikio backend: the same reads through the kvikio package (an optional
extra, imported only when this backend runs or is asked about)."""

from __future__ import annotations

import functools
import importlib.util
import os
import time
from typing import Any

from .. import _core
from ..config import Settings
from ..platform import gds
from .buffers import Destination
from .stats import Result
from .urls import redact

__all__ = ["kvikio_config", "kvikio_read", "kvikio_remote_read", "kvikio_unusable_reason", "uint8_view"]


def kvikio_unusable_reason() -> str | None:
    """Why the kvikio backends cannot run here, or None when they can.

    Installed is not enough: kvikio is imported (once a process, when first
    asked, never by ``import gdsio``) and its error is the reason, since a
    kvikio whose libraries cannot load raises on import (libkvikio-cu13 26.10
    without rapids-logger's librapids_logger.so, a machine without libcuda).
    """
    if importlib.util.find_spec("kvikio") is None:
        return "kvikio is not installed (pip install 'gdsio[kvikio]', or 'gdsio[cu12]' for CUDA 12)"
    return _import_failure()


@functools.cache
def _import_failure() -> str | None:
    """What importing kvikio (and kvikio.defaults) raised, or None; tried once."""
    try:
        import kvikio  # noqa: F401
        import kvikio.defaults  # noqa: F401
    except Exception as e:  # OSError from a library that will not load, ImportError, RuntimeError from CUDA
        return f"kvikio is installed but cannot be imported here: {type(e).__name__}: {e}"
    return None


def kvikio_config(kvikio: Any, config: dict[str, Any]) -> Any:
    import contextlib

    try:
        same = all(kvikio.defaults.get(k) == v for k, v in config.items())
    except Exception:  # an older kvikio without defaults.get
        same = False
    return contextlib.nullcontext() if same else kvikio.defaults.set(config)


def _cufile_compat(device: int) -> bool:
    """True when cuFile itself runs in its compat mode here (kvikio may not say
    so; its own check knows nvidia-fs only, not P2PDMA): gdsio's verdict."""
    st = gds.cufile_state(max(device, 0))
    return bool(st.get("driver_open")) and not st.get("true_gds", False)


def kvikio_read(path: str, dest: Destination, view: Any, size: int, offset: int, s: Settings) -> Result:
    """Reads through kvikio.CuFile.pread into `view` (a uint8 view of the destination)."""
    kvikio = _import_kvikio()
    compat = bool(getattr(kvikio.defaults, "is_compat_mode_preferred", lambda: False)())
    if dest.kind == "cuda":
        # cuFile (and kvikio's compat copies) write outside stream order: what the
        # caller queued on its stream goes first, as in gdsio's own cuFile path.
        _core.cuda_stream_synchronize(dest.stream, dest.device)
    config = {"num_threads": s.threads, "task_size": s.chunk_bytes}
    # Changing num_threads rebuilds kvikio's thread pool: only when it differs.
    with kvikio_config(kvikio, config), kvikio.CuFile(os.fspath(path), "r") as f:
        t0 = time.perf_counter()  # as gdsio's own figures: the read, not the open
        got = f.pread(view, size, offset).get()
        seconds = time.perf_counter() - t0
    if got != size:
        raise OSError(5, f"kvikio read {got} of {size} bytes at offset {offset} (file truncated?)", path)
    cufile_compat = not compat and _cufile_compat(dest.device)
    if compat:
        reason = "kvikio runs in its compat mode (POSIX reads, a synchronous copy per task)"
    elif cufile_compat:
        reason = "kvikio goes through cuFile, which runs in its own compat mode here (no nvidia-fs or P2PDMA)"
    else:
        reason = ""
    return Result("kvikio", size, seconds, s.threads, max(1, -(-size // s.chunk_bytes)),
                  direct_io=not compat and not cufile_compat, reason=reason)


def _import_kvikio() -> Any:
    """kvikio (with kvikio.defaults loaded), or BackendUnavailable saying why not."""
    why = kvikio_unusable_reason()
    if why:
        raise _core.BackendUnavailable(why)
    import kvikio  # imported already, by kvikio_unusable_reason
    import kvikio.defaults

    return kvikio


def kvikio_remote_read(reader: Any, dest: Destination, view: Any, size: int, offset: int, s: Settings) -> Result:
    """Reads a remote object through kvikio.RemoteFile (its own HTTP client,
    libcurl; S3 configured by the same AWS_* variables) into `view`."""
    kvikio = _import_kvikio()
    if dest.kind == "cuda":
        _core.cuda_stream_synchronize(dest.stream, dest.device)  # kvikio writes outside stream order
    config = {"num_threads": s.remote_concurrency, "task_size": s.remote_chunk_bytes}
    with kvikio_config(kvikio, config):
        if reader.kind == "s3":
            # kvikio takes the endpoint from AWS_ENDPOINT_URL and the region from AWS_DEFAULT_REGION.
            f = kvikio.RemoteFile.open_s3(reader.bucket, reader.key, reader.info.size)
        else:
            f = kvikio.RemoteFile.open_http(reader.url, reader.info.size)
        with f:
            t0 = time.perf_counter()
            try:
                got = f.pread(view, size, offset).get()
            except RuntimeError as e:
                # kvikio's messages may quote the URL: shown in display form (a presigned query holds a signature).
                raise OSError(5, f"kvikio's remote read failed: {redact(str(e), reader.url)}", reader.path) from None
            seconds = time.perf_counter() - t0
    if got != size:
        raise OSError(5, f"kvikio read {got} of {size} bytes at offset {offset}", reader.path)
    return Result("kvikio-remote", size, seconds, s.remote_concurrency, max(1, -(-size // s.remote_chunk_bytes)),
                  direct_io=False,
                  reason="kvikio's remote reader waits for each chunk's copy before its next GET" if dest.kind == "cuda"
                  else "")


def uint8_view(dest: Destination, out_offset: int, size: int) -> Any:
    """A 1-D uint8 view of the destination bytes, for kvikio."""
    obj = dest.owner[1] if isinstance(dest.owner, tuple) else dest.owner
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        v = obj.view(-1).view(torch.uint8)[out_offset : out_offset + size]
        return v if v.is_cuda else v.detach().numpy()  # kvikio takes host memory through the buffer protocol
    if hasattr(obj, "view") and hasattr(obj, "ravel"):  # numpy / cupy
        return obj.ravel().view("uint8")[out_offset : out_offset + size]
    raise TypeError(f"the kvikio backend cannot take a {type(obj).__name__} destination")
