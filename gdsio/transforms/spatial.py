"""crop, center_crop, hflip and vflip of gdsio.transforms (torchvision v2's):
crops are views where the box is inside the image, zero-padded where it is
not; the flips are torch.flip's, into a new tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import pil
from .base import check_spatial, elem_size_of, size_pair
from .base import is_int as _is_int
from .base import is_pil as _is_pil
from .pad import pad

__all__ = ["center_crop", "crop", "hflip", "vflip"]


def crop(img: Any, top: int, left: int, height: int, width: int) -> Any:
    """torchvision v2's crop: the (..., height, width) window at (top, left).
    Inside the image it is a view (no copy); where the box reaches outside,
    the outside is zeros (as torchvision pads it).

    Args:
        img: a (..., H, W) tensor of any dtype, or a PIL image (Pillow's crop).
        top, left: the box's corner (may be negative).
        height, width: the box's size, positive.

    Returns:
        The crop: a view, a new tensor where padded, or a PIL image.

    >>> crop(img, 0, 0, 100, 100).shape
    torch.Size([3, 100, 100])
    >>> crop(img, -10, -10, 20, 20)[..., :10, :].eq(0).all()      # outside: zeros
    tensor(True)
    """
    for name, v in (("top", top), ("left", left), ("height", height), ("width", width)):
        if not _is_int(v):
            raise TypeError(f"crop: {name} must be an int, got {type(v).__name__}")
    if height <= 0 or width <= 0:
        raise ValueError(f"crop: height and width must be positive, got {height}x{width}")
    if _is_pil(img):
        return pil.crop(img, top, left, height, width)
    check_spatial(img, "crop")
    h, w = img.shape[-2:]
    bottom, right = top + height, left + width
    if top >= 0 and left >= 0 and bottom <= h and right <= w:
        return img[..., top:bottom, left:right]
    if bottom <= 0 or right <= 0 or top >= h or left >= w:  # nothing of the image in the box
        return img.new_zeros(img.shape[:-2] + (height, width))
    return pad(img, [-left, -top, right - w, bottom - h], fill=0)


def center_crop(img: Any, output_size: int | Sequence[int]) -> Any:
    """torchvision v2's center_crop: the centred window, zero-padded where the
    output is larger than the image.

    Args:
        img: a (..., H, W) tensor of any dtype, or a PIL image.
        output_size: an int, [size] or [height, width].

    Returns:
        The crop: a view where no padding is needed, or a PIL image.

    >>> center_crop(img, 224).shape
    torch.Size([3, 224, 224])
    """
    ch, cw = size_pair(output_size, "output_size")
    if _is_pil(img):
        h, w = img.height, img.width
    else:
        check_spatial(img, "center_crop")
        h, w = img.shape[-2:]
    if ch > h or cw > w:
        pl = (cw - w) // 2 if cw > w else 0
        pt = (ch - h) // 2 if ch > h else 0
        pr = (cw - w + 1) // 2 if cw > w else 0
        pb = (ch - h + 1) // 2 if ch > h else 0
        img = pad(img, [pl, pt, pr, pb], fill=0)
        h, w = (img.height, img.width) if _is_pil(img) else img.shape[-2:]
        if ch == h and cw == w:
            return img
    top = int(round((h - ch) / 2.0))
    left = int(round((w - cw) / 2.0))
    if _is_pil(img):
        return pil.crop(img, top, left, ch, cw)
    return img[..., top : top + ch, left : left + cw]


def hflip(img: Any) -> Any:
    """torchvision v2's hflip: mirrors (..., H, W) left-right into a new
    contiguous tensor (``torch.flip``; any dtype of 1, 2, 4 or 8 bytes), or a
    PIL image.

    >>> hflip(img)[..., 0].equal(img[..., -1])
    True
    """
    if _is_pil(img):
        return pil.hflip(img)
    check_spatial(img, "hflip")
    elem_size_of(img, "hflip")
    return img.flip(-1).contiguous()


def vflip(img: Any) -> Any:
    """torchvision v2's vflip: mirrors (..., H, W) top-bottom into a new
    contiguous tensor (``torch.flip``; any dtype of 1, 2, 4 or 8 bytes), or a
    PIL image.

    >>> vflip(img)[..., 0, :].equal(img[..., -1, :])
    True
    """
    if _is_pil(img):
        return pil.vflip(img)
    check_spatial(img, "vflip")
    elem_size_of(img, "vflip")
    return img.flip(-2).contiguous()
