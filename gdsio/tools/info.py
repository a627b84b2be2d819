"""``gdsio.info()``: everything gdsio knows about this machine, as one
JSON-ready dict (``gdsio info --json``); ``gdsio doctor`` explains it in words."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from .. import __version__, _core
from ..config import current
from ..io.backends import auto_choice, backends
from ..platform import gds, nvidia

__all__ = ["info"]


def info(path: str | os.PathLike[str] | None = None, device: int = 0) -> dict[str, Any]:
    """Everything gdsio knows about this machine, as a JSON-ready dict (what
    ``gdsio info --json`` prints); ``gdsio doctor`` explains it in words.

    Args:
        path: a file whose O_DIRECT support is checked too (see ``backends``).
        device: the CUDA device index the GPU facts are about.

    Returns:
        dict: ``gdsio`` (version), ``built_with_cuda``,
        ``cuda_architectures``, ``cuda`` (device count, driver and runtime
        versions, why no device), ``cufile`` (libcufile and driver state),
        ``settings`` (in force here), ``backends`` (as ``backends()``) and
        ``auto`` (the backend auto picks for GPU and host memory),
        ``cpu_simd`` (the CPU resize's SIMD level: ``avx512``, ``avx2`` or
        ``scalar``) and ``cpu_jpeg_box``
        (libjpeg-turbo for the loader's crop decode: its version, or why
        this build has none).

    Example:
        >>> gdsio.info()["auto"]
        {'gpu': 'pinned', 'host': 'posix'}
    """
    infos = backends(path, device)
    return {
        "gdsio": __version__,
        "built_with_cuda": bool(_core.built_with_cuda),
        "cuda_architectures": _core.cuda_architectures,
        "cuda": nvidia.cuda_status(),
        "cufile": gds.cufile_loaded() if nvidia.cuda_unusable_reason() else gds.cufile_state(device),
        "settings": dataclasses.asdict(current()),
        "backends": [dataclasses.asdict(b) for b in infos],
        "auto": auto_choice(infos),
        "cpu_simd": _core.tf_cpu_simd(),
        "cpu_jpeg_box": _core.jpeg_cpu_version(),
    }
