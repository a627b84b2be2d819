"""Readers: where the bytes come from. A ``File`` holds one reader; a backend
of the I/O engine takes the readers of its ``sources`` kind.

Kinds: ``local`` (a file of this machine's file systems, opened by the
core: a buffered descriptor, and an O_DIRECT one on first use), ``s3``
(``s3://bucket/key``) and ``http`` (``http://`` and ``https://`` URLs): the
remote objects of gdsio.io.remote, behind the same ``File``.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from .. import _core
from ..config import current
from .urls import is_url

__all__ = ["LocalReader", "Reader", "open_reader"]


class Reader(Protocol):
    """What a ``File`` and the backends need of a source."""

    kind: str  # the backends' `sources` name it
    path: str  # as errors and ReadStats name it

    @property
    def closed(self) -> bool: ...

    def size(self) -> int: ...

    def close(self) -> None: ...


class LocalReader:
    """A local file, opened by the core (``core`` is what the core's read
    engines take). Opening checks it exists, is readable and is not a directory."""

    kind = "local"

    def __init__(self, path: str | bytes) -> None:
        # str with surrogate escapes (os.listdir's names that are not UTF-8) and
        # bytes alike reach the core as the file system's bytes; messages show os.fsdecode's str.
        self.path = os.fsdecode(path)
        self.core: Any = _core.File(path)

    @property
    def closed(self) -> bool:
        return self.core.closed

    def size(self) -> int:
        """The file's size in bytes now (asked of the file system at each call)."""
        return self.core.size()

    def close(self) -> None:
        self.core.close()

    def direct_io_refusal(self) -> str:
        """Why O_DIRECT cannot be used for this file ("" when it can)."""
        return self.core.direct_io_refusal()

    def register_cufile(self, device: int) -> None:
        """Registers the file with cuFile (once); raises BackendUnavailable."""
        self.core.register_cufile(device)


def open_reader(path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> Reader:
    """The reader for `path`: an ``s3://``, ``http://`` or ``https://`` URL
    (a str) is a remote object; anything else a local file (str, bytes or
    os.PathLike, as Python's open takes).

    Raises:
        TypeError: `path` is none of those.
        ValueError: `path` holds a NUL byte (as Python's open).
        OSError: missing, unreadable, a directory, or not a regular file (a FIFO,
            a device, a procfs/sysfs pseudo-file), with the path; for a URL,
            FileNotFoundError (404), PermissionError (403) or OSError naming it.
        ImportError: an s3:// URL without botocore (``pip install 'gdsio[s3]'``).
    """
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"path must be str, bytes or os.PathLike, not {type(path).__name__}")
    if is_url(path):
        from .remote import RemoteReader

        return RemoteReader(path, current())  # type: ignore[arg-type]
    return LocalReader(os.fspath(path))
