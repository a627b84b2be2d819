"""The one rule for GPU tests and benchmarks (marker ``gpu``), used by both
tests/conftest.py and bench/conftest.py: skipped with the reason where no
CUDA device can be used, an error instead where GDSIO_REQUIRE_GPU=1 (the
device check, where a skip would hide a failure). The same for Ray tests
(marker ``ray``): skipped without Ray Data, an error where GDSIO_REQUIRE_RAY=1
(CI's Ray step)."""

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


def _ray_missing() -> str | None:
    """Why the Ray tests cannot run here, or None. Looked up without importing
    ray: it must be imported only after RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is set."""
    import importlib.util

    for name in ("ray", "pyarrow", "pydantic"):
        if importlib.util.find_spec(name) is None:
            return f"needs Ray Data ({name} is not installed): pip install \"gdsio[ray]\""
    return None


def gate_ray_items(items: list[pytest.Item]) -> None:
    ray_items = [it for it in items if it.get_closest_marker("ray") is not None]
    why = _ray_missing() if ray_items else None
    if not why:
        return
    if os.environ.get("GDSIO_REQUIRE_RAY") == "1":  # CI's Ray step: a skip there would hide a broken install
        raise pytest.UsageError(f"GDSIO_REQUIRE_RAY=1, but the Ray tests cannot run: {why}")
    for it in ray_items:
        it.add_marker(pytest.mark.skip(reason=why))

