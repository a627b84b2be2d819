"""HTTP/1.1 for remote objects: kept-alive connections, ranged GETs read
straight into the caller's memory, bounded retries, errors as OSErrors.

The standard library's ``http.client`` is the client: ``HTTPResponse.readinto``
receives the body from the socket into the destination (the caller's host
buffer, or a pinned staging slot) with no copy in between, which no
third-party client measured here offers (urllib3 and obstore hand back
bytes objects of their own; see bench/bench_remote.py). The S3 reader adds
signing (gdsio.io.s3); this module knows nothing of S3 but its error bodies
and its bucket-region header.

Errors name the object by its display URL (no user information, no query
string, never a header): 404/410 -> FileNotFoundError, 401/403 ->
PermissionError, 412 or a changed ETag/Last-Modified -> OSError (the object
changed), 5xx, 429, a dropped connection, a body cut short or a timeout ->
retried with backoff (or after the wait a ``Retry-After`` asks for, while
the waits stay within ``remote_timeout``), then OSError (TimeoutError for
timeouts). Every request asks ``Accept-Encoding: identity``; a body
compressed regardless -> OSError.

Redirects (301, 302, 303, 307, 308) of an http(s) object are followed, up to
`MAX_REDIRECTS` hops per request, a relative Location resolved against the
URL that answered; the object's `Location` remembers where they led, so its
later requests go there at once (and follow them afresh, once, when that
place stops answering: a presigned URL expires). https to http is refused
(the bytes would travel in the clear), as is any scheme but http(s); http to
https is followed (the bytes only gain encryption). Basic credentials go to
their own origin only. A signed (S3) request is bound to its host: its
redirects are refused, with the bucket's region when the store names it.
"""

from __future__ import annotations

import dataclasses
import datetime
import email.utils
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

from .urls import display, request_url

__all__ = ["Counters", "Location", "MAX_REDIRECTS", "Origin", "Response", "RetryPolicy", "Streamed",
           "error_for_status", "pool_for", "transfer"]

_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})
#: Redirects one request follows at most; one more is an OSError (a loop, most likely).
MAX_REDIRECTS = 10
# The waits between tries and the clock that dates a Retry-After: module names, so tests record the waits
# instead of sleeping (and never measure time).
_sleep = time.sleep
_wall_clock = time.time
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


@dataclasses.dataclass
class Streamed:
    """A body taken piece by piece instead of into one buffer (a streamed GET
    of a whole shard, say): `length` bytes in all, each piece received into
    `scratch` and handed to `sink` before the next one is received. After a
    dropped connection the next try asks for the rest only, as for a buffer;
    an exception from `sink` ends the request (its connection is closed)."""

    length: int
    scratch: memoryview
    sink: Callable[[memoryview], None]

    def __len__(self) -> int:
        return self.length


class Location:
    """Where one object's requests go: `url`, the URL it was opened by, and
    `current`, where its redirects last led (its later requests go there at
    once). One per open object, never shared: a redirect is remembered for
    that object only. Redirects are refused when `follow` is False."""

    def __init__(self, url: str, follow: bool = True) -> None:
        self.url = url
        self.current = url
        self.follow = follow
        # Whether `current` may get the Basic credentials given for `url` (decided once a hop).
        self.send_auth = True

    def go(self, url: str) -> None:
        """Where the next requests go (a redirect's target, or `url` again)."""
        self.current = url
        self.send_auth = url == self.url or _same_credentials(self.url, url)


class _Retry(Exception):
    """A status worth another try (5xx, 429), with the wait its Retry-After asks for (None: none)."""

    def __init__(self, status: int, detail: str, after: float | None = None) -> None:
        super().__init__(f"HTTP {status}{detail}")
        self.status = status
        self.after = after


class _Truncated(Exception):
    """A body cut short (the connection closed before its Content-Length): retried as a dropped connection."""


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


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP-date (RFC 9110 10.2.3); None if
    absent or malformed (then the backoff applies)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # '-0000': UTC, as every HTTP-date is
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, when.timestamp() - _wall_clock())


def _same_credentials(origin_url: str, url: str) -> bool:
    """Whether a request to `url` may carry the Basic credentials given for `origin_url`: the same origin,
    or the same host upgraded from http on port 80 to https on 443 (as requests does: nothing sent over
    TLS that was not already sent in the clear)."""
    a, b = urllib.parse.urlsplit(origin_url), urllib.parse.urlsplit(url)
    if a.hostname != b.hostname:
        return False
    pa, pb = a.port or (443 if a.scheme == "https" else 80), b.port or (443 if b.scheme == "https" else 80)
    return (a.scheme, pa) == (b.scheme, pb) or ((a.scheme, pa, b.scheme, pb) == ("http", 80, "https", 443))


def _redirect_target(url: str, location: str | None, status: int, name: str) -> str:
    """The URL a redirect from `url` leads to (a relative Location resolved against `url`), or the
    OSError that refuses it."""
    if not location:
        raise OSError(errno.EPROTO, f"HTTP {status}: a redirect without a Location", name)
    new = urllib.parse.urljoin(url, location.strip())
    p = urllib.parse.urlsplit(new)
    scheme, old = p.scheme.lower(), urllib.parse.urlsplit(url).scheme.lower()
    try:
        p.port  # noqa: B018 (a port out of range raises here, not in the next request)
    except ValueError:
        raise OSError(errno.EPROTO, f"HTTP {status}: redirected to a URL whose port is out of range: refused",
                      name) from None
    if scheme not in ("http", "https") or not p.hostname:
        raise OSError(errno.EPROTO, f"HTTP {status}: redirected to {display(new)}, not an http(s) URL: refused",
                      name)
    if old == "https" and scheme == "http":
        raise OSError(errno.EPROTO, f"HTTP {status}: redirected from https to http ({display(new)}): refused, the "
                      "bytes would travel unencrypted; give the http URL itself if that is meant", name)
    # http to https is followed (as browsers and curl -L do): the bytes only gain encryption, and nothing goes
    # over TLS that was not already sent in the clear (Basic credentials stay with their host: _same_credentials).
    # User information in a Location is never used, nor shown.
    return request_url(p._replace(scheme=scheme))


def _redirect_refused(status: int, headers: dict[str, str], body: bytes, name: str) -> OSError:
    """The OSError of a redirect that is not followed: a signed request's (its signature is bound to its host)."""
    code = _s3_code(body)
    region = headers.get("x-amz-bucket-region", "").strip()
    if region:
        why = (f"the bucket is in region {region}, not the one its requests are signed for: set "
               f"AWS_REGION={region}")
    else:
        where = headers.get("location")
        why = ((f"redirected to {display(where)}; " if where else "") + "the bucket may be in another region "
               "than AWS_REGION, or AWS_ENDPOINT_URL may name the wrong endpoint")
    return OSError(errno.EIO, f"HTTP {status}{code}: {why} (a signed request is bound to its host, so its "
                   "redirects are not followed)", name)


def _backoff(attempt: int) -> float:
    # Exponential with jitter (as the AWS SDKs' standard mode), capped at 2 s.
    return min(2.0, 0.05 * (2 ** attempt)) * (0.5 + random.random() / 2)


def transfer(
    where: Location,
    method: str,
    name: str,
    headers: Callable[[int], dict[str, str]],
    policy: RetryPolicy,
    counters: Counters,
    *,
    into: memoryview | Streamed | None = None,
    check: Callable[[Response, int], None] | None = None,
    anonymous: bool = False,
) -> Response:
    """One request with retries. With `into` (a GET of a range), the body is
    read into `into` (a ``Streamed``: handed to its sink piece by piece);
    after a dropped connection the next try asks for the rest only
    (``headers(done)`` gives each try's headers, `done` being the bytes
    already there). `check(response, done)` may raise (wrong range,
    changed object) before the body is read. `where` follows redirects and
    remembers where they led, or refuses them (``follow=False``: signed requests).

    Returns:
        Response: the final response (its body read into `into`, or drained).

    Raises:
        OSError: see the module docstring; TimeoutError after timeouts.
    """
    here = where.current
    want = len(into) if into is not None else 0
    done = 0
    attempt = 0
    hops = 0
    restarted = False
    waited = 0.0  # seconds slept between tries: Retry-After is honoured while this stays within policy.timeout
    while True:
        pool, target = pool_for(here)
        conn = pool.get(policy.timeout)
        resp = None
        reusable = False
        try:
            counters.add(requests=1)
            h = headers(done)
            if not where.send_auth:
                h = {k: v for k, v in h.items() if k.lower() != "authorization"}
            # Ranges are of the stored bytes: a compressed body is not them (http.client asks the same by default).
            conn.request(method, target, headers={**h, "Accept-Encoding": "identity"})
            resp = conn.getresponse()
            info = Response(resp.status, {k.lower(): v for k, v in resp.getheaders()})
            if resp.status in _RETRY_STATUS:
                raise _Retry(resp.status, _s3_code(resp.read(65536)), _retry_after(info.headers.get("retry-after")))
            if resp.status in _REDIRECT_STATUS:
                body = resp.read(65536) if method != "HEAD" else resp.read()
                reusable = not resp.will_close and resp.isclosed()
                if not where.follow:
                    raise _redirect_refused(resp.status, info.headers, body, name)
                nxt = _redirect_target(here, info.headers.get("location"), resp.status, name)
                hops += 1
                if hops > MAX_REDIRECTS:
                    raise OSError(errno.ELOOP, f"more than {MAX_REDIRECTS} redirects (the last to {display(nxt)}): "
                                  "a redirect loop?", name)
                where.go(nxt)  # remembered for this object's next requests
                here = nxt
                continue
            if resp.status >= 300 or (into is not None and resp.status not in (200, 206)):
                body = resp.read(65536) if method != "HEAD" else b""
                if resp.status >= 400 and here != where.url and not hops and not restarted:
                    # Where an earlier redirect led may have expired (a presigned URL): follow them once more.
                    restarted = True
                    where.go(where.url)
                    here = where.url
                    continue
                raise error_for_status(resp.status, name, body, anonymous)
            if into is not None:
                enc = info.headers.get("content-encoding", "").strip().lower()
                # An object stored encoded (S3's Content-Encoding metadata) comes as its stored bytes, exactly the
                # length asked; a body compressed on the fly does not: that one is refused.
                if enc not in ("", "identity") and resp.length != want - done:
                    got = f"{resp.length} bytes" if resp.length is not None else "a body of unannounced length"
                    raise OSError(errno.EIO, f"the server answered with Content-Encoding: {enc} although "
                                  f"Accept-Encoding: identity was asked ({got} for the {want - done} asked for); "
                                  "ranges are of the stored bytes: serve these objects uncompressed", name)
            if check is not None:
                check(info, done)
            if into is None:
                resp.read()  # HEAD: empty
            else:
                if resp.length is not None and resp.length != want - done:
                    raise OSError(errno.EIO, f"the server announced {resp.length} bytes (Content-Length) for the "
                                  f"{want - done} asked for", name)
                announced, got_now = want - done, 0
                while done < want:
                    view = into.scratch[: want - done] if isinstance(into, Streamed) else into[done:]
                    n = resp.readinto(view)
                    if n == 0:
                        raise _Truncated(f"truncated body: {got_now} of {announced} bytes received (the connection "
                                         "closed before the Content-Length the server announced)")
                    if isinstance(into, Streamed):
                        into.sink(view[:n])
                    done += n
                    got_now += n
                    counters.add(nbytes=n)
                # A chunked body's end shows only when read; more than asked: never reuse this connection.
                if resp.length is None and resp.read(1):
                    raise OSError(errno.EIO, f"the server sent more than the {want} bytes asked for", name)
            reusable = not resp.will_close
            return info
        except _DROPPED + (_Retry, _Truncated) as e:
            reusable = False
            attempt += 1
            if attempt > policy.retries:
                own = isinstance(e, (_Retry, _Truncated))
                what = str(e) if own else f"{e.__class__.__name__}: {e}" if str(e) else e.__class__.__name__
                tries = f"{attempt} {'try' if attempt == 1 else 'tries'}"
                if isinstance(e, (socket.timeout, TimeoutError)):
                    raise TimeoutError(errno.ETIMEDOUT, f"timed out ({policy.timeout:g} s a socket operation, "
                                       f"{tries})", name) from None
                raise OSError(errno.EIO, f"{method} failed after {tries}: {what}", name) from None
            delay = _backoff(attempt)
            if isinstance(e, _Retry) and e.after is not None:
                left = policy.timeout - waited
                if e.after > left:  # fail now rather than sleep past the budget
                    spent = f", {waited:g} s of it spent waiting already" if waited else ""
                    raise OSError(errno.EIO, f"{e}: the server asked to retry after {e.after:g} s (Retry-After), "
                                  f"longer than remote_timeout ({policy.timeout:g} s{spent}) allows; try again "
                                  "later, or raise remote_timeout", name) from None
                delay = min(max(e.after, delay), left)
            counters.add(retries=1)
            conn.close()
            waited += delay
            _sleep(delay)
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

