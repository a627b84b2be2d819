"""``File``: an open file (any reader) for repeated reads, from any thread."""

from __future__ import annotations

import concurrent.futures
import contextvars
import numbers
import os
import threading
from typing import Any, Iterable

from ..config import Settings, current
from ..device import parse_device, require_cuda
from .backends import BACKENDS, check_name, run
from .buffers import Destination, host_empty, resolve
from .readers import open_reader
from .stats import ReadStats

# torch is imported inside the functions that use it: `import gdsio` imports this module and
# stays light (no torch) for host reads into numpy buffers (tests/test_build.py).

__all__ = ["File", "check_range", "int_arg"]


def int_arg(value: Any, name: str) -> int:
    """`value` as an int, or a TypeError naming the argument (a bool, a float
    such as 1.5 or 2.0, a str are not byte counts)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    return int(value)


def check_range(path: str, file_size: int, offset: int, size: int) -> None:
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


class File:
    """An open file for repeated reads, from any thread; a context manager.

    Opening once and reading many times saves the open (and, on the gds
    backend, the cuFile handle registration) per read. ``pread`` returns a
    future, ``read_batch`` puts many reads in flight at once.

    A remote object (``s3://bucket/key``, ``http://`` or ``https://`` URL)
    is opened with one HEAD, which pins its size and ETag: a read of an
    object rewritten since raises OSError rather than mix two versions.

    Args:
        path: the file to read, or the URL of a remote object.
        backend: the default backend of this file's reads: ``"auto"``,
            ``"gds"``, ``"cufile"``, ``"kvikio"``, ``"pinned"``, ``"posix"``,
            or for URLs ``"s3"``, ``"http"``, ``"kvikio-remote"``
            (None: the ``backend`` setting, ``"auto"`` unless changed). A
            method's own ``backend=`` overrides it.

    Raises:
        FileNotFoundError: `path` does not exist (PermissionError: unreadable,
            IsADirectoryError: a directory; OSError: not a regular file).
            For a URL: 404, 403, or the store could not be reached.
        ImportError: an s3:// URL without botocore (``pip install 'gdsio[s3]'``).

    Example:
        >>> buf = torch.empty(1 << 20, dtype=torch.uint8)
        >>> with gdsio.File("shard-0001.bin") as f:
        ...     st = f.read_into(buf, file_offset=4096)
        ...     fut = f.pread(buf, 4096, file_offset=0)     # a concurrent.futures.Future
        ...     st = fut.result()
    """

    def __init__(self, path: str | bytes | os.PathLike[str] | os.PathLike[bytes], *, backend: str | None = None) -> None:
        self._reader = open_reader(path)
        self.path = self._reader.path  # a URL's display form: no credentials, no query string
        self.kind = self._reader.kind  # "local", "s3" or "http"
        self._backend = backend
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def __enter__(self) -> "File":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A finalizer never waits: the cyclic GC may run it inside another
        # thread's start, where joining the pread workers would deadlock. The
        # workers finish on their own; the core frees the file after the last read.
        try:
            with self._lock:
                ex, self._executor = self._executor, None
            if ex is not None:
                ex.shutdown(wait=False, cancel_futures=True)
            self._reader.close()
        except Exception:
            pass

    @property
    def closed(self) -> bool:
        """True once ``close()`` ran."""
        return self._reader.closed

    def size(self) -> int:
        """The file's size in bytes, now (asked of the file system at each call).

        Returns:
            int: the size in bytes.

        Example:
            >>> with gdsio.File("shard-0001.bin") as f:
            ...     n = f.size()
        """
        return self._reader.size()

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
        self._reader.close()

    def read(
        self,
        *,
        offset: int = 0,
        size: int | None = None,
        device: Any = "cuda",
        backend: str | None = None,
        return_stats: bool = False,
    ) -> Any:
        """Reads this file (or a range of it) into a new 1-D uint8 torch tensor
        on `device`, as ``gdsio.read`` does (which opens, calls this and closes).
        Reading a header with ``read_into`` and then the body with ``read`` from
        one ``File`` takes both from the same file, even if its path is renamed
        over in between.

        Args:
            offset: where in the file to start, in bytes.
            size: bytes to read; default: to the end of the file (its size now).
            device: "cuda" (default), "cuda:N", an int N, or "cpu".
            backend: as in ``read_into``.
            return_stats: also return the ReadStats.

        Returns:
            torch.Tensor: 1-D uint8 of `size` bytes; with ``return_stats=True``,
            ``(tensor, ReadStats)``.

        Raises:
            ValueError: a range outside the file, a bad device or backend.
            TypeError: an offset or size that is not an int (1.5, True), naming it.
            gdsio.BackendUnavailable: a GPU device where CUDA cannot be used.
            OSError: the read failed, or the file shrank during it.

        Example:
            >>> with gdsio.File("cat.npy") as f:
            ...     f.read_into(head, 128)                    # the header
            ...     t = f.read(device="cuda")                 # the whole file, the same one
        """
        import torch

        offset = int_arg(offset, "offset")
        size = None if size is None else int_arg(size, "size")
        target = parse_device(device)
        s = current()
        file_size = self.size()
        if size is None:
            if offset < 0 or offset > file_size:
                check_range(self.path, file_size, offset, 0)
            size = file_size - offset
        check_range(self.path, file_size, offset, size)
        if target.type == "cpu":
            # O_DIRECT reads straight into page-aligned memory; torch aligns to 64 bytes.
            out = host_empty(size, 4096 if s.direct_io and size else 0)
        else:
            dev = require_cuda(f"cannot read '{self.path}' into {device}", target.index)
            out = torch.empty(size, dtype=torch.uint8, device=dev)
        # The range was checked against the size taken above: a file that shrinks
        # from here on is an I/O race the reader reports (OSError "ended early"),
        # not a caller's mistake, so read_into's own range check is not run again.
        st = self._read_checked(check_name(self._backend_of(backend, s)), resolve(out), size, offset, 0, s)
        return (out, st) if return_stats else out

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
            TypeError: `out` or `stream` of a type gdsio cannot read into; a
                size or offset that is not an int, naming it.
            gdsio.BackendUnavailable: the backend asked for cannot run here.
            OSError: the read failed, or the file shrank during it ("ended early").

        Example:
            >>> with gdsio.File("shard-0001.bin") as f:
            ...     st = f.read_into(buf, 4096, file_offset=8192)
        """
        file_offset, out_offset = int_arg(file_offset, "file_offset"), int_arg(out_offset, "out_offset")
        size = None if size is None else int_arg(size, "size")
        s = current()
        b = check_name(self._backend_of(backend, s))
        dest = resolve(out, stream=stream)
        if out_offset < 0 or out_offset > dest.nbytes:
            raise ValueError(f"out_offset {out_offset} is outside the destination ({dest.nbytes} bytes)")
        if size is None:
            size = dest.nbytes - out_offset
        check_range(self.path, self.size(), file_offset, size)
        return self._read_checked(b, dest, size, file_offset, out_offset, s)

    def _read_checked(self, b: str, dest: Destination, size: int, file_offset: int, out_offset: int,
                      s: Settings) -> ReadStats:
        """read_into after its checks of the backend's name `b` and of the range against the file's size."""
        if size > dest.nbytes - out_offset:
            raise ValueError(
                f"destination too small: {size} bytes do not fit in {dest.nbytes - out_offset} bytes "
                f"(buffer of {dest.nbytes} bytes, out_offset {out_offset})"
            )
        return run(b, self._reader, [dest], [(out_offset, size, file_offset)], s)

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
            if self._reader.closed:
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
        b = check_name(self._backend_of(backend, s))
        file_size = self.size()
        dests: list[Destination] = []
        reqs: list[tuple[int, int, int]] = []
        for i, r in enumerate(requests):
            if len(r) not in (3, 4):
                raise ValueError(f"request {i}: expected (out, size, file_offset[, out_offset]), got {len(r)} items")
            out, size, off = r[0], int_arg(r[1], f"request {i}: size"), int_arg(r[2], f"request {i}: file_offset")
            out_off = int_arg(r[3], f"request {i}: out_offset") if len(r) == 4 else 0
            d = resolve(out, stream=stream, name=f"requests[{i}] destination")
            check_range(self.path, file_size, off, size)
            if out_off < 0 or size + out_off > d.nbytes:
                raise ValueError(f"request {i}: {size} bytes at out_offset {out_off} do not fit in {d.nbytes} bytes")
            dests.append(d)
            reqs.append((out_off, size, off))
        if not reqs:
            return ReadStats("none", 0, 0.0, 0, 0, path=self.path)
        if not (b == "auto" or BACKENDS[b].batches):
            raise ValueError(f"read_batch does not run on the {b} backend; use File.pread per request")
        return run(b, self._reader, dests, reqs, s, batch=True)

    def _backend_of(self, backend: str | None, s: Settings) -> str:
        """The call's backend, else the file's, else the setting."""
        return backend if backend is not None else self._backend if self._backend is not None else s.backend
