"""What receiving a batch from the CPU nodes costs the consumer's process,
against making the same batch there with gdsio.Loader (issue 26, goals 1 and 3).

A local Ray cluster (ray.cluster_utils.Cluster, every process on 127.0.0.1):
the consumer's head node (1 CPU) and one CPU node labelled
``gdsio-role=preprocess`` (1 CPU). For each chain (RandomResizedCrop(224) +
flip, then ToDtype(float32) + Normalize, or nothing more: uint8) over
real-looking 500x375 JPEGs (bench/photos.py):

* making: ``gdsio.Loader(device="cpu", threads=1)``, the consumer's CPU per image;
* receiving: ``gdsio.data.ray.Loader(local_share=0.0, device="cpu")``, every
  batch made on the CPU node, one actor pool kept over the passes
  (``epochs_per_pool``): the consumer's CPU per image, the consumer node's
  Ray processes' (the head: raylet, GCS, ..., by process too) and the actor
  processes' CPU per image (the CPU node's work); with --transport, a row per
  transport (``socket``, ``object_store``), one after the other in each row.
  The head's processes are first timed idle (--idle-s), their floor per second.

CPU time is the kernel's count (this process, all its threads: what
/proc/self/stat's utime + stime count, at the finer resolution of
``time.process_time``; each actor process and the consumer node's Ray
processes from /proc), so it holds on a busy machine where wall-clock time
does not. Each way runs one untimed pass (the pool's start, the page
cache), then --passes passes that are counted whole, each from its first batch;
a Ray loader then one more untimed pass, from the same pool. The pool makes a
pass's first batches while the consumer ends the one before: the counted
passes gain the first counted pass's batches made during the untimed pass
before them, and give up as many to the untimed pass after them. (Before
2026-12-05 no pass followed, and the actor's figure missed up to the batches
made ahead: a queue's and the calls in flight.)
``--threads`` also samples /proc/self/task every 0.25 s and names the
consumer's threads (Python's names where known), to say where its CPU goes.

    python bench/bench_ray_receive.py --transport socket,object_store --json out.json
    pytest bench/bench_ray_receive.py          # the smoke test only (needs gdsio[ray])
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before ray is imported: every process on 127.0.0.1
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_DATA_USAGE_DISABLED"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

import gdsio.data as gd  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import photos  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")
ROLE = "gdsio-role"
NODE = {"node_ip_address": "127.0.0.1"}


def chain(dtype: str) -> Any:
    ts: list[Any] = [gd.RandomResizedCrop(224), gd.RandomHorizontalFlip()]
    if dtype == "float32":
        ts += [gd.ToDtype(torch.float32, scale=True), gd.Normalize(gd.IMAGENET_MEAN, gd.IMAGENET_STD)]
    return gd.Compose(ts)


def cpu_s(pid: int | str = "self") -> float:
    """utime + stime of a process (all its threads), seconds; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return 0.0
    v = s[s.rindex(")") + 2:].split()
    return (int(v[11]) + int(v[12])) / CLK


def processes() -> tuple[dict[int, int], dict[int, str]]:
    """(pid -> parent pid, pid -> argv[0]) of every process."""
    parent: dict[int, int] = {}
    cmds: dict[int, str] = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    st = f.read()
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    cmds[int(p)] = f.read().split(b"\0")[0].decode(errors="replace")
            except OSError:
                continue
            parent[int(p)] = int(st[st.rindex(")") + 2:].split()[1])
    return parent, cmds


def below(roots: set[int]) -> list[int]:
    """The processes in `roots` and every one below them."""
    parent, _ = processes()
    out = []
    for pid in parent:
        p = pid
        while p > 1 and p not in roots:
            p = parent.get(p, 0)
        if p in roots:
            out.append(pid)
    return out


def actor_pids() -> list[int]:
    """The processes of this cluster's actors (gdsio's BatchMaker, StreamMaker; Ray Data's
    MapWorker before it): below this process, which started the cluster (the
    machine may run other engineers' clusters)."""
    _, cmds = processes()
    return [p for p in below({os.getpid()}) if p != os.getpid() and cmds.get(p, "").startswith("ray::")
            and any(name in cmds[p] for name in ("BatchMaker", "StreamMaker", "MapWorker"))]


def head_pids(cluster: Any) -> list[int]:
    """The consumer node's Ray processes (its raylet, which pulls every object
    from the CPU node, GCS, and the workers below them), not this process."""
    roots = {info.process.pid for infos in cluster.head_node.all_processes.values() for info in infos}
    return [p for p in below(roots) if p != os.getpid()]


def cpu_node_ray_pids(cluster: Any) -> list[int]:
    """The CPU node's own Ray processes (its raylet, which serves the objects the
    consumer's node pulls), not its workers: the actors are counted apart."""
    return [info.process.pid for node in cluster.worker_nodes for infos in node.all_processes.values()
            for info in infos]


class ProcWatch:
    """CPU seconds of the processes `pids` (found once, before: a scan of
    /proc would cost this process more than what it measures), sampled every
    `every` s while it runs: an actor ends with its pool, maybe before the
    last look, and its last sample (at most `every` old) stands for it then."""

    def __init__(self, pids: list[int], every: float = 0.1) -> None:
        self.pids, self.every, self.first, self.last = pids, every, {}, {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="bench-proc-watch", daemon=True)

    def sample(self) -> None:
        for pid in self.pids:
            cpu = cpu_s(pid)
            if cpu > 0:
                self.first.setdefault(pid, cpu)
                self.last[pid] = cpu

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            self.sample()

    def __enter__(self) -> "ProcWatch":
        self.sample()
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join()
        self.sample()

    def seconds(self) -> float:
        return sum(self.last[p] - self.first[p] for p in self.last)

    def by_name(self) -> dict[str, float]:
        """CPU seconds per process name (the raylet, gcs_server, a Python script's name, a worker's ray::...)."""
        _, cmds = processes()
        out: collections.Counter[str] = collections.Counter()
        for p in self.last:
            out[_name(cmds.get(p, "?"), p)] += self.last[p] - self.first[p]
        return dict(out)


def _name(argv0: str, pid: int) -> str:
    if argv0.startswith("ray::"):
        return argv0
    base = os.path.basename(argv0)
    if base.startswith("python"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            return base
        script = next((a.decode(errors="replace") for a in args[1:] if a.endswith(b".py")), "")
        return os.path.basename(script) or base
    return base


class ThreadWatch:
    """CPU seconds per thread name of this process, sampled every `every` s
    (a thread's last interval before it ends is lost: a lower bound)."""

    def __init__(self, every: float = 0.25) -> None:
        self.every, self.last, self.acc = every, {}, collections.Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="bench-thread-watch", daemon=True)

    def sample(self) -> None:
        names = {t.native_id: re.sub(r"[-_]?[0-9a-zA-Z]*\d[0-9a-zA-Z]*$", "", t.name) for t in threading.enumerate()}
        for t in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{t}/stat") as f:
                    s = f.read()
            except OSError:
                continue
            tid = int(t)
            v = s[s.rindex(")") + 2:].split()
            cpu = (int(v[11]) + int(v[12])) / CLK
            name, before = self.last.get(tid, (names.get(tid) or s[s.index("(") + 1:s.rindex(")")], 0.0))
            self.acc[name] += cpu - before
            self.last[tid] = (name, cpu)

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            self.sample()

    def __enter__(self) -> "ThreadWatch":
        self.sample()
        self.acc.clear()
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join()
        self.sample()


def measure(loader: Any, passes: int, threads: bool, cluster: Any = None) -> dict[str, Any]:
    for _ in loader:  # the untimed pass: the pool starts, the page cache warms
        pass
    n = 0
    first_cpu = []
    watch = ThreadWatch() if threads else None
    actors = ProcWatch(actor_pids() if cluster is not None else []).__enter__()
    heads = ProcWatch(head_pids(cluster) if cluster is not None else []).__enter__()
    nodes = ProcWatch(cpu_node_ray_pids(cluster) if cluster is not None else []).__enter__()
    c0, w0 = time.process_time(), time.perf_counter()
    if watch:
        watch.__enter__()
    for _ in range(passes):
        it = iter(loader)
        f0 = time.process_time()
        images, _ = next(it)
        first_cpu.append((time.process_time() - f0) / int(images.shape[0]))
        n += int(images.shape[0])
        for images, _ in it:
            n += int(images.shape[0])
    if watch:
        watch.__exit__()
    c1, w1 = time.process_time(), time.perf_counter()
    for w in (actors, heads, nodes):
        w.__exit__()
    if cluster is not None:
        for _ in loader:  # the untimed pass after (the pool's last epoch): see the module's docstring
            pass
    actor, head = actors.seconds(), heads.seconds()
    out = {"images": n, "consumer_cpu_ms_per_image": 1e3 * (c1 - c0) / n, "wall_s": w1 - w0,
           "first_batch_consumer_cpu_ms_per_image": [1e3 * x for x in first_cpu],
           "actor_cpu_ms_per_image": 1e3 * actor / n, "dtype": str(images.dtype),
           "head_node_ray_cpu_ms_per_image": 1e3 * head / n,
           "cpu_node_ray_cpu_ms_per_image": 1e3 * nodes.seconds() / n,
           "head_node_ray_by_process_cpu_ms_per_image": {k: round(1e3 * v / n, 4) for k, v in
                                                         sorted(heads.by_name().items(), key=lambda kv: -kv[1]) if v > 0}}
    if watch:
        out["threads_cpu_ms_per_image"] = {k: round(1e3 * v / n, 4) for k, v in watch.acc.most_common() if v > 0}
    return out


def idle(cluster: Any, seconds: float) -> dict[str, Any]:
    """The consumer node's Ray processes' CPU while no loader runs: their floor, per second of wall time."""
    w = ProcWatch(head_pids(cluster)).__enter__()
    time.sleep(seconds)
    w.__exit__()
    return {"seconds": seconds, "cpu_ms_per_s": 1e3 * w.seconds() / seconds,
            "by_process_cpu_ms_per_s": {k: round(1e3 * v / seconds, 3) for k, v in w.by_name().items() if v > 0}}


def run(images: int, batch: int, passes: int, size: tuple[int, int], threads: bool, dtypes: list[str],
        cast_ons: list[str] = ["default"], store_mb: int = 300, transports: list[str] = ["default"],
        idle_s: float = 5.0) -> dict[str, Any]:
    import ray
    from ray.cluster_utils import Cluster

    import gdsio.data.ray as gray

    tmp = tempfile.mkdtemp(prefix="gdsio-brecv-", dir="/tmp")  # short: Ray's unix sockets live under it
    os.environ["RAY_TMPDIR"] = tmp
    root = os.path.join(tmp, "train")
    jpegs = photos.jpegs(16, size=size)
    for k in range(images):
        os.makedirs(os.path.join(root, f"c{k % 2}"), exist_ok=True)
        with open(os.path.join(root, f"c{k % 2}", f"{k:05d}.jpg"), "wb") as f:
            f.write(jpegs[k % len(jpegs)])
    result: dict[str, Any] = {"load_start": os.getloadavg()}
    c = None
    try:
        for dt in dtypes:
            result[f"making-{dt}"] = measure(gd.Loader(root, batch, device="cpu", transform=chain(dt), threads=1,
                                                       shuffle=True), passes, threads)
            print(dt, "making", json.dumps(result[f"making-{dt}"]), flush=True)
        # Not a small object store: under pressure the raylet has the consumer run Python's gc (PythonGCThread).
        node = dict(NODE, object_store_memory=store_mb << 20)
        c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, include_dashboard=False,
                                                              labels={ROLE: "trainer"}, **node))
        c.add_node(num_cpus=1, labels={ROLE: "preprocess"}, **node)
        cwd = os.getcwd()
        os.chdir(tmp)  # Ray puts the driver's cwd on its workers' path: not a source checkout's gdsio/
        try:
            c.connect()
        finally:
            os.chdir(cwd)
        ray.data.DataContext.get_current().enable_progress_bars = False
        if idle_s > 0:
            result["head_node_ray_idle"] = idle(c, idle_s)
            print("idle", json.dumps(result["head_node_ray_idle"]), flush=True)
        # Each row's transports one after the other (interleaved, so that the machine's load falls on both alike).
        for dt in dtypes:
            for cast_on in cast_ons if dt != "uint8" else ["default"]:
                for transport in transports:
                    kw = {} if cast_on == "default" else {"cast_on": cast_on}  # the tree "before" had no cast_on
                    if transport != "default":  # nor transport
                        kw["transport"] = transport
                    loader = gray.Loader(root, batch, device="cpu", transform=chain(dt), threads=1, shuffle=True,
                                         local_share=0.0, resources={ROLE: "preprocess"}, epochs_per_pool=passes + 2,
                                         **kw)
                    key = (f"receiving-{dt}" + ("" if cast_on == "default" else f"-cast-on-{cast_on}")
                           + ("" if transport == "default" else f"-{transport}"))
                    result[key] = measure(loader, passes, threads, c)
                    loader.close()
                    print(key, json.dumps(result[key]), flush=True)
    finally:
        if c is not None:
            ray.shutdown()
            c.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    result["load_end"] = os.getloadavg()
    for key in [k for k in result if k.startswith("receiving-")]:
        dt = key.split("-")[1]
        make, recv = result[f"making-{dt}"], result[key]
        per = max(make["consumer_cpu_ms_per_image"], 1e-9)
        result[key]["ratios_to_making"] = {
            "consumer": recv["consumer_cpu_ms_per_image"] / per,
            "consumer_and_head_node_ray": (recv["consumer_cpu_ms_per_image"] + recv["head_node_ray_cpu_ms_per_image"])
            / per,
            "cpu_node": recv["actor_cpu_ms_per_image"] / per,
            "cpu_node_vs_making_uint8": recv["actor_cpu_ms_per_image"]
            / result["making-uint8"]["consumer_cpu_ms_per_image"] if "making-uint8" in result else None}
    result["settings"] = dict(images=images, batch=batch, passes=passes, size=list(size), dtypes=dtypes,
                              cast_ons=cast_ons, object_store_mb=store_mb, transports=transports)
    result["machine"] = {"python": platform.python_version(), "torch": torch.__version__, "ray": ray.__version__,
                         "cpus": os.cpu_count(), "gdsio": os.path.dirname(gd.__file__),
                         "commit": _commit()}
    return result


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__)), check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def table(result: dict[str, Any]) -> str:
    rows = ["| receiving | making: consumer CPU-ms/image | receiving: consumer | ratio | + head node's Ray | ratio "
            "| CPU node CPU-ms/image | ratio |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key in [k for k in result if k.startswith("receiving-")]:
        dt = key.split("-")[1]
        m, r = result[f"making-{dt}"], result[key]
        q = r["ratios_to_making"]
        rows.append(f"| {key[len('receiving-'):]} | {m['consumer_cpu_ms_per_image']:.3f} | "
                    f"{r['consumer_cpu_ms_per_image']:.3f} | {q['consumer']:.3f}x | "
                    f"{r['head_node_ray_cpu_ms_per_image']:.3f} | {q['consumer_and_head_node_ray']:.3f}x | "
                    f"{r['actor_cpu_ms_per_image']:.3f} | {q['cpu_node']:.3f}x |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--size", default="500x375", help="the JPEGs' width x height")
    ap.add_argument("--dtypes", default="float32,uint8")
    ap.add_argument("--cast-on", default="default", help="gdsio.data.ray.Loader's cast_on for the float chain, "
                    "comma-separated (default: none given, as the tree measured does by default)")
    ap.add_argument("--transport", default="default", help="gdsio.data.ray.Loader's transport, comma-separated, each "
                    "a row (e.g. socket,object_store; default: none given, as the tree measured does by default)")
    ap.add_argument("--idle-s", type=float, default=5.0,
                    help="seconds the consumer node's Ray processes are timed idle first (their floor)")
    ap.add_argument("--store-mb", type=int, default=300,
                    help="each node's object store, MiB (a small one makes Ray collect garbage in the consumer)")
    ap.add_argument("--threads", action="store_true", help="also name where the consumer's CPU goes, per thread")
    ap.add_argument("--json", help="write the result here")
    a = ap.parse_args(argv)
    w, h = (int(v) for v in a.size.split("x"))
    result = run(a.images, a.batch, a.passes, (w, h), a.threads, a.dtypes.split(","), a.cast_on.split(","), a.store_mb,
                 a.transport.split(","), a.idle_s)
    print(table(result))
    if "head_node_ray_idle" in result:
        print("head node's Ray processes idle:", json.dumps(result["head_node_ray_idle"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


@pytest.mark.ray
# DataContext's first use warns (its progress bars are turned off: the "before" tree runs Ray Data).
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")
def test_smoke():
    pytest.importorskip("ray.data")
    result = run(8, 4, 1, (64, 48), True, ["float32"], ["default", "cpu_nodes"], transports=["socket", "object_store"],
                 idle_s=0.5)
    for transport in ("socket", "object_store"):
        assert result[f"receiving-float32-{transport}"]["images"] == 8 and result["making-float32"]["images"] == 8
        assert result[f"receiving-float32-{transport}"]["dtype"] == "torch.float32"
        assert result[f"receiving-float32-cast-on-cpu_nodes-{transport}"]["dtype"] == "torch.float32"
    assert result["head_node_ray_idle"]["cpu_ms_per_s"] >= 0


if __name__ == "__main__":
    sys.exit(main())
