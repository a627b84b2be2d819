"""NVIDIA libraries and the CUDA device: where libcufile and libnvjpeg are
(cuda-pathfinder, the wheel layouts, the system), loading them into the core
once, and whether a GPU is usable here and, if not, the one cause.
Nothing here runs at import time.

>>> from gdsio.platform import nvidia
>>> nvidia.find_nvidia_lib("cufile")["path"]    # doctest: +SKIP
'/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcufile.so.0'
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import platform
import re
import shutil
import site
import subprocess
import sys
from typing import Any, Callable

from .. import _core

__all__ = [
    "NO_DRIVER",
    "NVIDIA_LIBS",
    "NvidiaLib",
    "cpu_hint",
    "cuda_status",
    "cuda_unusable_reason",
    "find_nvidia_lib",
    "gpu_unusable_reason",
    "load_nvidia_lib",
    "status_dict",
    "torch_cuda_unusable_reason",
]


@dataclasses.dataclass(frozen=True)
class NvidiaLib:
    """Where one NVIDIA library lives: sonames to dlopen and the wheel directories."""

    sonames: tuple[str, ...]  # newest first; none of the wheels ship an unversioned .so
    wheel_dirs: tuple[str, ...]  # relative to site-packages: CUDA 13 layout, then CUDA 12
    pip: str  # what to install when it is missing


#: The libraries gdsio dlopens (cudart only for reports: gdsio links it statically).
NVIDIA_LIBS = {
    "cufile": NvidiaLib(("libcufile.so.0",), ("nvidia/cu13/lib", "nvidia/cufile/lib"),
                        "nvidia-cufile (CUDA 13) or nvidia-cufile-cu12"),
    "nvjpeg": NvidiaLib(("libnvjpeg.so.13", "libnvjpeg.so.12"),
                        ("nvidia/cu13/lib", "nvidia/nvjpeg/lib"),
                        "nvidia-nvjpeg (CUDA 13) or nvidia-nvjpeg-cu12"),
    "cudart": NvidiaLib(("libcudart.so.13", "libcudart.so.12"),
                        ("nvidia/cu13/lib", "nvidia/cuda_runtime/lib"),
                        "nvidia-cuda-runtime (CUDA 13) or nvidia-cuda-runtime-cu12"),
}


def _find_with_pathfinder(name: str) -> tuple[str | None, str | None]:
    """(path, None) or (None, why not) from cuda-pathfinder, without loading the library."""
    try:
        # cuda-pathfinder 1.x only loads (load_nvidia_dynamic_lib); its find steps
        # locate without loading, but are private, so any drift is tolerated below.
        from cuda.pathfinder._dynamic_libs.lib_descriptor import LIB_DESCRIPTORS
        from cuda.pathfinder._dynamic_libs.search_steps import (
            EARLY_FIND_STEPS, LATE_FIND_STEPS, SearchContext, run_find_steps)
    except ImportError:
        try:
            # A public find-only API (runs the loader in a subprocess) where it exists.
            from cuda.pathfinder import find_nvidia_dynamic_lib  # type: ignore[attr-defined,unused-ignore]
        except ImportError:
            return None, "cuda-pathfinder is not installed or has no find-only API"
        try:
            return str(find_nvidia_dynamic_lib(name)), None
        except Exception as exc:  # a third-party probe must not break doctor
            return None, f"cuda-pathfinder: {exc}"
    try:
        found = run_find_steps(SearchContext(LIB_DESCRIPTORS[name]),
                               EARLY_FIND_STEPS + LATE_FIND_STEPS)
    except Exception as exc:  # private API: fall back to our own search
        return None, f"cuda-pathfinder internals differ: {exc!r}"
    return (str(found.abs_path), None) if found is not None else (None, None)


def _site_packages_dirs() -> list[str]:
    roots = [p for p in sys.path if p and os.path.isdir(p)]
    with contextlib.suppress(AttributeError):  # old virtualenv's site module lacks these
        roots += [*site.getsitepackages(), site.getusersitepackages()]
    return list(dict.fromkeys(roots))


@functools.lru_cache(maxsize=1)
def _loader_cache() -> dict[str, str]:
    """soname -> path from the dynamic loader's cache (``ldconfig -p``), this ABI only."""
    ldconfig = shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)), None)
    if ldconfig is None:
        return {}
    try:
        listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=5,
                                 check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    want_64 = sys.maxsize > 2**32
    cache: dict[str, str] = {}
    for match in re.finditer(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)\s*$", listing, re.MULTILINE):
        soname, flags, path = match.groups()
        # 64-bit entries say "x86-64", "AArch64" or "64bit"; 32-bit ones do not.
        if ("64" in flags) == want_64:
            cache.setdefault(soname, path)
    return cache


def _find_on_system(lib: NvidiaLib) -> str | None:
    """Search as dlopen does, soname by soname: LD_LIBRARY_PATH, the loader cache,
    then the usual dirs (CUDA_PATH/CUDA_HOME too, which the loader itself ignores)."""
    env_dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    fixed_dirs = [os.path.join(os.environ[var], sub) for var in ("CUDA_PATH", "CUDA_HOME")
                  if os.environ.get(var) for sub in ("lib64", "lib")]
    fixed_dirs += ["/usr/local/cuda/lib64", f"/usr/lib/{platform.machine()}-linux-gnu"]
    cache = _loader_cache()
    for soname in lib.sonames:
        hits = [os.path.join(d, soname) for d in env_dirs]
        hits += [cache[soname]] if soname in cache else []
        hits += [os.path.join(d, soname) for d in fixed_dirs]
        found = next((h for h in hits if os.path.isfile(h)), None)
        if found is not None:
            return found
    return None


def find_nvidia_lib(name: str) -> dict[str, Any]:
    """Locate an NVIDIA library ("cufile", "nvjpeg", "cudart") without loading it.

    Order: cuda-pathfinder, the wheel layouts under site-packages, then the
    system (LD_LIBRARY_PATH, CUDA_PATH/CUDA_HOME, the loader cache, /usr/local/cuda,
    /usr/lib/<arch>-linux-gnu): wheels first, as cuda-pathfinder, and so gdsio's
    own dlopen, prefers them.

    >>> find_nvidia_lib("cufile")["path"]        # doctest: +SKIP
    '/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcufile.so.0'
    """
    if name not in NVIDIA_LIBS:
        raise ValueError(f"name must be one of {sorted(NVIDIA_LIBS)}, got {name!r}")
    lib = NVIDIA_LIBS[name]
    out: dict[str, Any] = {"name": name, "found": False, "path": None, "how": None, "reason": None}

    path, pathfinder_note = _find_with_pathfinder(name)
    if path is not None:
        return {**out, "found": True, "path": path, "how": "cuda-pathfinder"}
    for root in _site_packages_dirs():
        for rel in lib.wheel_dirs:
            for soname in lib.sonames:
                candidate = os.path.join(root, rel, soname)
                if os.path.isfile(candidate):
                    return {**out, "found": True, "path": candidate, "how": "site-packages"}
    path = _find_on_system(lib)
    if path is not None:
        return {**out, "found": True, "path": path, "how": "system"}
    notes = f" ({pathfinder_note})" if pathfinder_note else ""
    out["reason"] = (f"{' / '.join(lib.sonames)} not found by cuda-pathfinder{notes}, "
                     f"in site-packages or on the system; install {lib.pip}")
    return out


# --------------------------------------------------------------------------- loading and usability


def load_nvidia_lib(name: str, load: Callable[[str], dict[str, Any]], extra: str) -> dict[str, Any]:
    """Loads an NVIDIA library into the core through `load(path)`: first where
    cuda-pathfinder or the wheel layouts say it is, then the dynamic loader's
    own search path (`load("")`). Returns the core's status dict; when nothing
    loads, its reason lists every attempt and the extra that installs it."""
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
def gpu_unusable_reason() -> str | None:
    """None when both gdsio and torch can use a CUDA device, else why not
    (what GPU tests and GPU benchmarks are skipped for)."""
    return cuda_unusable_reason() or torch_cuda_unusable_reason()


def status_dict(st: Any) -> dict[str, Any]:
    """One of the core's status structs (CudaStatus, CufileStatus) as the dict
    gdsio's reports (info, doctor) and the platform helpers show: its fields."""
    return {k: getattr(st, k) for k in st._fields}


def cuda_status() -> dict[str, Any]:
    """The CUDA runtime here, as reported: device_count, runtime_version,
    driver_version (0: no driver), error (why no device can be used)."""
    return status_dict(_core.cuda_status())


# What cudaDriverGetVersion reporting 0 means (csrc/core/cuda_rt.hpp, kNoDriver).
NO_DRIVER = "no NVIDIA driver is installed (libcuda.so.1 not found)"


def cuda_unusable_reason() -> str | None:
    """None when gdsio can use a CUDA device, else one sentence saying why not:
    the one cause, never its consequences (without a driver, every CUDA call
    also fails with cudaErrorInsufficientDriver)."""
    if not _core.built_with_cuda:
        return "gdsio was built without CUDA (nvcc was not found when it was compiled)"
    st = _core.cuda_status()
    if st.device_count > 0:
        return None
    if st.driver_version == 0:
        return NO_DRIVER
    return st.error or "no CUDA device is visible"


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
