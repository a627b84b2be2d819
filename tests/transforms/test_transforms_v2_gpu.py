"""The CUDA kernels of the colour ops, pad and the flips against the CPU twin
(itself checked against torchvision in test_torchvision_reference.py): equal
bit for bit, floats included, since both run color.hpp / pad.hpp with every
float operation rounded alone. Marker `gpu`: skipped centrally (conftest.py)
where no CUDA device is visible; run on a GPU machine by bench/device_check.sh."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gdsio import transforms as T
from gdsio.data import BatchInfo, ColorJitter, Pad, RandomVerticalFlip, batch_context

pytestmark = pytest.mark.gpu

DTYPES = [torch.uint8, torch.float32, torch.float16, torch.bfloat16]
OPS = [("adjust_brightness", [0.0, 0.4, 1.7]), ("adjust_contrast", [0.0, 0.5, 1.6]),
       ("adjust_saturation", [0.0, 0.3, 2.2]), ("adjust_hue", [-0.5, -0.2, 0.13, 0.5])]


def _image(c: int, h: int, w: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (c, h, w), dtype=np.uint8)
    a[:, ::7] = a[:1, ::7]  # gray rows: the hue's max == min branch
    t = torch.from_numpy(a)
    return t if dtype == torch.uint8 else (t.float() / 255).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op,factors", OPS, ids=[o for o, _ in OPS])
@pytest.mark.parametrize("shape", [(3, 37, 53), (1, 29, 31), (3, 300, 451), (3, 2, 40000)], ids=str)
def test_colour_op_equals_cpu(dtype, op, factors, shape) -> None:
    img = _image(*shape, dtype)
    fn = getattr(T, op)
    for f in factors:
        cpu = fn(img, f)
        gpu = fn(img.cuda(), f)
        assert gpu.is_cuda and gpu.dtype == dtype
        assert torch.equal(gpu.cpu(), cpu), (op, f)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_color_jitter_lists_and_large_batches_equal_cpu(dtype) -> None:
    rng = np.random.default_rng(1)
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 60, (300, 2))]  # > 256 images: two launches
    imgs = [_image(3, h, w, dtype, seed=i) for i, (h, w) in enumerate(sizes)]
    n = len(imgs)
    params = dict(brightness=rng.uniform(0.5, 1.5, n), contrast=rng.uniform(0.5, 1.5, n),
                  saturation=rng.uniform(0, 2, n), hue=rng.uniform(-0.5, 0.5, n),
                  order=np.stack([rng.permutation(4) for _ in range(n)]))
    cpu = T.color_jitter(imgs, **params)
    gpu = T.color_jitter([t.cuda() for t in imgs], **params)
    for i, (g, c) in enumerate(zip(gpu, cpu)):
        assert g.is_cuda and torch.equal(g.cpu(), c), i
    batch = torch.stack([_image(3, 24, 32, dtype, seed=s) for s in range(5)])
    kw = dict(brightness=1.3, contrast=[0.2, 0.5, 0.9, 1.3, 1.8], hue=0.1, order=[1, 3, 0, 2])
    assert torch.equal(T.color_jitter(batch.cuda(), **kw).cpu(), T.color_jitter(batch, **kw))


def test_color_jitter_class_on_a_cuda_batch_equals_cpu() -> None:
    batch = torch.stack([_image(3, 40, 48, torch.uint8, seed=s) for s in range(16)])
    t = ColorJitter(0.4, 0.4, 0.4, 0.1)
    info = BatchInfo(3, 1, np.arange(16))
    with batch_context(info):
        cpu = t(batch)
        gpu = t(batch.cuda())
    assert torch.equal(gpu.cpu(), cpu)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric"])
@pytest.mark.parametrize("padding", [3, [2, 5], [1, 4, 6, 0], [-2, 3, 4, -1]], ids=str)
def test_pad_equals_cpu(dtype, mode, padding) -> None:
    x = _image(3, 23, 31, torch.uint8).to(dtype)
    batch = torch.stack([x, x.flip(-1)])
    for img in (x, batch, x[0]):
        fill = [1, 2, 3] if mode == "constant" and img.ndim >= 3 else None  # per channel
        cpu = T.pad(img, padding, fill=fill, padding_mode=mode)
        gpu = T.pad(img.cuda(), padding, fill=fill, padding_mode=mode)
        assert gpu.is_cuda and torch.equal(gpu.cpu(), cpu)
    assert torch.equal(Pad(padding, padding_mode=mode)(batch.cuda()).cpu(), Pad(padding, padding_mode=mode)(batch))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.float32, torch.float64, torch.int64], ids=str)
def test_flips_equal_torch_flip(dtype) -> None:
    x = _image(3, 67, 45, torch.uint8).to(dtype).cuda()
    for img in (x, torch.stack([x, x]), x[0], x.transpose(1, 2)):
        assert torch.equal(T.vflip(img), img.flip(-2))
        assert torch.equal(T.hflip(img), img.flip(-1))
    batch = torch.stack([x] * 8)
    with batch_context(BatchInfo(5, 0, np.arange(8))):
        gpu = RandomVerticalFlip()(batch)
        cpu = RandomVerticalFlip()(batch.cpu())
    assert torch.equal(gpu.cpu(), cpu)


def test_crops_and_resizes_of_the_v2_forms_stay_on_the_device() -> None:
    x = _image(3, 40, 50, torch.uint8)
    assert torch.equal(T.crop(x.cuda(), -5, 45, 20, 20).cpu(), T.crop(x, -5, 45, 20, 20))
    assert torch.equal(T.resize(x[0].cuda(), [13, 17]).cpu(), T.resize(x[0], [13, 17]))
    f = T.resize(x.float().cuda() / 255, [13, 17], antialias=None)  # torch's interpolate, as torchvision
    assert f.is_cuda
    torch.testing.assert_close(f.cpu(), T.resize(x.float() / 255, [13, 17], antialias=None), rtol=1e-5, atol=1e-5)
