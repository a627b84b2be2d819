"""``gdsio.backends()`` and ``gdsio.info()``: what can run here, and why not."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from . import _core
from .platform import gds, nvidia
from ._kvikio import kvikio_unusable_reason
from ._settings import current


@dataclasses.dataclass(frozen=True)
class BackendInfo:
    name: str
    destination: str  # "gpu", "host" or "gpu/host"
    usable: bool
    reason: str  # why not usable, or a caveat (compat mode, O_DIRECT refused)


def backends(path: str | os.PathLike[str] | None = None, device: int = 0) -> list[BackendInfo]:
    """Each backend of the I/O engine, whether it can run here, and if not, why:
    the table ``backend="auto"`` chooses from (gds, else pinned for GPU
    memory; posix for host memory). Opens the cuFile driver on `device` when
    libcufile and a GPU are present (the first call only). Never raises for
    what is missing: that is what ``reason`` says.

    Args:
        path: a file whose file system is asked about O_DIRECT too (cuFile
            needs it); None: no file-specific check.
        device: the CUDA device index the GPU backends are checked on.

    Returns:
        list[BackendInfo]: one per backend (``gds``, ``cufile-compat``,
        ``kvikio``, ``pinned``, ``posix``), each with ``name``,
        ``destination`` ("gpu", "host" or "gpu/host"), ``usable`` and
        ``reason`` (why not, or a caveat such as compat mode).

    Example:
        >>> [(b.name, b.usable) for b in gdsio.backends()]
        [('gds', False), ('cufile-compat', False), ('kvikio', False), ('pinned', False), ('posix', True)]
    """
    out: list[BackendInfo] = []
    gpu_why = nvidia.cuda_unusable_reason()
    direct_note = ""
    if path is not None:
        f = _core.File(os.fspath(path)) if os.path.isfile(path) else None
        if f is not None:
            direct_note = f.direct_io_refusal()
            f.close()
    cuf = gds.cufile_loaded()
    if gpu_why:
        gds_info = BackendInfo("gds", "gpu", False, gpu_why)
        compat = BackendInfo("cufile-compat", "gpu", False, gpu_why)
    elif not cuf["loaded"]:
        gds_info = BackendInfo("gds", "gpu", False, cuf["reason"])
        compat = BackendInfo("cufile-compat", "gpu", False, cuf["reason"])
    else:
        st = gds.cufile_state(device)
        if not st["driver_open"]:
            gds_info = BackendInfo("gds", "gpu", False, st["reason"])
            compat = BackendInfo("cufile-compat", "gpu", False, st["reason"])
        elif st["true_gds"]:
            gds_info = BackendInfo("gds", "gpu", not direct_note, direct_note or st["reason"])
            compat = BackendInfo("cufile-compat", "gpu", False, "cuFile does true GDS here")
        else:
            gds_info = BackendInfo("gds", "gpu", False, st["reason"])
            compat = BackendInfo("cufile-compat", "gpu", True, st["reason"])
    out += [gds_info, compat]
    kv = kvikio_unusable_reason()
    out.append(BackendInfo("kvikio", "gpu/host", kv is None, kv or ""))
    out.append(BackendInfo("pinned", "gpu", gpu_why is None, gpu_why or ""))
    note = f"{direct_note}; buffered reads are used when O_DIRECT is asked" if direct_note else ""
    out.append(BackendInfo("posix", "host", True, note))
    return out


def auto_choice(infos: list[BackendInfo]) -> dict[str, str]:
    by = {b.name: b for b in infos}
    gpu = "gds" if by["gds"].usable else ("pinned" if by["pinned"].usable else "unavailable")
    return {"gpu": gpu, "host": "posix"}


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
        ``auto`` (the backend auto picks for GPU and host memory).

    Example:
        >>> gdsio.info()["auto"]
        {'gpu': 'pinned', 'host': 'posix'}
    """
    from . import __version__

    infos = backends(path, device)
    return {
        "gdsio": __version__,
        "built_with_cuda": bool(_core.built_with_cuda),
        "cuda_architectures": _core.cuda_architectures,
        "cuda": _core.cuda_status(),
        "cufile": gds.cufile_loaded() if nvidia.cuda_unusable_reason() else gds.cufile_state(device),
        "settings": dataclasses.asdict(current()),
        "backends": [dataclasses.asdict(b) for b in infos],
        "auto": auto_choice(infos),
    }
