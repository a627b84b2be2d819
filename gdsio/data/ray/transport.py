"""gdsio.data.ray, the socket transport: a batch's pixel bytes go from the CPU
node's actor straight to the consumer over one TCP connection per actor, and
the consumer reads them into a buffer of its own (pinned, for a GPU): the
kernel's copy only. The actor call itself carries the rest (labels, the
batch's place, the node, its time) and every error, as Ray carries it for
``transport="object_store"``.

Why (bench/results/ray-receive-2026-12-04.md): with Ray's object store the
consumer's node pays twice for every batch: its raylet pulls the object from
the CPU node's store over gRPC, in chunks, then the consumer maps it and
copies it once more into its staging buffer. Here the consumer's kernel copies
the bytes once, from the socket into that buffer, and the consumer's node runs
nothing else per batch.

The wire, one connection per actor, kept for the actor's life (every batch of
every epoch of its pool): the actor connects to the consumer's listening
socket (on the address Ray uses for the consumer's node) and says ``HELLO``
(the feed's random token, its own number); then per actor call one frame,
``HEADER`` (the call's sequence number, its status, and for ``DATA`` the
array's dtype and shape) and, for ``DATA``, the array's bytes. Every call
sends a frame, ``NOTHING`` (no batch of this node's) and ``FAILED`` (the call
raised: its result says why) too, so the consumer never waits on a batch that
will not come. Plain TCP, as Ray's own transfers without ``RAY_USE_TLS``.

Package-internal (``__all__`` is empty; used by gdsio.data.ray.feed):
``Dest``, ``Frame``, ``Receiver`` (the consumer's end), ``Sender`` and
``StreamMaker`` (the actor's)."""

from __future__ import annotations

import dataclasses
import hmac
import logging
import math
import secrets
import selectors
import socket
import struct
import threading
import time
from typing import Any, Callable

import numpy as np

from .remote import BatchMaker

__all__: list[str] = []  # the mechanics of gdsio.data.ray.Loader; nothing here is API

log = logging.getLogger("gdsio")

MAGIC = b"GDSB"
TOKEN_BYTES = 32
HELLO = struct.Struct(f"<4s{TOKEN_BYTES}sQ")  # magic, the feed's token, the actor's number
MAX_DIMS = 8
# magic, seq, status, ndim, numpy dtype str, shape; then the batch's epoch, number, seconds, node id, labels
HEADER = struct.Struct(f"<4sQBB2x4s{MAX_DIMS}QqqdQ64s")
NODE_BYTES = 64
DATA, NOTHING, FAILED = 0, 1, 2  # a frame's status: the array follows / no batch / the call raised
WAIT_S = 1.0  # a blocked read looks at the stop flag this often
STALL_S = 60.0  # a frame begun whose bytes stop coming this long: its connection is dropped
HELLO_STALL_S = 5.0  # the same for a connection's HELLO (before the token is known)
CONNECT_S = 30.0  # an actor's connect to the consumer, at most
KINDS = "biuf"  # numeric arrays only


@dataclasses.dataclass(frozen=True)
class Dest:
    """Where an actor sends its batches: the consumer's listening address and the feed's token."""

    host: str
    port: int
    token: bytes = dataclasses.field(repr=False)


@dataclasses.dataclass
class Frame:
    """One call's frame, read: its status and, for ``DATA``, the batch: its
    images in a buffer of the consumer's, its labels, where and when it was made."""

    seq: int
    status: int
    images: Any = None  # a torch tensor (the allocator's), or None
    labels: Any = None  # int64 numpy array
    epoch: int = 0
    batch_no: int = 0
    node: str = ""
    seconds: float = 0.0


def _timeval(seconds: float) -> bytes:
    return struct.pack("ll", int(seconds), int((seconds % 1) * 1e6))


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.number: int | None = None  # the actor's, once its HELLO came with the right token
        self.closed = False


class Receiver:
    """The consumer's end: listens on `host` (an ephemeral port), accepts the
    actors' connections that bring the token, and reads their frames into
    tensors from `alloc(shape, numpy dtype)`, kept by sequence number until
    taken. Runs in one thread (the feed's), which closes it; every wait is
    bounded and looks at `stop`."""

    def __init__(self, host: str, alloc: Callable[[tuple[int, ...], np.dtype], Any], stop: threading.Event) -> None:
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self._alloc, self._stop = alloc, stop
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, 0), family=family, backlog=128)
        self._listener.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._conns: dict[int, _Conn] = {}  # actor number -> its connection
        self._frames: dict[int, Frame] = {}
        self._dropped: set[int] = set()  # calls whose frames, if they still come, are not wanted
        self._head = bytearray(max(HELLO.size, HEADER.size))
        self.dest = Dest(host, int(self._listener.getsockname()[1]), self.token)

    def connected(self, number: int) -> bool:
        """Whether actor `number` has a connection open here."""
        return number in self._conns

    def discard(self, seq: int) -> None:
        """Drops call `seq`'s frame, read or still to come (the call was lost and made again as another)."""
        if self._frames.pop(seq, None) is None:
            self._dropped.add(seq)

    def take(self, seq: int, wait_s: float = WAIT_S) -> Frame | None:
        """Call `seq`'s frame: reads whatever the actors send meanwhile, for up
        to `wait_s` s or until a connection closes (None: not here then)."""
        deadline = time.monotonic() + wait_s
        while seq not in self._frames:
            left = deadline - time.monotonic()
            if left <= 0 or self._stop.is_set():
                return None
            events = self._sel.select(left)
            if not events:
                return None
            closed = False
            for key, _ in events:
                if key.data is None:
                    self._accept()
                elif key.data.closed or not self._read(key.data):  # closed: replaced by a new one meanwhile
                    closed = True
            if closed and seq not in self._frames:
                return None
        return self._frames.pop(seq)

    def close(self) -> None:
        """Closes the listener and every connection (idempotent)."""
        held = self._sel.get_map()
        for key in list(held.values()) if held is not None else []:
            key.fileobj.close()  # the listener and every connection
        self._sel.close()
        self._conns.clear()
        self._frames.clear()

    # ---- reading ------------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(True)  # reads block in the kernel (MSG_WAITALL), bounded by SO_RCVTIMEO
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(WAIT_S))
            self._sel.register(sock, selectors.EVENT_READ, _Conn(sock))

    def _drop(self, c: _Conn) -> None:
        if c.closed:
            return
        c.closed = True
        self._sel.unregister(c.sock)
        c.sock.close()
        if c.number is not None and self._conns.get(c.number) is c:
            del self._conns[c.number]

    def _read(self, c: _Conn) -> bool:
        """One HELLO or frame from `c`; False when `c` closed (its end, a bad word, a stall, stop)."""
        try:
            if c.number is None:
                return self._hello(c)
            if not self._exactly(c, memoryview(self._head)[:HEADER.size], first=True):
                self._drop(c)
                return False
            magic, seq, status, ndim, dt, *shape = HEADER.unpack_from(self._head)
            shape, (epoch, k, seconds, nlabels, node) = shape[:MAX_DIMS], shape[MAX_DIMS:]
            if magic != MAGIC or status not in (DATA, NOTHING, FAILED) or ndim > MAX_DIMS or nlabels > shape[0]:
                raise ValueError(f"a bad frame header from actor {c.number}")
            if status != DATA:
                self._keep(Frame(seq, status))
                return True
            dtype = np.dtype(dt.rstrip(b"\0").decode("ascii"))
            if dtype.kind not in KINDS:
                raise ValueError(f"a frame of dtype {dtype} from actor {c.number}")
            labels = np.empty(nlabels, np.int64)
            images = self._alloc(tuple(shape[:ndim]), dtype)
            view = memoryview(images.numpy()).cast("B")
            if view.nbytes != math.prod(shape[:ndim]) * dtype.itemsize:
                raise ValueError(f"the frame of call {seq} from actor {c.number}: a buffer of the wrong size")
            self._exactly(c, memoryview(labels).cast("B"))
            self._exactly(c, view)
            self._keep(Frame(seq, DATA, images, labels, epoch, k, node.rstrip(b"\0").decode("ascii"), seconds))
            return True
        except (OSError, ValueError, UnicodeDecodeError, TypeError) as e:
            log.warning("gdsio.data.ray: dropped a batch connection (%s: %s)", type(e).__name__, e)
            self._drop(c)
            return False

    def _keep(self, frame: Frame) -> None:
        if frame.seq in self._dropped:
            self._dropped.discard(frame.seq)
        else:
            self._frames[frame.seq] = frame

    def _hello(self, c: _Conn) -> bool:
        if not self._exactly(c, memoryview(self._head)[:HELLO.size], first=True, stall_s=HELLO_STALL_S):
            self._drop(c)
            return False
        magic, token, number = HELLO.unpack_from(self._head)
        if magic != MAGIC or not hmac.compare_digest(token, self.token):
            raise ValueError("a connection without the feed's token")
        old = self._conns.get(number)
        if old is not None:  # the actor connected again (its last connection failed): the new one counts
            self._drop(old)
        c.number = number
        self._conns[number] = c
        return True

    def _exactly(self, c: _Conn, view: memoryview, first: bool = False, stall_s: float = STALL_S) -> bool:
        """Fills `view` from `c` (one recv in the kernel when the bytes are
        flowing); False at the connection's end before any byte of a `first`
        read. Waits at most `stall_s` without a byte, and looks at the stop flag."""
        got, last = 0, time.monotonic()
        while got < len(view):
            try:
                n = c.sock.recv_into(view[got:], len(view) - got, socket.MSG_WAITALL)
            except (BlockingIOError, TimeoutError):  # SO_RCVTIMEO: no byte for WAIT_S
                n = -1
            if n == 0:
                if first and got == 0:
                    return False
                raise ConnectionError("the connection ended within a frame")
            if n > 0:
                got, last = got + n, time.monotonic()
            elif self._stop.is_set() or time.monotonic() - last > stall_s:
                raise TimeoutError("stopped" if self._stop.is_set() else f"no byte for {stall_s:g} s within a frame")
        return True


# ---- the actor's end ------------------------------------------------------------------------


class Sender:
    """The actor's end: one connection to the consumer, made at the first
    frame and kept; a frame that fails on it is sent once more on a new one."""

    def __init__(self, dest: Dest, number: int) -> None:
        self.dest, self.number = dest, number
        self.sock: socket.socket | None = None

    def send(self, seq: int, status: int, batch: tuple[int, int, np.ndarray, np.ndarray, str, float] | None = None) -> None:
        """Call `seq`'s frame: `status`, and for ``DATA`` the `batch` (epoch,
        batch number, images, int64 labels, node id, seconds), as BatchMaker.make returns it."""
        epoch, k, images, labels, node, seconds = batch if batch is not None else (0, 0, None, None, "", 0.0)
        shape = images.shape if images is not None else ()
        if len(shape) > MAX_DIMS:
            raise ValueError(f"gdsio.data.ray: a batch of {len(shape)} dimensions (at most {MAX_DIMS} cross)")
        dt = images.dtype.str.encode("ascii") if images is not None else b""
        nlabels = len(labels) if labels is not None else 0
        header = HEADER.pack(MAGIC, seq, status, len(shape), dt, *shape, *([0] * (MAX_DIMS - len(shape))), epoch, k,
                             seconds, nlabels, node.encode("ascii"))
        parts = [header] if images is None else [
            header, np.ascontiguousarray(labels, np.int64).data.cast("B"), np.ascontiguousarray(images).data.cast("B")]
        for attempt in (0, 1):
            try:
                if self.sock is None:
                    self.sock = self._connect()
                for part in parts:
                    self.sock.sendall(part)
                return
            except OSError as e:
                self.close()
                if attempt:
                    raise ConnectionError(
                        f"gdsio.data.ray: the CPU node could not send a batch to the consumer at "
                        f"{self.dest.host}:{self.dest.port} ({type(e).__name__}: {e}); if a firewall is between "
                        "the nodes, open that port range or pass transport='object_store' (Ray's own connections)"
                    ) from e

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self.dest.host, self.dest.port), timeout=CONNECT_S)
        # Blocking sends: a consumer that pauses (its queue full) holds the actor, as Ray's window does; a
        # consumer that dies takes its actors with it (Ray ends an actor whose owner died).
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.sendall(HELLO.pack(MAGIC, self.dest.token, self.number))
        return sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class StreamMaker(BatchMaker):
    """An actor of gdsio.data.ray.Loader's pool with ``transport="socket"``:
    ``make_sent(place, seq)`` makes the batch as ``BatchMaker.make`` does and
    sends it to the consumer as call `seq`'s frame; the call returns None, or
    raises (its frame then says ``FAILED``, and the consumer takes the error
    from the call's result)."""

    def __init__(self, spec: Any, dest: Dest, number: int) -> None:
        super().__init__(spec)
        self.sender = Sender(dest, number)

    def make_sent(self, place: int, seq: int) -> None:
        try:
            out = self.make(place)
        except BaseException:
            try:
                self.sender.send(seq, FAILED)  # the consumer takes the error from the call's result now
            except ConnectionError as e:
                log.debug("gdsio.data.ray: could not say a call failed: %s", e)
            raise
        self.sender.send(seq, NOTHING if out is None else DATA, out)
