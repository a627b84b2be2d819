"""Loading NVIDIA libraries (libcufile, libnvjpeg) into the core, once, from
where cuda-pathfinder or the system says they are, and whether a GPU is
usable. Nothing here runs at import time."""

from __future__ import annotations

import functools
from typing import Any, Callable

from . import _core


def load_nvidia_lib(name: str, load: Callable[[str], dict[str, Any]], extra: str) -> dict[str, Any]:
    """Loads an NVIDIA library into the core through `load(path)`: first where
    cuda-pathfinder or the wheel layouts say it is, then the dynamic loader's
    own search path (`load("")`). Returns the core's status dict; when nothing
    loads, its reason lists every attempt and the extra that installs it."""
    from ._sysinfo import find_nvidia_lib

    found = find_nvidia_lib(name)
    tried = []
    if found.get("path"):
        st = dict(load(found["path"]))
        if st["loaded"]:
            return st
        tried.append(st["reason"])
    st = dict(load(""))
    if not st["loaded"]:
        st["reason"] = "; ".join(tried + [st["reason"]]) + f" (install it with: pip install 'gdsio[{extra}]')"
    return st


@functools.lru_cache(maxsize=None)
def cufile_loaded() -> dict[str, Any]:
    """Loads libcufile once; the core's status dict."""
    return load_nvidia_lib("cufile", _core.cufile_load, "gds")


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


@functools.lru_cache(maxsize=None)
def gpu_unusable_reason() -> str | None:
    """None when both gdsio and torch can use a CUDA device, else why not
    (what GPU tests and GPU benchmarks are skipped for)."""
    return cuda_unusable_reason() or torch_cuda_unusable_reason()


# What cudaDriverGetVersion reporting 0 means (csrc/core/cuda_rt.hpp, kNoDriver).
NO_DRIVER = "no NVIDIA driver is installed (libcuda.so.1 not found)"


def cuda_unusable_reason() -> str | None:
    """None when gdsio can use a CUDA device, else one sentence saying why not:
    the one cause, never its consequences (without a driver, every CUDA call
    also fails with cudaErrorInsufficientDriver)."""
    if not _core.built_with_cuda:
        return "gdsio was built without CUDA (nvcc was not found when it was compiled)"
    st = _core.cuda_status()
    if st["device_count"] > 0:
        return None
    if st["driver_version"] == 0:
        return NO_DRIVER
    return st["error"] or "no CUDA device is visible"


def torch_cuda_unusable_reason() -> str | None:
    """None when torch can allocate CUDA tensors, else why not."""
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device"
    return None


def cpu_hint(arg: str = "device") -> str:
    """The one hint of every CUDA-unusable error: the argument that runs on the CPU instead."""
    return f'pass {arg}="cpu" to use the CPU'


def require_cuda(what: str, index: int | None = None, *, arg: str = "device") -> Any:
    """The torch.device ``cuda:index`` (None: the current device) when gdsio and
    torch can both use it. Raises ``BackendUnavailable`` saying `what` could not
    be done, the one cause, and the hint to pass ``arg="cpu"``; ``ValueError``
    naming `arg` when the index does not exist. Every public entry point that
    takes a device goes through here, so all say the same."""
    why = cuda_unusable_reason() or torch_cuda_unusable_reason()
    if why:
        raise _core.BackendUnavailable(f"{what}: {why}; {cpu_hint(arg)}")
    import torch

    count = torch.cuda.device_count()
    if index is None:
        index = torch.cuda.current_device()
    elif not 0 <= index < count:
        raise ValueError(f"{arg}=cuda:{index} does not exist ({count} CUDA device(s) visible)")
    return torch.device("cuda", index)
