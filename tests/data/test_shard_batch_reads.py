"""The CPU Loader's per-image work over local tar shards and files: a
batch's members of local shards are read in one engine call (not a ranged
read each), a read that fails still names its sample, and CPU JPEGs take
decode's one-call core path with the same pixels and decoder name. What is
checked is which calls ran and what came out, never how long they took."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from PIL import Image

import gdsio
import gdsio.data as gd
from gdsio import _core
from gdsio.data import Loader, SampleError, write_shards
from gdsio.data import producer
from gdsio.image import batch

from conftest import batches, same_batches as same


def make_folder(root, classes=3, per_class=5, size=(40, 30), seed=0):
    """An ImageFolder of small JPEGs (random pixels, one size: batches stack)."""
    rng = np.random.default_rng(seed)
    for c in range(classes):
        d = root / f"c{c}"
        d.mkdir(parents=True)
        for i in range(per_class):
            a = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
            Image.fromarray(a).save(d / f"{i:03d}.jpg", format="JPEG", quality=90)
    return root


@pytest.fixture
def shards(tmp_path):
    folder = make_folder(tmp_path / "img")
    paths = write_shards(folder, tmp_path / "shards", shard_bytes=12000)
    assert len(paths) > 2
    return folder, paths


def test_local_shards_read_each_batch_of_members_in_one_call(shards, monkeypatch):
    folder, paths = shards
    calls = []
    real = _core.read_paths

    def read_paths(dst, reads, *, threads):
        calls.append(len(reads))
        return real(dst, reads, threads=threads)

    def no_ranged_read(*args, **kwargs):
        raise AssertionError("a ranged read per member")

    monkeypatch.setattr(_core, "read_paths", read_paths)
    monkeypatch.setattr(producer, "read_shard_range", no_ranged_read)
    for kw in (dict(shuffle=True, seed=5), dict(shuffle=False)):
        calls.clear()
        b = Loader(paths, 4, device="cpu", transform=gd.Resize((16, 16)), **kw)
        same(batches(Loader(folder, 4, device="cpu", transform=gd.Resize((16, 16)), **kw)), batches(b))
        assert calls == [4, 4, 4, 3]  # one call a batch, every member of the batch in it
        st = b.stats()  # counted as before: one read a sample, the members' bytes only
        assert st.io_backends == {"posix": 15} and st.bytes_read == int(gd.scan(paths).ranges[:, 1].sum())
    # A random crop decodes only its box, from the batch's bytes as from a ranged read's.
    tf = gd.Compose([gd.RandomResizedCrop(6), gd.RandomHorizontalFlip()])
    same(batches(Loader(folder, 4, device="cpu", shuffle=True, seed=3, transform=tf)),
         batches(Loader(paths, 4, device="cpu", shuffle=True, seed=3, transform=tf)))
    # A cache's hits are not read again: the second epoch makes no read.
    cached = Loader(paths, 4, device="cpu", cache=gd.Cache(bytes="4M", where="cpu"))
    first = batches(cached)
    calls.clear()
    cached.set_epoch(1)
    same(first, batches(cached))
    assert calls == []


def test_a_batch_read_that_fails_names_each_sample(shards, caplog):
    folder, paths = shards
    loader = Loader(paths, 4, device="cpu")  # indexed whole; then the last shard loses its end
    skip = Loader(paths, 4, device="cpu", on_error="skip")
    t = gd.scan(paths)
    last = paths[-1]
    lost = [i for i in range(len(t)) if t.files.paths[i] == last][-1]  # the last sample of the last shard
    with open(last, "r+b") as f:
        f.truncate(int(t.ranges[lost, 0]) + 1)
    with pytest.raises(SampleError, match="member") as e:
        list(loader)
    assert e.value.index == lost and last in str(e.value)
    with caplog.at_level(logging.WARNING, logger="gdsio"):
        out = batches(skip)
    kept = sum(len(y) for _, y in out)
    assert kept == len(t) - 1 and f"skipping sample {lost}" in caplog.text
    full = batches(Loader(folder, 4, device="cpu"))
    same(full[:-1], out[:-1])  # the batches before the lost sample's are whole and the folder's


def test_cpu_jpegs_take_decodes_one_call_path(tmp_path, monkeypatch):
    folder = make_folder(tmp_path / "img", classes=2, per_class=3)
    files = sorted(str(p) for p in folder.glob("*/*.jpg"))
    def steps(path, mode):  # return_info: image.decode's batch steps, never its one-call path
        img, info = gdsio.image.decode(gdsio.read(path, device="cpu"), mode=mode, return_info=True)
        assert info.backend == "libjpeg-turbo"
        return img

    expected = [steps(p, "RGB") for p in files]

    def no_batch_steps(*args, **kwargs):
        raise AssertionError("the batch steps ran for a plain CPU JPEG")

    monkeypatch.setattr(batch, "run", no_batch_steps)
    loader = Loader(files, 3, device="cpu")
    got = [img for x, _ in loader for img in x]
    assert all(torch.equal(a, b) for a, b in zip(got, expected)) and len(got) == len(files)
    assert loader.stats().decode_backends == {"libjpeg-turbo": len(files)}  # the name the batch steps give
    gray = [img for x, _ in Loader(files, 3, device="cpu", image_mode="GRAY") for img in x]
    monkeypatch.undo()
    assert all(torch.equal(a, steps(p, "GRAY")) for a, p in zip(gray, files)) and len(gray) == len(files)
