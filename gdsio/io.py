"""Files into memory: ``read``, ``read_into``, ``File`` and the backend choice.

Every call returns or records a ``ReadStats`` that names the backend that
really ran and, when a faster one was skipped, why.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import dataclasses
import os
import threading
import weakref
from typing import Any, Iterable, Sequence

from . import _core, _libs
from ._buffers import Destination, host_empty, resolve
from ._settings import BACKENDS, Settings, current

BackendUnavailable = _core.BackendUnavailable

_GPU_ONLY = ("gds", "cufile", "pinned")


@dataclasses.dataclass(frozen=True)
class ReadStats:
    """What one read did. ``backend`` is the path that ran: gds,
    cufile-compat, kvikio, pinned or posix; ``reason`` says why a faster one
    (or O_DIRECT) was not used, empty when nothing was skipped."""

    backend: str
    nbytes: int
    seconds: float
    threads: int
    chunks: int
    direct_io: bool = False
    reason: str = ""
    path: str = ""
    device: str = "cpu"

    @property
    def gbps(self) -> float:
        """Gigabytes (1e9 bytes) per second."""
        return self.nbytes / self.seconds / 1e9 if self.seconds > 0 else float("inf")

    def __str__(self) -> str:
        s = (
            f"{self.backend}: {self.nbytes} bytes in {self.seconds * 1e3:.2f} ms "
            f"({self.gbps:.2f} GB/s, {self.threads} threads, {self.chunks} chunks"
            f"{', O_DIRECT' if self.direct_io else ''}) -> {self.device}"
        )
        return s + (f" [{self.reason}]" if self.reason else "")


def _check_backend(backend: str | None, s: Settings) -> str:
    b = s.backend if backend is None else backend
    if not isinstance(b, str) or b not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {b!r}")
    return b


def _plan(backend: str, dest: Destination, core_file: Any) -> tuple[str, str]:
    """(backend to run, reason a faster one was skipped) for one destination."""
    if dest.kind == "cpu":
        if backend in _GPU_ONLY:
            raise ValueError(
                f"backend {backend!r} reads into GPU memory, but the destination is host memory; "
                "use 'posix' (or 'auto') for host destinations"
            )
        return ("kvikio" if backend == "kvikio" else "posix"), ""
    if backend == "posix":
        raise ValueError("backend 'posix' reads into host memory, but the destination is on the GPU; use 'auto' or 'pinned'")
    if backend in ("pinned", "kvikio"):
        return backend, ""
    if backend in ("auto", "gds"):
        why = _libs.gds_impossible_reason()
        if why:  # decided without opening the cuFile driver
            if backend == "gds":
                raise BackendUnavailable("true GPUDirect Storage is not available: " + why)
            return "pinned", "gds skipped: " + why
    st = _libs.cufile_state(dest.device)
    if backend == "cufile":
        if not st["driver_open"]:
            raise BackendUnavailable("cuFile is not usable here: " + st["reason"])
        return "cufile", ""
    if st["driver_open"] and st["true_gds"]:
        try:
            _cufile_registration(core_file, dest.device)
            refusal = core_file.direct_io_refusal()
            if not refusal:
                return "cufile", ""
            # Without O_DIRECT cuFile would serve this file in its compat mode.
            why = f"O_DIRECT is refused for this file ({refusal}), so cuFile would run in its compat mode"
        except BackendUnavailable as e:
            why = str(e)
    elif st["driver_open"]:
        why = st["reason"] + "; auto prefers gdsio's pinned pipeline to cuFile's compat mode"
    else:
        why = st["reason"]
    if backend == "gds":
        raise BackendUnavailable("true GPUDirect Storage is not available: " + why)
    return "pinned", "gds skipped: " + why


def _cufile_registration(core_file: Any, device: int) -> None:
    # Registers the file with cuFile (once per File); raises BackendUnavailable.
    core_file.register_cufile(device)


def _uint8_view(dest: Destination, out_offset: int, size: int) -> Any:
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


def _check_range(path: str, file_size: int, offset: int, size: int) -> None:
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    if offset > file_size:
        raise ValueError(f"offset {offset} is beyond the end of '{path}' ({file_size} bytes)")
    if offset + size > file_size:
        raise ValueError(
            f"cannot read {size} bytes at offset {offset}: '{path}' holds {file_size} bytes "
            f"({offset + size - file_size} too many)"
        )


def _to_stats(d: dict[str, Any], path: str, dest: Destination, reason: str) -> ReadStats:
    reasons = [r for r in (reason, d.get("reason", "")) if r]
    return ReadStats(
        backend=d["backend"],
        nbytes=int(d["nbytes"]),
        seconds=float(d["seconds"]),
        threads=int(d["threads"]),
        chunks=int(d["chunks"]),
        direct_io=bool(d["direct_io"]),
        reason="; ".join(reasons),
        path=path,
        device=dest.describe(),
    )


def _read_requests(
    core_file: Any,
    path: str,
    dests: Sequence[Destination],
    reqs: Sequence[tuple[int, int, int]],
    backend: str,
    s: Settings,
    batch: bool = False,
) -> ReadStats:
    """Runs (dst_ptr, size, file_offset) requests, all into one kind of memory."""
    kinds = {(d.kind, d.device) for d in dests}
    if len(kinds) > 1:
        raise ValueError(f"a batch must read into one device; got {sorted(d.describe() for d in dests)}")
    dest = dests[0]
    name, reason = _plan(backend, dest, core_file)
    if name == "kvikio":
        raise ValueError("the kvikio backend reads one request at a time; use File.pread")
    core_backend = "cufile-batch" if (name == "cufile" and batch) else name
    d = _core.read(
        core_file,
        core_backend,
        list(reqs),
        threads=s.threads,
        chunk_bytes=s.chunk_bytes,
        staging_buffers=s.staging_buffers,
        direct_io=s.direct_io,
        device=max(dest.device, 0),
        stream=dest.stream,
    )
    return _to_stats(d, path, dest, reason)


class File:
    """An open file for repeated reads; a context manager.

    >>> with gdsio.File("shard.bin") as f:
    ...     fut = f.pread(buf, 1 << 20, file_offset=4096)
    ...     stats = fut.result()
    ...     f.read_batch([(a, 4096, 0), (b, 4096, 8192)])
    """

    def __init__(self, path: str | os.PathLike[str], *, backend: str | None = None) -> None:
        self.path = os.fspath(path)
        self._backend = backend
        self._core = _core.File(self.path)
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def __enter__(self) -> "File":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    @property
    def closed(self) -> bool:
        return self._core.closed

    def size(self) -> int:
        """The file's size in bytes now."""
        return self._core.size()

    def close(self) -> None:
        """Waits for pending preads, then closes the descriptors and cuFile handle."""
        with self._lock:
            ex, self._executor = self._executor, None
        if ex is not None:
            ex.shutdown(wait=True)
        self._core.close()

    def read_into(
        self,
        out: Any,
        size: int | None = None,
        file_offset: int = 0,
        out_offset: int = 0,
        *,
        backend: str | None = None,
        stream: Any = None,
    ) -> ReadStats:
        """Reads `size` bytes (default: what fits in `out` after `out_offset`) at
        `file_offset` into `out` at byte `out_offset`; blocks until done."""
        s = current()
        b = _check_backend(backend if backend is not None else self._backend, s)
        dest = resolve(out, stream=stream)
        if out_offset < 0 or out_offset > dest.nbytes:
            raise ValueError(f"out_offset {out_offset} is outside the destination ({dest.nbytes} bytes)")
        if size is None:
            size = dest.nbytes - out_offset
        _check_range(self.path, self.size(), file_offset, size)
        if size > dest.nbytes - out_offset:
            raise ValueError(
                f"destination too small: {size} bytes do not fit in {dest.nbytes - out_offset} bytes "
                f"(buffer of {dest.nbytes} bytes, out_offset {out_offset})"
            )
        if b == "kvikio":
            from ._kvikio import kvikio_read

            view = _uint8_view(dest, out_offset, size)
            return _to_stats(kvikio_read(self.path, dest, view, size, file_offset, s), self.path, dest, "")
        return _read_requests(self._core, self.path, [dest], [(dest.ptr + out_offset, size, file_offset)], b, s)

    def pread(
        self,
        out: Any,
        size: int | None = None,
        file_offset: int = 0,
        out_offset: int = 0,
        *,
        backend: str | None = None,
        stream: Any = None,
    ) -> "concurrent.futures.Future[ReadStats]":
        """Like read_into, but returns at once with a Future of the ReadStats.
        Settings in force at the call apply; close() waits for pending reads."""
        ctx = contextvars.copy_context()
        if stream is None:
            # The caller's current stream, taken here: torch's current stream is
            # per thread, and the read runs on a worker thread.
            try:
                stream = resolve(out, name="out").stream
            except (TypeError, ValueError):
                pass  # read_into raises it, through the Future
        with self._lock:
            if self._core.closed:
                raise ValueError(f"I/O on closed file '{self.path}'")
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=4, thread_name_prefix="gdsio-pread"
                )
            return self._executor.submit(
                ctx.run, self.read_into, out, size, file_offset, out_offset, backend=backend, stream=stream
            )

    def read_batch(
        self,
        requests: Iterable[tuple[Any, int, int] | tuple[Any, int, int, int]],
        *,
        backend: str | None = None,
        stream: Any = None,
    ) -> ReadStats:
        """Reads many (out, size, file_offset[, out_offset]) at once, all in
        flight together: cuFile's batch API on the gds backend, one pass of the
        reader threads elsewhere. Destinations must share one device."""
        s = current()
        b = _check_backend(backend if backend is not None else self._backend, s)
        file_size = self.size()
        dests: list[Destination] = []
        reqs: list[tuple[int, int, int]] = []
        for i, r in enumerate(requests):
            if len(r) not in (3, 4):
                raise ValueError(f"request {i}: expected (out, size, file_offset[, out_offset]), got {len(r)} items")
            out, size, off = r[0], int(r[1]), int(r[2])
            out_off = int(r[3]) if len(r) == 4 else 0
            d = resolve(out, stream=stream, name=f"requests[{i}] destination")
            _check_range(self.path, file_size, off, size)
            if out_off < 0 or size + out_off > d.nbytes:
                raise ValueError(f"request {i}: {size} bytes at out_offset {out_off} do not fit in {d.nbytes} bytes")
            dests.append(d)
            reqs.append((d.ptr + out_off, size, off))
        if not reqs:
            return ReadStats("none", 0, 0.0, 0, 0, path=self.path)
        if b == "kvikio":
            raise ValueError("read_batch does not run on the kvikio backend; use File.pread per request")
        return _read_requests(self._core, self.path, dests, reqs, b, s, batch=True)


def read_into(
    path: str | os.PathLike[str],
    out: Any,
    *,
    offset: int = 0,
    size: int | None = None,
    backend: str | None = None,
    stream: Any = None,
) -> ReadStats:
    """Fills `out` (torch/cupy/numpy/buffer, cpu or cuda, contiguous) with the
    bytes of `path` from `offset`; `size` defaults to out's byte size. The copy
    is ordered on `stream` (an int cudaStream_t, a torch.cuda.Stream or a cupy
    Stream; default: the current stream of out's framework) and complete on
    return: it starts after the work queued there (cuFile and kvikio, which
    write outside stream order, first synchronise the stream).

    >>> buf = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    >>> st = gdsio.read_into("shard.bin", buf, offset=4096)
    >>> st.backend, st.gbps
    """
    with File(path) as f:
        return f.read_into(out, size, offset, backend=backend, stream=stream)


def _parse_device(device: Any) -> tuple[str, int]:
    if isinstance(device, int) and not isinstance(device, bool):
        return "cuda", device
    text = str(device)
    if text == "cpu":
        return "cpu", -1
    if text == "cuda":
        return "cuda", -2  # the current device
    if text.startswith("cuda:") and text[5:].isdigit():
        return "cuda", int(text[5:])
    raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or an int; got {device!r}")


def read(
    path: str | os.PathLike[str],
    *,
    offset: int = 0,
    size: int | None = None,
    device: Any = "cuda",
    backend: str | None = None,
    return_stats: bool = False,
) -> Any:
    """Reads `size` bytes (default: to the end) of `path` from `offset` into a
    new 1-D uint8 torch tensor on `device`.

    >>> t = gdsio.read("shard.bin", device="cuda")
    >>> t, st = gdsio.read("shard.bin", device="cpu", return_stats=True)
    """
    import torch

    kind, index = _parse_device(device)
    s = current()
    with File(path) as f:
        file_size = f.size()
        if size is None:
            if offset < 0 or offset > file_size:
                _check_range(f.path, file_size, offset, 0)
            size = file_size - offset
        _check_range(f.path, file_size, offset, size)
        if kind == "cpu":
            # O_DIRECT reads straight into page-aligned memory; torch aligns to 64 bytes.
            out = host_empty(size, 4096 if s.direct_io and size else 0)
        else:
            why = _libs.cuda_unusable_reason()
            if why:
                raise BackendUnavailable(f"cannot read '{f.path}' into {device}: {why}")
            dev = torch.device("cuda", torch.cuda.current_device() if index == -2 else index)
            out = torch.empty(size, dtype=torch.uint8, device=dev)
        st = f.read_into(out, size, offset, backend=backend)
    return (out, st) if return_stats else out


def register_buffer(out: Any) -> "RegisteredBuffer":
    """Registers a GPU destination with cuFile, for a buffer reused by many
    reads (saves cuFile's bounce buffers on the gds path). A context manager;
    deregisters on exit. Raises BackendUnavailable where cuFile is unusable."""
    return RegisteredBuffer(out)


def _deregister(ptr: int) -> None:
    _core.cufile_deregister_buffer(ptr)


class RegisteredBuffer:
    """A GPU buffer registered with cuFile (see register_buffer). It keeps the
    memory alive while registered and deregisters on close(), on exit of a
    with block, when dropped without either (garbage collected), or at
    interpreter exit: never after the memory was freed."""

    def __init__(self, out: Any) -> None:
        self.dest = resolve(out)
        if self.dest.kind != "cuda":
            raise ValueError("only GPU memory can be registered with cuFile")
        st = _libs.cufile_state(self.dest.device)
        if not st["driver_open"]:
            raise BackendUnavailable("cuFile is not usable here: " + st["reason"])
        ok, reason = _core.cufile_register_buffer(self.dest.ptr, self.dest.nbytes, self.dest.device)
        self.registered = bool(ok)
        self.reason = reason
        # Runs before the object's attributes (dest.owner, the memory) are
        # released, also when it is collected in a cycle; once at most.
        self._finalizer = weakref.finalize(self, _deregister, self.dest.ptr) if self.registered else None

    def __enter__(self) -> "RegisteredBuffer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.registered:
            self.registered = False
            if self._finalizer is not None:
                self._finalizer()
