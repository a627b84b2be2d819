"""gdsio.Loader over URLs, against gdsio's ranged HTTP server on 127.0.0.1:
samples read one GET each have ``remote_concurrency`` GETs in flight whatever
``threads`` is, and a pass runs with the ``gdsio.settings`` blocks in force
where it starts, in every thread it starts (as gdsio.image.read's threads do)."""

from __future__ import annotations

from pathlib import Path

import pytest
from remote_fixtures import aws_clean, loopback_only, no_leaks, server  # noqa: F401
from test_shards import batches, make_folder, same

import gdsio
import gdsio.data as gd
from gdsio.data import Loader, SampleError, write_shards
from gdsio.data import remote_shards as rs


@pytest.fixture(autouse=True)
def fresh_index_memory(monkeypatch):
    monkeypatch.setattr(rs, "_memory", {})


def objects(server, folder):
    """The ImageFolder's files on the server: [(URL, label)] in the local order, and the same of local paths."""
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file())
    classes = sorted({p.parent.name for p in files})
    local = [(str(p), classes.index(p.parent.name)) for p in files]
    remote = [(server.put(f"folder/{p.parent.name}/{p.name}", p.read_bytes()), y) for p, y in zip(files, (y for _, y in local))]
    return remote, local


@pytest.mark.parametrize("kind", ["objects", "global-shards"])
def test_one_get_a_sample_has_remote_concurrency_in_flight_with_one_thread(server, tmp_path, kind):
    """The first 4 GETs are held until 4 are in flight together: with one
    reader thread bounding the GETs, the first would wait alone and time out."""
    folder = make_folder(tmp_path / "img")
    if kind == "objects":
        source, reference = objects(server, folder)
    else:
        paths = write_shards(folder, tmp_path / "shards", shard_bytes=12000)
        for p in paths:
            server.put(f"shards/{Path(p).name}", Path(p).read_bytes())
            server.put(f"shards/{Path(p).name}.idx.json", Path(p + ".idx.json").read_bytes())
        source, reference = server.url(f"shards/shard-{{000000..{len(paths) - 1:06d}}}.tar"), paths
    kw = dict(device="cpu", threads=1, shuffle="global" if kind != "objects" else True, seed=3)
    with gdsio.settings(remote_concurrency=4):
        loader = Loader(source, 5, **kw)  # the shards' indexes are read here, before the gathering
        server.faults.gather, server.peak = 4, 0
        got = batches(loader)
    assert server.faults.gather_missed == 0 and server.peak >= 4
    same(got, batches(Loader(reference, 5, **kw)))


def test_reader_threads_rise_to_remote_concurrency_only_for_one_get_a_sample(server, tmp_path):
    folder = make_folder(tmp_path / "img")
    paths = write_shards(folder, tmp_path / "shards", shard_bytes=12000)
    for p in paths:
        server.put(f"shards/{Path(p).name}", Path(p).read_bytes())
    urls = [server.url(f"shards/{Path(p).name}") for p in paths]
    with gdsio.settings(remote_concurrency=16):
        for source, shuffle, threads in ((str(folder), True, 1), (paths, "global", 1), (urls, "window", 1),
                                         (objects(server, folder)[0], True, 16), (urls, "global", 16)):
            loader = Loader(source, 5, device="cpu", threads=1, shuffle=shuffle)
            assert loader._plan(0, 0).threads == threads, (source, shuffle)


def test_a_pass_runs_with_the_settings_in_force_where_it_starts(tmp_path):
    """max_image_pixels is read where each image's header is checked, in the
    reader threads: a block around iter() reaches them (12x10 images, 120
    pixels: over twice 50 is refused as Pillow refuses a decompression bomb)."""
    folder = make_folder(tmp_path / "img")
    loader = Loader(str(folder), 5, device="cpu", threads=2)
    assert len(batches(loader)) == 3  # outside the block: the default cap
    with gdsio.settings(max_image_pixels=50):
        with pytest.raises(SampleError) as e:
            batches(loader)
    assert isinstance(e.value.__cause__, gdsio.DecompressionBombError), repr(e.value.__cause__)
    assert len(batches(loader)) == 3


def test_image_read_of_several_urls_takes_the_callers_settings(server, tmp_path):
    """gdsio.image.read reads several files on threads of its own: a block's
    remote_retries=0 reaches them (the default, 4, would try each GET 5 times)."""
    folder = make_folder(tmp_path / "img")
    urls = [u for u, _ in objects(server, folder)[0][:4]]
    server.faults.status_503 = 1000
    with gdsio.settings(remote_retries=0, threads=4), pytest.raises(OSError, match=r"HTTP 503") as e:
        gdsio.image.read(urls, device="cpu")
    assert "after 1 try" in str(e.value), e.value
    assert server.gets <= len(urls)  # one try each, at most


def test_a_gpu_pass_reads_urls_image_by_image_not_in_host_groups(server, tmp_path):
    """On a GPU without GDS a batch's local images are read in up to 4 groups,
    each by one host call; a group of URLs was read one GET after another, so
    4 were in flight at most. URLs are read image by image on the reader threads."""
    from types import SimpleNamespace

    from gdsio.data.producer import Producer

    folder = make_folder(tmp_path / "img")
    urls = objects(server, folder)[0]
    disk = gd.Cache(where="disk", path=tmp_path / "cache", bytes="1M")  # later passes: its local copies, grouped
    with gdsio.settings(backend="pinned"):  # grouped where it applies, no GDS probe (no GPU here)
        for source, grouped, cache in ((str(folder), True, None), (urls, False, None), (urls, True, disk)):
            plan = Loader(source, 5, device="cpu", cache=cache)._plan(0, 0)
            stub = SimpleNamespace(plan=plan, cuda=True, _members_to_device=lambda: False)
            assert Producer._group_images(stub) is grouped  # type: ignore[arg-type]
