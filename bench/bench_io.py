"""Copy paths under pytest-benchmark, one group per file size, built from the
same path functions as ``gdsio bench`` (gdsio/bench.py), so both time the same code.

    pytest bench/bench_io.py --benchmark-json=io.json
    GDSIO_BENCH_SIZES=64M,1G pytest bench/ -m gpu --benchmark-group-by=group
"""

from __future__ import annotations

import os

import pytest

from gdsio.tools import bench
from gdsio.tools.bench import paths as bench_paths
from gdsio.tools.bench import run as bench_run
from gdsio.platform import pagecache

SIZES = bench.parse_sizes(os.environ.get("GDSIO_BENCH_SIZES", "1M,64M"))
COLD = os.environ.get("GDSIO_BENCH_COLD", "").strip().lower() in ("1", "true", "on", "yes")
CFG = bench.BenchConfig(repeat=1, cold=COLD)


def _params(destination: str) -> list:
    out = []
    for name, p in bench.PATHS.items():
        if p.destination != destination or name == "image-decode":
            continue
        marks = [pytest.mark.gpu] if destination == bench.GPU else []
        if destination == bench.GPU and bench.gpu_unusable_reason() is None:
            # With a GPU, a path can still be missing here (kvikio not installed, ...).
            why = p.unavailable(CFG)
            marks.append(pytest.mark.skipif(why is not None, reason=why or ""))
        out.append(pytest.param(name, marks=marks, id=name))
    return out


@pytest.fixture(scope="session", params=SIZES, ids=bench.format_bytes)
def bench_file(request, tmp_path_factory) -> bench.BenchFile:
    size = request.param
    path = str(tmp_path_factory.mktemp("gdsio-bench") / f"bench-{size}.bin")
    bench_run.write_file(path, size)
    return bench.BenchFile(path, size, generated=True)


def _run(benchmark, run, f: bench.BenchFile, group: str) -> None:
    benchmark.group = f"{group} {bench.format_bytes(f.size)}{' cold' if COLD else ''}"
    benchmark.extra_info["bytes"] = f.size
    info = run()  # warm-up outside the timing; also what the path reports
    benchmark.extra_info.update(backend=info["backend"], reason=info["reason"], direct_io=info["direct_io"])
    if COLD:
        benchmark.extra_info["evicted"] = []

        def setup() -> None:
            benchmark.extra_info["evicted"].append(pagecache.evict(f.path))

        benchmark.pedantic(run, setup=setup, rounds=5, iterations=1)
    else:
        benchmark(run)


def _prepare(name: str, f: bench.BenchFile) -> bench_paths.Runner:
    """The path's runner; a path that cannot start here (O_DIRECT refused, cuFile
    registration refused) is skipped with its reason, as `gdsio bench` reports it."""
    try:
        return bench.PATHS[name].prepare(f.path, f.size, CFG)
    except Exception as e:
        pytest.skip(f"{name} could not start here: {type(e).__name__}: {e}")


@pytest.mark.parametrize("name", _params(bench.HOST))
def test_host(benchmark, bench_file, name):
    _run(benchmark, _prepare(name, bench_file), bench_file, "host")


def test_host_page_cache_ceiling(benchmark, bench_file):
    """One thread, one pread loop into a reused buffer: what reading the page cache costs at least."""
    buf = bench_run._host_buffer(bench_file.size)
    _run(benchmark, bench_run._plain_pread(bench_file.path, buf, bench_file.size, direct=False), bench_file, "host")


@pytest.mark.parametrize("name", _params(bench.GPU))
def test_gpu(benchmark, bench_file, name):
    _run(benchmark, _prepare(name, bench_file), bench_file, "gpu")
