"""What gdsio.image hands the extension's image functions.

The pixel-job struct and its enums are bound (``_core.PixelJob``,
``_core.Sample``, ``_core.OutType``, ``_core.Convert``): jobs are built by
field name and enum member, so the two sides cannot drift. The nvJPEG
backend names are the core's own (``jpeg_backend_name``); the two nvJPEG
output names are checked by the core.
"""

from __future__ import annotations

from typing import Any

from .. import _core
from .layout import SAMPLE_BYTES, PixelLayout  # SAMPLE_BYTES lives with the layouts; it is exported here too

__all__ = [
    "CONVERT",
    "JPEG_OUTPUTS",
    "NVJPEG_HARDWARE",
    "NVJPEG_HOST",
    "NVJPEG_HYBRID",
    "OUT",
    "SAMPLE",
    "SAMPLE_BYTES",
    "pixel_job",
]

# The bound enums' members by name (layouts name samples "u8", "u16le", ...;
# dtypes "uint8", ...; conversions "copy", "replicate", "luma").
SAMPLE = dict(_core.Sample.__members__)
OUT = dict(_core.OutType.__members__)
CONVERT = dict(_core.Convert.__members__)

# csrc/image/nvjpeg_shim.hpp, enum class JpegBackend, by jpeg_backend_name():
# the names nvjpeg_decode_batch takes, and DecodeInfo.backend reports.
NVJPEG_HARDWARE, NVJPEG_HYBRID, NVJPEG_HOST = _core.jpeg_backends  # kHardwareDevice, kGpuHybridDevice, kHost
# csrc/image/nvjpeg_shim.hpp, enum class JpegOutput, by the names
# csrc/bindings/decode.cpp parses: planar RGB into (3, H, W), Y into (1, H, W).
JPEG_OUTPUTS = {"y": 1, "rgb": 3}


def pixel_job(lay: PixelLayout, src: Any, dst: Any, convert: str) -> Any:
    """A ``_core.PixelJob`` for one image: ``src`` the image's data (a dense
    uint8 array from its first byte, not its first sample), ``dst`` its
    contiguous (C, H, W) output of ``lay.dtype``, on src's device (the core
    takes the output's size and type from it)."""
    return _core.PixelJob(
        src=src, dst=dst, offset=lay.offset, stride_c=lay.stride_c, stride_y=lay.stride_y, stride_x=lay.stride_x,
        src_channels=lay.channels, sample=SAMPLE[lay.sample], convert=CONVERT[convert], maxval=lay.maxval,
    )
