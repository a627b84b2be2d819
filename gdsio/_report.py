"""``gdsio.backends()`` and ``gdsio.info()``: what can run here, and why not."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from . import _core, _libs
from ._kvikio import kvikio_unusable_reason
from ._settings import current


@dataclasses.dataclass(frozen=True)
class BackendInfo:
    name: str
    destination: str  # "gpu", "host" or "gpu/host"
    usable: bool
    reason: str  # why not usable, or a caveat (compat mode, O_DIRECT refused)


def backends(path: str | os.PathLike[str] | None = None, device: int = 0) -> list[BackendInfo]:
    """Each backend, whether it can run here, and if not, why. Opens the cuFile
    driver on `device` when libcufile is present. With `path`, also checks
    O_DIRECT on that file's file system."""
    out: list[BackendInfo] = []
    gpu_why = _libs.cuda_unusable_reason()
    direct_note = ""
    if path is not None:
        f = _core.File(os.fspath(path)) if os.path.isfile(path) else None
        if f is not None:
            direct_note = f.direct_io_refusal()
            f.close()
    cuf = _libs.cufile_loaded()
    if gpu_why:
        gds = BackendInfo("gds", "gpu", False, gpu_why)
        compat = BackendInfo("cufile-compat", "gpu", False, gpu_why)
    elif not cuf["loaded"]:
        gds = BackendInfo("gds", "gpu", False, cuf["reason"])
        compat = BackendInfo("cufile-compat", "gpu", False, cuf["reason"])
    else:
        st = _libs.cufile_state(device)
        if not st["driver_open"]:
            gds = BackendInfo("gds", "gpu", False, st["reason"])
            compat = BackendInfo("cufile-compat", "gpu", False, st["reason"])
        elif st["true_gds"]:
            gds = BackendInfo("gds", "gpu", not direct_note, direct_note or st["reason"])
            compat = BackendInfo("cufile-compat", "gpu", False, "cuFile does true GDS here")
        else:
            gds = BackendInfo("gds", "gpu", False, st["reason"])
            compat = BackendInfo("cufile-compat", "gpu", True, st["reason"])
    out += [gds, compat]
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
    """Everything gdsio knows about this machine, as a JSON-ready dict."""
    from . import __version__

    infos = backends(path, device)
    return {
        "gdsio": __version__,
        "built_with_cuda": bool(_core.built_with_cuda),
        "cuda_architectures": _core.cuda_architectures,
        "cuda": _core.cuda_status(),
        "cufile": _libs.cufile_loaded() if _libs.cuda_unusable_reason() else _libs.cufile_state(device),
        "settings": dataclasses.asdict(current()),
        "backends": [dataclasses.asdict(b) for b in infos],
        "auto": auto_choice(infos),
    }
