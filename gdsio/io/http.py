"""HTTP/1.1 for remote objects: kept-alive connections, ranged GETs read
straight into the caller's memory, bounded retries, errors as OSErrors.

The standard library's ``http.client`` is the client: ``HTTPResponse.readinto``
receives the body from the socket into the destination (the caller's host
buffer, or a pinned staging slot) with no copy in between, which no
third-party client measured here offers (urllib3 and obstore hand back
bytes objects of their own; see bench/bench_remote.py). The S3 reader adds
signing (gdsio.io.s3); this module knows nothing of S3 but its error bodies.

Errors name the object by its display URL (no user information, no query
string, never a header): 404/410 -> FileNotFoundError, 401/403 ->
PermissionError, 412 or a changed ETag/Last-Modified -> OSError (the object
changed), 5xx, 429, a dropped connection or a timeout -> retried with
backoff, then OSError (TimeoutError for timeouts).
"""

from __future__ import annotations

import dataclasses
import errno
import http.client
import os
import random
import re
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Callable

__all__ = ["Counters", "Origin", "Response", "RetryPolicy", "error_for_status", "pool_for", "transfer"]

_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_DROPPED = (ConnectionError, http.client.HTTPException, socket.timeout, TimeoutError, ssl.SSLError, EOFError)


@dataclasses.dataclass
class Counters:
    """What one read sent: requests, retries, bytes received (thread-safe adds)."""

    requests: int = 0
    retries: int = 0
    bytes: int = 0
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def add(self, requests: int = 0, retries: int = 0, nbytes: int = 0) -> None:
        with self.lock:
            self.requests += requests
            self.retries += retries
            self.bytes += nbytes


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    retries: int  # tries after the first
    timeout: float  # seconds, per connect and per socket read


@dataclasses.dataclass(frozen=True)
class Origin:
    scheme: str  # http or https
    host: str
    port: int


@dataclasses.dataclass
class Response:
    """Status and the headers gdsio looks at (lower-case names); the body,
    when read by `transfer`, went to the caller's buffer."""

    status: int
    headers: dict[str, str]


class _Retry(Exception):
    """A status worth another try (5xx, 429)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}{detail}")
        self.status = status


class _Connection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        # A request goes out as one write, but Nagle would hold a second one (a retry's) behind an unACKed first.
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _TLSConnection(http.client.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Pool:
    """Idle kept-alive connections to one origin, at most `keep` of them."""

    def __init__(self, origin: Origin, keep: int = 64) -> None:
        self.origin = origin
        self.keep = keep
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._ssl: ssl.SSLContext | None = None

    def get(self, timeout: float) -> http.client.HTTPConnection:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is not None:
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            return conn
        o = self.origin
        if o.scheme == "https":
            if self._ssl is None:
                # AWS_CA_BUNDLE as the AWS SDKs; else the system's store (SSL_CERT_FILE honoured by ssl).
                self._ssl = ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE") or None)
            return _TLSConnection(o.host, o.port, timeout=timeout, context=self._ssl)
        return _Connection(o.host, o.port, timeout=timeout)

    def put(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self.keep:
                self._idle.append(conn)
                return
        conn.close()

    def clear(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()


_pools: dict[Origin, Pool] = {}
_pools_lock = threading.Lock()


def pool_for(url: str) -> tuple[Pool, str]:
    """(the connection pool of `url`'s origin, the request target: path and query)."""
    p = urllib.parse.urlsplit(url)
    scheme = p.scheme.lower()
    origin = Origin(scheme, p.hostname or "", p.port or (443 if scheme == "https" else 80))
    with _pools_lock:
        pool = _pools.get(origin)
        if pool is None:
            pool = _pools[origin] = Pool(origin)
    target = (p.path or "/") + (f"?{p.query}" if p.query else "")
    return pool, target


def _s3_code(body: bytes) -> str:
    """The <Code> of an S3 error body ('' if none)."""
    m = re.search(rb"<Code>([^<]{1,64})</Code>", body)
    return f" ({m.group(1).decode('ascii', 'replace')})" if m else ""


def error_for_status(status: int, name: str, body: bytes = b"", anonymous: bool = False) -> OSError:
    """The OSError of a final (non-retried) HTTP status for the object `name`."""
    code = _s3_code(body)
    if status in (404, 410):
        return FileNotFoundError(errno.ENOENT, f"no such object: HTTP {status}{code}", name)
    if status in (401, 403):
        hint = "; no AWS credentials were found, so the request was unsigned" if anonymous else ""
        return PermissionError(errno.EACCES, f"access denied: HTTP {status}{code}{hint}", name)
    if status == 412:
        return OSError(errno.ESTALE, f"the object changed while it was read (HTTP 412{code}: its ETag no "
                       "longer matches the one seen at open); open it again", name)
    if status == 416:
        return OSError(errno.EIO, f"the object is shorter than when it was opened (HTTP 416{code})", name)
    return OSError(errno.EIO, f"HTTP {status}{code}", name)


def _backoff(attempt: int) -> float:
    # Exponential with jitter (as the AWS SDKs' standard mode), capped at 2 s.
    return min(2.0, 0.05 * (2 ** attempt)) * (0.5 + random.random() / 2)


def transfer(
    url: str,
    method: str,
    name: str,
    headers: Callable[[int], dict[str, str]],
    policy: RetryPolicy,
    counters: Counters,
    *,
    into: memoryview | None = None,
    check: Callable[[Response, int], None] | None = None,
    anonymous: bool = False,
) -> Response:
    """One request with retries. With `into` (a GET of a range), the body is
    read into `into`; after a dropped connection the next try asks for the
    rest only (``headers(done)`` gives each try's headers, `done` being the
    bytes already there). `check(response, done)` may raise (wrong range,
    changed object) before the body is read.

    Returns:
        Response: the final response (its body read into `into`, or drained).

    Raises:
        OSError: see the module docstring; TimeoutError after timeouts.
    """
    pool, target = pool_for(url)
    want = len(into) if into is not None else 0
    done = 0
    attempt = 0
    while True:
        conn = pool.get(policy.timeout)
        resp = None
        reusable = False
        try:
            counters.add(requests=1)
            conn.request(method, target, headers=headers(done))
            resp = conn.getresponse()
            info = Response(resp.status, {k.lower(): v for k, v in resp.getheaders()})
            if resp.status in _RETRY_STATUS:
                raise _Retry(resp.status, _s3_code(resp.read(65536)))
            if resp.status >= 400 or (into is not None and resp.status not in (200, 206)):
                body = resp.read(65536) if method != "HEAD" else b""
                raise error_for_status(resp.status, name, body, anonymous)
            if check is not None:
                check(info, done)
            if into is None:
                resp.read()  # HEAD: empty; a probe GET of one byte
            else:
                while done < want:
                    n = resp.readinto(into[done:])
                    if n == 0:
                        raise http.client.IncompleteRead(b"", want - done)
                    done += n
                    counters.add(nbytes=n)
                if resp.length:  # more than asked: the range was not honoured; never reuse this connection
                    raise OSError(errno.EIO, f"the server sent more than the {want} bytes asked for", name)
            reusable = not resp.will_close
            return info
        except _DROPPED + (_Retry,) as e:
            attempt += 1
            if attempt > policy.retries:
                what = f"{e.__class__.__name__}: {e}" if str(e) else e.__class__.__name__
                tries = f"{attempt} {'try' if attempt == 1 else 'tries'}"
                if isinstance(e, (socket.timeout, TimeoutError)):
                    raise TimeoutError(errno.ETIMEDOUT, f"timed out ({policy.timeout:g} s a socket operation, "
                                       f"{tries})", name) from None
                raise OSError(errno.EIO, f"{method} failed after {tries}: {what}", name) from None
            counters.add(retries=1)
            conn.close()
            time.sleep(_backoff(attempt))
        finally:
            if reusable:
                pool.put(conn)
            else:
                # A response the server will close holds the socket itself (the connection let go of it):
                # close both, or the socket waits for the garbage collector.
                if resp is not None:
                    resp.close()
                conn.close()


def drop_pools() -> None:
    """Closes every idle connection (tests; after a fork)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for p in pools:
        p.clear()


def _after_fork_in_child() -> None:
    # A forked child (a DataLoader worker, say) shares its parent's kept-alive sockets: two processes on
    # one connection would read each other's answers. The child starts with no pool (closing its copies
    # of the fds leaves the parent's connections open) and with fresh locks (another thread may have
    # held one at the fork).
    global _pools_lock
    _pools_lock = threading.Lock()
    pools = list(_pools.values())
    _pools.clear()
    for p in pools:
        p._lock = threading.Lock()
        p.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def parse_content_range(value: str | None) -> tuple[int, int, int | None] | None:
    """'bytes 0-99/1000' -> (0, 99, 1000); 'bytes */1000' -> (-1, -1, 1000); None if absent or malformed."""
    if not value:
        return None
    m = re.fullmatch(r"\s*bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)\s*", value)
    if not m:
        return None
    total = None if m.group(3) == "*" else int(m.group(3))
    if m.group(1) is None:
        return -1, -1, total
    return int(m.group(1)), int(m.group(2)), total

