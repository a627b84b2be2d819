"""Bad destinations for the I/O bindings that write memory: read (each engine),
staged_read_host_engine, read_paths, read_file_into, StagingRing.copy and
cufile_register_buffer. Each call must raise ValueError or TypeError naming
the argument before a byte is read, and for the CUDA engines before any CUDA
call (the device is checked first, from the array's description alone).

The file read is this one (it exists wherever the cases run, and holds more
than the few bytes asked for)."""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
import torch

from boundary.fakes import on_device

_FILE = os.path.abspath(__file__)
_OPTS = {"threads": 1, "chunk_bytes": 4096, "staging_buffers": 2, "direct_io": False}


def _u8(n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=torch.uint8)


def _readonly(n: int) -> np.ndarray:
    a = np.zeros(n, np.uint8)
    a.flags.writeable = False
    return a


def writers(core: Any) -> dict[str, dict[str, Callable[[], object]]]:
    posix, pinned, cufile, batch = core.Engine.posix, core.Engine.pinned, core.Engine.cufile, core.Engine.cufile_batch

    def read(engine: Any, dst: Any, reqs: list[tuple[int, int, int]]) -> Callable[[], object]:
        def call() -> object:
            f = core.File(_FILE)
            try:
                return core.read(f, engine, dst, reqs, **_OPTS)
            finally:
                f.close()
        return call

    def staged(dst: Any, reqs: list[tuple[int, int, int]]) -> Callable[[], object]:
        def call() -> object:
            f = core.File(_FILE)
            try:
                return core.staged_read_host_engine(f, dst, reqs, threads=1, chunk_bytes=4096, staging_buffers=2)
            finally:
                f.close()
        return call

    def ring_copy(dst: Any, offset: int, n: int) -> Callable[[], object]:
        def call() -> object:
            r = core.StagingRing(2, 64, host_engine=True)
            try:
                return r.copy(r.next(), dst, offset, n)
            finally:
                r.close()
        return call

    def paths(dst: Any, reads: list[tuple[str, int, int, int]]) -> Callable[[], object]:
        return lambda: core.read_paths(dst, reads, threads=1)

    return {
        "read": {
            "wrong device": read(posix, on_device(_u8(16)), [(0, 8, 0)]),
            "wrong stride": read(posix, _u8(32)[::2], [(0, 8, 0)]),
            "too small": read(posix, _u8(8), [(0, 16, 0)]),
            "past the end": read(posix, _u8(16), [(12, 8, 0)]),
            "negative offset": read(posix, _u8(16), [(-4, 8, 0)]),
            "read-only": read(posix, _readonly(16), [(0, 8, 0)]),
            "read-only bytes": read(posix, bytes(16), [(0, 8, 0)]),
            "one of several too small": read(posix, [_u8(16), _u8(4)], [(0, 8, 0), (0, 8, 8)]),
            "arrays and requests differ in number": read(posix, [_u8(16), _u8(16)], [(0, 8, 0)]),
            "not an array": read(posix, 1234, [(0, 8, 0)]),
            "pinned: host memory": read(pinned, _u8(16), [(0, 8, 0)]),
            "cufile: host memory": read(cufile, _u8(16), [(0, 8, 0)]),
            "cufile_batch: host memory": read(batch, [_u8(16)], [(0, 8, 0)]),
            "pinned: devices differ": read(pinned, [on_device(_u8(16), 0), on_device(_u8(16), 1)],
                                           [(0, 8, 0), (0, 8, 8)]),
            "pinned: wrong stride": read(pinned, on_device(_u8(32)[::2]), [(0, 8, 0)]),
            "pinned: too small": read(pinned, on_device(_u8(8)), [(0, 16, 0)]),
            "cufile: too small": read(cufile, on_device(_u8(8)), [(4, 8, 0)]),
        },
        "staged_read_host_engine": {
            "wrong device": staged(on_device(_u8(16)), [(0, 8, 0)]),
            "wrong stride": staged(_u8(32)[::2], [(0, 8, 0)]),
            "too small": staged(_u8(8), [(0, 16, 0)]),
            "past the end": staged(_u8(16), [(9, 8, 0)]),
            "read-only": staged(_readonly(16), [(0, 8, 0)]),
        },
        "read_paths": {
            "wrong device": paths(on_device(_u8(16)), [(_FILE, 0, 8, 0)]),
            "wrong stride": paths(_u8(32)[::2], [(_FILE, 0, 8, 0)]),
            "too small": paths(_u8(8), [(_FILE, 0, 16, 0)]),
            "past the end": paths(_u8(16), [(_FILE, 0, 8, 0), (_FILE, 12, 8, 0)]),
            "negative offset": paths(_u8(16), [(_FILE, -1, 8, 0)]),
            "read-only": paths(_readonly(16), [(_FILE, 0, 8, 0)]),
        },
        "read_file_into": {
            "wrong device": lambda: core.read_file_into(_FILE, on_device(_u8(16))),
            "wrong stride": lambda: core.read_file_into(_FILE, _u8(32)[::2]),
            "too small": lambda: core.read_file_into(_FILE, _u8(8), 16),
            "read-only": lambda: core.read_file_into(_FILE, _readonly(16)),
        },
        "StagingRing.copy": {
            "wrong device": ring_copy(on_device(_u8(16)), 0, 8),
            "wrong stride": ring_copy(_u8(32)[::2], 0, 8),
            "too small": ring_copy(_u8(4), 0, 8),
            "past the end": ring_copy(_u8(16), 12, 8),
            "read-only": ring_copy(_readonly(16), 0, 8),
        },
        "cufile_register_buffer": {
            "wrong device": lambda: core.cufile_register_buffer(_u8(16)),
            "wrong stride": lambda: core.cufile_register_buffer(on_device(_u8(32)[::2])),
            "too small": lambda: core.cufile_register_buffer(on_device(_u8(0))),
        },
    }
