"""What crosses into the extension (image/core_types.py): the core checks
every pixel job it is given, and each enum value mirrored by hand means to
the core what gdsio.image means by it."""

from __future__ import annotations

import numpy as np
import pytest
from image_helpers import rand
from PIL import Image

import gdsio
from gdsio import _core
from gdsio.image import core_types
from gdsio.image.layout import planar_layout


def test_core_validates_pixel_jobs():
    src = np.zeros(16, np.uint8)
    dst = np.zeros((1, 4, 4), np.uint8)
    ok = dict(src=src, dst=dst, stride_c=0, stride_y=4, stride_x=1, src_channels=1, sample=_core.Sample.u8,
              convert=_core.Convert.copy, maxval=0)
    _core.img_decode_pixels_cpu([_core.PixelJob(**ok)], threads=1)

    # What the job reads and writes, checked when it is decoded (the message names the job).
    cases = [
        (dict(src=src[:15]), r"jobs\[0\]: the samples reach byte 16 but the source holds 15"),
        (dict(offset=1), "the samples reach byte 16 but the source holds 15"),
        (dict(stride_y=5), "the samples reach byte 19"),
        (dict(convert=_core.Convert.luma), "luma conversion needs >= 3 source channels"),
        (dict(dst=np.zeros((2, 4, 4), np.uint8)), "copy conversion needs dst_channels <= src_channels"),
        (dict(sample=_core.Sample.u16le), "cannot be written as output type"),
        (dict(maxval=300), "maxval 300 exceeds the output range 255"),
        (dict(stride_x=-1), "bad strides"),
    ]
    for changes, match in cases:
        with pytest.raises(ValueError, match=match):
            _core.img_decode_pixels_cpu([_core.PixelJob(**{**ok, **changes})], threads=1)
    # The arrays themselves, checked when the job is made (the message names the argument).
    ro = np.zeros((1, 4, 4), np.uint8)
    ro.flags.writeable = False
    bad_arrays = [
        (dict(src=0), TypeError, "src: expected an array"),
        (dict(dst=0), TypeError, "dst: expected an array"),
        (dict(dst=ro), ValueError, "dst: is read-only"),
        (dict(dst=np.zeros((4, 4), np.uint8)), ValueError, "dst: has 2 dimensions"),
        (dict(dst=np.zeros((1, 4, 8), np.uint8)[:, :, ::2]), ValueError, "dst: has strides"),
        (dict(dst=np.zeros((1, 4, 4), np.int32)), ValueError, "dst: has dtype int32"),
        (dict(dst=np.zeros((1, 0, 4), np.uint8)), ValueError, r"dst: has shape \(1, 0, 4\), an image of no pixels"),
        (dict(src=src.view(np.uint16)), ValueError, "src: has dtype uint16"),
        (dict(offset=17), ValueError, "offset: 17 is past the end of src"),
    ]
    for changes, kind, match in bad_arrays:
        with pytest.raises(kind, match=match):
            _core.PixelJob(**{**ok, **changes})
    # The enums are bound: a number is not a sample type, nor a tuple a job.
    with pytest.raises(TypeError):
        _core.PixelJob(**{**ok, "sample": 9})
    with pytest.raises(TypeError):
        _core.img_decode_pixels_cpu([tuple(range(14))], threads=1)
    job = _core.PixelJob(**ok)
    assert (job.src is src, job.dst is dst, job.src_bytes, job.height, job.dst_channels, job.sample, job.out,
            job.maxval) == (True, True, 16, 4, 1, _core.Sample.u8, _core.OutType.uint8, 0)


# Each enum member against what the core does with it.
SAMPLES = {"u8": "|u1", "u16le": "<u2", "u16be": ">u2", "f32le": "<f4", "f32be": ">f4"}


@pytest.mark.parametrize("sample", list(core_types.SAMPLE))
def test_sample_values_mean_what_the_core_reads(sample):
    a = rand((3, 4, 5), np.dtype(SAMPLES[sample]).newbyteorder("="))
    src = np.ascontiguousarray(a).astype(SAMPLES[sample])  # (C, H, W) planes, stored as the sample says
    dtype = {"u8": "uint8", "u16": "uint16", "f32": "float32"}[sample.rstrip("lbe") if sample != "u8" else "u8"]
    lay = planar_layout(0, 3, 4, 5, sample, dtype)
    assert lay.nbytes == src.nbytes and core_types.SAMPLE_BYTES[sample] == src.itemsize
    out = np.zeros((3, 4, 5), dtype)
    _core.img_decode_pixels_cpu([core_types.pixel_job(lay, src.view(np.uint8), out, "copy")], threads=1)
    np.testing.assert_array_equal(out, a.astype(dtype))


@pytest.mark.parametrize("convert, channels", [("copy", 3), ("replicate", 3), ("luma", 1)])
def test_convert_values_mean_what_the_core_does(convert, channels):
    a = rand((3, 4, 5))
    out = np.zeros((channels, 4, 5), np.uint8)
    job = core_types.pixel_job(planar_layout(0, 3, 4, 5, "u8", "uint8"), a, out, convert)
    _core.img_decode_pixels_cpu([job], threads=1)
    expect = {"copy": a, "replicate": np.repeat(a[:1], 3, 0),
              "luma": np.array(Image.fromarray(a.transpose(1, 2, 0)).convert("L"))[None]}[convert]
    np.testing.assert_array_equal(out, expect)
    assert set(core_types.CONVERT) == {"copy", "replicate", "luma"} and set(core_types.OUT) == {"uint8", "uint16", "float32"}
    assert (core_types.NVJPEG_HARDWARE, core_types.NVJPEG_HYBRID, core_types.NVJPEG_HOST) == _core.jpeg_backends


def test_nvjpeg_names_are_the_ones_the_core_takes():
    # Without CUDA the core names the backend it cannot run; an unknown name is a ValueError first.
    for b in (core_types.NVJPEG_HARDWARE, core_types.NVJPEG_HYBRID, core_types.NVJPEG_HOST):
        for output in core_types.JPEG_OUTPUTS:
            try:
                _core.nvjpeg_decode_batch(0, b, output, [], 0)
            except ValueError as e:
                pytest.fail(f"the core refuses ({b}, {output}): {e}")
            except (RuntimeError, gdsio.BackendUnavailable):
                pass
    with pytest.raises(ValueError, match="output must be 'rgb' or 'y'"):
        _core.nvjpeg_decode_batch(0, core_types.NVJPEG_HOST, "bgr", [], 0)
