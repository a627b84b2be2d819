"""What gdsio.image hands the extension's image functions, mirrored by hand
from the C++ headers: the one place these copies live.

The bindings take these as ints and strings today (``img_decode_pixels_*``
jobs are 14-int tuples, nvJPEG backends and outputs are names). Until they
bind the structs and enums themselves, a change to one of the C++ enums
below must be made here too; tests/image/test_image_core_types.py checks
what it can from Python (the core's own validation of each value).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # layout.py imports SAMPLE_BYTES from here
    from .layout import PixelLayout

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

# csrc/image/decode.hpp, enum class Sample: how one source sample is stored.
SAMPLE = {"u8": 0, "u16le": 1, "u16be": 2, "f32le": 3, "f32be": 4}
# csrc/image/decode_cpu.cpp, sample_bytes(Sample).
SAMPLE_BYTES = {"u8": 1, "u16le": 2, "u16be": 2, "f32le": 4, "f32be": 4}
# csrc/image/decode.hpp, enum class OutType: the output element type.
OUT = {"uint8": 0, "uint16": 1, "float32": 2}
# csrc/image/decode.hpp, enum class Convert: source channels -> output channels.
CONVERT = {"copy": 0, "replicate": 1, "luma": 2}

# csrc/image/nvjpeg_shim.hpp, enum class JpegBackend, by jpeg_backend_name():
# the names nvjpeg_decode_batch takes, and DecodeInfo.backend reports.
NVJPEG_HARDWARE = "nvjpeg-hardware-device"  # kHardwareDevice
NVJPEG_HYBRID = "nvjpeg-gpu-hybrid-device"  # kGpuHybridDevice
NVJPEG_HOST = "nvjpeg-host"  # kHost
# csrc/image/nvjpeg_shim.hpp, enum class JpegOutput, by the names
# csrc/bindings/decode.cpp parses: planar RGB into (3, H, W), Y into (1, H, W).
JPEG_OUTPUTS = {"y": 1, "rgb": 3}


def pixel_job(lay: PixelLayout, src_ptr: int, src_bytes: int, dst_ptr: int, dst_channels: int, convert: str) -> tuple:
    """csrc/image/decode.hpp's PixelJob as the tuple the bindings take, fields
    in the struct's order. ``src_ptr`` points at the first byte of the data
    (not the first sample)."""
    return (
        src_ptr + lay.offset, src_bytes - lay.offset, dst_ptr, lay.height, lay.width,
        lay.stride_c, lay.stride_y, lay.stride_x, lay.channels, dst_channels,
        SAMPLE[lay.sample], OUT[lay.dtype], CONVERT[convert], lay.maxval,
    )
