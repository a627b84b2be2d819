"""``gdsio bench``: every way of getting a file into memory, timed side by side.

One run measures, on the same files: the copy paths below, and the ceilings
they are judged against (pinned host-to-device copy, O_DIRECT disk read,
page-cache read, device-to-device copy). A path that cannot run here is listed
as skipped with the reason; nothing is estimated or filled in.

>>> from gdsio.tools import bench
>>> gen = bench.generate_files(bench.parse_sizes("64M"))                 # doctest: +SKIP
>>> doc = bench.run_bench(gen.files, bench.BenchConfig(repeat=3))         # doctest: +SKIP
>>> print(bench.render_text(doc)); gen.tmpdir.cleanup()                   # doctest: +SKIP

What each timed call does: a GPU path ends with a new CUDA tensor holding the
file (allocated through torch's caching allocator, as a user's call would); a
host path ends with a new host array. Staging buffers a library keeps between
calls (gdsio's pinned ring, KvikIO's bounce buffer, the pinned buffer of
``pinned-sync``) are made in an untimed warm-up call.

The ceiling beside each figure is the slower of the storage ceiling (page cache
when warm, O_DIRECT disk when cold or when the path itself used O_DIRECT) and,
for GPU paths, the pinned host-to-device copy.
"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import os
import re
import shlex
import statistics
import subprocess
import tempfile
import time
from typing import Any

import numpy as np
import torch

import gdsio

from ...io import s3
from ...io.urls import display, is_url, redact, scheme_of, split_s3
from ...platform import filesystems, machine, pagecache
from .paths import (GPU, HOST, PATHS, REMOTE_PATHS, BenchConfig, CopyPath, Runner, gpu_unusable_reason, stats_info,
                    sync_device)
from .report import CEILINGS, format_bytes, format_row, print_report, render_markdown, render_text, write_plot
from ...config import current, parse_bytes

__all__ = [
    "CEILINGS",
    "GPU",
    "HOST",
    "PATHS",
    "REMOTE_PATHS",
    "BenchConfig",
    "BenchFile",
    "CopyPath",
    "files_from_path",
    "format_bytes",
    "format_row",
    "generate_files",
    "gpu_unusable_reason",
    "parse_sizes",
    "print_report",
    "render_markdown",
    "render_text",
    "run_bench",
    "select_paths",
    "shown",
    "write_plot",
]

PEER = {GPU: "naive", HOST: "numpy-fromfile"}  # what each row's ratio is taken against
REMOTE_PEER = {GPU: "remote-naive", HOST: "remote-serial"}  # the same, for s3:// and http(s):// objects


@dataclasses.dataclass(frozen=True)
class BenchFile:
    path: str
    size: int
    generated: bool = False


# ----------------------------------------------------------------------------- timing

def _cache_before(path: str, cold: bool, cache: dict[str, Any]) -> None:
    """Evicts (cold) and records the resident fraction (mincore) just before a timed call."""
    if cold:
        cache["evicted"] = pagecache.evict(path) and cache.get("evicted", True)
    frac = pagecache.resident_fraction(path)
    if frac is None:
        cache["resident_unknown"] = True
    else:
        cache["resident_min"] = min(frac, cache.get("resident_min", frac))
        cache["resident_max"] = max(frac, cache.get("resident_max", frac))


def _cache_note(cache: dict[str, Any], direct_io: bool) -> str:
    if cache["mode"] == "cold":
        if not cache.get("evicted", False):
            worst = cache.get("resident_max")
            left = f" ({worst:.0%} of it stayed)" if worst is not None else ""
            return (f"eviction did NOT work{left}: the file stayed in the page cache (tmpfs, or mapped "
                    "elsewhere?), so these are not cold-cache figures")
        return ""
    if direct_io:
        return "read with O_DIRECT: the page cache is bypassed even in warm mode"
    if cache.get("resident_min", 1.0) < 0.99:
        return f"only {cache['resident_min']:.0%} of the file was in the page cache (larger than free memory?)"
    return ""


def _calls_per_sample(size: int, cold: bool) -> int:
    # A small file reads in microseconds: one sample averages several calls,
    # each timed alone so that eviction (cold mode) stays outside the timing.
    return max(1, min(8 if cold else 64, (64 << 20) // max(size, 1)))


def _time(run: Runner, path: str, cfg: BenchConfig, size: int,
          cold: bool | None = None) -> tuple[list[float], dict[str, Any], dict[str, Any]]:
    """(mean seconds per call of each sample, what the last call reported, page-cache record)."""
    cold = cfg.cold if cold is None else cold
    info = run()  # warm-up: loads libraries, allocates staging buffers, fills the page cache
    remote = is_url(path)  # the server's caches are its own: nothing to evict or count here
    cache: dict[str, Any] = {"mode": "remote" if remote else "cold" if cold else "warm",
                             "calls_per_sample": _calls_per_sample(size, cold)}
    secs = []
    for _ in range(cfg.repeat):
        total = 0.0
        for _ in range(cache["calls_per_sample"]):
            if not remote:
                _cache_before(path, cold, cache)
            t0 = time.perf_counter()
            info = run()
            total += time.perf_counter() - t0
        secs.append(total / cache["calls_per_sample"])
    return secs, info, cache


def _gbps(nbytes: int, secs: list[float]) -> list[float]:
    return [nbytes / s / 1e9 if s > 0 else float("inf") for s in secs]


def _inner_loops(size: int) -> int:
    # Small copies take microseconds: time several per event pair.
    return max(1, min(100, (64 << 20) // max(size, 1)))


def _event_ceiling(name: str, size: int, cfg: BenchConfig) -> dict[str, Any]:
    if name == "h2d-pinned":
        src = torch.empty(size, dtype=torch.uint8, pin_memory=True).fill_(7)
        how, factor = "pinned host tensor .to(cuda, non_blocking=True), CUDA events", 1
    else:
        src = torch.empty(size, dtype=torch.uint8, device=cfg.device).fill_(7)
        how, factor = "device-to-device copy_, CUDA events; bytes read + written", 2
    dst = torch.empty(size, dtype=torch.uint8, device=cfg.device)
    k = _inner_loops(size)
    samples = []
    with torch.cuda.device(dst.device):  # events and copies on the current stream of that device
        dst.copy_(src, non_blocking=True)
        sync_device(cfg)
        for _ in range(cfg.repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(k):
                dst.copy_(src, non_blocking=True)
            end.record()
            end.synchronize()
            samples.append(factor * size * k / (start.elapsed_time(end) / 1e3) / 1e9)
    return {"status": "ok", "samples_gbps": samples, "how": how + f", {k} copies per event pair"}


def _host_buffer(size: int) -> Any:
    """A touched (no page faults timed), page-aligned host tensor of `size` rounded up to 4 KiB."""
    padded = -(-size // 4096) * 4096
    raw = torch.empty(padded + 4096, dtype=torch.uint8).fill_(0)
    skip = (-raw.data_ptr()) % 4096
    return raw[skip : skip + padded]


def _plain_pread(path: str, buf: Any, size: int, direct: bool) -> Runner:
    """One thread, one pread loop: the floor any reader of the page cache or disk can reach."""
    view = memoryview(buf.numpy())
    flags = os.O_RDONLY | os.O_CLOEXEC | (getattr(os, "O_DIRECT", 0) if direct else 0)
    want = len(view) if direct else size  # O_DIRECT lengths stay 4 KiB multiples; EOF ends it short

    def run() -> dict[str, Any]:
        fd = os.open(path, flags)
        try:
            got = 0
            while got < size:
                k = os.preadv(fd, [view[got:want]], got)
                if k <= 0:
                    raise OSError(5, f"short read at offset {got}", path)
                got += k
        finally:
            os.close(fd)
        return {"backend": "pread", "reason": "", "direct_io": direct}

    return run


def _storage_ceiling(name: str, path: str, size: int, cfg: BenchConfig) -> dict[str, Any]:
    """The better of gdsio's posix reader and a plain one-thread pread loop, into a reused buffer."""
    direct = name == "o-direct-disk"
    if direct:
        fs = filesystems.filesystem_of(path)["fs_type"]
        if fs in ("tmpfs", "ramfs"):  # O_DIRECT works on tmpfs (Linux 6.6+), but reads memory, not a disk
            return {"status": "skipped", "reason": f"the file is on {fs}: there is no disk to read past the cache"}
    buf = _host_buffer(size)
    with gdsio.settings(direct_io=direct):
        st = gdsio.read_into(path, buf, size=size, backend="posix")
        if direct and not st.direct_io:
            return {"status": "skipped", "reason": st.reason or "O_DIRECT was not used"}

        def gdsio_run() -> dict[str, Any]:
            return stats_info(gdsio.read_into(path, buf, size=size, backend="posix"))

        candidates = {}
        for label, run in ((f"gdsio posix, {current().threads} threads", gdsio_run),
                           ("plain pread loop, 1 thread", _plain_pread(path, buf, size, direct))):
            secs, _, cache = _time(run, path, cfg, size, cold=direct)
            candidates[label] = _gbps(size, secs)
    best = max(candidates, key=lambda k: statistics.median(candidates[k]))
    how = f"the better of ({'; '.join(candidates)}) into a reused host buffer"
    how += ", O_DIRECT, file evicted before each call" if direct else ", file in the page cache"
    return {"status": "ok", "samples_gbps": candidates[best], "how": how, "best": best,
            "candidates": {k: statistics.median(v) for k, v in candidates.items()},
            # O_DIRECT bypasses the page cache (tmpfs, where it would not, is skipped above).
            "reason": "" if direct else _cache_note(cache, False)}


def _measure_ceiling(name: str, f: BenchFile, cfg: BenchConfig) -> dict[str, Any]:
    row: dict[str, Any] = {"name": name, "size": f.size, "file": shown(f.path), "status": "ok",
                           "gbps": None, "samples_gbps": [], "reason": "", "how": ""}
    try:
        if is_url(f.path) and name not in ("h2d-pinned", "d2d-copy"):
            return {**row, "status": "skipped", "reason": "a remote object: no local storage to measure"}
        if name in ("h2d-pinned", "d2d-copy"):
            why = gpu_unusable_reason()
            if why:
                return {**row, "status": "skipped", "reason": why}
            row.update(_event_ceiling(name, f.size, cfg))
        else:
            row.update(_storage_ceiling(name, f.path, f.size, cfg))
    except Exception as e:  # a ceiling that fails is reported, the run goes on
        return {**row, "status": "failed", "reason": f"{type(e).__name__}: {e}"}
    if row["samples_gbps"]:
        row["gbps"] = statistics.median(row["samples_gbps"])
    return row


def _measure_path(p: CopyPath, f: BenchFile, cfg: BenchConfig) -> dict[str, Any]:
    row: dict[str, Any] = {"path": p.name, "destination": p.destination, "size": f.size, "file": shown(f.path),
                           "status": "ok", "gbps": None, "samples_gbps": [], "seconds": [],
                           "backend": None, "direct_io": None, "reason": "", "cache": None}
    try:
        run = p.prepare(f.path, f.size, cfg)
    except Exception as e:  # could not start here (cuFile registration refused, ...)
        return {**row, "status": "skipped", "reason": f"could not start: {type(e).__name__}: {e}"}
    try:
        secs, info, cache = _time(run, f.path, cfg, f.size)
    except Exception as e:
        return {**row, "status": "failed", "reason": f"{type(e).__name__}: {e}"}
    finally:
        del run
    notes = [n for n in (info.get("reason", ""), _cache_note(cache, bool(info.get("direct_io")))) if n]
    row.update(seconds=secs, samples_gbps=_gbps(f.size, secs), gbps=statistics.median(_gbps(f.size, secs)),
               backend=info.get("backend"), direct_io=bool(info.get("direct_io")), reason="; ".join(notes),
               cache=cache)
    return row


def _annotate(doc: dict[str, Any]) -> None:
    """Adds to each measured row its ceiling, fraction of it, and ratio to its peer."""
    cold = doc["config"]["mode"] == "cold"
    peers = REMOTE_PEER if doc["config"].get("source") == "url" else PEER
    ceil = {(c["name"], c["size"]): c for c in doc["ceilings"] if c["status"] == "ok"}
    peer = {(r["path"], r["size"]): r for r in doc["results"] if r["status"] == "ok"}
    for r in doc["results"]:
        r.update(ceiling=None, fraction_of_ceiling=None, ratio=None, ratio_to=peers[r["destination"]])
        if r["status"] != "ok":
            continue
        storage = "o-direct-disk" if (cold or r["direct_io"]) else "page-cache"
        names = [storage] + (["h2d-pinned"] if r["destination"] == GPU else [])
        found = [ceil[(n, r["size"])] for n in names if (n, r["size"]) in ceil]
        if found:
            c = min(found, key=lambda c: c["gbps"])
            r["ceiling"] = {"name": c["name"], "gbps": c["gbps"], "of": names}
            r["fraction_of_ceiling"] = r["gbps"] / c["gbps"] if c["gbps"] else None
        base = peer.get((r["ratio_to"], r["size"]))
        if base and base["gbps"]:
            r["ratio"] = r["gbps"] / base["gbps"]


# ----------------------------------------------------------------------------- files

_SIZE_ITEM = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)(?:i?[bB])?\s*")


def parse_sizes(text: str) -> list[int]:
    """'1M,64M,1G' -> byte counts (K, M, G are powers of 1024).

    >>> parse_sizes("1M,64M,1.5G")
    [1048576, 67108864, 1610612736]
    """
    out = []
    for item in text.split(","):
        m = _SIZE_ITEM.fullmatch(item)
        if not m:
            raise ValueError(f"--sizes: not a size: {item!r} (examples: 1M,64M,1G)")
        n = int(float(m.group(1)) * parse_bytes("1" + m.group(2)))
        if n <= 0:
            raise ValueError(f"--sizes: sizes must be positive, got {item!r}")
        out.append(n)
    return out


def write_file(path: str, size: int, seed: int = 0) -> None:
    """Writes `size` random bytes (random: no file system can compress or skip them)."""
    rng = np.random.default_rng(seed)
    block = 64 << 20
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(block, left)
            f.write(rng.bytes(n))
            left -= n
        f.flush()
        os.fsync(f.fileno())  # written back, so eviction can drop the pages


def shown(path: str) -> str:
    """`path` as reports show it: a URL without user information or query (a presigned URL's signature)."""
    return display(path) if is_url(path) else path


def _objects_from_url(url: str) -> list[BenchFile]:
    """An http(s):// object (one HEAD: its size, or the server's refusal), or
    an s3:// object or the non-empty objects directly under an s3:// prefix
    (one listing: a missing bucket is named as such)."""
    if scheme_of(url) != "s3":
        with gdsio.File(url) as f:
            size = f.size()
        if size == 0:
            raise ValueError(f"'{display(url)}' is empty: nothing to read")
        return [BenchFile(url, size)]
    bucket, key = split_s3(url)
    listed = list(s3.list_objects(bucket, key))
    exact = [n for k, n in listed if k == key and key and not key.endswith("/")]
    if exact:
        if exact[0] == 0:
            raise ValueError(f"'{url}' is empty: nothing to read")
        return [BenchFile(url, exact[0])]
    prefix = key if not key or key.endswith("/") else key + "/"
    found = [BenchFile(f"s3://{bucket}/{k}", n) for k, n in listed
             if k.startswith(prefix) and "/" not in k[len(prefix):] and n > 0]
    if not found:
        raise FileNotFoundError(errno.ENOENT, "no such object, nor non-empty objects directly under it as a prefix",
                                url)
    return sorted(found, key=lambda f: f.size)


def files_from_path(path: str) -> list[BenchFile]:
    """A file, or the non-empty regular files directly inside a directory,
    smallest first; an s3:// or http(s):// URL: the object, or the non-empty
    objects directly under an s3:// prefix. What the library raises for a
    URL (FileNotFoundError for a 404 or a missing bucket, OSError for a refused
    connection, ...) reaches the caller as it is."""
    if is_url(path):
        return _objects_from_url(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file or directory: '{path}'")
    if os.path.isfile(path):
        size = os.path.getsize(path)
        if size == 0:
            raise ValueError(f"'{path}' is empty: nothing to read")
        return [BenchFile(os.path.abspath(path), size)]
    found = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        if entry.is_file(follow_symlinks=True) and entry.stat().st_size > 0:
            found.append(BenchFile(os.path.abspath(entry.path), entry.stat().st_size))
    if not found:
        raise ValueError(f"'{path}' holds no non-empty regular files to read")
    return sorted(found, key=lambda f: f.size)


@dataclasses.dataclass
class _Generated:
    files: list[BenchFile]
    tmpdir: tempfile.TemporaryDirectory[str]


def generate_files(sizes: list[int], where: str | None = None) -> _Generated:
    """Random files of the given sizes in a new temporary directory (the caller cleans it up)."""
    tmp = tempfile.TemporaryDirectory(prefix="gdsio-bench-", dir=where)
    files = []
    for i, size in enumerate(sorted(set(sizes))):
        p = os.path.join(tmp.name, f"bench-{size}.bin")
        write_file(p, size, seed=i)
        files.append(BenchFile(p, size, generated=True))
    return _Generated(files, tmp)


# ----------------------------------------------------------------------------- the run

def git_commit() -> dict[str, Any]:
    """The commit of the gdsio source tree in use (GDSIO_COMMIT overrides, for copies without .git)."""
    if os.environ.get("GDSIO_COMMIT"):
        return {"commit": os.environ["GDSIO_COMMIT"], "dirty": None, "how": "GDSIO_COMMIT"}
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        sha = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None, "how": "not a git checkout"}
    return {"commit": sha, "dirty": bool(dirty), "how": "git"}


def select_paths(names: tuple[str, ...], remote: bool, cold: bool = False) -> list[CopyPath]:
    """The copy paths named (all when none are) of the table for local files
    (PATHS) or for s3:// and http(s):// objects (REMOTE_PATHS); ValueError
    naming those of the other table, or for a cold run of remote objects."""
    if remote and cold:
        raise ValueError("--cold evicts local files from the page cache; a remote object's caches are its server's")
    table = REMOTE_PATHS if remote else PATHS
    wrong = [n for n in names if n not in table]
    if wrong:
        kind = "s3:// and http(s):// objects" if remote else "local files"
        raise ValueError(f"--paths: {', '.join(wrong)} do not read {kind}; those that do: {', '.join(table)}")
    return [table[n] for n in (names or tuple(table))]


def run_bench(files: list[BenchFile], cfg: BenchConfig | None = None, *,
              command: list[str] | None = None, machine_path: str | None = None,
              on_progress: Any = None, on_row: Any = None) -> dict[str, Any]:
    """Measures every selected path and the ceilings on each file; a JSON-ready dict.
    After each measurement ``on_row(row, done, total)`` gets the row just
    measured (the CLI prints it: ``format_row``), then ``on_progress(doc)``
    the document so far (the CLI writes --json then, so a run cut short keeps
    its rows). Ceilings are measured first, so a path's row has its ceiling.

    >>> doc = run_bench([BenchFile("shard.bin", os.path.getsize("shard.bin"))])  # doctest: +SKIP
    >>> [(r["path"], r["gbps"]) for r in doc["results"]]                           # doctest: +SKIP
    """
    cfg = cfg or BenchConfig()
    remote = any(is_url(f.path) for f in files)
    if remote and not all(is_url(f.path) for f in files):
        raise ValueError("files: all local or all s3:// and http(s):// objects, not both")
    selected = select_paths(cfg.paths, remote, cfg.cold)
    commit = git_commit()
    if command is not None:
        command = [redact(a, a) if is_url(a) else a for a in command]
    doc: dict[str, Any] = {
        "schema": "gdsio-bench/1",
        "gdsio": gdsio.__version__,
        "git_commit": commit["commit"],
        "git_dirty": commit["dirty"],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(command) if command is not None else None,
        "config": {"mode": "cold" if cfg.cold else "warm", "repeat": cfg.repeat, "device": cfg.device,
                   "paths": [p.name for p in selected], "settings": None, "source": "url" if remote else "file"},
        "machine": machine.describe_machine(None if remote else machine_path or (files[0].path if files else None)),
        "files": [{**dataclasses.asdict(f), "path": shown(f.path)} for f in files],
        "paths": {p.name: {"destination": p.destination, "what": p.what} for p in selected},
        "ceilings": [],
        "results": [],
        "skipped": [],
    }
    with gdsio.settings(**cfg.overrides()) as s:
        doc["config"]["settings"] = dataclasses.asdict(s)
        usable = []
        for p in selected:
            try:
                why = p.unavailable(cfg)
            except Exception as e:  # a probe that breaks (a kvikio import, ...) skips its path, not the run
                why = f"its availability check failed: {type(e).__name__}: {e}"
            if why:
                doc["skipped"].append({"path": p.name, "destination": p.destination, "what": p.what, "reason": why})
            else:
                usable.append(p)
        usable.sort(key=lambda p: p.name not in (REMOTE_PEER if remote else PEER).values())  # peers first: each row printed has its ratio
        steps = [(f, c) for f in files for c in CEILINGS] + [(f, p) for f in files for p in usable]
        for done, (f, item) in enumerate(steps, start=1):
            if isinstance(item, str):
                row = _measure_ceiling(item, f, cfg)
                doc["ceilings"].append(row)
            else:
                row = _measure_path(item, f, cfg)
                doc["results"].append(row)
            if on_row is not None or on_progress is not None:
                _annotate(doc)
            if on_row is not None:
                on_row(row, done, len(steps))
            if on_progress is not None:
                on_progress(doc)
    _annotate(doc)
    return doc
