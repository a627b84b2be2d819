"""The GPU loader's images where true GPUDirect Storage cannot run: a group of
a batch's files (or local shards' members) read on the host by one call
(decode.read_images, into pinned memory on a GPU) and copied to the device
in one copy, instead of one engine read per image.

The tests without the ``gpu`` marker run decode.read_images and the
producer's group read over the CPU target (the same code; only the pinning
and the copy's destination differ): bytes, names, headers, the per-image
failures and the fallback that names a bad file. The ``gpu`` tests (skipped
centrally without a GPU) compare whole passes with the CPU path.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import threading

import numpy as np
import pytest
import torch
from test_shard_gpu import shards_of

import gdsio
from gdsio.data import Loader, decode
from gdsio.data.producer import Producer, _Group
from gdsio.image.batch import Item
from test_shards import make_folder


def _files(folder):
    return sorted(str(p) for p in folder.rglob("*") if p.is_file())


def test_read_images_gives_each_files_bytes_and_header(tmp_path):
    paths = _files(make_folder(tmp_path / "img", classes=2, per_class=3))
    setup = decode.image_setup("cpu", "RGB")
    items, buf = decode.read_images(paths, None, setup, pin=False)
    assert [it.name for it in items] == paths
    for it, p in zip(items, paths):
        with open(p, "rb") as f:
            want = f.read()
        assert it.error is None and it.total == len(want) and it.data.numpy().tobytes() == want
        assert it.format.name == ("png" if p.endswith(".png") else "jpeg")
        assert it.data.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()  # views of one buffer
        assert it.data.storage_offset() % 256 == 0
    images, errors, _ = decode.decode_items(items, setup)
    assert not errors
    for img, p in zip(images, paths):
        assert torch.equal(img, gdsio.image.read(p, device="cpu", mode="RGB"))


def test_read_images_of_shard_members_are_their_ranges(tmp_path):
    _, paths, table = shards_of(tmp_path)
    k = np.arange(len(table))
    names = [table.files.paths[i] for i in k]
    items, _ = decode.read_images(names, table.ranges[k], decode.image_setup("cpu", "RGB"), pin=False)
    for i, it in zip(k.tolist(), items):
        off, size = (int(v) for v in table.ranges[i])
        with open(names[i], "rb") as f:
            f.seek(off)
            want = f.read(size)
        assert it.name == f"{names[i]}@{off}" and it.error is None and it.data.numpy().tobytes() == want


def test_a_bad_header_or_an_empty_file_fails_its_item_only(tmp_path):
    paths = _files(make_folder(tmp_path / "img", classes=1, per_class=3))
    bad, empty = tmp_path / "bad.jpg", tmp_path / "empty.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not a jpeg at all" + bytes(64))
    empty.write_bytes(b"")
    group = [paths[0], str(bad), paths[1], str(empty)]
    items, _ = decode.read_images(group, None, decode.image_setup("cpu", "RGB"), pin=False)
    assert items[0].error is None and items[2].error is None
    assert isinstance(items[1].error, ValueError) and str(items[1].error).startswith(str(bad))
    assert isinstance(items[3].error, ValueError) and str(items[3].error) == f"{empty}: empty file"
    # The same messages as the one-file probe's.
    for it, p in ((items[1], bad), (items[3], empty)):
        with pytest.raises(ValueError) as e:
            decode.read_image(str(p), decode.image_setup("cpu", "RGB"))
        assert str(e.value) == str(it.error)


@pytest.mark.parametrize("what", ["missing", "directory", "fifo"])
def test_a_file_that_cannot_be_read_fails_the_group_call(tmp_path, what):
    paths = _files(make_folder(tmp_path / "img", classes=1, per_class=2))
    odd = tmp_path / "odd.jpg"
    if what == "directory":
        odd.mkdir()
    elif what == "fifo":
        os.mkfifo(odd)  # refused by its type, never opened for reading (which would block)
    with pytest.raises(OSError, match="odd.jpg"):
        decode.read_images([paths[0], str(odd), paths[1]], None, decode.image_setup("cpu", "RGB"), pin=False)


# ---- the producer's group read over the CPU target ---------------------------------------------------


def _grouping_producer(loader):
    """The loader's producer with its GPU group read switched on over the CPU target (no streams: the
    read stream's context and event are no-ops, the copy to the 'device' is the host buffer itself)."""
    prod = Producer(loader._plan(0, 0), queue.Queue(), threading.Event())
    prod.cuda, prod.image_setup = True, decode.image_setup("cpu", loader.image_mode)
    prod._on = lambda which: contextlib.nullcontext()
    prod._event = lambda which, timing=False: None
    return prod


def test_the_producer_reads_a_group_in_one_call_and_counts_each_image(tmp_path, monkeypatch):
    folder = make_folder(tmp_path / "img", classes=2, per_class=4)
    loader = Loader(folder, 8, device="cpu")
    prod = _grouping_producer(loader)
    calls = []
    real = decode.read_images
    monkeypatch.setattr(decode, "read_images", lambda *a, **kw: calls.append(a[0]) or real(*a, **kw))
    idx = np.arange(8)
    g, ev = prod._read_images(idx, [0, 3, 5])
    assert ev is None and isinstance(g, _Group) and len(g.samples) == 3 and g.events == [None]
    paths = [loader._plan(0, 0).table.files.paths[i] for i in (0, 3, 5)]
    assert calls == [paths]  # one call for the group
    assert all(isinstance(it, Item) and it.error is None and it.name == p for it, p in zip(g.samples, paths))
    st = prod.plan.meter.snapshot()
    assert st.io_backends == {"pinned": 3} and st.bytes_read == sum(os.path.getsize(p) for p in paths)


def test_a_group_whose_read_fails_is_read_one_by_one_naming_the_bad_file(tmp_path):
    folder = make_folder(tmp_path / "img", classes=1, per_class=4)
    loader = Loader(folder, 4, device="cpu")
    prod = _grouping_producer(loader)
    paths = prod.plan.table.files.paths
    os.remove(paths[2])
    g, _ = prod._read_images(np.arange(4), [0, 1, 2, 3])
    assert [type(x).__name__ for x in g.samples] == ["Item", "Item", "FileNotFoundError", "Item"]
    assert paths[2] in str(g.samples[2])
    assert [it.name for k, it in enumerate(g.samples) if k != 2] == [paths[k] for k in (0, 1, 3)]


def test_the_group_read_is_taken_only_for_images_without_gds(tmp_path):
    folder = make_folder(tmp_path / "img", classes=1, per_class=4)
    loader = Loader(folder, 4, device="cpu")
    prod = Producer(loader._plan(0, 0), queue.Queue(), threading.Event())
    assert not prod.group_images  # the CPU: reader threads decode
    prod.cuda = True
    assert prod._group_images()  # no GDS here (no GPU): the group read
    with gdsio.settings(backend="pinned"):
        assert prod._group_images()
    with gdsio.settings(backend="kvikio"):
        assert not prod._group_images()  # a backend asked for by name reads each image itself


def test_where_true_gds_runs_each_image_goes_storage_to_device(tmp_path, monkeypatch):
    import dataclasses

    from gdsio.data import producer as producer_module

    folder = make_folder(tmp_path / "img", classes=1, per_class=4)
    loader = Loader(folder, 4, device="cpu")
    prod = Producer(loader._plan(0, 0), queue.Queue(), threading.Event())
    prod.cuda = True
    table = producer_module.BACKENDS  # the I/O engine's table (gdsio.io.backends), as the producer sees it
    monkeypatch.setitem(table, "gds", dataclasses.replace(table["gds"], probe=lambda reader, device: (None, "")))
    assert not prod._group_images()  # gds's probe says it runs: read_image, one engine read per image
    with gdsio.settings(backend="pinned"):
        assert prod._group_images()  # asked for by name: the pinned path, a group at a time


# ---- on a GPU --------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_bad_files_among_good_ones_skip_on_the_gpu_as_on_the_cpu(tmp_path):
    from test_loader_gpu import jpeg_folder, train_tf

    folder = jpeg_folder(tmp_path)
    files = sorted(folder.rglob("*.jpg"))
    files[3].write_bytes(b"\xff\xd8\xff\xe0" + bytes(40))  # a corrupt header: its item fails, its group reads on
    files[11].write_bytes(b"")
    kw = dict(shuffle=True, seed=4, transform=train_tf(), on_error="skip")
    gpu, cpu = Loader(folder, 8, device="cuda", **kw), Loader(folder, 8, device="cpu", **kw)
    os.remove(files[25])  # after the scan: its group's read fails, and its images are read one by one
    got = [(x.cpu(), y.cpu()) for x, y in gpu]
    want = list(cpu)
    assert len(got) == len(want) and sum(len(y) for _, y in got) == 37
    for (gx, gy), (cx, cy) in zip(got, want):
        assert torch.equal(gy, cy) and float((gx - cx).abs().mean()) < 0.05
    st = gpu.stats()
    assert set(st.io_backends) <= {"gds", "cufile", "cufile-compat", "pinned", "kvikio"}, st.io_backends
    assert sum(st.decode_backends.values()) == 37
    with pytest.raises(gdsio.SampleError, match="|".join(re.escape(files[k].name) for k in (3, 11, 25))):
        list(Loader(folder, 8, device="cuda", shuffle=True, seed=4, transform=train_tf()))


@pytest.mark.gpu
def test_a_group_is_one_copy_to_the_device_and_decodes_from_there(tmp_path):
    from test_loader_gpu import jpeg_folder

    paths = _files(jpeg_folder(tmp_path, n=12))
    setup = decode.image_setup("cuda", "RGB")
    items, buf = decode.read_images(paths, None, setup, pin=True)
    assert buf.is_pinned()
    dev = buf.cuda()
    for it in items:
        at, n = it.data.storage_offset(), it.data.numel()
        assert at % 256 == 0
        it.data = dev[at : at + n]
    images, errors, backends = decode.decode_items(items, setup)
    assert not errors
    cpu, _, _ = decode.decode_items(decode.read_images(paths, None, decode.image_setup("cpu", "RGB"), pin=False)[0],
                                    decode.image_setup("cpu", "RGB"))
    for g, c in zip(images, cpu):
        assert g.shape == c.shape and float((g.cpu().float() - c.float()).abs().mean()) < 2.0
