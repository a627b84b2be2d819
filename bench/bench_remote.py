"""Remote reads side by side: gdsio's http and s3 readers against the clients
a user would otherwise pick, in one run, against the same nginx on 127.0.0.1.

nginx serves one file of random bytes twice over: as ``http://127.0.0.1:P/obj``
and, path-style, as the S3 object ``s3://bench/obj`` (nginx answers HEAD and
ranged GETs and ignores the SigV4 headers, which is all a GetObject needs).
Every client reads the whole object into host memory it already holds (a
preallocated numpy buffer), with the same number of connections in flight;
the figure is the best of `--repeat` runs after an untimed warm-up, and the table gives each client's
ratio to the fastest peer.

    python bench/bench_remote.py --size 256M --concurrency 8 --chunk 8M

Peers (each skipped, with the reason, when its package is missing):
``obstore-http`` / ``obstore-s3`` (Rust object_store, ``get_ranges``),
``boto3`` (``download_fileobj`` with a TransferConfig of the same chunk and
concurrency), ``s3torchconnector`` (AWS CRT), ``requests`` (a thread per range,
``Session.get(...).content`` copied in), ``fsspec-http`` (aiohttp, ``cat_ranges``).
Talks to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

# The tests' nginx launcher (127.0.0.1, a free port, a private prefix): one way to start it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from remote_servers import Nginx  # noqa: E402

import gdsio  # noqa: E402
from gdsio.config import parse_bytes  # noqa: E402


def _ranges(size: int, chunk: int) -> list[tuple[int, int]]:
    return [(o, min(chunk, size - o)) for o in range(0, size, chunk)]


def gdsio_http(a: argparse.Namespace, url: str, s3url: str, out: np.ndarray) -> str:
    with gdsio.settings(remote_concurrency=a.concurrency, remote_chunk_bytes=a.chunk):
        st = gdsio.read_into(url, out)
    return f"{st.backend}: {st.requests} requests, {st.retries} retries"


def gdsio_s3(a: argparse.Namespace, url: str, s3url: str, out: np.ndarray) -> str:
    with gdsio.settings(remote_concurrency=a.concurrency, remote_chunk_bytes=a.chunk):
        st = gdsio.read_into(s3url, out)
    return f"{st.backend}: {st.requests} requests, {st.retries} retries"


def requests_threads(a: argparse.Namespace, url: str, s3url: str, out: np.ndarray) -> str:
    import requests

    def one(r: tuple[int, int]) -> None:
        with requests.Session() as s:
            body = s.get(url, headers={"Range": f"bytes={r[0]}-{r[0] + r[1] - 1}"}, timeout=60).content
        out[r[0] : r[0] + r[1]] = np.frombuffer(body, np.uint8)

    with concurrent.futures.ThreadPoolExecutor(a.concurrency) as ex:
        list(ex.map(one, _ranges(out.size, a.chunk)))
    return "Session per range, .content copied in"


def obstore_http(a: argparse.Namespace, url: str, s3url: str, out: np.ndarray) -> str:
    import obstore
    from obstore.store import HTTPStore

    base, name = url.rsplit("/", 1)
    store = HTTPStore.from_url(base, client_options={"allow_http": True})
    rs = _ranges(out.size, a.chunk)
    bufs = obstore.get_ranges(store, name, starts=[o for o, _ in rs], lengths=[n for _, n in rs])
    for (o, n), b in zip(rs, bufs):
        out[o : o + n] = np.frombuffer(memoryview(b), np.uint8)
    return "get_ranges, buffers copied in"


def obstore_s3(a: argparse.Namespace, url: str, s3url: str, out: np.ndarray) -> str:
    import obstore
    from obstore.store import S3Store

    store = S3Store("bench", endpoint=os.environ["AWS_ENDPOINT_URL"], region="us-east-1",
                    access_key_id="bench", secret_access_key="bench", client_options={"allow_http": True},
                    virtual_hosted_style_request=False)
    rs = _ranges(out.size, a.chunk)
    bufs = obstore.get_ranges(store, "obj", starts=[o for o, _ in rs], lengths=[n for _, n in rs])
    for (o, n), b in zip(rs, bufs):
        out[o : o + n] = np.frombuffer(memoryview(b), np.uint8)
    return "get_ranges, buffers copied in"


class _Into(io.RawIOBase):
    """A seekable writable file over `out`, so download_fileobj writes in place."""

    def __init__(self, out: np.ndarray) -> None:
        self.view, self.pos = memoryview(out).cast("B"), 0

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = pos if whence == 0 else self.pos + pos if whence == 1 else len(self.view) + pos
        return self.pos

    def tell(self) -> int:
        return self.pos

    def write(self, b: Any) -> int:
        n = len(b)
        self.view[self.pos : self.pos + n] = b
        self.pos += n
        return n


def boto3_transfer(a: argparse.Namespace, url: str, s3url: str, out: np.ndarray) -> str:
    import boto3
    from boto3.s3.transfer import TransferConfig

    cfg = TransferConfig(multipart_threshold=a.chunk, multipart_chunksize=a.chunk, max_concurrency=a.concurrency,
                         max_io_queue=1000, io_chunksize=1 << 20)
    c = boto3.client("s3", region_name="us-east-1", aws_access_key_id="bench", aws_secret_access_key="bench",
                     endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    try:
        c.download_fileobj("bench", "obj", _Into(out), Config=cfg)
    finally:
        c.close()
    return "download_fileobj, TransferConfig(chunk, concurrency)"


def s3torch(a: argparse.Namespace, url: str, s3url: str, out: np.ndarray) -> str:
    from s3torchconnector import S3ReaderConstructor
    from s3torchconnector._s3client import S3Client, S3ClientConfig

    client = S3Client("us-east-1", endpoint=os.environ["AWS_ENDPOINT_URL"],
                      s3client_config=S3ClientConfig(force_path_style=True, part_size=max(a.chunk, 5 << 20)))
    r = client.get_object("bench", "obj", reader_constructor=S3ReaderConstructor.sequential())
    view, pos = memoryview(out).cast("B"), 0
    while pos < len(view):
        n = r.readinto(view[pos:])
        if not n:
            break
        pos += n
    return "CRT, get_object().readinto (parts of at least 5 MiB, its floor)"


def fsspec_http(a: argparse.Namespace, url: str, s3url: str, out: np.ndarray) -> str:
    import fsspec

    fs = fsspec.filesystem("http", skip_instance_cache=True)
    rs = _ranges(out.size, a.chunk)
    bufs = fs.cat_ranges([url] * len(rs), [o for o, _ in rs], [o + n for o, n in rs], batch_size=a.concurrency)
    for (o, n), b in zip(rs, bufs):
        out[o : o + n] = np.frombuffer(b, np.uint8)
    return "cat_ranges, bytes copied in"


CLIENTS: dict[str, Callable[..., str]] = {
    "gdsio-http": gdsio_http, "gdsio-s3": gdsio_s3, "obstore-http": obstore_http, "obstore-s3": obstore_s3,
    "boto3": boto3_transfer, "s3torchconnector": s3torch, "requests": requests_threads, "fsspec-http": fsspec_http,
}
OURS = ("gdsio-http", "gdsio-s3")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="256M", help="object size (default 256M)")
    p.add_argument("--chunk", default="8M", help="bytes per ranged GET, for every client (default 8M)")
    p.add_argument("--concurrency", type=int, default=8, help="GETs in flight, for every client (default 8)")
    p.add_argument("--repeat", type=int, default=3, help="runs per client; the best counts (default 3)")
    p.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated subset of: " + ", ".join(CLIENTS))
    p.add_argument("--json", help="write the results here too")
    a = p.parse_args(argv)
    a.size, a.chunk = parse_bytes(a.size), parse_bytes(a.chunk)
    names = [n.strip() for n in a.clients.split(",") if n.strip()]
    bad = [n for n in names if n not in CLIENTS]
    if bad:
        p.error(f"--clients: unknown {', '.join(bad)}")
    data = np.random.default_rng(0).integers(0, 256, a.size, dtype=np.uint8)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gdsio-bench-remote-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        root = Path(tmp) / "www"
        (root / "bench").mkdir(parents=True)
        data.tofile(root / "obj")
        os.link(root / "obj", root / "bench" / "obj")
        nginx = Nginx(root, Path(tmp) / "nginx")
        url = nginx.url("obj")
        env = {"AWS_ENDPOINT_URL": nginx.base, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
               "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
        os.environ.update(env)
        try:
            out = np.empty(a.size, np.uint8)
            for name in names:
                best, note, why = None, "", ""
                for k in range(a.repeat + 1):  # run 0 warms up (imports, credentials, connections): untimed
                    out[:] = 0
                    t0 = time.perf_counter()
                    try:
                        note = CLIENTS[name](a, url, "s3://bench/obj", out)
                    except ImportError as e:
                        why = f"not installed: {e}"
                        break
                    dt = time.perf_counter() - t0
                    if not np.array_equal(out, data):
                        why = "wrong bytes"
                        break
                    if k:
                        best = dt if best is None else min(best, dt)
                results.append({"client": name, "seconds": best, "gbps": a.size / best / 1e9 if best else None,
                                "note": note, "skipped": why})
        finally:
            nginx.close()
    peers = [r["gbps"] for r in results if r["gbps"] and r["client"] not in OURS]
    fastest = max(peers) if peers else None
    print(f"{a.size / 2**20:.0f} MiB object from nginx on 127.0.0.1, chunk {a.chunk / 2**20:g} MiB, "
          f"{a.concurrency} in flight, best of {a.repeat}, into host memory")
    print(f"{'client':18} {'GB/s':>7} {'vs fastest peer':>16}  how")
    for r in results:
        if r["skipped"]:
            print(f"{r['client']:18} {'-':>7} {'-':>16}  skipped: {r['skipped']}")
            continue
        ratio = f"{r['gbps'] / fastest:.2f}x" if fastest else "-"
        r["vs_fastest_peer"] = r["gbps"] / fastest if fastest else None
        print(f"{r['client']:18} {r['gbps']:7.2f} {ratio:>16}  {r['note']}")
    if a.json:
        Path(a.json).write_text(json.dumps({"size": a.size, "chunk": a.chunk, "concurrency": a.concurrency,
                                            "repeat": a.repeat, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
