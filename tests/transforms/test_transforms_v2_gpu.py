"""The CUDA kernels of the colour ops and pad against the CPU twin (itself
checked against torchvision in test_torchvision_reference.py): equal bit for
bit, floats included, since both run color.hpp / pad.hpp with every float
operation rounded alone; the flips (torch.flip) on the device against torch's
and the CPU's. Marker `gpu`: skipped centrally (conftest.py) where no CUDA
device is visible; run on a GPU machine by bench/device_check.sh.

The cases are the ``*_case`` functions and the lists below, run on either
device; ``emulated_cases`` names them as the tests do, and
tests/kernels/cases.py runs them on the CPU and replays their core calls on
the kernels emulated on the host (test_kernels_emulated.py), so a case added
here and there is checked in CI too."""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import pytest
import torch

from gdsio import transforms as T
from gdsio.data import BatchInfo, ColorJitter, Pad, RandomVerticalFlip, batch_context

pytestmark = pytest.mark.gpu

DTYPES = [torch.uint8, torch.float32, torch.float16, torch.bfloat16]
OPS = [("adjust_brightness", [0.0, 0.4, 1.7]), ("adjust_contrast", [0.0, 0.5, 1.6]),
       ("adjust_saturation", [0.0, 0.3, 2.2]), ("adjust_hue", [-0.5, -0.2, 0.13, 0.5])]
COLOUR_SHAPES = [(3, 37, 53), (1, 29, 31), (3, 300, 451), (3, 2, 40000)]
PAD_DTYPES = [torch.uint8, torch.float16, torch.float32, torch.float64]
PAD_MODES = ["constant", "edge", "reflect", "symmetric"]
PADDINGS = [3, [2, 5], [1, 4, 6, 0], [-2, 3, 4, -1]]
FLIP_DTYPES = [torch.uint8, torch.int16, torch.float32, torch.float64, torch.int64]


def _image(c: int, h: int, w: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (c, h, w), dtype=np.uint8)
    a[:, ::7] = a[:1, ::7]  # gray rows: the hue's max == min branch
    t = torch.from_numpy(a)
    return t if dtype == torch.uint8 else (t.float() / 255).to(dtype)


def colour_op_case(device: str, dtype: torch.dtype, op: str, shape: tuple) -> list[torch.Tensor]:
    """One op at each of its factors."""
    img = _image(*shape, dtype).to(device)
    return [getattr(T, op)(img, f) for f in dict(OPS)[op]]


def color_jitter_case(device: str, dtype: torch.dtype) -> list[torch.Tensor]:
    """A list of 300 sizes (two launches of the 256-image table), each image
    its own factors and order, then a batch tensor with a per-sample contrast."""
    rng = np.random.default_rng(1)
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 60, (300, 2))]
    imgs = [_image(3, h, w, dtype, seed=i).to(device) for i, (h, w) in enumerate(sizes)]
    n = len(imgs)
    params = dict(brightness=rng.uniform(0.5, 1.5, n), contrast=rng.uniform(0.5, 1.5, n),
                  saturation=rng.uniform(0, 2, n), hue=rng.uniform(-0.5, 0.5, n),
                  order=np.stack([rng.permutation(4) for _ in range(n)]))
    out = list(T.color_jitter(imgs, **params))
    batch = torch.stack([_image(3, 24, 32, dtype, seed=s) for s in range(5)]).to(device)
    kw = dict(brightness=1.3, contrast=[0.2, 0.5, 0.9, 1.3, 1.8], hue=0.1, order=[1, 3, 0, 2])
    return out + [T.color_jitter(batch, **kw)]


def color_jitter_class_case(device: str) -> torch.Tensor:
    batch = torch.stack([_image(3, 40, 48, torch.uint8, seed=s) for s in range(16)]).to(device)
    with batch_context(BatchInfo(3, 1, np.arange(16))):
        return ColorJitter(0.4, 0.4, 0.4, 0.1)(batch)


def pad_case(device: str, dtype: torch.dtype, mode: str, padding) -> list[torch.Tensor]:
    """An image, a batch and a 2-D image (a per-channel fill where there are
    channels), then the Pad class on the batch."""
    x = _image(3, 23, 31, torch.uint8).to(dtype)
    batch = torch.stack([x, x.flip(-1)])
    out = []
    for img in (x, batch, x[0]):
        fill = [1, 2, 3] if mode == "constant" and img.ndim >= 3 else None
        out.append(T.pad(img.to(device), padding, fill=fill, padding_mode=mode))
    return out + [Pad(padding, padding_mode=mode)(batch.to(device))]


def flip_case(device: str, dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """(gdsio's flip, torch.flip's) of an image, a batch, a 2-D image and a
    transposed view, then RandomVerticalFlip on a batch (no torch reference:
    which samples flip is the batch's draw; the test compares it with the CPU's)."""
    x = _image(3, 67, 45, torch.uint8).to(dtype).to(device)
    out = []
    for img in (x, torch.stack([x, x]), x[0], x.transpose(1, 2)):
        out += [(T.vflip(img), img.flip(-2)), (T.hflip(img), img.flip(-1))]
    with batch_context(BatchInfo(5, 0, np.arange(8))):
        flipped = RandomVerticalFlip()(torch.stack([x] * 8))
    return out + [(flipped, None)]


def v2_forms_case(device: str) -> list[torch.Tensor]:
    """A crop reaching outside the image (zero padded), a 2-D resize."""
    x = _image(3, 40, 50, torch.uint8).to(device)
    return [T.crop(x, -5, 45, 20, 20), T.resize(x[0], [13, 17])]


def _id(v) -> str:
    return str(v)  # pytest's id for a dtype, a tuple or a list given ids=str


def emulated_cases() -> Iterator[tuple[str, Callable[[], object]]]:
    """(the test's name and parameters as pytest names them, the case on the
    CPU) for tests/kernels/cases.py (not the flips: they are torch's, no
    kernel of gdsio's runs)."""
    for shape in COLOUR_SHAPES:
        for op, _ in OPS:
            for dtype in DTYPES:
                yield (f"test_colour_op_equals_cpu[{_id(shape)}-{op}-{_id(dtype)}]",
                       lambda d=dtype, o=op, s=shape: colour_op_case("cpu", d, o, s))
    for dtype in DTYPES:
        yield (f"test_color_jitter_lists_and_large_batches_equal_cpu[{_id(dtype)}]",
               lambda d=dtype: color_jitter_case("cpu", d))
    yield "test_color_jitter_class_on_a_cuda_batch_equals_cpu", lambda: color_jitter_class_case("cpu")
    for padding in PADDINGS:
        for mode in PAD_MODES:
            for dtype in PAD_DTYPES:
                yield (f"test_pad_equals_cpu[{_id(padding)}-{mode}-{_id(dtype)}]",
                       lambda d=dtype, m=mode, p=padding: pad_case("cpu", d, m, p))
    yield "test_crops_and_resizes_of_the_v2_forms_stay_on_the_device", lambda: v2_forms_case("cpu")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", [o for o, _ in OPS])
@pytest.mark.parametrize("shape", COLOUR_SHAPES, ids=str)
def test_colour_op_equals_cpu(dtype, op, shape) -> None:
    gpu, cpu = colour_op_case("cuda", dtype, op, shape), colour_op_case("cpu", dtype, op, shape)
    for f, g, c in zip(dict(OPS)[op], gpu, cpu):
        assert g.is_cuda and g.dtype == dtype
        assert torch.equal(g.cpu(), c), (op, f)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_color_jitter_lists_and_large_batches_equal_cpu(dtype) -> None:
    gpu, cpu = color_jitter_case("cuda", dtype), color_jitter_case("cpu", dtype)
    assert len(gpu) == len(cpu) == 301
    for i, (g, c) in enumerate(zip(gpu, cpu)):
        assert g.is_cuda and torch.equal(g.cpu(), c), i


def test_color_jitter_class_on_a_cuda_batch_equals_cpu() -> None:
    gpu = color_jitter_class_case("cuda")
    assert gpu.is_cuda and torch.equal(gpu.cpu(), color_jitter_class_case("cpu"))


@pytest.mark.parametrize("dtype", PAD_DTYPES, ids=str)
@pytest.mark.parametrize("mode", PAD_MODES)
@pytest.mark.parametrize("padding", PADDINGS, ids=str)
def test_pad_equals_cpu(dtype, mode, padding) -> None:
    for g, c in zip(pad_case("cuda", dtype, mode, padding), pad_case("cpu", dtype, mode, padding), strict=True):
        assert g.is_cuda and torch.equal(g.cpu(), c)


@pytest.mark.parametrize("dtype", FLIP_DTYPES, ids=str)
def test_flips_equal_torch_flip(dtype) -> None:
    gpu, cpu = flip_case("cuda", dtype), flip_case("cpu", dtype)
    for (g, g_torch), (c, _) in zip(gpu, cpu, strict=True):
        assert g.is_cuda and (g_torch is None or torch.equal(g, g_torch))
        assert torch.equal(g.cpu(), c)


def test_crops_and_resizes_of_the_v2_forms_stay_on_the_device() -> None:
    for g, c in zip(v2_forms_case("cuda"), v2_forms_case("cpu"), strict=True):
        assert g.is_cuda and torch.equal(g.cpu(), c)
    x = _image(3, 40, 50, torch.uint8)
    f = T.resize(x.float().cuda() / 255, [13, 17], antialias=None)  # torch's interpolate, as torchvision
    assert f.is_cuda
    torch.testing.assert_close(f.cpu(), T.resize(x.float() / 255, [13, 17], antialias=None), rtol=1e-5, atol=1e-5)
