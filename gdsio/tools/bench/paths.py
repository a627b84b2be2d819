"""The copy paths that ``gdsio bench`` times, each with the check that says
why it cannot run here. A path is a ``CopyPath``: ``prepare(file, size, cfg)``
does the untimed setup and returns the runner, a no-argument function that
performs one timed call and returns ``{"backend", "reason", "direct_io"}``.

>>> from gdsio.tools.bench.paths import PATHS, BenchConfig
>>> run = PATHS["numpy-fromfile"].prepare("shard.bin", 1 << 20, BenchConfig())   # doctest: +SKIP
>>> run()["backend"]                                                             # doctest: +SKIP
'numpy'
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from typing import Any, Callable

import numpy as np
import torch

import gdsio

from ...io.kvikio import kvikio_config, kvikio_unusable_reason
from ...platform import filesystems, gds, nvidia
from .report import format_bytes
from ...config import current

__all__ = ["GPU", "HOST", "IMAGE_BENCH_NOTE", "PATHS", "REMOTE_PATHS", "BenchConfig", "CopyPath",
           "gpu_unusable_reason", "stats_info", "sync_device"]

GPU, HOST = "gpu", "host"

Runner = Callable[[], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """How to run: ``None`` settings mean "as gdsio.current_settings() says"."""

    repeat: int = 3
    cold: bool = False
    paths: tuple[str, ...] = ()  # empty: all
    threads: int | None = None
    chunk_bytes: int | None = None
    staging_buffers: int | None = None
    direct_io: bool | None = None
    huge_pages: bool | None = None
    remote_concurrency: int | None = None  # settings of remote reads: accepted as everywhere, unused by local paths
    remote_chunk_bytes: int | None = None
    remote_retries: int | None = None
    remote_timeout: float | None = None
    device: str = "cuda"

    def __post_init__(self) -> None:
        if not isinstance(self.repeat, int) or self.repeat < 1:
            raise ValueError(f"repeat must be an int >= 1, got {self.repeat!r}")
        unknown = [p for p in self.paths if p not in PATHS and p not in REMOTE_PATHS]
        if unknown:
            raise ValueError(f"unknown path(s) {', '.join(unknown)}; known: {', '.join([*PATHS, *REMOTE_PATHS])}")

    def overrides(self) -> dict[str, Any]:
        names = ("threads", "chunk_bytes", "staging_buffers", "direct_io", "huge_pages", "remote_concurrency",
                 "remote_chunk_bytes", "remote_retries", "remote_timeout")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}


@dataclasses.dataclass(frozen=True)
class CopyPath:
    name: str
    destination: str  # GPU or HOST
    what: str  # one line: what is timed
    unavailable: Callable[[BenchConfig], str | None]
    prepare: Callable[[str, int, BenchConfig], Runner]


# ----------------------------------------------------------------------------- availability

gpu_unusable_reason = nvidia.gpu_unusable_reason


def _cufile_unusable(cfg: BenchConfig) -> str | None:
    why = gpu_unusable_reason()
    if why:
        return why
    st = gds.cufile_state(_device_index(cfg))
    return None if st["driver_open"] else st["reason"]


def _kvikio_unusable(cfg: BenchConfig) -> str | None:
    why = gpu_unusable_reason() or kvikio_unusable_reason()
    if why:
        return why
    try:
        import kvikio  # noqa: F401
    except Exception as e:  # it raises OSError when libcuda is missing
        return f"kvikio cannot be imported here: {e}"
    return None


def _torch_gds_unusable(cfg: BenchConfig) -> str | None:
    why = gpu_unusable_reason()
    if why:
        return why
    try:
        import torch.cuda.gds  # noqa: F401
    except ImportError:
        return f"torch {torch.__version__} has no torch.cuda.gds (it came in torch 2.5)"
    # Without cuFile in the build, torch.cuda.gds installs stand-ins that raise.
    fn = getattr(torch._C, "_gds_register_handle", None)
    if fn is None or "_dummy_fn" in getattr(fn, "__qualname__", ""):
        return f"this torch build ({torch.__version__}) has no cuFile support (torch.cuda.gds is a stub)"
    return None


IMAGE_BENCH_NOTE = ("images are measured in images/s, not GB/s of one file: "
                    "pytest bench/bench_decode.py (gdsio.image vs Pillow + .cuda() and torchvision.io.decode_jpeg)")


def _image_unusable(cfg: BenchConfig) -> str | None:
    return IMAGE_BENCH_NOTE


def _gpu_only(cfg: BenchConfig) -> str | None:
    return gpu_unusable_reason()


def _host_always(cfg: BenchConfig) -> str | None:
    return None


# ----------------------------------------------------------------------------- the paths

def _device_index(cfg: BenchConfig) -> int:
    return int(cfg.device.split(":")[1]) if ":" in cfg.device else 0


def sync_device(cfg: BenchConfig) -> None:
    torch.cuda.synchronize(_device_index(cfg))


def stats_info(st: Any) -> dict[str, Any]:
    return {"backend": st.backend, "reason": st.reason, "direct_io": st.direct_io}


def _prep_naive(path: str, size: int, cfg: BenchConfig) -> Runner:
    def run() -> dict[str, Any]:
        torch.from_numpy(np.fromfile(path, dtype=np.uint8, count=size)).to(cfg.device)
        sync_device(cfg)
        return {"backend": "numpy+torch", "reason": "", "direct_io": False}

    return run


def _prep_pinned_sync(path: str, size: int, cfg: BenchConfig) -> Runner:
    chunk = current().chunk_bytes
    pinned = torch.empty(chunk, dtype=torch.uint8, pin_memory=True)
    view = memoryview(pinned.numpy())
    stream = torch.cuda.current_stream(_device_index(cfg))

    def run() -> dict[str, Any]:
        out = torch.empty(size, dtype=torch.uint8, device=cfg.device)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            off = 0
            while off < size:
                n = min(chunk, size - off)
                got = 0
                while got < n:
                    k = os.preadv(fd, [view[got:n]], off + got)
                    if k <= 0:
                        raise OSError(5, f"short read at offset {off + got}", path)
                    got += k
                out[off : off + n].copy_(pinned[:n], non_blocking=True)
                stream.synchronize()  # KvikIO's compat path waits here: no read/copy overlap
                off += n
        finally:
            os.close(fd)
        return {"backend": "pinned-sync", "reason": f"1 thread, {format_bytes(chunk)} chunks", "direct_io": False}

    return run


def _prep_gdsio(backend: str, device: str | None = None, keep_open: bool = False) -> Callable[[str, int, BenchConfig], Runner]:
    """gdsio.read per call, as users call it; with keep_open, one gdsio.File
    registered once (cuFile's handle registration is not part of a read, as
    for torch-gds) and a fresh destination per call, as the other paths."""

    def prepare(path: str, size: int, cfg: BenchConfig) -> Runner:
        dev = device or cfg.device
        if keep_open:
            f = gdsio.File(path)
            f.read_into(torch.empty(min(size, 4096), dtype=torch.uint8, device=dev), backend=backend)  # registers

            def run() -> dict[str, Any]:
                st = f.read_into(torch.empty(size, dtype=torch.uint8, device=dev), backend=backend)
                sync_device(cfg)
                return stats_info(st)

            run.keepalive = f  # type: ignore[attr-defined]
            return run

        def run() -> dict[str, Any]:
            _, st = gdsio.read(path, size=size, device=dev, backend=backend, return_stats=True)
            if dev != "cpu":
                sync_device(cfg)
            return stats_info(st)

        return run

    return prepare


def _prep_kvikio(path: str, size: int, cfg: BenchConfig) -> Runner:
    import kvikio
    import kvikio.defaults
    s = current()
    compat = bool(getattr(kvikio.defaults, "is_compat_mode_preferred", lambda: False)())
    if compat:
        info = {"backend": "kvikio-compat", "direct_io": False,
                "reason": "KvikIO prefers its compat mode here (POSIX reads, a synchronous copy per task)"}
    else:
        mode = gds.cufile_state(_device_index(cfg)).get("mode") or "unknown mode"
        info = {"backend": "kvikio-cufile", "direct_io": True,
                "reason": f"KvikIO prefers cuFile here (gdsio sees cuFile in: {mode}; KvikIO does not report "
                          "a per-file fallback to its POSIX path)"}
    info["reason"] += f"; {s.threads} threads, {format_bytes(s.chunk_bytes)} tasks, as gdsio's"

    # Set once, outside the timed calls: changing num_threads rebuilds kvikio's thread pool.
    kvikio_config(kvikio, {"num_threads": s.threads, "task_size": s.chunk_bytes})  # defaults.set applies when called

    def run() -> dict[str, Any]:
        out = torch.empty(size, dtype=torch.uint8, device=cfg.device)
        with kvikio.CuFile(path, "r") as f:
            got = f.pread(out, size, 0).get()
        if got != size:
            raise OSError(5, f"kvikio read {got} of {size} bytes", path)
        sync_device(cfg)
        return dict(info)

    return run


def _prep_torch_gds(path: str, size: int, cfg: BenchConfig) -> Runner:
    import torch.cuda.gds  # torch 2.5 on (gdsio takes 2.1): only where _torch_gds_unusable found it

    mode = gds.cufile_state(_device_index(cfg)).get("mode") or "unknown mode"
    f = torch.cuda.gds.GdsFile(path, os.O_RDONLY)  # registers the handle: fails early where cuFile can't

    def run() -> dict[str, Any]:
        out = torch.empty(size, dtype=torch.uint8, device=cfg.device)
        f.load_storage(out.untyped_storage(), 0)
        sync_device(cfg)
        return {"backend": "torch-gds", "direct_io": True,
                "reason": f"torch does not say cuFile's mode; gdsio sees cuFile here in: {mode}"}

    run.keepalive = f  # type: ignore[attr-defined]  # the handle lives as long as the runner
    return run


def _prep_numpy(path: str, size: int, cfg: BenchConfig) -> Runner:
    def run() -> dict[str, Any]:
        np.fromfile(path, dtype=np.uint8, count=size)
        return {"backend": "numpy", "reason": "", "direct_io": False}

    return run


def _dd_unusable(cfg: BenchConfig) -> str | None:
    return None if shutil.which("dd") else "dd is not on PATH"


def _prep_dd_direct(path: str, size: int, cfg: BenchConfig) -> Runner:
    probe = filesystems.o_direct_probe(path)
    if not probe["ok"]:  # raised here, the path is reported skipped, not failed
        raise OSError(22, f"O_DIRECT does not work here: {probe.get('reason') or probe}", path)

    bs = 4 << 20
    cmd = ["dd", f"if={path}", "of=/dev/null", "iflag=direct", f"bs={bs}", f"count={-(-size // bs)}"]

    def run() -> dict[str, Any]:
        # The O_DIRECT peer of the figure; includes dd's start (~1 ms).
        subprocess.run(cmd, check=True, capture_output=True)
        return {"backend": "dd", "reason": "", "direct_io": True}

    return run


def _prep_none(path: str, size: int, cfg: BenchConfig) -> Runner:
    raise AssertionError("never prepared: always unavailable")


PATHS: dict[str, CopyPath] = {p.name: p for p in [
    CopyPath("naive", GPU, "np.fromfile -> torch.from_numpy -> .cuda() (pageable copy)", _gpu_only, _prep_naive),
    CopyPath("pinned-sync", GPU, "one pinned buffer: read a chunk, copy, synchronize (KvikIO-like)",
             _gpu_only, _prep_pinned_sync),
    CopyPath("gdsio-pinned", GPU, "gdsio.read(backend='pinned'): staging ring, reads overlap copies",
             _gpu_only, _prep_gdsio("pinned")),
    CopyPath("gdsio-cufile", GPU, "gdsio.File.read_into(backend='cufile'), file registered once: cuFile, "
             "true GDS or its compat mode", _cufile_unusable, _prep_gdsio("cufile", keep_open=True)),
    CopyPath("kvikio", GPU, "kvikio.CuFile.pread into a CUDA tensor", _kvikio_unusable, _prep_kvikio),
    CopyPath("torch-gds", GPU, "torch.cuda.gds.GdsFile.load_storage", _torch_gds_unusable, _prep_torch_gds),
    CopyPath("image-decode", GPU, "gdsio read + GPU decode vs Pillow decode + .cuda()", _image_unusable, _prep_none),
    CopyPath("gdsio-posix", HOST, "gdsio.read(device='cpu'): parallel chunked pread", _host_always,
             _prep_gdsio("posix", "cpu")),
    CopyPath("numpy-fromfile", HOST, "np.fromfile", _host_always, _prep_numpy),
    CopyPath("dd-direct", HOST, "dd iflag=direct bs=4M of=/dev/null (O_DIRECT peer)", _dd_unusable, _prep_dd_direct),
]}


# ----------------------------------------------------------------------------- remote objects

def _prep_remote(device: str | None, concurrency: int | None = None) -> Callable[[str, int, BenchConfig], Runner]:
    """gdsio.read of an s3:// or http(s):// object into `device` (None: the
    GPU of the run); with `concurrency`, under that remote_concurrency. A
    GPU destination with concurrency 1 is the naive peer: one GET at a time
    into host memory, then a pageable copy to the GPU."""

    def prepare(url: str, size: int, cfg: BenchConfig) -> Runner:
        over = {} if concurrency is None else {"remote_concurrency": concurrency}
        to_gpu = device is None
        naive = to_gpu and concurrency == 1

        def run() -> dict[str, Any]:
            with gdsio.settings(**over):
                t, st = gdsio.read(url, size=size, device="cpu" if naive or not to_gpu else cfg.device,
                                   return_stats=True)
            if naive:
                t.to(cfg.device)
            if to_gpu:
                sync_device(cfg)
            info = stats_info(st)
            if concurrency is not None:
                info["reason"] = "; ".join(x for x in (info["reason"], f"remote_concurrency={concurrency}") if x)
            return info

        return run

    return prepare


# The paths of `gdsio bench URL` (an s3:// or http(s):// object): gdsio's remote
# reader, and as peers the same reader one GET at a time (a single-connection client).
REMOTE_PATHS: dict[str, CopyPath] = {p.name: p for p in [
    CopyPath("remote-naive", GPU, "one ranged GET at a time into host memory, then .cuda() (pageable copy)",
             _gpu_only, _prep_remote(None, concurrency=1)),
    CopyPath("gdsio-remote", GPU, "gdsio.read(url, device='cuda'): parallel ranged GETs through pinned staging",
             _gpu_only, _prep_remote(None)),
    CopyPath("remote-serial", HOST, "gdsio.read(url, device='cpu') with remote_concurrency=1: one GET in flight",
             _host_always, _prep_remote("cpu", concurrency=1)),
    CopyPath("gdsio-remote-host", HOST, "gdsio.read(url, device='cpu'): parallel ranged GETs into the buffer",
             _host_always, _prep_remote("cpu")),
]}
