"""torchvision v2 users' habits on gdsio.transforms (CPU): the argument forms
v2 takes (float tensors, antialias=None, size=None with max_size, integer
interpolation codes, PIL images, (H, W) and (..., C, H, W) tensors), the new
ops (vflip, pad, the colour family) against independent oracles (numpy's pad,
torch's flip, the v2 formulas written in torch), batches and lists, the
classes, and clear errors. Values against torchvision itself:
test_torchvision_reference.py."""

from __future__ import annotations

import enum

import numpy as np
import pytest
import torch
from PIL import Image

from gdsio import _core
from gdsio import transforms as T
from gdsio.data import (
    BatchInfo,
    ColorJitter,
    Compose,
    Pad,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomVerticalFlip,
    batch_context,
)
from gdsio.transforms.classes import uniforms


def u8(c: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).integers(0, 256, (c, h, w), dtype=np.uint8))


def pil_of(t: torch.Tensor) -> Image.Image:
    a = t.numpy()
    return Image.fromarray(a[0] if a.shape[0] == 1 else np.ascontiguousarray(a.transpose(1, 2, 0)))


class Mode(enum.Enum):  # torchvision's InterpolationMode, by its values
    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"


# ---- resize: the forms v2 takes ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "bilinear", "bicubic"])
@pytest.mark.parametrize("antialias", [True, False, None])
def test_float_resize_is_torch_interpolate_as_v2_calls_it(dtype, mode, antialias) -> None:
    x = (u8(3, 37, 29).to(dtype) / 255)
    got = T.resize(x, [17, 40], interpolation=mode, antialias=antialias)
    aa = bool(antialias) and mode in ("bilinear", "bicubic")
    xf = x.float() if dtype == torch.float16 else x
    want = torch.nn.functional.interpolate(xf[None], size=[17, 40], mode=mode, antialias=aa,
                                           align_corners=False if mode in ("bilinear", "bicubic") else None)[0]
    assert got.dtype == dtype and torch.equal(got, want.to(dtype))


def test_float_resize_same_size_returns_the_image_and_batches_keep_their_shape() -> None:
    x = torch.rand(3, 10, 12)
    assert T.resize(x, [10, 12]) is x  # as torchvision
    b = torch.rand(2, 4, 3, 10, 12)
    out = T.resize(b, [5, 6])
    assert out.shape == (2, 4, 3, 5, 6)
    assert torch.equal(out[1, 2], T.resize(b[1, 2], [5, 6]))
    lst = T.resize([torch.rand(3, 10, 12), torch.rand(3, 20, 8)], [5, 6])
    assert lst.shape == (2, 3, 5, 6)


def test_uint16_resize_rounds_as_torchvision() -> None:
    x = torch.from_numpy(np.random.default_rng(1).integers(0, 65536, (1, 20, 20)).astype(np.uint16))
    want = torch.nn.functional.interpolate(x.float()[None], size=[7, 9], mode="bilinear", antialias=True,
                                           align_corners=False)[0].round().to(torch.uint16)
    assert torch.equal(T.resize(x, [7, 9]), want)


def test_antialias_none_is_false() -> None:
    a = u8(3, 50, 60)
    assert torch.equal(T.resize(a, [20, 25], antialias=None), T.resize(a, [20, 25], antialias=False))


def test_uint8_bicubic_without_antialias_is_torch_interpolate() -> None:
    a = u8(3, 50, 60)
    want = torch.nn.functional.interpolate(a[None], size=[20, 25], mode="bicubic", antialias=False,
                                           align_corners=False)[0]
    assert torch.equal(T.resize(a, [20, 25], interpolation="bicubic", antialias=False), want)


def test_size_none_with_max_size() -> None:
    a = u8(3, 50, 80)
    assert T.resize(a, None, max_size=40).shape == (3, 25, 40)
    assert T.resize(a.transpose(1, 2), None, max_size=40).shape == (3, 40, 25)
    assert T.resize(a, 30, max_size=40).shape == (3, 25, 40)  # the longer side capped
    with pytest.raises(ValueError, match="size=None needs max_size"):
        T.resize(a, None)
    with pytest.raises(ValueError, match="max_size is only allowed"):
        T.resize(a, [10, 10], max_size=40)
    with pytest.raises(TypeError, match="max_size must be an int"):
        T.resize(a, None, max_size=4.5)


@pytest.mark.parametrize("code,name", [(0, "nearest"), (2, "bilinear"), (3, "bicubic"), (4, "box"),
                                       (Image.Resampling.BICUBIC, "bicubic"), (Mode.BILINEAR, "bilinear")])
def test_interpolation_codes_and_enums_mean_their_names(code, name) -> None:
    a = u8(3, 40, 50)
    assert torch.equal(T.resize(a, [13, 17], interpolation=code), T.resize(a, [13, 17], interpolation=name))


def test_bad_interpolations_are_named() -> None:
    a = u8(3, 40, 50)
    with pytest.raises(ValueError, match="interpolation code 7 is none of Pillow's"):
        T.resize(a, [5, 5], interpolation=7)
    with pytest.raises(ValueError, match="interpolation 'hamming' is not supported for uint8"):
        T.resize(a, [5, 5], interpolation=5)
    with pytest.raises(ValueError, match="'box' is not supported for torch.float32 tensors"):
        T.resize(a.float(), [5, 5], interpolation="box")
    with pytest.raises(ValueError, match="interpolation 'cubic' is not one of"):
        T.resize(a, [5, 5], interpolation="cubic")
    with pytest.raises(TypeError, match="interpolation must be a name"):
        T.resize(a, [5, 5], interpolation=2.0)


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic", "box", "hamming", "lanczos"])
def test_pil_images_are_resized_by_pillow(mode) -> None:
    im = pil_of(u8(3, 40, 50))
    got = T.resize(im, 20, interpolation=mode)
    assert isinstance(got, Image.Image) and got.size == (25, 20)
    want = im.resize((25, 20), resample=getattr(Image.Resampling, mode.upper()))
    assert np.array_equal(np.asarray(got), np.asarray(want))


def test_pil_antialias_false_warns_as_torchvision() -> None:
    im = pil_of(u8(3, 40, 50))
    with pytest.warns(UserWarning, match="Anti-alias option is always applied for PIL Image input"):
        T.resize(im, [10, 10], antialias=False)


def test_gray_2d_tensors() -> None:
    g = u8(1, 40, 50)
    assert torch.equal(T.resize(g[0], [13, 17]), T.resize(g, [13, 17])[0])
    assert torch.equal(T.resize(g[0].float(), [13, 17]), T.resize(g.float(), [13, 17])[0])
    assert torch.equal(T.resized_crop(g[0], 3, 4, 20, 30, [9, 9]), T.resized_crop(g, 3, 4, 20, 30, [9, 9])[0])
    assert T.center_crop(g[0], 10).shape == (10, 10)
    assert torch.equal(T.hflip(g[0]), g[0].flip(-1)) and torch.equal(T.vflip(g[0]), g[0].flip(-2))


def test_resized_crop_forms() -> None:
    a = u8(3, 40, 50)
    # float: crop then torchvision's resize
    assert torch.equal(T.resized_crop(a.float(), 3, 4, 20, 30, [9, 11]), T.resize(a.float()[:, 3:23, 4:34], [9, 11]))
    # a box reaching outside: zero-padded first, as torchvision's crop
    got = T.resized_crop(a, -4, 40, 20, 20, [10, 10], interpolation=0)
    assert torch.equal(got, T.resize(T.crop(a, -4, 40, 20, 20), [10, 10], interpolation=0))
    im = pil_of(a)
    pil = T.resized_crop(im, 3, 4, 20, 30, [9, 11])
    assert np.array_equal(np.asarray(pil), np.asarray(im.crop((4, 3, 34, 23)).resize((11, 9), Image.Resampling.BILINEAR)))
    with pytest.raises(TypeError, match="top must be an int"):
        T.resized_crop(a, 1.5, 0, 4, 4, [2, 2])


# ---- crops and flips -------------------------------------------------------------------------------
def test_crop_outside_is_zero_padded_as_torchvision() -> None:
    a = u8(3, 20, 30)
    got = T.crop(a, -3, 25, 10, 12)
    want = torch.zeros((3, 10, 12), dtype=torch.uint8)
    want[:, 3:, :5] = a[:, :7, 25:]
    assert torch.equal(got, want)
    assert torch.equal(T.crop(a, 40, 40, 5, 6), torch.zeros((3, 5, 6), dtype=torch.uint8))  # no overlap
    assert T.crop(a, 2, 3, 4, 5).data_ptr() == a[:, 2:, 3:].data_ptr()  # inside: a view
    im = pil_of(a)
    assert np.array_equal(np.asarray(T.crop(im, -3, 25, 10, 12)), want.permute(1, 2, 0).numpy())


def test_center_crop_of_pil_images() -> None:
    a = u8(3, 20, 30)
    for size in (10, [31, 25], [8, 40]):
        got = T.center_crop(pil_of(a), size)
        assert isinstance(got, Image.Image)
        assert np.array_equal(np.asarray(got), T.center_crop(a, size).permute(1, 2, 0).numpy())


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bool, torch.int16, torch.float16, torch.float32,
                                   torch.int64, torch.float64])
def test_flips_of_any_dtype_equal_torch_flip(dtype) -> None:
    x = (torch.arange(2 * 3 * 7 * 9) % 251).reshape(2, 3, 7, 9).to(dtype)
    for img in (x, x[0], x[0, 0], x.transpose(2, 3)):  # batch, image, 2-D, not contiguous
        assert torch.equal(T.hflip(img), img.flip(-1))
        assert torch.equal(T.vflip(img), img.flip(-2))


def test_pil_flips() -> None:
    a = u8(3, 7, 9)
    assert np.array_equal(np.asarray(T.vflip(pil_of(a))), a.flip(-2).permute(1, 2, 0).numpy())
    assert np.array_equal(np.asarray(T.hflip(pil_of(a))), a.flip(-1).permute(1, 2, 0).numpy())


# ---- pad ---------------------------------------------------------------------------------------------
NP_MODES = {"edge": "edge", "reflect": "reflect", "symmetric": "symmetric"}


def numpy_pad(a: np.ndarray, ltrb: list[int], mode: str, fill: float = 0) -> np.ndarray:
    """The oracle: crop the negative sides, then numpy's pad of the rest."""
    left, top, right, bottom = ltrb
    h, w = a.shape[-2:]
    a = a[..., max(-top, 0) : h - max(-bottom, 0), max(-left, 0) : w - max(-right, 0)]
    widths = [(0, 0)] * (a.ndim - 2) + [(max(top, 0), max(bottom, 0)), (max(left, 0), max(right, 0))]
    if mode == "constant":
        return np.pad(a, widths, mode="constant", constant_values=fill)
    return np.pad(a, widths, mode=NP_MODES[mode])


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric"])
@pytest.mark.parametrize("padding", [0, 3, [2, 5], [1, 4, 6, 0], [-2, 3, 4, -1], [5, 5, 5, 5], [0, 6]])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32, torch.float64])
def test_pad_equals_numpy(mode, padding, dtype) -> None:
    x = (torch.arange(2 * 3 * 6 * 7) % 97).reshape(2, 3, 6, 7).to(dtype)
    ltrb = [padding] * 4 if isinstance(padding, int) else (padding * 2 if len(padding) == 2 else padding)
    if mode == "reflect" and max(ltrb[1], ltrb[3]) >= 6:  # the height is 6
        with pytest.raises(ValueError, match="padding_mode='reflect' needs padding smaller than the height"):
            T.pad(x, padding, padding_mode=mode)
        return
    got = T.pad(x, padding, fill=7 if mode == "constant" else None, padding_mode=mode)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.numpy(), numpy_pad(x.numpy(), ltrb, mode, 7))
    np.testing.assert_array_equal(T.pad(x[1], padding, padding_mode=mode).numpy(), numpy_pad(x[1].numpy(), ltrb, mode))


def test_pad_fill_forms() -> None:
    a = u8(3, 4, 5)
    got = T.pad(a, [1, 2], fill=[10, 20.9, 255])  # per channel, converted as torchvision (truncated)
    for c, v in enumerate((10, 20, 255)):
        assert (got[c, :2] == v).all() and (got[c, :, :1] == v).all()
    assert (T.pad(a, 1, fill=127.7)[:, 0] == 127).all()
    assert (T.pad(a.float(), 1, fill=0.25)[:, 0] == 0.25).all()
    lst = T.pad([a, u8(3, 6, 2)], [1, 0])
    assert [tuple(t.shape) for t in lst] == [(3, 4, 7), (3, 6, 4)]
    im = T.pad(pil_of(a), [1, 2], fill=[10, 20, 255])
    assert isinstance(im, Image.Image) and np.array_equal(np.asarray(im), got.permute(1, 2, 0).numpy())
    gray = T.pad(pil_of(a[:1]), [1, 0, 2, 1], padding_mode="symmetric")
    assert np.array_equal(np.asarray(gray), numpy_pad(a[0].numpy(), [1, 0, 2, 1], "symmetric"))


def test_pad_errors_are_named() -> None:
    a = u8(3, 4, 5)
    with pytest.raises(ValueError, match="1, 2, or 4 element"):
        T.pad(a, [1, 2, 3])
    with pytest.raises(TypeError, match="padding must hold ints"):
        T.pad(a, [1.5])
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        T.pad(a, 1, padding_mode="wrap")
    with pytest.raises(ValueError, match="takes no per-channel fill"):
        T.pad(a, 1, fill=[1, 2, 3], padding_mode="edge")
    with pytest.raises(ValueError, match="fill has 2 values for 3 channels"):
        T.pad(a, 1, fill=[1, 2])
    with pytest.raises(ValueError, match="fill value 300.0 does not fit the image dtype torch.uint8"):
        T.pad(a, 1, fill=300)
    with pytest.raises(ValueError, match="padding_mode='symmetric' needs padding at most the width"):
        T.pad(a, [6, 0], padding_mode="symmetric")
    with pytest.raises(ValueError, match="crops away the whole height"):
        T.pad(a, [0, -2])
    with pytest.raises(TypeError, match="fill must be a number"):
        T.pad(a, 1, fill="white")


# ---- the colour ops: batches, lists, forms ----------------------------------------------------------
def v2_contrast(img: torch.Tensor, f: float) -> torch.Tensor:
    """torchvision v2's adjust_contrast_image, written out in torch (uint8, 3 channels)."""
    r, g, b = img.unbind(-3)
    gray = r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(-3).floor_()
    mean = torch.mean(gray, dim=(-3, -2, -1), keepdim=True)
    return img.mul(f).add_(mean, alpha=1.0 - f).clamp_(0, 255).to(torch.uint8)


def test_contrast_of_a_large_image_follows_v2() -> None:
    """Many bands of the mean's sum (300 x 451: 5 bands)."""
    a = u8(3, 300, 451, seed=3)
    got = T.adjust_contrast(a, 0.6)
    want = v2_contrast(a, 0.6)
    assert (got.int() - want.int()).abs().max() <= 1
    assert (got == want).float().mean() > 0.999


@pytest.mark.parametrize("op,factor", [("adjust_brightness", 1.4), ("adjust_contrast", 0.3),
                                       ("adjust_saturation", 1.7), ("adjust_hue", -0.3)])
def test_batches_and_lists_equal_image_by_image(op, factor) -> None:
    fn = getattr(T, op)
    imgs = [u8(3, 17, 23, 1), u8(3, 31, 9, 2), u8(3, 5, 40, 3)]
    lst = fn(imgs, factor)
    assert isinstance(lst, list)
    for got, img in zip(lst, imgs):
        assert torch.equal(got, fn(img, factor))
    batch = torch.stack([u8(3, 17, 23, s) for s in range(3)])
    out = fn(batch, factor)
    assert out.shape == batch.shape
    for i in range(3):
        assert torch.equal(out[i], fn(batch[i], factor))  # contrast: each image against its own mean
    assert torch.equal(fn(batch[None], factor)[0], out)  # (..., C, H, W)
    nhwc = batch.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)  # not contiguous in W-last order
    assert torch.equal(fn(nhwc, factor), out)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float16, torch.bfloat16])
def test_per_pixel_colour_ops_commute_with_crops_of_any_width(dtype) -> None:
    """The CPU twin runs rows through vectorised loops with scalar tails: a
    pixel's value must not depend on where in a row it falls (crops of width
    1 to 29 against the whole 517-wide image)."""
    a = u8(3, 6, 517, seed=9)
    x = a if dtype == torch.uint8 else (a.float() / 255).to(dtype)
    for op, f in (("adjust_brightness", 1.37), ("adjust_saturation", 1.61), ("adjust_hue", -0.23)):
        whole = getattr(T, op)(x, f)
        for left, width in ((0, 1), (1, 3), (5, 7), (17, 29), (511, 6), (250, 13)):
            part = getattr(T, op)(x[..., left : left + width], f)
            assert torch.equal(part, whole[..., left : left + width]), (op, left, width)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reduced_float_colour_ops_are_close_to_float32(dtype) -> None:
    x = u8(3, 20, 30).float() / 255
    for op, f in (("adjust_brightness", 1.3), ("adjust_contrast", 0.4), ("adjust_saturation", 1.5),
                  ("adjust_hue", 0.2)):
        got = getattr(T, op)(x.to(dtype), f)
        assert got.dtype == dtype
        torch.testing.assert_close(got.float(), getattr(T, op)(x, f), rtol=0, atol=0.02)


def test_gray_images() -> None:
    g = u8(1, 12, 13)
    assert T.adjust_saturation(g, 0.3) is g and T.adjust_hue(g, 0.3) is g  # torchvision returns them
    assert torch.equal(T.adjust_brightness(g[0], 2.0)[None], T.adjust_brightness(g, 2.0))
    assert T.adjust_contrast(g[0], 0.5).shape == (12, 13)
    want = g.mul(0.5).add_(g.float().mean(), alpha=0.5).clamp_(0, 255).to(torch.uint8)
    assert (T.adjust_contrast(g, 0.5).int() - want.int()).abs().max() <= 1


def test_identity_factors() -> None:
    a = u8(3, 12, 13)
    for op, f in (("adjust_brightness", 1.0), ("adjust_contrast", 1.0), ("adjust_saturation", 1.0),
                  ("adjust_hue", 0.0)):
        assert torch.equal(getattr(T, op)(a, f), a), op


def test_colour_errors_are_named() -> None:
    a = u8(3, 4, 5)
    with pytest.raises(ValueError, match=r"brightness_factor \(-0.5\) is not non-negative"):
        T.adjust_brightness(a, -0.5)
    with pytest.raises(ValueError, match=r"hue_factor \(0.6\) is not in \[-0.5, 0.5\]"):
        T.adjust_hue(a, 0.6)
    with pytest.raises(TypeError, match="saturation_factor must be a number"):
        T.adjust_saturation(a, True)
    with pytest.raises(TypeError, match="has 4 channels; the colour ops take 1 or 3"):
        T.adjust_contrast(u8(4, 4, 5), 0.5)
    with pytest.raises(TypeError, match="has dtype torch.float64"):
        T.adjust_contrast(a.double(), 0.5)
    with pytest.raises(ValueError, match=r"img\[1\] is torch.float32"):
        T.adjust_brightness([a, a.float()], 0.5)
    with pytest.raises(ValueError, match="contrast holds 1 factors for 2 images"):
        T.color_jitter([a, a], contrast=[0.5])
    with pytest.raises(ValueError, match="permutation of 0, 1, 2, 3"):
        T.color_jitter(a, brightness=0.5, order=[0, 0, 1, 2])
    with pytest.raises(ValueError, match="contrast_factor must be finite"):
        T.adjust_contrast(a, float("nan"))


def test_color_jitter_equals_the_ops_one_after_the_other() -> None:
    """The fused pass rounds between ops as torchvision does: equal bit for bit."""
    rng = np.random.default_rng(5)
    imgs = [u8(3, 20 + i, 30 - i, i) for i in range(6)]
    b, c, s, h = rng.uniform(0.2, 1.8, 6), rng.uniform(0.2, 1.8, 6), rng.uniform(0.2, 1.8, 6), rng.uniform(-0.5, 0.5, 6)
    order = np.stack([rng.permutation(4) for _ in range(6)])
    got = T.color_jitter(imgs, b, c, s, h, order=order)
    fns = [T.adjust_brightness, T.adjust_contrast, T.adjust_saturation, T.adjust_hue]
    for i, img in enumerate(imgs):
        want = img
        for k in order[i]:
            want = fns[k](want, (b, c, s, h)[k][i])
        assert torch.equal(got[i], want), i
    f = torch.stack(imgs[:1] * 2).float() / 255
    got = T.color_jitter(f, brightness=1.2, hue=[0.1, -0.1], order=[3, 0, 1, 2])
    for i, hv in enumerate((0.1, -0.1)):
        assert torch.equal(got[i], T.adjust_brightness(T.adjust_hue(f[i], hv), 1.2))


def test_pil_colour_ops_are_pillows() -> None:
    from PIL import ImageEnhance

    im = pil_of(u8(3, 12, 13))
    assert np.array_equal(np.asarray(T.adjust_brightness(im, 1.3)), np.asarray(ImageEnhance.Brightness(im).enhance(1.3)))
    assert np.array_equal(np.asarray(T.adjust_saturation(im, 0.3)), np.asarray(ImageEnhance.Color(im).enhance(0.3)))
    out = T.color_jitter([im, im], contrast=[0.5, 1.5], order=[1, 0, 2, 3])
    assert np.array_equal(np.asarray(out[1]), np.asarray(ImageEnhance.Contrast(im).enhance(1.5)))
    assert T.adjust_hue(im.convert("L"), 0.2).mode == "L"


# ---- the classes -------------------------------------------------------------------------------------
def test_random_vertical_flip_per_sample_and_reproducible() -> None:
    imgs = [u8(3, 8, 9, i) for i in range(64)]
    t = RandomVerticalFlip(0.5)
    info = BatchInfo(7, 2, np.arange(64))
    with batch_context(info):
        out = t(imgs)
        again = t(imgs)
        flags = t.flags(64, _salt_of(t))
    flipped = [torch.equal(o, i.flip(-2)) for o, i in zip(out, imgs)]
    assert all(torch.equal(o, i.flip(-2)) or torch.equal(o, i) for o, i in zip(out, imgs))
    assert flipped == flags.tolist() and 10 < sum(flipped) < 54
    assert all(torch.equal(a, b) for a, b in zip(out, again))
    batch = torch.stack(imgs)
    with batch_context(info):
        b_out = t(batch)
    assert all(torch.equal(b_out[k], out[k]) for k in range(64))
    assert torch.equal(RandomVerticalFlip(1.0)(batch), batch.flip(-2))
    # a different transform type: different draws from the horizontal flip's
    with batch_context(info):
        h = RandomHorizontalFlip(0.5).flags(64, _salt_of(RandomHorizontalFlip()))
    assert h.tolist() != flags.tolist()


def _salt_of(t) -> int:
    from gdsio.transforms.classes import _salt

    return _salt(t, -1)


def test_pad_class() -> None:
    a = u8(3, 8, 9)
    assert torch.equal(Pad([1, 2], fill=5)(a), T.pad(a, [1, 2], fill=5))
    assert [tuple(t.shape) for t in Pad(2, padding_mode="edge")([a, a[:, :4]])] == [(3, 12, 13), (3, 8, 13)]
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        Pad(1, padding_mode="mirror")
    with pytest.raises(ValueError, match="1, 2, or 4 element"):
        Pad([1, 2, 3])
    with pytest.raises(TypeError, match="padding must be an int"):
        Pad("1")


def test_color_jitter_ranges_follow_torchvision() -> None:
    t = ColorJitter(0.4, (0.5, 1.5), 2.0, 0.1)
    assert t.brightness == (0.6, 1.4) and t.contrast == (0.5, 1.5) and t.saturation == (0.0, 3.0)
    assert t.hue == (-0.1, 0.1)
    assert ColorJitter(brightness=0, hue=0).brightness is None  # the identity is no op
    with pytest.raises(ValueError, match="must be non negative"):
        ColorJitter(brightness=-0.1)
    with pytest.raises(ValueError, match="hue values should be between"):
        ColorJitter(hue=0.6)
    with pytest.raises(ValueError, match="contrast values should be between"):
        ColorJitter(contrast=(1.5, 0.5))
    with pytest.raises(TypeError, match="should be a single number or a sequence with length 2"):
        ColorJitter(saturation=[1, 2, 3])


def test_color_jitter_draws_per_sample_from_the_batch_info() -> None:
    imgs = [u8(3, 10 + i, 12, i) for i in range(8)]
    t = ColorJitter(0.5, 0.5, 0.5, 0.2)
    info = BatchInfo(11, 3, np.arange(100, 108))
    with batch_context(info):
        out = t(imgs)
        again = t(imgs)
        factors, order = t.params(8, _salt_of(t))
    assert all(torch.equal(a, b) for a, b in zip(out, again))
    u = uniforms(info, _salt_of(t), 8)
    np.testing.assert_allclose(factors[0], 0.5 + u[:, 0])  # brightness in [0.5, 1.5]
    np.testing.assert_allclose(factors[3], -0.2 + 0.4 * u[:, 3])
    assert len({tuple(o) for o in order}) > 1 and all(sorted(o) == [0, 1, 2, 3] for o in order)
    want = T.color_jitter(imgs, *factors, order=order)
    assert all(torch.equal(a, b) for a, b in zip(out, want))
    with batch_context(BatchInfo(11, 4, np.arange(100, 108))):  # another epoch: other draws
        other = t(imgs)
    assert not all(torch.equal(a, b) for a, b in zip(out, other))
    assert ColorJitter()(imgs) is imgs


def test_color_jitter_in_a_training_chain() -> None:
    imgs = [u8(3, 40 + 7 * i, 50, i) for i in range(4)]
    chain = Compose([RandomResizedCrop(16), ColorJitter(0.4, 0.4, 0.4, 0.1), RandomVerticalFlip(), Pad(2)])
    assert not chain.fused
    with batch_context(BatchInfo(0, 0, np.arange(4))):
        out = chain(imgs)
    assert out.shape == (4, 3, 20, 20) and out.dtype == torch.uint8
    im = ColorJitter(0.4, 0.4, 0.4, 0.1)(pil_of(imgs[0]))
    assert isinstance(im, Image.Image)


def test_core_refuses_bad_colour_tables() -> None:
    a = u8(3, 4, 5)
    out = torch.empty_like(a)
    with pytest.raises(ValueError, match="at most one contrast op"):
        _core.tf_color([a], [out], np.array([[2, 2, 0, 0]], np.int32), np.ones((1, 4)))
    with pytest.raises(ValueError, match="unknown colour op 9"):
        _core.tf_color([a], [out], np.array([[9, 0, 0, 0]], np.int32), np.ones((1, 4)))
    with pytest.raises(ValueError, match="hue factor 0.7 is not in"):
        _core.tf_color([a], [out], np.array([[4, 0, 0, 0]], np.int32), np.full((1, 4), 0.7))
    four = u8(4, 4, 5)
    with pytest.raises(ValueError, match="the colour ops take 1 or 3 channels"):
        _core.tf_color([four], [torch.empty_like(four)], np.zeros((1, 4), np.int32), np.ones((1, 4)))
