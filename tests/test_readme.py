"""Every ```python block of README.md runs as written, each in a fresh
interpreter on the CPU (no CUDA device visible), in a temporary directory
holding small files of the names the snippets use. A block that must not run
would need another info string (e.g. ```text) and a reason beside it."""

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


@pytest.mark.parametrize("line, code", BLOCKS, ids=[f"README.md:{line}" for line, _ in BLOCKS])
def test_readme_block_runs_on_the_cpu(tmp_path, line, code):
    _write_files(tmp_path)
    script = tmp_path / f"readme_block_line_{line}.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
           "CUDA_VISIBLE_DEVICES": ""}  # the CPU machine a new user has, even on a GPU machine
    p = subprocess.run([sys.executable, "-P", str(script)], cwd=tmp_path, capture_output=True, text=True, env=env,
                       timeout=600)
    assert p.returncode == 0, f"the python block at README.md:{line} fails as written:\n{p.stderr[-4000:]}"
