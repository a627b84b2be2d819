"""GPU buffers registered with cuFile, for buffers reused by many reads."""

from __future__ import annotations

import weakref
from typing import Any

from .. import _core
from ..errors import BackendUnavailable
from ..platform import gds
from .buffers import resolve

__all__ = ["RegisteredBuffer", "register_buffer"]


def register_buffer(out: Any) -> "RegisteredBuffer":
    """Registers a GPU destination with cuFile, for a buffer reused by many
    reads (saves cuFile's bounce buffers on the gds path). A context manager;
    deregisters on exit. Raises BackendUnavailable where cuFile is unusable."""
    return RegisteredBuffer(out)


def _deregister(array: Any) -> None:
    _core.cufile_deregister_buffer(array)


class RegisteredBuffer:
    """A GPU buffer registered with cuFile (see register_buffer). It keeps the
    memory alive while registered and deregisters on close(), on exit of a
    with block, when dropped without either (garbage collected), or at
    interpreter exit: never after the memory was freed."""

    def __init__(self, out: Any) -> None:
        self.dest = resolve(out)
        if self.dest.kind != "cuda":
            raise ValueError("only GPU memory can be registered with cuFile")
        st = gds.cufile_state(self.dest.device)
        if not st["driver_open"]:
            raise BackendUnavailable("cuFile is not usable here: " + st["reason"])
        ok, reason = _core.cufile_register_buffer(self.dest.array)
        self.registered = bool(ok)
        self.reason = reason
        # Runs before the object's attributes (dest.owner, the memory) are
        # released, also when it is collected in a cycle; once at most. It
        # holds the array, so the memory outlives the registration in any case.
        self._finalizer = weakref.finalize(self, _deregister, self.dest.array) if self.registered else None

    def __enter__(self) -> "RegisteredBuffer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.registered:
            self.registered = False
            if self._finalizer is not None:
                self._finalizer()
