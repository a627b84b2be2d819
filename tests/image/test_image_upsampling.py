"""The chroma-upsampling probe behind nvjpeg_backends()'s ``fancy_upsampling``
(gdsio/image/_upsampling.py): each backend's value is what it did on this
image, not whether nvjpegCreateEx took the flag. Here, on the CPU: the probe
tells libjpeg's interpolated upsampling (Pillow) from replicated chroma (a
real half-size decode, replicated); on the GPU, test_image_gpu checks each
backend's measured value against Pillow."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

import gdsio.image as gi
from gdsio.image import upsampling as U
from gdsio.image.formats import jpeg as H


def test_the_probe_is_420_baseline_with_flat_luma():
    data = U.probe_jpeg()
    h = H.parse_jpeg(data, len(data))
    assert (h.coding, h.subsampling, h.color, h.width, h.height) == ("baseline", "420", "ycbcr", 32, 32)
    with Image.open(io.BytesIO(data)) as im:
        im.draft("YCbCr", im.size)
        y = np.asarray(im.convert("YCbCr"))[..., 0]
    assert int(y.max()) - int(y.min()) <= 1


def test_libjpeg_fancy_upsampling_reads_as_interpolated():
    # gdsio's CPU path decodes JPEG with Pillow (libjpeg-turbo, fancy upsampling on).
    img = gi.decode(U.probe_jpeg(), mode="RGB")
    assert U.upsampling_of(img) == "interpolated"
    assert U.upsampling_of(img.numpy()) == "interpolated"


def test_replicated_chroma_reads_as_nearest():
    # libjpeg decodes at half size without upsampling chroma (DCT scaling);
    # replicating each pixel 2x2 is what nearest-neighbour chroma gives.
    with Image.open(io.BytesIO(U.probe_jpeg())) as im:
        im.draft("RGB", (16, 16))
        half = np.asarray(im.convert("RGB"))
    assert half.shape == (16, 16, 3)
    nearest = half.repeat(2, axis=0).repeat(2, axis=1).transpose(2, 0, 1)
    assert U.upsampling_of(torch.from_numpy(np.ascontiguousarray(nearest))) == "nearest"
    # One pixel changed inside one block is enough to read as interpolated.
    nearest = nearest.copy()
    nearest[2, 31, 31] ^= 1
    assert U.upsampling_of(nearest) == "interpolated"


def test_upsampling_of_names_the_shape_it_wants():
    with pytest.raises(ValueError, match=r"rgb: expected the probe's \(3, 32, 32\) pixels, got shape \(3, 16, 16\)"):
        U.upsampling_of(np.zeros((3, 16, 16), np.uint8))
