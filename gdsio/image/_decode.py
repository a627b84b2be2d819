"""decode() and read(): headers on the host, pixels where the target is.

The flow for a batch: normalise the inputs to 1-D uint8 tensors; read the
first bytes of each on the host (one batched device-to-host copy of a few KiB
per image for GPU data, more rounds only for headers that run longer); check
sizes and caps; then decode every uncompressed image in one CPU pass or one
kernel launch per 128 images, every JPEG through nvJPEG's batched API
(grouped by backend) or Pillow, and PNG/GIF/BMP/TIFF/WebP with Pillow on the
host (gdsio.image.pillow, one upload per batch for a GPU); last, EXIF orientation.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
import os
import sys
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from .. import _core
from ..device import parse_device, require_cuda
from ..config import current as current_settings
from ..io import ReadStats
from ..io.urls import is_url
from . import jpeg as _jpeg
from . import pillow as _pil
from ._pixels import RawFormat, channel_plan, job, npy_layout, planar_layout, pnm_layout
from .headers import (
    MAX_HEADER_BYTES,
    JpegHeader,
    NeedMoreData,
    PnmHeader,
    parse_jpeg,
    parse_npy,
    parse_pnm,
    sniff,
)

# A first look at a header: device data ships this much to the host per image
# in one batched copy; read() reads _FILE_PROBE bytes of each file on the host.
_PROBE = 4096
_FILE_PROBE = 64 << 10
_TAIL = 32  # the last bytes, where a JPEG's EOI marker should be


class ImageReadMode(enum.Enum):
    """As torchvision.io.ImageReadMode (its members are accepted too, by name)."""

    UNCHANGED = "UNCHANGED"
    GRAY = "GRAY"
    RGB = "RGB"


@dataclasses.dataclass(frozen=True)
class DecodeInfo:
    """What decoding one image did. ``backend``: gdsio-cuda / gdsio-cpu (our
    kernels / CPU twin, uncompressed formats), nvjpeg-hardware-device,
    nvjpeg-gpu-hybrid-device, nvjpeg-host or pillow. ``reason``: why a faster
    backend did not run ("" when none was skipped)."""

    index: int
    source: str  # the path, or "data[i]"
    format: str  # "jpeg", "pnm", "npy", "raw", or one Pillow decodes: "png", "gif", "bmp", "tiff", "webp"
    backend: str
    reason: str
    shape: tuple[int, ...]  # (C, H, W) of the output
    dtype: str
    orientation: int = 1  # the EXIF orientation found (JPEG and Pillow's formats); applied only if asked
    io: ReadStats | None = None  # read(): how the file was read


@dataclasses.dataclass
class _Options:
    mode: str
    on_error: str
    exif: bool
    raw: RawFormat | None
    npy_layout: str
    max_pixels: int
    threads: int


@dataclasses.dataclass(eq=False)
class _Item:
    index: int
    name: str
    data: Any = None  # 1-D uint8 tensor
    total: int = 0
    prefix: bytes = b""
    tail: bytes = b""
    kind: str = ""
    header: Any = None
    layout: Any = None  # PixelLayout for uncompressed formats
    error: BaseException | None = None
    result: Any = None
    backend: str = ""
    reason: str = ""
    io: ReadStats | None = None
    orientation: int = 1  # Pillow's formats: found when decoded (a JPEG's is in its header)

    def fail(self, msg: str) -> None:
        self.error = ValueError(f"{self.name}: {msg}")


# --------------------------------------------------------------------------- arguments


def _mode(mode: Any) -> str:
    name = getattr(mode, "name", mode)
    if isinstance(name, str) and name.upper() in ("UNCHANGED", "RGB", "GRAY"):
        return name.upper()
    raise ValueError(f"mode must be 'UNCHANGED', 'RGB' or 'GRAY' (or an ImageReadMode of those), got {mode!r}")


def _options(mode: Any, on_error: str, exif: bool, raw: Any, layout: str, max_pixels: Any) -> _Options:
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if raw is not None and not isinstance(raw, RawFormat):
        raise TypeError(f"raw must be a gdsio.image.RawFormat, got {type(raw).__name__}")
    if layout not in ("auto", "HWC", "CHW", "HW"):
        raise ValueError(f"npy_layout must be 'auto', 'HWC', 'CHW' or 'HW', got {layout!r}")
    if max_pixels is None:
        max_pixels = sys.modules[__package__].MAX_IMAGE_PIXELS
    if type(max_pixels) is not int or max_pixels < 1:
        raise ValueError(f"max_pixels must be a positive int, got {max_pixels!r}")
    return _Options(_mode(mode), on_error, bool(exif), raw, layout, max_pixels, current_settings().threads)


def _target(device: Any) -> Any:
    """A torch.device of type cpu or cuda (with an index), or None."""
    if device is None:
        return None
    d = parse_device(device)
    return d if d.type == "cpu" else require_cuda(f"cannot decode on {d}", d.index)


def _as_bytes_tensor(x: Any, name: str) -> Any:
    import numpy as np
    import torch

    if isinstance(x, torch.Tensor):
        if x.dtype != torch.uint8:
            raise ValueError(f"{name} must be a uint8 tensor, got {x.dtype}")
        if x.dim() != 1:
            raise ValueError(f"{name} must be a 1-D tensor of bytes, got shape {tuple(x.shape)}")
        if x.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{name} lives on {x.device}; gdsio decodes cpu or cuda tensors")
        return x.detach().contiguous()
    if isinstance(x, np.ndarray):
        if x.dtype != np.uint8 or x.ndim != 1:
            raise ValueError(f"{name} must be a 1-D uint8 array, got {x.dtype} of shape {x.shape}")
        return torch.from_numpy(np.ascontiguousarray(x) if x.flags.writeable else x.copy())
    if isinstance(x, (bytes, bytearray, memoryview)):
        return torch.from_numpy(np.frombuffer(x, dtype=np.uint8).copy())
    raise TypeError(f"{name} must be a 1-D uint8 torch tensor (or bytes), got {type(x).__name__}")


# --------------------------------------------------------------------------- headers


def _fetch(items: Sequence[_Item], sizes: Sequence[int]) -> None:
    """Sets item.prefix to the first sizes[i] bytes (and item.tail), with one
    device-to-host copy per GPU for the items whose data is there."""
    import torch

    on_gpu: dict[Any, list[tuple[_Item, int]]] = {}
    for it, n in zip(items, sizes):
        if it.data.is_cuda:
            on_gpu.setdefault(it.data.device, []).append((it, n))
        else:
            it.prefix = it.data[:n].numpy().tobytes()
            it.tail = it.data[max(0, it.total - _TAIL) :].numpy().tobytes()
    for group in on_gpu.values():
        parts = []
        for it, n in group:
            parts += [it.data[:n], it.data[max(0, it.total - _TAIL) :]]
        host = torch.cat(parts).cpu().numpy()
        at = 0
        for it, n in group:
            t = min(_TAIL, it.total)
            it.prefix = host[at : at + n].tobytes()
            it.tail = host[at + n : at + n + t].tobytes()
            at += n + t


def _parse(it: _Item, opts: _Options) -> None:
    """Sets kind and header from it.prefix; raises NeedMoreData or ValueError."""
    if opts.raw is not None:
        it.kind = "raw"
        return
    kind = sniff(it.prefix)
    if kind is None:
        raise ValueError(
            f"unknown image format (not JPEG, PNG, PNM, NPY, GIF, BMP, TIFF or WebP): it starts with {it.prefix[:8]!r}"
        )
    it.kind = kind
    if kind in _pil.KINDS:
        return  # Pillow reads the header when it decodes, and the size is checked then, before the pixels
    if kind == "jpeg":
        it.header = parse_jpeg(it.prefix, it.total, it.tail)
    elif kind == "pnm":
        it.header = parse_pnm(it.prefix, it.total)
    else:
        it.header = parse_npy(it.prefix, it.total)


def _next_size(it: _Item, e: NeedMoreData, have: int) -> int | None:
    """How much to fetch next: at least what the parser asked, at least double."""
    if e.nbytes > MAX_HEADER_BYTES:
        it.fail(f"header longer than {MAX_HEADER_BYTES >> 20} MiB")
        return None
    return min(it.total, max(e.nbytes + 1024, min(2 * have, MAX_HEADER_BYTES)))


def _read_headers(items: Sequence[_Item], opts: _Options) -> None:
    """Parses the header of every item that has data and no header yet."""
    pending = [it for it in items if it.error is None and it.kind == ""]
    sizes = [min(it.total, _PROBE) for it in pending]
    while pending:
        _fetch(pending, sizes)
        again, again_sizes = [], []
        for it, n in zip(pending, sizes):
            try:
                _parse(it, opts)
            except NeedMoreData as e:
                want = _next_size(it, e, n)
                if want is not None:
                    again.append(it)
                    again_sizes.append(want)
            except ValueError as e:
                it.fail(str(e))
        pending, sizes = again, again_sizes


def _check(it: _Item, opts: _Options) -> None:
    """Sizes against the data and the pixel cap; the pixel layout of uncompressed formats."""
    h = it.header
    if it.kind in _pil.KINDS:
        return  # checked by gdsio.image.pillow.decode, on the size in the header, before decoding
    if it.kind == "raw":
        fmt = opts.raw
        assert fmt is not None
        if it.total != fmt.nbytes:
            return it.fail(
                f"a raw record of {fmt.height}x{fmt.width}x{fmt.channels} {fmt.dtype} "
                f"({fmt.layout}, offset {fmt.offset}) holds {fmt.nbytes} bytes, but the data holds {it.total}"
            )
        it.layout = fmt.layout_of()
        pixels = fmt.height * fmt.width
    elif it.kind == "jpeg":
        assert isinstance(h, JpegHeader)
        pixels = h.width * h.height
    else:
        try:
            it.layout = pnm_layout(h) if isinstance(h, PnmHeader) else npy_layout(h, opts.npy_layout)
        except ValueError as e:
            return it.fail(str(e))
        lay = it.layout
        pixels = lay.height * lay.width
        avail = it.total - lay.offset
        if lay.nbytes > avail:
            what = "PNM" if it.kind == "pnm" else "NPY"
            return it.fail(
                f"{what} header declares {lay.width}x{lay.height}x{lay.channels} {lay.dtype} "
                f"({lay.nbytes} bytes of pixels after a {lay.offset}-byte header), "
                f"but the data holds only {avail} bytes after it (truncated?)"
            )
    if pixels > opts.max_pixels:
        w, hh = (h.width, h.height) if it.kind == "jpeg" else (it.layout.width, it.layout.height)
        return it.fail(
            f"{w}x{hh} = {pixels} pixels is more than the cap of {opts.max_pixels} "
            "(max_pixels=, or gdsio.image.MAX_IMAGE_PIXELS)"
        )
    channels = h.components if it.kind == "jpeg" else it.layout.channels
    if it.kind == "jpeg" and channels not in (1, 3, 4):
        return it.fail(f"a JPEG of {channels} components is not supported (1, 3 or 4)")
    try:
        channel_plan(channels, opts.mode)
    except ValueError as e:
        it.fail(str(e))


# --------------------------------------------------------------------------- pixels


# The three touch points of the GPU path with torch.cuda, kept apart so that
# tests can run the orchestration on the CPU with a stand-in core.
def _stream(device: Any) -> int:
    import torch

    return torch.cuda.current_stream(device).cuda_stream


def _sync(device: Any) -> None:
    import torch

    torch.cuda.current_stream(device).synchronize()


def _stage(tensors: Sequence[Any], device: Any) -> list[Any]:
    """Host byte tensors moved to `device` in one pinned copy; each starts
    256-byte aligned there, as a tensor of its own would."""
    import torch

    offsets, n = [], 0
    for t in tensors:
        offsets.append(n)
        n += (t.numel() + 255) // 256 * 256
    pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    for t, at in zip(tensors, offsets):
        pinned[at : at + t.numel()].copy_(t)
    on_device = pinned.to(device, non_blocking=True)  # the caching host allocator keeps `pinned` until done
    return [on_device[at : at + t.numel()] for t, at in zip(tensors, offsets)]


def _upload(images: Sequence[Any], target: Any) -> list[Any]:
    """Images decoded on the host (any dtype) moved to `target` with one
    pinned copy, queued on the current stream; as they are for a CPU target."""
    import torch

    if target.type == "cpu" or not images:
        return list(images)
    flat = [t.contiguous().reshape(-1).view(torch.uint8) for t in images]
    return [b.view(t.dtype).view(t.shape) for b, t in zip(_stage(flat, target), images)]


def _decode_pixels(items: Sequence[_Item], target: Any, opts: _Options) -> None:
    import torch

    if not items:
        return
    dtypes = {"uint8": torch.uint8, "uint16": torch.uint16, "float32": torch.float32}
    jobs = []
    for it in items:
        lay = it.layout
        data = it.data
        if data.device != target:
            data = it.data = data.to(target)
        c, convert = channel_plan(lay.channels, opts.mode)
        it.result = torch.empty((c, lay.height, lay.width), dtype=dtypes[lay.dtype], device=target)
        jobs.append(job(lay, data.data_ptr(), it.total, it.result.data_ptr(), c, convert))
        it.backend = "gdsio-cuda" if target.type == "cuda" else "gdsio-cpu"
    if target.type == "cuda":
        _core.img_decode_pixels_cuda(jobs, device=target.index, stream=_stream(target))
    else:
        _core.img_decode_pixels_cpu(jobs, threads=opts.threads)


# --------------------------------------------------------------------------- JPEG


def _pillow(items: Sequence[_Item], target: Any, opts: _Options) -> None:
    if not items:
        return
    blobs = [it.data.cpu().numpy().tobytes() for it in items]
    done = []
    for it, r in zip(items, _jpeg.pillow_decode_many(blobs, opts.mode, opts.threads)):
        if isinstance(r, ValueError):
            it.fail(str(r) + (f" (after: {it.reason})" if it.reason else ""))
        else:
            it.result = r
            it.backend = _jpeg.PILLOW
            done.append(it)
    for it, r in zip(done, _upload([it.result for it in done], target)):
        it.result = r


# --------------------------------------------------------------------------- PNG, GIF, BMP, TIFF, WebP


def _decode_with_pillow(items: Sequence[_Item], target: Any, opts: _Options) -> None:
    """Pillow's formats: decoded on the host, then uploaded for a GPU target."""
    if not items:
        return
    blobs = [it.data.cpu().numpy().tobytes() for it in items]
    done = []
    for it, r in zip(items, _pil.decode_many(blobs, [it.kind for it in items], opts.mode, opts.max_pixels, opts.threads)):
        if isinstance(r, ValueError):
            it.fail(str(r))
            continue
        it.result, it.orientation, note = r
        it.backend = _pil.PILLOW
        why = f"no GPU decoder for {it.kind.upper()} in gdsio: Pillow decodes it on the CPU" if target.type == "cuda" else ""
        it.reason = "; ".join(x for x in (why, note) if x)
        done.append(it)
    for it, r in zip(done, _upload([it.result for it in done], target)):
        it.result = r


def _decode_jpegs_cuda(items: Sequence[_Item], target: Any, opts: _Options) -> None:
    import torch

    dev = target.index
    for it in items:
        if it.data.is_cuda and it.data.device != target:
            it.data = it.data.to(target)  # nvJPEG reads device bitstreams on its own GPU only
    status = _jpeg.nvjpeg_status()
    if not status["loaded"]:
        for it in items:
            it.reason = "nvJPEG is not available: " + status["reason"]
        return _pillow(items, target, opts)
    backends = _jpeg.nvjpeg_backends(dev)
    for it in items:
        it.backend, it.reason = _jpeg.route(it.header, backends)
    # nvJPEG's own word on the hardware candidates (size limits and the like).
    hw = [it for it in items if it.backend == _jpeg.HARDWARE]
    for it, ok in zip(hw, _jpeg.hardware_check(dev, [bytes(it.prefix) for it in hw])):
        if ok == 0:
            skip = f"{_jpeg.HARDWARE}: nvjpegDecodeBatchedSupported refuses it"
            nxt, why = _jpeg.next_backend(_jpeg.HARDWARE, it.header, backends)
            it.backend, it.reason = nxt, "; ".join(r for r in (it.reason, skip, why) if r)
    stream = _stream(target)
    # Bitstreams for the device backends go to the GPU in one copy when they are on the host.
    on_host = [it for it in items if it.backend in (_jpeg.HARDWARE, _jpeg.HYBRID) and not it.data.is_cuda]
    if on_host:
        for it, staged in zip(on_host, _stage([it.data for it in on_host], target)):
            it.data = staged
            it.reason = "; ".join(r for r in (it.reason, "bitstream copied to the GPU") if r)
    luma = []  # GRAY from a colour JPEG: decode RGB, then Pillow's luma (one launch)
    for backend in (_jpeg.HARDWARE, _jpeg.HYBRID, _jpeg.HOST):
        for output in ("y", "rgb"):
            group = [
                it for it in items
                if it.backend == backend and ("y" if it.header.components == 1 and opts.mode != "RGB" else "rgb") == output
            ]
            if not group:
                continue
            keep = []  # host bitstreams must outlive the call
            jobs = []
            for it in group:
                h = it.header
                it.result = torch.empty((3 if output == "rgb" else 1, h.height, h.width), dtype=torch.uint8, device=target)
                data = it.data
                if backend == _jpeg.HOST and data.is_cuda:
                    data = data.cpu()
                    it.reason = "; ".join(r for r in (it.reason, "bitstream copied to the host") if r)
                keep.append(data)
                jobs.append((data.data_ptr(), it.total, it.result.data_ptr(), h.height, h.width))

            def failed(k: int, why: str, group: list = group, backend: str = backend) -> None:
                # The next backend down the ladder takes it: its group runs later in this loop.
                it = group[k]
                nxt, skipped = _jpeg.next_backend(backend, it.header, backends)
                it.backend, it.result = nxt, None
                it.reason = "; ".join(r for r in (it.reason, why, skipped) if r)

            _jpeg.nvjpeg_run(dev, backend, output, jobs, stream, failed)
            if backend == _jpeg.HOST:
                _sync(target)  # nvJPEG may still read the host bitstreams
            del keep
            if opts.mode == "GRAY" and output == "rgb":
                luma += [it for it in group if it.backend == backend]
    if luma:
        rgbs, luma_jobs = [], []
        for it in luma:
            h = it.header
            rgbs.append(it.result)  # freed after the launch is queued: same stream, so safe
            it.result = torch.empty((1, h.height, h.width), dtype=torch.uint8, device=target)
            lay = planar_layout(0, 3, h.height, h.width, "u8", "uint8")
            luma_jobs.append(job(lay, rgbs[-1].data_ptr(), 3 * h.height * h.width, it.result.data_ptr(), 1, "luma"))
        _core.img_decode_pixels_cuda(luma_jobs, device=dev, stream=stream)
        del rgbs
    _pillow([it for it in items if it.backend == _jpeg.PILLOW], target, opts)


# --------------------------------------------------------------------------- orientation


def apply_orientation(img: Any, orientation: int) -> Any:
    """EXIF orientation 1..8 applied to a (..., H, W) tensor, as torchvision's
    decode_jpeg(apply_exif_orientation=True) and PIL.ImageOps.exif_transpose."""
    if orientation == 2:
        img = img.flip(-1)
    elif orientation == 3:
        img = img.flip((-2, -1))
    elif orientation == 4:
        img = img.flip(-2)
    elif orientation == 5:
        img = img.transpose(-1, -2)
    elif orientation == 6:
        img = img.transpose(-1, -2).flip(-1)
    elif orientation == 7:
        img = img.transpose(-1, -2).flip((-2, -1))
    elif orientation == 8:
        img = img.transpose(-1, -2).flip(-2)
    else:
        return img
    return img.contiguous()


# --------------------------------------------------------------------------- the driver


def _run(items: list[_Item], target: Any, opts: _Options) -> None:
    """Headers, checks and decode of items whose data is set (or error)."""
    _read_headers(items, opts)
    for it in items:
        if it.error is None:
            _check(it, opts)
    if opts.on_error == "raise":
        _raise_first(items)
    ok = [it for it in items if it.error is None]
    _decode_pixels([it for it in ok if it.kind != "jpeg" and it.kind not in _pil.KINDS], target, opts)
    _decode_with_pillow([it for it in ok if it.kind in _pil.KINDS], target, opts)
    jpegs = [it for it in ok if it.kind == "jpeg"]
    if target.type == "cuda":
        _decode_jpegs_cuda(jpegs, target, opts)
    else:
        _pillow(jpegs, target, opts)
    if opts.on_error == "raise":
        _raise_first(items)
    if opts.exif:
        for it in items:
            if it.error is None and it.kind in ("jpeg", *_pil.KINDS):
                it.result = apply_orientation(it.result, _orientation_of(it))


def _orientation_of(it: _Item) -> int:
    return it.header.orientation if it.kind == "jpeg" else it.orientation


def _raise_first(items: Iterable[_Item]) -> None:
    for it in items:
        if it.error is not None:
            raise it.error


def _finish(items: list[_Item], single: bool, opts: _Options, return_info: bool) -> Any:
    def info(it: _Item) -> DecodeInfo:
        r = it.result
        return DecodeInfo(
            index=it.index, source=it.name, format=it.kind, backend=it.backend, reason=it.reason,
            shape=tuple(r.shape), dtype=str(r.dtype).replace("torch.", ""),
            orientation=_orientation_of(it), io=it.io,
        )

    good = [it for it in items if it.error is None]
    images = [it.result for it in good]
    infos = [info(it) for it in good]
    if single:
        return (images[0], infos[0]) if return_info else images[0]
    out: tuple = (images,)
    if opts.on_error == "skip":
        out += ([it.index for it in items if it.error is not None],)
    if return_info:
        out += (infos,)
    return out[0] if len(out) == 1 else out


def decode(
    data: Any,
    *,
    device: Any = None,
    mode: Any = "UNCHANGED",
    on_error: str = "raise",
    apply_exif_orientation: bool = False,
    raw: RawFormat | None = None,
    npy_layout: str = "auto",
    max_pixels: int | None = None,
    return_info: bool = False,
) -> Any:
    """Decodes images held in memory into (C,H,W) tensors, like
    ``torchvision.io.decode_jpeg`` / ``decode_image``.

    ``data`` is a 1-D uint8 tensor (cpu or cuda; bytes and numpy accepted) or a
    list of them; the format (JPEG, binary PNM P5/P6, NPY, and through Pillow
    on the CPU PNG, GIF, BMP, TIFF, WebP) is told from the first bytes, or
    ``raw=RawFormat(...)`` reads headerless records.
    ``device`` defaults to where the data is; GPU data never visits the host
    but for its first few KiB (the header). Output dtypes: uint8, uint16 for
    16-bit PNM, PNG or TIFF / uint16 NPY, float32 for float32 NPY or TIFF
    (channels of Pillow's formats: see gdsio.image.pillow). ``mode`` UNCHANGED, RGB
    (gray replicated) or GRAY (Pillow's convert("L") luma). ``on_error``
    "skip" (lists only) returns ``(images, failed_indices)``;
    ``return_info=True`` adds a list of DecodeInfo (one per returned image),
    which names the backend that ran. ValueError names the image and the problem.

    On the GPU's JPEG engines (``nvjpeg-hardware-device``) the call waits on
    the host for the work queued on the current stream, before and after
    the decode: the engines read and write when called, not in stream order
    (seen on H100). Decode on a side stream to keep that wait off a training
    stream; gdsio.Loader decodes on a stream of its own.

    >>> img = gdsio.image.decode(gdsio.read("cat.jpg", device="cuda"))
    >>> imgs, failed = gdsio.image.decode(list_of_tensors, mode="RGB", on_error="skip")
    """
    import torch

    opts = _options(mode, on_error, apply_exif_orientation, raw, npy_layout, max_pixels)
    single = not isinstance(data, (list, tuple))
    if single and opts.on_error == "skip":
        raise ValueError("on_error='skip' applies to a list of images; pass a list")
    inputs = [data] if single else list(data)
    items = []
    for i, x in enumerate(inputs):
        name = "data" if single else f"data[{i}]"
        t = _as_bytes_tensor(x, name)
        it = _Item(i, name, t, t.numel())
        if it.total == 0:
            it.fail("empty data")
        items.append(it)
    target = _target(device)
    if target is None:
        devices = {it.data.device for it in items}
        if len(devices) > 1:
            raise ValueError(f"the images live on different devices ({sorted(map(str, devices))}); pass device=")
        target = _target(devices.pop() if devices else torch.device("cpu"))
    _run(items, target, opts)
    return _finish(items, single, opts, return_info)


# --------------------------------------------------------------------------- read


def _probe_file(it: _Item, opts: _Options) -> None:
    """Reads the header of it.name on the host (a plain pread of the first
    64 KiB, more only for a longer header; ranged GETs for a URL) and sizes it."""
    if is_url(it.name):
        from ..io import File

        try:
            f = File(it.name)
        except (OSError, ValueError, ImportError) as e:
            it.error = e
            return
        try:
            def pread(n: int, off: int) -> bytes:
                buf = np.empty(n, np.uint8)
                if n:
                    f.read_into(buf, n, off)
                return buf.tobytes()

            _probe_bytes(it, opts, f.size(), pread)
        except (OSError, ValueError) as e:
            it.error = e
        finally:
            f.close()
        return
    try:
        fd = os.open(it.name, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        it.error = e
        return
    try:
        _probe_bytes(it, opts, os.fstat(fd).st_size, lambda n, off: os.pread(fd, n, off))
    except OSError as e:
        it.error = e
    finally:
        os.close(fd)


def _probe_bytes(it: _Item, opts: _Options, total: int, pread: Callable[[int, int], bytes]) -> None:
    it.total = total
    if it.total == 0:
        return it.fail("empty file")
    if opts.raw is not None:
        it.kind = "raw"
        return _check(it, opts)
    n = min(it.total, _FILE_PROBE)
    it.tail = pread(min(_TAIL, it.total), max(0, it.total - _TAIL))
    while True:
        it.prefix = pread(n, 0)
        try:
            _parse(it, opts)
            break
        except NeedMoreData as e:
            want = _next_size(it, e, n)
            if want is None:
                return
            n = want
        except ValueError as e:
            return it.fail(str(e))
    _check(it, opts)


def _read_bodies(items: Sequence[_Item], target: Any, backend: str | None, threads: int) -> None:
    """gdsio.read of every file into target memory, several files at a time."""
    import torch

    from ..io import read as io_read

    where = "cpu" if target.type == "cpu" else f"cuda:{target.index}"

    def one(it: _Item) -> None:
        # Pillow's formats are decoded on the host: their bytes go there, whatever the target.
        dest, how = ("cpu", None) if it.kind in _pil.KINDS else (where, backend)
        try:
            it.data, it.io = io_read(it.name, device=dest, backend=how, return_stats=True)
            it.total = it.data.numel()  # the file may have changed since its header was read
        except (OSError, ValueError) as e:
            it.error = e

    if len(items) > 1 and threads > 1:
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(threads, len(items)), thread_name_prefix="gdsio-img") as ex:
            list(ex.map(one, items))
    else:
        for it in items:
            one(it)
    if target.type == "cuda":
        # Read in other threads (on their default stream): tell the allocator
        # that the decode stream uses the bytes too.
        s = torch.cuda.current_stream(target)
        for it in items:
            if it.error is None and it.data is not None and it.data.is_cuda:
                it.data.record_stream(s)


def read(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    device: Any = "cuda",
    mode: Any = "UNCHANGED",
    on_error: str = "raise",
    apply_exif_orientation: bool = False,
    raw: RawFormat | None = None,
    npy_layout: str = "auto",
    max_pixels: int | None = None,
    return_info: bool = False,
    backend: str | None = None,
) -> Any:
    """Reads image files into (C,H,W) tensors on ``device``, like
    ``torchvision.io.read_image`` but straight into GPU memory.

    Each header is read on the host first (a plain pread of the first 64 KiB),
    so a bad file fails before its bulk read; then ``gdsio.read`` moves the
    whole file into ``device`` memory (cuFile where GPUDirect Storage works:
    the pixels, or the JPEG bitstream, never touch host memory) and
    ``decode`` runs there. PNG, GIF, BMP, TIFF and WebP files are read into
    host memory instead (``backend`` applies to the other formats), decoded
    by Pillow and uploaded. ``backend`` picks gdsio.read's backend. Other
    arguments as in ``decode``; ``DecodeInfo.io`` holds each file's ReadStats.
    With on_error="skip", unreadable files are skipped too.

    >>> img = gdsio.image.read("cat.jpg", device="cuda", mode="RGB")
    >>> imgs, infos = gdsio.image.read(paths, return_info=True)
    """
    opts = _options(mode, on_error, apply_exif_orientation, raw, npy_layout, max_pixels)
    single = isinstance(path, (str, bytes, os.PathLike))
    if single and opts.on_error == "skip":
        raise ValueError("on_error='skip' applies to a list of paths; pass a list")
    paths: list[Any] = [path] if single else list(path)  # type: ignore[arg-type]
    target = _target(device)
    if target is None:
        raise ValueError("device must be 'cpu', 'cuda', 'cuda:N', an int or a torch.device, got None")
    items = [_Item(i, p if is_url(p) else os.fsdecode(os.fspath(p))) for i, p in enumerate(paths)]
    for it in items:
        _probe_file(it, opts)
    if opts.on_error == "raise":
        _raise_first(items)
    _read_bodies([it for it in items if it.error is None], target, backend, opts.threads)
    if opts.on_error == "raise":
        _raise_first(items)
    _run(items, target, opts)
    return _finish(items, single, opts, return_info)
