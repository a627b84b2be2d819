"""The command line's exit statuses and user errors: 0 ok, 1 a check or a
measurement failed, 2 a user error printed as one line on stderr (never a
traceback); an unexpected exception (a bug) keeps its traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from gdsio import _core
from gdsio.tools import cli, doctor
from gdsio.platform import nvidia
from gdsio.io.backends import BackendInfo
from gdsio.tools.cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, main

README = Path(__file__).resolve().parents[2] / "README.md"
NO_DRIVER = "no NVIDIA driver is installed (libcuda.so.1 not found)"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(err: str, command: str) -> str:
    lines = err.splitlines()
    assert "Traceback" not in err
    assert lines[-1].startswith(f"gdsio {command}: error: "), err
    return lines[-1]


@pytest.fixture
def fake_jpeg_folder(tmp_path):
    d = tmp_path / "photos" / "cat"
    d.mkdir(parents=True)
    (d / "0001.jpg").write_bytes(b"this is not a JPEG at all")
    return tmp_path / "photos"


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(nvidia, "cuda_unusable_reason", lambda: NO_DRIVER)


def test_demo_user_errors_are_one_line(tmp_path, capsys, fake_jpeg_folder, no_cuda):
    cases = [
        (["demo", str(tmp_path / "nope")], f"no such file or directory: '{tmp_path / 'nope'}'"),
        (["demo", "--device", "cuda"], f'--device cuda: {NO_DRIVER}; pass --device="cpu" to use the CPU'),
        (["demo", "--device", "tpu"], "--device must be cpu, cuda or cuda:N; got 'tpu'"),
        (["demo", str(fake_jpeg_folder), "--device", "cpu", "--no-train"], "0001.jpg"),
    ]
    for argv, message in cases:
        code, out, err = _run(capsys, *argv)
        assert code == EXIT_USAGE, argv
        assert message in _one_error_line(err, "demo"), argv
        assert len(err.splitlines()) == 1, err
    line = _run(capsys, "demo", str(fake_jpeg_folder), "--device", "cpu", "--no-train")[2]
    assert "unknown image format" in line


def test_argument_mistakes_exit_2_as_argparse_does(capsys):
    for argv in (["demo", "--epochs", "0"], ["demo", "--batch-size", "x"], ["doctor", "--device", "-1"],
                 ["info", "--device", "gpu"], ["bench", "--bogus"], ["nosuchcommand"]):
        code, out, err = _run(capsys, *argv)
        assert code == EXIT_USAGE and "Traceback" not in err and "error: " in err, argv
    code, out, err = _run(capsys, "bench", "--device", "cpu", "--sizes", "64K")
    assert code == EXIT_USAGE and "--device names the CUDA device of the GPU paths" in _one_error_line(err, "bench")


def test_a_bad_environment_setting_is_a_user_error(capsys, monkeypatch):
    monkeypatch.setenv("GDSIO_THREADS", "many")
    code, out, err = _run(capsys, "info")
    assert code == EXIT_USAGE and "GDSIO_THREADS='many'" in _one_error_line(err, "info")


SUBCOMMANDS = [["demo", "--device", "cpu", "--no-train"], ["bench", "--sizes", "64K", "--repeat", "1"], ["doctor"],
               ["info"], ["offload-plan", "--ms-per-image", "5", "--steps-per-s", "2", "--batch-size", "32",
                          "--local-cores", "8", "--node-cores", "16", "--gpu-node-price", "3",
                          "--cpu-node-price", "1"]]
BAD_ENV = [("GDSIO_THREADS", "abc", "GDSIO_THREADS='abc': not an int"),
           ("GDSIO_THREADS", "0", "GDSIO_THREADS='0'"),
           ("GDSIO_CHUNK_BYTES", "4Q", "GDSIO_CHUNK_BYTES='4Q'"),
           ("GDSIO_STAGING_BUFFERS", "x", "GDSIO_STAGING_BUFFERS='x'"),
           ("GDSIO_DIRECT_IO", "maybe", "GDSIO_DIRECT_IO='maybe'"),
           ("GDSIO_BACKEND", "turbo", "GDSIO_BACKEND='turbo'"),
           ("GDSIO_HUGE_PAGES", "lots", "GDSIO_HUGE_PAGES='lots'"),
           ("GDSIO_REMOTE_CONCURRENCY", "-", "GDSIO_REMOTE_CONCURRENCY='-'"),
           ("GDSIO_REMOTE_CHUNK_BYTES", "1000", "GDSIO_REMOTE_CHUNK_BYTES='1000'"),
           ("GDSIO_REMOTE_RETRIES", "99", "GDSIO_REMOTE_RETRIES='99'"),
           ("GDSIO_REMOTE_TIMEOUT", "soon", "GDSIO_REMOTE_TIMEOUT='soon'"),
           ("GDSIO_MAX_IMAGE_PIXELS", "0", "GDSIO_MAX_IMAGE_PIXELS='0'"),
           ("GDSIO_CPU_SIMD", "avx3", "GDSIO_CPU_SIMD='avx3'")]


@pytest.mark.parametrize("var, value, message", BAD_ENV)
def test_every_command_checks_every_environment_setting_before_any_work(capsys, monkeypatch, tmp_path, var, value,
                                                                        message):
    """`GDSIO_THREADS=abc gdsio demo` says so at once, not after writing 200
    JPEGs (nor bench after writing its files): one line naming the variable
    and its value, exit 2, for every command."""
    from gdsio.tools import bench, demo

    def no_work(*a, **k):
        raise AssertionError("work started before the environment was checked")

    monkeypatch.setattr(demo, "write_jpeg_folder", no_work)
    monkeypatch.setattr(bench, "generate_files", no_work)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(var, value)
    for argv in SUBCOMMANDS:
        code, out, err = _run(capsys, *argv)
        assert code == EXIT_USAGE and out == "", (argv, out, err)
        assert message in _one_error_line(err, argv[0]) and len(err.splitlines()) == 1, (argv, err)


def test_a_bug_keeps_its_traceback(monkeypatch, tmp_path):
    """Only user errors become one line: an unexpected exception propagates."""
    from gdsio.tools import demo

    def broken(*a, **k):
        raise ZeroDivisionError("a real bug")

    monkeypatch.setattr(demo, "run_demo", broken)
    with pytest.raises(ZeroDivisionError, match="a real bug"):
        main(["demo", str(tmp_path), "--device", "cpu"])


def test_interrupt_exits_130(monkeypatch, tmp_path):
    from gdsio.tools import demo

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "run_demo", interrupted)
    assert main(["demo", str(tmp_path), "--device", "cpu"]) == EXIT_INTERRUPTED


def test_the_real_command_prints_one_line_and_no_traceback(tmp_path, fake_jpeg_folder):
    """The installed entry point, in a fresh process, on this machine as it is."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    runs = [["demo", str(tmp_path / "nope")], ["demo", str(fake_jpeg_folder), "--no-train"],
            ["doctor", str(tmp_path / "nope")], ["info", str(tmp_path / "nope")]]
    if nvidia.gpu_unusable_reason():
        runs.append(["demo", "--device", "cuda"])
    for argv in runs:
        p = subprocess.run([sys.executable, "-P", "-m", "gdsio", *argv], capture_output=True, text=True, env=env,
                           timeout=300)
        assert p.returncode == EXIT_USAGE, (argv, p.stderr)
        assert len(p.stderr.splitlines()) == 1 and p.stderr.startswith(f"gdsio {argv[0]}: error: "), (argv, p.stderr)


def test_a_reader_that_leaves_early_gets_no_error():
    """`gdsio info | head -1`: the pipe closes under the command; it exits 141, silently."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    p = subprocess.run(f"{sys.executable} -P -m gdsio info | head -1", shell=True, capture_output=True,
                       text=True, env=env, timeout=300)
    assert p.stdout.startswith("gdsio: ") and p.stderr == "", p.stderr


# ---- doctor ---------------------------------------------------------------------------


def test_doctor_on_a_missing_path_says_it_once_and_prints_no_report(tmp_path, capsys):
    missing = tmp_path / "nope"
    for extra in ([], ["--json"]):
        code, out, err = _run(capsys, "doctor", str(missing), *extra)
        assert code == EXIT_USAGE and out == ""
        assert err == f"gdsio doctor: error: no such file or directory: '{missing}'\n"
    with pytest.raises(FileNotFoundError, match="nope"):
        doctor.doctor(missing)
    with pytest.raises(ValueError, match="device must be a CUDA device index"):
        doctor.doctor(tmp_path, device=-1)


def test_doctor_reads_one_block_of_the_path_through_cufile(tmp_path, monkeypatch):
    """cuFile's driver can open and still refuse every file of a file system
    (seen on the GPU machine: no udev data for its disk): doctor reads 4 KiB of
    the file, or of a probe file it writes in the directory and removes, with
    backend="cufile", and says what cuFile said."""
    calls = []

    def refuse(path, **kw):
        calls.append((path, kw))
        raise _core.BackendUnavailable(f"cuFileHandleRegister failed for '{path}': file descriptor is not registered")

    monkeypatch.setattr(doctor, "read", refuse)
    c = doctor._check_cufile_register(str(tmp_path), 0, {"status": "warn"})
    udev = os.access("/run/udev", os.R_OK | os.X_OK)
    assert c["status"] == "fail" and "cuFileHandleRegister failed" in c["summary"]
    assert ("CUFILE_LOGFILE_PATH" in c["gds_step"]) == udev and ("/run/udev:/run/udev:ro" in c["gds_step"]) != udev
    (probe, kw), = calls
    assert os.path.dirname(probe) == str(tmp_path) and kw == dict(size=4096, device="cuda:0", backend="cufile",
                                                                  return_stats=True)
    assert os.listdir(tmp_path) == []  # the probe file is gone
    f = tmp_path / "small.bin"
    f.write_bytes(b"abc")
    monkeypatch.setattr(doctor, "read", lambda path, **kw: (None, types.SimpleNamespace(backend="cufile-compat")))
    c = doctor._check_cufile_register(str(f), 0, {"status": "ok"})
    assert c["status"] == "ok" and "cufile-compat" in c["summary"] and os.listdir(tmp_path) == ["small.bin"]
    assert doctor._check_cufile_register(str(f), 0, {"status": "skip"})["status"] == "skip"


def _all_ok(monkeypatch, gds: bool, failing: str | None = None):
    """Every check passes (or `failing` fails) and backends() says whether gds is usable."""
    for name in dir(doctor):
        if name.startswith("_check_"):
            cid = name[len("_check_"):].replace("_", "-")
            status = "fail" if cid == failing else "ok"
            monkeypatch.setattr(doctor, name, lambda *a, _id=cid, _s=status: doctor._check(_id, _id, _s, f"{_id} {_s}"))
    infos = [BackendInfo("gds", "gpu", gds, "" if gds else "compat mode"), BackendInfo("cufile-compat", "gpu", False, ""),
             BackendInfo("kvikio", "gpu/host", False, "not installed"), BackendInfo("pinned", "gpu", True, ""),
             BackendInfo("posix", "host", True, "")]
    monkeypatch.setattr("gdsio.tools.doctor.backends", lambda path=None, device=0: infos)


def test_doctor_exits_0_only_when_true_gds_is_usable_and_nothing_failed(tmp_path, capsys, monkeypatch):
    _all_ok(monkeypatch, gds=True)
    code, out, err = _run(capsys, "doctor", str(tmp_path))
    assert code == EXIT_OK and err == "" and "[FAIL]" not in out
    assert out.startswith(f"gdsio doctor: {tmp_path} (CUDA device 0)\n")  # a GPU is here: it is named
    assert out.rstrip().endswith("exit status 0: true GPUDirect Storage is in use, every check passed")

    _all_ok(monkeypatch, gds=True, failing="iommu")
    code, out, err = _run(capsys, "doctor", str(tmp_path), "--json")
    rep = json.loads(out)
    assert code == EXIT_FAILED == rep["exit_code"] and rep["reason"] == "1 check(s) failed: iommu" and err == ""

    _all_ok(monkeypatch, gds=False)  # nothing failed, but cuFile runs in compat mode: GDS is not used
    code, out, err = _run(capsys, "doctor", str(tmp_path))
    assert code == EXIT_FAILED and "exit status 1: true GPUDirect Storage is not used for this path" in out


def test_doctor_without_a_gpu_names_no_device_and_exits_1(tmp_path, capsys, no_cuda):
    code, out, err = _run(capsys, "doctor", str(tmp_path))
    assert code == EXIT_FAILED and err == ""
    assert out.splitlines()[0] == f"gdsio doctor: {tmp_path}"
    assert "CUDA device 0" not in out and "[FAIL] GPU" in out
    assert NO_DRIVER in out and "cudaErrorInsufficientDriver" not in out
    assert re.search(r"exit status 1: \d+ check\(s\) failed: GPU", out)


def test_doctor_refuses_a_device_that_does_not_exist(tmp_path, capsys, monkeypatch):
    real = doctor.doctor

    def with_two_gpus(path, device=0):
        rep = real(path, device)
        next(c for c in rep["checks"] if c["id"] == "gpu")["details"]["cuda_status"] = {"device_count": 2}
        return rep

    monkeypatch.setattr(doctor, "doctor", with_two_gpus)
    code, out, err = _run(capsys, "doctor", str(tmp_path), "--device", "5")
    assert code == EXIT_USAGE and out == "" and err == "gdsio doctor: error: --device 5: no such CUDA device (2 visible)\n"


# ---- documented -----------------------------------------------------------------------


def test_exit_statuses_are_in_help_and_in_the_readme(capsys):
    for argv in ([], ["demo"], ["doctor"], ["bench"], ["info"]):
        assert main([*argv, "--help"]) == 0
        out = capsys.readouterr().out
        assert "exit status:" in out, argv
        for code in (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED):
            assert re.search(rf"^\s+{code}\s+\S", out, re.M), (argv, code)
    text = README.read_text()
    section = text[text.index("## Command line"):]
    section = section[: section.index("\n## ", 3)]
    for code in (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED):
        assert re.search(rf"^\| `{code}` \|", section, re.M), code
    assert cli.EXIT_CODES.splitlines()[0] == "exit status:"
