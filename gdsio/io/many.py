"""Small files fast: ``read_many`` (many paths in, tensors out, one C++ call
over the thread pool with the GIL released) and the one-call path that
``gdsio.read`` takes for a small file to the CPU (open, fstat, pread and close
in C++, into memory the tensor owns).

Why: through the general path a 100 KiB read spent most of its time in
Python (settings, a File, a ReadStats); Python's own open().read() is one C
call. These paths make the same few system calls and build a ReadStats only
when asked for one.
"""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

import numpy as np

from .. import _core
from ..config import Settings, current
from ..device import resolve_device
from .buffers import HUGE_PAGES_MIN, host_empty
from .stats import ReadStats
from .urls import display, is_url

# torch is imported inside the functions that use it: `import gdsio` imports this module and
# stays light (no torch) for host reads into numpy buffers (tests/test_build.py).

__all__ = ["coalesce_ranges", "read_many", "read_ranges", "read_small", "small_read_limit"]


def small_read_limit(s: Settings) -> int:
    """Files up to this size take read()'s one-call path (one chunk, and no
    huge-page buffer, which only larger buffers get)."""
    return min(s.chunk_bytes, HUGE_PAGES_MIN - 1)


def read_small(path: str | bytes | os.PathLike[str] | os.PathLike[bytes], s: Settings, return_stats: bool) -> Any:
    """(tensor, ReadStats or None) of a whole small file on the CPU, or None when
    the file is larger than small_read_limit (the caller's parallel path reads it)."""
    import torch

    t0 = time.perf_counter() if return_stats else 0.0
    got = _core.read_whole_file(path, max_bytes=small_read_limit(s))
    if type(got) is int:
        return None
    t = torch.from_numpy(got)
    if not return_stats:
        return t, None
    n = t.numel()
    return t, ReadStats("posix", n, time.perf_counter() - t0, 1, 1 if n else 0, path=os.fsdecode(path),
                     device="host memory")


def coalesce_ranges(same_source: Any, offsets: Any, sizes: Any, dst_offsets: Any) -> tuple[Any, Any]:
    """Merges each run of ranges adjacent both in their source and in the
    destination (range k+1 starts where range k ends in the same file, and
    lands right after it): unshuffled records or members are one request.

    Args:
        same_source: bool array (n - 1,): range k+1 has range k's source.
        offsets, sizes, dst_offsets: int64 arrays (n,): each range's source
            offset, size and destination offset.

    Returns:
        (first, merged): the index of each request's first range, and each
        request's size (int64 arrays).

    >>> coalesce_ranges(np.array([True]), np.array([0, 4]), np.array([4, 4]), np.array([8, 12]))
    (array([0]), array([8]))
    """
    n = len(sizes)
    start = np.ones(n, dtype=bool)
    if n > 1:
        start[1:] = ~(same_source & (offsets[1:] == offsets[:-1] + sizes[:-1])
                      & (dst_offsets[1:] == dst_offsets[:-1] + sizes[:-1]))
    first = np.flatnonzero(start)
    return first, (np.add.reduceat(sizes, first) if n else sizes[:0])


def read_ranges(buf: Any, paths: Sequence[str], offsets: Any, sizes: Any, dst_offsets: Any = None, *,
                threads: int | None = None) -> int:
    """Reads byte ranges of local files into `buf` in one call into C++
    (the engine's reader threads, the GIL released), ranges adjacent in
    their file and in `buf` merged into one request (coalesce_ranges).

    Args:
        buf: a dense, writable host array (numpy or a CPU tensor).
        paths: each range's file. offsets, sizes: each range's (offset, size)
            in its file. dst_offsets: where each lands in `buf` (default:
            back to back, in order).
        threads: reader threads (default: the current settings').

    Returns:
        The bytes read.

    Raises:
        OSError: a file could not be opened or read (naming it). ValueError:
        a range runs past the end of `buf`.

    >>> buf = np.empty(8, np.uint8)
    >>> read_ranges(buf, ["a.bin", "a.bin"], [0, 4], [4, 4])   # one request   # doctest: +SKIP
    8
    """
    offs = np.asarray(offsets, dtype=np.int64).reshape(-1)
    lens = np.asarray(sizes, dtype=np.int64).reshape(-1)
    dst = np.cumsum(lens) - lens if dst_offsets is None else np.asarray(dst_offsets, dtype=np.int64).reshape(-1)
    if not len(paths) == len(offs) == len(lens) == len(dst):
        raise ValueError(f"read_ranges: {len(paths)} paths, {len(offs)} offsets, {len(lens)} sizes and "
                         f"{len(dst)} destinations; expected one of each per range")
    names = np.empty(len(paths), dtype=object)
    names[:] = list(paths)
    first, merged = coalesce_ranges(names[1:] == names[:-1], offs, lens, dst)
    reads = list(zip(names[first].tolist(), dst[first].tolist(), merged.tolist(), offs[first].tolist()))
    return _core.read_paths(buf, reads, threads=current().threads if threads is None else threads)


def read_many(
    paths: Sequence[str | os.PathLike[str]],
    *,
    device: Any = "cpu",
    out: Any = None,
    return_stats: bool = False,
) -> Any:
    """Reads whole files, many at once: one call into C++ that stats, opens,
    reads and closes them over gdsio's reader threads with the GIL released.
    Returns a list of 1-D uint8 tensors, views of one buffer (``out``, a
    contiguous uint8 CPU tensor of at least their total size, is filled and
    reused when given), moved to ``device`` in one copy when it is a GPU.

    Args:
        paths: the files.
        device: "cpu" (default) or a CUDA device for the result.
        out: a reusable host buffer (a 1-D contiguous uint8 CPU tensor).
        return_stats: also return a ReadStats (backend "posix", chunks = files).

    Returns:
        list[torch.Tensor] (and a ReadStats when return_stats).

    Raises:
        FileNotFoundError, PermissionError, IsADirectoryError: naming the path.
        ValueError: ``out`` too small or not a contiguous uint8 CPU tensor; a path is a URL.

    >>> blobs = gdsio.read_many(["a.jpg", "b.jpg"])
    >>> buf = torch.empty(64 << 20, dtype=torch.uint8)
    >>> blobs, st = gdsio.read_many(paths, out=buf, return_stats=True)   # no allocation
    """
    import torch

    target = resolve_device(device, what=f"cannot read {len(paths)} files into {device}")
    s = current()
    names = [os.fsdecode(os.fspath(p)) for p in paths]
    remote = next((n for n in names if is_url(n)), None)
    if remote is not None:  # one C++ call of local opens: an object store is read by read() and the Loader
        raise ValueError(f"read_many reads local files; {display(remote)} is a URL (read it with gdsio.read or gdsio.Loader)")
    t0 = time.perf_counter()
    sizes = _core.file_sizes(names, threads=s.threads)
    total = sum(sizes)
    if out is None:
        buf = host_empty(total)
    else:
        if not isinstance(out, torch.Tensor) or out.dtype != torch.uint8 or out.device.type != "cpu" or not out.is_contiguous():
            raise ValueError("out must be a contiguous uint8 CPU tensor")
        if out.numel() < total:
            raise ValueError(f"out holds {out.numel()} bytes; these {len(names)} files need {total}")
        buf = out.view(-1)
    read_ranges(buf, names, np.zeros(len(names), dtype=np.int64), sizes, threads=s.threads)
    if target.type == "cuda":
        buf = buf[:total].to(target)
    views = list(torch.split(buf[:total], sizes)) if names else []
    if not return_stats:
        return views
    st = ReadStats("posix", total, time.perf_counter() - t0, min(s.threads, max(len(names), 1)), len(names),
                   device="host memory" if target.type == "cpu" else f"{buf.device} (read into host memory, then one copy)")
    return views, st
