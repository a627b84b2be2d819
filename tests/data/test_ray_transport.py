"""gdsio.data.ray's socket transport (gdsio/data/ray/transport.py): a batch's
images go from the CPU node's actor to the consumer over one TCP connection
per actor, read straight into the consumer's buffer.

Without Ray: the two ends over 127.0.0.1 (frames of every kind, in any
order, the token, a connection that ends or stalls within a frame, no
socket left after close). Marker ``ray`` (test_ray's cluster, on loopback):
the loader over both transports gives gdsio.Loader's batches, the
consumer's receiving socket listens on loopback only and is gone after
close(), and a worker's SampleError arrives as gdsio's own."""

from __future__ import annotations

import os
import socket
import threading
import time

# test_ray sets RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 on import, before ray is imported (loopback only).
from test_ray import CHAINS, assert_same, cluster, cpu_batches, folder, ray_loader  # noqa: F401 - fixtures

import numpy as np
import pytest
import torch
from conftest import in_time

from gdsio.data import loopback
from gdsio.data.ray import transport as tr
from gdsio.errors import SampleError
from gdsio.tools.demo import write_jpeg_folder

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")


def alloc(shape, dtype):
    return torch.from_numpy(np.empty(shape, dtype))


def socket_fds() -> set[str]:
    """This process's open sockets (their inodes)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:"):
            out.add(link)
    return out


def batch(images, k=0):
    """A batch as BatchMaker.make returns it: (epoch, number, images, labels, node, seconds)."""
    return 2, k, images, np.arange(len(images), dtype=np.int64) + k, "ab" * 28, 0.25


def take(rx, seq, tries=50):
    """Call seq's frame, reading for at most `tries` rounds of the receiver's bounded wait."""
    for _ in range(tries):
        f = rx.take(seq, 0.2)
        if f is not None:
            return f
    raise AssertionError(f"no frame {seq}")


# ---- the two ends, without Ray -----------------------------------------------------------


def test_frames_of_every_kind_arrive_whole_into_the_receivers_buffers_in_any_order():
    stop = threading.Event()
    before = socket_fds()
    rx = tr.Receiver("127.0.0.1", alloc, stop)
    try:
        assert rx.dest.host == "127.0.0.1" and len(rx.dest.token) == tr.TOKEN_BYTES
        rng = np.random.default_rng(0)
        u8 = rng.integers(0, 256, (3, 3, 5, 7), dtype=np.uint8)
        f16 = rng.standard_normal((2, 3, 4, 4)).astype(np.float16)
        big = rng.integers(0, 256, (4, 3, 224, 224), dtype=np.uint8)  # more than a socket buffer holds
        a, b = tr.Sender(rx.dest, 0), tr.Sender(rx.dest, 1)
        sent = threading.Thread(target=lambda: (b.send(7, tr.DATA, batch(big)), b.send(8, tr.NOTHING)))
        sent.start()  # actor 1 sends while the receiver waits for actor 0's frames: nothing waits on the other
        a.send(3, tr.DATA, batch(u8))
        a.send(4, tr.FAILED)
        a.send(5, tr.DATA, batch(f16, k=5))
        got = take(rx, 5)  # read after 3 and 4, which are kept
        assert got.status == tr.DATA and got.images.dtype == torch.float16 and np.array_equal(got.images.numpy(), f16)
        assert (got.epoch, got.batch_no, got.labels.tolist(), got.node, got.seconds) == (2, 5, [5, 6], "ab" * 28, 0.25)
        assert take(rx, 4).status == tr.FAILED and take(rx, 3).images.numpy().tobytes() == u8.tobytes()
        assert np.array_equal(take(rx, 7).images.numpy(), big) and take(rx, 8).status == tr.NOTHING
        in_time(sent.join)
        assert rx.connected(0) and rx.connected(1) and not rx.connected(2)
        rx.discard(9)  # lost, made again elsewhere: its frame, when it comes, is dropped
        a.send(9, tr.DATA, batch(u8))
        a.send(10, tr.NOTHING)
        assert take(rx, 10).status == tr.NOTHING and rx.take(9, 0.1) is None
        a.close()
        b.close()
    finally:
        rx.close()
    rx.close()  # idempotent
    assert socket_fds() <= before  # the listener, the connections and the senders' sockets are all closed


def test_a_connection_without_the_token_is_dropped_and_sends_nothing():
    stop = threading.Event()
    rx = tr.Receiver("127.0.0.1", alloc, stop)
    try:
        wrong = tr.Sender(tr.Dest("127.0.0.1", rx.dest.port, b"x" * tr.TOKEN_BYTES), 0)
        wrong.send(1, tr.DATA, batch(np.zeros((1, 2), np.uint8)))
        assert rx.take(1, 0.5) is None and rx.take(1, 0.2) is None
        assert not rx.connected(0)
        wrong.close()
        right = tr.Sender(rx.dest, 0)
        right.send(1, tr.DATA, batch(np.ones((1, 2), np.uint8)))
        assert take(rx, 1).images.numpy().tolist() == [[1, 1]] and rx.connected(0)
        right.close()
        assert in_time(lambda: rx.take(2, 5.0)) is None  # its end closes the connection: take returns
        assert not rx.connected(0)
    finally:
        rx.close()


def test_an_actor_that_connects_again_replaces_its_connection():
    stop = threading.Event()
    rx = tr.Receiver("127.0.0.1", alloc, stop)
    try:
        old, new = tr.Sender(rx.dest, 0), tr.Sender(rx.dest, 0)
        old.send(1, tr.NOTHING)
        assert take(rx, 1).status == tr.NOTHING
        first = rx._conns[0]
        new.send(2, tr.DATA, batch(np.full((1, 3), 4, np.uint8)))  # its old connection failed, as the actor saw it
        assert take(rx, 2).images.numpy().tolist() == [[4, 4, 4]]
        assert rx.connected(0) and rx._conns[0] is not first and first.closed  # the new one counts, the old is closed
        old.close()
        new.close()
    finally:
        rx.close()


def test_a_frame_that_ends_or_stalls_midway_drops_its_connection_and_nothing_waits_without_bound():
    stop = threading.Event()
    rx = tr.Receiver("127.0.0.1", alloc, stop)
    raw = []
    try:
        for number in (0, 1):
            s = socket.create_connection(("127.0.0.1", rx.dest.port), timeout=5)
            raw.append(s)
            s.sendall(tr.HELLO.pack(tr.MAGIC, rx.dest.token, number))
            s.sendall(tr.HEADER.pack(tr.MAGIC, 1 + number, tr.DATA, 2, b"|u1", 100, 100, *([0] * (tr.MAX_DIMS - 2)),
                                     0, 0, 0.0, 0, b""))
            s.sendall(b"\0" * 10)  # of 10000
        raw[0].close()  # the actor died within its frame
        stop_later = threading.Timer(0.5, stop.set)
        stop_later.start()  # actor 1's frame stalls: the stop flag ends the read
        assert in_time(lambda: [rx.take(1, 1.0) for _ in range(3)] + [rx.take(2, 1.0) for _ in range(3)], 30) \
            == [None] * 6
        stop_later.join()
        assert rx.take(2, 1.0) is None  # a take after the stop surely set (the timer may fire late on a loaded machine)
        assert not rx.connected(0) and not rx.connected(1)
    finally:
        for s in raw:
            s.close()
        rx.close()


def test_a_sender_that_cannot_reach_the_consumer_says_so():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}.*transport='object_store'"):
            tr.Sender(tr.Dest("127.0.0.1", port, b"t" * tr.TOKEN_BYTES), 0).send(1, tr.NOTHING)


# ---- the loader over both transports, on a cluster -------------------------------------


@pytest.mark.ray
@pytest.mark.parametrize("transport", ["socket", "object_store"])
@pytest.mark.parametrize("chain, cast_on", [("float32", "device"), ("float32", "cpu_nodes"), ("uint8", "device"),
                                            ("bfloat16", "device")])
def test_both_transports_give_the_cpu_loaders_batches(cluster, folder, transport, chain, cast_on, monkeypatch):
    from gdsio.data.ray import feed

    if transport == "object_store" and chain == "bfloat16":
        return  # test_ray's test covers it; one cluster pass less on a busy machine
    seen = []
    receive, received = feed.receive, feed.received
    monkeypatch.setattr(feed, "receive", lambda *a: (seen.append("object_store"), receive(*a))[1])
    monkeypatch.setattr(feed, "received", lambda *a: (seen.append("socket"), received(*a))[1])
    loader = ray_loader(folder, 4, local_share=0.0, transform=CHAINS[chain], cast_on=cast_on, transport=transport,
                        epochs_per_pool=2)
    assert loader.transport == transport and ray_loader(folder, 4, local_share=1.0).transport == "socket"  # default
    def epoch():
        out = []
        for x, y in loader:
            out.append((x.clone(), y.clone()))
            x.fill_(7)  # the user's in-place op reaches no later batch (the batch is the consumer's alone)
            y.fill_(7)
        return out

    got = [epoch(), epoch()]  # two epochs over one pool: the connections are kept
    loader.close()
    assert_same(got[0], cpu_batches(folder, 4, 0, transform=CHAINS[chain]))
    assert_same(got[1], cpu_batches(folder, 4, 1, transform=CHAINS[chain]))
    assert seen == [transport] * 10 and loader.stats().remote_pools == 1


@pytest.mark.ray
def test_the_receiving_socket_listens_on_loopback_with_a_connection_per_actor_and_is_gone_after_close(cluster,
                                                                                                    folder):
    before = socket_fds()
    loader = ray_loader(folder, 2, local_share=0.0, actors=1, epochs_per_pool=2)
    it = iter(loader)
    first = next(it)
    rx = loader._exec.feed.rx
    assert rx is not None and rx.dest.host == "127.0.0.1" and rx.connected(0)
    mine = loopback.process_sockets([os.getpid()])
    ours = [s for s in mine if s["local"] == "127.0.0.1" and "LISTEN" in s["kind"]]
    assert ours, mine
    loopback.check_loopback([os.getpid()])  # LoopbackError lists any socket off loopback
    conn = rx._conns[0]
    got = [first, *it]
    it = iter(loader)  # the next epoch, from the same pool
    got.append(next(it))
    assert loader._exec.feed.rx is rx and list(rx._conns) == [0] and rx._conns[0] is conn  # the same connection
    got += list(it)
    assert_same(got, cpu_batches(folder, 2, 0) + cpu_batches(folder, 2, 1))
    loader.close()
    deadline = time.monotonic() + 60
    while (threading_names() & {"gdsio-ray"} or socket_fds() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "gdsio-ray" not in threading_names()
    assert not socket_fds() - before, "the feed's listener or a connection is still open after close()"


def threading_names() -> set[str]:
    return {t.name for t in threading.enumerate()}


@pytest.mark.ray
@pytest.mark.parametrize("transport", ["socket", "object_store"])
def test_a_workers_sample_error_arrives_as_gdsios_own(cluster, tmp_path, transport):
    root = tmp_path / "train"
    write_jpeg_folder(str(root), classes=1, per_class=6, size=(40, 30))
    bad = sorted((root / os.listdir(root)[0]).iterdir())[2]
    bad.write_bytes(b"\xff\xd8 not a jpeg")
    with pytest.raises(SampleError, match=bad.name) as e:
        list(ray_loader(str(root), 4, local_share=0.0, transport=transport))
    assert type(e.value) is SampleError and e.value.path.endswith(bad.name), type(e.value).__mro__


def test_the_transport_is_checked_before_any_cluster_is_needed(tmp_path):
    import gdsio.data.ray as gray

    write_jpeg_folder(str(tmp_path / "train"), classes=1, per_class=2, size=(40, 30))
    with pytest.raises(ValueError, match="transport must be one of 'socket', 'object_store'; got 'tcp'"):
        gray.Loader(str(tmp_path / "train"), 2, device="cpu", transport="tcp")
