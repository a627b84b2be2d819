"""Tensor files straight to the device: safetensors and npy.

Headers are read and validated on the host; the data travels through the I/O
engine (``gdsio.read_into``) into one device allocation, so on a GDS machine
it never touches host memory.
"""

from __future__ import annotations

import errno
import json
import math
import os
import struct
from typing import Any, Iterable

import numpy as np
import torch

from .device import resolve_device
from .errors import NeedMoreData
from .io import File, ReadStats
from .io.buffers import host_empty
from .io.npy_header import parse_npy_header

__all__ = ["MAX_SAFETENSORS_HEADER", "load_npy", "load_safetensors", "read_npy_header", "read_safetensors_header"]

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


def load_safetensors(
    path: str | os.PathLike[str],
    *,
    device: Any = "cuda",
    keys: Iterable[str] | None = None,
    return_stats: bool = False,
) -> Any:
    """Loads a .safetensors file: the header is parsed and validated on the
    host, the data region travels in one read (the I/O engine: cuFile where
    GDS works, else the pinned pipeline, or posix to the CPU) into one
    allocation on `device`, and the tensors are zero-copy views of it (a
    tensor whose offset is not a multiple of its element size is copied to be
    aligned).

    Args:
        path: the .safetensors file.
        device: where the tensors live. Default "cuda" (the current CUDA
            device); ``"cuda:N"`` or an int N, or ``"cpu"``.
        keys: only these tensors (read in one batch into one packed allocation);
            default: all.
        return_stats: also return the ReadStats of the read (None when no
            byte had to be read).

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
        KeyError: a name in `keys` that the file does not hold.
        gdsio.BackendUnavailable: a GPU device where CUDA cannot be used
            (the message says why and to pass device="cpu").

    Example:
        >>> device = "cuda" if torch.cuda.is_available() else "cpu"
        >>> w = gdsio.load_safetensors("model.safetensors", device=device)
        >>> head = gdsio.load_safetensors("model.safetensors", device=device, keys=["lm_head.weight"])
    """
    with File(path) as f:  # one open: the header and the data come from the same file
        path = f.path
        data_start, header, _ = _safetensors_header(f)
        names = list(header) if keys is None else list(keys)
        missing = [k for k in names if k not in header]
        if missing:
            raise KeyError(f"'{path}' has no tensor(s) {missing}; it has {sorted(header)[:10]}...")
        for k in names:  # safetensors.torch's rule: torch packs F4 values in pairs along the last dimension
            e = header[k]
            if e["dtype"] in _SUB_BYTE_BITS and (not e["shape"] or e["shape"][-1] % 2):
                raise ValueError(f"'{path}', tensor {k!r}: an F4 tensor needs an even last dimension to load "
                                 f"into torch's float4_e2m1fn_x2 (two values a byte), got shape {e['shape']}")
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


def load_npy(path: str | os.PathLike[str], *, device: Any = "cuda", return_stats: bool = False) -> Any:
    """Loads a .npy file into a contiguous torch tensor on `device`, in one read
    of its data through the I/O engine (cuFile where GDS works, else the
    pinned pipeline, or posix to the CPU). Format 1, 2 or 3; C or Fortran
    order; little or big endian (converted to native on the device). Object
    dtypes are refused: it never unpickles.

    Args:
        path: the .npy file.
        device: where the tensor lives. Default "cuda" (the current CUDA
            device); ``"cuda:N"`` or an int N, or ``"cpu"``.
        return_stats: also return the ReadStats of the read (None for an empty array).

    Returns:
        torch.Tensor: the array's shape and dtype; with ``return_stats=True``,
        ``(tensor, ReadStats | None)``.

    Raises:
        FileNotFoundError: `path` does not exist (PermissionError, IsADirectoryError likewise).
        ValueError: not a .npy file, a corrupt or truncated header, a dtype
            torch has no equivalent for (structured, object, strings).
        gdsio.BackendUnavailable: a GPU device where CUDA cannot be used
            (the message says why and to pass device="cpu").

    Example:
        >>> device = "cuda" if torch.cuda.is_available() else "cpu"
        >>> x = gdsio.load_npy("features.npy", device=device)
    """
    with File(path) as f:  # one open: the header and the data come from the same file
        path = f.path
        offset, dt, fortran, shape = _npy_header(f)
        native = dt.newbyteorder("=")
        try:
            tdt = torch.from_numpy(np.empty(0, native)).dtype
        except TypeError:
            raise ValueError(f"'{path}': dtype {dt.str!r} has no torch equivalent") from None
        nbytes = math.prod(shape) * dt.itemsize
        buf = _alloc(nbytes, device, path)
        stats: ReadStats | None = f.read_into(buf, nbytes, offset) if nbytes else None
    if dt.byteorder == ">" and dt.itemsize > 1:
        # Byte swap on the device, per scalar: a complex number is two floats, each swapped on its own.
        unit = dt.itemsize // 2 if dt.kind == "c" else dt.itemsize
        buf = buf.view(-1, unit).flip(-1).reshape(-1)
    t = buf.view(tdt) if nbytes else torch.empty(0, dtype=tdt, device=buf.device)
    if fortran and len(shape) > 1:  # 0-d and 1-d arrays are the same in either order
        t = t.reshape(tuple(reversed(shape))).permute(*reversed(range(len(shape)))).contiguous()
    else:
        t = t.reshape(shape)
    return (t, stats) if return_stats else t
