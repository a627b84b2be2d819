"""A local tar shard's image members on the GPU path: each member's byte
range read as a loose file is (where true GDS runs, decode.read_image with a
span: its header from a host read of its first bytes, its bytes by one read
of the I/O engine into the target's memory; elsewhere a group of members by
one call into pinned memory, tests/data/test_gpu_group_reads.py) and decoded
with the batch from there.

The tests without the ``gpu`` marker run that same code on the CPU target
(read_image, probe_file and read_bodies serve both; only the engine's
destination differs) and check the range arithmetic, the engine's request
and the producer's routing. The ``gpu`` tests (skipped centrally without a
GPU) compare a shard Loader on cuda with the CPU path and with the loose
files on cuda, and read the backends that ran from stats().
"""

from __future__ import annotations

import dataclasses
import io
import os
import queue
import threading

import numpy as np
import pytest
import torch
from PIL import Image
from test_loader_gpu import jpeg_folder, train_tf
from test_shards import make_folder, tar_of

import gdsio.data as gd
from gdsio.data import Loader, decode, write_shards
from gdsio.data import producer as producer_module
from gdsio.data.producer import Producer
from gdsio.image.batch import TAIL, Item
from gdsio.io import File, read

DEVICE_READS = {"gds", "cufile", "cufile-compat", "pinned", "kvikio"}
DEVICE_DECODERS = {"nvjpeg-hardware-device", "nvjpeg-gpu-hybrid-device"}


@pytest.fixture
def engine_calls(monkeypatch):
    """Every File.read (a body: path, offset, size, device) and File.read_into (a header read: path, offset, size)."""
    calls = []
    real_read, real_into = File.read, File.read_into

    def body(self, **kw):
        calls.append(("body", self.path, kw.get("offset", 0), kw.get("size"), str(kw.get("device", "cuda"))))
        return real_read(self, **kw)

    def header(self, out, size=None, file_offset=0, out_offset=0, **kw):
        calls.append(("header", self.path, file_offset, size))
        return real_into(self, out, size, file_offset, out_offset, **kw)

    monkeypatch.setattr(File, "read", body)
    monkeypatch.setattr(File, "read_into", header)
    return calls


def shards_of(tmp_path, per_class=4):
    """An ImageFolder (JPEG and PNG) and its shards; (folder, shard paths, the shards' table)."""
    folder = make_folder(tmp_path / "img", classes=2, per_class=per_class)
    paths = write_shards(folder, tmp_path / "s", shard_bytes=6000)
    return folder, paths, gd.scan(paths)


# ---- CPU-runnable: the same functions, the CPU target ----------------------------------------------


def test_a_member_span_is_read_alone_and_decodes_as_its_file(tmp_path, engine_calls):
    folder, paths, table = shards_of(tmp_path)
    setup = decode.image_setup("cpu", "RGB")
    loose_paths = gd.scan(folder).files.paths
    assert len(paths) > 1 and len(table.ranges) == len(loose_paths) == 8
    members, loose = [], []
    for k, (off, size) in enumerate(table.ranges.tolist()):
        shard = table.files.paths[k]
        del engine_calls[:]
        it = decode.read_image(shard, setup, (off, size))
        # The header's host reads stay inside the member: its first bytes and its last TAIL bytes.
        headers = [c for c in engine_calls if c[0] == "header"]
        assert headers and all(c[1] == shard and off <= c[2] and c[2] + c[3] <= off + size for c in headers)
        assert ("header", shard, off, min(size, 64 << 10)) in headers
        assert ("header", shard, off + size - TAIL, TAIL) in headers
        # The body: one read of the engine, (shard, member offset, member size), into the target's memory.
        assert [c for c in engine_calls if c[0] == "body"] == [("body", shard, off, size, "cpu")]
        assert it.name == f"{shard}@{off}" and it.span == (off, size) and it.total == size and it.file is None
        assert it.format.name == ("png" if loose_paths[k].endswith(".png") else "jpeg")
        assert torch.equal(it.data, read(shard, offset=off, size=size, device="cpu"))
        assert it.io.nbytes == size
        members.append(it)
        loose.append(decode.read_image(loose_paths[k], setup))
    got, errors, backends = decode.decode_items(members, setup)
    want, want_errors, want_backends = decode.decode_items(loose, setup)
    assert not errors and not want_errors and backends == want_backends
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_a_whole_file_is_still_read_from_offset_0_to_its_end(tmp_path, engine_calls):
    folder = make_folder(tmp_path / "img", classes=1, per_class=1)
    path = gd.scan(folder).files.paths[0]
    it = decode.read_image(path, decode.image_setup("cpu", "RGB"))
    assert it.name == path and it.span is None
    assert [c for c in engine_calls if c[0] == "body"] == [("body", path, 0, None, "cpu")]
    assert torch.equal(it.data, read(path, device="cpu"))


def test_a_bad_member_fails_before_its_body_read_naming_it(tmp_path, engine_calls):
    good = io.BytesIO()
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(good, format="JPEG")
    p = str(tar_of(tmp_path / "s.tar", [("a.jpg", good.getvalue()), ("a.cls", b"0"),
                                         ("b.jpg", b"\xff\xd8\xffnot a jpeg at all"), ("b.cls", b"1")]))
    table = gd.scan(p)
    setup = decode.image_setup("cpu", "RGB")
    (a_off, a_size), (b_off, b_size) = table.ranges.tolist()
    with pytest.raises(ValueError, match=rf"s\.tar@{b_off}: "):
        decode.read_image(p, setup, (b_off, b_size))
    assert not [c for c in engine_calls if c[0] == "body"]  # the header refused it: no bulk read
    # A range the shard no longer holds (rewritten shorter since its index was made): refused, naming it.
    size = os.path.getsize(p)
    with pytest.raises(ValueError, match=rf"s\.tar@{a_off}: bytes {a_off} to {size + 1} are outside .*s\.tar"):
        decode.read_image(p, setup, (a_off, size + 1 - a_off))
    with pytest.raises(ValueError, match="empty range"):
        decode.read_image(p, setup, (a_off, 0))
    assert not [c for c in engine_calls if c[0] == "body"]
    it = decode.read_image(p, setup, (a_off, a_size))
    assert it.error is None and it.total == a_size


def _gpu_producer(loader):
    """The loader's producer for its next pass, with its GPU routing switched on over the CPU target
    (read_image and decode_items serve both; the CUDA streams are not used by _read_member)."""
    prod = Producer(loader._plan(0, 0), queue.Queue(), threading.Event())
    prod.cuda, prod.image_setup = True, decode.image_setup("cpu", loader.image_mode)
    return prod


@pytest.mark.parametrize("shuffle", [False, "window"])
def test_the_producer_reads_a_local_members_range_with_the_engine(tmp_path, engine_calls, shuffle):
    _, paths, table = shards_of(tmp_path)
    loader = Loader(paths, 4, device="cpu", shuffle=shuffle, seed=3, shuffle_window=2)
    cpu = Producer(loader._plan(0, 0), queue.Queue(), threading.Event())
    assert not cpu._members_to_device()  # the CPU: batched host reads, the window order's unit reads
    prod = _gpu_producer(loader)
    # Local shards of images for a GPU: no unit is read whole into host memory in the window order (run()
    # makes no ShardWindows), each member is read alone into device memory.
    assert prod._members_to_device()
    for k in (0, 5, 7):
        off, size = (int(v) for v in table.ranges[k])
        del engine_calls[:]
        it, st = prod._read_member(k, None)
        assert isinstance(it, Item) and it.span == (off, size) and it.name == f"{table.files.paths[k]}@{off}"
        assert [c for c in engine_calls if c[0] == "body"] == [("body", table.files.paths[k], off, size, "cpu")]
        assert st == (it.io.backend, size) and st[0] == "posix"  # the CPU target's engine; on a GPU gds or pinned
    npy = dataclasses.replace(loader._plan(0, 0), table=dataclasses.replace(table, kind="npy"))
    p2 = Producer(npy, queue.Queue(), threading.Event())
    p2.cuda = True
    assert not p2._members_to_device()  # npy members: npy_from_bytes, not the image path


def test_a_remote_shards_member_keeps_its_host_bytes(tmp_path, monkeypatch):
    """Remote shards arrive in host memory: on a GPU their members stay a batch item of those bytes (one copy
    to the device at the decode), and the window order keeps its unit reads."""
    _, paths, table = shards_of(tmp_path)
    urls = [f"http://127.0.0.1:9/{k}.tar" for k in range(len(paths))]
    by_url = dict(zip(urls, paths))
    remote = dataclasses.replace(table, files=dataclasses.replace(table.files, paths=[urls[paths.index(p)] for p in
                                                                                         table.files.paths]),
                                 shards=dataclasses.replace(table.shards, paths=urls))
    loader = Loader(paths, 4, device="cpu")
    prod = Producer(dataclasses.replace(loader._plan(0, 0), table=remote), queue.Queue(), threading.Event())
    prod.cuda, prod.image_setup = True, decode.image_setup("cpu", "RGB")
    assert not prod._members_to_device()
    ranged = []

    def fake_range(path, etag, offset, size, cache=None, readers=None):
        ranged.append((path, offset, size))
        return read(by_url[path], offset=offset, size=size, device="cpu"), ("http", size)

    def no_device_read(*a, **kw):
        raise AssertionError("a remote member went through read_image")

    monkeypatch.setattr(producer_module, "read_shard_range", fake_range)
    monkeypatch.setattr(decode, "read_image", no_device_read)
    off, size = (int(v) for v in table.ranges[2])
    it, st = prod._read_member(2, None)
    assert ranged == [(remote.files.paths[2], off, size)] and st == ("http", size)
    assert isinstance(it, Item) and not it.data.is_cuda and it.total == size and it.span is None
    assert torch.equal(it.data, read(table.files.paths[2], offset=off, size=size, device="cpu"))


# ---- on a GPU ---------------------------------------------------------------------------------------


def _batches(loader):
    return [(x.cpu(), y.cpu()) for x, y in loader]


def _jpeg_shards(tmp_path):
    (tmp_path / "img").mkdir()
    folder = jpeg_folder(tmp_path / "img")
    return folder, write_shards(folder, tmp_path / "s", shard_bytes=60000)


@pytest.mark.gpu
@pytest.mark.parametrize("shuffle", ["global", "window"])
def test_local_shards_on_the_gpu_equal_the_loose_files_and_the_cpu(tmp_path, shuffle):
    folder, paths = _jpeg_shards(tmp_path)
    assert len(paths) > 2
    kw = dict(shuffle=shuffle if shuffle == "window" else True, seed=2, transform=train_tf(torch.float32))
    shard_gpu = Loader(paths, 8, device="cuda", shuffle_window=2, **kw)
    got = _batches(shard_gpu)
    st = shard_gpu.stats()
    # The loose files on cuda, in the same order (the window order exists for shards only: the CPU shard
    # loader gives the order the GPU one must follow).
    cpu = _batches(Loader(paths, 8, device="cpu", shuffle_window=2, **kw))
    assert len(got) == len(cpu) == 5
    for (gx, gy), (cx, cy) in zip(got, cpu):
        assert torch.equal(gy, cy)
        assert float((gx - cx).abs().mean()) < 0.05  # nvJPEG and libjpeg-turbo differ by an LSB here and there
    # Read into device memory (gds, or where it cannot run a group through pinned memory, counted "pinned"),
    # never left in host memory; decoded from device bitstreams.
    assert set(st.io_backends) <= DEVICE_READS and sum(st.io_backends.values()) == 40
    assert st.bytes_read == int(gd.scan(paths).ranges[:, 1].sum())
    assert st.decode_backends and set(st.decode_backends) <= DEVICE_DECODERS, st.decode_backends
    if shuffle == "global":
        loose = Loader(folder, 8, device="cuda", **kw)
        want = _batches(loose)
        assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(got, want))
        assert st.decode_backends == loose.stats().decode_backends
        assert set(st.io_backends) == set(loose.stats().io_backends)


@pytest.mark.gpu
def test_a_member_item_on_the_gpu_holds_a_device_bitstream(tmp_path):
    folder, paths = _jpeg_shards(tmp_path)
    table = gd.scan(paths)
    setup = decode.image_setup("cuda", "RGB")
    items = [decode.read_image(table.files.paths[k], setup, tuple(int(v) for v in table.ranges[k])) for k in range(4)]
    assert all(it.data.is_cuda and it.io.backend in DEVICE_READS for it in items)
    got, errors, backends = decode.decode_items(items, setup)
    assert not errors and set(backends) <= DEVICE_DECODERS, backends
    assert all("bitstream copied" not in it.reason for it in items)
    loose = [decode.read_image(p, setup) for p in gd.scan(folder).files.paths[:4]]
    want, _, _ = decode.decode_items(loose, setup)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
