"""load_safetensors and load_npy: identical to the reference loaders, and
every header defect caught with a message naming the file."""

from __future__ import annotations

import gc
import json
import os
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

import gdsio
from gdsio.tensors import load_npy, load_safetensors, read_safetensors_header

import safetensors.torch as sft  # a test dependency ([test] extra)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def all_dtype_tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 5, generator=g)
    out = {
        "f32": base, "f64": base.double(), "f16": base.half(), "bf16": base.bfloat16(),
        "i8": (base * 50).to(torch.int8), "u8": (base * 50).to(torch.uint8), "i16": (base * 1000).to(torch.int16),
        "i32": (base * 1e6).to(torch.int32), "i64": (base * 1e9).to(torch.int64), "bool": base > 0,
        "c64": torch.complex(base, -base), "scalar": torch.tensor(3.5), "empty": torch.zeros(0, 4),
        "odd": torch.arange(7, dtype=torch.uint8),
    }
    for name in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64"):
        if hasattr(torch, name):
            dt = getattr(torch, name)
            out[name] = (base.abs() * 3).to(dt) if "float8" in name else (base.abs() * 100).to(dt)
    for name in ("float8_e8m0fnu", "float4_e2m1fn_x2"):  # torch 2.7 and 2.8; safetensors' F8_E8M0 and F4
        if hasattr(torch, name):  # their bits drawn as bytes (F4: two values a byte)
            out[name] = torch.randint(0, 256, (6, 4), generator=g, dtype=torch.uint8).view(getattr(torch, name))
    return out


def test_safetensors_matches_reference_loader(tmp_path, no_leaks):
    tensors = all_dtype_tensors()
    p = tmp_path / "m.safetensors"
    sft.save_file(tensors, str(p), metadata={"format": "pt"})
    ref = sft.load_file(str(p))
    got, stats = load_safetensors(p, device="cpu", mmap=False, return_stats=True)
    assert set(got) == set(ref)
    for k in ref:
        assert same(got[k], ref[k]), k
    assert stats.backend == "posix"
    # One allocation: the aligned tensors are views of one storage.
    ptrs = {got[k].untyped_storage().data_ptr() for k in ("f32", "f64", "i64", "u8")}
    assert len(ptrs) == 1


@pytest.mark.parametrize("mmap", [None, False], ids=["mapped", "copied"])
def test_safetensors_keys(tmp_path, mmap):
    tensors = all_dtype_tensors()
    p = tmp_path / "m.safetensors"
    sft.save_file(tensors, str(p))
    keys = ["bf16", "odd", "empty"] + [k for k in ("float4_e2m1fn_x2",) if k in tensors]
    got = gdsio.load_safetensors(p, device="cpu", keys=keys, mmap=mmap)
    assert list(got) == keys
    for k in got:
        assert same(got[k], tensors[k]), k
    with pytest.raises(KeyError, match="nope"):
        gdsio.load_safetensors(p, device="cpu", keys=["nope"])


def test_safetensors_f4_shape_counts_values_torch_counts_pairs(tmp_path):
    """An F4 tensor of shape [2, 4] in the file is 4 bytes; torch's float4_e2m1fn_x2
    holds it as [2, 2], as safetensors.torch.load_file gives it."""
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this torch has no float4_e2m1fn_x2")
    t = torch.tensor([[0x21, 0x43], [0x65, 0x87]], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    p = tmp_path / "f4.safetensors"
    sft.save_file({"w": t}, str(p))
    _, header, _ = read_safetensors_header(p)
    assert header["w"] == {"dtype": "F4", "shape": [2, 4], "data_offsets": [0, 4]}
    got = load_safetensors(p, device="cpu")["w"]
    assert same(got, sft.load_file(str(p))["w"]) and same(got, t)


@pytest.mark.parametrize("mmap", [None, False], ids=["mapped", "copied"])
def test_safetensors_unaligned_offsets(tmp_path, mmap):
    """The format does not promise aligned offsets; such tensors are copied."""
    f = np.array([1.5, -2.25], "<f4").tobytes()
    header = {"odd": {"dtype": "U8", "shape": [7], "data_offsets": [0, 7]},
              "f": {"dtype": "F32", "shape": [2], "data_offsets": [7, 15]}}
    p = write_raw_safetensors(tmp_path / "u.safetensors", header, bytes(range(7)) + f)
    ref = sft.load_file(p)
    for keys in (None, ["f"]):
        got = load_safetensors(p, device="cpu", keys=keys, mmap=mmap)
        for k in got:
            assert same(got[k], ref[k]), k
            assert got[k].data_ptr() % got[k].element_size() == 0, k


def write_raw_safetensors(path, header: dict | bytes, data: bytes = b"", length: int | None = None) -> str:
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(h) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + h + data)
    return str(path)


@pytest.mark.parametrize(
    "header, data, length, match",
    [
        ({}, b"", 10**9, "exceeds the 100000000-byte cap"),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"", 500, "runs past the end"),
        (b"{not json", b"", None, "not valid JSON"),
        (b"[1, 2]", b"", None, "must be a JSON object"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4, None, "outside the data region"),
        ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8, None, "needs 12 bytes"),
        ({"a": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}}, b"\0", None, "dtype 'Q7'"),
        ({"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}}, b"\0", None, "non-negative"),
        ({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
          "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, b"\0" * 6, None, "overlap"),
        ({"a": {"dtype": "U8", "shape": [1]}}, b"\0", None, "needs dtype, shape and data_offsets"),
        ({"__metadata__": {"a": 1}}, b"", None, "__metadata__"),
    ],
)
@pytest.mark.parametrize("mmap", [None, False], ids=["mapped", "copied"])
def test_safetensors_header_defects(tmp_path, header, data, length, match, mmap, no_leaks):
    p = write_raw_safetensors(tmp_path / "bad.safetensors", header, data, length)
    with pytest.raises(ValueError, match=match) as ei:
        load_safetensors(p, device="cpu", mmap=mmap)
    assert "bad.safetensors" in str(ei.value)


@pytest.mark.parametrize("mmap", [None, False], ids=["mapped", "copied"])
def test_safetensors_too_short_and_missing(tmp_path, mmap):
    p = tmp_path / "short.safetensors"
    p.write_bytes(b"\1\2\3")
    with pytest.raises(ValueError, match="too short"):
        load_safetensors(p, device="cpu", mmap=mmap)
    p.write_bytes(b"")
    with pytest.raises(ValueError, match="short.safetensors' is not a safetensors file: 0 bytes"):
        load_safetensors(p, device="cpu", mmap=mmap)
    with pytest.raises(FileNotFoundError):
        load_safetensors(tmp_path / "none.safetensors", device="cpu", mmap=mmap)


# npy files of every layout and byte order gdsio reads (the copied and the mapped loads take them all).
NPY_ARRAYS = {
    "c-le": np.arange(24, dtype="<i4").reshape(2, 3, 4),
    "c-be": np.arange(24, dtype=">i4").reshape(2, 3, 4),
    "f-le": np.asfortranarray(np.arange(24, dtype="<f8").reshape(2, 3, 4)),
    "f-be": np.asfortranarray(np.arange(12, dtype=">f4").reshape(3, 4)),
    "scalar-be": np.array(2.5, dtype=">f2"),
    "empty": np.zeros((0, 3), np.uint16),
    "bool": np.array([True, False, True]),
    "complex": (np.arange(6) + 1j).astype(np.complex64),
    "complex-be": (np.arange(6) + 10j * np.arange(6)).astype(">c8"),
    "complex128-f-be": np.asfortranarray((np.arange(6) - 3j).astype(">c16").reshape(2, 3)),
    "u8": np.arange(10, dtype=np.uint8),
}


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("arr", list(NPY_ARRAYS.values()), ids=list(NPY_ARRAYS))
def test_npy_matches_numpy(tmp_path, arr, version):
    p = tmp_path / "a.npy"
    with open(p, "wb") as f:
        np.lib.format.write_array(f, arr, version=version)
    t = load_npy(p, device="cpu")
    assert t.is_contiguous()
    assert tuple(t.shape) == arr.shape
    assert np.array_equal(t.numpy(), np.load(p))
    assert t.numpy().dtype == arr.dtype.newbyteorder("=")


def test_npy_refuses_objects_and_structs(tmp_path, no_leaks):
    p = tmp_path / "obj.npy"
    np.save(p, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="never runs"):
        load_npy(p, device="cpu")
    q = tmp_path / "rec.npy"
    np.save(q, np.zeros(3, dtype=[("x", "<f4"), ("y", "<i4")]))
    with pytest.raises(ValueError, match="structured"):
        load_npy(q, device="cpu")


@pytest.mark.parametrize("mmap_mode", [None, "c"], ids=["copied", "mapped"])
def test_npy_defects(tmp_path, mmap_mode, no_leaks):
    p = tmp_path / "bad.npy"
    p.write_bytes(b"NOTNPY" + b"\0" * 20)
    with pytest.raises(ValueError, match="bad magic"):
        load_npy(p, device="cpu", mmap_mode=mmap_mode)
    np.save(p, np.arange(100, dtype=np.int64))
    raw = p.read_bytes()
    p.write_bytes(raw[:-8])
    with pytest.raises(ValueError, match="truncated"):
        load_npy(p, device="cpu", mmap_mode=mmap_mode)
    p.write_bytes(raw[:8] + b"\x09\x00" + b"{'descr': __import__('os')}")
    with pytest.raises(ValueError, match="bad.npy"):
        load_npy(p, device="cpu", mmap_mode=mmap_mode)
    p.write_bytes(b"\x93NUMPY\x07\x00" + b"\0" * 20)
    with pytest.raises(ValueError, match="unsupported .npy format version 7"):
        load_npy(p, device="cpu", mmap_mode=mmap_mode)


def test_npy_from_many_threads(tmp_path):
    """Loaders parse headers from reader threads at once."""
    import concurrent.futures

    paths = []
    for i in range(16):
        p = tmp_path / f"{i}.npy"
        np.save(p, np.full((4, 5), i, np.int32))
        paths.append(p)
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        for _ in range(5):
            got = list(ex.map(lambda p: int(load_npy(p, device="cpu")[0, 0]), paths))
            assert got == list(range(16))


def test_npy_header_longer_than_numpys_cap_is_refused(tmp_path):
    import struct

    p = tmp_path / "long.npy"
    text = ("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }" + " " * 20000 + "\n").encode()
    p.write_bytes(b"\x93NUMPY\x02\x00" + struct.pack("<I", len(text)) + text + bytes(4))
    with pytest.raises(ValueError, match="longer than 10000"):
        load_npy(p, device="cpu")


# ---- the mapped mode (device="cpu") ---------------------------------------------------------------------


def mappings_of(path) -> list[str]:
    """The lines of /proc/self/maps that map `path`."""
    real = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        return [line for line in f if line.rstrip("\n").endswith(" " + real)]


def test_safetensors_maps_privately_by_default_on_the_cpu(tmp_path, no_leaks):
    """As safetensors.torch.load_file: views of a private (copy-on-write)
    mapping, a storage each, no descriptor held, nothing read."""
    tensors = all_dtype_tensors()
    p = tmp_path / "m.safetensors"
    sft.save_file(tensors, str(p), metadata={"format": "pt"})
    ref = sft.load_file(str(p))
    got, stats = load_safetensors(p, device="cpu", return_stats=True)
    assert set(got) == set(ref)
    for k in ref:
        assert same(got[k], ref[k]), k
    assert (stats.backend, stats.nbytes, stats.path) == ("mmap", 0, str(p))
    assert f"{p.stat().st_size} bytes mapped privately" in stats.reason
    del ref
    gc.collect()
    lines = mappings_of(p)
    assert len(lines) == 1 and lines[0].split()[1] == "rw-p", lines  # "p": private, copy-on-write
    for k, t in got.items():
        if t.numel():
            assert t.untyped_storage().data_ptr() == t.data_ptr(), k  # a storage of its own, as safetensors
            assert t.untyped_storage().nbytes() == t.numel() * t.element_size() or k == "float4_e2m1fn_x2", k
    no_leaks()  # the mapping holds no descriptor
    assert load_safetensors(p, device="cpu", mmap=True).keys() == got.keys()


@pytest.mark.parametrize("mmap", [None, True])
def test_safetensors_mapped_writes_never_reach_the_file(tmp_path, mmap):
    p = tmp_path / "w.safetensors"
    sft.save_file({"a": torch.arange(4096, dtype=torch.float32), "b": torch.ones(3, dtype=torch.int16)}, str(p))
    before = p.read_bytes()
    got = load_safetensors(p, device="cpu", mmap=mmap)
    other = load_safetensors(p, device="cpu", mmap=mmap)
    got["a"].fill_(-1.0)
    got["b"][1] = 7
    assert got["a"].eq(-1.0).all() and got["b"].tolist() == [1, 7, 1]
    assert p.read_bytes() == before
    assert torch.equal(other["a"], torch.arange(4096, dtype=torch.float32)) and other["b"].tolist() == [1, 1, 1]
    assert torch.equal(sft.load_file(str(p))["a"], torch.arange(4096, dtype=torch.float32))


def test_safetensors_mapping_lives_while_a_tensor_does(tmp_path, no_leaks):
    p = tmp_path / "l.safetensors"
    sft.save_file({f"t{i}": torch.full((1000,), float(i)) for i in range(5)}, str(p))
    got = load_safetensors(p, device="cpu")
    assert len(mappings_of(p)) == 1
    keep = got["t3"][10:20]
    del got
    gc.collect()
    assert len(mappings_of(p)) == 1 and keep.eq(3.0).all()
    del keep
    gc.collect()
    assert mappings_of(p) == []
    for _ in range(20):  # loads in a loop leave no mapping and no descriptor behind
        got = load_safetensors(p, device="cpu")
        assert float(got["t4"].sum()) == 4000.0
    del got
    gc.collect()
    assert mappings_of(p) == []


def test_safetensors_mapped_unaligned_tensors_are_copies(tmp_path):
    f = np.array([1.5, -2.25], "<f4").tobytes()
    header = {"odd": {"dtype": "U8", "shape": [7], "data_offsets": [0, 7]},
              "f": {"dtype": "F32", "shape": [2], "data_offsets": [7, 15]}}
    p = write_raw_safetensors(tmp_path / "u.safetensors", header, bytes(range(7)) + f)
    got, stats = load_safetensors(p, device="cpu", return_stats=True)
    assert got["f"].tolist() == [1.5, -2.25] and got["f"].data_ptr() % 4 == 0
    assert got["odd"].tolist() == list(range(7))
    assert stats.backend == "mmap" and stats.nbytes == 8 and "8 bytes copied" in stats.reason
    got["odd"][0] = 99
    got["f"][0] = 0.0
    assert Path(p).read_bytes()[-15:] == bytes(range(7)) + f


def test_mmap_argument_is_checked(tmp_path):
    p = tmp_path / "a.safetensors"
    sft.save_file({"a": torch.ones(2)}, str(p))
    with pytest.raises(ValueError, match="mmap=True .* needs device='cpu'"):
        load_safetensors(p, device="cuda", mmap=True)
    with pytest.raises(ValueError, match="mmap=True needs a local file"):
        load_safetensors("https://example.invalid/a.safetensors", device="cpu", mmap=True)
    with pytest.raises(TypeError, match="mmap must be True, False or None"):
        load_safetensors(p, device="cpu", mmap="yes")
    q = tmp_path / "a.npy"
    np.save(q, np.ones(3))
    for mode in ("r", "r+"):
        with pytest.raises(ValueError, match=re.escape(f"mmap_mode='{mode}' is not offered")):
            load_npy(q, device="cpu", mmap_mode=mode)
    with pytest.raises(ValueError, match="mmap_mode must be None or 'c'"):
        load_npy(q, device="cpu", mmap_mode="w+")
    with pytest.raises(ValueError, match="mmap_mode='c' .* needs device='cpu'"):
        load_npy(q, device="cuda", mmap_mode="c")


def test_npy_copies_by_default(tmp_path):
    p = tmp_path / "a.npy"
    np.save(p, np.arange(10, dtype=np.int32))
    t, stats = load_npy(p, device="cpu", return_stats=True)
    assert stats.backend == "posix" and mappings_of(p) == []
    t[0] = 5
    assert np.load(p)[0] == 0


@pytest.mark.parametrize("arr", list(NPY_ARRAYS.values()) + [np.array(2.5, dtype="<f2")],
                         ids=[*NPY_ARRAYS, "scalar-le"])
def test_npy_mapped_matches_numpys_memmap(tmp_path, arr, no_leaks):
    p = tmp_path / "a.npy"
    np.save(p, arr)
    mm = np.load(p, mmap_mode="c")
    ref, ref_strides = np.array(mm), mm.strides
    del mm  # numpy's memmap holds a descriptor (a dup in Python's mmap) and a mapping of its own
    gc.collect()
    t, stats = load_npy(p, device="cpu", mmap_mode="c", return_stats=True)
    assert tuple(t.shape) == arr.shape and t.numpy().dtype == arr.dtype.newbyteorder("=")
    assert np.array_equal(t.numpy(), ref)
    swapped = arr.dtype.byteorder == ">"
    if arr.size == 0:
        assert stats is None
    else:
        assert stats.backend == "mmap" and stats.nbytes == (arr.nbytes if swapped else 0)
        assert (len(mappings_of(p)) == 1) != swapped  # a swapped copy keeps no mapping
    if arr.ndim > 1 and not swapped:
        assert t.stride() == tuple(s // arr.itemsize for s in ref_strides)  # numpy's memmap layout, no copy
    before = p.read_bytes()
    if t.numel():
        t.view(-1)[0:1].zero_() if t.is_contiguous() else t.zero_()
        assert p.read_bytes() == before
    del t, ref
    gc.collect()
    assert mappings_of(p) == []


def test_npy_mapped_at_an_unaligned_offset_is_a_copy(tmp_path):
    """A header numpy reads whose length leaves the data at an odd offset."""
    text = b"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), } \n"
    p = tmp_path / "odd.npy"
    p.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + np.arange(3, dtype="<f4").tobytes())
    assert (10 + len(text)) % 4
    ref = np.load(p)
    for mode in (None, "c"):
        t = load_npy(p, device="cpu", mmap_mode=mode)
        assert np.array_equal(t.numpy(), ref) and t.data_ptr() % 4 == 0
    _, stats = load_npy(p, device="cpu", mmap_mode="c", return_stats=True)
    assert stats.nbytes == 12 and "realigned" in stats.reason


def test_mapped_file_replaced_after_loading_keeps_the_old_bytes(tmp_path):
    """The mapping holds the file it was made of: a rename over the path changes nothing."""
    p = tmp_path / "r.safetensors"
    sft.save_file({"a": torch.zeros(1000)}, str(p))
    got = load_safetensors(p, device="cpu")
    q = tmp_path / "new.safetensors"
    sft.save_file({"a": torch.ones(1000)}, str(q))
    os.replace(q, p)
    assert float(got["a"].sum()) == 0.0
    assert float(load_safetensors(p, device="cpu")["a"].sum()) == 1000.0
