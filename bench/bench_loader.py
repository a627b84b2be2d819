"""gdsio.Loader against the pipelines people use, side by side in one run.

Every pipeline turns an ImageFolder of JPEGs (about 500x375) into
RandomResizedCrop(224) + flip + normalised batches on the target device:

  gdsio            gdsio.Loader (reads via the I/O engine, nvJPEG or Pillow, fused transform;
                   on the CPU the JPEGs decoded only for their crop's box)
  gdsio-whole      the same with crop_decode=False (every JPEG decoded whole)
  dataloader       torch DataLoader, PIL decode + torchvision transforms (PIL-only twin
                   when torchvision is missing), num_workers, pin_memory on a GPU
  torchvision-gpu  (GPU, torchvision) read_file + batched decode_jpeg(device="cuda")
                   + v2 resized_crop per image, in the main thread

    python bench/bench_loader.py                                  # cuda if usable, else cpu
    python bench/bench_loader.py --device cpu --workers 2 --images 256 --json out.json
    python bench/bench_loader.py /data/imagenet/val --device cuda --workers 16 --batch 256
    pytest bench/bench_loader.py                                  # the smoke test only

Each pipeline runs one untimed warm-up pass, then --passes timed passes; the
figure is images per second over the timed passes (on a GPU, up to a
synchronisation after the last batch). Ratios are gdsio over the peer.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np
import pytest
import torch

from gdsio.tools import demo

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _have_torchvision() -> bool:
    try:
        import torchvision  # noqa: F401
    except ImportError:
        return False
    return True


def _files(root: str) -> list[tuple[str, int]]:
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    out = []
    for k, c in enumerate(classes):
        for dirpath, _, names in sorted(os.walk(os.path.join(root, c))):
            out += [(os.path.join(dirpath, n), k) for n in sorted(names) if n.lower().endswith((".jpg", ".jpeg"))]
    return out


# ---- pipelines: each returns a function that runs one pass and returns the images seen -----


def gdsio_pipeline(root: str, device: str, batch: int, dtype: Any, crop_decode: bool = True) -> Callable[[], int]:
    from gdsio.data import Compose, Loader, Normalize, RandomHorizontalFlip, RandomResizedCrop, ToDtype

    tf = Compose([RandomResizedCrop(224), RandomHorizontalFlip(), ToDtype(dtype, scale=True), Normalize(MEAN, STD)])
    loader = Loader(root, batch, transform=tf, device=device, shuffle=True, kind="image", drop_last=False,
                    crop_decode=crop_decode)

    def one_pass() -> int:
        n = 0
        for images, _ in loader:
            n += images.shape[0]
        return n

    one_pass.loader = loader  # type: ignore[attr-defined]
    return one_pass


class _PilDataset(torch.utils.data.Dataset):
    """ImageFolder + PIL + the torchvision training transform (or its PIL-only twin)."""

    def __init__(self, root: str) -> None:
        self.samples = _files(root)
        self.tv = None
        if _have_torchvision():
            from torchvision.transforms import v2

            self.tv = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                                  v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        from PIL import Image

        path, label = self.samples[i]
        with Image.open(path) as im:
            img = im.convert("RGB")
        if self.tv is not None:
            return self.tv(img), label
        # torchvision's RandomResizedCrop on a PIL image is crop + PIL bilinear resize: the same calls here.
        w, h = img.size
        top, left, ch, cw = _rrc_params(h, w)
        img = img.resize((224, 224), Image.BILINEAR, box=(left, top, left + cw, top + ch))
        if random.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        t = torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1).float().div_(255)
        return (t - self.mean) / self.std, label


def _rrc_params(h: int, w: int, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)) -> tuple[int, int, int, int]:
    area = h * w
    for _ in range(10):
        target = area * random.uniform(*scale)
        aspect = math.exp(random.uniform(math.log(ratio[0]), math.log(ratio[1])))
        cw, ch = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            return random.randint(0, h - ch), random.randint(0, w - cw), ch, cw
    return 0, 0, h, w


def dataloader_pipeline(root: str, device: str, batch: int, dtype: Any, workers: int) -> Callable[[], int]:
    cuda = device.startswith("cuda")
    dl = torch.utils.data.DataLoader(_PilDataset(root), batch_size=batch, shuffle=True, num_workers=workers,
                                     pin_memory=cuda, persistent_workers=workers > 0)

    def one_pass() -> int:
        n = 0
        for images, labels in dl:
            images = images.to(device, non_blocking=True).to(dtype)
            labels = labels.to(device, non_blocking=True)
            n += images.shape[0]
        return n

    return one_pass


def torchvision_gpu_pipeline(root: str, device: str, batch: int, dtype: Any) -> Callable[[], int]:
    import torchvision
    from torchvision.transforms.v2 import functional as TF

    files = _files(root)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)

    def one_pass() -> int:
        order = torch.randperm(len(files)).tolist()
        n = 0
        for b in range(0, len(order), batch):
            chunk = [files[i][0] for i in order[b : b + batch]]
            data = [torchvision.io.read_file(p) for p in chunk]
            imgs = torchvision.io.decode_jpeg(data, device=device, mode=torchvision.io.ImageReadMode.RGB)
            out = []
            for img in imgs:
                h, w = img.shape[-2:]
                top, left, ch, cw = _rrc_params(h, w)
                img = TF.resized_crop(img, top, left, ch, cw, [224, 224], antialias=True)
                out.append(TF.horizontal_flip(img) if random.random() < 0.5 else img)
            x = torch.stack(out).to(dtype).div_(255)
            x = (x - mean.to(dtype)) / std.to(dtype)
            n += x.shape[0]
        return n

    return one_pass


# ---- the run -------------------------------------------------------------------------


def _time(one_pass: Callable[[], int], passes: int, device: str) -> dict[str, Any]:
    one_pass()  # warm-up: worker start, allocator, nvJPEG handles, page cache
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sync()
    t0 = time.perf_counter()
    n = sum(one_pass() for _ in range(passes))
    sync()
    s = time.perf_counter() - t0
    return {"images": n, "seconds": s, "images_per_s": n / s}


def run(root: str, *, device: str, batch: int, workers: int, passes: int, which: list[str]) -> dict[str, Any]:
    cuda = device.startswith("cuda")
    dtype = torch.float16 if cuda else torch.float32
    results: dict[str, Any] = {"device": device, "batch": batch, "workers": workers, "passes": passes,
                               "images": len(_files(root)), "torchvision": _have_torchvision(), "pipelines": {}}
    for name in which:
        if name not in ("gdsio", "gdsio-whole", "dataloader", "torchvision-gpu"):
            raise ValueError(f"unknown pipeline {name!r}")
        if name == "torchvision-gpu" and (not cuda or not _have_torchvision()):
            results["pipelines"][name] = {"skipped": "needs a GPU and torchvision"}
            continue
        p = None
        try:  # one pipeline's failure is reported and the others still run
            if name in ("gdsio", "gdsio-whole"):
                p = gdsio_pipeline(root, device, batch, dtype, crop_decode=name == "gdsio")
            elif name == "dataloader":
                p = dataloader_pipeline(root, device, batch, dtype, workers)
            else:
                p = torchvision_gpu_pipeline(root, device, batch, dtype)
            r = _time(p, passes, device)
            if name in ("gdsio", "gdsio-whole"):
                st = p.loader.stats()  # type: ignore[attr-defined]
                r.update(io_backends=st.io_backends, decode_backends=st.decode_backends, fused=True,
                         data_wait_share=st.data_wait_share)
            if name == "dataloader":
                r["transforms"] = "torchvision v2 (PIL)" if _have_torchvision() else "PIL twin (torchvision missing)"
        except Exception as e:
            r = {"error": f"{type(e).__name__}: {e}"}
        finally:
            del p  # the DataLoader's persistent workers exit with it
        results["pipelines"][name] = r
    g = results["pipelines"].get("gdsio", {}).get("images_per_s")
    for name, r in results["pipelines"].items():
        if g and name != "gdsio" and "images_per_s" in r:
            r["gdsio_ratio"] = g / r["images_per_s"]
    return results


def _print(results: dict[str, Any], out: Any = sys.stdout) -> None:
    out.write(f"{results['images']} JPEGs, batch {results['batch']}, device {results['device']}, "
              f"{results['passes']} timed passes, DataLoader workers {results['workers']}\n")
    for name, r in results["pipelines"].items():
        if "skipped" in r or "error" in r:
            out.write(f"  {name:16s} {'skipped' if 'skipped' in r else 'FAILED'}: {r.get('skipped') or r['error']}\n")
            continue
        extra = f"  gdsio is {r['gdsio_ratio']:.2f}x" if "gdsio_ratio" in r else ""
        detail = (f"  [{', '.join(r['io_backends'])}; {', '.join(r['decode_backends'])}]" if "io_backends" in r
                  else f"  [{r.get('transforms', '')}]")
        out.write(f"  {name:16s} {r['images_per_s']:9.1f} images/s{extra}{detail}\n")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", help="an ImageFolder of JPEGs (default: generate one)")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda if usable)")
    ap.add_argument("--images", type=int, default=512, help="images to generate (default 512)")
    ap.add_argument("--batch", type=int, default=None, help="batch size (default 256 on a GPU, 64 on the CPU)")
    ap.add_argument("--workers", type=int, default=None, help="DataLoader workers (default: CPU cores, at most 16)")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--pipelines", default="gdsio,gdsio-whole,dataloader,torchvision-gpu")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    device = a.device or demo.default_device()
    batch = a.batch or (256 if device.startswith("cuda") else 64)
    workers = a.workers if a.workers is not None else min(16, len(os.sched_getaffinity(0)))
    with tempfile.TemporaryDirectory(prefix="gdsio-bench-loader-") as tmp:
        root = a.path
        if root is None:
            root = tmp
            per = max(1, a.images // 4)
            demo.write_jpeg_folder(root, classes=4, per_class=per)
        results = run(root, device=device, batch=batch, workers=workers, passes=a.passes,
                      which=[p for p in a.pipelines.split(",") if p])
    _print(results)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


def test_smoke(tmp_path):
    """Runs every CPU pipeline on 16 small images so the script cannot rot."""
    demo.write_jpeg_folder(str(tmp_path), classes=2, per_class=8, size=(64, 48))
    r = run(str(tmp_path), device="cpu", batch=8, workers=0, passes=1, which=["gdsio", "gdsio-whole", "dataloader"])
    assert r["pipelines"]["gdsio"]["images"] == 16 and r["pipelines"]["dataloader"]["images"] == 16
    assert r["pipelines"]["dataloader"]["gdsio_ratio"] > 0



@pytest.mark.gpu
def test_gpu_smoke(tmp_path):
    """The GPU pipelines on 32 small images (torchvision-gpu reports itself skipped without torchvision)."""
    demo.write_jpeg_folder(str(tmp_path), classes=2, per_class=16, size=(96, 72))
    r = run(str(tmp_path), device="cuda", batch=16, workers=2, passes=1, which=["gdsio", "dataloader", "torchvision-gpu"])
    assert r["pipelines"]["gdsio"]["images"] == 32 and r["pipelines"]["dataloader"]["images"] == 32
    assert "torchvision-gpu" in r["pipelines"]


if __name__ == "__main__":
    main()
