"""gdsio: files straight into GPU memory.

Reads files into GPU (or host) memory through cuFile (GPUDirect Storage),
KvikIO, a pipelined pinned-buffer copy, or parallel host reads, and says
which path ran; decodes images (gdsio.image), resizes them as Pillow does
(gdsio.transforms), loads batches (gdsio.Loader) and measures how long the
GPU waits for data (gdsio.starvation).

>>> import gdsio
>>> t = gdsio.read("shard-0001.bin", device="cuda")   # 1-D uint8 CUDA tensor
>>> st = gdsio.read_into("shard-0001.bin", buf)         # ReadStats
>>> st.backend, st.gbps
"""

from __future__ import annotations

import atexit

try:
    from . import _core
except ImportError as e:  # a source checkout without a build, or a broken install
    raise ImportError(
        f"gdsio's compiled extension (gdsio._core) cannot be loaded: {e}. "
        "Install gdsio with `pip install .` (it compiles the extension); when running from a "
        "source checkout, run outside it (python -P) so the installed package is imported."
    ) from e
from . import data, image, starvation
from ._report import BackendInfo, backends, info
from .data import Cache, Loader
from ._settings import Settings, settings
from ._settings import current as current_settings
from .io import BackendUnavailable, File, ReadStats, read, read_into, register_buffer
from .tensors import load_npy, load_safetensors

__version__ = "0.1.0"

__all__ = [
    "BackendInfo",
    "BackendUnavailable",
    "Cache",
    "File",
    "Loader",
    "ReadStats",
    "Settings",
    "backends",
    "current_settings",
    "data",
    "image",
    "info",
    "load_npy",
    "load_safetensors",
    "read",
    "read_into",
    "register_buffer",
    "settings",
    "starvation",
    "transforms",
]


def __dir__() -> list[str]:
    # dir() and tab completion show the API (and the dunders), not what was imported to build it (np, torch, Any).
    return sorted({*__all__, *(n for n in globals() if n.startswith("__") and n.endswith("__"))})


def __getattr__(name: str) -> object:
    # gdsio.transforms imports torch; importing gdsio itself must stay light.
    if name == "transforms":
        import importlib

        return importlib.import_module(".transforms", __name__)
    raise AttributeError(f"module 'gdsio' has no attribute {name!r}")


@atexit.register
def _release() -> None:
    # Pinned memory and the cuFile driver go back before the CUDA runtime's
    # own teardown; reader threads are joined so the interpreter exits cleanly.
    _core.release_staging()
    _core.cufile_shutdown()
    _core.shutdown_pool()
