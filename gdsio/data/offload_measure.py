"""``gdsio offload-plan --measure DATASET``: the costs ``offload_plan`` takes,
measured on a sample of the dataset, as ``bench/bench_ray.py --pinned``
measures them.

- ``ms_per_image``: this process's CPU time (user + system, all its threads)
  per image of a ``gdsio.Loader(device="cpu", threads=1)`` pass over the
  sample with the transform given (default: ImageNet training's
  RandomResizedCrop(224) + flip + float32 + Normalize).
- ``receive_ms_per_image``: the CPU time per image of this process and of
  the Ray head's processes (both the GPU node's) while a
  ``gdsio.data.ray.Loader(local_share=0.0)`` pass takes every image from a
  CPU node: the receive path as it runs, on a Ray cluster on 127.0.0.1
  (gdsio.data.loopback: a head and one CPU node, each in a session of its
  own, every socket checked on loopback, every process ended after), from a
  driver process of its own (``python -m gdsio.data.offload_measure``: this
  process never connects to Ray, and the driver has ended before the
  cluster does).
- ``remote_ms_per_image``: the CPU node's processes' CPU time per image
  they made (the actor's work and Ray's on that node).

Each figure is the median of `repeats` passes after one warm-up pass; the
consumer sleeps one GPU step (1 / steps_per_s) per batch, as training would.
The Ray loader keeps one actor pool over every pass (``epochs_per_pool``),
and one more untimed pass follows the timed ones: the pool makes a pass's
first batches (up to its queue and its calls in flight) while the consumer
finishes the one before, so each timed pass, as in training, has batches of
its own made in the pass before it and makes batches of the next. (The last
timed pass with no pass after it gained the first and lost none: its CPU
node's figure came out low, and 0 when, on a loaded machine, a slow
consumer let the pool make a 96-image pass ahead whole. A pool left with an
epoch unconsumed is not closed under it: Ray's driver aborted then, its
raylet connection closed under the feed's thread.)
CPU time, not wall time: the figures do not move with the machine's load
(the sample's node shares this machine's cores, which changes how long a
pass takes, not what it costs). Without Ray (``gdsio[ray]``) the receive and
remote costs are not measured and the result says so.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np
import torch

from .loader import Loader
from .loopback import LoopbackCluster, SessionMeter, check_loopback, session_pids, wait_for_nodes
from .sources import IMAGE_EXTENSIONS, FileList, file_list_of
from ..transforms import classes as T

__all__ = ["OffloadCosts", "measure_offload_costs"]

PRE = {"gdsio-role": "preprocess"}
TRAILING = 1  # untimed passes after the timed ones of the Ray loader, whose pool makes batches a pass ahead


@dataclasses.dataclass(frozen=True)
class OffloadCosts:
    """What :func:`measure_offload_costs` measured (CPU-ms per image, medians).

    receive_ms_per_image / remote_ms_per_image: None when not measured
    (``not_measured`` says why). runs: each repeat's figures.
    """

    ms_per_image: float
    receive_ms_per_image: float | None
    remote_ms_per_image: float | None
    images: int
    repeats: int
    runs: dict[str, list[float]]
    not_measured: str = ""

    def __str__(self) -> str:
        def f(v: float | None) -> str:
            return "not measured" if v is None else f"{v:.3g} CPU-ms/image"

        lines = [f"measured on {self.images} images, median of {self.repeats} passes:",
                 f"  making an image here (gdsio.Loader, 1 thread): {f(self.ms_per_image)}",
                 f"  receiving one made on a CPU node (this process + the Ray head's): {f(self.receive_ms_per_image)}",
                 f"  making one on a CPU node (its Ray processes): {f(self.remote_ms_per_image)}"]
        if self.not_measured:
            lines.append(f"  ({self.not_measured})")
        return "\n".join(lines)


def default_transform() -> Callable[[Any], Any]:
    """ImageNet training's: RandomResizedCrop(224) + flip + float32 + Normalize."""
    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True),
                      T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)])


def _cpu_self() -> float:
    return time.process_time()  # every thread's user + system time, at the clock's resolution (not /proc's ticks)


def _sample(source: Any, images: int) -> FileList:
    files = file_list_of(source, IMAGE_EXTENSIONS)
    if len(files.paths) == 0:
        raise ValueError(f"DATASET: no image in {source!r}")
    keep = np.sort(np.random.default_rng(0).permutation(len(files.paths))[:images])
    return FileList([files.paths[i] for i in keep], files.labels[keep], files.classes)


Meters = dict[str, tuple[Callable[[], float], Callable[[Any], int]]]


def _passes(loader: Any, repeats: int, step_s: float, meters: Meters, trailing: int = 0) -> dict[str, list[float]]:
    """One warm-up pass, then `repeats` timed passes, then `trailing` untimed ones: for each
    meter (CPU seconds, images of the pass's stats), its growth over each timed pass in ms per
    image."""
    out: dict[str, list[float]] = {name: [] for name in meters}
    for k in range(repeats + 1 + trailing):
        before = {name: cpu() for name, (cpu, _) in meters.items()}
        loader.stats(reset=True)
        for _ in loader:
            time.sleep(step_s)  # the GPU step
        if 0 < k <= repeats:
            stats = loader.stats()
            for name, (cpu, count) in meters.items():
                out[name].append(1e3 * (cpu() - before[name]) / max(1, count(stats)))
    return out


def measure_offload_costs(source: Any, *, batch_size: int, steps_per_s: float, images: int = 512,
                          repeats: int = 3, transform: Callable[[Any], Any] | None = None,
                          timeout: float = 600.0) -> OffloadCosts:
    """Measures the offload's costs on `images` samples of `source` (a seeded
    random sample of any source gdsio.Loader takes); see the module's docstring.

    Raises:
        ValueError: no image in `source`, or a bad count (named).
        gdsio.data.loopback.LoopbackError: the loopback cluster could not
            start, or a socket of it was off loopback.
    """
    if isinstance(images, bool) or not isinstance(images, int) or images < 1:
        raise ValueError(f"images must be a positive int, got {images!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    tf = transform if transform is not None else default_transform()
    files = _sample(source, images)
    step_s = 1.0 / steps_per_s
    local = Loader(files, batch_size, device="cpu", transform=tf, shuffle=True, threads=1)
    runs = _passes(local, repeats, step_s, {"ms_per_image": (_cpu_self, lambda s: s.samples)})
    receive = remote = None
    why = ""
    try:
        import ray.data  # noqa: F401 - optional (the gdsio[ray] extra): only whether it is there
    except ImportError as e:
        why = (f"Ray is not installed ({e}): receive and remote costs not measured; pip install 'gdsio[ray]' "
               f"to measure them")
    else:
        receive, remote = _measure_ray(files, batch_size, tf, repeats, step_s, timeout, runs)
    return OffloadCosts(ms_per_image=statistics.median(runs["ms_per_image"]), receive_ms_per_image=receive,
                        remote_ms_per_image=remote, images=len(files.paths), repeats=repeats, runs=runs, not_measured=why)


def _measure_ray(files: FileList, batch_size: int, tf: Any, repeats: int, step_s: float, timeout: float,
                 runs: dict[str, list[float]]) -> tuple[float, float]:
    """The receive and remote costs: a loopback cluster (a head, one CPU node) and a driver process of
    its own (``python -m gdsio.data.offload_measure``), which ends before the cluster does."""
    import gdsio

    # The driver and the nodes' workers import the gdsio this process runs.
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(gdsio.__file__)))
    pypath = os.pathsep.join([pkg_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    with LoopbackCluster(env={"PYTHONPATH": pypath}) as cluster:
        address = cluster.start_head()
        cluster.add_node()
        cluster.check_loopback()
        spec_path, out_path = os.path.join(cluster.tmp, "measure.pkl"), os.path.join(cluster.tmp, "measure.json")
        with open(spec_path, "wb") as f:
            pickle.dump({"files": files, "batch_size": batch_size, "transform": tf, "repeats": repeats,
                         "step_s": step_s, "timeout": timeout, "address": address,
                         "head": cluster.head_session, "nodes": cluster.node_sessions}, f)
        with open(os.path.join(cluster.tmp, "driver.log"), "w+") as log:
            try:
                rc = subprocess.run([sys.executable, "-m", "gdsio.data.offload_measure", spec_path, out_path],
                                    env=cluster.env, cwd=cluster.tmp, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, timeout=timeout * (repeats + 2) + 120).returncode
            except subprocess.TimeoutExpired:
                rc = None
            log.seek(0)
            text = log.read()
        # Ray's fatal checks print a C++ stack after the line that says why: keep those lines and the end.
        why = [ln for ln in text.splitlines() if "Check failed" in ln or "Error" in ln][:5]
        tail = "\n".join(why) + "\n...\n" + text[-1500:]
        if rc != 0:
            raise RuntimeError(f"the measuring driver {'timed out' if rc is None else f'exited {rc}'}: {tail}")
        with open(out_path) as f:
            got = json.load(f)
        left = cluster.close()
    if left:
        raise RuntimeError(f"processes of the loopback cluster outlived it: {left}")
    runs.update(got)
    bad = {k: v for k, v in got.items() if min(v) <= 0}
    if bad:
        raise ValueError(f"images: {len(files.paths)} were too few to time the CPU node's processes (/proc counts "
                         f"CPU in clock ticks): sample more (ms per image, each pass: {bad})")
    return statistics.median(got["receive_ms_per_image"]), statistics.median(got["remote_ms_per_image"])


def _driver(spec_path: str, out_path: str) -> int:
    """The driver process: local_share=0.0 passes, timed with the head's and the node's sessions."""
    with open(spec_path, "rb") as f:
        spec = pickle.load(f)
    import ray

    from gdsio.data import ray as gray

    ray.init(address=spec["address"], log_to_driver=False, include_dashboard=False)
    head, node = SessionMeter([spec["head"]]).start(), SessionMeter(spec["nodes"]).start()
    try:
        wait_for_nodes(ray, 1, PRE, timeout=min(spec["timeout"], 120))
        loader = gray.Loader(spec["files"], spec["batch_size"], device="cpu", transform=spec["transform"],
                             shuffle=True, local_share=0.0, resources=PRE, threads=1, timeout=spec["timeout"],
                             epochs_per_pool=1 + spec["repeats"] + TRAILING)
        try:
            got = _passes(loader, spec["repeats"], spec["step_s"], {
                # This process and the head's, less what the meters' own reading of /proc cost here.
                "receive_ms_per_image": (lambda: head.seconds() + _cpu_self() - head.own - node.own,
                                         lambda s: s.samples),
                "remote_ms_per_image": (node.seconds, lambda s: s.remote_samples)}, trailing=TRAILING)
            check_loopback(session_pids([spec["head"], *spec["nodes"]]) + [os.getpid()])
        finally:
            loader.close()
    finally:
        head.stop(), node.stop()
        ray.shutdown()
    with open(out_path, "w") as f:
        json.dump(got, f)
    return 0


if __name__ == "__main__":
    sys.exit(_driver(sys.argv[1], sys.argv[2]))
