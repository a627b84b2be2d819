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
from .config import Settings, settings
from .config import current as current_settings
from .errors import BackendUnavailable, DecompressionBombError, DecompressionBombWarning, NvjpegError, SampleError
from .io import BackendInfo, File, ReadStats, backends, read, read_into, register_buffer

__version__ = "0.1.0"

__all__ = [
    "BackendInfo",
    "BackendUnavailable",
    "Cache",
    "DecompressionBombError",
    "DecompressionBombWarning",
    "NvjpegError",
    "SampleError",
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
    "tools",
    "transforms",
]

# Loaded on first use (each imports torch, and `import gdsio` stays light for
# host reads into numpy buffers and for the command line): name -> (module, attribute or None).
_LAZY = {
    "data": ("data", None), "image": ("image", None), "starvation": ("starvation", None),
    "tensors": ("tensors", None), "tools": ("tools", None), "transforms": ("transforms", None),
    "Cache": ("data", "Cache"), "Loader": ("data", "Loader"),
    "load_npy": ("tensors", "load_npy"), "load_safetensors": ("tensors", "load_safetensors"),
    "info": ("tools.info", "info"),
}


def __dir__() -> list[str]:
    # dir() and tab completion show the API (and the dunders), not what was imported to build it (np, torch, Any).
    return sorted({*__all__, *(n for n in globals() if n.startswith("__") and n.endswith("__"))})


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'gdsio' has no attribute {name!r}")
    import importlib

    module, attr = _LAZY[name]
    value = importlib.import_module(f".{module}", __name__)
    value = value if attr is None else getattr(value, attr)
    globals()[name] = value  # once
    return value


@atexit.register
def _release() -> None:
    # Pinned memory and the cuFile driver go back before the CUDA runtime's
    # own teardown; reader threads are joined so the interpreter exits cleanly.
    _core.release_staging()
    _core.cufile_shutdown()
    _core.shutdown_pool()
