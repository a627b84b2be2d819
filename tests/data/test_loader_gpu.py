"""gdsio.Loader on a GPU: the same batches as on the CPU, handed over through
streams without races, device memory flat across epochs, caches in device
and pinned memory, and the meter's CUDA clocks. Skipped centrally without a GPU."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from PIL import Image

from gdsio import starvation
from gdsio.data import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Cache,
    Compose,
    Loader,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    ToDtype,
)

pytestmark = pytest.mark.gpu


def npy_folder(root, n=48, shape=(3, 32, 32)):
    for i in range(n):
        d = root / f"c{i % 3}"
        d.mkdir(exist_ok=True)
        np.save(d / f"{i:03d}.npy", np.full(shape, i, np.int32))
    return root


def jpeg_folder(root, n=40):
    """Photo-like JPEGs (smooth colour fields with edges; noise would be the
    worst case of chroma upsampling, which nvJPEG and Pillow do differently)."""
    rng = np.random.default_rng(0)
    for i in range(n):
        d = root / f"c{i % 2}"
        d.mkdir(exist_ok=True)
        h, w = 60 + (i % 5) * 7, 80 - (i % 3) * 9
        small = rng.integers(0, 256, (h // 8 + 2, w // 8 + 2, 3), dtype=np.uint8)
        img = Image.fromarray(small).resize((w, h), Image.BICUBIC)
        Image.fromarray(np.where(np.arange(w)[None, :, None] < w // 3, 255 - np.asarray(img), np.asarray(img))).save(
            d / f"{i:03d}.jpg", quality=95)
    return root


def train_tf(dtype=torch.float32):
    return Compose([RandomResizedCrop(32), RandomHorizontalFlip(), ToDtype(dtype, scale=True),
                    Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def batches(loader):
    return [(x.cpu(), y.cpu()) for x, y in loader]


@pytest.mark.parametrize("kind", ["npy", "raw"])
def test_cuda_batches_equal_cpu_batches(tmp_path, kind):
    if kind == "npy":
        src, kw = npy_folder(tmp_path), {}
    else:
        data = np.arange(40 * 12, dtype=np.int32).reshape(40, 3, 2, 2)
        data.tofile(tmp_path / "r.bin")
        src, kw = tmp_path / "r.bin", dict(kind="raw", record_shape=(3, 2, 2), record_dtype=torch.int32)
    gpu = Loader(src, 8, device="cuda", shuffle=True, seed=1, **kw)
    cpu = Loader(src, 8, device="cpu", shuffle=True, seed=1, **kw)
    g, c = batches(gpu), batches(cpu)
    assert len(g) == len(c) and all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(g, c))
    x, y = next(iter(gpu))
    assert x.is_cuda and y.is_cuda and y.dtype == torch.int64
    st = gpu.stats()
    assert set(st.io_backends) <= {"gds", "cufile", "cufile-compat", "pinned", "kvikio"} and st.bytes_read > 0


def test_png_folder_on_the_gpu_equals_the_cpu(tmp_path):
    """PNG, BMP, GIF, TIFF, WebP: Pillow on the host, uploaded on the loader's stream."""
    from test_loader import pillow_folder

    from gdsio.data import CenterCrop

    root = pillow_folder(tmp_path)
    gpu = Loader(root, 4, device="cuda", transform=Compose([CenterCrop(10)]), shuffle=True)
    cpu = Loader(root, 4, device="cpu", transform=Compose([CenterCrop(10)]), shuffle=True)
    g, c = batches(gpu), batches(cpu)
    assert len(g) == len(c) == 4 and all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(g, c))
    assert gpu.stats().decode_backends == {"pillow": 15}


def test_dataset_items_on_the_device_equal_the_cpu(tmp_path):
    from test_loader import pillow_folder

    data = np.arange(6 * 12, dtype=np.int32).reshape(6, 3, 2, 2)
    data.tofile(tmp_path / "r.bin")
    raw = dict(kind="raw", record_shape=(3, 2, 2), record_dtype=torch.int32)
    (tmp_path / "n").mkdir()
    for src, kw in ((npy_folder(tmp_path / "n", n=6), {}), (tmp_path / "r.bin", raw),
                    (pillow_folder(tmp_path / "p", exts=("png",)), {})):
        g, c = Loader(src, 2, device="cuda", **kw).dataset, Loader(src, 2, device="cpu", **kw).dataset
        for i in (0, len(c) - 1):
            (gx, gy), (cx, cy) = g[i], c[i]
            assert gx.is_cuda and gy == cy and torch.equal(gx.cpu(), cx)


def test_a_foreign_transform_runs_per_sample_on_the_device(tmp_path):
    from test_loader import FakeV2Resize, pillow_folder

    root = pillow_folder(tmp_path, exts=("png", "jpg"))
    tf = FakeV2Resize((8, 8))
    g = batches(Loader(root, 4, device="cuda", transform=tf))
    assert all(dev.startswith("cuda") and dtype == torch.uint8 and len(shape) == 3 for shape, dtype, dev in tf.calls)
    c = batches(Loader(root, 4, device="cpu", transform=FakeV2Resize((8, 8))))
    assert len(g) == len(c) and all(a[0].shape[1:] == (3, 8, 8) and torch.equal(a[1], b[1]) for a, b in zip(g, c))
    png = [torch.equal(a[0][k], b[0][k]) for a, b in zip(g, c) for k in range(len(a[1])) if a[1][k] == 1]
    assert png and all(png)  # PNG: the same pixels (the JPEG decoders may differ by an LSB)


def test_jpeg_pipeline_on_the_gpu_matches_the_cpu_twin(tmp_path):
    jpeg_folder(tmp_path)
    kw = dict(shuffle=True, seed=2, transform=train_tf(torch.float32))
    g = batches(Loader(tmp_path, 16, device="cuda", **kw))
    c = batches(Loader(tmp_path, 16, device="cpu", **kw))
    for (gx, gy), (cx, cy) in zip(g, c):
        assert torch.equal(gy, cy)
        # nvJPEG and Pillow may differ in chroma upsampling: compare loosely, then most pixels closely.
        diff = (gx - cx).abs()
        assert float(diff.mean()) < 0.05, float(diff.mean())
    st = Loader(tmp_path, 16, device="cuda", **kw)
    list(st)
    assert any(k.startswith("nvjpeg") or k == "pillow" for k in st.stats().decode_backends)


def test_consumer_stream_sees_complete_batches(tmp_path):
    """The consumer works on its own stream and stalls it; buffers must not be
    reused by the loader before that work ran (record_stream + events)."""
    npy_folder(tmp_path, n=96)
    loader = Loader(tmp_path, 8, device="cuda", prefetch=2, shuffle=True, seed=3)
    expected = [x for x, _ in batches(Loader(tmp_path, 8, device="cpu", shuffle=True, seed=3))]
    s = torch.cuda.Stream()
    sums = []
    with torch.cuda.stream(s):
        for x, _ in loader:
            torch.cuda._sleep(2_000_000)  # ~1 ms of device time before the batch is read
            sums.append(x.to(torch.float64).sum(dim=(1, 2, 3)))
            del x
    s.synchronize()
    want = [e.to(torch.float64).sum(dim=(1, 2, 3)) for e in expected]
    assert all(torch.equal(a.cpu(), b) for a, b in zip(sums, want))


def test_device_memory_is_flat_across_epochs(tmp_path):
    jpeg_folder(tmp_path)
    loader = Loader(tmp_path, 8, device="cuda", transform=train_tf(torch.float16), shuffle=True, prefetch=3)

    def allocated_after(epochs: int) -> int:
        for _ in range(epochs):
            for _batch in loader:
                pass
        del _batch
        gc.collect()
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated()

    start = allocated_after(3)
    assert allocated_after(20) - start <= 1 << 20


@pytest.mark.parametrize("where", ["cuda", "pinned"])
def test_cache_on_the_gpu_second_epoch_reads_nothing(tmp_path, where):
    jpeg_folder(tmp_path)
    cache = Cache(bytes="64M", where=where)
    loader = Loader(tmp_path, 8, device="cuda", cache=cache, transform=train_tf(), shuffle=True)
    e0, e1 = batches(loader), batches(loader)
    ref = Loader(tmp_path, 8, device="cuda", transform=train_tf(), shuffle=True)
    r0, r1 = batches(ref), batches(ref)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(e0 + e1, r0 + r1))  # both epochs, cached or not
    p = loader.stats().passes
    assert p[0]["bytes_read"] > 0 and p[1]["bytes_read"] == 0 and p[1]["cache_hits"] == 40


def test_measure_uses_cuda_events(tmp_path):
    npy_folder(tmp_path)
    loader = Loader(tmp_path, 8, device="cuda")
    w = torch.randn(3 * 32 * 32, 64, device="cuda")
    r = starvation.measure(lambda b: (b[0].float().flatten(1) @ w).sum(), loader, steps=10, warmup=2)
    assert r.clock == "cuda-events" and r.real_samples_per_s > 0 and r.upper_samples_per_s > 0
    assert r.loader_stats.gpu_ms is not None and r.loader_stats.gpu_ms > 0
