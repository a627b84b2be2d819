"""JPEG on the GPU: nvJPEG's backends as a ladder, best first.

Which backend takes an image:

- ``nvjpeg-hardware-device``: the GPU's JPEG engines (A100, H100, H200...),
  bitstream read from device memory: baseline, single scan, gray or YCbCr
  4:4:4 / 4:2:2 / 4:2:0 / 4:4:0 (and nvJPEG's own check says yes).
- ``nvjpeg-gpu-hybrid-device``: Huffman decode in CUDA, bitstream in device
  memory: the same images, without restart intervals.
- ``nvjpeg-host``: nvJPEG with the bitstream in host memory (copied there when
  it was on the GPU): baseline or extended (SOF1) images the above refuse.
- ``pillow`` (the host decoders of formats/jpeg.py), then a copy to the GPU:
  progressive, arithmetic, lossless, 12-bit, CMYK/YCCK, RGB-coded, 4:1:1 /
  4:1:0 or unusual subsampling, data without an EOI marker, images every
  nvJPEG backend rejected or failed, and every JPEG when nvJPEG is missing.

An image a backend rejects or fails goes one rung down, not straight to the
CPU. Every decoded image says which backend ran and why a better one did not
(``DecodeInfo.backend`` / ``.reason``). Chroma is upsampled as libjpeg does
("fancy") where the nvJPEG in use offers it (12.1 and later).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import torch

from .. import _core
from ..errors import BackendUnavailable
from ..platform.nvidia import load_nvidia_lib, status_dict
from . import transfer, upsampling
from .codec import Item, Options
from .core_types import JPEG_OUTPUTS, NVJPEG_HARDWARE, NVJPEG_HOST, NVJPEG_HYBRID, pixel_job
from .layout import planar_layout

__all__ = [
    "BACKENDS",
    "BATCH",
    "HARDWARE",
    "HOST",
    "HYBRID",
    "LADDER",
    "PILLOW",
    "decode",
    "hardware_check",
    "next_backend",
    "nvjpeg_backends",
    "nvjpeg_run",
    "nvjpeg_status",
    "pillow_refusal",
    "route",
]

HARDWARE = NVJPEG_HARDWARE
HYBRID = NVJPEG_HYBRID
HOST = NVJPEG_HOST
# The rung below nvJPEG: the CPU (formats/jpeg.py's host decoders), then an upload.
PILLOW = "pillow"
LADDER = (HARDWARE, HYBRID, HOST)
BACKENDS = (*LADDER, PILLOW)

# Images per nvjpegDecodeBatched call.
BATCH = 256


# --------------------------------------------------------------------------- what is there


@functools.lru_cache(maxsize=None)
def _loaded() -> dict[str, Any]:
    # libnvjpeg.so.13, then .so.12, when the loader looks on its own path.
    return load_nvidia_lib("nvjpeg", lambda path: status_dict(_core.nvjpeg_load(path)), "nvjpeg")


def nvjpeg_status() -> dict[str, Any]:
    """Loads libnvjpeg (once) and says from where, its version, or why not.

    Returns:
        dict: ``loaded`` (bool), ``library`` (the path), ``version`` (a tuple,
        nvjpegGetProperty's), ``cudart_version`` (the CUDA runtime the library
        was built for, nvjpegGetCudartProperty; None when it does not say),
        ``reason`` (why it did not load; "" when it did).

    Example:
        >>> gdsio.image.nvjpeg_status()
        {'loaded': True, 'library': '.../nvidia/cu13/lib/libnvjpeg.so.13', 'version': (13, 0, 4), 'cudart_version': (13, 0, 88), 'reason': ''}
    """
    return dict(_loaded())


@functools.lru_cache(maxsize=None)
def _probe(device: int) -> dict[str, Any]:
    probe = _core.nvjpeg_probe(device)
    backends = {}
    for name, b in zip(_core.jpeg_backends, probe.backends):
        backends[name] = {"usable": b.usable, "reason": b.reason, "fancy_upsampling_flag": b.fancy_upsampling_flag,
                          # What the backend does, from its decode of a probe image: it may take the flag and ignore it.
                          "fancy_upsampling": upsampling.measure(device, name) if b.usable else False}
    return {"backends": backends, "hardware_engines": probe.hardware_engines, "hardware_cores": probe.hardware_cores}


def nvjpeg_backends(device: int = 0) -> dict[str, Any]:
    """Which nvJPEG backends work on a GPU, and why the others do not.

    Args:
        device: the CUDA device index.

    Returns:
        dict: ``backends`` maps each of nvjpeg-hardware-device,
        nvjpeg-gpu-hybrid-device and nvjpeg-host to ``usable``, ``reason``,
        ``fancy_upsampling`` (chroma upsampled as libjpeg does, measured on a
        probe image; None when the probe would not decode) and
        ``fancy_upsampling_flag`` (nvjpegCreateEx took the flag that asks for it);
        ``hardware_engines`` and ``hardware_cores`` (0 when unknown).

    Example:
        >>> gdsio.image.nvjpeg_backends(0)["backends"]["nvjpeg-hardware-device"]
        {'usable': True, 'reason': '', 'fancy_upsampling_flag': True, 'fancy_upsampling': True}
    """
    st = _loaded()
    if not st["loaded"]:
        off = {"usable": False, "reason": st["reason"], "fancy_upsampling_flag": False, "fancy_upsampling": False}
        return {"backends": {b: dict(off) for b in LADDER}, "hardware_engines": 0, "hardware_cores": 0}
    return _probe(device)


# --------------------------------------------------------------------------- which rung takes an image


def pillow_refusal(h: Any) -> str | None:
    """Why no nvJPEG backend takes this image (so the CPU decodes it), or None."""
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


def _device_refusal(h: Any, backend: str) -> str | None:
    if h.coding != "baseline":
        return "not baseline (extended sequential, SOF1)"
    if not h.interleaved:
        return "several scans (non-interleaved baseline)"
    if backend == HYBRID and h.restart_interval:
        return "restart intervals"
    return None


def route(h: Any, backends: dict[str, Any]) -> tuple[str, str]:
    """(backend, reason a better one was skipped) for one image going to the GPU."""
    why = pillow_refusal(h)
    if why:
        return PILLOW, why
    return _first_taker(h, backends, LADDER)


def next_backend(after: str, h: Any, backends: dict[str, Any]) -> tuple[str, str]:
    """The backend to try once `after` has refused or failed an image (the
    ladder hardware -> hybrid -> host -> Pillow), and why the ones between
    were skipped."""
    return _first_taker(h, backends, LADDER[LADDER.index(after) + 1 :] if after in LADDER else ())


def _first_taker(h: Any, backends: dict[str, Any], candidates: Sequence[str]) -> tuple[str, str]:
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


def _fall(it: Item, after: str, why: str, backends: dict[str, Any]) -> None:
    """`after` refused or failed the image: the next rung takes it (its group
    runs later in decode's walk down the ladder)."""
    nxt, skipped = next_backend(after, it.header, backends)
    it.backend, it.result = nxt, None
    it.note(why)
    it.note(skipped)


def hardware_check(device: int, prefixes: Sequence[bytes]) -> list[int]:
    """nvJPEG's own verdict per header (1 takes, 0 refuses, -1 unknown)."""
    try:
        return list(_core.nvjpeg_hardware_supported(device, list(prefixes)))
    except (ValueError, RuntimeError):
        return [-1] * len(prefixes)


# --------------------------------------------------------------------------- one backend over a batch


def nvjpeg_run(
    device: int,
    backend: str,
    output: str,
    jobs: Sequence[tuple[Any, Any]],
    stream: int,
    on_fail: Callable[[int, str], None],
) -> None:
    """Decodes [(data, dst)] (a bitstream and its (C, H, W) uint8 output, as
    _core.nvjpeg_decode_batch takes them) with one backend in batches; a
    batch nvJPEG rejects or fails is retried image by image, and an image it
    rejects or fails alone is reported through on_fail(job index, why), so
    the caller can hand it to the next backend. nvJPEG's own failures
    (NvjpegError: execution or internal errors, which the engines return on
    some corrupt data) count as failures of the images too. A backend that
    cannot start at all (BackendUnavailable) fails the whole chunk at once,
    without retries; a CUDA error around the decode (a sticky error an earlier
    kernel left) is no image's fault and goes to the caller."""
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


# --------------------------------------------------------------------------- the walk down the ladder


def decode(items: Sequence[Item], target: Any, opts: Options) -> list[Item]:
    """Decodes what nvJPEG can of `items` (parsed and checked JPEGs) on the GPU
    `target`, on its current stream.

    Returns:
        list[Item]: the items left to the CPU (backend ``pillow``), each with
        the reason in ``reason``.
    """
    for it in items:
        if it.data.is_cuda and it.data.device != target:
            it.data = it.data.to(target)  # nvJPEG reads device bitstreams on its own GPU only
    status = nvjpeg_status()
    if not status["loaded"]:
        for it in items:
            it.backend = PILLOW
            it.note("nvJPEG is not available: " + status["reason"])
        return list(items)
    backends = nvjpeg_backends(target.index)
    for it in items:
        it.backend, why = route(it.header, backends)
        it.note(why)
    _ask_the_engines(items, target.index, backends)
    _bitstreams_to_the_gpu(items, target)
    luma = []  # GRAY from a colour JPEG: decoded RGB, then Pillow's luma in one launch
    for backend in LADDER:  # an image a rung fails joins a later rung's group in this walk
        for output in JPEG_OUTPUTS:
            group = [it for it in items if it.backend == backend and _output(it, opts.mode) == output]
            if not group:
                continue
            _decode_group(group, backend, output, target, backends)
            if opts.mode == "GRAY" and output == "rgb":
                luma += [it for it in group if it.backend == backend]
    _to_luma(luma, target)
    return [it for it in items if it.backend == PILLOW]


def _output(it: Item, mode: str) -> str:
    """nvJPEG's output for an image: Y for gray JPEGs (unless RGB was asked), else planar RGB."""
    return "y" if it.header.components == 1 and mode != "RGB" else "rgb"


def _ask_the_engines(items: Sequence[Item], device: int, backends: dict[str, Any]) -> None:
    """nvJPEG's own word on the hardware candidates (size limits and the like)."""
    hw = [it for it in items if it.backend == HARDWARE]
    for it, ok in zip(hw, hardware_check(device, [bytes(it.prefix) for it in hw])):
        if ok == 0:
            _fall(it, HARDWARE, f"{HARDWARE}: nvjpegDecodeBatchedSupported refuses it", backends)


def _bitstreams_to_the_gpu(items: Sequence[Item], target: Any) -> None:
    """The device backends read device memory: host bitstreams go there in one copy."""
    on_host = [it for it in items if it.backend in (HARDWARE, HYBRID) and not it.data.is_cuda]
    if on_host:
        for it, staged in zip(on_host, transfer.stage([it.data for it in on_host], target)):
            it.data = staged
            it.note("bitstream copied to the GPU")


def _decode_group(group: list[Item], backend: str, output: str, target: Any, backends: dict[str, Any]) -> None:
    """One backend and output over a group; images it fails drop a rung (_fall)."""
    jobs = []  # (bitstream, output): also keeps host bitstreams alive until the decode is done
    for it in group:
        h = it.header
        it.result = torch.empty((JPEG_OUTPUTS[output], h.height, h.width), dtype=torch.uint8, device=target)
        data = it.data
        if backend == HOST and data.is_cuda:
            data = data.cpu()
            it.note("bitstream copied to the host")
        jobs.append((data if data.numel() == it.total else data[: it.total], it.result))
    nvjpeg_run(target.index, backend, output, jobs, transfer.current_stream(target),
               lambda k, why: _fall(group[k], backend, why, backends))
    if backend == HOST:
        transfer.synchronize(target)  # nvJPEG may still read the host bitstreams
    del jobs


def _to_luma(items: Sequence[Item], target: Any) -> None:
    """RGB results -> Pillow's convert("L") luma, with gdsio's kernel (one launch)."""
    if not items:
        return
    rgbs, jobs = [], []
    for it in items:
        h = it.header
        rgbs.append(it.result)  # freed after the launch is queued: same stream, so safe
        it.result = torch.empty((1, h.height, h.width), dtype=torch.uint8, device=target)
        lay = planar_layout(0, 3, h.height, h.width, "u8", "uint8")
        jobs.append(pixel_job(lay, rgbs[-1], it.result, "luma"))
    _core.img_decode_pixels_cuda(jobs, device=target.index, stream=transfer.current_stream(target))
    del rgbs
