"""Private (copy-on-write) mappings of whole files, for gdsio.tensors' mapped
loads on the CPU (load_safetensors' default, load_npy(mmap_mode="c")): the
mapping, the descriptor its header is read through, and the stats that say
the load was mapped. Package-internal: the names are public to gdsio, not
to users."""

from __future__ import annotations

import ctypes
import errno
import mmap as _mmap
import os
import stat
import time
from typing import Any

from ..platform.pagecache import typed_libc
from .stats import ReadStats

__all__ = ["Descriptor", "PrivateMapping", "mapped_stats", "open_to_map"]


class PrivateMapping:
    """A private (copy-on-write) read-write mapping of a whole file, unmapped
    when the last array over it goes: ``np.asarray`` of it is a uint8 array
    whose base it is, and torch.frombuffer holds that array, so the mapping
    lives as long as any tensor over it. It holds no descriptor."""

    def __init__(self, fd: int, size: int, path: str, nbytes: int) -> None:
        libc = typed_libc()
        if libc is None:
            raise OSError(errno.ENOSYS, f"cannot map '{path}': libc's mmap cannot be called here", path)
        # MAP_PRIVATE with PROT_WRITE: a write copies the page for this process; the file never sees it.
        # The kernel may refuse one larger than memory and swap hold (the copies it might have to make),
        # as it refuses safetensors': the error then reads as the copy's (`nbytes` of data).
        addr = libc.mmap(None, size, _mmap.PROT_READ | _mmap.PROT_WRITE, _mmap.MAP_PRIVATE, fd, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            err = ctypes.get_errno()
            raise OSError(err, f"cannot allocate {nbytes} bytes ({nbytes / 1e9:.1f} GB) on cpu for the data of "
                          f"'{path}': a private mapping of its {size} bytes: {os.strerror(err)}", path)
        self._munmap, self._addr, self._size = libc.munmap, addr, size
        self.__array_interface__ = {"data": (addr, False), "shape": (size,), "typestr": "|u1", "version": 3}

    def __del__(self) -> None:
        addr, self._addr = getattr(self, "_addr", None), None
        if addr:
            self._munmap(addr, self._size)


class Descriptor:
    """What the header parsers use of a File (path, kind, size, read_into),
    over the descriptor the mapping is made from, so that the header and the
    tensors come from one open of the file (preads: a header never faults on
    a page that a concurrent truncation took away)."""

    kind = "local"

    def __init__(self, fd: int, path: str, size: int) -> None:
        self.fd, self.path, self._size = fd, path, size

    def size(self) -> int:
        return self._size

    def read_into(self, buf: Any, size: int, offset: int, backend: str | None = None) -> None:
        view = memoryview(buf).cast("B")[:size]
        done = 0
        while done < size:
            n = os.preadv(self.fd, [view[done:]], offset + done)
            if n == 0:
                raise OSError(errno.EIO, f"'{self.path}' ended early (truncated while reading?): wanted {size} "
                              f"bytes at offset {offset}, got {done}", self.path)
            done += n


def open_to_map(path: Any, shown: str) -> tuple[int, int]:
    """(read-only descriptor, size) of `path`, which a File opened and
    checked as `shown` just before; what is no longer a regular file is refused."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"'{shown}' is no longer a regular file (replaced while loading)", shown)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def mapped_stats(path: str, t0: float, mapped: int, copied: int, what: str) -> ReadStats:
    """ReadStats of a mapped load: backend "mmap", ``nbytes`` the bytes copied
    out of the mapping (tensors that could not be views), none read otherwise."""
    reason = f"{mapped} bytes mapped privately (copy-on-write); their pages are read on first touch"
    if copied:
        reason += f"; {copied} bytes copied ({what})"
    return ReadStats(backend="mmap", nbytes=copied, seconds=time.perf_counter() - t0, threads=0, chunks=0,
                     reason=reason, path=path, device="cpu")
