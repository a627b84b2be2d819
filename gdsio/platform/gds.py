"""GPUDirect Storage facts: the nvidia-fs driver, PCI P2PDMA, cufile.json and
the cuFile library's own state. No I/O policy lives here: io/ decides.

>>> from gdsio.platform import gds
>>> gds.gds_impossible_reason()                # doctest: +SKIP
'the nvidia-fs driver is not loaded and PCI P2PDMA is not enabled in /etc/cufile.json ...'
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import platform
import re
import zlib
from typing import Any

from .. import _core
from .nvidia import load_nvidia_lib, status_dict
from .probe import read_text

__all__ = [
    "CUFILE_ENV_VARS",
    "cufile_json",
    "cufile_loaded",
    "cufile_state",
    "gds_impossible_reason",
    "nvidia_fs_status",
    "p2pdma_possible",
]


def nvidia_fs_status(proc_root: str = "/proc", sys_root: str = "/sys") -> dict[str, Any]:
    """Whether the nvidia-fs kernel driver (GPUDirect Storage proper) is loaded.

    >>> nvidia_fs_status()                       # doctest: +SKIP
    {'loaded': False, 'version': None, 'stats_available': False, 'reason': '...'}
    """
    base = os.path.join(proc_root, "driver", "nvidia-fs")
    text = read_text(os.path.join(base, "version"))
    version = None
    if text is not None:
        # The driver prints "version: <major>.<minor>".
        match = re.search(r"version:\s*(\S+)", text)
        version = match.group(1) if match else text.strip() or None
    loaded = text is not None or os.path.isdir(os.path.join(sys_root, "module", "nvidia_fs"))
    reason = None
    if not loaded:
        reason = ("nvidia-fs kernel module is not loaded: cuFile runs in compat mode "
                  "unless PCI P2PDMA is usable")
    return {"loaded": loaded, "version": version,
            "stats_available": os.path.exists(os.path.join(base, "stats")), "reason": reason}


def _kernel_at_least(release: str, wanted: tuple[int, int]) -> bool | None:
    match = re.match(r"(\d+)\.(\d+)", release)
    return None if match is None else (int(match.group(1)), int(match.group(2))) >= wanted


def _kernel_config(release: str, boot_dir: str, proc_root: str) -> tuple[str | None, str | None]:
    """(text of the running kernel's config, where it came from), or (None, None)."""
    boot_config = os.path.join(boot_dir, f"config-{release}")
    text = read_text(boot_config)
    if text is not None:
        return text, boot_config
    proc_config = os.path.join(proc_root, "config.gz")
    try:
        with gzip.open(proc_config, "rt", encoding="utf-8", errors="replace") as f:
            return f.read(), proc_config
    except (OSError, EOFError, zlib.error):  # missing, or a damaged archive
        return None, None


def p2pdma_possible(boot_dir: str = "/boot", proc_root: str = "/proc") -> dict[str, Any]:
    """Best effort: could cuFile use PCI P2PDMA (CUDA 12.8+, no nvidia-fs) here?

    Looks at the kernel version (6.2 or later) and ``CONFIG_PCI_P2PDMA`` in the
    kernel config. ``config_pci_p2pdma`` is None when no config is readable.
    """
    kernel = platform.release()
    kernel_ok = _kernel_at_least(kernel, (6, 2))
    text, source = _kernel_config(kernel, boot_dir, proc_root)
    enabled = None
    if text is not None:
        # "=y"/"=m" enable it; "# ... is not set" or no line at all means off.
        enabled = re.search(r"^CONFIG_PCI_P2PDMA=[ym]\s*$", text, re.MULTILINE) is not None
    reasons = []
    if kernel_ok is False:
        reasons.append(f"kernel {kernel} is older than 6.2")
    if enabled is None:
        reasons.append(f"kernel config not readable ({boot_dir}/config-{kernel}, "
                       f"{proc_root}/config.gz)")
    elif not enabled:
        reasons.append(f"CONFIG_PCI_P2PDMA is not enabled in {source}")
    return {"kernel": kernel, "kernel_at_least_6_2": kernel_ok, "config_pci_p2pdma": enabled,
            "config_source": source, "reason": "; ".join(reasons) or None}


CUFILE_ENV_VARS = ("CUFILE_ENV_PATH_JSON", "CUFILE_FORCE_COMPAT_MODE", "CUFILE_ALLOW_COMPAT_MODE",
                   "CUFILE_LOGFILE_PATH", "KVIKIO_COMPAT_MODE")
# The settings that decide which path cuFile takes, as "section.key".
_CUFILE_SETTINGS = ("properties.allow_compat_mode", "properties.use_pci_p2pdma",
                    "execution.parallel_io", "properties.max_direct_io_size_kb")


def _relaxed_json_loads(text: str) -> Any:
    """json.loads for cufile.json: allows // and /* */ comments and trailing commas."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':  # copy a whole string, so "//" inside one is kept
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            out.append(" ")  # keep tokens on both sides apart
        else:
            if c in "}]":
                # Drop a trailing comma: the last non-blank output before the bracket.
                k = len(out) - 1
                while k >= 0 and out[k].isspace():
                    k -= 1
                if k >= 0 and out[k] == ",":
                    del out[k]
            out.append(c)
            i += 1
    return json.loads("".join(out))


def cufile_json() -> dict[str, Any]:
    """Which cufile.json applies, the settings in it that matter, and env overrides.

    ``settings`` holds only the keys present in the file ("section.key");
    a missing key means the library default (``allow_compat_mode`` is true).
    """
    env = {name: os.environ[name] for name in CUFILE_ENV_VARS if name in os.environ}
    path = os.environ.get("CUFILE_ENV_PATH_JSON") or "/etc/cufile.json"
    out: dict[str, Any] = {"path": path, "exists": os.path.isfile(path), "settings": {},
                           "env": env, "error": None}
    if not out["exists"]:
        return out
    try:
        with open(path, encoding="utf-8") as f:
            config = _relaxed_json_loads(f.read())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    if not isinstance(config, dict):
        out["error"] = f"top level of {path} is not an object"
        return out
    for dotted in _CUFILE_SETTINGS:
        section, key = dotted.split(".")
        values = config.get(section)
        if isinstance(values, dict) and key in values:
            out["settings"][dotted] = values[key]
    return out


# --------------------------------------------------------------------------- the cuFile library


@functools.lru_cache(maxsize=None)
def cufile_loaded() -> dict[str, Any]:
    """Loads libcufile once; the core's CufileStatus as a dict."""
    return load_nvidia_lib("cufile", lambda path: status_dict(_core.cufile_load(path)), "gds")


def cufile_state(device: int = 0) -> dict[str, Any]:
    """libcufile loaded and its driver opened on `device` (first call only); never raises."""
    st = cufile_loaded()
    if not st["loaded"]:
        return st
    return status_dict(_core.cufile_status(open_driver=True, device=device))


@functools.lru_cache(maxsize=None)
def gds_impossible_reason() -> str | None:
    """Why true GDS cannot run here, known without opening the cuFile driver
    (which costs time, GPU memory and writes cufile.log): None when nvidia-fs
    is loaded or cufile.json enables PCI P2PDMA, so only cuFile can tell."""
    if nvidia_fs_status()["loaded"]:
        return None
    cfg = cufile_json()
    if cfg["settings"].get("properties.use_pci_p2pdma") is True:
        return None
    return (
        "the nvidia-fs driver is not loaded and PCI P2PDMA is not enabled in "
        f"{cfg['path']} (properties.use_pci_p2pdma), so cuFile could only run in its compat mode"
    )
