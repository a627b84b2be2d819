"""Tar shards in the WebDataset layout (gdsio.data.shards, shard_write): the
index, the Loader over shards against the same images as an ImageFolder, the
webdataset library reading what gdsio writes and the other way round, and
bad shards."""

from __future__ import annotations

import gc
import io
import json
import logging
import os
import tarfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import gdsio.data as gd
from gdsio.data import Loader, SampleError, write_shards
from gdsio.data import decode
from gdsio.data import shards as sh
from gdsio.image.batch import Item
from gdsio.io import read
from gdsio.tools.cli import main

from conftest import batches, same_batches as same


def make_folder(root, classes=3, per_class=5, size=(12, 10), seed=0):
    """An ImageFolder of small JPEGs and PNGs (same size: batches stack), random pixels."""
    rng = np.random.default_rng(seed)
    for c in range(classes):
        d = root / f"c{c}"
        d.mkdir(parents=True)
        for i in range(per_class):
            a = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
            fmt = "PNG" if i % 3 == 2 else "JPEG"
            Image.fromarray(a).save(d / f"{i:03d}.{'png' if fmt == 'PNG' else 'jpg'}", format=fmt)
    return root


def tar_of(path, members):
    """A tar of (name, bytes) members, as a webdataset writer lays them out."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def wds_read(wds, paths):
    """The samples webdataset.WebDataset reads from `paths`, in order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # webdataset leaves its shard files to the collector
        out = list(wds.WebDataset(paths, shardshuffle=False, empty_check=False))
        gc.collect()
    return out


def test_keys_braces_and_sources(tmp_path):
    assert sh.key_and_field("dir.x/abc.seg.png") == ("dir.x/abc", "seg.png")
    assert sh.key_and_field("abc") == ("abc", "")
    for k in range(3):
        tar_of(tmp_path / f"shard-{k:06d}.tar", [(f"{k}.jpg", b"x"), (f"{k}.cls", b"1")])
    brace = str(tmp_path / "shard-{000000..000002}.tar")
    want = [str(tmp_path / f"shard-{k:06d}.tar") for k in range(3)]
    assert sh.expand_shards(brace) == want
    assert sh.expand_shards(str(tmp_path / "*.tar")) == want
    assert sh.expand_shards(str(tmp_path / "shard-00000{2,0}.tar")) == [want[2], want[0]]
    assert sh.is_shard_source(brace) and sh.is_shard_source(want) and not sh.is_shard_source(str(tmp_path))
    assert sh.is_shard_source("s3://b/shard-000000.tar") and sh.is_shard_source("https://h/s.tar?sig=x")
    assert not sh.is_shard_source("s3://b/train/")
    with pytest.raises(FileNotFoundError, match="shard-000003.tar"):
        sh.expand_shards(str(tmp_path / "shard-{000002..000003}.tar"))
    with pytest.raises(ValueError, match="runs backwards"):
        sh.expand_shards(str(tmp_path / "shard-{000002..000000}.tar"))


def test_labels_from_cls_json_txt(tmp_path):
    p = tar_of(tmp_path / "s.tar", [
        ("a.jpg", b"A"), ("a.cls", b" 3\n"),
        ("b.png", b"BB"), ("b.json", json.dumps({"label": 4}).encode()),
        ("c.jpeg", b"CCC"), ("c.json", b'{"cls": 5}'), ("c.txt", b"a caption"),
        ("d/e.f.webp", b"DDDD"), ("d/e.f.txt", b"6"),
    ])
    index = sh.scan_shard(str(p))
    assert [(s.key, s.label, s.size) for s in index.samples] == [("a", 3, 1), ("b", 4, 2), ("c", 5, 3), ("d/e", 6, 4)]
    with open(p, "rb") as f:  # each offset is the image member's data
        for s in index.samples:
            f.seek(s.offset)
            assert f.read(s.size) == {"a": b"A", "b": b"BB", "c": b"CCC", "d/e": b"DDDD"}[s.key]


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_long_names_in_gnu_and_pax_headers(tmp_path, fmt):
    key = "d" * 90 + "/" + "k" * 120  # longer than a ustar name field: a GNU longname or a pax header
    p = tmp_path / "long.tar"
    with tarfile.open(p, "w", format=fmt) as tf:
        for name, data in [(key + ".JPG", b"IMG"), (key + ".cls", b"9")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    (s,) = sh.scan_shard(str(p)).samples
    assert (s.key, s.member, s.label) == (key, key + ".JPG", 9)
    with open(p, "rb") as f:
        f.seek(s.offset)
        assert f.read(s.size) == b"IMG"


def test_index_is_written_read_and_rebuilt_when_stale(tmp_path, caplog):
    p = str(tar_of(tmp_path / "s.tar", [("a.jpg", b"A"), ("a.cls", b"1")]))
    first = sh.shard_index(p)
    idx_path = p + sh.INDEX_SUFFIX
    obj = json.loads(Path(idx_path).read_text())
    assert obj["format"] == "gdsio-wds-index" and obj["shard_size"] == os.path.getsize(p)
    assert obj["members"] == [["a.jpg", 512, 1], ["a.cls", 1536, 1]] and obj["samples"] == [["a", 0, 1]]
    # Read when present: an index edited (but still current) is what gdsio uses.
    obj["samples"] = [["a", 0, 7]]
    Path(idx_path).write_text(json.dumps(obj))
    assert sh.shard_index(p).samples[0].label == 7
    # Stale (the shard was rewritten): rebuilt from the shard.
    tar_of(p, [("a.jpg", b"AA"), ("a.cls", b"2"), ("b.jpg", b"B"), ("b.cls", b"0")])
    again = sh.shard_index(p)
    assert [(s.key, s.label, s.size) for s in again.samples] == [("a", 2, 2), ("b", 0, 1)]
    assert json.loads(Path(idx_path).read_text())["shard_size"] == os.path.getsize(p)
    assert first.samples[0].label == 1
    # Not parseable: rebuilt.
    Path(idx_path).write_text("{nope")
    assert len(sh.shard_index(p).samples) == 2
    assert json.loads(Path(idx_path).read_text())["format"] == "gdsio-wds-index"


def test_index_of_a_read_only_folder_is_kept_in_memory(tmp_path, caplog, monkeypatch):
    p = str(tar_of(tmp_path / "s.tar", [("a.jpg", b"A"), ("a.cls", b"1")]))

    def refused(*args, **kwargs):  # what a read-only folder answers (chmod does not stop root, who runs CI here)
        raise PermissionError(13, "Permission denied", str(tmp_path))

    monkeypatch.setattr(sh.tempfile, "mkstemp", refused)
    with caplog.at_level(logging.INFO, logger="gdsio.data"):
        assert sh.shard_index(p).samples[0].label == 1
    assert "keeping it in memory" in caplog.text and not os.path.exists(p + sh.INDEX_SUFFIX)
    caplog.clear()
    monkeypatch.setattr(sh, "scan_shard", lambda path: pytest.fail("scanned again"))
    with caplog.at_level(logging.INFO, logger="gdsio.data"):
        assert sh.shard_index(p).samples[0].label == 1  # from memory
    assert os.listdir(tmp_path) == ["s.tar"]


def test_a_member_read_for_the_gpu_decodes_as_the_file_would(tmp_path):
    """The GPU loader's item for a shard member (its bytes, decoded with the
    batch by decode_items) gives what decoding the image file gives; run with the CPU twin."""
    folder = make_folder(tmp_path / "img", classes=1, per_class=3)
    paths = write_shards(folder, tmp_path / "s")
    table = gd.scan(paths)
    setup = decode.image_setup("cpu", "RGB")
    items = []
    for k in range(3):
        off, size = (int(v) for v in table.ranges[k])
        data = gdsio_read(paths[0], off, size)
        items.append(Item(0, f"{paths[0]}@{off}", data, size))
    images, errors, _ = decode.decode_items(items, setup)
    assert not errors
    for img, p in zip(images, gd.scan(folder).files.paths):
        assert torch.equal(img, decode.decode_one(gdsio_read(p, 0, None), "cpu", "RGB")[0])


def gdsio_read(path, offset, size):
    return read(path, offset=offset, size=size, device="cpu")


def test_loader_over_shards_equals_the_image_folder(tmp_path):
    folder = make_folder(tmp_path / "img")
    paths = write_shards(folder, tmp_path / "shards", shard_bytes=12000)
    per_shard = [len(sh.shard_index(p).samples) for p in paths]
    assert len(paths) > 2 and max(per_shard) > 2 and sum(per_shard) == 15 and all(os.path.exists(p + sh.INDEX_SUFFIX) for p in paths)
    brace = str(tmp_path / "shards" / f"shard-{{000000..{len(paths) - 1:06d}}}.tar")
    for source in (brace, paths, str(tmp_path / "shards" / "*.tar")):
        for kw in (dict(shuffle=True, seed=5), dict(shuffle=False), dict(shuffle=True, seed=1, rank=1, world_size=2)):
            a = Loader(folder, 4, device="cpu", **kw)
            b = Loader(source, 4, device="cpu", **kw)
            assert len(a) == len(b) and b.kind == "image"
            for epoch in (0, 1):
                a.set_epoch(epoch)
                b.set_epoch(epoch)
                same(batches(a), batches(b))
    # Resumption mid-epoch: the same batches as the folder's.
    a = Loader(folder, 4, device="cpu", shuffle=True, seed=2)
    b = Loader(brace, 4, device="cpu", shuffle=True, seed=2)
    it = iter(b)
    next(it)
    state = b.state_dict()
    del it
    b2 = Loader(brace, 4, device="cpu", shuffle=True, seed=2)
    b2.load_state_dict(state)
    same(batches(a)[1:], batches(b2))
    # One ranged read per sample: the bytes read are the image members', never whole shards.
    once = Loader(paths, 4, device="cpu")
    batches(once)
    st = once.stats()
    assert st.bytes_read == int(gd.scan(paths).ranges[:, 1].sum()) and st.io_backends == {"posix": 15}
    # A cache keys each sample by its shard and offset: the second epoch, from the cache, is the folder's too.
    cached = Loader(brace, 4, device="cpu", shuffle=True, seed=6, cache=gd.Cache(bytes="4M", where="cpu"))
    plain = Loader(folder, 4, device="cpu", shuffle=True, seed=6)
    for epoch in (0, 1):
        cached.set_epoch(epoch)
        plain.set_epoch(epoch)
        same(batches(plain), batches(cached))
    # A random crop (on the CPU, JPEGs decoded for their box only) and on_error="skip": the same batches.
    tf = gd.Compose([gd.RandomResizedCrop(6), gd.RandomHorizontalFlip()])
    same(batches(Loader(folder, 4, device="cpu", shuffle=True, seed=3, transform=tf, on_error="skip")),
         batches(Loader(brace, 4, device="cpu", shuffle=True, seed=3, transform=tf, on_error="skip")))
    # The labels are the folder's.
    assert gd.scan(brace).labels_of(np.arange(15)).tolist() == gd.scan(folder).labels_of(np.arange(15)).tolist()


def test_on_error_skip_skips_a_corrupt_image(tmp_path, caplog):
    good = io.BytesIO()
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(good, format="PNG")
    p = str(tar_of(tmp_path / "s.tar", [("a.png", good.getvalue()), ("a.cls", b"0"),
                                         ("b.jpg", b"\xff\xd8\xffnot a jpeg"), ("b.cls", b"1"),
                                         ("c.png", good.getvalue()), ("c.cls", b"2")]))
    with pytest.raises(SampleError, match=r"s\.tar, member b\.jpg"):
        list(Loader(p, 3, device="cpu"))
    with caplog.at_level(logging.WARNING, logger="gdsio.data"):
        out = batches(Loader(p, 3, device="cpu", on_error="skip"))
    assert len(out) == 1 and out[0][1].tolist() == [0, 2] and "member b.jpg" in caplog.text


def test_bad_shards_name_the_shard_and_the_member(tmp_path):
    members = [("a.jpg", b"A" * 600), ("a.cls", b"0"), ("b.jpg", b"B" * 10), ("b.cls", b"1")]
    p = tar_of(tmp_path / "good.tar", members)
    raw = p.read_bytes()

    corrupt = tmp_path / "corrupt.tar"  # the header of b.jpg (after a.jpg's 2 data blocks and a.cls) damaged
    at = 512 + 1024 + 1024
    corrupt.write_bytes(raw[:at] + b"\x07" * 100 + raw[at + 100:])
    with pytest.raises(ValueError, match=r"corrupt\.tar.*corrupt tar header.*a\.cls"):
        sh.scan_shard(str(corrupt))

    first = tmp_path / "first.tar"
    first.write_bytes(b"\x07" * 100 + raw[100:])
    with pytest.raises(ValueError, match=r"first\.tar.*not a tar file"):
        sh.scan_shard(str(first))

    cut = tmp_path / "cut.tar"
    cut.write_bytes(raw[:800])  # inside a.jpg's data
    with pytest.raises(ValueError, match=r"cut\.tar.*a\.jpg"):
        sh.scan_shard(str(cut))

    dup = tar_of(tmp_path / "dup.tar", members + [("a.cls", b"3")])
    with pytest.raises(ValueError, match=r"dup\.tar.*duplicate key 'a'.*a\.cls"):
        sh.scan_shard(str(dup))
    twice = tar_of(tmp_path / "twice.tar", [("a.jpg", b"A"), ("a.jpg", b"A")])
    with pytest.raises(ValueError, match=r"twice\.tar.*duplicate member 'a\.jpg'"):
        sh.scan_shard(str(twice))

    nolabel = tar_of(tmp_path / "nolabel.tar", members + [("c.jpg", b"C")])
    with pytest.raises(ValueError, match=r"nolabel\.tar.*member 'c\.jpg' has no label"):
        gd.scan(str(nolabel))
    noimage = tar_of(tmp_path / "noimage.tar", [("a.cls", b"0")])
    with pytest.raises(ValueError, match=r"noimage\.tar.*sample 'a' has no image member"):
        sh.scan_shard(str(noimage))
    badcls = tar_of(tmp_path / "badcls.tar", [("a.jpg", b"A"), ("a.cls", b"dog")])
    with pytest.raises(ValueError, match=r"badcls\.tar.*a\.cls.*integer"):
        sh.scan_shard(str(badcls))

    link = tmp_path / "link.tar"
    with tarfile.open(link, "w") as tf:
        info = tarfile.TarInfo("a.jpg")
        info.type, info.linkname = tarfile.SYMTYPE, "elsewhere"
        tf.addfile(info)
    with pytest.raises(ValueError, match=r"link\.tar.*'a\.jpg' is not a regular file"):
        sh.scan_shard(str(link))

    with pytest.raises(FileNotFoundError, match="missing.tar"):
        Loader(str(tmp_path / "missing.tar"), 2, device="cpu")
    with pytest.raises(IsADirectoryError):
        sh.scan_shard(str(tmp_path))
    # Unlabeled shards are unlabeled, as a folder without classes.
    bare = tar_of(tmp_path / "bare.tar", [("a.jpg", b"A"), ("b.jpg", b"B")])
    assert gd.scan(str(bare)).labels_of(np.arange(2)).tolist() == [-1, -1]


def test_webdataset_writes_what_gdsio_reads(tmp_path):
    wds = pytest.importorskip("webdataset")
    folder = make_folder(tmp_path / "img", classes=2, per_class=4)
    files = gd.scan(folder).files
    pattern = str(tmp_path / "w-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=3, verbose=0) as w:
        for k, (p, y) in enumerate(zip(files.paths, files.labels.tolist())):
            ext = os.path.splitext(p)[1][1:]
            w.write({"__key__": f"s{k:04d}", ext: Path(p).read_bytes(), "cls": y})
    shards = sorted(str(p) for p in tmp_path.glob("w-*.tar"))
    assert len(shards) == 3
    samples = [s for p in shards for s in sh.shard_index(p).samples]
    assert [s.label for s in samples] == files.labels.tolist()
    for s, p, path in zip(samples, files.paths, [q for q in shards for _ in sh.shard_index(q).samples]):
        with open(path, "rb") as f:
            f.seek(s.offset)
            assert f.read(s.size) == Path(p).read_bytes()
    same(batches(Loader(folder, 3, device="cpu", shuffle=True, seed=4)),
         batches(Loader(shards, 3, device="cpu", shuffle=True, seed=4)))


def test_gdsio_writes_what_webdataset_reads(tmp_path):
    wds = pytest.importorskip("webdataset")
    folder = make_folder(tmp_path / "img", classes=2, per_class=4)
    files = gd.scan(folder).files
    paths = write_shards(files, tmp_path / "out", shard_bytes=8000)
    assert 1 < len(paths) < len(files.paths)  # several shards of several samples
    got = wds_read(wds, paths)
    assert [int(s["cls"]) for s in got] == files.labels.tolist()
    assert [s["__key__"] for s in got] == [f"{k:09d}" for k in range(len(files.paths))]
    for s, p in zip(got, files.paths):
        ext = os.path.splitext(p)[1][1:]
        assert s[ext] == Path(p).read_bytes()
    # A list of (path, label) pairs too; an unlabeled list has no cls members.
    pairs = write_shards([(p, 7) for p in files.paths[:2]], tmp_path / "pairs")
    assert [int(s["cls"]) for s in wds_read(wds, pairs)] == [7, 7]
    bare = write_shards(files.paths[:2], tmp_path / "bare")
    assert all("cls" not in s for s in wds_read(wds, bare))
    with pytest.raises(ValueError, match="shard_bytes"):
        write_shards(files, tmp_path / "x", shard_bytes=0)
    with pytest.raises(ValueError, match="image extension"):
        write_shards([str(tmp_path / "a.txt")], tmp_path / "x")


def test_cli_shards_write(tmp_path, capsys):
    folder = make_folder(tmp_path / "img", classes=2, per_class=3)
    assert main(["shards", "write", str(folder), str(tmp_path / "out"), "--shard-bytes", "8K"]) == 0
    out = capsys.readouterr().out
    written = sorted(tmp_path.joinpath("out").glob("*.tar"))
    assert len(written) > 1 and f"{len(written)} shards" in out
    same(batches(Loader(folder, 2, device="cpu")), batches(Loader([str(p) for p in written], 2, device="cpu")))
    assert main(["shards", "write", str(tmp_path / "nope"), str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope" in err
    assert main(["shards", "write", str(folder), str(tmp_path / "o3"), "--shard-bytes", "lots"]) == 2


def test_the_datasets_samples_of_shards_are_the_folders(tmp_path):
    """loader.dataset[i] (what DataLoader code indexes) reads a shard member's bytes,
    not the whole tar: the same image and label as the ImageFolder's sample i."""
    folder = make_folder(tmp_path / "img")
    write_shards(folder, tmp_path / "shards", shard_bytes=12000)
    a = Loader(folder, 4, device="cpu").dataset
    b = Loader(str(tmp_path / "shards" / "*.tar"), 4, device="cpu").dataset
    assert len(a) == len(b) == 15
    for i in range(15):
        (x, y), (bx, by) = a[i], b[i]
        assert y == by and torch.equal(x, bx)
