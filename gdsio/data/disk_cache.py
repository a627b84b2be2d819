"""Remote objects kept on a local disk, so later epochs read a local file
(``gdsio.Cache(where="disk", path=..., bytes=...)``).

Each s3:// or http(s):// object the loader reads is fetched once, whole, and
written to a file of its own under `path`, named from the URL and the ETag
seen at open: a file starts at offset 0 and its size is the object's, so the
posix backend can read it with O_DIRECT and cuFile can read it straight into
GPU memory, as any local file. Later reads of the URL in this process go to
the file without a request; a new process (or another loader) with the same
`path` finds the files again after one HEAD per object, which also tells a
rewritten object (another ETag: another file) from the cached one.

As the sample cache, it admits objects until its byte budget is spent and
evicts nothing. Local paths pass through untouched.

>>> cache = gdsio.Cache(where="disk", path="/nvme/gdsio-cache", bytes="500G")
>>> loader = gdsio.Loader("s3://bucket/train/", 256, cache=cache, device="cuda")
>>> cache.stats()["fetched"], cache.stats()["hits"]
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Any

from ..io import File
from ..io.buffers import host_empty
from ..io.urls import is_url
from .cache import Cache, parse_budget

__all__ = ["DiskCache"]

_BLOCK = 4096  # what a cached object costs against the budget is rounded up to this


class DiskCache(Cache, where="disk"):
    """See the module docstring; made by ``gdsio.Cache(where="disk", path=..., bytes=...)``."""

    def __init__(self, bytes: int | str, where: str | None = "disk", path: str | os.PathLike[str] | None = None) -> None:
        budget = parse_budget(bytes)
        if path is None:
            raise ValueError("Cache(where='disk') needs path=, a local folder for the cached objects")
        folder = os.fspath(path)
        if is_url(folder):
            raise ValueError(f"path must be a local folder, got the URL '{folder}'")
        os.makedirs(folder, exist_ok=True)  # FileExistsError / PermissionError name it
        if not os.access(folder, os.W_OK):
            raise PermissionError(13, "Cache(where='disk'): the folder is not writable", folder)
        self.budget = budget
        self.where = "disk"
        self.path = folder
        self._lock = threading.Lock()
        self._local: dict[str, str] = {}  # URL -> its file, for the rest of this process
        self._used = 0
        self.hits = self.misses = self.rejected = 0
        self.fetched = self.found = 0  # objects fetched and written; files found from an earlier run

    def bind(self, device: Any) -> None:
        """Any loader device: the files are read by the loader's own backends."""

    def local_path(self, path: str) -> str:
        """The local file to read for `path`: a cached copy of a URL (fetched
        now if need be and if it fits the budget), or `path` itself.

        Raises:
            OSError, ImportError: as gdsio.File(path) and gdsio.read(path).
        """
        if not is_url(path):
            return path
        with self._lock:
            got = self._local.get(path)
            if got is not None:
                self.hits += 1
                return got
            self.misses += 1
        with File(path) as f:  # one HEAD: the size and the ETag that name the file
            size, etag = f.size(), f._reader.info.etag or f._reader.info.last_modified
            name = hashlib.sha256(f"{path}\0{etag}".encode()).hexdigest()
            dst = os.path.join(self.path, name)
            cost = -(-size // _BLOCK) * _BLOCK
            if os.path.isfile(dst) and os.path.getsize(dst) == size:
                with self._lock:
                    if path not in self._local:
                        self._local[path] = dst
                        self._used += cost
                        self.found += 1
                return dst
            with self._lock:
                if self._used + cost > self.budget:
                    self.rejected += 1
                    return path  # read from the store, as without a cache
                self._used += cost  # reserved now: two threads never overshoot the budget
            try:
                self._fetch(f, size, dst)
            except BaseException:
                with self._lock:
                    self._used -= cost
                raise
        with self._lock:
            if path in self._local:  # another thread fetched it meanwhile: count it once
                self._used -= cost
            else:
                self._local[path] = dst
                self.fetched += 1
            return self._local[path]

    def _fetch(self, f: Any, size: int, dst: str) -> None:
        buf = host_empty(size)
        if size:
            f.read_into(buf, size, 0)
        tmp = f"{dst}.{os.getpid()}.{threading.get_ident()}.part"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            view, done = memoryview(buf.numpy()).cast("B"), 0
            while done < size:
                done += os.write(fd, view[done:])
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        os.replace(tmp, dst)  # whole or absent: a reader never sees a part-written object

    # The sample-cache interface, for the loader: a disk cache holds objects, not decoded samples.
    def lookup(self, key: Any) -> None:
        return None

    def put_many(self, keys: list[Any], tensors: list[Any]) -> list[bool]:
        return [False] * len(keys)

    def clear(self) -> None:
        """Forgets the objects and deletes their files under `path`."""
        with self._lock:
            files, self._local = list(self._local.values()), {}
            self._used = 0
        for p in set(files):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    def __len__(self) -> int:
        return len(self._local)

    def __contains__(self, key: Any) -> bool:
        return key in self._local

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"objects": len(self._local), "bytes_used": self._used, "budget": self.budget, "where": "disk",
                    "path": self.path, "hits": self.hits, "misses": self.misses, "rejected": self.rejected,
                    "fetched": self.fetched, "found": self.found}

    def __repr__(self) -> str:
        return f"Cache(where='disk', path={self.path!r}, bytes={self.budget}, objects={len(self._local)}, used={self._used})"
