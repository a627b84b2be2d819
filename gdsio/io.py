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
from typing import Any, Iterable, Sequence

from . import _core
from .device import parse_device, require_cuda
from .platform import gds
from ._buffers import Destination, host_empty, resolve
from ._settings import BACKENDS, Settings, current

__all__ = ["BackendUnavailable", "File", "ReadStats", "RegisteredBuffer", "read", "read_into", "register_buffer"]

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
        why = gds.gds_impossible_reason()
        if why:  # decided without opening the cuFile driver
            if backend == "gds":
                raise BackendUnavailable("true GPUDirect Storage is not available: " + why)
            return "pinned", "gds skipped: " + why
    st = gds.cufile_state(dest.device)
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
    """An open file for repeated reads, from any thread; a context manager.

    Opening once and reading many times saves the open (and, on the gds
    backend, the cuFile handle registration) per read. ``pread`` returns a
    future, ``read_batch`` puts many reads in flight at once.

    Args:
        path: the file to read.
        backend: the default backend of this file's reads: ``"auto"``,
            ``"gds"``, ``"cufile"``, ``"kvikio"``, ``"pinned"`` or ``"posix"``
            (None: the ``backend`` setting, ``"auto"`` unless changed). A
            method's own ``backend=`` overrides it.

    Raises:
        FileNotFoundError: `path` does not exist (PermissionError: unreadable,
            IsADirectoryError: a directory; OSError: not a regular file).

    Example:
        >>> buf = torch.empty(1 << 20, dtype=torch.uint8)
        >>> with gdsio.File("shard-0001.bin") as f:
        ...     st = f.read_into(buf, file_offset=4096)
        ...     fut = f.pread(buf, 4096, file_offset=0)     # a concurrent.futures.Future
        ...     st = fut.result()
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
        """True once ``close()`` ran."""
        return self._core.closed

    def size(self) -> int:
        """The file's size in bytes, now (asked of the file system at each call).

        Returns:
            int: the size in bytes.

        Example:
            >>> with gdsio.File("shard-0001.bin") as f:
            ...     n = f.size()
        """
        return self._core.size()

    def close(self) -> None:
        """Waits for pending preads, then closes the descriptors and the cuFile
        handle. Idempotent; leaving a ``with`` block calls it.

        Example:
            >>> f = gdsio.File("shard-0001.bin"); f.close(); f.closed
            True
        """
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
        """Reads `size` bytes at `file_offset` into `out` at byte `out_offset`;
        returns when the bytes are there.

        Args:
            out: the destination: a contiguous, writable torch tensor (cpu or
                cuda), cupy or numpy array, an object with
                ``__cuda_array_interface__``, ``__dlpack__`` or the buffer protocol.
            size: bytes to read (default: what fits in `out` after `out_offset`).
            file_offset: where in the file to start.
            out_offset: where in `out` to start, in bytes.
            backend: this read's backend (default: the file's, then the setting).
            stream: the CUDA stream the copy is ordered on (an int, a
                ``torch.cuda.Stream`` or a cupy stream; default: the current
                stream of `out`'s framework).

        Returns:
            ReadStats: the backend that ran, bytes, seconds, and why a faster
            backend was skipped.

        Raises:
            ValueError: a negative or past-the-end range, `out` too small,
                non-contiguous or read-only, a backend that does not fit the
                destination (posix into GPU memory, gds/cufile/pinned into host memory).
            TypeError: `out` or `stream` of a type gdsio cannot read into.
            gdsio.BackendUnavailable: the backend asked for cannot run here.
            OSError: the read failed, or the file shrank during it ("ended early").

        Example:
            >>> with gdsio.File("shard-0001.bin") as f:
            ...     st = f.read_into(buf, 4096, file_offset=8192)
        """
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
        """Like ``read_into``, but returns at once: the read runs on one of the
        file's 4 worker threads. Settings in force at the call apply, and the
        caller's current stream is taken now; ``close()`` waits for pending reads.

        Args:
            out: the destination, as in ``read_into``.
            size: bytes to read (default: what fits in `out` after `out_offset`).
            file_offset: where in the file to start.
            out_offset: where in `out` to start, in bytes.
            backend: this read's backend (default: the file's, then the setting).
            stream: the CUDA stream the copy is ordered on (default: the caller's current one).

        Returns:
            concurrent.futures.Future[ReadStats]: ``result()`` gives the
            ReadStats or raises what ``read_into`` would.

        Raises:
            ValueError: the file is closed.

        Example:
            >>> with gdsio.File("shard-0001.bin") as f:
            ...     futs = [f.pread(b, 4096, file_offset=i * 4096) for i, b in enumerate(bufs)]
            ...     stats = [fut.result() for fut in futs]
        """
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
        """Reads many ranges at once, all in flight together: cuFile's batch API
        on the gds backend, one pass of the reader threads elsewhere.

        Args:
            requests: ``(out, size, file_offset)`` or ``(out, size,
                file_offset, out_offset)`` tuples; every `out` on one device.
            backend: the backend (default: the file's, then the setting); not ``"kvikio"``.
            stream: the CUDA stream the copies are ordered on.

        Returns:
            ReadStats: for the whole batch (``nbytes`` is the sum).

        Raises:
            ValueError: a malformed request, a range past the end of the file
                or of its destination, destinations on different devices, the
                kvikio backend.
            TypeError: a destination gdsio cannot read into.
            gdsio.BackendUnavailable: the backend asked for cannot run here.
            OSError: a read failed.

        Example:
            >>> a, b = torch.empty(4096, dtype=torch.uint8), torch.empty(4096, dtype=torch.uint8)
            >>> with gdsio.File("shard-0001.bin") as f:
            ...     st = f.read_batch([(a, 4096, 0), (b, 4096, 1 << 20)])
        """
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
    """Fills a buffer of the caller's with the bytes of `path` from `offset`,
    with no extra copy. The copy is ordered on `stream` and complete on return:
    it starts after the work queued there (cuFile and kvikio, which write
    outside stream order, first synchronise the stream).

    Args:
        path: the file to read.
        out: the destination: a contiguous, writable torch tensor (cpu or
            cuda), cupy or numpy array, an object with
            ``__cuda_array_interface__``, ``__dlpack__`` or the buffer protocol.
        offset: where in the file to start, in bytes.
        size: bytes to read; default: `out`'s size in bytes (the file must hold
            that many from `offset`).
        backend: ``"auto"`` (default, from the ``backend`` setting): ``gds``
            where true GPUDirect Storage works for this file, else ``pinned``
            for GPU memory and ``posix`` for host memory. Or one of
            ``"gds"``, ``"cufile"``, ``"kvikio"``, ``"pinned"``, ``"posix"``.
        stream: the CUDA stream the copy is ordered on: an int
            (cudaStream_t), a ``torch.cuda.Stream`` or a cupy stream; default:
            the current stream of `out`'s framework.

    Returns:
        ReadStats: ``backend`` (what ran: gds, cufile-compat, kvikio, pinned
        or posix), ``nbytes``, ``seconds``, ``gbps``, and ``reason``: why a
        faster backend was skipped.

    Raises:
        FileNotFoundError: `path` does not exist (PermissionError: unreadable,
            IsADirectoryError: a directory, OSError: not a regular file).
        ValueError: a negative offset, a range past the end of the file, `out`
            too small, non-contiguous or read-only, a backend that does not
            fit the destination.
        TypeError: `out` or `stream` of a type gdsio cannot read into.
        gdsio.BackendUnavailable: the backend asked for cannot run here, with why.
        OSError: the read failed, or the file shrank during it ("ended early").
        RuntimeError: a CUDA call failed (the message carries the CUDA error).

    Example:
        >>> buf = torch.empty(1 << 20, dtype=torch.uint8)       # or device="cuda"
        >>> st = gdsio.read_into("shard-0001.bin", buf, offset=4096)
        >>> st.backend, st.gbps
        ('posix', 3.1)
    """
    with File(path) as f:
        return f.read_into(out, size, offset, backend=backend, stream=stream)


def read(
    path: str | os.PathLike[str],
    *,
    offset: int = 0,
    size: int | None = None,
    device: Any = "cuda",
    backend: str | None = None,
    return_stats: bool = False,
) -> Any:
    """Reads a file (or a range of it) into a new 1-D uint8 torch tensor on `device`.

    GPU memory is filled by ``gds`` (cuFile, true GPUDirect Storage: DMA from
    NVMe to the GPU) where it works for this file, else by ``pinned`` (gdsio's
    pipelined copy through pinned staging buffers); host memory by ``posix``
    (parallel chunked reads). ``kvikio`` and ``cufile`` (cuFile whatever its
    mode) run when asked. ``return_stats=True`` says which ran and why a faster
    one did not.

    Args:
        path: the file to read.
        offset: where in the file to start, in bytes.
        size: bytes to read; default: to the end of the file.
        device: where the tensor lives. Default "cuda" (the current CUDA
            device); ``"cuda:N"`` or an int N for another one, ``"cpu"`` for
            host memory (which also works on machines without a GPU).
        backend: ``"auto"`` (default, from the ``backend`` setting) or one of
            ``"gds"``, ``"cufile"``, ``"kvikio"``, ``"pinned"``, ``"posix"``.
        return_stats: also return the ReadStats.

    Returns:
        torch.Tensor: 1-D uint8 of `size` bytes on `device`; with
        ``return_stats=True``, ``(tensor, ReadStats)``.

    Raises:
        FileNotFoundError: `path` does not exist (PermissionError: unreadable,
            IsADirectoryError: a directory, OSError: not a regular file).
        ValueError: a negative offset or size, a range past the end of the
            file, a device that is not "cpu", "cuda", "cuda:N" or an int (or
            names a GPU that does not exist), a backend that does not fit the
            device (posix for GPU memory, gds/cufile/pinned for host memory).
        gdsio.BackendUnavailable: a GPU device where CUDA cannot be used (no
            driver, no GPU, a CPU-only torch; the message says which and to
            pass device="cpu"), or a backend asked for that cannot run here.
        OSError: the read failed, or the file shrank during it ("ended early").
        RuntimeError: a CUDA call failed (the message carries the CUDA error).

    Example:
        >>> device = "cuda" if torch.cuda.is_available() else "cpu"
        >>> t = gdsio.read("shard-0001.bin", device=device)
        >>> t, st = gdsio.read("shard-0001.bin", device="cpu", offset=4096, size=1 << 20, return_stats=True)
        >>> st.backend, st.reason
        ('posix', '')
    """
    import torch

    target = parse_device(device)
    s = current()
    with File(path) as f:
        file_size = f.size()
        if size is None:
            if offset < 0 or offset > file_size:
                _check_range(f.path, file_size, offset, 0)
            size = file_size - offset
        _check_range(f.path, file_size, offset, size)
        if target.type == "cpu":
            # O_DIRECT reads straight into page-aligned memory; torch aligns to 64 bytes.
            out = host_empty(size, 4096 if s.direct_io and size else 0)
        else:
            dev = require_cuda(f"cannot read '{f.path}' into {device}", target.index)
            out = torch.empty(size, dtype=torch.uint8, device=dev)
        st = f.read_into(out, size, offset, backend=backend)
    return (out, st) if return_stats else out


def register_buffer(out: Any) -> "RegisteredBuffer":
    """Registers a GPU destination with cuFile, for a buffer reused by many
    reads (saves cuFile's bounce buffers on the gds path). A context manager;
    deregisters on exit. Raises BackendUnavailable where cuFile is unusable."""
    return RegisteredBuffer(out)


class RegisteredBuffer:
    def __init__(self, out: Any) -> None:
        self.dest = resolve(out)
        if self.dest.kind != "cuda":
            raise ValueError("only GPU memory can be registered with cuFile")
        st = gds.cufile_state(self.dest.device)
        if not st["driver_open"]:
            raise BackendUnavailable("cuFile is not usable here: " + st["reason"])
        ok, reason = _core.cufile_register_buffer(self.dest.ptr, self.dest.nbytes, self.dest.device)
        self.registered = bool(ok)
        self.reason = reason

    def __enter__(self) -> "RegisteredBuffer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.registered:
            _core.cufile_deregister_buffer(self.dest.ptr)
            self.registered = False
