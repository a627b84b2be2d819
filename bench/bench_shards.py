"""Tar shards against an ImageFolder of objects and the peers, over an object
store with a fixed latency per request (issue 27's benchmark), in one run.

moto's S3 server runs in a process of its own on 127.0.0.1, behind
bench/latency_proxy.py (another process, 127.0.0.1: `--delay` seconds per
request, optionally `--bandwidth`). The same `--images` JPEGs (scikit-image's
photographs, cropped, flipped and re-encoded at ImageNet sizes; cached under
`--cache`) are uploaded straight to moto as an ImageFolder of objects
(``s3://bench/folder/cNN/NNNNNN.jpg``), as the shards gdsio.data.write_shards
writes (``s3://bench/shards/``, `--shard-bytes` each, index objects beside),
and as a 100-shard set for the time to the first batch (``s3://bench/shards100/``).
Every row reads through the proxy and decodes the same way: gdsio's CPU JPEG
decode of the whole image to uint8, then gdsio.data.Resize((S, S)) (the
Loader's transform; the peers call the same two functions per sample).

Rows: gdsio.Loader over the objects; over the s3:// shards with the global
and the shard-window shuffle (skipped, with the reason, where this commit's
Loader does not read s3:// shards or lacks the mode); webdataset.WebDataset +
DataLoader(num_workers=2) reading the shards by http through the proxy
(``pipe:curl``, path-style object URLs), decoded as above (the like-for-like
peer row); the same webdataset pipeline as its documentation shows users
running it (``webdataset-s3-pil``: ``.decode("pilrgb")``, then torchvision's
v2.Resize((S, S)) if torchvision imports, else PIL's resize((S, S),
BILINEAR); its pixels are compared within a tolerance, not for equality,
and it is never the goal's measure); litdata's StreamingDataset over its
own chunks of the same files if it imports (skipped with the reason
otherwise; ``--peers-path`` adds a folder it was installed into apart);
Mosaic Streaming's StreamingDataset over its own MDS shards of the same
files if it imports (it needs a torchvision built for this torch: run the
bench from a venv that has both, with this gdsio on PYTHONPATH); and
on the local disk, the shards against the same files as an ImageFolder; and,
in the same rounds as the s3:// rows, the shard-window mode over the local
copies of the shards (``gdsio-shards-local-window``: no network, no
servers; the ceiling of the window row, and so of its like-for-like ratio
to webdataset). moto answers a ranged GET by reading the whole object, which
no real store does; so the window row and webdataset's like-for-like row also
run over nginx (``-http``: the shards' local folder served by nginx behind a
proxy of its own with the same delay; skipped, with the reason, where nginx
does not start). The fast rows run ``--rounds`` times round-robin and keep their best round. Each
row: images/s over the pass, the time from ``iter()`` to the first batch, the
process's CPU seconds (/proc, with reaped children such as DataLoader
workers) beside the wall clock, the servers' CPU seconds, the requests the
proxy forwarded, the load average. Every row's first batch is compared with
the same samples read as local files through gdsio.Loader, and the shard
rows' with the ImageFolder's (same seed and shuffle). Every listening socket
of the three processes is checked to be on 127.0.0.1.

    python bench/bench_shards.py                                  # the issue's sizes (minutes)
    python bench/bench_shards.py --peers-path /tmp/peers          # + litdata installed there
    PYTHONPATH=. /tmp/benchvenv/bin/python bench/bench_shards.py  # a venv with every peer (Mosaic too)
    python bench/bench_shards.py --smoke --out-dir /tmp/x         # tiny sizes (the test)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import ipaddress
import json
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import shutil
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

import gdsio
import gdsio.data
from gdsio.config import parse_bytes

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # photos.py, latency_proxy.py (also under python -P)
from photos import sources  # noqa: E402
from latency_proxy import STATS_PATH  # noqa: E402

BUCKET = "bench"
MOTO_RANGES = (
    "moto {version} answers a ranged GET by reading the whole object and slicing it (moto/s3/models.py "
    "FakeKey.value, moto/s3/responses.py _handle_range_header in 5.2.6), so on the bench's machine each of gdsio's "
    "ranged GETs of a shard (remote_chunk_bytes pieces, the window pass's first batch's own reads, and the "
    "beside-index check's two 512-byte reads) costs the server a whole shard's copy, made under the object's lock "
    "(one GET of a shard at a time), and each of webdataset's whole-object GETs one: read the servers' CPU "
    "column with that in mind, and the -http rows (nginx) beside the s3 ones")
CEILING = "gdsio-shards-local-window"  # the window row's mode on the local copies: no network, no servers
CLASSES = 10
# ImageNet's common sizes (width, height), drawn per image
SIZES = [(500, 375), (375, 500), (500, 333), (333, 500), (500, 500), (400, 300), (500, 400), (640, 480)]
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never an HTTP proxy: loopback only


# ---- the machine, the commit -------------------------------------------------------------------
def machine() -> dict[str, Any]:
    cpu = platform.machine()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) * 1024
    return {"cpu": cpu, "cpus": os.cpu_count(), "memory_gib": round(mem / 2**30, 1), "python": platform.python_version(),
            "torch": torch.__version__, "platform": platform.platform(), "gdsio_from": os.path.dirname(gdsio.__file__),
            "peers": peer_versions()}


def peer_versions() -> dict[str, str]:
    """The installed version of each peer package (and of obstore: litdata reads chunks with it where it is
    installed, with boto3 where not), from its metadata: nothing is imported."""
    from importlib import metadata

    out = {}
    for name in ("webdataset", "litdata", "mosaicml-streaming", "torchvision", "obstore", "boto3", "moto"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(HERE.parent), *args], capture_output=True, text=True, timeout=30,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def commit() -> dict[str, Any]:
    """HEAD, and whether gdsio/ differs from it (another engineer's work in the tree is what ran)."""
    dirty = git("status", "--porcelain", "--untracked-files=all", "--", "gdsio")
    return {"head": git("rev-parse", "--short", "HEAD") or "unknown", "subject": git("log", "-1", "--format=%s")[:120],
            "gdsio_tree": "clean" if not dirty else "uncommitted changes: " + "; ".join(dirty.splitlines()),
            "data_log": git("log", "--oneline", "-5", "--", "gdsio/data").splitlines()}


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def proc_cpu(pid: int) -> float:
    """utime + stime of a live process, seconds (/proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> tuple[float, float]:
    """(this process, its reaped children) CPU seconds."""
    t = os.times()
    return t.user + t.system, t.children_user + t.children_system


def listening_sockets(pids: dict[str, int]) -> list[dict[str, Any]]:
    """Every TCP socket in LISTEN state held by these processes, from /proc/net/tcp{,6}."""
    owner: dict[str, str] = {}
    for name, pid in pids.items():
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:["):
                    owner[target[8:-1]] = name
        except OSError:
            continue
    out = []
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] != "0A" or parts[9] not in owner:
                continue
            hexaddr, hexport = parts[1].split(":")
            raw = bytes.fromhex(hexaddr)
            # /proc prints the address as 32-bit words in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            addr = ipaddress.ip_address(raw if width == 4 else raw)
            out.append({"process": owner[parts[9]], "address": str(addr), "port": int(hexport, 16),
                        "loopback": addr.is_loopback})
    return out


# ---- the photographs ---------------------------------------------------------------------------
def make_photos(n: int, root: Path) -> Path:
    """n JPEGs in ImageFolder layout (CLASSES folders), cached: crops of the source photographs at an
    ImageNet size, flipped at random, grain added, quality 92-98, each file different."""
    from PIL import Image

    folder = root / f"photos-{n}-v2"
    done = root / f"photos-{n}-v2.done"  # beside the folder: a file in it would be a stray sample
    if done.exists():
        return folder
    srcs = [Image.fromarray(a) for a in sources()]
    for c in range(CLASSES):
        (folder / f"c{c:02d}").mkdir(parents=True, exist_ok=True)
    for k in range(n):
        rng = np.random.default_rng(k)
        src = srcs[k % len(srcs)]
        w, h = SIZES[int(rng.integers(len(SIZES)))]
        scale = float(rng.uniform(0.55, 1.0))  # of the largest box of that aspect in the source
        bw = min(src.width, src.height * w / h) * scale
        bh = bw * h / w
        x0, y0 = float(rng.uniform(0, src.width - bw)), float(rng.uniform(0, src.height - bh))
        im = src.crop((int(x0), int(y0), int(x0 + bw), int(y0 + bh))).resize((w, h), Image.BICUBIC)
        if rng.integers(2):
            im = im.transpose(Image.FLIP_LEFT_RIGHT)
        # a camera's grain (the sources upscaled alone compress far smaller than ImageNet's ~110 KB)
        px = np.asarray(im, dtype=np.float32) + rng.normal(0.0, 4.0, (h, w, 3)).astype(np.float32)
        Image.fromarray(px.clip(0, 255).astype(np.uint8)).save(
            folder / f"c{k % CLASSES:02d}" / f"{k:06d}.jpg", format="JPEG", quality=int(rng.integers(92, 99)))
    done.write_text("")
    return folder


def write_local_shards(folder: Path, dst: Path, shard_bytes: int) -> list[str]:
    if (dst / "DONE").exists():
        return sorted(str(p) for p in dst.glob("shard-*.tar"))
    paths = gdsio.data.write_shards(str(folder), str(dst), shard_bytes=shard_bytes)
    (dst / "DONE").write_text("")
    return paths


# ---- the servers -------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(proc: subprocess.Popen, port: int, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start on 127.0.0.1:{port} (exit {proc.poll()})")
            time.sleep(0.1)


def start_proxy(upstream: str, delay: float, bandwidth: str | None) -> tuple[subprocess.Popen, str]:
    """bench/latency_proxy.py in front of `upstream`, a process of its own: (the process, its base URL)."""
    cmd = [sys.executable, str(HERE / "latency_proxy.py"), "--upstream", upstream, "--delay", str(delay)]
    if bandwidth:
        cmd += ["--bandwidth", bandwidth]
    proxy = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = proxy.stdout.readline().strip()  # type: ignore[union-attr]
    if not line.startswith("listening "):
        stop(proxy)
        raise RuntimeError(f"latency proxy did not start: {line!r}")
    return proxy, line.split()[1]


def stop(proc: subprocess.Popen | None) -> None:
    """Ends a server process (terminate, then kill after 10 s) and closes its pipe."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout:
        proc.stdout.close()


class _Proxied:
    """A store behind a latency proxy at `base`."""

    base = ""

    def proxy_stats(self) -> dict[str, Any]:
        with _OPENER.open(self.base + STATS_PATH, timeout=30) as r:
            return json.loads(r.read())


class Servers(_Proxied):
    """moto's S3 server and the latency proxy in front of it, two processes on 127.0.0.1."""

    server = "moto"

    def __init__(self, delay: float, bandwidth: str | None) -> None:
        self.moto_port = free_port()
        self.moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.moto_port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.proxy: subprocess.Popen | None = None
        try:
            wait_port(self.moto, self.moto_port, "moto_server")
            self.endpoint = f"http://127.0.0.1:{self.moto_port}"
            self.proxy, self.base = start_proxy(self.endpoint, delay, bandwidth)
        except BaseException:
            self.close()
            raise

    def pids(self) -> dict[str, int]:
        return {"bench": os.getpid(), "moto": self.moto.pid, "proxy": self.proxy.pid}  # type: ignore[union-attr]

    def cpu(self) -> tuple[float, float]:
        """(moto, proxy) CPU seconds so far."""
        return proc_cpu(self.moto.pid), proc_cpu(self.proxy.pid)  # type: ignore[union-attr]

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def close(self) -> None:
        stop(self.proxy)
        stop(self.moto)


class HttpServers(_Proxied):
    """nginx serving the local shards' folder (tests/remote_servers.py's Nginx: a ranged GET costs it its
    range, sent by sendfile) and a latency proxy of its own in front, processes on 127.0.0.1."""

    server = "nginx"

    def __init__(self, root: Path, work: Path, delay: float, bandwidth: str | None) -> None:
        sys.path.insert(0, str(HERE.parent / "tests"))
        try:
            from remote_servers import Nginx
        finally:
            sys.path.pop(0)
        self.nginx = Nginx(root, work)  # FileNotFoundError where nginx is not installed
        self.proxy: subprocess.Popen | None = None
        try:
            self.proxy, self.base = start_proxy(self.nginx.base, delay, bandwidth)
        except BaseException:
            self.close()
            raise

    def _nginx_pids(self) -> list[int]:
        master = self.nginx.proc.pid
        try:
            with open(f"/proc/{master}/task/{master}/children") as f:
                return [master] + [int(x) for x in f.read().split()]
        except OSError:
            return [master]

    def pids(self) -> dict[str, int]:
        return {"nginx": self.nginx.proc.pid, "proxy-http": self.proxy.pid}  # type: ignore[union-attr]

    def cpu(self) -> tuple[float, float]:
        """(nginx, its master and workers; proxy) CPU seconds so far."""
        return sum(proc_cpu(p) for p in self._nginx_pids()), proc_cpu(self.proxy.pid)  # type: ignore[union-attr]

    def close(self) -> None:
        stop(self.proxy)
        self.nginx.close()


def upload(client: Any, files: list[tuple[Path, str]]) -> None:
    def put(item: tuple[Path, str]) -> None:
        # public-read: webdataset's curl reads the shards unsigned, as from a public dataset bucket
        client.put_object(Bucket=BUCKET, Key=item[1], Body=item[0].read_bytes(), ACL="public-read")

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        list(ex.map(put, files))


# ---- decoding, the same in every row ----------------------------------------------------------
class Decode:
    """JPEG bytes -> gdsio's whole decode (RGB uint8) -> gdsio.data.Resize((size, size)): the
    peers' per-sample function, the same two calls the Loader makes for a batch."""

    def __init__(self, size: int) -> None:
        self.resize = gdsio.data.Resize((size, size))

    def __call__(self, data: bytes) -> torch.Tensor:
        img = gdsio.image.decode(torch.frombuffer(bytearray(data), dtype=torch.uint8), device="cpu", mode="RGB")
        return self.resize([img])[0]


def _collate(samples: list[tuple[torch.Tensor, int, str]]) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    return (torch.stack([s[0] for s in samples]), torch.tensor([s[1] for s in samples]), [s[2] for s in samples])


class WdsPil:
    """webdataset's documented decode: a sample dict after ``.decode("pilrgb")`` (a PIL RGB image) ->
    (image, label, key), resized to (size, size) by torchvision's v2.Resize when it imports (it resizes a
    PIL image with PIL), else by PIL's resize(BILINEAR), then to a (C, H, W) uint8 tensor; picklable."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.how = pil_resize_name()

    def __call__(self, sample: dict[str, Any]) -> tuple[torch.Tensor, int, str]:
        from PIL import Image

        img = next(v for k, v in sample.items() if k in ("jpg", "jpeg"))
        if self.how.startswith("torchvision"):
            from torchvision.transforms import v2

            img = v2.Resize((self.size, self.size), antialias=True)(img)
        else:
            img = img.resize((self.size, self.size), Image.BILINEAR)
        # np.array copies, as torchvision's PILToTensor does (asarray's view is read-only: torch warns)
        return torch.from_numpy(np.array(img)).permute(2, 0, 1), int(sample["cls"]), sample["__key__"]


def pil_resize_name() -> str:
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - ImportError, or RuntimeError from a torchvision built for another torch
        return "PIL resize((S, S), BILINEAR) (torchvision does not import here)"
    return f"torchvision {torchvision.__version__} v2.Resize((S, S), antialias=True) on the PIL image"


class WdsDecode:
    """webdataset sample dict -> (image, label, key); picklable for the DataLoader workers."""

    def __init__(self, size: int) -> None:
        self.decode = Decode(size)

    def __call__(self, sample: dict[str, Any]) -> tuple[torch.Tensor, int, str]:
        image = next(v for k, v in sample.items() if k in ("jpg", "jpeg"))
        return self.decode(image), int(sample["cls"]), sample["__key__"]


# ---- the rows ----------------------------------------------------------------------------------
class Skip(Exception):
    """A row that cannot run here (its reason is the message)."""


class RowTimeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise RowTimeout


def measure(name: str, what: str, make: Callable[[], Any], servers: Servers | HttpServers | None, limit: int | None,
            timeout: float) -> dict[str, Any]:
    """Runs one pass of the iterable `make()` returns (construction timed apart), up to `limit` images."""
    row: dict[str, Any] = {"row": name, "what": what, "status": "ok", "load_before": loadavg()}
    stats0 = servers.proxy_stats() if servers else None
    cpu0, kids0 = own_cpu()
    srv0 = servers.cpu() if servers else (0.0, 0.0)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(timeout))
    first = None
    it = None
    try:
        t0 = time.perf_counter()
        source = make()
        t1 = time.perf_counter()
        order = getattr(source, "order", None)  # gdsio.Loader: the dataset indices of its first batch
        row["first_indices"] = order.batch(0, 0).tolist() if order is not None else None
        it = iter(source)
        n = 0
        for batch in it:
            if first is None:
                first = batch
                t_first = time.perf_counter()
            n += len(batch[1])
            if limit is not None and n >= limit:
                break
        t_end = time.perf_counter()
    except Skip as e:
        row.update(status="skipped", reason=str(e))
        return row
    except RowTimeout:
        row.update(status="failed", reason=f"no end within {timeout:.0f} s (--row-timeout)")
        return row
    except Exception as e:  # noqa: BLE001 - a row that fails is reported, the others still run
        last = [x for x in str(e).strip().splitlines() if x.strip()]  # a worker's traceback ends with the error
        row.update(status="failed", reason=f"{type(e).__name__}: {last[0] if last else ''}"
                   + (f" ... {last[-1].strip()}" if len(last) > 1 else ""))
        return row
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        close = getattr(it, "close", None) or getattr(it, "_shutdown_workers", None)
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001
                pass
        del it
    cpu1, kids1 = own_cpu()
    wall = t_end - t1
    row.update(images=n, construct_s=t1 - t0, first_batch_s=t_first - t1, wall_s=wall, images_per_s=n / wall,
               steady_images_per_s=(n - len(first[1])) / (t_end - t_first) if t_end > t_first else None,
               cpu_s=cpu1 - cpu0, children_cpu_s=kids1 - kids0,
               load_after=loadavg())
    row["cpu_ms_per_image"] = (row["cpu_s"] + row["children_cpu_s"]) / n * 1e3 if n else None
    if servers:
        srv1 = servers.cpu()
        row.update(server=servers.server, server_cpu_s=srv1[0] - srv0[0], proxy_cpu_s=srv1[1] - srv0[1],
                   servers_cpu_s=sum(srv1) - sum(srv0))
    # CPUs kept busy over the pass by this process, its children and the servers (of os.cpu_count() here)
    row["cpus_busy"] = (row["cpu_s"] + row["children_cpu_s"] + row.get("servers_cpu_s", 0.0)) / wall if wall > 0 else None
    if servers:
        s1 = servers.proxy_stats()
        row.update(requests=s1["requests"] - stats0["requests"], mb_down=(s1["bytes_down"] - stats0["bytes_down"]) / 1e6)
    row["first"] = first
    return row


def loader_row(source: Any, a: argparse.Namespace, extra: dict[str, Any]) -> Callable[[], Any]:
    def make() -> Any:
        kw = {"transform": gdsio.data.Resize((a.size, a.size)), "device": "cpu", "seed": a.seed}
        if a.threads:
            kw["threads"] = a.threads
        kw.update(extra)
        return gdsio.Loader(source, a.batch, **kw)

    return make


def shard_loader(url: str, a: argparse.Namespace, kwargs: dict[str, Any], mode: str) -> Callable[[], Any]:
    """A Loader over s3:// shards; Skip (with this commit's words) where it does not read them or lacks the mode."""

    def make() -> Any:
        try:
            return loader_row(url, a, kwargs)()
        except (TypeError, ValueError, FileNotFoundError, OSError, NotImplementedError) as e:
            raise Skip(f"gdsio.Loader({url!r}, **{kwargs}) at this commit: {type(e).__name__}: {e}"[:500]
                       + (" (the " + mode + " mode or s3:// shards have not landed)")) from e

    return make


def webdataset_row(urls: list[str], a: argparse.Namespace, pil: bool = False) -> Callable[[], Any]:
    """webdataset + DataLoader(num_workers=2): decoded as every row is, or (`pil`) as its documentation shows."""

    def make() -> Any:
        try:
            import webdataset as wds
        except ImportError as e:
            raise Skip(f"webdataset is not installed: {e}") from e
        ds = wds.WebDataset(urls, shardshuffle=len(urls), seed=a.seed, empty_check=False).shuffle(a.wds_buffer)
        ds = ds.decode("pilrgb").map(WdsPil(a.size)) if pil else ds.map(WdsDecode(a.size))
        ds = ds.batched(a.batch, collation_fn=_collate)
        return torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)

    return make


def litdata_item(item: tuple[int, str, int]) -> dict[str, Any]:
    """litdata.optimize's function: a sample as litdata stores it (the JPEG bytes as they are)."""
    k, path, label = item
    with open(path, "rb") as f:
        return {"index": k, "label": label, "image": f.read()}


class LitDecode:
    """litdata's transform: the item dict -> (image, label, index), decoded as every row decodes."""

    def __init__(self, size: int) -> None:
        self.decode = Decode(size)

    def __call__(self, item: dict[str, Any]) -> tuple[torch.Tensor, int, str]:
        return self.decode(item["image"]), int(item["label"]), str(item["index"])


LITDATA_ABSENT = ("litdata does not import here ({}); `pip install --dry-run litdata` would replace torch 2.13.0+cpu "
                  "with torch 2.14.1 and its CUDA wheels (pinned to 2.13 it adds torchvision to the shared venv), so "
                  "it is not in /work/venv; `pip install --no-deps --target DIR litdata lightning-utilities` and "
                  "--peers-path DIR run it")


def litdata_convert(files: list[Path], out: Path, chunk_bytes: int, env: dict[str, str]) -> str | None:
    """litdata's own format of the same files (optimize, in a process of its own: it sets the start method to
    spawn for the whole process); None when done, else why not."""
    if (out.parent / (out.name + ".done")).exists():
        return None
    items = [(k, str(f), int(f.parent.name[1:])) for k, f in enumerate(files)]
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import litdata; from bench_shards import litdata_item; "
            "litdata.optimize(fn=litdata_item, inputs=[tuple(x) for x in json.load(open(sys.argv[2]))], "
            "output_dir=sys.argv[3], chunk_bytes=int(sys.argv[4]), num_workers=1)")
    spec = out.parent / (out.name + ".inputs.json")
    spec.write_text(json.dumps(items))
    r = subprocess.run([sys.executable, "-c", code, str(HERE), str(spec), str(out), str(chunk_bytes)],
                       capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode:
        return f"litdata.optimize failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}"
    (out.parent / (out.name + ".done")).write_text("")
    return None


def litdata_row(servers: Servers, prefix: str, a: argparse.Namespace, cache: Path, why: str | None) -> Callable[[], Any]:
    """litdata's StreamingDataset + StreamingDataLoader(num_workers=2) over its own chunks of the same images,
    read from the same moto through the proxy (storage_options' endpoint_url; a fresh local chunk cache each
    pass), decoded the same way."""

    def make() -> Any:
        if why:
            raise Skip(why)
        try:
            import litdata
            from litdata.streaming.resolver import Dir
        except ImportError as e:
            raise Skip(LITDATA_ABSENT.format(e)) from e
        local = cache / "litdata-chunk-cache"
        shutil.rmtree(local, ignore_errors=True)
        so = {"endpoint_url": servers.base, "aws_access_key_id": "testing", "aws_secret_access_key": "testing",
              "region_name": "us-east-1"}
        ds = litdata.StreamingDataset(Dir(path=str(local), url=f"s3://{BUCKET}/{prefix}"), storage_options=so,
                                      shuffle=True, seed=a.seed, transform=LitDecode(a.size))
        return litdata.StreamingDataLoader(ds, batch_size=a.batch, num_workers=2, collate_fn=_collate)

    return make


MOSAIC_ABSENT = ("Mosaic Streaming does not import here ({}): it imports torchvision and transformers at its top "
                 "level, and `pip install mosaicml-streaming` replaces torch 2.13.0+cpu with 2.14.1 and its CUDA wheels, "
                 "so it is not in /work/venv; a venv of torch 2.14.1 + torchvision 0.29.1 + mosaicml-streaming (and "
                 "this bench's other peers) runs every row of this bench with it (gdsio/_core links no torch)")


def mosaic_import() -> Any:
    """streaming's StreamingDataset and StreamingDataLoader, or Skip with the reason (ImportError, or torchvision's
    RuntimeError where its build does not match torch's)."""
    try:
        from streaming import StreamingDataLoader, StreamingDataset
    except Exception as e:  # noqa: BLE001 - any failure to import is the row's reason
        raise Skip(MOSAIC_ABSENT.format(f"{type(e).__name__}: {e}"[:200])) from e
    return StreamingDataset, StreamingDataLoader


def mosaic_convert(files: list[Path], out: Path, shard_bytes: int) -> str | None:
    """Mosaic's own format (MDS) of the same files: the JPEG bytes as they are (no compression, no re-encode),
    the label, the ImageFolder position; None when done, else why not."""
    done = out.parent / (out.name + ".done")
    if done.exists():
        return None
    try:
        from streaming import MDSWriter
    except Exception as e:  # noqa: BLE001
        return MOSAIC_ABSENT.format(f"{type(e).__name__}: {e}"[:200])
    shutil.rmtree(out, ignore_errors=True)
    with MDSWriter(out=str(out), columns={"image": "bytes", "label": "int", "index": "int"},
                   size_limit=shard_bytes, progress_bar=False) as w:
        for k, f in enumerate(files):
            w.write({"image": f.read_bytes(), "label": int(f.parent.name[1:]), "index": k})
    done.write_text("")
    return None


_MOSAIC_CLASS: Any = None


def mosaic_dataset_class() -> Any:
    """StreamingDataset, each sample decoded as every row decodes (Mosaic's way: a subclass's get_item), made once
    and kept as this module's ``MosaicDecoded`` (so pickle finds it)."""
    global _MOSAIC_CLASS
    if _MOSAIC_CLASS is None:
        base, _ = mosaic_import()

        class MosaicDecoded(base):  # type: ignore[misc, valid-type]
            def __init__(self, *, size: int, **kwargs: Any) -> None:
                super().__init__(**kwargs)
                self.decode = Decode(size)

            def get_item(self, idx: int, retry: int = 7) -> tuple[torch.Tensor, int, str]:
                x = super().get_item(idx, retry)
                return self.decode(x["image"]), int(x["label"]), str(x["index"])

        MosaicDecoded.__module__, MosaicDecoded.__qualname__ = __name__, "MosaicDecoded"
        globals()["MosaicDecoded"] = _MOSAIC_CLASS = MosaicDecoded
    return _MOSAIC_CLASS


def mosaic_row(servers: Servers, prefix: str, a: argparse.Namespace, cache: Path, why: str | None) -> Callable[[], Any]:
    """Mosaic Streaming's StreamingDataset(shuffle=True) + StreamingDataLoader(num_workers=2) over its own MDS shards
    of the same images, read from the same moto through the proxy (S3_ENDPOINT_URL; a fresh local shard cache each
    pass), decoded the same way."""

    def make() -> Any:
        if why:
            raise Skip(why)
        _, loader = mosaic_import()
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()  # a previous pass's shared memory, left by its workers
        local = cache / "mosaic-shard-cache"
        shutil.rmtree(local, ignore_errors=True)
        ds = mosaic_dataset_class()(size=a.size, remote=f"s3://{BUCKET}/{prefix}", local=str(local), shuffle=True,
                                    shuffle_seed=a.seed, batch_size=a.batch)
        return loader(ds, batch_size=a.batch, num_workers=2, collate_fn=_collate)

    return make


def _same(x: dict[str, Any], y: dict[str, Any]) -> bool | None:
    if x.get("first") is None or y.get("first") is None:
        return None
    return bool(torch.equal(x["first"][0], y["first"][0]) and torch.equal(x["first"][1], y["first"][1]))


# ---- the report --------------------------------------------------------------------------------
def _f(v: Any, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _rounds(r: dict[str, Any], key: str) -> str:
    v = r.get(key) or []
    return f" ({', '.join(str(x) for x in v)})" if len(v) > 1 else ""


def render(doc: dict[str, Any]) -> str:
    c, m = doc["commit"], doc["machine"]
    lines = [
        f"# Shards over an object store with {doc['config']['delay_s'] * 1000:g} ms a request ({doc['date']})", "",
        f"- command: `{doc['command']}`",
        f"- commit: {c['head']} ({c['subject']}); gdsio/ in the tree: {c['gdsio_tree']}"
        + ("" if doc["commit_start"] == c else f" (at the start: {doc['commit_start']['head']}, gdsio/ "
           f"{doc['commit_start']['gdsio_tree']}: the modules were imported then)"),
        f"- machine: {m['cpu']}, {m['cpus']} CPUs, {m['memory_gib']} GiB, {m['platform']}, Python {m['python']}, "
        f"torch {m['torch']}; shared VM, load average at start {doc['load_start']}, at end {doc['load_end']}",
        "- peers: " + ", ".join(f"{k} {v}" for k, v in m.get("peers", {}).items()),
        f"- data: {doc['data']['images']} JPEGs ({doc['data']['mean_kb']:.0f} KB mean, ImageNet sizes, from "
        f"scikit-image's photographs), {doc['data']['shards']} shards of {doc['data']['shard_mb']:.0f} MB "
        f"(+ {doc['data']['shards100']} for the first-batch rows); batch {doc['config']['batch']}, every image "
        f"decoded whole (gdsio CPU decode, RGB uint8) and resized to {doc['config']['size']}x{doc['config']['size']} "
        "(gdsio.data.Resize), but in webdataset-s3-pil (PIL's decode and resize, as webdataset's documentation shows)",
        f"- servers: moto_server and bench/latency_proxy.py (delay {doc['config']['delay_s']} s a request, bandwidth "
        f"{doc['config']['bandwidth'] or 'uncapped'}); for the -http rows, nginx serving the shards' folder behind "
        f"a proxy of its own, the same delay ({doc.get('http_servers') or 'not run'}); separate processes; "
        "listening sockets: "
        + ", ".join(f"{s['process']} {s['address']}:{s['port']}" for s in doc["listening"]),
        "- CPU s: this process's user+system time over the pass (/proc), + reaped children (DataLoader "
        "workers and their curl); CPU ms/image: both over the images; servers: the store (moto, or nginx for the "
        "-http rows) + its proxy. images/s: from "
        "`iter()` to the pass's end. Rows given several figures ran that many rounds round-robin with their "
        "neighbours (the same load for each): the row's figures are its best round's (highest images/s; for the "
        "first-batch rows, shortest first batch), every round's in brackets. CPUs busy: (CPU s + children + "
        "servers CPU s) / wall s, of the machine's CPUs.", "",
        "| row | images | images/s | vs objects | vs webdataset | vs webdataset-pil | first batch s | construct s | "
        "wall s | CPU s (+children) | CPU ms/image | servers CPU s (store+proxy) | CPUs busy | requests | MB | "
        "load 1m before/after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in doc["rows"]:
        if r["status"] != "ok":
            lines.append(f"| {r['row']} | {r['status']}: {r['reason']} |" + " |" * 14)
            continue
        lines.append(
            f"| {r['row']} | {r['images']} | {r['images_per_s']:.1f}{_rounds(r, 'rounds_images_per_s')} | "
            f"{_f(r.get('vs_objects'), '{:.2f}x')} | {_f(r.get('vs_webdataset'), '{:.2f}x')} | "
            f"{_f(r.get('vs_webdataset_pil'), '{:.2f}x')} | "
            f"{r['first_batch_s']:.2f}{_rounds(r, 'rounds_first_batch_s')} | {r['construct_s']:.2f} | "
            f"{r['wall_s']:.1f} | {r['cpu_s']:.1f} (+{r['children_cpu_s']:.1f}) | {r['cpu_ms_per_image']:.2f} | "
            + (f"{r['server_cpu_s']:.1f}+{r['proxy_cpu_s']:.1f}" if r.get("servers_cpu_s") is not None else "-") + " | "
            f"{_f(r.get('cpus_busy'), '{:.2f}')} | "
            f"{_f(r.get('requests'), '{}')} | {_f(r.get('mb_down'), '{:.0f}')} | "
            f"{r['load_before'][0]}/{r['load_after'][0]} |")
    lines += ["", "What each row is:", ""] + [f"- {r['row']}: {r['what']}" for r in doc["rows"]]
    lines += ["", "## Same outputs", ""] + [f"- {k}: {v}" for k, v in doc["equal"].items()]
    lines += ["", "## The issue's goals, as measured here", ""] + [f"- {g}" for g in doc["goals"]]
    if doc["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in doc["notes"]]
    return "\n".join(lines) + "\n"


def versus(goal: str, best: dict[str, Any], peer: dict[str, Any], met: Callable[[float], bool]) -> str:
    """A goal's line: the best shard row's images/s over a peer row's, both rows' CPU an image, met or not."""
    v = best["images_per_s"] / peer["images_per_s"]
    return (f"{goal}: {v:.2f}x ({best['row']}, CPU ms/image {best['cpu_ms_per_image']:.2f} vs "
            f"{peer['cpu_ms_per_image']:.2f}) -> {'met' if met(v) else 'NOT met'}")


def goals(rows: dict[str, dict[str, Any]]) -> list[str]:
    def ok(name: str) -> dict[str, Any] | None:
        r = rows.get(name)
        return r if r and r["status"] == "ok" else None

    out = []
    best = max((r for n, r in rows.items() if n.startswith("gdsio-shards-s3") and r["status"] == "ok"),
               key=lambda r: r["images_per_s"], default=None)
    obj, wds_ = ok("gdsio-objects-s3"), ok("webdataset-s3")
    if best and obj:
        v = best["images_per_s"] / obj["images_per_s"]
        out.append(f"shards >= 10x the ImageFolder of objects: {v:.2f}x ({best['row']}) -> {'met' if v >= 10 else 'NOT met'}")
    else:
        out.append("shards >= 10x the ImageFolder of objects: not measured (no s3:// shard row ran)")
    if best and wds_:
        out.append(versus("shards >= 1.5x webdataset + DataLoader(num_workers=2), like for like (webdataset-s3: the "
                          "same decode and resize)", best, wds_, lambda v: v >= 1.5))
    else:
        out.append("shards >= 1.5x webdataset: not measured (a row did not run)")
    hwin, hwds = ok("gdsio-shards-http-window"), ok("webdataset-http")
    if hwin and hwds:
        out.append(versus("the same goal over nginx (gdsio-shards-http-window vs webdataset-http: the same shards, "
                          "a server whose ranged GET costs it its range, not a whole object as moto's)", hwin, hwds,
                          lambda v: v >= 1.5)
                   + f"; servers CPU s {hwin['servers_cpu_s']:.2f} vs {hwds['servers_cpu_s']:.2f}")
    win, ceil = ok("gdsio-shards-s3-window"), ok(CEILING)
    if win and wds_ and win.get("steady_images_per_s") and wds_.get("steady_images_per_s"):
        out.append(f"(for reference, not a goal) like for like from each pass's first batch on: "
                   f"{win['steady_images_per_s'] / wds_['steady_images_per_s']:.2f}x ({win['row']} "
                   f"{win['steady_images_per_s']:.0f} vs {wds_['steady_images_per_s']:.0f} images/s)")
    if win and wds_ and ceil:
        out.append(f"(the ceiling of the like-for-like goal) {CEILING}, the window mode over the local copies of the "
                   f"shards (no network, no servers), in the same rounds: {ceil['images_per_s'] / wds_['images_per_s']:.2f}x "
                   f"webdataset-s3 (CPU ms/image {ceil['cpu_ms_per_image']:.2f} vs {wds_['cpu_ms_per_image']:.2f}); "
                   f"gdsio-shards-s3-window reaches {win['images_per_s'] / ceil['images_per_s']:.0%} of it"
                   + (f"; {ceil['images_per_s'] / hwds['images_per_s']:.2f}x webdataset-http, which "
                      f"gdsio-shards-http-window reaches {hwin['images_per_s'] / ceil['images_per_s']:.0%} of"
                      if hwin and hwds else ""))
    pil = ok("webdataset-s3-pil")
    if best and pil:
        v = best["images_per_s"] / pil["images_per_s"]
        out.append(f"(not the goal's measure: a different decode and resize) vs webdataset as its documentation runs "
                   f"it (webdataset-s3-pil): {v:.2f}x ({best['row']}, CPU ms/image {best['cpu_ms_per_image']:.2f} vs "
                   f"{pil['cpu_ms_per_image']:.2f})")
    t100 = [r for n, r in rows.items() if n.startswith("first-batch-100-gdsio") and r["status"] == "ok"]
    if t100:
        worst = max(r["first_batch_s"] for r in t100)
        out.append(f"first batch within 2 s of the first next() (100 shards): {worst:.2f} s at worst -> "
                   f"{'met' if worst <= 2 else 'NOT met'}")
    else:
        out.append("first batch within 2 s (100 shards): not measured (no s3:// shard row ran)")
    main = [r for n, r in rows.items() if n.startswith(("gdsio-shards-s3", "gdsio-shards-http", CEILING))
            and r["status"] == "ok"]
    if main:
        out.append("(for reference, not a goal) first batch on the main set's larger shards: "
                   + ", ".join(f"{r['row']} {r['first_batch_s']:.2f} s" for r in main))
    ls, lf = ok("gdsio-shards-local"), ok("gdsio-folder-local")
    if ls and lf:
        v = ls["images_per_s"] / lf["images_per_s"]
        out.append(f"local disk, shards no slower than the ImageFolder: {v:.2f}x the images/s "
                   f"(CPU s {ls['cpu_s']:.1f} vs {lf['cpu_s']:.1f}) -> {'met' if v >= 0.97 else 'NOT met'} "
                   "(within 3% counts as no slower on this shared VM)")
    for name, who, fmt in (("litdata-s3", "litdata", "its own chunks"), ("mosaic-streaming-s3", "Mosaic Streaming",
                                                                           "its own MDS shards")):
        peer = ok(name)
        if best and peer:
            out.append(versus(f"ahead of {who} ({fmt}, same server)", best, peer, lambda v: v > 1))
        else:
            out.append(f"ahead of {who}: not measured (see its row)")
    return out


# ---- main --------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=5000)
    p.add_argument("--shard-bytes", default="32M", help="shard size of the main shard set (default 32M)")
    p.add_argument("--first-batch-shards", type=int, default=100, help="shards of the first-batch set (default 100)")
    p.add_argument("--delay", type=float, default=0.02, help="seconds the proxy adds to each request")
    p.add_argument("--bandwidth", default=None, help="the proxy's bytes/s cap (e.g. 1G); default none")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=224, help="every image is resized to size x size")
    p.add_argument("--threads", type=int, default=None, help="gdsio.Loader threads (default: the Loader's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--objects-limit", type=int, default=1536,
                   help="images read in the ImageFolder-of-objects row (a HEAD and a GET an image: its rate is steady)")
    p.add_argument("--objects-threads", type=int, default=16,
                   help="a second ImageFolder-of-objects row with this many Loader threads (0: none)")
    p.add_argument("--global-kwargs", default='{"shuffle": "global"}',
                   help="Loader keywords of the s3:// shard row with the global shuffle (JSON)")
    p.add_argument("--window-kwargs", default='{"shuffle": "window", "shuffle_window": 4}',
                   help="Loader keywords of the s3:// shard row with the shard-window shuffle (JSON)")
    p.add_argument("--peers-path", default=None,
                   help="a folder of peer packages installed apart (pip install --target), searched after the venv")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of the fast rows, run round-robin; each keeps its best (default 3)")
    p.add_argument("--wds-buffer", type=int, default=1000, help="webdataset's shuffle buffer (samples)")
    p.add_argument("--row-timeout", type=float, default=900)
    p.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "gdsio-bench-shards"),
                   help="where the generated photos and local shards are kept between runs")
    p.add_argument("--out-dir", default=str(HERE / "results"))
    p.add_argument("--name", default="shards-s3-" + time.strftime("%Y-%m-%d", time.gmtime()))
    p.add_argument("--smoke", action="store_true", help="tiny sizes (the test): 48 images, 8 a batch, 1 ms")
    a = p.parse_args(argv)
    command = "python bench/bench_shards.py " + " ".join(shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:]))
    if a.smoke:
        a.images, a.shard_bytes, a.first_batch_shards, a.delay, a.batch, a.size = 48, "256K", 12, 0.001, 8, 32
        a.objects_limit, a.wds_buffer, a.row_timeout, a.objects_threads = 48, 16, 240, 4
        a.rounds = 2
    shard_bytes = parse_bytes(a.shard_bytes)
    if a.peers_path:
        sys.path.append(os.path.abspath(a.peers_path))
    child_env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # this gdsio, the peers
    global_kw, window_kw = json.loads(a.global_kwargs), json.loads(a.window_kwargs)
    load_start, commit_start = loadavg(), commit()
    notes: list[str] = []

    cache = Path(a.cache)
    folder = make_photos(a.images, cache)
    files = sorted(folder.glob("c*/*.jpg"))
    total = sum(f.stat().st_size for f in files)
    # named after the photo set they hold, so a new version of the photos never meets stale shards
    local = write_local_shards(folder, cache / f"{folder.name}-shards-{shard_bytes}", shard_bytes)
    per100 = max(1, -(-total // a.first_batch_shards))
    local100 = write_local_shards(folder, cache / f"{folder.name}-shards-{per100}", per100)

    try:
        import litdata  # noqa: F401
        lit_out = cache / f"{folder.name}-litdata-{shard_bytes}"
        lit_why = litdata_convert(files, lit_out, shard_bytes, child_env)
    except ImportError as e:
        lit_out, lit_why = None, LITDATA_ABSENT.format(e)
    mosaic_out = cache / f"{folder.name}-mosaic-{shard_bytes}"
    mosaic_why = mosaic_convert(files, mosaic_out, shard_bytes)
    servers = Servers(a.delay, a.bandwidth)
    http: HttpServers | None = None
    try:
        try:  # the same shards over nginx, whose ranged GET costs it its range (moto's, a whole object)
            http = HttpServers(Path(local[0]).parent, Path(tempfile.mkdtemp(prefix="gdsio-bench-nginx-")), a.delay,
                               a.bandwidth)
            http_why = ""
        except (FileNotFoundError, RuntimeError, ImportError) as e:
            http_why = f"nginx did not start here ({type(e).__name__}: {e})"
        listening = listening_sockets({**servers.pids(), **(http.pids() if http else {})})
        if not listening or not all(s["loopback"] for s in listening):
            raise RuntimeError(f"a socket listens off loopback (or none was found): {listening}")
        s3 = servers.client()
        s3.create_bucket(Bucket=BUCKET)
        up = [(f, f"folder/{f.parent.name}/{f.name}") for f in files]
        for prefix, paths in (("shards", local), ("shards100", local100)):
            for sp in paths:
                up.append((Path(sp), f"{prefix}/{os.path.basename(sp)}"))
                if os.path.exists(sp + ".idx.json"):
                    up.append((Path(sp + ".idx.json"), f"{prefix}/{os.path.basename(sp)}.idx.json"))
        if lit_out is not None and not lit_why:
            up += [(f, f"litdata/{f.name}") for f in sorted(lit_out.iterdir()) if f.is_file()]
        if not mosaic_why:
            up += [(f, f"mosaic/{f.name}") for f in sorted(mosaic_out.iterdir()) if f.is_file()]
        upload(s3, up)
        s3.close()
        os.environ.update({"AWS_ENDPOINT_URL": servers.base, "S3_ENDPOINT_URL": servers.base,  # Mosaic's name
                           "AWS_ACCESS_KEY_ID": "testing",
                           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
                           "AWS_EC2_METADATA_DISABLED": "true", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"})
        for k in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
            os.environ.pop(k, None)

        def brace(prefix: str, n: int) -> str:
            return f"s3://{BUCKET}/{prefix}/shard-{{000000..{n - 1:06d}}}.tar"

        def curl(prefix: str, paths: list[str]) -> list[str]:
            return [f"pipe:curl -s -f --noproxy '*' {servers.base}/{BUCKET}/{prefix}/{os.path.basename(sp)}"
                    for sp in paths]

        rows: list[dict[str, Any]] = []
        to = a.row_timeout

        def http_row(make: Callable[[], Callable[[], Any]]) -> Callable[[], Any]:
            """A row over nginx: Skip with the reason where nginx did not start."""
            if http is None:
                def skip() -> Any:
                    raise Skip(http_why)
                return skip
            return make()

        shuffled = {"shuffle": True}
        n100 = len(local100)

        def interleaved(*specs: tuple[Any, ...], key: str = "images_per_s") -> None:
            """Runs the rows round-robin for --rounds rounds (each round sees the same load) and keeps each
            row's best round (the highest images/s, or the shortest first batch), with every round's figures."""
            runs: list[list[dict[str, Any]]] = [[] for _ in specs]
            for _ in range(a.rounds):
                for k, spec in enumerate(specs):
                    if runs[k] and runs[k][-1]["status"] != "ok":
                        continue  # skipped or failed: once is enough
                    runs[k].append(measure(*spec, to))
            for got in runs:
                ok = [r for r in got if r["status"] == "ok"]
                if len(ok) < len(got):
                    rows.append(next(r for r in got if r["status"] != "ok"))
                    continue
                best = (max(ok, key=lambda r: r[key]) if key == "images_per_s"
                        else min(ok, key=lambda r: r["first_batch_s"]))
                best["rounds_images_per_s"] = [round(r["images_per_s"], 1) for r in ok]
                best["rounds_first_batch_s"] = [round(r["first_batch_s"], 2) for r in ok]
                best["first"], best["first_indices"] = ok[0].get("first"), ok[0].get("first_indices")
                rows.append(best)

        # local disk pair first (the page cache holds both: they were just written or read)
        interleaved(("gdsio-folder-local", "gdsio.Loader(local ImageFolder), shuffle=True",
                     loader_row(str(folder), a, shuffled), None, None),
                    ("gdsio-shards-local", "gdsio.Loader(local shards), shuffle=True",
                     loader_row(local, a, shuffled), None, None))
        # rows of a HEAD and a GET an image, long and steady: one round
        rows.append(measure("gdsio-objects-s3", f"gdsio.Loader('s3://{BUCKET}/folder/'), shuffle=True, first "
                            f"{a.objects_limit} images (a HEAD and a GET an image)",
                            loader_row(f"s3://{BUCKET}/folder/", a, shuffled), servers, a.objects_limit, to))
        if a.objects_threads:
            rows.append(measure(f"gdsio-objects-s3-{a.objects_threads}-threads", f"as gdsio-objects-s3 with "
                                f"threads={a.objects_threads} (more GETs in flight)",
                                loader_row(f"s3://{BUCKET}/folder/", a, {**shuffled, "threads": a.objects_threads}),
                                servers, a.objects_limit, to))
        rows.append(measure("gdsio-shards-s3-global", f"gdsio.Loader({brace('shards', len(local))!r}, **{global_kw})",
                            shard_loader(brace("shards", len(local)), a, global_kw, "global"), servers, None, to))
        if rows[-1]["status"] == "skipped" and global_kw != shuffled:
            rows.append(measure("gdsio-shards-s3-shuffle-true",
                                f"gdsio.Loader({brace('shards', len(local))!r}, shuffle=True)",
                                shard_loader(brace("shards", len(local)), a, shuffled, "s3"), servers, None, to))
        interleaved(("gdsio-shards-s3-window", f"gdsio.Loader({brace('shards', len(local))!r}, **{window_kw})",
                     shard_loader(brace("shards", len(local)), a, window_kw, "window"), servers, None),
                    (CEILING, f"the ceiling of gdsio-shards-s3-window: gdsio.Loader(the same shards on the local "
                     f"disk, **{window_kw}): the same mode without the network or the servers",
                     loader_row(local, a, window_kw), None, None),
                    ("webdataset-s3", f"webdataset.WebDataset({len(local)} pipe:curl URLs through the proxy, "
                     f"shardshuffle, .shuffle({a.wds_buffer})) + DataLoader(num_workers=2)",
                     webdataset_row(curl("shards", local), a), servers, None),
                    ("gdsio-shards-http-window", f"as gdsio-shards-s3-window over nginx by http(s) URLs "
                     f"(http://127.0.0.1:PORT/shard-{{...}}.tar, **{window_kw})",
                     http_row(lambda: shard_loader(f"{http.base}/shard-{{000000..{len(local) - 1:06d}}}.tar", a,  # type: ignore[union-attr]
                                                   window_kw, "window")), http, None),
                    ("webdataset-http", f"as webdataset-s3 over nginx ({len(local)} pipe:curl URLs through its proxy)",
                     http_row(lambda: webdataset_row([f"pipe:curl -s -f --noproxy '*' {http.base}/"  # type: ignore[union-attr]
                                                      f"{os.path.basename(sp)}" for sp in local], a)), http, None),
                    ("webdataset-s3-pil", f"webdataset as its documentation shows it: WebDataset({len(local)} pipe:curl "
                     f"URLs, shardshuffle, .shuffle({a.wds_buffer})).decode('pilrgb'), {pil_resize_name()}, then a "
                     "(C, H, W) uint8 tensor + DataLoader(num_workers=2) (not the same decode and resize as the "
                     "other rows)", webdataset_row(curl("shards", local), a, pil=True), servers, None),
                    ("litdata-s3", "litdata.StreamingDataset(s3 chunks of --shard-bytes, shuffle=True) + "
                     "StreamingDataLoader(num_workers=2), boto3 through the proxy",
                     litdata_row(servers, "litdata", a, cache, lit_why), servers, None),
                    ("mosaic-streaming-s3", "Mosaic Streaming: StreamingDataset(its MDS shards of --shard-bytes, "
                     "shuffle=True) + StreamingDataLoader(num_workers=2), boto3 through the proxy",
                     mosaic_row(servers, "mosaic", a, cache, mosaic_why), servers, None))
        interleaved(*[(f"first-batch-100-gdsio-{tag}", f"the {n100}-shard set, **{kw}, first batch only",
                       shard_loader(brace("shards100", n100), a, kw, tag), servers, a.batch)
                      for tag, kw in (("global", global_kw), ("window", window_kw))],
                    ("first-batch-100-webdataset", f"the {n100}-shard set, webdataset as above, first batch only",
                     webdataset_row(curl("shards100", local100), a), servers, a.batch), key="first_batch_s")

        by = {r["row"]: r for r in rows}
        notes.append(MOTO_RANGES.format(version=peer_versions()["moto"]))
        for r in rows:
            if r["status"] != "ok" or r["row"].startswith("first-batch"):
                continue
            over_http = r["row"].endswith("-http") or "-http-" in r["row"]
            for key, ref in (("vs_objects", "gdsio-objects-s3"),
                             ("vs_webdataset", "webdataset-http" if over_http else "webdataset-s3"),
                             ("vs_webdataset_pil", "webdataset-s3-pil")):
                if by.get(ref, {}).get("status") == "ok" and ("s3" in r["row"] or (r["row"] == CEILING and key != "vs_objects")
                                                               or (over_http and key == "vs_webdataset")):
                    r[key] = r["images_per_s"] / by[ref]["images_per_s"]
        equal = {
            "local shards vs local ImageFolder, first batch (shuffle=True, seed)": _same(by["gdsio-shards-local"],
                                                                                     by["gdsio-folder-local"]),
            "s3 ImageFolder of objects vs local ImageFolder, first batch": _same(by["gdsio-objects-s3"],
                                                                               by["gdsio-folder-local"]),
        }
        for name in ("gdsio-shards-s3-global", "gdsio-shards-s3-shuffle-true"):
            if name in by:
                equal[f"{name} vs the s3 ImageFolder of objects, first batch"] = _same(by[name], by["gdsio-objects-s3"])
        for r in rows:
            if r["status"] == "ok" and r.get("first") is not None and r["row"] != "webdataset-s3-pil":
                equal[f"{r['row']}: first batch vs the same samples as local ImageFolder files"] = \
                    check_indices(r, folder, a.size)
        if by.get("webdataset-s3-pil", {}).get("status") == "ok":  # PIL's decode and resize: near, not equal
            equal["webdataset-s3-pil: first batch vs the same samples through gdsio (PIL's decode and resize)"] = \
                check_near(by["webdataset-s3-pil"], folder, a.size)
        for r in rows:
            r.pop("first", None)
            r.pop("first_indices", None)
        doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": command, "commit": commit(),
           "commit_start": commit_start,
               "machine": machine(), "load_start": load_start, "load_end": loadavg(), "listening": listening,
               "config": {"delay_s": a.delay, "bandwidth": a.bandwidth, "batch": a.batch, "size": a.size,
                          "threads": a.threads or gdsio.current_settings().threads, "seed": a.seed},
               "data": {"images": len(files), "mean_kb": total / len(files) / 1e3, "bytes": total, "shards": len(local),
                        "shard_mb": shard_bytes / 2**20, "shards100": n100},
               "rows": rows, "equal": equal, "goals": goals(by), "notes": notes,
               "proxy": servers.proxy_stats(),
               "http_servers": (f"nginx, proxy {http.base}" if http else http_why)}
    finally:
        servers.close()
        if http is not None:
            http.close()
    write_report(doc, render(doc), Path(a.out_dir), a.name)
    return 0


def write_report(doc: dict[str, Any], md: str, out: Path, name: str) -> None:
    """`out`/`name`.json (the figures) and .md (`md`, also printed)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    (out / f"{name}.md").write_text(md)
    print(md)


def reference(folder: Path, indices: list[int], size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of these ImageFolder samples through gdsio.Loader over the local files, in this order."""
    files = sorted(folder.glob("c*/*.jpg"))
    paths = [(str(files[i]), int(files[i].parent.name[1:])) for i in indices]  # classes c00, c01, ...: their index
    loader = gdsio.Loader(paths, len(paths), transform=gdsio.data.Resize((size, size)), device="cpu")
    return next(iter(loader))


def check_near(row: dict[str, Any], folder: Path, size: int) -> str:
    """A row of other pixels (PIL's decode and resize) against the same samples through gdsio: how far apart."""
    first = row["first"]
    x, y = reference(folder, [int(k) for k in first[2]], size)
    if x.shape != first[0].shape or not torch.equal(y, first[1]):
        return f"differ: shapes {tuple(x.shape)} vs {tuple(first[0].shape)}, labels {y.tolist()} vs {first[1].tolist()}"
    d = (x.int() - first[0].int()).abs()
    return (f"same samples and labels; pixels at most {d.max().item()} apart, {(d > 1).float().mean().item():.4%} "
            f"more than 1 apart, mean {d.float().mean().item():.3f}")


def check_indices(row: dict[str, Any], folder: Path, size: int) -> bool | str | None:
    """A row's first batch against the same samples (by the order's indices, or webdataset's keys) read
    as local files of the ImageFolder."""
    if row.get("status") != "ok" or row.get("first") is None:
        return None
    first = row["first"]
    indices = row.get("first_indices") or [int(k) for k in first[2]]  # write_shards' keys: ImageFolder positions
    x, y = reference(folder, indices, size)
    if torch.equal(x, first[0]) and torch.equal(y, first[1]):
        return True
    if x.shape != first[0].shape or not torch.equal(y, first[1]):
        return f"differ: shapes {tuple(x.shape)} vs {tuple(first[0].shape)}, labels {y.tolist()} vs {first[1].tolist()}"
    bad = [k for k in range(len(x)) if not torch.equal(x[k], first[0][k])]
    diff = (x.int() - first[0].int()).abs().max().item()
    return f"differ: images {bad} of {len(x)}, at most {diff} apart"


if __name__ == "__main__":
    raise SystemExit(main())
