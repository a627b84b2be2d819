"""gdsio.Loader on the CPU: sources, order, sharding, resumption, errors,
threads, memory and the cache. Samples are npy files or raw records whose
values encode their index, so every batch can be checked exactly."""

from __future__ import annotations

import _thread
import ctypes
import gc
import json
import logging
import os
import re
import signal
import threading
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gdsio.data as gd
from gdsio.data import Cache, FileList, Loader, SampleError, ShardedOrder
from gdsio.transforms.classes import BatchInfo, current_batch, uniforms

from conftest import cpu_jpeg, os_threads, resumed_after


def make_npy_folder(root, classes=3, per_class=10, shape=(2, 4, 4)):
    """ImageFolder layout; sample k (in sorted order) holds the value k everywhere."""
    k = 0
    for c in range(classes):
        d = root / f"class{c}"
        d.mkdir(parents=True)
        for i in range(per_class):
            np.save(d / f"{i:03d}.npy", np.full(shape, k, np.int32))
            k += 1
    return root


def make_raw(path, n, shape=(3, 2, 2)):
    data = np.zeros((n, *shape), np.int32)
    data[:] = np.arange(n, dtype=np.int32).reshape(n, *([1] * len(shape)))
    data.tofile(path)
    return path


def ids(batch):
    return batch.reshape(batch.shape[0], -1)[:, 0].tolist()


def run(loader):
    return [(ids(x), y.tolist()) for x, y in loader]


class AddNoise(gd.BatchTransform):
    """A random batch transform of one's own, drawing from the loader's (seed, epoch, index)."""

    def __call__(self, samples):
        info = current_batch()
        u = uniforms(info, salt=7, count=1)[:, 0]
        out = torch.stack(samples).to(torch.float64)
        return out + torch.as_tensor(u).view(-1, *([1] * (out.dim() - 1)))


def thread_counts():
    return len(threading.enumerate()), os_threads()


# ---- sources ---------------------------------------------------------------------


def test_image_folder_layout(tmp_path):
    make_npy_folder(tmp_path / "ds", classes=3, per_class=4)
    (tmp_path / "ds" / "class1" / "sub").mkdir()
    np.save(tmp_path / "ds" / "class1" / "sub" / "z.npy", np.full((2, 4, 4), 99, np.int32))
    (tmp_path / "ds" / "class2" / "notes.txt").write_text("not a sample")
    loader = Loader(tmp_path / "ds", 100, device="cpu")
    assert loader.kind == "npy" and loader.classes == ["class0", "class1", "class2"]
    (x, y), = list(loader)
    # torchvision's order: classes sorted, os.walk sorted, files sorted; nested folders belong to their class.
    assert ids(x) == [0, 1, 2, 3, 4, 5, 6, 7, 99, 8, 9, 10, 11]
    assert y.tolist() == [0] * 4 + [1] * 5 + [2] * 4
    assert y.dtype == torch.int64


def test_sources_glob_list_pairs_flat(tmp_path):
    make_npy_folder(tmp_path, classes=2, per_class=3)
    paths = sorted(str(p) for p in tmp_path.glob("*/*.npy"))
    (x, y), = list(Loader(str(tmp_path / "*" / "*.npy"), 10, device="cpu"))
    assert ids(x) == list(range(6)) and y.tolist() == [-1] * 6
    (x, y), = list(Loader(paths[::-1], 10, device="cpu"))
    assert ids(x) == list(range(6))[::-1] and y.tolist() == [gd.UNLABELED] * 6
    (x, y), = list(Loader([(p, 7 + i) for i, p in enumerate(paths)], 10, device="cpu"))
    assert y.tolist() == [7, 8, 9, 10, 11, 12]
    (x, y), = list(Loader(FileList.from_paths(paths, labels=[5] * 6), 10, device="cpu"))
    assert y.tolist() == [5] * 6
    (x, y), = list(Loader(tmp_path / "class1", 10, device="cpu"))  # no sub-folders: unlabeled files
    assert ids(x) == [3, 4, 5] and y.tolist() == [-1] * 3


def test_source_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a file, a folder nor a glob"):
        Loader(tmp_path / "missing", 4, device="cpu")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    np.save(tmp_path / "a" / "x.npy", np.zeros(3))
    with pytest.raises(ValueError, match="class folder.*b"):
        Loader(tmp_path, 4, device="cpu", kind="npy")
    (tmp_path / "b" / "y.bin").write_bytes(b"12345678")
    with pytest.raises(ValueError, match="class folder.*b"):
        Loader(tmp_path, 4, device="cpu")  # auto: .npy and images only
    (tmp_path / "b" / "z.ppm").write_bytes(b"P6 1 1 255 abc")
    with pytest.raises(ValueError, match=r"found both images and \.npy files.*\.npy, \.ppm"):
        Loader(tmp_path, 4, device="cpu")
    with pytest.raises(ValueError, match="pass kind='raw' and record_shape"):
        Loader(str(tmp_path / "b" / "*.bin"), 4, device="cpu")
    with pytest.raises(ValueError, match="needs record_shape"):
        Loader(tmp_path / "b" / "y.bin", 4, device="cpu", kind="raw")
    with pytest.raises(ValueError, match=r"y\.bin' holds 8 bytes, not a whole number of 12-byte records"):
        Loader(tmp_path / "b" / "y.bin", 4, device="cpu", kind="raw", record_shape=(3,), record_dtype=torch.int32)
    with pytest.raises(ValueError, match="kind must be one of"):
        Loader(tmp_path, 4, device="cpu", kind="jpeg")
    with pytest.raises(TypeError, match="source must be"):
        Loader(42, 4, device="cpu")
    with pytest.raises(ValueError, match="holds no file"):
        Loader(str(tmp_path / "*.none"), 4, device="cpu")



def test_no_samples_is_one_rule_for_every_source(tmp_path, monkeypatch):
    """A source that exists but holds no sample with the extensions looked for
    raises ValueError naming it and the extensions, whatever the source; one
    that names nothing (a missing path, an s3 prefix with no object: S3 has no
    empty folders) raises FileNotFoundError."""
    from gdsio.io import s3

    (tmp_path / "empty").mkdir()
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("not a sample")
    (tmp_path / "classes" / "a").mkdir(parents=True)
    (tmp_path / "classes" / "b").mkdir()
    np.save(tmp_path / "classes" / "a" / "x.npy", np.zeros(3))
    (tmp_path / "classes" / "b" / "notes.txt").write_text("not a sample")
    keys = {"texts/a.txt": 1, "classes/a/x.png": 1, "classes/b/notes.txt": 1}
    monkeypatch.setattr(s3, "list_objects", lambda bucket, prefix: iter(sorted(
        (k, n) for k, n in keys.items() if k.startswith(prefix))))
    for source, named in [
        (tmp_path / "empty", re.escape(str(tmp_path / "empty"))),
        (tmp_path / "texts", re.escape(str(tmp_path / "texts"))),
        (tmp_path / "classes", re.escape(str(tmp_path / "classes")) + ".*class folder.* b"),
        (str(tmp_path / "*.none"), re.escape(str(tmp_path / "*.none"))),
        ("s3://bkt/texts/", "s3://bkt/texts/"),
        ("s3://bkt/classes/", "s3://bkt/classes/.*class prefix.* b"),
        ("s3://bkt/classes/*.none", re.escape("s3://bkt/classes/*.none")),
    ]:
        with pytest.raises(ValueError, match=named) as e:
            Loader(source, 4, device="cpu")
        assert not isinstance(e.value, OSError), source
        assert ".jpg" in str(e.value) and ".npy" in str(e.value), str(e.value)  # the extensions looked for
    with pytest.raises(FileNotFoundError, match="s3://bkt/nothing/"):
        Loader("s3://bkt/nothing/", 4, device="cpu")
    with pytest.raises(FileNotFoundError, match="neither a file, a folder nor a glob"):
        Loader(tmp_path / "missing", 4, device="cpu")


class ImageFolderLike:
    """What gdsio.Loader reads of a torchvision ImageFolder (or DatasetFolder):
    ``samples``, ``class_to_idx``, ``transform``, ``target_transform``, ``loader``."""

    def __init__(self, samples, class_to_idx, root="data", **attrs):
        self.samples, self.class_to_idx, self.root = samples, class_to_idx, root
        self.transform = self.target_transform = self.transforms = None
        self.__dict__.update(attrs)


def _torchvision_default_loader(path):  # stands for torchvision.datasets.folder.default_loader
    raise AssertionError("gdsio reads the files itself")


_torchvision_default_loader.__module__ = "torchvision.datasets.folder"
_torchvision_default_loader.__name__ = _torchvision_default_loader.__qualname__ = "default_loader"


def test_an_image_folder_dataset_is_a_source(tmp_path):
    make_npy_folder(tmp_path, classes=2, per_class=3)  # sample k holds k
    paths = sorted(str(p) for p in tmp_path.glob("*/*.npy"))
    # The dataset's own order and labels (here not the folder's), classes from class_to_idx by index.
    samples = [(paths[4], 0), (paths[0], 1), (paths[5], 0), (paths[1], 1)]
    ds = ImageFolderLike(samples, {"zebra": 1, "ant": 0}, loader=_torchvision_default_loader)
    loader = Loader(ds, 10, device="cpu")
    assert loader.classes == ["ant", "zebra"] and loader.dataset.class_to_idx == {"ant": 0, "zebra": 1}
    assert list(loader.dataset.samples) == samples
    (x, y), = list(loader)
    assert ids(x) == [4, 0, 5, 1] and y.tolist() == [0, 1, 0, 1]
    assert list(Loader(ImageFolderLike(samples[:1], {"ant": 0}), 4, device="cpu"))[0][1].tolist() == [0]

    for attrs, err, match in [
        (dict(transform=lambda im: im), ValueError, r"transform is set.*gdsio\.Loader's transform="),
        (dict(target_transform=int), ValueError, r"target_transform is set"),
        (dict(transforms=object()), ValueError, r"transforms is set"),
        (dict(loader=np.load), ValueError, r"loader=numpy\.load is not torchvision's default_loader.*gdsio\.Loader\(ds\.samples"),
        (dict(class_to_idx={"ant": 0, "zebra": 2}), ValueError, r"class_to_idx.*0\.\.1.*\[0, 2\]"),
        (dict(samples=[(paths[0], 1)], class_to_idx={"ant": 0}), ValueError, r"label 1.*not in class_to_idx"),
        (dict(samples=[paths[0]]), TypeError, r"samples must hold \(path, class_index\) pairs"),
        (dict(samples=[]), ValueError, r"no sample in the ImageFolderLike of 'data'"),
        (dict(samples=[("notes.txt", 0)]), ValueError, r"cannot tell the kind of the \.txt files in the ImageFolderLike"),
    ]:
        kw = {"samples": samples, "class_to_idx": {"ant": 0, "zebra": 1}, **attrs}
        with pytest.raises(err, match=match):
            Loader(ImageFolderLike(**kw), 4, device="cpu")


# Every keyword of torch's DataLoader that gdsio.Loader does not take, and the
# gdsio argument (or fact) its message must name.
DATALOADER_ONLY = {
    "num_workers": "threads=",
    "pin_memory": "device=",
    "pin_memory_device": "device=",
    "persistent_workers": "each pass",
    "prefetch_factor": "prefetch=",
    "collate_fn": "BatchLambda",
    "sampler": "shuffle=",
    "batch_sampler": "batch_size=",
    "worker_init_fn": "no worker processes",
    "multiprocessing_context": "no worker processes",
    "timeout": "no worker processes",
    "generator": "seed=",
    "in_order": "in order",
}


def test_dataloader_arguments_are_refused_with_what_gdsio_does_instead(tmp_path):
    import inspect

    make_npy_folder(tmp_path, classes=1, per_class=2)
    ours = set(inspect.signature(Loader).parameters)
    theirs = set(inspect.signature(torch.utils.data.DataLoader.__init__).parameters) - {"self", "dataset"}
    assert theirs - ours == set(DATALOADER_ONLY)  # every DataLoader keyword is either taken or answered
    for name, says in DATALOADER_ONLY.items():
        with pytest.raises(TypeError, match=f"gdsio.Loader does not take DataLoader's {name}=") as e:
            Loader(tmp_path, 4, device="cpu", **{name: 2})
        assert says in str(e.value), (name, str(e.value))
    with pytest.raises(TypeError, match="unexpected keyword argument 'shufle'"):
        Loader(tmp_path, 4, device="cpu", shufle=True)


def test_argument_errors(tmp_path):
    make_npy_folder(tmp_path)
    for kw, msg in [
        (dict(on_error="ignore"), "on_error must be"),
        (dict(prefetch=0), "prefetch must be a positive int"),
        (dict(threads=0), "threads must be a positive int"),
        (dict(rank=2, world_size=2), r"rank must be an int in \[0, world_size=2\)"),
        (dict(seed=-1), "seed must be a non-negative int"),
        (dict(device="tpu"), "device must be"),
        (dict(image_mode="CMYK"), "image_mode must be"),
    ]:
        with pytest.raises(ValueError, match=msg):
            Loader(tmp_path, 4, device=kw.pop("device", "cpu"), **kw)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        Loader(tmp_path, 0, device="cpu")
    with pytest.raises(TypeError, match="transform must be callable"):
        Loader(tmp_path, 4, device="cpu", transform="flip")


def test_cuda_device_without_cuda_names_the_reason(tmp_path, monkeypatch):
    from gdsio import BackendUnavailable
    from gdsio.platform import nvidia

    make_npy_folder(tmp_path)
    monkeypatch.setattr(nvidia, "cuda_unusable_reason", lambda: "no NVIDIA driver is installed")
    with pytest.raises(BackendUnavailable, match='cannot load batches into cuda: no NVIDIA driver is installed; pass device="cpu"'):
        Loader(tmp_path, 4)  # the default device is cuda


def test_raw_records_one_file_and_one_per_file(tmp_path):
    make_raw(tmp_path / "all.bin", 10)
    loader = Loader(tmp_path / "all.bin", 4, device="cpu", kind="raw", record_shape=(3, 2, 2), record_dtype=torch.int32)
    got = list(loader)
    assert [ids(x) for x, _ in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert got[0][0].shape == (4, 3, 2, 2) and got[0][0].dtype == torch.int32
    assert got[0][1].tolist() == [-1] * 4
    # ImageFolder of shards: a file's label applies to each of its records.
    for c, n in (("cat", 3), ("dog", 2)):
        (tmp_path / "f" / c).mkdir(parents=True)
        make_raw(tmp_path / "f" / c / "shard.bin", n)
    loader = Loader(tmp_path / "f", 8, device="cpu", kind="raw", record_shape=(3, 2, 2), record_dtype=torch.int32)
    (x, y), = list(loader)
    assert ids(x) == [0, 1, 2, 0, 1] and y.tolist() == [0, 0, 0, 1, 1]


# ---- order, sharding, epochs -----------------------------------------------------------


@pytest.mark.parametrize("n,world,drop_last", [(10, 3, False), (10, 3, True), (7, 4, False), (12, 4, True)])
def test_sharding_matches_distributed_sampler(n, world, drop_last):
    from torch.utils.data import DistributedSampler

    shares = []
    for r in range(world):
        mine = ShardedOrder(n, batch_size=2, rank=r, world_size=world, drop_last=drop_last).indices(0).tolist()
        ref = list(DistributedSampler(range(n), num_replicas=world, rank=r, shuffle=False, drop_last=drop_last))
        assert mine == ref
        shares.append(mine)
    assert len({len(s) for s in shares}) == 1


@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_shuffled_shards_are_disjoint_equal_and_cover(world):
    n = 23
    for epoch in (0, 1):
        shares = [ShardedOrder(n, batch_size=4, shuffle=True, seed=3, rank=r, world_size=world,
                               drop_last=True).indices(epoch) for r in range(world)]
        flat = np.concatenate(shares)
        assert len({len(s) for s in shares}) == 1 and len(set(flat.tolist())) == len(flat) == (n // world) * world
        padded = np.concatenate([ShardedOrder(n, batch_size=4, shuffle=True, seed=3, rank=r, world_size=world)
                                 .indices(epoch) for r in range(world)])
        assert set(padded.tolist()) == set(range(n))
    a = ShardedOrder(n, batch_size=4, shuffle=True, seed=3).indices(0)
    assert not np.array_equal(a, ShardedOrder(n, batch_size=4, shuffle=True, seed=3).indices(1))
    assert not np.array_equal(a, ShardedOrder(n, batch_size=4, shuffle=True, seed=4).indices(0))


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 300), world=st.integers(1, 9), batch=st.integers(1, 40), drop_last=st.booleans(),
       shuffle=st.booleans(), seed=st.integers(0, 2**31), epoch=st.integers(0, 1000))
def test_order_properties(n, world, batch, drop_last, shuffle, seed, epoch):
    if drop_last and n < world:
        with pytest.raises(ValueError, match="cannot be shared"):
            ShardedOrder(n, batch_size=batch, world_size=world, drop_last=True)
        return
    orders = [ShardedOrder(n, batch_size=batch, shuffle=shuffle, seed=seed, rank=r, world_size=world,
                           drop_last=drop_last) for r in range(world)]
    shares = [o.indices(epoch) for o in orders]
    assert len({len(s) for s in shares}) == 1
    flat = np.concatenate(shares)
    if drop_last:
        assert len(set(flat.tolist())) == len(flat) == n - n % world
    else:
        assert set(flat.tolist()) == set(range(n)) and len(flat) - n < world
    for o, share in zip(orders, shares):
        got = list(o.batches(epoch))
        assert len(got) == len(o) and all(len(b) == batch for b in got[:-1])
        if not got:  # drop_last with fewer samples than a batch: none, as torch's DataLoader
            assert drop_last and len(share) < batch
            continue
        assert 0 < len(got[-1]) <= batch
        joined = np.concatenate(got)
        assert np.array_equal(joined, share[: len(joined)]) and (drop_last or len(joined) == len(share))
        assert [b.tolist() for b in o.batches(epoch, start=len(got) // 2)] == [b.tolist() for b in got[len(got) // 2 :]]


def test_len_and_drop_last(tmp_path):
    make_npy_folder(tmp_path, classes=1, per_class=10)
    assert len(Loader(tmp_path, 4, device="cpu")) == 3
    assert [len(x) for x, _ in Loader(tmp_path, 4, device="cpu")] == [4, 4, 2]
    assert len(Loader(tmp_path, 4, device="cpu", drop_last=True)) == 2
    assert [len(x) for x, _ in Loader(tmp_path, 4, device="cpu", drop_last=True)] == [4, 4]
    # 10 samples on 3 ranks: 4 each with padding, 3 each with drop_last.
    assert sum(len(x) for x, _ in Loader(tmp_path, 2, device="cpu", rank=2, world_size=3)) == 4
    assert sum(len(x) for x, _ in Loader(tmp_path, 2, device="cpu", rank=2, world_size=3, drop_last=True)) == 2


@pytest.mark.parametrize("n, batch, world", [(10, 4, 1), (10, 3, 3), (7, 2, 4), (12, 4, 4), (13, 5, 2), (5, 8, 1)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_len_matches_the_batches_and_distributed_sampler(tmp_path, n, batch, world, drop_last):
    from torch.utils.data import BatchSampler, DistributedSampler

    src = make_raw(tmp_path / "r.bin", n)
    kw = dict(kind="raw", record_shape=(3, 2, 2), record_dtype=torch.int32, device="cpu", drop_last=drop_last)
    for rank in range(world):
        loader = Loader(src, batch, world_size=world, rank=rank, **kw)
        assert (loader.batch_size, loader.drop_last) == (batch, drop_last)
        got = run(loader)
        ds = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False, drop_last=drop_last)
        want = [list(b) for b in BatchSampler(ds, batch, drop_last)]  # what a DataLoader over it yields
        assert len(loader) == len(got) == len(want) and [b for b, _ in got] == want


@pytest.mark.parametrize("drop_last", [False, True])
def test_resume_is_exact_with_drop_last(tmp_path, drop_last):
    src = make_raw(tmp_path / "r.bin", 23)
    kw = dict(kind="raw", record_shape=(3, 2, 2), record_dtype=torch.int32, device="cpu", shuffle=True, seed=3,
              world_size=2, rank=1, drop_last=drop_last)
    full = run(Loader(src, 4, **kw))
    assert len(full) == (2 if drop_last else 3)
    first = Loader(src, 4, **kw)
    it = iter(first)
    next(it)
    state = json.loads(json.dumps(first.state_dict()))
    del it
    assert state["drop_last"] is drop_last
    again = Loader(src, 4, **kw)
    again.load_state_dict(state)
    assert run(again) == full[1:]
    with pytest.raises(ValueError, match=f"drop_last={drop_last} in the state, {not drop_last} in this loader"):
        Loader(src, 4, **dict(kw, drop_last=not drop_last)).load_state_dict(state)


def test_dataset_is_what_imagefolder_code_reads(tmp_path):
    from PIL import Image

    from gdsio import image as gi

    make_npy_folder(tmp_path / "npy", classes=2, per_class=3)
    ds = Loader(tmp_path / "npy", 4, device="cpu", world_size=2, rank=1).dataset
    assert len(ds) == 6 and ds.classes == ["class0", "class1"] and ds.class_to_idx == {"class0": 0, "class1": 1}
    assert ds.targets == [0, 0, 0, 1, 1, 1] and ds.kind == "npy"
    path, label = ds.samples[4]
    assert path.endswith("class1/001.npy") and label == 1 and ds.imgs[4] == ds.samples[4] and len(ds.samples) == 6
    x, y = ds[4]
    assert y == 1 and torch.equal(x, torch.full((2, 4, 4), 4, dtype=torch.int32))
    assert ds[-1][0][0, 0, 0] == 5 and ds.samples[-2:] == [ds.samples[4], ds.samples[5]]
    with pytest.raises(IndexError, match="sample index 6 is out of range for 6 samples"):
        ds[6]
    with pytest.raises(TypeError, match="indices must be integers"):
        ds["a"]
    # Images: decoded as the loader decodes them (its mode), before its transform.
    (tmp_path / "img/cat").mkdir(parents=True)
    a = np.random.default_rng(0).integers(0, 256, (6, 5), dtype=np.uint8)
    Image.fromarray(a).save(tmp_path / "img/cat/0.png")
    loader = Loader(tmp_path / "img", 1, device="cpu", image_mode="RGB", transform=lambda t: t[:, :2, :2])
    img, label = loader.dataset[0]
    assert label == 0 and torch.equal(img, gi.read(tmp_path / "img/cat/0.png", device="cpu", mode="RGB"))
    assert img.shape == (3, 6, 5) and loader.dataset is loader.dataset
    # Raw records: one record per index; samples name the file holding it.
    raw = Loader(make_raw(tmp_path / "r.bin", 5), 2, kind="raw", record_shape=(3, 2, 2), record_dtype=torch.int32,
                 device="cpu").dataset
    assert len(raw) == 5 and raw.classes == [] and raw.targets == [-1] * 5 and raw.samples[3] == (str(tmp_path / "r.bin"), -1)
    assert torch.equal(raw[3][0], torch.full((3, 2, 2), 3, dtype=torch.int32))
    # A DataLoader takes it as a map-style dataset.
    xs = [x for x, _ in torch.utils.data.DataLoader(ds, batch_size=3)]
    assert [int(x[0, 0, 0, 0]) for x in xs] == [0, 3]


def test_epochs_advance_and_set_epoch(tmp_path):
    make_npy_folder(tmp_path)
    loader = Loader(tmp_path, 8, device="cpu", shuffle=True, seed=5)
    e0 = run(loader)
    assert loader.epoch == 1
    e1 = run(loader)
    assert e0 != e1 and sorted(sum((b for b, _ in e0), [])) == list(range(30))
    loader.set_epoch(0)
    assert run(loader) == e0
    again = Loader(tmp_path, 8, device="cpu", shuffle=True, seed=5)
    assert run(again) == e0 and run(again) == e1


@pytest.mark.parametrize("kind", ["npy", "raw"])
@pytest.mark.parametrize("stop_at", [0, 1, 3])
def test_resume_mid_epoch_yields_the_rest(tmp_path, kind, stop_at):
    if kind == "npy":
        make_npy_folder(tmp_path, classes=3, per_class=9)
        src, kw = tmp_path, {}
    else:
        src, kw = make_raw(tmp_path / "r.bin", 27), dict(kind="raw", record_shape=(3, 2, 2), record_dtype=torch.int32)
    common = dict(device="cpu", shuffle=True, seed=11, transform=AddNoise(), world_size=2, rank=1, prefetch=2, **kw)
    ref = Loader(src, 3, **common)
    ref.set_epoch(4)
    full = [(x.clone(), y.clone()) for x, y in ref]
    first = Loader(src, 3, **common)
    first.set_epoch(4)
    it = iter(first)
    for _ in range(stop_at):
        next(it)
    state = json.loads(json.dumps(first.state_dict()))  # plain JSON
    assert state["epoch"] == 4 and state["batches_done"] == stop_at
    del it
    resumed = Loader(src, 3, **common)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(full) - stop_at
    for (x, y), (rx, ry) in zip(rest, full[stop_at:]):
        assert torch.equal(x, rx) and torch.equal(y, ry)
    assert resumed.epoch == 5  # the resumed epoch ran to its end


def test_state_dict_checks(tmp_path):
    make_npy_folder(tmp_path)
    a = Loader(tmp_path, 4, device="cpu", shuffle=True)
    s = a.state_dict()
    with pytest.raises(ValueError, match="batch_size=4 in the state, 5 in this loader"):
        Loader(tmp_path, 5, device="cpu", shuffle=True).load_state_dict(s)
    with pytest.raises(ValueError, match="not a gdsio.Loader state"):
        a.load_state_dict({"epoch": 3})
    with pytest.raises(ValueError, match="bad position"):
        a.load_state_dict(dict(s, batches_done=99))
    end = dict(s, epoch=2, batches_done=len(a))
    a.load_state_dict(end)
    assert a.state_dict()["epoch"] == 3 and a.state_dict()["batches_done"] == 0


def test_break_then_iterate_restarts_the_epoch(tmp_path):
    make_npy_folder(tmp_path)
    loader = Loader(tmp_path, 4, device="cpu", shuffle=True)
    full = run(loader)
    loader.set_epoch(0)
    for _ in loader:
        break
    assert loader.state_dict()["batches_done"] == 1
    assert run(loader) == full  # not resumed: only load_state_dict resumes


# ---- transforms and shapes ------------------------------------------------------------------


def test_transform_gets_the_batch_info(tmp_path):
    make_npy_folder(tmp_path)
    seen = []

    def tf(samples):
        info = current_batch()
        seen.append((info.seed, info.epoch, info.indices.tolist()))
        assert isinstance(samples, list) and all(s.shape == (2, 4, 4) for s in samples)
        return torch.stack(samples)

    loader = Loader(tmp_path, 8, device="cpu", transform=gd.BatchLambda(tf), seed=9, shuffle=True)
    loader.set_epoch(2)
    got = run(loader)
    assert [s[:2] for s in seen] == [(9, 2)] * 4
    assert [s[2] for s in seen] == [b for b, _ in got]
    assert current_batch() is None


def test_random_draws_depend_on_seed_epoch_index_only():
    a = uniforms(BatchInfo(1, 2, np.array([5, 9, 5])), salt=3, count=4)
    assert a.shape == (3, 4) and np.array_equal(a[0], a[2]) and not np.array_equal(a[0], a[1])
    assert np.array_equal(uniforms(BatchInfo(1, 2, np.array([9])), 3, 4)[0], a[1])
    for other in (BatchInfo(2, 2, np.array([5])), BatchInfo(1, 3, np.array([5]))):
        assert not np.array_equal(uniforms(other, 3, 4)[0], a[0])
    assert not np.array_equal(uniforms(BatchInfo(1, 2, np.array([5])), 4, 4)[0], a[0])
    u = uniforms(BatchInfo(0, 0, np.arange(20000)), 0, 2)
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01


def test_different_shapes_name_two_sizes_and_files(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((3, 4, 4), np.uint8))
    np.save(tmp_path / "b.npy", np.zeros((3, 5, 4), np.uint8))
    with pytest.raises(ValueError, match=r"\(3, 4, 4\) \('.*a\.npy'\) and \(3, 5, 4\) \('.*b\.npy'\); pass a transform"):
        list(Loader(tmp_path, 2, device="cpu"))
    (x, _), = list(Loader(tmp_path, 2, device="cpu", transform=gd.BatchLambda(lambda s: torch.stack([t[:, :4] for t in s]))))
    assert x.shape == (2, 3, 4, 4)
    (x, _), = list(Loader(tmp_path, 2, device="cpu", transform=lambda t: t[:, :4]))  # per sample
    assert x.shape == (2, 3, 4, 4)


def test_transform_errors_reach_the_consumer(tmp_path):
    make_npy_folder(tmp_path)

    def bad(samples):
        raise ZeroDivisionError("boom")

    with pytest.raises(ZeroDivisionError, match="boom") as e:
        list(Loader(tmp_path, 4, device="cpu", transform=bad))
    assert any("batch 0 of epoch 0" in n for n in e.value.__notes__)
    assert any("run on sample 0 (" in n and "class0/000.npy" in n for n in e.value.__notes__)
    with pytest.raises(ValueError, match="must return a batch of 4 samples"):
        list(Loader(tmp_path, 4, device="cpu", transform=gd.BatchLambda(lambda s: s[0])))
    with pytest.raises(TypeError, match=r"must return a tensor for each sample; it returned tuple for sample 0 \('.*000.npy'\)"):
        list(Loader(tmp_path, 4, device="cpu", transform=lambda t: (t, 1)))


class FakeV2Resize:
    """Behaves as a torchvision v2 transform: one tensor in, one out; given a
    list (a pytree), it transforms the first image tensor only and passes the
    rest through, which is why the loader must not hand it the batch."""

    def __init__(self, size):
        self.size = size
        self.calls = []

    def __call__(self, inpt):
        if isinstance(inpt, list):
            return [self(inpt[0]), *inpt[1:]]
        self.calls.append((tuple(inpt.shape), inpt.dtype, str(inpt.device)))
        return torch.nn.functional.interpolate(inpt[None].float(), size=self.size, mode="nearest")[0].to(inpt.dtype)


def test_a_foreign_transform_runs_per_sample(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(1)
    for i in range(5):
        (tmp_path / f"c{i % 2}").mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (10 + i, 20 - i, 3), dtype=np.uint8)).save(tmp_path / f"c{i % 2}/{i}.png")
    tf = FakeV2Resize((8, 8))
    loader = Loader(tmp_path, 4, device="cpu", transform=tf)
    (x0, y0), (x1, y1) = list(loader)
    assert x0.shape == (4, 3, 8, 8) and x1.shape == (1, 3, 8, 8) and x0.dtype == torch.uint8
    assert len(tf.calls) == 5 and all(c[1] == torch.uint8 and c[2] == "cpu" and len(c[0]) == 3 for c in tf.calls)
    plain = Loader(tmp_path, 1, device="cpu", transform=gd.BatchLambda(lambda s: s))  # the decoded samples, untouched
    want = torch.stack([FakeV2Resize((8, 8))(s[0]) for s, _ in plain])
    assert torch.equal(torch.cat([x0, x1]), want) and torch.cat([y0, y1]).tolist() == [0, 0, 0, 1, 1]
    # Given the list, the same v2-like transform would leave every sample but the first alone:
    with pytest.raises(ValueError, match="samples of one batch differ in shape"):
        list(Loader(tmp_path, 4, device="cpu", transform=gd.BatchLambda(tf)))


def test_per_sample_outputs_of_different_shapes_say_what_to_do(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((3, 4, 4), np.uint8))
    np.save(tmp_path / "b.npy", np.zeros((3, 5, 4), np.uint8))
    with pytest.raises(ValueError, match=r"run on each sample, gave outputs of different shapes: \(3, 4, 4\) \('.*a\.npy'\) "
                                         r"and \(3, 5, 4\) \('.*b\.npy'\); .*v2\.Resize\(\(224, 224\)\)"):
        list(Loader(tmp_path, 2, device="cpu", transform=lambda t: t + 1))


class PerSampleNoise:
    """A random per-sample transform of one's own: draws from current_batch(),
    which names the one sample, so it replays exactly on resume."""

    def __call__(self, t):
        info = current_batch()
        assert len(info.indices) == 1
        return t.to(torch.float64) + float(uniforms(info, salt=3, count=1)[0, 0])


def test_per_sample_transform_resumes_exactly(tmp_path):
    make_npy_folder(tmp_path, classes=2, per_class=7)
    common = dict(device="cpu", shuffle=True, seed=2, transform=PerSampleNoise())
    full = [x for x, _ in Loader(tmp_path, 3, **common)]
    again, rest = resumed_after(lambda: Loader(tmp_path, 3, **common))
    assert len(rest) == len(full) - 2 and all(torch.equal(a, b) for a, b in zip(rest, full[2:]))
    # Per sample, the draw depends on the sample's index only, not on its place in a batch.
    by_index = {int(v[0, 0, 0]): float(v[0, 0, 0] % 1) for x in full for v in x}
    regrouped = {int(v[0, 0, 0]): float(v[0, 0, 0] % 1) for x, _ in Loader(tmp_path, 5, **common) for v in x}
    assert by_index == regrouped


# ---- errors --------------------------------------------------------------------------


def corrupt(tmp_path, name="class1/002.npy"):
    (tmp_path / name).write_bytes(b"\x93NUMPY garbage")
    return str(tmp_path / name)


def test_on_error_raise_names_the_file(tmp_path, no_leaks):
    make_npy_folder(tmp_path)
    bad = corrupt(tmp_path)
    before = thread_counts()
    loader = Loader(tmp_path, 4, device="cpu")
    with pytest.raises(SampleError, match=r"sample 12 \('.*class1/002\.npy'\): ValueError: .*unsupported \.npy format") as e:
        list(loader)
    assert e.value.path == bad and e.value.index == 12 and isinstance(e.value.__cause__, ValueError)
    assert thread_counts()[0] == before[0]


def test_on_error_skip_logs_and_shortens_the_batch(tmp_path, caplog):
    make_npy_folder(tmp_path)
    corrupt(tmp_path)
    loader = Loader(tmp_path, 4, device="cpu", on_error="skip")
    os.remove(tmp_path / "class2" / "000.npy")  # gone after the scan
    with caplog.at_level(logging.WARNING, logger="gdsio"):
        got = run(loader)
    assert [len(b) for b, _ in got] == [4, 4, 4, 3, 4, 3, 4, 2]
    assert 12 not in sum((b for b, _ in got), []) and 20 not in sum((b for b, _ in got), [])
    msgs = [r.getMessage() for r in caplog.records]
    assert any("skipping sample 12" in m and "002.npy" in m for m in msgs)
    assert any("skipping sample 20" in m and "FileNotFoundError" in m for m in msgs)


def test_a_batch_with_every_sample_skipped_is_not_yielded(tmp_path, caplog):
    make_npy_folder(tmp_path, classes=1, per_class=6)
    for i in (2, 3):
        corrupt(tmp_path, f"class0/{i:03d}.npy")
    loader = Loader(tmp_path, 2, device="cpu", on_error="skip")
    with caplog.at_level(logging.WARNING, logger="gdsio"):
        assert [b for b, _ in run(loader)] == [[0, 1], [4, 5]]
    assert loader.stats().skipped == 2 and loader.epoch == 1


# ---- threads never outlive the loop ------------------------------------------------------------


@pytest.fixture
def many(tmp_path):
    make_npy_folder(tmp_path, classes=2, per_class=40)
    loader = Loader(tmp_path, 2, device="cpu", threads=3, prefetch=2)
    run(loader)  # the engine's own pool is up; now count
    return loader


def back_to(base_py, base_os, timeout=10.0):
    """Python threads as before, OS threads no more (an OS thread leaves
    /proc/self/task a moment after join() returns)."""

    def ok():
        py, os_ = thread_counts()
        return py == base_py and os_ <= base_os

    t0 = time.monotonic()
    while not ok() and time.monotonic() - t0 < timeout:
        time.sleep(0.01)
    return thread_counts() if not ok() else True


def test_break_and_del_and_gc_stop_every_thread(many):
    base_py, base_os = thread_counts()
    for _ in many:
        break
    assert back_to(base_py, base_os) is True
    it = iter(many)
    next(it)
    # The loader thread and up to three readers (the pool starts a reader only
    # when none is idle: fast reads may need fewer).
    assert base_py + 2 <= thread_counts()[0] <= base_py + 4
    del it
    assert back_to(base_py, base_os) is True
    it = iter(many)
    next(it)
    it.me = it  # a reference cycle: only the garbage collector frees it
    del it
    gc.collect()
    assert back_to(base_py, base_os) is True


def test_keyboard_interrupt_in_the_loop_body_and_in_next(many, request):
    base_py, base_os = thread_counts()

    def body():
        for _ in many:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        body()
    assert back_to(base_py, base_os) is True

    # interrupt_main does nothing where SIGINT is ignored, as it is for a
    # background job of a non-interactive shell (a .ci/run started so failed
    # here): Python's own handler for the test's duration.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    # The transform holds its sample until 2 s after the interrupt, however
    # late the timer fires on a loaded machine: next() is still waiting when
    # the interrupt comes (it polls every POLL_S).
    interrupted = threading.Event()

    def interrupt():
        _thread.interrupt_main()
        time.sleep(2)
        interrupted.set()

    def slow(sample):
        interrupted.wait(60)
        return sample

    many.transform = slow
    it = iter(many)
    timer = threading.Timer(0.1, interrupt)  # arrives while next() waits
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        next(it)
    timer.join()
    assert back_to(base_py, base_os) is True
    with pytest.raises(StopIteration):
        next(it)  # closed


def test_a_new_pass_stops_the_previous_one(many):
    base = set(threading.enumerate())
    a = iter(many)
    next(a)
    of_a = set(threading.enumerate()) - base
    assert [t.name for t in of_a].count("gdsio-loader") == 1
    b = iter(many)
    next(b)
    # a's producer and readers are stopped and joined; b runs one producer and 1-3 readers (a thread pool starts
    # a worker only when none is idle: how many depends on timing, so the count is a range).
    assert not [t for t in of_a if t.is_alive()]
    of_b = set(threading.enumerate()) - base
    assert [t.name for t in of_b].count("gdsio-loader") == 1
    assert 1 <= sum(t.name.startswith("gdsio-reader") for t in of_b) <= 3 and len(of_b) <= 4, of_b
    with pytest.raises(StopIteration):
        next(a)
    b.close()
    assert thread_counts()[0] == len(base)


def rss_bytes():
    # Hand glibc's free arena memory back first: which threads a loaded machine ran when decides how much of
    # it each per-thread arena keeps, which moved the floor without any leak; live memory stays.
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_host_memory_is_flat_across_epochs(tmp_path):
    make_npy_folder(tmp_path, classes=2, per_class=32, shape=(3, 64, 64))
    loader = Loader(tmp_path, 8, device="cpu", shuffle=True, transform=AddNoise(), prefetch=3,
                    cache=Cache(bytes="16M"))
    rss = []
    for _ in range(30):
        run(loader)
        gc.collect()
        rss.append(rss_bytes())
    # The allocator's high-water mark wobbles by a few MiB from epoch to epoch; a
    # leak lifts the floor. Floors of epochs 3-7 and 25-29: leaking even one
    # batch (0.75 MiB of float64) per epoch would add 16 MiB.
    grown = min(rss[-5:]) - min(rss[3:8])
    assert grown < 12 << 20, f"RSS floor grew by {grown / 2**20:.1f} MiB over 22 epochs"
    assert len(loader.stats().passes) == 30


# ---- cache and stats -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["npy", "raw"])
def test_cache_second_epoch_reads_nothing(tmp_path, kind):
    if kind == "npy":
        make_npy_folder(tmp_path)
        src, kw = tmp_path, {}
    else:
        src, kw = make_raw(tmp_path / "r.bin", 30), dict(kind="raw", record_shape=(3, 2, 2), record_dtype=torch.int32)
    cache = Cache(bytes="4M", where="cpu")
    loader = Loader(src, 4, device="cpu", shuffle=True, cache=cache, **kw)
    e0, e1 = run(loader), run(loader)
    ref = Loader(src, 4, device="cpu", shuffle=True, **kw)
    assert e0 == run(ref) and e1 == run(ref)
    p = loader.stats().passes
    assert p[0]["bytes_read"] > 0 and p[0]["cache_hits"] == 0
    assert p[1]["bytes_read"] == 0 and p[1]["cache_hits"] == 30
    assert cache.stats()["samples"] == 30 and cache.bytes_used <= cache.budget


def test_cache_respects_its_budget(tmp_path):
    make_npy_folder(tmp_path, classes=1, per_class=20, shape=(1000,))  # 4000 bytes each
    cache = Cache(bytes=10 * 4096, where="cpu")
    loader = Loader(tmp_path, 5, device="cpu", cache=cache)
    run(loader)
    run(loader)
    st = cache.stats()
    assert st["samples"] == 10 and st["bytes_used"] <= 10 * 4096 and st["rejected"] >= 10
    p = loader.stats().passes[1]
    assert p["cache_hits"] == 10 and p["bytes_read"] > 0
    with pytest.raises(ValueError, match="where must be"):
        Cache(bytes=1, where="tape")
    with pytest.raises(ValueError, match="needs path="):  # a disk cache of remote objects (tests/io/test_remote_http.py)
        Cache(bytes=1, where="disk")
    with pytest.raises(ValueError, match="bytes must be"):
        Cache(bytes=-1)


def test_stats(tmp_path):
    make_npy_folder(tmp_path)
    loader = Loader(tmp_path, 4, device="cpu")
    for x, _ in loader:
        time.sleep(0.01)  # the "training step"
    s = loader.stats()
    assert s.batches == 8 and s.samples == 30 and s.seconds > 0.07
    assert 0 <= s.data_wait_share < 1 and s.batches_per_s > 0 and s.samples_per_s > 0
    assert s.io_backends == {"posix": 30} and s.bytes_read == 30 * 32 * 4 and s.bytes_per_s > 0
    assert s.produce_ms > 0 and s.gpu_ms is None and s.clock == "host"
    assert "8 batches" in str(s) and "posix x30" in str(s)
    json.dumps(s.as_dict())
    assert loader.stats(reset=True).batches == 8 and loader.stats().batches == 0


@pytest.mark.parametrize("budget", [None, 600_000, "1k"])
def test_prefetch_bytes_bounds_the_ready_batches(tmp_path, budget):
    """Batches of 4 x 64 KiB: a 600 kB budget lets two wait at most, a budget
    smaller than one batch still lets one through at a time, none: prefetch."""
    make_npy_folder(tmp_path, classes=2, per_class=16, shape=(16, 32, 32))  # int32: 64 KiB a sample
    loader = Loader(tmp_path, 4, device="cpu", prefetch=6, prefetch_bytes=budget, threads=2)
    it = iter(loader)
    first = next(it)
    per_batch = first[0].numel() * 4 + first[1].numel() * 8
    if budget is None:
        # The producer fills what prefetch allows, however slowly a loaded machine runs it: waited for, not timed.
        deadline = time.monotonic() + 120
        while it._budget.peak < 3 * per_batch and time.monotonic() < deadline:
            time.sleep(0.01)
    else:
        time.sleep(0.5)  # time for the producer to try to pass the budget (a bound holds whatever it managed)
    seen = 1 + sum(1 for _ in it)
    assert seen == 8
    peak = it._budget.peak
    if budget is None:
        assert peak >= 3 * per_batch  # prefetch=6 alone lets more wait
    elif budget == 600_000:
        assert per_batch <= peak <= 600_000
    else:
        assert peak == per_batch  # one at a time, never stuck


def test_prefetch_bytes_must_be_a_byte_count(tmp_path):
    make_npy_folder(tmp_path)
    for bad in (0, -5, "lots", 1.5, True):
        with pytest.raises((ValueError, TypeError), match="byte count|prefetch_bytes"):
            Loader(tmp_path, 4, device="cpu", prefetch_bytes=bad)
    assert Loader(tmp_path, 4, device="cpu", prefetch_bytes="2G").prefetch_bytes == 2 << 30


def test_gpu_loader_image_steps_on_the_cpu(tmp_path):
    """What the GPU loader does per image (header on the host, bytes by
    gdsio.read, one decode call per batch) gives gdsio.image.read's images;
    a corrupt file fails before its bulk read, a bad decode names its file."""
    from PIL import Image

    from gdsio import image as gi
    from gdsio.data import decode as _decode

    rng = np.random.default_rng(3)
    paths = []
    for k, ext in enumerate(["jpg", "ppm", "png.npy", "jpg", "png"]):
        a = rng.integers(0, 256, (12 + k, 17, 3), dtype=np.uint8)
        p = tmp_path / f"{k}.{ext}"
        if ext.endswith("npy"):
            np.save(p, a)
        else:
            Image.fromarray(a).save(p, format={"jpg": "JPEG", "ppm": "PPM", "png": "PNG"}[ext])
        paths.append(str(p))
    setup = _decode.image_setup("cpu", "RGB")
    items = [_decode.read_image(p, setup) for p in paths]
    assert all(it.io is not None and it.io.nbytes == os.path.getsize(p) for it, p in zip(items, paths))
    imgs, errors, backends = _decode.decode_items(items, setup)
    assert not errors and sum(backends.values()) == 5 and backends == {cpu_jpeg(): 2, "gdsio-cpu": 2, "pillow": 1}
    for got, want in zip(imgs, gi.read(paths, device="cpu", mode="RGB")):
        assert torch.equal(got, want)
    (tmp_path / "bad.ppm").write_bytes(b"P6\n100000 100000\n255\n" + bytes(10))
    with pytest.raises(ValueError, match=r"bad\.ppm"):
        _decode.read_image(str(tmp_path / "bad.ppm"), setup)
    with pytest.raises(FileNotFoundError):
        _decode.read_image(str(tmp_path / "missing.jpg"), setup)
    cut = tmp_path / "cut.jpg"
    big = tmp_path / "big.jpg"
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(big, format="JPEG")
    data = big.read_bytes()
    cut.write_bytes(data[: len(data) // 2])  # the scan cut: the header is whole
    imgs, errors, _ = _decode.decode_items([_decode.read_image(str(cut), setup), items[1]], setup)
    assert imgs[0] is None and imgs[1] is not None and "cut.jpg" in str(errors[0])


def pillow_folder(root, exts=("png", "bmp", "gif", "tif", "webp"), per=3):
    """An ImageFolder of the formats torchvision's ImageFolder takes besides JPEG:
    one class per format, images of differing sizes."""
    from PIL import Image

    rng = np.random.default_rng(5)
    for ext in exts:
        (root / ext).mkdir(parents=True)
        for i in range(per):
            a = rng.integers(0, 256, (10 + i, 12 + 2 * i, 3), dtype=np.uint8)
            im = Image.fromarray(a)
            im.save(root / ext / f"{i}.{ext}", **({"lossless": True} if ext == "webp" else {}))
    return root


def test_an_image_folder_of_png_bmp_gif_tiff_webp(tmp_path):
    import gdsio.transforms as F
    from gdsio import image as gi
    from gdsio.data import CenterCrop, Compose

    root = pillow_folder(tmp_path)
    loader = Loader(root, 4, device="cpu", transform=Compose([CenterCrop(10)]))
    assert loader.kind == "image" and loader.classes == ["bmp", "gif", "png", "tif", "webp"]
    got = list(loader)
    x, y = torch.cat([x for x, _ in got]), torch.cat([y for _, y in got])
    paths = sorted(str(p) for p in root.rglob("*.*"))
    assert torch.equal(x, torch.stack([F.center_crop(t, [10, 10]) for t in gi.read(paths, device="cpu", mode="RGB")]))
    assert y.tolist() == [k // 3 for k in range(15)]
    st = loader.stats()
    assert st.decode_backends == {"pillow": 15} and st.io_backends == {"posix": 15}


def test_cache_stores_a_key_given_twice_once():
    cache = Cache(bytes=1 << 20, where="cpu")
    a, b = torch.arange(100, dtype=torch.int32), torch.arange(100, 200, dtype=torch.int32)
    assert cache.put_many(["k", "k", "j"], [a, b, b]) == [True, True, True]
    assert len(cache) == 2 and torch.equal(cache.get("k"), a)
    assert cache.bytes_used >= 2 * 400 and cache.stats()["rejected"] == 0
    used = cache.bytes_used
    assert cache.put_many(["k"], [b]) == [True] and cache.bytes_used == used  # already there: nothing new


def test_raw_host_batches_read_in_one_call_and_a_bad_file_fails_alone(tmp_path, caplog):
    """Host raw batches are read by one C++ call; a file that shrank after the
    scan fails only its own records (on_error="skip"), named in the log."""
    for c in ("a", "b"):
        (tmp_path / c).mkdir()
        for i in range(3):
            make_raw(tmp_path / c / f"{i}.bin", 2)
    kw = dict(device="cpu", kind="raw", record_shape=(3, 2, 2), record_dtype=torch.int32)
    assert [ids(x) for x, _ in Loader(tmp_path, 4, **kw)] == [[0, 1, 0, 1], [0, 1, 0, 1], [0, 1, 0, 1]]
    loader = Loader(tmp_path, 4, on_error="skip", **kw)
    (tmp_path / "b" / "1.bin").write_bytes(b"\0" * 10)  # shrank: its 2 records fail
    with caplog.at_level(logging.WARNING, logger="gdsio"):
        got = [(ids(x), y.tolist()) for x, y in loader]
    assert got == [([0, 1, 0, 1], [0, 0, 0, 0]), ([0, 1, 0, 1], [0, 0, 1, 1]), ([0, 1], [1, 1])]
    assert "1.bin, record 0" in caplog.text and "holds 10 bytes" in caplog.text
    assert loader.stats().io_backends == {"posix": 5}


def test_exit_with_passes_running_is_a_clean_exit(tmp_path):
    """An exception ends the script while two loaders' threads are mid-pass
    (in C++ with the GIL released: decodes, resizes): Python exits with the
    exception's status, not std::terminate's abort (the threads are stopped
    and joined before it finalizes)."""
    import subprocess
    import sys

    from gdsio.tools import demo

    demo.write_jpeg_folder(str(tmp_path / "imgs"), classes=2, per_class=40, size=(500, 375))
    script = tmp_path / "s.py"
    script.write_text(
        "import sys, torch\n"
        "from gdsio.data import Compose, Loader, RandomResizedCrop, ToDtype\n"
        "tf = Compose([RandomResizedCrop(224), ToDtype(torch.float32, scale=True)])\n"
        "a = Loader(sys.argv[1], 16, transform=tf, device='cpu', shuffle=True)\n"
        "b = Loader(sys.argv[1], 16, transform=tf, device='cpu', shuffle=True, crop_decode=False)\n"
        "for (x, _), (y, _) in zip(a, b):\n"
        "    raise SystemExit(7)\n"
    )
    for _ in range(3):
        r = subprocess.run([sys.executable, "-P", str(script), str(tmp_path / "imgs")], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 7 and "terminate called" not in r.stderr, (r.returncode, r.stderr[-2000:])
