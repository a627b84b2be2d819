"""Bad input: every bad file of the corpus is a ValueError naming the
image, the pixel cap holds before anything is allocated, bad arguments name
themselves."""

from __future__ import annotations


import numpy as np
import pytest
import torch
from boundary.fakes import on_device
from image_helpers import CORPUS, pnm_bytes, rand

import gdsio
import gdsio.image as gi
from gdsio import _core


def corpus() -> list:
    # A list, not a generator: pytest 9.1 deprecates other iterables in parametrize.
    rows = (line.split("\t") for line in (CORPUS / "MANIFEST.tsv").read_text().splitlines())
    return [pytest.param(name, expect, id=name) for name, expect in rows]


@pytest.mark.parametrize("name, expect", corpus())
def test_corpus_of_bad_files(name, expect, tmp_path):
    data = (CORPUS / name).read_bytes()
    with pytest.raises(ValueError) as e:
        gi.decode(data, device="cpu")
    assert expect in str(e.value) and str(e.value).startswith("data: ")
    with pytest.raises(ValueError) as e:
        gi.read(CORPUS / name, device="cpu")
    assert expect in str(e.value) and str(CORPUS / name) in str(e.value)


def test_batch_error_names_the_index():
    good = pnm_bytes(rand((3, 3)))
    with pytest.raises(ValueError, match=r"^data\[1\]: PNM header: maxval 0"):
        gi.decode([good, (CORPUS / "pnm_maxval_zero.pgm").read_bytes(), good])


def test_pixel_cap():
    data = pnm_bytes(rand((10, 10)))
    assert gi.decode(data, max_pixels=100).shape == (1, 10, 10)
    with pytest.raises(ValueError, match="10x10 = 100 pixels is more than the cap of 99"):
        gi.decode(data, max_pixels=99)


def test_pixel_rule_from_the_setting():
    with gdsio.settings(max_image_pixels=49), pytest.raises(gdsio.DecompressionBombError, match="twice max_image_pixels"):
        gi.decode(pnm_bytes(rand((10, 10))))


def test_absurd_jpeg_dimensions_allocate_nothing():
    # A 65000 x 65000 header over 100 bytes: refused from the header alone.
    with pytest.raises(gdsio.DecompressionBombError, match="4225000000 pixels is more than twice max_image_pixels"):
        gi.decode((CORPUS / "jpeg_huge.jpg").read_bytes(), device="cpu")


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(mode="BGR"), ValueError, "mode must be 'UNCHANGED', 'RGB' or 'GRAY'"),
        (dict(on_error="ignore"), ValueError, "on_error must be 'raise' or 'skip'"),
        (dict(npy_layout="WHC"), ValueError, "npy_layout must be"),
        (dict(max_pixels=0), ValueError, "max_pixels must be a positive int"),
        (dict(raw={"height": 2}), TypeError, "raw must be a gdsio.image.RawFormat"),
        (dict(device="mps"), ValueError, "device must be 'cpu', 'cuda'"),
        (dict(device="gpu7"), ValueError, "device must be 'cpu', 'cuda'"),
        (dict(on_error="skip"), ValueError, "applies to a list"),
    ],
)


def test_argument_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        gi.decode(pnm_bytes(rand((2, 2))), **kwargs)


def test_data_errors():
    with pytest.raises(ValueError, match="data must be a uint8 tensor, got torch.int32"):
        gi.decode(torch.zeros(4, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"data must be a 1-D tensor of bytes, got shape \(2, 2\)"):
        gi.decode(torch.zeros(2, 2, dtype=torch.uint8))
    with pytest.raises(TypeError, match="data\\[1\\] must be a 1-D uint8 torch tensor"):
        gi.decode([b"P5", 42])
    with pytest.raises(ValueError, match="data must be a 1-D uint8 array"):
        gi.decode(np.zeros((2, 2), np.uint8))
    with pytest.raises(ValueError, match="data: empty data"):
        gi.decode(b"")


def test_gpu_requests_fail_clearly_without_a_gpu():
    from gdsio.platform import nvidia

    if nvidia.cuda_unusable_reason() is None:
        return  # a GPU is here: test_image_gpu.py covers it
    with pytest.raises(gdsio.BackendUnavailable, match="cannot decode on cuda"):
        gi.decode(pnm_bytes(rand((2, 2))), device="cuda")
    with pytest.raises(gdsio.BackendUnavailable):
        gi.read(CORPUS / "empty.bin", device="cuda")
    # Arrays the core takes for device memory (their checks pass): the GPU itself is what is missing.
    src, dst = on_device(torch.zeros(4, dtype=torch.uint8)), on_device(torch.zeros((1, 2, 2), dtype=torch.uint8))
    job = _core.PixelJob(src=src, dst=dst, stride_c=0, stride_y=2, stride_x=1, src_channels=1, sample=_core.Sample.u8,
                         convert=_core.Convert.copy)
    with pytest.raises(gdsio.BackendUnavailable):
        _core.img_decode_pixels_cuda([job], device=0, stream=0)
    rgb = on_device(torch.zeros((3, 2, 2), dtype=torch.uint8))
    with pytest.raises(gdsio.BackendUnavailable):
        _core.nvjpeg_decode_batch(0, "nvjpeg-host", "rgb", [(torch.ones(10, dtype=torch.uint8), rgb)], 0)
