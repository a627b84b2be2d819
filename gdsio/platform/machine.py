"""The machine: GPUs and their PCIe links (procfs, sysfs, nvidia-smi), the
driver, CPUs and memory, package versions; and everything the platform probes
know in one JSON-ready dict, for ``gdsio doctor``, ``gdsio info`` and
benchmark reports. Probes are cheap, run as a non-root user, never initialise
CUDA and never raise because what they look for is missing.

>>> from gdsio.platform import machine
>>> [g["model"] for g in machine.gpus()]       # doctest: +SKIP
['NVIDIA H200']
"""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess
from importlib import metadata
from typing import Any

from .filesystems import filesystem_of, o_direct_probe
from .gds import cufile_json, nvidia_fs_status, p2pdma_possible
from .nvidia import NVIDIA_LIBS, find_nvidia_lib
from .probe import read_text

__all__ = [
    "PCIE_GEN_BY_GTS",
    "PCIE_LANE_GBPS",
    "cpu_info",
    "describe_machine",
    "driver_version",
    "gpus",
    "pcie_link",
    "python_packages",
]


#: PCIe generation for each link speed in GT/s, as sysfs reports it.
PCIE_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}

#: Theoretical GB/s per lane and direction after line encoding: 8b/10b for
#: gen 1-2, 128b/130b for gen 3-5, PAM4 FLIT (242/256) for gen 6. x16 gen4 is 31.5.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def _pcie_gen(speed: str | None) -> int | None:
    match = re.search(r"([\d.]+)\s*GT/s", speed or "")
    if match is None:
        return None
    gts = float(match.group(1))
    return next((gen for rate, gen in PCIE_GEN_BY_GTS.items() if abs(rate - gts) < 0.05), None)


def _link_gbps(gen: int | None, width: int | None) -> float | None:
    if gen not in PCIE_LANE_GBPS or not width:
        return None
    return round(PCIE_LANE_GBPS[gen] * width, 2)


def pcie_link(bdf: str, sys_root: str = "/sys") -> dict[str, Any]:
    """PCIe link of device ``bdf`` (e.g. "0000:1a:00.0"): speeds, widths, gen, GB/s.

    The current speed of an idle GPU is often lowered to save power; ``max_*`` is
    what the slot and device can do.

    >>> pcie_link("0000:1a:00.0")["max_gbps"]    # doctest: +SKIP
    63.01
    """
    device = os.path.join(sys_root, "bus", "pci", "devices", bdf.lower())
    out: dict[str, Any] = {"bdf": bdf.lower()}
    for which in ("current", "max"):
        speed = read_text(os.path.join(device, f"{which}_link_speed"))
        width_text = read_text(os.path.join(device, f"{which}_link_width"))
        width = int(width_text) if width_text and width_text.strip().isdigit() else None
        gen = _pcie_gen(speed)
        out.update({f"{which}_link_speed": speed.strip() if speed else None,
                    f"{which}_link_width": width, f"{which}_gen": gen,
                    f"{which}_gbps": _link_gbps(gen, width)})
    out["reason"] = None if out["max_link_speed"] else f"no PCIe link attributes under {device}"
    return out


def driver_version(proc_root: str = "/proc", sys_root: str = "/sys") -> str | None:
    """The NVIDIA kernel driver version ("570.86.15"), or None without a driver."""
    text = read_text(os.path.join(proc_root, "driver", "nvidia", "version")) or ""
    # "NVRM version: NVIDIA UNIX [Open ]Kernel Module [for x86_64]  570.86.15  ..."
    match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)", text)
    if match:
        return match.group(1)
    module_version = read_text(os.path.join(sys_root, "module", "nvidia", "version"))
    if module_version and module_version.strip():
        return module_version.strip()
    if proc_root != "/proc":  # a fake tree (tests): nothing from this machine's nvidia-smi
        return None
    rows = _nvidia_smi()  # a container or VM without the driver's procfs and sysfs nodes
    return rows[0]["driver_version"] if rows else None


_SMI_FIELDS = ("pci.bus_id", "name", "uuid", "driver_version", "pcie.link.gen.current", "pcie.link.gen.max",
               "pcie.link.width.current", "pcie.link.width.max")


@functools.lru_cache(maxsize=1)
def _nvidia_smi() -> list[dict[str, str]]:
    """nvidia-smi's view of the GPUs, where /proc/driver/nvidia is not there
    (containers, some VMs); [] without nvidia-smi or on any error."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = []
    for line in out.splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(_SMI_FIELDS):
            rows.append(dict(zip(_SMI_FIELDS, values)))
    return rows


def _smi_int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


_BDF = re.compile(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2})[:.]([0-9a-fA-F]{2})\.([0-7])")


def gpus(proc_root: str = "/proc", sys_root: str = "/sys") -> list[dict[str, Any]]:
    """NVIDIA GPUs the driver sees, from procfs and sysfs, without touching CUDA.

    >>> [g["model"] for g in gpus()]             # doctest: +SKIP
    ['NVIDIA H200']
    """
    root = os.path.join(proc_root, "driver", "nvidia", "gpus")
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return _gpus_from_smi(sys_root) if proc_root == "/proc" else []
    found = []
    for name in names:
        info: dict[str, str] = {}
        for line in (read_text(os.path.join(root, name, "information")) or "").splitlines():
            key, sep, value = line.partition(":")
            if sep:
                info[key.strip()] = value.strip()
        # The directory is named by bus location; the file says it too, in older
        # drivers with a "." between bus and device.
        match = _BDF.search(info.get("Bus Location", "")) or _BDF.search(name)
        bdf = ":".join(match.group(1, 2, 3)) + "." + match.group(4) if match else name
        found.append({"bdf": bdf.lower(), "model": info.get("Model"),
                      "uuid": info.get("GPU UUID"), "device_minor": info.get("Device Minor"),
                      "pcie": pcie_link(bdf, sys_root)})
    return found


def _gpus_from_smi(sys_root: str) -> list[dict[str, Any]]:
    found = []
    for row in _nvidia_smi():
        match = _BDF.search(row["pci.bus_id"])
        bdf = (":".join(match.group(1, 2, 3)) + "." + match.group(4))[-12:] if match else row["pci.bus_id"]
        link = pcie_link(bdf, sys_root)
        if link["reason"]:  # no sysfs either: nvidia-smi's own link figures
            cur_gen, max_gen = _smi_int(row["pcie.link.gen.current"]), _smi_int(row["pcie.link.gen.max"])
            cur_w, max_w = _smi_int(row["pcie.link.width.current"]), _smi_int(row["pcie.link.width.max"])
            link.update(current_gen=cur_gen, max_gen=max_gen, current_link_width=cur_w, max_link_width=max_w,
                        current_gbps=_link_gbps(cur_gen, cur_w), max_gbps=_link_gbps(max_gen, max_w),
                        reason=None if max_gen else link["reason"] + " and nvidia-smi gave no link figures")
        found.append({"bdf": bdf.lower(), "model": row["name"], "uuid": row["uuid"], "device_minor": None,
                      "pcie": link, "source": "nvidia-smi"})
    return found


# --------------------------------------------------------------------------- host

def cpu_info() -> dict[str, Any]:
    """CPU model, logical and usable CPUs, memory, kernel and Python version."""
    model = None
    for line in (read_text("/proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        # x86 says "model name"; arm64 kernels may only give "Model" or nothing.
        if key.strip() in ("model name", "Model", "Hardware") and value.strip():
            model = value.strip()
            break
    mem_total = None
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB", read_text("/proc/meminfo") or "", re.MULTILINE)
    if match:
        mem_total = int(match.group(1)) * 1024
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    return {"model": model or platform.processor() or None, "machine": platform.machine(),
            "logical_cpus": os.cpu_count(), "usable_cpus": usable, "mem_total_bytes": mem_total,
            "kernel": platform.release(), "python": platform.python_version()}


# --------------------------------------------------------------------------- packages

# Display name -> distributions that provide it (CUDA-specific builds have suffixes).
_PACKAGES = {
    "torch": ("torch",), "numpy": ("numpy",),
    "cupy": ("cupy", "cupy-cuda13x", "cupy-cuda12x"),
    "kvikio": ("kvikio", "kvikio-cu13", "kvikio-cu12"),
    "cuda-pathfinder": ("cuda-pathfinder",),
    "nvidia-cufile": ("nvidia-cufile",), "nvidia-cufile-cu12": ("nvidia-cufile-cu12",),
    "nvidia-nvjpeg": ("nvidia-nvjpeg",), "nvidia-nvjpeg-cu12": ("nvidia-nvjpeg-cu12",),
    "pillow": ("pillow",),
}


def python_packages() -> dict[str, str | None]:
    """Installed versions of the packages gdsio works with (None when missing).

    Read from package metadata: nothing is imported.
    """
    versions: dict[str, str | None] = {}
    for name, distributions in _PACKAGES.items():
        versions[name] = None
        for dist in distributions:
            try:
                versions[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return versions


# --------------------------------------------------------------------------- all together

def describe_machine(path: str | None = None) -> dict[str, Any]:
    """Every probe above in one JSON-ready dict, for benchmark reports and ``gdsio info``.

    With ``path`` (a data file or directory) also its filesystem and O_DIRECT probe.

    >>> import json; json.dumps(describe_machine("/data"))   # doctest: +SKIP
    """
    report: dict[str, Any] = {
        "cpu": cpu_info(),
        "driver_version": driver_version(),
        "gpus": gpus(),
        "nvidia_fs": nvidia_fs_status(),
        "p2pdma": p2pdma_possible(),
        "cufile_json": cufile_json(),
        "python_packages": python_packages(),
        "nvidia_libs": {name: find_nvidia_lib(name) for name in NVIDIA_LIBS},
    }
    if path is not None:
        report["storage"] = {"filesystem": filesystem_of(path), "o_direct": o_direct_probe(path)}
    return report
