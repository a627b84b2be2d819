"""``read`` and ``read_into``: one call, one file, and a ReadStats that names
the backend that ran."""

from __future__ import annotations

import os
import time
from typing import Any

from .. import _core
from ..config import current
from ..device import parse_device
from .buffers import resolve
from .file import File, int_arg
from .many import read_small
from .stats import ReadStats
from .urls import is_url

__all__ = ["read", "read_into"]


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
        TypeError: `out` or `stream` of a type gdsio cannot read into, an
            offset or size that is not an int (1.5, True), naming it.
        gdsio.BackendUnavailable: the backend asked for cannot run here, with why.
        OSError: the read failed, or the file shrank during it ("ended early").
        RuntimeError: a CUDA call failed (the message carries the CUDA error).

    Example:
        >>> buf = torch.empty(1 << 20, dtype=torch.uint8)       # or device="cuda"
        >>> st = gdsio.read_into("shard-0001.bin", buf, offset=4096)
        >>> st.backend, st.gbps
        ('posix', 3.1)
    """
    if (type(path) is str and offset == 0 and type(offset) is int and size is None and backend is None
            and stream is None and "://" not in path and not getattr(out, "is_cuda", False)):
        # The commonest call (a whole buffer of host memory from the start of a
        # local file, one chunk or less) in one C++ call: open, fstat, one
        # pread, close, as an unbuffered readinto does. Anything else, and a
        # file too short for the buffer, takes the general path below.
        dest = resolve(out)  # the general path's rule and errors for the destination
        s = current()
        if (dest.kind == "cpu" and 0 < dest.nbytes <= s.chunk_bytes and not s.direct_io
                and s.backend in ("auto", "posix")):
            t0 = time.perf_counter()
            if _core.read_file_into(path, dest.array, dest.nbytes) >= 0:
                return ReadStats("posix", dest.nbytes, time.perf_counter() - t0, 1, 1, path=path,
                                 device=dest.describe())
    offset = int_arg(offset, "offset")  # named as the caller named it, not file_offset
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
        TypeError: an offset or size that is not an int (1.5, True), naming it.
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
    if (device == "cpu" and type(device) is str and type(path) is str and offset == 0 and type(offset) is int
            and size is None and backend is None and not return_stats and "://" not in path):
        # The commonest call (a whole small local file into host memory) checked
        # in a few comparisons: one C++ call (open, fstat, pread, close), as
        # open().read() does. Anything else takes the general path below.
        s = current()
        if not s.direct_io and s.backend in ("auto", "posix"):
            got = read_small(path, s, False)
            if got is not None:
                return got[0]
            with File(path) as f:  # larger: the parallel path (the small-file check is done)
                return f.read(device=device)
    # A bad device or a size of the wrong type is named before the file is opened.
    offset, size = int_arg(offset, "offset"), None if size is None else int_arg(size, "size")
    target = parse_device(device)
    s = current()
    if (target.type == "cpu" and offset == 0 and size is None and not s.direct_io
            and isinstance(path, (str, bytes, os.PathLike)) and not is_url(path)):
        if (s.backend if backend is None else backend) in ("auto", "posix"):
            # A small file in one C++ call (open, fstat, pread, close), as open().read() does.
            got = read_small(path, s, return_stats)
            if got is not None:
                return got if return_stats else got[0]
    with File(path) as f:
        return f.read(offset=offset, size=size, device=device, backend=backend, return_stats=return_stats)
