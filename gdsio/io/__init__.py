"""Files into memory: ``read``, ``read_into``, ``File`` and the backends.

Every call returns or records a ``ReadStats`` that names the backend that
really ran and, when a faster one was skipped, why. The backends are one
table (``backends.BACKENDS``): ``gds``, ``cufile``, ``kvikio``, ``pinned``,
``posix``; ``auto`` walks it in order. ``read_many`` reads many whole files
in one C++ call.

>>> t = gdsio.read("shard-0001.bin", device="cpu")
>>> st = gdsio.read_into("shard-0001.bin", buf)
>>> st.backend, st.reason
"""

from __future__ import annotations

from ..errors import BackendUnavailable
from .api import read, read_into
from .backends import BackendInfo, backends
from .file import File
from .many import read_many
from .registered import RegisteredBuffer, register_buffer
from .stats import ReadStats

__all__ = ["BackendInfo", "BackendUnavailable", "File", "ReadStats", "RegisteredBuffer", "backends", "read",
           "read_into", "read_many", "register_buffer"]
