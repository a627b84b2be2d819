"""The device check's steps, budget and report (bench/device_check.sh runs this).

One call on a lent GPU machine (../shared/device/README.md) must fit a
15-minute lease with room for a rerun, so the whole check keeps to one wall
budget (GDSIO_CHECK_BUDGET, 420 s). The steps run in priority order:

  wheels, machine, build (sm_90 only, no build isolation), import, doctor,
  the GPU kernel tests, one read per backend and destination, nvJPEG, the
  loader, the figures; then, only if time is left, the other GPU tests, a
  sampled profile of the loader, and the copy benchmarks.

A test process killed by a signal (the first GPU run's three segfaults) is
followed, where gdb is there and time is left, by that one test again under
gdb, whose native backtrace goes into the report; cuFile's log goes to the
scratch folder and its ERROR lines into the report (cuFile says why it
refuses a file only there).

Each step declares an estimate (seconds on the 16-core H200 machine) and a
cap. A step starts only when the time left, less a reserve for the report,
covers its estimate, and then runs under min(cap, time left); a step that
does not fit is cut (not started) and a later, shorter one may still run.
The estimates of the steps up to the figures, plus the reserve, add to at
most the 420 s default budget (tests/tools/test_device_check.py checks it).

A dry run (--dry-run or GDSIO_CHECK_DRY_RUN=1) is for a machine without a
GPU: the steps that need one are stubbed (not run; each records its estimate
and advances the budget's clock by it) while the others run for real and
are timed. Its report says so at the top and claims no GPU result.

Output under $OUT (or ./device-check-out), at most 8 files, none in a folder:
report.md (with the decode profile), report.json, steps.log, doctor.json, figures.json, loader-profile.json,
bench-warm.json, bench-cold.json. Usage:

    python3 bench/device_check.py [--dry-run] [--plan]

Environment (all optional):
  GDSIO_CHECK_BUDGET     wall budget in seconds (420)
  GDSIO_CHECK_DRY_RUN    1: as --dry-run
  GDSIO_CHECK_SKIP       steps not to run, comma-separated (e.g. build: the
                         installed gdsio in GDSIO_CHECK_SITE is used as it is)
  GDSIO_CHECK_ESTIMATES  step=seconds,...: overrides estimates (e.g. with the
                         times a real run measured)
  GDSIO_CHECK_CLOCK      stubs: the budget counts only the stubs' estimates,
                         not the real time (deterministic, for tests)
  GDSIO_CHECK_SITE       where the build is installed (/tmp/gdsio-site)
  GDSIO_CHECK_BUILD_DIR  scikit-build-core's build folder (/tmp/gdsio-build)
  GDSIO_CHECK_WHEELS     the carried wheels (.whl); installed into
                         GDSIO_CHECK_WHEEL_SITE (/tmp/site), put on PYTHONPATH
  GDSIO_CHECK_IMAGES     JPEGs in the figures' loader folder (2048)
  GDSIO_CHECK_SIZES, GDSIO_CHECK_REPEAT   the copy benchmarks (64M,512M; 3)
  GDSIO_CHECK_TEST_TIMEOUT  seconds one GPU test may take (60)
  GDSIO_BENCH_DIR        where test and benchmark files go (default: the
                         best of /tmp, /var/tmp and the repo by file system)
  GDSIO_COMMIT           the commit (.git does not travel to the machine)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESERVE_S = 15  # the final report (one gdsio import to render doctor and bench) and a step's kill grace
KILL_GRACE_S = 5
MAX_OUT_FILES = 8

# The kernel tests: every CUDA kernel against its CPU twin (transforms v1 and v2,
# and gdsio.image's pixel kernels); the nvJPEG step runs the rest of test_image_gpu.py.
KERNEL_TESTS = [
    "tests/transforms/test_transforms_gpu.py",
    "tests/transforms/test_transforms_v2_gpu.py",
    "tests/image/test_image_gpu.py::test_kernels_equal_the_cpu_twin",
    "tests/image/test_image_gpu.py::test_one_launch_per_128_images",
    "tests/image/test_image_gpu.py::test_big_image_and_side_stream",
    "tests/image/test_image_gpu.py::test_read_uncompressed_files_into_gpu",
    "tests/image/test_image_gpu.py::test_decode_leaves_the_current_device_alone",
]
IMAGE_GPU_TESTS = "tests/image/test_image_gpu.py"
# One read per backend (auto, pinned, cufile, kvikio: those usable there) and
# destination (torch and cupy device buffers; the host read is the reference).
READ_TESTS = "tests/io/test_gpu_io.py"
READ_SELECT = "test_backend_matches_host_read and 1048579"
LOADER_TESTS = "tests/data/test_loader_gpu.py"

IMPORT_CHECK = r"""
import os, sys
import gdsio, gdsio._core as c, gdsio.image as gi
site, gpu, built = sys.argv[1], "--gpu" in sys.argv, "--built" in sys.argv
print("gdsio:", gdsio.__file__)
print("cuda architectures:", c.cuda_architectures)
print("cuda status:", c.cuda_status())
ok = True
if os.path.commonpath([os.path.realpath(gdsio.__file__), os.path.realpath(site)]) != os.path.realpath(site):
    ok = False
    print(f"FAIL: gdsio was imported from {gdsio.__file__}, not from the build in {site}")
if built and {a.split("-")[0] for a in c.cuda_architectures.split(",")} != {"90"}:
    ok = False
    print("FAIL: this build is not for sm_90 alone")
probe = c.kernel_probe(0)
print("kernel probe:", probe or "ok")
if gpu and probe:
    ok = False
print("backends:", [(b.name, b.usable, b.reason) for b in gdsio.backends()])
st = gi.nvjpeg_status()
print("nvjpeg:", st)
if gpu:
    print("nvjpeg backends:", gi.nvjpeg_backends(0))
else:
    print("dry run: no GPU here, so the kernel probe's answer is expected to fail and nvJPEG's devices are not asked")
sys.exit(0 if ok else 1)
"""

# A folder for test and benchmark files: a real disk (ext4/xfs) where O_DIRECT works beats tmpfs.
PICK_BENCH_DIR = r"""
import os, sys
from gdsio.platform import filesystems
best = None
for d in sys.argv[1:]:
    if not os.path.isdir(d) or not os.access(d, os.W_OK):
        continue
    fs = filesystems.filesystem_of(d)["fs_type"]
    rank = (fs in ("ext4", "xfs")) * 2 + filesystems.o_direct_probe(d)["ok"]
    if best is None or rank > best[0]:
        best = (rank, d)
print(best[1] if best else "/tmp")
"""

RENDER = r"""
import json, os, sys
run = sys.argv[1]
p = os.path.join(run, "doctor.json")
if os.path.exists(p):
    from gdsio.tools.doctor import render_doctor
    with open(os.path.join(run, "doctor.md"), "w") as f:
        f.write(render_doctor(json.load(open(p)), columns=110))
for mode in ("warm", "cold"):
    p = os.path.join(run, f"bench-{mode}.json")
    if os.path.exists(p):
        from gdsio.tools.bench import render_markdown
        with open(os.path.join(run, f"bench-{mode}.md"), "w") as f:
            f.write(render_markdown(json.load(open(p))))
"""


@dataclass
class Step:
    """One step of the check.

    estimate_s: expected wall time on the 16-core H200 machine (a guess until a
    real run measures it; GDSIO_CHECK_ESTIMATES overrides). cap_s: the most it
    may take. gpu: needs a GPU (stubbed in a dry run). outputs: files the step
    writes into the scratch folder that are copied to $OUT when it ends.
    """

    name: str
    title: str
    estimate_s: int
    cap_s: int
    gpu: bool
    basis: str  # why this estimate
    cmd: list[str] = field(default_factory=list)
    pytest: bool = False
    ok_codes: tuple[int, ...] = (0,)
    stdout_file: str | None = None
    outputs: tuple[str, ...] = ()
    needs_bench_dir: bool = False
    # The outcome.
    status: str = "pending"
    reason: str = ""
    limit_s: float | None = None
    wall_s: float | None = None
    cpu_s: float | None = None
    rc: int | None = None
    summary: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    triage: list[str] = field(default_factory=list)  # a crashed test's native backtrace (gdb)


def env_int(name: str, default: int) -> int:
    v = os.environ.get(name, "")
    try:
        return int(v) if v else default
    except ValueError:
        sys.exit(f"device_check: {name}={v!r} is not a whole number of seconds")


class Config:
    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run
        self.budget = env_int("GDSIO_CHECK_BUDGET", 420)
        self.skip = {s.strip() for s in os.environ.get("GDSIO_CHECK_SKIP", "").split(",") if s.strip()}
        self.clock = os.environ.get("GDSIO_CHECK_CLOCK", "real")
        if self.clock not in ("real", "stubs"):
            sys.exit(f"device_check: GDSIO_CHECK_CLOCK={self.clock!r}: use real or stubs")
        if self.clock == "stubs" and not dry_run:
            sys.exit("device_check: GDSIO_CHECK_CLOCK=stubs is for a dry run only")
        self.site = os.environ.get("GDSIO_CHECK_SITE", "/tmp/gdsio-site")
        self.build_dir = os.environ.get("GDSIO_CHECK_BUILD_DIR", "/tmp/gdsio-build")
        self.wheels = os.environ.get("GDSIO_CHECK_WHEELS", os.path.join(REPO, ".whl"))
        self.wheel_site = os.environ.get("GDSIO_CHECK_WHEEL_SITE", "/tmp/site")
        self.images = env_int("GDSIO_CHECK_IMAGES", 2048)
        self.sizes = os.environ.get("GDSIO_CHECK_SIZES", "64M,512M")
        self.repeat = env_int("GDSIO_CHECK_REPEAT", 3)
        self.test_timeout = env_int("GDSIO_CHECK_TEST_TIMEOUT", 60)
        self.has_pytest_timeout = importlib.util.find_spec("pytest_timeout") is not None
        self.out = os.environ.get("OUT") or os.path.join(REPO, "device-check-out")
        self.python = sys.executable
        self.estimates: dict[str, int] = {}
        for item in filter(None, os.environ.get("GDSIO_CHECK_ESTIMATES", "").split(",")):
            k, _, v = item.partition("=")
            try:
                self.estimates[k.strip()] = int(v)
            except ValueError:
                sys.exit(f"device_check: GDSIO_CHECK_ESTIMATES: {item!r} is not step=seconds")


def make_steps(cfg: Config, run: str) -> list[Step]:
    """The steps in priority order, with their estimates on the 16-core H200 machine."""
    py = cfg.python
    # -v: a line per test in steps.log even if the step is cut; a per-test limit where pytest-timeout is
    # installed (the GPU machine's image has it), else faulthandler dumps a hung test's stacks.
    timeout = ["--timeout", str(cfg.test_timeout)] if cfg.has_pytest_timeout else []
    pytest = [py, "-m", "pytest", "-c", f"{REPO}/pyproject.toml", "--rootdir", REPO, "-p", "no:cacheprovider",
              "-m", "gpu", "-v", "-rfEs", "--durations=10", "-o", "faulthandler_timeout=60", *timeout,
              "--continue-on-collection-errors"]
    r = lambda p: f"{REPO}/{p}"  # noqa: E731
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else "")
    wheels = sorted(os.path.join(cfg.wheels, f) for f in os.listdir(cfg.wheels)
                    if f.endswith(".whl")) if os.path.isdir(cfg.wheels) else []
    # A dry run installs the wheels (they are timed) where nothing imports them:
    # they are built for the GPU machine's Python 3.12 and would shadow this one's.
    wheel_site = os.path.join(run, "wheel-site") if cfg.dry_run else cfg.wheel_site
    machine = ('nvidia-smi; echo; df -hT /tmp /dev/shm "$0"; free -g; echo; nvcc --version | tail -2; '
               'cmake --version | head -1; "$1" -m pip list 2>/dev/null | grep -i -E "^(torch|torchvision|numpy|pillow|'
               'cupy[-a-z0-9]*|kvikio[-a-z0-9]*|libkvikio[-a-z0-9]*|nvidia-cufile[-a-z0-9]*|nvidia-nvjpeg[-a-z0-9]*|'
               'cuda-pathfinder|pytest|pytest-timeout|pytest-benchmark|safetensors|pybind11|scikit-build-core|'
               'ninja|cmake) "')
    steps = [
        Step("wheels", "install the carried wheels", 10, 60, False,
             "pip --no-index of 5 wheels (8 MB); measured by the dry run",
             [py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--upgrade",
              "--target", wheel_site,
              # pip checks the wheels against the Python it installs for: the GPU machine's 3.12.
              *(["--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:"] if cfg.dry_run else []),
              *wheels]),
        Step("machine", "the machine (nvidia-smi, disks, versions)", 5, 20, False,
             "nvidia-smi, df, free, pip list", ["bash", "-c", machine, REPO, py]),
        Step("build", "build gdsio for sm_90 alone, no build isolation", 60, 240, False,
             "the dry run's per-file compile times (ninja log) spread over 16 cores",
             ["env", "GDSIO_WITH_CUDA=ON", "GDSIO_CUDA_ARCHITECTURES=90-real", *([f"CUDACXX={nvcc}"] if nvcc else []),
              f"CMAKE_BUILD_PARALLEL_LEVEL={os.cpu_count() or 1}",
              py, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-compile", "--upgrade", "-q",
              "--target", cfg.site, f"--config-settings=build-dir={cfg.build_dir}", REPO]),
        Step("import", "import the build; kernel probe; backends; nvJPEG", 15, 60, False,
             "torch import, a CUDA context and nvJPEG's load",
             [py, "-c", IMPORT_CHECK, cfg.site] + ([] if cfg.dry_run else ["--gpu"])),
        Step("doctor", "gdsio doctor --json", 15, 60, False,
             "the doctor's probes (cuFile driver open, O_DIRECT)",
             [py, "-m", "gdsio", "doctor", "@BENCH_DIR@", "--json"],
             ok_codes=(0, 1), stdout_file="doctor.json", outputs=("doctor.json",), needs_bench_dir=True),
        Step("kernels", "pytest -m gpu: the kernels against their CPU twins", 45, 120, True,
             "239 small tests; pytest, torch and CUDA start about 10 s",
             [*pytest, "--basetemp", "@BENCH_DIR@/gdsio-pytest-kernels", *map(r, KERNEL_TESTS)],
             pytest=True, needs_bench_dir=True),
        Step("reads", "pytest -m gpu: one read per backend and destination", 20, 60, True,
             "at most 8 reads of 1 MiB, cuFile's driver open, kvikio's import",
             [*pytest, "--basetemp", "@BENCH_DIR@/gdsio-pytest-reads", "-k", READ_SELECT, r(READ_TESTS)],
             pytest=True, needs_bench_dir=True),
        Step("nvjpeg", "pytest -m gpu: nvJPEG against Pillow", 30, 90, True,
             "24 tests on photos, batches of at most 300 images",
             [*pytest, "--basetemp", "@BENCH_DIR@/gdsio-pytest-nvjpeg", r(IMAGE_GPU_TESTS),
              *[a for t in KERNEL_TESTS if t.startswith(IMAGE_GPU_TESTS + "::") for a in ("--deselect", t)]],
             pytest=True, needs_bench_dir=True),
        Step("loader", "pytest -m gpu: the loader", 30, 90, True,
             "11 tests of small folders, with worker threads",
             [*pytest, "--basetemp", "@BENCH_DIR@/gdsio-pytest-loader", r(LOADER_TESTS)],
             pytest=True, needs_bench_dir=True),
        Step("figures", "the issues' figures (bench/figures.py)", 150, 240, True,
             f"{cfg.images} JPEGs made and loaded 3 ways, ResNet-50 35 steps, 4 GiB safetensors warm and cold",
             [py, r("bench/figures.py"), "--images", str(cfg.images), "--tmpdir", "@BENCH_DIR@",
              "--json", f"{run}/figures.json", "--md", f"{run}/figures.md"],
             outputs=("figures.json",), needs_bench_dir=True),
        # Below: only if time is left.
        Step("gpu-rest", "pytest -m gpu: the other GPU tests", 45, 120, True,
             "35 tests: streams, offsets, tensors, bench and doctor on a GPU",
             [*pytest, "--basetemp", "@BENCH_DIR@/gdsio-pytest-rest",
              *[a for t in ("tests/transforms", IMAGE_GPU_TESTS, LOADER_TESTS) for a in ("--ignore", r(t))],
              "-k", f"not ({READ_SELECT})", r("tests")],
             pytest=True, needs_bench_dir=True),
        Step("loader-profile", "where the loader's time goes (bench/profile_loader.py)", 40, 90, True,
             "1024 JPEGs made, two passes at batch 256, the second sampled every 2 ms",
             [py, r("bench/profile_loader.py"), "--images", "1024", "--tmpdir", "@BENCH_DIR@",
              "--json", f"{run}/loader-profile.json", "--md", f"{run}/loader-profile.md"],
             outputs=("loader-profile.json",), needs_bench_dir=True),
        Step("decode-profile", "where gdsio.image.decode's host time goes (bench/profile_decode.py)", 20, 60, True,
             "256 photographs decoded ~40 times by gdsio and torchvision, 10 of them under cProfile",
             [py, r("bench/profile_decode.py")], stdout_file="decode-profile.md"),
        Step("bench-warm", "gdsio bench --warm", 30, 90, True, f"sizes {cfg.sizes}, {cfg.repeat} repeats, every path",
             [py, "-m", "gdsio", "bench", "--sizes", cfg.sizes, "--repeat", str(cfg.repeat), "--warm",
              "--tmpdir", "@BENCH_DIR@", "--json", f"{run}/bench-warm.json"],
             outputs=("bench-warm.json",), needs_bench_dir=True),
        Step("bench-cold", "gdsio bench --cold", 40, 90, True, "as warm, the page cache evicted each repeat",
             [py, "-m", "gdsio", "bench", "--sizes", cfg.sizes, "--repeat", str(cfg.repeat), "--cold",
              "--tmpdir", "@BENCH_DIR@", "--json", f"{run}/bench-cold.json"],
             outputs=("bench-cold.json",), needs_bench_dir=True),
        Step("pytest-benchmark", "pytest-benchmark bench/ (64M)", 45, 60, True, "the harness at 64 MiB",
             ["env", "GDSIO_BENCH_SIZES=64M", py, "-m", "pytest", "-c", f"{REPO}/pyproject.toml", "--rootdir", REPO,
              "-p", "no:cacheprovider", "-q", r("bench"), "--benchmark-max-time=0.5",
              "--benchmark-columns=median,rounds", "--basetemp", "@BENCH_DIR@/gdsio-pytest-bench"],
             pytest=True, needs_bench_dir=True),
    ]
    for s in steps:
        if s.name in cfg.estimates:
            s.estimate_s = cfg.estimates[s.name]
            s.basis = "GDSIO_CHECK_ESTIMATES"
    if not wheels:
        steps[0].cmd = []  # nothing to install: skipped with the reason below
    return steps


PRIORITY_END = "figures"  # the steps up to here must fit the default budget


def planned_total(steps: list[Step]) -> int:
    """The estimates of the steps up to the figures, plus the reserve."""
    names = [s.name for s in steps]
    return RESERVE_S + sum(s.estimate_s for s in steps[: names.index(PRIORITY_END) + 1])


class Clock:
    """Seconds used of the budget: real time plus the stubs' estimates ('real'),
    or the stubs' estimates alone ('stubs', deterministic for tests)."""

    def __init__(self, mode: str) -> None:
        self.mode, self.t0, self.stubbed = mode, time.monotonic(), 0.0

    def used(self) -> float:
        return self.stubbed + (time.monotonic() - self.t0 if self.mode == "real" else 0.0)

    def real(self) -> float:
        return time.monotonic() - self.t0


CRASHED = re.compile(r"^(\S+::\S+) Fatal Python error", re.M)
TRIAGE_S = 90  # the most a crashed test's rerun under gdb may take

PYTEST_SUMMARY = re.compile(r"^=+ (?P<s>.*?) in [\d.]+s(?: \([^)]*\))? =+$")
PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|skipped|deselected|xfailed|xpassed|errors?|warnings?)")
PYTEST_VERBOSE = re.compile(r"::\S+ (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")


def parse_pytest(text: str, step: Step) -> None:
    lines = text.splitlines()
    for line in reversed(lines):
        m = PYTEST_SUMMARY.match(line.strip())
        if m:
            step.summary = m.group("s")
            step.counts = {("errors" if k.startswith("error") else k): int(n)
                           for n, k in PYTEST_COUNT.findall(m.group("s")) if not k.startswith("warning")}
            break
    else:  # cut short: count the -v lines
        counts: dict[str, int] = {}
        for m in PYTEST_VERBOSE.finditer(text):
            k = m.group(1).lower()
            counts[k] = counts.get(k, 0) + 1
        if counts:
            step.counts = counts
            step.summary = ("no summary (cut short); from the -v lines: "
                            + ", ".join(f"{v} {k}" for k, v in counts.items()))
    step.problems = [ln for ln in lines if ln.startswith(("FAILED ", "ERROR ", "SKIPPED ["))][:60]


class Check:
    def __init__(self, cfg: Config, argv: list[str]) -> None:
        self.cfg = cfg
        self.argv = argv
        self.clock = Clock(cfg.clock)
        self.started = time.time()
        os.makedirs(cfg.out, exist_ok=True)
        self.run = tempfile.mkdtemp(prefix="gdsio-check.")  # not the repo root: `import gdsio` finds the build
        self.log = os.path.join(cfg.out, "steps.log")
        open(self.log, "w").close()
        self.steps = make_steps(cfg, self.run)
        self.bench_dir: str | None = os.environ.get("GDSIO_BENCH_DIR") or None
        self.env = dict(os.environ)
        paths = [cfg.site] + ([] if cfg.dry_run else [cfg.wheel_site])
        if os.environ.get("PYTHONPATH"):
            paths.append(os.environ["PYTHONPATH"])
        self.env["PYTHONPATH"] = os.pathsep.join(paths)
        # No network there: pip must not look for itself or for packages online.
        self.env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INDEX="1", PIP_NO_INPUT="1", PYTHONUNBUFFERED="1")
        # A GPU test that skips there is a failure of the check, not a pass (tests/gpu_gate.py).
        self.env["GDSIO_REQUIRE_GPU"] = "1"
        # cuFile says why it refuses a file only in its log: keep it (its ERROR lines go into the report).
        self.cufile_log = self.env.setdefault("CUFILE_LOGFILE_PATH", os.path.join(self.run, "cufile.log"))
        self.commit = self._commit()
        self.machine = self._machine()
        self.build_stats: dict[str, Any] | None = None
        self.final = False
        self.current: subprocess.Popen[bytes] | None = None
        self.running: Step | None = None

    # ------------------------------------------------------------------ facts

    def _commit(self) -> str:
        c = os.environ.get("GDSIO_COMMIT")
        if c:
            return f"{c} (GDSIO_COMMIT; the working tree sent may hold uncommitted changes)"
        try:
            sha = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True,
                                 timeout=10).stdout.strip()
            dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return "unknown (no GDSIO_COMMIT, no git)"
        if not sha:
            return "unknown (no GDSIO_COMMIT, no git)"
        return sha + (" (with uncommitted changes in tracked files)" if dirty else "")

    def _machine(self) -> dict[str, Any]:
        m: dict[str, Any] = {"cpus": os.cpu_count(), "python": sys.version.split()[0], "kernel": os.uname().release}
        try:
            with open("/proc/cpuinfo") as f:
                m["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
            with open("/proc/meminfo") as f:
                m["memory_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
            with open("/proc/loadavg") as f:
                m["load_before"] = f.read().split()[0]
        except OSError:
            pass
        try:
            p = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20)
            gpus = [ln.strip() for ln in p.stdout.splitlines() if ln.strip()]
            m["gpu"] = gpus or None
            m["gpu_note"] = "" if gpus else f"nvidia-smi gave nothing (exit {p.returncode})"
        except (OSError, subprocess.SubprocessError) as e:
            m["gpu"] = None
            m["gpu_note"] = f"no nvidia-smi ({e.__class__.__name__})"
        return m

    # ------------------------------------------------------------------ running

    def left(self) -> float:
        return self.cfg.budget - RESERVE_S - self.clock.used()

    def resolve(self, cmd: list[str]) -> list[str]:
        return [a.replace("@BENCH_DIR@", self.bench_dir or "/tmp") for a in cmd]

    def pick_bench_dir(self) -> None:
        if self.bench_dir:
            return
        try:
            p = subprocess.run([self.cfg.python, "-c", PICK_BENCH_DIR, "/tmp", "/var/tmp", REPO], cwd=self.run,
                               env=self.env, capture_output=True, text=True, timeout=max(1, min(20, self.left())))
            self.bench_dir = p.stdout.strip().splitlines()[-1] if p.returncode == 0 and p.stdout.strip() else "/tmp"
        except subprocess.TimeoutExpired:
            self.bench_dir = "/tmp"

    def stop(self, signum: int, _frame: Any) -> None:
        """Stopped from outside (a run's timeout): end the step running, report what was done."""
        if self.current is not None and self.current.poll() is None:
            # TERM first: ninja passes it on to its compilers, which it puts in process groups of their own.
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(self.current.pid, sig)
                    self.current.wait(timeout=2)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue
        s = self.running
        if s is not None and s.status == "pending":
            s.status, s.reason = "stopped", f"the check was stopped (signal {signum}) while it ran"
        self.final = True
        self.write_report()
        shutil.rmtree(self.run, ignore_errors=True)
        sys.exit(128 + signum)

    def go(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        print(f"gdsio device check{' (DRY RUN: GPU steps stubbed)' if self.cfg.dry_run else ''}: "
              f"budget {self.cfg.budget}s, commit {self.commit}, output in {self.cfg.out}", flush=True)
        self.write_report()
        for s in self.steps:
            self.one(s)
            self.write_report()
        self.finish()
        return 0

    def one(self, s: Step) -> None:
        left = self.left()
        after_build = [t.name for t in self.steps].index(s.name) > [t.name for t in self.steps].index("build")
        if s.name in self.cfg.skip:
            s.status, s.reason = "skipped", "GDSIO_CHECK_SKIP names it"
        elif s.name == "wheels" and not s.cmd:
            s.status, s.reason = "skipped", (f"no wheels in {self.cfg.wheels} (../shared/device/fetch-wheels.sh, "
                                             "then carry .whl): kvikio and nvJPEG tests will fail there")
        elif left < s.estimate_s:
            s.status = "cut"
            s.reason = f"needs ~{s.estimate_s}s, {max(0, int(left))}s of the budget left"
        elif after_build and self.status("build") not in ("passed", "skipped"):
            s.status, s.reason = "skipped", f"the build did not pass ({self.status('build')}): nothing to check"
        elif s.gpu and self.status("import") not in ("passed", "skipped"):
            s.status, s.reason = "skipped", f"the import step did not pass ({self.status('import')})"
        elif self.cfg.dry_run and s.gpu:
            s.status = "stubbed"
            s.reason = f"not run: needs a GPU; counted at its estimate, {s.estimate_s}s"
            self.clock.stubbed += s.estimate_s
        else:
            # A dry run's machine is slower than the GPU machine: the steps it runs have the budget as their limit.
            self.execute(s, left if self.cfg.dry_run else min(s.cap_s, left))
        print(f"[{time.strftime('%H:%M:%S')}] {s.name}: {s.status}"
              + (f" in {s.wall_s:.0f}s" if s.wall_s is not None else "") + (f" ({s.reason})" if s.reason else ""),
              flush=True)

    def status(self, name: str) -> str:
        return next(s.status for s in self.steps if s.name == name)

    def execute(self, s: Step, limit: float) -> None:
        self.running = s
        if s.needs_bench_dir:
            self.pick_bench_dir()
        cmd = self.resolve(s.cmd)
        if s.name == "import" and self.status("build") == "passed":
            cmd.append("--built")  # this check's build, so it must be for sm_90 alone
        s.limit_s = round(limit)
        if s.name == "build" and os.path.isdir(self.cfg.build_dir):
            s.reason = f"the build folder {self.cfg.build_dir} was there already: an incremental build"
        with open(self.log, "a") as log:
            log.write(f"\n===== {s.name} (limit {s.limit_s}s): {shlex.join(cmd)}\n")
            log.flush()
            start_off = log.tell()
            out = open(os.path.join(self.run, s.stdout_file), "w") if s.stdout_file else log
            t0, cpu0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
            try:
                # Its own process group, so a kill reaches its children; not its own session, which
                # the device tool would leave running after the call.
                p = subprocess.Popen(cmd, cwd=self.run, env=self.env, stdout=out, stderr=log,
                                     stdin=subprocess.DEVNULL, preexec_fn=os.setpgrp)
                self.current = p
            except OSError as e:
                s.wall_s, s.status, s.reason = 0.0, "failed", f"could not start: {e}"
                return
            try:
                s.rc = p.wait(timeout=limit)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
                for sig in (signal.SIGTERM, signal.SIGKILL):
                    try:
                        os.killpg(p.pid, sig)
                    except ProcessLookupError:
                        break
                    try:
                        s.rc = p.wait(timeout=KILL_GRACE_S)
                        break
                    except subprocess.TimeoutExpired:
                        continue
            s.wall_s = round(time.monotonic() - t0, 1)
            cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # its processes' CPU time, once waited for
            s.cpu_s = round(cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime, 1)
            if out is not log:
                out.close()
        with open(self.log, errors="replace") as f:
            f.seek(start_off)
            text = f.read()
        if timed_out:
            s.status = "timed out"
            s.reason = (f"stopped at its limit, {s.limit_s}s"
                        + (" (its cap)" if s.limit_s >= s.cap_s else " (what was left of the budget)"))
        elif s.rc in s.ok_codes:
            s.status = "passed"
        else:
            s.status = "failed"
            s.reason = f"exit {s.rc}"
        if s.pytest:
            parse_pytest(text, s)
            if not timed_out and s.rc is not None and s.rc < 0:
                self.triage(s, text)
        if s.status != "passed":
            s.tail = [ln for ln in text.splitlines() if ln.strip()][-12:]
        for name in s.outputs:
            src = os.path.join(self.run, name)
            if os.path.isfile(src) and os.path.getsize(src) > 0:
                shutil.copyfile(src, os.path.join(self.cfg.out, name))
        if s.name == "build":
            self.build_stats = ninja_stats(self.cfg.build_dir, s.wall_s, s.cpu_s)

    def triage(self, s: Step, text: str) -> None:
        """The test that crashed the step's process (its -v line ends in "Fatal Python error"), run alone
        under gdb: the crashing thread's native frames go into the report."""
        m = CRASHED.search(text)
        gdb = shutil.which("gdb") or shutil.which("cuda-gdb")
        limit = min(TRIAGE_S, self.left() - 10)
        if m is None or gdb is None or limit < 20:
            why = ("no crashed test in its output" if m is None else "no gdb there" if gdb is None
                   else f"{max(0, int(self.left()))}s of the budget left")
            s.triage = [f"no backtrace: {why}"]
            return
        node = m.group(1)  # as pytest printed it, relative to the steps' folder, where gdb runs too
        timeout = ["--timeout", str(self.cfg.test_timeout)] if self.cfg.has_pytest_timeout else []
        cmd = [gdb, "-q", "-batch", "-iex", "set auto-solib-add off", "-ex", "set pagination off",
               "-ex", "handle SIGALRM nostop noprint pass", "-ex", "run", "-ex", "sharedlibrary _core",
               "-ex", "sharedlibrary libstdc", "-ex", "sharedlibrary libc", "-ex", "bt 30",
               "--args", self.cfg.python, "-m", "pytest", "-c", f"{REPO}/pyproject.toml", "--rootdir", REPO,
               "-p", "no:cacheprovider", "-p", "no:faulthandler", "-m", "gpu", "-x", "-q", *timeout,
               "--basetemp", f"{self.bench_dir or '/tmp'}/gdsio-pytest-triage", node]
        try:
            p = subprocess.run(cmd, cwd=self.run, env=self.env, capture_output=True, text=True, errors="replace",
                               timeout=limit, stdin=subprocess.DEVNULL)
            out = p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or "") if isinstance(e.stdout, str) else ""
            out += f"\n(gdb stopped at {limit:.0f}s)"
        with open(self.log, "a") as log:
            log.write(f"\n===== {s.name}: {node} again under gdb\n{out}\n")
        lines = out.splitlines()
        at = next((i for i, ln in enumerate(lines) if "received signal" in ln), None)
        s.triage = ([f"{node} under gdb:"] + [ln for ln in lines[at:] if ln.startswith(("Thread", "#", "0x"))][:32]
                    if at is not None else [f"{node} under gdb: no signal this time (see steps.log)"])

    def cufile_errors(self) -> list[str]:
        """The distinct ERROR lines of cuFile's log (the text after the source location), in order."""
        try:
            with open(self.cufile_log, errors="replace") as f:
                lines = [ln.strip() for ln in f if " ERROR " in ln]
        except OSError:
            return []
        seen: dict[str, None] = {}
        for ln in lines:
            seen.setdefault(re.sub(r"^.*? ERROR +", "", ln), None)
        return list(seen)[:12]

    def finish(self) -> None:
        # The renders need one gdsio import; they get what is left of the reserve.
        left = self.cfg.budget - self.clock.used() - 2
        if left > 1 and any(os.path.exists(os.path.join(self.run, f))
                            for f in ("doctor.json", "bench-warm.json", "bench-cold.json")):
            try:
                subprocess.run([self.cfg.python, "-c", RENDER, self.run], cwd=self.run, env=self.env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=min(10, left))
            except subprocess.TimeoutExpired:
                pass
        self.final = True
        self.write_report()
        shutil.rmtree(self.run, ignore_errors=True)
        print(f"done in {self.clock.real():.0f}s (budget {self.cfg.budget}s); report: {self.cfg.out}/report.md",
              flush=True)

    # ------------------------------------------------------------------ report

    def command(self) -> str:
        env = [f"{k}={shlex.quote(v)}" for k, v in sorted(os.environ.items())
               if k.startswith("GDSIO_CHECK_") or k in ("GDSIO_COMMIT", "GDSIO_BENCH_DIR")]
        return " ".join([*env, "bash bench/device_check.sh", *map(shlex.quote, self.argv)])

    def doc(self) -> dict[str, Any]:
        keep = ("name", "title", "status", "reason", "estimate_s", "cap_s", "limit_s", "wall_s", "cpu_s", "rc", "gpu",
                "basis", "summary", "counts", "problems", "tail", "triage")
        steps = []
        for s in self.steps:
            d = {k: v for k, v in asdict(s).items() if k in keep}
            d["command"] = shlex.join(self.resolve(s.cmd)) if s.cmd else ""
            if s.status == "pending" and self.final:
                d["status"], d["reason"] = "not reached", "the check stopped before it"
            steps.append(d)
        try:
            with open("/proc/loadavg") as f:
                load_now = f.read().split()[0]
        except OSError:
            load_now = "?"
        doc = {
            "dry_run": self.cfg.dry_run,
            "ran_on_a_gpu": bool(self.machine.get("gpu")) and not self.cfg.dry_run,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "commit": self.commit,
            "command": self.command(),
            "machine": {**self.machine, "load_now": load_now},
            "budget_s": self.cfg.budget,
            "reserve_s": RESERVE_S,
            "clock": self.cfg.clock,
            "wall_s": round(self.clock.real(), 1),
            "budget_used_s": round(self.clock.used(), 1),
            "planned_through_figures_s": planned_total(self.steps),
            "bench_dir": self.bench_dir,
            "per_test_limit_s": self.cfg.test_timeout if self.cfg.has_pytest_timeout else None,
            "finished": self.final,
            "steps": steps,
            "cufile_errors": self.cufile_errors(),
        }
        if self.build_stats:
            doc["build"] = self.build_stats
        if self.cfg.dry_run:
            doc["projection"] = self.projection()
        return doc

    def projection(self) -> dict[str, Any]:
        """The budget on the 16-core H200 machine: each step at what it took here
        (the build at its 16-core projection from the ninja log) or its estimate,
        with the same rule as the real run (start only if the estimate fits)."""
        used, rows = 0.0, []
        for s in self.steps:
            if s.status in ("passed", "failed", "timed out") and s.wall_s is not None:
                took, src = s.wall_s, "measured here"
                if s.name == "build" and self.build_stats and self.build_stats.get("projected_16_cores_s"):
                    took, src = self.build_stats["projected_16_cores_s"], "projected for 16 cores from the ninja log"
                took = max(took, s.estimate_s) if s.name != "build" else took
                if s.name != "build" and took == s.estimate_s and s.wall_s < s.estimate_s:
                    src = f"its estimate (measured here {s.wall_s:.0f}s, without a GPU)"
            elif s.status == "skipped" and s.reason.startswith("GDSIO_CHECK_SKIP"):
                took, src = s.estimate_s, "its estimate (skipped here)"
            elif s.name == "wheels" and s.status == "skipped":
                took, src = s.estimate_s, "its estimate (no wheels here)"
            else:
                took, src = s.estimate_s, "its estimate"
            left = self.cfg.budget - RESERVE_S - used
            runs = left >= s.estimate_s
            if runs:
                used += took
            rows.append({"name": s.name, "seconds": round(took, 1), "source": src, "runs": runs,
                         "used_after_s": round(used, 1)})
        return {"budget_s": self.cfg.budget, "reserve_s": RESERVE_S, "steps": rows,
                "total_s": round(used + RESERVE_S, 1), "cut": [r["name"] for r in rows if not r["runs"]]}

    def write_report(self) -> None:
        doc = self.doc()
        files = {"report.json": json.dumps(doc, indent=1, default=str) + "\n", "report.md": render_md(doc, self.run)}
        for name, text in files.items():  # written whole, then renamed: a kill leaves no stray file in $OUT
            tmp = os.path.join(self.run, name + ".tmp")
            with open(tmp, "w") as f:
                f.write(text)
            shutil.move(tmp, os.path.join(self.cfg.out, name))


def ninja_stats(build_dir: str, wall: float | None, cpu: float | None) -> dict[str, Any] | None:
    """Per-file compile times from ninja's log: the total, the longest, the link,
    and the build's wall time projected for 16 idle cores of this speed: the
    time outside ninja (pip, CMake), plus the larger of the longest compile and
    the total over 16, plus the link, each scaled by the share of a core the
    build's processes got here (its CPU time over the sum of its processes'
    wall times: 1 on an idle machine, less on a loaded one)."""
    path = os.path.join(build_dir, ".ninja_log")
    try:
        with open(path) as f:
            rows = [ln.rstrip("\n").split("\t") for ln in f if not ln.startswith("#")]
    except OSError:
        return None
    last: dict[str, tuple[int, int]] = {}
    for r in rows:
        if len(r) >= 4:
            last[r[3]] = (int(r[0]), int(r[1]))  # a later line for the same output is the latest build
    if not last:
        return None
    spans = {k: (e - b) / 1000 for k, (b, e) in last.items()}
    links = {k: v for k, v in spans.items() if k.endswith(".so")}
    compiles = {k: v for k, v in spans.items() if k.endswith(".o")}
    ninja_wall = (max(e for _, e in last.values()) - min(b for b, _ in last.values())) / 1000
    longest = max(compiles.items(), key=lambda kv: kv[1]) if compiles else ("", 0.0)
    total = sum(compiles.values())
    link = sum(links.values())
    outside = max(0.0, (wall or ninja_wall) - ninja_wall)
    share = min(1.0, cpu / (sum(spans.values()) + outside)) if cpu else 1.0
    return {"compiles": len(compiles), "compile_total_s": round(total, 1), "longest_compile": longest[0],
            "longest_compile_s": round(longest[1], 1), "link_s": round(link, 1), "ninja_wall_s": round(ninja_wall, 1),
            "outside_ninja_s": round(outside, 1), "cpu_s": cpu, "core_share": round(share, 2),
            "projected_16_cores_s": round(share * (outside + max(longest[1], total / 16) + link), 1)}


STATUS_WORDS = {"passed": "passed", "failed": "FAILED", "timed out": "TIMED OUT", "cut": "cut for time",
                "skipped": "skipped", "stubbed": "stubbed (dry run)", "pending": "pending",
                "not reached": "not reached",
                "stopped": "STOPPED"}


def render_md(doc: dict[str, Any], run: str) -> str:
    m = doc["machine"]
    gpu = "; ".join(m["gpu"]) if m.get("gpu") else f"none ({m.get('gpu_note', '')})"
    out = ["# gdsio device check" + (" (DRY RUN)" if doc["dry_run"] else ""), ""]
    if doc["dry_run"]:
        out += ["**Dry run: the steps that need a GPU were stubbed (not run) and counted at their estimates. "
                "Nothing in this report ran on a GPU; the GPU paths have not been run on a GPU.**", ""]
    elif not doc["ran_on_a_gpu"]:
        out += ["**nvidia-smi found no GPU: the GPU steps below cannot have passed on a GPU.**", ""]
    b = doc.get("build") or {}
    out += [
        f"- date: {doc['date']}",
        f"- commit: {doc['commit']}",
        f"- command: `{doc['command']}`",
        f"- machine: {m.get('cpu', '?')}, {m.get('cpus')} CPUs, {m.get('memory_gib', '?')} GiB; "
        f"kernel {m.get('kernel')}; Python {m.get('python')}; "
        f"load average {m.get('load_before', '?')} before, {m.get('load_now', '?')} now",
        f"- GPU (nvidia-smi: name, driver, memory): {gpu}",
        f"- budget: {doc['budget_s']}s wall, {doc['reserve_s']}s of it kept for the report; "
        f"used {doc['budget_used_s']}s"
        + (f" ({doc['wall_s']}s real, the rest the stubs' estimates)" if doc["dry_run"] else "")
        + ("" if doc["finished"] else " so far (the check is still running or was stopped)"),
        f"- the estimates up to the figures plus the reserve: {doc['planned_through_figures_s']}s",
        f"- per-test limit: " + (f"{doc['per_test_limit_s']}s (pytest-timeout)" if doc["per_test_limit_s"] else
                                 "none: pytest-timeout is not installed (faulthandler dumps a hung test's stacks "
                                 "after 60s)") + "; test and benchmark files in "
        f"{doc['bench_dir'] or 'not chosen yet'}",
    ]
    if b:
        out.append(f"- build: {b['compiles']} compiles, {b['compile_total_s']}s of compiling in all, the longest "
                   f"{b['longest_compile_s']}s ({os.path.basename(b['longest_compile'])}), link {b['link_s']}s, "
                   f"{b['outside_ninja_s']}s outside ninja (pip, CMake); {b['cpu_s']}s of CPU, so its processes got "
                   f"{b['core_share']} of a core each; 16 idle cores of this speed: about {b['projected_16_cores_s']}s")
    out += ["", "| # | step | status | wall | limit | estimate | why / note |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for i, s in enumerate(doc["steps"], 1):
        wall = f"{s['wall_s']:.0f}s" if s["wall_s"] is not None else "-"
        lim = f"{s['limit_s']}s" if s["limit_s"] is not None else "-"
        note = s["reason"] or ""
        if s["summary"]:
            note = (note + "; " if note else "") + s["summary"]
        out.append(f"| {i} | {s['name']}: {s['title']} | {STATUS_WORDS.get(s['status'], s['status'])} | {wall} | {lim} "
                   f"| {s['estimate_s']}s | {note.replace('|', '/')} |")
    not_run = [s for s in doc["steps"]
               if s["status"] in ("cut", "skipped", "stubbed", "not reached", "timed out", "stopped")]
    out += ["", "## Not run, or not run whole, and why", ""]
    out += [f"- {s['name']}: {STATUS_WORDS.get(s['status'], s['status'])}: {s['reason']}" for s in not_run] or \
        ["- every step ran"]
    for s in doc["steps"]:
        if s["summary"] or s["problems"] or s["tail"] or s.get("triage"):
            out += ["", f"## {s['name']}: {s['title']}", ""]
            if s["summary"]:
                out.append(f"pytest: {s['summary']}")
            shown = s["problems"] or s["tail"]
            if shown:
                out += ["", "```", *shown, "```"]
            if s.get("triage"):
                out += ["", "The crashed test again under gdb:", "", "```", *s["triage"], "```"]
    if doc.get("cufile_errors"):
        out += ["", "## cuFile's log (its ERROR lines)", "", "```", *doc["cufile_errors"], "```"]
    proj = doc.get("projection")
    if proj:
        out += ["", "## The budget on the 16-core H200 machine (projection)", "",
                "Each step at what it took here (the build projected for 16 cores from its per-file compile times; a "
                "step faster here than its estimate, having no GPU, at its estimate) or at its estimate, under the "
                "real run's rule: a step starts only if its estimate fits in what is left.", "",
                "| step | seconds | from | runs | used after |", "| --- | --- | --- | --- | --- |"]
        out += [f"| {r['name']} | {r['seconds']} | {r['source']} | {'yes' if r['runs'] else 'cut'} "
                f"| {r['used_after_s']} |" for r in proj["steps"]]
        out += ["", f"Total with the {proj['reserve_s']}s reserve: {proj['total_s']}s of {proj['budget_s']}s; "
                f"cut: {', '.join(proj['cut']) or 'nothing'}."]
    for title, name in (("The issues' figures (bench/figures.py)", "figures.md"),
                        ("Where the loader's time goes (bench/profile_loader.py)", "loader-profile.md"),
                        ("Where gdsio.image.decode's host time goes (bench/profile_decode.py)", "decode-profile.md"),
                        ("gdsio bench, warm", "bench-warm.md"), ("gdsio bench, cold", "bench-cold.md")):
        p = os.path.join(run, name)
        if os.path.isfile(p) and os.path.getsize(p):
            with open(p, errors="replace") as f:
                out += ["", f"## {title}", "", f.read().rstrip()]
    p = os.path.join(run, "doctor.md")
    if os.path.isfile(p) and os.path.getsize(p):
        with open(p, errors="replace") as f:
            out += ["", "## gdsio doctor", "", "```", f.read().rstrip(), "```"]
    out += ["", "Full output of every step: steps.log."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description="The device check (see the module docstring).")
    ap.add_argument("--dry-run", action="store_true", help="stub the GPU steps; run and time the rest")
    ap.add_argument("--plan", action="store_true", help="print the steps, estimates and commands as JSON; run nothing")
    a = ap.parse_args(argv)
    dry = a.dry_run or os.environ.get("GDSIO_CHECK_DRY_RUN") == "1"
    cfg = Config(dry)
    if a.plan:
        steps = make_steps(cfg, "@RUN@")
        print(json.dumps({"budget_s": cfg.budget, "reserve_s": RESERVE_S, "priority_end": PRIORITY_END,
                          "planned_through_figures_s": planned_total(steps),
                          "steps": [{"name": s.name, "title": s.title, "estimate_s": s.estimate_s, "cap_s": s.cap_s,
                                     "gpu": s.gpu, "basis": s.basis, "command": s.cmd} for s in steps]}, indent=1))
        return 0
    return Check(cfg, argv).go()


if __name__ == "__main__":
    sys.exit(main())
