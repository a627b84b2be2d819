"""The CUDA call boundary on the CPU: gdsio's cuFile and nvJPEG shims and the
pinned pipeline, compiled as they are against the emulated runtime of
tests/kernels under AddressSanitizer and UndefinedBehaviorSanitizer, driving
stand-ins of libcufile and libnvjpeg (tests/kernels/fakes, dlopen'ed by path as
the real ones are). Each scenario of tests/kernels/shim_tests.cpp runs in a
process of its own and checks the order of the calls (a host wait before an
nvJPEG device decode, after a failed hardware decode), what the shims make of
the libraries' answers (P2PDMA asked for but not supported, batch entries that
time out or fail, a batch call that fails, a library that will not load), the
staging ring giving the caller's device back, and O_DIRECT reads into pinned
memory that is not page-aligned.
What the real libraries do waits for the device (bench/device_check.sh).
Skipped only where no C++ compiler with these sanitizers is installed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gdsio import _core
from kernels import emulate as E
from kernels import shim_coverage

_WHY = E.sanitizer_unavailable("asan")
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"the shim checks cannot be built here: {_WHY}")

# The scenarios, by what each covers: a review finding of issue 12 ("12.2":
# finding 2), or an item of issue 28 ("28.F1", "28.F3"; "28.5": the paths of
# the shims no other scenario runs, so that each shim runs >= 85% of its lines:
# tests/kernels/shim_coverage.py, bench/results/shim-coverage-*.md); "dst-size":
# nvJPEG's own size of each image (nvjpegGetImageInfo) checked against dst's
# before any decode, so that a header the Python parser read wrong cannot make
# nvJPEG write past dst.
SCENARIOS = {
    "nvjpeg-device-backends-wait-before-decoding": "12.2",
    "nvjpeg-failed-hardware-decode-waits-before-throwing": "12.3",
    "cufile-p2pdma-asked-not-supported": "12.4",
    "cufile-p2pdma-asked-and-supported": "12.4",
    "cufile-p2pdma-asked-and-supported-cufile-1.13": "12.4",
    "cufile-p2pdma-supported-not-asked": "12.4",
    "cufile-batch-entries-and-timeout": "12.5",
    "cufile-batch-default-timeout": "12.5",
    "cufile-batch-timed-out-entries-are-reread": "12.5",
    "cufile-stalled-batch-is-cancelled-and-reread": "12.5",
    "nvjpeg-upsampling-flag-per-backend": "12.6",
    "nvjpeg-version": "12.7",
    "pinned-direct-reads-into-unaligned-pinned-memory": "12.8",
    "staging-ring-restores-the-callers-device": "28.F1",
    "cufile-batch-setup-fails-reads-with-cufileread": "28.F3",
    "cufile-batch-submit-fails-reads-with-cufileread": "28.F3",
    "cufile-batch-get-status-fails-reads-with-cufileread": "28.F3",
    "cufile-batch-failed-and-short-entries-are-reread": "28.F3",
    "cufile-buffer-register-and-deregister": "28.5",
    "cufile-handle-register-fails": "28.5",
    "cufile-read-interrupted-is-retried": "28.5",
    "cufile-read-errors-name-the-file": "28.5",
    "cufile-driver-open-fails": "28.5",
    "cufile-compat-mode-forced": "28.5",
    "cufile-load-failures": "28.5",
    "nvjpeg-hardware-support-check": "28.5",
    "nvjpeg-no-hardware-engines": "28.5",
    "nvjpeg-backend-creation-failures": "28.5",
    "nvjpeg-state-and-initialize-failures": "28.5",
    "nvjpeg-every-status-is-named": "28.5",
    "nvjpeg-load-failures": "28.5",
    "nvjpeg-dst-smaller-than-the-image-is-refused": "dst-size",
    "nvjpeg-image-info-of-device-bitstreams": "dst-size",
}


@pytest.fixture(scope="module")
def runs() -> dict[str, E.Run]:
    # The scenarios' files go beside the build, on the checkout's file system
    # (a disk, where O_DIRECT works; /tmp may be a tmpfs that refuses it).
    work = E.ROOT / "build" / "kernels-emu" / "shim-work"
    work.mkdir(parents=True, exist_ok=True)
    _, out = E.run_shims(work)
    return out


def test_every_scenario_is_run(runs):
    assert sorted(runs) == sorted(SCENARIOS)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario(runs, name):
    r = runs[name]
    assert r.returncode == 0, r.output[-6000:]
    m = re.search(rf"^shim {re.escape(name)}: (\d+) checks, 0 failed$", r.output, re.MULTILINE)
    assert m and int(m[1]) >= 3, r.output[-3000:]


def test_the_shims_run_85_percent_of_their_lines():
    """Issue 28, item 5: the scenarios, built with --coverage instead of the
    sanitizers, run at least 85% of the lines of each shim (gcov's count; the
    figures are in bench/results/shim-coverage-*.md). The scenarios decide
    which lines run, not the machine: the figure is the same every run."""
    if "g++" not in Path(E.compiler()).name or shutil.which("gcov") is None:
        pytest.skip(f"needs g++ and gcov (the compiler is {E.compiler()}, gcov {shutil.which('gcov')})")
    figures, runs = shim_coverage.measure()
    assert not [n for n, r in runs.items() if r.returncode != 0], {n: r.output[-2000:] for n, r in runs.items()}
    for f in ("csrc/io/cufile_shim.cpp", "csrc/image/nvjpeg_shim.cpp"):
        assert figures[f][0] >= 85.0, figures


def test_doctor_reports_the_nvjpeg_version_it_loaded(tmp_path):
    """Finding 7 through the installed extension: doctor loads libnvjpeg (the
    stand-in, found on LD_LIBRARY_PATH as libnvjpeg.so.13) and reports the
    version the library itself gives (nvjpegGetProperty, nvjpegGetCudartProperty).
    Where a real libnvjpeg is found first (the device machine's wheels), it is
    that one's version that must be reported."""
    if not _core.built_with_cuda:  # doctor says "built without CUDA" and loads no nvJPEG (tested in test_build.py)
        pytest.skip("the installed gdsio was built without CUDA (GDSIO_WITH_CUDA=OFF or no nvcc): no nvJPEG to load")
    libdir = tmp_path / "lib"
    libdir.mkdir()
    ours = libdir / "libnvjpeg.so.13"
    ours.symlink_to(E.build_plain_fake("libfake_nvjpeg.so"))
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(libdir), os.environ.get("LD_LIBRARY_PATH")]))}
    r = subprocess.run([sys.executable, "-P", "-m", "gdsio", "doctor", "--json", str(tmp_path)], env=env,
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.stdout, r.stderr
    check = next(c for c in json.loads(r.stdout)["checks"] if c["id"] == "nvjpeg")
    st = check["details"]["loaded"]
    assert check["status"] == "ok" and st["loaded"], check
    if st["library"] == str(ours):
        assert check["summary"] == f"loaded {ours}: nvJPEG 13.0.4, built for CUDA 13.0.88"
    else:
        v = ".".join(map(str, st["version"]))
        assert check["summary"].startswith(f"loaded {st['library']}: nvJPEG {v}") and st["version"][0] >= 11, check
