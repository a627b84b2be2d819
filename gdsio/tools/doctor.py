"""``gdsio doctor``: why GPUDirect Storage is or is not used for a path, in plain words.

>>> from gdsio.tools.doctor import doctor, render_doctor
>>> report = doctor("/data")            # doctest: +SKIP
>>> print(render_doctor(report))        # doctest: +SKIP
>>> report["auto"]["gpu"], report["to_get_gds"]   # doctest: +SKIP
('pinned', ['load the nvidia-fs kernel module ...', ...])

Every check is a dict: ``id``, ``title``, ``status`` (ok, warn, fail, info or
skip), ``summary`` (one sentence), ``details`` (the raw facts) and ``gds_step``
(what to change for true GDS, when this check stands in its way). A check that
breaks is reported as failed; doctor raises only for a missing path or a
bad device argument.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import tempfile
import textwrap
from typing import Any, Callable

import torch

from .. import __version__, _core
from ..image.nvjpeg import nvjpeg_status
from ..io.api import read
from ..io.backends import auto_choice, backends
from ..io.kvikio import kvikio_unusable_reason
from ..platform import filesystems, gds, machine, nvidia

__all__ = ["EXIT_NOT_GDS", "EXIT_OK", "GDS_DISTRIBUTED_FILESYSTEMS", "GDS_LOCAL_FILESYSTEMS", "doctor", "render_doctor"]

# Exit status of `gdsio doctor` (a missing path or a bad argument exits 2, from the CLI).
EXIT_OK = 0  # true GDS is usable for the path and no check failed
EXIT_NOT_GDS = 1  # a check failed or GDS is not used: the report says what to change

# Local file systems that cuFile's GDS path supports (distributed ones such as
# Lustre, GPFS, WekaFS or BeeGFS need their vendor's GDS support as well).
GDS_LOCAL_FILESYSTEMS = ("ext4", "xfs")
GDS_DISTRIBUTED_FILESYSTEMS = ("lustre", "gpfs", "wekafs", "beegfs", "nfs", "nfs4")

_ORDER = {"fail": 0, "warn": 1, "info": 2, "skip": 3, "ok": 4}


def _check(id: str, title: str, status: str, summary: str, details: Any = None,
           gds_step: str | None = None) -> dict[str, Any]:
    return {"id": id, "title": title, "status": status, "summary": summary,
            "details": details if details is not None else {}, "gds_step": gds_step}


def _version(v: int) -> str:
    """CUDA's 13000 -> '13.0'."""
    return f"{v // 1000}.{(v % 1000) // 10}" if v else "none"


def _check_gdsio() -> dict[str, Any]:
    d = {"version": __version__, "extension": getattr(_core, "__file__", None),
         "built_with_cuda": bool(_core.built_with_cuda), "cuda_architectures": _core.cuda_architectures}
    if not _core.built_with_cuda:
        return _check("gdsio", "gdsio", "warn",
                      f"gdsio {__version__} was built without CUDA: host reads work, GPU reads do not",
                      d, "rebuild gdsio where nvcc is installed (pip install --no-build-isolation gdsio)")
    return _check("gdsio", "gdsio", "ok",
                  f"gdsio {__version__}, built with CUDA for {_core.cuda_architectures.replace(',', ', ')}", d)


def _check_gpu(device: int) -> dict[str, Any]:
    st = nvidia.cuda_status()
    seen = machine.gpus()
    d = {"cuda_status": st, "gpus_in_procfs": seen}
    why = nvidia.cuda_unusable_reason()
    models = ", ".join(g["model"] or g["bdf"] for g in seen) or "none listed in /proc/driver/nvidia/gpus"
    if why:
        # Without a driver, the driver check carries the step; here only what else stops CUDA.
        step = None if not st["driver_version"] else f"make a CUDA device usable: {why}"
        return _check("gpu", "GPU", "fail", f"no usable CUDA device: {why} (GPUs the driver lists: {models})", d, step)
    if device >= st["device_count"]:
        return _check("gpu", "GPU", "fail", f"device {device} does not exist: {st['device_count']} visible", d,
                      f"pick a device below {st['device_count']}")
    return _check("gpu", "GPU", "ok", f"{st['device_count']} CUDA device(s) visible: {models}", d)


def _check_driver() -> dict[str, Any]:
    st = nvidia.cuda_status()
    kernel = machine.driver_version()
    d = {"kernel_module": kernel, "driver_cuda_version": _version(st["driver_version"]),
         "runtime_cuda_version": _version(st["runtime_version"])}
    runtime = f"gdsio's CUDA runtime (linked statically) is {_version(st['runtime_version'])}"
    if not st["driver_version"]:
        return _check("driver", "driver and CUDA", "fail", f"no NVIDIA driver found; {runtime}", d,
                      "use a machine with an NVIDIA data-center GPU and install its driver")
    text = f"driver {kernel or '(version not in /proc)'} supports CUDA {_version(st['driver_version'])}; {runtime}"
    if st["driver_version"] < st["runtime_version"]:
        return _check("driver", "driver and CUDA", "fail",
                      text + ": the driver is older than the runtime, so CUDA calls fail", d,
                      f"update the NVIDIA driver to one that supports CUDA {_version(st['runtime_version'])}")
    return _check("driver", "driver and CUDA", "ok", text, d)


def _check_kernels(device: int, gpu_ok: bool) -> dict[str, Any]:
    if not gpu_ok:
        return _check("kernels", "GPU code in this build", "skip", "not checked: no usable CUDA device")
    err = _core.kernel_probe(device)
    d: dict[str, Any] = {"cuda_architectures": _core.cuda_architectures, "probe": err}
    try:
        d["compute_capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
    except Exception as e:  # torch without CUDA: the probe still says enough
        d["compute_capability"] = f"unknown ({e})"
    if err:
        return _check("kernels", "GPU code in this build", "fail",
                      f"this build has no code that runs on device {device} (compute capability "
                      f"{d['compute_capability']}): {err}", d,
                      "rebuild with GDSIO_CUDA_ARCHITECTURES naming this GPU's architecture")
    return _check("kernels", "GPU code in this build", "ok",
                  f"a test kernel runs on device {device} (compute capability {d['compute_capability']})", d)


def _check_libcufile() -> dict[str, Any]:
    found = nvidia.find_nvidia_lib("cufile")
    st = gds.cufile_loaded()
    d = {"found": found, "loaded": st}
    if st["loaded"]:
        return _check("libcufile", "libcufile", "ok",
                      f"loaded {st['library'] or found['path']} (found by {found['how'] or 'the dynamic loader'})", d)
    where = f" (found at {found['path']}, but it did not load)" if found["found"] else ""
    return _check("libcufile", "libcufile", "fail", f"libcufile is not available{where}: {st['reason']}", d,
                  "install libcufile: pip install 'gdsio[gds]' (CUDA 13) or nvidia-cufile-cu12")


def _check_cufile_driver(device: int, gpu_ok: bool) -> dict[str, Any]:
    if not gpu_ok or not gds.cufile_loaded()["loaded"]:
        return _check("cufile-driver", "cuFile driver", "skip", "not checked: needs a GPU and libcufile")
    st = gds.cufile_state(device)
    if not st["driver_open"]:
        return _check("cufile-driver", "cuFile driver", "fail", f"cuFileDriverOpen failed: {st['reason']}", st,
                      "fix what stops cuFileDriverOpen: " + st["reason"])
    if st["true_gds"]:
        return _check("cufile-driver", "cuFile driver", "ok", "cuFile is open and moves data by DMA (true GDS)"
                      + (f": {st['reason']}" if st["reason"] else ""), st)
    return _check("cufile-driver", "cuFile driver", "warn",
                  f"cuFile is open but runs in its compat mode: {st['reason']}", st)


def _check_kernel_side() -> dict[str, Any]:
    nvfs, p2p = gds.nvidia_fs_status(), gds.p2pdma_possible()
    d = {"nvidia_fs": nvfs, "p2pdma": p2p}
    if nvfs["loaded"]:
        return _check("dma-path", "nvidia-fs / P2PDMA", "ok",
                      f"the nvidia-fs driver is loaded (version {nvfs['version']})", d)
    if p2p["reason"] is None:
        return _check("dma-path", "nvidia-fs / P2PDMA", "ok",
                      f"nvidia-fs is not loaded, but kernel {p2p['kernel']} has PCI P2PDMA: cuFile 1.13+ (CUDA 12.8+) "
                      "can DMA without it when use_pci_p2pdma is true in cufile.json", d)
    return _check("dma-path", "nvidia-fs / P2PDMA", "fail",
                  f"the nvidia-fs driver is not loaded (/proc/driver/nvidia-fs is missing) and PCI P2PDMA is not "
                  f"possible ({p2p['reason']}): every cuFile read runs in compat mode", d,
                  "load the nvidia-fs kernel module (NVIDIA's nvidia-fs / nvidia-gds packages), or use a "
                  "kernel >= 6.2 built with CONFIG_PCI_P2PDMA with CUDA 12.8+ and set "
                  "properties.use_pci_p2pdma in cufile.json")


def _truthy(v: Any) -> bool:
    return str(v).strip().lower() in ("1", "true", "on", "yes")


def _check_cufile_json() -> dict[str, Any]:
    cj = gds.cufile_json()
    s, env = cj["settings"], cj["env"]
    parts = [f"{cj['path']} {'is read' if cj['exists'] else 'does not exist (library defaults apply)'}"]
    if cj["error"]:
        parts.append(f"it could not be parsed: {cj['error']}")
    allow = s.get("properties.allow_compat_mode", True)
    default = "" if "properties.allow_compat_mode" in s else " (default)"
    parts.append(f"allow_compat_mode is {str(allow).lower()}{default}")
    if "properties.use_pci_p2pdma" in s:
        parts.append(f"use_pci_p2pdma is {str(s['properties.use_pci_p2pdma']).lower()}")
    parts.append("env overrides: " + (", ".join(f"{k}={v}" for k, v in env.items()) if env else "none")
                 + f" (looked at {', '.join(gds.CUFILE_ENV_VARS)})")
    step = None
    status = "info"
    if _truthy(env.get("CUFILE_FORCE_COMPAT_MODE", "")):
        status, step = "warn", "unset CUFILE_FORCE_COMPAT_MODE (it forces cuFile's compat mode)"
    elif cj["error"]:
        status, step = "warn", f"fix the syntax of {cj['path']}"
    return _check("cufile-json", "cufile.json", status, "; ".join(parts), cj, step)


def _check_iommu() -> dict[str, Any]:
    # GDS proper needs the IOMMU off or in passthrough; sysfs lists active IOMMUs.
    try:
        units = sorted(os.listdir("/sys/class/iommu"))
    except OSError:
        units = []
    try:
        with open("/proc/cmdline", encoding="utf-8", errors="replace") as f:
            cmdline = f.read().split()
    except OSError:
        cmdline = []
    flags = [a for a in cmdline if "iommu" in a]
    d = {"iommu_units": units, "cmdline_flags": flags}
    passthrough = any(a in ("iommu=pt", "iommu.passthrough=1", "intel_iommu=off", "amd_iommu=off", "iommu=off")
                      for a in flags)
    if units and not passthrough:
        return _check("iommu", "IOMMU", "warn",
                      f"an IOMMU is active ({', '.join(units)}) and the kernel command line sets no passthrough: "
                      "GDS proper needs it off or in passthrough", d,
                      "boot with iommu=pt (or the IOMMU off)")
    why = "passthrough/off on the kernel command line" if passthrough else "no active IOMMU in /sys/class/iommu"
    return _check("iommu", "IOMMU", "ok", why, d)


def _check_filesystem(path: str) -> dict[str, Any]:
    fs = filesystems.filesystem_of(path)
    kind, src = fs["fs_type"], fs["source"] or "?"
    text = f"{fs['path']} is on {kind} (mount {fs['mount_point']}, device {src})"
    if kind is None:
        return _check("filesystem", "file system", "warn", f"file system unknown: {fs['reason']}", fs)
    if kind in GDS_LOCAL_FILESYSTEMS:
        if "nvme" not in src:
            return _check("filesystem", "file system", "warn",
                          text + f": {kind} is supported, but {src} does not look like an NVMe device", fs,
                          f"put the data on a local NVMe drive (ext4 or xfs); {src} is not one")
        return _check("filesystem", "file system", "ok", text + ": a file system cuFile's GDS path supports", fs)
    if kind in GDS_DISTRIBUTED_FILESYSTEMS:
        return _check("filesystem", "file system", "info",
                      text + ": GDS works here only with the vendor's GDS support (RDMA)", fs)
    return _check("filesystem", "file system", "warn", text + f": cuFile's GDS path does not support {kind}", fs,
                  f"put the data on a local NVMe ext4 or xfs file system ({kind} is not supported by GDS)")


def _check_o_direct(path: str) -> dict[str, Any]:
    p = filesystems.o_direct_probe(path)
    if p["ok"]:
        return _check("o-direct", "O_DIRECT", "ok", f"O_DIRECT opens and aligned reads work on {p['fs_type']}", p)
    return _check("o-direct", "O_DIRECT", "warn",
                  f"{p['reason']}: cuFile needs O_DIRECT; gdsio's posix/pinned paths read through the page cache", p,
                  "use a file system that accepts O_DIRECT (ext4 or xfs)")


def _check_cufile_register(path: str, device: int, driver: dict[str, Any]) -> dict[str, Any]:
    """One cuFile read of up to 4 KiB of `path` (a file), or of a probe file
    written in `path` (a directory): cuFile can open its driver and still refuse
    every file of a file system (cuFileHandleRegister fails, compat mode too),
    as on a VM whose block device has no udev attributes."""
    title = "cuFile on this path"
    if driver["status"] not in ("ok", "warn"):
        return _check("cufile-register", title, "skip", "not checked: cuFile's driver is not open")
    probe = None
    try:
        if os.path.isdir(path):
            try:
                fd, probe = tempfile.mkstemp(prefix=".gdsio-doctor-", dir=path)
            except OSError as e:
                return _check("cufile-register", title, "skip",
                              f"not checked: cannot write a probe file in {path} ({e.strerror}); run doctor on a file")
            with os.fdopen(fd, "wb") as f:
                f.write(bytes(4096))
            target = probe
        else:
            target = path
        n = min(4096, os.path.getsize(target))
        if n == 0:
            return _check("cufile-register", title, "skip", f"not checked: {target} is empty")
        try:
            _, st = read(target, size=n, device=f"cuda:{device}", backend="cufile", return_stats=True)
        except _core.BackendUnavailable as e:
            udev = os.access("/run/udev", os.R_OK | os.X_OK)
            return _check("cufile-register", title, "fail", f"cuFile cannot read {target}: {e}", {"error": str(e)},
                          ("make cuFile accept files here: its log (CUFILE_LOGFILE_PATH, CUFILE_LOGGING_LEVEL=INFO) "
                           "names the cause") if udev else
                          "give cuFile udev: start the container with --volume /run/udev:/run/udev:ro")
        return _check("cufile-register", title, "ok", f"cuFile reads {target} (backend {st.backend})",
                      {"backend": st.backend})
    finally:
        if probe:
            os.unlink(probe)


def _check_pcie() -> dict[str, Any]:
    seen = machine.gpus()
    if not seen:
        return _check("pcie", "PCIe link", "skip", "no NVIDIA GPU listed by the driver")
    lines, status = [], "ok"
    for g in seen:
        p = g["pcie"]
        if p.get("reason"):
            lines.append(f"{g['bdf']}: {p['reason']}")
            status = "info"
            continue
        def v(x: Any) -> Any:
            return "?" if x is None else x

        lines.append(f"{g['bdf']} ({g['model']}): now gen {v(p['current_gen'])} x{v(p['current_link_width'])}, "
                     f"max gen {v(p['max_gen'])} x{v(p['max_link_width'])} ({v(p['max_gbps'])} GB/s per direction)")
        if p["current_link_width"] and p["max_link_width"] and p["current_link_width"] < p["max_link_width"]:
            status = "warn"
            lines[-1] += ": the link runs narrower than it can (reseat the card or check the slot)"
    note = " (an idle GPU often lowers its speed, not its width)"
    return _check("pcie", "PCIe link", status, "; ".join(lines) + note, {"gpus": seen})


def _check_kvikio() -> dict[str, Any]:
    version = machine.python_packages().get("kvikio")
    why = kvikio_unusable_reason()
    if why:
        return _check("kvikio", "kvikio", "info", why + " (optional: gdsio works without it)", {"version": version})
    return _check("kvikio", "kvikio", "ok", f"kvikio {version} is installed (backend 'kvikio')", {"version": version})


def _check_nvjpeg() -> dict[str, Any]:
    # Loaded, not only found: the version is what the library itself says
    # (nvjpegGetProperty), whatever wheel or path it came from.
    found, st = nvidia.find_nvidia_lib("nvjpeg"), nvjpeg_status()
    d = {**found, "loaded": st}
    if st["loaded"]:
        built = st.get("cudart_version")
        return _check("nvjpeg", "nvJPEG", "ok",
                      f"loaded {st['library']}: nvJPEG {'.'.join(map(str, st['version']))}"
                      + (f", built for CUDA {'.'.join(map(str, built))}" if built else ""), d)
    why = f"found {found['path']}, but it did not load: {st['reason']}" if found["found"] else found["reason"]
    return _check("nvjpeg", "nvJPEG", "info", why + " (for GPU JPEG decode; optional)", d)


def _check_torch() -> dict[str, Any]:
    d = {"version": torch.__version__, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
    if torch.version.cuda is None:
        return _check("torch", "torch", "warn", f"torch {torch.__version__} is a CPU-only build: GPU tensors are "
                      "unavailable to gdsio.read(device='cuda')", d, "install a CUDA build of torch")
    return _check("torch", "torch", "ok" if d["cuda_available"] else "warn",
                  f"torch {torch.__version__} built for CUDA {torch.version.cuda}; "
                  f"{'sees a GPU' if d['cuda_available'] else 'sees no GPU'}", d)


def _safe(fn: Callable[..., dict[str, Any]], *args: Any, id: str) -> dict[str, Any]:
    try:
        return fn(*args)
    except Exception as e:  # doctor explains; it never dies on a probe
        return _check(id, id, "fail", f"this check broke: {type(e).__name__}: {e}")


def doctor(path: str | os.PathLike[str] = ".", device: int = 0) -> dict[str, Any]:
    """Checks what decides the read path for `path` on `device`.

    Args:
        path: a file or directory; its file system and O_DIRECT support are checked.
        device: the CUDA device index whose GPU checks run (ignored without a GPU).

    Returns:
        A JSON-ready dict: ``checks`` (each with id, title, status, summary,
        details, gds_step), ``backends``, ``auto`` (what ``backend="auto"``
        picks and why), ``to_get_gds`` (the steps to true GDS), ``ok`` and
        ``exit_code``: 0 when true GPUDirect Storage is usable for `path` and no
        check failed, 1 otherwise (``reason`` says why, in one sentence).

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: `device` is not a non-negative int.

    Example:
        >>> from gdsio.tools.doctor import doctor
        >>> report = doctor("/data")                     # doctest: +SKIP
        >>> report["exit_code"], report["auto"]["gpu"]   # doctest: +SKIP
        (1, 'pinned')
    """
    path = os.path.abspath(os.fspath(path))
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)  # the path once, as open() says it
    if not isinstance(device, int) or isinstance(device, bool) or device < 0:
        raise ValueError(f"device must be a CUDA device index (an int >= 0); got {device!r}")
    checks = [_safe(_check_gdsio, id="gdsio"), _safe(_check_gpu, device, id="gpu"),
              _safe(_check_driver, id="driver")]
    gpu_ok = checks[1]["status"] == "ok"
    checks += [_safe(_check_torch, id="torch"), _safe(_check_kernels, device, gpu_ok, id="kernels"),
               _safe(_check_libcufile, id="libcufile"), _safe(_check_cufile_driver, device, gpu_ok, id="cufile-driver"),
               _safe(_check_kernel_side, id="dma-path"), _safe(_check_iommu, id="iommu"),
               _safe(_check_cufile_json, id="cufile-json")]
    by_id = {c["id"]: c for c in checks}
    checks += [_safe(_check_filesystem, path, id="filesystem"), _safe(_check_o_direct, path, id="o-direct"),
               _safe(_check_cufile_register, path, device, by_id["cufile-driver"], id="cufile-register")]
    checks += [_safe(_check_pcie, id="pcie"), _safe(_check_kvikio, id="kvikio"), _safe(_check_nvjpeg, id="nvjpeg")]

    infos, auto = [], {"gpu": "unavailable", "host": "posix"}
    try:
        infos = backends(path if os.path.isfile(path) else None, device)
        auto = auto_choice(infos)
    except Exception as e:
        checks.append(_check("backends", "backends", "fail", f"gdsio.backends() broke: {type(e).__name__}: {e}"))
    by = {b.name: b for b in infos}
    if auto["gpu"] == "gds":
        gpu_why = "true GPUDirect Storage is usable here"
    elif auto["gpu"] == "pinned":
        gpu_why = "gds is not usable: " + (by["gds"].reason if "gds" in by else "?")
    else:
        gpu_why = "no GPU path can run: " + (by["pinned"].reason if "pinned" in by else "?")
    steps = [] if auto["gpu"] == "gds" else list(dict.fromkeys(c["gds_step"] for c in checks if c["gds_step"]))
    failed = [c["title"] for c in checks if c["status"] == "fail"]
    ok = auto["gpu"] == "gds" and not failed
    if ok:
        reason = None
    elif failed:
        reason = f"{len(failed)} check(s) failed: {', '.join(failed)}"
    else:
        reason = f"true GPUDirect Storage is not used for this path: {gpu_why}"
    return {
        "gdsio": __version__,
        "path": path,
        "device": device,
        "gpu": gpu_ok,
        "ok": ok,
        "exit_code": EXIT_OK if ok else EXIT_NOT_GDS,
        "reason": reason,
        "checks": checks,
        "backends": [dataclasses.asdict(b) for b in infos],
        "auto": {**auto, "gpu_why": gpu_why, "host_why": "host destinations always use the posix reader"},
        "to_get_gds": steps,
    }


_TAG = {"ok": "ok", "warn": "warn", "fail": "FAIL", "info": "info", "skip": "--"}


def render_doctor(report: dict[str, Any], columns: int | None = None) -> str:
    """The report in plain words, one check per paragraph, then the verdict."""
    columns = columns or max(80, shutil.get_terminal_size((100, 24)).columns)
    # The device is named only where there is one: without a GPU, "CUDA device 0" would mislead.
    gpu = f" (CUDA device {report['device']})" if report.get("gpu") else ""
    out = [f"gdsio doctor: {report['path']}{gpu}", ""]
    width = max(len(c["title"]) for c in report["checks"])
    for c in report["checks"]:
        lead = f"  [{_TAG[c['status']]:>4}] {c['title'].ljust(width)}  "
        out += textwrap.wrap(c["summary"], columns, initial_indent=lead, subsequent_indent=" " * len(lead),
                             break_on_hyphens=False, break_long_words=False) or [lead]
    a = report["auto"]
    out += ["", "Backend 'auto' will choose here:",
            f"  into GPU memory:  {a['gpu']}  ({a['gpu_why']})",
            f"  into host memory: {a['host']}"]
    if report["backends"]:
        out.append("  all backends: " + ", ".join(
            f"{b['name']} {'yes' if b['usable'] else 'no'}" for b in report["backends"]))
    if a["gpu"] == "gds":
        out += ["", "True GPUDirect Storage is in use here: nothing to change."]
    elif report["to_get_gds"]:
        out += ["", "To get true GPUDirect Storage here:"]
        out += [f"  {i}. {s}" for i, s in enumerate(report["to_get_gds"], 1)]
    out += ["", f"exit status {report['exit_code']}: "
            + ("true GPUDirect Storage is in use, every check passed" if report["ok"] else report["reason"])]
    return "\n".join(out) + "\n"
