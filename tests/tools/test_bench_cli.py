"""The ``gdsio`` command: bench smoke-run at 1 MiB (so the harness cannot rot),
doctor, info and demo. Speed is never asserted: only structure and exit codes."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from gdsio.tools import bench
from gdsio.platform import filesystems, pagecache
from gdsio.tools.cli import main

GPU_PATHS = [name for name, p in bench.PATHS.items() if p.destination == bench.GPU]
HOST_PATHS = [name for name, p in bench.PATHS.items() if p.destination == bench.HOST]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_bench_smoke_1mib(tmp_path, capsys):
    out_json = tmp_path / "out.json"
    code, out, err = _run(capsys, "bench", "--sizes", "1M", "--repeat", "1", "--json", str(out_json),
                          "--tmpdir", str(tmp_path))
    assert code == 0, err
    doc = json.loads(out_json.read_text())
    for key in ("schema", "gdsio", "git_commit", "date", "command", "config", "machine", "files",
                "ceilings", "results", "skipped"):
        assert key in doc, key
    assert doc["command"].startswith("gdsio bench --sizes 1M")
    assert doc["config"]["repeat"] == 1 and doc["config"]["mode"] == "warm"
    assert doc["files"] == [{"path": doc["files"][0]["path"], "size": 1 << 20, "generated": True}]
    assert "cpu" in doc["machine"] and "storage" in doc["machine"]
    # Generated files are gone, the JSON stays.
    assert os.listdir(tmp_path) == ["out.json"]

    rows = {r["path"]: r for r in doc["results"]}
    for name in HOST_PATHS:
        r = rows[name]
        assert r["status"] == "ok" and r["size"] == 1 << 20 and r["gbps"] > 0
        assert r["ratio_to"] == "numpy-fromfile" and r["ratio"] > 0
        # An O_DIRECT row (dd-direct) is held against the disk, the others against the page cache.
        expected = "o-direct-disk" if r["direct_io"] else "page-cache"
        assert r["ceiling"]["name"] == expected and r["fraction_of_ceiling"] > 0
    assert rows["gdsio-posix"]["backend"] == "posix"
    ceilings = {c["name"]: c for c in doc["ceilings"]}
    assert set(ceilings) == set(bench.CEILINGS)
    assert ceilings["page-cache"]["status"] == "ok" and ceilings["page-cache"]["gbps"] > 0

    # Every GPU path either ran or is listed as skipped, with its reason.
    skipped = {s["path"]: s["reason"] for s in doc["skipped"]}
    for name in GPU_PATHS:
        assert (name in rows) != (name in skipped), name
        if name in skipped:
            assert skipped[name]
    assert skipped["image-decode"].startswith("images are measured in images/s")
    why = bench.gpu_unusable_reason()
    if why:  # this machine and CI: no GPU
        assert all(skipped[name] == why for name in GPU_PATHS if name != "image-decode")
        assert ceilings["h2d-pinned"]["status"] == "skipped" and ceilings["h2d-pinned"]["reason"] == why
    assert "Into host memory" in out and "Skipped here" in out and "wrote" in out


def test_bench_on_a_given_file_cold(tmp_path, capsys, make_file):
    path, _ = make_file(3 << 20)
    out_json = tmp_path / "cold.json"
    code, out, err = _run(capsys, "bench", path, "--cold", "--repeat", "1", "--paths",
                          "gdsio-posix,numpy-fromfile", "--threads", "2", "--json", str(out_json))
    assert code == 0, err
    doc = json.loads(out_json.read_text())
    assert doc["files"] == [{"path": path, "size": 3 << 20, "generated": False}]
    assert doc["config"]["settings"]["threads"] == 2
    assert [s["path"] for s in doc["skipped"]] == []
    for r in doc["results"]:
        assert r["cache"]["mode"] == "cold" and isinstance(r["cache"]["evicted"], bool)
        assert r["ceiling"]["of"] == ["o-direct-disk"]


def test_bench_says_when_eviction_failed(tmp_path, make_file, monkeypatch):
    path, _ = make_file(1 << 20)
    monkeypatch.setattr(pagecache, "evict", lambda p: False)
    cfg = bench.BenchConfig(repeat=1, cold=True, paths=("numpy-fromfile",))
    doc = bench.run_bench(bench.files_from_path(path), cfg)
    (row,) = doc["results"]
    assert row["cache"]["evicted"] is False
    assert "eviction did NOT work" in row["reason"]
    assert "eviction did NOT work" in bench.render_text(doc)


def test_bench_reports_progress_and_skips_the_o_direct_ceiling_on_tmpfs(make_file, monkeypatch):
    """on_progress sees the document grow row by row (the CLI rewrites --json
    then); the O_DIRECT ceiling, which bypasses the page cache, needs no
    eviction note; on tmpfs (where O_DIRECT reads memory) it is skipped."""
    path, _ = make_file(1 << 20)
    monkeypatch.setattr(pagecache, "evict", lambda p: False)
    cfg = bench.BenchConfig(repeat=1, paths=("numpy-fromfile", "gdsio-posix"))
    seen = []
    doc = bench.run_bench(bench.files_from_path(path), cfg,
                          on_progress=lambda d: seen.append(len(d["ceilings"]) + len(d["results"])))
    assert seen == list(range(1, len(bench.CEILINGS) + 3))
    direct = next(c for c in doc["ceilings"] if c["name"] == "o-direct-disk")
    if direct["status"] == "ok":
        assert direct["reason"] == ""
    monkeypatch.setattr(filesystems, "filesystem_of", lambda p: {"fs_type": "tmpfs"})
    row = bench.run._storage_ceiling("o-direct-disk", path, 1 << 20, cfg)
    assert row["status"] == "skipped" and "tmpfs" in row["reason"]


def test_a_failing_path_is_reported_and_exits_1(tmp_path, capsys, make_file, monkeypatch):
    path, _ = make_file(1 << 20)

    def prepare(p, size, cfg):
        def run():
            raise OSError(5, "disk on fire", p)
        return run

    monkeypatch.setitem(bench.PATHS, "boom", bench.CopyPath("boom", bench.HOST, "raises", lambda cfg: None, prepare))
    code, out, err = _run(capsys, "bench", path, "--paths", "boom,numpy-fromfile", "--repeat", "1")
    assert code == 1
    assert "1 measurement(s) failed (boom)" in err
    assert "failed" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "--paths", "nope"], "unknown path(s) nope"),
        (["bench", "/no/such/file"], "no such file or directory"),
        (["bench", "--sizes", "12Q"], "--sizes: not a size"),
        (["bench", "--repeat", "0", "--sizes", "1M"], "repeat must be an int >= 1"),
        (["bench", "--threads", "0"], "setting 'threads' must be between 1 and 256"),
        (["bench", "--tmpdir", "/no/such/dir", "--sizes", "1M"], "--tmpdir: no such directory"),
    ],
)
def test_bench_mistakes_are_one_line_errors(capsys, argv, message):
    code, out, err = _run(capsys, *argv)
    assert code == 2
    assert message in err and err.startswith("gdsio bench: error:")


def test_plot_without_matplotlib_says_how_to_get_it(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    code, out, err = _run(capsys, "bench", "--sizes", "1M", "--plot", "x.png")
    assert code == 2
    assert "pip install 'gdsio[plot]'" in err


def test_bench_of_a_path_warns_of_sizes_only_when_given(capsys, make_file):
    """--quick brings its own size: only a --sizes the user typed is "ignored"."""
    path, _ = make_file(64 << 10)
    code, out, err = _run(capsys, "bench", path, "--quick", "--paths", "numpy-fromfile")
    assert code == 0 and "--sizes is ignored" not in err, err
    code, out, err = _run(capsys, "bench", path, "--sizes", "1M", "--repeat", "1", "--paths", "numpy-fromfile")
    assert code == 0 and err == "gdsio bench: --sizes is ignored: PATH is given\n", err


def test_empty_directory_is_an_error(tmp_path, capsys):
    code, out, err = _run(capsys, "bench", str(tmp_path))
    assert code == 2 and "holds no non-empty regular files" in err


def test_parse_sizes():
    assert bench.parse_sizes("1M,64M,1G") == [1 << 20, 64 << 20, 1 << 30]
    assert bench.parse_sizes("4096, 4k ,1.5M") == [4096, 4096, 3 << 19]
    for bad in ("", "0", "1X", "-1M"):
        with pytest.raises(ValueError, match="--sizes"):
            bench.parse_sizes(bad)


def test_render_from_saved_json(tmp_path, capsys):
    out_json = tmp_path / "r.json"
    assert main(["bench", "--sizes", "64K", "--repeat", "1", "--paths", "numpy-fromfile", "--json", str(out_json)]) == 0
    capsys.readouterr()
    doc = json.loads(out_json.read_text())
    md = bench.render_markdown(doc)
    assert "| size | path | GB/s |" in md and "numpy-fromfile" in md
    assert "Into host memory" in bench.render_text(doc)


def test_doctor_json(tmp_path, capsys):
    code, out, err = _run(capsys, "doctor", str(tmp_path), "--json")
    rep = json.loads(out)
    assert code == rep["exit_code"] and err == ""
    for key in ("gdsio", "path", "device", "gpu", "ok", "exit_code", "reason", "checks", "backends", "auto",
                "to_get_gds"):
        assert key in rep, key
    assert rep["path"] == str(tmp_path)
    failed = [c for c in rep["checks"] if c["status"] == "fail"]
    # 0 only where true GDS is usable and nothing failed (not on this machine nor CI).
    assert (code == 0) == (rep["auto"]["gpu"] == "gds" and not failed) == rep["ok"]
    if code:
        assert code == 1 and rep["reason"]
    ids = {c["id"] for c in rep["checks"]}
    assert {"gdsio", "gpu", "driver", "kernels", "libcufile", "cufile-driver", "dma-path", "cufile-json",
            "filesystem", "o-direct", "cufile-register", "pcie", "kvikio", "nvjpeg"} <= ids
    for c in rep["checks"]:
        assert c["status"] in ("ok", "warn", "fail", "info", "skip") and c["summary"]
    assert rep["auto"]["host"] == "posix" and rep["auto"]["gpu"] in ("gds", "pinned", "unavailable")
    assert rep["auto"]["gpu_why"]
    if rep["auto"]["gpu"] != "gds":
        assert rep["to_get_gds"] and all(isinstance(s, str) and s for s in rep["to_get_gds"])
    fs = next(c for c in rep["checks"] if c["id"] == "filesystem")
    assert fs["details"]["fs_type"]


def test_doctor_text(tmp_path, capsys):
    code, out, err = _run(capsys, "doctor", str(tmp_path))
    assert code in (0, 1) and err == ""
    assert out.startswith(f"gdsio doctor: {tmp_path}")
    assert "Backend 'auto' will choose here:" in out and "into host memory: posix" in out
    assert out.rstrip().splitlines()[-1].startswith(f"exit status {code}: ")
    assert ("[FAIL]" in out) <= (code == 1)  # a [FAIL] line never comes with exit status 0


def test_info_json(tmp_path, capsys, make_file):
    path, _ = make_file(4096)
    code, out, err = _run(capsys, "info", path, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["auto"]["host"] == "posix" and {b["name"] for b in data["backends"]} >= {"posix", "pinned"}
    code, out, err = _run(capsys, "info")
    assert code == 0 and "backends:" in out
    code, out, err = _run(capsys, "info", str(tmp_path / "nope"))
    assert code == 2 and "no such file or directory" in err


def test_demo_runs_anywhere(tmp_path, capsys):
    from gdsio.tools import demo

    demo.write_jpeg_folder(str(tmp_path), classes=2, per_class=5, size=(64, 48))
    code, out, err = _run(capsys, "demo", str(tmp_path), "--batch-size", "4", "--no-train")
    assert code == 0, err
    assert "images/s" in out and "gdsio bench --quick" in out


def test_no_command_and_help(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().err
    assert main(["--help"]) == 0
    assert main(["bench", "--bogus"]) == 2
    capsys.readouterr()


def test_generated_files_hold_random_bytes(tmp_path):
    gen = bench.generate_files([5000], str(tmp_path))
    try:
        (f,) = gen.files
        data = np.fromfile(f.path, dtype=np.uint8)
        assert f.size == 5000 and data.size == 5000 and len(np.unique(data)) > 200
    finally:
        gen.tmpdir.cleanup()


@pytest.mark.gpu
def test_bench_gpu_paths_run_or_say_why(tmp_path, make_file):
    path, _ = make_file(1 << 20)
    doc = bench.run_bench(bench.files_from_path(path), bench.BenchConfig(repeat=1))
    rows = {r["path"]: r for r in doc["results"]}
    skipped = {s["path"]: s["reason"] for s in doc["skipped"]}
    for name in ("naive", "pinned-sync", "gdsio-pinned"):
        assert rows[name]["status"] == "ok" and rows[name]["gbps"] > 0, rows[name]
        assert rows[name]["ratio_to"] == "naive" and rows[name]["ceiling"] is not None
    assert rows["gdsio-pinned"]["backend"] == "pinned"
    cufile = rows.get("gdsio-cufile")
    if cufile is not None and cufile["status"] == "ok":
        assert cufile["backend"] in ("gds", "cufile-compat")  # named as what ran, never plain "cufile"
    for name in GPU_PATHS:
        r = rows.get(name)
        assert (r is not None and (r["status"] == "ok" or r["reason"])) or skipped.get(name), name
    ceilings = {c["name"]: c for c in doc["ceilings"]}
    for name in ("h2d-pinned", "d2d-copy"):
        assert ceilings[name]["status"] == "ok" and ceilings[name]["gbps"] > 0


@pytest.mark.gpu
def test_doctor_on_a_gpu_machine(tmp_path, capsys):
    code, out, err = _run(capsys, "doctor", str(tmp_path), "--json")
    rep = json.loads(out)
    assert code == rep["exit_code"] and (code == 0) == rep["ok"]
    assert rep["gpu"] is True
    checks = {c["id"]: c for c in rep["checks"]}
    assert checks["gpu"]["status"] == "ok" and checks["kernels"]["status"] == "ok", checks["kernels"]
    assert rep["auto"]["gpu"] in ("gds", "pinned")
