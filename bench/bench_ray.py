"""gdsio.data.ray.Loader against gdsio.Loader alone: images/s at the consumer
and its data-wait share, with 0, 1 and 2 CPU nodes and local_share fixed or "auto".

A local multi-node Ray cluster (ray.cluster_utils.Cluster, every process on
127.0.0.1): a trainer node (the head, 1 CPU, where this process consumes) and
CPU nodes labelled ``gdsio-role=preprocess`` (1 CPU each). The consumer's
"GPU step" is a sleep of --step-ms per batch (a stand-in: no GPU is needed and
the step's length is known); batches are made on the CPU and handed over
there (device="cpu"), or with --device cuda copied to the GPU, the consumer
waiting for each copy before its step.

    python bench/bench_ray.py                                    # the defaults below
    python bench/bench_ray.py --images 256 --batch 32 --step-ms 60 --json out.json
    pytest bench/bench_ray.py                                    # the smoke test only (needs gdsio[ray])

Each configuration runs one untimed warm-up pass (actors start, page cache
warms), then --passes timed passes over a fresh loader's epochs. Read the
figures with the machine in mind: on one machine every "node" shares the
same cores, so CPU nodes cannot add compute there; what this shows is the
overhead of the offload (the Ray Data hop, the copy out of the object
store, an actor pool started per pass), not the gain of a real cluster.

``--kept`` adds configs whose loader keeps one actor pool over the warm-up
and every timed pass (``epochs_per_pool``): their "first batch" column is
what a pass waits once the pool runs (the column lists each pass's too).

``--ranks`` measures instead what a lagging rank does to the others (Ray
Data's ``streaming_split`` stalls every split when one falls behind:
ray-project/ray#41973). Two ranks consume at once on 2 CPU nodes, rank 0
fast (--step-ms) and rank 1 either as fast or lagging (--lag-ms), every
batch made on the CPU nodes: ``gdsio.data.ray.Loader(rank=r,
world_size=2)``, each rank its own execution over its own shard, against
one ``gdsio.data.ray.dataset`` split by ``streaming_split(2, equal=True)``.
The figure is rank 0's rate with a lagging peer over its rate with an equal
one, each run in the same cluster.

``--pinned`` is issue 26's 1+1 core simulation (bench/ray_pinned.py): the
consumer pinned to core 0, each CPU node in a session of its own pinned to
core 1; steps/s and CPU-ms per image from /proc (``--smoke``: a tiny size).

``--conversion`` measures the hop alone, from Ray's object store to a batch
tensor in the consumer (ray-project/ray#50128: ``iter_torch_batches`` slow,
no way to reuse or pin the memory): the same materialized batches (one
block each, as the CPU nodes make them), read by gdsio's feed (blocks as
they are, one copy into a pooled tensor of its own; and as it was, with a
fresh ``torch.empty`` per batch), by
``iter_torch_batches`` as it is and followed by ``clone()``, and by
``iter_batches`` with ``torch.from_numpy`` (no copy: the floor); beside one
copy of the same bytes into a reused buffer (what a copy costs here). It
also checks whether an in-place write to an ``iter_torch_batches`` tensor
shows in the next pass over the dataset (whether its tensors alias the
stored blocks).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator

# Before ray is imported: keep every Ray process on 127.0.0.1 (Ray rewrites it
# to the machine's address otherwise; ray/_private/services.py).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # no usage reports off the machine (Ray's, Ray Data's poller)
os.environ["RAY_DATA_USAGE_DISABLED"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

import gdsio.data as gd  # noqa: E402
from gdsio.tools import demo  # noqa: E402

ROLE = "gdsio-role"
PRE = {ROLE: "preprocess"}
NODE = {"node_ip_address": "127.0.0.1", "object_store_memory": 150 << 20}


def transform() -> Any:
    return gd.Compose([gd.RandomResizedCrop(224), gd.RandomHorizontalFlip(), gd.ToDtype(torch.float32, scale=True),
                       gd.Normalize(gd.IMAGENET_MEAN, gd.IMAGENET_STD)])


def consume(loader: Any, step_s: float) -> tuple[int, float, int, float]:
    """One pass: (images seen, seconds to the first batch, images after the first batch, seconds after it)."""
    t0 = time.perf_counter()
    first = None
    n = n_first = 0
    for images, _ in loader:
        if first is None:
            first = time.perf_counter()
            n_first = int(images.shape[0])
        n += int(images.shape[0])
        if images.is_cuda:  # the batch's copy to the GPU (queued on this stream) is part of the wait
            torch.cuda.current_stream(images.device).synchronize()
        time.sleep(step_s)  # the "GPU step"
    end = time.perf_counter()
    return n, (first or end) - t0, n - n_first, end - (first or end)


class MemoryWatch:
    """Samples, every `every` seconds, the proportional set size (PSS: shared
    pages split among the processes that map them, so the object store's
    mapping is counted once) of this process and of every Ray process of the
    machine (raylet, GCS, workers: command lines starting "ray::" or naming
    Ray's binaries), and the bytes in Ray's spill files, and keeps the peaks.
    Linux only (/proc/*/smaps_rollup)."""

    RAY = ("ray::", "raylet", "gcs_server", "default_worker.py", "ray/_private/", "dashboard")

    def __init__(self, every: float = 0.25) -> None:
        import threading

        self.every = every
        self.peak_ray = self.peak_self = 0
        self.base_ray = self.base_self = 0
        self.peak_spilled = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-memory", daemon=True)

    @staticmethod
    def _pss(pid: int | str) -> int:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        return int(line.split()[1]) << 10
        except OSError:
            pass
        return 0

    def sample(self) -> tuple[int, int]:
        me = os.getpid()
        ray_total = 0
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == me:
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if any(k in cmd for k in self.RAY):
                ray_total += self._pss(pid)
        return ray_total, self._pss(me)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            r, m = self.sample()
            self.peak_ray, self.peak_self = max(self.peak_ray, r), max(self.peak_self, m)
            self.peak_spilled = max(self.peak_spilled, spilled_bytes())

    def __enter__(self) -> "MemoryWatch":
        self.base_ray, self.base_self = self.sample()
        self.peak_ray, self.peak_self = self.base_ray, self.base_self
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def spilled_bytes() -> int:
    """Bytes in Ray's spill files now: the files under every ``ray_spilled_objects``
    folder of the session's temporary directory (RAY_TMPDIR, where Ray's
    default filesystem spilling writes; a spilled object's file goes when it is freed)."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(os.environ.get("RAY_TMPDIR", "/tmp/ray")):
        if "ray_spilled_objects" in dirpath:
            for n in filenames:
                try:
                    total += os.path.getsize(os.path.join(dirpath, n))
                except OSError:
                    pass
    return total


def _sample_bytes(loader: Any) -> int:
    return 3 * 224 * 224 * 4  # transform(): float32 (3, 224, 224)


def run_config(name: str, make: Any, step_s: float, passes: int) -> dict[str, Any]:
    loader = make()
    consume(loader, step_s)  # warm-up: actors start, page cache
    loader.stats(reset=True)
    watch = MemoryWatch().__enter__()
    firsts = []
    after_n, after_s = 0, 0.0
    t0 = time.perf_counter()
    images = 0
    for _ in range(passes):
        n, first, n_after, s_after = consume(loader, step_s)
        images += n
        firsts.append(first)
        after_n += n_after
        after_s += s_after
    wall = time.perf_counter() - t0
    watch.__exit__()
    s = loader.stats()
    if hasattr(loader, "close"):
        loader.close()  # a kept actor pool holds its CPUs until then: the next config's pool needs them
    row: dict[str, Any] = {"config": name, "images": images, "seconds": wall, "images_per_s": images / wall,
                           "data_wait_share": s.data_wait_share, "first_batch_s": sum(firsts) / len(firsts),
                           "first_batch_each_s": firsts,
                           "steady_images_per_s": after_n / after_s if after_s > 0 else 0.0,
                           "ray_pss_base": watch.base_ray, "ray_pss_peak": watch.peak_ray,
                           "self_pss_base": watch.base_self, "self_pss_peak": watch.peak_self,
                           "spilled_peak_bytes": watch.peak_spilled,
                           "data_bytes": images * _sample_bytes(loader)}
    if hasattr(s, "remote_samples"):
        row.update(path=s.path, local_samples=s.local_samples, remote_samples=s.remote_samples,
                   nodes=len(s.remote_nodes), local_share_end=s.local_share, remote_ms_per_sample=s.remote_ms_per_sample,
                   remote_pools=s.remote_pools)
    else:
        row.update(path="local", local_samples=s.samples, remote_samples=0, nodes=0)
    return row


@contextlib.contextmanager
def _cluster(images: int, size: tuple[int, int], object_store_memory: int | None = None) -> Iterator[tuple[Any, str]]:
    """A Cluster on loopback with its trainer head (1 CPU; its object store
    NODE's unless given), connected, and an ImageFolder of `images` generated
    JPEGs; (cluster, folder). Shut down and removed after."""
    import ray
    from ray.cluster_utils import Cluster

    tmp = tempfile.mkdtemp(prefix="gdsio-bray-", dir="/tmp")  # short: Ray's unix sockets live under it
    os.environ["RAY_TMPDIR"] = tmp
    root = os.path.join(tmp, "train")
    demo.write_jpeg_folder(root, classes=4, per_class=max(1, images // 4), size=size)
    head = dict(NODE, **({} if object_store_memory is None else {"object_store_memory": object_store_memory}))
    c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, include_dashboard=False,
                                                          labels={ROLE: "trainer"}, **head))
    cwd = os.getcwd()
    try:
        # Ray puts the driver's working directory on its workers' sys.path: from a source
        # checkout's root they would import its gdsio/ (no compiled extension).
        os.chdir(tmp)
        try:
            c.connect()
        finally:
            os.chdir(cwd)
        ray.data.DataContext.get_current().enable_progress_bars = False
        yield c, root
    finally:
        ray.shutdown()
        c.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def run(images: int, batch: int, step_ms: float, passes: int, size: tuple[int, int], threads: int,
        only: set[str] | None = None, device: str = "cpu") -> dict[str, Any]:
    import gdsio.data.ray as gray

    tf = transform()
    step_s = step_ms / 1e3
    rows = []
    with _cluster(images, size) as (c, root):

        def want(name: str) -> bool:
            return only is None or name in only

        if want("local"):
            rows.append(run_config("local (gdsio.Loader)", lambda: gd.Loader(
                root, batch, device=device, transform=tf, shuffle=True, threads=threads), step_s, passes))
        c.add_node(num_cpus=1, labels=PRE, **NODE)

        def offload(share: Any, epochs: int = 1) -> Any:
            return lambda: gray.Loader(root, batch, device=device, transform=tf, shuffle=True, local_share=share,
                                       resources=PRE, threads=threads, timeout=300, epochs_per_pool=epochs)

        kept = passes + 1  # the warm-up pass and the measured ones: one actor pool for all of them
        for nodes in (1, 2):
            if nodes == 2:
                c.add_node(num_cpus=1, labels=PRE, **NODE)
            for share in ((0.0, 0.5, "auto") if nodes == 1 else (0.0, "auto")):
                where = f"ray, {nodes} CPU node{'s' if nodes > 1 else ''}, local_share={share}"
                if want(f"{nodes}:{share}"):
                    rows.append(run_config(where, offload(share), step_s, passes))
                if want(f"{nodes}:{share}:kept"):
                    rows.append(run_config(f"{where}, epochs_per_pool={kept}", offload(share, kept), step_s, passes))
    return {"rows": rows, "machine": machine(), "settings": dict(images=images, batch=batch, step_ms=step_ms,
                                                               passes=passes, size=list(size), threads=threads,
                                                               device=device)}


def _consume_rank(iterable: Any, step_s: float, out: dict[str, Any]) -> None:
    """One rank's consumer (a thread): its images, seconds, and seconds waited for batches."""
    t0 = time.perf_counter()
    n, waited, first = 0, 0.0, None
    it = iter(iterable)
    try:
        while True:
            w0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            got = time.perf_counter()
            if first is None:
                first = got - t0
            else:
                waited += got - w0  # the first batch's wait is the start-up, reported apart
            images = batch[0] if isinstance(batch, tuple) else batch["image"]
            n += int(len(images))
            time.sleep(step_s)
    except BaseException as e:  # noqa: BLE001 - reported in the row, the other rank goes on
        out["error"] = f"{type(e).__name__}: {e}"
    end = time.perf_counter()
    out.update(images=n, seconds=end - t0, first_batch_s=first or 0.0, waited_s=waited)


def run_ranks(images: int, batch: int, step_ms: float, lag_ms: float, size: tuple[int, int], threads: int,
              methods: tuple[str, ...] = ("gdsio", "streaming_split")) -> dict[str, Any]:
    """Two ranks at once, rank 1 as fast as rank 0 or lagging; see the module's docstring."""
    import threading

    import gdsio.data.ray as gray

    tf = transform()
    rows = []
    with _cluster(images, size) as (c, root):
        for _ in range(2):
            c.add_node(num_cpus=1, labels=PRE, **NODE)
        list(gd.Loader(root, batch, device="cpu", threads=threads))  # the page cache, for every config alike

        def streams(method: str) -> tuple[list[Any], list[Any]]:
            if method == "gdsio":
                loaders = [gray.Loader(root, batch, device="cpu", transform=tf, shuffle=True, local_share=0.0, rank=r,
                                       world_size=2, resources=PRE, threads=threads, timeout=300) for r in (0, 1)]
                return loaders, loaders
            ds = gray.dataset(root, transform=tf, shuffle=True, resources=PRE, batch_size=batch)
            splits = ds.streaming_split(2, equal=True)
            return [sp.iter_batches(batch_size=batch) for sp in splits], []

        for method in methods:
            for peer in ("equal", "lagging"):
                its, loaders = streams(method)
                steps = (step_ms / 1e3, (step_ms if peer == "equal" else lag_ms) / 1e3)
                outs: list[dict[str, Any]] = [{}, {}]
                ths = [threading.Thread(target=_consume_rank, args=(its[r], steps[r], outs[r]), name=f"rank{r}")
                       for r in (0, 1)]
                for t in ths:
                    t.start()
                for t in ths:
                    t.join()
                row: dict[str, Any] = {"method": method, "peer": peer, "step_ms": [step_ms, steps[1] * 1e3]}
                for r in (0, 1):
                    o = outs[r]
                    row[f"rank{r}"] = dict(o, images_per_s=o["images"] / o["seconds"] if o["seconds"] else 0.0,
                                           wait_share=o["waited_s"] / o["seconds"] if o["seconds"] else 0.0)
                if loaders:
                    row["actors"] = [lo._actors for lo in loaders]
                    row["remote_samples"] = [lo.stats().remote_samples for lo in loaders]
                    for lo in loaders:
                        lo.close()
                rows.append(row)
    return {"rows": rows, "machine": machine(), "settings": dict(images=images, batch=batch, step_ms=step_ms,
                                                               lag_ms=lag_ms, size=list(size), threads=threads)}


def ranks_table(result: dict[str, Any]) -> str:
    out = ["| method | rank 1 | rank 0 images/s | rank 0 first batch s | rank 0 s after it | rank 0 wait share after it "
           "| rank 0 seconds | rank 1 images/s | rank 1 seconds | rank 0 with a lagging peer vs an equal one |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    equal = {r["method"]: r["rank0"]["images_per_s"] for r in result["rows"] if r["peer"] == "equal"}
    for r in result["rows"]:
        a, b = r["rank0"], r["rank1"]
        base = equal.get(r["method"])
        ratio = f"{a['images_per_s'] / base:.2f}x" if r["peer"] == "lagging" and base else "-"
        errs = "; ".join(f"rank {k}: {r[f'rank{k}']['error']}" for k in (0, 1) if "error" in r[f"rank{k}"])
        out.append(f"| {r['method']} | {r['peer']} ({r['step_ms'][1]:.0f} ms/step) | {a['images_per_s']:.1f} | "
                   f"{a['first_batch_s']:.2f} | {a['seconds'] - a['first_batch_s']:.1f} | {a['wait_share']:.0%} | "
                   f"{a['seconds']:.1f} | "
                   f"{b['images_per_s']:.1f} | {b['seconds']:.1f} | {ratio}{' | ' + errs if errs else ''} |")
    return "\n".join(out)


def run_conversion(batches: int, batch: int, shape: tuple[int, ...], rounds: int) -> dict[str, Any]:
    """Per-batch time of the object store -> tensor hop, each way over the same
    materialized blocks, in interleaved rounds (medians); see the module's docstring."""
    import queue
    import statistics
    import threading

    import numpy as np
    import ray

    from gdsio.data.flow import Failed
    from gdsio.data.ray.passes import RemoteBatch, RemoteFeed

    def make(rows: dict[str, Any]) -> dict[str, Any]:
        """One input row -> one block of `batch` rows with the columns the CPU nodes give gdsio's feed
        (nested: Ray's workers get it by value, they cannot import this file)."""
        k = int(rows["id"][0])
        rng = np.random.default_rng(k)
        return {"image": rng.random((batch, *shape), dtype=np.float32), "label": np.full(batch, k, np.int64),
                "batch_no": np.full(batch, k, np.int64), "epoch": np.zeros(batch, np.int64),
                "count": np.full(batch, batch, np.int64), "node": np.array(["cpu-node"] * batch),
                "seconds": np.zeros(batch, np.float64)}

    nbytes = batch * 4 * int(np.prod(shape))
    with _cluster(1, (8, 8), object_store_memory=max(256 << 20, 3 * batches * nbytes)):
        ds = ray.data.range(batches, override_num_blocks=batches).map_batches(
            make, batch_size=1).materialize()
        plain = ds.select_columns(["image", "label"]).materialize()  # what a user hands iter_torch_batches
        src = np.random.default_rng(0).random((batch, *shape), dtype=np.float32)

        class FreshFeed(RemoteFeed):
            """The feed with a fresh torch.empty per batch, as it was before its host-pool buffers."""

            def _empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
                return torch.empty(shape, dtype=dtype)

        def feed(kind: type = RemoteFeed) -> list[Any]:
            q: queue.Queue[Any] = queue.Queue(2)
            stop = threading.Event()
            th = threading.Thread(target=kind(ds, q, stop, False, 2).run, daemon=True)
            th.start()
            out = []
            while isinstance(item := q.get(), RemoteBatch):
                out.append(item.images)
            th.join()
            if isinstance(item, Failed):
                raise item.error
            return out

        def torch_batches() -> list[Any]:
            return [b["image"] for b in plain.iter_torch_batches(batch_size=batch, device="cpu")]

        def from_numpy() -> list[Any]:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # the read-only buffer's warning: the point of the row
                return [torch.from_numpy(b["image"]) for b in plain.iter_batches(batch_size=batch,
                                                                                  batch_format="numpy")]

        def torch_batches_clone() -> list[Any]:
            return [b["image"].clone() for b in plain.iter_torch_batches(batch_size=batch, device="cpu")]

        reused = torch.empty((batch, *shape), dtype=torch.float32)

        def copy() -> list[Any]:
            for _ in range(batches):
                reused.numpy()[...] = src
            return [reused] * batches

        ways = {"gdsio feed (one copy)": feed, "gdsio feed, a fresh torch.empty per batch": lambda: feed(FreshFeed),
                "iter_torch_batches (views of the object store)": torch_batches,
                "iter_torch_batches + clone()": torch_batches_clone,
                "iter_batches + from_numpy (no copy: the floor)": from_numpy,
                "one copy into a reused buffer (a memcpy here)": copy}
        times: dict[str, list[float]] = {k: [] for k in ways}
        for r in range(rounds + 1):
            for name, fn in ways.items():
                t0 = time.perf_counter()
                got = fn()
                dt = time.perf_counter() - t0
                if len(got) != batches or tuple(got[0].shape) != (batch, *shape):
                    raise RuntimeError(f"{name}: {len(got)} batches of {tuple(got[0].shape) if got else None}")
                if r:  # round 0 warms every way up
                    times[name].append(dt / batches)
        # Whether iter_torch_batches' tensors alias the stored blocks: an in-place
        # write to one shows in the next pass over the same dataset (last: it spoils `plain`).
        # The images are in [0, 1): add 1000 to every one of a pass, look for them in the next.
        for b in plain.iter_torch_batches(batch_size=batch, device="cpu"):
            b["image"].add_(1000.0)
        aliases = any(float(b["image"].max()) >= 1000.0 for b in plain.iter_torch_batches(batch_size=batch,
                                                                                         device="cpu"))
        rows = [{"way": k, "ms_per_batch": statistics.median(v) * 1e3, "gb_per_s": nbytes / statistics.median(v) / 1e9,
                 "rounds_ms": [x * 1e3 for x in v]} for k, v in times.items()]
    return {"rows": rows, "machine": machine(), "iter_torch_batches_aliases_the_store": aliases,
            "settings": dict(batches=batches, batch=batch, shape=list(shape), rounds=rounds, batch_bytes=nbytes)}


def conversion_table(result: dict[str, Any]) -> str:
    gd_ms = result["rows"][0]["ms_per_batch"]  # gdsio's feed
    out = ["| way | ms per batch | GB/s | time vs gdsio feed |", "| --- | --- | --- | --- |"]
    for r in result["rows"]:
        out.append(f"| {r['way']} | {r['ms_per_batch']:.2f} | {r['gb_per_s']:.2f} | {r['ms_per_batch'] / gd_ms:.2f}x |")
    out.append("")
    out.append("An in-place write to a tensor from iter_torch_batches "
               + ("shows in the next pass over the same dataset: its tensors are views of the stored blocks."
                  if result["iter_torch_batches_aliases_the_store"] else "does not show in the next pass."))
    return "\n".join(out)


def machine() -> dict[str, Any]:
    import ray

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.abspath(__file__)), check=False).stdout.strip()
    except OSError:
        commit = ""
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "ray": ray.__version__, "commit": commit, "gpu": torch.cuda.is_available(),
            "load_before": os.getloadavg()[0]}


def table(result: dict[str, Any]) -> str:
    rows = result["rows"]
    base = next((r for r in rows if r["path"] == "local"), None)
    out = ["| config | path | images/s | vs local | data-wait share | first batch s | images/s after the first batch "
           "| vs local | made here / on CPU nodes | Ray processes' PSS, peak (growth) | this process's PSS, peak (growth) "
           "| batches' bytes | spill files, peak |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    mib = 1 << 20
    for r in rows:
        ratio = f"{r['images_per_s'] / base['images_per_s']:.2f}x" if base else "-"
        steady = f"{r['steady_images_per_s'] / base['steady_images_per_s']:.2f}x" if base else "-"
        spilled = f"{r['spilled_peak_bytes'] / mib:.0f} MiB"
        out.append(f"| {r['config']} | {r['path']} | {r['images_per_s']:.1f} | {ratio} | {r['data_wait_share']:.0%} | "
                   f"{r['first_batch_s']:.2f} | {r['steady_images_per_s']:.1f} | {steady} | "
                   f"{r['local_samples']} / {r['remote_samples']} | "
                   f"{r['ray_pss_peak'] / mib:.0f} MiB (+{(r['ray_pss_peak'] - r['ray_pss_base']) / mib:.0f}) | "
                   f"{r['self_pss_peak'] / mib:.0f} MiB (+{(r['self_pss_peak'] - r['self_pss_base']) / mib:.0f}) | "
                   f"{r['data_bytes'] / mib:.0f} MiB | {spilled} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=None, help="images per epoch (default 256; --pinned 1024)")
    ap.add_argument("--batch", type=int, default=None, help="default 32; --pinned 64")
    ap.add_argument("--step-ms", type=float, default=None,
                    help="the consumer's stand-in GPU step per batch (default 60; --pinned 30)")
    ap.add_argument("--passes", type=int, default=None, help="timed passes (default 2; --pinned 3)")
    ap.add_argument("--size", default="500x375", help="JPEG size WxH")
    ap.add_argument("--threads", type=int, default=1, help="reader threads of the local loader")
    ap.add_argument("--configs", default=None,
                    help="comma-separated subset: local, N:SHARE (N CPU nodes, SHARE 0.0, 0.5 or auto) and "
                         "N:SHARE:kept (one actor pool over every pass: epochs_per_pool); default: all but the "
                         "kept ones, which --kept adds; --pinned: local, N:SHARE (any fixed share in [0, 1], "
                         "or auto), both (the ceiling), local-again")
    ap.add_argument("--kept", action="store_true", help="also the kept-pool configs (1:0.0:kept, 1:auto:kept, 2:auto:kept)")
    ap.add_argument("--ranks", action="store_true",
                    help="two ranks at once, one lagging: gdsio.data.ray.Loader per rank against streaming_split")
    ap.add_argument("--lag-ms", type=float, default=500.0, help="--ranks: the lagging rank's step per batch")
    ap.add_argument("--conversion", action="store_true",
                    help="the object store -> tensor hop alone: gdsio's feed against iter_torch_batches")
    ap.add_argument("--batches", type=int, default=8, help="--conversion: materialized batches of --batch images")
    ap.add_argument("--rounds", type=int, default=5, help="--conversion: timed rounds (after one warm-up)")
    ap.add_argument("--device", default="cpu", help="where the loaders put the batches (cuda: through pinned memory, "
                                                    "the consumer waits for each copy); the offload table only")
    ap.add_argument("--pinned", action="store_true",
                    help="the 1+1 core simulation: consumer on core 0, CPU nodes on core 1 (bench/ray_pinned.py)")
    ap.add_argument("--smoke", action="store_true", help="--pinned at a tiny size (16 64x48 images, 4 configs)")
    ap.add_argument("--no-plan", action="store_true", help="--pinned without offload-plan --measure's predictions")
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args(argv)
    w, h = (int(x) for x in a.size.split("x"))
    if a.pinned or a.smoke:
        import ray_pinned  # bench/ray_pinned.py: bench/ is on sys.path as a script and under pytest

        if a.smoke:
            sizes = dict(images=16, batch=4, step_ms=1.0, passes=1, size=(64, 48), configs=ray_pinned.SMOKE_CONFIGS)
        else:
            sizes = dict(images=1024, batch=64, step_ms=30.0, passes=3, size=(w, h), configs=ray_pinned.CONFIGS)
        given = dict(images=a.images, batch=a.batch, step_ms=a.step_ms, passes=a.passes,
                     configs=tuple(a.configs.split(",")) if a.configs else None)
        result = ray_pinned.run_pinned(**{**sizes, **{k: v for k, v in given.items() if v is not None}},
                                       plan=not (a.smoke or a.no_plan))
        render = ray_pinned.table
    elif a.conversion:
        result = run_conversion(a.batches, a.batch or 32, (3, 224, 224), a.rounds)
        render = conversion_table
    elif a.ranks:
        result = run_ranks(a.images or 256, a.batch or 32, a.step_ms or 60.0, a.lag_ms, (w, h), a.threads)
        render = ranks_table
    else:
        only = set(a.configs.split(",")) if a.configs else None
        if only is None and a.kept:
            only = {"local", "1:0.0", "1:0.5", "1:auto", "2:0.0", "2:auto", "1:0.0:kept", "1:auto:kept", "2:auto:kept"}
        result = run(a.images or 256, a.batch or 32, a.step_ms or 60.0, a.passes or 2, (w, h), a.threads, only, a.device)
        render = table
    result["command"] = " ".join(["python", "bench/bench_ray.py", *(sys.argv[1:] if argv is None else argv)])
    print(render(result))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


@pytest.mark.ray
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")
def test_smoke():
    """The benchmark runs end to end (tiny): it cannot rot unnoticed."""
    result = run(8, 4, 1.0, 1, (64, 48), 1, only={"local", "1:0.0"})
    paths = [r["path"] for r in result["rows"]]
    assert paths == ["local", "ray"] and all(r["images"] == 8 for r in result["rows"])
    assert "| ray, 1 CPU node" in table(result)


@pytest.mark.ray
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")
def test_smoke_ranks():
    """--ranks runs end to end (tiny): each rank its images, a pool of one actor each."""
    result = run_ranks(16, 4, 1.0, 5.0, (64, 48), 1, methods=("gdsio",))
    assert [(r["peer"], r["actors"]) for r in result["rows"]] == [("equal", [1, 1]), ("lagging", [1, 1])]
    assert all(r[f"rank{k}"]["images"] == 8 and "error" not in r[f"rank{k}"] for r in result["rows"] for k in (0, 1))
    assert "| gdsio | lagging" in ranks_table(result)


@pytest.mark.ray
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")
def test_smoke_conversion():
    """--conversion runs end to end (tiny): every way gives every batch."""
    result = run_conversion(3, 2, (3, 8, 8), 1)
    assert [r["way"] for r in result["rows"]][:4] == ["gdsio feed (one copy)",
                                                      "gdsio feed, a fresh torch.empty per batch",
                                                      "iter_torch_batches (views of the object store)",
                                                      "iter_torch_batches + clone()"]
    assert all(r["ms_per_batch"] > 0 for r in result["rows"])
    assert "| iter_torch_batches + clone() |" in conversion_table(result)


if __name__ == "__main__":
    sys.exit(main())
