"""The backends of the I/O engine: one record each, in one table.

A record says what a backend reads into (``memory``), from which readers
(``sources``), why it cannot run here (``probe``), how it reads (``run``) and
whether it puts many requests in flight in one call (``batches``). The
backend ``auto`` picks, the order it tries them in, what ``backends()``
lists and what ``backend=`` accepts all come from this table; adding a
backend is one record here.

auto, for GPU memory: ``gds`` where true GPUDirect Storage works for the
file, else ``pinned``; for host memory: ``posix``. Remote objects have their
own: ``s3`` and ``http`` (parallel ranged GETs; into GPU memory through the
pinned backend's staging ring), and ``kvikio-remote`` when asked for
(``backend="kvikio"`` on a URL). Each result says which ran and, when a
faster one was skipped, why.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Sequence

from .. import _core, config
from ..config import Settings
from ..errors import BackendUnavailable
from ..platform import gds, nvidia
from . import kvikio as kvikio_backend
from .buffers import Destination
from .readers import LocalReader, Reader, open_reader
from .remote import RemoteReader, fetch
from .stats import ReadStats, Result, stats_from_core
from .urls import is_url

__all__ = ["BACKENDS", "Backend", "BackendInfo", "ReadJob", "backends", "choose", "run"]


@dataclasses.dataclass(frozen=True)
class ReadJob:
    """Requests ``(dst_offset, size, file_offset)`` of one reader, all into one
    device's memory: into ``dests[0]`` when there is one destination, else
    request i into ``dests[i]``."""

    reader: Reader
    dests: Sequence[Destination]
    requests: Sequence[tuple[int, int, int]]
    settings: Settings
    batch: bool  # read_batch: in flight together where the backend can

    @property
    def dest(self) -> Destination:
        """The first destination (all are on its device)."""
        return self.dests[0]


Probe = Callable[[Reader | None, int], "tuple[str | None, str]"]


@dataclasses.dataclass(frozen=True)
class Backend:
    """One backend of the I/O engine."""

    name: str  # what backend= takes (ReadStats.backend names what ran, e.g. cufile-compat)
    title: str  # how errors name it
    memory: frozenset[str]  # "cuda", "cpu": what it reads into
    sources: frozenset[str]  # reader kinds it reads from
    batches: bool  # many requests in flight in one call (File.read_batch)
    auto: bool  # auto may pick it (in table order)
    summary: str
    # (why it cannot run for this reader (None: no file-specific check) and
    # device, a caveat): (None, "") when it runs as it should.
    probe: Probe
    run: Callable[[ReadJob], Any]  # the core's ReadResult, or a Result with its fields


# ---- how each one reads -----------------------------------------------------------------


def _core_run(engine: Any, batch_engine: Any = None) -> Callable[[ReadJob], Any]:
    """How a local backend reads: one of the core's engines (`batch_engine` for read_batch)."""

    def run(job: ReadJob) -> Any:
        s = job.settings
        assert isinstance(job.reader, LocalReader)
        e = batch_engine if job.batch and batch_engine is not None else engine
        dst = job.dest.array if len(job.dests) == 1 else [d.array for d in job.dests]
        return _core.read(job.reader.core, e, dst, list(job.requests), threads=s.threads, chunk_bytes=s.chunk_bytes,
                          staging_buffers=s.staging_buffers, direct_io=s.direct_io, stream=job.dest.stream)

    return run


def _kvikio_run(job: ReadJob) -> Result:
    (out_offset, size, offset), = job.requests  # batches=False: one request per call
    view = kvikio_backend.uint8_view(job.dest, out_offset, size)
    return kvikio_backend.kvikio_read(job.reader.path, job.dest, view, size, offset, job.settings)


def _remote_run(job: ReadJob) -> Result:
    assert isinstance(job.reader, RemoteReader)
    to_gpu = job.dest.kind == "cuda"
    if to_gpu:
        why = nvidia.cuda_unusable_reason()
        if why:
            raise BackendUnavailable(f"cannot read '{job.reader.path}' into {job.dest.describe()}: {why}")
    return fetch(job.reader, [d.array for d in job.dests], job.requests, to_gpu=to_gpu, device=max(job.dest.device, 0),
                 stream=job.dest.stream, settings=job.settings)


def _kvikio_remote_run(job: ReadJob) -> Result:
    (out_offset, size, offset), = job.requests  # batches=False: one request per call
    assert isinstance(job.reader, RemoteReader)
    view = kvikio_backend.uint8_view(job.dest, out_offset, size)
    return kvikio_backend.kvikio_remote_read(job.reader, job.dest, view, size, offset, job.settings)


# ---- why each one cannot run here ---------------------------------------------------------


def _gds_probe(reader: Reader | None, device: int) -> tuple[str | None, str]:
    why = nvidia.cuda_unusable_reason() or gds.gds_impossible_reason()  # decided without opening cuFile
    if why:
        return why, ""
    st = gds.cufile_state(device)
    if not st["driver_open"]:
        return st["reason"], ""
    if not st["true_gds"]:
        return st["reason"] + "; cuFile runs in its compat mode here (backend 'cufile' runs it anyway)", ""
    if isinstance(reader, LocalReader):
        try:
            reader.register_cufile(device)
        except BackendUnavailable as e:
            return str(e), ""
        refusal = reader.direct_io_refusal()
        if refusal:  # without O_DIRECT cuFile would serve this file in its compat mode
            return f"O_DIRECT is refused for this file ({refusal}), so cuFile would run in its compat mode", ""
    return None, ""


def _cufile_probe(reader: Reader | None, device: int) -> tuple[str | None, str]:
    why = nvidia.cuda_unusable_reason()
    if why:
        return why, ""
    st = gds.cufile_state(device)
    if not st["driver_open"]:
        return st["reason"], ""
    return None, "true GDS" if st["true_gds"] else "compat mode: " + st["reason"]


def _kvikio_probe(reader: Reader | None, device: int) -> tuple[str | None, str]:
    return kvikio_backend.kvikio_unusable_reason(), ""


def _pinned_probe(reader: Reader | None, device: int) -> tuple[str | None, str]:
    return nvidia.cuda_unusable_reason(), ""


def _posix_probe(reader: Reader | None, device: int) -> tuple[str | None, str]:
    refusal = reader.direct_io_refusal() if isinstance(reader, LocalReader) else ""
    return None, f"{refusal}; buffered reads are used when O_DIRECT is asked" if refusal else ""


def _http_probe(reader: Reader | None, device: int) -> tuple[str | None, str]:
    why = nvidia.cuda_unusable_reason()  # GPU destinations go through the pinned staging ring
    return None, f"host memory only here: {why}" if why else ""


def _s3_probe(reader: Reader | None, device: int) -> tuple[str | None, str]:
    import importlib.util

    if importlib.util.find_spec("botocore") is None:
        return "botocore is not installed (pip install 'gdsio[s3]')", ""
    return _http_probe(reader, device)


_CUDA, _CPU, _LOCAL = frozenset({"cuda"}), frozenset({"cpu"}), frozenset({"local"})
_S3, _HTTP = frozenset({"s3"}), frozenset({"http"})

#: The table, in auto's order of preference.
BACKENDS: dict[str, Backend] = {b.name: b for b in [
    Backend("gds", "true GPUDirect Storage", _CUDA, _LOCAL, batches=True, auto=True,
            summary="cuFile with true GDS (nvidia-fs or PCI P2PDMA): DMA from NVMe to GPU memory",
            probe=_gds_probe, run=_core_run(_core.Engine.cufile, _core.Engine.cufile_batch)),
    Backend("cufile", "cuFile", _CUDA, _LOCAL, batches=True, auto=False,
            summary="cuFile whatever its mode; what ran is reported as gds or cufile-compat",
            probe=_cufile_probe, run=_core_run(_core.Engine.cufile, _core.Engine.cufile_batch)),
    Backend("kvikio", "kvikio", _CUDA | _CPU, _LOCAL, batches=False, auto=False,
            summary="the kvikio package (pip install 'gdsio[kvikio]')", probe=_kvikio_probe, run=_kvikio_run),
    Backend("pinned", "the pinned pipeline", _CUDA, _LOCAL, batches=True, auto=True,
            summary="gdsio's pipeline: disk reads into pinned staging buffers overlap the async copies out of them",
            probe=_pinned_probe, run=_core_run(_core.Engine.pinned)),
    Backend("posix", "posix", _CPU, _LOCAL, batches=True, auto=True,
            summary="chunked pread over a thread pool; O_DIRECT on request", probe=_posix_probe,
            run=_core_run(_core.Engine.posix)),
    Backend("s3", "s3", _CUDA | _CPU, _S3, batches=True, auto=True,
            summary="s3:// objects: parallel signed ranged GETs (botocore: pip install 'gdsio[s3]'), received "
                    "straight into host memory or into pinned staging slots whose GPU copies overlap the next GETs",
            probe=_s3_probe, run=_remote_run),
    Backend("http", "http", _CUDA | _CPU, _HTTP, batches=True, auto=True,
            summary="http(s):// objects: parallel ranged GETs, as s3 without the signing",
            probe=_http_probe, run=_remote_run),
    Backend("kvikio-remote", "kvikio's RemoteFile", _CUDA | _CPU, _S3 | _HTTP, batches=False, auto=False,
            summary="kvikio.RemoteFile (pip install 'gdsio[kvikio]'); backend='kvikio' on a URL runs it",
            probe=_kvikio_probe, run=_kvikio_remote_run),
]}

# The settings' vocabulary (gdsio.config sits below this package) must be this table's.
assert set(config.BACKENDS) == {"auto", *BACKENDS}, (config.BACKENDS, list(BACKENDS))


def _where(memory: frozenset[str]) -> str:
    return "/".join(w for k, w in (("cuda", "GPU memory"), ("cpu", "host memory")) if k in memory)


def check_name(backend: Any) -> str:
    """`backend` when it names a backend (or "auto"); else ValueError listing them."""
    if not isinstance(backend, str) or backend not in config.BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(config.BACKENDS)}; got {backend!r}")
    return backend


def choose(name: str, reader: Reader, dest: Destination) -> tuple[Backend, str]:
    """(the backend to run, why faster ones were skipped) for one destination.

    Raises:
        ValueError: a backend that does not read into the destination's memory.
        BackendUnavailable: a backend asked for by name that cannot run here.
    """
    device = max(dest.device, 0)
    if name == "auto":
        skipped = []
        for b in BACKENDS.values():
            if b.auto and dest.kind in b.memory and reader.kind in b.sources:
                why, _ = b.probe(reader, device)
                if why is None:
                    return b, "; ".join(skipped)
                skipped.append(f"{b.name} skipped: {why}")
        raise BackendUnavailable(f"no backend can read '{reader.path}' into {dest.describe()}: " + "; ".join(skipped))
    if name == "kvikio" and reader.kind != "local":
        name = "kvikio-remote"  # kvikio's own remote reader (kvikio.RemoteFile)
    b = BACKENDS[name]
    if dest.kind not in b.memory:
        fits = [x.name for x in BACKENDS.values() if dest.kind in x.memory]
        raise ValueError(f"backend {name!r} reads into {_where(b.memory)}, but the destination is {dest.describe()}; "
                         f"use 'auto' or one of {', '.join(repr(x) for x in fits)}")
    if reader.kind not in b.sources:
        fits = [x.name for x in BACKENDS.values() if reader.kind in x.sources and dest.kind in x.memory]
        raise ValueError(f"backend {name!r} does not read {reader.kind} sources ('{reader.path}'); "
                         f"use 'auto' or one of {', '.join(repr(x) for x in fits)}")
    why, _ = b.probe(reader, device)
    if why:
        raise BackendUnavailable(f"{b.title} is not available: {why}")
    return b, ""


def run(name: str, reader: Reader, dests: Sequence[Destination], requests: Sequence[tuple[int, int, int]],
        settings: Settings, *, batch: bool = False) -> ReadStats:
    """Runs requests ``(dst_offset, size, file_offset)`` (all into one
    device's memory: into ``dests[0]`` when there is one destination, else
    request i into ``dests[i]``) on the backend `name` (or auto's pick)."""
    places = {(d.kind, d.device) for d in dests}
    if len(places) > 1:
        raise ValueError(f"a batch must read into one device; got {sorted(d.describe() for d in dests)}")
    dest = dests[0]
    b, reason = choose(name, reader, dest)
    if len(requests) > 1 and not b.batches:
        raise ValueError(f"the {b.name} backend reads one request at a time; use File.pread per request")
    d = b.run(ReadJob(reader, dests, requests, settings, batch))
    return stats_from_core(d, reader.path, dest.describe(), reason)


@dataclasses.dataclass(frozen=True)
class BackendInfo:
    """One row of ``gdsio.backends()``."""

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
        list[BackendInfo]: one per backend (``gds``, ``cufile``, ``kvikio``,
        ``pinned``, ``posix``, then the remote ones ``s3``, ``http``,
        ``kvikio-remote``, in auto's order of preference), each with
        ``name``, ``destination`` ("gpu", "host" or "gpu/host"), ``usable``
        and ``reason`` (why not, or a caveat such as compat mode).

    Example:
        >>> [(b.name, b.usable) for b in gdsio.backends()]
        [('gds', False), ('cufile', False), ('kvikio', False), ('pinned', False), ('posix', True), ('s3', True),
         ('http', True), ('kvikio-remote', False)]
    """
    reader = open_reader(path) if path is not None and not is_url(path) and os.path.isfile(path) else None
    try:
        out = []
        for b in BACKENDS.values():
            why, caveat = b.probe(reader, device)
            where = "/".join(w for k, w in (("cuda", "gpu"), ("cpu", "host")) if k in b.memory)
            out.append(BackendInfo(b.name, where, why is None, why or caveat))
        return out
    finally:
        if reader is not None:
            reader.close()


def auto_choice(infos: list[BackendInfo]) -> dict[str, str]:
    """What auto picks for GPU and host memory for local files, from a ``backends()`` list."""
    usable = {b.name for b in infos if b.usable}
    pick = {}
    for kind, key in (("cuda", "gpu"), ("cpu", "host")):
        names = [b.name for b in BACKENDS.values()
                 if b.auto and kind in b.memory and "local" in b.sources and b.name in usable]
        pick[key] = names[0] if names else "unavailable"
    return pick
