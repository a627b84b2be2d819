"""The shard-window order's early reads (gdsio.data.remote_shards.ShardWindows:
a pass's first batch read sample by sample while its first window of shards
arrives) against the same passes without them, over moto's S3 server and over
nginx, each behind bench/latency_proxy.py, in one run.

The photographs and the 32 MB shards of bench/bench_shards.py (made there, or
here when absent, under the same `--cache`). Each round runs, for each store,
the window pass with the early reads and without them, back to back (the same
load for both); a pass without them is the same Loader with its ShardWindows'
first batch switched off (``early_batch = -1``, the value it takes with a disk
cache), so the two differ in that alone. Per pass: the time from ``iter()`` to
the first batch, images/s, this process's CPU seconds and the servers' (store
+ proxy), the requests the proxy forwarded, ``stats().early_reads``.

    python bench/early_reads.py [--rounds 3]
    python bench/early_reads.py --smoke --out-dir /tmp/x   # tiny sizes (the test)
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gdsio
import gdsio.data
from gdsio.config import parse_bytes
from gdsio.data import remote_shards

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_shards as bs  # noqa: E402 - the photographs, shards, servers and machine facts of that bench


def window_pass(url: str, a: argparse.Namespace, early: bool, servers: Any, seed: int) -> dict[str, Any]:
    """One window pass of `url`'s shards (early reads on or off): its figures."""
    made = remote_shards.ShardWindows.__init__

    def without(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        self.early_batch = -1  # no batch read alone, as with a disk cache

    remote_shards.ShardWindows.__init__ = made if early else without  # type: ignore[method-assign]
    try:
        loader = gdsio.Loader(url, a.batch, transform=gdsio.data.Resize((a.size, a.size)), device="cpu", seed=seed,
                              shuffle="window", shuffle_window=a.window)
        req0, srv0, cpu0 = servers.proxy_stats()["requests"], sum(servers.cpu()), bs.own_cpu()[0]
        t0 = time.perf_counter()
        it = iter(loader)
        n = len(next(it)[1])
        t1 = time.perf_counter()
        for _, y in it:
            n += len(y)
        t2 = time.perf_counter()
    finally:
        remote_shards.ShardWindows.__init__ = made  # type: ignore[method-assign]
    return {"early": early, "images": n, "first_batch_s": t1 - t0, "images_per_s": n / (t2 - t0),
            "cpu_s": bs.own_cpu()[0] - cpu0, "servers_cpu_s": sum(servers.cpu()) - srv0,
            "requests": servers.proxy_stats()["requests"] - req0, "early_reads": loader.stats().early_reads}


def render(doc: dict[str, Any]) -> str:
    c, m = doc["commit"], doc["machine"]
    lines = [f"# A window pass's early reads, on and off ({doc['date']})", "",
             f"- command: `{doc['command']}`", f"- commit: {c['head']} ({c['subject']}); gdsio/ in the tree: "
             f"{c['gdsio_tree']}",
             f"- machine: {m['cpu']}, {m['cpus']} CPUs, {m['platform']}, Python {m['python']}, torch {m['torch']}; "
             f"shared VM, load average at start {doc['load_start']}, at end {doc['load_end']}",
             f"- data: {doc['data']['images']} JPEGs in {doc['data']['shards']} shards of {doc['data']['shard_mb']:g}"
             f" MiB; batch {doc['config']['batch']}, shuffle_window {doc['config']['window']}, resized to "
             f"{doc['config']['size']}; each store behind bench/latency_proxy.py, {doc['config']['delay_s']} s a request",
             "- each round: per store, the pass with early reads, then without; seed = round", "",
             "| store | round | early reads | first batch s | images/s | CPU s | servers CPU s | requests |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in doc["passes"]:
        lines.append(f"| {r['store']} | {r['round']} | {'on (' + str(r['early_reads']) + ')' if r['early'] else 'off'} "
                     f"| {r['first_batch_s']:.2f} | {r['images_per_s']:.0f} | {r['cpu_s']:.2f} | "
                     f"{r['servers_cpu_s']:.2f} | {r['requests']} |")
    lines += ["", "## Medians over the rounds", "",
              "| store | early reads | first batch s | images/s | servers CPU s |", "|---|---|---:|---:|---:|"]
    for s in doc["medians"]:
        lines.append(f"| {s['store']} | {'on' if s['early'] else 'off'} | {s['first_batch_s']:.2f} | "
                     f"{s['images_per_s']:.0f} | {s['servers_cpu_s']:.2f} |")
    return "\n".join(lines + ["", "Notes:", ""] + [f"- {n}" for n in doc["notes"]]) + "\n"


def median(values: list[float]) -> float:
    v = sorted(values)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=5000)
    p.add_argument("--shard-bytes", default="32M")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--window", type=int, default=4, help="shuffle_window (default 4)")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--delay", type=float, default=0.02, help="seconds each proxy adds to a request")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "gdsio-bench-shards"))
    p.add_argument("--out-dir", default=str(bs.HERE / "results"))
    p.add_argument("--name", default="early-reads-" + time.strftime("%Y-%m-%d", time.gmtime()))
    p.add_argument("--smoke", action="store_true", help="tiny sizes (the test)")
    a = p.parse_args(argv)
    command = "python bench/early_reads.py " + " ".join(shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:]))
    if a.smoke:
        a.images, a.shard_bytes, a.batch, a.size, a.delay, a.rounds, a.window = 48, "256K", 8, 32, 0.001, 1, 2
    shard_bytes = parse_bytes(a.shard_bytes)
    load_start = bs.loadavg()
    folder = bs.make_photos(a.images, Path(a.cache))
    local = bs.write_local_shards(folder, Path(a.cache) / f"{folder.name}-shards-{shard_bytes}", shard_bytes)
    moto = bs.Servers(a.delay, None)
    nginx = None
    try:
        nginx = bs.HttpServers(Path(local[0]).parent, Path(tempfile.mkdtemp(prefix="gdsio-bench-nginx-")), a.delay, None)
        client = moto.client()
        client.create_bucket(Bucket=bs.BUCKET)
        bs.upload(client, [(Path(sp + suffix), f"shards/{os.path.basename(sp)}{suffix}") for sp in local
                           for suffix in ("", ".idx.json")])
        client.close()
        os.environ.update({"AWS_ENDPOINT_URL": moto.base, "AWS_ACCESS_KEY_ID": "testing",
                           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
                           "AWS_EC2_METADATA_DISABLED": "true"})
        last = f"{len(local) - 1:06d}"
        stores = {"moto": (f"s3://{bs.BUCKET}/shards/shard-{{000000..{last}}}.tar", moto),
                  "nginx": (f"{nginx.base}/shard-{{000000..{last}}}.tar", nginx)}
        passes = []
        for rnd in range(a.rounds):
            for store, (url, servers) in stores.items():
                for early in (True, False):
                    passes.append({"store": store, "round": rnd, **window_pass(url, a, early, servers, rnd)})
    finally:
        moto.close()
        if nginx is not None:
            nginx.close()
    medians = [{"store": s, "early": e, **{k: median([r[k] for r in passes if r["store"] == s and r["early"] == e])
                                          for k in ("first_batch_s", "images_per_s", "servers_cpu_s")}}
               for s in ("moto", "nginx") for e in (True, False)]
    doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": command, "commit": bs.commit(),
           "machine": bs.machine(), "load_start": load_start, "load_end": bs.loadavg(),
           "config": {"batch": a.batch, "window": a.window, "size": a.size, "delay_s": a.delay},
           "data": {"images": a.images, "shards": len(local), "shard_mb": shard_bytes / 2**20},
           "passes": passes, "medians": medians,
           "notes": [bs.MOTO_RANGES.format(version=bs.peer_versions()["moto"]),
                     "so on moto the first batch's own GETs of a shard wait behind that shard's whole reads, each "
                     "a whole-shard copy; nginx sends each range by sendfile"]}
    bs.write_report(doc, render(doc), Path(a.out_dir), a.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
