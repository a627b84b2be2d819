"""Instructions per call under callgrind: gdsio against its CPU peers, in rows
the load of other jobs cannot move (issue 29).

Wall-clock ratios on a shared 2-core machine flip with the neighbours' load;
the instructions a call retires do not. This script runs its workloads in
one process under ``valgrind --tool=callgrind --collect-atstart=no``; a small C
helper built at start (callgrind.h's client requests, from valgrind's headers)
zeroes the counters, switches collection on around each contestant's calls
only, and dumps them under the contestant's name. Per call = the dump's
instructions / calls. Every thread's instructions count (gdsio runs with
threads=1 here, as the peers do).

valgrind's CPU has no AVX-512, so gdsio's resize runs at its AVX2 level and
torch at its AVX2 kernels; the rows say so. Wall-clock rows stay in
bench/cpu_peers.py; these stand beside them.

    python bench/instructions.py --out-dir bench/results --name instructions-YYYY-MM-DD
    python bench/instructions.py --smoke --out-dir /tmp/x     # tiny sizes

Rows: JPEG decode (500x375 and 1000x700 photos), resize 1000x700 -> 224x224
bilinear antialias (uint8), and the per-call overhead of gdsio.read (a 4 KiB
file), gdsio.image.decode (an 8x8 JPEG) and gdsio.transforms.resize (16x16 ->
8x8), each against what a user would call instead.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

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


def child(work: Path, calls_scale: float) -> None:
    import ctypes
    import io

    import numpy as np
    import torch

    import gdsio
    import gdsio.transforms as T
    from photos import jpegs, sources

    cg = ctypes.CDLL(str(work / "libcg_helper.so"))
    cg.gd_dump.argtypes = [ctypes.c_char_p]
    assert cg.gd_on_valgrind(), "run through the parent (it starts valgrind)"
    torch.set_num_threads(1)
    results: list[dict[str, Any]] = []

    def measure(row: str, name: str, fn: Callable[[], Any], calls: int) -> None:
        calls = max(1, int(calls * calls_scale))
        fn()  # first call outside the count (lazy loading, pools, caches)
        tag = f"{len(results):03d}"
        cg.gd_zero()
        cg.gd_toggle()
        for _ in range(calls):
            fn()
        cg.gd_toggle()
        cg.gd_dump(tag.encode())
        results.append({"row": row, "contestant": name, "calls": calls, "tag": tag})

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

    with gdsio.settings(threads=1):
        for size, calls in (((500, 375), 8), ((1000, 700), 4)):
            blob = jpegs(1, quality=90, size=size)[0]
            t = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
            row = f"JPEG decode {size[0]}x{size[1]} q90, 1 thread"
            measure(row, "gdsio", lambda: gdsio.image.decode(t, device="cpu"), calls)
            if simplejpeg:
                measure(row, "simplejpeg", lambda: simplejpeg.decode_jpeg(blob), calls)
            measure(row, "pillow", lambda: pil_decode(blob), calls)
            if cv2 is not None:
                buf = np.frombuffer(blob, np.uint8)
                measure(row, "cv2", lambda: cv2.imdecode(buf, cv2.IMREAD_COLOR), calls)

        arr = np.asarray(Image.fromarray(sources()[0]).resize((1000, 700)))
        planes = torch.from_numpy(arr.copy()).permute(2, 0, 1).contiguous()
        cl = planes[None].contiguous(memory_format=torch.channels_last)
        pil = Image.fromarray(arr)
        interp = torch.nn.functional.interpolate
        row = "resize 1000x700 -> 224x224 bilinear antialias uint8, 1 thread (AVX2 under valgrind)"
        measure(row, "gdsio-channels_last", lambda: T.resize(cl, [224, 224]), 6)
        measure(row, "gdsio-planes", lambda: T.resize(planes, [224, 224]), 6)
        measure(row, "torch-channels_last", lambda: interp(cl, size=(224, 224), mode="bilinear", antialias=True), 6)
        measure(row, "pillow", lambda: pil.resize((224, 224), Image.Resampling.BILINEAR), 6)

        small = work / "small.bin"
        small.write_bytes(os.urandom(4096))
        row = "per call: read a 4 KiB file (warm)"

        def open_read() -> bytes:
            with open(small, "rb") as f:
                return f.read()

        measure(row, "gdsio.read", lambda: gdsio.read(small, device="cpu"), 200)
        measure(row, "open().read()", open_read, 200)

        tiny = jpegs(1, quality=90, size=(8, 8))[0]
        tt = torch.frombuffer(bytearray(tiny), dtype=torch.uint8)
        row = "per call: decode an 8x8 JPEG"
        measure(row, "gdsio.image.decode", lambda: gdsio.image.decode(tt, device="cpu"), 200)
        if simplejpeg:
            measure(row, "simplejpeg", lambda: simplejpeg.decode_jpeg(tiny), 200)
        measure(row, "pillow", lambda: pil_decode(tiny), 200)

        img = torch.randint(0, 256, (3, 16, 16), dtype=torch.uint8)
        img_cl = img[None].contiguous(memory_format=torch.channels_last)
        row = "per call: resize 16x16 -> 8x8 bilinear antialias"
        measure(row, "gdsio.transforms.resize", lambda: T.resize(img, [8, 8]), 200)
        measure(row, "torch interpolate", lambda: interp(img_cl, size=(8, 8), mode="bilinear", antialias=True), 200)

    (work / "plan.json").write_text(json.dumps(results))
    (work / "gdsio.json").write_text(json.dumps({"path": os.path.dirname(gdsio.__file__),
                                                 "version": getattr(gdsio, "__version__", "?")}))


# --------------------------------------------------------------------------- the parent


def instructions_of(work: Path, tag: str) -> int:
    for p in glob.glob(str(work / "callgrind.out.*")):
        text = Path(p).read_text(errors="replace")
        if f"desc: Trigger: Client Request: {tag}\n" in text:
            for line in text.splitlines():
                if line.startswith("summary:") or line.startswith("totals:"):
                    return int(line.split()[1])
    raise RuntimeError(f"no callgrind dump for {tag}")


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    out = [f"# Instructions per call under callgrind, {doc['date']}", "",
           f"- machine: {m['cpu']}, {m['cpus']} CPUs, Python {m['python']}, torch {m['torch']}, "
           f"valgrind {m['valgrind']}", f"- commit: {doc['commit']} (of this script; gdsio under test: {doc['gdsio']['version']} at "
           f"{doc['gdsio']['path']})", f"- command: `{doc['command']}`",
           "- instructions retired per call (every thread), counted by callgrind around the calls only; "
           "ratio = gdsio's / the peer's (below 1: gdsio retires fewer)", "",
           "| row | contestant | calls | instructions per call | ratio gdsio / this |", "| --- | --- | --- | --- | --- |"]
    by_row: dict[str, list[dict[str, Any]]] = {}
    for r in doc["results"]:
        by_row.setdefault(r["row"], []).append(r)
    for row, rs in by_row.items():
        g = rs[0]["per_call"]
        for r in rs:
            ratio = "" if r is rs[0] else f"{g / r['per_call']:.2f}x"
            out.append(f"| {row if r is rs[0] else ''} | {r['contestant']} | {r['calls']} | "
                       f"{r['per_call'] / 1e6:.3f} M | {ratio} |")
    out.append("")
    out.append(f"Wall time of the whole run under valgrind: {doc['seconds']:.0f} s.")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", default=None, help="write <name>.json and <name>.md here")
    p.add_argument("--name", default="instructions")
    p.add_argument("--smoke", action="store_true", help="one call per contestant (the test)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--scale", type=float, default=1.0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        child(Path(a.child), a.scale)
        return 0
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed (apt install valgrind)")
    work = Path(tempfile.mkdtemp(prefix="gdsio-instr-"))
    try:
        build_helper(work)
        scale = 0.01 if a.smoke else 1.0
        cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--dump-instr=no", "--compress-strings=no",
               "--compress-pos=no", f"--callgrind-out-file={work}/callgrind.out.%p",
               sys.executable, "-P" if sys.version_info >= (3, 11) else "-E", str(Path(__file__).resolve()),
               "--child", str(work), "--scale", str(scale)]
        t0 = time.perf_counter()
        env = {**os.environ, "PYTHONHASHSEED": "0", "GDSIO_THREADS": "1", "OMP_NUM_THREADS": "1"}
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        seconds = time.perf_counter() - t0
        if r.returncode != 0:
            sys.stderr.write(r.stderr[-6000:])
            raise SystemExit(f"the run under valgrind failed (rc {r.returncode})")
        plan = json.loads((work / "plan.json").read_text())
        tested = json.loads((work / "gdsio.json").read_text())
        for item in plan:
            item["instructions"] = instructions_of(work, item["tag"])
            item["per_call"] = item["instructions"] / item["calls"]
        import torch
        ver = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip()
        doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit(),
               "command": "python " + " ".join([os.path.relpath(__file__), *(argv or sys.argv[1:])]),
               "machine": {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                           "python": platform.python_version(), "torch": torch.__version__, "valgrind": ver},
               "gdsio": tested, "seconds": seconds, "results": plan}
        md = markdown(doc)
        print(md)
        if a.out_dir:
            os.makedirs(a.out_dir, exist_ok=True)
            Path(a.out_dir, a.name + ".json").write_text(json.dumps(doc, indent=1))
            Path(a.out_dir, a.name + ".md").write_text(md)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
