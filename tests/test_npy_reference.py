"""gdsio.load_npy agrees with numpy.load(allow_pickle=False): what numpy loads,
gdsio loads to the same values (or, for a dtype torch has no equivalent of,
refuses with a ValueError naming it); what numpy refuses, gdsio refuses with a
ValueError naming the file, and so does gdsio.image.decode. Over hand-made
files (versions, byte orders, Fortran order, Python's header spellings,
object dtypes, truncation, bad dicts, long headers) and a few hundred seeded
mutations of good ones."""

from __future__ import annotations

import io
import random
import struct
import warnings

import numpy as np
import pytest
import torch

import gdsio
from gdsio import image as gi


def npy(arr: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    b = io.BytesIO()
    np.lib.format.write_array(b, arr, version=version)
    return b.getvalue()


def with_header(text: str, data: bytes = b"", version: tuple[int, int] = (1, 0)) -> bytes:
    body = text.encode("latin1" if version < (3, 0) else "utf-8")
    size = struct.pack("<H", len(body)) if version == (1, 0) else struct.pack("<I", len(body))
    return b"\x93NUMPY" + bytes(version) + size + body + data


def numpy_load(data: bytes):
    """numpy's verdict: the array, or None for a refusal (of any exception type)."""
    with warnings.catch_warnings():  # Python 2 headers: numpy warns, and loads
        warnings.simplefilter("ignore")
        try:
            a = np.load(io.BytesIO(data), allow_pickle=False)
        except Exception:  # noqa: BLE001 - numpy refuses with ValueError, TypeError, EOFError...
            return None
    return a if isinstance(a, np.ndarray) else None  # an NpzFile is not an npy


def _torch_has(dt: np.dtype) -> bool:
    try:
        torch.from_numpy(np.empty(0, dt.newbyteorder("=")))
        return True
    except TypeError:
        return False


def check_agrees(data: bytes, path) -> str:
    """Asserts gdsio's verdict is numpy's; returns which case it was."""
    path.write_bytes(data)
    ref = numpy_load(data)
    try:
        got = gdsio.load_npy(path, device="cpu")
    except ValueError as e:
        assert str(path) in str(e), e
        got = e
    try:  # the mapped mode parses the same header from its own descriptor: the same verdict, the same values
        mapped = gdsio.load_npy(path, device="cpu", mmap_mode="c")
    except ValueError as e:
        assert isinstance(got, ValueError) and str(e) == str(got), (e, got)
    else:
        assert not isinstance(got, ValueError), f"mapped loads what the copy refuses: {got}"
        assert mapped.shape == got.shape and mapped.dtype == got.dtype
        assert mapped.numpy().tobytes() == got.numpy().tobytes()
    if ref is None:
        assert isinstance(got, ValueError), f"numpy refuses {data[:120]!r}, gdsio loaded {got!r}"
        with pytest.raises(ValueError, match="^data: "):
            gi.decode(data, device="cpu")
        return "refused"
    if ref.dtype.names is not None or not _torch_has(ref.dtype):  # deliberate: torch has no such dtype
        assert isinstance(got, ValueError) and ("dtype" in str(got)), got
        return "no torch dtype"
    assert not isinstance(got, ValueError), f"numpy loads {data[:120]!r} ({ref.dtype} {ref.shape}), gdsio refuses: {got}"
    assert tuple(got.shape) == ref.shape
    want = np.ascontiguousarray(ref.astype(ref.dtype.newbyteorder("=")))
    assert got.numpy().tobytes() == want.tobytes()
    return "loaded"


GOOD = [
    np.arange(12, dtype="<f4").reshape(3, 4),
    np.arange(12, dtype=">i4").reshape(3, 4),
    np.asfortranarray(np.arange(24, dtype=">u2").reshape(2, 3, 4)),
    np.asfortranarray(np.arange(6, dtype="<c8").reshape(2, 3)),
    np.array(7, dtype="<i8"),
    np.zeros((0, 3), "|u1"),
    np.array([True, False]),
    np.arange(5, dtype=">f8"),
]

HEADER = "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }"
HAND = [
    (HEADER, bytes(12), (1, 0)),
    (HEADER, bytes(12), (2, 0)),
    (HEADER, bytes(12), (3, 0)),
    (HEADER, bytes(12), (1, 1)),  # minor version: refused
    (HEADER, bytes(12), (4, 0)),
    (HEADER, bytes(11), (1, 0)),  # truncated data
    (HEADER, bytes(13), (1, 0)),  # trailing bytes: numpy ignores them
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (3, True), }", bytes(12), (1, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (True, True), }", bytes(4), (1, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (-1,), }", bytes(4), (1, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (0, 1099511627776, 1099511627776), }", b"", (1, 0)),
    ("{'descr': '<i4', 'fortran_order': True, 'shape': (0, 1099511627776, 1099511627776), }", b"", (1, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (0, 9223372036854775808), }", b"", (1, 0)),
    ("{'descr': '<i4', 'fortran_order': True, 'shape': (), }", bytes(4), (1, 0)),
    ("{'descr': '(2,)<i4', 'fortran_order': False, 'shape': (3,), }", bytes(24), (1, 0)),
    ("{'descr': ('<i4', (2,)), 'fortran_order': False, 'shape': (3,), }", bytes(24), (1, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), } # a comment", bytes(12), (1, 0)),
    ("{'descr': '<i4', \\\n'fortran_order': False, 'shape': (3,), }", bytes(12), (1, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (3L,), }", bytes(12), (1, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (3L,), }", bytes(12), (3, 0)),
    ("{'descr': 'float32', 'fortran_order': False, 'shape': (3,), }", bytes(12), (1, 0)),
    ("{'descr': '<U2', 'fortran_order': False, 'shape': (3,), }", bytes(24), (1, 0)),
    ("{'descr': [('a','<i4')], 'fortran_order': False, 'shape': (3,), }", bytes(12), (1, 0)),
    ("{'descr': '<i4', 'fortran_order': 0, 'shape': (3,), }", bytes(12), (1, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': [3], }", bytes(12), (1, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), 'x': 1}", bytes(12), (1, 0)),
    ("{'descr': '<i4', 'fortran_order': False}", bytes(12), (1, 0)),
    ("{'descr': 'O', 'fortran_order': False, 'shape': (3,), }", bytes(12), (1, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (1+2,), }", bytes(12), (1, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (0x3,), }", bytes(12), (1, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (3_0,), }", bytes(120), (1, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (-0,), }", bytes(12), (1, 0)),
    ("{'descr': 'V0', 'fortran_order': False, 'shape': (3,), }", b"", (1, 0)),
    ("{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (3,), }", bytes(24), (1, 0)),
    (HEADER + "\x00", bytes(12), (1, 0)),
    ("{'descr': '<i4',\t'fortran_order': False, 'shape': (3,), }\r", bytes(12), (1, 0)),
    ("{'descr': '<i4'  'x', 'fortran_order': False, 'shape': (3,), }", bytes(12), (1, 0)),
    ("{'descr': '<' 'i4', 'fortran_order': False, 'shape': (3,), }", bytes(12), (1, 0)),
    ("{'descr': r'<i4', 'fortran_order': False, 'shape': (3,), }", bytes(12), (1, 0)),
    ("{'descr': b'<i4', 'fortran_order': False, 'shape': (3,), }", bytes(12), (1, 0)),
    ("{'descr': ' <i4', 'fortran_order': False, 'shape': (3,), }", bytes(12), (1, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), 'descr': '>i4'}", bytes(12), (1, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }\n  ", bytes(12), (1, 0)),
    ("\n{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", bytes(12), (1, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': " + "(" * 199 + "3," + ")" * 199 + "}", bytes(12), (2, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': " + "(" * 198 + "(3,)" + ")" * 198 + "}", bytes(12), (2, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }" + " " * 10000, bytes(12), (2, 0)),  # over numpy's cap
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }" + "\u20ac" * 9900, bytes(12), (3, 0)),  # under it, in characters
    ("{'descr': '\u20ac', 'fortran_order': False, 'shape': (3,), }", bytes(12), (3, 0)),
    ("[1, 2]", bytes(12), (1, 0)),
    ("", bytes(12), (1, 0)),
]


@pytest.mark.parametrize("arr", GOOD, ids=lambda a: f"{a.dtype.str}{a.shape}")
@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_what_numpy_writes(tmp_path, arr, version):
    assert check_agrees(npy(arr, version), tmp_path / "a.npy") == "loaded"


@pytest.mark.parametrize("k", range(len(HAND)))
def test_hand_made_files(tmp_path, k):
    text, data, version = HAND[k]
    check_agrees(with_header(text, data, version), tmp_path / "h.npy")


def _mutate(rng: random.Random, data: bytearray) -> bytearray:
    """One or a few edits, mostly inside the header (where the rules are)."""
    hl = 10 + struct.unpack_from("<H", data, 8)[0] if data[6] == 1 else 12 + struct.unpack_from("<I", data, 8)[0]
    for _ in range(rng.randint(1, 3)):
        if len(data) < 12:
            break
        op = rng.random()
        at = rng.randrange(0, hl) if rng.random() < 0.85 else rng.randrange(0, len(data) + 1)
        if op < 0.35 and at < len(data):
            data[at] = rng.choice([rng.randrange(256), ord(rng.choice("()[]{},:'\"#\\ \nLTF0123456789-+_xj<>|=."))])
        elif op < 0.55:
            data[at:at] = rng.choice([b" ", b",", b"(", b")", b"#x\n", b"\\\n", b"L", b"0", b"'", b"\n", b" True"])
        elif op < 0.7 and at < len(data):
            del data[at : at + rng.randint(1, 4)]
        elif op < 0.8:
            del data[rng.randrange(0, len(data)) :]  # truncated
        elif op < 0.9:
            data += bytes(rng.randint(1, 16))  # trailing bytes
        else:
            text = data[10 if data[6] == 1 else 12 : hl].decode("latin1")
            swap = rng.choice([("False", "True"), ("'<", "'>"), ("(", "(0, "), (",)", ", 2**3)"), ("'descr'", "'descr ' "),
                               ("),", "),\n"), ("<", "="), ("i8", "u1"), ("f4", "f8"), (", }", ", 'x': None}")])
            text = text.replace(*swap, 1)
            body = text.encode("latin1")
            head = struct.pack("<H", len(body)) if data[6] == 1 else struct.pack("<I", len(body))
            data = bytearray(data[:8] + head + body + data[hl:])
            hl = 8 + len(head) + len(body)
    return data


def test_seeded_mutations_agree_with_numpy(tmp_path):
    rng = random.Random(20261201)
    seeds = [npy(a, v) for a in GOOD for v in [(1, 0), (2, 0), (3, 0)]]
    seen: dict[str, int] = {}
    for i in range(400):
        data = bytes(_mutate(rng, bytearray(rng.choice(seeds))))
        try:
            case = check_agrees(data, tmp_path / "m.npy")
        except AssertionError as e:
            raise AssertionError(f"mutation {i}: {data[:200]!r}: {e}") from None
        seen[case] = seen.get(case, 0) + 1
    assert seen.get("loaded", 0) > 20 and seen.get("refused", 0) > 100, seen  # both sides exercised
