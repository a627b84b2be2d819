"""The one rule for GPU tests and benchmarks (marker ``gpu``), used by both
tests/conftest.py and bench/conftest.py: skipped with the reason where no
CUDA device can be used, an error instead where GDSIO_REQUIRE_GPU=1 (the
device check, where a skip would hide a failure)."""

from __future__ import annotations

import os

import pytest


def _gpu_unusable_reason() -> str | None:
    try:
        from gdsio.platform import nvidia
    except ImportError as e:  # the extension is not built
        return f"gdsio cannot be imported: {e}"
    return nvidia.gpu_unusable_reason()


def gate_gpu_items(items: list[pytest.Item]) -> None:
    gpu_items = [it for it in items if "gpu" in it.keywords]
    if not gpu_items:
        return
    why = _gpu_unusable_reason()
    if not why:
        return
    if os.environ.get("GDSIO_REQUIRE_GPU") == "1":
        raise pytest.UsageError(f"GDSIO_REQUIRE_GPU=1, but the GPU tests cannot run: {why}")
    mark = pytest.mark.skip(reason=f"needs a CUDA device: {why}")
    for it in gpu_items:
        it.add_marker(mark)
