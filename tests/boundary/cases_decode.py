"""Boundary cases of the decode bindings (csrc/bindings/decode.cpp, jpeg_cpu.cpp).

Each entry is one bad call of a binding that writes memory: a destination on
the wrong device, with the wrong strides, too small (and read-only, of the
wrong dtype, ...). Each must raise ValueError or TypeError naming the argument
before any byte moves. The CUDA bindings run their checks before any CUDA call,
so that their cases raise on a machine without a GPU too: device arrays are
host memory described as CUDA memory (boundary.fakes.on_device).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from boundary.fakes import on_device


def _u8(*shape: int) -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.uint8)


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def writers(core: Any) -> dict[str, dict[str, Callable[[], object]]]:
    u8, copy = core.Sample.u8, core.Convert.copy

    def job(src: Any, dst: Any) -> Any:
        # A (1, 4, 4) gray image whose 16 samples are src's bytes, row after row.
        return core.PixelJob(src=src, dst=dst, stride_c=0, stride_y=4, stride_x=1, src_channels=1, sample=u8,
                             convert=copy)

    def pixels_cpu(src: Any, dst: Any) -> Callable[[], object]:
        return lambda: core.img_decode_pixels_cpu([job(src, dst)], threads=1)

    def pixels_cuda(src: Any, dst: Any) -> Callable[[], object]:
        return lambda: core.img_decode_pixels_cuda([job(src, dst)], device=0, stream=0)

    def nvjpeg(data: Any, dst: Any, backend: str = "nvjpeg-hardware-device") -> Callable[[], object]:
        return lambda: core.nvjpeg_decode_batch(0, backend, "rgb", [(data, dst)], 0)

    def jpeg(data: Any, out: Any) -> Callable[[], object]:
        return lambda: core.jpeg_cpu_decode(data, 0, 0, out, True)

    def jpeg_many(data: Any, out: Any) -> Callable[[], object]:
        # The first job is fine: the second one's arrays must be refused before either is decoded.
        ok = (np.zeros(16, np.uint8), 0, 0, np.zeros((4, 4, 3), np.uint8), 4, 4)
        return lambda: core.jpeg_cpu_decode_many([ok, (data, 0, 0, out, 4, 4)], threads=1)

    gpu_src, gpu_dst = on_device(_u8(16)), on_device(_u8(1, 4, 4))
    bits = np.zeros(16, np.uint8)
    return {
        "img_decode_pixels_cpu": {
            "wrong device": pixels_cpu(on_device(_u8(16)), on_device(_u8(1, 4, 4))),
            "mixed devices": pixels_cpu(_u8(16), on_device(_u8(1, 4, 4))),
            "wrong stride": pixels_cpu(_u8(16), _u8(1, 4, 8)[:, :, ::2]),
            "too small": pixels_cpu(_u8(15), _u8(1, 4, 4)),
            "offset past the source": lambda: core.PixelJob(src=_u8(16), dst=_u8(1, 4, 4), offset=17, stride_c=0,
                                                            stride_y=4, stride_x=1, src_channels=1, sample=u8,
                                                            convert=copy),
            "read-only": pixels_cpu(_u8(16), _read_only(np.zeros((1, 4, 4), np.uint8))),
            "wrong dtype": pixels_cpu(_u8(16), torch.zeros((1, 4, 4), dtype=torch.int32)),
            "wrong source dtype": pixels_cpu(torch.zeros(16, dtype=torch.float32), _u8(1, 4, 4)),
            "wrong shape": pixels_cpu(_u8(16), _u8(4, 4)),
            "not an array": pixels_cpu(16, _u8(1, 4, 4)),
        },
        "img_decode_pixels_cuda": {
            "wrong device": pixels_cuda(_u8(16), _u8(1, 4, 4)),
            "another device": pixels_cuda(on_device(_u8(16), 1), on_device(_u8(1, 4, 4), 1)),
            "mixed devices": pixels_cuda(_u8(16), gpu_dst),
            "wrong stride": pixels_cuda(gpu_src, on_device(_u8(1, 4, 8)[:, :, ::2])),
            "too small": pixels_cuda(on_device(_u8(15)), gpu_dst),
            "wrong dtype": pixels_cuda(gpu_src, on_device(torch.zeros((1, 4, 4), dtype=torch.int32))),
        },
        "nvjpeg_decode_batch": {
            "wrong device": nvjpeg(on_device(_u8(16)), _u8(3, 4, 4)),
            "another device": nvjpeg(on_device(_u8(16)), on_device(_u8(3, 4, 4), 1)),
            "bitstream on the host": nvjpeg(_u8(16), on_device(_u8(3, 4, 4))),
            "bitstream on the device for nvjpeg-host": nvjpeg(on_device(_u8(16)), on_device(_u8(3, 4, 4)),
                                                              "nvjpeg-host"),
            "wrong stride": nvjpeg(on_device(_u8(16)), on_device(_u8(3, 4, 8)[:, :, ::2])),
            "too small": nvjpeg(on_device(_u8(16)), on_device(_u8(1, 4, 4))),
            "empty bitstream": nvjpeg(on_device(_u8(0)), on_device(_u8(3, 4, 4))),
            "wrong dtype": nvjpeg(on_device(_u8(16)), on_device(torch.zeros((3, 4, 4), dtype=torch.float32))),
            "not a pair": lambda: core.nvjpeg_decode_batch(0, "nvjpeg-hardware-device", "rgb",
                                                           [(on_device(_u8(16)),)], 0),
        },
        "jpeg_cpu_decode": {
            "wrong device": jpeg(bits, on_device(_u8(4, 4, 3))),
            "bitstream on the device": jpeg(on_device(_u8(16)), np.zeros((4, 4, 3), np.uint8)),
            "wrong stride": jpeg(bits, np.zeros((4, 8, 3), np.uint8)[:, ::2]),
            "planar": jpeg(bits, np.zeros((3, 4, 4), np.uint8).transpose(1, 2, 0)),
            "overlapping rows": jpeg(bits, np.lib.stride_tricks.as_strided(np.zeros(48, np.uint8), (4, 4, 3),
                                                                            (6, 3, 1))),
            "too small": jpeg(bits, np.zeros((0, 4, 3), np.uint8)),
            "read-only": jpeg(bits, _read_only(np.zeros((4, 4, 3), np.uint8))),
            "wrong dtype": jpeg(bits, np.zeros((4, 4, 3), np.float32)),
            "wrong channels": jpeg(bits, np.zeros((4, 4, 2), np.uint8)),
        },
        "jpeg_cpu_decode_many": {
            "wrong device": jpeg_many(bits, on_device(_u8(4, 4, 3))),
            "wrong stride": jpeg_many(bits, np.zeros((4, 8, 3), np.uint8)[:, ::2]),
            "too small": jpeg_many(bits, np.zeros((4, 0, 3), np.uint8)),
            "read-only": jpeg_many(bits, _read_only(np.zeros((4, 4, 3), np.uint8))),
            "wrong dtype": jpeg_many(bits, np.zeros((4, 4, 3), np.int32)),
            "not a job": lambda: core.jpeg_cpu_decode_many([(bits, 0, 0)], threads=1),
        },
    }
