"""JPEG acceptance as Pillow's (libjpeg-turbo): gdsio decodes every JPEG that
Pillow's Image.open(...).load() decodes, to the same pixels, and refuses (a
ValueError naming the data) what Pillow refuses by default. Real datasets hold
files with bytes after EOI, extraneous bytes before a marker, stuffed 0xFF00
or 0xFF fill between segments; truncated files are refused, as Pillow does
without LOAD_TRUNCATED_IMAGES. Hand-made cases and seeded mutations."""

from __future__ import annotations

import io
import random
import struct
import warnings

import numpy as np
import pytest
from PIL import Image

import gdsio.image as gi


def _jpeg(mode="RGB", size=(24, 16), **kw) -> bytes:
    rng = np.random.default_rng(7)
    a = rng.integers(0, 256, (size[1], size[0], 1 if mode == "L" else 3), dtype=np.uint8)
    im = Image.fromarray(a[..., 0] if mode == "L" else a, "L" if mode == "L" else "RGB")
    if mode == "CMYK":
        im = im.convert("CMYK")
    b = io.BytesIO()
    im.save(b, "JPEG", **kw)
    return b.getvalue()


def _segments(data: bytes) -> list[int]:
    """Offsets of the markers from SOI up to SOS (where junk may be put between segments)."""
    out, pos = [], 2
    while pos < len(data) and data[pos] == 0xFF:
        out.append(pos)
        m = data[pos + 1]
        if m == 0xDA:
            break
        pos += 2 + struct.unpack_from(">H", data, pos + 2)[0]
    return out


def pillow_says(data: bytes):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with Image.open(io.BytesIO(data), formats=["JPEG"]) as im:
                im.load()
                a = np.asarray(im)
        except Exception:  # noqa: BLE001 - every refusal of Pillow's
            return None
    return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)


def check_agrees(data: bytes) -> str:
    ref = pillow_says(data)
    try:
        got = gi.decode(data, device="cpu")
    except ValueError as e:
        assert str(e).startswith("data: "), e
        got = e
    if ref is None:
        assert isinstance(got, ValueError), f"Pillow refuses {data[:80]!r}..., gdsio decoded it"
        return "refused"
    assert not isinstance(got, ValueError), f"Pillow decodes {data[:80]!r}..., gdsio refuses: {got}"
    np.testing.assert_array_equal(got.numpy(), ref)
    return "decoded"


BASE = {"rgb": _jpeg(), "gray": _jpeg("L"), "progressive": _jpeg(progressive=True), "cmyk": _jpeg("CMYK"),
        "restart": _jpeg(restart_marker_blocks=1)}


def _at_segment(data: bytes, k: int, junk: bytes) -> bytes:
    at = _segments(data)[k]
    return data[:at] + junk + data[at:]


def hand_made() -> dict[str, bytes]:
    d = BASE["rgb"]
    n = len(_segments(d))
    eoi = d.rindex(b"\xff\xd9")
    cases = {
        "as saved": d,
        "trailing zeros after EOI": d + bytes(100),
        "trailing junk after EOI": d + b"garbage\xff\x00\xff\xd8 more",
        "a second image after EOI": d + BASE["gray"],
        "trailing short": d + b"\x00",
        "truncated in the scan": d[: eoi - 200],
        "truncated in the header": d[: _segments(d)[-1] + 3],
        "truncated: no EOI": d[:eoi],
        "only SOI": d[:2],
        "SOI and junk": d[:2] + b"\x12\x34\x56",
        "EOI before the scan": d[:2] + b"\xff\xd9",
    }
    for k in range(1, n):
        cases[f"extraneous bytes before marker {k}"] = _at_segment(d, k, b"\x00\x01junk")
        cases[f"stuffed 0xFF00 before marker {k}"] = _at_segment(d, k, b"\xff\x00")
        cases[f"fill 0xFF before marker {k}"] = _at_segment(d, k, b"\xff\xff\xff")
        cases[f"stuffed and junk before marker {k}"] = _at_segment(d, k, b"\xff\x00\x17\xff\x00")
    for name, b in BASE.items():
        cases[f"{name} as saved"] = b
        cases[f"{name} junk before SOS"] = _at_segment(b, len(_segments(b)) - 1, b"\x00" * 7)
    return cases


CASES = hand_made()


@pytest.mark.parametrize("name", list(CASES))
def test_hand_made(name):
    check_agrees(CASES[name])


def test_what_real_datasets_hold_is_decoded():
    for name in ("trailing zeros after EOI", "trailing junk after EOI", "extraneous bytes before marker 2",
                 "stuffed 0xFF00 before marker 2", "fill 0xFF before marker 3"):
        assert check_agrees(CASES[name]) == "decoded", name
    for name in ("truncated in the scan", "truncated: no EOI", "truncated in the header"):
        assert check_agrees(CASES[name]) == "refused", name


def _mutate(rng: random.Random, data: bytes) -> bytes:
    segs = _segments(data)
    op = rng.random()
    if op < 0.35:  # bytes before a marker
        return _at_segment(data, rng.randrange(1, len(segs)), rng.choice([b"\xff\x00", b"\x00", b"\xff\xff", bytes(rng.randrange(256) for _ in range(rng.randint(1, 9)))]))
    if op < 0.5:  # after EOI
        return data + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    if op < 0.65:  # truncated
        return data[: rng.randrange(2, len(data))]
    if op < 0.85:  # a byte of the header changed (not the frame size: no huge images)
        b = bytearray(data)
        at = rng.randrange(2, segs[-1] + 10)
        b[at] = rng.randrange(256)
        return bytes(b)
    b = bytearray(data)  # a byte of the scan changed
    b[rng.randrange(segs[-1] + 10, len(b) - 2)] = rng.randrange(256)
    return bytes(b)


def test_seeded_mutations_agree_with_pillow():
    rng = random.Random(11)
    seen: dict[str, int] = {}
    bases = list(BASE.values())
    for i in range(300):
        data = _mutate(rng, rng.choice(bases))
        try:
            case = check_agrees(data)
        except AssertionError as e:
            raise AssertionError(f"mutation {i}: {e}") from None
        seen[case] = seen.get(case, 0) + 1
    assert seen.get("decoded", 0) > 50 and seen.get("refused", 0) > 20, seen
