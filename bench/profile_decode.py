"""Where gdsio.image.decode's host time goes on a GPU, beside
torchvision.io.decode_jpeg: 256 photographs (bench/photos.py) decoded to RGB
from host bytes and from GPU memory, each timed as the figures time (bench/figures.py),
the steps around nvJPEG's batch call timed alone (the output allocations, the
staging copy of host bitstreams, nvJPEG's hardware check, the header parse),
then cProfile over 5 calls of each.

Why: the figures measured gdsio.image.decode at 0.40x torchvision from host
bytes while gdsio's nvJPEG batch call alone was at parity with torchvision's
(bench/results/device-check-2026-12-04-s2.md): the rest is host work around it.

    python bench/profile_decode.py [--images 256] [--top 35]

Needs a CUDA device, nvJPEG and torchvision; run it outside the source tree
(python -P) so the installed gdsio is imported.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--top", type=int, default=35)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("profile_decode.py needs a CUDA device")
    import torchvision as tv

    import gdsio.image as gi
    from gdsio.image import batch, nvjpeg, transfer
    from gdsio.image.codec import Item
    import figures
    from photos import jpegs

    print("gdsio from", gi.__file__)
    blobs = jpegs(args.images)
    host = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
    dev = [t.cuda() for t in host]
    rgb = tv.io.ImageReadMode.RGB
    cuda = torch.device("cuda")

    def median_ms(fn, reps=10):  # the figures' timing (bench/figures.py): warm-up calls, then synchronized calls
        return 1e3 * figures._timed(fn, "cuda", reps)["median_s"]

    for _ in range(3):  # warm: nvJPEG's handles, the caching allocators
        gi.decode(host, device="cuda", mode="RGB")
        gi.decode(dev, device="cuda", mode="RGB")
        tv.io.decode_jpeg(host, device="cuda", mode=rgb)
    g_host = median_ms(lambda: gi.decode(host, device="cuda", mode="RGB"))
    g_dev = median_ms(lambda: gi.decode(dev, device="cuda", mode="RGB"))
    t_host = median_ms(lambda: tv.io.decode_jpeg(host, device="cuda", mode=rgb))
    n = args.images
    print(f"gdsio.image.decode, host bytes:   {g_host:.2f} ms ({t_host / g_host:.2f}x torchvision)")
    print(f"gdsio.image.decode, GPU memory:   {g_dev:.2f} ms ({t_host / g_dev:.2f}x torchvision from host bytes)")
    print(f"torchvision.io.decode_jpeg, host: {t_host:.2f} ms")
    h, w = 375, 500
    print(f"  torch.empty x{n}: {median_ms(lambda: [torch.empty((3, h, w), dtype=torch.uint8, device=cuda) for _ in range(n)]):.2f} ms")
    print(f"  transfer.stage x{n}: {median_ms(lambda: transfer.stage(host, cuda)):.2f} ms")
    prefixes = [bytes(b[:4096]) for b in blobs]
    print(f"  nvjpeg.hardware_check x{n}: {median_ms(lambda: nvjpeg.hardware_check(0, prefixes)):.2f} ms")
    opts = batch.options(mode="RGB", on_error="raise", exif=False, raw=None, npy_layout="auto", max_pixels=None)

    def headers():
        items = [Item(i, f"data[{i}]", t, t.numel()) for i, t in enumerate(host)]
        batch.read_headers(items, opts)
        for it in items:
            batch.check(it, opts)

    print(f"  items, headers and checks x{n}: {median_ms(headers):.2f} ms")
    for name, data in (("host bytes", host), ("GPU memory", dev)):
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(5):
            gi.decode(data, device="cuda", mode="RGB")
        torch.cuda.synchronize()
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(args.top)
        print(f"==== from {name}, 5 calls, by cumulative time")
        print(s.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
