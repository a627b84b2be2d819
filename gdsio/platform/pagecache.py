"""The page cache: how much of a file is resident, and evicting it without
root (for cold-read benchmarks).

>>> from gdsio.platform import pagecache
>>> pagecache.evict("shard-0001.bin")          # doctest: +SKIP
True
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import mmap
import os
from typing import Any

__all__ = ["EVICTED_BELOW", "evict", "resident_fraction"]


#: evict() counts a file as out of the page cache below this resident fraction.
EVICTED_BELOW = 0.01
_MAP_WINDOW = 1 << 30  # map at most 1 GiB at a time, to stay light on address space
_ODD_BYTES = bytes(range(1, 256, 2))  # mincore sets bit 0 for a resident page


@functools.cache
def typed_libc() -> Any:
    """libc with mmap, munmap and mincore typed, or None where that fails (gdsio.io.mapped uses it too)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long)
        libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
        libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    except (OSError, AttributeError):
        return None
    return libc


def resident_fraction(path: str) -> float | None:
    """Fraction (0..1) of ``path``'s pages now in the page cache.

    0.0 for an empty file; None when mincore is unavailable or the file cannot
    be opened or mapped.
    """
    libc = typed_libc()
    if libc is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0.0
        page = os.sysconf("SC_PAGE_SIZE")
        resident = 0
        for offset in range(0, size, _MAP_WINDOW):
            length = min(_MAP_WINDOW, size - offset)
            addr = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
            if addr is None or addr == ctypes.c_void_p(-1).value:
                return None
            try:
                vec = ctypes.create_string_buffer((length + page - 1) // page)
                if libc.mincore(addr, length, vec) != 0:
                    return None
                raw = vec.raw
                resident += len(raw) - len(raw.translate(None, _ODD_BYTES))
            finally:
                libc.munmap(addr, length)
        return resident / ((size + page - 1) // page)
    finally:
        os.close(fd)


def evict(path: str) -> bool:
    """Drop ``path`` from the page cache without root; True when it then is out.

    False means the eviction did not take (tmpfs keeps its pages, another
    process maps the file) or could not be checked.

    >>> evict("shard-0001.bin")                  # doctest: +SKIP
    True
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        with contextlib.suppress(OSError):
            # DONTNEED skips dirty pages: write a just-written file back first.
            os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (OSError, AttributeError):
        return False
    finally:
        os.close(fd)
    fraction = resident_fraction(path)
    return fraction is not None and fraction < EVICTED_BELOW
