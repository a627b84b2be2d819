"""The PIL-image side of gdsio.transforms: as torchvision.transforms.v2.functional
does, a PIL image given to a functional op is handled by Pillow and a PIL
image comes back. Arguments arrive parsed and checked (gdsio/transforms.py)."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageEnhance, ImageOps

__all__ = [
    "PIL_FILTERS",
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "crop",
    "hflip",
    "pad",
    "resize",
    "vflip",
]

# torchvision's pil_modes_mapping: the interpolation names as Pillow's filters.
PIL_FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "nearest-exact": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "box": Image.Resampling.BOX,
    "hamming": Image.Resampling.HAMMING,
    "lanczos": Image.Resampling.LANCZOS,
}


def resize(img: Image.Image, out_h: int, out_w: int, mode: str) -> Image.Image:
    if (out_h, out_w) == (img.height, img.width):
        return img  # torchvision returns the image itself
    return img.resize((out_w, out_h), resample=PIL_FILTERS[mode])


def hflip(img: Image.Image) -> Image.Image:
    return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)


def vflip(img: Image.Image) -> Image.Image:
    return img.transpose(Image.Transpose.FLIP_TOP_BOTTOM)


def crop(img: Image.Image, top: int, left: int, height: int, width: int) -> Image.Image:
    """Pillow fills what lies outside the image with zeros, as torchvision's tensor crop does."""
    return img.crop((left, top, left + width, top + height))


def _channels(img: Image.Image) -> int:
    return len(img.getbands())


def pad(img: Image.Image, ltrb: list[int], fill: list[float], padding_mode: str) -> Image.Image:
    """ltrb: (left, top, right, bottom), negative crops; fill: 1 or one value per band."""
    left, top, right, bottom = ltrb
    if any(p < 0 for p in ltrb):  # negative padding crops first, in every mode
        img = img.crop((max(-left, 0), max(-top, 0), img.width - max(-right, 0), img.height - max(-bottom, 0)))
        left, top, right, bottom = (max(p, 0) for p in ltrb)
    if padding_mode == "constant":
        c = _channels(img)
        values = fill * c if len(fill) == 1 else fill
        color: float | tuple[float, ...]
        if img.mode == "F":
            color = values[0] if c == 1 else tuple(values)
        else:
            color = int(values[0]) if c == 1 else tuple(int(v) for v in values)
        out = ImageOps.expand(img, border=(left, top, right, bottom), fill=color)
        if img.mode == "P":
            out.putpalette(img.getpalette())
        return out
    np_mode = {"edge": "edge", "reflect": "reflect", "symmetric": "symmetric"}[padding_mode]
    a = np.asarray(img)
    widths = [(top, bottom), (left, right)] + ([(0, 0)] if a.ndim == 3 else [])
    out = Image.fromarray(np.pad(a, widths, mode=np_mode))  # the mode follows the array, as torchvision
    if img.mode == "P":
        out.putpalette(img.getpalette())
    return out


def adjust_brightness(img: Image.Image, factor: float) -> Image.Image:
    return ImageEnhance.Brightness(img).enhance(factor)


def adjust_contrast(img: Image.Image, factor: float) -> Image.Image:
    return ImageEnhance.Contrast(img).enhance(factor)


def adjust_saturation(img: Image.Image, factor: float) -> Image.Image:
    return ImageEnhance.Color(img).enhance(factor)


def adjust_hue(img: Image.Image, factor: float) -> Image.Image:
    """torchvision's PIL hue: the H band of Pillow's HSV shifted by int(factor * 255), wrapping."""
    if img.mode in ("L", "1", "I", "F"):
        return img
    h, s, v = img.convert("HSV").split()
    shifted = (np.asarray(h).astype(np.int64) + int(factor * 255)) % 256
    h = Image.fromarray(shifted.astype(np.uint8))  # 2-D uint8: mode "L"
    return Image.merge("HSV", (h, s, v)).convert(img.mode)
