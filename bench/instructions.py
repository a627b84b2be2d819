"""Instructions per call under callgrind: gdsio against its CPU peers, in rows
the load of other jobs cannot move (issue 29).

Wall-clock ratios on a shared 2-core machine flip with the neighbours' load;
the instructions a call retires do not. This script runs its workloads in
one process under ``valgrind --tool=callgrind``; a small C helper built at
start (callgrind.h's client requests, from valgrind's headers) zeroes the
counters before each contestant's calls and dumps them after, under the
contestant's name. Per call = the dump's instructions / calls. Every thread
collects from its start and the counters are the process's, so every
thread's instructions count (gdsio runs with threads=1 here, as the peers do,
but for the 2-thread row; callgrind's collection switch is a thread's own, so
it is left on).

valgrind's CPU has no AVX-512, so gdsio's resize runs at its AVX2 level and
torch at its AVX2 kernels; the rows say so.

Beside each instruction count stand the wall-clock figures of the same
workloads, run afterwards outside valgrind in a fresh process with the same
environment: interleaved rounds (round r runs every contestant once, so all
see the same load), medians per call of the wall time and of the process's
CPU time (every thread), /proc/self/stat's user and system time summed over
the rounds, and the load average; one command gives both.

    python bench/instructions.py --out-dir bench/results --name instructions-YYYY-MM-DD
    python bench/instructions.py --smoke --out-dir /tmp/x     # tiny sizes, one round

Rows: JPEG decode (500x375 and 1000x700 photos, one thread; a batch of eight
1000x700 photos at 2 threads: gdsio's one call and a 2-thread pool of its
single decode against the peers' 2-thread pools), resize 1000x700 -> 224x224
bilinear antialias (uint8), and the per-call overhead of gdsio.read (a 4 KiB
file), gdsio.image.decode (an 8x8 JPEG), gdsio.image.read (an 8x8 JPEG file)
and gdsio.transforms.resize (16x16 -> 8x8), each against what a user would
call instead; the float32 epilogue: a uint8 batch cast and normalized (the
Ray consumer's Tail) and a crop-resize-flip-normalize of a photo to float32,
against the torch ops torchvision runs.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# The row groups, in order (--rows picks some).
GROUPS = ("decode", "decode2", "resize", "read", "decode8", "imread8", "resize16", "cast", "crop")

HELPER_C = r"""
#include <valgrind/callgrind.h>
void gd_zero(void) { CALLGRIND_ZERO_STATS; }
void gd_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
void gd_dump(const char* name) { CALLGRIND_DUMP_STATS_AT(name); }
int gd_on_valgrind(void) { return RUNNING_ON_VALGRIND; }
"""


def build_helper(work: Path) -> Path:
    src, so = work / "cg_helper.c", work / "libcg_helper.so"
    src.write_text(HELPER_C)
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("no C compiler: the callgrind helper cannot be built")
    r = subprocess.run([cc, "-O1", "-shared", "-fPIC", str(src), "-o", str(so)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"building the callgrind helper failed (valgrind's headers installed?):\n{r.stderr}")
    return so


# --------------------------------------------------------------------------- the child, under valgrind


def workloads(work: Path, calls_scale: float, groups: tuple[str, ...] = GROUPS) -> list[dict[str, Any]]:
    """The rows' contestants, in order: row, contestant, fn (one call), calls.
    Built in the process that runs them (under valgrind, or not for the wall rows)."""
    import concurrent.futures
    import io

    import numpy as np
    import torch

    import gdsio
    import gdsio.transforms as T
    from photos import jpegs, sources

    torch.set_num_threads(1)
    items: list[dict[str, Any]] = []

    group = ""

    def add(row: str, name: str, fn: Callable[[], Any], calls: int) -> None:
        if group in groups:
            items.append({"group": group, "row": row, "contestant": name, "fn": fn,
                          "calls": max(1, int(calls * calls_scale))})

    from PIL import Image
    try:
        import simplejpeg
    except ImportError:
        simplejpeg = None
    try:
        import cv2
        cv2.setNumThreads(1)
    except ImportError:
        cv2 = None

    def pil_decode(b: bytes) -> Any:
        with Image.open(io.BytesIO(b)) as im:
            return np.asarray(im.convert("RGB"))

    group = "decode"
    for size, calls in (((500, 375), 8), ((1000, 700), 4)):
        blob = jpegs(1, quality=90, size=size)[0]
        t = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
        row = f"JPEG decode {size[0]}x{size[1]} q90, 1 thread"
        add(row, "gdsio", lambda t=t: gdsio.image.decode(t, device="cpu"), calls)
        if simplejpeg:
            add(row, "simplejpeg", lambda blob=blob: simplejpeg.decode_jpeg(blob), calls)
        add(row, "pillow", lambda blob=blob: pil_decode(blob), calls)
        if cv2 is not None:
            buf = np.frombuffer(blob, np.uint8)
            add(row, "cv2", lambda buf=buf: cv2.imdecode(buf, cv2.IMREAD_COLOR), calls)

    # A batch at 2 threads: gdsio's one call (libjpeg-turbo over the engine's threads, the caller one
    # of them) against the peers' 2-thread pool; every thread's instructions count.
    group = "decode2"
    blobs = jpegs(8, quality=90, size=(1000, 700))
    tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
    pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="bench-pool")

    def gd_batch() -> Any:
        with gdsio.settings(threads=2):
            return gdsio.image.decode(tensors, device="cpu")

    row = "JPEG decode 1000x700 q90, a batch of 8, 2 threads (per batch)"
    add(row, "gdsio (one call)", gd_batch, 3)
    add(row, "gdsio in a 2-thread pool", lambda: list(pool.map(lambda t: gdsio.image.decode(t, device="cpu"), tensors)), 3)
    if simplejpeg:
        add(row, "simplejpeg-pool2", lambda: list(pool.map(simplejpeg.decode_jpeg, blobs)), 3)
    add(row, "pillow-pool2", lambda: list(pool.map(pil_decode, blobs)), 3)

    group = "resize"
    arr = np.asarray(Image.fromarray(sources()[0]).resize((1000, 700)))
    planes = torch.from_numpy(arr.copy()).permute(2, 0, 1).contiguous()
    cl = planes[None].contiguous(memory_format=torch.channels_last)
    pil = Image.fromarray(arr)
    interp = torch.nn.functional.interpolate
    row = "resize 1000x700 -> 224x224 bilinear antialias uint8, 1 thread (AVX2 under valgrind)"
    add(row, "gdsio-channels_last", lambda: T.resize(cl, [224, 224]), 6)
    add(row, "gdsio-planes", lambda: T.resize(planes, [224, 224]), 6)
    add(row, "torch-channels_last", lambda: interp(cl, size=(224, 224), mode="bilinear", antialias=True), 6)
    add(row, "pillow", lambda: pil.resize((224, 224), Image.Resampling.BILINEAR), 6)

    group = "read"
    small = work / "small.bin"
    small.write_bytes(os.urandom(4096))
    row = "per call: read a 4 KiB file (warm)"

    def open_read() -> bytes:
        with open(small, "rb") as f:
            return f.read()

    add(row, "gdsio.read", lambda: gdsio.read(small, device="cpu"), 200)
    add(row, "open().read()", open_read, 200)

    group = "decode8"
    tiny = jpegs(1, quality=90, size=(8, 8))[0]
    tt = torch.frombuffer(bytearray(tiny), dtype=torch.uint8)
    row = "per call: decode an 8x8 JPEG"
    add(row, "gdsio.image.decode", lambda: gdsio.image.decode(tt, device="cpu"), 200)
    if simplejpeg:
        add(row, "simplejpeg", lambda: simplejpeg.decode_jpeg(tiny), 200)
    add(row, "pillow", lambda: pil_decode(tiny), 200)

    group = "imread8"
    tiny_file = work / "tiny.jpg"
    tiny_file.write_bytes(tiny)
    row = "per call: read and decode an 8x8 JPEG file (warm)"

    def read_then_simplejpeg() -> Any:
        with open(tiny_file, "rb") as f:
            return simplejpeg.decode_jpeg(f.read())

    add(row, "gdsio.image.read", lambda: gdsio.image.read(tiny_file, device="cpu"), 200)
    if simplejpeg:
        add(row, "open().read() + simplejpeg", read_then_simplejpeg, 200)
    add(row, "pillow", lambda: np.asarray(Image.open(tiny_file).convert("RGB")), 200)

    group = "resize16"
    img = torch.randint(0, 256, (3, 16, 16), dtype=torch.uint8)
    img_cl = img[None].contiguous(memory_format=torch.channels_last)
    row = "per call: resize 16x16 -> 8x8 bilinear antialias"
    add(row, "gdsio.transforms.resize", lambda: T.resize(img, [8, 8]), 200)
    add(row, "torch interpolate", lambda: interp(img_cl, size=(8, 8), mode="bilinear", antialias=True), 200)
    # The float32 epilogue: the Ray consumer's cast of a uint8 batch the CPU nodes sent (gdsio.data.ray's Tail,
    # the fused kernel at an identity geometry), against the torch ops torchvision's v2 to_dtype(scale=True)
    # and normalize run.
    group = "cast"
    from gdsio.data.ray.feed import Tail

    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    u8 = torch.randint(0, 256, (8, 3, 224, 224), dtype=torch.uint8)
    f32 = torch.empty(u8.shape, dtype=torch.float32)
    tail = Tail(torch.float32, True, tuple(mean), tuple(std))
    m4, s4 = torch.tensor(mean).view(1, 3, 1, 1), torch.tensor(std).view(1, 3, 1, 1)

    row = "uint8 (8, 3, 224, 224) -> float32 / 255, normalized, 1 thread (per batch)"
    add(row, "gdsio (the Ray consumer's Tail)", lambda: tail(u8, out=f32), 6)
    add(row, "torch (torchvision v2's to_dtype + normalize ops)",
        lambda: u8.to(torch.float32).mul_(1 / 255).sub_(m4).div_(s4), 6)

    # What making an image ends with: crop 400x300 of a 500x375 photo, resize to 224x224, flip, float32, normalize.
    group = "crop"
    photo = torch.from_numpy(np.asarray(Image.fromarray(sources()[1]).resize((500, 375))).copy())  # (H, W, C)
    hwc = photo.permute(2, 0, 1)  # interleaved pixels, as a decoded image lies
    photo_cl = hwc[None].contiguous(memory_format=torch.channels_last)
    box = [[30, 50, 300, 400]]
    row = "crop 400x300 of 500x375 -> 224x224 bilinear antialias, flip, float32 normalized, 1 thread"
    add(row, "gdsio (fused)",
        lambda: T.resized_crop_flip_normalize([hwc], box, [True], 224, mean, std, dtype=torch.float32), 6)

    def torch_crop() -> Any:
        x = interp(photo_cl[:, :, 30:330, 50:450], size=(224, 224), mode="bilinear", antialias=True).flip(-1)
        return x.to(torch.float32).mul_(1 / 255).sub_(m4).div_(s4)

    add(row, "torch (interpolate channels_last, flip, the v2 ops)", torch_crop, 6)
    (work / "gdsio.json").write_text(json.dumps({"path": os.path.dirname(gdsio.__file__),
                                                 "version": getattr(gdsio, "__version__", "?")}))
    return items


# Rows whose work runs on several threads: callgrind's collection switch and its zeroing are a
# thread's own (pool threads toggled from the caller went uncounted, and a dump's summary and totals
# disagreed), so each of their contestants is counted as the difference of two whole processes'
# instructions (every thread, from start to exit): one that also runs the calls, one that does not.
THREADED = ("decode2",)


def child(work: Path, calls_scale: float, groups: tuple[str, ...]) -> None:
    """Under valgrind: each contestant's calls between zeroed counters and a dump of its own,
    collection switched on around them only (one thread: the caller's)."""
    import ctypes

    import gdsio

    cg = ctypes.CDLL(str(work / "libcg_helper.so"))
    cg.gd_dump.argtypes = [ctypes.c_char_p]
    assert cg.gd_on_valgrind(), "run through the parent (it starts valgrind)"
    results: list[dict[str, Any]] = []
    with gdsio.settings(threads=1):
        for k, it in enumerate(workloads(work, calls_scale, groups)):
            it["fn"]()  # first call outside the count (lazy loading, pools, caches)
            tag = f"{k:03d}"
            cg.gd_zero()
            cg.gd_toggle()
            for _ in range(it["calls"]):
                it["fn"]()
            cg.gd_toggle()
            cg.gd_dump(tag.encode())
            results.append({"group": it["group"], "row": it["row"], "contestant": it["contestant"],
                            "calls": it["calls"], "tag": tag})
    (work / "plan.json").write_text(json.dumps(results))


def total_child(work: Path, calls_scale: float, group: str, index: int, run: bool) -> None:
    """Under valgrind, collecting from the start: one contestant of a threaded row, its first call,
    then (run) its calls; the parent takes the difference of the two processes' totals."""
    import gdsio

    with gdsio.settings(threads=1):
        items = workloads(work, calls_scale, (group,))
        it = items[index]
        it["fn"]()
        if run:
            for _ in range(it["calls"]):
                it["fn"]()
    (work / "plan.json").write_text(json.dumps([{"group": x["group"], "row": x["row"], "contestant": x["contestant"],
                                                 "calls": x["calls"]} for x in items]))


def proc_cpu() -> tuple[float, float]:
    """This process's user and system CPU seconds, every thread, from /proc/self/stat (clock ticks)."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def wall_child(work: Path, calls_scale: float, rounds: int, groups: tuple[str, ...]) -> None:
    """Outside valgrind: the same workloads in interleaved rounds (round r runs every contestant
    once, so all see the same load); per sample the wall time and the process's CPU time
    (every thread: CLOCK_PROCESS_CPUTIME_ID), and /proc's user and system ticks summed."""
    import gdsio

    out: list[dict[str, Any]] = []
    load_before = os.getloadavg()[0]
    with gdsio.settings(threads=1):
        items = workloads(work, calls_scale, groups)
        for it in items:
            it["fn"]()
            it.update(wall=[], cpu=[], user=0.0, sys=0.0)
        for _ in range(rounds):
            for it in items:
                fn, calls = it["fn"], it["calls"]
                u0, s0 = proc_cpu()
                c0, t0 = time.process_time(), time.perf_counter()
                for _ in range(calls):
                    fn()
                t1, c1 = time.perf_counter(), time.process_time()
                u1, s1 = proc_cpu()
                it["wall"].append((t1 - t0) / calls)
                it["cpu"].append((c1 - c0) / calls)
                it["user"] += u1 - u0
                it["sys"] += s1 - s0
    for it in items:
        n = it["calls"] * rounds
        out.append({"row": it["row"], "contestant": it["contestant"], "calls": it["calls"], "rounds": rounds,
                    "wall_median": statistics.median(it["wall"]), "cpu_median": statistics.median(it["cpu"]),
                    "proc_user_per_call": it["user"] / n, "proc_sys_per_call": it["sys"] / n,
                    "wall": it["wall"], "cpu": it["cpu"]})
    (work / "wall.json").write_text(json.dumps({"load_before": load_before, "load_after": os.getloadavg()[0],
                                                "results": out}))


# --------------------------------------------------------------------------- the parent


def instructions_of(work: Path, tag: str) -> int:
    """The instructions of a dump (its summary: line)."""
    for p in glob.glob(str(work / "callgrind.out.*")):
        text = Path(p).read_text(errors="replace")
        if f"desc: Trigger: Client Request: {tag}\n" in text:
            for line in text.splitlines():
                if line.startswith("summary:"):
                    return int(line.split()[1])
    raise RuntimeError(f"no callgrind dump for {tag}")


def process_total(out_dir: Path) -> int:
    """A whole process's instructions, every thread: its dump at exit."""
    (p,) = glob.glob(str(out_dir / "callgrind.out.*"))
    for line in Path(p).read_text(errors="replace").splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no summary in {p}")


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _ms(x: float) -> str:
    return f"{x * 1e3:.3f} ms" if x >= 1e-3 else f"{x * 1e6:.1f} us"


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    wall = doc.get("wall")
    out = [f"# Instructions per call under callgrind, and wall-clock beside them, {doc['date']}", "",
           f"- machine: {m['cpu']}, {m['cpus']} CPUs, Python {m['python']}, torch {m['torch']}, "
           f"valgrind {m['valgrind']}", f"- commit: {doc['commit']} (of this script; gdsio under test: {doc['gdsio']['version']} at "
           f"{doc['gdsio']['path']})", f"- command: `{doc['command']}`"
           + (f" (PYTHONPATH={doc['pythonpath']})" if doc.get("pythonpath") else ""),
           "- instructions: retired per call (every thread), counted by callgrind around the calls only; "
           "ratio = gdsio's / the peer's (below 1: gdsio retires fewer)"]
    if wall:
        out.append(f"- wall and CPU: the same workloads outside valgrind, {wall['rounds']} interleaved rounds (round r "
                   "runs every contestant once), medians per call; CPU = the process's CPU time over the calls "
                   "(every thread, CLOCK_PROCESS_CPUTIME_ID); /proc user+sys = /proc/self/stat's ticks summed over "
                   f"all rounds, per call; load average {wall['load_before']:.2f} before, {wall['load_after']:.2f} after "
                   f"({m['cpus']} CPUs shared with other jobs: wall ratios move with that load, instructions do not)")
    out.append("")
    head = "| row | contestant | calls | instructions per call | ratio gdsio / this |"
    rule = "| --- | --- | --- | --- | --- |"
    if wall:
        head += " wall per call | ratio | CPU per call | ratio | /proc user+sys per call |"
        rule += " --- | --- | --- | --- | --- |"
    out += [head, rule]
    by_row: dict[str, list[dict[str, Any]]] = {}
    for r in doc["results"]:
        by_row.setdefault(r["row"], []).append(r)
    for row, rs in by_row.items():
        g = rs[0]
        for r in rs:
            first = r is g
            ratio = "" if first else f"{g['per_call'] / r['per_call']:.2f}x"
            line = f"| {row if first else ''} | {r['contestant']} | {r['calls']} | {r['per_call'] / 1e6:.3f} M | {ratio} |"
            if wall and "wall_median" in r:
                ratio_w = "" if first else f"{g['wall_median'] / r['wall_median']:.2f}x"
                ratio_c = "" if first else f"{g['cpu_median'] / r['cpu_median']:.2f}x"
                line += (f" {_ms(r['wall_median'])} | {ratio_w} | {_ms(r['cpu_median'])} | {ratio_c} | "
                         f"{_ms(r['proc_user_per_call'])} + {_ms(r['proc_sys_per_call'])} |")
            out.append(line)
    out.append("")
    out.append(f"Wall time of the run under valgrind: {doc['seconds']:.0f} s"
               + (f"; of the wall rounds: {wall['seconds']:.0f} s." if wall else "."))
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", default=None, help="write <name>.json and <name>.md here")
    p.add_argument("--name", default="instructions")
    p.add_argument("--smoke", action="store_true", help="one call per contestant (the test)")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds of the wall-clock rows (0: none)")
    p.add_argument("--rows", default=",".join(GROUPS), help=f"comma list of row groups (of {', '.join(GROUPS)})")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--wall-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--total-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--run", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--scale", type=float, default=1.0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    groups = tuple(g for g in a.rows.split(",") if g)
    if set(groups) - set(GROUPS):
        p.error(f"--rows: unknown row group(s) {sorted(set(groups) - set(GROUPS))} (of {', '.join(GROUPS)})")
    if a.child:
        child(Path(a.child), a.scale, groups)
        return 0
    if a.wall_child:
        wall_child(Path(a.wall_child), a.scale, a.rounds, groups)
        return 0
    if a.total_child:
        total_child(Path(a.total_child), a.scale, groups[0], a.index, bool(a.run))
        return 0
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed (apt install valgrind)")
    work = Path(tempfile.mkdtemp(prefix="gdsio-instr-"))
    try:
        build_helper(work)
        scale = 0.01 if a.smoke else 1.0
        rounds = 1 if a.smoke and a.rounds else a.rounds
        script = [sys.executable, "-P" if sys.version_info >= (3, 11) else "-E", str(Path(__file__).resolve())]
        vg = ["valgrind", "--tool=callgrind", "--dump-instr=no", "--compress-strings=no", "--compress-pos=no"]
        t0 = time.perf_counter()
        env = {**os.environ, "PYTHONHASHSEED": "0", "GDSIO_THREADS": "1", "OMP_NUM_THREADS": "1"}
        single = tuple(g for g in groups if g not in THREADED)
        plan: list[dict[str, Any]] = []
        if single:
            cmd = [*vg, "--collect-atstart=no", f"--callgrind-out-file={work}/callgrind.out.%p",
                   *script, "--child", str(work), "--scale", str(scale), "--rows", ",".join(single)]
            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if r.returncode != 0:
                sys.stderr.write(r.stderr[-6000:])
                raise SystemExit(f"the run under valgrind failed (rc {r.returncode})")
            plan = json.loads((work / "plan.json").read_text())
            for item in plan:
                item["instructions"] = instructions_of(work, item["tag"])
                item["per_call"] = item["instructions"] / item["calls"]
        threaded: list[dict[str, Any]] = []
        for g in (g for g in groups if g in THREADED):
            k = 0
            while True:
                totals = []
                for run in (0, 1):
                    d = work / f"total-{g}-{k}-{run}"
                    d.mkdir()
                    cmd = [*vg, "--collect-atstart=yes", f"--callgrind-out-file={d}/callgrind.out.%p", *script,
                           "--total-child", str(d), "--scale", str(scale), "--rows", g, "--index", str(k),
                           "--run", str(run)]
                    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
                    if r.returncode != 0:
                        sys.stderr.write(r.stderr[-6000:])
                        raise SystemExit(f"the run under valgrind failed (rc {r.returncode})")
                    totals.append(process_total(d))
                items = json.loads((d / "plan.json").read_text())
                it = items[k]
                it["instructions"] = totals[1] - totals[0]
                it["per_call"] = it["instructions"] / it["calls"]
                it["how"] = "two whole processes' difference"
                threaded.append(it)
                k += 1
                if k == len(items):
                    break
        plan = sorted(plan + threaded, key=lambda it: GROUPS.index(it["group"]))  # the rows' order (stable)
        seconds = time.perf_counter() - t0
        tested = json.loads((next(iter(work.rglob("gdsio.json")))).read_text())
        wall = None
        if rounds > 0:
            # The same workloads, the same environment, outside valgrind, in a fresh process.
            t0 = time.perf_counter()
            r = subprocess.run([*script, "--wall-child", str(work), "--scale", str(scale), "--rounds", str(rounds),
                                "--rows", ",".join(groups)],
                               capture_output=True, text=True, env=env)
            if r.returncode != 0:
                sys.stderr.write(r.stderr[-6000:])
                raise SystemExit(f"the wall-clock rounds failed (rc {r.returncode})")
            wall = json.loads((work / "wall.json").read_text())
            wall["seconds"], wall["rounds"] = time.perf_counter() - t0, rounds
            measured = {(w["row"], w["contestant"]): w for w in wall.pop("results")}
            for item in plan:
                w = measured[(item["row"], item["contestant"])]
                item.update({k: v for k, v in w.items() if k not in ("row", "contestant", "calls")})
        import torch
        ver = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip()
        doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit(),
               "command": "python " + " ".join([os.path.relpath(__file__), *(argv or sys.argv[1:])]),
               "pythonpath": os.environ.get("PYTHONPATH"),
               "machine": {"cpu": cpu_model(), "cpus": os.cpu_count(),
                           "python": platform.python_version(), "torch": torch.__version__, "valgrind": ver},
               "gdsio": tested, "rows": list(groups), "seconds": seconds, "wall": wall, "results": plan}
        md = markdown(doc)
        print(md)
        if a.out_dir:
            os.makedirs(a.out_dir, exist_ok=True)
            Path(a.out_dir, a.name + ".json").write_text(json.dumps(doc, indent=1))
            Path(a.out_dir, a.name + ".md").write_text(md)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    sys.exit(main())
