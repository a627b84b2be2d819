"""Line coverage of the CUDA call boundary on the CPU: every scenario of
shim_tests.cpp (the cuFile and nvJPEG shims, the pinned pipeline and the
staging ring on the emulated runtime, with the stand-in libraries of fakes/),
built with gcc's --coverage instead of the sanitizers, then gcov's count of
the lines run in each shim.

Command line (writes the figures bench/results/shim-coverage-*.md records)::

    python tests/kernels/shim_coverage.py [--min 85] [--gcov-out DIR]

Exits 1 when a scenario fails or a shim is under --min percent.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))
from kernels import emulate as E  # noqa: E402

# The coverage build: no sanitizer, no optimisation (each line keeps its own counts).
E.FLAVOURS.setdefault("coverage", {"flags": ["--coverage", "-O0"], "env": {}})

# The files whose coverage is reported (the shims: the code only a device would run otherwise).
MEASURED = [E.CSRC / "io" / "cufile_shim.cpp", E.CSRC / "image" / "nvjpeg_shim.cpp",
            E.CSRC / "io" / "staging_ring.cpp", E.CSRC / "io" / "pinned_reader.cpp"]


def measure(gcov_out: Path | None = None) -> tuple[dict[str, tuple[float, int]], dict[str, E.Run]]:
    """({file: (percent of lines run, lines)}, the scenarios' runs)."""
    b = E.build("coverage", target="shim_tests")
    obj = b.exe.parent / "obj"
    for g in obj.glob("*.gcda"):
        g.unlink()  # counts from an earlier run would add up
    work = E.ROOT / "build" / "kernels-emu" / "shim-work"  # a disk: O_DIRECT works there
    work.mkdir(parents=True, exist_ok=True)
    _, runs = E.run_shims(work, "coverage")
    out: dict[str, tuple[float, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(gcov_out or tmp)
        d.mkdir(parents=True, exist_ok=True)
        for src in MEASURED:
            r = subprocess.run(["gcov", "-o", str(obj / f"{src.stem}.o"), str(src)], capture_output=True,
                               text=True, cwd=d, check=True)
            # "File '<path>'\nLines executed:87.50% of 240": the block for this source (headers have their own).
            m = re.search(rf"File '{re.escape(str(src))}'\nLines executed:([\d.]+)% of (\d+)", r.stdout)
            if not m:
                raise RuntimeError(f"gcov printed no figure for {src}:\n{r.stdout}{r.stderr}")
            out[str(src.relative_to(E.ROOT))] = (float(m[1]), int(m[2]))
    return out, runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--min", type=float, default=85.0, help="the least percentage of lines each shim must run")
    ap.add_argument("--gcov-out", type=Path, help="keep gcov's annotated .gcov files here")
    a = ap.parse_args(argv)
    figures, runs = measure(a.gcov_out.resolve() if a.gcov_out else None)
    failed = [n for n, r in runs.items() if r.returncode != 0]
    for n in failed:
        print(f"scenario {n} failed:\n{runs[n].output[-3000:]}")
    print(f"{len(runs)} scenarios, {len(failed)} failed (gcc {E.compiler()}, --coverage -O0)")
    low = []
    for f, (pct, n) in figures.items():
        shim = f.endswith("_shim.cpp")
        print(f"{f}: {pct:.2f}% of {n} lines{'' if not shim else ' (shim)'}")
        if shim and pct < a.min:
            low.append(f)
    if low:
        print(f"under {a.min}%: {', '.join(low)}")
    return 1 if failed or low else 0


if __name__ == "__main__":
    os.environ.pop("CUFILE_FORCE_COMPAT_MODE", None)
    sys.exit(main())
