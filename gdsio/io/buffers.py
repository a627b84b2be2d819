"""Destinations: what a caller may read into, reduced to (array, bytes, place).

Accepted: torch tensors (cpu or cuda), objects with ``__cuda_array_interface__``
(cupy, numba), numpy arrays and anything with the buffer protocol, and objects
with ``__dlpack__``. The destination must be contiguous and writable.

The core is handed the array itself (``Destination.array``), never its
address: it views the array once and checks its device, layout, writability
and extent again before writing (csrc/bindings/arrays.hpp). The checks here
come first for their users' messages.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from typing import Any

import numpy as np

from .. import _core
from ..config import current

# torch is imported inside the functions that use it: `import gdsio` imports this module and
# stays light (no torch) for host reads into numpy buffers (tests/test_build.py).

__all__ = ["HUGE_PAGES_MIN", "Destination", "host_empty", "resolve", "stream_handle"]


@dataclasses.dataclass
class Destination:
    array: Any  # what the core views and writes into (a torch tensor, numpy array, CUDA array object)
    nbytes: int
    kind: str  # "cpu" or "cuda"
    device: int  # CUDA device index, -1 for host memory
    stream: int  # cudaStream_t as an int (0: the legacy default stream)
    owner: Any  # keeps the memory alive while the read runs

    def describe(self) -> str:
        return "host memory" if self.kind == "cpu" else f"cuda:{self.device}"


HUGE_PAGES_MIN = 8 << 20  # smaller buffers gain little from 2 MiB pages (and would round up to them)


def host_empty(nbytes: int, align: int = 0, *, pool_from: int = HUGE_PAGES_MIN) -> Any:
    """A new uint8 CPU tensor of `nbytes` (starting `align`-aligned when asked,
    up to the page size). From `pool_from` bytes on (8 MiB unless asked) it is
    a block of the core's host pool (csrc/core/host_pool.hpp): a mapping of
    its own (from 8 MiB with the huge_pages setting, 2 MiB-aligned and advised
    MADV_HUGEPAGE before its first touch), which goes back to the pool when
    the tensor and its views are freed, so that the next large buffer reuses
    pages already faulted in instead of faulting and zeroing fresh ones
    (malloc's heap does that for small buffers, and gives large ones back to
    the kernel). Idle blocks are lazily freed (MADV_FREE) and capped."""
    import torch

    if nbytes >= pool_from:
        arr, _ = _core.host_buffer(nbytes, huge_pages=nbytes >= HUGE_PAGES_MIN and current().huge_pages)
        return torch.from_numpy(arr)  # page-aligned: any align up to 4096 holds
    if align:
        raw = torch.empty(nbytes + align, dtype=torch.uint8)
        # The address as a number, for alignment arithmetic only (as in gdsio/tensors.py and the bench):
        # addresses never reach the core, which is handed the tensor.
        skip = (-raw.data_ptr()) % align
        return raw[skip : skip + nbytes]
    return torch.empty(nbytes, dtype=torch.uint8)


def stream_handle(stream: Any) -> int:
    """A cudaStream_t as an int from an int, a torch.cuda.Stream (.cuda_stream)
    or a cupy Stream (.ptr). 1 (cudaStreamLegacy) and 2 (cudaStreamPerThread)
    become 0: gdsio's reader threads would otherwise take 2 as their own
    per-thread stream, not the caller's; the legacy default stream orders
    after both."""
    if stream is None:
        return 0
    for attr in ("cuda_stream", "ptr"):
        if not isinstance(stream, int) and hasattr(stream, attr):
            stream = getattr(stream, attr)
            break
    try:
        h = int(stream)
    except (TypeError, ValueError):
        raise TypeError(f"stream must be an int (a cudaStream_t), a torch.cuda.Stream or a cupy Stream; "
                        f"got {type(stream).__name__}") from None
    return 0 if h in (1, 2) else h


def _is_torch_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _core_array(t: Any) -> Any:
    """`t` as the core can view it through DLPack: detached (a tensor that
    requires grad is not exported), its bytes where DLPack has no such dtype.
    (A host tensor needs no numpy view: the core takes torch's exporter
    directly, 0.8 us a view against 1.3 through Tensor.numpy().)"""
    if t.requires_grad:
        t = t.detach()
    if t.dtype in _dtype_kinds():
        return t.reshape(-1).view(sys.modules["torch"].uint8)
    return t


@functools.cache
def _dtype_kinds() -> frozenset[Any]:
    """The torch dtypes DLPack does not describe: the bits* types and
    float4_e2m1fn_x2, two values an element."""
    torch = sys.modules["torch"]
    bytes_only = ("bits1x8", "bits2x4", "bits4x2", "bits8", "bits16", "float4_e2m1fn_x2")
    return frozenset(getattr(torch, n) for n in bytes_only if hasattr(torch, n))


def _from_torch(t: Any, stream: int | None, name: str) -> Destination:
    import torch

    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (call .contiguous() first); got strides {tuple(t.stride())}")
    if t.requires_grad and t.is_leaf:
        raise ValueError(f"{name} requires grad; read into a tensor made under torch.no_grad() or .detach() it")
    nbytes = t.numel() * t.element_size()
    if t.device.type == "cpu":
        return Destination(_core_array(t), nbytes, "cpu", -1, 0, t)
    if t.device.type == "cuda":
        dev = t.device.index if t.device.index is not None else torch.cuda.current_device()
        if stream is None:
            stream = torch.cuda.current_stream(dev).cuda_stream
        return Destination(_core_array(t), nbytes, "cuda", dev, stream_handle(stream), t)
    raise ValueError(f"{name} lives on {t.device}; gdsio reads into cpu or cuda tensors")


def _c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...] | None, itemsize: int) -> bool:
    if strides is None:
        return True
    expected = itemsize
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim != 1 and stride != expected:
            return False
        expected *= dim
    return True


def _from_cai(obj: Any, stream: int | None, name: str) -> Destination:
    cai = obj.__cuda_array_interface__
    ptr, readonly = cai["data"]
    if readonly:
        raise ValueError(f"{name} is read-only")
    shape = tuple(cai["shape"])
    itemsize = np.dtype(cai["typestr"]).itemsize
    if not _c_contiguous(shape, cai.get("strides"), itemsize):
        raise ValueError(f"{name} must be C-contiguous; got strides {cai.get('strides')}")
    nbytes = math.prod(shape) * itemsize
    device = -1
    if ptr:
        kind, device = _core.cuda_pointer_kind(obj)
        if kind not in ("device", "managed"):
            raise ValueError(f"{name} exposes __cuda_array_interface__ but points to {kind} memory")
    if stream is None:
        cupy = sys.modules.get("cupy")
        if cupy is not None and isinstance(obj, cupy.ndarray):
            with cupy.cuda.Device(obj.device.id):  # the current stream of the array's device
                stream = cupy.cuda.get_current_stream().ptr
        else:
            stream = cai.get("stream")  # None, 1 and 2 name the default streams
    return Destination(obj, nbytes, "cuda", device, stream_handle(stream), obj)


def _from_host_buffer(obj: Any, name: str) -> Destination:
    if isinstance(obj, np.ndarray):
        arr = obj
    else:
        try:
            mv = memoryview(obj)
        except TypeError:
            raise TypeError(
                f"{name} must be a torch tensor, a cupy/numpy array, or an object with "
                f"__cuda_array_interface__, __dlpack__ or the buffer protocol; got {type(obj).__name__}"
            ) from None
        if mv.readonly:
            raise ValueError(f"{name} is read-only ({type(obj).__name__})")
        if not mv.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous")
        arr = np.frombuffer(mv.cast("B") if mv.ndim else mv, dtype=np.uint8)
    if not arr.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous; got strides {arr.strides}")
    if not arr.flags.writeable:
        raise ValueError(f"{name} is read-only")
    return Destination(arr, arr.nbytes, "cpu", -1, 0, (obj, arr))


def resolve(obj: Any, *, stream: int | None = None, name: str = "out") -> Destination:
    """Reduces a destination object to a Destination; TypeError/ValueError name `name`."""
    if _is_torch_tensor(obj):
        return _from_torch(obj, stream, name)
    if isinstance(obj, np.ndarray):
        return _from_host_buffer(obj, name)
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cai(obj, stream, name)
    if hasattr(obj, "__dlpack__"):
        import torch

        return _from_torch(torch.from_dlpack(obj), stream, name)
    return _from_host_buffer(obj, name)
