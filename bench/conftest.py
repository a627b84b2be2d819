"""pytest-benchmark suites of gdsio (not part of the default test run: pyproject's
testpaths is ["tests"]). Run them with

    pytest bench/ --benchmark-json=bench.json            # sizes: GDSIO_BENCH_SIZES=1M,64M
    GDSIO_BENCH_COLD=1 pytest bench/                      # evict the file before each round

Files here are named bench_*.py, so they are collected by the hook below; GPU
benchmarks carry the ``gpu`` marker and are skipped centrally when no CUDA
device is visible, as in tests/.
"""

from __future__ import annotations

import os

import pytest


def pytest_collect_file(file_path, parent):
    # pytest collects test_*.py by default; an explicitly named file it collects itself.
    if file_path.suffix == ".py" and file_path.name.startswith("bench_") and not parent.session.isinitpath(file_path):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [it for it in items if "gpu" in it.keywords]
    if not gpu_items:
        return
    from gdsio._libs import gpu_unusable_reason

    why = gpu_unusable_reason()
    if why and os.environ.get("GDSIO_REQUIRE_GPU") == "1":  # bench/device_check.sh: a skip would hide a failure
        raise pytest.UsageError(f"GDSIO_REQUIRE_GPU=1, but the GPU tests cannot run: {why}")
    if why:
        mark = pytest.mark.skip(reason=f"needs a CUDA device: {why}")
        for it in gpu_items:
            it.add_marker(mark)
