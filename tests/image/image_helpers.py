"""What the image tests share: writers of every format by hand or by
Pillow, and test images (photographs from scikit-image when it is there)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch
from conftest import cpu_jpeg  # noqa: F401 (re-exported for the image tests)
from PIL import Image

CORPUS = Path(__file__).parent.parent / "corpus" / "decode"


def as_tensor(b: bytes) -> torch.Tensor:
    return torch.from_numpy(np.frombuffer(b, dtype=np.uint8).copy())


def pnm_bytes(arr: np.ndarray, maxval: int | None = None, header: bytes | None = None) -> bytes:
    """A P5 (H,W) or P6 (H,W,3) file written by hand: big-endian above maxval 255."""
    magic = b"P5" if arr.ndim == 2 else b"P6"
    if maxval is None:
        maxval = 255 if arr.dtype == np.uint8 else 65535
    body = arr.astype(">u2" if maxval > 255 else "u1").tobytes()
    if header is None:
        header = magic + b"\n%d %d\n%d\n" % (arr.shape[1], arr.shape[0], maxval)
    return header + body


def npy_bytes(arr: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    b = io.BytesIO()
    np.lib.format.write_array(b, arr, version=version)
    return b.getvalue()


def pil_bytes(im: Image.Image, fmt: str = "JPEG", **kw) -> bytes:
    b = io.BytesIO()
    im.save(b, format=fmt, **kw)
    return b.getvalue()


def chw(a: np.ndarray) -> np.ndarray:
    return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)


def pil_chw(im: Image.Image) -> np.ndarray:
    return chw(np.array(im))


rng = np.random.default_rng(20240611)


def rand(shape, dtype=np.uint8) -> np.ndarray:
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, np.iinfo(dtype).max + 1, shape, dtype=dtype)


def photos() -> list[tuple[str, np.ndarray]]:
    """Real photographs from scikit-image when it is installed, else textured stand-ins."""
    try:
        from skimage import data

        return [("astronaut", data.astronaut()), ("coffee", data.coffee()), ("chelsea", data.chelsea())]
    except ImportError:
        y, x = np.mgrid[0:240, 0:320]
        base = (np.sin(x / 7.0) * np.cos(y / 11.0) * 90 + 128 + rand((240, 320)) % 40).clip(0, 255)
        img = np.stack([base, np.roll(base, 9, 1), base[::-1]], -1).astype(np.uint8)
        return [("texture", img)]


def cpu_jpeg_refusal(why: str) -> str:
    """The reason Pillow's result gives when every faster CPU decoder refused
    an image for `why` (each adds its own "name: why")."""
    names = ["libjpeg-turbo", "simplejpeg"] if cpu_jpeg() == "libjpeg-turbo" else ["simplejpeg"]
    return "; ".join(f"{n}: {why}" for n in names)
