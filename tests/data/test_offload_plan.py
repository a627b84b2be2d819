"""gdsio.data.offload_plan and `gdsio offload-plan`: the arithmetic, checked by hand;
--measure on a small ImageFolder (with Ray: a loopback cluster; without: said)."""

from __future__ import annotations

import json
import math
import os
import sys
import types

import pytest

from gdsio.data.offload_plan import ASSUMED_RECEIVE_FRACTION, offload_plan
from gdsio.tools.cli import main

ARGS = dict(ms_per_image=20.0, steps_per_s=4, batch_size=256, local_cores=12, node_cores=16,
            gpu_node_price=4.1, cpu_node_price=0.68)
FREE = dict(ARGS, receive_ms_per_image=0.0, remote_ms_per_image=20.0)  # receiving free, remote cores as local ones


def test_with_free_receiving_and_equal_cores_the_nodes_cover_the_need_with_headroom():
    p = offload_plan(**FREE)
    # 1024 images/s needed; 12 cores x 50/s = 600 here; 1.2 x 1024 - 600 = 628.8 more: one node of 800/s.
    assert p.images_per_s_needed == 1024 and p.local_images_per_s == 600 and p.node_images_per_s == 800
    assert p.cpu_nodes == 1 and p.local_share == pytest.approx(600 / 1024)
    assert p.steps_per_s_alone == pytest.approx(600 / 256) and p.steps_per_s_with_nodes == 4
    assert p.cost_per_step_alone == pytest.approx(4.1 / 3600 / (600 / 256))
    assert p.cost_per_step_with_nodes == pytest.approx((4.1 + 0.68) / 3600 / 4)
    assert p.assumptions == () and math.isinf(p.receive_cap_images_per_s)
    # Without headroom 424 images/s are missing: still one node; with 3x, (3072 - 600) / 800 -> 4.
    assert offload_plan(**{**FREE, "headroom": 1.0}).cpu_nodes == 1
    assert offload_plan(**{**FREE, "headroom": 3.0}).cpu_nodes == 4


def test_the_gpu_node_pays_for_every_image_it_receives():
    p = offload_plan(**{**FREE, "receive_ms_per_image": 2.0})
    # One node: 800 received cost 1600 of the 12000 CPU-ms/s, the other 10400 make 520 here: 1320 >= 1228.8.
    assert p.cpu_nodes == 1 and p.receive_cap_images_per_s == 6000
    # At the GPU's 1024/s: x here and 1024 - x received, 20x + 2(1024 - x) = 12000 -> x = 552.9.
    assert p.local_share == pytest.approx((12000 - 2 * 1024) / 18 / 1024)
    assert p.steps_per_s_with_nodes == 4
    # At a fixed share: all received -> the node's 800/s; half -> 11 ms each here: 1090/s, the GPU's 1024 binds.
    assert p.steps_per_s_at(0.0) == pytest.approx(800 / 256)
    assert p.steps_per_s_at(0.5) == 4 and p.steps_per_s_at(1.0) == pytest.approx(600 / 256)
    assert p.steps_per_s_at(0.0, cpu_nodes=0) == 0


def test_receiving_caps_what_more_nodes_can_give():
    p = offload_plan(**{**FREE, "receive_ms_per_image": 12.0})
    # 12000 / 12 = 1000 images/s at most, below the 1024 needed: two nodes reach the cap, a third adds nothing.
    assert p.receive_cap_images_per_s == 1000 and p.cpu_nodes == 2 and p.local_share == 0.0
    assert p.steps_per_s_with_nodes == pytest.approx(1000 / 256)
    assert "it can take in at most 1,000 images/s" in str(p)
    assert offload_plan(**{**FREE, "receive_ms_per_image": 12.0, "cpu_nodes": 5}).steps_per_s_with_nodes \
        == pytest.approx(1000 / 256)


def test_no_node_helps_when_receiving_costs_what_making_does():
    p = offload_plan(**{**FREE, "receive_ms_per_image": 20.0})
    assert p.cpu_nodes == 0 and p.local_share == 1.0 and p.steps_per_s_with_nodes == p.steps_per_s_alone
    assert "no CPU node helps" in str(p)


def test_remote_cores_are_their_own():
    p = offload_plan(**{**FREE, "remote_ms_per_image": 40.0})  # a node of 16 slower cores makes 400/s
    assert p.node_images_per_s == 400 and p.cpu_nodes == 2  # 628.8 missing


def test_what_is_not_given_is_assumed_and_said():
    p = offload_plan(**ARGS)
    assert p.receive_ms_per_image == ASSUMED_RECEIVE_FRACTION * 20.0 and p.remote_ms_per_image == 20.0
    text = str(p)
    assert "assumed: receive_ms_per_image" in text and "--measure" in text
    assert "assumed: remote_ms_per_image = ms_per_image" in text


def test_a_node_that_keeps_up_needs_none_and_no_local_core_receives_nothing():
    fed = offload_plan(**{**FREE, "ms_per_image": 5.0})  # 12 x 200/s = 2400 >= 1.2 x 1024
    assert fed.cpu_nodes == 0 and fed.local_share == 1.0 and fed.steps_per_s_alone == 4
    assert "no CPU node is needed" in str(fed)
    none_here = offload_plan(**{**FREE, "local_cores": 0})  # receiving free: the nodes make everything
    assert none_here.local_share == 0.0 and none_here.cpu_nodes == math.ceil(1.2 * 1024 / 800)
    assert none_here.steps_per_s_alone == 0 and none_here.cost_per_step_alone == math.inf
    starved = offload_plan(**{**FREE, "local_cores": 0, "receive_ms_per_image": 1.0})  # no core left to receive
    assert starved.receive_cap_images_per_s == 0 and starved.steps_per_s_with_nodes == 0


@pytest.mark.parametrize("kw, match", [
    ({"ms_per_image": 0}, "ms_per_image must be a positive number"),
    ({"steps_per_s": -1}, "steps_per_s"),
    ({"batch_size": 2.5}, "batch_size must be a positive int"),
    ({"node_cores": 0}, "node_cores"),
    ({"local_cores": float("nan")}, "local_cores"),
    ({"headroom": 0.5}, "headroom must be >= 1"),
    ({"cpu_node_price": True}, "cpu_node_price"),
    ({"receive_ms_per_image": -1.0}, "receive_ms_per_image must be a non-negative number"),
    ({"remote_ms_per_image": 0}, "remote_ms_per_image must be a positive number"),
    ({"cpu_nodes": -1}, "cpu_nodes must be a non-negative int"),
])
def test_bad_arguments_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        offload_plan(**{**ARGS, **kw})
    with pytest.raises(ValueError, match="local_share must be a fraction"):
        offload_plan(**FREE).steps_per_s_at(1.5)


ARGV = ["offload-plan", "--steps-per-s", "4", "--batch-size", "256", "--local-cores", "12", "--node-cores", "16",
        "--gpu-node-price", "4.1", "--cpu-node-price", "0.68"]


def test_the_cli_prints_the_plan_and_names_a_bad_value(capsys):
    argv = ARGV + ["--ms-per-image", "20", "--receive-ms-per-image", "0", "--remote-ms-per-image", "20"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "add 1 CPU node(s) of 16 cores" in out and "local_share=0.59" in out and "1.46x price-performance" in out
    assert main(argv + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cpu_nodes"] == 1 and doc["receive_ms_per_image"] == 0 and "measured" not in doc
    assert main(argv + ["--cpu-nodes", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cpu_nodes"] == 3
    assert main(ARGV + ["--ms-per-image", "0"]) == 2
    assert "ms_per_image must be a positive number" in capsys.readouterr().err
    assert main(ARGV) == 2
    assert "give --ms-per-image, or --measure DATASET" in capsys.readouterr().err
    assert main(ARGV + ["--measure", "/no/such/folder"]) == 2
    assert "/no/such/folder" in capsys.readouterr().err


@pytest.fixture()
def folder(tmp_path):
    from gdsio.tools.demo import write_jpeg_folder

    write_jpeg_folder(str(tmp_path / "train"), classes=2, per_class=16, size=(96, 72))
    return str(tmp_path / "train")


def test_measure_without_ray_measures_making_and_says_what_it_could_not(folder, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as without the extra
    argv = ARGV[:1] + ["--measure", folder, "--sample", "8", "--repeats", "2", "--steps-per-s", "1000",
                       "--batch-size", "4"] + ARGV[5:] + ["--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    m = doc["measured"]
    assert m["images"] == 8 and m["repeats"] == 2 and len(m["runs"]["ms_per_image"]) == 2
    assert m["ms_per_image"] == doc["ms_per_image"] and m["ms_per_image"] >= 0
    assert m["receive_ms_per_image"] is None and m["remote_ms_per_image"] is None
    assert "Ray is not installed" in m["not_measured"]
    assert any(a.startswith("receive_ms_per_image =") for a in doc["assumptions"])
    # A value given beside --measure wins over the measured one.
    assert main(argv + ["--ms-per-image", "7.5"]) == 0
    assert json.loads(capsys.readouterr().out)["ms_per_image"] == 7.5


class _AheadPool:
    """A loader whose pool spans `epochs` passes of `per` batches and has made `ahead` batches past the one
    the consumer holds (a queue and calls in flight, as gdsio.data.ray.Loader's): `made` is the work done."""

    def __init__(self, per: int, ahead: int, epochs: int) -> None:
        self.per, self.ahead, self.total = per, ahead, per * epochs
        self.made = self.taken = self.samples = 0

    def stats(self, reset: bool = False):
        if reset:
            self.samples = 0
        return types.SimpleNamespace(samples=self.samples, remote_samples=self.samples)

    def __iter__(self):
        for _ in range(self.per):
            self.made = min(self.taken + 1 + self.ahead, self.total)
            self.taken += 1
            self.samples += 1
            yield None


@pytest.mark.parametrize("repeats", [1, 3])
def test_a_timed_pass_of_a_pool_that_runs_ahead_counts_one_pass_of_work(repeats):
    from gdsio.data.offload_measure import TRAILING, _passes

    # The pool made the first timed pass's first batches in the warm-up and makes the next pass's in it; a last
    # timed pass with no pass after it counted `ahead` batches too few (all of them: 0, the CI failure).
    pool = _AheadPool(per=24, ahead=10, epochs=1 + repeats + TRAILING)
    got = _passes(pool, repeats, 0.0, {"ms": (lambda: pool.made / 1e3, lambda s: s.samples)}, trailing=TRAILING)
    assert got["ms"] == pytest.approx([1.0] * repeats)
    assert pool.taken == pool.total  # every epoch of the pool consumed: none left under a closing pool


@pytest.mark.ray
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")  # Ray Data's own, as in test_ray.py
def test_measure_with_ray_measures_all_three_on_loopback_and_leaves_no_process(tmp_path, capsys, monkeypatch):
    from gdsio.tools.demo import write_jpeg_folder

    # The nodes' processes are timed from /proc in clock ticks (10 ms): a pass must give the CPU node tens
    # of ms of work, or a reading of 0 ticks is refused ("too few to time"), as 32 images of 96x72 once were.
    folder = str(tmp_path / "train")
    write_jpeg_folder(folder, classes=2, per_class=48, size=(500, 375))
    monkeypatch.setenv("GDSIO_TEST_PARENT", str(os.getpid()))  # the cluster's processes inherit it
    argv = ARGV[:1] + ["--measure", folder, "--sample", "96", "--repeats", "1", "--steps-per-s", "1000",
                       "--batch-size", "4"] + ARGV[5:] + ["--cpu-nodes", "1", "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    m = doc["measured"]
    assert m["not_measured"] == "" and doc["assumptions"] == []
    for k in ("ms_per_image", "receive_ms_per_image", "remote_ms_per_image"):
        assert m[k] is not None and m[k] >= 0 and len(m["runs"][k]) == 1, k
    assert doc["receive_ms_per_image"] == m["receive_ms_per_image"]
    assert doc["remote_ms_per_image"] == m["remote_ms_per_image"] and m["images"] == 96
    left = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if b"/tmp/gdsio-lb-" in f.read() and _ours(int(p)):
                        left.append(int(p))
            except OSError:
                pass
    assert left == []


def _ours(pid: int) -> bool:
    """Whether `pid` runs with this test process's environment marker (the cluster inherits it)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"GDSIO_TEST_PARENT={os.getpid()}".encode() in f.read()
    except OSError:
        return False
