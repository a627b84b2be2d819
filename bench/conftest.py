"""pytest-benchmark suites of gdsio (not part of the default test run: pyproject's
testpaths is ["tests"]). Run them with

    pytest bench/ --benchmark-json=bench.json            # sizes: GDSIO_BENCH_SIZES=1M,64M
    GDSIO_BENCH_COLD=1 pytest bench/                      # evict the file before each round

Files here are named bench_*.py, so they are collected by the hook below; GPU
benchmarks carry the ``gpu`` marker and are skipped centrally when no CUDA
device is visible, as in tests/.
"""

from __future__ import annotations

import importlib.util
import os

import pytest


def pytest_collect_file(file_path, parent):
    # pytest collects test_*.py by default; an explicitly named file it collects itself.
    if file_path.suffix == ".py" and file_path.name.startswith("bench_") and not parent.session.isinitpath(file_path):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def _gate_module():
    # tests/gpu_gate.py, by path: both folders' conftests are named conftest.
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "gpu_gate.py")
    spec = importlib.util.spec_from_file_location("gdsio_tests_gpu_gate", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gate = _gate_module()
    gate.gate_gpu_items(items)  # the rule of tests/: skip without a GPU, unless it is required
    gate.gate_ray_items(items)  # and without Ray Data (bench_ray.py)
