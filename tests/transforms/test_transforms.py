"""gdsio.transforms on the CPU: the C++ twin against Pillow (antialias=True)
and OpenCV (antialias=False) on real photographs (scikit-image's) and
synthetic patterns; the fused step against the composition of the separate
ops; errors. The GPU kernels are checked against this CPU path in
test_transforms_gpu.py."""

from __future__ import annotations

import enum

import cv2
import numpy as np
import pytest
import torch
from boundary.fakes import on_device
from PIL import Image
from skimage import data as skdata

import gdsio
from gdsio import _core
from gdsio import transforms as T

PIL_FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "box": Image.Resampling.BOX,
}
CV_FILTERS = {"nearest": cv2.INTER_NEAREST, "bilinear": cv2.INTER_LINEAR}


# ---- images ------------------------------------------------------------------------------------
def _photos() -> dict[str, np.ndarray]:
    """HWC (or HW) uint8 photographs shipped inside scikit-image."""
    return {
        "astronaut": skdata.astronaut(),  # 512x512 RGB
        "coffee": skdata.coffee(),  # 400x600 RGB
        "chelsea": skdata.chelsea(),  # 300x451 RGB
        "camera": skdata.camera(),  # 512x512 gray
    }


PHOTOS = _photos()


def _synthetic(h: int, w: int, c: int, seed: int = 0) -> np.ndarray:
    """Noise, hard edges and a gradient: the cases that stress rounding."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.where(((yy // 7) + (xx // 5)) % 2 == 0, 255, 0)
    grad = (xx * 255 // max(w - 1, 1) + yy * 3) % 256
    noise = rng.integers(0, 256, size=(h, w))
    planes = [base, grad, noise, 255 - grad][:c]
    out = np.stack(planes, axis=-1).astype(np.uint8)
    return out[..., 0] if c == 1 else out


def to_chw(a: np.ndarray) -> torch.Tensor:
    t = torch.from_numpy(np.array(a, copy=True, order="C"))
    return t[None] if t.ndim == 2 else t.permute(2, 0, 1).contiguous()


def to_hwc(t: torch.Tensor) -> np.ndarray:
    a = t.numpy()
    return a[0] if a.shape[0] == 1 else a.transpose(1, 2, 0)


def pil_resize(a: np.ndarray, out_h: int, out_w: int, filt: str) -> np.ndarray:
    mode = {2: "L", 3: "RGB", 4: "CMYK"}[a.ndim if a.ndim == 2 else a.shape[2]]
    # CMYK: four independent bands (RGBA would premultiply alpha).
    im = Image.frombytes(mode, (a.shape[1], a.shape[0]), np.ascontiguousarray(a).tobytes())
    return np.asarray(im.resize((out_w, out_h), PIL_FILTERS[filt], reducing_gap=None))


@pytest.fixture(scope="module")
def big_photo() -> np.ndarray:
    """A 3000x4000 RGB photograph (the astronaut enlarged by Pillow), for 4000 -> 7."""
    return np.asarray(Image.fromarray(PHOTOS["astronaut"]).resize((4000, 3000), Image.Resampling.BICUBIC))


def diff_stats(a: np.ndarray, b: np.ndarray) -> tuple[int, float]:
    d = np.abs(a.astype(np.int32) - b.astype(np.int32))
    return int(d.max()), float((d == 0).mean())


# ---- resize against Pillow -------------------------------------------------------------------
SIZES = [
    (1, 1),
    (1, 37),
    (41, 1),
    (7, 7),
    (31, 17),
    (224, 224),
    (223, 301),
    (333, 250),
    (512, 512),  # same size: Pillow's identity
    (700, 701),  # upscale
    (1031, 997),
]


@pytest.mark.parametrize("filt", list(PIL_FILTERS))
@pytest.mark.parametrize("photo", list(PHOTOS))
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_resize_matches_pillow_on_photos(filt: str, photo: str, size: tuple[int, int]) -> None:
    a = PHOTOS[photo]
    ours = to_hwc(T.resize(to_chw(a), list(size), interpolation=filt))
    ref = pil_resize(a, *size, filt)
    worst, exact = diff_stats(ours, ref)
    assert worst <= 1, f"max |diff| {worst}, exact {exact:.4%}"
    # The 8-bit fixed point of Resample.c is ported as is: the bytes agree.
    assert exact == 1.0, f"max |diff| {worst}, exact {exact:.4%}"


@pytest.mark.parametrize("filt", list(PIL_FILTERS))
@pytest.mark.parametrize(
    "shape,size",
    [
        ((1, 1, 3), (5, 9)),  # 1x1 up
        ((1, 97, 3), (1, 13)),  # 1xN
        ((89, 1, 3), (17, 1)),  # Nx1
        ((1, 97, 3), (19, 23)),
        ((97, 89, 1), (45, 44)),  # odd, gray
        ((64, 48, 4), (333, 251)),  # 4 channels, upscale
        ((255, 257, 2), (128, 129)),  # 2 channels
        ((300, 4000, 3), (300, 7)),  # 4000 -> 7 in one dimension
        ((4000, 50, 1), (7, 50)),
        ((3, 5, 3), (300, 500)),  # 100x upscale
    ],
)
def test_resize_matches_pillow_on_patterns(filt: str, shape: tuple[int, ...], size: tuple[int, int]) -> None:
    h, w, c = shape
    a = _synthetic(h, w, c)
    ours = to_chw(a)
    out = T.resize(ours, list(size), interpolation=filt)
    if c == 2:  # Pillow has no 2-band mode without premultiplication: band by band
        ref = np.stack([pil_resize(a[..., k], *size, filt) for k in range(2)], axis=-1)
    else:
        ref = pil_resize(a, *size, filt)
    worst, exact = diff_stats(to_hwc(out), ref)
    assert worst <= 1 and exact == 1.0, f"max |diff| {worst}, exact {exact:.4%}"


@pytest.mark.parametrize("filt", list(PIL_FILTERS))
@pytest.mark.parametrize("size", [(7, 7), (3, 4), (1, 1), (224, 224)], ids=str)
def test_huge_downscale_4000_to_7(big_photo: np.ndarray, filt: str, size: tuple[int, int]) -> None:
    out = T.resize(to_chw(big_photo), list(size), interpolation=filt)
    worst, exact = diff_stats(to_hwc(out), pil_resize(big_photo, *size, filt))
    assert worst <= 1 and exact == 1.0, f"max |diff| {worst}, exact {exact:.4%}"


def test_resize_follows_torchvision_size_rules() -> None:
    img = torch.zeros((3, 375, 500), dtype=torch.uint8)
    assert T.resize(img, 224).shape == (3, 224, 298)  # shorter side, int(224 * 500 / 375)
    assert T.resize(img, [224]).shape == (3, 224, 298)
    assert T.resize(img.transpose(1, 2), 224).shape == (3, 298, 224)
    assert T.resize(img, 224, max_size=250).shape == (3, 187, 250)
    assert T.resize(img, [100, 50]).shape == (3, 100, 50)


# ---- resize against OpenCV -------------------------------------------------------------------
@pytest.mark.parametrize("filt", list(CV_FILTERS))
@pytest.mark.parametrize("photo", list(PHOTOS))
@pytest.mark.parametrize(
    "size", [(1, 1), (7, 7), (224, 224), (256, 256), (171, 341), (1000, 900), (1024, 1024), (2000, 3)], ids=str
)
def test_resize_without_antialias_matches_opencv(filt: str, photo: str, size: tuple[int, int]) -> None:
    a = PHOTOS[photo]
    ours = to_hwc(T.resize(to_chw(a), list(size), interpolation=filt, antialias=False))
    ref = cv2.resize(a, (size[1], size[0]), interpolation=CV_FILTERS[filt])
    worst, exact = diff_stats(ours, ref)
    assert worst <= 1, f"max |diff| {worst}, exact {exact:.4%}"


@pytest.mark.parametrize("filt", list(CV_FILTERS))
@pytest.mark.parametrize("shape,size", [((1, 97, 3), (5, 13)), ((89, 1, 1), (17, 3)), ((3, 4000, 3), (2, 7))])
def test_opencv_edge_shapes(filt: str, shape: tuple[int, ...], size: tuple[int, int]) -> None:
    h, w, c = shape
    a = _synthetic(h, w, c)
    ours = to_hwc(T.resize(to_chw(a), list(size), interpolation=filt, antialias=False))
    ref = cv2.resize(a, (size[1], size[0]), interpolation=CV_FILTERS[filt])
    assert diff_stats(ours, ref.reshape(ours.shape))[0] <= 1


# ---- batches, lists, views, threads ------------------------------------------------------------
def test_list_of_different_sizes_equals_one_by_one() -> None:
    imgs = [
        to_chw(PHOTOS["coffee"]),
        to_chw(PHOTOS["chelsea"]),
        to_chw(_synthetic(77, 33, 3)),
        to_chw(PHOTOS["astronaut"]),
    ]
    for filt in PIL_FILTERS:
        out = T.resize(imgs, [96, 128], interpolation=filt)
        assert out.shape == (4, 3, 96, 128)
        for i, im in enumerate(imgs):
            assert torch.equal(out[i], T.resize(im, [96, 128], interpolation=filt))


def test_batch_tensor_and_views() -> None:
    a = to_chw(PHOTOS["chelsea"])
    batch = torch.stack([a, a.flip(-1).contiguous(), 255 - a])
    out = T.resize(batch, [100, 150], interpolation="bicubic")
    for i in range(3):
        assert torch.equal(out[i], T.resize(batch[i].clone(), [100, 150], interpolation="bicubic"))
    # A crop is a view (strided rows); channels-last is not unit-stride (copied).
    view = a[:, 20:220, 30:330]
    assert torch.equal(T.resize(view, [50, 60]), T.resize(view.contiguous(), [50, 60]))
    hwc = torch.from_numpy(PHOTOS["chelsea"]).permute(2, 0, 1)
    assert torch.equal(T.resize(hwc, [50, 60]), T.resize(a, [50, 60]))


def test_thread_count_does_not_change_bytes() -> None:
    imgs = [to_chw(PHOTOS["coffee"]), to_chw(PHOTOS["astronaut"])]
    with gdsio.settings(threads=1):
        one = T.resize(imgs, [123, 321], interpolation="bicubic")
    with gdsio.settings(threads=7):
        many = T.resize(imgs, [123, 321], interpolation="bicubic")
    assert torch.equal(one, many)


def test_resized_crop_equals_resize_of_crop() -> None:
    a = to_chw(PHOTOS["coffee"])
    out = T.resized_crop(a, 17, 33, 201, 303, [64, 80], interpolation="bicubic")
    assert torch.equal(out, T.resize(a[:, 17:218, 33:336].contiguous(), [64, 80], interpolation="bicubic"))
    ref = pil_resize(PHOTOS["coffee"][17:218, 33:336], 64, 80, "bicubic")
    assert np.array_equal(to_hwc(out), ref)


class InterpolationMode(enum.Enum):
    """torchvision.transforms.InterpolationMode's values (torchvision is optional)."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    LANCZOS = "lanczos"


def test_interpolation_mode_enums_are_accepted() -> None:
    a = to_chw(PHOTOS["chelsea"])
    for mode in (
        InterpolationMode.BILINEAR,
        InterpolationMode.BICUBIC,
        InterpolationMode.BOX,
        InterpolationMode.NEAREST,
    ):
        assert torch.equal(T.resize(a, [40, 50], interpolation=mode), T.resize(a, [40, 50], interpolation=mode.value))
    # nearest-exact is Pillow's nearest, whatever antialias says.
    assert torch.equal(
        T.resize(a, [40, 50], interpolation=InterpolationMode.NEAREST_EXACT, antialias=False),
        T.resize(a, [40, 50], interpolation="nearest"),
    )
    with pytest.raises(ValueError, match="lanczos"):
        T.resize(a, [40, 50], interpolation=InterpolationMode.LANCZOS)


# ---- the other ops -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float16, torch.bfloat16, torch.int32])
def test_hflip_equals_torch_flip(dtype: torch.dtype) -> None:
    x = torch.arange(2 * 3 * 5 * 7).reshape(2, 3, 5, 7).to(dtype)
    assert torch.equal(T.hflip(x), x.flip(-1))
    assert torch.equal(T.hflip(x[:, :, 1:4, 2:6]), x[:, :, 1:4, 2:6].flip(-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_to_dtype_and_normalize_round_as_torch(dtype: torch.dtype) -> None:
    a = to_chw(PHOTOS["astronaut"])
    for scale in (True, False):
        ours = T.to_dtype(a, dtype, scale=scale)
        ref = a.to(dtype).mul_(1.0 / 255) if scale else a.to(dtype)
        assert ours.dtype == dtype and torch.equal(ours, ref)
    x = T.to_dtype(a, dtype, scale=True)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    ref = x.sub(torch.tensor(mean, dtype=dtype).view(-1, 1, 1)).div_(torch.tensor(std, dtype=dtype).view(-1, 1, 1))
    assert torch.equal(T.normalize(x, mean, std), ref)
    batch = torch.stack([x, x.flip(-1)])
    assert torch.equal(T.normalize(batch, mean, std)[1], T.normalize(x.flip(-1), mean, std))
    y = x.clone()
    assert T.normalize(y, mean, std, inplace=True) is y and torch.equal(y, ref)


def test_flips_and_conversions_of_views_give_new_contiguous_tensors() -> None:
    """hflip, vflip, to_dtype and normalize (torch's ops) of a channels_last or
    transposed view: a new contiguous tensor equal to torch's result; normalize
    in place writes through the view."""
    a = to_chw(_synthetic(6, 9, 3))
    mean, std = [0.5, 0.25, 0.75], [0.5, 2.0, 0.25]
    for view in (a[None].contiguous(memory_format=torch.channels_last)[0], a.transpose(1, 2)):
        for ours, ref in ((T.hflip(view), view.flip(-1)), (T.vflip(view), view.flip(-2)),
                          (T.to_dtype(view, torch.float32, scale=True), view.float().mul_(1.0 / 255))):
            assert ours.is_contiguous() and ours.data_ptr() != view.data_ptr() and torch.equal(ours, ref)
        f = view.float().mul_(1.0 / 255)
        ref = (f - torch.tensor(mean).view(-1, 1, 1)) / torch.tensor(std).view(-1, 1, 1)
        out = T.normalize(f, mean, std)
        assert out.is_contiguous() and torch.equal(out, ref)
        base = torch.zeros(3, f.shape[2], f.shape[1]).transpose(1, 2).copy_(f)
        assert T.normalize(base, mean, std, inplace=True) is base and torch.equal(base, ref)


def test_to_dtype_other_directions_follow_torchvision() -> None:
    a = to_chw(_synthetic(5, 6, 3))
    f = T.to_dtype(a, torch.float32, scale=True)
    assert torch.equal(T.to_dtype(f, torch.uint8, scale=True), a)
    assert T.to_dtype(a, torch.uint8) is a
    assert T.to_dtype(f, torch.float16).dtype == torch.float16


def test_crop_and_center_crop() -> None:
    a = to_chw(PHOTOS["chelsea"])  # 300x451
    c = T.crop(a, 10, 20, 30, 40)
    assert c.shape == (3, 30, 40) and c.data_ptr() == a[:, 10, 20].data_ptr()
    cc = T.center_crop(a, [100, 201])
    assert torch.equal(cc, a[:, 100:200, 125:326])  # round((300-100)/2), round((451-201)/2)
    padded = T.center_crop(a, [302, 451])  # one row of zeros above and below
    assert padded.shape == (3, 302, 451) and padded[:, 0].sum() == 0 and torch.equal(padded[:, 1:-1], a)


def test_random_resized_crop_params() -> None:
    p1 = T.random_resized_crop_params(375, 500, generator=42)
    assert p1 == T.random_resized_crop_params(375, 500, generator=42)
    assert isinstance(p1, tuple) and all(isinstance(v, int) for v in p1)
    rng = np.random.default_rng(0)
    hs = rng.integers(50, 1000, size=2000)
    ws = rng.integers(50, 1000, size=2000)
    boxes = T.random_resized_crop_params(hs, ws, generator=rng)
    assert boxes.shape == (2000, 4) and boxes.dtype == np.int64
    top, left, bh, bw = boxes.T
    assert (top >= 0).all() and (left >= 0).all() and (bh >= 1).all() and (bw >= 1).all()
    assert (top + bh <= hs).all() and (left + bw <= ws).all()
    frac = bh * bw / (hs * ws)
    assert frac.min() >= 0.06 and frac.max() <= 1.0  # 0.08 .. 1.0, give or take rounding
    # No box fits (square image, ratio 3): torchvision's central fallback.
    assert T.random_resized_crop_params(90, 90, scale=(1.0, 1.0), ratio=(3.0, 3.0), generator=0) == (30, 0, 30, 90)


# ---- the fused step ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "filt,antialias", [("bilinear", True), ("bicubic", True), ("bilinear", False), ("nearest", True)]
)
def test_fused_equals_composition(dtype: torch.dtype, filt: str, antialias: bool) -> None:
    imgs = [to_chw(PHOTOS["coffee"]), to_chw(PHOTOS["chelsea"]), to_chw(_synthetic(90, 70, 3))]
    hs = [im.shape[1] for im in imgs]
    ws = [im.shape[2] for im in imgs]
    boxes = T.random_resized_crop_params(hs, ws, generator=3)
    flips = [True, False, True]
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    out = T.resized_crop_flip_normalize(
        imgs, boxes, flips, [112, 96], mean, std, interpolation=filt, antialias=antialias, dtype=dtype
    )
    assert out.shape == (3, 3, 112, 96) and out.dtype == dtype
    for i, im in enumerate(imgs):
        top, left, h, w = (int(v) for v in boxes[i])
        r = T.resized_crop(im, top, left, h, w, [112, 96], interpolation=filt, antialias=antialias)
        if flips[i]:
            r = T.hflip(r)
        ref = T.normalize(T.to_dtype(r, torch.float32, scale=True), mean, std).to(dtype)
        # The same float32 operations in the same order: equal, not just close.
        torch.testing.assert_close(out[i], ref, rtol=0, atol=0)


def test_fused_without_normalization_and_uint8() -> None:
    a = to_chw(PHOTOS["astronaut"])
    box = [50, 60, 300, 200]
    u8 = T.resized_crop_flip_normalize(a, box, True, 64, None, None, dtype=torch.uint8)
    assert torch.equal(u8, T.hflip(T.resized_crop(a, 50, 60, 300, 200, [64, 64])))
    f = T.resized_crop_flip_normalize(a, box, True, 64, None, None, dtype=torch.float32)
    assert torch.equal(f, T.to_dtype(u8, torch.float32, scale=True))


# ---- errors ------------------------------------------------------------------------------------
def test_errors_name_the_argument() -> None:
    a = to_chw(PHOTOS["chelsea"])
    with pytest.raises(TypeError, match="images must be a uint8 image"):
        T.resized_crop_flip_normalize(a.float(), [0, 0, 10, 10], None, 8, None, None)
    with pytest.raises(ValueError, match=r"img must be \(C, H, W\)"):
        T.resize(a[0, 0], [10, 10])
    with pytest.raises(ValueError, match="img is empty"):
        T.resize(a[:, :0], [10, 10])
    with pytest.raises(ValueError, match="5 channels"):
        T.resize(torch.zeros((5, 8, 8), dtype=torch.uint8), [4, 4])
    with pytest.raises(ValueError, match=r"img\[1\] is empty"):
        T.resize([a, a[:, :, :0]], [10, 10])
    with pytest.raises(TypeError, match=r"img\[2\] must be a uint8 image"):
        T.resize([a, a, a.float()], [10, 10])
    with pytest.raises(ValueError, match=r"img\[1\] has 1 channels"):
        T.resize([a, a[:1]], [10, 10])
    with pytest.raises(ValueError, match="different output shapes"):
        T.resize([a, a[:, :100]], 50)
    with pytest.raises(ValueError, match="size must be positive"):
        T.resize(a, [0, 10])
    with pytest.raises(TypeError, match="size must be"):
        T.resize(a, "big")
    with pytest.raises(ValueError, match="interpolation 'lanczos'"):
        T.resize(a, [10, 10], interpolation="lanczos")
    with pytest.raises(ValueError, match="antialias=False"):
        T.resize(a, [10, 10], interpolation="box", antialias=False)
    with pytest.raises(TypeError, match="antialias must be a bool or None"):
        T.resize(a, [10, 10], antialias="yes")
    with pytest.raises(ValueError, match="empty list"):
        T.resize([], [10, 10])
    with pytest.raises(ValueError, match="height and width must be positive"):
        T.crop(a, 0, 0, 0, 10)


def test_fused_errors_name_the_argument() -> None:
    a = to_chw(PHOTOS["chelsea"])
    mean, std = [0.5] * 3, [0.25] * 3
    with pytest.raises(
        ValueError, match=r"boxes\[1\] = \(top=290, left=0, height=20, width=20\) is outside images\[1\]"
    ):
        T.resized_crop_flip_normalize([a, a], [[0, 0, 10, 10], [290, 0, 20, 20]], None, 8, mean, std)
    with pytest.raises(ValueError, match=r"boxes must be \(N, 4\) = \(2, 4\)"):
        T.resized_crop_flip_normalize([a, a], [[0, 0, 10, 10]], None, 8, mean, std)
    with pytest.raises(ValueError, match="flips must hold one flag per image"):
        T.resized_crop_flip_normalize([a, a], [[0, 0, 10, 10]] * 2, [True], 8, mean, std)
    with pytest.raises(ValueError, match="mean has 2 values for 3 channels"):
        T.resized_crop_flip_normalize(a, [0, 0, 10, 10], None, 8, [0.5, 0.5], std)
    with pytest.raises(ValueError, match="std: a channel's std is 0"):
        T.resized_crop_flip_normalize(a, [0, 0, 10, 10], None, 8, mean, [1, 0, 1])
    with pytest.raises(ValueError, match="give both or neither"):
        T.resized_crop_flip_normalize(a, [0, 0, 10, 10], None, 8, mean, None)
    with pytest.raises(TypeError, match="dtype must be"):
        T.resized_crop_flip_normalize(a, [0, 0, 10, 10], None, 8, mean, std, dtype=torch.float64)
    with pytest.raises(TypeError, match="images must be a uint8 tensor or a list"):
        T.resized_crop_flip_normalize(np.zeros((3, 4, 4)), [0, 0, 1, 1], None, 8, mean, std)
    with pytest.raises(TypeError, match="boxes must hold integers"):
        T.resized_crop_flip_normalize(a, [0.5, 0, 10, 10], None, 8, mean, std)


def test_pointwise_errors() -> None:
    a = to_chw(PHOTOS["chelsea"])
    with pytest.raises(TypeError, match="normalize needs a float32"):
        T.normalize(a, [0.5] * 3, [0.5] * 3)
    with pytest.raises(ValueError, match="std evaluates to 0 in torch.float16"):
        T.normalize(a.half(), [0.5] * 3, [1e-9] * 3)
    with pytest.raises(ValueError, match="mean has 2 values for 3 channels"):
        T.normalize(a.float(), [0.5] * 2, [0.5] * 3)
    with pytest.raises(TypeError, match="hflip supports 1, 2, 4 and 8-byte dtypes"):
        T.hflip(a.to(torch.complex128))
    with pytest.raises(TypeError, match="to_dtype converts between"):
        T.to_dtype(a, torch.int32)
    with pytest.raises(ValueError, match="scale and ratio must be positive"):
        T.random_resized_crop_params(10, 10, scale=(0.5, 0.1))
    with pytest.raises(TypeError, match="height and width must be ints"):
        T.random_resized_crop_params([10, 20], [10])


def test_gpu_launchers_refuse_cleanly_without_a_usable_device() -> None:
    """Built without CUDA, or no usable device (here device 1000, which no
    machine has; host memory described as its memory): every launcher raises
    before touching memory."""
    a = to_chw(PHOTOS["chelsea"]).contiguous()
    out = torch.empty((1, 3, 8, 8), dtype=torch.uint8)
    ws = torch.empty(1 << 20, dtype=torch.uint8)
    kw = {"filter": "bilinear", "antialias": True}
    refused = (gdsio.BackendUnavailable, ValueError)
    with pytest.raises(refused, match="CUDA|cuda"):
        _core.tf_resize([on_device(a, 1000)], out=on_device(out, 1000), **kw, workspace=on_device(ws, 1000))
    with pytest.raises(refused, match="workspace: holds 4 bytes|built without CUDA"):
        _core.tf_resize([on_device(a, 1000)], out=on_device(out, 1000), **kw, workspace=on_device(ws[:4], 1000))
    with pytest.raises(refused, match="CUDA|cuda"):
        _core.tf_pad(on_device(a[:1, :2, :2].contiguous(), 1000), on_device(out[0, :1, :2, :3].contiguous(), 1000),
                     left=1, top=0, right=0, bottom=0, mode="constant", fill=[0])
    ops, factors = np.array([[2, 0, 0, 0]], np.int32), np.array([[0.5, 0, 0, 0]])
    with pytest.raises(refused, match="CUDA|cuda"):
        _core.tf_color([on_device(a, 1000)], [on_device(torch.empty_like(a), 1000)], ops, factors,
                       workspace=on_device(ws, 1000))
