"""Image decode under pytest-benchmark, side by side in one run:

- JPEG, a batch of photos already in GPU memory: gdsio.image.decode (nvJPEG,
  device bitstreams) against torchvision.io.decode_jpeg(list, device="cuda")
  when torchvision is installed, and against the CPU path (Pillow).
- PNM (P6, 8-bit), the same batch of bytes: gdsio's kernels from GPU memory
  against the multithreaded CPU twin.

Each benchmark records ``images`` and the backends that ran in extra_info;
images/s = images / mean time.

    pytest bench/bench_decode.py --benchmark-json=decode.json
    GDSIO_BENCH_IMAGES=256 pytest bench/bench_decode.py -m gpu
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from photos import jpegs as make_jpegs  # bench/photos.py: bench/ is on sys.path
from photos import photos as make_photos

import gdsio.image as gi

N = int(os.environ.get("GDSIO_BENCH_IMAGES", "64"))


@pytest.fixture(scope="module")
def jpegs() -> list[bytes]:
    return make_jpegs(N)


@pytest.fixture(scope="module")
def pnms() -> list[bytes]:
    return [b"P6\n%d %d\n255\n" % (a.shape[1], a.shape[0]) + a.tobytes() for a in make_photos(N)]


def _tensors(blobs: list[bytes], device: str) -> list:
    import torch

    return [torch.from_numpy(np.frombuffer(b, np.uint8).copy()).to(device) for b in blobs]


def _run_gpu(benchmark, fn, group: str) -> None:
    import torch

    def once():
        out = fn()
        torch.cuda.synchronize()
        return out

    once()  # warm-up: nvJPEG handles, states, CUDA context
    benchmark.group = group
    benchmark.extra_info["images"] = N
    benchmark.pedantic(once, rounds=10, iterations=1, warmup_rounds=1)


@pytest.mark.gpu
def test_jpeg_gdsio_gpu(benchmark, jpegs):
    data = _tensors(jpegs, "cuda")
    _, infos = gi.decode(data, return_info=True)
    benchmark.extra_info["backends"] = sorted({i.backend for i in infos})
    _run_gpu(benchmark, lambda: gi.decode(data), f"jpeg decode x{N}")


def _torchvision_missing() -> str | None:
    try:
        import torchvision.io  # noqa: F401
    except ImportError:
        return "torchvision is not installed"
    return None


@pytest.mark.gpu
@pytest.mark.skipif(_torchvision_missing() is not None, reason=_torchvision_missing() or "")
def test_jpeg_torchvision_gpu(benchmark, jpegs):
    import torchvision.io

    data = _tensors(jpegs, "cpu")  # torchvision takes host bitstreams
    _run_gpu(benchmark, lambda: torchvision.io.decode_jpeg(data, device="cuda"), f"jpeg decode x{N}")


def test_jpeg_gdsio_cpu(benchmark, jpegs):
    data = _tensors(jpegs, "cpu")
    benchmark.group = f"jpeg decode x{N}"
    benchmark.extra_info["images"] = N
    benchmark.extra_info["backends"] = ["pillow"]
    benchmark.pedantic(lambda: gi.decode(data), rounds=3, iterations=1, warmup_rounds=1)


@pytest.mark.gpu
def test_pnm_gdsio_gpu(benchmark, pnms):
    data = _tensors(pnms, "cuda")
    benchmark.extra_info["backends"] = ["gdsio-cuda"]
    benchmark.extra_info["bytes"] = sum(len(b) for b in pnms)
    _run_gpu(benchmark, lambda: gi.decode(data, mode="RGB"), f"pnm decode x{N}")


def test_pnm_gdsio_cpu(benchmark, pnms):
    data = _tensors(pnms, "cpu")
    benchmark.group = f"pnm decode x{N}"
    benchmark.extra_info["images"] = N
    benchmark.extra_info["backends"] = ["gdsio-cpu"]
    benchmark.extra_info["bytes"] = sum(len(b) for b in pnms)
    benchmark.pedantic(lambda: gi.decode(data, mode="RGB"), rounds=5, iterations=1, warmup_rounds=1)
