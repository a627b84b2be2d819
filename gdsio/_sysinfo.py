"""Machine probes for ``gdsio doctor``, ``gdsio info`` and benchmark reports.

Every probe is cheap, runs as a non-root user, never initialises CUDA and never
raises because the thing it looks for is missing: it returns a value that says
why instead. Everything returned is plain JSON (dicts, lists, str, int, float,
bool, None), so ``json.dumps(describe_machine())`` always works.

Only the standard library is imported here; optional packages
(``cuda.pathfinder``) are imported lazily and tolerated when absent.

>>> from gdsio import _sysinfo
>>> _sysinfo.filesystem_of("/")["fs_type"]      # doctest: +SKIP
'ext4'
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import functools
import gzip
import json
import mmap
import os
import platform
import re
import shutil
import site
import subprocess
import sys
import tempfile
import zlib
from importlib import metadata
from typing import Any

__all__ = [
    "CUFILE_ENV_VARS",
    "EVICTED_BELOW",
    "NVIDIA_LIBS",
    "PCIE_GEN_BY_GTS",
    "PCIE_LANE_GBPS",
    "MountEntry",
    "NvidiaLib",
    "cpu_info",
    "cufile_json",
    "describe_machine",
    "driver_version",
    "evict",
    "filesystem_of",
    "find_nvidia_lib",
    "gpus",
    "nvidia_fs_status",
    "o_direct_probe",
    "p2pdma_possible",
    "parse_mountinfo",
    "pcie_link",
    "python_packages",
    "resident_fraction",
]


def _read_text(path: str) -> str | None:
    """The file's text, or None when it is missing or unreadable."""
    try:
        # surrogateescape decodes odd bytes as os.fsdecode does, so paths compare equal.
        with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
            return f.read()
    except OSError:
        return None


def _errno_text(exc: OSError) -> str:
    # str(OSError) appends the file name; the short form reads better in a sentence.
    return f"[Errno {exc.errno}] {exc.strerror}" if exc.errno else str(exc)


# --------------------------------------------------------------------------- filesystems

@dataclasses.dataclass(frozen=True)
class MountEntry:
    """One line of /proc/self/mountinfo, unescaped."""

    mount_point: str
    root: str
    fs_type: str
    source: str
    options: str  # per-mount options (rw, noatime, ...)
    super_options: str  # filesystem-wide options (e.g. dax, errors=...)
    major_minor: str  # st_dev as "major:minor": /sys/dev/block/<it> names the disk


_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape_mountinfo(field: str) -> str:
    # The kernel writes space, tab, newline and backslash as \040 \011 \012 \134.
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Parse the text of /proc/<pid>/mountinfo; malformed lines are skipped.

    >>> parse_mountinfo("27 1 254:0 / / rw - ext4 /dev/vda rw")[0].fs_type
    'ext4'
    """
    entries = []
    # Only "\n" ends a line: the kernel escapes it, but not \r or \x1c, which
    # str.splitlines() would also split on.
    for line in text.split("\n"):
        fields = line.split(" ")
        try:
            # A variable number of optional fields sits before the "-" separator.
            sep = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) < sep + 3:
            continue
        entries.append(MountEntry(
            mount_point=_unescape_mountinfo(fields[4]),
            root=_unescape_mountinfo(fields[3]),
            fs_type=_unescape_mountinfo(fields[sep + 1]),
            source=_unescape_mountinfo(fields[sep + 2]),
            options=fields[5],
            super_options=fields[sep + 3] if len(fields) > sep + 3 else "",
            major_minor=fields[2],
        ))
    return entries


def _mount_containing(path: str, entries: list[MountEntry]) -> MountEntry | None:
    best = None
    for entry in entries:
        inside = path == entry.mount_point or path.startswith(entry.mount_point.rstrip("/") + "/")
        # ">=": of mounts stacked on one point, the later line is the visible one.
        if inside and (best is None or len(entry.mount_point) >= len(best.mount_point)):
            best = entry
    return best


def filesystem_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> dict[str, Any]:
    """Mount point, filesystem type, source and options of the mount holding ``path``.

    >>> filesystem_of("/dev/shm")["fs_type"]     # doctest: +SKIP
    'tmpfs'
    """
    real = os.path.realpath(path)
    out: dict[str, Any] = {"path": real, "mount_point": None, "fs_type": None, "source": None,
                           "options": None, "super_options": None, "major_minor": None,
                           "reason": None}
    text = _read_text(mountinfo)
    if text is None:
        out["reason"] = f"{mountinfo} is not readable (not Linux?)"
        return out
    entry = _mount_containing(real, parse_mountinfo(text))
    if entry is None:
        out["reason"] = f"no mount in {mountinfo} contains {real}"
        return out
    out.update(mount_point=entry.mount_point, fs_type=entry.fs_type, source=entry.source,
               options=entry.options, super_options=entry.super_options,
               major_minor=entry.major_minor)
    return out


def _o_direct_read(file_path: str, fs_type: str | None) -> str | None:
    """None when O_DIRECT open and an aligned 4 KiB read work, else why not."""
    flag = getattr(os, "O_DIRECT", None)
    if flag is None:
        return "O_DIRECT is not available on this platform"
    try:
        buf = mmap.mmap(-1, 4096)  # anonymous mappings are page aligned, as O_DIRECT needs
    except OSError as exc:
        return f"cannot map an aligned 4096-byte buffer: {_errno_text(exc)}"
    try:
        try:
            fd = os.open(file_path, os.O_RDONLY | flag | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.EINVAL:  # the filesystem has no direct I/O
                return f"O_DIRECT refused by this filesystem ({fs_type}): {_errno_text(exc)}"
            return f"cannot open {file_path} with O_DIRECT: {_errno_text(exc)}"
        try:
            os.preadv(fd, [buf], 0)
        except OSError as exc:
            return (f"O_DIRECT open works but an aligned 4096-byte read fails on this "
                    f"filesystem ({fs_type}): {_errno_text(exc)}")
        finally:
            os.close(fd)
    finally:
        buf.close()
    return None


def o_direct_probe(path: str) -> dict[str, Any]:
    """Whether O_DIRECT open and an aligned 4 KiB read work at ``path``.

    ``path`` is a file, or a directory in which a 4 KiB probe file is made and
    removed again. Note that tmpfs accepts O_DIRECT since Linux 6.6.

    >>> o_direct_probe("/data")                  # doctest: +SKIP
    {'ok': True, 'reason': None, 'fs_type': 'xfs', 'path': '/data'}
    """
    fs_type = filesystem_of(path)["fs_type"]
    out: dict[str, Any] = {"ok": False, "reason": None, "fs_type": fs_type, "path": path}
    if not os.path.exists(path):
        out["reason"] = f"{path} does not exist"
        return out
    if not os.path.isdir(path):
        out["reason"] = _o_direct_read(path, fs_type)
        out["ok"] = out["reason"] is None
        return out
    try:
        fd, probe = tempfile.mkstemp(prefix=".gdsio-odirect-", dir=path)
    except OSError as exc:
        out["reason"] = f"cannot create a probe file in {path} (not writable?): {_errno_text(exc)}"
        return out
    try:
        try:
            # A full block, so the probe read really moves data through O_DIRECT.
            os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)
        out["reason"] = _o_direct_read(probe, fs_type)
    except OSError as exc:
        out["reason"] = f"cannot write a probe file in {path}: {_errno_text(exc)}"
    finally:
        with contextlib.suppress(OSError):
            os.unlink(probe)
    out["ok"] = out["reason"] is None
    return out


# --------------------------------------------------------------------------- GDS kernel side

def nvidia_fs_status(proc_root: str = "/proc", sys_root: str = "/sys") -> dict[str, Any]:
    """Whether the nvidia-fs kernel driver (GPUDirect Storage proper) is loaded.

    >>> nvidia_fs_status()                       # doctest: +SKIP
    {'loaded': False, 'version': None, 'stats_available': False, 'reason': '...'}
    """
    base = os.path.join(proc_root, "driver", "nvidia-fs")
    text = _read_text(os.path.join(base, "version"))
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
    text = _read_text(boot_config)
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


# --------------------------------------------------------------------------- cufile.json

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


# --------------------------------------------------------------------------- GPUs and PCIe

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
        speed = _read_text(os.path.join(device, f"{which}_link_speed"))
        width_text = _read_text(os.path.join(device, f"{which}_link_width"))
        width = int(width_text) if width_text and width_text.strip().isdigit() else None
        gen = _pcie_gen(speed)
        out.update({f"{which}_link_speed": speed.strip() if speed else None,
                    f"{which}_link_width": width, f"{which}_gen": gen,
                    f"{which}_gbps": _link_gbps(gen, width)})
    out["reason"] = None if out["max_link_speed"] else f"no PCIe link attributes under {device}"
    return out


def driver_version(proc_root: str = "/proc", sys_root: str = "/sys") -> str | None:
    """The NVIDIA kernel driver version ("570.86.15"), or None without a driver."""
    text = _read_text(os.path.join(proc_root, "driver", "nvidia", "version")) or ""
    # "NVRM version: NVIDIA UNIX [Open ]Kernel Module [for x86_64]  570.86.15  ..."
    match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)", text)
    if match:
        return match.group(1)
    module_version = _read_text(os.path.join(sys_root, "module", "nvidia", "version"))
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
        for line in (_read_text(os.path.join(root, name, "information")) or "").splitlines():
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
    for line in (_read_text("/proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        # x86 says "model name"; arm64 kernels may only give "Model" or nothing.
        if key.strip() in ("model name", "Model", "Hardware") and value.strip():
            model = value.strip()
            break
    mem_total = None
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB", _read_text("/proc/meminfo") or "", re.MULTILINE)
    if match:
        mem_total = int(match.group(1)) * 1024
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    return {"model": model or platform.processor() or None, "machine": platform.machine(),
            "logical_cpus": os.cpu_count(), "usable_cpus": usable, "mem_total_bytes": mem_total,
            "kernel": platform.release(), "python": platform.python_version()}


# --------------------------------------------------------------------------- page cache

#: evict() counts a file as out of the page cache below this resident fraction.
EVICTED_BELOW = 0.01
_MAP_WINDOW = 1 << 30  # map at most 1 GiB at a time, to stay light on address space
_ODD_BYTES = bytes(range(1, 256, 2))  # mincore sets bit 0 for a resident page


@functools.cache
def _libc() -> Any:
    """libc with mmap, munmap and mincore typed, or None where that fails."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long)
        libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
        libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    except (OSError, AttributeError):
        return None
    return libc


def resident_fraction(path: str) -> float | None:
    """Fraction (0..1) of ``path``'s pages now in the page cache.

    0.0 for an empty file; None when mincore is unavailable or the file cannot
    be opened or mapped.
    """
    libc = _libc()
    if libc is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0.0
        page = os.sysconf("SC_PAGE_SIZE")
        resident = 0
        for offset in range(0, size, _MAP_WINDOW):
            length = min(_MAP_WINDOW, size - offset)
            addr = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
            if addr is None or addr == ctypes.c_void_p(-1).value:
                return None
            try:
                vec = ctypes.create_string_buffer((length + page - 1) // page)
                if libc.mincore(addr, length, vec) != 0:
                    return None
                raw = vec.raw
                resident += len(raw) - len(raw.translate(None, _ODD_BYTES))
            finally:
                libc.munmap(addr, length)
        return resident / ((size + page - 1) // page)
    finally:
        os.close(fd)


def evict(path: str) -> bool:
    """Drop ``path`` from the page cache without root; True when it then is out.

    False means the eviction did not take (tmpfs keeps its pages, another
    process maps the file) or could not be checked.

    >>> evict("shard-0001.bin")                  # doctest: +SKIP
    True
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        with contextlib.suppress(OSError):
            # DONTNEED skips dirty pages: write a just-written file back first.
            os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (OSError, AttributeError):
        return False
    finally:
        os.close(fd)
    fraction = resident_fraction(path)
    return fraction is not None and fraction < EVICTED_BELOW


# --------------------------------------------------------------------------- packages and libraries

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
