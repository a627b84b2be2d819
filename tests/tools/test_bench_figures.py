"""bench/figures.py (the issues' headline figures, run on a GPU machine by
bench/device_check.sh) at toy sizes on the CPU, so the script cannot rot.
No timing is asserted: only that every figure runs or says why it cannot."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")


@pytest.fixture(scope="module")
def figures():
    if not os.path.isfile(os.path.join(BENCH, "figures.py")):
        pytest.skip("bench/ is not beside tests/ (an sdist without it)")
    spec = importlib.util.spec_from_file_location("gdsio_bench_figures", os.path.join(BENCH, "figures.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cpu_figures_run_or_say_why(figures, tmp_path):
    doc = figures.run(["loader", "safetensors", "resize", "jpeg", "resnet50"], "cpu", True, str(tmp_path), 32)
    f = doc["figures"]
    for name in ("resize", "jpeg", "resnet50"):
        assert f[name]["skipped"] == "needs a GPU", f[name]
    loader = f["loader"]["pipelines"]
    assert loader["gdsio"]["images"] == 32 and loader["dataloader"]["images"] == 32, f["loader"]
    assert loader["dataloader"]["gdsio_ratio"] > 0
    st = f["safetensors"]
    if "skipped" not in st:  # safetensors is a test extra; without it the figure says so
        # On the CPU both load_file and gdsio map the file (lazy, copy-on-write) by default.
        assert st["identical"] is True and st["backend"] == "mmap", st
        assert st["warm"]["ratio"] > 0 and st["cold"]["ratio"] > 0
    md = figures.render_markdown(doc)
    assert "FAILED" not in md, md
    json.dumps(doc, default=str)  # the --json output


def test_unknown_figure_is_reported_not_raised(figures, tmp_path):
    doc = figures.run(["nope"], "cpu", True, str(tmp_path), 8)
    assert "unknown figure 'nope'" in doc["figures"]["nope"]["error"]


def test_the_loader_profile_runs_on_the_cpu(tmp_path, capsys):
    """bench/profile_loader.py (run after the figures on a GPU machine) at toy size on the
    CPU: one sampled pass, every sampled thread group with its shares, written as JSON."""
    if not os.path.isfile(os.path.join(BENCH, "profile_loader.py")):
        pytest.skip("bench/ is not beside tests/ (an sdist without it)")
    spec = importlib.util.spec_from_file_location("gdsio_bench_profile_loader", os.path.join(BENCH, "profile_loader.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "p.json"
    doc = mod.main(["--device", "cpu", "--images", "32", "--batch", "8", "--interval-ms", "1", "--tmpdir",
                    str(tmp_path), "--json", str(out), "--md", str(tmp_path / "p.md")])
    assert json.loads(out.read_text()) == doc and doc["images"] == 32 and doc["images_per_s"] > 0
    assert sum(doc["io_backends"].values()) == 32
    assert "MainThread" in doc["threads"] and sorted(os.listdir(tmp_path)) == ["p.json", "p.md"]  # its folder removed
    for group in doc["threads"].values():
        assert group["samples"] > 0 and all(0 < share <= 1 for _, share in group["self"] + group["total"])
    assert capsys.readouterr().out.startswith("gdsio.Loader on cpu: 32 JPEGs, batch 8")
    assert (tmp_path / "p.md").read_text().startswith("```\ngdsio.Loader on cpu")
