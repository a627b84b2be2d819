"""The photographs the image benchmarks use (shared by bench_decode.py and
bench_transforms.py)."""

from __future__ import annotations

import numpy as np


def sources() -> list[np.ndarray]:
    """The source photographs: scikit-image's samples when installed, else a textured stand-in."""
    try:
        from skimage import data

        return [data.astronaut(), data.coffee(), data.chelsea(), data.rocket(), data.immunohistochemistry()]
    except ImportError:
        rng = np.random.default_rng(0)
        y, x = np.mgrid[0:600, 0:800]
        base = (np.sin(x / 9.0) * np.cos(y / 13.0) * 90 + 128 + rng.integers(0, 30, (600, 800))).clip(0, 255)
        return [np.stack([base, np.roll(base, 7, 1), base[::-1]], -1).astype(np.uint8)]


def photos(n: int, size: tuple[int, int] | None = None) -> list[np.ndarray]:
    """n RGB photos resized to `size` (width, height); default 500x375 and
    375x500 in turn (ImageNet's typical size)."""
    from PIL import Image

    srcs = sources()
    out = []
    for k in range(n):
        wh = size if size is not None else ((500, 375) if k % 2 else (375, 500))
        out.append(np.asarray(Image.fromarray(srcs[k % len(srcs)]).resize(wh)))
    return out


def jpegs(n: int, quality: int = 90, size: tuple[int, int] | None = None) -> list[bytes]:
    """The same n photos as JPEG files saved by Pillow."""
    import io

    from PIL import Image

    out = []
    for a in photos(n, size):
        b = io.BytesIO()
        Image.fromarray(a).save(b, format="JPEG", quality=quality)
        out.append(b.getvalue())
    return out
