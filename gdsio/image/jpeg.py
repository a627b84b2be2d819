"""JPEG: nvJPEG on the GPU (device-bitstream backends first), Pillow on the CPU.

Which backend takes an image, best first:

- ``nvjpeg-hardware-device``: the GPU's JPEG engines (A100, H100, H200...),
  bitstream read from device memory: baseline, single scan, gray or YCbCr
  4:4:4 / 4:2:2 / 4:2:0 / 4:4:0 (and nvJPEG's own check says yes).
- ``nvjpeg-gpu-hybrid-device``: Huffman decode in CUDA, bitstream in device
  memory: the same images, without restart intervals.
- ``nvjpeg-host``: nvJPEG with the bitstream in host memory (copied there when
  it was on the GPU): baseline or extended (SOF1) images the above refuse.
- ``pillow``: libjpeg-turbo on the CPU, then a copy to the GPU: progressive,
  arithmetic, lossless, 12-bit, CMYK/YCCK, RGB-coded, 4:1:1 / 4:1:0 or
  unusual subsampling, data without an EOI marker, images nvJPEG rejected,
  and every JPEG when nvJPEG is missing or the target is the CPU.

Every decoded image says which ran and why a better one did not
(``DecodeInfo.backend`` / ``.reason``). Chroma is upsampled as libjpeg does
("fancy") where the nvJPEG in use offers it (12.1 and later); each backend's
``fancy_upsampling`` in nvjpeg_backends() says what it did on a probe image.
"""

from __future__ import annotations

import concurrent.futures
import functools
import io
from typing import Any, Callable, Sequence

from .. import _core
from .._libs import load_nvidia_lib
from .headers import JpegHeader

HARDWARE = "nvjpeg-hardware-device"
HYBRID = "nvjpeg-gpu-hybrid-device"
HOST = "nvjpeg-host"
PILLOW = "pillow"
BACKENDS = (HARDWARE, HYBRID, HOST, PILLOW)

# Images per nvjpegDecodeBatched call.
BATCH = 256


@functools.lru_cache(maxsize=None)
def _loaded() -> dict[str, Any]:
    # libnvjpeg.so.13, then .so.12, when the loader looks on its own path.
    return load_nvidia_lib("nvjpeg", _core.nvjpeg_load, "nvjpeg")


def nvjpeg_status() -> dict[str, Any]:
    """Loads libnvjpeg (once) and says from where, its version, or why not.

    ``version`` is nvjpegGetProperty's, ``cudart_version`` the CUDA runtime
    the library was built for (nvjpegGetCudartProperty; None when it does not say).

    >>> gdsio.image.nvjpeg_status()
    {'loaded': True, 'library': '.../nvidia/cu13/lib/libnvjpeg.so.13', 'version': (13, 0, 4), 'cudart_version': (13, 0, 88), 'reason': ''}
    """
    return dict(_loaded())


@functools.lru_cache(maxsize=None)
def _probe(device: int) -> dict[str, Any]:
    from ._upsampling import measure

    info = _core.nvjpeg_probe(device)
    for name, b in info["backends"].items():
        # What the backend does, from its decode of a probe image: it may take the flag and ignore it.
        b["fancy_upsampling"] = measure(device, name) if b["usable"] else False
    return info


def nvjpeg_backends(device: int = 0) -> dict[str, Any]:
    """Which nvJPEG backends work on cuda:`device`, why the others do not, and
    whether each upsamples chroma as libjpeg does (``fancy_upsampling``:
    measured on a probe image, None when the probe would not decode;
    ``fancy_upsampling_flag``: nvjpegCreateEx took the flag that asks for it).

    >>> gdsio.image.nvjpeg_backends(0)["backends"]["nvjpeg-hardware-device"]
    {'usable': True, 'reason': '', 'fancy_upsampling_flag': True, 'fancy_upsampling': True}
    """
    st = _loaded()
    if not st["loaded"]:
        off = {"usable": False, "reason": st["reason"], "fancy_upsampling_flag": False, "fancy_upsampling": False}
        return {"backends": {b: dict(off) for b in (HARDWARE, HYBRID, HOST)}, "hardware_engines": 0, "hardware_cores": 0}
    return _probe(device)


def pillow_refusal(h: JpegHeader) -> str | None:
    """Why no nvJPEG backend takes this image (so Pillow decodes it), or None."""
    if h.coding not in ("baseline", "extended"):
        return f"{h.coding} JPEG"
    if h.precision != 8:
        return f"{h.precision}-bit JPEG"
    if h.color not in ("gray", "ycbcr"):
        return f"{h.color.upper()}-coded JPEG"
    if h.subsampling not in ("gray", "444", "422", "420", "440"):
        sub = h.subsampling if h.subsampling == "other" else f"{h.subsampling[0]}:{h.subsampling[1]}:{h.subsampling[2]}"
        return f"chroma subsampling {sub}"
    if not h.has_eoi:
        return "no EOI marker at the end of the data (truncated, or trailing bytes)"
    return None


def _device_refusal(h: JpegHeader, backend: str) -> str | None:
    if h.coding != "baseline":
        return "not baseline (extended sequential, SOF1)"
    if not h.interleaved:
        return "several scans (non-interleaved baseline)"
    if backend == HYBRID and h.restart_interval:
        return "restart intervals"
    return None


def route(h: JpegHeader, backends: dict[str, Any]) -> tuple[str, str]:
    """(backend, reason a better one was skipped) for one image going to the GPU."""
    why = pillow_refusal(h)
    if why:
        return PILLOW, why
    return _first_taker(h, backends, (HARDWARE, HYBRID, HOST))


def next_backend(after: str, h: JpegHeader, backends: dict[str, Any]) -> tuple[str, str]:
    """The backend to try once `after` has refused or failed an image (the
    ladder hardware -> hybrid -> host -> Pillow), and why the ones between
    were skipped."""
    order = (HARDWARE, HYBRID, HOST)
    return _first_taker(h, backends, order[order.index(after) + 1 :] if after in order else ())


def _first_taker(h: JpegHeader, backends: dict[str, Any], candidates: Sequence[str]) -> tuple[str, str]:
    skipped = []
    for b in candidates:
        st = backends["backends"][b]
        if not st["usable"]:
            skipped.append(f"{b}: {st['reason']}")
            continue
        if b != HOST:
            refusal = _device_refusal(h, b)
            if refusal:
                skipped.append(f"{b}: {refusal}")
                continue
        return b, "; ".join(skipped)
    return PILLOW, "; ".join(skipped)


# --------------------------------------------------------------------------- Pillow


def pillow_decode(data: bytes, mode: str) -> Any:
    """A CPU uint8 (C,H,W) tensor decoded by Pillow (libjpeg-turbo): UNCHANGED
    keeps L, RGB or CMYK; RGB converts; GRAY is the luma of the RGB image, as
    convert("L"). ValueError when Pillow cannot decode it; BackendUnavailable
    when Pillow is not installed (whatever on_error says)."""
    import numpy as np
    import torch

    try:
        from PIL import Image
    except ImportError:
        from ..io import BackendUnavailable

        raise BackendUnavailable(
            "Pillow is needed to decode this JPEG on the CPU and is not installed (it is a dependency of gdsio): pip install pillow"
        ) from None
    try:
        with Image.open(io.BytesIO(data), formats=["JPEG"]) as f:
            f.load()
            im: Image.Image = f
            if mode == "RGB" and im.mode != "RGB":
                im = im.convert("RGB")
            elif mode == "GRAY" and im.mode != "L":
                im = (im if im.mode == "RGB" else im.convert("RGB")).convert("L")
            elif mode == "UNCHANGED" and im.mode not in ("L", "RGB", "CMYK"):
                im = im.convert("RGB")
            arr = np.array(im, dtype=np.uint8)
    except Image.DecompressionBombError as e:
        raise ValueError(f"Pillow refused it as a decompression bomb: {e}") from None
    except Exception as e:  # OSError, SyntaxError... or whatever a corrupt marker makes Pillow raise
        raise ValueError(f"Pillow cannot decode it: {str(e) or type(e).__name__}") from None
    if arr.ndim == 2:
        arr = arr[:, :, None]
    return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))


def pillow_decode_many(blobs: Sequence[bytes], mode: str, threads: int) -> list[Any]:
    """Pillow over several threads (it releases the GIL while decoding); each
    entry is a tensor or the ValueError raised for that image."""

    def one(b: bytes) -> Any:
        try:
            return pillow_decode(b, mode)
        except ValueError as e:
            return e

    if len(blobs) <= 1 or threads <= 1:
        return [one(b) for b in blobs]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(threads, len(blobs)), thread_name_prefix="gdsio-jpeg") as ex:
        return list(ex.map(one, blobs))


# --------------------------------------------------------------------------- nvJPEG


def nvjpeg_run(
    device: int,
    backend: str,
    output: str,
    jobs: Sequence[tuple[int, int, int, int, int]],
    stream: int,
    on_fail: Callable[[int, str], None],
) -> None:
    """Decodes [(data_ptr, length, dst_ptr, height, width)] with one backend
    in batches; a batch nvJPEG rejects or fails is retried image by image, and
    an image it rejects or fails alone is reported through on_fail(job index,
    why), so the caller can hand it to the next backend. nvJPEG's own failures
    (NvjpegError: execution or internal errors, which the engines return on
    some corrupt data) count as failures of the images too. A backend that
    cannot start at all (BackendUnavailable) fails the whole chunk at once,
    without retries; a CUDA error around the decode (a sticky error an earlier
    kernel left) is no image's fault and goes to the caller."""
    from ..io import BackendUnavailable

    for first in range(0, len(jobs), BATCH):
        chunk = list(jobs[first : first + BATCH])
        try:
            _core.nvjpeg_decode_batch(device, backend, output, chunk, stream)
            continue
        except BackendUnavailable as e:
            for k in range(len(chunk)):
                on_fail(first + k, str(e))
            continue
        except (ValueError, _core.NvjpegError) as e:
            if len(chunk) == 1:
                on_fail(first, str(e))
                continue
        for k, j in enumerate(chunk):
            try:
                _core.nvjpeg_decode_batch(device, backend, output, [j], stream)
            except (ValueError, _core.NvjpegError) as e:
                on_fail(first + k, str(e))


def hardware_check(device: int, prefixes: Sequence[bytes]) -> list[int]:
    """nvJPEG's own verdict per header (1 takes, 0 refuses, -1 unknown)."""
    try:
        return list(_core.nvjpeg_hardware_supported(device, list(prefixes)))
    except (ValueError, RuntimeError):
        return [-1] * len(prefixes)
