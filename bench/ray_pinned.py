"""``bench/bench_ray.py --pinned``: issue 26's 1+1 core simulation of a
CPU-starved GPU node and a CPU-only node, each with a core of its own.

The consumer (the "GPU node": a sleep of --step-ms as its step, batches of
--batch images, RandomResizedCrop(224) + flip + float32 + Normalize over
500x375 JPEGs from bench/photos.py) runs pinned to core 0, a process per
configuration. The Ray head is started on 127.0.0.1 pinned to core 0 too (it
is the GPU node's: its raylet, GCS and object store cost that core), and each
CPU node in a session of its own pinned to core 1 (gdsio.data.loopback:
processes timed from /proc and ended by session, never by name). Configs, in
one run:

- ``gdsio.Loader`` alone on core 0 (threads=1): the baseline, 1.00x;
- ``gdsio.data.ray.Loader(local_share=0.0 | 0.5 | "auto")`` with one CPU node,
  then the same with two CPU nodes sharing core 1;
- ``gdsio.Loader`` on cores 0 and 1 (threads=2), no Ray: the ceiling;
- ``gdsio.Loader`` alone again, last: how much the machine's load drifted.

Each config makes untimed passes (actors start, page cache) then --passes
timed passes over one loader (the Ray loaders keep one actor pool over all
of them: ``epochs_per_pool``). A Ray config's untimed passes go on until
every CPU node has made a batch in one (at most WARM_PASSES): with
``"auto"`` this node makes every batch of a pass that ends before an actor
is up, and the actors' start (their imports: seconds of CPU each on the
shared core) then fell in the timed passes, charged to two nodes' images
as if they cost that per image. A config with fewer CPU nodes than the one
before it runs in a cluster of its own (a loader's pool takes every
labelled node). The VM's load drifts, so every config after
the first is paired with a ``gdsio.Loader``-alone run on core 0 just before
it. Per config: steps/s and its ratio to that run, and CPU-ms per image
(user + system) of the consumer's process, of the head's processes (both on
core 0) and of the CPU nodes' processes (gdsio.data.loopback.SessionMeter:
/proc read every 0.25 s, so a Ray worker that exits counts too). Before the configs and while each Ray consumer is connected,
every socket of every process (head, nodes, consumer) must be on loopback,
else the run stops (LoopbackError). Every process started is ended and
checked gone. First (unless --no-plan), ``gdsio offload-plan --measure`` on
512 of the same images and what its model predicts for each config (one
core of CPU nodes for two nodes sharing core 1; "auto" as the plan's best
share), beside what the config then does. ``--smoke`` is a tiny size the
tests run (no timing asserted, no prediction).

    python bench/bench_ray.py --pinned --json out.json
    python bench/bench_ray.py --pinned --smoke
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import select
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "@@pinned "  # the consumer's protocol lines on stdout; anything else there is passed over
PRE = {"gdsio-role": "preprocess"}
WARM_PASSES = 4  # untimed passes at most, until every CPU node has made a batch
_SHARE_CONFIG = re.compile(r"[1-9]:(auto|0(\.[0-9]+)?|1(\.0*)?)")  # N CPU nodes, a fixed share or auto
CONFIGS = ("local", "1:0.0", "1:0.5", "1:auto", "2:0.0", "2:0.5", "2:auto", "both", "local-again")
SMOKE_CONFIGS = ("local", "1:0.0", "2:auto", "both")


def _cpu_self() -> float:
    return time.process_time()  # every thread's user + system time (/proc/self/stat's, at a finer resolution)


# ---- the consumer: one process per config, pinned ---------------------------------------


def _say(**msg: Any) -> None:
    sys.stdout.write(MARK + json.dumps(msg) + "\n")
    sys.stdout.flush()


def _wait(word: str) -> None:
    line = sys.stdin.readline().strip()
    if line != word:
        raise SystemExit(f"consumer: expected {word!r} from the bench, got {line!r}")


def consumer_main(spec: dict[str, Any]) -> int:
    """One config's consumer: a warm-up pass, then the timed passes between the bench's 'go' and 'end'."""
    import torch  # noqa: F401 - loaded before the clock, as the loaders need it

    import gdsio.data as gd

    want = set(spec["cores"])
    if os.sched_getaffinity(0) != want:
        raise SystemExit(f"consumer: pinned to {sorted(os.sched_getaffinity(0))}, expected {sorted(want)}")
    tf = gd.Compose([gd.RandomResizedCrop(224), gd.RandomHorizontalFlip(), gd.ToDtype(torch.float32, scale=True),
                     gd.Normalize(gd.IMAGENET_MEAN, gd.IMAGENET_STD)])
    kind, batch, step_s = spec["kind"], spec["batch"], spec["step_ms"] / 1e3
    ray = None
    if kind == "local":
        loader: Any = gd.Loader(spec["root"], batch, device="cpu", transform=tf, shuffle=True, threads=spec["threads"])
    else:
        import ray

        import gdsio.data.ray as gray
        from gdsio.data.loopback import wait_for_nodes

        ray.init(address=spec["address"], log_to_driver=False, include_dashboard=False)
        live = wait_for_nodes(ray, spec["nodes"], PRE, timeout=120)
        if live != spec["nodes"]:  # the pool would be as large as every labelled node's slots
            raise SystemExit(f"consumer: {live} CPU nodes live, the config asks for {spec['nodes']}")
        share = spec["share"] if spec["share"] == "auto" else float(spec["share"])
        loader = gray.Loader(spec["root"], batch, device="cpu", transform=tf, shuffle=True, local_share=share,
                             resources=PRE, threads=1, timeout=300,
                             epochs_per_pool=spec["passes"] + WARM_PASSES)

    def one_pass(times: list[float] | None = None, sides: list[int] | None = None) -> tuple[int, int, float]:
        t0 = time.perf_counter()
        first = None
        n = steps = 0
        made_here = 0
        for images, _ in loader:
            if first is None:
                first = time.perf_counter() - t0
            n += int(images.shape[0])
            steps += 1
            if times is not None and sides is not None:  # the first pass: when each batch came (s from the pass's
                times.append(time.perf_counter() - t0)  # start), and whether this node made it
                got = getattr(loader.stats(), "local_samples", n)
                sides.append(int(got > made_here))
                made_here = got
            time.sleep(step_s)  # the "GPU step": no CPU
        return n, steps, first or 0.0

    times: list[float] = []
    here: list[int] = []
    one_pass(times, here)  # warm-up: actors start, page cache
    warm = 1
    # until every CPU node has made a batch in an untimed pass (its actor started, its first call made)
    while (ray is not None and share != 1.0 and len(loader.stats().remote_nodes) < spec["nodes"]
           and warm < WARM_PASSES):
        loader.stats(reset=True)
        one_pass()
        warm += 1
    warm_nodes = len(loader.stats().remote_nodes) if ray is not None else 0
    loader.stats(reset=True)
    _say(ready=os.getpid())
    _wait("go")
    c0, t0 = _cpu_self(), time.perf_counter()
    images = steps = 0
    firsts = []
    for _ in range(spec["passes"]):
        n, k, first = one_pass()
        images, steps = images + n, steps + k
        firsts.append(first)
    seconds, cpu = time.perf_counter() - t0, _cpu_self() - c0
    s = loader.stats()
    out = {"images": images, "steps": steps, "seconds": seconds, "consumer_cpu_s": cpu, "first_batch_s": firsts,
           "data_wait_share": s.data_wait_share, "local_samples": getattr(s, "local_samples", s.samples),
           "remote_samples": getattr(s, "remote_samples", 0), "local_share_end": getattr(s, "local_share", 1.0),
           "remote_ms_per_sample": getattr(s, "remote_ms_per_sample", None),
           "remote_pools": getattr(s, "remote_pools", 0), "finished_here": getattr(s, "finished_here", {}),
           "remote_nodes_seen": len(getattr(s, "remote_nodes", {})),
           "batch_times_first_pass": times, "made_here_first_pass": here, "warm_passes": warm,
           "warm_nodes": warm_nodes}
    _say(done=out)
    _wait("end")  # the bench checks this process's sockets while it is connected
    if hasattr(loader, "close"):
        loader.close()
    if ray is not None:
        ray.shutdown()
    return 0


# ---- the bench: the cluster, the consumers, /proc ---------------------------------------


class _Consumer:
    """A consumer process pinned to `cores`, spoken to by lines (bounded waits)."""

    def __init__(self, spec: dict[str, Any], env: dict[str, str], cwd: str, timeout: float) -> None:
        self.timeout = timeout
        self.err = open(os.path.join(cwd, f"consumer-{spec['name']}.err"), "w+")
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--consumer", json.dumps(spec)],
                                  env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                  preexec_fn=lambda: os.sched_setaffinity(0, set(spec["cores"])))
        self.buf = b""

    def read(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                text = line.decode(errors="replace")
                if text.startswith(MARK):
                    return json.loads(text[len(MARK):])
            left = deadline - time.monotonic()
            ready = select.select([self.p.stdout], [], [], max(0.0, left))[0] if left > 0 else []
            chunk = os.read(self.p.stdout.fileno(), 65536) if ready else b""
            if not chunk:
                self.err.seek(0)
                why = "timed out" if left <= 0 or not ready else f"exited {self.p.poll()}"
                raise RuntimeError(f"the consumer {why}: {self.err.read()[-3000:]}")
            self.buf += chunk

    def send(self, word: str) -> None:
        self.p.stdin.write(word.encode() + b"\n")
        self.p.stdin.flush()

    def finish(self) -> int:
        """Waits (bounded) for the process to end, killing it if it does not; its exit status."""
        try:
            self.p.stdin.close()  # a consumer still waiting for a word reads the end of its input
        except OSError:
            pass
        try:
            rc = self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait(10)
        self.p.stdout.close()
        self.err.close()
        return rc


def write_dataset(root: str, images: int, size: tuple[int, int]) -> None:
    """`images` JPEGs (bench/photos.py, quality 90) of `size` in 4 class folders."""
    sys.path.insert(0, HERE)
    try:
        from photos import jpegs
    finally:
        sys.path.remove(HERE)
    for k, data in enumerate(jpegs(images, size=size)):
        d = os.path.join(root, f"class{k % 4}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{k:05d}.jpg"), "wb") as f:
            f.write(data)


def _commit() -> str:
    """The checkout's commit, or GDSIO_BENCH_COMMIT's for a tree without git (a `git archive` of one)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE,
                             check=False).stdout.strip()
    except OSError:
        out = ""
    return out or os.environ.get("GDSIO_BENCH_COMMIT", "")


def plan_predictions(root: str, batch: int, step_ms: float, sample: int,
                     configs: tuple[str, ...] = CONFIGS) -> dict[str, Any]:
    """What ``gdsio offload-plan --measure`` predicts for this setup: the costs measured on `sample`
    images of `root`, and the step rate of each config (one core here, one core of CPU nodes): "local",
    "local-again", "both", and every N:auto and N:SHARE in `configs`."""
    from gdsio.data.offload_measure import measure_offload_costs
    from gdsio.data.offload_plan import offload_plan

    steps = 1000.0 / step_ms
    costs = measure_offload_costs(root, batch_size=batch, steps_per_s=steps, images=sample, repeats=3)
    kw = dict(ms_per_image=costs.ms_per_image, receive_ms_per_image=costs.receive_ms_per_image,
              remote_ms_per_image=costs.remote_ms_per_image, steps_per_s=steps, batch_size=batch, node_cores=1,
              gpu_node_price=0.0, cpu_node_price=0.0)
    one = offload_plan(**kw, local_cores=1, cpu_nodes=1)  # two nodes sharing core 1: still one core of them
    pred = {"local": one.steps_per_s_alone, "local-again": one.steps_per_s_alone,
            "both": offload_plan(**kw, local_cores=2, cpu_nodes=0).steps_per_s_alone}
    for c in configs:
        if _SHARE_CONFIG.fullmatch(c):
            share = c.split(":", 1)[1]
            pred[c] = one.steps_per_s_with_nodes if share == "auto" else one.steps_per_s_at(float(share))
    return {"costs": dataclasses.asdict(costs), "plan": str(one), "advice": {
        "cpu_nodes": offload_plan(**kw, local_cores=1).cpu_nodes, "local_share": one.local_share},
        "steps_per_s": pred}


def run_pinned(images: int = 1024, batch: int = 64, step_ms: float = 30.0, passes: int = 3,
               size: tuple[int, int] = (500, 375), configs: tuple[str, ...] = CONFIGS,
               timeout: float = 600.0, plan: bool = False, paired: bool = True) -> dict[str, Any]:
    """Runs `configs` (names of CONFIGS) in one cluster; see the module's docstring. With `plan`,
    first what ``gdsio offload-plan --measure`` predicts for each (``result["planner"]``)."""
    import gdsio
    from gdsio.data.loopback import LoopbackCluster, RAY_LOOPBACK_ENV, SessionMeter

    unknown = [c for c in configs if c not in CONFIGS and not _SHARE_CONFIG.fullmatch(c)]
    if unknown:
        raise ValueError(f"configs: unknown {unknown}; known: {', '.join(CONFIGS)}, or N:SHARE (a fixed share in [0, 1])")
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        raise RuntimeError(f"the pinned simulation needs two cores; this process may use {allowed}")
    core0, core1 = allowed[:2]
    # The gdsio this process imported is the one the consumers and the nodes' workers import.
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(gdsio.__file__)))
    pypath = os.pathsep.join([pkg_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    env = dict(os.environ, **RAY_LOOPBACK_ENV, PYTHONPATH=pypath)
    tmp = tempfile.mkdtemp(prefix="gdsio-pin-", dir="/tmp")
    root = os.path.join(tmp, "train")
    write_dataset(root, images, size)
    if plan:
        result_plan = plan_predictions(root, batch, step_ms, min(images, 512), configs)
    base = dict(root=root, batch=batch, step_ms=step_ms, passes=passes)
    rows: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    result: dict[str, Any] = {"rows": rows, "loopback_checks": checks}
    if plan:
        result["planner"] = result_plan
    load_start = os.getloadavg()

    def consume(name: str, spec: dict[str, Any], cluster: Any = None) -> dict[str, Any]:
        spec = dict(base, name=name.replace(":", "_"), **spec)
        c = _Consumer(spec, env, tmp, timeout)
        try:
            c.read()  # ready
            load0 = os.getloadavg()[0]
            meters = [SessionMeter([cluster.head_session]).start(),
                      SessionMeter(cluster.node_sessions).start()] if cluster else []
            c.send("go")
            done = c.read()["done"]
            head_s, node_s = [m.stop() for m in meters] if meters else (0.0, 0.0)
            if cluster is not None:
                checks.append(dict(cluster.check_loopback([c.p.pid]), config=name))  # raises off loopback
            c.send("end")
        finally:
            rc = c.finish()
        if rc != 0:
            raise RuntimeError(f"config {name}: the consumer exited {rc}")
        n = done["images"]
        return dict(done, config=name, kind=spec["kind"], cores=spec["cores"], nodes=spec.get("nodes", 0),
                    share=spec.get("share"), steps_per_s=done["steps"] / done["seconds"],
                    head_cpu_s=head_s, node_cpu_s=node_s, load_before=load0,
                    consumer_cpu_ms_per_image=1e3 * done["consumer_cpu_s"] / n,
                    head_cpu_ms_per_image=1e3 * head_s / n, node_cpu_ms_per_image=1e3 * node_s / n,
                    node_cpu_ms_per_remote_image=(1e3 * node_s / done["remote_samples"]
                                                  if done["remote_samples"] else None))

    def run_one(name: str, spec: dict[str, Any], cluster: Any = None) -> None:
        # The machine's load drifts (a shared VM): every config but the first is paired with a
        # gdsio.Loader-alone run just before it, and its ratio is to that one.
        baseline = None
        if name != "local" and paired:
            baseline = consume(f"{name}-baseline", dict(kind="local", cores=[core0], threads=1))["steps_per_s"]
        row = consume(name, spec, cluster)
        row["baseline_steps_per_s"] = baseline if baseline is not None else row["steps_per_s"]
        rows.append(row)

    try:
        if "local" in configs:
            run_one("local", dict(kind="local", cores=[core0], threads=1))
        ray_configs = [c for c in configs if c[0].isdigit()]
        if ray_configs:
            result["affinity"], result["left_running"], result["clusters"] = {"head": [], "nodes": []}, [], 0
            cluster: Any = None

            def close_cluster() -> None:
                for key, pids in (("head", cluster.head_pids()), ("nodes", cluster.node_pids())):
                    result["affinity"][key] = sorted(set(result["affinity"][key]) | set(cluster.affinity(pids)))
                result["left_running"] += cluster.close()  # [] expected: checked by the smoke test

            try:
                for cfg in ray_configs:
                    nodes, share = cfg.split(":")
                    if cluster is not None and len(cluster.node_sessions) > int(nodes):
                        # Fewer CPU nodes than the last config: a cluster of its own (a node left in it would
                        # take part: the pool is as large as the labelled nodes' slots).
                        close_cluster()
                        cluster = None
                    if cluster is None:
                        cluster = LoopbackCluster(head_cores=[core0], env={"PYTHONPATH": pypath})
                        result["cluster_tmp"], result["clusters"] = cluster.tmp, result["clusters"] + 1
                        cluster.start_head()
                    while len(cluster.node_sessions) < int(nodes):
                        cluster.add_node(cores=[core1])
                    if not checks or checks[-1].get("config") != f"{nodes} node(s) started":
                        checks.append(dict(cluster.check_loopback(), config=f"{nodes} node(s) started"))
                    run_one(cfg, dict(kind="ray", cores=[core0], nodes=int(nodes), share=share,
                                      address=cluster.address), cluster)
            finally:
                if cluster is not None:
                    close_cluster()
            if result["left_running"]:
                raise RuntimeError(f"processes of the cluster's sessions outlived it: {result['left_running']}")
        if "both" in configs:
            run_one("both", dict(kind="local", cores=[core0, core1], threads=2))
        if "local-again" in configs:
            run_one("local-again", dict(kind="local", cores=[core0], threads=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    import ray
    import torch

    result.update(
        settings=dict(images=images, batch=batch, step_ms=step_ms, passes=passes, size=list(size),
                      configs=list(configs), cores=[core0, core1], paired=paired),
        machine={"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                 "torch": torch.__version__, "ray": ray.__version__, "commit": _commit(), "gdsio": gdsio.__file__,
                 "load_start": list(load_start), "load_end": list(os.getloadavg())})
    return result


# ---- the table --------------------------------------------------------------------------

NAMES = {"local": "`gdsio.Loader` alone on core 0 (threads=1)", "both": "`gdsio.Loader` on cores 0+1 (threads=2), no Ray",
         "local-again": "`gdsio.Loader` alone on core 0, again (drift)"}


def _name(r: dict[str, Any]) -> str:
    if r["config"] in NAMES:
        return NAMES[r["config"]]
    v = r["share"]
    share = '"auto"' if v == "auto" else f"{float(v):.1f}" if round(float(v), 1) == float(v) else f"{float(v):g}"
    where = "one CPU node" if r["nodes"] == 1 else f"{r['nodes']} CPU nodes sharing core 1"
    return f"`ray.Loader(local_share={share})`, {where}"


def tenths(here: list[int]) -> list[float]:
    """The share of the batches made here in each tenth of a pass (the last tenth takes the remainder)."""
    n = len(here)
    cuts = [round(n * i / 10) for i in range(11)]
    return [sum(here[a:b]) / (b - a) for a, b in zip(cuts, cuts[1:]) if b > a]


def first_pass(r: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """A row's first pass (the pool's start in it): its time, against the fixed shares' first passes in the
    run, and the share made here in each tenth of it."""
    t = r["batch_times_first_pass"]
    here = r.get("made_here_first_pass") or []
    fixed = [x for x in rows if x.get("share") not in (None, "auto") and x.get("batch_times_first_pass")]
    against = ", ".join(f"{x['batch_times_first_pass'][-1]:.2f} s at {float(x['share']):g} "
                        f"({t[-1] / x['batch_times_first_pass'][-1]:.2f}x)" for x in fixed)
    return (f"{_name(r)}, the loader's first pass (the pool starts in it): {len(t)} batches in {t[-1]:.2f} s"
            + (f" (fixed shares' first passes: {against})" if against else "")
            + "; made here by tenths of the pass: " + " ".join(f"{x:.2f}" for x in tenths(here))
            + f"; all of it {sum(here) / max(1, len(here)):.2f}")


def table(result: dict[str, Any]) -> str:
    rows = result["rows"]
    base = next((r for r in rows if r["config"] == "local"), None)
    out = ["| config | steps/s | vs `gdsio.Loader` alone just before it (its steps/s) | made here / on CPU nodes | CPU-ms/image: consumer process "
           "| head's processes (core 0) | core 0 total | CPU nodes' processes (per remote image) | first batch s "
           "| load avg before | offload-plan predicts (vs alone) |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    pred = result.get("planner", {}).get("steps_per_s", {})
    for r in rows:
        b = r.get("baseline_steps_per_s") or (base or r)["steps_per_s"]
        ratio = f"{r['steps_per_s'] / b:.2f}x ({b:.2f})"
        remote = r["node_cpu_ms_per_remote_image"]
        node = "-" if r["kind"] == "local" else (f"{r['node_cpu_ms_per_image']:.2f}"
                                                 + (f" ({remote:.2f})" if remote is not None else ""))
        head = "-" if r["kind"] == "local" else f"{r['head_cpu_ms_per_image']:.2f}"
        core0 = r["consumer_cpu_ms_per_image"] + r["head_cpu_ms_per_image"]
        out.append(f"| {_name(r)} | {r['steps_per_s']:.2f} | {ratio} | {r['local_samples']} / {r['remote_samples']} | "
                   f"{r['consumer_cpu_ms_per_image']:.2f} | {head} | "
                   f"{core0:.2f}{' (both cores)' if r['config'] == 'both' else ''} | {node} | "
                   f"{statistics.median(r['first_batch_s']):.2f} | {r['load_before']:.2f} | "
                   + (f"{pred[r['config']]:.2f} ({pred[r['config']] / pred['local']:.2f}x) |" if r["config"] in pred
                      else "- |"))
    for r in rows:
        if r["share"] == "auto" and r.get("batch_times_first_pass"):
            out += ["", first_pass(r, rows)]
    warm = [f"{_name(r)}: {r['warm_passes']} ({r['warm_nodes']} of its {r['nodes']} CPU nodes made a batch in the last)"
            for r in rows if r["kind"] != "local" and "warm_passes" in r]
    if warm:
        out += ["", "Untimed passes before the timed ones (until every CPU node has made a batch in one, at most "
                f"{WARM_PASSES}): " + "; ".join(warm) + "."]
    checks = result["loopback_checks"]
    addrs = sorted({a for c in checks for a in c["listening_addresses"]})
    out += ["", f"Loopback: {len(checks)} checks, up to {max((c['processes'] for c in checks), default=0)} processes "
                f"and {max((c['listening'] for c in checks), default=0)} listening TCP sockets each; "
                f"every socket's address in {addrs or '[]'}. Pinning (Cpus_allowed_list): "
                f"{result.get('affinity', {})}. Left running after the cluster's end: "
                f"{result.get('left_running', [])}."]
    if "planner" in result:
        c = result["planner"]["costs"]
        out += ["", f"offload-plan --measure on {c['images']} of these images (CPU-ms/image, medians of "
                    f"{c['repeats']}): making {c['ms_per_image']:.2f}, receiving {c['receive_ms_per_image'] or 0:.2f}, "
                    f"on the CPU node {c['remote_ms_per_image'] or 0:.2f}; advice: {result['planner']['advice']}."]
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--consumer":
        sys.exit(consumer_main(json.loads(sys.argv[2])))
    sys.exit("run it as bench/bench_ray.py --pinned")
