"""Resize and colour jitter under pytest-benchmark, side by side in one run:

- GPU: a batch of N photos of about 500x375 (both orientations, as in
  ImageNet) resized to 224x224 with antialias: gdsio (one launch for the
  list) against torchvision.transforms.v2.functional.resize (a loop over the
  list, and its best case, one same-sized batch tensor) when torchvision is
  installed; the fused crop-flip-resize-normalize step; and a device-to-device
  copy, the ceiling that the achieved bandwidth is stated against.
- CPU, one thread: gdsio's C++ path against Pillow's Image.resize (the
  issue's target: within 2x of Pillow's time), and gdsio on all threads.
- Colour jitter (per sample: brightness, contrast, saturation, hue in a
  random order): gdsio's one pass over the batch against torchvision's
  ColorJitter arithmetic per sample (when torchvision is installed), CPU
  (one thread) and GPU.

Each benchmark records ``images`` (and ``bytes`` moved where it applies) in
extra_info; compare means within a group.

    pytest bench/bench_transforms.py --benchmark-json=transforms.json
    GDSIO_BENCH_IMAGES=256 pytest bench/bench_transforms.py -m gpu
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from photos import photos as make_photos  # bench/photos.py: bench/ is on sys.path under pytest and as a script

import gdsio
from gdsio import transforms as T

N = int(os.environ.get("GDSIO_BENCH_IMAGES", "256"))
N_CPU = int(os.environ.get("GDSIO_BENCH_CPU_IMAGES", "16"))
OUT = [224, 224]
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@pytest.fixture(scope="module")
def photos() -> list[np.ndarray]:
    return make_photos(max(N, N_CPU))


def _chw(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(a, copy=True)).permute(2, 0, 1).contiguous()


def _torchvision_missing() -> str | None:
    try:
        import torchvision.transforms.v2.functional  # noqa: F401
    except ImportError:
        return "torchvision is not installed"
    return None


def _run_gpu(benchmark, fn, group: str, nbytes: int = 0) -> None:
    def once():
        out = fn()
        torch.cuda.synchronize()
        return out

    once()  # warm-up: CUDA context, caching allocator
    benchmark.group = group
    benchmark.extra_info["images"] = N
    if nbytes:
        benchmark.extra_info["bytes"] = nbytes  # read + written; GB/s = bytes / mean
    benchmark.pedantic(once, rounds=20, iterations=1, warmup_rounds=2)


def _gpu_bytes(imgs: list[torch.Tensor], out_elem: int = 1) -> int:
    return sum(t.numel() for t in imgs) + len(imgs) * 3 * OUT[0] * OUT[1] * out_elem


GPU_GROUP = f"resize {N} x ~500x375 -> 224x224, antialias"


@pytest.mark.gpu
def test_resize_gdsio_gpu(benchmark, photos):
    imgs = [_chw(a).cuda() for a in photos[:N]]
    _run_gpu(benchmark, lambda: T.resize(imgs, OUT, antialias=True), GPU_GROUP, _gpu_bytes(imgs))


@pytest.mark.gpu
def test_resize_gdsio_gpu_batch_tensor(benchmark, photos):
    batch = torch.stack([_chw(a) for a in photos[:N] if a.shape[0] == 375]).cuda()
    _run_gpu(benchmark, lambda: T.resize(batch, OUT, antialias=True), GPU_GROUP + " (same-size batch)")
    benchmark.extra_info["images"] = batch.shape[0]


@pytest.mark.gpu
@pytest.mark.skipif(_torchvision_missing() is not None, reason=_torchvision_missing() or "")
def test_resize_torchvision_gpu_list(benchmark, photos):
    import torchvision.transforms.v2.functional as F

    imgs = [_chw(a).cuda() for a in photos[:N]]
    _run_gpu(benchmark, lambda: [F.resize(t, OUT, antialias=True) for t in imgs], GPU_GROUP, _gpu_bytes(imgs))


@pytest.mark.gpu
@pytest.mark.skipif(_torchvision_missing() is not None, reason=_torchvision_missing() or "")
def test_resize_torchvision_gpu_batch_tensor(benchmark, photos):
    import torchvision.transforms.v2.functional as F

    batch = torch.stack([_chw(a) for a in photos[:N] if a.shape[0] == 375]).cuda()
    _run_gpu(benchmark, lambda: F.resize(batch, OUT, antialias=True), GPU_GROUP + " (same-size batch)")
    benchmark.extra_info["images"] = batch.shape[0]


@pytest.mark.gpu
def test_fused_crop_flip_resize_normalize_gpu(benchmark, photos):
    imgs = [_chw(a).cuda() for a in photos[:N]]
    boxes = T.random_resized_crop_params([t.shape[1] for t in imgs], [t.shape[2] for t in imgs], generator=0)
    flips = np.random.default_rng(0).random(N) < 0.5
    _run_gpu(
        benchmark,
        lambda: T.resized_crop_flip_normalize(imgs, boxes, flips, OUT, MEAN, STD, dtype=torch.float16),
        f"fused random-resized-crop+flip+normalize {N} -> 224x224 fp16",
    )


@pytest.mark.gpu
def test_device_copy_ceiling(benchmark):
    """The same run's device-to-device copy: achieved GB/s of the resizes are
    stated as a fraction of this."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    _run_gpu(benchmark, lambda: dst.copy_(src), GPU_GROUP, 2 * src.numel())
    benchmark.extra_info["images"] = 0


CPU_GROUP = f"cpu resize {N_CPU} x ~500x375 -> 224x224 bilinear, one thread"


def test_resize_gdsio_cpu_one_thread(benchmark, photos):
    imgs = [_chw(a) for a in photos[:N_CPU]]

    def run():
        with gdsio.settings(threads=1):
            return T.resize(imgs, OUT, antialias=True)

    benchmark.group = CPU_GROUP
    benchmark.extra_info["images"] = N_CPU
    benchmark.pedantic(run, rounds=10, iterations=1, warmup_rounds=1)


def test_resize_pillow_one_thread(benchmark, photos):
    from PIL import Image

    pils = [Image.fromarray(a) for a in photos[:N_CPU]]
    benchmark.group = CPU_GROUP
    benchmark.extra_info["images"] = N_CPU
    benchmark.pedantic(
        lambda: [p.resize((OUT[1], OUT[0]), Image.Resampling.BILINEAR, reducing_gap=None) for p in pils],
        rounds=10,
        iterations=1,
        warmup_rounds=1,
    )


def test_resize_gdsio_cpu_all_threads(benchmark, photos):
    imgs = [_chw(a) for a in photos[:N_CPU]]
    benchmark.group = CPU_GROUP + " (gdsio on all threads for reference)"
    benchmark.extra_info["images"] = N_CPU
    benchmark.extra_info["threads"] = gdsio.current_settings().threads
    benchmark.pedantic(lambda: T.resize(imgs, OUT, antialias=True), rounds=10, iterations=1, warmup_rounds=1)


# ---- colour jitter: the four ops per sample, in torchvision's random order ----------------------
JITTER_CPU_GROUP = f"cpu color jitter {N_CPU} x 3x224x224 uint8, one thread"
JITTER_GPU_GROUP = f"color jitter {N} x 3x224x224 uint8"


def _jitter_params(n: int) -> dict:
    rng = np.random.default_rng(0)
    return dict(brightness=rng.uniform(0.6, 1.4, n), contrast=rng.uniform(0.6, 1.4, n),
                saturation=rng.uniform(0.6, 1.4, n), hue=rng.uniform(-0.1, 0.1, n),
                order=np.stack([rng.permutation(4) for _ in range(n)]))


def _torchvision_jitter(batch: torch.Tensor, p: dict) -> list[torch.Tensor]:
    """torchvision's ColorJitter.transform per sample, its parameters given."""
    import torchvision.transforms.v2.functional as F

    fns = [F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue]
    names = ["brightness", "contrast", "saturation", "hue"]
    out = []
    for i in range(batch.shape[0]):
        x = batch[i]
        for k in p["order"][i]:
            x = fns[k](x, float(p[names[k]][i]))
        out.append(x)
    return out


def _jitter_batch(n: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(1).integers(0, 256, (n, 3, 224, 224), dtype=np.uint8))


def test_color_jitter_gdsio_cpu_one_thread(benchmark):
    batch, p = _jitter_batch(N_CPU), _jitter_params(N_CPU)

    def run():
        with gdsio.settings(threads=1):
            return T.color_jitter(batch, **p)

    benchmark.group = JITTER_CPU_GROUP
    benchmark.extra_info["images"] = N_CPU
    benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)


@pytest.mark.skipif(_torchvision_missing() is not None, reason=_torchvision_missing() or "")
def test_color_jitter_torchvision_cpu_one_thread(benchmark):
    batch, p = _jitter_batch(N_CPU), _jitter_params(N_CPU)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        benchmark.group = JITTER_CPU_GROUP
        benchmark.extra_info["images"] = N_CPU
        benchmark.pedantic(lambda: _torchvision_jitter(batch, p), rounds=5, iterations=1, warmup_rounds=1)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.gpu
def test_color_jitter_gdsio_gpu(benchmark):
    batch, p = _jitter_batch(N).cuda(), _jitter_params(N)
    _run_gpu(benchmark, lambda: T.color_jitter(batch, **p), JITTER_GPU_GROUP, 2 * batch.numel())


@pytest.mark.gpu
@pytest.mark.skipif(_torchvision_missing() is not None, reason=_torchvision_missing() or "")
def test_color_jitter_torchvision_gpu(benchmark):
    batch, p = _jitter_batch(N).cuda(), _jitter_params(N)
    _run_gpu(benchmark, lambda: _torchvision_jitter(batch, p), JITTER_GPU_GROUP, 2 * batch.numel())
