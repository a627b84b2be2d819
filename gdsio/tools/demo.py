"""``gdsio demo``: the loader on this machine, GPU or not, in a few seconds.

With no path it writes a small ImageFolder of JPEGs (4 classes, 200 images of
500x375) to a temporary folder, then runs the usual training input pipeline
(RandomResizedCrop 224, flip, normalise) through ``gdsio.Loader`` feeding a
small CNN training step, and prints images/s, the share of time the step
waited for data, and the I/O and decode backends that ran, per epoch and in
all. Progress: a tqdm bar with the rate and the time left on a terminal,
plain lines (a few per epoch) on a pipe or in a log.

>>> from gdsio.tools.demo import run_demo
>>> result = run_demo()                 # or run_demo("imagenet/val", device="cuda")
>>> result["images_per_s"], result["data_wait_share"]
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from typing import IO, Any, Iterator

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from ..config import current
from ..platform import nvidia

__all__ = ["CLASSES", "PER_CLASS", "SIZE", "default_device", "run_demo", "write_jpeg_folder"]

CLASSES = 4
PER_CLASS = 50
SIZE = (500, 375)  # width, height: the typical ImageNet photo


def default_device() -> str:
    """cuda where gdsio and torch can both use a GPU, else cpu."""
    return "cuda" if torch.cuda.is_available() and nvidia.cuda_unusable_reason() is None else "cpu"


def write_jpeg_folder(root: str, classes: int = CLASSES, per_class: int = PER_CLASS,
                      size: tuple[int, int] = SIZE, seed: int = 0) -> int:
    """Writes an ImageFolder of smooth synthetic photos (gradients and
    shapes, which compress like photos, unlike noise); returns the image count."""
    # Pillow and gdsio.data load when the demo runs, not with every `gdsio` command.
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    w, h = size
    # Patterns drawn at a quarter of the size and upscaled by Pillow: 16x less numpy work.
    yy, xx = np.mgrid[0 : max(1, h // 4), 0 : max(1, w // 4)].astype(np.float32)
    for c in range(classes):
        d = os.path.join(root, f"class{c}")
        os.makedirs(d, exist_ok=True)
        for i in range(per_class):
            f = rng.uniform(0.02, 0.2, 3)
            phase = rng.uniform(0, 6.3, 3)
            small = np.stack([127 + 120 * np.sin(f[k] * (xx + (k + 1) * yy) + phase[k]) for k in range(3)], axis=-1)
            img = Image.fromarray(small.astype(np.uint8)).resize((w, h), Image.BILINEAR)
            cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(20, 120)
            ImageDraw.Draw(img).ellipse((cx - r, cy - r, cx + r, cy + r), fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
            img.save(os.path.join(d, f"{i:04d}.jpg"), quality=90)
    return classes * per_class


class _Progress:
    """One epoch's progress. On a terminal: tqdm's bar, counting images, with
    the rate and the time left. Anywhere else (a pipe, a log file): a plain
    line at each quarter of the epoch, no carriage returns."""

    def __init__(self, images: int, batches: int, out: IO[str], desc: str) -> None:
        self.out, self.images, self.batches, self.desc = out, images, batches, desc
        self.n = self.b = 0
        self.t0 = time.perf_counter()
        self.bar: Any = None
        if _isatty(out):
            self.bar = tqdm(total=images, desc=desc, unit="img", file=out, leave=True, smoothing=0.1,
                            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} img [{elapsed}<{remaining}, {rate_fmt}{postfix}]")

    def update(self, images: int) -> None:
        self.n += images
        self.b += 1
        if self.bar is not None:
            self.bar.set_postfix_str(f"batch {self.b}/{self.batches}", refresh=False)
            self.bar.update(images)
        elif self.b == self.batches or self.b % max(1, self.batches // 4) == 0:
            rate = self.n / max(time.perf_counter() - self.t0, 1e-9)
            left = max(self.images - self.n, 0) / rate if rate > 0 else 0.0
            self.out.write(f"{self.desc}: {self.b}/{self.batches} batches, {self.n}/{self.images} images, "
                           f"{rate:.0f} images/s, {left:.0f} s left\n")
            self.out.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _epoch_summary(epoch: int, before: Any, after: Any, train: bool) -> str:
    """One line: what an epoch did, from two snapshots of the loader's stats."""
    samples = after.samples - before.samples
    seconds = after.seconds - before.seconds
    wait = after.data_wait_s - before.data_wait_s
    io = _counts(after.io_backends, before.io_backends, "reads")
    dec = _counts(after.decode_backends, before.decode_backends, "images")
    who = "the training step" if train else "the loop (no consumer work)"
    return (f"epoch {epoch} done: {samples} images in {seconds:.2f} s, {samples / max(seconds, 1e-9):.1f} images/s; "
            f"{who} waited for data {100 * wait / max(seconds, 1e-9):.1f}% of the time; I/O: {io}; decode: {dec}\n")


def _counts(now: dict[str, int], then: dict[str, int], what: str) -> str:
    diff = {k: v - then.get(k, 0) for k, v in sorted(now.items()) if v - then.get(k, 0)}
    return ", ".join(f"{k} ({v} {what})" for k, v in diff.items()) or "none"


def _isatty(out: IO[str]) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def _tiny_cnn(device: Any) -> Any:
    """A small CNN and its optimiser: a real training step whose wait for data
    the meter can measure, light enough for two CPU cores."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.AvgPool2d(8), nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, CLASSES),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(images: Any, labels: Any) -> None:
        loss = nn.functional.cross_entropy(model(images.float()), labels.clamp(min=0) % CLASSES)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


@contextlib.contextmanager
def _dataset(path: str | None, out: IO[str]) -> Iterator[str]:
    if path is not None:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="gdsio-demo-") as tmp:
        t0 = time.perf_counter()
        n = write_jpeg_folder(tmp)
        out.write(f"wrote {n} JPEGs of {SIZE[0]}x{SIZE[1]} in {CLASSES} classes to {tmp} "
                  f"({time.perf_counter() - t0:.1f} s)\n")
        yield tmp


def run_demo(path: str | None = None, *, device: str | None = None, epochs: int = 1, batch_size: int = 32,
             train: bool = True, out: IO[str] = sys.stdout) -> dict[str, Any]:
    """Runs `epochs` of the loader over `path` (default: a generated ImageFolder
    of JPEGs) on `device` (default: cuda if usable, else cpu), feeding a small
    CNN training step (``train=False``: the loader alone), and prints what it
    measured. Returns images_per_s, data_wait_share, io_backends,
    decode_backends, device, fused, images, batches, seconds, clock."""
    from ..data import IMAGENET_MEAN, IMAGENET_STD, Compose, Loader, Normalize, RandomHorizontalFlip, RandomResizedCrop, ToDtype

    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs and batch_size must be >= 1; got {epochs}, {batch_size}")
    current()  # a bad GDSIO_* variable fails here, not after the JPEGs are written
    device = device or default_device()
    dtype = torch.float16 if device.startswith("cuda") else torch.float32  # half math is slow on CPUs
    transform = Compose([RandomResizedCrop(224), RandomHorizontalFlip(), ToDtype(dtype, scale=True),
                         Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    with _dataset(path, out) as root:
        loader = Loader(root, batch_size, transform=transform, device=device, shuffle=True, kind="image")
        step = _tiny_cnn(loader.device) if train else None
        if step is not None:  # the model's own first-call costs (kernel selection) are not the loader's
            step(torch.zeros(batch_size, 3, 224, 224, device=loader.device, dtype=dtype),
                 torch.zeros(batch_size, dtype=torch.int64, device=loader.device))
        out.write(f"gdsio.Loader: {len(loader.table)} images, batch {batch_size}, device {loader.device}, "
                  f"transform {'fused' if transform.fused else 'unfused'}"
                  f"{', feeding a small CNN training step' if train else ', no consumer work'}\n")
        per_epoch = min(len(loader) * loader.batch_size, loader.order.per_rank)
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            before = loader.stats()
            bar = _Progress(per_epoch, len(loader), out, f"epoch {epoch}")
            try:
                for images, labels in loader:
                    if step is not None:
                        step(images, labels)
                    bar.update(images.shape[0])
            finally:
                bar.close()
            out.write(_epoch_summary(epoch, before, loader.stats(), train))
            out.flush()
        if loader.device.type == "cuda":
            torch.cuda.synchronize(loader.device)
        s = loader.stats()
    io = ", ".join(f"{k} ({v} reads)" for k, v in sorted(s.io_backends.items())) or "none"
    dec = ", ".join(f"{k} ({v} images)" for k, v in sorted(s.decode_backends.items())) or "none"
    out.write(f"{s.samples_per_s:.1f} images/s over {s.samples} images ({s.seconds:.2f} s)\n")
    if train:
        out.write(f"the training step waited for data {100 * s.data_wait_share:.1f}% of the time ({s.clock} clock): "
                  + ("input-bound for this small model; a larger model waits less"
                     if s.data_wait_share > 0.1 else "compute-bound: the loader keeps up") + "\n")
    out.write(f"I/O: {io}\ndecode: {dec}\n")
    return {"images_per_s": s.samples_per_s, "data_wait_share": s.data_wait_share, "io_backends": s.io_backends,
            "decode_backends": s.decode_backends, "device": str(loader.device), "fused": transform.fused,
            "images": s.samples, "batches": s.batches, "seconds": s.seconds, "clock": s.clock}
