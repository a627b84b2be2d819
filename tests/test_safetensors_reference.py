"""gdsio.load_safetensors accepts what safetensors.torch.load_file accepts (with
equal tensors) and refuses what it refuses, with a ValueError naming the file:
hand-made hostile headers, then seeded random mutations of a good file."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import pytest
import torch

import gdsio

st = pytest.importorskip("safetensors.torch")


def _file(header: dict | str, data: bytes, pad_to: int | None = None) -> bytes:
    text = header if isinstance(header, str) else json.dumps(header)
    raw = text.encode("utf-8", "surrogatepass")
    return struct.pack("<Q", len(raw)) + raw + data


def _good() -> tuple[dict, bytes]:
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    b = torch.arange(4, dtype=torch.int16)
    data = a.numpy().tobytes() + b.numpy().tobytes()
    header = {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
              "b": {"dtype": "I16", "shape": [4], "data_offsets": [24, 32]},
              "__metadata__": {"format": "pt"}}
    return header, data


def _outcome(fn, path):
    try:
        return "ok", fn(path)
    except Exception as e:  # noqa: BLE001 - the kind of refusal is compared below
        return "refused", e


def _agree(path):
    ref, want = _outcome(st.load_file, str(path))
    got_kind, got = _outcome(lambda p: gdsio.load_safetensors(p, device="cpu"), path)
    if ref == "ok":
        assert got_kind == "ok", f"safetensors accepts {path.name}, gdsio refuses: {got}"
        assert set(got) == set(want)
        for k in want:
            assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
            assert torch.equal(_bytes(got[k]), _bytes(want[k])), k  # torch.equal has no float4/e8m0 kernel
    else:
        assert got_kind == "refused", f"safetensors refuses {path.name} ({want}), gdsio accepts it"
        assert isinstance(got, (ValueError, OSError)), f"{type(got).__name__}: {got}"
        assert str(path) in str(got)
    return ref


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def _one(dtype: str, shape: list, data: bytes, offsets: list | None = None) -> bytes:
    return _file({"t": {"dtype": dtype, "shape": shape, "data_offsets": offsets or [0, len(data)]}}, data)


def _cases() -> dict[str, bytes]:
    h, d = _good()
    out: dict[str, bytes] = {"good": _file(h, d)}

    def variant(name, fn, data=d):
        hh = json.loads(json.dumps(h))
        fn(hh)
        out[name] = _file(hh, data)

    out["trailing bytes"] = _file(h, d + b"\0" * 8)
    out["gap before the first"] = _file({**h, "a": {**h["a"], "data_offsets": [8, 32]},
                                         "b": {**h["b"], "data_offsets": [32, 40]}}, bytes(40))
    variant("gap between", lambda x: x["b"].update(data_offsets=[28, 36]), d + bytes(4))
    variant("overlap", lambda x: x["b"].update(data_offsets=[16, 24], shape=[4]))
    variant("metadata a list", lambda x: x.update(__metadata__=[]))
    variant("metadata of ints", lambda x: x.update(__metadata__={"n": 1}))
    variant("metadata null", lambda x: x.update(__metadata__=None))
    variant("dtype a list", lambda x: x["a"].update(dtype=["F32"]))
    variant("dtype a dict", lambda x: x["a"].update(dtype={"F": 32}))
    variant("bool dimension", lambda x: x["b"].update(shape=[True, 4]))
    variant("bool offset", lambda x: x["a"].update(data_offsets=[False, 24]))
    variant("shape 0 x 2**63", lambda x: x["a"].update(shape=[0, 2**63], data_offsets=[0, 0])
            or x["b"].update(data_offsets=[0, 8]), d[24:])
    variant("shape overflowing", lambda x: x["a"].update(shape=[2**40, 2**40]))
    variant("negative dimension", lambda x: x["a"].update(shape=[-2, -3]))
    variant("unknown dtype", lambda x: x["a"].update(dtype="F33"))
    nested = '{"a": ' + "[" * 5000 + "]" * 5000 + "}"
    out["deeply nested"] = _file(nested, b"")
    out["lone surrogate key"] = _file('{"\\ud800": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', b"\0")
    out["not an object"] = _file("[1, 2]", b"")
    out["leading space"] = _file(" " + json.dumps(h), d)
    out["trailing spaces in header"] = _file(json.dumps(h) + "   ", d)
    # Every dtype safetensors 0.8 names: F4 (two values a byte: torch's float4_e2m1fn_x2
    # halves the last dimension), F8_E8M0, and the F6 ones torch has no dtype for.
    out["F4 2x4"] = _one("F4", [2, 4], bytes([0x21, 0x43, 0x65, 0x87]))
    out["F4 1x2x2"] = _one("F4", [1, 2, 2], bytes([0x7F, 0xF7]))
    out["F4 8"] = _one("F4", [8], bytes(range(4)))
    out["F4 2x0"] = _one("F4", [2, 0], b"")
    out["F4 0x3"] = _one("F4", [0, 3], b"")
    out["F4 odd last dimension"] = _one("F4", [2, 3], bytes(3))
    out["F4 one value"] = _one("F4", [1], b"\x01")
    out["F4 0-d"] = _one("F4", [], b"\x01")
    out["F4 bytes as elements"] = _one("F4", [2, 4], bytes(8))
    out["F4 after a byte"] = _file({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                                    "b": {"dtype": "F4", "shape": [2, 2], "data_offsets": [1, 3]}}, b"\x09\x21\x43")
    out["F8_E8M0"] = _one("F8_E8M0", [2, 2], bytes([0, 127, 128, 255]))
    out["F8_E4M3FNUZ"] = _one("F8_E4M3FNUZ", [3], bytes([1, 2, 0x80]))
    out["F8_E5M2FNUZ"] = _one("F8_E5M2FNUZ", [3], bytes([1, 2, 0x80]))
    out["C64"] = _one("C64", [2], struct.pack("<4f", 1, 2, 3, 4))
    out["F6_E2M3"] = _one("F6_E2M3", [4], bytes(3))
    out["F6_E3M2"] = _one("F6_E3M2", [4], bytes(3))
    out["empty"] = _file("{}", b"")
    out["too short"] = b"\x01\x00"
    out["length past the end"] = struct.pack("<Q", 1 << 20) + b"{}"
    return out


CASES = _cases()


@pytest.mark.parametrize("name", list(CASES))
def test_hand_made_files_agree_with_safetensors(tmp_path, name):
    p = tmp_path / (name.replace(" ", "_").replace("*", "") + ".safetensors")
    p.write_bytes(CASES[name])
    _agree(p)


def test_random_mutations_agree_with_safetensors(tmp_path):
    """Seeded byte flips, insertions and cuts of a good file: about 400 inputs."""
    rng = random.Random(0)
    base = CASES["good"]
    outcomes = {"ok": 0, "refused": 0}
    for i in range(400):
        b = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            op, at = rng.random(), rng.randrange(len(b))
            if op < 0.6:
                b[at] = rng.randrange(256)
            elif op < 0.8:
                b[at:at] = bytes([rng.randrange(256)])
            else:
                del b[at : at + rng.randint(1, 8)]
        p = tmp_path / f"m{i}.safetensors"
        p.write_bytes(bytes(b))
        outcomes[_agree(p)] += 1
        p.unlink()
    assert outcomes["ok"] and outcomes["refused"]  # both sides of the rule were exercised


@pytest.mark.parametrize("mmap", [None, False], ids=["mapped", "copied"])
def test_a_sparse_terabyte_file_says_the_path_and_the_size(tmp_path, mmap):
    """A 1 TB data region that cannot be allocated (or mapped privately: the
    kernel refuses it as it refuses safetensors'): OSError naming the file and the size."""
    if Path("/proc/sys/vm/overcommit_memory").read_text().strip() == "1":
        pytest.skip("vm.overcommit_memory=1: a 1 TB mapping would be granted")
    n = 1 << 40
    p = tmp_path / "huge.safetensors"
    head = _file({"w": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}}, b"")
    with open(p, "wb") as f:
        f.write(head)
        f.truncate(len(head) + n)  # sparse: no disk used
    with pytest.raises(OSError, match=r"cannot allocate 1099511627776 bytes \(1099\.5 GB\) on cpu") as e:
        gdsio.load_safetensors(p, device="cpu", mmap=mmap)
    assert str(p) in str(e.value)
