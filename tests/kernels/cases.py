"""The emulation's case file: the GPU tests' own cases (the ``*_case``
functions and lists of tests/transforms/test_transforms_gpu.py,
``emulated_cases`` of tests/transforms/test_transforms_v2_gpu.py, the pixel
cases of tests/image/test_image_gpu.py), run through gdsio's CPU path while
the core calls they make are recorded with the bytes each call may read. The
replay driver (replay.cpp) runs every recorded call on the CPU twin and on the
emulated kernels and compares.

Adding a kernel's cases: a recorder in RECORDERS for its ``_core`` function
(which arrays it reads, how many bytes of each may be read), an op handler
in tests/kernels/ops_*.cpp, and its GPU test's cases in ``write_cases``.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import re
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import numpy as np

from gdsio import _core

_ELEM = {"uint8": 1, "float32": 4, "float16": 2, "bfloat16": 2}


def _f32(values: Any) -> list[str]:
    """float32 values as the binding makes them, written to round-trip."""
    return ["%.9g" % np.float32(v) for v in values]


def _bytes(ptr: int, n: int) -> bytes:
    return ctypes.string_at(ptr, n) if n else b""


class Recorder:
    """Wraps the _core functions of RECORDERS; each CPU call they get is written
    as a record named after the current case (then the real function runs)."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.label = "?"
        self.calls = 0
        self.records = 0
        self.written: set[str] = set()  # blobs already in the file (many cases share an image)

    @contextlib.contextmanager
    def case(self, label: str) -> Iterator[None]:
        self.label, self.calls = label, 0
        yield

    def write(self, op: str, keys: list[tuple[str, list[Any]]], blobs: list[bytes]) -> None:
        self.calls += 1
        self.records += 1
        name = f"{self.label}#{self.calls}".replace("\n", " ")
        head = [f"case {name}", f"op {op}"] + [" ".join([k, *map(str, v)]) for k, v in keys]
        self.out.write(("\n".join(head) + "\n").encode())
        for b in blobs:
            key = hashlib.sha1(b).hexdigest()
            if key in self.written:
                self.out.write(f"same {key}\n".encode())
            else:
                self.written.add(key)
                self.out.write(f"blob {len(b)} {key}\n".encode() + b + b"\n")
        self.out.write(b"end\n")

    @contextlib.contextmanager
    def installed(self) -> Iterator["Recorder"]:
        saved = {name: getattr(_core, name) for name in RECORDERS}
        try:
            for name, rec in RECORDERS.items():
                setattr(_core, name, _wrap(self, saved[name], rec))
            yield self
        finally:
            for name, fn in saved.items():
                setattr(_core, name, fn)


def _wrap(r: Recorder, real: Callable, rec: Callable) -> Callable:
    def call(*args: Any, **kw: Any) -> Any:
        if kw.get("device", -1) < 0:
            rec(r, *args, **kw)
        return real(*args, **kw)

    return call


# --------------------------------------------------------------------------- one recorder per core call


def _views(images: Any) -> list[tuple[int, list[int], list[int]]]:
    """(data, shape, strides in elements) of each (C, H, W) image of a batch
    argument: a sequence of arrays, or one (N, C, H, W) array."""
    if isinstance(images, (list, tuple)):
        return [(v.data, v.shape, v.strides) for v in map(_core.array_view, images)]
    v = _core.array_view(images)
    step = v.strides[0] * _itemsize(v.dtype)
    return [(v.data + i * step, v.shape[1:], v.strides[1:]) for i in range(v.shape[0])]


def _itemsize(dtype: str) -> int:
    """Bytes of an element of an ArrayView's dtype ("uint8", "bfloat16", "bool", "dlpack type 5/64")."""
    return 1 if dtype == "bool" else int(re.findall(r"\d+", dtype)[-1]) // 8


def _resize(r: Recorder, images: Any, *, out: Any, filter: str, antialias: bool, boxes: Any = None,
            flips: Any = None, scale: bool = False, mean: Any = None, std: Any = None, **_: Any) -> None:
    o = _core.array_view(out, "out")
    if o.device >= 0:
        return  # a GPU call: the emulation replays the CPU twin's
    _, channels, out_h, out_w = o.shape
    keys: list[tuple[str, list[Any]]] = [
        ("channels", [channels]), ("out_h", [out_h]), ("out_w", [out_w]), ("filter", [filter]),
        ("antialias", [int(antialias)]), ("out_dtype", [o.dtype]), ("scale", [int(scale)]),
    ]
    if mean is not None:
        keys += [("mean", _f32(mean)), ("std", _f32(std))]
    blobs = []
    for i, (data, (_, h, w), (cs, rs, ps)) in enumerate(_views(images)):
        # The CPU path also reads interleaved pixels (pixel stride C); the
        # kernels read planes only, so a GPU test's case must be planes.
        if ps != 1:
            raise ValueError(f"a GPU test case resized interleaved pixels (pixel stride {ps}): the kernels read planes")
        if boxes is not None:  # the crop: a pointer offset, as the binding makes it
            top, left, h, w = (int(v) for v in np.asarray(boxes)[i])
            data += top * rs + left
        # Channel 0's top-left to the last channel's bottom-right: what the call may read.
        blobs.append(_bytes(data, (channels - 1) * cs + (h - 1) * rs + w))
        flip = flips is not None and bool(np.asarray(flips)[i])
        keys.append(("image", [cs, rs, h, w, int(flip)]))
    r.write("resize", keys, blobs)


def _pad(r: Recorder, src: Any, out: Any, *, left: int, top: int, right: int, bottom: int, mode: str,
         fill: list[int], **_: Any) -> None:
    v = _core.array_view(src, "src")
    if v.device >= 0:
        return
    *lead, height, width = v.shape
    planes = int(np.prod(lead, dtype=np.int64)) if lead else 1
    channels = lead[-1] if lead else 1
    elem_size = _itemsize(v.dtype)
    keys = [("planes", [planes]), ("channels", [channels]), ("height", [height]), ("width", [width]),
            ("elem_size", [elem_size]), ("ltrb", [left, top, right, bottom]), ("mode", [mode]),
            ("fill", [int(f) for f in fill])]
    r.write("pad", keys, [_bytes(v.data, planes * height * width * elem_size)])


def _color(r: Recorder, images: Any, outs: Any, ops: np.ndarray, factors: np.ndarray, **_: Any) -> None:
    views = _views(images)
    first = _core.array_view(images[0] if isinstance(images, (list, tuple)) else images)
    if first.device >= 0:
        return
    dtype, channels = first.dtype, views[0][1][0]
    keys: list[tuple[str, list[Any]]] = [("dtype", [dtype]), ("channels", [channels])]
    blobs = []
    for (data, (_, h, w), (cs, rs, _)), op, f in zip(views, np.asarray(ops).tolist(),
                                                     np.asarray(factors, np.float64).tolist()):
        # Channel 0's top-left to the last channel's bottom-right, in elements.
        blobs.append(_bytes(data, ((channels - 1) * cs + (h - 1) * rs + w) * _ELEM[dtype]))
        # The factors in double: the kernels take (float)f and (float)(1.0 - f).
        keys.append(("image", [cs, rs, h, w, *op, *("%r" % float(v) for v in f)]))
    r.write("color", keys, blobs)


def _decode(r: Recorder, jobs: list[Any], **_: Any) -> None:
    keys, blobs = [], []
    for j in jobs:  # _core.PixelJob
        rest = [j.height, j.width, j.stride_c, j.stride_y, j.stride_x, j.src_channels, j.dst_channels,
                int(j.sample), int(j.out), int(j.convert), j.maxval]
        keys.append(("job", rest))  # height width stride_c stride_y stride_x src_ch dst_ch sample out convert maxval
        # From the first sample (offset bytes into the src array) to the end of src: what the job may read.
        blobs.append(_bytes(_core.array_view(j.src, "src").data + j.offset, j.src_bytes))
    r.write("decode", keys, blobs)


RECORDERS: dict[str, Callable] = {
    "tf_resize": _resize,
    "tf_pad": _pad,
    "tf_color": _color,
    "img_decode_pixels_cpu": _decode,
}


# --------------------------------------------------------------------------- the GPU tests' cases


def write_cases(path: Path) -> int:
    """Writes the case file; returns the number of records. Imports the GPU
    test modules (tests/ must be on sys.path, as it is under pytest; the
    GPU tests' folders are added here)."""
    import sys

    for folder in ("image", "transforms"):  # the GPU tests' folders
        where = str(Path(__file__).resolve().parents[1] / folder)
        if where not in sys.path:
            sys.path.insert(0, where)
    import test_image_gpu as D
    import test_transforms_gpu as G
    import test_transforms_v2_gpu as V

    import gdsio.image as gi
    from gdsio import transforms as T

    with open(path, "wb") as f, Recorder(f).installed() as r:
        for filt, aa in G.FILTERS:
            tag = f"{filt}-{'aa' if aa else 'noaa'}"
            for shape, size in G.RESIZE_SHAPES:
                with r.case(f"test_resize_equals_cpu[{tag}-{shape}-{size}]"):
                    G.resize_case("cpu", filt, aa, shape, size)
            with r.case(f"test_device_windows_equal_host_windows[{tag}]"):
                T.resize(G.window_images(), list(G.WINDOW_SIZE), interpolation=filt, antialias=aa)
            for dtype in G.FUSED_DTYPES:
                with r.case(f"test_fused_equals_cpu[{tag}-{str(dtype).split('.')[-1]}]"):
                    G.fused_case("cpu", dtype, filt, aa)
        with r.case("test_list_of_different_sizes_is_one_launch_per_stage"):
            T.resize(G.list_images(), [224, 224], interpolation="bicubic")
        with r.case("test_batch_larger_than_one_launch"):
            G.big_batch_case("cpu")
        with r.case("test_batch_tensor_and_crop_views"):
            G.view_cases("cpu")

        for name, run in V.emulated_cases():  # colour ops, color_jitter, pad, the v2 forms
            with r.case(name):
                run()

        for mode in D.MODES:
            for name, data, kw in D.pixel_cases():
                with r.case(f"test_kernels_equal_the_cpu_twin[{mode}-{name}]"):
                    try:
                        gi.decode(data, device="cpu", mode=mode, **kw)
                    except ValueError:
                        pass  # refused before any kernel (the GPU test checks the GPU refuses it too)
        with r.case("test_one_launch_per_128_images"):
            gi.decode([D.pnm_bytes(a) for a in D.many_images()], device="cpu", mode="GRAY")
        with r.case("test_big_image_and_side_stream"):
            gi.decode(D.pnm_bytes(D.rand(D.BIG_SHAPE)), device="cpu", mode="RGB")
        return r.records
