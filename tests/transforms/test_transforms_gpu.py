"""gdsio.transforms' CUDA kernels against the CPU twin (the oracle, itself
checked against Pillow and OpenCV in test_transforms.py): uint8 outputs and
filter windows equal bit for bit, float outputs within 1e-5 relative
(to_dtype, normalize and hflip are torch's ops: checked against torch on the
device). Marker `gpu`: skipped centrally (conftest.py) where no CUDA device is
visible; run on a GPU machine by bench/device_check.sh.

The cases are the ``*_case`` functions and the lists below, run on either
device: tests/kernels/cases.py runs the same ones on the CPU and replays
their core calls on the kernels emulated on the host (test_kernels_emulated.py),
so a case added here is checked in CI too."""

from __future__ import annotations

import functools
import os
import re
import warnings

import numpy as np
import pytest
import torch

from gdsio import _core
from gdsio import transforms as T

pytestmark = pytest.mark.gpu

FILTERS = [
    ("nearest", True),
    ("bilinear", True),
    ("bicubic", True),
    ("box", True),
    ("nearest", False),
    ("bilinear", False),
]


def _image(c: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    """Noise over edges and gradients: every rounding case shows up (a fresh
    tensor each call; the arrays are built once, 3000x4000 takes seconds)."""
    return torch.from_numpy(_image_array(c, h, w, seed).copy())


@functools.lru_cache(maxsize=32)
def _image_array(c: int, h: int, w: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.where(((yy // 7) + (xx // 5)) % 2 == 0, 200, 30) + (xx * 37 + yy * 11) % 50
    noise = rng.integers(0, 256, size=(c, h, w))
    return np.where(rng.random((c, h, w)) < 0.3, noise, base[None]).astype(np.uint8)


def _assert_float_close(gpu: torch.Tensor, cpu: torch.Tensor) -> None:
    torch.testing.assert_close(gpu.cpu().float(), cpu.float(), rtol=1e-5, atol=1e-6)


RESIZE_SHAPES = [
    ((3, 375, 500), (224, 224)),
    ((3, 512, 512), (512, 512)),
    ((1, 97, 89), (45, 44)),
    ((4, 64, 48), (333, 251)),
    ((3, 1, 1), (5, 9)),
    ((3, 1, 97), (1, 13)),
    ((2, 89, 1), (17, 1)),
    ((3, 300, 4000), (300, 7)),
    ((3, 3000, 4000), (7, 7)),
]
WINDOW_SHAPES = [(375, 500), (4000, 7), (13, 3000), (1, 1), (640, 427)]
WINDOW_SIZE = (224, 231)
LIST_SHAPES = [(375, 500), (500, 375), (333, 444), (1024, 768), (64, 64), (3000, 20)]
FUSED_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.uint8]
POINTWISE_DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def resize_case(device: str, filt: str, antialias: bool, shape: tuple, size: tuple) -> torch.Tensor:
    return T.resize(_image(*shape).to(device), list(size), interpolation=filt, antialias=antialias)


def window_images() -> list[torch.Tensor]:
    return [_image(3, h, w, seed=h) for h, w in WINDOW_SHAPES]


def list_images() -> list[torch.Tensor]:
    return [_image(3, h, w, seed=i) for i, (h, w) in enumerate(LIST_SHAPES)]


def big_batch_case(device: str) -> torch.Tensor:
    """More images than one launch's table holds: the launcher splits the batch."""
    imgs = [_image(3, 20 + i % 17, 30 + i % 13, seed=i) for i in range(_core.tf_max_images_per_launch + 37)]
    return T.resize([t.to(device) for t in imgs], [16, 24])


def view_cases(device: str) -> list[torch.Tensor]:
    """A batch tensor, and a crop that is a view."""
    img = _image(3, 300, 451)
    batch = torch.stack([img, img.flip(-1).contiguous(), 255 - img])
    return [
        T.resize(batch.to(device), [100, 150]),
        T.resized_crop(img.to(device), 17, 33, 201, 303, [64, 80], interpolation="bicubic"),
    ]


def fused_case(device: str, dtype: torch.dtype, filt: str, antialias: bool) -> torch.Tensor:
    imgs = [_image(3, h, w, seed=h) for h, w in [(375, 500), (500, 333), (90, 70), (1200, 1600)]]
    boxes = T.random_resized_crop_params([t.shape[1] for t in imgs], [t.shape[2] for t in imgs], generator=7)
    flips = [True, False, True, False]
    norm = (None, None) if dtype == torch.uint8 else ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    kw = {"interpolation": filt, "antialias": antialias, "dtype": dtype}
    return T.resized_crop_flip_normalize([t.to(device) for t in imgs], boxes, flips, [224, 192], *norm, **kw)


@pytest.mark.parametrize("filt,antialias", FILTERS)
@pytest.mark.parametrize("shape,size", RESIZE_SHAPES, ids=str)
def test_resize_equals_cpu(filt: str, antialias: bool, shape: tuple, size: tuple) -> None:
    cpu = resize_case("cpu", filt, antialias, shape, size)
    gpu = resize_case("cuda", filt, antialias, shape, size)
    assert gpu.is_cuda and torch.equal(gpu.cpu(), cpu)


@pytest.mark.parametrize("filt,antialias", FILTERS)
def test_device_windows_equal_host_windows(filt: str, antialias: bool) -> None:
    """The window kernel's double arithmetic is the host's, bit for bit."""
    imgs = [t.cuda() for t in window_images()]
    kw = {"out_h": WINDOW_SIZE[0], "out_w": WINDOW_SIZE[1], "filter": filt, "antialias": antialias}
    nbytes = _core.tf_resize_workspace_bytes(imgs, **kw)
    ws = torch.zeros(nbytes, dtype=torch.uint8, device="cuda")
    out = torch.empty((len(imgs), 3, *WINDOW_SIZE), dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    _core.tf_resize(imgs, out=out, filter=filt, antialias=antialias, stream=stream, workspace=ws)
    host = np.frombuffer(_core.tf_resize_windows(imgs, **kw), np.int32)
    assert np.array_equal(ws.cpu().numpy().view(np.int32), host)


def _from_the_profiler(w: warnings.WarningMessage) -> bool:
    """A warning torch.profiler (or the CUPTI/kineto layer under it) raised."""
    base = os.path.dirname(torch.__file__)
    where = (os.path.join(base, "profiler"), os.path.join(base, "autograd", "profiler"))
    return w.filename.startswith(where) or re.search(r"(?i)cupti|kineto|profil", str(w.message)) is not None


def test_list_of_different_sizes_is_one_launch_per_stage() -> None:
    imgs = list_images()
    cpu = T.resize(imgs, [224, 224], interpolation="bicubic")
    gpu_imgs = [t.cuda() for t in imgs]
    T.resize(gpu_imgs, [224, 224], interpolation="bicubic")  # warm up
    torch.cuda.synchronize()
    # filterwarnings=error stays on for gdsio: only the profiler's own
    # warnings (CUPTI and kineto ones, which vary with the driver) are let through.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            gpu = T.resize(gpu_imgs, [224, 224], interpolation="bicubic")
            torch.cuda.synchronize()
    theirs = [w for w in caught if _from_the_profiler(w)]
    for w in theirs:
        print(f"torch.profiler warned: {w.category.__name__}: {w.message}")
    assert not [w for w in caught if w not in theirs], [f"{w.filename}: {w.message}" for w in caught if w not in theirs]
    assert torch.equal(gpu.cpu(), cpu)
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert sum("resample_kernel" in n for n in names) == 1, names
    assert sum("windows_kernel" in n for n in names) == 1, names


def test_batch_larger_than_one_launch() -> None:
    assert torch.equal(big_batch_case("cuda").cpu(), big_batch_case("cpu"))


def test_batch_tensor_and_crop_views() -> None:
    for gpu, cpu in zip(view_cases("cuda"), view_cases("cpu")):
        assert torch.equal(gpu.cpu(), cpu)


def test_non_default_stream_is_honoured() -> None:
    """The kernels run on the caller's stream: queued behind a slow producer on
    that stream, they still see its data (on the legacy default stream they
    would run first and resize zeros)."""
    img = _image(3, 375, 500)
    cpu = T.resize(img, [224, 224])
    src = img.cuda()
    x = torch.zeros_like(src)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # ~tens of ms on the stream
        x.copy_(src)
        out = T.resize(x, [224, 224])
        fused = T.resized_crop_flip_normalize(
            [x], [[0, 0, 375, 500]], [False], [224, 224], [0.5] * 3, [0.25] * 3, dtype=torch.float32
        )
    s.synchronize()
    assert torch.equal(out.cpu(), cpu)
    _assert_float_close(fused[0], T.normalize(T.to_dtype(cpu, torch.float32, scale=True), [0.5] * 3, [0.25] * 3))


@pytest.mark.parametrize("dtype", FUSED_DTYPES)
@pytest.mark.parametrize("filt,antialias", FILTERS)
def test_fused_equals_cpu(dtype: torch.dtype, filt: str, antialias: bool) -> None:
    cpu = fused_case("cpu", dtype, filt, antialias)
    gpu = fused_case("cuda", dtype, filt, antialias)
    assert gpu.dtype == dtype and gpu.shape == cpu.shape
    if dtype == torch.uint8:
        assert torch.equal(gpu.cpu(), cpu)
    else:
        _assert_float_close(gpu, cpu)


@pytest.mark.parametrize("dtype", POINTWISE_DTYPES)
def test_pointwise_ops_stay_on_the_device_and_equal_torch(dtype: torch.dtype) -> None:
    """to_dtype, normalize and hflip are torch's ops: on a CUDA tensor they run
    there (mean and std go to its device) and equal torchvision's calls."""
    img = _image(3, 123, 457).cuda()
    for scale in (True, False):
        out = T.to_dtype(img, dtype, scale=scale)
        ref = img.to(dtype).mul_(1.0 / 255) if scale else img.to(dtype)
        assert out.is_cuda and out.dtype == dtype and torch.equal(out, ref)
    x = T.to_dtype(torch.stack([img, 255 - img]), dtype, scale=True)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    per_channel = {"dtype": dtype, "device": x.device}
    ref = x.sub(torch.tensor(mean, **per_channel).view(-1, 1, 1)).div_(torch.tensor(std, **per_channel).view(-1, 1, 1))
    out = T.normalize(x, mean, std)
    assert out.is_cuda and torch.equal(out, ref)
    assert torch.equal(T.hflip(x), x.flip(-1)) and torch.equal(T.hflip(img), img.flip(-1))


def test_mixed_devices_are_refused() -> None:
    img = _image(3, 10, 10)
    with pytest.raises(ValueError, match=r"img\[1\] is on cuda"):
        T.resize([img, img.cuda()], [5, 5])


def test_current_device_is_restored() -> None:
    before = torch.cuda.current_device()
    T.resize(_image(3, 50, 60).cuda(), [20, 20])
    assert torch.cuda.current_device() == before
