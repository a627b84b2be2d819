"""bench/cpu_peers.py smoke-run at tiny sizes (so it cannot rot), with the
peers it finds and with every peer treated as absent."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "cpu_peers.py")


@pytest.mark.parametrize("skip", ["", "all"])
def test_cpu_peers_smoke(tmp_path, skip):
    cmd = [sys.executable, "-P", SCRIPT, "--smoke", "--out-dir", str(tmp_path), "--name", "smoke"]
    if skip:
        cmd += ["--skip-peers", skip]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((tmp_path / "smoke.json").read_text())
    md = (tmp_path / "smoke.md").read_text()
    assert doc["commit"] and doc["machine"]["cpus"] and doc["command"].startswith("python bench/cpu_peers.py --smoke")
    names = [row["workload"] for row in doc["rows"]]
    assert any(n.startswith("JPEG decode") for n in names) and any(n.startswith("resize") for n in names)
    assert any("files of" in n for n in names) and any(n.startswith("npy") for n in names)
    for row in doc["rows"]:
        assert row["median_s"][row["gdsio"]] > 0 and row["workload"] in md
        assert row["best_peer"] is None or row["ratio_vs_best"] > 0
    if skip == "all":
        assert "simplejpeg: skipped (--skip-peers)" in r.stdout and "safetensors: skipped (--skip-peers)" in md
        assert not any(n.startswith("safetensors") for n in names)  # its row needs the peer to write the file
