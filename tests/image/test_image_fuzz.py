"""The header parsers and decode survive fuzzing: a header, NeedMoreData
or ValueError, nothing else."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from image_helpers import CORPUS, npy_bytes, pil_bytes, pnm_bytes, rand
from PIL import Image

import gdsio.image as gi
from gdsio.errors import NeedMoreData
from gdsio.image.exif import exif_orientation
from gdsio.image.formats.jpeg import parse_jpeg
from gdsio.image.formats.npy import parse_npy
from gdsio.image.formats.pnm import parse_pnm


def _seeds() -> list[bytes]:
    photo = rand((16, 24, 3))
    exif = Image.Exif()
    exif[0x0112] = 6
    return [
        pnm_bytes(photo),
        pnm_bytes(rand((4, 5), np.uint16), maxval=1000),
        b"P5\n# c\n3 2\n255\n" + bytes(6),
        npy_bytes(photo),
        npy_bytes(rand((3, 4), np.float32), (2, 0)),
        pil_bytes(Image.fromarray(photo), quality=80, exif=exif.tobytes()),
        pil_bytes(Image.fromarray(photo), quality=80, progressive=True),
        # Pillow's formats: the decoder is Pillow's, the errors gdsio's ValueError.
        pil_bytes(Image.fromarray(photo), "PNG"),
        pil_bytes(Image.fromarray(photo).quantize(8), "GIF"),
        pil_bytes(Image.fromarray(photo), "BMP"),
        pil_bytes(Image.fromarray(photo), "TIFF"),
        pil_bytes(Image.fromarray(photo), "WEBP", lossless=True),
    ] + [(CORPUS / n).read_bytes() for n in sorted(os.listdir(CORPUS)) if not n.endswith((".py", ".tsv"))]


SEEDS = _seeds()


PARSERS = [parse_pnm, parse_npy, parse_jpeg]


@st.composite
def mutated(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] = draw(st.integers(0, 255))
        elif op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif data:
            del data[at : at + draw(st.integers(1, 16))]
    return bytes(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=600), mutated()), st.integers(0, 700))
def test_fuzz_header_parsers(data, cut):
    for parse in PARSERS:
        # The whole data: a header or ValueError, nothing else.
        try:
            parse(data, len(data))
        except ValueError:
            pass
        # A prefix of it: may also ask for more.
        try:
            parse(data[:cut], len(data))
        except (ValueError, NeedMoreData) as e:
            if isinstance(e, NeedMoreData):
                assert cut < e.nbytes <= len(data)
    try:
        exif_orientation(data)
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"exif_orientation raised {e!r}")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_fuzz_decode_raises_only_value_error(data):
    try:
        out = gi.decode([data], device="cpu", max_pixels=1 << 20, mode="RGB")
    except ValueError:
        return
    assert out[0].shape[0] == 3
