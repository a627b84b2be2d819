"""Tar shards on an object store (gdsio.data.remote_shards) and the
shard-window order (gdsio.data.sampler.WindowOrder), against moto's S3 and
gdsio's ranged HTTP server on 127.0.0.1: the batches of remote shards are the
local shards', the index is built by one streamed GET and then read from the
disk cache or from beside the shard, the window order is reproducible,
resumable and split across ranks, and a shard rewritten on the store is an
error naming it."""

from __future__ import annotations

import io
import json
import threading
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
from gdsio.data import Loader, SampleError, write_shards
from gdsio.data import remote_shards as rs
from gdsio.data import shards as sh
from gdsio.data.sampler import WindowOrder


@pytest.fixture(autouse=True)
def fresh_index_memory(monkeypatch):
    """Each test starts with no remote index kept in this process."""
    monkeypatch.setattr(rs, "_memory", {})


@pytest.fixture
def local(tmp_path):
    """(ImageFolder, its shards: 15 samples in 4 shards of 3 to 5, with their indexes)."""
    folder = make_folder(tmp_path / "img")
    paths = write_shards(folder, tmp_path / "shards", shard_bytes=12000)
    assert len(paths) == 4
    return folder, paths


def serve(server, paths, with_index=False):
    """The shards (and their .idx.json when asked) on the ranged server; their URLs."""
    urls = []
    for p in paths:
        urls.append(server.put(f"shards/{Path(p).name}", Path(p).read_bytes()))
        if with_index:
            server.put(f"shards/{Path(p).name}{sh.INDEX_SUFFIX}", Path(p + sh.INDEX_SUFFIX).read_bytes())
    return urls


def gets(server, suffix=".tar"):
    """(target, Range) of the GETs of names ending in `suffix` the server answered."""
    return [(p, r) for m, p, r in server.requests if m == "GET" and p.endswith(suffix)]


def window_gets(order, epoch, shard_paths, targets, early=True):
    """(target, Range) of the tar GETs of a window-order pass of `order` from its first batch, sorted, and
    the bytes they read: each unit's one ranged GET of its span (none for a unit whose samples are all in
    the first batch), and each first-batch sample's own GET (the early reads; none when not `early`)."""
    plan = order.window_plan(epoch)
    first = plan.indices[: order.batch_size].tolist() if early else []
    starts = np.cumsum([0] + [len(sh.shard_index(p).samples) for p in shard_paths])
    members = [m for p in shard_paths for m in sh.shard_index(p).samples]
    want, nbytes = [], 0
    for shard, a, b in plan.units.tolist():
        if set(range(a, b)) - set(first):
            lo, hi = members[a].offset, members[b - 1].offset + members[b - 1].size
            want.append((targets[shard], f"bytes={lo}-{hi - 1}"))
            nbytes += hi - lo
    for i in first:
        m = members[i]
        want.append((targets[int(np.searchsorted(starts, i, side="right")) - 1],
                     f"bytes={m.offset}-{m.offset + m.size - 1}"))
        nbytes += m.size
    return sorted(want), nbytes


KWARGS = [dict(shuffle="global", seed=5), dict(shuffle=False), dict(shuffle="window", seed=1, shuffle_window=2),
          dict(shuffle="window", seed=2, shuffle_window=1, rank=1, world_size=2),
          dict(shuffle="global", seed=3, rank=0, world_size=3, drop_last=True)]


def test_s3_shards_give_the_local_shards_batches(moto, local):
    folder, paths = local
    c = moto.client()
    c.create_bucket(Bucket="bkt")
    for p in paths:
        c.put_object(Bucket="bkt", Key=f"train/{Path(p).name}", Body=Path(p).read_bytes())
    c.put_object(Bucket="bkt", Key="train/README", Body=b"not a shard")
    glob, brace = "s3://bkt/train/*.tar", "s3://bkt/train/shard-{000000..000003}.tar"
    assert sh.expand_shards(glob) == sh.expand_shards(brace) == [f"s3://bkt/train/{Path(p).name}" for p in paths]
    for kw in KWARGS:
        want = Loader(paths, 4, device="cpu", **kw)
        got = Loader(glob, 4, device="cpu", **kw)
        assert len(got) == len(want) and got.kind == "image"
        for epoch in (0, 1):
            want.set_epoch(epoch)
            got.set_epoch(epoch)
            same(batches(want), batches(got))
    # shuffle=True: the window order for shards on a store, the global one for local shards.
    assert Loader(brace, 4, device="cpu", shuffle=True).state_dict()["shuffle"] == "window"
    assert Loader(paths, 4, device="cpu", shuffle=True).state_dict()["shuffle"] is True
    with pytest.raises(FileNotFoundError, match="no shard matches"):
        sh.expand_shards("s3://bkt/val/*.tar")


def test_http_shards_and_the_window_reads(server, local):
    folder, paths = local
    urls = serve(server, paths)
    brace = server.url("shards/shard-{000000..000003}.tar")
    table = gd.scan(brace)
    assert table.files.paths[0] == urls[0] and table.shards.etags[0].startswith('"')
    with gdsio.settings(remote_chunk_bytes="16M"):
        loader = Loader(brace, 4, device="cpu", shuffle="window", seed=4, shuffle_window=2)
        server.requests.clear()
        same(batches(Loader(paths, 4, device="cpu", shuffle="window", seed=4, shuffle_window=2)), batches(loader))
    # Each shard read whole by one ranged GET: from its first image member to the end of its last; and
    # the first batch's samples each by a GET of its own (early reads), not waiting for their window.
    want, spans = window_gets(loader.order, 0, paths, [u[len(server.base):] for u in urls])
    assert sorted(gets(server)) == want
    st = loader.stats()
    assert st.io_backends == {"http": len(want)} and st.bytes_read == spans and st.early_reads == 4
    assert st.passes[-1]["early_reads"] == 4 and "4 early reads" in str(st)
    # loader.dataset[i] reads the member's range: the local shards' sample.
    x, y = loader.dataset[6]
    lx, ly = Loader(paths, 4, device="cpu").dataset[6]
    assert y == ly and torch.equal(x, lx)
    # http servers have no listing.
    with pytest.raises(ValueError, match="no listing"):
        Loader(server.url("shards/*.tar"), 4, device="cpu")


def test_a_window_pass_first_batch_does_not_wait_for_its_window(server, local, tmp_path):
    """The first batch of a pass over shards on a store comes from its samples' own GETs: the server
    holds every GET longer than one member (the shards' whole reads) until that batch is out, and
    releases them only then. Without the early reads the batch would wait for them: the hold would time
    out (30 s) and count a miss. A resumed pass's first batch too; with a disk cache, none."""
    folder, paths = local
    urls = serve(server, paths)
    biggest = max(m.size for p in paths for m in sh.shard_index(p).samples)
    kw = dict(shuffle="window", seed=4, shuffle_window=2)
    want = batches(Loader(paths, 4, device="cpu", **kw))
    loader = Loader(urls, 4, device="cpu", **kw)
    server.requests.clear()  # (the indexes: a streamed GET of each shard)
    f = server.faults
    f.hold_if = lambda n: n > biggest
    it = iter(loader)
    first = next(it)
    f.release.set()
    same(want, [(first[0].clone(), first[1].clone())] + batches(it))
    assert f.hold_missed == 0 and loader.stats().early_reads == 4
    whole = [p for _, p, r in server.requests if r and int(r.split("-")[1]) - int(r[6:].split("-")[0]) >= biggest]
    # the shards' whole reads went through the hold; shard 3's samples are all in this first batch: not read whole
    assert sorted(set(whole)) == sorted(u[len(server.base):] for u in urls[:3])
    # A resumed pass: its first batch read alone too, the rest from the shards' reads.
    again = Loader(urls, 4, device="cpu", **kw)
    again.load_state_dict({**again.state_dict(), "batches_done": 1})
    f.release.clear()  # (holds from here: the Loaders are made, their indexes read)
    it = iter(again)
    second = next(it)
    f.release.set()
    same(want[1:], [(second[0].clone(), second[1].clone())] + batches(it))
    assert f.hold_missed == 0 and again.stats().early_reads == 4
    # Its own reads held instead: the first batch from the shards' whole reads, whichever comes first
    # (a seed whose first batch has other samples in each of its shards: seed 4's is all of shard 3's).
    kw5 = dict(kw, seed=5)
    plan = Loader(paths, 4, device="cpu", **kw5).order.window_plan(0)
    head = set(plan.indices[:4].tolist())
    assert all(set(range(a, b)) - head for _, a, b in plan.units.tolist())
    late = Loader(urls, 4, device="cpu", **kw5)
    f.release.clear()
    f.hold_if = lambda n: n <= biggest
    it = iter(late)
    first = next(it)
    f.release.set()
    same(batches(Loader(paths, 4, device="cpu", **kw5)), [(first[0].clone(), first[1].clone())] + batches(it))
    assert f.hold_missed == 0 and late.stats().early_reads == 4  # they ran, and were counted, before the end
    f.hold_if = None
    # Its own reads failing (503, no retry): the first batch from the shards' reads, no error; none counted.
    failing = Loader(urls, 4, device="cpu", **kw5)
    f.fail_if = lambda n: n is not None and n <= biggest
    with gdsio.settings(remote_retries=0):
        same(batches(Loader(paths, 4, device="cpu", **kw5)), batches(failing))
    f.fail_if = None
    assert failing.stats().early_reads == 0
    # With a disk cache the shards come whole into the cache first: no early reads.
    cached = Loader(urls, 4, device="cpu", cache=gd.Cache(where="disk", path=tmp_path / "c", bytes="1M"), **kw)
    same(want, batches(cached))
    assert cached.stats().early_reads == 0


def test_the_index_is_one_get_then_the_cache_or_the_file_beside(server, local, tmp_path, monkeypatch):
    folder, paths = local
    urls = serve(server, paths)
    brace = server.url("shards/shard-{000000..000003}.tar")
    cache = gd.Cache(where="disk", path=tmp_path / "cache", bytes="1M")
    Loader(brace, 4, device="cpu", cache=cache)
    sizes = [Path(p).stat().st_size for p in paths]
    assert sorted(gets(server)) == sorted((u[len(server.base):], f"bytes=0-{n - 1}") for u, n in zip(urls, sizes))
    stored = sorted((tmp_path / "cache" / rs.INDEX_FOLDER).glob("*.idx.json"))
    assert len(stored) == 4
    obj = json.loads(stored[0].read_text())
    assert obj["format"] == "gdsio-wds-index" and obj["shard_etag"].startswith('"') and obj["shard_mtime_ns"] == 0
    # A new process (no index in memory) with the same disk cache: no GET, one HEAD a shard.
    monkeypatch.setattr(rs, "_memory", {})
    n_gets, n_heads = server.gets, server.heads
    again = Loader(brace, 4, device="cpu", cache=gd.Cache(where="disk", path=tmp_path / "cache", bytes="1M"))
    assert server.gets == n_gets and server.heads == n_heads + 4 and len(again.table) == 15
    # Without a cache, the index beside each shard: one GET of it, and of the shard only the
    # 512-byte tar headers before its first and last members (the index is current).
    server.objects.clear()
    serve(server, paths, with_index=True)
    monkeypatch.setattr(rs, "_memory", {})
    server.requests.clear()
    got = Loader(brace, 4, device="cpu", shuffle="window", seed=1)
    assert len(gets(server, ".idx.json")) == 4
    heads = []
    for u, p in zip(urls, paths):
        members = sh.shard_index(p).members
        heads += [(u[len(server.base):], f"bytes={o - 512}-{o - 1}") for _, o, _ in (members[0], members[-1])]
    assert sorted(gets(server)) == sorted(heads)
    same(batches(Loader(paths, 4, device="cpu", shuffle="window", seed=1)), batches(got))
    # One beside a rewritten shard (another size) is stale: the shard is scanned instead.
    server.put("shards/shard-000000.tar", Path(paths[1]).read_bytes() + bytes(10240))  # zeros: still the end
    monkeypatch.setattr(rs, "_memory", {})
    assert [s.key for s in rs.remote_index(urls[0]).samples] == [s.key for s in sh.shard_index(paths[1]).samples]


def test_an_index_beside_a_rewritten_shard_of_the_same_size_is_stale(server, local, tmp_path, caplog):
    """Tar pads a shard to 10 KiB records, so a rewritten shard often keeps its
    size: the same samples in another order here. The index beside it gives
    other members' places; the tar headers say so, and the shard is scanned."""
    folder, paths = local
    old = sh.shard_index(paths[0])
    with tarfile.open(paths[0]) as t:
        members = [(m, t.extractfile(m).read()) for m in t.getmembers()]
    by_key: dict[str, list] = {}
    for m, data in members:
        by_key.setdefault(sh.key_and_field(m.name)[0], []).append((m, data))
    redone = tmp_path / "redone.tar"
    with tarfile.open(redone, "w", format=tarfile.USTAR_FORMAT) as t:
        for key in reversed(list(by_key)):
            for m, data in by_key[key]:
                t.addfile(m, io.BytesIO(data))
    assert redone.stat().st_size == Path(paths[0]).stat().st_size
    url = server.put("shards/s.tar", redone.read_bytes())
    server.put("shards/s.tar" + sh.INDEX_SUFFIX, Path(paths[0] + sh.INDEX_SUFFIX).read_bytes())
    with caplog.at_level(logging.INFO, logger="gdsio"):
        index = rs.remote_index(url)
    assert "is stale (the tar header before member" in caplog.text
    assert [s.key for s in index.samples] == [s.key for s in reversed(old.samples)]
    assert index.members == sh.scan_shard(str(redone)).members


def test_a_streamed_index_survives_a_dropped_connection(server, local):
    folder, paths = local
    urls = serve(server, paths[:1])
    server.faults.drop = 1  # the GET's body cut in half: the next try asks for the rest
    index = rs.remote_index(urls[0])
    local_index = sh.shard_index(paths[0])
    assert index.members == local_index.members and index.samples == local_index.samples
    assert server.ranges[-1].startswith("bytes=") and server.ranges[-1] != "bytes=0-"


def test_bad_remote_shards_name_the_shard_and_the_member(server, tmp_path):
    members = [("a.jpg", b"A" * 600), ("a.cls", b"0"), ("b.jpg", b"B" * 10), ("b.cls", b"1")]
    raw = tar_of(tmp_path / "good.tar", members).read_bytes()
    at = 512 + 1024 + 1024  # the header of b.jpg
    bad = server.put("corrupt.tar", raw[:at] + b"\x07" * 100 + raw[at + 100:])
    with pytest.raises(ValueError, match=r"corrupt\.tar.*corrupt tar header.*a\.cls"):
        gd.scan(bad)
    cut = server.put("cut.tar", raw[:800])
    with pytest.raises(ValueError, match=r"cut\.tar.*a\.jpg"):
        gd.scan(cut)
    dup = server.put("dup.tar", tar_of(tmp_path / "dup.tar", members + [("a.cls", b"3")]).read_bytes())
    with pytest.raises(ValueError, match=r"dup\.tar.*duplicate key 'a'"):
        gd.scan(dup)
    with pytest.raises(FileNotFoundError, match="missing.tar"):
        gd.scan(server.url("missing.tar"))


@pytest.mark.parametrize("shuffle,disk", [("window", False), ("global", False), ("window", True), ("global", True)])
def test_a_shard_rewritten_on_the_store_is_an_error_naming_it(server, local, shuffle, disk, caplog, tmp_path):
    folder, paths = local
    urls = serve(server, paths)

    def cache(name):  # a disk cache fetches each shard whole, once: only the version its index describes
        return gd.Cache(where="disk", path=tmp_path / name, bytes="1M") if disk else None

    loader = Loader(urls, 4, device="cpu", shuffle=shuffle, seed=0, cache=cache("a"))
    skipping = Loader(urls, 4, device="cpu", shuffle=shuffle, seed=0, on_error="skip", cache=cache("b"))
    server.put("shards/shard-000002.tar", Path(paths[2]).read_bytes() + b"\0" * 512)  # another ETag
    with pytest.raises(SampleError, match=r"shard-000002\.tar.*changed on the store"):
        batches(loader)
    with caplog.at_level(logging.WARNING, logger="gdsio"):
        out = batches(skipping)
    n2 = len(sh.shard_index(paths[2]).samples)
    assert sum(len(y) for _, y in out) == 15 - n2
    skipped = [r.getMessage() for r in caplog.records if "skipping sample" in r.getMessage()]
    assert len(skipped) == n2 and all("shard-000002.tar" in m and "changed on the store" in m for m in skipped)


def test_window_order_is_reproducible_and_resumes_exactly(server, local):
    folder, paths = local
    serve(server, paths)
    brace = server.url("shards/shard-{000000..000003}.tar")
    kw = dict(shuffle="window", seed=7, shuffle_window=2)
    a = Loader(brace, 3, device="cpu", **kw)
    first = batches(a)
    same(first, batches(Loader(brace, 3, device="cpu", **kw)))  # epoch 1 of a
    b = Loader(brace, 3, device="cpu", **kw)
    same(first, batches(b))
    labels = sorted(int(v) for _, y in first for v in y)
    assert labels == sorted(gd.scan(folder).files.labels.tolist())  # every sample once
    for stop in (1, 3):  # mid-window and past the first window
        c = Loader(brace, 3, device="cpu", **kw)
        it = iter(c)
        for _ in range(stop):
            next(it)
        state = json.loads(json.dumps(c.state_dict()))
        del it
        d = Loader(brace, 3, device="cpu", **kw)
        d.load_state_dict(state)
        same(first[stop:], batches(d))
    # A sample cache: the second epoch comes from it (no shard read), the same batches.
    cached = Loader(brace, 3, device="cpu", cache=gd.Cache(bytes="4M", where="cpu"), **kw)
    plain = Loader(brace, 3, device="cpu", **kw)
    for epoch in (0, 1):
        cached.set_epoch(epoch)
        plain.set_epoch(epoch)
        same(batches(plain), batches(cached))
    done, again = cached.stats().passes
    assert done["bytes_read"] == plain.stats().passes[0]["bytes_read"] and again["bytes_read"] == 0
    assert done["early_reads"] == 3 and again["early_reads"] == 0  # a first batch of hits: nothing to read alone
    with pytest.raises(ValueError, match="shuffle_window"):
        Loader(brace, 3, device="cpu", shuffle="window", seed=7, shuffle_window=3).load_state_dict(state)
    with pytest.raises(ValueError, match="shuffle="):
        Loader(folder, 3, device="cpu", shuffle="window")
    with pytest.raises(ValueError, match="shuffle must be"):
        Loader(brace, 3, device="cpu", shuffle="buffer")


@pytest.mark.parametrize("world,drop_last", [(1, False), (2, False), (3, False), (4, True), (7, False)])
def test_window_ranks_are_disjoint_and_cover_the_dataset(world, drop_last):
    starts = np.array([0, 5, 9, 9, 14, 20, 23])  # an empty shard too
    n = int(starts[-1])
    orders = [WindowOrder(starts, batch_size=4, shuffle_window=2, seed=3, rank=r, world_size=world, drop_last=drop_last)
              for r in range(world)]
    plans = [o.window_plan(5) for o in orders]
    per_rank = n // world if drop_last else -(-n // world)
    seen = np.concatenate([p.indices for p in plans])
    assert all(len(p.indices) == per_rank for p in plans) and len({len(o) for o in orders}) == 1
    if drop_last:
        assert len(seen) == len(set(seen.tolist())) == per_rank * world
    else:
        assert set(seen.tolist()) == set(range(n))  # covered; the padding repeats the epoch's head only
        assert len(seen) - len(set(seen.tolist())) == per_rank * world - n
    for o, p in zip(orders, plans):
        shard_of = np.searchsorted(starts, p.indices, side="right") - 1
        assert np.array_equal(shard_of, p.units[p.unit_of, 0])  # each sample read with its own shard's unit
        assert ((p.indices >= p.units[p.unit_of, 1]) & (p.indices < p.units[p.unit_of, 2])).all()
        inner = p.units[1:-1]  # whole shards, but for the run's first and last
        assert all(starts[s] == a and starts[s + 1] == b for s, a, b in inner.tolist())
        again = WindowOrder(starts, batch_size=4, shuffle_window=2, seed=3, rank=o.rank, world_size=world,
                            drop_last=drop_last)
        assert np.array_equal(p.indices, again.indices(5))  # a pure function of (seed, epoch, rank)
    assert not np.array_equal(orders[0].indices(0), orders[0].indices(1))


def test_a_shard_rewritten_during_the_pass_is_an_error_naming_it(server, local):
    """Rewritten after the pass began and before its window is read: the read
    of it fails (its ETag is not the index's), never mixing two versions."""
    folder, paths = local
    urls = serve(server, paths)
    loader = Loader(urls, 1, device="cpu", shuffle="window", seed=0, shuffle_window=1, prefetch=1)
    plan = loader.order.window_plan(0)
    last = int(plan.units[-1, 0])  # the shard of the last window: read after the first samples are out
    assert all(len(sh.shard_index(p).samples) >= 3 for p in paths)  # the reader is at most a window ahead of it
    it = iter(loader)
    next(it)
    server.put(f"shards/{Path(paths[last]).name}", Path(paths[last]).read_bytes() + bytes(512))
    with pytest.raises(SampleError, match=rf"{Path(paths[last]).name}.*changed on the store"):
        for _ in it:
            pass


def test_a_pass_opens_each_remote_shard_once(server, local):
    """The global order reads a sample by one GET: each shard's HEAD (its ETag
    checked against its index's) once a pass; a shard rewritten after that is
    refused by the GETs' If-Match, with the same error."""
    folder, paths = local
    urls = serve(server, paths)
    loader = Loader(urls, 4, device="cpu", shuffle="global", seed=1, prefetch=1)
    server.requests.clear()
    same(batches(Loader(paths, 4, device="cpu", shuffle="global", seed=1)), batches(loader))
    heads = [p for m, p, _ in server.requests if m == "HEAD"]
    assert sorted(heads) == sorted(u[len(server.base):] for u in urls) and len(gets(server)) == 15
    # Batches of one: when the first is out, the reader has read at most 3 more (2 batches submitted ahead,
    # 1 queued), so most samples are read after the rewrite whatever the threads' timing (with batches of 4,
    # the reader could have read all 15 before it).
    it = iter(Loader(urls, 1, device="cpu", shuffle="global", seed=1, prefetch=1))
    next(it)
    for p in paths:  # every shard, so that whatever the reader opened already is rewritten too
        server.put(f"shards/{Path(p).name}", Path(p).read_bytes() + bytes(512))
    with pytest.raises(SampleError, match=r"shard-00000\d\.tar.*changed on the store"):
        for _ in it:
            pass


def test_a_window_pass_stopped_early_ends_its_reads(server, local):
    folder, paths = local
    serve(server, paths)
    server.faults.stall = 0.05  # reads still in flight when the pass stops
    loader = Loader(server.url("shards/shard-{000000..000003}.tar"), 1, device="cpu", shuffle="window",
                    shuffle_window=1, prefetch=1)
    it = iter(loader)
    next(it)
    it.close()
    assert not [t.name for t in threading.enumerate() if t.name.startswith(("gdsio-shard", "gdsio-reader"))]
