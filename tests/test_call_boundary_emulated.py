"""The CUDA call boundary on the CPU: gdsio's cuFile and nvJPEG shims and the
pinned pipeline, compiled as they are against the emulated runtime of
tests/kernels under AddressSanitizer and UndefinedBehaviorSanitizer, driving
stand-ins of libcufile and libnvjpeg (tests/kernels/fakes, dlopen'ed by path as
the real ones are). Each scenario of tests/kernels/shim_tests.cpp runs in a
process of its own and checks the order of the calls (a host wait before an
nvJPEG device decode, after a failed hardware decode), what the shims make of
the libraries' answers (P2PDMA asked for but not supported, batch entries that
time out), and O_DIRECT reads into pinned memory that is not page-aligned.
What the real libraries do waits for the device (bench/device_check.sh).
Skipped only where no C++ compiler with these sanitizers is installed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from gdsio import _core
from kernels import emulate as E

_WHY = E.sanitizer_unavailable("asan")
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"the shim checks cannot be built here: {_WHY}")

# The scenarios, by the review finding (issue 12) each one covers.
SCENARIOS = {
    "nvjpeg-device-backends-wait-before-decoding": 2,
    "nvjpeg-failed-hardware-decode-waits-before-throwing": 3,
    "cufile-p2pdma-asked-not-supported": 4,
    "cufile-p2pdma-asked-and-supported": 4,
    "cufile-p2pdma-asked-and-supported-cufile-1.13": 4,
    "cufile-p2pdma-supported-not-asked": 4,
    "cufile-batch-entries-and-timeout": 5,
    "cufile-batch-default-timeout": 5,
    "cufile-batch-timed-out-entries-are-reread": 5,
    "cufile-stalled-batch-is-cancelled-and-reread": 5,
    "nvjpeg-upsampling-flag-per-backend": 6,
    "nvjpeg-version": 7,
    "pinned-direct-reads-into-unaligned-pinned-memory": 8,
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
