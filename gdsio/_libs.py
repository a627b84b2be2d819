"""Loading libcufile into the core, once, from where cuda-pathfinder or the
system says it is. Nothing here runs at import time."""

from __future__ import annotations

import functools
from typing import Any

from . import _core


@functools.lru_cache(maxsize=None)
def cufile_loaded() -> dict[str, Any]:
    """Loads libcufile (wheel via cuda-pathfinder first, then the system); the core's status dict."""
    from ._sysinfo import find_nvidia_lib

    found = find_nvidia_lib("cufile")
    tried = []
    if found.get("path"):
        st = _core.cufile_load(found["path"])
        if st["loaded"]:
            return st
        tried.append(st["reason"])
    st = _core.cufile_load("")  # the dynamic loader's own search path
    if not st["loaded"] and tried:
        st = dict(st, reason="; ".join(tried + [st["reason"]]))
    if not st["loaded"]:
        st = dict(st, reason=st["reason"] + " (install it with: pip install 'gdsio[gds]')")
    return st


def cufile_state(device: int = 0) -> dict[str, Any]:
    """libcufile loaded and its driver opened on `device` (first call only); never raises."""
    st = cufile_loaded()
    if not st["loaded"]:
        return st
    return _core.cufile_status(open_driver=True, device=device)


@functools.lru_cache(maxsize=None)
def gds_impossible_reason() -> str | None:
    """Why true GDS cannot run here, known without opening the cuFile driver
    (which costs time, GPU memory and writes cufile.log): None when nvidia-fs
    is loaded or cufile.json enables PCI P2PDMA, so only cuFile can tell."""
    from ._sysinfo import cufile_json, nvidia_fs_status

    if nvidia_fs_status()["loaded"]:
        return None
    cfg = cufile_json()
    if cfg["settings"].get("properties.use_pci_p2pdma") is True:
        return None
    return (
        "the nvidia-fs driver is not loaded and PCI P2PDMA is not enabled in "
        f"{cfg['path']} (properties.use_pci_p2pdma), so cuFile could only run in its compat mode"
    )


def cuda_unusable_reason() -> str | None:
    """None when a CUDA device can be used, else a sentence saying why not."""
    if not _core.built_with_cuda:
        return "gdsio was built without CUDA (nvcc was not found when it was compiled)"
    st = _core.cuda_status()
    if st["device_count"] > 0:
        return None
    if st["driver_version"] == 0:
        return "no NVIDIA driver is installed (libcuda.so.1 not found): " + st["error"]
    return st["error"] or "no CUDA device is visible"
