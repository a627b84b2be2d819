"""Builds and runs the CUDA kernels of csrc/image/*.cu as host C++ under the
sanitizers (see README.md in this folder).

The kernel sources compile unchanged against cuda_emu.hpp except for two
rewrites done here, on a generated copy whose ``#line`` points back at the
real file (every line keeps its number):

- a launch ``k<<<grid, block, shm, stream>>>(args)`` becomes
  ``::gdsio_emu::Launch({...}, grid, block, shm, stream).run(<calls k>, args)``;
- a ``const __grid_constant__ T p`` kernel parameter becomes ``const T& p``:
  what the qualifier means (the launch's parameter buffer, read in place),
  and it spares every CUDA thread a copy of a 16 KiB batch table;
- after each ``__shared__`` declaration, a call that poisons the array at every
  block's start and counts it against the 48 KiB limit (``extern __shared__``
  arrays become the launch's dynamic shared memory).

Command line (what tests/test_kernels_emulated.py runs)::

    python tests/kernels/emulate.py CASES [--no-mutations]
"""

from __future__ import annotations

import argparse
import bisect
import concurrent.futures
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CSRC = ROOT / "csrc"

# Sanitizer flavours: compile flags and the environment the run needs.
FLAVOURS = {
    "asan": {
        "flags": ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"],
        "env": {
            "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=0",
            "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
        },
    },
    "tsan": {
        "flags": ["-fsanitize=thread"],
        "env": {"TSAN_OPTIONS": "halt_on_error=1:report_signal_unsafe=0"},
    },
}
COMMON_FLAGS = [
    "-std=c++17", "-O1", "-g1", "-pthread", "-ffp-contract=off", "-Wall", "-Wextra", "-Wno-unknown-pragmas",
    "-DGDSIO_WITH_CUDA=1", f"-I{CSRC}", f"-I{HERE / 'include'}", f"-I{HERE}",
]
# The device pass of nvcc: __CUDA_ARCH__ selects the device branches of the
# __host__ __device__ arithmetic (the __*_rn intrinsics).
KERNEL_FLAGS = ["-include", str(HERE / "cuda_emu.hpp"), "-D__CUDACC__", "-D__CUDA_ARCH__=900"]
HARNESS = ["emu_runtime.cpp", "replay.cpp", "ops_transforms.cpp", "ops_v2.cpp", "ops_decode.cpp"]
SELFTEST = HERE / "selftest.cu"
# The call-boundary checks (shim_tests.cpp): the cuFile and nvJPEG shims and the
# pinned pipeline as they are, on the emulated runtime, with fake NVIDIA libraries.
SHIM_SOURCES = [CSRC / "io" / n for n in ("cufile_shim.cpp", "file.cpp", "read_plan.cpp", "host_read.cpp",
                                          "staging_pipeline.cpp", "staging_ring.cpp", "pinned_reader.cpp",
                                          "thread_pool.cpp")]
SHIM_SOURCES += [CSRC / "image" / "nvjpeg_shim.cpp", HERE / "emu_runtime.cpp", HERE / "shim_tests.cpp"]
# The ordering checks (ordering_tests.cpp): the pinned pipeline and the remote
# readers' staging ring as they are, on the emulated runtime's asynchronous streams.
ORDERING_SOURCES = [CSRC / "io" / n for n in ("file.cpp", "read_plan.cpp", "host_read.cpp", "staging_pipeline.cpp",
                                              "staging_ring.cpp", "pinned_reader.cpp", "thread_pool.cpp")]
ORDERING_SOURCES += [HERE / "emu_runtime.cpp", HERE / "ordering_tests.cpp"]
FAKES = {"libfake_cufile.so": HERE / "fakes" / "fake_cufile.cpp", "libfake_nvjpeg.so": HERE / "fakes" / "fake_nvjpeg.cpp"}


class RewriteError(ValueError):
    pass


# --------------------------------------------------------------------------- the rewrite


def _non_code_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of comments, string and character literals."""
    spans, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j += 1
        else:
            i += 1
            continue
        spans.append((i, j))
        i = j
    return spans


class _Code:
    def __init__(self, text: str) -> None:
        self.text = text
        self.spans = _non_code_spans(text)
        self.starts = [s for s, _ in self.spans]

    def is_code(self, pos: int) -> bool:
        k = bisect.bisect_right(self.starts, pos) - 1
        return k < 0 or pos >= self.spans[k][1]

    def find(self, needle: str, start: int) -> int:
        while True:
            j = self.text.find(needle, start)
            if j < 0 or self.is_code(j):
                return j
            start = j + 1

    def matching(self, pos: int, open_: str, close: str) -> int:
        """Index of the bracket closing the one at pos."""
        depth = 0
        for j in range(pos, len(self.text)):
            if not self.is_code(j):
                continue
            if self.text[j] == open_:
                depth += 1
            elif self.text[j] == close:
                depth -= 1
                if depth == 0:
                    return j
        raise RewriteError(f"unbalanced {open_}{close} at offset {pos}")


def _kernel_start(text: str, end: int) -> int:
    """Start of the kernel expression ending at `end` (a name, a template-id, a qualified name)."""
    k = end
    while True:
        if k > 0 and text[k - 1] == ">":
            depth = 0
            while k > 0:
                k -= 1
                if text[k] == ">":
                    depth += 1
                elif text[k] == "<":
                    depth -= 1
                    if depth == 0:
                        break
        j = k
        while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_:"):
            j -= 1
        if j == k:
            return k
        k = j
        if not (k > 0 and text[k - 1] == ">"):
            return k


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def rewrite(text: str, path: str) -> str:
    """The emulation copy of a .cu file's text (see the module docstring)."""
    out = text
    # Launches, from the last one back, so earlier offsets stay valid.
    code = _Code(out)
    launches = []
    pos = code.find("<<<", 0)
    while pos >= 0:
        launches.append(pos)
        pos = code.find("<<<", pos + 3)
    for pos in reversed(launches):
        code = _Code(out)
        start = _kernel_start(out, pos)
        kernel = out[start:pos].strip()
        if not kernel:
            raise RewriteError(f"{path}:{_line_of(out, pos)}: no kernel name before <<<")
        close = code.find(">>>", pos + 3)
        if close < 0:
            raise RewriteError(f"{path}:{_line_of(out, pos)}: <<< without >>>")
        config = out[pos + 3 : close]
        p = close + 3
        while p < len(out) and out[p] in " \t\n":
            p += 1
        if p >= len(out) or out[p] != "(":
            raise RewriteError(f"{path}:{_line_of(out, pos)}: no argument list after >>>")
        q = code.matching(p, "(", ")")
        args = out[p + 1 : q]
        name = kernel.replace('"', "")
        call = (f'::gdsio_emu::Launch({{"{name}", __FILE__, __LINE__}}, {config})'
                f".run([&](auto&... gdsio_emu_p) {{ {kernel}(gdsio_emu_p...); }}"
                f"{', ' + args if args.strip() else args})")
        out = out[:start] + call + out[q + 1 :]
    # __grid_constant__ parameters: references to the launch's copy.
    code = _Code(out)
    for pos in reversed([m.start() for m in re.finditer(r"\b__grid_constant__\b", out) if code.is_code(m.start())]):
        end, depth = pos, 0
        while end < len(out) and not (depth == 0 and out[end] in ",)"):
            depth += out[end] in "<([" 
            depth -= out[end] in ">)]"
            end += 1
        param = out[pos + len("__grid_constant__") : end]
        m = re.fullmatch(r"(\s*)(.*?)(\s*\b\w+\s*)", param, re.S)
        if not m or not out[:pos].rstrip().endswith("const"):
            raise RewriteError(f"{path}:{_line_of(out, pos)}: a __grid_constant__ parameter must be 'const __grid_constant__ T name'")
        out = out[:pos] + m.group(2) + "&" + m.group(3) + out[end:]
    # __shared__ declarations.
    code = _Code(out)
    decls = []
    pos = code.find("__shared__", 0)
    while pos >= 0:
        if re.match(r"\w", out[pos - 1 : pos] or " ") is None and re.match(r"\w", out[pos + 10 : pos + 11] or " ") is None:
            decls.append(pos)
        pos = code.find("__shared__", pos + 10)
    for pos in reversed(decls):
        code = _Code(out)
        semi = pos
        depth = 0
        while True:
            semi += 1
            if semi >= len(out):
                raise RewriteError(f"{path}:{_line_of(out, pos)}: __shared__ declaration without ;")
            ch = out[semi]
            if not code.is_code(semi):
                continue
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            elif ch == ";" and depth == 0:
                break
        decl = out[pos + 10 : semi]
        line = _line_of(out, pos)
        before = out[:pos].rstrip()
        if before.endswith("extern"):
            m = re.fullmatch(r"\s*(.+?)\s*(\b\w+)\s*\[\s*\]\s*", decl)
            if not m:
                raise RewriteError(f"{path}:{line}: cannot read the dynamic shared declaration '{decl.strip()}'")
            start = len(before) - len("extern")
            repl = f"{m.group(1)}* const {m.group(2)} = ::gdsio_emu::dynamic_shared<{m.group(1)}>()"
            out = out[:start] + repl + out[semi:]
            continue
        depth, top = 0, []
        for ch in decl:
            depth += ch in "([{<"
            depth -= ch in ")]}>"
            top.append(ch if depth == 0 else " ")
        if "," in "".join(top):
            raise RewriteError(f"{path}:{line}: one variable per __shared__ declaration, please ('{decl.strip()}')")
        m = re.search(r"(\w+)\s*(\[.*)?$", decl.split("=")[0].strip(), re.S)
        if not m:
            raise RewriteError(f"{path}:{line}: cannot find the name in '__shared__{decl}'")
        var = m.group(1)
        out = out[: semi + 1] + f" ::gdsio_emu::shared_array(&{var}, sizeof({var}), __LINE__);" + out[semi + 1 :]
    if out.count("\n") != text.count("\n"):
        raise RewriteError(f"{path}: the rewrite changed the line count")
    return f'#line 1 "{path}"\n' + out


# --------------------------------------------------------------------------- the build


def compiler() -> str:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or "g++"


def sanitizer_unavailable(flavour: str) -> str | None:
    """Why this flavour cannot be built and run here (None: it can)."""
    cxx = compiler()
    if not shutil.which(cxx):
        return f"no C++ compiler ({cxx}) on PATH"
    d = ROOT / "build" / "kernels-emu" / "probe"
    d.mkdir(parents=True, exist_ok=True)
    src, exe = d / "probe.cpp", d / f"probe-{flavour}"
    src.write_text("#include <thread>\nint main() { std::thread t([] {}); t.join(); return 0; }\n")
    r = subprocess.run([cxx, *FLAVOURS[flavour]["flags"], "-pthread", str(src), "-o", str(exe)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return f"{cxx} cannot build with {' '.join(FLAVOURS[flavour]['flags'])}: {r.stderr.strip()[-300:]}"
    r = subprocess.run([str(exe)], capture_output=True, text=True, env={**os.environ, **FLAVOURS[flavour]["env"]})
    if r.returncode != 0:
        return f"a {flavour} program does not run here: {r.stderr.strip()[-300:]}"
    return None


@dataclass
class Unit:
    source: Path            # the real file
    kernel: bool            # a .cu: rewritten, compiled with KERNEL_FLAGS
    text: str | None = None  # replacement text (a mutant); None: the file as it is

    def key(self) -> str:
        return self.source.stem + ("-cu" if self.kernel else "")


def units() -> list[Unit]:
    """Every .cu of csrc/image (and the self-test's), the CPU twins (every
    .cpp of csrc/image except the nvJPEG shim) and the harness."""
    image = CSRC / "image"
    out = [Unit(p, True) for p in sorted(image.glob("*.cu"))] + [Unit(SELFTEST, True)]
    out += [Unit(p, False) for p in sorted(image.glob("*.cpp")) if p.name != "nvjpeg_shim.cpp"]
    out += [Unit(CSRC / "io" / "thread_pool.cpp", False)]
    out += [Unit(HERE / h, False) for h in HARNESS]
    return out


def shim_units() -> list[Unit]:
    return [Unit(p, False) for p in SHIM_SOURCES]


def ordering_units() -> list[Unit]:
    return [Unit(p, False) for p in ORDERING_SOURCES]


TARGETS = {"replay": units, "shim_tests": shim_units, "ordering_tests": ordering_units}


def _digest(flags: list[str], extra: str = "") -> str:
    h = hashlib.sha256(" ".join(flags).encode() + extra.encode() + Path(__file__).read_bytes())
    for base in (CSRC, HERE):
        for p in sorted(base.rglob("*")):
            if p.is_file() and p.suffix in (".cu", ".cpp", ".hpp", ".h"):
                h.update(str(p.relative_to(ROOT)).encode())
                h.update(p.read_bytes())
    return h.hexdigest()


@dataclass
class Build:
    exe: Path
    seconds: float
    cached: bool
    log: list[str] = field(default_factory=list)


def build(flavour: str, *, mutant: dict[Path, str] | None = None, name: str | None = None,
          jobs: int | None = None, target: str = "replay") -> Build:
    """Compiles (or reuses) the replay driver (or the shim checks, `target`
    "shim_tests", with the fake libraries beside it) for `flavour`; `mutant`
    replaces the text of some sources (their objects go to a directory of their own)."""
    t0 = time.perf_counter()
    base = ROOT / "build" / "kernels-emu" / (flavour + os.environ.get("GDSIO_EMU_BUILD_SUFFIX", ""))
    out_dir = base / "mutants" / name if mutant else base
    out_dir.mkdir(parents=True, exist_ok=True)
    # GDSIO_EMU_CXXFLAGS: extra flags, e.g. -DGDSIO_EMU_UCONTEXT to try the portable fiber switch.
    flags = COMMON_FLAGS + FLAVOURS[flavour]["flags"] + os.environ.get("GDSIO_EMU_CXXFLAGS", "").split()
    cxx = compiler()
    mutant = mutant or {}
    digest = _digest(flags, target + "".join(f"{p}{t}" for p, t in sorted(mutant.items())))
    exe = out_dir / target
    stamp = out_dir / ("stamp" if target == "replay" else f"stamp-{target}")
    if exe.exists() and stamp.exists() and stamp.read_text() == digest:
        return Build(exe, time.perf_counter() - t0, True)
    jobs = jobs or os.cpu_count() or 2
    # An unmutated object is reused while no source and no flag changed (the
    # replay driver, the shim checks and the mutants share them).
    tree = _digest(flags)

    def compile_unit(u: Unit) -> tuple[Path, list[str]]:
        own = u.source in mutant
        obj_dir = out_dir if own else base
        obj = obj_dir / "obj" / f"{u.key()}.o"
        obj.parent.mkdir(parents=True, exist_ok=True)
        src = u.source
        if u.kernel or own:
            text = mutant.get(u.source, u.source.read_text())
            gen = obj_dir / "gen" / f"{u.key()}.emu.cpp"
            gen.parent.mkdir(parents=True, exist_ok=True)
            new = rewrite(text, str(u.source)) if u.kernel else f'#line 1 "{u.source}"\n' + text
            if not gen.exists() or gen.read_text() != new:
                gen.write_text(new)
            src = gen
        cmd = [cxx, *flags, *(KERNEL_FLAGS if u.kernel else []), "-c", str(src), "-o", str(obj)]
        fresh = obj.with_name(obj.name + ".stamp")
        if not own and obj.exists() and fresh.exists() and fresh.read_text() == tree:
            return obj, []
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"compiling {u.source.relative_to(ROOT)} for the {flavour} emulation failed:\n"
                               f"{' '.join(cmd)}\n{r.stderr}")
        if not own:
            fresh.write_text(tree)
        return obj, [r.stderr] if r.stderr.strip() else []

    def compile_fake(item: tuple[str, Path]) -> tuple[Path, list[str]]:
        lib, src = item
        out = out_dir / "fakes" / lib
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [cxx, *flags, "-fPIC", "-shared", str(src), "-o", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"compiling {src.relative_to(ROOT)} failed:\n{' '.join(cmd)}\n{r.stderr}")
        return out, [r.stderr] if r.stderr.strip() else []

    us = TARGETS[target]()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(compile_unit, us))
        fakes = list(pool.map(compile_fake, FAKES.items())) if target == "shim_tests" else []
    objs = [o for o, _ in results]
    log = [w for _, ws in results + fakes for w in ws]
    # -rdynamic: the fake libraries log through the executable's gdsio_emu_log.
    link = ["-rdynamic", "-ldl"] if target == "shim_tests" else []
    cmd = [cxx, *flags, *map(str, objs), *link, "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"linking the {flavour} {target} failed:\n{' '.join(cmd)}\n{r.stderr}")
    stamp.write_text(digest)
    return Build(exe, time.perf_counter() - t0, False, log)


@dataclass
class Run:
    returncode: int
    output: str
    seconds: float

    @property
    def summary(self) -> str:
        lines = [ln for ln in self.output.splitlines() if ln.startswith(("replay:", "self-test:"))]
        return "; ".join(lines)


def run(b: Build, flavour: str, args: list[str], timeout: float = 600, cwd: Path | None = None,
        unset: tuple[str, ...] = ()) -> Run:
    env = {k: v for k, v in {**os.environ, **FLAVOURS[flavour]["env"]}.items() if k not in unset}
    t0 = time.perf_counter()
    r = subprocess.run([str(b.exe), *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
    return Run(r.returncode, r.stdout + r.stderr, time.perf_counter() - t0)


def build_plain_fake(lib: str) -> Path:
    """A fake library (FAKES) built without sanitizers, for loading into
    Python's own process (an ASan library needs an ASan executable)."""
    src = FAKES[lib]
    out = ROOT / "build" / "kernels-emu" / "plain" / lib
    stamp = out.with_name(lib + ".stamp")
    digest = hashlib.sha256(src.read_bytes() + (CSRC / "io" / "cufile_api.hpp").read_bytes()).hexdigest()
    if out.exists() and stamp.exists() and stamp.read_text() == digest:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [compiler(), "-std=c++17", "-O1", "-fPIC", "-shared", f"-I{CSRC}", str(src), "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"compiling {src.relative_to(ROOT)} failed:\n{' '.join(cmd)}\n{r.stderr}")
    stamp.write_text(digest)
    return out


def run_shims(work: Path, flavour: str = "asan") -> tuple[Build, dict[str, Run]]:
    """Every scenario of shim_tests, each in a process of its own (the shims
    keep their state for the process), run in `work` (their files go there)."""
    b = build(flavour, target="shim_tests")
    names = subprocess.run([str(b.exe), "--list"], capture_output=True, text=True, check=True,
                           env={**os.environ, **FLAVOURS[flavour]["env"]}).stdout.split()
    # CUFILE_FORCE_COMPAT_MODE would decide the cuFile cases before the driver's properties do.
    runs = {n: run(b, flavour, [str(b.exe.parent / "fakes"), n], timeout=120, cwd=work,
                   unset=("CUFILE_FORCE_COMPAT_MODE",)) for n in names}
    return b, runs


# --------------------------------------------------------------------------- mutants


@dataclass(frozen=True)
class Mutation:
    """One deliberate bug the harness must catch."""

    name: str
    source: Path
    kernel: str   # the function whose text is changed
    old: str      # replaced once, inside that function (the nth occurrence, 1-based)
    new: str
    nth: int
    flavour: str  # the build that must catch it
    ops: str      # the records to replay
    caught_by: tuple[str, ...]  # the output must contain one of these
    small: bool = False  # replay only the TSan selection of `ops` (the small shared-memory cases)

    def apply(self, text: str) -> str:
        start = text.index(self.kernel)
        brace = text.index("{", start)
        end = _Code(text).matching(brace, "{", "}")
        body = text[brace:end]
        at = -1
        for _ in range(self.nth):
            at = body.index(self.old, at + 1)
        body = body[:at] + self.new + body[at + len(self.old):]
        return text[:brace] + body + text[end:]


TRANSFORMS_CU = CSRC / "image" / "transforms_cuda.cu"
DECODE_CU = CSRC / "image" / "decode_cuda.cu"
COLOR_CU = CSRC / "image" / "color_cuda.cu"
PAD_CU = CSRC / "image" / "pad_cuda.cu"
MUTATIONS = [
    # The barrier between a chunk's vertical pass and the next chunk's horizontal one.
    Mutation("resample: second __syncthreads() removed", TRANSFORMS_CU, "resample_kernel(", "__syncthreads();",
             "/* removed */", 2, "tsan", "resize", ("ThreadSanitizer: data race",), small=True),
    # OpenCV's vertical taps read one row past the chunk: a poisoned shared row
    # (a mismatch), or past the array when the chunk is full (UBSan's bounds check).
    Mutation("resample: chunk bound r < rows off by one", TRANSFORMS_CU, "resample_kernel(", "r < rows",
             "r <= rows", 1, "asan", "resize", ("bytes differ", "runtime error: index 64 out of bounds", "AddressSanitizer"),
             small=True),
    # The decode kernel writes one pixel past each image.
    Mutation("decode: pixel bound p >= npix off by one", DECODE_CU, "decode_pixels_kernel(", "p >= npix",
             "p > npix", 1, "asan", "decode", ("AddressSanitizer: heap-buffer-overflow",)),
    # The contrast sum's tree reads lanes another thread has not added yet.
    Mutation("colour: the sum tree's __syncthreads() removed", COLOR_CU, "band_kernel(", "__syncthreads();",
             "/* removed */", 2, "tsan", "color", ("ThreadSanitizer: data race",), small=True),
    # The pixel kernel reads and writes one pixel past each row (past the image on its last row).
    Mutation("colour: pixel bound x >= width off by one", COLOR_CU, "color_kernel(", "x >= im.width",
             "x > im.width", 1, "asan", "color", ("AddressSanitizer: heap-buffer-overflow",), small=True),
    # pad writes one column past each output row (past the output on its last row).
    Mutation("pad: column bound x < ow off by one", PAD_CU, "pad_kernel(", "x < ow", "x <= ow", 1, "asan", "pad",
             ("AddressSanitizer: heap-buffer-overflow",)),
]


def check_mutation(m: Mutation, cases: Path, small: Path | None = None) -> tuple[bool, str, float]:
    """(caught, evidence, seconds) for one mutant; those marked `small` replay
    the `small` list of cases (the TSan selection) when given."""
    t0 = time.perf_counter()
    build(m.flavour)  # the objects the mutant shares
    b = build(m.flavour, mutant={m.source: m.apply(m.source.read_text())}, name=re.sub(r"\W+", "-", m.name))
    args = [str(cases), "--ops", m.ops]
    if m.small and small is not None:
        args += ["--cases-from", str(small)]
    r = run(b, m.flavour, args)
    caught = r.returncode != 0 and any(c in r.output for c in m.caught_by)
    lines = [ln for ln in r.output.splitlines() if any(c in ln for c in m.caught_by)]
    return caught, (lines[0] if lines else r.output[-500:]), time.perf_counter() - t0


# --------------------------------------------------------------------------- ordering


def run_ordering(work: Path, scenarios: list[str] | None = None, *, eager_delay_us: int | None = None,
                 b: Build | None = None, timeout: float = 120) -> tuple[Build, dict[str, Run]]:
    """Scenarios of ordering_tests (every one by default), each in a process of
    its own, in `work`; `eager_delay_us`: with the streams run eagerly (each
    operation as soon as it is queued, after that delay) instead of lazily."""
    b = b or build("asan", target="ordering_tests")
    env = {**os.environ, **FLAVOURS["asan"]["env"]}
    names = scenarios or subprocess.run([str(b.exe), "--list"], capture_output=True, text=True, check=True,
                                        env=env).stdout.split()
    old = {k: os.environ.get(k) for k in ("GDSIO_EMU_STREAMS", "GDSIO_EMU_DELAY_US")}
    try:
        if eager_delay_us is not None:
            os.environ["GDSIO_EMU_STREAMS"] = "eager"
            os.environ["GDSIO_EMU_DELAY_US"] = str(eager_delay_us)
        else:
            for k in old:
                os.environ.pop(k, None)
        return b, {n: run(b, "asan", [n], timeout=timeout, cwd=work) for n in names}
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass(frozen=True)
class OrderingMutation:
    """A wait the pinned pipeline or the staging ring must make, removed; the
    ordering scenario that must then fail, and what its output must say."""

    name: str
    source: Path
    function: str  # where the text is changed (Mutation.apply's `kernel`)
    old: str
    new: str
    scenario: str
    caught_by: tuple[str, ...]

    def apply(self, text: str) -> str:
        return Mutation(self.name, self.source, self.function, self.old, self.new, 1, "asan", "", ()).apply(text)


STAGING_PIPELINE = CSRC / "io" / "staging_pipeline.cpp"
STAGING_RING = CSRC / "io" / "staging_ring.cpp"
PINNED_READER = CSRC / "io" / "pinned_reader.cpp"
_REWRITTEN = ("rewritten before the copy ran", "the bytes differ", "still queued")
ORDERING_MUTATIONS = [
    # The reader refills a slot without waiting for the copy out of it of two chunks ago.
    OrderingMutation("pinned pipeline: the wait before refilling a slot dropped", STAGING_PIPELINE, "void staged_read(",
                     "if (s.pending) engine.wait(s);", "/* removed */", "pinned-pipeline", _REWRITTEN),
    # The CUDA engine's wait for a slot's event returns at once.
    OrderingMutation("pinned engine: cudaEventSynchronize of the slot's event dropped", PINNED_READER,
                     "void wait(StagingSlot& s) override", "cudaEventSynchronize(static_cast<cudaEvent_t>(s.event))",
                     "cudaSuccess", "pinned-pipeline", _REWRITTEN),
    # The remote ring hands out a slot without waiting for its copy of a round ago.
    OrderingMutation("staging ring: next() does not wait for the slot's copy", STAGING_RING, "StagingRing::next(",
                     "engine_->wait(s);", "/* removed */", "remote-ring-into-gpu-memory", _REWRITTEN),
    # close() (a failed worker's, without drain()) gives slots back before their copies' events.
    OrderingMutation("staging ring: close() releases a slot before its copy's event", STAGING_RING,
                     "void StagingRing::close(", "if (s.pending) engine_->wait(s);", "/* removed */",
                     "remote-ring-failed-worker-waits-before-release", _REWRITTEN),
]


def check_ordering_mutation(m: OrderingMutation, work: Path) -> tuple[bool, str, float]:
    """(caught, evidence, seconds): the mutant's scenario must fail, saying one of `caught_by`."""
    t0 = time.perf_counter()
    build("asan", target="ordering_tests")  # the objects the mutant shares
    b = build("asan", mutant={m.source: m.apply(m.source.read_text())}, name="ordering-" + re.sub(r"\W+", "-", m.name),
              target="ordering_tests")
    _, runs = run_ordering(work, [m.scenario], b=b)
    r = runs[m.scenario]
    caught = r.returncode != 0 and any(c in r.output for c in m.caught_by)
    lines = [ln for ln in r.output.splitlines() if any(c in ln for c in m.caught_by)]
    return caught, (lines[0] if lines else r.output[-500:]), time.perf_counter() - t0


# --------------------------------------------------------------------------- everything


# ThreadSanitizer keeps a vector clock per CUDA thread, so every barrier of a
# 256-thread block costs it 256 x 256 clock updates: it runs the shared-memory
# cases of inputs up to this size (every filter, 1 to 4 channels, single and
# multi-chunk blocks, partial tiles); ASan and UBSan run them all.
TSAN_MAX_INPUT_BYTES = 256 * 1024


def tsan_selection(shared_list: Path, out: Path) -> list[str]:
    """The shared-memory cases ThreadSanitizer replays (written to `out`)."""
    names = []
    for line in shared_list.read_text().splitlines():
        name, _, nbytes = line.rpartition("\t")
        if name and int(nbytes) <= TSAN_MAX_INPUT_BYTES:
            names.append(name)
    out.write_text("".join(n + "\n" for n in names))
    return names


@dataclass
class Report:
    asan: Run
    tsan: Run | None
    tsan_cases: list[str]
    mutants: list[tuple[Mutation, bool, str, float]]
    lines: list[str]

    @property
    def ok(self) -> bool:
        return (self.asan.returncode == 0 and self.tsan is not None and self.tsan.returncode == 0
                and all(caught for _, caught, _, _ in self.mutants))


def check_all(cases: Path, *, mutations: bool = True, work: Path | None = None) -> Report:
    """The ASan+UBSan replay of every case, the TSan replay of the small
    shared-memory ones, and (optionally) the mutants; a line per step."""
    work = work or cases.parent
    lines = []
    shared = work / "shared-cases.txt"
    b = build("asan")
    lines.append(f"asan+ubsan build: {b.seconds:.1f} s{' (cached)' if b.cached else ''}")
    asan = run(b, "asan", [str(cases), "--self-test", "--shared-cases-out", str(shared)])
    lines.append(f"asan+ubsan run ({asan.seconds:.1f} s, rc {asan.returncode}): {asan.summary}")
    if asan.returncode != 0:
        lines.append(asan.output[-6000:])
    t = build("tsan")
    lines.append(f"tsan build: {t.seconds:.1f} s{' (cached)' if t.cached else ''}")
    selected = work / "tsan-cases.txt"
    names = tsan_selection(shared, selected) if shared.exists() else []
    tsan = None
    if names:
        tsan = run(t, "tsan", [str(cases), "--self-test", "--cases-from", str(selected)])
        lines.append(f"tsan run ({tsan.seconds:.1f} s, rc {tsan.returncode}): {tsan.summary}")
        if tsan.returncode != 0:
            lines.append(tsan.output[-6000:])
    else:
        lines.append("tsan: no shared-memory case to run")
    mutants = []
    for m in MUTATIONS if mutations else []:
        caught, why, secs = check_mutation(m, cases, selected if names else None)
        mutants.append((m, caught, why, secs))
        lines.append(f"mutant '{m.name}' ({m.flavour}): {'caught' if caught else 'NOT CAUGHT'} in {secs:.1f} s: {why}")
    return Report(asan, tsan, names, mutants, lines)


# --------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", type=Path, help="the case file (tests/kernels/cases.py writes it)")
    ap.add_argument("--no-mutations", action="store_true", help="skip the mutants")
    a = ap.parse_args(argv)
    rep = check_all(a.cases.resolve(), mutations=not a.no_mutations)
    print("\n".join(rep.lines))
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.exit(main())
