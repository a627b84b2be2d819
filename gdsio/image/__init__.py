"""Images into (C,H,W) tensors, on the GPU or the CPU.

Formats: JPEG (nvJPEG on the GPU, with its hardware engines where the GPU has
them and the bitstream read straight from device memory; Pillow on the CPU or
where nvJPEG cannot), binary PNM (P5/P6, 8 and 16 bit), NPY images (uint8,
uint16, float32; HW, HWC or CHW) and raw records (RawFormat). The
uncompressed formats are decoded by gdsio's own CUDA kernels from bytes already
in GPU memory, or by their multithreaded CPU twin. PNG, GIF, BMP (and DIB), TIFF,
WebP (the rest of torchvision's ImageFolder formats) and the other PNM
variants (plain P1/P2/P3, bitmap P4, gray PFM) are decoded by Pillow on
the CPU and uploaded for a GPU (``DecodeInfo.backend == "pillow"``; see
gdsio.image.pillow). The format is told from the first bytes, not the name.

Layout: ``api`` (decode, read) runs the steps of ``batch`` (the contract
gdsio.Loader uses too); each format is a module of ``formats`` with one
``Format`` record (``codec``), listed in one registry; ``nvjpeg`` is the GPU
JPEG ladder, ``jpeg_header`` the JPEG header parser, ``pillow`` the decoder of
Pillow's formats, ``exif`` the orientation, ``layout`` / ``core_types`` what
the uncompressed decoder hands the extension.

>>> import gdsio
>>> img = gdsio.image.read("cat.jpg", device="cuda")          # uint8 (3, H, W)
>>> imgs, infos = gdsio.image.read(paths, mode="RGB", return_info=True)
>>> infos[0].backend                                            # 'nvjpeg-hardware-device'
>>> x = gdsio.image.decode(gdsio.read("depth.pgm", device="cuda"))  # uint16 (1, H, W)

Conventions (torchvision's): uint8 (C,H,W); a 16-bit PNM decodes to uint16
(as read_image keeps 16-bit PNG); mode="RGB" replicates gray, mode="GRAY" is
Pillow's convert("L") luma (torchvision's GRAY on a JPEG takes libjpeg's Y
channel instead, which may differ by 1).
"""

from __future__ import annotations

import atexit

from .. import _core
from .api import decode, read
from .batch import DecodeInfo, ImageReadMode
from .exif import apply_orientation
from .formats.jpeg import JpegHeader
from .formats.npy import NpyHeader
from .formats.pnm import PnmHeader
from .formats.raw import RawFormat
from .nvjpeg import nvjpeg_backends, nvjpeg_status

__all__ = [
    "DecodeInfo",
    "ImageReadMode",
    "JpegHeader",
    "NpyHeader",
    "PnmHeader",
    "RawFormat",
    "apply_orientation",
    "decode",
    "nvjpeg_backends",
    "nvjpeg_status",
    "read",
]


def __dir__() -> list[str]:
    # dir() and tab completion show the API (and the dunders), not what was imported to build it (np, torch, Any).
    return sorted({*__all__, *(n for n in globals() if n.startswith("__") and n.endswith("__"))})


@atexit.register
def _release() -> None:
    # nvJPEG states and handles go back while the CUDA runtime is still up.
    _core.nvjpeg_release()
