"""The exception types gdsio raises beyond Python's own.

Caller mistakes are ``ValueError``/``TypeError`` naming the argument; I/O
failures are ``OSError`` subclasses naming the path (``FileNotFoundError``,
``PermissionError``, ``IsADirectoryError``); malformed files are
``ValueError`` naming the file and the problem. Beyond those:

- ``BackendUnavailable`` (a ``RuntimeError``): a backend or device asked for
  cannot run here; the message says the one cause and what to pass instead.
- ``NvjpegError`` (a ``RuntimeError``): nvJPEG failed executing a decode
  (not a refusal of the image, which is a ``ValueError``).
- ``SampleError`` (a ``RuntimeError``): a ``gdsio.Loader`` sample could not be
  read or decoded; ``path`` and ``index`` name it, ``__cause__`` is the error.

>>> try:
...     gdsio.read("shard.bin", device="cuda")
... except gdsio.BackendUnavailable as e:
...     print(e)   # cannot read 'shard.bin' into cuda: no NVIDIA driver ...; pass device="cpu" ...
"""

from __future__ import annotations

from . import _core

__all__ = ["BackendUnavailable", "NvjpegError", "SampleError"]

# Defined in the extension, so C++ throws them directly.
BackendUnavailable = _core.BackendUnavailable
NvjpegError = _core.NvjpegError


class SampleError(RuntimeError):
    """A sample could not be read or decoded; ``path`` and ``index`` name it,
    ``__cause__`` is the original error."""

    def __init__(self, message: str, *, index: int, path: str) -> None:
        super().__init__(message)
        self.index = index
        self.path = path

    def __reduce__(self) -> tuple[object, ...]:
        # Picklable, so it crosses processes (a Ray actor on a CPU node, a worker):
        # the default rebuilds from args alone and would miss the keyword-only fields.
        return _rebuild_sample_error, (type(self), str(self), self.index, self.path), self.__dict__


def _rebuild_sample_error(cls: type[SampleError], message: str, index: int, path: str) -> SampleError:
    return cls(message, index=index, path=path)
