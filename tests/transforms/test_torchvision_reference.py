"""gdsio.transforms against torchvision.transforms.v2.functional's own outputs
(tests/corpus/torchvision/reference.npz, written by generate.py beside it with
torch 2.14.1 and torchvision 0.29.1, which cannot be installed beside the
tests' torch): uint8 within 1, the byte-moving ops (pad, flips, crops) equal,
float32 within 1e-5, float16 within 2e-3 (two steps of its spacing at 1),
PIL images equal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from gdsio import transforms as T

REFERENCE = Path(__file__).resolve().parents[1] / "corpus" / "torchvision" / "reference.npz"
_DATA = np.load(REFERENCE)
CASES = json.loads(str(_DATA["cases"]))
EXACT = {"pad", "hflip", "vflip", "crop", "center_crop"}


def _case_id(i: int) -> str:
    c = CASES[i]
    kw = ",".join(f"{k}={v}" for k, v in c["kwargs"].items())
    return f"{i}-{c['fn']}-{c['input']}{'-pil' if c['pil'] else ''}-{kw}"


def _input(name: str, pil: bool) -> Any:
    a = _DATA[f"in/{name}"]
    if pil:
        return Image.fromarray(np.ascontiguousarray(a.transpose(1, 2, 0)))
    return torch.from_numpy(a.copy())


@pytest.mark.parametrize("i", list(range(len(CASES))), ids=_case_id)
def test_equals_torchvision(i: int) -> None:
    case = CASES[i]
    want = _DATA[f"out/{i}"]
    got = getattr(T, case["fn"])(_input(case["input"], case["pil"]), **case["kwargs"])
    if case["pil"]:
        assert isinstance(got, Image.Image)
        np.testing.assert_array_equal(np.asarray(got), want)
        return
    assert isinstance(got, torch.Tensor)
    g = got.numpy()
    assert g.shape == want.shape and g.dtype == want.dtype, (g.shape, g.dtype, want.shape, want.dtype)
    if case["fn"] in EXACT:
        np.testing.assert_array_equal(g, want)
    elif g.dtype == np.uint8:
        diff = np.abs(g.astype(np.int16) - want.astype(np.int16))
        assert diff.max() <= 1, f"{(diff > 1).sum()} values differ by more than 1 (max {diff.max()})"
    elif g.dtype == np.float16:
        np.testing.assert_allclose(g.astype(np.float32), want.astype(np.float32), rtol=0, atol=2e-3)
    else:
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)


def test_reference_covers_every_new_op() -> None:
    """The corpus holds the ops of torchvision's v2 habits this suite vouches for."""
    fns = {c["fn"] for c in CASES}
    assert {"adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_hue", "color_jitter", "pad",
            "vflip", "hflip", "resize", "crop", "center_crop", "resized_crop"} <= fns
    meta = json.loads(str(_DATA["meta"]))
    assert meta["torchvision"].startswith("0.29")
