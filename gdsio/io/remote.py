"""Remote objects: a reader per s3:// or http(s):// URL, and the engine of
the ``s3`` and ``http`` backends (parallel ranged GETs).

A ``RemoteReader`` pins the object at open: one HEAD gives its size, ETag
and Last-Modified; every later GET asks ``If-Match`` that ETag and checks the
answer's ETag and Content-Range, so an object rewritten between (or during)
reads fails with an OSError instead of mixing two versions. An http(s)
object's redirects are followed and remembered per reader (its later GETs go
where they led); an s3:// object's are refused (see gdsio.io.http).

The engine splits the requests into chunks of ``remote_chunk_bytes`` and
runs them on up to ``remote_concurrency`` workers, each with its own
kept-alive connection:

- host memory: each chunk's body is received from the socket straight into
  the caller's buffer (``HTTPResponse.readinto``): no host copy at all.
- GPU memory: each worker owns a ``_core.StagingRing``, the pinned backend's
  ring (its pool of pinned buffers, its CUDA copy engine); the body goes from
  the socket into a pinned slot, the slot's copy to the GPU is queued on the
  caller's stream, and the worker goes on to its next GET while the copy
  runs; it waits only when it comes back to a slot whose copy is still
  pending. One host copy (the kernel's, socket to pinned memory), and network
  reads overlap the copies. KvikIO's remote reader waits for each chunk's
  copy before its next GET.
"""

from __future__ import annotations

import base64
import dataclasses
import errno
import threading
import time
import urllib.parse
from typing import Any, Callable, Sequence

import numpy as np

from .. import _core
from ..config import Settings
from . import http
from .stats import Result
from .urls import SCHEMES, display, request_url, scheme_of, split_s3

__all__ = ["RemoteReader", "fetch", "host_bytes"]


@dataclasses.dataclass(frozen=True)
class ObjectInfo:
    size: int
    etag: str  # as the server sent it, quotes included ('' if none)
    last_modified: str  # '' if none


class RemoteReader:
    """An object behind an ``s3://``, ``http://`` or ``https://`` URL.

    ``path`` is the display URL (no user information, no query string):
    what messages, reprs and ReadStats show. Opening sends one HEAD.

    Raises:
        FileNotFoundError, PermissionError, OSError: from the HEAD (see gdsio.io.http).
        ImportError: an s3:// URL without botocore (``pip install 'gdsio[s3]'``).
    """

    def __init__(self, url: str, settings: Settings) -> None:
        scheme = scheme_of(url)
        assert scheme is not None
        self.kind = SCHEMES[scheme]
        self.path = display(url)
        self._closed = False
        self.anonymous = False
        self._auth: dict[str, str] = {}
        self._sign: Callable[[str, str, dict[str, str]], dict[str, str]] | None = None
        if self.kind == "s3":
            from . import s3

            bucket, key = split_s3(url)
            if not key:
                raise IsADirectoryError(errno.EISDIR, "an s3:// URL of a bucket or prefix, not of an object", url)
            env = s3.environment()
            self.bucket, self.key = bucket, key
            self.url = s3.object_url(env, bucket, key)
            self._sign = env.sign
            self.anonymous = env.anonymous
        else:
            p = urllib.parse.urlsplit(url)
            if not p.hostname:
                raise ValueError(f"'{self.path}' names no host")
            if p.username is not None:  # user:password@host -> Basic authentication, never shown
                raw = f"{urllib.parse.unquote(p.username)}:{urllib.parse.unquote(p.password or '')}"
                self._auth = {"Authorization": "Basic " + base64.b64encode(raw.encode()).decode()}
            self.url = request_url(p)
        # Where this object's requests go: an http(s) object's redirects are followed and remembered here (for
        # this reader only); a signed request is bound to its host, so an s3:// object's are refused.
        self._where = http.Location(self.url, follow=self.kind != "s3")
        self.info = self._stat(settings)

    def __repr__(self) -> str:
        return f"RemoteReader('{self.path}', {self.info.size} bytes)"

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True

    def size(self) -> int:
        """The object's size as seen at open (its version is pinned then)."""
        if self._closed:
            raise ValueError(f"I/O on closed file '{self.path}'")
        return self.info.size

    def headers(self, method: str, extra: dict[str, str]) -> dict[str, str]:
        h = {"User-Agent": "gdsio", **self._auth, **extra}
        return self._sign(method, self.url, h) if self._sign is not None else h

    def _stat(self, s: Settings) -> ObjectInfo:
        policy = http.RetryPolicy(s.remote_retries, s.remote_timeout)
        counters = http.Counters()
        try:
            r = http.transfer(self._where, "HEAD", self.path, lambda _: self.headers("HEAD", {}), policy, counters,
                              anonymous=self.anonymous)
            length = r.headers.get("content-length")
            if length is None:
                raise OSError(errno.EIO, "the server's HEAD answer gives no Content-Length", self.path)
            return ObjectInfo(int(length), r.headers.get("etag", ""), r.headers.get("last-modified", ""))
        except (PermissionError, OSError) as e:
            # A presigned GET URL refuses HEAD (its signature is for GET): ask for one byte instead.
            if self.kind != "http" or getattr(e, "errno", None) not in (errno.EACCES, errno.EIO) \
                    or isinstance(e, (FileNotFoundError, TimeoutError)):
                raise
            asked = self._where.current  # where redirects led
            if isinstance(e, PermissionError) and "?" not in asked:
                raise
            return self._stat_by_get(policy, counters)

    def _stat_by_get(self, policy: http.RetryPolicy, counters: http.Counters) -> ObjectInfo:
        got: dict[str, Any] = {}

        def check(r: http.Response, done: int) -> None:
            cr = http.parse_content_range(r.headers.get("content-range"))
            if r.status != 206 or cr is None or cr[2] is None:
                raise OSError(errno.EIO, f"the server does not answer ranged GETs (HTTP {r.status} to Range: "
                              "bytes=0-0); gdsio reads remote objects by range", self.path)
            got.update(size=cr[2], etag=r.headers.get("etag", ""), lm=r.headers.get("last-modified", ""))

        http.transfer(self._where, "GET", self.path, lambda _: self.headers("GET", {"Range": "bytes=0-0"}), policy,
                      counters, into=memoryview(bytearray(1)), check=check, anonymous=self.anonymous)
        return ObjectInfo(got["size"], got["etag"], got["lm"])

    def read_range(self, into: memoryview | http.Streamed, offset: int, policy: http.RetryPolicy,
                   counters: http.Counters) -> None:
        """Fills `into` with the object's bytes at `offset` (one ranged GET, more after a dropped connection);
        an ``http.Streamed`` takes them piece by piece."""
        n = len(into)
        if n == 0:
            return
        info = self.info
        strong = info.etag and not info.etag.startswith("W/")
        whole = offset == 0 and n == info.size

        def hdrs(done: int) -> dict[str, str]:
            h = {"Range": f"bytes={offset + done}-{offset + n - 1}"}
            if strong:
                h["If-Match"] = info.etag
            elif info.last_modified:
                h["If-Unmodified-Since"] = info.last_modified
            return self.headers("GET", h)

        def check(r: http.Response, done: int) -> None:
            etag, lm = r.headers.get("etag", ""), r.headers.get("last-modified", "")
            if (info.etag and etag and etag.strip('"') != info.etag.strip('"')) or \
                    (not info.etag and info.last_modified and lm and lm != info.last_modified):
                raise OSError(errno.ESTALE, "the object changed while it was read (its ETag/Last-Modified differs "
                              "from the one seen at open); open it again", self.path)
            if r.status == 200:
                if whole and done == 0:
                    return  # the whole object asked for: a server may answer 200
                raise OSError(errno.EIO, "the server ignores Range requests (HTTP 200 to a ranged GET); "
                              "gdsio reads remote objects by range", self.path)
            cr = http.parse_content_range(r.headers.get("content-range"))
            if cr is None or cr[0] != offset + done or cr[1] != offset + n - 1:
                raise OSError(errno.EIO, f"asked for bytes {offset + done}-{offset + n - 1}, the server sent "
                              f"{r.headers.get('content-range', 'no Content-Range')}", self.path)
            if cr[2] is not None and cr[2] != info.size:
                raise OSError(errno.ESTALE, f"the object changed while it was read ({cr[2]} bytes now, {info.size} "
                              "at open); open it again", self.path)

        http.transfer(self._where, "GET", self.path, hdrs, policy, counters, into=into, check=check,
                      anonymous=self.anonymous)


def host_bytes(array: Any) -> memoryview:
    """A writable 1-D byte memoryview of a dense host array (a torch tensor or
    a numpy array, as Destination.array holds them)."""
    if isinstance(array, np.ndarray):
        return memoryview(array.reshape(-1).view(np.uint8))
    import torch

    return memoryview(array.reshape(-1).view(torch.uint8).numpy())


def _chunks(requests: Sequence[tuple[int, int, int]], chunk: int) -> list[tuple[int, int, int, int]]:
    """(request, dst_offset, size, file_offset) pieces of at most `chunk` bytes."""
    out = []
    for i, (dst_off, size, off) in enumerate(requests):
        pos = 0
        while pos < size:
            n = min(chunk, size - pos)
            out.append((i, dst_off + pos, n, off + pos))
            pos += n
    return out


RingFactory = Callable[[int], Any]  # slot_bytes -> a StagingRing


def fetch(reader: RemoteReader, dsts: Sequence[Any], requests: Sequence[tuple[int, int, int]], *, to_gpu: bool,
          device: int, stream: int, settings: Settings, ring: RingFactory | None = None) -> Result:
    """Runs (dst_offset, size, offset) requests of one remote object into
    `dsts` (dense arrays: one for every request, or one per request); returns
    a Result (the core's ReadResult fields, requests and retries). `ring` makes
    a worker's staging ring (default: the pinned backend's, for `device` and
    `stream`); GPU destinations only."""
    s = settings
    chunks = _chunks(requests, s.remote_chunk_bytes)

    def dst_of(i: int) -> Any:
        return dsts[0] if len(dsts) == 1 else dsts[i]

    policy = http.RetryPolicy(s.remote_retries, s.remote_timeout)
    counters = http.Counters()
    workers = max(1, min(s.remote_concurrency, len(chunks)))
    slot_bytes = max((n for _, _, n, _ in chunks), default=1)
    if to_gpu and ring is None:
        def ring(nbytes: int) -> Any:
            # The pool keeps every worker's slots cached for the next call (no cudaHostAlloc per read).
            return _core.StagingRing(s.staging_buffers, nbytes, device=device, stream=stream,
                                     reserve_bytes=workers * s.staging_buffers * nbytes)
    lock = threading.Lock()
    state = {"next": 0, "error": None}

    def claim() -> tuple[int, int, int, int] | None:
        with lock:
            if state["error"] is not None or state["next"] >= len(chunks):
                return None
            c = chunks[state["next"]]
            state["next"] += 1
            return c

    def work() -> None:
        try:
            if not to_gpu:
                views: dict[int, memoryview] = {}
                while (c := claim()) is not None:
                    i, dst_off, n, off = c
                    d = i if len(dsts) > 1 else 0
                    view = views.get(d)
                    if view is None:
                        view = views[d] = host_bytes(dst_of(i))
                    if dst_off + n > len(view):  # a slice would silently come out shorter
                        raise ValueError(f"dst: holds {len(view)} bytes; a request writes {n} at offset {dst_off}")
                    reader.read_range(view[dst_off : dst_off + n], off, policy, counters)
                return
            r = ring(slot_bytes)  # type: ignore[misc]
            try:
                slots: dict[int, memoryview] = {}
                while (c := claim()) is not None:
                    i, dst_off, n, off = c
                    k = r.next()  # waits only for this slot's copy of a round ago
                    slot = slots.get(k) or slots.setdefault(k, r.buffer(k))
                    reader.read_range(slot[:n], off, policy, counters)
                    r.copy(k, dst_of(i), dst_off, n)  # queued on the caller's stream; the next GET starts at once
                r.drain()
            finally:
                r.close()
        except BaseException as e:  # the first error wins; the other workers stop at their next chunk
            with lock:
                if state["error"] is None:
                    state["error"] = e

    t0 = time.perf_counter()
    if workers == 1:
        work()
    else:
        threads = [threading.Thread(target=work, name=f"gdsio-{reader.kind}-{i}", daemon=True) for i in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    seconds = time.perf_counter() - t0
    if state["error"] is not None:
        raise state["error"]
    reason = "unsigned requests: no AWS credentials were found" if reader.anonymous else ""
    return Result(reader.kind, sum(n for _, n, _ in requests), seconds, workers, len(chunks), direct_io=False,
                  reason=reason, requests=counters.requests, retries=counters.retries)
