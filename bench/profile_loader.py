"""Where the loader's time goes: one pass of gdsio.Loader over an ImageFolder of
JPEGs (the figures' loader pipeline: RandomResizedCrop(224), flip, float, Normalize),
with every Python thread sampled every few milliseconds (sys._current_frames: the
frame a thread is in, or the Python frame that called into C while C runs).

Why: the first GPU run (bench/results/device-check-2026-12-04.md) measured the GPU
loader at 0.17x a torchvision GPU-decode loop with its data-wait share at 99.6%,
and no profile; bench/device_check.sh runs this after the figures so that the next
GPU run says which calls the loader's threads spend that time in.

    python bench/profile_loader.py [--device cuda] [--images 1024] [--batch 256]
                                   [--interval-ms 2] [--top 25] [--json out.json]

Output: per thread group (threads named alike: gdsio-loader-0, gdsio-loader-1 ->
gdsio-loader), the samples, the functions most often innermost ("self": the time
spent in that function or in the C it called) and most often on the stack
("total"), each as a share of that group's samples. A sampling profile of wall
time, not CPU time: a thread that waits (a queue, a lock, the GIL's release in C)
is counted where it waits.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_loader  # noqa: E402
import figures  # noqa: E402


def _group(name: str) -> str:
    """Threads named alike are one group (gdsio-loader-3 -> gdsio-loader, ThreadPoolExecutor-0_1 -> ThreadPoolExecutor)."""
    return re.sub(r"[-_]?\d+(_\d+)?$", "", name) or name


# Frames every worker thread has under it: left out of "total", where they would fill the top.
_PLUMBING = ("threading.py:", "thread.py:_worker", "thread.py:run")


class Sampler:
    """Samples the stack of every Python thread but its own every `interval` seconds."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.samples: collections.Counter[str] = collections.Counter()
        self.self_: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self.total: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="profile-sampler", daemon=True)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = threading.get_ident()
        while True:  # a sample first, so that even a pass shorter than a period is seen once
            self._sample(me)
            if self._stop.wait(self.interval):
                return

    def _sample(self, me: int) -> None:
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            g = _group(names.get(ident, "?"))
            self.samples[g] += 1
            seen = set()
            f, innermost = frame, True
            while f is not None:
                code = f.f_code
                key = f"{os.path.basename(code.co_filename)}:{code.co_name}"
                if innermost:
                    self.self_[g][f"{key}:{f.f_lineno}"] += 1
                    innermost = False
                if key not in seen and not key.startswith(_PLUMBING):
                    seen.add(key)
                    self.total[g][key] += 1
                f = f.f_back

    def report(self, top: int) -> dict[str, Any]:
        out = {}
        for g, n in self.samples.most_common():
            out[g] = {"samples": n,
                      "self": [[k, round(v / n, 4)] for k, v in self.self_[g].most_common(top)],
                      "total": [[k, round(v / n, 4)] for k, v in self.total[g].most_common(top)]}
        return out


def run(device: str, images: int, batch: int, interval_ms: float, top: int, tmpdir: str | None) -> dict[str, Any]:
    import torch

    with tempfile.TemporaryDirectory(prefix="gdsio-profile-", dir=tmpdir) as root:
        made = figures.image_folder(root, images)
        one_pass = bench_loader.gdsio_pipeline(root, device, batch, torch.float32)
        one_pass()  # warm: the decoders, the buffers, the page cache
        loader = one_pass.loader  # type: ignore[attr-defined]
        before = loader.stats()
        with Sampler(interval_ms / 1000) as sampler:
            t0 = time.perf_counter()
            n = one_pass()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
        st = loader.stats()  # counts since the loader was made: the sampled pass's are the difference

        def sampled(now: dict[str, int], then: dict[str, int]) -> dict[str, int]:
            return {k: v - then.get(k, 0) for k, v in now.items() if v - then.get(k, 0)}

        doc = {
            "device": device, "images": made, "batch": batch, "interval_ms": interval_ms,
            "seconds": round(seconds, 3), "images_per_s": round(n / seconds, 1),
            "io_backends": sampled(st.io_backends, before.io_backends),
            "decode_backends": sampled(st.decode_backends, before.decode_backends),
            "threads": sampler.report(top),
        }
        return doc


def render(doc: dict[str, Any], top: int = 12) -> str:
    lines = [f"gdsio.Loader on {doc['device']}: {doc['images']} JPEGs, batch {doc['batch']}, "
             f"{doc['images_per_s']:.0f} images/s; io {doc['io_backends']}, decode {doc['decode_backends']}; "
             f"a sample every {doc['interval_ms']} ms"]
    for g, t in doc["threads"].items():
        lines.append(f"\n{g}: {t['samples']} samples")
        lines.append("  self (innermost frame):")
        lines += [f"    {share:6.1%}  {k}" for k, share in t["self"][:top]]
        lines.append("  total (on the stack):")
        lines += [f"    {share:6.1%}  {k}" for k, share in t["total"][:top]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda if usable)")
    ap.add_argument("--images", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=None, help="default: 256 on a GPU, 64 on the CPU")
    ap.add_argument("--interval-ms", type=float, default=2.0)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--tmpdir", default=None)
    ap.add_argument("--json", help="write the profile here")
    ap.add_argument("--md", help="write the rendered profile here (as a markdown code block)")
    a = ap.parse_args(argv)
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    batch = a.batch or (256 if device.startswith("cuda") else 64)
    doc = run(device, a.images, batch, a.interval_ms, a.top, a.tmpdir)
    print(render(doc), end="")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    if a.md:
        with open(a.md, "w") as f:
            f.write("```\n" + render(doc) + "```\n")
    return doc


if __name__ == "__main__":
    main()
