"""Tensor files straight to the device: safetensors and npy.

Headers are read and validated on the host; the data travels through the I/O
engine (``gdsio.read_into``) into one device allocation, so on a GDS machine
it never touches host memory. On the CPU the tensors can instead be views of
a private (copy-on-write) mapping of the file, as safetensors.torch.load_file
and numpy.load(mmap_mode="c") give them.
"""

from __future__ import annotations

import errno
import json
import math
import os
import struct
import time
from typing import Any, Iterable

import numpy as np
import torch

from .device import parse_device, resolve_device
from .errors import NeedMoreData
from .io import File, ReadStats
from .io.buffers import host_empty
from .io.mapped import Descriptor, PrivateMapping, mapped_stats, open_to_map
from .io.npy_header import parse_npy_header
from .io.urls import is_url

__all__ = ["MAX_SAFETENSORS_HEADER", "load_npy", "load_safetensors", "npy_from_bytes", "read_npy_header",
           "read_safetensors_header"]

# safetensors caps its header at 100 MB; a larger length field is corruption.
MAX_SAFETENSORS_HEADER = 100 * 1000 * 1000


def _torch_dtypes() -> dict[str, Any]:
    names = {
        "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
        "I32": "int32", "U32": "uint32", "I64": "int64", "U64": "uint64", "F16": "float16",
        "BF16": "bfloat16", "F32": "float32", "F64": "float64", "C64": "complex64",
        "F8_E4M3": "float8_e4m3fn", "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2": "float8_e5m2",
        "F8_E5M2FNUZ": "float8_e5m2fnuz", "F8_E8M0": "float8_e8m0fnu", "F4": "float4_e2m1fn_x2",
    }
    # Only the dtypes this torch has (uint16+ since 2.3, float8 since 2.1,
    # float4_e2m1fn_x2 since 2.8). safetensors' F6_E2M3 and F6_E3M2 have no torch dtype.
    return {k: getattr(torch, v) for k, v in names.items() if hasattr(torch, v)}


# Bits per element where it is not the torch dtype's itemsize * 8: an F4 value
# is a nibble, and torch packs two into each float4_e2m1fn_x2 element.
_SUB_BYTE_BITS = {"F4": 4}


def _torch_shape(dtype: str, shape: list[int]) -> list[int]:
    """The torch shape of a safetensors tensor: an F4 tensor's last dimension
    counts nibbles, torch's counts the bytes holding two (as safetensors.torch)."""
    if dtype in _SUB_BYTE_BITS:
        return [*shape[:-1], shape[-1] * _SUB_BYTE_BITS[dtype] // 8]
    return shape


def _alloc(nbytes: int, device: Any, path: str, file_offset: int = 0) -> Any:
    """`nbytes` on `device`; on the host placed at `file_offset`'s position in
    its page: the kernel's copy out of the page cache then runs with source and
    destination equally aligned (about 1.3x faster than 40 bytes apart)."""
    dev = resolve_device(device, what=f"cannot load '{path}' into {device}")
    try:
        if dev.type == "cpu":
            if not file_offset % 4096:
                return host_empty(nbytes)
            raw = host_empty(nbytes + 4096)
            skip = (file_offset - raw.data_ptr()) % 4096
            return raw[skip : skip + nbytes]
        return torch.empty(nbytes, dtype=torch.uint8, device=dev)
    except (RuntimeError, MemoryError, OSError) as e:  # torch's OOM, mmap's ENOMEM
        raise OSError(errno.ENOMEM, f"cannot allocate {nbytes} bytes ({nbytes / 1e9:.1f} GB) on {dev} for the data "
                      f"of '{path}': {e}", path) from e


def _is_cpu(device: Any) -> bool:
    """`device` names the CPU (a spelling that names nothing is refused later, where it always was)."""
    try:
        return parse_device(device).type == "cpu"
    except ValueError:
        return False


def _safetensors_header(f: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
    """The header of the open File `f`, validated as the safetensors library
    validates it (what it refuses is refused here, with a ValueError naming
    the file and the problem)."""
    path = f.path
    file_size = f.size()

    def host(offset: int, size: int) -> bytes:
        buf = np.empty(size, np.uint8)
        if size:
            f.read_into(buf, size, offset, backend="posix" if f.kind == "local" else "auto")
        return buf.tobytes()

    if file_size < 8:
        raise ValueError(f"'{path}' is not a safetensors file: {file_size} bytes, too short for the 8-byte header length")
    (n,) = struct.unpack("<Q", host(0, 8))
    if n > MAX_SAFETENSORS_HEADER:
        raise ValueError(f"'{path}': header length {n} exceeds the {MAX_SAFETENSORS_HEADER}-byte cap (corrupt file?)")
    if 8 + n > file_size:
        raise ValueError(f"'{path}': header length {n} runs past the end of the file ({file_size} bytes); truncated?")
    raw = host(8, n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise ValueError(f"'{path}': the safetensors header nests too deeply to be a safetensors header") from None
    except (UnicodeDecodeError, ValueError) as e:  # json.JSONDecodeError is a ValueError
        raise ValueError(f"'{path}': the safetensors header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise ValueError(f"'{path}': the safetensors header must be a JSON object")
    for name in header:  # JSON escapes can make lone surrogates, which no UTF-8 file name or key holds
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"'{path}': tensor name {name!r} holds a lone surrogate (not valid Unicode)") from None
    metadata = header.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError(f"'{path}': __metadata__ must map strings to strings")
    data_start = 8 + n
    data_size = file_size - data_start
    dtypes = _torch_dtypes()
    spans = []
    for name, e in header.items():
        where = f"'{path}', tensor {name!r}"
        if not isinstance(e, dict) or not {"dtype", "shape", "data_offsets"} <= set(e):
            raise ValueError(f"{where}: an entry needs dtype, shape and data_offsets")
        dtype, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        if not isinstance(dtype, str) or dtype not in dtypes:
            raise ValueError(f"{where}: dtype {dtype!r} is not a safetensors dtype this torch has")
        # JSON true is not a dimension (type() is int, not isinstance: bool is an int in Python).
        if not (isinstance(shape, list) and all(type(d) is int and 0 <= d < 2**63 for d in shape)):
            raise ValueError(f"{where}: shape must be a list of non-negative ints below 2**63, got {shape!r}")
        if not (isinstance(offs, list) and len(offs) == 2 and all(type(o) is int and o >= 0 for o in offs)):
            raise ValueError(f"{where}: data_offsets must be [begin, end], got {offs!r}")
        begin, end = offs
        if begin > end:
            raise ValueError(f"{where}: data_offsets {offs} end before they begin")
        if end > data_size:
            raise ValueError(f"{where}: data_offsets {offs} lie outside the data region ({data_size} bytes); truncated?")
        numel = math.prod(shape)
        if numel >= 2**63:
            raise ValueError(f"{where}: shape {shape} holds {numel} elements, more than 2**63 - 1")
        bits = _SUB_BYTE_BITS.get(dtype, dtypes[dtype].itemsize * 8)
        if numel * bits % 8:  # the safetensors library's rule for sub-byte dtypes
            raise ValueError(f"{where}: shape {shape} of {dtype} holds {numel * bits} bits, not a whole number of bytes")
        if numel * bits // 8 != end - begin:
            raise ValueError(
                f"{where}: shape {shape} of {dtype} needs {numel * bits // 8} bytes, data_offsets give {end - begin}"
            )
        spans.append((begin, end, name))
    spans.sort()
    at = 0  # as the safetensors library: the tensors tile the data region, no gap, no overlap, nothing after
    for begin, end, name in spans:
        if begin != at:
            what = "overlaps the tensor before it" if begin < at else f"leaves a gap of {begin - at} bytes before it"
            raise ValueError(f"'{path}': tensor {name!r} at data_offsets {[begin, end]} {what} (safetensors refuses it)")
        at = end
    if at != data_size:
        if at > data_size:
            raise ValueError(f"'{path}': the tensors need {at} bytes of data, the file holds {data_size}; truncated?")
        raise ValueError(f"'{path}': {data_size - at} bytes follow the last tensor (safetensors refuses trailing data)")
    return data_start, header, metadata


def read_safetensors_header(path: str | os.PathLike[str]) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(data region start, {name: {dtype, shape, data_offsets}}, metadata) of a
    .safetensors file, validated as the safetensors library validates it.

    Raises:
        FileNotFoundError: `path` does not exist (PermissionError, IsADirectoryError,
            OSError for what is not a regular file).
        ValueError: not a safetensors file, or one that the safetensors library refuses.
    """
    with File(path) as f:
        return _safetensors_header(f)


def _wanted(header: dict[str, Any], keys: Iterable[str] | None, path: str) -> list[str]:
    """The names to load, in order; KeyError for a name the file lacks,
    ValueError for an F4 tensor torch cannot hold (an odd last dimension)."""
    names = list(header) if keys is None else list(keys)
    missing = [k for k in names if k not in header]
    if missing:
        raise KeyError(f"'{path}' has no tensor(s) {missing}; it has {sorted(header)[:10]}...")
    for k in names:  # safetensors.torch's rule: torch packs F4 values in pairs along the last dimension
        e = header[k]
        if e["dtype"] in _SUB_BYTE_BITS and (not e["shape"] or e["shape"][-1] % 2):
            raise ValueError(f"'{path}', tensor {k!r}: an F4 tensor needs an even last dimension to load "
                             f"into torch's float4_e2m1fn_x2 (two values a byte), got shape {e['shape']}")
    return names


def load_safetensors(
    path: str | os.PathLike[str],
    *,
    device: Any = "cuda",
    keys: Iterable[str] | None = None,
    mmap: bool | None = None,
    return_stats: bool = False,
) -> Any:
    """Loads a .safetensors file: the header is parsed and validated on the
    host, and the tensors come either from a private mapping of the file (on
    the CPU, by default: what safetensors.torch.load_file returns) or from one
    read (the I/O engine: cuFile where GDS works, else the pinned pipeline, or
    posix to the CPU) into one allocation on `device`, of which they are
    zero-copy views. Either way a tensor whose offset is not a multiple of its
    element size is copied to be aligned.

    The mapped mode (``mmap=True``, the default on the CPU for a local file)
    maps the file copy-on-write, as safetensors does: loading costs no copy
    and pages are read from the page cache (or the disk) when first touched;
    each tensor has a storage of its own over its bytes, a write to a tensor
    copies the page for this process and never reaches the file, the mapping
    holds no file descriptor and is unmapped when the last tensor over it is
    freed. As with any mapping (safetensors' and numpy's mmap_mode alike), a
    file truncated by someone else while its tensors live makes touching the
    lost pages fail with SIGBUS; load with ``mmap=False`` to own a copy.

    Args:
        path: the .safetensors file.
        device: where the tensors live. Default "cuda" (the current CUDA
            device); ``"cuda:N"`` or an int N, or ``"cpu"``.
        keys: only these tensors (read in one batch into one packed allocation,
            or views of the mapping); default: all.
        mmap: ``True``: tensors over a private mapping of the file (CPU and a
            local file only); ``False``: a copy read into memory this call
            allocates; ``None`` (default): the mapping where it can be made
            (device "cpu", a local file), what safetensors users get from
            ``load_file``; the read otherwise (GPU devices, URLs).
        return_stats: also return the ReadStats of the read (None when no
            byte had to be read or mapped); a mapped load gives backend
            ``"mmap"``, ``nbytes`` the bytes copied (unaligned tensors; 0 when
            every tensor is a view) and the bytes mapped in ``reason``.

    Returns:
        dict[str, torch.Tensor]: name -> tensor, with the file's dtypes and
        shapes as safetensors.torch.load_file gives them (every safetensors
        dtype this torch has; F4 is ``torch.float4_e2m1fn_x2``, two values a
        byte, so its last dimension is half the file's); with
        ``return_stats=True``, ``(dict, ReadStats | None)``.

    Raises:
        FileNotFoundError: `path` does not exist (PermissionError, IsADirectoryError likewise).
        ValueError: not a safetensors file, or a corrupt header (too long,
            truncated, not JSON, overlapping or out-of-range tensors, a dtype
            this torch lacks such as F6_E2M3, an F4 tensor with an odd last
            dimension); the message names the file and the tensor.
            ``mmap=True`` with a GPU device or a URL (naming ``mmap``).
        TypeError: `mmap` is not a bool or None.
        KeyError: a name in `keys` that the file does not hold.
        OSError: the file cannot be mapped (ENOMEM: more than the address
            space holds) or the memory for a copy cannot be allocated; the
            message names the file.
        gdsio.BackendUnavailable: a GPU device where CUDA cannot be used
            (the message says why and to pass device="cpu").

    Example:
        >>> device = "cuda" if torch.cuda.is_available() else "cpu"
        >>> w = gdsio.load_safetensors("model.safetensors", device=device)
        >>> head = gdsio.load_safetensors("model.safetensors", device=device, keys=["lm_head.weight"])
        >>> owned = gdsio.load_safetensors("model.safetensors", device="cpu", mmap=False)
    """
    if mmap is not None and not isinstance(mmap, bool):
        raise TypeError(f"mmap must be True, False or None, not {type(mmap).__name__}")
    cpu, local = _is_cpu(device), not is_url(path)
    if mmap and not cpu:
        raise ValueError(f"mmap=True maps the file into host memory: it needs device='cpu', got device={device!r}")
    if mmap and not local:
        raise ValueError("mmap=True needs a local file, not a URL (pass mmap=False or None to read it)")
    with File(path) as f:  # one open: the header and the data come from the same file
        if mmap is not False and cpu and local:
            shown = f.path
        else:
            shown = None
            path = f.path
            data_start, header, _ = _safetensors_header(f)
            names = _wanted(header, keys, path)
            if keys is None:
                lo = min((header[k]["data_offsets"][0] for k in names), default=0)
                hi = max((header[k]["data_offsets"][1] for k in names), default=0)
                buf = _alloc(hi - lo, device, path, file_offset=data_start + lo)
                stats = f.read_into(buf, hi - lo, data_start + lo) if hi > lo else None
                placed = {k: header[k]["data_offsets"][0] - lo for k in names}
            else:
                # Only the wanted tensors, packed (8-byte aligned) into one allocation, in one batch.
                placed, total = {}, 0
                for k in names:
                    placed[k] = total
                    b, e = header[k]["data_offsets"]
                    total += -(-(e - b) // 8) * 8
                buf = _alloc(total, device, path)
                reqs = [(buf, header[k]["data_offsets"][1] - header[k]["data_offsets"][0],
                         data_start + header[k]["data_offsets"][0], placed[k]) for k in names]
                reqs = [r for r in reqs if r[1] > 0]
                stats = f.read_batch(reqs) if reqs else None
    if shown is not None:
        return _load_safetensors_mapped(path, shown, keys, return_stats)
    dtypes = _torch_dtypes()
    out: dict[str, Any] = {}
    for k in names:
        e = header[k]
        dt = dtypes[e["dtype"]]
        nbytes = e["data_offsets"][1] - e["data_offsets"][0]
        raw = buf[placed[k] : placed[k] + nbytes]
        if raw.storage_offset() % dt.itemsize:
            raw = raw.clone()  # torch views need the element size to divide the offset
        shape = _torch_shape(e["dtype"], e["shape"])
        out[k] = raw.view(dt).reshape(shape) if nbytes else torch.empty(shape, dtype=dt, device=buf.device)
    return (out, stats) if return_stats else out


def _load_safetensors_mapped(path: Any, shown: str, keys: Iterable[str] | None, return_stats: bool) -> Any:
    """load_safetensors' mapped mode: the header through preads of one
    descriptor, the tensors views of a private mapping made from it (each with
    a storage of its own, as safetensors gives them), the unaligned ones copied."""
    t0 = time.perf_counter()
    fd, size = open_to_map(path, shown)
    try:
        data_start, header, _ = _safetensors_header(Descriptor(fd, shown, size))
        names = _wanted(header, keys, shown)
        spans = {k: header[k]["data_offsets"] for k in names}
        nbytes = sum(e - b for b, e in spans.values())
        base = np.asarray(PrivateMapping(fd, size, shown, nbytes)) if nbytes else None
    finally:
        os.close(fd)  # the mapping keeps the file
    dtypes = _torch_dtypes()
    out: dict[str, Any] = {}
    copied = 0
    for k in names:
        e = header[k]
        dt = dtypes[e["dtype"]]
        shape = _torch_shape(e["dtype"], e["shape"])
        (b, end), at = spans[k], data_start + spans[k][0]
        if end == b:
            out[k] = torch.empty(shape, dtype=dt)
        elif at % dt.itemsize:  # the mapping is page-aligned: torch views need the element size to divide the address
            out[k] = torch.frombuffer(base, dtype=torch.uint8, count=end - b, offset=at).clone().view(dt).view(shape)
            copied += end - b
        else:
            out[k] = torch.frombuffer(base, dtype=dt, count=(end - b) // dt.itemsize, offset=at).view(shape)
    if not return_stats:
        return out
    stats = mapped_stats(shown, t0, size, copied, "tensors whose offset their element size does not divide")
    return out, (stats if base is not None else None)


# ---- npy ---------------------------------------------------------------------


def _npy_header(f: Any) -> tuple[int, Any, bool, tuple[int, ...]]:
    """(data offset, numpy dtype, fortran_order, shape) of the open File `f`,
    validated as numpy.load(allow_pickle=False) validates it; ValueError naming the file."""
    path, size = f.path, f.size()

    def host(offset: int, n: int) -> bytes:
        buf = np.empty(n, np.uint8)
        if n:
            f.read_into(buf, n, offset, backend="posix" if f.kind == "local" else "auto")
        return buf.tobytes()

    want = min(size, 12)
    while True:
        try:
            h = parse_npy_header(host(0, want), size)
            break
        except NeedMoreData as e:
            want = e.nbytes
        except ValueError as e:
            raise ValueError(f"'{path}': {e}") from None
    try:
        dt = np.dtype(h.descr)
    except (TypeError, ValueError) as e:
        raise ValueError(f"'{path}': unknown dtype {h.descr!r}: {e}") from None
    if dt.hasobject:
        raise ValueError(f"'{path}': dtype {h.descr!r} holds Python objects; loading it would need pickle, which gdsio never runs")
    need = math.prod(h.shape) * dt.itemsize
    if h.data_offset + need > size:
        raise ValueError(f"'{path}': shape {h.shape} of {h.descr} needs {need} bytes, the file holds {size - h.data_offset}; truncated?")
    return h.data_offset, dt, h.fortran_order, h.shape


def read_npy_header(path: str | os.PathLike[str]) -> tuple[int, str, bool, tuple[int, ...]]:
    """(data offset, dtype descr, fortran_order, shape) of a .npy file, validated; never unpickles.

    The header is parsed by gdsio.io.npy_header (numpy's rules, shared with
    gdsio.image); the dtype must be one numpy knows, and the file must hold
    the array's bytes.

    Raises:
        FileNotFoundError: `path` does not exist (PermissionError, IsADirectoryError,
            OSError for a FIFO, socket or device: refused without blocking).
        ValueError: not a .npy file, or one numpy.load(allow_pickle=False) refuses.
    """
    with File(path) as f:
        offset, dt, fortran, shape = _npy_header(f)
        return offset, dt.str, fortran, shape


def _npy_torch_dtype(dt: Any, path: str) -> Any:
    """The torch dtype of numpy dtype `dt` in native byte order; ValueError naming the file if torch has none."""
    try:
        return torch.from_numpy(np.empty(0, dt.newbyteorder("="))).dtype
    except TypeError:
        raise ValueError(f"'{path}': dtype {dt.str!r} has no torch equivalent") from None


def _npy_tensor(buf: Any, dt: Any, tdt: Any, fortran: bool, shape: tuple[int, ...], contiguous: bool) -> Any:
    """The array of bytes `buf` (a 1-D uint8 tensor we may modify, or None for
    no bytes): byte-swapped to native order, in `shape`; a Fortran-order array
    made contiguous, or (contiguous=False) a transposed view as numpy's memmap has it."""
    if buf is None:
        return torch.empty(shape, dtype=tdt)
    if dt.byteorder == ">" and dt.itemsize > 1:
        # Byte swap on the device, per scalar: a complex number is two floats, each swapped on its own.
        unit = dt.itemsize // 2 if dt.kind == "c" else dt.itemsize
        buf = buf.view(-1, unit).flip(-1).reshape(-1)
    t = buf.view(tdt)
    if fortran and len(shape) > 1:  # 0-d and 1-d arrays are the same in either order
        t = t.reshape(tuple(reversed(shape))).permute(*reversed(range(len(shape))))
        return t.contiguous() if contiguous else t
    return t.reshape(shape)


def load_npy(
    path: str | os.PathLike[str], *, device: Any = "cuda", mmap_mode: str | None = None, return_stats: bool = False
) -> Any:
    """Loads a .npy file into a torch tensor on `device`: by default a
    contiguous copy, in one read of its data through the I/O engine (cuFile
    where GDS works, else the pinned pipeline, or posix to the CPU), as
    numpy.load returns a copy; or, with ``mmap_mode="c"`` on the CPU, a view of
    a private (copy-on-write) mapping of the file, as
    ``numpy.load(mmap_mode="c")``. Format 1, 2 or 3; C or Fortran order;
    little or big endian (converted to native on the device). Object dtypes
    are refused: it never unpickles.

    The default stays numpy's: ``np.load`` copies unless asked to map, and
    its users own the array it returns. The mapped mode costs no copy: pages
    are read when first touched, a write to the tensor copies the page for
    this process and never reaches the file, the mapping holds no file
    descriptor and is unmapped when the last tensor over it is freed. A
    Fortran-order array comes back as a transposed (non-contiguous) view, as
    numpy's memmap; a big-endian array (byte-swapped) or one whose data offset
    its element size does not divide is copied out of the mapping. As with
    any mapping, a file truncated by someone else while the tensor lives makes
    touching the lost pages fail with SIGBUS.

    Args:
        path: the .npy file.
        device: where the tensor lives. Default "cuda" (the current CUDA
            device); ``"cuda:N"`` or an int N, or ``"cpu"``.
        mmap_mode: None (default): a copy; ``"c"``: the private mapping (device
            "cpu" and a local file only). numpy's ``"r"`` and ``"r+"`` are
            refused: torch has no read-only tensors, and a tensor whose writes
            reached the file would alias its pages.
        return_stats: also return the ReadStats of the read (None for an
            empty array); a mapped load gives backend ``"mmap"``, ``nbytes``
            the bytes copied (0 for a view) and the bytes mapped in ``reason``.

    Returns:
        torch.Tensor: the array's shape and dtype; with ``return_stats=True``,
        ``(tensor, ReadStats | None)``.

    Raises:
        FileNotFoundError: `path` does not exist (PermissionError, IsADirectoryError likewise).
        ValueError: not a .npy file, a corrupt or truncated header, a dtype
            torch has no equivalent for (structured, object, strings);
            `mmap_mode` other than None and "c", or "c" with a GPU device or
            a URL (naming ``mmap_mode``).
        OSError: the file cannot be mapped, or the memory for the copy
            cannot be allocated; the message names the file.
        gdsio.BackendUnavailable: a GPU device where CUDA cannot be used
            (the message says why and to pass device="cpu").

    Example:
        >>> device = "cuda" if torch.cuda.is_available() else "cpu"
        >>> x = gdsio.load_npy("features.npy", device=device)
        >>> view = gdsio.load_npy("features.npy", device="cpu", mmap_mode="c")
    """
    if mmap_mode is not None:
        if mmap_mode in ("r", "readonly", "r+", "readwrite"):
            why = ("torch has no read-only tensors" if mmap_mode in ("r", "readonly")
                   else "a tensor whose writes reach the file would alias its pages")
            raise ValueError(f"mmap_mode={mmap_mode!r} is not offered: {why}; mmap_mode='c' maps it copy-on-write")
        if mmap_mode not in ("c", "copyonwrite"):
            raise ValueError(f"mmap_mode must be None or 'c' (copy-on-write), got {mmap_mode!r}")
        if not _is_cpu(device):
            raise ValueError(f"mmap_mode='c' maps the file into host memory: it needs device='cpu', "
                             f"got device={device!r}")
        if is_url(path):
            raise ValueError("mmap_mode='c' needs a local file, not a URL (pass mmap_mode=None to read it)")
        with File(path) as f:  # the checks and messages of every load; the mapping opens it again
            shown = f.path
        return _load_npy_mapped(path, shown, return_stats)
    with File(path) as f:  # one open: the header and the data come from the same file
        path = f.path
        offset, dt, fortran, shape = _npy_header(f)
        tdt = _npy_torch_dtype(dt, path)
        nbytes = math.prod(shape) * dt.itemsize
        buf = _alloc(nbytes, device, path)
        stats: ReadStats | None = f.read_into(buf, nbytes, offset) if nbytes else None
    t = _npy_tensor(buf if nbytes else None, dt, tdt, fortran, shape, contiguous=True)
    if not nbytes:
        t = t.to(buf.device)
    return (t, stats) if return_stats else t


class _InMemory:
    """What _npy_header reads of a File, over .npy bytes already in host memory."""

    kind = "memory"

    def __init__(self, data: Any, path: str) -> None:
        self.data, self.path = data, path  # a 1-D uint8 CPU tensor

    def size(self) -> int:
        return self.data.numel()

    def read_into(self, buf: Any, size: int, offset: int, backend: str | None = None) -> None:
        buf[:size] = self.data[offset : offset + size].numpy()


def npy_from_bytes(data: Any, where: str, *, device: Any = "cpu") -> Any:
    """The array that the .npy bytes `data` hold (a tar member's, say), as
    load_npy loads a file of those bytes: the same header checks (numpy.load's
    with allow_pickle=False), orders and byte orders, a copy on `device`.

    Args:
        data: the bytes: a 1-D uint8 CPU tensor (only read) or a bytes-like.
        where: what the bytes are, for messages ("shard.tar, member a.npy").
        device: where the tensor lives (default "cpu"); a copy of the data is made there.

    Returns:
        torch.Tensor: the array's shape and dtype, contiguous.

    Raises:
        ValueError: what load_npy raises for a file of these bytes, naming `where`.
        OSError: the memory for the copy cannot be allocated.
        gdsio.BackendUnavailable: a GPU device where CUDA cannot be used.
    """
    if not isinstance(data, torch.Tensor):
        data = torch.from_numpy(np.frombuffer(bytearray(data), np.uint8))  # writable: torch warns on read-only
    f = _InMemory(data.reshape(-1), where)
    offset, dt, fortran, shape = _npy_header(f)
    tdt = _npy_torch_dtype(dt, where)
    nbytes = math.prod(shape) * dt.itemsize
    buf = _alloc(nbytes, device, where)
    if not nbytes:
        return _npy_tensor(None, dt, tdt, fortran, shape, contiguous=True).to(buf.device)
    buf.copy_(f.data[offset : offset + nbytes])
    return _npy_tensor(buf, dt, tdt, fortran, shape, contiguous=True)


def _load_npy_mapped(path: Any, shown: str, return_stats: bool) -> Any:
    """load_npy's mapped mode: the header through preads of one descriptor,
    the array a view of a private mapping made from it (a copy out of it when
    it must be byte-swapped or realigned)."""
    t0 = time.perf_counter()
    fd, size = open_to_map(path, shown)
    try:
        offset, dt, fortran, shape = _npy_header(Descriptor(fd, shown, size))
        tdt = _npy_torch_dtype(dt, shown)
        nbytes = math.prod(shape) * dt.itemsize
        base = np.asarray(PrivateMapping(fd, size, shown, nbytes)) if nbytes else None
    finally:
        os.close(fd)  # the mapping keeps the file
    if base is None:
        t = _npy_tensor(None, dt, tdt, fortran, shape, contiguous=False)
        return (t, None) if return_stats else t
    raw = torch.frombuffer(base, dtype=torch.uint8, count=nbytes, offset=offset)
    swap = dt.byteorder == ">" and dt.itemsize > 1
    copied = nbytes if swap or offset % dt.itemsize else 0
    if copied:  # torch views need native byte order, and the element size to divide the address
        raw = raw.clone()
    t = _npy_tensor(raw, dt, tdt, fortran, shape, contiguous=False)
    if not return_stats:
        return t
    why = "byte-swapped" if swap else "realigned: its offset is not a multiple of its element size"
    return t, mapped_stats(shown, t0, size, copied, why)
