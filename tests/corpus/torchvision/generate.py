"""Writes reference.npz: torchvision.transforms.v2.functional's outputs for a
fixed set of small deterministic inputs and parameters, which
tests/transforms/test_torchvision_reference.py compares gdsio's outputs with.

torchvision cannot be installed beside the CPU torch the tests use, so this
runs in a venv of its own (torch 2.14.1, torchvision 0.29.1 here):

    python3 -m venv /work/venvs/tv
    /work/venvs/tv/bin/pip install torch==2.14.1 torchvision==0.29.1
    /work/venvs/tv/bin/python tests/corpus/torchvision/generate.py

Layout: ``in/<name>`` the inputs; ``cases`` a JSON list whose item i is
{"fn": name of the gdsio.transforms function, "input": an input's name,
"pil": whether the input is given as a PIL image, "kwargs": the call's keyword
arguments}; ``out/<i>`` torchvision's output of case i (a PIL output as its
HWC array). ``meta`` records the versions and the CPU capability torch ran with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torchvision
import torchvision.transforms.v2.functional as F
from PIL import Image

HERE = Path(__file__).resolve().parent
torch.set_num_threads(1)  # one summation order for the means


def _u8(c: int, h: int, w: int, seed: int) -> np.ndarray:
    """Noise over edges and gradients, with pure black, white and gray pixels:
    the rounding and HSV branches all show up."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([(xx * 255) // max(w - 1, 1), (yy * 255) // max(h - 1, 1), ((xx + yy) * 37) % 256])[:c]
    noise = rng.integers(0, 256, size=(c, h, w))
    out = np.where(rng.random((c, h, w)) < 0.5, noise, base).astype(np.uint8)
    out[:, 0, :3] = 0
    out[:, 0, 3:6] = 255
    out[:, 1, :3] = 128  # gray: max == min
    return out


def inputs() -> dict[str, np.ndarray]:
    rgb = _u8(3, 23, 29, 1)
    small = _u8(3, 12, 15, 2)
    return {
        "rgb": rgb,
        "srgb": small,
        "gray": _u8(1, 19, 23, 3),
        "batch": np.stack([_u8(3, 16, 20, 4), _u8(3, 16, 20, 5)]),
        "frgb": (small.astype(np.float32) / np.float32(255)).astype(np.float32),
        "hrgb": (small.astype(np.float32) / np.float32(255)).astype(np.float16),
        "fbig": (_u8(3, 24, 31, 6).astype(np.float32) / np.float32(255)).astype(np.float32),
    }


def _call(fn: str, x: Any, kwargs: dict[str, Any]) -> Any:
    if fn == "color_jitter":  # ColorJitter.transform with its parameters given
        out = x
        for k in kwargs["order"]:
            name = ("brightness", "contrast", "saturation", "hue")[k]
            if kwargs.get(name) is not None:
                out = getattr(F, f"adjust_{name}")(out, kwargs[name])
        return out
    return getattr(F, fn)(x, **kwargs)


def cases(ins: dict[str, np.ndarray]) -> list[tuple[str, str, bool, dict[str, Any]]]:
    out: list[tuple[str, str, bool, dict[str, Any]]] = []
    factors = {
        "adjust_brightness": ("brightness_factor", [0.0, 0.35, 1.0, 1.7, 2.6]),
        "adjust_contrast": ("contrast_factor", [0.0, 0.45, 1.0, 1.8]),
        "adjust_saturation": ("saturation_factor", [0.0, 0.5, 1.0, 1.65]),
        "adjust_hue": ("hue_factor", [-0.5, -0.27, -0.1, 0.0, 0.05, 0.33, 0.5]),
    }
    for fn, (arg, values) in factors.items():
        for name in ("rgb", "gray", "batch", "frgb", "hrgb"):
            for v in values:
                out.append((fn, name, False, {arg: v}))
        for v in values[1:3]:
            out.append((fn, "rgb", True, {arg: v}))
    jitters = [
        ([0, 1, 2, 3], 1.3, 0.7, 1.4, 0.08),
        ([3, 2, 1, 0], 0.6, 1.5, 0.3, -0.21),
        ([1, 3, 0, 2], 1.9, 0.2, None, 0.4),
        ([2, 0, 3, 1], None, 1.25, 1.7, -0.45),
    ]
    for name in ("rgb", "frgb", "hrgb"):
        for order, b, c, s, h in jitters:
            out.append(("color_jitter", name, False,
                        {"brightness": b, "contrast": c, "saturation": s, "hue": h, "order": order}))
    paddings = [1, [2, 3], [3, 0, 1, 4], [4, -2, -3, 2], [-1]]
    for mode in ("constant", "edge", "reflect", "symmetric"):
        for p in paddings:
            out.append(("pad", "srgb", False, {"padding": p, "padding_mode": mode}))
        out.append(("pad", "frgb", False, {"padding": [2, 1], "padding_mode": mode}))
        out.append(("pad", "srgb", True, {"padding": [2, 1, 0, 3], "padding_mode": mode}))
    out.append(("pad", "srgb", False, {"padding": [2, 1], "fill": 127.7}))
    out.append(("pad", "srgb", False, {"padding": [2, 1], "fill": [10, 200, 30]}))
    out.append(("pad", "frgb", False, {"padding": 3, "fill": 0.25}))
    out.append(("pad", "srgb", True, {"padding": [2, 1], "fill": [10, 200, 30]}))
    for mode in ("nearest", "nearest-exact", "bilinear", "bicubic"):
        for aa in (True, False, None):
            for size in ([11, 13], 7):
                out.append(("resize", "fbig", False, {"size": size, "interpolation": mode, "antialias": aa}))
        out.append(("resize", "fbig", False, {"size": [33, 29], "interpolation": mode}))
        out.append(("resize", "hrgb", False, {"size": [7, 9], "interpolation": mode}))
    out.append(("resize", "fbig", False, {"size": None, "max_size": 20}))
    out.append(("resize", "fbig", False, {"size": 12, "max_size": 14}))
    out.append(("resize", "fbig", False, {"size": [11, 13], "interpolation": 3}))
    out.append(("resize", "rgb", False, {"size": [13, 50], "interpolation": "bicubic", "antialias": False}))
    out.append(("resize", "rgb", False, {"size": None, "max_size": 20, "interpolation": 2}))
    for code in (0, 2, 3, 4, 5, 1):
        out.append(("resize", "rgb", True, {"size": [13, 17], "interpolation": code}))
    for box in ([3, 4, 10, 12], [-3, -5, 10, 12], [20, 30, 15, 15]):
        out.append(("crop", "rgb", False, dict(zip(("top", "left", "height", "width"), box))))
        out.append(("crop", "frgb", False, dict(zip(("top", "left", "height", "width"), box))))
    for size in (10, [40, 31], [7, 50]):
        out.append(("center_crop", "rgb", False, {"output_size": size}))
        out.append(("center_crop", "rgb", True, {"output_size": size}))
    out.append(("resized_crop", "fbig", False,
                {"top": 5, "left": 7, "height": 15, "width": 20, "size": [11, 13], "antialias": True}))
    out.append(("resized_crop", "fbig", False,
                {"top": -5, "left": 7, "height": 15, "width": 40, "size": [11, 13], "interpolation": "bicubic"}))
    for fn in ("hflip", "vflip"):
        for name in ("rgb", "frgb", "batch"):
            out.append((fn, name, False, {}))
        out.append((fn, "rgb", True, {}))
    return out


def main() -> None:
    ins = inputs()
    arrays: dict[str, np.ndarray] = {f"in/{k}": v for k, v in ins.items()}
    listed = []
    for i, (fn, name, pil, kwargs) in enumerate(cases(ins)):
        x: Any = torch.from_numpy(ins[name])
        if pil:
            x = Image.fromarray(np.ascontiguousarray(ins[name].transpose(1, 2, 0)))
        y = _call(fn, x, kwargs)
        arrays[f"out/{i}"] = np.asarray(y) if pil else y.numpy()
        listed.append({"fn": fn, "input": name, "pil": pil, "kwargs": kwargs})
    arrays["cases"] = np.array(json.dumps(listed))
    arrays["meta"] = np.array(json.dumps({
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }))
    np.savez_compressed(HERE / "reference.npz", **arrays)
    print(f"{len(arrays)} arrays, {(HERE / 'reference.npz').stat().st_size} bytes")


if __name__ == "__main__":
    main()
