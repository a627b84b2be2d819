"""The batch contract: how images go from bytes to tensors, step by step.

``decode`` and ``read`` (image/api.py) are these steps in a row, and
gdsio.Loader runs them apart (gdsio/data/decode.py): each reader thread
probes a file's header on the host and reads its bytes, and one decode call
per batch runs the rest. The steps never name a format: every format is a
``Format`` record in the registry (image/formats/), found by its first bytes.

1. ``options(...)`` and ``target(device)``: the call's arguments, checked once.
2. ``Item(index, name, data, total)`` per image; for files, ``probe_file``
   reads and checks the header on the host (a bad file fails before its bulk
   read) and ``read_bodies`` reads the files into the target's memory (or the
   host's, for formats decoded there); an item with a ``span`` (offset, size)
   is that range of its file (a tar shard's member), header and body.
3. ``run(items, target, opts)``: the headers of items that have none yet
   (from the first KiB of each, one device-to-host copy per GPU), the size
   checks, one decode call per decoder over its group of items, EXIF
   orientation.
4. ``finish(items)``: the images, their DecodeInfo and the failed indices (``Decoded``).

An item that fails carries its error (``item.error``, a ValueError naming
it, or the OSError of its file); with ``on_error="raise"`` the first one is
raised between steps.

>>> opts = batch.options(mode="RGB", on_error="skip")
>>> items = [batch.Item(0, path)]
>>> batch.probe_file(items[0], opts); batch.read_bodies(items, dev, None, 1)
>>> batch.run(items, dev, opts); items[0].result.shape
torch.Size([3, 480, 640])
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
import threading
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from ..config import carried
from ..config import current as current_settings
from ..device import parse_device, require_cuda
from ..errors import DecompressionBombError
from ..io import File, ReadStats
from . import formats
from .codec import MAX_HEADER_BYTES, SNIFF_BYTES, Item, NeedMoreData, Options, check_pixels
from .exif import apply_orientation
from .formats.raw import RawFormat
from .layout import channel_plan

__all__ = [
    "DecodeInfo",
    "Decoded",
    "ImageReadMode",
    "Item",
    "Options",
    "as_bytes_tensor",
    "check",
    "finish",
    "info",
    "options",
    "probe_file",
    "raise_first",
    "read_bodies",
    "read_files",
    "read_headers",
    "release",
    "run",
    "target",
]

# A first look at a header: device data ships this much to the host per image
# in one batched copy; probe_file reads FILE_PROBE bytes of each file on the host
# (more only for a longer header: a JPEG's EXIF or ICC segments), so that on a GPU
# little of a file but its header crosses host memory.
PROBE = 4096
FILE_PROBE = 4096
TAIL = 32  # the last bytes, where a JPEG's EOI marker should be
assert PROBE >= SNIFF_BYTES


class ImageReadMode(enum.Enum):
    """As torchvision.io.ImageReadMode (its members are accepted too, by name)."""

    UNCHANGED = "UNCHANGED"
    GRAY = "GRAY"
    RGB = "RGB"


@dataclasses.dataclass(frozen=True)
class DecodeInfo:
    """What decoding one image did. ``backend``: gdsio-cuda / gdsio-cpu (our
    kernels / CPU twin, uncompressed formats), nvjpeg-hardware-device,
    nvjpeg-gpu-hybrid-device, nvjpeg-host, simplejpeg (libjpeg-turbo on the
    CPU, a (C,H,W) view of (H,W,C) memory) or pillow. ``reason``: why a faster
    backend did not run ("" when none was skipped)."""

    index: int
    source: str  # the path, or "data[i]"
    format: str  # "jpeg", "pnm", "npy", "raw", or one Pillow decodes: "png", "gif", "bmp", "dib", "tiff", "webp"
    backend: str
    reason: str
    shape: tuple[int, ...]  # (C, H, W) of the output
    dtype: str
    orientation: int = 1  # the EXIF orientation found (JPEG and Pillow's formats); applied only if asked
    io: ReadStats | None = None  # read(): how the file was read


# --------------------------------------------------------------------------- arguments


def _mode(mode: Any) -> str:
    name = getattr(mode, "name", mode)
    if isinstance(name, str) and name.upper() in ("UNCHANGED", "RGB", "GRAY"):
        return name.upper()
    raise ValueError(f"mode must be 'UNCHANGED', 'RGB' or 'GRAY' (or an ImageReadMode of those), got {mode!r}")


def options(
    *,
    mode: Any,
    on_error: str,
    exif: bool = False,
    raw: Any = None,
    npy_layout: str = "auto",
    max_pixels: Any = None,
) -> Options:
    """The arguments of decode/read, checked; ValueError/TypeError naming the one that is wrong.
    ``exif``: apply the EXIF orientation (decode's apply_exif_orientation).
    ``max_pixels=None``: the decompression-bomb rule on the max_image_pixels setting."""
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if raw is not None and not isinstance(raw, RawFormat):
        raise TypeError(f"raw must be a gdsio.image.RawFormat, got {type(raw).__name__}")
    if npy_layout not in ("auto", "HWC", "CHW", "HW"):
        raise ValueError(f"npy_layout must be 'auto', 'HWC', 'CHW' or 'HW', got {npy_layout!r}")
    if max_pixels is None:
        pass
    elif type(max_pixels) is not int:
        raise TypeError(f"max_pixels must be a positive int, got {max_pixels!r} ({type(max_pixels).__name__})")
    elif max_pixels < 1:
        raise ValueError(f"max_pixels must be a positive int, got {max_pixels!r}")
    s = current_settings()
    return Options(_mode(mode), on_error, bool(exif), raw, npy_layout, max_pixels, s.max_image_pixels, s.threads)


def target(device: Any) -> torch.device | None:
    """A torch.device of type cpu or cuda (with an index), checked usable; None for None."""
    if device is None:
        return None
    d = parse_device(device)
    return d if d.type == "cpu" else require_cuda(f"cannot decode on {d}", d.index)


def as_bytes_tensor(x: Any, name: str) -> torch.Tensor:
    """`x` (a 1-D uint8 tensor, numpy array or bytes) as a contiguous 1-D uint8 tensor."""
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


def _parse(it: Item, opts: Options) -> None:
    """Sets format and header from it.prefix; raises NeedMoreData or ValueError."""
    fmt = formats.identify(it.prefix, opts)
    it.header = fmt.parse(it.prefix, it.total, it.tail)
    it.format = fmt


def _next_size(it: Item, e: NeedMoreData, have: int) -> int | None:
    """How much to fetch next: at least what the parser asked, at least double."""
    if e.nbytes > MAX_HEADER_BYTES:
        it.fail(f"header longer than {MAX_HEADER_BYTES >> 20} MiB")
        return None
    return min(it.total, max(e.nbytes + 1024, min(2 * have, MAX_HEADER_BYTES)))


def _fetch(items: Sequence[Item], sizes: Sequence[int]) -> None:
    """Sets item.prefix to the first sizes[i] bytes (and item.tail), with one
    device-to-host copy per GPU for the items whose data is there."""
    on_gpu: dict[Any, list[tuple[Item, int]]] = {}
    for it, n in zip(items, sizes):
        if it.data.is_cuda:
            on_gpu.setdefault(it.data.device, []).append((it, n))
        else:
            host = it.data.numpy()  # one view; numpy's slices cost less than a tensor's
            it.prefix = host[:n].tobytes()
            it.tail = host[max(0, it.total - TAIL) : it.total].tobytes()
    for group in on_gpu.values():
        parts = []
        for it, n in group:
            parts += [it.data[:n], it.data[max(0, it.total - TAIL) :]]
        host = torch.cat(parts).cpu().numpy()
        at = 0
        for it, n in group:
            t = min(TAIL, it.total)
            it.prefix = host[at : at + n].tobytes()
            it.tail = host[at + n : at + n + t].tobytes()
            at += n + t


def read_headers(items: Sequence[Item], opts: Options) -> None:
    """Parses the header of every item that has data and no format yet, in
    rounds: the first PROBE bytes of each, more only for the headers that
    run longer. A bad header fails its item."""
    pending = [it for it in items if it.error is None and it.format is None]
    fmt = formats.chosen(opts)
    if fmt is not None:  # picked by an argument: there is nothing to sniff
        for it in pending:
            it.format, it.header = fmt, fmt.parse(b"", it.total, b"")
        return
    sizes = [min(it.total, PROBE) for it in pending]
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


def check(it: Item, opts: Options) -> None:
    """The item's format checks its header against the data; then the pixel
    cap and the mode's channel rule, the same for every format. Fails the item."""
    try:
        size = it.format.check(it, opts)
        if size is not None:  # None: the decoder checks when it reads the header
            check_pixels(size.width, size.height, opts, it.name)
            channel_plan(size.channels, opts.mode)
    except ValueError as e:
        it.fail(str(e), type(e) if isinstance(e, DecompressionBombError) else ValueError)


def _host_bytes(f: Any, size: int, offset: int) -> bytes:
    """`size` bytes of the open gdsio.File `f` at `offset`, read on the host."""
    buf = np.empty(size, np.uint8)
    if size:
        f.read_into(buf, size, offset, backend="posix" if f.kind == "local" else "auto")
    return buf.tobytes()


def release(it: Item) -> None:
    """Closes the file a probe left open on the item (idempotent)."""
    f, it.file = it.file, None
    if f is not None:
        f.close()


def probe_file(it: Item, opts: Options, path: str | None = None) -> None:
    """Opens the file `path` (default ``it.name``; a gdsio.File: what is not
    a regular file is refused without blocking) and reads its header on the
    host (the first 4 KiB, more only for a longer header), sizes and checks
    it. With ``it.span`` (offset, size) the image is that range of the file:
    its header is read from the range's first bytes, ``it.total`` is its size,
    and a range past the file's end fails the item. Sets ``it.total``,
    ``format``, ``header``, and ``it.file``, left open for ``read_bodies`` so
    that header and body come from the same file; a failure goes to
    ``it.error`` and closes the file."""
    try:
        it.file = File(it.name if path is None else path)
    except (OSError, ValueError, ImportError) as e:  # ImportError: an s3:// URL without the [s3] extra
        it.error = e
        return
    try:
        _probe_open(it, opts)
    except OSError as e:
        it.error = e
    except BaseException:  # a warning made an error, an interrupt: the file is not left open
        release(it)
        raise
    if it.error is not None:
        release(it)


def _probe_open(it: Item, opts: Options) -> None:
    f = it.file
    size = f.size()
    base, it.total = (0, size) if it.span is None else it.span
    if base < 0 or it.total < 0 or base + it.total > size:  # a span the file no longer holds (a shard rewritten)
        return it.fail(f"bytes {base} to {base + it.total} are outside '{f.path}' ({size} bytes)")
    if it.total == 0:
        return it.fail("empty file" if it.span is None else "empty range")
    fmt = formats.chosen(opts)
    if fmt is not None:  # picked by an argument: nothing to read before the body
        it.format, it.header = fmt, fmt.parse(b"", it.total, b"")
        return check(it, opts)
    n = min(it.total, FILE_PROBE)
    it.tail = _host_bytes(f, min(TAIL, it.total), base + max(0, it.total - TAIL))
    while True:
        it.prefix = _host_bytes(f, n, base)
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
    check(it, opts)


def _read_body(it: Item, where: str, backend: str | None) -> None:
    """The whole of the item's open file, or its span, into `where` (the host
    for a format decoded there) by one read of the I/O engine; closes the file."""
    dest, how = ("cpu", None) if it.format.host_bytes else (where, backend)
    offset, size = (0, None) if it.span is None else it.span
    try:
        it.data, it.io = it.file.read(offset=offset, size=size, device=dest, backend=how, return_stats=True)
        it.total = it.data.numel()  # the file may have changed size since its header was read
    except (OSError, ValueError) as e:
        it.error = e
    finally:
        release(it)


def _record_streams(items: Sequence[Item], target: torch.device) -> None:
    if target.type == "cuda":
        # Read in other threads (on their default stream): tell the allocator
        # that the decode stream uses the bytes too.
        s = torch.cuda.current_stream(target)
        for it in items:
            if it.error is None and it.data is not None and it.data.is_cuda:
                it.data.record_stream(s)


def _where(target: torch.device) -> str:
    return "cpu" if target.type == "cpu" else f"cuda:{target.index}"


def read_bodies(items: Sequence[Item], target: torch.device, backend: str | None, threads: int) -> None:
    """Reads each probed file, or its span (from the File its probe left open,
    then closed), into `target` memory (host memory for a format decoded on the host),
    several files at a time; sets ``data``, ``total`` and ``io``, or ``error``."""
    where = _where(target)
    if len(items) > 1 and threads > 1:
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(threads, len(items)), thread_name_prefix="gdsio-img",
                                                   initializer=carried()) as ex:  # the caller's settings blocks
            list(ex.map(lambda it: _read_body(it, where, backend), items))
    else:
        for it in items:
            _read_body(it, where, backend)
    _record_streams(items, target)


def read_files(items: Sequence[Item], target: torch.device, backend: str | None, opts: Options) -> None:
    """probe_file then the body read of each item, one open per file, several
    files at a time (so no more files are open at once than there are threads).
    With on_error="raise", files after a failed one are not started."""
    where = _where(target)
    failed_at = [len(items)]  # the lowest index that failed
    lock = threading.Lock()

    def one(it: Item) -> None:
        if opts.on_error == "raise" and failed_at[0] < it.index:
            return
        probe_file(it, opts)
        if it.error is None:
            _read_body(it, where, backend)
        if it.error is not None:
            with lock:
                failed_at[0] = min(failed_at[0], it.index)

    if len(items) > 1 and opts.threads > 1:
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(opts.threads, len(items)), thread_name_prefix="gdsio-img",
                                                   initializer=carried()) as ex:  # the caller's settings blocks
            list(ex.map(one, items))
    else:
        for it in items:
            one(it)
    _record_streams(items, target)


# --------------------------------------------------------------------------- decode


def _by_decoder(items: Iterable[Item]) -> list[list[Item]]:
    """Items grouped by their format's decode function, in registry order:
    formats sharing a decoder share its one call."""
    groups: dict[Any, list[Item]] = {}
    for f in formats.FORMATS:
        groups.setdefault(f.decode, [])
    for it in items:
        groups.setdefault(it.format.decode, []).append(it)
    return [g for g in groups.values() if g]


def run(items: list[Item], target: torch.device, opts: Options) -> None:
    """Headers (of items that have none yet), checks, decode and EXIF
    orientation of items whose data is set (or error); sets ``result``,
    ``backend``, ``reason`` of each, or its ``error``."""
    read_headers(items, opts)
    for it in items:
        if it.error is None:
            check(it, opts)
    if opts.on_error == "raise":
        raise_first(items)
    for group in _by_decoder(it for it in items if it.error is None):
        group[0].format.decode(group, target, opts)
    if opts.on_error == "raise":
        raise_first(items)
    if opts.exif:
        for it in items:
            if it.error is None:
                it.result = apply_orientation(it.result, it.orientation)  # 1 (none found) leaves it


def raise_first(items: Iterable[Item]) -> None:
    """Raises the error of the first failed item, if any."""
    for it in items:
        if it.error is not None:
            raise it.error


def info(it: Item) -> DecodeInfo:
    """The DecodeInfo of a decoded item."""
    r = it.result
    return DecodeInfo(
        index=it.index, source=it.name, format=it.format.name, backend=it.backend, reason=it.reason,
        shape=tuple(r.shape), dtype=str(r.dtype).replace("torch.", ""), orientation=it.orientation, io=it.io,
    )


@dataclasses.dataclass(frozen=True)
class Decoded:
    """What a batch gave, in input order: the images of the items that did
    not fail, their DecodeInfo (empty unless ``finish`` was asked for them),
    and the indices of the items that failed."""

    images: list[torch.Tensor]
    infos: list[DecodeInfo]
    failed: list[int]


def finish(items: list[Item], infos: bool = True) -> Decoded:
    """The images, DecodeInfo (none unless `infos`: 7% of a GPU batch's host time) and failed indices of
    decoded items."""
    good = [it for it in items if it.error is None]
    return Decoded([it.result for it in good], [info(it) for it in good] if infos else [],
                   [it.index for it in items if it.error is not None])
