"""The issues' headline figures in one run, each beside its peer or ceiling
measured in the same process (bench/device_check.sh runs it on a GPU machine).

  resize       256 photos of about 500x375 -> 224x224, antialias: gdsio (one
               launch for the list) against torchvision v2 resize (the loop a
               list needs, and its best case, one same-sized batch tensor);
               achieved bytes/s against a device-to-device copy (the ceiling)
  jpeg         256 JPEGs: gdsio.image.decode from GPU memory (device bitstream)
               and from host bytes against torchvision.io.decode_jpeg(list,
               device="cuda"); the nvJPEG backend that ran
  loader       an ImageFolder of JPEGs (500x375) -> RandomResizedCrop(224) +
               flip + float16 normalised batches of 256: gdsio.Loader against
               DataLoader (PIL + torchvision, 16 workers, pin_memory) and a
               torchvision GPU pipeline (batched decode_jpeg + v2 per image)
  resnet50     gdsio.starvation.measure with torchvision's ResNet-50 training
               step (bf16 autocast, SGD, channels_last) at batch 256: the data-
               wait share, real against replayed-batch throughput
  safetensors  a 4 GiB file: gdsio.load_safetensors against
               safetensors.torch.load_file(device=...), warm and cold page cache
               (with device="cpu" both map the file copy-on-write by default: the
               figure then times the mapping, not a read of the bytes)

    python bench/figures.py --json figures.json --md figures.md
    python bench/figures.py --only resize,jpeg --quick
    python bench/figures.py --device cpu --only loader,safetensors --quick   # the CPU smoke
    python bench/figures.py --render figures.json                           # its markdown again

A figure that cannot run here (no GPU, no torchvision, no safetensors) says
why and the others still run; a figure that fails records its traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench/ for photos and bench_loader

import gdsio
from gdsio.tools import demo

OUT = [224, 224]


class Skip(Exception):
    """A figure that cannot run here; the message says why."""


def _torchvision() -> Any:
    try:
        import torchvision
        import torchvision.transforms.v2.functional
    except ImportError as e:
        raise Skip(f"torchvision is not installed ({e})") from None
    return torchvision


def _need_gpu(device: str) -> None:
    if not device.startswith("cuda"):
        raise Skip("needs a GPU")


def _timed(fn: Callable[[], Any], device: str, reps: int, warmup: int = 2) -> dict[str, float]:
    """Median and best wall time of fn() up to a device synchronisation (so a
    GPU figure counts the host work that launches it, as a training loop sees it)."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "best_s": min(times), "reps": reps}


def _photos(n: int) -> list[np.ndarray]:
    from photos import photos

    return photos(n)


# ---- resize -----------------------------------------------------------------------------


def fig_resize(device: str, quick: bool) -> dict[str, Any]:
    _need_gpu(device)
    tv = _torchvision()
    from torchvision.transforms.v2 import functional as F

    from gdsio import transforms as T

    n, reps = (32, 5) if quick else (256, 20)
    imgs = [torch.from_numpy(a.copy()).permute(2, 0, 1).contiguous().to(device) for a in _photos(n)]
    same = torch.stack([t for t in imgs if t.shape == imgs[0].shape])
    moved = sum(t.numel() for t in imgs) + n * 3 * OUT[0] * OUT[1]  # bytes read + written, uint8
    r: dict[str, Any] = {"images": n, "sizes": sorted({tuple(t.shape) for t in imgs}), "torchvision": tv.__version__}
    r["gdsio_list"] = _timed(lambda: T.resize(imgs, OUT, antialias=True), device, reps)
    r["gdsio_same_size_batch"] = _timed(lambda: T.resize(same, OUT, antialias=True), device, reps)
    g = r["gdsio_list"]["median_s"]
    r["images_per_s"] = n / g
    ceiling = _d2d_ceiling(device, reps)
    r["achieved_GBps"] = moved / g / 1e9
    r["d2d_copy_ceiling_GBps"] = ceiling / 1e9
    r["fraction_of_ceiling"] = moved / g / ceiling
    # The peer, each measurement on its own: a torchvision failure keeps gdsio's figures.
    _peer(r, "torchvision_list", lambda: _timed(
        lambda: torch.stack([F.resize(t, OUT, antialias=True) for t in imgs]), device, reps))
    _peer(r, "torchvision_same_size_batch", lambda: _timed(lambda: F.resize(same, OUT, antialias=True), device, reps))

    def diff() -> int:
        # The outputs agree within the rounding of two implementations of the filters.
        a = T.resize(imgs[:4], OUT, antialias=True).int()
        b = torch.stack([F.resize(t, OUT, antialias=True) for t in imgs[:4]]).int()
        return int((a - b).abs().max())

    _peer(r, "max_abs_diff_vs_torchvision", diff)
    vs = ""
    if "median_s" in r.get("torchvision_list", {}):
        r["ratio_vs_torchvision_list"] = r["torchvision_list"]["median_s"] / g
        r["ratio_vs_torchvision_same_size_batch"] = (r["torchvision_same_size_batch"]["median_s"]
                                                     / r["gdsio_same_size_batch"]["median_s"]
                                                     if "median_s" in r.get("torchvision_same_size_batch", {}) else None)
        same_ratio = r["ratio_vs_torchvision_same_size_batch"]
        vs = (f", {r['ratio_vs_torchvision_list']:.2f}x torchvision's list loop"
              + (f" ({same_ratio:.2f}x its same-size batch)" if same_ratio else ""))
    else:
        vs = f", torchvision FAILED: {r['torchvision_list']['error']}"
    r["summary"] = (f"resize {n} x ~500x375 -> 224: gdsio {n / g:.0f} images/s{vs}; "
                    f"{r['achieved_GBps']:.0f} GB/s = {r['fraction_of_ceiling']:.1%} of a D2D copy "
                    f"({r['d2d_copy_ceiling_GBps']:.0f} GB/s)")
    return r


def _d2d_ceiling(device: str, reps: int) -> float:
    """Bytes/s of a 1 GiB device-to-device copy (read + written), the best of `reps`."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * src.numel() / _timed(lambda: dst.copy_(src), device, reps)["best_s"]


def _peer(r: dict[str, Any], key: str, fn: Callable[[], Any]) -> None:
    """r[key] = fn(), or {"error": ...} when the peer fails (gdsio's figures stay)."""
    try:
        r[key] = fn()
    except Exception as e:
        r[key] = {"error": f"{type(e).__name__}: {e}"}


# ---- jpeg -------------------------------------------------------------------------------


def fig_jpeg(device: str, quick: bool) -> dict[str, Any]:
    _need_gpu(device)
    tv = _torchvision()
    import gdsio.image as gi

    n, reps = (32, 3) if quick else (256, 10)
    from photos import jpegs

    blobs = jpegs(n)
    host = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
    dev = [t.to(device) for t in host]
    _, infos = gi.decode(dev, device=device, mode="RGB", return_info=True)
    _, infos_host = gi.decode(host, device=device, mode="RGB", return_info=True)
    r: dict[str, Any] = {"images": n, "bytes": sum(map(len, blobs)), "torchvision": tv.__version__,
                         "backends_device_bitstream": sorted({i.backend for i in infos}),
                         "backends_host_bitstream": sorted({i.backend for i in infos_host}),
                         "nvjpeg": gi.nvjpeg_status()}
    r["gdsio_device_bitstream"] = _timed(lambda: gi.decode(dev, device=device, mode="RGB"), device, reps)
    r["gdsio_host_bitstream"] = _timed(lambda: gi.decode(host, device=device, mode="RGB"), device, reps)
    r["images_per_s"] = n / r["gdsio_device_bitstream"]["median_s"]
    mode = tv.io.ImageReadMode.RGB
    _peer(r, "torchvision", lambda: _timed(lambda: tv.io.decode_jpeg(host, device=device, mode=mode), device, reps))

    def diff() -> int:
        a = gi.decode(dev[:4], device=device, mode="RGB")
        b = tv.io.decode_jpeg(host[:4], device=device, mode=mode)
        return max(int((x.int() - y.int()).abs().max()) for x, y in zip(a, b))

    _peer(r, "max_abs_diff_vs_torchvision", diff)
    if "median_s" in r["torchvision"]:
        # The headline compares equal work: both start from host bytes (torchvision
        # copies them to the GPU too); from GPU memory is gdsio's extra.
        tv_s = r["torchvision"]["median_s"]
        r["torchvision_images_per_s"] = n / tv_s
        r["ratio_vs_torchvision"] = tv_s / r["gdsio_host_bitstream"]["median_s"]
        r["ratio_device_bitstream_vs_torchvision"] = tv_s / r["gdsio_device_bitstream"]["median_s"]
        vs = (f"; from host bytes as torchvision: {r['ratio_vs_torchvision']:.2f}x torchvision.io.decode_jpeg "
              f"({r['torchvision_images_per_s']:.0f} images/s)")
    else:
        vs = f", torchvision FAILED: {r['torchvision']['error']}"
    r["summary"] = (f"JPEG decode x{n}: gdsio from host bytes {n / r['gdsio_host_bitstream']['median_s']:.0f} "
                    f"images/s [{', '.join(r['backends_host_bitstream'])}], from GPU memory "
                    f"{r['images_per_s']:.0f} images/s [{', '.join(r['backends_device_bitstream'])}]{vs}")
    return r


# ---- loader -----------------------------------------------------------------------------


def _write_class(args: tuple[str, int, int, int]) -> int:
    root, c, per_class, seed = args
    # One class per thread: write_jpeg_folder with classes=1 writes class0; rename it.
    tmp = os.path.join(root, f".tmp{c}")
    demo.write_jpeg_folder(tmp, classes=1, per_class=per_class, seed=seed)
    os.rename(os.path.join(tmp, "class0"), os.path.join(root, f"class{c:03d}"))
    os.rmdir(tmp)
    return per_class


def image_folder(root: str, images: int, classes: int = 16) -> int:
    """An ImageFolder of `images` JPEGs of 500x375, a thread per class (Pillow's
    resize and JPEG encoder let go of the GIL)."""
    per = max(1, images // classes)
    jobs = [(root, c, per, 1000 + c) for c in range(classes)]
    with ThreadPoolExecutor(max_workers=min(classes, os.cpu_count() or 1)) as ex:
        return sum(ex.map(_write_class, jobs))


def fig_loader(device: str, quick: bool, root: str) -> dict[str, Any]:
    import bench_loader

    cuda = device.startswith("cuda")
    workers = min(16, len(os.sched_getaffinity(0)))
    batch = 256 if cuda else 64
    if quick:
        batch = 32
    which = ["gdsio", "dataloader"] + (["torchvision-gpu"] if cuda else [])
    r = bench_loader.run(root, device=device, batch=batch, workers=workers, passes=1 if quick else 2, which=which)
    parts = []
    for name, p in r["pipelines"].items():
        if "images_per_s" in p:
            parts.append(f"{name} {p['images_per_s']:.0f}" + (f" (gdsio {p['gdsio_ratio']:.2f}x)" if "gdsio_ratio" in p else ""))
        elif "error" in p:
            parts.append(f"{name} FAILED: {p['error']}")
        else:
            parts.append(f"{name} skipped: {p.get('skipped')}")
    wait = r["pipelines"].get("gdsio", {}).get("data_wait_share")
    r["summary"] = (f"loader, {r['images']} JPEGs, batch {batch}, {workers} DataLoader workers, images/s: "
                    + "; ".join(parts) + (f"; gdsio's own data-wait share {wait:.1%}" if wait is not None else ""))
    return r


# ---- resnet50 ---------------------------------------------------------------------------


def fig_resnet50(device: str, quick: bool, root: str) -> dict[str, Any]:
    _need_gpu(device)
    tv = _torchvision()
    from gdsio import starvation
    from gdsio.data import (
        IMAGENET_MEAN,
        IMAGENET_STD,
        Compose,
        Loader,
        Normalize,
        RandomHorizontalFlip,
        RandomResizedCrop,
        ToDtype,
    )

    batch, steps = (32, 5) if quick else (256, 30)
    torch.backends.cudnn.benchmark = True
    model = tv.models.resnet50(num_classes=1000).to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(b: Any) -> None:
        images, labels = b
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(images.contiguous(memory_format=torch.channels_last)), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    tf = Compose([RandomResizedCrop(224), RandomHorizontalFlip(), ToDtype(torch.bfloat16, scale=True),
                  Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    loader = Loader(root, batch, transform=tf, device=device, shuffle=True, drop_last=True, kind="image")
    rep = starvation.measure(step, loader, steps=steps, warmup=5)
    st = loader.stats()
    return {"batch": batch, "steps": steps, "real_samples_per_s": rep.real_samples_per_s,
            "upper_samples_per_s": rep.upper_samples_per_s, "data_wait_share": rep.data_wait_share,
            "verdict": rep.verdict, "clock": rep.clock, "io_backends": st.io_backends,
            "decode_backends": st.decode_backends,
            "summary": (f"ResNet-50 bf16 batch {batch}: data wait {rep.data_wait_share:.1%}, "
                        f"{rep.real_samples_per_s:.0f} vs {rep.upper_samples_per_s:.0f} images/s replayed "
                        f"({rep.verdict.splitlines()[0]})")}


# ---- safetensors ------------------------------------------------------------------------


def fig_safetensors(device: str, quick: bool, tmpdir: str,
                    partial: Callable[[dict[str, Any]], None] = lambda r: None) -> dict[str, Any]:
    try:
        import safetensors
        from safetensors.torch import load_file, save_file
    except ImportError as e:
        raise Skip(f"safetensors is not installed ({e})") from None
    from gdsio.platform import pagecache

    total = (64 << 20) if quick else (4 << 30)
    parts = 16
    path = os.path.join(tmpdir, "figure.safetensors")
    g = torch.Generator().manual_seed(0)
    # One random block, copied per tensor: randint over 4 GiB on one thread takes ~20 s.
    block = torch.randint(-(1 << 15), 1 << 15, (total // parts // 2,), dtype=torch.int16, generator=g)
    tensors = {f"layer{i}.weight": block.clone().view(torch.bfloat16).view(-1, 1024) for i in range(parts)}
    del block
    save_file(tensors, path)
    del tensors
    size = os.path.getsize(path)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    evictions: list[bool] = []

    def timed(fn: Callable[[], Any], cold: bool) -> float:
        if cold:
            evictions.append(pagecache.evict(path) and not (pagecache.resident_fraction(path) or 0) > 0.01)
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        s = time.perf_counter() - t0
        del out
        return s

    ours = lambda: gdsio.load_safetensors(path, device=device)
    peer = lambda: load_file(path, device=device)
    a, b = ours(), peer()
    same = set(a) == set(b) and all(torch.equal(a[k].view(torch.int16), b[k].view(torch.int16)) for k in b)  # bits: NaNs
    _, st = gdsio.load_safetensors(path, device=device, return_stats=True)
    del a, b
    r: dict[str, Any] = {"bytes": size, "safetensors": safetensors.__version__, "identical": same,
                         "backend": getattr(st, "backend", None), "reason": getattr(st, "reason", None)}
    reps = 1 if quick else 3
    for mode in ("warm", "cold"):
        cold = mode == "cold"
        ts_o, ts_p = [], []
        for k in range(reps):  # interleaved, so drift hits both
            ts_o.append(timed(ours, cold))
            ts_p.append(timed(peer, cold))
            if cold and ts_o[-1] + ts_p[-1] > 20:  # a slow disk: one cold pair is the figure
                break
        r[mode] = {"gdsio_s": statistics.median(ts_o), "safetensors_s": statistics.median(ts_p),
                   "gdsio_GBps": size / statistics.median(ts_o) / 1e9,
                   "safetensors_GBps": size / statistics.median(ts_p) / 1e9,
                   "ratio": statistics.median(ts_p) / statistics.median(ts_o), "pairs": len(ts_o)}
        if cold:
            r[mode]["eviction_worked"] = all(evictions)
        else:
            r["summary"] = (f"load_safetensors {size / 2**30:.2f} GiB to {device}: warm {r['warm']['ratio']:.2f}x "
                            "load_file (cold still running)")
            partial(r)  # the warm half is kept if the run is cut during the cold one
    os.unlink(path)
    r["summary"] = (f"load_safetensors {size / 2**30:.2f} GiB to {device} [{r['backend']}]: warm "
                    f"{r['warm']['gdsio_GBps']:.1f} GB/s, {r['warm']['ratio']:.2f}x load_file; cold "
                    f"{r['cold']['gdsio_GBps']:.1f} GB/s, {r['cold']['ratio']:.2f}x"
                    + ("" if r["cold"]["eviction_worked"] else " (eviction did NOT work: not cold)")
                    + ("" if same else "; OUTPUTS DIFFER")
                    + ("; on the CPU load_file only maps the file (nothing is read until touched)"
                       if not device.startswith("cuda") else ""))
    return r


# ---- the run ----------------------------------------------------------------------------

FIGURES = ("resize", "jpeg", "loader", "resnet50", "safetensors")


def run(only: list[str], device: str, quick: bool, tmpdir: str, images: int,
        save: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Runs the figures in `only`; save(doc) after each, so a run cut short keeps what it measured."""
    doc: dict[str, Any] = {"device": device, "quick": quick, "gdsio": gdsio.__version__, "torch": torch.__version__,
                           "gpu": torch.cuda.get_device_name() if device.startswith("cuda") else None,
                           "cpus": len(os.sched_getaffinity(0)), "figures": {}}
    root = None
    for name in only:
        t0 = time.perf_counter()
        try:
            if name in ("loader", "resnet50") and root is None:
                where = os.path.join(tmpdir, "imagefolder")
                shutil.rmtree(where, ignore_errors=True)  # a folder a failed try half wrote
                os.makedirs(where)
                image_folder(where, images)
                root = where  # only once it is whole
            if name == "resize":
                r = fig_resize(device, quick)
            elif name == "jpeg":
                r = fig_jpeg(device, quick)
            elif name == "loader":
                r = fig_loader(device, quick, root)
            elif name == "resnet50":
                r = fig_resnet50(device, quick, root)
            elif name == "safetensors":
                def partial(r: dict[str, Any], name: str = name, t0: float = t0) -> None:
                    doc["figures"][name] = {**r, "seconds": time.perf_counter() - t0, "partial": True}
                    if save is not None:
                        save(doc)

                r = fig_safetensors(device, quick, tmpdir, partial)
            else:
                raise ValueError(f"unknown figure {name!r}; the figures are {', '.join(FIGURES)}")
        except Skip as e:
            r = {"skipped": str(e), "summary": f"{name}: skipped: {e}"}
        except Exception as e:  # one figure's failure must not cost the others
            kept = doc["figures"].get(name, {})  # what a partial save already holds (the warm half)
            r = {**kept, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(),
                 "summary": f"{name}: FAILED: {type(e).__name__}: {e}"
                            + (f" (kept: {kept['summary']})" if kept.get("summary") else "")}
        r["seconds"] = time.perf_counter() - t0
        doc["figures"][name] = r
        print(r["summary"], flush=True)
        if save is not None:
            save(doc)
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return doc


def render_markdown(doc: dict[str, Any]) -> str:
    lines = [f"Figures on {doc['gpu'] or 'the CPU'} ({doc['cpus']} CPUs), gdsio {doc['gdsio']}, torch {doc['torch']}"
             + (" (quick)" if doc["quick"] else ""), ""]
    lines += [f"- **{k}** ({v['seconds']:.0f} s): {v['summary']}" for k, v in doc["figures"].items()]
    for k, v in doc["figures"].items():
        if "traceback" in v:
            lines += ["", f"{k} traceback:", "```", v["traceback"].rstrip(), "```"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(FIGURES), help=f"comma-separated, of {', '.join(FIGURES)}")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda if usable)")
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run, not figures")
    ap.add_argument("--images", type=int, default=4096, help="JPEGs in the loader's ImageFolder (default 4096)")
    ap.add_argument("--tmpdir", default=None, help="where the generated files go (default: the system's)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--md", help="write a markdown summary here")
    ap.add_argument("--render", metavar="JSON", help="print the markdown summary of an earlier --json, run nothing")
    a = ap.parse_args(argv)
    if a.render:
        with open(a.render) as f:
            doc = json.load(f)
        print(render_markdown(doc))
        return doc
    device = a.device or demo.default_device()

    def save(doc: dict[str, Any]) -> None:
        from gdsio.tools.bench.report import write_whole

        if a.json:
            write_whole(a.json, json.dumps(doc, indent=2, default=str))  # whole files only, also when killed
        if a.md:
            write_whole(a.md, render_markdown(doc) + "\n")

    with tempfile.TemporaryDirectory(prefix="gdsio-figures-", dir=a.tmpdir) as tmp:
        return run([f for f in a.only.split(",") if f], device, a.quick, tmp, 128 if a.quick else a.images, save)


if __name__ == "__main__":
    main()
