"""Indexes of tar shards written by other tools (gdsio.data.shard_index_formats):
DALI's webdataset index read in place of a scan, and wids dataset descriptions
as Loader sources."""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from gdsio.data import Loader, remote_shards
from gdsio.data import shard_index_formats as fmt
from gdsio.data import shards as sh


def jpeg(seed, size=(10, 8)):
    a = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(a).save(out, format="JPEG")
    return out.getvalue()


def npy(seed):
    out = io.BytesIO()
    np.save(out, np.arange(6, dtype=np.float32).reshape(2, 3) + seed)
    return out.getvalue()


def tar_of(path, members, form=tarfile.PAX_FORMAT, dirs=()):
    with tarfile.open(path, "w", format=form) as tf:
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            tf.addfile(info)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return str(path)


def dali_index_of(shard, out=None, version="v1.2"):
    """A DALI index of `shard` as wds2idx writes it: one line per run of members
    sharing a key, each member ``ext offset size name`` (v1.1: no name), the
    offset being where the member's data starts (what tarfile's position is
    after its header, which is what wds2idx records)."""
    runs, last = [], None
    with tarfile.open(shard, "r:") as tf:
        for info in tf:
            if not info.isreg():
                continue
            key, ext = sh.key_and_field(info.name)
            if key != last:
                runs.append([])
                last = key
            runs[-1].append((ext, info.offset_data, info.size, info.name))
    lines = [f"{version} {len(runs)}"]
    for run in runs:
        lines.append(" ".join(" ".join(map(str, m if version == "v1.2" else m[:3])) for m in run))
    out = out or fmt.dali_index_paths(shard)[0]
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return out


def mixed_shards(tmp_path):
    """Shards of every kind of member a scan tells apart: labels from cls, json
    and integer txt, a caption, two images in a sample, a second image field,
    upper-case extensions, directories, long and non-ASCII names in pax and GNU
    headers, ustar names with a prefix."""
    long = "d" * 90 + "/" + "k" * 120
    a = tar_of(tmp_path / "a.tar", [
        ("s0.jpg", jpeg(0)), ("s0.cls", b"3"),
        ("s1.JPG", jpeg(1)), ("s1.json", json.dumps({"label": 4, "x": 1}).encode()), ("s1.txt", b"7"),
        ("s2.seg.png", jpeg(2)), ("s2.jpg", jpeg(3)), ("s2.txt", b"5"), ("s2.caption.txt", b"a cat" * 20000),
        (long + ".jpg", jpeg(4)), (long + ".cls", b"1"),
        ("caf\u00e9/\u00e9t\u00e9.jpg", jpeg(5)), ("caf\u00e9/\u00e9t\u00e9.cls", b"2"),
    ], dirs=("sub/",))
    b = tar_of(tmp_path / "b.tar", [(f"{'p' * 80}/{'q' * 60}{k}.{e}", d) for k in range(3)
                                    for e, d in (("jpg", jpeg(10 + k)), ("cls", str(k).encode()))],
               form=tarfile.USTAR_FORMAT)
    c = tar_of(tmp_path / "c.tar", [(long + "x.jpg", jpeg(20)), (long + "x.cls", b"0"), ("t.jpg", jpeg(21)),
                                    ("t.cls", b"8")], form=tarfile.GNU_FORMAT)
    return [a, b, c]


def no_scan(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the shard was scanned")
    monkeypatch.setattr(sh, "scan_shard", refuse)
    monkeypatch.setattr(sh, "scan_tar", refuse)


def test_a_dali_index_gives_the_scans_samples_without_a_scan(tmp_path, monkeypatch):
    paths = mixed_shards(tmp_path)
    scanned = [sh.scan_shard(p) for p in paths]
    for p in paths:
        dali_index_of(p)
        assert os.path.exists(p[:-4] + ".idx") and not os.path.exists(p + sh.INDEX_SUFFIX)
    no_scan(monkeypatch)
    got = remote_shards.shard_indexes(paths)
    for a, b in zip(got, scanned):
        assert a.members == b.members and a.samples == b.samples and (a.size, a.mtime_ns) == (b.size, b.mtime_ns)
    assert [s.label for s in got[0].samples] == [3, 4, 5, 1, 2]
    # What it read is kept as gdsio's own index, read from then on.
    assert all(os.path.exists(p + sh.INDEX_SUFFIX) for p in paths)
    assert [i.samples for i in remote_shards.shard_indexes(paths)] == [i.samples for i in scanned]


def test_the_offsets_of_a_dali_index_are_where_the_member_data_starts(tmp_path):
    p = tar_of(tmp_path / "s.tar", [("k" * 150 + ".jpg", b"IMAGE"), ("k" * 150 + ".cls", b"6")])
    listed = fmt.parse_dali_index(Path(dali_index_of(p)).read_text(), "idx")
    with open(p, "rb") as f:
        for m, want in zip(listed[0], (b"IMAGE", b"6")):
            f.seek(m.offset)
            assert m.offset % 512 == 0 and f.read(m.size) == want


def test_the_loader_over_dali_indexed_shards_equals_the_scanned(tmp_path, monkeypatch):
    wds = pytest.importorskip("webdataset")
    (tmp_path / "w").mkdir()
    with wds.ShardWriter(str(tmp_path / "w" / "w-%06d.tar"), maxcount=4, verbose=0) as w:
        for k in range(10):
            w.write({"__key__": f"s{k:04d}", "jpg": jpeg(k), "cls": k % 3})
    paths = sorted(str(p) for p in (tmp_path / "w").glob("*.tar"))
    copies = []
    for p in paths:
        copies.append(shutil.copy(p, tmp_path / os.path.basename(p)))
        dali_index_of(p)
    want = [(x.clone(), y.clone()) for x, y in Loader(copies, 3, device="cpu", shuffle=True, seed=2)]
    no_scan(monkeypatch)
    got = [(x.clone(), y.clone()) for x, y in Loader(paths, 3, device="cpu", shuffle=True, seed=2)]
    assert len(got) == len(want) == 4
    for (xa, ya), (xb, yb) in zip(got, want):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_a_v11_index_takes_the_names_from_the_headers(tmp_path, monkeypatch, caplog):
    p = tar_of(tmp_path / "s.tar", [("a.jpg", jpeg(0)), ("a.cls", b"1"), ("b.jpg", jpeg(1)), ("b.cls", b"2")])
    want = sh.scan_shard(p)
    idx = dali_index_of(p, version="v1.1")
    assert Path(idx).read_text().startswith("v1.1 2\n")
    assert fmt.dali_index(p, idx).samples == want.samples
    # A header after an extension header (a long name: pax) may not hold the whole name: scanned instead.
    q = tar_of(tmp_path / "q.tar", [("k" * 120 + ".jpg", jpeg(0)), ("k" * 120 + ".cls", b"1")])
    idx = dali_index_of(q, version="v1.1")
    with pytest.raises(ValueError, match=r"shard '.*q\.tar'.*v1\.1 index names no member"):
        fmt.dali_index(q, idx)
    with caplog.at_level(logging.INFO, logger="gdsio.data"):
        assert remote_shards.shard_indexes([q])[0].samples == sh.scan_shard(q).samples
    assert "not using the DALI index" in caplog.text and "q.tar" in caplog.text


def rewrite(path, members):
    """`path` rewritten with `members`, the DALI index beside it left as it was."""
    os.unlink(path)
    tar_of(path, members)


@pytest.mark.parametrize("change", ["bigger", "renamed", "appended", "fewer", "other", "offset", "text", "count"])
def test_a_dali_index_that_does_not_describe_the_shard_is_not_used(tmp_path, caplog, change):
    members = [("a.jpg", jpeg(0)), ("a.cls", b"1"), ("b.jpg", jpeg(1)), ("b.cls", b"2")]
    p = tar_of(tmp_path / "s.tar", members)
    idx = dali_index_of(p)
    text = Path(idx).read_text()
    if change == "bigger":  # a member re-encoded: every later offset moves
        rewrite(p, [("a.jpg", jpeg(0, (40, 30)))] + members[1:])
    elif change == "renamed":
        rewrite(p, [("a.jpg", jpeg(0)), ("a.cls", b"1"), ("c.jpg", jpeg(1)), ("c.cls", b"2")])
    elif change == "appended":  # the index lists a prefix of the shard
        rewrite(p, members + [("c.jpg", jpeg(2)), ("c.cls", b"3")])
    elif change == "fewer":
        rewrite(p, members[:2])
    elif change == "other":  # another shard's index
        shutil.copy(dali_index_of(tar_of(tmp_path / "o.tar", [("x.jpg", jpeg(5, (30, 30))), ("x.cls", b"0")])), idx)
    elif change == "offset":
        Path(idx).write_text(text.replace(" 512 ", " 1024 ", 1))
    elif change == "text":
        Path(idx).write_text(text.replace("v1.2", "v9"))
    else:
        Path(idx).write_text(text.replace("v1.2 2", "v1.2 3"))
    want = sh.scan_shard(p)
    with pytest.raises(ValueError, match=r"s\.(tar|idx)'"):
        fmt.dali_index(p, idx)
    with caplog.at_level(logging.INFO, logger="gdsio.data"):
        got = remote_shards.shard_indexes([p])[0]
    assert got.samples == want.samples and got.members == want.members
    assert f"not using the DALI index '{idx}' of shard '{p}'" in caplog.text


def test_offsets_into_the_next_members_pax_header_are_refused(tmp_path, caplog):
    # wds2idx's GNU tar path takes a member's offset from the next member's block number less
    # its size, rounded down; GNU tar numbers the ustar header, after a pax header: the offset
    # of a member before a long-named one then lands on that pax header, not on its data.
    long = "k" * 150
    p = tar_of(tmp_path / "s.tar", [("a.jpg", jpeg(0, (40, 30))), ("a.cls", b"1"), (long + ".jpg", jpeg(1)),
                                    (long + ".cls", b"2")])
    idx = dali_index_of(p)
    lines = Path(idx).read_text().split("\n")
    with tarfile.open(p) as tf:
        cls, following = [i for i in tf if i.name in ("a.cls", long + ".jpg")]
    wrong = following.offset_data - 512 - cls.size
    wrong -= wrong % 512
    assert wrong != cls.offset_data
    lines[1] = lines[1].replace(f"cls {cls.offset_data} ", f"cls {wrong} ")
    Path(idx).write_text("\n".join(lines))
    with pytest.raises(ValueError, match=r"member 'a\.cls' at byte \d+ is not what the shard holds there "
                                         r"\(a tar header of type b'x'"):
        fmt.dali_index(p, idx)
    with caplog.at_level(logging.INFO, logger="gdsio.data"):
        assert [s.label for s in remote_shards.shard_indexes([p])[0].samples] == [1, 2]
    assert "not using the DALI index" in caplog.text


def test_a_malformed_shard_raises_as_a_scan_would(tmp_path):
    p = tar_of(tmp_path / "s.tar", [("a.jpg", jpeg(0)), ("a.cls", b"one")])
    with pytest.raises(ValueError, match=r"shard '.*s\.tar', member 'a\.cls': a cls member must hold an integer"):
        fmt.dali_index(p, dali_index_of(p))
    q = tar_of(tmp_path / "q.tar", [("a.jpg", jpeg(0)), ("b.txt", b"caption")])
    with pytest.raises(ValueError, match=r"shard '.*q\.tar': sample 'b' has no image member"):
        fmt.dali_index(q, dali_index_of(q))


def test_npy_members_are_found_as_the_scan_finds_them(tmp_path, monkeypatch):
    p = tar_of(tmp_path / "s.tar", [("a.npy", npy(0)), ("a.cls", b"1"), ("b.feat.npy", npy(1)), ("b.cls", b"2")])
    want = sh.scan_shard(p)
    dali_index_of(p)
    no_scan(monkeypatch)
    assert remote_shards.shard_indexes([p])[0].samples == want.samples


def test_the_names_a_dali_index_is_looked_for_under():
    assert fmt.dali_index_paths("d/shard-000001.tar") == ["d/shard-000001.idx", "d/shard-000001.tar.idx"]
    assert fmt.dali_index_paths("d.x/a.b.tar") == ["d.x/a.idx", "d.x/a.b.tar.idx"]
    assert fmt.dali_index_paths(".hidden.tar") == [".hidden.idx", ".hidden.tar.idx"]


def wids_json(path, shards, **extra):
    desc = {"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": shards, **extra}
    path.write_text(json.dumps(desc))
    return str(path)


def test_a_wids_description_is_a_loader_source(tmp_path):
    (tmp_path / "data").mkdir()
    paths = [tar_of(tmp_path / "data" / f"s{j}.tar", [(f"k{j}{i}.jpg", jpeg(3 * j + i)) for i in range(3)])
             for j in range(2)]
    source = wids_json(tmp_path / "data" / "ds.json", [{"url": "s0.tar", "nsamples": 3, "md5sum": "-"},
                                                       {"url": "s1.tar", "nsamples": 3}])
    assert fmt.wids_shards(source) == [fmt.WidsShard(p, 3) for p in paths]
    a = [x.clone() for x, _ in Loader(source, 2, device="cpu", shuffle=True, seed=1)]
    b = [x.clone() for x, _ in Loader(paths, 2, device="cpu", shuffle=True, seed=1)]
    assert len(a) == 3 and all(torch.equal(x, y) for x, y in zip(a, b))
    # A "base", and datasets with their own (a relative one as is, as wids takes it).
    other = wids_json(tmp_path / "other.json", [{"url": "s1.tar", "nsamples": 3}], base=str(tmp_path / "data"),
                      datasets=[{"base": str(tmp_path / "data"), "shardlist": [{"url": "s0.tar", "nsamples": 3}]},
                                {"source_url": source}])
    assert [s.url for s in fmt.wids_shards(other)] == [paths[1], paths[0]] + paths
    # URLs: relative ones joined to a URL base, absolute ones kept (no request is made here).
    remote = wids_json(tmp_path / "remote.json", [{"url": "a/s0.tar", "nsamples": 1},
                                                  {"url": "/b/s1.tar?x=1", "nsamples": 1},
                                                  {"url": "s3://bucket/c/s2.tar", "nsamples": 1}],
                       base="http://127.0.0.1:9/data")
    assert [s.url for s in fmt.wids_shards(remote)] == ["http://127.0.0.1:9/data/a/s0.tar",
                                                        "http://127.0.0.1:9/b/s1.tar?x=1", "s3://bucket/c/s2.tar"]
    assert fmt.is_wids_source("http://h/ds.json?sig=1") and fmt.is_wids_source(tmp_path / "x.JSON")
    assert not fmt.is_wids_source("ds.tar") and not fmt.is_wids_source(b"ds.json")


def test_a_wids_description_that_does_not_match_raises(tmp_path):
    p = tar_of(tmp_path / "s.tar", [("a.jpg", jpeg(0)), ("b.jpg", jpeg(1))])
    bad = wids_json(tmp_path / "bad.json", [{"url": "s.tar", "nsamples": 3}])
    with pytest.raises(ValueError, match=r"wids dataset '.*bad\.json': shard '.*s\.tar' holds 2 samples; "
                                         r"the description says 3"):
        Loader(bad, 2, device="cpu")
    missing = wids_json(tmp_path / "missing.json", [{"url": "t.tar", "nsamples": 2}])
    with pytest.raises(FileNotFoundError, match=r"missing\.json'.*shard '.*t\.tar' does not exist"):
        Loader(missing, 2, device="cpu")
    (tmp_path / "plain.json").write_text(json.dumps({"shards": [p]}))
    with pytest.raises(ValueError, match=r"plain\.json'.*not a wids dataset description"):
        Loader(str(tmp_path / "plain.json"), 2, device="cpu")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ValueError, match=r"broken\.json'.*not JSON"):
        fmt.wids_shards(str(tmp_path / "broken.json"))
    for shardlist in ([{"url": "s.tar"}], [{"url": "s.tar", "nsamples": -1}], {"url": "s.tar"}):
        with pytest.raises(ValueError, match=r"nsamples|shardlist"):
            fmt.wids_shards(wids_json(tmp_path / "x.json", shardlist))
