"""bench/hostile.py, short: mutated npy, JPEG, PNM, safetensors and raw files,
special paths (FIFO, socket, /dev/zero, a directory, a NUL, procfs) and a
rename-swap race; every count that must be zero is zero (the full run:
python bench/hostile.py --cases 2000)."""

from __future__ import annotations

import importlib.util
import os

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")


@pytest.fixture(scope="module")
def hostile():
    if not os.path.isfile(os.path.join(BENCH, "hostile.py")):
        pytest.skip("bench/ is not beside tests/ (an sdist without it)")
    spec = importlib.util.spec_from_file_location("gdsio_bench_hostile", os.path.join(BENCH, "hostile.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_short_hostile_run_counts_zero_where_it_must(hostile):
    r = hostile.run(cases=150, seed=3, timeout=20.0, race_seconds=1.0)
    text = hostile.render(r)
    assert all(r[k] == 0 for k in hostile.BAD_COUNTS), text
    assert r["total"] >= 150 + 7 and r["inputs"]["special paths"] >= 7
    assert r["accepted"] > 10 and r["refused"] > 50, text  # both sides exercised
    assert r["race_reads"] > 0
    assert "hangs=0" in text and "leaked_fds=0" in text
