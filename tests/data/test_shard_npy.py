"""``npy`` members of WebDataset-layout tar shards as tensors (issue 27, item
1): a sample whose data is an ``.npy`` member (or any sample, with
kind="npy") is one tensor, loaded from the member's bytes as gdsio.load_npy
loads a file of them, batched as the Loader batches ``.npy`` files; local
shards, and the same over http and moto's S3 on 127.0.0.1; bad members name
the shard and the member; images and arrays are not mixed."""

from __future__ import annotations

import io
import json
import logging
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from remote_fixtures import aws_clean, loopback_only, moto, moto_server, no_leaks, server  # noqa: F401
from test_shards import batches, make_folder, same, tar_of

import gdsio
import gdsio.data as gd
from gdsio.data import FileList, Loader, SampleError, write_shards
from gdsio.data import remote_shards as rs
from gdsio.data import shards as sh
from gdsio.tensors import npy_from_bytes


@pytest.fixture(autouse=True)
def fresh_index_memory(monkeypatch):
    """Each test starts with no remote index kept in this process."""
    monkeypatch.setattr(rs, "_memory", {})


def npy_bytes(a, **kw):
    b = io.BytesIO()
    np.save(b, a, **kw)
    return b.getvalue()


def arrays(n=15, shape=(3, 4, 5), seed=0):
    """`n` arrays of one shape and dtype (they batch), random values."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def npy_shards(root, arrs, labels=None, per_shard=4):
    """Shards of npy-only samples (``<key>.npy`` and ``<key>.cls``), as a
    webdataset writer lays them out; and the same arrays as .npy files."""
    root.mkdir(parents=True, exist_ok=True)
    labels = list(range(len(arrs))) if labels is None else labels
    paths, files = [], []
    for k, a in enumerate(arrs):
        np.save(root / f"{k:04d}.npy", a)
        files.append(str(root / f"{k:04d}.npy"))
    for j in range(0, len(arrs), per_shard):
        members = []
        for k in range(j, min(j + per_shard, len(arrs))):
            members.append((f"s{k:04d}.npy", npy_bytes(arrs[k])))
            if labels[k] is not None:
                members.append((f"s{k:04d}.cls", str(labels[k]).encode()))
        paths.append(str(tar_of(root / f"shard-{j // per_shard:06d}.tar", members)))
    return paths, files


def native(a):
    """numpy's array as a tensor: native byte order, C order (0-d stays 0-d)."""
    return torch.from_numpy(np.array(a.astype(a.dtype.newbyteorder("=")), order="C"))


def test_npy_members_load_as_numpy_loads_their_bytes(tmp_path):
    """Every dtype torch has, both byte orders, C and Fortran order, 0-d and
    empty arrays, format versions 1-3: the tensor numpy.load gives of the same bytes."""
    cases = [np.arange(24, dtype="<f4").reshape(2, 3, 4), np.arange(12, dtype=">i4").reshape(3, 4),
             np.asfortranarray(np.arange(30, dtype=np.float64).reshape(5, 6)), np.array([True, False, True]),
             np.array(7, np.int16), np.zeros((0, 3), np.float16), (np.arange(6) * 1j).astype(">c8"),
             np.arange(5, dtype=np.uint8)]
    raws = [npy_bytes(a) for a in cases]
    raws.append(b"\x93NUMPY\x02\x00" + raws[0][8:10] + b"\x00\x00" + raws[0][10:])  # format 2.0
    members = [m for k, raw in enumerate(raws) for m in [(f"{k:02d}.npy", raw), (f"{k:02d}.cls", str(k).encode())]]
    p = str(tar_of(tmp_path / "s.tar", members))
    loader = Loader(p, 1, device="cpu")
    assert loader.kind == "npy" and len(loader) == len(raws)
    got = batches(loader)
    for k, ((x, y), raw) in enumerate(zip(got, raws)):
        want = np.load(io.BytesIO(raw), allow_pickle=False)
        assert y.tolist() == [k]
        assert x.shape == (1, *want.shape) and x[0].is_contiguous()
        assert x.dtype == native(want).dtype and torch.equal(x[0], native(want))
        # And as gdsio.load_npy loads a file of those bytes.
        f = tmp_path / f"{k}.npy"
        f.write_bytes(raw)
        assert torch.equal(x[0], gdsio.load_npy(str(f), device="cpu"))
    # loader.dataset[i]: the member's tensor, and its label.
    x, y = loader.dataset[1]
    assert y == 1 and torch.equal(x, gdsio.load_npy(str(tmp_path / "1.npy"), device="cpu"))
    assert loader.dataset.samples[1] == (p, 1)


def test_batches_equal_the_npy_files(tmp_path):
    """The same arrays as .npy files (gdsio.Loader's FileList npy path) and as
    npy-only shards: the same batches for the same seed, shuffle, ranks,
    resume and on_error; the same stats counts."""
    arrs = arrays()
    shards, files = npy_shards(tmp_path / "a", arrs)
    pairs = [(f, k) for k, f in enumerate(files)]
    for kw in [dict(shuffle=True, seed=5), dict(shuffle=False), dict(shuffle=True, seed=2, rank=1, world_size=2),
               dict(shuffle=True, seed=3, rank=0, world_size=3, drop_last=True), dict(on_error="skip")]:
        want, got = Loader(pairs, 4, device="cpu", **kw), Loader(shards, 4, device="cpu", **kw)
        assert got.kind == want.kind == "npy" and len(got) == len(want)
        for epoch in (0, 1):
            want.set_epoch(epoch)
            got.set_epoch(epoch)
            same(batches(want), batches(got))
        assert got.stats().samples == want.stats().samples
    # A per-sample transform, and a batch transform, run as on the files.
    tf = gd.BatchLambda(lambda xs: torch.stack(xs) * 2)
    same(batches(Loader(pairs, 4, device="cpu", transform=tf)), batches(Loader(shards, 4, device="cpu", transform=tf)))
    # state_dict() resumes mid-epoch exactly.
    loader = Loader(shards, 4, device="cpu", shuffle=True, seed=9)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    rest = [(x.clone(), y.clone()) for x, y in it]
    again = Loader(shards, 4, device="cpu", shuffle=True, seed=9)
    again.load_state_dict(state)
    same(rest, batches(again))
    # The window order over local npy shards: each sample once, each shard read whole.
    win = batches(Loader(shards, 4, device="cpu", shuffle="window", seed=1, shuffle_window=2))
    got_labels = sorted(v for _, y in win for v in y.tolist())
    assert got_labels == list(range(15))
    for x, y in win:
        for row, label in zip(x, y.tolist()):
            assert torch.equal(row, torch.from_numpy(arrs[label]))


def test_batches_of_mismatched_arrays_are_refused_as_for_files(tmp_path):
    shapes = [np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32)]
    shards, files = npy_shards(tmp_path / "a", shapes)
    with pytest.raises(ValueError, match=r"differ in shape: \(2, 3\) \('.*0000\.npy'\) and \(3, 2\)"):
        list(Loader(files, 2, device="cpu"))
    with pytest.raises(ValueError, match=r"differ in shape: \(2, 3\) \('.*shard-000000\.tar, member s0000\.npy'\) "
                                         r"and \(3, 2\) \('.*member s0001\.npy'\)"):
        list(Loader(shards, 2, device="cpu"))
    # Different dtypes of one shape: stacked as the files' are (torch's promotion).
    dtypes = [np.ones((2,), np.int64), np.ones((2,), np.float32)]
    shards, files = npy_shards(tmp_path / "b", dtypes)
    got = batches(Loader(shards, 2, device="cpu"))
    same(batches(Loader([(f, k) for k, f in enumerate(files)], 2, device="cpu")), got)
    assert got[0][0].dtype == torch.float32


def test_kind_npy_takes_the_arrays_of_image_samples_and_old_indexes_read(tmp_path):
    """Samples with an image and an npy member are images under kind "auto"
    (as before) and arrays under kind="npy"; their index is version 1 as
    before (the npy member is found in "members"), so an index written before
    npy members were loaded serves both."""
    folder = make_folder(tmp_path / "img", classes=2, per_class=3)
    files = gd.scan(folder).files
    arrs = arrays(len(files.paths), shape=(4,))
    members = []
    for k, (p, y) in enumerate(zip(files.paths, files.labels.tolist())):
        members += [(f"k{k}.{p.rsplit('.', 1)[1]}", Path(p).read_bytes()), (f"k{k}.feat.npy", npy_bytes(arrs[k])),
                    (f"k{k}.cls", str(y).encode())]
    p = str(tar_of(tmp_path / "both.tar", members))
    images = Loader(p, 3, device="cpu")
    assert images.kind == "image"
    same(batches(Loader(folder, 3, device="cpu")), batches(images))
    index = json.loads(Path(p + sh.INDEX_SUFFIX).read_text())
    assert index["version"] == 1 and all(len(s) == 3 for s in index["samples"])  # the format as it was
    loader = Loader(p, 3, device="cpu", kind="npy")
    assert loader.kind == "npy" and loader.table.members[0] == "k0.feat.npy"
    got = torch.cat([x for x, _ in batches(loader)])
    assert torch.equal(got, torch.from_numpy(np.stack(arrs)))
    assert [y for _, y in batches(loader)][0].tolist() == files.labels.tolist()[:3]


def test_the_index_of_npy_samples_is_written_and_read_back(tmp_path, monkeypatch):
    shards, _ = npy_shards(tmp_path / "a", arrays(5), per_shard=5)
    first = sh.shard_index(shards[0])
    obj = json.loads(Path(shards[0] + sh.INDEX_SUFFIX).read_text())
    # Version 2 (older gdsio refuses it and rebuilds, instead of taking -1 for the last member).
    assert obj["version"] == 2 and [s[1] for s in obj["samples"]] == [-1] * 5
    assert first.samples[0].npy == ("s0000.npy", 512, len(npy_bytes(arrays(1)[0]))) and first.samples[0].member == ""

    def no_scan(path):
        raise AssertionError("scanned again")

    scan = sh.scan_shard
    monkeypatch.setattr(sh, "scan_shard", no_scan)
    assert sh.shard_index(shards[0]).samples == first.samples
    # A version-1 index whose sample has no image (-1) is not one gdsio wrote: rebuilt.
    obj["version"] = 1
    Path(shards[0] + sh.INDEX_SUFFIX).write_text(json.dumps(obj))
    monkeypatch.setattr(sh, "scan_shard", scan)
    assert sh.shard_index(shards[0]).samples == first.samples
    assert json.loads(Path(shards[0] + sh.INDEX_SUFFIX).read_text())["version"] == 2


def test_images_and_npy_only_samples_are_not_mixed(tmp_path):
    good = io.BytesIO()
    from PIL import Image

    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(good, format="PNG")
    a = npy_bytes(np.zeros(3, np.float32))
    mixed = str(tar_of(tmp_path / "mixed.tar", [("a.png", good.getvalue()), ("a.cls", b"0"),
                                                 ("b.npy", a), ("b.cls", b"1")]))
    with pytest.raises(ValueError, match=r"mixed\.tar.*sample 'b' has an npy member and no image.*'a'.*kind='npy'"):
        Loader(mixed, 2, device="cpu")
    with pytest.raises(ValueError, match=r"mixed\.tar.*sample 'b' has no image member; its npy member 'b\.npy'"):
        Loader(mixed, 2, device="cpu", kind="image")
    with pytest.raises(ValueError, match=r"mixed\.tar.*sample 'a' has no npy member.*'a\.png'"):
        Loader(mixed, 2, device="cpu", kind="npy")
    # Across shards too: one of images, one of arrays.
    imgs = str(tar_of(tmp_path / "imgs.tar", [("a.png", good.getvalue())]))
    arrs = str(tar_of(tmp_path / "arrs.tar", [("b.npy", a)]))
    with pytest.raises(ValueError, match=r"arrs\.tar.*sample 'b' has an npy member and no image.*imgs\.tar"):
        Loader([imgs, arrs], 2, device="cpu")
    # Image and npy members in every sample: kind="npy" takes the arrays.
    both = str(tar_of(tmp_path / "both.tar", [("a.png", good.getvalue()), ("a.npy", a)]))
    assert Loader(both, 1, device="cpu").kind == "image" and Loader(both, 1, device="cpu", kind="npy").kind == "npy"
    # A sample of neither is refused by the scan.
    with pytest.raises(ValueError, match=r"neither\.tar.*sample 'a' has no image member and no npy member"):
        sh.scan_shard(str(tar_of(tmp_path / "neither.tar", [("a.cls", b"0"), ("a.txt", b"x")])))


def bad_members():
    """(member name, bytes, what load_npy says of a file of them) of npy members numpy.load refuses."""
    good = npy_bytes(np.arange(6, dtype=np.float32))
    return [
        ("b.npy", b"not an npy file at all", "not a .npy file"),
        ("c.npy", npy_bytes(np.array([1, "x"], dtype=object), allow_pickle=True), "object arrays need pickle"),
        ("d.npy", good[:-4], "truncated"),
        ("e.npy", good[:6] + b"\x09\x09" + good[8:], "unsupported .npy format version 9.9"),
    ]


def test_a_corrupt_npy_member_names_the_shard_and_the_member_and_skip_skips_it(tmp_path, caplog):
    good = npy_bytes(np.arange(6, dtype=np.float32))
    members = [("a.npy", good), ("a.cls", b"0")]
    for k, (name, raw, _) in enumerate(bad_members(), start=1):
        members += [(name, raw), (name[0] + ".cls", str(k).encode())]
        # numpy refuses these bytes too (numpy.load(allow_pickle=False), as gdsio.load_npy does).
        with pytest.raises(ValueError):
            np.load(io.BytesIO(raw), allow_pickle=False)
    members += [("z.npy", good), ("z.cls", b"9")]
    p = str(tar_of(tmp_path / "s.tar", members))
    for name, raw, why in bad_members():
        # The message is load_npy's for a file of the same bytes, naming the shard and the member.
        f = tmp_path / name
        f.write_bytes(raw)
        with pytest.raises(ValueError) as file_error:
            gdsio.load_npy(str(f), device="cpu")
        assert why in str(file_error.value)
        one = str(tar_of(tmp_path / f"{name}.tar", [("a.npy", good), (name, raw), ("z.npy", good)]))
        with pytest.raises(SampleError, match=rf"sample 1 \('.*{name}\.tar, member {name[0]}\.npy'\)") as e:
            batches(Loader(one, 1, device="cpu"))
        assert str(file_error.value).split("': ", 1)[1] in str(e.value)
        assert isinstance(e.value.__cause__, ValueError) and f"{name}.tar, member {name}" in str(e.value.__cause__)
    with caplog.at_level(logging.WARNING, logger="gdsio"):
        out = batches(Loader(p, 3, device="cpu", on_error="skip"))
    assert [v for _, y in out for v in y.tolist()] == [0, 9]
    for x, _ in out:
        assert torch.equal(x[0], torch.arange(6, dtype=torch.float32))
    skipped = [r.getMessage() for r in caplog.records if "skipping sample" in r.getMessage()]
    assert sorted(m.split("member ")[1][:5] for m in skipped) == ["b.npy", "c.npy", "d.npy", "e.npy"]
    # npy_from_bytes on its own: the same checks, naming what it is told.
    with pytest.raises(ValueError, match=r"'here': not a \.npy file"):
        npy_from_bytes(b"not an npy file", "here")


def test_webdataset_npy_samples_read_as_gdsio_reads_the_arrays(tmp_path):
    wds = pytest.importorskip("webdataset")
    arrs = arrays(10, shape=(2, 3))
    with wds.ShardWriter(str(tmp_path / "w-%06d.tar"), maxcount=4, verbose=0) as w:
        for k, a in enumerate(arrs):
            w.write({"__key__": f"s{k:04d}", "npy": a, "cls": k % 3})
    shards = sorted(str(p) for p in tmp_path.glob("w-*.tar"))
    assert len(shards) == 3
    loader = Loader(shards, 4, device="cpu")
    assert loader.kind == "npy"
    got = batches(loader)
    assert torch.equal(torch.cat([x for x, _ in got]), torch.from_numpy(np.stack(arrs)))
    assert torch.cat([y for _, y in got]).tolist() == [k % 3 for k in range(10)]


def test_write_shards_writes_npy_samples(tmp_path):
    arrs = arrays(9)
    _, files = npy_shards(tmp_path / "a", arrs)
    pairs = [(f, k % 2) for k, f in enumerate(files)]
    paths = write_shards(pairs, tmp_path / "out", shard_bytes=1500)
    assert len(paths) > 1
    with tarfile.open(paths[0]) as tf:
        assert tf.getnames()[:2] == ["000000000.npy", "000000000.cls"]
        assert tf.extractfile("000000000.npy").read() == Path(files[0]).read_bytes()  # the bytes as they are
    same(batches(Loader(pairs, 4, device="cpu", shuffle=True, seed=1)),
         batches(Loader(paths, 4, device="cpu", shuffle=True, seed=1)))
    # A folder of .npy files too (unlabeled); images and arrays are not written together.
    assert Loader(write_shards(tmp_path / "a", tmp_path / "out2"), 9, device="cpu").kind == "npy"
    folder = make_folder(tmp_path / "img", classes=1, per_class=2)
    with pytest.raises(ValueError, match=r"both images and \.npy files"):
        write_shards([files[0], *gd.scan(folder).files.paths], tmp_path / "out3")


def test_npy_shards_over_http_and_s3_give_the_local_batches(server, moto, tmp_path):
    arrs = arrays(15)
    shards, _ = npy_shards(tmp_path / "a", arrs)
    urls = [server.put(f"shards/{Path(p).name}", Path(p).read_bytes()) for p in shards]
    c = moto.client()
    c.create_bucket(Bucket="bkt")
    for p in shards:
        c.put_object(Bucket="bkt", Key=f"npy/{Path(p).name}", Body=Path(p).read_bytes())
    for source in (urls, "s3://bkt/npy/*.tar"):
        for kw in [dict(shuffle="global", seed=5), dict(shuffle="window", seed=1, shuffle_window=2),
                   dict(shuffle="window", seed=2, shuffle_window=1, rank=1, world_size=2)]:
            want, got = Loader(shards, 4, device="cpu", **kw), Loader(source, 4, device="cpu", **kw)
            assert got.kind == "npy" and len(got) == len(want)
            same(batches(want), batches(got))
    # The window order reads each shard whole: from its first npy member to the end of its last.
    server.requests.clear()
    with gdsio.settings(remote_chunk_bytes="16M"):
        loader = Loader(urls, 4, device="cpu", shuffle="window", seed=4, shuffle_window=2)
        batches(loader)
    # The first batch's samples each by a GET of its own too (early reads); a shard they all are in is not read.
    first = set(loader.order.window_plan(0).indices[:4].tolist())
    spans, reads, at = 0, 0, 0
    for p in shards:
        s = sh.shard_index(p).samples
        early = [m for j, m in enumerate(s, start=at) if j in first]
        at += len(s)
        spans += sum(m.npy[2] for m in early)
        if len(early) < len(s):
            spans += s[-1].npy[1] + s[-1].npy[2] - s[0].npy[1]
            reads += 1
    st = loader.stats()
    assert st.bytes_read == spans and st.io_backends == {"http": reads + 4} and st.early_reads == 4
    x, y = Loader(urls, 4, device="cpu").dataset[6]
    assert y == 6 and torch.equal(x, torch.from_numpy(arrs[6]))


def test_a_corrupt_remote_npy_member_names_the_shard_and_the_member(server, tmp_path, caplog):
    good = npy_bytes(np.arange(6, dtype=np.float32))
    raw = tar_of(tmp_path / "s.tar", [("a.npy", good), ("b.npy", b"garbage, not an npy file"), ("c.npy", good)]).read_bytes()
    url = server.put("bad/s.tar", raw)
    for shuffle in ("global", "window"):
        with pytest.raises(SampleError, match=r"bad/s\.tar, member b\.npy.*not a \.npy file"):
            batches(Loader(url, 1, device="cpu", shuffle=shuffle))
        with caplog.at_level(logging.WARNING, logger="gdsio"):
            out = batches(Loader(url, 1, device="cpu", shuffle=shuffle, on_error="skip"))
        assert len(out) == 2 and "member b.npy" in caplog.text


@pytest.mark.gpu
def test_npy_shards_on_the_gpu_equal_the_npy_files(tmp_path):
    shards, files = npy_shards(tmp_path / "a", arrays(10))
    # The files with the labels the shards carry (a bare file list's labels are -1).
    want = batches(Loader([(f, k) for k, f in enumerate(files)], 4, device="cuda", shuffle=True, seed=2))
    got = batches(Loader(shards, 4, device="cuda", shuffle=True, seed=2))
    assert all(x.is_cuda for x, _ in got)
    same(want, got)
