"""A latency-injecting HTTP/1.1 proxy on 127.0.0.1, for benchmarks of remote
reads on a machine that has only loopback (bench/bench_shards.py).

Every request waits a fixed `delay` before it is forwarded to the upstream
server (the first-byte latency an object store adds), then request and
answer pass through byte for byte (headers included: the Host a client
signed stays as it was); an optional `bandwidth` (bytes/s) paces the answer
bodies of all connections together, as one link would. Each client
connection gets its own kept-alive upstream connection. It is HTTP-aware
only as far as framing needs: Content-Length and chunked bodies, HEAD and
1xx/204/304 answers without a body, a body read to EOF otherwise.

``GET /__latency_proxy__/stats`` is answered by the proxy itself (no delay,
not counted): JSON of the requests forwarded, bytes each way, connections.

Both ends are loopback only: listening anywhere else, or an upstream off
127.0.0.0/8, raises ValueError.

    python bench/latency_proxy.py --upstream http://127.0.0.1:5000 --delay 0.02 [--bandwidth 1G]

prints ``listening http://127.0.0.1:PORT`` and serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import sys
import threading
import time
import urllib.parse
from typing import Any, Awaitable, Callable

STATS_PATH = "/__latency_proxy__/stats"
# Bytes relayed per read and write. Each piece costs the proxy's event loop a
# few tens of microseconds, which on a small machine is CPU taken from the
# client under test: 1 MiB pieces keep that cost low when the link is not
# capped. With a bandwidth cap a piece is also one reservation of the link,
# so pieces stay small enough to pace smoothly.
_PIECE = 1 << 20
_PACED_PIECE = 64 << 10
_NO_BODY = {204, 304}


def _loopback(host: str, what: str) -> str:
    try:
        ok = ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{what} must be a loopback address (127.0.0.0/8); got {host!r}")
    return host


def _headers(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            fields[k.strip().lower()] = v.strip()
    return lines[0], fields


class LatencyProxy:
    """The proxy, serving from a thread of its own (an asyncio loop).

    Args:
        upstream: the server's base URL, ``http://127.0.0.1:PORT``.
        delay: seconds each request waits before it is forwarded.
        bandwidth: bytes/s for the answer bodies of all connections together
            (None: no cap).
        host: the address to listen on (loopback only); port 0 picks a free one.
        sleep: the coroutine that waits (tests give one that records its calls).

    Raises:
        ValueError: a host or upstream off loopback, a negative delay, a
            bandwidth that is not positive, an upstream that is not http://.
    """

    def __init__(self, upstream: str, delay: float = 0.02, bandwidth: float | None = None, host: str = "127.0.0.1",
                 port: int = 0, sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> None:
        u = urllib.parse.urlsplit(upstream)
        if u.scheme != "http" or not u.hostname or not u.port:
            raise ValueError(f"upstream must be http://HOST:PORT; got {upstream!r}")
        self.upstream = (_loopback(u.hostname, "upstream"), u.port)
        self.host = _loopback(host, "host")
        if delay < 0:
            raise ValueError(f"delay must be >= 0; got {delay!r}")
        if bandwidth is not None and bandwidth <= 0:
            raise ValueError(f"bandwidth must be positive; got {bandwidth!r}")
        self.delay, self.bandwidth, self._sleep = float(delay), bandwidth, sleep
        self.requests = 0  # forwarded, each after the delay
        self.bytes_up = 0  # request bytes forwarded (heads and bodies)
        self.bytes_down = 0  # answer bytes relayed back
        self.connections = 0
        self.methods: dict[str, int] = {}
        self._link_free = 0.0  # loop time at which the capped link is next free
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(port,), name="latency-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the latency proxy did not start within 10 s")
        if self._error is not None:
            raise self._error
        self.port = self._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base = f"http://{self.host}:{self.port}"

    # ---- life ---------------------------------------------------------------

    def _run(self, port: int) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, self.host, port))
        except BaseException as e:  # noqa: BLE001 - handed to the constructor
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    def listening(self) -> list[tuple[str, int]]:
        """(address, port) of every listening socket of the proxy."""
        return [s.getsockname()[:2] for s in self._server.sockets]  # type: ignore[union-attr]

    def stats(self) -> dict[str, Any]:
        return {"requests": self.requests, "bytes_up": self.bytes_up, "bytes_down": self.bytes_down,
                "connections": self.connections, "methods": dict(self.methods), "delay_s": self.delay,
                "bandwidth": self.bandwidth, "listening": [list(a) for a in self.listening()]}

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()  # type: ignore[union-attr]
            await self._server.wait_closed()  # type: ignore[union-attr]
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> "LatencyProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- relaying -----------------------------------------------------------

    async def _pace(self, n: int) -> None:
        if self.bandwidth is None:
            return
        now = self._loop.time()
        start = max(now, self._link_free)
        self._link_free = start + n / self.bandwidth
        if self._link_free > now:
            await asyncio.sleep(self._link_free - now)

    async def _relay_body(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, fields: dict[str, str],
                          down: bool, to_eof: bool) -> None:
        """Copies one message body from src to dst as it is framed (answers paced when down)."""

        piece = _PIECE if self.bandwidth is None else _PACED_PIECE

        async def put(data: bytes) -> None:
            if down:
                await self._pace(len(data))
                self.bytes_down += len(data)
            else:
                self.bytes_up += len(data)
            dst.write(data)
            await dst.drain()

        if "chunked" in fields.get("transfer-encoding", "").lower():
            while True:
                line = await src.readuntil(b"\r\n")
                size = int(line.split(b";", 1)[0].strip(), 16)
                await put(line)
                if size == 0:  # trailers up to the empty line
                    while True:
                        t = await src.readuntil(b"\r\n")
                        await put(t)
                        if t == b"\r\n":
                            return
                left = size + 2  # the chunk and its CRLF
                while left:
                    data = await src.readexactly(min(left, piece))
                    left -= len(data)
                    await put(data)
        elif "content-length" in fields:
            left = int(fields["content-length"])
            while left:
                data = await src.readexactly(min(left, piece))
                left -= len(data)
                await put(data)
        elif to_eof:
            while data := await src.read(piece):
                await put(data)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                line, fields = _headers(head)
                method, target = line.split(" ", 2)[:2]
                if method == "GET" and target == STATS_PATH:
                    body = json.dumps(self.stats()).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
                    await writer.drain()
                    continue
                self.requests += 1
                self.methods[method] = self.methods.get(method, 0) + 1
                await self._sleep(self.delay)
                if up is None:
                    up = await asyncio.open_connection(*self.upstream)
                up_r, up_w = up
                up_w.write(head)
                self.bytes_up += len(head)
                await self._relay_body(reader, up_w, fields, down=False, to_eof=False)
                while True:  # 1xx answers come before the final one
                    ahead = await up_r.readuntil(b"\r\n\r\n")
                    status_line, afields = _headers(ahead)
                    status = int(status_line.split(" ", 2)[1])
                    self.bytes_down += len(ahead)
                    writer.write(ahead)
                    await writer.drain()
                    if status >= 200:
                        break
                closing = "close" in (fields.get("connection", "") + afields.get("connection", "")).lower()
                framed = "content-length" in afields or "chunked" in afields.get("transfer-encoding", "").lower()
                if method != "HEAD" and status not in _NO_BODY:
                    await self._relay_body(up_r, writer, afields, down=True, to_eof=not framed)
                    closing = closing or not framed
                if closing:
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, ValueError):
            return
        finally:
            for w in ([writer] + ([up[1]] if up else [])):
                w.close()
                try:
                    await w.wait_closed()
                except (ConnectionError, OSError, asyncio.CancelledError):
                    pass


def parse_rate(text: str) -> float:
    """'1G', '500M', '100k' or a number: bytes/s."""
    mult = {"k": 1e3, "m": 1e6, "g": 1e9}
    t = text.strip().lower().rstrip("b")
    return float(t[:-1]) * mult[t[-1]] if t and t[-1] in mult else float(t)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--upstream", required=True, help="http://127.0.0.1:PORT of the server behind the proxy")
    p.add_argument("--delay", type=float, default=0.02, help="seconds added to each request (default 0.02)")
    p.add_argument("--bandwidth", default=None, help="bytes/s cap on the answers (e.g. 1G); default none")
    p.add_argument("--port", type=int, default=0, help="port to listen on, 127.0.0.1 (default: a free one)")
    a = p.parse_args(argv)
    proxy = LatencyProxy(a.upstream, a.delay, parse_rate(a.bandwidth) if a.bandwidth else None, port=a.port)
    print(f"listening {proxy.base}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        proxy.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
