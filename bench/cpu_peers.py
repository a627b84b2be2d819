"""gdsio's CPU data path against the libraries a user would pick instead, side
by side in one run (issue 13's table): JPEG decode at 1 and 2 threads, resize
to 224x224 with antialias, small files, safetensors and npy.

Every row runs its contestants in interleaved rounds (round r times each of
them once, so all see the same load) and reports medians; ``ratio`` is gdsio's
time over the peer's (below 1: gdsio is faster; ``speed`` is its inverse).
The machine, the commit, the command and the load average before and after
each row go into the JSON and markdown written under ``--out-dir``.
Peers that are not installed are skipped, and the report says so.

    python bench/cpu_peers.py                       # the issue's sizes (minutes)
    python bench/cpu_peers.py --smoke --out-dir /tmp/x   # tiny sizes (the test)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import io
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np
import torch

import gdsio
import gdsio.transforms as T
from gdsio import _core

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench/photos.py, also under python -P
from photos import jpegs, sources  # noqa: E402

PEERS = ("simplejpeg", "turbojpeg", "cv2", "safetensors")


# ---- the machine -----------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "simd": gdsio._core.tf_cpu_simd(),
        "platform": platform.platform(),
        "gdsio_from": os.path.dirname(gdsio.__file__),  # the checkout (PYTHONPATH) or an installed copy
    }


def commit() -> str:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        sha = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name, mod in (("pillow", "PIL"), ("simplejpeg", "simplejpeg"), ("turbojpeg", "turbojpeg"),
                      ("opencv", "cv2"), ("safetensors", "safetensors")):
        try:
            out[name] = getattr(__import__(mod), "__version__", "?")
        except Exception:
            out[name] = None
    return out


# ---- timing ----------------------------------------------------------------------------------------
def interleaved(fns: dict[str, Callable[[], Any]], rounds: int, per_call: int = 1) -> dict[str, float]:
    """Median seconds of one call of each, over `rounds` interleaved rounds
    (each round times `per_call` calls of every contestant, after a warm-up)."""
    for f in fns.values():
        f()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t0 = time.perf_counter()
            for _ in range(per_call):
                f()
            times[k].append((time.perf_counter() - t0) / per_call)
    return {k: statistics.median(v) for k, v in times.items()}


class Report:
    def __init__(self, args: argparse.Namespace, skip: set[str]) -> None:
        self.rows: list[dict[str, Any]] = []
        self.skip = skip
        self.notes: list[str] = []

    def peer(self, module: str) -> Any:
        """The peer module, or None (and a note) when absent or skipped."""
        if module in self.skip or "all" in self.skip:
            self.note(f"{module}: skipped (--skip-peers)")
            return None
        try:
            return __import__(module)
        except Exception as e:  # ImportError, or a peer that fails to load its library
            self.note(f"{module}: not available ({type(e).__name__}: {e})")
            return None

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
            print("note:", text, flush=True)

    def row(self, name: str, unit: str, work: float, fns: dict[str, Callable[[], Any]], rounds: int,
            gdsio_key: str, peer_keys: list[str], per_call: int = 1, note: str = "") -> None:
        """Times the contestants; `work` items per call give the throughput in `unit`."""
        before = load()
        med = interleaved(fns, rounds, per_call)
        after = load()
        g = med[gdsio_key]
        peers = {k: med[k] for k in peer_keys if k in med}
        best = min(peers, key=peers.get) if peers else None
        row = {
            "workload": name, "unit": unit, "gdsio": gdsio_key, "median_s": med,
            "throughput": {k: work / v for k, v in med.items()},
            "best_peer": best, "ratio_vs_best": g / peers[best] if best else None,
            "ratios": {k: g / v for k, v in peers.items()},
            "load_before": before, "load_after": after, "rounds": rounds, "note": note,
        }
        self.rows.append(row)
        tp = ", ".join(f"{k} {work / v:.4g}" for k, v in med.items())
        print(f"{name}: {tp} {unit} (load {before:.2f} -> {after:.2f})", flush=True)


# ---- rows --------------------------------------------------------------------------------------------
def jpeg_rows(rep: Report, a: argparse.Namespace) -> None:
    from PIL import Image

    blobs = jpegs(a.images, size=(1000, 700))
    tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
    sj, tj, cv2 = rep.peer("simplejpeg"), rep.peer("turbojpeg"), rep.peer("cv2")

    def pil_one(b: bytes) -> Any:
        with Image.open(io.BytesIO(b)) as im:
            return np.asarray(im.convert("RGB"))

    def gd(threads: int) -> Callable[[], Any]:
        def run() -> Any:
            with gdsio.settings(threads=threads):
                return gdsio.image.decode(tensors, device="cpu")
        return run

    fns: dict[str, Callable[[], Any]] = {"gdsio": gd(1), "pillow": lambda: [pil_one(b) for b in blobs]}
    if sj:
        fns["simplejpeg"] = lambda: [sj.decode_jpeg(b) for b in blobs]
    if tj:
        try:
            dec = tj.TurboJPEG()
            fns["turbojpeg"] = lambda: [dec.decode(b, pixel_format=tj.TJPF_RGB) for b in blobs]
        except Exception as e:
            rep.note(f"turbojpeg: cannot load libturbojpeg ({e})")
    if cv2:
        cv2.setNumThreads(1)
        fns["cv2"] = lambda: [cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_COLOR) for b in blobs]
    _, info = gdsio.image.decode(tensors[0], device="cpu", return_info=True)
    rep.row(f"JPEG decode, {a.images} photos 1000x700 q90, 1 thread", "img/s", a.images, fns, a.rounds, "gdsio",
            [k for k in fns if k != "gdsio"], note=f"gdsio backend: {info.backend}")
    fns2: dict[str, Callable[[], Any]] = {"gdsio": gd(2)}
    if sj:
        pool = concurrent.futures.ThreadPoolExecutor(2)
        fns2["simplejpeg-pool2"] = lambda: list(pool.map(sj.decode_jpeg, blobs))
    pool_pil = concurrent.futures.ThreadPoolExecutor(2)
    fns2["pillow-pool2"] = lambda: list(pool_pil.map(pil_one, blobs))
    rep.row(f"JPEG decode, {a.images} photos, 2 threads", "img/s", a.images, fns2, a.rounds, "gdsio",
            [k for k in fns2 if k != "gdsio"])


def crop_rows(rep: Report, a: argparse.Namespace) -> None:
    """Decode only what the crop keeps: the boxes RandomResizedCrop(224) draws
    (scale 0.08-1) of photos the pipeline's size (500x375), decoded as boxes
    (libjpeg-turbo's skip/crop scanline) against whole decodes (the crop is a
    view then), 1 thread."""
    from gdsio.image import jpeg_cpu
    from gdsio.image.formats.jpeg import parse_jpeg
    from gdsio.transforms.classes import BatchInfo, RandomResizedCrop

    if not _core.jpeg_cpu_available():
        rep.note(f"decode-only-the-crop: not measured ({_core.jpeg_cpu_version()})")
        return
    blobs = jpegs(a.images, size=(500, 375))
    tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
    heads = [parse_jpeg(b, len(b), b[-2:]) for b in blobs]
    draw = RandomResizedCrop(224).decode_boxes(BatchInfo(0, 0, np.arange(len(blobs))))
    boxes = [draw(k, h.height, h.width) for k, h in enumerate(heads)]
    kept = float(np.mean([bh * bw / (h.height * h.width) for (_, _, bh, bw), h in zip(boxes, heads)]))
    sj = rep.peer("simplejpeg")

    def box() -> Any:
        return [jpeg_cpu.decode_box(t, h, "RGB", b) for t, h, b in zip(tensors, heads, boxes)]

    def whole() -> Any:
        with gdsio.settings(threads=1):
            out = gdsio.image.decode(tensors, device="cpu")
        return [x[:, t:t + bh, l:l + bw] for x, (t, l, bh, bw) in zip(out, boxes)]

    assert all(torch.equal(p, q) for p, q in zip(box(), whole()))
    fns: dict[str, Callable[[], Any]] = {"gdsio-box": box, "gdsio-whole": whole}
    if sj:
        fns["simplejpeg-whole"] = lambda: [sj.decode_jpeg(b)[t:t + bh, l:l + bw] for b, (t, l, bh, bw) in zip(blobs, boxes)]
    rep.row(f"JPEG decode of RandomResizedCrop(224)'s boxes, {a.images} photos 500x375, 1 thread", "img/s",
            a.images, fns, a.rounds, "gdsio-box", [k for k in fns if k != "gdsio-box"],
            note=f"boxes keep {kept:.0%} of the pixels on average; {_core.jpeg_cpu_version()}; outputs equal "
                 "the whole decode's crops (checked in the run)")
    med = rep.rows[-1]["median_s"]
    rep.rows[-1]["decode_time_saved"] = 1 - med["gdsio-box"] / med["gdsio-whole"]
    rep.rows[-1]["note"] += f"; decode time saved against gdsio's whole decode: {rep.rows[-1]['decode_time_saved']:.0%}"


def resize_rows(rep: Report, a: argparse.Namespace) -> None:
    from PIL import Image

    torch.set_num_threads(1)
    arr = np.asarray(Image.fromarray(sources()[0]).resize((1000, 700)))
    hwc = torch.from_numpy(arr.copy())
    view = hwc.permute(2, 0, 1)  # what the CPU decoders return
    planes = view.contiguous()
    cl = planes[None].contiguous(memory_format=torch.channels_last)
    pil = Image.fromarray(arr)
    interp = torch.nn.functional.interpolate

    def gd(x: torch.Tensor) -> Callable[[], Any]:
        def run() -> Any:
            with gdsio.settings(threads=1):
                return T.resize(x, [224, 224])
        return run

    def at_level(level: str, fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            best = _core.tf_cpu_simd()
            _core.tf_set_cpu_simd(level)
            try:
                return fn()
            finally:
                _core.tf_set_cpu_simd(best)
        return run

    fns = {
        "gdsio-interleaved-view": gd(view), "gdsio-channels_last": gd(cl), "gdsio-planes": gd(planes),
        "torch-channels_last": lambda: interp(cl, size=(224, 224), mode="bilinear", antialias=True),
        "torch-contiguous": lambda: interp(planes[None], size=(224, 224), mode="bilinear", antialias=True),
        "pillow": lambda: pil.resize((224, 224), Image.Resampling.BILINEAR),
    }
    level = _core.tf_cpu_simd()
    if level == "avx512":  # the same call one level down, in the same rounds
        fns["gdsio-channels_last-avx2"] = at_level("avx2", gd(cl))
    ref = np.asarray(pil.resize((224, 224), Image.Resampling.BILINEAR))
    for name, fn in fns.items():
        if name.startswith("gdsio"):
            out = fn()
            assert np.array_equal((out[0] if out.ndim == 4 else out).permute(1, 2, 0).numpy(), ref), name
    rep.row("resize 700x1000 -> 224x224 bilinear antialias, 1 thread", "img/s", 1, fns, a.rounds,
            "gdsio-channels_last", ["torch-channels_last", "torch-contiguous", "pillow"], per_call=a.resize_calls,
            note=f"every gdsio output is byte-exact with Pillow's (checked in the run), at SIMD level {level}; "
                 "torch's uint8 kernel is not (16-bit weights); torch's CPU capability: "
                 f"{torch.backends.cpu.get_cpu_capability()}")


def file_rows(rep: Report, a: argparse.Namespace, tmp: str) -> None:
    d = os.path.join(tmp, "small")
    os.makedirs(d, exist_ok=True)
    payload = os.urandom(a.file_kib << 10)
    paths = [os.path.join(d, f"{i:06d}.bin") for i in range(a.files)]
    for p in paths:
        with open(p, "wb") as f:
            f.write(payload)
    os.sync()  # written back before timing: the flusher would share the cores with the first row

    def rd(p: str) -> bytes:
        with open(p, "rb") as f:
            return f.read()

    pool = concurrent.futures.ThreadPoolExecutor(8)
    batch = 256
    out = torch.empty(batch * (a.file_kib << 10), dtype=torch.uint8)

    def many() -> Any:
        for i in range(0, len(paths), batch):
            gdsio.read_many(paths[i : i + batch], out=out)

    loader = gdsio.Loader(paths, batch, device="cpu", kind="raw", record_shape=(a.file_kib << 10,),
                          record_dtype=torch.uint8)
    fns = {"gdsio-read_many": many, "tpe8-open-read": lambda: list(pool.map(rd, paths)),
           "open-read-loop": lambda: [rd(p) for p in paths]}
    rep.row(f"{a.files} files of {a.file_kib} KiB, warm: one call for many", "files/s", a.files, fns, a.rounds,
            "gdsio-read_many", ["tpe8-open-read", "open-read-loop"],
            note=f"read_many in calls of {batch} paths into one reused buffer")
    fns = {"gdsio-read-loop": lambda: [gdsio.read(p, device="cpu") for p in paths],
           "open-read-loop": lambda: [rd(p) for p in paths]}
    rep.row(f"{a.files} files of {a.file_kib} KiB, warm: a read each", "files/s", a.files, fns, a.rounds,
            "gdsio-read-loop", ["open-read-loop"])
    # Each batch dropped before the next, as a training loop does (a list of
    # every batch would keep the Loader from reusing its buffers).
    fns = {"gdsio-Loader-raw": lambda: sum(x.shape[0] for x, _ in loader), "gdsio-read_many": many}
    rep.row(f"{a.files} files of {a.file_kib} KiB: Loader(kind='raw'), batch {batch}", "files/s", a.files, fns,
            a.rounds, "gdsio-Loader-raw", ["gdsio-read_many"], note="the peer here is gdsio's own batch call")


def host_rows(rep: Report, a: argparse.Namespace, tmp: str) -> None:
    """Host reads like for like: one reused, page-aligned buffer filled by
    gdsio.read_into and by an unbuffered readinto, warm page cache (the
    README's host-read headline)."""
    from gdsio.io.buffers import host_empty

    for mb in (4, a.host_mb):
        path = os.path.join(tmp, f"host-{mb}.bin")
        with open(path, "wb") as f:
            for _ in range(mb):
                f.write(os.urandom(1 << 20))
        os.sync()
        buf = host_empty(mb << 20, align=4096)  # page-aligned (2 MiB-aligned, huge pages advised, from 8 MiB)
        assert buf.data_ptr() % 4096 == 0
        mv = memoryview(buf.numpy())

        def peer() -> Any:
            with open(path, "rb", buffering=0) as f:
                return f.readinto(mv)

        fns = {"gdsio-read_into": lambda: gdsio.read_into(path, buf), "readinto": peer}
        calls = max(1, 256 // mb)
        rep.row(f"host read {mb} MiB warm into one reused page-aligned buffer", "GB/s", (mb << 20) / 1e9, fns, a.rounds,
                "gdsio-read_into", ["readinto"], per_call=calls,
                note="both fill the same buffer (no allocation, no page faults); readinto: one read() call, "
                     "gdsio: one pread up to a chunk (4 MiB by default), its reader threads in chunks beyond")
        mv.release()
        os.unlink(path)


def touch_pages(tensors: Any) -> int:
    """Reads one byte of every page of every tensor (and each one's last
    byte): what a first use of lazily mapped tensors costs, the same for every
    contestant. Through numpy (a view, no copy): torch's strided sum of
    uint8 costs about 15x numpy's, more than the page faults."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for t in (tensors.values() if isinstance(tensors, dict) else tensors):
        if isinstance(t, torch.Tensor):
            t = t.reshape(-1).view(torch.uint8).numpy()
        u = t.reshape(-1).view(np.uint8)
        if len(u):
            total += int(u[::page].sum()) + int(u[-1])
    return total


def tensor_rows(rep: Report, a: argparse.Namespace, tmp: str) -> None:
    st = rep.peer("safetensors")
    n_tensors = 200
    elems = max(1, (a.safetensors_mb << 20) // 4 // n_tensors)
    if st:
        from safetensors import safe_open
        from safetensors.torch import load_file, save_file

        p = os.path.join(tmp, "model.safetensors")
        g = torch.Generator().manual_seed(0)
        save_file({f"layer{i}.weight": torch.randn(elems, generator=g) for i in range(n_tensors)}, p)

        def so() -> Any:
            with safe_open(p, "pt") as f:
                return {k: f.get_tensor(k).clone() for k in f.keys()}

        def lf_cloned() -> Any:
            d = load_file(p)
            return {k: v.clone() for k, v in d.items()}

        def gd_mapped_touched() -> Any:
            d = gdsio.load_safetensors(p, device="cpu")
            touch_pages(d)
            return d

        def lf_touched() -> Any:
            d = load_file(p)
            touch_pages(d)
            return d

        mapped, st_mapped = gdsio.load_safetensors(p, device="cpu", return_stats=True)
        ref = load_file(p)
        assert st_mapped.backend == "mmap" and all(torch.equal(mapped[k], ref[k]) for k in ref)
        assert touch_pages(mapped) == touch_pages(ref)
        del mapped, ref
        fns = {"gdsio-mapped+touch": gd_mapped_touched, "load_file+touch": lf_touched,
               "safe_open+clone": so, "load_file+clone": lf_cloned,
               "gdsio-copy (mmap=False)": lambda: gdsio.load_safetensors(p, device="cpu", mmap=False),
               "gdsio-mapped (lazy)": lambda: gdsio.load_safetensors(p, device="cpu"),
               "load_file (lazy)": lambda: load_file(p)}
        rep.row(f"safetensors {a.safetensors_mb} MiB, {n_tensors} tensors, warm, every page touched", "loads/s", 1,
                fns, a.rounds, "gdsio-mapped+touch", ["load_file+touch", "safe_open+clone", "load_file+clone"],
                note="gdsio's default on the CPU and safetensors' load_file both return views of a private file "
                     "mapping (pages read on first touch); '+touch' reads one byte of every page of every tensor "
                     "after the load (the same function for both); the copying peers are safe_open+clone and "
                     "load_file+clone; values equal load_file's and mapped stats say backend 'mmap' (checked in "
                     "the run)")
        med = rep.rows[-1]["median_s"]
        extra = {"gdsio-copy (mmap=False) / safe_open+clone": med["gdsio-copy (mmap=False)"] / med["safe_open+clone"],
                 "gdsio-copy (mmap=False) / load_file+clone": med["gdsio-copy (mmap=False)"] / med["load_file+clone"],
                 "gdsio-mapped (lazy) / load_file (lazy)": med["gdsio-mapped (lazy)"] / med["load_file (lazy)"]}
        rep.rows[-1]["extra_ratios"] = extra
        rep.rows[-1]["note"] += "; " + "; ".join(f"{k}: {v:.2f}x" for k, v in extra.items())
    p = os.path.join(tmp, "x.npy")
    np.save(p, np.random.default_rng(0).standard_normal((a.npy_mb << 20) // 4, dtype=np.float32))
    fns = {"gdsio": lambda: gdsio.load_npy(p, device="cpu"), "np.load": lambda: np.load(p)}
    rep.row(f"npy {a.npy_mb} MiB, warm", "loads/s", 1, fns, a.rounds, "gdsio", ["np.load"])

    def gd_npy_touched() -> Any:
        t = gdsio.load_npy(p, device="cpu", mmap_mode="c")
        touch_pages([t])
        return t

    def np_touched() -> Any:
        x = np.load(p, mmap_mode="c")
        touch_pages([x])
        return x

    fns = {"gdsio-mmap_mode=c+touch": gd_npy_touched, "np.load(mmap_mode=c)+touch": np_touched}
    rep.row(f"npy {a.npy_mb} MiB, warm, mapped copy-on-write, every page touched", "loads/s", 1, fns, a.rounds,
            "gdsio-mmap_mode=c+touch", ["np.load(mmap_mode=c)+touch"])


# ---- output ------------------------------------------------------------------------------------------
def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [
        f"# CPU peers, {doc['date']}",
        "",
        f"- machine: {m['cpu']}, {m['cpus']} CPUs, Python {m['python']}, torch {m['torch']}, resize SIMD {m['simd']}",
        f"- peers: {', '.join(f'{k} {v}' for k, v in doc['versions'].items() if v)}",
        f"- commit: {doc['commit']}",
        f"- command: `{doc['command']}`",
        "- ratio = gdsio's time / the peer's (below 1: gdsio faster); medians of interleaved rounds",
        "",
        "| workload | gdsio | peers, same run | ratio vs best peer | load avg |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in doc["rows"]:
        tp = r["throughput"]
        peers = "; ".join(f"{k} {tp[k]:.4g}" for k in r["ratios"])
        others = [k for k in tp if k != r["gdsio"] and k not in r["ratios"]]
        gd = f"{r['gdsio']} {tp[r['gdsio']]:.4g} {r['unit']}" + "".join(f"; {k} {tp[k]:.4g}" for k in others)
        ratio = f"{r['ratio_vs_best']:.2f}x ({r['best_peer']})" if r["best_peer"] else "-"
        lines.append(f"| {r['workload']} | {gd} | {peers} | {ratio} | {r['load_before']:.2f} -> {r['load_after']:.2f} |")
    for r in doc["rows"]:
        if r["note"]:
            lines.append(f"\n- {r['workload']}: {r['note']}")
    for n in doc["notes"]:
        lines.append(f"- {n}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--file-kib", type=int, default=100)
    ap.add_argument("--safetensors-mb", type=int, default=2048)
    ap.add_argument("--npy-mb", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--resize-calls", type=int, default=20, help="calls per round of the resize row")
    ap.add_argument("--rows", default="jpeg,crop,resize,files,host,tensors")
    ap.add_argument("--host-mb", type=int, default=1024, help="the large file of the host-read row")
    ap.add_argument("--skip-peers", default="", help="comma list of peer modules to treat as absent, or 'all'")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one round (the test)")
    ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--name", default="cpu-peers")
    a = ap.parse_args(argv)
    if a.smoke:
        a.images, a.files, a.file_kib, a.safetensors_mb, a.npy_mb, a.rounds, a.resize_calls = 3, 20, 4, 1, 1, 1, 1
        a.host_mb = 8
    rep = Report(a, {s for s in a.skip_peers.split(",") if s})
    rows = set(a.rows.split(","))
    with tempfile.TemporaryDirectory(prefix="gdsio-cpu-peers-") as tmp:
        if "jpeg" in rows:
            jpeg_rows(rep, a)
        if "crop" in rows:
            crop_rows(rep, a)
        if "resize" in rows:
            resize_rows(rep, a)
        if "files" in rows:
            file_rows(rep, a, tmp)
        if "host" in rows:
            host_rows(rep, a, tmp)
        if "tensors" in rows:
            tensor_rows(rep, a, tmp)
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python bench/cpu_peers.py " + " ".join(shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:])),
        "machine": machine(), "commit": commit(), "versions": versions(), "rows": rep.rows, "notes": rep.notes,
    }
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, a.name + ".json"), "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(a.out_dir, a.name + ".md"), "w") as f:
        f.write(markdown(doc))
    print(f"wrote {os.path.join(a.out_dir, a.name)}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
