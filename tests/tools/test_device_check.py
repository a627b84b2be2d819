"""bench/device_check.sh (steps in bench/device_check.py) on a machine without a
GPU: its plan fits the lease's budget, and its dry runs, with the build skipped
(never rebuilt here), cut the steps that do not fit in priority order, stub
the GPU steps and never claim a GPU result. The budget's clock is made
deterministic (a budget of 1 s, or GDSIO_CHECK_CLOCK=stubs, which counts only
the stubs' declared estimates): no assertion depends on how fast this machine is."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

import gdsio

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(REPO, "bench")
SCRIPT = os.path.join(BENCH, "device_check.sh")
PRIORITY = ["wheels", "machine", "build", "import", "doctor", "kernels", "reads", "nvjpeg", "loader", "figures"]
LATER = ["gpu-rest", "loader-profile", "decode-profile", "bench-warm", "bench-cold", "pytest-benchmark"]

pytestmark = pytest.mark.skipif(not os.path.isfile(SCRIPT), reason="bench/ is not beside tests/ (an sdist without it)")


@pytest.fixture(scope="module")
def dc():
    spec = importlib.util.spec_from_file_location("gdsio_device_check", os.path.join(BENCH, "device_check.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


def check_env(tmp_path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GDSIO_CHECK_") and k != "OUT"}
    env.update(OUT=str(tmp_path / "out"), GDSIO_CHECK_PYTHON=sys.executable,
               # The gdsio this test imports (the source tree or the installed one): never rebuilt here.
               GDSIO_CHECK_SITE=os.path.dirname(os.path.dirname(os.path.abspath(gdsio.__file__))),
               GDSIO_CHECK_BUILD_DIR=str(tmp_path / "build"), GDSIO_CHECK_WHEELS=str(tmp_path / "no-wheels"),
               GDSIO_BENCH_DIR=str(tmp_path))
    env.update(extra)
    return env


def plan(tmp_path) -> dict:
    p = subprocess.run([sys.executable, os.path.join(BENCH, "device_check.py"), "--plan"], env=check_env(tmp_path),
                       capture_output=True, text=True, timeout=60, check=True)
    return json.loads(p.stdout)


def dry_run(tmp_path, **extra: str) -> tuple[dict, str]:
    p = subprocess.run(["bash", SCRIPT, "--dry-run"], env=check_env(tmp_path, **extra), cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    out = tmp_path / "out"
    entries = sorted(os.listdir(out))
    assert len(entries) <= 8 and all((out / e).is_file() for e in entries), entries  # what the device tool returns
    return json.loads((out / "report.json").read_text()), (out / "report.md").read_text()


def by_name(doc: dict) -> dict[str, dict]:
    return {s["name"]: s for s in doc["steps"]}


def assert_no_gpu_claim(doc: dict, md: str) -> None:
    assert doc["dry_run"] is True and doc["ran_on_a_gpu"] is False
    assert md.startswith("# gdsio device check (DRY RUN)")
    assert "Nothing in this report ran on a GPU; the GPU paths have not been run on a GPU." in md
    for s in doc["steps"]:
        if s["gpu"]:
            assert s["status"] in ("stubbed", "cut", "skipped"), s
            assert s["wall_s"] is None and s["summary"] is None and not s["counts"], s


def test_plan_fits_the_figures_in_the_default_budget(tmp_path):
    p = plan(tmp_path)
    names = [s["name"] for s in p["steps"]]
    assert names == PRIORITY + LATER
    assert p["budget_s"] == 420 and p["priority_end"] == "figures"
    through_figures = p["reserve_s"] + sum(s["estimate_s"] for s in p["steps"][: len(PRIORITY)])
    assert through_figures == p["planned_through_figures_s"] <= 420
    for s in p["steps"]:
        assert 0 < s["estimate_s"] <= s["cap_s"], s
        assert s["gpu"] == (s["name"] not in PRIORITY[:5]), s
    build = " ".join(p["steps"][2]["command"])
    assert "GDSIO_CUDA_ARCHITECTURES=90-real" in build and "--no-build-isolation" in build
    assert "GDSIO_WITH_CUDA=ON" in build


def test_plan_budget_follows_the_environment(tmp_path):
    p = subprocess.run([sys.executable, os.path.join(BENCH, "device_check.py"), "--plan"],
                       env=check_env(tmp_path, GDSIO_CHECK_BUDGET="300", GDSIO_CHECK_ESTIMATES="figures=100"),
                       capture_output=True, text=True, timeout=60, check=True)
    doc = json.loads(p.stdout)
    assert doc["budget_s"] == 300
    assert [s for s in doc["steps"] if s["name"] == "figures"][0]["estimate_s"] == 100


def test_the_selected_tests_exist(dc):
    """The kernel, read and nvJPEG steps name tests by node id and -k: a rename must not empty them."""
    for node in dc.KERNEL_TESTS:
        path, _, name = node.partition("::")
        with open(os.path.join(REPO, path)) as f:
            src = f.read()
        assert "pytestmark = pytest.mark.gpu" in src, path
        if name:
            assert re.search(rf"^def {name}\(", src, re.M), node
    with open(os.path.join(REPO, dc.READ_TESTS)) as f:
        src = f.read()
    func, size = re.fullmatch(r"(\w+) and (\d+)", dc.READ_SELECT).groups()
    assert re.search(rf"^def {func}\(", src, re.M)
    assert int(size) == (1 << 20) + 3 and "(1 << 20) + 3" in re.search(r"^SIZES = .*$", src, re.M).group(0)
    assert os.path.isfile(os.path.join(REPO, dc.LOADER_TESTS))


def test_a_budget_of_one_second_cuts_every_step(tmp_path):
    doc, md = dry_run(tmp_path, GDSIO_CHECK_BUDGET="1", GDSIO_CHECK_SKIP="build")
    steps = by_name(doc)
    assert steps["build"]["status"] == "skipped" and "GDSIO_CHECK_SKIP" in steps["build"]["reason"]
    assert steps["wheels"]["status"] == "skipped" and steps["wheels"]["reason"].startswith("no wheels in ")
    for name in PRIORITY + LATER:
        if name not in ("build", "wheels"):
            assert steps[name]["status"] == "cut", steps[name]
            assert re.fullmatch(r"needs ~\d+s, 0s of the budget left", steps[name]["reason"]), steps[name]
            assert f"- {name}: cut for time: needs ~" in md
    assert_no_gpu_claim(doc, md)
    assert doc["finished"] is True
    assert "commit: " in md and "command: `" in md and "GDSIO_CHECK_BUDGET=1" in doc["command"]


def test_stubs_count_their_estimates_and_later_steps_are_cut_in_order(tmp_path):
    est = {s["name"]: s["estimate_s"] for s in plan(tmp_path)["steps"]}
    reserve = plan(tmp_path)["reserve_s"]
    # Room for the kernel tests and the reads alone, by the stubs' clock (real time not counted).
    budget = reserve + est["kernels"] + est["reads"] + 1
    doc, md = dry_run(tmp_path, GDSIO_CHECK_BUDGET=str(budget), GDSIO_CHECK_CLOCK="stubs",
                      GDSIO_CHECK_SKIP="wheels,machine,build,import,doctor")
    steps = by_name(doc)
    for name in ("kernels", "reads"):
        assert steps[name]["status"] == "stubbed", steps[name]
        assert steps[name]["reason"] == f"not run: needs a GPU; counted at its estimate, {est[name]}s"
    for name in ["nvjpeg", "loader", "figures"] + LATER:
        assert steps[name]["status"] == "cut", steps[name]
        assert steps[name]["reason"] == f"needs ~{est[name]}s, 1s of the budget left"
    assert doc["budget_used_s"] == est["kernels"] + est["reads"]
    assert "| kernels: " in md and "stubbed (dry run)" in md
    assert_no_gpu_claim(doc, md)


def test_the_non_gpu_steps_run_for_real_in_a_dry_run(tmp_path):
    """import and doctor really run (against the gdsio this test imports); the GPU steps are stubbed."""
    doc, md = dry_run(tmp_path, GDSIO_CHECK_BUDGET="100000", GDSIO_CHECK_SKIP="wheels,build")
    steps = by_name(doc)
    for name in ("machine", "import", "doctor"):
        assert steps[name]["wall_s"] is not None and steps[name]["status"] in ("passed", "failed"), steps[name]
    assert steps["doctor"]["status"] == "passed", steps["doctor"]  # exit 1 (no true GDS here) is a finding
    doctor = json.loads((tmp_path / "out" / "doctor.json").read_text())
    assert isinstance(doctor, dict) and doctor
    assert "## gdsio doctor" in md
    assert all(steps[n]["status"] == "stubbed" for n in PRIORITY[5:] + LATER)
    proj = doc["projection"]
    assert [r["name"] for r in proj["steps"]] == PRIORITY + LATER
    assert_no_gpu_claim(doc, md)


def test_a_step_past_its_limit_is_stopped_and_reported(dc, tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    monkeypatch.setenv("GDSIO_BENCH_DIR", str(tmp_path))
    check = dc.Check(dc.Config(dry_run=True), ["--dry-run"])
    step = dc.Step("sleeper", "sleeps past its limit", 1, 1, False, "test", ["sleep", "60"])
    check.execute(step, 1)
    assert step.status == "timed out" and step.reason == "stopped at its limit, 1s (its cap)"
    check.finish()


def test_pytest_summaries_are_read_whole_or_from_the_verbose_lines(dc):
    step = dc.Step("t", "t", 1, 1, True, "test", pytest=True)
    dc.parse_pytest("a.py::test_x PASSED\nFAILED a.py::test_y - assert 1 == 2\nSKIPPED [1] a.py:3: no kvikio\n"
                    "===== 1 failed, 1 passed, 1 skipped, 2 warnings in 3.21s =====\n", step)
    assert step.summary == "1 failed, 1 passed, 1 skipped, 2 warnings"
    assert step.counts == {"failed": 1, "passed": 1, "skipped": 1}
    assert step.problems == ["FAILED a.py::test_y - assert 1 == 2", "SKIPPED [1] a.py:3: no kvikio"]
    cut = dc.Step("t", "t", 1, 1, True, "test", pytest=True)
    dc.parse_pytest("tests/a.py::test_x[1] PASSED  [ 10%]\ntests/a.py::test_x[2] PASSED  [ 20%]\n"
                    "tests/a.py::test_z FAILED  [ 30%]\n", cut)
    assert cut.counts == {"passed": 2, "failed": 1}
    assert cut.summary.startswith("no summary (cut short)")


def test_a_failed_import_skips_the_gpu_steps_and_says_why(tmp_path):
    """A gdsio that is not the build under test (here: none in an empty site) fails the import step."""
    (tmp_path / "empty-site").mkdir()
    doc, md = dry_run(tmp_path, GDSIO_CHECK_BUDGET="100000", GDSIO_CHECK_SKIP="wheels,machine,build,doctor",
                      GDSIO_CHECK_SITE=str(tmp_path / "empty-site"))
    steps = by_name(doc)
    assert steps["import"]["status"] == "failed", steps["import"]
    for name in PRIORITY[5:] + LATER:
        assert steps[name]["status"] == "skipped", steps[name]
        assert steps[name]["reason"] == "the import step did not pass (failed)"
    assert "## import: " in md  # its last lines, to see why
    assert_no_gpu_claim(doc, md)


def test_a_crashed_test_runs_again_under_gdb_and_cufile_errors_are_kept(dc, tmp_path, monkeypatch):
    """A step whose process died of a signal: the test its -v output shows crashing runs
    again under gdb (a stand-in here), whose crashing thread's frames go into the step;
    cuFile's log (CUFILE_LOGFILE_PATH, set for every step) gives its distinct ERROR lines."""
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    monkeypatch.setenv("GDSIO_BENCH_DIR", str(tmp_path))
    monkeypatch.delenv("CUFILE_LOGFILE_PATH", raising=False)
    check = dc.Check(dc.Config(dry_run=True), ["--dry-run"])
    assert check.env["CUFILE_LOGFILE_PATH"] == check.cufile_log and check.cufile_log.startswith(check.run)
    gdb = tmp_path / "gdb"
    gdb.write_text("#!/bin/sh\necho \"argv: $*\"\necho '[New Thread 0x7f]'\n"
                   "echo 'Thread 1 \"python3\" received signal SIGSEGV, Segmentation fault.'\n"
                   "echo '#0  0x00007f in concat () at error.hpp:52'\necho '#1  0x00007e in decode ()'\n")
    gdb.chmod(0o755)
    monkeypatch.setattr(dc.shutil, "which", lambda name: str(gdb) if name == "gdb" else None)
    step = dc.Step("kernels", "k", 1, 1, True, "test", pytest=True)
    node = "../../repo/tests/image/test_image_gpu.py::test_twin[UNCHANGED]"
    check.triage(step, f"a.py::test_a PASSED [ 1%]\n{node} Fatal Python error: Segmentation fault\n")
    assert step.triage == [f"{node} under gdb:", 'Thread 1 "python3" received signal SIGSEGV, Segmentation fault.',
                           "#0  0x00007f in concat () at error.hpp:52", "#1  0x00007e in decode ()"]
    with open(check.log) as f:
        log = f.read()
    assert f"{node} again under gdb" in log and "-p no:faulthandler" in log and log.rstrip().count(node) >= 2
    quiet = dc.Step("nvjpeg", "n", 1, 1, True, "test", pytest=True)
    check.triage(quiet, "a.py::test_a PASSED\n")
    assert quiet.triage == ["no backtrace: no crashed test in its output"]
    with open(check.cufile_log, "w") as f:
        f.write(" 04-12-2026 10:34:22:951 [pid=1 tid=1] ERROR  cufio-udev:67 udev property not found: ID_FS_USAGE vda\n"
                " 04-12-2026 10:34:22:951 [pid=1 tid=1] INFO   cufio-fs:363 Block dev: /dev/vda\n"
                " 04-12-2026 10:34:22:952 [pid=1 tid=1] ERROR  cufio-udev:67 udev property not found: ID_FS_USAGE vda\n"
                " 04-12-2026 10:34:22:953 [pid=1 tid=1] ERROR  cufio:303 cuFileHandleRegister error, failed to allocate"
                " file object\n")
    assert check.cufile_errors() == ["cufio-udev:67 udev property not found: ID_FS_USAGE vda",
                                     "cufio:303 cuFileHandleRegister error, failed to allocate file object"]
    check.steps[5].triage = step.triage
    check.finish()
    md = (tmp_path / "out" / "report.md").read_text()
    assert "The crashed test again under gdb:" in md and "## cuFile's log (its ERROR lines)" in md
