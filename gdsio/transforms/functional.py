"""Image transforms named and shaped as ``torchvision.transforms.v2.functional``:
uint8 or float ``(C, H, W)`` tensors, ``(..., C, H, W)`` batches, ``(H, W)``
gray images, lists of images of different sizes, and PIL images.

Resize, the fused crop-resize-flip-normalize, pad and the colour ops run
gdsio's CUDA kernels on the current stream for CUDA tensors and their C++
twins for CPU tensors (``gdsio.settings(threads=...)`` threads); both share
one implementation of the arithmetic, so they give the same bytes. hflip,
vflip, to_dtype and normalize on their own are torch's ops, as torchvision
calls them. PIL
images are handed to Pillow, as torchvision's functional ops do, and a PIL
image comes back.

``resize`` of uint8 tensors follows a reference library exactly, not approximately:

* ``antialias=True`` (the default) is Pillow's ``Image.resize`` (filters
  widened by the downscale factor, pixel centres at +0.5, windows clipped at
  the edges and renormalised, 22-bit fixed point rounded to uint8 between the
  horizontal and the vertical pass); ``"nearest"`` is Pillow's NEAREST.
* ``antialias=False`` (or None, which torchvision reads as False) is OpenCV's
  ``cv2.resize`` with ``INTER_LINEAR`` or ``INTER_NEAREST``; bicubic without
  antialias is torch's ``interpolate``, as torchvision computes it.

Float tensors are resized by ``torch.nn.functional.interpolate`` exactly as
torchvision v2 calls it (its results, not Pillow's). Channels are resampled
independently (as torchvision does). Pillow resizes RGBA images with
premultiplied alpha; gdsio does not.

The colour ops (adjust_brightness, adjust_contrast, adjust_saturation,
adjust_hue, color_jitter) are within 1 of torchvision on uint8 and close to
it on floats; pad and the flips move bytes and equal torchvision's.

>>> import gdsio.transforms as T
>>> small = T.resize(img, [224, 224])                     # == PIL's BILINEAR
>>> batch = T.resize([img_a, img_b], [224, 224])          # (2, C, 224, 224), one launch
>>> boxes = T.random_resized_crop_params([h_a, h_b], [w_a, w_b], generator=0)
>>> x = T.resized_crop_flip_normalize([img_a, img_b], boxes, [True, False], 224,
...                                   mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
>>> jittered = T.adjust_hue(T.adjust_saturation(small, 1.3), 0.05)

The ops live in one module per concept and are gathered here: ``resizing``
(resize, resized_crop), ``spatial`` (crop, center_crop, hflip, vflip),
``convert`` (to_dtype, normalize), ``color``, ``pad``, and ``fused`` (the
training step); ``images`` packs uint8 images for the kernels.
"""

from __future__ import annotations

# FILTERS, MODES and ImageInput were defined here before the split; they stay importable from here.
from .color import adjust_brightness, adjust_contrast, adjust_hue, adjust_saturation, color_jitter
from .convert import normalize, to_dtype
from .fused import random_resized_crop_params, resized_crop_flip_normalize
from .images import ImageInput
from .pad import pad
from .resizing import FILTERS, MODES, resize, resized_crop
from .spatial import center_crop, crop, hflip, vflip

__all__ = [
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "center_crop",
    "color_jitter",
    "crop",
    "hflip",
    "normalize",
    "pad",
    "random_resized_crop_params",
    "resize",
    "resized_crop",
    "resized_crop_flip_normalize",
    "to_dtype",
    "vflip",
]


def __dir__() -> list[str]:
    # dir() and tab completion show the API (and the dunders), not what was imported to build it (np, torch, Any).
    return sorted({*__all__, *(n for n in globals() if n.startswith("__") and n.endswith("__"))})
