"""Every ```python block of README.md runs as written, each in a fresh
interpreter on the CPU (no CUDA device visible), in a temporary directory
holding small files of the names the snippets use. A block that must not run
would need another info string (e.g. ```text) and a reason beside it.

A block that imports ray (the CPU-node offload) joins, as its text says, a
running cluster: the test starts one on loopback first (a trainer head and a
node labelled for preprocessing) and hands it over through RAY_ADDRESS, as a
cluster's own launcher would; such a block carries the ``ray`` marker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _blocks() -> list[tuple[int, str]]:
    text = README.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in FENCE.finditer(text)]


BLOCKS = _blocks()


def _write_files(root: Path) -> None:
    """The files the snippets name, small: a 4 MiB shard, a model, features, two
    photos and an ImageFolder of 2 classes."""
    from PIL import Image
    from safetensors.torch import save_file

    from gdsio.tools.demo import write_jpeg_folder

    rng = np.random.default_rng(0)
    rng.integers(0, 256, 4 << 20, dtype=np.uint8).tofile(root / "shard-0001.bin")
    save_file({"embed.weight": torch.randn(64, 16), "lm_head.weight": torch.randn(16, 64)},
              str(root / "model.safetensors"))
    np.save(root / "features.npy", rng.standard_normal((32, 8)).astype(np.float32))
    for name in ("cat.jpg", "dog.jpg"):
        Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(root / name, quality=90)
    write_jpeg_folder(str(root / "imagenet" / "train"), classes=2, per_class=4, size=(64, 48))


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 2, "README.md has lost its python examples"


# The cluster a Ray block joins: started in the same interpreter before the block, on
# loopback (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 comes from conftest's environment),
# shut down after it whatever the block did.
_RAY_CLUSTER = """\
import os as _os, tempfile as _tempfile
from ray.cluster_utils import Cluster as _Cluster
_os.environ["RAY_TMPDIR"] = _tempfile.mkdtemp(prefix="gdsio-rm-", dir="/tmp")  # short: Ray's sockets live there
_node = {"node_ip_address": "127.0.0.1", "object_store_memory": 100 << 20}
_cluster = _Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, include_dashboard=False,
                                                              labels={"gdsio-role": "trainer"}, **_node))
_cluster.add_node(num_cpus=1, labels={"gdsio-role": "preprocess"}, resources={"preprocess": 1}, **_node)
_os.environ["RAY_ADDRESS"] = _cluster.address
try:
"""
_RAY_SHUTDOWN = """\
finally:
    import ray as _ray, shutil as _shutil
    _ray.shutdown()
    _cluster.shutdown()
    _shutil.rmtree(_os.environ["RAY_TMPDIR"], ignore_errors=True)
"""


def _needs_ray(code: str) -> bool:
    return re.search(r"^import .*\bray\b|^from ray\b|gdsio\.data\.ray", code, re.M) is not None


def _script(code: str) -> str:
    if not _needs_ray(code):
        return code
    return _RAY_CLUSTER + "".join(f"    {ln}\n" for ln in code.splitlines()) + _RAY_SHUTDOWN


def test_the_ray_block_joins_a_cluster():
    """The README's offload block is run, not skipped: it is found, and wrapped."""
    ray_blocks = [code for _, code in BLOCKS if _needs_ray(code)]
    assert len(ray_blocks) == 1 and 'ray.init(address="auto")' in ray_blocks[0]
    compile(_script(ray_blocks[0]), "<README ray block>", "exec")


@pytest.mark.parametrize("line, code", [pytest.param(line, code, marks=[pytest.mark.ray] if _needs_ray(code) else [],
                                                     id=f"README.md:{line}") for line, code in BLOCKS])
def test_readme_block_runs_on_the_cpu(tmp_path, line, code):
    _write_files(tmp_path)
    script = tmp_path / f"readme_block_line_{line}.py"
    script.write_text(_script(code), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
           "CUDA_VISIBLE_DEVICES": ""}  # the CPU machine a new user has, even on a GPU machine
    p = subprocess.run([sys.executable, "-P", str(script)], cwd=tmp_path, capture_output=True, text=True, env=env,
                       timeout=600)
    assert p.returncode == 0, f"the python block at README.md:{line} fails as written:\n{p.stderr[-4000:]}"
