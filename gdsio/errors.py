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
- ``DecompressionBombError`` (a ``ValueError``) and
  ``DecompressionBombWarning`` (a ``RuntimeWarning``): an image whose header
  claims more pixels than twice the ``max_image_pixels`` setting is refused,
  one above it warned of (Pillow's ``MAX_IMAGE_PIXELS`` rule), before any
  pixel memory is allocated.
- ``NeedMoreData``: a header parser (NPY, image headers) was handed fewer
  bytes than the header holds; not a failure, a request to call it again with
  ``nbytes`` of them. It never reaches a caller of a public entry point.

>>> try:
...     gdsio.read("shard.bin", device="cuda")
... except gdsio.BackendUnavailable as e:
...     print(e)   # cannot read 'shard.bin' into cuda: no NVIDIA driver ...; pass device="cpu" ...
"""

from __future__ import annotations

from . import _core

__all__ = ["BackendUnavailable", "DecompressionBombError", "DecompressionBombWarning", "NeedMoreData", "NvjpegError", "SampleError"]

# Defined in the extension, so C++ throws them directly.
BackendUnavailable = _core.BackendUnavailable
NvjpegError = _core.NvjpegError


class DecompressionBombError(ValueError):
    """An image claims more than twice ``max_image_pixels`` pixels (Pillow's
    DecompressionBombError): refused from its header, nothing allocated."""


class DecompressionBombWarning(RuntimeWarning):
    """An image claims more than ``max_image_pixels`` pixels (Pillow's
    DecompressionBombWarning); it is decoded. The message names the file."""


class SampleError(RuntimeError):
    """A sample could not be read or decoded; ``path`` and ``index`` name it,
    ``__cause__`` is the original error."""

    def __init__(self, message: str, *, index: int, path: str) -> None:
        super().__init__(message)
        self.index = index
        self.path = path
        self._message = message

    def __str__(self) -> str:
        # The message as gdsio made it: Ray Data appends its retry advice to an
        # exception's args on its way out of an actor, and the words stay gdsio.Loader's.
        message = getattr(self, "_message", None)
        return message if isinstance(message, str) else super().__str__()

    def __reduce__(self) -> tuple[object, ...]:
        # Picklable, so it crosses processes (a Ray actor on a CPU node, a worker):
        # the default rebuilds from args alone and would miss the keyword-only fields.
        return _rebuild_sample_error, (type(self), str(self), self.index, self.path), self.__dict__


# Tracebacks, reprs and pickles name the types where users import and catch them
# (``gdsio.BackendUnavailable``), not the private module that defines them.
for _t in (BackendUnavailable, NvjpegError, DecompressionBombError, DecompressionBombWarning, SampleError):
    _t.__module__ = "gdsio"
del _t


def _rebuild_sample_error(cls: type[SampleError], message: str, index: int, path: str) -> SampleError:
    return cls(message, index=index, path=path)


class NeedMoreData(Exception):
    """The header continues past the bytes given: parse again with the first
    ``nbytes`` of the data.

    Header parsers take ``buf``, a prefix of the data, and ``total``, the
    length of the whole data, so that one parser serves a file read on the
    host, a 4 KiB prefix copied from GPU memory, and bytes in memory.
    """

    def __init__(self, nbytes: int) -> None:
        super().__init__(f"the header needs the first {nbytes} bytes")
        self.nbytes = nbytes

    @staticmethod
    def require(buf: bytes, total: int, end: int, what: str) -> None:
        """Returns when ``buf[:end]`` is there; raises NeedMoreData(end) when
        the data has those bytes but ``buf`` does not, else ValueError saying
        ``what`` is truncated."""
        if end <= len(buf):
            return
        if end <= total and len(buf) < total:
            raise NeedMoreData(end)
        raise ValueError(f"truncated {what}: it needs {end} bytes but the data holds {total}")
