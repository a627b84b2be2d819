"""The photographs the image benchmarks use (shared by bench_decode.py and
bench_transforms.py)."""

from __future__ import annotations

import numpy as np


def photos(n: int) -> list[np.ndarray]:
    """n RGB photos of 500x375 or 375x500 (ImageNet's typical size), from
    scikit-image's samples when installed, else a textured stand-in."""
    from PIL import Image

    try:
        from skimage import data

        sources = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket(), data.immunohistochemistry()]
    except ImportError:
        rng = np.random.default_rng(0)
        y, x = np.mgrid[0:600, 0:800]
        base = (np.sin(x / 9.0) * np.cos(y / 13.0) * 90 + 128 + rng.integers(0, 30, (600, 800))).clip(0, 255)
        sources = [np.stack([base, np.roll(base, 7, 1), base[::-1]], -1).astype(np.uint8)]
    out = []
    for k in range(n):
        im = Image.fromarray(sources[k % len(sources)]).resize((500, 375) if k % 2 else (375, 500))
        out.append(np.asarray(im))
    return out


def jpegs(n: int, quality: int = 90) -> list[bytes]:
    """The same n photos as JPEG files saved by Pillow."""
    import io

    from PIL import Image

    out = []
    for a in photos(n):
        b = io.BytesIO()
        Image.fromarray(a).save(b, format="JPEG", quality=quality)
        out.append(b.getvalue())
    return out
