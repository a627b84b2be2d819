"""Servers for the remote-object tests, all on 127.0.0.1: a ranged HTTP(S)
server with faults on demand (drops, 503s with Retry-After, delays, an object
rewritten mid-read, a server that ignores Range, gzips regardless or cuts its
bodies short, redirects), nginx, and moto's S3; and a guard that fails a test
whose code connects anywhere but loopback."""

from __future__ import annotations

import datetime
import email.utils
import gzip
import hashlib
import http.server
import ipaddress
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"


class LoopbackGuard:
    """Patches socket.socket.connect: a connection to anything but 127.0.0.0/8
    (or a Unix socket) is refused and recorded; `violations` lists them."""

    def __init__(self) -> None:
        self.violations: list[Any] = []
        self._orig = socket.socket.connect
        self._orig_ex = socket.socket.connect_ex

    def _ok(self, address: Any) -> bool:
        if isinstance(address, (str, bytes)):  # AF_UNIX
            return True
        host = address[0]
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return host == "localhost"

    def __enter__(self) -> "LoopbackGuard":
        guard = self

        def connect(sock: socket.socket, address: Any) -> Any:
            if not guard._ok(address):
                guard.violations.append(address)
                raise ConnectionRefusedError(f"test guard: connection to {address!r} refused (loopback only)")
            return guard._orig(sock, address)

        def connect_ex(sock: socket.socket, address: Any) -> Any:
            if not guard._ok(address):
                guard.violations.append(address)
                return 111
            return guard._orig_ex(sock, address)

        socket.socket.connect = connect  # type: ignore[method-assign]
        socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        socket.socket.connect = self._orig  # type: ignore[method-assign]
        socket.socket.connect_ex = self._orig_ex  # type: ignore[method-assign]


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _range_length(header: str) -> int | None:
    """The bytes a ``Range: bytes=a-b`` header asks for (None for another or no Range)."""
    lo, _, hi = header[6:].partition("-") if header.startswith("bytes=") else ("", "", "")
    return int(hi) - int(lo) + 1 if lo and hi else None


class Faults:
    """What the ranged server does wrong, counted down per GET."""

    def __init__(self) -> None:
        self.status_503 = 0  # answer the next N GETs with 503
        self.drop = 0  # the next N GET bodies: send half, then close the connection
        self.stall = 0.0  # seconds to sleep before each answer
        self.mutate_after = -1  # after this many GETs, rewrite every object (new bytes, new ETag)
        self.ignore_range = False  # answer 200 with the whole object
        self.no_head = False  # answer HEAD with 405 (as a presigned GET URL's server would refuse it)
        self.no_head_status = 405  # that answer's status (S3 answers 403 to a HEAD of a presigned GET URL)
        self.fail_status = 503  # the status of the status_503 answers (429 too)
        self.retry_after: str | None = None  # the Retry-After header of those answers
        self.gzip = False  # gzip every GET body (Content-Encoding: gzip) whatever Accept-Encoding asked
        self.truncate = 0  # the next N GET answers: the whole Content-Length, truncate_by bytes fewer, close
        self.truncate_by = 0
        # Hold the first `gather` GETs until that many GETs are in flight together, each at most gather_timeout s;
        # a GET that times out ends the gathering and counts in gather_missed. HEADs are never held.
        self.gather = 0
        self.gather_timeout = 30.0
        self.gather_missed = 0
        # Hold each ranged GET for whose length `hold_if` is true until `release` is set, at most hold_timeout s
        # (a GET that times out counts in hold_missed); `held`: the GETs held now.
        self.hold_if: Any = None
        self.release = threading.Event()
        self.hold_timeout = 30.0
        self.hold_missed = 0
        self.held = 0
        self.fail_if: Any = None  # answer fail_status to each ranged GET for whose length this is true
        self.lock = threading.Lock()


class RangeServer:
    """A threaded HTTP/1.1 server of in-memory objects with Range, ETag,
    Last-Modified, If-Match and keep-alive; `faults` injects failures, `gets`
    counts GETs, `ranges` records the Range headers seen."""

    def __init__(self, tls: tuple[str, str] | None = None) -> None:
        self.objects: dict[str, bytes] = {}
        self.faults = Faults()
        self.gets = 0
        self.heads = 0
        self.ranges: list[str] = []
        self.headers_seen: list[dict[str, str]] = []
        self.paths: list[str] = []  # the request target of every HEAD and GET, in order
        self.requests: list[tuple[str, str, str]] = []  # (method, target, Range header) of every HEAD and GET
        self.redirects: dict[str, tuple[int, str, tuple[str, ...], dict[str, str]]] = {}  # see redirect()
        self.version = 1
        self.in_flight = 0  # requests being answered now
        self.gets_in_flight = 0
        self.peak = 0  # the most requests in flight at once
        self.flight = threading.Condition()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in two writes: without this, Nagle and the client's delayed ACK
                # hold the body back 40 ms per answer.
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _meta(self, data: bytes) -> tuple[str, str]:
                etag = '"' + hashlib.md5(data).hexdigest() + f'-{server.version}"'
                return etag, email.utils.formatdate(1_700_000_000 + server.version, usegmt=True)

            def _redirected(self) -> bool:
                server.paths.append(self.path)
                server.requests.append((self.command, self.path, self.headers.get("Range", "")))
                r = server.redirects.get(self.path.split("?")[0])
                if r is None or self.command not in r[2]:
                    return False
                self.send_response(r[0])
                self.send_header("Location", r[1])
                for k, v in r[3].items():
                    self.send_header(k, v)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return True

            def do_HEAD(self) -> None:
                server.heads += 1
                if not self._redirected():
                    self._answer(head=True)

            def do_GET(self) -> None:
                if self._redirected():
                    server.headers_seen.append(dict(self.headers.items()))
                    return
                f = server.faults
                with f.lock:
                    server.gets += 1
                    n = server.gets
                    if f.mutate_after >= 0 and n > f.mutate_after:
                        f.mutate_after = -1
                        server.version += 1
                        server.objects = {k: bytes(255 - b for b in v[:1]) + v[1:] for k, v in server.objects.items()}
                    fail = f.status_503 > 0
                    if fail:
                        f.status_503 -= 1
                    fail = fail or (f.fail_if is not None and f.fail_if(_range_length(self.headers.get("Range", ""))))
                    drop = not fail and f.drop > 0
                    if drop:
                        f.drop -= 1
                    cut = f.truncate_by if not fail and not drop and f.truncate > 0 else 0
                    if cut:
                        f.truncate -= 1
                server.ranges.append(self.headers.get("Range", ""))
                server.headers_seen.append(dict(self.headers.items()))
                if fail:
                    body = b"<Error><Code>SlowDown</Code></Error>"
                    self.send_response(f.fail_status)
                    if f.retry_after is not None:
                        self.send_header("Retry-After", f.retry_after)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self._answer(head=False, drop=drop, cut=cut)

            def _answer(self, head: bool, drop: bool = False, cut: int = 0) -> None:
                f = server.faults
                with server.flight:
                    server.in_flight += 1
                    server.gets_in_flight += not head
                    server.peak = max(server.peak, server.in_flight)
                    server.flight.notify_all()
                    if f.gather and not head:
                        if server.flight.wait_for(lambda: not f.gather or server.gets_in_flight >= f.gather,
                                                  f.gather_timeout):
                            f.gather = 0  # gathered: the rest go straight through
                        elif f.gather:
                            f.gather, f.gather_missed = 0, f.gather_missed + 1
                        server.flight.notify_all()
                if f.hold_if is not None and not head:
                    n = _range_length(self.headers.get("Range", ""))
                    if n is not None and f.hold_if(n):
                        with f.lock:
                            f.held += 1
                        released = f.release.wait(f.hold_timeout)
                        with f.lock:
                            f.held -= 1
                            f.hold_missed += not released
                try:
                    self._answer_now(head, drop, cut)
                finally:
                    with server.flight:
                        server.in_flight -= 1
                        server.gets_in_flight -= not head

            def _answer_now(self, head: bool, drop: bool, cut: int) -> None:
                f = server.faults
                if f.stall:
                    time.sleep(f.stall)
                if head and f.no_head:
                    self.send_response(f.no_head_status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = server.objects.get(self.path.split("?")[0])
                if data is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path.startswith("/private/"):
                    self.send_response(403)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                etag, lm = self._meta(data)
                im = self.headers.get("If-Match")
                if im is not None and im != etag:
                    self.send_response(412)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start, end, status = 0, len(data) - 1, 200
                rng = self.headers.get("Range")
                if rng and not f.ignore_range:
                    a, b = rng.split("=", 1)[1].split("-")
                    start, end = int(a), min(int(b) if b else len(data) - 1, len(data) - 1)
                    status = 206
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                body = data[start : end + 1]
                self.send_response(status)
                if f.gzip and not head:  # as a server that compresses whatever Accept-Encoding says
                    body = gzip.compress(body)
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", etag)
                self.send_header("Last-Modified", lm)
                self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
                self.end_headers()
                if head:
                    return
                if drop:
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if cut:  # Content-Length larger than the body: the connection closes early
                    self.wfile.write(body[: max(0, len(body) - cut)])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.httpd = Server((LOOPBACK, 0), Handler)
        if tls is not None:  # https: (certificate file, key file)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.base = f"{'https' if tls else 'http'}://{LOOPBACK}:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"{self.base}/{name.lstrip('/')}"

    def put(self, name: str, data: bytes) -> str:
        self.objects["/" + name.lstrip("/")] = data
        return self.url(name)

    def redirect(self, name: str, location: str, status: int = 302, methods: tuple[str, ...] = ("HEAD", "GET"),
                 headers: dict[str, str] | None = None) -> str:
        """`name` answers `methods` with `status`, this Location (as given: relative or absolute) and
        `headers`; returns its URL."""
        self.redirects["/" + name.lstrip("/")] = (status, location, methods, headers or {})
        return self.url(name)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def self_signed_cert(folder: Path) -> tuple[str, str]:
    """(certificate file, key file) of a self-signed certificate for 127.0.0.1, made with
    cryptography (moto's dependency); the certificate file is also its CA bundle."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, LOOPBACK)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(LOOPBACK))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    certfile, keyfile = folder / "cert.pem", folder / "key.pem"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return str(certfile), str(keyfile)


class Nginx:
    """nginx (Debian's package) serving `root` on 127.0.0.1, started by the test itself."""

    def __init__(self, root: Path, work: Path) -> None:
        binary = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
        if binary is None:
            raise FileNotFoundError("nginx is not installed (apt-get install -y nginx; .ci/run does it)")
        self.port = free_port()
        self.root = root
        work.mkdir(parents=True, exist_ok=True)
        conf = work / "nginx.conf"
        # As root, nginx's workers would run as nobody, who cannot read the test's private tmp folders.
        user = "user root;" if os.geteuid() == 0 else ""
        conf.write_text(f"""
{user}
worker_processes 2;
daemon off;
error_log {work}/error.log warn;
pid {work}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    server {{
        listen {LOOPBACK}:{self.port};
        root {root};
    }}
}}
""")
        self.proc = subprocess.Popen([binary, "-p", str(work), "-c", str(conf)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        self.base = f"http://{LOOPBACK}:{self.port}"
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection((LOOPBACK, self.port), timeout=0.2):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    err = self.proc.stderr.read().decode() if self.proc.poll() is not None else "no answer"
                    self.close()
                    raise RuntimeError(f"nginx did not start: {err}")
                time.sleep(0.05)

    def url(self, name: str) -> str:
        return f"{self.base}/{name}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()


class MotoS3:
    """moto's S3 (and IAM) server in this process on 127.0.0.1; `client()` is a boto3 client of it."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address=LOOPBACK, port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{LOOPBACK}:{port}"
        self.clients: list[Any] = []

    def env(self) -> dict[str, str]:
        """The AWS_* variables that point an SDK at this server, with moto's test keys."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}

    def client(self, service: str = "s3", **keys: str) -> Any:
        import boto3

        e = self.env()
        c = boto3.client(service, endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=keys.get("key", e["AWS_ACCESS_KEY_ID"]),
                            aws_secret_access_key=keys.get("secret", e["AWS_SECRET_ACCESS_KEY"]))
        self.clients.append(c)
        return c

    def close_clients(self) -> None:
        """Closes the boto3 clients made by client() (their sockets would otherwise be left to the GC)."""
        for c in self.clients:
            c.close()
        self.clients.clear()

    def reset(self) -> None:
        import urllib.request

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy: loopback only
        with opener.open(urllib.request.Request(self.endpoint + "/moto-api/reset", method="POST")) as r:
            r.read()

    def close(self) -> None:
        self.server.stop()


def open_fds() -> set[str]:
    """'fd -> target' of every file descriptor this process holds open
    (sockets read 'socket:[inode]'; Linux /proc)."""
    out = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            out.add(f"{name} -> {os.readlink(f'/proc/self/fd/{name}')}")
        except OSError:  # the listing's own fd, closed meanwhile
            continue
    return out


class LeakCheck:
    """What a test left behind: threads still alive and file descriptors
    (sockets, files, pipes) still open that were not there before it. Servers' per-connection threads finish a moment
    after the client hangs up, so the check waits up to `grace` seconds."""

    def __init__(self, grace: float = 3.0) -> None:
        self.grace = grace
        self.threads = set(threading.enumerate())
        self.fds = open_fds()

    def leaks(self) -> tuple[list[str], list[str]]:
        deadline = time.monotonic() + self.grace
        while True:
            threads = [t.name for t in threading.enumerate() if t not in self.threads and t.is_alive()]
            fds = sorted(open_fds() - self.fds)
            if (not threads and not fds) or time.monotonic() > deadline:
                return threads, fds
            time.sleep(0.05)
