"""gdsio.data.offload_plan and `gdsio offload-plan`: the arithmetic, checked by hand."""

from __future__ import annotations

import json
import math

import pytest

from gdsio.data.offload_plan import offload_plan
from gdsio.tools.cli import main

ARGS = dict(ms_per_image=20.0, steps_per_s=4, batch_size=256, local_cores=12, node_cores=16,
            gpu_node_price=4.1, cpu_node_price=0.68)


def test_a_starved_gpu_node_gets_the_nodes_that_cover_the_need_with_headroom():
    p = offload_plan(**ARGS)
    # 1024 images/s needed; 12 cores x 50/s = 600 here; 1.2 x 1024 - 600 = 628.8 more: one node of 800/s.
    assert p.images_per_s_needed == 1024 and p.local_images_per_s == 600
    assert p.cpu_nodes == 1 and p.local_share == pytest.approx(600 / 1024)
    assert p.steps_per_s_alone == pytest.approx(600 / 256) and p.steps_per_s_with_nodes == 4
    assert p.cost_per_step_alone == pytest.approx(4.1 / 3600 / (600 / 256))
    assert p.cost_per_step_with_nodes == pytest.approx((4.1 + 0.68) / 3600 / 4)
    # Without headroom 424 images/s are missing: still one node; with 3x, (3072 - 600) / 800 -> 4.
    assert offload_plan(**{**ARGS, "headroom": 1.0}).cpu_nodes == 1
    assert offload_plan(**{**ARGS, "headroom": 3.0}).cpu_nodes == 4


def test_a_node_that_keeps_up_needs_none_and_no_local_core_needs_them_all():
    fed = offload_plan(**{**ARGS, "ms_per_image": 5.0})  # 12 x 200/s = 2400 >= 1.2 x 1024
    assert fed.cpu_nodes == 0 and fed.local_share == 1.0 and fed.steps_per_s_alone == 4
    assert "no CPU node is needed" in str(fed)
    none_here = offload_plan(**{**ARGS, "local_cores": 0})
    assert none_here.local_share == 0.0 and none_here.cpu_nodes == math.ceil(1.2 * 1024 / 800)
    assert none_here.steps_per_s_alone == 0 and none_here.cost_per_step_alone == math.inf


@pytest.mark.parametrize("kw, match", [
    ({"ms_per_image": 0}, "ms_per_image must be a positive number"),
    ({"steps_per_s": -1}, "steps_per_s"),
    ({"batch_size": 2.5}, "batch_size must be a positive int"),
    ({"node_cores": 0}, "node_cores"),
    ({"local_cores": float("nan")}, "local_cores"),
    ({"headroom": 0.5}, "headroom must be >= 1"),
    ({"cpu_node_price": True}, "cpu_node_price"),
])
def test_bad_arguments_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        offload_plan(**{**ARGS, **kw})


def test_the_cli_prints_the_plan_and_names_a_bad_value(capsys):
    argv = ["offload-plan", "--ms-per-image", "20", "--steps-per-s", "4", "--batch-size", "256", "--local-cores", "12",
            "--node-cores", "16", "--gpu-node-price", "4.1", "--cpu-node-price", "0.68"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "add 1 CPU node(s) of 16 cores" in out and "local_share=0.59" in out and "1.46x price-performance" in out
    assert main(argv + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cpu_nodes"] == 1
    assert main([*argv[:2], "0", *argv[3:]]) == 2
    assert "ms_per_image must be a positive number" in capsys.readouterr().err
