"""bench/bench_ray.py --pinned (bench/ray_pinned.py) at its --smoke size, so the
1+1 core simulation cannot rot: every config runs, the consumer and the nodes
are pinned where the bench says, every socket is on loopback and no process
outlives the run. No timing is asserted."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")


@pytest.fixture(scope="module")
def pinned():
    spec = importlib.util.spec_from_file_location("gdsio_bench_ray_pinned", os.path.join(BENCH, "ray_pinned.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.ray
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")  # Ray Data's own, as in test_ray.py
@pytest.mark.skipif(not os.path.isfile(os.path.join(BENCH, "ray_pinned.py")), reason="bench/ is not beside tests/")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the pinned simulation needs two cores")
def test_the_pinned_simulation_runs_pinned_on_loopback_and_leaves_nothing(pinned):
    configs = pinned.SMOKE_CONFIGS[:-1] + ("1:0.5",) + pinned.SMOKE_CONFIGS[-1:]
    result = pinned.run_pinned(images=16, batch=4, step_ms=1.0, passes=1, size=(64, 48),
                               configs=configs, timeout=300)
    rows = {r["config"]: r for r in result["rows"]}
    assert list(rows) == ["local", "1:0.0", "2:auto", "1:0.5", "both"]
    # One CPU node after two: a cluster of its own, whose one node made the remote batches (a node left from
    # the config before would have joined the pool).
    assert result["clusters"] == 2 and rows["1:0.5"]["nodes"] == 1 and rows["1:0.5"]["remote_nodes_seen"] == 1
    assert rows["1:0.5"]["remote_samples"] == 8 and rows["1:0.0"]["remote_nodes_seen"] == 1
    assert all(r["images"] == 16 and r["steps"] == 4 for r in rows.values())
    core0, core1 = result["settings"]["cores"]
    assert rows["local"]["cores"] == [core0] and rows["both"]["cores"] == [core0, core1]
    # local_share=0.0: every sample was made on the CPU node, whose processes were timed.
    assert rows["1:0.0"]["remote_samples"] == 16 and rows["1:0.0"]["local_samples"] == 0
    assert rows["1:0.0"]["nodes"] == 1 and rows["2:auto"]["nodes"] == 2
    assert all(r["consumer_cpu_s"] >= 0 and r["steps_per_s"] > 0 for r in rows.values())
    assert result["affinity"] == {"head": [str(core0)], "nodes": [str(core1)]}
    checks = result["loopback_checks"]
    assert [c["config"] for c in checks] == ["1 node(s) started", "1:0.0", "2 node(s) started", "2:auto",
                                             "1 node(s) started", "1:0.5"]
    assert all(c["listening"] >= 3 and c["listening_addresses"] == ["127.0.0.1"] for c in checks), checks
    assert result["left_running"] == []
    md = pinned.table(result)
    assert "| `ray.Loader(local_share=0.0)`, one CPU node |" in md and "1.00x" in md
    # The planner's column, when a run has it: each config's prediction beside it, as a ratio to the first.
    result["planner"] = {"steps_per_s": {"local": 10.0, "1:0.0": 5.0, "2:auto": 12.5, "both": 20.0},
                         "costs": {"images": 8, "repeats": 3, "ms_per_image": 1.0, "receive_ms_per_image": 0.2,
                                   "remote_ms_per_image": 1.1}, "advice": {"cpu_nodes": 1, "local_share": 0.4}}
    md = pinned.table(result)
    assert "| 5.00 (0.50x) |" in md and "| 12.50 (1.25x) |" in md and "receiving 0.20" in md
    # No process of the run is left: none names the cluster's temporary directory.
    assert _naming(result["cluster_tmp"]) == []


@pytest.mark.skipif(not os.path.isfile(os.path.join(BENCH, "ray_pinned.py")), reason="bench/ is not beside tests/")
def test_auto_first_pass_is_told_by_tenths_and_against_the_fixed_shares(pinned):
    here = [1] * 20 + [0, 1] * 14  # 48 batches: all made here while the pool starts, then every other one
    assert pinned.tenths(here)[:4] == [1.0] * 4 and pinned.tenths(here)[-1] == 0.6  # batches 43-47
    assert len(pinned.tenths(here)) == 10 and pinned.tenths([1, 0, 1]) == [1.0, 0.0, 1.0]
    times = [0.1 * (k + 1) for k in range(48)]
    rows = [dict(config="local", kind="local", share=None, nodes=0, batch_times_first_pass=[1.0] * 48),
            dict(config="1:0.4", kind="ray", share="0.4", nodes=1, batch_times_first_pass=[9.6] * 48),
            dict(config="1:auto", kind="ray", share="auto", nodes=1, batch_times_first_pass=times,
                 made_here_first_pass=here)]
    text = pinned.first_pass(rows[2], rows)
    assert "48 batches in 4.80 s" in text and "9.60 s at 0.4 (0.50x)" in text and "1.00 s" not in text
    assert "all of it 0.71" in text  # (20 + 14) / 48


def _naming(text: str) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        out.append(int(p))
            except OSError:
                pass
    return out


def test_sys_path_is_left_as_it_was(pinned, tmp_path):
    path = list(sys.path)
    pinned.write_dataset(str(tmp_path), 4, (32, 24))
    assert sys.path == path
    assert sorted(os.listdir(tmp_path)) == ["class0", "class1", "class2", "class3"]
