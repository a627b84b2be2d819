"""gdsio._core built with AddressSanitizer and UndefinedBehaviorSanitizer.

The extension as setup builds it on a machine without CUDA (every .cpp of
csrc/core, csrc/io, csrc/image and csrc/bindings; libjpeg-turbo where its
header is installed), compiled straight with the C++ compiler so that the test
needs neither CMake nor the build backend: pybind11's headers (the test
extra) and Python's. Cached in build/boundary-asan/ by the digest of the
sources and flags. `run(script)` runs a Python script with this module first
on sys.path (as the top-level module `_core`) and the sanitizer runtime
preloaded, so that a write past an array's end stops the process with a
report instead of passing unseen.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
OUT = ROOT / "build" / "boundary-asan"
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
ENV = {
    # Python and torch keep memory to the end on purpose: no leak report.
    "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=0",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
}


def compiler() -> str:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or "g++"


def unavailable() -> str | None:
    """Why the module cannot be built and run here (None: it can)."""
    try:
        import pybind11  # noqa: F401  (the test extra)
    except ImportError:
        return "pybind11's headers are not installed (pip install pybind11, or the test extra)"
    if not shutil.which(compiler()):
        return f"no C++ compiler ({compiler()}) on PATH"
    if not runtime():
        return f"{compiler()} has no AddressSanitizer runtime (libasan.so)"
    return None


def runtime() -> str | None:
    r = subprocess.run([compiler(), "-print-file-name=libasan.so"], capture_output=True, text=True)
    p = r.stdout.strip()
    return p if r.returncode == 0 and os.path.isabs(p) and os.path.exists(p) else None


def _sources() -> list[Path]:
    return sorted(p for d in ("core", "io", "image", "bindings") for p in (CSRC / d).glob("*.cpp"))


def _flags() -> tuple[list[str], list[str]]:
    import pybind11

    libjpeg = Path("/usr/include/jpeglib.h").exists() or Path("/usr/local/include/jpeglib.h").exists()
    compile_flags = ["-std=c++17", "-O1", "-g1", "-fPIC", "-pthread", "-fvisibility=hidden", "-ffp-contract=off",
                     *SANITIZE, f"-I{CSRC}", f"-I{pybind11.get_include()}", f"-I{sysconfig.get_paths()['include']}",
                     *(["-DGDSIO_HAVE_LIBJPEG=1"] if libjpeg else [])]
    link = ["-shared", "-pthread", *SANITIZE, "-ldl", *(["-ljpeg"] if libjpeg else [])]
    return compile_flags, link


def build() -> Path:
    """The module's path, built or reused."""
    compile_flags, link = _flags()
    h = hashlib.sha256(" ".join(compile_flags + link).encode() + Path(__file__).read_bytes())
    for p in sorted(CSRC.rglob("*")):
        if p.is_file() and p.suffix in (".cpp", ".hpp", ".h"):
            h.update(str(p.relative_to(ROOT)).encode() + p.read_bytes())
    digest = h.hexdigest()
    so = OUT / ("_core" + sysconfig.get_config_var("EXT_SUFFIX"))
    stamp = OUT / "stamp"
    if so.exists() and stamp.exists() and stamp.read_text() == digest:
        return so
    (OUT / "obj").mkdir(parents=True, exist_ok=True)

    def one(src: Path) -> Path:
        obj = OUT / "obj" / (src.parent.name + "-" + src.stem + ".o")
        r = subprocess.run([compiler(), *compile_flags, "-c", str(src), "-o", str(obj)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise RuntimeError(f"compiling {src.relative_to(ROOT)} with ASan failed:\n{r.stderr[-4000:]}")
        return obj

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        objs = list(pool.map(one, _sources()))
    r = subprocess.run([compiler(), *map(str, objs), *link, "-o", str(so)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"linking the ASan _core failed:\n{r.stderr[-4000:]}")
    stamp.write_text(digest)
    return so


def run(script: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Runs `script` (Python source) with the ASan module importable as `_core`
    and tests/ on sys.path."""
    so = build()
    # libstdc++ beside the ASan runtime: ASan's __cxa_throw interceptor must find
    # the real one when the first C++ exception is thrown.
    stdcpp = subprocess.run([compiler(), "-print-file-name=libstdc++.so"], capture_output=True, text=True).stdout
    env = {**os.environ, **ENV, "LD_PRELOAD": " ".join(p for p in (runtime(), stdcpp.strip()) if p),
           "PYTHONPATH": os.pathsep.join([str(so.parent), str(ROOT / "tests")])}
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=str(so.parent))
