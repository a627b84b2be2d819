"""Arrays that say they live on a CUDA device, for machines without one.

`on_device(tensor, device)` wraps a host tensor in an object whose __dlpack__
describes the same memory but a CUDA device (DLPack device type 2). A binding
must refuse it from the description alone (wrong device: ValueError naming the
argument) and never touch its bytes; if one did, it would touch host memory
that ASan watches, not crash on a device address. Built with ctypes from the
DLPack C ABI (DLManagedTensor in a "dltensor" capsule), no compiled helper.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

_CODES = {torch.uint8: (1, 8), torch.uint16: (1, 16), torch.int32: (0, 32), torch.int64: (0, 64),
          torch.float16: (2, 16), torch.float32: (2, 32), torch.bfloat16: (4, 16)}


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class on_device:
    """`tensor`'s memory, described as on CUDA device `device` (the tensor
    stays alive as long as this object)."""

    def __init__(self, tensor: torch.Tensor, device: int = 0) -> None:
        code, bits = _CODES[tensor.dtype]
        self._tensor = tensor
        self._shape = (ctypes.c_int64 * max(tensor.dim(), 1))(*tensor.shape)
        self._strides = (ctypes.c_int64 * max(tensor.dim(), 1))(*tensor.stride())
        self._managed = _Managed(_Tensor(tensor.data_ptr(), _Device(2, device), tensor.dim(), _DataType(code, bits, 1),
                                         self._shape, self._strides, 0), None, None)
        self.shape = tuple(tensor.shape)
        self.device = device

    def __dlpack__(self, **_: Any) -> Any:
        # No capsule destructor: the memory and the struct belong to this object.
        return _capsule_new(ctypes.addressof(self._managed), b"dltensor", None)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self.device)
